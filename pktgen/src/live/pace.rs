//! Pacing by the TSC: a credit that grows at the target rate and that each frame spends.

/// A token bucket in the stream's units (packets, or bits at its layer), filled from the TSC.
///
/// At time `t` cycles after [`Pacer::start`], `t * rate / hz` units are due; what has not been
/// spent yet is the budget. A sender that falls behind (the lcore was preempted, the queue was
/// full) catches up in bursts, but never by more than `cap` units (50 ms of the rate, or the
/// `min_cap` given, a burst's worth): beyond that the debt is forgiven and the achieved rate
/// shows the shortfall. (`[pktgen] catch_up_ms` sets the 50 ms.)
#[derive(Debug, Clone, Copy)]
pub struct Pacer {
    per_cycle: f64,
    start: u64,
    spent: f64,
    cap: f64,
    min_cap: f64,
    catch_up_s: f64,
    first: f64,
}

impl Pacer {
    /// A pacer for `rate` units per second on a TSC of `hz` cycles per second, catching up at
    /// most `catch_up_s` seconds of the rate (and at least `min_cap` units).
    pub fn new(rate: f64, hz: u64, min_cap: f64, catch_up_s: f64) -> Pacer {
        Pacer {
            per_cycle: rate / hz as f64,
            start: 0,
            spent: 0.0,
            cap: (rate * catch_up_s).max(min_cap),
            min_cap,
            catch_up_s,
            first: 0.0,
        }
    }

    /// The same pacer with `units` (a frame's cost) to spend at once when it starts, so the
    /// first frame leaves at the start rather than one frame's time later (at 0.001 packets/s,
    /// 1000 s later); the average rate is unchanged from then on.
    #[must_use]
    pub fn first_at_once(mut self, units: f64) -> Pacer {
        self.first = units.min(self.cap);
        self
    }

    /// Changes the rate to `rate` units per second from TSC `now` on: what was due and unspent
    /// until now stays (within the new rate's catch-up cap), then the new rate accrues.
    pub fn set_rate(&mut self, rate: f64, hz: u64, now: u64) {
        let cap = (rate * self.catch_up_s).max(self.min_cap);
        let left = self.budget(now).min(cap);
        self.per_cycle = rate / hz as f64;
        self.cap = cap;
        self.start = now;
        self.spent = -left;
    }

    /// Starts the clock at TSC `t0`.
    pub fn start(&mut self, t0: u64) {
        self.start = t0;
        self.spent = -self.first;
    }

    /// The units that may be spent now, at TSC `now`.
    #[inline(always)]
    pub fn budget(&mut self, now: u64) -> f64 {
        let due = now.saturating_sub(self.start) as f64 * self.per_cycle;
        if due - self.spent > self.cap {
            self.spent = due - self.cap;
        }
        due - self.spent
    }

    /// Records `units` spent.
    #[inline(always)]
    pub fn spend(&mut self, units: f64) {
        self.spent += units;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_follows_the_clock_and_caps_the_debt() {
        // 1000 packets/s on a 1 MHz clock: one packet per 1000 cycles.
        let mut p = Pacer::new(1000.0, 1_000_000, 4.0, 0.05);
        p.start(500);
        assert_eq!(p.budget(500), 0.0);
        assert_eq!(p.budget(1500), 1.0);
        p.spend(1.0);
        assert_eq!(p.budget(3500), 2.0);
        p.spend(2.0);
        // 10 s later: 10000 due, but at most 50 (50 ms) are owed.
        assert_eq!(p.budget(10_003_500), 50.0);
        p.spend(50.0);
        assert_eq!(p.budget(10_004_500), 1.0);
        // Three times the rate from here: 3 per 1000 cycles, the unspent 1 kept.
        p.set_rate(3000.0, 1_000_000, 10_004_500);
        assert_eq!(p.budget(10_004_500), 1.0);
        assert_eq!(p.budget(10_005_500), 4.0);
    }

    /// A pacer that lets the first frame go at once: 0.001 packets/s has a packet to spend at
    /// the start, the next 1000 s later; 1 bit/s and 600-bit frames, one frame's bits at once.
    #[test]
    fn the_first_frame_goes_at_once() {
        let mut p = Pacer::new(1e-3, 1_000_000, 4.0, 0.05).first_at_once(1.0);
        p.start(7);
        assert_eq!(p.budget(7), 1.0);
        p.spend(1.0);
        assert!((p.budget(500_000_007) - 0.5).abs() < 1e-9);
        assert!((p.budget(1_000_000_007) - 1.0).abs() < 1e-9);
        let mut b = Pacer::new(1.0, 1_000_000, 600.0, 0.05).first_at_once(600.0);
        b.start(0);
        assert_eq!(b.budget(0), 600.0);
        let mut none = Pacer::new(1.0, 1_000_000, 600.0, 0.05);
        none.start(0);
        assert_eq!(none.budget(0), 0.0);
    }
}
