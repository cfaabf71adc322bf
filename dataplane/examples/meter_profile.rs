//! A fixed amount of metering work, for instruction counting under callgrind: the trace of the
//! `meter` bench (64 Ki packets of 64..=1518 bytes at about 25 Gbit/s against a trTCM of CIR
//! 10 Gbit/s and PIR 20 Gbit/s on a 2.5 GHz clock), coloured `REPS` times in [`run`].
//!
//! ```text
//! cargo build --release -p dataplane --no-default-features --example meter_profile
//! valgrind --tool=callgrind --toggle-collect='*meter_profile*run*' \
//!     target/release/examples/meter_profile 10
//! ```
//!
//! Instructions per packet = the `run` total / (`REPS` * 65536).

use dataplane::meter::{Color, Meter, Profile};
use std::hint::black_box;

const PACKETS: usize = 1 << 16;
const HZ: u64 = 2_500_000_000;
const PROFILE: Profile = Profile::TrTcm { cir: 1_250_000_000, cbs: 65_536, pir: 2_500_000_000, pbs: 65_536 };

/// The bench's trace: (timestamps in ticks, lengths in bytes).
fn trace() -> (Vec<u64>, Vec<u32>) {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let (mut ts, mut lens, mut t) = (Vec::new(), Vec::new(), 0u64);
    for _ in 0..PACKETS {
        let len = 64 + (next() % 1455) as u32;
        ts.push(t);
        lens.push(len);
        t += u64::from(len) * HZ / 3_125_000_000 * (next() % 2000) / 1000;
    }
    (ts, lens)
}

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
    let (ts, lens) = trace();
    let mut out = vec![Color::Red; PACKETS];
    run(reps, &ts, &lens, &mut out);
    let green = out.iter().filter(|&&c| c == Color::Green).count();
    println!("{reps} x {PACKETS} packets; last pass: {green} green");
}
