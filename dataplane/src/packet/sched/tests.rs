//! The scheduler on simulated time: shares, rates, drops and marks measured, not assumed.

use super::*;
use proptest::prelude::*;
use rand_core::{Rng, SeedableRng};
use rand_pcg::Pcg32;

const NS: u64 = 1_000_000_000;
const GBPS: u64 = 125_000_000; // 1 Gb/s in bytes/s

/// A test item: an id, its class, a length and an ECN codepoint (`None`: not IP).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pkt {
    id: u64,
    class: usize,
    len: u32,
    ecn: Option<u8>,
}

impl SchedItem for Pkt {
    fn frame_len(&self) -> u32 {
        self.len
    }
    fn mark_ce(&mut self) -> CeOutcome {
        match self.ecn {
            None => CeOutcome::NotIp,
            Some(0) => CeOutcome::NotEct,
            Some(3) => CeOutcome::AlreadyCe,
            Some(_) => {
                self.ecn = Some(3);
                CeOutcome::Marked
            }
        }
    }
}

fn class(capacity_bytes: u64, weight: u32) -> ClassConfig {
    ClassConfig { capacity_bytes, capacity_pkts: 4096, weight, red: None }
}

fn wire(len: u32) -> u64 {
    u64::from(len + FRAME_OVERHEAD)
}

/// Offers each `(class, rate bytes/s on the wire)` source from t = 0 to `end`, frames of random
/// lengths 64..=1500 (or all `fixed`), dequeuing bursts of 32 every `step` ticks; returns the
/// wire bytes each class sent with departure in `[from, end)`.
fn simulate(cfg: &PortConfig, sources: &[(usize, u64)], fixed: Option<u32>, from: u64, end: u64) -> Vec<u64> {
    let mut s: Scheduler<Pkt> = Scheduler::new(cfg).unwrap();
    let mut rng = Pcg32::seed_from_u64(99);
    let mut len_of = || fixed.unwrap_or_else(|| 64 + rng.next_u32() % 1437);
    let step = 1_000u64;
    let mut credit = vec![0u128; sources.len()];
    let mut next_len: Vec<u32> = sources.iter().map(|_| len_of()).collect();
    let mut sent = vec![0u64; cfg.classes.len()];
    let mut id = 0;
    let mut now = 0;
    while now < end {
        for (i, &(c, rate)) in sources.iter().enumerate() {
            credit[i] += u128::from(rate) * u128::from(step);
            while credit[i] >= u128::from(wire(next_len[i])) * u128::from(cfg.hz) {
                credit[i] -= u128::from(wire(next_len[i])) * u128::from(cfg.hz);
                id += 1;
                let _ = s.enqueue(c, Pkt { id, class: c, len: next_len[i], ecn: Some(2) }, now);
                next_len[i] = len_of();
            }
        }
        s.dequeue(now, 32, |d| {
            if let Dequeued::Send(p) = d {
                if now >= from {
                    sent[p.class] += wire(p.len);
                }
            }
        });
        now += step;
    }
    sent
}

fn within(got: u64, want: f64, rel: f64) -> bool {
    (got as f64 - want).abs() <= want * rel
}

/// Two classes offered 60% and 80% of a 1 Gb/s port: the high class (7) gets all of its 60%,
/// the low class (0) the remaining 40%, each within 1%, over 1 s after 0.1 s of warm-up.
#[test]
fn strict_priority_high_class_gets_its_load_low_class_the_rest() {
    let mut cfg = PortConfig::new(NS, (0..8).map(|_| class(1_000_000, 1)).collect());
    cfg.rate_bytes_per_sec = Some(GBPS);
    cfg.bucket_bytes = 16_000;
    let sent = simulate(&cfg, &[(7, GBPS * 6 / 10), (0, GBPS * 8 / 10)], None, NS / 10, NS + NS / 10);
    assert!(within(sent[7], GBPS as f64 * 0.6, 0.01), "class 7 sent {}", sent[7]);
    assert!(within(sent[0], GBPS as f64 * 0.4, 0.01), "class 0 sent {}", sent[0]);
    assert!(sent[1..7].iter().all(|&b| b == 0));
}

/// Strict priority is by class number: of two backlogged classes, 3 goes before 2, and 2 is
/// served only once 3 is empty.
#[test]
fn strict_priority_serves_the_highest_class_number_first() {
    let cfg = PortConfig::new(NS, (0..4).map(|_| class(100_000, 1)).collect());
    let mut s: Scheduler<Pkt> = Scheduler::new(&cfg).unwrap();
    for id in 0..6 {
        let c = 2 + (id % 2) as usize;
        s.enqueue(c, Pkt { id, class: c, len: 100, ecn: None }, 0).unwrap();
    }
    let mut order = Vec::new();
    assert_eq!(s.dequeue(0, 100, |d| order.push(if let Dequeued::Send(p) = d { p.id } else { 99 })), 6);
    assert_eq!(order, [1, 3, 5, 0, 2, 4]);
}

/// DWRR weights 1:3 and 1:2:5, every class backlogged with frames of 64..1500 bytes: each class's
/// share of the wire bytes is within 2% of its weight's share.
#[test]
fn dwrr_shares_follow_the_weights() {
    for weights in [&[1u32, 3][..], &[1, 2, 5]] {
        let mut cfg = PortConfig::new(NS, weights.iter().map(|&w| class(1_000_000, w)).collect());
        cfg.policy = Policy::Dwrr;
        cfg.rate_bytes_per_sec = Some(GBPS);
        cfg.bucket_bytes = 16_000;
        let sources: Vec<(usize, u64)> = (0..weights.len()).map(|c| (c, GBPS)).collect();
        let sent = simulate(&cfg, &sources, None, NS / 10, NS + NS / 10);
        let total: u64 = sent.iter().sum();
        assert!(within(total, GBPS as f64, 0.01), "the port is busy: {total}");
        let wsum: u32 = weights.iter().sum();
        for (c, &w) in weights.iter().enumerate() {
            let want = total as f64 * f64::from(w) / f64::from(wsum);
            assert!(within(sent[c], want, 0.02), "weights {weights:?} class {c}: {} vs {want}", sent[c]);
        }
    }
}

/// A DWRR class offered less than its share gets all of it; the others split the rest by weight.
#[test]
fn dwrr_gives_an_underloaded_class_its_load() {
    let mut cfg = PortConfig::new(NS, [1u32, 1, 2].iter().map(|&w| class(1_000_000, w)).collect());
    cfg.policy = Policy::Dwrr;
    cfg.rate_bytes_per_sec = Some(GBPS);
    cfg.bucket_bytes = 16_000;
    let sent = simulate(&cfg, &[(0, GBPS / 10), (1, GBPS), (2, GBPS)], None, NS / 10, NS + NS / 10);
    assert!(within(sent[0], GBPS as f64 * 0.1, 0.01), "{sent:?}");
    assert!(within(sent[1], GBPS as f64 * 0.3, 0.02), "{sent:?}");
    assert!(within(sent[2], GBPS as f64 * 0.6, 0.02), "{sent:?}");
}

/// Over 1 s of virtual time a backlogged port sends its rate plus the initial full bucket, in
/// wire bytes (frame + 24), within one frame; at a 1 GHz clock and at a TSC-like 2.1 GHz one,
/// with rates that do not divide the clock.
#[test]
fn shaper_sends_exactly_the_rate() {
    for (hz, rate, len) in [(NS, GBPS, 1000u32), (2_100_000_000, 1_234_567, 64), (2_100_000_000, 3_333_333_333, 1514)] {
        let mut cfg = PortConfig::new(hz, vec![ClassConfig { capacity_pkts: 1 << 16, ..class(1 << 30, 1) }]);
        cfg.rate_bytes_per_sec = Some(rate);
        cfg.bucket_bytes = 4 * wire(1514);
        let mut s: Scheduler<Pkt> = Scheduler::new(&cfg).unwrap();
        let mut id = 0;
        let mut now = 0;
        let mut bytes = 0u64;
        loop {
            while s.depth(0).pkts < 1000 {
                id += 1;
                s.enqueue(0, Pkt { id, class: 0, len, ecn: None }, now).unwrap();
            }
            let t = s.next_departure(now).unwrap();
            if t > hz {
                break;
            }
            now = t;
            let n = s.dequeue(now, 32, |d| {
                if let Dequeued::Send(p) = d {
                    bytes += wire(p.len);
                }
            });
            assert!(n >= 1, "next_departure promised a packet at {now}");
        }
        let want = rate + cfg.bucket_bytes;
        assert!(bytes <= want && want - bytes < wire(len), "hz {hz} rate {rate}: sent {bytes}, want {want}");
    }
}

/// A class holds frames up to its byte capacity; the next is given back as a tail drop with its
/// bytes counted, and the packet capacity bounds it the same way. The ring never grows.
#[test]
fn tail_drop_at_the_byte_and_packet_capacity() {
    let cfg = PortConfig::new(
        NS,
        vec![
            ClassConfig { capacity_pkts: 64, ..class(10_000, 1) },
            ClassConfig { capacity_pkts: 4, ..class(1 << 20, 1) },
        ],
    );
    let mut s: Scheduler<Pkt> = Scheduler::new(&cfg).unwrap();
    let ring = s.classes[0].queue.ring_capacity();
    for id in 0..10 {
        s.enqueue(0, Pkt { id, class: 0, len: 1000, ecn: None }, 0).unwrap();
    }
    let r = s.enqueue(0, Pkt { id: 10, class: 0, len: 1, ecn: None }, 0).unwrap_err();
    assert_eq!((r.item.id, r.reason), (10, Reason::TailDrop));
    assert_eq!(s.depth(0), PktBytes { pkts: 10, bytes: 10_000 });
    assert_eq!(s.counters(0).tail_drop, PktBytes { pkts: 1, bytes: 1 });
    assert_eq!(s.counters(0).enqueued, PktBytes { pkts: 10, bytes: 10_000 });
    assert_eq!(s.counters(0).max_depth_bytes, 10_000);
    // One out, one 1000-byte frame fits again, a 1001-byte one does not.
    assert_eq!(s.dequeue(0, 1, |_| {}), 1);
    assert_eq!(s.enqueue(0, Pkt { id: 11, class: 0, len: 1001, ecn: None }, 0).unwrap_err().reason, Reason::TailDrop);
    s.enqueue(0, Pkt { id: 12, class: 0, len: 1000, ecn: None }, 0).unwrap();
    for id in 0..4 {
        s.enqueue(1, Pkt { id, class: 1, len: 64, ecn: None }, 0).unwrap();
    }
    assert_eq!(s.enqueue(1, Pkt { id: 4, class: 1, len: 64, ecn: None }, 0).unwrap_err().reason, Reason::TailDrop);
    assert_eq!(s.classes[0].queue.ring_capacity(), ring);
    assert!(ring >= 64);
    // Unknown class and oversize are counted per port.
    assert_eq!(s.enqueue(2, Pkt { id: 5, class: 2, len: 64, ecn: None }, 0).unwrap_err().reason, Reason::UnknownClass);
    assert_eq!(
        s.enqueue(1, Pkt { id: 6, class: 1, len: 1515, ecn: None }, 0).unwrap_err().reason,
        Reason::EgressOversize
    );
    assert_eq!(s.port_counters().unknown_class, PktBytes { pkts: 1, bytes: 64 });
    assert_eq!(s.port_counters().oversize, PktBytes { pkts: 1, bytes: 1515 });
}

fn red_cfg(mark_point: MarkPoint) -> PortConfig {
    let red = RedConfig { kmin_bytes: 20_000, kmax_bytes: 60_000, pmax: P_ONE / 4, ewma_log2: 0 };
    let mut cfg = PortConfig::new(NS, vec![ClassConfig { red: Some(red), capacity_pkts: 1024, ..class(1 << 20, 1) }]);
    cfg.mark_point = mark_point;
    cfg.seed = 5;
    cfg
}

/// Marking at enqueue on the instantaneous depth: nothing while the depth is below Kmin; every
/// ECT packet (and the CE one) at or above Kmax is CE, a Not-ECT one is a red_drop and a non-IP
/// one too; none is marked.
#[test]
fn red_at_enqueue_below_kmin_and_above_kmax() {
    let mut s: Scheduler<Pkt> = Scheduler::new(&red_cfg(MarkPoint::Enqueue)).unwrap();
    // 20 frames of 1000 bytes: each arrives at a depth of 0..19000 bytes, below Kmin.
    for id in 0..20 {
        s.enqueue(0, Pkt { id, class: 0, len: 1000, ecn: Some(2) }, 0).unwrap();
    }
    assert_eq!(s.counters(0).ecn_marked.pkts, 0);
    // Raise the depth to 60000 bytes without RED deciding anything that matters for the check.
    let mut id = 20;
    while s.depth(0).bytes < 60_000 {
        id += 1;
        let _ = s.enqueue(0, Pkt { id, class: 0, len: 1000, ecn: Some(1) }, 0);
    }
    let before = s.counters(0);
    let mut got = Vec::new();
    for (i, ecn) in [Some(2), Some(1), Some(3), Some(0), None, Some(2)].into_iter().enumerate() {
        id += 1;
        match s.enqueue(0, Pkt { id, class: 0, len: 100, ecn }, 0) {
            Ok(()) => got.push((i, "queued")),
            Err(r) => {
                assert_eq!(r.item.ecn, ecn, "a dropped packet is not marked");
                got.push((i, r.reason.name()));
            }
        }
    }
    assert_eq!(got, [(0, "queued"), (1, "queued"), (2, "queued"), (3, "red_drop"), (4, "red_drop"), (5, "queued")]);
    let after = s.counters(0);
    assert_eq!(after.ecn_marked.pkts - before.ecn_marked.pkts, 4);
    assert_eq!(after.red_drop.pkts - before.red_drop.pkts, 2);
    // The four queued ones carry CE.
    let mut tail = Vec::new();
    s.dequeue(0, 1000, |d| {
        if let Dequeued::Send(p) = d {
            tail.push(p)
        }
    });
    assert!(tail[tail.len() - 4..].iter().all(|p| p.ecn == Some(3)));
    assert!(tail[..20].iter().all(|p| p.ecn == Some(2)));
}

/// Between Kmin and Kmax, with the depth held at q (one arrival, one departure), the marked
/// fraction of a seeded run is within 3 sigma of Pmax × (q − Kmin) / (Kmax − Kmin).
#[test]
fn red_between_the_thresholds_marks_the_ramp_fraction() {
    for q in [25_000u64, 40_000, 55_000] {
        let mut s: Scheduler<Pkt> = Scheduler::new(&red_cfg(MarkPoint::Enqueue)).unwrap();
        let mut id = 0;
        while s.depth(0).bytes < q {
            id += 1;
            s.enqueue(0, Pkt { id, class: 0, len: 1000, ecn: None }, 0).ok();
        }
        assert_eq!(s.depth(0).bytes, q);
        let base = s.counters(0).ecn_marked.pkts;
        let n = 100_000u64;
        for _ in 0..n {
            id += 1;
            s.enqueue(0, Pkt { id, class: 0, len: 1000, ecn: Some(2) }, 0).unwrap();
            assert_eq!(s.dequeue(0, 1, |_| {}), 1);
        }
        let marked = (s.counters(0).ecn_marked.pkts - base) as f64;
        let p = 0.25 * (q - 20_000) as f64 / 40_000.0;
        let (mean, sigma) = (n as f64 * p, (n as f64 * p * (1.0 - p)).sqrt());
        assert!((marked - mean).abs() <= 3.0 * sigma, "q={q}: {marked} marked, want {mean} ± {}", 3.0 * sigma);
    }
}

/// Marking at dequeue: the depth left behind the departing packet decides; a selected Not-ECT
/// packet comes out as a drop (not charged to the budget's sends), ECT ones leave with CE.
#[test]
fn red_at_dequeue_marks_on_the_depth_behind() {
    let mut s: Scheduler<Pkt> = Scheduler::new(&red_cfg(MarkPoint::Dequeue)).unwrap();
    // 70 frames of 1000 bytes, all admitted: no marking at enqueue.
    for id in 0..70 {
        let ecn = if id % 7 == 3 { Some(0) } else { Some(2) };
        s.enqueue(0, Pkt { id, class: 0, len: 1000, ecn }, 0).unwrap();
    }
    assert_eq!(s.counters(0).ecn_marked.pkts, 0);
    let mut out = Vec::new();
    s.dequeue(0, 1000, |d| out.push(d));
    assert_eq!(out.len(), 70);
    for (i, d) in out.iter().enumerate() {
        let behind = (69 - i as u64) * 1000;
        match d {
            // At or above Kmax behind: every one is selected.
            Dequeued::Send(p) if behind >= 60_000 => assert_eq!(p.ecn, Some(3), "{i}"),
            Dequeued::Drop(p, Reason::RedDrop) => {
                assert!(behind >= 20_000, "{i}: dropped below Kmin");
                assert_eq!(p.ecn, Some(0))
            }
            Dequeued::Send(p) if behind < 20_000 => assert_eq!(p.ecn, if p.id % 7 == 3 { Some(0) } else { Some(2) }),
            Dequeued::Send(_) => {}
            Dequeued::Drop(..) => panic!("{i}: only red drops at dequeue"),
        }
    }
    let c = s.counters(0);
    assert_eq!(c.enqueued.pkts, c.sent.pkts + c.red_drop.pkts);
    assert!(c.ecn_marked.pkts >= 9, "the 10 at or above Kmax, less any Not-ECT: {}", c.ecn_marked.pkts);
}

/// `next_departure` drains every queue of a shaped port to empty, under both policies, with
/// every dequeue at the promised time handing out at least one packet.
#[test]
fn next_departure_drains_every_queue() {
    for policy in [Policy::StrictPriority, Policy::Dwrr] {
        let mut cfg = PortConfig::new(NS, (0..8).map(|c| class(1 << 20, c + 1)).collect());
        cfg.policy = policy;
        cfg.rate_bytes_per_sec = Some(GBPS / 100);
        cfg.bucket_bytes = wire(1514);
        let mut s: Scheduler<Pkt> = Scheduler::new(&cfg).unwrap();
        let mut id = 0;
        for c in 0..8 {
            for k in 0..50 {
                id += 1;
                s.enqueue(c, Pkt { id, class: c, len: 64 + (k * 29 % 1450), ecn: None }, 0).unwrap();
            }
        }
        let mut now = 0;
        let mut sent = 0;
        let mut bytes = 0;
        while let Some(t) = s.next_departure(now) {
            assert!(t >= now);
            now = t;
            let n = s.dequeue(now, 32, |d| {
                if let Dequeued::Send(p) = d {
                    bytes += wire(p.len);
                }
            });
            assert!(n >= 1, "{policy:?}: nothing left at {now}");
            sent += n;
        }
        assert_eq!(sent, 400);
        assert!(s.is_empty() && (0..8).all(|c| s.depth(c).pkts == 0));
        // The drain took the time the bytes take at the rate, less the initial bucket.
        let want = (bytes - cfg.bucket_bytes) as f64 / (GBPS / 100) as f64 * NS as f64;
        assert!((now as f64 - want).abs() <= wire(1514) as f64 / (GBPS / 100) as f64 * NS as f64, "{now} vs {want}");
    }
}

/// Histograms: one depth sample per arrival (the depth it found) and one sojourn per departure.
#[test]
fn histograms_record_depth_and_sojourn() {
    let mut cfg = PortConfig::new(NS, vec![class(1 << 20, 1)]);
    cfg.histograms = true;
    let mut s: Scheduler<Pkt> = Scheduler::new(&cfg).unwrap();
    for id in 0..10 {
        s.enqueue(0, Pkt { id, class: 0, len: 1000, ecn: None }, id * 100).unwrap();
    }
    s.dequeue(50_000, 10, |_| {});
    let h = s.histograms(0).unwrap();
    assert_eq!(h.depth_bytes.len(), 10);
    assert!(h.depth_bytes.equivalent(h.depth_bytes.max(), 9000));
    assert_eq!(h.depth_bytes.min(), 0);
    assert_eq!(h.sojourn_ticks.len(), 10);
    assert!(h.sojourn_ticks.equivalent(h.sojourn_ticks.max(), 50_000));
    assert!(h.sojourn_ticks.equivalent(h.sojourn_ticks.min(), 49_100));
    // Sojourns of minutes (a very slow shaper) are told apart up to a day, then read as a day.
    let mut s: Scheduler<Pkt> = Scheduler::new(&cfg).unwrap();
    for id in 0..3 {
        s.enqueue(0, Pkt { id, class: 0, len: 1000, ecn: None }, 0).unwrap();
    }
    s.dequeue(82 * NS, 1, |_| {});
    s.dequeue(3_600 * NS, 1, |_| {});
    s.dequeue(2 * MAX_SOJOURN_S * NS, 1, |_| {});
    let h = s.histograms(0).unwrap();
    let got: Vec<u64> =
        h.sojourn_ticks.iter_recorded().map(|v| h.sojourn_ticks.highest_equivalent(v.value_iterated_to())).collect();
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(h.sojourn_ticks.equivalent(got[0], 82 * NS) && h.sojourn_ticks.equivalent(got[1], 3_600 * NS), "{got:?}");
    assert!(h.sojourn_ticks.equivalent(got[2], MAX_SOJOURN_S * NS), "{got:?}");
}

/// Real frames through `Scheduler<VecBuf>`: RED at or above Kmax sets CE in the bytes (IPv4
/// checksum valid), and drops the Not-ECT frame.
#[test]
fn packet_buffers_are_marked_in_their_bytes() {
    use crate::buf::PacketBuf;
    use crate::buf::VecBuf;
    let frames = crate::testing::case_frames("c06_ecn_codepoints.pcap");
    let red = RedConfig { kmin_bytes: 0, kmax_bytes: 0, pmax: 0, ewma_log2: 0 };
    let cfg = PortConfig::new(NS, vec![ClassConfig { red: Some(red), ..class(1 << 20, 1) }]);
    let mut s: Scheduler<VecBuf> = Scheduler::new(&cfg).unwrap();
    let mut dropped = 0;
    for f in &frames {
        match s.enqueue(0, VecBuf::from_frame(f), 0) {
            Ok(()) => {}
            Err(r) => {
                assert_eq!(r.reason, Reason::RedDrop);
                assert_eq!(r.item.data()[15] & 3, 0);
                dropped += 1;
            }
        }
    }
    assert_eq!(dropped, frames.iter().filter(|f| f[15] & 3 == 0).count());
    s.dequeue(0, 100, |d| {
        let Dequeued::Send(b) = d else { panic!("no drop at dequeue") };
        assert_eq!(b.data()[15] & 3, 3);
        assert!(crate::parse::parse(b.data(), crate::wire::gradient::DEFAULT_UDP_PORT).is_ok());
    });
}

#[derive(Debug, Clone)]
enum Op {
    Enqueue { class: usize, len: u32, ecn: Option<u8> },
    Dequeue { advance: u64, budget: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0usize..4, 40u32..1600, prop::option::of(0u8..4)).prop_map(|(class, len, ecn)| Op::Enqueue { class, len, ecn }),
        1 => (0u64..200_000, 0usize..8).prop_map(|(advance, budget)| Op::Dequeue { advance, budget }),
    ]
}

/// Offered (to an existing class, not oversize) = enqueued + tail_drop (+ red_drop at enqueue),
/// and enqueued = sent + depth (+ red_drop at dequeue), in packets and in bytes.
fn balance(s: &Scheduler<Pkt>, offered: &[PktBytes; 3], at_dequeue: bool) -> Result<(), TestCaseError> {
    for (c, off) in offered.iter().enumerate() {
        let k = s.counters(c);
        let d = s.depth(c);
        let sum = |xs: &[PktBytes]| PktBytes {
            pkts: xs.iter().map(|x| x.pkts).sum(),
            bytes: xs.iter().map(|x| x.bytes).sum(),
        };
        if at_dequeue {
            prop_assert_eq!(*off, sum(&[k.enqueued, k.tail_drop]), "class {}", c);
            prop_assert_eq!(k.enqueued, sum(&[k.sent, k.red_drop, d]), "class {}", c);
        } else {
            prop_assert_eq!(*off, sum(&[k.enqueued, k.tail_drop, k.red_drop]), "class {}", c);
            prop_assert_eq!(k.enqueued, sum(&[k.sent, d]), "class {}", c);
        }
        prop_assert!(k.ecn_marked.pkts <= k.enqueued.pkts);
    }
    Ok(())
}

/// Notes that item `id` came out (`what`: sent or the drop reason); twice is a failure.
fn record(seen: &mut std::collections::HashMap<u64, &'static str>, id: u64, what: &'static str) {
    if let Some(before) = seen.insert(id, what) {
        panic!("item {id} came out twice: {before}, then {what}");
    }
}

/// The random tests' port: three classes of 12,000 bytes and 16 packets, weights 1, 2 and 3,
/// RED (from `kmin` to 8,000 bytes, Pmax 1/2, an EWMA weight from `seed`) on classes 0 and 2;
/// DWRR or strict priority, marking at dequeue or enqueue, shaped at 100 Mbit/s or not.
fn random_port(kmin: u64, dwrr: bool, at_dequeue: bool, shaped: bool, seed: u64) -> PortConfig {
    let red = RedConfig { kmin_bytes: kmin, kmax_bytes: 8_000, pmax: P_ONE / 2, ewma_log2: (seed % 4) as u8 };
    let classes: Vec<ClassConfig> = (0..3u32)
        .map(|c| ClassConfig { capacity_bytes: 12_000, capacity_pkts: 16, weight: c + 1, red: (c != 1).then_some(red) })
        .collect();
    let mut cfg = PortConfig::new(NS, classes);
    cfg.policy = if dwrr { Policy::Dwrr } else { Policy::StrictPriority };
    cfg.mark_point = if at_dequeue { MarkPoint::Dequeue } else { MarkPoint::Enqueue };
    cfg.rate_bytes_per_sec = shaped.then_some(GBPS / 10);
    cfg.seed = seed;
    cfg
}

proptest! {
    /// Random enqueues and dequeues (with a final drain): every item comes out exactly once,
    /// sent or given back dropped, and every class's packet and byte counters balance.
    #[test]
    fn every_item_comes_out_once_and_counters_balance(
        ops in prop::collection::vec(op(), 0..400),
        dwrr in any::<bool>(),
        at_dequeue in any::<bool>(),
        shaped in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let cfg = random_port(2_000, dwrr, at_dequeue, shaped, seed);
        let mut s: Scheduler<Pkt> = Scheduler::new(&cfg).unwrap();
        let mut seen = std::collections::HashMap::new();
        let mut offered = [PktBytes::default(); 3];
        let (mut unknown, mut oversize) = (PktBytes::default(), PktBytes::default());
        let mut now = 0u64;
        for (id, o) in ops.iter().enumerate() {
            let id = id as u64;
            match *o {
                Op::Enqueue { class, len, ecn } => {
                    if class == 3 {
                        unknown.add(len);
                    } else if len > 1514 {
                        oversize.add(len);
                    } else {
                        offered[class].add(len);
                    }
                    if let Err(r) = s.enqueue(class, Pkt { id, class, len, ecn }, now) {
                        prop_assert_eq!(r.item.id, id);
                        record(&mut seen, id, r.reason.name());
                    }
                }
                Op::Dequeue { advance, budget } => {
                    now += advance;
                    let mut handed = 0;
                    s.dequeue(now, budget, |d| {
                        handed += 1;
                        match d {
                            Dequeued::Send(p) => record(&mut seen, p.id, "sent"),
                            Dequeued::Drop(p, r) => record(&mut seen, p.id, r.name()),
                        }
                    });
                    prop_assert!(handed <= budget);
                }
            }
        }
        balance(&s, &offered, at_dequeue)?;
        // Drain.
        while let Some(t) = s.next_departure(now) {
            now = t;
            let mut handed = 0;
            s.dequeue(now, 8, |d| {
                handed += 1;
                match d {
                    Dequeued::Send(p) => record(&mut seen, p.id, "sent"),
                    Dequeued::Drop(p, r) => record(&mut seen, p.id, r.name()),
                }
            });
            prop_assert!(handed >= 1, "next_departure promised an item at {}", now);
        }
        prop_assert!(s.is_empty());
        balance(&s, &offered, at_dequeue)?;
        prop_assert_eq!(s.port_counters().unknown_class, unknown);
        prop_assert_eq!(s.port_counters().oversize, oversize);
        prop_assert_eq!(seen.values().filter(|&&w| w == "sent").count() as u64, (0..3).map(|c| s.counters(c).sent.pkts).sum::<u64>());
        prop_assert_eq!(seen.len(), ops.iter().filter(|o| matches!(o, Op::Enqueue { .. })).count());
    }
}

proptest! {
    /// `offer` (an idle port sends at once) against `enqueue` then `dequeue` at the same
    /// instant, the round trip through the queue it stands for: the same items leave in the
    /// same order with the same ECN, the same refusals, and every counter and histogram equal,
    /// over random traffic on every policy, marking point and shaper setting.
    #[test]
    fn offer_is_the_queue_round_trip(
        ops in prop::collection::vec(op(), 0..400),
        dwrr in any::<bool>(),
        at_dequeue in any::<bool>(),
        shaped in any::<bool>(),
        small_quantum in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let mut cfg = random_port(0, dwrr, at_dequeue, shaped, seed);
        if small_quantum {
            cfg.dwrr_quantum_bytes = 100;
        }
        cfg.histograms = true;
        let mut a: Scheduler<Pkt> = Scheduler::new(&cfg).unwrap();
        let mut b: Scheduler<Pkt> = Scheduler::new(&cfg).unwrap();
        let (mut out_a, mut out_b) = (Vec::new(), Vec::new());
        let mut now = 0u64;
        for (id, o) in ops.iter().enumerate() {
            let id = id as u64;
            match *o {
                Op::Enqueue { class, len, ecn } => {
                    let p = Pkt { id, class, len, ecn };
                    match a.offer(class, p.clone(), now) {
                        Ok(Offer::Sent(p)) => out_a.push((now, p, "sent")),
                        Ok(Offer::Queued) => {}
                        Err(r) => out_a.push((now, r.item, r.reason.name())),
                    }
                    a.dequeue(now, usize::MAX, |d| match d {
                        Dequeued::Send(p) => out_a.push((now, p, "sent")),
                        Dequeued::Drop(p, r) => out_a.push((now, p, r.name())),
                    });
                    if let Err(r) = b.enqueue(class, p, now) {
                        out_b.push((now, r.item, r.reason.name()));
                    }
                    b.dequeue(now, usize::MAX, |d| match d {
                        Dequeued::Send(p) => out_b.push((now, p, "sent")),
                        Dequeued::Drop(p, r) => out_b.push((now, p, r.name())),
                    });
                }
                Op::Dequeue { advance, budget } => {
                    now += advance;
                    for (s, out) in [(&mut a, &mut out_a), (&mut b, &mut out_b)] {
                        s.dequeue(now, budget, |d| match d {
                            Dequeued::Send(p) => out.push((now, p, "sent")),
                            Dequeued::Drop(p, r) => out.push((now, p, r.name())),
                        });
                    }
                }
            }
        }
        for (s, out) in [(&mut a, &mut out_a), (&mut b, &mut out_b)] {
            let mut t = now;
            while let Some(d) = s.next_departure(t) {
                t = d;
                s.dequeue(t, 8, |d| match d {
                    Dequeued::Send(p) => out.push((t, p, "sent")),
                    Dequeued::Drop(p, r) => out.push((t, p, r.name())),
                });
            }
        }
        prop_assert_eq!(&out_a, &out_b);
        prop_assert_eq!(a.port_counters(), b.port_counters());
        for c in 0..3 {
            prop_assert_eq!(a.counters(c), b.counters(c), "class {}", c);
            let (ha, hb) = (a.histograms(c).unwrap(), b.histograms(c).unwrap());
            prop_assert!(ha.depth_bytes == hb.depth_bytes, "class {}: depth histograms", c);
            prop_assert!(ha.sojourn_ticks == hb.sojourn_ticks, "class {}: sojourn histograms", c);
        }
    }
}
