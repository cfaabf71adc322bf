//! Edge values of rule 6 on every kernel set: signed zeros, NaN in either operand, subnormals,
//! infinities, rounding at store, and the length checks.

use super::{is_nan, reduce, to_wire, FINISHES};
use crate::agg::kernels::Kernels;
use crate::wire::gradient::{Dtype, Op};

/// Enough lanes for two AVX-512 vectors and a tail, and an AVX2 tail.
const LANES: usize = 37;

/// Bits of some values in each float dtype.
struct Bits {
    dtype: Dtype,
    pos_zero: u32,
    neg_zero: u32,
    one: u32,
    two: u32,
    inf: u32,
    neg_inf: u32,
    quiet_nan: u32,
    signalling_nan: u32,
    min_subnormal: u32,
}

const FLOATS: [Bits; 3] = [
    Bits {
        dtype: Dtype::F32,
        pos_zero: 0,
        neg_zero: 0x8000_0000,
        one: 0x3f80_0000,
        two: 0x4000_0000,
        inf: 0x7f80_0000,
        neg_inf: 0xff80_0000,
        quiet_nan: 0x7fc0_0000,
        signalling_nan: 0x7f80_0001,
        min_subnormal: 0x0000_0001,
    },
    Bits {
        dtype: Dtype::F16,
        pos_zero: 0,
        neg_zero: 0x8000,
        one: 0x3c00,
        two: 0x4000,
        inf: 0x7c00,
        neg_inf: 0xfc00,
        quiet_nan: 0x7e00,
        signalling_nan: 0x7c01,
        min_subnormal: 0x0001,
    },
    Bits {
        dtype: Dtype::Bf16,
        pos_zero: 0,
        neg_zero: 0x8000,
        one: 0x3f80,
        two: 0x4000,
        inf: 0x7f80,
        neg_inf: 0xff80,
        quiet_nan: 0x7fc0,
        signalling_nan: 0x7f81,
        min_subnormal: 0x0001,
    },
];

/// Reduces `inputs` (one value per contribution, replicated over [`LANES`] lanes) on kernel set
/// `k` with every way of finishing, and asserts every lane is `want` (`None`: any NaN).
fn check(k: &Kernels, op: Op, dtype: Dtype, inputs: &[u32], want: Option<u32>) {
    let payloads: Vec<Vec<u8>> = inputs.iter().map(|&x| to_wire(dtype, &[x; LANES])).collect();
    for finish in FINISHES {
        let (got, _) = reduce(k, op, dtype, &payloads, finish);
        for (i, &lane) in got.iter().enumerate() {
            let ok = match want {
                Some(w) => lane == w,
                None => is_nan(dtype, lane),
            };
            assert!(
                ok,
                "{}: {} {} of {inputs:x?} via {finish:?}, lane {i}: got {lane:x}, want {want:x?}",
                k.name(),
                dtype.name(),
                op.name()
            );
        }
    }
}

#[test]
fn signed_zeros() {
    use Op::{Max, Min, Sum};
    for k in super::kernel_sets() {
        for b in &FLOATS {
            let (p, n) = (b.pos_zero, b.neg_zero);
            let d = b.dtype;
            // The accumulator starts as the first contribution, not +0.
            check(&k, Sum, d, &[n, n], Some(n));
            check(&k, Sum, d, &[n, n, n], Some(n));
            check(&k, Sum, d, &[n], Some(n));
            check(&k, Sum, d, &[n, p], Some(p));
            check(&k, Sum, d, &[p, n], Some(p));
            // A single contribution is its own maximum and minimum.
            check(&k, Max, d, &[n], Some(n));
            check(&k, Min, d, &[n], Some(n));
            // IEEE 754-2019: -0 < +0, in either order.
            check(&k, Max, d, &[n, p], Some(p));
            check(&k, Max, d, &[p, n], Some(p));
            check(&k, Max, d, &[n, n], Some(n));
            check(&k, Max, d, &[p, p], Some(p));
            check(&k, Min, d, &[n, p], Some(n));
            check(&k, Min, d, &[p, n], Some(n));
            check(&k, Min, d, &[p, p], Some(p));
            check(&k, Min, d, &[n, n], Some(n));
            check(&k, Max, d, &[n, p, n], Some(p));
            check(&k, Min, d, &[p, n, p], Some(n));
        }
    }
}

#[test]
fn nan_in_either_operand() {
    for k in super::kernel_sets() {
        for b in &FLOATS {
            for nan in [b.quiet_nan, b.signalling_nan, b.quiet_nan | b.neg_zero] {
                for op in Op::ALL {
                    for x in [b.one, b.neg_zero, b.pos_zero, b.inf, b.neg_inf] {
                        // x86 max/min return the second operand on NaN: both orders matter.
                        check(&k, op, b.dtype, &[nan, x], None);
                        check(&k, op, b.dtype, &[x, nan], None);
                        check(&k, op, b.dtype, &[x, nan, x], None);
                    }
                    check(&k, op, b.dtype, &[nan], None);
                    check(&k, op, b.dtype, &[nan, nan], None);
                }
            }
        }
    }
}

#[test]
fn infinities_and_ordinary_values() {
    use Op::{Max, Min, Sum};
    for k in super::kernel_sets() {
        for b in &FLOATS {
            let d = b.dtype;
            check(&k, Sum, d, &[b.inf, b.neg_inf], None);
            check(&k, Sum, d, &[b.inf, b.one], Some(b.inf));
            check(&k, Sum, d, &[b.neg_inf, b.neg_inf], Some(b.neg_inf));
            check(&k, Sum, d, &[b.one, b.one], Some(b.two));
            check(&k, Max, d, &[b.neg_inf, b.one, b.two], Some(b.two));
            check(&k, Max, d, &[b.inf, b.two], Some(b.inf));
            check(&k, Min, d, &[b.two, b.one, b.inf], Some(b.one));
            check(&k, Min, d, &[b.two, b.neg_inf], Some(b.neg_inf));
            // Subnormals are neither flushed on input nor on output.
            let s = b.min_subnormal;
            check(&k, Sum, d, &[s, s], Some(2 * s));
            check(&k, Sum, d, &[s, b.neg_zero], Some(s));
            check(&k, Max, d, &[b.pos_zero, s], Some(s));
            check(&k, Min, d, &[b.pos_zero, s], Some(b.pos_zero));
            check(&k, Min, d, &[b.pos_zero, s | b.neg_zero], Some(s | b.neg_zero));
        }
    }
}

#[test]
fn integer_ops() {
    use Op::{Max, Min, Sum};
    let d = Dtype::I32;
    let neg = |x: i32| x as u32;
    for k in super::kernel_sets() {
        check(&k, Sum, d, &[neg(-5), 3, neg(-1)], Some(neg(-3)));
        check(&k, Sum, d, &[i32::MAX as u32, i32::MAX as u32], Some(neg(-2)));
        check(&k, Max, d, &[neg(-5), neg(-7), neg(-6)], Some(neg(-5)));
        check(&k, Max, d, &[neg(i32::MIN), 0], Some(0));
        check(&k, Min, d, &[neg(-1), 1], Some(neg(-1)));
        check(&k, Min, d, &[i32::MAX as u32, neg(i32::MIN)], Some(neg(i32::MIN)));
    }
}

/// Narrowing at store, for accumulator values no sum of these inputs could reach exactly.
#[test]
fn store_rounds_once_to_nearest_even() {
    // (f32 accumulator bits, f16 bits, bf16 bits)
    let cases: [(u32, u32, u32); 15] = [
        // 1 + 2^-11: an f16 tie, rounds to the even 1.0; bf16 rounds it to 1.0 too.
        (0x3f80_1000, 0x3c00, 0x3f80),
        // 1 + 2^-11 + 2^-23: above the f16 tie, rounds up.
        (0x3f80_1001, 0x3c01, 0x3f80),
        // 1 + 3 x 2^-11: an f16 tie, the odd side, rounds up to even 0x3c02.
        (0x3f80_3000, 0x3c02, 0x3f80),
        // 65504 (f16 max) + just under half an ulp stays finite; the tie 65520 is infinity.
        (0x477f_efff, 0x7bff, 0x4780),
        (0x477f_f000, 0x7c00, 0x4780),
        (0xc77f_f000, 0xfc00, 0xc780),
        // f32 max: f16 infinity; bf16 rounds up into infinity (0x7f7f_ffff is past the tie).
        (0x7f7f_ffff, 0x7c00, 0x7f80),
        // The bf16 tie just below the largest finite: 0x7f7f_8000 is odd 0x7f7f + half: up to inf.
        (0x7f7f_8000, 0x7c00, 0x7f80),
        (0x7f7e_8000, 0x7c00, 0x7f7e),
        // 2^-24 is the smallest f16 subnormal; 2^-25 ties to 0, 1.5 x 2^-24 ties to 2 x 2^-24,
        // 0.75 x 2^-24 rounds to 2^-24.
        (0x3380_0000, 0x0001, 0x3380),
        (0x3300_0000, 0x0000, 0x3300),
        (0x33c0_0000, 0x0002, 0x33c0),
        (0x3340_0000, 0x0001, 0x3340),
        // f32 subnormals: f16 zero; bf16 keeps them, rounding 0x0001_8000 (a tie) to even 2.
        (0x0001_8000, 0x0000, 0x0002),
        (0x8000_8000, 0x8000, 0x8000),
    ];
    for k in super::kernel_sets() {
        for (acc, f16, bf16) in cases {
            for (dtype, want) in [(Dtype::F16, f16), (Dtype::Bf16, bf16)] {
                let acc = [acc; LANES];
                let mut out = vec![0u8; LANES * 2];
                k.store(dtype, &acc, &mut out);
                for lane in super::from_wire(dtype, &out) {
                    assert_eq!(lane, want, "{} {} store of {:#x}", k.name(), dtype.name(), acc[0]);
                }
            }
        }
    }
}

#[test]
fn empty_slices_are_fine() {
    for k in super::kernel_sets() {
        for dtype in Dtype::ALL {
            let mut acc: [u32; 0] = [];
            let mut out: [u8; 0] = [];
            k.load(dtype, &mut acc, &[]);
            k.store(dtype, &acc, &mut out);
            for op in Op::ALL {
                k.fold(op, dtype, &mut acc, &[]);
                k.fold_store(op, dtype, &acc, &[], &mut out);
                k.fold_store_in_place(op, dtype, &acc, &mut out);
            }
        }
    }
}

#[test]
#[should_panic(expected = "src is 6 bytes, but 4 f16 lanes take 8 bytes")]
fn load_checks_the_length() {
    Kernels::detect().load(Dtype::F16, &mut [0; 4], &[0; 6]);
}

#[test]
#[should_panic(expected = "src is 17 bytes")]
fn fold_checks_the_length() {
    Kernels::detect().fold(Op::Sum, Dtype::F32, &mut [0; 4], &[0; 17]);
}

#[test]
#[should_panic(expected = "dst is 8 bytes, but 4 i32 lanes take 16 bytes")]
fn store_checks_the_length() {
    Kernels::detect().store(Dtype::I32, &[0; 4], &mut [0; 8]);
}

#[test]
#[should_panic(expected = "dst is 9 bytes")]
fn fold_store_checks_the_destination_length() {
    Kernels::detect().fold_store(Op::Max, Dtype::Bf16, &[0; 4], &[0; 8], &mut [0; 9]);
}

#[test]
#[should_panic(expected = "buf is 2 bytes")]
fn fold_store_in_place_checks_the_length() {
    Kernels::detect().fold_store_in_place(Op::Min, Dtype::F16, &[0; 4], &mut [0; 2]);
}
