//! AVX-512 (F, BW, VL) kernels: 16 lanes per step; a masked head that aligns the stores to the
//! vector size, and a masked tail.
//!
//! - f16 widen/narrow: `vcvtph2ps` / `vcvtps2ph` with round-to-nearest-even, exact and keeping
//!   subnormals in both directions under the default MXCSR (no FTZ, no DAZ).
//! - bf16 narrow: round-to-nearest-even on the bit pattern, NaN quieted by a separate path
//!   (`vcvtneps2bf16` is not used: it flushes subnormals).
//! - max/min: `vmaxps`/`vminps` return their second operand when either is NaN or both are zero,
//!   so the lanes where the operands compare equal (the ±0 case) are replaced by `a & b` / `a | b`
//!   and the unordered lanes by `a + b`, a quiet NaN.
//!
//! Every `unsafe fn` here has the raw kernel contract of `mod.rs`, plus: the CPU supports
//! AVX-512 F, BW and VL.

use std::arch::x86_64::*;

use super::code::{size, BF16, F16, I32, MAX, SUM};
use super::head_lanes;

/// Lanes per vector.
const LANES: usize = 16;

/// Mask of the first `n` lanes, `n < LANES`.
#[inline(always)]
fn first(n: usize) -> __mmask16 {
    ((1u32 << n) - 1) as __mmask16
}

/// Loads the lanes of `k` from `src` and widens them to accumulator bits (zero elsewhere).
///
/// # Safety
///
/// The lanes of `k` are readable at `src`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
#[inline]
unsafe fn widen<const DT: u8>(src: *const u8, k: __mmask16) -> __m512i {
    // SAFETY: masked loads touch only the lanes of `k`, readable by the caller's contract; they
    // need no alignment.
    unsafe {
        match DT {
            F16 => _mm512_castps_si512(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, src.cast()))),
            BF16 => _mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, src.cast()))),
            _ => _mm512_maskz_loadu_epi32(k, src.cast()),
        }
    }
}

/// Narrows accumulator bits and stores the lanes of `k` at `dst`.
///
/// # Safety
///
/// The lanes of `k` are writable at `dst`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
#[inline]
unsafe fn narrow_store<const DT: u8>(dst: *mut u8, k: __mmask16, x: __m512i) {
    // SAFETY: masked stores touch only the lanes of `k`, writable by the caller's contract; they
    // need no alignment.
    unsafe {
        match DT {
            F16 => {
                let h = _mm512_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm512_castsi512_ps(x));
                _mm256_mask_storeu_epi16(dst.cast(), k, h)
            }
            BF16 => _mm256_mask_storeu_epi16(dst.cast(), k, f32_to_bf16(x)),
            _ => _mm512_mask_storeu_epi32(dst.cast(), k, x),
        }
    }
}

/// f32 bits to 16 bf16 bit patterns, as `lanes::f32_to_bf16`.
///
/// Each lane is rounded to nearest-even in place (its top half is then the bf16 result), a NaN
/// lane gets its quiet bit set instead, and one word permute gathers the top halves.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
#[inline]
fn f32_to_bf16(x: __m512i) -> __m256i {
    let lsb = _mm512_and_si512(_mm512_srli_epi32::<16>(x), _mm512_set1_epi32(1));
    let rounded = _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb);
    let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(_mm512_castsi512_ps(x), _mm512_castsi512_ps(x));
    let r = _mm512_mask_or_epi32(rounded, nan, x, _mm512_set1_epi32(0x0040_0000));
    // Word 2i + 1 (the top half of lane i) to word i, for i in 0..16.
    let top_halves = _mm512_set_epi16(
        31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1, //
        31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1,
    );
    _mm512_castsi512_si256(_mm512_permutexvar_epi16(top_halves, r))
}

/// `a op b` on accumulator bits of dtype `DT`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
#[inline]
fn combine<const OP: u8, const DT: u8>(a: __m512i, b: __m512i) -> __m512i {
    if DT == I32 {
        return match OP {
            SUM => _mm512_add_epi32(a, b),
            MAX => _mm512_max_epi32(a, b),
            _ => _mm512_min_epi32(a, b),
        };
    }
    let (x, y) = (_mm512_castsi512_ps(a), _mm512_castsi512_ps(b));
    if OP == SUM {
        return _mm512_castps_si512(_mm512_add_ps(x, y));
    }
    // IEEE 754-2019 maximum/minimum from vmaxps/vminps plus two fix-ups.
    let m = _mm512_castps_si512(if OP == MAX { _mm512_max_ps(x, y) } else { _mm512_min_ps(x, y) });
    // Lanes that compare equal: identical bits, or +0 and -0. The sign of zero is AND (max) or
    // OR (min) of the signs.
    let eq = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(x, y);
    let m = if OP == MAX { _mm512_mask_and_epi32(m, eq, a, b) } else { _mm512_mask_or_epi32(m, eq, a, b) };
    // Lanes where either is NaN: the sum is a quiet NaN.
    let unordered = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, y);
    _mm512_castps_si512(_mm512_mask_add_ps(_mm512_castsi512_ps(m), unordered, x, y))
}

/// Widens the lanes of `k` at `src` into the accumulator at `acc`.
///
/// # Safety
///
/// The lanes of `k` are readable at `src` and writable at `acc`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
#[inline]
unsafe fn load_block<const DT: u8>(acc: *mut u32, src: *const u8, k: __mmask16) {
    // SAFETY: by the caller's contract; masked accesses touch only the lanes of `k`.
    unsafe { _mm512_mask_storeu_epi32(acc.cast(), k, widen::<DT>(src, k)) }
}

/// Folds the lanes of `k` at `src` into the accumulator at `acc`.
///
/// # Safety
///
/// The lanes of `k` are readable at `src` and readable and writable at `acc`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
#[inline]
unsafe fn fold_block<const OP: u8, const DT: u8>(acc: *mut u32, src: *const u8, k: __mmask16) {
    // SAFETY: by the caller's contract; masked accesses touch only the lanes of `k`.
    unsafe {
        let a = _mm512_maskz_loadu_epi32(k, acc.cast());
        let x = combine::<OP, DT>(a, widen::<DT>(src, k));
        _mm512_mask_storeu_epi32(acc.cast(), k, x)
    }
}

/// Narrows the lanes of `k` of the accumulator at `acc` into `dst`.
///
/// # Safety
///
/// The lanes of `k` are readable at `acc` and writable at `dst`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
#[inline]
unsafe fn store_block<const DT: u8>(acc: *const u32, dst: *mut u8, k: __mmask16) {
    // SAFETY: by the caller's contract; masked accesses touch only the lanes of `k`.
    unsafe { narrow_store::<DT>(dst, k, _mm512_maskz_loadu_epi32(k, acc.cast())) }
}

/// Folds the lanes of `k` at `src` with the accumulator at `acc` and narrows them into `dst`.
///
/// # Safety
///
/// The lanes of `k` are readable at `acc` and `src` and writable at `dst`; `src` and `dst` are
/// equal or disjoint (the block is read whole before it is written).
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
#[inline]
unsafe fn fold_store_block<const OP: u8, const DT: u8>(acc: *const u32, src: *const u8, dst: *mut u8, k: __mmask16) {
    // SAFETY: by the caller's contract; masked accesses touch only the lanes of `k`.
    unsafe {
        let a = _mm512_maskz_loadu_epi32(k, acc.cast());
        let x = combine::<OP, DT>(a, widen::<DT>(src, k));
        narrow_store::<DT>(dst, k, x)
    }
}

/// Runs `$body` with `$i` the lane offset and `$k` the lane mask of each block of `$lanes`
/// lanes: a masked head up to the first vector boundary of the buffer that is written
/// (`$store`, lanes of `$lane_size` bytes; see `head_lanes`), whole vectors, then a masked tail.
///
/// A macro rather than a function taking a closure, so that the body is compiled with the
/// enclosing function's target features.
macro_rules! for_blocks {
    ($lanes:expr, $store:expr, $lane_size:expr, |$i:ident, $k:ident| $body:expr) => {{
        let lanes: usize = $lanes;
        let head = head_lanes($store as usize, $lane_size, LANES).min(lanes);
        let mut $i = 0;
        if head > 0 {
            let $k = first(head);
            $body;
            $i = head;
        }
        let whole_end = head + (lanes - head) / LANES * LANES;
        while $i < whole_end {
            let $k: __mmask16 = !0;
            $body;
            $i += LANES;
        }
        if $i < lanes {
            let $k = first(lanes - $i);
            $body;
        }
    }};
}

/// `acc[i] = widen(src lane i)`.
///
/// # Safety
///
/// The raw kernel contract (`mod.rs`) and AVX-512 F, BW, VL.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn load<const DT: u8>(acc: *mut u32, src: *const u8, lanes: usize) {
    for_blocks!(lanes, acc, 4, |i, k| {
        // SAFETY: the lanes of `k` at offset i are below `lanes`, so in bounds by the contract.
        unsafe { load_block::<DT>(acc.add(i), src.add(i * size(DT)), k) }
    });
}

/// `acc[i] = acc[i] op widen(src lane i)`.
///
/// # Safety
///
/// The raw kernel contract (`mod.rs`) and AVX-512 F, BW, VL.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn fold<const OP: u8, const DT: u8>(acc: *mut u32, src: *const u8, lanes: usize) {
    for_blocks!(lanes, acc, 4, |i, k| {
        // SAFETY: the lanes of `k` at offset i are below `lanes`, so in bounds by the contract.
        unsafe { fold_block::<OP, DT>(acc.add(i), src.add(i * size(DT)), k) }
    });
}

/// `dst lane i = narrow(acc[i])`.
///
/// # Safety
///
/// The raw kernel contract (`mod.rs`) and AVX-512 F, BW, VL.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn store<const DT: u8>(acc: *const u32, dst: *mut u8, lanes: usize) {
    for_blocks!(lanes, dst, size(DT), |i, k| {
        // SAFETY: the lanes of `k` at offset i are below `lanes`, so in bounds by the contract.
        unsafe { store_block::<DT>(acc.add(i), dst.add(i * size(DT)), k) }
    });
}

/// `dst lane i = narrow(acc[i] op widen(src lane i))`; `src` may equal `dst`.
///
/// # Safety
///
/// The raw kernel contract (`mod.rs`) and AVX-512 F, BW, VL.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn fold_store<const OP: u8, const DT: u8>(
    acc: *const u32,
    src: *const u8,
    dst: *mut u8,
    lanes: usize,
) {
    for_blocks!(lanes, dst, size(DT), |i, k| {
        // SAFETY: the lanes of `k` at offset i are below `lanes`, so in bounds by the contract;
        // each block of `src` is read before the same block of `dst` is written.
        unsafe { fold_store_block::<OP, DT>(acc.add(i), src.add(i * size(DT)), dst.add(i * size(DT)), k) }
    });
}
