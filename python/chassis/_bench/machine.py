"""The "machine" of a results file: Python, platform, cores, NumPy and the CPU."""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

import numpy as np


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "numpy": np.__version__,
    }
    try:
        import chassis

        info["chassis_cpu_info"] = chassis.cpu_info()
    except Exception:
        pass
    try:
        from chassis import _machine

        info["cpu"] = _machine.describe()  # the CPU a result's tables name
    except ImportError:
        pass
    return info
