"""The one shape of every measured figure, in `chassis bench --json` and in benchmarks/results/:

a sweep point      Point: {"ef", "recall", "qps"} (+ "runs", "distances"; flattened into a
                   results file with "engine", "dataset", "mode")
QPS at a recall    QpsAt: {"qps": float | None, "how": "interpolated" | "at-first-point" |
                   "not-reached"}, keyed by str(target) ("0.9", "0.95", "0.99")
a summary          {"qps_at": {mode: {target: QpsAt}}, "sweep": {mode: [Point]}, ...scalars}
ratios             ratio(ours, theirs) of one figure; ratios(ours, peer) of two summaries;
                   versus_best_peer(...) against the best engine that is not ours
several passes     summarize(passes): the median of each figure, point by point
the file           write_json(path, document)
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict, cast

import numpy as np

from .timing import median

TARGETS = (0.90, 0.95, 0.99)  # recall levels at which QPS is compared


class Point(TypedDict, total=False):
    """One measured point of an ef sweep."""

    engine: str
    dataset: str
    mode: str  # "batch", "loop", "batch2", ... (the engine's search style)
    ef: int
    recall: float
    qps: float
    runs: int  # timed calls whose median gave qps
    distances: float  # distances computed per query, where counted


class QpsAt(TypedDict):
    """A figure (QPS, or another per-point value) interpolated at one recall target."""

    qps: float | None
    how: str  # "interpolated", "at-first-point" (a lower bound) or "not-reached"


def interpolate_qps(
    sweep: Sequence[tuple[float, float]], target: float
) -> tuple[float | None, str]:
    """QPS at recall `target`, linear between the two sweep points around it.

    `sweep` is (recall, qps) in sweep order (growing ef). The answer is taken
    between the first point reaching `target` and the point before it. Returns
    (qps, how): how is "interpolated", "at-first-point" when even the smallest ef
    reaches the target (its QPS is then a lower bound), or "not-reached" (qps None).
    """
    for i, (recall, qps) in enumerate(sweep):
        if recall >= target:
            if i == 0:
                return qps, "at-first-point"
            r0, q0 = sweep[i - 1]
            if recall == r0:
                return qps, "interpolated"
            frac = (target - r0) / (recall - r0)
            return q0 + frac * (qps - q0), "interpolated"
    return None, "not-reached"


def ratio(ours: float | None, theirs: float | None) -> float | None:
    """ours / theirs, None when either is missing or theirs is 0."""
    if ours is None or theirs is None or theirs == 0:
        return None
    return ours / theirs


def qps_at_targets(
    points: Sequence[Mapping[str, Any]], targets: Sequence[float] = TARGETS, key: str = "qps"
) -> dict[str, QpsAt]:
    """{str(target): QpsAt} for sweep points [{"ef", "recall", key}, ...] in sweep order;
    `key` names the figure interpolated (QPS by default, e.g. "distances" too)."""
    sweep = [(p["recall"], p[key]) for p in points]
    out: dict[str, QpsAt] = {}
    for t in targets:
        value, how = interpolate_qps(sweep, t)
        out[str(t)] = {"qps": value, "how": how}
    return out


def median_qps_at(per_pass: Sequence[Mapping[str, QpsAt]]) -> dict[str, QpsAt]:
    """Several passes' qps_at_targets() as one: the median value at each target, reported
    only when every pass reached it; "at-first-point" when any pass was a lower bound."""
    out: dict[str, QpsAt] = {}
    for t in per_pass[0] if per_pass else ():
        cells = [p[t] for p in per_pass]
        hows = {c["how"] for c in cells}
        if "not-reached" in hows:
            out[t] = {"qps": None, "how": "not-reached"}
        else:
            how = "at-first-point" if "at-first-point" in hows else "interpolated"
            out[t] = {"qps": median(c["qps"] for c in cells), "how": how}
    return out


def ratios(
    ours: Mapping[str, Any],
    peer: Mapping[str, Any],
    keys: Sequence[str] = ("build_s", "open_ms", "file_bytes"),
) -> dict[str, Any]:
    """ours / peer of two summaries: each of `keys` both have, and "qps_at" {mode: {target:
    ratio}} for the modes both have. QPS: > 1 means ours is faster; times and sizes: < 1."""
    r: dict[str, Any] = {key: ratio(ours.get(key), peer.get(key)) for key in keys}
    mine, theirs = ours.get("qps_at", {}), peer.get("qps_at", {})
    r["qps_at"] = {
        mode: {
            t: ratio(cell["qps"], theirs[mode].get(t, {}).get("qps"))
            for t, cell in mine[mode].items()
        }
        for mode in mine
        if mode in theirs
    }
    return r


def best_peer(
    values: Mapping[str, float | None], better: str, ours: Iterable[str] = ("chassis",)
) -> tuple[str | None, float | None]:
    """(engine, value) of the best engine not in `ours`: the highest value when `better` is
    "high" (QPS), the lowest when "low" (times, sizes); (None, None) when none has one."""
    mine = set(ours)
    found = [(v, n) for n, v in values.items() if n not in mine and v is not None]
    if not found:
        return None, None
    value, name = (max if better == "high" else min)(found)
    return name, value


def versus_best_peer(
    results: Mapping[str, Any],
    columns: Sequence[tuple[str, Callable[[str, Any], float | None], str]],
    who: str = "chassis",
    ours: Iterable[str] = ("chassis",),
) -> dict[str, dict[str, Any]]:
    """{column: {"chassis", "best_peer", "peer_value", "ratio"}}: `who` / the best engine not
    in `ours`, for each (key, getter(engine, summary) -> value, "high" | "low") column."""
    if who not in results:
        return {}
    mine = tuple(ours)
    out = {}
    for key, getter, better in columns:
        peer, value = best_peer({n: getter(n, s) for n, s in results.items()}, better, mine)
        figure = getter(who, results[who])
        out[key] = {
            "chassis": figure,
            "best_peer": peer,
            "peer_value": value,
            "ratio": ratio(figure, value),
        }
    return out


def sweep_points(
    dataset: str, sweeps: Mapping[str, Mapping[str, Sequence[Mapping[str, Any]]]]
) -> list[Point]:
    """{engine: {mode: [points]}} flattened into Points that name their engine, data set and
    mode: the "points" list of a results file."""
    return [
        cast(Point, {"engine": engine, "dataset": dataset, "mode": mode, **p})
        for engine, modes in sweeps.items()
        for mode, points in modes.items()
        for p in points
    ]


SCALARS = ("build_s", "persist_s", "open_ms", "add_flush_ms", "file_bytes")


def summarize(passes: Sequence[dict[str, Any]], scalars: Sequence[str] = SCALARS) -> dict[str, Any]:
    """Several passes of one engine as one summary: the median of each scalar figure, the
    sweeps point by point (median recall and QPS at each ef), and QPS at each recall target
    as the median of the passes' interpolations (median_qps_at: None unless every pass
    reached it). Each pass is {scalar: value, "sweep": {mode: [Point]}, "qps_at": {mode:
    {target: QpsAt}}}."""
    s: dict[str, Any] = {key: median(p.get(key) for p in passes) for key in scalars}
    modes = passes[0]["sweep"].keys()
    s["sweep"] = {
        mode: [
            {
                "ef": pts[0]["ef"],
                "recall": median(p["recall"] for p in pts),
                "qps": median(p["qps"] for p in pts),
            }
            for pts in zip(*(p["sweep"][mode] for p in passes))
        ]
        for mode in modes
    }
    s["qps_at"] = {mode: median_qps_at([p["qps_at"][mode] for p in passes]) for mode in modes}
    return s


def json_default(value: Any) -> Any:
    """`json.dumps(default=...)` for NumPy scalars and arrays (anything else as a string)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


def write_json(path: str | os.PathLike[str], document: Mapping[str, Any]) -> Path:
    """Write a results document as indented JSON (NumPy values as plain numbers), creating
    the folder; returns the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=1, default=json_default) + "\n")
    return out
