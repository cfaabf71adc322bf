//! P4-style match-action tables: keys made of header fields, match kinds, entries with action
//! lists, multicast groups, named counters, and the ordered ingress [`Pipeline`].
//!
//! A [`Pipeline`] holds only what lookups and actions read (it is immutable while packets go
//! through it, so that a new version can replace it between bursts); what they count (per-entry,
//! miss and named counters) lives apart in a [`PipelineState`] that each worker owns and
//! passes to [`Pipeline::apply`].
//!
//! Each table picks the lookup structure that fits its key's match kinds: all `exact` fields use
//! a hash ([`exact`]); one `lpm` field (with any `exact` ones) a multibit trie ([`lpm`]); any
//! `ternary` or `range` field a bit-vector classifier over a priority-ordered list
//! ([`ternary`], [`classifier`]). Lookups never allocate.

pub mod burst;
mod carry;
pub mod classifier;
pub mod entry;
pub mod exact;
pub mod key;
pub mod lpm;
pub mod matcher;
pub mod range;
pub mod ternary;
#[cfg(test)]
mod tests;
pub mod value;
mod words;

pub use burst::Lane;

use crate::action::{self, Action, ActionList, Egress};
use crate::buf::PacketBuf;
pub use crate::field::{self, Field};
use crate::meta::Meta;
use crate::meter::array::{MeterArray, MeterSpec};
use crate::parse::Parsed;
pub use crate::stats::Counter;
use crate::stats::Reason;
pub use carry::{Carry, InstancePairs};
use entry::Entry;
use exact::ExactMatcher;
pub use key::{Key, KEY_MAX};
use lpm::LpmMatcher;
pub use matcher::MatchError;
use range::RangeCond;
use ternary::TernaryMatcher;
use value::{prefix_mask, MatchValue};

/// A match kind (P4 `match_kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchKind {
    /// The field equals the entry's value.
    Exact,
    /// The field's leading bits equal the entry's prefix; the longest prefix wins.
    Lpm,
    /// The field's masked bits equal the entry's value; the highest priority wins.
    Ternary,
    /// The field lies within the entry's inclusive bounds; the highest priority wins.
    Range,
}

impl MatchKind {
    /// The kind's name in configs.
    pub fn name(self) -> &'static str {
        match self {
            MatchKind::Exact => "exact",
            MatchKind::Lpm => "lpm",
            MatchKind::Ternary => "ternary",
            MatchKind::Range => "range",
        }
    }

    /// Looks a kind up by name.
    pub fn from_name(s: &str) -> Option<MatchKind> {
        [MatchKind::Exact, MatchKind::Lpm, MatchKind::Ternary, MatchKind::Range].into_iter().find(|k| k.name() == s)
    }
}

/// One field of a table's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyField {
    /// The header field.
    pub field: Field,
    /// How entries match it.
    pub kind: MatchKind,
    /// Byte offset of the field in the key.
    pub offset: usize,
}

/// The lookup structure that fits the table's match kinds.
#[derive(Debug, Clone)]
enum Matcher {
    Exact(ExactMatcher),
    Lpm(LpmMatcher),
    Ternary(TernaryMatcher),
}

/// Why an entry cannot be added.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    /// The number of values differs from the number of key fields.
    #[error("expected {expected} value(s), one per key field, found {got}")]
    Arity {
        /// Key fields.
        expected: usize,
        /// Values given.
        got: usize,
    },
    /// A value of the wrong match kind for its field.
    #[error("value {index} does not fit the field's match kind {kind}")]
    Kind {
        /// Which value.
        index: usize,
        /// The field's kind.
        kind: &'static str,
    },
    /// The lookup structure refused the entry.
    #[error("{0}")]
    Matcher(#[from] MatchError),
    /// A table with ternary or range fields needs a priority per entry, others take none.
    #[error("{0}")]
    Priority(&'static str),
}

/// How a table's lookup reads its key from a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyPath {
    /// Field by field into a zero-padded key buffer ([`Field::write_key`]): any key.
    Bytes,
    /// An exact table whose key is one field of at most 8 bytes: its [`Field::word`].
    ExactWord(Field),
    /// An LPM table whose key is one IPv4 address and nothing else: its [`Field::word`].
    LpmWord(Field),
}

/// One match-action table.
#[derive(Debug, Clone)]
pub struct Table {
    /// The table's name.
    pub name: String,
    /// Its key fields, in key order.
    pub key: Vec<KeyField>,
    key_len: usize,
    /// How lookups read the key (the same key either way).
    path: KeyPath,
    matcher: Matcher,
    /// Actions per entry, by entry index (the order entries were added).
    entries: Vec<Entry>,
    /// The default action (run on a miss).
    miss: Entry,
    /// Action lists too long to be held inline in their [`Entry`].
    pool: Vec<Action>,
}

impl Table {
    /// An empty table over `key` fields with `default_action` on a miss.
    ///
    /// Errors: more than one `lpm` field, or a key longer than [`KEY_MAX`] bytes.
    pub fn new(name: &str, key: Vec<(Field, MatchKind)>, default_action: ActionList) -> Result<Table, String> {
        let mut offset = 0;
        let key: Vec<KeyField> = key
            .into_iter()
            .map(|(field, kind)| {
                let kf = KeyField { field, kind, offset };
                offset += field.width();
                kf
            })
            .collect();
        let key_len = offset;
        if key_len > KEY_MAX {
            return Err(format!("the key is {key_len} bytes, more than the {KEY_MAX} a key can hold"));
        }
        let lpms: Vec<&KeyField> = key.iter().filter(|k| k.kind == MatchKind::Lpm).collect();
        let prioritised = key.iter().any(|k| matches!(k.kind, MatchKind::Ternary | MatchKind::Range));
        let matcher = if prioritised {
            Matcher::Ternary(TernaryMatcher::new(key_len).map_err(|e| e.to_string())?)
        } else if let Some(l) = lpms.first() {
            if lpms.len() > 1 {
                return Err("at most one lpm field per table (use ternary for more)".into());
            }
            let range = l.offset..l.offset + l.field.width();
            Matcher::Lpm(LpmMatcher::new(key_len, range).map_err(|e| e.to_string())?)
        } else {
            Matcher::Exact(ExactMatcher::new(key_len).map_err(|e| e.to_string())?)
        };
        let path = match (&matcher, &key[..]) {
            (Matcher::Exact(_), [kf]) if kf.field.width() <= 8 => KeyPath::ExactWord(kf.field),
            (Matcher::Lpm(m), [kf]) if m.is_ipv4_only() => KeyPath::LpmWord(kf.field),
            _ => KeyPath::Bytes,
        };
        let mut pool = Vec::new();
        let miss = Entry::new(&default_action.0, &mut pool);
        Ok(Table { name: name.to_string(), key, key_len, path, matcher, entries: Vec::new(), miss, pool })
    }

    /// True when entries need a priority (the table has ternary or range fields).
    pub fn needs_priority(&self) -> bool {
        matches!(self.matcher, Matcher::Ternary(_))
    }

    /// Key length (bytes).
    pub fn key_len(&self) -> usize {
        self.key_len
    }

    /// Adds an entry with one value per key field, in key order, and returns its index.
    /// `priority` is required for tables with ternary or range fields (larger wins, ties go to
    /// the earlier entry, as P4Runtime) and refused for the others.
    pub fn insert(
        &mut self,
        values: &[MatchValue],
        priority: Option<i32>,
        actions: ActionList,
    ) -> Result<usize, EntryError> {
        if values.len() != self.key.len() {
            return Err(EntryError::Arity { expected: self.key.len(), got: values.len() });
        }
        let idx = self.entries.len() as u32;
        let mut bytes = vec![0u8; self.key_len];
        let mut mask = vec![0u8; self.key_len];
        let mut ranges = Vec::new();
        let mut prefix = None;
        for (i, (kf, v)) in self.key.iter().zip(values).enumerate() {
            let r = kf.offset..kf.offset + kf.field.width();
            let bad = || EntryError::Kind { index: i, kind: kf.kind.name() };
            match (kf.kind, v) {
                (MatchKind::Exact, MatchValue::Exact(b)) => {
                    bytes[r.clone()].copy_from_slice(b);
                    mask[r].fill(0xff);
                }
                (MatchKind::Lpm, MatchValue::Lpm(b, len)) => {
                    bytes[r.clone()].copy_from_slice(b);
                    mask[r].copy_from_slice(&prefix_mask(*len as u32, kf.field.width()));
                    prefix = Some(*len);
                }
                (MatchKind::Ternary, MatchValue::Ternary(b, m)) => {
                    bytes[r.clone()].copy_from_slice(b);
                    mask[r].copy_from_slice(m);
                }
                (MatchKind::Range, MatchValue::Range(lo, hi)) => {
                    ranges.push(RangeCond { field: r, lo: *lo, hi: *hi });
                }
                _ => return Err(bad()),
            }
        }
        match &mut self.matcher {
            Matcher::Ternary(m) => {
                let p = priority.ok_or(EntryError::Priority(
                    "expected `priority` (an integer; larger wins) in a table with ternary or range fields",
                ))?;
                m.insert(&bytes, &mask, &ranges, p, idx)?;
            }
            _ if priority.is_some() => {
                return Err(EntryError::Priority(
                    "`priority` is only for tables with ternary or range fields (exact and lpm tables need none)",
                ))
            }
            Matcher::Exact(m) => m.insert(&bytes, idx)?,
            Matcher::Lpm(m) => m.insert(&bytes, prefix.unwrap_or(0), idx)?,
        }
        let entry = Entry::new(&actions.0, &mut self.pool);
        self.entries.push(entry);
        Ok(idx as usize)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True without entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entry `entry`'s actions, in order.
    ///
    /// Panics if `entry >= self.len()`.
    pub fn actions(&self, entry: usize) -> &[Action] {
        self.entries[entry].actions(&self.pool)
    }

    /// The actions run on a miss, in order.
    pub fn default_action(&self) -> &[Action] {
        self.miss.actions(&self.pool)
    }

    /// Prefetches what a [`Table::lookup`] of the packet will read first, so that a burst of
    /// lookups overlaps its cache misses: for an LPM table without exact fields, the trie's
    /// root slot for the key; for an exact table keyed by one field of at most 8 bytes, the
    /// hash slot its probe starts at. A no-op for the other kinds (the classifier's small bit
    /// vectors gain nothing from it) and for an empty table.
    #[inline(always)]
    pub fn prefetch(&self, p: &Parsed, meta: &Meta) {
        if self.entries.is_empty() {
            return;
        }
        match (self.path, &self.matcher, &self.key[..]) {
            (KeyPath::LpmWord(f) | KeyPath::ExactWord(f), _, _) => self.prefetch_word(f.word(p, meta)),
            // Without exact fields, the LPM field is the whole key.
            (_, Matcher::Lpm(m), [kf]) => {
                let mut bytes = [0; KEY_MAX];
                kf.field.write_key(p, meta, &mut bytes, kf.offset);
                m.prefetch(&bytes[..self.key_len]);
            }
            _ => {}
        }
    }

    /// [`Table::prefetch`] of a key read as one word ([`Field::word`]) by a table on a word
    /// path (`KeyPath::ExactWord`, `KeyPath::LpmWord`).
    #[inline(always)]
    fn prefetch_word(&self, w: u64) {
        match &self.matcher {
            Matcher::Exact(m) => m.prefetch_word(w),
            Matcher::Lpm(m) => m.prefetch_word(w),
            Matcher::Ternary(_) => {}
        }
    }

    /// [`Table::lookup`] of a key read as one word, as [`Table::prefetch_word`] takes it.
    #[inline(always)]
    fn lookup_word(&self, w: u64) -> Option<usize> {
        if self.entries.is_empty() {
            return None;
        }
        match &self.matcher {
            Matcher::Exact(m) => m.lookup_word(w),
            Matcher::Lpm(m) => m.lookup_word(w),
            Matcher::Ternary(_) => None,
        }
        .map(|i| i as usize)
    }

    /// Bytes of memory its lookups read: the matcher's hash slots, trie or rows (not the
    /// entries' actions).
    pub fn memory_bytes(&self) -> usize {
        match &self.matcher {
            Matcher::Exact(m) => m.memory_bytes(),
            Matcher::Lpm(m) => m.memory_bytes(),
            Matcher::Ternary(m) => m.memory_bytes(),
        }
    }

    /// Looks a packet up; returns the hit entry's index, or `None` on a miss.
    #[inline(always)]
    pub fn lookup(&self, p: &Parsed, meta: &Meta) -> Option<usize> {
        if self.entries.is_empty() {
            return None;
        }
        match (self.path, &self.matcher) {
            (KeyPath::ExactWord(f), Matcher::Exact(m)) => return m.lookup_word(f.word(p, meta)).map(|i| i as usize),
            (KeyPath::LpmWord(f), Matcher::Lpm(m)) => return m.lookup_word(f.word(p, meta)).map(|i| i as usize),
            _ => {}
        }
        self.lookup_bytes(p, meta)
    }

    /// [`Table::lookup`] through the key buffer, whatever the table's [`KeyPath`] (the
    /// general path; the word paths must agree with it).
    #[inline(always)]
    fn lookup_bytes(&self, p: &Parsed, meta: &Meta) -> Option<usize> {
        if self.entries.is_empty() {
            return None;
        }
        let mut key = Key { len: self.key_len as u8, bytes: [0; KEY_MAX] };
        for kf in &self.key {
            kf.field.write_key(p, meta, &mut key.bytes, kf.offset);
        }
        let k = key.as_slice();
        match &self.matcher {
            Matcher::Exact(m) => m.lookup(k),
            Matcher::Lpm(m) => m.lookup(k),
            Matcher::Ternary(m) => m.lookup_padded(&key.bytes),
        }
        .map(|i| i as usize)
    }
}

/// A multicast group: one copy per member, each with its own port and rewrites.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MulticastGroup {
    /// The group's id in configs.
    pub id: u16,
    /// (egress port, rewrites) per copy.
    pub copies: Vec<(u16, ActionList)>,
}

/// The table index [`Pipeline::run_table`] returns when the pipeline ends (`exit`, or an
/// action that ends it with its egress): past every table.
const END: usize = usize::MAX;

/// Ends the pipeline with `e` (`drop`, `aggregate`, a policed packet or a failed rewrite):
/// sets the packet's egress and returns [`END`]. A plain index, not an enum carrying the
/// egress, keeps the per-packet loop's state in registers (11 instructions per table less).
#[inline(always)]
fn end(egress: &mut Egress, e: Egress) -> usize {
    *egress = e;
    END
}

/// The ordered ingress pipeline: tables, multicast groups, the names of its counters and its
/// meters. Immutable while packets go through it; its counts and meter buckets are in a
/// [`PipelineState`].
#[derive(Debug, Clone, Default)]
pub struct Pipeline {
    /// The tables, applied in order (`goto` skips forward).
    pub tables: Vec<Table>,
    /// Multicast groups, by index.
    pub groups: Vec<MulticastGroup>,
    /// Names of the named counters (`count(name)`), by index.
    pub counter_names: Vec<String>,
    /// The meters (`meter(...)`, `police(...)`), by index.
    pub meters: Vec<MeterSpec>,
}

/// The bytes a meter counts for a frame of `frame_len` bytes (without FCS) parsed as `p`: the
/// frame without Ethernet padding, that is up to the end of its IP datagram when it has one.
#[inline(always)]
pub fn metered_len(p: &Parsed, frame_len: usize) -> u32 {
    let len = if p.has(crate::parse::Layers::IPV4) || p.has(crate::parse::Layers::IPV6) {
        frame_len.min(p.ip_end as usize)
    } else {
        frame_len
    };
    len as u32
}

/// The meter actions ([`Action::MeterAt`], [`Action::MeterBy`], [`Action::PoliceAt`]) where
/// they are not inlined: true when the packet is to be dropped (policed). Out of line, one
/// call for the three, so that a loop whose packets meet no meter keeps one small arm for them.
///
/// It takes the whole state: a call in the tables' loop that may write the state keeps the
/// compiler from loading every slice of it (counters, their bases, named counters, meters)
/// before the loop for each packet and spilling them to the stack, 14 instructions per packet
/// that a one-table pipeline paid (`examples/pipeline_profile.rs`, docs/performance.md).
#[inline(never)]
fn meter_action(state: &mut PipelineState, a: &Action, p: &Parsed, meta: &mut Meta, frame_len: usize) -> bool {
    let meters = &mut state.meters[..];
    match a {
        Action::MeterAt(m, i) => meter_inline(meters, *m, u64::from(*i), p, meta, frame_len),
        Action::MeterBy(m, f) => {
            let index = if f.width() <= 8 {
                field_value(f.word(p, meta), f.width())
            } else {
                wide_field_index(*f, p, meta, meters[*m as usize].len() as u64)
            };
            meter_inline(meters, *m, index, p, meta, frame_len)
        }
        Action::PoliceAt(m, i) => {
            meter_inline(meters, *m, u64::from(*i), p, meta, frame_len);
            return meta.color == crate::meter::Color::Red;
        }
        _ => {}
    }
    false
}

/// Colours the packet with instance `index` of meter `m` (of a [`PipelineState`]'s `meters`)
/// into `meta.color` (`frame_len`: the frame's length without FCS). A packet in the same clock
/// tick as the meter's last one needs no refill: that path makes no call; the others go on to
/// [`meter_refill`]. Inlined where packets meet meters
/// (`INLINE_METERS` of [`Pipeline::apply_with_first_hit`]), else reached through [`meter_action`].
#[inline(always)]
fn meter_inline(meters: &mut [MeterArray], m: u16, index: u64, p: &Parsed, meta: &mut Meta, frame_len: usize) {
    let bytes = metered_len(p, frame_len);
    match meters[m as usize].color_if_refilled(index, meta.timestamp_us, bytes, meta.color) {
        Some(c) => meta.color = c,
        None => meter_refill(meters, m, index, bytes, meta),
    }
}

/// [`meter_inline`] when the meter's buckets have tokens to gain first.
#[cold]
#[inline(never)]
fn meter_refill(meters: &mut [MeterArray], m: u16, index: u64, bytes: u32, meta: &mut Meta) {
    meta.color = meters[m as usize].color(index, meta.timestamp_us, bytes, meta.color);
}

/// The numeric value of a field of at most 8 bytes from its [`Field::word`] (big-endian bytes
/// loaded little-endian); wider fields go through [`wide_field_index`].
#[inline(always)]
fn field_value(word: u64, width: usize) -> u64 {
    let n = width.min(8);
    u64::from_be_bytes(word.to_le_bytes()) >> (64 - 8 * n as u32)
}

/// The value of field `f`, 9 to 16 bytes wide (an IPv6 address), modulo `instances` (at least
/// 1): the whole big-endian value's residue, so that hosts of one /64 reach different
/// instances of an indexed meter as the README's "(value of field) mod size" says. Reduced in
/// 64 bits: `value = hi * 2^64 + lo`, so `value mod n = ((hi mod n) * (2^64 mod n) + lo mod n)
/// mod n`, each product below 2^40 (a meter has at most 2^20 instances).
#[inline]
fn wide_field_index(f: crate::field::Field, p: &Parsed, meta: &Meta, instances: u64) -> u64 {
    let mut key = [0u8; KEY_MAX];
    f.write_key(p, meta, &mut key, 0);
    let w = f.width().min(16);
    let mut v = [0u8; 16];
    v[16 - w..].copy_from_slice(&key[..w]);
    let hi = u64::from_be_bytes(v[..8].try_into().expect("8 bytes"));
    let lo = u64::from_be_bytes(v[8..].try_into().expect("8 bytes"));
    residue128(hi, lo, instances.max(1))
}

/// `(hi * 2^64 + lo) mod n` for `n >= 1`, in 64-bit arithmetic when `n <= 2^32` (every meter
/// size), else in 128 bits.
#[inline]
fn residue128(hi: u64, lo: u64, n: u64) -> u64 {
    if n.is_power_of_two() {
        return lo & (n - 1);
    }
    if n > 1 << 32 {
        return ((u128::from(hi) << 64 | u128::from(lo)) % u128::from(n)) as u64;
    }
    let k = (u64::MAX % n + 1) % n;
    // (hi mod n) * k + lo mod n <= (n - 1)^2 + n - 1 < n^2 < 2^64 (n < 2^32 here): no overflow.
    ((hi % n) * k + lo % n) % n
}

/// What a [`Pipeline`] counts and its meters' buckets, kept apart from it so that the pipeline
/// stays immutable and can be replaced without losing counts. One per worker (meter state is
/// per worker lcore, as DPDK's); the main lcore adds the counts up.
///
/// Table counts (packets and bytes, the frame length without FCS before the entry's rewrites)
/// sit in one flat array, table after table: entry `i` of table `t` at `base[t] + i`, the
/// table's miss right after its last entry. A hit then costs one index into one array, and the
/// burst's lookup stage prefetches the counter beside the entry.
#[derive(Debug, Clone, Default)]
pub struct PipelineState {
    /// Every table's entry and miss counters, table after table.
    hits: Vec<Counter>,
    /// Where each table's counters start in `hits`; one more element than tables (the end).
    base: Vec<usize>,
    /// The named counters (`count(name)`), by index (names in [`Pipeline::counter_names`]).
    pub named: Vec<Counter>,
    /// Each meter's buckets and per-colour counts, by index (as [`Pipeline::meters`]).
    pub meters: Vec<MeterArray>,
}

impl PipelineState {
    /// Zero counters shaped for `pipeline` (one per entry, one miss per table, one per name)
    /// and its meters with full buckets.
    pub fn new(pipeline: &Pipeline) -> Self {
        let mut base = Vec::with_capacity(pipeline.tables.len() + 1);
        let mut at = 0;
        for t in &pipeline.tables {
            base.push(at);
            at += t.len() + 1;
        }
        base.push(at);
        PipelineState {
            hits: vec![Counter::default(); at],
            base,
            named: vec![Counter::default(); pipeline.counter_names.len()],
            meters: pipeline
                .meters
                .iter()
                // A loaded configuration's profiles are valid (config::meter checks them).
                .map(|m| MeterArray::new(m, 0).unwrap_or_else(|e| panic!("meter {}: {e}", m.name)))
                .collect(),
        }
    }

    /// Tables counted (those of the pipeline this state was made for).
    pub fn tables(&self) -> usize {
        self.base.len().saturating_sub(1)
    }

    /// Table `t`'s hits per entry, by entry index (the order entries were added).
    ///
    /// Panics if `t` is not below [`PipelineState::tables`].
    pub fn entries(&self, t: usize) -> &[Counter] {
        &self.hits[self.base[t]..self.base[t + 1] - 1]
    }

    /// Table `t`'s hits per entry, to set (tests and merging).
    pub fn entries_mut(&mut self, t: usize) -> &mut [Counter] {
        &mut self.hits[self.base[t]..self.base[t + 1] - 1]
    }

    /// Table `t`'s misses (the default action ran).
    pub fn miss(&self, t: usize) -> Counter {
        self.hits[self.base[t + 1] - 1]
    }

    /// Table `t`'s miss counter, to set.
    pub fn miss_mut(&mut self, t: usize) -> &mut Counter {
        &mut self.hits[self.base[t + 1] - 1]
    }

    /// Table `t`'s entry counters followed by its miss counter.
    pub fn hits_of(&self, t: usize) -> &[Counter] {
        &self.hits[self.base[t]..self.base[t + 1]]
    }

    /// Packets and bytes per colour of meter `m` (green, yellow, red).
    pub fn meter_colors(&self, m: usize) -> [Counter; 3] {
        self.meters[m].colors
    }

    /// Adds another worker's counters of the same pipeline.
    pub fn add(&mut self, o: &PipelineState) {
        debug_assert_eq!(self.base, o.base, "counters of one pipeline");
        for (c, oc) in self.hits.iter_mut().zip(&o.hits) {
            c.add(oc);
        }
        for (c, oc) in self.named.iter_mut().zip(&o.named) {
            c.add(oc);
        }
        for (m, om) in self.meters.iter_mut().zip(&o.meters) {
            for (c, oc) in m.colors.iter_mut().zip(&om.colors) {
                c.add(oc);
            }
        }
    }
}

impl Pipeline {
    /// True when an action list of some table (an entry's or the default) holds an action for
    /// which `f` is true.
    pub fn any_action(&self, f: impl Fn(&Action) -> bool) -> bool {
        self.tables
            .iter()
            .any(|t| t.default_action().iter().any(&f) || (0..t.len()).any(|e| t.actions(e).iter().any(&f)))
    }

    /// Runs the packet through the tables: counts hits and misses in `counts` (shaped for this
    /// pipeline by [`PipelineState::new`]), applies rewrites to `buf` (keeping `p` up to
    /// date), lets actions set `meta`, and returns the egress.
    #[inline]
    pub fn apply<B: PacketBuf>(
        &self,
        counts: &mut PipelineState,
        buf: &mut B,
        p: &mut Parsed,
        meta: &mut Meta,
    ) -> Egress {
        self.apply_inner::<false, B>(counts, buf, p, meta, None)
    }

    /// Looks the packet up in the first table, as [`Pipeline::apply`] would first, and
    /// prefetches the entry it hits and the counter it counts in (in `counts`): the first stage of a burst, whose
    /// result [`Pipeline::apply_with_first_hit`] takes. `None` without tables or on a miss.
    #[inline(always)]
    pub fn first_lookup(&self, counts: &PipelineState, p: &Parsed, meta: &Meta) -> Option<usize> {
        let table = self.tables.first()?;
        let hit = table.lookup(p, meta);
        if let Some(e) = hit.and_then(|i| table.entries.get(i)) {
            crate::prefetch::prefetch(e);
        }
        let slot = counts.base.first().map_or(0, |b| b + hit.unwrap_or(table.len()));
        if let Some(c) = counts.hits.get(slot) {
            crate::prefetch::prefetch(c);
        }
        hit
    }

    /// [`Pipeline::apply`] with the first table's lookup already done: `first_hit` is what
    /// [`Pipeline::first_lookup`] (or the first table's [`Table::lookup`]) returned for this
    /// `p` and `meta`, before any rewrite.
    ///
    /// `INLINE_METERS`: the common path (no bucket to refill) of a meter without an index field
    /// (`meter(NAME)`, `police(NAME)`) inlined into the caller, for a loop whose packets meet
    /// meters: no call. Without it every meter action is one out-of-line call, which keeps a
    /// loop whose packets meet none small.
    #[inline(always)]
    pub fn apply_with_first_hit<const INLINE_METERS: bool, B: PacketBuf>(
        &self,
        counts: &mut PipelineState,
        buf: &mut B,
        p: &mut Parsed,
        meta: &mut Meta,
        first_hit: Option<usize>,
    ) -> Egress {
        self.apply_inner::<INLINE_METERS, B>(counts, buf, p, meta, Some(first_hit))
    }

    /// The pipeline; `first`, when known, is the first table's lookup result. `INLINE_METERS`:
    /// see [`Pipeline::apply_with_first_hit`].
    #[inline(always)]
    fn apply_inner<const INLINE_METERS: bool, B: PacketBuf>(
        &self,
        counts: &mut PipelineState,
        buf: &mut B,
        p: &mut Parsed,
        meta: &mut Meta,
        mut first: Option<Option<usize>>,
    ) -> Egress {
        let mut egress = Egress::Unset;
        let tables = &self.tables[..];
        // `counts` is read where a table uses it, not taken apart here: see `meter_action`.
        // The frame's length, for the counters: only the VLAN actions change it.
        let mut len = buf.total_len();
        let mut t = 0;
        while t < tables.len() {
            let table = &tables[t];
            let hit = match first.take() {
                Some(hit) if t == 0 => hit,
                _ => table.lookup(p, meta),
            };
            t = self.run_table::<INLINE_METERS, B>(
                t,
                table,
                counts.base[t],
                hit,
                counts,
                buf,
                p,
                meta,
                &mut len,
                &mut egress,
            );
        }
        egress
    }

    /// Runs the actions of `table` (the `t`-th) for its entry `hit` (its miss entry for
    /// `None`) on one packet:
    /// counts the hit (`base` is where the table's counters start in `counts`, `len` the
    /// frame's length, updated by the VLAN actions), applies rewrites to `buf` (keeping `p`
    /// up to date), lets actions set `meta` and `egress`, and returns the index of the table the
    /// packet goes to next (`t + 1`, a `goto`'s, or [`END`]: at or past the last table, the
    /// pipeline ends with `egress`).
    /// The one action interpreter of [`Pipeline::apply`] and [`Pipeline::apply_burst`].
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn run_table<const INLINE_METERS: bool, B: PacketBuf>(
        &self,
        t: usize,
        table: &Table,
        base: usize,
        hit: Option<usize>,
        counts: &mut PipelineState,
        buf: &mut B,
        p: &mut Parsed,
        meta: &mut Meta,
        len: &mut usize,
        egress: &mut Egress,
    ) -> usize {
        let (entry, slot, miss) = match hit {
            Some(i) => (&table.entries[i], i, false),
            None => (&table.miss, table.len(), true),
        };
        counts.hits[base + slot].hit(*len);
        let mut actions = entry.actions(&table.pool).iter();
        let mut next = t + 1;
        while let Some(a) = actions.next() {
            match a {
                Action::Forward(port) => *egress = Egress::Port(*port),
                Action::Flood => *egress = Egress::Flood,
                Action::Multicast(g) => *egress = Egress::Multicast(*g),
                // The aggregator consumes the packet: like `drop`, the pipeline ends here.
                Action::Aggregate => return end(egress, Egress::Aggregate),
                Action::Drop => {
                    return end(egress, Egress::Dropped(if miss { Reason::TableMiss } else { Reason::ExplicitDrop }))
                }
                Action::DropPoliced => return end(egress, Egress::Dropped(Reason::Policed)),
                Action::Goto(to) => next = *to as usize,
                Action::Exit => next = END,
                Action::Count(c) => counts.named[*c as usize].hit(*len),
                Action::MeterAt(m, i) if INLINE_METERS => {
                    meter_inline(&mut counts.meters, *m, u64::from(*i), p, meta, *len)
                }
                Action::PoliceAt(m, i) if INLINE_METERS => {
                    meter_inline(&mut counts.meters, *m, u64::from(*i), p, meta, *len);
                    if meta.color == crate::meter::Color::Red {
                        return end(egress, Egress::Dropped(Reason::Policed));
                    }
                }
                Action::MeterAt(..) | Action::PoliceAt(..) | Action::MeterBy(..) => {
                    if meter_action(counts, a, p, meta, *len) {
                        return end(egress, Egress::Dropped(Reason::Policed));
                    }
                }
                Action::SetColor(c) => meta.color = *c,
                Action::SetClass(c) => meta.class = *c,
                Action::WhenColor(c, n) => {
                    if meta.color != *c && *n > 0 {
                        actions.nth(*n as usize - 1);
                    }
                }
                // The rewrites one by one, not through `action::rewrite`: every action is
                // then dispatched from one jump table, where a catch-all took a second.
                Action::SetDscp(d) => action::dscp::set_dscp(buf.data_mut(), p, *d),
                Action::MarkEcn => {
                    action::ecn::mark_ce(buf.data_mut(), p);
                }
                Action::DecTtl => {
                    if let Err(r) = action::ttl::decrement(buf.data_mut(), p) {
                        return end(egress, Egress::Dropped(r));
                    }
                }
                Action::SetEthSrc(m) => action::mac::set_src(buf.data_mut(), p, *m),
                Action::SetEthDst(m) => action::mac::set_dst(buf.data_mut(), p, *m),
                Action::PushVlan(vid) => {
                    if let Err(r) = action::vlan::push(buf, p, *vid) {
                        return end(egress, Egress::Dropped(r));
                    }
                    *len = buf.total_len();
                }
                Action::PopVlan => {
                    action::vlan::pop(buf, p);
                    *len = buf.total_len();
                }
                Action::SetVlan(vid) => action::vlan::set_vid(buf.data_mut(), p, *vid),
            }
        }
        next
    }

    /// Applies a multicast copy's rewrites (and counts) to `buf`.
    #[inline]
    pub fn apply_copy<B: PacketBuf>(
        &self,
        counts: &mut PipelineState,
        group: usize,
        copy: usize,
        buf: &mut B,
        p: &mut Parsed,
    ) -> Result<(), Reason> {
        let (_, actions) = &self.groups[group].copies[copy];
        for a in &actions.0 {
            match a {
                Action::Count(c) => counts.named[*c as usize].hit(buf.total_len()),
                rw => action::rewrite(rw, buf, p)?,
            }
        }
        Ok(())
    }
}
