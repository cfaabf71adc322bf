//! P4-style match-action tables: keys made of header fields, match kinds, entries with action
//! lists and per-entry packet and byte counters, and the ordered ingress [`Pipeline`].

pub mod exact;
pub mod field;
pub mod key;
pub mod lpm;
pub mod ternary;

use crate::action::{Action, ActionList, Egress};
use exact::ExactMatcher;
pub use field::Field;
pub use key::{Key, KEY_MAX};

/// A match kind (P4 `match_kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchKind {
    /// The field equals the entry's value.
    Exact,
}

impl MatchKind {
    /// The kind's name in configs.
    pub fn name(self) -> &'static str {
        match self {
            MatchKind::Exact => "exact",
        }
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

/// Packet and byte counters of one entry (P4 direct counter, `packets_and_bytes`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counter {
    /// Packets that hit.
    pub packets: u64,
    /// Their bytes (frame length without FCS).
    pub bytes: u64,
}

impl Counter {
    #[inline(always)]
    fn hit(&mut self, bytes: usize) {
        self.packets += 1;
        self.bytes += bytes as u64;
    }

    /// Adds another counter (merging workers' counters).
    pub fn add(&mut self, o: &Counter) {
        self.packets += o.packets;
        self.bytes += o.bytes;
    }
}

/// The lookup structure that fits the table's match kinds.
#[derive(Debug, Clone)]
enum Matcher {
    Exact(ExactMatcher),
}

/// One match-action table.
#[derive(Debug, Clone)]
pub struct Table {
    /// The table's name.
    pub name: String,
    /// Its key fields, in key order.
    pub key: Vec<KeyField>,
    key_len: usize,
    matcher: Matcher,
    actions: Vec<ActionList>,
    /// Per-entry counters, by entry index (the order of the config's entries).
    pub counters: Vec<Counter>,
    /// The action list run on a miss.
    pub default_action: ActionList,
    /// Misses.
    pub miss_counter: Counter,
}

impl Table {
    /// An empty table over `key` fields with `default_action` on a miss.
    pub fn new(name: &str, key: Vec<(Field, MatchKind)>, default_action: ActionList) -> Table {
        let mut offset = 0;
        let key: Vec<KeyField> = key
            .into_iter()
            .map(|(field, kind)| {
                let kf = KeyField {
                    field,
                    kind,
                    offset,
                };
                offset += field.width();
                kf
            })
            .collect();
        let key_len = offset;
        Table {
            name: name.to_string(),
            key,
            key_len,
            matcher: Matcher::Exact(ExactMatcher::new(key_len)),
            actions: Vec::new(),
            counters: Vec::new(),
            default_action,
            miss_counter: Counter::default(),
        }
    }

    /// Key length (bytes).
    pub fn key_len(&self) -> usize {
        self.key_len
    }

    /// Adds an entry matching `key` (the key's bytes, `key_len()` long) with `actions`.
    /// Returns its index. Errors: a duplicate key, or a key of the wrong length.
    pub fn insert_exact(&mut self, key: &[u8], actions: ActionList) -> Result<usize, String> {
        if key.len() != self.key_len {
            return Err(format!(
                "expected a {}-byte key, found {} bytes",
                self.key_len,
                key.len()
            ));
        }
        let idx = self.actions.len();
        match &mut self.matcher {
            Matcher::Exact(m) => m.insert(key, idx as u32).map_err(|e| e.to_string())?,
        }
        self.actions.push(actions);
        self.counters.push(Counter::default());
        Ok(idx)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.actions.len()
    }

    /// True without entries.
    pub fn is_empty(&self) -> bool {
        self.actions.is_empty()
    }

    /// Builds the key of a packet.
    #[inline(always)]
    fn build_key(&self, frame: &[u8], ingress_port: u16, key: &mut Key) {
        key.len = self.key_len as u8;
        for kf in &self.key {
            let w = kf.field.width();
            kf.field.extract(
                frame,
                ingress_port,
                &mut key.bytes[kf.offset..kf.offset + w],
            );
        }
    }

    /// Looks the packet up; returns the hit entry's index, or `None` on a miss.
    #[inline(always)]
    pub fn lookup(&self, frame: &[u8], ingress_port: u16) -> Option<usize> {
        let mut key = Key::default();
        self.build_key(frame, ingress_port, &mut key);
        match &self.matcher {
            Matcher::Exact(m) => m.lookup(key.as_slice()).map(|i| i as usize),
        }
    }
}

/// The ordered ingress pipeline of tables.
#[derive(Debug, Clone, Default)]
pub struct Pipeline {
    /// The tables, applied in order (`goto` skips forward).
    pub tables: Vec<Table>,
}

impl Pipeline {
    /// Runs the packet through the tables and returns its egress. Counts hits and misses.
    #[inline]
    pub fn apply(&mut self, frame: &mut [u8], ingress_port: u16) -> Egress {
        let mut egress = Egress::Unset;
        let mut t = 0;
        let len = frame.len();
        while t < self.tables.len() {
            let table = &mut self.tables[t];
            let (actions, miss) = match table.lookup(frame, ingress_port) {
                Some(i) => {
                    table.counters[i].hit(len);
                    (&table.actions[i], false)
                }
                None => {
                    table.miss_counter.hit(len);
                    (&table.default_action, true)
                }
            };
            let mut next = t + 1;
            for a in &actions.0 {
                match *a {
                    Action::Forward(p) => egress = Egress::Port(p),
                    Action::Flood => egress = Egress::Flood,
                    Action::Drop => return if miss { Egress::MissDrop } else { Egress::Drop },
                    Action::Goto(to) => next = to as usize,
                    Action::Exit => next = usize::MAX,
                }
            }
            t = next;
        }
        egress
    }
}
