"""Progress bars for `progress=True`: which bar, and a minimal one when tqdm is missing.

Every `progress=True` in chassis (the Rust calls `add_batch`, `search_batch`, `compact`,
`check`, `load`, and `datasets.ground_truth`) asks `progress_bar()` for its bar, so one rule
decides for all of them:

- in Jupyter with `ipywidgets` installed, tqdm's widget bar (`tqdm.notebook`);
- anywhere else with tqdm installed, tqdm's text bar (`tqdm.std`), also in Jupyter without
  `ipywidgets`, and without the "IProgress not found" warning `tqdm.auto` gives there;
- without tqdm, `TextProgress`, one line on stderr redrawn every half second.
"""

from __future__ import annotations

import importlib.util
import sys
import time
import warnings
from typing import Any


def _has_widgets() -> bool:
    """True when ipywidgets can be imported (without importing it)."""
    try:
        return importlib.util.find_spec("ipywidgets") is not None
    except (ImportError, ValueError):
        return False


def _tqdm_class() -> Any:
    """The tqdm class to use, or None when tqdm is not installed."""
    try:
        from tqdm.std import tqdm
    except ImportError:
        return None
    if not _has_widgets():
        return tqdm  # tqdm.auto would warn in Jupyter, then fall back to this same class
    with warnings.catch_warnings():
        # tqdm.auto picks the widget bar in a notebook kernel and the text bar elsewhere
        warnings.simplefilter("ignore")
        try:
            from tqdm.auto import tqdm as auto
        except ImportError:
            return tqdm
    return auto


def progress_bar(total: int, desc: str = "", unit: str = "it", **options: Any) -> Any:
    """A progress bar with tqdm's `update(n)` / `close()` interface.

    Parameters
    ----------
    total : int
        The count at which the work is done.
    desc : str
        The label before the bar.
    unit : str
        What is counted ("vec", "B", ...).
    **options
        Passed on to tqdm (`unit_scale=True`, `leave=False`, ...); `TextProgress` ignores them.

    Returns
    -------
    tqdm or TextProgress
        tqdm's widget bar in Jupyter when ipywidgets is installed, else tqdm's text bar,
        else (no tqdm) a `TextProgress`.

    Examples
    --------
    >>> bar = progress_bar(1_000, desc="vectors", unit="vec", disable=True)
    >>> bar.update(1_000)
    >>> bar.close()
    """
    tqdm = _tqdm_class()
    if tqdm is None:
        return TextProgress(total, desc=desc, unit=unit)
    return tqdm(total=total, desc=desc, unit=unit, **options)


class TextProgress:
    """A one-line progress display on stderr, for `progress=True` when tqdm is not installed."""

    def __init__(self, total: int, desc: str = "", unit: str = "it", **_: object) -> None:
        self.total, self.desc, self.unit = total, desc, unit
        self.n = 0
        self._start = self._last = time.monotonic()

    def update(self, n: int) -> None:
        self.n += n
        now = time.monotonic()
        if now - self._last >= 0.5:
            self._last = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        rate = self.n / max(now - self._start, 1e-9)
        pct = 100.0 * self.n / self.total if self.total else 100.0
        sys.stderr.write(
            f"\r{self.desc}: {self.n}/{self.total} {self.unit} ({pct:.0f}%, {rate:,.0f} {self.unit}/s)"
        )
        sys.stderr.flush()

    def close(self) -> None:
        self._draw(time.monotonic())
        sys.stderr.write("\n")
        sys.stderr.flush()
