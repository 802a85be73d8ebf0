#!/usr/bin/env python3
"""Run the kernel-marked tests under real Debian kernels, each booted in a small VM.

    python tests/kernel_vms.py [--setup] [--kernels 5.10,6.1,6.12] [--marker EXPR]
                               [-k EXPR] [--timeout S] [--jobs N] [TESTS ...]

Why: Chassis's memory policies depend on the kernel (``MADV_POPULATE_READ`` from Linux 5.14,
``MADV_HUGEPAGE`` only where transparent huge pages are built in, the THP mode), and
`tests/kernel_env.py` emulates those differences inside the running kernel. This is the other
tier: Debian's own generic kernels (``linux-image-*-amd64``), booted by virtme-ng under QEMU
with software emulation (``--disable-kvm``), the host's root file system shared read-only, the
host's Python and its installed ``chassis`` running the tests inside the guest.

For each kernel (`KERNELS`: exact package versions, checked against their SHA-256):
* the package is downloaded once from the Debian archive that apt is configured with
  (``CHASSIS_VM_DEBIAN_MIRROR`` overrides it) and unpacked with ``dpkg-deb -x`` into the cache
  (``CHASSIS_VM_CACHE``, default ``~/.cache/chassis-vm``), where ``depmod`` indexes its modules;
* ``vng`` boots it with one CPU and 2 GiB, and the guest runs ``tests/kernel_env.py`` (a record of what
  that kernel grants) and ``python -m pytest -q -m kernel -p no:cacheprovider`` with a JUnit
  report; both are written to a directory shared read-write with the guest (``--rwdir``) and
  read back here: the console is only kept as a log;
* one line per kernel is printed at the end, e.g.
  ``kernel 6.1.0-50-amd64: 5 passed, 0 failed, 1 skipped in 140 s (boot 24 s, pytest 101 s)``.

The exit status is 1 if any kernel had a failed or erroneous test, selected no test, could not
start, or left no result that could be read back (a timeout, a crash); never a pass then.

``--setup`` (root, Debian) first installs what the host needs, saying what it does and doing
nothing that is already done: bookworm-backports in apt's sources if it is missing; QEMU
(``qemu-system-x86`` with ``qemu-utils``, both from bookworm-backports, so that an installed
newer ``qemu-utils`` is not downgraded), ``udev`` (without it the guest's output and exit code
are lost), ``kmod`` (depmod), ``busybox-static`` (virtme's initramfs, needed for Debian's
modular kernels) and ``file`` (kernel version detection); and virtme-ng, pinned, in a venv of
its own in the cache, so that the test venv is left as it is.

In the guest the tests run chrooted into a second, cached mount of the host's root (Python's
imports over the uncached 9p root cost minutes under 5.10), with ``TMPDIR`` on an ext4 scratch
disk (the guest's tmpfs cannot evict a file from the page cache, as the warm tests do).
Inside the guest ``CHASSIS_KERNEL=scalar`` is set (``--simd native`` leaves the choice to the
CPU): QEMU's emulation of the AVX2/FMA distance kernels is about six times slower than of the
scalar ones, and these tests are about the OS kernel, not the distance kernels.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import hashlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VIRTME_NG = "virtme-ng==1.42"
BEGIN, END = "CHASSIS_VM_BEGIN", "CHASSIS_VM_END"


@dataclasses.dataclass(frozen=True)
class DebianKernel:
    label: str  # what --kernels names
    suite: str  # where the package comes from, for the record
    release: str  # uname -r of the kernel
    version: str  # the Debian package version
    pool_path: str  # path under the archive root
    sha256: str
    size: int

    @property
    def deb_name(self) -> str:
        return self.pool_path.rsplit("/", 1)[1]


# Exact versions. Pool files of a stable suite stay until the suite is archived; one that
# disappears makes the download fail (a 404): pin a newer version then, from the suite's
# Packages index (Filename, SHA256, Size).
KERNELS = {
    k.label: k
    for k in (
        DebianKernel(
            "5.10",
            "bullseye",
            "5.10.0-32-amd64",
            "5.10.223-1",
            "pool/main/l/linux-signed-amd64/linux-image-5.10.0-32-amd64_5.10.223-1_amd64.deb",
            "86a6792f3a03ab15a643f385830cdaa921f15e3e9c8bf63aa55a9243c62fc797",
            55749416,
        ),
        DebianKernel(
            "6.1",
            "bookworm",
            "6.1.0-50-amd64",
            "6.1.176-1",
            "pool/main/l/linux-signed-amd64/linux-image-6.1.0-50-amd64_6.1.176-1_amd64.deb",
            "7b5597492a0a65aee61985a492e6bcc3f2cde830072a0e3b3d8c7e1b90279bd3",
            70305560,
        ),
        DebianKernel(
            "6.12",
            "bookworm-backports",
            "6.12.95+deb12-amd64",
            "6.12.95-1~bpo12+1",
            "pool/main/l/linux-signed-amd64/"
            "linux-image-6.12.95+deb12-amd64_6.12.95-1~bpo12+1_amd64.deb",
            "5e524b782be67cb0d6a2e7b51816a2ac519e573ef7324b9a63a4124365653ecc",
            106422608,
        ),
    )
}


def say(msg: str) -> None:
    print(f"[kernel_vms] {msg}", flush=True)


def cache_dir() -> Path:
    env = os.environ.get("CHASSIS_VM_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "chassis-vm"


# ------------------------------------------------------------------------------ apt sources
def apt_sources() -> list[dict[str, list[str]]]:
    """apt's configured sources, one-line and deb822 alike, as {types, uris, suites, signed}."""
    out: list[dict[str, list[str]]] = []
    etc = Path("/etc/apt")
    files = [etc / "sources.list"] + sorted((etc / "sources.list.d").glob("*"))
    for f in files:
        try:
            text = f.read_text()
        except OSError:
            continue
        if f.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields: dict[str, str] = {}
                for line in stanza.splitlines():
                    if line.startswith("#") or ":" not in line or line[:1].isspace():
                        continue
                    key, _, value = line.partition(":")
                    fields[key.strip().lower()] = value.strip()
                if fields.get("enabled", "yes").lower() == "no" or "uris" not in fields:
                    continue
                out.append(
                    {
                        "types": fields.get("types", "").split(),
                        "uris": fields["uris"].split(),
                        "suites": fields.get("suites", "").split(),
                        "signed": [fields["signed-by"]] if "signed-by" in fields else [],
                    }
                )
        elif f.name == "sources.list" or f.suffix == ".list":
            for line in text.splitlines():
                line = re.sub(r"\[[^]]*\]", " ", line.split("#", 1)[0]).split()
                if len(line) >= 3 and line[0] in ("deb", "deb-src"):
                    out.append(
                        {"types": [line[0]], "uris": [line[1]], "suites": [line[2]], "signed": []}
                    )
    return out


DEBIAN_SUITES = ("bullseye", "bookworm", "trixie", "forky")


def debian_mirror() -> str:
    """The Debian archive to download from: CHASSIS_VM_DEBIAN_MIRROR, else the one apt uses
    for a Debian release (not its security archive)."""
    env = os.environ.get("CHASSIS_VM_DEBIAN_MIRROR")
    if env:
        return env.rstrip("/")
    for src in apt_sources():
        if "deb" in src["types"] and any(s.split("-")[0] in DEBIAN_SUITES for s in src["suites"]):
            for uri in src["uris"]:
                if "security" not in uri:
                    return uri.rstrip("/")
    raise SystemExit(
        "kernel_vms: no Debian archive found in apt's sources; set CHASSIS_VM_DEBIAN_MIRROR "
        "to the URL of one (the directory holding dists/ and pool/)"
    )


# ------------------------------------------------------------------------------ host set-up
def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    say("$ " + shlex.join(cmd))
    return subprocess.run(cmd, check=True, **kw)


def installed(package: str) -> bool:
    r = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Status}", package], capture_output=True, text=True
    )
    return r.returncode == 0 and r.stdout.strip().endswith(" installed")


def qemu_img_version() -> str:
    try:
        out = subprocess.run(["qemu-img", "--version"], capture_output=True, text=True).stdout
    except OSError:
        return "qemu-img not installed"
    return out.splitlines()[0] if out else "qemu-img: no version"


def setup_host() -> None:
    if os.geteuid() != 0:
        raise SystemExit("kernel_vms: --setup installs packages with apt: run it as root")
    if not shutil.which("apt-get"):
        raise SystemExit("kernel_vms: --setup knows Debian's apt only")
    codename = ""
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("VERSION_CODENAME="):
                codename = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    t0 = time.monotonic()
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    updated = False
    backports = f"{codename}-backports" if codename == "bookworm" else ""
    if backports and not any(backports in s["suites"] for s in apt_sources()):
        src = next(s for s in apt_sources() if "deb" in s["types"] and codename in s["suites"])
        uri = next(u for u in src["uris"] if "security" not in u)
        path = Path(f"/etc/apt/sources.list.d/chassis-{backports}.sources")
        text = f"Types: deb\nURIs: {uri}\nSuites: {backports}\nComponents: main\n"
        if src["signed"]:
            text += f"Signed-By: {src['signed'][0]}\n"
        say(f"adding {backports} to apt's sources: {path}")
        path.write_text(text)
        run(["apt-get", "update", "-q"], env=env, stdout=subprocess.DEVNULL)
        updated = True
    # qemu-system-x86 and qemu-utils together, from the same suite: installing the first
    # alone from bookworm replaces a newer qemu-utils (from backports) by bookworm's.
    wanted = [
        (["qemu-system-x86", "qemu-utils"], backports, not installed("qemu-system-x86")),
        (["udev", "kmod", "busybox-static", "file"], "", False),
    ]
    for packages, suite, all_of_them in wanted:
        todo = packages if all_of_them else [p for p in packages if not installed(p)]
        if not todo or (suite and not all_of_them):
            continue
        if not updated:
            run(["apt-get", "update", "-q"], env=env, stdout=subprocess.DEVNULL)
            updated = True
        before = qemu_img_version()
        cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends"]
        run(cmd + (["-t", suite] if suite else []) + todo, env=env, stdout=subprocess.DEVNULL)
        after = qemu_img_version()
        if before != after:
            say(f"qemu-img changed: {before} -> {after}")
    say(
        f"host packages: {', '.join(p for g, _, _ in wanted for p in g)} installed; {qemu_img_version()}"
    )
    venv = cache_dir() / "vng"
    vng = venv / "bin" / "vng"
    version_file = venv / "chassis-pin"
    if not (vng.exists() and version_file.exists() and version_file.read_text() == VIRTME_NG):
        say(f"installing {VIRTME_NG} in its own venv, {venv}")
        run([sys.executable, "-m", "venv", "--clear", str(venv)])
        run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", VIRTME_NG])
        version_file.write_text(VIRTME_NG)
    say(f"set-up done in {time.monotonic() - t0:.0f} s")


def find_vng() -> str:
    for candidate in (
        os.environ.get("CHASSIS_VNG"),
        str(cache_dir() / "vng" / "bin" / "vng"),
        shutil.which("vng"),
    ):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise SystemExit("kernel_vms: vng (virtme-ng) not found: run with --setup, or set CHASSIS_VNG")


# ------------------------------------------------------------------------------ kernels
def fetch(kernel: DebianKernel, mirror: str) -> Path:
    """The kernel's .deb in the cache, downloaded if needed, its SHA-256 checked."""
    debs = cache_dir() / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    deb = debs / kernel.deb_name
    if deb.exists():
        return deb  # checked when it was stored
    url = f"{mirror}/{kernel.pool_path}"
    part = deb.with_name(deb.name + ".part")
    t0 = time.monotonic()
    digest = hashlib.sha256()
    with urllib.request.urlopen(url, timeout=60) as response, open(part, "wb") as f:
        while chunk := response.read(1 << 20):
            digest.update(chunk)
            f.write(chunk)
    if digest.hexdigest() != kernel.sha256:
        part.unlink()
        raise RuntimeError(
            f"{kernel.deb_name}: SHA-256 {digest.hexdigest()}, expected {kernel.sha256}"
        )
    part.rename(deb)
    say(f"{kernel.label}: downloaded {kernel.size / 1e6:.0f} MB in {time.monotonic() - t0:.1f} s")
    return deb


def unpack(kernel: DebianKernel, deb: Path) -> Path:
    """The kernel image, from the package unpacked in the cache, modules indexed by depmod."""
    root = cache_dir() / "kernels" / kernel.release
    vmlinuz = root / "boot" / f"vmlinuz-{kernel.release}"
    ready = root / ".chassis-ready"
    if ready.exists() and vmlinuz.exists():
        return vmlinuz
    t0 = time.monotonic()
    tmp = root.with_name(root.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)
    tmp.mkdir(parents=True)
    subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp)], check=True)
    base = tmp if (tmp / "lib" / "modules" / kernel.release).is_dir() else tmp / "usr"
    depmod = shutil.which("depmod") or "/usr/sbin/depmod"
    subprocess.run([depmod, "-a", "-b", str(base), kernel.release], check=True)
    tmp.rename(root)
    ready.write_text(kernel.sha256)
    say(f"{kernel.label}: unpacked and indexed in {time.monotonic() - t0:.1f} s")
    return vmlinuz


# ------------------------------------------------------------------------------ one VM
@dataclasses.dataclass
class Result:
    kernel: DebianKernel
    ok: bool = False
    line: str = ""
    details: str = ""


# Inside the guest. The host's root is the guest's root over 9p without caching, where every
# file lookup is a round trip through emulated hardware: a stat costs about 7 ms under 6.1 and
# 70 ms under 5.10 (whose 9p allocates a whole msize buffer per message), and Python's imports
# are mostly lookups. So the host's root is exported a second time (--rodir), mounted again
# with cache=loose and a smaller msize, and the tests run chrooted into that copy (nothing on
# the host changes while they run), with the guest's /proc, /sys, /dev and the result
# directory (the scratch disk mounted in it) bound in. Without that mount they run on the plain root, only slower.
GUEST_SCRIPT = """\
#!/bin/sh
# Written by tests/kernel_vms.py; runs inside the guest.
out={out}
echo "{begin} $(uname -r)"
cut -d' ' -f1 /proc/uptime > "$out/uptime-at-start"
uname -r > "$out/uname"
root=/run/chassis-root
# The scratch disk first, inside the result directory (bound into the chroot with its mounts
# below): the tests' TMPDIR. Not over /tmp: the checkout under test may live in the host's /tmp.
# The guest's own /tmp is tmpfs, where a file cannot be evicted from the page cache (the warm
# tests evict their file first).
scratch="$out/scratch"
modprobe -q virtio_blk; modprobe -q ext4
for i in 1 2 3 4 5 6 7 8 9 10; do [ -b /dev/vda ] && break; sleep 1; done
if [ -b /dev/vda ] && mkdir -p "$scratch" && mount -t ext4 /dev/vda "$scratch"; then
  chmod 1777 "$scratch"
  tmp="ext4 on the scratch disk"
else
  scratch="$out/tmp"
  mkdir -p "$scratch"
  tmp="the result directory over 9p (no scratch disk)"
fi
export CHASSIS_VM_TMP="$scratch"
tag=$(awk '$2 == "{rodir}" {{print $1}}' /proc/mounts)
chroot=
if [ -n "$tag" ] && umount {rodir} && mkdir -p $root &&
   mount -t 9p -o ro,trans=virtio,version=9p2000.L,access=any,msize={msize},cache=loose "$tag" $root
then
  chroot="chroot $root"
  for d in /proc /sys /dev "$out"; do
    mount --rbind "$d" "$root$d" || chroot=
  done
fi
echo "root: ${{chroot:-the plain 9p root}}; TMPDIR: $tmp" > "$out/fs"
$chroot sh "$out/tests.sh"
echo "{end}"
"""

TESTS_SCRIPT = """\
#!/bin/sh
# Written by tests/kernel_vms.py; runs inside the guest, from guest.sh.
out={out}
cd {repo} || exit 97
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HOME="$CHASSIS_VM_TMP" TMPDIR="$CHASSIS_VM_TMP" {env}
{python} -u tests/kernel_env.py > "$out/kernel_env.txt" 2>&1
date +%s > "$out/pytest-start"
{python} -m pytest {pytest_args} > "$out/pytest.log" 2>&1
echo $? > "$out/pytest.rc"
date +%s > "$out/pytest-end"
"""
GUEST_RODIR = "/tmp/chassis-hostroot"
SCRATCH_BYTES = 2 << 30

# Modules that udev would load at boot for the emulated q35 machine and that nothing here
# uses; under emulation kvm_amd alone takes 15 s to load (5.10), the AES/GHASH ones 5 s.
BLACKLIST = (
    "kvm,kvm_amd,kvm_intel,irqbypass,aesni_intel,crypto_simd,cryptd,glue_helper,"
    "ghash_clmulni_intel,crc32_pclmul,iTCO_wdt,iTCO_vendor_support,sr_mod,cdrom,sg,ahci,"
    "libahci,libata,pcspkr,serio_raw,psmouse,i2c_i801,lpc_ich,joydev,evdev,rapl,"
    "intel_rapl_msr,intel_rapl_common,efi_pstore"
)


def read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def tail(path: Path, n: int = 40) -> str:
    text = read(path) or ""
    return "\n".join(text.splitlines()[-n:])


# The process groups of the VMs running (several at once with --jobs): ended by main when it
# is stopped, since only the main thread sees Ctrl-C or SIGTERM.
RUNNING: set[int] = set()
RUNNING_LOCK = threading.Lock()
STOPPING = False


def run_vm(kernel: DebianKernel, vmlinuz: Path, vng: str, args, pytest_args: list[str]) -> Result:
    res = Result(kernel)
    out = cache_dir() / "runs" / kernel.release
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    env = "CHASSIS_KERNEL=scalar" if args.simd == "scalar" else ""
    script = out / "guest.sh"
    fields = dict(
        out=shlex.quote(str(out)),
        repo=shlex.quote(str(REPO)),
        python=shlex.quote(args.python),
        pytest_args=shlex.join(pytest_args + ["--junitxml", str(out / "junit.xml")]),
        env=env,
        begin=BEGIN,
        end=END,
        rodir=GUEST_RODIR,
        msize=65536,
    )
    script.write_text(GUEST_SCRIPT.format(**fields))
    (out / "tests.sh").write_text(TESTS_SCRIPT.format(**fields))
    scratch = out / "scratch.img"  # sparse; an ext4 for the guest's TMPDIR
    with open(scratch, "wb") as f:
        f.truncate(SCRATCH_BYTES)
    mkfs = shutil.which("mkfs.ext4") or "/usr/sbin/mkfs.ext4"
    subprocess.run([mkfs, "-q", "-F", "-E", "root_owner=0:0", str(scratch)], check=True)
    cmd = [vng, "--run", str(vmlinuz), "--disable-kvm", "--cpus", "1", "--memory", args.memory]
    cmd += ["--disk", str(scratch)]  # virtio-blk: /dev/vda in the guest
    cmd += ["--rwdir", str(out), "--append", f"modprobe.blacklist={BLACKLIST}"]
    cmd += [] if args.plain_root else ["--rodir", f"{GUEST_RODIR}=/"]
    cmd += ["--exec", f"sh {shlex.quote(str(script))}"]
    say(f"{kernel.label}: booting {kernel.release} ({kernel.suite} {kernel.version})")
    t0, t0_wall = time.monotonic(), time.time()
    marks: dict[str, float] = {}
    console = open(out / "console.log", "w")
    # Started under the lock, and not at all once main is stopping (it kills what is running).
    RUNNING_LOCK.acquire()
    if STOPPING:
        RUNNING_LOCK.release()
        console.close()
        res.line = f"kernel {kernel.release}: NOT STARTED (the run was stopped)"
        return res
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        # vng starts virtme-run by name: its own bin directory comes first on PATH
        env=dict(
            os.environ, PATH=os.pathsep.join([str(Path(vng).parent), os.environ.get("PATH", "")])
        ),
        start_new_session=True,  # its own process group: a timeout ends vng and QEMU together
    )
    RUNNING.add(proc.pid)
    RUNNING_LOCK.release()

    def pump() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode(errors="replace")
            console.write(line)
            console.flush()
            for mark in (BEGIN, END):
                if line.startswith(mark) and mark not in marks:
                    marks[mark] = time.monotonic()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    timed_out = False
    try:
        rc = proc.wait(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        for sig in (15, 9):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=10)
                break
            except subprocess.TimeoutExpired:
                continue
        rc = proc.returncode
    except BaseException:  # Ctrl-C, or SIGTERM (made SystemExit in main): no VM left running
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        raise
    finally:
        with RUNNING_LOCK:
            RUNNING.discard(proc.pid)
    reader.join(timeout=10)
    console.close()
    scratch.unlink(missing_ok=True)
    total = time.monotonic() - t0
    # Started: the guest wrote its first file into the shared directory (the console is only
    # a fallback: it was once seen empty). Boot time: that file's time stamp, set by the host.
    try:
        boot = (out / "uptime-at-start").stat().st_mtime - t0_wall
    except OSError:
        boot = marks[BEGIN] - t0 if BEGIN in marks else None
    uptime = read(out / "uptime-at-start")
    start, end = read(out / "pytest-start"), read(out / "pytest-end")
    pytest_s = int(end) - int(start) if start and end else None
    release = (read(out / "uname") or "").strip() or kernel.release
    record = (read(out / "kernel_env.txt") or "").strip()
    timing = f"in {total:.0f} s"
    timing += f" (boot {boot:.0f} s" if boot is not None else " (no boot"
    timing += f", guest uptime {uptime.strip()} s" if uptime and args.verbose else ""
    timing += f", pytest {pytest_s} s)" if pytest_s is not None else ")"
    name = f"kernel {release}"
    if record:
        say(f"{kernel.label}: {record}; {(read(out / 'fs') or '').strip()}")
    why_not = f"timed out after {args.timeout:.0f} s" if timed_out else f"vng exited with {rc}"
    if boot is None:
        res.line = f"{name}: DID NOT START ({why_not}) {timing}"
        res.details = f"console ({out / 'console.log'}):\n" + tail(out / "console.log")
        return res
    rc_text = read(out / "pytest.rc")
    junit = out / "junit.xml"
    if rc_text is None or not junit.exists():
        res.line = f"{name}: NO RESULT READ BACK ({why_not}) {timing}"
        res.details = f"pytest log ({out / 'pytest.log'}):\n" + tail(out / "pytest.log")
        res.details += f"\nconsole ({out / 'console.log'}):\n" + tail(out / "console.log", 15)
        return res
    try:
        root = ET.parse(junit).getroot()
        suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
        count = {
            key: sum(int(s.get(key, 0)) for s in suites)
            for key in ("tests", "failures", "errors", "skipped")
        }
    except (ET.ParseError, ValueError) as e:
        res.line = f"{name}: UNREADABLE RESULT ({junit}: {e}) {timing}"
        return res
    failed = count["failures"] + count["errors"]
    passed = count["tests"] - failed - count["skipped"]
    pytest_rc = int(rc_text.strip() or -1)
    res.line = f"{name}: {passed} passed, {failed} failed, {count['skipped']} skipped {timing}"
    if pytest_rc == 5 or count["tests"] == 0:
        res.line += " - NO TEST SELECTED"
    elif pytest_rc != 0 or failed:
        res.line += f" - pytest exit {pytest_rc}"
    else:
        res.ok = True
    if not res.ok or args.verbose:
        res.details = f"pytest log ({out / 'pytest.log'}):\n" + tail(out / "pytest.log", 60)
    return res


# ------------------------------------------------------------------------------ main
def default_tests(marker: str) -> list[str]:
    """The test files that mention the kernel marker (collecting every file costs about a
    minute per VM under emulation), or the whole tests directory."""
    if "kernel" in marker:
        files = sorted(
            str(p.relative_to(REPO))
            for p in (REPO / "tests").glob("test_*.py")
            if "mark.kernel" in p.read_text(errors="replace")
        )
        if files:
            return files
    return ["tests"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "tests", nargs="*", help="test files or node ids (default: the files that use the marker)"
    )
    ap.add_argument(
        "--kernels", default=",".join(KERNELS), help="comma-separated, of: " + ", ".join(KERNELS)
    )
    ap.add_argument(
        "--marker", default="kernel", help="pytest -m expression ('' for none); default kernel"
    )
    ap.add_argument("-k", dest="keyword", default=None, help="pytest -k expression")
    ap.add_argument(
        "--setup", action="store_true", help="install the host packages and virtme-ng first (root)"
    )
    ap.add_argument(
        "--fetch-only", action="store_true", help="download and unpack the kernels, boot none"
    )
    ap.add_argument(
        "--python",
        default=os.environ.get("CHASSIS_VM_PYTHON", sys.executable),
        help="the Python the guest runs (default: this one)",
    )
    ap.add_argument(
        "--timeout",
        type=float,
        default=float(os.environ.get("CHASSIS_VM_TIMEOUT", 420)),
        help="seconds per VM, boot included (default 420, or CHASSIS_VM_TIMEOUT)",
    )
    ap.add_argument(
        "--jobs",
        type=int,
        default=int(os.environ.get("CHASSIS_VM_JOBS", 1)),
        help="VMs booted at once, one CPU each (default 1, or CHASSIS_VM_JOBS)",
    )
    ap.add_argument(
        "--memory",
        default=os.environ.get("CHASSIS_VM_MEMORY", "2G"),
        help="guest memory (default 2G)",
    )
    ap.add_argument(
        "--simd",
        choices=("scalar", "native"),
        default="scalar",
        help="distance kernels in the guest (default scalar: faster under emulation)",
    )
    ap.add_argument(
        "--pytest-args",
        default="",
        help="more pytest arguments in one string, given with '=': --pytest-args='-v --durations=0'",
    )
    ap.add_argument(
        "--plain-root",
        action="store_true",
        help="run the tests on the guest's plain 9p root (no cached second mount; slower)",
    )
    ap.add_argument(
        "-v", "--verbose", action="store_true", help="show the pytest log of every kernel"
    )
    args = ap.parse_args(argv)
    # SIGTERM (a CI's timeout) as SystemExit, so that the running VM's group is ended with us
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))

    labels = [k.strip() for k in args.kernels.split(",") if k.strip()]
    unknown = [k for k in labels if k not in KERNELS]
    if unknown or not labels:
        ap.error(f"unknown kernel(s) {', '.join(unknown) or '(none)'}; known: {', '.join(KERNELS)}")
    if args.setup:
        setup_host()
    pytest_args = ["-q", "-p", "no:cacheprovider"]
    pytest_args += ["-m", args.marker] if args.marker else []
    pytest_args += ["-k", args.keyword] if args.keyword else []
    pytest_args += shlex.split(args.pytest_args)
    pytest_args += args.tests or default_tests(args.marker)

    mirror = debian_mirror()
    results: list[Result] = []
    vng = None if args.fetch_only else find_vng()
    t_all = time.monotonic()
    ready: list[tuple[DebianKernel, Path]] = []
    for label in labels:
        kernel = KERNELS[label]
        try:
            ready.append((kernel, unpack(kernel, fetch(kernel, mirror))))
        except (OSError, RuntimeError, subprocess.CalledProcessError) as e:
            results.append(Result(kernel, False, f"kernel {kernel.release}: NOT FETCHED ({e})"))
    if vng is not None and ready:
        # Each VM in a thread of its own (up to --jobs at once), its result printed in order.
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            runs = [pool.submit(run_vm, k, v, vng, args, pytest_args) for k, v in ready]
            try:
                for run in runs:
                    results.append(run.result())
                    if results[-1].details:
                        print(results[-1].details, flush=True)
            except BaseException:  # Ctrl-C or SIGTERM: no VM left running, none started
                global STOPPING
                for run in runs:
                    run.cancel()
                with RUNNING_LOCK:
                    STOPPING = True
                    for pid in RUNNING:
                        with contextlib.suppress(ProcessLookupError):
                            os.killpg(pid, 9)
                raise
    if args.fetch_only:
        failed = [r for r in results if not r.ok]
        for r in failed:
            print(r.line)
        return 1 if failed else 0
    say(
        f"{len(labels)} kernel(s) in {time.monotonic() - t_all:.0f} s; pytest {shlex.join(pytest_args)}"
    )
    for r in results:
        print(r.line, flush=True)
    return 0 if results and all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
