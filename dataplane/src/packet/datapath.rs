//! One worker's packet processing, top to bottom: checks, the ingress pipeline, egress.
//!
//! [`Datapath::process`] is generic over [`PacketIo`], so the appliance (mbufs, DPDK tx queues)
//! and the tests (heap buffers) run the same code.
//!
//! Multi-segment frames (mbuf chains: frames larger than the mempool's data room) are forwarded
//! as switches with scatter-gather NICs forward them: parsed with a router's checks from their
//! first segment, the lengths judged against the whole frame
//! ([`crate::parse::parse_segmented_into`]; headers the first segment cuts are moved into it
//! by [`PacketBuf::pull_up`] as far as its room allows and parsed again, else
//! `segmented_headers`), rewritten in the first segment (every action touches only headers) and
//! sent as chains; flood and multicast copies copy every segment ([`PacketIo::copy_pkt`]). What
//! the appliance reads whole is dropped `multi_segment` instead of linearised (a chain of 2 KiB
//! mbufs has no room to be made contiguous in its first one): gradient contributions for the
//! aggregator, an ARP or Neighbor Solicitation for the port's own address unless its first
//! segment's room holds it whole ([`crate::neighbor::concerns`]; other ARP and ICMPv6 chains
//! are transit), and every chain
//! under [`Checks::All`] (`verify_transit`), whose UDP checksums and ICRCs are summed over
//! contiguous bytes only.

use crate::action::{Action, Egress};
use crate::agg::{Aggregator, PortAddr};
use crate::buf::{PacketBuf, PacketIo, VecBuf};
use crate::meta::{Meta, CLASS_UNSET};
use crate::neighbor::Verdict;
use crate::parse::{parse_checks_into, parse_segmented_into, verify_l4, Checks, Layers, Parsed};
use crate::prefetch::{prefetch, prefetch_all};
use crate::sched::{ClassMap, Dequeued, Offer, PortConfig, Scheduler};
use crate::stats::{Counters, Reason};
use crate::table::{Carry, Lane, Pipeline, PipelineState};

/// Largest burst [`Datapath::process_burst`] handles at once (packets); longer slices are
/// processed in chunks of this size.
pub const MAX_BURST: usize = 512;

// A chunk's packets go through the tables together.
const _: () = assert!(MAX_BURST <= crate::table::burst::MAX_LANES);

/// Packets ahead whose frame data a burst's parse loop prefetches (as DPDK's l3fwd).
const PREFETCH_AHEAD: usize = 3;

/// How many bytes a chain whose headers the first segment cut asks [`PacketBuf::pull_up`] to
/// move into it before it is parsed again: more than the deepest header stack the parser
/// reads short of long IPv6 extension headers (two tags, IPv4 with options, UDP, BTH, DETH
/// and a gradient header are 138 bytes); the first segment's room bounds it.
const PULL_UP_BYTES: usize = 512;

/// A gradient packet whose L4 pass (checksum or ICRC) is still to come: its consumption reads
/// the whole frame.
const GRADIENT_UNVERIFIED: Layers = Layers::GRADIENT.union(Layers::L4_UNVERIFIED);

/// A burst's parses: one slot per packet, reused burst after burst (no allocation per burst).
#[derive(Clone, Default)]
struct BurstScratch {
    /// The packets' parses (valid where `verdict` is `Ok`).
    parsed: Vec<Parsed>,
    /// Per packet: `Ok` when parsed, else why it is dropped.
    verdict: Vec<Result<(), Reason>>,
    /// Per parsed packet: the first table's lookup (a pipeline with meters).
    first_hit: Vec<Option<usize>>,
    /// Per packet: which way it goes (a pipeline without meters).
    way: Vec<Way>,
    /// Per packet: its way through the tables ([`Pipeline::apply_burst`]).
    lanes: Vec<Lane>,
}

/// How [`Datapath::process_burst`] takes a burst through the tables. In every case the
/// first table's lookups are batched across the burst; the outputs and counts are the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Staging {
    /// Every table's lookups batched across the burst ([`Pipeline::apply_burst`]) when a table
    /// after the first is large enough to miss the caches ([`Pipeline::stages_bursts`]).
    #[default]
    Auto,
    /// Every table's lookups batched whenever the pipeline allows it (no meters).
    Always,
    /// After the first table's lookups, each packet through the rest alone.
    Never,
}

impl Staging {
    /// Whether bursts through `pipeline` are staged under this choice.
    pub fn stages(self, pipeline: &Pipeline) -> bool {
        match self {
            Staging::Auto => pipeline.stages_bursts(),
            Staging::Always => pipeline.can_stage_bursts(),
            Staging::Never => false,
        }
    }
}

/// Why the appliance, as the destination of `p`, refuses it (`p` is source-routed or carries a
/// discarding IPv6 option): the Routing header's fault first, then the source route, then the
/// option.
#[cold]
fn refusal(p: &Parsed) -> Reason {
    if p.ipv6_bad_segments_left {
        Reason::Ipv6BadSegmentsLeft
    } else if p.source_routed {
        Reason::SourceRouted
    } else {
        Reason::Ipv6UnrecognizedOption
    }
}

/// Whether `p` is ARP or ICMPv6 (neighbour discovery among it), which
/// [`crate::neighbor::answer`] looks at when the ingress port has addresses.
#[inline(always)]
fn is_neighbor_message(p: &Parsed) -> bool {
    p.has(Layers::ARP) || (p.has(Layers::IPV6) && p.ip_proto == crate::wire::ndp::NEXT_HEADER_ICMPV6)
}

/// Which way a parsed packet of a burst goes, judged before any of them goes on
/// ([`Datapath::way`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    /// Through the tables, with the burst ([`Pipeline::apply_burst`]).
    Tables,
    /// To the aggregator, which wants it.
    Consume,
    /// The rest of [`Datapath::deliver`] for it alone: a neighbour message on a port with
    /// addresses, an IPv6 packet for the appliance with segments left, or an unparsed packet.
    Other,
}

impl BurstScratch {
    fn new() -> Self {
        BurstScratch {
            parsed: vec![Parsed::default(); MAX_BURST],
            verdict: vec![Ok(()); MAX_BURST],
            first_hit: vec![None; MAX_BURST],
            way: vec![Way::Other; MAX_BURST],
            lanes: vec![Lane::idle(); MAX_BURST],
        }
    }
}

impl std::fmt::Debug for BurstScratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BurstScratch({} slots)", self.parsed.len())
    }
}

/// Items one call of [`PortEgress::advance`] dequeues at one instant at most (a shaped port's
/// bucket releases fewer; an unshaped port's queue is emptied in bursts of this size).
pub const DEQUEUE_BURST: usize = MAX_BURST;

/// What [`PortEgress::enqueue`] did: the reason it refused the packet (`None`: queued or sent),
/// and how many queued packets it dropped at dequeue meanwhile.
type Enqueued = (Option<Reason>, u64);

/// One port's egress scheduler on this worker, with its class map and clock.
#[derive(Debug)]
pub struct PortEgress<B> {
    /// The scheduler (counters and histograms included).
    pub sched: Scheduler<B>,
    /// How a frame's class is chosen when no action set `meta.class`.
    pub map: ClassMap,
    /// The latest instant (µs) the scheduler was run at: its clock never goes back.
    last_us: u64,
}

impl<B: PacketBuf> PortEgress<B> {
    /// A port's egress state from its configuration (`cfg.hz` must be 1e6: the datapath's clock
    /// is µs).
    ///
    /// # Errors
    /// What [`Scheduler::new`] refuses.
    pub fn new(cfg: &PortConfig, map: ClassMap) -> Result<Self, String> {
        Ok(PortEgress { sched: Scheduler::new(cfg)?, map, last_us: 0 })
    }

    /// Runs the scheduler's clock forward to `t` (µs): at each instant a packet may leave
    /// ([`Scheduler::next_departure`]) up to `t`, what the scheduler releases is sent on `port`
    /// through `io`. Returns the packets dropped at dequeue (RED with marking at dequeue), freed.
    /// Out of line: an idle port's packets ([`PortEgress::enqueue`]) never come here.
    #[inline(never)]
    fn advance<I: PacketIo<Buf = B>>(&mut self, io: &mut I, port: u16, t: u64) -> u64 {
        let t = t.max(self.last_us);
        let mut dropped = 0;
        let mut stalls = 0;
        while let Some(d) = self.sched.next_departure(self.last_us) {
            if d > t {
                break;
            }
            self.last_us = d;
            let mut handed = 0;
            self.sched.dequeue(d, DEQUEUE_BURST, |x| {
                handed += 1;
                match x {
                    Dequeued::Send(b) => io.send(port, b),
                    Dequeued::Drop(b, _) => {
                        dropped += 1;
                        drop(b)
                    }
                }
            });
            // The scheduler promised a departure at `d`; should it release nothing twice, stop
            // rather than spin (the worker's next call resumes).
            stalls += u32::from(handed == 0);
            if stalls > 1 {
                break;
            }
        }
        // Whatever could leave by `t` has left: the clock stands at `t` (a packet queued now
        // cannot leave earlier, nor can tokens be spent in the past).
        self.last_us = t;
        dropped
    }

    /// Queues `pkt` in class `class` ([`CLASS_UNSET`]: the map's) at `now` (µs), after running
    /// the clock to `now`, and releases what may leave at `now`. Returns the packets dropped:
    /// the refused one with its reason, and those dropped at dequeue.
    #[inline(always)]
    fn enqueue<I: PacketIo<Buf = B>>(&mut self, io: &mut I, port: u16, class: u8, pkt: B, now: u64) -> Enqueued {
        let class = if class == CLASS_UNSET { self.map.classify_in(pkt.data(), pkt.total_len()) } else { class };
        if !self.sched.is_empty() {
            return self.enqueue_busy(io, port, class, pkt, now);
        }
        // An empty scheduler has nothing to release before `now`: only its clock moves. An
        // idle port sends at once (Scheduler::offer); otherwise the packet waits its turn.
        self.last_us = self.last_us.max(now);
        match self.sched.offer(class as usize, pkt, self.last_us) {
            Ok(Offer::Sent(pkt)) => {
                io.send(port, pkt);
                (None, 0)
            }
            Ok(Offer::Queued) => (None, self.advance(io, port, now)),
            Err(r) => (Some(r.reason), self.advance(io, port, now)),
        }
    }

    /// [`PortEgress::enqueue`] (the class chosen) on a port with packets queued: what may leave
    /// by `now` leaves first. Out of line: the idle port's path stays small.
    #[inline(never)]
    fn enqueue_busy<I: PacketIo<Buf = B>>(&mut self, io: &mut I, port: u16, class: u8, pkt: B, now: u64) -> Enqueued {
        let mut dropped = self.advance(io, port, now);
        match self.sched.offer(class as usize, pkt, self.last_us) {
            Ok(Offer::Sent(pkt)) => {
                io.send(port, pkt);
                (None, dropped)
            }
            Ok(Offer::Queued) => {
                dropped += self.advance(io, port, now);
                (None, dropped)
            }
            Err(r) => {
                dropped += self.advance(io, port, now);
                (Some(r.reason), dropped)
            }
        }
    }

    /// Sends everything queued: the clock jumps from departure to departure until every class
    /// is empty (the end of a replay). Returns the packets dropped at dequeue.
    fn finish<I: PacketIo<Buf = B>>(&mut self, io: &mut I, port: u16) -> u64 {
        let mut dropped = 0;
        let mut prev = None;
        while let Some(d) = self.sched.next_departure(self.last_us) {
            // Back at the same instant: the scheduler released nothing at `d` (never expected).
            if d == u64::MAX || prev == Some(d) {
                break;
            }
            prev = Some(d);
            dropped += self.advance(io, port, d);
        }
        // Anything a stalled scheduler kept is freed, counted as dropped at the tail.
        let mut left = 0;
        self.sched.flush(|b| {
            left += 1;
            drop(b)
        });
        dropped + left
    }
}

/// Per-worker state: the pipeline, its counts, the worker's counters, and its egress
/// schedulers. `B` is the packet buffer type of the [`PacketIo`] it runs with (an mbuf in the
/// appliance).
#[derive(Debug)]
pub struct Datapath<B = VecBuf> {
    /// The ingress pipeline (only read while packets go through it).
    pub pipeline: Pipeline,
    /// This worker's counts of the pipeline's entries, misses and named counters.
    pub pipeline_state: PipelineState,
    /// This worker's counters.
    pub counters: Counters,
    /// The aggregator: the appliance gives every worker one, with or without collectives (it
    /// answers gradient packets for collectives it does not have with NAK reason 1). Without
    /// one (tests, benchmarks of the tables), gradient packets go through the tables.
    pub agg: Option<Aggregator>,
    /// The appliance's own addresses per port (ARP and neighbour discovery are answered for them).
    pub local: Vec<PortAddr>,
    ports: u16,
    gradient_udp_port: u16,
    /// What the parse verifies: a router's checks (the default; the UDP checksum and ICRC of a
    /// packet the appliance consumes are verified before the aggregator takes it), or every
    /// checksum of every packet (`[dataplane] verify_transit`).
    checks: Checks,
    /// Whether bursts go through the tables table by table ([`Staging`]).
    staging: Staging,
    /// What `staging` decides for the current pipeline (kept at construction and each swap,
    /// so that the burst loop reads one flag).
    staged: bool,
    /// Some table uses `aggregate`: gradient packets go through the pipeline, and only that
    /// action sums them. Otherwise every gradient packet addressed to the appliance goes to
    /// the aggregator before the tables.
    aggregate_in_pipeline: bool,
    scratch: BurstScratch,
    /// Per port, its egress scheduler when this worker owns it; empty when no port has one
    /// (then sending is a bounds check and `io.send`). Boxed: a port without one is a null
    /// pointer, which a send tests in one instruction.
    pub egress: Vec<Option<Box<PortEgress<B>>>>,
    /// Per port, the class map of a shaped port whose scheduler another worker owns: packets
    /// for it are classified here and handed over ([`PacketIo::to_scheduler`]). Empty when this
    /// worker owns every scheduler.
    remote_egress: Vec<Option<ClassMap>>,
    /// The latest rx timestamp seen (µs, capture time in a replay): the schedulers' clock when
    /// packets carry timestamps.
    rx_clock_us: Option<u64>,
    /// The appliance's clock (µs) as of the current burst, for packets without timestamps.
    live_us: u64,
    /// Whether rx timestamps drive the schedulers' clock (default; a replay's capture times).
    capture_clock: bool,
    /// Per port, the longest frame it sends (bytes, without FCS): `mtu` + 22 for a port with an
    /// `mtu` ([`Datapath::with_egress_limits`]); empty when no port sets one. A longer frame is an
    /// `egress_oversize` drop.
    egress_max: Vec<u32>,
}

/// A pipeline version for [`Datapath::swap_pipeline`], made by the control plane: before the
/// swap the new version, after it the old one.
#[derive(Debug)]
pub struct PipelineSwap {
    /// The pipeline.
    pub pipeline: Pipeline,
    /// Its counters and meter states (fresh before the swap).
    pub state: PipelineState,
    /// What the new version keeps of the old one's counts.
    pub carry: std::sync::Arc<Carry>,
    /// Whether some table of `pipeline` uses `aggregate` (see [`Pipeline::any_action`]).
    pub aggregates: bool,
}

impl PipelineSwap {
    /// The swap to `pipeline`, keeping what `carry` names.
    pub fn new(pipeline: Pipeline, carry: std::sync::Arc<Carry>) -> Self {
        PipelineSwap {
            state: PipelineState::new(&pipeline),
            aggregates: pipeline.any_action(|a| *a == Action::Aggregate),
            pipeline,
            carry,
        }
    }
}

impl<B: PacketBuf> Datapath<B> {
    /// A datapath over `ports` ports running `pipeline`; `gradient_udp_port` is the UDP port of
    /// the gradient protocol's UDP carriage (spec section 1).
    pub fn new(pipeline: Pipeline, ports: u16, gradient_udp_port: u16) -> Self {
        Datapath {
            pipeline_state: PipelineState::new(&pipeline),
            aggregate_in_pipeline: pipeline.any_action(|a| *a == Action::Aggregate),
            staged: Staging::Auto.stages(&pipeline),
            pipeline,
            counters: Counters::new(ports),
            agg: None,
            local: Vec::new(),
            ports,
            gradient_udp_port,
            checks: Checks::Router,
            staging: Staging::Auto,
            scratch: BurstScratch::new(),
            egress: Vec::new(),
            remote_egress: Vec::new(),
            rx_clock_us: None,
            live_us: 0,
            capture_clock: true,
            egress_max: Vec::new(),
        }
    }

    /// Sets the longest frame each port sends (`limits[port]`, bytes without FCS; `None`: no
    /// limit): a longer frame is not sent but counted as an `egress_oversize` drop, as a router
    /// drops a packet it may not fragment. The runtime gives a port with an `mtu` `mtu` + 22
    /// (the Ethernet header and two VLAN tags: the overhead DPDK PMDs add to an MTU for their
    /// maximum frame length). Ports beyond `limits` have no limit.
    pub fn with_egress_limits(mut self, limits: &[Option<u32>]) -> Self {
        self.egress_max = if limits.iter().any(Option::is_some) {
            limits.iter().map(|m| m.unwrap_or(u32::MAX)).collect()
        } else {
            Vec::new()
        };
        self
    }

    /// Switches to another version of the pipeline (the control plane's runtime update), at a
    /// burst boundary: `swap`'s state (fresh, shaped for its pipeline) takes the counts that
    /// `swap.carry` names from this worker's state, then the two versions change places, so
    /// that `swap` holds the old version afterwards (to be freed off the fast path). No
    /// allocation and no lookup of entries: the control plane prepared everything.
    pub fn swap_pipeline(&mut self, swap: &mut PipelineSwap) {
        swap.state.carry_from(&mut self.pipeline_state, &swap.carry);
        std::mem::swap(&mut self.pipeline, &mut swap.pipeline);
        std::mem::swap(&mut self.pipeline_state, &mut swap.state);
        std::mem::swap(&mut self.aggregate_in_pipeline, &mut swap.aggregates);
        self.staged = self.staging.stages(&self.pipeline);
    }

    /// Switches the aggregator to the collective set `swap` (the control plane's runtime
    /// change, at a burst boundary: [`Aggregator::swap_collectives`]); afterwards `swap` holds
    /// the old set. Nothing happens without an aggregator (the appliance builds one for every
    /// worker).
    pub fn swap_collectives(&mut self, swap: &mut crate::agg::swap::CollSwap) {
        if let Some(a) = &mut self.agg {
            a.swap_collectives(swap);
        }
    }

    /// Adds egress schedulers: `ports[p]`, when `Some`, is port `p`'s configuration and class
    /// map (its `hz` must be 1e6, the datapath's µs clock). Packets sent to such a port are
    /// queued in it and leave as [`Datapath::drain_egress`] or later sends release them.
    ///
    /// # Errors
    /// What [`Scheduler::new`] refuses, with the port's index.
    pub fn with_egress(self, ports: &[Option<(PortConfig, ClassMap)>]) -> Result<Self, String> {
        self.with_egress_owned(ports, &vec![true; ports.len()])
    }

    /// As [`Datapath::with_egress`], but this worker builds the schedulers of the ports `owned`
    /// marks only; a packet for another shaped port is classified here (the class `set_class`
    /// chose, else the port's map) and handed to the owner with [`PacketIo::to_scheduler`],
    /// which then queues it with [`Datapath::schedule_handed_over`].
    ///
    /// # Errors
    /// What [`Scheduler::new`] refuses, with the port's index.
    pub fn with_egress_owned(
        mut self,
        ports: &[Option<(PortConfig, ClassMap)>],
        owned: &[bool],
    ) -> Result<Self, String> {
        self.egress = Vec::new();
        self.remote_egress = Vec::new();
        if ports.iter().all(Option::is_none) {
            return Ok(self);
        }
        let owns = |i: usize| owned.get(i).copied().unwrap_or(false);
        self.egress = ports
            .iter()
            .enumerate()
            .map(|(i, p)| match p {
                Some((cfg, map)) if owns(i) => {
                    PortEgress::new(cfg, *map).map(|e| Some(Box::new(e))).map_err(|e| format!("port {i}: {e}"))
                }
                _ => Ok(None),
            })
            .collect::<Result<_, _>>()?;
        if ports.iter().enumerate().any(|(i, p)| p.is_some() && !owns(i)) {
            self.remote_egress =
                ports.iter().enumerate().map(|(i, p)| p.as_ref().filter(|_| !owns(i)).map(|(_, m)| *m)).collect();
        }
        Ok(self)
    }

    /// Queues a packet another worker classified into `class` and handed over for port `port`,
    /// whose scheduler this worker owns ([`Datapath::with_egress_owned`]); counted `tx` by the
    /// sender, so not again. Its rx timestamp, if any, moves the schedulers' clock as this
    /// worker's own packets do. A refusal is counted under its reason and the packet freed; a
    /// port without a scheduler here sends it straight to `io` (never expected).
    #[inline]
    pub fn schedule_handed_over<I: PacketIo<Buf = B>>(
        &mut self,
        io: &mut I,
        port: u16,
        class: u8,
        pkt: I::Buf,
        now_us: u64,
    ) {
        self.live_us = self.live_us.max(now_us);
        self.tick(&pkt);
        let now = self.rx_clock_us.unwrap_or(self.live_us);
        let Some(Some(e)) = self.egress.get_mut(port as usize) else {
            io.send(port, pkt);
            return;
        };
        let (refused, red) = e.enqueue(io, port, class, pkt, now);
        self.counters.drop_n(Reason::RedDrop, red);
        if let Some(r) = refused {
            self.counters.drop(r);
        }
    }

    /// Chooses the schedulers' clock: with `capture` (the default) the packets' rx timestamps
    /// when they carry them (a replay's capture times, so shaping follows the capture), else
    /// always the `now_us` the worker passes (the TSC: live ports, whose timestamps, if any, are
    /// not the worker's clock).
    pub fn with_capture_clock(mut self, capture: bool) -> Self {
        self.capture_clock = capture;
        self
    }

    /// The schedulers' clock (µs): the latest rx timestamp seen when packets carry them (capture
    /// time in a replay), else `now_us`.
    #[inline]
    pub fn egress_clock(&self, now_us: u64) -> u64 {
        self.rx_clock_us.unwrap_or(now_us)
    }

    /// Releases what each scheduler allows up to the clock ([`Datapath::egress_clock`] of
    /// `now_us`) into `io.send`; returns nothing when no port has a scheduler. Call it every
    /// poll-loop iteration.
    #[inline]
    pub fn drain_egress<I: PacketIo<Buf = B>>(&mut self, io: &mut I, now_us: u64) {
        if self.egress.is_empty() {
            return;
        }
        if self.capture_clock && self.rx_clock_us.is_none() && self.egress.iter().flatten().all(|e| e.sched.is_empty())
        {
            // A replay before its first packet: the capture clock has not started, and running
            // the schedulers on the live clock now would put them ahead of every capture time.
            return;
        }
        let t = self.egress_clock(now_us);
        for (port, e) in self.egress.iter_mut().enumerate() {
            if let Some(e) = e {
                let red = e.advance(io, port as u16, t);
                self.counters.drop_n(Reason::RedDrop, red);
            }
        }
    }

    /// The earliest instant (µs) at which a scheduler can release a packet, `None` when every
    /// queue is empty.
    pub fn next_departure(&mut self) -> Option<u64> {
        self.egress.iter_mut().flatten().filter_map(|e| e.sched.next_departure(e.last_us)).min()
    }

    /// Sends everything still queued, advancing each scheduler's clock from departure to
    /// departure until every queue is empty (the end of a replay: a run never ends with packets
    /// queued). What a scheduler drops at dequeue on the way is counted `red_drop`.
    pub fn finish_egress<I: PacketIo<Buf = B>>(&mut self, io: &mut I) {
        for (port, e) in self.egress.iter_mut().enumerate() {
            if let Some(e) = e {
                let red = e.finish(io, port as u16);
                self.counters.drop_n(Reason::RedDrop, red);
            }
        }
    }

    /// Notes a packet's rx timestamp in the schedulers' clock (nothing without schedulers).
    #[inline(always)]
    fn tick(&mut self, pkt: &B) {
        if self.egress.is_empty() || !self.capture_clock {
            return;
        }
        if let Some(t) = pkt.rx_timestamp_us() {
            self.rx_clock_us = Some(self.rx_clock_us.map_or(t, |c| c.max(t)));
        }
    }

    /// Sets the appliance's own addresses per port: ARP requests and IPv6 neighbour
    /// solicitations for them are answered.
    pub fn with_local_addresses(mut self, local: Vec<PortAddr>) -> Self {
        self.local = local;
        self
    }

    /// Sets how bursts go through the tables (default [`Staging::Auto`]).
    pub fn with_staging(mut self, staging: Staging) -> Self {
        self.staging = staging;
        self.staged = staging.stages(&self.pipeline);
        self
    }

    /// Sets what the parse verifies of every packet (default [`Checks::Router`]: a router's
    /// checks for transit traffic, every check of the spec for what the appliance consumes;
    /// [`Checks::All`]: every checksum of every packet, `[dataplane] verify_transit = true`).
    pub fn with_checks(mut self, checks: Checks) -> Self {
        self.checks = checks;
        self
    }

    /// Adds an aggregator: gradient packets addressed to the appliance go to it instead of the
    /// tables.
    pub fn with_aggregator(mut self, agg: Aggregator) -> Self {
        self.agg = Some(agg);
        self
    }

    /// Processes one received packet: it is sent, copied, consumed by the aggregator, or dropped
    /// and counted. `now_us` is the appliance's clock (µs) for packets without an rx timestamp.
    #[inline]
    pub fn process<I: PacketIo<Buf = B>>(&mut self, io: &mut I, in_port: u16, pkt: I::Buf, now_us: u64) {
        self.counters.rx(in_port, pkt.total_len());
        self.live_us = now_us;
        self.process_counted(io, in_port, pkt, now_us);
    }

    /// Processes a received packet that was already counted ([`Datapath::process`]'s one
    /// caller: always inlined there).
    #[inline(always)]
    fn process_counted<I: PacketIo<Buf = B>>(&mut self, io: &mut I, in_port: u16, mut pkt: I::Buf, now_us: u64) {
        let mut p = Parsed::default();
        let parsed = if pkt.is_segmented() {
            self.parse_segmented(&mut pkt, &mut p)
        } else {
            parse_checks_into(pkt.data(), self.gradient_udp_port, pkt.rx_checksum(), self.checks, &mut p)
        };
        if let Err(r) = parsed {
            self.counters.drop(r);
            return;
        }
        if self.traffic_managed() {
            self.deliver_managed(io, in_port, pkt, &mut p, now_us);
        } else {
            self.deliver::<false, I>(io, in_port, pkt, &mut p, None, now_us);
        }
    }

    /// A gradient packet that another worker received on `in_port`, counted there, took
    /// through the pipeline when it aggregates, and handed to this one, which owns its
    /// collective (software steering, [`PacketIo::hand_off`]): straight to the aggregator,
    /// not counted again as received. Its headers are parsed again (the router's checks);
    /// its UDP checksum or ICRC is verified here, as the owner does for what it receives, just
    /// before the fold (the worker that handed it off read its headers only; with
    /// `verify_transit` it verified everything in its parse, and nothing is verified again).
    #[inline]
    pub fn process_handed_off<I: PacketIo<Buf = B>>(&mut self, io: &mut I, in_port: u16, pkt: I::Buf, now_us: u64) {
        self.live_us = now_us;
        self.tick(&pkt);
        let mut p = Parsed::default();
        if let Err(r) = parse_checks_into(pkt.data(), self.gradient_udp_port, pkt.rx_checksum(), Checks::Router, &mut p)
        {
            self.counters.drop(r);
            return;
        }
        if self.checks == Checks::All {
            // `verify_transit`: the worker that received it verified every checksum in its
            // parse stage, as it does every packet's.
            p.layers.remove(Layers::L4_UNVERIFIED);
        }
        self.aggregate::<true, I>(io, in_port, pkt, &p, now_us);
    }

    /// Processes an rx burst from `in_port` as [`Datapath::process`] would, packet after packet
    /// (same outputs in the same order, same counters), but in stages as DPDK's l3fwd: first
    /// every packet is parsed (into per-worker slots, prefetching frames a few packets ahead,
    /// and the whole frame of a gradient packet whose checksum or ICRC is still to verify),
    /// then what the first table's lookup reads is prefetched for every packet, then each
    /// packet goes its way in order. The cache misses of one stage overlap across the burst
    /// instead of stalling each packet in turn.
    ///
    /// Every `Some` slot of `pkts` is taken (left `None`); `None` slots are skipped. Bursts of
    /// more than [`MAX_BURST`] packets are handled in chunks of it. Never allocates.
    ///
    /// A datapath with traffic management (shaped ports or meters) and one without run two
    /// copies of the burst loop ([`Datapath::process_chunk`]'s `TM`), chosen once per burst:
    /// the second's packets go straight to `io` without asking for a scheduler, the first's
    /// meters are inlined, and neither loop's code (registers, spills) depends on the other's.
    #[inline(never)]
    pub fn process_burst<I: PacketIo<Buf = B>>(
        &mut self,
        io: &mut I,
        in_port: u16,
        pkts: &mut [Option<I::Buf>],
        now_us: u64,
    ) {
        self.live_us = now_us;
        let tm = self.traffic_managed();
        for chunk in pkts.chunks_mut(MAX_BURST) {
            if tm {
                self.process_chunk::<true, I>(io, in_port, chunk, now_us);
            } else {
                self.process_chunk::<false, I>(io, in_port, chunk, now_us);
            }
        }
    }

    /// True when the datapath manages traffic: a port has a scheduler (here or on another
    /// worker), or the pipeline has meters. Its packets take the loops' `TM` copy: sends go
    /// through [`Datapath::send_shaped`], `meter` and `police` are inlined.
    #[inline(always)]
    fn traffic_managed(&self) -> bool {
        !self.egress.is_empty() || !self.remote_egress.is_empty() || !self.pipeline.meters.is_empty()
    }

    /// [`Datapath::process`]'s way for a packet of a traffic-managed datapath
    /// ([`Datapath::traffic_managed`]). Out of line, so that `process` inlines one copy of
    /// [`Datapath::deliver`], not two (two made the forwarding path 88 instructions per packet
    /// longer in callgrind, `pipeline_profile process`).
    #[inline(never)]
    fn deliver_managed<I: PacketIo<Buf = B>>(&mut self, io: &mut I, in_port: u16, pkt: B, p: &mut Parsed, now_us: u64) {
        self.deliver::<true, I>(io, in_port, pkt, p, None, now_us);
    }

    /// [`Datapath::process_burst`] for at most [`MAX_BURST`] packets; `TM` is
    /// [`Datapath::traffic_managed`]. Out of line: each copy is one function, the pipeline's
    /// lookups and actions inlined into it.
    #[inline(never)]
    fn process_chunk<const TM: bool, I: PacketIo<Buf = B>>(
        &mut self,
        io: &mut I,
        in_port: u16,
        pkts: &mut [Option<I::Buf>],
        now_us: u64,
    ) {
        let n = pkts.len();
        // The slots leave `self` for the burst, so that each packet's path can borrow both.
        let mut scratch = std::mem::take(&mut self.scratch);
        let parsed = &mut scratch.parsed[..n];
        let verdict_n = &mut scratch.verdict[..n];
        let first_hit = &mut scratch.first_hit[..n];

        // Stage 1: parse.
        for pkt in pkts.iter().take(PREFETCH_AHEAD).flatten() {
            prefetch(pkt.data().as_ptr());
        }
        for i in 0..n {
            if let Some(Some(ahead)) = pkts.get(i + PREFETCH_AHEAD) {
                prefetch(ahead.data().as_ptr());
            }
            verdict_n[i] = match &mut pkts[i] {
                None => Ok(()),
                Some(pkt) if pkt.is_segmented() => self.parse_segmented(pkt, &mut parsed[i]),
                Some(pkt) => {
                    let v = parse_checks_into(
                        pkt.data(),
                        self.gradient_udp_port,
                        pkt.rx_checksum(),
                        self.checks,
                        &mut parsed[i],
                    );
                    if v.is_ok() && parsed[i].has(GRADIENT_UNVERIFIED) {
                        // Its consumption reads every byte (the checksum or ICRC pass, then
                        // the fold), and a frame another core wrote (a memif peer, a NIC's
                        // DMA) misses every line: ask for them all now, while the rest of the
                        // burst is parsed.
                        prefetch_all(pkt.data());
                    }
                    v
                }
            };
        }

        if self.staged {
            self.tables_staged::<TM, I>(io, in_port, pkts, &mut scratch, now_us);
            self.scratch = scratch;
            return;
        }

        // Not staged (meters, or small tables). Stage 2: the first table's lookups (the packets
        // are as parsed, so this is the lookup the pipeline would do first), after prefetching
        // what they read first.
        if let Some(first) = self.pipeline.tables.first() {
            for (p, v) in parsed.iter().zip(verdict_n.iter()) {
                if v.is_ok() {
                    first.prefetch(p, &Meta::new(in_port));
                }
            }
            for ((p, v), hit) in parsed.iter().zip(verdict_n.iter()).zip(first_hit.iter_mut()) {
                if v.is_ok() {
                    *hit = self.pipeline.first_lookup(&self.pipeline_state, p, &Meta::new(in_port));
                }
            }
        }

        // Stage 3: each packet's path, in order.
        for i in 0..n {
            let Some(pkt) = pkts[i].take() else { continue };
            self.counters.rx(in_port, pkt.total_len());
            match verdict_n[i] {
                Ok(()) => self.deliver::<TM, I>(io, in_port, pkt, &mut parsed[i], Some(first_hit[i]), now_us),
                Err(r) => self.counters.drop(r),
            }
        }
        self.scratch = scratch;
    }

    /// The parse of a multi-segment frame (a jumbo frame in mbufs smaller than it): its headers
    /// are read and its lengths judged as [`parse_segmented_into`] does, with a router's checks.
    /// With `verify_transit` ([`Checks::All`]) it is dropped instead (`multi_segment`): the UDP
    /// checksum and the ICRC are verified over contiguous bytes only.
    #[cold]
    fn parse_segmented(&self, pkt: &mut B, p: &mut Parsed) -> Result<(), Reason> {
        if self.checks == Checks::All {
            return Err(Reason::MultiSegment);
        }
        let r = parse_segmented_into(pkt.data(), pkt.total_len(), self.gradient_udp_port, pkt.rx_checksum(), p);
        if r != Err(Reason::SegmentedHeaders) || pkt.pull_up(PULL_UP_BYTES) == 0 {
            return r;
        }
        // A header the first segment cut, now moved whole into it (as far as its buffer
        // allowed): parsed again from the start.
        *p = Parsed::default();
        if pkt.is_segmented() {
            parse_segmented_into(pkt.data(), pkt.total_len(), self.gradient_udp_port, pkt.rx_checksum(), p)
        } else {
            parse_checks_into(pkt.data(), self.gradient_udp_port, pkt.rx_checksum(), self.checks, p)
        }
    }

    /// The rest of [`Datapath::process`] for a counted, parsed packet (`p` is its parse, kept
    /// up to date by rewrites): neighbour answering, the aggregator, or the pipeline and egress.
    /// `first_hit`, when known, is the first table's lookup of `p`. `TM` is
    /// [`Datapath::traffic_managed`].
    #[inline(always)]
    fn deliver<const TM: bool, I: PacketIo<Buf = B>>(
        &mut self,
        io: &mut I,
        in_port: u16,
        mut pkt: I::Buf,
        p: &mut Parsed,
        first_hit: Option<Option<usize>>,
        now_us: u64,
    ) {
        self.tick(&pkt);
        if is_neighbor_message(p) {
            if let Some(addr) = self.local.get(in_port as usize).filter(|a| crate::neighbor::serves(p, a)) {
                // The answerer reads (and answers in) the whole packet: one for the appliance
                // in a chain is made one segment when the first has room for it (a neighbour
                // message is short), else dropped; another host's goes on to the tables as a
                // chain (a claim on the port's address counted).
                if pkt.is_segmented() {
                    self.counters.address_conflicts += crate::neighbor::conflict_in(pkt.data(), p, addr) as u64;
                    if crate::neighbor::concerns(pkt.data(), p, addr) {
                        pkt.pull_up(pkt.total_len());
                        if pkt.is_segmented() {
                            self.counters.drop(Reason::MultiSegment);
                            return;
                        }
                    }
                }
                if !pkt.is_segmented() {
                    let a = crate::neighbor::answer(&mut pkt, p, addr, &self.local);
                    self.counters.address_conflicts += a.conflict as u64;
                    match a.verdict {
                        Verdict::Reply => {
                            self.counters.neighbor_replies += 1;
                            self.send::<TM, I>(io, in_port, pkt, CLASS_UNSET);
                            return;
                        }
                        Verdict::Drop(r) => {
                            self.counters.drop(r);
                            return;
                        }
                        Verdict::Pass => {}
                    }
                }
            }
        }
        if p.refused_by_its_destination() && self.for_the_appliance(p, in_port) {
            // RFC 8200 section 4.4: the appliance is the node that would process the Routing
            // header (or the IPv4 source route), and it processes none; the upper layer is not
            // its own. Section 4.2: as the destination it must discard a packet with an option
            // it does not know whose type says so. Transit packets are forwarded as any other.
            self.counters.drop(refusal(p));
            return;
        }
        if !self.aggregate_in_pipeline && self.wanted(p, in_port) {
            self.consume::<false, I>(io, in_port, pkt, p, now_us);
            return;
        }
        // Only meters read the arrival time: without them, no rx-timestamp read per packet.
        let at = if self.pipeline.meters.is_empty() { now_us } else { pkt.rx_timestamp_us().unwrap_or(now_us) };
        let mut meta = Meta::at(in_port, at);
        let egress = match first_hit {
            // Meters inlined in the traffic-managed loop only.
            Some(hit) => {
                self.pipeline.apply_with_first_hit::<TM, B>(&mut self.pipeline_state, &mut pkt, p, &mut meta, hit)
            }
            None => self.pipeline.apply(&mut self.pipeline_state, &mut pkt, p, &mut meta),
        };
        self.dispatch::<TM, I>(io, in_port, pkt, p, egress, meta.class, now_us);
    }

    /// Stages 2 to 4 of [`Datapath::process_chunk`] when the burst goes through the tables
    /// table by table ([`Staging`]): `pkts` are parsed into `scratch`. Kept out of line, so
    /// that the per-packet path's loop is compiled as if this one did not exist.
    #[inline(never)]
    fn tables_staged<const TM: bool, I: PacketIo<Buf = B>>(
        &mut self,
        io: &mut I,
        in_port: u16,
        pkts: &mut [Option<I::Buf>],
        scratch: &mut BurstScratch,
        now_us: u64,
    ) {
        let n = pkts.len();
        let parsed = &mut scratch.parsed[..n];
        let verdict_n = &scratch.verdict[..n];
        // Stage 2: which way each packet goes; those for the tables enter them. Received
        // bytes are counted here, before the tables' VLAN actions change a frame's length.
        let way = &mut scratch.way[..n];
        let lanes = &mut scratch.lanes[..n];
        for i in 0..n {
            if let Some(pkt) = &pkts[i] {
                self.counters.rx(in_port, pkt.total_len());
            }
            way[i] = match (&pkts[i], verdict_n[i]) {
                (Some(_), Ok(())) => self.way(&parsed[i], in_port),
                _ => Way::Other,
            };
            lanes[i] = match (&pkts[i], way[i]) {
                (Some(pkt), Way::Tables) => Lane::enter(Meta::at(in_port, now_us), pkt.total_len()),
                _ => Lane::idle(),
            };
        }
        // Stage 3: the tables, one after another, each for the whole burst.
        self.pipeline.apply_burst(&mut self.pipeline_state, pkts, parsed, lanes);
        // Stage 4: each packet's way out, in order.
        for i in 0..n {
            let Some(pkt) = pkts[i].take() else { continue };
            match (verdict_n[i], way[i]) {
                (Err(r), _) => self.counters.drop(r),
                (Ok(()), Way::Tables) => {
                    self.tick(&pkt);
                    let l = &lanes[i];
                    self.dispatch::<TM, I>(io, in_port, pkt, &mut parsed[i], l.egress, l.meta.class, now_us);
                }
                (Ok(()), Way::Consume) => {
                    self.tick(&pkt);
                    self.consume::<false, I>(io, in_port, pkt, &parsed[i], now_us);
                }
                (Ok(()), Way::Other) => self.deliver::<TM, I>(io, in_port, pkt, &mut parsed[i], None, now_us),
            }
        }
    }

    /// Sends a packet the tables have been through where they chose (`egress`, in traffic
    /// class `class`), or counts its drop. `TM` is [`Datapath::traffic_managed`].
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn dispatch<const TM: bool, I: PacketIo<Buf = B>>(
        &mut self,
        io: &mut I,
        in_port: u16,
        pkt: I::Buf,
        p: &mut Parsed,
        egress: Egress,
        class: u8,
        now_us: u64,
    ) {
        match egress {
            Egress::Port(port) => self.send::<TM, I>(io, port, pkt, class),
            Egress::Flood => self.flood::<TM, I>(io, in_port, pkt, class),
            Egress::Multicast(g) => self.multicast::<TM, I>(io, g as usize, pkt, p, class),
            Egress::Aggregate => self.aggregate::<false, I>(io, in_port, pkt, p, now_us),
            Egress::Dropped(r) => self.counters.drop(r),
            Egress::Unset if self.wanted(p, in_port) => self.counters.drop(Reason::GradNotAggregated),
            Egress::Unset => self.counters.drop(Reason::NoEgress),
        }
    }

    /// Which way [`Datapath::deliver`] would send the parsed packet `p` from `in_port`, asked
    /// in the same order: a neighbour message on a port with addresses, or a packet for the
    /// appliance that its destination must refuse ([`refusal`]), is [`Way::Other`]; one the aggregator wants (outside
    /// the pipeline) is [`Way::Consume`]; the rest go through the tables.
    #[inline(always)]
    fn way(&self, p: &Parsed, in_port: u16) -> Way {
        if (is_neighbor_message(p) && self.local.get(in_port as usize).is_some_and(|a| crate::neighbor::serves(p, a)))
            || (p.refused_by_its_destination() && self.for_the_appliance(p, in_port))
        {
            Way::Other
        } else if !self.aggregate_in_pipeline && self.wanted(p, in_port) {
            Way::Consume
        } else {
            Way::Tables
        }
    }

    /// Sums a gradient packet that a table's `aggregate` action sent here (or, `HANDED`,
    /// another worker handed over: [`Datapath::process_handed_off`]) into its collective, on
    /// the worker that owns the collective: this one, or another reached over its hand-off
    /// ring. A packet that is not a gradient packet addressed to the appliance is dropped
    /// (`aggregate_not_gradient`). The appliance consumes it: what a router parse left
    /// unverified (its UDP checksum, its ICRC) is verified first, and a failure is dropped with
    /// the parse's reason (spec section 4 rule 5: before anything else, without a NAK).
    ///
    /// Out of line: inlined into `process_burst` it cost the forwarding path 5 instructions
    /// per packet (callgrind, `pipeline_profile burst`) through register allocation.
    #[inline(never)]
    fn aggregate<const HANDED: bool, I: PacketIo<Buf = B>>(
        &mut self,
        io: &mut I,
        in_port: u16,
        pkt: I::Buf,
        p: &Parsed,
        now_us: u64,
    ) {
        if !self.wanted(p, in_port) {
            self.counters.drop(Reason::AggregateNotGradient);
            return;
        }
        self.consume::<HANDED, I>(io, in_port, pkt, p, now_us);
    }

    /// True when the aggregator takes `p`, received on `in_port` ([`Aggregator::wants`]).
    #[inline]
    fn wanted(&self, p: &Parsed, in_port: u16) -> bool {
        self.agg.as_ref().is_some_and(|agg| agg.wants(p, in_port))
    }

    /// Sums a gradient packet the aggregator wants ([`Aggregator::wants`] was true) into its
    /// collective, here or on its owner, as [`Datapath::aggregate`] does, without asking again.
    ///
    /// `HANDED`: another worker handed it over ([`Datapath::process_handed_off`]); it is never
    /// handed on.
    #[inline]
    fn consume<const HANDED: bool, I: PacketIo<Buf = B>>(
        &mut self,
        io: &mut I,
        in_port: u16,
        pkt: I::Buf,
        p: &Parsed,
        now_us: u64,
    ) {
        let Some(agg) = self.agg.as_mut() else {
            self.counters.drop(Reason::AggregateNotGradient);
            return;
        };
        if pkt.is_segmented() {
            // The aggregator sums the payload in place: it must be contiguous.
            self.counters.drop(Reason::MultiSegment);
            return;
        }
        let owner = agg.owner(pkt.data(), p);
        if owner != agg.me() {
            if HANDED {
                // Handed over by a worker that had switched to a runtime change of a sharded
                // collective's chunking this one has not (or the reverse): handing it back
                // could bounce it between the two until both have switched.
                self.counters.drop(Reason::HandOffMoved);
                return;
            }
            // Software steering: the collective's state lives on another worker, which
            // verifies the UDP checksum or ICRC just before it folds (the payload then crosses
            // from this core's cache to that one's once, read by the owner alone).
            match io.hand_off(owner, pkt) {
                Ok(()) => agg.counters.handed_off += 1,
                Err(_) => self.counters.drop(Reason::HandOffFull),
            }
            return;
        }
        if let Err(r) = verify_l4(pkt.data(), p, pkt.rx_checksum()) {
            self.counters.drop(r);
            return;
        }
        let now = pkt.rx_timestamp_us().unwrap_or(now_us);
        if self.egress.is_empty() {
            agg.process(io, &mut self.counters, in_port, pkt, p, now);
            return;
        }
        // Results, resends and NAKs leave through the ports' schedulers, classified by their
        // DSCP (the collective's) through the port's map.
        let clock = self.rx_clock_us.unwrap_or(self.live_us);
        let mut eio = EgressIo { io, egress: &mut self.egress, remote: &self.remote_egress, now: clock, drops: [0; 5] };
        agg.process(&mut eio, &mut self.counters, in_port, pkt, p, now);
        let drops = eio.drops;
        for (r, n) in
            [Reason::TailDrop, Reason::RedDrop, Reason::EgressOversize, Reason::UnknownClass, Reason::QosRingFull]
                .iter()
                .zip(drops)
        {
            self.counters.drop_n(*r, n);
        }
    }

    /// True if the IP packet `p`, received on `in_port`, is addressed to the appliance: its
    /// destination is one of the appliance's addresses, or the aggregator takes it.
    #[cold]
    fn for_the_appliance(&self, p: &Parsed, in_port: u16) -> bool {
        let mine = if p.has(Layers::IPV4) {
            self.local.iter().any(|a| a.ipv4.is_some_and(|v4| v4[..] == p.ip_dst_bytes[..4]))
        } else {
            self.local.iter().any(|a| a.ipv6 == Some(p.ip_dst_bytes))
        };
        mine || self.wanted(p, in_port)
    }

    /// Hands `pkt` to port `port`: a frame longer than the port's limit is an `egress_oversize`
    /// drop ([`Datapath::with_egress_limits`]: one bounds-checked load, none when no port has a
    /// limit); the others are counted `tx`, then queued in the port's scheduler in `class`
    /// ([`CLASS_UNSET`]: the port's class map decides) when it has one, else straight to `io`.
    /// A packet the scheduler refuses is counted under the refusal's reason and freed. `TM` is
    /// [`Datapath::traffic_managed`]: without traffic management (the common case), no
    /// scheduler test at all.
    #[inline(always)]
    fn send<const TM: bool, I: PacketIo<Buf = B>>(&mut self, io: &mut I, port: u16, pkt: I::Buf, class: u8) {
        let len = pkt.total_len();
        if let Some(&max) = self.egress_max.get(port as usize) {
            if len > max as usize {
                self.counters.drop(Reason::EgressOversize);
                return;
            }
        }
        self.counters.tx(port, len);
        if TM {
            self.send_shaped(io, port, pkt, class);
        } else {
            io.send(port, pkt);
        }
    }

    /// [`Datapath::send`] on a datapath that manages traffic: queued here, handed to the port's
    /// owner, or sent (a port without a scheduler).
    #[inline(always)]
    fn send_shaped<I: PacketIo<Buf = B>>(&mut self, io: &mut I, port: u16, pkt: I::Buf, class: u8) {
        if let Some(Some(e)) = self.egress.get_mut(port as usize) {
            let now = self.rx_clock_us.unwrap_or(self.live_us);
            let (refused, red) = e.enqueue(io, port, class, pkt, now);
            self.counters.drop_n(Reason::RedDrop, red);
            if let Some(r) = refused {
                self.counters.drop(r);
            }
            return;
        }
        if let Some(Some(map)) = self.remote_egress.get(port as usize) {
            self.hand_to_owner(io, port, class, pkt, *map);
            return;
        }
        io.send(port, pkt);
    }

    /// Classifies `pkt` for shaped port `port`, whose scheduler another worker owns, and hands
    /// it over; a full ring is a counted drop (`qos_ring_full`).
    #[inline]
    fn hand_to_owner<I: PacketIo<Buf = B>>(&mut self, io: &mut I, port: u16, class: u8, pkt: I::Buf, map: ClassMap) {
        let class = if class == CLASS_UNSET { map.classify_in(pkt.data(), pkt.total_len()) } else { class };
        if io.to_scheduler(port, class, pkt).is_err() {
            self.counters.drop(Reason::QosRingFull);
        }
    }

    /// Sends a copy to every port but `in_port`; the original goes to the last one (`TM`: as
    /// for [`Datapath::send`]).
    fn flood<const TM: bool, I: PacketIo<Buf = B>>(&mut self, io: &mut I, in_port: u16, pkt: I::Buf, class: u8) {
        let Some(last) = (0..self.ports).rev().find(|&p| p != in_port) else {
            self.counters.drop(Reason::NoEgress);
            return;
        };
        for p in (0..last).filter(|&p| p != in_port) {
            match io.copy_pkt(&pkt) {
                Some(copy) => self.send::<TM, I>(io, p, copy, class),
                None => self.counters.drop(Reason::NoMbuf),
            }
        }
        self.send::<TM, I>(io, last, pkt, class);
    }

    /// Sends one copy per member of group `g`, each a full copy of the frame (copies never share
    /// bytes written per copy) with that copy's rewrites; the original becomes the last copy
    /// (`TM`: as for [`Datapath::send`]).
    fn multicast<const TM: bool, I: PacketIo<Buf = B>>(
        &mut self,
        io: &mut I,
        g: usize,
        mut pkt: I::Buf,
        p: &Parsed,
        class: u8,
    ) {
        let n = self.pipeline.groups[g].copies.len();
        for c in 0..n - 1 {
            let Some(mut copy) = io.copy_pkt(&pkt) else {
                self.counters.drop(Reason::NoMbuf);
                continue;
            };
            let mut cp = *p;
            match self.pipeline.apply_copy(&mut self.pipeline_state, g, c, &mut copy, &mut cp) {
                Ok(()) => {
                    let port = self.pipeline.groups[g].copies[c].0;
                    self.send::<TM, I>(io, port, copy, class)
                }
                Err(r) => self.counters.drop(r),
            }
        }
        let mut cp = *p;
        match self.pipeline.apply_copy(&mut self.pipeline_state, g, n - 1, &mut pkt, &mut cp) {
            Ok(()) => {
                let port = self.pipeline.groups[g].copies[n - 1].0;
                self.send::<TM, I>(io, port, pkt, class)
            }
            Err(r) => self.counters.drop(r),
        }
    }
}

/// The [`PacketIo`] the aggregator sends through when ports have schedulers: a send to a port
/// with one is queued there (classified by the port's map) at `now`, or handed to the worker
/// that owns it; the refusals are tallied in `drops` (tail, RED, oversize, unknown class, full
/// ring to the owner) for the datapath's counters.
struct EgressIo<'a, I: PacketIo> {
    io: &'a mut I,
    egress: &'a mut Vec<Option<Box<PortEgress<I::Buf>>>>,
    remote: &'a [Option<ClassMap>],
    now: u64,
    drops: [u64; 5],
}

impl<I: PacketIo> PacketIo for EgressIo<'_, I>
where
    I::Buf: PacketBuf,
{
    type Buf = I::Buf;

    #[inline]
    fn alloc(&mut self) -> Option<I::Buf> {
        self.io.alloc()
    }

    #[inline]
    fn send(&mut self, port: u16, buf: I::Buf) {
        let Some(Some(e)) = self.egress.get_mut(port as usize) else {
            if let Some(Some(map)) = self.remote.get(port as usize) {
                let class = map.classify_in(buf.data(), buf.total_len());
                if self.io.to_scheduler(port, class, buf).is_err() {
                    self.drops[4] += 1;
                }
                return;
            }
            self.io.send(port, buf);
            return;
        };
        let (refused, red) = e.enqueue(self.io, port, CLASS_UNSET, buf, self.now);
        self.drops[1] += red;
        match refused {
            Some(Reason::TailDrop) => self.drops[0] += 1,
            Some(Reason::RedDrop) => self.drops[1] += 1,
            Some(Reason::EgressOversize) => self.drops[2] += 1,
            Some(_) => self.drops[3] += 1,
            None => {}
        }
    }

    fn ports(&self) -> u16 {
        self.io.ports()
    }

    fn hand_off(&mut self, worker: u16, buf: I::Buf) -> Result<(), I::Buf> {
        self.io.hand_off(worker, buf)
    }

    fn to_scheduler(&mut self, port: u16, class: u8, buf: I::Buf) -> Result<(), I::Buf> {
        self.io.to_scheduler(port, class, buf)
    }

    fn copy_of(&mut self, src: &[u8]) -> Option<I::Buf> {
        self.io.copy_of(src)
    }

    fn copy_pkt(&mut self, src: &I::Buf) -> Option<I::Buf> {
        self.io.copy_pkt(src)
    }

    fn share(&mut self, head: &[u8], body: &I::Buf, off: usize, len: usize, tail: &[u8]) -> Option<(I::Buf, bool)> {
        self.io.share(head, body, off, len, tail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::{VecBuf, VecIo};
    use crate::config::load_str;
    use crate::testing::null_ports;
    use crate::wire::ipv6::Ipv6Repr;
    use std::path::Path;

    /// An l2 table for three ports: 02:..:01 to port 1, broadcast flooded, 02:..:66 dropped,
    /// the rest to port 0.
    const L2: &str = r#"
        [[table]]
        name = "l2"
        key = [{ field = "eth.dst", match = "exact" }]
        default_action = "forward(0)"
        entry = [
            { key = ["02:00:00:00:00:01"], action = "forward(1)" },
            { key = ["ff:ff:ff:ff:ff:ff"], action = "flood" },
            { key = ["02:00:00:00:00:66"], action = "drop" },
        ]
    "#;

    fn frame(dst: [u8; 6]) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[..6].copy_from_slice(&dst);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 9]);
        f[12..14].copy_from_slice(&[0x88, 0xb5]); // local experimental EtherType: L2 only
        f
    }

    fn datapath() -> Datapath {
        let loaded = load_str(&format!("{}{L2}", null_ports(3)), Path::new("test.toml")).unwrap();
        Datapath::new(loaded.pipeline, 3, crate::wire::gradient::DEFAULT_UDP_PORT)
    }

    #[test]
    fn l2_table_splits_by_destination() {
        let mut dp = datapath();
        let mut io = VecIo::new(3);
        for dst in [[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1]] {
            dp.process(&mut io, 2, VecBuf::from_frame(&frame(dst)), 0);
        }
        let ports: Vec<u16> = io.sent.iter().map(|(p, _)| *p).collect();
        assert_eq!(ports, vec![1, 0, 1]);
        assert_eq!(io.sent[1].1, frame([2, 0, 0, 0, 0, 2]));
        assert_eq!(dp.pipeline_state.entries(0)[0].packets, 2);
        assert_eq!(dp.pipeline_state.entries(0)[0].bytes, 120);
        assert_eq!(dp.pipeline_state.miss(0).packets, 1);
        assert_eq!(dp.counters.ports[1].tx_packets, 2);
        assert_eq!(dp.counters.ports[2].rx_packets, 3);
    }

    #[test]
    fn bursts_longer_than_max_burst_are_processed_in_order() {
        let dsts = [[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], [0xff; 6], [2, 0, 0, 0, 0, 0x66]];
        let frames: Vec<Vec<u8>> = (0..2 * MAX_BURST + 7)
            .map(|i| {
                let mut f = frame(dsts[i % dsts.len()]);
                f[20] = i as u8;
                f
            })
            .collect();
        let (mut one, mut burst) = (datapath(), datapath());
        let (mut io1, mut io2) = (VecIo::new(3), VecIo::new(3));
        for f in &frames {
            one.process(&mut io1, 2, VecBuf::from_frame(f), 0);
        }
        let mut slots: Vec<Option<VecBuf>> = frames.iter().map(|f| Some(VecBuf::from_frame(f))).collect();
        burst.process_burst(&mut io2, 2, &mut slots, 0);
        assert!(slots.iter().all(Option::is_none));
        assert_eq!(io1.sent, io2.sent);
        assert_eq!(one.counters, burst.counters);
        assert_eq!(one.counters.ports[2].rx_packets, frames.len() as u64);
        assert_eq!(one.pipeline_state.entries(0), burst.pipeline_state.entries(0));
        assert_eq!(one.pipeline_state.entries(0).len(), 3);
        assert_eq!(one.pipeline_state.miss(0), burst.pipeline_state.miss(0));
    }

    #[test]
    fn flood_copies_to_every_other_port() {
        let mut dp = datapath();
        let mut io = VecIo::new(3);
        dp.process(&mut io, 1, VecBuf::from_frame(&frame([0xff; 6])), 0);
        let ports: Vec<u16> = io.sent.iter().map(|(p, _)| *p).collect();
        assert_eq!(ports, vec![0, 2]);
        assert!(io.sent.iter().all(|(_, f)| *f == frame([0xff; 6])));
    }

    #[test]
    fn flood_without_mbufs_counts_no_mbuf() {
        let mut dp = datapath();
        let mut io = VecIo::new(3);
        io.alloc_budget = Some(0);
        dp.process(&mut io, 1, VecBuf::from_frame(&frame([0xff; 6])), 0);
        assert_eq!(io.sent.len(), 1);
        assert_eq!(dp.counters.dropped(Reason::NoMbuf), 1);
    }

    #[test]
    fn runts_and_explicit_drops_are_counted() {
        let mut dp = datapath();
        let mut io = VecIo::new(3);
        dp.process(&mut io, 0, VecBuf::from_frame(&[1, 2, 3]), 0);
        dp.process(&mut io, 0, VecBuf::from_frame(&[]), 0);
        dp.process(&mut io, 0, VecBuf::from_frame(&frame([2, 0, 0, 0, 0, 0x66])), 0);
        assert!(io.sent.is_empty());
        assert_eq!(dp.counters.dropped(Reason::Runt), 2);
        assert_eq!(dp.counters.dropped(Reason::ExplicitDrop), 1);
        assert_eq!(dp.counters.total_drops(), 3);
    }

    /// An IPv6 frame from fd00::1 to `dst` (Ethernet destination 02:00:00:00:00:01, forwarded
    /// to port 1 by the table) with a type 2 Routing header (one address) saying
    /// `segments_left`, then 8 bytes of No Next Header payload.
    fn routed_v6(dst: [u8; 16], segments_left: u8) -> Vec<u8> {
        let mut f = frame([2, 0, 0, 0, 0, 1])[..14].to_vec();
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        let mut ip = [0u8; 40];
        let src = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        Ipv6Repr {
            src_addr: src,
            dst_addr: dst,
            next_header: 43,
            payload_len: 24,
            hop_limit: 64,
            ..Default::default()
        }
        .emit(&mut ip)
        .unwrap();
        f.extend_from_slice(&ip);
        f.extend_from_slice(&[59, 2, 2, segments_left, 0, 0, 0, 0]);
        f.extend_from_slice(&[0xfd; 16]);
        f
    }

    #[test]
    fn source_routed_packets_are_dropped_only_when_addressed_to_the_appliance() {
        let me = crate::agg::PortAddr {
            mac: "02:00:00:00:00:fe".parse().unwrap(),
            ipv4: Some([10, 0, 0, 254]),
            ipv6: Some([0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xfe]),
        };
        let mut dp = datapath().with_local_addresses(vec![me; 3]);
        let mut io = VecIo::new(3);
        let mut other = me.ipv6.unwrap();
        other[15] = 9;
        dp.process(&mut io, 0, VecBuf::from_frame(&routed_v6(me.ipv6.unwrap(), 2)), 0);
        assert_eq!((io.sent.len(), dp.counters.dropped(Reason::Ipv6BadSegmentsLeft)), (0, 1));
        // One segment left of one address: a valid header, but the appliance is only a hop of
        // the route, and it processes no Routing header.
        dp.process(&mut io, 0, VecBuf::from_frame(&routed_v6(me.ipv6.unwrap(), 1)), 0);
        assert_eq!((io.sent.len(), dp.counters.dropped(Reason::SourceRouted)), (0, 1));
        // No segment left: the appliance is the final destination, to the tables as any other.
        dp.process(&mut io, 0, VecBuf::from_frame(&routed_v6(me.ipv6.unwrap(), 0)), 0);
        // Transit: not the appliance's to judge, forwarded as any other packet.
        dp.process(&mut io, 0, VecBuf::from_frame(&routed_v6(other, 2)), 0);
        dp.process(&mut io, 0, VecBuf::from_frame(&routed_v6(other, 1)), 0);
        assert_eq!(io.sent.iter().map(|(p, _)| *p).collect::<Vec<_>>(), vec![1, 1, 1]);
        assert_eq!(io.sent[1].1, routed_v6(other, 2));
        assert_eq!(dp.counters.total_drops(), 2);

        // IPv4: an unfinished Loose or Strict Source and Record Route to the appliance is
        // dropped; a finished one (pointer past the length) or one in transit is forwarded.
        let mut io = VecIo::new(3);
        for (ty, pointer, dst, dropped) in [
            (131, 4, [10, 0, 0, 254], true),
            (137, 4, [10, 0, 0, 254], true),
            (131, 8, [10, 0, 0, 254], false),
            (131, 4, [10, 0, 0, 9], false),
        ] {
            let before = dp.counters.dropped(Reason::SourceRouted);
            dp.process(&mut io, 0, VecBuf::from_frame(&routed_v4(dst, ty, pointer)), 0);
            assert_eq!(dp.counters.dropped(Reason::SourceRouted) - before, dropped as u64, "{ty} {pointer} {dst:?}");
        }
        assert_eq!(io.sent.len(), 2);
    }

    /// A packet for the appliance whose Destination Options hold an option it does not know is
    /// dropped when the option's type says to discard (high-order bits not 00), taken when it
    /// says to skip; in transit it is forwarded either way.
    #[test]
    fn discarding_ipv6_options_are_judged_only_when_addressed_to_the_appliance() {
        let me6 = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xfe];
        let me = crate::agg::PortAddr { mac: "02:00:00:00:00:fe".parse().unwrap(), ipv4: None, ipv6: Some(me6) };
        let mut dp = datapath().with_local_addresses(vec![me; 3]);
        let mut io = VecIo::new(3);
        let mut other = me6;
        other[15] = 9;
        // A type 2 Routing header with no segment left becomes a Destination Options header
        // holding one option of type `t` (6 bytes of data).
        let with_option = |dst, t: u8| {
            let mut f = routed_v6(dst, 0);
            f[20] = 60;
            f[54..62].copy_from_slice(&[59, 2, t, 20, 0, 0, 0, 0]);
            f[62..78].fill(0);
            f
        };
        for (dst, t, dropped) in [(me6, 0x80, 1), (me6, 0x41, 1), (me6, 0xc9, 1), (me6, 0x1e, 0), (other, 0x80, 0)] {
            let before = (io.sent.len(), dp.counters.dropped(Reason::Ipv6UnrecognizedOption));
            dp.process(&mut io, 0, VecBuf::from_frame(&with_option(dst, t)), 0);
            let after = (io.sent.len(), dp.counters.dropped(Reason::Ipv6UnrecognizedOption));
            assert_eq!((after.0 - before.0, after.1 - before.1), (1 - dropped as usize, dropped), "{t:#x}");
        }
        assert_eq!(dp.counters.total_drops(), 3);
    }

    /// An IPv4 frame from 10.0.0.1 to `dst` (Ethernet destination 02:00:00:00:00:01,
    /// forwarded to port 1 by the table) with a NOP and a source route option of type `ty`
    /// (131 loose, 137 strict) holding one address (10.9.9.9) at `pointer`, then an empty UDP
    /// datagram without checksum.
    fn routed_v4(dst: [u8; 4], ty: u8, pointer: u8) -> Vec<u8> {
        let mut f = frame([2, 0, 0, 0, 0, 1])[..14].to_vec();
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let mut ip = vec![0x47, 0, 0, 36, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1];
        ip.extend_from_slice(&dst);
        ip.extend_from_slice(&[1, ty, 7, pointer, 10, 9, 9, 9]);
        crate::wire::ipv4::Ipv4Packet::new_unchecked(&mut ip[..]).fill_checksum();
        f.extend_from_slice(&ip);
        f.extend_from_slice(&[0, 5, 0x23, 0x28, 0, 8, 0, 0]);
        f
    }

    /// The neighbour answerer reads and answers in the whole packet: an ARP request in a chain
    /// is made one segment (the first has room for it) and answered as in one segment, whether
    /// the ARP packet was whole in the first segment or cut; one too long for that room is
    /// dropped `multi_segment`.
    #[test]
    fn a_segmented_arp_request_is_answered_whole_or_dropped_multi_segment() {
        let me =
            crate::agg::PortAddr { mac: "02:00:00:00:00:fe".parse().unwrap(), ipv4: Some([10, 0, 0, 254]), ipv6: None };
        let mut dp = datapath().with_local_addresses(vec![me; 3]);
        let mut io = VecIo::new(3);
        let req = crate::neighbor::tests::arp_request([10, 0, 0, 254], false);
        assert!(req.len() > 14 + 28);
        dp.process(&mut io, 0, VecBuf::from_frame(&req), 0);
        dp.process(&mut io, 0, VecBuf::segmented(&req, 14 + 28), 0);
        dp.process(&mut io, 0, VecBuf::segmented(&req, 30), 0);
        assert_eq!((io.sent.len(), dp.counters.neighbor_replies), (3, 3));
        assert!(io.sent.iter().all(|s| *s == io.sent[0]), "the same reply");
        let mut long = req.clone();
        long.resize(1000, 0);
        dp.process(&mut io, 0, VecBuf::segmented(&long, 30), 0);
        assert_eq!((io.sent.len(), dp.counters.dropped(Reason::MultiSegment)), (3, 1));
    }

    #[test]
    fn neighbor_drops_and_conflicts_are_counted() {
        let me =
            crate::agg::PortAddr { mac: "02:00:00:00:00:fe".parse().unwrap(), ipv4: Some([10, 0, 0, 254]), ipv6: None };
        let mut dp = datapath().with_local_addresses(vec![me; 3]);
        let mut io = VecIo::new(3);
        let mut mismatch = crate::neighbor::tests::arp_request([10, 0, 0, 254], false);
        mismatch[22 + 5] ^= 0x10; // the sender hardware address
        dp.process(&mut io, 0, VecBuf::from_frame(&mismatch), 0);
        let mut probe = crate::neighbor::tests::arp_request([10, 0, 0, 254], false);
        probe[28..32].fill(0); // sender IP 0.0.0.0
        dp.process(&mut io, 2, VecBuf::from_frame(&probe), 0);
        assert_eq!(dp.counters.dropped(Reason::ArpSenderMismatch), 1);
        assert_eq!((dp.counters.neighbor_replies, dp.counters.address_conflicts), (1, 1));
        assert_eq!(io.sent.len(), 1);
        assert_eq!((io.sent[0].0, &io.sent[0].1[0..6]), (2, &[2, 0, 0, 0, 1, 1][..]));
    }

    #[test]
    fn rx_checksum_verdicts_reach_the_parser() {
        use crate::parse::{CsumStatus, RxChecksum};
        use crate::wire::ipv4::Ipv4Packet;
        use crate::wire::udp::UdpPacket;
        // 02:00:00:00:00:01 (forwarded to port 1), 10.0.0.1:49152 -> 10.0.0.2:9000, 4 bytes.
        let mut good = frame([2, 0, 0, 0, 0, 1])[..46].to_vec();
        good[12..14].copy_from_slice(&[0x08, 0x00]);
        good[14..34].copy_from_slice(&[0x45, 0, 0, 32, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
        Ipv4Packet::new_unchecked(&mut good[14..]).fill_checksum();
        good[34..46].copy_from_slice(&[0xc0, 0x00, 0x23, 0x28, 0, 12, 0, 0, 1, 2, 3, 4]);
        UdpPacket::new_unchecked(&mut good[34..]).fill_checksum_v4([10, 0, 0, 1], [10, 0, 0, 2]);
        let mut bad_udp = good.clone();
        let n = bad_udp.len();
        bad_udp[n - 1] ^= 1;
        let send = |dp: &mut Datapath, io: &mut VecIo, f: &[u8], ip, l4| {
            let mut b = VecBuf::from_frame(f);
            b.rx_checksum = RxChecksum { ip, l4 };
            dp.process(io, 0, b, 0);
        };
        use CsumStatus::{Bad, Good, Unknown};
        let all = |dp: &mut Datapath, io: &mut VecIo| {
            send(dp, io, &good, Unknown, Unknown);
            send(dp, io, &bad_udp, Good, Good);
            send(dp, io, &bad_udp, Unknown, Unknown);
            send(dp, io, &good, Good, Bad);
            send(dp, io, &good, Bad, Good);
        };
        // Verifying every checksum (`verify_transit`): the NIC's verdicts replace the software
        // sums, for the UDP checksum too.
        let mut dp = datapath().with_checks(crate::parse::Checks::All);
        let mut io = VecIo::new(3);
        all(&mut dp, &mut io);
        assert_eq!(io.sent.len(), 2);
        assert_eq!(dp.counters.dropped(Reason::BadUdpChecksum), 2);
        assert_eq!(dp.counters.dropped(Reason::BadIpv4Checksum), 1);
        // A router's checks (the default) for this transit traffic: the IPv4 header checksum,
        // the NIC's verdict or the software's; the UDP checksum is the end hosts', and a bad one
        // is forwarded as it came.
        let mut dp = datapath();
        let mut io = VecIo::new(3);
        all(&mut dp, &mut io);
        assert_eq!(io.sent.len(), 4);
        assert_eq!(io.sent[1].1, bad_udp);
        assert_eq!(dp.counters.dropped(Reason::BadUdpChecksum), 0);
        assert_eq!(dp.counters.dropped(Reason::BadIpv4Checksum), 1);
    }

    /// A datapath whose port 1 has `qos` as its `[port.qos]`; everything goes to port 1 unless
    /// the frame is for 02:00:00:00:00:02 (then `set_class(1)` and port 1).
    fn shaped(qos: &str) -> Datapath {
        let conf = format!(
            r#"
            [[port]]
            vdev = "net_null0"
            [[port]]
            vdev = "net_null1"
            {qos}
            [[table]]
            name = "l2"
            key = [{{ field = "eth.dst", match = "exact" }}]
            default_action = "forward(1)"
            entry = [{{ key = ["02:00:00:00:00:02"], action = "set_class(1); forward(1)" }}]
            "#
        );
        let loaded = load_str(&conf, Path::new("test.toml")).unwrap();
        Datapath::new(loaded.pipeline, 2, crate::wire::gradient::DEFAULT_UDP_PORT).with_egress(&loaded.qos).unwrap()
    }

    /// A 1000-byte frame to `dst` received at `t` µs.
    fn stamped(dst: [u8; 6], t: u64) -> VecBuf {
        let mut f = frame(dst);
        f.resize(1000, 0);
        let mut b = VecBuf::from_frame(&f);
        b.timestamp_us = Some(t);
        b
    }

    /// 1e6 bytes/s of line on the capture clock: 1000-byte frames (1024 on the wire) offered
    /// twice as fast as the line leave one per 1024 µs; the rest is tail-dropped; nothing stays
    /// queued after finish_egress.
    #[test]
    fn a_shaped_port_sends_at_its_rate_on_the_capture_clock() {
        let mut dp = shaped("[port.qos]\nrate = 1000000\nburst = 2072\n[[port.qos.class]]\ncapacity_bytes = 3000\n");
        let mut io = VecIo::new(2);
        for i in 0..2000u64 {
            dp.process(&mut io, 0, stamped([2, 0, 0, 0, 0, 1], 1_000_000 + 512 * i), 0);
        }
        // 2000 arrivals over 1.024 s: the bucket (2 frames) plus 1 frame per 1024 µs.
        let sent_during = io.sent.len();
        assert_eq!(sent_during, 2 + (512 * 1999) / 1024, "sent by the last arrival");
        dp.finish_egress(&mut io);
        let e = dp.egress[1].as_ref().unwrap();
        let c = e.sched.counters(0);
        assert_eq!(c.sent.pkts as usize, io.sent.len());
        assert_eq!(c.sent.pkts + c.tail_drop.pkts, 2000);
        assert_eq!(dp.counters.dropped(Reason::TailDrop), c.tail_drop.pkts);
        assert!(e.sched.is_empty());
        assert_eq!(io.sent.len(), sent_during + 3, "the 3 queued frames left at the end");
        assert_eq!(dp.next_departure(), None);
    }

    /// A worker that does not own port 1's scheduler classifies (the map, or `set_class`) and
    /// hands its packets over, counting a full ring `qos_ring_full`; the owner queues them in
    /// the class they carry, on its clock moved by their timestamps, and shapes them as its
    /// own: one rate for the port whichever worker received the packets.
    #[test]
    fn a_shaped_port_owned_by_another_worker_is_reached_with_the_class_chosen_here() {
        let qos = "[port.qos]\nclasses = 2\nrate = 1000000\nburst = 2072\n";
        let owner = shaped(qos);
        let loaded_qos: Vec<_> = owner.egress.iter().map(|e| e.is_some()).collect();
        assert_eq!(loaded_qos, vec![false, true]);
        let conf_qos = {
            let conf = format!("[[port]]\nvdev = \"net_null0\"\n[[port]]\nvdev = \"net_null1\"\n{qos}");
            load_str(&conf, Path::new("test.toml")).unwrap().qos
        };
        let mut sender = shaped(qos).with_egress_owned(&conf_qos, &[true, false]).unwrap();
        assert!(sender.egress.iter().all(Option::is_none), "no scheduler on the sender");
        let mut io = VecIo::new(2);
        io.scheduler_room = Some(4);
        for i in 0..5u64 {
            // Even: the map's class 0; odd: set_class(1).
            let dst = if i % 2 == 0 { [2, 0, 0, 0, 0, 1] } else { [2, 0, 0, 0, 0, 2] };
            sender.process(&mut io, 0, stamped(dst, 1_000_000 + i), 0);
        }
        assert!(io.sent.is_empty(), "nothing leaves the sender directly");
        let classes: Vec<(u16, u8)> = io.to_scheduler.iter().map(|(p, c, _)| (*p, *c)).collect();
        assert_eq!(classes, vec![(1, 0), (1, 1), (1, 0), (1, 1)]);
        assert_eq!(sender.counters.dropped(Reason::QosRingFull), 1, "the fifth found the ring full");
        assert_eq!(sender.counters.ports[1].tx_packets, 5, "counted tx by the sender");
        // The owner: one frame of its own (class 0) at 1_000_000, then the four handed over.
        let mut owner = owner;
        let mut out = VecIo::new(2);
        owner.process(&mut out, 0, stamped([2, 0, 0, 0, 0, 1], 1_000_000), 0);
        for (port, class, b) in std::mem::take(&mut io.to_scheduler) {
            owner.schedule_handed_over(&mut out, port, class, b, 0);
        }
        // The bucket (2072 bytes) lets two 1024-byte frames go at once; the class-1 frames
        // overtake the queued class-0 ones; the rest leave one per 1024 µs.
        assert_eq!(out.sent.len(), 2);
        owner.finish_egress(&mut out);
        let dsts: Vec<u8> = out.sent.iter().map(|(_, f)| f[5]).collect();
        assert_eq!(dsts, vec![1, 1, 2, 2, 1]);
        let s = &owner.egress[1].as_ref().unwrap().sched;
        assert_eq!((s.counters(0).sent.pkts, s.counters(1).sent.pkts), (3, 2));
        assert_eq!(owner.counters.ports[1].tx_packets, 1, "only its own frame counted tx here");
    }

    /// `set_class` overrides the map; strict priority serves class 1 first.
    #[test]
    fn set_class_overrides_the_map_and_strict_priority_serves_it_first() {
        let mut dp = shaped("[port.qos]\nclasses = 2\nrate = 1000000\nburst = 2072\n");
        let mut io = VecIo::new(2);
        // Drain the initial bucket: two low frames leave at once.
        for i in 0..2 {
            dp.process(&mut io, 0, stamped([2, 0, 0, 0, 0, 1], 1_000_000 + i), 0);
        }
        assert_eq!(io.sent.len(), 2);
        dp.process(&mut io, 0, stamped([2, 0, 0, 0, 0, 1], 1_000_010), 0);
        dp.process(&mut io, 0, stamped([2, 0, 0, 0, 0, 2], 1_000_011), 0);
        dp.finish_egress(&mut io);
        let dsts: Vec<u8> = io.sent.iter().map(|(_, f)| f[5]).collect();
        assert_eq!(dsts, vec![1, 1, 2, 1], "the class-1 frame overtakes the queued class-0 one");
        let e = dp.egress[1].as_ref().unwrap();
        assert_eq!((e.sched.counters(0).sent.pkts, e.sched.counters(1).sent.pkts), (3, 1));
    }

    /// Multicast and flood copies to a shaped port go through its scheduler, in the class
    /// `set_class` chose; copies to other ports go straight out.
    #[test]
    fn multicast_and_flood_copies_go_through_the_scheduler() {
        let conf = r#"
            [[port]]
            vdev = "net_null0"
            [[port]]
            vdev = "net_null1"
            [port.qos]
            classes = 2
            [[port]]
            vdev = "net_null2"
            [[table]]
            name = "l2"
            key = [{ field = "eth.dst", match = "exact" }]
            default_action = "set_class(1); flood"
            entry = [{ key = ["02:00:00:00:00:01"], action = "multicast(1)" }]
            [[multicast_group]]
            id = 1
            copy = [
                { port = 1 },
                { port = 2 },
            ]
        "#;
        let loaded = load_str(conf, Path::new("test.toml")).unwrap();
        let mut dp = Datapath::new(loaded.pipeline, 3, crate::wire::gradient::DEFAULT_UDP_PORT)
            .with_egress(&loaded.qos)
            .unwrap();
        let mut io = VecIo::new(3);
        dp.process(&mut io, 0, VecBuf::from_frame(&frame([2, 0, 0, 0, 0, 1])), 5);
        dp.process(&mut io, 0, VecBuf::from_frame(&frame([2, 0, 0, 0, 0, 7])), 6);
        dp.drain_egress(&mut io, 6);
        let mut ports: Vec<u16> = io.sent.iter().map(|(p, _)| *p).collect();
        ports.sort_unstable();
        assert_eq!(ports, vec![1, 1, 2, 2]);
        let s = &dp.egress[1].as_ref().unwrap().sched;
        assert_eq!((s.counters(0).sent.pkts, s.counters(1).sent.pkts), (1, 1), "multicast: map; flood: set_class(1)");
        assert!(dp.egress[0].is_none() && dp.egress[2].is_none());
        assert_eq!(dp.next_departure(), None);
    }
}
