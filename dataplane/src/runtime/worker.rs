//! The poll-mode worker, in the shape of DPDK's l2fwd: rx burst, process the burst
//! ([`Datapath::process_burst`]: parse all, prefetch, then each packet's path), buffered tx with
//! a drain period in TSC ticks. One per worker lcore; its state is one struct that no other
//! lcore touches.

use crate::buf::{PacketBuf, PacketIo};
use crate::datapath::Datapath;
use crate::dpdk::ring::Ring;
use crate::dpdk::{self, rdtsc, Mbuf, Mempool, TxBuffer, TxQueue};
use crate::live::CYCLE_BUCKETS;
use crate::log2hist::Log2Hist;
use crate::stats::Reason;
use crate::stop::quitting;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Largest rx burst (packets).
pub const MAX_BURST: usize = crate::datapath::MAX_BURST;
/// Packets buffered per port before a tx burst (as l2fwd's `MAX_PKT_BURST`).
pub const TX_BUFFER: usize = 32;
/// Tx bursts retried before the rest of a full tx queue's packets are dropped (`tx_full`).
const TX_RETRIES: u32 = 8;

/// Workers that have stopped polling their rx queues (the second phase of a stop: then no more
/// hand-offs can happen, and each worker drains its ring once more).
pub static STOPPED_RX: AtomicUsize = AtomicUsize::new(0);

/// Workers that have processed every packet handed to them over the hand-off rings (the third
/// phase of a stop: then no worker hands a packet to a shaped port's owner any more, and each
/// owner drains its scheduler rings once more before its schedulers send what they hold).
pub static DRAINED_HAND_OFFS: AtomicUsize = AtomicUsize::new(0);

/// Slots of each ring to a shaped port's scheduler owner (one ring per other worker and shaped
/// port; holds one mbuf less). The owner empties its rings every poll-loop iteration, so a ring
/// need only absorb what a sender's bursts make while the owner takes one turn.
pub const QOS_RING_SLOTS: u32 = 1024;

/// In a replay with several workers and a shaped port, how far (µs of capture time) a worker
/// may run ahead of the slowest other worker (see [`Worker::lockstep`]).
pub const REPLAY_SKEW_US: u64 = 100;

/// What the workers of a lockstep replay share ([`Worker::lockstep`]), by worker index.
#[derive(Debug)]
pub struct Lockstep {
    /// The capture clock (µs) each worker published.
    pub clocks: Box<[AtomicU64]>,
    /// Packets handed to each worker over its hand-off ring, counted once pushed.
    pub handed: Box<[AtomicU64]>,
    /// Packets each worker has taken from its hand-off ring and processed (what it sends for
    /// them is then in its tx buffers or in the rings to the schedulers' owners).
    pub processed: Box<[AtomicU64]>,
}

impl Lockstep {
    /// The shared state of `workers` workers: every clock 0, nothing handed.
    pub fn new(workers: usize) -> Lockstep {
        let zeros = || (0..workers).map(|_| AtomicU64::new(0)).collect();
        Lockstep { clocks: zeros(), handed: zeros(), processed: zeros() }
    }

    /// True while some worker has not yet processed every packet handed to it.
    fn hand_offs_pending(&self) -> bool {
        // `processed` first: a hand-off counted after it is read only makes this true.
        self.processed
            .iter()
            .zip(self.handed.iter())
            .any(|(p, h)| p.load(Ordering::Acquire) < h.load(Ordering::Acquire))
    }
}

/// The worker that owns the egress scheduler of each port (`None`: the port has none), with
/// `workers` workers: the k-th shaped port in port order belongs to worker `k mod workers`, so
/// several shaped ports spread over the workers; with one shaped port, worker 0 (the lcore of
/// the first `[[lcore]]` table, tx queue 0 of every port) owns it.
pub fn scheduler_owners<T>(qos: &[Option<T>], workers: usize) -> Vec<Option<usize>> {
    let mut k = 0;
    qos.iter()
        .map(|q| {
            q.as_ref().map(|_| {
                k += 1;
                (k - 1) % workers.max(1)
            })
        })
        .collect()
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
    /// Workers in the run.
    pub workers: usize,
    /// Per port index: this worker's ring to the worker owning the port's scheduler (`None`:
    /// the port has no scheduler, or this worker owns it).
    pub qos_out: Vec<Option<Ring>>,
    /// The rings this worker drains into the schedulers it owns: (port index, ring), one per
    /// other worker and owned shaped port.
    pub qos_in: Vec<(u16, Ring)>,
    /// Some worker reaches a scheduler over a ring: the stop drains those rings in a phase of
    /// its own.
    pub qos_shared: bool,
    /// In a replay with several workers and a shaped port, every worker's published capture
    /// clock (µs) and hand-off counts, by worker index: see [`Worker::lockstep`].
    pub lockstep: Option<Arc<Lockstep>>,
    /// Where this worker publishes its counters for live readers, once per the publisher's
    /// period and once at the end of the run ([`crate::live`]).
    pub live: Option<crate::live::Publisher>,
    /// Where the control plane posts new pipeline versions ([`crate::control`]); checked at
    /// every poll-loop turn (a burst boundary).
    pub control: Option<Arc<crate::control::Mailbox>>,
}

/// A received burst a worker holds in a lockstep replay: `mbufs[pos..end]`, from `port`.
#[derive(Debug, Default, Clone, Copy)]
struct Held {
    port: u16,
    pos: usize,
    end: usize,
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
    /// In a lockstep replay, where hand-offs are counted ([`Lockstep::handed`]).
    lockstep: Option<Arc<Lockstep>>,
    /// Per port: the ring to the owner of its scheduler ([`Worker::qos_out`]).
    qos_out: Vec<Option<Ring>>,
    /// The TSC at which the packets now being handed to `send` were received: the end of
    /// their rx burst (packets from the hand-off and scheduler rings, and from the egress
    /// schedulers: the start of the poll-loop turn that takes them).
    rx_tsc: u64,
    /// Per port, the `rx_tsc` of each packet in its tx buffer, in buffer order.
    stamps: Vec<[u64; TX_BUFFER]>,
    /// Packets sent by TSC cycles from `rx_tsc` to the end of the tx burst that took them (the
    /// residence time; published with the loop's counters).
    residence: Log2Hist<CYCLE_BUCKETS>,
}

impl TxIo {
    /// Sends port `p`'s buffered packets; what the queue refuses after a few tries is freed and
    /// counted.
    #[inline]
    fn flush(&mut self, p: usize) {
        let n = self.bufs[p].len();
        if n == 0 {
            return;
        }
        // A port paused for a restart takes nothing: no try, everything counted.
        let tries = if dpdk::port::paused(self.queues[p].port_id()) { 0 } else { TX_RETRIES };
        let refused = self.bufs[p].flush(&self.queues[p], tries);
        self.tx_full += refused;
        // The queue took the first `n - refused`, in buffer order.
        let t = rdtsc();
        for &rx in &self.stamps[p][..n - refused as usize] {
            self.residence.record(t.wrapping_sub(rx));
        }
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
        self.stamps[p][self.bufs[p].len()] = self.rx_tsc;
        if self.bufs[p].push(buf) {
            self.flush(p);
        }
    }

    fn ports(&self) -> u16 {
        self.bufs.len() as u16
    }

    /// A copy of every segment into this worker's pool's mbufs, the first segment as long as
    /// `src`'s ([`Mbuf::copy_whole`]): a one-segment frame grown into its headroom by a VLAN
    /// push is copied whole too.
    #[inline]
    fn copy_pkt(&mut self, src: &Mbuf) -> Option<Mbuf> {
        src.copy_whole(&self.pool)
    }

    /// A header mbuf holding `head`, chained to an indirect mbuf over `body`'s bytes
    /// ([`Mbuf::attach_range`]) and, when `tail` is not empty, to a third holding it: two or
    /// three mbufs from this worker's pool in one bulk allocation, no payload copied. A `body`
    /// that cannot be shared (a chain, or itself from an external-buffer pool) is copied as the
    /// default does.
    #[inline]
    fn share(&mut self, head: &[u8], body: &Mbuf, off: usize, len: usize, tail: &[u8]) -> Option<(Mbuf, bool)> {
        let (Ok(o), Ok(l), Ok(hl), Ok(tl)) =
            (u16::try_from(off), u16::try_from(len), u16::try_from(head.len()), u16::try_from(tail.len()))
        else {
            return None;
        };
        let n = if tail.is_empty() { 2 } else { 3 };
        let mut m: [Option<Mbuf>; 3] = [None, None, None];
        if !self.pool.alloc_bulk(&mut m[..n]) {
            return None;
        }
        let [Some(mut h), Some(mut payload), t] = m else {
            return None;
        };
        if !payload.attach_range(body, o, l) {
            drop((h, payload, t));
            let src = body.data().get(off..off + len)?;
            return Some((crate::buf::concat_frame(self, head, src, tail)?, false));
        }
        // Fresh from the pool: one segment, default headroom, length 0.
        if !h.set_len(hl) {
            return None;
        }
        h.data_mut().copy_from_slice(head);
        h.chain(payload).ok()?;
        if let Some(mut t) = t {
            if !t.set_len(tl) {
                return None;
            }
            t.data_mut().copy_from_slice(tail);
            h.chain(t).ok()?;
        }
        Some((h, true))
    }

    #[inline]
    fn hand_off(&mut self, worker: u16, buf: Mbuf) -> Result<(), Mbuf> {
        let pushed = match self.rings.get(worker as usize) {
            Some(r) => r.push(buf),
            None => Err(buf),
        };
        if let (Ok(()), Some(l)) = (&pushed, &self.lockstep) {
            l.handed[worker as usize].fetch_add(1, Ordering::Release);
        }
        pushed
    }

    /// The class travels in `mbuf->hash.sched` ([`Mbuf::set_sched_class`]); the ring is this
    /// worker's own to the owner (single producer).
    #[inline]
    fn to_scheduler(&mut self, port: u16, class: u8, mut buf: Mbuf) -> Result<(), Mbuf> {
        match self.qos_out.get(port as usize) {
            Some(Some(r)) => {
                buf.set_sched_class(class);
                r.push(buf)
            }
            _ => Err(buf),
        }
    }
}

impl Worker {
    /// The poll loop: runs until [`crate::stop::QUIT`] is set, then sends what the egress schedulers still
    /// hold, flushes every tx buffer and returns the datapath (its counters and tables'
    /// counters).
    ///
    /// The schedulers run after each iteration's bursts ([`Datapath::drain_egress`]) on the
    /// datapath's clock: the latest capture time seen in a replay, the TSC (µs) live. Packets
    /// for a shaped port that another worker owns go to it over a ring; the owner empties its
    /// rings into its schedulers every iteration. At the stop, every ring is drained, then the
    /// schedulers' clock advances from departure to departure until every queue is empty
    /// ([`Datapath::finish_egress`]), so a run never ends with packets queued.
    pub fn run(mut self) -> (Datapath<Mbuf>, crate::live::LoopStats) {
        let mut io = TxIo {
            bufs: self.port_ids.iter().map(|_| TxBuffer::default()).collect(),
            queues: self.port_ids.iter().map(|&id| TxQueue::new(id, self.tx_queue)).collect(),
            pool: self.pool,
            tx_full: 0,
            rings: self.rings.clone(),
            lockstep: self.lockstep.clone(),
            qos_out: self.qos_out.clone(),
            rx_tsc: rdtsc(),
            stamps: vec![[0; TX_BUFFER]; self.port_ids.len()],
            residence: Log2Hist::default(),
        };
        // DPDK port id -> port index, for packets handed over by another worker.
        let mut port_index = vec![0u16; 1 + *self.port_ids.iter().max().unwrap_or(&0) as usize];
        for (i, id) in self.port_ids.iter().enumerate() {
            port_index[*id as usize] = i as u16;
        }
        let hand_offs = self.rings.len() > 1;
        let burst = self.burst.min(MAX_BURST);
        // Free slots every other worker's ring needs before an rx burst: the burst may hand all
        // its packets to one worker, and each of the other producers may be doing the same at
        // once. The appliance sizes the rings to hold at least this ([`ring_room_needed`]).
        let room_needed = ring_room_needed(self.rings.len(), burst);
        // Each rx queue with the port index its packets arrive on.
        let rx: Vec<(dpdk::RxQueue, u16)> =
            self.rx.iter().map(|q| (dpdk::RxQueue::new(q.port_id, q.queue), q.port)).collect();
        // The burst being processed (received) as owned mbufs, for Datapath::process_burst,
        // which takes them all: `None` between bursts (in a lockstep replay, `held` says which
        // slots still hold packets).
        let mut mbufs: [Option<Mbuf>; MAX_BURST] = std::array::from_fn(|_| None);
        // What the rings hand over, one ring's burst at a time.
        let mut scratch: [Option<Mbuf>; MAX_BURST] = std::array::from_fn(|_| None);
        let lockstep = self.lockstep.clone();
        let mut held = Held::default();
        let mut stalled_since = None;
        let mut last_drain = rdtsc();
        let mut live = self.live.take();
        // The loop's own counters (busy and idle turns, cycles per burst), published with the
        // datapath's.
        let mut stats = crate::live::LoopStats::default();
        // Online for the grace periods of `dpdk::rcu` until the end of the run: each loop turn
        // below is a quiescent state (no burst of a port in progress).
        let online = dpdk::rcu::workers().enter(self.index as u32).expect("worker indexes are below RTE_MAX_LCORE");
        while !quitting() || held.pos < held.end {
            online.quiescent();
            self.switch_if_asked(&mut io, &mut live, &stats);
            let now = rdtsc();
            let mut turn_start = now;
            if now.wrapping_sub(last_drain) > self.drain_tsc {
                io.flush_all();
                last_drain = now;
                if let Some(p) = &mut live {
                    if p.due(now) {
                        // What the tx queues refused so far belongs in the published drops.
                        self.datapath.counters.drop_n(Reason::TxFull, std::mem::take(&mut io.tx_full));
                        stats.residence = io.residence;
                        p.publish(&self.datapath, &stats);
                    }
                }
                // The periodic flush and publication are not a burst's work.
                turn_start = rdtsc();
            }
            let now_us = now / self.tsc_per_us;
            io.rx_tsc = now;
            if let Some(l) = &lockstep {
                let ctx = Step { io: &mut io, rx: &rx, room_needed, now_us };
                self.lockstep(l, ctx, &mut mbufs[..burst], &mut scratch[..burst], &mut held, &mut stalled_since);
            } else {
                let mut busy = false;
                // When this rx call began (an earlier queue's empty poll of this turn
                // included): a burst's cycles count its rx call too, as testpmd's
                // `--record-core-cycles` does.
                let mut t_rx = turn_start;
                for (rxq, port) in &rx {
                    if hand_offs && !self.rings_have_room(room_needed) {
                        // Backpressure: another worker's ring could not take this burst's
                        // hand-offs. Leave the packets to the port (net_pcap keeps them in its
                        // file, a NIC in its rx ring) and drain our own ring meanwhile, which is
                        // what lets the other worker, perhaps waiting on ours, go on: no two
                        // workers wait on each other.
                        break;
                    }
                    if dpdk::port::paused(rxq.port_id()) {
                        continue;
                    }
                    // This lcore owns the queue.
                    let n = rxq.rx_burst(&mut mbufs[..burst]);
                    if n == 0 {
                        continue;
                    }
                    busy = true;
                    let t0 = rdtsc();
                    io.rx_tsc = t0;
                    self.datapath.process_burst(&mut io, *port, &mut mbufs[..n], now_us);
                    io.rx_tsc = now;
                    let t1 = rdtsc();
                    stats.burst(t1.wrapping_sub(t_rx));
                    t_rx = t1;
                }
                // What other workers handed over (contributions of collectives this worker
                // owns, frames for the shaped ports it owns) makes the turn busy too; its
                // cycles stay out of the rx bursts' (cycles per received packet compare with
                // testpmd's).
                let handed = self.drain_qos_rings(&mut io, &mut scratch[..burst], now_us)
                    + self.drain_ring(&mut io, &mut scratch[..burst], &port_index, now_us);
                if busy || handed > 0 {
                    stats.busy_polls += 1;
                } else {
                    stats.idle_polls += 1;
                }
            }
            if lockstep.is_some() {
                self.drain_ring(&mut io, &mut scratch[..burst], &port_index, now_us);
            }
            self.datapath.drain_egress(&mut io, now_us);
        }
        if let Some(l) = &lockstep {
            // Nothing more from this worker's input: the others need not wait for it.
            l.clocks[self.index].store(u64::MAX, Ordering::Release);
        }
        if hand_offs {
            // Second phase of the stop: once every worker has stopped rx, nothing more is handed
            // over; drain what was.
            STOPPED_RX.fetch_add(1, Ordering::SeqCst);
            loop {
                online.quiescent();
                let all_stopped = STOPPED_RX.load(Ordering::SeqCst) >= self.workers;
                let now_us = rdtsc() / self.tsc_per_us;
                let n = self.drain_ring(&mut io, &mut scratch[..burst], &port_index, now_us);
                self.drain_qos_rings(&mut io, &mut scratch[..burst], now_us);
                if all_stopped && n == 0 {
                    break;
                }
            }
        }
        if self.qos_shared {
            // Third phase: once every worker has processed its hand-offs, nothing more goes to
            // a scheduler's owner; each owner empties its rings into its schedulers.
            DRAINED_HAND_OFFS.fetch_add(1, Ordering::SeqCst);
            loop {
                online.quiescent();
                let all_drained = DRAINED_HAND_OFFS.load(Ordering::SeqCst) >= self.workers;
                let now_us = rdtsc() / self.tsc_per_us;
                let n = self.drain_qos_rings(&mut io, &mut scratch[..burst], now_us);
                if all_drained && n == 0 {
                    break;
                }
            }
        }
        self.datapath.finish_egress(&mut io);
        io.flush_all();
        drop(online);
        self.datapath.counters.drop_n(Reason::TxFull, io.tx_full);
        stats.residence = io.residence;
        if let Some(p) = &mut live {
            p.publish(&self.datapath, &stats);
        }
        (self.datapath, stats)
    }

    /// One poll-loop turn of a replay in lockstep, when several workers send to a shaped port
    /// (whose owner must see their packets in about capture order for the shaper and the
    /// priorities to act as in a single worker's replay).
    ///
    /// Each worker publishes in `clocks` a lower bound of the capture time (µs) of anything it
    /// will still send: the capture time of the next packet it holds, its clock when it holds
    /// none, `u64::MAX` once its input is exhausted (an rx poll of every queue found nothing:
    /// net_pcap returns nothing only at the end of its file) or it stopped. A worker processes
    /// the packets of its held burst only up to the smallest clock the others published plus
    /// [`REPLAY_SKEW_US`], having first drained its scheduler rings: what the others sent
    /// before they published is then in its schedulers. The worker holding the earliest packet
    /// can always go on, so no worker waits forever; after a stop was requested, a worker
    /// whose bound has not moved for 100 ms (another worker died) processes what it holds.
    ///
    /// Hand-offs (a sharded collective's contributions, handed to the worker that owns their
    /// slots) are sends of the worker that takes them, at the capture time of the packet: while
    /// any handed packet is still to be processed ([`Lockstep::hand_offs_pending`]), no worker
    /// processes a received one, and with hand-off rings a worker processes its packets one at
    /// a time, so that what the taker sends for a handed packet reaches the schedulers before
    /// anything received after it. (Every worker empties its hand-off ring every turn, so the
    /// wait ends.)
    fn lockstep(
        &mut self,
        l: &Lockstep,
        ctx: Step<'_>,
        mbufs: &mut [Option<Mbuf>],
        scratch: &mut [Option<Mbuf>],
        held: &mut Held,
        stalled_since: &mut Option<u64>,
    ) {
        let me = self.index;
        let clocks = &l.clocks;
        let others = clocks.iter().enumerate().filter(|(i, _)| *i != me).map(|(_, c)| c.load(Ordering::Acquire));
        let mut bound = others.min().unwrap_or(u64::MAX).saturating_add(REPLAY_SKEW_US);
        // Read before the rings are drained: once nothing handed is pending, what its takers
        // sent for it is in the rings this drain empties.
        let pending = l.hand_offs_pending();
        self.drain_qos_rings(ctx.io, scratch, ctx.now_us);
        let one_at_a_time = self.rings.len() > 1;
        let stamp = |m: &Option<Mbuf>| m.as_ref().and_then(|m| m.rx_timestamp_us()).unwrap_or(0);
        let publish = |t: u64| {
            let c = &clocks[me];
            c.store(c.load(Ordering::Relaxed).max(t), Ordering::Release);
        };
        if held.pos == held.end {
            *held = Held::default();
            if quitting() {
                clocks[me].store(u64::MAX, Ordering::Release);
                return;
            }
            if self.rings.len() > 1 && !self.rings_have_room(ctx.room_needed) {
                return; // backpressure, as in the free-running loop
            }
            let got = ctx.rx.iter().find_map(|(rxq, port)| {
                let n = rxq.rx_burst(mbufs);
                (n > 0).then_some((*port, n))
            });
            let Some((port, n)) = got else {
                clocks[me].store(u64::MAX, Ordering::Release);
                return;
            };
            *held = Held { port, pos: 0, end: n };
            // Every packet sent so far is in the rings: the held burst's first packet bounds
            // what follows.
            clocks[me].store(stamp(&mbufs[0]), Ordering::Release);
        }
        // After a stop was requested, a worker that has made no progress for 100 ms (another
        // worker died) goes on regardless; until then the stop changes nothing of the order (the
        // ports have read their files: the packets held are still to be processed in order).
        let mut stalled_out = false;
        if quitting() {
            let now = ctx.now_us;
            match *stalled_since {
                Some(t) if now.saturating_sub(t) > 100_000 => stalled_out = true,
                Some(_) => {}
                None => *stalled_since = Some(now),
            }
        }
        if stalled_out {
            bound = u64::MAX;
        } else if pending {
            return;
        }
        let mut k = held.pos;
        while k < held.end && stamp(&mbufs[k]) <= bound && (k == held.pos || !one_at_a_time) {
            k += 1;
        }
        if k == held.pos {
            return;
        }
        *stalled_since = None;
        let last = stamp(&mbufs[k - 1]);
        self.datapath.process_burst(ctx.io, held.port, &mut mbufs[held.pos..k], ctx.now_us);
        held.pos = k;
        publish(if k < held.end { stamp(&mbufs[k]) } else { last });
    }
}

/// Free slots (mbufs) each hand-off ring must have before a worker takes an rx burst of
/// `burst` packets, with `workers` workers: `(workers - 1) x burst`, so that no hand-off ever
/// finds a ring full (every producer checks before each burst and then hands off at most
/// `burst` packets). A ring must hold at least this many mbufs, or rx would never resume.
pub fn ring_room_needed(workers: usize, burst: usize) -> u32 {
    (workers.saturating_sub(1) * burst.min(MAX_BURST)) as u32
}

/// Mbufs one frame may keep out of the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameMbufs {
    /// A frame the appliance makes (result, copy, NAK): 1, or 4 with `[dataplane]
    /// zero_copy_results` (a result's chain of up to 3, and the frame whose payload it shares,
    /// out of the pool until the last frame sharing it is freed).
    pub made: u64,
    /// A received frame: 1, or, when a port's `mtu` lets frames longer than one mbuf's data
    /// room in, the segments of the longest (`ceil(max frame / mbuf frame)`: a jumbo chain).
    pub received: u64,
}

impl FrameMbufs {
    /// Every frame in one mbuf.
    pub const ONE: FrameMbufs = FrameMbufs { made: 1, received: 1 };

    /// The most a frame in a tx buffer, a ring or a tx queue may hold: a made or a forwarded one.
    pub fn any(self) -> u64 {
        self.made.max(self.received)
    }
}

/// The mbufs one worker may hold at once, besides its hand-off ring and the pool's per-lcore
/// cache: the burst it is processing (received, or taken from its ring: `burst` frames of up to
/// `segs.received` mbufs) and its tx buffers (`ports` x [`TX_BUFFER`] frames of up to
/// `segs.any()` mbufs each); copies, results and NAKs are made into the tx buffers.
pub fn mbufs_held(burst: usize, ports: usize, segs: FrameMbufs) -> u64 {
    burst.min(MAX_BURST) as u64 * segs.received + (ports * TX_BUFFER) as u64 * segs.any()
}

/// What one lockstep turn works with.
struct Step<'a> {
    io: &'a mut TxIo,
    rx: &'a [(dpdk::RxQueue, u16)],
    room_needed: u32,
    now_us: u64,
}

impl Worker {
    /// Switches to the pipeline version (and collective set) the control plane posted, if it
    /// did: the counts carry over (the kept collectives' states move over), the counters are
    /// published at once on the board shaped for the new version (so a reader of it never sees
    /// this worker's counts missing), and the old version goes back.
    #[inline]
    fn switch_if_asked(
        &mut self,
        io: &mut TxIo,
        live: &mut Option<crate::live::Publisher>,
        stats: &crate::live::LoopStats,
    ) {
        let Some(mb) = &self.control else { return };
        let Some(mut u) = mb.take() else { return };
        self.datapath.swap_pipeline(&mut u.swap);
        if let Some(s) = &mut u.agg {
            self.datapath.swap_collectives(s);
        }
        if let (Some(p), Some(board)) = (live.as_mut(), u.board.take()) {
            p.set_board(board);
            self.datapath.counters.drop_n(Reason::TxFull, std::mem::take(&mut io.tx_full));
            let stats = crate::live::LoopStats { residence: io.residence, ..*stats };
            p.publish(&self.datapath, &stats);
        }
        mb.give_back(u);
    }

    /// True when every other worker's ring has at least `need` free slots.
    #[inline]
    fn rings_have_room(&self, need: u32) -> bool {
        self.rings.iter().enumerate().all(|(i, r)| i == self.index || r.free_count() >= need)
    }

    /// Queues what other workers handed over for the shaped ports this one owns, one burst
    /// per ring and turn, up to a ring's worth; returns how many.
    #[inline]
    fn drain_qos_rings(&mut self, io: &mut TxIo, pkts: &mut [Option<Mbuf>], now_us: u64) -> usize {
        let mut total = 0;
        for i in 0..self.qos_in.len() {
            let (port, ring) = self.qos_in[i];
            let mut rounds = QOS_RING_SLOTS as usize / pkts.len().max(1);
            loop {
                let n = ring.pop_burst(pkts);
                for m in pkts.iter_mut().take(n).filter_map(Option::take) {
                    let class = m.sched_class();
                    self.datapath.schedule_handed_over(io, port, class, m, now_us);
                }
                total += n;
                rounds = rounds.saturating_sub(1);
                if n < pkts.len() || rounds == 0 {
                    break;
                }
            }
        }
        total
    }

    /// Processes what other workers handed to this one; returns how many.
    #[inline]
    fn drain_ring(&mut self, io: &mut TxIo, pkts: &mut [Option<Mbuf>], port_index: &[u16], now_us: u64) -> usize {
        let Some(ring) = self.rings.get(self.index).copied() else { return 0 };
        if self.lockstep.is_some() {
            return self.drain_ring_in_order(ring, io, pkts, port_index, now_us);
        }
        let n = ring.pop_burst(pkts);
        for m in pkts.iter_mut().take(n).filter_map(Option::take) {
            let port = port_index.get(m.port() as usize).copied().unwrap_or(0);
            self.datapath.process_handed_off(io, port, m, now_us);
        }
        n
    }

    /// [`Worker::drain_ring`] in a lockstep replay: one handed packet at a time, the scheduler
    /// rings emptied before each. What a worker sent to a scheduler before it handed the packet
    /// over (the results of a contribution handed to it earlier) is then in those rings (taking
    /// the packet from the ring makes it visible), so it reaches the scheduler first, as in
    /// capture order.
    fn drain_ring_in_order(
        &mut self,
        ring: Ring,
        io: &mut TxIo,
        pkts: &mut [Option<Mbuf>],
        port_index: &[u16],
        now_us: u64,
    ) -> usize {
        let (one, rest) = pkts.split_at_mut(1);
        let mut spare: [Option<Mbuf>; 32] = std::array::from_fn(|_| None);
        let qos = if rest.is_empty() { &mut spare[..] } else { rest };
        let mut total = 0;
        while ring.pop_burst(one) == 1 {
            while self.drain_qos_rings(io, qos, now_us) > 0 {}
            if let Some(m) = one[0].take() {
                let port = port_index.get(m.port() as usize).copied().unwrap_or(0);
                self.datapath.process_handed_off(io, port, m, now_us);
            }
            if let Some(l) = &self.lockstep {
                l.processed[self.index].fetch_add(1, Ordering::Release);
            }
            total += 1;
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shaped_ports_are_spread_over_the_workers_in_port_order() {
        let qos = [Some(()), None, Some(()), Some(()), None];
        assert_eq!(scheduler_owners(&qos, 2), vec![Some(0), None, Some(1), Some(0), None]);
        assert_eq!(scheduler_owners(&qos, 1), vec![Some(0), None, Some(0), Some(0), None]);
        assert_eq!(scheduler_owners(&qos, 4), vec![Some(0), None, Some(1), Some(2), None]);
        assert_eq!(scheduler_owners::<()>(&[None, None], 3), vec![None, None]);
    }
}
