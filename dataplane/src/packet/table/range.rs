//! The range condition of a ternary/range entry ([`RangeCond`]), shared by the priority-ordered
//! rows of [`super::ternary`] and the bit-vector [`super::classifier`]: a leaf both import.

use core::ops::Range;

/// Widest range field (bytes).
pub const RANGE_FIELD_MAX: usize = 16;

/// A range condition of an entry: the big-endian value of key bytes `field` lies in
/// `lo..=hi`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RangeCond {
    /// The field's byte range in the key, `1..=16` bytes.
    pub field: Range<usize>,
    /// Lowest value (inclusive), big-endian value of the field's bytes.
    pub lo: u128,
    /// Highest value (inclusive), big-endian value of the field's bytes.
    pub hi: u128,
}
