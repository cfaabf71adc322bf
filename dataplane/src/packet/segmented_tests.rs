//! Multi-segment frames (jumbo frames in mbufs smaller than them, DPDK mbuf chains) through the
//! parse and the data path, with [`VecBuf::segmented`] standing for a two-segment chain.

use crate::buf::{PacketBuf, PacketIo, VecBuf, VecIo};
use crate::config::load_str;
use crate::datapath::Datapath;
use crate::parse::{parse, parse_checked, parse_segmented_into, Checks, Layers, Parsed, RxChecksum};
use crate::sched::{mark_frame_ce_in, CeOutcome, ClassMap};
use crate::stats::Reason;
use crate::testing::{build_frame, host_ip, ipv4_checksum_is_a_full_recompute, null_ports};
use crate::wire::build::{FrameSpec, Roce};
use crate::wire::gradient::{GradientRepr, DEFAULT_UDP_PORT};
use crate::wire::icrc;
use std::path::Path;

const PORT: u16 = DEFAULT_UDP_PORT;
/// The data room of a default mbuf after its headroom (2176 - 128 bytes): where net_pcap ends
/// the first segment of a larger frame.
const FIRST: usize = 2048;

/// A frame from 10.0.0.1 (fd00::1) to 10.0.0.2 (fd00::2), Ethernet 02:..:09 to 02:..:01, ECT(0),
/// DSCP 10, TTL 64, carrying a `payload`-byte gradient payload over RoCEv2 (UD SEND with DETH,
/// valid ICRC) or UDP (valid checksum).
fn jumbo(v6: bool, roce: bool, vlan: Option<u16>, payload: usize) -> Vec<u8> {
    let spec = FrameSpec {
        src_mac: "02:00:00:00:00:09".parse().unwrap(),
        dst_mac: "02:00:00:00:00:01".parse().unwrap(),
        vlan,
        src_ip: host_ip(v6, 1),
        dst_ip: host_ip(v6, 2),
        dscp: 10,
        ecn: 2,
        src_port: 0xc123,
        dst_port: if roce { 4791 } else { PORT },
        roce: roce.then_some(Roce { dest_qp: 0x12, psn: 5, pkey: 0xffff, qkey: 0x1111_1111, src_qp: 0x101 }),
        header: GradientRepr {
            version: 1,
            op_type: 1,
            collective_id: 9,
            dtype: 1,
            data_length: payload as u32,
            round: 1,
            ..Default::default()
        },
        ..FrameSpec::default()
    };
    let data: Vec<u8> = (0..payload).map(|i| (i * 7 + 3) as u8).collect();
    build_frame(&spec, &data)
}

/// Every kind of jumbo frame the tests use: RoCEv2 and UDP, IPv4 and IPv6, tagged or not.
fn jumbos() -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    for v6 in [false, true] {
        for roce in [true, false] {
            for vlan in [None, Some(100)] {
                v.push(jumbo(v6, roce, vlan, 4100));
            }
        }
    }
    v
}

fn seg_parse(f: &[u8], first: usize, total: usize) -> Result<Parsed, Reason> {
    let mut p = Parsed::default();
    parse_segmented_into(&f[..first], total, PORT, RxChecksum::UNKNOWN, &mut p).map(|_| p)
}

#[test]
fn jumbo_frames_are_larger_than_a_default_mbuf() {
    for f in jumbos() {
        assert!(f.len() > 4096 && f.len() > 2 * FIRST, "{}", f.len());
    }
}

/// With every header in the first segment, the parse of a chain is the router parse of the
/// whole frame: same layers, offsets and lengths (IP end, UDP length, gradient payload length
/// measured in the whole frame), wherever the first segment ends after the headers.
#[test]
fn a_chain_parses_as_the_whole_frame() {
    for f in jumbos() {
        let whole = parse_checked(&f, PORT, RxChecksum::UNKNOWN, Checks::Router).unwrap();
        assert!(whole.has(Layers::GRADIENT.union(Layers::UDP).union(Layers::L4_UNVERIFIED)));
        assert_eq!(whole.ip_end as usize, f.len());
        for first in [whole.grad_payload_offset as usize, 200, FIRST, f.len() - 1] {
            assert_eq!(seg_parse(&f, first, f.len()), Ok(whole), "first segment {first} of {}", f.len());
        }
    }
}

/// Lengths are judged against the whole frame, not the first segment: a frame shorter than its
/// IP or UDP length says is malformed, as it would be contiguous, however it is segmented.
#[test]
fn lengths_are_judged_against_the_whole_frame() {
    for f in jumbos() {
        let short = f.len() - 10;
        let want = parse_checked(&f[..short], PORT, RxChecksum::UNKNOWN, Checks::Router).unwrap_err();
        assert!(matches!(want, Reason::MalformedIpv4 | Reason::MalformedIpv6), "{want:?}");
        assert_eq!(seg_parse(&f, FIRST, short), Err(want));
    }
    // A UDP length beyond the IP datagram.
    let mut f = jumbo(false, true, None, 4000);
    let l4 = 14 + 20;
    let ulen = u16::from_be_bytes([f[l4 + 4], f[l4 + 5]]) + 1;
    f[l4 + 4..l4 + 6].copy_from_slice(&ulen.to_be_bytes());
    assert_eq!(parse_checked(&f, PORT, RxChecksum::UNKNOWN, Checks::Router), Err(Reason::MalformedUdp));
    assert_eq!(seg_parse(&f, FIRST, f.len()), Err(Reason::MalformedUdp));
    // An IPv4 header checksum is still verified (a router's check).
    let mut f = jumbo(false, true, None, 4000);
    f[14 + 8] ^= 1;
    assert_eq!(seg_parse(&f, FIRST, f.len()), Err(Reason::BadIpv4Checksum));
}

/// A header that does not lie whole in the first segment is a drop with its own reason.
#[test]
fn headers_split_across_segments_are_segmented_headers() {
    let v4 = jumbo(false, true, Some(5), 4000);
    let p = parse(&v4, PORT).unwrap();
    for first in [10, 16, p.l3_offset as usize + 10, p.l4_offset as usize + 4, p.bth_offset as usize + 6] {
        assert_eq!(seg_parse(&v4, first, v4.len()), Err(Reason::SegmentedHeaders), "first {first}");
    }
    // The DETH after the BTH.
    assert_eq!(seg_parse(&v4, p.bth_offset as usize + 14, v4.len()), Err(Reason::SegmentedHeaders));
    let v6 = jumbo(true, false, None, 4000);
    assert_eq!(seg_parse(&v6, 14 + 30, v6.len()), Err(Reason::SegmentedHeaders));
    // A gradient header split by the segment boundary, as any other header (were it read as
    // absent, a table keyed on its fields would see zeros); whole just before the boundary.
    let g = parse(&v6, PORT).unwrap().grad_offset as usize;
    assert_eq!(seg_parse(&v6, g + 4, v6.len()), Err(Reason::SegmentedHeaders));
    let hl = crate::wire::gradient::HEADER_LEN;
    assert_eq!(seg_parse(&v6, g + hl - 1, v6.len()), Err(Reason::SegmentedHeaders));
    assert!(seg_parse(&v6, g + hl, v6.len()).unwrap().has(Layers::GRADIENT));
    // A datagram too short for a gradient header is not one, in a chain or not.
    let mut short = jumbo(true, false, None, 0);
    let ip_len = 8 + 10;
    short.truncate(14 + 40 + ip_len);
    short[18..20].copy_from_slice(&(ip_len as u16).to_be_bytes());
    short[14 + 40 + 4..14 + 40 + 6].copy_from_slice(&(ip_len as u16).to_be_bytes());
    short[14 + 40 + 6..14 + 40 + 8].fill(0);
    let whole = parse_checked(&short, PORT, RxChecksum::UNKNOWN, Checks::Router);
    assert!(whole.map(|p| p.has(Layers::GRADIENT_SHORT)).unwrap_or(false), "{whole:?}");
    assert!(seg_parse(&short, 14 + 40 + 12, short.len()).unwrap().has(Layers::GRADIENT_SHORT));
}

/// An IPv6 extension chain that is malformed within the first segment is `malformed_ipv6`,
/// as in one segment; only a chain that the first segment cuts, and that may be valid whole,
/// is `segmented_headers`.
#[test]
fn malformed_extension_chains_in_chains_are_malformed() {
    let f = jumbo(true, false, None, 4000);
    // Next header at byte 20; extension headers go after the fixed header (byte 54).
    let with_ext = |exts: &[(u8, usize)]| {
        let mut g = f[..54].to_vec();
        let upper = g[20];
        let mut nh_at = 20;
        for &(nh, len) in exts {
            g[nh_at] = nh;
            nh_at = g.len();
            let mut h = vec![0u8; len];
            h[1] = (len / 8 - 1) as u8;
            g.extend_from_slice(&h);
        }
        g[nh_at] = upper;
        g.extend_from_slice(&f[54..]);
        let pl = (g.len() - 54) as u16;
        g[18..20].copy_from_slice(&pl.to_be_bytes());
        g
    };
    // Destination Options before Hop-by-Hop; nine Destination Options headers.
    for g in [with_ext(&[(60, 8), (0, 8)]), with_ext(&[(60, 8); 9])] {
        assert_eq!(parse(&g, PORT).unwrap_err(), Reason::MalformedIpv6);
        assert_eq!(seg_parse(&g, 200, g.len()), Err(Reason::MalformedIpv6));
    }
    // A Hop-by-Hop header claiming more than the payload.
    let mut g = with_ext(&[(0, 8)]);
    g[55] = 0xff;
    g.truncate(54 + 8 + 100);
    g[18..20].copy_from_slice(&108u16.to_be_bytes());
    assert_eq!(parse(&g, PORT).unwrap_err(), Reason::MalformedIpv6);
    // A long Hop-by-Hop header (1 KiB) that a 200-byte first segment cuts: whole, it is valid.
    let g = with_ext(&[(0, 1024)]);
    assert!(parse(&g, PORT).is_ok());
    assert_eq!(seg_parse(&g, 200, g.len()), Err(Reason::SegmentedHeaders));
}

/// Every rewrite of the tables: `dec_ttl`, `mark_ecn`, `set_dscp`, MAC addresses, then
/// `push_vlan` (tagged frames: `pop_vlan`).
const ROUTE: &str = r#"
    [[table]]
    name = "route"
    key = [{ field = "eth.dst", match = "exact" }, { field = "vlan.outer_vid", match = "exact" }]
    default_action = "drop"
    entry = [
        { key = ["02:00:00:00:00:01", "0"], action = "dec_ttl; mark_ecn; set_dscp(46); set_eth_src(02:00:00:00:00:aa); set_eth_dst(02:00:00:00:00:bb); push_vlan(300); forward(1)" },
        { key = ["02:00:00:00:00:01", "100"], action = "dec_ttl; mark_ecn; set_dscp(46); set_eth_src(02:00:00:00:00:aa); set_eth_dst(02:00:00:00:00:bb); pop_vlan; forward(2)" },
    ]
"#;

fn datapath(tables: &str, checks: Checks) -> Datapath {
    let loaded = load_str(&format!("{}{tables}", null_ports(3)), Path::new("t.toml")).unwrap();
    Datapath::new(loaded.pipeline, 3, PORT).with_checks(checks)
}

/// A chain takes the same path with the same rewrites as the same frame in one segment: the
/// frames out are byte-identical, their checksums and ICRC valid, the counters the same (whole
/// lengths), and the rewrites made in the first segment.
#[test]
fn chains_are_forwarded_with_their_rewrites() {
    for f in jumbos() {
        let (mut one, mut chain) = (datapath(ROUTE, Checks::Router), datapath(ROUTE, Checks::Router));
        let (mut io1, mut io2) = (VecIo::new(3), VecIo::new(3));
        one.process(&mut io1, 0, VecBuf::from_frame(&f), 0);
        chain.process(&mut io2, 0, VecBuf::segmented(&f, FIRST), 0);
        assert_eq!(io1.sent.len(), 1, "{:?}", one.counters.drops_by_name());
        assert_eq!(io1.sent, io2.sent);
        assert_eq!(one.counters, chain.counters);
        assert_eq!(chain.counters.ports[0].rx_bytes, f.len() as u64);
        let (port, out) = &io2.sent[0];
        let tagged = f[12..14] == [0x81, 0x00];
        assert_eq!(*port, if tagged { 2 } else { 1 });
        assert_eq!(out.len(), if tagged { f.len() - 4 } else { f.len() + 4 });
        assert_eq!(chain.counters.ports[*port as usize].tx_bytes, out.len() as u64);
        // Every checksum and the ICRC verified on the way out.
        let p = parse(out, PORT).unwrap_or_else(|e| panic!("output does not parse: {e:?}"));
        assert_eq!((p.ttl, p.ecn, p.dscp), (63, 3, 46));
        assert_eq!(p.eth_src.0, [2, 0, 0, 0, 0, 0xaa]);
        assert_eq!(p.eth_dst.0, [2, 0, 0, 0, 0, 0xbb]);
        assert_eq!(p.vlan_tags(), if tagged { 0 } else { 1 });
        if p.has(Layers::IPV4) {
            ipv4_checksum_is_a_full_recompute(out, p.l3_offset as usize);
        }
        if p.has(Layers::BTH) {
            let (l3, l4, end) = (p.l3_offset as usize, p.l4_offset as usize, p.ip_end as usize);
            assert_eq!(icrc::verify(&out[l3..end], l4 - l3), Ok(true));
        }
        // After the IP header, every byte is the input's.
        let ai = p.l4_offset as usize;
        let bi = if tagged { ai + 4 } else { ai - 4 };
        assert_eq!(&out[ai..], &f[bi..], "L4 onwards unchanged");
    }
}

/// The burst path handles chains as the one-packet path does.
#[test]
fn bursts_of_chains_match_one_by_one() {
    let frames = jumbos();
    let (mut one, mut burst) = (datapath(ROUTE, Checks::Router), datapath(ROUTE, Checks::Router));
    let (mut io1, mut io2) = (VecIo::new(3), VecIo::new(3));
    for (i, f) in frames.iter().enumerate() {
        one.process(&mut io1, 0, VecBuf::segmented(f, 64 + 100 * i), 0);
    }
    let mut slots: Vec<Option<VecBuf>> =
        frames.iter().enumerate().map(|(i, f)| Some(VecBuf::segmented(f, 64 + 100 * i))).collect();
    burst.process_burst(&mut io2, 0, &mut slots, 0);
    assert_eq!(io1.sent, io2.sent);
    assert_eq!(one.counters, burst.counters);
    assert_eq!(io1.sent.len(), frames.len());
    assert_eq!(one.counters.dropped(Reason::SegmentedHeaders), 0);
}

/// Headers that the first segment cuts are pulled up into it (BSD's `m_pullup`) as far as its
/// headroom allows, then parsed, rewritten and forwarded as if the chain had been cut after
/// them: every first segment from 14 to 120 bytes gives the output of the contiguous frame.
/// Headers that need more than that room are still `segmented_headers`.
#[test]
fn headers_cut_by_the_first_segment_are_pulled_up() {
    for f in jumbos() {
        let mut io = VecIo::new(3);
        let mut dp = datapath(ROUTE, Checks::Router);
        dp.process(&mut io, 0, VecBuf::from_frame(&f), 0);
        let want = io.sent.pop().unwrap();
        for first in 14..=120 {
            let mut dp = datapath(ROUTE, Checks::Router);
            let mut io = VecIo::new(3);
            dp.process(&mut io, 0, VecBuf::segmented(&f, first), 0);
            assert_eq!(
                io.sent,
                std::slice::from_ref(&want),
                "first segment {first}: {:?}",
                dp.counters.drops_by_name()
            );
        }
    }
    // Room for 112 bytes (128 of headroom, 16 kept): a 1 KiB Hop-by-Hop header is beyond it.
    let f = jumbo(true, false, None, 4000);
    let mut g = f[..54].to_vec();
    g[20] = 0;
    let mut hbh = vec![0u8; 1024];
    hbh[0] = f[20];
    hbh[1] = (1024 / 8 - 1) as u8;
    g.extend_from_slice(&hbh);
    g.extend_from_slice(&f[54..]);
    let pl = (g.len() - 54) as u16;
    g[18..20].copy_from_slice(&pl.to_be_bytes());
    assert!(parse(&g, PORT).is_ok());
    let mut dp = datapath(ROUTE, Checks::Router);
    let mut io = VecIo::new(3);
    dp.process(&mut io, 0, VecBuf::segmented(&g, 200), 0);
    assert_eq!(dp.counters.dropped(Reason::SegmentedHeaders), 1);
    dp.process(&mut io, 0, VecBuf::segmented(&g, 1000), 0);
    assert_eq!(io.sent.len(), 1, "{:?}", dp.counters.drops_by_name());
}

/// [`VecBuf::pull_up`] as an mbuf chain's: the bytes and length unchanged, the first segment
/// longer by what its headroom (less 16 bytes) allows, one segment once it holds everything.
#[test]
fn pull_up_moves_bytes_into_the_first_segment() {
    let f: Vec<u8> = (0..400).map(|i| i as u8).collect();
    let mut b = VecBuf::segmented(&f, 100);
    assert_eq!(b.pull_up(10), 10);
    assert_eq!((b.data().len(), b.whole()), (110, &f[..]));
    assert_eq!(b.pull_up(1000), 102, "128 - 16 - 10 left");
    assert_eq!((b.data().len(), b.whole(), b.is_segmented()), (212, &f[..], true));
    assert_eq!(b.pull_up(1), 0);
    assert!(!b.prepend(17) && b.prepend(16), "the headroom kept");
    let mut small = VecBuf::segmented(&f[..150], 100);
    assert_eq!(small.pull_up(1000), 50);
    assert_eq!((small.is_segmented(), small.data()), (false, &f[..150]));
    assert_eq!(VecBuf::from_frame(&f).pull_up(10), 0);
}

/// `verify_transit = true` verifies UDP checksums and ICRCs over contiguous bytes only: a chain
/// is dropped `multi_segment` there, in both paths.
#[test]
fn verify_transit_drops_chains_multi_segment() {
    let f = jumbo(false, true, None, 4000);
    let mut dp = datapath(ROUTE, Checks::All);
    let mut io = VecIo::new(3);
    dp.process(&mut io, 0, VecBuf::segmented(&f, FIRST), 0);
    let mut slots = vec![Some(VecBuf::segmented(&f, FIRST))];
    dp.process_burst(&mut io, 0, &mut slots, 0);
    assert!(io.sent.is_empty());
    assert_eq!(dp.counters.dropped(Reason::MultiSegment), 2);
    dp.process(&mut io, 0, VecBuf::from_frame(&f), 0);
    assert_eq!(io.sent.len(), 1, "contiguous, verified and forwarded");
}

const FLOOD: &str = r#"
    [[table]]
    name = "l2"
    key = [{ field = "eth.dst", match = "exact" }]
    default_action = "flood"
"#;

/// Flood copies of a chain are whole copies (every segment), and chains themselves.
#[test]
fn flood_copies_a_chain_whole() {
    let f = jumbo(false, true, None, 4000);
    let mut dp = datapath(FLOOD, Checks::Router);
    let mut io = VecIo::new(3);
    dp.process(&mut io, 1, VecBuf::segmented(&f, FIRST), 0);
    let ports: Vec<u16> = io.sent.iter().map(|(p, _)| *p).collect();
    assert_eq!(ports, vec![0, 2]);
    assert!(io.sent.iter().all(|(_, out)| *out == f));
    let src = VecBuf::segmented(&f, FIRST);
    let copy = io.copy_pkt(&src).unwrap();
    assert!(copy.is_segmented());
    assert_eq!((copy.data(), copy.whole()), (&f[..FIRST], &f[..]));
    io.alloc_budget = Some(0);
    dp.process(&mut io, 1, VecBuf::segmented(&f, FIRST), 0);
    assert_eq!(dp.counters.dropped(Reason::NoMbuf), 1);
}

/// A chain behaves as an mbuf chain: data is the first segment, adj cannot remove more than
/// it nor trim more than the last segment, and prepend and adj keep the total length right.
#[test]
fn segmented_vecbuf_is_an_mbuf_chain() {
    let f: Vec<u8> = (0..100u8).collect();
    let mut b = VecBuf::segmented(&f, 40);
    assert!(b.is_segmented());
    assert_eq!((b.data().len(), b.total_len()), (40, 100));
    assert!(!b.adj(41));
    assert!(!b.trim(61));
    assert!(b.prepend(4));
    assert_eq!((b.data().len(), b.total_len()), (44, 104));
    assert!(b.adj(8));
    assert_eq!((b.data().len(), b.total_len()), (36, 96));
    assert_eq!(b.data()[0], 4);
    assert!(b.trim(10));
    assert_eq!(b.whole(), &f[4..90]);
    assert!(!VecBuf::segmented(&f, 0).is_segmented());
    assert!(!VecBuf::segmented(&f, 100).is_segmented());
}

/// A queue's CE mark and class map read the headers in the first segment of a chain.
#[test]
fn scheduler_marks_and_classifies_chains() {
    for f in jumbos() {
        let p = parse(&f, PORT).unwrap();
        let mut first = f[..FIRST].to_vec();
        assert_eq!(mark_frame_ce_in(&mut first, f.len()), CeOutcome::Marked);
        let mut whole = f.clone();
        assert_eq!(crate::sched::mark_frame_ce(&mut whole), CeOutcome::Marked);
        assert_eq!(first[..], whole[..FIRST]);
        if p.has(Layers::IPV4) {
            ipv4_checksum_is_a_full_recompute(&first, p.l3_offset as usize);
        }
        let mut dscp = [0u8; 64];
        dscp[10] = 5;
        let map = ClassMap { dscp: Some(dscp), pcp: None };
        assert_eq!(map.classify_in(&f[..FIRST], f.len()), 5);
        assert_eq!(map.classify(&f), 5);
    }
}

const GROUP: &str = r#"
    [[table]]
    name = "l2"
    key = [{ field = "eth.dst", match = "exact" }]
    default_action = "multicast(9)"
    [[multicast_group]]
    id = 9
    copy = [
        { port = 0, actions = "set_eth_dst(02:00:00:00:00:02); push_vlan(20)" },
        { port = 2, actions = "set_dscp(46); dec_ttl" },
    ]
"#;

/// Multicast copies of a chain are whole copies, each with its own rewrites in its first
/// segment: the same frames as from the same packet in one segment.
#[test]
fn multicast_copies_a_chain_whole_with_per_copy_rewrites() {
    for f in jumbos() {
        let (mut one, mut chain) = (datapath(GROUP, Checks::Router), datapath(GROUP, Checks::Router));
        let (mut io1, mut io2) = (VecIo::new(3), VecIo::new(3));
        one.process(&mut io1, 1, VecBuf::from_frame(&f), 0);
        chain.process(&mut io2, 1, VecBuf::segmented(&f, FIRST), 0);
        assert_eq!(io2.sent.len(), 2);
        assert_eq!(io1.sent, io2.sent);
        assert_eq!(io2.sent[0].1.len(), f.len() + 4);
        assert_eq!(io2.sent[1].1.len(), f.len());
        for (_, out) in &io2.sent {
            parse(out, PORT).unwrap_or_else(|e| panic!("copy does not parse: {e:?}"));
        }
    }
}

/// An IPv6 frame from fd00::1 to `dst` carrying an ICMPv6 message of type `ty` whose body
/// (after the 4-byte type, code and checksum) is `body`; the checksum is left 0 (transit does
/// not read it).
fn icmpv6(ty: u8, dst: [u8; 16], body: &[u8]) -> Vec<u8> {
    let mut f = vec![0x33, 0x33, 0xff, 0, 0, 0xfe, 2, 0, 0, 0, 0, 9, 0x86, 0xdd];
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&((4 + body.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[58, 255]);
    f.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&[ty, 0, 0, 0]);
    f.extend_from_slice(body);
    f
}

/// ARP and ICMPv6 frames that arrive as chains go to the tables like any chain, unless the
/// answerer would act on them on their port: an ARP for (or from) the port's IPv4 address, a
/// Neighbor Solicitation for its IPv6 address, which it reads whole, are dropped
/// `multi_segment`. A port without an address of the family answers none of them, and a
/// message for another host (an echo request, another host's ARP) is transit.
#[test]
fn neighbour_messages_in_chains_are_transit_unless_for_the_port() {
    let me6 = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xfe];
    let me = crate::agg::PortAddr {
        mac: "02:00:00:00:00:fe".parse().unwrap(),
        ipv4: Some([10, 0, 0, 254]),
        ipv6: Some(me6),
    };
    let bare = crate::agg::PortAddr { ipv4: None, ipv6: None, ..me };
    let mut other6 = me6;
    other6[15] = 2;
    let mut ns_body = vec![0; 4];
    ns_body.extend_from_slice(&me6);
    ns_body.resize(3000, 0);
    let padded = |mut f: Vec<u8>| {
        f.resize(3000, 0);
        f
    };
    // (frame, dropped on a port with addresses)
    let cases = [
        (icmpv6(128, other6, &[7; 3000]), false),
        (icmpv6(128, me6, &[7; 3000]), false),
        (icmpv6(135, crate::wire::ndp::solicited_node(&me6), &ns_body), true),
        (icmpv6(135, me6, &ns_body), true),
        (padded(crate::neighbor::tests::arp_request([10, 0, 0, 254], false)), true),
        (padded(crate::neighbor::tests::arp_request([10, 0, 0, 9], false)), false),
    ];
    for (i, (f, dropped)) in cases.iter().enumerate() {
        for (addr, name) in [(me, "with addresses"), (bare, "without")] {
            let dropped = *dropped && addr.ipv4.is_some();
            let mut dp = datapath(FLOOD, Checks::Router).with_local_addresses(vec![addr; 3]);
            let mut io = VecIo::new(3);
            dp.process(&mut io, 0, VecBuf::segmented(f, 200), 0);
            let mut slots = vec![Some(VecBuf::segmented(f, 200))];
            dp.process_burst(&mut io, 0, &mut slots, 0);
            assert_eq!(dp.counters.dropped(Reason::MultiSegment), 2 * dropped as u64, "case {i}, port {name}");
            assert_eq!(io.sent.len(), if dropped { 0 } else { 4 }, "case {i}, port {name}: flooded to ports 1 and 2");
            assert!(io.sent.iter().all(|(_, g)| g == f), "case {i}: forwarded whole and unchanged");
        }
    }
}
