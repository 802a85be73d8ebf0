"""Memory policies: huge pages on request (ADR-0016) and background warm on request (ADR-0019).

Checks, each against what the kernel reports rather than what the index says of itself where
the kernel can be asked:

* huge pages: an index built by ``add_batch`` with ``huge_pages=True`` has most of its vector
  bytes mapped by huge pages (``memory_stats()["vector_huge_bytes"]``, which is FilePmdMapped of
  /proc/self/smaps); with ``huge_pages=False`` or the default ``None`` none are, even when the
  page cache holds the file in huge folios (a writer that asked built it), because the vectors
  are told MADV_NOHUGEPAGE; the graph (slot headers, level-0 lists, heap) is never on huge pages;
  a reader opened with ``IndexOptions(huge_pages=True)`` asks, and ``use_huge_pages()`` /
  ``keep_small_pages()`` turn the request on and off. The "granted" assertions are skipped only
  where the system cannot grant (not Linux, or THP set to ``never``).
* warm: on a file evicted from the page cache (fsync + POSIX_FADV_DONTNEED, checked with our own
  mincore over a fresh mapping of the whole file), ``warm()`` reads in every written byte
  (``resident_bytes == written_bytes``), and nothing else: our own mincore over the whole file
  finds no more resident than the written ranges plus the header area. The written ranges are
  computed here independently, from the region table in the file header and the segment layout
  of docs/format.md, and must add up to ``written_bytes``. ``IndexOptions(warm=True)`` starts
  the reading at open; asking again while it runs starts no second one. A ``memory_stats()``
  dict that reports the warm finished reports the residency after it (one observation, not
  fields measured at different moments).
* stop: ``close()``, and dropping the last reference, during a warm return promptly and leave
  the file part read (the thread stopped; it did not run to the end first, nor go on after).
* old kernels: in a child process under a seccomp filter that makes
  ``madvise(MADV_POPULATE_READ)`` fail with EINVAL (what Linux before 5.14 answers), warm falls
  back to MADV_WILLNEED (``memory_stats()["populate"]``) and still reads some of the file in.
* fork: a child forked while its parent warms an index closes or drops it and exits promptly
  (it has no thread to wait for); the parent's warm is unaffected.

Files are evicted with posix_fadvise(DONTNEED), which works on Linux only: those tests skip
elsewhere.
"""

from __future__ import annotations

import gc
import json
import os
import platform
import signal
import struct
import sys
import time
from pathlib import Path

import kernel_env
import numpy as np
import pytest
from chassis import IndexOptions, IndexReader, VectorIndex
from conftest import assert_child_ok, run_python, warm_child
from kernel_env import resident_bytes, resident_pages

LINUX = sys.platform.startswith("linux")
ON_LINUX = pytest.mark.skipif(
    not LINUX,
    reason="page-cache eviction (posix_fadvise DONTNEED) and mincore as used here are Linux's",
)
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
HEADER_AREA = 128 * 1024  # two header copies of 64 KiB (docs/format.md)
WARM_STEP = 8 << 20  # the warm thread's request size (src/warm.rs)
MiB = 1 << 20


# --------------------------------------------------------------------------- system helpers
def huge_pages_grantable() -> tuple[bool, str]:
    """Whether this system can put a file mapping on huge pages at all (the only reasons to
    skip the "granted" assertions)."""
    if not LINUX:
        return (
            False,
            f"huge pages for file mappings are asked with madvise on Linux only (this is {sys.platform})",
        )
    if kernel_env.thp_mode() == "never":
        return (
            False,
            "transparent huge pages are disabled on this machine (/sys/kernel/mm/transparent_hugepage/enabled: [never])",
        )
    return True, ""


def evict(path: str | os.PathLike) -> None:
    """Write back and drop the file's pages from the page cache, and check that they left.
    Every handle on the file must be closed (the kernel keeps pages someone maps)."""
    gc.collect()
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    left = resident_bytes(path)
    assert left <= PAGE, f"{path}: {left} bytes still in the page cache after POSIX_FADV_DONTNEED"


def wait_warm(index, timeout: float = 30.0) -> dict:
    """Poll memory_stats() until the warm thread is done; then a fresh memory_stats() (the
    dict that first says "done" is checked on its own by
    test_memory_stats_that_says_warm_is_done_sees_it_done)."""
    deadline = time.monotonic() + timeout
    while True:
        ms = index.memory_stats()
        if not ms["warm_running"]:
            return index.memory_stats()
        if time.monotonic() > deadline:
            pytest.fail(f"warm still running after {timeout} s: {ms}")
        time.sleep(0.002)


# --------------------------------------------------------------------------- the file, read independently
def written_file_ranges(path: str | os.PathLike) -> list[tuple[int, int]]:
    """[start, end) file offsets of what the index has written, from the newest valid header
    copy and the layout of docs/format.md: per segment its vectors, slot headers and level-0
    records up to the last committed slot (each array on a 4 KiB boundary of the segment), and
    per heap chunk its used bytes; page-rounded, as the warm thread asks for them."""
    with open(path, "rb") as f:
        raw = f.read(HEADER_AREA)
    best = None
    for copy in (0, 1):
        h = raw[copy * 65536 : (copy + 1) * 65536]
        if h[:8] != b"CHASSIS\x1a":
            continue
        seq = struct.unpack_from("<Q", h, 16)[0]
        if best is None or seq > best[0]:
            best = (seq, h)
    assert best is not None, f"{path}: no header copy with the magic"
    h = best[1]
    dims, precision, m = (
        struct.unpack_from("<I", h, 24)[0],
        h[29],
        struct.unpack_from("<I", h, 32)[0],
    )
    slots = struct.unpack_from("<Q", h, 48)[0]
    nreg = struct.unpack_from("<I", h, 88)[0]
    vec_bytes = dims * (4 if precision == 1 else 2)
    stride = (
        -(-vec_bytes // 64) * 64 if vec_bytes >= 64 else max(4, 1 << (vec_bytes - 1).bit_length())
    )
    l0b = (2 + 2 * m) * 4

    def up(x: int, a: int) -> int:
        return -(-x // a) * a

    def layout(s: int) -> tuple[int, int, int]:
        headers = up(s * stride, 4096)
        l0 = up(headers + s * 32, 4096)
        return headers, l0, up(l0 + s * l0b, 64 * 1024)

    out: list[tuple[int, int]] = []
    seg_slots, first, k = 0, 0, 0
    for i in range(nreg):
        kind, used, offset, length = struct.unpack_from("<IIQQ", h, 128 + 24 * i)
        if kind == 1:  # segment: 1024 << k slots, until the cap (then constant)
            s = 1024 << k
            if layout(s)[2] != length:
                s = seg_slots
            assert layout(s)[2] == length, f"segment {k}: length {length} fits no slot count"
            seg_slots, k = s, k + 1
            n = max(0, min(s, slots - first))
            first += s
            if n:
                headers, l0, _ = layout(s)
                for start, size in ((0, n * stride), (headers, n * 32), (l0, n * l0b)):
                    out.append((offset + start, offset + start + size))
        elif kind == 2 and used:
            out.append((offset, offset + used))
    pages = [(a // PAGE * PAGE, up(b, PAGE)) for a, b in out]
    return sorted(pages)


def ranges_mask(ranges: list[tuple[int, int]], npages: int) -> np.ndarray:
    mask = np.zeros(npages, dtype=bool)
    for a, b in ranges:
        mask[a // PAGE : b // PAGE] = True
    return mask


def describe_runs(mask: np.ndarray, limit: int = 8) -> str:
    """'[start, end) n KiB' for the first runs of True in a page mask."""
    idx = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(np.int8), [0]])))
    runs = list(zip(idx[::2], idx[1::2]))
    text = ", ".join(
        f"[{a * PAGE:#x}, {b * PAGE:#x}) {(b - a) * PAGE // 1024} KiB" for a, b in runs[:limit]
    )
    return text + (f", ... ({len(runs)} runs)" if len(runs) > limit else "")


# --------------------------------------------------------------------------- data
def random_vectors(n: int, d: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((n, d), dtype=np.float32)


def build(
    path: str,
    n: int,
    d: int,
    *,
    huge_pages: bool | None = None,
    m: int = 8,
    efc: int = 24,
    seed: int = 0,
    keep_open: bool = False,
):
    """An index of n random vectors built by one add_batch and flushed. Returns the open
    writer (keep_open) or None after closing it."""
    index = VectorIndex(
        path, d, IndexOptions(max_connections=m, ef_construction=efc, huge_pages=huge_pages)
    )
    index.add_batch(random_vectors(n, d, seed))
    index.flush()
    if keep_open:
        return index
    index.close()
    return None


# =========================================================================== huge pages (ADR-0016)
def assert_graph_small(ms: dict, what: str) -> None:
    assert ms["graph_huge_bytes"] == 0, f"{what}: slot headers / lists / heap on huge pages: {ms}"


def assert_vectors_on_huge_pages(ms: dict, grantable: bool, what: str) -> None:
    """Most vector bytes on huge pages where the system grants them, the graph never."""
    if LINUX:
        assert_graph_small(ms, what)
    if grantable:
        share = ms["vector_huge_bytes"] / ms["vector_bytes"]
        assert share > 0.5, (
            f"{what}: only {ms['vector_huge_bytes'] / MiB:.0f} of "
            f"{ms['vector_bytes'] / MiB:.0f} MiB of vectors ({share:.0%}) on huge pages: {ms}"
        )


@pytest.mark.slow
def test_batch_built_index_is_on_huge_pages_when_asked(tmp_path):
    """huge_pages=True: most vector bytes on huge pages from the batch itself, the graph never;
    readers of the same (cached) file: on huge pages when they ask, never when they don't."""
    grantable, why = huge_pages_grantable()
    path = str(tmp_path / "huge.chassis")
    n, d = 48_000, 384
    w = build(path, n, d, huge_pages=True, keep_open=True)
    ms = w.memory_stats()
    assert ms["huge_pages_asked"] is True
    assert ms["vector_bytes"] >= n * d * 4
    assert_vectors_on_huge_pages(ms, grantable, "writer that asked, after add_batch")
    w.close()

    # The page cache now holds the vectors in huge folios. A reader that does not ask must not
    # map them with huge pages (MADV_NOHUGEPAGE); one that asks does.
    queries = random_vectors(300, d, seed=7)
    for hp in (False, None):
        with IndexReader(path, IndexOptions(huge_pages=hp)) as r:
            r.search_batch(queries, 10, ef=64)
            ms = r.memory_stats()
            assert ms["huge_pages_asked"] is False, f"reader huge_pages={hp}: {ms}"
            if LINUX:
                assert ms["vector_huge_bytes"] == 0, (
                    f"reader huge_pages={hp} maps vectors with huge pages: {ms}"
                )
                assert_graph_small(ms, f"reader huge_pages={hp}")
    with IndexReader(path, IndexOptions(huge_pages=True)) as r:
        r.warm()  # touch every written page through the reader's mappings
        ms = wait_warm(r)
        assert ms["huge_pages_asked"] is True
        assert_vectors_on_huge_pages(ms, grantable, "reader that asked")
    if not grantable:
        pytest.skip(f"huge pages requested but not checked as granted: {why}")


@pytest.mark.parametrize("hp", [False, None], ids=["huge_pages=False", "default"])
def test_no_huge_pages_unless_asked(tmp_path, hp):
    path = str(tmp_path / "small.chassis")
    w = build(path, 12_000, 384, huge_pages=hp, keep_open=True)
    ms = w.memory_stats()
    assert ms["huge_pages_asked"] is False, ms
    assert ms["vector_bytes"] >= 12_000 * 384 * 4
    if LINUX:
        assert ms["vector_huge_bytes"] == 0, f"huge_pages={hp}: vectors on huge pages: {ms}"
        assert_graph_small(ms, f"writer huge_pages={hp}")
    # the request can be turned on and off after opening, on a writer and on a reader
    w.use_huge_pages()
    assert w.memory_stats()["huge_pages_asked"] is True
    w.keep_small_pages()
    assert w.memory_stats()["huge_pages_asked"] is False
    w.close()
    with IndexReader(path, IndexOptions(huge_pages=hp)) as r:
        assert r.memory_stats()["huge_pages_asked"] is False
        r.use_huge_pages()
        ms = r.memory_stats()
        assert ms["huge_pages_asked"] is True
        if LINUX:
            assert_graph_small(ms, "reader after use_huge_pages()")
        r.keep_small_pages()
        assert r.memory_stats()["huge_pages_asked"] is False


def test_reader_asking_reports_it(tmp_path):
    path = str(tmp_path / "r.chassis")
    build(path, 2_000, 64)
    with IndexReader(path, IndexOptions(huge_pages=True)) as r:
        ms = r.memory_stats()
        assert ms["huge_pages_asked"] is True
        assert ms["warm_running"] is False and ms["warm_total_bytes"] == 0  # no warm unless asked
    with IndexReader(path) as r:
        assert r.memory_stats()["huge_pages_asked"] is False


# =========================================================================== warm (ADR-0019)
@ON_LINUX
def test_warm_reads_exactly_the_written_ranges(tmp_path):
    path = str(tmp_path / "warm.chassis")
    build(path, 20_000, 256, m=8, efc=32)
    ranges = written_file_ranges(path)
    size = os.path.getsize(path)
    npages = -(-size // PAGE)
    written_mask = ranges_mask(ranges, npages)
    evict(path)

    with IndexReader(path) as r:
        before = r.memory_stats()
        assert before["warm_running"] is False and before["warm_total_bytes"] == 0
        # the independent reading of the layout agrees with what the index will read
        assert int(written_mask.sum()) * PAGE == before["written_bytes"], (
            f"written ranges from the header: {int(written_mask.sum()) * PAGE} bytes; "
            f"memory_stats written_bytes: {before['written_bytes']}"
        )
        assert before["resident_bytes"] < before["written_bytes"] // 4, f"not evicted? {before}"
        r.warm()
        ms = wait_warm(r)
        assert ms["populate"] == "MADV_POPULATE_READ", ms  # Linux >= 5.14 without a filter
        assert ms["warm_total_bytes"] == ms["written_bytes"], ms
        assert ms["warm_done_bytes"] == ms["warm_total_bytes"], ms
        res = resident_pages(path)
        missing = written_mask & ~res
        assert ms["written_bytes"] - PAGE <= ms["resident_bytes"] <= ms["written_bytes"], (
            f"warm done, but only {ms['resident_bytes']} of {ms['written_bytes']} written bytes resident; "
            f"not in memory (file offsets): {describe_runs(missing)}; {ms}"
        )
        # Nothing but the written ranges (and the header area, which opening reads) came in:
        # the holes of the sparse file (alignment padding, unused slot capacity) were not read.
        header_mask = np.zeros(npages, dtype=bool)
        header_mask[: HEADER_AREA // PAGE] = True
        extra = res & ~written_mask & ~header_mask
        slack = 16 * PAGE
        total = int(res.sum()) * PAGE
        assert total <= ms["written_bytes"] + HEADER_AREA + slack, (
            f"after warm, {total / MiB:.1f} MiB of the {size / MiB:.1f} MiB file are in memory, for "
            f"{ms['written_bytes'] / MiB:.1f} MiB written: {int(extra.sum()) * PAGE / MiB:.1f} MiB of holes "
            f"were read: {describe_runs(extra)}"
        )
        assert not missing.any(), (
            f"written pages not in memory after warm: {describe_runs(missing)}"
        )


@pytest.mark.slow
@ON_LINUX
def test_memory_stats_that_says_warm_is_done_sees_it_done(tmp_path):
    """The dict is one observation: when it reports the warm finished (warm_running False,
    done == total), its resident_bytes were measured after that, so they include everything
    the warm read. Several evict + warm rounds, each polled as fast as it goes."""
    path = str(tmp_path / "stats.chassis")
    build(path, 20_000, 256, m=8, efc=16)
    bad = []
    for round_ in range(8):
        evict(path)
        with IndexReader(path) as r:
            r.warm()
            deadline = time.monotonic() + 30
            while True:
                ms = r.memory_stats()
                if not ms["warm_running"] or time.monotonic() > deadline:
                    break
            assert not ms["warm_running"], f"warm still running after 30 s: {ms}"
            assert ms["warm_done_bytes"] == ms["warm_total_bytes"] == ms["written_bytes"], ms
            if ms["resident_bytes"] < ms["written_bytes"] - PAGE:
                fresh = r.memory_stats()
                bad.append(
                    f"round {round_}: said done with resident {ms['resident_bytes']} of "
                    f"{ms['written_bytes']}; asked again at once: {fresh['resident_bytes']}"
                )
    assert not bad, (
        "memory_stats() reported the warm done together with a residency measured "
        "before it finished:\n" + "\n".join(bad)
    )


@pytest.fixture(scope="module")
def big_index(tmp_path_factory):
    """A file with ~500 MB written (64,000 x 2,048 float32; a sparse graph, M=2, is enough
    here), closed, and how long a full warm of it takes from disk."""
    path = str(tmp_path_factory.mktemp("memory") / "big.chassis")
    build(path, 64_000, 2048, huge_pages=False, m=2, efc=4, seed=3)
    evict(path)
    with IndexReader(path) as r:
        t0 = time.perf_counter()
        r.warm()
        ms = wait_warm(r, timeout=120)
        seconds = time.perf_counter() - t0
    return {"path": path, "written": ms["written_bytes"], "full_warm_seconds": seconds}


def start_warm_caught_running(path: str, opts: IndexOptions | None = None, attempts: int = 5):
    """Evict the file, open a reader and start a warm; return (reader, stats) taken while the
    warm is under way (0 < done < total), retrying from a fresh eviction if the disk was too
    fast to catch it. Fails (does not skip) when it never could: the test would prove nothing."""
    last = None
    for _ in range(attempts):
        evict(path)
        r = IndexReader(path, opts)
        if not (opts and opts.warm):
            r.warm()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            ms = r.memory_stats()
            last = ms
            if not ms["warm_running"]:
                break
            if 0 < ms["warm_done_bytes"] < ms["warm_total_bytes"]:
                return r, ms
        r.close()
        del r
        gc.collect()
    pytest.fail(
        f"could not observe a warm under way in {attempts} attempts (disk too fast for this file?): {last}"
    )


@pytest.mark.slow
@ON_LINUX
def test_warm_option_starts_at_open_and_asking_again_does_not_restart(big_index):
    """Oracle: warm()'s answer (whether it started a pass), asked at once after the open
    started one on the evicted file, and the pass's own progress counter, which a second pass
    would start again at 0. (Catching the pass under way with memory_stats() first, whose
    residency scan is slow on a loaded machine, let the pass finish before warm() was asked.)"""
    path = big_index["path"]
    for _ in range(5):
        evict(path)
        r = IndexReader(path, IndexOptions(warm=True))
        try:
            started = r.warm()
            again = r.warm()
            ms1 = r.memory_stats()
            if started:
                # the open's pass was already done (the eviction did not take): all it read is
                # in memory, and a new pass is right; try again
                assert ms1["resident_bytes"] >= ms1["written_bytes"] - PAGE, ms1
                continue
            assert not again, "a second ask while the pass runs started another"
            assert ms1["warm_total_bytes"] == big_index["written"], ms1
            assert ms1["warm_running"] or ms1["warm_done_bytes"] == ms1["warm_total_bytes"], ms1
            ms2 = wait_warm(r, timeout=60)
            assert ms2["warm_done_bytes"] >= ms1["warm_done_bytes"], (
                f"progress went back: a new warm started? {ms1} -> {ms2}"
            )
            assert ms2["warm_done_bytes"] == ms2["warm_total_bytes"] == big_index["written"], ms2
            assert ms2["resident_bytes"] >= ms2["written_bytes"] - PAGE, ms2
            # once done, asking again reads what the index holds then: a new pass
            assert r.warm(), "asked after the pass finished, warm() started none"
            ms3 = wait_warm(r, timeout=60)
            assert ms3["warm_total_bytes"] == ms3["written_bytes"], ms3
            return
        finally:
            r.close()
    pytest.fail("the open's pass was always done before warm() was asked (eviction failed?)")


@pytest.mark.slow
@ON_LINUX
@pytest.mark.parametrize("how", ["close", "drop"])
def test_stopping_a_warm_stops_its_reading(big_index, how):
    path, written = big_index["path"], big_index["written"]
    r, ms = start_warm_caught_running(path)
    assert ms["warm_done_bytes"] < ms["warm_total_bytes"] == written
    t0 = time.perf_counter()
    if how == "close":
        r.close()
        assert r.closed
    else:
        del r
        gc.collect()
    seconds = time.perf_counter() - t0
    after = resident_bytes(path)
    print(
        f"{how} during a warm: {seconds:.2f} s (a full warm: {big_index['full_warm_seconds']:.2f} s)"
    )
    # Not a timed check: the oracle is what is in memory. The thread stopped before reading
    # everything (it did not run on to the end before the call returned) ...
    assert after < written - WARM_STEP, (
        f"after {how}, {after / MiB:.0f} of {written / MiB:.0f} MiB written are in memory: the warm ran to "
        f"the end instead of stopping (caught at {ms['warm_done_bytes'] / MiB:.0f} MiB)"
    )
    # ... and it is not still reading after the call returned.
    time.sleep(max(0.3, 2 * big_index["full_warm_seconds"]))
    later = resident_bytes(path)
    assert later <= after + PAGE * 16, (
        f"after {how}: resident grew from {after} to {later}: the warm thread is still running"
    )


# =========================================================================== old kernels
SECCOMP_CHILD = warm_child(
    r"""
    import sys
    sys.path.insert(0, sys.argv[2])
    import kernel_env  # the seccomp filter of the kernel matrix's no-populate-read variant
    kernel_env.apply_in_process("no-populate-read")  # and checks that madvise(22) gets EINVAL
    path = sys.argv[1]
    """,
    warm_s=30,
    land_s=5,
    landed='r.memory_stats()["resident_bytes"] > first["resident_bytes"]',
)


@pytest.mark.skipif(
    not LINUX or platform.machine() != "x86_64",
    reason="the seccomp filter is written for x86_64 Linux (madvise = syscall 28, AUDIT_ARCH_X86_64)",
)
def test_warm_falls_back_to_willneed_without_populate_read(tmp_path):
    path = str(tmp_path / "old.chassis")
    build(path, 20_000, 256, m=8, efc=16)
    evict(path)
    proc = run_python(SECCOMP_CHILD, path, Path(__file__).parent, timeout=120)
    assert_child_ok(proc, "warm under a seccomp filter refusing MADV_POPULATE_READ")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    first, done, last = out["first"], out["done"], out["last"]
    assert first["populate"] == "MADV_POPULATE_READ", first  # the first choice, before trying
    assert done["populate"] == "MADV_WILLNEED", f"no fallback after EINVAL: {done}"
    assert done["warm_running"] is False, done
    assert done["warm_done_bytes"] == done["warm_total_bytes"] == done["written_bytes"], done
    assert last["resident_bytes"] > first["resident_bytes"], (
        f"MADV_WILLNEED read nothing in: {first} -> {last}"
    )


# =========================================================================== fork
@pytest.mark.slow
@ON_LINUX
@pytest.mark.parametrize("how", ["close", "drop"])
def test_forked_child_drops_a_warming_index_and_exits(big_index, how):
    path = big_index["path"]
    r, ms = start_warm_caught_running(path)
    try:
        pid = os.fork()
        if pid == 0:  # the child: no warm thread here; dropping must not wait for one
            code = 1
            try:
                if how == "close":
                    r.close()
                else:
                    del r
                    gc.collect()
                code = 0
            finally:
                os._exit(code)
        deadline = time.monotonic() + 10
        status = None
        while time.monotonic() < deadline:
            got, status = os.waitpid(pid, os.WNOHANG)
            if got == pid:
                break
            time.sleep(0.01)
        else:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"the forked child did not exit within 10 s after {how} (killed it)")
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"child status {status:#x}"
        # the parent's own warm was not disturbed by the child's
        done = wait_warm(r, timeout=60)
        assert done["warm_done_bytes"] == done["warm_total_bytes"] == big_index["written"], done
        assert done["resident_bytes"] >= done["written_bytes"] - PAGE, done
    finally:
        r.close()


RELEASE_CHILD = r"""
import json, os, sys
import numpy as np
import chassis

path, n, d = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
data = np.random.default_rng(5).standard_normal((n, d)).astype(np.float32)
index = chassis.VectorIndex(path, d)
index.add_batch(data)
index.flush()
# What this process maps of the file now: the Rss lines of every mapping of its inode (the
# mappings carry the name the file was created under before it was renamed into place).
inode, rss, ours = str(os.stat(path).st_ino), 0, False
with open("/proc/self/smaps") as f:
    for line in f:
        head = line.split()
        if len(head) >= 5 and "-" in head[0] and ":" in head[3]:
            ours = head[4] == inode
        elif head and head[0] == "Rss:" and ours:
            rss += int(head[1]) * 1024
index.close()
print(json.dumps({"rss": rss}))
"""


@ON_LINUX  # and /proc/self/smaps; elsewhere the vectors are not let go of
def test_a_batch_linked_on_the_half_copy_lets_go_of_the_vectors_and_keeps_them(tmp_path):
    """Oracles: the same batch linked on the file's vectors (CHASSIS_HALF_COPY=0) in another
    child, whose mapping of the file holds every vector page; and the input itself, read back
    bit for bit by a reader in this process after the file left the page cache."""
    n, d = 3000, 384
    rss = {}
    for half in ("0", "1"):
        path = tmp_path / f"h{half}.chassis"
        proc = run_python(RELEASE_CHILD, path, n, d, env={"CHASSIS_HALF_COPY": half})
        assert_child_ok(proc, f"build with CHASSIS_HALF_COPY={half}")
        rss[half] = json.loads(proc.stdout.strip().splitlines()[-1])["rss"]
    vector_bytes = n * d * 4
    assert rss["0"] >= vector_bytes, rss  # linked on the file: every vector page is mapped
    assert rss["0"] - rss["1"] >= 0.9 * vector_bytes, (
        f"linked on the half copy, the process still maps {rss['1']} bytes of the file "
        f"against {rss['0']} linked on the file ({vector_bytes} bytes of vectors)"
    )
    data = np.random.default_rng(5).standard_normal((n, d)).astype(np.float32)
    path = tmp_path / "h1.chassis"
    evict(path)
    with IndexReader(path) as r:
        assert len(r) == n
        got = np.stack([r.get(i) for i in range(n)])
        assert np.array_equal(got.view(np.uint32), data.view(np.uint32))
        report = r.check()
        assert report.ok, report
