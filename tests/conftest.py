"""Shared fixtures and helpers for the Chassis test suites.

* fixtures: ``index_path`` (a path in a fresh temporary directory, file not yet created), ``rng``;
* ``brute_force_knn`` / ``pairwise_distances``: exact k-NN in float64 NumPy with Chassis's metric
  definitions (euclidean = true L2, cosine = 1 - cos on normalised vectors, inner_product = -dot);
* ``assert_exact_knn``: checks that one search answer is exact (up to near ties);
  ``ExactOracle`` the same for a fixed query set over growing prefixes of the data;
  ``exact_search``: an index's own search with ef >= len;
* ``clustered_data``: seeded Gaussian-cluster data; ``vecs``: seeded standard-normal vectors;
* ``run_python`` / ``dump_index``: run a script in a fresh interpreter that imports the same
  ``chassis`` as the tests, and read back an index's whole state from such a process;
  ``warm_child``: such a script, in which a reader warms a file and reports its memory_stats;
* ``killed_child``, ``wait_for``, ``read_log``, ``flush_candidates``, ``child_module``: the
  SIGKILL harness of tests/test_kill*.py and the reader processes' tests;
* the ``--kills N`` command-line option used by tests/test_kill.py;
* the hypothesis profile (``deadline=None``, modest ``max_examples``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import chassis
import ci_tiers
import numpy as np
import pytest
from hypothesis import HealthCheck, settings

METRICS = ("euclidean", "cosine", "inner_product")
PRECISIONS = ("full", "half")
NO_ID = 2**64 - 1  # the reserved id used to pad search_batch results
MAX_ID = 2**64 - 2  # the largest id a caller may use

# --------------------------------------------------------------------------- hypothesis
for _profile, _examples in (("chassis", 25), ("thorough", 300)):
    settings.register_profile(
        _profile,
        deadline=None,
        max_examples=_examples,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        print_blob=True,
    )
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "chassis"))


# --------------------------------------------------------------------------- options
def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--kills",
        action="store",
        type=int,
        default=30,
        help="number of SIGKILL trials run by tests/test_kill.py (default 30)",
    )


# --------------------------------------------------------------------------- tiers (ci_tiers.py)
def pytest_configure(config: pytest.Config) -> None:
    ci_tiers.configure()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    ci_tiers.record(report)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    ci_tiers.record(report)


def pytest_sessionfinish(session: pytest.Session) -> None:
    ci_tiers.finish(session)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    ci_tiers.summary(terminalreporter)


# --------------------------------------------------------------------------- fixtures
@pytest.fixture
def index_path(tmp_path: Path) -> str:
    """Path of an index file that does not exist yet, in a fresh temporary directory."""
    return str(tmp_path / "index.chassis")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20240611)


# --------------------------------------------------------------------------- data
def clustered_data(
    n: int,
    dims: int,
    *,
    clusters: int = 20,
    seed: int = 0,
    sample_seed: int | None = None,
    spread: float = 0.35,
) -> np.ndarray:
    """``n`` float32 points (C-contiguous) drawn from ``clusters`` isotropic Gaussians.

    Centres are N(0, 1) per coordinate, drawn from ``seed``; points are centre + spread * N(0, 1),
    drawn from ``sample_seed`` (default: derived from ``seed``). Same ``seed`` with another
    ``sample_seed`` gives fresh points from the same clusters (e.g. queries). Deterministic.
    """
    centres = np.random.default_rng(seed).standard_normal((clusters, dims))
    g = np.random.default_rng(seed + 1_000_003 if sample_seed is None else sample_seed)
    which = g.integers(0, clusters, size=n)
    pts = centres[which] + spread * g.standard_normal((n, dims))
    return np.ascontiguousarray(pts, dtype=np.float32)


def vecs(n: int, d: int = 8, seed: int = 0) -> np.ndarray:
    """(n, d) seeded standard-normal float32 vectors."""
    return np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)


def to_half(x: np.ndarray) -> np.ndarray:
    """What half-precision storage keeps of ``x``: f16 rounding (nearest even), as float32."""
    return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float32)


def normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def bits(x: np.ndarray) -> np.ndarray:
    """The raw bit patterns of a float32 array (for bit-identity comparisons)."""
    return np.ascontiguousarray(np.asarray(x), dtype=np.float32).view(np.uint32)


def assert_bit_identical(got: np.ndarray, expected: np.ndarray, what: str = "vectors") -> None:
    got = np.asarray(got)
    expected = np.asarray(expected)
    assert got.dtype == np.float32, f"{what}: dtype {got.dtype}, expected float32"
    assert got.shape == expected.shape, f"{what}: shape {got.shape} != {expected.shape}"
    same = bits(got) == bits(expected)
    if not same.all():
        bad = np.argwhere(~same)[:5]
        raise AssertionError(
            f"{what}: {int((~same).sum())} values differ in their bits; first at {bad.tolist()}: "
            f"got {got[tuple(bad[0])]!r}, expected {expected[tuple(bad[0])]!r}"
        )


# --------------------------------------------------------------------------- brute force
def pairwise_distances(data: np.ndarray, queries: np.ndarray, metric: str) -> np.ndarray:
    """(q, n) float64 distances with Chassis's definitions (smaller is nearer)."""
    x = np.asarray(data, dtype=np.float64)
    q = np.atleast_2d(np.asarray(queries, dtype=np.float64))
    if x.shape[0] == 0:
        return np.zeros((q.shape[0], 0))
    if metric == "euclidean":
        # exact difference form (no cancellation); chunk to bound memory
        out = np.empty((q.shape[0], x.shape[0]))
        step = max(1, 4_000_000 // max(1, x.size))
        for s in range(0, q.shape[0], step):
            diff = q[s : s + step, None, :] - x[None, :, :]
            out[s : s + step] = np.sqrt(np.einsum("qnd,qnd->qn", diff, diff))
        return out
    if metric == "cosine":
        return 1.0 - normalise(q) @ normalise(x).T
    if metric == "inner_product":
        return -(q @ x.T)
    raise ValueError(f"unknown metric {metric!r}")


def brute_force_knn(
    data: np.ndarray,
    queries: np.ndarray,
    k: int,
    metric: str,
    ids: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact k-NN: ``(ids, distances)`` of shape (q, min(k, n)), nearest first.

    ``ids`` maps row positions of ``data`` to index ids (default: the row numbers). Ties keep the
    order of ``data`` (stable sort).
    """
    d = pairwise_distances(data, queries, metric)
    n = d.shape[1]
    kk = min(k, n)
    order = np.argsort(d, axis=1, kind="stable")[:, :kk]
    row_ids = np.arange(n, dtype=np.uint64) if ids is None else np.asarray(ids, dtype=np.uint64)
    return row_ids[order], np.take_along_axis(d, order, axis=1)


def exact_search(
    index: chassis.VectorIndex | chassis.IndexReader | chassis.Snapshot,
    query: np.ndarray,
    k: int = 10,
) -> tuple[np.ndarray, np.ndarray]:
    """(ids, distances) of an index's exact search: ef >= len, so the whole visible state is
    scanned (the index's answer, to hold against brute force or against itself)."""
    hits = index.search(query, k, ef=max(len(index), k, 1) + 1000)
    return np.array([h.id for h in hits], dtype=np.uint64), np.array([h.distance for h in hits])


class ExactOracle:
    """Brute-force answers for a fixed query set over prefixes of the data (ids 0..n-1)."""

    def __init__(self, data: np.ndarray, queries: np.ndarray, k: int) -> None:
        self.k = k
        self.true = pairwise_distances(data, queries, "euclidean")  # (q, n)
        self.scale = float(np.abs(data).max() + np.abs(queries).max())
        self._best: dict[tuple[int, int], np.ndarray] = {}

    def best(self, qi: int, n: int) -> np.ndarray:
        key = (qi, n)
        if key not in self._best:
            kk = min(self.k, n)
            self._best[key] = np.sort(np.partition(self.true[qi, :n], kk - 1)[:kk])
        return self._best[key]

    def matches(self, qi: int, ids, dists, n: int) -> bool:
        """Whether (ids, dists) is the exact k-NN answer over ids 0..n-1 (up to near ties):
        min(k, n) distinct ids below n, reported distances their true ones, and their true
        distances the k smallest."""
        ids = np.asarray(ids, dtype=np.int64).ravel()
        dists = np.asarray(dists, dtype=np.float64).ravel()
        keep = ids >= 0  # search_batch pads with 2**64-1, which is -1 here
        ids, dists = ids[keep], dists[keep]
        kk = min(self.k, n)
        if len(ids) != kk or len(set(ids.tolist())) != kk or (ids >= n).any():
            return False
        atol, rtol = 1e-4 * self.scale, 1e-4
        true_of_got = self.true[qi, ids]
        if not np.allclose(dists, true_of_got, rtol=rtol, atol=atol):
            return False
        return bool(np.allclose(np.sort(true_of_got), self.best(qi, n), rtol=rtol, atol=atol))


def default_tolerance(
    metric: str, precision: str, data: np.ndarray, query: np.ndarray
) -> tuple[float, float]:
    """(rtol, atol) for comparing Chassis's float32 distances with float64 brute force.

    ``data`` is the stored data (already f16-rounded for half precision), so the only error left
    is float32 arithmetic; for half precision we allow more (the index may keep cosine vectors
    normalised before rounding, or widen differently).
    """
    x = np.asarray(data, dtype=np.float64)
    q = np.asarray(query, dtype=np.float64)
    if len(x) == 0:
        return 1e-4, 1e-4
    if metric == "inner_product":
        scale = np.linalg.norm(x, axis=1).max() * np.linalg.norm(q) + 1e-6
    elif metric == "euclidean":
        scale = np.abs(x).max() + np.abs(q).max() + 1e-6
    else:
        scale = 1.0
    if precision == "half":
        return 2e-3, 3e-3 * scale
    return 1e-4, 1e-4 * scale


def assert_exact_knn(
    got_ids,
    got_dists,
    data: np.ndarray,
    data_ids,
    query: np.ndarray,
    k: int,
    metric: str,
    *,
    precision: str = "full",
    rtol: float | None = None,
    atol: float | None = None,
    context: str = "",
) -> None:
    """Assert that ``(got_ids, got_dists)`` is the exact k-NN answer for ``query`` over ``data``.

    Checks: the number of results is min(k, n); ids are unique and live; each reported distance
    is the true distance of the reported id; results are sorted nearest first; the sorted true
    distances of the returned ids equal the k smallest true distances; and at every rank with no
    near tie (gap > 10 * tolerance on both sides) the id is the brute-force id.
    """
    got_ids = np.asarray(got_ids, dtype=np.uint64).ravel()
    got_dists = np.asarray(got_dists, dtype=np.float64).ravel()
    data = np.asarray(data, dtype=np.float32)
    data_ids = np.asarray(data_ids, dtype=np.uint64).ravel()
    n = len(data)
    kk = min(k, n)
    drt, dat = default_tolerance(metric, precision, data, query)
    rtol = drt if rtol is None else rtol
    atol = dat if atol is None else atol
    where = f" ({context})" if context else ""

    assert len(got_ids) == kk, f"expected {kk} results, got {len(got_ids)}{where}"
    assert len(got_dists) == kk
    if kk == 0:
        return
    assert len(set(got_ids.tolist())) == kk, f"duplicate ids in results {got_ids.tolist()}{where}"
    pos = {int(i): p for p, i in enumerate(data_ids.tolist())}
    missing = [int(i) for i in got_ids if int(i) not in pos]
    assert not missing, f"results contain ids that are not in the index: {missing}{where}"
    true = pairwise_distances(data, query, metric)[0]
    true_of_got = true[[pos[int(i)] for i in got_ids]]
    np.testing.assert_allclose(
        got_dists,
        true_of_got,
        rtol=rtol,
        atol=atol,
        err_msg=f"reported distances are not the distances of the reported ids{where}",
    )
    assert np.all(np.diff(got_dists) >= -(atol + rtol * np.abs(got_dists[1:]))), (
        f"results not sorted nearest first: {got_dists.tolist()}{where}"
    )
    bf_ids, bf_d = brute_force_knn(data, query, kk, metric, data_ids)
    bf_ids, bf_d = bf_ids[0], bf_d[0]
    np.testing.assert_allclose(
        np.sort(true_of_got),
        bf_d,
        rtol=rtol,
        atol=atol,
        err_msg=f"search is not exact: returned {got_ids.tolist()}, brute force {bf_ids.tolist()}{where}",
    )
    sorted_all = np.sort(true)
    band = 10 * (atol + rtol * np.abs(sorted_all))
    for r in range(kk):
        below = sorted_all[r] - sorted_all[r - 1] if r > 0 else np.inf
        above = sorted_all[r + 1] - sorted_all[r] if r + 1 < n else np.inf
        if below > band[r] and above > band[r]:
            assert int(got_ids[r]) == int(bf_ids[r]), (
                f"rank {r}: got id {int(got_ids[r])}, brute force {int(bf_ids[r])} "
                f"(no near tie){where}"
            )


def recall_at_k(got_ids: np.ndarray, true_ids: np.ndarray) -> float:
    got_ids = np.asarray(got_ids)
    true_ids = np.asarray(true_ids)
    hits = sum(len(set(g.tolist()) & set(t.tolist())) for g, t in zip(got_ids, true_ids))
    return hits / true_ids.size


# --------------------------------------------------------------------------- subprocesses
def child_env() -> dict[str, str]:
    """Environment for child interpreters: they import the very ``chassis`` the tests import."""
    env = dict(os.environ)
    pkg_parent = str(Path(chassis.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(
        [pkg_parent] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    )
    env.setdefault("PYTHONFAULTHANDLER", "1")
    return env


def run_python(
    code: str,
    *args,
    timeout: float = 120,
    input: str | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (``sys.executable -c``) with ``args`` as argv[1:];
    ``env`` is added to the children's environment (``child_env``)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *[str(a) for a in args]],
        capture_output=True,
        text=True,
        timeout=timeout,
        input=input,
        env={**child_env(), **(env or {})},
    )


def describe_returncode(rc: int) -> str:
    if rc < 0:
        try:
            return f"killed by signal {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit code {rc}"


def assert_child_ok(proc: subprocess.CompletedProcess, what: str = "child process") -> None:
    assert proc.returncode == 0, (
        f"{what} failed: {describe_returncode(proc.returncode)}\n"
        f"--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-4000:]}"
    )


DUMP_SCRIPT = r"""
import json, sys
import numpy as np
import chassis

path, out, read_only, k = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
queries = np.load(sys.argv[5]) if len(sys.argv) > 5 else None
index = chassis.VectorIndex(path, read_only=read_only)
ids = index.ids()
d = index.dimensions
if len(ids):
    vecs = np.stack([index.get(int(i)) for i in ids])
else:
    vecs = np.empty((0, d), dtype=np.float32)
arrays = dict(ids=np.asarray(ids), vecs=np.asarray(vecs))
if queries is not None:
    ef = max(len(index), k)
    s_ids = np.full((len(queries), k), 2**64 - 1, dtype=np.uint64)
    s_d = np.full((len(queries), k), np.inf, dtype=np.float64)
    for qi, q in enumerate(queries):
        for r, hit in enumerate(index.search(q, k, ef=ef)):
            s_ids[qi, r] = hit.id
            s_d[qi, r] = hit.distance
    b_ids, b_d = index.search_batch(queries, k, ef=ef)
    arrays.update(search_ids=s_ids, search_d=s_d, batch_ids=b_ids, batch_d=b_d)
np.savez(out, **arrays)
meta = dict(
    len=len(index), dimensions=d, metric=index.metric, precision=index.precision,
    pending=index.pending, read_only=index.read_only,
    max_connections=index.options.max_connections,
)
index.close()
print(json.dumps(meta))
"""


def dump_index(
    path: str | os.PathLike,
    workdir: str | os.PathLike,
    *,
    queries: np.ndarray | None = None,
    k: int = 10,
    read_only: bool = False,
    tag: str = "dump",
) -> dict:
    """Open ``path`` in a fresh interpreter (``dimensions=None``) and return its whole state.

    Returns a dict with ``ids``, ``vecs`` (get() of each id, in ids() order), ``meta`` and, when
    ``queries`` is given, exact search results (ef >= len) from ``search`` (``search_ids``,
    ``search_d``, padded like search_batch) and from ``search_batch`` (``batch_ids``,
    ``batch_d``). Fails the test if the child does not exit cleanly.
    """
    workdir = Path(workdir)
    out = workdir / f"{tag}.npz"
    args = [str(path), str(out), "1" if read_only else "0", str(k)]
    if queries is not None:
        qfile = workdir / f"{tag}-queries.npy"
        np.save(qfile, np.ascontiguousarray(queries, dtype=np.float32))
        args.append(str(qfile))
    proc = run_python(DUMP_SCRIPT, *args)
    assert_child_ok(proc, f"reopening {path} in a fresh process")
    meta = json.loads(proc.stdout.strip().splitlines()[-1])
    with np.load(out) as z:
        result = {name: z[name] for name in z.files}
    result["meta"] = meta
    return result


def warm_child(preamble: str, *, warm_s: float, land_s: float, landed: str) -> str:
    """A child script: ``preamble`` (it sets ``path``, and may restrict the process), then a
    reader of ``path`` warms it, waits up to ``warm_s`` for the warm thread and up to ``land_s``
    for the expression ``landed`` (MADV_WILLNEED starts reads and returns), and prints its
    memory_stats() ``first``, ``done`` (when warming ended) and ``last`` as JSON."""
    return textwrap.dedent(preamble) + textwrap.dedent(
        f"""
        import json, time
        import chassis  # after the preamble: every thread the module starts inherits its filters
        r = chassis.IndexReader(path)
        first = r.memory_stats()
        r.warm()
        deadline = time.monotonic() + {warm_s}
        while r.memory_stats()["warm_running"] and time.monotonic() < deadline:
            time.sleep(0.005)
        done = r.memory_stats()
        deadline = time.monotonic() + {land_s}
        while not ({landed}) and time.monotonic() < deadline:
            time.sleep(0.01)
        print(json.dumps({{"first": first, "done": done, "last": r.memory_stats()}}))
        """
    )


def assert_has_help(exc: BaseException) -> None:
    """Chassis messages: one line naming the problem, then a line starting with 'help:'."""
    text = str(exc.args[0]) if (isinstance(exc, KeyError) and exc.args) else str(exc)
    lines = text.splitlines()
    assert len(lines) >= 2, f"message has no second line: {text!r}"
    assert lines[0].strip(), f"first line of the message is empty: {text!r}"
    assert lines[1].startswith("help:"), f"second line does not start with 'help:': {text!r}"


# --------------------------------------------------------------------------- killed children
def child_module(folder: Path, name: str, source: str) -> tuple[ModuleType, Path]:
    """A child program's `source` written to `folder/name.py` and loaded in this process too,
    so that the test and its child share one definition of the plan (module, script)."""
    script = folder / f"{name}.py"
    script.write_text(source)
    spec = importlib.util.spec_from_file_location(name, script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, script


def read_log(log: Path) -> list[str]:
    """The complete lines of a child's log (a line still being written is left out)."""
    try:
        text = log.read_text()
    except FileNotFoundError:
        return []
    return text[: text.rfind("\n") + 1].splitlines()


IMMUTABLE_SKIP = (
    "root on a file system without the immutable attribute (chattr +i): nothing here stops "
    "root writing a file, so a reader that may not write cannot be made"
)


@contextlib.contextmanager
def immutable(path: str | Path) -> Iterator[bool]:
    """`path` made so that this process's children may not open it for writing, for the body
    of the `with`: read-only permissions for a user, the immutable attribute (`chattr +i`) for
    root, whom permissions do not stop. Yields whether it could be (see IMMUTABLE_SKIP)."""
    if os.name != "posix" or os.geteuid() != 0:
        mode = os.stat(path).st_mode
        os.chmod(path, 0o444)
        try:
            yield True
        finally:
            os.chmod(path, mode)
        return
    try:
        made = subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode == 0
    except FileNotFoundError:
        made = False
    try:
        yield made
    finally:
        if made:
            subprocess.run(["chattr", "-i", str(path)], check=True)


@contextlib.contextmanager
def killed_child(argv: list[str]) -> Iterator[subprocess.Popen]:
    """Run `argv` (its stderr kept) for the body of the `with`, then SIGKILL it: the body waits
    for the moment to kill at. Fails when the child ends on its own first, or dies of anything
    but the SIGKILL."""
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=child_env(),
    )
    try:
        yield proc
        if proc.poll() is not None:
            raise AssertionError(
                f"child ended on its own ({describe_returncode(proc.returncode)})\n"
                f"{proc.stderr.read().decode(errors='replace')[-4000:]}"
            )
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL, describe_returncode(proc.returncode)


def wait_for(
    proc: subprocess.Popen,
    log: Path,
    ready: Callable[[list[str]], bool],
    what: str,
    timeout: float = 120.0,
    poll: float = 0.001,
) -> list[str]:
    """Poll a `killed_child`'s log until ``ready(lines)`` or the child logged DONE; fail if the
    child died."""
    deadline = time.monotonic() + timeout
    while True:
        lines = read_log(log)
        if ready(lines) or "DONE" in lines:
            return lines
        if proc.poll() is not None:
            raise AssertionError(
                f"child ended on its own ({describe_returncode(proc.returncode)}) before {what}; "
                f"log tail {lines[-5:]}\n--- stderr ---\n"
                f"{proc.stderr.read().decode(errors='replace')[-4000:]}"
            )
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"gave up waiting for {what}; log tail {lines[-5:]}")
        time.sleep(poll)


def flush_candidates(lines: list[str]) -> list[int]:
    """The flushes a killed child's log allows the file to be at: its last completed flush (END
    j), and the next one when it had begun (BEGIN j+1). The log must show the index opened and
    no id other than the contract says (MISMATCH)."""
    assert "OPENED" in lines
    mismatches = [x for x in lines if x.startswith("MISMATCH")]
    assert not mismatches, f"the index assigned other ids than the contract says: {mismatches}"
    ended = [int(x.split()[1]) for x in lines if x.startswith("END ")]
    begun = [int(x.split()[1]) for x in lines if x.startswith("BEGIN ")]
    last_end = max(ended, default=0)
    return [last_end] + ([last_end + 1] if (last_end + 1) in begun else [])
