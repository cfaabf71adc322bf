//! Keys as `u64` words, and the hash over them: the common ground of the three matchers.
//!
//! A key of `len` bytes is handled as `W = ceil(len / 8)` words. Word `i` holds key bytes
//! `8i..8i+8` loaded little-endian (byte `8i + j` in bits `8j..8j+8`), so a native load on
//! x86-64 and AArch64; the last word is zero-padded. The word values are only compared and
//! hashed, never interpreted as numbers, so the byte order inside them does not matter as long
//! as keys, stored keys and masks are all loaded the same way, through this module.

/// Number of words of a key of `len` bytes (`len` in `1..=64` gives `1..=8`).
#[inline]
pub(super) const fn word_count(len: usize) -> usize {
    len.div_ceil(8)
}

/// Loads a key of `8 * (W - 1) + 1 ..= 8 * W` bytes as `W` words, the last one zero-padded.
///
/// The caller guarantees that length (the matchers check `key.len()` against their key length
/// first). Every load is a fixed-size read: full words first, then the tail, read as the last
/// eight bytes of the key and shifted down (or, for keys shorter than eight bytes, as two
/// overlapping smaller reads), so there is no byte loop and no `memcpy` call.
#[inline(always)]
pub(super) fn load<const W: usize>(key: &[u8]) -> [u64; W] {
    debug_assert!(W >= 1 && key.len() > 8 * (W - 1) && key.len() <= 8 * W);
    let mut w = [0u64; W];
    for (i, word) in w.iter_mut().enumerate().take(W - 1) {
        *word = le64(key, 8 * i);
    }
    w[W - 1] = load_tail(key, 8 * (W - 1));
    w
}

/// Little-endian `u64` at `b[at..at + 8]`.
#[inline(always)]
fn le64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Little-endian `u32` at `b[at..at + 4]`.
#[inline(always)]
fn le32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

/// Little-endian `u16` at `b[at..at + 2]`.
#[inline(always)]
fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// The bytes `key[start..]` (1 to 8 of them) as one zero-padded word.
#[inline(always)]
fn load_tail(key: &[u8], start: usize) -> u64 {
    let len = key.len();
    if len >= 8 {
        // The last eight bytes end at the key's end; drop the ones before `start`.
        let t = len - start;
        le64(key, len - 8) >> (8 * (8 - t))
    } else {
        load_short(key)
    }
}

/// A key of fewer than eight bytes as one word, from disjoint reads of 4, 2 and 1 bytes at
/// offsets 0, 4 and 6 (as many as the length needs). A lookup reads its key right after
/// building it field by field; a read that lies within one store is forwarded from the store
/// buffer, while one spanning two stores waits for both to reach the cache. Reading at these
/// offsets keeps a 6-byte MAC (stored as 4 + 2 bytes) or a 4-byte address forwardable, which
/// two overlapping 4-byte reads (at 0 and `n - 4`) are not.
#[inline(always)]
fn load_short(b: &[u8]) -> u64 {
    let n = b.len();
    let mut w = 0u64;
    let mut at = 0;
    if n >= 4 {
        w = u64::from(le32(b, 0));
        at = 4;
    }
    if n - at >= 2 {
        w |= u64::from(le16(b, at)) << (8 * at);
        at += 2;
    }
    if n > at {
        w |= u64::from(b[at]) << (8 * at);
    }
    w
}

/// Seed of the hash (the fractional digits of pi). Fixed, so tables are reproducible; the keys
/// in a table are chosen by its controller, not by the traffic, so a secret seed buys nothing
/// (a packet can only pick which chain it probes, not make chains longer).
const SEED: u64 = 0x243f_6a88_85a3_08d3;
/// Odd multiplier of the hash (2^64 / golden ratio).
const MUL: u64 = 0x9e37_79b9_7f4a_7c15;

/// 64x64 -> 128-bit multiply folded back to 64 bits (high XOR low): every input bit reaches
/// every output bit. One `mul` on x86-64 and `mul` + `umulh` on AArch64.
#[inline(always)]
const fn fold_mul(a: u64, b: u64) -> u64 {
    let r = (a as u128).wrapping_mul(b as u128);
    (r as u64) ^ ((r >> 64) as u64)
}

/// Hash of a key's words: a chain of folded multiplies, one per word (about 4 cycles each).
#[inline(always)]
pub(super) fn hash<const W: usize>(w: &[u64; W]) -> u64 {
    let mut h = SEED;
    for &x in w {
        h = fold_mul(h ^ x, MUL);
    }
    h
}

/// Calls `$body` with `$t` bound to the `[u64; W]`-specialised inner value of an enum whose
/// variants `W1..W8` wrap one generic type each.
macro_rules! dispatch {
    ($enum:ident, $value:expr, $t:ident => $body:expr) => {
        match $value {
            $enum::W1($t) => $body,
            $enum::W2($t) => $body,
            $enum::W3($t) => $body,
            $enum::W4($t) => $body,
            $enum::W5($t) => $body,
            $enum::W6($t) => $body,
            $enum::W7($t) => $body,
            $enum::W8($t) => $body,
        }
    };
}
pub(super) use dispatch;

/// Builds the `W1..W8` variant of `$enum` for a key of `$words` words, the inner value made by
/// `$make` (generic in the word count, which it sees as the const `W`).
macro_rules! by_words {
    ($enum:ident, $words:expr, $make:ident ( $($arg:expr),* )) => {
        match $words {
            1 => $enum::W1($make::<1>($($arg),*)),
            2 => $enum::W2($make::<2>($($arg),*)),
            3 => $enum::W3($make::<3>($($arg),*)),
            4 => $enum::W4($make::<4>($($arg),*)),
            5 => $enum::W5($make::<5>($($arg),*)),
            6 => $enum::W6($make::<6>($($arg),*)),
            7 => $enum::W7($make::<7>($($arg),*)),
            _ => $enum::W8($make::<8>($($arg),*)),
        }
    };
}
pub(super) use by_words;

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference: zero-pad into 64 bytes and read whole words.
    fn naive(key: &[u8]) -> Vec<u64> {
        let mut b = [0u8; 64];
        b[..key.len()].copy_from_slice(key);
        (0..word_count(key.len())).map(|i| le64(&b, 8 * i)).collect()
    }

    fn load_dyn(key: &[u8]) -> Vec<u64> {
        match word_count(key.len()) {
            1 => load::<1>(key).to_vec(),
            2 => load::<2>(key).to_vec(),
            3 => load::<3>(key).to_vec(),
            4 => load::<4>(key).to_vec(),
            5 => load::<5>(key).to_vec(),
            6 => load::<6>(key).to_vec(),
            7 => load::<7>(key).to_vec(),
            _ => load::<8>(key).to_vec(),
        }
    }

    #[test]
    fn load_matches_zero_padded_words_for_every_length() {
        let bytes: Vec<u8> = (1..=64u8).map(|i| i.wrapping_mul(37) | 1).collect();
        for len in 1..=64 {
            assert_eq!(load_dyn(&bytes[..len]), naive(&bytes[..len]), "len {len}");
        }
    }

    #[test]
    fn load_short_keys() {
        assert_eq!(load::<1>(&[0xab]), [0xab]);
        assert_eq!(load::<1>(&[1, 2, 3]), [0x03_02_01]);
        assert_eq!(load::<1>(&[1, 2, 3, 4, 5, 6]), [0x06_05_04_03_02_01]);
        assert_eq!(load::<2>(&[1, 2, 3, 4, 5, 6, 7, 8, 9]), [0x0807_0605_0403_0201, 9]);
    }

    #[test]
    fn hash_spreads_single_byte_differences() {
        // Keys differing in one byte anywhere must land in different low bits most of the time.
        let base = [0u64; 2];
        let mut low = std::collections::HashSet::new();
        for i in 0..2 {
            for bit in 0..64 {
                let mut k = base;
                k[i] ^= 1 << bit;
                low.insert(hash(&k) & 0xfff);
            }
        }
        assert!(low.len() > 120, "only {} distinct 12-bit buckets of 128", low.len());
    }
}
