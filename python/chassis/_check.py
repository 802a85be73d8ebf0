"""`Check`: what `VectorIndex.check()` found."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Check:
    """The result of a full scan of an index.

    ``unreachable``: ids of live vectors that no search can reach from the entry point;
    ``not_finite``: ids of live vectors holding NaN or infinity;
    ``corrupt`` (beyond chassisdb): slot numbers whose stored vector, slot header, delete
    marker or neighbor lists fail their checksums or refer outside the index (slots, since a
    damaged header may not hold a trustworthy id). Searches skip such slots.
    """

    unreachable: list[int]
    not_finite: list[int]
    corrupt: list[int] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.unreachable or self.not_finite or self.corrupt)
