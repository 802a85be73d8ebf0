"""`chassis.bench`: `run()` and its `BenchResult` (text, HTML, plot, JSON) on small data.

Oracles: the CLI's own output for the same run (text and JSON come from one code path), the
figures of `to_dict()` for what the HTML table and the plot show, the sizes of the data
given, and an import in a fresh interpreter for what `import chassis.bench` loads."""

from __future__ import annotations

import json
from html.parser import HTMLParser

import numpy as np
import pytest
from chassis import __main__ as cli
from chassis import bench
from chassis import datasets as D
from conftest import run_python

SMALL = {"ef": [10, 40], "quick": True}


@pytest.fixture(scope="module")
def arrays():
    return D.clustered(1_500, 8, 40, seed=3)


@pytest.fixture(scope="module")
def result(arrays):
    return bench.run(arrays, **SMALL)


def test_import_loads_no_plotting_or_peers():
    proc = run_python(
        """
        import sys
        import chassis.bench
        from chassis import bench
        assert bench is chassis.bench and callable(bench.run)
        loaded = [m for m in ("matplotlib", "hnswlib", "usearch", "faiss", "chassisdb", "tqdm")
                  if m in sys.modules]
        print("loaded:", loaded)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert "loaded: []" in proc.stdout


def test_run_on_arrays_gives_the_figures(result, arrays):
    """Oracle: the arrays' sizes; recall at the larger ef near 1 on easy data."""
    base, queries = arrays
    d = result.data
    assert (d["n"], d["dims"], d["queries"]) == (len(base), base.shape[1], len(queries))
    assert d["label"] == "arrays" and d["ground_truth"] == "computed" and d["sampled_from"] is None
    chassis = result.engines["chassis"]
    sweep = chassis["sweep"]["batch"]
    assert [p["ef"] for p in sweep] == [10, 40]
    assert sweep[-1]["recall"] >= 0.95 and all(p["qps"] > 0 for p in sweep)
    assert set(chassis["qps_at"]["batch"]) == {"0.9", "0.95", "0.99"}
    assert chassis["build_s"] > 0 and chassis["file_bytes"] > 0
    assert result.ratios == {} and result.modes == ["batch"] and result.k == 10
    assert "arrays: 1,500 x 8, 40 queries" in repr(result)


def test_text_is_what_the_command_prints(arrays, tmp_path, capsys):
    """Oracle: `chassis bench` on the same data written to a file: the same lines, in the same
    order, up to the measured numbers (compared with digits masked)."""
    import re

    base, queries = arrays
    D.write_npy(tmp_path / "base.npy", base)
    D.write_npy(tmp_path / "queries.npy", queries)
    lines: list[str] = []
    result = bench.run(tmp_path, log=lines.append, **SMALL)
    assert lines == result.log and lines[0].startswith("chassis ")
    rc = cli.main(["bench", "--data", str(tmp_path), "--quick", "--ef", "10,40"])
    printed = capsys.readouterr().out
    assert rc == 0

    def mask(text: str) -> str:
        # numbers, then the widths of the columns they set (runs of spaces and rule dashes)
        return re.sub(r"[ -]+", " ", re.sub(r"\d[\d,.]*\*?", "#", text))

    assert mask(printed.strip()) == mask(str(result).strip())
    assert result.table() in str(result) and "summary (QPS at recall@10" in result.table()


def test_json_is_the_command_json(arrays, tmp_path, capsys):
    """Oracle: the document `chassis bench --json` writes for the same data: the same keys
    at every level, and the same data description."""
    base, queries = arrays
    path = tmp_path / "vectors.fbin"
    D.write_fbin(path, np.vstack([base, queries]))
    mine = bench.run(path, queries=40, **SMALL)
    written = mine.to_json(tmp_path / "mine.json")
    from_file = json.loads(written.read_text())
    assert from_file == json.loads(json.dumps(mine.to_dict()))

    out = tmp_path / "cli.json"
    rc = cli.main(
        [
            "bench",
            "--data",
            str(path),
            "--queries",
            "40",
            "--quick",
            "--ef",
            "10,40",
            "--json",
            str(out),
        ]
    )
    capsys.readouterr()
    assert rc == 0
    theirs = json.loads(out.read_text())

    def keys(doc, depth=0):
        if isinstance(doc, dict) and depth < 4:
            return {k: keys(v, depth + 1) for k, v in doc.items()}
        return type(doc).__name__

    assert keys(from_file) == keys(theirs)
    skip = ("ground_truth_s",)
    assert {k: v for k, v in from_file["data"].items() if k not in skip} == {
        k: v for k, v in theirs["data"].items() if k not in skip
    }
    assert from_file["data"]["label"] == "vectors.fbin (last 40 rows as queries)"
    assert len(from_file["points"]) == 2 and from_file["points"][0]["engine"] == "chassis"


class _Cells(HTMLParser):
    """Tables as lists of rows of cell texts, and a check that every tag closes."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[dict] = []
        self.open: list[str] = []
        self.text: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        self.open.append(tag)
        if tag == "table":
            self.tables.append({"attrs": dict(attrs), "rows": []})
        elif tag == "tr":
            self.tables[-1]["rows"].append([])
        elif tag in ("td", "th"):
            self.text = []

    def handle_endtag(self, tag):
        assert self.open and self.open[-1] == tag, f"</{tag}> closes <{self.open[-1:]}>"
        self.open.pop()
        if tag in ("td", "th"):
            self.tables[-1]["rows"][-1].append("".join(self.text or []).strip())
            self.text = None

    def handle_data(self, data):
        if self.text is not None:
            self.text.append(data)


def test_html_table_shows_every_point_and_qps_at_targets(result):
    """Oracle: to_dict()'s sweep points and QPS-at-recall figures, found in the cells of the
    row of their ef and engine."""
    page = result._repr_html_()
    parser = _Cells()
    parser.feed(page)
    assert parser.open == [], "unclosed tags"
    sweep_table, summary = parser.tables
    assert sweep_table["attrs"]["data-mode"] == "batch"
    rows = {r[0]: r[1:] for r in sweep_table["rows"][2:]}
    for point in result.to_dict()["engines"]["chassis"]["sweep"]["batch"]:
        assert rows[str(point["ef"])] == [f"{point['recall']:.4f}", f"{point['qps']:,.0f}"]
    header, row = summary["rows"]
    assert header[-3:] == ["QPS@0.9", "QPS@0.95", "QPS@0.99"]
    qps_at = result.engines["chassis"]["qps_at"]["batch"]
    for cell, target in zip(row[-3:], ("0.9", "0.95", "0.99")):
        figure = qps_at[target]
        if figure["qps"] is None:
            assert cell == "-"
        else:
            assert cell.rstrip("*") == f"{figure['qps']:,.0f}"
            assert cell.endswith("*") == (figure["how"] == "at-first-point")
    assert row[0].startswith("chassis ")
    assert ("lower bound" in page) == any(c.endswith("*") for c in row[-3:])


def _result(hows: list[str]) -> bench.BenchResult:
    """A BenchResult with chosen QPS-at-recall cells (nothing measured)."""
    qps_at = {
        t: {"qps": None if how == "not-reached" else 100.0, "how": how}
        for t, how in zip(("0.9", "0.95", "0.99"), hows)
    }
    engine = {
        "version": "0",
        "build_s": 1.0,
        "vectors_per_s": 1.0,
        "persist_s": 0.0,
        "file_bytes": 1,
        "open_ms": 1.0,
        "sweep": {"batch": [{"ef": 10, "recall": 0.5, "qps": 100.0}]},
        "qps_at": {"batch": qps_at},
    }
    data = {"label": "x", "n": 1, "dims": 1, "queries": 1, "metric": "euclidean"}
    return bench.BenchResult(
        engines={"chassis": engine},
        data=data,
        k=10,
        ef=[10],
        modes=["batch"],
        settings={"m": 16, "ef_construction": 200, "compare": []},
        build_threads=1,
    )


@pytest.mark.parametrize(
    ("hows", "star", "dash"),
    [
        (["interpolated"] * 3, False, False),
        (["at-first-point", "interpolated", "interpolated"], True, False),
        (["interpolated", "interpolated", "not-reached"], False, True),
        (["at-first-point", "interpolated", "not-reached"], True, True),
    ],
)
def test_footnote_says_only_what_applies(hows, star, dash):
    """Oracle: the cells themselves (`*` for a lower bound, `-` for not reached)."""
    r = _result(hows)
    for text in (r.table(), r._repr_html_()):
        assert ("lower bound" in text) == star, text
        assert ("not reached" in text) == dash, text


def test_plot_draws_one_line_per_engine_and_mode(result):
    """Oracle: the sweep's recall and QPS, as the line's x and y."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    ax = Figure().subplots()
    assert result.plot(ax) is ax
    (line,) = ax.get_lines()[:1]
    sweep = result.engines["chassis"]["sweep"]["batch"]
    assert list(line.get_xdata()) == [p["recall"] for p in sweep]
    assert list(line.get_ydata()) == [p["qps"] for p in sweep]
    assert ax.get_yscale() == "log" and ax.get_xlabel() == "recall@10"
    assert line.get_label() == "chassis"

    own = result.plot()  # a new figure through pyplot
    assert own.get_yscale() == "log"
    import matplotlib.pyplot as plt

    plt.close(own.figure)


def test_plot_without_matplotlib_names_the_extra(result, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)
    monkeypatch.setitem(__import__("sys").modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match=r'pip install "chassis-index\[plot\]"'):
        result.plot()


def test_data_forms_and_quick_sample():
    """A Dataset, one array (its last rows become the queries) and a quick sample of a large
    Dataset. Oracle: the sizes given."""
    base, queries = D.clustered(10_400, 4, 230, seed=5)
    truth = D.ground_truth(base, queries, 10)[0]
    ds = D.Dataset("four", base, queries, truth, None)
    r = bench.run(ds, quick=True, ef=[20])
    assert (r.data["n"], r.data["queries"]) == (10_000, 200)
    assert r.data["sampled_from"] == {"n": 10_400, "queries": 230}
    assert r.data["ground_truth"] == "computed"  # the sample changed the ids
    assert "quick: a random sample of 10,000 of 10,400 vectors and the first 200 of 230" in str(r)
    assert r.engines["chassis"]["sweep"]["batch"][0]["recall"] >= 0.9

    whole = bench.run(ds, n=1_000, queries=30, ef=[20], quick=True)  # explicit sizes win
    assert (whole.data["n"], whole.data["queries"], whole.data["sampled_from"]) == (1_000, 30, None)

    one = bench.run(base[:1_100], ef=[20], quick=True)
    assert (one.data["n"], one.data["queries"]) == (990, 110)
    assert one.data["label"] == "array (last 110 rows as queries)"


def test_argument_errors(tmp_path, arrays):
    with pytest.raises(ValueError, match="unknown engine nosuchlib"):
        bench.run(compare="nosuchlib")
    with pytest.raises(ValueError, match="k is 0"):
        bench.run(k=0)
    with pytest.raises(ValueError, match="positive ints"):
        bench.run(ef=[0, 10])
    with pytest.raises(ValueError, match="dims is for generated data"):
        bench.run(arrays, dims=8)
    with pytest.raises(ValueError, match="need a data set"):
        bench.run(truth=np.zeros((3, 10)))
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        bench.run(tmp_path / "missing")
    with pytest.raises(ValueError, match="metric is 'manhattan'"):
        bench.run(arrays, metric="manhattan")
    assert bench.engine_names("all") == list(bench.PEERS)
    assert bench.engine_names(["chassis", "faiss", "faiss"]) == ["faiss"]
