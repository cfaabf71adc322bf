//! Allreduce through the fake appliance: exact results, loss, NAKs, rejoin, rounds, deadlines,
//! and the PROBEs of revision 1.1 (a restarted worker's round, a stalled call's diagnosis).

mod fake;

use fake::{Fake, Faults, Seen};
use gradclient::half::bf16;
use gradclient::{Client, ClientStats, Collective, Dtype, Element, Endpoint, Error, Op, Options};
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

const ID: u16 = 9;
/// 16 chunks of 64 elements, the last one 40.
const TENSOR: u64 = 1000;
const CHUNK: u32 = 64;

fn collective(dtype: Dtype, workers: u16, rank: u16) -> Collective {
    Collective {
        collective_id: ID,
        op: Op::Sum,
        dtype,
        tensor_elements: TENSOR,
        chunk_elements: CHUNK,
        num_workers: workers,
        rank,
    }
}

fn client(appliance: SocketAddr, c: Collective, opts: Options) -> Client {
    let ep = Endpoint { bind: "127.0.0.1:0".parse().unwrap(), appliance };
    Client::new(c, ep, opts).unwrap()
}

fn fast() -> Options {
    Options {
        initial_rto: Duration::from_millis(10),
        max_rto: Duration::from_millis(80),
        deadline: Duration::from_secs(3),
        ..Options::default()
    }
}

/// Both ranks allreduce their input through `fake` in `calls` successive calls (the same input
/// each time); returns each rank's buffer and counters.
fn run2<E: Element + Send + Sync>(
    fake: &Fake,
    dtype: Dtype,
    inputs: [&[E]; 2],
    opts: Options,
    calls: u32,
) -> Vec<(Vec<E>, ClientStats)> {
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..2u16)
            .map(|rank| {
                let input = inputs[rank as usize];
                let addr = fake.addr;
                s.spawn(move || {
                    let mut c = client(addr, collective(dtype, 2, rank), opts);
                    let mut data = input.to_vec();
                    for _ in 0..calls {
                        data.copy_from_slice(input);
                        c.allreduce(&mut data).unwrap();
                    }
                    (data, c.stats().clone())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn f32_inputs() -> [Vec<f32>; 2] {
    [(0..TENSOR).map(|i| i as f32 * 0.5 + 0.1).collect(), (0..TENSOR).map(|i| 1.0 - i as f32 * 0.25).collect()]
}

#[test]
fn f32_two_workers_exact() {
    let fake = Fake::start(ID, 2, Dtype::F32, Faults::default());
    let [a, b] = f32_inputs();
    let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    let out = run2(&fake, Dtype::F32, [&a, &b], fast(), 1);
    for (data, stats) in &out {
        assert_eq!(
            data.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            want.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        );
        assert_eq!((stats.chunks, stats.results, stats.naks, stats.rejoins), (16, 16, 0, 0));
        // A PROBE per chunk before the first call (more when a timer fired first on a loaded
        // machine), each answered (no history: round 0).
        assert!(stats.probes >= 16 && stats.statuses >= 16 && stats.statuses <= stats.probes, "{stats:?}");
    }
    assert_eq!(fake.probes().len() as u64, out.iter().map(|(_, s)| s.probes).sum::<u64>());
    assert!(fake.seen().iter().all(|x| x.round == 0));
    // Every chunk went out with its length in bytes, the short last one (40 elements) too.
    for x in fake.seen() {
        assert_eq!(x.data_length, if x.offset == 960 { 160 } else { 256 }, "{x:?}");
    }
}

/// UDP segmentation offload on (runs of full chunks as `UDP_SEGMENT` messages, cut back into
/// the same datagrams before the appliance reads them) and off give the same bits, the same
/// datagrams at the appliance, and fewer messages than datagrams only when on.
#[test]
fn segmentation_offload_on_and_off_give_the_same_results() {
    let [a, b] = f32_inputs();
    let mut outs = Vec::new();
    for gso in [true, false] {
        let fake = Fake::start(ID, 2, Dtype::F32, Faults::default());
        let out = run2(&fake, Dtype::F32, [&a, &b], Options { gso, ..fast() }, 3);
        for (_, stats) in &out {
            assert_eq!(stats.results, 3 * 16, "{stats:?}");
            if gso {
                assert!(stats.gso_sends > 0, "{stats:?}");
            } else {
                assert_eq!(stats.gso_sends, 0, "{stats:?}");
            }
        }
        // Every contribution reached the appliance as its own datagram, full chunks 256 bytes.
        assert!(fake.seen().iter().all(|x| x.data_length == if x.offset == 960 { 160 } else { 256 }));
        assert!(fake.seen().len() >= 2 * 3 * 16);
        outs.push(out.into_iter().map(|(d, _)| d.iter().map(|x| x.to_bits()).collect::<Vec<_>>()).collect::<Vec<_>>());
    }
    assert_eq!(outs[0], outs[1]);
}

/// UDP receive offload: results sent in runs (as a device's GRO would hand them over) reach a
/// client with `gro` as coalesced messages and one without it as single datagrams; the bits are
/// the same either way.
#[test]
fn receive_offload_on_and_off_give_the_same_results() {
    let [a, b] = f32_inputs();
    let mut outs = Vec::new();
    for gro in [true, false] {
        let fake = Fake::start(ID, 2, Dtype::F32, Faults { coalesce_results: true, ..Faults::default() });
        let out = run2(&fake, Dtype::F32, [&a, &b], Options { gro, ..fast() }, 3);
        for (_, stats) in &out {
            assert_eq!(stats.results, 3 * 16, "{stats:?}");
            if gro {
                assert!(stats.gro_recvs > 0, "{stats:?}");
            } else {
                assert_eq!(stats.gro_recvs, 0, "{stats:?}");
            }
        }
        outs.push(out.into_iter().map(|(d, _)| d.iter().map(|x| x.to_bits()).collect::<Vec<_>>()).collect::<Vec<_>>());
    }
    let want: Vec<u32> = a.iter().zip(&b).map(|(x, y)| (x + y).to_bits()).collect();
    assert_eq!(outs[0], vec![want.clone(), want]);
    assert_eq!(outs[0], outs[1]);
}

#[test]
fn a_range_reduces_only_its_chunks_padded_and_batched() {
    let fake = Fake::start(ID, 2, Dtype::F32, Faults::default());
    let [a, b] = f32_inputs();
    // Elements [128, 428): chunks 2 to 8 (offsets 128..=384), the last one padded with zeros.
    let (offset, len) = (128usize, 300usize);
    let out: Vec<(Vec<u8>, ClientStats, Vec<u32>)> = std::thread::scope(|s| {
        let hs: Vec<_> = [&a, &b]
            .into_iter()
            .enumerate()
            .map(|(rank, input)| {
                let addr = fake.addr;
                s.spawn(move || {
                    let opts = Options { window: 4, ..fast() };
                    let mut c = client(addr, collective(Dtype::F32, 2, rank as u16), opts);
                    let mut raw: Vec<u8> = input[offset..offset + len].iter().flat_map(|x| x.to_le_bytes()).collect();
                    c.allreduce_range_bytes(&mut raw, offset as u64).unwrap();
                    (raw, c.stats().clone(), c.rounds().to_vec())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let want: Vec<u8> = (offset..offset + len).flat_map(|i| (a[i] + b[i]).to_le_bytes()).collect();
    for (raw, stats, rounds) in &out {
        assert_eq!(raw, &want);
        assert_eq!((stats.chunks, stats.results, stats.sent), (5, 5, 5), "{stats:?}");
        // Only the range's chunks moved to round 1.
        let moved: Vec<usize> = (0..rounds.len()).filter(|&i| rounds[i] == 1).collect();
        assert_eq!(moved, vec![2, 3, 4, 5, 6], "{rounds:?}");
        // 16 PROBEs and 5 contributions, a window (4) per sendmmsg at most.
        assert!(stats.send_calls < stats.sent + stats.probes, "{stats:?}");
    }
    // The padding went out as zeros: chunk 6 (elements 384..448) holds 44 elements of the range.
    let last: Vec<_> = fake.seen().into_iter().filter(|x| x.offset == 384).collect();
    assert_eq!(last.len(), 2);
    assert!(last.iter().all(|x| x.data_length == 256));
}

#[test]
fn a_range_off_the_chunk_grid_or_past_the_tensor_is_refused() {
    let fake = Fake::start(ID, 1, Dtype::F32, Faults::default());
    let mut c = client(fake.addr, collective(Dtype::F32, 1, 0), fast());
    let e = c.allreduce_range_bytes(&mut [0u8; 8], 10).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid collective or options: offset 10 is not a multiple of chunk_elements = 64 (spec section 4 rule 5)"
    );
    let e = c.allreduce_range_bytes(&mut vec![0u8; 4 * 100], 960).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid collective or options: elements [960, 1060) run past tensor_elements = 1000 of collective 9"
    );
    assert_eq!(c.stats().sent + c.stats().probes, 0);
}

#[test]
fn bf16_two_workers_exact() {
    let fake = Fake::start(ID, 2, Dtype::Bf16, Faults::default());
    let a: Vec<bf16> = (0..TENSOR).map(|i| bf16::from_f32(i as f32 * 1.5 - 300.0)).collect();
    let b: Vec<bf16> = (0..TENSOR).map(|i| bf16::from_f32(0.0078125 * i as f32)).collect();
    // Widened to f32, added, rounded once (spec section 4 rule 6).
    let want: Vec<u16> = a.iter().zip(&b).map(|(x, y)| bf16::from_f32(x.to_f32() + y.to_f32()).to_bits()).collect();
    for (data, _) in run2(&fake, Dtype::Bf16, [&a, &b], fast(), 1) {
        assert_eq!(data.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), want);
    }
}

#[test]
fn i32_two_workers_exact_and_wrapping() {
    let fake = Fake::start(ID, 2, Dtype::I32, Faults::default());
    let a: Vec<i32> = (0..TENSOR as i32).map(|i| i * 7 - 3000).collect();
    let mut b: Vec<i32> = (0..TENSOR as i32).map(|i| -i * 3).collect();
    b[999] = i32::MAX;
    let want: Vec<i32> = a.iter().zip(&b).map(|(x, y)| x.wrapping_add(*y)).collect();
    assert!(want[999] < 0, "the last lane wraps");
    for (data, _) in run2(&fake, Dtype::I32, [&a, &b], fast(), 1) {
        assert_eq!(data, want);
    }
}

#[test]
fn lost_contributions_and_results_are_retransmitted() {
    let faults =
        Faults { drop_first_contribution: vec![0, 128, 960], drop_first_result: vec![64, 512], ..Faults::default() };
    let fake = Fake::start(ID, 2, Dtype::F32, faults);
    let [a, b] = f32_inputs();
    let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    let out = run2(&fake, Dtype::F32, [&a, &b], fast(), 1);
    for (data, _) in &out {
        assert_eq!(data, &want);
    }
    let retransmits: u64 = out.iter().map(|(_, s)| s.retransmits).sum();
    assert!(retransmits >= 3, "{retransmits} retransmits");
    // First sends carry no flag (one per rank and chunk), resends carry RETRANSMIT. (A resend
    // may still be on its way to the fake when the results are in: at most `retransmits`.)
    let seen = fake.seen();
    assert_eq!(seen.iter().filter(|s| s.flags == 0).count(), 32);
    assert!(seen.iter().filter(|s| s.flags == 0x2).count() as u64 <= retransmits);
    assert_eq!(seen.len() as u64, 32 + seen.iter().filter(|s| s.flags == 0x2).count() as u64);
    for (_, s) in &out {
        assert_eq!(s.sent, 16 + s.retransmits);
        assert_eq!(s.results, 16);
    }
}

/// A RESULT for a chunk of the call that the client has not sent yet (its window holds 2 of
/// 16) is stale, as the Python client counts it: the call goes on and ends exact.
#[test]
fn a_result_for_a_chunk_not_yet_sent_is_stale() {
    let fake = Fake::start(ID, 1, Dtype::F32, Faults { early_result_for: Some(10 * CHUNK), ..Faults::default() });
    let opts = Options { window: 2, ..fast() };
    let mut c = client(fake.addr, collective(Dtype::F32, 1, 0), opts);
    let input: Vec<f32> = (0..TENSOR).map(|i| i as f32).collect();
    let mut data = input.clone();
    c.allreduce(&mut data).unwrap();
    assert_eq!(data, input);
    let s = c.stats();
    assert_eq!((s.results, s.stale_results), (16, 1));
}

/// A datagram whose flags mix RESULT and NAK is neither (spec sections 5 and 6): ignored, the
/// call ends exact on the real results.
#[test]
fn result_and_nak_flags_together_are_ignored() {
    let fake = Fake::start(ID, 1, Dtype::F32, Faults { mixed_flags_first: true, ..Faults::default() });
    let mut c = client(fake.addr, collective(Dtype::F32, 1, 0), fast());
    let input: Vec<f32> = (0..TENSOR).map(|i| i as f32 * 0.5).collect();
    let mut data = input.clone();
    c.allreduce(&mut data).unwrap();
    assert_eq!(data, input);
    let s = c.stats();
    assert_eq!((s.results, s.naks, s.ignored), (16, 0, 16));
}

#[test]
fn nak_reason_3_fails_at_once() {
    let fake = Fake::start(ID, 1, Dtype::F32, Faults { nak_all: Some(3), ..Faults::default() });
    let mut c = client(fake.addr, collective(Dtype::F32, 1, 0), fast());
    let t = Instant::now();
    let e = c.allreduce(&mut vec![0f32; TENSOR as usize]).unwrap_err();
    assert!(t.elapsed() < Duration::from_millis(500), "{:?}", t.elapsed());
    assert!(matches!(e, Error::Nak { reason: 3, offset: 0, .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("op/dtype/carriage mismatch") && msg.contains("offset 0"), "{msg}");
    assert_eq!(c.stats().naks, 1);
}

#[test]
fn silent_appliance_is_unreachable_within_the_deadline() {
    // Bound, never read: no answer, no ICMP.
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    let opts = Options { deadline: Duration::from_millis(300), ..fast() };
    let mut c = client(addr, collective(Dtype::F32, 2, 0), opts);
    let t = Instant::now();
    let e = c.allreduce(&mut vec![0f32; TENSOR as usize]).unwrap_err();
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(300) && took < Duration::from_millis(1500), "{took:?}");
    assert!(matches!(e, Error::Unreachable { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.starts_with(&format!("appliance unreachable: no answer from {addr} in 3")), "{msg}");
    assert!(msg.contains("no STATUS answered the PROBEs of 16 of 16 chunks"), "{msg}");
    // The probes were resent on their timers; no contribution went out.
    assert!(c.stats().probes > 16);
    assert_eq!(c.stats().sent, 0);
    // Nothing completed: the rounds stay, a retry resumes round 0.
    assert!(c.rounds().iter().all(|r| *r == 0));
}

#[test]
fn closed_port_is_refused() {
    let addr = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let mut c = client(addr, collective(Dtype::F32, 1, 0), fast());
    let t = Instant::now();
    let e = c.allreduce(&mut vec![0f32; TENSOR as usize]).unwrap_err();
    assert!(t.elapsed() < Duration::from_millis(500));
    assert!(matches!(e, Error::Refused { .. }), "{e:?}");
}

#[test]
fn absent_peer_is_a_timeout_naming_the_missing_rank() {
    let fake = Fake::start(ID, 2, Dtype::F32, Faults::default());
    let [a, b] = f32_inputs();
    run2(&fake, Dtype::F32, [&a, &b], fast(), 1);
    // Rank 1 is gone: rank 0's round 1 cannot complete. The probes of the stalled call tell this
    // from a silent appliance: its slots answer that they wait for rank 1, even to a client that
    // never heard the appliance before this call.
    let opts = Options { deadline: Duration::from_millis(800), ..fast() };
    let mut c = client(fake.addr, collective(Dtype::F32, 2, 0), opts);
    c.sync().unwrap();
    let start_probes = c.stats().probes;
    let t = Instant::now();
    let e = c.allreduce(&mut a.clone()).unwrap_err();
    assert!(t.elapsed() < Duration::from_millis(2000), "{:?}", t.elapsed());
    assert!(matches!(&e, Error::Timeout { missing: 16, chunks: 16, waiting_for: Some(w), .. } if w == &[1]), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("16 of 16 chunks") && msg.ends_with("the appliance is waiting for rank 1"), "{msg}");
    // The stall's probes: 3 rounds of the 16 in flight, at a quarter, half and three quarters of
    // the deadline (the last may not be answered before it).
    let s = c.stats();
    assert_eq!(s.probes - start_probes, 3 * 16, "{s:?}");
    assert!(s.statuses >= 16 + 2 * 16, "{s:?}");
    // The round came from the appliance: round 1, after the completed round 0.
    assert!(fake.seen().iter().filter(|x| x.rank == 0).all(|x| x.round <= 1));
    assert_eq!(fake.seen().iter().filter(|x| x.rank == 0 && x.round == 1 && x.flags == 0).count(), 16);
}

/// A worker that restarts and guesses the last completed round as its round would get that
/// round's old result (rule 3), silently: the probe gives it the round its peers are in.
#[test]
fn a_restarted_worker_probes_instead_of_taking_an_old_result() {
    let fake = Fake::start(ID, 2, Dtype::F32, Faults::default());
    let [a, b] = f32_inputs();
    let old: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    let a2: Vec<f32> = a.iter().map(|x| x * 3.0).collect();
    let new: Vec<f32> = a2.iter().zip(&b).map(|(x, y)| x + y).collect();
    let addr = fake.addr;
    let mut rank1 = client(addr, collective(Dtype::F32, 2, 1), fast());
    std::thread::scope(|s| {
        let h = s.spawn(|| {
            let mut c = client(addr, collective(Dtype::F32, 2, 0), fast());
            let mut d = a.clone();
            c.allreduce(&mut d).unwrap();
            d
        });
        let mut d = b.clone();
        rank1.allreduce(&mut d).unwrap();
        assert_eq!(d, old);
        assert_eq!(h.join().unwrap(), old);
    });
    // Round 0 completed. Rank 0 restarts guessing round 0 (the last completed one) with a new
    // input, while rank 1 goes on with round 1: the probe says the slots completed round 0, so
    // rank 0 sends round 1 and both get the new sum.
    let ((d0, s0), d1) = std::thread::scope(|s| {
        let h = s.spawn(|| {
            let mut c = client(addr, collective(Dtype::F32, 2, 0), Options { start_round: 0, ..fast() });
            let mut d = a2.clone();
            c.allreduce(&mut d).unwrap();
            (d, c.stats().clone())
        });
        let mut d = b.clone();
        rank1.allreduce(&mut d).unwrap();
        (h.join().unwrap(), d)
    });
    assert_eq!((d0, d1), (new.clone(), new.clone()));
    assert!(s0.statuses >= 16, "{s0:?}");
    assert_eq!((s0.naks, s0.rejoins), (0, 0), "{s0:?}");
    // The fault the probe removes: a restart that guesses the last completed round (now 1)
    // without probing is answered by rule 3 with that round's kept result, the sum of inputs it
    // did not send, and the call succeeds. (Shown so that this test fails if probing stops
    // mattering.)
    let mut guess = client(addr, collective(Dtype::F32, 2, 0), Options { probe: false, start_round: 1, ..fast() });
    let mut d = a.clone();
    guess.allreduce(&mut d).unwrap();
    assert_eq!(d, new, "rule 3 answered the stale guess with round 1's kept result");
}

/// A worker killed after contributing, restarted mid-round: its probe finds its contribution in
/// (state 2), so it waits for that round's result instead of starting another.
#[test]
fn a_worker_restarted_mid_round_gets_that_rounds_result() {
    let fake = Fake::start(ID, 2, Dtype::F32, Faults::default());
    let [a, b] = f32_inputs();
    let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    // Rank 0 contributes round 0 alone and gives up (rank 1 not started yet).
    let opts = Options { deadline: Duration::from_millis(300), ..fast() };
    let mut dead = client(fake.addr, collective(Dtype::F32, 2, 0), opts);
    let e = dead.allreduce(&mut a.clone()).unwrap_err();
    assert!(matches!(&e, Error::Timeout { waiting_for: Some(w), .. } if w == &[1]), "{e:?}");
    drop(dead);
    // Restarted with a wrong guess (7) while the round is still in progress: its probe finds
    // its contribution in (round 0, state 2). Then rank 1 starts (also guessing 7) and completes
    // the round. (Were rank 1 to complete it first, the result would go to the dead process and
    // the probe would find round 0 completed: the restarted worker would join round 1, the round
    // its peers are in then.)
    let opts = Options { start_round: 7, ..fast() };
    let mut restarted = client(fake.addr, collective(Dtype::F32, 2, 0), opts);
    restarted.sync().unwrap();
    assert!(restarted.rounds().iter().all(|r| *r == 0), "{:?}", restarted.rounds());
    let outs = std::thread::scope(|s| {
        let h = s.spawn(|| {
            let mut c = client(fake.addr, collective(Dtype::F32, 2, 1), opts);
            let mut d = b.clone();
            c.allreduce(&mut d).unwrap();
            (d, c.stats().clone(), c.rounds().to_vec())
        });
        let mut d = a.clone();
        restarted.allreduce(&mut d).unwrap();
        vec![(d, restarted.stats().clone(), restarted.rounds().to_vec()), h.join().unwrap()]
    });
    for (d, s, rounds) in &outs {
        assert_eq!(d, &want);
        assert!(s.statuses >= 16, "{s:?}");
        assert_eq!((s.naks, s.rejoins), (0, 0), "{s:?}");
        assert!(rounds.iter().all(|r| *r == 1), "{rounds:?}");
    }
    // Every contribution the fake saw was of round 0: nobody guessed 7.
    assert!(fake.seen().iter().all(|x| x.round == 0));
}

/// The round comes from the slot's STATUS (state 3: completed round + 1), not from a NAK.
#[test]
fn the_probe_finds_the_round_the_slot_expects() {
    let fake = Fake::start(ID, 1, Dtype::I32, Faults { history: Some(41), ..Faults::default() });
    let mut c = client(fake.addr, collective(Dtype::I32, 1, 0), fast());
    let input: Vec<i32> = (0..TENSOR as i32).collect();
    let mut d = input.clone();
    c.allreduce(&mut d).unwrap();
    assert_eq!(d, input);
    let s = c.stats().clone();
    assert!(s.statuses >= 16, "{s:?}");
    assert_eq!((s.naks, s.rejoins, s.results), (0, 0, 16), "{s:?}");
    assert!(fake.seen().iter().all(|x| x.round == 42));
    assert!(c.rounds().iter().all(|r| *r == 43));
    // Only the first call probes.
    c.allreduce(&mut d).unwrap();
    assert_eq!(c.stats().probes, s.probes);
}

#[test]
fn nak_7_rejoins_at_the_expected_round() {
    // The appliance's slots completed round 41: it expects 42; the client, not probing, starts
    // at 0.
    let fake = Fake::start(ID, 1, Dtype::I32, Faults { history: Some(41), ..Faults::default() });
    let opts = Options { window: 4, probe: false, ..fast() };
    let mut c = client(fake.addr, collective(Dtype::I32, 1, 0), opts);
    let input: Vec<i32> = (0..TENSOR as i32).collect();
    let mut d = input.clone();
    c.allreduce(&mut d).unwrap();
    assert_eq!(d, input);
    let s = c.stats();
    // One NAK (the appliance limits them to one per source per 100 ms) realigned every chunk:
    // one rejoin, not one per chunk (later NAKs of round-0 resends, if any, are ignored).
    assert_eq!((s.rejoins, s.results), (1, 16));
    assert!(s.naks >= 1);
    assert!(s.seconds < 1.0, "{}", s.seconds);
    let seen = fake.seen();
    assert!(seen.iter().all(|x| x.round == 0 || x.round == 42), "{seen:?}");
    // Only the first window (4 chunks) went out at round 0; every chunk completed at 42.
    assert!(seen.iter().filter(|x| x.round == 0).all(|x| x.offset < 4 * CHUNK), "{seen:?}");
    for off in (0..TENSOR as u32).step_by(CHUNK as usize) {
        assert!(seen.iter().any(|x| x.offset == off && x.round == 42), "offset {off}");
    }
    assert!(c.rounds().iter().all(|r| *r == 43));
    // The next call is round 43, with no NAK.
    let naks = c.stats().naks;
    c.allreduce(&mut d).unwrap();
    assert_eq!(c.stats().naks, naks);
    assert_eq!(c.stats().rejoins, 1);
    assert!(fake.seen().iter().filter(|x| x.round == 43 && x.flags == 0).count() == 16);
}

#[test]
fn rejoins_are_bounded() {
    let fake = Fake::start(ID, 1, Dtype::F32, Faults { history: Some(41), ..Faults::default() });
    let opts = Options { max_rejoins: 0, probe: false, ..fast() };
    let mut c = client(fake.addr, collective(Dtype::F32, 1, 0), opts);
    let e = c.allreduce(&mut vec![0f32; TENSOR as usize]).unwrap_err();
    assert!(matches!(e, Error::Rejoins { limit: 0, expected: 42, sent: 0, .. }), "{e:?}");
}

#[test]
fn successive_calls_are_successive_rounds() {
    let fake = Fake::start(ID, 2, Dtype::F32, Faults::default());
    let [a, b] = f32_inputs();
    let opts = Options { start_round: 5, ..fast() };
    let out = run2(&fake, Dtype::F32, [&a, &b], opts, 2);
    let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    for (data, s) in &out {
        assert_eq!(data, &want);
        assert_eq!((s.chunks, s.results, s.naks), (32, 32, 0));
    }
    let seen = fake.seen();
    for rank in 0..2 {
        for off in (0..TENSOR as u32).step_by(CHUNK as usize) {
            let mut rounds: Vec<u32> =
                seen.iter().filter(|x| x.rank == rank && x.offset == off).map(|x| x.round).collect();
            // (a resend under load repeats a round)
            rounds.dedup();
            assert_eq!(rounds, [5, 6], "rank {rank} offset {off}");
        }
    }
}

/// A call that fails still moves every chunk of its range to the next round (as the Python
/// client does): the peers may complete the abandoned round later, and its kept result must
/// not come back as the next call's (it reused the round of every chunk not done).
#[test]
fn a_failed_call_moves_every_chunk_to_the_next_round() {
    let fake = Fake::start(ID, 2, Dtype::F32, Faults::default());
    let [a, _] = f32_inputs();
    let opts = Options { deadline: Duration::from_millis(300), probe: false, start_round: 9, ..fast() };
    let mut c = client(fake.addr, collective(Dtype::F32, 2, 0), opts);
    assert!(c.allreduce(&mut a.clone()).is_err(), "rank 1 never comes");
    let before = fake.seen().len();
    let _ = c.allreduce(&mut a.clone());
    let second: Vec<Seen> = fake.seen()[before..].to_vec();
    // The second call's first contribution of each chunk is at round 10 (a NAK 7 of the fake,
    // whose round 9 waits for rank 1, may move it back later).
    for off in (0..TENSOR as u32).step_by(CHUNK as usize) {
        let first = second.iter().find(|x| x.rank == 0 && x.offset == off).expect("sent again");
        assert_eq!(first.round, 10, "offset {off}");
    }
}

#[test]
fn rounds_wrap_modulo_2_32() {
    let fake = Fake::start(ID, 1, Dtype::F32, Faults::default());
    let mut c = client(fake.addr, collective(Dtype::F32, 1, 0), Options { start_round: u32::MAX, ..fast() });
    let mut d = vec![1f32; TENSOR as usize];
    c.allreduce(&mut d).unwrap();
    c.allreduce(&mut d).unwrap();
    let mut rounds: Vec<u32> = fake.seen().iter().map(|x| x.round).collect();
    rounds.dedup();
    assert_eq!(rounds, [u32::MAX, 0]);
    assert!(c.rounds().iter().all(|r| *r == 1));
}

#[test]
fn wrong_element_type_or_length_is_refused_before_sending() {
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut c = client(silent.local_addr().unwrap(), collective(Dtype::F32, 1, 0), fast());
    let e = c.allreduce(&mut vec![0i32; TENSOR as usize]).unwrap_err();
    assert!(matches!(e, Error::DtypeMismatch { expected: Dtype::F32, found: Dtype::I32, .. }), "{e:?}");
    assert!(e.to_string().contains("dtype mismatch"), "{e}");
    let e = c.allreduce(&mut vec![bf16::ZERO; TENSOR as usize]).unwrap_err();
    assert!(matches!(e, Error::DtypeMismatch { found: Dtype::Bf16, .. }), "{e:?}");
    let e = c.allreduce(&mut vec![0f32; 999]).unwrap_err();
    assert!(matches!(e, Error::Length { expected: 1000, found: 999, .. }), "{e:?}");
    let e = c.allreduce_bytes(&mut [0u8; 3999]).unwrap_err();
    assert!(matches!(e, Error::Length { expected: 4000, found: 3999, unit: "bytes", .. }), "{e:?}");
    assert_eq!(c.stats().sent, 0);
}

#[test]
fn bytes_entry_point_matches_typed() {
    let fake = Fake::start(ID, 1, Dtype::Bf16, Faults::default());
    let mut c = client(fake.addr, collective(Dtype::Bf16, 1, 0), fast());
    let v: Vec<bf16> = (0..TENSOR).map(|i| bf16::from_f32(i as f32)).collect();
    let mut bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    let before = bytes.clone();
    c.allreduce_bytes(&mut bytes).unwrap();
    // One worker: the sum is the input itself.
    assert_eq!(bytes, before);
    assert_eq!(c.stats().results, 16);
}

/// The datagrams byte for byte (spec section 2), and what the client does with stale,
/// duplicate and malformed results, against a scripted appliance.
#[test]
fn wire_bytes_and_result_filtering() {
    let app = UdpSocket::bind("127.0.0.1:0").unwrap();
    app.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let c = Collective {
        collective_id: 0x0102,
        op: Op::Max,
        dtype: Dtype::Bf16,
        tensor_elements: 3,
        chunk_elements: 2,
        num_workers: 4,
        rank: 3,
    };
    let opts = Options {
        start_round: 0x0a0b_0c0d,
        initial_rto: Duration::from_millis(200),
        max_rto: Duration::from_millis(400),
        ..fast()
    };
    let addr = app.local_addr().unwrap();
    let worker = std::thread::spawn(move || {
        let mut cl = client(addr, c, opts);
        let mut d = [bf16::from_f32(1.0), bf16::from_f32(-2.0), bf16::from_f32(0.5)];
        cl.allreduce(&mut d).map(|_| (d, cl.stats().clone(), cl.rounds().to_vec()))
    });
    let mut buf = [0u8; 64];
    // First one PROBE per chunk (spec section 7): flags PROBE, round 0, ceil(4 / 8) = 1 zero byte.
    let (n, src) = app.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], &[0x18, 2, 1, 2, 3, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0]);
    let (n, _) = app.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], &[0x18, 2, 1, 2, 3, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0]);
    let status = |offset: u8, state: u8, round: [u8; 4], bitmap: &[u8]| {
        let mut p = vec![0x19, 2, 1, 2, 3, state, 0xff, 0xff, 0, 0, 0, offset, 0, 0, 0, bitmap.len() as u8];
        p.extend_from_slice(&round);
        p.extend_from_slice(bitmap);
        p
    };
    // Offset 0: no history, the start round stays. Offset 2: round 0x0a0b0c0d in progress with
    // ranks 0 and 2 in (a STATUS of the wrong length first: ignored).
    app.send_to(&status(0, 0, [0; 4], &[0]), src).unwrap();
    app.send_to(&status(2, 1, [0x0a, 0x0b, 0x0c, 0x0d], &[5, 0]), src).unwrap();
    app.send_to(&status(2, 1, [0x0a, 0x0b, 0x0c, 0x0d], &[5]), src).unwrap();
    let (n, _) = app.recv_from(&mut buf).unwrap();
    #[rustfmt::skip]
    let first: [u8; 24] = [
        0x10, 0x02, 0x01, 0x02, 0x03, 0x00, 0x00, 0x03, // v1 flags 0, MAX, collective 0x0102, bf16, reason 0, rank 3
        0, 0, 0, 0, 0, 0, 0, 4, 0x0a, 0x0b, 0x0c, 0x0d, // offset 0, 4 bytes, round
        0x80, 0x3f, 0x00, 0xc0,                         // 1.0, -2.0 as bf16, little-endian
    ];
    assert_eq!(&buf[..n], &first);
    let (n, _) = app.recv_from(&mut buf).unwrap();
    let second = buf[..n].to_vec();
    assert_eq!(
        &second[..],
        &[0x10, 0x02, 0x01, 0x02, 0x03, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0x0a, 0x0b, 0x0c, 0x0d, 0x00, 0x3f]
    );
    // Both go unanswered: their resends carry RETRANSMIT (0x12), the rest unchanged.
    let mut resent = Vec::new();
    for _ in 0..2 {
        let (n, _) = app.recv_from(&mut buf).unwrap();
        assert_eq!(buf[0], 0x12);
        let orig = if buf[11] == 0 { &first[..] } else { &second[..] };
        assert_eq!(&buf[1..n], &orig[1..]);
        resent.push(buf[11]);
    }
    resent.sort();
    assert_eq!(resent, [0, 2]);
    let result = |offset: u8, len: u8, round_lo: u8, payload: &[u8]| {
        let mut p = vec![
            0x11, 0x02, 0x01, 0x02, 0x03, 0, 0xff, 0xff, 0, 0, 0, offset, 0, 0, 0, len, 0x0a, 0x0b, 0x0c, round_lo,
        ];
        p.extend_from_slice(payload);
        p
    };
    let r0 = [0x00, 0x40, 0x80, 0x3f]; // 2.0, 1.0
    app.send_to(&result(0, 4, 0x0e, &r0), src).unwrap(); // another round: stale
    app.send_to(&result(0, 2, 0x0d, &r0[..2]), src).unwrap(); // wrong length: ignored
    app.send_to(&result(0, 4, 0x0d, &r0), src).unwrap(); // the result
    app.send_to(&result(0, 4, 0x0d, &r0), src).unwrap(); // duplicate: stale
    app.send_to(&result(2, 2, 0x0d, &[0x40, 0x40]), src).unwrap(); // 3.0
    let (d, s, rounds) = worker.join().unwrap().unwrap();
    assert_eq!(d.map(|x| x.to_f32()), [2.0, 1.0, 3.0]);
    assert_eq!((s.results, s.stale_results, s.ignored), (2, 2, 2));
    assert_eq!((s.probes, s.statuses), (2, 2));
    assert_eq!(rounds, [0x0a0b_0c0e, 0x0a0b_0c0e]);
}
