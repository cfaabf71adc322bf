//! The metering workload shared by the `meter` bench and the `meter_profile` example: a trTCM
//! of CIR 10 Gbit/s and PIR 20 Gbit/s, and a trace of [`PACKETS`] packets of 64..=1518 bytes
//! at about 25 Gbit/s. Included by both with `#[path]` (not a bench target of its own).
#![allow(dead_code)]

use dataplane::meter::Profile;

/// Packets in the trace.
pub const PACKETS: usize = 1 << 16;
/// The profile: CIR 1.25e9 B/s, PIR 2.5e9 B/s, both bursts 64 KiB.
pub const PROFILE: Profile = Profile::TrTcm { cir: 1_250_000_000, cbs: 65_536, pir: 2_500_000_000, pbs: 65_536 };

/// A fixed trace on a clock of `hz` ticks per second: (timestamps in ticks, lengths in bytes).
pub fn trace(hz: u64) -> (Vec<u64>, Vec<u32>) {
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
        t += u64::from(len) * hz / 3_125_000_000 * (next() % 2000) / 1000;
    }
    (ts, lens)
}
