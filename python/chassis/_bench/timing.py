"""Clocks and sizes: the median of a few timings, one timed call, the bytes of an index."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any


def median(values: Iterable[float | None]) -> float | None:
    """Median of the values that are not None; None when there are none."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """(fn(), seconds it took) by the monotonic high-resolution clock."""
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def path_bytes(path: str | os.PathLike[str]) -> int | None:
    """Bytes of a file, or of every file under a folder; None when it does not exist."""
    p = Path(path)
    if p.is_dir():
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
    return p.stat().st_size if p.exists() else None
