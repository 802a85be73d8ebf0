"""The kernel-sensitive subset: what each kernel must give Chassis's memory policies.

Marked ``kernel``; `tests/kernel_matrix.py` runs it under emulated kernels (seccomp, prctl, THP
modes) and `tests/kernel_vms.py` under real old kernels in a VM. Each test reads what the
running kernel grants from `kernel_env` (a direct ``madvise`` on a scratch mapping, ``prctl``,
sysfs: never from Chassis) and asserts what Chassis must do there:

* ``MADV_POPULATE_READ`` refused (Linux < 5.14): warm falls back to ``MADV_WILLNEED``,
  ``memory_stats()["populate"]`` says so, and warming still reads the file in;
* ``MADV_HUGEPAGE`` refused, THP ``never``, or a process that opted out: in memory, the first
  large store warns once (``RuntimeWarning``) and the stats say none were granted; a file asks
  and gets none; nothing else changes;
* huge pages available: an in-memory index that asks gets them, one that does not ask gets none;
* everywhere: exact searches equal NumPy brute force, balanced and local placement agree, and a
  writer killed after a flush reopens as that flush.

Each case runs in a fresh child process (the per-process state of Chassis, such as the
warn-once, starts clean there; seccomp filters and the THP opt-out are inherited). The VM tier
runs them under software emulation, where building an index costs about 40 times what it does
here: one file is built once per module (3,000 vectors of 256 dimensions, as few as a 2 MiB
huge page needs, with a cheap graph) and the children open or load it rather than build.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import kernel_env
import numpy as np
import pytest
from conftest import assert_child_ok, brute_force_knn, child_env, run_python, warm_child

pytestmark = [
    pytest.mark.kernel,
    pytest.mark.slow,  # children building indexes: a few seconds here, minutes in an emulated VM
    pytest.mark.skipif(not kernel_env.LINUX, reason="the policies under test are Linux's"),
]


@pytest.fixture(scope="module")
def kernel() -> kernel_env.Kernel:
    return kernel_env.kernel()


ROWS, DIMS = 3000, 256  # 3 MB of vectors: a store with a whole 2 MiB page in it


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The index file the children open or load: rows of `np.random.default_rng(1)`, ids 0..n.
    Graph quality does not matter here (the searches that check results are exhaustive)."""
    import chassis

    path = tmp_path_factory.mktemp("kernel") / "shared.chassis"
    x = np.random.default_rng(1).standard_normal((ROWS, DIMS), dtype=np.float32)
    options = chassis.IndexOptions(max_connections=4, ef_construction=4)
    with chassis.VectorIndex(path, DIMS, options) as w:
        w.add_batch(x)
    return path


def _child_json(code: str, *args: object, timeout: float = 300) -> dict:
    proc = run_python(code, *args, timeout=timeout)
    assert_child_ok(proc)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_variant_of_this_run_is_in_force() -> None:
    """A matrix run sets CHASSIS_KERNEL_VARIANT: the variant must hold in this process, or the
    run would pass without testing what it names."""
    variant = os.environ.get(kernel_env.ENV, "native")
    kernel_env.check_in_force(variant)


# --------------------------------------------------------------------------- warm
WARM_CHILD = warm_child(
    r"""
    import os, sys
    path = sys.argv[1]
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)
    """,
    warm_s=120,
    land_s=20,
    landed='r.memory_stats()["resident_bytes"] >= done["written_bytes"] // 2',
)


def test_warm_reads_the_file_in_with_the_advice_the_kernel_has(
    shared: Path, kernel: kernel_env.Kernel
) -> None:
    out = _child_json(WARM_CHILD, shared)
    first, done, last = out["first"], out["done"], out["last"]
    assert first["populate"] == "MADV_POPULATE_READ", first  # the first choice, before trying
    expected = "MADV_POPULATE_READ" if kernel.populate_read else "MADV_WILLNEED"
    assert done["populate"] == expected, (kernel, done)
    assert done["warm_running"] is False
    assert done["warm_done_bytes"] == done["warm_total_bytes"] == done["written_bytes"], done
    assert first["resident_bytes"] < done["written_bytes"] // 4, first  # it was evicted
    if kernel.populate_read:  # synchronous: in memory when warm says done
        assert done["resident_bytes"] >= done["written_bytes"] - 64 * 1024, done
    assert last["resident_bytes"] >= done["written_bytes"] // 2, (kernel, last)


# --------------------------------------------------------------------------- huge pages
MEMORY_CHILD = r"""
import json, sys, warnings
import numpy as np, chassis
path, ask = sys.argv[1], sys.argv[2] == "ask"
x = np.random.default_rng(1).standard_normal((3000, 256), dtype=np.float32)  # the file's rows
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    opts = chassis.IndexOptions(huge_pages=ask, max_connections=4, ef_construction=4)  # the file's
    index = chassis.VectorIndex.load(path, options=opts)  # into memory: anonymous stores
    second = chassis.VectorIndex.load(path, options=opts)  # more large stores: no second warning
found, _ = index.search_batch(x[:50], k=1, ef=len(x))  # exhaustive: each finds itself
print(json.dumps({
    "stats": index.memory_stats(),
    "warnings": [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)],
    "self_found": int((found[:, 0] == np.arange(50)).sum()),
}))
"""


@pytest.mark.parametrize("ask", ["ask", "do-not-ask"])
def test_in_memory_huge_pages_follow_the_kernel(
    shared: Path, ask: str, kernel: kernel_env.Kernel
) -> None:
    out = _child_json(MEMORY_CHILD, shared, ask)
    stats, warned = out["stats"], out["warnings"]
    assert out["self_found"] == 50, out  # searches work whatever the pages
    assert stats["backing"] == "memory"
    if ask == "do-not-ask":
        assert stats["huge_pages_asked"] is False and warned == [], out
        assert stats["huge_bytes"] == 0, (kernel, stats)  # MADV_NOHUGEPAGE, even under always
        return
    assert stats["huge_pages_asked"] is True
    if kernel.anonymous_huge_pages:
        assert warned == [] and stats["huge_pages_refused"] is False, (kernel, out)
        assert stats["huge_bytes"] >= 2 << 20, (kernel, stats)
    else:
        assert len(warned) == 1, (kernel, warned)  # once per process, not per store
        reason = warned[0]
        if not kernel.hugepage_advice:
            assert "madvise(MADV_HUGEPAGE) failed" in reason, reason
        elif kernel.thp_mode == "never":
            assert "[never]" in reason, reason
        elif kernel.thp_disabled:
            assert "PR_SET_THP_DISABLE" in reason, reason
        assert stats["huge_pages_refused"] is True and stats["huge_bytes"] == 0, (kernel, stats)


FILE_CHILD = r"""
import json, shutil, sys, warnings
import numpy as np, chassis
path = sys.argv[2]
shutil.copyfile(sys.argv[1], path)  # a writer of its own: the shared file stays as built
x = np.random.default_rng(1).standard_normal((3000, 256), dtype=np.float32)  # the file's rows
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    w = chassis.VectorIndex(path, options=chassis.IndexOptions(huge_pages=True, max_connections=4, ef_construction=4))
    w.add_batch(-x[:100])  # a batch: its build buffer asks for huge pages too
    w.flush()
    r = chassis.IndexReader(path, chassis.IndexOptions(huge_pages=True, max_connections=4, ef_construction=4))
    r.warm()
    found, _ = r.search_batch(x[:50], k=1, ef=len(x) + 100)  # exhaustive: each finds itself
    import time
    while r.memory_stats()["warm_running"]:
        time.sleep(0.01)
print(json.dumps({"writer": w.memory_stats(), "reader": r.memory_stats(),
    "warnings": [str(m.message) for m in caught], "self_found": int((found[:, 0] == np.arange(50)).sum())}))
"""


def test_a_file_that_asks_for_huge_pages_works_whatever_the_kernel_grants(
    shared: Path, tmp_path: Path, kernel: kernel_env.Kernel
) -> None:
    out = _child_json(FILE_CHILD, shared, tmp_path / "huge.chassis")
    assert out["self_found"] == 50, out
    if kernel.anonymous_huge_pages:
        assert out["warnings"] == [], out
    else:
        # The file's own request is quiet (memory_stats tells); the batch's anonymous build
        # buffer asks too, and a refusal of that is said once, as in memory.
        assert len(out["warnings"]) <= 1, out
        assert all("4 KiB pages" in w for w in out["warnings"]), out
    for side in ("writer", "reader"):
        stats = out[side]
        assert stats["backing"] == "file" and stats["huge_pages_asked"] is True, stats
        # Whatever the kernel maps on huge pages lies inside the vectors. (Not zero where
        # anonymous memory gets none: the page cache's large folios of ext4 or xfs may be
        # mapped whole under any THP mode, as seen here on Linux 6.18 with [never].)
        huge = stats["vector_huge_bytes"] or 0
        assert huge % (2 << 20) == 0 and huge <= stats["vector_bytes"], (kernel, side, stats)


# --------------------------------------------------------------------------- searching, placement
def test_exact_search_equals_brute_force(kernel: kernel_env.Kernel) -> None:
    import chassis

    rng = np.random.default_rng(3)
    base = rng.standard_normal((1500, 48), dtype=np.float32)
    queries = rng.standard_normal((20, 48), dtype=np.float32)
    options = chassis.IndexOptions(huge_pages=True, max_connections=8, ef_construction=32)
    index = chassis.VectorIndex(None, 48, options)
    index.add_batch(base)
    ids, dist = index.search_batch(queries, k=10, ef=1500)
    true_ids, true_dist = brute_force_knn(base, queries, 10, "euclidean")
    np.testing.assert_allclose(dist, true_dist, rtol=1e-4, atol=1e-4)
    assert (ids == true_ids).mean() > 0.99  # ids may swap only at near ties


def test_balanced_and_local_placement_agree() -> None:
    import chassis

    x = np.random.default_rng(4).standard_normal((17000, 16), dtype=np.float32)  # > 16,384
    results = []
    for placement in ("balanced", "local"):
        index = chassis.VectorIndex(
            None,
            16,
            chassis.IndexOptions(placement=placement, max_connections=8, ef_construction=8),
        )
        index.add_batch(x, threads=1)  # one thread: the same graph both ways
        results.append(index.search_batch(x[:100], k=5, ef=64, threads=1))
        assert index.check().ok
    np.testing.assert_array_equal(results[0][0], results[1][0])
    np.testing.assert_array_equal(results[0][1], results[1][1])


# --------------------------------------------------------------------------- a kill
KILLED_WRITER = r"""
import sys, numpy as np, chassis
path = sys.argv[1]
w = chassis.VectorIndex(path, 32)
x = np.random.default_rng(5).standard_normal((1500, 32), dtype=np.float32)
w.add_batch(x[:1000]); w.flush()
w.add_batch(x[1000:])          # never flushed
print("flushed", flush=True)
sys.stdin.readline()           # wait to be killed
"""

REOPEN = r"""
import json, sys, numpy as np, chassis
r = chassis.VectorIndex(sys.argv[1])
x = np.random.default_rng(5).standard_normal((1500, 32), dtype=np.float32)
stored = np.stack([r.get(i) for i in range(1000)])
print(json.dumps({"len": len(r), "ids": r.ids().tolist()[:3], "same": bool((stored == x[:1000]).all()),
                  "check": r.check().ok, "top": r.search(x[7], k=1)[0].id}))
"""


def test_a_writer_killed_after_a_flush_reopens_as_that_flush(tmp_path: Path) -> None:
    path = tmp_path / "killed.chassis"
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=child_env(),
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "flushed"
        time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait(timeout=60)
    assert child.returncode == -signal.SIGKILL
    out = _child_json(REOPEN, path)
    assert out == {"len": 1000, "ids": [0, 1, 2], "same": True, "check": True, "top": 7}, out
