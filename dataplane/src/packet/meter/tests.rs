//! Meter tests: colours worked out by hand from the RFC text, the refused profiles, and a
//! property test against a reference model that counts the RFCs' increments in exact rational
//! arithmetic.

use super::*;
use proptest::prelude::*;

const NS: u64 = 1_000_000_000;
const G: Color = Color::Green;
const Y: Color = Color::Yellow;
const R: Color = Color::Red;

fn count(colors: &[Color]) -> [usize; 3] {
    let mut n = [0; 3];
    for c in colors {
        n[*c as usize] += 1;
    }
    n
}

#[test]
fn color_values_are_v1model_and_rte_color() {
    assert_eq!([G as u8, Y as u8, R as u8], [0, 1, 2]);
    assert_eq!(Color::from_u8(1), Some(Y));
    assert_eq!(Color::from_u8(3), None);
}

#[test]
fn trtcm_at_one_kilobyte_per_second() {
    // trTCM CIR 1000 B/s, CBS 1500 B, PIR 2000 B/s, PBS 3000 B; 100-byte packets every 100 µs
    // (k = 0..99_999, t = k·100 µs, 10 s, 1 MB/s offered) on a ns clock.
    // Before packet k, Tp = 3000 - 100·(non-red so far) + ⌊0.2k⌋ and
    //                  Tc = 1500 - 100·(green so far)   + ⌊0.1k⌋.
    // k = 0..14: Tc >= 100 (k = 14: 1500 - 1400 + 1 = 101) → 15 green.
    // k = 15..29: Tc = 1 .. 2 < 100, Tp >= 100 (k = 29: 3000 - 2900 + 5 = 105) → 15 yellow.
    // k = 30: Tp = 6 → red; then Tp reaches 100 again when ⌊0.2k⌋ = 100·m, at k = 500·m
    // (m = 1..199, k <= 99_999): 199 more non-red packets. At k = 500·m,
    // Tc = 1500 - 100·(15 + ⌊(m-1)/2⌋) + 50·m: 50 for odd m (yellow), 100 for even m (green).
    // Green: 15 + 99 = 114, yellow: 15 + 100 = 115, red: 100_000 - 229 = 99_771.
    let p = Profile::TrTcm { cir: 1000, cbs: 1500, pir: 2000, pbs: 3000 };
    let mut m = Meter::new(&p, NS, 0).unwrap();
    let colors: Vec<Color> = (0..100_000u64).map(|k| m.color_blind(k * 100_000, 100)).collect();
    assert_eq!(count(&colors), [114, 115, 99_771]);
    assert_eq!(&colors[..31], &[[G; 15].as_slice(), &[Y; 15], &[R]].concat()[..]);
    assert_eq!((colors[500], colors[1000], colors[1500], colors[99_500]), (Y, G, Y, Y));
}

#[test]
fn srtcm_at_ten_gigabit() {
    // srTCM CIR 1.25e9 B/s (10 Gbit/s), CBS 15000 B, EBS 30000 B, on a 3 GHz TSC. 1500-byte
    // packets every 1800 ticks (600 ns: 20 Gbit/s offered), k = 0..9_999.
    // C gains 1.25e9·1800/3e9 = 750 B per packet. Before packet k (all green so far),
    // Tc = 15000 - 750·k >= 1500 for k <= 18 → 19 green, Tc = 0 after k = 18.
    // Then Tc = 750 at odd k (yellow from E while Te >= 1500: 30000/1500 = 20 of them,
    // k = 19, 21, .., 57; red from k = 59) and 1500 at even k (green). C is never full again, so
    // E gains nothing.
    // Green: 19 + 4990 (even k in 20..=9998) = 5009, yellow 20, red (odd k in 59..=9999) 4971.
    let p = Profile::SrTcm { cir: 1_250_000_000, cbs: 15_000, ebs: 30_000 };
    let mut m = Meter::new(&p, 3_000_000_000, 0).unwrap();
    let colors: Vec<Color> = (0..10_000u64).map(|k| m.color_blind(k * 1800, 1500)).collect();
    assert_eq!(count(&colors), [5009, 20, 4971]);
    assert_eq!((colors[18], colors[19], colors[20], colors[57], colors[58], colors[59]), (G, Y, G, Y, G, R));
}

#[test]
fn srtcm_overflow_of_c_fills_e() {
    // srTCM CIR 1000 B/s, CBS 100, EBS 1000; 100-byte packets, ns clock.
    // t = 0: 1 green (Tc 100 → 0), 10 yellow (Te 1000 → 0), then red.
    // By t = 1.1 s, 1100 increments: the first 100 refill C, the other 1000 overflow into E.
    let p = Profile::SrTcm { cir: 1000, cbs: 100, ebs: 1000 };
    let mut m = Meter::new(&p, NS, 0).unwrap();
    let burst = |m: &mut Meter, t| (0..12).map(|_| m.color_blind(t, 100)).collect::<Vec<_>>();
    let expect = [[G].as_slice(), &[Y; 10], &[R]].concat();
    assert_eq!(burst(&mut m, 0), expect);
    assert_eq!(burst(&mut m, 1_100_000_000), expect);
    // RFC 4115 with the same committed bucket: E fills at its own rate only (EIR 500 B/s,
    // 1.1 s → 550 bytes: 5 yellow).
    let p = Profile::Rfc4115 { cir: 1000, cbs: 100, eir: 500, ebs: 1000 };
    let mut m = Meter::new(&p, NS, 0).unwrap();
    assert_eq!(burst(&mut m, 0), expect);
    assert_eq!(burst(&mut m, 1_100_000_000), [[G].as_slice(), &[Y; 5], &[R; 6]].concat());
}

#[test]
fn color_aware_never_lightens_a_packet() {
    // trTCM CIR 1000, CBS 1000, PIR 2000, PBS 2000, all buckets full at t = 0.
    let p = Profile::TrTcm { cir: 1000, cbs: 1000, pir: 2000, pbs: 2000 };
    let mut m = Meter::new(&p, NS, 0).unwrap();
    // Red in: red, takes nothing. Yellow in with Tc and Tp full: yellow, takes from P only
    // (RFC 2698 §3), 10 × 100 bytes → Tp 1000, Tc still 1000.
    assert_eq!(m.color_aware(0, 100, R), R);
    for _ in 0..10 {
        assert_eq!(m.color_aware(0, 100, Y), Y);
    }
    // Green in: 10 green (Tc 1000 → 0, Tp 1000 → 0), then yellow-in and green-in both red.
    for _ in 0..10 {
        assert_eq!(m.color_aware(0, 100, G), G);
    }
    assert_eq!(m.color_aware(0, 100, Y), R);
    assert_eq!(m.color_aware(0, 100, G), R);
    // srTCM and RFC 4115: yellow in takes E only, never C.
    for p in [
        Profile::SrTcm { cir: 1000, cbs: 100, ebs: 100 },
        Profile::Rfc4115 { cir: 1000, cbs: 100, eir: 1000, ebs: 100 },
    ] {
        let mut m = Meter::new(&p, NS, 0).unwrap();
        assert_eq!(m.color_aware(0, 100, Y), Y, "{p:?}");
        assert_eq!(m.color_aware(0, 100, Y), R, "{p:?}");
        assert_eq!(m.color_aware(0, 100, R), R, "{p:?}");
        assert_eq!(m.color_aware(0, 100, G), G, "{p:?}");
    }
}

#[test]
fn burst_after_days_idle_is_one_full_bucket() {
    // 3 days idle on a 3 GHz TSC (7.776e14 ticks; 1.25e9 B/s · that ≈ 9.7e23, past 64 bits).
    let hz = 3_000_000_000u64;
    let idle = 3 * 86_400 * hz;
    let cases = [
        // (profile, green, yellow) of 1000-byte packets in a burst from full buckets.
        (Profile::SrTcm { cir: 1_250_000_000, cbs: 10_000, ebs: 20_000 }, 10, 20),
        (Profile::TrTcm { cir: 1_250_000_000, cbs: 10_000, pir: 2_500_000_000, pbs: 30_000 }, 10, 20),
        (Profile::Rfc4115 { cir: 1_250_000_000, cbs: 10_000, eir: 1_250_000_000, ebs: 20_000 }, 10, 20),
    ];
    for (p, green, yellow) in cases {
        let mut m = Meter::new(&p, hz, 5).unwrap();
        let expect = [vec![G; green], vec![Y; yellow], vec![R; 5]].concat();
        let burst = |m: &mut Meter, t| (0..green + yellow + 5).map(|_| m.color_blind(t, 1000)).collect::<Vec<_>>();
        assert_eq!(burst(&mut m, 5), expect, "{p:?} at start");
        assert_eq!(burst(&mut m, 5 + idle), expect, "{p:?} after 3 days");
        assert_eq!(burst(&mut m, u64::MAX), expect, "{p:?} at the end of the clock");
    }
}

#[test]
fn time_going_backwards_is_no_time() {
    // trTCM CIR 1000 B/s, CBS 100, PIR 1000, PBS 100; ns clock. Empty at t = 10 s.
    let p = Profile::TrTcm { cir: 1000, cbs: 100, pir: 1000, pbs: 100 };
    let mut m = Meter::new(&p, NS, 10 * NS).unwrap();
    assert_eq!(m.color_blind(10 * NS, 100), G);
    // Earlier instants (another core's clock, a capture out of order): nothing is added, and
    // nothing is lost either.
    assert_eq!(m.color_blind(0, 1), R);
    assert_eq!(m.color_blind(9 * NS, 1), R);
    // 50 ms after 10 s: 50 bytes in both buckets.
    assert_eq!(m.color_blind(10 * NS + 50_000_000, 50), G);
    assert_eq!(m.color_blind(10 * NS + 50_000_000, 1), R);
}

#[test]
fn forbidden_profiles_are_refused_with_the_field() {
    use ProfileError as E;
    let cases: [(Profile, E); 12] = [
        (
            Profile::SrTcm { cir: 0, cbs: 1, ebs: 1 },
            E::ZeroRate { profile: "srTCM", field: "CIR", source_ref: "RFC 2697 §2" },
        ),
        (Profile::SrTcm { cir: 1, cbs: 0, ebs: 0 }, E::NoBurst),
        (
            Profile::TrTcm { cir: 0, cbs: 1, pir: 1, pbs: 1 },
            E::ZeroRate { profile: "trTCM", field: "CIR", source_ref: "RFC 2698 §2" },
        ),
        (
            Profile::TrTcm { cir: 1, cbs: 1, pir: 0, pbs: 1 },
            E::ZeroRate { profile: "trTCM", field: "PIR", source_ref: "RFC 2698 §2" },
        ),
        (Profile::TrTcm { cir: 2, cbs: 1, pir: 1, pbs: 1 }, E::PeakBelowCommitted { pir: 1, cir: 2 }),
        (Profile::TrTcm { cir: 1, cbs: 0, pir: 1, pbs: 1 }, E::ZeroBurst { field: "CBS" }),
        (Profile::TrTcm { cir: 1, cbs: 1, pir: 1, pbs: 0 }, E::ZeroBurst { field: "PBS" }),
        (Profile::Rfc4115 { cir: 0, cbs: 0, eir: 0, ebs: 0 }, E::NoRate),
        (
            Profile::Rfc4115 { cir: 5, cbs: 0, eir: 1, ebs: 1 },
            E::RateWithoutBurst { field: "CBS", rate_field: "CIR", rate: 5 },
        ),
        (
            Profile::Rfc4115 { cir: 1, cbs: 1, eir: 0, ebs: 7 },
            E::BurstWithoutRate { rate_field: "EIR", field: "EBS", size: 7 },
        ),
        (
            Profile::SrTcm { cir: (1 << 40) + 1, cbs: 1, ebs: 1 },
            E::TooLarge { profile: "srTCM", field: "CIR", value: (1 << 40) + 1, max: 1 << 40 },
        ),
        (
            Profile::TrTcm { cir: 1, cbs: 1, pir: 1, pbs: (1 << 29) + 1 },
            E::TooLarge { profile: "trTCM", field: "PBS", value: (1 << 29) + 1, max: 1 << 29 },
        ),
    ];
    for (p, e) in cases {
        assert_eq!(p.validate(), Err(e), "{p:?}");
        assert_eq!(Meter::new(&p, NS, 0).unwrap_err(), MeterError::Profile(e));
    }
    assert_eq!(E::ZeroBurst { field: "PBS" }.field(), "PBS");
    assert_eq!(
        E::PeakBelowCommitted { pir: 1, cir: 2 }.to_string(),
        "trTCM PIR: 1 bytes/s is below CIR (2 bytes/s); must be >= CIR (RFC 2698 §2)"
    );
    // Allowed edge cases: srTCM with one of CBS/EBS 0; RFC 4115 with one rate and its size 0.
    for p in [
        Profile::SrTcm { cir: 1, cbs: 0, ebs: 1 },
        Profile::SrTcm { cir: 1, cbs: 1, ebs: 0 },
        Profile::TrTcm { cir: 1, cbs: 1, pir: 1, pbs: 1 },
        Profile::Rfc4115 { cir: 0, cbs: 0, eir: 1, ebs: 1 },
        Profile::Rfc4115 { cir: 1, cbs: 1, eir: 0, ebs: 0 },
    ] {
        assert_eq!(p.validate(), Ok(()), "{p:?}");
    }
    // A clock of 0 ticks per second.
    let p = Profile::Rfc4115 { cir: 0, cbs: 0, eir: 1, ebs: 1 };
    assert_eq!(Meter::new(&p, 0, 0).unwrap_err(), MeterError::Clock(BucketError::ZeroHz));
    // Burst sizes below the largest frame (1514 bytes).
    let p = Profile::TrTcm { cir: 1000, cbs: 1514, pir: 2000, pbs: 1000 };
    assert_eq!(
        p.check_burst_sizes(1514),
        Err(E::BurstBelowFrame { profile: "trTCM", field: "PBS", size: 1000, frame: 1514, rfc: 2698 })
    );
    assert_eq!(Profile::SrTcm { cir: 1, cbs: 0, ebs: 1514 }.check_burst_sizes(1514), Ok(()));
}

/// The RFCs read literally: a bucket incremented by one at the instants `t0 + k·hz/rate`
/// (k = 1, 2, ...), counted from the start in exact integer arithmetic (u128), with signed token
/// counts compared as the RFCs write them ("Tc(t)-B >= 0").
#[derive(Debug)]
struct RefBucket {
    rate: u128,
    hz: u128,
    t0: u128,
    /// Increments that have happened by the latest instant seen.
    counted: u128,
}

impl RefBucket {
    fn new(rate: u64, hz: u64, t0: u64) -> RefBucket {
        RefBucket { rate: rate.into(), hz: hz.into(), t0: t0.into(), counted: 0 }
    }

    /// How many increments happened since the last call, up to `t` (never earlier than before).
    fn increments(&mut self, t: u64) -> u128 {
        let n = if self.rate == 0 { 0 } else { (u128::from(t).max(self.t0) - self.t0) * self.rate / self.hz };
        let new = n.max(self.counted) - self.counted;
        self.counted = self.counted.max(n);
        new
    }
}

#[derive(Debug)]
struct RefMeter {
    profile: Profile,
    c: RefBucket,
    /// The second bucket (P or E); for srTCM unused (E fills from C).
    x: RefBucket,
    tc: i128,
    tx: i128,
}

impl RefMeter {
    fn new(p: Profile, hz: u64, t0: u64) -> RefMeter {
        let (cr, cs, xr, xs) = match p {
            Profile::SrTcm { cir, cbs, ebs } => (cir, cbs, 0, ebs),
            Profile::TrTcm { cir, cbs, pir, pbs } => (cir, cbs, pir, pbs),
            Profile::Rfc4115 { cir, cbs, eir, ebs } => (cir, cbs, eir, ebs),
        };
        RefMeter {
            profile: p,
            c: RefBucket::new(cr, hz, t0),
            x: RefBucket::new(xr, hz, t0),
            tc: cs.into(),
            tx: xs.into(),
        }
    }

    fn color(&mut self, t: u64, b: u32, in_color: Color) -> Color {
        let b = i128::from(b);
        match self.profile {
            Profile::SrTcm { cbs, ebs, .. } => {
                // "If Tc is less than CBS, Tc is incremented by one, else if Te is less than EBS,
                // Te is incremented by one" — n times.
                let n = self.c.increments(t) as i128;
                let to_c = n.min(i128::from(cbs) - self.tc);
                self.tc += to_c;
                self.tx = (self.tx + (n - to_c)).min(ebs.into());
                if in_color == G && self.tc - b >= 0 {
                    self.tc -= b;
                    G
                } else if in_color != R && self.tx - b >= 0 {
                    self.tx -= b;
                    Y
                } else {
                    R
                }
            }
            Profile::TrTcm { cbs, pbs, .. } => {
                self.tc = (self.tc + self.c.increments(t) as i128).min(cbs.into());
                self.tx = (self.tx + self.x.increments(t) as i128).min(pbs.into());
                if in_color == R || self.tx - b < 0 {
                    R
                } else if in_color == Y || self.tc - b < 0 {
                    self.tx -= b;
                    Y
                } else {
                    self.tx -= b;
                    self.tc -= b;
                    G
                }
            }
            Profile::Rfc4115 { cbs, ebs, .. } => {
                self.tc = (self.tc + self.c.increments(t) as i128).min(cbs.into());
                self.tx = (self.tx + self.x.increments(t) as i128).min(ebs.into());
                if in_color == G && self.tc - b >= 0 {
                    self.tc -= b;
                    G
                } else if in_color != R && self.tx - b >= 0 {
                    self.tx -= b;
                    Y
                } else {
                    R
                }
            }
        }
    }
}

/// Rates from 1 B/s to 100 Gbit/s and a few near the limit; sizes from 0 to a few frames.
fn rate() -> impl Strategy<Value = u64> {
    prop_oneof![1u64..5000, 5000u64..20_000_000, 1_000_000_000u64..12_500_000_001, Just(1 << 40)]
}

fn size() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0u64), 1u64..200, 1000u64..20_000, Just(super::bucket::MAX_SIZE)]
}

fn profile() -> impl Strategy<Value = Profile> {
    prop_oneof![
        (rate(), size(), size()).prop_map(|(cir, cbs, ebs)| Profile::SrTcm { cir, cbs, ebs }),
        (rate(), size(), rate(), size()).prop_map(|(a, cbs, b, pbs)| Profile::TrTcm {
            cir: a.min(b),
            cbs,
            pir: a.max(b),
            pbs
        }),
        (prop_oneof![Just(0u64), rate()], size(), prop_oneof![Just(0u64), rate()], size()).prop_map(
            |(cir, cbs, eir, ebs)| Profile::Rfc4115 {
                cir,
                cbs: if cir == 0 { 0 } else { cbs },
                eir,
                ebs: if eir == 0 { 0 } else { ebs }
            }
        ),
    ]
    .prop_filter("valid", |p| p.validate().is_ok())
}

/// A step of a trace: ticks to move the clock (negative: backwards), packet length, colour in.
fn step() -> impl Strategy<Value = (i64, u32, u8)> {
    (
        prop_oneof![8 => 0i64..5000, 2 => 0i64..10_000_000_000, 1 => -1_000_000i64..0, 1 => Just(i64::MAX)],
        prop_oneof![0u32..5, 0u32..100, 60u32..1515, Just(9000u32)],
        0u8..3,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn meter_equals_the_rfc_read_literally(
        p in profile(),
        hz in prop_oneof![Just(NS), Just(3_000_000_000u64), 1u64..10_000, 1_000_000u64..5_000_000_001],
        t0 in prop_oneof![Just(0u64), 0u64..u64::MAX / 2],
        aware in any::<bool>(),
        steps in prop::collection::vec(step(), 1..300),
    ) {
        let mut m = Meter::new(&p, hz, t0).unwrap();
        let mut r = RefMeter::new(p, hz, t0);
        let mut t = t0;
        for (i, (dt, len, c)) in steps.into_iter().enumerate() {
            t = t.saturating_add_signed(dt);
            let in_color = if aware { Color::from_u8(c).unwrap() } else { G };
            let want = r.color(t, len, in_color);
            let got = m.color_aware(t, len, in_color);
            prop_assert_eq!(got, want, "packet {} at {} ({} bytes, {:?} in)", i, t, len, in_color);
            prop_assert_eq!(m.tokens_bytes(), (r.tc as u64, r.tx as u64), "tokens after packet {}", i);
        }
    }
}
