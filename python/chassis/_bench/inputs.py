"""What `chassis.bench.run` measures on: its data arguments read, checked and cut to one base,
one set of queries and (when known) their ground truth."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

from chassis import datasets

METRICS: tuple[str, ...] = ("euclidean", "cosine", "inner_product")
QUICK_BASE = 10_000  # a quick run's generated vectors, and its cap on a data set's base
QUICK_QUERIES = 200  # a quick run's queries, generated or kept of a data set's

PathLike: TypeAlias = str | os.PathLike[str]
Data: TypeAlias = (
    PathLike | datasets.Dataset | npt.NDArray[Any] | tuple[npt.ArrayLike, npt.ArrayLike] | None
)


@dataclass
class Loaded:
    label: str
    base: npt.NDArray[np.float32]
    queries: npt.NDArray[np.float32]
    truth: np.ndarray | None
    metric: str
    source: str
    sampled_from: dict[str, int] | None = None  # a quick run's sample: the sizes before it
    truth_origin: str = "computed"
    truth_seconds: float | None = None

    def __post_init__(self) -> None:
        self.truth_origin = "given" if self.truth is not None else "computed"


def describe(value: Any) -> Any:
    """A run() argument as a JSON-friendly value: arrays by shape, paths as strings."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, datasets.Dataset):
        return f"Dataset {value.name!r}"
    if isinstance(value, np.ndarray):
        return f"array {value.shape}"
    if isinstance(value, tuple):
        return [describe(v) for v in value]
    return str(value)


def _matrix(array: npt.ArrayLike, what: str) -> np.ndarray:
    out = array if isinstance(array, np.ndarray) else np.asarray(array)
    if out.ndim != 2:
        raise ValueError(f"{what} has shape {out.shape}, not (count, dimensions)")
    return out


def load_data(
    data: Data,
    *,
    queries: int | PathLike | npt.NDArray[Any] | None,
    truth: PathLike | npt.NDArray[Any] | None,
    n: int | None,
    dims: int | None,
    metric: str | None,
    seed: int,
    quick: bool,
) -> Loaded:
    """The base, queries, ground truth (or None) and metric for the arguments of `chassis.bench.run`."""
    count = queries if isinstance(queries, int) and not isinstance(queries, bool) else None
    if count is not None and count < 1:
        raise ValueError(f"queries is {count}: give a positive count, a file or an array")
    if n is not None and n < 1:
        raise ValueError(f"n is {n}: give a positive count of base vectors")
    given_queries = None if count is not None or queries is None else queries
    if metric is not None and metric not in METRICS:
        raise ValueError(f"metric is {metric!r}; known: {', '.join(METRICS)}")

    if data is None:
        if given_queries is not None or truth is not None:
            raise ValueError(
                "queries from a file or an array, and truth, need a data set: generated data "
                "makes its own queries"
            )
        size = n or (QUICK_BASE if quick else 20_000)
        q = count or (QUICK_QUERIES if quick else 1_000)
        base, generated = datasets.clustered(size, dims or 64, q, seed=seed)
        return Loaded(
            f"clustered (generated, seed {seed})",
            base,
            generated,
            None,
            metric or "euclidean",
            "generated",
        )
    if dims is not None:
        raise ValueError("dims is for generated data; a data set has its own dimensions")

    gt: np.ndarray | None = None
    qs: np.ndarray | None = None
    found_metric = "euclidean"
    if isinstance(data, datasets.Dataset):
        base, qs, gt, found_metric, label = (
            data.base,
            data.queries,
            data.gt_ids,
            data.metric,
            data.name,
        )
        source = f"Dataset {data.name!r}"
    elif isinstance(data, tuple):
        if len(data) != 2:
            raise ValueError(f"data is a tuple of {len(data)}: give (base, queries)")
        base, qs = _matrix(data[0], "the base"), _matrix(data[1], "the queries")
        label = source = "arrays"
    elif isinstance(data, np.ndarray):
        base, label, source = _matrix(data, "data"), "array", "array"
    else:
        path = Path(data)
        if not path.exists():
            raise FileNotFoundError(f"{path}: no such file or folder")
        source = str(path)
        if path.is_dir() or path.suffix.lower() in datasets.HDF5_EXTENSIONS:
            ds = datasets.load(path)
            base, qs, gt, found_metric, label = (
                ds.base,
                ds.queries,
                ds.gt_ids,
                ds.metric,
                ds.name,
            )
        else:
            base, label = datasets.read(path), path.name
            if base.ndim != 2:
                raise ValueError(f"{path} holds an array of shape {base.shape}, not (count, dims)")

    if given_queries is not None:
        if isinstance(given_queries, str | os.PathLike):
            qs = datasets.read(given_queries)
            label += f" + queries {Path(given_queries).name}"
        else:
            qs = _matrix(given_queries, "queries")
            label += " + queries (array)"
        gt = None
    elif qs is None or len(qs) == 0:
        # one file or array (or a folder of base vectors only): its last Q rows are the queries
        q = count or min(QUICK_QUERIES if quick else 1_000, max(1, len(base) // 10))
        if q >= len(base):
            raise ValueError(f"{label} has {len(base)} rows: too few to split off {q} queries")
        base, qs = base[:-q], base[-q:]
        gt, count = None, None
        label += f" (last {q} rows as queries)"
    if truth is not None:
        # a big-ann ground-truth .ibin reads as its ids
        gt = datasets.read(truth) if isinstance(truth, str | os.PathLike) else np.asarray(truth)
    if metric and metric != found_metric:
        found_metric, gt = metric, None  # the given ground truth is for another metric
    if n is not None and n < len(base):
        base, gt = base[:n], None  # the given ground truth covers the whole base
    if count is not None and count < len(qs):
        qs = qs[:count]
        gt = None if gt is None else gt[:count]

    sampled_from = None
    if quick and (
        (n is None and len(base) > QUICK_BASE) or (count is None and len(qs) > QUICK_QUERIES)
    ):
        sampled_from = {"n": len(base), "queries": len(qs)}
        if n is None and len(base) > QUICK_BASE:
            rows = np.sort(np.random.default_rng(seed).choice(len(base), QUICK_BASE, replace=False))
            base, gt = base[rows], None  # ids change: the ground truth is computed again
        if count is None and len(qs) > QUICK_QUERIES:
            qs = qs[:QUICK_QUERIES]
            gt = None if gt is None else gt[:QUICK_QUERIES]  # same base: still exact

    if gt is not None and len(gt) != len(qs):
        raise ValueError(f"the ground truth has {len(gt)} rows for {len(qs)} queries")
    if qs.ndim != 2 or qs.shape[1] != base.shape[1]:
        raise ValueError(f"queries have shape {qs.shape}, the base {base.shape}")
    return Loaded(
        label,
        np.ascontiguousarray(base, dtype=np.float32),
        np.ascontiguousarray(qs, dtype=np.float32),
        gt,
        found_metric,
        source,
        sampled_from,
    )
