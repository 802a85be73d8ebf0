"""Shared pieces of the benchmarks: re-exported from the package module `chassis._bench`
(timing, QPS at equal recall, engine adapters, sweeps), which `python -m chassis bench`
uses too, plus the benchmarks' own data-set paths.

    engine = make_engine("hnswlib")          # or "chassis", "chassisdb", "usearch", "faiss"
    seconds = engine.build(path, base, metric="euclidean", m=16, ef_construction=200, threads=2)
    engine.close()
    open_s = engine.open_seconds(path)       # a fresh open of the saved file, closed again
    engine.open(path)
    engine.set_ef(64)
    ids, seconds = engine.search("batch", queries, k=10)

Peers that are not installed are reported by `engine_status()` and skipped.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MINILM = Path("/work/shared/data/debian-minilm")


def _bench_module():
    """`chassis._bench`; before the extension is built, the source file itself (it imports
    chassis only when the chassis engine is used)."""
    try:
        from chassis import _bench

        return _bench
    except ImportError:
        name = "_chassis_bench_source"
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, REPO / "python" / "chassis" / "_bench.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module


_b = _bench_module()

TARGETS = _b.TARGETS
datasets_module = _b.datasets_module
median = _b.median
timed = _b.timed
median_seconds = _b.median_seconds
interpolate_qps = _b.interpolate_qps
qps_at_targets = _b.qps_at_targets
ratio = _b.ratio
EngineUnavailable = _b.EngineUnavailable
Engine = _b.Engine
ChassisEngine = _b.ChassisEngine
ChassisDBEngine = _b.ChassisDBEngine
HnswlibEngine = _b.HnswlibEngine
UsearchEngine = _b.UsearchEngine
FaissEngine = _b.FaissEngine
ENGINES = _b.ENGINES
make_engine = _b.make_engine
engine_status = _b.engine_status
measure_sweep = _b.measure_sweep
plot_sweeps = _b.plot_sweeps
machine_info = _b.machine_info
fmt = _b.fmt
table = _b.table

__all__ = [
    "REPO", "MINILM", "TARGETS", "datasets_module", "median", "timed", "median_seconds",
    "interpolate_qps", "qps_at_targets", "ratio", "EngineUnavailable", "Engine",
    "ChassisEngine", "ChassisDBEngine", "HnswlibEngine", "UsearchEngine", "FaissEngine",
    "ENGINES", "make_engine", "engine_status", "measure_sweep", "plot_sweeps",
    "machine_info", "fmt", "table",
]
