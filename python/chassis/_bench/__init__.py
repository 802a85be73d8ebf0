"""Benchmark machinery shared by `python -m chassis bench` and benchmarks/: timing, QPS at
equal recall, and one adapter per index library.

Every engine is driven through the same small interface (`Engine`), so each one is
measured the same way:

    engine = make_engine("hnswlib")          # or "chassis", "chassisdb", "usearch", "faiss"
    seconds = engine.build(path, base, metric="euclidean", m=16, ef_construction=200, threads=2)
    engine.close()
    open_s = engine.open_seconds(path)       # a fresh open of the saved file, closed again
    engine.open(path)
    engine.set_ef(64)
    ids, seconds = engine.search("batch", queries, k=10)
    points = measure_sweep(engine, queries, truth, k=10, efs=[16, 32, 64])
    qps_at = {mode: qps_at_targets(pts) for mode, pts in points.items()}

| module | what |
|---|---|
| `engines` | `Engine` and one adapter per library; `make_engine`, `engine_status` |
| `schema` | the result schema (Point, QpsAt, qps_at_targets, ratios, summarize, write_json) |
| `sweep` | `measure_sweep` (recall and QPS along ef), `measure_engine` (build, open, sweep) |
| `inputs` | what `chassis.bench.run` reads its data from |
| `display` | table cells, text tables, recall-QPS plots |
| `machine` | the "machine" of a results file; `memory_cgroup_problem` |
| `timing` | `timed`, `median`, `path_bytes` |

Everything is importable from `chassis._bench` itself; the scripts in benchmarks/ import it
from here, so the figures of `chassis bench` and of the benchmarks come from the same code.
"""

from .display import draw_sweeps, fmt, plot_sweeps, qps_cell, table
from .engines import (
    ENGINES,
    ChassisCodesEngine,
    ChassisDBEngine,
    ChassisEngine,
    ChassisHalfEngine,
    ChassisInt4Engine,
    ChassisInt8Engine,
    ChassisMemoryEngine,
    Engine,
    EngineUnavailable,
    FaissEngine,
    FaissSQ4Engine,
    FaissSQ8Engine,
    HnswlibEngine,
    UsearchEngine,
    UsearchI8Engine,
    engine_status,
    make_engine,
)
from .machine import CGROUP_V1, machine_info, memory_cgroup_problem
from .schema import (
    SCALARS,
    TARGETS,
    Point,
    QpsAt,
    best_peer,
    interpolate_qps,
    json_default,
    median_qps_at,
    qps_at_targets,
    ratio,
    ratios,
    summarize,
    sweep_points,
    versus_best_peer,
    write_json,
)
from .sweep import Plan, measure_engine, measure_sweep
from .timing import median, path_bytes, timed

__all__ = [
    "CGROUP_V1",
    "ENGINES",
    "SCALARS",
    "TARGETS",
    "ChassisCodesEngine",
    "ChassisDBEngine",
    "ChassisEngine",
    "ChassisHalfEngine",
    "ChassisInt4Engine",
    "ChassisInt8Engine",
    "ChassisMemoryEngine",
    "Engine",
    "EngineUnavailable",
    "FaissEngine",
    "FaissSQ4Engine",
    "FaissSQ8Engine",
    "HnswlibEngine",
    "Plan",
    "Point",
    "QpsAt",
    "UsearchEngine",
    "UsearchI8Engine",
    "best_peer",
    "draw_sweeps",
    "engine_status",
    "fmt",
    "interpolate_qps",
    "json_default",
    "machine_info",
    "make_engine",
    "measure_engine",
    "measure_sweep",
    "median",
    "median_qps_at",
    "memory_cgroup_problem",
    "path_bytes",
    "plot_sweeps",
    "qps_at_targets",
    "qps_cell",
    "ratio",
    "ratios",
    "summarize",
    "sweep_points",
    "table",
    "timed",
    "versus_best_peer",
    "write_json",
]
