//! InfiniBand transport headers as RoCEv2 carries them in UDP (destination port 4791): the Base
//! Transport Header (BTH, IBTA Vol. 1 section 9.2) and the extension headers its opcode requires
//! (section 9.3): DETH, XRCETH, FETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH.
//!
//! ```text
//!  BTH (12 bytes)
//!  0  opcode
//!  1  SE(1) M(1) PadCnt(2) TVer(4)
//!  2  P_Key (2)
//!  4  FECN(1) BECN(1) resv6      <- masked to all ones in the ICRC (see `icrc`)
//!  5  DestQP (3)
//!  8  AckReq(1) resv7 | PSN (3)
//! ```
//!
//! Extension headers follow the BTH in a fixed order (DETH, XRCETH, FETH, RETH, AtomicETH, AETH,
//! AtomicAckETH, ImmDt, IETH); [`extensions`] says, for an opcode, which are present. Then come
//! the payload, PadCnt pad bytes and the 4-byte ICRC.

use super::error::WireError;
use super::{be16, be32, put_be16, put_be32, Field};

pub(crate) mod field {
    use super::Field;
    pub const OPCODE: usize = 0;
    pub const FLAGS: usize = 1;
    pub const PKEY: Field = 2..4;
    pub const RESV8A: usize = 4;
    pub const DEST_QP: Field = 4..8; // the low 24 bits of this word
    pub const PSN: Field = 8..12; // AckReq is bit 31, PSN the low 24 bits

    // DETH
    pub const DETH_QKEY: Field = 0..4;
    pub const DETH_SRC_QP: Field = 4..8; // the low 24 bits

    // RETH
    pub const RETH_VA: Field = 0..8;
    pub const RETH_RKEY: Field = 8..12;
    pub const RETH_DMA_LEN: Field = 12..16;

    // AETH
    pub const AETH_SYNDROME: usize = 0;
    pub const AETH_MSN: Field = 0..4; // the low 24 bits
}

/// UDP destination port of RoCEv2 (IBTA Annex A17).
pub const ROCEV2_UDP_PORT: u16 = 4791;
/// Length of the BTH (bytes).
pub const HEADER_LEN: usize = 12;
/// Length of the ICRC that ends every RoCEv2 packet (bytes).
pub const ICRC_LEN: usize = 4;
/// Length of a DETH (bytes).
pub const DETH_LEN: usize = 8;
/// Length of an XRCETH (bytes: the XRC SRQ number).
pub const XRCETH_LEN: usize = 4;
/// Length of a FETH (bytes: RDMA FLUSH's type and placement).
pub const FETH_LEN: usize = 4;
/// Length of a RETH (bytes).
pub const RETH_LEN: usize = 16;
/// Length of an AtomicETH (bytes).
pub const ATOMIC_ETH_LEN: usize = 28;
/// Length of an AETH (bytes).
pub const AETH_LEN: usize = 4;
/// Length of an AtomicAckETH (bytes).
pub const ATOMIC_ACK_ETH_LEN: usize = 8;
/// Length of an ImmDt (bytes).
pub const IMM_DT_LEN: usize = 4;
/// Length of an IETH (bytes).
pub const IETH_LEN: usize = 4;
/// Length of the reserved block after the BTH of a RoCEv2 CNP (bytes; Annex A17.9.3).
pub const CNP_RESERVED_LEN: usize = 16;

/// BTH opcodes (IBTA Vol. 1 table 35): transport in the top 3 bits (RC 0x00, UC 0x20, UD 0x60,
/// CNP 0x80, XRC 0xA0), operation in the low 5.
#[derive(Debug, Clone, Copy)]
pub struct Opcode;

impl Opcode {
    /// RC SEND First.
    pub const RC_SEND_FIRST: u8 = 0x00;
    /// RC SEND Middle.
    pub const RC_SEND_MIDDLE: u8 = 0x01;
    /// RC SEND Last.
    pub const RC_SEND_LAST: u8 = 0x02;
    /// RC SEND Last with Immediate.
    pub const RC_SEND_LAST_IMM: u8 = 0x03;
    /// RC SEND Only.
    pub const RC_SEND_ONLY: u8 = 0x04;
    /// RC SEND Only with Immediate.
    pub const RC_SEND_ONLY_IMM: u8 = 0x05;
    /// RC RDMA WRITE First.
    pub const RC_WRITE_FIRST: u8 = 0x06;
    /// RC RDMA WRITE Middle.
    pub const RC_WRITE_MIDDLE: u8 = 0x07;
    /// RC RDMA WRITE Last.
    pub const RC_WRITE_LAST: u8 = 0x08;
    /// RC RDMA WRITE Last with Immediate.
    pub const RC_WRITE_LAST_IMM: u8 = 0x09;
    /// RC RDMA WRITE Only.
    pub const RC_WRITE_ONLY: u8 = 0x0a;
    /// RC RDMA WRITE Only with Immediate.
    pub const RC_WRITE_ONLY_IMM: u8 = 0x0b;
    /// RC RDMA READ Request.
    pub const RC_READ_REQUEST: u8 = 0x0c;
    /// RC RDMA READ Response First.
    pub const RC_READ_RESPONSE_FIRST: u8 = 0x0d;
    /// RC RDMA READ Response Middle.
    pub const RC_READ_RESPONSE_MIDDLE: u8 = 0x0e;
    /// RC RDMA READ Response Last.
    pub const RC_READ_RESPONSE_LAST: u8 = 0x0f;
    /// RC RDMA READ Response Only.
    pub const RC_READ_RESPONSE_ONLY: u8 = 0x10;
    /// RC Acknowledge.
    pub const RC_ACK: u8 = 0x11;
    /// RC ATOMIC Acknowledge.
    pub const RC_ATOMIC_ACK: u8 = 0x12;
    /// RC CmpSwap.
    pub const RC_CMP_SWAP: u8 = 0x13;
    /// RC FetchAdd.
    pub const RC_FETCH_ADD: u8 = 0x14;
    /// RC SEND Last with Invalidate.
    pub const RC_SEND_LAST_INV: u8 = 0x16;
    /// RC SEND Only with Invalidate.
    pub const RC_SEND_ONLY_INV: u8 = 0x17;
    /// RC RDMA FLUSH (IBTA Vol. 1 1.5; Linux rxe): FETH then RETH, no payload.
    pub const RC_FLUSH: u8 = 0x1c;
    /// RC ATOMIC WRITE (IBTA Vol. 1 1.5; Linux rxe): RETH then an 8-byte payload.
    pub const RC_ATOMIC_WRITE: u8 = 0x1d;
    /// UC SEND Only.
    pub const UC_SEND_ONLY: u8 = 0x24;
    /// UC RDMA WRITE Only.
    pub const UC_WRITE_ONLY: u8 = 0x2a;
    /// UD SEND Only: the gradient protocol's RoCEv2 carriage (spec section 1).
    pub const UD_SEND_ONLY: u8 = 0x64;
    /// UD SEND Only with Immediate.
    pub const UD_SEND_ONLY_IMM: u8 = 0x65;
    /// RoCEv2 Congestion Notification Packet (Annex A17.9.3).
    pub const CNP: u8 = 0x81;
    /// XRC SEND Only.
    pub const XRC_SEND_ONLY: u8 = 0xa4;
    /// XRC RDMA WRITE Only.
    pub const XRC_WRITE_ONLY: u8 = 0xaa;
    /// XRC Acknowledge.
    pub const XRC_ACK: u8 = 0xb1;
}

/// The set of extension headers that follow a BTH, in their wire order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Extensions(u16);

impl Extensions {
    /// No extension header.
    pub const NONE: Extensions = Extensions(0);
    /// Datagram ETH (8 bytes: Q_Key, reserved, source QP).
    pub const DETH: Extensions = Extensions(1 << 0);
    /// RDMA ETH (16 bytes: virtual address, R_Key, DMA length).
    pub const RETH: Extensions = Extensions(1 << 1);
    /// Atomic ETH (28 bytes).
    pub const ATOMIC_ETH: Extensions = Extensions(1 << 2);
    /// ACK ETH (4 bytes: syndrome, MSN).
    pub const AETH: Extensions = Extensions(1 << 3);
    /// Atomic ACK ETH (8 bytes: original remote data).
    pub const ATOMIC_ACK_ETH: Extensions = Extensions(1 << 4);
    /// Immediate data (4 bytes).
    pub const IMM_DT: Extensions = Extensions(1 << 5);
    /// Invalidate ETH (4 bytes: R_Key).
    pub const IETH: Extensions = Extensions(1 << 6);
    /// The 16 reserved bytes of a RoCEv2 CNP.
    pub const CNP_RESERVED: Extensions = Extensions(1 << 7);
    /// XRC ETH (4 bytes: the XRC SRQ number), on every XRC request.
    pub const XRCETH: Extensions = Extensions(1 << 8);
    /// FLUSH ETH (4 bytes: the flush type and placement), on RDMA FLUSH.
    pub const FETH: Extensions = Extensions(1 << 9);

    /// Every header in wire order, with its length (bytes).
    const ORDER: [(Extensions, usize); 10] = [
        (Self::DETH, DETH_LEN),
        (Self::XRCETH, XRCETH_LEN),
        (Self::FETH, FETH_LEN),
        (Self::RETH, RETH_LEN),
        (Self::ATOMIC_ETH, ATOMIC_ETH_LEN),
        (Self::AETH, AETH_LEN),
        (Self::ATOMIC_ACK_ETH, ATOMIC_ACK_ETH_LEN),
        (Self::IMM_DT, IMM_DT_LEN),
        (Self::IETH, IETH_LEN),
        (Self::CNP_RESERVED, CNP_RESERVED_LEN),
    ];

    /// The union of two sets.
    pub const fn union(self, other: Extensions) -> Extensions {
        Extensions(self.0 | other.0)
    }

    /// True when every header of `other` is in `self`.
    pub const fn contains(self, other: Extensions) -> bool {
        self.0 & other.0 == other.0
    }

    /// Total length of the extension headers (bytes).
    pub fn len(self) -> usize {
        Self::ORDER.iter().filter(|(e, _)| self.contains(*e)).map(|(_, l)| l).sum()
    }

    /// True when no extension header follows the BTH.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Offset of header `one` (a single header) from the end of the BTH (bytes), or `None` if
    /// it is not in the set.
    pub fn offset_of(self, one: Extensions) -> Option<usize> {
        if one.0.count_ones() != 1 || !self.contains(one) {
            return None;
        }
        Some(Self::ORDER.iter().take_while(|(e, _)| *e != one).filter(|(e, _)| self.contains(*e)).map(|(_, l)| l).sum())
    }
}

/// The extension headers of the RC (and XRC) operation `op` (the opcode's low 5 bits), XRCETH
/// aside.
fn rc_extensions(op: u8) -> Result<Extensions, WireError> {
    use Extensions as E;
    Ok(match op {
        0x00 | 0x01 | 0x02 | 0x04 | 0x07 | 0x08 | 0x0e => E::NONE,
        0x03 | 0x05 | 0x09 => E::IMM_DT,
        0x06 | 0x0a | 0x0c => E::RETH,
        0x0b => E::RETH.union(E::IMM_DT),
        0x0d | 0x0f | 0x10 | 0x11 => E::AETH,
        0x12 => E::AETH.union(E::ATOMIC_ACK_ETH),
        0x13 | 0x14 => E::ATOMIC_ETH,
        0x16 | 0x17 => E::IETH,
        // RDMA FLUSH and ATOMIC WRITE (IBTA Vol. 1 release 1.5).
        0x1c => E::FETH.union(E::RETH),
        0x1d => E::RETH,
        _ => return Err(WireError::UnknownOpcode),
    })
}

/// The extension headers that follow a BTH with `opcode` (IBTA Vol. 1 table 35 and section
/// 9.3), for the RC, UC, UD and XRC transports and the RoCEv2 CNP.
///
/// XRC has the operations of RC; every request (SEND, RDMA WRITE, RDMA READ Request, atomics)
/// carries an XRCETH right after the BTH, responses (RDMA READ Response, Acknowledge, Atomic
/// Acknowledge) do not.
///
/// # Errors
/// [`WireError::UnknownOpcode`] for reserved opcodes and transports the appliance does not
/// handle (RD, manufacturer-specific).
pub fn extensions(opcode: u8) -> Result<Extensions, WireError> {
    use Extensions as E;
    let op = opcode & 0x1f;
    let ext = match opcode & 0xe0 {
        // RC
        0x00 => rc_extensions(op)?,
        // XRC: RC's operations, with an XRCETH on requests.
        0xa0 => match op {
            0x0d..=0x12 => rc_extensions(op)?,
            // FLUSH and ATOMIC WRITE are defined for RC here, not for XRC.
            0x1c | 0x1d => return Err(WireError::UnknownOpcode),
            _ => E::XRCETH.union(rc_extensions(op)?),
        },
        // UC: the SEND and RDMA WRITE opcodes of RC.
        0x20 => match op {
            0x00 | 0x01 | 0x02 | 0x04 | 0x07 | 0x08 => E::NONE,
            0x03 | 0x05 | 0x09 => E::IMM_DT,
            0x06 | 0x0a => E::RETH,
            0x0b => E::RETH.union(E::IMM_DT),
            _ => return Err(WireError::UnknownOpcode),
        },
        // UD
        0x60 => match op {
            0x04 => E::DETH,
            0x05 => E::DETH.union(E::IMM_DT),
            _ => return Err(WireError::UnknownOpcode),
        },
        0x80 if opcode == Opcode::CNP => E::CNP_RESERVED,
        _ => return Err(WireError::UnknownOpcode),
    };
    Ok(ext)
}

/// A checked view of a BTH.
#[derive(Debug, Clone)]
pub struct BthPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> BthPacket<T> {
    /// Wraps `buffer` (starting at the BTH) after checking it holds [`HEADER_LEN`] bytes. The
    /// opcode is not checked here: see [`extensions`].
    ///
    /// # Errors
    /// [`WireError::Truncated`] if fewer than 12 bytes are present.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        Ok(BthPacket { buffer })
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Opcode (see [`Opcode`]).
    #[inline]
    pub fn opcode(&self) -> u8 {
        self.buffer.as_ref()[field::OPCODE]
    }

    /// Solicited Event.
    #[inline]
    pub fn solicited(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & 0x80 != 0
    }

    /// MigReq.
    #[inline]
    pub fn mig_req(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & 0x40 != 0
    }

    /// Pad count: bytes (0..=3) of padding between the payload and the ICRC.
    #[inline]
    pub fn pad_count(&self) -> u8 {
        (self.buffer.as_ref()[field::FLAGS] >> 4) & 0b11
    }

    /// Transport header version (4 bits; 0).
    #[inline]
    pub fn tver(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS] & 0x0f
    }

    /// Partition key.
    #[inline]
    pub fn pkey(&self) -> u16 {
        be16(self.buffer.as_ref(), field::PKEY.start)
    }

    /// Byte 4 whole: FECN (bit 7), BECN (bit 6), reserved (6 bits).
    #[inline]
    pub fn resv8a(&self) -> u8 {
        self.buffer.as_ref()[field::RESV8A]
    }

    /// Forward explicit congestion notification (RoCEv2 uses IP ECN instead; kept for
    /// completeness).
    #[inline]
    pub fn fecn(&self) -> bool {
        self.resv8a() & 0x80 != 0
    }

    /// Backward explicit congestion notification.
    #[inline]
    pub fn becn(&self) -> bool {
        self.resv8a() & 0x40 != 0
    }

    /// Destination queue pair (24 bits).
    #[inline]
    pub fn dest_qp(&self) -> u32 {
        be32(self.buffer.as_ref(), field::DEST_QP.start) & 0x00ff_ffff
    }

    /// Acknowledge request.
    #[inline]
    pub fn ack_req(&self) -> bool {
        self.buffer.as_ref()[field::PSN.start] & 0x80 != 0
    }

    /// Packet sequence number (24 bits).
    #[inline]
    pub fn psn(&self) -> u32 {
        be32(self.buffer.as_ref(), field::PSN.start) & 0x00ff_ffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> BthPacket<T> {
    /// Sets the opcode.
    #[inline]
    pub fn set_opcode(&mut self, op: u8) {
        self.buffer.as_mut()[field::OPCODE] = op;
    }

    /// Sets SE, M, PadCnt (0..=3) and TVer (0..=15) together.
    #[inline]
    pub fn set_flags(&mut self, solicited: bool, mig_req: bool, pad_count: u8, tver: u8) {
        self.buffer.as_mut()[field::FLAGS] =
            ((solicited as u8) << 7) | ((mig_req as u8) << 6) | ((pad_count & 3) << 4) | (tver & 0xf);
    }

    /// Sets the pad count (0..=3), keeping the other bits of byte 1.
    #[inline]
    pub fn set_pad_count(&mut self, pad: u8) {
        let b = self.buffer.as_mut();
        b[field::FLAGS] = (b[field::FLAGS] & !0x30) | ((pad & 3) << 4);
    }

    /// Sets the partition key.
    #[inline]
    pub fn set_pkey(&mut self, pkey: u16) {
        put_be16(self.buffer.as_mut(), field::PKEY.start, pkey);
    }

    /// Sets FECN and BECN; the reserved bits of byte 4 become 0.
    #[inline]
    pub fn set_fecn_becn(&mut self, fecn: bool, becn: bool) {
        self.buffer.as_mut()[field::RESV8A] = ((fecn as u8) << 7) | ((becn as u8) << 6);
    }

    /// Sets the destination QP (low 24 bits used), keeping byte 4.
    #[inline]
    pub fn set_dest_qp(&mut self, qp: u32) {
        let w = (be32(self.buffer.as_ref(), field::DEST_QP.start) & 0xff00_0000) | (qp & 0x00ff_ffff);
        put_be32(self.buffer.as_mut(), field::DEST_QP.start, w);
    }

    /// Sets AckReq and the PSN (low 24 bits used); the 7 reserved bits become 0.
    #[inline]
    pub fn set_ack_req_psn(&mut self, ack_req: bool, psn: u32) {
        put_be32(self.buffer.as_mut(), field::PSN.start, ((ack_req as u32) << 31) | (psn & 0x00ff_ffff));
    }
}

/// A decoded BTH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BthRepr {
    /// Opcode.
    pub opcode: u8,
    /// Solicited Event.
    pub solicited: bool,
    /// MigReq.
    pub mig_req: bool,
    /// Pad count, 0..=3 bytes.
    pub pad_count: u8,
    /// Transport header version (0).
    pub tver: u8,
    /// Partition key (0xFFFF: the default full-member partition).
    pub pkey: u16,
    /// FECN.
    pub fecn: bool,
    /// BECN.
    pub becn: bool,
    /// Destination QP, 24 bits.
    pub dest_qp: u32,
    /// AckReq.
    pub ack_req: bool,
    /// PSN, 24 bits.
    pub psn: u32,
}

impl BthRepr {
    /// Decodes a checked BTH.
    pub fn parse<T: AsRef<[u8]>>(p: &BthPacket<T>) -> Self {
        BthRepr {
            opcode: p.opcode(),
            solicited: p.solicited(),
            mig_req: p.mig_req(),
            pad_count: p.pad_count(),
            tver: p.tver(),
            pkey: p.pkey(),
            fecn: p.fecn(),
            becn: p.becn(),
            dest_qp: p.dest_qp(),
            ack_req: p.ack_req(),
            psn: p.psn(),
        }
    }

    /// Writes the 12-byte BTH into `buf` (reserved bits 0).
    ///
    /// # Errors
    /// [`WireError::Truncated`] if `buf` is shorter than 12 bytes.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let mut p = BthPacket::new_checked(buf)?;
        p.set_opcode(self.opcode);
        p.set_flags(self.solicited, self.mig_req, self.pad_count, self.tver);
        p.set_pkey(self.pkey);
        p.set_fecn_becn(self.fecn, self.becn);
        p.set_dest_qp(self.dest_qp);
        p.set_ack_req_psn(self.ack_req, self.psn);
        Ok(())
    }
}

/// A checked view of a DETH (8 bytes): Q_Key, reserved byte, source QP.
#[derive(Debug, Clone)]
pub struct DethHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> DethHeader<T> {
    /// Wraps `buffer` (starting at the DETH) after checking it holds [`DETH_LEN`] bytes.
    ///
    /// # Errors
    /// [`WireError::Truncated`] if fewer than 8 bytes are present.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        if buffer.as_ref().len() < DETH_LEN {
            return Err(WireError::Truncated);
        }
        Ok(DethHeader { buffer })
    }

    /// Queue key.
    #[inline]
    pub fn qkey(&self) -> u32 {
        be32(self.buffer.as_ref(), field::DETH_QKEY.start)
    }

    /// Source queue pair (24 bits).
    #[inline]
    pub fn src_qp(&self) -> u32 {
        be32(self.buffer.as_ref(), field::DETH_SRC_QP.start) & 0x00ff_ffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DethHeader<T> {
    /// Sets the queue key.
    #[inline]
    pub fn set_qkey(&mut self, qkey: u32) {
        put_be32(self.buffer.as_mut(), field::DETH_QKEY.start, qkey);
    }

    /// Sets the source QP (low 24 bits used); the reserved byte becomes 0.
    #[inline]
    pub fn set_src_qp(&mut self, qp: u32) {
        put_be32(self.buffer.as_mut(), field::DETH_SRC_QP.start, qp & 0x00ff_ffff);
    }
}

/// A checked view of a RETH (16 bytes): virtual address, R_Key, DMA length.
#[derive(Debug, Clone)]
pub struct RethHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> RethHeader<T> {
    /// Wraps `buffer` (starting at the RETH) after checking it holds [`RETH_LEN`] bytes.
    ///
    /// # Errors
    /// [`WireError::Truncated`] if fewer than 16 bytes are present.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        if buffer.as_ref().len() < RETH_LEN {
            return Err(WireError::Truncated);
        }
        Ok(RethHeader { buffer })
    }

    /// Remote virtual address.
    #[inline]
    pub fn virtual_addr(&self) -> u64 {
        let b = self.buffer.as_ref();
        ((be32(b, field::RETH_VA.start) as u64) << 32) | be32(b, field::RETH_VA.start + 4) as u64
    }

    /// Remote key.
    #[inline]
    pub fn rkey(&self) -> u32 {
        be32(self.buffer.as_ref(), field::RETH_RKEY.start)
    }

    /// DMA length of the whole RDMA operation (bytes).
    #[inline]
    pub fn dma_len(&self) -> u32 {
        be32(self.buffer.as_ref(), field::RETH_DMA_LEN.start)
    }
}

/// A checked view of an AETH (4 bytes): syndrome, message sequence number.
#[derive(Debug, Clone)]
pub struct AethHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> AethHeader<T> {
    /// Wraps `buffer` (starting at the AETH) after checking it holds [`AETH_LEN`] bytes.
    ///
    /// # Errors
    /// [`WireError::Truncated`] if fewer than 4 bytes are present.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        if buffer.as_ref().len() < AETH_LEN {
            return Err(WireError::Truncated);
        }
        Ok(AethHeader { buffer })
    }

    /// Syndrome: bits 6:5 are the kind (0 ACK, 1 RNR NAK, 3 NAK), bits 4:0 its value (credit
    /// count, timer or NAK code).
    #[inline]
    pub fn syndrome(&self) -> u8 {
        self.buffer.as_ref()[field::AETH_SYNDROME]
    }

    /// Message sequence number (24 bits).
    #[inline]
    pub fn msn(&self) -> u32 {
        be32(self.buffer.as_ref(), field::AETH_MSN.start) & 0x00ff_ffff
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // Case c10 frame 1 from the BTH (frame byte 42): RC SEND Only, M set, P_Key 0xFFFF, DestQP
    // 0x11, PSN 1, 16 bytes of 0x11 payload, ICRC.
    static C10_BTH: [u8; 32] = [
        0x04, 0x40, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x00, 0x00, 0x00, 0x01, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11,
        0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x67, 0x91, 0xca, 0x03,
    ];

    // NCCL capture frame 65 from the BTH: RC RDMA WRITE Only with RETH (VA 0x763f2001f100,
    // R_Key 0x68c2, DMA length 64), then the first bytes of the payload.
    static NCCL_WRITE_ONLY: [u8; 28] = [
        0x0a, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x27, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x76, 0x3f, 0x20, 0x01,
        0xf1, 0x00, 0x00, 0x00, 0x68, 0xc2, 0x00, 0x00, 0x00, 0x40,
    ];

    // NCCL capture frame 69 from the BTH: RC Acknowledge with AETH (syndrome 0x1f, MSN 1), ICRC.
    static NCCL_ACK: [u8; 20] = [
        0x11, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x23, 0x00, 0x00, 0x00, 0x00, 0x1f, 0x00, 0x00, 0x01, 0x1f, 0x37,
        0x91, 0x35,
    ];

    #[test]
    fn parse_c10() {
        let p = BthPacket::new_checked(&C10_BTH[..]).unwrap();
        assert_eq!(p.opcode(), Opcode::RC_SEND_ONLY);
        assert!(!p.solicited() && p.mig_req());
        assert_eq!((p.pad_count(), p.tver(), p.pkey()), (0, 0, 0xffff));
        assert!(!p.fecn() && !p.becn());
        assert_eq!((p.dest_qp(), p.ack_req(), p.psn()), (0x11, false, 1));
        assert_eq!(extensions(p.opcode()), Ok(Extensions::NONE));
    }

    #[test]
    fn parse_nccl_write_and_ack() {
        let p = BthPacket::new_checked(&NCCL_WRITE_ONLY[..]).unwrap();
        assert_eq!((p.opcode(), p.dest_qp(), p.ack_req(), p.psn()), (0x0a, 0x27, true, 0));
        let ext = extensions(p.opcode()).unwrap();
        assert_eq!((ext, ext.len()), (Extensions::RETH, 16));
        let r = RethHeader::new_checked(&NCCL_WRITE_ONLY[12..]).unwrap();
        assert_eq!((r.virtual_addr(), r.rkey(), r.dma_len()), (0x763f_2001_f100, 0x68c2, 64));

        let p = BthPacket::new_checked(&NCCL_ACK[..]).unwrap();
        assert_eq!((p.opcode(), p.dest_qp(), p.psn()), (Opcode::RC_ACK, 0x23, 0));
        assert_eq!(extensions(p.opcode()), Ok(Extensions::AETH));
        let a = AethHeader::new_checked(&NCCL_ACK[12..]).unwrap();
        assert_eq!((a.syndrome(), a.msn()), (0x1f, 1));
    }

    #[test]
    fn opcode_table() {
        use Extensions as E;
        let cases: [(u8, Extensions, usize); 16] = [
            (Opcode::RC_SEND_FIRST, E::NONE, 0),
            (Opcode::RC_SEND_ONLY_IMM, E::IMM_DT, 4),
            (Opcode::RC_WRITE_FIRST, E::RETH, 16),
            (Opcode::RC_WRITE_LAST_IMM, E::IMM_DT, 4),
            (Opcode::RC_WRITE_ONLY_IMM, E::RETH.union(E::IMM_DT), 20),
            (Opcode::RC_READ_REQUEST, E::RETH, 16),
            (Opcode::RC_READ_RESPONSE_MIDDLE, E::NONE, 0),
            (Opcode::RC_READ_RESPONSE_ONLY, E::AETH, 4),
            (Opcode::RC_ATOMIC_ACK, E::AETH.union(E::ATOMIC_ACK_ETH), 12),
            (Opcode::RC_CMP_SWAP, E::ATOMIC_ETH, 28),
            (Opcode::UC_WRITE_ONLY, E::RETH, 16),
            (Opcode::UD_SEND_ONLY, E::DETH, 8),
            (Opcode::UD_SEND_ONLY_IMM, E::DETH.union(E::IMM_DT), 12),
            (Opcode::CNP, E::CNP_RESERVED, 16),
            (Opcode::RC_FLUSH, E::FETH.union(E::RETH), 20),
            (Opcode::RC_ATOMIC_WRITE, E::RETH, 16),
        ];
        for (op, ext, len) in cases {
            assert_eq!(extensions(op), Ok(ext), "opcode {op:#x}");
            assert_eq!(ext.len(), len, "opcode {op:#x}");
        }
        for op in [
            0x15u8, 0x18, 0x1e, 0x1f, 0x2c, 0x31, 0x3c, 0x40, 0x63, 0x66, 0x80, 0xb5, 0xb8, 0xbc, 0xbd, 0xbf, 0xc0,
            0xff,
        ] {
            assert_eq!(extensions(op), Err(WireError::UnknownOpcode), "opcode {op:#x}");
        }
        // XRC (IBTA Vol. 1 table 35, transport 101b): RC's operations; an XRCETH (4 bytes) right
        // after the BTH on every request, none on the responder's READ responses and ACKs.
        let xrc: [(u8, Extensions, usize); 23] = [
            (0xa0, E::XRCETH, 4),
            (0xa1, E::XRCETH, 4),
            (0xa2, E::XRCETH, 4),
            (0xa3, E::XRCETH.union(E::IMM_DT), 8),
            (Opcode::XRC_SEND_ONLY, E::XRCETH, 4),
            (0xa5, E::XRCETH.union(E::IMM_DT), 8),
            (0xa6, E::XRCETH.union(E::RETH), 20),
            (0xa7, E::XRCETH, 4),
            (0xa8, E::XRCETH, 4),
            (0xa9, E::XRCETH.union(E::IMM_DT), 8),
            (Opcode::XRC_WRITE_ONLY, E::XRCETH.union(E::RETH), 20),
            (0xab, E::XRCETH.union(E::RETH).union(E::IMM_DT), 24),
            (0xac, E::XRCETH.union(E::RETH), 20),
            (0xad, E::AETH, 4),
            (0xae, E::NONE, 0),
            (0xaf, E::AETH, 4),
            (0xb0, E::AETH, 4),
            (Opcode::XRC_ACK, E::AETH, 4),
            (0xb2, E::AETH.union(E::ATOMIC_ACK_ETH), 12),
            (0xb3, E::XRCETH.union(E::ATOMIC_ETH), 32),
            (0xb4, E::XRCETH.union(E::ATOMIC_ETH), 32),
            (0xb6, E::XRCETH.union(E::IETH), 8),
            (0xb7, E::XRCETH.union(E::IETH), 8),
        ];
        for (op, ext, len) in xrc {
            assert_eq!(extensions(op), Ok(ext), "opcode {op:#x}");
            assert_eq!(ext.len(), len, "opcode {op:#x}");
        }
        let e = E::XRCETH.union(E::RETH).union(E::IMM_DT);
        assert_eq!(
            (e.offset_of(E::XRCETH), e.offset_of(E::RETH), e.offset_of(E::IMM_DT)),
            (Some(0), Some(4), Some(20))
        );
        let e = E::RETH.union(E::IMM_DT);
        assert_eq!((e.offset_of(E::RETH), e.offset_of(E::IMM_DT), e.offset_of(E::AETH)), (Some(0), Some(16), None));
        let e = E::DETH.union(E::IMM_DT);
        assert_eq!(e.offset_of(E::IMM_DT), Some(8));
        assert_eq!(e.offset_of(e), None);
    }

    /// UC (IBTA Vol. 1 table 35, transport 001b) has RC's SEND and RDMA WRITE operations with
    /// their headers, and no READ, ACK or atomic ones.
    #[test]
    fn uc_opcodes_are_rc_send_and_write_only() {
        use Extensions as E;
        let uc: [(u8, Extensions); 12] = [
            (0x20, E::NONE),
            (0x21, E::NONE),
            (0x22, E::NONE),
            (0x23, E::IMM_DT),
            (Opcode::UC_SEND_ONLY, E::NONE),
            (0x25, E::IMM_DT),
            (0x26, E::RETH),
            (0x27, E::NONE),
            (0x28, E::NONE),
            (0x29, E::IMM_DT),
            (Opcode::UC_WRITE_ONLY, E::RETH),
            (0x2b, E::RETH.union(E::IMM_DT)),
        ];
        for (op, ext) in uc {
            assert_eq!(extensions(op), Ok(ext), "opcode {op:#x}");
        }
        for op in [0x2cu8, 0x2d, 0x30, 0x31, 0x32, 0x33, 0x34, 0x36, 0x37, 0x3c, 0x3d] {
            assert_eq!(extensions(op), Err(WireError::UnknownOpcode), "opcode {op:#x}");
        }
    }

    /// Extension headers form a set: a union with itself adds nothing, and only the empty set
    /// is empty.
    #[test]
    fn extensions_are_a_set() {
        use Extensions as E;
        assert_eq!(E::DETH.union(E::DETH), E::DETH);
        assert_eq!(E::RETH.union(E::IMM_DT).union(E::RETH), E::RETH.union(E::IMM_DT));
        assert!(E::NONE.is_empty() && E::NONE.union(E::NONE).is_empty());
        assert!(!E::DETH.is_empty() && !E::CNP_RESERVED.is_empty());
        assert_eq!(extensions(Opcode::RC_SEND_ONLY).map(E::is_empty), Ok(true));
        assert_eq!(extensions(Opcode::UD_SEND_ONLY).map(E::is_empty), Ok(false));
    }

    /// PadCnt is bits 5:4 of byte 1 (IBTA Vol. 1 section 9.2): setting it keeps SE, M and TVer
    /// and uses only the count's low 2 bits.
    #[test]
    fn set_pad_count_touches_only_padcnt() {
        let mut b = C10_BTH;
        b[1] = 0xff;
        let mut p = BthPacket::new_checked(&mut b[..]).unwrap();
        p.set_pad_count(1);
        assert_eq!((p.solicited(), p.mig_req(), p.pad_count(), p.tver()), (true, true, 1, 0xf));
        assert_eq!(b[1], 0xdf);
        b[1] = 0x00;
        let mut p = BthPacket::new_checked(&mut b[..]).unwrap();
        p.set_pad_count(2);
        assert_eq!(b[1], 0x20);
        let mut p = BthPacket::new_checked(&mut b[..]).unwrap();
        p.set_pad_count(7);
        assert_eq!(b[1], 0x30);
        assert_eq!(&b[..1], &C10_BTH[..1]);
        assert_eq!(&b[2..], &C10_BTH[2..]);
    }

    /// The AETH is exactly 4 bytes: syndrome, then a 24-bit MSN (IBTA Vol. 1 section 9.3.5).
    #[test]
    fn aeth_is_syndrome_and_24_bit_msn() {
        let a = AethHeader::new_checked(&NCCL_ACK[12..16]).unwrap();
        assert_eq!((a.syndrome(), a.msn()), (0x1f, 1));
        let b = [0x60u8, 0xab, 0xcd, 0xef];
        let a = AethHeader::new_checked(&b[..]).unwrap();
        assert_eq!((a.syndrome(), a.msn()), (0x60, 0xab_cdef));
    }

    #[test]
    fn deth_fields() {
        let mut b = [0xffu8; 8];
        let mut d = DethHeader::new_checked(&mut b[..]).unwrap();
        d.set_qkey(0x8001_0000);
        d.set_src_qp(0x12_3456);
        assert_eq!((d.qkey(), d.src_qp()), (0x8001_0000, 0x12_3456));
        assert_eq!(b, [0x80, 0x01, 0x00, 0x00, 0x00, 0x12, 0x34, 0x56]);
    }

    #[test]
    fn negative_lengths() {
        assert_eq!(BthPacket::new_checked(&C10_BTH[..11]).unwrap_err(), WireError::Truncated);
        assert_eq!(DethHeader::new_checked(&C10_BTH[..7]).unwrap_err(), WireError::Truncated);
        assert_eq!(RethHeader::new_checked(&C10_BTH[..15]).unwrap_err(), WireError::Truncated);
        assert_eq!(AethHeader::new_checked(&C10_BTH[..3]).unwrap_err(), WireError::Truncated);
        assert_eq!(BthRepr::default().emit(&mut [0u8; 11]), Err(WireError::Truncated));
    }

    proptest! {
        #[test]
        fn round_trip(
            opcode in any::<u8>(), solicited in any::<bool>(), mig_req in any::<bool>(),
            pad_count in 0u8..4, tver in 0u8..16, pkey in any::<u16>(), fecn in any::<bool>(),
            becn in any::<bool>(), dest_qp in 0u32..(1 << 24), ack_req in any::<bool>(),
            psn in 0u32..(1 << 24),
        ) {
            let r = BthRepr { opcode, solicited, mig_req, pad_count, tver, pkey, fecn, becn, dest_qp, ack_req, psn };
            let mut b = [0xa5u8; 12];
            r.emit(&mut b).unwrap();
            prop_assert_eq!(BthRepr::parse(&BthPacket::new_checked(&b[..]).unwrap()), r);
        }

        /// Every opcode either has a layout whose length is the sum of its headers or is
        /// refused.
        #[test]
        fn extension_lengths(op in any::<u8>()) {
            if let Ok(e) = extensions(op) {
                prop_assert!(e.len() <= RETH_LEN + IMM_DT_LEN.max(ATOMIC_ETH_LEN) + AETH_LEN + ATOMIC_ACK_ETH_LEN);
            }
        }
    }
}
