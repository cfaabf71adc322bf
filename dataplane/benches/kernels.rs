//! Throughput of the reduction kernels (`dataplane::agg::kernels`), in lanes per second, for
//! every kernel set this CPU runs, on the chunk sizes the aggregator sees most (256 and 1024
//! lanes).
//!
//! Accumulators start on a cache line; payloads sit where a packet puts them, 62 bytes after one.
//! The `alignment` group shows what the other placements cost.
//!
//! Run with `cargo bench -p dataplane --no-default-features --bench kernels`; add a filter such
//! as `fold/sum/f32` to run a subset.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use dataplane::agg::kernels::Kernels;
use dataplane::wire::gradient::{Dtype, Op};

/// Lane counts per chunk.
const SIZES: [usize; 2] = [256, 1024];

/// Where a payload starts relative to a cache line: a frame starts on one, and Ethernet (14),
/// IPv4 (20), UDP (8) and the gradient header (20) come first.
const PAYLOAD_OFFSET: usize = 62;

/// A payload of `lanes` ordinary values (around 1.0 in the float dtypes) at [`PAYLOAD_OFFSET`]
/// from a cache line, so that it is as unaligned as in a packet.
struct Payload {
    buf: Vec<u8>,
    start: usize,
    len: usize,
}

impl Payload {
    fn new(dtype: Dtype, lanes: usize, offset: usize) -> Payload {
        let len = lanes * dtype.size();
        // Never grown past its capacity, so never moved.
        let mut buf = Vec::<u8>::with_capacity(64 + offset + len);
        let start = buf.as_ptr().align_offset(64) + offset;
        buf.resize(start, 0);
        for i in 0..lanes {
            let x = 1.0 + i as f32 / 1024.0;
            match dtype {
                Dtype::F32 => buf.extend(x.to_bits().to_le_bytes()),
                Dtype::F16 => buf.extend(half::f16::from_f32(x).to_bits().to_le_bytes()),
                Dtype::Bf16 => buf.extend(half::bf16::from_f32(x).to_bits().to_le_bytes()),
                Dtype::I32 => buf.extend((i as i32).to_le_bytes()),
            }
        }
        Payload { buf, start, len }
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[self.start..self.start + self.len]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..self.start + self.len]
    }
}

/// An accumulator of `lanes` lanes starting on a cache line, as the aggregator can lay its
/// slots out, or `misalign` lanes after one.
struct Acc {
    buf: Vec<u32>,
    start: usize,
    lanes: usize,
}

impl Acc {
    fn new(lanes: usize, misalign: usize) -> Acc {
        let buf = vec![0u32; lanes + 16 + misalign];
        let start = buf.as_ptr().align_offset(64) + misalign;
        Acc { buf, start, lanes }
    }

    fn get(&mut self) -> &mut [u32] {
        &mut self.buf[self.start..self.start + self.lanes]
    }
}

/// f32 sum fold of 1024 lanes with the accumulator and the payload on a cache line or off it.
fn bench_alignment(c: &mut Criterion) {
    let mut group = c.benchmark_group("alignment/fold/sum/f32/1024");
    let lanes = 1024;
    group.throughput(Throughput::Elements(lanes as u64));
    for k in Kernels::available() {
        for (acc_shift, src_shift) in [(0, 0), (0, PAYLOAD_OFFSET), (1, 0), (1, PAYLOAD_OFFSET)] {
            let mut acc = Acc::new(lanes, acc_shift);
            let src = Payload::new(Dtype::F32, lanes, src_shift);
            let id = format!("{}/acc+{}lanes/src+{}bytes", k.name(), acc_shift, src_shift);
            group.bench_function(id, |b| {
                b.iter(|| k.fold(Op::Sum, Dtype::F32, black_box(acc.get()), black_box(src.bytes())))
            });
        }
    }
    group.finish();
}

/// `fold` of every op and dtype: the per-contribution cost of a slot.
fn bench_fold(c: &mut Criterion) {
    for op in Op::ALL {
        for dtype in Dtype::ALL {
            let mut group = c.benchmark_group(format!("fold/{}/{}", op.name(), dtype.name()));
            for lanes in SIZES {
                group.throughput(Throughput::Elements(lanes as u64));
                let src = Payload::new(dtype, lanes, PAYLOAD_OFFSET);
                for k in Kernels::available() {
                    let mut acc = Acc::new(lanes, 0);
                    k.load(dtype, acc.get(), src.bytes());
                    group.bench_with_input(BenchmarkId::new(k.name(), lanes), &lanes, |b, _| {
                        b.iter(|| k.fold(op, dtype, black_box(acc.get()), black_box(src.bytes())))
                    });
                }
            }
            group.finish();
        }
    }
}

/// `fold_store_in_place` sum of every dtype: the last contribution of a slot, fused with the
/// emit into its own payload.
fn bench_emit(c: &mut Criterion) {
    for dtype in Dtype::ALL {
        let mut group = c.benchmark_group(format!("fold_store_in_place/sum/{}", dtype.name()));
        for lanes in SIZES {
            group.throughput(Throughput::Elements(lanes as u64));
            for k in Kernels::available() {
                let mut buf = Payload::new(dtype, lanes, PAYLOAD_OFFSET);
                let mut acc = Acc::new(lanes, 0);
                k.load(dtype, acc.get(), buf.bytes());
                let acc = acc.get();
                group.bench_with_input(BenchmarkId::new(k.name(), lanes), &lanes, |b, _| {
                    // Each pass adds the accumulator to the previous result: the values only
                    // grow (to infinity at worst), never into slow subnormals.
                    b.iter(|| k.fold_store_in_place(Op::Sum, dtype, acc, black_box(buf.bytes_mut())))
                });
            }
        }
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    targets = bench_fold, bench_emit, bench_alignment
}
criterion_main!(benches);
