//! The lookup structures behind the tables, one per P4 match kind, and their error type.
//!
//! A table's key is the concatenation of its key fields' bytes (big-endian, fixed offsets),
//! `1..=`[`KEY_MAX`] bytes. Each matcher maps keys to an entry index (`u32`); the table keeps
//! the actions and counters of each index.
//!
//! | match kind        | structure                                    | lookup cost                              |
//! |-------------------|----------------------------------------------|------------------------------------------|
//! | `exact`           | [`ExactMatcher`]: open addressing, keys inline | hash of `ceil(len/8)` words, ~1.5 slots  |
//! | `lpm`             | [`LpmMatcher`]: 16-8-8-... multibit trie      | one read per level: 3 for IPv4           |
//! | `ternary`, `range`| [`TernaryMatcher`]: bit-vector classifier (scan beyond 512 entries) | one AND per masked byte and range field per 64 entries |
//!
//! Lookups take `&self`, never allocate, lock or panic; a key of the wrong length finds
//! nothing. Inserts run at configuration time, may allocate, and report a [`MatchError`].
//!
//! [`ExactMatcher`]: super::exact::ExactMatcher
//! [`LpmMatcher`]: super::lpm::LpmMatcher
//! [`TernaryMatcher`]: super::ternary::TernaryMatcher

use super::key::KEY_MAX;
use core::ops::Range;

/// Why a matcher could not be built or an entry could not be inserted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MatchError {
    /// The table's key length is outside `1..=`[`KEY_MAX`] bytes.
    #[error("key length {0} bytes is outside 1..={KEY_MAX}")]
    KeyLenOutOfRange(usize),
    /// A key, value or mask does not have the table's key length.
    #[error("{what} is {got} bytes, the table's key is {expected} bytes")]
    WrongLen {
        /// What had the wrong length: "key", "value" or "mask".
        what: &'static str,
        /// The table's key length (bytes).
        expected: usize,
        /// The length given (bytes).
        got: usize,
    },
    /// An entry with the same key (for LPM: exact part and prefix; for ternary: value, mask,
    /// ranges and priority) is already in the table.
    #[error("an entry with this key is already in the table")]
    DuplicateKey,
    /// The table holds its maximum number of entries (or, for LPM, trie nodes).
    #[error("table full: {max} {what}")]
    TableFull {
        /// What ran out: "entries" or "trie nodes".
        what: &'static str,
        /// The limit.
        max: usize,
    },
    /// The LPM field is not `1..=16` bytes inside the key.
    #[error("lpm field bytes {field:?} must be 1..=16 bytes inside the {key_len}-byte key")]
    LpmField {
        /// The field's byte range in the key.
        field: Range<usize>,
        /// The table's key length (bytes).
        key_len: usize,
    },
    /// The prefix is longer than the LPM field.
    #[error("prefix length {prefix_len} bits exceeds the {field_bits}-bit lpm field")]
    PrefixLen {
        /// The prefix length given (bits).
        prefix_len: u8,
        /// Width of the LPM field (bits).
        field_bits: u32,
    },
    /// The entry index is too large for the structure's slot encoding.
    #[error("entry index {entry} exceeds the largest storable index {max}")]
    EntryTooLarge {
        /// The entry index given.
        entry: u32,
        /// The largest index the structure can store.
        max: u32,
    },
    /// A range condition's field is not `1..=16` bytes inside the key.
    #[error("range field bytes {field:?} must be 1..=16 bytes inside the {key_len}-byte key")]
    RangeField {
        /// The field's byte range in the key.
        field: Range<usize>,
        /// The table's key length (bytes).
        key_len: usize,
    },
    /// A range condition's mask bytes are not all zero.
    #[error("mask must be zero over range field bytes {field:?}")]
    RangeMasked {
        /// The field's byte range in the key.
        field: Range<usize>,
    },
    /// A range condition with `lo > hi` (it could never match).
    #[error("empty range: lo {lo:#x} > hi {hi:#x}")]
    RangeEmpty {
        /// Lower bound given.
        lo: u128,
        /// Upper bound given.
        hi: u128,
    },
    /// A range bound does not fit in its field.
    #[error("range bound {value:#x} does not fit in the {width}-byte field")]
    RangeBound {
        /// The bound given.
        value: u128,
        /// Width of the field (bytes).
        width: usize,
    },
}

/// Checks a table's key length (bytes).
pub(super) fn check_key_len(key_len: usize) -> Result<(), MatchError> {
    if (1..=KEY_MAX).contains(&key_len) {
        Ok(())
    } else {
        Err(MatchError::KeyLenOutOfRange(key_len))
    }
}

/// The `Debug` of an exact or ternary matcher: `name { key_len, len, max_entries, memory_bytes }`
/// (key bytes, entries, most entries, bytes allocated).
pub(super) fn debug_sizes(
    f: &mut core::fmt::Formatter<'_>,
    name: &str,
    key_len: usize,
    len: usize,
    max_entries: usize,
    memory_bytes: usize,
) -> core::fmt::Result {
    f.debug_struct(name)
        .field("key_len", &key_len)
        .field("len", &len)
        .field("max_entries", &max_entries)
        .field("memory_bytes", &memory_bytes)
        .finish()
}

/// Checks that `bytes` (a "key", "value" or "mask") has the table's key length.
pub(super) fn check_len(what: &'static str, bytes: &[u8], expected: usize) -> Result<(), MatchError> {
    if bytes.len() == expected {
        Ok(())
    } else {
        Err(MatchError::WrongLen { what, expected, got: bytes.len() })
    }
}

/// Big-endian value of 1..=16 bytes.
#[inline]
pub(super) fn be_value(bytes: &[u8]) -> u128 {
    bytes.iter().fold(0u128, |v, &b| (v << 8) | u128::from(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_display() {
        let e = MatchError::PrefixLen { prefix_len: 33, field_bits: 32 };
        assert_eq!(e.to_string(), "prefix length 33 bits exceeds the 32-bit lpm field");
        let e = MatchError::LpmField { field: 2..19, key_len: 20 };
        assert_eq!(e.to_string(), "lpm field bytes 2..19 must be 1..=16 bytes inside the 20-byte key");
        let e = MatchError::WrongLen { what: "mask", expected: 13, got: 12 };
        assert_eq!(e.to_string(), "mask is 12 bytes, the table's key is 13 bytes");
        let e: Box<dyn std::error::Error> = Box::new(MatchError::DuplicateKey);
        assert_eq!(e.to_string(), "an entry with this key is already in the table");
    }

    /// Workers share built tables by reference: every matcher must be `Send + Sync`.
    #[test]
    fn matchers_are_send_and_sync() {
        fn shareable<T: Send + Sync + Clone + std::fmt::Debug>() {}
        shareable::<super::super::exact::ExactMatcher>();
        shareable::<super::super::lpm::LpmMatcher>();
        shareable::<super::super::ternary::TernaryMatcher>();
        shareable::<MatchError>();
    }

    #[test]
    fn be_value_reads_big_endian() {
        assert_eq!(be_value(&[0x12, 0x34]), 0x1234);
        assert_eq!(be_value(&[0xff; 16]), u128::MAX);
    }
}
