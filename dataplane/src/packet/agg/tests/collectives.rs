//! Per-collective counters: each collective counts its own folds, rounds, results, resends,
//! NAKs by reason, timeouts, probes and drops; over the collectives they sum to the global
//! counters but for what no collective can be charged with (an unknown collective's); and the
//! export walks every collective on every worker, in config order.

use super::*;
use crate::export::{Label, Metric, Names, Visit};
use crate::wire::gradient::NakReason;

/// Collective 7 (2 ranks, 2 slots of 4 f32, slot timeout 5 ms, members on UDP ports 50000 +
/// rank) then collective 9 (3 ranks, 1 slot of 4 f32, members on UDP ports 60000 + rank).
fn two_collectives() -> String {
    let a = conf("sum", "f32", "udp", false, "slot_timeout_ms = 5", 2, 8, 4);
    let b = conf("sum", "f32", "udp", false, "slot_timeout_ms = 1000", 3, 4, 4)
        .replace("collective_id = 7", "collective_id = 9")
        .replace("udp_port = 500", "udp_port = 600");
    a + &b[b.find("[[collective]]").unwrap()..]
}

/// The values of a walk, in order.
#[derive(Default)]
struct Values(Vec<u64>);

impl Visit for Values {
    fn counter(&mut self, _: Metric, v: u64) {
        self.0.push(v);
    }
}

/// Collective `id`'s counters and slots in use on `rig`'s aggregator.
fn coll(rig: &Rig, id: u16) -> (CollCounters, u64) {
    let a = rig.dp.agg.as_ref().unwrap();
    a.collectives().find(|(i, ..)| *i == id).map(|(_, c, n)| (*c, n)).unwrap()
}

/// `naks[code - 1]` set from (code, count) pairs.
fn naks(of: &[(u8, u64)]) -> [u64; NAK_REASONS] {
    let mut n = [0; NAK_REASONS];
    for &(code, count) in of {
        n[code as usize - 1] = count;
    }
    n
}

/// Drops in [`COLL_DROP_REASONS`] order from (reason, count) pairs.
fn drops(of: &[(Reason, u64)]) -> [u64; COLL_DROP_REASONS.len()] {
    let mut d = [0; COLL_DROP_REASONS.len()];
    for &(r, count) in of {
        d[coll_drop_index(r).unwrap()] = count;
    }
    d
}

#[test]
fn each_collective_counts_its_own_and_they_sum_to_the_global_counters() {
    let text = two_collectives();
    let mut rig = Rig::new(&text);
    let l = load_str(&text, Path::new("t.toml")).unwrap();
    let (c7, c9) = (l.collectives[0].clone(), l.collectives[1].clone());
    let mut io = VecIo::new(1);
    let pl = f32s(&[1.0; 4]);

    // Collective 7.
    rig.coll = c7;
    rig.send(&mut io, rig.frame(0, 0, 1, &pl, |_| {}), 0); // fold, slot 0 round 1
    rig.send(&mut io, rig.frame(0, 0, 1, &pl, |_| {}), 1); // duplicate
    rig.send(&mut io, rig.frame(1, 0, 1, &pl, |_| {}), 2); // completes: 2 results
    rig.send(&mut io, rig.frame(0, 0, 1, &pl, |_| {}), 3); // late: a resend
    rig.send(&mut io, rig.frame(0, 4, 1, &pl, |_| {}), 4); // fold, slot 1 round 1
    rig.send(&mut io, rig.frame(0, 0, 5, &pl, |_| {}), 10); // stale: NAK 7
    let spoofed = rig.frame(1, 0, 2, &pl, |s| s.src_ip = IpAddrBytes::V4([10, 0, 0, 66]));
    rig.send(&mut io, spoofed, 20); // not the member: NAK 5 (to a stranger)
    rig.send(&mut io, rig.frame(0, 0, 6, &pl, |_| {}), 30); // stale, its NAK suppressed
    let probe = rig.frame(1, 0, 0, &[0], |s| s.header.flags = Flags::PROBE);
    rig.send(&mut io, probe, 40); // a STATUS
    rig.send(&mut io, rig.frame(1, 4, 1, &pl, |_| {}), 10_000); // slot 1 timed out: afresh
    assert_eq!(io.sent.len(), 2 + 1 + 2 + 1, "results, resend, NAKs 7 and 5, status");

    // Collective 9.
    rig.coll = c9;
    for k in 0..3 {
        rig.send(&mut io, rig.frame(k, 0, 1, &pl, |_| {}), 50 + k as u64); // 3 results
    }
    rig.send(&mut io, rig.frame(2, 0, 1, &pl, |_| {}), 60); // a resend
    rig.send(&mut io, rig.frame(0, 0, 3, &pl, |_| {}), 200_000); // stale: NAK 7
    rig.send(&mut io, rig.frame(1, 0, 2, &pl, |_| {}), 200_001); // round 2 starts
    rig.send(&mut io, rig.frame(1, 0, 2, &pl, |_| {}), 200_002); // duplicate
    rig.send(&mut io, rig.frame(2, 0, 2, &pl, |s| s.header.version = 3), 300_000); // NAK 2
                                                                                   // An unknown collective: no collective's.
    rig.send(&mut io, rig.frame(2, 0, 2, &pl, |s| s.header.collective_id = 99), 400_000);
    assert_eq!(io.sent.len(), 6 + 3 + 1 + 1 + 1 + 1);

    let (got7, in_use7) = coll(&rig, 7);
    let want7 = CollCounters {
        folded: 4,
        completed: 1,
        results: 2,
        resends: 1,
        naks: naks(&[(NakReason::NOT_MEMBER, 1), (NakReason::STALE_ROUND, 1)]),
        naks_suppressed: 1,
        slot_timeouts: 1,
        payload_bytes: 4 * 16,
        probes: 1,
        statuses: 1,
        drops: drops(&[(Reason::GradDuplicate, 1), (Reason::GradStaleRound, 2), (Reason::GradNotMember, 1)]),
    };
    assert_eq!(got7, want7);
    assert_eq!(in_use7, 1, "slot 1's round 1, restarted after its timeout");
    let (got9, in_use9) = coll(&rig, 9);
    let want9 = CollCounters {
        folded: 4,
        completed: 1,
        results: 3,
        resends: 1,
        naks: naks(&[(NakReason::BAD_VERSION, 1), (NakReason::STALE_ROUND, 1)]),
        naks_suppressed: 0,
        slot_timeouts: 0,
        payload_bytes: 4 * 16,
        probes: 0,
        statuses: 0,
        drops: drops(&[(Reason::GradDuplicate, 1), (Reason::GradStaleRound, 1), (Reason::GradBadVersion, 1)]),
    };
    assert_eq!(got9, want9);
    assert_eq!(in_use9, 1, "round 2 in progress");

    // The sums are the global counters; the unknown collective's NAK and drop are no one's.
    let mut sum = CollCounters::default();
    sum.add(&got7);
    sum.add(&got9);
    let g = *rig.agg();
    assert_eq!(
        (sum.folded, sum.completed, sum.results, sum.resends, sum.naks_suppressed, sum.slot_timeouts),
        (g.folded, g.completed, g.results, g.resends, g.naks_suppressed, g.slot_timeouts)
    );
    assert_eq!((sum.payload_bytes, sum.probes, sum.statuses), (g.payload_bytes, g.probes, g.statuses));
    assert_eq!((sum.naks_sent(), g.naks), (4, 5));
    assert_eq!(rig.dp.counters.dropped(Reason::GradUnknownCollective), 1);
    for r in COLL_DROP_REASONS {
        assert_eq!(sum.dropped(r), rig.dp.counters.dropped(r), "{r:?}");
    }

    // The export: the same numbers under the collectives' labels, names and values in line.
    let mut names = Names::default();
    rig.dp.export(&mut names);
    let mut values = Values::default();
    rig.dp.export(&mut values);
    assert_eq!(names.0.len(), values.0.len());
    let find = |family: &str, label: Label| {
        let i = names.0.iter().position(|m| m.family == family && m.label == label);
        values.0[i.unwrap_or_else(|| panic!("no {family} {label:?}"))]
    };
    let c = |id| Label::Collective(id);
    let nak = |collective, reason| Label::CollectiveNak { collective, reason };
    let drop = |collective, reason| Label::CollectiveDrop { collective, reason };
    assert_eq!(find("agg_collective_completed_rounds", c(7)), 1);
    assert_eq!(find("agg_collective_folded_contributions", c(9)), 4);
    assert_eq!(find("agg_collective_payload_bytes", c(9)), 64);
    assert_eq!(find("agg_collective_result_packets", c(9)), 3);
    assert_eq!(find("agg_collective_resent_result_packets", c(7)), 1);
    assert_eq!(find("agg_collective_suppressed_naks", c(7)), 1);
    assert_eq!(find("agg_collective_timed_out_rounds", c(7)), 1);
    assert_eq!(find("agg_collective_probe_packets", c(7)), 1);
    assert_eq!(find("agg_collective_status_packets", c(7)), 1);
    assert_eq!(find("agg_collective_slots_in_use", c(9)), 1);
    assert_eq!(find("agg_collective_nak_packets", nak(7, NakReason::NOT_MEMBER)), 1);
    assert_eq!(find("agg_collective_nak_packets", nak(7, NakReason::BAD_VERSION)), 0);
    assert_eq!(find("agg_collective_nak_packets", nak(9, NakReason::BAD_VERSION)), 1);
    assert_eq!(find("agg_collective_dropped_packets", drop(7, Reason::GradStaleRound)), 2);
    assert_eq!(find("agg_collective_dropped_packets", drop(9, Reason::GradDuplicate)), 1);
    assert_eq!(find("agg_collective_dropped_packets", drop(7, Reason::GradNotMember)), 1);
    // 26 values per collective: 9 without a reason, 7 NAK codes, 9 drop reasons, the gauge.
    let per: Vec<usize> = [7, 9]
        .iter()
        .map(|id| {
            names.0.iter().filter(|m| matches!(m.label, Label::Collective(c) | Label::CollectiveNak { collective: c, .. } | Label::CollectiveDrop { collective: c, .. } if c == *id)).count()
        })
        .collect();
    assert_eq!(per, [26, 26]);
    assert!(names.0.iter().filter(|m| m.is_gauge()).all(|m| m.family == "agg_collective_slots_in_use"));
}

/// Collective `i` belongs to worker `i % workers`: every worker walks both collectives, in
/// config order, with zeros for the one it does not own, so a board sums them index by index.
#[test]
fn every_worker_walks_every_collective_and_only_the_owner_counts() {
    let text = two_collectives();
    let l = load_str(&text, Path::new("t.toml")).unwrap();
    let mut rigs: Vec<Rig> = (0..2u16)
        .map(|w| {
            Rig::with(&text, |c, ports| {
                Aggregator::for_worker(c, ports, crate::wire::gradient::DEFAULT_UDP_PORT, 1, w, 2)
            })
        })
        .collect();
    // Collective 9 is worker 1's: a round of it there.
    rigs[1].coll = l.collectives[1].clone();
    let mut io = VecIo::new(1);
    for k in 0..3 {
        let f = rigs[1].frame(k, 0, 1, &f32s(&[2.0; 4]), |_| {});
        rigs[1].send(&mut io, f, k as u64);
    }
    let walk = |r: &Rig| {
        let mut n = Names::default();
        r.dp.export(&mut n);
        let mut v = Values::default();
        r.dp.export(&mut v);
        (n.0, v.0)
    };
    let (n0, v0) = walk(&rigs[0]);
    let (n1, v1) = walk(&rigs[1]);
    assert_eq!(n0, n1, "the same walk on every worker");
    let at = |n: &[Metric], family: &str, id| {
        n.iter().position(|m| m.family == family && m.label == Label::Collective(id)).unwrap()
    };
    let first7 = at(&n0, "agg_collective_folded_contributions", 7);
    let first9 = at(&n0, "agg_collective_folded_contributions", 9);
    assert!(first7 < first9, "config order");
    let i = at(&n0, "agg_collective_completed_rounds", 9);
    assert_eq!((v0[i], v1[i]), (0, 1), "only the owner counts");
    let i = at(&n0, "agg_collective_folded_contributions", 9);
    assert_eq!(v0[i] + v1[i], 3);
}

/// Every collective drop reason has its own index, and the list holds each once.
#[test]
fn the_collective_drop_reasons_are_coll_drop_index_inverted() {
    for (k, r) in COLL_DROP_REASONS.iter().enumerate() {
        assert_eq!(coll_drop_index(*r), Some(k), "{r:?}");
    }
    let indexed = Reason::ALL.iter().filter(|r| coll_drop_index(**r).is_some()).count();
    assert_eq!(indexed, COLL_DROP_REASONS.len());
    assert_eq!(COLL_DROP_REASONS[0], Reason::GradFlags);
    assert_eq!(COLL_DROP_REASONS[8], Reason::GradDuplicate);
}
