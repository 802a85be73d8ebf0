"""Damaged files: flipped bytes in every region of an index (docs/format.md), opened in a child.

A flushed index of 3,000 x 16 vectors (M=16, so there are upper layers; three commits, the last
one deleting three ids and setting user_version) is copied, bytes are flipped in one region of
the copy, and a fresh interpreter opens it, first as a reader and then as a writer. The child
must never die of a signal. Then:

* header damage (copy 0, copy 1: magic, version, seq, slot count, checksum): the file opens
  with a RuntimeWarning naming the damaged copy and holds exactly the state of the other copy's
  commit (ids, len, user_version, vectors, exact search, check() clean);
* both copies damaged: CorruptIndexError; neither copy has the magic: NotAnIndexError;
* slot-level damage (slot header id and checksum words, vector bytes, level-0 neighbor entry,
  count and level, the entry point's list, upper-layer lists in a heap chunk, the delete marker
  of a deleted and of a live slot): the file opens without warnings, check().corrupt names
  exactly the damaged slot, every search (default ef, exact, batch, filtered) returns results
  without error, get() of a vector failing its checksum raises CorruptIndexError and every
  other vector is bit-identical, a slot whose header or marker is damaged is hidden.

The whole matrix runs three times: on a plain index and on ones with 8-bit codes
(``quantization="int8"``, format version 2) and 4-bit codes (``"int4"``, version 3): each
segment starts with a codes area, and a quantizer region holds the learned ranges. The codes add two cases: a damaged code is named by
check().corrupt while every search still returns exact distances (they come from the vectors),
and a damaged quantizer, which both commits name, makes the file refuse to open
(CorruptIndexError).

Offsets follow docs/format.md; ``test_layout_arithmetic`` checks them against the file first
(ids read back from slot headers, vectors from the vector arrays, the region table). A batch of
1,024 rows or more is laid out by locality, so a slot does not hold the id of the same number:
the cases name the id they damage and find its slot from the slot headers.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from chassis import IndexOptions, VectorIndex
from conftest import (
    assert_bit_identical,
    assert_exact_knn,
    clustered_data,
    describe_returncode,
    run_python,
)
from file_layout import HEADER_COPY, NO_UPPER, Layout, parse_header

N, DIMS, M = 3000, 16, 16
DELETED = [5, 1500, 2500]
USER_VERSION = 9
DATA_START = 128 * 1024


# --------------------------------------------------------------------------- the pristine index
VARIANTS = ["plain", "int8", "int4"]  # an index without codes, with 8-bit and 4-bit codes


@pytest.fixture(scope="module")
def pristine(tmp_path_factory, request):
    d = tmp_path_factory.mktemp("corruption")
    path = d / "pristine.chassis"
    data = clustered_data(N, DIMS, seed=31)
    quantization = None if request.param == "plain" else request.param
    options = IndexOptions(max_connections=M, ef_construction=64, quantization=quantization)
    with VectorIndex(path, DIMS, options) as ix:
        ix.add_batch(data[:2000])
        ix.flush()
        ix.add_batch(data[2000:])
        ix.flush()
        for i in DELETED:
            assert ix.delete(i)
        ix.user_version = USER_VERSION  # committed when the with block flushes
    b = path.read_bytes()
    h0, h1 = parse_header(b, 0), parse_header(b, 1)
    cur, old = (h0, h1) if h0.seq > h1.seq else (h1, h0)
    assert cur.seq == old.seq + 1
    layout = Layout(cur)
    id_of = [struct.unpack_from("<Q", b, layout.slot_header(s))[0] for s in range(N)]
    live_ids = [i for i in range(N) if i not in DELETED]
    states = {
        cur.copy: dict(ids=live_ids, user_version=USER_VERSION, seq=cur.seq),
        old.copy: dict(ids=list(range(N)), user_version=0, seq=old.seq),  # before the deletes
    }
    return dict(
        path=path,
        bytes=b,
        data=data,
        cur=cur,
        old=old,
        layout=layout,
        states=states,
        id_of=id_of,
        slot_of={i: s for s, i in enumerate(id_of)},
    )


@pytest.mark.parametrize("pristine", VARIANTS, indirect=True)
def test_layout_arithmetic(pristine):
    """The offsets used below agree with the file: region table, ids and vectors read back."""
    b, lay, data, cur = pristine["bytes"], pristine["layout"], pristine["data"], pristine["cur"]
    # version 1 without codes, 2 with 8-bit codes, 3 with 4-bit ones (docs/format.md)
    assert cur.version == {0: 1, 1: 2, 2: 3}[cur.quantization]
    assert cur.slots == N and cur.live == N - len(DELETED) and cur.next_id == N
    assert cur.user_version == USER_VERSION
    assert lay.segments[0][2] == DATA_START, "the first segment starts at 128 KiB"
    assert len(lay.segments) == 2 and len(lay.heaps) >= 1  # 1024 + 2048 slots; upper layers exist
    assert lay.l0(0) - lay.slot_header(0) == 1024 * 32
    id_of = pristine["id_of"]
    # Each batch fills its own slots (rows 0-1999, then 2000-2999), laid out by locality.
    assert sorted(id_of[:2000]) == list(range(2000)) and sorted(id_of[2000:]) == list(
        range(2000, N)
    )
    assert id_of != list(range(N)), "batches of 1,024 rows or more are laid out by locality"
    for s in [0, 1, 5, 100, 1023, 1024, 1025, 1500, 2100, 2999]:
        sid, upper, marker, crcs = struct.unpack_from("<QQQQ", b, lay.slot_header(s))
        vec = np.frombuffer(b, np.float32, DIMS, lay.vector(s))
        assert_bit_identical(
            vec, data[sid], f"vector of slot {s} (id {sid}) at the computed offset"
        )
        assert (marker != 0) == (sid in DELETED)
        head = struct.unpack_from("<I", b, lay.l0(s))[0]
        count, level = head & 0xFFFF, (head >> 16) & 0xFF
        assert 0 < count <= 2 * M
        nbrs = struct.unpack_from(f"<{count}I", b, lay.l0(s) + 8)
        assert all(n < N for n in nbrs)
        assert (upper == NO_UPPER) == (level == 0)
        if level:
            ucount = struct.unpack_from("<I", b, lay.upper_list(upper, 1))[0]
            assert 0 < ucount <= M
    assert upper_node(pristine) is not None
    if lay.codes:
        # The quantizer region: "CHQ8" ("CHQ4"), dims, then (offset, step) per dimension.
        # Each stored code stands for its vector to within half a step (values inside the
        # range). 4-bit codes: dimension 32b + j in the low nibble of byte 16b + j, 32b + 16 + j
        # in its high one.
        four = cur.quantization == 2
        q = cur.quantizer
        assert any(r[0] == 3 and r[2] == q for r in cur.regions), "the quantizer region"
        magic = b"CHQ4" if four else b"CHQ8"
        assert b[q : q + 4] == magic and struct.unpack_from("<I", b, q + 4)[0] == DIMS
        pairs = np.frombuffer(b, np.float32, 2 * DIMS, q + 8).reshape(DIMS, 2)
        offset, step = pairs[:, 0], pairs[:, 1]
        top = 15 if four else 255
        for s in [0, 5, 1023, 1024, 2999]:
            if four:
                raw = np.frombuffer(b, np.uint8, 16 * -(-DIMS // 32), lay.code(s))
                i = np.arange(DIMS)
                at = 16 * (i // 32) + i % 16
                codes = np.where(i % 32 < 16, raw[at] & 15, raw[at] >> 4).astype(np.float64)
            else:
                codes = np.frombuffer(b, np.uint8, DIMS, lay.code(s)).astype(np.float64)
            sid = id_of[s]
            err = np.abs(offset + step * codes - data[sid])
            inside = (data[sid] >= offset) & (data[sid] <= offset + top * step)
            # values beyond the range (4-bit ranges end at the 0.99 quantiles) clipped to its ends
            x = data[sid]
            assert (codes[x < offset - step / 2] == 0).all(), f"slot {s}: clipped low"
            assert (codes[x > offset + (top + 0.5) * step] == top).all(), f"slot {s}: clipped high"
            assert (err[inside] <= step[inside] * 0.5 + 1e-6).all(), f"codes of slot {s}"


def upper_node(pristine, avoid=()) -> int | None:
    """A slot of level >= 1 (not the entry point, nor deleted), whose lists live in a heap chunk."""
    b, lay = pristine["bytes"], pristine["layout"]
    for s in range(N):
        if s in avoid or s == pristine["cur"].entry or pristine["id_of"][s] in DELETED:
            continue
        upper = struct.unpack_from("<Q", b, lay.slot_header(s) + 8)[0]
        if upper != NO_UPPER:
            return s
    return None


# --------------------------------------------------------------------------- the child
CHILD = r"""
import json, sys, warnings
import numpy as np
import chassis

path, qfile, out = sys.argv[1], sys.argv[2], sys.argv[3]
probe = json.loads(sys.argv[4])
queries = np.load(qfile)
result = {}
for mode in ("reader", "writer"):
    r = {"errors": []}
    ix = None
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        try:
            ix = chassis.IndexReader(path) if mode == "reader" else chassis.VectorIndex(path)
        except Exception as e:
            r["open_error"] = [type(e).__name__, str(e), getattr(e, "filename", None)]
    r["warnings"] = [[x.category.__name__, str(x.message)] for x in w]
    result[mode] = r
    if ix is None:
        continue

    def step(name, f):
        try:
            return f()
        except Exception as e:
            r["errors"].append([name, type(e).__name__, str(e)])
            return None

    r["len"] = step("len", lambda: len(ix))
    ids = step("ids", ix.ids)
    r["ids"] = None if ids is None else ids.tolist()
    r["deleted"] = step("deleted_count", ix.deleted_count)
    r["user_version"] = step("user_version", lambda: ix.user_version)
    c = step("check", ix.check)
    r["check"] = None if c is None else dict(unreachable=c.unreachable, not_finite=c.not_finite, corrupt=c.corrupt)
    # get(): every listed id, plus the probes
    get_err, vecs = {}, []
    for i in (r["ids"] or []) + [p for p in probe if p not in set(r["ids"] or [])]:
        try:
            v = ix.get(int(i))
            if i in set(r["ids"] or []):
                vecs.append(np.full(ix.dimensions, np.nan, np.float32) if v is None else v)
            elif v is not None:
                get_err[str(i)] = "not None for an id not in ids()"
        except Exception as e:
            get_err[str(i)] = type(e).__name__
            vecs.append(np.full(ix.dimensions, np.nan, np.float32))
    r["get_errors"] = get_err
    r["contains"] = {str(p): step("contains", lambda p=p: p in ix) for p in probe}
    n = max(r["len"] or 0, len(r["ids"] or []), 10)
    searches = {}
    for tag, kw in (("default", {}), ("exact", {"ef": n}), ("small_ef", {"ef": 10})):
        res = []
        for qi, q in enumerate(queries):
            hits = step(f"search {tag} {qi}", lambda q=q: ix.search(q, 10, **kw))
            res.append(None if hits is None else [[h.id, h.distance] for h in hits])
        searches[tag] = res
        b = step(f"search_batch {tag}", lambda: ix.search_batch(queries, 10, **kw))
        searches["batch_" + tag] = None if b is None else [b[0].tolist(), b[1].tolist()]
    allowed = list(probe) + list(range(0, 3000, 7))
    res = []
    for qi, q in enumerate(queries):
        hits = step(f"filtered {qi}", lambda q=q: ix.search(q, 10, allowed=allowed, excluded=[1, 2]))
        res.append(None if hits is None else [h.id for h in hits])
    searches["filtered"] = res
    searches["filtered_allowed"] = allowed
    r["searches"] = searches
    np.save(out + "." + mode + ".npy", np.stack(vecs) if vecs else np.empty((0, 16), np.float32))
    step("close", ix.close)
print(json.dumps(result))
"""


@dataclass
class Case:
    name: str
    flips: list  # (offset, xor mask)
    kind: str  # "header", "both", "slot"
    slot: int | None = None  # the damaged slot (check().corrupt names slots)
    id: int | None = None  # the id it holds
    copy: int | None = None  # the damaged header copy
    hidden: tuple = ()  # ids no longer listed (header / marker damage)
    bad_vector: bool = False  # get() of the slot's id raises CorruptIndexError
    error: str | None = None  # for "both": the expected exception


def make_cases(p) -> list[Case]:
    lay, cur = p["layout"], p["cur"]
    cases = []
    for c in (0, 1):
        base = c * HEADER_COPY
        which = "newest" if c == cur.copy else "older"
        for fld, off, mask in (
            ("magic", 0, 0x20),
            ("version", 8, 0x02),
            ("seq", 16, 0x01),
            ("slot count", 48, 0x04),
            ("checksum", cur.body, 0x80),
        ):
            cases.append(
                Case(f"header copy {c} ({which}) {fld}", [(base + off, mask)], "header", copy=c)
            )
    cases += [
        Case(
            "both copies seq",
            [(16, 0x01), (HEADER_COPY + 16, 0x01)],
            "both",
            error="CorruptIndexError",
        ),
        Case(
            "both copies version",
            [(8, 0x02), (HEADER_COPY + 8, 0x02)],
            "both",
            error="CorruptIndexError",
        ),
        Case(
            "both copies slot count and checksum",
            [(48, 0x10), (HEADER_COPY + cur.body + 3, 0x01)],
            "both",
            error="CorruptIndexError",
        ),
        Case(
            "both copies magic", [(0, 0x20), (HEADER_COPY, 0x20)], "both", error="NotAnIndexError"
        ),
    ]
    up = upper_node(p)
    up2 = upper_node(p, avoid=(up,))
    entry = cur.entry
    S, ID = p["slot_of"], p["id_of"]

    def at(name, offset_of, id_, mask, off=0, **kw):
        """Damage the slot that holds id_."""
        slot = S[id_]
        return Case(name, [(offset_of(slot) + off, mask)], "slot", slot=slot, id=id_, **kw)

    def at_slot(name, offset, slot, mask, **kw):
        return Case(name, [(offset, mask)], "slot", slot=slot, id=ID[slot], **kw)

    cases += [
        # slot headers: word 0 is the id (100 ^ 0x40 = 36, an id in use elsewhere)
        at("slot header id low byte", lay.slot_header, 100, 0x40, hidden=(100,)),
        at("slot header id high byte", lay.slot_header, 1100, 0x01, off=5, hidden=(1100,)),
        at("slot header checksum word", lay.slot_header, 101, 0x01, off=28, hidden=(101,)),
        # vectors
        at("vector exponent byte", lay.vector, 1234, 0x01, off=3, bad_vector=True),
        at("vector in segment 0", lay.vector, 10, 0x10, off=17, bad_vector=True),
        # level-0 records: word 0 count | level << 16, word 1 crc, then neighbor slots
        at("level-0 neighbor entry", lay.l0, 2100, 0x01, off=8),
        at("level-0 neighbor entry out of range", lay.l0, 2104, 0x40, off=8 + 3),
        at("level-0 count", lay.l0, 2101, 0x01),
        at("level-0 count far too large", lay.l0, 2102, 0xFF, off=1),
        at("level-0 level byte", lay.l0, 2103, 0x08, off=2),
        at("level-0 list checksum", lay.l0, 700, 0x01, off=4),
        at_slot("entry point's level-0 neighbor entry", lay.l0(entry) + 8, entry, 0x01),
        # upper lists in a heap chunk: count, crc, M neighbor slots per layer
        at_slot("heap upper-list neighbor entry", lay.upper_list(_upper(p, up), 1) + 8, up, 0x01),
        at_slot("heap upper-list count", lay.upper_list(_upper(p, up2), 1), up2, 0x01),
        at_slot(
            "entry point's upper-list entry", lay.upper_list(_upper(p, entry), 1) + 12, entry, 0x02
        ),
        # delete markers (slot header word 2)
        at("delete marker of a deleted slot", lay.slot_header, 1500, 0x01, off=16),
        at("delete marker of a deleted slot, seq bits", lay.slot_header, 2500, 0x01, off=16 + 3),
        at("delete marker of a live slot", lay.slot_header, 777, 0x10, off=16 + 3, hidden=(777,)),
    ]
    if lay.codes:
        cases += [
            # a code is checked against its vector's encoding, and never gives a distance
            at("code byte", lay.code, 1300, 0x80, off=5),
            # the ranges of every code: both commits name the same quantizer region
            Case(
                "quantizer range",
                [(cur.quantizer + 8 + 4, 0x01)],
                "both",
                error="CorruptIndexError",
            ),
        ]
    return cases


def _upper(p, slot: int) -> int:
    ref = struct.unpack_from("<Q", p["bytes"], p["layout"].slot_header(slot) + 8)[0]
    assert ref != NO_UPPER, f"slot {slot} has no upper layers"
    return ref


def damage(p, case: Case, dest: Path) -> Path:
    b = bytearray(p["bytes"])
    for off, mask in case.flips:
        b[off] ^= mask
    dest.write_bytes(bytes(b))
    return dest


def run_child(p, path: Path, queries: np.ndarray, probe: list[int], workdir: Path) -> dict:
    qfile = workdir / "queries.npy"
    np.save(qfile, queries)
    out = workdir / "vecs"
    proc = run_python(CHILD, path, qfile, out, json.dumps(probe), timeout=300)
    assert proc.returncode >= 0, (
        f"the child died: {describe_returncode(proc.returncode)}\n--- stderr ---\n{proc.stderr[-4000:]}"
    )
    assert proc.returncode == 0, (
        f"the child failed: exit code {proc.returncode}\n{proc.stderr[-4000:]}"
    )
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    for mode in ("reader", "writer"):
        f = Path(f"{out}.{mode}.npy")
        if f.exists():
            res[mode]["vecs"] = np.load(f)
    return res


def check_state(
    r: dict, p, ids: list[int], uv: int, queries: np.ndarray, what: str, *, skip_vec=()
) -> None:
    """The opened file holds exactly ``ids`` (the ids of a commit), vectors bit-identical."""
    data = p["data"]
    assert r["errors"] == [], f"{what}: calls failed: {r['errors'][:5]}"
    assert r["ids"] == ids, (
        f"{what}: ids() differ from the expected commit: missing {sorted(set(ids) - set(r['ids']))[:10]}, "
        f"extra {sorted(set(r['ids']) - set(ids))[:10]}"
    )
    assert r["user_version"] == uv, f"{what}: user_version {r['user_version']}, expected {uv}"
    ok = [j for j, i in enumerate(ids) if i not in skip_vec]
    assert_bit_identical(r["vecs"][ok], data[np.array(ids)[ok]], f"{what}: vectors")
    keep = np.array([i for i in ids if i not in skip_vec])
    for qi, q in enumerate(queries):
        hits = r["searches"]["exact"][qi]
        got = [h for h in hits if h[0] not in skip_vec]
        assert_exact_knn(
            [h[0] for h in got],
            [h[1] for h in got],
            data[keep],
            keep,
            q,
            len(got) if skip_vec else 10,
            "euclidean",
            context=f"{what}: exact search, query {qi}",
        )


def check_searches(r: dict, visible: set[int], what: str) -> None:
    """Every search returned results without error, only ids that are listed."""
    s = r["searches"]
    for tag in ("default", "exact", "small_ef"):
        for qi, hits in enumerate(s[tag]):
            assert hits is not None, f"{what}: search {tag} failed"
            ids = [h[0] for h in hits]
            assert len(ids) == 10, f"{what}: search ({tag}) query {qi} returned {len(ids)} results"
            assert set(ids) <= visible, (
                f"{what}: search ({tag}) returned unlisted ids {set(ids) - visible}"
            )
            assert len(set(ids)) == len(ids)
        b = s["batch_" + tag]
        assert b is not None, f"{what}: search_batch {tag} failed"
        assert [row for row in b[0]] == [[h[0] for h in hits] for hits in s[tag]], (
            f"{what}: search_batch ({tag}) differs from a loop of search"
        )
    allowed = set(s["filtered_allowed"]) - {1, 2}
    for qi, ids in enumerate(s["filtered"]):
        assert ids is not None and len(ids) == 10, f"{what}: filtered search query {qi}: {ids}"
        assert set(ids) <= allowed & visible, (
            f"{what}: filtered search returned {set(ids) - (allowed & visible)}"
        )


def queries_for(p, case: Case) -> np.ndarray:
    q = clustered_data(4, DIMS, seed=31, sample_seed=4242)
    if case.id is not None:
        q = np.concatenate([q, p["data"][case.id][None, :]])  # the damaged slot's own vector
    return np.ascontiguousarray(q, dtype=np.float32)


# --------------------------------------------------------------------------- the tests
def _cases():
    # built lazily from the pristine file; parametrize by name through an index into the list
    return [
        *(
            f"header copy {c} {f}"
            for c in (0, 1)
            for f in ("magic", "version", "seq", "slot count", "checksum")
        ),
        "both copies seq",
        "both copies version",
        "both copies slot count and checksum",
        "both copies magic",
        "slot header id low byte",
        "slot header id high byte",
        "slot header checksum word",
        "vector exponent byte",
        "vector in segment 0",
        "level-0 neighbor entry",
        "level-0 neighbor entry out of range",
        "level-0 count",
        "level-0 count far too large",
        "level-0 level byte",
        "level-0 list checksum",
        "entry point's level-0 neighbor entry",
        "heap upper-list neighbor entry",
        "heap upper-list count",
        "entry point's upper-list entry",
        "delete marker of a deleted slot",
        "delete marker of a deleted slot, seq bits",
        "delete marker of a live slot",
        *CODE_CASES,
    ]


# Cases of the index with 8-bit codes only.
CODE_CASES = ("code byte", "quantizer range")


def find_case(p, name: str) -> Case:
    for c in make_cases(p):
        short = c.name.replace(" (newest)", "").replace(" (older)", "")
        if short == name:
            return c
    raise KeyError(name)


# One case of each kind runs in the fast subset (`-m "not slow"`); the whole matrix in a full run.
FAST_CASES = {
    "header copy 0 checksum",
    "both copies magic",
    "slot header checksum word",
    "vector in segment 0",
    "level-0 list checksum",
    "delete marker of a live slot",
    "code byte",
}


@pytest.mark.parametrize(
    "pristine,name",
    [
        pytest.param(
            v,
            n,
            marks=() if n in FAST_CASES else pytest.mark.slow,
            id=f"{v}-" + n.replace(" ", "-").replace("'", "").replace(",", ""),
        )
        for v in VARIANTS
        for n in _cases()
        # the codes' cases exist only where there are codes
        if v != "plain" or n not in CODE_CASES
    ],
    indirect=["pristine"],
)
def test_damaged_file(pristine, tmp_path, name):
    p = pristine
    case = find_case(p, name)
    path = damage(p, case, tmp_path / "damaged.chassis")
    queries = queries_for(p, case)
    cur_ids = p["states"][p["cur"].copy]["ids"]
    probe = sorted({case.id} | set(DELETED) | {36}) if case.id is not None else sorted(set(DELETED))
    res = run_child(p, path, queries, probe, tmp_path)

    for mode in ("reader", "writer"):
        r = res[mode]
        what = f"{case.name}, opened as {mode}"
        if case.kind == "both":
            assert "open_error" in r, f"{what}: opened although both header copies are damaged"
            assert r["open_error"][0] == case.error, (
                f"{what}: {r['open_error']}, expected {case.error}"
            )
            if case.error == "CorruptIndexError":  # an OSError: it names the file
                assert r["open_error"][2] == str(path), f"{what}: filename {r['open_error'][2]}"
                assert not r["open_error"][1].startswith("[Errno"), f"{what}: {r['open_error']}"
            continue
        assert "open_error" not in r, f"{what}: could not open: {r.get('open_error')}"
        runtime = [m for cat, m in r["warnings"] if cat == "RuntimeWarning"]
        if case.kind == "header":
            other = 1 - case.copy
            assert any(f"header copy {case.copy}" in m for m in runtime), (
                f"{what}: no RuntimeWarning naming header copy {case.copy}: {r['warnings']}"
            )
            state = p["states"][other]
            assert r["len"] == len(state["ids"]) == len(r["ids"]), (
                f"{what}: len() {r['len']}, ids() {len(r['ids'])}, commit {state['seq']} holds {len(state['ids'])}"
            )
            check_state(r, p, state["ids"], state["user_version"], queries, what)
            assert r["check"]["corrupt"] == [] and r["check"]["not_finite"] == [], (
                f"{what}: {r['check']}"
            )
            assert r["get_errors"] == {}, f"{what}: {r['get_errors']}"
            check_searches(r, set(state["ids"]), what)
            continue
        # slot-level damage
        assert runtime == [], f"{what}: unexpected warnings {r['warnings']}"
        assert r["check"] is not None, f"{what}: check() failed: {r['errors']}"
        assert r["check"]["corrupt"] == [case.slot], (
            f"{what}: check().corrupt = {r['check']['corrupt']}, expected [{case.slot}] (the damaged slot)"
        )
        ids = [i for i in cur_ids if i not in case.hidden]
        visible = set(ids)
        if case.bad_vector:
            assert r["get_errors"] == {str(case.id): "CorruptIndexError"}, (
                f"{what}: get() errors {r['get_errors']}, expected CorruptIndexError for id {case.id} only"
            )
        else:
            assert r["get_errors"] == {}, f"{what}: get() errors {r['get_errors']}"
        for h in case.hidden:
            assert r["contains"][str(h)] is False, (
                f"{what}: the damaged slot's id {h} is still listed"
            )
        for d in DELETED:
            assert r["contains"][str(d)] is False, f"{what}: deleted id {d} came back"
        assert r["contains"].get("36", False) is True or 36 not in visible
        assert r["errors"] == [], f"{what}: calls failed: {r['errors'][:5]}"
        assert r["ids"] == ids, (
            f"{what}: ids() missing {sorted(visible - set(r['ids']))[:10]}, extra {sorted(set(r['ids']) - visible)[:10]}"
        )
        assert r["user_version"] == USER_VERSION
        check_searches(r, visible, what)
        skip = (case.id,) if case.bad_vector else ()
        check_state(r, p, ids, USER_VERSION, queries, what, skip_vec=skip)


@pytest.mark.parametrize("pristine", VARIANTS, indirect=True)
def test_search_never_returns_a_vector_that_fails_its_checksum(pristine, tmp_path):
    """check()'s documentation (chassis/_check.py): corrupt slots are skipped by searches. A
    vector with one low mantissa bit flipped is still its own query's nearest neighbour, so an
    exact search returns it unless the search skips it."""
    p = pristine
    s = 1234  # the id; its slot is found from the slot headers
    slot = p["slot_of"][s]
    case = Case(
        "vector low bit",
        [(p["layout"].vector(slot), 0x01)],
        "slot",
        slot=slot,
        id=s,
        bad_vector=True,
    )
    path = damage(p, case, tmp_path / "damaged.chassis")
    queries = queries_for(p, case)
    res = run_child(p, path, queries, [s], tmp_path)
    for mode in ("reader", "writer"):
        r = res[mode]
        assert r["check"]["corrupt"] == [slot]
        assert r["get_errors"] == {str(s): "CorruptIndexError"}
        for tag in ("exact", "default", "batch_exact"):
            rows = r["searches"][tag] if not tag.startswith("batch") else r["searches"][tag][0]
            last = rows[-1]  # the query is the damaged slot's original vector
            ids = [h[0] for h in last] if not tag.startswith("batch") else last
            assert s not in ids, (
                f"{mode}: search ({tag}) returned id {s}, whose stored vector fails its checksum "
                f"(get({s}) raises CorruptIndexError): {last[:3]}"
            )


def test_a_walk_that_checks_no_marker_never_returns_a_hidden_slot(tmp_path):
    """With no row deleted a walk checks no node's delete marker. A live slot whose marker is
    damaged (hidden from then on) that a walk meets anyway is never returned, and the results
    stay full: the walk runs again, checking. Oracle: brute force over the other rows."""
    from chassis import IndexReader
    from conftest import brute_force_knn, recall_at_k

    n, base, victim = 2000, 10**12, 777
    data = clustered_data(n, DIMS, seed=3)
    ids = np.arange(base, base + n, dtype=np.uint64)
    path = tmp_path / "hidden.chassis"
    with VectorIndex(path, DIMS) as ix:
        ix.add_batch(data, ids=ids)
        ix.flush()
    raw = bytearray(path.read_bytes())
    # The slot header is [id, upper, marker, checksums]: flip a bit of the victim's marker.
    at = raw.find(struct.pack("<Q", base + victim))
    assert at >= 0 and raw.find(struct.pack("<Q", base + victim), at + 1) < 0
    assert raw[at + 16 : at + 24] == bytes(8), "the victim's marker is not that of a live row"
    raw[at + 16 + 3] ^= 0x10
    path.write_bytes(raw)
    keep = np.arange(n) != victim
    queries = data[victim - 10 : victim + 10]
    truth, _ = brute_force_knn(data[keep], queries, 10, "euclidean", ids=ids[keep])
    for kind in (VectorIndex, IndexReader):
        with kind(path) as ix:
            got, _ = ix.search_batch(queries, 10, ef=16)
            got = np.asarray(got)
            assert base + victim not in got, f"{kind.__name__} returned the hidden row"
            assert set(got.ravel().tolist()) <= set(ids[keep].tolist()), (
                f"{kind.__name__}: fewer than 10 results, or ids not stored"
            )
            assert recall_at_k(got, truth) >= 0.9, kind.__name__
