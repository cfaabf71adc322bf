//! The parser against hand-built frames, the shipped capture cases and random bytes: every
//! layer it recognises, every drop reason it counts, and the invariants of `Parsed` on any input.

use super::*;
use crate::testing::case_frames;
use crate::wire::checksum;
use proptest::prelude::*;

const GRAD_PORT: u16 = gradient::DEFAULT_UDP_PORT;

fn ok(frame: &[u8]) -> Parsed {
    ok_on(frame, GRAD_PORT)
}

/// [`ok`] with the gradient carriage on `port`.
fn ok_on(frame: &[u8], port: u16) -> Parsed {
    parse(frame, port).unwrap_or_else(|e| panic!("dropped as {e}: {frame:02x?}"))
}

/// The plain-UDP case frames: 10.0.0.1:49152 -> 10.0.0.2:9000, payload 01 02 03 04.
fn assert_case_udp(p: &Parsed, l3: usize, ihl_bytes: usize) {
    assert!(p.has(Layers::ETH.union(Layers::IPV4).union(Layers::UDP)));
    assert_eq!(p.ethertype, EtherType::IPV4);
    assert_eq!((p.l3_offset as usize, p.ip_header_len as usize), (l3, ihl_bytes));
    assert_eq!(p.l4_offset as usize, l3 + ihl_bytes);
    assert_eq!((p.ip_src(), p.ip_dst()), (&[10, 0, 0, 1][..], &[10, 0, 0, 2][..]));
    assert_eq!((p.udp_src, p.udp_dst, p.udp_len, p.ip_proto, p.ttl), (49152, 9000, 12, 17, 64));
    assert_eq!(p.udp_payload().len(), 4);
    assert!(!p.has(Layers::BTH) && !p.has(Layers::GRADIENT));
}

#[test]
fn drop_reason_names() {
    for (i, r) in Reason::ALL.iter().enumerate() {
        assert_eq!(r.index(), i);
        assert!(r.name().chars().all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit()));
        assert_eq!(r.to_string(), r.name());
    }
    let mut names: Vec<_> = Reason::ALL.iter().map(|r| r.name()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), Reason::COUNT);
    assert_eq!(Reason::MalformedIpv4.name(), "malformed_ipv4");
}

/// `Layers` is a set: each layer is its own bit, a union holds exactly the bits of both
/// (a layer added twice is there once), and `remove` clears only its own.
#[test]
fn layers_are_a_set_of_distinct_bits() {
    let all = Layers::ALL;
    let mut seen = 0u32;
    for l in all {
        assert_eq!(l.bits().count_ones(), 1, "{l:?}");
        assert_eq!(seen & l.bits(), 0, "{l:?} shares a bit");
        seen |= l.bits();
    }
    assert_eq!(Layers::empty().bits(), 0);
    let l4 = Layers::IPV4.union(Layers::UDP);
    assert_eq!(l4.bits(), Layers::IPV4.bits() | Layers::UDP.bits());
    assert_eq!(l4.union(Layers::UDP), l4);
    assert_eq!(Layers::ETH.union(Layers::ETH), Layers::ETH);
    let mut l = l4;
    l.remove(Layers::UDP);
    assert_eq!(l, Layers::IPV4);
}

#[test]
fn c01_bad_ihl_all_malformed_ipv4() {
    let f = case_frames("c01_ipv4_bad_ihl.pcap");
    assert_eq!(f.len(), 3);
    for frame in &f {
        assert_eq!(parse(frame, GRAD_PORT), Err(Reason::MalformedIpv4));
    }
}

#[test]
fn c02_options_udp_through_ihl() {
    let f = case_frames("c02_ipv4_options.pcap");
    let p = ok(&f[0]);
    assert_case_udp(&p, 14, 24);
    assert_eq!(p.l4_offset, 38);
    assert_eq!(&f[0][p.udp_payload()], &[1, 2, 3, 4]);
    // Both checksums were verified: breaking either is caught.
    let mut b = f[0].clone();
    b[14 + 10] ^= 0x01;
    assert_eq!(parse(&b, GRAD_PORT), Err(Reason::BadIpv4Checksum));
    let mut b = f[0].clone();
    b[38 + 8] ^= 0x01;
    assert_eq!(parse(&b, GRAD_PORT), Err(Reason::BadUdpChecksum));
    // Option bytes are covered by the IP checksum.
    let mut b = f[0].clone();
    b[34] ^= 0x01;
    assert_eq!(parse(&b, GRAD_PORT), Err(Reason::BadIpv4Checksum));
}

#[test]
fn c03_padding_ignored() {
    let f = case_frames("c03_eth_padding_nonzero.pcap");
    assert_eq!(f[0].len(), 60);
    let p = ok(&f[0]);
    assert_case_udp(&p, 14, 20);
    assert_eq!(p.ip_datagram(), 14..46);
    assert_eq!(&f[0][p.udp_payload()], &[1, 2, 3, 4]);
    // With the gradient port on 9000, the 4 payload bytes are too short for a header: the
    // padding is never taken as gradient lanes (a short carriage, no gradient header).
    let p = ok_on(&f[0], 9000);
    assert!(p.has(Layers::GRADIENT_SHORT) && !p.has(Layers::GRADIENT));
    // A UDP length past the IP payload is malformed, even with padding bytes behind it.
    let mut b = f[0].clone();
    b[38..40].copy_from_slice(&13u16.to_be_bytes());
    assert_eq!(parse(&b, GRAD_PORT), Err(Reason::MalformedUdp));
    // An IP total length past the frame is malformed (46 bytes follow the Ethernet header).
    let mut b = f[0].clone();
    b[16..18].copy_from_slice(&47u16.to_be_bytes());
    ipv4::Ipv4Packet::new_unchecked(&mut b[14..34]).fill_checksum();
    assert_eq!(parse(&b, GRAD_PORT), Err(Reason::MalformedIpv4));
    // Up to the frame's end it is fine: the UDP length still governs.
    b[16..18].copy_from_slice(&46u16.to_be_bytes());
    ipv4::Ipv4Packet::new_unchecked(&mut b[14..34]).fill_checksum();
    let p = ok(&b);
    assert_eq!((p.ip_end, p.udp_len, p.udp_payload().len()), (60, 12, 4));
}

#[test]
fn c04_udp_checksum_ffff_and_zero() {
    let f = case_frames("c04_udp_csum_ffff_and_zero.pcap");
    assert_eq!(f.len(), 2);
    for frame in &f {
        assert_case_udp(&ok(frame), 14, 20);
    }
    assert_eq!(&f[0][40..42], &[0xff, 0xff]);
    assert_eq!(&f[1][40..42], &[0x00, 0x00]);
}

#[test]
fn c05_checksum_0001_then_0000() {
    let f = case_frames("c05_ipv4_ce_mark_cksum_becomes_0000.pcap");
    let p = ok(&f[0]);
    assert_case_udp(&p, 14, 20);
    assert_eq!((p.dscp, p.ecn), (0, 0b10));
    // RFC 1624 update for TOS 0x02 -> 0x03 on this header gives exactly 0x0000 ...
    assert_eq!(checksum::update16(0x0001, 0x4502, 0x4503), 0x0000);
    let mut b = f[0].clone();
    ipv4::Ipv4Packet::new_checked(&mut b[14..]).unwrap().update_tos(0x03);
    assert_eq!((b[15], &b[24..26]), (0x03, &[0x00, 0x00][..]));
    // ... and a stored 0x0000 that sums right parses.
    let p = ok(&b);
    assert_eq!(p.ecn, 0b11);
}

#[test]
fn c06_ecn_codepoints() {
    let f = case_frames("c06_ecn_codepoints.pcap");
    assert_eq!(f.len(), 4);
    for (i, frame) in f.iter().enumerate() {
        let p = ok(frame);
        assert_case_udp(&p, 14, 20);
        assert_eq!((p.dscp, p.ecn), (26, i as u8));
    }
}

#[test]
fn c07_ipv6_fields() {
    let f = case_frames("c07_ipv6_tc_ecn_flowlabel.pcap");
    let p = ok(&f[0]);
    assert!(p.has(Layers::IPV6.union(Layers::UDP)));
    assert_eq!((p.dscp, p.ecn, p.ttl, p.ip_proto), (46, 0b10, 64, 17));
    assert_eq!(p.ip_src().len(), 16);
    assert_eq!(p.ip_dst()[0], 0xfd);
    assert_eq!(p.ip_dst()[15], 2);
    assert_eq!((p.l3_offset, p.ip_header_len, p.l4_offset, p.ip_end), (14, 40, 54, 66));
    assert_eq!((p.udp_src, p.udp_dst, p.udp_len), (49152, 9000, 12));
    // CE marking at the parsed offset keeps version and flow label; UDP still verifies.
    let mut b = f[0].clone();
    ipv6::Ipv6Packet::new_checked(&mut b[p.l3_offset as usize..]).unwrap().set_ecn(0b11);
    assert_eq!(&b[14..18], &0x6bba_bcdeu32.to_be_bytes());
    assert_eq!(ok(&b).ecn, 0b11);
    // A zero UDP checksum over IPv6 is invalid.
    let mut b = f[0].clone();
    b[60] = 0;
    b[61] = 0;
    assert_eq!(parse(&b, GRAD_PORT), Err(Reason::BadUdpChecksum));
    // A payload length past the frame is malformed.
    let mut b = f[0].clone();
    b[19] = 13;
    assert_eq!(parse(&b, GRAD_PORT), Err(Reason::MalformedIpv6));
}

#[test]
fn c08_ipv6_extension_headers() {
    let f = case_frames("c08_ipv6_ext_headers.pcap");
    let p = ok(&f[0]);
    assert!(p.has(Layers::IPV6.union(Layers::UDP)));
    assert_eq!((p.l4_offset, p.ip_header_len, p.ip_proto), (70, 56, 17));
    assert_eq!(&f[0][p.udp_payload()], &[1, 2, 3, 4]);
    let mut b = f[0].clone();
    b[78] ^= 1;
    assert_eq!(parse(&b, GRAD_PORT), Err(Reason::BadUdpChecksum));
    // Frame 2: Hop-by-Hop claiming 2048 bytes in 8.
    assert_eq!(f[1].len(), 62);
    assert_eq!(parse(&f[1], GRAD_PORT), Err(Reason::MalformedIpv6));
}

#[test]
fn c09_stacked_vlans() {
    let f = case_frames("c09_stacked_vlan.pcap");
    for (frame, tpid) in f[..2].iter().zip([0x88a8, 0x8100]) {
        let p = ok(frame);
        assert_eq!(p.vlan_tags(), 2);
        assert_eq!((p.vlan_outer_tpid, p.vid_outer, p.vid_inner), (tpid, 100, 200));
        assert_eq!((p.l3_offset, p.ethertype), (22, EtherType::IPV4));
        assert_case_udp(&p, 22, 20);
    }
    assert_eq!(parse(&f[2], GRAD_PORT), Err(Reason::VlanDepth));
}

/// The NIC verdicts, for the offload tests.
fn rx(ip: CsumStatus, l4: CsumStatus) -> RxChecksum {
    RxChecksum { ip, l4 }
}

const STATUSES: [CsumStatus; 3] = [CsumStatus::Unknown, CsumStatus::Good, CsumStatus::Bad];

#[test]
fn offload_verdicts_on_ipv4_udp() {
    use CsumStatus::{Bad, Good, Unknown};
    let good = case_frames("c02_ipv4_options.pcap").remove(0);
    let mut bad_ip = good.clone();
    bad_ip[14 + 10] ^= 0x01;
    let mut bad_udp = good.clone();
    bad_udp[38 + 8] ^= 0x01;
    let with = |f: &[u8], ip, l4| parse_with(f, GRAD_PORT, rx(ip, l4)).map(|p| p.layers);
    let layers = ok(&good).layers;
    for l4 in STATUSES {
        // IPv4 header: GOOD is trusted (even over a wrong checksum), BAD drops (even over a
        // right one), UNKNOWN verifies in software.
        assert_eq!(with(&good, Good, l4).is_ok(), l4 != Bad);
        assert_eq!(with(&good, Bad, l4), Err(Reason::BadIpv4Checksum));
        assert_eq!(with(&bad_ip, Unknown, l4), Err(Reason::BadIpv4Checksum));
        assert_eq!(with(&bad_ip, Bad, l4), Err(Reason::BadIpv4Checksum));
    }
    assert_eq!(with(&bad_ip, Good, Good), Ok(layers));
    assert_eq!(with(&bad_ip, Good, Unknown), Ok(layers));
    for ip in [Unknown, Good] {
        // UDP: the same three verdicts.
        assert_eq!(with(&good, ip, Unknown), Ok(layers));
        assert_eq!(with(&good, ip, Good), Ok(layers));
        assert_eq!(with(&good, ip, Bad), Err(Reason::BadUdpChecksum));
        assert_eq!(with(&bad_udp, ip, Unknown), Err(Reason::BadUdpChecksum));
        assert_eq!(with(&bad_udp, ip, Good), Ok(layers));
        assert_eq!(with(&bad_udp, ip, Bad), Err(Reason::BadUdpChecksum));
    }
    // Length checks come first whatever the NIC says.
    for f in case_frames("c01_ipv4_bad_ihl.pcap") {
        for (ip, l4) in STATUSES.iter().flat_map(|&i| STATUSES.map(|l| (i, l))) {
            assert_eq!(with(&f, ip, l4), Err(Reason::MalformedIpv4));
        }
    }
    let mut long_udp = good.clone();
    long_udp[38 + 4..38 + 6].copy_from_slice(&13u16.to_be_bytes());
    assert_eq!(with(&long_udp, Good, Good), Err(Reason::MalformedUdp));
    // A zero UDP checksum over IPv4 means none, whatever the NIC says.
    let zero = case_frames("c04_udp_csum_ffff_and_zero.pcap").remove(1);
    for l4 in STATUSES {
        assert!(with(&zero, Unknown, l4).is_ok());
    }
    // `parse` is `parse_with` UNKNOWN.
    for f in [&good, &bad_ip, &bad_udp] {
        assert_eq!(parse(f, GRAD_PORT), parse_with(f, GRAD_PORT, RxChecksum::UNKNOWN));
    }
    assert_eq!(RxChecksum::default(), RxChecksum::UNKNOWN);
}

#[test]
fn offload_verdicts_on_ipv6_udp() {
    use CsumStatus::{Bad, Good, Unknown};
    let good = case_frames("c07_ipv6_tc_ecn_flowlabel.pcap").remove(0);
    let mut bad_udp = good.clone();
    bad_udp[62] ^= 0x01;
    let mut zero = good.clone();
    zero[60] = 0;
    zero[61] = 0;
    let with = |f: &[u8], ip, l4| parse_with(f, GRAD_PORT, rx(ip, l4)).map(|_| ());
    for ip in STATUSES {
        // IPv6 has no header checksum: the IP verdict is ignored.
        assert_eq!(with(&good, ip, Unknown), Ok(()));
        assert_eq!(with(&good, ip, Good), Ok(()));
        assert_eq!(with(&good, ip, Bad), Err(Reason::BadUdpChecksum));
        assert_eq!(with(&bad_udp, ip, Unknown), Err(Reason::BadUdpChecksum));
        assert_eq!(with(&bad_udp, ip, Good), Ok(()));
        assert_eq!(with(&bad_udp, ip, Bad), Err(Reason::BadUdpChecksum));
        // A zero checksum over IPv6 stays invalid outside RoCEv2, even if the NIC passes it.
        for l4 in STATUSES {
            assert_eq!(with(&zero, ip, l4), Err(Reason::BadUdpChecksum));
        }
    }
}

#[test]
fn offload_never_skips_the_icrc() {
    use CsumStatus::Good;
    let f = case_frames("c10_rocev2_ipv4_icrc.pcap").remove(0);
    assert!(parse_with(&f, GRAD_PORT, rx(Good, Good)).unwrap().has(Layers::BTH));
    let mut b = f.clone();
    b[60] ^= 1;
    assert_eq!(parse_with(&b, GRAD_PORT, rx(Good, Good)), Err(Reason::BadIcrc));
}

#[test]
fn c10_rocev2_icrc_invariant() {
    let f = case_frames("c10_rocev2_ipv4_icrc.pcap");
    assert_eq!(f.len(), 3);
    let mut icrcs = Vec::new();
    for (frame, (l3, ecn)) in f.iter().zip([(14, 0b10), (18, 0b10), (14, 0b11)]) {
        let p = ok(frame);
        assert!(p.has(Layers::UDP.union(Layers::BTH)));
        assert!(!p.has(Layers::DETH) && !p.has(Layers::GRADIENT));
        assert_eq!((p.l3_offset, p.ecn), (l3, ecn));
        assert_eq!((p.udp_dst, p.bth_opcode, p.bth_dest_qp, p.bth_psn), (4791, 0x04, 0x11, 1));
        assert_eq!(p.bth_offset, l3 + 28);
        let at = p.icrc_offset().unwrap();
        assert_eq!(at + 4, frame.len());
        icrcs.push(icrc::stored(&frame[..at + 4]).unwrap());
    }
    assert_eq!(ok(&f[1]).vid_outer, 10);
    assert_eq!(icrcs, [0x03ca_9167; 3]);
    // A payload byte changed: bad ICRC.
    let mut b = f[0].clone();
    b[60] ^= 1;
    assert_eq!(parse(&b, GRAD_PORT), Err(Reason::BadIcrc));
    // TTL decremented (with the IP checksum updated): still valid.
    let mut b = f[0].clone();
    ipv4::Ipv4Packet::new_checked(&mut b[14..]).unwrap().update_ttl(63);
    assert_eq!(ok(&b).ttl, 63);
    // An opcode without known extension headers (reserved RC 0x15, RD, manufacturer
    // specific): the BTH alone, ICRC verified over the rest, nothing else parsed.
    for op in [0x15u8, 0x40, 0x4a, 0xc0, 0xff] {
        let mut b = f[0].clone();
        b[42] = op;
        assert_eq!(parse(&b, GRAD_PORT), Err(Reason::BadIcrc), "opcode {op:#x}, stale ICRC");
        icrc::fill(&mut b[14..], 20).unwrap();
        let p = ok(&b);
        assert!(p.has(Layers::UDP.union(Layers::BTH)), "opcode {op:#x}");
        assert!(!p.has(Layers::DETH) && !p.has(Layers::GRADIENT) && !p.has(Layers::GRADIENT_SHORT));
        assert_eq!((p.bth_opcode, p.bth_dest_qp, p.bth_psn), (op, 0x11, 1));
    }
    // A pad count longer than the payload room: malformed BTH (RDMA WRITE Only needs a
    // 16-byte RETH; this packet has 16 bytes of payload, so RETH + ICRC fit but not pad 3).
    let mut b = f[0].clone();
    b[42] = 0x0a;
    b[43] |= 0x30;
    assert_eq!(parse(&b, GRAD_PORT), Err(Reason::MalformedBth));
    // TVer other than 0: recorded, not judged (the ICRC covers it).
    let mut b = f[0].clone();
    b[43] |= 0x01;
    assert_eq!(parse(&b, GRAD_PORT), Err(Reason::BadIcrc));
    icrc::fill(&mut b[14..], 20).unwrap();
    assert_eq!(ok(&b).bth_opcode, 0x04);
}

/// c10 with IPv4 options of every length (IHL 6 to 15; at IHL 10 the header is 40 bytes, as
/// IPv6's): the ICRC is IPv4's (Annex A17.4, written out here) and verifies; options count.
#[test]
fn rocev2_over_ipv4_with_options_verifies_its_icrc() {
    let f = case_frames("c10_rocev2_ipv4_icrc.pcap");
    for ihl in 6..=15usize {
        let opts = (ihl - 5) * 4;
        let mut b = f[0][..34].to_vec();
        b.extend(std::iter::repeat_n(1u8, opts)); // NOPs
        b.extend_from_slice(&f[0][34..]);
        b[14] = 0x40 | ihl as u8;
        let total = (b.len() - 14) as u16;
        b[16..18].copy_from_slice(&total.to_be_bytes());
        ipv4::Ipv4Packet::new_unchecked(&mut b[14..14 + ihl * 4]).fill_checksum();
        let l4 = 14 + ihl * 4;
        let mut masked = vec![0xffu8; 8];
        masked.extend_from_slice(&b[14..b.len() - 4]);
        for i in [14 + 1, 14 + 8, 14 + 10, 14 + 11, l4 + 6, l4 + 7, l4 + 12] {
            masked[8 + i - 14] = 0xff;
        }
        let n = b.len();
        b[n - 4..].copy_from_slice(&crc32fast::hash(&masked).to_le_bytes());
        let p = ok(&b);
        assert_eq!((p.l4_offset as usize, p.bth_opcode, p.bth_psn), (l4, 0x04, 1), "IHL {ihl}");
        let mut c = b.clone();
        c[34] = 0x00; // an option byte (NOP to End of Option List): covered
        ipv4::Ipv4Packet::new_unchecked(&mut c[14..14 + ihl * 4]).fill_checksum();
        assert_eq!(parse(&c, GRAD_PORT), Err(Reason::BadIcrc), "IHL {ihl}");
    }
}

#[test]
fn nccl_capture_every_rocev2_frame() {
    let f = case_frames("nccl_ring_allreduce_rocev2.pcap");
    assert_eq!(f.len(), 275);
    let mut by_op = std::collections::BTreeMap::new();
    let mut by_qp = std::collections::BTreeMap::new();
    let mut rocev2 = 0;
    for frame in &f {
        let p = ok(frame);
        assert!(p.has(Layers::IPV4));
        if p.has(Layers::BTH) {
            rocev2 += 1;
            *by_op.entry(p.bth_opcode).or_insert(0) += 1;
            let e = by_qp.entry(p.bth_dest_qp).or_insert((0, 0));
            *e = (e.0 + 1, e.1 + p.bth_psn);
            assert_eq!(p.udp_dst, 4791);
            let l3 = p.l3_offset as usize;
            let datagram = &frame[l3..p.l4_offset as usize + p.udp_len as usize];
            assert_eq!(icrc::verify(datagram, p.ip_header_len as usize), Ok(true));
        } else {
            assert_eq!(p.ip_proto, ipv4::Protocol::TCP);
        }
    }
    assert_eq!(rocev2, 184);
    // Per destination QP: packets and the sum of their PSNs, as tshark decodes them.
    let expect_qps = [(0x22, (32, 380)), (0x23, (120, 2132)), (0x27, (32, 380))];
    assert_eq!(by_qp.into_iter().collect::<Vec<(u32, (u32, u32))>>(), expect_qps);
    let expect = [(0x06, 8), (0x07, 48), (0x09, 8), (0x0a, 32), (0x0b, 24), (0x11, 64)];
    assert_eq!(by_op.into_iter().collect::<Vec<(u8, i32)>>(), expect);
}

// Frame builders for the carriages of spec section 1.

fn eth_header(out: &mut Vec<u8>, vlan: Option<u16>, ethertype: u16) {
    out.extend_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
    if let Some(vid) = vlan {
        out.extend_from_slice(&vlan::TPID_8021Q.to_be_bytes());
        out.extend_from_slice(&vid.to_be_bytes());
    }
    out.extend_from_slice(&ethertype.to_be_bytes());
}

const V6_SRC: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const V6_DST: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

/// Ethernet / IPv4 or IPv6 / UDP (dst `dport`) / `l4_payload`, with valid checksums (UDP
/// checksum 0 when `zero_udp_ck`).
fn udp_frame(v6: bool, vlan: Option<u16>, dport: u16, l4_payload: &[u8], zero_udp_ck: bool) -> Vec<u8> {
    let mut f = Vec::new();
    eth_header(&mut f, vlan, if v6 { EtherType::IPV6 } else { EtherType::IPV4 });
    let l3 = f.len();
    let udp_len = 8 + l4_payload.len();
    let ip_len = if v6 { 40 } else { 20 };
    f.resize(l3 + ip_len + udp_len, 0);
    if v6 {
        let r = ipv6::Ipv6Repr {
            src_addr: V6_SRC,
            dst_addr: V6_DST,
            next_header: 17,
            payload_len: udp_len as u16,
            hop_limit: 64,
            traffic_class: 0x02,
            flow_label: 0x12345,
        };
        r.emit(&mut f[l3..]).unwrap();
    } else {
        let r = ipv4::Ipv4Repr {
            src_addr: [10, 0, 0, 1],
            dst_addr: [10, 0, 0, 2],
            protocol: 17,
            payload_len: udp_len as u16,
            ttl: 64,
            dscp: 0,
            ecn: 0b10,
            ident: 1,
            dont_frag: true,
        };
        r.emit(&mut f[l3..]).unwrap();
    }
    let l4 = l3 + ip_len;
    let ur = udp::UdpRepr { src_port: 50000, dst_port: dport, payload_len: l4_payload.len() as u16 };
    ur.emit(&mut f[l4..]).unwrap();
    f[l4 + 8..].copy_from_slice(l4_payload);
    if !zero_udp_ck {
        let mut u = udp::UdpPacket::new_checked(&mut f[l4..]).unwrap();
        if v6 {
            u.fill_checksum_v6(&V6_SRC, &V6_DST);
        } else {
            u.fill_checksum_v4([10, 0, 0, 1], [10, 0, 0, 2]);
        }
    }
    f
}

fn grad_header(collective_id: u16, data_length: u32) -> [u8; 20] {
    let mut h = [0u8; 20];
    gradient::GradientRepr {
        version: gradient::VERSION,
        flags: 0,
        op_type: gradient::Op::Sum as u8,
        collective_id,
        dtype: gradient::Dtype::F32 as u8,
        reason: 0,
        worker_rank: 1,
        tensor_offset: 0,
        data_length,
        round: 0,
    }
    .emit(&mut h)
    .unwrap();
    h
}

/// A RoCEv2 UD SEND Only carrying a gradient header and `lanes`, padded to 4 bytes, ICRC
/// filled.
fn rocev2_gradient_frame(v6: bool, vlan: Option<u16>, lanes: &[u8]) -> Vec<u8> {
    let pad = (4 - (20 + lanes.len()) % 4) % 4;
    let mut l4p = vec![0u8; 12 + 8];
    bth::BthRepr {
        opcode: bth::Opcode::UD_SEND_ONLY,
        pad_count: pad as u8,
        pkey: 0xffff,
        dest_qp: 0x000123,
        psn: 7,
        ..Default::default()
    }
    .emit(&mut l4p)
    .unwrap();
    let mut d = bth::DethHeader::new_checked(&mut l4p[12..]).unwrap();
    d.set_qkey(0x1111_2222);
    d.set_src_qp(0x00abcd);
    l4p.extend_from_slice(&grad_header(9, lanes.len() as u32));
    l4p.extend_from_slice(lanes);
    l4p.resize(l4p.len() + pad + 4, 0);
    let mut f = udp_frame(v6, vlan, bth::ROCEV2_UDP_PORT, &l4p, true);
    let l3 = if vlan.is_some() { 18 } else { 14 };
    icrc::fill(&mut f[l3..], if v6 { 40 } else { 20 }).unwrap();
    f
}

#[test]
fn gradient_over_udp() {
    let lanes = [0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40];
    for (v6, vlan) in [(false, None), (true, None), (false, Some(5)), (true, Some(5))] {
        let mut l4p = grad_header(42, 8).to_vec();
        l4p.extend_from_slice(&lanes);
        let f = udp_frame(v6, vlan, GRAD_PORT, &l4p, false);
        let p = ok(&f);
        assert!(p.has(Layers::UDP.union(Layers::GRADIENT)));
        assert!(!p.has(Layers::BTH));
        assert_eq!((p.grad_collective_id, p.grad_op), (42, 1));
        assert_eq!(p.grad_offset, p.l4_offset + 8);
        assert_eq!(&f[p.grad_payload()], &lanes);
        // Another port: plain UDP.
        assert!(!parse(&f, 9000).unwrap().has(Layers::GRADIENT));
        // Header cut short: a short carriage (the aggregator drops it as malformed when
        // it is addressed to the appliance), not a gradient header.
        let f = udp_frame(v6, vlan, GRAD_PORT, &l4p[..19], false);
        let p = ok(&f);
        assert!(p.has(Layers::UDP.union(Layers::GRADIENT_SHORT)) && !p.has(Layers::GRADIENT));
        // A whole header is not short.
        assert!(!ok(&udp_frame(v6, vlan, GRAD_PORT, &l4p[..20], false)).has(Layers::GRADIENT_SHORT));
    }
    // Zero UDP checksum: none over IPv4, invalid over IPv6.
    let l4p = grad_header(1, 0);
    assert!(ok(&udp_frame(false, None, GRAD_PORT, &l4p, true)).has(Layers::GRADIENT));
    let f = udp_frame(true, None, GRAD_PORT, &l4p, true);
    assert_eq!(parse(&f, GRAD_PORT), Err(Reason::BadUdpChecksum));
}

#[test]
fn gradient_over_rocev2_ud() {
    for lanes_len in [0usize, 2, 4, 6, 64] {
        let lanes: Vec<u8> = (0..lanes_len as u8).collect();
        for (v6, vlan) in [(false, None), (true, None), (true, Some(7))] {
            let f = rocev2_gradient_frame(v6, vlan, &lanes);
            let p = ok(&f);
            let all = Layers::UDP.union(Layers::BTH).union(Layers::DETH).union(Layers::GRADIENT);
            assert!(p.has(all));
            assert_eq!((p.bth_opcode, p.bth_dest_qp, p.bth_psn), (0x64, 0x123, 7));
            assert_eq!((p.deth_qkey, p.deth_src_qp), (0x1111_2222, 0xabcd));
            assert_eq!(p.grad_offset, p.bth_offset + 20);
            assert_eq!(p.grad_collective_id, 9);
            assert_eq!(p.bth_pad as usize, (4 - (20 + lanes_len) % 4) % 4);
            // The payload excludes pad and ICRC.
            assert_eq!(&f[p.grad_payload()], &lanes[..]);
            // A UDP checksum of 0 is accepted over IPv6 for RoCEv2; a wrong one is not.
            let mut b = f.clone();
            let ck = p.l4_offset as usize + 6;
            b[ck] = 0x12;
            assert_eq!(parse(&b, GRAD_PORT), Err(Reason::BadUdpChecksum));
            // A computed one is (and the ICRC does not cover it).
            let mut b = f.clone();
            let l4 = p.l4_offset as usize;
            let mut u = udp::UdpPacket::new_checked(&mut b[l4..]).unwrap();
            if v6 {
                u.fill_checksum_v6(&V6_SRC, &V6_DST);
            } else {
                u.fill_checksum_v4([10, 0, 0, 1], [10, 0, 0, 2]);
            }
            assert!(ok(&b).has(all));
        }
    }
    // Gradient header cut short inside a valid RoCEv2 packet.
    let mut l4p = vec![0u8; 20];
    bth::BthRepr { opcode: 0x64, pkey: 0xffff, ..Default::default() }.emit(&mut l4p).unwrap();
    l4p.extend_from_slice(&[0; 16 + 4]);
    let mut f = udp_frame(false, None, 4791, &l4p, true);
    icrc::fill(&mut f[14..], 20).unwrap();
    let p = ok(&f);
    assert!(p.has(Layers::DETH.union(Layers::GRADIENT_SHORT)) && !p.has(Layers::GRADIENT));
    // A UD packet too short for its DETH.
    let mut f = udp_frame(false, None, 4791, &l4p[..12 + 4 + 4], true);
    icrc::fill(&mut f[14..], 20).unwrap();
    assert_eq!(parse(&f, GRAD_PORT), Err(Reason::MalformedBth));
}

/// XRC (IBTA Vol. 1 table 35, transport 101b) is RoCEv2 like RC, and so are RC's RDMA FLUSH
/// (FETH, RETH) and ATOMIC WRITE (RETH) of release 1.5: every opcode parses, its ICRC is
/// verified, and the headers it needs (XRCETH first on XRC requests) must fit.
#[test]
fn xrc_and_rc_flush_opcodes_parse_with_their_headers() {
    let ops: [(u8, usize); 25] = [
        (bth::Opcode::RC_FLUSH, 20),
        (bth::Opcode::RC_ATOMIC_WRITE, 16),
        (0xa0, 4),
        (0xa1, 4),
        (0xa2, 4),
        (0xa3, 8),
        (0xa4, 4),
        (0xa5, 8),
        (0xa6, 20),
        (0xa7, 4),
        (0xa8, 4),
        (0xa9, 8),
        (0xaa, 20),
        (0xab, 24),
        (0xac, 20),
        (0xad, 4),
        (0xae, 0),
        (0xaf, 4),
        (0xb0, 4),
        (0xb1, 4),
        (0xb2, 12),
        (0xb3, 32),
        (0xb4, 32),
        (0xb6, 8),
        (0xb7, 8),
    ];
    for (op, ext_len) in ops {
        for (v6, vlan) in [(false, None), (true, Some(9))] {
            let build = |headers: usize| {
                let mut l4p = vec![0u8; 12];
                bth::BthRepr { opcode: op, pkey: 0xffff, dest_qp: 0x42, psn: 3, ..Default::default() }
                    .emit(&mut l4p)
                    .unwrap();
                l4p.resize(12 + headers + 4, 0x5a);
                let mut f = udp_frame(v6, vlan, bth::ROCEV2_UDP_PORT, &l4p, true);
                let l3 = if vlan.is_some() { 18 } else { 14 };
                icrc::fill(&mut f[l3..], if v6 { 40 } else { 20 }).unwrap();
                f
            };
            let f = build(ext_len);
            let p = parse(&f, GRAD_PORT).unwrap_or_else(|e| panic!("opcode {op:#x}: {e}"));
            assert!(p.has(Layers::UDP.union(Layers::BTH)), "opcode {op:#x}");
            assert_eq!((p.bth_opcode, p.bth_dest_qp, p.bth_psn), (op, 0x42, 3));
            assert!(!p.has(Layers::DETH) && !p.has(Layers::GRADIENT));
            // One byte short of its headers: malformed, whatever the ICRC.
            if ext_len > 0 {
                assert_eq!(parse(&build(ext_len - 1), GRAD_PORT), Err(Reason::MalformedBth), "opcode {op:#x}");
            }
            // A bad ICRC is caught.
            let mut b = f.clone();
            let n = b.len();
            b[n - 1] ^= 1;
            assert_eq!(parse(&b, GRAD_PORT), Err(Reason::BadIcrc), "opcode {op:#x}");
        }
    }
}

/// UDP behind an Authentication Header is found and verified; behind a Segment Routing
/// Header with segments left, its checksum is over the final destination (RFC 8200
/// section 8.1), not the header's current one.
#[test]
fn ipv6_udp_behind_ah_and_routing_headers() {
    let udp = |dst: &[u8; 16]| {
        let mut u = vec![0u8; 12];
        udp::UdpRepr { src_port: 1000, dst_port: 9000, payload_len: 4 }.emit(&mut u).unwrap();
        u[8..].copy_from_slice(&[1, 2, 3, 4]);
        udp::UdpPacket::new_checked(&mut u[..]).unwrap().fill_checksum_v6(&V6_SRC, dst);
        u
    };
    let frame = |nh: u8, ext: &[u8], u: &[u8]| {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x86, 0xdd];
        f.resize(14 + 40, 0);
        ipv6::Ipv6Repr {
            src_addr: V6_SRC,
            dst_addr: V6_DST,
            next_header: nh,
            payload_len: (ext.len() + u.len()) as u16,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        }
        .emit(&mut f[14..])
        .unwrap();
        f.extend_from_slice(ext);
        f.extend_from_slice(u);
        f
    };
    // AH (next header UDP, length byte 4: 24 bytes with a 12-byte ICV).
    let mut ah = vec![17u8, 4];
    ah.resize(24, 0);
    let f = frame(51, &ah, &udp(&V6_DST));
    let p = ok(&f);
    assert!(p.has(Layers::IPV6.union(Layers::UDP)));
    assert_eq!((p.ip_proto, p.l4_offset, p.udp_dst), (17, 14 + 40 + 24, 9000));
    assert_eq!(&f[p.udp_payload()], &[1, 2, 3, 4]);
    // SRH (type 4), segments left 1, Segment List[0] = the final destination.
    let fin = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9];
    let mut srh = vec![17u8, 2, 4, 1, 0, 0, 0, 0];
    srh.extend_from_slice(&fin);
    let f = frame(43, &srh, &udp(&fin));
    let p = ok(&f);
    assert_eq!((p.ip_proto, p.l4_offset, p.ip_dst()), (17, 14 + 40 + 24, &V6_DST[..]));
    // The same over the header's destination is wrong.
    assert_eq!(parse(&frame(43, &srh, &udp(&V6_DST)), GRAD_PORT), Err(Reason::BadUdpChecksum));
    // With segments left 0 the header's destination is the final one.
    srh[3] = 0;
    assert!(ok(&frame(43, &srh, &udp(&V6_DST))).has(Layers::UDP));
    // RPL Source Route Header (type 3, RFC 6554), CmprI = 8, CmprE = 14, Pad 6: one 8-byte
    // address, then the last one in 2 bytes; its other 14 are the IPv6 destination's.
    let mut fin = V6_DST;
    fin[14..].copy_from_slice(&[0x12, 0x34]);
    let mut rpl = vec![17u8, 2, 3, 2, 0x8e, 0x60, 0, 0];
    rpl.extend_from_slice(&V6_DST[8..]);
    rpl.extend_from_slice(&[0x12, 0x34, 0, 0, 0, 0, 0, 0]);
    let f = frame(43, &rpl, &udp(&fin));
    let p = ok(&f);
    assert_eq!((p.ip_proto, p.l4_offset, p.ip_dst()), (17, 14 + 40 + 24, &V6_DST[..]));
    assert_eq!(parse(&frame(43, &rpl, &udp(&V6_DST)), GRAD_PORT), Err(Reason::BadUdpChecksum));
}

/// RFC 8200 section 4.4: a Routing header with more segments left than it holds addresses
/// is flagged (the appliance drops it when it is addressed to it), per type; a well-formed
/// one, or one with no segments left, is not.
#[test]
fn routing_header_segments_left_beyond_its_addresses_is_flagged() {
    let frame = |rh: &[u8]| {
        let mut u = vec![0u8; 12];
        udp::UdpRepr { src_port: 1000, dst_port: 9000, payload_len: 4 }.emit(&mut u).unwrap();
        u[8..].copy_from_slice(&[1, 2, 3, 4]);
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x86, 0xdd];
        f.resize(14 + 40, 0);
        ipv6::Ipv6Repr {
            src_addr: V6_SRC,
            dst_addr: V6_DST,
            next_header: 43,
            payload_len: (rh.len() + u.len()) as u16,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        }
        .emit(&mut f[14..])
        .unwrap();
        f.extend_from_slice(rh);
        // The checksum over the header's own destination: the flag must not depend on it.
        udp::UdpPacket::new_checked(&mut u[..]).unwrap().fill_checksum_v6(&V6_SRC, &V6_DST);
        f.extend_from_slice(&u);
        f
    };
    // (type, Hdr Ext Len, byte 4, addresses bytes) -> addresses held.
    let rh = |ty: u8, left: u8, len8: u8, b4: u8, b5: u8| {
        let mut h = vec![17u8, len8, ty, left, b4, b5, 0, 0];
        h.resize(8 + 8 * len8 as usize, 0);
        h
    };
    let cases: [(&str, Vec<u8>, usize); 6] = [
        ("type 0, 2 addresses", rh(0, 0, 4, 0, 0), 2),
        ("type 2, 1 address", rh(2, 0, 2, 0, 0), 1),
        // SRH: Last Entry 1 (2 segments) in room for 3.
        ("type 4, Last Entry 1", rh(4, 0, 6, 1, 0), 2),
        // SRH claiming Last Entry 5 in room for 1: it holds 1.
        ("type 4, Last Entry past its room", rh(4, 0, 2, 5, 0), 1),
        // RPL, CmprI 8 CmprE 14 Pad 6: one 8-byte address and a 2-byte last one.
        ("type 3, 2 compressed addresses", rh(3, 0, 2, 0x8e, 0x60), 2),
        ("type 3, no whole address", rh(3, 0, 0, 0x00, 0x00), 0),
    ];
    for (what, mut h, held) in cases {
        for left in 0..=held + 2 {
            h[3] = left as u8;
            let f = frame(&h);
            match parse(&f, GRAD_PORT) {
                Ok(p) => {
                    assert_eq!(p.ipv6_bad_segments_left, left > held, "{what}, segments left {left}");
                    assert!(p.has(Layers::IPV6));
                }
                // With segments left the checksum covers the final destination: the UDP
                // verdict is not the point here, the flag is what the walk records.
                Err(Reason::BadUdpChecksum) => {
                    let ip = ipv6::Ipv6Packet::new_checked(&f[14..]).unwrap();
                    let chain = ip.walk_extensions().unwrap();
                    assert_eq!(chain.bad_segments_left, left > held, "{what}, segments left {left}");
                }
                Err(e) => panic!("{what}: {e}"),
            }
        }
    }
    // An unknown type: segments left 0 is ignored, any other is flagged (RFC 8200 4.4).
    let mut h = rh(200, 0, 2, 0, 0);
    assert!(!ok(&frame(&h)).ipv6_bad_segments_left);
    h[3] = 1;
    assert!(ok(&frame(&h)).ipv6_bad_segments_left);
    // c08's first frame (Hop-by-Hop + Destination Options) has no Routing header.
    assert!(!ok(&case_frames("c08_ipv6_ext_headers.pcap")[0]).ipv6_bad_segments_left);
}

#[test]
fn fragments_never_udp() {
    // IPv4: MF set, or a non-zero offset.
    let f = case_frames("c02_ipv4_options.pcap");
    for (mf, off) in [(true, 0u16), (false, 8), (true, 1480)] {
        let mut b = f[0].clone();
        let mut ip = ipv4::Ipv4Packet::new_checked(&mut b[14..]).unwrap();
        ip.set_frag(false, mf, off);
        ip.fill_checksum();
        let p = ok(&b);
        assert!(p.has(Layers::IPV4.union(Layers::IP_FRAGMENT)));
        assert!(!p.has(Layers::UDP));
        assert_eq!(p.ip_proto, 17);
    }
    // IPv6: a Fragment header with a non-zero offset, followed by bytes that would be a
    // valid-looking UDP header.
    let c07 = case_frames("c07_ipv6_tc_ecn_flowlabel.pcap");
    for (off_m, frag) in [(0x0008u16 << 3, true), (0x0001, true), (0x0000, false)] {
        let mut b = c07[0][..54].to_vec();
        b[20] = 44; // next header: Fragment
        b.extend_from_slice(&[17, 0]);
        b.extend_from_slice(&off_m.to_be_bytes());
        b.extend_from_slice(&[0, 0, 0, 1]);
        b.extend_from_slice(&c07[0][54..]);
        b[18..20].copy_from_slice(&20u16.to_be_bytes());
        // (For the atomic fragment, UDP's pseudo-header and checksum are unchanged.)
        let p = parse(&b, GRAD_PORT).unwrap();
        assert_eq!(p.has(Layers::IP_FRAGMENT), frag);
        assert_eq!(p.has(Layers::UDP), !frag);
        assert_eq!(p.ip_header_len, 48);
    }
}

#[test]
fn l2_only_arp_and_runts() {
    let f = case_frames("c02_ipv4_options.pcap");
    assert_eq!(parse(&f[0][..13], GRAD_PORT), Err(Reason::Runt));
    assert_eq!(parse(&[], GRAD_PORT), Err(Reason::Runt));
    // A VLAN TPID with no tag after it.
    let mut b = f[0][..14].to_vec();
    b[12..14].copy_from_slice(&[0x81, 0x00]);
    assert_eq!(parse(&b, GRAD_PORT), Err(Reason::Runt));
    // Ethernet header only, IPv4 type: malformed IPv4.
    assert_eq!(parse(&f[0][..14], GRAD_PORT), Err(Reason::MalformedIpv4));
    // Another EtherType: valid at L2 only.
    let mut b = f[0].clone();
    b[12..14].copy_from_slice(&0x88cc_u16.to_be_bytes());
    let p = ok(&b);
    assert_eq!((p.layers, p.ethertype, p.l3_offset), (Layers::ETH, 0x88cc, 14));
    assert_eq!(p.eth_dst.to_string(), "02:00:00:00:00:02");
    assert_eq!(p.eth_src.to_string(), "02:00:00:00:00:01");
    assert!(p.ip_src().is_empty());
    // ARP.
    let mut b = f[0][..14].to_vec();
    b[12..14].copy_from_slice(&EtherType::ARP.to_be_bytes());
    b.resize(14 + 28, 0);
    arp::ArpRepr {
        operation: arp::OP_REQUEST,
        sender_ip: [10, 0, 0, 1],
        target_ip: [10, 0, 0, 2],
        ..Default::default()
    }
    .emit(&mut b[14..])
    .unwrap();
    assert!(ok(&b).has(Layers::ARP));
    assert!(!ok(&b[..41]).has(Layers::ARP));
    // Non-UDP IPv4: L3 only.
    let nccl = case_frames("nccl_ring_allreduce_rocev2.pcap");
    let p = ok(&nccl[0]);
    assert_eq!((p.ip_proto, p.layers), (6, Layers::ETH.union(Layers::IPV4)));
}

#[test]
fn parsed_is_small_and_tag_offsets() {
    assert!(core::mem::size_of::<Parsed>() <= 160, "{}", core::mem::size_of::<Parsed>());
    let f = case_frames("c09_stacked_vlan.pcap");
    let p = ok(&f[0]);
    assert_eq!((p.vlan_tag_offset(0), p.vlan_tag_offset(1), p.vlan_tag_offset(2)), (Some(12), Some(16), None));
    let p = ok(&case_frames("c10_rocev2_ipv4_icrc.pcap")[1]);
    assert_eq!((p.vlan_tags(), p.vlan_tag_offset(0), p.vlan_tag_offset(1)), (1, Some(12), None));
    assert_eq!(ok(&case_frames("c02_ipv4_options.pcap")[0]).vlan_tag_offset(0), None);
}

/// Every case frame and a sample of the NCCL capture, for the fuzz tests (read once).
fn corpus() -> &'static [Vec<u8>] {
    static CORPUS: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
    CORPUS.get_or_init(build_corpus)
}

fn build_corpus() -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    for name in [
        "c01_ipv4_bad_ihl.pcap",
        "c02_ipv4_options.pcap",
        "c03_eth_padding_nonzero.pcap",
        "c04_udp_csum_ffff_and_zero.pcap",
        "c05_ipv4_ce_mark_cksum_becomes_0000.pcap",
        "c06_ecn_codepoints.pcap",
        "c07_ipv6_tc_ecn_flowlabel.pcap",
        "c08_ipv6_ext_headers.pcap",
        "c09_stacked_vlan.pcap",
        "c10_rocev2_ipv4_icrc.pcap",
    ] {
        v.extend(case_frames(name));
    }
    v.extend(case_frames("nccl_ring_allreduce_rocev2.pcap").into_iter().step_by(9));
    v.push(rocev2_gradient_frame(true, Some(3), &[1, 2, 3, 4, 5, 6]));
    v.push(udp_frame(true, None, GRAD_PORT, &grad_header(1, 4), false));
    v
}

/// The invariants of a successful parse: every offset is inside the frame.
fn check_invariants(frame: &[u8], p: &Parsed) -> Result<(), TestCaseError> {
    let n = frame.len();
    prop_assert!(p.has(Layers::ETH));
    prop_assert!(p.l3_offset as usize <= n);
    if p.has(Layers::IPV4) || p.has(Layers::IPV6) {
        prop_assert!(p.ip_end as usize <= n);
        prop_assert!(p.l4_offset <= p.ip_end);
    }
    if p.has(Layers::UDP) {
        prop_assert!(p.udp_payload().end <= p.ip_end as usize);
    }
    if p.has(Layers::GRADIENT) {
        prop_assert!(p.grad_payload().end <= p.udp_payload().end);
        prop_assert!(p.grad_offset as usize + 20 == p.grad_payload_offset as usize);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200), port in any::<u16>()) {
        if let Ok(p) = parse(&bytes, port) {
            check_invariants(&bytes, &p)?;
        }
    }

    /// Random bytes after a plausible header stack, so that the deeper layers are reached.
    #[test]
    fn random_tails_never_panic(which in any::<prop::sample::Index>(), keep in 0usize..120, tail in proptest::collection::vec(any::<u8>(), 0..120)) {
        let base = which.get(corpus());
        let mut f = base[..keep.min(base.len())].to_vec();
        f.extend_from_slice(&tail);
        if let Ok(p) = parse(&f, GRAD_PORT) {
            check_invariants(&f, &p)?;
        }
    }

    /// `parse_into` over a slot left dirty by the previous frame gives what `parse` gives.
    #[test]
    fn parse_into_a_reused_slot_equals_parse(
        first in any::<prop::sample::Index>(), which in any::<prop::sample::Index>(),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut slot = Parsed::default();
        let _ = parse_into(&first.get(corpus())[..], GRAD_PORT, RxChecksum::UNKNOWN, &mut slot);
        let base = which.get(corpus());
        let f = &base[..cut.index(base.len() + 1)];
        let got = parse_into(f, GRAD_PORT, RxChecksum::UNKNOWN, &mut slot);
        match parse(f, GRAD_PORT) {
            Ok(p) => prop_assert_eq!((got, slot), (Ok(()), p)),
            Err(r) => prop_assert_eq!(got, Err(r)),
        }
    }

    #[test]
    fn truncated_and_mutated_real_frames_never_panic(
        which in any::<prop::sample::Index>(), cut in any::<prop::sample::Index>(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
    ) {
        let base = which.get(corpus());
        let n = cut.index(base.len() + 1);
        let f = &base[..n];
        if let Ok(p) = parse(f, GRAD_PORT) {
            check_invariants(f, &p)?;
        }
        let mut m = base.clone();
        for (i, v) in &flips {
            let i = i.index(m.len());
            m[i] = *v;
        }
        if let Ok(p) = parse(&m, GRAD_PORT) {
            check_invariants(&m, &p)?;
        }
    }
}

/// The router's parse and `verify_l4` against the full parse, on one frame and NIC verdict:
/// the same fields when both accept (but for the mark), the full parse's reason from
/// `verify_l4` when only the router's accepts, never the router's refusing what the full one
/// accepts.
fn router_then_verify_agrees(f: &[u8], rx: RxChecksum) -> Result<(), TestCaseError> {
    let full = parse_with(f, GRAD_PORT, rx);
    let router = parse_checked(f, GRAD_PORT, rx, Checks::Router);
    match (full, router) {
        (Ok(a), Ok(mut b)) => {
            prop_assert_eq!(verify_l4(f, &b, rx), Ok(()));
            prop_assert_eq!(b.has(Layers::L4_UNVERIFIED), b.has(Layers::UDP));
            b.layers.remove(Layers::L4_UNVERIFIED);
            prop_assert_eq!(a, b);
        }
        (Err(r), Ok(b)) => prop_assert_eq!(verify_l4(f, &b, rx), Err(r)),
        (Ok(_), Err(r)) => prop_assert!(false, "the router parse refused as {} what the full parse accepts", r),
        (Err(_), Err(_)) => {}
    }
    Ok(())
}

/// An IPv4 frame 10.0.0.1:49152 -> `dst`:9000 (payload 01 02 03 04) with a NOP and a Loose
/// Source and Record Route holding 10.9.9.9 at `pointer` (4: unfinished; 8: finished), its UDP
/// checksum computed over `csum_dst`.
fn lsrr_frame(dst: [u8; 4], pointer: u8, csum_dst: [u8; 4]) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0];
    let mut ip = vec![0x47, 0, 0, 40, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1];
    ip.extend_from_slice(&dst);
    ip.extend_from_slice(&[1, 131, 7, pointer, 10, 9, 9, 9]);
    ipv4::Ipv4Packet::new_unchecked(&mut ip[..]).fill_checksum();
    let mut u = vec![0xc0, 0, 0x23, 0x28, 0, 12, 0, 0, 1, 2, 3, 4];
    udp::UdpPacket::new_unchecked(&mut u[..]).fill_checksum_v4([10, 0, 0, 1], csum_dst);
    f.extend_from_slice(&ip);
    f.extend_from_slice(&u);
    f
}

/// The UDP checksum of a datagram on an unfinished IPv4 source route is over the route's last
/// address (the destination it will arrive with), in the full parse and in `verify_l4`; on a
/// finished route, over the header's destination. Either way the route is recorded only while
/// unfinished.
#[test]
fn a_source_routed_datagram_is_checked_against_its_final_destination() {
    let router = |f: &[u8]| parse_checked(f, GRAD_PORT, RxChecksum::UNKNOWN, Checks::Router).unwrap();
    let (hop, last) = ([10, 0, 0, 2], [10, 9, 9, 9]);
    let good = lsrr_frame(hop, 4, last);
    let p = ok(&good);
    assert!(p.source_routed && p.has(Layers::UDP));
    assert_eq!((p.ip_dst(), &good[p.udp_payload()]), (&hop[..], &[1, 2, 3, 4][..]));
    assert_eq!(verify_l4(&good, &router(&good), RxChecksum::UNKNOWN), Ok(()));
    let wrong = lsrr_frame(hop, 4, hop);
    assert_eq!(parse(&wrong, GRAD_PORT), Err(Reason::BadUdpChecksum));
    assert!(router(&wrong).source_routed);
    assert_eq!(verify_l4(&wrong, &router(&wrong), RxChecksum::UNKNOWN), Err(Reason::BadUdpChecksum));
    // Finished: the header's destination is the final one.
    let done = lsrr_frame(last, 8, last);
    assert!(!ok(&done).source_routed);
    assert_eq!(parse(&lsrr_frame(last, 8, hop), GRAD_PORT), Err(Reason::BadUdpChecksum));
    // IPv6: a Routing header with segments left is recorded; with none left it is not.
    assert!(!ok(&case_frames("c08_ipv6_ext_headers.pcap")[0]).source_routed);
}

/// c04 and c10's checksum rules, and the NIC's verdicts, hold for what the appliance consumes:
/// a router parse (transit) takes a frame whose UDP checksum or ICRC is wrong, and `verify_l4`
/// (before the aggregator) refuses it with the full parse's reason.
#[test]
fn c04_c10_rules_apply_to_consumed_packets_through_verify_l4() {
    use CsumStatus::{Bad, Good};
    let router = |f: &[u8], rx| parse_checked(f, GRAD_PORT, rx, Checks::Router).unwrap();
    let u = RxChecksum::UNKNOWN;
    // c04: 0xFFFF and 0x0000 are both valid over IPv4.
    for f in case_frames("c04_udp_csum_ffff_and_zero.pcap") {
        let p = router(&f, u);
        assert!(p.has(Layers::UDP.union(Layers::L4_UNVERIFIED)));
        assert_eq!(verify_l4(&f, &p, u), Ok(()));
    }
    // A wrong UDP checksum over IPv4; a zero one over IPv6 (not RoCEv2).
    let mut bad = case_frames("c02_ipv4_options.pcap")[0].clone();
    let n = bad.len();
    bad[n - 1] ^= 0x40;
    assert_eq!(parse(&bad, GRAD_PORT), Err(Reason::BadUdpChecksum));
    assert_eq!(verify_l4(&bad, &router(&bad, u), u), Err(Reason::BadUdpChecksum));
    // The NIC's verdicts decide where it gives them.
    assert_eq!(verify_l4(&bad, &router(&bad, rx(Good, Good)), rx(Good, Good)), Ok(()));
    let good = case_frames("c02_ipv4_options.pcap")[0].clone();
    assert_eq!(verify_l4(&good, &router(&good, u), rx(Good, Bad)), Err(Reason::BadUdpChecksum));
    let v6_zero = udp_frame(true, None, GRAD_PORT, &grad_header(1, 4), true);
    assert_eq!(parse(&v6_zero, GRAD_PORT), Err(Reason::BadUdpChecksum));
    assert_eq!(verify_l4(&v6_zero, &router(&v6_zero, u), u), Err(Reason::BadUdpChecksum));
    // c10: a valid ICRC verifies; a wrong one is the router's to forward and the consumer's to
    // refuse, whatever the NIC says of the UDP checksum (0 here: none).
    for f in case_frames("c10_rocev2_ipv4_icrc.pcap") {
        let p = router(&f, u);
        assert!(p.has(Layers::BTH.union(Layers::L4_UNVERIFIED)));
        assert_eq!(verify_l4(&f, &p, u), Ok(()));
        let mut b = f.clone();
        let at = p.icrc_offset().unwrap();
        b[at] ^= 1;
        assert_eq!(parse(&b, GRAD_PORT), Err(Reason::BadIcrc));
        let q = router(&b, rx(Good, Good));
        assert_eq!(q.bth_psn, p.bth_psn);
        assert_eq!(verify_l4(&b, &q, rx(Good, Good)), Err(Reason::BadIcrc));
    }
    // Nothing to verify above L3: no mark, nothing to refuse.
    let arp = crate::neighbor::tests::arp_request([10, 0, 0, 254], false);
    let p = router(&arp, u);
    assert!(!p.has(Layers::L4_UNVERIFIED));
    assert_eq!(verify_l4(&arp, &p, u), Ok(()));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    /// Mutated real frames (flipped bytes land in checksums, ICRCs, lengths) under random NIC
    /// verdicts: the router's parse then `verify_l4` judges exactly as the full parse.
    #[test]
    fn router_parse_then_verify_l4_judges_as_the_full_parse(
        which in any::<prop::sample::Index>(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..3),
        ip in 0u8..3, l4 in 0u8..3,
    ) {
        let st = |x| [CsumStatus::Unknown, CsumStatus::Good, CsumStatus::Bad][x as usize];
        let mut m = which.get(corpus()).clone();
        for (i, v) in &flips {
            let i = i.index(m.len());
            m[i] = *v;
        }
        router_then_verify_agrees(&m, RxChecksum { ip: st(ip), l4: st(l4) })?;
    }
}

/// IPv4 options that break RFC 791's format make the packet `malformed_ipv4` in both parses
/// (a router processing them finds them too), so a source route behind them is never missed:
/// `lsrr_frame`'s NOP replaced by a Timestamp type (its length byte, the route's type 131,
/// runs past the header), the route's length set to 1, or its pointer set to 3.
#[test]
fn malformed_ipv4_options_are_malformed_ipv4() {
    let (hop, last) = ([10, 0, 0, 2], [10, 9, 9, 9]);
    for (at, byte) in [(34, 68), (36, 1), (37, 3)] {
        let mut f = lsrr_frame(hop, 4, last);
        f[at] = byte;
        // The header checksum again, over the changed option.
        ipv4::Ipv4Packet::new_unchecked(&mut f[14..42]).fill_checksum();
        assert_eq!(parse(&f, GRAD_PORT), Err(Reason::MalformedIpv4), "byte {at} = {byte}");
        assert_eq!(
            parse_checked(&f, GRAD_PORT, RxChecksum::UNKNOWN, Checks::Router).map(|_| ()),
            Err(Reason::MalformedIpv4),
            "byte {at} = {byte}"
        );
    }
}
