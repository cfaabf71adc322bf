//! The port shaper: a token bucket ([`TokenBucket`]) filled at the port rate (bytes/s) that each
//! frame pays for with its length without FCS plus [`FRAME_OVERHEAD`] bytes (FCS 4, preamble and
//! SFD 8, inter-frame gap 12: what the frame occupies on the wire, `rte_sched`'s default
//! `frame_overhead`), so the rate is the line rate the port may use.
//!
//! The bucket is exact in integers (no fraction of a byte lost to rounding, at any clock) and
//! starts full: the port may send one bucket at once, then the rate.
//!
//! [`FRAME_OVERHEAD`]: super::FRAME_OVERHEAD

use crate::meter::{BucketError, TokenBucket};

/// A port shaper: rate (bytes/s on the wire), burst (bucket size, bytes) and per-frame overhead.
#[derive(Debug, Clone)]
pub(crate) struct Shaper {
    bucket: TokenBucket,
    overhead: u64,
}

impl Shaper {
    /// A shaper at `rate` bytes/s with a bucket of `size` bytes, frames costing `len + overhead`;
    /// time in ticks at `hz` per second, from 0.
    ///
    /// # Errors
    /// As [`TokenBucket::new`]: a rate or clock of 0, or a parameter above its limit.
    pub fn new(rate: u64, size: u64, overhead: u32, hz: u64) -> Result<Self, BucketError> {
        Ok(Shaper { bucket: TokenBucket::new(rate, size, hz, 0)?, overhead: u64::from(overhead) })
    }

    /// What a frame of `len` bytes (without FCS) costs: `len + overhead`.
    #[inline]
    pub fn cost(&self, len: u32) -> u64 {
        u64::from(len) + self.overhead
    }

    /// Pays for a frame of `len` bytes at `now`; false (nothing taken) without enough tokens.
    /// A clock that goes back counts as standing still (the bucket keeps the latest instant).
    #[inline(always)]
    pub fn try_send(&mut self, len: u32, now: u64) -> bool {
        self.bucket.refill(now);
        self.bucket.try_take(self.cost(len))
    }

    /// The earliest tick, at or after `now`, at which a frame of `len` bytes can be paid for;
    /// `None` if never (cost above the bucket size).
    pub fn ready_at(&self, len: u32, now: u64) -> Option<u64> {
        let now = self.bucket.last().max(now);
        match self.bucket.ticks_until(self.cost(len), now) {
            u64::MAX => None,
            wait => Some(now.saturating_add(wait)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1 Gb/s (125e6 bytes/s) on a 1 GHz clock: a full bucket of 10000 bytes, then exactly one
    /// 1000-byte frame (+24) each 8192 ns.
    #[test]
    fn frames_pay_their_length_plus_overhead_at_the_rate() {
        let mut s = Shaper::new(125_000_000, 10_000, 24, 1_000_000_000).unwrap();
        let mut sent = 0u64;
        while s.try_send(1000, 0) {
            sent += 1024;
        }
        assert_eq!(sent, 9 * 1024, "a full bucket of 10000 bytes holds 9 frames of 1024");
        // 784 bytes left; 1024 - 784 = 240 bytes at 0.125 bytes/ns: 1920 ns.
        assert_eq!(s.ready_at(1000, 0), Some(1920));
        assert!(!s.try_send(1000, 1919));
        assert!(s.try_send(1000, 1920));
        assert_eq!(s.ready_at(1000, 1920), Some(1920 + 8192));
        assert_eq!(s.ready_at(10_000, 0), None, "10024 bytes never fit a 10000-byte bucket");
        // A clock that goes back stands still.
        assert!(!s.try_send(1000, 5));
        assert_eq!(s.ready_at(1000, 5), Some(1920 + 8192));
    }

    /// A rate that does not divide the clock: 3 bytes/s at 7 ticks/s, 1-byte frames without
    /// overhead: 3000 frames over 1000 s, none lost to rounding.
    #[test]
    fn no_rounding_loss() {
        let mut s = Shaper::new(3, 3, 0, 7).unwrap();
        let mut got = 0;
        for t in 0..=7000u64 {
            while s.try_send(1, t) {
                got += 1;
            }
        }
        assert_eq!(got, 3 + 3000, "the full bucket, then 3 bytes/s over 1000 s");
        assert_eq!(s.ready_at(1, 7000), Some(7000 + 3), "1 byte = 7/3 ticks, rounded up");
    }
}
