"""A large batch's level-0 lists are built in anonymous memory and written to the file once
after linking (storage/shadow.rs); `CHASSIS_LIST_SHADOW=0` writes them in place as smaller
batches do.

Oracles: the in-place build of the same rows (one thread, so both builds make the same graph),
each built in a fresh process and read back in this one, and brute-force k-NN in NumPy.
Interruption and kills of large batches are covered in test_corners.py (200,000 rows).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import chassis
import numpy as np

N, D = 70_000, 16  # above the batch size from which the lists are built aside (65,536)


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    centers = rng.standard_normal((64, D)).astype(np.float32) * 4
    base = centers[rng.integers(0, 64, N)] + rng.standard_normal((N, D), dtype=np.float32)
    queries = centers[rng.integers(0, 64, 200)] + rng.standard_normal((200, D), dtype=np.float32)
    return base.astype(np.float32), queries.astype(np.float32)


def build(path: Path, shadow: bool) -> None:
    """Build in a fresh process: 1,000 rows first (the lists of a small batch in place), then
    the large batch, each flushed."""
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import chassis
        from test_large_batches import data
        base, _ = data()
        opts = chassis.IndexOptions(max_connections=8, ef_construction=64)
        with chassis.VectorIndex({str(path)!r}, {D}, options=opts) as index:
            index.add_batch(base[:1000], threads=1)
            index.flush()
            index.add_batch(base[1000:], threads=1)
            index.flush()
        """
    )
    env = {**os.environ, "CHASSIS_LIST_SHADOW": "1" if shadow else "0"}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_a_large_batch_built_aside_is_the_graph_built_in_place(tmp_path):
    base, queries = data()
    aside, in_place = tmp_path / "aside.chassis", tmp_path / "in-place.chassis"
    build(aside, shadow=True)
    build(in_place, shadow=False)
    d2 = ((queries[:, None, :] - base[None, :, :]) ** 2).sum(-1)
    exact = np.argsort(d2, axis=1)[:, :10]
    found = {}
    for name, path in (("aside", aside), ("in place", in_place)):
        with chassis.IndexReader(path) as r:
            assert len(r) == N
            report = r.check()
            assert report.ok and report.unreachable == [], (name, report)
            ids, dists = r.search_batch(queries, k=10, ef=64)
            found[name] = (np.asarray(ids), np.asarray(dists))
    # The same graph: the same answers, to the bit.
    np.testing.assert_array_equal(found["aside"][0], found["in place"][0])
    np.testing.assert_array_equal(found["aside"][1], found["in place"][1])
    ids = found["aside"][0]
    recall = np.mean([len(set(ids[i]) & set(exact[i])) / 10 for i in range(len(queries))])
    assert recall >= 0.95, recall
    # And the stored vectors are the rows (a list copied to the wrong slots would still
    # answer, but not with these distances).
    with chassis.IndexReader(aside) as r:
        got = r.search_batch(queries[:20], k=1, ef=64)[1]
        assert np.allclose(np.asarray(got)[:, 0], np.sqrt(d2[:20].min(axis=1)), rtol=1e-4)
