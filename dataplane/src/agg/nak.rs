//! NAK rate limiting (spec section 5): at most one NAK per source per 100 ms, so that NAKs can
//! never amplify traffic. A fixed-size set-associative table: no allocation per packet; when a
//! set is full of sources NAKed within the interval, the NAK is suppressed (never more than the
//! limit allows).
//!
//! The limit is the appliance's, not a worker's: a source can be refused by every worker (an
//! unknown collective on each worker's rx queues, collectives owned by different workers), so
//! all workers consult one table ([`SharedNakLimiter`]). Only refusals take its lock; the path of
//! valid contributions never does.

/// The minimum interval between two NAKs to one source (µs).
pub const NAK_INTERVAL_US: u64 = 100_000;
const SETS: usize = 1024;
const WAYS: usize = 4;

/// A NAK's destination: IP address (IPv4 in the first 4 bytes) and UDP port or RoCEv2 QP.
pub type Source = ([u8; 16], u32);

/// The limiter every worker's aggregator shares.
pub type SharedNakLimiter = std::sync::Arc<std::sync::Mutex<NakLimiter>>;

/// A new limiter to share between workers.
pub fn shared() -> SharedNakLimiter {
    std::sync::Arc::new(std::sync::Mutex::new(NakLimiter::default()))
}

#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    used: bool,
    key: Source,
    last_us: u64,
}

/// Per-source NAK rate limiter.
#[derive(Debug, Clone)]
pub struct NakLimiter {
    table: Vec<[Entry; WAYS]>,
}

impl Default for NakLimiter {
    fn default() -> Self {
        NakLimiter { table: vec![[Entry::default(); WAYS]; SETS] }
    }
}

fn set_of(k: &Source) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in k.0.iter().chain(&k.1.to_le_bytes()) {
        h = (h ^ *b as u64).wrapping_mul(0x100_0000_01b3);
    }
    (h as usize) % SETS
}

impl NakLimiter {
    /// True if a NAK may go to `src` at `now_us`; records it.
    pub fn allow(&mut self, src: Source, now_us: u64) -> bool {
        let set = &mut self.table[set_of(&src)];
        if let Some(e) = set.iter_mut().find(|e| e.used && e.key == src) {
            if now_us.saturating_sub(e.last_us) < NAK_INTERVAL_US {
                return false;
            }
            e.last_us = now_us;
            return true;
        }
        if let Some(e) = set.iter_mut().find(|e| !e.used || now_us.saturating_sub(e.last_us) >= NAK_INTERVAL_US) {
            *e = Entry { used: true, key: src, last_us: now_us };
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_nak_per_source_per_interval() {
        let mut l = NakLimiter::default();
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
    fn a_full_set_suppresses_instead_of_forgetting() {
        let mut l = NakLimiter::default();
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
        assert!(granted.len() <= SETS * WAYS);
    }
}
