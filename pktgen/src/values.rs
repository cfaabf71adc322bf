//! The value model of AllReduce workloads: what rank `r` contributes at tensor element `g` in
//! round `k` (the header's round field), and the right result. One model for both outputs: the
//! pcap writer ([`crate::workload`], [`crate::pcap`], `expected.json`) and the live generator
//! (`[[allreduce]]`, [`crate::live::allreduce`]) take their payloads and references from it, so
//! the same (round, rank, offset) gives the same payload bytes in both.
//!
//! # Two kinds
//!
//! | kind | values | reference | storage | default of |
//! | --- | --- | --- | --- | --- |
//! | [`ValueKind::Exact`] (`"exact"`) | small integers from period-61 tables | exact for any fold order | 61 lanes per rank | the live generator |
//! | [`ValueKind::Normal`] (`"normal"`) | floats about N(0, 1), i32 uniform | rank order with [`Kernels::scalar`] | whole tensors per round | the pcap writer |
//!
//! **Exact.** Rank `r`'s lane at element `g` in round `k` is `V[r][(g + 7k) mod 61]`
//! ([`table_index`], [`PERIOD`]), a small integer of a table of 61 per rank drawn from `seed`
//! ([`lane_value`]): in `-m..=m` with `m` = 256 (bf16), 2048 (f16) or 2^24 (f32, i32) divided by
//! the number of workers ([`magnitude`], at least 1), and `V[r][0] = 1`. Every value, and every
//! partial sum in any order, is an integer the dtype holds exactly, so the sum, max and min of
//! each lane are exact in every dtype whatever the arrival order (rule 7 does not matter), with
//! f16/bf16 rounding once at emit (rule 6): any appliance, deterministic or not, must send the
//! reference bit for bit. No tensor is stored: a chunk's payload and its reference are slices of
//! [`ExactTables`].
//!
//! **Normal.** Every round uses fresh tensors, one per rank, derived from `seed`, the round and
//! the rank only: floats are about N(0, 1) (a sum of uniforms, so the values are the same on
//! every platform), with one lane in eight an exact small value (0, -0, 1, -1, 0.5, 2, -0.25,
//! 3); i32 lanes are uniform over the full range; f16 and bf16 lanes are the f32 value rounded to
//! nearest-even. The reference is the reduction of the ranks' chunks in rank order with
//! [`Kernels::scalar`]: what a `deterministic = true` appliance must send bit for bit (and any
//! appliance for i32, and for max and min). A lane is known only by generating its rank's whole
//! tensor of that round ([`Model::tensor`]).

use dataplane::agg::kernels::Kernels;
use dataplane::wire::gradient::{Dtype, Op};
use rand::{RngExt, SeedableRng};
use rand_pcg::Pcg64;

/// Which values the ranks send (see the module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum ValueKind {
    /// Period-61 tables of small integers: the result is exact in any fold order.
    Exact,
    /// Fresh N(0, 1)-like tensors every round: the result is known in rank order.
    #[default]
    Normal,
}

impl ValueKind {
    /// `"exact"` or `"normal"`, as in the CLI and the config.
    pub fn name(self) -> &'static str {
        match self {
            ValueKind::Exact => "exact",
            ValueKind::Normal => "normal",
        }
    }

    /// The kind named `s` (`"exact"` or `"normal"`).
    pub fn from_name(s: &str) -> Option<ValueKind> {
        match s {
            "exact" => Some(ValueKind::Exact),
            "normal" => Some(ValueKind::Normal),
            _ => None,
        }
    }
}

/// The period of the exact value tables (lanes): a prime, so that chunks of any size see every
/// value.
pub const PERIOD: usize = 61;

/// A 64-bit mix (SplitMix64's finaliser): derives independent seeds from (seed, stream).
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The largest magnitude of an exact lane for `workers` workers in `dtype`: sums of that many
/// stay integers the dtype holds exactly (bf16: 256, f16: 2048, f32 and i32: 2^24, divided by
/// the workers, at least 1).
pub fn magnitude(dtype: Dtype, workers: usize) -> i32 {
    let limit: i64 = match dtype {
        Dtype::Bf16 => 256,
        Dtype::F16 => 2048,
        Dtype::F32 | Dtype::I32 => 1 << 24,
    };
    (limit / workers.max(1) as i64).max(1) as i32
}

/// Rank `rank`'s exact value at table index `j` (0..[`PERIOD`]), in `-m..=m`; 1 at index 0.
pub fn lane_value(seed: u64, rank: u16, j: usize, m: i32) -> i32 {
    if j == 0 {
        return 1;
    }
    let h = mix(seed ^ mix(((rank as u64) << 32) | j as u64));
    (h % (2 * m as u64 + 1)) as i64 as i32 - m
}

/// Appends the integer `v` as one little-endian `dtype` lane (exact for the tables' values).
pub fn encode(dtype: Dtype, v: i32, out: &mut Vec<u8>) {
    match dtype {
        Dtype::F32 => out.extend_from_slice(&(v as f32).to_le_bytes()),
        Dtype::F16 => out.extend_from_slice(&half::f16::from_f32(v as f32).to_le_bytes()),
        Dtype::Bf16 => out.extend_from_slice(&half::bf16::from_f32(v as f32).to_le_bytes()),
        Dtype::I32 => out.extend_from_slice(&v.to_le_bytes()),
    }
}

/// The exact table index of tensor element `g` in round `round`: `(g + 7 round) mod 61`.
#[inline(always)]
pub fn table_index(g: u32, round: u32) -> usize {
    ((g as u64 % PERIOD as u64 + 7 * (round as u64 % PERIOD as u64)) % PERIOD as u64) as usize
}

/// The value model of one collective: the kind and what the values depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Model {
    /// Exact tables or normal tensors.
    pub kind: ValueKind,
    /// Seed of the values.
    pub seed: u64,
    /// Number of ranks (0..workers).
    pub workers: u16,
    /// Lane type.
    pub dtype: Dtype,
    /// The reduction of the reference.
    pub op: Op,
    /// Elements of a tensor.
    pub tensor_elements: u64,
}

impl Model {
    /// Rank `rank`'s whole tensor in round `round` (the header's round field): `tensor_elements`
    /// little-endian lanes, `tensor_elements x dtype size` bytes.
    pub fn tensor(&self, round: u32, rank: u16) -> Vec<u8> {
        match self.kind {
            ValueKind::Exact => self.exact_tensor(round, rank),
            ValueKind::Normal => self.normal_tensor(round, rank),
        }
    }

    fn exact_tensor(&self, round: u32, rank: u16) -> Vec<u8> {
        let m = magnitude(self.dtype, self.workers as usize);
        let mut table = Vec::with_capacity(PERIOD * self.dtype.size());
        for j in 0..PERIOD {
            encode(self.dtype, lane_value(self.seed, rank, j, m), &mut table);
        }
        let s = self.dtype.size();
        let mut out = Vec::with_capacity(self.tensor_elements as usize * s);
        for g in 0..self.tensor_elements {
            let j = table_index(g as u32, round);
            out.extend_from_slice(&table[j * s..(j + 1) * s]);
        }
        out
    }

    fn normal_tensor(&self, round: u32, rank: u16) -> Vec<u8> {
        let stream = mix(self.seed) ^ mix(((round as u64) << 16) | rank as u64);
        let mut rng = Pcg64::seed_from_u64(stream);
        let mut out = Vec::with_capacity(self.tensor_elements as usize * self.dtype.size());
        const EXACT: [f32; 8] = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, -0.25, 3.0];
        for _ in 0..self.tensor_elements {
            if self.dtype == Dtype::I32 {
                out.extend_from_slice(&rng.random::<u32>().to_le_bytes());
                continue;
            }
            let v = if rng.random_range(0u32..8) == 0 {
                EXACT[rng.random_range(0..EXACT.len())]
            } else {
                // Irwin-Hall with 4 uniforms, scaled to variance 1: pure IEEE arithmetic.
                let s: f64 = (0..4).map(|_| rng.random::<f64>()).sum();
                ((s - 2.0) * 3f64.sqrt()) as f32
            };
            match self.dtype {
                Dtype::F32 => out.extend_from_slice(&v.to_le_bytes()),
                Dtype::F16 => out.extend_from_slice(&half::f16::from_f32(v).to_le_bytes()),
                Dtype::Bf16 => out.extend_from_slice(&half::bf16::from_f32(v).to_le_bytes()),
                Dtype::I32 => unreachable!("handled above"),
            }
        }
        out
    }

    /// Every rank's tensor of round `round`, by rank.
    pub fn tensors(&self, round: u32) -> Vec<Vec<u8>> {
        (0..self.workers).map(|k| self.tensor(round, k)).collect()
    }

    /// The bytes of chunk (`offset`, `count`) (elements) within a whole tensor.
    pub fn chunk_of<'a>(&self, tensor: &'a [u8], offset: u32, count: u32) -> &'a [u8] {
        let s = self.dtype.size();
        &tensor[offset as usize * s..(offset as usize + count as usize) * s]
    }

    /// The reference result of chunk (`offset`, `count`) given every rank's tensor (`tensors[k]`
    /// is rank k's): reduced in rank order with [`Kernels::scalar`]. For the exact kind this is
    /// also the reduction in any other order ([`ExactTables::result`]).
    pub fn reference_chunk(&self, tensors: &[Vec<u8>], offset: u32, count: u32) -> Vec<u8> {
        let k = Kernels::scalar();
        let mut acc = vec![0u32; count as usize];
        k.load(self.dtype, &mut acc, self.chunk_of(&tensors[0], offset, count));
        for t in &tensors[1..] {
            k.fold(self.op, self.dtype, &mut acc, self.chunk_of(t, offset, count));
        }
        let mut out = vec![0u8; count as usize * self.dtype.size()];
        k.store(self.dtype, &acc, &mut out);
        out
    }

    /// The reference of the whole tensor of round `round` given every rank's tensor.
    pub fn reference(&self, tensors: &[Vec<u8>]) -> Vec<u8> {
        self.reference_chunk(tensors, 0, self.tensor_elements as u32)
    }

    /// The exact tables of this model for chunks of at most `chunk` lanes (whatever its kind).
    pub fn exact_tables(&self, chunk: u32) -> ExactTables {
        ExactTables::new(self, chunk)
    }
}

/// Every rank's exact values and the reference, as bytes, for `PERIOD + chunk` lanes (the table
/// repeated), so that a chunk's payload and its result are one slice each: what the live
/// generator sends and checks against without storing a tensor.
#[derive(Debug, Clone)]
pub struct ExactTables {
    /// Bytes per lane.
    pub lane: usize,
    /// By rank: `(PERIOD + chunk) x lane` bytes.
    pub workers: Vec<Vec<u8>>,
    /// The reference, reduced with the model's op: `(PERIOD + chunk) x lane` bytes.
    pub expected: Vec<u8>,
}

impl ExactTables {
    /// The tables of `model` for chunks of at most `chunk` lanes.
    pub fn new(model: &Model, chunk: u32) -> ExactTables {
        let n = model.workers as usize;
        let m = magnitude(model.dtype, n);
        let len = PERIOD + chunk as usize;
        let mut workers = vec![Vec::with_capacity(len * model.dtype.size()); n];
        let mut expected = Vec::with_capacity(len * model.dtype.size());
        for i in 0..len {
            let j = i % PERIOD;
            let vals: Vec<i32> = (0..n).map(|r| lane_value(model.seed, r as u16, j, m)).collect();
            for (r, &v) in vals.iter().enumerate() {
                encode(model.dtype, v, &mut workers[r]);
            }
            let red = match model.op {
                Op::Sum => {
                    let s: i64 = vals.iter().map(|&v| v as i64).sum();
                    s as i32
                }
                Op::Max => *vals.iter().max().expect("a worker"),
                Op::Min => *vals.iter().min().expect("a worker"),
            };
            encode(model.dtype, red, &mut expected);
        }
        ExactTables { lane: model.dtype.size(), workers, expected }
    }

    /// Rank `rank`'s payload of the chunk at `offset` with `count` lanes in `round`.
    #[inline(always)]
    pub fn payload(&self, rank: usize, offset: u32, count: u32, round: u32) -> &[u8] {
        let j = table_index(offset, round);
        &self.workers[rank][j * self.lane..(j + count as usize) * self.lane]
    }

    /// The right result of that chunk.
    #[inline(always)]
    pub fn result(&self, offset: u32, count: u32, round: u32) -> &[u8] {
        let j = table_index(offset, round);
        &self.expected[j * self.lane..(j + count as usize) * self.lane]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(kind: ValueKind, dtype: Dtype, op: Op, workers: u16, tensor: u64) -> Model {
        Model { kind, seed: 5, workers, dtype, op, tensor_elements: tensor }
    }

    /// Lanes as f64 (exact for every dtype's values).
    fn lanes(dtype: Dtype, b: &[u8]) -> Vec<f64> {
        match dtype {
            Dtype::F32 => b.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64).collect(),
            Dtype::F16 => b.chunks(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f64()).collect(),
            Dtype::Bf16 => b.chunks(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f64()).collect(),
            Dtype::I32 => b.chunks(4).map(|c| i32::from_le_bytes(c.try_into().unwrap()) as f64).collect(),
        }
    }

    /// Every exact value and every reduction of the tables is exact in every dtype: decoding
    /// the encoded reference gives the integer reduction, for 1 to 253 workers.
    #[test]
    fn exact_reductions_are_exact_in_every_dtype() {
        for dtype in [Dtype::F32, Dtype::F16, Dtype::Bf16, Dtype::I32] {
            for n in [1usize, 2, 4, 16, 253] {
                let m = magnitude(dtype, n);
                for j in 0..PERIOD {
                    let vals: Vec<i32> = (0..n).map(|r| lane_value(7, r as u16, j, m)).collect();
                    assert!(vals.iter().all(|v| v.abs() <= m));
                    let sum: i64 = vals.iter().map(|&v| v as i64).sum();
                    let mut b = Vec::new();
                    encode(dtype, sum as i32, &mut b);
                    assert_eq!(lanes(dtype, &b)[0] as i64, sum, "{dtype:?} {n} workers lane {j}");
                }
            }
        }
    }

    /// The reference of each kind is the reduction of the payloads: the rank-order
    /// `Kernels::scalar` fold of the tensors equals the lane-wise reduction computed here in
    /// f64 (exact kind: in every dtype and for every op; normal kind: i32 and max/min, which are
    /// exact, and f32 sums in rank order). For the exact kind the reverse rank order gives the
    /// same bytes, and both equal the tables' reference slices.
    #[test]
    fn the_reference_of_each_kind_is_the_reduction_of_the_payloads() {
        let (n, tensor, chunk) = (5u16, 300u64, 64u32);
        for kind in [ValueKind::Exact, ValueKind::Normal] {
            for dtype in [Dtype::F32, Dtype::F16, Dtype::Bf16, Dtype::I32] {
                for op in Op::ALL {
                    let md = model(kind, dtype, op, n, tensor);
                    for round in [0u32, 1, 60, 61, u32::MAX] {
                        let ts = md.tensors(round);
                        assert!(ts.iter().all(|t| t.len() == tensor as usize * dtype.size()));
                        let got = md.reference(&ts);
                        let ls: Vec<Vec<f64>> = ts.iter().map(|t| lanes(dtype, t)).collect();
                        let ctx = format!("{kind:?} {dtype:?} {op:?} round {round}");
                        let exact_in_f64 = kind == ValueKind::Exact || op != Op::Sum || dtype == Dtype::I32;
                        if exact_in_f64 {
                            let want: Vec<f64> = (0..tensor as usize)
                                .map(|i| {
                                    let it = ls.iter().map(|l| l[i]);
                                    match op {
                                        Op::Sum if dtype == Dtype::I32 => {
                                            it.fold(0i32, |a, b| a.wrapping_add(b as i32)) as f64
                                        }
                                        Op::Sum => it.sum(),
                                        Op::Max => it.fold(f64::MIN, f64::max),
                                        Op::Min => it.fold(f64::MAX, f64::min),
                                    }
                                })
                                .collect();
                            assert_eq!(lanes(dtype, &got), want, "{ctx}");
                        } else if dtype == Dtype::F32 {
                            // Float sums: f32 additions in rank order.
                            let want: Vec<f64> = (0..tensor as usize)
                                .map(|i| {
                                    ls.iter()
                                        .fold(None, |a: Option<f32>, l| {
                                            Some(a.map_or(l[i] as f32, |a| a + l[i] as f32))
                                        })
                                        .unwrap() as f64
                                })
                                .collect();
                            assert_eq!(lanes(dtype, &got), want, "{ctx}");
                        }
                        if kind == ValueKind::Exact {
                            let rev: Vec<Vec<u8>> = ts.iter().rev().cloned().collect();
                            assert_eq!(md.reference(&rev), got, "{ctx}: any order");
                            let t = md.exact_tables(chunk);
                            for off in (0..tensor as u32).step_by(chunk as usize) {
                                let count = chunk.min(tensor as u32 - off);
                                assert_eq!(t.result(off, count, round), md.chunk_of(&got, off, count), "{ctx}");
                                for r in 0..n {
                                    assert_eq!(
                                        t.payload(r as usize, off, count, round),
                                        md.chunk_of(&ts[r as usize], off, count),
                                        "{ctx}"
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn kinds_have_names_and_rounds_differ() {
        for k in [ValueKind::Exact, ValueKind::Normal] {
            assert_eq!(ValueKind::from_name(k.name()), Some(k));
            let md = model(k, Dtype::F32, Op::Sum, 3, 200);
            assert_ne!(md.tensor(0, 1), md.tensor(1, 1), "{k:?}: rounds differ");
            assert_ne!(md.tensor(0, 1), md.tensor(0, 2), "{k:?}: ranks differ");
            assert_eq!(md.tensor(9, 2), md.tensor(9, 2));
        }
        assert_eq!(ValueKind::from_name("uniform"), None);
        assert_eq!(ValueKind::default(), ValueKind::Normal);
    }
}
