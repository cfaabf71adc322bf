//! PROBE and STATUS (spec section 7), NAKs on RoCEv2 (section 5: PSN 0, the member's counter
//! untouched, the refused packet's tags) and the NAK budget of members under a flood of
//! spoofed sources (section 5).

use super::*;
use crate::wire::gradient::{NakReason, SlotState};

/// Members of `conf` reached through VLAN 30 (section 3's optional `vlan`).
fn with_vlan(text: String) -> String {
    text.replace("[[collective.member]]\n", "[[collective.member]]\nvlan = 30\n")
}

/// A PROBE from `rank` for the chunk at `offset`: flags PROBE, round 0, ceil(n / 8) bytes of
/// payload (`fill`: the spec says zero; the appliance ignores them).
fn probe(rig: &Rig, rank: usize, offset: u32, fill: u8, tweak: impl Fn(&mut FrameSpec)) -> Vec<u8> {
    let len = rig.coll.workers().div_ceil(8);
    rig.frame(rank, offset, 0, &vec![fill; len], |s| {
        s.header.flags = Flags::PROBE;
        tweak(s);
    })
}

/// Checks a STATUS (section 7) to `rank` for the chunk at `offset`: every header field, the
/// addresses of a result to that member (section 6, with its VLAN 30; on RoCEv2 its QP and
/// Q_Key, PSN 0), and returns (state, round, bitmap).
fn status_of(rig: &Rig, frame: &[u8], rank: usize, offset: u32) -> (u8, u32, Vec<u8>) {
    let m = rig.coll.members[rank];
    let mut io = VecIo::new(1);
    io.sent.push((0, frame.to_vec()));
    let (dst, g, payload, p) = decode(&io).remove(0);
    let n = rig.coll.workers();
    assert_eq!(
        (g.version, g.flags, g.op_type, g.collective_id, g.dtype, g.worker_rank, g.tensor_offset, g.data_length),
        (
            1,
            Flags::RESULT | Flags::PROBE,
            rig.coll.op.wire(),
            7,
            rig.coll.dtype.wire(),
            0xffff,
            offset,
            n.div_ceil(8) as u32
        )
    );
    let want_dst: Vec<u8> = match m.ip {
        IpAddrBytes::V4(a) => a.to_vec(),
        IpAddrBytes::V6(a) => a.to_vec(),
    };
    assert_eq!(dst, want_dst, "to the prober only");
    let want_src: Vec<u8> = if m.ip.is_v6() {
        "fd00::fe".parse::<std::net::Ipv6Addr>().unwrap().octets().to_vec()
    } else {
        vec![10, 0, 0, 254]
    };
    assert_eq!(p.ip_src(), &want_src[..]);
    assert_eq!((p.eth_dst, p.eth_src), (m.mac, APP_MAC.parse().unwrap()));
    assert!(p.has(Layers::VLAN_OUTER) && !p.has(Layers::VLAN_INNER), "one 802.1Q tag");
    assert_eq!((p.vlan_outer_tpid, p.vid_outer), (0x8100, 30), "the member's VLAN");
    assert_eq!((p.dscp, p.ecn, p.ttl), (10, 2, 64));
    if rig.coll.carriage == Carriage::Rocev2 {
        assert!(p.has(Layers::BTH.union(Layers::DETH)));
        assert_eq!((p.udp_dst, p.bth_opcode), (4791, UD_SEND_ONLY));
        assert_eq!((p.bth_dest_qp, p.deth_qkey, p.deth_src_qp, p.bth_psn), (m.qpn, m.qkey, 1, 0), "QP, Q_Key, PSN 0");
    } else {
        assert_eq!((p.udp_src, p.udp_dst), (49374, m.udp_port));
    }
    (g.reason, g.round, payload)
}

/// Section 7's table on both carriages and families, 10 workers (a 2-byte bitmap): a fresh
/// slot (0), a round in progress without (1) and with (2) the prober, a completed round (3);
/// the bitmap holds exactly the ranks in; probes are never folded, never complete a round and
/// never advance a member's PSN counter; a probe's payload bytes are ignored.
#[test]
fn status_of_every_state_on_both_carriages_with_vlan() {
    for carriage in ["udp", "rocev2"] {
        for v6 in [false, true] {
            let case = format!("{carriage} v6 {v6}");
            let mut rig = Rig::new(&with_vlan(conf("sum", "i32", carriage, v6, "", 10, 8, 4)));
            let mut io = VecIo::new(1);
            let pl = |v: i32| -> Vec<u8> { [v; 4].iter().flat_map(|x| x.to_le_bytes()).collect() };
            let mut t = 0;
            let mut ask = |rig: &mut Rig, io: &mut VecIo, rank: usize, offset: u32| {
                t += 1;
                let before = io.sent.len();
                rig.send(io, probe(rig, rank, offset, 0xa5 * (t as u8 & 1), |_| {}), t);
                assert_eq!(io.sent.len(), before + 1, "{case}: one STATUS per probe");
                status_of(rig, &io.sent[before].1, rank, offset)
            };
            assert_eq!(ask(&mut rig, &mut io, 3, 0), (SlotState::NO_HISTORY, 0, vec![0, 0]), "{case}");
            assert_eq!(ask(&mut rig, &mut io, 9, 4), (SlotState::NO_HISTORY, 0, vec![0, 0]), "{case}");
            for k in [0, 3, 9] {
                rig.send(&mut io, rig.frame(k, 0, 5, &pl(k as i32), |_| {}), 10);
            }
            let bits = vec![0b0000_1001, 0b0000_0010];
            assert_eq!(ask(&mut rig, &mut io, 3, 0), (SlotState::IN_PROGRESS_WITH_RANK, 5, bits.clone()), "{case}");
            assert_eq!(ask(&mut rig, &mut io, 9, 0), (SlotState::IN_PROGRESS_WITH_RANK, 5, bits.clone()), "{case}");
            assert_eq!(ask(&mut rig, &mut io, 4, 0), (SlotState::IN_PROGRESS_WITHOUT_RANK, 5, bits), "{case}");
            assert_eq!(ask(&mut rig, &mut io, 4, 4), (SlotState::NO_HISTORY, 0, vec![0, 0]), "{case}: slot 1");
            assert_eq!((rig.agg().folded, rig.agg().completed), (3, 0), "{case}: probes are no contributions");
            let statuses = io.sent.len();
            for k in [1, 2, 4, 5, 6, 7, 8] {
                rig.send(&mut io, rig.frame(k, 0, 5, &pl(k as i32), |_| {}), 20);
            }
            assert_eq!(io.sent.len(), statuses + 10, "{case}: round 5 completes with the 10 ranks");
            assert_eq!(ask(&mut rig, &mut io, 4, 0), (SlotState::COMPLETED, 6, vec![0, 0]), "{case}");
            // Round 6 in progress (ranks 8 and 1): the bitmap is round 6's, not round 5's.
            for k in [8, 1] {
                rig.send(&mut io, rig.frame(k, 0, 6, &pl(1), |_| {}), 30);
            }
            assert_eq!(
                ask(&mut rig, &mut io, 8, 0),
                (SlotState::IN_PROGRESS_WITH_RANK, 6, vec![0b0000_0010, 1]),
                "{case}"
            );
            for k in [0, 2, 3, 4, 5, 6, 7, 9] {
                rig.send(&mut io, rig.frame(k, 0, 6, &pl(1), |_| {}), 40);
            }
            let out = decode(&io);
            let results: Vec<_> = out.iter().filter(|(_, g, _, _)| g.flags == Flags::RESULT).collect();
            assert_eq!(results.len(), 20, "{case}");
            for (i, (_, g, payload, p)) in results.iter().enumerate() {
                let want = if i < 10 { pl(45) } else { pl(10) };
                assert_eq!((g.round, payload), (5 + i as u32 / 10, &want), "{case}: probes are not folded");
                if carriage == "rocev2" {
                    // Each member's second result has PSN 1: no STATUS advanced the counters.
                    assert_eq!(p.bth_psn, i as u32 / 10, "{case}: result {i}");
                }
            }
            assert_eq!((rig.agg().probes, rig.agg().statuses), (8, 8), "{case}");
            assert_eq!((rig.agg().folded, rig.agg().completed), (20, 2), "{case}");
            assert_eq!(rig.dp.counters.total_drops(), 0, "{case}");
        }
    }
}

/// Section 7: a probe does not touch the slot for rule 8, and a round in progress that has
/// timed out is reclaimed (and counted) before the answer is made: without history the slot
/// answers "no history", with a kept result "completed".
#[test]
fn a_timed_out_round_is_reclaimed_before_the_status() {
    for carriage in ["udp", "rocev2"] {
        let mut rig = Rig::new(&with_vlan(conf("sum", "f32", carriage, false, "slot_timeout_ms = 5", 2, 4, 4)));
        let mut io = VecIo::new(1);
        let mut ask = |rig: &mut Rig, rank: usize, t: u64| {
            let before = io.sent.len();
            rig.send(&mut io, probe(rig, rank, 0, 0, |_| {}), t);
            status_of(rig, &io.sent[before].1, rank, 0)
        };
        rig.send(&mut VecIo::new(1), rig.frame(0, 0, 3, &f32s(&[1.0; 4]), |_| {}), 0);
        assert_eq!(ask(&mut rig, 1, 4_000), (SlotState::IN_PROGRESS_WITHOUT_RANK, 3, vec![1]), "{carriage}");
        // 8 ms after the contribution, 4 ms after the probe: had the probe touched the slot, the
        // round would still be in progress.
        assert_eq!(rig.agg().slot_timeouts, 0);
        assert_eq!(ask(&mut rig, 0, 8_000), (SlotState::NO_HISTORY, 0, vec![0]), "{carriage}");
        assert_eq!(rig.agg().slot_timeouts, 1, "{carriage}: reclaimed and counted");
        // The reclaimed round starts afresh: both ranks complete round 3 (not 1.0 + 1.0 + 2.0).
        let mut io = VecIo::new(1);
        rig.send(&mut io, rig.frame(1, 0, 3, &f32s(&[2.0; 4]), |_| {}), 9_000);
        rig.send(&mut io, rig.frame(0, 0, 3, &f32s(&[1.0; 4]), |_| {}), 9_001);
        assert_eq!(decode(&io)[0].2, f32s(&[3.0; 4]));
        // With history: round 4 started by rank 1, timed out: completed, expecting 4.
        rig.send(&mut io, rig.frame(1, 0, 4, &f32s(&[2.0; 4]), |_| {}), 10_000);
        assert_eq!(ask(&mut rig, 0, 15_000), (SlotState::IN_PROGRESS_WITHOUT_RANK, 4, vec![2]), "{carriage}");
        assert_eq!(ask(&mut rig, 1, 15_001), (SlotState::COMPLETED, 4, vec![0]), "{carriage}");
        assert_eq!(rig.agg().slot_timeouts, 2, "{carriage}");
        assert_eq!((rig.agg().probes, rig.agg().statuses), (4, 4), "{carriage}");
    }
}

/// Section 7: a probe is validated as a contribution (rule 5, reasons 1-6, the same NAKs):
/// its length must be exactly ceil(num_workers / 8) bytes and its offset one a contribution
/// could carry (a chunk's start, the tensor's short last chunk included); a probe with RESULT
/// or NAK is no probe (dropped, no NAK).
#[test]
fn probes_are_validated_as_contributions() {
    // 9 workers: a 2-byte probe; 10 lanes in chunks of 4: offsets 0, 4 and 8 (2 lanes).
    let text = conf("sum", "f32", "udp", false, "", 9, 10, 4);
    let mut rig = Rig::new(&text);
    let maker = Rig::new(&text);
    let pr = |rank: usize, off: u32, len: usize, tweak: &dyn Fn(&mut FrameSpec)| {
        maker.frame(rank, off, 0, &vec![0; len], |s| {
            s.header.flags = Flags::PROBE;
            tweak(s);
        })
    };
    let none = &|_: &mut FrameSpec| {};
    let cases: Vec<(Vec<u8>, Reason, Option<u8>)> = vec![
        (
            pr(0, 0, 2, &|s| s.header.collective_id = 8),
            Reason::GradUnknownCollective,
            Some(NakReason::UNKNOWN_COLLECTIVE),
        ),
        (pr(0, 0, 2, &|s| s.header.version = 0), Reason::GradBadVersion, Some(NakReason::BAD_VERSION)),
        (pr(0, 0, 2, &|s| s.header.op_type = 3), Reason::GradMismatch, Some(NakReason::MISMATCH)),
        (pr(0, 0, 2, &|s| s.header.dtype = 2), Reason::GradMismatch, Some(NakReason::MISMATCH)),
        (pr(0, 0, 2, &|s| s.header.worker_rank = 9), Reason::GradBadRank, Some(NakReason::BAD_RANK)),
        (pr(0, 0, 2, &|s| s.src_port = 1234), Reason::GradNotMember, Some(NakReason::NOT_MEMBER)),
        (pr(0, 0, 2, &|s| s.header.worker_rank = 1), Reason::GradNotMember, Some(NakReason::NOT_MEMBER)),
        (pr(0, 0, 1, none), Reason::GradBadLength, Some(NakReason::BAD_LENGTH_OR_OFFSET)),
        (pr(0, 0, 3, none), Reason::GradBadLength, Some(NakReason::BAD_LENGTH_OR_OFFSET)),
        (pr(0, 0, 0, none), Reason::GradBadLength, Some(NakReason::BAD_LENGTH_OR_OFFSET)),
        (pr(0, 0, 16, none), Reason::GradBadLength, Some(NakReason::BAD_LENGTH_OR_OFFSET)),
        (pr(0, 0, 2, &|s| s.header.data_length = 4), Reason::GradBadLength, Some(NakReason::BAD_LENGTH_OR_OFFSET)),
        (pr(0, 2, 2, none), Reason::GradBadOffset, Some(NakReason::BAD_LENGTH_OR_OFFSET)),
        (pr(0, 9, 2, none), Reason::GradBadOffset, Some(NakReason::BAD_LENGTH_OR_OFFSET)),
        (pr(0, 12, 2, none), Reason::GradBadOffset, Some(NakReason::BAD_LENGTH_OR_OFFSET)),
        (pr(0, u32::MAX - 3, 2, none), Reason::GradBadOffset, Some(NakReason::BAD_LENGTH_OR_OFFSET)),
        (pr(0, 0, 2, &|s| s.header.flags = Flags::PROBE | Flags::RESULT), Reason::GradFlags, None),
        (pr(0, 0, 2, &|s| s.header.flags = Flags::PROBE | Flags::NAK), Reason::GradFlags, None),
    ];
    assert_refused(&mut rig, cases);
    assert_eq!((rig.agg().probes, rig.agg().statuses), (0, 0));
    // The NAK of a refused probe is its header with flags NAK alone.
    let mut io = VecIo::new(1);
    rig.send(&mut io, pr(0, 2, 2, &|s| s.header.flags = Flags::PROBE | Flags::RETRANSMIT), 100_000_000);
    let nak = &decode(&io)[0].1;
    assert_eq!((nak.flags, nak.reason, nak.tensor_offset, nak.data_length), (Flags::NAK, 6, 2, 0));
    // Every chunk's start is a probe's offset, RETRANSMIT allowed, round ignored.
    let mut io = VecIo::new(1);
    for off in [0, 4, 8] {
        rig.send(&mut io, pr(4, off, 2, &|s| s.header.round = 77), 200_000_000);
    }
    rig.send(&mut io, pr(5, 8, 2, &|s| s.header.flags = Flags::PROBE | Flags::RETRANSMIT), 200_000_000);
    let out = decode(&io);
    assert_eq!(out.len(), 4);
    for ((_, g, payload, _), off) in out.iter().zip([0, 4, 8, 8]) {
        assert_eq!(
            (g.flags, g.tensor_offset, g.reason, g.round, g.data_length),
            (Flags::RESULT | Flags::PROBE, off, 0, 0, 2)
        );
        assert_eq!(payload, &vec![0, 0]);
    }
    // RoCEv2: a data_length larger than the bytes present (6); bytes beyond it are pad.
    let mut rig = Rig::new(&conf("sum", "f32", "rocev2", true, "", 9, 10, 4));
    let f = rig.frame(0, 0, 0, &[0, 0], |s| {
        s.header.flags = Flags::PROBE;
        s.header.data_length = 6;
    });
    assert_refused(&mut rig, vec![(f, Reason::GradBadLength, Some(6))]);
    let mut io = VecIo::new(1);
    rig.send(&mut io, probe(&rig, 0, 8, 0, |_| {}), 0);
    assert_eq!(decode(&io)[0].1.flags, Flags::RESULT | Flags::PROBE);
}

/// Section 5 on RoCEv2: a NAK carries PSN 0 and leaves the member's PSN counter untouched, goes
/// to the refused packet's source QP, and mirrors the refused packet's tags (one 802.1Q tag, or
/// 802.1ad + 802.1Q), not the member's configured VLAN.
#[test]
fn rocev2_naks_carry_psn_0_and_mirror_the_packets_tags() {
    type Tags = (Option<(u16, u16)>, Option<u16>);
    let tagged: [Tags; 3] = [(None, None), (None, Some(100)), (Some((0x88a8, 300)), Some(0x2000 | 100))];
    for (i, (outer_tag, vlan)) in tagged.into_iter().enumerate() {
        let mut rig = Rig::new(&with_vlan(conf("sum", "f32", "rocev2", false, "", 2, 4, 4)));
        let mut io = VecIo::new(1);
        for k in 0..2 {
            rig.send(&mut io, rig.frame(k, 0, 1, &f32s(&[1.0; 4]), |_| {}), 0);
        }
        // A stale round from rank 0, then round 2 completes.
        let stale = rig.frame(0, 0, 9, &f32s(&[1.0; 4]), |s| {
            s.outer_tag = outer_tag;
            s.vlan = vlan;
        });
        rig.send(&mut io, stale, 1);
        for k in 0..2 {
            rig.send(&mut io, rig.frame(k, 0, 2, &f32s(&[1.0; 4]), |_| {}), 2);
        }
        let out = decode(&io);
        assert_eq!(out.len(), 5, "case {i}");
        let (_, g, _, p) = &out[2];
        assert_eq!((g.flags, g.reason, g.round, g.data_length), (Flags::NAK, 7, 2, 0), "case {i}");
        assert_eq!((p.bth_psn, p.bth_dest_qp, p.deth_src_qp), (0, 0x100, 1), "case {i}");
        let tags = (
            outer_tag.map(|_| (p.vlan_outer_tpid, p.vid_outer)),
            vlan.map(|_| if outer_tag.is_some() { p.vid_inner } else { p.vid_outer }),
        );
        assert_eq!(tags, (outer_tag, vlan.map(|v| v & 0xfff)), "case {i}: the packet's tags");
        assert_eq!(
            p.has(Layers::VLAN_OUTER) as u8 + p.has(Layers::VLAN_INNER) as u8,
            outer_tag.is_some() as u8 + vlan.is_some() as u8,
            "case {i}: no other tag"
        );
        let psns: Vec<(u32, u32)> = [0, 1, 3, 4].iter().map(|&j| (out[j].3.bth_dest_qp, out[j].3.bth_psn)).collect();
        assert_eq!(psns, vec![(0x100, 0), (0x101, 0), (0x100, 1), (0x101, 1)], "case {i}: counters untouched");
    }
}

/// Section 5 under a flood: 20,000 spoofed sources (claiming rank 1 from addresses and ports no
/// member has) over 20 ms, with each of 16 genuine members' stale contributions in the middle,
/// refused by two workers sharing one limiter: every member gets its NAK 7 with the expected
/// round, once per 100 ms, whatever it is refused for (its source is charged to its own
/// budget); strangers get at most one NAK each and at most `nak::BUCKETS` between them.
#[test]
fn members_get_their_naks_through_a_flood_of_spoofed_sources() {
    let n = 16;
    let text = conf("sum", "f32", "udp", false, "", n, 8, 4);
    let shared = nak::shared();
    let mut rigs: Vec<Rig> = (0..2u16)
        .map(|w| {
            Rig::with(&text, |c, ports| {
                Aggregator::for_worker(c, ports, 49374, 1, w, 2).with_nak_limiter(shared.clone())
            })
        })
        .collect();
    // Worker 0 owns the collective: round 0 of slot 0 completes there.
    let mut io = VecIo::new(1);
    for k in 0..n {
        let f = rigs[0].frame(k, 0, 0, &f32s(&[1.0; 4]), |_| {});
        rigs[0].send(&mut io, f, 0);
    }
    assert_eq!(io.sent.len(), n);
    let mut io = VecIo::new(1);
    let t0 = 1_000;
    for i in 0..20_000u32 {
        let spoof = rigs[0].frame(1, 0, 1, &f32s(&[9.0; 4]), |s| {
            s.src_ip = IpAddrBytes::V4([172, 16, (i >> 8) as u8, i as u8]);
            s.src_port = 40_000 + (i % 13) as u16;
        });
        rigs[0].send(&mut io, spoof, t0 + i as u64);
        if (10_000..10_000 + n as u32).contains(&i) {
            // A member restarted with a guessed round.
            let f = rigs[0].frame(i as usize - 10_000, 0, 9, &f32s(&[1.0; 4]), |_| {});
            rigs[0].send(&mut io, f, t0 + i as u64);
        }
    }
    let out = decode(&io);
    for k in 0..n {
        let member: Vec<_> = out.iter().filter(|(dst, ..)| dst == &vec![10, 0, 0, k as u8 + 1]).collect();
        assert_eq!(member.len(), 1, "member {k}'s NAK");
        let (_, g, _, p) = member[0];
        assert_eq!((g.flags, g.reason, g.round, p.udp_dst), (Flags::NAK, NakReason::STALE_ROUND, 1, 50000 + k as u16));
    }
    let mut per_source = std::collections::HashMap::new();
    for (dst, g, _, p) in &out {
        assert_eq!(g.flags, Flags::NAK);
        *per_source.entry((dst.clone(), p.udp_dst)).or_insert(0) += 1;
    }
    assert!(per_source.values().all(|&n| n == 1), "one NAK per source per 100 ms");
    let strangers = out.len() - n;
    assert!(strangers <= nak::BUCKETS, "{strangers} NAKs to strangers");
    assert!(strangers > nak::BUCKETS / 2, "strangers are bounded, not silenced: {strangers}");
    assert_eq!(rigs[0].dp.counters.dropped(Reason::GradNotMember), 20_000);
    assert_eq!(rigs[0].agg().naks + rigs[0].agg().naks_suppressed, 20_000 + n as u64);
    // Within 100 ms of its NAK the member's source gets no other, whatever it is refused for
    // and whichever worker refuses it; at 100 ms it gets the next.
    let when = t0 + 10_000; // rank 0's NAK
    let mut io = VecIo::new(1);
    let unknown = rigs[1].frame(0, 0, 1, &f32s(&[1.0; 4]), |s| s.header.collective_id = 99);
    rigs[1].send(&mut io, unknown.clone(), when + 50_000);
    let bad_offset = rigs[0].frame(0, 2, 1, &f32s(&[1.0; 4]), |_| {});
    rigs[0].send(&mut io, bad_offset, when + 99_999);
    assert!(io.sent.is_empty());
    rigs[1].send(&mut io, unknown, when + 100_000);
    let out = decode(&io);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].0.clone(), out[0].1.reason), (vec![10, 0, 0, 1], NakReason::UNKNOWN_COLLECTIVE));
}
