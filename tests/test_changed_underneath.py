"""A file truncated or overwritten in place under an open index raises, and the process lives.

Each scenario runs in a child process, so that a SIGBUS (what a load past a mapped file's end
raises) would show as the child killed by it rather than end the test run. Oracles: the child's
exit status, the exception type and message it reports, and, once the file is whole again, a
fresh reader's exact search against brute force in NumPy.
"""

from __future__ import annotations

import json
import sys

import pytest
from conftest import describe_returncode, run_python

pytestmark = pytest.mark.skipif(
    sys.platform == "win32", reason="Windows refuses to shrink a mapped file (POSIX processes)"
)

CHILD = r"""
import json, os, shutil, sys
import numpy as np
import chassis

path, how, who = sys.argv[1], sys.argv[2], sys.argv[3]
rng = np.random.default_rng(3)
data = rng.standard_normal((4000, 64)).astype(np.float32)
queries = data[:40] + 0.01 * rng.standard_normal((40, 64)).astype(np.float32)
with chassis.VectorIndex(path, 64) as w:
    w.add_batch(data)
    w.flush()
whole = path + ".whole"
shutil.copyfile(path, whole)
size = os.path.getsize(path)

def change():
    if how == "truncate":
        os.truncate(path, size // 3)
    else:  # what `cp small.chassis index.chassis` does: the same inode, rewritten and shorter
        small = path + ".small"
        with chassis.VectorIndex(small, 64) as s:
            s.add_batch(data[:100])
            s.flush()
        with open(small, "rb") as f, open(path, "r+b") as g:
            g.write(f.read())
            g.truncate()

out = {}
def attempt(name, call):
    try:
        call()
        out[name] = "no error"
    except chassis.ChassisError as e:
        out[name] = [type(e).__name__, "changed underneath" in str(e), isinstance(e, OSError)]

if who == "snapshot":
    r = chassis.IndexReader(path)
    snap = r.snapshot()  # pinned: searches on it never refresh, so they read the mapping
    snap.search_batch(queries, k=10)
    change()
    attempt("first", lambda: snap.search_batch(queries, k=10, ef=4000))
    attempt("again", lambda: r.search_batch(queries, k=10))
    attempt("get", lambda: r.get(3999))
    del snap
    r.close()
elif who == "reader":
    r = chassis.IndexReader(path)
    r.search_batch(queries, k=10)
    change()
    attempt("first", lambda: r.search_batch(queries, k=10, ef=4000))
    attempt("again", lambda: r.search(queries[0], k=10))
    r.close()
else:  # the writer: its adds go through the mapping past the new end
    w = chassis.VectorIndex(path)
    change()
    def add_and_flush():
        w.add_batch(rng.standard_normal((2000, 64)).astype(np.float32))
        w.flush()
    attempt("first", add_and_flush)
    attempt("again", lambda: w.search(queries[0], k=10))
    try:
        w.close()
    except chassis.ChassisError:
        pass

# The file made whole again (as a user would: put the right file back), then opened anew.
os.replace(whole, path)
with chassis.IndexReader(path) as r:
    ids, _ = r.search_batch(queries, k=10, ef=4000)
d = ((queries[:, None, :] - data[None, :, :]) ** 2).sum(-1)
truth = np.argsort(d, axis=1)[:, :10]
out["reopened_exact"] = bool((np.sort(ids, axis=1) == np.sort(truth, axis=1)).all())
print(json.dumps(out))
"""


@pytest.mark.parametrize("how", ["truncate", "overwrite"])
@pytest.mark.parametrize("who", ["snapshot", "reader", "writer"])
def test_a_file_changed_underneath_raises_and_the_process_lives(tmp_path, how, who):
    proc = run_python(CHILD, tmp_path / "index.chassis", how, who)
    assert proc.returncode == 0, (
        f"the child died ({describe_returncode(proc.returncode)}):\n{proc.stderr[-3000:]}"
    )
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    # The call that met the change, and every later one on that index: CorruptIndexError
    # (an OSError too) saying what happened, never an answer computed from the missing bytes.
    for call in ("first", "again") + (("get",) if who == "snapshot" else ()):
        assert out[call] == ["CorruptIndexError", True, True], (call, out)
    assert out["reopened_exact"] is True
