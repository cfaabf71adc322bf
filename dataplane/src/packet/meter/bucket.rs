//! An exact integer token bucket: the building block of the meters (RFC 2697, RFC 2698,
//! RFC 4115) and of a port shaper.
//!
//! Units:
//! - a **rate** is in bytes per second;
//! - a **size** (the bucket's depth) and every token count are in bytes (one token = one byte);
//! - time is a clock in **ticks**, with `hz` ticks per second fixed when the bucket is made: the
//!   TSC (`rte_get_tsc_hz()` ticks per second) on a live port, a virtual nanosecond clock
//!   (`hz` = 1_000_000_000) when a capture is replayed.
//!
//! The bucket follows the RFCs' definition literally: its count "is incremented by one `rate`
//! times per second up to `size`" (RFC 2697 §3, RFC 2698 §3, RFC 4115 §3). The increments fall
//! at the fixed instants `start + k·hz/rate` ticks (k = 1, 2, ...), whether the bucket is full or
//! not, so that between two instants `a < b` exactly `⌊(b-start)·rate/hz⌋ - ⌊(a-start)·rate/hz⌋`
//! increments happen. The state is the bucket's **level** in byte·ticks: `tokens·hz + frac`,
//! the whole token count and the fraction of the next token already earned (`frac < hz`). No
//! fraction of a token is ever lost, at 1 kB/s or at 100 Gbit/s (12.5e9 B/s), over any run
//! length. Everything is integer arithmetic, and the fast path has no division: a refill adds
//! `dt·rate` (one multiply), a packet of `B` bytes fits when the level is at least `B·hz` (one
//! more) and takes `B·hz` from it. The limits ([`MAX_SIZE`] bytes, a clock of at most [`MAX_HZ`]
//! ticks per second) keep every level below 2^64. Only a refill that overflows a full bucket
//! splits the overflow into whole tokens and the kept fraction, with a division by `hz` done as
//! a multiply (a divisor precomputed with `strength_reduce`); after a long idle (days, years)
//! the refill goes through 128 bits and cannot overflow.
//!
//! Time that goes backwards (a clock read on another core, a capture out of order) counts as no
//! time passing: the bucket keeps the latest instant it has seen.

use strength_reduce::StrengthReducedU64;

/// The largest rate a bucket accepts: 2^40 bytes/s (about 8.8 Tbit/s).
pub const MAX_RATE: u64 = 1 << 40;
/// The largest size a bucket accepts: 2^29 bytes (512 MiB: 10 ms at 400 Gbit/s).
pub const MAX_SIZE: u64 = 1 << 29;
/// The fastest clock a bucket accepts: 2^34 ticks per second (about 17 GHz; a TSC runs at a few
/// GHz, the replay clock at 1 GHz). With [`MAX_SIZE`], `(size + 1)·hz` stays below 2^64.
pub const MAX_HZ: u64 = 1 << 34;

/// Why a token bucket cannot be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BucketError {
    /// A rate of 0 bytes/s never adds a token.
    #[error("token bucket rate: 0 bytes/s never adds a token; must be > 0")]
    ZeroRate,
    /// A clock of 0 ticks per second does not advance.
    #[error("token bucket clock: 0 ticks per second; must be > 0")]
    ZeroHz,
    /// A parameter above its limit ([`MAX_RATE`], [`MAX_SIZE`], [`MAX_HZ`]).
    #[error("token bucket {what}: {value} is above the limit {max}")]
    TooLarge {
        /// `"rate"` (bytes/s), `"size"` (bytes) or `"hz"` (ticks per second).
        what: &'static str,
        /// The value given.
        value: u64,
        /// The limit.
        max: u64,
    },
}

/// A token bucket of `size` bytes filled at `rate` bytes per second, on a clock of `hz` ticks
/// per second. It starts full.
///
/// Not shared between cores: each worker lcore owns its buckets (no atomics, no locks).
#[derive(Debug, Clone)]
pub struct TokenBucket {
    /// Fill rate, bytes per second (1..=[`MAX_RATE`]).
    rate: u64,
    /// Depth, bytes (0..=[`MAX_SIZE`]).
    size: u64,
    /// Clock, ticks per second (1..=[`MAX_HZ`]).
    hz: u64,
    /// `hz` as a divisor by multiplication (a 64-bit division costs tens of cycles; this, a few).
    hz_div: StrengthReducedU64,
    /// Whole tokens times `hz` plus the part of the next token earned so far (byte·ticks):
    /// `tokens = level / hz <= size`, `frac = level % hz`.
    level: u64,
    /// `size·hz`: the level of a full bucket with no fraction earned.
    full: u64,
    /// `(size + 1)·hz`: every level is below it.
    cap: u64,
    /// The latest instant seen, ticks.
    last: u64,
}

impl TokenBucket {
    /// A full bucket of `size_bytes` filled at `rate_bytes_per_s`, on a clock of `hz` ticks per
    /// second, whose increments are counted from the instant `now` (ticks).
    ///
    /// `size_bytes` may be 0: such a bucket never holds a token, and every token it is given
    /// overflows (the srTCM's C bucket with CBS = 0 passes them all to E).
    ///
    /// Errors: [`BucketError::ZeroRate`], [`BucketError::ZeroHz`], [`BucketError::TooLarge`].
    pub fn new(rate_bytes_per_s: u64, size_bytes: u64, hz: u64, now: u64) -> Result<TokenBucket, BucketError> {
        if rate_bytes_per_s == 0 {
            return Err(BucketError::ZeroRate);
        }
        if hz == 0 {
            return Err(BucketError::ZeroHz);
        }
        for (what, value, max) in
            [("rate", rate_bytes_per_s, MAX_RATE), ("size", size_bytes, MAX_SIZE), ("hz", hz, MAX_HZ)]
        {
            if value > max {
                return Err(BucketError::TooLarge { what, value, max });
            }
        }
        Ok(TokenBucket {
            rate: rate_bytes_per_s,
            size: size_bytes,
            hz,
            hz_div: StrengthReducedU64::new(hz),
            // size <= 2^29 and hz <= 2^34: (size + 1)·hz < 2^64.
            level: size_bytes * hz,
            full: size_bytes * hz,
            cap: (size_bytes + 1) * hz,
            last: now,
        })
    }

    /// The fill rate, bytes per second.
    pub fn rate(&self) -> u64 {
        self.rate
    }

    /// The depth, bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The clock, ticks per second.
    pub fn hz(&self) -> u64 {
        self.hz
    }

    /// The latest instant seen (ticks): the last [`refill`](Self::refill)'s, or the start.
    #[inline]
    pub fn last(&self) -> u64 {
        self.last
    }

    /// The whole tokens (bytes) in the bucket as of the last [`refill`](Self::refill).
    #[inline]
    pub fn tokens_bytes(&self) -> u64 {
        StrengthReducedU64::div_rem(self.level, self.hz_div).0
    }

    /// `bytes` tokens in byte·ticks (the unit of [`holds_scaled`](Self::holds_scaled) and
    /// [`take_scaled`](Self::take_scaled), which save the multiply when buckets on one clock
    /// test the same packet); saturates at `u64::MAX`, which no level reaches.
    #[inline(always)]
    pub fn scaled(&self, bytes: u64) -> u64 {
        bytes.saturating_mul(self.hz)
    }

    /// [`holds`](Self::holds) of `scaled` = [`scaled`](Self::scaled)`(bytes)`.
    #[inline(always)]
    pub fn holds_scaled(&self, scaled: u64) -> bool {
        self.level >= scaled
    }

    /// Takes `scaled` = [`scaled`](Self::scaled)`(bytes)` from a bucket that
    /// [`holds_scaled`](Self::holds_scaled) it.
    #[inline(always)]
    pub fn take_scaled(&mut self, scaled: u64) {
        debug_assert!(self.level >= scaled, "take_scaled of more than the bucket holds");
        self.level -= scaled;
    }

    /// Adds the tokens earned from the last instant seen up to `now` (ticks), up to the bucket's
    /// size. Returns the whole tokens (bytes) that arrived while the bucket was full and were
    /// discarded (RFC 2697's C bucket hands them to E); saturates at `u64::MAX`.
    ///
    /// A `now` before the last instant seen adds nothing and is otherwise ignored.
    ///
    /// Inline, the test of the clock only: packets that arrive within one tick of each other
    /// (most of them, on a µs clock) pay no call, and their caller's code stays small.
    #[inline(always)]
    pub fn refill(&mut self, now: u64) -> u64 {
        if now <= self.last {
            return 0;
        }
        self.refill_to(now)
    }

    /// [`refill`](Self::refill) when time has passed (`now > last`).
    #[inline(never)]
    fn refill_to(&mut self, now: u64) -> u64 {
        let dt = now - self.last;
        self.last = now;
        match dt.checked_mul(self.rate).and_then(|earned| earned.checked_add(self.level)) {
            Some(level) if level < self.cap => {
                self.level = level;
                0
            }
            // Full: keep `size` tokens and the fraction earned; the whole tokens above go.
            Some(level) => {
                let (overflow, frac) = StrengthReducedU64::div_rem(level - self.full, self.hz_div);
                self.level = self.full + frac;
                overflow
            }
            None => self.overflow_wide(dt),
        }
    }

    /// The end of [`refill`](Self::refill) when `level + dt·rate` passes 64 bits (a long idle):
    /// the bucket is full, the overflow (saturated) and the fraction come from 128 bits.
    #[cold]
    fn overflow_wide(&mut self, dt: u64) -> u64 {
        let excess = u128::from(dt) * u128::from(self.rate) + u128::from(self.level) - u128::from(self.full);
        let hz = u128::from(self.hz);
        self.level = self.full + (excess % hz) as u64;
        u64::try_from(excess / hz).unwrap_or(u64::MAX)
    }

    /// Whether the bucket holds `bytes` tokens (RFC 2697 §3's "Tc(t)-B >= 0"), as of the last
    /// [`refill`](Self::refill).
    #[inline]
    pub fn holds(&self, bytes: u64) -> bool {
        self.holds_scaled(self.scaled(bytes))
    }

    /// Takes `bytes` tokens if the bucket holds that many (RFC 2697 §3: "if Tc(t)-B >= 0 ... Tc is
    /// decremented by B"); returns whether it did. Call [`refill`](Self::refill) first.
    #[inline]
    pub fn try_take(&mut self, bytes: u64) -> bool {
        let need = self.scaled(bytes);
        if self.level >= need {
            self.level -= need;
            true
        } else {
            false
        }
    }

    /// Removes `bytes` tokens, down to 0 (the RFCs' "decremented by B down to the minimum value
    /// of 0"). The earned fraction of the next token is kept.
    #[inline]
    pub fn take(&mut self, bytes: u64) {
        let need = self.scaled(bytes);
        if self.level >= need {
            self.level -= need;
        } else {
            self.level = StrengthReducedU64::div_rem(self.level, self.hz_div).1;
        }
    }

    /// How many ticks after `now` the bucket will hold `bytes` tokens if nothing is taken
    /// meanwhile: 0 if it holds them already (as of the last refill and `now`), `u64::MAX` if it
    /// never will (`bytes` above the size). Does not change the bucket. A `now` before the last
    /// instant seen counts as that instant.
    pub fn ticks_until(&self, bytes: u64, now: u64) -> u64 {
        if bytes > self.size {
            return u64::MAX;
        }
        let want = self.scaled(bytes);
        if self.level >= want {
            return 0;
        }
        // The first t (ticks after `last`) with level + t·rate >= bytes·hz.
        let t = (want - self.level).div_ceil(self.rate);
        let at = u128::from(self.last) + u128::from(t);
        let now = u128::from(now.max(self.last));
        u64::try_from(at.saturating_sub(now)).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NS: u64 = 1_000_000_000;

    #[test]
    fn starts_full_and_refuses_bad_parameters() {
        let b = TokenBucket::new(1000, 1500, NS, 7).unwrap();
        assert_eq!(b.tokens_bytes(), 1500);
        assert_eq!(TokenBucket::new(0, 1500, NS, 0).unwrap_err(), BucketError::ZeroRate);
        assert_eq!(TokenBucket::new(1000, 1500, 0, 0).unwrap_err(), BucketError::ZeroHz);
        assert_eq!(
            TokenBucket::new(MAX_RATE + 1, 1500, NS, 0).unwrap_err(),
            BucketError::TooLarge { what: "rate", value: MAX_RATE + 1, max: MAX_RATE }
        );
        assert_eq!(
            TokenBucket::new(1000, MAX_SIZE + 1, NS, 0).unwrap_err(),
            BucketError::TooLarge { what: "size", value: MAX_SIZE + 1, max: MAX_SIZE }
        );
        assert_eq!(
            TokenBucket::new(1000, 1500, MAX_HZ + 1, 0).unwrap_err(),
            BucketError::TooLarge { what: "hz", value: MAX_HZ + 1, max: MAX_HZ }
        );
    }

    #[test]
    fn one_kilobyte_per_second_loses_no_fraction() {
        // 1000 B/s on a ns clock: one byte every 1_000_000 ns. Refilling every 333 ns (a period
        // that never divides it) for 2 s must add exactly 2000 bytes.
        let mut b = TokenBucket::new(1000, 10_000, NS, 0).unwrap();
        assert!(b.try_take(10_000));
        let mut t = 0;
        while t + 333 <= 2 * NS {
            t += 333;
            assert_eq!(b.refill(t), 0);
        }
        // t = 333·⌊2e9/333⌋ = 1_999_999_998 ns → ⌊1_999_999.998·1000/1e6⌋ = 1999 bytes so far.
        assert_eq!(t, 1_999_999_998);
        assert_eq!(b.tokens_bytes(), 1999);
        b.refill(2 * NS);
        assert_eq!(b.tokens_bytes(), 2000);
    }

    #[test]
    fn hundred_gigabit_on_a_5ghz_clock_is_exact() {
        // 12.5e9 B/s at 5e9 ticks/s = 2.5 bytes per tick. 10^9 refills one tick apart would be
        // slow; refill every 7 ticks (17.5 bytes) for 7·10^6 ticks: exactly 17_500_000 bytes.
        let hz = 5_000_000_000;
        let mut b = TokenBucket::new(12_500_000_000, MAX_SIZE, hz, 0).unwrap();
        assert!(b.try_take(MAX_SIZE));
        for k in 1..=1_000_000u64 {
            b.refill(7 * k);
        }
        assert_eq!(b.tokens_bytes(), 17_500_000);
    }

    #[test]
    fn full_bucket_discards_whole_tokens_and_keeps_the_phase() {
        // 3 B/s on a clock of 10 ticks/s: increments at ticks 10/3, 20/3, 10, ... i.e. the k-th at
        // ⌈10k/3⌉ = 4, 7, 10, 14, 17, 20.
        let mut b = TokenBucket::new(3, 2, 10, 0).unwrap();
        // Full: the increments at 4 and 7 are discarded (2 bytes overflow).
        assert_eq!(b.refill(8), 2);
        assert!(b.try_take(2));
        // Next increments at 10 and 14, not 8 + 10/3: the phase is the clock's, not the take's.
        assert_eq!(b.refill(9), 0);
        assert_eq!(b.tokens_bytes(), 0);
        assert_eq!(b.ticks_until(1, 9), 1);
        b.refill(10);
        assert_eq!(b.tokens_bytes(), 1);
        assert_eq!(b.ticks_until(2, 10), 4);
        b.refill(13);
        assert_eq!(b.tokens_bytes(), 1);
        b.refill(14);
        assert_eq!(b.tokens_bytes(), 2);
    }

    #[test]
    fn days_idle_fill_the_bucket_and_no_more() {
        // 12.5e9 B/s on a 4 GHz TSC, 30 days idle: dt·rate ≈ 1.3e26, past 64 bits.
        let hz = 4_000_000_000;
        let mut b = TokenBucket::new(12_500_000_000, 9000, hz, 0).unwrap();
        assert!(b.try_take(9000));
        let days = 30 * 86_400 * hz;
        let overflow = b.refill(days);
        assert_eq!(b.tokens_bytes(), 9000);
        // Earned 12.5e9·30·86400 = 32_400_000_000_000_000 bytes, 9000 of them kept.
        assert_eq!(overflow, 32_400_000_000_000_000 - 9000);
        assert!(b.try_take(9000));
        assert!(!b.try_take(1));
        // 2.5e9 ticks later (past 2^64 / 12.5e9 ≈ 1.47e9 ticks, the wide path) and at the
        // top of the clock, u64::MAX ticks: still full, nothing else.
        b.refill(days + 2_500_000_000);
        assert_eq!(b.tokens_bytes(), 9000);
        assert_eq!(b.refill(u64::MAX), u64::MAX);
        assert_eq!(b.tokens_bytes(), 9000);
    }

    #[test]
    fn the_largest_bucket_on_the_fastest_clock_stays_exact() {
        // MAX_SIZE bytes at MAX_RATE on a MAX_HZ clock: the level reaches (2^29 + 1)·2^34 - 1,
        // just below 2^64. 2^40 B/s on 2^34 ticks/s = 64 bytes per tick.
        let mut b = TokenBucket::new(MAX_RATE, MAX_SIZE, MAX_HZ, 0).unwrap();
        assert!(b.try_take(MAX_SIZE - 100));
        assert_eq!(b.refill(1), 0);
        assert_eq!(b.tokens_bytes(), 164);
        // 2^23 ticks earn 2^29 bytes: 164 + 2^29 - MAX_SIZE = 164 overflow.
        assert_eq!(b.refill(1 + (1 << 23)), 164);
        assert_eq!(b.tokens_bytes(), MAX_SIZE);
        assert!(!b.holds(MAX_SIZE + 1));
        assert!(!b.holds(u64::MAX));
        assert!(b.try_take(MAX_SIZE));
        // dt·rate past 64 bits (2^25 ticks · 2^40 B/s = 2^65 byte·ticks): the wide path.
        assert_eq!(b.refill(1 + (1 << 23) + (1 << 25)), (1 << 31) - MAX_SIZE);
        assert_eq!(b.tokens_bytes(), MAX_SIZE);
    }

    #[test]
    fn time_going_backwards_adds_nothing() {
        let mut b = TokenBucket::new(1000, 1000, NS, 5 * NS).unwrap();
        assert!(b.try_take(1000));
        assert_eq!(b.refill(NS), 0);
        assert_eq!(b.tokens_bytes(), 0);
        // Still counted from 5 s: 10 ms later, 10 bytes.
        b.refill(5 * NS + 10_000_000);
        assert_eq!(b.tokens_bytes(), 10);
        b.refill(0);
        assert_eq!(b.tokens_bytes(), 10);
        assert_eq!(b.ticks_until(11, 0), 1_000_000);
    }

    #[test]
    fn ticks_until_is_the_first_instant_with_enough_tokens() {
        // 1500 B/s, 1 µs clock (1e6 ticks/s): 1 byte per 666.67 ticks.
        let mut b = TokenBucket::new(1500, 3000, 1_000_000, 0).unwrap();
        assert!(b.try_take(3000));
        assert_eq!(b.ticks_until(3001, 0), u64::MAX);
        // 1500 bytes need 1_000_000 ticks exactly.
        let t = b.ticks_until(1500, 0);
        assert_eq!(t, 1_000_000);
        b.refill(t - 1);
        assert_eq!(b.tokens_bytes(), 1499);
        b.refill(t);
        assert_eq!(b.tokens_bytes(), 1500);
        assert_eq!(b.ticks_until(1500, t), 0);
        // 1 more byte: ⌈1e6/1500⌉ = 667 ticks (1500·667 = 1_000_500 >= 1e6).
        assert_eq!(b.ticks_until(1501, t), 667);
        b.take(2000);
        assert_eq!(b.tokens_bytes(), 0);
    }
}
