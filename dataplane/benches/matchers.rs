//! Lookup rates of the table matchers.
//!
//! `cargo bench -p dataplane --no-default-features --bench matchers`
//!
//! Each benchmark looks up a batch of 1024 precomputed keys (independent lookups, as in a burst
//! of packets) and reports lookups per second.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use dataplane::table::exact::ExactMatcher;
use dataplane::table::lpm::LpmMatcher;
use dataplane::table::ternary::{RangeCond, TernaryMatcher};
use std::hint::black_box;

/// Keys per measured batch.
const BATCH: usize = 1024;

/// xorshift64*: reproducible keys without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Runs `lookup` over every key of `keys` per iteration.
fn bench_batch<K>(c: &mut Criterion, group: &str, name: &str, keys: &[K], lookup: impl Fn(&K) -> Option<u32>) {
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(keys.len() as u64));
    g.bench_function(name, |b| {
        b.iter(|| {
            let mut found = 0u32;
            for k in keys {
                found = found.wrapping_add(lookup(black_box(k)).unwrap_or(0));
            }
            found
        })
    });
    g.finish();
}

/// Exact match on 6-byte MAC addresses, 1k entries: hits and misses.
fn exact(c: &mut Criterion) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut t = ExactMatcher::new(6).unwrap();
    let mut macs = Vec::new();
    while macs.len() < 1000 {
        let m: [u8; 6] = rng.next().to_be_bytes()[2..].try_into().unwrap();
        if t.insert(&m, macs.len() as u32).is_ok() {
            macs.push(m);
        }
    }
    let hits: Vec<[u8; 6]> = (0..BATCH).map(|_| macs[rng.below(1000) as usize]).collect();
    let misses: Vec<[u8; 6]> = (0..BATCH)
        .map(|_| rng.next().to_be_bytes()[2..].try_into().unwrap())
        .filter(|m: &[u8; 6]| t.lookup(m).is_none())
        .collect();
    bench_batch(c, "exact_mac_1k", "hit", &hits, |k| t.lookup(k));
    bench_batch(c, "exact_mac_1k", "miss", &misses, |k| t.lookup(k));

    // A 13-byte IPv4 5-tuple (two words), 100k flows.
    let mut t = ExactMatcher::new(13).unwrap();
    let mut flows = Vec::new();
    while flows.len() < 100_000 {
        let mut k = [0u8; 13];
        k[..8].copy_from_slice(&rng.next().to_be_bytes());
        k[8..].copy_from_slice(&rng.next().to_be_bytes()[..5]);
        if t.insert(&k, flows.len() as u32).is_ok() {
            flows.push(k);
        }
    }
    let hits: Vec<[u8; 13]> = (0..BATCH).map(|_| flows[rng.below(100_000) as usize]).collect();
    bench_batch(c, "exact_5tuple_100k", "hit", &hits, |k| t.lookup(k));
}

/// LPM on IPv4 with 10k random prefixes (lengths 8..=32, biased to /24 as in real tables, plus
/// a default route), looked up with random addresses and with addresses inside the prefixes.
fn lpm(c: &mut Criterion) {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut t = LpmMatcher::new(4, 0..4).unwrap();
    t.insert(&[0; 4], 0, 0).unwrap();
    let mut prefixes = Vec::new();
    while prefixes.len() < 10_000 {
        let len = match rng.below(4) {
            0 => 8 + rng.below(16) as u8,
            1 | 2 => 24,
            _ => 25 + rng.below(8) as u8,
        };
        let a = (rng.next() as u32).to_be_bytes();
        if t.insert(&a, len, prefixes.len() as u32 + 1).is_ok() {
            prefixes.push(a);
        }
    }
    let random: Vec<[u8; 4]> = (0..BATCH).map(|_| (rng.next() as u32).to_be_bytes()).collect();
    let inside: Vec<[u8; 4]> = (0..BATCH).map(|_| prefixes[rng.below(10_000) as usize]).collect();
    eprintln!("lpm ipv4: {t:?}");
    bench_batch(c, "lpm_ipv4_10k", "random", &random, |k| t.lookup(k));
    bench_batch(c, "lpm_ipv4_10k", "inside", &inside, |k| t.lookup(k));

    // The same shape with a 2-byte VRF id in front (8 VRFs).
    let mut t = LpmMatcher::new(6, 2..6).unwrap();
    let mut keys = Vec::new();
    while keys.len() < 10_000 {
        let mut k = [0u8; 6];
        k[1] = rng.below(8) as u8;
        k[2..].copy_from_slice(&(rng.next() as u32).to_be_bytes());
        let len = if rng.below(2) == 0 { 24 } else { 8 + rng.below(25) as u8 };
        if t.insert(&k, len, keys.len() as u32).is_ok() {
            keys.push(k);
        }
    }
    let inside: Vec<[u8; 6]> = (0..BATCH).map(|_| keys[rng.below(10_000) as usize]).collect();
    bench_batch(c, "lpm_vrf_ipv4_10k", "inside", &inside, |k| t.lookup(k));

    // IPv6, 10k prefixes of /32 to /64 under 2000::/3, looked up inside them.
    let mut t = LpmMatcher::new(16, 0..16).unwrap();
    let mut prefixes = Vec::new();
    while prefixes.len() < 10_000 {
        let hi = (rng.next() >> 3) | 0x2000_0000_0000_0000;
        let mut a = [0u8; 16];
        a[..8].copy_from_slice(&hi.to_be_bytes());
        a[8..].copy_from_slice(&rng.next().to_be_bytes());
        let len = 32 + rng.below(33) as u8;
        if t.insert(&a, len, prefixes.len() as u32).is_ok() {
            prefixes.push(a);
        }
    }
    eprintln!("lpm ipv6: {t:?}");
    let inside: Vec<[u8; 16]> = (0..BATCH).map(|_| prefixes[rng.below(10_000) as usize]).collect();
    bench_batch(c, "lpm_ipv6_10k", "inside", &inside, |k| t.lookup(k));
}

/// Ternary on an IPv4 5-tuple (13 bytes) with 100 ACL entries: address prefixes, protocol, and
/// a destination-port range on a third of them, plus a lowest-priority catch-all; random keys
/// mostly scan to the catch-all (the worst case).
fn ternary(c: &mut Criterion) {
    let mut rng = Rng(0xdead_beef_cafe_f00d);
    let mut t = TernaryMatcher::new(13).unwrap();
    let mut rules = Vec::new();
    for i in 0..99u32 {
        let mut v = [0u8; 13];
        let mut m = [0u8; 13];
        let src = rng.next() as u32;
        let dst = rng.next() as u32;
        let sl = rng.below(33) as u32;
        let dl = 8 + rng.below(25) as u32;
        let pm = |l: u32| if l == 0 { 0 } else { u32::MAX << (32 - l) };
        v[0..4].copy_from_slice(&src.to_be_bytes());
        m[0..4].copy_from_slice(&pm(sl).to_be_bytes());
        v[4..8].copy_from_slice(&dst.to_be_bytes());
        m[4..8].copy_from_slice(&pm(dl).to_be_bytes());
        v[12] = [6, 17][rng.below(2) as usize];
        m[12] = 0xff;
        let ranges = if i % 3 == 0 {
            let lo = rng.below(60_000) as u128;
            vec![RangeCond { field: 10..12, lo, hi: lo + 1000 }]
        } else {
            vec![]
        };
        t.insert(&v, &m, &ranges, 1000 - i as i32, i).unwrap();
        rules.push(v);
    }
    t.insert(&[0; 13], &[0; 13], &[], 0, 99).unwrap();
    let random: Vec<[u8; 13]> = (0..BATCH)
        .map(|_| {
            let mut k = [0u8; 13];
            k[..8].copy_from_slice(&rng.next().to_be_bytes());
            k[8..12].copy_from_slice(&rng.next().to_be_bytes()[..4]);
            k[12] = 6;
            k
        })
        .collect();
    let first_half: Vec<[u8; 13]> = (0..BATCH)
        .map(|_| {
            let mut k = rules[rng.below(50) as usize];
            k[8..12].copy_from_slice(&rng.next().to_be_bytes()[..4]);
            k
        })
        .collect();
    bench_batch(c, "ternary_5tuple_100", "random", &random, |k| t.lookup(k));
    bench_batch(c, "ternary_5tuple_100", "first_half", &first_half, |k| t.lookup(k));
}

criterion_group!(benches, exact, lpm, ternary);
criterion_main!(benches);
