"""Make the file-format regression fixture: small index files and what the code that wrote them
answered on them.

This script was run ONCE, with the code of commit b9a8cd8 (file format version 1) built in
release mode, to produce the files next to it:

* ``format-v1-small.chassis``: 300 vectors of 16 dimensions, euclidean, full precision,
  max_connections=8; default and explicit ids, single adds and batches over three commits,
  four deletes, user_version 7; closed cleanly (its undo log left empty, and not kept);
* ``format-v1-cosine-half.chassis``: 200 vectors of 16 dimensions, cosine, half precision,
  two deletes, user_version 3;
* ``format-v1-expected.json``: for each file, its sha256, options, ``len``, ``ids()``,
  ``deleted_count()``, ``user_version``, ``get()`` of some ids (and of absent ones), ``check()``,
  and for 20 fixed queries the ids and distances of ``search(q, k=10, ef=EXACT_EF)`` and
  ``search_batch``; then, on a copy, the ids a writer gave to 5 more vectors and the same searches
  after they were added and flushed.

``tests/test_file_format.py`` opens copies of these files with the code under test and checks
that every answer is the recorded one: the oracle is the recorded output of the pinned old code.
Rerunning this script with newer code is NOT how that test works (it would only compare the new
code with itself); it refuses to overwrite the fixture unless given ``--force``, which is only
for a deliberate new format version (then name the files after it).

    python tests/data/make_format_fixture.py
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import chassis
import numpy as np

HERE = Path(__file__).resolve().parent
SEED = 20240611
DIMS = 16
K = 10
EXACT_EF = 1000  # more than any file's slot count: the search is exhaustive, so exact
N_QUERIES = 20
SMALL = "format-v1-small.chassis"
COSINE_HALF = "format-v1-cosine-half.chassis"
EXPECTED = "format-v1-expected.json"


def floats(a: np.ndarray) -> list:
    """float32 values as JSON numbers (float32 -> float64 -> repr round-trips exactly)."""
    return np.asarray(a, dtype=np.float32).astype(np.float64).tolist()


def to_json(value, indent: str = "") -> str:
    """JSON with one line per list of numbers (readable diffs, a small file)."""
    inner = indent + " "
    if isinstance(value, dict):
        items = [f"{inner}{json.dumps(k)}: {to_json(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        return "[\n" + ",\n".join(inner + to_json(v, inner) for v in value) + "\n" + indent + "]"
    return json.dumps(value)


def make_small(path: Path, rng: np.random.Generator) -> list[int]:
    data = rng.standard_normal((300, DIMS)).astype(np.float32)
    opts = chassis.IndexOptions(max_connections=8, ef_construction=64, ef_search=32)
    with chassis.VectorIndex(path, DIMS, opts) as ix:
        ix.add_batch(data[:150])  # default ids 0..149
        ix.add_batch(data[150:200], ids=np.arange(1000, 1150, 3, dtype=np.uint64))
        for i in range(200, 205):  # single adds, explicit ids
            ix.add(data[i], id=5000 + 7 * (i - 200))
        ix.add(data[205])  # a default id after explicit ones: 5029
        ix.flush()
        deleted = [3, 77, 1003, 5007]
        for i in deleted:
            assert ix.delete(i)
        ix.user_version = 7
        ix.flush()
        ix.add_batch(data[206:300])  # default ids again, 5030..5123
    return deleted


def make_cosine_half(path: Path, rng: np.random.Generator) -> list[int]:
    data = (rng.standard_normal((200, DIMS)) * 3.0).astype(np.float32)
    opts = chassis.IndexOptions(metric="cosine", precision="half", max_connections=8)
    with chassis.VectorIndex(path, DIMS, opts) as ix:
        ix.add_batch(data[:120], ids=np.arange(10, 130, dtype=np.uint64))
        ix.flush()
        deleted = [11, 64]
        for i in deleted:
            assert ix.delete(i)
        ix.add_batch(data[120:])  # default ids 130..209
        ix.user_version = 3
    return deleted


def answers(ix: chassis.VectorIndex, queries: np.ndarray) -> dict:
    single = [ix.search(q, K, ef=EXACT_EF) for q in queries]
    ids, dist = ix.search_batch(queries, K, ef=EXACT_EF)
    return {
        "search": [
            {"ids": [h.id for h in hits], "distances": [h.distance for h in hits]}
            for hits in single
        ],
        "search_batch": {"ids": ids.tolist(), "distances": [floats(row) for row in dist]},
    }


def record(path: Path, deleted: list[int], rng: np.random.Generator) -> dict:
    queries = rng.standard_normal((N_QUERIES, DIMS)).astype(np.float32)
    extra = rng.standard_normal((5, DIMS)).astype(np.float32)
    undo = Path(str(path) + ".undo")
    if undo.exists():  # a clean close leaves the undo log truncated to nothing: not part of it
        assert undo.stat().st_size == 0, "the index was not closed cleanly"
        undo.unlink()
    with chassis.IndexReader(path) as ix:
        ids = ix.ids()
        sample = [int(i) for i in ids[:: max(1, len(ids) // 12)]] + [int(ids[-1])]
        check = ix.check()
        assert check.ok, check
        out = {
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "size": path.stat().st_size,
            "dimensions": ix.dimensions,
            "metric": ix.metric,
            "precision": ix.precision,
            "max_connections": ix.options.max_connections,
            "ef_construction": ix.options.ef_construction,
            "ef_search": ix.options.ef_search,
            "len": len(ix),
            "deleted_count": ix.deleted_count(),
            "user_version": ix.user_version,
            "ids": ids.tolist(),
            "deleted_ids": deleted,
            "absent_ids": deleted + [999_999],
            "get": [[i, floats(ix.get(i))] for i in sample],
            "check": {
                "unreachable": check.unreachable,
                "not_finite": check.not_finite,
                "corrupt": check.corrupt,
            },
            "k": K,
            "ef": EXACT_EF,
            "queries": [floats(q) for q in queries],
            **answers(ix, queries),
        }
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / path.name
        shutil.copyfile(path, copy)
        with chassis.VectorIndex(copy) as w:
            new_ids = w.add_batch(extra)
            w.flush()
        with chassis.IndexReader(copy) as ix:
            out["after_add"] = {
                "vectors": [floats(v) for v in extra],
                "ids": new_ids.tolist(),
                "len": len(ix),
                **answers(ix, queries),
            }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--force", action="store_true", help="overwrite an existing fixture")
    args = parser.parse_args()
    targets = [HERE / SMALL, HERE / COSINE_HALF, HERE / EXPECTED]
    if any(t.exists() for t in targets) and not args.force:
        print("the fixture exists; it is only ever made once (see the docstring)", file=sys.stderr)
        return 1
    for t in targets:
        for p in (t, Path(str(t) + ".undo")):
            if p.exists():
                os.remove(p)
    rng = np.random.default_rng(SEED)
    expected = {
        "made_by": "tests/data/make_format_fixture.py",
        "chassis_version": chassis.__version__,
        "numpy_version": np.__version__,
        "kernel": chassis.cpu_info()["kernel"],
        "files": {},
    }
    for name, make in ((SMALL, make_small), (COSINE_HALF, make_cosine_half)):
        deleted = make(HERE / name, rng)
        expected["files"][name] = record(HERE / name, deleted, rng)
    leftovers = sorted(p.name for p in HERE.iterdir() if p.name.endswith(".undo"))
    assert not leftovers, leftovers
    (HERE / EXPECTED).write_text(to_json(expected) + "\n")
    for t in targets:
        print(f"{t.name}: {t.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
