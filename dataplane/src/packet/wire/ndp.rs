//! IPv6 Neighbor Discovery (RFC 4861 sections 4.3, 4.4) over ICMPv6 (RFC 4443): Neighbor
//! Solicitation and Advertisement with the link-layer address options, and the ICMPv6
//! checksum (over the IPv6 pseudo-header, RFC 8200 section 8.1).

use super::checksum;
use super::EthernetAddress;

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
/// IPv6 payload; RFC 4861 section 4.6): `Some(true)` if they hold a Source Link-Layer Address
/// option, `Some(false)` if not, `None` if an option has length zero (invalid, RFC 4861 section
/// 7.1.1) or runs past the message. Each option is type (1 byte), length (1 byte, in units of 8
/// bytes), value.
pub fn check_options(mut opts: &[u8]) -> Option<bool> {
    let mut source_lladdr = false;
    while !opts.is_empty() {
        let len = *opts.get(1)? as usize * 8;
        if len == 0 || len > opts.len() {
            return None;
        }
        source_lladdr |= opts[0] == OPT_SOURCE_LLADDR;
        opts = &opts[len..];
    }
    Some(source_lladdr)
}

/// A Neighbor Solicitation's target address, if `icmp` (the ICMPv6 message, to the end of the
/// IPv6 payload) is a well-formed NS (code 0, at least 24 bytes). The hop-limit-255 rule is the
/// caller's (it has the IP header).
pub fn solicitation_target(icmp: &[u8]) -> Option<[u8; 16]> {
    if icmp.len() < BODY_LEN || icmp[0] != TYPE_NS || icmp[1] != 0 {
        return None;
    }
    let mut t = [0u8; 16];
    t.copy_from_slice(&icmp[8..24]);
    Some(t)
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
    let b = &mut buf[..len];
    b.fill(0);
    b[0] = TYPE_NA;
    b[4] = FLAG_OVERRIDE | if solicited { FLAG_SOLICITED } else { 0 };
    b[8..24].copy_from_slice(target);
    b[24] = 2; // option: target link-layer address
    b[25] = 1; // length in units of 8 bytes
    b[26..32].copy_from_slice(&mac.0);
    let ph = checksum::pseudo_header_v6(src, dst, NEXT_HEADER_ICMPV6, len as u32);
    let ck = !checksum::combine(ph, checksum::sum(b));
    b[2..4].copy_from_slice(&ck.to_be_bytes());
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
        assert_eq!(check_options(&[]), Some(false));
        assert_eq!(check_options(&sllao), Some(true));
        assert_eq!(check_options(&nonce), Some(false));
        assert_eq!(check_options(&[nonce, sllao].concat()), Some(true));
        // Length zero, anywhere: invalid (and never a loop).
        assert_eq!(check_options(&[1, 0, 0, 0, 0, 0, 0, 0]), None);
        assert_eq!(check_options(&[&nonce[..], &[1, 0, 0, 0, 0, 0, 0, 0]].concat()), None);
        // Past the message, or a lone type byte.
        assert_eq!(check_options(&[1, 2, 0, 0, 0, 0, 0, 0]), None);
        assert_eq!(check_options(&[1]), None);
    }
}
