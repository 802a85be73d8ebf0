"""The file's header copies as docs/format.md lays them out, read with `struct` (an oracle
independent of the Rust reader), for the tests that read or damage index files directly."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

HEADER_COPY = 64 * 1024
NO_UPPER = 2**64 - 1  # a slot header's upper-lists reference for a node of level 0


def align_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


@dataclass
class Header:
    copy: int
    version: int
    body: int
    seq: int
    slots: int
    live: int
    next_id: int
    entry: int
    top: int
    user_version: int
    regions: list = field(default_factory=list)  # (kind, used, offset, length)
    quantization: int = 0  # byte 30 (version 2): 1 = int8 codes, 2 = int4
    quantizer: int = 0  # bytes 96..104: file offset of the quantizer region in effect
    dims: int = 0  # bytes 24..28
    precision: int = 1  # byte 29: 1 full (f32), 2 half (f16), 3 int8 codes only
    m: int = 0  # bytes 32..36: max_connections


def parse_header(b: bytes, copy: int) -> Header:
    o = copy * HEADER_COPY
    magic, version, body, seq = struct.unpack_from("<8sIIQ", b, o)
    assert magic == b"CHASSIS\x1a"
    slots, live, next_id, entry, top, uv, nreg = struct.unpack_from("<QQQIIQI", b, o + 48)
    regions = [struct.unpack_from("<IIQQ", b, o + 128 + 24 * r) for r in range(nreg)]
    quantization = b[o + 30]
    quantizer = struct.unpack_from("<Q", b, o + 96)[0]
    (dims,), precision, (m,) = (
        struct.unpack_from("<I", b, o + 24),
        b[o + 29],
        struct.unpack_from("<I", b, o + 32),
    )
    return Header(
        copy,
        version,
        body,
        seq,
        slots,
        live,
        next_id,
        entry,
        top,
        uv,
        regions,
        quantization,
        quantizer,
        dims,
        precision,
        m,
    )


def current_header(b: bytes) -> Header:
    """The copy with the higher commit sequence number (checksums not checked)."""
    return max((parse_header(b, c) for c in (0, 1)), key=lambda h: h.seq)


class Layout:
    """Offsets of one slot's code, vector, header and level-0 record, and of upper lists, in
    the index whose header is `h` (its dimensions, precision and M)."""

    def __init__(self, h: Header):
        # Full or half precision, and codes in one 64-byte row (at most 64 dimensions): what
        # the tests use. Codes only, and the codes' padding to 2 MiB once a segment's vectors
        # fill that much, are not written here.
        assert h.precision in (1, 2) and (h.quantization not in (1, 2) or h.dims <= 64), h
        self.h = h
        size = h.dims * (4 if h.precision == 1 else 2)
        # Rounded up to 64 bytes; a vector under 64 bytes takes the next power of two.
        self.stride = align_up(size, 64) if size >= 64 else max(4, 1 << (size - 1).bit_length())
        self.l0_words = 2 + 2 * h.m
        self.upper_words = 2 + h.m
        self.segments = [r for r in h.regions if r[0] == 1]
        self.heaps = [r for r in h.regions if r[0] == 2]
        # 8-bit codes (or 4-bit), each in a 64-byte row at the dimensions the tests use: a
        # codes area ahead of the vectors
        self.codes = h.quantization in (1, 2)
        self.code_stride = 64 if self.codes else 0

    @staticmethod
    def locate(slot: int) -> tuple[int, int]:
        """(segment, index in it): segment k holds 1024 << k slots (the cap is far away here)."""
        k, first = 0, 0
        while slot >= first + (1024 << k):
            first += 1024 << k
            k += 1
        return k, slot - first

    def areas(self, k: int) -> tuple[int, int, int, int]:
        """Segment k's file offset and its vectors', headers' and level-0 records' offsets in
        it: [codes | vectors | headers | l0], the codes area empty without codes."""
        off, n = self.segments[k][2], 1024 << k
        vectors = align_up(n * self.code_stride, 4096)
        headers = align_up(vectors + n * self.stride, 4096)
        l0 = align_up(headers + n * 32, 4096)
        return off, vectors, headers, l0

    def _seg(self, slot: int):
        k, i = self.locate(slot)
        return (i, *self.areas(k))

    def code(self, slot: int) -> int:
        assert self.codes
        i, off, _, _, _ = self._seg(slot)
        return off + i * self.code_stride

    def vector(self, slot: int) -> int:
        i, off, vectors, _, _ = self._seg(slot)
        return off + vectors + i * self.stride

    def slot_header(self, slot: int) -> int:
        i, off, _, headers, _ = self._seg(slot)
        return off + headers + i * 32

    def l0(self, slot: int) -> int:
        i, off, _, _, l0 = self._seg(slot)
        return off + l0 + i * self.l0_words * 4

    def upper_list(self, ref: int, layer: int) -> int:
        chunk, byte = ref >> 40, ref & ((1 << 40) - 1)
        return self.heaps[chunk][2] + byte + (layer - 1) * self.upper_words * 4
