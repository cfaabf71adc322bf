//! Random inputs: every SIMD kernel set against the scalar reference, bit for bit (NaN lanes:
//! both NaN), for every op and dtype, lane counts 0..=1100 and payloads at odd offsets.

use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::FileFailurePersistence;

use super::{from_wire, reduce, same_acc, same_lanes, to_wire, Finish, FINISHES};
use crate::agg::kernels::Kernels;
use crate::wire::gradient::{Dtype, Op};

const F32_SPECIALS: [u32; 22] = [
    0x0000_0000, // +0
    0x8000_0000, // -0
    0x7f80_0000, // +inf
    0xff80_0000, // -inf
    0x7fc0_0000, // quiet NaN
    0xffc0_0000,
    0x7f80_0001, // signalling NaN
    0x7fbf_ffff,
    0x0000_0001, // smallest subnormal
    0x8000_0001,
    0x007f_ffff, // largest subnormal
    0x0080_0000, // smallest normal
    0x7f7f_ffff, // largest finite
    0xff7f_ffff,
    0x3f80_0000, // 1
    0xbf80_0000, // -1
    0x3f80_1000, // 1 + half an f16 ulp
    0x3f80_8000, // 1 + half a bf16 ulp
    0x477f_e000, // 65504, the largest finite f16
    0x477f_f000, // 65520, where f16 overflows
    0x3380_0000, // 2^-24, the smallest f16 subnormal
    0x3300_0000, // 2^-25
];

const F16_SPECIALS: [u32; 17] = [
    0x0000, 0x8000, // ±0
    0x7c00, 0xfc00, // ±inf
    0x7e00, 0xfe00, 0x7c01, 0x7dff, // NaNs, quiet and signalling
    0x0001, 0x8001, 0x03ff, 0x0400, // subnormals, smallest normal
    0x7bff, 0xfbff, // ±65504
    0x3c00, 0xbc00, 0x3c01, // ±1, 1 + ulp
];

const BF16_SPECIALS: [u32; 17] = [
    0x0000, 0x8000, // ±0
    0x7f80, 0xff80, // ±inf
    0x7fc0, 0xffc0, 0x7f81, 0x7fbf, // NaNs, quiet and signalling
    0x0001, 0x8001, 0x007f, 0x0080, // subnormals, smallest normal
    0x7f7f, 0xff7f, // largest finite
    0x3f80, 0xbf80, 0x3f81, // ±1, 1 + ulp
];

const I32_SPECIALS: [u32; 8] = [0, 1, 0xffff_ffff, 0x7fff_ffff, 0x8000_0000, 0x8000_0001, 0x7fff_fffe, 0x0001_0000];

/// Lane bits of `dtype`: fully random patterns, special values, and values of nearby
/// magnitude (so that sums cancel, carry and land on ties), with random signs.
fn lane_bits(dtype: Dtype) -> BoxedStrategy<u32> {
    let (specials, near): (&[u32], BoxedStrategy<u32>) = match dtype {
        Dtype::F32 => (
            &F32_SPECIALS,
            // Exponents within 2^-3..2^4 of 1, every mantissa.
            (any::<bool>(), 124u32..=131, any::<u32>())
                .prop_map(|(s, e, m)| (s as u32) << 31 | e << 23 | (m & 0x7f_ffff))
                .boxed(),
        ),
        Dtype::F16 => (
            &F16_SPECIALS,
            // Around 1, around the subnormal boundary, and near the largest finite values.
            (any::<bool>(), select(vec![0u32, 1, 2, 14, 15, 16, 29, 30]), any::<u32>())
                .prop_map(|(s, e, m)| (s as u32) << 15 | e << 10 | (m & 0x3ff))
                .boxed(),
        ),
        Dtype::Bf16 => (
            &BF16_SPECIALS,
            (any::<bool>(), select(vec![0u32, 1, 2, 126, 127, 128, 253, 254]), any::<u32>())
                .prop_map(|(s, e, m)| (s as u32) << 15 | e << 7 | (m & 0x7f))
                .boxed(),
        ),
        Dtype::I32 => (&I32_SPECIALS, (-1000i32..1000).prop_map(|x| x as u32).boxed()),
    };
    let width = if dtype.size() == 2 { 0xffff } else { u32::MAX };
    prop_oneof![
        3 => any::<u32>().prop_map(move |x| x & width),
        2 => select(specials.to_vec()),
        3 => near,
    ]
    .boxed()
}

/// One random reduction: op, dtype, 1..=4 contributions of `lanes` lanes each, the byte offset
/// at which every payload sits in its buffer and the lane offset of the accumulator in its own
/// (so that every alignment of both, relative to a cache line, occurs).
#[derive(Debug, Clone)]
struct Case {
    op: Op,
    dtype: Dtype,
    inputs: Vec<Vec<u32>>,
    offset: usize,
    acc_offset: usize,
}

fn case() -> impl Strategy<Value = Case> {
    (select(Op::ALL.to_vec()), select(Dtype::ALL.to_vec()), 0usize..=1100, 1usize..=4, 0usize..64, 0usize..16)
        .prop_flat_map(|(op, dtype, lanes, count, offset, acc_offset)| {
            prop::collection::vec(prop::collection::vec(lane_bits(dtype), lanes), count).prop_map(move |inputs| Case {
                op,
                dtype,
                inputs,
                offset,
                acc_offset,
            })
        })
}

/// Guard bytes around payloads and guard lanes around accumulators: a kernel must never touch
/// them.
const GUARD: u8 = 0xa5;
const GUARD_LANE: u32 = 0xdead_beef;
const GUARD_LEN: usize = 64;

/// Wire payload lanes placed `offset` bytes into a buffer (so that they are not aligned), with
/// guard bytes on both sides.
struct Payload {
    buf: Vec<u8>,
    offset: usize,
    len: usize,
}

impl Payload {
    fn new(dtype: Dtype, lanes: &[u32], offset: usize) -> Payload {
        let mut buf = vec![GUARD; offset];
        buf.extend(to_wire(dtype, lanes));
        let len = buf.len() - offset;
        buf.extend([GUARD; GUARD_LEN]);
        Payload { buf, offset, len }
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[self.offset..self.offset + self.len]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.offset..self.offset + self.len]
    }

    fn guards_intact(&self) -> bool {
        let (before, rest) = self.buf.split_at(self.offset);
        before.iter().chain(&rest[self.len..]).all(|&b| b == GUARD)
    }
}

/// An accumulator `offset` lanes into its buffer, with guard lanes on both sides.
struct Acc {
    buf: Vec<u32>,
    offset: usize,
    len: usize,
}

impl Acc {
    fn new(len: usize, offset: usize) -> Acc {
        Acc { buf: vec![GUARD_LANE; offset + len + GUARD_LEN], offset, len }
    }

    fn lanes(&self) -> &[u32] {
        &self.buf[self.offset..self.offset + self.len]
    }

    fn lanes_mut(&mut self) -> &mut [u32] {
        &mut self.buf[self.offset..self.offset + self.len]
    }

    fn guards_intact(&self) -> bool {
        let (before, rest) = self.buf.split_at(self.offset);
        before.iter().chain(&rest[self.len..]).all(|&x| x == GUARD_LANE)
    }
}

/// Runs a case step by step on kernel set `k`, returning the accumulator after every step and
/// the result lanes of every way of finishing (in [`FINISHES`] order).
fn run(k: &Kernels, c: &Case) -> (Vec<Vec<u32>>, Vec<Vec<u32>>) {
    let (op, dtype) = (c.op, c.dtype);
    let payloads: Vec<Payload> = c.inputs.iter().map(|lanes| Payload::new(dtype, lanes, c.offset)).collect();
    let lanes = c.inputs[0].len();
    let mut acc = Acc::new(lanes, c.acc_offset);
    let mut accs = Vec::new();
    k.load(dtype, acc.lanes_mut(), payloads[0].bytes());
    accs.push(acc.lanes().to_vec());
    let (last, middle) = payloads.split_last().expect("one contribution at least");
    if payloads.len() > 1 {
        for p in &middle[1..] {
            k.fold(op, dtype, acc.lanes_mut(), p.bytes());
            accs.push(acc.lanes().to_vec());
        }
    }
    let before_last = acc.lanes().to_vec();
    let mut results = Vec::new();
    for finish in FINISHES {
        let mut out = Payload::new(dtype, &vec![0; lanes], c.offset);
        match finish {
            _ if payloads.len() == 1 => k.store(dtype, acc.lanes(), out.bytes_mut()),
            Finish::FoldThenStore => {
                let mut fin = Acc::new(lanes, c.acc_offset);
                fin.lanes_mut().copy_from_slice(&before_last);
                k.fold(op, dtype, fin.lanes_mut(), last.bytes());
                accs.push(fin.lanes().to_vec());
                k.store(dtype, fin.lanes(), out.bytes_mut());
                assert!(fin.guards_intact(), "{}: fold wrote past the accumulator", k.name());
            }
            Finish::FoldStore => k.fold_store(op, dtype, acc.lanes(), last.bytes(), out.bytes_mut()),
            Finish::InPlace => {
                out = Payload::new(dtype, c.inputs.last().unwrap(), c.offset);
                k.fold_store_in_place(op, dtype, acc.lanes(), out.bytes_mut());
            }
        }
        // fold_store and fold_store_in_place leave the accumulator alone.
        assert_eq!(acc.lanes(), &before_last[..]);
        assert!(acc.guards_intact(), "{}: wrote past the accumulator", k.name());
        assert!(out.guards_intact(), "{}: {finish:?} wrote past the payload", k.name());
        results.push(from_wire(dtype, out.bytes()));
    }
    (accs, results)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        // Failing seeds are kept beside this file, as `random.proptest-regressions`.
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions"
        ))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn simd_kernels_match_the_reference(c in case()) {
        let (ref_accs, ref_results) = run(&Kernels::scalar(), &c);
        // The three ways of finishing agree on the reference itself.
        for r in &ref_results[1..] {
            prop_assert!(same_lanes(c.dtype, r, &ref_results[0]));
        }
        for k in super::kernel_sets().iter().skip(1) {
            let (accs, results) = run(k, &c);
            prop_assert_eq!(accs.len(), ref_accs.len());
            for (step, (a, r)) in accs.iter().zip(&ref_accs).enumerate() {
                prop_assert!(
                    same_acc(c.dtype, a, r),
                    "{}: accumulator after step {} differs:\n{:x?}\nreference\n{:x?}",
                    k.name(), step, a, r
                );
            }
            for (finish, (got, want)) in FINISHES.iter().zip(results.iter().zip(&ref_results)) {
                prop_assert!(
                    same_lanes(c.dtype, got, want),
                    "{}: result via {:?} differs:\n{:x?}\nreference\n{:x?}",
                    k.name(), finish, got, want
                );
            }
        }
    }

    #[test]
    fn simd_store_matches_the_reference(
        acc in prop::collection::vec(lane_bits(Dtype::F32), 0..=1100),
        offset in 0usize..64,
    ) {
        for dtype in Dtype::ALL {
            let mut want = Payload::new(dtype, &vec![0; acc.len()], offset);
            Kernels::scalar().store(dtype, &acc, want.bytes_mut());
            for k in super::kernel_sets().iter().skip(1) {
                let mut got = Payload::new(dtype, &vec![0; acc.len()], offset);
                k.store(dtype, &acc, got.bytes_mut());
                prop_assert!(same_lanes(
                    dtype,
                    &from_wire(dtype, got.bytes()),
                    &from_wire(dtype, want.bytes())
                ), "{} {} store", k.name(), dtype.name());
            }
        }
    }
}

/// Eight contributions of random integers in -1000..=1000 (rounded to the dtype, so integers
/// still) reduce to what a plain f64 model gives: their sums are exact in f32 and i32, so the
/// only rounding is the one at store, for f16 and bf16.
#[test]
fn reduction_matches_a_plain_model() {
    let lanes = 1029;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let inputs: Vec<Vec<u32>> = (0..8)
        .map(|_| (0..lanes).map(|_| (next() % 2001) as u32).map(|x| (x as i32 - 1000) as u32).collect())
        .collect();
    for k in super::kernel_sets() {
        for op in Op::ALL {
            for dtype in Dtype::ALL {
                let to_dtype = |x: i32| -> u32 {
                    match dtype {
                        Dtype::I32 => x as u32,
                        Dtype::F32 => (x as f32).to_bits(),
                        Dtype::F16 => half::f16::from_f32(x as f32).to_bits() as u32,
                        Dtype::Bf16 => half::bf16::from_f32(x as f32).to_bits() as u32,
                    }
                };
                let from_dtype = |b: u32| -> f64 {
                    match dtype {
                        Dtype::I32 => b as i32 as f64,
                        Dtype::F32 => f32::from_bits(b) as f64,
                        Dtype::F16 => half::f16::from_bits(b as u16).to_f64(),
                        Dtype::Bf16 => half::bf16::from_bits(b as u16).to_f64(),
                    }
                };
                let payloads: Vec<Vec<u8>> = inputs
                    .iter()
                    .map(|l| to_wire(dtype, &l.iter().map(|&x| to_dtype(x as i32)).collect::<Vec<_>>()))
                    .collect();
                let (got, _) = reduce(&k, op, dtype, &payloads, Finish::FoldStore);
                for (i, &lane) in got.iter().enumerate() {
                    let values = payloads.iter().map(|p| from_dtype(from_wire(dtype, p)[i]));
                    let want = match op {
                        Op::Sum => values.sum::<f64>(),
                        Op::Max => values.fold(f64::NEG_INFINITY, f64::max),
                        Op::Min => values.fold(f64::INFINITY, f64::min),
                    };
                    let want_bits = match dtype {
                        Dtype::I32 => want as i32 as u32,
                        Dtype::F32 => (want as f32).to_bits(),
                        Dtype::F16 => half::f16::from_f64(want).to_bits() as u32,
                        Dtype::Bf16 => half::bf16::from_f64(want).to_bits() as u32,
                    };
                    assert_eq!(lane, want_bits, "{} {} {} lane {i}: model {want}", k.name(), op.name(), dtype.name());
                }
            }
        }
    }
}
