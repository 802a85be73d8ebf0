"""Corners found by the fault and crafted-input campaigns and by trying Chassis as a new user
would, each kept as the test that would have caught it:

- `save` / `backup` never replace a file under a live writer, nor a file that is not an index
  unless asked (oracle: the other writer's next flush survives a reopen in a fresh process;
  the bytes of the other file are unchanged);
- space reserved for slots that were never committed is given back at rollback, after a
  cancelled or failed batch, and when a writer reopens after a kill (oracle: the file's blocks
  on disk, from `os.stat`);
- bad ids, sets of ids, NUL bytes in paths and negative options get the typed error that names
  what was wrong (oracle: the exception class and its message).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import chassis
import numpy as np
import pytest
from chassis.exceptions import (
    IndexLockedError,
    InvalidArgumentError,
    InvalidPathError,
    NotAnIndexError,
)


def disk_bytes(path) -> int:
    return os.stat(path).st_blocks * 512


def rows(n: int, d: int = 32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, d), dtype=np.float32)


# --------------------------------------------------------------------------- save and backup
@pytest.mark.parametrize("how", ["save_in_memory", "backup", "save_file_backed"])
def test_a_file_held_by_a_writer_is_never_replaced(tmp_path, how):
    target = tmp_path / "e.chassis"
    writer = chassis.VectorIndex(target, 32)
    writer.add_batch(rows(50))
    writer.flush()
    if how == "save_in_memory":
        other = chassis.VectorIndex(None, 32)
    else:
        other = chassis.VectorIndex(tmp_path / "other.chassis", 32)
    other.add_batch(rows(10, seed=1))
    call = other.backup if how == "backup" else other.save
    for overwrite in (False, True):
        with pytest.raises(IndexLockedError, match="open for writing"):
            call(target, overwrite=overwrite)
    # The writer's next flush is still the file at the path (a fresh process reads it).
    writer.add_batch(rows(5, seed=2))
    writer.flush()
    writer.close()
    other.close()
    with chassis.IndexReader(target) as r:
        assert len(r) == 55


def test_a_file_that_is_not_an_index_is_replaced_only_when_asked(tmp_path):
    precious = tmp_path / "precious.npy"
    np.save(precious, np.arange(10))
    before = precious.read_bytes()
    index = chassis.VectorIndex(None, 32)
    index.add_batch(rows(20))
    with pytest.raises(NotAnIndexError, match="not a Chassis index") as info:
        index.save(precious)
    assert isinstance(info.value, ValueError) and "overwrite=True" in str(info.value)
    assert precious.read_bytes() == before
    index.save(precious, overwrite=True)
    with chassis.IndexReader(precious) as r:
        assert len(r) == 20
    # An index no writer holds, a missing path and an empty file are replaced as before.
    empty = tmp_path / "empty.chassis"
    empty.touch()
    for dest in (precious, tmp_path / "new.chassis", empty):
        index.save(dest)
        with chassis.IndexReader(dest) as r:
            assert len(r) == 20


# --------------------------------------------------------------------------- space given back
def writer_with_1000_flushed(path) -> chassis.VectorIndex:
    """A writer of a new 256-dimension file whose first 1,000 rows are flushed."""
    index = chassis.VectorIndex(path, 256)
    index.add_batch(rows(1000, 256))
    index.flush()
    return index


@pytest.mark.slow
def test_rollback_gives_back_the_space_of_what_was_never_committed(tmp_path):
    path = tmp_path / "e.chassis"
    with writer_with_1000_flushed(path) as index:
        flushed = disk_bytes(path)
        index.add_batch(rows(20_000, 256, seed=1), threads=2)
        grown = disk_bytes(path)
        assert grown > flushed + 15_000 * 1024, (flushed, grown)
        index.rollback()
        given_back = disk_bytes(path)
        assert given_back < flushed + 4 * 2**20, (flushed, grown, given_back)
        # Adds after the rollback still work and are durable.
        index.add_batch(rows(100, 256, seed=2))
        index.flush()
    with chassis.IndexReader(path) as r:
        assert len(r) == 1100
        # Nothing damaged where the holes were punched. (`unreachable` is not asked: a small
        # batch after a large one can leave a node the pruning cut off, with or without the
        # rollback; the repair pass runs after large batches only.)
        report = r.check()
        assert report.corrupt == [] and report.not_finite == []


@pytest.mark.slow
def test_a_writer_reopening_after_a_kill_gives_back_the_dead_writers_reservations(tmp_path):
    path = tmp_path / "e.chassis"
    writer_with_1000_flushed(path).close()
    flushed_disk, flushed_size = disk_bytes(path), os.path.getsize(path)
    script = textwrap.dedent(
        f"""
        import os, numpy as np, chassis
        index = chassis.VectorIndex({str(path)!r})
        index.add_batch(np.random.default_rng(1).standard_normal((30_000, 256), dtype=np.float32))
        os.kill(os.getpid(), 9)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert disk_bytes(path) > flushed_disk + 20_000 * 1024
    assert os.path.getsize(path) > flushed_size
    with chassis.VectorIndex(path) as index:
        assert len(index) == 1000
        assert disk_bytes(path) < flushed_disk + 4 * 2**20
        assert os.path.getsize(path) == flushed_size  # the regions it never committed are cut
        assert index.check().ok


@pytest.mark.slow
def test_ctrl_c_in_a_large_batch_gives_back_its_space(tmp_path):
    path = tmp_path / "e.chassis"
    writer_with_1000_flushed(path).close()
    flushed = disk_bytes(path)
    script = textwrap.dedent(
        f"""
        import os, signal, threading, numpy as np, chassis
        # A shell without job control starts background commands with SIGINT ignored, and
        # Python then installs no handler: put the default one back.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        index = chassis.VectorIndex({str(path)!r})
        rows = np.random.default_rng(1).standard_normal((200_000, 256), dtype=np.float32)
        threading.Timer(1.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        try:
            index.add_batch(rows, threads=2)
            print("finished")
        except KeyboardInterrupt:
            print("interrupted", os.stat({str(path)!r}).st_blocks * 512, len(index))
        index.close()
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    word, blocks, count = proc.stdout.split()
    assert word == "interrupted" and int(count) == 1000
    # Given back at once (while the writer is still open), not at the next compact.
    assert int(blocks) < flushed + 4 * 2**20, (flushed, int(blocks))
    with chassis.IndexReader(path) as r:
        assert len(r) == 1000 and r.check().ok


def test_a_writer_on_the_older_header_copy_forgets_the_lost_commits_links(tmp_path):
    path = tmp_path / "e.chassis"
    with chassis.VectorIndex(path, 16) as index:
        index.add_batch(rows(500, 16))
        index.flush()
        index.add_batch(rows(1500, 16, seed=1))
        index.flush()
    # Damage the body of the newer header copy: its checksum fails, the older one is used.
    data = bytearray(path.read_bytes())
    seq = [int.from_bytes(data[c * 65536 + 16 : c * 65536 + 24], "little") for c in (0, 1)]
    newer = 0 if seq[0] > seq[1] else 1
    data[newer * 65536 + 48] ^= 0xFF  # a byte of its slot count
    path.write_bytes(bytes(data))
    with pytest.warns(RuntimeWarning, match=f"header copy {newer} is damaged"):
        index = chassis.VectorIndex(path)
    with index:
        assert len(index) == 500
        report = index.check()
        # The 500 committed nodes' links into the 1,500 lost ones are gone, not "corrupt".
        assert report.corrupt == [] and report.not_finite == [], report
        found = index.search(rows(1, 16, seed=5)[0], k=10, ef=500)
        assert all(h.id < 500 for h in found) and len(found) == 10


# --------------------------------------------------------------------------- typed errors
def test_ids_sets_and_out_of_range_ids_are_named(tmp_path):
    index = chassis.VectorIndex(None, 8)
    index.add_batch(rows(100, 8))
    q = rows(1, 8)[0]
    as_set = index.search(q, k=5, allowed={1, 2, 3})
    assert {h.id for h in as_set} <= {1, 2, 3} and len(as_set) == 3
    assert {h.id for h in index.search(q, k=5, excluded=frozenset(range(50)))}.isdisjoint(range(50))
    with pytest.raises(InvalidArgumentError, match=r"id 18446744073709551616 \(position 1\)"):
        index.add_batch(rows(2, 8), ids=[9000, 2**64])
    # Sets of Python ints are read directly; anything else in a set is read as before.
    # Oracle: the same ids as a NumPy array.
    pick = {int(i) for i in np.random.default_rng(3).choice(100, 40, replace=False)}
    for ids in (pick, frozenset(pick)):
        got, _ = index.search_batch(rows(5, 8, seed=2), 10, allowed=ids, ef=100)
        want, _ = index.search_batch(rows(5, 8, seed=2), 10, allowed=np.array(sorted(pick)), ef=100)
        np.testing.assert_array_equal(got, want)
    assert index.delete_batch({1, 2, np.int64(3)}) == 3  # a NumPy int: read through NumPy
    with pytest.raises(InvalidArgumentError, match="negative"):
        index.search(q, k=5, allowed={4, -1})
    with pytest.raises(InvalidArgumentError, match="out of range"):
        index.search(q, k=5, allowed={4, 2**64})
    with pytest.raises(chassis.ArgumentTypeError, match="not an integer"):
        index.search(q, k=5, allowed={4, "5"})
    with pytest.raises(InvalidArgumentError, match="out of range"):
        index.delete(-1)
    with pytest.raises(InvalidArgumentError, match="out of range"):
        index.get(-1)


def test_a_nul_byte_in_a_path_and_a_negative_option_are_named(tmp_path):
    with pytest.raises(InvalidPathError, match="NUL") as info:
        chassis.VectorIndex(str(tmp_path / "a\0b.chassis"), 8)
    assert isinstance(info.value, OSError)
    with pytest.raises(InvalidArgumentError, match="ef_construction=-1"):
        chassis.IndexOptions(ef_construction=-1).validate()
