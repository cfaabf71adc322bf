//! The port shaper: a token bucket filled at the port rate (bytes/s) that each frame pays for
//! with its length without FCS plus [`FRAME_OVERHEAD`] bytes (FCS 4, preamble and SFD 8,
//! inter-frame gap 12: what the frame occupies on the wire, `rte_sched`'s default
//! `frame_overhead`), so the rate is the line rate the port may use.
//!
//! The bucket is exact in integers: it counts byte × tick units (`bytes × hz`), gaining `rate`
//! per tick, so no fraction of a byte is ever lost to rounding; it starts full.
//!
//! [`FRAME_OVERHEAD`]: super::FRAME_OVERHEAD

/// An integer token bucket: rate in bytes/s, size in bytes, time in ticks at `hz` per second.
#[derive(Debug, Clone)]
struct Bucket {
    rate: u64,
    hz: u64,
    /// Size in byte-ticks (`size × hz`).
    size_bt: u128,
    /// Tokens in byte-ticks.
    tokens_bt: u128,
    /// Time of the last update (ticks).
    last: u64,
}

impl Bucket {
    fn new(rate: u64, size: u64, hz: u64) -> Self {
        let size_bt = u128::from(size) * u128::from(hz);
        Bucket { rate, hz, size_bt, tokens_bt: size_bt, last: 0 }
    }

    /// Tokens (byte-ticks) at `now`, without updating.
    fn tokens_at(&self, now: u64) -> u128 {
        let dt = now.saturating_sub(self.last);
        (self.tokens_bt + u128::from(dt) * u128::from(self.rate)).min(self.size_bt)
    }

    /// Takes `bytes` at `now` if the bucket holds them.
    fn try_take(&mut self, bytes: u64, now: u64) -> bool {
        let t = self.tokens_at(now);
        self.tokens_bt = t;
        self.last = self.last.max(now);
        let need = u128::from(bytes) * u128::from(self.hz);
        if t >= need {
            self.tokens_bt = t - need;
            true
        } else {
            false
        }
    }

    /// Ticks from `now` until the bucket holds `bytes` (0 if it does now); `None` if it never
    /// will (more than its size).
    fn ticks_until(&self, bytes: u64, now: u64) -> Option<u64> {
        let need = u128::from(bytes) * u128::from(self.hz);
        if need > self.size_bt {
            return None;
        }
        let have = self.tokens_at(now);
        if have >= need {
            return Some(0);
        }
        let t = (need - have).div_ceil(u128::from(self.rate));
        // `now` may lie before `last` (a clock that went back): count from `last`.
        let wait = t + u128::from(self.last.saturating_sub(now));
        Some(u64::try_from(wait).unwrap_or(u64::MAX))
    }
}

/// A port shaper: rate (bytes/s on the wire), burst (bucket size, bytes) and per-frame overhead.
#[derive(Debug, Clone)]
pub(crate) struct Shaper {
    bucket: Bucket,
    overhead: u64,
}

impl Shaper {
    /// A shaper at `rate` bytes/s with a bucket of `size` bytes, frames costing `len + overhead`;
    /// time in ticks at `hz` per second. `rate` and `hz` are at least 1 (checked by the caller).
    pub fn new(rate: u64, size: u64, overhead: u32, hz: u64) -> Self {
        Shaper { bucket: Bucket::new(rate, size, hz), overhead: u64::from(overhead) }
    }

    /// What a frame of `len` bytes (without FCS) costs: `len + overhead`.
    #[inline]
    pub fn cost(&self, len: u32) -> u64 {
        u64::from(len) + self.overhead
    }

    /// Pays for a frame of `len` bytes at `now`; false (nothing taken) without enough tokens.
    #[inline]
    pub fn try_send(&mut self, len: u32, now: u64) -> bool {
        self.bucket.try_take(self.cost(len), now)
    }

    /// The earliest tick, at or after `now`, at which a frame of `len` bytes can be paid for;
    /// `None` if never (cost above the bucket size).
    pub fn ready_at(&self, len: u32, now: u64) -> Option<u64> {
        let wait = self.bucket.ticks_until(self.cost(len), now)?;
        Some(now.saturating_add(wait))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1 Gb/s (125e6 bytes/s) on a 1 GHz clock: a full bucket of 10000 bytes, then exactly one
    /// 1000-byte frame (+24) each 8192 ns.
    #[test]
    fn bucket_refills_at_the_rate_exactly() {
        let mut s = Shaper::new(125_000_000, 10_000, 24, 1_000_000_000);
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
    }

    /// A rate that does not divide the clock: 3 bytes/s at 7 ticks/s; 3 bytes take 7 ticks, and
    /// no remainder is lost over many refills.
    #[test]
    fn no_rounding_loss() {
        let mut b = Bucket::new(3, 3, 7);
        assert!(b.try_take(3, 0));
        let mut got = 0;
        for t in 1..=7000u64 {
            if b.try_take(1, t) {
                got += 1;
            }
        }
        assert_eq!(got, 3000, "3 bytes/s over 1000 s");
        assert_eq!(b.ticks_until(1, 7000), Some(3), "1 byte = 7/3 ticks, rounded up from the remainder");
    }
}
