//! Tests of the reduction kernels: the shared cases, edge values, conversions checked
//! exhaustively against the `half` crate, and random inputs comparing every SIMD kernel set with
//! the scalar reference.
//!
//! Lanes are handled here as `u32` bit patterns (the low 16 bits for f16 and bf16), so that
//! every comparison is on bits, with one exception: a NaN lane matches any NaN lane.

mod conversions;
mod edges;
mod random;
mod vectors;

use super::lanes::{bf16_is_nan, f16_is_nan, f32_is_nan};
use super::{Dtype, Kernels, Op};

/// Every kernel set this machine runs, the scalar reference first.
fn kernel_sets() -> Vec<Kernels> {
    Kernels::available()
}

/// Whether lane bits of `dtype` are a NaN (never for i32).
fn is_nan(dtype: Dtype, bits: u32) -> bool {
    match dtype {
        Dtype::F32 => f32_is_nan(bits),
        Dtype::F16 => f16_is_nan(bits as u16),
        Dtype::Bf16 => bf16_is_nan(bits as u16),
        Dtype::I32 => false,
    }
}

/// Whether two lanes of `dtype` match: both NaN, or the same bits.
fn same(dtype: Dtype, a: u32, b: u32) -> bool {
    (is_nan(dtype, a) && is_nan(dtype, b)) || a == b
}

/// Whether two accumulators of `dtype` match lane for lane (f32 NaN rules for float dtypes).
fn same_acc(dtype: Dtype, a: &[u32], b: &[u32]) -> bool {
    let acc_dtype = if dtype == Dtype::I32 { Dtype::I32 } else { Dtype::F32 };
    a.len() == b.len() && a.iter().zip(b).all(|(&x, &y)| same(acc_dtype, x, y))
}

/// Whether two payloads of `dtype` match lane for lane.
fn same_lanes(dtype: Dtype, a: &[u32], b: &[u32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(&x, &y)| same(dtype, x, y))
}

/// Wire bytes (little-endian) of lanes given as bits; 16-bit dtypes take the low half.
fn to_wire(dtype: Dtype, lanes: &[u32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(lanes.len() * dtype.size());
    for &x in lanes {
        if dtype.size() == 2 {
            out.extend_from_slice(&(x as u16).to_le_bytes());
        } else {
            out.extend_from_slice(&x.to_le_bytes());
        }
    }
    out
}

/// Lane bits of wire bytes.
fn from_wire(dtype: Dtype, bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(dtype.size())
        .map(|c| match *c {
            [a, b] => u16::from_le_bytes([a, b]) as u32,
            [a, b, c, d] => u32::from_le_bytes([a, b, c, d]),
            _ => unreachable!(),
        })
        .collect()
}

/// How a reduction ends.
#[derive(Clone, Copy, Debug)]
enum Finish {
    /// `fold` the last contribution, then `store`.
    FoldThenStore,
    /// `fold_store` the last contribution into a separate buffer.
    FoldStore,
    /// `fold_store_in_place` the last contribution over its own payload.
    InPlace,
}

const FINISHES: [Finish; 3] = [Finish::FoldThenStore, Finish::FoldStore, Finish::InPlace];

/// Reduces `inputs` (wire payloads, at least one, in arrival order) the way the aggregator does:
/// `load` the first, `fold` the others, and end with `finish`. Returns the result lanes and the
/// accumulator as it is before the last contribution (or after the only one).
fn reduce(k: &Kernels, op: Op, dtype: Dtype, inputs: &[Vec<u8>], finish: Finish) -> (Vec<u32>, Vec<u32>) {
    let lanes = inputs[0].len() / dtype.size();
    let mut acc = vec![0u32; lanes];
    k.load(dtype, &mut acc, &inputs[0]);
    let Some((last, middle)) = inputs[1..].split_last() else {
        let mut out = vec![0u8; inputs[0].len()];
        k.store(dtype, &acc, &mut out);
        return (from_wire(dtype, &out), acc);
    };
    for src in middle {
        k.fold(op, dtype, &mut acc, src);
    }
    let before_last = acc.clone();
    let out = match finish {
        Finish::FoldThenStore => {
            let mut out = vec![0u8; last.len()];
            k.fold(op, dtype, &mut acc, last);
            k.store(dtype, &acc, &mut out);
            out
        }
        Finish::FoldStore => {
            let mut out = vec![0u8; last.len()];
            k.fold_store(op, dtype, &acc, last, &mut out);
            out
        }
        Finish::InPlace => {
            let mut buf = last.clone();
            k.fold_store_in_place(op, dtype, &acc, &mut buf);
            buf
        }
    };
    (from_wire(dtype, &out), before_last)
}

#[test]
fn detect_picks_the_widest_available_set() {
    let best = Kernels::avx512().or_else(Kernels::avx2);
    let expected = best.map_or("scalar", |k| k.name());
    assert_eq!(Kernels::detect().name(), expected);
    assert_eq!(Kernels::scalar().name(), "scalar");
    let names: Vec<_> = kernel_sets().iter().map(Kernels::name).collect();
    assert_eq!(names[0], "scalar");
    // This project's build and CI machines have AVX-512 F/BW/VL: make sure the SIMD sets are
    // really exercised there, rather than silently skipped.
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx512bw") && is_x86_feature_detected!("avx512vl") {
        assert_eq!(names, ["scalar", "avx2", "avx512"]);
    }
}
