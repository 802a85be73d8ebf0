"""Filtered search plans: an exact scan of the allowed rows, a walk, a two-hop walk.

Oracle: brute-force k-NN in NumPy over the allowed rows (over what ``get`` returns for an index
that keeps codes only, whose distances are the codes'). Each plan is forced in a fresh process
(``CHASSIS_FILTER_PLAN``, read once per process) and checked on every storage and metric; the
planner's own choice is read from ``chassis.search_plans()``.
"""

from __future__ import annotations

import json
import types

import chassis
import numpy as np
import pytest
from conftest import (
    NO_ID,
    assert_child_ok,
    brute_force_knn,
    clustered_data,
    recall_at_k,
    run_python,
)

STORAGES = {
    "full": {},
    "half": {"precision": "half"},
    "int8 codes + rerank": {"quantization": "int8"},
    "codes only": {"precision": "int8"},
}
METRICS = ("euclidean", "cosine", "inner_product")

# The child: for each storage and metric, an index of 3,000 clustered rows, and 40 queries
# under three filters (a random 5%, a random 30%, and a correlated 10%: one cluster's rows,
# with the queries drawn from the other clusters). Prints, per case, the recall against the
# brute force, whether every id was allowed, and the plans taken.
CHILD = """
import json, sys
import numpy as np
import chassis
sys.path.insert(0, sys.argv[1])
from conftest import brute_force_knn, clustered_data, recall_at_k
storages = json.loads(sys.argv[2])
out = []
for sname, extra in storages.items():
    for metric in ("euclidean", "cosine", "inner_product"):
        data = clustered_data(3000, 16, clusters=10, seed=5)
        label = np.argmin(((data[:, None, :] - clustered_data(10, 16, clusters=10, seed=5, spread=0)[None]) ** 2).sum(-1), axis=1)
        idx = chassis.VectorIndex(None, 16, chassis.IndexOptions(metric=metric, **extra))
        idx.add_batch(data)
        # what the index keeps (half precision rounds, codes only keeps codes)
        stored = np.stack([idx.get(i) for i in range(len(data))]) if extra.get("precision") else data
        queries = clustered_data(200, 16, clusters=10, seed=5, sample_seed=77)
        qlabel = np.argmin(((queries[:, None, :] - clustered_data(10, 16, clusters=10, seed=5, spread=0)[None]) ** 2).sum(-1), axis=1)
        rng = np.random.default_rng(3)
        cases = {
            "random 5%": (rng.random(len(data)) < 0.05, queries[:40]),
            "random 30%": (rng.random(len(data)) < 0.30, queries[:40]),
            "correlated 10%": (label == 0, queries[qlabel != 0][:40]),
        }
        for fname, (mask, qs) in cases.items():
            rows = np.flatnonzero(mask)
            if sname == "codes only" and metric == "cosine":
                # codes of unit vectors: the distance is 1 - q.x to the decoded x as it is
                unit = qs / np.linalg.norm(qs, axis=1, keepdims=True)
                truth, _ = brute_force_knn(stored[rows], unit, 10, "inner_product", ids=rows)
            else:
                truth, _ = brute_force_knn(stored[rows], qs, 10, metric, ids=rows)
            before = chassis.search_plans()
            ids, _ = idx.search_batch(qs, 10, allowed=mask, ef=64)
            after = chassis.search_plans()
            ids = np.asarray(ids)
            out.append({
                "case": f"{sname} / {metric} / {fname}",
                "recall": recall_at_k(ids, truth),
                "all_allowed": bool(mask[ids.astype(np.int64)].all()),
                "plans": {k: after[k] - before[k] for k in after},
            })
print(json.dumps(out))
"""


@pytest.mark.parametrize("plan", ["scan", "walk", "two_hop"])
def test_every_plan_returns_the_allowed_nearest_on_every_storage_and_metric(plan):
    tests_dir = str(__import__("pathlib").Path(__file__).resolve().parent)
    proc = run_python(
        CHILD, tests_dir, json.dumps(STORAGES), env={"CHASSIS_FILTER_PLAN": plan}, timeout=300
    )
    assert_child_ok(proc, f"searches under CHASSIS_FILTER_PLAN={plan}")
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(results) == len(STORAGES) * len(METRICS) * 3
    for r in results:
        assert r["all_allowed"], f"{plan}: {r['case']}: a result the filter does not allow"
        assert r["plans"][plan] == 40, f"{plan}: {r['case']}: plans taken {r['plans']}"
        # The scan is exact; a walk finds nearly all of the allowed nearest at ef 64 (a
        # walk or two hops short of k is completed by the scan). Two hops under inner product
        # find fewer (docs/design/filtered-search.md), which is why the planner never takes
        # them there; forced, they must still hold the floor below.
        floor = 1.0 if plan == "scan" else 0.9
        if plan == "two_hop" and "inner_product" in r["case"]:
            floor = 0.78
        assert r["recall"] >= floor, f"{plan}: {r['case']}: recall {r['recall']:.3f}"


@pytest.fixture(scope="module")
def big():
    """40,000 clustered rows of 8 dimensions, M=16: large enough for each plan to be the
    cheapest somewhere at ef 16."""
    data = clustered_data(40_000, 8, clusters=50, seed=11)
    idx = chassis.VectorIndex(None, 8, chassis.IndexOptions(max_connections=16))
    idx.add_batch(data)
    queries = clustered_data(60, 8, clusters=50, seed=11, sample_seed=5)
    return idx, data, queries


@pytest.mark.parametrize(
    ("share", "ef", "plan"),
    [
        (0.002, 16, "scan"),
        (0.1, 16, "two_hop"),
        (0.2, 16, "two_hop"),
        (0.5, 16, "walk"),
        (0.05, 24, "two_hop"),
    ],
)
def test_the_planner_picks_by_share_and_its_answers_hold(big, share, ef, plan):
    """The plan the cost model gives for each share and ef (its constants:
    docs/design/filtered-search.md; at 5% and ef 24 two hops cost less than the scan of the
    allowed rows, which the model before its refit chose), and recall against the brute force."""
    idx, data, queries = big
    mask = np.random.default_rng(int(share * 1000)).random(len(data)) < share
    rows = np.flatnonzero(mask)
    truth, _ = brute_force_knn(data[rows], queries, 10, "euclidean", ids=rows)
    before = chassis.search_plans()
    ids, _ = idx.search_batch(queries, 10, allowed=mask, ef=ef)
    after = chassis.search_plans()
    taken = {k: after[k] - before[k] for k in after}
    assert taken[plan] == len(queries), taken
    assert recall_at_k(np.asarray(ids), truth) >= (1.0 if plan == "scan" else 0.9)
    assert mask[np.asarray(ids).astype(np.int64)].all()


def test_a_mask_of_every_id_is_no_filter(big):
    idx, data, queries = big
    before = chassis.search_plans()
    with_mask = idx.search_batch(queries, 10, allowed=np.ones(len(data), dtype=bool), ef=16)
    after = chassis.search_plans()
    plain = idx.search_batch(queries, 10, ef=16)
    assert after == before, "a filter that lets everything through was planned"
    np.testing.assert_array_equal(np.asarray(with_mask[0]), np.asarray(plain[0]))


def test_per_query_filters_in_a_batch_answer_as_one_search_each(big):
    """Oracles: each query searched alone with its own filter (same plan, same answer), and
    the brute force over each query's allowed rows (every result allowed; the scans exact)."""
    idx, data, queries = big
    rng = np.random.default_rng(9)
    shares = [0.001, 0.05, 0.2, 0.7] * (len(queries) // 4)
    masks = [rng.random(len(data)) < s for s in shares]
    ids, dists = idx.search_batch(queries[: len(masks)], 10, allowed=masks, ef=32)
    ids = np.asarray(ids)
    for i, mask in enumerate(masks):
        alone = idx.search(queries[i], 10, allowed=mask, ef=32)
        assert [h.id for h in alone] == ids[i][: len(alone)].tolist(), i
        rows = np.flatnonzero(mask)
        truth, _ = brute_force_knn(data[rows], queries[i : i + 1], 10, "euclidean", ids=rows)
        found = ids[i][ids[i] != NO_ID].astype(np.int64)
        assert len(found) == min(10, len(rows)) and mask[found].all(), i
        if shares[i] == 0.001:  # 40 rows: the scan, exact
            assert sorted(found.tolist()) == sorted(truth[0][: len(found)].tolist()), i
    # Every query's recall against its own brute force, together.
    truths = [
        brute_force_knn(
            data[np.flatnonzero(m)], queries[i : i + 1], 10, "euclidean", ids=np.flatnonzero(m)
        )[0][0]
        for i, m in enumerate(masks)
    ]
    assert recall_at_k(ids, np.asarray(truths)) >= 0.9


def test_a_list_of_booleans_is_a_mask(big):
    """A Python list (or tuple) of bools filters as the same NumPy mask does (oracle), and
    a list mixing bools and ints is refused rather than read as ints."""
    idx, data, queries = big
    mask = np.random.default_rng(3).random(len(data)) < 0.01
    want = idx.search_batch(queries, 10, allowed=mask, ef=16)
    for given in (mask.tolist(), tuple(mask.tolist())):
        got = idx.search_batch(queries, 10, allowed=given, ef=16)
        np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(want[0]))
    with pytest.raises(chassis.ArgumentTypeError, match="a boolean"):
        idx.search(queries[0], 10, allowed=[True, 3])


def test_per_query_filters_as_a_sparse_matrix_answer_as_a_list_of_them(big):
    """A CSR matrix, one row per query (row i's non-zero columns: query i's ids). Oracle: the
    same filters as a list of id arrays; explicit zeros and empty rows included."""
    idx, data, queries = big
    rng = np.random.default_rng(13)
    dense = rng.random((len(queries), len(data))) < 0.03
    dense[3] = False  # a row that allows nothing
    rows, cols = np.nonzero(dense)
    values = np.ones(len(cols), dtype=bool)
    values[::7] = False  # explicit zeros: stored, not allowed
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=len(queries)))])
    # What SciPy's csr_array holds, without SciPy.
    m = types.SimpleNamespace(
        format="csr", shape=dense.shape, indptr=indptr, indices=cols.astype(np.int32), data=values
    )
    lists = [
        cols[indptr[i] : indptr[i + 1]][values[indptr[i] : indptr[i + 1]]]
        for i in range(len(queries))
    ]
    forms = [m]
    try:
        from scipy import sparse
    except ImportError:
        pass
    else:
        forms += [sparse.csr_array((values, cols, indptr), shape=dense.shape)]
        forms += [sparse.csr_matrix(forms[-1])]
    want = idx.search_batch(queries, 10, allowed=lists, ef=32)
    stored = [cols[indptr[i] : indptr[i + 1]] for i in range(len(queries))]
    assert not np.array_equal(  # the explicit zeros change answers: the test sees them
        np.asarray(idx.search_batch(queries, 10, allowed=stored, ef=32)[0]), np.asarray(want[0])
    )
    for form in forms:
        got = idx.search_batch(queries, 10, allowed=form, ef=32)
        np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(want[0]))
    assert (np.asarray(want[0])[3] == 2**64 - 1).all()
    with pytest.raises(chassis.InvalidArgumentError, match="rows for"):
        idx.search_batch(queries[:5], 10, allowed=m, ef=32)
    bad = types.SimpleNamespace(**{**vars(m), "indptr": indptr[::-1].copy()})
    with pytest.raises(chassis.InvalidArgumentError, match="do not describe"):
        idx.search_batch(queries, 10, allowed=bad, ef=32)


def _exact_allowed(vectors: dict[int, np.ndarray], allowed: set[int], queries, k: int):
    rows = np.array(sorted(i for i in vectors if i in allowed), dtype=np.int64)
    data = np.stack([vectors[int(i)] for i in rows])
    return brute_force_knn(data, queries, k, "euclidean", ids=rows)[0]


def test_a_filter_given_again_follows_deletes_rollbacks_and_new_rows(tmp_path):
    """The slots of a filter are kept for the next search with the same ids; whatever changes
    which row a slot holds must not leave them behind. Oracle: brute force over a dict of the
    live rows, after each change, with the same mask object and the same id list searched
    again (exact: ef covers the index)."""
    rng = np.random.default_rng(21)
    n, d = 600, 8
    data = rng.standard_normal((n, d)).astype(np.float32)
    queries = rng.standard_normal((8, d)).astype(np.float32)
    idx = chassis.VectorIndex(tmp_path / "f.chassis", d)
    idx.add_batch(data)
    idx.flush()
    live = {i: data[i] for i in range(n)}
    mask = np.zeros(2000, dtype=bool)
    mask[::3] = True  # ids 0, 3, 6, ... and, later, rows added under such ids
    listed = np.flatnonzero(mask).astype(np.uint64)

    def check(what: str) -> None:
        want = _exact_allowed(live, set(listed.tolist()), queries, 5)
        for allowed in (mask, listed):
            got, _ = idx.search_batch(queries, 5, allowed=allowed, ef=n + 200)
            np.testing.assert_array_equal(np.asarray(got).astype(np.int64), want, err_msg=what)

    check("as built")
    nearest = [int(i) for i in _exact_allowed(live, set(listed.tolist()), queries, 1)[:, 0]]
    assert idx.delete_batch(nearest) > 0
    for i in nearest:
        live.pop(i, None)
    check("after deleting the nearest allowed rows")
    idx.rollback()
    live.update({i: data[i] for i in nearest})
    check("after the rollback brought them back")

    # Rows added under allowed ids, searched (so their slots are kept), rolled back; then as
    # many other rows into the same slots under ids the filter does not allow.
    first = np.arange(900, 960, dtype=np.uint64)  # 20 of them allowed
    near = (queries[np.arange(60) % len(queries)] + 0.001).astype(np.float32)
    idx.add_batch(near, ids=first)
    live.update({int(i): v for i, v in zip(first, near)})
    check("with rows added under allowed ids")
    idx.rollback()
    for i in first:
        live.pop(int(i))
    other = np.arange(1000, 1060, dtype=np.uint64) * 3 + 1  # none allowed
    idx.add_batch(near, ids=other)
    live.update({int(i): v for i, v in zip(other, near)})
    check("with other rows in the same slots under ids not allowed")
    idx.close()
