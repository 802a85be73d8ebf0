"""What CPU a figure was measured on.

`describe()` gathers it as a JSON-able dict (every benchmark result records it under
`machine["cpu"]`), `cpu_line()` says it in one line, and `cpu_text()` says in words how
Chassis uses that CPU (the kernels and the prefetch depth). `chassis bench` and
`benchmarks/report.py` print these same lines, so a figure and the CPU it holds on travel
together.

The microarchitecture tables are small on purpose: a family and model they do not know is
"unknown" rather than a guess. The AMD ranges are the ones the Linux kernel uses to tell Zen
generations apart (`arch/x86/kernel/cpu/amd.c`), the Intel models those of its
`intel-family.h`.
"""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

__all__ = ["describe", "cpu_line", "cpu_text", "from_record", "microarchitecture"]

# ------------------------------------------------------------------ words
KERNELS = {"avx512": "AVX-512", "avx2": "AVX2", "neon": "NEON", "scalar": "plain"}
VENDORS = {"GenuineIntel": "Intel", "AuthenticAMD": "AMD"}
ARCHES = {"x86_64": "x86-64", "aarch64": "ARM64", "arm64": "ARM64"}
POLICIES = {"zen4": "AMD Zen 4", "zen5": "AMD Zen 5", "apple": "Apple silicon"}

# (family, first model, last model, name)
_AMD: tuple[tuple[int, int, int, str], ...] = (
    (23, 0x00, 0x2F, "Zen / Zen+"),
    (23, 0x50, 0x5F, "Zen / Zen+"),
    (23, 0x30, 0x4F, "Zen 2"),
    (23, 0x60, 0x7F, "Zen 2"),
    (23, 0x90, 0x91, "Zen 2"),
    (23, 0xA0, 0xAF, "Zen 2"),
    (25, 0x00, 0x0F, "Zen 3"),
    (25, 0x20, 0x5F, "Zen 3"),
    (25, 0x10, 0x1F, "Zen 4"),
    (25, 0x60, 0xAF, "Zen 4"),
    (26, 0x00, 0x0F, "Zen 5"),
    (26, 0x20, 0x2F, "Zen 5"),
    (26, 0x40, 0x4F, "Zen 5"),
    (26, 0x70, 0x7F, "Zen 5"),
)
# family 6 model -> name
_INTEL: dict[int, str] = {
    0x3C: "Haswell",
    0x45: "Haswell",
    0x46: "Haswell",
    0x3F: "Haswell-SP",
    0x3D: "Broadwell",
    0x47: "Broadwell",
    0x4F: "Broadwell-SP",
    0x56: "Broadwell-D",
    0x4E: "Skylake",
    0x5E: "Skylake",
    0x55: "Skylake/Cascade Lake-SP",
    0x8E: "Kaby Lake / Coffee Lake",
    0x9E: "Kaby Lake / Coffee Lake",
    0xA5: "Comet Lake",
    0xA6: "Comet Lake",
    0x6A: "Ice Lake-SP",
    0x6C: "Ice Lake-D",
    0x7D: "Ice Lake",
    0x7E: "Ice Lake",
    0xA7: "Rocket Lake",
    0x8C: "Tiger Lake",
    0x8D: "Tiger Lake",
    0x8F: "Sapphire Rapids",
    0xCF: "Emerald Rapids",
    0xAD: "Granite Rapids",
    0xAE: "Granite Rapids-D",
    0x97: "Alder Lake",
    0x9A: "Alder Lake",
    0xB7: "Raptor Lake",
    0xBA: "Raptor Lake",
    0xBF: "Raptor Lake",
    0xAA: "Meteor Lake",
    0xAC: "Meteor Lake",
    0xB5: "Arrow Lake",
    0xC5: "Arrow Lake",
    0xC6: "Arrow Lake",
    0xBD: "Lunar Lake",
}

# cgroup v1 writes "no limit" as a huge page-rounded number rather than a word
_UNLIMITED = 1 << 60


def microarchitecture(vendor: str | None, family: int | None, model: int | None) -> str | None:
    """The microarchitecture's name for an x86 vendor id, family and model (the decimal
    display values `/proc/cpuinfo` shows); None when the tables do not know it."""
    if family is None or model is None:
        return None
    if vendor == "AuthenticAMD":
        for fam, first, last, name in _AMD:
            if fam == family and first <= model <= last:
                return name
    elif vendor == "GenuineIntel" and family == 6:
        return _INTEL.get(model)
    return None


# ------------------------------------------------------------------ reading the machine
def _cpuinfo() -> dict[str, str]:
    """The first processor's block of /proc/cpuinfo ({} where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    return fields


def _sysctl(name: str) -> str | None:
    try:
        out = subprocess.run(
            ["sysctl", "-n", name], capture_output=True, text=True, timeout=5, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def _int(text: Any) -> int | None:
    try:
        return int(str(text).strip(), 0)
    except ValueError:
        return None


def _size(text: str) -> int | None:
    """Bytes of a sysfs cache size such as "32768K"."""
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    number = _int(text.rstrip("KMG"))
    return None if number is None else number * scale


def _l3_bytes() -> int | None:
    """The L3 that CPU 0 shares with its neighbours (on AMD one core complex's, not the sum
    over the chip that CPUID's total gives), from sysfs; macOS's hw.l3cachesize elsewhere."""
    root = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in sorted(root.glob("index*")):
        try:
            if (index / "level").read_text().strip() == "3":
                return _size((index / "size").read_text())
        except OSError:
            continue
    if platform.system() == "Darwin":
        return _int(_sysctl("hw.l3cachesize") or "") or None
    return None


def _cgroup_mounts() -> dict[str, tuple[str, str]]:
    """Where each cgroup hierarchy is mounted: "v2" and "memory" (v1) -> (root inside the
    hierarchy, mount point), from /proc/self/mountinfo."""
    mounts: dict[str, tuple[str, str]] = {}
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return mounts
    for line in lines:
        before, sep, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if not sep or len(fields) < 5 or len(tail) < 3:
            continue
        if tail[0] == "cgroup2":
            mounts.setdefault("v2", (fields[3], fields[4]))
        elif tail[0] == "cgroup" and "memory" in tail[2].split(","):
            mounts.setdefault("memory", (fields[3], fields[4]))
    return mounts


def _memory_limit() -> int | None:
    """Bytes this process's cgroup (or one above it) may use; None when unlimited or unknown.

    cgroup v2 "memory.max", v1 "memory.limit_in_bytes"; a limit on a parent group binds its
    children too, so the smallest along the path counts."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    mounts = _cgroup_mounts()
    limits: list[int] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "" and "v2" in mounts:
            (root, mount), name = mounts["v2"], "memory.max"
        elif "memory" in controllers.split(",") and "memory" in mounts:
            (root, mount), name = mounts["memory"], "memory.limit_in_bytes"
        else:
            continue
        try:
            inside = PurePosixPath(path).relative_to(root)
        except ValueError:
            continue
        for group in (inside, *inside.parents):
            try:
                value = _int((Path(mount) / group / name).read_text())
            except OSError:
                continue
            if value is not None and value < _UNLIMITED:
                limits.append(value)
    return min(limits) if limits else None


def _native() -> dict[str, Any]:
    try:
        import chassis

        return dict(chassis.cpu_info())
    except Exception:  # the native module may be missing where only the report runs
        return {}


def describe() -> dict[str, Any]:
    """This machine's CPU as a JSON-able dict.

    Keys: ``model_name``, ``vendor`` (the CPU's vendor id, such as "AuthenticAMD"),
    ``family`` and ``model`` (decimal), ``microarchitecture`` (None when the tables do not
    know the family and model), ``arch``, ``kernel`` (the SIMD level Chassis's distances use
    now, which honours ``CHASSIS_KERNEL``) and ``kernels_available``, ``l3_bytes``,
    ``logical_cpus``, ``memory_limit_bytes`` (None when unlimited) and ``os_release`` (the
    operating system kernel's release). A value that cannot be read is None.
    """
    native = _native()
    fields = _cpuinfo()
    system = platform.system()
    name = fields.get("model name")
    if name is None and system == "Darwin":
        name = _sysctl("machdep.cpu.brand_string")
    if not name:
        name = platform.processor() or None
    vendor = native.get("vendor") or fields.get("vendor_id")
    family = native.get("family")
    model = native.get("model")
    if not isinstance(family, int) or not isinstance(model, int):
        family, model = _int(fields.get("cpu family", "")), _int(fields.get("model", ""))
    return {
        "model_name": name,
        "vendor": vendor,
        "family": family,
        "model": model,
        "microarchitecture": microarchitecture(vendor, family, model),
        "arch": native.get("arch") or platform.machine() or None,
        "kernel": native.get("kernel"),
        "kernels_available": list(native.get("kernels_available", [])),
        "l3_bytes": _l3_bytes(),
        "logical_cpus": os.cpu_count(),
        "memory_limit_bytes": _memory_limit(),
        "os_release": platform.release() or None,
    }


def from_record(machine: Mapping[str, Any]) -> dict[str, Any]:
    """The `describe()` dict of a result JSON's "machine": its "cpu" when the run recorded
    one; for older runs what their `chassis.cpu_info()` and core count say, the rest left
    out (so `cpu_line` says "not recorded")."""
    if isinstance(machine.get("cpu"), Mapping):
        return dict(machine["cpu"])
    native = machine.get("chassis_cpu_info") or {}
    known: dict[str, Any] = {}
    for key in ("vendor", "family", "model", "arch", "kernel", "kernels_available"):
        if key in native:
            known[key] = native[key]
    if "family" in known and "model" in known:
        known["microarchitecture"] = microarchitecture(
            known.get("vendor"), known["family"], known["model"]
        )
    if machine.get("cpu_count") is not None:
        known["logical_cpus"] = machine["cpu_count"]
    return known


def _mib(value: int) -> str:
    return f"{value / (1 << 20):g} MiB"


def cpu_line(info: Mapping[str, Any]) -> str:
    """`describe()` (or `from_record()`) in one line, such as "AMD EPYC (family 25 model 1,
    Zen 3), AVX2 kernels, L3 32 MiB, 2 CPUs". A key the dict lacks is "not recorded", a
    value that could not be read "unknown"."""

    def known(key: str) -> bool:
        return info.get(key) is not None

    vendor = str(info.get("vendor") or "")
    name = str(info["model_name"]).strip() if known("model_name") else ""
    ident = []
    if not name:
        name = VENDORS.get(vendor, vendor) or "CPU"
        ident.append("model name " + ("not recorded" if "model_name" not in info else "unknown"))
    if known("family") and known("model"):
        arch = info.get("microarchitecture") or "microarchitecture unknown"
        ident.append(f"family {info['family']} model {info['model']}, {arch}")
    else:
        ident.append("family and model " + ("not recorded" if "family" not in info else "unknown"))
    parts = [f"{name} ({'; '.join(ident)})"]
    if known("kernel"):
        kernel = str(info["kernel"])
        parts.append(f"{KERNELS.get(kernel, kernel)} kernels")
    else:
        parts.append("kernel level " + ("not recorded" if "kernel" not in info else "unknown"))
    if known("l3_bytes"):
        parts.append(f"L3 {_mib(int(info['l3_bytes']))}")
    else:
        parts.append("L3 " + ("not recorded" if "l3_bytes" not in info else "unknown"))
    if known("logical_cpus"):
        count = int(info["logical_cpus"])
        parts.append(f"{count} CPU" + ("" if count == 1 else "s"))
    else:
        parts.append("CPUs not recorded")
    if known("memory_limit_bytes"):
        parts.append(f"memory limit {_mib(int(info['memory_limit_bytes']))}")
    return ", ".join(parts)


def cpu_text(info: Mapping[str, Any]) -> str:
    """`chassis.cpu_info()` in words: the CPU, the instructions distances are computed with,
    and how much of each neighbour's vector searches prefetch (the raw dict goes to the
    JSON's "machine")."""
    arch = str(info.get("arch", "?"))
    vendor = str(info.get("vendor", ""))
    who = " ".join(p for p in (VENDORS.get(vendor, vendor), ARCHES.get(arch, arch)) if p)
    kernel = str(info.get("kernel", "?"))
    available = [str(k) for k in info.get("kernels_available", [])]
    if kernel == "scalar":
        used = "distances computed without SIMD instructions"
    else:
        used = f"distances computed with {KERNELS.get(kernel, kernel)} instructions"
    if available and available[0] != kernel:
        best = KERNELS.get(available[0], available[0])
        used += f" (chosen by CHASSIS_KERNEL; the CPU has {best})"
    parts = [who, used]
    lines = info.get("prefetch_lines")
    if isinstance(lines, int):
        cache = info.get("prefetch_cache")
        into = f" into the {cache} cache" if cache else ""
        tuned = POLICIES.get(str(info.get("prefetch_policy")))
        parts.append(
            f"searches prefetch {lines} cache lines ({lines * 64:,} bytes) of each "
            f"neighbour's vector{into}" + (f" (tuned for {tuned})" if tuned else "")
        )
    return "; ".join(parts)
