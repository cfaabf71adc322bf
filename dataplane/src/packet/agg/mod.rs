//! In-network AllReduce: gradient aggregation per the protocol spec
//! (`shared/spec/gradient-protocol.md`), section by section:
//!
//! - [`collective`]: a collective of section 3 as validated from its `[[collective]]` table (the
//!   configuration reads and checks the tables, and the slot memory against
//!   `dataplane.memory_limit_mb`);
//! - [`slot`]: rules 1-4 and 8 on one slot's state;
//! - [`kernels`]: the arithmetic of rule 6 (SIMD, runtime dispatch), and rule 7's rank order;
//! - this module: validation (rule 5), folding, completion and replication of results (rule 2,
//!   section 6), resends (rule 3), NAKs (section 5, rate-limited by [`nak`]) and the STATUS
//!   answers to PROBEs (section 7).
//!
//! All slot memory is allocated when the aggregator is built; the per-packet path allocates
//! nothing (it takes mbufs from the pool for results and NAKs).

pub mod collective;
#[allow(unsafe_code)] // SIMD intrinsics behind runtime CPU-feature dispatch; every block has its SAFETY line.
pub mod kernels;
pub mod nak;
pub mod slot;
pub mod template;

use crate::buf::{PacketBuf, PacketIo};
use crate::parse::{Layers, Parsed};
use crate::stats::{Counters, Reason};
use crate::wire::build::{self, FrameSpec, IpAddrBytes, Roce, ROCEV2_PORT};
use crate::wire::gradient::{probe_len, Dtype, Flags, GradientHeader, GradientRepr, NakReason, Op, RANK_NONE};
use crate::wire::EthernetAddress;
use collective::{Carriage, Collective, MAX_WORKERS};
use kernels::Kernels;
use serde::Serialize;
use slot::{Slot, Verdict};
use strength_reduce::StrengthReducedU64;

/// What the aggregator knows of one port: the appliance's own addresses there.
#[derive(Debug, Clone, Copy, Default)]
pub struct PortAddr {
    /// The port's MAC (source of the appliance's packets).
    pub mac: EthernetAddress,
    /// The appliance's IPv4 address on the port.
    pub ipv4: Option<[u8; 4]>,
    /// The appliance's IPv6 address on the port.
    pub ipv6: Option<[u8; 16]>,
}

/// The aggregator's own counters (drops are in [`Counters`] by reason).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct AggCounters {
    /// Contributions folded into a slot.
    pub folded: u64,
    /// Rounds completed (rule 2).
    pub completed: u64,
    /// RESULT packets sent to all members on completion.
    pub results: u64,
    /// RESULT packets resent to one member (rule 3).
    pub resends: u64,
    /// NAKs sent (section 5).
    pub naks: u64,
    /// NAKs suppressed by the per-source rate limit.
    pub naks_suppressed: u64,
    /// Rounds reclaimed after `slot_timeout_ms` (rule 8).
    pub slot_timeouts: u64,
    /// Bytes of gradient payload folded.
    pub payload_bytes: u64,
    /// Packets handed to the worker owning their collective (software steering).
    pub handed_off: u64,
    /// Valid PROBEs received (section 7; refused ones are counted by their drop reason).
    pub probes: u64,
    /// STATUS packets sent in answer to PROBEs (section 7).
    pub statuses: u64,
}

impl AggCounters {
    /// Adds `o`.
    pub fn add(&mut self, o: &AggCounters) {
        self.folded += o.folded;
        self.completed += o.completed;
        self.results += o.results;
        self.resends += o.resends;
        self.naks += o.naks;
        self.naks_suppressed += o.naks_suppressed;
        self.slot_timeouts += o.slot_timeouts;
        self.payload_bytes += o.payload_bytes;
        self.handed_off += o.handed_off;
        self.probes += o.probes;
        self.statuses += o.statuses;
    }
}

/// A collective's slots and their memory.
#[derive(Debug, Clone)]
struct CollState {
    spec: Collective,
    slots: Vec<Slot>,
    /// Rank bitmaps of the rounds in progress, `words` u64 per slot.
    bitmaps: Vec<u64>,
    words: usize,
    /// Accumulators: `chunk` u32 lanes per slot.
    acc: Vec<u32>,
    /// Kept results: `chunk * size` bytes per slot.
    result: Vec<u8>,
    /// Deterministic mode: every rank's payload, `workers * chunk * size` bytes per slot (only
    /// the ranks that arrive before a lower one are copied here).
    ranks: Vec<u8>,
    /// Deterministic mode, per slot: how many ranks (0, 1, ...) are folded into the accumulator,
    /// in rank order, in the current round.
    folded: Vec<u32>,
    /// Per-member RoCEv2 PSN counters (section 6).
    psn: Vec<u32>,
    /// Per slot: the kept result's checksum sum and CRC, computed once at completion and
    /// reused for every copy and every resend.
    sums: Vec<build::PayloadSums>,
    /// Whether a result frame of this collective needs the payload's ones'-complement sum (the
    /// UDP carriage, or RoCEv2 to an IPv6 member: spec section 1) and its CRC (RoCEv2).
    need_sum: bool,
    need_crc: bool,
    /// Per-member headers of full-chunk RESULT frames (none for collectives another worker
    /// owns, or when the builder refused a member's frame: those go through the builder).
    templates: Option<template::Templates>,
    /// `spec.chunk_elements` as a divisor by multiplication (validation divides every
    /// contribution's tensor offset by it; a hardware division costs tens of cycles).
    chunk_div: StrengthReducedU64,
    /// log2 of the dtype's size (1, 2 or 4 bytes).
    size_log2: u32,
}

impl CollState {
    fn new(spec: Collective) -> CollState {
        let slots = spec.slots() as usize;
        let chunk = spec.chunk_elements as usize;
        let size = spec.dtype.size();
        let n = spec.workers();
        let words = n.div_ceil(64);
        CollState {
            slots: vec![Slot::default(); slots],
            bitmaps: vec![0; slots * words],
            words,
            acc: vec![0; slots * chunk],
            result: vec![0; slots * chunk * size],
            ranks: if spec.deterministic { vec![0; slots * n * chunk * size] } else { Vec::new() },
            folded: if spec.deterministic { vec![0; slots] } else { Vec::new() },
            psn: vec![0; n],
            sums: vec![build::PayloadSums::EMPTY; slots],
            need_sum: spec.carriage == Carriage::Udp || spec.members.iter().any(|m| m.ip.is_v6()),
            need_crc: spec.carriage == Carriage::Rocev2,
            templates: None,
            chunk_div: StrengthReducedU64::new((spec.chunk_elements as u64).max(1)),
            size_log2: size.trailing_zeros(),
            spec,
        }
    }

    /// The state of a collective another worker owns: its spec only, no slot memory.
    fn unowned(spec: Collective) -> CollState {
        CollState {
            slots: Vec::new(),
            bitmaps: Vec::new(),
            words: 0,
            acc: Vec::new(),
            result: Vec::new(),
            ranks: Vec::new(),
            folded: Vec::new(),
            psn: Vec::new(),
            sums: Vec::new(),
            need_sum: false,
            need_crc: false,
            templates: None,
            chunk_div: StrengthReducedU64::new((spec.chunk_elements as u64).max(1)),
            size_log2: spec.dtype.size().trailing_zeros(),
            spec,
        }
    }

    /// Lanes of slot `s` (the tensor's last chunk may be shorter).
    fn lanes(&self, s: usize) -> usize {
        let chunk = self.spec.chunk_elements as u64;
        (self.spec.tensor_elements - s as u64 * chunk).min(chunk) as usize
    }
}

/// A contribution, or a PROBE, that passed validation (rule 5; section 7 for a PROBE).
#[derive(Debug, Clone, Copy)]
struct Contribution {
    coll: usize,
    rank: usize,
    slot: usize,
    round: u32,
    /// A PROBE (section 7): answered with a STATUS, never folded.
    probe: bool,
}

/// One worker's aggregator: the collectives it owns and everything needed to answer.
#[derive(Debug, Clone)]
pub struct Aggregator {
    colls: Vec<CollState>,
    /// collective_id -> index + 1 (0: unknown).
    index: Vec<u16>,
    ports: Vec<PortAddr>,
    gradient_udp_port: u16,
    appliance_qpn: u32,
    kernels: Kernels,
    /// The per-source NAK limit, shared with the other workers' aggregators (section 5 limits
    /// what the appliance sends to a source, whichever worker refuses it).
    naks: std::sync::Arc<nak::SharedNakLimiter>,
    /// This worker's index.
    me: u16,
    /// By `index` value: the worker owning that collective, `me` for 0 (no collective).
    /// Collective `i` (0-based, in config order) is owned by worker `i % workers`: its slots
    /// and PSN counters live there only. Precomputed so that steering takes no division.
    owners: Vec<u16>,
    /// The aggregator's counters.
    pub counters: AggCounters,
}

impl Aggregator {
    /// An aggregator for `collectives`, answering from `ports`' addresses. Allocates every slot
    /// now (spec section 3).
    pub fn new(collectives: &[Collective], ports: Vec<PortAddr>, gradient_udp_port: u16, appliance_qpn: u32) -> Self {
        Self::for_worker(collectives, ports, gradient_udp_port, appliance_qpn, 0, 1)
    }

    /// The aggregator of worker `me` of `workers`: it allocates the slots of the collectives it
    /// owns (collective `i` belongs to worker `i % workers`); packets of the others are handed
    /// to their owner ([`Aggregator::owner`]).
    pub fn for_worker(
        collectives: &[Collective],
        ports: Vec<PortAddr>,
        gradient_udp_port: u16,
        appliance_qpn: u32,
        me: u16,
        workers: u16,
    ) -> Self {
        let mut index = vec![0u16; 1 << 16];
        for (i, c) in collectives.iter().enumerate() {
            index[c.id as usize] = i as u16 + 1;
        }
        let workers = workers.max(1);
        let naks = std::sync::Arc::new(nak::SharedNakLimiter::with_members(member_sources(collectives)));
        Aggregator {
            colls: collectives
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    if i as u16 % workers == me {
                        let mut st = CollState::new(c.clone());
                        let full = st.spec.chunk_elements as usize;
                        let specs: Vec<FrameSpec> = (0..st.spec.workers())
                            .map(|r| result_spec(&st.spec, &ports, gradient_udp_port, appliance_qpn, r, 0, 0, 0, full))
                            .collect();
                        st.templates = template::Templates::new(&specs, full * st.spec.dtype.size()).ok();
                        st
                    } else {
                        CollState::unowned(c.clone())
                    }
                })
                .collect(),
            me,
            owners: std::iter::once(me).chain((0..collectives.len()).map(|i| (i % workers as usize) as u16)).collect(),
            index,
            ports,
            gradient_udp_port,
            appliance_qpn,
            kernels: Kernels::detect(),
            naks,
            counters: AggCounters::default(),
        }
    }

    /// Shares `limiter` (one per appliance: every worker's aggregator gets the same) for the
    /// per-source NAK limit instead of a limiter of its own. The members' sources of this
    /// aggregator's collectives become the limiter's members if it has none yet (every worker
    /// has the same collectives).
    pub fn with_nak_limiter(mut self, limiter: std::sync::Arc<nak::SharedNakLimiter>) -> Self {
        limiter.learn_members(member_sources(self.colls.iter().map(|c| &c.spec)));
        self.naks = limiter;
        self
    }

    /// Uses these kernels instead of the best detected ones (tests compare kernel sets).
    pub fn with_kernels(mut self, k: Kernels) -> Self {
        self.kernels = k;
        self
    }

    /// True when the aggregator has collectives and `p` is a gradient packet addressed to the
    /// appliance on `port` (its IP there, when one is configured for the packet's family),
    /// a whole one or one too short for its header (which [`Aggregator::process`] drops as
    /// malformed).
    #[inline]
    pub fn wants(&self, p: &Parsed, port: u16) -> bool {
        if self.colls.is_empty() || !(p.has(Layers::GRADIENT) || p.has(Layers::GRADIENT_SHORT)) {
            return false;
        }
        let Some(a) = self.ports.get(port as usize) else { return false };
        if p.has(Layers::IPV4) {
            a.ipv4.is_none_or(|ip| p.ip_dst() == ip)
        } else {
            a.ipv6.is_none_or(|ip| p.ip_dst() == ip)
        }
    }

    /// This worker's index.
    #[inline]
    pub fn me(&self) -> u16 {
        self.me
    }

    /// The worker that owns `p`'s collective (this one for unknown collectives: it answers
    /// with the NAK).
    #[inline]
    pub fn owner(&self, p: &Parsed) -> u16 {
        self.owners[self.index[p.grad_collective_id as usize] as usize]
    }

    /// Handles one gradient packet (`p` is its parse, `now_us` the appliance's clock in µs:
    /// the capture time in replays). The packet is consumed; results, resends and NAKs are sent
    /// through `io`; drops are counted in `counters` by reason.
    pub fn process<I: PacketIo>(
        &mut self,
        io: &mut I,
        in_port: u16,
        pkt: I::Buf,
        p: &Parsed,
        now_us: u64,
        counters: &mut Counters,
    ) {
        let frame = pkt.data();
        let c = match self.validate(frame, p) {
            Ok(c) => c,
            Err((reason, nak_reason)) => {
                counters.drop(reason);
                if let Some(r) = nak_reason {
                    self.nak(io, in_port, frame, p, r, None, now_us, counters);
                }
                return;
            }
        };
        if c.probe {
            self.counters.probes += 1;
            self.status(io, c, pkt, now_us, counters);
            return;
        }
        let st = &mut self.colls[c.coll];
        let n = st.spec.workers();
        let words = st.words;
        let bm = &mut st.bitmaps[c.slot * words..(c.slot + 1) * words];
        let seen = bm[c.rank / 64] & (1 << (c.rank % 64)) != 0;
        let (verdict, reclaimed) = st.slots[c.slot].admit(c.round, seen, now_us, n, st.spec.slot_timeout_us);
        if reclaimed {
            self.counters.slot_timeouts += 1;
        }
        match verdict {
            Verdict::Resend => {
                self.counters.resends += 1;
                self.emit_result(io, c.coll, c.slot, c.round, Some(c.rank), Some(pkt), counters);
            }
            Verdict::Stale(expected) => {
                counters.drop(Reason::GradStaleRound);
                self.nak(io, in_port, frame, p, NakReason::STALE_ROUND, Some(expected), now_us, counters);
            }
            Verdict::Duplicate => counters.drop(Reason::GradDuplicate),
            Verdict::Fold { first, last } => {
                if first {
                    bm.fill(0);
                }
                bm[c.rank / 64] |= 1 << (c.rank % 64);
                self.fold(c, &frame[p.grad_payload()], first, last);
                self.counters.folded += 1;
                if last {
                    self.counters.completed += 1;
                    self.emit_result(io, c.coll, c.slot, c.round, None, Some(pkt), counters);
                }
            }
        }
    }

    /// Rule 5, in the spec's order, for a contribution or a PROBE (section 7: its length is
    /// exactly ceil(num_workers / 8) bytes, its offset one a contribution could carry). Err:
    /// the drop reason and the NAK reason (none for flags).
    #[inline(always)]
    fn validate(&self, frame: &[u8], p: &Parsed) -> Result<Contribution, (Reason, Option<u8>)> {
        if !p.has(Layers::GRADIENT) {
            // Too short for a header (Layers::GRADIENT_SHORT): nothing to answer.
            return Err((Reason::MalformedGradient, None));
        }
        let g = GradientHeader::new_checked(&frame[p.grad_offset as usize..])
            .map_err(|_| (Reason::MalformedGradient, None))?;
        if g.flags() & (Flags::RESULT | Flags::NAK) != 0 {
            return Err((Reason::GradFlags, None));
        }
        let idx = self.index[g.collective_id() as usize];
        if idx == 0 {
            return Err((Reason::GradUnknownCollective, Some(NakReason::UNKNOWN_COLLECTIVE)));
        }
        let coll = idx as usize - 1;
        let st = &self.colls[coll];
        let spec = &st.spec;
        if g.version() != 1 {
            return Err((Reason::GradBadVersion, Some(NakReason::BAD_VERSION)));
        }
        let carriage = if p.has(Layers::BTH) { Carriage::Rocev2 } else { Carriage::Udp };
        if Op::from_wire(g.op_type()) != Some(spec.op)
            || Dtype::from_wire(g.dtype()) != Some(spec.dtype)
            || carriage != spec.carriage
        {
            return Err((Reason::GradMismatch, Some(NakReason::MISMATCH)));
        }
        let rank = g.worker_rank() as usize;
        if rank >= spec.workers() {
            return Err((Reason::GradBadRank, Some(NakReason::BAD_RANK)));
        }
        let m = &spec.members[rank];
        let ip_ok = match m.ip {
            IpAddrBytes::V4(a) => p.has(Layers::IPV4) && p.ip_src() == a,
            IpAddrBytes::V6(a) => p.has(Layers::IPV6) && p.ip_src() == a,
        };
        let port_ok = match carriage {
            Carriage::Udp => p.udp_src == m.udp_port,
            Carriage::Rocev2 => p.deth_src_qp == m.qpn,
        };
        if !ip_ok || !port_ok {
            return Err((Reason::GradNotMember, Some(NakReason::NOT_MEMBER)));
        }
        const BAD: Option<u8> = Some(NakReason::BAD_LENGTH_OR_OFFSET);
        let dl = g.data_length() as u64;
        let present = p.grad_payload_len as u64;
        let off = g.tensor_offset() as u64;
        let (slot, within) = StrengthReducedU64::div_rem(off, st.chunk_div);
        if g.flags() & Flags::PROBE != 0 {
            // Section 7: as long as its answer; a chunk's offset (the chunk's length follows).
            if dl != probe_len(spec.workers()) as u64 || dl > present || (carriage == Carriage::Udp && present != dl) {
                return Err((Reason::GradBadLength, BAD));
            }
            if within != 0 || off >= spec.tensor_elements {
                return Err((Reason::GradBadOffset, BAD));
            }
            return Ok(Contribution { coll, rank, slot: slot as usize, round: g.round(), probe: true });
        }
        // The dtype's size is a power of two: shifts and masks, no division.
        if dl & ((1 << st.size_log2) - 1) != 0 || dl > present || (carriage == Carriage::Udp && present != dl) {
            return Err((Reason::GradBadLength, BAD));
        }
        let count = dl >> st.size_log2;
        let chunk = spec.chunk_elements as u64;
        let last = off + count >= spec.tensor_elements;
        if count == 0 || within != 0 || off + count > spec.tensor_elements || count > chunk || (count < chunk && !last)
        {
            return Err((Reason::GradBadOffset, BAD));
        }
        Ok(Contribution { coll, rank, slot: slot as usize, round: g.round(), probe: false })
    }

    /// Folds a contribution's lanes (rule 6); on the last one, writes the kept result.
    fn fold(&mut self, c: Contribution, payload: &[u8], first: bool, last: bool) {
        let k = self.kernels;
        let st = &mut self.colls[c.coll];
        let lanes = st.lanes(c.slot);
        let chunk = st.spec.chunk_elements as usize;
        let size = st.spec.dtype.size();
        let (op, dt) = (st.spec.op, st.spec.dtype);
        let payload = &payload[..lanes * size];
        self.counters.payload_bytes += payload.len() as u64;
        let res = c.slot * chunk * size;
        let result = &mut st.result[res..res + lanes * size];
        if st.spec.deterministic {
            // Rule 7: reduce in rank order. The accumulator holds ranks 0..folded; a rank that
            // arrives in turn is folded straight from its frame (then any later ranks already
            // kept), one that arrives early is kept until its turn. The last contribution is
            // always the one in turn (every other rank has arrived), so the round ends folded.
            // The kernel calls are those of a fold of every rank in order: load rank 0, fold the
            // middle ranks, fold_store rank n-1 (load and store when n is 1).
            let n = st.spec.workers();
            let base = c.slot * n * chunk * size;
            if first {
                st.folded[c.slot] = 0;
            }
            let next = st.folded[c.slot] as usize;
            if c.rank != next {
                let at = base + c.rank * chunk * size;
                st.ranks[at..at + lanes * size].copy_from_slice(payload);
                return;
            }
            let acc = &mut st.acc[c.slot * chunk..c.slot * chunk + lanes];
            let step = |r: usize, acc: &mut [u32], src: &[u8], result: &mut [u8]| {
                if r == 0 {
                    k.load(dt, acc, src);
                    if n == 1 {
                        k.store(dt, acc, result);
                    }
                } else if r == n - 1 {
                    k.fold_store(op, dt, acc, src, result);
                } else {
                    k.fold(op, dt, acc, src);
                }
            };
            step(next, acc, payload, result);
            let words = st.words;
            let bm = &st.bitmaps[c.slot * words..(c.slot + 1) * words];
            let mut r = next + 1;
            while r < n && bm[r / 64] & (1 << (r % 64)) != 0 {
                let at = base + r * chunk * size;
                step(r, acc, &st.ranks[at..at + lanes * size], result);
                r += 1;
            }
            st.folded[c.slot] = r as u32;
            debug_assert!(!last || r == n, "the last contribution completes the rank-order fold");
            return;
        }
        let acc = &mut st.acc[c.slot * chunk..c.slot * chunk + lanes];
        match (first, last) {
            (true, true) => {
                k.load(dt, acc, payload);
                k.store(dt, acc, result);
            }
            (true, false) => k.load(dt, acc, payload),
            (false, false) => k.fold(op, dt, acc, payload),
            (false, true) => k.fold_store(op, dt, acc, payload, result),
        }
    }

    /// Sends slot `s`'s kept result for `round` to every member (rule 2), or to `only` (rule 3).
    /// `spare` is a frame the caller is done with (the contribution that triggered the send):
    /// the first copy is written into it, in place, when it has the room (saving an mbuf
    /// allocation and a free, and touching bytes already in cache).
    #[allow(clippy::too_many_arguments)]
    fn emit_result<I: PacketIo>(
        &mut self,
        io: &mut I,
        coll: usize,
        s: usize,
        round: u32,
        only: Option<usize>,
        mut spare: Option<I::Buf>,
        counters: &mut Counters,
    ) {
        let st = &mut self.colls[coll];
        let lanes = st.lanes(s);
        let size = st.spec.dtype.size();
        let chunk = st.spec.chunk_elements as usize;
        let payload = &st.result[s * chunk * size..s * chunk * size + lanes * size];
        if only.is_none() {
            let pad = if st.spec.carriage == Carriage::Rocev2 { (4 - (20 + payload.len()) % 4) % 4 } else { 0 };
            st.sums[s] = build::PayloadSums::only(payload, pad, st.need_sum, st.need_crc);
        }
        let sums = &st.sums[s];
        let members = match only {
            Some(r) => r..r + 1,
            None => 0..st.spec.workers(),
        };
        let roce = st.spec.carriage == Carriage::Rocev2;
        let templates = st.templates.as_ref().filter(|t| t.fits(payload.len(), sums));
        for r in members {
            let psn = if roce {
                let psn = st.psn[r];
                st.psn[r] = (psn + 1) & 0xff_ffff;
                psn
            } else {
                0
            };
            let port = st.spec.members[r].port;
            let sent = match templates {
                Some(t) => {
                    let patch = template::Patch {
                        tensor_offset: (s * chunk) as u32,
                        round,
                        roce: roce.then_some((result_source_port(s), psn)),
                    };
                    send_templated(io, &mut spare, port, t, r, &patch, payload, sums, counters)
                }
                None => {
                    let spec = result_spec(
                        &st.spec,
                        &self.ports,
                        self.gradient_udp_port,
                        self.appliance_qpn,
                        r,
                        s,
                        round,
                        psn,
                        lanes,
                    );
                    send_frame(io, &mut spare, port, &spec, payload, Some(sums), counters)
                }
            };
            if sent && only.is_none() {
                self.counters.results += 1;
            }
        }
    }

    /// Answers a valid PROBE (section 7) with a STATUS to the prober: its slot's state (a round
    /// in progress that timed out is reclaimed first, rule 8), the round the state's row says,
    /// and the bitmap of the ranks whose contribution to the round in progress is in (bit k mod
    /// 8 of byte k / 8; all zero without a round in progress). From the addresses of a result
    /// (section 6) on the member's port, with its VLAN; on RoCEv2 to its QP with its Q_Key and
    /// PSN 0, the member's PSN counter untouched. The probe's frame becomes the STATUS when it
    /// has the room. The slot is read, never touched (rule 8's clock included).
    fn status<I: PacketIo>(&mut self, io: &mut I, c: Contribution, pkt: I::Buf, now_us: u64, counters: &mut Counters) {
        let st = &mut self.colls[c.coll];
        if st.slots[c.slot].reclaim(now_us, st.spec.slot_timeout_us) {
            self.counters.slot_timeouts += 1;
        }
        let slot = st.slots[c.slot];
        let bm = &st.bitmaps[c.slot * st.words..(c.slot + 1) * st.words];
        let seen = slot.active && bm[c.rank / 64] & (1 << (c.rank % 64)) != 0;
        let (state, round) = slot.status(seen);
        // Bit k mod 64 of word k / 64, little-endian, is bit k mod 8 of byte k / 8.
        let mut bitmap = [0u8; MAX_WORKERS / 8];
        if slot.active {
            for (b, w) in bitmap.chunks_exact_mut(8).zip(bm) {
                b.copy_from_slice(&w.to_le_bytes());
            }
        }
        let len = probe_len(st.spec.workers());
        let mut spec =
            result_spec(&st.spec, &self.ports, self.gradient_udp_port, self.appliance_qpn, c.rank, c.slot, round, 0, 0);
        spec.header.flags = Flags::RESULT | Flags::PROBE;
        spec.header.reason = state;
        spec.header.data_length = len as u32;
        let port = st.spec.members[c.rank].port;
        if send_frame(io, &mut Some(pkt), port, &spec, &bitmap[..len], None, counters) {
            self.counters.statuses += 1;
        }
    }

    /// Sends a NAK (section 5) for the refused packet, rate-limited per source.
    #[allow(clippy::too_many_arguments)]
    fn nak<I: PacketIo>(
        &mut self,
        io: &mut I,
        in_port: u16,
        frame: &[u8],
        p: &Parsed,
        reason: u8,
        round: Option<u32>,
        now_us: u64,
        counters: &mut Counters,
    ) {
        let roce = p.has(Layers::BTH);
        let src = nak::source(p.ip_src(), if roce { p.deth_src_qp } else { p.udp_src as u32 }, roce);
        if !self.naks.allow(src, now_us) {
            self.counters.naks_suppressed += 1;
            return;
        }
        let Ok(g) = GradientHeader::new_checked(&frame[p.grad_offset as usize..]) else { return };
        let mut header = GradientRepr::parse(&g);
        header.flags = Flags::NAK;
        header.worker_rank = RANK_NONE;
        header.reason = reason;
        header.data_length = 0;
        if let Some(r) = round {
            header.round = r;
        }
        let port = self.ports.get(in_port as usize).copied().unwrap_or_default();
        let (src_ip, dst_ip) = if p.has(Layers::IPV4) {
            let mut d = [0u8; 4];
            d.copy_from_slice(p.ip_dst());
            let mut s = [0u8; 4];
            s.copy_from_slice(p.ip_src());
            (IpAddrBytes::V4(port.ipv4.unwrap_or(d)), IpAddrBytes::V4(s))
        } else {
            (IpAddrBytes::V6(port.ipv6.unwrap_or(p.ip_dst_bytes)), IpAddrBytes::V6(p.ip_src_bytes))
        };
        let coll_dscp = match self.index[g.collective_id() as usize] {
            0 => 0,
            i => self.colls[i as usize - 1].spec.dscp,
        };
        // Back the way the packet came: its tags mirrored, whole (priority, DEI and VID), an
        // 802.1ad (or second 802.1Q) tag first, then the 802.1Q one.
        let tci = |at: usize| u16::from_be_bytes([frame[at], frame[at + 1]]);
        let (outer_tag, vlan) = match (p.has(Layers::VLAN_OUTER), p.has(Layers::VLAN_INNER)) {
            (true, true) => (Some((p.vlan_outer_tpid, tci(14))), Some(tci(18))),
            (true, false) if p.vlan_outer_tpid != 0x8100 => (Some((p.vlan_outer_tpid, tci(14))), None),
            (true, false) => (None, Some(tci(14))),
            _ => (None, None),
        };
        let spec = FrameSpec {
            src_mac: port.mac,
            dst_mac: p.eth_src,
            vlan,
            outer_tag,
            src_ip,
            dst_ip,
            dscp: coll_dscp,
            ecn: 2,
            ttl: 64,
            src_port: if roce { 0xc000 } else { self.gradient_udp_port },
            dst_port: if roce { ROCEV2_PORT } else { p.udp_src },
            roce: roce.then_some(Roce {
                dest_qp: p.deth_src_qp,
                psn: 0,
                pkey: 0xffff,
                qkey: p.deth_qkey,
                src_qp: self.appliance_qpn,
            }),
            header,
        };
        if send_frame(io, &mut None, in_port, &spec, &[], None, counters) {
            self.counters.naks += 1;
        }
    }
}

/// The sources of every member of `collectives` (their IP and UDP port, or IP and QP for
/// RoCEv2): the NAK limiter's members (section 5).
fn member_sources<'a>(
    collectives: impl IntoIterator<Item = &'a Collective> + 'a,
) -> impl Iterator<Item = nak::Source> + 'a {
    collectives.into_iter().flat_map(|c| {
        let roce = c.carriage == Carriage::Rocev2;
        c.members.iter().map(move |m| {
            let port_or_qp = if roce { m.qpn } else { m.udp_port as u32 };
            match &m.ip {
                IpAddrBytes::V4(a) => nak::source(a, port_or_qp, roce),
                IpAddrBytes::V6(a) => nak::source(a, port_or_qp, roce),
            }
        })
    })
}

/// The longest RESULT frame of `spec` (a full chunk, to the member whose headers are the
/// longest: an 802.1Q tag, IPv6), in bytes. Results are built in one mbuf segment, so the
/// mempool's data room (less its headroom) must hold it.
pub fn max_result_frame_len(spec: &Collective) -> usize {
    let full = (spec.chunk_elements as u64).min(spec.tensor_elements) as usize;
    (0..spec.workers())
        .map(|r| result_spec(spec, &[], 0, 0, r, 0, 0, 0, full).frame_len(full * spec.dtype.size()))
        .max()
        .unwrap_or(0)
}

/// The UDP source port of slot `s`'s RoCEv2 RESULT frames (spec section 6: entropy for ECMP).
#[inline]
fn result_source_port(s: usize) -> u16 {
    0xc000 | (s as u16 & 0x3fff)
}

/// The headers of member `r`'s RESULT frame for slot `s` of `spec` in `round` (spec section 6):
/// from the appliance's addresses on the member's port, with `lanes` lanes of payload and, on
/// RoCEv2, BTH PSN `psn`.
#[allow(clippy::too_many_arguments)]
fn result_spec(
    spec: &Collective,
    ports: &[PortAddr],
    gradient_udp_port: u16,
    appliance_qpn: u32,
    r: usize,
    s: usize,
    round: u32,
    psn: u32,
    lanes: usize,
) -> FrameSpec {
    let m = spec.members[r];
    let port = ports.get(m.port as usize).copied().unwrap_or_default();
    let roce = (spec.carriage == Carriage::Rocev2).then_some(Roce {
        dest_qp: m.qpn,
        psn,
        pkey: 0xffff,
        qkey: m.qkey,
        src_qp: appliance_qpn,
    });
    let chunk = spec.chunk_elements as usize;
    FrameSpec {
        src_mac: port.mac,
        dst_mac: m.mac,
        vlan: m.vlan,
        outer_tag: None,
        src_ip: template::source_ip(&port, &m.ip),
        dst_ip: m.ip,
        dscp: spec.dscp,
        ecn: 2,
        ttl: 64,
        src_port: if roce.is_some() { result_source_port(s) } else { gradient_udp_port },
        dst_port: if roce.is_some() { ROCEV2_PORT } else { m.udp_port },
        roce,
        header: GradientRepr {
            version: 1,
            flags: Flags::RESULT,
            op_type: spec.op.wire(),
            collective_id: spec.id,
            dtype: spec.dtype.wire(),
            reason: 0,
            worker_rank: RANK_NONE,
            tensor_offset: (s * chunk) as u32,
            data_length: (lanes * spec.dtype.size()) as u32,
            round,
        },
    }
}

/// Writes member `r`'s RESULT frame from its template into `spare` or a new mbuf and sends it
/// on `port`.
/// False (counted `no_mbuf`) without an mbuf large enough.
#[allow(clippy::too_many_arguments)]
#[inline]
fn send_templated<I: PacketIo>(
    io: &mut I,
    spare: &mut Option<I::Buf>,
    port: u16,
    t: &template::Templates,
    r: usize,
    patch: &template::Patch,
    payload: &[u8],
    sums: &build::PayloadSums,
    counters: &mut Counters,
) -> bool {
    let len = t.frame_len(r);
    let Some(mut b) = frame_buf(io, spare, len) else {
        counters.drop(Reason::NoMbuf);
        return false;
    };
    t.write(r, patch, payload, sums, b.data_mut());
    counters.tx(port, len);
    io.send(port, b);
    true
}

/// A frame of exactly `len` bytes (content unspecified) for a packet to send: `spare`, taken,
/// when it can be resized to `len`, else a new one from the pool. `None` when the pool is
/// exhausted or its buffers are too small.
#[inline]
fn frame_buf<I: PacketIo>(io: &mut I, spare: &mut Option<I::Buf>, len: usize) -> Option<I::Buf> {
    if let Some(mut b) = spare.take() {
        if b.set_len(len) {
            return Some(b);
        }
    }
    let mut b = io.alloc()?;
    b.append(len).then_some(b)
}

/// Builds `spec` with `payload` into `spare` or a new mbuf and sends it on `port`. False (counted
/// `no_mbuf`) without an mbuf large enough.
#[allow(clippy::too_many_arguments)]
fn send_frame<I: PacketIo>(
    io: &mut I,
    spare: &mut Option<I::Buf>,
    port: u16,
    spec: &FrameSpec,
    payload: &[u8],
    sums: Option<&build::PayloadSums>,
    counters: &mut Counters,
) -> bool {
    let len = spec.frame_len(payload.len());
    let Some(mut b) = frame_buf(io, spare, len) else {
        counters.drop(Reason::NoMbuf);
        return false;
    };
    if build::build_with(spec, payload, sums, b.data_mut()).is_err() {
        counters.drop(Reason::NoMbuf);
        return false;
    }
    counters.tx(port, len);
    io.send(port, b);
    true
}

#[cfg(test)]
mod tests;
