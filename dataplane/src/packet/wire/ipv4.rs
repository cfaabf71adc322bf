//! IPv4 headers (RFC 791 section 3.1), options included; ECN bits per RFC 3168 section 5.
//!
//! ```text
//!  0       4       8             16    19                 31
//!  version  IHL     DSCP     ECN  total length
//!  identification                 flags  fragment offset
//!  TTL             protocol       header checksum
//!  source address
//!  destination address
//!  options (IHL - 5 words)
//! ```

use super::checksum;
use super::error::WireError;
use super::{be16, put_be16, Field};

mod field {
    use super::Field;
    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const LENGTH: Field = 2..4;
    pub const IDENT: Field = 4..6;
    pub const FLG_OFF: Field = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Field = 10..12;
    pub const SRC: Field = 12..16;
    pub const DST: Field = 16..20;
}

/// Length of a header without options (IHL 5) (bytes).
pub const MIN_HEADER_LEN: usize = 20;
/// Length of a header with the most options (IHL 15) (bytes).
pub const MAX_HEADER_LEN: usize = 60;

/// Option types (RFC 791 section 3.1; the copied flag included): End of Option List.
pub const OPT_END: u8 = 0;
/// No Operation (one byte, no length).
pub const OPT_NOP: u8 = 1;
/// Loose Source and Record Route.
pub const OPT_LSRR: u8 = 131;
/// Strict Source and Record Route.
pub const OPT_SSRR: u8 = 137;
/// Record Route.
pub const OPT_RR: u8 = 7;
/// Internet Timestamp.
pub const OPT_TS: u8 = 68;
/// Router Alert (RFC 2113).
pub const OPT_RA: u8 = 148;

/// IP protocol numbers the appliance looks at.
#[derive(Debug, Clone, Copy)]
pub struct Protocol;

impl Protocol {
    /// ICMP (RFC 792).
    pub const ICMP: u8 = 1;
    /// TCP (RFC 9293).
    pub const TCP: u8 = 6;
    /// UDP (RFC 768).
    pub const UDP: u8 = 17;
    /// ICMPv6 (RFC 4443).
    pub const ICMPV6: u8 = 58;
}

/// ECN codepoints (RFC 3168 section 5), the low 2 bits of the TOS / traffic class octet.
#[derive(Debug, Clone, Copy)]
pub struct Ecn;

impl Ecn {
    /// Not ECN-capable transport.
    pub const NOT_ECT: u8 = 0b00;
    /// ECN-capable transport, ECT(1).
    pub const ECT1: u8 = 0b01;
    /// ECN-capable transport, ECT(0).
    pub const ECT0: u8 = 0b10;
    /// Congestion experienced.
    pub const CE: u8 = 0b11;
}

/// A checked view of an IPv4 header and the datagram it heads.
///
/// `new_checked` guarantees: version 4; IHL >= 5; IHL * 4 <= bytes present; header length <=
/// total length <= bytes present. Bytes after `total_len` (Ethernet padding) are not part of the
/// datagram: [`Ipv4Packet::payload`] ends at `total_len`.
#[derive(Debug, Clone)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    view_constructors!(Ipv4Packet, "starting at the IPv4 header");

    /// Checks the header against the bytes present (RFC 791 section 3.1).
    ///
    /// # Errors
    /// - [`WireError::Truncated`]: fewer than 20 bytes.
    /// - [`WireError::BadVersion`]: version is not 4.
    /// - [`WireError::BadHeaderLen`]: IHL < 5, or IHL * 4 bytes not present.
    /// - [`WireError::BadLength`]: total length < IHL * 4, or more than the bytes present.
    pub fn check_len(&self) -> Result<(), WireError> {
        let b = self.buffer.as_ref();
        if b.len() < MIN_HEADER_LEN {
            return Err(WireError::Truncated);
        }
        if b[field::VER_IHL] >> 4 != 4 {
            return Err(WireError::BadVersion);
        }
        let hl = self.header_len();
        if hl < MIN_HEADER_LEN || hl > b.len() {
            return Err(WireError::BadHeaderLen);
        }
        let tl = self.total_len() as usize;
        if tl < hl || tl > b.len() {
            return Err(WireError::BadLength);
        }
        Ok(())
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Version (4 after the check).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// Internet Header Length in 32-bit words (5..=15).
    #[inline]
    pub fn ihl(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] & 0x0f
    }

    /// Header length, options included (bytes): IHL * 4.
    #[inline]
    pub fn header_len(&self) -> usize {
        self.ihl() as usize * 4
    }

    /// The whole TOS octet (DSCP << 2 | ECN).
    #[inline]
    pub fn tos(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN]
    }

    /// Differentiated Services Code Point (6 bits; RFC 2474).
    #[inline]
    pub fn dscp(&self) -> u8 {
        self.tos() >> 2
    }

    /// ECN field (2 bits; RFC 3168, see [`Ecn`]).
    #[inline]
    pub fn ecn(&self) -> u8 {
        self.tos() & 0b11
    }

    /// Total length of the datagram, header included (bytes).
    #[inline]
    pub fn total_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH.start)
    }

    /// Identification.
    #[inline]
    pub fn ident(&self) -> u16 {
        be16(self.buffer.as_ref(), field::IDENT.start)
    }

    /// The Don't Fragment flag.
    #[inline]
    pub fn dont_frag(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLG_OFF.start) & 0x4000 != 0
    }

    /// The More Fragments flag.
    #[inline]
    pub fn more_frags(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLG_OFF.start) & 0x2000 != 0
    }

    /// Fragment offset (bytes: the 13-bit field times 8).
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        (be16(self.buffer.as_ref(), field::FLG_OFF.start) & 0x1fff) << 3
    }

    /// True when this datagram is a fragment (More Fragments set or a non-zero offset); only the
    /// first fragment holds the upper-layer header, and none holds the whole upper-layer datagram.
    #[inline]
    pub fn is_fragment(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLG_OFF.start) & 0x3fff != 0
    }

    /// Time to live.
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// Protocol of the payload (see [`Protocol`]).
    #[inline]
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }

    /// The stored header checksum.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }

    /// Source address.
    #[inline(always)]
    pub fn src_addr(&self) -> [u8; 4] {
        let b = self.buffer.as_ref();
        [b[12], b[13], b[14], b[15]]
    }

    /// Destination address.
    #[inline(always)]
    pub fn dst_addr(&self) -> [u8; 4] {
        let b = self.buffer.as_ref();
        [b[16], b[17], b[18], b[19]]
    }

    /// The whole header, options included (IHL * 4 bytes).
    #[inline(always)]
    pub fn header(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.header_len()]
    }

    /// The options (IHL * 4 - 20 bytes; not interpreted).
    #[inline]
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[MIN_HEADER_LEN..self.header_len()]
    }

    /// The options walked and checked (RFC 791 section 3.1), and the final destination of an
    /// unfinished source route: `Ok(Some(address))` when they hold a Loose or Strict Source and
    /// Record Route (type 131 or 137) whose pointer is not past its length, that is addresses
    /// are left to visit and the header's destination is only the next hop. The address is the
    /// route's last (each hop replaces the slot it takes with its own address, so the slots
    /// from the pointer on are still the route, the last one the final destination; it is what
    /// the upper layer's pseudo-header holds, the destination the datagram will carry when it
    /// arrives); a route without a whole address gives the header's destination. `Ok(None)`
    /// without one, or with a finished one.
    ///
    /// Errors ([`WireError::BadOption`]), as a host or router that processes the options finds
    /// them (the checks Linux's `ip_options_compile` makes of a received packet, but CIPSO's):
    /// an option other than End of Option List and No Operation without a length byte, or whose
    /// length is below 2 or runs past the header; a source route or Record Route shorter than 3
    /// bytes or with a pointer below 4; a Timestamp shorter than 4 bytes or with a pointer
    /// below 5; a Router Alert shorter than 4 bytes; a second source route, Record Route or
    /// Timestamp (RFC 791: each appears at most once); a Record Route or Timestamp not full
    /// whose next entry (4 bytes, 8 with flag 1 or 3) runs past its length; a full Timestamp
    /// whose overflow count is 15. After End of Option List nothing is read (padding).
    #[inline]
    pub fn options_route(&self) -> Result<Option<[u8; 4]>, WireError> {
        let o = self.options();
        let mut route = None;
        // Record Route (1) and Timestamp (2) seen.
        let mut seen = 0u8;
        let mut i = 0;
        while i < o.len() {
            let t = o[i];
            match t {
                OPT_END => break,
                OPT_NOP => i += 1,
                _ => {
                    let len = *o.get(i + 1).ok_or(WireError::BadOption)? as usize;
                    if len < 2 || i + len > o.len() {
                        return Err(WireError::BadOption);
                    }
                    let (min_len, min_ptr) = match t {
                        OPT_LSRR | OPT_SSRR | OPT_RR => (3, 4),
                        OPT_TS | OPT_RA => (4, 5),
                        _ => (2, 0),
                    };
                    let min_ptr = if t == OPT_RA { 0 } else { min_ptr };
                    if len < min_len || (min_ptr > 0 && (o[i + 2] as usize) < min_ptr) {
                        return Err(WireError::BadOption);
                    }
                    if t == OPT_RR || t == OPT_TS {
                        // At most one of each; while not full, room for the next entry.
                        let bit = if t == OPT_RR { 1 } else { 2 };
                        if seen & bit != 0 {
                            return Err(WireError::BadOption);
                        }
                        seen |= bit;
                        let ptr = o[i + 2] as usize;
                        // (A Timestamp is at least 4 bytes here: its flags byte is its own.)
                        let entry = match t {
                            OPT_TS if matches!(o[i + 3] & 0xf, 1 | 3) => 8,
                            // Record Route, and timestamps alone (flag 0); Linux takes an
                            // unknown flag in a received packet, with room for 4 bytes.
                            _ => 4,
                        };
                        if ptr <= len && ptr + entry - 1 > len {
                            return Err(WireError::BadOption);
                        }
                        // A full Timestamp whose overflow count is at its most (15).
                        if t == OPT_TS && ptr > len && o[i + 3] >> 4 == 15 {
                            return Err(WireError::BadOption);
                        }
                    }
                    if t == OPT_LSRR || t == OPT_SSRR {
                        if route.is_some() {
                            return Err(WireError::BadOption);
                        }
                        // Unfinished while the pointer is not past the length: the last whole
                        // address of the route data (3 bytes of type, length and pointer,
                        // then 4 per address; a ragged tail is no address).
                        route = Some((o[i + 2] as usize <= len).then(|| match (len - 3) / 4 {
                            0 => self.dst_addr(),
                            n => {
                                let a = &o[i + 3 + 4 * (n - 1)..i + 3 + 4 * n];
                                [a[0], a[1], a[2], a[3]]
                            }
                        }));
                    }
                    i += len;
                }
            }
        }
        Ok(route.flatten())
    }

    /// [`Ipv4Packet::options_route`]'s route, `None` when the options are malformed too.
    #[inline]
    pub fn unfinished_source_route(&self) -> Option<[u8; 4]> {
        self.options_route().ok().flatten()
    }

    /// The payload: from the end of the header to `total_len` (padding after it excluded).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..self.total_len() as usize]
    }

    /// True when the header, options included, sums to 0xFFFF (RFC 791, RFC 1071): a stored
    /// checksum of 0x0000 that sums right is valid.
    #[inline(always)]
    pub fn verify_checksum(&self) -> bool {
        let h = self.header();
        // Without options (IHL 5, nearly every header) the length is a constant: three loads.
        let s = match <&[u8; 20]>::try_from(h) {
            Ok(h20) => checksum::sum_fixed(h20),
            Err(_) => checksum::sum(h),
        };
        s == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Sets version (high nibble of byte 0).
    #[inline]
    pub fn set_version(&mut self, v: u8) {
        let b = self.buffer.as_mut();
        b[field::VER_IHL] = (b[field::VER_IHL] & 0x0f) | (v << 4);
    }

    /// Sets IHL in 32-bit words (low 4 bits used).
    #[inline]
    pub fn set_ihl(&mut self, ihl: u8) {
        let b = self.buffer.as_mut();
        b[field::VER_IHL] = (b[field::VER_IHL] & 0xf0) | (ihl & 0x0f);
    }

    /// Sets the whole TOS octet. The checksum is not updated (see [`Ipv4Packet::update_tos`]).
    #[inline]
    pub fn set_tos(&mut self, tos: u8) {
        self.buffer.as_mut()[field::DSCP_ECN] = tos;
    }

    /// Sets DSCP (low 6 bits used), keeping ECN. The checksum is not updated.
    #[inline]
    pub fn set_dscp(&mut self, dscp: u8) {
        let tos = (self.tos() & 0b11) | (dscp << 2);
        self.set_tos(tos);
    }

    /// Sets ECN (low 2 bits used), keeping DSCP. The checksum is not updated.
    #[inline]
    pub fn set_ecn(&mut self, ecn: u8) {
        let tos = (self.tos() & !0b11) | (ecn & 0b11);
        self.set_tos(tos);
    }

    /// Sets the total length (bytes).
    #[inline]
    pub fn set_total_len(&mut self, len: u16) {
        put_be16(self.buffer.as_mut(), field::LENGTH.start, len);
    }

    /// Sets the identification.
    #[inline]
    pub fn set_ident(&mut self, id: u16) {
        put_be16(self.buffer.as_mut(), field::IDENT.start, id);
    }

    /// Sets the flags and fragment offset: `frag_offset` in bytes, a multiple of 8 (the low 3
    /// bits are dropped).
    #[inline]
    pub fn set_frag(&mut self, dont_frag: bool, more_frags: bool, frag_offset: u16) {
        let v = ((dont_frag as u16) << 14) | ((more_frags as u16) << 13) | (frag_offset >> 3);
        put_be16(self.buffer.as_mut(), field::FLG_OFF.start, v);
    }

    /// Sets the TTL. The checksum is not updated (see [`Ipv4Packet::update_ttl`]).
    #[inline]
    pub fn set_ttl(&mut self, ttl: u8) {
        self.buffer.as_mut()[field::TTL] = ttl;
    }

    /// Sets the protocol.
    #[inline]
    pub fn set_protocol(&mut self, p: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = p;
    }

    /// Stores `ck` in the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, ck: u16) {
        put_be16(self.buffer.as_mut(), field::CHECKSUM.start, ck);
    }

    /// Sets the source address.
    #[inline]
    pub fn set_src_addr(&mut self, a: [u8; 4]) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a);
    }

    /// Sets the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, a: [u8; 4]) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a);
    }

    /// Computes the header checksum over IHL * 4 bytes and stores it (RFC 791). IHL must be
    /// set and its bytes present (as after `new_checked`).
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let ck = checksum::checksum(self.header());
        self.set_checksum(ck);
    }

    /// Sets the TOS octet and updates the checksum incrementally (RFC 1624 equation 3): the
    /// result equals [`Ipv4Packet::fill_checksum`]'s.
    #[inline]
    pub fn update_tos(&mut self, tos: u8) {
        let old = be16(self.buffer.as_ref(), 0);
        self.set_tos(tos);
        let new = be16(self.buffer.as_ref(), 0);
        let ck = checksum::update16(self.checksum(), old, new);
        self.set_checksum(ck);
    }

    /// Sets the TTL and updates the checksum incrementally (RFC 1624 equation 3).
    #[inline]
    pub fn update_ttl(&mut self, ttl: u8) {
        let old = be16(self.buffer.as_ref(), field::TTL);
        self.set_ttl(ttl);
        let new = be16(self.buffer.as_ref(), field::TTL);
        let ck = checksum::update16(self.checksum(), old, new);
        self.set_checksum(ck);
    }

    /// The payload, mutable (header end to `total_len`).
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (s, e) = (self.header_len(), self.total_len() as usize);
        &mut self.buffer.as_mut()[s..e]
    }
}

/// A decoded IPv4 header without options (IHL 5), for building datagrams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ipv4Repr {
    /// Source address.
    pub src_addr: [u8; 4],
    /// Destination address.
    pub dst_addr: [u8; 4],
    /// Protocol of the payload.
    pub protocol: u8,
    /// Payload length (bytes); total length is this plus 20.
    pub payload_len: u16,
    /// Time to live.
    pub ttl: u8,
    /// DSCP (6 bits).
    pub dscp: u8,
    /// ECN (2 bits).
    pub ecn: u8,
    /// Identification.
    pub ident: u16,
    /// Don't Fragment.
    pub dont_frag: bool,
}

impl Ipv4Repr {
    /// Decodes a checked header (options, if any, are skipped; fragment fields other than DF
    /// are not represented).
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv4Packet<T>) -> Self {
        Ipv4Repr {
            src_addr: p.src_addr(),
            dst_addr: p.dst_addr(),
            protocol: p.protocol(),
            payload_len: p.total_len() - p.header_len() as u16,
            ttl: p.ttl(),
            dscp: p.dscp(),
            ecn: p.ecn(),
            ident: p.ident(),
            dont_frag: p.dont_frag(),
        }
    }

    /// Length of the header this emits (bytes).
    pub const fn header_len(&self) -> usize {
        MIN_HEADER_LEN
    }

    /// Writes a 20-byte header with its checksum into the first 20 bytes of `buf`.
    ///
    /// # Errors
    /// [`WireError::Truncated`] if `buf` is shorter than 20 bytes; [`WireError::BadLength`] if
    /// 20 + `payload_len` exceeds 65535.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        if buf.len() < MIN_HEADER_LEN {
            return Err(WireError::Truncated);
        }
        let total = (self.payload_len as usize + MIN_HEADER_LEN).try_into().map_err(|_| WireError::BadLength)?;
        let mut p = Ipv4Packet::new_unchecked(&mut buf[..MIN_HEADER_LEN]);
        p.set_version(4);
        p.set_ihl(5);
        p.set_tos((self.dscp << 2) | (self.ecn & 0b11));
        p.set_total_len(total);
        p.set_ident(self.ident);
        p.set_frag(self.dont_frag, false, 0);
        p.set_ttl(self.ttl);
        p.set_protocol(self.protocol);
        p.set_src_addr(self.src_addr);
        p.set_dst_addr(self.dst_addr);
        p.fill_checksum();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // Case c02: IHL 6 with one 4-byte option (01 01 01 00), then UDP 10.0.0.1:49152 ->
    // 10.0.0.2:9000 with payload 01 02 03 04 (the frame from byte 14).
    static C02: [u8; 36] = [
        0x46, 0x02, 0x00, 0x24, 0x12, 0x34, 0x40, 0x00, 0x40, 0x11, 0x11, 0x90, 0x0a, 0x00, 0x00, 0x01, 0x0a, 0x00,
        0x00, 0x02, 0x01, 0x01, 0x01, 0x00, 0xc0, 0x00, 0x23, 0x28, 0x00, 0x0c, 0x04, 0xa5, 0x01, 0x02, 0x03, 0x04,
    ];

    // Case c05 from byte 14: TOS 0x02, stored checksum 0x0001, then 14 bytes of padding.
    static C05: [u8; 46] = [
        0x45, 0x02, 0x00, 0x20, 0x26, 0xc8, 0x40, 0x00, 0x40, 0x11, 0x00, 0x01, 0x0a, 0x00, 0x00, 0x01, 0x0a, 0x00,
        0x00, 0x02, 0xc0, 0x00, 0x23, 0x28, 0x00, 0x0c, 0x00, 0x00, 0x01, 0x02, 0x03, 0x04, 0xaa, 0xaa, 0xaa, 0xaa,
        0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa,
    ];

    /// C02's header with `opts` (a multiple of 4 bytes) as its options.
    fn with_options(opts: &[u8]) -> Vec<u8> {
        let mut h = C02[..20].to_vec();
        h[0] = 0x45 + (opts.len() / 4) as u8;
        h.extend_from_slice(opts);
        h.extend_from_slice(&C02[24..]);
        h
    }

    #[test]
    fn unfinished_source_routes_name_their_final_destination() {
        let route = |opts: &[u8]| Ipv4Packet::new_unchecked(with_options(opts)).unfinished_source_route();
        let (a, b) = ([10, 9, 9, 1], [10, 9, 9, 2]);
        // Loose and strict, two addresses: unfinished while the pointer is at an address (4 or
        // 8), finished past the length (12); the final destination is the last address.
        let two = |ty: u8, ptr: u8| [&[1, ty, 11, ptr][..], &a, &b].concat();
        for ty in [OPT_LSRR, OPT_SSRR] {
            assert_eq!(route(&two(ty, 4)), Some(b));
            assert_eq!(route(&two(ty, 8)), Some(b));
            assert_eq!(route(&two(ty, 12)), None);
        }
        // Record Route (7) and Timestamp (68) are no source route; the walk steps over them.
        assert_eq!(route(&[7, 7, 4, 0, 0, 0, 0, 1]), None);
        assert_eq!(route(&[&[7, 7, 4, 0, 0, 0, 0][..], &[131, 7, 4], &a, &[0, 0]].concat()), Some(a));
        // After End of Option List nothing is read; a length below 2 or past the header ends
        // the walk too.
        assert_eq!(route(&[&[0, 131, 7, 4][..], &a].concat()), None);
        assert_eq!(route(&[&[68, 1, 0, 0][..], &[131, 7, 4], &a, &[1]].concat()), None);
        assert_eq!(route(&[1, 1, 131, 9, 4, 10, 9, 9]), None);
        // A route without its pointer is none; one without a whole address leaves the header's
        // destination as the final one.
        assert_eq!(route(&[131, 2, 0, 0]), None);
        assert_eq!(route(&[131, 4, 4, 0]), Some([10, 0, 0, 2]));
        // A ragged route (length 9: one address and 2 bytes): its last whole address.
        assert_eq!(route(&[&[131, 9, 4][..], &a, &[7, 7, 0, 0, 0]].concat()), Some(a));
        // Without options: none, whatever follows the header.
        assert_eq!(Ipv4Packet::new_unchecked(&C05[..]).unfinished_source_route(), None);
    }

    /// Options that break RFC 791's format are errors wherever they stand, a source route
    /// after them included; well-formed ones walk to their route.
    #[test]
    fn malformed_options_are_errors() {
        let walk = |opts: &[u8]| Ipv4Packet::new_unchecked(with_options(opts)).options_route();
        let a = [10, 9, 9, 1];
        let lsrr = [&[131, 7, 4][..], &a].concat();
        let bad: &[&[u8]] = &[
            &[68, 1, 0, 0],                // a length below 2
            &[68, 0, 0, 0],                // length 0
            &[7, 9, 4, 0],                 // Record Route past the header
            &[1, 1, 1, 7],                 // a type without its length byte
            &[7, 2, 0, 0],                 // Record Route without a pointer
            &[7, 3, 3, 0],                 // its pointer below 4
            &[68, 4, 4, 0],                // Timestamp's pointer below 5
            &[68, 3, 5, 0],                // Timestamp shorter than 4
            &[131, 3, 3, 0],               // a source route's pointer below 4
            &[137, 2, 1, 0],               // a source route of 2 bytes
            &[7, 7, 5, 0, 0, 0, 0, 0],     // Record Route's pointer at a partial slot
            &[68, 8, 5, 1, 0, 0, 0, 0],    // Timestamp with addresses, no room for one
            &[68, 8, 9, 0xf0, 0, 0, 0, 0], // full, overflow count 15
            &[7, 3, 4, 7, 3, 4, 0, 0],     // two Record Routes
            &[68, 4, 5, 0, 68, 4, 5, 0],   // two Timestamps
            &[148, 2, 0, 0],               // Router Alert of 2 bytes
        ];
        for &o in bad {
            assert_eq!(walk(o), Err(WireError::BadOption), "{o:?}");
            // The route behind them is not reached, and is no route.
            let behind = [o, &lsrr[..], &[0]].concat();
            assert_eq!(walk(&behind), Err(WireError::BadOption), "{behind:?}");
            assert_eq!(Ipv4Packet::new_unchecked(with_options(&behind)).unfinished_source_route(), None);
        }
        // Two source routes.
        assert_eq!(walk(&[&lsrr[..], &lsrr, &[0, 0]].concat()), Err(WireError::BadOption));
        // Well-formed: NOPs, Router Alert, Record Route, Timestamp, then the route; padding
        // after End of Option List is not read.
        let good = [&[1, 148, 4, 0, 0, 7, 7, 4, 0, 0, 0, 0, 68, 8, 5, 0, 0, 0, 0, 0][..], &lsrr, &[0]].concat();
        assert_eq!(walk(&good), Ok(Some(a)));
        assert_eq!(walk(&[0, 68, 1, 0]), Ok(None));
        assert_eq!(walk(&[1, 1, 1, 0]), Ok(None));
        // Full ones (pointer past the length) and an unknown flag, as Linux takes them: Record
        // Route and Timestamp full, a full Timestamp counting 14 overflows, flag 5 with room.
        assert_eq!(walk(&[7, 7, 8, 0, 0, 0, 0, 0]), Ok(None));
        assert_eq!(walk(&[68, 12, 13, 1, 0, 0, 0, 0, 0, 0, 0, 0]), Ok(None));
        assert_eq!(walk(&[68, 8, 9, 0xe0, 0, 0, 0, 0]), Ok(None));
        assert_eq!(walk(&[68, 8, 5, 5, 0, 0, 0, 0]), Ok(None));
        // A finished route is no route, but still judged as an option.
        assert_eq!(walk(&[&[131, 7, 8][..], &a, &[0]].concat()), Ok(None));
    }

    #[test]
    fn parse_with_options() {
        let p = Ipv4Packet::new_checked(&C02[..]).unwrap();
        assert_eq!((p.version(), p.ihl(), p.header_len()), (4, 6, 24));
        assert_eq!((p.dscp(), p.ecn(), p.tos()), (0, Ecn::ECT0, 0x02));
        assert_eq!((p.total_len(), p.ident(), p.ttl(), p.protocol()), (36, 0x1234, 64, 17));
        assert!(p.dont_frag() && !p.more_frags() && !p.is_fragment());
        assert_eq!(p.frag_offset(), 0);
        assert_eq!(p.checksum(), 0x1190);
        assert_eq!((p.src_addr(), p.dst_addr()), ([10, 0, 0, 1], [10, 0, 0, 2]));
        assert_eq!(p.options(), &[1, 1, 1, 0]);
        assert_eq!(&p.payload()[..4], &[0xc0, 0x00, 0x23, 0x28]);
        assert_eq!(p.payload().len(), 12);
        assert!(p.verify_checksum());
    }

    #[test]
    fn padding_is_not_payload_and_checksum_0001() {
        let p = Ipv4Packet::new_checked(&C05[..]).unwrap();
        assert_eq!(p.payload().len(), 12);
        assert!(p.verify_checksum());
    }

    #[test]
    fn c05_update_tos_gives_0000_like_recompute() {
        let mut b = C05;
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        p.update_tos(0x03);
        assert_eq!(p.checksum(), 0x0000);
        assert!(p.verify_checksum());
        let inc = p.checksum();
        p.fill_checksum();
        assert_eq!(p.checksum(), inc);
        // A stored 0x0000 that sums right is valid.
        assert!(Ipv4Packet::new_checked(&b[..]).unwrap().verify_checksum());
    }

    #[test]
    fn update_ttl_and_bad_checksum() {
        let mut b = C02;
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        p.update_ttl(63);
        assert!(p.verify_checksum());
        p.set_ttl(62);
        assert!(!p.verify_checksum());
    }

    #[test]
    fn set_ecn_keeps_dscp() {
        let mut b = C02;
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        p.set_dscp(26);
        p.set_ecn(Ecn::CE);
        assert_eq!((p.dscp(), p.ecn(), p.tos()), (26, 3, 0x6b));
        p.set_ecn(Ecn::NOT_ECT);
        assert_eq!(p.tos(), 0x68);
        p.set_frag(false, true, 1480);
        assert!(p.more_frags() && !p.dont_frag() && p.is_fragment());
        assert_eq!(p.frag_offset(), 1480);
    }

    /// The mutable payload is the same range as the payload: from the end of the header, options
    /// included (24 bytes in c02), to the total length (c05's 14 bytes of Ethernet padding after
    /// its 32-byte datagram are not part of it).
    #[test]
    fn payload_mut_spans_header_end_to_total_length() {
        let mut b = C02;
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        assert_eq!(p.payload_mut().len(), 36 - 24);
        p.payload_mut().fill(0xee);
        assert_eq!(&b[..24], &C02[..24]);
        assert_eq!(&b[24..], &[0xee; 12]);

        let mut b = C05;
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        assert_eq!(p.payload_mut().len(), 32 - 20);
        p.payload_mut().fill(0);
        assert_eq!(&b[..20], &C05[..20]);
        assert_eq!(&b[20..32], &[0; 12]);
        assert_eq!(&b[32..], &[0xaa; 14]);
    }

    /// A decoded header emits 20 bytes (IHL 5, no options), and `header_len` says so.
    #[test]
    fn repr_header_len_is_twenty() {
        let r = Ipv4Repr { payload_len: 4, ttl: 64, protocol: 17, ..Default::default() };
        assert_eq!(r.header_len(), 20);
        let mut buf = [0x55u8; 24];
        r.emit(&mut buf).unwrap();
        assert_eq!(buf[0], 0x45);
        assert_eq!(&buf[r.header_len()..], &[0x55; 4], "emit writes the header only");
    }

    /// DSCP is the high six bits of the TOS octet and ECN the low two (RFC 2474 section 3, RFC
    /// 3168 section 5): setting the DSCP of c02 (TOS 0x02, ECT(0)) to 46 gives 0xBA, ECN kept.
    #[test]
    fn set_dscp_keeps_ecn() {
        let mut b = C02;
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        p.set_dscp(46);
        assert_eq!((p.tos(), p.dscp(), p.ecn()), (0xba, 46, Ecn::ECT0));
        p.set_dscp(0);
        assert_eq!(p.tos(), 0x02);
    }

    /// Version and IHL share the first octet (RFC 791 section 3.1: version in the high four bits,
    /// IHL in the low four): setting one keeps the other.
    #[test]
    fn version_and_ihl_setters_keep_each_others_nibble() {
        let mut b = C02;
        let mut p = Ipv4Packet::new_unchecked(&mut b[..]);
        p.set_version(6);
        assert_eq!((p.version(), p.ihl()), (6, 6));
        p.set_ihl(15);
        assert_eq!((p.version(), p.ihl()), (6, 15));
        p.set_version(4);
        p.set_ihl(0x17);
        assert_eq!((p.version(), p.ihl()), (4, 7), "only the low four bits of the IHL are used");
        assert_eq!(b[0], 0x47);
        assert_eq!(&b[1..], &C02[1..]);
    }

    // Case c01's three headers (IHL 4; IHL 0; IHL 5 with total length 10).
    #[test]
    fn c01_bad_ihl_and_total_len() {
        let mut b = C05;
        b[0] = 0x44;
        assert_eq!(Ipv4Packet::new_checked(&b[..]).unwrap_err(), WireError::BadHeaderLen);
        b[0] = 0x40;
        assert_eq!(Ipv4Packet::new_checked(&b[..]).unwrap_err(), WireError::BadHeaderLen);
        b[0] = 0x45;
        b[2..4].copy_from_slice(&10u16.to_be_bytes());
        assert_eq!(Ipv4Packet::new_checked(&b[..]).unwrap_err(), WireError::BadLength);
    }

    #[test]
    fn negative_lengths() {
        // Shorter than 20 bytes.
        assert_eq!(Ipv4Packet::new_checked(&C02[..19]).unwrap_err(), WireError::Truncated);
        // IHL 6 but only 22 bytes present.
        assert_eq!(Ipv4Packet::new_checked(&C02[..22]).unwrap_err(), WireError::BadHeaderLen);
        // Total length 36 but 30 bytes present.
        assert_eq!(Ipv4Packet::new_checked(&C02[..30]).unwrap_err(), WireError::BadLength);
        // IHL 15 in a 36-byte buffer.
        let mut b = C02;
        b[0] = 0x4f;
        assert_eq!(Ipv4Packet::new_checked(&b[..]).unwrap_err(), WireError::BadHeaderLen);
        // Version 6.
        b[0] = 0x65;
        assert_eq!(Ipv4Packet::new_checked(&b[..]).unwrap_err(), WireError::BadVersion);
        // Emit into too small a buffer.
        assert_eq!(Ipv4Repr::default().emit(&mut [0u8; 19]), Err(WireError::Truncated));
        let big = Ipv4Repr { payload_len: 65516, ..Default::default() };
        assert_eq!(big.emit(&mut [0u8; 20]), Err(WireError::BadLength));
    }

    proptest! {
        #[test]
        fn round_trip(
            src_addr in any::<[u8; 4]>(), dst_addr in any::<[u8; 4]>(), protocol in any::<u8>(),
            payload_len in 0u16..1500, ttl in any::<u8>(), dscp in 0u8..64, ecn in 0u8..4,
            ident in any::<u16>(), dont_frag in any::<bool>(),
        ) {
            let r = Ipv4Repr { src_addr, dst_addr, protocol, payload_len, ttl, dscp, ecn, ident, dont_frag };
            let mut buf = vec![0u8; 20 + payload_len as usize];
            r.emit(&mut buf).unwrap();
            let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
            prop_assert!(p.verify_checksum());
            prop_assert_eq!(Ipv4Repr::parse(&p), r);
            // Any truncation of the datagram is refused.
            for cut in [0, 19, 20 + payload_len as usize / 2] {
                if cut < buf.len() {
                    prop_assert!(Ipv4Packet::new_checked(&buf[..cut]).is_err());
                }
            }
        }

        /// Incremental TOS/TTL rewrites leave exactly the fully recomputed checksum.
        #[test]
        fn incremental_rewrites(
            options in proptest::collection::vec(any::<u8>(), 0..=10).prop_map(|mut v| { v.truncate(v.len() / 4 * 4); v }),
            tos in any::<u8>(), ttl in any::<u8>(), seed in any::<[u8; 20]>(),
        ) {
            let hl = 20 + options.len();
            let mut buf = vec![0u8; hl];
            buf[..20].copy_from_slice(&seed);
            buf[20..].copy_from_slice(&options);
            buf[0] = 0x40 | (hl / 4) as u8;
            buf[2..4].copy_from_slice(&(hl as u16).to_be_bytes());
            let mut p = Ipv4Packet::new_checked(&mut buf[..]).unwrap();
            p.fill_checksum();
            p.update_tos(tos);
            p.update_ttl(ttl);
            let inc = p.checksum();
            p.fill_checksum();
            prop_assert_eq!(inc, p.checksum());
            prop_assert!(p.verify_checksum());
        }
    }
}
