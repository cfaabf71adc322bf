//! Actions through the data path, on the shared cases' real frames: every rewrite leaves
//! checksums equal to a full recompute and ICRCs valid.

use super::{ecn, mac, ttl};
use crate::buf::{VecBuf, VecIo};
use crate::config::load_str;
use crate::datapath::Datapath;
use crate::parse::{parse, Layers};
use crate::stats::Reason;
use crate::testing::{case_frames, ipv4_checksum_is_a_full_recompute, null_ports};
use crate::wire::gradient::DEFAULT_UDP_PORT;
use crate::wire::{checksum, icrc, EthernetAddress};
use std::path::Path;

/// A datapath whose one table runs `actions` on every packet.
fn with_actions(actions: &str, extra: &str) -> Datapath {
    let text = format!(
        "{}{extra}\n[[table]]\nname = \"t\"\nkey = [{{ field = \"ingress_port\", match = \"exact\" }}]\ndefault_action = \"{actions}\"\n",
        null_ports(4)
    );
    let l = load_str(&text, Path::new("t.toml")).unwrap_or_else(|e| panic!("{e}"));
    Datapath::new(l.pipeline, 4, DEFAULT_UDP_PORT)
}

/// Runs `frames` through `dp` and returns what was sent.
fn run(dp: &mut Datapath, frames: &[Vec<u8>]) -> Vec<(u16, Vec<u8>)> {
    let mut io = VecIo::new(4);
    for f in frames {
        dp.process(&mut io, 0, VecBuf::from_frame(f), 0);
    }
    io.sent
}

#[test]
fn c05_ce_mark_gives_checksum_0000() {
    let f = case_frames("c05_ipv4_ce_mark_cksum_becomes_0000.pcap");
    let out = run(&mut with_actions("mark_ecn; forward(1)", ""), &f);
    assert_eq!(out.len(), 1);
    let o = &out[0].1;
    assert_eq!(o[15], 0x03, "TOS becomes 0x03");
    assert_eq!(&o[24..26], &[0x00, 0x00], "header checksum exactly 0x0000, never 0xFFFF");
    ipv4_checksum_is_a_full_recompute(o, 14);
    assert!(parse(o, DEFAULT_UDP_PORT).is_ok());
    // Only the TOS and the checksum changed.
    let diff: Vec<usize> = (0..o.len()).filter(|&i| o[i] != f[0][i]).collect();
    assert!(diff.iter().all(|i| [15, 24, 25].contains(i)), "{diff:?}");
}

#[test]
fn c06_ecn_codepoints() {
    let f = case_frames("c06_ecn_codepoints.pcap");
    assert_eq!(f.len(), 4);
    let out = run(&mut with_actions("mark_ecn; forward(1)", ""), &f);
    assert_eq!(out.len(), 4);
    for (i, (inp, (_, o))) in f.iter().zip(&out).enumerate() {
        let ecn_in = inp[15] & 3;
        let want = if ecn_in == 0 { 0 } else { 3 };
        assert_eq!(o[15] & 3, want, "frame {i}: ECN {ecn_in:02b}");
        assert_eq!(o[15] >> 2, 26, "DSCP unchanged");
        ipv4_checksum_is_a_full_recompute(o, 14);
        if ecn_in == 0 || ecn_in == 3 {
            assert_eq!(o, inp, "Not-ECT and CE leave unchanged");
        }
    }
}

/// `mark_ce` itself, on c06 and c07: it reports whether the packet leaves CE (RFC 3168 5): true
/// for ECT(0), ECT(1) and an already-CE packet (left byte for byte as it was), false for Not-ECT
/// (unchanged) and for a frame without IP.
#[test]
fn mark_ce_reports_whether_the_packet_is_ce() {
    for (i, inp) in case_frames("c06_ecn_codepoints.pcap").into_iter().enumerate() {
        let ecn_in = inp[15] & 3;
        let mut f = inp.clone();
        let mut p = parse(&f, DEFAULT_UDP_PORT).unwrap();
        let marked = ecn::mark_ce(&mut f, &mut p);
        assert_eq!(marked, ecn_in != 0, "frame {i}: ECN {ecn_in:02b}");
        assert_eq!(p.ecn, if ecn_in == 0 { 0 } else { 3 }, "frame {i}: the parse follows the frame");
        assert_eq!(f[15], (26 << 2) | p.ecn, "frame {i}: DSCP 26 kept");
        ipv4_checksum_is_a_full_recompute(&f, 14);
        if ecn_in == 0 || ecn_in == 3 {
            assert_eq!(f, inp, "frame {i}: Not-ECT and CE leave unchanged");
        }
    }

    // IPv6 (c07): traffic class 0xBA is ECT(0); marked once, then already CE.
    let mut f = case_frames("c07_ipv6_tc_ecn_flowlabel.pcap").remove(0);
    let mut p = parse(&f, DEFAULT_UDP_PORT).unwrap();
    assert!(ecn::mark_ce(&mut f, &mut p));
    assert_eq!(u32::from_be_bytes([f[14], f[15], f[16], f[17]]), 0x6BBA_BCDE);
    let once = f.clone();
    assert!(ecn::mark_ce(&mut f, &mut p), "an IPv6 packet already CE is CE");
    assert_eq!(f, once);

    // No IP: an EtherType 0x88B5 (local experimental) frame of 60 bytes.
    let mut f = vec![0u8; 60];
    f[..12].copy_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&[0x88, 0xb5]);
    let mut p = parse(&f, DEFAULT_UDP_PORT).unwrap();
    assert!(!ecn::mark_ce(&mut f, &mut p));
    assert_eq!(p.ecn, 0);
}

/// An IPv4 packet already CE whose header checksum is stored as 0xFFFF, the other
/// representation of zero (c05 once marked: its checksum computes to 0x0000): the header still
/// sums to 0xFFFF and parses, and `mark_ce` leaves it byte for byte, the checksum too. Rewriting
/// the TOS to the value it has would turn the stored 0xFFFF into 0x0000 (RFC 1624 eqn. 3 with
/// HC = 0xFFFF): a CE packet must not be touched at all.
#[test]
fn mark_ce_leaves_a_ce_packet_with_checksum_ffff_untouched() {
    let mut inp = case_frames("c05_ipv4_ce_mark_cksum_becomes_0000.pcap").remove(0);
    inp[15] = 0x03;
    inp[24..26].copy_from_slice(&[0xff, 0xff]);
    assert_eq!(checksum::sum(&inp[14..34]), 0xffff, "0xFFFF stored: the header still sums to 0xFFFF");
    let mut f = inp.clone();
    let mut p = parse(&f, DEFAULT_UDP_PORT).expect("a stored 0xFFFF that sums right parses");
    assert_eq!(p.ecn, 0b11);
    assert!(ecn::mark_ce(&mut f, &mut p), "already CE");
    assert_eq!(&f[24..26], &[0xff, 0xff], "checksum left as stored");
    assert_eq!(f, inp);
    assert_eq!(p, parse(&f, DEFAULT_UDP_PORT).unwrap());
}

#[test]
fn c07_ipv6_mark_keeps_version_dscp_and_flow_label() {
    let f = case_frames("c07_ipv6_tc_ecn_flowlabel.pcap");
    let out = run(&mut with_actions("mark_ecn; forward(1)", ""), &f);
    let o = &out[0].1;
    assert_eq!(u32::from_be_bytes([o[14], o[15], o[16], o[17]]), 0x6BBA_BCDE);
    let p = parse(o, DEFAULT_UDP_PORT).expect("the UDP checksum still verifies");
    assert!(p.has(Layers::IPV6.union(Layers::UDP)));
}

#[test]
fn c10_and_nccl_icrc_unchanged_by_ecn_ttl_dscp() {
    let mut all = case_frames("c10_rocev2_ipv4_icrc.pcap");
    all.extend(case_frames("nccl_ring_allreduce_rocev2.pcap"));
    let mut dp = with_actions("mark_ecn; dec_ttl; set_dscp(26); forward(1)", "");
    let out = run(&mut dp, &all);
    assert_eq!(out.len(), all.len(), "nothing dropped: {:?}", dp.counters.drops_by_name());
    let mut roce = 0;
    for (inp, (_, o)) in all.iter().zip(&out) {
        let pi = parse(inp, DEFAULT_UDP_PORT).unwrap();
        let po = parse(o, DEFAULT_UDP_PORT).unwrap_or_else(|e| panic!("rewritten frame dropped as {e}"));
        if pi.has(Layers::BTH) {
            roce += 1;
            let at = pi.icrc_offset().unwrap();
            assert_eq!(&o[at..at + 4], &inp[at..at + 4], "ICRC bytes unchanged");
            assert_eq!(
                icrc::stored(&o[pi.l3_offset as usize..pi.ip_end as usize]),
                icrc::stored(&inp[pi.l3_offset as usize..pi.ip_end as usize])
            );
        }
        if pi.has(Layers::IPV4) {
            assert_eq!(po.ttl, pi.ttl - 1);
            assert_eq!(po.dscp, 26);
            ipv4_checksum_is_a_full_recompute(o, pi.l3_offset as usize);
        }
    }
    assert_eq!(roce, 3 + 184);
}

#[test]
fn set_dscp_on_options_header_recomputes_exactly() {
    let f = case_frames("c02_ipv4_options.pcap");
    for d in [0u8, 1, 46, 63] {
        let out = run(&mut with_actions(&format!("set_dscp({d}); forward(1)"), ""), &f);
        let o = &out[0].1;
        assert_eq!(o[15] >> 2, d);
        assert_eq!(o[15] & 3, f[0][15] & 3, "ECN kept");
        ipv4_checksum_is_a_full_recompute(o, 14);
        assert!(parse(o, DEFAULT_UDP_PORT).is_ok());
    }
}

#[test]
fn dec_ttl_drops_at_one() {
    let mut f = case_frames("c02_ipv4_options.pcap")[0].clone();
    f[22] = 1; // TTL
    let mut h = f[14..14 + 24].to_vec();
    h[10] = 0;
    h[11] = 0;
    let ck = checksum::checksum(&h);
    f[24..26].copy_from_slice(&ck.to_be_bytes());
    let mut dp = with_actions("dec_ttl; forward(1)", "");
    assert!(run(&mut dp, &[f]).is_empty());
    assert_eq!(dp.counters.dropped(Reason::TtlExpired), 1);
}

/// `dec_ttl` on IPv6 (c07, hop limit 64, RFC 8200 section 3): the hop limit leaves as 63 and no
/// other byte changes (it is outside the UDP pseudo-header, so the checksum still verifies); hop
/// limit 2 leaves as 1, and hop limit 1 is dropped with the frame untouched.
#[test]
fn dec_ttl_on_ipv6_hop_limit() {
    let inp = case_frames("c07_ipv6_tc_ecn_flowlabel.pcap").remove(0);
    assert_eq!(inp[14 + 7], 64, "hop limit is byte 7 of the IPv6 header");
    let out = run(&mut with_actions("dec_ttl; forward(1)", ""), std::slice::from_ref(&inp));
    let o = &out[0].1;
    let diff: Vec<usize> = (0..o.len()).filter(|&i| o[i] != inp[i]).collect();
    assert_eq!(diff, vec![21]);
    assert_eq!(o[21], 63);
    assert_eq!(parse(o, DEFAULT_UDP_PORT).expect("the UDP checksum still verifies").ttl, 63);

    let mut f = inp.clone();
    f[21] = 2;
    let mut p = parse(&f, DEFAULT_UDP_PORT).unwrap();
    assert_eq!(ttl::decrement(&mut f, &mut p), Ok(()));
    assert_eq!((f[21], p.ttl), (1, 1));
    assert_eq!(p, parse(&f, DEFAULT_UDP_PORT).unwrap());
    let before = f.clone();
    assert_eq!(ttl::decrement(&mut f, &mut p), Err(Reason::TtlExpired));
    assert_eq!(f, before);
    assert_eq!(p.ttl, 1);
}

/// IPv4 TTL 2 leaves as 1 with the header checksum equal to a full recompute; TTL 0 (which no
/// router forwards, RFC 1812 5.3.1) is dropped like TTL 1, never wrapped to 255.
#[test]
fn dec_ttl_ipv4_two_leaves_as_one_and_zero_is_dropped() {
    let inp = case_frames("c02_ipv4_options.pcap").remove(0);
    for (ttl_in, want) in [(2u8, Ok(1u8)), (1, Err(Reason::TtlExpired)), (0, Err(Reason::TtlExpired))] {
        let mut f = inp.clone();
        f[22] = ttl_in;
        let mut h = f[14..14 + 24].to_vec();
        h[10] = 0;
        h[11] = 0;
        f[24..26].copy_from_slice(&checksum::checksum(&h).to_be_bytes());
        let mut p = parse(&f, DEFAULT_UDP_PORT).unwrap();
        let before = f.clone();
        match want {
            Ok(t) => {
                assert_eq!(ttl::decrement(&mut f, &mut p), Ok(()));
                assert_eq!((f[22], p.ttl), (t, t));
                ipv4_checksum_is_a_full_recompute(&f, 14);
            }
            Err(r) => {
                assert_eq!(ttl::decrement(&mut f, &mut p), Err(r), "TTL {ttl_in}");
                assert_eq!(f, before);
            }
        }
    }
}

#[test]
fn vlan_push_pop_set() {
    let plain = case_frames("c02_ipv4_options.pcap")[0].clone();
    let out = run(&mut with_actions("push_vlan(100); forward(1)", ""), std::slice::from_ref(&plain));
    let o = &out[0].1;
    assert_eq!(o.len(), plain.len() + 4);
    assert_eq!(&o[12..16], &[0x81, 0x00, 0x00, 100]);
    assert_eq!(&o[..12], &plain[..12]);
    assert_eq!(&o[16..], &plain[12..]);
    let p = parse(o, DEFAULT_UDP_PORT).unwrap();
    assert_eq!((p.vid_outer, p.l3_offset), (100, 18));

    // Push then pop is the identity; push twice stacks (outer first); a third is refused.
    let out = run(&mut with_actions("push_vlan(7); pop_vlan; forward(1)", ""), std::slice::from_ref(&plain));
    assert_eq!(out[0].1, plain);
    let out = run(
        &mut with_actions("push_vlan(10); push_vlan(20); set_vlan(30); forward(1)", ""),
        std::slice::from_ref(&plain),
    );
    let p = parse(&out[0].1, DEFAULT_UDP_PORT).unwrap();
    assert_eq!((p.vid_outer, p.vid_inner, p.l3_offset), (30, 10, 22));
    let mut dp = with_actions("push_vlan(1); push_vlan(2); push_vlan(3); forward(1)", "");
    assert!(run(&mut dp, std::slice::from_ref(&plain)).is_empty());
    assert_eq!(dp.counters.dropped(Reason::VlanDepth), 1);

    // c09: pop the outer tag of a QinQ frame: the inner tag becomes the only one.
    let q = case_frames("c09_stacked_vlan.pcap");
    let before = parse(&q[0], DEFAULT_UDP_PORT).unwrap();
    let out = run(&mut with_actions("pop_vlan; forward(1)", ""), &[q[0].clone()]);
    let p = parse(&out[0].1, DEFAULT_UDP_PORT).unwrap();
    assert_eq!(p.vlan_tags(), 1);
    assert_eq!(p.vid_outer, before.vid_inner);
    assert_eq!(p.l3_offset, before.l3_offset - 4);
    assert_eq!(&out[0].1[p.l3_offset as usize..], &q[0][before.l3_offset as usize..]);
}

/// `set_eth_dst` writes bytes 0..6 and `set_eth_src` bytes 6..12 (IEEE 802.3 3.1.1: destination
/// first), with addresses unlike c02's own (02:00:00:00:00:02 <- 02:00:00:00:00:01); nothing else
/// changes, and the parse the actions keep is the output's.
#[test]
fn set_eth_dst_and_src_rewrite_their_six_bytes() {
    let inp = case_frames("c02_ipv4_options.pcap").remove(0);
    assert_eq!(&inp[..12], &[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
    let out = run(
        &mut with_actions("set_eth_dst(0a:1b:2c:3d:4e:5f); set_eth_src(66:77:88:99:aa:bb); forward(1)", ""),
        std::slice::from_ref(&inp),
    );
    let o = &out[0].1;
    assert_eq!(&o[..12], &[0x0a, 0x1b, 0x2c, 0x3d, 0x4e, 0x5f, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb]);
    assert_eq!(&o[12..], &inp[12..]);

    let mut f = inp.clone();
    let mut p = parse(&f, DEFAULT_UDP_PORT).unwrap();
    let dst: EthernetAddress = "0a:1b:2c:3d:4e:5f".parse().unwrap();
    mac::set_dst(&mut f, &mut p, dst);
    assert_eq!(&f[..6], &[0x0a, 0x1b, 0x2c, 0x3d, 0x4e, 0x5f]);
    assert_eq!(&f[6..], &inp[6..]);
    let src: EthernetAddress = "66:77:88:99:aa:bb".parse().unwrap();
    mac::set_src(&mut f, &mut p, src);
    assert_eq!(&f[6..12], &[0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb]);
    assert_eq!((p.eth_dst, p.eth_src), (dst, src));
    assert_eq!(p, parse(&f, DEFAULT_UDP_PORT).unwrap());
}

#[test]
fn multicast_copies_are_independent() {
    let groups = r#"
[[multicast_group]]
id = 9
copy = [
    { port = 1 },
    { port = 2, actions = "set_eth_dst(02:00:00:00:00:02); push_vlan(20); count(copy2)" },
    { port = 3, actions = "set_dscp(46); dec_ttl" },
]
"#;
    let f = case_frames("c02_ipv4_options.pcap");
    let mut dp = with_actions("multicast(9)", groups);
    let out = run(&mut dp, &f);
    assert_eq!(out.iter().map(|(p, _)| *p).collect::<Vec<_>>(), vec![1, 2, 3]);
    assert_eq!(out[0].1, f[0], "copy 1 untouched by the others' rewrites");
    let p2 = parse(&out[1].1, DEFAULT_UDP_PORT).unwrap();
    assert_eq!((p2.eth_dst.to_string().as_str(), p2.vid_outer), ("02:00:00:00:00:02", 20));
    let p3 = parse(&out[2].1, DEFAULT_UDP_PORT).unwrap();
    assert_eq!((p3.dscp, p3.ttl, p3.vlan_tags()), (46, parse(&f[0], DEFAULT_UDP_PORT).unwrap().ttl - 1, 0));
    assert_eq!(&out[2].1[..12], &f[0][..12]);
    assert_eq!(dp.pipeline_state.named[0].packets, 1);
    // Without mbufs for the copies: counted, the last copy still leaves.
    let mut io = VecIo::new(4);
    io.alloc_budget = Some(0);
    dp.process(&mut io, 0, VecBuf::from_frame(&f[0]), 0);
    assert_eq!(io.sent.len(), 1);
    assert_eq!(dp.counters.dropped(Reason::NoMbuf), 2);
}
