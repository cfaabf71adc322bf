//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).
//!
//! Sums here are 16-bit ones'-complement sums of big-endian words, *not* complemented: a header
//! whose checksum field is right sums to 0xFFFF. The checksum to store is the complement of the
//! sum of everything else (with the checksum field zero).
//!
//! - [`sum`] is the folded ones'-complement sum of a slice. Inputs shorter than [`SHORT_LEN`]
//!   bytes (IPv4 headers, pseudo-header addresses, small UDP datagrams) take a straight-line path
//!   inlined at the call site: one branch per bit of the length, 8-byte loads, no loop. Longer
//!   inputs (UDP payloads) go to the best [`SumKernel`] for this CPU (AVX-512, AVX2 or scalar),
//!   chosen once and cached.
//! - [`combine`] adds two sums, so a pseudo-header sum ([`pseudo_header_v4`],
//!   [`pseudo_header_v6`]) joins the sum of the datagram.
//! - [`update16`] and [`update32`] are RFC 1624 equation 3 for rewriting one field of a header
//!   whose checksum is already right; they give exactly what a full recompute would give (never
//!   0xFFFF for an IPv4 header). [`udp_update16`] keeps the UDP rules: 0 ("no checksum", IPv4
//!   only) stays 0, and a result of 0 is written 0xFFFF (RFC 768).
//!
//! # How the sum is computed
//!
//! Words are added in native byte order into 64-bit accumulators: the ones'-complement sum
//! commutes with byte swapping (RFC 1071 section 2(B)) and defers carries (2(C)), so one fold and
//! one swap at the end give the big-endian sum. Every load starts at an even offset from the start
//! of the slice, so each native 16-bit lane is one of the slice's words; an odd trailing byte is
//! added as a word whose other byte is 0. The vector kernels add the two 16-bit halves of each
//! 32-bit lane into separate 32-bit lanes (no carries to propagate) and widen them to 64 bits
//! often enough that no lane can overflow.
#![deny(unsafe_op_in_unsafe_fn)]

use core::sync::atomic::{AtomicU8, Ordering};

/// Inputs shorter than this (bytes) are summed inline by the straight-line short path; longer
/// ones by the cached [`SumKernel`].
pub const SHORT_LEN: usize = 64;

/// Ones'-complement sum of `data` as big-endian 16-bit words, folded to 16 bits, not complemented.
///
/// An odd trailing byte counts as the high byte of a word whose low byte is 0 (RFC 1071 section
/// 4.1). Sums of several slices may be joined with [`combine`] as long as every slice but the last
/// has an even length. The sum of an empty slice, or of zeros only, is 0; any other sum that is
/// zero modulo 0xFFFF comes out as 0xFFFF.
///
/// Below [`SHORT_LEN`] bytes this is a few straight-line instructions; from [`SHORT_LEN`] on it
/// calls the kernel of [`SumKernel::active`] (one relaxed atomic load and a branch to choose it).
#[inline]
pub fn sum(data: &[u8]) -> u16 {
    let acc = if data.len() < SHORT_LEN { sum_short(data) } else { sum_long(data) };
    finish(acc)
}

/// [`sum`] of an array whose length `N` (bytes) is known at compile time: below [`SHORT_LEN`]
/// the short path reduces to `N / 8` 8-byte loads and the tail's few loads, with no branch
/// (e.g. a 20-byte IPv4 header without options: two 8-byte and one 4-byte load).
#[inline(always)]
pub fn sum_fixed<const N: usize>(data: &[u8; N]) -> u16 {
    let acc = if N < SHORT_LEN { sum_short(data) } else { sum_long(data) };
    finish(acc)
}

/// The big-endian 16-bit sum from a native-order end-around-carry accumulator.
#[inline(always)]
fn finish(acc: u64) -> u16 {
    u16::from_be(fold64(acc))
}

/// `a + b` with the carry out of bit 63 added back in (ones'-complement addition on 64 bits).
#[inline(always)]
fn add_carry(a: u64, b: u64) -> u64 {
    let (s, carry) = a.overflowing_add(b);
    s + carry as u64
}

/// Native-order unaligned load of a `T` (an integer) at `p`.
///
/// # Safety
/// `p..p + size_of::<T>()` must be readable.
#[inline(always)]
unsafe fn load<T: Copy>(p: *const u8) -> T {
    // SAFETY: the caller guarantees `size_of::<T>()` readable bytes at `p`; unaligned read.
    unsafe { core::ptr::read_unaligned(p as *const T) }
}

/// Native-order end-around-carry sum of `data`, which must be shorter than 64 bytes (the
/// caller's length check; longer inputs would be summed only in part). No loop: one branch per
/// bit of the length, from 32 down to 1, each consuming that many bytes.
#[inline(always)]
fn sum_short(data: &[u8]) -> u64 {
    debug_assert!(data.len() < 64);
    let n = data.len();
    let p = data.as_ptr();
    let mut acc = 0u64;
    // Before the step for bit `b`, `i` is `n` with bit `b` and every lower bit cleared (the bits
    // above `b` already consumed, since `n < 64`); so when bit `b` of `n` is set, `i + b <= n`
    // and every load of that step is inside `data`.
    let mut i = 0usize;
    if n & 32 != 0 {
        // SAFETY: i == 0 and n >= 32 (see above).
        let (a, b, c, d): (u64, u64, u64, u64) = unsafe { (load(p), load(p.add(8)), load(p.add(16)), load(p.add(24))) };
        acc = add_carry(add_carry(a, b), add_carry(c, d));
        i = 32;
    }
    if n & 16 != 0 {
        // SAFETY: i + 16 <= n (see above).
        let (a, b): (u64, u64) = unsafe { (load(p.add(i)), load(p.add(i + 8))) };
        acc = add_carry(acc, add_carry(a, b));
        i += 16;
    }
    if n & 8 != 0 {
        // SAFETY: i + 8 <= n (see above).
        acc = add_carry(acc, unsafe { load::<u64>(p.add(i)) });
        i += 8;
    }
    // At most 7 bytes are left: their sum fits in 32 bits, so plain adds do.
    let mut rest = 0u64;
    if n & 4 != 0 {
        // SAFETY: i + 4 <= n (see above).
        rest += unsafe { load::<u32>(p.add(i)) } as u64;
        i += 4;
    }
    if n & 2 != 0 {
        // SAFETY: i + 2 <= n (see above).
        rest += unsafe { load::<u16>(p.add(i)) } as u64;
        i += 2;
    }
    if n & 1 != 0 {
        // The last byte is the high byte of a big-endian word whose low byte is 0; `i` is even.
        // SAFETY: i + 1 <= n (see above).
        rest += u16::from_ne_bytes([unsafe { *p.add(i) }, 0]) as u64;
    }
    add_carry(acc, rest)
}

/// [`sum`] for inputs of [`SHORT_LEN`] bytes or more: the cached kernel. Never inlined, so that
/// [`sum`] stays small enough to inline the short path at every call site.
#[inline(never)]
fn sum_long(data: &[u8]) -> u64 {
    match ACTIVE.load(Ordering::Relaxed) {
        #[cfg(target_arch = "x86_64")]
        ISA_AVX512_VNNI => {
            // SAFETY: ACTIVE holds ISA_AVX512_VNNI only after `SumKernel::detect` found AVX-512 F,
            // BW and VNNI.
            unsafe { x86::sum_avx512_vnni(data) }
        }
        #[cfg(target_arch = "x86_64")]
        ISA_AVX512 => {
            // SAFETY: ACTIVE holds ISA_AVX512 only after `SumKernel::detect` found AVX-512 F and BW.
            unsafe { x86::sum_avx512(data) }
        }
        #[cfg(target_arch = "x86_64")]
        ISA_AVX2 => {
            // SAFETY: ACTIVE holds ISA_AVX2 only after `SumKernel::detect` found AVX2.
            unsafe { x86::sum_avx2(data) }
        }
        ISA_SCALAR => sum_scalar(data),
        _ => detect_and_sum(data),
    }
}

/// First long sum of the process: detects the CPU's kernel, caches it, sums with it.
#[cold]
#[inline(never)]
fn detect_and_sum(data: &[u8]) -> u64 {
    let k = SumKernel::detect();
    ACTIVE.store(k.isa, Ordering::Relaxed);
    k.sum_native(data)
}

/// The kernel [`sum`] uses for long inputs: 0 until the first one, then an `ISA_*` code that
/// [`SumKernel::detect`] chose (so never a kernel this CPU lacks).
static ACTIVE: AtomicU8 = AtomicU8::new(0);
const ISA_SCALAR: u8 = 1;
#[cfg(target_arch = "x86_64")]
const ISA_AVX2: u8 = 2;
#[cfg(target_arch = "x86_64")]
const ISA_AVX512: u8 = 3;
#[cfg(target_arch = "x86_64")]
const ISA_AVX512_VNNI: u8 = 4;

/// A long-input kernel of [`sum`], for a CPU that runs it (the type's invariant: values come only
/// from [`SumKernel::detect`], [`SumKernel::available`] and [`SumKernel::scalar`]).
///
/// | kernel | CPU features | bytes per loop step | tail |
/// | --- | --- | --- | --- |
/// | `avx512vnni` | AVX-512 F, BW, VNNI | 128 | one masked 64-byte load |
/// | `avx512` | AVX-512 F, BW | 128 | one masked 64-byte load |
/// | `avx2` | AVX2 | 64 | the short path |
/// | `scalar` | none | 16 | the short path |
///
/// All give bit-identical results (the RFC 1071 sum is exact).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SumKernel {
    isa: u8,
}

impl SumKernel {
    /// The portable kernel: four 64-bit accumulators over 16-byte steps.
    pub const fn scalar() -> SumKernel {
        SumKernel { isa: ISA_SCALAR }
    }

    /// The best kernel this CPU runs: AVX-512 with VNNI, else AVX-512 (F, BW), else AVX2, else
    /// scalar.
    pub fn detect() -> SumKernel {
        #[cfg(target_arch = "x86_64")]
        {
            if x86::has_avx512() && std::is_x86_feature_detected!("avx512vnni") {
                return SumKernel { isa: ISA_AVX512_VNNI };
            }
            if x86::has_avx512() {
                return SumKernel { isa: ISA_AVX512 };
            }
            if std::is_x86_feature_detected!("avx2") {
                return SumKernel { isa: ISA_AVX2 };
            }
        }
        SumKernel::scalar()
    }

    /// Every kernel this CPU runs, scalar first, best last.
    pub fn available() -> Vec<SumKernel> {
        #[allow(unused_mut)]
        let mut v = vec![SumKernel::scalar()];
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx2") {
                v.push(SumKernel { isa: ISA_AVX2 });
            }
            if x86::has_avx512() {
                v.push(SumKernel { isa: ISA_AVX512 });
                if std::is_x86_feature_detected!("avx512vnni") {
                    v.push(SumKernel { isa: ISA_AVX512_VNNI });
                }
            }
        }
        v
    }

    /// The kernel [`sum`] uses for inputs of [`SHORT_LEN`] bytes or more (detected on first use).
    pub fn active() -> SumKernel {
        match ACTIVE.load(Ordering::Relaxed) {
            0 => SumKernel::detect(),
            isa => SumKernel { isa },
        }
    }

    /// The kernel's name: `"scalar"`, `"avx2"`, `"avx512"` or `"avx512vnni"`.
    pub fn name(self) -> &'static str {
        match self.isa {
            #[cfg(target_arch = "x86_64")]
            ISA_AVX2 => "avx2",
            #[cfg(target_arch = "x86_64")]
            ISA_AVX512 => "avx512",
            #[cfg(target_arch = "x86_64")]
            ISA_AVX512_VNNI => "avx512vnni",
            _ => "scalar",
        }
    }

    /// [`sum`] of `data` computed by this kernel alone, at any length (no short path).
    pub fn sum(self, data: &[u8]) -> u16 {
        finish(self.sum_native(data))
    }

    /// The native-order end-around-carry accumulator of `data`.
    #[inline]
    fn sum_native(self, data: &[u8]) -> u64 {
        match self.isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a SumKernel with ISA_AVX512 exists only when AVX-512 F and BW were detected.
            ISA_AVX512 => unsafe { x86::sum_avx512(data) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a SumKernel with ISA_AVX512_VNNI exists only when AVX-512 F, BW and VNNI
            // were detected.
            ISA_AVX512_VNNI => unsafe { x86::sum_avx512_vnni(data) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a SumKernel with ISA_AVX2 exists only when AVX2 was detected.
            ISA_AVX2 => unsafe { x86::sum_avx2(data) },
            _ => sum_scalar(data),
        }
    }
}

/// The portable kernel: 32-bit words into four 64-bit accumulators per 16-byte step (plain adds,
/// no carry chain, so the compiler may vectorise it; a slice has far fewer than 2^32 words, so
/// they cannot overflow), then the short path for the last 0..15 bytes.
fn sum_scalar(data: &[u8]) -> u64 {
    let mut acc = [0u64; 4];
    let mut chunks = data.chunks_exact(16);
    for c in &mut chunks {
        for (i, a) in acc.iter_mut().enumerate() {
            *a += u32::from_ne_bytes([c[4 * i], c[4 * i + 1], c[4 * i + 2], c[4 * i + 3]]) as u64;
        }
    }
    let total = acc.iter().fold(0u64, |t, a| add_carry(t, *a));
    // The remainder starts at a multiple of 16: an even offset.
    add_carry(total, sum_short(chunks.remainder()))
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! The x86-64 kernels. Each is an `unsafe fn` whose only extra contract is that the CPU has
    //! the features in its `target_feature` attribute.
    use super::{add_carry, sum_short};
    use core::arch::x86_64::*;

    /// Most 64-byte (AVX2) or 128-byte (AVX-512) steps between two widenings of the 32-bit
    /// lanes: each step adds at most 0xFFFF to a lane of each of the four accumulators, and
    /// the widening first adds the four in 32 bits, so `4 * (2^13 + 1) * 0xFFFF < 2^32` (the
    /// `+ 1`: the AVX-512 kernel's tail step) cannot overflow.
    const STEPS_PER_BLOCK: usize = 1 << 13;

    /// The AVX2 kernel: 64 bytes per step into four vectors of 32-bit lanes.
    ///
    /// # Safety
    /// The CPU supports AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn sum_avx2(data: &[u8]) -> u64 {
        let low = _mm256_set1_epi32(0xffff);
        let mut total = 0u64;
        let mut p = data.as_ptr();
        let mut steps = data.len() / 64;
        while steps > 0 {
            let n = steps.min(STEPS_PER_BLOCK);
            steps -= n;
            let (mut a0, mut a1, mut a2, mut a3) =
                (_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256());
            for _ in 0..n {
                // SAFETY: `p` advances 64 bytes per step over `data.len() / 64` steps in all, so
                // `p..p + 64` is inside `data`; unaligned loads.
                let (v, w) = unsafe {
                    (_mm256_loadu_si256(p as *const __m256i), _mm256_loadu_si256(p.add(32) as *const __m256i))
                };
                a0 = _mm256_add_epi32(a0, _mm256_and_si256(v, low));
                a1 = _mm256_add_epi32(a1, _mm256_srli_epi32::<16>(v));
                a2 = _mm256_add_epi32(a2, _mm256_and_si256(w, low));
                a3 = _mm256_add_epi32(a3, _mm256_srli_epi32::<16>(w));
                // SAFETY: stays within `data` or one past its end (see above).
                p = unsafe { p.add(64) };
            }
            total = add_carry(total, hsum256(a0, a1, a2, a3));
        }
        // The rest (0..63 bytes) starts at a multiple of 64: an even offset.
        let done = data.len() / 64 * 64;
        add_carry(total, sum_short(&data[done..]))
    }

    /// Sum of the 32-bit lanes of four vectors, in 64 bits: the four added lane by lane in 32
    /// bits (no overflow: see [`STEPS_PER_BLOCK`]), then widened once.
    #[target_feature(enable = "avx2")]
    fn hsum256(a: __m256i, b: __m256i, c: __m256i, d: __m256i) -> u64 {
        let z = _mm256_setzero_si256();
        let x = _mm256_add_epi32(_mm256_add_epi32(a, b), _mm256_add_epi32(c, d));
        let s = _mm256_add_epi64(_mm256_unpacklo_epi32(x, z), _mm256_unpackhi_epi32(x, z));
        let s = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
        (_mm_cvtsi128_si64(s) as u64).wrapping_add(_mm_extract_epi64::<1>(s) as u64)
    }

    /// The AVX-512 kernel: 128 bytes per step into four vectors of 32-bit lanes, then the last
    /// 0..127 bytes as at most two 64-byte loads, the second masked (zeros past the end).
    ///
    /// # Safety
    /// The CPU supports AVX-512 F and BW.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn sum_avx512(data: &[u8]) -> u64 {
        let low = _mm512_set1_epi32(0xffff);
        let mut total = 0u64;
        let mut p = data.as_ptr();
        let mut steps = data.len() / 128;
        let (mut a0, mut a1, mut a2, mut a3) =
            (_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512());
        while steps > 0 {
            let n = steps.min(STEPS_PER_BLOCK);
            steps -= n;
            for _ in 0..n {
                // SAFETY: `p` advances 128 bytes per step over `data.len() / 128` steps in all, so
                // `p..p + 128` is inside `data`; unaligned loads.
                let (v, w) = unsafe {
                    (_mm512_loadu_si512(p as *const __m512i), _mm512_loadu_si512(p.add(64) as *const __m512i))
                };
                a0 = _mm512_add_epi32(a0, _mm512_and_si512(v, low));
                a1 = _mm512_add_epi32(a1, _mm512_srli_epi32::<16>(v));
                a2 = _mm512_add_epi32(a2, _mm512_and_si512(w, low));
                a3 = _mm512_add_epi32(a3, _mm512_srli_epi32::<16>(w));
                // SAFETY: stays within `data` or one past its end (see above).
                p = unsafe { p.add(128) };
            }
            if steps > 0 {
                // Another block follows: widen now. The last block's lanes take the tail first
                // and are widened once, below.
                total = add_carry(total, hsum512(a0, a1, a2, a3));
                a0 = _mm512_setzero_si512();
                a1 = _mm512_setzero_si512();
                a2 = _mm512_setzero_si512();
                a3 = _mm512_setzero_si512();
            }
        }
        // The last 0..127 bytes, from an even offset: a full vector if 64 or more are left, then
        // a masked load of the 0..63 after it (masked-off bytes read as 0 and are not accessed).
        let mut rest = data.len() % 128;
        if rest >= 64 {
            // SAFETY: `p..p + 64` is inside `data` (rest >= 64 bytes are left).
            let v = unsafe { _mm512_loadu_si512(p as *const __m512i) };
            a0 = _mm512_add_epi32(a0, _mm512_and_si512(v, low));
            a1 = _mm512_add_epi32(a1, _mm512_srli_epi32::<16>(v));
            // SAFETY: as above.
            p = unsafe { p.add(64) };
            rest -= 64;
        }
        let mask: __mmask64 = (1u64 << rest) - 1;
        // SAFETY: only the `rest` bytes at `p`, inside `data`, are read (fault suppression covers
        // the masked-off ones).
        let v = unsafe { _mm512_maskz_loadu_epi8(mask, p as *const i8) };
        a2 = _mm512_add_epi32(a2, _mm512_and_si512(v, low));
        a3 = _mm512_add_epi32(a3, _mm512_srli_epi32::<16>(v));
        add_carry(total, hsum512(a0, a1, a2, a3))
    }

    /// True when the CPU has AVX-512 F and BW.
    pub(super) fn has_avx512() -> bool {
        std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512bw")
    }

    /// The AVX-512 VNNI kernel: as [`sum_avx512`], with each 64-byte vector's sixteen pairs of
    /// 16-bit words summed into 32-bit lanes by one `vpdpwssd` (multiply by 1 and add). The
    /// instruction takes signed words, so each word is biased by -0x8000 first (flipping its
    /// top bit) and the bias, 0x8000 for each of a vector's 32 words, is added back at the
    /// end: 2^20 per vector loaded, the masked tail's zeros included. A lane moves by at most
    /// 2^16 per vector, far from its signed limit within a block.
    ///
    /// # Safety
    /// The CPU supports AVX-512 F, BW and VNNI.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) unsafe fn sum_avx512_vnni(data: &[u8]) -> u64 {
        let flip = _mm512_set1_epi16(i16::MIN);
        let ones = _mm512_set1_epi16(1);
        let mut total = 0i64;
        let mut vectors = 0u64;
        let mut p = data.as_ptr();
        let mut steps = data.len() / 128;
        let (mut a0, mut a1) = (_mm512_setzero_si512(), _mm512_setzero_si512());
        while steps > 0 {
            let n = steps.min(STEPS_PER_BLOCK);
            steps -= n;
            vectors += 2 * n as u64;
            for _ in 0..n {
                // SAFETY: `p` advances 128 bytes per step over `data.len() / 128` steps in all, so
                // `p..p + 128` is inside `data`; unaligned loads.
                let (v, w) = unsafe {
                    (_mm512_loadu_si512(p as *const __m512i), _mm512_loadu_si512(p.add(64) as *const __m512i))
                };
                a0 = _mm512_dpwssd_epi32(a0, _mm512_xor_si512(v, flip), ones);
                a1 = _mm512_dpwssd_epi32(a1, _mm512_xor_si512(w, flip), ones);
                // SAFETY: stays within `data` or one past its end (see above).
                p = unsafe { p.add(128) };
            }
            if steps > 0 {
                total += hsum512_signed(a0, a1);
                a0 = _mm512_setzero_si512();
                a1 = _mm512_setzero_si512();
            }
        }
        // The last 0..127 bytes, as in `sum_avx512`.
        let mut rest = data.len() % 128;
        if rest >= 64 {
            // SAFETY: `p..p + 64` is inside `data` (rest >= 64 bytes are left).
            let v = unsafe { _mm512_loadu_si512(p as *const __m512i) };
            a0 = _mm512_dpwssd_epi32(a0, _mm512_xor_si512(v, flip), ones);
            vectors += 1;
            // SAFETY: as above.
            p = unsafe { p.add(64) };
            rest -= 64;
        }
        let mask: __mmask64 = (1u64 << rest) - 1;
        // SAFETY: only the `rest` bytes at `p`, inside `data`, are read (fault suppression covers
        // the masked-off ones).
        let v = unsafe { _mm512_maskz_loadu_epi8(mask, p as *const i8) };
        a1 = _mm512_dpwssd_epi32(a1, _mm512_xor_si512(v, flip), ones);
        vectors += 1;
        // The exact sum of the words: non-negative, far below 2^63.
        (total + hsum512_signed(a0, a1) + (vectors << 20) as i64) as u64
    }

    /// Sum of the signed 32-bit lanes of two vectors, in 64 bits.
    #[target_feature(enable = "avx512f,avx512bw")]
    fn hsum512_signed(a: __m512i, b: __m512i) -> i64 {
        let wide = |x: __m512i| {
            _mm512_add_epi64(
                _mm512_cvtepi32_epi64(_mm512_castsi512_si256(x)),
                _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64::<1>(x)),
            )
        };
        _mm512_reduce_add_epi64(_mm512_add_epi64(wide(a), wide(b)))
    }

    /// Sum of the 32-bit lanes of four vectors, in 64 bits: the four added lane by lane in 32
    /// bits (no overflow: see [`STEPS_PER_BLOCK`]), then widened once.
    #[target_feature(enable = "avx512f,avx512bw")]
    fn hsum512(a: __m512i, b: __m512i, c: __m512i, d: __m512i) -> u64 {
        let x = _mm512_add_epi32(_mm512_add_epi32(a, b), _mm512_add_epi32(c, d));
        let s = _mm512_add_epi64(
            _mm512_cvtepu32_epi64(_mm512_castsi512_si256(x)),
            _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64::<1>(x)),
        );
        _mm512_reduce_add_epi64(s) as u64
    }
}

/// Folds a 64-bit end-around-carry accumulator to 16 bits.
///
/// Adding a value to itself rotated by half its width leaves the end-around-carry sum of its two
/// halves in the upper half (the carry out of the lower half lands in it): 64 to 32 bits, then 32
/// to 16.
#[inline(always)]
fn fold64(acc: u64) -> u16 {
    let s = (acc.wrapping_add(acc.rotate_left(32)) >> 32) as u32;
    (s.wrapping_add(s.rotate_left(16)) >> 16) as u16
}

/// Ones'-complement addition of two 16-bit sums.
#[inline(always)]
pub fn combine(a: u16, b: u16) -> u16 {
    let s = a as u32 + b as u32;
    ((s & 0xffff) + (s >> 16)) as u16
}

/// The checksum to store for `data` (with its checksum field zero): `!sum(data)`.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    !sum(data)
}

/// Sum of the IPv4 pseudo-header (RFC 768; RFC 9293 section 3.1): source and destination address,
/// zero, protocol, and the upper-layer length in bytes (for UDP, its length field).
#[inline]
pub fn pseudo_header_v4(src: [u8; 4], dst: [u8; 4], protocol: u8, length: u16) -> u16 {
    let mut s = 0u32;
    s += u16::from_be_bytes([src[0], src[1]]) as u32 + u16::from_be_bytes([src[2], src[3]]) as u32;
    s += u16::from_be_bytes([dst[0], dst[1]]) as u32 + u16::from_be_bytes([dst[2], dst[3]]) as u32;
    s += protocol as u32 + length as u32;
    fold64(s as u64)
}

/// Sum of the IPv6 pseudo-header (RFC 8200 section 8.1): source and destination address, the
/// upper-layer packet length in bytes (32 bits), three zero bytes and the next header value of the
/// upper layer (17 for UDP, whatever extension headers precede it).
#[inline]
pub fn pseudo_header_v6(src: &[u8; 16], dst: &[u8; 16], next_header: u8, length: u32) -> u16 {
    let mut s = sum(src) as u64 + sum(dst) as u64;
    s += (length >> 16) as u64 + (length & 0xffff) as u64 + next_header as u64;
    fold64(s)
}

/// RFC 1624 equation 3: the checksum after one 16-bit word of the covered data changes from `old`
/// to `new`, given the checksum `hc` before: `HC' = ~(~HC + ~m + m')`.
///
/// For an IPv4 header checksum this equals a full recompute (equation 2's 0xFFFF never appears:
/// RFC 1624 section 3). Example: TOS 0x02 -> 0x03 under checksum 0x0001 (word 0x4502 -> 0x4503)
/// gives 0x0000.
#[inline]
pub fn update16(hc: u16, old: u16, new: u16) -> u16 {
    !combine(combine(!hc, !old), new)
}

/// [`update16`] for a 32-bit field (two adjacent 16-bit words, e.g. an IPv4 address).
#[inline]
pub fn update32(hc: u16, old: u32, new: u32) -> u16 {
    let hc = update16(hc, (old >> 16) as u16, (new >> 16) as u16);
    update16(hc, old as u16, new as u16)
}

/// [`update16`] for a UDP checksum field: a stored 0 (no checksum, IPv4 only; RFC 768) stays 0,
/// and an updated value of 0 is written 0xFFFF, its other ones'-complement form (RFC 768).
#[inline]
pub fn udp_update16(ck: u16, old: u16, new: u16) -> u16 {
    if ck == 0 {
        return 0;
    }
    match update16(ck, old, new) {
        0 => 0xffff,
        v => v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The RFC 1071 reference: one big-endian word at a time into a u32.
    fn naive(data: &[u8]) -> u16 {
        let mut s: u32 = 0;
        for c in data.chunks(2) {
            let w = if c.len() == 2 { u16::from_be_bytes([c[0], c[1]]) } else { (c[0] as u16) << 8 };
            s += w as u32;
            s = (s & 0xffff) + (s >> 16);
        }
        s as u16
    }

    // The IPv4 header of case c02 (IHL 6, one 4-byte option): its stored checksum is 0x1190.
    static C02_IPV4: [u8; 24] = [
        0x46, 0x02, 0x00, 0x24, 0x12, 0x34, 0x40, 0x00, 0x40, 0x11, 0x11, 0x90, 0x0a, 0x00, 0x00, 0x01, 0x0a, 0x00,
        0x00, 0x02, 0x01, 0x01, 0x01, 0x00,
    ];

    // The IPv4 header of case c05: TOS 0x02 (ECT(0)), stored checksum 0x0001.
    static C05_IPV4: [u8; 20] = [
        0x45, 0x02, 0x00, 0x20, 0x26, 0xc8, 0x40, 0x00, 0x40, 0x11, 0x00, 0x01, 0x0a, 0x00, 0x00, 0x01, 0x0a, 0x00,
        0x00, 0x02,
    ];

    #[test]
    fn rfc1071_example() {
        // RFC 1071 section 3: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2.
        assert_eq!(sum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]), 0xddf2);
        assert_eq!(sum(&[]), 0);
        assert_eq!(sum(&[0xab]), 0xab00);
    }

    #[test]
    fn captured_headers_sum_to_ffff() {
        assert_eq!(sum(&C02_IPV4), 0xffff);
        assert_eq!(sum(&C05_IPV4), 0xffff);
        assert_eq!(sum_fixed(&C02_IPV4), 0xffff);
        assert_eq!(sum_fixed(&C05_IPV4), 0xffff);
        assert_eq!(sum_fixed(&[0xffu8; 100]), 0xffff);
        assert_eq!(sum_fixed(&[0u8; 0]), 0);
        let mut h = C02_IPV4;
        h[10] = 0;
        h[11] = 0;
        assert_eq!(checksum(&h), 0x1190);
    }

    #[test]
    fn c05_ce_mark_gives_0000_not_ffff() {
        // TOS 0x02 -> 0x03: the first word 0x4502 -> 0x4503.
        let hc = update16(0x0001, 0x4502, 0x4503);
        assert_eq!(hc, 0x0000);
        // And it equals a full recompute.
        let mut h = C05_IPV4;
        h[1] = 0x03;
        h[10] = 0;
        h[11] = 0;
        assert_eq!(checksum(&h), 0x0000);
        // RFC 1141's form HC' = HC + m + ~m' (RFC 1624 equation 2) would have given 0xFFFF.
        let naive_eqn2 = combine(combine(0x0001, 0x4502), !0x4503u16);
        assert_eq!(naive_eqn2, 0xffff);
    }

    #[test]
    fn c04_udp_checksum_rules() {
        // Case c04 frame 1: the UDP datagram whose computed checksum is 0, stored 0xFFFF.
        let udp = [0xc0, 0x00, 0x23, 0x28, 0x00, 0x0c, 0xff, 0xff, 0x08, 0xab, 0x00, 0x00];
        let ph = pseudo_header_v4([10, 0, 0, 1], [10, 0, 0, 2], 17, 12);
        assert_eq!(combine(ph, sum(&udp)), 0xffff);
        let mut z = udp;
        z[6] = 0;
        z[7] = 0;
        assert_eq!(!combine(ph, sum(&z)), 0x0000);
        // No checksum stays no checksum.
        assert_eq!(udp_update16(0, 0x1234, 0x5678), 0);
        // A result of 0 is written 0xFFFF: under checksum 0x0001 a word going 0x0000 -> 0x0001
        // makes the data sum 0xFFFF, whose checksum 0x0000 is stored as 0xFFFF.
        assert_eq!(update16(0x0001, 0x0000, 0x0001), 0x0000);
        assert_eq!(udp_update16(0x0001, 0x0000, 0x0001), 0xffff);
    }

    #[test]
    fn pseudo_v6_matches_bytes() {
        let src = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let dst = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&src);
        bytes.extend_from_slice(&dst);
        bytes.extend_from_slice(&0x0001_000cu32.to_be_bytes());
        bytes.extend_from_slice(&[0, 0, 0, 17]);
        assert_eq!(pseudo_header_v6(&src, &dst, 17, 0x0001_000c), naive(&bytes));
    }

    #[test]
    fn every_kernel_matches_reference_at_every_length_and_offset() {
        // Lengths 0..=300 (every short-path branch, every tail of every kernel, one and two
        // vector steps) at offsets 0..=65 (every alignment against 16, 32 and 64 bytes), on
        // pseudo-random bytes and on all-0xFF bytes (a carry out of every add).
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let random: Vec<u8> = (0..400)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect();
        let ones = vec![0xffu8; 400];
        for k in SumKernel::available() {
            for buf in [&random, &ones] {
                for off in 0..=65 {
                    for len in 0..=300 {
                        let d = &buf[off..off + len];
                        assert_eq!(k.sum(d), naive(d), "{} len {len} off {off}", k.name());
                        assert_eq!(sum(d), naive(d), "sum len {len} off {off}");
                        if let Ok(a) = <&[u8; 20]>::try_from(d) {
                            assert_eq!(sum_fixed(a), naive(d));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn fold_is_end_around_carry() {
        let slow = |mut x: u64| {
            while x > 0xffff {
                x = (x & 0xffff) + (x >> 16);
            }
            x as u16
        };
        for x in [
            0u64,
            1,
            0xffff,
            0x1_0000,
            0x1_fffe,
            0xffff_ffff,
            0x1_0000_0000,
            u64::MAX,
            u64::MAX - 1,
            0x8000_8000_8000_8000,
        ] {
            assert_eq!(fold64(x), slow(x), "{x:#x}");
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..10_000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            assert_eq!(fold64(x), slow(x), "{x:#x}");
            assert_eq!(fold64(x >> 17), slow(x >> 17), "{x:#x}");
        }
    }

    #[test]
    fn kernels_listed_and_active_is_best() {
        let ks = SumKernel::available();
        assert_eq!(ks[0], SumKernel::scalar());
        assert_eq!(SumKernel::detect(), *ks.last().unwrap());
        let _ = sum(&[1u8; 100]);
        assert_eq!(SumKernel::active(), SumKernel::detect());
        for k in ks {
            assert!(["scalar", "avx2", "avx512", "avx512vnni"].contains(&k.name()));
        }
    }

    #[test]
    fn long_all_ones_and_zeros() {
        // 0xFFFF words only: the sum is 0xFFFF (negative zero) at every length that has one.
        for len in [2usize, 64, 1500, 9000, 65536 * 2 + 6] {
            let ones = vec![0xffu8; len];
            let zeros = vec![0u8; len];
            for k in SumKernel::available() {
                assert_eq!(k.sum(&ones), 0xffff, "{} ones {len}", k.name());
                assert_eq!(k.sum(&zeros), 0, "{} zeros {len}", k.name());
            }
        }
    }

    #[test]
    fn longer_than_a_lane_block() {
        // Many blocks of vector steps (8 MiB of mostly 0xFE bytes): the 32-bit lanes are
        // widened before they can overflow.
        let len = 128 * 65536 + 4096 + 3;
        let data: Vec<u8> = (0..len).map(|i| if i % 7 == 0 { 0x5a } else { 0xfe }).collect();
        let want = naive(&data);
        for k in SumKernel::available() {
            assert_eq!(k.sum(&data), want, "{}", k.name());
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Every kernel and [`sum`] against the RFC 1071 byte-pair loop: any length up to a jumbo
        /// frame, any offset into the buffer (alignment), odd lengths included.
        #[test]
        fn kernels_equal_naive(
            data in proptest::collection::vec(any::<u8>(), 0..9064),
            off in 0usize..64,
            len in 0usize..9000,
        ) {
            let off = off.min(data.len());
            let len = len.min(data.len() - off);
            let d = &data[off..off + len];
            let want = naive(d);
            prop_assert_eq!(sum(d), want);
            for k in SumKernel::available() {
                prop_assert_eq!(k.sum(d), want, "{}", k.name());
            }
        }

        /// Carry stress: mostly 0xFF bytes with a few others, any length and offset.
        #[test]
        fn kernels_equal_naive_near_all_ones(
            len in 0usize..9000,
            off in 0usize..64,
            holes in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
        ) {
            let mut data = vec![0xffu8; off + len];
            for (at, v) in holes {
                if !data.is_empty() {
                    let n = data.len();
                    data[at % n] = v;
                }
            }
            let d = &data[off..];
            let want = naive(d);
            prop_assert_eq!(sum(d), want);
            for k in SumKernel::available() {
                prop_assert_eq!(k.sum(d), want, "{}", k.name());
            }
        }
    }

    proptest! {
        #[test]
        fn sums_join_at_even_boundaries(
            a in proptest::collection::vec(any::<u16>(), 0..300),
            b in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let a: Vec<u8> = a.iter().flat_map(|w| w.to_be_bytes()).collect();
            let mut all = a.clone();
            all.extend_from_slice(&b);
            let joined = combine(sum(&a), sum(&b));
            // 0 and 0xFFFF are the same value in ones' complement; the joined sum of non-zero
            // data is never 0.
            prop_assert_eq!(joined % 0xffff, sum(&all) % 0xffff);
        }

        #[test]
        fn pseudo_v4_matches_bytes(src in any::<[u8; 4]>(), dst in any::<[u8; 4]>(), p in any::<u8>(), l in any::<u16>()) {
            let mut b = Vec::new();
            b.extend_from_slice(&src);
            b.extend_from_slice(&dst);
            b.extend_from_slice(&[0, p]);
            b.extend_from_slice(&l.to_be_bytes());
            prop_assert_eq!(pseudo_header_v4(src, dst, p, l), naive(&b));
        }

        /// RFC 1624: an incremental update of an IPv4 header equals a full recompute, for any
        /// header and any 16-bit word (other than the checksum itself) rewritten.
        #[test]
        fn incremental_equals_recompute(
            mut h in any::<[u8; 20]>(), word in 0usize..10, new in any::<u16>(),
        ) {
            prop_assume!(word != 5);
            h[0] = 0x45;
            h[10] = 0;
            h[11] = 0;
            let ck = checksum(&h);
            h[10..12].copy_from_slice(&ck.to_be_bytes());
            let old = u16::from_be_bytes([h[2 * word], h[2 * word + 1]]);
            h[2 * word..2 * word + 2].copy_from_slice(&new.to_be_bytes());
            let inc = update16(ck, old, new);
            h[10] = 0;
            h[11] = 0;
            prop_assert_eq!(inc, checksum(&h));
            prop_assert_ne!(inc, 0xffff);
        }

        #[test]
        fn incremental32_equals_recompute(mut h in any::<[u8; 20]>(), new in any::<u32>()) {
            h[0] = 0x45;
            h[10] = 0;
            h[11] = 0;
            let ck = checksum(&h);
            let old = u32::from_be_bytes([h[12], h[13], h[14], h[15]]);
            h[12..16].copy_from_slice(&new.to_be_bytes());
            prop_assert_eq!(update32(ck, old, new), checksum(&h));
        }
    }
}
