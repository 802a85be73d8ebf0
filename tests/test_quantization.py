"""8-bit and 4-bit codes (``IndexOptions(quantization="int8")``, ``"int4"``) through the
Python API.

Oracles: brute-force k-NN and exact distances in NumPy (float64), the same data in an index
without codes built the same way (recall at a fixed ef within a stated margin), the file
reopened in a fresh process, and the codes' ranges checked against the values the test chose.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

import chassis
import numpy as np
import pytest
from chassis import IndexOptions, IndexReader, VectorIndex
from conftest import (
    assert_child_ok,
    assert_has_help,
    brute_force_knn,
    child_env,
    clustered_data,
    normalise,
    pairwise_distances,
    recall_at_k,
    run_python,
)

N, DIMS, K = 4000, 48, 10
# The codes walk reranks its best candidates on the stored vectors: recall at equal ef stays
# within this of the float index's (measured: equal to within 0.001 on MiniLM, ef 16-128).
RECALL_MARGIN = 0.03


@pytest.fixture(scope="module")
def data():
    return clustered_data(N, DIMS, seed=5)


@pytest.fixture(scope="module")
def queries():
    return clustered_data(100, DIMS, seed=5, sample_seed=99)


def options(metric: str, quantization: str | None) -> IndexOptions:
    return IndexOptions(
        metric=metric, quantization=quantization, max_connections=8, ef_construction=64
    )


def exact_distances(data, ids, queries, metric):
    """(q, k) float64 distances of the returned ids (padding ids give NaN)."""
    d = pairwise_distances(data, queries, metric)
    out = np.full(ids.shape, np.nan)
    ok = ids != np.uint64(2**64 - 1)
    rows = np.nonzero(ok)
    out[rows] = d[rows[0], ids[rows].astype(np.int64)]
    return out


@pytest.mark.parametrize("metric", ["euclidean", "cosine", "inner_product"])
def test_codes_keep_the_float_recall_and_return_exact_distances(tmp_path, data, queries, metric):
    true_ids, _ = brute_force_knn(data, queries, K, metric)
    plain = VectorIndex(tmp_path / "plain.chassis", DIMS, options(metric, None))
    plain.add_batch(data, threads=1)
    coded = VectorIndex(tmp_path / "int8.chassis", DIMS, options(metric, "int8"))
    coded.add_batch(data, threads=1)
    assert coded.trained and not plain.trained
    assert coded.quantization == "int8" and plain.quantization is None
    for ef in (16, 64):
        pid, _ = plain.search_batch(queries, K, ef=ef)
        cid, cdist = coded.search_batch(queries, K, ef=ef)
        rp, rc = recall_at_k(pid, true_ids), recall_at_k(cid, true_ids)
        assert rc >= rp - RECALL_MARGIN, f"ef {ef}: recall {rc:.3f} with codes, {rp:.3f} without"
        # reranked: the distances are the stored vectors' own, not the codes'
        want = exact_distances(data, cid, queries, metric)
        np.testing.assert_allclose(cdist, want, rtol=1e-4, atol=1e-4)
        # one query at a time gives what the batch gives
        for qi in (0, 17, 99):
            hits = coded.search(queries[qi], K, ef=ef)
            assert [h.id for h in hits] == cid[qi].tolist()
    # the smallest rerank (the walk's own k best) still returns exact distances; it finds
    # fewer of the true neighbours than the default, which measures more candidates again
    rid, rdist = coded.search_batch(queries, K, ef=64, rerank=K)
    np.testing.assert_allclose(
        rdist, exact_distances(data, rid, queries, metric), rtol=1e-4, atol=1e-4
    )
    assert 0.85 <= recall_at_k(rid, true_ids) <= recall_at_k(cid, true_ids)
    # the default stops measuring once the rest cannot enter the k nearest: it finds what
    # measuring the whole beam again finds (k = 1, 10 and 50; one query's worth of margin)
    for k, ef in ((1, 32), (K, 64), (50, 128)):
        t_ids, _ = brute_force_knn(data, queries, k, metric)
        aid, _ = coded.search_batch(queries, k, ef=ef)
        wid, _ = coded.search_batch(queries, k, ef=ef, rerank=ef)
        ra, rw = recall_at_k(aid, t_ids), recall_at_k(wid, t_ids)
        assert ra >= rw - 1 / len(queries), f"k {k}: {ra:.3f} by default, {rw:.3f} all measured"


def test_training_waits_for_1000_rows_and_a_sample_can_come_first(tmp_path, data, queries):
    index = VectorIndex(tmp_path / "a.chassis", DIMS, options("euclidean", "int8"))
    index.add_batch(data[:999])
    assert not index.trained, "999 rows: the walk still measures the vectors"
    exact, _ = brute_force_knn(data[:999], queries, K, "euclidean")
    ids, _ = index.search_batch(queries, K, ef=999)
    np.testing.assert_array_equal(ids, exact)
    index.add(data[999])
    assert index.trained, "learned at the 1,000th row"
    index.flush()
    want_ids, want_dists = index.search_batch(queries, K, ef=64)
    index.close()
    # a reader in a fresh process opens the learned quantizer with the file: it walks the
    # codes (trained) and answers as the writer did, with exact distances (the brute force)
    np.save(tmp_path / "q.npy", queries)
    proc = run_python(
        "import sys, numpy as np, chassis\n"
        "r = chassis.IndexReader(sys.argv[1])\n"
        "ids, dists = r.search_batch(np.load(sys.argv[2]), int(sys.argv[3]), ef=64)\n"
        "np.save(sys.argv[4], np.asarray(ids)); np.save(sys.argv[5], np.asarray(dists))\n"
        "print(r.trained)",
        str(tmp_path / "a.chassis"),
        str(tmp_path / "q.npy"),
        str(K),
        str(tmp_path / "ids.npy"),
        str(tmp_path / "dists.npy"),
    )
    assert_child_ok(proc, "a reader of the trained file")
    assert proc.stdout.split() == ["True"]
    got_ids, got_dists = np.load(tmp_path / "ids.npy"), np.load(tmp_path / "dists.npy")
    np.testing.assert_array_equal(got_ids, want_ids)
    np.testing.assert_allclose(
        got_dists, exact_distances(data[:1000], got_ids, queries, "euclidean"), rtol=1e-4, atol=1e-4
    )

    # train() from a sample before any add: each add is encoded as it is written
    early = VectorIndex(tmp_path / "b.chassis", DIMS, options("euclidean", "int8"))
    early.train(data[::10])
    assert early.trained and len(early) == 0
    for start in range(0, N, 500):
        early.add_batch(data[start : start + 500])
    report = early.check()
    assert report.ok and report.corrupt == []
    true_ids, _ = brute_force_knn(data, queries, K, "euclidean")
    ids, _ = early.search_batch(queries, K, ef=64)
    assert recall_at_k(ids, true_ids) >= 0.9


def test_values_outside_the_learned_range_are_clipped_and_counted(tmp_path):
    rng = np.random.default_rng(3)
    sample = rng.uniform(-1, 1, (200, 8)).astype(np.float32)
    index = VectorIndex(None, 8, IndexOptions(quantization="int8"))
    index.train(sample)
    wide = sample.copy()
    wide[:10, 3] = 5.0  # 10 values beyond the sample's range in dimension 3
    wide[10:15, 0] = -7.0  # and 5 in dimension 0
    index.add_batch(wide)
    report = index.check()
    assert report.clipped == 15, report
    assert report.ok, "clipping is information, not damage"
    # the walk saw clipped codes; the rerank still reports the true distance
    hit = index.search(wide[0], 1, ef=64)[0]
    assert hit.id == 0 and hit.distance == pytest.approx(0.0, abs=1e-5)
    # compaction learns the range again from the live vectors: nothing is clipped then
    index.delete(199)
    index.compact()
    assert index.check().clipped == 0


def test_bad_calls_get_typed_errors_with_help(tmp_path, data):
    plain = VectorIndex(tmp_path / "plain.chassis", DIMS)
    with pytest.raises(chassis.InvalidArgumentError) as e:
        plain.train(data[:10])
    assert "no codes" in str(e.value)
    assert_has_help(e.value)
    coded = VectorIndex(tmp_path / "int8.chassis", DIMS, IndexOptions(quantization="int8"))
    with pytest.raises(chassis.DimensionMismatchError):
        coded.train(data[:10, :5])
    bad = data[:10].copy()
    bad[3, 2] = np.nan
    with pytest.raises(chassis.InvalidArgumentError) as e:
        coded.train(bad)
    assert "sample row 3" in str(e.value)
    coded.train(data[:100])
    with pytest.raises(chassis.InvalidArgumentError) as e:
        coded.train(data[:100])
    assert "already trained" in str(e.value)
    assert_has_help(e.value)
    coded.add_batch(data[:50])
    for bad_rerank in (0, -1, 2**24 + 1):
        with pytest.raises(chassis.InvalidArgumentError):
            coded.search(data[0], 5, rerank=bad_rerank)
    with pytest.raises(TypeError):
        coded.search_batch(data[:2], 5, rerank="many")
    # a plain index ignores rerank: the same results either way
    plain.add_batch(data[:50])
    assert plain.search(data[0], 5, rerank=1) == plain.search(data[0], 5)
    with pytest.raises(chassis.InvalidArgumentError):
        IndexOptions(quantization="int2").validate()
    with pytest.raises(chassis.ArgumentTypeError):
        IndexOptions(quantization=8).validate()
    assert IndexOptions(quantization="SQ8").quantization == "int8"
    assert IndexOptions(quantization="SQ4").quantization == "int4"
    # codes-only storage is 8-bit: 4-bit codes with it are refused, with what to do instead
    with pytest.raises(chassis.InvalidArgumentError) as e:
        IndexOptions(precision="int8", quantization="int4").validate()
    assert "int4" in str(e.value)
    assert_has_help(e.value)
    assert IndexOptions(quantization="none").quantization is None
    plain.flush()
    plain.close()
    # the codes are fixed at creation: a writer asking for others is refused
    with pytest.raises(chassis.OptionsMismatchError) as e:
        VectorIndex(tmp_path / "plain.chassis", DIMS, IndexOptions(quantization="int8"))
    assert "quantization" in str(e.value)
    reader = IndexReader(tmp_path / "plain.chassis", options=IndexOptions(quantization="int8"))
    assert reader.quantization is None, "a reader takes the fixed options from the file"
    ro = VectorIndex(tmp_path / "int8.chassis", read_only=True)
    with pytest.raises(chassis.ReadOnlyError):
        ro.train(data[:10])


def test_filters_deletes_and_a_reader_in_another_process(tmp_path, data, queries):
    path = tmp_path / "q.chassis"
    index = VectorIndex(path, DIMS, options("cosine", "int8"))
    index.add_batch(data)
    gone = list(range(0, N, 3))
    for i in gone:
        index.delete(i)
    index.flush()
    live = np.setdiff1d(np.arange(N), gone)
    allowed = live[live % 2 == 0]
    ids, dists = index.search_batch(queries, K, ef=128, allowed=allowed)
    assert np.isin(ids, allowed).all()
    true_ids, _ = brute_force_knn(data[allowed], queries, K, "cosine", ids=allowed)
    assert recall_at_k(ids, true_ids) >= 0.9
    np.testing.assert_allclose(
        dists, exact_distances(data, ids, queries, "cosine"), rtol=1e-4, atol=1e-4
    )
    ids, _ = index.search_batch(queries, K, ef=64)
    assert not np.isin(ids, gone).any()
    np.save(tmp_path / "queries.npy", queries)
    child = run_python(
        """
        import json, sys
        import numpy as np
        import chassis
        reader = chassis.IndexReader(sys.argv[1])
        ids, dists = reader.search_batch(np.load(sys.argv[2]), 10, ef=64)
        print(json.dumps([reader.trained, repr(reader), ids.tolist(), dists.tolist()]))
        """,
        path,
        tmp_path / "queries.npy",
    )
    assert child.returncode == 0, child.stderr
    trained, text, cids, cdists = json.loads(child.stdout)
    assert trained and 'quantization="int8"' in text
    theirs_ids, theirs_d = index.search_batch(queries, K, ef=64)
    assert cids == theirs_ids.tolist()
    np.testing.assert_array_equal(np.float32(cdists), theirs_d)


def test_codes_take_a_quarter_of_the_vectors_bytes_and_travel_with_save_and_load(
    tmp_path, data, queries
):
    coded = VectorIndex(None, DIMS, options("euclidean", "int8"))
    coded.add_batch(data)
    stats = coded.memory_stats()
    # 48 dims: 192 vector bytes in 192-byte rows, 48 codes in 64-byte rows
    assert stats["code_bytes"] >= N * 64 and stats["code_bytes"] < N * 64 + 2 * 4096 * 4
    assert stats["resident_code_bytes"] == stats["code_bytes"], "in memory, all resident"
    assert stats["vector_bytes"] >= N * 192
    plain = VectorIndex(None, DIMS, options("euclidean", None))
    plain.add_batch(data)
    assert plain.memory_stats()["code_bytes"] == 0
    coded.save(tmp_path / "saved.chassis")
    loaded = VectorIndex.load(tmp_path / "saved.chassis")
    assert loaded.trained and loaded.quantization == "int8"
    a = coded.search_batch(queries, K, ef=32)
    b = loaded.search_batch(queries, K, ef=32)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert loaded.check().ok
    assert "quantization" in repr(loaded) and loaded.options.quantization == "int8"


@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
def test_codes_only_distances_are_those_of_what_the_codes_stand_for(tmp_path, metric):
    n, dims = 3000, 64
    data = clustered_data(n, dims, seed=11)
    queries = clustered_data(50, dims, seed=11, sample_seed=12)
    options = IndexOptions(metric=metric, precision="int8", max_connections=8, ef_construction=64)
    path = tmp_path / "codes.chassis"
    index = VectorIndex(path, dims, options)
    assert index.precision == "int8" and index.quantization == "int8"
    assert 'distances="8-bit codes"' in repr(index)
    # the codes' ranges come from the first batch: a small one is refused, nothing added
    with pytest.raises(chassis.InvalidArgumentError) as e:
        index.add_batch(data[:10])
    assert "first batch" in str(e.value) and "train" in str(e.value)
    assert_has_help(e.value)
    assert len(index) == 0
    index.add_batch(data)
    assert index.trained
    # what the codes stand for (get), and the distances to exactly that
    decoded = np.stack([index.get(i) for i in range(n)])
    step = (data.max(axis=0) - data.min(axis=0)) / 255
    if metric == "euclidean":
        assert (np.abs(decoded - data) <= step / 2 + 1e-5).all()
    ids, dists = index.search_batch(queries, K, ef=64)
    if metric == "cosine":
        # 1 - the unit query's dot product with what the code stands for (the stored unit
        # vector, rounded; not normalised again)
        want = 1.0 - (normalise(queries) @ decoded.T.astype(np.float64))
        want = np.take_along_axis(want, ids.astype(np.int64), axis=1)
    else:
        want = exact_distances(decoded, ids, queries, metric)
    np.testing.assert_allclose(dists, want, rtol=1e-4, atol=1e-4)
    # the walk finds the codes' own nearest about as well as a float index finds the rows'
    float_index = VectorIndex(
        None, dims, IndexOptions(metric=metric, max_connections=8, ef_construction=64)
    )
    float_index.add_batch(data)
    true_rows, _ = brute_force_knn(data, queries, K, metric)
    true_codes, _ = brute_force_knn(decoded, queries, K, metric)
    fids, _ = float_index.search_batch(queries, K, ef=64)
    rf = recall_at_k(fids, true_rows)
    assert recall_at_k(ids, true_codes) >= rf - 0.05
    assert recall_at_k(ids, true_rows) >= rf - 0.1
    # a quarter of the bytes: 64 bytes a row against 256
    assert index.memory_stats()["vector_bytes"] * 3.5 < float_index.memory_stats()["vector_bytes"]
    index.flush()
    reader = IndexReader(path)
    rids, rd = reader.search_batch(queries, K, ef=64)
    np.testing.assert_array_equal(rids, ids)
    np.testing.assert_array_equal(rd, dists)
    assert reader.check().ok


@pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL")
def test_a_killed_codes_only_writer_reopens_as_last_flushed(tmp_path):
    """A codes-only writer killed with adds pending: a fresh open finds the flushed rows, their
    codes decoding bitwise to what the writer saw before it went on, and exact search over
    them (oracle: NumPy over those decoded rows)."""
    path, dump = tmp_path / "k.chassis", tmp_path / "flushed.npy"
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import sys, time
                import numpy as np
                import chassis
                path, dump = sys.argv[1], sys.argv[2]
                rng = np.random.default_rng(5)
                options = chassis.IndexOptions(precision="int8", max_connections=8)
                index = chassis.VectorIndex(path, 16, options)
                index.add_batch(rng.standard_normal((1200, 16)).astype(np.float32))
                index.flush()
                np.save(dump, np.stack([index.get(i) for i in range(1200)]))
                index.add_batch(rng.standard_normal((300, 16)).astype(np.float32))
                print("FLUSHED", flush=True)
                time.sleep(60)
                """
            ),
            str(path),
            str(dump),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    try:
        assert child.stdout.readline().strip() == "FLUSHED"
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait(timeout=30)
    flushed = np.load(dump)
    with pytest.warns(RuntimeWarning, match="unflushed changes were discarded"):
        index = VectorIndex(path)
    assert len(index) == 1200 and index.precision == "int8" and index.trained
    np.testing.assert_array_equal(np.stack([index.get(i) for i in range(1200)]), flushed)
    assert index.check().ok
    queries = np.random.default_rng(6).standard_normal((5, 16)).astype(np.float32)
    ids, dists = index.search_batch(queries, K, ef=1200)  # an exact scan of the codes
    true_ids, true_d = brute_force_knn(flushed, queries, K, "euclidean")
    np.testing.assert_array_equal(ids, true_ids)
    np.testing.assert_allclose(dists, true_d, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("metric", ["euclidean", "cosine", "inner_product"])
def test_4bit_codes_keep_the_recall_return_exact_distances_and_reopen_elsewhere(
    tmp_path, data, queries, metric
):
    """4-bit codes rank coarsely (on these clustered vectors under cosine, the 40 nearest by
    code hold 0.87 of the true 10): the default rerank measures up to half the beam again,
    and at ef 128 recall is within the margin of the float index's (oracles: brute force, the
    plain index, exact distances in NumPy, a reader in a fresh process)."""
    true_ids, _ = brute_force_knn(data, queries, K, metric)
    plain = VectorIndex(None, DIMS, options(metric, None))
    plain.add_batch(data, threads=1)
    path = tmp_path / "int4.chassis"
    coded = VectorIndex(path, DIMS, options(metric, "int4"))
    coded.add_batch(data, threads=1)
    assert coded.trained and coded.quantization == "int4"
    assert 'quantization="int4"' in repr(coded)
    ef = 128
    pid, _ = plain.search_batch(queries, K, ef=ef)
    cid, cdist = coded.search_batch(queries, K, ef=ef)
    rp, rc = recall_at_k(pid, true_ids), recall_at_k(cid, true_ids)
    assert rc >= rp - RECALL_MARGIN, f"ef {ef}: recall {rc:.3f} with codes, {rp:.3f} without"
    np.testing.assert_allclose(
        cdist, exact_distances(data, cid, queries, metric), rtol=1e-4, atol=1e-4
    )
    # the walk's own order alone (rerank=k) finds fewer: the codes are coarse, the rerank is
    # what makes up for them
    rid, _ = coded.search_batch(queries, K, ef=128, rerank=K)
    assert recall_at_k(rid, true_ids) < recall_at_k(cid, true_ids)
    report = coded.check()
    assert report.ok and report.corrupt == []
    coded.flush()
    np.save(tmp_path / "queries.npy", queries)
    child = run_python(
        """
        import json, sys
        import numpy as np
        import chassis
        reader = chassis.IndexReader(sys.argv[1])
        ids, dists = reader.search_batch(np.load(sys.argv[2]), 10, ef=128)
        print(json.dumps([reader.quantization, reader.check().ok, ids.tolist(), dists.tolist()]))
        """,
        path,
        tmp_path / "queries.npy",
    )
    assert child.returncode == 0, child.stderr
    quantization, ok, ids, dists = json.loads(child.stdout)
    assert quantization == "int4" and ok
    assert ids == cid.tolist()
    np.testing.assert_array_equal(np.float32(dists), cdist)


def test_4bit_codes_take_half_the_bytes_of_8bit_and_survive_deletes_compact_save_load(tmp_path):
    n, dims = 3000, 256
    data = clustered_data(n, dims, seed=21)
    queries = clustered_data(40, dims, seed=21, sample_seed=22)
    int8 = VectorIndex(None, dims, options("euclidean", "int8"))
    int8.add_batch(data[:1000])
    index = VectorIndex(tmp_path / "c.chassis", dims, options("euclidean", "int4"))
    index.add_batch(data)
    # 256 dimensions: 128 bytes of 4-bit codes a row against 256 of 8-bit ones
    per_row8 = int8.memory_stats()["code_bytes"] / 1000
    per_row4 = index.memory_stats()["code_bytes"] / n
    assert 120 <= per_row4 <= 140 and 250 <= per_row8 <= 270, (per_row4, per_row8)
    gone = np.arange(0, n, 4)
    for i in gone:
        index.delete(int(i))
    index.compact()
    assert index.trained and index.check().ok and len(index) == n - len(gone)
    live = np.setdiff1d(np.arange(n), gone)
    true_ids, _ = brute_force_knn(data[live], queries, K, "euclidean", ids=live)
    ids, dists = index.search_batch(queries, K, ef=128)
    assert not np.isin(ids, gone).any()
    assert recall_at_k(ids, true_ids) >= 0.9
    np.testing.assert_allclose(
        dists, exact_distances(data, ids, queries, "euclidean"), rtol=1e-4, atol=1e-4
    )
    index.save(tmp_path / "saved.chassis")
    loaded = VectorIndex.load(tmp_path / "saved.chassis")
    assert loaded.quantization == "int4" and loaded.check().ok
    lids, ld = loaded.search_batch(queries, K, ef=128)
    np.testing.assert_array_equal(lids, ids)
    np.testing.assert_array_equal(ld, dists)


def test_single_adds_of_long_vectors_link_on_the_codes_and_find_as_well(tmp_path):
    """Small batches of an int8 index with float32 vectors of 1 KiB or more link on the codes
    (the half copy is for large batches). Oracles: brute force over everything added, the same
    adds into an index without codes, each added vector finding itself, and check()."""
    n, dims = 3000, 256
    data = clustered_data(n, dims, seed=41)
    queries = clustered_data(60, dims, seed=41, sample_seed=42)
    coded = VectorIndex(tmp_path / "c.chassis", dims, options("euclidean", "int8"))
    plain = VectorIndex(None, dims, options("euclidean", None))
    for index in (coded, plain):
        index.add_batch(data[:1500])
        for i in range(1500, n):
            index.add(data[i])
    assert coded.trained
    true_ids, _ = brute_force_knn(data, queries, K, "euclidean")
    rp = recall_at_k(plain.search_batch(queries, K, ef=64)[0], true_ids)
    rc = recall_at_k(coded.search_batch(queries, K, ef=64)[0], true_ids)
    assert rc >= rp - RECALL_MARGIN, (rc, rp)
    late = np.arange(1500, n, 7)
    ids, dists = coded.search_batch(data[late], 1, ef=64)
    assert (ids[:, 0] == late).mean() >= 0.99, "the singly added vectors are found"
    np.testing.assert_allclose(dists[ids[:, 0] == late, 0], 0.0, atol=1e-3)
    report = coded.check()
    assert report.ok and report.unreachable == [], report
