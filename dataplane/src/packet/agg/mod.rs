//! In-network AllReduce: gradient aggregation per the protocol spec
//! (`shared/spec/gradient-protocol.md`), section by section:
//!
//! - [`collective`]: a collective of section 3 as validated from its `[[collective]]` table (the
//!   configuration reads and checks the tables, and the slot memory against
//!   `dataplane.memory_limit_mb`);
//! - this module: the [`Aggregator`] and its per-packet entry point, [`Aggregator::process`],
//!   which takes a gradient packet through the steps below;
//! - `check.rs`: validation of a contribution or a PROBE (rule 5);
//! - [`slot`]: rules 1-4 and 8 on one slot's state (`state.rs`: a collective's slot memory);
//! - `fold.rs` and [`kernels`]: folding (the arithmetic of rule 6, SIMD with runtime dispatch),
//!   in rank order for a deterministic collective (rule 7);
//! - `emit.rs`: completion and replication of results (rule 2, section 6) and resends (rule 3),
//!   from per-member header templates ([`crate::wire::template`]);
//! - [`nak`]: NAKs (section 5) and their per-source rate limit;
//! - `status.rs`: the STATUS answers to PROBEs (section 7);
//! - `send.rs`: writing a frame into the refused or answered packet's mbuf, or a new one.
//!
//! - [`context`]: what every worker's aggregator is built with besides its collectives;
//! - [`swap`]: a collective set changed at runtime, built off the fast path and switched to at
//!   a burst boundary, the kept collectives' states moved over.
//!
//! All slot memory is allocated when the aggregator is built, or for a set changed at runtime
//! by the control thread ([`swap::CollSwap::new`]); the per-packet path allocates nothing (it
//! takes mbufs from the pool for results and NAKs).

mod check;
pub mod collective;
pub mod context;
mod emit;
mod fold;
#[allow(unsafe_code)] // SIMD intrinsics behind runtime CPU-feature dispatch; every block has its SAFETY line.
pub mod kernels;
mod lines;
pub mod nak;
mod send;
pub mod slot;
mod state;
mod status;
pub mod straggle;
pub mod swap;

pub use emit::{max_contribution_frame_len, max_result_frame_len, result_ip_len, CONTRIBUTION_HEADER_SLACK};

use crate::buf::{PacketBuf, PacketIo};
use crate::parse::{Layers, Parsed};
use crate::stats::{Counters, Reason};
use crate::wire::gradient::{GradientHeader, NakReason};
use crate::wire::EthernetAddress;
use collective::Collective;
use context::AggContext;
use kernels::Kernels;
use nak::member_sources;
use serde::Serialize;
use slot::Verdict;
use state::CollState;

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
    /// Of `results`, those sent as a header over another member's payload (`[dataplane]
    /// zero_copy_results`).
    pub shared_results: u64,
    /// RESULT packets resent to one member (rule 3).
    pub resends: u64,
    /// NAKs sent (section 5).
    pub naks: u64,
    /// NAKs not sent: suppressed by the per-source rate limit, or withheld because the refused
    /// packet's source is not one a NAK may go to (a group or broadcast address, nobody, the
    /// appliance itself, UDP port 0: section 5, a NAK never amplifies).
    pub naks_suppressed: u64,
    /// Rounds reclaimed after `slot_timeout_ms` (rule 8).
    pub slot_timeouts: u64,
    /// Bytes of gradient payload folded.
    pub payload_bytes: u64,
    /// Packets handed to the worker owning their collective, or a sharded collective's chunk
    /// (software steering).
    pub handed_off: u64,
    /// Valid PROBEs received (section 7; refused ones are counted by their drop reason).
    pub probes: u64,
    /// STATUS packets sent in answer to PROBEs (section 7).
    pub statuses: u64,
}

impl AggCounters {
    /// Adds `o`.
    pub fn add(&mut self, o: &AggCounters) {
        add_fields!(self, o; folded, completed, results, shared_results, resends, naks, naks_suppressed, slot_timeouts,
            payload_bytes, handed_off, probes, statuses);
    }
}

/// NAK reason codes of section 5: 1 to 7 ([`NakReason`]); [`CollCounters::naks`] has one
/// counter per code, code `c` at index `c - 1`.
pub const NAK_REASONS: usize = 7;

/// The drop reasons of a known collective's packets, in [`CollCounters::drops`] order: the
/// refusals of rule 5 once the collective is known (section 4; the flags are checked before
/// the collective id but are counted for it when it is a configured one), then rule 4's stale
/// rounds and rule 1's duplicates. The inverse of [`coll_drop_index`], which is where the
/// order is written.
pub const COLL_DROP_REASONS: [Reason; 9] = {
    let mut out = [Reason::GradFlags; 9];
    let mut i = 0;
    while i < Reason::ALL.len() {
        if let Some(k) = coll_drop_index(Reason::ALL[i]) {
            out[k] = Reason::ALL[i];
        }
        i += 1;
    }
    out
};

/// The index of `r` in [`COLL_DROP_REASONS`], if it is one.
#[inline]
pub const fn coll_drop_index(r: Reason) -> Option<usize> {
    Some(match r {
        Reason::GradFlags => 0,
        Reason::GradBadVersion => 1,
        Reason::GradMismatch => 2,
        Reason::GradBadRank => 3,
        Reason::GradNotMember => 4,
        Reason::GradBadLength => 5,
        Reason::GradBadOffset => 6,
        Reason::GradStaleRound => 7,
        Reason::GradDuplicate => 8,
        _ => return None,
    })
}

/// One collective's counters, kept beside its slots by the worker that owns it (zeros on the
/// others: [`Aggregator::collectives`]). Each is counted where the [`AggCounters`] one (or the
/// drop reason in [`Counters`]) is, so over the collectives they sum to those, but for what
/// no collective can be charged with (NAKs and drops of unknown collectives, hand-offs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CollCounters {
    /// Contributions folded into a slot.
    pub folded: u64,
    /// Rounds completed (rule 2).
    pub completed: u64,
    /// RESULT packets sent to all members on completion.
    pub results: u64,
    /// RESULT packets resent to one member (rule 3).
    pub resends: u64,
    /// NAKs sent (section 5), by reason code: code `c` at index `c - 1` ([`NAK_REASONS`];
    /// code 1, unknown collective, is never a known collective's).
    pub naks: [u64; NAK_REASONS],
    /// NAKs not sent: suppressed by the per-source rate limit, or withheld because the refused
    /// packet's source is not one a NAK may go to (a group or broadcast address, nobody, the
    /// appliance itself, UDP port 0: section 5, a NAK never amplifies).
    pub naks_suppressed: u64,
    /// Rounds reclaimed after `slot_timeout_ms` (rule 8).
    pub slot_timeouts: u64,
    /// Bytes of gradient payload folded.
    pub payload_bytes: u64,
    /// Valid PROBEs received (section 7).
    pub probes: u64,
    /// STATUS packets sent in answer to PROBEs (section 7).
    pub statuses: u64,
    /// Packets dropped, by reason, in [`COLL_DROP_REASONS`] order (stale rounds, duplicates,
    /// spoofed sources and the other refusals of the collective's packets).
    pub drops: [u64; COLL_DROP_REASONS.len()],
}

impl CollCounters {
    /// Adds `o`.
    pub fn add(&mut self, o: &CollCounters) {
        add_fields!(self, o; folded, completed, results, resends, naks_suppressed, slot_timeouts, payload_bytes,
            probes, statuses);
        for (a, b) in self.naks.iter_mut().zip(&o.naks) {
            *a += b;
        }
        for (a, b) in self.drops.iter_mut().zip(&o.drops) {
            *a += b;
        }
    }

    /// NAKs sent, all reasons.
    pub fn naks_sent(&self) -> u64 {
        self.naks.iter().sum()
    }

    /// Packets dropped for `r` (0 for a reason not in [`COLL_DROP_REASONS`]).
    pub fn dropped(&self, r: Reason) -> u64 {
        coll_drop_index(r).map_or(0, |i| self.drops[i])
    }
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
    /// and PSN counters live there only. Precomputed so that steering takes no division. For
    /// a collective sharded over the workers, the owner of its chunk 0 (chunk `k` is then
    /// owned by worker `(owner + k) % workers`).
    owners: Vec<u16>,
    /// Whether a completion's result frames share one payload ([`AggContext::zero_copy_results`]).
    pub(super) zero_copy_results: bool,
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
    /// to their owner ([`Aggregator::owner`]). No collective is sharded: see
    /// [`Aggregator::with_context`].
    pub fn for_worker(
        collectives: &[Collective],
        ports: Vec<PortAddr>,
        gradient_udp_port: u16,
        appliance_qpn: u32,
        me: u16,
        workers: u16,
    ) -> Self {
        let ctx =
            AggContext { ports, gradient_udp_port, appliance_qpn, workers, shard: false, zero_copy_results: false };
        Self::with_context(&ctx, collectives, me)
    }

    /// The aggregator of worker `me` of `ctx.workers`, answering from `ctx`'s addresses:
    /// collective `i` belongs to worker `i % workers`, or, when `ctx.shard` spreads it over the
    /// workers ([`AggContext::sharded`]), its chunk `k` to worker `(i + k) % workers`. It
    /// allocates the slots it holds now (spec section 3); packets of the others are handed to
    /// their owner ([`Aggregator::owner`]).
    pub fn with_context(ctx: &AggContext, collectives: &[Collective], me: u16) -> Self {
        let mut index = vec![0u16; 1 << 16];
        for (i, c) in collectives.iter().enumerate() {
            index[c.id as usize] = i as u16 + 1;
        }
        let workers = ctx.workers.max(1);
        let owners: Vec<u16> = (0..collectives.len()).map(|i| (i % workers as usize) as u16).collect();
        let naks = std::sync::Arc::new(nak::SharedNakLimiter::with_members(member_sources(collectives)));
        Aggregator {
            colls: collectives
                .iter()
                .zip(&owners)
                .map(|(c, &owner)| CollState::for_worker(ctx, c, owner, me))
                .collect(),
            me,
            owners: std::iter::once(me).chain(owners).collect(),
            index,
            ports: ctx.ports.clone(),
            gradient_udp_port: ctx.gradient_udp_port,
            appliance_qpn: ctx.appliance_qpn,
            kernels: Kernels::detect(),
            zero_copy_results: ctx.zero_copy_results,
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

    /// True when `p` is a gradient packet addressed to the appliance on `port` (to its IP
    /// there of the packet's family), a whole one or one too short for its header (which
    /// [`Aggregator::process`] drops as malformed), whether or not any collective is
    /// configured: the appliance is its destination, and one for a collective it does not have
    /// is refused with NAK reason 1 (spec section 4 rule 5, section 5), the same with no
    /// collective at all (started without one, or the last one deleted at runtime) as with
    /// others configured. A port with no address of the packet's family has no appliance
    /// address to send to: whatever its destination, the packet is another host's, and goes
    /// through the tables as transit (the spec's answers, NAK and STATUS included, come from
    /// the appliance's address on the port, section 6, which such a port does not have).
    #[inline]
    pub fn wants(&self, p: &Parsed, port: u16) -> bool {
        if !(p.has(Layers::GRADIENT) || p.has(Layers::GRADIENT_SHORT)) {
            return false;
        }
        let Some(a) = self.ports.get(port as usize) else { return false };
        if p.has(Layers::IPV4) {
            a.ipv4.is_some_and(|ip| p.ip_dst() == ip)
        } else {
            a.ipv6.is_some_and(|ip| p.ip_dst() == ip)
        }
    }

    /// Every collective, in config order: its id, its ranks, and per rank how late its
    /// contributions came (empty for the collectives another worker owns; for a sharded
    /// collective, this worker's chunks' contributions).
    pub fn stragglers(&self) -> impl Iterator<Item = (u16, usize, &[straggle::RankLateness])> {
        self.colls.iter().map(|c| (c.spec.id, c.spec.workers(), c.late.as_slice()))
    }

    /// Every collective, in config order: its id, its counters and its slots in use (with a
    /// round in progress; a timed-out round counts until it is reclaimed). Zeros for the
    /// collectives another worker owns; a sharded collective's are this worker's share. The slots are counted now, a walk over them: for
    /// exports, never per packet.
    pub fn collectives(&self) -> impl Iterator<Item = (u16, &CollCounters, u64)> {
        self.colls.iter().map(|c| (c.spec.id, &c.counters, c.slots_in_use()))
    }

    /// This worker's index.
    #[inline]
    pub fn me(&self) -> u16 {
        self.me
    }

    /// The worker that owns `p`'s collective (this one for unknown collectives: it answers
    /// with the NAK), or for a sharded collective the worker holding the slot of the chunk
    /// `frame`'s gradient header names (its tensor offset / `chunk_elements`; the chunk 0's
    /// owner when the header is cut short: that worker refuses it).
    #[inline]
    pub fn owner(&self, frame: &[u8], p: &Parsed) -> u16 {
        let i = self.index[p.grad_collective_id as usize] as usize;
        let owner = self.owners[i];
        match self.colls.get(i.wrapping_sub(1)) {
            Some(st) if st.share.ways > 1 => chunk_owner(st, frame, p, owner),
            _ => owner,
        }
    }

    /// Handles one gradient packet (`p` is its parse, `now_us` the appliance's clock in µs:
    /// the capture time in replays). The packet is consumed; results, resends and NAKs are sent
    /// through `io`; drops are counted in `counters` by reason.
    pub fn process<I: PacketIo>(
        &mut self,
        io: &mut I,
        counters: &mut Counters,
        in_port: u16,
        pkt: I::Buf,
        p: &Parsed,
        now_us: u64,
    ) {
        let frame = pkt.data();
        let c = match self.validate(frame, p) {
            Ok(c) => c,
            Err((reason, nak_reason)) => {
                counters.drop(reason);
                // A known collective's refusal is its own too (the index validation read).
                if let Some(i) = coll_drop_index(reason) {
                    if let Some(k) = (self.index[p.grad_collective_id as usize] as usize).checked_sub(1) {
                        self.colls[k].counters.drops[i] += 1;
                    }
                }
                if let Some(r) = nak_reason {
                    self.nak(io, in_port, frame, p, r, None, now_us, counters);
                }
                return;
            }
        };
        if c.probe {
            self.counters.probes += 1;
            self.colls[c.coll].counters.probes += 1;
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
            st.counters.slot_timeouts += 1;
        }
        match verdict {
            Verdict::Resend => {
                self.counters.resends += 1;
                st.counters.resends += 1;
                self.emit_result(io, c, true, Some(pkt), counters);
            }
            Verdict::Stale(expected) => {
                counters.drop(Reason::GradStaleRound);
                st.counters.drops[const { coll_drop_index(Reason::GradStaleRound).unwrap() }] += 1;
                self.nak(io, in_port, frame, p, NakReason::STALE_ROUND, Some(expected), now_us, counters);
            }
            Verdict::Duplicate => {
                counters.drop(Reason::GradDuplicate);
                st.counters.drops[const { coll_drop_index(Reason::GradDuplicate).unwrap() }] += 1;
            }
            Verdict::Fold { first, last } => {
                if first {
                    bm.fill(0);
                }
                bm[c.rank / 64] |= 1 << (c.rank % 64);
                // The straggler view: how long after the round's first contribution this came.
                let late = now_us.saturating_sub(st.slots[c.slot].first_us);
                if let Some(l) = st.late.get_mut(c.rank) {
                    l.record(late, last);
                }
                st.counters.folded += 1;
                st.counters.completed += last as u64;
                self.fold(c, &frame[p.grad_payload()], first, last);
                self.counters.folded += 1;
                if last {
                    self.counters.completed += 1;
                    self.emit_result(io, c, false, Some(pkt), counters);
                }
            }
        }
    }
}

/// [`Aggregator::owner`] for `st`, a collective sharded over `st.share.ways` workers (all of
/// them), whose chunk 0 `owner` holds.
#[inline(never)]
fn chunk_owner(st: &CollState, frame: &[u8], p: &Parsed, owner: u16) -> u16 {
    let Some(g) = frame.get(p.grad_offset as usize..).and_then(|h| GradientHeader::new_checked(h).ok()) else {
        return owner;
    };
    let chunk = g.tensor_offset() as u64 / st.chunk_div;
    ((owner as u64 + chunk) % st.ways_div) as u16
}

#[cfg(test)]
mod tests;
