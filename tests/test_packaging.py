"""What a user downloads: the installed package, and the source distribution.

Oracles: the installed distribution's own record (``importlib.metadata``), the extension's
ELF section table read from the file, the sdist tarball that ``maturin sdist`` builds from
this checkout, listed with ``tarfile``, and the checkout's own files (``Cargo.toml`` and
``pyproject.toml`` parsed with ``tomllib``; the Rust toolchain pins read as text).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import struct
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
from pathlib import Path

import chassis
import pytest
from conftest import assert_child_ok, run_python
from packaging.version import Version

REPO = Path(__file__).resolve().parent.parent
DIST = "chassis-index"


def test_both_license_files_ship_with_the_installed_package() -> None:
    files = importlib.metadata.files(DIST) or []
    names = {Path(str(f)).name for f in files}
    assert {"LICENSE-MIT", "LICENSE-APACHE"} <= names, sorted(names)
    meta = importlib.metadata.metadata(DIST)
    assert "MIT" in (meta.get("License-Expression") or meta.get("License") or "")


def test_one_version_in_cargo_toml_pyproject_and_the_installed_package() -> None:
    # Cargo.toml is the one source: pyproject.toml declares the version dynamic (maturin takes
    # Cargo's), the extension reports CARGO_PKG_VERSION, and the installed distribution's
    # metadata carries it in PEP 440 spelling. (.ci/check-version checks the same of the
    # release files and the tag.)
    if not (REPO / "Cargo.toml").exists():
        pytest.skip("needs the source checkout")
    cargo = tomllib.loads((REPO / "Cargo.toml").read_text())["package"]["version"]
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert "version" not in project, "pyproject.toml has a version of its own"
    assert "version" in project["dynamic"], "pyproject.toml does not take the version from Cargo"
    assert chassis.__version__ == chassis._chassis.__version__ == cargo
    installed = importlib.metadata.version(DIST)
    assert Version(installed) == Version(cargo), (
        f"installed {DIST} {installed}, Cargo.toml {cargo}: a stale install?"
    )


def test_the_wheel_builds_pin_one_rust_toolchain() -> None:
    # The Linux containers install it with .ci/install-rust; macOS, Windows, the sdist job and
    # the C library's job with the runner's rustup. One version everywhere.
    if not (REPO / ".ci" / "install-rust").exists():
        pytest.skip("needs the source checkout")
    script = (REPO / ".ci" / "install-rust").read_text()
    (pinned,) = re.findall(r'^RUST_VERSION="\$\{CHASSIS_RUST_VERSION:-([0-9.]+)\}"$', script, re.M)
    installs = {
        name: re.findall(r"rustup toolchain install (\S+)", (REPO / name).read_text())
        for name in ["pyproject.toml", ".github/workflows/wheels.yml"]
    }
    assert len(installs["pyproject.toml"]) == 2, installs  # macOS, Windows
    assert len(installs[".github/workflows/wheels.yml"]) == 2, installs  # sdist, C library
    for name, versions in installs.items():
        assert set(versions) == {pinned}, f"{name} installs {versions}, .ci/install-rust {pinned}"


def _elf_section_names(path: Path) -> list[str]:
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2, "not a 64-bit ELF file"
    endian = "<" if data[5] == 1 else ">"
    shoff = struct.unpack_from(endian + "Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from(endian + "HHH", data, 0x3A)
    headers = [
        struct.unpack_from(endian + "IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)
    ]
    strtab_offset = headers[shstrndx][4]
    names = []
    for name_offset, *_ in headers:
        start = strtab_offset + name_offset
        names.append(data[start : data.index(b"\0", start)].decode())
    return names


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads an ELF extension")
def test_the_release_extension_carries_no_debug_info() -> None:
    extension = Path(chassis._chassis.__file__)
    sections = _elf_section_names(extension)
    assert ".text" in sections  # the reader works
    debug = [s for s in sections if s.startswith(".debug_")]
    assert not debug, (
        f"{extension.name} has debug sections {debug}: built without the release profile?"
    )


def test_the_sdist_holds_what_a_build_needs_and_not_ci_files(tmp_path: Path) -> None:
    if not (REPO / "Cargo.toml").exists():
        pytest.skip("needs the source checkout")
    maturin = shutil.which("maturin") or str(Path(sys.executable).with_name("maturin"))
    if not Path(maturin).exists():
        pytest.skip("maturin is not installed")
    if shutil.which("cargo") is None:
        # The wheel test of .ci/run and cibuildwheel's tests run without a Rust toolchain.
        pytest.skip("maturin sdist reads `cargo metadata`: cargo is not on PATH")
    subprocess.run(
        [maturin, "sdist", "--out", str(tmp_path)], cwd=REPO, check=True, capture_output=True
    )
    (tarball,) = tmp_path.glob("*.tar.gz")
    with tarfile.open(tarball) as tar:
        members = [m.name.split("/", 1)[1] for m in tar.getmembers() if "/" in m.name]
    for needed in [
        "Cargo.toml",
        "Cargo.lock",
        "pyproject.toml",
        "README.md",
        "LICENSE-MIT",
        "LICENSE-APACHE",
        "src/lib.rs",
        "src/python/doc/search.md",
        "python/chassis/__init__.py",
        "python/chassis/_chassis.pyi",
        "python/chassis/py.typed",
    ]:
        assert needed in members, f"the sdist lacks {needed}"
    unwanted = [m for m in members if m.startswith((".ci/", ".github/", "benchmarks/results/"))]
    assert not unwanted, unwanted[:5]


def test_cibuildwheel_test_requires_are_the_test_extra_without_jax() -> None:
    # Where jaxlib has no wheel, cibuildwheel installs this list instead of `[test]`.
    pyproject = REPO / "pyproject.toml"
    if not pyproject.exists():
        pytest.skip("needs the source checkout")
    config = tomllib.loads(pyproject.read_text())
    extra = config["project"]["optional-dependencies"]["test"]
    (override,) = [o for o in config["tool"]["cibuildwheel"]["overrides"] if "test-requires" in o]
    assert override["test-extras"] == []
    assert sorted(override["test-requires"]) == sorted(r for r in extra if r != "jax")


@pytest.mark.skipif(
    not sysconfig.get_config_var("Py_GIL_DISABLED"), reason="a free-threaded Python only"
)
def test_importing_chassis_keeps_the_gil_disabled() -> None:
    # The module declares that it runs without the GIL (`#[pymodule(gil_used = false)]`);
    # otherwise importing it turns the GIL back on for the whole process, with a warning.
    # A fresh interpreter, with PYTHON_GIL unset (it would force either way).
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"}
    code = "import sys, chassis; print(sys._is_gil_enabled())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False", "importing chassis enabled the GIL"


def test_bench_and_datasets_are_reached_from_the_package_on_first_use() -> None:
    # As the README writes them (`chassis.bench.run()`), after a plain `import chassis`, which
    # does not import them itself. Oracle: a fresh interpreter's sys.modules.
    proc = run_python(
        "import sys, chassis\n"
        "print('chassis.bench' in sys.modules, 'chassis.datasets' in sys.modules)\n"
        "print(callable(chassis.bench.run), callable(chassis.datasets.ground_truth))\n"
        "try:\n"
        "    chassis.no_such_thing\n"
        "except AttributeError as e:\n"
        "    print(type(e).__name__)\n"
    )
    assert_child_ok(proc, "chassis.bench")
    assert proc.stdout.split() == ["False", "False", "True", "True", "AttributeError"]
