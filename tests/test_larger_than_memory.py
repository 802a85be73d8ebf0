"""An index larger than the memory it may use: what its searches read from the disk.

A search of an index not in memory reads the pages it touches and names the next ones to the
system before it reads them; it must not read megabytes around each page (the kernel's
read-around on a fault, up to read_ahead_kb) and push out what it needs next.

Oracles:
* the kernel's own account of each mapping (VmFlags in /proc/self/smaps: `rr` is MADV_RANDOM,
  `sr` MADV_SEQUENTIAL) for the advice the index gives: none for an index that fits in memory
  (the kernel's read-around brings it in fastest), random for one that does not;
* a child process in a cgroup-v1 memory cgroup limited to a quarter of the file (root only,
  skipped otherwise), the file evicted first: the bytes it reads from the disk
  (/proc/self/io read_bytes) against a bound that a search reading around its faults breaks
  many times over, and its results against the same searches made by this process with the
  file in memory.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
import time

import chassis
import numpy as np
import pytest
from chassis import datasets
from chassis._bench import CGROUP_V1, memory_cgroup_problem
from conftest import assert_child_ok, clustered_data, run_python
from test_memory_policies import evict, wait_warm

linux = pytest.mark.skipif(sys.platform != "linux", reason="smaps, fadvise and cgroups are Linux's")


def read_bytes() -> int:
    """Bytes this process has read from the disk (/proc/self/io)."""
    for line in open("/proc/self/io"):
        if line.startswith("read_bytes:"):
            return int(line.split()[1])
    return 0


def write_index(path: str, base: np.ndarray, quantization: str | None) -> None:
    """`base` (ids 0..n) added to a new index at `path` in one batch, flushed, closed."""
    with chassis.VectorIndex(
        path, base.shape[1], chassis.IndexOptions(quantization=quantization)
    ) as ix:
        ix.add_batch(base)
        ix.flush()


def vm_flags(path: str) -> list[set[str]]:
    """VmFlags of every mapping of the file at `path` in this process (by inode: a new
    index's mappings were made under the name it was created with)."""
    out, inside = [], False
    inode = str(os.stat(path).st_ino)
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if len(head) >= 5 and "-" in head[0] and ":" in head[3]:
                inside = head[4] == inode
            elif line.startswith("VmFlags:") and inside:
                out.append(set(line.split()[1:]))
    return out


@linux
@pytest.mark.parametrize("quantization", [None, "int8", "int4"])
def test_an_index_that_fits_keeps_read_around_and_names_no_pages(tmp_path, quantization):
    # Oracles: the kernel's VmFlags (no `rr`, no `sr` after scans), memory_stats, and the same
    # queries answered once the file is in memory.
    path = str(tmp_path / "a.chassis")
    base, queries = datasets.clustered(20_000, 64, 20, seed=5)
    with chassis.VectorIndex(path, 64, chassis.IndexOptions(quantization=quantization)) as ix:
        ix.add_batch(base)
        ix.flush()
        ix.search(queries[0], 10)
        assert ix.check().corrupt == []
        ix.delete(5)
        ix.compact()
        flags = vm_flags(path)
        assert flags and all("rr" not in f and "sr" not in f for f in flags), flags
    evict(path)
    with chassis.IndexReader(path) as r:
        cold = [[h.id for h in r.search(q, 10, ef=64)] for q in queries]
        stats = r.memory_stats()
        assert stats["prefetching_pages"] is False
        assert stats["naming_pages"] is False  # the old name, kept as an alias
        assert all("rr" not in f for f in vm_flags(path))
        r.warm(wait=True)
        assert cold == [[h.id for h in r.search(q, 10, ef=64)] for q in queries]


OPEN_CHILD = r"""
import json, sys
import chassis
before = read_bytes()
r = chassis.IndexReader(sys.argv[1])
read = read_bytes() - before
q = [float(x) for x in sys.argv[2].split(",")]
print(json.dumps({"read": read, "top": r.search(q, 1)[0].id, "quantization": r.quantization}))
"""
OPEN_CHILD = inspect.getsource(read_bytes) + OPEN_CHILD


@linux
@pytest.mark.parametrize("quantization", [None, "int8", "int4"])
def test_opening_an_evicted_index_reads_its_headers_and_nothing_around_them(tmp_path, quantization):
    # Oracle: the kernel's count of bytes this fresh process read from the disk
    # (/proc/self/io). An open reads the two header copies' first pages, and the quantizer's
    # page with codes; a fault on a mapping there would read the kernel's read-around (128 KiB
    # by default, up to read_ahead_kb). Then brute force: the reader finds a stored vector.
    path = str(tmp_path / "a.chassis")
    base, _ = datasets.clustered(30_000, 64, 1, seed=9)
    write_index(path, base, quantization)
    evict(path)
    q = base[1234]
    nearest = int(np.argmin(((base - q) ** 2).sum(1)))
    proc = run_python(OPEN_CHILD, path, ",".join(map(str, q.tolist())))
    assert_child_ok(proc, "open of an evicted index")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["quantization"] == quantization
    assert out["top"] == nearest
    if out["read"] == 0:
        pytest.skip("this kernel does not count the process's reads (/proc/self/io)")
    assert out["read"] <= 32 * 1024, f"the open read {out['read']} bytes"


@linux
@pytest.mark.parametrize("quantization", [None, "int8", "int4"])
def test_warm_without_vectors_reads_what_searches_walk(tmp_path, quantization):
    # Oracle: mincore over each area (memory_stats' resident counts, checked against the
    # whole-file count the test takes itself).
    path = str(tmp_path / "a.chassis")
    base = clustered_data(20_000, 256, seed=6)
    with chassis.VectorIndex(path, 256, chassis.IndexOptions(quantization=quantization)) as ix:
        ix.add_batch(base)
        ix.flush()
    evict(path)
    with chassis.IndexReader(path) as r:
        r.warm(vectors=False)
        wait_warm(r)
        ms = r.memory_stats()
        assert ms["graph_bytes"] > 0 and ms["resident_graph_bytes"] == ms["graph_bytes"], ms
        assert ms["resident_code_bytes"] == ms["code_bytes"], ms
        assert (ms["code_bytes"] > 0) == (quantization is not None)
        # The vectors stay on disk (but for pages they share with what was read).
        assert ms["resident_vector_bytes"] < ms["vector_bytes"] // 20, ms
        assert ms["resident_bytes"] == (
            ms["resident_graph_bytes"] + ms["resident_code_bytes"] + ms["resident_vector_bytes"]
        ), ms
        r.warm()
        wait_warm(r)
        ms = r.memory_stats()
        assert ms["resident_vector_bytes"] == ms["vector_bytes"], ms


@linux
def test_warm_can_be_waited_for_with_a_bar(tmp_path):
    # Oracle: mincore (memory_stats) after the wait, and the bar's own 100%.
    path = str(tmp_path / "a.chassis")
    with chassis.VectorIndex(path, 64) as ix:
        ix.add_batch(clustered_data(20_000, 64, seed=8))
    evict(path)
    proc = run_python(
        f"""
import chassis
r = chassis.IndexReader({path!r})
r.warm(wait=True, progress=True)
ms = r.memory_stats()
print(ms["warm_running"], ms["resident_bytes"] == ms["written_bytes"])
"""
    )
    assert_child_ok(proc, "warm(wait=True)")
    assert proc.stdout.split() == ["False", "True"], proc.stdout
    assert "warming: 100%" in proc.stderr, proc.stderr


CHILD = r"""
import os, sys, json
cg = sys.argv[1]
with open(os.path.join(cg, "cgroup.procs"), "w") as f:
    f.write(str(os.getpid()))
import numpy as np, chassis
path, budget, ef = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
queries, first = np.load(sys.argv[5]), sys.argv[6]
usage = int(open(os.path.join(cg, "memory.usage_in_bytes")).read())
with open(os.path.join(cg, "memory.limit_in_bytes"), "w") as f:
    f.write(str(usage + budget))
r = chassis.IndexReader(path)
before = read_bytes()
if first == "batch":  # the first call of the process: one batch, in the order of its starts
    ids = r.search_batch(queries, 10, ef=ef)[0].tolist()
else:
    ids = [[h.id for h in r.search(q, 10, ef=ef)] for q in queries]
read = read_bytes() - before
flags = ["rr" in f for f in vm_flags(path)]
stats = r.memory_stats()
naming = stats["prefetching_pages"]
assert stats["naming_pages"] is naming  # the old name, kept as an alias
# A writer that only adds samples too: its mappings join the reader's, read at random. A
# batch it links (more rows than go to the tail unlinked) reads the graph under the limit.
w = chassis.VectorIndex(path)
w.add_batch(np.resize(queries, (100, queries.shape[1])))
wflags = ["rr" in f for f in vm_flags(path)]
w.close()
print(json.dumps({"read": read, "ids": ids, "naming": naming, "random": flags,
                  "writer_random": wflags}))
"""


# The child reads its mappings' flags with the same function as this process.
CHILD = inspect.getsource(vm_flags) + inspect.getsource(read_bytes) + CHILD


@pytest.mark.skipif(memory_cgroup_problem() is not None, reason=str(memory_cgroup_problem()))
@pytest.mark.parametrize(
    ("quantization", "first"),
    [(None, "loop"), ("int8", "loop"), ("int4", "loop"), (None, "batch"), ("int8", "batch")],
)
def test_search_under_a_quarter_of_the_file_reads_what_it_touches(tmp_path, quantization, first):
    n, dims, ef = 40_000, 128, 32
    base, queries = datasets.clustered(n, dims, 60, seed=11)
    path = str(tmp_path / "big.chassis")
    write_index(path, base, quantization)
    size = os.path.getsize(path)
    # The oracles: the exact top 10 (brute force in NumPy), and the recall of the same
    # searches with the file in memory, in this process (one candidate at a time; the child,
    # short of memory, expands several per round and may return other ids, never worse).
    d2 = (queries**2).sum(1)[:, None] - 2 * queries @ base.T + (base**2).sum(1)[None, :]
    exact = np.argsort(d2, axis=1)[:, :10]
    with chassis.IndexReader(path) as r:
        want = [[h.id for h in r.search(q, 10, ef=ef)] for q in queries]

    def recall(ids: list[list[int]]) -> float:
        return float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids, exact.tolist())]))

    evict(path)
    qfile = tmp_path / "q.npy"
    np.save(qfile, queries)
    cg = CGROUP_V1 / f"chassis-test-{os.getpid()}-{quantization}-{first}"
    cg.mkdir()
    try:
        proc = run_python(CHILD, cg, path, size // 4, ef, qfile, first, timeout=300)
        oom = (cg / "memory.oom_control").read_text()
        failcnt = int((cg / "memory.failcnt").read_text())
    finally:
        for _ in range(50):
            try:
                (cg / "memory.force_empty").write_text("0")
            except OSError:
                pass
            try:
                cg.rmdir()
                break
            except OSError:
                time.sleep(0.1)
    assert_child_ok(proc, "search under a memory limit")
    assert "oom_kill 0" in oom, oom
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert all(len(set(a)) == 10 for a in out["ids"]), out["ids"]
    assert recall(out["ids"]) >= recall(want) - 0.01, (recall(out["ids"]), recall(want))
    assert recall(want) > 0.8, recall(want)
    # Larger than the memory it may use: read at random, pages named.
    assert out["naming"] is True and out["random"] and any(out["random"]), out
    assert sum(out["writer_random"]) > sum(out["random"]), out  # the writer's own are `rr`
    assert failcnt > 0, "the limit was never reached: the test measured nothing"
    per_query = out["read"] / len(queries)
    # At ef 32 a search measures a few hundred rows of 512 bytes (or 128-byte codes) and
    # reads as many lists: a page each would be about 1-2 MiB, and most are shared or
    # cached. A fault that read around itself (read_ahead_kb: 128 KiB to 8 MiB) reads tens
    # to hundreds of MiB per query.
    assert per_query < 2 * 2**20, (
        f"{per_query / 2**20:.2f} MiB read per query (file {size >> 20} MiB)"
    )
