//! The 20-byte gradient header (gradient protocol spec section 2), carried after UDP (destination
//! port `gradient_udp_port`) or after BTH + DETH of a RoCEv2 UD SEND Only (spec section 1).
//!
//! ```text
//!  0  version(4 high) | flags(4 low)   RESULT 0x1, RETRANSMIT 0x2, NAK 0x4, PROBE 0x8
//!  1  op_type
//!  2  collective_id (2)
//!  4  dtype
//!  5  reason
//!  6  worker_rank (2)
//!  8  tensor_offset (4)   elements
//! 12  data_length (4)     bytes of payload after the header
//! 16  round (4)
//! 20  payload: lanes, little-endian
//! ```
//!
//! All fields are big-endian. This view only checks that 20 bytes are present: whether the
//! version, op, dtype, rank, offset and lengths are acceptable is the aggregator's call (spec
//! section 4 rule 5), since each refusal there has its own NAK reason.

use super::error::WireError;
use super::{be16, be32, put_be16, put_be32, Field};

pub(crate) mod field {
    use super::Field;
    pub const VER_FLAGS: usize = 0;
    pub const OP_TYPE: usize = 1;
    pub const COLLECTIVE_ID: Field = 2..4;
    pub const DTYPE: usize = 4;
    pub const REASON: usize = 5;
    pub const WORKER_RANK: Field = 6..8;
    pub const TENSOR_OFFSET: Field = 8..12;
    pub const DATA_LENGTH: Field = 12..16;
    pub const ROUND: Field = 16..20;
}

/// Length of the gradient header (bytes).
pub const HEADER_LEN: usize = 20;
/// The protocol version this header layout is (spec: 1).
pub const VERSION: u8 = 1;
/// Default UDP destination port of the UDP carriage (spec section 1: 49374, 0xC0DE).
pub const DEFAULT_UDP_PORT: u16 = 0xC0DE;
/// `worker_rank` of RESULT and NAK packets.
pub const RANK_NONE: u16 = 0xffff;

/// Flag bits (the low nibble of byte 0).
#[derive(Debug, Clone, Copy)]
pub struct Flags;

impl Flags {
    /// On packets the aggregator emits.
    pub const RESULT: u8 = 0x1;
    /// A worker resending a contribution (informational).
    pub const RETRANSMIT: u8 = 0x2;
    /// The aggregator refuses a contribution (spec section 5).
    pub const NAK: u8 = 0x4;
    /// A worker asks a slot's state (spec section 7, revision 1.1; reserved before); the
    /// aggregator's STATUS answer carries it with [`Flags::RESULT`].
    pub const PROBE: u8 = 0x8;
}

/// NAK reason codes: the `reason` byte of a NAK (spec section 5; rule 5 of section 4 says which
/// refusal gets which).
#[derive(Debug, Clone, Copy)]
pub struct NakReason;

impl NakReason {
    /// 1: unknown collective.
    pub const UNKNOWN_COLLECTIVE: u8 = 1;
    /// 2: version other than 1.
    pub const BAD_VERSION: u8 = 2;
    /// 3: op, dtype or carriage other than the collective's (or an unknown op or dtype).
    pub const MISMATCH: u8 = 3;
    /// 4: rank >= num_workers.
    pub const BAD_RANK: u8 = 4;
    /// 5: a source other than the rank's member (anti-spoofing).
    pub const NOT_MEMBER: u8 = 5;
    /// 6: bad data_length or tensor_offset (for a PROBE: a length other than
    /// ceil(num_workers / 8), or an offset no contribution could carry).
    pub const BAD_LENGTH_OR_OFFSET: u8 = 6;
    /// 7: stale or premature round; the NAK's `round` holds the slot's expected round (rule 4).
    pub const STALE_ROUND: u8 = 7;

    /// Reason code `code`'s name, snake_case (`stale_round`), or `unknown` for a code other
    /// than 1 to 7.
    pub fn name(code: u8) -> &'static str {
        match code {
            Self::UNKNOWN_COLLECTIVE => "unknown_collective",
            Self::BAD_VERSION => "bad_version",
            Self::MISMATCH => "mismatch",
            Self::BAD_RANK => "bad_rank",
            Self::NOT_MEMBER => "not_member",
            Self::BAD_LENGTH_OR_OFFSET => "bad_length_or_offset",
            Self::STALE_ROUND => "stale_round",
            _ => "unknown",
        }
    }
}

/// Slot states: the `reason` byte of a STATUS, the answer to a PROBE (spec section 7).
#[derive(Debug, Clone, Copy)]
pub struct SlotState;

impl SlotState {
    /// 0: no history; the first contribution sets the round (rule 4). STATUS round 0.
    pub const NO_HISTORY: u8 = 0;
    /// 1: round r in progress, the prober's contribution missing. STATUS round r.
    pub const IN_PROGRESS_WITHOUT_RANK: u8 = 1;
    /// 2: round r in progress, the prober's contribution in (wait for r's result). STATUS
    /// round r.
    pub const IN_PROGRESS_WITH_RANK: u8 = 2;
    /// 3: round r completed, none in progress; r's result is kept (rule 3). STATUS round r + 1.
    pub const COMPLETED: u8 = 3;
}

/// Bytes of a PROBE's payload and of its STATUS's rank bitmap for `num_workers` workers:
/// ceil(num_workers / 8) (spec section 7).
#[inline]
pub const fn probe_len(num_workers: usize) -> usize {
    num_workers.div_ceil(8)
}

/// Reduction operation of a collective (`op_type`, section 2; the `op` key of section 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Op {
    /// ALL_REDUCE_SUM, wire code 1.
    Sum = 0x01,
    /// ALL_REDUCE_MAX, wire code 2: IEEE 754-2019 `maximum` for floats, signed max for i32.
    Max = 0x02,
    /// ALL_REDUCE_MIN, wire code 3: IEEE 754-2019 `minimum` for floats, signed min for i32.
    Min = 0x03,
}

impl Op {
    /// Every op, in wire-code order.
    pub const ALL: [Op; 3] = [Op::Sum, Op::Max, Op::Min];

    /// The op with header code `v` (section 2), or `None` for an unknown one.
    pub const fn from_wire(v: u8) -> Option<Op> {
        match v {
            0x01 => Some(Op::Sum),
            0x02 => Some(Op::Max),
            0x03 => Some(Op::Min),
            _ => None,
        }
    }

    /// The header code of this op (section 2): 1 sum, 2 max, 3 min.
    pub const fn wire(self) -> u8 {
        self as u8
    }

    /// The config name (section 3): `"sum"`, `"max"`, `"min"`.
    pub const fn name(self) -> &'static str {
        match self {
            Op::Sum => "sum",
            Op::Max => "max",
            Op::Min => "min",
        }
    }

    /// The op whose config name (section 3) is `name`, or `None`.
    pub fn from_name(name: &str) -> Option<Op> {
        Op::ALL.into_iter().find(|o| o.name() == name)
    }
}

/// Element type of a collective's lanes (`dtype`, section 2; the `dtype` key of section 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Dtype {
    /// IEEE binary32, wire code 1, 4 bytes.
    F32 = 0x01,
    /// IEEE binary16, wire code 2, 2 bytes.
    F16 = 0x02,
    /// bfloat16 (the top half of a binary32), wire code 3, 2 bytes.
    Bf16 = 0x03,
    /// Two's-complement 32-bit integer, wire code 4, 4 bytes.
    I32 = 0x04,
}

impl Dtype {
    /// Every dtype, in wire-code order.
    pub const ALL: [Dtype; 4] = [Dtype::F32, Dtype::F16, Dtype::Bf16, Dtype::I32];

    /// The dtype with header code `v` (section 2), or `None` for an unknown one.
    pub const fn from_wire(v: u8) -> Option<Dtype> {
        match v {
            0x01 => Some(Dtype::F32),
            0x02 => Some(Dtype::F16),
            0x03 => Some(Dtype::Bf16),
            0x04 => Some(Dtype::I32),
            _ => None,
        }
    }

    /// The header code of this dtype (section 2): 1 f32, 2 f16, 3 bf16, 4 i32.
    pub const fn wire(self) -> u8 {
        self as u8
    }

    /// Size of one element on the wire (bytes): 4, 2, 2, 4.
    pub const fn size(self) -> usize {
        match self {
            Dtype::F32 | Dtype::I32 => 4,
            Dtype::F16 | Dtype::Bf16 => 2,
        }
    }

    /// The config name (section 3): `"f32"`, `"f16"`, `"bf16"`, `"i32"`.
    pub const fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
            Dtype::Bf16 => "bf16",
            Dtype::I32 => "i32",
        }
    }

    /// The dtype whose config name (section 3) is `name`, or `None`.
    pub fn from_name(name: &str) -> Option<Dtype> {
        Dtype::ALL.into_iter().find(|d| d.name() == name)
    }
}

/// A checked view of a gradient header and what follows it.
#[derive(Debug, Clone)]
pub struct GradientHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> GradientHeader<T> {
    /// Wraps `buffer` (starting at the header) after checking it holds [`HEADER_LEN`] bytes.
    ///
    /// # Errors
    /// [`WireError::Truncated`] if fewer than 20 bytes are present.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        Ok(GradientHeader { buffer })
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Version (high nibble of byte 0; 1 in this protocol).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_FLAGS] >> 4
    }

    /// Flags (low nibble of byte 0; see [`Flags`]).
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::VER_FLAGS] & 0x0f
    }

    /// Operation, raw (see [`Op::from_wire`]).
    #[inline]
    pub fn op_type(&self) -> u8 {
        self.buffer.as_ref()[field::OP_TYPE]
    }

    /// Collective identifier.
    #[inline]
    pub fn collective_id(&self) -> u16 {
        be16(self.buffer.as_ref(), field::COLLECTIVE_ID.start)
    }

    /// Element type, raw (see [`Dtype::from_wire`]).
    #[inline]
    pub fn dtype(&self) -> u8 {
        self.buffer.as_ref()[field::DTYPE]
    }

    /// NAK reason code (0 on contributions and results).
    #[inline]
    pub fn reason(&self) -> u8 {
        self.buffer.as_ref()[field::REASON]
    }

    /// Sender's rank ([`RANK_NONE`] on RESULT and NAK).
    #[inline]
    pub fn worker_rank(&self) -> u16 {
        be16(self.buffer.as_ref(), field::WORKER_RANK.start)
    }

    /// Index of the chunk's first element in the tensor (elements).
    #[inline]
    pub fn tensor_offset(&self) -> u32 {
        be32(self.buffer.as_ref(), field::TENSOR_OFFSET.start)
    }

    /// Payload bytes that follow the header, as the header claims.
    #[inline]
    pub fn data_length(&self) -> u32 {
        be32(self.buffer.as_ref(), field::DATA_LENGTH.start)
    }

    /// Iteration number (compared modulo 2^32).
    #[inline]
    pub fn round(&self) -> u32 {
        be32(self.buffer.as_ref(), field::ROUND.start)
    }

    /// Bytes after the header present in the buffer (not checked against `data_length`).
    #[inline]
    pub fn rest(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> GradientHeader<T> {
    /// Sets version and flags (low 4 bits of each used).
    #[inline]
    pub fn set_version_flags(&mut self, version: u8, flags: u8) {
        self.buffer.as_mut()[field::VER_FLAGS] = (version << 4) | (flags & 0x0f);
    }

    /// Sets the flags, keeping the version.
    #[inline]
    pub fn set_flags(&mut self, flags: u8) {
        let v = self.version();
        self.set_version_flags(v, flags);
    }

    /// Sets the operation.
    #[inline]
    pub fn set_op_type(&mut self, op: u8) {
        self.buffer.as_mut()[field::OP_TYPE] = op;
    }

    /// Sets the collective identifier.
    #[inline]
    pub fn set_collective_id(&mut self, id: u16) {
        put_be16(self.buffer.as_mut(), field::COLLECTIVE_ID.start, id);
    }

    /// Sets the element type.
    #[inline]
    pub fn set_dtype(&mut self, dtype: u8) {
        self.buffer.as_mut()[field::DTYPE] = dtype;
    }

    /// Sets the NAK reason.
    #[inline]
    pub fn set_reason(&mut self, reason: u8) {
        self.buffer.as_mut()[field::REASON] = reason;
    }

    /// Sets the worker rank.
    #[inline]
    pub fn set_worker_rank(&mut self, rank: u16) {
        put_be16(self.buffer.as_mut(), field::WORKER_RANK.start, rank);
    }

    /// Sets the tensor offset (elements).
    #[inline]
    pub fn set_tensor_offset(&mut self, off: u32) {
        put_be32(self.buffer.as_mut(), field::TENSOR_OFFSET.start, off);
    }

    /// Sets the data length (bytes).
    #[inline]
    pub fn set_data_length(&mut self, len: u32) {
        put_be32(self.buffer.as_mut(), field::DATA_LENGTH.start, len);
    }

    /// Sets the round.
    #[inline]
    pub fn set_round(&mut self, round: u32) {
        put_be32(self.buffer.as_mut(), field::ROUND.start, round);
    }
}

/// A decoded gradient header (raw values: no semantic validation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct GradientRepr {
    /// Version (4 bits; [`VERSION`]).
    pub version: u8,
    /// Flags (4 bits; [`Flags`]).
    pub flags: u8,
    /// Operation ([`Op`] as u8).
    pub op_type: u8,
    /// Collective identifier.
    pub collective_id: u16,
    /// Element type ([`Dtype`] as u8).
    pub dtype: u8,
    /// NAK reason.
    pub reason: u8,
    /// Worker rank.
    pub worker_rank: u16,
    /// Tensor offset (elements).
    pub tensor_offset: u32,
    /// Payload length (bytes).
    pub data_length: u32,
    /// Round.
    pub round: u32,
}

impl GradientRepr {
    /// Decodes a checked header.
    pub fn parse<T: AsRef<[u8]>>(h: &GradientHeader<T>) -> Self {
        GradientRepr {
            version: h.version(),
            flags: h.flags(),
            op_type: h.op_type(),
            collective_id: h.collective_id(),
            dtype: h.dtype(),
            reason: h.reason(),
            worker_rank: h.worker_rank(),
            tensor_offset: h.tensor_offset(),
            data_length: h.data_length(),
            round: h.round(),
        }
    }

    /// Writes the 20-byte header into the start of `buf`.
    ///
    /// # Errors
    /// [`WireError::Truncated`] if `buf` is shorter than 20 bytes.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let mut h = GradientHeader::new_checked(buf)?;
        h.set_version_flags(self.version, self.flags);
        h.set_op_type(self.op_type);
        h.set_collective_id(self.collective_id);
        h.set_dtype(self.dtype);
        h.set_reason(self.reason);
        h.set_worker_rank(self.worker_rank);
        h.set_tensor_offset(self.tensor_offset);
        h.set_data_length(self.data_length);
        h.set_round(self.round);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // A rank-2 contribution: version 1, RETRANSMIT, SUM, collective 7, f32, offset 1024, 16 bytes,
    // round 3, as a worker following spec section 2 writes it.
    static CONTRIB: [u8; 20] = [
        0x12, 0x01, 0x00, 0x07, 0x01, 0x00, 0x00, 0x02, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00,
        0x00, 0x03,
    ];

    #[test]
    fn parse_fields() {
        let h = GradientHeader::new_checked(&CONTRIB[..]).unwrap();
        assert_eq!((h.version(), h.flags()), (1, Flags::RETRANSMIT));
        assert_eq!(Op::from_wire(h.op_type()), Some(Op::Sum));
        assert_eq!(h.collective_id(), 7);
        assert_eq!(Dtype::from_wire(h.dtype()).map(Dtype::size), Some(4));
        assert_eq!((h.reason(), h.worker_rank()), (0, 2));
        assert_eq!((h.tensor_offset(), h.data_length(), h.round()), (1024, 16, 3));
        assert!(h.rest().is_empty());
    }

    #[test]
    fn result_header() {
        let mut b = CONTRIB;
        let mut h = GradientHeader::new_checked(&mut b[..]).unwrap();
        h.set_flags(Flags::RESULT);
        h.set_worker_rank(RANK_NONE);
        assert_eq!(&b[..1], &[0x11]);
        assert_eq!(&b[6..8], &[0xff, 0xff]);
    }

    #[test]
    fn wire_enums() {
        assert_eq!(Op::from_wire(0), None);
        assert_eq!(Op::from_wire(3), Some(Op::Min));
        assert_eq!(Dtype::from_wire(5), None);
        assert_eq!(Dtype::from_wire(2).map(Dtype::size), Some(2));
        assert_eq!(Dtype::Bf16 as u8, 3);
    }

    /// Spec section 2: op_type 0x01 SUM, 0x02 MAX, 0x03 MIN; dtype 0x01 f32, 0x02 f16,
    /// 0x03 bf16, 0x04 i32 (4, 2, 2 and 4 bytes a lane).
    #[test]
    fn every_op_and_dtype_of_section_2_decodes() {
        assert_eq!([1, 2, 3].map(Op::from_wire), [Some(Op::Sum), Some(Op::Max), Some(Op::Min)]);
        assert_eq!(
            [1, 2, 3, 4].map(Dtype::from_wire),
            [Some(Dtype::F32), Some(Dtype::F16), Some(Dtype::Bf16), Some(Dtype::I32)]
        );
        assert_eq!([Dtype::F32, Dtype::F16, Dtype::Bf16, Dtype::I32].map(Dtype::size), [4, 2, 2, 4]);
    }

    #[test]
    fn dtype_and_op_codes_round_trip() {
        for (dtype, code, size, name) in [
            (Dtype::F32, 1, 4, "f32"),
            (Dtype::F16, 2, 2, "f16"),
            (Dtype::Bf16, 3, 2, "bf16"),
            (Dtype::I32, 4, 4, "i32"),
        ] {
            assert_eq!(dtype.wire(), code);
            assert_eq!(Dtype::from_wire(code), Some(dtype));
            assert_eq!(dtype.size(), size);
            assert_eq!(dtype.name(), name);
            assert_eq!(Dtype::from_name(name), Some(dtype));
        }
        for (op, code, name) in [(Op::Sum, 1, "sum"), (Op::Max, 2, "max"), (Op::Min, 3, "min")] {
            assert_eq!(op.wire(), code);
            assert_eq!(Op::from_wire(code), Some(op));
            assert_eq!(op.name(), name);
            assert_eq!(Op::from_name(name), Some(op));
        }
        for bad in [0, 5, 0xff] {
            assert_eq!(Dtype::from_wire(bad), None);
        }
        for bad in [0, 4, 0xff] {
            assert_eq!(Op::from_wire(bad), None);
        }
        assert_eq!(Dtype::from_name("f64"), None);
        assert_eq!(Op::from_name("prod"), None);
    }

    #[test]
    fn too_short() {
        assert_eq!(GradientHeader::new_checked(&CONTRIB[..19]).unwrap_err(), WireError::Truncated);
        assert_eq!(GradientRepr::default().emit(&mut [0u8; 19]), Err(WireError::Truncated));
    }

    proptest! {
        #[test]
        fn round_trip(
            version in 0u8..16, flags in 0u8..16, op_type in any::<u8>(), collective_id in any::<u16>(),
            dtype in any::<u8>(), reason in any::<u8>(), worker_rank in any::<u16>(),
            tensor_offset in any::<u32>(), data_length in any::<u32>(), round in any::<u32>(),
        ) {
            let r = GradientRepr { version, flags, op_type, collective_id, dtype, reason, worker_rank, tensor_offset, data_length, round };
            let mut b = [0u8; 24];
            r.emit(&mut b).unwrap();
            let h = GradientHeader::new_checked(&b[..]).unwrap();
            prop_assert_eq!(GradientRepr::parse(&h), r);
            prop_assert_eq!(h.rest().len(), 4);
        }
    }
}
