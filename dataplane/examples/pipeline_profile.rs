//! A fixed amount of packet-core work, for instruction counting under callgrind: the frames of
//! the `packet_core` bench (`conf/bench/pipeline.toml`), run `ROUNDS` times through `parse`,
//! parse + pipeline, or one table's lookup, with nothing else in [`run`]. The frames and the
//! config come from the bench's own workload module (`benches/common/pipeline_workload.rs`).
//!
//! Modes: `parse`; `pipeline` (parse + `Pipeline::apply`); `process` (`Datapath::process` per
//! packet: the appliance's whole per-packet path, counters and transmission included);
//! `burst` (`Datapath::process_burst` over bursts of `BURST` packets, as the worker runs it);
//! or a table's name (its lookup alone). `process` and `burst` transmit into an I/O that only
//! keeps the buffers for the next round (no allocation, no copy).
//!
//! ```text
//! cargo build --release -p dataplane --no-default-features --example pipeline_profile
//! valgrind --tool=callgrind --toggle-collect='*pipeline_profile*run*' \
//!     target/release/examples/pipeline_profile 60 pipeline 100
//! ```
//!
//! Instructions per packet = the `run` total / (`ROUNDS` * 256).
//!
//! A fourth argument, `all` or `router` (the default, as the appliance's), sets what the
//! datapath's parse verifies in `process` and `burst` modes (`[dataplane] verify_transit`):
//! `all` verifies every UDP checksum, as every packet was before the router checks.
//!
//! A fifth, `pipeline` (the default), `empty` (conf/bench/empty.toml: one table, no entries, a
//! default `forward(1)`: the bench's empty-pipeline row; any mode but a table's name) or `qos`,
//! chooses the config; `qos` runs in `burst` mode only:
//! `qos` is `conf/bench/qos.toml` (the same tables with a trTCM meter through `police` and a
//! shaped RED class queue on port 1, as `make bench`'s qos row), each burst followed by the
//! scheduler's drain at a clock that moves 4 µs per burst of 32 (8 Mpps: under the shaper's
//! 100 Gbit/s at 1066 B), as the worker's loop does; the two counts side by side are what the
//! traffic-management machinery costs per packet (a `VecBuf` is moved where the appliance
//! moves an 8-byte mbuf pointer, so the extra moves weigh more here than there).

use dataplane::action::Egress;
use dataplane::buf::{PacketBuf, PacketIo, VecBuf};
use dataplane::config::{load_str, DEFAULT_GRADIENT_UDP_PORT};
use dataplane::datapath::Datapath;
use dataplane::meta::Meta;
use dataplane::parse::{parse, Checks, Parsed};
use dataplane::table::{Pipeline, PipelineState};
use std::hint::black_box;
use std::path::Path;

/// `make bench`'s qos row config: the pipeline with a meter and a shaped marking queue.
const EMPTY: &str = include_str!("../../conf/bench/empty.toml");
const QOS: &str = include_str!("../../conf/bench/qos.toml");

#[path = "../benches/common/pipeline_workload.rs"]
mod pipeline_workload;
use pipeline_workload::{frames, pipeline, BATCH, HEADERS, PIPELINE};

/// Packets per `Datapath::process_burst` call in `burst` mode (the bench config's `burst`).
const BURST: usize = 32;

/// An I/O whose transmission keeps the buffers (for the next round) and counts them.
struct RecycleIo {
    sent: Vec<VecBuf>,
}

impl PacketIo for RecycleIo {
    type Buf = VecBuf;
    fn alloc(&mut self) -> Option<VecBuf> {
        None
    }
    fn send(&mut self, _port: u16, buf: VecBuf) {
        self.sent.push(buf);
    }
    fn ports(&self) -> u16 {
        2
    }
}

/// The measured work: `rounds` passes over the batch.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn run(
    mode: &str,
    rounds: usize,
    pl: &Pipeline,
    dp: &mut Datapath,
    bufs: &mut Vec<VecBuf>,
    pristine: &[Vec<u8>],
    parsed: &[Parsed],
) -> u64 {
    let mut n = 0u64;
    let mut counts = PipelineState::new(pl);
    let mut io = RecycleIo { sent: Vec::with_capacity(bufs.len()) };
    let mut slots: Vec<Option<VecBuf>> = Vec::with_capacity(BURST);
    let mut now_us = 0u64;
    for _ in 0..rounds {
        match mode {
            "process" => {
                for (mut b, f) in bufs.drain(..).zip(pristine) {
                    b.data_mut()[..HEADERS].copy_from_slice(&f[..HEADERS]);
                    dp.process(&mut io, 0, black_box(b), 0);
                }
                n += io.sent.len() as u64;
                std::mem::swap(bufs, &mut io.sent);
            }
            "burst" => {
                let mut frames = pristine.iter();
                for mut b in bufs.drain(..) {
                    let f = frames.next().expect("one frame per buffer");
                    b.data_mut()[..HEADERS].copy_from_slice(&f[..HEADERS]);
                    slots.push(Some(b));
                    if slots.len() == BURST {
                        now_us += 4;
                        dp.process_burst(&mut io, 0, black_box(&mut slots[..]), now_us);
                        dp.drain_egress(&mut io, now_us);
                        slots.clear();
                    }
                }
                now_us += 4;
                dp.process_burst(&mut io, 0, &mut slots[..], now_us);
                dp.drain_egress(&mut io, now_us);
                slots.clear();
                n += io.sent.len() as u64;
                std::mem::swap(bufs, &mut io.sent);
            }
            "parse" => {
                for b in bufs.iter() {
                    n += parse(black_box(b.data()), DEFAULT_GRADIENT_UDP_PORT).map(|p| p.l4_offset as u64).unwrap_or(0);
                }
            }
            "pipeline" => {
                for (b, f) in bufs.iter_mut().zip(pristine) {
                    b.data_mut()[..HEADERS].copy_from_slice(&f[..HEADERS]);
                    let Ok(mut p) = parse(black_box(b.data()), DEFAULT_GRADIENT_UDP_PORT) else { continue };
                    if let Egress::Port(port) = pl.apply(&mut counts, b, &mut p, &mut Meta::new(0)) {
                        n += port as u64;
                    }
                }
            }
            table => {
                let t = pl.tables.iter().find(|t| t.name == table).expect("a table of the bench config");
                for p in parsed {
                    n += t.lookup(black_box(p), &Meta::new(0)).unwrap_or(0) as u64;
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
    let pl = pipeline(PIPELINE);
    let pristine = frames(size, &pl);
    let mut bufs: Vec<VecBuf> = pristine.iter().map(|f| VecBuf::from_frame(f)).collect();
    let checks = match args.get(4).map_or("router", |s| s.as_str()) {
        "all" => Checks::All,
        "router" => Checks::Router,
        other => panic!("checks: `all` or `router`, not `{other}`"),
    };
    let config = args.get(5).map_or("pipeline", |s| s.as_str());
    assert!(config != "qos" || mode == "burst", "the qos config runs in burst mode only");
    // The frames are the full pipeline's; `empty` runs them through conf/bench/empty.toml.
    let run_pl = if config == "empty" { pipeline(EMPTY) } else { pl.clone() };
    let mut dp = match config {
        "pipeline" | "empty" => Datapath::new(run_pl.clone(), 2, DEFAULT_GRADIENT_UDP_PORT),
        "qos" => {
            let l = load_str(QOS, Path::new("conf/bench/qos.toml")).expect("the qos bench config loads");
            Datapath::new(l.pipeline, 2, DEFAULT_GRADIENT_UDP_PORT).with_egress(&l.qos).expect("its schedulers build")
        }
        other => panic!("config: `pipeline`, `empty` or `qos`, not `{other}`"),
    }
    .with_checks(checks);
    let mut warm = PipelineState::new(&pl);
    let parsed: Vec<Parsed> = pristine
        .iter()
        .map(|f| {
            let mut b = VecBuf::from_frame(f);
            let mut p = parse(b.data(), DEFAULT_GRADIENT_UDP_PORT).unwrap();
            pl.apply(&mut warm, &mut b, &mut p, &mut Meta::new(0));
            p
        })
        .collect();
    let n = run(mode, rounds, &run_pl, &mut dp, &mut bufs, &pristine, &parsed);
    if matches!(mode, "process" | "burst") {
        assert_eq!(n as usize, rounds * BATCH, "every frame is forwarded");
    }
    println!("{mode} {size} B: {} packets, checksum {n}", rounds * BATCH);
}
