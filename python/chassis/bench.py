"""The benchmark of `chassis bench` as a function: `run()` returns a `BenchResult`.

Why: a notebook should measure exactly what the terminal measures, and show it as a table
and a plot. `run()` is the one code path: the command line (`chassis bench`, `python -m
chassis bench`) calls it and prints the `BenchResult` it returns, and its `--json` is
`BenchResult.to_json`.

What `run()` does: builds an index of the data in a temporary folder, times the build and
the flush, opens the file again (writer and read-only), then measures recall@k and
single-thread queries per second over a sweep of ef. Peers named in `compare` (hnswlib,
usearch, faiss, chassisdb) are measured the same way in the same run, and QPS is compared at
equal recall (0.90, 0.95, 0.99, interpolated between sweep points). The measuring itself is
in `chassis._bench`, shared with `benchmarks/`.

    >>> import chassis.bench
    >>> result = chassis.bench.run(quick=True)            # doctest: +SKIP
    >>> result                                            # doctest: +SKIP  (a table in Jupyter)
    >>> result.plot()                                     # doctest: +SKIP

Nothing here imports matplotlib or a peer library until it is used.
"""

from __future__ import annotations

import html
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from chassis import _bench, _machine, datasets
from chassis._bench.inputs import METRICS as _METRICS
from chassis._bench.inputs import Data, PathLike, describe, load_data
from chassis._bench.sweep import Plan, measure_engine

__all__ = [
    "BenchResult",
    "run",
    "engine_names",
    "DEFAULT_EF",
    "QUICK_EF",
    "PEERS",
    "TARGETS",
    "METRICS",
]

DEFAULT_EF: tuple[int, ...] = (16, 32, 64, 128, 256)
"""The ef sweep of a full run."""
QUICK_EF: tuple[int, ...] = (10, 20, 40, 80, 160)
"""The ef sweep of a quick run."""
PEERS: tuple[str, ...] = ("hnswlib", "usearch", "faiss", "chassisdb")
"""The libraries `compare` can name ("all" names every one)."""
TARGETS: tuple[float, ...] = _bench.TARGETS
"""The recall levels at which QPS is compared."""
METRICS: tuple[str, ...] = _METRICS
"""The distances `metric` can name."""


# ------------------------------------------------------------------ options
def engine_names(compare: str | Iterable[str]) -> list[str]:
    """The peers `compare` names, checked, in order, without repeats and without "chassis".

    Parameters
    ----------
    compare : str or iterable of str
        Engine names, or one comma-separated string of them; "all" names every peer.

    Returns
    -------
    list of str

    Raises
    ------
    ValueError
        When a name is not a known engine.

    Examples
    --------
    >>> engine_names("hnswlib, faiss,hnswlib")
    ['hnswlib', 'faiss']
    """
    parts = compare.split(",") if isinstance(compare, str) else list(compare)
    names = [part.strip().lower() for part in parts if part.strip()]
    if names == ["all"]:
        return list(PEERS)
    unknown = [n for n in names if n not in _bench.ENGINES]
    if unknown:
        raise ValueError(f"unknown engine {', '.join(unknown)}; known: {', '.join(PEERS)} (or all)")
    return [n for n in dict.fromkeys(names) if n != "chassis"]


def _ef_list(ef: Iterable[int] | None, quick: bool) -> list[int]:
    efs = [int(e) for e in ef] if ef is not None else list(QUICK_EF if quick else DEFAULT_EF)
    if not efs or min(efs) < 1:
        raise ValueError(f"ef is {efs}: give one or more positive ints, such as 16, 32, 64")
    return efs


# ------------------------------------------------------------------ words
_cpu_text = _machine.cpu_text  # the words of the "cpu:" line, shared with the report


def _footnote(cells: Iterable[str]) -> str | None:
    """The footnote for the `*` and `-` that the QPS cells hold; None when none does."""
    cells = list(cells)
    parts = []
    if any(c.endswith("*") for c in cells):
        parts.append("* the smallest ef already reached this recall: its QPS, a lower bound")
    if any(c == "-" for c in cells):
        parts.append("- not reached by the largest ef: add a larger one with --ef")
    return f"({'; '.join(parts)})" if parts else None


_MODE_WORDS = {"batch": "search_batch", "loop": "loop of search()"}


# ------------------------------------------------------------------ the result
@dataclass
class BenchResult:
    """What `run()` measured: figures per engine, the data, the settings, and their displays.

    `str(result)` (and `print(result)`) is what `chassis bench` prints; in Jupyter the result
    shows itself as HTML tables. `to_dict()` / `to_json(path)` give the document of `chassis
    bench --json`.

    Parameters
    ----------
    engines : dict of str to dict
        Per engine ("chassis" first, then the peers measured): "version", "build_s",
        "vectors_per_s", "persist_s", "file_bytes", "open_ms" (and for chassis
        "open_read_only_ms"), "sweep" {mode: [{"ef", "recall", "qps"}, ...]} and "qps_at"
        {mode: {"0.9" | "0.95" | "0.99": {"qps", "how"}}}; "how" is "interpolated",
        "at-first-point" (the smallest ef already reached the recall: a lower bound) or
        "not-reached".
    data : dict
        "label", "source", "n", "dims", "queries", "metric", "ground_truth" ("given" or
        "computed"), "ground_truth_s", and "sampled_from" ({"n", "queries"} before a quick
        run took its sample, else None).
    k : int
        Neighbours per query; recall is recall@k.
    ef : list of int
        The ef sweep.
    modes : list of str
        "batch" (`search_batch`, one thread), and "loop" (a Python loop of `search`) when
        asked for.
    settings : dict
        The arguments of the run (the "args" of the JSON document).
    build_threads : int
        Threads every engine built with.
    notes : list of str
        Peers skipped or failed, and what each peer's figures mean.
    log : list of str
        The lines reported while running (what `log` was given, and the terminal shows
        before the tables).
    machine : dict
        Python, platform, cores, NumPy and `chassis.cpu_info()`.
    chassis_version : str

    Examples
    --------
    >>> import chassis.bench
    >>> result = chassis.bench.run(n=2_000, queries=50, ef=[10, 40])   # doctest: +SKIP
    >>> result.engines["chassis"]["sweep"]["batch"][-1]["recall"]      # doctest: +SKIP
    0.998
    >>> print(result.table())                                         # doctest: +SKIP
    """

    engines: dict[str, dict[str, Any]]
    data: dict[str, Any]
    k: int
    ef: list[int]
    modes: list[str]
    settings: dict[str, Any]
    build_threads: int
    notes: list[str] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    machine: dict[str, Any] = field(default_factory=dict)
    chassis_version: str = ""

    # -- figures
    @property
    def ratios(self) -> dict[str, dict[str, Any]]:
        """Chassis's figures over each peer's: ``{peer: {figure: ratio}}``.

        The figures are build time, open time, file size and QPS at each target recall
        (QPS: > 1 means chassis is faster; times and sizes: < 1 means chassis is faster or
        smaller). Empty without peers.
        """
        if "chassis" not in self.engines:
            return {}
        ours = self.engines["chassis"]
        return {
            peer: _bench.ratios(ours, r) for peer, r in self.engines.items() if peer != "chassis"
        }

    @property
    def title(self) -> str:
        """One line naming the data and the index settings (the plot's title)."""
        d, s = self.data, self.settings
        return (
            f"{d['label']}: {d['n']:,} x {d['dims']}, {d['metric']}, "
            f"M={s['m']}, ef_construction={s['ef_construction']}"
        )

    def to_dict(self) -> dict[str, Any]:
        """The document `chassis bench --json` writes.

        Returns
        -------
        dict
            "chassis_version", "machine", "args", "data", "k", "build_threads", "targets",
            "engines", "ratios", "notes" and "points" (every sweep point, flattened, naming
            its engine, data set and mode).
        """
        return {
            "chassis_version": self.chassis_version,
            "machine": self.machine,
            "args": self.settings,
            "data": self.data,
            "k": self.k,
            "build_threads": self.build_threads,
            "targets": list(TARGETS),
            "engines": self.engines,
            "ratios": self.ratios,
            "notes": self.notes,
            "points": _bench.sweep_points(
                self.data["label"], {name: r["sweep"] for name, r in self.engines.items()}
            ),
        }

    def to_json(self, path: PathLike) -> Path:
        """Write `to_dict()` as indented JSON (the file of `chassis bench --json`).

        Parameters
        ----------
        path : str or os.PathLike
            The file; its folder is created when missing.

        Returns
        -------
        pathlib.Path
            The path written.

        Examples
        --------
        >>> result.to_json("results/bench.json")                  # doctest: +SKIP
        PosixPath('results/bench.json')
        """
        return _bench.write_json(path, self.to_dict())

    # -- text
    def _qps_headers(self) -> list[str]:
        many = len(self.modes) > 1
        return [f"{m} QPS@{t}" if many else f"QPS@{t}" for m in self.modes for t in TARGETS]

    def table(self) -> str:
        """The tables `chassis bench` prints after measuring.

        One table per search mode (recall@k and QPS for each ef, a column pair per engine),
        a summary (build, flush, open, file size and QPS at recall 0.90/0.95/0.99 per
        engine), a footnote when a QPS cell is a lower bound (`*`) or missing (`-`), and
        with peers, the ratios chassis / peer and the notes.

        Returns
        -------
        str
        """
        fmt, table = _bench.fmt, _bench.table
        targets = [str(t) for t in TARGETS]
        out: list[str] = []
        for mode in self.modes:
            engines = [e for e in self.engines if mode in self.engines[e]["sweep"]]
            if not engines:
                continue
            out.append(f"{_MODE_WORDS.get(mode, mode)}, 1 thread, k={self.k}")
            headers = ["ef"]
            for e in engines:
                prefix = "" if len(engines) == 1 else f"{e} "
                headers += [f"{prefix}recall@{self.k}", f"{prefix}QPS"]
            rows = []
            for i, ef in enumerate(self.ef):
                row = [str(ef)]
                for e in engines:
                    point = self.engines[e]["sweep"][mode][i]
                    row += [f"{point['recall']:.4f}", fmt(point["qps"])]
                rows.append(row)
            out.append(table(headers, rows, align_first="right") + "\n")

        out.append(f"summary (QPS at recall@{self.k}, interpolated between sweep points; 1 thread)")
        headers = ["engine", "version", "build s", "vectors/s", "flush/save ms", "open ms", "MiB"]
        headers += self._qps_headers()
        rows, cells = [], []
        for e, r in self.engines.items():
            size = r["file_bytes"] / 2**20 if r["file_bytes"] is not None else None
            qps = [_bench.qps_cell(r, m, t) for m in self.modes for t in targets]
            cells += qps
            rows.append(
                [
                    e,
                    r["version"],
                    fmt(r["build_s"], ".2f"),
                    fmt(r["vectors_per_s"]),
                    fmt(r["persist_s"] * 1e3, ".1f"),
                    fmt(r["open_ms"], ".3f"),
                    fmt(size, ".1f"),
                ]
                + qps
            )
        out.append(table(headers, rows))
        note = _footnote(cells)
        if note:
            out.append(note)

        ratios = self.ratios
        if ratios:
            out.append(
                "\nchassis / peer (QPS: > 1 means chassis is faster; build, open, size: "
                "< 1 means chassis is faster or smaller)"
            )
            headers = ["", "build", "open", "size"] + self._qps_headers()
            rows = []
            for peer, rr in ratios.items():
                rows.append(
                    [
                        f"vs {peer}",
                        fmt(rr["build_s"], ".2f", "x"),
                        fmt(rr["open_ms"], ".2f", "x"),
                        fmt(rr["file_bytes"], ".2f", "x"),
                    ]
                    + [
                        fmt(rr["qps_at"].get(m, {}).get(t), ".2f", "x")
                        for m in self.modes
                        for t in targets
                    ]
                )
            out.append(table(headers, rows))
        if self.notes and self.settings.get("compare"):
            out.append("\nnotes:\n" + "\n".join(f"- {note}" for note in self.notes))
        return "\n".join(out)

    def __str__(self) -> str:
        return "\n".join(self.log) + "\n\n" + self.table()

    def __repr__(self) -> str:
        d = self.data
        return (
            f"<BenchResult {d['label']}: {d['n']:,} x {d['dims']}, {d['queries']:,} queries, "
            f"{d['metric']}; k={self.k}, ef {self.ef[0]}..{self.ef[-1]}; "
            f"engines {', '.join(self.engines)}>"
        )

    # -- notebooks
    def _repr_html_(self) -> str:
        """HTML tables for Jupyter: recall@k and QPS per ef for each engine, then QPS at
        recall 0.90/0.95/0.99 with build, open and size per engine."""
        esc = html.escape
        fmt = _bench.fmt
        d = self.data
        th = '<th style="text-align:{}">{}</th>'
        td = '<td style="text-align:right">{}</td>'
        parts = [
            '<div class="chassis-bench">',
            f"<p><b>{esc(str(d['label']))}</b>: {d['n']:,} x {d['dims']}, "
            f"{d['queries']:,} queries, {esc(str(d['metric']))}; recall@{self.k} and queries "
            f"per second on 1 thread; M={self.settings.get('m')}, "
            f"ef_construction={self.settings.get('ef_construction')}</p>",
        ]
        if d.get("sampled_from"):
            parts.append(f"<p>{esc(_sample_text(d))}</p>")
        for mode in self.modes:
            engines = [e for e in self.engines if mode in self.engines[e]["sweep"]]
            if not engines:
                continue
            head1 = [th.format("right", "")] + [
                f'<th colspan="2" style="text-align:center">{esc(e)}</th>' for e in engines
            ]
            head2 = [th.format("right", "ef")] + [
                th.format("right", f"recall@{self.k}") + th.format("right", "QPS") for _ in engines
            ]
            body = []
            for i, ef in enumerate(self.ef):
                row = [td.format(ef)]
                for e in engines:
                    point = self.engines[e]["sweep"][mode][i]
                    row += [td.format(f"{point['recall']:.4f}"), td.format(fmt(point["qps"]))]
                body.append("<tr>" + "".join(row) + "</tr>")
            parts.append(
                f'<table class="chassis-bench-sweep" data-mode="{esc(mode)}">'
                f"<caption>{esc(_MODE_WORDS.get(mode, mode))}</caption>"
                f"<thead><tr>{''.join(head1)}</tr><tr>{''.join(head2)}</tr></thead>"
                f"<tbody>{''.join(body)}</tbody></table>"
            )
        targets = [str(t) for t in TARGETS]
        headers = ["engine", "build s", "open ms", "MiB"] + [
            f"QPS@{t}" if len(self.modes) == 1 else f"{_MODE_WORDS.get(m, m)} QPS@{t}"
            for m in self.modes
            for t in targets
        ]
        rows, cells = [], []
        for e, r in self.engines.items():
            size = r["file_bytes"] / 2**20 if r["file_bytes"] is not None else None
            qps = [_bench.qps_cell(r, m, t) for m in self.modes for t in targets]
            cells += qps
            row = [f'<th style="text-align:left">{esc(e)} {esc(str(r["version"]))}</th>']
            row += [
                td.format(fmt(r["build_s"], ".2f")),
                td.format(fmt(r["open_ms"], ".3f")),
                td.format(fmt(size, ".1f")),
            ]
            row += [td.format(esc(c)) for c in qps]
            rows.append("<tr>" + "".join(row) + "</tr>")
        parts.append(
            '<table class="chassis-bench-summary">'
            f"<caption>QPS at recall@{self.k} (interpolated between sweep points)</caption>"
            "<thead><tr>"
            + "".join(
                th.format("left" if i == 0 else "right", esc(h)) for i, h in enumerate(headers)
            )
            + f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        )
        note = _footnote(cells)
        if note:
            parts.append(f"<p><small>{esc(note)}</small></p>")
        if self.notes and self.settings.get("compare"):
            parts.append(
                "<ul>" + "".join(f"<li><small>{esc(n)}</small></li>" for n in self.notes) + "</ul>"
            )
        parts.append("</div>")
        return "".join(parts)

    def plot(self, ax: Any = None) -> Any:
        """Plot recall@k (x) against queries per second (y, log scale).

        One line per engine and mode, the first point of each labelled with its ef.

        Parameters
        ----------
        ax : matplotlib.axes.Axes, optional
            Where to draw; a new figure's Axes when None.

        Returns
        -------
        matplotlib.axes.Axes

        Raises
        ------
        ImportError
            When matplotlib is not installed (`pip install "chassis-index[plot]"`).

        Examples
        --------
        >>> ax = result.plot()                                    # doctest: +SKIP
        >>> ax.figure.savefig("recall-qps.png")                   # doctest: +SKIP
        """
        if ax is None:
            try:
                import matplotlib.pyplot as plt
            except ImportError:
                raise ImportError(
                    'BenchResult.plot needs matplotlib: pip install "chassis-index[plot]" '
                    "(or pip install matplotlib)"
                ) from None
            _, ax = plt.subplots(figsize=(7, 4.5))
        return _bench.draw_sweeps(
            ax,
            {name: r["sweep"] for name, r in self.engines.items()},
            k=self.k,
            title=self.title,
        )


def _sample_text(data: Mapping[str, Any]) -> str:
    """The line saying what a quick run kept of a data set."""
    was = data["sampled_from"]
    parts = []
    if data["n"] < was["n"]:
        parts.append(f"a random sample of {data['n']:,} of {was['n']:,} vectors")
    if data["queries"] < was["queries"]:
        parts.append(f"the first {data['queries']:,} of {was['queries']:,} queries")
    text = "quick: " + " and ".join(parts)
    if data["n"] < was["n"]:
        text += " (ground truth computed for the sample)"
    return text


def run(
    data: Data = None,
    *,
    compare: str | Iterable[str] = (),
    k: int = 10,
    ef: Iterable[int] | None = None,
    quick: bool = False,
    n: int | None = None,
    dims: int | None = None,
    queries: int | PathLike | npt.NDArray[Any] | None = None,
    truth: PathLike | npt.NDArray[Any] | None = None,
    metric: str | None = None,
    m: int = 16,
    ef_construction: int = 200,
    threads: int | None = None,
    loop: bool = False,
    seed: int = 0,
    progress: bool = False,
    log: Callable[[str], object] | None = None,
) -> BenchResult:
    """Build an index in a temporary folder and measure it: the benchmark of `chassis bench`.

    Prints nothing unless `log` is given (`log=print` reports each step as the command line
    does). Peers that are not installed are skipped with a note; a peer that fails is noted
    and skipped; chassis failing raises.

    Parameters
    ----------
    data : None, str, os.PathLike, chassis.datasets.Dataset, ndarray or (base, queries)
        None: generated clustered data (`chassis.datasets.clustered`, 20,000 x 64 with 1,000
        queries; quick: 10,000 and 200). A path: a folder, an ann-benchmarks `.hdf5` or one
        array file, as `chassis.datasets.load` reads it; a file of one array, like an array,
        gives its last rows as the queries (min(1,000, rows/10); quick: 200). A `Dataset`
        or a (base, queries) pair of (count, dimensions) arrays is used as it is.
    compare : str or iterable of str
        Peers to measure too: "hnswlib", "usearch", "faiss", "chassisdb", comma-separated or
        a list; "all" for every one.
    k : int
        Neighbours per query; recall is recall@k.
    ef : iterable of int, optional
        The ef sweep, smallest first (default 16, 32, 64, 128, 256; quick: 10, 20, ..., 160).
    quick : bool
        A run of seconds: 10,000 generated vectors; of a data set, a random sample (by
        `seed`) of at most 10,000 base vectors and its first 200 queries, unless `n` or a
        count of `queries` says otherwise (the ground truth is computed again for a sampled
        base); a shorter sweep and shorter timings.
    n : int, optional
        Base vectors: generated (20,000), or the first `n` of the data set.
    dims : int, optional
        Dimensions of generated data (64).
    queries : int, str, os.PathLike or ndarray, optional
        A count: how many queries (the first of the data set's). A path or an array: the
        queries themselves (their ground truth is computed, unless `truth` is given).
    truth : str, os.PathLike or ndarray, optional
        Ground-truth ids for the queries (.ivecs, .ibin, .npy or an array), nearest first;
        computed exactly when absent, or when `n`, a sample or another `metric` makes it
        wrong.
    metric : {"euclidean", "cosine", "inner_product"}, optional
        Distance (default: euclidean, or what the data set names).
    m : int
        max_connections (HNSW M) of every engine.
    ef_construction : int
        ef_construction of every engine.
    threads : int, optional
        Build threads of every engine (default: every core). Searches use one thread.
    loop : bool
        Also time a Python loop of single-query `search()` calls.
    seed : int
        Seed of the generated data and of a quick run's sample.
    progress : bool
        Progress bars for the ground truth and the chassis build.
    log : callable, optional
        Called with each line of the report as the run goes (`print` in the terminal).

    Returns
    -------
    BenchResult
        The figures, the data description, and their text, HTML, plot and JSON forms.

    Raises
    ------
    ValueError
        For an argument out of range or data that do not fit together (a
        `chassis.datasets.DatasetError`, a `ValueError`, for a malformed file).
    FileNotFoundError
        When a path does not exist.
    ImportError
        When reading the data needs a package that is missing (h5py for HDF5).

    Examples
    --------
    A quick run on generated data; in Jupyter, `result` alone shows recall and QPS per ef
    and QPS at recall 0.90 / 0.95 / 0.99 as HTML tables:

    >>> import chassis.bench
    >>> result = chassis.bench.run(quick=True)                # doctest: +SKIP
    >>> print(result)              # the report `chassis bench --quick` prints  # doctest: +SKIP
    >>> ax = result.plot()         # recall against QPS (needs matplotlib)      # doctest: +SKIP
    >>> result.to_json("bench.json")                                            # doctest: +SKIP

    A data set on disk against hnswlib, reporting each step as it goes:

    >>> chassis.bench.run("data/debian-minilm", compare="hnswlib", log=print)  # doctest: +SKIP
    """
    import chassis

    if k < 1:
        raise ValueError(f"k is {k}: it must be at least 1")
    if threads is not None and threads < 1:
        raise ValueError(f"threads is {threads}: it must be at least 1")
    efs = _ef_list(ef, quick)
    peers_asked = engine_names(compare)
    modes = ["batch", "loop"] if loop else ["batch"]
    plan = Plan(
        k=k,
        ef=efs,
        modes=modes,
        m=m,
        ef_construction=ef_construction,
        opens=3 if quick else 7,
        min_seconds=0.1 if quick else 0.3,
        max_runs=5,
    )
    settings: dict[str, Any] = {
        "data": describe(data),
        "queries": describe(queries),
        "truth": describe(truth),
        "n": n,
        "dims": dims,
        "metric": metric,
        "seed": seed,
        "ef": efs,
        "k": k,
        "m": m,
        "ef_construction": ef_construction,
        "threads": threads,
        "loop": loop,
        "quick": quick,
        "compare": peers_asked,
        "progress": progress,
        "modes": modes,
        "opens": plan.opens,
        "min_seconds": plan.min_seconds,
        "max_runs": plan.max_runs,
    }

    lines: list[str] = []

    def say(line: str) -> None:
        lines.append(line)
        if log is not None:
            log(line)

    own = _bench.make_engine("chassis")
    if isinstance(own, _bench.ChassisEngine):
        own.progress = progress  # a bar while add_batch links
    engines: dict[str, _bench.Engine] = {"chassis": own}
    peers, notes = _bench.engine_status(peers_asked)
    engines.update(peers)

    loaded = load_data(
        data,
        queries=queries,
        truth=truth,
        n=n,
        dims=dims,
        metric=metric,
        seed=seed,
        quick=quick,
    )
    size, width = loaded.base.shape
    say(f"chassis {chassis.__version__}  (python {sys.version.split()[0]}, {os.cpu_count()} cores)")
    try:
        say("cpu: " + _cpu_text(chassis.cpu_info()))
    except Exception as exc:  # informative only
        say(f"cpu: unknown ({exc})")
    say("cpu model: " + _machine.cpu_line(_machine.describe()))
    say(
        f"data: {loaded.label}: {size:,} x {width}, {len(loaded.queries):,} queries, "
        f"{loaded.metric}"
    )
    description: dict[str, Any] = {
        "label": loaded.label,
        "source": loaded.source,
        "n": size,
        "dims": width,
        "queries": len(loaded.queries),
        "metric": loaded.metric,
        "ground_truth": loaded.truth_origin,
        "ground_truth_s": None,
        "sampled_from": loaded.sampled_from,
    }
    if loaded.sampled_from:
        say(_sample_text(description))
    if len(engines) > 1:
        say("engines: " + ", ".join(f"{name} {e.version}" for name, e in engines.items()))
    for note in notes:
        say(f"note: {note}")

    if loaded.truth is None or loaded.truth.shape[1] < k:
        start = time.perf_counter()
        loaded.truth, _ = datasets.ground_truth(
            loaded.base, loaded.queries, k, loaded.metric, progress=progress
        )
        loaded.truth_origin = "computed"
        loaded.truth_seconds = time.perf_counter() - start
        say(f"ground truth: exact top-{k} in {loaded.truth_seconds:.2f} s")
    else:
        loaded.truth = np.asarray(loaded.truth[:, :k])
    description["ground_truth"] = loaded.truth_origin
    description["ground_truth_s"] = loaded.truth_seconds

    build_threads = threads or os.cpu_count() or 1
    threads_text = "all cores" if threads is None else f"threads={threads}"
    results: dict[str, dict[str, Any]] = {}
    folder = Path(tempfile.mkdtemp(prefix="chassis-bench-"))
    try:
        for name, engine in engines.items():
            start = time.perf_counter()
            try:
                results[name] = r = measure_engine(engine, loaded, plan, folder, build_threads)
            except _bench.EngineUnavailable as exc:
                notes.append(f"skipped {name}: {exc}")
                say(f"note: skipped {name}: {exc}")
                continue
            except Exception as exc:
                if name == "chassis":
                    raise
                traceback.print_exc()
                notes.append(f"{name} failed: {exc!r}")
                say(f"note: {name} failed: {exc!r}")
                continue
            finally:
                try:
                    engine.close()
                except Exception:
                    pass
            if name == "chassis":
                say(
                    f"build: {r['build_s']:.2f} s add_batch ({r['vectors_per_s']:,.0f} "
                    f"vectors/s, {threads_text}, M={m}, ef_construction={ef_construction}), "
                    f"flush {r['persist_s'] * 1e3:.1f} ms"
                )
                say(
                    f"open: {r['open_ms']:.3f} ms writer, {r['open_read_only_ms']:.3f} ms "
                    f"read-only (median of {plan.opens}; file "
                    f"{(r['file_bytes'] or 0) / 2**20:.1f} MiB)"
                )
            else:
                say(
                    f"{name}: built in {r['build_s']:.2f} s, measured in "
                    f"{time.perf_counter() - start:.1f} s"
                )
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    engine_notes = [note for name in results for note in engines[name].notes]
    return BenchResult(
        engines=results,
        data=description,
        k=k,
        ef=efs,
        modes=modes,
        settings=settings,
        build_threads=build_threads,
        notes=list(dict.fromkeys(notes + engine_notes)),
        log=lines,
        machine=_bench.machine_info(),
        chassis_version=chassis.__version__,
    )
