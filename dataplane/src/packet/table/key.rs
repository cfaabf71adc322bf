//! Table keys: the concatenation of a table's key fields, each big-endian at a fixed offset.

pub use crate::field::KEY_MAX;

/// A key built from one packet: `bytes[..len]` are significant, the rest is zero.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Key {
    /// Significant length (bytes).
    pub len: u8,
    /// The key's bytes, zero-padded to [`KEY_MAX`].
    pub bytes: [u8; KEY_MAX],
}

impl Key {
    /// The significant bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

impl Default for Key {
    fn default() -> Self {
        Key { len: 0, bytes: [0; KEY_MAX] }
    }
}
