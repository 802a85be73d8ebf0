"""The "machine" of a results file (Python, platform, cores, NumPy and the CPU), and whether
it can hold a process to a memory limit."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
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


CGROUP_V1 = Path("/sys/fs/cgroup/memory")


def memory_cgroup_problem() -> str | None:
    """Why a process cannot be put in a cgroup-v1 memory cgroup with a limit here, or None."""
    if sys.platform != "linux":
        return "not Linux"
    if os.geteuid() != 0:
        return "not root (a memory cgroup needs root)"
    if not (CGROUP_V1 / "memory.limit_in_bytes").exists():
        return f"no cgroup-v1 memory controller at {CGROUP_V1}"
    return None
