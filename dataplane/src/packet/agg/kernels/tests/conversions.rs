//! Widening and narrowing, checked exhaustively where the input space allows, against the `half`
//! crate as an independent oracle (its `from_f32` is round-to-nearest-even and keeps NaNs NaN,
//! checked first on hand-computed values), and every kernel set against the scalar reference.

use half::{bf16, f16};

use super::{from_wire, is_nan, kernel_sets, same, to_wire};
use crate::agg::kernels::lanes;
use crate::wire::gradient::Dtype;

/// The oracle's f32 -> f16 (NaN payloads aside).
fn half_f16(x: u32) -> u32 {
    f16::from_f32(f32::from_bits(x)).to_bits() as u32
}

/// The oracle's f32 -> bf16 (NaN payloads aside).
fn half_bf16(x: u32) -> u32 {
    bf16::from_f32(f32::from_bits(x)).to_bits() as u32
}

#[test]
fn the_oracle_rounds_to_nearest_even() {
    // (f32 bits, f16 bits): ties both ways, overflow, subnormal results, NaN.
    for (x, h) in [
        (0x3f80_1000, 0x3c00), // 1 + 2^-11: tie, even side
        (0x3f80_3000, 0x3c02), // 1 + 3 x 2^-11: tie, odd side rounds up
        (0x3f80_1001, 0x3c01), // just above a tie
        (0x3f80_0fff, 0x3c00), // just below a tie
        (0x477f_efff, 0x7bff), // just below 65520: largest finite
        (0x477f_f000, 0x7c00), // 65520: tie with an odd max rounds to infinity
        (0x3380_0000, 0x0001), // 2^-24, the smallest subnormal
        (0x3300_0000, 0x0000), // 2^-25, a tie: to even zero
        (0x3300_0001, 0x0001), // just above it
        (0x33c0_0000, 0x0002), // 1.5 x 2^-24: tie to even 2
        (0x387f_ffff, 0x0400), // just below 2^-14 rounds up to the smallest normal
        (0x0000_0001, 0x0000), // an f32 subnormal: zero
    ] {
        assert_eq!(half_f16(x), h, "half f16 of {x:#x}");
        assert_eq!(lanes::f32_to_f16(x) as u32, h, "lanes f16 of {x:#x}");
    }
    for (x, h) in [
        (0x3f80_8000, 0x3f80), // tie, even side
        (0x3f81_8000, 0x3f82), // tie, odd side
        (0x3f80_8001, 0x3f81),
        (0x7f7f_8000, 0x7f80), // tie at the largest finite (odd): infinity
        (0x0001_8000, 0x0002), // subnormal tie, odd side
        (0x0000_8000, 0x0000), // subnormal tie, even side
    ] {
        assert_eq!(half_bf16(x), h, "half bf16 of {x:#x}");
        assert_eq!(lanes::f32_to_bf16(x) as u32, h, "lanes bf16 of {x:#x}");
    }
    for nan in [0x7fc0_0000, 0x7f80_0001, 0xff80_2000, 0x7fff_ffff] {
        assert!(is_nan(Dtype::F16, half_f16(nan)), "{nan:#x}");
        assert!(is_nan(Dtype::Bf16, half_bf16(nan)), "{nan:#x}");
    }
}

/// Every f16 or bf16 pattern: widening matches the oracle exactly, and load then store gives
/// back the same bits (a NaN comes back a NaN with its sign, quieted), on every kernel set.
fn round_trip_all_patterns(dtype: Dtype, oracle_widen: fn(u16) -> u32, quiet_bit: u32) {
    let all: Vec<u32> = (0..=u16::MAX as u32).collect();
    let wire = to_wire(dtype, &all);
    for k in kernel_sets() {
        let mut acc = vec![0u32; all.len()];
        k.load(dtype, &mut acc, &wire);
        let mut out = vec![0u8; wire.len()];
        k.store(dtype, &acc, &mut out);
        let back = from_wire(dtype, &out);
        for (&h, (&a, &b)) in all.iter().zip(acc.iter().zip(&back)) {
            let want = oracle_widen(h as u16);
            assert!(
                same(Dtype::F32, a, want),
                "{} {} widen {h:#06x}: {a:#x}, oracle {want:#x}",
                k.name(),
                dtype.name()
            );
            if is_nan(dtype, h) {
                assert!(is_nan(dtype, b), "{} {h:#06x} -> {b:#06x}", k.name());
                assert_eq!(b & 0x8000, h & 0x8000, "{} sign of NaN {h:#06x}", k.name());
                assert_ne!(b & quiet_bit, 0, "{} NaN {h:#06x} not quieted", k.name());
            } else {
                assert_eq!(b, h, "{} {} round trip", k.name(), dtype.name());
            }
        }
    }
}

#[test]
fn every_f16_pattern_round_trips() {
    round_trip_all_patterns(Dtype::F16, |h| f16::from_bits(h).to_f32().to_bits(), 0x0200);
    for h in 0..=u16::MAX {
        let want = f16::from_bits(h).to_f32().to_bits();
        assert!(same(Dtype::F32, lanes::f16_to_f32(h), want), "{h:#06x}");
    }
}

#[test]
fn every_bf16_pattern_round_trips() {
    round_trip_all_patterns(Dtype::Bf16, |h| bf16::from_bits(h).to_f32().to_bits(), 0x0040);
}

/// f32 patterns around every rounding boundary of a narrow format whose finite positive values
/// are given as f32 bits in increasing order: each value, each midpoint to the next value
/// (a tie), and the patterns one ulp either side of it, with both signs. `top` is the value
/// after the largest finite one (where a tie overflows to infinity).
fn boundary_patterns(values: &[u32], top: f64) -> Vec<u32> {
    let mut out = Vec::new();
    for (i, &v) in values.iter().enumerate() {
        let here = f32::from_bits(v) as f64;
        let next = values.get(i + 1).map_or(top, |&n| f32::from_bits(n) as f64);
        // Adjacent values of a format with p <= 11 significant bits have a midpoint with at
        // most p + 1 bits: exact in f32.
        let mid = ((here + next) / 2.0) as f32;
        assert_eq!(mid as f64, (here + next) / 2.0);
        let m = mid.to_bits();
        for x in [v, v.wrapping_sub(1), v + 1, m - 1, m, m + 1] {
            out.push(x);
            out.push(x | 0x8000_0000);
        }
    }
    out
}

/// Every 4099th f32 pattern (about a million, every class of value), plus special values.
fn strided_patterns() -> Vec<u32> {
    let mut out: Vec<u32> = (0..=u32::MAX).step_by(4099).collect();
    out.extend([
        0,
        0x8000_0000,
        0x7f80_0000,
        0xff80_0000,
        0x7fc0_0000,
        0x7f80_0001,
        0xffff_ffff,
        0x7f7f_ffff,
        0x0000_0001,
        0x007f_ffff,
        0x0080_0000,
    ]);
    out
}

/// Narrows `patterns` with the scalar reference, the oracle and every kernel set's `store`.
fn check_narrowing(dtype: Dtype, patterns: &[u32], reference: fn(u32) -> u16, oracle: fn(u32) -> u32) {
    for &x in patterns {
        let (r, o) = (reference(x) as u32, oracle(x));
        assert!(same(dtype, r, o), "{} narrowing of {x:#010x}: reference {r:#06x}, oracle {o:#06x}", dtype.name());
        if lanes::f32_is_nan(x) {
            assert!(is_nan(dtype, r), "{x:#x} -> {r:#x}");
        }
    }
    let mut expected = vec![0u8; patterns.len() * 2];
    let scalar = crate::agg::kernels::Kernels::scalar();
    scalar.store(dtype, patterns, &mut expected);
    let expected = from_wire(dtype, &expected);
    for (&x, &e) in patterns.iter().zip(&expected) {
        assert_eq!(e, reference(x) as u32);
    }
    for k in kernel_sets() {
        let mut out = vec![0u8; patterns.len() * 2];
        k.store(dtype, patterns, &mut out);
        let got = from_wire(dtype, &out);
        for ((&x, &g), &e) in patterns.iter().zip(&got).zip(&expected) {
            assert!(
                same(dtype, g, e),
                "{} {} store of {x:#010x}: {g:#06x}, reference {e:#06x}",
                k.name(),
                dtype.name()
            );
        }
    }
}

#[test]
fn f16_narrowing_at_every_boundary() {
    // The positive finite f16 values, 0 to 65504, as f32 bits.
    let values: Vec<u32> = (0..0x7c00).map(lanes::f16_to_f32).collect();
    let patterns = boundary_patterns(&values, 65536.0);
    assert!(patterns.len() > 350_000);
    check_narrowing(Dtype::F16, &patterns, lanes::f32_to_f16, half_f16);
}

#[test]
fn bf16_narrowing_at_every_boundary() {
    let values: Vec<u32> = (0..0x7f80).map(lanes::bf16_to_f32).collect();
    let top = 2f64.powi(128);
    let patterns = boundary_patterns(&values, top);
    check_narrowing(Dtype::Bf16, &patterns, lanes::f32_to_bf16, half_bf16);
}

#[test]
fn narrowing_of_strided_patterns() {
    let patterns = strided_patterns();
    check_narrowing(Dtype::F16, &patterns, lanes::f32_to_f16, half_f16);
    check_narrowing(Dtype::Bf16, &patterns, lanes::f32_to_bf16, half_bf16);
}

/// All 2^32 f32 patterns through both narrowings, on the reference, the oracle and every kernel
/// set. Slow in a debug build: run with
/// `cargo test --release -p dataplane --no-default-features --lib every_f32_pattern -- --ignored`.
#[test]
#[ignore = "minutes in a debug build; run in release"]
fn every_f32_pattern_narrows_like_the_oracle() {
    const CHUNK: u64 = 1 << 22;
    let mut start = 0u64;
    while start < 1 << 32 {
        let patterns: Vec<u32> = (start..start + CHUNK).map(|x| x as u32).collect();
        check_narrowing(Dtype::F16, &patterns, lanes::f32_to_f16, half_f16);
        check_narrowing(Dtype::Bf16, &patterns, lanes::f32_to_bf16, half_bf16);
        start += CHUNK;
    }
}
