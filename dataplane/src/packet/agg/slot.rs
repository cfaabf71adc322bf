//! A slot's state and the spec's rules for one contribution (section 4, rules 1, 2, 3, 4 and 8),
//! without payloads: what to do, not how to sum; and a slot's state for a PROBE (section 7).

use crate::wire::gradient::SlotState;

/// One slot (one chunk of a collective's tensor).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Slot {
    /// A round is in progress.
    pub active: bool,
    /// The round in progress.
    pub round: u32,
    /// Contributions folded into the round in progress.
    pub count: u16,
    /// When the round in progress was last touched (µs, appliance clock).
    pub last_touch_us: u64,
    /// When the round in progress got its first contribution (µs, appliance clock): how late
    /// the others come is measured from it (the straggler view, [`super::straggle`]).
    pub first_us: u64,
    /// A completed round's result is kept.
    pub has_done: bool,
    /// The last completed round.
    pub done_round: u32,
}

/// What a contribution `(round r, rank k)` does to a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Rule 3: `r` completed already: answer rank k with the kept result (unicast).
    Resend,
    /// Rule 4: a stale or premature round: drop and NAK (reason 7) carrying this expected round.
    Stale(u32),
    /// Rule 1: rank k already contributed to `r`: drop.
    Duplicate,
    /// Fold it; `first` when it starts the round, `last` when it completes it (rule 2: emit).
    Fold {
        /// The round starts with this contribution (the accumulator starts as it: rule 6).
        first: bool,
        /// The round completes with this contribution.
        last: bool,
    },
}

impl Slot {
    /// Rule 8: reclaims the round in progress if it was last touched more than `timeout_us`
    /// before `now_us` (its partial sum is discarded; later contributions start it afresh).
    /// True if it did.
    #[inline]
    pub fn reclaim(&mut self, now_us: u64, timeout_us: u64) -> bool {
        if self.active && now_us.saturating_sub(self.last_touch_us) > timeout_us {
            self.active = false;
            self.count = 0;
            return true;
        }
        false
    }

    /// The answer to a PROBE (spec section 7): the slot's state and the STATUS `round`, for a
    /// prober whose contribution to the round in progress is in when `seen`. Reclaim a
    /// timed-out round first ([`Slot::reclaim`]); this reads the slot and never touches it.
    #[inline]
    pub fn status(&self, seen: bool) -> (u8, u32) {
        if self.active {
            let state = if seen { SlotState::IN_PROGRESS_WITH_RANK } else { SlotState::IN_PROGRESS_WITHOUT_RANK };
            (state, self.round)
        } else if self.has_done {
            (SlotState::COMPLETED, self.done_round.wrapping_add(1))
        } else {
            (SlotState::NO_HISTORY, 0)
        }
    }

    /// Applies rules 8, 3, 4 and 1 for a contribution of round `r` from a rank whose bit is
    /// `seen` (already contributed to the round in progress), at `now_us`, with `n` workers and
    /// `timeout_us`. Returns the verdict and whether a timed-out round was reclaimed first.
    /// On `Fold`, the slot is updated (round started, count, touch time); on `last` it is
    /// marked complete with `r` as its kept round. The caller keeps the rank bitmap: on `first`
    /// it clears it, on `Fold` sets rank k's bit.
    pub fn admit(&mut self, r: u32, seen: bool, now_us: u64, n: usize, timeout_us: u64) -> (Verdict, bool) {
        let reclaimed = self.reclaim(now_us, timeout_us);
        if self.has_done && r == self.done_round {
            return (Verdict::Resend, reclaimed);
        }
        let first = !self.active;
        if first {
            if self.has_done && r != self.done_round.wrapping_add(1) {
                return (Verdict::Stale(self.done_round.wrapping_add(1)), reclaimed);
            }
            self.active = true;
            self.round = r;
            self.count = 0;
            self.first_us = now_us;
        } else if r != self.round {
            return (Verdict::Stale(self.round), reclaimed);
        }
        self.last_touch_us = now_us;
        if !first && seen {
            return (Verdict::Duplicate, reclaimed);
        }
        self.count += 1;
        let last = self.count as usize == n;
        if last {
            self.active = false;
            self.has_done = true;
            self.done_round = r;
            self.count = 0;
        }
        (Verdict::Fold { first, last }, reclaimed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: u64 = 1_000_000;

    #[test]
    fn a_round_completes_once_then_resends() {
        let mut s = Slot::default();
        assert_eq!(s.admit(5, false, 0, 3, T).0, Verdict::Fold { first: true, last: false });
        assert_eq!(s.admit(5, true, 1, 3, T).0, Verdict::Duplicate);
        assert_eq!(s.admit(5, false, 2, 3, T).0, Verdict::Fold { first: false, last: false });
        assert_eq!(s.admit(5, false, 3, 3, T).0, Verdict::Fold { first: false, last: true });
        assert_eq!((s.has_done, s.done_round, s.active), (true, 5, false));
        // Rule 3: late contributions for 5 get the kept result.
        assert_eq!(s.admit(5, false, 4, 3, T).0, Verdict::Resend);
        // Rule 4: only 6 starts the next round; 4 and 7 are stale/premature, NAK says 6.
        assert_eq!(s.admit(4, false, 5, 3, T).0, Verdict::Stale(6));
        assert_eq!(s.admit(7, false, 5, 3, T).0, Verdict::Stale(6));
        assert_eq!(s.admit(6, false, 6, 3, T).0, Verdict::Fold { first: true, last: false });
        // While 6 is in progress: 5 is still answered, 7 is premature (NAK says 6).
        assert_eq!(s.admit(5, false, 7, 3, T).0, Verdict::Resend);
        assert_eq!(s.admit(7, false, 7, 3, T).0, Verdict::Stale(6));
    }

    #[test]
    fn first_contribution_takes_its_round_and_rounds_wrap() {
        let mut s = Slot::default();
        assert_eq!(s.admit(u32::MAX, false, 0, 1, T).0, Verdict::Fold { first: true, last: true });
        assert_eq!(s.admit(0, false, 1, 1, T).0, Verdict::Fold { first: true, last: true });
        assert_eq!(s.done_round, 0);
    }

    /// Section 7's table: state and round of each kind of slot, a timed-out round reclaimed
    /// first, and asking never changes the slot.
    #[test]
    fn status_of_each_state() {
        let mut s = Slot::default();
        assert_eq!(s.status(false), (SlotState::NO_HISTORY, 0));
        s.admit(u32::MAX, false, 0, 2, T);
        let before = s;
        assert_eq!(s.status(false), (SlotState::IN_PROGRESS_WITHOUT_RANK, u32::MAX));
        assert_eq!(s.status(true), (SlotState::IN_PROGRESS_WITH_RANK, u32::MAX));
        assert_eq!(s, before, "a status reads the slot only");
        s.admit(u32::MAX, false, 1, 2, T);
        assert_eq!(s.status(false), (SlotState::COMPLETED, 0), "r + 1 wraps");
        assert_eq!(s.status(true), (SlotState::COMPLETED, 0));
        s.admit(0, false, 10, 2, T);
        assert_eq!(s.status(true), (SlotState::IN_PROGRESS_WITH_RANK, 0));
        // Exactly the timeout is not past it; past it the round is reclaimed, the kept result
        // stays: completed again, expecting 0.
        assert!(!s.reclaim(10 + T, T));
        assert!(s.reclaim(11 + T, T));
        assert!(!s.reclaim(12 + T, T), "reclaimed once");
        assert_eq!(s.status(true), (SlotState::COMPLETED, 0));
        // Without history, a reclaimed round leaves no history.
        let mut s = Slot::default();
        s.admit(4, false, 0, 2, T);
        assert!(s.reclaim(T + 1, T));
        assert_eq!(s.status(false), (SlotState::NO_HISTORY, 0));
    }

    #[test]
    fn timeout_reclaims_a_stale_partial_round() {
        let mut s = Slot::default();
        s.admit(1, false, 0, 2, T);
        // Exactly the timeout is not past it.
        assert_eq!(s.admit(1, true, T, 2, T), (Verdict::Duplicate, false));
        // Past it: reclaimed, and this contribution starts the round afresh.
        assert_eq!(s.admit(1, true, 2 * T + 1, 2, T), (Verdict::Fold { first: true, last: false }, true));
        assert_eq!(s.count, 1);
        // With history, a reclaimed round is restarted only by the expected round.
        let mut s = Slot { has_done: true, done_round: 9, ..Default::default() };
        s.admit(10, false, 0, 2, T);
        assert_eq!(s.admit(11, false, 5 * T, 2, T), (Verdict::Stale(10), true));
        assert_eq!(s.admit(10, false, 5 * T, 2, T).0, Verdict::Fold { first: true, last: false });
    }
}
