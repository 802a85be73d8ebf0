"""`Check`: what `VectorIndex.check()` found."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Check:
    """The result of a full scan of an index, as returned by `VectorIndex.check`.

    Each list is empty when the scan found nothing of its kind; `ok` says whether all are.

    Parameters
    ----------
    unreachable : list of int
        Ids of live vectors that no search can reach from the entry point.
    not_finite : list of int
        Ids of live vectors holding NaN or infinity.
    corrupt : list of int, default: []
        Slot numbers (beyond chassisdb) whose stored vector, slot header, delete marker or
        neighbor lists fail their checksums or refer outside the index. These are slots, not
        ids, since a damaged header may not hold a trustworthy id. Searches skip such slots.
        With codes, a slot whose code is not the encoding of its vector is corrupt too.
    clipped : int, default: 0
        With codes: how many stored values lie outside the quantizer's range (their
        codes are clipped to its ends). Information, not damage: it does not affect `ok`.
        ``compact()`` learns the range again from the live vectors.

    See Also
    --------
    VectorIndex.check : The scan that returns a `Check`.

    Examples
    --------
    >>> import numpy as np, chassis
    >>> index = chassis.VectorIndex(None, 2)  # in memory
    >>> index.add_batch(np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32))
    array([0, 1], dtype=uint64)
    >>> report = index.check()
    >>> report
    Check(unreachable=[], not_finite=[], corrupt=[], clipped=0)
    >>> report.ok
    True
    """

    unreachable: list[int]
    not_finite: list[int]
    corrupt: list[int] = dataclasses.field(default_factory=list)
    clipped: int = 0

    @property
    def ok(self) -> bool:
        """Whether the scan found nothing: `unreachable`, `not_finite` and `corrupt` all empty."""
        return not (self.unreachable or self.not_finite or self.corrupt)
