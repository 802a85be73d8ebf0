"""One engine measured: built, persisted, opened again, then recall and single-thread QPS
along a sweep of ef."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from chassis.datasets import recall_at_k

from .engines import ChassisEngine, Engine
from .inputs import Loaded
from .schema import qps_at_targets
from .timing import path_bytes


def measure_sweep(
    engine: Engine,
    queries: np.ndarray,
    truth: np.ndarray,
    k: int,
    efs: Sequence[int],
    modes: Sequence[str] | None = None,
    *,
    min_seconds: float = 0.25,
    max_runs: int = 5,
    warmup: int = 100,
) -> dict[str, list[dict[str, float]]]:
    """Recall@k and QPS of an open engine for each ef and search mode: {mode: [{"ef", "recall",
    "qps"}, ...]} in sweep order.

    Before the sweep, the first `warmup` queries are searched once in each mode at the first
    ef (pages in, caches and branch predictors warm, lazy setup done). For each ef
    and mode the whole query set is searched repeatedly, until the runs add up to
    `min_seconds` or there are `max_runs` of them; QPS is from the median run, recall from
    the first.
    """
    modes = list(modes or engine.modes)
    engine.set_ef(efs[0])
    if warmup:
        for mode in modes:
            engine.search(mode, queries[:warmup], k)
    sweep: dict[str, list[dict[str, float]]] = {mode: [] for mode in modes}
    for ef in efs:
        engine.set_ef(ef)
        for mode in modes:
            ids, seconds = engine.search(mode, queries, k)
            times = [seconds]
            while sum(times) < min_seconds and len(times) < max_runs:
                times.append(engine.search(mode, queries, k)[1])
            sweep[mode].append(
                {
                    "ef": ef,
                    "recall": recall_at_k(ids, truth, k),
                    "qps": len(queries) / max(statistics.median(times), 1e-12),
                }
            )
    return sweep


@dataclass
class Plan:
    """The settings every engine of one `chassis.bench.run` is measured with."""

    k: int
    ef: list[int]
    modes: list[str]
    m: int
    ef_construction: int
    opens: int
    min_seconds: float
    max_runs: int


def measure_engine(
    engine: Engine, data: Loaded, plan: Plan, folder: Path, threads: int
) -> dict[str, Any]:
    """Build, persist, reopen and sweep one engine; every figure in a dict."""
    path = str(folder / f"{engine.name}.index")
    assert data.truth is not None
    out: dict[str, Any] = {"version": engine.version}
    out["build_s"] = engine.build(
        path,
        data.base,
        metric=data.metric,
        m=plan.m,
        ef_construction=plan.ef_construction,
        threads=threads,
    )
    out["vectors_per_s"] = len(data.base) / max(out["build_s"], 1e-12)
    out["persist_s"] = engine.persist_seconds
    engine.close()
    out["file_bytes"] = path_bytes(path)
    opens = [engine.open_seconds(path) for _ in range(plan.opens)]
    out["open_ms"] = statistics.median(opens) * 1e3
    if isinstance(engine, ChassisEngine):
        engine.read_only = True
        try:
            out["open_read_only_ms"] = (
                statistics.median(engine.open_seconds(path) for _ in range(plan.opens)) * 1e3
            )
        finally:
            engine.read_only = False
    engine.open(path)
    try:
        out["sweep"] = measure_sweep(
            engine,
            data.queries,
            data.truth,
            plan.k,
            plan.ef,
            plan.modes,
            min_seconds=plan.min_seconds,
            max_runs=plan.max_runs,
            warmup=min(len(data.queries), 1_000),
        )
    finally:
        engine.close()
    out["qps_at"] = {mode: qps_at_targets(points) for mode, points in out["sweep"].items()}
    return out
