//! A bit-vector classifier for ternary/range tables: the same answers as the priority-ordered
//! scan of [`super::ternary`], in a cost that does not grow with the entries before the winner.
//!
//! # Shape
//! Entries are numbered by their place in priority order (highest first, insertion order among
//! equal priorities), bit `i` of a bitmap standing for entry `i`. The key is cut into
//! dimensions, each giving, for the packet's value in it, the bitmap of the entries that value
//! satisfies:
//! - a *byte dimension* per key byte that some entry masks: 256 bitmaps, the one for byte value
//!   `v` having the entries with `v & mask == value & mask` on that byte (bytes no entry masks
//!   are satisfied by every entry and have no dimension);
//! - a *range dimension* per distinct range-condition field: the field's values cut into
//!   elementary intervals at every bound of every condition on it, one bitmap per interval, of
//!   the entries whose conditions on that field hold over the whole interval (entries without a
//!   condition on it hold everywhere).
//!
//! An entry matches exactly when it is in every dimension's bitmap (value/mask decomposes by
//! byte, and within an elementary interval each condition holds everywhere or nowhere), so a
//! lookup ANDs one bitmap per dimension and the lowest set bit is the winner. It goes a 64-bit
//! word at a time and stops at the first word with a bit set.
//!
//! # Cost
//! Lookup: per range dimension two loads (a two-byte field) or a binary search among the
//! intervals of the field's first byte (most first bytes have one, found without a search),
//! then per word of entries up to the winner's, one load and AND per dimension. Memory:
//! `256 * ceil(n / 64)` words per byte dimension; per range dimension one word per interval
//! and 64 entries, and for a two-byte field 512 bytes per first byte that several intervals
//! share. Insert: `O(bitmaps * words)`, an entry shifting one bit in every bitmap, plus
//! rebuilding a two-byte field's blocks. Beyond [`MAX_ENTRIES`] entries or [`MAX_RANGE_DIMS`] range
//! fields the table falls back to the scan.

use super::key::KEY_MAX;
use super::matcher::be_value;
use super::range::RangeCond;
use core::ops::Range;

/// Most entries the classifier takes (bitmaps of 8 words, 16 KiB per byte dimension).
pub const MAX_ENTRIES: usize = 512;
/// Most distinct range-condition fields.
pub const MAX_RANGE_DIMS: usize = 8;

/// The bitmaps of one key byte.
#[derive(Clone, Debug)]
struct ByteDim {
    /// The byte's place in the key.
    at: usize,
    /// `256 * words` words: the bitmap of byte value `v` at `v * words`.
    bits: Vec<u64>,
}

/// The bitmaps of one range-condition field.
#[derive(Clone, Debug)]
struct RangeDim {
    /// The field's bytes in the key.
    field: Range<usize>,
    /// Sorted starts of the elementary intervals; the first is 0.
    starts: Vec<u128>,
    /// `starts.len() * words` words: the bitmap of interval `i` at `i * words`.
    bits: Vec<u64>,
    /// By the field's first byte: the first and last interval holding values that start with
    /// it. Most bytes see one interval, found without a search.
    top: Box<[(u32, u32); 256]>,
    /// Two-byte fields (ports, VLAN ids): by the first byte, the block of `second` that gives,
    /// by the second byte, the interval's index minus `top`'s first. Block 0 is all zeros and
    /// serves every first byte that sees one interval, so a lookup is two loads and no branch.
    block: Box<[u16; 256]>,
    /// Blocks of 256 offsets (two-byte fields only; empty otherwise).
    second: Vec<u16>,
}

impl RangeDim {
    fn new(field: Range<usize>, all: &[u64]) -> RangeDim {
        let mut d = RangeDim {
            field,
            starts: vec![0],
            bits: all.to_vec(),
            top: Box::new([(0, 0); 256]),
            block: Box::new([0; 256]),
            second: Vec::new(),
        };
        d.index_top();
        d
    }

    /// Rebuilds `top` after intervals were split.
    fn index_top(&mut self) {
        let shift = 8 * (self.field.len() as u32 - 1);
        let mut top = [(0, 0); 256];
        for (t, e) in top.iter_mut().enumerate() {
            let lo = (t as u128) << shift;
            let hi = lo | ((1u128 << shift) - 1);
            *e = (self.interval(lo) as u32, self.interval(hi) as u32);
        }
        *self.top = top;
        if self.field.len() == 2 {
            self.second = vec![0; 256];
            for (t, &(first, last)) in top.iter().enumerate() {
                if first == last {
                    self.block[t] = 0;
                    continue;
                }
                self.block[t] = (self.second.len() / 256) as u16;
                for low in 0..256u128 {
                    let i = self.interval(((t as u128) << 8) | low);
                    self.second.push((i - first as usize) as u16);
                }
            }
        }
    }

    /// Index of the interval holding the field of `key`.
    #[inline(always)]
    fn interval_of(&self, key: &[u8]) -> usize {
        let Some(f) = key.get(self.field.clone()) else { return 0 };
        if let [hi, lo] = *f {
            let first = self.top[hi as usize].0 as usize;
            let at = (self.block[hi as usize] as usize) << 8 | lo as usize;
            return first + self.second.get(at).copied().unwrap_or(0) as usize;
        }
        let (first, last) = self.top[f[0] as usize];
        if first == last {
            return first as usize;
        }
        let v = be_value(f);
        let (first, last) = (first as usize, last as usize);
        let within = self.starts.get(first + 1..=last).unwrap_or(&[]);
        first + within.partition_point(|&s| s <= v)
    }

    /// [`RangeDim::interval_of`] of a key zero-padded to [`KEY_MAX`] bytes: a two-byte field
    /// is read without checking the key's length.
    #[inline(always)]
    fn interval_of_padded(&self, key: &[u8; KEY_MAX]) -> usize {
        if self.field.len() != 2 {
            return self.interval_of(key);
        }
        // The field lies within the key, so `start + 1 < KEY_MAX`; `min` only drops the check.
        let s = self.field.start.min(KEY_MAX - 2);
        let (hi, lo) = (key[s] as usize, key[s + 1] as usize);
        let at = (self.block[hi] as usize) << 8 | lo;
        self.top[hi].0 as usize + self.second.get(at).copied().unwrap_or(0) as usize
    }

    /// Index of the interval holding `v`.
    #[inline(always)]
    fn interval(&self, v: u128) -> usize {
        self.starts.partition_point(|&s| s <= v).saturating_sub(1)
    }

    /// Cuts the interval holding `at` so that one starts at `at`; the new interval copies the
    /// old one's bitmap.
    fn split(&mut self, at: u128, words: usize) {
        let i = self.interval(at);
        if self.starts[i] == at {
            return;
        }
        self.starts.insert(i + 1, at);
        let copy: Vec<u64> = self.bits[i * words..(i + 1) * words].to_vec();
        self.bits.splice((i + 1) * words..(i + 1) * words, copy);
    }
}

/// The classifier: see the module docs.
#[derive(Clone, Debug)]
pub struct Classifier {
    /// Entry indices in priority order.
    entries: Vec<u32>,
    /// Their priorities (non-increasing).
    priorities: Vec<i32>,
    /// Words per bitmap.
    words: usize,
    /// The bitmap of every entry.
    all: Vec<u64>,
    /// Byte dimensions, by key byte (insert-time layout).
    bytes: Vec<ByteDim>,
    /// The byte dimensions' key bytes, in `bytes` order.
    byte_at: Vec<usize>,
    /// The byte dimensions' bitmaps as lookups read them: word `w` of dimension `d`'s bitmap
    /// for byte value `v` at `byte_bits[w * dims + d][v]`.
    byte_bits: Vec<[u64; 256]>,
    /// Range dimensions.
    ranges: Vec<RangeDim>,
}

impl Default for Classifier {
    fn default() -> Self {
        Classifier {
            entries: Vec::new(),
            priorities: Vec::new(),
            words: 1,
            all: vec![0],
            bytes: Vec::new(),
            byte_at: Vec::new(),
            byte_bits: Vec::new(),
            ranges: Vec::new(),
        }
    }
}

/// Inserts bit `at` into the `words`-word bitmap `bm`, shifting the bits at and above it up by
/// one (the top bit of the last word is dropped: it is always clear, there being room).
fn insert_bit(bm: &mut [u64], at: usize, set: bool) {
    let (w, b) = (at / 64, at % 64);
    for i in (w + 1..bm.len()).rev() {
        bm[i] = (bm[i] << 1) | (bm[i - 1] >> 63);
    }
    let low = (1u64 << b) - 1;
    let x = bm[w];
    bm[w] = (x & low) | ((x & !low) << 1) | (u64::from(set) << b);
}

impl Classifier {
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True without entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Heap memory read by lookups (bytes).
    pub fn memory_bytes(&self) -> usize {
        8 * (self.bytes.iter().map(|d| d.bits.len()).sum::<usize>()
            + self.ranges.iter().map(|d| d.bits.len() + 2 * d.starts.len()).sum::<usize>())
            + self.ranges.iter().map(|d| 2 * d.second.len()).sum::<usize>()
    }

    /// True if an entry with these range conditions can be added within the limits.
    pub fn fits(&self, ranges: &[RangeCond]) -> bool {
        let mut fields: Vec<&Range<usize>> = self.ranges.iter().map(|d| &d.field).collect();
        for r in ranges {
            if !fields.contains(&&r.field) {
                fields.push(&r.field);
            }
        }
        self.len() < MAX_ENTRIES && fields.len() <= MAX_RANGE_DIMS
    }

    /// Adds an entry (already validated by the table; [`Classifier::fits`] true): `masked` is
    /// `value & mask`.
    pub fn insert(&mut self, masked: &[u8], mask: &[u8], ranges: &[RangeCond], priority: i32, entry: u32) {
        let at = self.priorities.partition_point(|&p| p >= priority);
        if self.len() + 1 > 64 * self.words {
            self.grow();
        }
        let words = self.words;
        // New dimensions start out satisfied by every entry already there.
        for (i, &m) in mask.iter().enumerate() {
            if m != 0 && !self.bytes.iter().any(|d| d.at == i) {
                let bits = (0..256).flat_map(|_| self.all.iter().copied()).collect();
                let p = self.bytes.partition_point(|d| d.at < i);
                self.bytes.insert(p, ByteDim { at: i, bits });
            }
        }
        for r in ranges {
            if !self.ranges.iter().any(|d| d.field == r.field) {
                self.ranges.push(RangeDim::new(r.field.clone(), &self.all));
            }
        }
        for d in &mut self.bytes {
            let (m, v) = (mask[d.at], masked[d.at]);
            for (x, bm) in d.bits.chunks_exact_mut(words).enumerate() {
                insert_bit(bm, at, x as u8 & m == v);
            }
        }
        for d in &mut self.ranges {
            // The entry's conditions on this field, intersected.
            let mut lo = 0u128;
            let mut hi = u128::MAX;
            for r in ranges.iter().filter(|r| r.field == d.field) {
                lo = lo.max(r.lo);
                hi = hi.min(r.hi);
            }
            if lo <= hi {
                d.split(lo, words);
                if let Some(next) = hi.checked_add(1) {
                    d.split(next, words);
                }
            }
            for (i, bm) in d.bits.chunks_exact_mut(words).enumerate() {
                let s = d.starts[i];
                insert_bit(bm, at, lo <= s && s <= hi);
            }
            d.index_top();
        }
        insert_bit(&mut self.all, at, true);
        self.entries.insert(at, entry);
        self.priorities.insert(at, priority);
        self.layout_bytes();
    }

    /// Rebuilds the lookup layout of the byte dimensions.
    fn layout_bytes(&mut self) {
        let (words, dims) = (self.words, self.bytes.len());
        self.byte_at = self.bytes.iter().map(|d| d.at).collect();
        self.byte_bits = vec![[0; 256]; words * dims];
        for (d, dim) in self.bytes.iter().enumerate() {
            for (v, bm) in dim.bits.chunks_exact(words).enumerate() {
                for (w, &x) in bm.iter().enumerate() {
                    self.byte_bits[w * dims + d][v] = x;
                }
            }
        }
    }

    /// One more word per bitmap.
    fn grow(&mut self) {
        let (old, new) = (self.words, self.words + 1);
        let restride = |bits: &mut Vec<u64>| {
            *bits = bits.chunks_exact(old).flat_map(|c| c.iter().copied().chain([0])).collect();
        };
        restride(&mut self.all);
        self.bytes.iter_mut().for_each(|d| restride(&mut d.bits));
        self.ranges.iter_mut().for_each(|d| restride(&mut d.bits));
        self.words = new;
        self.layout_bytes();
    }

    /// The entry index of the winner for `key` (the table's key length, checked by the caller),
    /// or `None`. Through [`Classifier::lookup_padded`] for keys of at most [`KEY_MAX`] bytes.
    pub fn lookup(&self, key: &[u8]) -> Option<u32> {
        if key.len() > KEY_MAX {
            return self.lookup_words(key);
        }
        let mut padded = [0; KEY_MAX];
        padded[..key.len()].copy_from_slice(key);
        self.lookup_padded(&padded)
    }

    /// [`Classifier::lookup`] of a key zero-padded to [`KEY_MAX`] bytes, as tables build them:
    /// key bytes are read without length checks.
    #[inline(always)]
    pub fn lookup_padded(&self, key: &[u8; KEY_MAX]) -> Option<u32> {
        if self.words == 1 {
            return self.lookup_one_word(key);
        }
        self.lookup_words(key)
    }

    /// The lookup over any number of words per bitmap.
    #[inline(never)]
    fn lookup_words(&self, key: &[u8]) -> Option<u32> {
        let words = self.words;
        let mut at = [0usize; MAX_RANGE_DIMS];
        for (a, d) in at.iter_mut().zip(&self.ranges) {
            *a = d.interval_of(key) * words;
        }
        let dims = self.byte_at.len();
        for w in 0..words {
            let mut acc = self.all.get(w).copied().unwrap_or(0);
            if dims > 0 {
                let tables = self.byte_bits.get(w * dims..(w + 1) * dims).unwrap_or(&[]);
                for (t, &b) in tables.iter().zip(&self.byte_at) {
                    acc &= t[key.get(b).copied().unwrap_or(0) as usize];
                }
            }
            for (a, d) in at.iter().zip(&self.ranges) {
                acc &= d.bits.get(a + w).copied().unwrap_or(0);
            }
            if acc != 0 {
                return self.entries.get(w * 64 + acc.trailing_zeros() as usize).copied();
            }
        }
        None
    }

    /// [`Classifier::lookup`] for at most 64 entries (one word per bitmap, the common case):
    /// one load and AND per dimension, without the per-word loop.
    #[inline(always)]
    fn lookup_one_word(&self, key: &[u8; KEY_MAX]) -> Option<u32> {
        let mut acc = self.all.first().copied().unwrap_or(0);
        // With one word, `byte_bits` holds one table per byte dimension, in `byte_at` order.
        // Key bytes are below KEY_MAX (the mask only drops the bounds check).
        for (t, &b) in self.byte_bits.iter().zip(&self.byte_at) {
            acc &= t[key[b % KEY_MAX] as usize];
        }
        for d in &self.ranges {
            acc &= d.bits.get(d.interval_of_padded(key)).copied().unwrap_or(0);
        }
        if acc == 0 {
            return None;
        }
        self.entries.get(acc.trailing_zeros() as usize).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_bit_shifts_across_words() {
        let mut bm = [u64::MAX, 0b1];
        insert_bit(&mut bm, 0, false);
        assert_eq!(bm, [u64::MAX - 1, 0b11]);
        let mut bm = [1u64 << 63, 0];
        insert_bit(&mut bm, 63, true);
        assert_eq!(bm, [1u64 << 63, 1]);
        let mut bm = [0b101, 0];
        insert_bit(&mut bm, 1, true);
        assert_eq!(bm, [0b1011, 0]);
        let mut bm = [0, 0b1];
        insert_bit(&mut bm, 64, true);
        assert_eq!(bm, [0, 0b11]);
    }

    #[test]
    fn limits() {
        let mut c = Classifier::default();
        let r = |s: usize| RangeCond { field: s..s + 1, lo: 0, hi: 1 };
        let many: Vec<RangeCond> = (0..MAX_RANGE_DIMS).map(r).collect();
        assert!(c.fits(&many));
        c.insert(&[0; 16], &[0; 16], &many, 0, 0);
        assert!(c.fits(&[r(0)]));
        assert!(!c.fits(&[r(MAX_RANGE_DIMS)]));
        for i in 1..MAX_ENTRIES {
            c.insert(&[0; 16], &[0; 16], &[], 0, i as u32);
        }
        assert!(!c.fits(&[]));
        assert_eq!(c.lookup(&[0; 16]), Some(0));
        assert_eq!(c.lookup(&[2; 16]), Some(1));
    }

    #[test]
    fn len_and_is_empty() {
        let mut c = Classifier::default();
        assert_eq!((c.len(), c.is_empty()), (0, true));
        c.insert(&[1], &[0xff], &[], 0, 0);
        assert_eq!((c.len(), c.is_empty()), (1, false));
    }

    /// One byte dimension and one two-byte range dimension of three intervals, one word per
    /// bitmap: 256 words of byte bitmaps, 3 words of interval bitmaps and 3 u128 starts, plus
    /// block 0 of the second-byte offsets (256 u16s).
    #[test]
    fn memory_counts_every_lookup_array() {
        let mut c = Classifier::default();
        assert_eq!(c.memory_bytes(), 0);
        let cond = [RangeCond { field: 1..3, lo: 0x0100, hi: 0x01ff }];
        c.insert(&[0x11, 0, 0], &[0xff, 0, 0], &cond, 0, 0);
        assert_eq!(c.memory_bytes(), 8 * (256 + 3 + 2 * 3) + 2 * 256);
        assert_eq!(
            [c.lookup(&[0x11, 1, 0x80]), c.lookup(&[0x11, 2, 0]), c.lookup(&[0x12, 1, 0])],
            [Some(0), None, None]
        );
    }

    /// Bitmaps take a second word for the 65th entry, not before.
    #[test]
    fn a_word_per_64_entries() {
        let mut c = Classifier::default();
        for i in 0..64u8 {
            c.insert(&[i], &[0xff], &[], 0, u32::from(i));
        }
        assert_eq!(c.words, 1);
        c.insert(&[64], &[0xff], &[], 0, 64);
        assert_eq!(c.words, 2);
        assert_eq!([c.lookup(&[63]), c.lookup(&[64]), c.lookup(&[65])], [Some(63), Some(64), None]);
    }

    /// Keys longer than [`KEY_MAX`] take the any-length lookup.
    #[test]
    fn keys_beyond_key_max() {
        let mut c = Classifier::default();
        c.insert(&[0x11], &[0xff], &[], 0, 7);
        assert_eq!(c.lookup(&[0x11; KEY_MAX + 1]), Some(7));
        assert_eq!(c.lookup(&[0x12; KEY_MAX + 1]), None);
    }

    /// A two-byte range field (a port) behind a one-byte exact-ish field, its ranges cutting
    /// first bytes anywhere (inside a first byte, on its edges, across several): every one of
    /// the 65536 values of each first byte pattern gives the answer of evaluating the entries
    /// in priority order, in tables of one word and of several.
    #[test]
    fn two_byte_ranges_agree_with_the_entries_on_every_value() {
        let ranges: [(u128, u128, i32); 9] = [
            (0, 1023, 90),
            (2000, 2999, 80),
            (0x0700, 0x07ff, 85),
            (0x1234, 0x1234, 70),
            (0x12ff, 0x1301, 75),
            (4791, 4791, 95),
            (49152, 65535, 10),
            (30000, 30100, 60),
            (1, 65534, 0),
        ];
        for copies in [1, 9] {
            let mut c = Classifier::default();
            let mut rules = Vec::new();
            for k in 0..copies {
                for (j, &(lo, hi, prio)) in ranges.iter().enumerate() {
                    let proto = [17u8, 6][(j + k) % 2];
                    let entry = (k * ranges.len() + j) as u32;
                    let cond = [RangeCond { field: 1..3, lo, hi }];
                    c.insert(&[proto, 0, 0], &[0xff, 0, 0], &cond, prio - k as i32, entry);
                    rules.push((proto, lo, hi, prio - k as i32, entry));
                }
            }
            assert_eq!(c.words, rules.len().div_ceil(64));
            // Priority order, then insertion order among equals.
            rules.sort_by_key(|r| (-r.3, r.4));
            for proto in [17u8, 6, 1] {
                for v in 0..=u16::MAX {
                    let [hi, lo] = v.to_be_bytes();
                    let want = rules.iter().find(|r| r.0 == proto && r.1 <= v as u128 && v as u128 <= r.2).map(|r| r.4);
                    assert_eq!(c.lookup(&[proto, hi, lo]), want, "proto {proto}, port {v}, {copies} copies");
                }
            }
        }
    }
}
