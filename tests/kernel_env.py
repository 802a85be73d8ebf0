"""What the running kernel grants this process, asked directly through ctypes, and the
emulated kernel variants of the matrix (`tests/kernel_matrix.py`); also which pages of a file
the page cache holds (mincore: `resident_pages`), the tests' oracle for warm and eviction.

Why: Chassis's memory policies depend on the kernel (`MADV_POPULATE_READ` exists from Linux
5.14; `MADV_HUGEPAGE` fails where transparent huge pages are not built in; THP can be
`always`, `madvise` or `never`; a process can opt out with `prctl(PR_SET_THP_DISABLE)`), and
the documentation promises a fallback for each. The kernel-sensitive tests (marked `kernel`)
assert what the kernel they run under must give. They learn which kernel that is from this
module, which asks the kernel itself (a `madvise` on a scratch mapping, `prctl`, sysfs), never
from Chassis: an independent oracle, the same under a real old kernel in a VM and under an
emulation here.

The variants (`VARIANTS`) emulate inside the running kernel:
* ``no-populate-read``: a seccomp filter makes ``madvise(..., MADV_POPULATE_READ)`` fail with
  EINVAL, as before Linux 5.14;
* ``no-thp``: the same for ``MADV_HUGEPAGE`` (and ``MADV_NOHUGEPAGE``), as a kernel built
  without transparent huge pages;
* ``thp-disabled``: ``prctl(PR_SET_THP_DISABLE, 1)``, inherited by the test process;
* ``thp-always`` and ``thp-never``: the system's THP mode switched for one run (root only;
  `kernel_matrix.py` restores it whatever happens).
A filter, once installed, holds for the process and everything it starts (no-new-privs).
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

LINUX = sys.platform.startswith("linux")
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
THP_ENABLED = Path("/sys/kernel/mm/transparent_hugepage/enabled")

# <sys/mman.h> and <linux/prctl.h>, the same on every Linux architecture.
MADV_WILLNEED = 3
MADV_HUGEPAGE = 14
MADV_NOHUGEPAGE = 15
MADV_POPULATE_READ = 22
PR_SET_SECCOMP = 22
PR_SET_NO_NEW_PRIVS = 38
PR_SET_THP_DISABLE = 41
PR_GET_THP_DISABLE = 42
SECCOMP_MODE_FILTER = 2

# The variants a matrix run can apply, with what each emulates.
VARIANTS = {
    "native": "the running kernel as it is",
    "no-populate-read": "madvise(MADV_POPULATE_READ) refused with EINVAL, as before Linux 5.14",
    "no-thp": "madvise(MADV_HUGEPAGE / MADV_NOHUGEPAGE) refused with EINVAL, as without THP built in",
    "thp-disabled": "prctl(PR_SET_THP_DISABLE): this process opted out of huge pages",
    "thp-always": "the system's THP mode set to always (root)",
    "thp-never": "the system's THP mode set to never (root)",
}
ENV = "CHASSIS_KERNEL_VARIANT"  # the variant a matrix run applied, for the record


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.prctl.argtypes = [
        ctypes.c_int,
        ctypes.c_ulong,
        ctypes.c_ulong,
        ctypes.c_ulong,
        ctypes.c_ulong,
    ]
    return libc


def madvise_errno(advice: int, length: int = 4 << 20) -> int:
    """0 when the kernel accepts `advice` on a fresh anonymous mapping, else its errno."""
    libc = _libc()
    prot_rw, map_private_anon = 0x3, 0x22
    p = libc.mmap(None, length, prot_rw, map_private_anon, -1, 0)
    if p in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "mmap of a scratch mapping failed")
    try:
        return 0 if libc.madvise(p, length, advice) == 0 else ctypes.get_errno()
    finally:
        libc.munmap(p, length)


def resident_pages(path: str | os.PathLike) -> np.ndarray:
    """One bool per page of the file: in the page cache now (mincore over a fresh read-only
    mapping of the whole file; mapping it reads nothing)."""
    import numpy as np  # here: a child that only applies a variant need not load NumPy first

    size = os.path.getsize(path)
    if size == 0:
        return np.zeros(0, dtype=bool)
    libc = _libc()
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap")
    finally:
        os.close(fd)
    try:
        n = (size + PAGE - 1) // PAGE
        vec = (ctypes.c_ubyte * n)()
        if libc.mincore(addr, size, vec) != 0:
            raise OSError(ctypes.get_errno(), "mincore")
        return (np.frombuffer(vec, dtype=np.uint8) & 1).astype(bool)
    finally:
        libc.munmap(addr, size)


def resident_bytes(path: str | os.PathLike) -> int:
    """Bytes of the file in the page cache now (`resident_pages`)."""
    return int(resident_pages(path).sum()) * PAGE


def thp_mode() -> str | None:
    """The bracketed word of /sys/kernel/mm/transparent_hugepage/enabled, or None."""
    try:
        text = THP_ENABLED.read_text()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else None


def thp_disabled_for_process() -> bool:
    """prctl(PR_GET_THP_DISABLE): whether this process opted out (bit 0)."""
    return bool(_libc().prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0) & 1)


@dataclass(frozen=True)
class Kernel:
    """What the running kernel grants this process."""

    release: str
    populate_read: bool  # madvise(MADV_POPULATE_READ) accepted
    hugepage_advice: bool  # madvise(MADV_HUGEPAGE) accepted
    thp_mode: str | None  # always / madvise / never, None without the sysfs file
    thp_disabled: bool  # this process opted out

    @property
    def anonymous_huge_pages(self) -> bool:
        """Whether a range that asked with MADV_HUGEPAGE can get huge pages at all."""
        return (
            self.hugepage_advice
            and self.thp_mode in ("always", "madvise")
            and not self.thp_disabled
        )


def kernel() -> Kernel:
    """Ask the running kernel (Linux only)."""
    return Kernel(
        release=platform.release(),
        populate_read=madvise_errno(MADV_POPULATE_READ) == 0,
        hugepage_advice=madvise_errno(MADV_HUGEPAGE) == 0,
        thp_mode=thp_mode(),
        thp_disabled=thp_disabled_for_process(),
    )


# ------------------------------------------------------------------------- applying variants
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_NR_MADVISE = {"x86_64": 28, "aarch64": 233}


class _SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_ushort),
        ("jt", ctypes.c_ubyte),
        ("jf", ctypes.c_ubyte),
        ("k", ctypes.c_uint32),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def refuse_madvise(advices: tuple[int, ...]) -> None:
    """Install a seccomp filter on this process (and all it starts): madvise with one of
    `advices` fails with EINVAL; every other system call, and every other advice, passes."""
    machine = platform.machine()
    if not LINUX or machine not in _AUDIT_ARCH:
        raise OSError(
            errno.ENOSYS, f"the madvise filter is written for Linux x86_64/aarch64, not {machine}"
        )
    ld_w_abs, jeq_k, ret_k = 0x20, 0x15, 0x06
    ret_allow, ret_errno = 0x7FFF0000, 0x00050000
    n = len(advices)
    program = [
        (ld_w_abs, 0, 0, 4),  # A = seccomp_data.arch
        (jeq_k, 0, n + 3, _AUDIT_ARCH[machine]),  # another ABI: allow
        (ld_w_abs, 0, 0, 0),  # A = seccomp_data.nr
        (jeq_k, 0, n + 1, _NR_MADVISE[machine]),  # not madvise: allow
        (ld_w_abs, 0, 0, 32),  # A = the low 32 bits of args[2], the advice
    ]
    for i, advice in enumerate(advices):  # a match jumps to the refusal after the list
        program.append((jeq_k, n - i, 0, advice))
    program += [
        (ret_k, 0, 0, ret_allow),  # index n + 5 (jumps count from the next instruction)
        (ret_k, 0, 0, ret_errno | errno.EINVAL),  # index n + 6
    ]
    filters = (_SockFilter * len(program))(*[_SockFilter(*i) for i in program])
    fprog = _SockFprog(len(program), filters)
    libc = _libc()
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    address = ctypes.cast(ctypes.byref(fprog), ctypes.c_void_p).value or 0
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, address, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")


def disable_thp() -> None:
    """prctl(PR_SET_THP_DISABLE, 1) for this process and its children."""
    if _libc().prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_THP_DISABLE) failed")


def apply_in_process(variant: str) -> None:
    """Apply a per-process variant to this process, then check that it holds (so that a
    matrix run cannot pass vacuously). The THP-mode variants are system-wide: the matrix sets
    them before starting the process, and this only checks them."""
    if variant == "native":
        return
    if variant == "no-populate-read":
        refuse_madvise((MADV_POPULATE_READ,))
    elif variant == "no-thp":
        refuse_madvise((MADV_HUGEPAGE, MADV_NOHUGEPAGE))
    elif variant == "thp-disabled":
        disable_thp()
    elif variant not in ("thp-always", "thp-never"):
        raise ValueError(f"unknown kernel variant {variant!r}; known: {', '.join(VARIANTS)}")
    check_in_force(variant)


def check_in_force(variant: str) -> None:
    """Raise AssertionError unless this process sees what `variant` emulates."""
    k = kernel()
    expected = {
        "no-populate-read": (
            madvise_errno(MADV_POPULATE_READ) == errno.EINVAL and madvise_errno(MADV_WILLNEED) == 0
        ),
        "no-thp": madvise_errno(MADV_HUGEPAGE) == errno.EINVAL,
        "thp-disabled": k.thp_disabled,
        "thp-always": k.thp_mode == "always",
        "thp-never": k.thp_mode == "never",
    }.get(variant, True)
    if not expected:
        raise AssertionError(f"kernel variant {variant!r} is not in force: {k}")


if __name__ == "__main__":  # print what this kernel grants
    print(kernel() if LINUX else f"not Linux: {sys.platform}", flush=True)  # flushed: _exit next
    os._exit(0)
