//! UDP datagrams (RFC 768), with their IPv4 and IPv6 (RFC 8200 section 8.1) checksums.
//!
//! ```text
//!  source port (2)   destination port (2)   length (2)   checksum (2)   payload
//! ```
//!
//! The length field governs: bytes of the IP payload after it are not part of the datagram, and a
//! length larger than the IP payload is malformed. A checksum field of 0 means "none" over IPv4
//! and is invalid over IPv6; a computed checksum of 0 is stored as 0xFFFF.

use super::checksum;
use super::error::WireError;
use super::{be16, put_be16, Field};

pub(crate) mod field {
    use super::Field;
    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const LENGTH: Field = 4..6;
    pub const CHECKSUM: Field = 6..8;
}

/// Length of the UDP header (bytes).
pub const HEADER_LEN: usize = 8;
/// IP protocol / next header number of UDP.
pub const PROTOCOL: u8 = 17;

/// A checked view of a UDP datagram within an IP payload.
///
/// `new_checked` guarantees: 8 <= length field <= bytes present (the IP payload).
#[derive(Debug, Clone)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    view_constructors!(UdpPacket, "the IP payload, starting at the UDP header");

    /// Checks the header and length field against the bytes present (RFC 768).
    ///
    /// # Errors
    /// - [`WireError::Truncated`]: fewer than 8 bytes.
    /// - [`WireError::BadLength`]: length field < 8, or more than the bytes present.
    pub fn check_len(&self) -> Result<(), WireError> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        let len = self.len() as usize;
        if len < HEADER_LEN || len > b.len() {
            return Err(WireError::BadLength);
        }
        Ok(())
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Source port.
    #[inline(always)]
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SRC_PORT.start)
    }

    /// Destination port.
    #[inline(always)]
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::DST_PORT.start)
    }

    /// Length of header and payload (bytes), as the length field says.
    #[inline(always)]
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH.start)
    }

    /// The stored checksum.
    #[inline(always)]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }

    /// The datagram, header included, as the length field bounds it.
    #[inline]
    pub fn datagram(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.len() as usize]
    }

    /// The payload: bytes 8..length.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.len() as usize]
    }

    /// Sum of the datagram with the IPv4 pseudo-header (0xFFFF when the checksum is right).
    fn sum_v4(&self, src: [u8; 4], dst: [u8; 4]) -> u16 {
        let ph = checksum::pseudo_header_v4(src, dst, PROTOCOL, self.len());
        checksum::combine(ph, checksum::sum(self.datagram()))
    }

    /// Sum of the datagram with the IPv6 pseudo-header.
    fn sum_v6(&self, src: &[u8; 16], dst: &[u8; 16]) -> u16 {
        let ph = checksum::pseudo_header_v6(src, dst, PROTOCOL, self.len() as u32);
        checksum::combine(ph, checksum::sum(self.datagram()))
    }

    /// Verifies the checksum over IPv4 (RFC 768): a stored 0 means "no checksum" and passes;
    /// any other value must make pseudo-header and datagram sum to 0xFFFF.
    #[inline]
    pub fn verify_checksum_v4(&self, src: [u8; 4], dst: [u8; 4]) -> bool {
        self.checksum() == 0 || self.sum_v4(src, dst) == 0xffff
    }

    /// Verifies the checksum over IPv6 (RFC 8200 section 8.1): mandatory, so a stored 0 fails.
    #[inline]
    pub fn verify_checksum_v6(&self, src: &[u8; 16], dst: &[u8; 16]) -> bool {
        self.checksum() != 0 && self.sum_v6(src, dst) == 0xffff
    }
}

/// The checksum to store: a computed 0 becomes 0xFFFF (RFC 768).
#[inline]
fn nonzero(ck: u16) -> u16 {
    if ck == 0 {
        0xffff
    } else {
        ck
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// Sets the source port.
    #[inline]
    pub fn set_src_port(&mut self, p: u16) {
        put_be16(self.buffer.as_mut(), field::SRC_PORT.start, p);
    }

    /// Sets the destination port.
    #[inline]
    pub fn set_dst_port(&mut self, p: u16) {
        put_be16(self.buffer.as_mut(), field::DST_PORT.start, p);
    }

    /// Sets the length field (bytes, header included).
    #[inline]
    pub fn set_len(&mut self, len: u16) {
        put_be16(self.buffer.as_mut(), field::LENGTH.start, len);
    }

    /// Stores `ck` in the checksum field as is.
    #[inline]
    pub fn set_checksum(&mut self, ck: u16) {
        put_be16(self.buffer.as_mut(), field::CHECKSUM.start, ck);
    }

    /// The payload, mutable (bytes 8..length).
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let len = self.len() as usize;
        &mut self.buffer.as_mut()[HEADER_LEN..len]
    }

    /// Computes and stores the checksum over IPv4, writing 0xFFFF where it computes to 0. The
    /// length field must be set and its bytes present (as after `new_checked`).
    #[inline]
    pub fn fill_checksum_v4(&mut self, src: [u8; 4], dst: [u8; 4]) {
        self.set_checksum(0);
        let ck = nonzero(!self.sum_v4(src, dst));
        self.set_checksum(ck);
    }

    /// Computes and stores the checksum over IPv6, writing 0xFFFF where it computes to 0.
    #[inline]
    pub fn fill_checksum_v6(&mut self, src: &[u8; 16], dst: &[u8; 16]) {
        self.set_checksum(0);
        let ck = nonzero(!self.sum_v6(src, dst));
        self.set_checksum(ck);
    }
}

/// A decoded UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Payload length (bytes); the length field is this plus 8.
    pub payload_len: u16,
}

impl UdpRepr {
    /// Decodes a checked header.
    pub fn parse<T: AsRef<[u8]>>(p: &UdpPacket<T>) -> Self {
        UdpRepr { src_port: p.src_port(), dst_port: p.dst_port(), payload_len: p.len() - 8 }
    }

    /// Writes the 8-byte header (checksum 0) into `buf`, whose payload must already be in
    /// place or be filled before the checksum is computed with `fill_checksum_v4/v6`.
    ///
    /// # Errors
    /// [`WireError::Truncated`] if `buf` is shorter than 8 bytes; [`WireError::BadLength`] if
    /// 8 + `payload_len` exceeds 65535.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        if buf.len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        let len = (self.payload_len as usize + HEADER_LEN).try_into().map_err(|_| WireError::BadLength)?;
        let mut p = UdpPacket::new_unchecked(&mut buf[..HEADER_LEN]);
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_len(len);
        p.set_checksum(0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SRC4: [u8; 4] = [10, 0, 0, 1];
    const DST4: [u8; 4] = [10, 0, 0, 2];
    const SRC6: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    const DST6: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

    // Case c03's IP payload (from frame byte 34): UDP length 12, then the 14 bytes of 0xAA
    // padding that followed the IP datagram in the frame (here as trailing bytes, to show the
    // length field bounds the datagram).
    static C03: [u8; 26] = [
        0xc0, 0x00, 0x23, 0x28, 0x00, 0x0c, 0x04, 0xa5, 0x01, 0x02, 0x03, 0x04, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa,
        0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa,
    ];

    // Case c04 frame 1: checksum field 0xFFFF (the computed sum is zero).
    static C04_FFFF: [u8; 12] = [0xc0, 0x00, 0x23, 0x28, 0x00, 0x0c, 0xff, 0xff, 0x08, 0xab, 0x00, 0x00];

    // Case c07's UDP datagram over IPv6 (fd00::1 -> fd00::2), checksum 0x1EA3.
    static C07: [u8; 12] = [0xc0, 0x00, 0x23, 0x28, 0x00, 0x0c, 0x1e, 0xa3, 0x01, 0x02, 0x03, 0x04];

    #[test]
    fn parse_c03_length_governs() {
        let p = UdpPacket::new_checked(&C03[..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port(), p.len(), p.checksum()), (49152, 9000, 12, 0x04a5));
        assert_eq!(p.payload(), &[1, 2, 3, 4]);
        assert!(p.verify_checksum_v4(SRC4, DST4));
        // The same bytes checksummed with the padding would not verify.
        let mut b = C03;
        b[4..6].copy_from_slice(&26u16.to_be_bytes());
        assert!(!UdpPacket::new_checked(&b[..]).unwrap().verify_checksum_v4(SRC4, DST4));
    }

    #[test]
    fn c04_ffff_and_zero() {
        let p = UdpPacket::new_checked(&C04_FFFF[..]).unwrap();
        assert!(p.verify_checksum_v4(SRC4, DST4));
        // Refilling writes 0xFFFF, never 0.
        let mut b = C04_FFFF;
        let mut p = UdpPacket::new_checked(&mut b[..]).unwrap();
        p.fill_checksum_v4(SRC4, DST4);
        assert_eq!(p.checksum(), 0xffff);
        // Stored 0 over IPv4: no checksum, valid.
        let mut z = C03;
        z[6] = 0;
        z[7] = 0;
        assert!(UdpPacket::new_checked(&z[..]).unwrap().verify_checksum_v4(SRC4, DST4));
        // A wrong non-zero one fails.
        z[7] = 1;
        assert!(!UdpPacket::new_checked(&z[..]).unwrap().verify_checksum_v4(SRC4, DST4));
    }

    #[test]
    fn c07_v6_checksum_mandatory() {
        let p = UdpPacket::new_checked(&C07[..]).unwrap();
        assert!(p.verify_checksum_v6(&SRC6, &DST6));
        assert!(!p.verify_checksum_v6(&DST6, &DST6));
        let mut b = C07;
        b[6] = 0;
        b[7] = 0;
        let mut p = UdpPacket::new_checked(&mut b[..]).unwrap();
        assert!(!p.verify_checksum_v6(&SRC6, &DST6));
        p.fill_checksum_v6(&SRC6, &DST6);
        assert_eq!(p.checksum(), 0x1ea3);
    }

    /// The mutable payload is bytes 8..length (RFC 768): in c03, the four bytes 01 02 03 04 and
    /// none of the padding after the 12-byte datagram.
    #[test]
    fn payload_mut_is_bounded_by_the_length_field() {
        let mut b = C03;
        let mut p = UdpPacket::new_checked(&mut b[..]).unwrap();
        assert_eq!(p.payload_mut(), &[1, 2, 3, 4]);
        p.payload_mut().fill(0);
        assert_eq!(&b[..8], &C03[..8]);
        assert_eq!(&b[8..12], &[0; 4]);
        assert_eq!(&b[12..], &[0xaa; 14]);
    }

    #[test]
    fn negative_lengths() {
        assert_eq!(UdpPacket::new_checked(&C03[..7]).unwrap_err(), WireError::Truncated);
        // Length 12 but 11 bytes of IP payload.
        assert_eq!(UdpPacket::new_checked(&C03[..11]).unwrap_err(), WireError::BadLength);
        let mut b = C03;
        b[4..6].copy_from_slice(&7u16.to_be_bytes());
        assert_eq!(UdpPacket::new_checked(&b[..]).unwrap_err(), WireError::BadLength);
        b[4..6].copy_from_slice(&27u16.to_be_bytes());
        assert_eq!(UdpPacket::new_checked(&b[..]).unwrap_err(), WireError::BadLength);
        assert_eq!(UdpRepr::default().emit(&mut [0u8; 7]), Err(WireError::Truncated));
        let big = UdpRepr { payload_len: 65528, ..Default::default() };
        assert_eq!(big.emit(&mut [0u8; 8]), Err(WireError::BadLength));
    }

    proptest! {
        #[test]
        fn round_trip_v4(
            src_port in any::<u16>(), dst_port in any::<u16>(),
            payload in proptest::collection::vec(any::<u8>(), 0..600),
            src in any::<[u8; 4]>(), dst in any::<[u8; 4]>(),
        ) {
            let r = UdpRepr { src_port, dst_port, payload_len: payload.len() as u16 };
            let mut buf = vec![0u8; 8 + payload.len()];
            buf[8..].copy_from_slice(&payload);
            r.emit(&mut buf).unwrap();
            let mut p = UdpPacket::new_checked(&mut buf[..]).unwrap();
            p.fill_checksum_v4(src, dst);
            prop_assert_ne!(p.checksum(), 0);
            prop_assert!(p.verify_checksum_v4(src, dst));
            prop_assert_eq!(UdpRepr::parse(&p), r);
            prop_assert_eq!(p.payload(), &payload[..]);
        }

        #[test]
        fn round_trip_v6(
            payload in proptest::collection::vec(any::<u8>(), 0..600),
            src in any::<[u8; 16]>(), dst in any::<[u8; 16]>(), flip in any::<usize>(),
        ) {
            let r = UdpRepr { src_port: 1, dst_port: 2, payload_len: payload.len() as u16 };
            let mut buf = vec![0u8; 8 + payload.len()];
            buf[8..].copy_from_slice(&payload);
            r.emit(&mut buf).unwrap();
            let mut p = UdpPacket::new_checked(&mut buf[..]).unwrap();
            p.fill_checksum_v6(&src, &dst);
            prop_assert_ne!(p.checksum(), 0);
            prop_assert!(p.verify_checksum_v6(&src, &dst));
            // One flipped bit anywhere is caught.
            // (Outside the length field, which would change what is summed.)
            let i = flip % buf.len();
            prop_assume!(!(4..6).contains(&i));
            buf[i] ^= 0x10;
            let p = UdpPacket::new_checked(&buf[..]).unwrap();
            prop_assert!(!p.verify_checksum_v6(&src, &dst));
        }
    }
}
