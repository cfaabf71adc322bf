//! The aggregator on built frames: every rule of spec section 4, NAKs (section 5) and the
//! result packets (section 6).

use super::collective::Carriage;
use super::emit::result_spec;
use super::*;
use crate::buf::{VecBuf, VecIo};
use crate::config::load_str;
use crate::parse::parse;
use crate::wire::build::{self, FrameSpec, IpAddrBytes, UD_SEND_ONLY};
use crate::wire::gradient::{Flags, GradientHeader, GradientRepr};
use std::path::Path;

const APP_MAC: &str = "02:00:00:00:00:fe";

#[allow(clippy::too_many_arguments)]
fn conf(op: &str, dtype: &str, carriage: &str, v6: bool, extra: &str, n: usize, tensor: u64, chunk: u32) -> String {
    let mut s = format!(
        "[[port]]\nvdev = \"net_null0\"\nmac = \"{APP_MAC}\"\nipv4 = \"10.0.0.254\"\nipv6 = \"fd00::fe\"\n\
         [[collective]]\ncollective_id = 7\nop = \"{op}\"\ndtype = \"{dtype}\"\ncarriage = \"{carriage}\"\n\
         tensor_elements = {tensor}\nchunk_elements = {chunk}\ndscp = 10\n{extra}\n"
    );
    for k in 0..n {
        let ip = if v6 { format!("fd00::{}", k + 1) } else { format!("10.0.0.{}", k + 1) };
        s += &format!("[[collective.member]]\nrank = {k}\nip = \"{ip}\"\nmac = \"02:00:00:00:01:{k:02x}\"\n");
        // Each carriage's own keys (the other's would be unused).
        s += &if carriage == "rocev2" {
            format!("qpn = {}\nqkey = 286331153\n", 0x100 + k)
        } else {
            format!("udp_port = {}\n", 50000 + k)
        };
    }
    s
}

struct Rig {
    dp: crate::datapath::Datapath,
    coll: Collective,
}

impl Rig {
    fn new(text: &str) -> Rig {
        Rig::with(text, |c, ports| Aggregator::new(c, ports, crate::wire::gradient::DEFAULT_UDP_PORT, 1))
    }

    /// A rig whose aggregator `make` builds from the collectives and ports.
    fn with(text: &str, make: impl Fn(&[Collective], Vec<PortAddr>) -> Aggregator) -> Rig {
        let l = load_str(text, Path::new("t.toml")).unwrap_or_else(|e| panic!("{e}"));
        let ports = vec![PortAddr { mac: APP_MAC.parse().unwrap(), ipv4: l.port_ipv4[0], ipv6: l.port_ipv6[0] }];
        let agg = make(&l.collectives, ports);
        Rig {
            dp: crate::datapath::Datapath::new(l.pipeline, 1, crate::wire::gradient::DEFAULT_UDP_PORT)
                .with_aggregator(agg),
            coll: l.collectives[0].clone(),
        }
    }

    /// A contribution frame from `rank` ([`crate::testing::contribution`]).
    fn frame(&self, rank: usize, offset: u32, round: u32, payload: &[u8], tweak: impl Fn(&mut FrameSpec)) -> Vec<u8> {
        crate::testing::contribution(&self.coll, rank, offset, round, payload, tweak)
    }

    fn send(&mut self, io: &mut VecIo, frame: Vec<u8>, now_us: u64) {
        let mut b = VecBuf::from_frame(&frame);
        b.timestamp_us = Some(now_us);
        self.dp.process(io, 0, b, 0);
    }

    fn agg(&self) -> &AggCounters {
        &self.dp.agg.as_ref().unwrap().counters
    }
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// (dst IP, header, payload) of every sent frame, which must parse with valid checksums/ICRC.
fn decode(io: &VecIo) -> Vec<(Vec<u8>, GradientRepr, Vec<u8>, Parsed)> {
    io.sent
        .iter()
        .map(|(_, f)| {
            let p = parse(f, crate::wire::gradient::DEFAULT_UDP_PORT)
                .unwrap_or_else(|e| panic!("sent frame does not parse: {e}"));
            // Results leave from the gradient port: the parser finds the header only on the way in
            // (destination port), so for the UDP carriage it starts right after the UDP header.
            let at = if p.has(Layers::GRADIENT) { p.grad_offset as usize } else { p.l4_offset as usize + 8 };
            assert!(p.has(Layers::GRADIENT) || p.udp_src == crate::wire::gradient::DEFAULT_UDP_PORT);
            let g = GradientRepr::parse(&GradientHeader::new_checked(&f[at..]).unwrap());
            let payload = f[at + 20..at + 20 + g.data_length as usize].to_vec();
            (p.ip_dst().to_vec(), g, payload, p)
        })
        .collect()
}

#[test]
fn sums_every_chunk_and_replicates_to_every_member() {
    let mut rig = Rig::new(&conf("sum", "f32", "udp", false, "", 3, 10, 4));
    let mut io = VecIo::new(1);
    let vals = |k: usize, off: u32, n: usize| -> Vec<f32> {
        (0..n).map(|i| (k * 100 + off as usize + i) as f32 + 0.5).collect()
    };
    for (off, n) in [(0u32, 4usize), (4, 4), (8, 2)] {
        for k in 0..3 {
            let f = rig.frame(k, off, 1, &f32s(&vals(k, off, n)), |_| {});
            rig.send(&mut io, f, 10);
        }
    }
    let out = decode(&io);
    assert_eq!(out.len(), 9, "3 slots x 3 members");
    for (i, (dst, g, payload, p)) in out.iter().enumerate() {
        let (off, n) = [(0u32, 4usize), (4, 4), (8, 2)][i / 3];
        let want: Vec<f32> = (0..n).map(|j| (0..3).map(|k| vals(k, off, n)[j]).sum()).collect();
        assert_eq!(payload, &f32s(&want));
        assert_eq!(dst, &vec![10, 0, 0, (i % 3) as u8 + 1]);
        assert_eq!(
            (g.flags, g.worker_rank, g.tensor_offset, g.round, g.collective_id),
            (Flags::RESULT, 0xffff, off, 1, 7)
        );
        assert_eq!(
            (p.dscp, p.ecn, p.ttl, p.udp_src, p.udp_dst),
            (10, 2, 64, crate::wire::gradient::DEFAULT_UDP_PORT, 50000 + (i % 3) as u16)
        );
        assert_eq!(p.eth_dst.0, [2, 0, 0, 0, 1, (i % 3) as u8]);
    }
    assert_eq!((rig.agg().folded, rig.agg().completed, rig.agg().results), (9, 3, 9));
}

#[test]
fn rules_1_3_4_duplicates_late_resends_stale_rounds_and_overlap() {
    let mut rig = Rig::new(&conf("sum", "i32", "udp", false, "", 2, 4, 4));
    let mut io = VecIo::new(1);
    let p = |v: i32| -> Vec<u8> { [v; 4].iter().flat_map(|x| x.to_le_bytes()).collect() };
    let f0 = rig.frame(0, 0, 3, &p(1), |_| {});
    rig.send(&mut io, f0.clone(), 0);
    rig.send(&mut io, f0.clone(), 1); // rule 1: duplicate
    assert_eq!(rig.dp.counters.dropped(Reason::GradDuplicate), 1);
    let f1 = rig.frame(1, 0, 3, &p(2), |_| {});
    rig.send(&mut io, f1, 2); // completes round 3: 2 results
    assert_eq!(io.sent.len(), 2);
    rig.send(&mut io, f0.clone(), 3); // rule 3: late, unicast resend to rank 0
    assert_eq!(io.sent.len(), 3);
    let out = decode(&io);
    assert_eq!((out[2].0.clone(), out[2].2.clone()), (vec![10, 0, 0, 1], p(3)));
    assert_eq!(rig.agg().resends, 1);
    assert_eq!(rig.agg().results, 2, "a resend is no result sent on completion");
    // Round 4 starts; round 3 is still answered; 5 and 2 are premature/stale: NAK 7 says 4.
    rig.send(&mut io, rig.frame(1, 0, 4, &p(10), |_| {}), 4);
    rig.send(&mut io, rig.frame(0, 0, 3, &p(1), |_| {}), 5);
    rig.send(&mut io, rig.frame(0, 0, 5, &p(1), |_| {}), 200_000);
    let out = decode(&io);
    assert_eq!(out.len(), 5);
    assert_eq!(out[3].1.flags, Flags::RESULT);
    let nak = &out[4].1;
    assert_eq!((nak.flags, nak.reason, nak.round, nak.data_length, nak.worker_rank), (Flags::NAK, 7, 4, 0, 0xffff));
    assert_eq!(out[4].3.udp_dst, 50000);
    rig.send(&mut io, rig.frame(0, 0, 4, &p(20), |_| {}), 200_001);
    let out = decode(&io);
    assert_eq!(out.len(), 7);
    assert_eq!(out[5].2, p(30));
    assert_eq!(rig.dp.counters.dropped(Reason::GradStaleRound), 1);
}

#[test]
fn rule_5_validation_drops_and_naks_by_reason() {
    let mut rig = Rig::new(&conf("sum", "f32", "udp", false, "", 2, 8, 4));
    let pl = f32s(&[1.0; 4]);
    let cases: Vec<(Vec<u8>, Reason, Option<u8>)> = vec![
        (rig.frame(0, 0, 1, &pl, |s| s.header.flags = Flags::RESULT), Reason::GradFlags, None),
        (rig.frame(0, 0, 1, &pl, |s| s.header.flags = Flags::NAK), Reason::GradFlags, None),
        (rig.frame(0, 0, 1, &pl, |s| s.header.collective_id = 8), Reason::GradUnknownCollective, Some(1)),
        (rig.frame(0, 0, 1, &pl, |s| s.header.version = 2), Reason::GradBadVersion, Some(2)),
        (rig.frame(0, 0, 1, &pl, |s| s.header.op_type = 2), Reason::GradMismatch, Some(3)),
        (rig.frame(0, 0, 1, &pl, |s| s.header.dtype = 9), Reason::GradMismatch, Some(3)),
        (rig.frame(0, 0, 1, &pl, |s| s.header.worker_rank = 2), Reason::GradBadRank, Some(4)),
        (rig.frame(0, 0, 1, &pl, |s| s.src_port = 1234), Reason::GradNotMember, Some(5)),
        (rig.frame(0, 0, 1, &pl, |s| s.src_ip = IpAddrBytes::V4([10, 0, 0, 66])), Reason::GradNotMember, Some(5)),
        (rig.frame(0, 0, 1, &pl, |s| s.header.worker_rank = 1), Reason::GradNotMember, Some(5)),
        (rig.frame(0, 0, 1, &pl, |s| s.header.data_length = 15), Reason::GradBadLength, Some(6)),
        (rig.frame(0, 0, 1, &pl, |s| s.header.data_length = 12), Reason::GradBadLength, Some(6)),
        (rig.frame(0, 0, 1, &pl, |s| s.header.data_length = 20), Reason::GradBadLength, Some(6)),
        (rig.frame(0, 2, 1, &pl, |_| {}), Reason::GradBadOffset, Some(6)),
        (rig.frame(0, 8, 1, &pl, |_| {}), Reason::GradBadOffset, Some(6)),
        (rig.frame(0, 0, 1, &f32s(&[1.0; 3]), |_| {}), Reason::GradBadOffset, Some(6)),
        (rig.frame(0, 4, 1, &f32s(&[1.0; 8]), |_| {}), Reason::GradBadOffset, Some(6)),
    ];
    assert_refused(&mut rig, cases);
}

/// Spec section 2: RETRANSMIT (0x2) is informational and the reason byte is ignored on receive:
/// such contributions fold like plain ones, on both carriages, and the result carries flags
/// RESULT and reason 0, not the inputs' bits. RESULT or NAK with another bit is still refused
/// (rule 5), and a refused flagged packet's NAK has flags NAK alone. The 0x8 bit, reserved
/// before revision 1.1, is PROBE (section 7): a contribution carrying it is a probe, never
/// folded, here refused for a probe's length (NAK 6).
#[test]
fn informational_flags_are_ignored_on_receive() {
    for carriage in ["udp", "rocev2"] {
        let mut rig = Rig::new(&conf("sum", "i32", carriage, false, "", 3, 4, 4));
        let mut io = VecIo::new(1);
        let p = |v: i32| -> Vec<u8> { [v, -v, 2 * v, 0].iter().flat_map(|x| x.to_le_bytes()).collect() };
        let flags = [Flags::RETRANSMIT, 0, Flags::RETRANSMIT];
        for (k, f) in flags.into_iter().enumerate() {
            let frame = rig.frame(k, 0, 1, &p(k as i32 + 1), |s| {
                s.header.flags = f;
                s.header.reason = 0x5a;
            });
            rig.send(&mut io, frame, k as u64);
        }
        let out = decode(&io);
        assert_eq!(out.len(), 3, "{carriage}: one result per member");
        for (_, g, payload, _) in &out {
            assert_eq!((g.flags, g.reason, g.worker_rank), (Flags::RESULT, 0, 0xffff), "{carriage}");
            assert_eq!(payload, &p(6), "{carriage}: 1 + 2 + 3");
        }
        assert_eq!((rig.agg().folded, rig.agg().completed), (3, 1), "{carriage}");

        let pl = p(1);
        let cases = vec![
            (rig.frame(0, 0, 2, &pl, |s| s.header.flags = Flags::RESULT | Flags::PROBE), Reason::GradFlags, None),
            (rig.frame(0, 0, 2, &pl, |s| s.header.flags = Flags::NAK | Flags::RETRANSMIT), Reason::GradFlags, None),
            (
                rig.frame(0, 0, 2, &pl, |s| {
                    s.header.flags = Flags::RETRANSMIT | Flags::PROBE;
                    s.header.version = 3;
                }),
                Reason::GradBadVersion,
                Some(2),
            ),
            // A contribution's payload with the PROBE bit: a probe of the wrong length.
            (rig.frame(1, 0, 2, &pl, |s| s.header.flags = Flags::PROBE), Reason::GradBadLength, Some(6)),
            (
                rig.frame(2, 0, 2, &pl, |s| s.header.flags = Flags::PROBE | Flags::RETRANSMIT),
                Reason::GradBadLength,
                Some(6),
            ),
        ];
        let mut rig2 = Rig::new(&conf("sum", "i32", carriage, false, "", 3, 4, 4));
        assert_refused(&mut rig2, cases);
    }
}

/// Sends each case far apart in time (the NAK rate limit hides none) and checks it is dropped
/// under its reason and answered with its NAK (`None`: no NAK), and that nothing was folded.
fn assert_refused(rig: &mut Rig, cases: Vec<(Vec<u8>, Reason, Option<u8>)>) {
    for (i, (f, reason, nak)) in cases.into_iter().enumerate() {
        let mut io = VecIo::new(1);
        let before = rig.dp.counters.dropped(reason);
        // Far apart in time: the NAK rate limit does not hide any.
        rig.send(&mut io, f, i as u64 * 1_000_000);
        assert_eq!(rig.dp.counters.dropped(reason), before + 1, "case {i}: {reason:?}");
        let out = decode(&io);
        match nak {
            None => assert!(out.is_empty(), "case {i}: no NAK"),
            Some(r) => {
                assert_eq!(out.len(), 1, "case {i}");
                assert_eq!((out[0].1.flags, out[0].1.reason, out[0].1.data_length), (Flags::NAK, r, 0), "case {i}");
            }
        }
    }
    assert_eq!(rig.agg().folded, 0, "nothing refused was folded");
}

/// A NAK goes back the way the refused packet came: its VLAN tags mirrored, both of a
/// double-tagged packet in their order with their TPIDs (802.1ad + 802.1Q, 802.1Q + 802.1Q,
/// 802.1ad + 802.1ad, 802.1Q + 802.1ad), an S-tag alone as an S-tag, on both carriages; its
/// checksums (and ICRC) valid.
#[test]
fn naks_mirror_the_refused_packets_vlan_tags() {
    // (the outer tag as (TPID, TCI), the inner (or only) tag's TCI and TPID); the tags carry
    // priorities and DEI bits, which come back as they went (PCP 1 + DEI, PCP 5, PCP 7).
    type Tags = (Option<(u16, u16)>, Option<u16>, u16);
    let tags: [Tags; 8] = [
        (None, None, 0x8100),
        (None, Some(100), 0x8100),
        (None, Some(0x3000 | 100), 0x8100),
        (Some((0x88a8, 0xa000 | 300)), Some(0x3000 | 100), 0x8100),
        (Some((0x8100, 300)), Some(0xe000 | 100), 0x8100),
        (None, Some(0xa000 | 300), 0x88a8),
        (Some((0x88a8, 0xa000 | 300)), Some(0x3000 | 100), 0x88a8),
        (Some((0x8100, 300)), Some(0xe000 | 100), 0x88a8),
    ];
    for carriage in ["udp", "rocev2"] {
        for (i, &(outer_tag, vlan, vlan_tpid)) in tags.iter().enumerate() {
            let mut rig = Rig::new(&conf("sum", "f32", carriage, false, "", 2, 8, 4));
            let mut io = VecIo::new(1);
            let bad = rig.frame(0, 0, 1, &f32s(&[1.0; 4]), |s| {
                s.header.collective_id = 99;
                s.outer_tag = outer_tag;
                s.vlan = vlan;
                s.vlan_tpid = vlan_tpid;
            });
            rig.send(&mut io, bad, 0);
            let out = decode(&io);
            assert_eq!(out.len(), 1, "{carriage} case {i}");
            let (_, g, _, p) = &out[0];
            assert_eq!((g.flags, g.reason), (Flags::NAK, 1), "{carriage} case {i}");
            // The tags as they are on the wire, after the MAC addresses.
            let mut want: Vec<u8> = Vec::new();
            for (tpid, tci) in [outer_tag, vlan.map(|v| (vlan_tpid, v))].into_iter().flatten() {
                want.extend_from_slice(&tpid.to_be_bytes());
                want.extend_from_slice(&tci.to_be_bytes());
            }
            let sent = &io.sent[0].1;
            assert_eq!(&sent[12..12 + want.len()], &want[..], "{carriage} case {i}: tags");
            let ethertype = if p.has(Layers::IPV4) { [0x08, 0x00] } else { [0x86, 0xdd] };
            assert_eq!(sent[12 + want.len()..14 + want.len()], ethertype, "{carriage} case {i}: no other tag");
            let vids =
                (p.has(Layers::VLAN_OUTER).then_some(p.vid_outer), p.has(Layers::VLAN_INNER).then_some(p.vid_inner));
            let want_vids = match (outer_tag, vlan) {
                (None, Some(v)) if vlan_tpid == 0x88a8 => (Some(v & 0xfff), None),
                (Some((_, o)), v) => (Some(o & 0xfff), v.map(|v| v & 0xfff)),
                (None, v) => (v.map(|v| v & 0xfff), None),
            };
            assert_eq!(vids, want_vids, "{carriage} case {i}: VIDs");
        }
    }
}

#[test]
fn naks_are_rate_limited_per_source() {
    let mut rig = Rig::new(&conf("sum", "f32", "udp", false, "", 2, 8, 4));
    let mut io = VecIo::new(1);
    let bad = rig.frame(0, 0, 1, &f32s(&[1.0; 4]), |s| s.header.collective_id = 99);
    for t in [0, 10, 50_000, 99_999, 100_000, 150_000] {
        rig.send(&mut io, bad.clone(), t);
    }
    assert_eq!(decode(&io).len(), 2, "at 0 and at 100 ms");
    assert_eq!(rig.agg().naks_suppressed, 4);
    assert_eq!(rig.dp.counters.dropped(Reason::GradUnknownCollective), 6);
}

/// An edit of a contribution's frame spec.
type Tweak = Box<dyn Fn(&mut FrameSpec)>;

/// Section 5: a NAK can never be used to amplify traffic, so none goes to a source that is no
/// one host's: a group or broadcast Ethernet source, UDP source port 0, an IPv4 source in
/// 0.0.0.0/8, 127.0.0.0/8, 224.0.0.0/4 or 255.255.255.255, an IPv6 `::`, `::1` or `ff00::/8`,
/// or the appliance's own address. The refused packet is counted as ever (its drop reason),
/// the NAK not sent in `naks_suppressed`, and the rate limiter is not charged (a unicast source
/// refused right after gets its NAK). RoCEv2 with UDP source port 0 keeps its NAK (it goes to
/// the source QP).
#[test]
fn naks_are_withheld_from_sources_no_nak_may_go_to() {
    let pl = f32s(&[1.0; 4]);
    let v6 = |s: &str| IpAddrBytes::V6(s.parse::<std::net::Ipv6Addr>().unwrap().octets());
    for carriage in ["udp", "rocev2"] {
        for family_v6 in [false, true] {
            let mut rig = Rig::new(&conf("sum", "f32", carriage, family_v6, "", 2, 8, 4));
            let mut withheld: Vec<(String, Vec<u8>)> = Vec::new();
            let mut tweaks: Vec<(String, Tweak)> = Vec::new();
            let ips: Vec<IpAddrBytes> = if family_v6 {
                [
                    "ff02::1",
                    "ff05::1:3",
                    "::",
                    "::1",
                    "fd00::fe",
                    "::ffff:127.0.0.1",
                    "::ffff:224.0.0.1",
                    "::ffff:0.0.0.0",
                ]
                .iter()
                .map(|a| v6(a))
                .collect()
            } else {
                [
                    [0, 0, 0, 0],
                    [0, 1, 2, 3],
                    [127, 0, 0, 1],
                    [127, 9, 9, 9],
                    [224, 0, 0, 1],
                    [239, 255, 255, 250],
                    [240, 0, 0, 1],
                    [255; 4],
                    [10, 0, 0, 254],
                ]
                .into_iter()
                .map(IpAddrBytes::V4)
                .collect()
            };
            for ip in ips {
                tweaks.push((format!("source {ip:?}"), Box::new(move |s: &mut FrameSpec| s.src_ip = ip)));
            }
            for mac in ["ff:ff:ff:ff:ff:ff", "01:00:5e:00:00:01", "33:33:00:00:00:01", "03:00:00:00:00:01"] {
                let m = mac.parse().unwrap();
                tweaks.push((format!("Ethernet source {mac}"), Box::new(move |s: &mut FrameSpec| s.src_mac = m)));
            }
            if carriage == "udp" {
                tweaks.push(("UDP source port 0".into(), Box::new(|s: &mut FrameSpec| s.src_port = 0)));
            }
            for (what, t) in &tweaks {
                // An unknown collective (NAK 1) and a bad version (NAK 2, a known collective's).
                for unknown in [true, false] {
                    let f = rig.frame(0, 0, 1, &pl, |s| {
                        t(s);
                        if unknown {
                            s.header.collective_id = 99;
                        } else {
                            s.header.version = 2;
                        }
                    });
                    withheld.push((format!("{carriage} v6 {family_v6}: {what}, unknown collective {unknown}"), f));
                }
            }
            let mut t = 0;
            for (what, f) in withheld.iter() {
                let mut io = VecIo::new(1);
                let (drops, naks, suppressed) =
                    (rig.dp.counters.total_drops(), rig.agg().naks, rig.agg().naks_suppressed);
                rig.send(&mut io, f.clone(), t);
                assert!(io.sent.is_empty(), "{what}: no NAK, sent {:02x?}", io.sent);
                assert_eq!(rig.dp.counters.total_drops(), drops + 1, "{what}: the refused packet is counted");
                assert_eq!((rig.agg().naks, rig.agg().naks_suppressed), (naks, suppressed + 1), "{what}");
                t += 1;
            }
            assert!(
                rig.dp.counters.dropped(Reason::GradUnknownCollective) >= tweaks.len() as u64,
                "{carriage} v6 {family_v6}: unknown collectives counted as such"
            );
            // The limiter was not charged: a unicast stranger, and a member's own source,
            // refused at the same instant get their NAK.
            let stranger = if family_v6 { v6("fd00::66") } else { IpAddrBytes::V4([10, 0, 0, 66]) };
            for f in [
                rig.frame(0, 0, 1, &pl, |s| {
                    s.src_ip = stranger;
                    s.header.collective_id = 99;
                }),
                rig.frame(0, 0, 1, &pl, |s| s.header.version = 2),
            ] {
                let mut io = VecIo::new(1);
                rig.send(&mut io, f, t);
                assert_eq!(decode(&io).len(), 1, "{carriage} v6 {family_v6}: a unicast source gets its NAK");
            }
        }
    }
    // RoCEv2 from UDP source port 0: the NAK goes to the source QP, on port 4791.
    let mut rig = Rig::new(&conf("sum", "f32", "rocev2", false, "", 2, 8, 4));
    let f = rig.frame(0, 0, 1, &pl, |s| {
        s.src_port = 0;
        s.header.collective_id = 99;
    });
    let mut io = VecIo::new(1);
    rig.send(&mut io, f, 0);
    let out = decode(&io);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].1.flags, out[0].1.reason, out[0].3.udp_dst, out[0].3.bth_dest_qp), (Flags::NAK, 1, 4791, 0x100));
}

/// A member configured at a loopback address or at the appliance's own (a stand-in appliance
/// sharing its workers' host) gets its NAKs, as it gets its results: the exemption is its
/// source (address and UDP port) only, so another port at that address gets none.
#[test]
fn members_at_loopback_or_the_appliances_address_get_their_naks() {
    let text = conf("sum", "f32", "udp", false, "", 2, 8, 4)
        .replace("ip = \"10.0.0.1\"", "ip = \"127.0.0.1\"")
        .replace("ip = \"10.0.0.2\"", "ip = \"10.0.0.254\"");
    let mut rig = Rig::new(&text);
    let pl = f32s(&[1.0; 4]);
    for (k, (rank, ip)) in [(0, [127, 0, 0, 1]), (1, [10, 0, 0, 254])].into_iter().enumerate() {
        let mut io = VecIo::new(1);
        let f = rig.frame(rank, 0, 1, &pl, |s| s.header.version = 2);
        rig.send(&mut io, f, k as u64 * 1_000_000);
        let out = decode(&io);
        assert_eq!(out.len(), 1, "rank {rank}");
        assert_eq!((out[0].0.as_slice(), out[0].1.reason, out[0].3.udp_dst), (&ip[..], 2, 50000 + rank as u16));
        // Another port at the member's address is not the member: withheld.
        let mut io = VecIo::new(1);
        let f = rig.frame(rank, 0, 1, &pl, |s| {
            s.header.version = 2;
            s.src_port = 40000;
        });
        rig.send(&mut io, f, k as u64 * 1_000_000 + 500_000);
        assert!(io.sent.is_empty(), "rank {rank}, port 40000");
    }
    assert_eq!((rig.agg().naks, rig.agg().naks_suppressed), (2, 2));
    assert_eq!(rig.dp.counters.dropped(Reason::GradBadVersion), 4);
}

#[test]
fn workers_sharing_the_nak_limiter_send_one_nak_per_source_between_them() {
    let text = conf("sum", "f32", "udp", false, "", 2, 8, 4);
    let shared = nak::shared();
    let mut rigs: Vec<Rig> = (0..2u16)
        .map(|w| {
            Rig::with(&text, |c, ports| {
                Aggregator::for_worker(c, ports, crate::wire::gradient::DEFAULT_UDP_PORT, 1, w, 2)
                    .with_nak_limiter(shared.clone())
            })
        })
        .collect();
    let mut io = VecIo::new(1);
    // An unknown collective is refused by whichever worker receives it.
    let bad = rigs[0].frame(0, 0, 1, &f32s(&[1.0; 4]), |s| s.header.collective_id = 99);
    for (w, t) in [(0, 0), (1, 10), (1, 50_000), (0, 100_000), (1, 150_000), (0, 199_999)] {
        rigs[w].send(&mut io, bad.clone(), t);
    }
    assert_eq!(decode(&io).len(), 2, "at 0 and at 100 ms, whichever worker refused");
    let suppressed: u64 = rigs.iter().map(|r| r.agg().naks_suppressed).sum();
    assert_eq!(suppressed, 4);
}

#[test]
fn rule_8_slot_timeout_discards_the_partial_sum() {
    let mut rig = Rig::new(&conf("sum", "f32", "udp", false, "slot_timeout_ms = 5", 2, 4, 4));
    let mut io = VecIo::new(1);
    rig.send(&mut io, rig.frame(0, 0, 1, &f32s(&[100.0; 4]), |_| {}), 0);
    // 6 ms later rank 1 arrives: the round was reclaimed, this starts it afresh.
    rig.send(&mut io, rig.frame(1, 0, 1, &f32s(&[2.0; 4]), |_| {}), 6_000);
    assert!(io.sent.is_empty());
    assert_eq!(rig.agg().slot_timeouts, 1);
    rig.send(&mut io, rig.frame(0, 0, 1, &f32s(&[1.0; 4]), |_| {}), 7_000);
    let out = decode(&io);
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].2, f32s(&[3.0; 4]), "the discarded 100s are not in the sum");
}

#[test]
fn deterministic_results_do_not_depend_on_arrival_order() {
    let vals: Vec<Vec<f32>> = vec![vec![1e8, 1.0, -0.0], vec![-1e8, 1e-8, -0.0], vec![1.0, 3.0, -0.0]];
    let mut results = Vec::new();
    for order in [[0usize, 1, 2], [2, 1, 0], [1, 2, 0]] {
        let mut rig = Rig::new(&conf("sum", "f32", "udp", false, "deterministic = true", 3, 3, 3));
        let mut io = VecIo::new(1);
        for k in order {
            rig.send(&mut io, rig.frame(k, 0, 1, &f32s(&vals[k]), |_| {}), 0);
        }
        results.push(decode(&io)[0].2.clone());
    }
    // Rank order: ((1e8 + -1e8) + 1) = 1; (1 + 1e-8) + 3 = 4; -0 + -0 + -0 = -0.
    assert_eq!(results[0], f32s(&[1.0, 4.0, -0.0]));
    assert!(results.iter().all(|r| *r == results[0]));
}

#[test]
fn bf16_and_f16_round_once_at_emit_and_max_min() {
    // bf16 sum: 0x3f80 + 0x3b81 (1 + a bit over 2^-8) rounds to 0x3f81 (sum_vectors.csv row).
    let mut rig = Rig::new(&conf("sum", "bf16", "udp", false, "", 2, 1, 1));
    let mut io = VecIo::new(1);
    rig.send(&mut io, rig.frame(0, 0, 1, &0x3f80u16.to_le_bytes(), |_| {}), 0);
    rig.send(&mut io, rig.frame(1, 0, 1, &0x3b81u16.to_le_bytes(), |_| {}), 0);
    assert_eq!(decode(&io)[0].2, 0x3f81u16.to_le_bytes());
    let mut rig = Rig::new(&conf("max", "f32", "udp", false, "", 2, 2, 2));
    let mut io = VecIo::new(1);
    rig.send(&mut io, rig.frame(0, 0, 1, &f32s(&[-0.0, 1.0]), |_| {}), 0);
    rig.send(&mut io, rig.frame(1, 0, 1, &f32s(&[0.0, f32::NAN]), |_| {}), 0);
    let r = &decode(&io)[0].2;
    assert_eq!(&r[..4], &0.0f32.to_le_bytes(), "max(-0, +0) = +0");
    assert!(f32::from_le_bytes(r[4..8].try_into().unwrap()).is_nan());
}

#[test]
fn rocev2_results_carry_per_member_psns_and_valid_icrc_over_ipv6_and_vlan() {
    let extra = "";
    let mut text = conf("sum", "f16", "rocev2", true, extra, 2, 6, 3);
    text = text.replace("qkey = 286331153\n", "qkey = 286331153\nvlan = 30\n");
    let mut rig = Rig::new(&text);
    let mut io = VecIo::new(1);
    let one = 0x3c00u16.to_le_bytes().repeat(3);
    for off in [0u32, 3] {
        for k in 0..2 {
            rig.send(&mut io, rig.frame(k, off, 1, &one, |_| {}), 0);
        }
    }
    rig.send(&mut io, rig.frame(1, 3, 1, &one, |_| {}), 1); // late: unicast resend, PSN goes on
    let out = decode(&io);
    assert_eq!(out.len(), 5);
    let mut psns = [Vec::new(), Vec::new()];
    for (dst, g, payload, p) in &out {
        assert!(p.has(Layers::BTH.union(Layers::DETH).union(Layers::IPV6)));
        assert_eq!(p.bth_opcode, UD_SEND_ONLY);
        assert_eq!((p.udp_dst, p.deth_src_qp, p.deth_qkey, p.vid_outer), (4791, 1, 0x1111_1111, 30));
        assert_eq!(payload, &0x4000u16.to_le_bytes().repeat(3), "1 + 1 = 2 in f16");
        assert_eq!((g.data_length, p.bth_pad), (6, 2), "20 + 6 bytes padded to 28");
        let k = dst[15] as usize - 1;
        assert_eq!(p.bth_dest_qp, 0x100 + k as u32);
        psns[k].push(p.bth_psn);
    }
    assert_eq!(psns, [vec![0, 1], vec![0, 1, 2]]);
}

#[test]
fn gradient_packets_for_other_addresses_go_to_the_tables() {
    let mut rig = Rig::new(&conf("sum", "f32", "udp", false, "", 1, 4, 4));
    let mut io = VecIo::new(1);
    let f = rig.frame(0, 0, 1, &f32s(&[1.0; 4]), |s| s.dst_ip = IpAddrBytes::V4([10, 9, 9, 9]));
    rig.send(&mut io, f, 0);
    assert_eq!(rig.agg().folded, 0);
    assert_eq!(rig.dp.counters.dropped(Reason::NoEgress), 1, "no table: not forwarded, not aggregated");
}

#[test]
fn every_kernel_set_gives_the_same_results() {
    // Lanes that exercise rounding (sums of non-representable halves and thirds), signed zeros
    // and large magnitudes; no NaNs, so every kernel set must give bit-identical frames.
    let lane = |dtype: &str, i: usize, r: usize| -> Vec<u8> {
        let x = ((i * 37 + r * 11) % 97) as f32 / 3.0 - 16.0 + if i.is_multiple_of(13) { 65000.0 } else { 0.0 };
        let x = if i.is_multiple_of(17) { -0.0 } else { x };
        match dtype {
            "f32" => x.to_le_bytes().to_vec(),
            "f16" => half::f16::from_f32(x).to_le_bytes().to_vec(),
            "bf16" => half::bf16::from_f32(x).to_le_bytes().to_vec(),
            _ => ((i as i32).wrapping_mul(-1_640_531_535) ^ r as i32).to_le_bytes().to_vec(),
        }
    };
    type Sent = Vec<(u16, Vec<u8>)>;
    let mut reference: Vec<(&str, &str, Sent)> = Vec::new();
    for k in Kernels::available() {
        for (dtype, op) in
            [("f32", "sum"), ("bf16", "sum"), ("f16", "sum"), ("f16", "max"), ("bf16", "min"), ("i32", "sum")]
        {
            let l = load_str(&conf(op, dtype, "udp", false, "", 3, 300, 100), Path::new("t.toml")).unwrap();
            let ports = vec![PortAddr { mac: APP_MAC.parse().unwrap(), ipv4: l.port_ipv4[0], ipv6: l.port_ipv6[0] }];
            let agg =
                Aggregator::new(&l.collectives, ports, crate::wire::gradient::DEFAULT_UDP_PORT, 1).with_kernels(k);
            let rig = Rig {
                dp: crate::datapath::Datapath::new(l.pipeline, 1, crate::wire::gradient::DEFAULT_UDP_PORT)
                    .with_aggregator(agg),
                coll: l.collectives[0].clone(),
            };
            let mut rig = rig;
            let mut io = VecIo::new(1);
            for off in (0..300u32).step_by(100) {
                for r in 0..3 {
                    let payload: Vec<u8> = (0..100).flat_map(|i| lane(dtype, off as usize + i, r)).collect();
                    rig.send(&mut io, rig.frame(r, off, 1, &payload, |_| {}), 0);
                }
            }
            assert_eq!(io.sent.len(), 9, "{} {dtype} {op}", k.name());
            match reference.iter().find(|(d, o, _)| *d == dtype && *o == op) {
                None => reference.push((dtype, op, io.sent)),
                Some((_, _, want)) => assert_eq!(
                    &io.sent,
                    want,
                    "{} differs from {} for {dtype} {op}",
                    k.name(),
                    Kernels::scalar().name()
                ),
            }
        }
    }
    assert_eq!(Kernels::available()[0].name(), "scalar", "the reference is the first set");
}

#[test]
fn results_equal_the_builder_byte_for_byte_and_reuse_the_triggering_buffer() {
    // 600 elements in chunks of 256: slots 0 and 1 are full chunks (sent from the per-member
    // templates), slot 2 has 88 lanes (the general builder). The contribution that completes a
    // slot carries its first copy, so a completion needs N - 1 new buffers and a resend none.
    for carriage in ["udp", "rocev2"] {
        for v6 in [false, true] {
            let mut rig = Rig::new(&conf("sum", "f32", carriage, v6, "", 3, 600, 256));
            let ports = vec![PortAddr {
                mac: APP_MAC.parse().unwrap(),
                ipv4: Some([10, 0, 0, 254]),
                ipv6: Some("fd00::fe".parse::<std::net::Ipv6Addr>().unwrap().octets()),
            }];
            let mut io = VecIo::new(1);
            io.alloc_budget = Some(3 * 2);
            let lanes = |s: usize| if s < 2 { 256 } else { 88 };
            for s in 0..3 {
                for rank in 0..3 {
                    let v: Vec<f32> = (0..lanes(s)).map(|i| ((rank + 1) * (i + s)) as f32).collect();
                    let f = rig.frame(rank, (s * 256) as u32, 5, &f32s(&v), |_| {});
                    rig.send(&mut io, f, 0);
                }
            }
            assert_eq!(io.alloc_budget, Some(0), "{carriage} v6 {v6}");
            let coll = rig.coll.clone();
            let expected = |r: usize, s: usize, psn: u32| {
                let sum: Vec<f32> = (0..lanes(s)).map(|i| (6 * (i + s)) as f32).collect();
                let payload = f32s(&sum);
                let spec =
                    result_spec(&coll, &ports, crate::wire::gradient::DEFAULT_UDP_PORT, 1, r, s, 5, psn, lanes(s));
                let mut f = vec![0u8; spec.frame_len(payload.len())];
                build::build(&spec, &payload, &mut f).unwrap();
                f
            };
            assert_eq!(io.sent.len(), 9);
            for s in 0..3 {
                for r in 0..3 {
                    assert_eq!(io.sent[s * 3 + r].1, expected(r, s, s as u32), "{carriage} v6 {v6} slot {s} rank {r}");
                }
            }
            // A late copy from rank 1 for each slot: resent to it alone, in its own buffer.
            for s in 0..3 {
                let v: Vec<f32> = (0..lanes(s)).map(|i| (2 * (i + s)) as f32).collect();
                let f = rig.frame(1, (s * 256) as u32, 5, &f32s(&v), |_| {});
                rig.send(&mut io, f, 0);
                assert_eq!(io.sent.last().unwrap().1, expected(1, s, 3 + s as u32), "{carriage} v6 {v6} resend {s}");
            }
            assert_eq!(io.sent.len(), 12);
            assert_eq!(rig.agg().resends, 3);
            assert_eq!(rig.dp.counters.dropped(Reason::NoMbuf), 0);
        }
    }
}

/// With `zero_copy_results`, a completion's full-chunk frames are one payload shared by
/// reference: each member's frame is byte for byte the one the builder makes (and the one
/// copy mode sends, in the same order), whatever its head's length (a VLAN tag on one member),
/// on UDP and RoCEv2, IPv4 and IPv6; the other members' frames are chains (a header and the
/// shared payload: two buffers each, three with the RoCEv2 ICRC) and the completing
/// contribution carries the last member's. Short last chunks and resends copy as before.
#[test]
fn zero_copy_results_equal_the_copied_ones_byte_for_byte() {
    for carriage in ["udp", "rocev2"] {
        for v6 in [false, true] {
            let text =
                conf("sum", "f32", carriage, v6, "", 3, 600, 256).replacen("rank = 0\n", "rank = 0\nvlan = 5\n", 1);
            let lanes = |s: usize| if s < 2 { 256 } else { 88 };
            let run = |zero_copy: bool| {
                let mut rig = zero_copy_rig(&text, zero_copy);
                let mut io = VecIo::new(1);
                io.alloc_budget = Some(1000);
                for s in 0..3 {
                    for rank in 0..3 {
                        let v: Vec<f32> =
                            (0..lanes(s)).map(|i| ((rank + 1) * (i + s) + round_salt(s)) as f32).collect();
                        let f = rig.frame(rank, (s * 256) as u32, 5, &f32s(&v), |_| {});
                        rig.send(&mut io, f, 0);
                    }
                }
                // A late copy from rank 1 of slot 0: resent to it alone.
                let v: Vec<f32> = (0..256).map(|i| (2 * i + round_salt(0)) as f32).collect();
                let f = rig.frame(1, 0, 5, &f32s(&v), |_| {});
                rig.send(&mut io, f, 0);
                assert_eq!(rig.dp.counters.dropped(Reason::NoMbuf), 0);
                assert_eq!(rig.agg().results, 9);
                (1000 - io.alloc_budget.unwrap(), io, rig.agg().shared_results)
            };
            let case = format!("{carriage} v6 {v6}");
            let (copied_allocs, copied, none) = run(false);
            let (shared_allocs, shared, counted) = run(true);
            assert_eq!(shared.sent.len(), 10, "{case}");
            assert_eq!(shared.sent, copied.sent, "{case}");
            // Two full chunks shared with two members each; the short chunk and the resend copied.
            assert_eq!((copied.shared, shared.shared), (0, 4), "{case}");
            assert_eq!((none, counted), (0, 4), "{case}");
            // Copy mode: 2 new buffers per completion (the contribution carries the third), none
            // for the resend (it goes out in the late copy's buffer). Zero-copy: 2 (3 on
            // RoCEv2) per shared frame, and 2 for the short chunk's completion.
            let per = if carriage == "rocev2" { 3 } else { 2 };
            assert_eq!((copied_allocs, shared_allocs), (3 * 2, 4 * per + 2), "{case}");
            let d = decode(&shared);
            for (i, (_, g, payload, _)) in d.iter().enumerate().take(9) {
                let s = i / 3;
                let sum: Vec<f32> = (0..lanes(s)).map(|j| (6 * (j + s) + 3 * round_salt(s)) as f32).collect();
                assert_eq!(payload, &f32s(&sum), "{case} frame {i}");
                assert_eq!(g.tensor_offset as usize, s * 256, "{case} frame {i}");
            }
        }
    }
}

/// A one-worker rig with `zero_copy_results` set to `on`.
fn zero_copy_rig(text: &str, on: bool) -> Rig {
    Rig::with(text, |c, ports| {
        let ctx = crate::agg::context::AggContext {
            ports,
            gradient_udp_port: crate::wire::gradient::DEFAULT_UDP_PORT,
            appliance_qpn: 1,
            workers: 1,
            shard: false,
            zero_copy_results: on,
        };
        Aggregator::with_context(&ctx, c, 0)
    })
}

/// A per-slot constant in the test values (so slots' payloads differ beyond their lanes).
fn round_salt(s: usize) -> usize {
    7 * s + 1
}

/// When the pool runs dry during a zero-copy completion, each member whose frame cannot be
/// made is a counted `no_mbuf` drop; the rest are sent, right, and the RoCEv2 PSNs of every
/// member still advance once per result (as in copy mode).
#[test]
fn zero_copy_results_count_what_the_pool_cannot_give() {
    let text = conf("sum", "f32", "rocev2", false, "", 3, 256, 256);
    let mut rig = zero_copy_rig(&text, true);
    let mut io = VecIo::new(1);
    // Three buffers: rank 0's shared frame takes them all; rank 1's finds none.
    io.alloc_budget = Some(3);
    for rank in 0..3 {
        let v: Vec<f32> = (0..256).map(|i| (i * (rank + 1)) as f32).collect();
        let f = rig.frame(rank, 0, 1, &f32s(&v), |_| {});
        rig.send(&mut io, f, 0);
    }
    assert_eq!(rig.dp.counters.dropped(Reason::NoMbuf), 1);
    assert_eq!((rig.agg().results, rig.agg().shared_results), (2, 1));
    let d = decode(&io);
    assert_eq!(d.len(), 2);
    let sum = f32s(&(0..256).map(|i| (6 * i) as f32).collect::<Vec<_>>());
    for (dst, _, payload, p) in &d {
        assert_eq!(payload, &sum);
        assert!(dst == &[10, 0, 0, 1] || dst == &[10, 0, 0, 3], "{dst:?}");
        assert_eq!(p.bth_psn, 0);
    }
    // Round 2: every member's PSN is 1, rank 1's included (its round-1 result was lost, not its number).
    io.alloc_budget = None;
    io.sent.clear();
    for rank in 0..3 {
        let f = rig.frame(rank, 0, 2, &f32s(&[1.0; 256]), |_| {});
        rig.send(&mut io, f, 0);
    }
    let d = decode(&io);
    assert_eq!(d.len(), 3);
    assert!(d.iter().all(|(_, _, payload, p)| payload == &f32s(&[3.0; 256]) && p.bth_psn == 1));
}

/// A mixed rx burst through `Datapath::process_burst` (whole, or cut into smaller bursts) sends
/// the same frames in the same order and counts the same as `Datapath::process` packet after
/// packet: contributions that complete a chunk (results to every member), a duplicate, ARP
/// requests (one answered), runts, and pipeline packets that are forwarded, dropped by an entry,
/// missed or expire their TTL.
#[test]
fn a_burst_is_processed_as_packet_after_packet() {
    const TABLES: &str = r#"
        [[table]]
        name = "route"
        key = [{ field = "ipv4.dst", match = "lpm" }]
        default_action = "drop"
        entry = [
            { key = ["10.0.0.0/24"], action = "set_eth_dst(02:00:00:00:09:09); dec_ttl" },
            { key = ["10.0.0.66/32"], action = "drop" },
        ]
        [[table]]
        name = "l2"
        key = [{ field = "eth.dst", match = "exact" }]
        default_action = "count(l2_miss); drop"
        entry = [{ key = ["02:00:00:00:09:09"], action = "count(l2_hit); forward(0)" }]
    "#;
    let text = conf("sum", "f32", "udp", false, "", 3, 8, 4) + TABLES;
    let rig = Rig::new(&text);
    let routed = |dst: [u8; 4], ttl: u8| {
        rig.frame(0, 0, 1, &f32s(&[1.0; 4]), |s| {
            s.dst_ip = IpAddrBytes::V4(dst);
            s.dst_port = 9000;
            s.ttl = ttl;
        })
    };
    let arp = |target: [u8; 4]| crate::neighbor::tests::arp_request(target, false);
    let chunk = |rank: usize, off: u32| rig.frame(rank, off, 1, &f32s(&[rank as f32 + 0.5; 4]), |_| {});
    let frames = vec![
        chunk(0, 0),
        routed([10, 0, 0, 77], 64),
        arp([10, 0, 0, 254]),
        vec![1, 2, 3],
        chunk(1, 0),
        routed([10, 0, 0, 66], 64),
        routed([192, 168, 1, 1], 64),
        chunk(2, 0),
        chunk(0, 0),
        routed([10, 0, 0, 78], 1),
        arp([10, 0, 0, 9]),
        chunk(0, 4),
        routed([10, 0, 0, 79], 64),
        Vec::new(),
    ];
    let local = vec![PortAddr { mac: APP_MAC.parse().unwrap(), ipv4: Some([10, 0, 0, 254]), ipv6: None }];
    let run = |cuts: &[usize]| {
        let mut r = Rig::new(&text);
        r.dp.local = local.clone();
        let mut io = VecIo::new(1);
        if cuts.is_empty() {
            for f in &frames {
                r.send(&mut io, f.clone(), 10);
            }
        } else {
            let mut slots: Vec<Option<VecBuf>> = frames
                .iter()
                .map(|f| {
                    let mut b = VecBuf::from_frame(f);
                    b.timestamp_us = Some(10);
                    Some(b)
                })
                .collect();
            let mut rest = &mut slots[..];
            for &c in cuts {
                let (now, later) = rest.split_at_mut(c.min(rest.len()));
                r.dp.process_burst(&mut io, 0, now, 0);
                assert!(now.iter().all(Option::is_none), "every packet of the burst is taken");
                rest = later;
            }
        }
        let tables: Vec<Vec<crate::table::Counter>> =
            (0..r.dp.pipeline_state.tables()).map(|t| r.dp.pipeline_state.hits_of(t).to_vec()).collect();
        let named: Vec<crate::table::Counter> = r.dp.pipeline_state.named.clone();
        (io.sent, r.dp.counters.clone(), *r.agg(), tables, named)
    };
    let one_by_one = run(&[]);
    assert!(one_by_one.0.len() >= 6, "results, the ARP reply and forwarded packets: {}", one_by_one.0.len());
    assert_eq!(one_by_one.1.neighbor_replies, 1);
    assert_eq!(one_by_one.1.dropped(Reason::TtlExpired), 1);
    assert_eq!(one_by_one.1.dropped(Reason::Runt), 2);
    assert_eq!(one_by_one.1.dropped(Reason::ExplicitDrop), 1, "10.0.0.66");
    assert_eq!(one_by_one.1.dropped(Reason::TableMiss), 2, "192.168.1.1 and the unanswered ARP request");
    for cuts in [&[frames.len()][..], &[1, 4, 2, 100], &[3; 5]] {
        assert!(run(cuts) == one_by_one, "bursts cut at {cuts:?}");
    }
}

/// Rule 5's offset and length checks with a chunk that is not a power of two (3 lanes over a
/// 10-lane tensor: slots at offsets 0, 3, 6 and a 1-lane last chunk at 9) and a 2-byte dtype:
/// each accepted contribution lands in its own slot (one member, so each completes at once and
/// its result carries its offset and lanes); every other offset is refused.
#[test]
fn rule_5_offsets_of_a_chunk_that_is_not_a_power_of_two() {
    let mut rig = Rig::new(&conf("sum", "f16", "udp", false, "", 1, 10, 3));
    let lanes = |n: usize, seed: u8| -> Vec<u8> { (0..2 * n as u8).map(|i| (seed + i) & 0x3b).collect() };
    for (k, (off, n)) in [(0u32, 3usize), (3, 3), (6, 3), (9, 1)].into_iter().enumerate() {
        let mut io = VecIo::new(1);
        let pl = lanes(n, 17 * k as u8);
        let f = rig.frame(0, off, 1, &pl, |_| {});
        rig.send(&mut io, f, k as u64);
        let out = decode(&io);
        assert_eq!(out.len(), 1, "offset {off}");
        assert_eq!((out[0].1.tensor_offset, out[0].1.data_length as usize), (off, 2 * n), "offset {off}");
        assert_eq!(out[0].2, pl, "offset {off}: one member's sum is its contribution");
    }
    assert_eq!(rig.agg().completed, 4);
    let refused: Vec<(u32, Vec<u8>)> = vec![
        (1, lanes(3, 0)),
        (2, lanes(3, 0)),
        (4, lanes(3, 0)),
        (8, lanes(2, 0)),
        (12, lanes(3, 0)),
        (9, lanes(3, 0)),
        (3, lanes(2, 0)),
        (u32::MAX - 2, lanes(3, 0)),
    ];
    for (i, (off, pl)) in refused.into_iter().enumerate() {
        let mut io = VecIo::new(1);
        let before = rig.dp.counters.dropped(Reason::GradBadOffset);
        let f = rig.frame(0, off, 2, &pl, |_| {});
        rig.send(&mut io, f, 1_000_000 * (i as u64 + 1));
        assert_eq!(rig.dp.counters.dropped(Reason::GradBadOffset), before + 1, "offset {off}, {} bytes", pl.len());
    }
    // An odd byte count is not a whole number of 2-byte lanes.
    let mut io = VecIo::new(1);
    let f = rig.frame(0, 0, 2, &lanes(3, 0), |s| s.header.data_length = 5);
    rig.send(&mut io, f, 20_000_000);
    assert_eq!(rig.dp.counters.dropped(Reason::GradBadLength), 1);
    assert_eq!(rig.agg().completed, 4, "nothing refused completed a slot");
}

/// A UDP datagram to the gradient port with fewer payload bytes than a gradient header: to the
/// appliance it is a malformed gradient packet (dropped and counted, never answered: there is
/// no header to put in a NAK); to anyone else it is ordinary traffic for the tables.
#[test]
fn short_gradient_datagrams_are_malformed_only_when_addressed_to_the_appliance() {
    let mut rig = Rig::new(&conf("sum", "f32", "udp", false, "", 1, 4, 4));
    let short = |rig: &Rig, dst: [u8; 4]| {
        let mut f = rig.frame(0, 0, 1, &[], |s| s.dst_ip = IpAddrBytes::V4(dst));
        f.truncate(14 + 20 + 8 + 12);
        let mut ip = crate::wire::ipv4::Ipv4Packet::new_unchecked(&mut f[14..]);
        ip.set_total_len(20 + 8 + 12);
        ip.fill_checksum();
        f[14 + 20 + 4..14 + 20 + 8].copy_from_slice(&[0, 20, 0, 0]); // UDP length 20, no checksum
        assert!(parse(&f, crate::wire::gradient::DEFAULT_UDP_PORT).unwrap().has(Layers::GRADIENT_SHORT));
        f
    };
    let mut io = VecIo::new(1);
    let f = short(&rig, [10, 0, 0, 254]);
    rig.send(&mut io, f, 0);
    assert_eq!(rig.dp.counters.dropped(Reason::MalformedGradient), 1);
    assert!(io.sent.is_empty(), "no NAK for a packet without a header");
    let f = short(&rig, [10, 9, 9, 9]);
    rig.send(&mut io, f, 0);
    assert_eq!(rig.dp.counters.dropped(Reason::MalformedGradient), 1);
    assert_eq!(rig.dp.counters.dropped(Reason::NoEgress), 1, "no table: not forwarded, not aggregated");
    assert_eq!(rig.agg().folded, 0);
}

/// A port with no address of a packet's family has no appliance address of that family: a
/// gradient packet of that family arriving there is another host's, whatever its destination,
/// and goes to the tables (here none: `no_egress`), never folded and never answered (a NAK
/// would have to come from an address the appliance does not have, section 6). On the same
/// port the family it has an address of is aggregated as before, and only when sent to it.
#[test]
fn a_port_without_an_address_of_the_family_aggregates_none_of_it() {
    for carriage in ["udp", "rocev2"] {
        let text = conf("sum", "f32", carriage, false, "", 2, 4, 4).replacen("ipv6 = \"fd00::fe\"\n", "", 1);
        let mut rig = Rig::new(&text);
        let v6 = |last: u8| {
            let mut a = "fd00::".parse::<std::net::Ipv6Addr>().unwrap().octets();
            a[15] = last;
            IpAddrBytes::V6(a)
        };
        let mut io = VecIo::new(1);
        // To an appliance-looking address, to another host, and from a configured member's
        // rank with a header naming the collective: none of it is the appliance's.
        for (i, dst) in [0xfe, 0x77].into_iter().enumerate() {
            let f = rig.frame(0, 0, 1, &f32s(&[1.0; 4]), |s| {
                s.src_ip = v6(1);
                s.dst_ip = v6(dst);
            });
            rig.send(&mut io, f, i as u64 * 1_000_000);
        }
        // An unknown collective would be NAK 1 if it were the appliance's.
        let f = rig.frame(0, 0, 1, &f32s(&[1.0; 4]), |s| {
            s.src_ip = v6(1);
            s.dst_ip = v6(0xfe);
            s.header.collective_id = 99;
        });
        rig.send(&mut io, f, 3_000_000);
        assert!(io.sent.is_empty(), "{carriage}: nothing answered: {} frames", io.sent.len());
        assert_eq!(rig.dp.counters.dropped(Reason::NoEgress), 3, "{carriage}");
        assert_eq!(rig.dp.counters.dropped(Reason::GradUnknownCollective), 0, "{carriage}");
        assert_eq!((rig.agg().folded, rig.agg().naks), (0, 0), "{carriage}");
        // IPv4 on the same port: to another host, transit; to the appliance, folded.
        let f = rig.frame(0, 0, 1, &f32s(&[1.0; 4]), |s| s.dst_ip = IpAddrBytes::V4([10, 0, 0, 77]));
        rig.send(&mut io, f, 4_000_000);
        assert_eq!((rig.agg().folded, rig.dp.counters.dropped(Reason::NoEgress)), (0, 4), "{carriage}");
        for k in 0..2 {
            let f = rig.frame(k, 0, 1, &f32s(&[1.0; 4]), |_| {});
            rig.send(&mut io, f, 5_000_000);
        }
        assert_eq!((rig.agg().folded, rig.agg().completed, io.sent.len()), (2, 1, 2), "{carriage}");
    }
}

/// Rule 5's source and length checks on the other family and carriage: an IPv6 source other
/// than the rank's member's (5); a RoCEv2 data_length larger than the bytes present (6), while
/// bytes beyond data_length are no error on RoCEv2 (only the UDP carriage's length must match
/// it exactly).
#[test]
fn rule_5_ipv6_sources_and_rocev2_lengths() {
    let pl = f32s(&[1.0; 4]);
    let v6 = |last: u8| {
        let mut a = "fd00::".parse::<std::net::Ipv6Addr>().unwrap().octets();
        a[15] = last;
        IpAddrBytes::V6(a)
    };
    for carriage in ["udp", "rocev2"] {
        let mut rig = Rig::new(&conf("sum", "f32", carriage, true, "", 2, 8, 4));
        let cases = vec![
            (rig.frame(0, 0, 1, &pl, |s| s.src_ip = v6(0x66)), Reason::GradNotMember, Some(5)),
            // Rank 1's address claiming rank 0.
            (rig.frame(0, 0, 1, &pl, |s| s.src_ip = v6(2)), Reason::GradNotMember, Some(5)),
        ];
        assert_refused(&mut rig, cases);
    }
    for v6 in [false, true] {
        let mut rig = Rig::new(&conf("sum", "f32", "rocev2", v6, "", 2, 8, 4));
        let cases = vec![(rig.frame(0, 0, 1, &pl, |s| s.header.data_length = 20), Reason::GradBadLength, Some(6))];
        assert_refused(&mut rig, cases);
    }
    // The tensor's last chunk (3 lanes) from frames carrying 4 lanes' bytes: RoCEv2 takes the
    // 3 lanes data_length says.
    for v6 in [false, true] {
        let mut rig = Rig::new(&conf("sum", "f32", "rocev2", v6, "", 2, 7, 4));
        let mut io = VecIo::new(1);
        for k in 0..2 {
            let f = rig.frame(k, 4, 1, &f32s(&[1.5 + k as f32, 2.0, 4.0, 99.0]), |s| s.header.data_length = 12);
            rig.send(&mut io, f, 0);
        }
        let out = decode(&io);
        assert_eq!(out.len(), 2, "v6 {v6}: a result to each member");
        for (_, g, payload, _) in &out {
            assert_eq!((g.flags, g.tensor_offset, g.data_length), (Flags::RESULT, 4, 12), "v6 {v6}");
            assert_eq!(payload, &f32s(&[4.0, 4.0, 8.0]), "v6 {v6}");
        }
    }
}

/// A completed result's payload sums (section 6 frames: the UDP checksum's sum where a frame
/// carries one, the ICRC's CRC on RoCEv2) are computed with the frames' pad (section 1: the
/// gradient header and payload padded to a multiple of 4 on RoCEv2, no pad on UDP), so that every
/// full-chunk copy goes out from its template with the payload read once.
#[test]
fn completed_results_keep_sums_for_their_frames_pad() {
    for carriage in ["udp", "rocev2"] {
        for v6 in [false, true] {
            // (dtype, lanes per chunk): payloads of 16, 6 (pad 2 on RoCEv2) and 8 bytes.
            for (dtype, chunk) in [("f32", 4u32), ("f16", 3), ("f16", 4)] {
                let mut rig = Rig::new(&conf("sum", dtype, carriage, v6, "", 2, 2 * chunk as u64, chunk));
                let mut io = VecIo::new(1);
                let size = if dtype == "f32" { 4 } else { 2 };
                let len = chunk as usize * size;
                for k in 0..2 {
                    let pl: Vec<u8> = (0..len).map(|i| (i as u8 + k as u8) & 0x3f).collect();
                    rig.send(&mut io, rig.frame(k, 0, 1, &pl, |_| {}), 0);
                }
                let case = format!("{carriage} v6 {v6} {dtype} x{chunk}");
                assert_eq!(decode(&io).len(), 2, "{case}");
                let st = &rig.dp.agg.as_ref().unwrap().colls[0];
                let sums = &st.sums[0];
                let roce = carriage == "rocev2";
                if roce {
                    assert!(sums.pad < 4 && (20 + len + sums.pad).is_multiple_of(4), "{case}: pad {}", sums.pad);
                } else {
                    assert_eq!(sums.pad, 0, "{case}");
                }
                assert_eq!(sums.crc.is_some(), roce, "{case}");
                assert_eq!(sums.sum.is_some(), !roce || v6, "{case}");
                let t = st.templates.as_ref().unwrap_or_else(|| panic!("{case}: templates"));
                assert!(t.fits(len, sums), "{case}");
            }
        }
    }
}

mod collectives;
mod probe;
mod shard;
mod swap;

/// With `[port.qos]` on the members' port, results leave through its scheduler in the class the
/// collective's DSCP (10) maps to: class 1, whose queue marks every packet, so each result
/// (ECT(0)) leaves with CE and valid checksums; class 0 sees nothing.
#[test]
fn results_go_through_the_ports_scheduler_in_the_collectives_class() {
    let qos =
        "[port.qos]\nclasses = 2\ndscp_map = { 10 = 1 }\n[[port.qos.class]]\n[[port.qos.class]]\nkmin = 0\nkmax = 0\n";
    let text = conf("sum", "f32", "udp", false, qos, 3, 4, 4);
    let l = load_str(&text, Path::new("t.toml")).unwrap_or_else(|e| panic!("{e}"));
    let ports = vec![PortAddr { mac: APP_MAC.parse().unwrap(), ipv4: l.port_ipv4[0], ipv6: l.port_ipv6[0] }];
    let agg = Aggregator::new(&l.collectives, ports, crate::wire::gradient::DEFAULT_UDP_PORT, 1);
    let mut rig = Rig {
        dp: crate::datapath::Datapath::new(l.pipeline, 1, crate::wire::gradient::DEFAULT_UDP_PORT)
            .with_aggregator(agg)
            .with_egress(&l.qos)
            .unwrap(),
        coll: l.collectives[0].clone(),
    };
    let mut io = VecIo::new(1);
    for k in 0..3 {
        let f = rig.frame(k, 0, 1, &f32s(&[1.0, 2.0, 3.0, 4.0]), |_| {});
        rig.send(&mut io, f, 10);
    }
    rig.dp.finish_egress(&mut io);
    let out = decode(&io);
    assert_eq!(out.len(), 3);
    for (_, g, payload, p) in &out {
        assert_eq!((g.flags, p.dscp, p.ecn), (Flags::RESULT, 10, 3), "a result, class 1, CE");
        assert_eq!(payload, &f32s(&[3.0, 6.0, 9.0, 12.0]));
    }
    let e = rig.dp.egress[0].as_ref().unwrap();
    assert_eq!((e.sched.counters(1).sent.pkts, e.sched.counters(1).ecn_marked.pkts), (3, 3));
    assert_eq!(e.sched.counters(0).enqueued.pkts, 0);
}

/// A contribution in a multi-segment buffer is not summed (the aggregator reads its payload
/// whole): dropped `multi_segment`, nothing folded, nothing sent; the same frame in one segment
/// is folded.
#[test]
fn a_segmented_contribution_is_dropped_multi_segment() {
    let mut rig = Rig::new(&conf("sum", "f32", "rocev2", false, "", 2, 8, 8));
    let mut io = VecIo::new(1);
    let f = rig.frame(0, 0, 1, &f32s(&[1.0; 8]), |_| {});
    rig.dp.process(&mut io, 0, VecBuf::segmented(&f, 100), 10);
    assert_eq!(rig.dp.counters.dropped(Reason::MultiSegment), 1);
    assert_eq!(rig.agg().folded, 0);
    assert!(io.sent.is_empty());
    rig.dp.process(&mut io, 0, VecBuf::from_frame(&f), 10);
    assert_eq!(rig.agg().folded, 1);
    assert_eq!(rig.dp.counters.total_drops(), 1);
}
