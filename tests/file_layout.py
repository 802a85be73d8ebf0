"""The file's header copies as docs/format.md lays them out, read with `struct` (an oracle
independent of the Rust reader), for the tests that read or damage index files directly."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

HEADER_COPY = 64 * 1024


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


def parse_header(b: bytes, copy: int) -> Header:
    o = copy * HEADER_COPY
    magic, version, body, seq = struct.unpack_from("<8sIIQ", b, o)
    assert magic == b"CHASSIS\x1a"
    slots, live, next_id, entry, top, uv, nreg = struct.unpack_from("<QQQIIQI", b, o + 48)
    regions = [struct.unpack_from("<IIQQ", b, o + 128 + 24 * r) for r in range(nreg)]
    quantization = b[o + 30]
    quantizer = struct.unpack_from("<Q", b, o + 96)[0]
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
    )


def current_header(b: bytes) -> Header:
    """The copy with the higher commit sequence number (checksums not checked)."""
    return max((parse_header(b, c) for c in (0, 1)), key=lambda h: h.seq)
