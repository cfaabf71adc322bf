//! A histogram in power-of-two buckets, for per-worker distributions recorded on the fast path
//! (a few integer operations, no allocation): bucket 0 holds 0, bucket `b` (1..) holds
//! `2^(b-1) ..= 2^b - 1`, the last bucket everything above. Quantiles are read as the upper
//! bound of their bucket: a value that many recorded values were no larger than.

/// Counts per bucket; `N` buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Log2Hist<const N: usize>(pub [u64; N]);

impl<const N: usize> Default for Log2Hist<N> {
    fn default() -> Self {
        Log2Hist([0; N])
    }
}

impl<const N: usize> Log2Hist<N> {
    /// The bucket of `v`.
    #[inline]
    pub fn bucket_of(v: u64) -> usize {
        ((64 - v.leading_zeros()) as usize).min(N - 1)
    }

    /// The largest value bucket `b` holds (`u64::MAX` for the last one).
    pub fn upper(b: usize) -> u64 {
        match b {
            0 => 0,
            b if b >= N - 1 => u64::MAX,
            b => (1u64 << b) - 1,
        }
    }

    /// Counts `v`.
    #[inline]
    pub fn record(&mut self, v: u64) {
        self.0[Self::bucket_of(v)] += 1;
    }

    /// Values counted.
    pub fn count(&self) -> u64 {
        self.0.iter().sum()
    }

    /// The value at quantile `q` (0..=1), as its bucket's upper bound; 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        let want = ((q.clamp(0.0, 1.0) * self.count() as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (b, n) in self.0.iter().enumerate() {
            seen += n;
            if seen >= want {
                return Self::upper(b);
            }
        }
        0
    }

    /// Adds `o`'s counts.
    pub fn add(&mut self, o: &Self) {
        for (a, b) in self.0.iter_mut().zip(&o.0) {
            *a += b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_powers_of_two_and_quantiles_their_bounds() {
        type H = Log2Hist<33>;
        assert_eq!([0, 1, 2, 3, 4, 7, 8, 1000].map(H::bucket_of), [0, 1, 2, 2, 3, 3, 4, 10]);
        assert_eq!(H::bucket_of(u64::MAX), 32);
        assert_eq!([0, 1, 2, 3, 10, 32].map(H::upper), [0, 1, 3, 7, 1023, u64::MAX]);
        for v in [0u64, 1, 5, 999, 1 << 20] {
            assert!(v <= H::upper(H::bucket_of(v)), "{v}");
        }
        let mut h = H::default();
        for v in [0, 10, 10, 10, 500] {
            h.record(v);
        }
        assert_eq!((h.count(), h.quantile(0.0), h.quantile(0.5), h.quantile(1.0)), (5, 0, 15, 511));
        assert_eq!(H::default().quantile(0.99), 0);
        let mut s = H::default();
        s.add(&h);
        s.add(&h);
        assert_eq!(s.0[4], 6);
    }
}
