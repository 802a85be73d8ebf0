"""Rich display in notebooks: `repr_html(index)`, an HTML table for a `VectorIndex` or an
`IndexReader`, built only from the public API (so it works on a closed index too: what
cannot be read any more is shown as "closed")."""

from __future__ import annotations

import dataclasses
import html
import os
from typing import Any

from chassis._chassis import ChassisError

_CLOSED = object()


def _get(index: Any, name: str) -> Any:
    """index.<name>, or _CLOSED when the index no longer answers (closed, or any error)."""
    try:
        return getattr(index, name)
    except (ChassisError, OSError, ValueError):
        return _CLOSED


def _size_text(path: Any) -> str:
    try:
        return _bytes_text(os.path.getsize(path))
    except (OSError, TypeError):
        return "missing"


def _bytes_text(n: int) -> str:
    size = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:,.0f} bytes" if unit == "bytes" else f"{size:,.1f} {unit}"
        size /= 1024
    return ""  # not reached


def _text(value: Any) -> str:
    return "<i>closed</i>" if value is _CLOSED else html.escape(str(value))


def repr_html(index: Any) -> str:
    """A small HTML table describing `index`: path, class, dimensions, metric, precision,
    vector count, pending (writers), open or closed, file size on disk and options."""
    closed = bool(_get(index, "closed") is True)
    read_only = _get(index, "read_only")
    path = _get(index, "path")
    count: Any = _CLOSED
    if not closed:
        try:
            count = f"{len(index):,}"
        except (ChassisError, OSError, ValueError):
            pass
    in_memory = path is None
    rows: list[tuple[str, str]] = [
        ("path", "<i>none (in memory)</i>" if in_memory else f"<code>{_text(path)}</code>"),
        (
            "class",
            html.escape(type(index).__name__)
            + (
                " (read-only)"
                if read_only is True and type(index).__name__ == "VectorIndex"
                else ""
            ),
        ),
        ("dimensions", _text(_get(index, "dimensions"))),
        ("metric", _text(_get(index, "metric"))),
        ("precision", _text(_get(index, "precision"))),
        ("vectors", _text(count)),
    ]
    if read_only is False and not in_memory:
        pending = _CLOSED if closed else _get(index, "pending")
        rows.append(
            (
                "pending",
                _text(f"{pending:,}" if isinstance(pending, int) else pending)
                + (" (unflushed)" if isinstance(pending, int) and pending else ""),
            )
        )
    rows.append(("state", "closed" if closed else "open"))
    if in_memory:
        stats = None if closed else _get(index, "memory_stats")
        resident = stats().get("resident_bytes") if callable(stats) else None
        rows.append(
            ("in memory", html.escape(_bytes_text(resident)) if isinstance(resident, int) else "?")
        )
    else:
        rows.append(("file size", html.escape(_size_text(path)) if path is not _CLOSED else "?"))
    options = _CLOSED if closed else _get(index, "options")
    if options is not _CLOSED and dataclasses.is_dataclass(options):
        fields = ", ".join(
            f"{f.name}={html.escape(repr(getattr(options, f.name)))}"
            for f in dataclasses.fields(options)
        )
        rows.append(("options", f"<code>{fields}</code>"))
    else:
        rows.append(("options", _text(options)))

    body = "".join(
        f'<tr><th style="text-align:left;padding-right:1em">{name}</th>'
        f'<td style="text-align:left">{value}</td></tr>'
        for name, value in rows
    )
    return f'<table class="chassis-index"><tbody>{body}</tbody></table>'
