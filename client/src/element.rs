//! Element types a tensor may hold, and how their lanes sit in a payload (spec section 2:
//! little-endian).

use crate::Dtype;

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for i32 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// A lane type of the protocol: `f32`, `i32`, [`half::f16`] or [`half::bf16`] (sealed).
pub trait Element: Copy + sealed::Sealed {
    /// The dtype whose lanes this type holds.
    const DTYPE: Dtype;
    /// Size of one lane (bytes).
    const SIZE: usize;
    /// Writes the lane little-endian into `out` (exactly [`Self::SIZE`] bytes).
    fn write_le(self, out: &mut [u8]);
    /// Reads a little-endian lane from `b` (exactly [`Self::SIZE`] bytes).
    fn read_le(b: &[u8]) -> Self;
}

macro_rules! element {
    ($t:ty, $dtype:expr) => {
        impl Element for $t {
            const DTYPE: Dtype = $dtype;
            const SIZE: usize = $dtype.size();
            #[inline]
            fn write_le(self, out: &mut [u8]) {
                out.copy_from_slice(&self.to_le_bytes());
            }
            #[inline]
            fn read_le(b: &[u8]) -> Self {
                let mut a = [0u8; $dtype.size()];
                a.copy_from_slice(b);
                <$t>::from_le_bytes(a)
            }
        }
    };
}

element!(f32, Dtype::F32);
element!(i32, Dtype::I32);
element!(half::f16, Dtype::F16);
element!(half::bf16, Dtype::Bf16);

/// A tensor the engine reads chunks from and writes results into, as payload bytes.
pub(crate) trait Lanes {
    /// Writes lanes `first..first + out.len() / size` into `out`, little-endian.
    fn load(&self, first: usize, out: &mut [u8]);
    /// Overwrites lanes from `first` with the little-endian lanes in `bytes`.
    fn store(&mut self, first: usize, bytes: &[u8]);
}

/// A typed tensor.
pub(crate) struct Typed<'a, E: Element>(pub &'a mut [E]);

impl<E: Element> Lanes for Typed<'_, E> {
    fn load(&self, first: usize, out: &mut [u8]) {
        for (o, e) in out.chunks_exact_mut(E::SIZE).zip(&self.0[first..]) {
            e.write_le(o);
        }
    }

    fn store(&mut self, first: usize, bytes: &[u8]) {
        for (e, b) in self.0[first..].iter_mut().zip(bytes.chunks_exact(E::SIZE)) {
            *e = E::read_le(b);
        }
    }
}

/// A tensor as raw little-endian lanes of `size` bytes each.
pub(crate) struct Raw<'a> {
    pub bytes: &'a mut [u8],
    pub size: usize,
}

impl Lanes for Raw<'_> {
    fn load(&self, first: usize, out: &mut [u8]) {
        let at = first * self.size;
        out.copy_from_slice(&self.bytes[at..at + out.len()]);
    }

    fn store(&mut self, first: usize, bytes: &[u8]) {
        let at = first * self.size;
        self.bytes[at..at + bytes.len()].copy_from_slice(bytes);
    }
}

/// Raw little-endian lanes of `size` bytes holding the tensor's elements from `base` on: a range
/// of the tensor. Lanes past the end of `bytes` load as zeros (the padding of a range's last
/// chunk) and their results are dropped.
pub(crate) struct RawRange<'a> {
    pub bytes: &'a mut [u8],
    pub size: usize,
    pub base: usize,
}

impl Lanes for RawRange<'_> {
    fn load(&self, first: usize, out: &mut [u8]) {
        let at = ((first - self.base) * self.size).min(self.bytes.len());
        let have = (self.bytes.len() - at).min(out.len());
        out[..have].copy_from_slice(&self.bytes[at..at + have]);
        out[have..].fill(0);
    }

    fn store(&mut self, first: usize, bytes: &[u8]) {
        let at = ((first - self.base) * self.size).min(self.bytes.len());
        let have = (self.bytes.len() - at).min(bytes.len());
        self.bytes[at..at + have].copy_from_slice(&bytes[..have]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_are_little_endian() {
        let mut b = [0u8; 4];
        1.0f32.write_le(&mut b);
        assert_eq!(b, [0x00, 0x00, 0x80, 0x3f]);
        let mut h = [0u8; 2];
        half::bf16::from_f32(1.0).write_le(&mut h);
        assert_eq!(h, [0x80, 0x3f]);
        half::f16::from_f32(1.0).write_le(&mut h);
        assert_eq!(h, [0x00, 0x3c]);
        assert_eq!(i32::read_le(&[0xfe, 0xff, 0xff, 0xff]), -2);
    }

    #[test]
    fn typed_and_raw_agree() {
        let mut v = [1.5f32, -2.0, 3.25];
        let mut bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        let mut a = [0u8; 8];
        let mut b = [0u8; 8];
        Typed(&mut v[..]).load(1, &mut a);
        Raw { bytes: &mut bytes, size: 4 }.load(1, &mut b);
        assert_eq!(a, b);
        let seven: Vec<u8> = [7.0f32, 8.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        Typed(&mut v[..]).store(1, &seven);
        assert_eq!(v, [1.5, 7.0, 8.0]);
    }

    #[test]
    fn a_range_pads_its_last_chunk_with_zeros_and_drops_its_result() {
        let mut bytes = vec![1u8, 2, 3, 4, 5, 6];
        let mut r = RawRange { bytes: &mut bytes, size: 2, base: 8 };
        let mut out = [9u8; 8];
        r.load(8, &mut out);
        assert_eq!(out, [1, 2, 3, 4, 5, 6, 0, 0]);
        r.store(10, &[7, 7, 8, 8]);
        assert_eq!(bytes, [1, 2, 3, 4, 7, 7]);
    }
}
