//! A fixed amount of packet-core work, for instruction counting under callgrind: the frames of
//! the `packet_core` bench (`conf/bench/pipeline.toml`), run `ROUNDS` times through `parse`,
//! parse + pipeline, or one table's lookup, with nothing else in [`run`].
//!
//! ```text
//! cargo build --release -p dataplane --no-default-features --example pipeline_profile
//! valgrind --tool=callgrind --toggle-collect='*pipeline_profile*run*' \
//!     target/release/examples/pipeline_profile 60 pipeline 100
//! ```
//!
//! Instructions per packet = the `run` total / (`ROUNDS` * 256).

use dataplane::action::Egress;
use dataplane::buf::{PacketBuf, VecBuf};
use dataplane::config::{load_str, DEFAULT_GRADIENT_UDP_PORT};
use dataplane::parse::{parse, Parsed};
use dataplane::table::Pipeline;
use dataplane::wire::ipv4::Ipv4Packet;
use dataplane::wire::udp::UdpPacket;
use std::hint::black_box;
use std::path::Path;

const PIPELINE: &str = include_str!("../../conf/bench/pipeline.toml");
const BATCH: usize = 256;
const HEADERS: usize = 14 + 20 + 8;

fn ipv4(s: &str) -> u32 {
    u32::from(s.trim().parse::<std::net::Ipv4Addr>().expect("an IPv4 address"))
}

/// The route prefixes and the ACL permits (source value, mask, lowest and highest port).
#[allow(clippy::type_complexity)]
fn config_flows() -> (Vec<(u32, u32)>, Vec<(u32, u32, u16, u16)>) {
    let v: toml::Value = toml::from_str(PIPELINE).expect("the bench config is TOML");
    let tables = v["table"].as_array().expect("[[table]]");
    let table = |name: &str| tables.iter().find(|t| t["name"].as_str() == Some(name)).unwrap()["entry"].clone();
    let routes = table("route")
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let (net, len) = e["key"][0].as_str().unwrap().split_once('/').unwrap();
            (ipv4(net), len.parse().unwrap())
        })
        .collect();
    let permits = table("acl")
        .as_array()
        .unwrap()
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

fn frame(size: usize, src: u32, dst: u32, sport: u16, dport: u16) -> Vec<u8> {
    let mut f = vec![0u8; size];
    f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0xaa]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&((size - 14) as u16).to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&src.to_be_bytes());
    ip[16..20].copy_from_slice(&dst.to_be_bytes());
    Ipv4Packet::new_unchecked(&mut f[14..]).fill_checksum();
    let u = &mut f[34..];
    u[0..2].copy_from_slice(&sport.to_be_bytes());
    u[2..4].copy_from_slice(&dport.to_be_bytes());
    u[4..6].copy_from_slice(&((size - 34) as u16).to_be_bytes());
    for (i, b) in f[HEADERS..].iter_mut().enumerate() {
        *b = i as u8;
    }
    UdpPacket::new_unchecked(&mut f[34..]).fill_checksum_v4(src.to_be_bytes(), dst.to_be_bytes());
    f
}

/// `BATCH` frames of `size` bytes that the pipeline forwards to port 1.
fn frames(size: usize, pipeline: &Pipeline) -> Vec<Vec<u8>> {
    let (routes, permits) = config_flows();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rng = move || {
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        seed.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    let mut check = pipeline.clone();
    let mut out = Vec::new();
    while out.len() < BATCH {
        let (net, len) = routes[(rng() % routes.len() as u64) as usize];
        let host = if len == 32 { 0 } else { rng() as u32 & (u32::MAX >> len) };
        let (sv, sm, lo, hi) = permits[(rng() % permits.len() as u64) as usize];
        let src = sv | (rng() as u32 & !sm);
        let lo = lo.max(1024);
        let dport = lo + (rng() % ((hi - lo) as u64 + 1)) as u16;
        if [4791, DEFAULT_GRADIENT_UDP_PORT].contains(&dport) {
            continue;
        }
        let f = frame(size, src, net | host, 1024 + (rng() % 60000) as u16, dport);
        let mut b = VecBuf::from_frame(&f);
        let mut p = parse(b.data(), DEFAULT_GRADIENT_UDP_PORT).expect("a valid frame");
        if check.apply(&mut b, &mut p, 0) == Egress::Port(1) {
            out.push(f);
        }
    }
    out
}

/// The measured work: `rounds` passes over the batch.
#[inline(never)]
fn run(
    mode: &str,
    rounds: usize,
    pl: &mut Pipeline,
    bufs: &mut [VecBuf],
    pristine: &[Vec<u8>],
    parsed: &[Parsed],
) -> u64 {
    let mut n = 0u64;
    for _ in 0..rounds {
        match mode {
            "parse" => {
                for b in bufs.iter() {
                    n += parse(black_box(b.data()), DEFAULT_GRADIENT_UDP_PORT).map(|p| p.l4_offset as u64).unwrap_or(0);
                }
            }
            "pipeline" => {
                for (b, f) in bufs.iter_mut().zip(pristine) {
                    b.data_mut()[..HEADERS].copy_from_slice(&f[..HEADERS]);
                    let Ok(mut p) = parse(black_box(b.data()), DEFAULT_GRADIENT_UDP_PORT) else { continue };
                    if let Egress::Port(port) = pl.apply(b, &mut p, 0) {
                        n += port as u64;
                    }
                }
            }
            table => {
                let t = pl.tables.iter().find(|t| t.name == table).expect("a table of the bench config");
                for p in parsed {
                    n += t.lookup(black_box(p), 0).unwrap_or(0) as u64;
                }
            }
        }
    }
    n
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let size: usize = args.get(1).map_or(60, |s| s.parse().expect("a frame size"));
    let mode = args.get(2).map_or("pipeline", |s| s.as_str());
    let rounds: usize = args.get(3).map_or(100, |s| s.parse().expect("a round count"));
    let mut pl = load_str(PIPELINE, Path::new("conf/bench")).expect("the bench config loads").pipeline;
    let pristine = frames(size, &pl);
    let mut bufs: Vec<VecBuf> = pristine.iter().map(|f| VecBuf::from_frame(f)).collect();
    let mut warm = pl.clone();
    let parsed: Vec<Parsed> = pristine
        .iter()
        .map(|f| {
            let mut b = VecBuf::from_frame(f);
            let mut p = parse(b.data(), DEFAULT_GRADIENT_UDP_PORT).unwrap();
            warm.apply(&mut b, &mut p, 0);
            p
        })
        .collect();
    let n = run(mode, rounds, &mut pl, &mut bufs, &pristine, &parsed);
    println!("{mode} {size} B: {} packets, checksum {n}", rounds * BATCH);
}
