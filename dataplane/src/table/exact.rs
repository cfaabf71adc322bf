//! Exact-match lookup: a hash map from key bytes to entry index.

use std::collections::HashMap;

/// Why an entry cannot be inserted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MatchError {
    /// The same key is already in the table.
    #[error("an entry with the same key already exists")]
    Duplicate,
}

/// Exact-match lookup structure over keys of a fixed length (bytes).
#[derive(Debug, Clone)]
pub struct ExactMatcher {
    key_len: usize,
    map: HashMap<Vec<u8>, u32>,
}

impl ExactMatcher {
    /// An empty matcher for keys of `key_len` bytes.
    pub fn new(key_len: usize) -> Self {
        ExactMatcher {
            key_len,
            map: HashMap::new(),
        }
    }

    /// Inserts `key` -> `entry`. Errors on a duplicate key.
    pub fn insert(&mut self, key: &[u8], entry: u32) -> Result<(), MatchError> {
        debug_assert_eq!(key.len(), self.key_len);
        if self.map.insert(key.to_vec(), entry).is_some() {
            return Err(MatchError::Duplicate);
        }
        Ok(())
    }

    /// The entry for `key`.
    #[inline]
    pub fn lookup(&self, key: &[u8]) -> Option<u32> {
        self.map.get(key).copied()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}
