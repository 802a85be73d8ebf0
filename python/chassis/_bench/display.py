"""Figures for people: table cells, plain-text tables, and recall-QPS plots (matplotlib,
imported only when drawing)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from .schema import TARGETS


def qps_cell(summary: Mapping[str, Any], mode: str, target: str) -> str:
    """A table cell for summary["qps_at"][mode][target]: the value, "*" when it is a lower
    bound (the smallest ef already reached the recall), "-" when not reached or missing."""
    cell = summary.get("qps_at", {}).get(mode, {}).get(target)
    if cell is None or cell["qps"] is None:
        return "-"
    return fmt(cell["qps"]) + ("*" if cell["how"] == "at-first-point" else "")


def fmt(value: float | None, spec: str = ",.0f", suffix: str = "") -> str:
    """A number for a table cell; "-" when missing."""
    return "-" if value is None else f"{value:{spec}}{suffix}"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], align_first: str = "left") -> str:
    """A plain-text table, first column left-aligned (or right with align_first="right"),
    the rest right-aligned."""
    cells = [list(headers)] + [list(r) for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        first = row[0].rjust(widths[0]) if align_first == "right" else row[0].ljust(widths[0])
        parts = [first] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
        lines.append("  ".join(parts).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def draw_sweeps(
    ax: Any,
    sweeps: Mapping[str, Mapping[str, Sequence[Mapping[str, Any]]]],
    *,
    k: int,
    title: str = "",
    targets: Sequence[float] = TARGETS,
) -> Any:
    """Draw recall@k (x) against QPS (y, log scale) from {engine: {mode: sweep points}} on a
    matplotlib Axes: one colour per engine, solid for "batch", dashed for "loop"; the first
    point of each line is labelled with its ef, the recall targets are dotted lines. Returns
    `ax`."""
    import matplotlib

    colours = matplotlib.rcParams["axes.prop_cycle"].by_key().get("color", [None])
    for i, (engine, modes) in enumerate(sweeps.items()):
        for mode, points in modes.items():
            xs = [p["recall"] for p in points]
            ys = [p["qps"] for p in points]
            ax.plot(
                xs,
                ys,
                marker="o",
                markersize=3,
                color=colours[i % len(colours)],
                linestyle="-" if mode == "batch" else "--",
                label=engine if mode == "batch" else f"{engine} ({mode})",
            )
            if points:
                ax.annotate(
                    f"ef={points[0]['ef']}",
                    (xs[0], ys[0]),
                    fontsize=6,
                    textcoords="offset points",
                    xytext=(3, 3),
                )
    for t in targets:
        ax.axvline(t, color="grey", linewidth=0.5, linestyle=":")
    ax.set_yscale("log")
    ax.set_xlabel(f"recall@{k}")
    ax.set_ylabel("queries per second (1 thread)")
    if title:
        ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", linewidth=0.3, alpha=0.5)
    ax.legend(fontsize=8)
    return ax


def plot_sweeps(
    sweeps: Mapping[str, Mapping[str, Sequence[Mapping[str, Any]]]],
    path: str | os.PathLike[str],
    *,
    k: int,
    title: str = "",
    targets: Sequence[float] = TARGETS,
) -> None:
    """`draw_sweeps` on a figure of its own, saved to `path` (PNG, SVG, PDF by extension).

    The figure is made without pyplot, so the caller's matplotlib backend is left as it is.
    Needs matplotlib (raises ImportError with an install hint otherwise)."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(
            'plotting needs matplotlib: pip install matplotlib (or "chassis-index[plot]")'
        ) from None
    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    draw_sweeps(ax, sweeps, k=k, title=title, targets=targets)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
