"""chassis.datasets: file formats (round trips, memory mapping, malformed files), folders,
HDF5, generated data, exact ground truth against a naive loop, and recall_at_k."""

from __future__ import annotations

import json
import mmap
import struct
import warnings
from pathlib import Path

import numpy as np
import pytest
from chassis import datasets as D
from chassis.datasets import DatasetError

NO_ID = 2**64 - 1

# extension -> (element type, mapped)
FORMATS = {
    ".fvecs": np.float32,
    ".ivecs": np.int32,
    ".bvecs": np.uint8,
    ".fbin": np.float32,
    ".ibin": np.int32,
    ".u8bin": np.uint8,
    ".i8bin": np.int8,
    ".npy": np.float32,
}


def _sample(dtype, n=23, d=5, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal((n, d)).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -1000), min(info.max, 1000), (n, d), endpoint=True).astype(
        dtype
    )


def _is_file_mapped(arr: np.ndarray) -> bool:
    """True when `arr` is a view of a memory map (np.memmap or a mmap.mmap buffer)."""
    obj = arr
    while obj is not None:
        if isinstance(obj, (np.memmap, mmap.mmap)):
            return True
        obj = getattr(obj, "base", None)
    return False


# ---------------------------------------------------------------- round trips and mapping
@pytest.mark.parametrize("ext", sorted(FORMATS))
def test_round_trip_every_format(tmp_path, ext):
    dtype = FORMATS[ext]
    data = _sample(dtype)
    path = tmp_path / f"x{ext}"
    D.write(path, data)
    got = D.read(path)
    assert got.dtype == dtype and got.shape == data.shape
    np.testing.assert_array_equal(got, data)
    copy = D.read(path, mmap=False)
    assert not _is_file_mapped(copy)
    np.testing.assert_array_equal(copy, data)


@pytest.mark.parametrize("ext", sorted(FORMATS))
def test_reads_are_memory_maps_of_the_file(tmp_path, ext):
    """The array is a read-only map: a byte changed in the file shows through it."""
    dtype = FORMATS[ext]
    data = _sample(dtype, n=7, d=3)
    path = tmp_path / f"x{ext}"
    D.write(path, data)
    got = D.read(path)
    assert _is_file_mapped(got)
    assert not got.flags.writeable
    # where element [2, 1] lies in the file
    item = np.dtype(dtype).itemsize
    if ext in D.VECS_TYPES:
        offset = 2 * (4 + 3 * item) + 4 + 1 * item
    elif ext in D.BIN_TYPES:
        offset = 8 + (2 * 3 + 1) * item
    else:
        offset = path.stat().st_size - data.nbytes + (2 * 3 + 1) * item
    new_value = np.array([42], dtype=dtype)
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(new_value.tobytes())
    assert got[2, 1] == 42
    assert got[2, 0] == data[2, 0] and got[2, 2] == data[2, 2]


def test_fvecs_is_a_strided_view_past_the_row_headers(tmp_path):
    data = _sample(np.float32, n=10, d=4)
    D.write_fvecs(tmp_path / "a.fvecs", data)
    got = D.read_fvecs(tmp_path / "a.fvecs")
    assert got.strides == (4 + 4 * 4, 4)
    raw = np.memmap(tmp_path / "a.fvecs", dtype="<i4", mode="r")
    assert (raw.reshape(10, 5)[:, 0] == 4).all()


def test_specific_readers_and_writers(tmp_path):
    f = _sample(np.float32)
    i = _sample(np.int32)
    b = _sample(np.uint8)
    for write, read, arr, name in [
        (D.write_fvecs, D.read_fvecs, f, "a.fvecs"),
        (D.write_ivecs, D.read_ivecs, i, "a.ivecs"),
        (D.write_bvecs, D.read_bvecs, b, "a.bvecs"),
        (D.write_fbin, D.read_fbin, f, "a.fbin"),
        (D.write_ibin, D.read_ibin, i, "a.ibin"),
        (D.write_u8bin, D.read_u8bin, b, "a.u8bin"),
    ]:
        write(tmp_path / name, arr)
        np.testing.assert_array_equal(read(tmp_path / name), arr)
    # the texmex / big-ann layouts byte for byte
    raw = (tmp_path / "a.fbin").read_bytes()
    assert struct.unpack("<II", raw[:8]) == f.shape and raw[8:] == f.tobytes()
    raw = (tmp_path / "a.bvecs").read_bytes()
    assert struct.unpack("<i", raw[:4]) == (5,) and raw[4:9] == b[0].tobytes()


def test_empty_files(tmp_path):
    (tmp_path / "e.fvecs").write_bytes(b"")
    assert D.read_fvecs(tmp_path / "e.fvecs").shape == (0, 0)
    D.write_fbin(tmp_path / "e.fbin", np.zeros((0, 7), np.float32))
    assert D.read_fbin(tmp_path / "e.fbin").shape == (0, 7)


def test_writers_refuse_values_that_do_not_fit(tmp_path):
    with pytest.raises(DatasetError, match="do not fit"):
        D.write_bvecs(tmp_path / "x.bvecs", np.array([[1, 300]]))
    with pytest.raises(DatasetError, match="cannot write"):
        D.write_ivecs(tmp_path / "x.ivecs", np.array([[1.5, 2.0]]))
    with pytest.raises(DatasetError, match="2-D"):
        D.write_fvecs(tmp_path / "x.fvecs", np.zeros(3, np.float32))
    with pytest.raises(DatasetError, match="unknown extension"):
        D.write(tmp_path / "x.txt", np.zeros((1, 1)))
    # A float64 value beyond float32 would become infinity: refused, with its position.
    big = np.ones((3, 4))
    big[2, 1] = 1e39
    for name in ("x.fvecs", "x.fbin"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(DatasetError, match=r"1 values lie beyond .* at \(2, 1\)"):
                D.write(tmp_path / name, big)
        assert not (tmp_path / name).exists() or (tmp_path / name).stat().st_size == 0
    # Rows of 0 dimensions: the reader would refuse the file the writer made.
    with pytest.raises(DatasetError, match="0 dimensions"):
        D.write_fbin(tmp_path / "z.fbin", np.zeros((3, 0), np.float32))


def test_bin_ground_truth_refuses_float_ids_and_keeps_the_padding(tmp_path):
    dist = np.zeros((1, 3), np.float32)
    with pytest.raises(DatasetError, match="not an integer type"):
        D.write_bin_ground_truth(tmp_path / "gt.ibin", np.array([[1.7, 2.0, 3.0]]), dist)
    with pytest.raises(DatasetError, match="do not fit"):
        D.write_bin_ground_truth(tmp_path / "gt.ibin", np.array([[2**40, 1, 2]], np.uint64), dist)
    # search_batch's padding id is the format's -1 (the oracle: read_bin_ground_truth).
    padded = np.array([[5, 2**64 - 1, 2**64 - 1]], dtype=np.uint64)
    D.write_bin_ground_truth(tmp_path / "gt.ibin", padded, dist)
    np.testing.assert_array_equal(D.read_bin_ground_truth(tmp_path / "gt.ibin")[0], [[5, -1, -1]])


def test_bin_ground_truth_round_trip(tmp_path):
    ids = np.arange(12, dtype=np.int32).reshape(3, 4)
    dist = np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4)
    D.write_bin_ground_truth(tmp_path / "gt.ibin", ids, dist)
    got_ids, got_dist = D.read_bin_ground_truth(tmp_path / "gt.ibin")
    np.testing.assert_array_equal(got_ids, ids)
    np.testing.assert_array_equal(got_dist, dist)
    assert _is_file_mapped(got_ids) and _is_file_mapped(got_dist)
    np.testing.assert_array_equal(D.read_ibin(tmp_path / "gt.ibin"), ids)  # the ids part


# ---------------------------------------------------------------- malformed files
def _fvecs_rows(*rows: tuple[int, list[float]]) -> bytes:
    return b"".join(struct.pack("<i", d) + np.asarray(v, "<f4").tobytes() for d, v in rows)


def _raises_at(path: Path, offset: int, match: str, fn=D.read):
    with pytest.raises(DatasetError, match=match) as info:
        fn(path)
    err = info.value
    assert isinstance(err, ValueError)
    assert err.path == path and err.offset == offset
    assert str(path) in str(err) and f"byte offset {offset}" in str(err)
    return err


def test_truncated_fvecs_names_file_and_offset(tmp_path):
    path = tmp_path / "t.fvecs"
    D.write_fvecs(path, _sample(np.float32, n=5, d=4))
    path.write_bytes(path.read_bytes()[:-3])
    _raises_at(path, 4 * 20, "truncated")  # rows are 4 + 16 bytes; row 4 is cut


def test_inconsistent_dimensions_in_fvecs(tmp_path):
    path = tmp_path / "i.fvecs"
    path.write_bytes(
        _fvecs_rows(
            (4, [1, 2, 3, 4]),
            (4, [1, 2, 3, 4]),
            (4, [0, 0, 0, 0]),
            (5, [1, 2, 3]),
            (4, [1, 2, 3, 4]),
        )
    )
    _raises_at(path, 60, "row 3 has dimension header 5 but row 0 has 4")


def test_wrong_record_length_in_fvecs(tmp_path):
    """Rows claim 4 values but hold 3: the second 'header' read is a float."""
    path = tmp_path / "w.fvecs"
    path.write_bytes(_fvecs_rows((4, [1, 2, 3]), (4, [1, 2, 3]), (4, [1, 2, 3])))
    _raises_at(path, 20, "inconsistent dimensions")


@pytest.mark.parametrize("dims", [0, -3])
def test_zero_or_negative_dimensions(tmp_path, dims):
    path = tmp_path / "z.ivecs"
    path.write_bytes(struct.pack("<i", dims) + b"\0" * 16)
    _raises_at(path, 0, "must be positive")


def test_file_shorter_than_a_header(tmp_path):
    (tmp_path / "s.bvecs").write_bytes(b"\x01\x00")
    _raises_at(tmp_path / "s.bvecs", 0, "too short")
    (tmp_path / "s.fbin").write_bytes(b"\x01\x00\x00\x00\x02")
    _raises_at(tmp_path / "s.fbin", 0, "too short")


def test_truncated_bvecs(tmp_path):
    path = tmp_path / "t.bvecs"
    D.write_bvecs(path, _sample(np.uint8, n=6, d=10))
    path.write_bytes(path.read_bytes()[:-1])
    _raises_at(path, 5 * 14, "truncated")


def test_truncated_fbin_and_trailing_bytes(tmp_path):
    path = tmp_path / "t.fbin"
    D.write_fbin(path, _sample(np.float32, n=10, d=4))
    full = path.read_bytes()
    path.write_bytes(full[:-8])  # half of row 9
    _raises_at(path, 8 + 9 * 16, "truncated")
    path.write_bytes(full + b"\0" * 5)
    _raises_at(path, 8 + 10 * 16, "5 bytes past")


def test_bin_header_with_negative_or_zero_dimensions(tmp_path):
    path = tmp_path / "n.u8bin"
    path.write_bytes(struct.pack("<Ii", 3, -1) + b"\0" * 12)
    _raises_at(path, 4, "not a count")
    path.write_bytes(struct.pack("<II", 3, 0))
    _raises_at(path, 4, "0 dimensions")


def test_truncated_npy(tmp_path):
    path = tmp_path / "t.npy"
    np.save(path, np.zeros((10, 4), np.float32))
    size = path.stat().st_size
    path.write_bytes(path.read_bytes()[:-10])
    _raises_at(path, size - 10, "truncated")
    path.write_bytes(b"not numpy at all")
    _raises_at(path, 0, "npy header")


# ---------------------------------------------------------------- folders and load()
def test_npy_folder_float16_base_converted(tmp_path):
    base = _sample(np.float32, n=50, d=8)
    np.save(tmp_path / "base.npy", base.astype(np.float16))
    np.save(tmp_path / "queries.npy", base[:5])
    np.save(tmp_path / "gt_ids.npy", np.arange(15).reshape(5, 3))
    (tmp_path / "stats.json").write_text(json.dumps({"metric": "cosine"}))
    ds = D.load(tmp_path)
    assert ds.base.dtype == np.float32 and ds.base.shape == (50, 8)
    np.testing.assert_allclose(ds.base, base, atol=1e-2)
    assert _is_file_mapped(ds.queries)  # float32 stays mapped
    assert ds.metric == "cosine" and ds.gt_ids.shape == (5, 3)


def test_texmex_style_folder(tmp_path):
    base, queries = D.clustered(200, 6, 10, seed=3)
    truth, _ = D.ground_truth(base, queries, 5)
    D.write_fvecs(tmp_path / "sift_base.fvecs", base)
    D.write_fvecs(tmp_path / "sift_learn.fvecs", base[:20])
    D.write_fvecs(tmp_path / "sift_query.fvecs", queries)
    D.write_ivecs(tmp_path / "sift_groundtruth.ivecs", truth)
    ds = D.load(tmp_path)
    assert ds.name == tmp_path.name and ds.metric == "euclidean"
    np.testing.assert_array_equal(ds.base, base)
    np.testing.assert_array_equal(ds.queries, queries)
    np.testing.assert_array_equal(ds.gt_ids, truth)
    assert _is_file_mapped(ds.base)


def test_big_ann_style_folder(tmp_path):
    base, queries = D.clustered(100, 4, 7, seed=4)
    ids, dist = D.ground_truth(base, queries, 3)
    D.write_u8bin(tmp_path / "base.100.u8bin", np.clip(base * 10 + 128, 0, 255).astype(np.uint8))
    D.write_u8bin(
        tmp_path / "query.public.7.u8bin", np.clip(queries * 10 + 128, 0, 255).astype(np.uint8)
    )
    D.write_bin_ground_truth(tmp_path / "groundtruth.public.7.ibin", ids, dist)
    ds = D.load(tmp_path)
    assert ds.base.dtype == np.float32 and ds.base.shape == (100, 4)
    np.testing.assert_array_equal(ds.gt_ids, ids)
    np.testing.assert_allclose(ds.gt_dist, dist)


@pytest.mark.parametrize(
    ("files", "match"),
    [
        ({"base.npy": (10, 4), "queries.npy": (3, 5)}, "queries.npy.*5 dimensions"),
        ({"a_query.fvecs": (2, 3)}, "no base vectors"),
        (
            {"a_query.fvecs": (2, 3), "one_base.fvecs": (2, 3), "two_base.fbin": (2, 3)},
            "several files",
        ),
    ],
    ids=["malformed-file-named", "missing-base", "ambiguous-base"],
)
def test_a_folder_load_cannot_use_is_named(tmp_path, files, match):
    for name, shape in files.items():
        D.write(tmp_path / name, np.zeros(shape, np.float32))
    with pytest.raises(DatasetError, match=match):
        D.load(tmp_path)


def test_load_single_file(tmp_path):
    data = _sample(np.uint8, n=9, d=3)
    D.write_bvecs(tmp_path / "v.bvecs", data)
    ds = D.load(tmp_path / "v.bvecs")
    assert ds.base.dtype == np.float32 and ds.queries.shape == (0, 3) and ds.gt_ids is None
    np.testing.assert_array_equal(ds.base, data)
    with pytest.raises(FileNotFoundError):
        D.load(tmp_path / "missing.fvecs")


def test_hdf5_round_trip(tmp_path):
    pytest.importorskip("h5py")
    base, queries = D.clustered(120, 6, 9, seed=5)
    ids, dist = D.ground_truth(base, queries, 4, "cosine")
    path = tmp_path / "glove-like-angular.hdf5"
    D.write_hdf5(path, base, queries, ids, dist, metric="cosine")
    ds = D.load(path)
    assert ds.metric == "cosine" and ds.name == "glove-like-angular"
    np.testing.assert_array_equal(ds.base, base)
    np.testing.assert_array_equal(ds.queries, queries)
    np.testing.assert_array_equal(ds.gt_ids, ids)
    np.testing.assert_array_equal(ds.gt_dist, dist)
    assert _is_file_mapped(ds.base)  # contiguous data sets are mapped, not read
    (tmp_path / "bad.hdf5").write_bytes(b"garbage" * 10)
    with pytest.raises(DatasetError, match="bad.hdf5"):
        D.load(tmp_path / "bad.hdf5")


# ---------------------------------------------------------------- generated data
def test_clustered_is_seeded():
    a1, q1 = D.clustered(500, 8, 20, seed=7)
    a2, q2 = D.clustered(500, 8, 20, seed=7)
    a3, _ = D.clustered(500, 8, 20, seed=8)
    assert a1.dtype == np.float32 and a1.shape == (500, 8) and q1.shape == (20, 8)
    np.testing.assert_array_equal(a1, a2)
    np.testing.assert_array_equal(q1, q2)
    assert not np.array_equal(a1, a3)


# ---------------------------------------------------------------- ground truth
def _naive_knn(base, queries, k, metric):
    """One query and one base row at a time, float64, sorted by (distance, id)."""
    base = np.asarray(base, np.float64)
    out_ids, out_d = [], []
    for q in np.asarray(queries, np.float64):
        scored = []
        for i, b in enumerate(base):
            if metric == "euclidean":
                d = float(np.sqrt(((q - b) ** 2).sum()))
            elif metric == "cosine":
                d = 1.0 - float(q @ b) / (np.linalg.norm(q) * np.linalg.norm(b))
            else:
                d = -float(q @ b)
            scored.append((d, i))
        scored.sort()
        out_ids.append([i for _, i in scored[:k]])
        out_d.append([d for d, _ in scored[:k]])
    return np.array(out_ids), np.array(out_d)


@pytest.mark.parametrize("metric", ["euclidean", "cosine", "inner_product"])
def test_ground_truth_matches_a_naive_loop(metric):
    rng = np.random.default_rng(11)
    base = rng.standard_normal((157, 9)).astype(np.float32)
    queries = rng.standard_normal((13, 9)).astype(np.float32)
    want_ids, want_d = _naive_knn(base, queries, 7, metric)
    for block in (16_384, 23):  # one block, and many blocks merged
        ids, dist = D.ground_truth(base, queries, 7, metric, block=block)
        assert ids.dtype == np.int64 and dist.dtype == np.float32
        np.testing.assert_array_equal(ids, want_ids)
        np.testing.assert_allclose(dist, want_d, rtol=1e-5, atol=1e-5)


def test_ground_truth_pads_ties_and_other_inputs(tmp_path):
    base = np.array([[0, 0], [1, 0], [0, 1], [1, 0]], np.float32)  # rows 1 and 3 tie
    ids, dist = D.ground_truth(base, np.array([[0.9, 0]], np.float32), 6)
    assert ids[0].tolist() == [1, 3, 0, 2, -1, -1]
    assert np.isinf(dist[0, 4:]).all()
    # a memory-mapped strided fvecs base and a uint8 base give the same answer as arrays
    data = _sample(np.uint8, n=80, d=6)
    D.write_fvecs(tmp_path / "b.fvecs", data.astype(np.float32))
    q = data[:5].astype(np.float32) + 0.25
    want = D.ground_truth(data.astype(np.float32), q, 4)[0]
    np.testing.assert_array_equal(D.ground_truth(D.read_fvecs(tmp_path / "b.fvecs"), q, 4)[0], want)
    np.testing.assert_array_equal(D.ground_truth(data, q, 4, progress=True)[0], want)
    with pytest.raises(ValueError, match="metric"):
        D.ground_truth(data, q, 4, "hamming")


# ---------------------------------------------------------------- recall
def test_recall_at_k_hand_made_cases():
    truth = np.array([[1, 2, 3], [4, 5, 6]])
    assert D.recall_at_k(truth, truth, 3) == 1.0
    assert D.recall_at_k(truth[:, ::-1], truth, 3) == 1.0  # order inside the top k is free
    assert D.recall_at_k(np.array([[1, 9, 9], [9, 9, 9]]), truth, 3) == pytest.approx(1 / 6)
    assert D.recall_at_k(np.array([[1, 1, 1], [4, 4, 5]]), truth, 3) == pytest.approx(3 / 6)
    assert D.recall_at_k(np.array([[9, 9, 1], [4, 5, 6]]), truth, 2) == pytest.approx(2 / 4)
    assert D.recall_at_k(np.array([[2], [4]]), truth, 3) == pytest.approx(2 / 6)  # short rows


def test_recall_padding_never_matches():
    found = np.array([[NO_ID, 7], [NO_ID, NO_ID]], dtype=np.uint64)
    truth = np.array([[7, -1], [-1, -1]])  # ground_truth pads with -1
    assert D.recall_at_k(found, truth, 2) == pytest.approx(1 / 4)
    truth_u64 = np.array([[7, NO_ID], [NO_ID, NO_ID]], dtype=np.uint64)
    assert D.recall_at_k(found, truth_u64, 2) == pytest.approx(1 / 4)


def test_recall_errors():
    with pytest.raises(ValueError, match="rows"):
        D.recall_at_k(np.zeros((2, 3)), np.zeros((3, 3)), 3)
    with pytest.raises(ValueError, match="fewer than k"):
        D.recall_at_k(np.zeros((2, 3)), np.zeros((2, 2)), 3)
    with pytest.raises(ValueError, match="matrix"):
        D.recall_at_k(np.zeros(3), np.zeros(3), 1)
