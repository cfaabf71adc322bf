//! NAK rate limiting (spec section 5): at most one NAK per source per 100 ms, so that NAKs can
//! never amplify traffic.
//!
//! The limit is the appliance's, not a worker's: a source can be refused by every worker (an
//! unknown collective on each worker's rx queues, collectives owned by different workers), so
//! all workers consult one table ([`SharedNakLimiter`], behind an `Arc`). The table is
//! lock-free: one 64-bit word per bucket holds the time of the bucket's last NAK, and a NAK is
//! granted by a compare-and-swap of that word, so however many workers refuse one source at
//! once, exactly one of them sends within an interval. Two sources that share a bucket share
//! its interval: the second is suppressed (never more NAKs than the limit allows). No
//! allocation, lock or syscall per packet.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The minimum interval between two NAKs to one source (µs).
pub const NAK_INTERVAL_US: u64 = 100_000;
/// Buckets of the table (32 KiB of words).
const BUCKETS: usize = 4096;

/// A NAK's destination: IP address (IPv4 in the first 4 bytes) and UDP port or RoCEv2 QP.
pub type Source = ([u8; 16], u32);

/// The per-source NAK limiter every worker's aggregator shares (see the module docs).
#[derive(Debug)]
pub struct SharedNakLimiter {
    /// Per bucket: 0 when no NAK went out yet, else the time of the last one (µs) plus one.
    buckets: Box<[AtomicU64]>,
}

/// A new limiter, to share between the workers.
pub fn shared() -> Arc<SharedNakLimiter> {
    Arc::new(SharedNakLimiter::default())
}

impl Default for SharedNakLimiter {
    fn default() -> Self {
        SharedNakLimiter { buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect() }
    }
}

fn bucket_of(k: &Source) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in k.0.iter().chain(&k.1.to_le_bytes()) {
        h = (h ^ *b as u64).wrapping_mul(0x100_0000_01b3);
    }
    (h as usize) % BUCKETS
}

impl SharedNakLimiter {
    /// True if a NAK may go to `src` at `now_us` (µs, the appliance's clock); records it. A
    /// time earlier than the bucket's last NAK (workers' clocks, or two ports' capture times,
    /// need not agree) counts as within the interval: suppressed, never an extra NAK.
    pub fn allow(&self, src: Source, now_us: u64) -> bool {
        let bucket = &self.buckets[bucket_of(&src)];
        let mut cur = bucket.load(Ordering::Acquire);
        loop {
            if cur != 0 && now_us.saturating_sub(cur - 1) < NAK_INTERVAL_US {
                return false;
            }
            match bucket.compare_exchange_weak(cur, now_us.saturating_add(1), Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(seen) => cur = seen,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_nak_per_source_per_interval() {
        let l = SharedNakLimiter::default();
        let a = ([10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], 5000);
        let b = ([10, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], 5000);
        assert!(l.allow(a, 0));
        assert!(!l.allow(a, 99_999));
        assert!(l.allow(b, 50_000));
        assert!(l.allow(a, 100_000));
        assert!(!l.allow(b, 100_000));
        assert!(l.allow(b, 150_000));
    }

    #[test]
    fn colliding_sources_are_suppressed_never_granted_twice() {
        let l = SharedNakLimiter::default();
        // Many sources at the same instant: each gets at most one NAK, whatever collides.
        let mut granted = std::collections::HashMap::new();
        for round in 0..3 {
            for i in 0..5000u32 {
                let s = ([0; 16], i);
                if l.allow(s, round * 10) {
                    *granted.entry(i).or_insert(0) += 1;
                }
            }
        }
        assert!(granted.values().all(|&n| n == 1));
        assert!(granted.len() <= BUCKETS);
    }

    /// A time before the bucket's last NAK (another worker's clock, another port's capture)
    /// suppresses.
    #[test]
    fn an_earlier_time_suppresses() {
        let l = SharedNakLimiter::default();
        let a = ([10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], 5000);
        assert!(l.allow(a, 500_000));
        assert!(!l.allow(a, 450_000));
        assert!(!l.allow(a, 0));
        assert!(l.allow(a, 600_000));
    }

    /// Workers refusing one source at the same instants: exactly one NAK per interval between
    /// them.
    #[test]
    fn racing_workers_grant_one_nak_per_interval() {
        let l = shared();
        let a = ([10, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], 6000);
        let granted: u64 = std::thread::scope(|s| {
            let workers: Vec<_> = (0..4)
                .map(|_| {
                    let l = &l;
                    s.spawn(move || {
                        // Ten intervals, every worker refusing the source 1000 times in each.
                        (0..10u64)
                            .flat_map(|i| (0..1000u64).map(move |k| i * NAK_INTERVAL_US + k))
                            .filter(|&t| l.allow(a, t))
                            .count() as u64
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).sum()
        });
        assert_eq!(granted, 10);
    }

    /// Sources that differ in one byte never share a bucket (FNV-1a: each step xors a byte into
    /// the hash and multiplies by an odd prime, both one-to-one modulo the power-of-two bucket
    /// count), so every worker of a /24, or every port of one host in a 256-port block, refused
    /// at the same instant gets its own NAK.
    #[test]
    fn sources_differing_in_one_byte_each_get_their_nak() {
        let l = SharedNakLimiter::default();
        for host in 1..=254u8 {
            let mut ip = [0; 16];
            ip[..4].copy_from_slice(&[10, 0, 0, host]);
            assert!(l.allow((ip, 5000), 0), "10.0.0.{host}");
        }
        let l = SharedNakLimiter::default();
        let ip = [10, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        for port in 0xC300..=0xC3FFu32 {
            assert!(l.allow((ip, port), 0), "port {port}");
        }
    }
}
