"""pytest-benchmark suite for the hot paths: one search, search_batch, add + flush, open.

Not part of the default test run (pytest's testpaths is tests/). Run it with

    python -m pytest benchmarks/test_bench_hot_paths.py                  # all, default rounds
    python -m pytest benchmarks/test_bench_hot_paths.py --benchmark-json=hot.json
    python -m pytest benchmarks/test_bench_hot_paths.py --benchmark-compare   # against the last --benchmark-autosave

Skipped as a whole when pytest-benchmark is not installed (pip install pytest-benchmark,
or the `bench` extra). Data: 20,000 clustered 64-dimensional vectors (seed 0), M=16,
ef_construction=200, built once per session; searches on one thread.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

pytest.importorskip("pytest_benchmark", reason="pytest-benchmark is not installed")

import chassis  # noqa: E402
from chassis.datasets import clustered  # noqa: E402

N, DIMS, QUERIES, K = 20_000, 64, 1_000, 10


@pytest.fixture(scope="module")
def data():
    return clustered(N, DIMS, QUERIES, seed=0)


@pytest.fixture(scope="module")
def built(tmp_path_factory, data):
    """Path of an index over the base, flushed and closed."""
    base, _ = data
    path = tmp_path_factory.mktemp("hot") / "hot.chassis"
    with chassis.VectorIndex(path, DIMS, chassis.IndexOptions(max_connections=16)) as index:
        index.add_batch(base)
    return path


@pytest.fixture
def reader(built):
    index = chassis.IndexReader(built)
    yield index
    index.close()


@pytest.mark.parametrize("ef", [16, 64, 256])
def test_search_one(benchmark, reader, data, ef):
    queries = data[1]
    rows = itertools.cycle(list(queries))
    benchmark.extra_info.update(n=N, dims=DIMS, k=K, ef=ef)
    hits = benchmark(lambda: reader.search(next(rows), K, ef=ef))
    assert len(hits) == K


@pytest.mark.parametrize("ef", [16, 64, 256])
def test_search_batch_one_thread(benchmark, reader, data, ef):
    queries = data[1]
    benchmark.extra_info.update(n=N, dims=DIMS, k=K, ef=ef, queries=len(queries))
    ids, _ = benchmark(lambda: reader.search_batch(queries, K, ef=ef, threads=1))
    assert ids.shape == (len(queries), K)


def test_search_batch_all_cores(benchmark, reader, data):
    queries = data[1]
    benchmark.extra_info.update(n=N, dims=DIMS, k=K, ef=64, queries=len(queries))
    ids, _ = benchmark(lambda: reader.search_batch(queries, K, ef=64))
    assert ids.shape == (len(queries), K)


def test_add_and_flush(benchmark, tmp_path, data):
    """One add then a durable flush, on an index of 5,000 vectors that grows as it runs."""
    base, queries = data
    with chassis.VectorIndex(tmp_path / "grow.chassis", DIMS) as index:
        index.add_batch(base[:5_000])
        index.flush()
        rng = np.random.default_rng(1)
        fresh = (queries + rng.normal(0, 1e-3, queries.shape)).astype(np.float32)
        rows = itertools.cycle(list(fresh))

        def add_flush():
            index.add(next(rows))
            index.flush()

        benchmark.pedantic(add_flush, rounds=200, warmup_rounds=5)
        assert len(index) >= 5_000 + 200


@pytest.mark.parametrize("read_only", [False, True], ids=["writer", "reader"])
def test_open(benchmark, built, read_only):
    def open_close():
        chassis.VectorIndex(built, read_only=read_only).close()

    benchmark(open_close)
