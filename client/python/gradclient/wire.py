"""The gradient header (spec section 2): 20 bytes, every field big-endian; lanes little-endian.

Parse and emit only; no I/O here.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

#: Header layout: version/flags, op_type, collective_id, dtype, reason, worker_rank,
#: tensor_offset, data_length, round.
HEADER = struct.Struct(">BBHBBHIII")
#: Header length in bytes.
HEADER_LEN = HEADER.size
assert HEADER_LEN == 20

VERSION = 1

# Flags (low nibble of byte 0).
FLAG_RESULT = 0x1
FLAG_RETRANSMIT = 0x2
FLAG_NAK = 0x4
#: A worker asks a slot's state; the STATUS answer carries it with RESULT (section 7, revision 1.1).
FLAG_PROBE = 0x8

# STATUS states (the `reason` byte of a STATUS, spec section 7).
#: No history: the first contribution sets the round; round field 0.
STATE_NO_HISTORY = 0
#: Round r in progress, the prober's contribution missing; round field r.
STATE_WITHOUT_RANK = 1
#: Round r in progress, the prober's contribution in; round field r.
STATE_WITH_RANK = 2
#: Round r completed, none in progress; round field r + 1.
STATE_COMPLETED = 3

#: worker_rank on RESULT and NAK packets.
RANK_APPLIANCE = 0xFFFF

#: The default `gradient_udp_port` (0xC0DE).
DEFAULT_UDP_PORT = 49374

OPS = {"sum": 1, "max": 2, "min": 3}

#: dtype name -> (wire code, bytes per lane, numpy dtype string of the wire lanes).
DTYPES = {
    "f32": (1, 4, "<f4"),
    "f16": (2, 2, "<f2"),
    "bf16": (3, 2, "<u2"),  # bit patterns
    "i32": (4, 4, "<i4"),
}

#: NAK reason codes (spec section 5), in words.
NAK_REASONS = {
    1: "unknown collective",
    2: "bad version",
    3: "op/dtype/carriage mismatch",
    4: "bad rank",
    5: "not the rank's member",
    6: "bad length or offset",
    7: "stale or premature round",
}
NAK_STALE_ROUND = 7

ROUND_MOD = 1 << 32


@dataclass(frozen=True)
class Header:
    """One gradient header, fields as the spec's table names them."""

    op_type: int
    collective_id: int
    dtype: int
    worker_rank: int
    tensor_offset: int
    data_length: int
    round: int
    flags: int = 0
    reason: int = 0
    version: int = VERSION

    def pack(self) -> bytes:
        """The 20 header bytes."""
        return HEADER.pack(
            (self.version << 4) | (self.flags & 0xF),
            self.op_type,
            self.collective_id,
            self.dtype,
            self.reason,
            self.worker_rank,
            self.tensor_offset,
            self.data_length,
            self.round,
        )

    @classmethod
    def unpack(cls, buf, offset: int = 0) -> "Header":
        """Parses the first 20 bytes of `buf` at `offset`; ValueError when fewer are present."""
        if len(buf) - offset < HEADER_LEN:
            raise ValueError(f"gradient header needs {HEADER_LEN} bytes, got {len(buf) - offset}")
        vf, op, cid, dt, reason, rank, off, dlen, rnd = HEADER.unpack_from(buf, offset)
        return cls(
            op_type=op,
            collective_id=cid,
            dtype=dt,
            worker_rank=rank,
            tensor_offset=off,
            data_length=dlen,
            round=rnd,
            flags=vf & 0xF,
            reason=reason,
            version=vf >> 4,
        )


def probe_len(num_workers: int) -> int:
    """Bytes of a PROBE's payload and of its STATUS's rank bitmap: ceil(num_workers / 8)."""
    return (num_workers + 7) // 8


def nak_reason_text(reason: int) -> str:
    """A NAK reason code in words."""
    return NAK_REASONS.get(reason, f"unknown reason {reason}")
