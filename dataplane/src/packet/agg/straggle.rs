//! The straggler view of a collective: for each rank, how late its contributions arrive after
//! the first contribution of the same slot and round (a log2 histogram, µs of the appliance's
//! clock: the capture time in replays), and how many rounds it completed (it came last, so the
//! round waited for it). The rank that completes most rounds is the one the AllReduce waits for.
//!
//! Kept by the worker that owns the collective, beside its slots; recording is a few integer
//! operations per folded contribution, no allocation.

/// Buckets of a lateness histogram: bucket 0 holds 0 µs, bucket `b` (1..) holds
/// `2^(b-1) ..= 2^b - 1` µs, the last one everything from `2^31` µs on.
pub const LATE_BUCKETS: usize = 33;

/// One rank's lateness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RankLateness {
    /// Contributions folded (the first of a round included, at 0 µs).
    pub contributions: u64,
    /// Their lateness summed (µs): with `contributions`, the mean.
    pub late_sum_us: u64,
    /// Rounds this rank completed: its contribution was the last one.
    pub completed_last: u64,
    /// Contributions by lateness ([`bucket_of`]).
    pub buckets: [u64; LATE_BUCKETS],
}

impl Default for RankLateness {
    fn default() -> Self {
        RankLateness { contributions: 0, late_sum_us: 0, completed_last: 0, buckets: [0; LATE_BUCKETS] }
    }
}

impl RankLateness {
    /// Counts a contribution `late_us` after its round's first, completing it when `last`.
    #[inline]
    pub fn record(&mut self, late_us: u64, last: bool) {
        self.contributions += 1;
        self.late_sum_us = self.late_sum_us.saturating_add(late_us);
        self.completed_last += last as u64;
        self.buckets[bucket_of(late_us)] += 1;
    }

    /// The lateness (µs) at quantile `q` (0..=1), as the upper bound of its bucket: a value that
    /// many contributions were no later than. 0 without contributions.
    pub fn quantile_us(&self, q: f64) -> u64 {
        let want = (q.clamp(0.0, 1.0) * self.contributions as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (b, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= want {
                return bucket_upper(b);
            }
        }
        0
    }

    /// Adds `o`'s counts.
    pub fn add(&mut self, o: &RankLateness) {
        self.contributions += o.contributions;
        self.late_sum_us = self.late_sum_us.saturating_add(o.late_sum_us);
        self.completed_last += o.completed_last;
        for (a, b) in self.buckets.iter_mut().zip(&o.buckets) {
            *a += b;
        }
    }
}

/// The bucket of a lateness of `us` µs.
#[inline]
pub fn bucket_of(us: u64) -> usize {
    ((64 - us.leading_zeros()) as usize).min(LATE_BUCKETS - 1)
}

/// The largest lateness (µs) bucket `b` holds (`u64::MAX` for the last one).
pub fn bucket_upper(b: usize) -> u64 {
    match b {
        0 => 0,
        b if b >= LATE_BUCKETS - 1 => u64::MAX,
        b => (1u64 << b) - 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_powers_of_two() {
        assert_eq!([0, 1, 2, 3, 4, 7, 8, 1000].map(bucket_of), [0, 1, 2, 2, 3, 3, 4, 10]);
        assert_eq!(bucket_of(u64::MAX), LATE_BUCKETS - 1);
        assert_eq!([0, 1, 2, 3, 10].map(bucket_upper), [0, 1, 3, 7, 1023]);
        for us in [0u64, 1, 5, 999, 1 << 20] {
            assert!(us <= bucket_upper(bucket_of(us)), "{us}");
        }
    }

    #[test]
    fn quantiles_and_means_come_from_what_was_recorded() {
        let mut r = RankLateness::default();
        for late in [0, 10, 10, 10, 500] {
            r.record(late, late == 500);
        }
        assert_eq!((r.contributions, r.late_sum_us, r.completed_last), (5, 530, 1));
        assert_eq!(r.quantile_us(0.0), 0);
        assert_eq!(r.quantile_us(0.5), 15); // 10 µs is in bucket 4 (8..=15)
        assert_eq!(r.quantile_us(1.0), 511);
        assert_eq!(RankLateness::default().quantile_us(0.99), 0);
        let mut s = RankLateness::default();
        s.add(&r);
        s.add(&r);
        assert_eq!((s.contributions, s.buckets[4]), (10, 6));
    }
}
