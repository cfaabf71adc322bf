//! One lane's arithmetic, on bit patterns: the definition every kernel set must match.
//!
//! Implements section 4 rule 6 of the gradient protocol for a single lane: exact widening of f16
//! and bf16 to f32, round-to-nearest-even narrowing back, f32 addition, and IEEE 754-2019
//! `maximum`/`minimum`. Values are passed as raw bits (`u32` for f32, `u16` for f16 and bf16) so
//! that signed zeros and NaN payloads are explicit. All conversions are integer code, independent
//! of the CPU's floating-point conversion instructions.

/// Sign bit of an f32.
const F32_SIGN: u32 = 0x8000_0000;
/// Exponent field of an f32, all ones: the bits of +infinity.
const F32_INF: u32 = 0x7f80_0000;
/// Exponent field of an f16, all ones: the bits of +infinity.
const F16_INF: u16 = 0x7c00;
/// Quiet bit (top mantissa bit) of an f16 NaN.
const F16_QUIET: u16 = 0x0200;
/// Quiet bit (top mantissa bit) of a bf16 NaN.
const BF16_QUIET: u16 = 0x0040;
/// f32 exponent bias minus f16 exponent bias (127 - 15).
const F16_REBIAS: u32 = 112;

/// Widens f16 bits to the f32 bits of the same value, exactly.
///
/// Subnormals become normal f32 values, infinities stay infinities, and a NaN keeps its sign and
/// payload (a signalling NaN stays signalling here; it is quieted when narrowed back).
pub const fn f16_to_f32(h: u16) -> u32 {
    let sign = ((h & 0x8000) as u32) << 16;
    let exp = ((h >> 10) & 0x1f) as u32;
    let man = (h & 0x3ff) as u32;
    if exp == 0x1f {
        // Infinity or NaN: payload moved to the top of the f32 mantissa.
        sign | F32_INF | (man << 13)
    } else if exp != 0 {
        // Normal.
        sign | ((exp + F16_REBIAS) << 23) | (man << 13)
    } else if man == 0 {
        // Signed zero.
        sign
    } else {
        // Subnormal: man x 2^-24 = 1.f x 2^(p - 24), where p is man's top set bit (0..=9).
        let p = 31 - man.leading_zeros();
        sign | ((p + 127 - 24) << 23) | ((man << (23 - p)) & 0x7f_ffff)
    }
}

/// Narrows f32 bits to the f16 bits of the nearest value, ties to even, rounding exactly once.
///
/// Values at or beyond 65520 (halfway between the largest finite f16, 65504, and 65536) become
/// infinity; results below 2^-14 become f16 subnormals (never flushed); a NaN stays a NaN with its
/// sign and top payload bits, quieted.
pub const fn f32_to_f16(x: u32) -> u16 {
    let sign = ((x >> 16) & 0x8000) as u16;
    let abs = x & !F32_SIGN;
    if abs > F32_INF {
        // NaN: keep the top 10 payload bits, set the quiet bit.
        return sign | F16_INF | F16_QUIET | ((abs >> 13) & 0x3ff) as u16;
    }
    if abs >= 0x477f_f000 {
        // 65520 and up, infinity included, round to infinity.
        return sign | F16_INF;
    }
    if abs >= 0x3880_0000 {
        // 2^-14 and up: a normal f16. Round the 13 dropped mantissa bits to nearest-even on the
        // bit pattern (a carry into the exponent is the correct result), then rebias.
        let rounded = abs + 0x0fff + ((abs >> 13) & 1);
        return sign | ((rounded >> 13) - (F16_REBIAS << 10)) as u16;
    }
    if abs < 0x3300_0000 {
        // Below 2^-25 (half the smallest subnormal), f32 subnormals and zeros included: rounds
        // to a signed zero. 2^-25 itself is a tie, handled below.
        return sign;
    }
    // An f16 subnormal (or, by rounding up, the smallest normal, 0x0400, whose encoding is the
    // carry). Its lane holds m = value x 2^24 = mant x 2^(exp - 126), mant the f32 significand
    // with its implicit bit, exp in 102..=112, so m = mant >> (126 - exp), rounded.
    let exp = abs >> 23;
    let mant = (abs & 0x7f_ffff) | 0x80_0000;
    sign | shift_right_rne(mant, 126 - exp) as u16
}

/// `value >> shift`, rounded to nearest, ties to even; `shift` in 1..=31.
const fn shift_right_rne(value: u32, shift: u32) -> u32 {
    let kept = value >> shift;
    let dropped = value & ((1 << shift) - 1);
    let half = 1 << (shift - 1);
    if dropped > half || (dropped == half && kept & 1 == 1) {
        kept + 1
    } else {
        kept
    }
}

/// Widens bf16 bits to f32 bits, exactly: bf16 is the top half of an f32.
pub const fn bf16_to_f32(h: u16) -> u32 {
    (h as u32) << 16
}

/// Narrows f32 bits to the bf16 bits of the nearest value, ties to even, rounding once.
///
/// Overflow rounds to infinity and subnormals are kept, as the rounding works on the bit pattern
/// (a carry out of the mantissa is the correct result); a NaN is truncated and quieted instead of
/// rounded, so that it can never carry into an infinity.
pub const fn f32_to_bf16(x: u32) -> u16 {
    if x & !F32_SIGN > F32_INF {
        return (x >> 16) as u16 | BF16_QUIET;
    }
    // No overflow: the largest non-NaN pattern, 0xff80_0000 (-inf), plus 0x8000 fits.
    ((x + 0x7fff + ((x >> 16) & 1)) >> 16) as u16
}

/// IEEE binary32 addition of two f32 bit patterns (round to nearest-even, subnormals kept).
#[inline]
pub fn f32_add(a: u32, b: u32) -> u32 {
    (f32::from_bits(a) + f32::from_bits(b)).to_bits()
}

/// IEEE 754-2019 `maximum` of two f32 bit patterns: NaN if either is NaN, `+0` for `(-0, +0)`.
#[inline]
pub fn f32_maximum(a: u32, b: u32) -> u32 {
    let (x, y) = (f32::from_bits(a), f32::from_bits(b));
    if x.is_nan() || y.is_nan() {
        // Adding propagates the NaN, quieted.
        (x + y).to_bits()
    } else if x > y {
        a
    } else if y > x {
        b
    } else {
        // Equal: the same bits, or a +0 and a -0, whose maximum is -0 only when both are.
        a & b
    }
}

/// IEEE 754-2019 `minimum` of two f32 bit patterns: NaN if either is NaN, `-0` for `(-0, +0)`.
#[inline]
pub fn f32_minimum(a: u32, b: u32) -> u32 {
    let (x, y) = (f32::from_bits(a), f32::from_bits(b));
    if x.is_nan() || y.is_nan() {
        (x + y).to_bits()
    } else if x < y {
        a
    } else if y < x {
        b
    } else {
        // Equal: the same bits, or a +0 and a -0, whose minimum is -0 when either is.
        a | b
    }
}

/// Whether f32 bits are a NaN.
pub const fn f32_is_nan(x: u32) -> bool {
    x & !F32_SIGN > F32_INF
}

/// Whether f16 bits are a NaN.
pub const fn f16_is_nan(h: u16) -> bool {
    h & 0x7fff > F16_INF
}

/// Whether bf16 bits are a NaN.
pub const fn bf16_is_nan(h: u16) -> bool {
    h & 0x7fff > 0x7f80
}
