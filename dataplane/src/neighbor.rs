//! Answering ARP (RFC 826) and IPv6 neighbour discovery (RFC 4861) for the appliance's own
//! addresses on each port, so that hosts resolve the appliance like any neighbour and need no
//! static entries. The request's buffer becomes the reply, sent back out of the ingress port on
//! the same VLAN.

use crate::agg::PortAddr;
use crate::buf::PacketBuf;
use crate::parse::{Layers, Parsed};
use crate::wire::arp::{ArpPacket, ArpRepr, OP_REQUEST};
use crate::wire::ndp;

/// If `buf` (parsed as `p`) asks for one of `port`'s addresses, rewrites it into the reply and
/// returns true. ARP: a request whose target is the port's IPv4 address. IPv6: a Neighbor
/// Solicitation (hop limit 255, valid ICMPv6 checksum, no extension headers) whose target is the
/// port's IPv6 address; a solicitation from the unspecified address (duplicate address
/// detection) is answered to all-nodes, unsolicited.
pub fn answer<B: PacketBuf>(buf: &mut B, p: &Parsed, port: &PortAddr) -> bool {
    let l3 = p.l3_offset as usize;
    if p.has(Layers::ARP) {
        let Some(ip) = port.ipv4 else { return false };
        let Ok(arp) = ArpPacket::new_checked(&buf.data()[l3..]) else { return false };
        let req = ArpRepr::parse(&arp);
        if req.operation != OP_REQUEST || req.target_ip != ip {
            return false;
        }
        let reply = req.reply(port.mac);
        let f = buf.data_mut();
        if reply.emit(&mut f[l3..]).is_err() {
            return false;
        }
        f[0..6].copy_from_slice(&req.sender_mac.0);
        f[6..12].copy_from_slice(&port.mac.0);
        return true;
    }
    if !p.has(Layers::IPV6) || p.has(Layers::IP_FRAGMENT) || p.ip_proto != ndp::NEXT_HEADER_ICMPV6 {
        return false;
    }
    let Some(ip) = port.ipv6 else { return false };
    let l4 = p.l4_offset as usize;
    if l4 != l3 + 40 || p.ttl != 255 {
        return false;
    }
    let f = buf.data();
    let icmp = &f[l4..p.ip_end as usize];
    let Some(target) = ndp::solicitation_target(icmp) else { return false };
    if target != ip || !ndp::checksum_ok(icmp, &p.ip_src_bytes, &p.ip_dst_bytes) {
        return false;
    }
    let requester_mac = p.eth_src;
    let dad = p.ip_src_bytes == [0u8; 16];
    let dst: [u8; 16] = if dad {
        let mut a = [0u8; 16];
        a[0] = 0xff;
        a[1] = 0x02;
        a[15] = 1;
        a
    } else {
        p.ip_src_bytes
    };
    let len = l4 + ndp::BODY_LEN + ndp::LLADDR_OPT_LEN;
    if !buf.set_len(len) {
        return false;
    }
    let f = buf.data_mut();
    let dst_mac = if dad { [0x33, 0x33, 0, 0, 0, 1] } else { requester_mac.0 };
    f[0..6].copy_from_slice(&dst_mac);
    f[6..12].copy_from_slice(&port.mac.0);
    // IPv6 header: payload length, hop limit 255, addresses (version, class and flow label kept).
    f[l3 + 4..l3 + 6].copy_from_slice(&((ndp::BODY_LEN + ndp::LLADDR_OPT_LEN) as u16).to_be_bytes());
    f[l3 + 6] = ndp::NEXT_HEADER_ICMPV6;
    f[l3 + 7] = 255;
    f[l3 + 8..l3 + 24].copy_from_slice(&ip);
    f[l3 + 24..l3 + 40].copy_from_slice(&dst);
    ndp::emit_advertisement(&mut f[l4..], &ip, port.mac, !dad, &ip, &dst);
    true
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::buf::VecBuf;
    use crate::parse::parse;
    use crate::wire::checksum;

    fn port() -> PortAddr {
        let mut v6 = [0u8; 16];
        v6[0] = 0xfd;
        v6[15] = 0xfe;
        PortAddr { mac: "02:00:00:00:00:fe".parse().unwrap(), ipv4: Some([10, 0, 0, 254]), ipv6: Some(v6) }
    }

    /// A broadcast ARP request from 02:00:00:00:01:01 / 10.0.0.2 for `target`, optionally
    /// tagged with VID 7, padded to 60 bytes.
    pub(crate) fn arp_request(target: [u8; 4], vlan: bool) -> Vec<u8> {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&[2, 0, 0, 0, 1, 1]);
        if vlan {
            f.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
        }
        f.extend_from_slice(&[0x08, 0x06]);
        let req = ArpRepr {
            operation: OP_REQUEST,
            sender_mac: "02:00:00:00:01:01".parse().unwrap(),
            sender_ip: [10, 0, 0, 2],
            target_mac: Default::default(),
            target_ip: target,
        };
        let mut a = [0u8; 28];
        req.emit(&mut a).unwrap();
        f.extend_from_slice(&a);
        f.resize(60, 0);
        f
    }

    fn ns(target: [u8; 16], src: [u8; 16], hop: u8) -> Vec<u8> {
        let mut f = vec![0x33, 0x33, 0xff, 0, 0, 0xfe, 2, 0, 0, 0, 1, 1, 0x86, 0xdd];
        let mut ip = [0u8; 40];
        ip[0] = 0x60;
        ip[4..6].copy_from_slice(&32u16.to_be_bytes());
        ip[6] = 58;
        ip[7] = hop;
        ip[8..24].copy_from_slice(&src);
        let mut dst = [0u8; 16];
        dst[0] = 0xff;
        dst[1] = 0x02;
        dst[11] = 1;
        dst[12] = 0xff;
        dst[15] = target[15];
        ip[24..40].copy_from_slice(&dst);
        f.extend_from_slice(&ip);
        let mut icmp = [0u8; 32];
        icmp[0] = ndp::TYPE_NS;
        icmp[8..24].copy_from_slice(&target);
        icmp[24] = 1; // source link-layer address option
        icmp[25] = 1;
        icmp[26..32].copy_from_slice(&[2, 0, 0, 0, 1, 1]);
        let ph = checksum::pseudo_header_v6(&src, &dst, 58, 32);
        let ck = !checksum::combine(ph, checksum::sum(&icmp));
        icmp[2..4].copy_from_slice(&ck.to_be_bytes());
        f.extend_from_slice(&icmp);
        f
    }

    #[test]
    fn answers_arp_for_its_own_address_only() {
        for vlan in [false, true] {
            let f = arp_request([10, 0, 0, 254], vlan);
            let mut b = VecBuf::from_frame(&f);
            let p = parse(&f, 49374).unwrap();
            assert!(answer(&mut b, &p, &port()));
            let r = b.data();
            let l3 = p.l3_offset as usize;
            assert_eq!(&r[0..12], &[2, 0, 0, 0, 1, 1, 2, 0, 0, 0, 0, 0xfe]);
            let a = ArpRepr::parse(&ArpPacket::new_checked(&r[l3..]).unwrap());
            assert_eq!(a.operation, 2);
            assert_eq!((a.sender_ip, a.target_ip), ([10, 0, 0, 254], [10, 0, 0, 2]));
            assert_eq!(a.sender_mac.to_string(), "02:00:00:00:00:fe");
            assert_eq!(&r[12..l3], &f[12..l3], "same VLAN");
        }
        let f = arp_request([10, 0, 0, 9], false);
        let p = parse(&f, 49374).unwrap();
        assert!(!answer(&mut VecBuf::from_frame(&f), &p, &port()));
    }

    #[test]
    fn answers_neighbor_solicitations() {
        let me = port().ipv6.unwrap();
        let mut src = [0u8; 16];
        src[0] = 0xfd;
        src[15] = 2;
        let f = ns(me, src, 255);
        let p = parse(&f, 49374).unwrap();
        let mut b = VecBuf::from_frame(&f);
        assert!(answer(&mut b, &p, &port()));
        let r = b.data().to_vec();
        let q = parse(&r, 49374).unwrap();
        assert_eq!((q.ip_src_bytes, q.ip_dst_bytes, q.ttl), (me, src, 255));
        let icmp = &r[q.l4_offset as usize..q.ip_end as usize];
        assert_eq!((icmp[0], icmp[4], icmp.len()), (ndp::TYPE_NA, 0x60, 32));
        assert!(ndp::checksum_ok(icmp, &me, &src));
        assert_eq!(&icmp[26..32], &[2, 0, 0, 0, 0, 0xfe]);
        assert_eq!(&r[0..6], &[2, 0, 0, 0, 1, 1]);
        // Not for us, wrong hop limit, bad checksum: no answer.
        let mut other = me;
        other[15] = 9;
        for f in [ns(other, src, 255), ns(me, src, 64), {
            let mut g = ns(me, src, 255);
            let n = g.len();
            g[n - 1] ^= 1;
            g
        }] {
            let p = parse(&f, 49374).unwrap();
            assert!(!answer(&mut VecBuf::from_frame(&f), &p, &port()));
        }
        // Duplicate address detection: to all-nodes, not solicited.
        let f = ns(me, [0; 16], 255);
        let p = parse(&f, 49374).unwrap();
        let mut b = VecBuf::from_frame(&f);
        assert!(answer(&mut b, &p, &port()));
        let q = parse(b.data(), 49374).unwrap();
        assert_eq!(q.ip_dst_bytes[..2], [0xff, 0x02]);
        assert_eq!(b.data()[q.l4_offset as usize + 4], 0x20);
    }
}
