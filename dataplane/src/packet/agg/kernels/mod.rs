//! Reduction kernels (sum, max, min over f32, f16, bf16, i32) with runtime CPU-feature dispatch.
//!
//! This module implements the arithmetic of the gradient protocol, section 4 rule 6
//! (`shared/spec/gradient-protocol.md`), lane by lane:
//!
//! - f32 sum: IEEE binary32 addition, round to nearest-even, subnormals kept (never flushed).
//! - f16 and bf16: every lane is widened exactly to f32, accumulated in f32, and rounded to
//!   nearest-even once, when the result is stored. A NaN stays a NaN (quieted), an overflow
//!   becomes infinity, subnormal results are kept.
//! - i32 sum: wrapping two's-complement addition.
//! - max/min: IEEE 754-2019 `maximum`/`minimum`: a NaN in either operand makes the lane NaN,
//!   `max(-0, +0) = +0`, `min(-0, +0) = -0`. i32 max/min are plain signed comparisons.
//!
//! Rule 7 (order) is the aggregator's business: every kernel here is lane-wise and exact, so the
//! result depends only on the order in which the aggregator feeds contributions in.
//!
//! # Accumulator model
//!
//! A slot's accumulator is a `[u32]` with one element per lane. For f32, f16 and bf16 an element
//! holds the bit pattern of an f32 value; for i32 it holds the two's-complement bits. Payload
//! lanes (`src`, `dst`, `buf`) are little-endian bytes as they sit in the packet, `lanes x
//! dtype.size()` bytes long, at any alignment.
//!
//! A slot is reduced as: [`Kernels::load`] for the first contribution (so that `-0 + -0 = -0`),
//! [`Kernels::fold`] for each further one, then either [`Kernels::store`] to emit, or, for the
//! last contribution, [`Kernels::fold_store`] / [`Kernels::fold_store_in_place`], which fold and
//! emit in one pass without writing the accumulator.
//!
//! # Dispatch
//!
//! [`Kernels`] is a table of function pointers, chosen once at start-up with
//! [`Kernels::detect`]. Every kernel set gives bit-identical results to [`Kernels::scalar`], the
//! reference, except that a NaN lane may carry a different NaN payload. The SIMD kernel sets rely
//! on the default floating-point environment (MXCSR: round to nearest-even, no flush-to-zero, no
//! denormals-are-zero), which Rust code never changes; nothing here changes it either.
//!
//! | kernel set | CPU features | lanes per step | tails |
//! | --- | --- | --- | --- |
//! | `avx512` | AVX-512 F, BW, VL | 16 | masked loads and stores |
//! | `avx2` | AVX2, F16C | 8 | the scalar kernel |
//! | `scalar` | none | 1 | n/a |
#![deny(unsafe_op_in_unsafe_fn)]

pub mod lanes;
mod scalar;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;

#[cfg(test)]
mod tests;

use crate::wire::gradient::{Dtype, Op};
use std::fmt;

/// Const-generic parameters of the kernel functions: the wire codes of [`Dtype`] and [`Op`]
/// (section 2), so that each (op, dtype) pair is monomorphised into its own loop.
mod code {
    use super::{Dtype, Op};

    pub const F32: u8 = Dtype::F32.wire();
    pub const F16: u8 = Dtype::F16.wire();
    pub const BF16: u8 = Dtype::Bf16.wire();
    pub const I32: u8 = Dtype::I32.wire();

    pub const SUM: u8 = Op::Sum.wire();
    pub const MAX: u8 = Op::Max.wire();
    pub const MIN: u8 = Op::Min.wire();

    /// Bytes per payload lane of the dtype with wire code `dt` (a compile-time constant: `dt`
    /// is always one of the codes above).
    pub const fn size(dt: u8) -> usize {
        match Dtype::from_wire(dt) {
            Some(d) => d.size(),
            None => panic!("not a dtype's wire code"),
        }
    }
}

/// Row of the dtype or op with wire code `code` (1, 2, ...) in a kernel table.
#[inline(always)]
const fn row(code: u8) -> usize {
    code as usize - 1
}

// The raw kernel signatures shared by every kernel set. Each is an `unsafe fn` with the same
// contract, which `Kernels`' safe methods establish:
//
// - `lanes` is the number of lanes; `acc` is valid for `lanes` u32 reads (and writes for `load`
//   and `fold`), aligned for u32; `src` is valid for `lanes * size` byte reads and `dst` for
//   `lanes * size` byte writes, at any alignment, where `size` is the dtype's lane size.
// - `acc` overlaps neither `src` nor `dst`; `src` and `dst` are either the same pointer (fold
//   and store in place) or do not overlap at all. Kernels read a lane's source before writing
//   its destination, so the in-place case is sound.
// - The CPU has the features the kernel set was compiled for (checked when the table is built).

/// `acc[i] = widen(src lane i)`.
type LoadFn = unsafe fn(acc: *mut u32, src: *const u8, lanes: usize);
/// `acc[i] = acc[i] op widen(src lane i)`.
type FoldFn = unsafe fn(acc: *mut u32, src: *const u8, lanes: usize);
/// `dst lane i = narrow(acc[i])`.
type StoreFn = unsafe fn(acc: *const u32, dst: *mut u8, lanes: usize);
/// `dst lane i = narrow(acc[i] op widen(src lane i))`.
type FoldStoreFn = unsafe fn(acc: *const u32, src: *const u8, dst: *mut u8, lanes: usize);

/// A dispatch table of reduction kernels for one instruction set, selected once at start-up.
///
/// Every method works lane-wise on one slot: `acc` is the slot's accumulator (one `u32` per
/// lane, see the [module docs](self)), and `src`, `dst` and `buf` are payload lanes in wire
/// format (little-endian, `acc.len() * dtype.size()` bytes, any alignment). All kernel sets give
/// bit-identical results, except for the payload of NaN lanes.
///
/// # Panics
///
/// Every method panics if a payload slice is not exactly `acc.len() * dtype.size()` bytes long:
/// one length comparison per call, never a per-lane check.
#[derive(Clone, Copy)]
pub struct Kernels {
    name: &'static str,
    // Invariant: a table's pointers are only ever those of a kernel set whose CPU features were
    // detected on this machine (see `avx2()` and `avx512()`), so calling them with the raw kernel
    // contract above satisfied is sound.
    load: [LoadFn; 4],
    fold: [[FoldFn; 4]; 3],
    store: [StoreFn; 4],
    fold_store: [[FoldStoreFn; 4]; 3],
}

/// Fills a [`Kernels`] with the monomorphised kernels of the module `$isa`, which must define
/// `load::<DT>`, `fold::<OP, DT>`, `store::<DT>` and `fold_store::<OP, DT>` with the raw kernel
/// signatures.
macro_rules! kernel_table {
    ($name:literal, $isa:ident) => {{
        use code::*;
        Kernels {
            name: $name,
            load: [
                $isa::load::<F32>,
                $isa::load::<F16>,
                $isa::load::<BF16>,
                $isa::load::<I32>,
            ],
            fold: [
                kernel_table!(@ops $isa::fold, SUM),
                kernel_table!(@ops $isa::fold, MAX),
                kernel_table!(@ops $isa::fold, MIN),
            ],
            store: [
                $isa::store::<F32>,
                $isa::store::<F16>,
                $isa::store::<BF16>,
                $isa::store::<I32>,
            ],
            fold_store: [
                kernel_table!(@ops $isa::fold_store, SUM),
                kernel_table!(@ops $isa::fold_store, MAX),
                kernel_table!(@ops $isa::fold_store, MIN),
            ],
        }
    }};
    (@ops $isa:ident :: $f:ident, $op:ident) => {
        [
            $isa::$f::<$op, F32>,
            $isa::$f::<$op, F16>,
            $isa::$f::<$op, BF16>,
            $isa::$f::<$op, I32>,
        ]
    };
}

impl Kernels {
    /// The best kernel set this CPU runs: AVX-512, else AVX2, else the scalar reference.
    pub fn detect() -> Kernels {
        Kernels::avx512().or_else(Kernels::avx2).unwrap_or_else(Kernels::scalar)
    }

    /// The portable scalar reference, which defines the exact result of every kernel.
    pub fn scalar() -> Kernels {
        kernel_table!("scalar", scalar)
    }

    /// The AVX2 kernel set (8 lanes per step), or `None` when the CPU lacks AVX2 or F16C.
    pub fn avx2() -> Option<Kernels> {
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("f16c") {
            return Some(kernel_table!("avx2", avx2));
        }
        None
    }

    /// The AVX-512 kernel set (16 lanes per step), or `None` when the CPU lacks AVX-512 F, BW or
    /// VL.
    pub fn avx512() -> Option<Kernels> {
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vl")
        {
            return Some(kernel_table!("avx512", avx512));
        }
        None
    }

    /// Every kernel set this CPU runs, the scalar reference first.
    pub fn available() -> Vec<Kernels> {
        let mut sets = vec![Kernels::scalar()];
        sets.extend(Kernels::avx2());
        sets.extend(Kernels::avx512());
        sets
    }

    /// The kernel set's name: `"avx512"`, `"avx2"` or `"scalar"`.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Starts a slot's accumulator with its first contribution: `acc[i] = widen(src lane i)`.
    ///
    /// Widening is exact (f16 subnormals, infinities and NaNs included; bf16 is `bits << 16`).
    /// Starting from the first contribution rather than from +0 is what makes `-0 + -0 = -0`
    /// (section 4 rule 6).
    ///
    /// # Panics
    ///
    /// If `src.len() != acc.len() * dtype.size()`.
    pub fn load(&self, dtype: Dtype, acc: &mut [u32], src: &[u8]) {
        check_len("src", src.len(), acc.len(), dtype);
        let f = self.load[row(dtype.wire())];
        // SAFETY: `acc` is a live exclusive slice of `acc.len()` u32s and `src` a live shared
        // slice of exactly `acc.len() * dtype.size()` bytes (checked above); a `&mut` and a `&`
        // never overlap; the table only holds kernels for detected CPU features (type invariant).
        unsafe { f(acc.as_mut_ptr(), src.as_ptr(), acc.len()) }
    }

    /// Folds one more contribution into a slot: `acc[i] = acc[i] op widen(src lane i)`
    /// (section 4 rule 6).
    ///
    /// # Panics
    ///
    /// If `src.len() != acc.len() * dtype.size()`.
    pub fn fold(&self, op: Op, dtype: Dtype, acc: &mut [u32], src: &[u8]) {
        check_len("src", src.len(), acc.len(), dtype);
        let f = self.fold[row(op.wire())][row(dtype.wire())];
        // SAFETY: as in `load`: lengths checked above, `acc` and `src` are disjoint borrows, and
        // the table only holds kernels for detected CPU features.
        unsafe { f(acc.as_mut_ptr(), src.as_ptr(), acc.len()) }
    }

    /// Emits a slot's result: `dst lane i = narrow(acc[i])`.
    ///
    /// f32 and i32 lanes are the accumulator's bits. f16 and bf16 lanes are rounded from the f32
    /// accumulator to nearest-even, exactly once: a NaN stays a NaN (quieted), an overflow
    /// becomes infinity, subnormal results are kept (section 4 rule 6).
    ///
    /// # Panics
    ///
    /// If `dst.len() != acc.len() * dtype.size()`.
    pub fn store(&self, dtype: Dtype, acc: &[u32], dst: &mut [u8]) {
        check_len("dst", dst.len(), acc.len(), dtype);
        let f = self.store[row(dtype.wire())];
        // SAFETY: lengths checked above, `acc` and `dst` are disjoint borrows (`dst` is `&mut`),
        // and the table only holds kernels for detected CPU features.
        unsafe { f(acc.as_ptr(), dst.as_mut_ptr(), acc.len()) }
    }

    /// Folds a slot's last contribution and emits the result in one pass, leaving `acc`
    /// untouched: `dst lane i = narrow(acc[i] op widen(src lane i))`.
    ///
    /// Gives exactly what [`fold`](Self::fold) then [`store`](Self::store) would give.
    ///
    /// # Panics
    ///
    /// If `src.len()` or `dst.len()` is not `acc.len() * dtype.size()`.
    pub fn fold_store(&self, op: Op, dtype: Dtype, acc: &[u32], src: &[u8], dst: &mut [u8]) {
        check_len("src", src.len(), acc.len(), dtype);
        check_len("dst", dst.len(), acc.len(), dtype);
        let f = self.fold_store[row(op.wire())][row(dtype.wire())];
        // SAFETY: lengths checked above; `dst` is an exclusive borrow, so it overlaps neither
        // `acc` nor `src`; the table only holds kernels for detected CPU features.
        unsafe { f(acc.as_ptr(), src.as_ptr(), dst.as_mut_ptr(), acc.len()) }
    }

    /// Like [`fold_store`](Self::fold_store), with the last contribution's own payload as both
    /// source and destination: `buf lane i = narrow(acc[i] op widen(buf lane i))`.
    ///
    /// This lets the aggregator turn the last contribution's packet into the result packet
    /// without copying the payload.
    ///
    /// # Panics
    ///
    /// If `buf.len() != acc.len() * dtype.size()`.
    pub fn fold_store_in_place(&self, op: Op, dtype: Dtype, acc: &[u32], buf: &mut [u8]) {
        check_len("buf", buf.len(), acc.len(), dtype);
        let f = self.fold_store[row(op.wire())][row(dtype.wire())];
        let p = buf.as_mut_ptr();
        // SAFETY: lengths checked above; `buf` is an exclusive borrow, so it does not overlap
        // `acc`; source and destination are the same pointer, derived from the `&mut`, which the
        // raw kernel contract allows (each lane is read before it is written); the table only
        // holds kernels for detected CPU features.
        unsafe { f(acc.as_ptr(), p.cast_const(), p, acc.len()) }
    }
}

impl fmt::Debug for Kernels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kernels").field("name", &self.name).finish_non_exhaustive()
    }
}

/// Lanes to handle before the first vector boundary of the buffer at `addr`, whose lanes are
/// `lane_size` bytes, for vectors of `vector_lanes` lanes; afterwards, whole-vector accesses to it
/// never straddle two cache lines. 0 when the buffer is not aligned to its lane size (no head can
/// align it then). The SIMD kernel sets align their stores this way: split stores cost far more
/// than split loads, and neither payloads nor accumulators are vector-aligned in general.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
#[inline(always)]
fn head_lanes(addr: usize, lane_size: usize, vector_lanes: usize) -> usize {
    let vector = vector_lanes * lane_size;
    if !addr.is_multiple_of(lane_size) {
        return 0;
    }
    (vector - addr % vector) % vector / lane_size
}

/// Asserts that a payload slice holds exactly `lanes` lanes of `dtype`.
#[inline]
#[track_caller]
fn check_len(what: &str, bytes: usize, lanes: usize, dtype: Dtype) {
    // No overflow: `lanes` counts u32s of a live slice, so `lanes * 4` fits in a usize.
    if bytes != lanes * dtype.size() {
        len_mismatch(what, bytes, lanes, dtype);
    }
}

#[cold]
#[inline(never)]
#[track_caller]
fn len_mismatch(what: &str, bytes: usize, lanes: usize, dtype: Dtype) -> ! {
    panic!("{what} is {bytes} bytes, but {lanes} {} lanes take {} bytes", dtype.name(), lanes * dtype.size())
}
