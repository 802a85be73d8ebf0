"""Power loss after small flushes: the redo log brings the file back to exactly the last flush.

A small flush (a few adds or deletes) makes its commit durable with one record in
``<path>.redo`` and one sync; the index file's pages reach the disk later. After a power loss
the file holds its last checkpoint plus whatever pages the kernel wrote back, in any order.
These tests play that: a writer child makes a checkpoint (a batch and its flush: the file then,
``A``), then small flushes (the file after them, ``B``, and the log ``R``), and is killed.
The file is then overwritten in place (same inode, as the disk would hold it) with ``A``, with
``A`` plus a random half of ``B``'s pages, or with ``B``, and the log put back; processes that
play the next boot (``CHASSIS_BOOT_ID``) open it.

Oracles: the vectors the child added (regenerated from its seed) for ids and bit-identical
``get``; the bytes of ``B`` for the whole recovered file; brute-force k-NN over the expected
vectors; a reader before any writer must refuse a file that lacks the log's bytes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import (
    IMMUTABLE_SKIP,
    assert_bit_identical,
    assert_child_ok,
    child_env,
    dump_index,
    immutable,
    run_python,
)

pytestmark = pytest.mark.skipif(
    not Path("/proc/sys/kernel/random/boot_id").exists(),
    reason="the redo log is written only where the machine's boot is known (Linux)",
)

D = 16
WRITER = """
import sys
import numpy as np
import chassis

path = sys.argv[1]
x = np.random.default_rng(5).standard_normal((3000, 16)).astype(np.float32)
ix = chassis.VectorIndex(path, 16)
ix.add_batch(x[:2000])
ix.flush()
print("checkpoint", flush=True)
sys.stdin.readline()
for i in range(2000, 2060):
    ix.add(x[i])
    ix.flush()
ix.delete(5)
ix.delete(2001)
ix.flush()
for i in range(2060, 2070):
    ix.add(x[i])
    ix.flush()
print("done", flush=True)
sys.stdin.readline()
"""


def expected() -> tuple[np.ndarray, np.ndarray]:
    x = np.random.default_rng(5).standard_normal((3000, D)).astype(np.float32)
    ids = np.array([i for i in range(2070) if i not in (5, 2001)], dtype=np.uint64)
    return ids, x[ids.astype(np.int64)]


@pytest.fixture(scope="module")
def crashed(tmp_path_factory) -> dict:
    """The file at the checkpoint (A), after the small flushes (B), and the redo log (R)."""
    tmp = tmp_path_factory.mktemp("power")
    path = tmp / "p.chassis"
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(WRITER), str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    try:
        assert child.stdout.readline().strip() == "checkpoint"
        a = path.read_bytes()
        assert not Path(f"{path}.redo").exists(), "a batch's flush goes through the index file"
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "done"
        b = path.read_bytes()
        r = Path(f"{path}.redo").read_bytes()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert a != b
    return dict(path=path, a=a, b=b, r=r)


def put_image(path: Path, image: bytes, log: bytes) -> None:
    """The disk after the power loss: `image` in the index's own inode, the log beside it."""
    with open(path, "r+b") as f:
        f.truncate(len(image))
        f.write(image)
        f.flush()
        os.fsync(f.fileno())
    Path(f"{path}.redo").write_bytes(log)


def half_written_back(a: bytes, b: bytes, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    out = bytearray(a)
    for page in range(len(b) // 4096):
        if rng.random() < 0.5:
            out[page * 4096 : (page + 1) * 4096] = b[page * 4096 : (page + 1) * 4096]
    return bytes(out)


READER = """
import sys
import chassis
try:
    r = chassis.IndexReader(sys.argv[1])
except chassis.CorruptIndexError as e:
    print("refused", str(e).splitlines()[0])
else:
    print("opened", len(r))
"""


def test_a_killed_writers_small_flushes_are_there_for_readers_in_the_same_boot(crashed):
    # The kill alone: the page cache holds everything, and a reader opens at once.
    proc = run_python(READER, crashed["path"])
    assert_child_ok(proc)
    assert proc.stdout.split() == ["opened", "2068"]
    assert len(crashed["r"]) > 4096 and crashed["r"][:6] == b"CHREDO"


@pytest.mark.parametrize("written_back", ["nothing", "half", "everything"])
def test_after_a_power_loss_a_writer_reopens_exactly_the_last_flush(
    crashed, written_back, tmp_path, monkeypatch
):
    path, a, b = crashed["path"], crashed["a"], crashed["b"]
    image = {"nothing": a, "half": half_written_back(a, b, 11), "everything": b}[written_back]
    put_image(path, image, crashed["r"])
    monkeypatch.setenv("CHASSIS_BOOT_ID", "the next boot")
    # A reader first: it applies the log, as the next writer would (one that may not write
    # the file refuses it: `test_a_reader_that_may_not_write_refuses_a_file_short_of_its_log`).
    proc = run_python(READER, path)
    assert_child_ok(proc)
    assert proc.stdout.split() == ["opened", "2068"]
    # A writer applies the log: exactly the state of the last flush.
    ids, vecs = expected()
    rng = np.random.default_rng(3)
    queries = rng.standard_normal((20, D)).astype(np.float32)
    got = dump_index(path, tmp_path, queries=queries, k=10)
    assert np.array_equal(got["ids"], ids)
    assert_bit_identical(got["vecs"], vecs)
    d2 = ((queries[:, None, :] - vecs[None, :, :]) ** 2).sum(-1)
    truth = ids[np.argsort(d2, axis=1, kind="stable")[:, :10]]
    assert np.array_equal(got["batch_ids"], truth), "exact search against brute force"
    assert not Path(f"{path}.redo").exists(), "the log is applied, made durable and removed"
    # Byte for byte the file the killed writer left in memory.
    assert path.read_bytes() == b
    # And readers open it again.
    proc = run_python(READER, path)
    assert_child_ok(proc)
    assert proc.stdout.split() == ["opened", "2068"]


def torn_newest_header(image: bytes) -> bytes:
    """`image` with its newest header copy failing its checksum (cut by the power loss)."""
    out = bytearray(image)
    out[newest_copy(image) + 40] ^= 0xFF  # inside the checksummed body
    return bytes(out)


@pytest.mark.parametrize("image", ["nothing written back", "half", "torn header"])
def test_a_reader_that_may_not_write_refuses_a_file_short_of_its_log(crashed, image, monkeypatch):
    path, a, b = crashed["path"], crashed["a"], crashed["b"]
    bytes_ = {
        "nothing written back": a,
        "half": half_written_back(a, b, 11),
        "torn header": torn_newest_header(a),
    }[image]
    put_image(path, bytes_, crashed["r"])
    monkeypatch.setenv("CHASSIS_BOOT_ID", "the next boot")
    with immutable(path) as made:
        if not made:
            pytest.skip(IMMUTABLE_SKIP)
        proc = run_python(READER, path)
    assert_child_ok(proc)
    assert proc.stdout.startswith("refused"), proc.stdout
    assert "open it once as a writer" not in proc.stdout  # the help is on its own line
    assert Path(f"{path}.redo").exists(), "the log is kept for a writer"


def test_a_log_beside_another_file_is_never_applied(crashed, tmp_path, monkeypatch):
    # The same bytes in a new file (another inode, as after a copy or a replacement).
    other = tmp_path / "copy.chassis"
    other.write_bytes(crashed["a"])
    Path(f"{other}.redo").write_bytes(crashed["r"])
    monkeypatch.setenv("CHASSIS_BOOT_ID", "the next boot")
    got = dump_index(other, tmp_path)
    assert len(got["ids"]) == 2000, "the checkpoint's state: the log is not this file's"
    assert other.read_bytes()[: 128 * 1024] == crashed["a"][: 128 * 1024]
    assert not Path(f"{other}.redo").exists()


def newest_copy(image: bytes) -> int:
    """Offset of the header copy with the higher commit sequence (bytes 16..24 of a copy)."""
    seqs = [int.from_bytes(image[o + 16 : o + 24], "little") for o in (0, 65536)]
    return 0 if seqs[0] > seqs[1] else 65536


def test_a_torn_header_copy_older_than_the_log_still_gets_the_log(crashed, tmp_path, monkeypatch):
    # The checkpoint's own header copy cut by the power loss: the file's valid copy is then
    # older than the commit the log starts from, and only the log brings it to the last flush.
    path, b = crashed["path"], crashed["b"]
    put_image(path, torn_newest_header(crashed["a"]), crashed["r"])
    monkeypatch.setenv("CHASSIS_BOOT_ID", "the next boot")
    # A reader that may write the file applies the log first: the last flush.
    proc = run_python(READER, path)
    assert_child_ok(proc)
    assert proc.stdout.split() == ["opened", "2068"]
    ids, vecs = expected()
    got = dump_index(path, tmp_path)
    assert np.array_equal(got["ids"], ids)
    assert_bit_identical(got["vecs"], vecs)
    assert path.read_bytes() == b


def test_a_log_beside_other_contents_in_the_same_file_is_never_applied(crashed, tmp_path):
    # Another index copied over this one in place (same inode, as `cp other p.chassis` does):
    # both its header copies are whole and older than the log's checkpoint, so the log is not
    # its; the writer warns and removes it, and the file is the other index, untouched.
    path = crashed["path"]
    other = tmp_path / "other.chassis"
    code = """
import sys
import numpy as np
import chassis
with chassis.VectorIndex(sys.argv[1], 16) as ix:
    ix.add_batch(np.ones((3, 16), dtype=np.float32))
"""
    assert_child_ok(run_python(code, other))
    put_image(path, other.read_bytes(), crashed["r"])
    proc = run_python(
        "import sys, warnings, chassis\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    ix = chassis.VectorIndex(sys.argv[1])\n"
        "print(len(ix), any('other contents' in str(x.message) for x in w))\n"
        "ix.close()\n",
        path,
    )
    assert_child_ok(proc)
    assert proc.stdout.split() == ["3", "True"]
    assert not Path(f"{path}.redo").exists()
    assert path.read_bytes()[:65536] == other.read_bytes()[:65536]
