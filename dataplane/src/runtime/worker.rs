//! The poll-mode worker, in the shape of DPDK's l2fwd: rx burst, process the burst
//! ([`Datapath::process_burst`]: parse all, prefetch, then each packet's path), buffered tx with
//! a drain period in TSC ticks. One per worker lcore; its state is one struct that no other
//! lcore touches.

use crate::buf::PacketIo;
use crate::datapath::Datapath;
use crate::dpdk::ring::Ring;
use crate::dpdk::{self, rdtsc, Mbuf, Mempool, TxBuffer, TxQueue};
use crate::stats::Reason;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Largest rx burst (packets).
pub const MAX_BURST: usize = crate::datapath::MAX_BURST;
/// Packets buffered per port before a tx burst (as l2fwd's `MAX_PKT_BURST`).
pub const TX_BUFFER: usize = 32;
/// Tx bursts retried before the rest of a full tx queue's packets are dropped (`tx_full`).
const TX_RETRIES: u32 = 8;

/// Set to make every worker stop: by SIGINT/SIGTERM, a worker's panic, the end of a replay or
/// of `--duration`.
pub static QUIT: AtomicBool = AtomicBool::new(false);

/// Workers that have stopped polling their rx queues (the second phase of a stop: then no more
/// hand-offs can happen, and each worker drains its ring once more).
pub static STOPPED_RX: AtomicUsize = AtomicUsize::new(0);

/// True once a stop was requested.
#[inline(always)]
pub fn quitting() -> bool {
    QUIT.load(Ordering::Relaxed)
}

/// Requests every worker to stop.
pub fn request_quit() {
    QUIT.store(true, Ordering::Relaxed);
}

/// One rx queue a worker polls.
#[derive(Debug, Clone, Copy)]
pub struct RxQueue {
    /// DPDK port id.
    pub port_id: u16,
    /// Port index in the config (what tables and counters use).
    pub port: u16,
    /// Rx queue id.
    pub queue: u16,
}

/// Everything a worker needs; moved onto its lcore.
#[derive(Debug)]
pub struct Worker {
    /// The rx queues it polls.
    pub rx: Vec<RxQueue>,
    /// DPDK port id of each port index.
    pub port_ids: Vec<u16>,
    /// Its tx queue id on every port.
    pub tx_queue: u16,
    /// Rx burst size (packets).
    pub burst: usize,
    /// Tx drain period (TSC cycles).
    pub drain_tsc: u64,
    /// TSC cycles per µs (the appliance's clock for packets without an rx timestamp).
    pub tsc_per_us: u64,
    /// Packet processing and counters.
    pub datapath: Datapath<Mbuf>,
    /// The pool new frames (copies) come from.
    pub pool: Mempool,
    /// Every worker's hand-off ring, by worker index (empty with one worker).
    pub rings: Vec<Ring>,
    /// This worker's index.
    pub index: usize,
}

/// Buffered transmission on every port: the worker's [`PacketIo`].
struct TxIo {
    /// Packets waiting for each port (by port index).
    bufs: Vec<TxBuffer<TX_BUFFER>>,
    /// This worker's tx queue on each port (by port index).
    queues: Vec<TxQueue>,
    pool: Mempool,
    /// Packets dropped because a tx queue stayed full.
    tx_full: u64,
    rings: Vec<Ring>,
}

impl TxIo {
    /// Sends port `p`'s buffered packets; what the queue refuses after a few tries is freed and
    /// counted.
    #[inline]
    fn flush(&mut self, p: usize) {
        self.tx_full += self.bufs[p].flush(&self.queues[p], TX_RETRIES);
    }

    fn flush_all(&mut self) {
        for p in 0..self.bufs.len() {
            self.flush(p);
        }
    }
}

impl PacketIo for TxIo {
    type Buf = Mbuf;

    #[inline(always)]
    fn alloc(&mut self) -> Option<Mbuf> {
        self.pool.alloc()
    }

    #[inline(always)]
    fn send(&mut self, port: u16, buf: Mbuf) {
        let p = port as usize;
        if self.bufs[p].push(buf) {
            self.flush(p);
        }
    }

    fn ports(&self) -> u16 {
        self.bufs.len() as u16
    }

    #[inline]
    fn hand_off(&mut self, worker: u16, buf: Mbuf) -> Result<(), Mbuf> {
        match self.rings.get(worker as usize) {
            Some(r) => r.push(buf),
            None => Err(buf),
        }
    }
}

impl Worker {
    /// The poll loop: runs until [`QUIT`] is set, then sends what the egress schedulers still
    /// hold, flushes every tx buffer and returns the datapath (its counters and tables'
    /// counters).
    ///
    /// The schedulers run after each iteration's bursts ([`Datapath::drain_egress`]) on the
    /// datapath's clock: the latest capture time seen in a replay, the TSC (µs) live. At the
    /// stop, their clock advances from departure to departure until every queue is empty
    /// ([`Datapath::finish_egress`]), so a run never ends with packets queued.
    pub fn run(mut self) -> Datapath<Mbuf> {
        let mut io = TxIo {
            bufs: self.port_ids.iter().map(|_| TxBuffer::default()).collect(),
            queues: self.port_ids.iter().map(|&id| TxQueue::new(id, self.tx_queue)).collect(),
            pool: self.pool,
            tx_full: 0,
            rings: self.rings.clone(),
        };
        // DPDK port id -> port index, for packets handed over by another worker.
        let mut port_index = vec![0u16; 1 + *self.port_ids.iter().max().unwrap_or(&0) as usize];
        for (i, id) in self.port_ids.iter().enumerate() {
            port_index[*id as usize] = i as u16;
        }
        let workers = self.rings.len();
        let burst = self.burst.min(MAX_BURST);
        // Free slots every other worker's ring needs before an rx burst: the burst may hand all
        // its packets to one worker, and each of the other producers may be doing the same at
        // once. The appliance sizes the rings to hold at least this ([`ring_room_needed`]).
        let room_needed = ring_room_needed(workers, burst);
        // Each rx queue with the port index its packets arrive on.
        let rx: Vec<(dpdk::RxQueue, u16)> =
            self.rx.iter().map(|q| (dpdk::RxQueue::new(q.port_id, q.queue), q.port)).collect();
        // The burst being processed (received or taken from the ring) as owned mbufs, for
        // Datapath::process_burst, which takes them all: `None` between bursts.
        let mut mbufs: [Option<Mbuf>; MAX_BURST] = std::array::from_fn(|_| None);
        let mut last_drain = rdtsc();
        while !quitting() {
            let now = rdtsc();
            if now.wrapping_sub(last_drain) > self.drain_tsc {
                io.flush_all();
                last_drain = now;
            }
            let now_us = now / self.tsc_per_us;
            for (rxq, port) in &rx {
                if workers > 1 && !self.rings_have_room(room_needed) {
                    // Backpressure: another worker's ring could not take this burst's hand-offs.
                    // Leave the packets to the port (net_pcap keeps them in its file, a NIC in
                    // its rx ring) and drain our own ring meanwhile, which is what lets the
                    // other worker, perhaps waiting on ours, go on: no two workers wait on each
                    // other.
                    break;
                }
                // This lcore owns the queue.
                let n = rxq.rx_burst(&mut mbufs[..burst]);
                if n == 0 {
                    continue;
                }
                self.datapath.process_burst(&mut io, *port, &mut mbufs[..n], now_us);
            }
            self.drain_ring(&mut io, &mut mbufs[..burst], &port_index, now_us);
            self.datapath.drain_egress(&mut io, now_us);
        }
        if workers > 1 {
            // Second phase of the stop: once every worker has stopped rx, nothing more is handed
            // over; drain what was.
            STOPPED_RX.fetch_add(1, Ordering::SeqCst);
            loop {
                let all_stopped = STOPPED_RX.load(Ordering::SeqCst) >= workers;
                let now_us = rdtsc() / self.tsc_per_us;
                let n = self.drain_ring(&mut io, &mut mbufs[..burst], &port_index, now_us);
                if all_stopped && n == 0 {
                    break;
                }
            }
        }
        self.datapath.finish_egress(&mut io);
        io.flush_all();
        self.datapath.counters.drop_n(Reason::TxFull, io.tx_full);
        self.datapath
    }
}

/// Free slots (mbufs) each hand-off ring must have before a worker takes an rx burst of
/// `burst` packets, with `workers` workers: `(workers - 1) x burst`, so that no hand-off ever
/// finds a ring full (every producer checks before each burst and then hands off at most
/// `burst` packets). A ring must hold at least this many mbufs, or rx would never resume.
pub fn ring_room_needed(workers: usize, burst: usize) -> u32 {
    (workers.saturating_sub(1) * burst.min(MAX_BURST)) as u32
}

/// The mbufs one worker may hold at once, besides its hand-off ring and the pool's per-lcore
/// cache: the burst it is processing (received, or taken from its ring) and its tx buffers
/// (`ports` x [`TX_BUFFER`]); copies, results and NAKs are made into the tx buffers.
pub fn mbufs_held(burst: usize, ports: usize) -> u64 {
    (burst.min(MAX_BURST) + ports * TX_BUFFER) as u64
}

impl Worker {
    /// True when every other worker's ring has at least `need` free slots.
    #[inline]
    fn rings_have_room(&self, need: u32) -> bool {
        self.rings.iter().enumerate().all(|(i, r)| i == self.index || r.free_count() >= need)
    }

    /// Processes what other workers handed to this one; returns how many.
    #[inline]
    fn drain_ring(&mut self, io: &mut TxIo, pkts: &mut [Option<Mbuf>], port_index: &[u16], now_us: u64) -> usize {
        let Some(ring) = self.rings.get(self.index).copied() else { return 0 };
        let n = ring.pop_burst(pkts);
        for m in pkts.iter_mut().take(n).filter_map(Option::take) {
            let port = port_index.get(m.port() as usize).copied().unwrap_or(0);
            self.datapath.process_handed_off(io, port, m, now_us);
        }
        n
    }
}
