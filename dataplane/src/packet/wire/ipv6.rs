//! IPv6 headers (RFC 8200 section 3) and a bounded walk over extension headers (RFC 8200 section
//! 4); ECN bits of the traffic class per RFC 3168 section 5.
//!
//! ```text
//!  0       4               12                               31
//!  version  traffic class   flow label
//!  payload length                  next header   hop limit
//!  source address (16 bytes)
//!  destination address (16 bytes)
//! ```
//!
//! The traffic class is DSCP (6 bits) then ECN (2 bits), so it straddles bytes 0 and 1: the
//! setters rewrite only their own bits of the first 32-bit word and keep the version and the flow
//! label.

use super::error::WireError;
use super::{be16, be32, put_be16, put_be32, Field};

mod field {
    use super::Field;
    pub const VER_TC_FLOW: Field = 0..4;
    pub const PAYLOAD_LEN: Field = 4..6;
    pub const NEXT_HEADER: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: Field = 8..24;
    pub const DST: Field = 24..40;

    // Generic extension header (Hop-by-Hop, Routing, Destination Options): next header, length in
    // 8-byte units not counting the first 8 bytes.
    pub const EXT_NEXT_HEADER: usize = 0;
    pub const EXT_LEN: usize = 1;
    // Routing header (RFC 8200 section 4.4): routing type, segments left, then type-specific
    // data from byte 8 (the addresses of types 0 and 2, the segment list of type 4).
    pub const RT_TYPE: usize = 2;
    pub const RT_SEGMENTS_LEFT: usize = 3;
    pub const RT_ADDRESSES: usize = 8;
    // Fragment header (RFC 8200 section 4.5), 8 bytes.
    pub const FRAG_OFF_M: Field = 2..4;
    pub const FRAG_IDENT: Field = 4..8;
}

/// Length of the fixed IPv6 header (bytes).
pub const HEADER_LEN: usize = 40;
/// Length of a Fragment header (bytes).
pub const FRAGMENT_HEADER_LEN: usize = 8;
/// Most extension headers [`Ipv6Packet::walk_extensions`] follows before refusing the chain.
pub const MAX_EXTENSION_HEADERS: usize = 8;

/// Next-header values for the extension headers the walk understands (RFC 8200 section 4).
#[derive(Debug, Clone, Copy)]
pub struct NextHeader;

impl NextHeader {
    /// Hop-by-Hop Options (must come first).
    pub const HOP_BY_HOP: u8 = 0;
    /// Routing.
    pub const ROUTING: u8 = 43;
    /// Fragment.
    pub const FRAGMENT: u8 = 44;
    /// Destination Options.
    pub const DEST_OPTS: u8 = 60;
    /// Authentication Header (RFC 4302): its length byte counts 4-byte units, minus 2.
    pub const AUTH: u8 = 51;
    /// Encapsulating Security Payload (RFC 4303): what follows is encrypted, so the walk ends
    /// there, as at an upper layer.
    pub const ESP: u8 = 50;
    /// Mobility header (RFC 6275), in the generic format (RFC 6564).
    pub const MOBILITY: u8 = 135;
    /// Host Identity Protocol (RFC 7401), in the generic format.
    pub const HIP: u8 = 139;
    /// Shim6 (RFC 5533), in the generic format.
    pub const SHIM6: u8 = 140;
    /// No next header: nothing follows (RFC 8200 section 4.7).
    pub const NO_NEXT: u8 = 59;
}

/// A checked view of an IPv6 fixed header and the datagram it heads.
///
/// `new_checked` guarantees: version 6; 40 + payload length <= bytes present. Bytes after the
/// payload (Ethernet padding) are not part of the datagram.
#[derive(Debug, Clone)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

/// What the extension-header walk found: where the upper layer starts and whether it may be
/// parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExtensionChain {
    /// The upper-layer protocol (the next header after the last extension header; for a
    /// non-first fragment, the Fragment header's next header).
    pub upper_protocol: u8,
    /// Fixed header plus extension headers (bytes): the offset of the upper layer.
    pub header_len: usize,
    /// Extension headers walked.
    pub count: u8,
    /// A Fragment header was found (any offset or M flag, atomic fragments included).
    pub has_fragment_header: bool,
    /// A Fragment header with a non-zero offset: the bytes after it are the middle of another
    /// datagram's upper layer, never a UDP header. The walk stops at that header.
    pub non_first_fragment: bool,
    /// A Fragment header with M set (more fragments follow).
    pub more_fragments: bool,
    /// Fragment offset (bytes: the 13-bit field times 8), 0 without a Fragment header.
    pub frag_offset: u16,
    /// Fragment identification, 0 without a Fragment header.
    pub frag_ident: u32,
    /// Where a Routing header with segments left names the final destination (offset of its
    /// 16 bytes from the start of the IPv6 header), 0 otherwise. The upper-layer checksum's
    /// pseudo-header uses that address instead of the header's destination (RFC 8200 section
    /// 8.1): see [`Ipv6Packet::checksum_dst_addr`].
    pub final_dst_offset: u16,
    /// Leading bytes of the final destination that its Routing header elides, taken from the
    /// IPv6 header's destination instead (RFC 6554 section 3, CmprE of an RPL Source Route
    /// Header); the other `16 - final_dst_elided` bytes are at `final_dst_offset`. 0 for the
    /// other types.
    pub final_dst_elided: u8,
    /// A Routing header says more segments are left than it holds addresses (RFC 8200 section
    /// 4.4; for a Segment Routing Header, more than Last Entry + 1, RFC 8754 section 4.3.1.1),
    /// or has segments left on a Routing type this walk does not know (types 0, 2, 3 and 4 are
    /// known). The node the packet is addressed to must discard it; a transit node does not
    /// judge it.
    pub bad_segments_left: bool,
    /// A Routing header has segments left (any type, any count but 0): the header's
    /// destination is not the final one, only the node that processes that header (RFC 8200
    /// section 4.4).
    pub segments_left: bool,
    /// A Hop-by-Hop or Destination Options header holds an option this walk does not know
    /// (anything but Pad1 and PadN) whose type's two high-order bits ask a node that does not
    /// recognise it to discard the packet (01, 10, 11: RFC 8200 section 4.2), or options whose
    /// lengths run past their header. The packet's destination, or a node that processes its
    /// Hop-by-Hop options, must discard it; a transit node does not judge it.
    pub discard_option: bool,
}

/// True when the options area `opts` of a Hop-by-Hop or Destination Options header (its bytes
/// after Next Header and Hdr Ext Len) holds an option whose unrecognised type says to discard
/// the packet (RFC 8200 section 4.2: the type's two high-order bits not 00; Pad1 (0) and PadN
/// (1) are the only types known here), or an option running past the area.
fn options_say_discard(opts: &[u8]) -> bool {
    let mut i = 0;
    while i < opts.len() {
        let t = opts[i];
        if t == 0 {
            i += 1;
            continue;
        }
        let Some(&len) = opts.get(i + 1) else { return true };
        if t != 1 && t & 0xc0 != 0 {
            return true;
        }
        i += 2 + len as usize;
    }
    i > opts.len()
}

/// Where the last address of an RPL Source Route Header (`rh`: the whole header, its length
/// checked) starts and how many of its leading bytes are elided (RFC 6554 section 3): `n =
/// ((len - 8) - Pad - (16 - CmprE)) / (16 - CmprI) + 1` addresses, the first `n - 1` of
/// `16 - CmprI` bytes each, the last of `16 - CmprE`, each missing the leading bytes it shares
/// with the IPv6 destination. `None` when the header holds no whole last address.
fn rpl_last_address(rh: &[u8]) -> Option<(usize, usize)> {
    let (cmpr_i, cmpr_e) = ((rh[4] >> 4) as usize, (rh[4] & 0x0f) as usize);
    let pad = (rh[5] >> 4) as usize;
    let body = (rh.len() - field::RT_ADDRESSES).checked_sub(pad)?;
    let rest = body.checked_sub(16 - cmpr_e)?;
    let before = rest / (16 - cmpr_i);
    Some((field::RT_ADDRESSES + before * (16 - cmpr_i), cmpr_e))
}

/// Number of addresses an RPL Source Route Header (`rh`: the whole header, its length checked)
/// holds (RFC 6554 section 3): `((len - 8) - Pad - (16 - CmprE)) / (16 - CmprI) + 1`, or 0 when
/// it holds no whole last address.
fn rpl_addresses(rh: &[u8]) -> usize {
    let cmpr_i = (rh[4] >> 4) as usize;
    rpl_last_address(rh).map_or(0, |(at, _)| (at - field::RT_ADDRESSES) / (16 - cmpr_i) + 1)
}

/// Addresses a Routing header (`rh`: the whole header, its length checked) holds, per its type
/// (RFC 8200 section 4.4): 16-byte addresses for type 0 (RFC 5095) and type 2 (RFC 6275); Last
/// Entry + 1 segments, as far as the header holds them, for a Segment Routing Header (type 4,
/// RFC 8754 section 2); the compressed addresses of an RPL Source Route Header (type 3, RFC
/// 6554). `None` for other types.
fn routing_addresses(rh: &[u8]) -> Option<usize> {
    let full = (rh.len() - field::RT_ADDRESSES) / 16;
    match rh[field::RT_TYPE] {
        0 | 2 => Some(full),
        4 => Some((rh[4] as usize + 1).min(full)),
        3 => Some(rpl_addresses(rh)),
        _ => None,
    }
}

impl ExtensionChain {
    /// True when the datagram is a fragment (offset non-zero or more fragments follow); an
    /// atomic fragment (offset 0, M clear; RFC 6946) is a whole datagram and is not.
    pub fn is_fragment(&self) -> bool {
        self.non_first_fragment || self.more_fragments
    }
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    view_constructors!(Ipv6Packet, "starting at the IPv6 header");

    /// Checks the fixed header against the bytes present (RFC 8200 section 3).
    ///
    /// # Errors
    /// - [`WireError::Truncated`]: fewer than 40 bytes.
    /// - [`WireError::BadVersion`]: version is not 6.
    /// - [`WireError::BadLength`]: 40 + payload length is more than the bytes present.
    pub fn check_len(&self) -> Result<(), WireError> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        if self.version() != 6 {
            return Err(WireError::BadVersion);
        }
        if HEADER_LEN + self.payload_len() as usize > b.len() {
            return Err(WireError::BadLength);
        }
        Ok(())
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    #[inline]
    fn word0(&self) -> u32 {
        be32(self.buffer.as_ref(), field::VER_TC_FLOW.start)
    }

    /// Version (6 after the check).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }

    /// Traffic class (8 bits: DSCP << 2 | ECN).
    #[inline]
    pub fn traffic_class(&self) -> u8 {
        (self.word0() >> 20) as u8
    }

    /// DSCP (6 bits; RFC 2474).
    #[inline]
    pub fn dscp(&self) -> u8 {
        self.traffic_class() >> 2
    }

    /// ECN (2 bits; RFC 3168).
    #[inline]
    pub fn ecn(&self) -> u8 {
        self.traffic_class() & 0b11
    }

    /// Flow label (20 bits; RFC 6437).
    #[inline]
    pub fn flow_label(&self) -> u32 {
        self.word0() & 0x000f_ffff
    }

    /// Payload length: bytes after the fixed header, extension headers included.
    #[inline]
    pub fn payload_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::PAYLOAD_LEN.start)
    }

    /// Next header of the fixed header (the first extension header or the upper layer).
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NEXT_HEADER]
    }

    /// Hop limit.
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> [u8; 16] {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        a
    }

    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> [u8; 16] {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        a
    }

    /// The destination address of upper-layer checksums (RFC 8200 section 8.1): the final
    /// destination a Routing header of `chain` names, else the header's destination.
    #[inline]
    pub fn checksum_dst_addr(&self, chain: &ExtensionChain) -> [u8; 16] {
        match chain.final_dst_offset as usize {
            0 => self.dst_addr(),
            o => {
                let mut a = self.dst_addr();
                let e = chain.final_dst_elided as usize;
                a[e..].copy_from_slice(&self.buffer.as_ref()[o..o + 16 - e]);
                a
            }
        }
    }

    /// The payload: `payload_len` bytes after the fixed header (padding excluded).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..HEADER_LEN + self.payload_len() as usize]
    }

    /// Walks the extension headers after the fixed header (RFC 8200 section 4): Hop-by-Hop (0,
    /// first only), Routing (43), Fragment (44), Destination Options (60), Authentication Header
    /// (51, RFC 4302) and the generic-format Mobility (135), HIP (139) and Shim6 (140) headers
    /// (RFC 6564). Any other next header (ESP and No Next Header included) ends the walk as the
    /// upper layer. Every length is checked against the payload length; the walk stops at a
    /// Fragment header with a non-zero offset. A datagram is a fragment when any of its
    /// Fragment headers says so.
    ///
    /// # Errors
    /// - [`WireError::BadHeaderLen`]: an extension header runs past the payload.
    /// - [`WireError::Truncated`]: an extension header runs past the bytes present but not
    ///   past the payload (the first segment of a multi-segment frame ends inside it).
    /// - [`WireError::BadExtensionChain`]: more than [`MAX_EXTENSION_HEADERS`] headers, or a
    ///   Hop-by-Hop header that is not first.
    pub fn walk_extensions(&self) -> Result<ExtensionChain, WireError> {
        let b = self.buffer.as_ref();
        // The bytes present bound the walk too: all of the payload after `check_len`, less in
        // the first segment of a multi-segment frame (a chain running past it is an error).
        let payload_end = HEADER_LEN + self.payload_len() as usize;
        let end = payload_end.min(b.len());
        let past = |to: usize| if to > payload_end { WireError::BadHeaderLen } else { WireError::Truncated };
        let mut chain = ExtensionChain { upper_protocol: self.next_header(), ..Default::default() };
        let mut off = HEADER_LEN;
        loop {
            let nh = chain.upper_protocol;
            let len = match nh {
                NextHeader::HOP_BY_HOP
                | NextHeader::ROUTING
                | NextHeader::DEST_OPTS
                | NextHeader::MOBILITY
                | NextHeader::HIP
                | NextHeader::SHIM6 => {
                    if nh == NextHeader::HOP_BY_HOP && off != HEADER_LEN {
                        return Err(WireError::BadExtensionChain);
                    }
                    if off + 2 > end {
                        return Err(past(off + 2));
                    }
                    (b[off + field::EXT_LEN] as usize + 1) * 8
                }
                NextHeader::AUTH => {
                    if off + 2 > end {
                        return Err(past(off + 2));
                    }
                    (b[off + field::EXT_LEN] as usize + 2) * 4
                }
                NextHeader::FRAGMENT => FRAGMENT_HEADER_LEN,
                _ => break,
            };
            if chain.count as usize == MAX_EXTENSION_HEADERS {
                return Err(WireError::BadExtensionChain);
            }
            if off + len > end {
                return Err(past(off + len));
            }
            chain.count += 1;
            chain.upper_protocol = b[off + field::EXT_NEXT_HEADER];
            if nh == NextHeader::HOP_BY_HOP || nh == NextHeader::DEST_OPTS {
                chain.discard_option |= options_say_discard(&b[off + 2..off + len]);
            }
            if nh == NextHeader::ROUTING {
                let left = b[off + field::RT_SEGMENTS_LEFT] as usize;
                chain.segments_left |= left > 0;
                if left > 0 && routing_addresses(&b[off..off + len]).is_none_or(|n| left > n) {
                    chain.bad_segments_left = true;
                }
            }
            if nh == NextHeader::ROUTING && chain.final_dst_offset == 0 && b[off + field::RT_SEGMENTS_LEFT] != 0 {
                // The final destination (RFC 8200 section 8.1): the last address of a type 0
                // (RFC 5095) or type 2 (RFC 6275) header, Segment List[0] of a Segment Routing
                // Header (type 4, RFC 8754 section 2), the last, compressed, address of an RPL
                // Source Route Header (type 3, RFC 6554). Other types keep the header's.
                let addrs = (len - field::RT_ADDRESSES) / 16;
                let last = match b[off + field::RT_TYPE] {
                    0 | 2 if addrs > 0 => Some((field::RT_ADDRESSES + 16 * (addrs - 1), 0)),
                    4 if addrs > 0 => Some((field::RT_ADDRESSES, 0)),
                    3 => rpl_last_address(&b[off..off + len]),
                    _ => None,
                };
                if let Some((at, elided)) = last {
                    chain.final_dst_offset = (off + at) as u16;
                    chain.final_dst_elided = elided as u8;
                }
            }
            if nh == NextHeader::FRAGMENT {
                let v = be16(b, off + field::FRAG_OFF_M.start);
                chain.has_fragment_header = true;
                chain.frag_offset = v & 0xfff8;
                chain.more_fragments |= v & 1 != 0;
                chain.frag_ident = be32(b, off + field::FRAG_IDENT.start);
                if chain.frag_offset != 0 {
                    chain.non_first_fragment = true;
                    off += len;
                    break;
                }
            }
            off += len;
        }
        chain.header_len = off;
        Ok(chain)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    #[inline]
    fn set_word0(&mut self, w: u32) {
        put_be32(self.buffer.as_mut(), field::VER_TC_FLOW.start, w);
    }

    /// Sets the version (low 4 bits used).
    #[inline]
    pub fn set_version(&mut self, v: u8) {
        let w = (self.word0() & 0x0fff_ffff) | (((v & 0xf) as u32) << 28);
        self.set_word0(w);
    }

    /// Sets the traffic class, keeping version and flow label.
    #[inline]
    pub fn set_traffic_class(&mut self, tc: u8) {
        let w = (self.word0() & 0xf00f_ffff) | ((tc as u32) << 20);
        self.set_word0(w);
    }

    /// Sets DSCP (low 6 bits used), keeping version, ECN and flow label.
    #[inline]
    pub fn set_dscp(&mut self, dscp: u8) {
        let tc = (self.traffic_class() & 0b11) | (dscp << 2);
        self.set_traffic_class(tc);
    }

    /// Sets ECN (low 2 bits used), keeping version, DSCP and flow label (case c07: CE marking
    /// turns 0x6BAABCDE into 0x6BBABCDE).
    #[inline]
    pub fn set_ecn(&mut self, ecn: u8) {
        let tc = (self.traffic_class() & !0b11) | (ecn & 0b11);
        self.set_traffic_class(tc);
    }

    /// Sets the flow label (low 20 bits used), keeping version and traffic class.
    #[inline]
    pub fn set_flow_label(&mut self, fl: u32) {
        let w = (self.word0() & 0xfff0_0000) | (fl & 0x000f_ffff);
        self.set_word0(w);
    }

    /// Sets the payload length (bytes).
    #[inline]
    pub fn set_payload_len(&mut self, len: u16) {
        put_be16(self.buffer.as_mut(), field::PAYLOAD_LEN.start, len);
    }

    /// Sets the next header.
    #[inline]
    pub fn set_next_header(&mut self, nh: u8) {
        self.buffer.as_mut()[field::NEXT_HEADER] = nh;
    }

    /// Sets the hop limit.
    #[inline]
    pub fn set_hop_limit(&mut self, h: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = h;
    }

    /// Sets the source address.
    #[inline]
    pub fn set_src_addr(&mut self, a: [u8; 16]) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a);
    }

    /// Sets the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, a: [u8; 16]) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a);
    }
}

/// A decoded IPv6 fixed header (no extension headers), for building datagrams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ipv6Repr {
    /// Source address.
    pub src_addr: [u8; 16],
    /// Destination address.
    pub dst_addr: [u8; 16],
    /// Next header (the upper-layer protocol when there are no extension headers).
    pub next_header: u8,
    /// Payload length (bytes).
    pub payload_len: u16,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class (DSCP << 2 | ECN).
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
}

impl Ipv6Repr {
    /// Decodes a checked fixed header.
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv6Packet<T>) -> Self {
        Ipv6Repr {
            src_addr: p.src_addr(),
            dst_addr: p.dst_addr(),
            next_header: p.next_header(),
            payload_len: p.payload_len(),
            hop_limit: p.hop_limit(),
            traffic_class: p.traffic_class(),
            flow_label: p.flow_label(),
        }
    }

    /// Writes the 40-byte fixed header into the first 40 bytes of `buf`.
    ///
    /// # Errors
    /// [`WireError::Truncated`] if `buf` is shorter than 40 bytes.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        if buf.len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        let mut p = Ipv6Packet::new_unchecked(&mut buf[..HEADER_LEN]);
        p.set_word0(0x6000_0000);
        p.set_traffic_class(self.traffic_class);
        p.set_flow_label(self.flow_label);
        p.set_payload_len(self.payload_len);
        p.set_next_header(self.next_header);
        p.set_hop_limit(self.hop_limit);
        p.set_src_addr(self.src_addr);
        p.set_dst_addr(self.dst_addr);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unrecognised_options_that_say_discard_are_found() {
        // Pad1, PadN, and types whose high-order bits are 00 (Router Alert 5, an unknown 0x1e):
        // skipped.
        assert!(!options_say_discard(&[0, 0, 1, 2, 0, 0]));
        assert!(!options_say_discard(&[5, 2, 0, 0, 0x1e, 0]));
        assert!(!options_say_discard(&[]));
        // 01, 10, 11 (0x63 RPL, 0x80, 0xc2 Jumbo Payload, 0xc9 Home Address): discard.
        for t in [0x63, 0x80, 0xc2, 0xc9] {
            assert!(options_say_discard(&[1, 0, t, 2, 0, 0]), "{t:#x}");
        }
        // An option past the area, or a type without its length byte: discard.
        assert!(options_say_discard(&[1, 5, 0, 0]));
        assert!(options_say_discard(&[0, 0, 0, 5]));
        // Through the walk: a Destination Options header of one 0x80 option, then UDP.
        let mut f = vec![0x60, 0, 0, 0, 0, 16, 60, 64];
        f.extend_from_slice(&[0xfd; 32]);
        f.extend_from_slice(&[17, 0, 0x80, 4, 0, 0, 0, 0]);
        f.extend_from_slice(&[0, 1, 0, 2, 0, 8, 0, 0]);
        let chain = Ipv6Packet::new_checked(&f[..]).unwrap().walk_extensions().unwrap();
        assert!(chain.discard_option && chain.upper_protocol == 17);
        f[42] = 0x1e;
        assert!(!Ipv6Packet::new_checked(&f[..]).unwrap().walk_extensions().unwrap().discard_option);
    }
    use crate::testing::case_frames;
    use proptest::prelude::*;
    use std::sync::LazyLock;

    // Case c07 from byte 14: traffic class 0xBA (DSCP 46, ECT(0)), flow label 0xABCDE, UDP
    // fd00::1:49152 -> fd00::2:9000, payload 01 02 03 04: 52 bytes.
    static C07: LazyLock<Vec<u8>> = LazyLock::new(|| case_frames("c07_ipv6_tc_ecn_flowlabel.pcap")[0][14..].to_vec());

    // Case c08 frame 1 from byte 14: Hop-by-Hop (PadN) + Destination Options (PadN) + UDP: 68
    // bytes.
    static C08_1: LazyLock<Vec<u8>> = LazyLock::new(|| case_frames("c08_ipv6_ext_headers.pcap")[0][14..].to_vec());

    // Case c08 frame 2 from byte 14: a Hop-by-Hop header claiming (255 + 1) * 8 = 2048 bytes in
    // an 8-byte payload: 48 bytes.
    static C08_2: LazyLock<Vec<u8>> = LazyLock::new(|| case_frames("c08_ipv6_ext_headers.pcap")[1][14..].to_vec());

    #[test]
    fn parse_c07() {
        let p = Ipv6Packet::new_checked(&C07[..]).unwrap();
        assert_eq!(p.version(), 6);
        assert_eq!((p.traffic_class(), p.dscp(), p.ecn()), (0xba, 46, 0b10));
        assert_eq!(p.flow_label(), 0xabcde);
        assert_eq!((p.payload_len(), p.next_header(), p.hop_limit()), (12, 17, 64));
        assert_eq!(p.src_addr()[0], 0xfd);
        assert_eq!(p.dst_addr()[15], 2);
        let c = p.walk_extensions().unwrap();
        assert_eq!((c.upper_protocol, c.header_len, c.count), (17, 40, 0));
        assert!(!c.is_fragment());
    }

    #[test]
    fn c07_ce_mark_keeps_version_and_flow_label() {
        let mut b = C07.clone();
        let mut p = Ipv6Packet::new_checked(&mut b[..]).unwrap();
        p.set_ecn(0b11);
        assert_eq!(&b[..4], &0x6bba_bcdeu32.to_be_bytes());
        let mut p = Ipv6Packet::new_checked(&mut b[..]).unwrap();
        p.set_dscp(0);
        assert_eq!(&b[..4], &0x603a_bcdeu32.to_be_bytes());
        let mut p = Ipv6Packet::new_checked(&mut b[..]).unwrap();
        p.set_flow_label(0x12345);
        p.set_traffic_class(0xba);
        assert_eq!(&b[..4], &0x6ba1_2345u32.to_be_bytes());
    }

    #[test]
    fn c08_extension_headers() {
        let p = Ipv6Packet::new_checked(&C08_1[..]).unwrap();
        let c = p.walk_extensions().unwrap();
        assert_eq!((c.upper_protocol, c.header_len, c.count), (17, 56, 2));
        // 2048 bytes claimed in 8 present: refused without reading past the buffer.
        let p = Ipv6Packet::new_checked(&C08_2[..]).unwrap();
        assert_eq!(p.walk_extensions().unwrap_err(), WireError::BadHeaderLen);
    }

    /// Builds a datagram with the given extension headers (next header, length byte) and a
    /// final upper protocol.
    fn chain(exts: &[(u8, u8)], upper: u8) -> Vec<u8> {
        let mut v = vec![0u8; 40];
        v[0] = 0x60;
        v[6] = exts.first().map_or(upper, |e| e.0);
        for (i, &(_, len)) in exts.iter().enumerate() {
            let next = exts.get(i + 1).map_or(upper, |e| e.0);
            let mut h = vec![0u8; (len as usize + 1) * 8];
            h[0] = next;
            h[1] = len;
            v.extend_from_slice(&h);
        }
        let pl = (v.len() - 40) as u16;
        v[4..6].copy_from_slice(&pl.to_be_bytes());
        v
    }

    #[test]
    fn walk_limits() {
        // Eight Destination Options headers: accepted; nine: refused.
        let v = chain(&[(60, 0); 8], 17);
        let c = Ipv6Packet::new_checked(&v[..]).unwrap().walk_extensions().unwrap();
        assert_eq!((c.count, c.header_len, c.upper_protocol), (8, 104, 17));
        let v = chain(&[(60, 0); 9], 17);
        let e = Ipv6Packet::new_checked(&v[..]).unwrap().walk_extensions().unwrap_err();
        assert_eq!(e, WireError::BadExtensionChain);
        // Hop-by-Hop after another header: refused.
        let v = chain(&[(60, 0), (0, 0)], 17);
        let e = Ipv6Packet::new_checked(&v[..]).unwrap().walk_extensions().unwrap_err();
        assert_eq!(e, WireError::BadExtensionChain);
        // Routing header with a length byte: (1 + 1) * 8 = 16 bytes.
        let v = chain(&[(0, 0), (43, 1)], 6);
        let c = Ipv6Packet::new_checked(&v[..]).unwrap().walk_extensions().unwrap();
        assert_eq!((c.count, c.header_len, c.upper_protocol), (2, 64, 6));
        // A header with only its first byte present.
        let mut v = chain(&[], 60);
        v.push(17);
        v[5] = 1;
        let e = Ipv6Packet::new_checked(&v[..]).unwrap().walk_extensions().unwrap_err();
        assert_eq!(e, WireError::BadHeaderLen);
    }

    #[test]
    fn fragment_headers() {
        let mut v = chain(&[(44, 0)], 17);
        // Atomic fragment: offset 0, M clear: a whole datagram.
        let c = Ipv6Packet::new_checked(&v[..]).unwrap().walk_extensions().unwrap();
        assert!(c.has_fragment_header && !c.is_fragment() && !c.non_first_fragment);
        assert_eq!((c.upper_protocol, c.header_len), (17, 48));
        // First fragment: M set.
        v[42..44].copy_from_slice(&1u16.to_be_bytes());
        v[44..48].copy_from_slice(&0xdead_beefu32.to_be_bytes());
        let c = Ipv6Packet::new_checked(&v[..]).unwrap().walk_extensions().unwrap();
        assert!(c.is_fragment() && !c.non_first_fragment && c.more_fragments);
        assert_eq!(c.frag_ident, 0xdead_beef);
        // Non-first: offset 1480 bytes (185 units); the walk stops there.
        v[42..44].copy_from_slice(&(185u16 << 3).to_be_bytes());
        let c = Ipv6Packet::new_checked(&v[..]).unwrap().walk_extensions().unwrap();
        assert!(c.non_first_fragment && c.is_fragment());
        assert_eq!((c.frag_offset, c.header_len), (1480, 48));
        // A truncated Fragment header.
        let mut v = chain(&[], 44);
        v.extend_from_slice(&[17, 0, 0, 0]);
        v[5] = 4;
        let e = Ipv6Packet::new_checked(&v[..]).unwrap().walk_extensions().unwrap_err();
        assert_eq!(e, WireError::BadHeaderLen);
    }

    /// AH (RFC 4302 section 2.2: length in 4-byte units minus 2) and the generic-format
    /// headers (RFC 6564) are walked to the upper layer; ESP and No Next Header end the walk.
    #[test]
    fn authentication_and_generic_headers() {
        // Hop-by-Hop, then AH with a 12-byte ICV (length byte 4: (4 + 2) * 4 = 24 bytes), then
        // Destination Options, then UDP at 40 + 8 + 24 + 8.
        let mut v = chain(&[(0, 0)], 51);
        v.extend_from_slice(&[60, 4]);
        v.extend_from_slice(&[0; 22]);
        v.extend_from_slice(&[17, 0, 0, 0, 0, 0, 0, 0]);
        let pl = (v.len() - 40) as u16;
        v[4..6].copy_from_slice(&pl.to_be_bytes());
        let c = Ipv6Packet::new_checked(&v[..]).unwrap().walk_extensions().unwrap();
        assert_eq!((c.upper_protocol, c.header_len, c.count), (17, 80, 3));
        // AH whose length runs one 4-byte unit past the payload.
        let mut w = v.clone();
        w[49] = 7;
        assert_eq!(Ipv6Packet::new_checked(&w[..]).unwrap().walk_extensions().unwrap_err(), WireError::BadHeaderLen);
        // Mobility, HIP and Shim6 in the generic format.
        for nh in [135u8, 139, 140] {
            let v = chain(&[(nh, 1)], 17);
            let c = Ipv6Packet::new_checked(&v[..]).unwrap().walk_extensions().unwrap();
            assert_eq!((c.upper_protocol, c.header_len, c.count), (17, 56, 1), "next header {nh}");
        }
        // ESP and No Next Header: the walk ends there.
        for nh in [50u8, 59] {
            let mut v = chain(&[(60, 0)], nh);
            v.extend_from_slice(&[17, 0, 0, 0, 0, 0, 0, 0]);
            let pl = (v.len() - 40) as u16;
            v[4..6].copy_from_slice(&pl.to_be_bytes());
            let c = Ipv6Packet::new_checked(&v[..]).unwrap().walk_extensions().unwrap();
            assert_eq!((c.upper_protocol, c.header_len), (nh, 48));
        }
    }

    /// Two Fragment headers: the datagram is a fragment if either says so (the second one's
    /// clear M flag does not make a first fragment whole).
    #[test]
    fn any_fragment_header_makes_a_fragment() {
        let mut v = chain(&[(44, 0), (44, 0)], 17);
        v[43] = 1; // first header: M set, offset 0
        let c = Ipv6Packet::new_checked(&v[..]).unwrap().walk_extensions().unwrap();
        assert!(c.is_fragment() && c.more_fragments);
        assert_eq!((c.count, c.header_len), (2, 56));
    }

    /// The pseudo-header's destination with a Routing header whose segments left is not 0 is
    /// the final destination (RFC 8200 section 8.1): the last address of types 0 and 2,
    /// Segment List[0] of an SRH (type 4, RFC 8754), the last address of an RPL Source Route
    /// Header (type 3, RFC 6554) without compression; other types keep the header's.
    #[test]
    fn routing_header_final_destination() {
        let a = |x: u8| [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, x];
        let cases = [(0u8, 2u8, a(8)), (2, 1, a(8)), (4, 1, a(7)), (0, 0, a(2)), (3, 1, a(8)), (253, 1, a(2))];
        for (rt_type, left, want) in cases {
            // Two addresses (length byte 4: 8 + 32 bytes), fd00::7 then fd00::8.
            let mut v = chain(&[(43, 4)], 17);
            v[24..40].copy_from_slice(&a(2));
            v[42] = rt_type;
            v[43] = left;
            v[48..64].copy_from_slice(&a(7));
            v[64..80].copy_from_slice(&a(8));
            let p = Ipv6Packet::new_checked(&v[..]).unwrap();
            let c = p.walk_extensions().unwrap();
            assert_eq!(p.checksum_dst_addr(&c), want, "type {rt_type}, segments left {left}");
            assert_eq!(p.dst_addr(), a(2));
        }
        // Without a Routing header: the header's destination.
        let p = Ipv6Packet::new_checked(&C07[..]).unwrap();
        assert_eq!(p.checksum_dst_addr(&p.walk_extensions().unwrap()), p.dst_addr());
    }

    /// RPL Source Route Header (RFC 6554 section 3): addresses lose the leading CmprI bytes
    /// (the last one CmprE) they share with the IPv6 destination, and Pad bytes end the header;
    /// the final destination is the destination's first CmprE bytes, then the last address.
    #[test]
    fn rpl_routing_header_compressed_final_destination() {
        let dst = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
        let with = |cmpr: u8, pad: u8, addrs: &[u8], want: [u8; 16]| {
            let len = 8 + addrs.len();
            assert_eq!(len % 8, 0);
            let mut v = chain(&[(NextHeader::ROUTING, (len / 8 - 1) as u8)], 17);
            v[24..40].copy_from_slice(&dst);
            v[42] = 3;
            v[43] = 1;
            v[44] = cmpr;
            v[45] = pad << 4;
            v[48..48 + addrs.len()].copy_from_slice(addrs);
            let p = Ipv6Packet::new_checked(&v[..]).unwrap();
            let c = p.walk_extensions().unwrap();
            assert_eq!((c.upper_protocol, c.header_len), (17, 40 + len), "cmpr {cmpr:#x} pad {pad}");
            assert_eq!(p.checksum_dst_addr(&c), want, "cmpr {cmpr:#x} pad {pad}");
            assert_eq!(p.dst_addr(), dst);
        };
        let mut a9 = dst;
        a9[15] = 9;
        // CmprI = CmprE = 8: two 8-byte addresses, the last ::8.
        let mut last8 = dst;
        last8[15] = 8;
        with(0x88, 0, &[0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 8], last8);
        // CmprI = 8, CmprE = 14, Pad 6: one 8-byte address, then 2 bytes of the last.
        with(0x8e, 6, &[0, 0, 0, 0, 0, 0, 0, 7, 0, 9, 0, 0, 0, 0, 0, 0], a9);
        // CmprE = 15, Pad 7: a single one-byte address.
        with(0x0f, 7, &[9, 0, 0, 0, 0, 0, 0, 0], a9);
        // Pad larger than the addresses leave room for: no last address, the header's kept.
        with(0x00, 15, &[0; 8], dst);
    }

    /// An AH with only its next-header byte inside the payload is refused like any other
    /// header too short for its length byte (RFC 4302 section 2.2), without reading past the
    /// datagram.
    #[test]
    fn ah_without_its_length_byte_is_refused() {
        let mut v = chain(&[], NextHeader::AUTH);
        v.push(17);
        v[5] = 1;
        let e = Ipv6Packet::new_checked(&v[..]).unwrap().walk_extensions().unwrap_err();
        assert_eq!(e, WireError::BadHeaderLen);
    }

    /// A Routing header with segments left but no address (length byte 0) names no final
    /// destination (RFC 8200 section 8.1 takes it from the header's last element): the
    /// pseudo-header keeps the header's destination, and the bytes after the Routing header are
    /// never taken for an address.
    #[test]
    fn routing_header_without_addresses_keeps_the_destination() {
        let dst = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
        for rt_type in [0u8, 2, 4] {
            let mut v = chain(&[(NextHeader::ROUTING, 0)], 17);
            v[24..40].copy_from_slice(&dst);
            v[42] = rt_type;
            v[43] = 1;
            v.extend_from_slice(&[0xee; 16]);
            let pl = (v.len() - 40) as u16;
            v[4..6].copy_from_slice(&pl.to_be_bytes());
            let p = Ipv6Packet::new_checked(&v[..]).unwrap();
            let c = p.walk_extensions().unwrap();
            assert_eq!((c.upper_protocol, c.header_len), (17, 48), "type {rt_type}");
            assert_eq!(p.checksum_dst_addr(&c), dst, "type {rt_type}");
        }
    }

    /// Version, traffic class and flow label share the first 32-bit word (RFC 8200 section 3:
    /// 4, 8 and 20 bits): setting the version keeps the other two.
    #[test]
    fn set_version_keeps_traffic_class_and_flow_label() {
        let mut b = C07.clone();
        let mut p = Ipv6Packet::new_unchecked(&mut b[..]);
        p.set_version(4);
        assert_eq!((p.version(), p.traffic_class(), p.flow_label()), (4, 0xba, 0xabcde));
        p.set_version(0x16);
        assert_eq!(p.version(), 6, "only the low four bits of the version are used");
        assert_eq!(b, *C07);
    }

    #[test]
    fn negative_lengths() {
        assert_eq!(Ipv6Packet::new_checked(&C07[..39]).unwrap_err(), WireError::Truncated);
        assert_eq!(Ipv6Packet::new_checked(&C07[..51]).unwrap_err(), WireError::BadLength);
        let mut b = C07.clone();
        b[0] = 0x4b;
        assert_eq!(Ipv6Packet::new_checked(&b[..]).unwrap_err(), WireError::BadVersion);
        assert_eq!(Ipv6Repr::default().emit(&mut [0u8; 39]), Err(WireError::Truncated));
    }

    proptest! {
        #[test]
        fn round_trip(
            src_addr in any::<[u8; 16]>(), dst_addr in any::<[u8; 16]>(), next_header in any::<u8>(),
            payload_len in 0u16..256, hop_limit in any::<u8>(), traffic_class in any::<u8>(),
            flow_label in 0u32..(1 << 20),
        ) {
            let r = Ipv6Repr { src_addr, dst_addr, next_header, payload_len, hop_limit, traffic_class, flow_label };
            let mut buf = vec![0u8; 40 + payload_len as usize];
            r.emit(&mut buf).unwrap();
            let p = Ipv6Packet::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(Ipv6Repr::parse(&p), r);
            prop_assert_eq!(p.payload().len(), payload_len as usize);
        }

        /// Setting ECN or DSCP never changes version or flow label.
        #[test]
        fn tc_setters_keep_other_bits(w in any::<u32>(), ecn in 0u8..4, dscp in 0u8..64) {
            let mut b = [0u8; 40];
            b[..4].copy_from_slice(&((w & 0x0fff_ffff) | 0x6000_0000).to_be_bytes());
            let mut p = Ipv6Packet::new_checked(&mut b[..]).unwrap();
            let (fl, tc) = (p.flow_label(), p.traffic_class());
            p.set_ecn(ecn);
            prop_assert_eq!((p.version(), p.flow_label(), p.dscp(), p.ecn()), (6, fl, tc >> 2, ecn));
            p.set_dscp(dscp);
            prop_assert_eq!((p.version(), p.flow_label(), p.dscp(), p.ecn()), (6, fl, dscp, ecn));
        }

        /// The walk never panics and never reports a header length past the payload.
        #[test]
        fn walk_is_bounded(payload in proptest::collection::vec(any::<u8>(), 0..300), nh in any::<u8>()) {
            let mut v = vec![0u8; 40];
            v[0] = 0x60;
            v[6] = nh;
            v[4..6].copy_from_slice(&(payload.len() as u16).to_be_bytes());
            v.extend_from_slice(&payload);
            let p = Ipv6Packet::new_checked(&v[..]).unwrap();
            if let Ok(c) = p.walk_extensions() {
                prop_assert!(c.header_len <= v.len());
                prop_assert!(c.count as usize <= MAX_EXTENSION_HEADERS);
            }
        }
    }
}
