//! A fixed amount of metering work, for instruction counting under callgrind: the trace and
//! profile of the `meter` bench (`benches/common/meter_trace.rs`) on a 2.5 GHz clock, coloured
//! `REPS` times in [`run`].
//!
//! ```text
//! cargo build --release -p dataplane --no-default-features --example meter_profile
//! valgrind --tool=callgrind --toggle-collect='*meter_profile*run*' \
//!     target/release/examples/meter_profile 10
//! ```
//!
//! Instructions per packet = the `run` total / (`REPS` * 65536).

use dataplane::meter::{Color, Meter};
use std::hint::black_box;

const HZ: u64 = 2_500_000_000;

#[path = "../benches/common/meter_trace.rs"]
mod meter_trace;
use meter_trace::{trace, PACKETS, PROFILE};

/// The measured work: `reps` passes over the trace, each with a fresh meter.
#[inline(never)]
fn run(reps: usize, ts: &[u64], lens: &[u32], out: &mut [Color]) {
    for _ in 0..reps {
        let mut m = Meter::new(&PROFILE, HZ, 0).expect("a valid profile");
        for ((o, &t), &l) in out.iter_mut().zip(ts).zip(lens) {
            *o = m.color_blind(t, l);
        }
        black_box(&out);
    }
}

fn main() {
    let reps: usize = std::env::args().nth(1).map_or(10, |s| s.parse().expect("repetitions"));
    let (ts, lens) = trace(HZ);
    let mut out = vec![Color::Red; PACKETS];
    run(reps, &ts, &lens, &mut out);
    let green = out.iter().filter(|&&c| c == Color::Green).count();
    println!("{reps} x {PACKETS} packets; last pass: {green} green");
}
