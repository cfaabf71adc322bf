//! Our meters ([`dataplane::meter`]) against DPDK's `rte_meter` on the same traces: the same
//! colour for every packet where `rte_meter` represents the rate exactly (`hz / rate` an integer
//! of at least 100), and exactly the predicted number of differences where it rounds (see
//! [`dataplane::dpdk::meter`] for the rule).
//!
//! `rte_meter_*_profile_config` reads `rte_get_tsc_hz()`, so an EAL runs (no hugepages, no PCI);
//! the traces are in cycles of that TSC.
#![cfg(feature = "dpdk")]

mod common;

use dataplane::dpdk::{self, meter::Rounding, Eal};
use dataplane::meter::{Color, Meter, Profile};
use std::sync::OnceLock;

/// The TSC's rate once the EAL is up (one EAL per process, shared by the tests of this file).
fn hz() -> u64 {
    static EAL: OnceLock<Eal> = OnceLock::new();
    EAL.get_or_init(|| {
        let args = common::eal_args("rte_meter", "0@0");
        Eal::init(&args).expect("EAL init")
    });
    let hz = dpdk::tsc_hz();
    // The closed forms below divide hz by 4 and by 100; EAL's TSC rate is a multiple of 10 MHz
    // when calibrated, of 1 kHz when read from the CPU or the kernel.
    assert!(hz.is_multiple_of(100), "TSC at {hz} Hz");
    hz
}

/// Our colours for a trace, buckets full at `t0`.
fn ours(p: &Profile, hz: u64, t0: u64, ts: &[u64], lens: &[u32], in_colors: Option<&[Color]>) -> Vec<Color> {
    let mut m = Meter::new(p, hz, t0).unwrap();
    match in_colors {
        None => ts.iter().zip(lens).map(|(&t, &l)| m.color_blind(t, l)).collect(),
        Some(c) => ts.iter().zip(lens).zip(c).map(|((&t, &l), &c)| m.color_aware(t, l, c)).collect(),
    }
}

fn rte(p: &Profile, t0: u64, ts: &[u64], lens: &[u32], in_colors: Option<&[Color]>) -> (Vec<Color>, Rounding) {
    let mut out = vec![Color::Red; ts.len()];
    let r = dpdk::meter::run(p, t0, ts, lens, in_colors, &mut out).unwrap();
    (out, r)
}

fn differences(a: &[Color], b: &[Color]) -> usize {
    a.iter().zip(b).filter(|(x, y)| x != y).count()
}

/// splitmix64: a fixed pseudo-random trace.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// `n` packets of 64..=1518 bytes, offered at about `offered` bytes/s on a clock of `hz`, from
/// `t0`, with random colours in.
fn trace(seed: u64, n: usize, hz: u64, offered: u64, t0: u64) -> (Vec<u64>, Vec<u32>, Vec<Color>) {
    let mut rng = Rng(seed);
    let (mut ts, mut lens, mut colors) = (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
    let mut t = t0;
    for _ in 0..n {
        let len = 64 + (rng.next() % 1455) as u32;
        ts.push(t);
        lens.push(len);
        colors.push(Color::from_u8((rng.next() % 3) as u8).unwrap());
        // Mean gap: one packet's time at the offered rate, jittered ×0..2, sometimes a burst.
        let gap = (u128::from(len) * u128::from(hz) / u128::from(offered)) as u64;
        t += if rng.next().is_multiple_of(8) { 0 } else { gap * (rng.next() % 2000) / 1000 };
    }
    (ts, lens, colors)
}

#[test]
fn same_colours_where_rte_meter_is_exact() {
    let hz = hz();
    // hz / rate = 100 and 400: one byte every 100 (400) cycles, the finest rte_meter goes.
    let (pir, cir) = (hz / 100, hz / 400);
    let profiles = [
        Profile::TrTcm { cir, cbs: 4000, pir, pbs: 9000 },
        Profile::SrTcm { cir, cbs: 4000, ebs: 9000 },
        Profile::Rfc4115 { cir, cbs: 4000, eir: pir, ebs: 9000 },
    ];
    let t0 = 12_345;
    let (ts, lens, colors_in) = trace(1, 200_000, hz, pir + pir / 2, t0);
    for p in profiles {
        for aware in [None, Some(colors_in.as_slice())] {
            let (theirs, r) = rte(&p, t0, &ts, &lens, aware);
            assert_eq!((r.hz, r.c_period, r.c_bytes_per_period), (hz, 400, 1), "{p:?}");
            let mine = ours(&p, hz, t0, &ts, &lens, aware);
            let n = count(&mine);
            // Every colour occurs, two of them in thousands, so the comparison means something
            // (srTCM's E only fills when C overflows, which a trace above CIR rarely lets it).
            assert!(n.iter().all(|&k| k > 0) && n.iter().filter(|&&k| k > 1000).count() >= 2, "{p:?}: {n:?}");
            assert_eq!(differences(&mine, &theirs), 0, "{p:?} aware {}", aware.is_some());
        }
    }
}

fn count(c: &[Color]) -> [usize; 3] {
    let mut n = [0; 3];
    c.iter().for_each(|&c| n[c as usize] += 1);
    n
}

#[test]
fn rate_rounded_up_by_the_period_floor() {
    // CIR with hz / CIR in [100.5, 100.6): rte_meter's period is ⌊hz / CIR⌋ = 100 cycles for
    // one byte, i.e. it runs at hz / 100 bytes/s, 0.5% above CIR. PIR = hz / 100 is exact.
    let hz = hz();
    let cir = hz * 2 / 201;
    let p = Profile::TrTcm { cir, cbs: 10_000, pir: hz / 100, pbs: 10_000 };
    // 1000-byte packets every 100 000 cycles (1000 periods of 100): rte_meter adds exactly 1000
    // bytes to C and P between packets, so every packet is green. The RFC bucket adds
    // 100 000 · CIR / hz < 1000 bytes to C: green while the committed tokens last.
    let n = 100_000u64;
    let t0 = 7;
    let ts: Vec<u64> = (0..n).map(|k| t0 + k * 100_000).collect();
    let lens = vec![1000u32; n as usize];
    let (theirs, r) = rte(&p, t0, &ts, &lens, None);
    assert_eq!((r.c_period, r.c_bytes_per_period, r.x_period, r.x_bytes_per_period), (100, 1, 100, 1));
    assert!(theirs.iter().all(|&c| c == Color::Green));
    let mine = ours(&p, hz, t0, &ts, &lens, None);
    // C gets CBS + ⌊(n-1) · 100 000 · CIR / hz⌋ bytes by the last packet and never fills again
    // after the first (it gains less than a packet between packets), so with one packet taking
    // 1000 bytes whenever C holds them, the green count is ⌊that / 1000⌋ (at most n); the rest
    // is yellow (P, exact, passes them all).
    let supply = 10_000 + u128::from(n - 1) * 100_000 * u128::from(cir) / u128::from(hz);
    let green = (supply / 1000).min(u128::from(n)) as usize;
    assert_eq!(count(&mine), [green, n as usize - green, 0]);
    let diff = differences(&mine, &theirs);
    assert_eq!(diff, n as usize - green);
    // About 0.5% of the packets after the first 10: (n - 10) · 0.5 / 100.5.
    println!("hz {hz}: CIR {cir} B/s rounded to {} B/s by rte_meter; {diff} of {n} packets differ", hz / 100);
    assert!((480..=500).contains(&diff), "{diff}");
}

#[test]
fn tokens_in_chunks_above_hz_over_100() {
    // CIR = hz / 4 bytes/s (10 Gbit/s on a 5 GHz TSC): hz / CIR = 4 < 100, so rte_meter adds
    // ⌈100 · CIR / hz⌉ = 25 bytes every ⌊hz · 25 / CIR⌋ = 100 cycles. The rate is exact; only
    // the delivery is coarser.
    let hz = hz();
    let p = Profile::SrTcm { cir: hz / 4, cbs: 5, ebs: 0 };
    // 5-byte packets every 20 cycles: the RFC bucket gains exactly 5 bytes between packets
    // (all green). rte_meter gains 25 bytes at the end of each 100-cycle period, of which a
    // 5-byte bucket keeps 5: green at k = 0 and whenever 20·k is a multiple of 100, else red.
    let n = 50_001u64;
    let ts: Vec<u64> = (0..n).map(|k| 1000 + 20 * k).collect();
    let lens = vec![5u32; n as usize];
    let (theirs, r) = rte(&p, 1000, &ts, &lens, None);
    assert_eq!((r.c_period, r.c_bytes_per_period), (100, 25));
    let mine = ours(&p, hz, 1000, &ts, &lens, None);
    assert!(mine.iter().all(|&c| c == Color::Green));
    // Packets 1..=50_000 differ unless k % 5 == 0: 50_000 - 10_000 = 40_000.
    assert_eq!(count(&theirs), [10_001, 0, 40_000]);
    assert_eq!(differences(&mine, &theirs), 40_000);
}

/// Bytes of the packets coloured one of `which`.
fn bytes(colors: &[Color], lens: &[u32], which: &[Color]) -> u64 {
    colors.iter().zip(lens).filter(|(c, _)| which.contains(c)).map(|(_, &l)| u64::from(l)).sum()
}

#[test]
fn ten_gigabit_trtcm_on_a_random_trace() {
    // 10 Gbit/s CIR, 20 Gbit/s PIR, buckets of 64 KiB, a random trace offered above PIR, so both
    // buckets are drained all along: every meter then passes as green exactly what its C bucket
    // was given (CBS + its supply by the last packet, less what is left, under a few packets),
    // and as green or yellow what P was given. Ours is given CIR·t; rte_meter
    // ⌊t / period⌋·bytes_per_period, its rounded rate (2.45 GHz TSC: C 52 B every 101 cycles,
    // 0.9% fast; P 103 B every 100 cycles, 0.94% fast).
    let hz = hz();
    let (cbs, pbs, cir, pir) = (65_536u64, 65_536u64, 1_250_000_000u64, 2_500_000_000u64);
    let p = Profile::TrTcm { cir, cbs, pir, pbs };
    let (ts, lens, _) = trace(2, 1_000_000, hz, 3_125_000_000, 0);
    let t = *ts.last().unwrap();
    let (theirs, r) = rte(&p, 0, &ts, &lens, None);
    let mine = ours(&p, hz, 0, &ts, &lens, None);
    let ours_c = cbs + (u128::from(t) * u128::from(cir) / u128::from(hz)) as u64;
    let ours_p = pbs + (u128::from(t) * u128::from(pir) / u128::from(hz)) as u64;
    let rte_c = cbs + t / r.c_period * r.c_bytes_per_period;
    let rte_p = pbs + t / r.x_period * r.x_bytes_per_period;
    let (g, gy) = ([Color::Green].as_slice(), [Color::Green, Color::Yellow].as_slice());
    for (who, colors, c_given, p_given) in [("ours", &mine, ours_c, ours_p), ("rte_meter", &theirs, rte_c, rte_p)] {
        let (green, passed) = (bytes(colors, &lens, g), bytes(colors, &lens, gy));
        println!("{who}: C given {c_given} B, green {green} B; P given {p_given} B, green+yellow {passed} B");
        assert!(c_given >= green && c_given - green < 3 * 1518, "{who}: C {c_given} green {green}");
        assert!(p_given >= passed && p_given - passed < 3 * 1518, "{who}: P {p_given} passed {passed}");
    }
    // A colour that differs once shifts the buckets, so later packets differ too: the per-packet
    // count is large although the totals differ by the rounding alone.
    println!(
        "hz {hz}: C {} B / {} cycles, P {} B / {} cycles; colours ours {:?}, rte_meter {:?}; {} of {} packets differ",
        r.c_bytes_per_period,
        r.c_period,
        r.x_bytes_per_period,
        r.x_period,
        count(&mine),
        count(&theirs),
        differences(&mine, &theirs),
        ts.len()
    );
    // rte_meter's rate is never below the configured one (its period is floored), and its chunks
    // keep it at most one chunk behind.
    assert!(rte_c + r.c_bytes_per_period > ours_c && rte_p + r.x_bytes_per_period > ours_p);
}

#[test]
fn rte_meter_refuses_what_validate_refuses() {
    hz();
    let bad = [
        Profile::SrTcm { cir: 0, cbs: 1, ebs: 1 },
        Profile::SrTcm { cir: 1, cbs: 0, ebs: 0 },
        Profile::TrTcm { cir: 2, cbs: 1, pir: 1, pbs: 1 },
        Profile::TrTcm { cir: 1, cbs: 0, pir: 1, pbs: 1 },
        Profile::Rfc4115 { cir: 1, cbs: 0, eir: 1, ebs: 1 },
    ];
    for p in bad {
        assert!(p.validate().is_err(), "{p:?}");
        let e = dpdk::meter::run(&p, 0, &[0], &[64], None, &mut [Color::Red]).unwrap_err();
        assert!(e.to_string().starts_with("rte_meter_"), "{e}");
    }
}
