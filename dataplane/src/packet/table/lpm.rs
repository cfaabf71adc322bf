//! Longest-prefix match: a multibit trie with controlled prefix expansion (16-8-8-... strides),
//! one trie per distinct exact part of the key.
//!
//! # Shape
//! The key has one LPM field at bytes `lpm` (`1..=16` bytes: 4 for IPv4, 16 for IPv6); every
//! other key byte is matched exactly (the *exact part*, e.g. a VRF id). Prefix lengths are in
//! bits of the LPM field, counted from its most significant bit: `0..=8 * lpm.len()`.
//!
//! Each trie splits the field into levels: a root level of `root_bits` (16 bits, 65536 slots,
//! when the key has no exact part; 8 bits, 256 slots, per exact part) and then one level per
//! further byte (256 slots). A slot is a `u32`:
//! - `0`: no route covers it;
//! - `CHILD | n` (top bit set): the next byte is looked up in node `n`;
//! - `entry + 1`: the longest prefix covering the slot's whole range.
//!
//! A prefix ending inside a level is expanded to every slot it covers (a /20 fills 16 slots of
//! the level of bits 16..24). A slot keeps the longest covering prefix, whatever the insertion
//! order: beside the slots, each holds the length of the prefix written there (`rank`), and a
//! shorter prefix never overwrites a longer one. A new node starts as 256 copies of the slot it
//! hangs from, so a lookup never backtracks: it follows children until a slot is not one, and
//! that slot is the answer.
//!
//! # Cost
//! One slot read per level: IPv4 without exact part (16-8-8) is at most 3 dependent reads
//! (1 for prefixes up to /16, 2 up to /24); with an exact part, one exact-match probe (see
//! [`ExactMatcher`]) and at most 4 reads (8-8-8-8). IPv6 is at most 15 reads (16 then 14 x 8),
//! or as many as the longest prefix along the key's path needs (7 up to /64).
//! Insert: `O(2^(level end - prefix_len))` slot writes plus the nodes under them.
//!
//! # Memory
//! The 16-bit root is 256 KiB of slots (+ 64 KiB of ranks), allocated by [`LpmMatcher::new`]
//! when there is no exact part; each further node (and each exact part's root) is 1 KiB
//! (+ 256 bytes of ranks). A prefix longer than the root adds at most one node per level it
//! crosses that is not there yet: at most 2 for IPv4, 14 for IPv6 (a /128 in an empty
//! neighbourhood costs about 18 KiB). A hash set of the prefixes (for duplicate detection)
//! adds some 40 bytes per route; none of this is read by lookups.
//!
//! Entry indices are stored in the slots as `entry + 1` beside the child bit, so an entry must
//! be at most [`MAX_ENTRY`] (2^31 - 2).

use super::exact::ExactMatcher;
use super::matcher::{be_value, check_key_len, check_len, MatchError};
use super::words::load;
use core::fmt;
use core::ops::Range;
use std::collections::HashSet;

/// Largest entry index an LPM table can store (2^31 - 2: slots hold `entry + 1` below the
/// child bit).
pub const MAX_ENTRY: u32 = CHILD - 2;

/// Most trie nodes of 256 slots in one table (2^24: 16 GiB of slots, far beyond any real table).
pub const MAX_NODES: usize = 1 << 24;

/// Widest LPM field (bytes): an IPv6 address.
pub const FIELD_MAX: usize = 16;

/// Slot bit marking a child pointer.
const CHILD: u32 = 1 << 31;

/// Slots in a node below the root (one byte of the field).
const NODE: usize = 256;

/// A longest-prefix-match table. See the module docs for the layout and its costs.
#[derive(Clone)]
pub struct LpmMatcher {
    /// Key length (bytes).
    key_len: usize,
    /// The LPM field's bytes in the key.
    field: Range<usize>,
    /// Width of the LPM field (bits): `8 * field.len()`.
    field_bits: u32,
    /// Bits of the field resolved by the root level: 16 or 8.
    root_bits: u32,
    /// The tries of the exact parts; `None` when the key is only the LPM field, and then the
    /// single trie's root is slots `0..2^root_bits`.
    exact: Option<ExactParts>,
    /// Every node's slots, node `n` at `n * 256..(n + 1) * 256` (the 16-bit root spans nodes
    /// 0..256).
    slots: Vec<u32>,
    /// Per slot: 1 + the prefix length written there (0: none). Insert-time only.
    rank: Vec<u8>,
    /// (root node, masked field value, prefix length) of every route. Insert-time only.
    routes: HashSet<(u32, u128, u8)>,
    /// Most routes allowed.
    max_entries: usize,
    /// Most trie nodes allowed: [`MAX_NODES`] (lowered by tests).
    max_nodes: usize,
}

/// The map from exact part to trie root.
#[derive(Clone)]
struct ExactParts {
    /// Key (with the LPM field's bytes zeroed) -> root node.
    map: ExactMatcher,
    /// `words::load` of the key mask: 0xff on exact bytes, 0 on the LPM field.
    mask: [u64; 8],
}

impl LpmMatcher {
    /// An empty table for keys of `key_len` bytes whose bytes `lpm` (`1..=16` of them) are the
    /// LPM field; all other bytes are matched exactly.
    pub fn new(key_len: usize, lpm: Range<usize>) -> Result<Self, MatchError> {
        check_key_len(key_len)?;
        let width = lpm.end.wrapping_sub(lpm.start);
        if lpm.start >= lpm.end || lpm.end > key_len || width > FIELD_MAX {
            return Err(MatchError::LpmField { field: lpm, key_len });
        }
        let field_bits = 8 * width as u32;
        let exact = if width == key_len {
            None
        } else {
            let mut m = [0u8; 64];
            m[..key_len].fill(0xff);
            m[lpm.clone()].fill(0);
            Some(ExactParts { map: ExactMatcher::new(key_len)?, mask: load::<8>(&m) })
        };
        let root_bits = if exact.is_none() && width >= 2 { 16 } else { 8 };
        let root_slots = if exact.is_none() { 1 << root_bits } else { 0 };
        Ok(LpmMatcher {
            key_len,
            field: lpm,
            field_bits,
            root_bits,
            exact,
            slots: vec![0; root_slots],
            rank: vec![0; root_slots],
            routes: HashSet::new(),
            max_entries: MAX_ENTRY as usize + 1,
            max_nodes: MAX_NODES,
        })
    }

    /// Limits the table to `max` routes (a P4 table's `size`); further inserts fail with
    /// [`MatchError::TableFull`].
    pub fn with_max_entries(mut self, max: usize) -> Self {
        self.max_entries = max;
        self
    }

    /// Limits the trie to `max` nodes, so that tests reach the limit.
    #[cfg(test)]
    fn with_max_nodes(mut self, max: usize) -> Self {
        self.max_nodes = max;
        self
    }

    /// Key length (bytes).
    pub fn key_len(&self) -> usize {
        self.key_len
    }

    /// The LPM field's byte range in the key.
    pub fn lpm_field(&self) -> Range<usize> {
        self.field.clone()
    }

    /// Number of routes.
    pub fn len(&self) -> usize {
        self.routes.len()
    }

    /// True if the table has no routes.
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    /// Heap memory read by lookups: the trie slots and the exact-part map (bytes).
    pub fn memory_bytes(&self) -> usize {
        4 * self.slots.len() + self.exact.as_ref().map_or(0, |e| e.map.memory_bytes())
    }

    /// Adds the route `key` / `prefix_len` -> `entry`: keys whose exact part equals `key`'s and
    /// whose LPM field starts with the first `prefix_len` bits of `key`'s LPM field. The field's
    /// bits past `prefix_len` are ignored.
    ///
    /// Errors: [`MatchError::WrongLen`], [`MatchError::PrefixLen`] (`prefix_len` over the
    /// field's bits), [`MatchError::EntryTooLarge`] (over [`MAX_ENTRY`]),
    /// [`MatchError::DuplicateKey`] (same exact part and prefix), [`MatchError::TableFull`]
    /// (routes or [`MAX_NODES`]). On error the table is unchanged.
    pub fn insert(&mut self, key: &[u8], prefix_len: u8, entry: u32) -> Result<(), MatchError> {
        check_len("key", key, self.key_len)?;
        if u32::from(prefix_len) > self.field_bits {
            return Err(MatchError::PrefixLen { prefix_len, field_bits: self.field_bits });
        }
        if entry > MAX_ENTRY {
            return Err(MatchError::EntryTooLarge { entry, max: MAX_ENTRY });
        }
        if self.routes.len() >= self.max_entries {
            return Err(MatchError::TableFull { what: "entries", max: self.max_entries });
        }
        let p = u32::from(prefix_len);
        let addr = be_value(&key[self.field.clone()]) & prefix_mask(self.field_bits, p);
        let term = self.level_of(p);
        // New nodes: at most one per level above the terminal one, plus an exact part's root.
        if self.slots.len() / NODE + term as usize + 1 > self.max_nodes {
            return Err(MatchError::TableFull { what: "trie nodes", max: self.max_nodes });
        }

        let root = match &self.exact {
            None => 0,
            Some(e) => {
                let mut part = key.to_vec();
                part[self.field.clone()].fill(0);
                match e.map.lookup(&part) {
                    Some(r) => r,
                    None => {
                        let r = self.new_node(0, 0);
                        let e = self.exact.as_mut().expect("matched Some above");
                        e.map.insert(&part, r)?;
                        r
                    }
                }
            }
        };
        if !self.routes.insert((root, addr, prefix_len)) {
            return Err(MatchError::DuplicateKey);
        }

        // Walk (creating nodes) down to the level where the prefix ends ...
        let mut base = root as usize * NODE;
        for level in 0..term {
            let s = base + self.index(addr, level) as usize;
            let v = self.slots[s];
            let child = if v & CHILD != 0 {
                v & !CHILD
            } else {
                let n = self.new_node(v, self.rank[s]);
                self.slots[s] = CHILD | n;
                n
            };
            base = child as usize * NODE;
        }
        // ... and expand it over the slots it covers there.
        let (start, bits) = self.level_bits(term);
        let first = base + self.index(addr, term) as usize;
        let count = 1usize << (start + bits - p);
        for s in first..first + count {
            self.paint(s, prefix_len + 1, entry + 1);
        }
        Ok(())
    }

    /// The entry of the longest prefix matching `key` among routes with `key`'s exact part, or
    /// `None` if there is none or `key` is not `key_len` bytes long.
    ///
    /// Never allocates, locks or panics; cost in the module docs.
    #[inline]
    pub fn lookup(&self, key: &[u8]) -> Option<u32> {
        if key.len() != self.key_len {
            return None;
        }
        let f = &key[self.field.clone()];
        if let (None, &[a, b, c, d]) = (&self.exact, f) {
            return self.lookup_ipv4(a, b, c, d);
        }
        let (mut v, mut next) = match &self.exact {
            None if self.root_bits == 16 => (self.slots[(usize::from(f[0]) << 8) | usize::from(f[1])], 2),
            None => (self.slots[usize::from(f[0])], 1),
            Some(e) => {
                let root = e.map.lookup_masked(key, &e.mask)? as usize;
                (self.slots[root * NODE + usize::from(f[0])], 1)
            }
        };
        while v & CHILD != 0 {
            let node = (v & !CHILD) as usize;
            // A child never hangs below the last byte, so `get` never fails; it only keeps a
            // corrupt trie from panicking.
            v = self.slots[node * NODE + usize::from(*f.get(next)?)];
            next += 1;
        }
        v.checked_sub(1)
    }

    /// True when the key is one 4-byte field (IPv4) and nothing else: then
    /// [`LpmMatcher::lookup_word`] and [`LpmMatcher::prefetch_word`] take it as a word.
    pub fn is_ipv4_only(&self) -> bool {
        self.exact.is_none() && self.key_len == 4 && self.field == (0..4) && self.root_bits == 16
    }

    /// [`LpmMatcher::lookup`] for a table where [`LpmMatcher::is_ipv4_only`] holds, of the key
    /// `w`: its 4 bytes loaded little-endian (`w as u8` is the address's first byte).
    #[inline(always)]
    pub fn lookup_word(&self, w: u64) -> Option<u32> {
        let b = w.to_le_bytes();
        self.lookup_ipv4(b[0], b[1], b[2], b[3])
    }

    /// [`LpmMatcher::prefetch`] of the key `w` of [`LpmMatcher::lookup_word`].
    #[inline(always)]
    pub fn prefetch_word(&self, w: u64) {
        let b = w.to_le_bytes();
        self.prefetch_slot((usize::from(b[0]) << 8) | usize::from(b[1]));
    }

    /// Prefetches root slot `i` (nothing when out of range).
    #[inline(always)]
    fn prefetch_slot(&self, i: usize) {
        if let Some(s) = self.slots.get(i) {
            crate::prefetch::prefetch(s);
        }
    }

    /// [`LpmMatcher::lookup`] of a 4-byte field (IPv4) without exact part: the 16-bit root and
    /// at most two 8-bit levels, read without branching on the trie's depth (a packet stream
    /// over routes of mixed lengths mispredicts that branch about once a packet). A level that
    /// is not needed reads slot 0 (in cache) and keeps the slot it has.
    #[inline(always)]
    fn lookup_ipv4(&self, a: u8, b: u8, c: u8, d: u8) -> Option<u32> {
        let slot = |i: usize| self.slots.get(i).copied().unwrap_or(0);
        let next = |v: u32, byte: u8| {
            // All ones when `v` is a child pointer, else zero.
            let child = 0usize.wrapping_sub((v >> 31) as usize);
            let at = ((v & !CHILD) as usize * NODE + usize::from(byte)) & child;
            let w = slot(at);
            if child != 0 {
                w
            } else {
                v
            }
        };
        let v = slot(usize::from(a) << 8 | usize::from(b));
        let v = next(next(v, c), d);
        // A child never hangs below the last byte.
        (v & CHILD == 0).then_some(v).and_then(|v| v.checked_sub(1))
    }

    /// Prefetches the root-level slot a lookup of `key` reads first, so that a batch of lookups
    /// can overlap their cache misses (the 16-bit root is 256 KiB, beyond L1). Only without an
    /// exact part (where the root slot is known from the key alone); a no-op otherwise or for a
    /// key of the wrong length.
    #[inline(always)]
    pub fn prefetch(&self, key: &[u8]) {
        if key.len() != self.key_len || self.exact.is_some() {
            return;
        }
        let f = &key[self.field.clone()];
        self.prefetch_slot(if self.root_bits == 16 {
            (usize::from(f[0]) << 8) | usize::from(f[1])
        } else {
            usize::from(f[0])
        });
    }

    /// The level where a prefix of `p` bits ends: the root for `p <= root_bits`, else the one
    /// holding bit `p - 1`.
    fn level_of(&self, p: u32) -> u32 {
        if p <= self.root_bits {
            0
        } else {
            (p - self.root_bits).div_ceil(8)
        }
    }

    /// (first bit, number of bits) of the field resolved at `level`.
    fn level_bits(&self, level: u32) -> (u32, u32) {
        if level == 0 {
            (0, self.root_bits)
        } else {
            (self.root_bits + 8 * (level - 1), 8)
        }
    }

    /// The slot index within a node of `level` for field value `addr`.
    fn index(&self, addr: u128, level: u32) -> u32 {
        let (start, bits) = self.level_bits(level);
        ((addr >> (self.field_bits - start - bits)) as u32) & ((1 << bits) - 1)
    }

    /// Appends a node of 256 copies of (`slot`, `rank`); returns its number.
    fn new_node(&mut self, slot: u32, rank: u8) -> u32 {
        let n = self.slots.len() / NODE;
        self.slots.resize(self.slots.len() + NODE, slot);
        self.rank.resize(self.rank.len() + NODE, rank);
        n as u32
    }

    /// Writes `value` (with `rank` = prefix length + 1) into slot `s` and, through children,
    /// into every slot below it, wherever no longer prefix is already written. A child's slots
    /// all rank at least as high as the slot it hangs from, so a slot ranking at least `rank`
    /// needs no descent.
    fn paint(&mut self, s: usize, rank: u8, value: u32) {
        if self.rank[s] >= rank {
            return;
        }
        self.rank[s] = rank;
        let v = self.slots[s];
        if v & CHILD != 0 {
            let base = (v & !CHILD) as usize * NODE;
            for c in base..base + NODE {
                self.paint(c, rank, value);
            }
        } else {
            self.slots[s] = value;
        }
    }
}

/// The top `p` bits of an `f`-bit field (`p <= f <= 128`).
fn prefix_mask(f: u32, p: u32) -> u128 {
    if p == 0 {
        0
    } else {
        (u128::MAX << (128 - p)) >> (128 - f)
    }
}

impl fmt::Debug for LpmMatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LpmMatcher")
            .field("key_len", &self.key_len)
            .field("lpm", &self.field)
            .field("routes", &self.routes.len())
            .field("exact_parts", &self.exact.as_ref().map_or(1, |e| e.map.len()))
            .field("nodes", &(self.slots.len() / NODE))
            .field("memory_bytes", &self.memory_bytes())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn v4(s: &str) -> [u8; 4] {
        s.parse::<Ipv4Addr>().unwrap().octets()
    }

    fn v6(s: &str) -> [u8; 16] {
        s.parse::<Ipv6Addr>().unwrap().octets()
    }

    /// Parses "a.b.c.d/len".
    fn route4(s: &str) -> ([u8; 4], u8) {
        let (a, l) = s.split_once('/').unwrap();
        (v4(a), l.parse().unwrap())
    }

    const ROUTES4: [(&str, u32); 6] = [
        ("0.0.0.0/0", 0),
        ("10.0.0.0/8", 1),
        ("10.1.0.0/16", 2),
        ("10.1.2.0/24", 3),
        ("10.1.2.3/32", 4),
        ("10.1.2.128/25", 5),
    ];

    fn check_routes4(t: &LpmMatcher) {
        assert_eq!(t.lookup(&v4("192.168.0.1")), Some(0));
        assert_eq!(t.lookup(&v4("10.200.0.1")), Some(1));
        assert_eq!(t.lookup(&v4("10.1.200.1")), Some(2));
        assert_eq!(t.lookup(&v4("10.1.2.4")), Some(3));
        assert_eq!(t.lookup(&v4("10.1.2.3")), Some(4));
        assert_eq!(t.lookup(&v4("10.1.2.127")), Some(3));
        assert_eq!(t.lookup(&v4("10.1.2.128")), Some(5));
        assert_eq!(t.lookup(&v4("10.1.2.255")), Some(5));
        assert_eq!(t.lookup(&v4("10.1.3.0")), Some(2));
        assert_eq!(t.lookup(&v4("11.0.0.0")), Some(0));
        assert_eq!(t.lookup(&v4("9.255.255.255")), Some(0));
    }

    #[test]
    fn ipv4_longest_prefix_wins_in_any_insertion_order() {
        // Every rotation and its reverse: shortest first, longest first, and mixed.
        for rot in 0..ROUTES4.len() {
            for rev in [false, true] {
                let mut order: Vec<_> = ROUTES4.to_vec();
                order.rotate_left(rot);
                if rev {
                    order.reverse();
                }
                let mut t = LpmMatcher::new(4, 0..4).unwrap();
                for (r, e) in &order {
                    let (a, l) = route4(r);
                    t.insert(&a, l, *e).unwrap();
                }
                assert_eq!(t.len(), ROUTES4.len());
                check_routes4(&t);
            }
        }
    }

    #[test]
    fn ipv4_without_default_route_misses() {
        let mut t = LpmMatcher::new(4, 0..4).unwrap();
        t.insert(&v4("10.1.2.3"), 32, 4).unwrap();
        t.insert(&v4("10.0.0.0"), 8, 1).unwrap();
        assert_eq!(t.lookup(&v4("10.1.2.3")), Some(4));
        assert_eq!(t.lookup(&v4("10.1.2.2")), Some(1));
        assert_eq!(t.lookup(&v4("11.1.2.3")), None);
        assert_eq!(t.lookup(&v4("0.0.0.0")), None);
        assert!(LpmMatcher::new(4, 0..4).unwrap().lookup(&v4("1.2.3.4")).is_none());
    }

    #[test]
    fn default_route_alone_matches_everything() {
        let mut t = LpmMatcher::new(4, 0..4).unwrap();
        t.insert(&v4("0.0.0.0"), 0, 42).unwrap();
        for a in ["0.0.0.0", "255.255.255.255", "10.1.2.3", "128.0.0.0"] {
            assert_eq!(t.lookup(&v4(a)), Some(42));
        }
    }

    #[test]
    fn bits_past_the_prefix_are_ignored() {
        let mut t = LpmMatcher::new(4, 0..4).unwrap();
        t.insert(&v4("10.1.2.77"), 24, 3).unwrap();
        assert_eq!(t.lookup(&v4("10.1.2.1")), Some(3));
        assert_eq!(t.insert(&v4("10.1.2.0"), 24, 9), Err(MatchError::DuplicateKey));
        assert_eq!(t.insert(&v4("1.2.3.4"), 0, 0), Ok(()));
        assert_eq!(t.insert(&v4("5.6.7.8"), 0, 1), Err(MatchError::DuplicateKey));
        // The same bits with another length are another route.
        t.insert(&v4("10.1.2.0"), 23, 5).unwrap();
        assert_eq!(t.lookup(&v4("10.1.3.1")), Some(5));
        assert_eq!(t.lookup(&v4("10.1.2.1")), Some(3));
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn insert_errors() {
        let mut t = LpmMatcher::new(4, 0..4).unwrap();
        assert_eq!(t.insert(&v4("10.0.0.0"), 33, 0), Err(MatchError::PrefixLen { prefix_len: 33, field_bits: 32 }));
        assert_eq!(t.insert(&[10, 0, 0], 8, 0), Err(MatchError::WrongLen { what: "key", expected: 4, got: 3 }));
        assert_eq!(
            t.insert(&v4("10.0.0.0"), 8, MAX_ENTRY + 1),
            Err(MatchError::EntryTooLarge { entry: MAX_ENTRY + 1, max: MAX_ENTRY })
        );
        t.insert(&v4("10.0.0.0"), 8, MAX_ENTRY).unwrap();
        assert_eq!(t.lookup(&v4("10.9.9.9")), Some(MAX_ENTRY));
        assert_eq!(t.lookup(&[10, 9, 9]), None);
        assert_eq!(t.lookup(&[10, 9, 9, 9, 9]), None);

        let mut t = LpmMatcher::new(4, 0..4).unwrap().with_max_entries(1);
        t.insert(&v4("10.0.0.0"), 8, 1).unwrap();
        assert_eq!(t.insert(&v4("11.0.0.0"), 8, 1), Err(MatchError::TableFull { what: "entries", max: 1 }));
    }

    #[test]
    fn entry_and_node_limits() {
        // Entry indices up to 2^31 - 2 fit beside the child bit.
        assert_eq!(MAX_ENTRY, (1 << 31) - 2);
        // A /32 in an empty /16 adds two nodes to the 256 of the 16-bit root; the check also
        // counts an exact part's root, so it needs a limit of 259 nodes.
        let mut t = LpmMatcher::new(4, 0..4).unwrap().with_max_nodes(258);
        let full = Err(MatchError::TableFull { what: "trie nodes", max: 258 });
        assert_eq!(t.insert(&v4("10.1.2.3"), 32, 1), full);
        assert_eq!((t.len(), t.slots.len() / NODE, t.lookup(&v4("10.1.2.3"))), (0, 256, None));
        // A route ending in the root level adds no node.
        t.insert(&v4("10.1.0.0"), 16, 2).unwrap();
        assert_eq!(t.lookup(&v4("10.1.2.3")), Some(2));
        let mut t = LpmMatcher::new(4, 0..4).unwrap().with_max_nodes(259);
        t.insert(&v4("10.1.2.3"), 32, 1).unwrap();
        assert_eq!((t.slots.len() / NODE, t.lookup(&v4("10.1.2.3"))), (258, Some(1)));
    }

    #[test]
    fn accessors_and_memory() {
        let mut t = LpmMatcher::new(6, 2..6).unwrap();
        assert_eq!((t.key_len(), t.lpm_field(), t.len(), t.is_empty()), (6, 2..6, 0, true));
        // No exact part yet: no trie node, only the exact map's 16 empty slots of 16 bytes.
        assert_eq!(t.memory_bytes(), 256);
        t.insert(&[0, 1, 10, 0, 0, 0], 8, 0).unwrap();
        // The exact part's root: 256 slots of 4 bytes.
        assert_eq!((t.len(), t.is_empty(), t.memory_bytes()), (1, false, 1024 + 256));
        // Without exact part, the 16-bit root from the start; a /32 adds two nodes.
        let mut t = LpmMatcher::new(4, 0..4).unwrap();
        assert_eq!(t.memory_bytes(), 4 << 16);
        t.insert(&v4("10.1.2.3"), 32, 1).unwrap();
        assert_eq!(
            format!("{t:?}"),
            "LpmMatcher { key_len: 4, lpm: 0..4, routes: 1, exact_parts: 1, nodes: 258, memory_bytes: 264192 }"
        );
    }

    /// Prefetching is a hint: keys of any length, with or without exact part, change nothing
    /// and never panic.
    #[test]
    fn prefetch_takes_any_key() {
        let mut ip = LpmMatcher::new(4, 0..4).unwrap();
        ip.insert(&v4("10.0.0.0"), 8, 1).unwrap();
        let mut vrf = LpmMatcher::new(6, 2..6).unwrap();
        vrf.insert(&[0, 1, 10, 0, 0, 0], 8, 2).unwrap();
        for t in [&ip, &vrf] {
            for len in 0..8 {
                t.prefetch(&vec![10; len]);
            }
        }
        ip.prefetch_word(u64::MAX);
        assert_eq!(ip.lookup(&v4("10.1.2.3")), Some(1));
        assert_eq!(vrf.lookup(&[0, 1, 10, 1, 2, 3]), Some(2));
    }

    /// A 1-byte field without exact part has an 8-bit root: its prefetch reads the root slot of
    /// the field's only byte and must not look for a second one.
    #[test]
    fn prefetch_of_a_one_byte_field_never_panics() {
        let mut t = LpmMatcher::new(1, 0..1).unwrap();
        t.insert(&[0b1010_0000], 3, 7).unwrap();
        for b in [0u8, 0b1010_0001, 0xff] {
            t.prefetch(&[b]);
        }
        assert_eq!(t.lookup(&[0b1011_1111]), Some(7));
        assert_eq!(t.lookup(&[0b1100_0000]), None);
    }

    #[test]
    fn field_must_be_1_to_16_bytes_inside_the_key() {
        #[allow(clippy::reversed_empty_ranges)] // 3..2 on purpose
        for (key_len, field) in [(4, 0..0), (4, 2..5), (20, 2..19), (4, 3..2), (65, 0..4)] {
            assert!(LpmMatcher::new(key_len, field.clone()).is_err(), "{key_len} {field:?}");
        }
        assert_eq!(LpmMatcher::new(20, 2..19).unwrap_err(), MatchError::LpmField { field: 2..19, key_len: 20 });
        assert_eq!(LpmMatcher::new(0, 0..0).unwrap_err(), MatchError::KeyLenOutOfRange(0));
        for (key_len, field) in [(1, 0..1), (16, 0..16), (64, 48..64), (20, 2..18)] {
            assert!(LpmMatcher::new(key_len, field).is_ok());
        }
    }

    #[test]
    fn ipv4_needs_at_most_two_nodes_per_route() {
        let mut t = LpmMatcher::new(4, 0..4).unwrap();
        t.insert(&v4("10.1.2.3"), 32, 1).unwrap();
        assert_eq!(t.slots.len() / NODE, 256 + 2);
        t.insert(&v4("10.1.2.4"), 32, 2).unwrap();
        t.insert(&v4("10.1.0.0"), 16, 3).unwrap();
        t.insert(&v4("10.1.3.0"), 24, 4).unwrap();
        assert_eq!(t.slots.len() / NODE, 256 + 2);
        assert_eq!(t.lookup(&v4("10.1.3.9")), Some(4));
        assert_eq!(t.lookup(&v4("10.1.2.5")), Some(3));
    }

    #[test]
    fn ipv6_routes() {
        let routes = [
            ("::", 0, 0),
            ("2001:db8::", 32, 1),
            ("2001:db8:1::", 48, 2),
            ("2001:db8:1:2::", 64, 3),
            ("2001:db8:1:2::1", 128, 4),
            ("2001:db8:1:2:8000::", 65, 5),
            ("fe80::", 10, 6),
        ];
        for rev in [false, true] {
            let mut t = LpmMatcher::new(16, 0..16).unwrap();
            let mut order = routes.to_vec();
            if rev {
                order.reverse();
            }
            for (a, l, e) in order {
                t.insert(&v6(a), l, e).unwrap();
            }
            assert_eq!(t.lookup(&v6("2001:db9::1")), Some(0));
            assert_eq!(t.lookup(&v6("2001:db8:ffff::1")), Some(1));
            assert_eq!(t.lookup(&v6("2001:db8:1:ffff::1")), Some(2));
            assert_eq!(t.lookup(&v6("2001:db8:1:2::2")), Some(3));
            assert_eq!(t.lookup(&v6("2001:db8:1:2::1")), Some(4));
            assert_eq!(t.lookup(&v6("2001:db8:1:2:8000::1")), Some(5));
            assert_eq!(t.lookup(&v6("2001:db8:1:2:7fff:ffff:ffff:ffff")), Some(3));
            assert_eq!(t.lookup(&v6("febf:ffff::1")), Some(6));
            assert_eq!(t.lookup(&v6("fec0::1")), Some(0));
        }
        let mut t = LpmMatcher::new(16, 0..16).unwrap();
        assert_eq!(t.insert(&v6("::"), 129, 0), Err(MatchError::PrefixLen { prefix_len: 129, field_bits: 128 }));
        t.insert(&v6("::1"), 128, 1).unwrap();
        assert_eq!(t.lookup(&v6("::1")), Some(1));
        assert_eq!(t.lookup(&v6("::")), None);
        assert_eq!(t.lookup(&v6("::2")), None);
    }

    /// Key: VRF id (2 bytes) then IPv4 destination; each VRF has its own routes.
    #[test]
    fn exact_part_before_the_field() {
        let key = |vrf: u16, a: &str| {
            let mut k = [0u8; 6];
            k[..2].copy_from_slice(&vrf.to_be_bytes());
            k[2..].copy_from_slice(&v4(a));
            k
        };
        let mut t = LpmMatcher::new(6, 2..6).unwrap();
        t.insert(&key(1, "0.0.0.0"), 0, 10).unwrap();
        t.insert(&key(1, "10.0.0.0"), 8, 11).unwrap();
        t.insert(&key(2, "10.1.0.0"), 16, 21).unwrap();
        t.insert(&key(2, "10.1.2.3"), 32, 22).unwrap();
        t.insert(&key(256, "10.0.0.0"), 8, 31).unwrap();
        // The same prefix in another VRF is not a duplicate; in the same VRF it is.
        t.insert(&key(2, "10.0.0.0"), 8, 23).unwrap();
        assert_eq!(t.insert(&key(2, "10.0.0.0"), 8, 24), Err(MatchError::DuplicateKey));

        assert_eq!(t.lookup(&key(1, "10.1.2.3")), Some(11));
        assert_eq!(t.lookup(&key(1, "11.1.2.3")), Some(10));
        assert_eq!(t.lookup(&key(2, "10.1.2.3")), Some(22));
        assert_eq!(t.lookup(&key(2, "10.1.2.4")), Some(21));
        assert_eq!(t.lookup(&key(2, "10.2.2.4")), Some(23));
        assert_eq!(t.lookup(&key(2, "11.1.2.3")), None);
        assert_eq!(t.lookup(&key(256, "10.1.2.3")), Some(31));
        assert_eq!(t.lookup(&key(3, "10.1.2.3")), None);
        assert_eq!(t.lookup(&key(0, "10.1.2.3")), None);
        assert_eq!(t.len(), 6);
    }

    /// Key: input port (1 byte), IPv4 destination, protocol (1 byte): exact bytes on both sides.
    #[test]
    fn exact_parts_around_the_field() {
        let key = |port: u8, a: &str, proto: u8| {
            let mut k = [port, 0, 0, 0, 0, proto];
            k[1..5].copy_from_slice(&v4(a));
            k
        };
        let mut t = LpmMatcher::new(6, 1..5).unwrap();
        t.insert(&key(1, "192.168.0.0", 6), 16, 1).unwrap();
        t.insert(&key(1, "192.168.1.0", 17), 24, 2).unwrap();
        t.insert(&key(2, "0.0.0.0", 6), 0, 3).unwrap();
        assert_eq!(t.lookup(&key(1, "192.168.1.1", 6)), Some(1));
        assert_eq!(t.lookup(&key(1, "192.168.1.1", 17)), Some(2));
        assert_eq!(t.lookup(&key(1, "192.168.2.1", 17)), None);
        assert_eq!(t.lookup(&key(2, "8.8.8.8", 6)), Some(3));
        assert_eq!(t.lookup(&key(2, "8.8.8.8", 17)), None);
    }

    #[test]
    fn one_and_three_byte_fields() {
        let mut t = LpmMatcher::new(1, 0..1).unwrap();
        t.insert(&[0b1010_0000], 3, 1).unwrap();
        t.insert(&[0b1010_1111], 8, 2).unwrap();
        t.insert(&[0], 0, 0).unwrap();
        t.insert(&[0b1000_0000], 1, 3).unwrap();
        assert_eq!(t.lookup(&[0b1011_1111]), Some(1));
        assert_eq!(t.lookup(&[0b1010_1111]), Some(2));
        assert_eq!(t.lookup(&[0b1100_0000]), Some(3));
        assert_eq!(t.lookup(&[0b0100_0000]), Some(0));

        // 3 bytes: a 16-bit root and one level below.
        let mut t = LpmMatcher::new(3, 0..3).unwrap();
        t.insert(&[0x12, 0x34, 0x56], 24, 1).unwrap();
        t.insert(&[0x12, 0x00, 0x00], 8, 2).unwrap();
        t.insert(&[0x12, 0x34, 0x00], 20, 3).unwrap();
        assert_eq!(t.lookup(&[0x12, 0x34, 0x56]), Some(1));
        assert_eq!(t.lookup(&[0x12, 0x34, 0x0f]), Some(3));
        assert_eq!(t.lookup(&[0x12, 0x34, 0x10]), Some(2));
        assert_eq!(t.lookup(&[0x13, 0x34, 0x56]), None);
    }

    /// The naive reference: a Vec of (key with the field zeroed, masked field, length, entry).
    struct Naive {
        field: Range<usize>,
        routes: Vec<(Vec<u8>, u128, u8, u32)>,
    }

    impl Naive {
        fn split(&self, key: &[u8]) -> (Vec<u8>, u128) {
            let mut part = key.to_vec();
            part[self.field.clone()].fill(0);
            (part, be_value(&key[self.field.clone()]))
        }

        fn bits(&self) -> u32 {
            8 * self.field.len() as u32
        }

        /// Ok(true) if added, Ok(false) if a duplicate.
        fn insert(&mut self, key: &[u8], p: u8, entry: u32) -> bool {
            let (part, a) = self.split(key);
            let a = a & prefix_mask(self.bits(), u32::from(p));
            if self.routes.iter().any(|r| r.0 == part && r.1 == a && r.2 == p) {
                return false;
            }
            self.routes.push((part, a, p, entry));
            true
        }

        fn lookup(&self, key: &[u8]) -> Option<u32> {
            let (part, a) = self.split(key);
            self.routes
                .iter()
                .filter(|r| r.0 == part && a & prefix_mask(self.bits(), u32::from(r.2)) == r.1)
                .max_by_key(|r| r.2)
                .map(|r| r.3)
        }
    }

    /// (key length, LPM field): IPv4, IPv6, with exact bytes before, after and around, 1 and 3
    /// byte fields, the widest keys.
    const SHAPES: [(usize, Range<usize>); 10] = [
        (4, 0..4),
        (16, 0..16),
        (6, 2..6),
        (5, 0..4),
        (6, 1..5),
        (18, 2..18),
        (1, 0..1),
        (3, 0..3),
        (2, 1..2),
        (64, 40..56),
    ];

    /// A key from a few exact-part values and a few field "neighbourhoods" (so that prefixes
    /// nest and overlap), plus random low bits.
    fn key_strategy(key_len: usize, field: Range<usize>) -> impl Strategy<Value = Vec<u8>> {
        let w = field.len();
        (
            prop::collection::vec(prop::sample::select(vec![0u8, 1, 0xff]), key_len),
            prop::sample::select(vec![0u128, u128::MAX, 0x0a01_0203 << 96, 0x2001_0db8 << 96]),
            any::<u128>(),
            0..=8 * w as u32,
        )
            .prop_map(move |(mut k, base, noise, keep)| {
                // The top `keep` bits of the field come from `base`, the rest from `noise`.
                let bits = 8 * w as u32;
                let base = base >> (128 - bits);
                let noise = noise >> (128 - bits);
                let m = prefix_mask(bits, keep);
                let v = (base & m) | (noise & !m);
                k[field.clone()].copy_from_slice(&v.to_be_bytes()[16 - w..]);
                k
            })
    }

    /// (key length, LPM field, routes as (key, prefix length), probe keys).
    type Case = (usize, Range<usize>, Vec<(Vec<u8>, u8)>, Vec<Vec<u8>>);

    fn routes_and_probes() -> impl Strategy<Value = Case> {
        prop::sample::select(SHAPES.to_vec()).prop_flat_map(|(key_len, field)| {
            let bits = 8 * field.len() as u8;
            (
                Just(key_len),
                Just(field.clone()),
                prop::collection::vec((key_strategy(key_len, field.clone()), 0..=bits), 0..60),
                prop::collection::vec(key_strategy(key_len, field), 0..60),
            )
        })
    }

    proptest! {
        #[test]
        fn agrees_with_a_vec_scan((key_len, field, routes, probes) in routes_and_probes()) {
            let mut t = LpmMatcher::new(key_len, field.clone()).unwrap();
            let mut naive = Naive { field, routes: Vec::new() };
            for (i, (k, p)) in routes.iter().enumerate() {
                let want = if naive.insert(k, *p, i as u32) { Ok(()) } else { Err(MatchError::DuplicateKey) };
                prop_assert_eq!(t.insert(k, *p, i as u32), want);
            }
            prop_assert_eq!(t.len(), naive.routes.len());
            for k in routes.iter().map(|r| &r.0).chain(&probes) {
                prop_assert_eq!(t.lookup(k), naive.lookup(k), "key {:?}", k);
            }
        }
    }
}
