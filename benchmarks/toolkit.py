"""What the benchmark scripts share beyond `chassis._bench` (the engines, the sweeps and the
result schema, also behind `chassis bench`, which the scripts import from there):

  - where the data is: $CHASSIS_DATA (a folder holding debian-minilm/), else
    <repo>/../shared/data; the data sets the scripts compare on (load_dataset);
  - command lines: `Parser`, whose `sized` options default to a smaller value in a --quick
    run; the Linux-only scripts' guard (not_linux); a folder for index files (work_folder);
  - results files: benchmarks/results/YYYY-MM-DD-<script>-<machine>.json (add_json_option,
    run_record, write_results), naming no folder of the machine;
  - children/: the programs the scripts run in fresh processes, by path (child_script);
  - page-cache helpers (Linux): file_resident_bytes, evict_file.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import mmap
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from chassis import datasets
from chassis._bench import machine_info, write_json

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results"
CHILDREN = HERE / "children"
MiB = 1 << 20


def log(*parts: Any) -> None:
    """A progress line on stderr, so that stdout holds the report alone."""
    print(*parts, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ data
def data_dir() -> Path:
    """The folder of the data sets: $CHASSIS_DATA, else <repo>/../shared/data."""
    env = os.environ.get("CHASSIS_DATA")
    return Path(env).expanduser() if env else REPO.parent / "shared" / "data"


MINILM = data_dir() / "debian-minilm"


def csv(text: str) -> list[str]:
    """The non-empty, stripped parts of a comma-separated option."""
    return [part.strip() for part in text.split(",") if part.strip()]


def load_dataset(
    name: str,
    *,
    minilm: str | os.PathLike[str] = MINILM,
    queries: int = 1_000,
    k: int = 10,
    quick: bool = False,
    clustered_n: int = 100_000,
    clustered_dims: int = 128,
) -> dict[str, Any]:
    """{"name", "base", "queries", "truth", "metric"} of a data set the speed benchmark uses:

    "minilm"     the debian-minilm folder (45,056 x 384, 1,000 queries, ground truth given;
                 --quick: the first 10,000 rows, ground truth computed);
    "clustered"  chassis.datasets.clustered(clustered_n, clustered_dims, seed 0), exact
                 ground truth computed.
    """
    if name == "minilm":
        data = datasets.load_npy_folder(minilm)
        base, qs, truth, metric = data.base, data.queries, data.gt_ids, data.metric
        if quick:
            base, truth = base[:10_000], None  # the given truth covers the full base only
        if queries < len(qs):
            qs = qs[:queries]
            truth = None if truth is None else truth[:queries]
    elif name == "clustered":
        base, qs = datasets.clustered(clustered_n, clustered_dims, queries, seed=0)
        truth, metric = None, "euclidean"
    else:
        raise SystemExit(f"unknown data set {name!r}; known: minilm, clustered")
    if truth is None or truth.shape[1] < k:
        start = time.perf_counter()
        truth, _ = datasets.ground_truth(base, qs, k, metric)
        print(f"  [{name}] exact ground truth in {time.perf_counter() - start:.1f} s", flush=True)
    return {
        "name": name,
        "base": np.ascontiguousarray(base, dtype=np.float32),
        "queries": np.ascontiguousarray(qs, dtype=np.float32),
        "truth": np.asarray(truth[:, :k]),
        "metric": metric,
    }


# ------------------------------------------------------------------ command lines
class Parser(argparse.ArgumentParser):
    """A script's argument parser (the script has --quick). An option added with `sized`
    defaults to ``full``, or to ``quick`` in a --quick run (a smoke run), unless given."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sized_defaults: dict[str, tuple[Any, Any]] = {}

    def sized(self, *flags: str, full: float, quick: float, help: str, **kwargs: Any) -> None:
        """An option of the type of ``full``; its help ends with "(full; --quick: quick)"."""
        shown = [f"{v:g}" if isinstance(v, float) else str(v) for v in (full, quick)]
        action = self.add_argument(
            *flags, type=type(full), help=f"{help} ({shown[0]}; --quick: {shown[1]})", **kwargs
        )
        self.sized_defaults[action.dest] = (full, quick)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        parsed, rest = super().parse_known_args(args, namespace)
        for dest, (full, quick) in self.sized_defaults.items():
            if getattr(parsed, dest) is None:
                setattr(parsed, dest, quick if parsed.quick else full)
        return parsed, rest


def not_linux(script: str, needs: str) -> bool:
    """True, after saying so, where this is not Linux, which ``script`` needs for ``needs``."""
    if sys.platform.startswith("linux"):
        return False
    print(f"{script}: Linux only ({needs})")
    return True


def work_folder(given: str | None, prefix: str) -> Path:
    """The folder for a run's index files: ``given``, else a new temporary one; made if missing."""
    folder = Path(given or tempfile.mkdtemp(prefix=prefix))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


# ------------------------------------------------------------------ results files
def machine_name() -> str:
    """This machine's host name, as a file-name part."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", platform.node() or "unknown").strip("-") or "unknown"


def results_path(script: str, day: datetime.date | None = None) -> Path:
    """benchmarks/results/YYYY-MM-DD-<script>-<machine>.json"""
    day = day or datetime.date.today()
    return RESULTS / f"{day.isoformat()}-{script}-{machine_name()}.json"


def add_json_option(parser: argparse.ArgumentParser) -> None:
    """--json [OUT]: write every figure as JSON; without OUT, to results_path(script)."""
    parser.add_argument(
        "--json",
        nargs="?",
        const="",
        metavar="OUT",
        help="write every figure as JSON to OUT (without OUT: "
        "benchmarks/results/YYYY-MM-DD-<script>-<machine>.json)",
    )


def _relative_paths(value: Any) -> Any:
    """`value` with every string naming a path beside the repository (the data sets in
    ../shared/data) written relative to it: results name no folder of the machine."""
    beside = str(REPO.parent) + os.sep
    if isinstance(value, str) and value.startswith(beside):
        return os.path.relpath(value, REPO)
    if isinstance(value, dict):
        return {k: _relative_paths(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_relative_paths(v) for v in value]
    return value


def run_record(args: argparse.Namespace, **fields: Any) -> dict[str, Any]:
    """The head of a run's results: the machine, the options it ran with, the measuring
    switches set (``CHASSIS_*`` variables but the data folder: ``docs/api.md``), then
    ``fields``."""
    switches = {
        k: v
        for k, v in sorted(os.environ.items())
        if k.startswith("CHASSIS_") and k != "CHASSIS_DATA"
    }
    return {"machine": machine_info(), "args": dict(vars(args)), "switches": switches, **fields}


def write_results(
    out: str | None, script: str, document: dict[str, Any], points: Sequence[Any] = ()
) -> Path | None:
    """Write a run's results (nothing when `out` is None; results_path(script) when it is
    ""): {"script", "date", "points": [Point, ...], **document}."""
    if out is None:
        return None
    path = Path(out) if out else results_path(script)
    head = {"script": script, "date": datetime.date.today().isoformat(), "points": list(points)}
    document = _relative_paths({**head, **document})
    if isinstance(document.get("args"), dict):
        # The command line as run, without where this file went, and with any other folder
        # of the machine (an absolute path not beside the repository) cut to its last part.
        document["args"] = {
            k: os.path.basename(v) if isinstance(v, str) and os.path.isabs(v) else v
            for k, v in document["args"].items()
            if k not in ("json", "plot")
        }
    written = write_json(path, document)
    print(f"\nwrote {written}")
    return written


# ------------------------------------------------------------------ child processes
def child_script(name: str) -> str:
    """Path of benchmarks/children/<name>.py, a program a benchmark runs in a fresh process."""
    path = CHILDREN / f"{name}.py"
    if not path.exists():
        raise FileNotFoundError(path)
    return str(path)


# ------------------------------------------------------------------ page cache (Linux)
def file_resident_bytes(path: str | os.PathLike) -> int:
    """Bytes of the file in the page cache now, as util-linux's fincore reports them (mincore
    over a mapping of the file, which reads nothing)."""
    fincore = shutil.which("fincore")
    if fincore is None:
        raise RuntimeError("fincore (util-linux) is needed to see what the page cache holds")
    out = subprocess.run(
        [fincore, "--bytes", "--noheadings", "--output", "RES", os.fspath(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.strip() or 0)


def evict_file(path: str | os.PathLike, *, check: bool = True) -> int:
    """Drop the file from the page cache (fsync, then posix_fadvise DONTNEED) so that the next
    reads come from the disk; returns the bytes still cached, and with `check` raises if more
    than a page is (a process that still maps the file keeps its pages). Linux."""
    gc.collect()
    with open(path, "rb") as f:
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    left = file_resident_bytes(path)
    if check and left > mmap.PAGESIZE:
        raise RuntimeError(
            f"{path}: {left} bytes still cached after POSIX_FADV_DONTNEED (is it still open?)"
        )
    return left
