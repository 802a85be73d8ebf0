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

import ctypes
import gc
import importlib.util
import mmap
import os
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
json_default = _b.json_default
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

# ------------------------------------------------------------------ page cache (Linux)
def file_resident_bytes(path: str | os.PathLike) -> int:
    """Bytes of the file in the page cache now: mincore over a fresh read-only mapping of the
    whole file (mapping reads nothing). Linux (and other systems with mincore)."""
    size = os.path.getsize(path)
    if size == 0:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"mmap {path}")
    finally:
        os.close(fd)
    try:
        page = mmap.PAGESIZE
        vec = (ctypes.c_ubyte * ((size + page - 1) // page))()
        if libc.mincore(addr, size, vec) != 0:
            raise OSError(ctypes.get_errno(), f"mincore {path}")
        return sum(b & 1 for b in bytes(vec)) * page
    finally:
        libc.munmap(addr, size)


def evict_file(path: str | os.PathLike, *, check: bool = True) -> int:
    """Drop the file from the page cache (fsync, then posix_fadvise DONTNEED) so that the next
    reads come from the disk; returns the bytes still cached, and with `check` raises if more
    than a page is (a process that still maps the file keeps its pages). Linux."""
    gc.collect()
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    left = file_resident_bytes(path)
    if check and left > mmap.PAGESIZE:
        raise RuntimeError(f"{path}: {left} bytes still cached after POSIX_FADV_DONTNEED (is it still open?)")
    return left


__all__ = [
    "REPO", "MINILM", "file_resident_bytes", "evict_file", "TARGETS", "datasets_module", "median", "timed", "median_seconds",
    "interpolate_qps", "qps_at_targets", "ratio", "json_default", "EngineUnavailable", "Engine",
    "ChassisEngine", "ChassisDBEngine", "HnswlibEngine", "UsearchEngine", "FaissEngine",
    "ENGINES", "make_engine", "engine_status", "measure_sweep", "plot_sweeps",
    "machine_info", "fmt", "table",
]
