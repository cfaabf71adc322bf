//! A pipeline whose second table is too large for the caches: an ACL-like first table (small,
//! ternary) and an L2 table (exact on `eth.dst`) of `ENTRIES` MACs, 16 bytes a slot at most half
//! full (64 MiB for 2 M entries: past L3). 60-byte UDP frames to MACs drawn at random from the
//! table go through `Datapath::process_burst` in bursts of 32, as the worker runs them, two
//! ways in alternating blocks of rounds: each packet alone after the first table's batched
//! lookups (`Staging::Never`), and every table staged across the burst with prefetches
//! (`Staging::Always`, `table::burst`); prints ns per packet of each and what `Staging::Auto`
//! (the appliance's) chooses for this table size.
//!
//! ```text
//! cargo run --release -p dataplane --no-default-features --example big_table -- [ENTRIES] [ROUNDS]
//! for n in 1000 8000 16000 100000 2000000; do target/release/examples/big_table $n 400; done
//! ```

use dataplane::action::{Action, ActionList};
use dataplane::buf::{PacketIo, VecBuf};
use dataplane::config::load_str;
use dataplane::datapath::{Datapath, Staging};
use dataplane::table::value::MatchValue;
use dataplane::wire::build::{build, FrameSpec, IpAddrBytes};
use std::path::Path;
use std::time::Instant;

const CONF: &str = r#"
[[port]]
vdev = "net_null0"
[[port]]
vdev = "net_null1"
[[table]]
name = "acl"
key = [{ field = "ipv4.proto", match = "ternary" }, { field = "udp.dst_port", match = "range" }]
default_action = "count(passed)"
entry = [{ key = ["6&&&0xff", "22->22"], action = "drop", priority = 1 }]
[[table]]
name = "l2"
key = [{ field = "eth.dst", match = "exact" }]
default_action = "drop"
"#;

/// Frames in the replayed set (each round sends all of them).
const FRAMES: usize = 8192;
const BURST: usize = 32;

/// An I/O that keeps what is sent for the next round.
struct Keep(Vec<VecBuf>);

impl PacketIo for Keep {
    type Buf = VecBuf;
    fn ports(&self) -> u16 {
        2
    }
    fn alloc(&mut self) -> Option<VecBuf> {
        None
    }
    fn send(&mut self, _port: u16, buf: VecBuf) {
        self.0.push(buf);
    }
}

fn mac(i: u64) -> [u8; 6] {
    let b = (i | 0x0200_0000_0000).to_be_bytes();
    [b[2], b[3], b[4], b[5], b[6], b[7]]
}

/// A 60-byte UDP frame (18 bytes of payload) to Ethernet address `dst`.
fn udp_frame(dst: [u8; 6]) -> Vec<u8> {
    let spec = FrameSpec {
        src_mac: "02:00:00:00:00:09".parse().unwrap(),
        dst_mac: dataplane::wire::ethernet::EthernetAddress(dst),
        src_ip: IpAddrBytes::V4([192, 168, 0, 1]),
        dst_ip: IpAddrBytes::V4([10, 0, 0, 9]),
        src_port: 4000,
        dst_port: 53,
        ..FrameSpec::default()
    };
    let payload = [0u8; 18];
    let mut f = vec![0u8; spec.frame_len(payload.len())];
    build(&spec, &payload, &mut f).unwrap();
    f
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let entries: u64 = args.get(1).map_or(2_000_000, |a| a.parse().expect("ENTRIES"));
    let rounds: usize = args.get(2).map_or(200, |a| a.parse().expect("ROUNDS"));
    let mut loaded = load_str(CONF, Path::new("big_table.toml")).unwrap();
    let l2 = &mut loaded.pipeline.tables[1];
    for i in 0..entries {
        l2.insert(&[MatchValue::Exact(mac(i).to_vec())], None, ActionList(vec![Action::Forward(1)])).unwrap();
    }
    let slots_kib = loaded.pipeline.tables[1].memory_bytes() >> 10;
    let auto = loaded.pipeline.stages_bursts();
    let mut per_packet = Datapath::new(loaded.pipeline.clone(), 2, 4791).with_staging(Staging::Never);
    let mut staged = Datapath::new(loaded.pipeline, 2, 4791).with_staging(Staging::Always);
    // Frames to random entries (an LCG: the same set every run).
    let mut x: u64 = 12345;
    let frames: Vec<Vec<u8>> = (0..FRAMES)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            udp_frame(mac((x >> 20) % entries))
        })
        .collect();
    // The buffers go round: what is sent (unchanged: the tables only forward) is the next
    // round's input, in the same order, so that no round allocates.
    let mut io = Keep(Vec::with_capacity(FRAMES));
    let mut bufs: Vec<VecBuf> = frames.iter().map(|f| VecBuf::from_frame(f)).collect();
    let mut slots: Vec<Option<VecBuf>> = (0..BURST).map(|_| None).collect();
    let mut run = |dp: &mut Datapath, io: &mut Keep, bufs: &mut Vec<VecBuf>| {
        let mut it = bufs.drain(..);
        loop {
            let mut k = 0;
            for s in slots.iter_mut() {
                match it.next() {
                    Some(b) => {
                        *s = Some(b);
                        k += 1;
                    }
                    None => break,
                }
            }
            if k == 0 {
                break;
            }
            dp.process_burst(io, 0, &mut slots[..k], 0);
        }
        drop(it);
        std::mem::swap(bufs, &mut io.0);
        bufs.len()
    };
    for dp in [&mut per_packet, &mut staged] {
        assert_eq!(run(dp, &mut io, &mut bufs), FRAMES, "every frame forwarded");
    }
    // Alternating blocks of 10 rounds: the noise of a shared machine falls on both.
    let (mut t_per_packet, mut t_staged) = (0f64, 0f64);
    for block in 0..rounds.div_ceil(10) {
        let n = (rounds - block * 10).min(10);
        for (dp, t) in [(&mut per_packet, &mut t_per_packet), (&mut staged, &mut t_staged)] {
            let start = Instant::now();
            for _ in 0..n {
                run(dp, &mut io, &mut bufs);
            }
            *t += start.elapsed().as_nanos() as f64;
        }
    }
    let per = |t: f64| t / (rounds * FRAMES) as f64;
    println!(
        "{entries} entries ({} KiB of slots): {:.1} ns per packet one by one after the first table, {:.1} staged ({:.2}x); Auto stages: {auto}",
        slots_kib,
        per(t_per_packet),
        per(t_staged),
        per(t_per_packet) / per(t_staged),
    );
}
