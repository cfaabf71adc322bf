//! The packet-core workload shared by the `packet_core` bench and the `pipeline_profile`
//! example: the bench config (`conf/bench/pipeline.toml`) and [`BATCH`] valid UDP/IPv4 frames
//! that its three tables forward to port 1. Included by both with `#[path]` (not a bench target
//! of its own).
#![allow(dead_code)]

use dataplane::action::Egress;
use dataplane::buf::{PacketBuf, VecBuf};
use dataplane::config::{load_str, DEFAULT_GRADIENT_UDP_PORT};
use dataplane::meta::Meta;
use dataplane::parse::parse;
use dataplane::table::{Pipeline, PipelineState};
use dataplane::wire::ipv4::Ipv4Packet;
use dataplane::wire::udp::UdpPacket;
use std::path::Path;

pub const PIPELINE: &str = include_str!("../../../conf/bench/pipeline.toml");

/// Frames per measured batch (different keys, as in a stream of bursts).
pub const BATCH: usize = 256;
/// Ethernet + IPv4 + UDP header bytes.
pub const HEADERS: usize = 14 + 20 + 8;

/// xorshift64*: reproducible flows without a dependency.
pub struct Rng(u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

pub fn ipv4(s: &str) -> u32 {
    u32::from(s.trim().parse::<std::net::Ipv4Addr>().expect("an IPv4 address"))
}

/// A route prefix: (network, length).
pub type Route = (u32, u32);
/// An ACL permit: (source value, source mask, lowest and highest UDP destination port).
pub type Permit = (u32, u32, u16, u16);

/// The route prefixes and the ACL permits of the bench config.
pub fn config_flows(text: &str) -> (Vec<Route>, Vec<Permit>) {
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

pub fn frame(size: usize, src: u32, dst: u32, sport: u16, dport: u16, fill: u8) -> Vec<u8> {
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
pub fn frames(size: usize, pipeline: &Pipeline) -> Vec<Vec<u8>> {
    let (routes, permits) = config_flows(PIPELINE);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut out = Vec::new();
    let mut counts = PipelineState::new(pipeline);
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
        if pipeline.apply(&mut counts, &mut b, &mut p, &mut Meta::new(0)) == Egress::Port(1) {
            out.push(f);
        }
    }
    out
}

pub fn pipeline(text: &str) -> Pipeline {
    load_str(text, Path::new("conf/bench")).expect("the bench config loads").pipeline
}
