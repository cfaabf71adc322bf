//! AVX2 (+ F16C) kernels: 8 lanes per step; the scalar reference kernels handle a head that aligns
//! the stores to the vector size, and the tail.
//!
//! - f16 widen/narrow: F16C `vcvtph2ps` / `vcvtps2ph` with imm 0 (round to nearest-even), exact
//!   and subnormal-preserving in both directions.
//! - bf16 narrow: round-to-nearest-even on the bit pattern, NaN quieted separately, then packed to
//!   16 bits.
//! - max/min: `vmaxps`/`vminps` plus fix-ups for equal (±0) and unordered (NaN) lanes, as in the
//!   AVX-512 kernels.
//!
//! Every `unsafe fn` here has the raw kernel contract of `mod.rs`, plus: the CPU supports AVX2 and
//! F16C.

use std::arch::x86_64::*;

use super::code::{size, BF16, F16, I32, MAX, SUM};
use super::head_lanes;
use super::scalar;

/// Lanes per vector.
const LANES: usize = 8;

/// Loads 8 lanes from `src` and widens them to accumulator bits.
///
/// # Safety
///
/// 8 lanes of dtype `DT` are readable at `src`.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn widen<const DT: u8>(src: *const u8) -> __m256i {
    // SAFETY: 16 bytes (8 half lanes) or 32 bytes (8 full lanes) are readable at `src` by the
    // caller's contract; `loadu` needs no alignment.
    unsafe {
        match DT {
            F16 => _mm256_castps_si256(_mm256_cvtph_ps(_mm_loadu_si128(src.cast()))),
            BF16 => _mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(_mm_loadu_si128(src.cast()))),
            _ => _mm256_loadu_si256(src.cast()),
        }
    }
}

/// Narrows 8 lanes of accumulator bits and stores them at `dst`.
///
/// # Safety
///
/// 8 lanes of dtype `DT` are writable at `dst`.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn narrow_store<const DT: u8>(dst: *mut u8, x: __m256i) {
    // SAFETY: 16 or 32 bytes are writable at `dst` by the caller's contract; `storeu` needs no
    // alignment.
    unsafe {
        match DT {
            F16 => _mm_storeu_si128(dst.cast(), _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_castsi256_ps(x))),
            BF16 => _mm_storeu_si128(dst.cast(), f32_to_bf16(x)),
            _ => _mm256_storeu_si256(dst.cast(), x),
        }
    }
}

/// 8 f32 bit patterns to 8 packed bf16 bit patterns, as `lanes::f32_to_bf16`.
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn f32_to_bf16(x: __m256i) -> __m128i {
    let lsb = _mm256_and_si256(_mm256_srli_epi32::<16>(x), _mm256_set1_epi32(1));
    let rounded = _mm256_srli_epi32::<16>(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb));
    // |x| fits in 31 bits, so the signed compare is an unsigned one.
    let abs = _mm256_and_si256(x, _mm256_set1_epi32(0x7fff_ffff));
    let nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f80_0000));
    let quiet = _mm256_or_si256(_mm256_srli_epi32::<16>(x), _mm256_set1_epi32(0x40));
    let r = _mm256_blendv_epi8(rounded, quiet, nan);
    // Every lane is in 0..=0xffff, so the saturating pack is a plain one; packing the two
    // 128-bit halves together keeps the lanes in order.
    _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256::<1>(r))
}

/// `a op b` on accumulator bits of dtype `DT`.
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn combine<const OP: u8, const DT: u8>(a: __m256i, b: __m256i) -> __m256i {
    if DT == I32 {
        return match OP {
            SUM => _mm256_add_epi32(a, b),
            MAX => _mm256_max_epi32(a, b),
            _ => _mm256_min_epi32(a, b),
        };
    }
    let (x, y) = (_mm256_castsi256_ps(a), _mm256_castsi256_ps(b));
    if OP == SUM {
        return _mm256_castps_si256(_mm256_add_ps(x, y));
    }
    // vmaxps/vminps return the second operand when either is NaN or both are zero.
    let (m, zero_sign) = if OP == MAX {
        // Equal lanes: identical bits, or +0 and -0, whose maximum is -0 only when both are.
        (_mm256_max_ps(x, y), _mm256_and_ps(x, y))
    } else {
        (_mm256_min_ps(x, y), _mm256_or_ps(x, y))
    };
    let m = _mm256_blendv_ps(m, zero_sign, _mm256_cmp_ps::<_CMP_EQ_OQ>(x, y));
    // Lanes where either is NaN: the sum is a quiet NaN.
    let m = _mm256_blendv_ps(m, _mm256_add_ps(x, y), _mm256_cmp_ps::<_CMP_UNORD_Q>(x, y));
    _mm256_castps_si256(m)
}

/// Runs `$head_tail` with `$at` the first lane and `$n` the lane count of the head (up to the
/// first vector boundary of `$store`, the buffer written, with lanes of `$lane_size` bytes; see
/// `head_lanes`) and of the tail, and `$body` with `$i` the first lane of each whole vector in
/// between.
///
/// A macro rather than a function taking closures, so that the bodies are compiled with the
/// enclosing function's target features.
macro_rules! for_blocks {
    (
        $lanes:expr, $store:expr, $lane_size:expr,
        |$i:ident| $body:expr,
        |$at:ident, $n:ident| $head_tail:expr $(,)?
    ) => {{
        let lanes: usize = $lanes;
        let head = head_lanes($store as usize, $lane_size, LANES).min(lanes);
        let whole_end = head + (lanes - head) / LANES * LANES;
        {
            let ($at, $n) = (0, head);
            $head_tail;
        }
        let mut $i = head;
        while $i < whole_end {
            $body;
            $i += LANES;
        }
        {
            let ($at, $n) = (whole_end, lanes - whole_end);
            $head_tail;
        }
    }};
}

/// `acc[i] = widen(src lane i)`.
///
/// # Safety
///
/// The raw kernel contract (`mod.rs`) and AVX2 + F16C.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn load<const DT: u8>(acc: *mut u32, src: *const u8, lanes: usize) {
    for_blocks!(
        lanes,
        acc,
        4,
        |i| {
            // SAFETY: lanes i..i+8 are below `lanes`, so in bounds by the contract.
            unsafe { _mm256_storeu_si256(acc.add(i).cast(), widen::<DT>(src.add(i * size(DT)))) }
        },
        |at, n| {
            // SAFETY: lanes at..at+n are below `lanes`, so in bounds by the contract.
            unsafe { scalar::load::<DT>(acc.add(at), src.add(at * size(DT)), n) }
        },
    );
}

/// `acc[i] = acc[i] op widen(src lane i)`.
///
/// # Safety
///
/// The raw kernel contract (`mod.rs`) and AVX2 + F16C.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn fold<const OP: u8, const DT: u8>(acc: *mut u32, src: *const u8, lanes: usize) {
    for_blocks!(
        lanes,
        acc,
        4,
        |i| {
            // SAFETY: lanes i..i+8 are below `lanes`, so in bounds by the contract.
            unsafe {
                let a = _mm256_loadu_si256(acc.add(i).cast());
                let x = combine::<OP, DT>(a, widen::<DT>(src.add(i * size(DT))));
                _mm256_storeu_si256(acc.add(i).cast(), x);
            }
        },
        |at, n| {
            // SAFETY: lanes at..at+n are below `lanes`, so in bounds by the contract.
            unsafe { scalar::fold::<OP, DT>(acc.add(at), src.add(at * size(DT)), n) }
        },
    );
}

/// `dst lane i = narrow(acc[i])`.
///
/// # Safety
///
/// The raw kernel contract (`mod.rs`) and AVX2 + F16C.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn store<const DT: u8>(acc: *const u32, dst: *mut u8, lanes: usize) {
    for_blocks!(
        lanes,
        dst,
        size(DT),
        |i| {
            // SAFETY: lanes i..i+8 are below `lanes`, so in bounds by the contract.
            unsafe { narrow_store::<DT>(dst.add(i * size(DT)), _mm256_loadu_si256(acc.add(i).cast())) }
        },
        |at, n| {
            // SAFETY: lanes at..at+n are below `lanes`, so in bounds by the contract.
            unsafe { scalar::store::<DT>(acc.add(at), dst.add(at * size(DT)), n) }
        },
    );
}

/// `dst lane i = narrow(acc[i] op widen(src lane i))`; `src` may equal `dst`.
///
/// # Safety
///
/// The raw kernel contract (`mod.rs`) and AVX2 + F16C.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn fold_store<const OP: u8, const DT: u8>(
    acc: *const u32,
    src: *const u8,
    dst: *mut u8,
    lanes: usize,
) {
    for_blocks!(
        lanes,
        dst,
        size(DT),
        |i| {
            // SAFETY: lanes i..i+8 are below `lanes`, so in bounds by the contract; the block of
            // `src` is read before the same block of `dst` is written.
            unsafe {
                let a = _mm256_loadu_si256(acc.add(i).cast());
                let x = combine::<OP, DT>(a, widen::<DT>(src.add(i * size(DT))));
                narrow_store::<DT>(dst.add(i * size(DT)), x);
            }
        },
        |at, n| {
            // SAFETY: lanes at..at+n are below `lanes`, so in bounds by the contract; the
            // scalar kernel reads each lane before writing it.
            unsafe { scalar::fold_store::<OP, DT>(acc.add(at), src.add(at * size(DT)), dst.add(at * size(DT)), n) }
        },
    );
}
