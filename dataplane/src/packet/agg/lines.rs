//! Slot memory aligned to a cache line: the accumulators, kept results and per-rank copies
//! that the SIMD kernels load and store 32 or 64 bytes at a time.
//!
//! A `Vec<u32>` or `Vec<u8>` gets the allocator's alignment (16 bytes from glibc's malloc), so
//! whether a slot's 32-byte loads split cache lines depended on the order of earlier
//! allocations: half of the 32-byte accesses of a slot at 16 mod 32 cross a line. DPDK
//! allocates such memory with `rte_zmalloc(.., RTE_CACHE_LINE_SIZE)`; this is the same
//! guarantee for memory the worker owns. A slot starts on a line when its size in bytes is a
//! multiple of 64 (every power-of-two chunk of 16 or more elements of any dtype).

use bytemuck::{Pod, Zeroable};
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

/// Bytes of a cache line on x86-64 and most Arm servers (DPDK's `RTE_CACHE_LINE_SIZE`).
pub const CACHE_LINE: usize = 64;

/// One cache line of bytes, aligned to itself.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C, align(64))]
struct Line([u8; CACHE_LINE]);

/// `len` zeroed elements of `T` (a plain integer type: `u8`, `u32`, ...) whose first byte is
/// at a multiple of [`CACHE_LINE`]; derefs to `[T]`. Allocated once, never resized.
#[derive(Clone)]
pub(crate) struct Lines<T> {
    lines: Vec<Line>,
    len: usize,
    elem: PhantomData<T>,
}

impl<T: Pod> Lines<T> {
    /// `len` zeroed elements, rounded up to whole lines underneath.
    pub(crate) fn zeroed(len: usize) -> Lines<T> {
        let bytes = len * size_of::<T>();
        Lines { lines: vec![Line::zeroed(); bytes.div_ceil(CACHE_LINE)], len, elem: PhantomData }
    }

    /// No elements, no allocation.
    pub(crate) fn empty() -> Lines<T> {
        Lines { lines: Vec::new(), len: 0, elem: PhantomData }
    }
}

impl<T: Pod> Deref for Lines<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &bytemuck::cast_slice(&self.lines)[..self.len]
    }
}

impl<T: Pod> DerefMut for Lines<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut bytemuck::cast_slice_mut(&mut self.lines)[..self.len]
    }
}

impl<T> std::fmt::Debug for Lines<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Lines {{ len: {}, bytes: {} }}", self.len, self.lines.len() * CACHE_LINE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_on_a_line_is_zeroed_and_has_the_length_asked() {
        for len in [1usize, 15, 16, 17, 1000, 4096] {
            let w = Lines::<u32>::zeroed(len);
            assert_eq!(w.len(), len);
            assert_eq!(w.as_ptr() as usize % CACHE_LINE, 0, "u32 x {len}");
            assert!(w.iter().all(|&x| x == 0));
            let b = Lines::<u8>::zeroed(len);
            assert_eq!(b.len(), len);
            assert_eq!(b.as_ptr() as usize % CACHE_LINE, 0, "u8 x {len}");
        }
        assert!(Lines::<u8>::empty().is_empty());
    }

    #[test]
    fn writes_are_kept_and_clones_are_deep() {
        let mut w = Lines::<u32>::zeroed(20);
        w[19] = 7;
        w[0] = 1;
        let c = w.clone();
        w[19] = 8;
        assert_eq!((c[0], c[19], w[19]), (1, 7, 8));
        assert_eq!(c.as_ptr() as usize % CACHE_LINE, 0);
    }
}
