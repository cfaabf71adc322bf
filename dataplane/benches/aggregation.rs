//! The folding path of in-network aggregation without DPDK: `Datapath::process` with an
//! `Aggregator` on contributions that are all folded (every contribution is for the slot's
//! current or next round), and every completed slot replicated to its N members.
//!
//! `cargo bench -p dataplane --no-default-features --bench aggregation`
//!
//! Cases: 4 and 16 workers x 256 and 1024 f32 lanes per chunk x the UDP and RoCEv2 carriages.
//! Each case has a collective of [`SLOTS`] slots; the frames of [`ROUNDS`] consecutive rounds
//! (each worker sends all its chunks of a round, rank after rank) are built once with
//! `wire::build`, checksums and ICRC set. One criterion iteration is one fresh `Datapath` (built
//! outside the timed part, so every round is new to it) fed every frame: N x SLOTS x ROUNDS
//! contributions, all folded, SLOTS x ROUNDS completions, N x SLOTS x ROUNDS results. Each
//! contribution is first copied into a pooled buffer (as net_pcap copies a record into an
//! mbuf), then parsed (checksums / ICRC verified), validated, folded; results are built into
//! pooled buffers and dropped by the sink (no copy). Criterion's throughput is in contributions;
//! `tools/bench/agg.py` turns the medians into ns per contribution, Mpps, Gbit/s of payload and
//! elements/s. A check before measuring asserts the counts (folded, completed, results sent).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use dataplane::agg::config::{Carriage, Collective};
use dataplane::agg::{Aggregator, PortAddr};
use dataplane::buf::{PacketBuf, PacketIo};
use dataplane::config::load_str;
use dataplane::datapath::Datapath;
use dataplane::wire::build::{self, FrameSpec, IpAddr, Roce};
use dataplane::wire::gradient::GradientRepr;
use std::cell::RefCell;
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

/// Slots of the benchmark collective (chunks of the tensor).
const SLOTS: usize = 16;
/// Rounds per iteration (each a fresh round for every slot).
const ROUNDS: u32 = 8;
const APP_MAC: &str = "02:00:00:00:00:fe";
/// Bytes of a pooled buffer: 128 B headroom + a 9 KiB data room, as a jumbo mbuf.
const HEADROOM: usize = 128;
const ROOM: usize = 9216;

thread_local! {
    static POOL: RefCell<Vec<Box<[u8]>>> = const { RefCell::new(Vec::new()) };
}

/// A frame buffer from a per-thread free list (an mbuf pool without DPDK): no zeroing, no
/// allocation once warm.
struct PoolBuf {
    mem: Option<Box<[u8]>>,
    start: usize,
    end: usize,
}

impl PoolBuf {
    fn get() -> PoolBuf {
        let mem = POOL.with(|p| p.borrow_mut().pop()).unwrap_or_else(|| vec![0u8; HEADROOM + ROOM].into_boxed_slice());
        PoolBuf { mem: Some(mem), start: HEADROOM, end: HEADROOM }
    }
    fn mem(&self) -> &[u8] {
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
struct Sink {
    sent: u64,
    bytes: u64,
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

fn conf(carriage: &str, n: usize, chunk: usize) -> String {
    let mut s = format!(
        "[[port]]\nvdev = \"net_null0\"\nmac = \"{APP_MAC}\"\nipv4 = \"10.0.0.254\"\n\
         [[collective]]\ncollective_id = 1\nop = \"sum\"\ndtype = \"f32\"\ncarriage = \"{carriage}\"\n\
         tensor_elements = {}\nchunk_elements = {chunk}\ndeterministic = true\n",
        SLOTS * chunk
    );
    for k in 0..n {
        s += &format!(
            "[[collective.member]]\nrank = {k}\nip = \"10.0.0.{}\"\nmac = \"02:00:00:00:01:{k:02x}\"\nudp_port = {}\nqpn = {}\nqkey = 286331153\n",
            k + 1,
            50000 + k,
            0x100 + k
        );
    }
    s
}

struct Case {
    text: String,
    coll: Collective,
    frames: Vec<Vec<u8>>,
}

impl Case {
    fn new(carriage: &str, n: usize, chunk: usize) -> Case {
        let text = conf(carriage, n, chunk);
        let l = load_str(&text, Path::new("bench.toml")).unwrap_or_else(|e| panic!("{e}"));
        let coll = l.collectives[0].clone();
        let roce = coll.carriage == Carriage::Rocev2;
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut frames = Vec::new();
        let mut psn = vec![0u32; n];
        for round in 0..ROUNDS {
            for (rank, m) in coll.members.iter().enumerate() {
                for slot in 0..SLOTS {
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
                        vlan: None,
                        src_ip: m.ip,
                        dst_ip: IpAddr::V4([10, 0, 0, 254]),
                        dscp: 0,
                        ecn: 2,
                        ttl: 64,
                        src_port: if roce { 50000 + rank as u16 } else { m.udp_port },
                        dst_port: if roce { 4791 } else { 49374 },
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

    fn datapath(&self) -> Datapath {
        let l = load_str(&self.text, Path::new("bench.toml")).unwrap();
        let ports = vec![PortAddr { mac: APP_MAC.parse().unwrap(), ipv4: l.port_ipv4[0], ipv6: l.port_ipv6[0] }];
        let agg = Aggregator::new(&l.collectives, ports, 49374, 1);
        Datapath::new(l.pipeline, 1, 49374).with_aggregator(agg)
    }

    /// Feeds every frame to `dp`.
    fn run(&self, dp: &mut Datapath, io: &mut Sink) {
        for f in &self.frames {
            let mut b = PoolBuf::get();
            b.append(f.len());
            b.data_mut().copy_from_slice(f);
            dp.process(io, 0, b, 0);
        }
    }
}

fn aggregation(c: &mut Criterion) {
    let mut g = c.benchmark_group("aggregation");
    g.warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_millis(1200)).sample_size(20);
    for carriage in ["udp", "rocev2"] {
        for n in [4usize, 16] {
            for chunk in [256usize, 1024] {
                let case = Case::new(carriage, n, chunk);
                // Check once: every contribution folded, every slot completed, N results each.
                let mut dp = case.datapath();
                let mut io = Sink::default();
                case.run(&mut dp, &mut io);
                let a = &dp.agg.as_ref().unwrap().counters;
                let total = (n * SLOTS) as u64 * ROUNDS as u64;
                assert_eq!(a.folded, total, "{carriage} {n}x{chunk}: folded");
                assert_eq!(a.completed, SLOTS as u64 * ROUNDS as u64, "{carriage} {n}x{chunk}: completed");
                assert_eq!(io.sent, total, "{carriage} {n}x{chunk}: results sent (N per slot)");
                assert_eq!(a.resends + a.naks, 0);
                assert_eq!(case.coll.members.len(), n);
                g.throughput(Throughput::Elements(total));
                g.bench_function(BenchmarkId::new(format!("{carriage}_{chunk}lanes"), format!("{n}workers")), |b| {
                    b.iter_custom(|iters| {
                        let mut t = Duration::ZERO;
                        for _ in 0..iters {
                            let mut dp = case.datapath();
                            let mut io = Sink::default();
                            let start = Instant::now();
                            case.run(&mut dp, &mut io);
                            t += start.elapsed();
                            black_box(io.sent);
                        }
                        t
                    })
                });
            }
        }
    }
    g.finish();
}

criterion_group!(benches, aggregation);
criterion_main!(benches);
