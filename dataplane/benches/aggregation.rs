//! The folding path of in-network aggregation without DPDK: `Datapath::process` with an
//! `Aggregator` on contributions that are all folded (every contribution is for the slot's
//! current or next round), and every completed slot replicated to its N members.
//!
//! `cargo bench -p dataplane --no-default-features --bench aggregation`
//!
//! Cases: 4 and 16 workers x 256 and 1024 f32 lanes per chunk x the UDP and RoCEv2 carriages.
//! Each case has a collective of [`SLOTS`] slots; the frames of [`ROUNDS`] consecutive rounds
//! (each worker sends all its chunks of a round, rank after rank) are built once with
//! `wire::build`, checksums and ICRC set. One criterion iteration is one fresh `Datapath` (built
//! outside the timed part, so every round is new to it) fed every frame: N x SLOTS x ROUNDS
//! contributions, all folded, SLOTS x ROUNDS completions, N x SLOTS x ROUNDS results. Each
//! contribution is first copied into a pooled buffer (as net_pcap copies a record into an
//! mbuf), then parsed (checksums / ICRC verified), validated, folded; results are built into
//! pooled buffers and dropped by the sink (no copy). Criterion's throughput is in contributions;
//! `tools/bench/agg.py` turns the medians into ns per contribution, Mpps, Gbit/s of payload and
//! elements/s. A check before measuring asserts the counts (folded, completed, results sent).
//!
//! `aggregation_burst/...`: the same UDP contributions (4 workers) in rx bursts of 32 through
//! `Datapath::process_burst`, the workers' path, twice: `verify_at_fold` (the default router
//! parse: a contribution's UDP checksum is summed just before it is folded, while its payload
//! is in L1) and `verify_in_parse` (`verify_transit`: every checksum summed in the burst's
//! parse stage, 32 payloads before the first fold).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;
use std::time::{Duration, Instant};

#[path = "common/agg_workload.rs"]
mod agg_workload;
use agg_workload::*;

fn aggregation(c: &mut Criterion) {
    let mut g = c.benchmark_group("aggregation");
    g.warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_millis(1200)).sample_size(20);
    for carriage in ["udp", "rocev2"] {
        for n in [4usize, 16] {
            for chunk in [256usize, 1024] {
                let case = Case::new(carriage, n, chunk);
                // Check once: every contribution folded, every slot completed, N results each.
                let mut dp = case.datapath();
                let mut io = Sink::default();
                case.run(&mut dp, &mut io);
                let a = &dp.agg.as_ref().unwrap().counters;
                let total = (n * SLOTS) as u64 * ROUNDS as u64;
                assert_eq!(a.folded, total, "{carriage} {n}x{chunk}: folded");
                assert_eq!(a.completed, SLOTS as u64 * ROUNDS as u64, "{carriage} {n}x{chunk}: completed");
                assert_eq!(io.sent, total, "{carriage} {n}x{chunk}: results sent (N per slot)");
                assert_eq!(a.resends + a.naks, 0);
                assert_eq!(case.coll.members.len(), n);
                g.throughput(Throughput::Elements(total));
                g.bench_function(BenchmarkId::new(format!("{carriage}_{chunk}lanes"), format!("{n}workers")), |b| {
                    b.iter_custom(|iters| {
                        let mut t = Duration::ZERO;
                        for _ in 0..iters {
                            let mut dp = case.datapath();
                            let mut io = Sink::default();
                            let start = Instant::now();
                            case.run(&mut dp, &mut io);
                            t += start.elapsed();
                            black_box(io.sent);
                        }
                        t
                    })
                });
            }
        }
    }
    g.finish();

    let mut g = c.benchmark_group("aggregation_burst");
    g.warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_millis(1200)).sample_size(20);
    for chunk in [256usize, 1024] {
        let case = Case::new("udp", 4, chunk);
        let total = (4 * SLOTS) as u64 * ROUNDS as u64;
        g.throughput(Throughput::Elements(total));
        for (name, checks) in
            [("verify_at_fold", dataplane::parse::Checks::Router), ("verify_in_parse", dataplane::parse::Checks::All)]
        {
            let mut dp = case.datapath_with(checks);
            let mut io = Sink::default();
            case.run_bursts(&mut dp, &mut io, 32);
            assert_eq!(dp.agg.as_ref().unwrap().counters.folded, total, "{name} {chunk}: folded");
            g.bench_function(BenchmarkId::new(format!("udp_{chunk}lanes_4workers"), name), |b| {
                b.iter_custom(|iters| {
                    let mut t = Duration::ZERO;
                    for _ in 0..iters {
                        let mut dp = case.datapath_with(checks);
                        let mut io = Sink::default();
                        let start = Instant::now();
                        case.run_bursts(&mut dp, &mut io, 32);
                        t += start.elapsed();
                        black_box(io.sent);
                    }
                    t
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, aggregation);
criterion_main!(benches);
