//! Ternary and range match: value/mask entries with optional range conditions, the highest
//! priority winning.
//!
//! # Shape
//! An entry matches a key when `key & mask == value & mask` over the whole key and every one of
//! its [`RangeCond`]s holds (`lo <= field <= hi`, the field read as a big-endian number). The
//! P4 `range` match kind is expressed as a range condition on that field's bytes, which have
//! mask 0; `ternary`, `exact` and `optional` fields of the same table go into value/mask.
//!
//! Entries are kept sorted by priority, highest first (P4Runtime: a larger number wins), and
//! in insertion order among equal priorities, so a lookup is a scan that stops at the first
//! entry that matches. The scan reads a dense array of rows `{ mask: [u64; W], value: [u64; W] }`
//! (`W = ceil(key_len / 8)` words, values pre-masked at insert, `16W` bytes per row), compares
//! a word at a time without branching inside a row, and only on a value/mask hit reads the
//! entry's index and range conditions.
//!
//! # Lookup
//! Up to [`classifier::MAX_ENTRIES`] entries and [`classifier::MAX_RANGE_DIMS`] distinct range
//! fields, lookups use a bit-vector [`Classifier`] built beside the rows: one bitmap per masked
//! key byte and per range field, ANDed, the lowest bit winning, so the cost does not grow with
//! the entries ahead of the winner. Beyond those limits they scan the rows, as below.
//!
//! # Cost of the scan
//! `O(entries before the first hit)`, each `W` AND/XOR/OR and one branch: a miss in 100 entries
//! of a 13-byte IPv4 5-tuple key (`W = 2`) reads 3.2 KB of rows.
//!
//! [`classifier::MAX_ENTRIES`]: super::classifier::MAX_ENTRIES
//! [`classifier::MAX_RANGE_DIMS`]: super::classifier::MAX_RANGE_DIMS
//!
//! # Memory
//! `16W` bytes of row plus 16 bytes of metadata per entry, plus 48 bytes per range condition,
//! plus the classifier's bitmaps (see its docs); insert-time only: a hash set of the entries for
//! duplicate detection.

use super::classifier::Classifier;
use super::key::KEY_MAX;
use super::matcher::{be_value, check_key_len, check_len, debug_sizes, MatchError};
pub use super::range::{RangeCond, RANGE_FIELD_MAX};
use super::words::{by_words, dispatch, load, word_count};
use core::fmt;
use core::ops::Range;
use std::collections::HashSet;

/// A priority-ordered ternary/range table. See the module docs for the layout and its costs.
#[derive(Clone)]
pub struct TernaryMatcher {
    /// Key length (bytes).
    key_len: usize,
    /// Most entries allowed.
    max_entries: usize,
    /// The rows, specialised for the key's word count.
    inner: Inner,
    /// The same entries as a bit-vector classifier, which lookups use while the table is within
    /// its limits (entries, range fields).
    classifier: Option<Box<Classifier>>,
    /// Every entry's identity, for duplicate detection. Insert-time only.
    seen: HashSet<EntryId>,
}

/// What identifies a ternary entry (P4Runtime: the match and the priority): priority, masked
/// value, mask, and the range conditions as sorted (field start, field end, lo, hi).
type EntryId = (i32, Vec<u8>, Vec<u8>, Vec<(usize, usize, u128, u128)>);

/// [`Rules`] for each word count.
#[derive(Clone)]
enum Inner {
    W1(Rules<1>),
    W2(Rules<2>),
    W3(Rules<3>),
    W4(Rules<4>),
    W5(Rules<5>),
    W6(Rules<6>),
    W7(Rules<7>),
    W8(Rules<8>),
}

impl TernaryMatcher {
    /// An empty table for keys of `key_len` bytes (`1..=64`).
    pub fn new(key_len: usize) -> Result<Self, MatchError> {
        check_key_len(key_len)?;
        Ok(TernaryMatcher {
            key_len,
            max_entries: usize::MAX,
            inner: by_words!(Inner, word_count(key_len), new_rules()),
            classifier: Some(Box::default()),
            seen: HashSet::new(),
        })
    }

    /// Limits the table to `max` entries (a P4 table's `size`); further inserts fail with
    /// [`MatchError::TableFull`].
    pub fn with_max_entries(mut self, max: usize) -> Self {
        self.max_entries = max;
        self
    }

    /// Key length (bytes).
    pub fn key_len(&self) -> usize {
        self.key_len
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// True if the table has no entries.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }

    /// Heap memory read by lookups: rows, metadata and range conditions (bytes).
    pub fn memory_bytes(&self) -> usize {
        match &self.classifier {
            Some(c) => c.memory_bytes(),
            None => dispatch!(Inner, &self.inner, t => {
                core::mem::size_of_val(&*t.rows)
                    + core::mem::size_of_val(&*t.meta)
                    + core::mem::size_of_val(&*t.ranges)
            }),
        }
    }

    /// Adds an entry matching keys with `key & mask == value & mask` and every condition of
    /// `ranges`, at `priority` (larger wins; among equal priorities the earlier insert wins).
    ///
    /// `value` and `mask` are `key_len` bytes; value bits outside the mask are ignored. Range
    /// fields must have mask 0.
    ///
    /// Errors: [`MatchError::WrongLen`]; [`MatchError::RangeField`], [`MatchError::RangeMasked`],
    /// [`MatchError::RangeEmpty`] (`lo > hi`), [`MatchError::RangeBound`] (`hi` wider than the
    /// field); [`MatchError::DuplicateKey`] (same masked value, mask, ranges and priority);
    /// [`MatchError::TableFull`]. On error the table is unchanged. Insertion shifts the entries
    /// of lower priority: `O(entries)`.
    pub fn insert(
        &mut self,
        value: &[u8],
        mask: &[u8],
        ranges: &[RangeCond],
        priority: i32,
        entry: u32,
    ) -> Result<(), MatchError> {
        check_len("value", value, self.key_len)?;
        check_len("mask", mask, self.key_len)?;
        for r in ranges {
            self.check_range(r, mask)?;
        }
        if self.len() >= self.max_entries {
            return Err(MatchError::TableFull { what: "entries", max: self.max_entries });
        }
        let masked: Vec<u8> = value.iter().zip(mask).map(|(v, m)| v & m).collect();
        let mut sorted: Vec<_> = ranges.iter().map(|r| (r.field.start, r.field.end, r.lo, r.hi)).collect();
        sorted.sort_unstable();
        if !self.seen.insert((priority, masked.clone(), mask.to_vec(), sorted)) {
            return Err(MatchError::DuplicateKey);
        }
        dispatch!(Inner, &mut self.inner, t => t.insert(&masked, mask, ranges, priority, entry));
        match &mut self.classifier {
            Some(c) if c.fits(ranges) => c.insert(&masked, mask, ranges, priority, entry),
            _ => self.classifier = None,
        }
        Ok(())
    }

    fn check_range(&self, r: &RangeCond, mask: &[u8]) -> Result<(), MatchError> {
        let f = &r.field;
        let width = f.end.wrapping_sub(f.start);
        if f.start >= f.end || f.end > self.key_len || width > RANGE_FIELD_MAX {
            return Err(MatchError::RangeField { field: f.clone(), key_len: self.key_len });
        }
        if mask[f.clone()].iter().any(|&m| m != 0) {
            return Err(MatchError::RangeMasked { field: f.clone() });
        }
        if r.lo > r.hi {
            return Err(MatchError::RangeEmpty { lo: r.lo, hi: r.hi });
        }
        if width < 16 && r.hi >> (8 * width) != 0 {
            return Err(MatchError::RangeBound { value: r.hi, width });
        }
        Ok(())
    }

    /// The entry of the highest-priority entry matching `key` (the first inserted among equal
    /// priorities), or `None` if none matches or `key` is not `key_len` bytes long.
    ///
    /// Never allocates, locks or panics; cost in the module docs.
    #[inline]
    pub fn lookup(&self, key: &[u8]) -> Option<u32> {
        if key.len() != self.key_len {
            return None;
        }
        match &self.classifier {
            Some(c) => c.lookup(key),
            None => self.scan(key),
        }
    }

    /// [`TernaryMatcher::lookup`] of the table's key zero-padded to [`KEY_MAX`] bytes (a
    /// table's key buffer): the classifier reads it without length checks.
    #[inline]
    pub fn lookup_padded(&self, key: &[u8; KEY_MAX]) -> Option<u32> {
        match &self.classifier {
            Some(c) => c.lookup_padded(key),
            None => self.scan(key.get(..self.key_len)?),
        }
    }

    /// The linear scan in priority order (the lookup beyond the classifier's limits).
    #[inline]
    fn scan(&self, key: &[u8]) -> Option<u32> {
        if key.len() != self.key_len {
            return None;
        }
        dispatch!(Inner, &self.inner, t => t.find(key))
    }

    /// True while lookups use the bit-vector classifier rather than the scan.
    pub fn uses_classifier(&self) -> bool {
        self.classifier.is_some()
    }
}

impl fmt::Debug for TernaryMatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_sizes(f, "TernaryMatcher", self.key_len, self.len(), self.max_entries, self.memory_bytes())
    }
}

/// One entry's words: see the module docs.
#[derive(Clone, Copy)]
#[repr(C)]
struct Row<const W: usize> {
    mask: [u64; W],
    /// `value & mask`.
    value: [u64; W],
}

/// What a lookup reads after a row matches, and the priority inserts sort by.
#[derive(Clone)]
struct Meta {
    entry: u32,
    priority: i32,
    /// The entry's conditions in `Rules::ranges` (start, end).
    ranges: (u32, u32),
}

/// A range condition checked by lookups (validated at insert).
#[derive(Clone)]
struct RangeCheck {
    field: Range<usize>,
    lo: u128,
    hi: u128,
    /// For a field inside one key word (every field up to 8 bytes that does not straddle a
    /// word): (word, bit shift, width in bytes), so a lookup reads it from the loaded words.
    fast: Option<(usize, u32, u32)>,
}

impl RangeCheck {
    fn new(r: &RangeCond) -> RangeCheck {
        let (s, e) = (r.field.start, r.field.end);
        let w = s / 8;
        let fast = (e - s <= 8 && e <= 8 * w + 8).then(|| (w, 8 * (s - 8 * w) as u32, (e - s) as u32));
        RangeCheck { field: r.field.clone(), lo: r.lo, hi: r.hi, fast }
    }

    /// True if the field of `key` (whose little-endian words are `k`) lies in `lo..=hi`.
    #[inline(always)]
    fn holds<const W: usize>(&self, k: &[u64; W], key: &[u8]) -> bool {
        let v = match self.fast {
            // The field's bytes, in key order, are the low `width` bytes of the word shifted
            // down; reversing them gives the big-endian value.
            Some((w, shift, width)) => ((k[w] >> shift).swap_bytes() >> (64 - 8 * width)) as u128,
            None => be_value(&key[self.field.clone()]),
        };
        self.lo <= v && v <= self.hi
    }
}

/// The sorted entries for keys of `W` words.
#[derive(Clone)]
struct Rules<const W: usize> {
    /// Highest priority first; FIFO among equal priorities.
    rows: Vec<Row<W>>,
    /// Parallel to `rows`.
    meta: Vec<Meta>,
    /// Every entry's range conditions; append-only, entries refer to spans of it.
    ranges: Vec<RangeCheck>,
}

fn new_rules<const W: usize>() -> Rules<W> {
    Rules { rows: Vec::new(), meta: Vec::new(), ranges: Vec::new() }
}

impl<const W: usize> Rules<W> {
    fn insert(&mut self, masked: &[u8], mask: &[u8], ranges: &[RangeCond], priority: i32, entry: u32) {
        let start = self.ranges.len() as u32;
        self.ranges.extend(ranges.iter().map(RangeCheck::new));
        let meta = Meta { entry, priority, ranges: (start, self.ranges.len() as u32) };
        // After every entry of the same or higher priority.
        let at = self.meta.partition_point(|m| m.priority >= priority);
        self.rows.insert(at, Row { mask: load(mask), value: load(masked) });
        self.meta.insert(at, meta);
    }

    #[inline(always)]
    fn find(&self, key: &[u8]) -> Option<u32> {
        let k: [u64; W] = load(key);
        for (row, meta) in self.rows.iter().zip(&self.meta) {
            let mut diff = 0;
            for ((k, m), v) in k.iter().zip(&row.mask).zip(&row.value) {
                diff |= (k & m) ^ v;
            }
            if diff == 0 && self.ranges_hold(meta, &k, key) {
                return Some(meta.entry);
            }
        }
        None
    }

    /// True if every range condition of the entry holds for `key` (of the table's length).
    #[inline(always)]
    fn ranges_hold(&self, meta: &Meta, k: &[u64; W], key: &[u8]) -> bool {
        let (start, end) = meta.ranges;
        if start == end {
            return true;
        }
        self.ranges[start as usize..end as usize].iter().all(|r| r.holds(k, key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// IPv4 5-tuple key layout (bytes).
    mod field {
        use core::ops::Range;
        pub const SRC: Range<usize> = 0..4;
        pub const DST: Range<usize> = 4..8;
        pub const SPORT: Range<usize> = 8..10;
        pub const DPORT: Range<usize> = 10..12;
        pub const PROTO: Range<usize> = 12..13;
    }
    const KEY_LEN: usize = 13;
    const TCP: u8 = 6;
    const UDP: u8 = 17;

    fn key(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, proto: u8) -> [u8; KEY_LEN] {
        let mut k = [0u8; KEY_LEN];
        k[field::SRC].copy_from_slice(&src);
        k[field::DST].copy_from_slice(&dst);
        k[field::SPORT].copy_from_slice(&sport.to_be_bytes());
        k[field::DPORT].copy_from_slice(&dport.to_be_bytes());
        k[field::PROTO][0] = proto;
        k
    }

    /// Value and mask builder for the 5-tuple: prefixes on addresses, exact protocol.
    #[derive(Default)]
    struct Rule {
        value: [u8; KEY_LEN],
        mask: [u8; KEY_LEN],
        ranges: Vec<RangeCond>,
    }

    impl Rule {
        fn prefix(mut self, f: Range<usize>, addr: [u8; 4], len: u32) -> Self {
            let m = if len == 0 { 0 } else { u32::MAX << (32 - len) };
            self.value[f.clone()].copy_from_slice(&addr);
            self.mask[f].copy_from_slice(&m.to_be_bytes());
            self
        }
        fn proto(mut self, p: u8) -> Self {
            self.value[field::PROTO][0] = p;
            self.mask[field::PROTO][0] = 0xff;
            self
        }
        fn range(mut self, f: Range<usize>, lo: u128, hi: u128) -> Self {
            self.ranges.push(RangeCond { field: f, lo, hi });
            self
        }
        fn add(&self, t: &mut TernaryMatcher, priority: i32, entry: u32) -> Result<(), MatchError> {
            t.insert(&self.value, &self.mask, &self.ranges, priority, entry)
        }
    }

    const HOST: [u8; 4] = [192, 168, 1, 10];
    const SERVER: [u8; 4] = [10, 0, 0, 80];

    fn acl() -> TernaryMatcher {
        let mut t = TernaryMatcher::new(KEY_LEN).unwrap();
        // Catch-all, lowest priority, inserted first.
        Rule::default().add(&mut t, 1, 0).unwrap();
        // Web to 10/8.
        Rule::default()
            .prefix(field::DST, [10, 0, 0, 0], 8)
            .proto(TCP)
            .range(field::DPORT, 80, 80)
            .add(&mut t, 100, 1)
            .unwrap();
        // TCP to well-known ports.
        Rule::default().proto(TCP).range(field::DPORT, 0, 1023).add(&mut t, 50, 2).unwrap();
        // From 192.168/16, same priority as the web rule but inserted later.
        Rule::default().prefix(field::SRC, [192, 168, 0, 0], 16).add(&mut t, 100, 3).unwrap();
        // One exact flow, highest priority.
        Rule::default()
            .prefix(field::SRC, HOST, 32)
            .prefix(field::DST, SERVER, 32)
            .proto(UDP)
            .range(field::SPORT, 5000, 5000)
            .range(field::DPORT, 53, 53)
            .add(&mut t, 200, 4)
            .unwrap();
        // UDP high ports on both sides, below the catch-all: never wins.
        Rule::default()
            .proto(UDP)
            .range(field::SPORT, 1024, 65535)
            .range(field::DPORT, 1024, 65535)
            .add(&mut t, -5, 5)
            .unwrap();
        t
    }

    #[test]
    fn acl_priorities() {
        let t = acl();
        assert_eq!(t.len(), 6);
        let other = [172, 16, 0, 1];
        assert_eq!(t.lookup(&key(other, SERVER, 40000, 80, TCP)), Some(1));
        assert_eq!(t.lookup(&key(other, SERVER, 40000, 81, TCP)), Some(2));
        assert_eq!(t.lookup(&key(other, SERVER, 40000, 1023, TCP)), Some(2));
        assert_eq!(t.lookup(&key(other, SERVER, 40000, 1024, TCP)), Some(0));
        assert_eq!(t.lookup(&key(other, SERVER, 40000, 80, UDP)), Some(0));
        // Both priority-100 rules match: the earlier insert wins.
        assert_eq!(t.lookup(&key(HOST, SERVER, 40000, 80, TCP)), Some(1));
        assert_eq!(t.lookup(&key(HOST, SERVER, 40000, 443, TCP)), Some(3));
        assert_eq!(t.lookup(&key(HOST, [11, 0, 0, 1], 40000, 80, TCP)), Some(3));
        // The exact flow beats everything; one byte off and it does not match.
        assert_eq!(t.lookup(&key(HOST, SERVER, 5000, 53, UDP)), Some(4));
        assert_eq!(t.lookup(&key(HOST, SERVER, 5001, 53, UDP)), Some(3));
        assert_eq!(t.lookup(&key([192, 168, 1, 11], SERVER, 5000, 53, UDP)), Some(3));
        assert_eq!(t.lookup(&key(other, SERVER, 5000, 53, UDP)), Some(0));
        assert_eq!(t.lookup(&key(other, SERVER, 5000, 5000, UDP)), Some(0));
    }

    #[test]
    fn without_catch_all_a_miss_is_none() {
        let mut t = TernaryMatcher::new(KEY_LEN).unwrap();
        assert_eq!(t.lookup(&key(HOST, SERVER, 1, 2, TCP)), None);
        Rule::default().proto(UDP).range(field::SPORT, 1024, 65535).add(&mut t, -5, 5).unwrap();
        assert_eq!(t.lookup(&key(HOST, SERVER, 1024, 2, UDP)), Some(5));
        assert_eq!(t.lookup(&key(HOST, SERVER, 1023, 2, UDP)), None);
        assert_eq!(t.lookup(&key(HOST, SERVER, 1024, 2, TCP)), None);
        // Wrong lengths find nothing.
        assert_eq!(t.lookup(&key(HOST, SERVER, 1024, 2, UDP)[..12]), None);
        assert_eq!(t.lookup(&[0; 14]), None);
    }

    #[test]
    fn priority_order_does_not_depend_on_insertion_order() {
        let rules = [(3, 30), (i32::MIN, 0), (7, 70), (-1, 10), (i32::MAX, 99), (7, 71)];
        for rot in 0..rules.len() {
            let mut order = rules.to_vec();
            order.rotate_left(rot);
            let mut t = TernaryMatcher::new(2).unwrap();
            // All match key [0, 0]; distinct masks keep equal priorities from being duplicates.
            for (i, &(p, e)) in order.iter().enumerate() {
                t.insert(&[0, 0], &[0xff, 1 << i], &[], p, e).unwrap();
            }
            let first7 = order.iter().find(|r| r.0 == 7).unwrap().1;
            assert_eq!(t.lookup(&[0, 0]), Some(99));
            t.insert(&[0, 0], &[0xff, 0xff], &[], i32::MAX, 100).unwrap();
            assert_eq!(t.lookup(&[0, 0]), Some(99), "equal priority: first inserted wins");
            // Without the top rule the highest remaining is the earlier of the two sevens.
            let mut t = TernaryMatcher::new(2).unwrap();
            for (i, &(p, e)) in order.iter().filter(|r| r.0 != i32::MAX).enumerate() {
                t.insert(&[0, 0], &[0xff, 1 << i], &[], p, e).unwrap();
            }
            assert_eq!(t.lookup(&[0, 0]), Some(first7));
        }
    }

    #[test]
    fn duplicates() {
        let mut t = TernaryMatcher::new(2).unwrap();
        t.insert(&[0x12, 0x34], &[0xff, 0xf0], &[], 5, 1).unwrap();
        // Same masked value (bits outside the mask differ), mask and priority.
        assert_eq!(t.insert(&[0x12, 0x3f], &[0xff, 0xf0], &[], 5, 2), Err(MatchError::DuplicateKey));
        // Another priority, another mask: distinct entries.
        t.insert(&[0x12, 0x34], &[0xff, 0xf0], &[], 6, 3).unwrap();
        t.insert(&[0x12, 0x34], &[0xff, 0xff], &[], 5, 4).unwrap();
        // Ranges are compared as a set.
        let r1 = RangeCond { field: 0..1, lo: 1, hi: 2 };
        let r2 = RangeCond { field: 1..2, lo: 3, hi: 4 };
        t.insert(&[0, 0], &[0, 0], &[r1.clone(), r2.clone()], 1, 5).unwrap();
        assert_eq!(t.insert(&[0, 0], &[0, 0], &[r2, r1], 1, 6), Err(MatchError::DuplicateKey));
        assert_eq!(t.len(), 4);
        assert_eq!(t.lookup(&[0x12, 0x34]), Some(3));
        assert_eq!(t.lookup(&[0x01, 0x04]), Some(5));
    }

    #[test]
    fn insert_errors() {
        let mut t = TernaryMatcher::new(4).unwrap();
        let z = [0u8; 4];
        let r = |field: Range<usize>, lo: u128, hi: u128| [RangeCond { field, lo, hi }];
        assert_eq!(t.insert(&[0; 3], &z, &[], 0, 0), Err(MatchError::WrongLen { what: "value", expected: 4, got: 3 }));
        assert_eq!(t.insert(&z, &[0; 5], &[], 0, 0), Err(MatchError::WrongLen { what: "mask", expected: 4, got: 5 }));
        assert_eq!(t.insert(&z, &z, &r(2..4, 9, 8), 0, 0), Err(MatchError::RangeEmpty { lo: 9, hi: 8 }));
        assert_eq!(
            t.insert(&z, &z, &r(2..4, 0, 0x1_0000), 0, 0),
            Err(MatchError::RangeBound { value: 0x1_0000, width: 2 })
        );
        #[allow(clippy::reversed_empty_ranges)] // 3..2 on purpose
        for f in [2..5, 2..2, 3..2, 4..5] {
            assert_eq!(
                t.insert(&z, &z, &r(f.clone(), 0, 0), 0, 0),
                Err(MatchError::RangeField { field: f, key_len: 4 })
            );
        }
        assert_eq!(t.insert(&z, &[0, 0, 0, 1], &r(2..4, 0, 1), 0, 0), Err(MatchError::RangeMasked { field: 2..4 }));
        assert!(t.is_empty());
        assert_eq!(TernaryMatcher::new(65).unwrap_err(), MatchError::KeyLenOutOfRange(65));

        let mut t = TernaryMatcher::new(1).unwrap().with_max_entries(1);
        t.insert(&[1], &[0xff], &[], 0, 0).unwrap();
        assert_eq!(t.insert(&[2], &[0xff], &[], 0, 0), Err(MatchError::TableFull { what: "entries", max: 1 }));
    }

    /// A range over a whole IPv6 address (16 bytes, the full u128) and over one byte.
    #[test]
    fn wide_and_narrow_ranges() {
        let mut t = TernaryMatcher::new(17).unwrap();
        let lo = 0x2001_0db8_0000_0000_0000_0000_0000_0000u128;
        let hi = 0x2001_0db8_ffff_ffff_ffff_ffff_ffff_ffffu128;
        t.insert(&[0; 17], &[0; 17], &[RangeCond { field: 0..16, lo, hi }], 2, 1).unwrap();
        t.insert(&[0; 17], &[0; 17], &[RangeCond { field: 0..16, lo: 0, hi: u128::MAX }], 1, 2).unwrap();
        t.insert(&[0; 17], &[0; 17], &[RangeCond { field: 16..17, lo: 10, hi: 20 }], 3, 3).unwrap();
        let k = |a: u128, b: u8| {
            let mut k = [0u8; 17];
            k[..16].copy_from_slice(&a.to_be_bytes());
            k[16] = b;
            k
        };
        assert_eq!(t.lookup(&k(lo, 0)), Some(1));
        assert_eq!(t.lookup(&k(hi, 9)), Some(1));
        assert_eq!(t.lookup(&k(hi + 1, 9)), Some(2));
        assert_eq!(t.lookup(&k(lo - 1, 21)), Some(2));
        assert_eq!(t.lookup(&k(u128::MAX, 10)), Some(3));
        assert_eq!(t.lookup(&k(lo, 20)), Some(3));
    }

    /// Past the classifier's limits (range fields, then entries) lookups scan the rows, with
    /// the same answers.
    #[test]
    fn beyond_the_classifier_limits() {
        use super::super::classifier::{MAX_ENTRIES, MAX_RANGE_DIMS};
        // One range field per key byte: entry i holds when byte i is in 10..=20.
        const LEN: usize = MAX_RANGE_DIMS + 1;
        let mut t = TernaryMatcher::new(LEN).unwrap();
        assert_eq!((t.key_len(), t.is_empty(), t.memory_bytes()), (LEN, true, 0));
        let z = [0u8; LEN];
        for i in 0..LEN {
            assert!(t.uses_classifier(), "{i} range fields");
            t.insert(&z, &z, &[RangeCond { field: i..i + 1, lo: 10, hi: 20 }], -(i as i32), i as u32).unwrap();
        }
        assert!(!t.uses_classifier());
        assert!(!t.is_empty());
        // Rows of two words (32 bytes), metadata (16 bytes), one range condition each.
        assert_eq!(t.memory_bytes(), LEN * (32 + 16 + core::mem::size_of::<RangeCheck>()));
        for i in 0..LEN {
            let mut k = z;
            k[i] = 20;
            assert_eq!(t.lookup(&k), Some(i as u32));
            k[i] = 21;
            assert_eq!(t.lookup(&k), None);
        }

        // One exact entry per two-byte key, the lower keys at higher priority.
        let mut t = TernaryMatcher::new(2).unwrap();
        t.insert(&[0, 0], &[0xff, 0xff], &[], 0, 0).unwrap();
        // One byte dimension for each masked byte: 256 bitmaps of one word.
        assert_eq!(t.memory_bytes(), 2 * 256 * 8);
        let debug = format!("TernaryMatcher {{ key_len: 2, len: 1, max_entries: {}, memory_bytes: 4096 }}", usize::MAX);
        assert_eq!(format!("{t:?}"), debug);
        for i in 1..=MAX_ENTRIES as u16 {
            assert!(t.uses_classifier(), "{i} entries");
            t.insert(&i.to_be_bytes(), &[0xff, 0xff], &[], -i32::from(i), u32::from(i)).unwrap();
        }
        assert!(!t.uses_classifier());
        t.insert(&[0, 0], &[0, 0], &[], -1000, 9999).unwrap();
        for i in (0..=MAX_ENTRIES as u16).step_by(7) {
            assert_eq!(t.lookup(&i.to_be_bytes()), Some(u32::from(i)));
            assert_eq!(t.lookup_padded(&padded(&i.to_be_bytes())), Some(u32::from(i)));
        }
        assert_eq!(t.lookup(&[0xff, 0xff]), Some(9999));
        assert_eq!(t.lookup_padded(&padded(&[0xff, 0xff])), Some(9999));
    }

    /// The scan reads a range field from the loaded key words when it lies inside one word and
    /// from the key bytes otherwise: a field straddling two words, one ending on a word's last
    /// byte, a whole word, one wider than a word, and the last byte of a key with a short tail
    /// word all match exactly their bounds, in big-endian order. A field wider than 16 bytes
    /// is refused.
    #[test]
    fn scan_reads_range_fields_across_and_within_key_words() {
        const LEN: usize = 38; // Five words, the last of six bytes.
        let fields: [(Range<usize>, u128, u128); 5] = [
            (6..10, 0x0102_0304, 0x0102_0310),                      // Bytes 6, 7 | 8, 9.
            (12..16, 0x1112_1314, 0x1112_1320),                     // Ends on word 1's last byte.
            (16..24, 0x2122_2324_2526_2728, 0x2122_2324_2526_2730), // Word 2.
            (24..36, 0x3132_3334_3536_3738_393a_3b3c, 0x3132_3334_3536_3738_393a_3b48), // Words 3, 4.
            (37..38, 0x41, 0x4f),                                   // Last byte, tail word.
        ];
        let z = [0u8; LEN];
        let mut t = TernaryMatcher::new(LEN).unwrap();
        for (i, (f, lo, hi)) in fields.iter().enumerate() {
            let r = RangeCond { field: f.clone(), lo: *lo, hi: *hi };
            t.insert(&z, &z, &[r], 10 - i as i32, i as u32 + 1).unwrap();
        }
        // A key of zeros but for one field set to `v` (big-endian).
        let k = |f: &Range<usize>, v: u128| {
            let mut k = z;
            k[f.clone()].copy_from_slice(&v.to_be_bytes()[16 - f.len()..]);
            k
        };
        for (i, (f, lo, hi)) in fields.iter().enumerate() {
            let want = Some(i as u32 + 1);
            for (v, hit) in [(*lo, want), (*hi, want), (lo - 1, None), (hi + 1, None)] {
                assert_eq!(t.scan(&k(f, v)), hit, "field {f:?} value {v:#x}");
                assert_eq!(t.lookup(&k(f, v)), hit, "classifier, field {f:?} value {v:#x}");
            }
        }
        assert_eq!(t.scan(&z), None);
        let wide = RangeCond { field: 0..17, lo: 0, hi: 1 };
        assert_eq!(t.insert(&z, &z, &[wide], 0, 9), Err(MatchError::RangeField { field: 0..17, key_len: LEN }));
        assert_eq!(t.len(), fields.len());
    }

    fn padded(key: &[u8]) -> [u8; KEY_MAX] {
        let mut k = [0; KEY_MAX];
        k[..key.len()].copy_from_slice(key);
        k
    }

    /// One bit of mask at every byte of every key length: word boundaries and tails.
    #[test]
    fn every_key_length() {
        for len in 1..=64usize {
            let mut t = TernaryMatcher::new(len).unwrap();
            for pos in 0..len {
                let mut v = vec![0u8; len];
                let mut m = vec![0u8; len];
                v[pos] = 0x80;
                m[pos] = 0x80;
                t.insert(&v, &m, &[], -(pos as i32), pos as u32).unwrap();
            }
            for pos in 0..len {
                let mut k = vec![0x7fu8; len];
                k[pos] = 0xff;
                assert_eq!(t.lookup(&k), Some(pos as u32), "len {len} pos {pos}");
            }
            assert_eq!(t.lookup(&vec![0x7f; len]), None, "len {len}");
        }
    }

    /// The naive reference: a Vec in insertion order; the best match is the highest priority,
    /// then the earliest.
    #[derive(Default)]
    struct Naive {
        rules: Vec<NaiveRule>,
    }

    /// (value, mask, ranges, priority, entry).
    type NaiveRule = (Vec<u8>, Vec<u8>, Vec<RangeCond>, i32, u32);

    impl Naive {
        fn matches(rule: &NaiveRule, key: &[u8]) -> bool {
            let (v, m, ranges, ..) = rule;
            key.iter().zip(v).zip(m).all(|((k, v), m)| k & m == v & m)
                && ranges.iter().all(|r| (r.lo..=r.hi).contains(&be_value(&key[r.field.clone()])))
        }

        fn lookup(&self, key: &[u8]) -> Option<u32> {
            let mut best: Option<&NaiveRule> = None;
            for r in self.rules.iter().filter(|r| Self::matches(r, key)) {
                match best {
                    Some(b) if b.3 >= r.3 => {}
                    _ => best = Some(r),
                }
            }
            best.map(|r| r.4)
        }

        fn is_duplicate(&self, v: &[u8], m: &[u8], ranges: &[RangeCond], p: i32) -> bool {
            let mut rs: Vec<_> = ranges.iter().map(|r| (r.field.start, r.field.end, r.lo, r.hi)).collect();
            rs.sort_unstable();
            self.rules.iter().any(|(v2, m2, r2, p2, _)| {
                let mut r2: Vec<_> = r2.iter().map(|r| (r.field.start, r.field.end, r.lo, r.hi)).collect();
                r2.sort_unstable();
                *p2 == p
                    && m == m2.as_slice()
                    && v.iter().zip(m).map(|(a, b)| a & b).eq(v2.iter().zip(m2).map(|(a, b)| a & b))
                    && rs == r2
            })
        }
    }

    fn byte() -> impl Strategy<Value = u8> {
        prop::sample::select(vec![0u8, 1, 0x0f, 0x80, 0xff])
    }

    /// An entry: value and mask from few byte values, at most two ranges (on fields whose mask
    /// is then cleared) of 1..=16 bytes, priorities from a small set so that ties happen.
    fn rule(len: usize) -> impl Strategy<Value = (Vec<u8>, Vec<u8>, Vec<RangeCond>, i32)> {
        let range = (0..len, 1..=16usize, byte(), byte(), byte(), byte()).prop_map(move |(s, w, a, b, c, d)| {
            let f = s..(s + w).min(len);
            let bits = 8 * f.len() as u32;
            let full = if bits == 128 { u128::MAX } else { (1u128 << bits) - 1 };
            let x = u128::from_be_bytes([a, b, c, d, a, b, c, d, a, b, c, d, a, b, c, d]) & full;
            let y = u128::from_be_bytes([d, c, b, a, d, c, b, a, d, c, b, a, d, c, b, a]) & full;
            RangeCond { field: f, lo: x.min(y), hi: x.max(y) }
        });
        (
            prop::collection::vec(byte(), len),
            prop::collection::vec(prop::sample::select(vec![0u8, 0xff, 0xf0, 0x0f, 0x80]), len),
            prop::collection::vec(range, 0..=2),
            -2i32..=3,
        )
            .prop_map(|(v, mut m, ranges, p)| {
                for r in &ranges {
                    m[r.field.clone()].fill(0);
                }
                (v, m, ranges, p)
            })
    }

    /// `value` with each range field set to the range's `lo` (or `hi`): a key the entry matches
    /// when its value/mask does.
    fn at_bounds(value: &[u8], ranges: &[RangeCond], hi: bool) -> Vec<u8> {
        let mut k = value.to_vec();
        for r in ranges {
            let b = if hi { r.hi } else { r.lo }.to_be_bytes();
            k[r.field.clone()].copy_from_slice(&b[16 - r.field.len()..]);
        }
        k
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Many entries on a short key (at most 6 range fields: within the classifier's limits):
        /// bitmaps of several words, priorities inserted in random
        /// order; the classifier, the scan and the reference agree.
        #[test]
        fn classifier_agrees_with_the_scan_beyond_one_word(
            (len, rules, probes) in (1usize..=3).prop_flat_map(|len| (
                Just(len),
                prop::collection::vec(rule(len), 60..200),
                prop::collection::vec(prop::collection::vec(byte(), len), 0..60),
            ))
        ) {
            let mut t = TernaryMatcher::new(len).unwrap();
            let mut naive = Naive::default();
            for (i, (v, m, ranges, p)) in rules.iter().enumerate() {
                let p = *p * 37 + (i as i32 % 5);
                if !naive.is_duplicate(v, m, ranges, p) {
                    t.insert(v, m, ranges, p, i as u32).unwrap();
                    naive.rules.push((v.clone(), m.clone(), ranges.clone(), p, i as u32));
                }
            }
            prop_assert!(t.uses_classifier());
            let mut keys = probes.clone();
            for (v, _, ranges, _) in &rules {
                keys.push(at_bounds(v, ranges, false));
                keys.push(at_bounds(v, ranges, true));
            }
            for k in &keys {
                let want = naive.lookup(k);
                prop_assert_eq!(t.lookup(k), want, "key {:?}", k);
                prop_assert_eq!(t.scan(k), want, "scan, key {:?}", k);
            }
        }
    }

    proptest! {
        #[test]
        fn agrees_with_a_vec_scan(
            (len, rules, probes) in (1usize..=64).prop_flat_map(|len| (
                Just(len),
                prop::collection::vec(rule(len), 0..40),
                prop::collection::vec(prop::collection::vec(byte(), len), 0..40),
            ))
        ) {
            let mut t = TernaryMatcher::new(len).unwrap();
            let mut naive = Naive::default();
            for (i, (v, m, ranges, p)) in rules.iter().enumerate() {
                let dup = naive.is_duplicate(v, m, ranges, *p);
                let got = t.insert(v, m, ranges, *p, i as u32);
                if dup {
                    prop_assert_eq!(got, Err(MatchError::DuplicateKey));
                } else {
                    prop_assert_eq!(got, Ok(()));
                    naive.rules.push((v.clone(), m.clone(), ranges.clone(), *p, i as u32));
                }
            }
            prop_assert_eq!(t.len(), naive.rules.len());
            // Probes: the random keys, and each entry's value with its range fields at their
            // bounds (so that it matches at least that entry).
            let mut keys = probes.clone();
            for (v, _, ranges, _) in &rules {
                keys.push(v.clone());
                keys.push(at_bounds(v, ranges, false));
                keys.push(at_bounds(v, ranges, true));
            }
            for k in &keys {
                prop_assert_eq!(t.lookup(k), naive.lookup(k), "key {:?}", k);
                prop_assert_eq!(t.scan(k), naive.lookup(k), "scan, key {:?}", k);
            }
        }
    }
}
