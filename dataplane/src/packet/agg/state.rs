//! A collective's slots and their memory, as the worker that owns the collective holds them
//! (or, for a collective sharded over the workers, the worker's share of them): allocated whole
//! when the aggregator is built (spec section 3), never per packet.

use super::collective::{Carriage, Collective};
use super::context::AggContext;
use super::lines::Lines;
use super::slot::Slot;
use super::straggle::RankLateness;
use crate::wire::build;
use crate::wire::template;
use strength_reduce::StrengthReducedU64;

/// Which of a collective's chunks a worker holds the slots of: chunk `k` when
/// `k % ways == phase`, in its local slot `k / ways`. One way (phase 0) holds every chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Share {
    /// Workers the collective's chunks are spread over (1: one owner holds them all).
    pub(super) ways: u16,
    /// The residue of the chunks held here.
    pub(super) phase: u16,
}

impl Share {
    /// Every chunk.
    pub(super) const WHOLE: Share = Share { ways: 1, phase: 0 };

    /// How many of `chunks` chunks this share holds.
    pub(super) fn slots(self, chunks: u64) -> u64 {
        let (ways, phase) = (self.ways.max(1) as u64, self.phase as u64);
        if phase >= chunks {
            0
        } else {
            (chunks - phase).div_ceil(ways)
        }
    }
}

/// A collective's slots and their memory.
#[derive(Debug, Clone)]
pub(super) struct CollState {
    pub(super) spec: Collective,
    /// The chunks whose slots are held here (every chunk, unless the collective is sharded).
    pub(super) share: Share,
    /// `share.ways` as a divisor by multiplication (chunk index -> local slot).
    pub(super) ways_div: StrengthReducedU64,
    /// The slots held here, by local index (chunk `k` at `k / share.ways`).
    pub(super) slots: Vec<Slot>,
    /// Rank bitmaps of the rounds in progress, `words` u64 per slot.
    pub(super) bitmaps: Vec<u64>,
    pub(super) words: usize,
    /// Accumulators: `chunk` u32 lanes per slot, from a cache-line boundary (as are `result`
    /// and `ranks`: the kernels' 32-byte accesses then split no line).
    pub(super) acc: Lines<u32>,
    /// Kept results: `chunk * size` bytes per slot.
    pub(super) result: Lines<u8>,
    /// Deterministic mode: every rank's payload, `workers * chunk * size` bytes per slot (only
    /// the ranks that arrive before a lower one are copied here).
    pub(super) ranks: Lines<u8>,
    /// Deterministic mode, per slot: how many ranks (0, 1, ...) are folded into the accumulator,
    /// in rank order, in the current round.
    pub(super) folded: Vec<u32>,
    /// Per-member RoCEv2 PSN counters (section 6).
    pub(super) psn: Vec<u32>,
    /// Per slot: the kept result's checksum sum and CRC, computed once at completion and
    /// reused for every copy and every resend.
    pub(super) sums: Vec<build::PayloadSums>,
    /// Whether a result frame of this collective needs the payload's ones'-complement sum (the
    /// UDP carriage, or RoCEv2 to an IPv6 member: spec section 1) and its CRC (RoCEv2).
    pub(super) need_sum: bool,
    pub(super) need_crc: bool,
    /// [`build::PayloadSums::crc_factor`] of a full chunk's result payload and of the last
    /// chunk's (with their RoCEv2 pads), computed once here rather than per completion; zeros
    /// when no frame needs the CRC.
    pub(super) crc_factors: [u32; 2],
    /// Per-member headers of full-chunk RESULT frames (none for collectives another worker
    /// owns, or when the builder refused a member's frame: those go through the builder).
    pub(super) templates: Option<template::Templates>,
    /// `spec.chunk_elements` as a divisor by multiplication (validation divides every
    /// contribution's tensor offset by it; a hardware division costs tens of cycles).
    pub(super) chunk_div: StrengthReducedU64,
    /// log2 of the dtype's size (1, 2 or 4 bytes).
    pub(super) size_log2: u32,
    /// Per rank: how late its contributions come, how many rounds it completed (the straggler
    /// view; empty for collectives another worker owns; a sharded collective's share here).
    pub(super) late: Vec<RankLateness>,
    /// The collective's counters (zeros for collectives another worker owns; a sharded
    /// collective's share here).
    pub(super) counters: super::CollCounters,
}

impl CollState {
    pub(super) fn new(spec: Collective, share: Share) -> CollState {
        let slots = share.slots(spec.slots()) as usize;
        let chunk = spec.chunk_elements as usize;
        let size = spec.dtype.size();
        let n = spec.workers();
        let words = n.div_ceil(64);
        CollState {
            share,
            ways_div: StrengthReducedU64::new(share.ways.max(1) as u64),
            slots: vec![Slot::default(); slots],
            bitmaps: vec![0; slots * words],
            words,
            acc: Lines::zeroed(slots * chunk),
            result: Lines::zeroed(slots * chunk * size),
            ranks: if spec.deterministic { Lines::zeroed(slots * n * chunk * size) } else { Lines::empty() },
            folded: if spec.deterministic { vec![0; slots] } else { Vec::new() },
            psn: vec![0; n],
            sums: vec![build::PayloadSums::EMPTY; slots],
            need_sum: spec.carriage == Carriage::Udp || spec.members.iter().any(|m| m.ip.is_v6()),
            need_crc: spec.carriage == Carriage::Rocev2,
            crc_factors: crc_factors(&spec),
            templates: None,
            chunk_div: StrengthReducedU64::new((spec.chunk_elements as u64).max(1)),
            size_log2: size.trailing_zeros(),
            late: vec![RankLateness::default(); n],
            counters: Default::default(),
            spec,
        }
    }

    /// The state of a collective this worker owns (or the `share` of one sharded over the
    /// workers): [`CollState::new`] with the per-member headers of its full-chunk RESULT frames,
    /// answering from `ports`' addresses.
    pub(super) fn owned(
        spec: Collective,
        share: Share,
        ports: &[super::PortAddr],
        udp_port: u16,
        qpn: u32,
    ) -> CollState {
        let mut st = CollState::new(spec, share);
        let full = st.spec.chunk_elements as usize;
        let specs: Vec<build::FrameSpec> = (0..st.spec.workers())
            .map(|r| super::emit::result_spec(&st.spec, ports, udp_port, qpn, r, 0, 0, 0, full))
            .collect();
        st.templates = template::Templates::new(&specs, full * st.spec.dtype.size()).ok();
        st
    }

    /// Worker `me`'s state of `spec`, a collective owned by worker `owner` (for a sharded one,
    /// [`AggContext::sharded`], the owner of its chunk 0; chunk `k` is then worker
    /// `(owner + k) % workers`'s).
    pub(super) fn for_worker(ctx: &AggContext, spec: &Collective, owner: u16, me: u16) -> CollState {
        let workers = ctx.workers.max(1);
        let share = if ctx.sharded(spec) {
            Share { ways: workers, phase: (me + workers - owner % workers) % workers }
        } else if owner == me {
            Share::WHOLE
        } else {
            return CollState::unowned(spec.clone());
        };
        CollState::owned(spec.clone(), share, &ctx.ports, ctx.gradient_udp_port, ctx.appliance_qpn)
    }

    /// The state of a collective another worker owns: its spec only, no slot memory.
    pub(super) fn unowned(spec: Collective) -> CollState {
        CollState {
            share: Share::WHOLE,
            ways_div: StrengthReducedU64::new(1),
            slots: Vec::new(),
            bitmaps: Vec::new(),
            words: 0,
            acc: Lines::empty(),
            result: Lines::empty(),
            ranks: Lines::empty(),
            folded: Vec::new(),
            psn: Vec::new(),
            sums: Vec::new(),
            need_sum: false,
            need_crc: false,
            crc_factors: [0; 2],
            templates: None,
            chunk_div: StrengthReducedU64::new((spec.chunk_elements as u64).max(1)),
            size_log2: spec.dtype.size().trailing_zeros(),
            late: Vec::new(),
            counters: Default::default(),
            spec,
        }
    }

    /// Slots with a round in progress (a timed-out one counts until it is reclaimed): a walk
    /// over the slots, for exports.
    pub(super) fn slots_in_use(&self) -> u64 {
        self.slots.iter().filter(|s| s.active).count() as u64
    }

    /// [`build::PayloadSums`] of a result `payload` of this collective (a full chunk's or the
    /// last chunk's lanes): only the parts its frames need, the RoCEv2 pad in the CRC, the CRC's
    /// factor from [`CollState::crc_factors`].
    #[inline]
    pub(super) fn result_sums(&self, payload: &[u8]) -> build::PayloadSums {
        let pad = if self.spec.carriage == Carriage::Rocev2 { build::roce_pad(payload.len()) } else { 0 };
        let short = payload.len() != self.spec.chunk_elements as usize * self.spec.dtype.size();
        build::PayloadSums::with_factor(payload, pad, self.need_sum, self.need_crc, self.crc_factors[short as usize])
    }

    /// Lanes of chunk `k` (the tensor's last chunk may be shorter).
    pub(super) fn lanes(&self, k: usize) -> usize {
        let chunk = self.spec.chunk_elements as u64;
        (self.spec.tensor_elements - k as u64 * chunk).min(chunk) as usize
    }
}

/// [`CollState::crc_factors`] of `spec`: a full chunk's and the last chunk's.
fn crc_factors(spec: &Collective) -> [u32; 2] {
    if spec.carriage != Carriage::Rocev2 {
        return [0; 2];
    }
    let size = spec.dtype.size();
    let chunk = spec.chunk_elements as u64;
    let last = spec.tensor_elements - (spec.slots() - 1) * chunk;
    [chunk, last].map(|lanes| {
        let len = lanes as usize * size;
        build::PayloadSums::crc_factor(len, build::roce_pad(len))
    })
}
