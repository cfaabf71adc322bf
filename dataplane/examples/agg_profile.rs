//! A fixed amount of aggregation work, for instruction counting under callgrind: the
//! contributions of the `aggregation` bench (one collective of `SLOTS` chunks, `ROUNDS` rounds,
//! every contribution folded, every completed slot replicated to its N members), fed `REPS`
//! times to a fresh `Datapath` with nothing else in [`run`].
//!
//! ```text
//! cargo build --release -p dataplane --no-default-features --example agg_profile
//! valgrind --tool=callgrind --toggle-collect='agg_profile::run*' \
//!     target/release/examples/agg_profile udp 4 256 4
//! ```
//!
//! Instructions per contribution = the `run` total / (`REPS` * N * `SLOTS` * `ROUNDS`); the
//! example prints the divisor, and on a `TIME` line the wall-clock ns per contribution spent in
//! [`run`] (what `tools/bench/agg_revs.py` compares across revisions). The pattern must match
//! [`run`] alone: `*agg_profile*run*` also matches the workload's `Case::run`, and callgrind
//! toggles collection on every entry and exit of a matching function, so nested matches count
//! the warm-up and skip the counted part.

use dataplane::datapath::Datapath;

#[path = "../benches/common/agg_workload.rs"]
mod agg_workload;
use agg_workload::*;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let carriage = a.get(1).map_or("udp", |s| s.as_str());
    let n: usize = a.get(2).map_or(4, |s| s.parse().expect("workers"));
    let chunk: usize = a.get(3).map_or(256, |s| s.parse().expect("lanes"));
    let reps: usize = a.get(4).map_or(4, |s| s.parse().expect("repetitions"));
    let case = Case::new(carriage, n, chunk);
    assert_eq!(case.coll.members.len(), n);
    // Warm the buffer pool outside the counted part.
    let mut dp = case.datapath();
    let mut io = Sink::default();
    case.run(&mut dp, &mut io);
    let mut sent = 0;
    let mut t = std::time::Duration::ZERO;
    for _ in 0..reps {
        let mut dp = case.datapath();
        let mut io = Sink::default();
        let st = std::time::Instant::now();
        run(&case, &mut dp, &mut io);
        t += st.elapsed();
        sent += io.sent;
        assert_eq!(dp.agg.as_ref().unwrap().counters.folded, (n * SLOTS) as u64 * ROUNDS as u64);
    }
    let contributions = reps * n * SLOTS * ROUNDS as usize;
    println!("TIME {:.2} ns/contribution", t.as_nanos() as f64 / contributions as f64);
    println!("{carriage} {n} workers x {chunk} lanes: {contributions} contributions, {sent} results sent");
}

/// The counted part: every frame of `case` through `dp`.
#[inline(never)]
fn run(case: &Case, dp: &mut Datapath<PoolBuf>, io: &mut Sink) {
    case.run(dp, io);
}
