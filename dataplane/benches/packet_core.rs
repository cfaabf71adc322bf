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
//! a jumbo datagram (8972 B); throughput in bytes.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use dataplane::action::Egress;
use dataplane::buf::{PacketBuf, VecBuf};
use dataplane::config::{load_str, DEFAULT_GRADIENT_UDP_PORT};
use dataplane::parse::parse;
use dataplane::table::Pipeline;
use dataplane::wire::checksum::{self, SumKernel};
use dataplane::wire::ipv4::Ipv4Packet;
use dataplane::wire::udp::UdpPacket;
use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

const PIPELINE: &str = include_str!("../../conf/bench/pipeline.toml");
const EMPTY: &str = include_str!("../../conf/bench/empty.toml");

/// Frames per measured batch (different keys, as in a stream of bursts).
const BATCH: usize = 256;
/// Ethernet + IPv4 + UDP header bytes.
const HEADERS: usize = 14 + 20 + 8;
/// Frame sizes (bytes, without FCS): 64 B and about 1 KiB on the wire.
const SIZES: [usize; 2] = [60, 1066];

/// xorshift64*: reproducible flows without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn ipv4(s: &str) -> u32 {
    u32::from(s.trim().parse::<std::net::Ipv4Addr>().expect("an IPv4 address"))
}

/// A route prefix: (network, length).
type Route = (u32, u32);
/// An ACL permit: (source value, source mask, lowest and highest UDP destination port).
type Permit = (u32, u32, u16, u16);

/// The route prefixes and the ACL permits of the bench config.
fn config_flows(text: &str) -> (Vec<Route>, Vec<Permit>) {
    let v: toml::Value = toml::from_str(text).expect("the bench config is TOML");
    let tables = v["table"].as_array().expect("[[table]]");
    let table = |name: &str| {
        tables
            .iter()
            .find(|t| t["name"].as_str() == Some(name))
            .and_then(|t| t["entry"].as_array())
            .unwrap_or_else(|| panic!("table {name} with entries"))
    };
    let routes = table("route")
        .iter()
        .map(|e| {
            let (net, len) = e["key"][0].as_str().unwrap().split_once('/').unwrap();
            (ipv4(net), len.parse().unwrap())
        })
        .collect();
    let permits = table("acl")
        .iter()
        .filter(|e| !e["action"].as_str().unwrap().contains("drop"))
        .filter_map(|e| {
            let (val, mask) = e["key"][0].as_str()?.split_once("&&&")?;
            let (lo, hi) = e["key"][2].as_str()?.split_once("->")?;
            Some((ipv4(val), ipv4(mask), lo.trim().parse().ok()?, hi.trim().parse().ok()?))
        })
        .collect();
    (routes, permits)
}

fn frame(size: usize, src: u32, dst: u32, sport: u16, dport: u16, fill: u8) -> Vec<u8> {
    let mut f = vec![0u8; size];
    f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0xaa]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip_len = (size - 14) as u16;
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&src.to_be_bytes());
    ip[16..20].copy_from_slice(&dst.to_be_bytes());
    Ipv4Packet::new_unchecked(&mut f[14..]).fill_checksum();
    let udp_len = (size - 34) as u16;
    let u = &mut f[34..];
    u[0..2].copy_from_slice(&sport.to_be_bytes());
    u[2..4].copy_from_slice(&dport.to_be_bytes());
    u[4..6].copy_from_slice(&udp_len.to_be_bytes());
    for (i, b) in f[HEADERS..].iter_mut().enumerate() {
        *b = fill.wrapping_add(i as u8);
    }
    UdpPacket::new_unchecked(&mut f[34..]).fill_checksum_v4(src.to_be_bytes(), dst.to_be_bytes());
    f
}

/// `BATCH` frames of `size` bytes that the pipeline forwards to port 1.
fn frames(size: usize, pipeline: &Pipeline) -> Vec<Vec<u8>> {
    let (routes, permits) = config_flows(PIPELINE);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut out = Vec::new();
    let mut check = pipeline.clone();
    while out.len() < BATCH {
        let (net, len) = routes[rng.below(routes.len() as u64) as usize];
        let host = if len == 32 { 0 } else { rng.next() as u32 & (u32::MAX >> len) };
        let (sv, sm, lo, hi) = permits[rng.below(permits.len() as u64) as usize];
        let src = sv | (rng.next() as u32 & !sm);
        let lo = lo.max(1024);
        let dport = lo + rng.below((hi - lo) as u64 + 1) as u16;
        let sport = 1024 + rng.below(60000) as u16;
        if [4791, DEFAULT_GRADIENT_UDP_PORT].contains(&dport) {
            continue;
        }
        let f = frame(size, src, net | host, sport, dport, out.len() as u8);
        let mut b = VecBuf::from_frame(&f);
        let mut p = parse(b.data(), DEFAULT_GRADIENT_UDP_PORT).expect("a valid frame");
        if check.apply(&mut b, &mut p, 0) == Egress::Port(1) {
            out.push(f);
        }
    }
    out
}

fn pipeline(text: &str) -> Pipeline {
    load_str(text, Path::new("conf/bench")).expect("the bench config loads").pipeline
}

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
        for (name, proto) in [("parse+empty_pipeline", &empty), ("parse+pipeline", &full)] {
            let mut pl = proto.clone();
            g.bench_function(name, |b| {
                b.iter(|| {
                    let mut n = 0u32;
                    for (buf, f) in bufs.iter_mut().zip(&pristine) {
                        buf.data_mut()[..HEADERS].copy_from_slice(&f[..HEADERS]);
                        let Ok(mut p) = parse(black_box(buf.data()), DEFAULT_GRADIENT_UDP_PORT) else {
                            continue;
                        };
                        if let Egress::Port(port) = pl.apply(buf, &mut p, 0) {
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
    let mut pl = full.clone();
    let parsed: Vec<_> = frames(60, &full)
        .iter()
        .map(|f| {
            let mut b = VecBuf::from_frame(f);
            let mut p = parse(b.data(), DEFAULT_GRADIENT_UDP_PORT).unwrap();
            pl.apply(&mut b, &mut p, 0);
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
                    n = n.wrapping_add(t.lookup(black_box(p), 0).unwrap_or(0));
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
