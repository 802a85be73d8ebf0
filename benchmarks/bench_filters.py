"""Filtered search: QPS and recall at each allowed share, chassis against hnswlib and faiss.

Each engine builds one index per data set (M=16, ef_construction=200, 2 threads). For every
filter, a sweep over ef answers the queries on one thread, and recall@k is taken against the
exact k nearest of the allowed rows (brute force in NumPy):

  chassis  search_batch(queries, k, allowed=mask, ef=ef, threads=1); the plans its queries
           took (chassis.search_plans()) are recorded beside each point;
  hnswlib  knn_query(queries, k, num_threads=1, filter=callable) (a Python call per node);
  faiss    IndexHNSWFlat.search with SearchParametersHNSW(sel=IDSelectorBitmap, efSearch).

Filters, by the share of rows they allow (--shares):

  random      each row allowed with that probability (exactly that many rows, drawn);
  correlated  whole groups of nearby rows (each row's group is its nearest of 64 rows drawn
              at random), groups added until the share is reached, and only queries whose own
              group is not allowed: the allowed rows are away from every query.

Each point's QPS is the median of --passes passes over the queries (5; fewer once they took a
second together, as a slow engine's do). The summary gives QPS at recall 0.95 per share
(interpolated along the sweep; "<" marks a sweep that never reached it, with its best recall),
and chassis's ratio to its own unfiltered QPS at 0.95 on the same index.

    python benchmarks/bench_filters.py
    python benchmarks/bench_filters.py --quick
    python benchmarks/bench_filters.py --engines chassis --json out.json --plot filters.png
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import chassis
import numpy as np
from chassis import datasets
from chassis._bench import fmt, make_engine, qps_at_targets, table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from toolkit import (  # noqa: E402
    MINILM,
    Parser,
    add_json_option,
    csv,
    load_dataset,
    log,
    run_record,
    write_results,
)

GROUPS = 64  # correlated filters: rows grouped by the nearest of this many drawn rows
SLOW_POINT_S = 20.0  # a sweep stops widening ef once a point takes longer than this
# A point's passes stop once they took this long together: a pass of 300 queries at 10,000
# QPS is 30 ms, which one pause of this machine's can double; a pass of seconds is not.
REPEAT_WITHIN_S = 1.0


def _parse(argv: list[str] | None = None):
    p = Parser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", default="minilm,clustered")
    p.add_argument("--minilm", default=str(MINILM), help="the debian-minilm folder")
    p.add_argument("--engines", default="chassis,hnswlib,faiss")
    p.add_argument("--kinds", default="random,correlated")
    p.add_argument("--shares", default="0.001,0.01,0.02,0.05,0.1,0.2,0.5,1")
    p.add_argument("--efs", default="10,16,24,32,48,64,128,256")
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--m", type=int, default=16)
    p.add_argument("--efc", type=int, default=200)
    p.add_argument("--threads", type=int, default=2, help="build threads (2)")
    p.add_argument("--quick", action="store_true", help="a smoke run: small data, few points")
    p.sized("--queries", full=300, quick=50, help="queries per filter")
    p.add_argument(
        "--passes",
        type=int,
        default=5,
        help="passes per point, QPS their median (5; fewer once they took 1 s together)",
    )
    p.sized("--clustered-n", full=100_000, quick=5_000, help="rows of the clustered set")
    p.add_argument("--plot", metavar="PNG", help="plot QPS at recall 0.95 against the share")
    add_json_option(p)
    a = p.parse_args(argv)
    if a.quick:
        a.shares, a.efs, a.efc = "0.01,0.1,1", "16,64", min(a.efc, 64)
    return a


def filters(
    base: np.ndarray, queries: np.ndarray, kind: str, share: float, n_queries: int, seed: int
):
    """(allowed mask over the rows, the queries to ask) for one filter."""
    n = len(base)
    rng = np.random.default_rng(seed)
    want = max(1, round(share * n))
    if kind == "random":
        mask = np.zeros(n, dtype=bool)
        mask[rng.choice(n, size=want, replace=False)] = True
        return mask, queries[:n_queries]
    centres = base[rng.choice(n, size=GROUPS, replace=False)]
    square = (centres * centres).sum(axis=1)

    def nearest(x: np.ndarray) -> np.ndarray:  # of the centres, in euclidean distance
        return np.argmin(square - 2 * (x @ centres.T), axis=1)

    group = nearest(base)
    order = rng.permutation(GROUPS)
    mask = np.zeros(n, dtype=bool)
    allowed_groups = set()
    for g in order:
        if mask.sum() >= want:
            break
        rows = np.flatnonzero(group == g)
        mask[rows[: want - int(mask.sum())]] = True
        allowed_groups.add(int(g))
    away = ~np.isin(nearest(queries), list(allowed_groups))
    return mask, queries[away][:n_queries]


def filtered_truth(base, queries, mask, k, metric):
    rows = np.flatnonzero(mask)
    ids, _ = datasets.ground_truth(base[rows], queries, min(k, len(rows)), metric)
    return rows[ids]


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    k = truth.shape[1]
    return float(
        np.mean([len(set(f[:k].tolist()) & set(t.tolist())) / k for f, t in zip(found, truth)])
    )


class Filtered:
    """One engine's filtered batch call, for one mask."""

    def __init__(self, name: str, engine: Any, mask: np.ndarray | None):
        self.name, self.engine, self.mask = name, engine, mask
        if name == "faiss" and mask is not None:
            faiss = engine.module
            self.bits = np.packbits(mask, bitorder="little")
            self.sel = faiss.IDSelectorBitmap(len(mask), faiss.swig_ptr(self.bits))
        if name == "hnswlib" and mask is not None:
            allowed = self.mask
            self.keep = lambda label: bool(allowed[label])

    def __call__(self, queries: np.ndarray, k: int, ef: int) -> np.ndarray:
        index = self.engine.index
        if self.name.startswith("chassis"):
            ids, _ = index.search_batch(queries, k, allowed=self.mask, ef=ef, threads=1)
            return np.asarray(ids)
        if self.name == "hnswlib":
            index.set_ef(ef)
            kw = {} if self.mask is None else {"filter": self.keep}
            return np.asarray(index.knn_query(queries, k, num_threads=1, **kw)[0])
        faiss = self.engine.module
        params = faiss.SearchParametersHNSW()
        params.efSearch = ef
        if self.mask is not None:
            params.sel = self.sel
        return self.engine.index.search(self.engine._prepare(queries), k, params=params)[1]


def sweep(call: Filtered, queries, truth, k, efs, passes: int = 1) -> list[dict[str, Any]]:
    """One point per ef: recall, and QPS as the median of up to `passes` passes over the
    queries (fewer where the passes so far took `REPEAT_WITHIN_S`: a long pass is its own
    average); the plans chassis took are those of the first pass."""
    points = []
    for ef in efs:
        before = chassis.search_plans()
        start = time.perf_counter()
        found = call(queries, k, ef)
        times = [time.perf_counter() - start]
        point: dict[str, Any] = {"ef": ef, "recall": recall(found, truth)}
        if call.name.startswith("chassis"):
            after = chassis.search_plans()
            point["plans"] = {key: after[key] - before[key] for key in after}
        while len(times) < passes and sum(times) < REPEAT_WITHIN_S:
            start = time.perf_counter()
            call(queries, k, ef)
            times.append(time.perf_counter() - start)
        point["qps"] = len(queries) / float(np.median(times))
        point["passes"] = len(times)
        points.append(point)
        if times[0] > SLOW_POINT_S or point["recall"] >= 0.999:
            break
    return points


def at_95(points) -> tuple[float | None, float]:
    best = max(p["recall"] for p in points)
    return qps_at_targets(points, (0.95,))["0.95"].get("qps"), best


def run_dataset(name: str, args, engines: list[str], work: Path) -> dict[str, Any]:
    ds = load_dataset(
        name,
        minilm=args.minilm,
        queries=1_000,
        k=args.k,
        quick=args.quick,
        clustered_n=args.clustered_n,
        clustered_dims=384,
    )
    base, all_queries, metric = ds["base"], ds["queries"], ds["metric"]
    efs = [int(e) for e in csv(args.efs)]
    built = {}
    for e in engines:
        engine = make_engine(e)
        seconds = engine.build(
            str(work / f"{name}-{e}.index"),
            base,
            metric=metric,
            m=args.m,
            ef_construction=args.efc,
            threads=args.threads,
        )
        log(f"[{name}] {e} built in {seconds:.1f} s")
        built[e] = engine
    out: dict[str, Any] = {"rows": len(base), "metric": metric, "filters": []}
    queries = all_queries[: args.queries]
    truth = ds["truth"][: args.queries]
    unfiltered = (
        sweep(Filtered("chassis", built["chassis"], None), queries, truth, args.k, efs, args.passes)
        if "chassis" in built
        else []
    )
    out["unfiltered"] = unfiltered
    for kind in csv(args.kinds):
        for share in [float(s) for s in csv(args.shares)]:
            if kind == "correlated" and share >= 1:
                continue
            mask, qs = filters(base, all_queries, kind, share, args.queries, seed=1)
            t = filtered_truth(base, qs, mask, args.k, metric)
            entry = {
                "kind": kind,
                "share": share,
                "allowed": int(mask.sum()),
                "queries": len(qs),
                "engines": {},
            }
            for e, engine in built.items():
                points = sweep(Filtered(e, engine, mask), qs, t, args.k, efs, args.passes)
                entry["engines"][e] = points
                q95, best = at_95(points)
                log(f"[{name}] {kind} {share:g} {e}: QPS@0.95 {fmt(q95)} (best recall {best:.3f})")
            out["filters"].append(entry)
    for engine in built.values():
        engine.close()
    return out


def report(name: str, result: dict[str, Any], engines: list[str]) -> None:
    base_qps = at_95(result["unfiltered"])[0] if result["unfiltered"] else None
    print(
        f"\n{name}: {result['rows']:,} rows, {result['metric']}; QPS at recall 0.95, one thread"
        + (f"; chassis unfiltered {fmt(base_qps)}" if base_qps else "")
    )
    rows = []
    for f in result["filters"]:
        cells = [f"{f['kind']} {f['share']:g}", f"{f['allowed']:,}"]
        for e in engines:
            q95, best = at_95(f["engines"][e])
            cells.append(fmt(q95) if q95 else f"< ({best:.2f})")
        c = f["engines"].get("chassis")
        if c and base_qps:
            q95 = at_95(c)[0]
            cells.append(fmt(q95 / base_qps, ".2f") if q95 else "-")
            plans = {}
            for p in c:
                for key, v in p.get("plans", {}).items():
                    plans[key] = plans.get(key, 0) + v
            cells.append(" ".join(f"{k}:{v}" for k, v in plans.items() if v))
        rows.append(cells)
    extra = ["chassis / unfiltered", "chassis plans"] if "chassis" in engines else []
    print(table(["filter", "allowed", *engines, *extra], rows))


def plot(path: str, results: dict[str, Any], engines: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4), squeeze=False)
    for ax, (name, result) in zip(axes[0], results.items()):
        for kind, style in (("random", "-o"), ("correlated", "--s")):
            for e in engines:
                pts = [
                    (f["share"], at_95(f["engines"][e])[0])
                    for f in result["filters"]
                    if f["kind"] == kind
                ]
                pts = [(s, q) for s, q in pts if q]
                if pts:
                    ax.plot(*zip(*pts), style, label=f"{e} {kind}")
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="share of rows allowed",
            ylabel="QPS at recall 0.95",
            title=f"{name} ({result['rows']:,} rows)",
        )
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def flat_points(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Every measured point in the results files' one schema: mode "filtered" (with the
    filter's kind and share) or "unfiltered"."""
    out = []
    for name, result in results.items():
        for p in result["unfiltered"]:
            out.append({"engine": "chassis", "dataset": name, "mode": "unfiltered", **p})
        for f in result["filters"]:
            for engine, points in f["engines"].items():
                head = {"engine": engine, "dataset": name, "mode": "filtered"}
                out += [{**head, "kind": f["kind"], "share": f["share"], **p} for p in points]
    return out


def main() -> None:
    args = _parse()
    engines = csv(args.engines)
    versions = {e: make_engine(e).version for e in engines}
    results = {}
    with tempfile.TemporaryDirectory(prefix="chassis-filters-") as tmp:
        for name in csv(args.datasets):
            results[name] = run_dataset(name, args, engines, Path(tmp))
            report(name, results[name], engines)
    if args.plot:
        plot(args.plot, results, engines)
    write_results(
        args.json,
        "bench_filters",
        run_record(args, versions=versions, results=results),
        flat_points(results),
    )


if __name__ == "__main__":
    main()
