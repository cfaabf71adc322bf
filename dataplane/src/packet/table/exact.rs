//! Exact match: an open-addressing hash table with the keys stored inline.
//!
//! # Shape
//! A key of `key_len` bytes (`1..=64`) is held as `W = ceil(key_len / 8)` `u64` words (see
//! `words`); the table is specialised for each `W`, so a 6-byte MAC address is one word,
//! loaded with two 4-byte reads, hashed with one multiply and compared with one `cmp`.
//!
//! Each slot is `{ tag: u32, entry: u32, key: [u64; W] }` (`8 + 8W` bytes: 16 for keys up to 8
//! bytes, four slots per cache line). `tag` is the upper half of the key's hash with its low bit
//! forced on, 0 meaning an empty slot; it rejects most non-matching slots before their key
//! words are read. Slots are probed linearly from `hash & (slots - 1)`.
//!
//! # Cost
//! The table doubles whenever it would become more than half full, so the load factor is kept
//! in `(1/4, 1/2]`: a hit probes 1.5 slots and a miss 2.5 on average (Knuth's linear-probing
//! estimates), nearly always within one or two cache lines. Lookup: one hash (a folded
//! multiply per word), then those probes; no allocation, no lock.
//!
//! # Memory
//! `2..4` slots of `8 + 8W` bytes per entry: 32 to 64 bytes per entry for keys up to 8 bytes,
//! 144 to 288 for 64-byte keys.

use super::matcher::{check_key_len, check_len, debug_sizes, MatchError};
use super::words::{by_words, dispatch, hash, load, word_count};
use core::fmt;

/// Bytes of slots above which [`ExactMatcher::prefetch_word`] prefetches (256 KiB: more than
/// the L2 cache of most x86 cores keeps beside everything else a worker touches).
pub const PREFETCH_ABOVE: usize = 256 << 10;

/// Most entries any exact table holds (2^30: the slot array is at most 2^31 slots).
pub const MAX_ENTRIES: usize = 1 << 30;

/// Slots of a new, empty table.
const MIN_SLOTS: usize = 16;

/// Tag of an empty slot; real tags have their low bit set.
const EMPTY: u32 = 0;

/// An exact-match table from keys of a fixed length to entry indices. See the module docs for
/// the layout and its costs.
#[derive(Clone)]
pub struct ExactMatcher {
    /// Key length (bytes), `1..=64`.
    key_len: usize,
    /// Most entries allowed (at most [`MAX_ENTRIES`]).
    max_entries: usize,
    /// The table, specialised for the key's word count.
    inner: Inner,
}

/// A [`Table`] for each word count.
#[derive(Clone)]
enum Inner {
    W1(Table<1>),
    W2(Table<2>),
    W3(Table<3>),
    W4(Table<4>),
    W5(Table<5>),
    W6(Table<6>),
    W7(Table<7>),
    W8(Table<8>),
}

impl ExactMatcher {
    /// An empty table for keys of `key_len` bytes (`1..=64`), holding up to [`MAX_ENTRIES`].
    pub fn new(key_len: usize) -> Result<Self, MatchError> {
        check_key_len(key_len)?;
        let inner = by_words!(Inner, word_count(key_len), new_table());
        Ok(ExactMatcher { key_len, max_entries: MAX_ENTRIES, inner })
    }

    /// Limits the table to `max` entries (a P4 table's `size`); further inserts fail with
    /// [`MatchError::TableFull`]. Values above [`MAX_ENTRIES`] are clamped to it.
    pub fn with_max_entries(mut self, max: usize) -> Self {
        self.max_entries = max.min(MAX_ENTRIES);
        self
    }

    /// Key length (bytes).
    pub fn key_len(&self) -> usize {
        self.key_len
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        dispatch!(Inner, &self.inner, t => t.len)
    }

    /// True if the table has no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Heap memory held by the slot array (bytes).
    pub fn memory_bytes(&self) -> usize {
        dispatch!(Inner, &self.inner, t => core::mem::size_of_val(&*t.slots))
    }

    /// Adds `key` (exactly `key_len` bytes) mapping to `entry`.
    ///
    /// Errors: [`MatchError::WrongLen`] for a key of another length,
    /// [`MatchError::DuplicateKey`] if `key` is already present (the table is unchanged),
    /// [`MatchError::TableFull`] at the entry limit. May reallocate (doubling the slot array).
    pub fn insert(&mut self, key: &[u8], entry: u32) -> Result<(), MatchError> {
        check_len("key", key, self.key_len)?;
        if self.len() >= self.max_entries {
            return Err(MatchError::TableFull { what: "entries", max: self.max_entries });
        }
        dispatch!(Inner, &mut self.inner, t => t.insert(load(key), entry))
    }

    /// The entry of `key`, or `None` if it is absent or not `key_len` bytes long.
    ///
    /// Never allocates, locks or panics; cost in the module docs.
    #[inline]
    pub fn lookup(&self, key: &[u8]) -> Option<u32> {
        if key.len() != self.key_len {
            return None;
        }
        dispatch!(Inner, &self.inner, t => t.find(&load(key)))
    }

    /// [`ExactMatcher::lookup`] of a key of at most 8 bytes given as its word: `w` is the key's
    /// bytes loaded little-endian, zero above `key_len` (see `Field::word`). `None` for a table
    /// of longer keys.
    #[inline(always)]
    pub fn lookup_word(&self, w: u64) -> Option<u32> {
        match &self.inner {
            Inner::W1(t) => t.find(&[w]),
            _ => None,
        }
    }

    /// Prefetches the slot that [`ExactMatcher::lookup_word`] of `w` probes first, so that a
    /// burst's lookups overlap their cache misses. A no-op for a table of longer keys, and for
    /// one whose slots take at most [`PREFETCH_ABOVE`] bytes (they stay in L1 or L2: the hash
    /// the prefetch computes would cost more than it saves).
    #[inline(always)]
    pub fn prefetch_word(&self, w: u64) {
        if let Inner::W1(t) = &self.inner {
            if t.slots.len() > PREFETCH_ABOVE / size_of::<Slot<1>>() {
                t.prefetch(&[w]);
            }
        }
    }

    /// The entry of `key` with its bytes ANDed with `mask` first: `mask` holds the table's
    /// key-length bytes as words (`words::load` of a byte mask, zero-padded to eight words).
    /// The keys were inserted already masked. The LPM matcher uses this to find the trie of a
    /// key's exact part without copying the exact bytes out.
    #[inline]
    pub(super) fn lookup_masked(&self, key: &[u8], mask: &[u64; 8]) -> Option<u32> {
        if key.len() != self.key_len {
            return None;
        }
        dispatch!(Inner, &self.inner, t => {
            let mut k = load(key);
            for (w, m) in k.iter_mut().zip(mask) {
                *w &= m;
            }
            t.find(&k)
        })
    }

    /// Longest probe sequence of any stored key (slots read by its lookup).
    #[cfg(test)]
    fn max_probe(&self) -> usize {
        dispatch!(Inner, &self.inner, t => t.max_probe())
    }
}

impl fmt::Debug for ExactMatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_sizes(f, "ExactMatcher", self.key_len, self.len(), self.max_entries, self.memory_bytes())
    }
}

/// One slot: see the module docs.
#[derive(Clone, Copy)]
#[repr(C)]
struct Slot<const W: usize> {
    /// [`EMPTY`], or the key's [`tag`].
    tag: u32,
    /// The entry index.
    entry: u32,
    /// The key's words.
    key: [u64; W],
}

impl<const W: usize> Slot<W> {
    const EMPTY: Self = Slot { tag: EMPTY, entry: 0, key: [0; W] };
}

/// Tag of a hash: its upper half, never [`EMPTY`].
#[inline(always)]
fn tag(h: u64) -> u32 {
    ((h >> 32) as u32) | 1
}

/// The open-addressing table for keys of `W` words.
#[derive(Clone)]
struct Table<const W: usize> {
    /// A power of two of slots, at most half full.
    slots: Box<[Slot<W>]>,
    /// `slots.len() - 1`.
    mask: usize,
    /// Occupied slots.
    len: usize,
}

fn new_table<const W: usize>() -> Table<W> {
    Table::with_slots(MIN_SLOTS)
}

impl<const W: usize> Table<W> {
    fn with_slots(n: usize) -> Self {
        debug_assert!(n.is_power_of_two());
        Table { slots: vec![Slot::EMPTY; n].into_boxed_slice(), mask: n - 1, len: 0 }
    }

    /// Prefetches the slot where the probe for `k` starts.
    #[inline(always)]
    fn prefetch(&self, k: &[u64; W]) {
        if let Some(slot) = self.slots.get(hash(k) as usize & self.mask) {
            crate::prefetch::prefetch(slot);
        }
    }

    /// Probes for `k`. Terminates because the table is never more than half full.
    #[inline(always)]
    fn find(&self, k: &[u64; W]) -> Option<u32> {
        let h = hash(k);
        let tag = tag(h);
        let mut i = h as usize & self.mask;
        loop {
            let s = &self.slots[i];
            if s.tag == tag && s.key == *k {
                return Some(s.entry);
            }
            if s.tag == EMPTY {
                return None;
            }
            i = (i + 1) & self.mask;
        }
    }

    fn insert(&mut self, k: [u64; W], entry: u32) -> Result<(), MatchError> {
        if self.find(&k).is_some() {
            return Err(MatchError::DuplicateKey);
        }
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        self.place(Slot { tag: tag(hash(&k)), entry, key: k });
        Ok(())
    }

    /// Puts a slot known to be absent into the first empty slot of its probe sequence.
    fn place(&mut self, slot: Slot<W>) {
        let mut i = hash(&slot.key) as usize & self.mask;
        while self.slots[i].tag != EMPTY {
            i = (i + 1) & self.mask;
        }
        self.slots[i] = slot;
        self.len += 1;
    }

    /// Doubles the slot array and re-places every key.
    fn grow(&mut self) {
        let old = core::mem::replace(self, Table::with_slots(self.slots.len() * 2));
        for s in old.slots.iter().filter(|s| s.tag != EMPTY) {
            self.place(*s);
        }
    }

    /// Longest probe sequence of any stored key (slots read by its lookup).
    #[cfg(test)]
    fn max_probe(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| s.tag != EMPTY)
            .map(|s| {
                let home = hash(&s.key) as usize & self.mask;
                let mut i = home;
                let mut n = 1;
                while self.slots[i].key != s.key || self.slots[i].tag == EMPTY {
                    i = (i + 1) & self.mask;
                    n += 1;
                }
                n
            })
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn mac(s: &str) -> [u8; 6] {
        let mut m = [0u8; 6];
        for (o, p) in m.iter_mut().zip(s.split(':')) {
            *o = u8::from_str_radix(p, 16).unwrap();
        }
        m
    }

    #[test]
    fn mac_addresses() {
        let mut t = ExactMatcher::new(6).unwrap();
        assert!(t.is_empty());
        t.insert(&mac("02:00:00:00:00:01"), 1).unwrap();
        t.insert(&mac("02:00:00:00:00:02"), 2).unwrap();
        t.insert(&mac("ff:ff:ff:ff:ff:ff"), 0).unwrap();
        t.insert(&mac("00:00:00:00:00:00"), u32::MAX).unwrap();
        assert_eq!((t.len(), t.is_empty(), t.key_len()), (4, false, 6));
        // 16 slots of 16 bytes: four entries fill them half.
        let debug = "ExactMatcher { key_len: 6, len: 4, max_entries: 1073741824, memory_bytes: 256 }";
        assert_eq!(format!("{t:?}"), debug);
        assert_eq!(t.lookup(&mac("02:00:00:00:00:01")), Some(1));
        assert_eq!(t.lookup(&mac("02:00:00:00:00:02")), Some(2));
        assert_eq!(t.lookup(&mac("ff:ff:ff:ff:ff:ff")), Some(0));
        assert_eq!(t.lookup(&mac("00:00:00:00:00:00")), Some(u32::MAX));
        assert_eq!(t.lookup(&mac("02:00:00:00:00:03")), None);
        assert_eq!(t.lookup(&mac("03:00:00:00:00:01")), None);
    }

    /// A tag is the hash's upper half with the low bit on: never the empty slot's 0.
    #[test]
    fn tags() {
        assert_eq!(tag(0), 1);
        assert_eq!(tag(0xffff_ffff), 1);
        assert_eq!(tag(0xabcd_0000_ffff_ffff), 0xabcd_0001);
        assert_eq!(tag(0xabcd_0001_0000_0000), 0xabcd_0001);
    }

    /// The slot array doubles before it would be more than half full.
    #[test]
    fn at_most_half_full() {
        let mut t = ExactMatcher::new(1).unwrap();
        for k in 0..8u8 {
            t.insert(&[k], u32::from(k)).unwrap();
        }
        assert_eq!(t.memory_bytes(), 16 * 16, "8 entries in 16 slots");
        t.insert(&[8], 8).unwrap();
        assert_eq!(t.memory_bytes(), 32 * 16, "9 entries in 32 slots");
        assert!((0..9u8).all(|k| t.lookup(&[k]) == Some(u32::from(k))));
    }

    /// Keys sharing a home slot take the following free slots, wrapping from the last slot to
    /// the first; each is found after every insert, a key whose home is inside the cluster goes
    /// past it, and a miss with the same home probes past them all.
    #[test]
    fn colliding_keys_take_the_next_free_slots_wrapping_at_the_end() {
        let mask = MIN_SLOTS - 1;
        let home = |b: u8| hash(&load::<1>(&[b])) as usize & mask;
        for slot in [3, mask] {
            // Five 1-byte keys with home `slot` (four stored, one missed), and one with home
            // `slot + 1`.
            let same: Vec<u8> = (0..=255u8).filter(|&b| home(b) == slot).take(5).collect();
            let next = (0..=255u8).find(|&b| home(b) == (slot + 1) & mask).unwrap();
            assert_eq!(same.len(), 5, "slot {slot}");
            let mut t = ExactMatcher::new(1).unwrap();
            let mut stored = Vec::new();
            for (e, &b) in (100u32..).zip(&same[..4]).chain([(200, &next)]) {
                t.insert(&[b], e).unwrap();
                stored.push((b, e));
                for &(b, e) in &stored {
                    assert_eq!(t.lookup(&[b]), Some(e), "slot {slot}: key {b} after inserting {stored:?}");
                }
            }
            assert_eq!(t.memory_bytes(), MIN_SLOTS * 16, "five keys stay in the first 16 slots");
            // Slots home..=home+3 hold the cluster; `next` (home + 1) is four slots on.
            assert_eq!(t.max_probe(), 4, "slot {slot}");
            assert_eq!(t.lookup(&[same[4]]), None, "slot {slot}");
            assert_eq!(t.insert(&[same[3]], 0), Err(MatchError::DuplicateKey), "slot {slot}");
        }
    }

    #[test]
    fn duplicate_is_an_error_and_keeps_the_first() {
        let mut t = ExactMatcher::new(6).unwrap();
        t.insert(&mac("02:00:00:00:00:01"), 7).unwrap();
        assert_eq!(t.insert(&mac("02:00:00:00:00:01"), 8), Err(MatchError::DuplicateKey));
        assert_eq!(t.lookup(&mac("02:00:00:00:00:01")), Some(7));
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn key_length_checks() {
        assert_eq!(ExactMatcher::new(0).unwrap_err(), MatchError::KeyLenOutOfRange(0));
        assert_eq!(ExactMatcher::new(65).unwrap_err(), MatchError::KeyLenOutOfRange(65));
        let mut t = ExactMatcher::new(4).unwrap();
        assert_eq!(t.insert(&[1, 2, 3], 0), Err(MatchError::WrongLen { what: "key", expected: 4, got: 3 }));
        t.insert(&[1, 2, 3, 4], 9).unwrap();
        // Lookups of the wrong length find nothing rather than panic.
        assert_eq!(t.lookup(&[1, 2, 3]), None);
        assert_eq!(t.lookup(&[1, 2, 3, 4, 0]), None);
        assert_eq!(t.lookup(&[]), None);
    }

    #[test]
    fn table_full() {
        let mut t = ExactMatcher::new(2).unwrap().with_max_entries(3);
        for i in 0..3u16 {
            t.insert(&i.to_be_bytes(), u32::from(i)).unwrap();
        }
        assert_eq!(t.insert(&[0, 9], 9), Err(MatchError::TableFull { what: "entries", max: 3 }));
        assert_eq!(t.len(), 3);
    }

    /// Every key length from 1 to 64: keys differing only in their first byte, only in their
    /// last byte, and in the byte just before a word boundary all stay apart.
    #[test]
    fn every_key_length() {
        for len in 1..=64usize {
            let mut t = ExactMatcher::new(len).unwrap();
            let mut keys = Vec::new();
            for pos in [0, len - 1, (len - 1) / 8 * 8, len / 2] {
                for v in [1u8, 2, 0x80, 0xff] {
                    let mut k = vec![0x5a; len];
                    k[pos] = v;
                    if !keys.contains(&k) {
                        keys.push(k);
                    }
                }
            }
            for (i, k) in keys.iter().enumerate() {
                t.insert(k, i as u32).unwrap();
            }
            for (i, k) in keys.iter().enumerate() {
                assert_eq!(t.lookup(k), Some(i as u32), "len {len} key {k:?}");
            }
            assert_eq!(t.lookup(&vec![0x5a; len]), None, "len {len}");
            assert_eq!(t.lookup(&vec![0; len]), None, "len {len}");
        }
    }

    /// 100k sequential MAC addresses (the worst case for a weak hash): all found, probe chains
    /// stay short, memory is within the documented 2..4 slots per entry.
    #[test]
    fn many_sequential_keys() {
        let mut t = ExactMatcher::new(6).unwrap();
        let n = 100_000u32;
        for i in 0..n {
            let k = u64::from(i) | 0x0200_0000_0000;
            t.insert(&k.to_be_bytes()[2..], i).unwrap();
        }
        for i in 0..n {
            let k = u64::from(i) | 0x0200_0000_0000;
            assert_eq!(t.lookup(&k.to_be_bytes()[2..]), Some(i));
        }
        assert_eq!(t.lookup(&[0x03, 0, 0, 0, 0, 0]), None);
        assert!(t.max_probe() < 40, "max probe {}", t.max_probe());
        let slots = t.memory_bytes() / 16;
        assert!(slots >= 2 * n as usize && slots <= 4 * n as usize, "{slots} slots");
    }

    #[test]
    fn masked_lookup_ignores_masked_bytes() {
        // Key: 2-byte VRF, 4-byte address; the map holds the VRF with the address zeroed.
        let mut t = ExactMatcher::new(6).unwrap();
        t.insert(&[0, 7, 0, 0, 0, 0], 70).unwrap();
        let mut m = [0xffu8; 64];
        m[2..6].fill(0);
        let mask = load::<8>(&m);
        assert_eq!(t.lookup_masked(&[0, 7, 10, 1, 2, 3], &mask), Some(70));
        assert_eq!(t.lookup_masked(&[0, 8, 10, 1, 2, 3], &mask), None);
        assert_eq!(t.lookup_masked(&[0, 7, 10, 1, 2], &mask), None);
    }

    /// Keys from a small alphabet, so sets share prefixes, suffixes and hash neighbourhoods.
    fn keys(len: usize) -> impl Strategy<Value = Vec<Vec<u8>>> {
        prop::collection::vec(prop::collection::vec(prop::sample::select(vec![0u8, 1, 0x80, 0xff]), len), 0..200)
    }

    proptest! {
        #[test]
        fn agrees_with_a_vec_scan(
            (len, inserted, probes) in (1usize..=64).prop_flat_map(|len| (Just(len), keys(len), keys(len)))
        ) {
            let mut t = ExactMatcher::new(len).unwrap();
            let mut reference: Vec<(Vec<u8>, u32)> = Vec::new();
            for (i, k) in inserted.iter().enumerate() {
                let dup = reference.iter().any(|(r, _)| r == k);
                let got = t.insert(k, i as u32);
                if dup {
                    prop_assert_eq!(got, Err(MatchError::DuplicateKey));
                } else {
                    prop_assert_eq!(got, Ok(()));
                    reference.push((k.clone(), i as u32));
                }
            }
            prop_assert_eq!(t.len(), reference.len());
            for k in inserted.iter().chain(&probes) {
                let want = reference.iter().find(|(r, _)| r == k).map(|&(_, e)| e);
                prop_assert_eq!(t.lookup(k), want);
            }
        }
    }
}
