//! One collective on one core or on two: the aggregation path's rate with the collective owned
//! by one worker thread, beside the same collective sharded over two worker threads on two
//! cores (`[dataplane] shard_collectives = true`: chunk `k` on worker `k % 2`), in one run.
//!
//! ```text
//! cargo run --release -p dataplane --no-default-features --example shard_scale [REPS]
//! ```
//!
//! The workload is the `aggregation` bench's (f32 sum, deterministic, every contribution
//! folded, every completed chunk replicated to its N members, checksums verified), with 16
//! chunks and 16 rounds: N x 256 contributions per pass (the frames stay in L2/L3, as a NIC's
//! DMA leaves them), 32 passes per measurement, each pass on a fresh datapath built before the
//! clock starts. The two threads are pinned to CPUs 0 and 1 and each
//! receives the contributions of its own chunks, as a NIC steering by the gradient header's
//! offset would deliver them (the hand-off between workers, for NICs that cannot, is measured
//! through the real binary by `tools/bench/shard.py`). A two-thread measurement's time runs
//! from the first thread's start to the last one's end. One-thread and two-thread measurements
//! alternate, `REPS` each (default 9); the table gives the medians and the median of the
//! per-pair ratios. Every measurement's counts are checked (folded, completed, results sent).
//! With `SHARD_SCALE_DEBUG` set, each measurement's per-thread times go to stderr.

use dataplane::buf::PacketBuf;
use dataplane::datapath::Datapath;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

#[path = "../benches/common/agg_workload.rs"]
mod agg_workload;
use agg_workload::*;

/// Chunks of the collective, and rounds of every chunk, per pass.
const CHUNKS: usize = 16;
const ROUNDS_PER_PASS: u32 = 16;
/// Passes per measurement (fresh datapaths each).
const PASSES: usize = 32;

fn main() {
    let reps: usize = std::env::args().nth(1).map_or(9, |s| s.parse().expect("REPS: a count"));
    let cpus = core_affinity::get_core_ids().unwrap_or_default();
    if cpus.len() < 2 {
        eprintln!("shard_scale: needs two CPUs, found {}", cpus.len());
        std::process::exit(2);
    }
    println!("| case | one worker (M contributions/s) | two workers, sharded (M contributions/s) | two / one |");
    println!("| --- | ---: | ---: | ---: |");
    for (n, lanes) in [(4usize, 256usize), (4, 1024), (16, 256)] {
        let case = Arc::new(Case::sized("udp", n, lanes, CHUNKS, ROUNDS_PER_PASS));
        let total = (case.frames.len() * PASSES) as f64;
        let (mut one, mut two, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..reps {
            let a = total / measure(&case, 1, &cpus).as_secs_f64() / 1e6;
            let b = total / measure(&case, 2, &cpus).as_secs_f64() / 1e6;
            one.push(a);
            two.push(b);
            ratio.push(b / a);
        }
        println!(
            "| udp {n} x {lanes} f32 | {:.2} | {:.2} | {:.2} |",
            median(&mut one),
            median(&mut two),
            median(&mut ratio)
        );
    }
}

/// The time `workers` pinned threads (1 or 2) take for [`PASSES`] passes of `case`, the
/// collective sharded over them; panics if a count is off.
fn measure(case: &Arc<Case>, workers: u16, cpus: &[core_affinity::CoreId]) -> Duration {
    let start = Arc::new(Barrier::new(workers as usize));
    let handles: Vec<_> = (0..workers)
        .map(|me| {
            let (case, start, cpu) = (case.clone(), start.clone(), cpus[me as usize]);
            std::thread::spawn(move || {
                core_affinity::set_for_current(cpu);
                // This worker's contributions: frames are ordered round, rank, chunk.
                let mine: Vec<&Vec<u8>> = case
                    .frames
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| i % CHUNKS % workers as usize == me as usize)
                    .map(|(_, f)| f)
                    .collect();
                let mut dps: Vec<Datapath<PoolBuf>> = (0..PASSES)
                    .map(|_| if workers == 1 { case.datapath() } else { case.sharded_datapath(me, workers) })
                    .collect();
                // Warm the buffer pool outside the clock.
                drop((0..64).map(|_| PoolBuf::get()).collect::<Vec<_>>());
                let mut io = Sink::default();
                start.wait();
                let t0 = Instant::now();
                for dp in &mut dps {
                    for f in &mine {
                        let mut b = PoolBuf::get();
                        b.append(f.len());
                        b.data_mut().copy_from_slice(f);
                        dp.process(&mut io, 0, b, 0);
                    }
                }
                let t1 = Instant::now();
                let folded: u64 = dps.iter().map(|d| d.agg.as_ref().unwrap().counters.folded).sum();
                let completed: u64 = dps.iter().map(|d| d.agg.as_ref().unwrap().counters.completed).sum();
                assert_eq!(folded, (mine.len() * PASSES) as u64, "worker {me}: folded");
                assert_eq!(completed * case.coll.members.len() as u64, folded, "worker {me}: completed");
                assert_eq!(io.sent, folded, "worker {me}: N results per completed chunk");
                (t0, t1)
            })
        })
        .collect();
    let spans: Vec<(Instant, Instant)> =
        handles.into_iter().map(|h| h.join().expect("a worker thread panicked")).collect();
    if std::env::var_os("SHARD_SCALE_DEBUG").is_some() {
        let t: Vec<String> = spans.iter().map(|s| format!("{:?}", s.1 - s.0)).collect();
        eprintln!("{workers} worker(s): {}", t.join(" "));
    }
    let first = spans.iter().map(|s| s.0).min().unwrap();
    let last = spans.iter().map(|s| s.1).max().unwrap();
    last - first
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}
