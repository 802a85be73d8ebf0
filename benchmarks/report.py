"""The performance figures of README.md and docs/benchmarks.md, written from the raw results.

    python benchmarks/report.py            # rewrite both from benchmarks/results/*.json
    python benchmarks/report.py --check    # exit 1, with a diff, when either disagrees

Why: a figure a reader cannot trace to a raw run is a figure nobody can check. Every table
here comes from ONE run of `bench_speed.py` or `bench_scale.py --only peers` in which all its
engines were measured together (never the best of several runs, never a build time from
another run, never a cached build against fresh ones), and names the CPU, the date and the
command that reproduces it. QPS at recall 0.95 and the ratios to the best peer are computed
again from the sweep points the run recorded, by the functions the benchmarks use
(`chassis._bench`).

`RUNS` below says which raw files the tables show: a new run is adopted by adding its line.
Only the text between `<!-- report:begin NAME -->` and `<!-- report:end NAME -->` is
written ("performance" in README.md, "benchmarks" in docs/benchmarks.md).

It needs the chassis package and NumPy; from a Python without them it runs itself again with
the venv `.ci/run` makes (`$CHASSIS_CI_VENV`, `.venv-ci`) or a `.venv` in the repository.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

try:
    # The figures are computed by the benchmarks' own functions, so the package they measure
    # must be importable (as for every script here).
    import bench_churn
    import bench_filters
    import bench_scale
    import bench_speed
    from chassis import _bench, _machine
except ImportError as exc:
    # A Python without them (a bare `python3`): the venv .ci/run makes (or a .venv) has them,
    # so run again there rather than fail a check that only needs the right interpreter.
    for venv in (os.environ.get("CHASSIS_CI_VENV"), REPO / ".venv-ci", REPO / ".venv"):
        python = Path(venv or "", "Scripts" if os.name == "nt" else "bin", "python")
        if venv and python.exists() and not os.environ.get("CHASSIS_REPORT_AGAIN"):
            os.environ["CHASSIS_REPORT_AGAIN"] = "1"
            print(f"report.py: no {exc.name or exc} here; running with {python}", file=sys.stderr)
            os.execv(python, [str(python), __file__, *sys.argv[1:]])
    print(
        f"report.py: cannot import {exc.name or exc}: it computes the figures with the chassis "
        "package and NumPy\nhelp: run it with a Python that has them: pip install . (or the "
        "venv .ci/run makes, .venv-ci/bin/python)",
        file=sys.stderr,
    )
    sys.exit(2)

# The runs the tables show, file name in benchmarks/results -> where: "readme" (a row of the
# README's table for its benchmark, one row per CPU, and its tables in docs/benchmarks.md) or
# "docs" (docs/benchmarks.md only).
RUNS: dict[str, str] = {
    "2026-12-03-bench_speed-int8-vm.json": "readme",
    "2026-12-04-bench_speed-int4-vm.json": "docs",
    "2026-12-02-bench_scale-peers-vm.json": "readme",
    "2026-12-05-bench_speed-all-vm.json": "docs",
    "2026-12-05-bench_speed-grouped-avx2-vm.json": "readme",
    "2026-12-07-bench_filters-zen3-vm.json": "docs",
    "2026-12-06-bench_speed-zen2-blocks-vm.json": "readme",
    "2026-12-06-bench_scale-peers-zen2-vm.json": "readme",
    "2026-12-06-bench_churn-replace-minilm-steady-zen2-vm.json": "docs",
    "2026-12-06-bench_churn-upsert-minilm-zen2-vm.json": "docs",
    "2026-12-06-bench_churn-replace-clustered-zen2-vm.json": "docs",
    "2026-12-06-bench_churn-upsert-clustered-zen2-vm.json": "docs",
    "2026-12-07-bench_speed-zen3-vm.json": "docs",
    "2026-12-07-bench_churn-replace-minilm-fill-zen3-vm.json": "docs",
    "2026-12-08-bench_speed-emerald-rapids-upper-vm.json": "readme",
}

RESULTS = HERE / "results"
README = REPO / "README.md"
DOCS = REPO / "docs" / "benchmarks.md"
TARGET = "0.95"
# Peers that store codes rather than float32 vectors, by code width: a Chassis figure is
# compared with the best peer of each kind that the run measured.
CODE_PEERS = {**{name: "8-bit" for name in bench_speed.EIGHT_BIT}, "faiss-sq4": "4-bit"}
SPEED_MODES = {"batch": "1t batch", "loop": "1t loop", "batch2": "2t batch"}
DATASET_NAMES = {"minilm": "debian-minilm", "clustered": "clustered"}


class ReportError(Exception):
    """A result file that cannot be reported as the rules ask (missing, mixed, cached)."""


# ------------------------------------------------------------------ one run
class Run:
    """One raw result file: its kind ("speed" or "scale-peers"), date, CPU and command."""

    def __init__(self, name: str, results: Path = RESULTS):
        self.name = name
        path = results / name
        try:
            self.doc: dict[str, Any] = json.loads(path.read_text())
        except OSError as exc:
            raise ReportError(f"{name}: cannot read it ({exc.strerror})") from exc
        if "datasets" in self.doc and "passes" in next(iter(self.doc["datasets"].values()), {}):
            self.kind, self.script = "speed", "bench_speed"
        elif isinstance(self.doc.get("peers"), Mapping):
            self.kind, self.script = "scale-peers", "bench_scale"
        elif self.doc.get("script") == "bench_filters" and "results" in self.doc:
            self.kind, self.script = "filters", "bench_filters"
        elif self.doc.get("script") == "bench_churn" and "rounds" in self.doc:
            self.kind, self.script = "churn", "bench_churn"
        else:
            raise ReportError(
                f"{name}: not a bench_speed, bench_scale --only peers, bench_filters or "
                "bench_churn run"
            )
        found = re.match(r"\d{4}-\d{2}-\d{2}", name)
        self.date = self.doc.get("date") or (found.group(0) if found else "date not recorded")
        machine = self.doc.get("machine")
        self.cpu = _machine.from_record(machine if isinstance(machine, Mapping) else {})

    @property
    def cpu_text(self) -> str:
        return _machine.cpu_line(self.cpu)

    def cpu_key(self) -> tuple[Any, ...]:
        """What tells two CPUs apart, for the README's one row per CPU."""
        return tuple(self.cpu.get(k) for k in ("vendor", "family", "model", "model_name"))

    @property
    def command(self) -> str:
        module = {
            "speed": bench_speed,
            "scale-peers": bench_scale,
            "filters": bench_filters,
            "churn": bench_churn,
        }
        switches = " ".join(f"{k}={v}" for k, v in self.doc.get("switches", {}).items())
        command = command_line(module[self.kind], self.script, self.doc.get("args", {}))
        return f"{switches} {command}" if switches else command


# Options that name where a run wrote its outputs, not what it measured: left out of commands.
OUTPUTS = ("json", "plot")


def command_line(module: Any, script: str, args: Mapping[str, Any]) -> str:
    """The command that runs `script` with the recorded `args`: every option whose value
    differs from what the script takes today without it. Checked by parsing it again."""
    argv = [] if not args.get("quick") else ["--quick"]
    defaults = vars(module._parse(list(argv)))
    for key, value in args.items():
        if key in OUTPUTS or key == "quick":
            continue
        if key not in defaults:
            raise ReportError(f"{script}: the run's option {key!r} is not an option of it now")
        if _same(value, defaults[key]):
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif isinstance(value, list):
            sep = ";" if key == "variants" else ","
            argv += [flag, sep.join(str(v) for v in value)]
        else:
            argv += [flag, str(value)]
    again = vars(module._parse(list(argv)))
    wrong = [k for k in args if k not in (*OUTPUTS, "quick") and not _same(args[k], again[k])]
    if wrong:
        raise ReportError(f"{script}: no command line gives the run's {', '.join(wrong)}")
    return " ".join(["python", f"benchmarks/{script}.py", *(_quote(a) for a in argv)])


def _same(recorded: Any, now: Any) -> bool:
    """A recorded option equals a default (a path beside the repository is recorded relative
    to it, a tuple as a list)."""
    if isinstance(now, str) and os.path.isabs(now) and not os.path.isabs(str(recorded)):
        now = os.path.relpath(now, REPO)
    if isinstance(now, tuple):
        now = list(now)
    return bool(recorded == now)


def _quote(arg: str) -> str:
    return arg if re.fullmatch(r"[\w.,/=:@+-]+", arg) else "'" + arg.replace("'", "'\\''") + "'"


# ------------------------------------------------------------------ figures
def peer_kind(engine: str, ours: Sequence[str]) -> str | None:
    """ "float", "8-bit" or "4-bit" for a peer; None for one of ours."""
    if engine in ours:
        return None
    return CODE_PEERS.get(engine, "float")


def speed_summaries(run: Run) -> dict[str, dict[str, dict[str, Any]]]:
    """{dataset: {engine: {"qps_at": {mode: {target: QpsAt}}, "build_s", "passes", "builds"}}}
    from the run's raw sweep points: QPS at each recall per pass (`qps_at_targets`), the
    median over passes (`median_qps_at`); the build time is the median of the run's builds."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for dataset, figures in run.doc["datasets"].items():
        engines: dict[str, dict[str, Any]] = {}
        for engine, passes in figures["passes"].items():
            if not passes:
                continue
            modes = list(passes[0]["sweep"])
            builds = figures.get("median", {}).get(engine, {}).get("builds_s")
            if not builds:
                builds = [p["build_s"] for p in passes]
            engines[engine] = {
                "qps_at": {
                    m: _bench.median_qps_at([_bench.qps_at_targets(p["sweep"][m]) for p in passes])
                    for m in modes
                },
                "build_s": _bench.median(builds),
                "passes": len(passes),
                "builds": len(builds),
            }
        out[dataset] = engines
    return out


def _qps(mode: str) -> Any:
    def get(_: str, s: Mapping[str, Any]) -> float | None:
        cell = s.get("qps_at", {}).get(mode, {}).get(TARGET)
        return None if cell is None else cell["qps"]

    return get


def versus(
    results: Mapping[str, Mapping[str, Any]],
    who: str,
    ours: Sequence[str],
    columns: Sequence[tuple[str, Any, str]],
) -> dict[str, dict[str, dict[str, Any]]]:
    """{peer kind: `_bench.versus_best_peer` of `who` against the best peer of that kind}, for
    the kinds of peer the run measured."""
    kinds = {peer_kind(e, ours) for e in results} - {None}
    out = {}
    for kind in ("float", "8-bit", "4-bit"):
        if kind in kinds:
            group = {e: s for e, s in results.items() if e == who or peer_kind(e, ours) == kind}
            out[kind] = _bench.versus_best_peer(group, columns, who, ours)
    return out


SPEED_COLUMNS = [
    ("batch", _qps("batch"), "high"),
    ("loop", _qps("loop"), "high"),
    ("batch2", _qps("batch2"), "high"),
    ("build_s", lambda _, s: s.get("build_s"), "low"),
]


def scale_rows(run: Run) -> dict[str, dict[str, Any]]:
    """{engine: figures} of a `bench_scale.py --only peers` run; a ReportError when a build
    was cached from an earlier run (its time and memory are not this run's)."""
    engines = run.doc["peers"]["engines"]
    cached = [e for e, f in engines.items() if f["build"].get("cached")]
    if cached:
        raise ReportError(
            f"{run.name}: the build of {', '.join(cached)} was cached from an earlier run; "
            "its figures cannot stand beside the fresh builds of the others"
        )
    rows = {}
    for engine, f in engines.items():
        b, s = f["build"], f["search"]
        rows[engine] = {
            "build_s": b["build_s"],
            "peak_mib": b["peak_rss_own_mib"],
            "file_mib": b["file_mib"],
            "memory_per_file": b["peak_rss_own_mib"] / b["file_mib"],
            "open_cold_ms": s["open_cold_ms"],
            "first_query_ms": s.get("first_query_ms"),
            "version": b.get("version"),
            "qps_at": {m: _bench.qps_at_targets(pts) for m, pts in s["sweep"].items()},
        }
    return rows


# ------------------------------------------------------------------ text
def _ratio(vs: Mapping[str, Any] | None, key: str, peer: bool = False) -> str:
    cell = (vs or {}).get(key)
    if cell is None or cell["ratio"] is None:
        return "-"
    text = f"{cell['ratio']:.2f}"
    return f"{text} ({cell['best_peer']})" if peer else text


def _wrap(text: str, indent: str = "") -> list[str]:
    """A paragraph (or a list item, with `indent`) wrapped as the Markdown files are."""
    return textwrap.wrap(
        text,
        100,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    )


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _peers(engines: Sequence[str], ours: Sequence[str]) -> str:
    kinds: dict[str, list[str]] = {}
    for e in engines:
        kind = peer_kind(e, ours)
        if kind is not None:
            kinds.setdefault(kind, []).append(e)
    parts = [", ".join(kinds.pop("float", []))] if "float" in kinds else []
    parts += [f"{kind}: {', '.join(names)}" for kind, names in kinds.items()]
    return "; ".join(parts) or "none"


# The columns each row of runs starts with: which run it is, then its two one-thread modes.
RUN_COLUMNS = ["CPU", "run", "peers in the run", "`search_batch`", "`search` loop"]


def _run_cells(run: Run, engines: Sequence[str], ours: Sequence[str]) -> list[str]:
    """The first three of `RUN_COLUMNS` for ``run``, whose engines are ``engines``."""
    return [run.cpu_text, run.date, _peers(engines, ours)]


def _datasets(runs: Sequence[Run]) -> list[str]:
    seen: dict[str, None] = {}
    for run in runs:
        seen.update(dict.fromkeys(run.doc["datasets"]))
    return list(seen)


def _shape(run: Run, dataset: str) -> str:
    f = run.doc["datasets"][dataset]
    n, d = f["shape"]
    return f"{DATASET_NAMES.get(dataset, dataset)} ({n:,} x {d}, {f['queries']:,} queries)"


def _one_per_cpu(runs: Sequence[Run], what: str) -> None:
    seen: dict[tuple[Any, ...], str] = {}
    for run in runs:
        if run.cpu_key() in seen:
            raise ReportError(
                f"{run.name} and {seen[run.cpu_key()]} are both README rows of {what} on one "
                'CPU: keep one of them as "readme" in RUNS'
            )
        seen[run.cpu_key()] = run.name


def _bound(results: Mapping[str, Any], engines: Sequence[str | None], mode: str) -> bool:
    """Whether one of `engines` reached recall 0.95 at its smallest ef in `mode` (its QPS
    there is a lower bound, not an interpolation)."""
    for engine in engines:
        cell = results.get(engine or "", {}).get("qps_at", {}).get(mode, {}).get(TARGET)
        if cell is not None and cell["how"] == "at-first-point":
            return True
    return False


def readme_section(runs: Sequence[Run]) -> str:
    """The README's performance section (between its markers)."""
    speed = [r for r in runs if r.kind == "speed"]
    scale = [r for r in runs if r.kind == "scale-peers"]
    _one_per_cpu(speed, "bench_speed")
    _one_per_cpu(scale, "bench_scale --only peers")
    ours = bench_speed.OURS
    out = []
    if speed:
        sets = _datasets(speed)
        shapes = {ds: next(_shape(r, ds) for r in speed if ds in r.doc["datasets"]) for ds in sets}
        out += _wrap(
            "Chassis's queries per second at recall@10 = 0.95 over the best peer's in the same "
            "run (above 1: Chassis is faster), and its build time over the best peer's (below "
            "1: faster). One row per CPU, each one run of `benchmarks/bench_speed.py` in which "
            "every engine was measured together: the file-backed index, one thread (`search` "
            "loop: a Python loop of single queries), M=16, ef_construction=200, built on 2 "
            f"threads; each cell is {' / '.join(shapes.values())}. The machines are noisy "
            "virtual machines: compare figures within a row. Each run's absolute figures and the "
            "other recalls are in "
            "[docs/benchmarks.md](docs/benchmarks.md#current-results); `python -m chassis "
            "bench --compare all` measures your machine and names its CPU in the same words."
        )
        out.append("")
        rows = []
        bounds: list[str] = []
        for run in speed:
            summaries = speed_summaries(run)

            def cells(who: str, kind: str, key: str, s: Mapping[str, Any] = summaries) -> str:
                values = []
                for ds in sets:
                    results = s.get(ds, {})
                    vs = versus(results, who, ours, SPEED_COLUMNS) if who in results else {}
                    cell = _ratio(vs.get(kind), key)
                    peer = (vs.get(kind) or {}).get(key, {}).get("best_peer")
                    if key != "build_s" and cell != "-" and _bound(results, (who, peer), key):
                        cell += "*"
                        bounds.append(cell)
                    values.append(cell)
                return " / ".join(values)

            engines = list(dict.fromkeys(e for r in summaries.values() for e in r))
            int8 = "chassis-int8" in engines
            rows.append(
                _run_cells(run, engines, ours)
                + [
                    cells("chassis", "float", "batch"),
                    cells("chassis", "float", "loop"),
                    cells("chassis", "float", "build_s"),
                    cells("chassis-int8", "float", "batch") if int8 else "not in this run",
                    cells("chassis-int8", "8-bit", "batch") if int8 else "not in this run",
                ]
            )
        out += _table(
            RUN_COLUMNS
            + [
                "build",
                "int8 `search_batch` / best float peer",
                "int8 `search_batch` / best 8-bit peer",
            ],
            rows,
        )
        out.append("")
        out += _wrap(
            'int8: `quantization="int8"` (8-bit codes walked, float32 vectors reranked), recall '
            "against the exact float32 ground truth."
            + (
                " `*`: the smallest ef of the sweep already reached 0.95 on one side, whose QPS "
                "there is a lower bound."
                if bounds
                else ""
            )
        )
        out += _commands(speed)
    if scale:
        first = scale[0].doc["peers"]
        out.append("")
        out += _wrap(
            f"At {first['n']:,} x {first['dims']} (`benchmarks/bench_scale.py --only peers`: "
            "generated clusters, every engine built in a fresh process, the file evicted before "
            "a fresh process opens and searches it), Chassis over the best peer at recall@10 = "
            "0.95:"
        )
        out.append("")
        rows = []
        for run in scale:
            figures = scale_rows(run)
            vs = _bench.versus_best_peer(figures, SPEED_COLUMNS, "chassis", bench_scale.OURS)
            mine = figures["chassis"]
            rows.append(
                _run_cells(run, list(figures), bench_scale.OURS)
                + [
                    _ratio(vs, "batch"),
                    _ratio(vs, "loop"),
                    _ratio(vs, "batch2"),
                    _ratio(vs, "build_s"),
                    f"{mine['memory_per_file']:.2f}",
                    f"{mine['open_cold_ms']:.1f} ms",
                ]
            )
        out += _table(
            RUN_COLUMNS
            + [
                "2-thread batch",
                "build",
                "Chassis's peak build memory / file",
                "Chassis's open of the evicted file",
            ],
            rows,
        )
        out += _commands(scale)
    return "\n".join(out)


def _commands(runs: Sequence[Run]) -> list[str]:
    """The command of each row's run, by its date and file."""
    out = ["", "Commands, from the repository's root:", ""]
    for run in runs:
        out.append(f"- {run.date} (`{run.name}`): `{run.command}`")
    return out


def _speed_docs(run: Run) -> list[str]:
    ours = bench_speed.OURS
    out = []
    for dataset, results in speed_summaries(run).items():
        first = next(iter(results.values()))
        out.append("")
        out += _wrap(
            f"{_shape(run, dataset)}, {run.doc['datasets'][dataset]['metric']}: medians of "
            f"{first['passes']} pass(es), build times of {first['builds']} build(s); QPS at "
            "recall@10 (`*`: the smallest ef already reached it, a lower bound; `-`: not "
            "reached); a ratio names the best peer of its kind."
        )
        out.append("")
        headers = ["engine", "build s"]
        headers += [f"1t batch @{t}" for t in ("0.9", "0.95", "0.99")]
        headers += ["1t loop @0.95", "2t batch @0.95"]
        rows = []
        for engine, s in results.items():
            rows.append(
                [engine, _bench.fmt(s["build_s"], ".2f")]
                + [_bench.qps_cell(s, "batch", t) for t in ("0.9", "0.95", "0.99")]
                + [_bench.qps_cell(s, "loop", TARGET), _bench.qps_cell(s, "batch2", TARGET)]
            )
        for who in (e for e in results if e in ours):
            for kind, vs in versus(results, who, ours, SPEED_COLUMNS).items():
                rows.append(
                    [
                        f"{who} / best {kind} peer",
                        _ratio(vs, "build_s", True),
                        "",
                        _ratio(vs, "batch", True),
                        "",
                    ]
                    + [_ratio(vs, "loop", True), _ratio(vs, "batch2", True)]
                )
        out += _table(headers, rows)
    return out


def _scale_docs(run: Run) -> list[str]:
    figures = scale_rows(run)
    peers = run.doc["peers"]
    out = [""] + _wrap(
        f"{peers['n']:,} x {peers['dims']} float32, clustered ({peers['clusters']:,} clusters), "
        "one build per engine; QPS at recall@10 from one sweep (`-`: not reached); peak build "
        "memory without the input's pages; a ratio names the best peer."
    )
    out.append("")
    headers = ["engine", "build s", "peak build MiB", "file MiB", "open evicted ms"]
    headers += [f"{label} @0.95" for label in SPEED_MODES.values()]
    rows = []
    for engine, f in figures.items():
        rows.append(
            [
                engine,
                _bench.fmt(f["build_s"], ",.0f"),
                _bench.fmt(f["peak_mib"], ",.0f"),
                _bench.fmt(f["file_mib"], ",.0f"),
                _bench.fmt(f["open_cold_ms"], ",.1f"),
            ]
            + [_bench.qps_cell(f, mode, TARGET) for mode in SPEED_MODES]
        )
    for who in (e for e in figures if e in bench_scale.OURS):
        vs = _bench.versus_best_peer(figures, SPEED_COLUMNS, who, bench_scale.OURS)
        rows.append(
            [f"{who} / best peer", _ratio(vs, "build_s", True), "", "", ""]
            + [_ratio(vs, mode, True) for mode in SPEED_MODES]
        )
    return out + _table(headers, rows)


def _filters_docs(run: Run) -> list[str]:
    out = []
    engines = run.doc["args"]["engines"].split(",")
    passes = run.doc["args"].get("passes", 1)
    each = f" (each point the median of up to {passes} passes)" if passes > 1 else ""
    for dataset, result in run.doc["results"].items():
        unfiltered = bench_filters.at_95(result["unfiltered"])[0] if result["unfiltered"] else None
        out.append("")
        out += _wrap(
            f"{DATASET_NAMES.get(dataset, dataset)}, {result['rows']:,} rows, "
            f"{result['metric']}: QPS at recall@10 = 0.95 against the exact filtered truth, one "
            f"thread{each} (`< (r)`: 0.95 not reached, best recall r); chassis unfiltered on the same "
            f"index: {_bench.fmt(unfiltered)}. Plans: what chassis's queries took over the sweep."
        )
        out.append("")
        rows = []
        for f in result["filters"]:
            cells = [f"{f['kind']} {f['share']:.1%}", f"{f['allowed']:,}"]
            for e in engines:
                q95, best = bench_filters.at_95(f["engines"][e])
                cells.append(_bench.fmt(q95) if q95 else f"< ({best:.2f})")
            ours = f["engines"].get("chassis")
            q95 = bench_filters.at_95(ours)[0] if ours else None
            cells.append(_bench.fmt(q95 / unfiltered, ".2f") if q95 and unfiltered else "-")
            plans: dict[str, int] = {}
            for p in ours or []:
                for key, v in p.get("plans", {}).items():
                    plans[key] = plans.get(key, 0) + v
            cells.append(", ".join(f"{k} {v}" for k, v in plans.items() if v) or "unfiltered")
            rows.append(cells)
        out += _table(["filter", "allowed", *engines, "chassis / unfiltered", "plans"], rows)
    return out


def _churn_docs(run: Run) -> list[str]:
    args, timing = run.doc["args"], run.doc["delete_timing"]
    live = run.doc["rounds"][0]["live"]
    data = (
        f"clustered generated data ({2 * args['rows']:,} x 384)"
        if args.get("data") == "clustered"
        else "debian-minilm"
    )
    if args.get("kind") == "upsert":
        churn = (
            f"{args['share']:.0%} of them given new vectors under the same ids per round "
            "(`upsert`, `flush`)"
        )
        peer = "hnswlib under the same churn (`add_items` with the ids present)"
    else:
        churn = (
            f"{args['share']:.0%} of them deleted and as many added per round "
            "(`delete_batch`, `add_batch`, `flush`)"
        )
        peer = "hnswlib under the same churn (`mark_deleted`, `replace_deleted=True`)"
    first = (
        f", the first one building the id map {timing['batch_first'] * 1e3:.1f} ms"
        if "batch_first" in timing
        else ""
    )
    n = int(timing.get("n", args["delete_n"]))
    if "steady_batch" in timing:
        sn = int(timing.get("steady_n", args["delete_n"]))
        first += (
            f"; {sn:,} of {3 * sn:,} rows after a first batch of deletes and its flush (a small "
            "commit, which leaves the header pages writable; a round that also adds commits "
            f"in full): {timing['steady_batch'] * 1e3:.2f} ms against "
            f"{timing['steady_single'] * 1e3:.1f} ms "
            f"({timing['steady_single'] / timing['steady_batch']:.0f}x)"
        )
    out = [""]
    out += _wrap(
        f"{data}, {live:,} live rows, {churn}; QPS at recall@10 = 0.95 on one thread beside a "
        f"fresh build of the same rows and {peer} and its fresh build; the widest gap between "
        "the fresh build's recall and the churned index's over the ef sweep, at that ef; "
        "allocated file sizes. "
        f"Deleting {n:,} ids: one `delete_batch` {timing['batch'] * 1e3:.2f} ms, "
        f"{n:,} `delete` calls {timing['single'] * 1e3:.1f} ms "
        f"({timing['single'] / timing['batch']:.0f}x){first}."
    )
    out.append("")
    headers, rows = bench_churn.summary(run.doc["rounds"])
    out += _table(headers, rows)
    return out


def _versions(run: Run) -> str:
    if run.kind == "churn":
        versions = run.doc.get("versions", {}).items()
        return ", ".join(f"{e} {v}" for e, v in versions if v) or "not recorded by this run"
    if run.kind in ("speed", "filters"):
        versions = dict(run.doc.get("versions", {}))
    else:
        versions = {e: f["build"].get("version") for e, f in run.doc["peers"]["engines"].items()}
    return ", ".join(f"{e} {v}" for e, v in versions.items() if v)


def docs_section(runs: Sequence[Run], readme: Sequence[Run] = ()) -> str:
    """The tables of docs/benchmarks.md (between its markers): every run of `RUNS`, those of
    `readme` said to be the README's."""
    out = _wrap(
        "Written by `python benchmarks/report.py` from the raw files named; each section is one "
        "run, its engines measured together, with the command that repeats it."
    )
    for run in runs:
        title = {
            "speed": "`bench_speed.py`",
            "scale-peers": "`bench_scale.py --only peers`",
            "filters": "`bench_filters.py`",
            "churn": "`bench_churn.py`",
        }[run.kind]
        out += ["", f"### {title}, {run.date}", ""]
        out += _wrap(f"- CPU: {run.cpu_text}", "  ")
        out += _wrap(f"- Raw results: `benchmarks/results/{run.name}`", "  ")
        out += _wrap(f"- Versions: {_versions(run)}", "  ")
        if run in readme:
            out.append("- The README's row for this CPU.")
        for note in run.doc.get("notes", []):
            out += _wrap(f"- Note: {note}", "  ")
        out += ["", "```", run.command, "```"]
        docs = {
            "speed": _speed_docs,
            "scale-peers": _scale_docs,
            "filters": _filters_docs,
            "churn": _churn_docs,
        }
        out += docs[run.kind](run)
    return "\n".join(out)


# ------------------------------------------------------------------ files
def splice(text: str, name: str, body: str, where: str) -> str:
    """`text` with what is between its `name` markers replaced by `body`."""
    begin, end = f"<!-- report:begin {name} -->", f"<!-- report:end {name} -->"
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise ReportError(f"{where}: needs exactly one {begin} ... {end} pair")
    head, rest = text.split(begin)
    _, tail = rest.split(end)
    return f"{head}{begin}\n{body}\n{end}{tail}"


def load_runs(runs: Mapping[str, str], results: Path) -> tuple[list[Run], list[Run]]:
    """(the README's runs, every run), in the order of `runs`."""
    loaded = [(Run(name, results), where) for name, where in runs.items()]
    bad = [name for name, where in runs.items() if where not in ("readme", "docs")]
    if bad:
        raise ReportError(f'RUNS: {", ".join(bad)}: say "readme" or "docs"')
    quick = [r.name for r, where in loaded if r.doc.get("args", {}).get("quick")]
    if quick:
        raise ReportError(f"{', '.join(quick)}: a smoke run (--quick) is no figure to report")
    return [r for r, where in loaded if where == "readme"], [r for r, _ in loaded]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 on a difference")
    p.add_argument("--readme", type=Path, default=README, help="(README.md)")
    p.add_argument("--docs", type=Path, default=DOCS, help="(docs/benchmarks.md)")
    p.add_argument("--results", type=Path, default=RESULTS, help="(benchmarks/results)")
    args = p.parse_args(argv)
    try:
        readme_runs, every_run = load_runs(RUNS, args.results)
        wanted = {
            args.readme: ("performance", readme_section(readme_runs)),
            args.docs: ("benchmarks", docs_section(every_run, readme_runs)),
        }
        changed = []
        for path, (name, body) in wanted.items():
            try:
                text = path.read_text()
            except OSError as exc:
                raise ReportError(f"{path}: cannot read it ({exc.strerror})") from exc
            new = splice(text, name, body, str(path))
            if new == text:
                continue
            changed.append(path)
            if args.check:
                sys.stdout.writelines(
                    difflib.unified_diff(
                        text.splitlines(keepends=True),
                        new.splitlines(keepends=True),
                        f"{path} (as it is)",
                        f"{path} (from the results)",
                    )
                )
            else:
                path.write_text(new)
    except ReportError as exc:
        print(f"report.py: {exc}", file=sys.stderr)
        return 2
    if args.check and changed:
        names = ", ".join(str(p) for p in changed)
        print(
            f"report.py --check: {names} disagree(s) with benchmarks/results: run "
            "python benchmarks/report.py",
            file=sys.stderr,
        )
        return 1
    for path in changed:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
