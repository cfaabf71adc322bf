//! Cost per packet of the packet core without DPDK: `parse` alone, parse + an empty pipeline,
//! and parse + the three-table pipeline of `conf/bench/pipeline.toml` (LPM route, ternary/range
//! ACL, exact L2), on 60 B and 1066 B UDP/IPv4 frames (frame sizes without FCS).
//!
//! `cargo bench -p dataplane --no-default-features --bench packet_core`
//!
//! The frames are built in memory from the config itself: each destination lies in one of its
//! route prefixes, each source and UDP port in one of its ACL permit entries, and every frame is
//! checked to be forwarded to port 1 before measuring. Checksums are set (the parser verifies
//! them). One iteration handles a batch of [`BATCH`] frames; criterion's throughput is in
//! packets. The pipeline rewrites the frame (next-hop MAC, TTL and IPv4 checksum), so the
//! pipeline benchmarks first restore the 42 header bytes of each frame (a small copy, included
//! in their time; the parse-only benchmark does not need it). `packet_core/lookup/TABLE` times
//! each table's lookup alone (key extraction and match) on parsed frames. `checksum/LEN/KERNEL`
//! times the RFC 1071 sum alone per kernel (`sum` is the dispatching entry point the parser
//! uses) over an IPv4 header (20 B), the UDP datagrams of the two frame sizes (26 B, 1032 B) and
//! a jumbo datagram (8972 B); throughput in bytes. The `router` rows parse as the datapath
//! does by default (`Checks::Router`: the IPv4 header checksum, not the UDP checksum of transit
//! traffic), beside the full parse's rows (`[dataplane] verify_transit = true`) in the same run.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use dataplane::action::Egress;
use dataplane::buf::{PacketBuf, VecBuf};
use dataplane::config::DEFAULT_GRADIENT_UDP_PORT;
use dataplane::meta::Meta;
use dataplane::parse::{parse, parse_checked, Checks, RxChecksum};
use dataplane::table::PipelineState;
use dataplane::wire::checksum::{self, SumKernel};
use std::hint::black_box;
use std::time::Duration;

const EMPTY: &str = include_str!("../../conf/bench/empty.toml");

/// Frame sizes (bytes, without FCS): 64 B and about 1 KiB on the wire.
const SIZES: [usize; 2] = [60, 1066];

#[path = "common/pipeline_workload.rs"]
mod pipeline_workload;
use pipeline_workload::*;

fn packet_core(c: &mut Criterion) {
    let full = pipeline(PIPELINE);
    let empty = pipeline(EMPTY);
    for size in SIZES {
        let pristine = frames(size, &full);
        let mut bufs: Vec<VecBuf> = pristine.iter().map(|f| VecBuf::from_frame(f)).collect();
        let mut g = c.benchmark_group(format!("packet_core/{size}B"));
        g.throughput(Throughput::Elements(BATCH as u64));
        g.bench_function("parse", |b| {
            b.iter(|| {
                let mut n = 0u32;
                for buf in &bufs {
                    let p = parse(black_box(buf.data()), DEFAULT_GRADIENT_UDP_PORT);
                    n = n.wrapping_add(p.map(|p| p.l4_offset).unwrap_or(0));
                }
                n
            })
        });
        g.bench_function("parse_router", |b| {
            b.iter(|| {
                let mut n = 0u32;
                for buf in &bufs {
                    let p = parse_checked(
                        black_box(buf.data()),
                        DEFAULT_GRADIENT_UDP_PORT,
                        RxChecksum::UNKNOWN,
                        Checks::Router,
                    );
                    n = n.wrapping_add(p.map(|p| p.l4_offset).unwrap_or(0));
                }
                n
            })
        });
        for (name, proto, checks) in [
            ("parse+empty_pipeline", &empty, Checks::All),
            ("parse+pipeline", &full, Checks::All),
            ("parse_router+pipeline", &full, Checks::Router),
        ] {
            let pl = proto.clone();
            let mut counts = PipelineState::new(&pl);
            g.bench_function(name, |b| {
                b.iter(|| {
                    let mut n = 0u32;
                    for (buf, f) in bufs.iter_mut().zip(&pristine) {
                        buf.data_mut()[..HEADERS].copy_from_slice(&f[..HEADERS]);
                        let parsed = parse_checked(
                            black_box(buf.data()),
                            DEFAULT_GRADIENT_UDP_PORT,
                            RxChecksum::UNKNOWN,
                            checks,
                        );
                        let Ok(mut p) = parsed else {
                            continue;
                        };
                        if let Egress::Port(port) = pl.apply(&mut counts, buf, &mut p, &mut Meta::new(0)) {
                            n = n.wrapping_add(port as u32);
                        }
                    }
                    assert_eq!(n as usize, BATCH, "every frame is forwarded to port 1");
                    n
                })
            });
        }
        g.finish();
    }
    // Each table's lookup alone (key extraction + match, no actions, no counters), over the
    // parsed 60 B frames as the pipeline leaves them (eth.dst rewritten to the next hop, as the
    // l2 table sees it).
    let pl = full.clone();
    let mut counts = PipelineState::new(&pl);
    let parsed: Vec<_> = frames(60, &full)
        .iter()
        .map(|f| {
            let mut b = VecBuf::from_frame(f);
            let mut p = parse(b.data(), DEFAULT_GRADIENT_UDP_PORT).unwrap();
            pl.apply(&mut counts, &mut b, &mut p, &mut Meta::new(0));
            p
        })
        .collect();
    let mut g = c.benchmark_group("packet_core/lookup");
    g.throughput(Throughput::Elements(BATCH as u64));
    for t in &full.tables {
        g.bench_function(t.name.as_str(), |b| {
            b.iter(|| {
                let mut n = 0usize;
                for p in &parsed {
                    n = n.wrapping_add(t.lookup(black_box(p), &Meta::new(0)).unwrap_or(0));
                }
                n
            })
        });
    }
    g.finish();
}

fn checksum_kernels(c: &mut Criterion) {
    let data: Vec<u8> = (0..9000u32).map(|i| (i * 7 + 3) as u8).collect();
    for len in [20usize, 26, 1032, 8972] {
        let mut g = c.benchmark_group(format!("checksum/{len}B"));
        g.throughput(Throughput::Bytes(len as u64));
        // Offset 2: as a UDP datagram after a 14-byte Ethernet and 20-byte IPv4 header sits
        // against a 64-byte aligned buffer.
        let d = &data[2..2 + len];
        g.bench_function("sum", |b| b.iter(|| checksum::sum(black_box(d))));
        for k in SumKernel::available() {
            g.bench_function(k.name(), |b| b.iter(|| k.sum(black_box(d))));
        }
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    targets = packet_core, checksum_kernels
}
criterion_main!(benches);
