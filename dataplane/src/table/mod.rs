//! P4-style match-action tables: keys, match kinds, entries, actions and counters.

pub mod exact;
pub mod key;
pub mod lpm;
pub mod matcher;
pub mod ternary;
mod words;
