"""`IndexOptions`: construction and search parameters, as a dataclass (as in chassisdb)."""

from __future__ import annotations

import contextlib
import dataclasses
import operator
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
_QUANTIZATIONS = {
    "int8": "int8",
    "i8": "int8",
    "sq8": "int8",
    "scalar": "int8",
    "int4": "int4",
    "i4": "int4",
    "sq4": "int4",
    "none": "none",
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
    "int8": "int8",
    "i8": "int8",
}


def _fail(cls: type[Exception], message: str, help: str) -> Exception:
    return cls(f"{message}\nhelp: {help}")


@dataclasses.dataclass(init=False)
class IndexOptions:
    """Construction and search parameters of an index.

    ``max_connections``, ``metric`` and ``precision`` are fixed when the file is created: a
    writer that opens an existing file with other values raises `OptionsMismatchError`, and a
    reader takes them from the file. ``ef_construction`` and ``ef_search`` can differ per
    open. ``huge_pages`` and ``warm`` ask for the memory policies of ADR-0016 and ADR-0019;
    ``placement`` decides where an in-memory index's pages lie.

    Parameters
    ----------
    max_connections : int, default: 16
        HNSW M: links per node (layer 0 keeps 2M). From 2 to 256; 16 is usual. Fixed when
        the file is created.
    ef_construction : int, default: 200
        Beam width while linking new vectors: higher builds a better graph, more slowly.
        From 1 to 16,777,216 (2**24).
    ef_search : int, default: 50
        Beam width while searching, unless a call passes ``ef``. From 1 to 16,777,216
        (2**24).
    metric : {"euclidean", "cosine", "inner_product"}, default: "euclidean"
        ``"euclidean"`` (L2 distance), ``"cosine"`` (1 - cos; vectors are stored normalised
        and zero vectors refused) or ``"inner_product"`` (minus the dot product). The aliases
        ``"l2"``, ``"euclid"``, ``"cos"``, ``"angular"``, ``"ip"`` and ``"dot"`` are accepted,
        in any case, and stored as the canonical name. Fixed when the file is created.
    precision : {"full", "half", "int8"}, default: "full"
        ``"full"`` (32-bit floats), ``"half"`` (16-bit storage, 32-bit queries; values
        beyond the 16-bit range are refused) or ``"int8"``: 8-bit codes only, no float copy
        (a quarter of the bytes of ``"full"``; implies ``quantization="int8"``). With
        ``"int8"`` the distances returned, and the vectors ``get`` returns, are the codes'
        (each value within half a step of the one added, or clipped to the learned range);
        the first ``add_batch`` needs 1,000 rows to learn the ranges from, unless
        ``VectorIndex.train`` came first. The aliases ``"f32"``, ``"float32"``, ``"fp32"``,
        ``"single"``, ``"f16"``, ``"float16"``, ``"fp16"`` and ``"i8"`` are accepted, in any
        case, and stored as the canonical name. Fixed when the file is created.
    huge_pages : bool or None, default: None
        ADR-0016: True asks the OS for huge pages under the vectors, False never; None turns
        them on when ``warm`` is on and vectors are 2 KB or longer. For an in-memory index,
        None and True ask for them under every store, False never.
    warm : bool, default: False
        ADR-0019: read the file into memory on a background thread from opening.
    placement : {"balanced", "local"}, default: "balanced"
        Which threads write an in-memory index's large stores first, and so on which NUMA
        nodes their pages lie: ``"balanced"`` makes bulk writes (16,384 items or more, such
        as a large ``add_batch`` or the copy ``VectorIndex.load`` makes) from every thread so
        that pages spread over the nodes, ``"local"`` writes from the calling thread only.
        It changes where memory lies, never what a search returns, and does nothing for a
        file (whose pages belong to the page cache).
    quantization : {None, "int8", "int4"}, default: None
        ``"int8"`` keeps an 8-bit code per dimension beside each vector (a quarter of its
        bytes): searches walk the codes and measure their best candidates again on the
        vectors (``rerank``), so the distances returned stay the vectors' own. The codes'
        ranges are learned from the first 1,000 rows (or by ``VectorIndex.train``). The
        aliases ``"i8"``, ``"sq8"`` and ``"scalar"`` are accepted. ``"int4"`` keeps 4-bit
        codes (an eighth of the bytes, ``"i4"`` and ``"sq4"`` too): coarser, so searches
        rerank more candidates; for an index larger than memory, whose codes must stay in
        memory for searches not to wait on the disk. Not with ``precision="int8"``. Fixed
        when the file is created.
    **unknown
        Not accepted: any other keyword raises `ArgumentTypeError` naming the valid options
        (it is there to give that message rather than Python's own `TypeError`).

    Raises
    ------
    ArgumentTypeError
        For an unknown option name. It is both an `InvalidArgumentError` and a `TypeError`
        (chassisdb raised `TypeError`).

    See Also
    --------
    VectorIndex : Takes an `IndexOptions` (or a dict of its fields) as ``options``.

    Notes
    -----
    `IndexOptions` is a dataclass, as in chassisdb: fields are positional or keyword,
    mutable, and `dataclasses.replace` works. As in chassisdb, values are checked by
    `validate`, which opening an index calls: construction accepts a value out of range or of
    the wrong type and keeps it, and only puts valid aliases in canonical form. A dict of
    fields is accepted wherever an `IndexOptions` is.

    Examples
    --------
    >>> import chassis
    >>> options = chassis.IndexOptions(max_connections=32, metric="cos", precision="f16")
    >>> options.metric, options.precision
    ('cosine', 'half')
    >>> options = chassis.IndexOptions(ef_search=0)
    >>> options.validate()
    Traceback (most recent call last):
        ...
    chassis.InvalidArgumentError: ef_search=0 is out of range
    help: use a value from 1 to 16777216
    >>> try:
    ...     chassis.IndexOptions(ef_serch=100)
    ... except TypeError as exc:
    ...     print(str(exc).splitlines()[0])
    unknown option 'ef_serch'
    """

    max_connections: int = 16
    ef_construction: int = 200
    ef_search: int = 50
    metric: str = "euclidean"
    precision: str = "full"
    huge_pages: bool | None = None
    warm: bool = False
    placement: str = "balanced"
    quantization: str | None = None

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
        quantization: str | None = None,
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
        self.quantization = quantization
        self.huge_pages = huge_pages
        self.warm = warm
        self.placement = placement
        # Checked by `validate` and on use, as in chassisdb; valid aliases made canonical now.
        with contextlib.suppress(_chassis.ChassisError):
            self.validate()

    def validate(self) -> None:
        """Check every field, and normalise metric and precision aliases such as "l2", "f16".

        Opening an index calls it, as chassisdb's did; call it to check options earlier.

        Raises
        ------
        ArgumentTypeError
            A field holds a value of the wrong type (it is also a `TypeError`).
        InvalidArgumentError
            A field is out of range, or names an unknown metric, precision or placement.

        Examples
        --------
        >>> import chassis
        >>> options = chassis.IndexOptions()
        >>> options.metric = "L2"
        >>> options.validate()
        >>> options.metric
        'euclidean'
        """
        for name in ("max_connections", "ef_construction", "ef_search"):
            v = getattr(self, name)
            # Any integer type (NumPy's too, as `k` takes them), never a bool.
            try:
                n = None if isinstance(v, bool) else operator.index(v)
            except TypeError:
                n = None
            if n is None:
                raise _fail(
                    _chassis.ArgumentTypeError,
                    f"{name}={v!r} is not an int",
                    f"pass an int for {name}",
                )
            if not -(2**63) <= n < 2**63:
                # Past any range the core checks (and past what it could read as a number).
                raise _fail(
                    _chassis.InvalidArgumentError,
                    f"{name}={n} is out of range",
                    f"pass a smaller {name}",
                )
            setattr(self, name, n)
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
        if self.quantization is not None:
            if not isinstance(self.quantization, str):
                raise _fail(
                    _chassis.ArgumentTypeError,
                    f"quantization={self.quantization!r} is not a str",
                    'pass "int8", "int4" or None',
                )
            q = _QUANTIZATIONS.get(self.quantization.strip().lower(), "")
            if not q:
                raise _fail(
                    _chassis.InvalidArgumentError,
                    f"unknown quantization {self.quantization!r}",
                    'use "int8" (8-bit codes, reranked with the vectors), "int4" (4-bit codes, '
                    "reranked further) or None",
                )
            self.quantization = None if q == "none" else q
        if self.precision == "int8" and self.quantization == "int4":
            raise _fail(
                _chassis.InvalidArgumentError,
                'precision="int8" keeps 8-bit codes only, and quantization="int4" asks for 4-bit',
                'use precision="full" or "half" with quantization="int4", or drop quantization',
            )
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
        """Return a copy with some fields changed, like `dataclasses.replace`.

        The copy is checked (`validate`); this one is left as it is.

        Parameters
        ----------
        **changes
            New values of fields, by name.

        Returns
        -------
        IndexOptions
            A new instance with the changes applied.

        Raises
        ------
        ArgumentTypeError
            A name is not a field, or a value has the wrong type.
        InvalidArgumentError
            A value is out of range or names an unknown metric, precision or placement.

        Examples
        --------
        >>> import chassis
        >>> fast = chassis.IndexOptions().replace(ef_search=20)
        >>> fast.ef_search, fast.ef_construction
        (20, 200)
        """
        fields = dataclasses.asdict(self)
        fields.update(changes)
        copy = IndexOptions(**fields)
        copy.validate()
        return copy
