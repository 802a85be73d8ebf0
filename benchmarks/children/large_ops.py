"""Child of bench_scale.py --only alone: the long operations on one large index, timed in this
fresh process; print one JSON line.

    python benchmarks/children/large_ops.py STEP PATH [ARGS]

STEP is one of:
  warm    PATH             open a reader on the (evicted) file, warm(wait=True) it; the open, the
                           warm, the resident bytes after (memory_stats), and the mappings
                           (/proc/self/maps lines: all, and of the index file) against
                           vm.max_map_count
  check   PATH             open a reader, check(): its time and verdict
  compact PATH FRACTION    open the writer, delete every id whose rank in ids() is a multiple of
                           1/FRACTION (10: a tenth), flush, then compact(threads=2): the deletes,
                           the flush, the compaction, the file's size before and after and the
                           vectors left
"""

from __future__ import annotations

import json
import os
import sys
import time

import chassis


def mappings(path: str) -> tuple[int, int]:
    """(lines of /proc/self/maps, of them the mappings of `path`)."""
    real = os.path.realpath(path)
    total = mine = 0
    with open("/proc/self/maps") as f:
        for line in f:
            total += 1
            if line.rstrip().endswith(real):
                mine += 1
    return total, mine


def main() -> None:
    step, path = sys.argv[1], sys.argv[2]
    out: dict[str, object] = {"step": step}
    if step == "warm":
        t0 = time.perf_counter()
        index = chassis.VectorIndex(path, read_only=True)
        out["open_ms"] = (time.perf_counter() - t0) * 1e3
        maps, mine = mappings(path)
        t0 = time.perf_counter()
        index.warm(wait=True)
        out["warm_s"] = time.perf_counter() - t0
        stats = index.memory_stats()
        out["resident_mib"] = {
            k: v / 2**20 for k, v in stats.items() if k.startswith("resident") and v is not None
        }
        with open("/proc/sys/vm/max_map_count") as f:
            max_map = int(f.read())
        out.update(maps=maps, index_maps=mine, max_map_count=max_map, vectors=len(index))
        index.close()
    elif step == "check":
        index = chassis.VectorIndex(path, read_only=True)
        t0 = time.perf_counter()
        verdict = index.check()
        out["check_s"] = time.perf_counter() - t0
        out["check_ok"] = bool(verdict.ok)
        index.close()
    elif step == "compact":
        fraction = int(sys.argv[3])
        index = chassis.VectorIndex(path)
        out["size_before_mib"] = os.path.getsize(path) / 2**20
        ids = index.ids()[::fraction]
        t0 = time.perf_counter()
        for i in ids.tolist():
            index.delete(i)
        out["delete_s"] = time.perf_counter() - t0
        out["deleted"] = len(ids)
        t0 = time.perf_counter()
        index.flush()
        out["flush_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        index.compact(threads=2)
        out["compact_s"] = time.perf_counter() - t0
        out["size_after_mib"] = os.path.getsize(path) / 2**20
        out["vectors_after"] = len(index)
        index.close()
    else:
        raise SystemExit(f"unknown step {step!r}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
