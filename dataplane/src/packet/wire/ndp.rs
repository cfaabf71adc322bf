//! IPv6 Neighbor Discovery (RFC 4861 sections 4.3, 4.4) over ICMPv6 (RFC 4443): Neighbor
//! Solicitation and Advertisement with the link-layer address options, and the ICMPv6
//! checksum (over the IPv6 pseudo-header, RFC 8200 section 8.1).
//!
//! ```text
//!  0  type (1)   1  code (1)   2  checksum (2)
//!  4  flags (1): NA R S O in the top 3 bits, 0 in an NS   5  reserved (3)
//!  8  target address (16)
//! 24  options: type (1), length (1, units of 8 bytes), value; a link-layer address option
//!     for Ethernet is type 1 (source) or 2 (target), length 1, the MAC (6)
//! ```

use super::checksum;
use super::error::WireError;
use super::EthernetAddress;
use super::{be16, put_be16, put_be32, Field};

mod field {
    use super::Field;
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Field = 2..4;
    pub const FLAGS_RESERVED: Field = 4..8; // the flags are the top byte
    pub const TARGET: Field = 8..24;
    pub const OPTIONS: usize = 24;

    // A link-layer address option (RFC 4861 section 4.6.1), from the option's first byte.
    pub const OPT_TYPE: usize = 0;
    pub const OPT_LEN: usize = 1;
    pub const OPT_LLADDR: Field = 2..8;
}

/// IPv6 next header of ICMPv6.
pub const NEXT_HEADER_ICMPV6: u8 = 58;
/// ICMPv6 type of a Neighbor Solicitation.
pub const TYPE_NS: u8 = 135;
/// ICMPv6 type of a Neighbor Advertisement.
pub const TYPE_NA: u8 = 136;
/// Length of an NS or NA without options (bytes): type, code, checksum, flags/reserved, target.
pub const BODY_LEN: usize = 24;
/// Length of a link-layer address option for Ethernet (bytes).
pub const LLADDR_OPT_LEN: usize = 8;
/// NA flags: Solicited.
pub const FLAG_SOLICITED: u8 = 0x40;
/// NA flags: Override.
pub const FLAG_OVERRIDE: u8 = 0x20;
/// Option type: Source Link-Layer Address (RFC 4861 section 4.6.1).
pub const OPT_SOURCE_LLADDR: u8 = 1;
/// Option type: Target Link-Layer Address (RFC 4861 section 4.6.1).
pub const OPT_TARGET_LLADDR: u8 = 2;
/// The all-nodes multicast address `ff02::1` (RFC 4291 section 2.7.1): where an advertisement
/// answering duplicate address detection goes (RFC 4861 section 7.2.4).
pub const ALL_NODES: [u8; 16] = [0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

/// The Ethernet destination of an IPv6 multicast address (RFC 2464 section 7): 33:33 followed
/// by the address's last 32 bits.
pub fn multicast_mac(addr: &[u8; 16]) -> EthernetAddress {
    EthernetAddress([0x33, 0x33, addr[12], addr[13], addr[14], addr[15]])
}

/// A checked view of a Neighbor Solicitation or Advertisement (RFC 4861 sections 4.3, 4.4): the
/// 24-byte body and the options after it, to the end of the buffer (the IPv6 payload's end).
#[derive(Debug, Clone)]
pub struct NdMessage<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> NdMessage<T> {
    /// Wraps `buffer` (the ICMPv6 message, to the end of the IPv6 payload) after checking it
    /// holds the [`BODY_LEN`]-byte body. The type and code are not checked.
    ///
    /// # Errors
    /// [`WireError::Truncated`] if fewer than 24 bytes are present.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        if buffer.as_ref().len() < BODY_LEN {
            return Err(WireError::Truncated);
        }
        Ok(NdMessage { buffer })
    }

    /// Wraps `buffer` without a length check, for a message being written (at least
    /// [`BODY_LEN`] bytes); the accessors still index the buffer, so a shorter one panics.
    #[inline]
    pub fn new_unchecked(buffer: T) -> Self {
        NdMessage { buffer }
    }

    /// ICMPv6 type ([`TYPE_NS`], [`TYPE_NA`], or another).
    #[inline]
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }

    /// ICMPv6 code (0 for NS and NA; RFC 4861 section 7.1.1 drops others).
    #[inline]
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    /// The ICMPv6 checksum field as stored.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }

    /// The flags byte: NA Router 0x80, [`FLAG_SOLICITED`], [`FLAG_OVERRIDE`]; reserved in an NS.
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS_RESERVED.start]
    }

    /// Target address.
    #[inline]
    pub fn target(&self) -> [u8; 16] {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::TARGET]);
        a
    }

    /// The options: the bytes after the body (see [`check_options`]).
    #[inline]
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[field::OPTIONS..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> NdMessage<T> {
    /// Sets the ICMPv6 type.
    #[inline]
    pub fn set_msg_type(&mut self, t: u8) {
        self.buffer.as_mut()[field::TYPE] = t;
    }

    /// Sets the ICMPv6 code.
    #[inline]
    pub fn set_code(&mut self, code: u8) {
        self.buffer.as_mut()[field::CODE] = code;
    }

    /// Stores `ck` in the checksum field as is.
    #[inline]
    pub fn set_checksum(&mut self, ck: u16) {
        put_be16(self.buffer.as_mut(), field::CHECKSUM.start, ck);
    }

    /// Sets the flags byte; the 3 reserved bytes after it become 0 (RFC 4861 sections 4.3,
    /// 4.4: sent as zero).
    #[inline]
    pub fn set_flags(&mut self, flags: u8) {
        put_be32(self.buffer.as_mut(), field::FLAGS_RESERVED.start, (flags as u32) << 24);
    }

    /// Sets the target address.
    #[inline]
    pub fn set_target(&mut self, a: [u8; 16]) {
        self.buffer.as_mut()[field::TARGET].copy_from_slice(&a);
    }

    /// Writes an Ethernet link-layer address option ([`LLADDR_OPT_LEN`] bytes: `opt_type`,
    /// length 1, `mac`; RFC 4861 section 4.6.1) as the first option, right after the body. The
    /// buffer must hold [`BODY_LEN`] + [`LLADDR_OPT_LEN`] bytes.
    #[inline]
    pub fn set_lladdr_option(&mut self, opt_type: u8, mac: EthernetAddress) {
        let o = &mut self.buffer.as_mut()[field::OPTIONS..field::OPTIONS + LLADDR_OPT_LEN];
        o[field::OPT_TYPE] = opt_type;
        o[field::OPT_LEN] = (LLADDR_OPT_LEN / 8) as u8;
        o[field::OPT_LLADDR].copy_from_slice(&mac.0);
    }

    /// Computes and stores the ICMPv6 checksum of the whole buffer from `src` to `dst` (RFC 4443
    /// section 2.3, over the IPv6 pseudo-header of RFC 8200 section 8.1).
    #[inline]
    pub fn fill_checksum(&mut self, src: &[u8; 16], dst: &[u8; 16]) {
        self.set_checksum(0);
        let b = self.buffer.as_ref();
        let ph = checksum::pseudo_header_v6(src, dst, NEXT_HEADER_ICMPV6, b.len() as u32);
        let ck = !checksum::combine(ph, checksum::sum(b));
        self.set_checksum(ck);
    }
}

/// The solicited-node multicast address of `addr` (RFC 4291 section 2.7.1): `ff02::1:ff00:0/104`
/// followed by the low 24 bits of `addr`.
pub fn solicited_node(addr: &[u8; 16]) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[0] = 0xff;
    a[1] = 0x02;
    a[11] = 0x01;
    a[12] = 0xff;
    a[13..].copy_from_slice(&addr[13..]);
    a
}

/// True if `addr` is a solicited-node multicast address (in `ff02::1:ff00:0/104`).
pub fn is_solicited_node(addr: &[u8; 16]) -> bool {
    addr[..13] == solicited_node(&[0; 16])[..13]
}

/// Walks the options of an ND message (`opts`: the bytes after the fixed part, to the end of the
/// IPv6 payload; RFC 4861 section 4.6): `Some(Some(mac))` if they hold a Source Link-Layer
/// Address option (`mac`: the first one's address, the sender's link-layer address, RFC 4861
/// section 4.6.1), `Some(None)` if not, `None` if an option has length zero (invalid, RFC 4861
/// section 7.1.1) or runs past the message. Each option is type (1 byte), length (1 byte, in
/// units of 8 bytes), value.
pub fn check_options(mut opts: &[u8]) -> Option<Option<EthernetAddress>> {
    let mut source_lladdr = None;
    while !opts.is_empty() {
        let len = *opts.get(1)? as usize * 8;
        if len == 0 || len > opts.len() {
            return None;
        }
        if opts[field::OPT_TYPE] == OPT_SOURCE_LLADDR && source_lladdr.is_none() {
            // At least 8 bytes (the length is not zero): type, length and the 6-byte MAC.
            let mut mac = [0u8; 6];
            mac.copy_from_slice(&opts[field::OPT_LLADDR]);
            source_lladdr = Some(EthernetAddress(mac));
        }
        opts = &opts[len..];
    }
    Some(source_lladdr)
}

/// A Neighbor Solicitation's target address, if `icmp` (the ICMPv6 message, to the end of the
/// IPv6 payload) is a well-formed NS (code 0, at least 24 bytes). The hop-limit-255 rule is the
/// caller's (it has the IP header).
pub fn solicitation_target(icmp: &[u8]) -> Option<[u8; 16]> {
    let m = NdMessage::new_checked(icmp).ok()?;
    (m.msg_type() == TYPE_NS && m.code() == 0).then(|| m.target())
}

/// Writes a Neighbor Advertisement for `target` with the target link-layer address option
/// (`mac`) into `buf` (at least 32 bytes), checksummed for `src` -> `dst`. Returns its length.
pub fn emit_advertisement(
    buf: &mut [u8],
    target: &[u8; 16],
    mac: EthernetAddress,
    solicited: bool,
    src: &[u8; 16],
    dst: &[u8; 16],
) -> usize {
    let len = BODY_LEN + LLADDR_OPT_LEN;
    let mut m = NdMessage::new_unchecked(&mut buf[..len]);
    m.set_msg_type(TYPE_NA);
    m.set_code(0);
    m.set_flags(FLAG_OVERRIDE | if solicited { FLAG_SOLICITED } else { 0 });
    m.set_target(*target);
    m.set_lladdr_option(OPT_TARGET_LLADDR, mac);
    m.fill_checksum(src, dst);
    len
}

/// True if the ICMPv6 checksum of `icmp` from `src` to `dst` verifies.
pub fn checksum_ok(icmp: &[u8], src: &[u8; 16], dst: &[u8; 16]) -> bool {
    let ph = checksum::pseudo_header_v6(src, dst, NEXT_HEADER_ICMPV6, icmp.len() as u32);
    checksum::combine(ph, checksum::sum(icmp)) == 0xffff
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advertisement_checksums_and_parses_back() {
        let mut src = [0u8; 16];
        src[0] = 0xfd;
        src[15] = 0xfe;
        let mut dst = src;
        dst[15] = 1;
        let mut buf = [0u8; 64];
        let n = emit_advertisement(&mut buf, &src, "02:00:00:00:00:fe".parse().unwrap(), true, &src, &dst);
        assert_eq!(n, 32);
        assert!(checksum_ok(&buf[..n], &src, &dst));
        assert_eq!(buf[4], 0x60);
        assert_eq!(solicitation_target(&buf[..n]), None, "an NA is not an NS");
        let mut ns = buf;
        ns[0] = TYPE_NS;
        assert_eq!(solicitation_target(&ns[..n]), Some(src));
        assert_eq!(solicitation_target(&ns[..20]), None);
    }

    /// A solicitation for fd00::fe from fd00::2 with a source link-layer address option
    /// (02:00:00:00:01:01), checksummed for fd00::2 -> ff02::1:ff00:fe: the bytes of RFC 4861
    /// section 4.3 as a host sends them.
    const NS: [u8; 32] =
        [135, 0, 0x7a, 0x9e, 0, 0, 0, 0, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xfe, 1, 1, 2, 0, 0, 0, 1, 1];

    fn fd(last: u8) -> [u8; 16] {
        let mut a = [0u8; 16];
        a[0] = 0xfd;
        a[15] = last;
        a
    }

    #[test]
    fn view_reads_the_fields() {
        let m = NdMessage::new_checked(&NS[..]).unwrap();
        assert_eq!((m.msg_type(), m.code(), m.checksum(), m.flags()), (TYPE_NS, 0, 0x7a9e, 0));
        assert_eq!(m.target(), fd(0xfe));
        assert_eq!(m.options(), &NS[24..]);
        assert!(checksum_ok(&NS, &fd(2), &solicited_node(&fd(0xfe))));
        assert_eq!(NdMessage::new_checked(&NS[..23]).unwrap_err(), WireError::Truncated);
    }

    #[test]
    fn set_msg_type_writes_byte_0() {
        let mut b = NS;
        NdMessage::new_unchecked(&mut b[..]).set_msg_type(TYPE_NA);
        assert_eq!(b[0], 136);
        assert_eq!(b[1..], NS[1..]);
    }

    #[test]
    fn set_code_writes_byte_1() {
        let mut b = NS;
        NdMessage::new_unchecked(&mut b[..]).set_code(7);
        assert_eq!((b[0], b[1]), (135, 7));
        assert_eq!(b[2..], NS[2..]);
    }

    #[test]
    fn set_checksum_writes_bytes_2_and_3_big_endian() {
        let mut b = NS;
        NdMessage::new_unchecked(&mut b[..]).set_checksum(0xbeef);
        assert_eq!(&b[2..4], &[0xbe, 0xef]);
        assert_eq!((&b[..2], &b[4..]), (&NS[..2], &NS[4..]));
    }

    #[test]
    fn set_flags_writes_byte_4_and_clears_the_reserved_bytes() {
        let mut b = NS;
        b[5..8].copy_from_slice(&[0xaa; 3]);
        NdMessage::new_unchecked(&mut b[..]).set_flags(FLAG_SOLICITED | FLAG_OVERRIDE);
        assert_eq!(&b[4..8], &[0x60, 0, 0, 0]);
        assert_eq!((&b[..4], &b[8..]), (&NS[..4], &NS[8..]));
    }

    #[test]
    fn set_target_writes_bytes_8_to_24() {
        let mut b = NS;
        NdMessage::new_unchecked(&mut b[..]).set_target(fd(9));
        assert_eq!(&b[8..24], &fd(9));
        assert_eq!((&b[..8], &b[24..]), (&NS[..8], &NS[24..]));
    }

    #[test]
    fn set_lladdr_option_writes_type_length_in_8_byte_units_and_mac() {
        let mut b = NS;
        NdMessage::new_unchecked(&mut b[..]).set_lladdr_option(OPT_TARGET_LLADDR, "02:00:00:00:00:fe".parse().unwrap());
        assert_eq!(&b[24..], &[2, 1, 2, 0, 0, 0, 0, 0xfe]);
        assert_eq!(b[..24], NS[..24]);
    }

    #[test]
    fn fill_checksum_covers_the_pseudo_header_and_the_whole_message() {
        let mut b = NS;
        b[2..4].fill(0x55);
        NdMessage::new_unchecked(&mut b[..]).fill_checksum(&fd(2), &solicited_node(&fd(0xfe)));
        assert_eq!(b, NS);
        // Another destination, another checksum (the pseudo-header counts).
        NdMessage::new_unchecked(&mut b[..]).fill_checksum(&fd(2), &fd(0xfe));
        assert_ne!(b, NS);
        assert!(checksum_ok(&b, &fd(2), &fd(0xfe)));
    }

    /// RFC 2464 section 7: 33:33 and the last four bytes of the group.
    #[test]
    fn multicast_macs_and_all_nodes() {
        assert_eq!(multicast_mac(&ALL_NODES).0, [0x33, 0x33, 0, 0, 0, 1]);
        assert_eq!(multicast_mac(&solicited_node(&fd(0xfe))).0, [0x33, 0x33, 0xff, 0, 0, 0xfe]);
        assert_eq!(ALL_NODES, "ff02::1".parse::<std::net::Ipv6Addr>().unwrap().octets());
    }

    #[test]
    fn solicited_node_addresses() {
        let mut a = [0u8; 16];
        a[0] = 0xfd;
        a[13..].copy_from_slice(&[0x12, 0x34, 0x56]);
        let s = solicited_node(&a);
        assert_eq!(s, [0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0x12, 0x34, 0x56]);
        assert!(is_solicited_node(&s));
        let mut all_nodes = [0u8; 16];
        all_nodes[..2].copy_from_slice(&[0xff, 0x02]);
        all_nodes[15] = 1;
        assert!(!is_solicited_node(&all_nodes));
        assert!(!is_solicited_node(&a));
        let mut near = s;
        near[12] = 0xfe;
        assert!(!is_solicited_node(&near));
    }

    #[test]
    fn options_are_walked() {
        let sllao = [1u8, 1, 2, 0, 0, 0, 0, 1];
        let nonce = [14u8, 1, 1, 2, 3, 4, 5, 6];
        let mac = Some(EthernetAddress([2, 0, 0, 0, 0, 1]));
        assert_eq!(check_options(&[]), Some(None));
        assert_eq!(check_options(&sllao), Some(mac));
        assert_eq!(check_options(&nonce), Some(None));
        assert_eq!(check_options(&[nonce, sllao].concat()), Some(mac));
        // Two source link-layer address options: the first is the sender's.
        let other = [1u8, 1, 2, 0, 0, 0, 0, 9];
        assert_eq!(check_options(&[sllao, other].concat()), Some(mac));
        // A longer option (16 bytes): its first 6 value bytes.
        assert_eq!(
            check_options(&[&[1u8, 2, 0x33, 0x33, 0, 0, 0, 1][..], &[0; 8]].concat()),
            Some(Some(EthernetAddress([0x33, 0x33, 0, 0, 0, 1])))
        );
        // Length zero, anywhere: invalid (and never a loop).
        assert_eq!(check_options(&[1, 0, 0, 0, 0, 0, 0, 0]), None);
        assert_eq!(check_options(&[&nonce[..], &[1, 0, 0, 0, 0, 0, 0, 0]].concat()), None);
        // Past the message, or a lone type byte.
        assert_eq!(check_options(&[1, 2, 0, 0, 0, 0, 0, 0]), None);
        assert_eq!(check_options(&[1]), None);
    }
}
