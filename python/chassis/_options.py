"""`IndexOptions`: construction and search parameters, as a dataclass (as in chassisdb)."""

from __future__ import annotations

import dataclasses
from typing import Any

from chassis import _chassis

_METRICS = {
    "euclidean": "euclidean",
    "l2": "euclidean",
    "euclid": "euclidean",
    "cosine": "cosine",
    "cos": "cosine",
    "angular": "cosine",
    "inner_product": "inner_product",
    "ip": "inner_product",
    "dot": "inner_product",
}
_PRECISIONS = {
    "full": "full",
    "f32": "full",
    "float32": "full",
    "fp32": "full",
    "single": "full",
    "half": "half",
    "f16": "half",
    "float16": "half",
    "fp16": "half",
}


def _fail(cls: type[Exception], message: str, help: str) -> Exception:
    return cls(f"{message}\nhelp: {help}")


@dataclasses.dataclass(init=False)
class IndexOptions:
    """Parameters of an index.

    ``max_connections`` (HNSW M; layer 0 keeps 2M), ``metric`` and ``precision`` are fixed when
    the file is created; ``ef_construction`` and ``ef_search`` can differ per open.
    ``huge_pages`` and ``warm`` ask for the memory policies of ADR-0016 and ADR-0019.
    ``placement`` ("balanced", the default, or "local") decides which threads write an
    in-memory index's large stores first, and so on which NUMA nodes their pages lie; it
    changes where memory lies, never what a search returns, and does nothing for a file
    (whose pages belong to the page cache).
    Unknown names raise `ArgumentTypeError` (a `TypeError` and an `InvalidArgumentError`).
    """

    max_connections: int = 16
    ef_construction: int = 200
    ef_search: int = 50
    metric: str = "euclidean"
    precision: str = "full"
    huge_pages: bool | None = None
    warm: bool = False
    placement: str = "balanced"

    def __init__(
        self,
        max_connections: int = 16,
        ef_construction: int = 200,
        ef_search: int = 50,
        metric: str = "euclidean",
        precision: str = "full",
        huge_pages: bool | None = None,
        warm: bool = False,
        placement: str = "balanced",
        **unknown: Any,
    ) -> None:
        if unknown:
            names = ", ".join(repr(n) for n in unknown)
            valid = ", ".join(f.name for f in dataclasses.fields(IndexOptions))
            raise _fail(
                _chassis.ArgumentTypeError, f"unknown option {names}", f"the options are {valid}"
            )
        self.max_connections = max_connections
        self.ef_construction = ef_construction
        self.ef_search = ef_search
        self.metric = metric
        self.precision = precision
        self.huge_pages = huge_pages
        self.warm = warm
        self.placement = placement
        self.validate()

    def validate(self) -> None:
        """Check every field (and normalise metric and precision aliases such as "l2", "f16").

        Called on construction and again when an index is opened, since fields may be
        assigned in between.
        """
        for name in ("max_connections", "ef_construction", "ef_search"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise _fail(
                    _chassis.ArgumentTypeError,
                    f"{name}={v!r} is not an int",
                    f"pass an int for {name}",
                )
        for name, table in (("metric", _METRICS), ("precision", _PRECISIONS)):
            v = getattr(self, name)
            if not isinstance(v, str):
                raise _fail(
                    _chassis.ArgumentTypeError,
                    f"{name}={v!r} is not a str",
                    f"pass one of {sorted(set(table.values()))}",
                )
            canon = table.get(v.strip().lower())
            if canon is None:
                raise _fail(
                    _chassis.InvalidArgumentError,
                    f"unknown {name} {v!r}",
                    f"use one of {sorted(set(table.values()))}",
                )
            setattr(self, name, canon)
        if self.huge_pages is not None and not isinstance(self.huge_pages, bool):
            raise _fail(
                _chassis.ArgumentTypeError,
                f"huge_pages={self.huge_pages!r}",
                "pass True, False or None",
            )
        if not isinstance(self.warm, bool):
            raise _fail(_chassis.ArgumentTypeError, f"warm={self.warm!r}", "pass True or False")
        if not isinstance(self.placement, str):
            raise _fail(
                _chassis.ArgumentTypeError,
                f"placement={self.placement!r} is not a str",
                'pass "balanced" or "local"',
            )
        placement = self.placement.strip().lower()
        if placement not in ("balanced", "local"):
            raise _fail(
                _chassis.InvalidArgumentError,
                f"unknown placement {self.placement!r}",
                'use "balanced" (the default) or "local"',
            )
        self.placement = placement
        # The ranges are the core's (one place for them).
        _chassis._check_options(self.max_connections, self.ef_construction, self.ef_search)

    def replace(self, **changes: Any) -> IndexOptions:
        """A copy with some fields changed (like `dataclasses.replace`)."""
        fields = dataclasses.asdict(self)
        fields.update(changes)
        return IndexOptions(**fields)
