"""A minimal progress line on stderr, for `progress=True` when tqdm is not installed."""

from __future__ import annotations

import sys
import time


class TextProgress:
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
