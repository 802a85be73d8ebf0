"""The C API and Python on the same files: an index written from C is searched identically
from Python, and one written from Python identically from C; the header's statuses are the
Python exceptions' codes.

Oracle: the other language's results on the same file (ids equal, distances equal to the
last float32 bit or within 1e-6 relative: both run the same kernels), and brute-force k-NN
in NumPy for the recall of both.

The C side is tests/c/capi_test.c (its `write` and `search` modes), compiled with the system's
`cc` against a `libchassis.so` that `cargo build --lib` makes from this checkout (the C API is
the crate's default feature; the Python module is built without it). Linux only, and skipped
where there is no `cargo` or `cc` (the wheel's test environment has no Rust):
tests/capi.rs runs the whole C program in `cargo test`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import chassis
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
HEADER = ROOT / "include" / "chassis.h"

pytestmark = pytest.mark.skipif(
    not HEADER.exists(), reason="needs the source checkout (include/chassis.h)"
)
needs_c = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not (shutil.which("cargo") and shutil.which("cc")),
    reason="needs Linux, cargo and cc to build the C library and program",
)


def target_dir() -> Path:
    """Cargo's target directory for this checkout (CARGO_TARGET_DIR, else target/)."""
    return ROOT / Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))


@pytest.fixture(scope="module")
def capi_test(tmp_path_factory) -> Path:
    """tests/c/capi_test.c linked against a fresh debug build of the C library."""
    subprocess.run(
        ["cargo", "build", "--lib", "--quiet", "--message-format=short"],
        cwd=ROOT,
        check=True,
    )
    lib = (target_dir() / "debug").resolve()
    assert (lib / "libchassis.so").exists(), lib
    exe = tmp_path_factory.mktemp("capi") / "capi_test"
    subprocess.run(
        ["cc", "-std=c99", "-O1", "-I", str(ROOT / "include"), str(ROOT / "tests/c/capi_test.c")]
        + ["-L", str(lib), f"-Wl,--disable-new-dtags,-rpath,{lib}"]
        + ["-lchassis", "-lpthread", "-lm", "-o", str(exe)],
        check=True,
    )
    return exe


def _c(exe: Path, *args: object) -> None:
    subprocess.run([str(exe), *map(str, args)], check=True, timeout=120)


def _c_search(exe: Path, path: Path, queries: np.ndarray, k: int, tmp: Path):
    qfile, out = tmp / "q.f32", tmp / "out.bin"
    np.ascontiguousarray(queries, dtype=np.float32).tofile(qfile)
    _c(exe, "search", path, qfile, len(queries), k, out)
    raw = out.read_bytes()
    n = len(queries) * k
    ids = np.frombuffer(raw[: 8 * n], dtype=np.uint64).reshape(-1, k)
    dist = np.frombuffer(raw[8 * n :], dtype=np.float32).reshape(-1, k)
    return ids, dist


def _exact(data: np.ndarray, queries: np.ndarray, k: int, metric: str) -> np.ndarray:
    if metric == "cosine":
        d = data / np.linalg.norm(data, axis=1, keepdims=True)
        q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
        dist = -(q @ d.T)
    else:
        dist = (queries**2).sum(1)[:, None] - 2 * queries @ data.T + (data**2).sum(1)[None]
    return np.argsort(dist, axis=1, kind="stable")[:, :k]


def _recall(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(f) & set(t)) / len(t) for f, t in zip(found, truth)]))


def _data(n: int, dims: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, dims)).astype(np.float32)


@needs_c
@pytest.mark.parametrize("metric, code", [("euclidean", 1), ("cosine", 2)])
def test_a_file_written_from_c_is_searched_identically_from_python(
    capi_test, tmp_path, metric, code
):
    data, queries = _data(2000, 48, 1), _data(50, 48, 2)
    data.tofile(tmp_path / "data.f32")
    path = tmp_path / "from_c.chassis"
    _c(capi_test, "write", path, tmp_path / "data.f32", len(data), data.shape[1], code)

    reader = chassis.IndexReader(path)
    assert len(reader) == len(data) and reader.dimensions == data.shape[1]
    assert reader.options.metric == metric
    row = data[1234] / (np.linalg.norm(data[1234]) if metric == "cosine" else 1)  # stored unit
    np.testing.assert_allclose(reader.get(1234), row, rtol=1e-6, atol=1e-7)
    ids, dist = reader.search_batch(queries, 10)
    c_ids, c_dist = _c_search(capi_test, path, queries, 10, tmp_path)
    np.testing.assert_array_equal(ids, c_ids)
    np.testing.assert_allclose(dist, c_dist, rtol=1e-6, atol=1e-7)
    assert _recall(ids, _exact(data, queries, 10, metric)) >= 0.95


@needs_c
def test_a_file_written_from_python_is_searched_identically_from_c(capi_test, tmp_path):
    data, queries = _data(2000, 24, 3), _data(50, 24, 4)
    path = tmp_path / "from_python.chassis"
    with chassis.VectorIndex(path, 24, chassis.IndexOptions(quantization="int8")) as index:
        index.add_batch(data, ids=np.arange(10_000, 12_000, dtype=np.uint64))
        index.delete(10_005)
        index.flush()
        ids, dist = index.search_batch(queries, 7)
    c_ids, c_dist = _c_search(capi_test, path, queries, 7, tmp_path)
    np.testing.assert_array_equal(ids, c_ids)
    np.testing.assert_allclose(dist, c_dist, rtol=1e-6, atol=1e-7)
    assert 10_005 not in c_ids
    truth = _exact(np.delete(data, 5, axis=0), queries, 7, "euclidean")
    truth = np.where(truth >= 5, truth + 1, truth) + 10_000
    assert _recall(c_ids, truth) >= 0.95


def test_header_statuses_are_the_python_exception_codes():
    """Oracle: the header's #defines against each exception class's `code`."""
    defines = dict(
        (m[1], int(m[2]))
        for m in re.finditer(r"#define CHASSIS_([A-Z_]+) (\d+)", HEADER.read_text())
    )
    classes = {
        "INVALID_ARGUMENT": chassis.InvalidArgumentError,
        "DIMENSION_MISMATCH": chassis.DimensionMismatchError,
        "OPTIONS_MISMATCH": chassis.OptionsMismatchError,
        "INDEX_NOT_FOUND": chassis.IndexNotFoundError,
        "NOT_AN_INDEX": chassis.NotAnIndexError,
        "ID_IN_USE": chassis.IdInUseError,
        "INDEX_LOCKED": chassis.IndexLockedError,
        "READ_ONLY": chassis.ReadOnlyError,
        "CORRUPT_INDEX": chassis.CorruptIndexError,
        "INDEX_FULL": chassis.IndexFullError,
        "INVALID_PATH": chassis.InvalidPathError,
        "ERROR": chassis.ChassisError,
        "ID_NOT_FOUND": chassis.IdNotFoundError,
        "INDEX_CLOSED": chassis.IndexClosedError,
        "STORAGE": chassis.StorageError,
    }
    for name, cls in classes.items():
        assert defines[name] == cls.code, name
    assert defines["OK"] == 0 and defines["INTERRUPTED"] == 16


def make_install(tmp_path: Path) -> Path:
    """`make install` of a debug build into a fresh prefix under `tmp_path`; the prefix.

    Built in cargo's own target directory, where `capi_test` built the same dependencies in the
    same profile: only the crate itself is compiled again (its library there then carries the
    SONAME, which nothing linked against it by path minds)."""
    prefix = tmp_path / "prefix"
    subprocess.run(
        ["make", "install", f"PREFIX={prefix}", "PROFILE=debug", f"TARGET_DIR={target_dir()}"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    return prefix


@needs_c
@pytest.mark.slow
@pytest.mark.skipif(
    not (shutil.which("make") and shutil.which("pkg-config")),
    reason="needs Linux, cargo and cc to build the C library and program (and make, pkg-config)",
)
def test_the_installed_library_builds_a_program_with_pkg_config_alone(tmp_path):
    # Oracles: the files `make install` laid out, the ELF dynamic sections (SONAME, NEEDED),
    # the program's run, and this package opening the file the program wrote.
    prefix = make_install(tmp_path)
    lib = prefix / "lib"
    abi = re.search(r"#define CHASSIS_ABI_VERSION (\d+)", HEADER.read_text())[1]
    assert (lib / "libchassis.so").resolve().name == f"libchassis.so.{abi}.{chassis.__version__}"
    assert (lib / f"libchassis.so.{abi}").is_symlink() and (lib / "libchassis.a").exists()
    assert (prefix / "include" / "chassis.h").read_text() == HEADER.read_text()
    dynamic = subprocess.run(
        ["readelf", "-d", str(lib / "libchassis.so")], capture_output=True, text=True, check=True
    ).stdout
    assert f"Library soname: [libchassis.so.{abi}]" in dynamic

    # A clean folder: the example's source, and only what pkg-config says.
    app = tmp_path / "app"
    app.mkdir()
    shutil.copy(ROOT / "examples" / "c" / "quickstart.c", app / "app.c")
    env = {**os.environ, "PKG_CONFIG_PATH": str(lib / "pkgconfig")}
    pc = ["pkg-config", "--cflags", "--libs", "chassis"]
    flags = subprocess.run(pc, env=env, capture_output=True, text=True, check=True).stdout.split()
    version = subprocess.run(
        ["pkg-config", "--modversion", "chassis"], env=env, capture_output=True, text=True
    ).stdout.strip()
    assert version == chassis.__version__
    subprocess.run(["cc", "app.c", *flags, "-lm", "-o", "app"], cwd=app, check=True)
    needed = subprocess.run(
        ["readelf", "-d", str(app / "app")], capture_output=True, text=True, check=True
    ).stdout
    assert f"Shared library: [libchassis.so.{abi}]" in needed
    run = subprocess.run(
        ["./app", str(app / "made.chassis")],
        cwd=app,
        env={**env, "LD_LIBRARY_PATH": str(lib)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    with chassis.IndexReader(app / "made.chassis") as reader:
        assert len(reader) > 0


# CMake ships as a Debian package and as a PyPI wheel; the wheel lands beside this Python.
CMAKE = shutil.which("cmake") or shutil.which("cmake", path=str(Path(sys.executable).parent))


@needs_c
@pytest.mark.slow
@pytest.mark.skipif(
    not (shutil.which("make") and CMAKE),
    reason="needs Linux, cargo and cc to build the C library and program (and make, cmake)",
)
def test_the_installed_library_builds_a_program_with_cmake_find_package(tmp_path):
    # Oracles: CMake's own resolution (find_package refuses a version this is not compatible
    # with), the ELF dynamic sections of the two programs (the shared one needs the SONAME,
    # the static one no libchassis at all), the programs' runs, and this package opening the
    # files they wrote.
    prefix = make_install(tmp_path)
    abi = re.search(r"#define CHASSIS_ABI_VERSION (\d+)", HEADER.read_text())[1]
    major, minor = (int(x) for x in chassis.__version__.split(".")[:2])
    major_minor = f"{major}.{minor}"
    # Versions this one does not satisfy: a later major one, and, while the major version is
    # 0, another minor one (Semantic Versioning's rule for 0.x).
    refused = [f"{major + 99}"] + (
        [f"0.{minor + 1}", f"0.{max(minor - 1, 0)}.99"] if major == 0 else []
    )
    refused = [v for v in refused if v != chassis.__version__]
    app = tmp_path / "app"
    app.mkdir()
    shutil.copy(ROOT / "examples" / "c" / "quickstart.c", app / "app.c")
    (app / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.10)\n"
        "project(app C)\n"
        f"find_package(chassis {major_minor} REQUIRED)\n"
        + "".join(
            f"find_package(chassis {v} QUIET)\n"
            f'if(chassis_FOUND)\n  message(FATAL_ERROR "chassis {v} found")\nendif()\n'
            for v in refused
        )
        + f"find_package(chassis {major_minor} REQUIRED)\n"
        "add_executable(app app.c)\n"
        "target_link_libraries(app PRIVATE chassis::chassis m)\n"
        "add_executable(app_static app.c)\n"
        "target_link_libraries(app_static PRIVATE chassis::static)\n"
    )
    build = tmp_path / "build"
    for cmd in (
        [CMAKE, "-S", str(app), "-B", str(build), f"-DCMAKE_PREFIX_PATH={prefix}"],
        [CMAKE, "--build", str(build)],
    ):
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr

    def needed(program: Path) -> str:
        return subprocess.run(
            ["readelf", "-d", str(program)], capture_output=True, text=True, check=True
        ).stdout

    assert f"Shared library: [libchassis.so.{abi}]" in needed(build / "app")
    assert "libchassis" not in needed(build / "app_static")
    for name in ("app", "app_static"):
        # No LD_LIBRARY_PATH: CMake gives a program built in its tree the imported library's
        # folder as its run path.
        run = subprocess.run(
            [str(build / name), str(tmp_path / f"{name}.chassis")],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 0, (name, run.stderr)
        with chassis.IndexReader(tmp_path / f"{name}.chassis") as reader:
            assert len(reader) > 0
