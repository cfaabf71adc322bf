//! Answering ARP (RFC 826) and IPv6 neighbour discovery (RFC 4861) for the appliance's own
//! addresses on each port, so that hosts resolve the appliance like any neighbour and need no
//! static entries. The request's buffer becomes the reply, sent back out of the ingress port on
//! the same VLAN.

use crate::agg::PortAddr;
use crate::buf::PacketBuf;
use crate::parse::{Layers, Parsed};
use crate::stats::Reason;
use crate::wire::arp::{self, ArpPacket, ArpRepr, OP_REQUEST};
use crate::wire::ipv6::{self, Ipv6Packet};
use crate::wire::ndp::{self, NdMessage};
use crate::wire::EthernetFrame;

/// What became of a packet offered to [`answer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Not a request for the appliance (or an announcement it only notes): the tables decide.
    Pass,
    /// Rewritten into the reply: send it back out of the ingress port.
    Reply,
    /// A request for the appliance that fails a validity check: drop it, counted under the
    /// reason.
    Drop(Reason),
}

/// [`answer`]'s outcome: the packet's verdict, and whether it shows another host claiming (or
/// probing for) one of the appliance's addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    /// What to do with the packet.
    pub verdict: Verdict,
    /// An address conflict, to be counted (`Counters::address_conflicts`).
    pub conflict: bool,
}

impl Answer {
    const PASS: Answer = Answer { verdict: Verdict::Pass, conflict: false };

    fn drop(r: Reason) -> Answer {
        Answer { verdict: Verdict::Drop(r), conflict: false }
    }
}

/// Answers ARP and IPv6 neighbour solicitations that ask for `port`'s addresses (`port` is the
/// ingress port's entry of `local`, the appliance's addresses on every port). `buf` (parsed as
/// `p`) becomes the reply when the verdict is [`Verdict::Reply`]; otherwise it is untouched.
///
/// ARP (RFC 826, RFC 5227):
/// - a request whose target is the port's IPv4 address is answered to the frame's Ethernet
///   source, unless its sender hardware address is a broadcast or multicast address
///   ([`Reason::ArpSenderMulticast`]) or differs from the Ethernet source
///   ([`Reason::ArpSenderMismatch`]): a reply is never sent to a group, nor to a MAC the frame
///   did not come from; the reply is the 28-byte ARP packet after the request's Ethernet header
///   and tags, without the request's trailing bytes (padding a short frame is the NIC's);
/// - a packet (request or reply) whose sender IPv4 address is the port's, from a sender hardware
///   address other than the port's MAC, is a conflict (a gratuitous ARP or an answer claiming
///   the address): noted, never answered, passed to the tables; a probe (sender IPv4 address
///   0.0.0.0, RFC 5227 section 2.1.1) for the port's address is a conflict too, and is answered
///   (the appliance defends its address).
///
/// IPv6: a Neighbor Solicitation for the appliance (its destination is the port's address or
/// that address's solicited-node multicast group, or its target is the port's address), without
/// extension headers or fragmentation, must pass RFC 4861 section 7.1.1's checks, each failure a
/// drop with its reason: hop limit 255, length at least 24 bytes, code 0, a valid ICMPv6
/// checksum, a target that is not multicast, no option of length zero (or running past the
/// message), a source that is neither multicast (RFC 4291 section 2.7) nor the loopback address
/// (RFC 4291 section 2.5.3; [`Reason::NdBadSource`]) nor one of `local`'s IPv6 addresses, and
/// from the unspecified source (duplicate address detection) a solicited-node destination and no
/// source link-layer address option. A valid one whose target is the port's address is answered
/// with a Neighbor Advertisement (RFC 4861 section 7.2.4): to its source, solicited, at the
/// link-layer address its source link-layer address option gives (RFC 4861 section 7.2.3), else
/// at the frame's Ethernet source; a duplicate address detection probe to all-nodes,
/// unsolicited, and counted as a conflict. Neither is answered when the frame's Ethernet source
/// or the option's address is a broadcast or multicast address ([`Reason::NdSenderMulticast`]):
/// a reply is never sent to a group. The advertisement is a new packet: traffic class 0 (Not-ECT,
/// RFC 3168 section 5) and flow label 0 (RFC 6437 section 3), whatever the solicitation carried.
/// A valid solicitation for another target passes.
pub fn answer<B: PacketBuf>(buf: &mut B, p: &Parsed, port: &PortAddr, local: &[PortAddr]) -> Answer {
    if p.has(Layers::ARP) {
        answer_arp(buf, p, port)
    } else {
        answer_ns(buf, p, port, local)
    }
}

/// True when [`answer`] reads `p` at all on `port`: ARP on a port with an IPv4 address, ICMPv6
/// on a port with an IPv6 address. The rest (a port without an address of the family) is
/// transit, for the tables.
pub fn serves(p: &Parsed, port: &PortAddr) -> bool {
    if p.has(Layers::ARP) {
        port.ipv4.is_some()
    } else {
        p.has(Layers::IPV6) && p.ip_proto == ndp::NEXT_HEADER_ICMPV6 && port.ipv6.is_some()
    }
}

/// For a packet [`serves`] accepts that arrived as a chain, whose first segment is `first`:
/// true when [`answer`] would answer it or drop it, which needs the whole packet in one
/// segment: an ARP request for the port's IPv4 address from another sender, a Neighbor
/// Solicitation (no extension header, not a fragment) addressed to the port (destination or
/// target). Judged from the first segment's bytes; true when the bytes it needs are not all
/// there. False for the rest (another host's ARP, an ARP from the port's own address, which
/// [`conflict_in`] judges, ICMPv6 echo, other ND messages), which go on to the tables like
/// any chain.
pub fn concerns(first: &[u8], p: &Parsed, port: &PortAddr) -> bool {
    if p.has(Layers::ARP) {
        let Some(ip) = port.ipv4 else { return false };
        return arp_in(first, p)
            .is_none_or(|req| req.sender_ip != ip && req.operation == OP_REQUEST && req.target_ip == ip);
    }
    let Some(ip) = port.ipv6 else { return false };
    if p.has(Layers::IP_FRAGMENT) || p.l4_offset as usize != p.l3_offset as usize + ipv6::HEADER_LEN {
        return false;
    }
    let l4 = p.l4_offset as usize;
    match first.get(l4) {
        Some(&t) if t != ndp::TYPE_NS => false,
        Some(_) if p.ip_dst_bytes == ip || p.ip_dst_bytes == ndp::solicited_node(&ip) => true,
        Some(_) => first.get(l4 + 8..l4 + 24).is_none_or(|target| target == ip),
        None => true,
    }
}

/// For an ARP packet [`serves`] accepts that arrived as a chain, whose first segment is
/// `first`: true when it shows another host claiming the port's IPv4 address (sender address
/// the port's, sender hardware address not), the conflict [`answer`] notes before passing it
/// to the tables.
pub fn conflict_in(first: &[u8], p: &Parsed, port: &PortAddr) -> bool {
    let (Some(ip), true) = (port.ipv4, p.has(Layers::ARP)) else { return false };
    arp_in(first, p).is_some_and(|req| req.sender_ip == ip && req.sender_mac != port.mac)
}

/// The ARP packet of `p` in `first` (a frame or its first segment); `None` when not all of it
/// is there.
fn arp_in(first: &[u8], p: &Parsed) -> Option<ArpRepr> {
    ArpPacket::new_checked(first.get(p.l3_offset as usize..)?).ok().map(|arp| ArpRepr::parse(&arp))
}

fn answer_arp<B: PacketBuf>(buf: &mut B, p: &Parsed, port: &PortAddr) -> Answer {
    let l3 = p.l3_offset as usize;
    let Some(ip) = port.ipv4 else { return Answer::PASS };
    let Ok(arp) = ArpPacket::new_checked(&buf.data()[l3..]) else { return Answer::PASS };
    let req = ArpRepr::parse(&arp);
    if req.sender_ip == ip {
        // Another host claims the address (the appliance's own frames, looped back, do not).
        return Answer { verdict: Verdict::Pass, conflict: req.sender_mac != port.mac };
    }
    if req.operation != OP_REQUEST || req.target_ip != ip {
        return Answer::PASS;
    }
    let probe = req.sender_ip == [0; 4];
    let verdict = if req.sender_mac.is_multicast() {
        Verdict::Drop(Reason::ArpSenderMulticast)
    } else if req.sender_mac != p.eth_src {
        Verdict::Drop(Reason::ArpSenderMismatch)
    } else {
        // The reply is the ARP packet alone after the request's Ethernet header and tags: the
        // request's trailing bytes (its padding to 60) are not the reply's; padding a short
        // frame is the NIC's (as for the neighbour advertisement).
        if !buf.set_len(l3 + arp::PACKET_LEN) {
            return Answer::PASS;
        }
        let reply = req.reply(port.mac);
        let f = buf.data_mut();
        if reply.emit(&mut f[l3..]).is_err() {
            return Answer::PASS;
        }
        let mut eth = EthernetFrame::new_unchecked(f);
        eth.set_dst(p.eth_src);
        eth.set_src(port.mac);
        Verdict::Reply
    };
    Answer { verdict, conflict: probe }
}

/// The IPv6 loopback address `::1` (RFC 4291 section 2.5.3).
const LOOPBACK: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

fn answer_ns<B: PacketBuf>(buf: &mut B, p: &Parsed, port: &PortAddr, local: &[PortAddr]) -> Answer {
    if !p.has(Layers::IPV6) || p.has(Layers::IP_FRAGMENT) || p.ip_proto != ndp::NEXT_HEADER_ICMPV6 {
        return Answer::PASS;
    }
    let Some(ip) = port.ipv6 else { return Answer::PASS };
    let (l3, l4) = (p.l3_offset as usize, p.l4_offset as usize);
    let f = buf.data();
    let icmp = &f[l4..p.ip_end as usize];
    if l4 != l3 + ipv6::HEADER_LEN || icmp.first() != Some(&ndp::TYPE_NS) {
        return Answer::PASS;
    }
    let ns = NdMessage::new_checked(icmp).ok();
    let target = ns.as_ref().map(NdMessage::target);
    let dst = p.ip_dst_bytes;
    if dst != ip && dst != ndp::solicited_node(&ip) && target != Some(ip) {
        return Answer::PASS;
    }
    // RFC 4861 section 7.1.1, in its order.
    let src = p.ip_src_bytes;
    let unspecified = src == [0; 16];
    let Some(ns) = ns else { return Answer::drop(Reason::NdTooShort) };
    let target = ns.target();
    if p.ttl != 255 {
        return Answer::drop(Reason::NdBadHopLimit);
    }
    if !ndp::checksum_ok(icmp, &src, &dst) {
        return Answer::drop(Reason::NdBadChecksum);
    }
    if ns.code() != 0 {
        return Answer::drop(Reason::NdBadCode);
    }
    if target[0] == 0xff {
        return Answer::drop(Reason::NdMulticastTarget);
    }
    let Some(source_lladdr) = ndp::check_options(ns.options()) else {
        return Answer::drop(Reason::NdBadOption);
    };
    // Never a source: a multicast address (RFC 4291 section 2.7), the loopback address (RFC
    // 4291 section 2.5.3: never sent on a link).
    if src[0] == 0xff || src == LOOPBACK {
        return Answer::drop(Reason::NdBadSource);
    }
    if local.iter().any(|a| a.ipv6 == Some(src)) {
        return Answer::drop(Reason::NdOwnSource);
    }
    if unspecified && (!ndp::is_solicited_node(&dst) || source_lladdr.is_some()) {
        return Answer::drop(Reason::NdBadUnspecifiedSource);
    }
    if target != ip {
        return Answer::PASS;
    }
    // The advertisement goes to the source's link-layer address: the one its source link-layer
    // address option gives (RFC 4861 sections 7.2.3, 7.2.4), else the frame's Ethernet source;
    // never to a group, nor for a frame from a group (IEEE 802: never a source).
    let requester_mac = source_lladdr.unwrap_or(p.eth_src);
    if p.eth_src.is_multicast() || requester_mac.is_multicast() {
        return Answer { verdict: Verdict::Drop(Reason::NdSenderMulticast), conflict: unspecified };
    }
    let dst = if unspecified { ndp::ALL_NODES } else { src };
    let len = l4 + ndp::BODY_LEN + ndp::LLADDR_OPT_LEN;
    if !buf.set_len(len) {
        return Answer::PASS;
    }
    let f = buf.data_mut();
    let mut eth = EthernetFrame::new_unchecked(&mut *f);
    eth.set_dst(if unspecified { ndp::multicast_mac(&ndp::ALL_NODES) } else { requester_mac });
    eth.set_src(port.mac);
    // IPv6 header: a new packet's (RFC 8200 section 3): traffic class 0 (DSCP 0, Not-ECT: only a
    // congested router sets CE, RFC 3168 section 5), flow label 0 (not the requester's flow, RFC
    // 6437 section 3), payload length, hop limit 255, addresses.
    let mut ip6 = Ipv6Packet::new_unchecked(&mut f[l3..l4]);
    ip6.set_version(6);
    ip6.set_traffic_class(0);
    ip6.set_flow_label(0);
    ip6.set_payload_len((ndp::BODY_LEN + ndp::LLADDR_OPT_LEN) as u16);
    ip6.set_next_header(ndp::NEXT_HEADER_ICMPV6);
    ip6.set_hop_limit(255);
    ip6.set_src_addr(ip);
    ip6.set_dst_addr(dst);
    ndp::emit_advertisement(&mut f[l4..], &ip, port.mac, !unspecified, &ip, &dst);
    Answer { verdict: Verdict::Reply, conflict: unspecified }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::buf::VecBuf;
    use crate::parse::parse;
    use crate::wire::checksum;
    use crate::wire::gradient::DEFAULT_UDP_PORT;
    use crate::wire::EthernetAddress;

    const ME_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0xfe];
    const PEER: [u8; 6] = [2, 0, 0, 0, 1, 1];

    fn v6(last: u8) -> [u8; 16] {
        let mut a = [0u8; 16];
        a[0] = 0xfd;
        a[15] = last;
        a
    }

    fn port() -> PortAddr {
        PortAddr { mac: EthernetAddress(ME_MAC), ipv4: Some([10, 0, 0, 254]), ipv6: Some(v6(0xfe)) }
    }

    /// The appliance's addresses: `port()` as port 0, and port 1 with fd00::fd.
    fn local() -> Vec<PortAddr> {
        vec![port(), PortAddr { mac: EthernetAddress([2, 0, 0, 0, 0, 0xfd]), ipv4: None, ipv6: Some(v6(0xfd)) }]
    }

    /// An ARP packet from Ethernet source `eth_src` to broadcast, optionally tagged with VID 7,
    /// padded to 60 bytes.
    fn arp(eth_src: [u8; 6], op: u16, sha: [u8; 6], spa: [u8; 4], tpa: [u8; 4], vlan: bool) -> Vec<u8> {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&eth_src);
        if vlan {
            f.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
        }
        f.extend_from_slice(&[0x08, 0x06]);
        let req = ArpRepr {
            operation: op,
            sender_mac: EthernetAddress(sha),
            sender_ip: spa,
            target_mac: Default::default(),
            target_ip: tpa,
        };
        let mut a = [0u8; 28];
        req.emit(&mut a).unwrap();
        f.extend_from_slice(&a);
        f.resize(60, 0);
        f
    }

    /// A broadcast ARP request from 02:00:00:00:01:01 / 10.0.0.2 for `target`, optionally
    /// tagged with VID 7, padded to 60 bytes.
    pub(crate) fn arp_request(target: [u8; 4], vlan: bool) -> Vec<u8> {
        arp(PEER, OP_REQUEST, PEER, [10, 0, 0, 2], target, vlan)
    }

    /// Offers `f` on port 0: the answer and the frame afterwards.
    fn offer(f: &[u8]) -> (Answer, Vec<u8>) {
        let p = parse(f, DEFAULT_UDP_PORT).unwrap();
        let mut b = VecBuf::from_frame(f);
        let a = answer(&mut b, &p, &port(), &local());
        if a.verdict != Verdict::Reply {
            assert_eq!(b.data(), f, "a frame that is not answered is left untouched");
        }
        (a, b.data().to_vec())
    }

    const PASS: Answer = Answer { verdict: Verdict::Pass, conflict: false };

    fn dropped(r: Reason) -> Answer {
        Answer { verdict: Verdict::Drop(r), conflict: false }
    }

    /// A Neighbor Solicitation from `src` to `dst` for `target` with hop limit `hop` and the
    /// ICMPv6 `options` after the 24-byte body (checksum filled).
    fn ns_with(target: [u8; 16], src: [u8; 16], dst: [u8; 16], hop: u8, options: &[u8]) -> Vec<u8> {
        let mut f = vec![0x33, 0x33, dst[12], dst[13], dst[14], dst[15]];
        f.extend_from_slice(&PEER);
        f.extend_from_slice(&[0x86, 0xdd]);
        let icmp_len = 24 + options.len();
        let mut ip = [0u8; 40];
        ip[0] = 0x60;
        ip[4..6].copy_from_slice(&(icmp_len as u16).to_be_bytes());
        ip[6] = 58;
        ip[7] = hop;
        ip[8..24].copy_from_slice(&src);
        ip[24..40].copy_from_slice(&dst);
        f.extend_from_slice(&ip);
        let mut icmp = vec![0u8; 24];
        icmp[0] = ndp::TYPE_NS;
        icmp[8..24].copy_from_slice(&target);
        icmp.extend_from_slice(options);
        let ph = checksum::pseudo_header_v6(&src, &dst, 58, icmp_len as u32);
        let ck = !checksum::combine(ph, checksum::sum(&icmp));
        icmp[2..4].copy_from_slice(&ck.to_be_bytes());
        f.extend_from_slice(&icmp);
        f
    }

    const SLLAO: [u8; 8] = [1, 1, 2, 0, 0, 0, 1, 1];

    /// A solicitation to `target`'s solicited-node group with a source link-layer address option.
    fn ns(target: [u8; 16], src: [u8; 16], hop: u8) -> Vec<u8> {
        ns_with(target, src, ndp::solicited_node(&target), hop, &SLLAO)
    }

    /// Re-fills the ICMPv6 checksum of a solicitation built by [`ns_with`] after an edit.
    fn refill(f: &mut [u8]) {
        let (src, dst): ([u8; 16], [u8; 16]) = (f[22..38].try_into().unwrap(), f[38..54].try_into().unwrap());
        f[56..58].fill(0);
        let ph = checksum::pseudo_header_v6(&src, &dst, 58, (f.len() - 54) as u32);
        let ck = !checksum::combine(ph, checksum::sum(&f[54..]));
        f[56..58].copy_from_slice(&ck.to_be_bytes());
    }

    #[test]
    fn answers_arp_for_its_own_address_only() {
        for vlan in [false, true] {
            let f = arp_request([10, 0, 0, 254], vlan);
            let l3 = if vlan { 18 } else { 14 };
            let (a, r) = offer(&f);
            assert_eq!(a, Answer { verdict: Verdict::Reply, conflict: false });
            assert_eq!(&r[0..12], &[2, 0, 0, 0, 1, 1, 2, 0, 0, 0, 0, 0xfe]);
            let a = ArpRepr::parse(&ArpPacket::new_checked(&r[l3..]).unwrap());
            assert_eq!(a.operation, 2);
            assert_eq!((a.sender_ip, a.target_ip), ([10, 0, 0, 254], [10, 0, 0, 2]));
            assert_eq!(a.sender_mac.to_string(), "02:00:00:00:00:fe");
            assert_eq!(a.target_mac.0, PEER);
            assert_eq!(&r[12..l3], &f[12..l3], "same VLAN");
            // The ARP packet alone after the header: the request's padding (to 60) is not
            // echoed.
            assert_eq!(r.len(), l3 + 28);
            assert_eq!(
                &r[l3..],
                &[0, 1, 8, 0, 6, 4, 0, 2, 2, 0, 0, 0, 0, 0xfe, 10, 0, 0, 254, 2, 0, 0, 0, 1, 1, 10, 0, 0, 2][..]
            );
        }
        // Trailing bytes of any kind (0xaa padding, a 102-byte request) are trimmed the same.
        let mut f = arp_request([10, 0, 0, 254], false);
        f.resize(102, 0xaa);
        let (a, r) = offer(&f);
        assert_eq!(a.verdict, Verdict::Reply);
        assert_eq!(r.len(), 42);
        assert_eq!(offer(&arp_request([10, 0, 0, 9], false)).0, PASS);
        // A reply for the appliance's address is not a request: the tables decide.
        assert_eq!(offer(&arp(PEER, 2, PEER, [10, 0, 0, 2], [10, 0, 0, 254], false)).0, PASS);
    }

    #[test]
    fn arp_requests_from_group_or_mismatched_senders_are_dropped() {
        let me = [10, 0, 0, 254];
        let peer_ip = [10, 0, 0, 2];
        for sha in [[0xff; 6], [0x01, 0, 0x5e, 0, 0, 1], [0x33, 0x33, 0, 0, 0, 1], [0x03, 0, 0, 0, 0, 1]] {
            // Whatever the Ethernet source says, a group sender is never answered.
            assert_eq!(offer(&arp(PEER, OP_REQUEST, sha, peer_ip, me, false)).0, dropped(Reason::ArpSenderMulticast));
            assert_eq!(offer(&arp(sha, OP_REQUEST, sha, peer_ip, me, false)).0, dropped(Reason::ArpSenderMulticast));
        }
        // A unicast sender hardware address that is not the frame's source.
        let other = [2, 0, 0, 0, 9, 9];
        assert_eq!(offer(&arp(PEER, OP_REQUEST, other, peer_ip, me, false)).0, dropped(Reason::ArpSenderMismatch));
        assert_eq!(offer(&arp(PEER, OP_REQUEST, other, peer_ip, me, true)).0, dropped(Reason::ArpSenderMismatch));
        // The same for another host's address is not the appliance's to judge.
        assert_eq!(offer(&arp(PEER, OP_REQUEST, other, peer_ip, [10, 0, 0, 9], false)).0, PASS);
        assert_eq!(offer(&arp(PEER, OP_REQUEST, [0xff; 6], peer_ip, [10, 0, 0, 9], false)).0, PASS);
    }

    #[test]
    fn arp_replies_go_to_the_ethernet_source() {
        // A unicast sender that matches: the reply's destination is the frame's source, whatever
        // the request's Ethernet destination was.
        let mut f = arp_request([10, 0, 0, 254], false);
        f[0..6].copy_from_slice(&ME_MAC);
        let (a, r) = offer(&f);
        assert_eq!(a.verdict, Verdict::Reply);
        assert_eq!(&r[0..6], &PEER);
    }

    #[test]
    fn gratuitous_arp_and_probes_for_its_address_are_conflicts() {
        let me = [10, 0, 0, 254];
        let intruder = [2, 0, 0, 0, 6, 6];
        let conflict_pass = Answer { verdict: Verdict::Pass, conflict: true };
        // Gratuitous request and reply (sender = target = the appliance's address), and a reply
        // claiming it to someone: noted, never answered.
        assert_eq!(offer(&arp(intruder, OP_REQUEST, intruder, me, me, false)).0, conflict_pass);
        assert_eq!(offer(&arp(intruder, 2, intruder, me, me, false)).0, conflict_pass);
        assert_eq!(offer(&arp(intruder, 2, intruder, me, [10, 0, 0, 2], true)).0, conflict_pass);
        // The appliance's own announcement, looped back: no conflict.
        assert_eq!(offer(&arp(ME_MAC, OP_REQUEST, ME_MAC, me, me, false)).0, PASS);
        // An RFC 5227 probe (sender 0.0.0.0) for the appliance's address: a conflict, and
        // answered to the prober, which then sees the address is taken.
        let (a, r) = offer(&arp(intruder, OP_REQUEST, intruder, [0; 4], me, false));
        assert_eq!(a, Answer { verdict: Verdict::Reply, conflict: true });
        assert_eq!(&r[0..6], &intruder);
        let rep = ArpRepr::parse(&ArpPacket::new_checked(&r[14..]).unwrap());
        assert_eq!((rep.operation, rep.sender_ip, rep.target_ip, rep.target_mac.0), (2, me, [0; 4], intruder));
        // A probe for another address is none of the appliance's business.
        assert_eq!(offer(&arp(intruder, OP_REQUEST, intruder, [0; 4], [10, 0, 0, 9], false)).0, PASS);
        // A probe from a group sender: a conflict, and a drop.
        assert_eq!(
            offer(&arp(intruder, OP_REQUEST, [0xff; 6], [0; 4], me, false)).0,
            Answer { verdict: Verdict::Drop(Reason::ArpSenderMulticast), conflict: true }
        );
    }

    #[test]
    fn answers_neighbor_solicitations() {
        let me = v6(0xfe);
        let src = v6(2);
        for f in [ns(me, src, 255), ns_with(me, src, me, 255, &SLLAO), ns_with(me, src, me, 255, &[])] {
            let (a, r) = offer(&f);
            assert_eq!(a, Answer { verdict: Verdict::Reply, conflict: false });
            let q = parse(&r, DEFAULT_UDP_PORT).unwrap();
            assert_eq!((q.ip_src_bytes, q.ip_dst_bytes, q.ttl), (me, src, 255));
            let icmp = &r[q.l4_offset as usize..q.ip_end as usize];
            assert_eq!((icmp[0], icmp[4], icmp.len()), (ndp::TYPE_NA, 0x60, 32));
            assert!(ndp::checksum_ok(icmp, &me, &src));
            assert_eq!(&icmp[26..32], &ME_MAC);
            assert_eq!(&r[0..6], &PEER);
        }
        // For another target (another host in the same solicited-node group, or unicast to the
        // appliance for someone else): not the appliance's.
        let mut other = me;
        other[14] = 9;
        assert_eq!(offer(&ns(other, src, 255)).0, PASS);
        assert_eq!(offer(&ns_with(other, src, me, 255, &SLLAO)).0, PASS);
        // Not for the appliance at all: the checks are not the appliance's to make.
        assert_eq!(offer(&ns(v6(9), src, 64)).0, PASS);
        // Duplicate address detection: to all-nodes, not solicited, and a conflict.
        let f = ns_with(me, [0; 16], ndp::solicited_node(&me), 255, &[]);
        let (a, r) = offer(&f);
        assert_eq!(a, Answer { verdict: Verdict::Reply, conflict: true });
        let q = parse(&r, DEFAULT_UDP_PORT).unwrap();
        assert_eq!(q.ip_dst_bytes, [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(&r[0..6], &[0x33, 0x33, 0, 0, 0, 1]);
        assert_eq!(r[q.l4_offset as usize + 4], 0x20);
    }

    /// RFC 4861 section 7.1.1, one check at a time, each on an otherwise valid solicitation.
    #[test]
    fn invalid_solicitations_for_the_appliance_are_counted_drops() {
        let me = v6(0xfe);
        let src = v6(2);
        let sn = ndp::solicited_node(&me);
        let bad_checksum = {
            let mut g = ns(me, src, 255);
            let n = g.len();
            g[n - 1] ^= 1;
            g
        };
        let code1 = {
            let mut g = ns(me, src, 255);
            g[55] = 1;
            refill(&mut g);
            g
        };
        let short = {
            // 20 bytes of ICMPv6: no whole target (the payload length says 20).
            let mut g = ns_with(me, src, me, 255, &[]);
            g.truncate(54 + 20);
            g[18..20].copy_from_slice(&20u16.to_be_bytes());
            refill(&mut g);
            g
        };
        let mut multicast_target = me;
        multicast_target[0] = 0xff;
        let mut ff05_2 = [0u8; 16];
        ff05_2[..2].copy_from_slice(&[0xff, 0x05]);
        ff05_2[15] = 2;
        let cases: Vec<(&str, Vec<u8>, Reason)> = vec![
            ("hop limit 254", ns(me, src, 254), Reason::NdBadHopLimit),
            ("hop limit 64, unicast", ns_with(me, src, me, 64, &SLLAO), Reason::NdBadHopLimit),
            ("bad checksum", bad_checksum, Reason::NdBadChecksum),
            ("code 1", code1, Reason::NdBadCode),
            ("20 bytes", short, Reason::NdTooShort),
            ("multicast target", ns_with(multicast_target, src, me, 255, &SLLAO), Reason::NdMulticastTarget),
            ("zero-length option", ns_with(me, src, sn, 255, &[1, 0, 2, 0, 0, 0, 1, 1]), Reason::NdBadOption),
            ("option past the end", ns_with(me, src, sn, 255, &[1, 2, 2, 0, 0, 0, 1, 1]), Reason::NdBadOption),
            (
                "zero-length second option",
                ns_with(me, src, sn, 255, &[SLLAO, [14, 0, 0, 0, 0, 0, 0, 0]].concat()),
                Reason::NdBadOption,
            ),
            ("from all-nodes", ns(me, ndp::ALL_NODES, 255), Reason::NdBadSource),
            ("from a solicited-node group", ns(me, sn, 255), Reason::NdBadSource),
            ("from ff05::2, unicast", ns_with(me, ff05_2, me, 255, &SLLAO), Reason::NdBadSource),
            ("from ::1", ns(me, LOOPBACK, 255), Reason::NdBadSource),
            ("from ::1, no option", ns_with(me, LOOPBACK, me, 255, &[]), Reason::NdBadSource),
            ("from itself", ns(me, me, 255), Reason::NdOwnSource),
            ("from its other port", ns(me, v6(0xfd), 255), Reason::NdOwnSource),
            ("DAD to unicast", ns_with(me, [0; 16], me, 255, &[]), Reason::NdBadUnspecifiedSource),
            (
                "DAD to all-nodes",
                ns_with(me, [0; 16], [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1], 255, &[]),
                Reason::NdBadUnspecifiedSource,
            ),
            ("DAD with SLLAO", ns_with(me, [0; 16], sn, 255, &SLLAO), Reason::NdBadUnspecifiedSource),
        ];
        for (what, f, want) in cases {
            assert_eq!(offer(&f).0, dropped(want), "{what}");
        }
    }

    /// `f` (built by [`ns_with`]) with Ethernet source `mac`.
    fn from_mac(mut f: Vec<u8>, mac: [u8; 6]) -> Vec<u8> {
        f[6..12].copy_from_slice(&mac);
        f
    }

    /// A source link-layer address option for `mac`.
    fn sllao(mac: [u8; 6]) -> [u8; 8] {
        let mut o = [1, 1, 0, 0, 0, 0, 0, 0];
        o[2..].copy_from_slice(&mac);
        o
    }

    /// RFC 4861 section 7.2.4: the advertisement goes to the source's link-layer address, the
    /// one the source link-layer address option gives (section 7.2.3), else the Ethernet
    /// source's; never to a group, nor for a frame from a group.
    #[test]
    fn advertisements_go_to_the_source_lladdr_and_never_to_a_group() {
        let me = v6(0xfe);
        let src = v6(2);
        let sn = ndp::solicited_node(&me);
        let other = [2, 0, 0, 0, 7, 7];
        // The option names another unicast MAC than the frame's source: the option's.
        let (a, r) = offer(&ns_with(me, src, sn, 255, &sllao(other)));
        assert_eq!(a, Answer { verdict: Verdict::Reply, conflict: false });
        assert_eq!((&r[0..6], &r[6..12]), (&other[..], &ME_MAC[..]));
        // Without the option: the Ethernet source.
        let (a, r) = offer(&from_mac(ns_with(me, src, me, 255, &[]), other));
        assert_eq!(a.verdict, Verdict::Reply);
        assert_eq!(&r[0..6], &other);
        let groups = [[0xff; 6], [0x33, 0x33, 0, 0, 0, 1], [0x01, 0, 0x5e, 0, 0, 1], [0x03, 0, 0, 0, 0, 1]];
        for g in groups {
            let cases = [
                ("group Ethernet source, no option", from_mac(ns_with(me, src, sn, 255, &[]), g)),
                ("group Ethernet source, unicast option", from_mac(ns(me, src, 255), g)),
                ("group option", ns_with(me, src, sn, 255, &sllao(g))),
                ("group option, unicast", ns_with(me, src, me, 255, &sllao(g))),
                (
                    "group option after a nonce",
                    ns_with(me, src, sn, 255, &[[14, 1, 1, 2, 3, 4, 5, 6], sllao(g)].concat()),
                ),
            ];
            for (what, f) in cases {
                assert_eq!(offer(&f).0, dropped(Reason::NdSenderMulticast), "{what} {g:02x?}");
            }
            // Duplicate address detection from a group: a conflict, and a drop.
            let dad = from_mac(ns_with(me, [0; 16], sn, 255, &[]), g);
            assert_eq!(offer(&dad).0, Answer { verdict: Verdict::Drop(Reason::NdSenderMulticast), conflict: true });
            // For another target: not the appliance's to judge.
            let mut another = me;
            another[15] = 9;
            assert_eq!(offer(&from_mac(ns_with(another, src, sn, 255, &[]), g)).0, PASS);
        }
    }

    /// The advertisement is a new packet (RFC 8200 section 3): version 6, traffic class 0
    /// (Not-ECT: RFC 3168 section 5, only a congested router sets CE), flow label 0 (RFC 6437
    /// section 3: not the requester's flow), whatever the solicitation's first word held. The
    /// whole answer, byte for byte.
    #[test]
    fn advertisements_carry_traffic_class_and_flow_label_zero() {
        let me = v6(0xfe);
        let src = v6(2);
        for word0 in [[0x6b, 0xba, 0xbc, 0xde], [0x6f, 0xff, 0xff, 0xff], [0x60, 0x30, 0, 1]] {
            let mut f = ns(me, src, 255);
            f[14..18].copy_from_slice(&word0);
            let (a, r) = offer(&f);
            assert_eq!(a.verdict, Verdict::Reply);
            let mut want = Vec::new();
            want.extend_from_slice(&PEER);
            want.extend_from_slice(&ME_MAC);
            want.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 32, 58, 255]);
            want.extend_from_slice(&me);
            want.extend_from_slice(&src);
            let mut na = [0u8; 32];
            ndp::emit_advertisement(&mut na, &me, EthernetAddress(ME_MAC), true, &me, &src);
            want.extend_from_slice(&na);
            assert_eq!(r, want, "{word0:02x?}");
            assert_eq!((na[0], na[4], &na[24..26]), (136, 0x60, &[2, 1][..]));
        }
    }
}
