//! A collective sharded over the workers (`[dataplane] shard_collectives`, [`AggContext::sharded`]):
//! chunk `k` of the `i`-th collective lives on worker `(i + k) % workers`, packets reaching
//! another worker are handed to it, and what the members receive is what one owner would have
//! sent, byte for byte: results, resends (rule 3) and STATUS answers (section 7). RoCEv2
//! collectives keep one owner (section 6's per-member PSN sequence).

use super::*;
use crate::agg::context::AggContext;
use crate::agg::swap::CollSwap;
use crate::wire::gradient::SlotState;

fn ctx(workers: u16, shard: bool) -> AggContext {
    AggContext {
        ports: vec![PortAddr { mac: APP_MAC.parse().unwrap(), ipv4: Some([10, 0, 0, 254]), ipv6: None }],
        gradient_udp_port: crate::wire::gradient::DEFAULT_UDP_PORT,
        appliance_qpn: 1,
        workers,
        shard,
        zero_copy_results: false,
    }
}

/// Worker `w`'s rig of a run of `workers` with sharding on.
fn sharded(text: &str, w: u16, workers: u16) -> Rig {
    Rig::with(text, |c, _| Aggregator::with_context(&ctx(workers, true), c, w))
}

/// Two workers and their ios: a frame received by one is processed there, and what it hands
/// off is processed by the worker it was handed to, as the workers' rings would.
struct Pair {
    rigs: Vec<Rig>,
    ios: Vec<VecIo>,
}

impl Pair {
    fn new(text: &str) -> Pair {
        Pair { rigs: (0..2).map(|w| sharded(text, w, 2)).collect(), ios: (0..2).map(|_| VecIo::new(1)).collect() }
    }

    fn receive(&mut self, w: usize, frame: Vec<u8>, now_us: u64) {
        self.rigs[w].send(&mut self.ios[w], frame, now_us);
        while let Some((to, f)) = self.ios[w].handed_off.pop() {
            assert_ne!(to as usize, w, "a worker hands off only what it does not hold");
            let to = to as usize;
            let mut b = VecBuf::from_frame(&f);
            b.timestamp_us = Some(now_us);
            self.rigs[to].dp.process_handed_off(&mut self.ios[to], 0, b, 0);
            assert!(self.ios[to].handed_off.is_empty(), "a handed-off packet is never handed on");
        }
    }

    /// Every frame sent, by the worker that sent it.
    fn sent(&self) -> Vec<(usize, Vec<u8>)> {
        self.ios.iter().enumerate().flat_map(|(w, io)| io.sent.iter().map(move |(_, f)| (w, f.clone()))).collect()
    }
}

/// Contributions, a lost result's resend, and probes of a collective of 5 chunks (the last one
/// short), received by the worker of the rank's parity: the two sharded workers send exactly
/// the frames one owner sends, each chunk's from the worker holding it, and each holds only
/// its share of the slot memory.
#[test]
fn a_sharded_collective_answers_as_one_owner_would() {
    let text = conf("sum", "f32", "udp", false, "", 3, 9, 2);
    let mut one = Rig::new(&text);
    let mut one_io = VecIo::new(1);
    let mut pair = Pair::new(&text);
    let vals = |k: usize, off: u32, round: u32| -> Vec<u8> {
        let n = (9 - off).min(2) as usize;
        f32s(&(0..n).map(|i| (k * 100 + off as usize * 10 + i) as f32 + round as f32 * 0.25).collect::<Vec<_>>())
    };
    let mut events: Vec<(usize, Vec<u8>)> = Vec::new();
    for off in (0..9).step_by(2) {
        for k in 0..3 {
            events.push((k, one.frame(k, off, 1, &vals(k, off, 1), |_| {})));
        }
    }
    // Rank 0 lost chunk 3's result: its contribution again is answered by rule 3.
    events.push((0, one.frame(0, 6, 1, &vals(0, 6, 1), |s| s.header.flags = Flags::RETRANSMIT)));
    // Round 2 of chunk 1 in progress (ranks 0 and 2), then rank 1 and rank 2 probe it.
    events.push((0, one.frame(0, 2, 2, &vals(0, 2, 2), |_| {})));
    events.push((2, one.frame(2, 2, 2, &vals(2, 2, 2), |_| {})));
    let probe = |rank: usize| one.frame(rank, 2, 0, &[0], |s| s.header.flags = Flags::PROBE);
    events.push((1, probe(1)));
    events.push((2, probe(2)));
    for (t, (k, f)) in events.into_iter().enumerate() {
        one.send(&mut one_io, f.clone(), t as u64);
        pair.receive(k % 2, f, t as u64);
    }

    let want: Vec<Vec<u8>> = one_io.sent.iter().map(|(_, f)| f.clone()).collect();
    // 5 rounds x 3 members, 1 resend, 2 STATUS answers.
    assert_eq!(want.len(), 18);
    let decoded = decode(&one_io);
    assert_eq!(decoded.iter().filter(|d| d.1.flags == Flags::RESULT | Flags::PROBE).count(), 2);
    let states: Vec<u8> = decoded.iter().filter(|d| d.1.flags & Flags::PROBE != 0).map(|d| d.1.reason).collect();
    assert_eq!(states, [SlotState::IN_PROGRESS_WITHOUT_RANK, SlotState::IN_PROGRESS_WITH_RANK]);
    let sent = pair.sent();
    let mut got: Vec<Vec<u8>> = sent.iter().map(|(_, f)| f.clone()).collect();
    let mut want_sorted = want.clone();
    got.sort();
    want_sorted.sort();
    assert_eq!(got, want_sorted, "the same frames, byte for byte");
    for (w, f) in &sent {
        let p = parse(f, crate::wire::gradient::DEFAULT_UDP_PORT).unwrap();
        let g = GradientHeader::new_checked(&f[p.l4_offset as usize + 8..]).unwrap();
        assert_eq!(
            (g.tensor_offset() / 2) as usize % 2,
            *w,
            "chunk {} sent by the worker holding it",
            g.tensor_offset() / 2
        );
    }
    // Chunks 0, 2, 4 on worker 0; 1, 3 on worker 1: each holds its share of the slots.
    let held: Vec<usize> = pair.rigs.iter().map(|r| r.dp.agg.as_ref().unwrap().colls[0].slots.len()).collect();
    assert_eq!(held, [3, 2]);
    let handed: u64 = pair.rigs.iter().map(|r| r.agg().handed_off).sum();
    assert!(handed >= 8, "contributions crossed between the workers: {handed}");
    let folded: Vec<u64> = pair.rigs.iter().map(|r| r.agg().folded).collect();
    assert_eq!(folded, [9, 6 + 2], "each worker folds its chunks' contributions");
    // The per-collective counters sum to one owner's.
    let mut sum = CollCounters::default();
    for r in &pair.rigs {
        sum.add(r.dp.agg.as_ref().unwrap().collectives().next().unwrap().1);
    }
    assert_eq!(&sum, one.dp.agg.as_ref().unwrap().collectives().next().unwrap().1);
}

/// With sharding on, the chunks of a UDP collective spread over the workers from the
/// collective's owner on, those of a RoCEv2 one stay with its owner, and with it off every
/// chunk stays with the owner.
#[test]
fn owners_by_chunk_for_udp_and_one_owner_for_rocev2() {
    for (carriage, shard, want) in
        [("udp", true, [0u16, 1, 0, 1, 0]), ("rocev2", true, [0, 0, 0, 0, 0]), ("udp", false, [0, 0, 0, 0, 0])]
    {
        let text = conf("sum", "f32", carriage, false, "", 2, 10, 2);
        let rig = Rig::with(&text, |c, _| Aggregator::with_context(&ctx(2, shard), c, 1));
        let owners: Vec<u16> = (0..5u32)
            .map(|k| {
                let f = rig.frame(0, k * 2, 1, &f32s(&[1.0, 2.0]), |_| {});
                let p = parse(&f, crate::wire::gradient::DEFAULT_UDP_PORT).unwrap();
                rig.dp.agg.as_ref().unwrap().owner(&f, &p)
            })
            .collect();
        assert_eq!(owners, want, "{carriage}, shard {shard}");
    }
    // A header cut short goes to the collective's owner, which refuses it.
    let text = conf("sum", "f32", "udp", false, "", 2, 10, 2);
    let rig = Rig::with(&text, |c, _| Aggregator::with_context(&ctx(2, true), c, 0));
    let f = rig.frame(0, 2, 1, &f32s(&[1.0, 2.0]), |_| {});
    let mut p = parse(&f, crate::wire::gradient::DEFAULT_UDP_PORT).unwrap();
    p.grad_offset = f.len() as u32 - 4;
    assert_eq!(rig.dp.agg.as_ref().unwrap().owner(&f, &p), 0);
}

/// A sharded collective kept across a runtime change keeps every worker's share: a round in
/// progress on worker 1 completes after the switch, and a collective added second (owned from
/// worker 1) has its chunk 0 there.
#[test]
fn a_kept_sharded_collective_keeps_its_shares_across_a_swap() {
    let text = conf("sum", "f32", "udp", false, "", 2, 8, 4);
    let mut pair = Pair::new(&text);
    let seven = pair.rigs[0].coll.clone();
    let eight = Collective { id: 8, ..seven.clone() };
    // Chunk 1 (offset 4) of 7: worker 1's. Rank 0 arrives on worker 0 and is handed over.
    let f = pair.rigs[0].frame(0, 4, 1, &f32s(&[1.0; 4]), |_| {});
    pair.receive(0, f, 1);
    assert_eq!(pair.rigs[1].agg().folded, 1);
    for w in 0..2u16 {
        let mut s =
            CollSwap::new(&ctx(2, true), w, &[seven.clone(), eight.clone()], &[0, 1], &[Some(0), None], 1, None);
        pair.rigs[w as usize].dp.agg.as_mut().unwrap().swap_collectives(&mut s);
    }
    let f = pair.rigs[0].frame(1, 4, 1, &f32s(&[2.0; 4]), |_| {});
    pair.receive(0, f, 2);
    let out = decode(&pair.ios[1]);
    assert_eq!(out.len(), 2, "the kept round completed on worker 1");
    assert!(out.iter().all(|o| o.2 == f32s(&[3.0; 4])));
    // Collective 8, owned from worker 1: its chunk 0 is worker 1's, its chunk 1 worker 0's.
    pair.rigs[0].coll = eight.clone();
    for (off, holder) in [(0u32, 1usize), (4, 0)] {
        let before = pair.rigs[holder].agg().folded;
        let f = pair.rigs[0].frame(0, off, 1, &f32s(&[1.0; 4]), |_| {});
        pair.receive(1 - holder, f, 3);
        assert_eq!(pair.rigs[holder].agg().folded, before + 1, "collective 8, offset {off}");
    }
}

/// While two workers disagree on a sharded collective's chunks (a change of its
/// `chunk_elements` that one has switched to and the other not yet), a contribution handed to
/// the chunk's new owner by the one view is not handed back by the other: it is dropped,
/// counted `hand_off_moved`, and the sender's retransmission finds the owner once both have
/// switched.
#[test]
fn a_packet_handed_off_across_a_change_of_chunking_is_dropped_not_bounced() {
    let text = conf("sum", "f32", "udp", false, "", 2, 8, 2);
    let mut pair = Pair::new(&text);
    let seven = pair.rigs[0].coll.clone();
    let wider = Collective { chunk_elements: 4, ..seven.clone() };
    // Worker 0 switches to chunks of 4; worker 1 has not yet.
    let mut s = CollSwap::new(&ctx(2, true), 0, std::slice::from_ref(&wider), &[0], &[None], 1, None);
    pair.rigs[0].dp.agg.as_mut().unwrap().swap_collectives(&mut s);
    pair.rigs[0].coll = wider.clone();
    // Offset 4: chunk 1 of 4 lanes for worker 0 (worker 1's), chunk 2 of 2 for worker 1 (worker 0's).
    let f = pair.rigs[0].frame(0, 4, 1, &f32s(&[1.0; 4]), |_| {});
    pair.receive(0, f, 1);
    assert_eq!(pair.rigs[0].agg().handed_off, 1);
    assert_eq!(pair.rigs[1].agg().handed_off, 0, "not handed back");
    assert_eq!(pair.rigs[1].dp.counters.dropped(Reason::HandOffMoved), 1);
    assert_eq!(pair.rigs[1].agg().folded + pair.rigs[0].agg().folded, 0);
    // Once worker 1 has switched too, the retransmission is folded by worker 1.
    let mut s = CollSwap::new(&ctx(2, true), 1, std::slice::from_ref(&wider), &[0], &[None], 1, None);
    pair.rigs[1].dp.agg.as_mut().unwrap().swap_collectives(&mut s);
    let f = pair.rigs[0].frame(0, 4, 1, &f32s(&[1.0; 4]), |s| s.header.flags = Flags::RETRANSMIT);
    pair.receive(0, f, 2);
    assert_eq!(pair.rigs[1].agg().folded, 1);
}

/// A contribution for another worker's chunk is handed over with its headers read only: its
/// UDP checksum is verified by the worker that folds it, which drops it when bad (counted
/// there, no NAK), and folds it when good.
#[test]
fn the_owner_verifies_what_it_is_handed() {
    let text = conf("sum", "f32", "udp", false, "", 2, 8, 4);
    let mut pair = Pair::new(&text);
    // Offset 4 (chunk 1) is worker 1's; it arrives on worker 0 with a corrupted payload.
    let mut f = pair.rigs[0].frame(0, 4, 1, &f32s(&[1.0; 4]), |_| {});
    let last = f.len() - 1;
    f[last] ^= 0x40;
    pair.receive(0, f, 1);
    assert_eq!(pair.rigs[0].agg().handed_off, 1, "handed over unverified");
    assert_eq!(pair.rigs[0].dp.counters.dropped(Reason::BadUdpChecksum), 0);
    assert_eq!(pair.rigs[1].dp.counters.dropped(Reason::BadUdpChecksum), 1, "the owner verifies");
    assert_eq!(pair.rigs[1].agg().folded, 0);
    assert!(pair.ios[1].sent.is_empty(), "no NAK for a bad checksum");
    let f = pair.rigs[0].frame(0, 4, 1, &f32s(&[1.0; 4]), |_| {});
    pair.receive(0, f, 2);
    assert_eq!(pair.rigs[1].agg().folded, 1);
}
