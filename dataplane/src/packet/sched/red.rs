//! Queue-depth ECN marking: RED with a linear marking ramp, as DCQCN switches mark (RFC 3168
//! section 7 for the marking itself; Floyd & Jacobson 1993 for RED's average depth; Zhu et al.,
//! SIGCOMM 2015, for the ramp without RED's count-based spreading).
//!
//! Per class: below `kmin_bytes` nothing is marked; at or above `kmax_bytes` every packet is;
//! between them a packet is marked with probability
//! `pmax × (q − kmin) / (kmax − kmin)`, where `pmax` is in parts per [`P_ONE`] (65536) and the
//! product is computed in integers. `q` is the depth in bytes, instantaneous (`ewma_log2` 0) or
//! RED's exponentially weighted average `avg += (q − avg) >> ewma_log2`, kept in fixed point with
//! [`AVG_FRAC_BITS`] fraction bits as `rte_red` does. A marked ECN-capable packet gets CE; a
//! marked Not-ECT one is dropped (RFC 3168 section 6.1.1.1): [`RedVerdict::Mark`] is the
//! decision, the scheduler applies it.
//!
//! Over an idle period the average decays as if the queue had been sampled empty once per
//! *slot* (the time the port takes to send one frame of the largest size, at the shaper's
//! rate): `avg × (1 − 2^−w)^m` for `m` slots, computed in fixed point when the next packet
//! arrives (RED's `m` of Floyd & Jacobson section 4; `rte_red_mark_queue_empty` and
//! `rte_red_enqueue_empty` in DPDK). A port without a shaper has no line time to count slots
//! in, so there the average moves only when a packet is sampled.

use rand_core::{Rng, SeedableRng};
use rand_pcg::Pcg32;

/// One, as a marking probability: probabilities are parts per 65536.
pub const P_ONE: u32 = 1 << 16;
/// Fraction bits of the fixed-point average depth.
pub const AVG_FRAC_BITS: u32 = 16;
/// Largest accepted `ewma_log2` (a weight of 2^-20).
pub const MAX_EWMA_LOG2: u8 = 20;

/// One class's marking parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedConfig {
    /// Depth (bytes) below which nothing is marked.
    pub kmin_bytes: u64,
    /// Depth (bytes) from which every packet is marked; `kmin_bytes <= kmax_bytes`.
    pub kmax_bytes: u64,
    /// Marking probability just below `kmax_bytes`, in parts per [`P_ONE`] (0..=65536; 655 ≈ 1%).
    pub pmax: u32,
    /// Weight of the depth average as a power of two: 0 uses the instantaneous depth, `w` in
    /// 1..=[`MAX_EWMA_LOG2`] averages with weight 2^-w.
    pub ewma_log2: u8,
}

impl RedConfig {
    /// Checks the parameters.
    ///
    /// # Errors
    /// A message naming the parameter and the accepted range.
    pub fn validate(&self) -> Result<(), String> {
        if self.kmin_bytes > self.kmax_bytes {
            return Err(format!("kmin ({} bytes) must not exceed kmax ({} bytes)", self.kmin_bytes, self.kmax_bytes));
        }
        if self.pmax > P_ONE {
            return Err(format!("pmax must be 0..={P_ONE} (parts per 65536), not {}", self.pmax));
        }
        if self.ewma_log2 > MAX_EWMA_LOG2 {
            return Err(format!("ewma_log2 must be 0..={MAX_EWMA_LOG2}, not {}", self.ewma_log2));
        }
        Ok(())
    }

    /// The marking probability at depth `q` bytes, in parts per [`P_ONE`]: 0 below kmin,
    /// [`P_ONE`] at or above kmax, `pmax × (q − kmin) / (kmax − kmin)` (rounded down) between.
    pub fn probability(&self, q: u64) -> u32 {
        if q < self.kmin_bytes {
            0
        } else if q >= self.kmax_bytes {
            P_ONE
        } else {
            let num = u128::from(self.pmax) * u128::from(q - self.kmin_bytes);
            (num / u128::from(self.kmax_bytes - self.kmin_bytes)) as u32
        }
    }
}

/// A marking decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedVerdict {
    /// Leave the packet as it is.
    Pass,
    /// Congestion: set CE on an ECN-capable packet, drop a Not-ECT one.
    Mark,
}

/// The seeded random source of the marking decisions (PCG-XSH-RR 64/32, O'Neill 2014): the
/// same seed and the same packet sequence give the same marks.
#[derive(Debug, Clone)]
pub struct EcnRng(Pcg32);

impl EcnRng {
    /// A source seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        EcnRng(Pcg32::seed_from_u64(seed))
    }

    /// A uniform draw in 0..[`P_ONE`].
    #[inline]
    pub fn draw(&mut self) -> u32 {
        self.0.next_u32() >> 16
    }
}

/// One class's marking state: its parameters and the average depth.
#[derive(Debug, Clone)]
pub struct Red {
    cfg: RedConfig,
    /// Average depth in bytes × 2^[`AVG_FRAC_BITS`].
    avg_fp: u64,
    /// When the queue last went empty (ticks), until the next arrival.
    idle_since: Option<u64>,
    /// `cfg.probability(0) == 0`: at an average of 0, a packet that finds the queue empty is
    /// never marked.
    zero_passes: bool,
}

impl Red {
    /// Marking with `cfg` (checked with [`RedConfig::validate`] by the caller), average 0.
    pub fn new(cfg: RedConfig) -> Self {
        Red { cfg, avg_fp: 0, idle_since: None, zero_passes: cfg.probability(0) == 0 }
    }

    /// Notes that the queue went empty at `now` (ticks).
    #[inline]
    pub fn went_empty(&mut self, now: u64) {
        self.idle_since = Some(now);
    }

    /// A packet arrives at an empty queue at `now` (ticks): the average decays over the idle
    /// time since [`Red::went_empty`] by one EWMA step towards 0 per `slot_ticks` (none without
    /// a slot, with `ewma_log2` 0, or if the queue never went empty).
    #[inline(always)]
    pub fn wake(&mut self, now: u64, slot_ticks: Option<u64>) {
        let Some(since) = self.idle_since.take() else { return };
        // Nothing to decay (an idle port's packets find the average at 0): no division.
        if self.avg_fp == 0 {
            return;
        }
        let w = u32::from(self.cfg.ewma_log2);
        if let (Some(slot), true) = (slot_ticks.filter(|&s| s > 0), w > 0) {
            self.avg_fp = decay(self.avg_fp, w, now.saturating_sub(since) / slot);
        }
    }

    /// The parameters.
    pub fn config(&self) -> &RedConfig {
        &self.cfg
    }

    /// The average depth in bytes × 2^[`AVG_FRAC_BITS`].
    pub fn avg_fixed(&self) -> u64 {
        self.avg_fp
    }

    /// A packet arrives at an empty queue at `now` (ticks): [`Red::wake`], then the decision on
    /// the decayed average as it stands (with `ewma_log2` 0, on depth 0); without a slot length
    /// (an unshaped port), [`Red::decide`] at depth 0. That is Floyd and
    /// Jacobson's idle branch, `avg ← (1 − w)^m · avg` in place of the EWMA step, not both
    /// (DPDK's `rte_red_enqueue_empty` applies the same decay): an arrival less than one slot
    /// after the queue emptied finds the average unchanged. With the average at 0 (an idle
    /// port's packets) and no marking at depth 0, the packet passes without the arithmetic.
    #[inline(always)]
    pub fn arrive_empty(&mut self, now: u64, slot_ticks: Option<u64>, rng: &mut EcnRng) -> RedVerdict {
        if self.avg_fp == 0 && self.zero_passes {
            self.idle_since = None;
            return RedVerdict::Pass;
        }
        if slot_ticks.is_none_or(|s| s == 0) {
            // No line time to count idle slots in (an unshaped port): the EWMA step of depth 0
            // is all the decay there is.
            self.idle_since = None;
            return self.decide(0, rng);
        }
        self.wake(now, slot_ticks);
        let depth = if self.cfg.ewma_log2 == 0 { 0 } else { self.avg_fp >> AVG_FRAC_BITS };
        self.judge(depth, rng)
    }

    /// Samples depth `q` bytes and returns the depth the decision uses (bytes): `q` itself with
    /// `ewma_log2` 0, else the updated average (rounded down).
    #[inline(always)]
    pub fn sample(&mut self, q: u64) -> u64 {
        let w = u32::from(self.cfg.ewma_log2);
        if w == 0 {
            return q;
        }
        let q_fp = q.min(u64::MAX >> AVG_FRAC_BITS) << AVG_FRAC_BITS;
        if q_fp >= self.avg_fp {
            self.avg_fp += (q_fp - self.avg_fp) >> w;
        } else {
            self.avg_fp -= (self.avg_fp - q_fp) >> w;
        }
        self.avg_fp >> AVG_FRAC_BITS
    }

    /// Samples depth `q` bytes and decides: a random draw only between kmin and kmax.
    #[inline(always)]
    pub fn decide(&mut self, q: u64, rng: &mut EcnRng) -> RedVerdict {
        let depth = self.sample(q);
        self.judge(depth, rng)
    }

    /// The decision at the depth `depth` (bytes) the ramp reads: a random draw only between
    /// kmin and kmax.
    #[inline(always)]
    fn judge(&self, depth: u64, rng: &mut EcnRng) -> RedVerdict {
        match self.cfg.probability(depth) {
            0 => RedVerdict::Pass,
            P_ONE => RedVerdict::Mark,
            p if rng.draw() < p => RedVerdict::Mark,
            _ => RedVerdict::Pass,
        }
    }
}

/// `avg × (1 − 2^−w)^m`, rounded down: the factor raised by squaring in 0.64 fixed point.
/// After `64·2^w` steps the factor is below e^−64 and the average is 0.
fn decay(avg: u64, w: u32, m: u64) -> u64 {
    if m == 0 || avg == 0 {
        return avg;
    }
    if m >= 64u64 << w {
        return 0;
    }
    // Factors in 0.64 fixed point (u64::MAX stands for 1); `mul` rounds down.
    let mul = |a: u64, b: u64| ((u128::from(a) * u128::from(b)) >> 64) as u64;
    let mut base = u64::MAX - (u64::MAX >> w);
    let mut f = u64::MAX;
    let mut e = m;
    while e > 0 && f > 0 {
        if e & 1 == 1 {
            f = mul(f, base);
        }
        base = mul(base, base);
        e >>= 1;
    }
    mul(avg, f)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The decay is the EWMA applied `m` times with q = 0: `avg·(1 − 2^−w)^m` within a part in
    /// 10^9, never above what `m` truncating steps leave, and 0 past `64·2^w` steps.
    #[test]
    fn idle_decay_is_the_ewma_towards_zero_m_times() {
        for w in [1u32, 3, 9, 20] {
            for m in [1u64, 2, 7, 100, 5000] {
                let start = 40_000u64 << AVG_FRAC_BITS;
                let exact = start as f64 * (1.0 - (-(w as f64)).exp2()).powf(m as f64);
                let got = decay(start, w, m) as f64;
                assert!((got - exact).abs() <= exact * 1e-9 + 1.0, "w={w} m={m}: {got} vs {exact}");
                let mut stepwise = start;
                for _ in 0..m.min(5000) {
                    stepwise -= stepwise >> w;
                }
                // Each truncating step keeps a little more (and stalls below 2^w).
                assert!(got <= stepwise as f64 + 1.0, "w={w} m={m}: at least as far as the truncating steps");
            }
            assert_eq!(decay(1 << 40, w, 64 << w), 0);
        }
        assert_eq!(decay(12345, 4, 0), 12345);
    }

    /// A queue that stood above kmax, then idled for many slots, marks nothing on the next
    /// packet at depth 0; without the idle time (or without a slot length) the average still
    /// stands above kmax and the packet is marked.
    #[test]
    fn the_average_decays_over_an_idle_period() {
        let mut rng = EcnRng::new(1);
        let fill = |red: &mut Red| {
            for _ in 0..2000 {
                red.sample(80_000);
            }
            assert!(red.avg_fixed() >> AVG_FRAC_BITS > 79_000);
        };
        // ewma 2^-4, slot 1000 ticks: 200 slots of idle is (15/16)^200 ≈ 2.5e-6 of 80 kB.
        let mut red = Red::new(cfg(4));
        fill(&mut red);
        red.went_empty(10_000);
        red.wake(210_000, Some(1000));
        assert_eq!(red.avg_fixed() >> AVG_FRAC_BITS, 0);
        assert_eq!(red.decide(0, &mut rng), RedVerdict::Pass);

        let mut held = Red::new(cfg(4));
        fill(&mut held);
        held.went_empty(10_000);
        held.wake(210_000, None);
        assert!(held.avg_fixed() >> AVG_FRAC_BITS > 79_000);
        assert_eq!(held.decide(0, &mut rng), RedVerdict::Mark, "one sample at 0 leaves 15/16 of 80 kB");
    }

    /// A packet at an empty queue takes one branch of the average: the idle decay over the
    /// slots since the queue emptied, not that and an EWMA step of 0 too. Less than a slot
    /// after, the average is as it was; two slots after, `(1 − 2^−w)^2` of it.
    #[test]
    fn an_arrival_at_an_empty_queue_decays_the_average_once() {
        let mut rng = EcnRng::new(1);
        for (w, idle, left) in [(1u8, 500u64, 1.0), (1, 2_000, 0.25), (2, 1_999, 0.75), (4, 0, 1.0)] {
            let mut red = Red::new(RedConfig { kmin_bytes: 1_000, kmax_bytes: 1_000, pmax: P_ONE, ewma_log2: w });
            for _ in 0..200 {
                red.sample(2_000);
            }
            let before = red.avg_fixed() as f64;
            red.went_empty(10_000);
            let v = red.arrive_empty(10_000 + idle, Some(1_000), &mut rng);
            let got = red.avg_fixed() as f64;
            assert!((got - before * left).abs() <= 2.0, "w={w} idle={idle}: {got} vs {}", before * left);
            // At or above kmax (1000 bytes) the packet is marked.
            let marked = (before * left) as u64 >> AVG_FRAC_BITS >= 1_000;
            assert_eq!(v == RedVerdict::Mark, marked, "w={w} idle={idle}");
        }
        // Without a slot (an unshaped port) the arrival samples depth 0: one EWMA step.
        let mut red = Red::new(RedConfig { kmin_bytes: 1_000, kmax_bytes: 1_000, pmax: P_ONE, ewma_log2: 1 });
        for _ in 0..200 {
            red.sample(2_000);
        }
        let before = red.avg_fixed();
        red.went_empty(10_000);
        red.arrive_empty(10_000_000, None, &mut rng);
        assert_eq!(red.avg_fixed(), before - (before >> 1));
    }

    fn cfg(ewma_log2: u8) -> RedConfig {
        RedConfig { kmin_bytes: 10_000, kmax_bytes: 50_000, pmax: P_ONE / 5, ewma_log2 }
    }

    #[test]
    fn probability_is_the_linear_ramp() {
        let c = cfg(0);
        assert_eq!(c.probability(0), 0);
        assert_eq!(c.probability(9_999), 0);
        assert_eq!(c.probability(10_000), 0);
        assert_eq!(c.probability(30_000), 6553, "halfway: pmax/2 = 13107/2 rounded down");
        assert_eq!(c.probability(49_999), (13107u64 * 39_999 / 40_000) as u32);
        assert_eq!(c.probability(50_000), P_ONE);
        assert_eq!(c.probability(u64::MAX), P_ONE);
    }

    #[test]
    fn validate_names_the_parameter() {
        let mut c = cfg(0);
        c.kmin_bytes = 60_000;
        assert!(c.validate().unwrap_err().contains("kmin"));
        let mut c = cfg(0);
        c.pmax = P_ONE + 1;
        assert!(c.validate().unwrap_err().contains("pmax"));
        assert!(cfg(21).validate().unwrap_err().contains("ewma_log2"));
        assert_eq!(cfg(20).validate(), Ok(()));
    }

    /// Below kmin nothing is marked, at or above kmax everything is, whatever the draws.
    #[test]
    fn outside_the_ramp_the_decision_is_certain() {
        let mut red = Red::new(cfg(0));
        let mut rng = EcnRng::new(7);
        for q in (0..10_000).step_by(97) {
            assert_eq!(red.decide(q, &mut rng), RedVerdict::Pass, "q={q}");
        }
        for q in (50_000..200_000).step_by(997) {
            assert_eq!(red.decide(q, &mut rng), RedVerdict::Mark, "q={q}");
        }
    }

    /// Between kmin and kmax, the marked fraction of a seeded run is within 3 sigma of the
    /// binomial's mean, at several depths.
    #[test]
    fn between_the_thresholds_the_marked_fraction_follows_the_ramp() {
        let c = cfg(0);
        for (seed, q) in [(1u64, 12_000u64), (2, 20_000), (3, 30_000), (4, 45_000), (5, 49_000)] {
            let mut red = Red::new(c);
            let mut rng = EcnRng::new(seed);
            let n = 200_000u64;
            let marked = (0..n).filter(|_| red.decide(q, &mut rng) == RedVerdict::Mark).count() as f64;
            let p = 0.2 * (q - 10_000) as f64 / 40_000.0;
            let mean = n as f64 * p;
            let sigma = (n as f64 * p * (1.0 - p)).sqrt();
            assert!((marked - mean).abs() <= 3.0 * sigma, "q={q}: {marked} marked, expected {mean} ± {}", 3.0 * sigma);
        }
    }

    /// The same seed gives the same decisions; another seed does not.
    #[test]
    fn a_seed_reproduces_the_marks() {
        let run = |seed| {
            let mut red = Red::new(cfg(0));
            let mut rng = EcnRng::new(seed);
            (0..1000).map(|_| red.decide(30_000, &mut rng) == RedVerdict::Mark).collect::<Vec<_>>()
        };
        assert_eq!(run(42), run(42));
        assert_ne!(run(42), run(43));
    }

    /// From 0, a constant depth q gives avg_n = q (1 − (1 − 2^-w)^n), up to the truncation of
    /// each step (less than 2^-16 byte per step).
    #[test]
    fn ewma_converges_as_the_formula_says() {
        for w in [1u8, 4, 9] {
            let mut red = Red::new(cfg(w));
            let q = 40_000u64;
            for n in 1..=3000u32 {
                red.sample(q);
                let want = q as f64 * (1.0 - (1.0 - (-(w as f64)).exp2()).powi(n as i32));
                let got = red.avg_fixed() as f64 / f64::from(1u32 << AVG_FRAC_BITS);
                assert!((got - want).abs() <= n as f64 / 65536.0 + 1e-9, "w={w} n={n}: {got} vs {want}");
            }
            // And back down towards an empty queue.
            let top = red.avg_fixed() as f64 / 65536.0;
            for n in 1..=500u32 {
                red.sample(0);
                let want = top * (1.0 - (-(w as f64)).exp2()).powi(n as i32);
                let got = red.avg_fixed() as f64 / 65536.0;
                assert!((got - want).abs() <= n as f64 / 65536.0 + 1e-6, "w={w} down n={n}: {got} vs {want}");
            }
        }
    }

    /// With averaging, a burst that lifts the instantaneous depth above kmax for one packet is
    /// not marked, as RED intends: the average has not followed yet.
    #[test]
    fn the_average_filters_a_short_burst() {
        let mut red = Red::new(cfg(9));
        let mut rng = EcnRng::new(1);
        assert_eq!(red.decide(200_000, &mut rng), RedVerdict::Pass);
        assert_eq!(red.avg_fixed() >> AVG_FRAC_BITS, 200_000 >> 9);
        let mut instant = Red::new(cfg(0));
        assert_eq!(instant.decide(200_000, &mut rng), RedVerdict::Mark);
    }
}
