"""A reader that opens a file before its next writer: the logs a dead writer left (its undo
log, a redo log) are applied first, as a writer's open applies them (SQLite's hot journal).

Oracles: a child writer killed (SIGKILL) with unflushed changes to linked lists; `check()`'s
checksums and reachability; exact search (ef >= len) against brute force over the flushed
rows; a file the reader may not write (`chattr +i`), which must be refused, not read.
"""

from __future__ import annotations

import os
import signal
import sys

import chassis
import numpy as np
import pytest
from conftest import IMMUTABLE_SKIP, brute_force_knn, immutable, run_python, vecs

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL")

N, D = 2000, 16

CHILD = """
import os, signal, sys, chassis
sys.path.insert(0, sys.argv[2])
from conftest import vecs
idx = chassis.VectorIndex(sys.argv[1], 16, chassis.IndexOptions(max_connections=8))
idx.add_batch(vecs(2000, 16, seed=1))
idx.user_version = 3
idx.flush()
# linked into the committed graph: committed nodes' lists change, and the undo log holds them
idx.add_batch(vecs(1000, 16, seed=2))
idx.delete_batch(range(0, 2000, 40))
idx.user_version = 4
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.fixture
def killed(index_path):
    """A file whose writer was killed with unflushed adds linked into committed lists."""
    tests = os.path.dirname(os.path.abspath(__file__))
    proc = run_python(CHILD, index_path, tests)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert os.path.getsize(index_path + ".undo") > 0, "the child left no undo log"
    return index_path


def assert_is_the_flush(idx) -> None:
    data = vecs(N, D, seed=1)
    assert len(idx) == N and idx.user_version == 3
    report = idx.check()
    assert report.ok, report
    queries = vecs(20, D, seed=9)
    truth, _ = brute_force_knn(data, queries, 10, "euclidean", ids=np.arange(N, dtype=np.uint64))
    got, _ = idx.search_batch(queries, 10, ef=N)
    np.testing.assert_array_equal(np.asarray(got), truth)


def test_a_reader_opened_first_applies_the_dead_writers_undo_log(killed):
    with pytest.warns(RuntimeWarning, match="unflushed changes were discarded"):
        reader = chassis.IndexReader(killed)
    with reader:
        assert not os.path.exists(killed + ".undo"), "the log was not applied and removed"
        assert_is_the_flush(reader)
    # and the next writer finds nothing left to put back
    with chassis.VectorIndex(killed) as writer:
        assert_is_the_flush(writer)


def test_a_reader_that_may_not_write_the_file_refuses_it(killed):
    with immutable(killed) as made:
        if not made:
            pytest.skip(IMMUTABLE_SKIP)
        with pytest.raises(chassis.CorruptIndexError, match="undo log") as caught:
            chassis.VectorIndex(killed, read_only=True)
        assert isinstance(caught.value, OSError)
        assert "open it once as a writer" in str(caught.value)
    with pytest.warns(RuntimeWarning):
        reader = chassis.IndexReader(killed)
    with reader:
        assert_is_the_flush(reader)


def test_a_live_writers_log_is_left_to_it(index_path):
    """Oracle: the writer's own flush afterwards, seen by a reader opened beside it."""
    writer = chassis.VectorIndex(index_path, D, chassis.IndexOptions(max_connections=8))
    writer.add_batch(vecs(N, D, seed=1))
    writer.flush()
    writer.add_batch(vecs(1000, D, seed=2))
    assert os.path.getsize(index_path + ".undo") > 0
    reader = chassis.IndexReader(index_path)
    assert len(reader) == N, "the reader saw the writer's unflushed rows"
    assert os.path.getsize(index_path + ".undo") > 0, "the reader took the live writer's log"
    writer.flush()
    assert len(reader) == N + 1000
    assert reader.check().ok
    reader.close()
    writer.close()
