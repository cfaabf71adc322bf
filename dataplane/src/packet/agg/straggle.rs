//! The straggler view of a collective: for each rank, how late its contributions arrive after
//! the first contribution of the same slot and round (a log2 histogram, µs of the appliance's
//! clock: the capture time in replays), and how many rounds it completed (it came last, so the
//! round waited for it). The rank that completes most rounds is the one the AllReduce waits for.
//!
//! Kept by the worker that owns the collective (each worker holding a sharded collective's
//! chunks keeps its own, summed for reports), beside its slots; recording is a few integer
//! operations per folded contribution, no allocation.

use crate::log2hist::Log2Hist;

/// Buckets of a lateness histogram ([`Log2Hist`]): up to `2^31` µs and above.
pub const LATE_BUCKETS: usize = 33;

/// One rank's lateness.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RankLateness {
    /// Contributions folded (the first of a round included, at 0 µs).
    pub contributions: u64,
    /// Their lateness summed (µs): with `contributions`, the mean.
    pub late_sum_us: u64,
    /// Rounds this rank completed: its contribution was the last one.
    pub completed_last: u64,
    /// Contributions by lateness (µs).
    pub late: Log2Hist<LATE_BUCKETS>,
}

impl RankLateness {
    /// Counts a contribution `late_us` after its round's first, completing it when `last`.
    #[inline]
    pub fn record(&mut self, late_us: u64, last: bool) {
        self.contributions += 1;
        self.late_sum_us = self.late_sum_us.saturating_add(late_us);
        self.completed_last += last as u64;
        self.late.record(late_us);
    }

    /// Adds `o`'s counts.
    pub fn add(&mut self, o: &RankLateness) {
        self.contributions += o.contributions;
        self.late_sum_us = self.late_sum_us.saturating_add(o.late_sum_us);
        self.completed_last += o.completed_last;
        self.late.add(&o.late);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn means_and_last_completions_come_from_what_was_recorded() {
        let mut r = RankLateness::default();
        for late in [0, 10, 10, 10, 500] {
            r.record(late, late == 500);
        }
        assert_eq!((r.contributions, r.late_sum_us, r.completed_last), (5, 530, 1));
        assert_eq!((r.late.quantile(0.5), r.late.quantile(1.0)), (15, 511));
        let mut s = RankLateness::default();
        s.add(&r);
        s.add(&r);
        assert_eq!((s.contributions, s.completed_last, s.late.0[4]), (10, 2, 6));
    }
}
