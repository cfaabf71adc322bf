//! The aggregation workload shared by the `aggregation` bench and the `agg_profile` example:
//! one collective of [`SLOTS`] chunks, the frames of [`ROUNDS`] rounds from every worker (built
//! with `wire::build`, checksums and ICRC set), pooled buffers like mbufs, and a sink that
//! counts the results. Included by both with `#[path]` (not a bench target of its own).
#![allow(dead_code)]

use dataplane::agg::collective::{Carriage, Collective};
use dataplane::agg::{Aggregator, PortAddr};
use dataplane::buf::{PacketBuf, PacketIo};
use dataplane::config::load_str;
use dataplane::datapath::Datapath;
use dataplane::wire::build::{self, FrameSpec, IpAddrBytes, Roce};
use dataplane::wire::gradient::{GradientRepr, DEFAULT_UDP_PORT};
use std::cell::RefCell;
use std::hint::black_box;
use std::path::Path;

/// Slots of the benchmark collective (chunks of the tensor).
pub const SLOTS: usize = 16;
/// Rounds per iteration (each a fresh round for every slot).
pub const ROUNDS: u32 = 8;
pub const APP_MAC: &str = "02:00:00:00:00:fe";
/// Bytes of a pooled buffer: 128 B headroom + a 9 KiB data room, as a jumbo mbuf.
pub const HEADROOM: usize = 128;
pub const ROOM: usize = 9216;

thread_local! {
    static POOL: RefCell<Vec<Box<[u8]>>> = const { RefCell::new(Vec::new()) };
}

/// A frame buffer from a per-thread free list (an mbuf pool without DPDK): no zeroing, no
/// allocation once warm.
///
/// Its window arithmetic repeats `VecBuf`'s on purpose: this is the buffer the bench had at
/// 3303d62, the base of the A/B runs (`tools/bench/ab.py`), kept as it was so that they
/// compare the packet core, not the harness (a boxed `VecBuf` here, pointer-sized, costs 61
/// instructions less per contribution in `agg_profile udp 4 256`; an unboxed one 122 more).
pub struct PoolBuf {
    mem: Option<Box<[u8]>>,
    start: usize,
    end: usize,
}

impl PoolBuf {
    pub fn get() -> PoolBuf {
        let mem = POOL.with(|p| p.borrow_mut().pop()).unwrap_or_else(|| vec![0u8; HEADROOM + ROOM].into_boxed_slice());
        PoolBuf { mem: Some(mem), start: HEADROOM, end: HEADROOM }
    }
    pub fn mem(&self) -> &[u8] {
        self.mem.as_deref().unwrap()
    }
}

impl Drop for PoolBuf {
    fn drop(&mut self) {
        if let Some(m) = self.mem.take() {
            POOL.with(|p| p.borrow_mut().push(m));
        }
    }
}

impl PacketBuf for PoolBuf {
    fn data(&self) -> &[u8] {
        &self.mem()[self.start..self.end]
    }
    fn data_mut(&mut self) -> &mut [u8] {
        let (s, e) = (self.start, self.end);
        &mut self.mem.as_deref_mut().unwrap()[s..e]
    }
    fn prepend(&mut self, len: usize) -> bool {
        if len > self.start {
            return false;
        }
        self.start -= len;
        true
    }
    fn adj(&mut self, len: usize) -> bool {
        if len > self.end - self.start {
            return false;
        }
        self.start += len;
        true
    }
    fn append(&mut self, len: usize) -> bool {
        if len > self.mem().len() - self.end {
            return false;
        }
        self.end += len;
        true
    }
    fn trim(&mut self, len: usize) -> bool {
        if len > self.end - self.start {
            return false;
        }
        self.end -= len;
        true
    }
    fn rx_timestamp_us(&self) -> Option<u64> {
        None
    }
}

/// The sink: counts what is sent (packets, bytes) and frees it.
#[derive(Default)]
pub struct Sink {
    pub sent: u64,
    pub bytes: u64,
}

impl PacketIo for Sink {
    type Buf = PoolBuf;
    fn alloc(&mut self) -> Option<PoolBuf> {
        Some(PoolBuf::get())
    }
    fn send(&mut self, _port: u16, buf: PoolBuf) {
        self.sent += 1;
        self.bytes += buf.data().len() as u64;
        black_box(buf.data().as_ptr());
    }
    fn ports(&self) -> u16 {
        1
    }
}

pub fn conf(carriage: &str, n: usize, chunk: usize) -> String {
    conf_sized(carriage, n, chunk, SLOTS)
}

/// [`conf`] with a tensor of `slots` chunks.
pub fn conf_sized(carriage: &str, n: usize, chunk: usize, slots: usize) -> String {
    let mut s = format!(
        "[mempool]\ndata_room = 9344\n[[port]]\nvdev = \"net_null0\"\nmac = \"{APP_MAC}\"\nipv4 = \"10.0.0.254\"\n\
         [[collective]]\ncollective_id = 1\nop = \"sum\"\ndtype = \"f32\"\ncarriage = \"{carriage}\"\n\
         tensor_elements = {}\nchunk_elements = {chunk}\ndeterministic = true\n",
        slots * chunk
    );
    for k in 0..n {
        s += &format!(
            "[[collective.member]]\nrank = {k}\nip = \"10.0.0.{}\"\nmac = \"02:00:00:00:01:{k:02x}\"\n",
            k + 1
        );
        // Each carriage's own keys (the other's would be unused).
        s += &if carriage == "rocev2" {
            format!("qpn = {}\nqkey = 286331153\n", 0x100 + k)
        } else {
            format!("udp_port = {}\n", 50000 + k)
        };
    }
    s
}

pub struct Case {
    pub text: String,
    pub coll: Collective,
    pub frames: Vec<Vec<u8>>,
}

impl Case {
    pub fn new(carriage: &str, n: usize, chunk: usize) -> Case {
        Case::sized(carriage, n, chunk, SLOTS, ROUNDS)
    }

    /// [`Case::new`] with `slots` chunks and `rounds` rounds.
    pub fn sized(carriage: &str, n: usize, chunk: usize, slots: usize, rounds: u32) -> Case {
        let text = conf_sized(carriage, n, chunk, slots);
        let l = load_str(&text, Path::new("bench.toml")).unwrap_or_else(|e| panic!("{e}"));
        let coll = l.collectives[0].clone();
        let roce = coll.carriage == Carriage::Rocev2;
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut frames = Vec::new();
        let mut psn = vec![0u32; n];
        for round in 0..rounds {
            for (rank, m) in coll.members.iter().enumerate() {
                for slot in 0..slots {
                    let payload: Vec<u8> = (0..chunk)
                        .flat_map(|_| {
                            rng ^= rng << 13;
                            rng ^= rng >> 7;
                            rng ^= rng << 17;
                            (((rng >> 40) as f32) / (1u64 << 24) as f32 - 0.5).to_le_bytes()
                        })
                        .collect();
                    let spec = FrameSpec {
                        src_mac: m.mac,
                        dst_mac: APP_MAC.parse().unwrap(),
                        src_ip: m.ip,
                        dst_ip: IpAddrBytes::V4([10, 0, 0, 254]),
                        ecn: 2,
                        src_port: if roce { 50000 + rank as u16 } else { m.udp_port },
                        dst_port: if roce { 4791 } else { DEFAULT_UDP_PORT },
                        roce: roce.then_some(Roce {
                            dest_qp: 1,
                            psn: psn[rank],
                            pkey: 0xffff,
                            qkey: m.qkey,
                            src_qp: m.qpn,
                        }),
                        header: GradientRepr {
                            version: 1,
                            flags: 0,
                            op_type: coll.op.wire(),
                            collective_id: coll.id,
                            dtype: coll.dtype.wire(),
                            reason: 0,
                            worker_rank: rank as u16,
                            tensor_offset: (slot * chunk) as u32,
                            data_length: payload.len() as u32,
                            round,
                        },
                        ..FrameSpec::default()
                    };
                    psn[rank] = (psn[rank] + 1) & 0xff_ffff;
                    let mut buf = vec![0u8; spec.frame_len(payload.len())];
                    build::build(&spec, &payload, &mut buf).unwrap();
                    frames.push(buf);
                }
            }
        }
        Case { text, coll, frames }
    }

    pub fn datapath(&self) -> Datapath<PoolBuf> {
        self.datapath_with(dataplane::parse::Checks::Router)
    }

    /// [`Case::datapath`] whose parse verifies what `checks` says.
    pub fn datapath_with(&self, checks: dataplane::parse::Checks) -> Datapath<PoolBuf> {
        let l = load_str(&self.text, Path::new("bench.toml")).unwrap();
        let ports = vec![PortAddr { mac: APP_MAC.parse().unwrap(), ipv4: l.port_ipv4[0], ipv6: l.port_ipv6[0] }];
        let agg = Aggregator::new(&l.collectives, ports, DEFAULT_UDP_PORT, 1);
        Datapath::new(l.pipeline, 1, DEFAULT_UDP_PORT).with_checks(checks).with_aggregator(agg)
    }

    /// Worker `me`'s datapath of a run of `workers` whose collective is sharded over them
    /// (`[dataplane] shard_collectives`): it holds the slots of the chunks `k` with
    /// `k % workers == me`.
    pub fn sharded_datapath(&self, me: u16, workers: u16) -> Datapath<PoolBuf> {
        let l = load_str(&self.text, Path::new("bench.toml")).unwrap();
        let ctx = dataplane::agg::context::AggContext {
            ports: vec![PortAddr { mac: APP_MAC.parse().unwrap(), ipv4: l.port_ipv4[0], ipv6: l.port_ipv6[0] }],
            gradient_udp_port: DEFAULT_UDP_PORT,
            appliance_qpn: 1,
            workers,
            shard: true,
            zero_copy_results: false,
        };
        let agg = Aggregator::with_context(&ctx, &l.collectives, me);
        Datapath::new(l.pipeline, 1, DEFAULT_UDP_PORT).with_aggregator(agg)
    }

    /// Feeds every frame to `dp` in rx bursts of `burst` packets (`Datapath::process_burst`, the
    /// workers' path: every packet of a burst parsed first, then each one's way in order).
    pub fn run_bursts(&self, dp: &mut Datapath<PoolBuf>, io: &mut Sink, burst: usize) {
        let mut slots: Vec<Option<PoolBuf>> = (0..burst).map(|_| None).collect();
        for chunk in self.frames.chunks(burst) {
            for (slot, f) in slots.iter_mut().zip(chunk) {
                let mut b = PoolBuf::get();
                b.append(f.len());
                b.data_mut().copy_from_slice(f);
                *slot = Some(b);
            }
            dp.process_burst(io, 0, &mut slots[..chunk.len()], 0);
        }
    }

    /// Feeds every frame to `dp`.
    pub fn run(&self, dp: &mut Datapath<PoolBuf>, io: &mut Sink) {
        for f in &self.frames {
            let mut b = PoolBuf::get();
            b.append(f.len());
            b.data_mut().copy_from_slice(f);
            dp.process(io, 0, b, 0);
        }
    }
}
