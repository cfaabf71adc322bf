//! The AllReduce workload model: what every worker sends, when, and what the appliance must
//! answer (spec `gradient-protocol.md`, sections 2 to 4).
//!
//! A [`Workload`] is built from [`Params`] by [`Workload::generate`]. It is independent of how
//! the packets leave: the pcap writer ([`crate::pcap`]) and a live sender walk the same
//! [`Workload::events`] and build frames with [`crate::frame`].
//!
//! # Schedule
//!
//! Rounds are sent one after the other, round `first_round + i` (mod 2^32) for `i` in
//! `0..rounds`; every event of a round (retransmissions included) comes before the first event
//! of the next, so a slot's next round never starts while the previous one is still in progress
//! (which the appliance would refuse as premature, rule 4). Within a round every worker sends
//! every chunk once, one contribution every `gap_us` µs: chunk by chunk, ranks in order within a
//! chunk, or in a random order across ranks and chunks with `shuffle`. Impairments, each a
//! fraction of the round's `workers x slots` contributions (rounded to the nearest count, chosen
//! without repetition):
//!
//! - `drop`: the contribution is lost in the network (no event at its send time); the worker
//!   sends it again with flag RETRANSMIT `retransmit_delay_us` µs later, so every
//!   (round, offset, rank) is still present at least once.
//! - `duplicate`: the network delivers a contribution twice: an identical copy (same flags, same
//!   RoCEv2 PSN) right after the original, at the same time. Only contributions that were not
//!   dropped are duplicated.
//! - `late`: after the round's last contribution, a worker sends one of its contributions of
//!   that round again with RETRANSMIT, as if it had lost the result; the appliance answers it
//!   with the kept result, unicast (rule 3).
//!
//! # Values
//!
//! The payloads and the reference results come from the value model of [`crate::values`], the
//! one the live generator uses too, with [`Params::values`] choosing the kind: `normal` (the
//! default: fresh N(0, 1)-like tensors every round, the reference reduced in rank order with
//! [`Kernels::scalar`], which is what a `deterministic = true` appliance must send bit for bit,
//! and any appliance for i32, max and min) or `exact` (the period-61 tables of small integers,
//! whose reference any appliance must send bit for bit, whatever its fold order).

use crate::values::{mix, Model, ValueKind};
use dataplane::agg::collective::Carriage;
#[cfg(doc)]
use dataplane::agg::kernels::Kernels;
use dataplane::wire::gradient::Flags;
use dataplane::wire::gradient::{Dtype, Op};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_pcg::Pcg64;
use std::fmt;

/// IP family of the workers and the appliance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

impl Family {
    /// `"v4"` or `"v6"`.
    pub fn name(self) -> &'static str {
        match self {
            Family::V4 => "v4",
            Family::V6 => "v6",
        }
    }
}

/// The config name of a carriage (spec section 3): `"udp"` or `"rocev2"`.
pub fn carriage_name(c: Carriage) -> &'static str {
    match c {
        Carriage::Udp => "udp",
        Carriage::Rocev2 => "rocev2",
    }
}

/// Network impairments of a workload; fractions are of each round's `workers x slots`
/// contributions, in 0.0..=1.0.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Impairments {
    /// Send each round's contributions in a random order across ranks and chunks.
    pub shuffle: bool,
    /// Fraction of contributions delivered twice (identical copies).
    pub duplicate: f64,
    /// Fraction of contributions lost and retransmitted (flag RETRANSMIT) after
    /// `retransmit_delay_us`.
    pub drop: f64,
    /// Fraction of contributions sent again (flag RETRANSMIT) after their round completed.
    pub late: f64,
    /// Delay (µs) between a lost contribution's send time and its retransmission.
    pub retransmit_delay_us: u64,
}

impl Default for Impairments {
    fn default() -> Self {
        Impairments { shuffle: false, duplicate: 0.0, drop: 0.0, late: 0.0, retransmit_delay_us: 200 }
    }
}

/// The parameters of an AllReduce workload.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    /// Number of workers (ranks 0..workers-1), 1..=[`MAX_WORKERS`].
    pub workers: u16,
    /// Elements in the tensor (at most 2^32: offsets are u32 on the wire).
    pub tensor_elements: u64,
    /// Elements per chunk (one packet); the last chunk may be shorter.
    pub chunk_elements: u32,
    /// Lane type.
    pub dtype: Dtype,
    /// Reduction.
    pub op: Op,
    /// UDP or RoCEv2 UD carriage.
    pub carriage: Carriage,
    /// IPv4 or IPv6.
    pub family: Family,
    /// An 802.1Q VID (1..=4094) on every contribution and in every member's config.
    pub vlan: Option<u16>,
    /// Number of rounds (at least 1).
    pub rounds: u32,
    /// The first round's number; later rounds count up from it modulo 2^32.
    pub first_round: u32,
    /// The collective id.
    pub collective_id: u16,
    /// Seed of every random choice (values and schedule).
    pub seed: u64,
    /// Time (µs) between two consecutive sends.
    pub gap_us: u64,
    /// Written to the appliance config: reduce in rank order (rule 7), so that float results
    /// equal the reference bit for bit.
    pub deterministic: bool,
    /// Network impairments.
    pub impair: Impairments,
    /// The values the ranks send ([`crate::values`]): `Normal` (default) or `Exact`.
    pub values: ValueKind,
}

/// The largest number of workers the address plan allows (IPv4 10.0.0.1 to 10.0.0.253; the
/// appliance is 10.0.0.254).
pub const MAX_WORKERS: u16 = 253;

/// The largest chunk payload (bytes) the appliance accepts (a 9000-byte jumbo frame).
pub const MAX_CHUNK_BYTES: u64 = 8900;

impl Default for Params {
    fn default() -> Self {
        Params {
            workers: 4,
            tensor_elements: 4096,
            chunk_elements: 256,
            dtype: Dtype::F32,
            op: Op::Sum,
            carriage: Carriage::Udp,
            family: Family::V4,
            vlan: None,
            rounds: 1,
            first_round: 0,
            collective_id: 1,
            seed: 1,
            gap_us: 1,
            deterministic: true,
            impair: Impairments::default(),
            values: ValueKind::Normal,
        }
    }
}

/// The latest time (µs from the workload's time 0) a packet may be sent at: classic pcap
/// records stamp whole seconds in 32 bits, and time 0 is [`EPOCH_S`](crate::pcap::EPOCH_S) s
/// after the Unix epoch, so about 2.59e15 µs (82 years) remain.
pub const MAX_TIME_US: u64 = (u32::MAX as u64 - crate::pcap::EPOCH_S) * 1_000_000 + 999_999;

/// A parameter out of range; the message names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamError(pub String);

impl fmt::Display for ParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ParamError {}

impl Params {
    /// Checks every parameter's range.
    ///
    /// # Errors
    /// The first parameter out of range, named as on the command line.
    pub fn validate(&self) -> Result<(), ParamError> {
        let bad = |m: String| Err(ParamError(m));
        if self.workers == 0 || self.workers > MAX_WORKERS {
            return bad(format!("--workers: expected 1..={MAX_WORKERS}, found {}", self.workers));
        }
        if self.tensor_elements == 0 || self.tensor_elements > 1 << 32 {
            return bad(format!("--tensor-elements: expected 1..=2^32, found {}", self.tensor_elements));
        }
        if self.chunk_elements == 0 {
            return bad("--chunk-elements: expected at least 1".into());
        }
        if self.chunk_bytes() > MAX_CHUNK_BYTES {
            return bad(format!(
                "--chunk-elements: a chunk of {} {} lanes is {} bytes, more than {MAX_CHUNK_BYTES}",
                self.chunk_elements,
                self.dtype.name(),
                self.chunk_bytes()
            ));
        }
        if let Some(v) = self.vlan {
            if v == 0 || v > 4094 {
                return bad(format!("--vlan: expected 1..=4094, found {v}"));
            }
        }
        if self.rounds == 0 {
            return bad("--rounds: expected at least 1".into());
        }
        for (name, f) in
            [("--duplicate", self.impair.duplicate), ("--drop", self.impair.drop), ("--late", self.impair.late)]
        {
            if !(0.0..=1.0).contains(&f) {
                return bad(format!("{name}: expected a fraction in 0..=1, found {f}"));
            }
        }
        for (name, us) in [("--gap-us", self.gap_us), ("--retransmit-delay-us", self.impair.retransmit_delay_us)] {
            if us > MAX_TIME_US {
                return bad(format!(
                    "{name}: expected at most {MAX_TIME_US} µs (the last time a classic pcap's 32-bit seconds \
                     hold after the workload's start), found {us}"
                ));
            }
        }
        Ok(())
    }

    /// Bytes of a full chunk's payload: `chunk_elements x dtype size`.
    pub fn chunk_bytes(&self) -> u64 {
        self.chunk_elements as u64 * self.dtype.size() as u64
    }

    /// Number of slots (chunks): `ceil(tensor_elements / chunk_elements)`.
    pub fn slots(&self) -> u64 {
        self.tensor_elements.div_ceil(self.chunk_elements as u64)
    }

    /// Chunk `slot`: its first element's offset and its element count.
    pub fn chunk(&self, slot: u64) -> (u64, u32) {
        let off = slot * self.chunk_elements as u64;
        let count = (self.tensor_elements - off).min(self.chunk_elements as u64) as u32;
        (off, count)
    }

    /// The number of the `i`-th round: `first_round + i` modulo 2^32.
    pub fn round(&self, i: u32) -> u32 {
        self.first_round.wrapping_add(i)
    }

    /// Bytes of a whole tensor: `tensor_elements x dtype size`.
    pub fn tensor_bytes(&self) -> usize {
        self.tensor_elements as usize * self.dtype.size()
    }

    /// The value model of the workload: its kind, seed, workers, dtype, op and tensor.
    pub fn model(&self) -> Model {
        Model {
            kind: self.values,
            seed: self.seed,
            workers: self.workers,
            dtype: self.dtype,
            op: self.op,
            tensor_elements: self.tensor_elements,
        }
    }
}

/// Why an event is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// The contribution's first (and normally only) transmission.
    First,
    /// A network duplicate of a `First` event (identical bytes, same PSN), right after it.
    Duplicate,
    /// The worker's resend of a contribution the network lost (flag RETRANSMIT).
    Retransmit,
    /// A resend after the round completed (flag RETRANSMIT): the appliance answers with the kept
    /// result, unicast.
    Late,
}

/// One packet a worker sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// Send time (µs from the start of the workload).
    pub time_us: u64,
    /// The sending worker's rank.
    pub rank: u16,
    /// Index of the round (0..rounds); the header's round is [`Params::round`] of it.
    pub round_index: u32,
    /// The header's round field.
    pub round: u32,
    /// The chunk's offset in the tensor (elements).
    pub offset: u32,
    /// The chunk's length (elements); the payload is `count x dtype size` bytes.
    pub count: u32,
    /// Header flags: 0 or [`Flags::RETRANSMIT`].
    pub flags: u8,
    /// Why it is sent.
    pub kind: Kind,
    /// The RoCEv2 BTH PSN: a per-worker counter from 0, advanced by every packet the worker
    /// sends (retransmissions included); a network duplicate repeats its original's.
    pub psn: u32,
}

/// Counts of a workload's events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// `First` events (contributions that were not dropped).
    pub first: u64,
    /// Contributions lost in the network (each followed by one `Retransmit`).
    pub dropped: u64,
    /// `Retransmit` events.
    pub retransmits: u64,
    /// `Duplicate` events.
    pub duplicates: u64,
    /// `Late` events.
    pub late: u64,
}

/// A generated workload: its parameters and the ordered packets of every worker.
#[derive(Debug, Clone)]
pub struct Workload {
    /// The parameters.
    pub params: Params,
    /// Every packet, ordered by send time (ties keep the order in which they are sent).
    pub events: Vec<Event>,
    /// Counts by kind.
    pub counts: Counts,
}

/// Number of items out of `total` for a fraction, rounded to nearest.
fn fraction_of(f: f64, total: usize) -> usize {
    ((f * total as f64).round() as usize).min(total)
}

/// `n` distinct indices of `0..len`, chosen at random.
fn pick(rng: &mut Pcg64, len: usize, n: usize) -> Vec<bool> {
    let mut idx: Vec<usize> = (0..len).collect();
    idx.shuffle(rng);
    let mut set = vec![false; len];
    for &i in &idx[..n.min(len)] {
        set[i] = true;
    }
    set
}

impl Workload {
    /// Generates the schedule of `params` (see the module docs).
    ///
    /// # Errors
    /// A parameter out of range ([`Params::validate`]), or a schedule whose last packet would be
    /// sent after [`MAX_TIME_US`] (more rounds, slots, workers, `gap_us` or
    /// `retransmit_delay_us` than a pcap's timestamps span).
    pub fn generate(params: Params) -> Result<Workload, ParamError> {
        params.validate()?;
        // Every time below is at most the first one beyond MAX_TIME_US: each sum and product is
        // checked against it, so none wraps.
        let too_late = || {
            ParamError(format!(
                "--rounds, --gap-us and --retransmit-delay-us: the schedule runs past {MAX_TIME_US} µs (the last \
                 time a classic pcap's 32-bit seconds hold after the workload's start): make them smaller"
            ))
        };
        let at = |t: Option<u64>| t.filter(|t| *t <= MAX_TIME_US).ok_or_else(too_late);
        let p = &params;
        let mut rng = Pcg64::seed_from_u64(mix(p.seed ^ mix(0x5c4e_d01e)));
        let slots = p.slots();
        let n = p.workers as usize;
        let mut events: Vec<Event> = Vec::new();
        let mut counts = Counts::default();
        let mut t = 0u64;
        let imp = &p.impair;
        for ri in 0..p.rounds {
            let round = p.round(ri);
            let mut order: Vec<(u16, u64)> = (0..slots).flat_map(|s| (0..p.workers).map(move |k| (k, s))).collect();
            if imp.shuffle {
                order.shuffle(&mut rng);
            }
            let total = order.len();
            let dropped = pick(&mut rng, total, fraction_of(imp.drop, total));
            let kept: Vec<usize> = (0..total).filter(|&i| !dropped[i]).collect();
            let dup_pick = pick(&mut rng, kept.len(), fraction_of(imp.duplicate, total).min(kept.len()));
            let mut dup = vec![false; total];
            for (j, &i) in kept.iter().enumerate() {
                dup[i] = dup_pick[j];
            }
            let ev = |time_us, rank, slot, flags, kind| {
                let (off, count) = p.chunk(slot);
                Event { time_us, rank, round_index: ri, round, offset: off as u32, count, flags, kind, psn: 0 }
            };
            let mut round_events = Vec::with_capacity(total + total / 8);
            for (i, &(rank, slot)) in order.iter().enumerate() {
                let ti = at((i as u64).checked_mul(p.gap_us).and_then(|d| d.checked_add(t)))?;
                if dropped[i] {
                    counts.dropped += 1;
                    counts.retransmits += 1;
                    round_events.push(ev(
                        at(ti.checked_add(imp.retransmit_delay_us))?,
                        rank,
                        slot,
                        Flags::RETRANSMIT,
                        Kind::Retransmit,
                    ));
                } else {
                    counts.first += 1;
                    round_events.push(ev(ti, rank, slot, 0, Kind::First));
                    if dup[i] {
                        counts.duplicates += 1;
                        round_events.push(ev(ti, rank, slot, 0, Kind::Duplicate));
                    }
                }
            }
            // Stable: a duplicate stays right behind its original.
            round_events.sort_by_key(|e| e.time_us);
            let mut end = round_events.last().map_or(t, |e| e.time_us);
            let late = pick(&mut rng, total, fraction_of(imp.late, total));
            for (i, &(rank, slot)) in order.iter().enumerate() {
                if late[i] {
                    end = at(end.checked_add(p.gap_us))?;
                    counts.late += 1;
                    round_events.push(ev(end, rank, slot, Flags::RETRANSMIT, Kind::Late));
                }
            }
            events.extend(round_events);
            // The next round's start: not a packet's time (checked when one is sent at it).
            t = end.saturating_add(p.gap_us);
        }
        // PSNs: per worker in send order; a duplicate directly follows its original.
        let mut next = vec![0u32; n];
        for e in &mut events {
            let r = e.rank as usize;
            if e.kind == Kind::Duplicate {
                e.psn = next[r].wrapping_sub(1) & 0xff_ffff;
            } else {
                e.psn = next[r] & 0xff_ffff;
                next[r] = next[r].wrapping_add(1);
            }
        }
        Ok(Workload { params, events, counts })
    }

    /// The tensor of `rank` in round index `round_index` (0..rounds): `tensor_elements` lanes,
    /// little-endian, `tensor_elements x dtype size` bytes, from the value model
    /// ([`Params::model`], [`Model::tensor`] of the header's round [`Params::round`]).
    pub fn tensor(&self, round_index: u32, rank: u16) -> Vec<u8> {
        self.params.model().tensor(self.params.round(round_index), rank)
    }

    /// Every rank's tensor of round index `round_index`, by rank.
    pub fn tensors(&self, round_index: u32) -> Vec<Vec<u8>> {
        (0..self.params.workers).map(|k| self.tensor(round_index, k)).collect()
    }

    /// The bytes of chunk (`offset`, `count`) (elements) within a whole tensor.
    pub fn chunk_of<'a>(&self, tensor: &'a [u8], offset: u32, count: u32) -> &'a [u8] {
        let s = self.params.dtype.size();
        &tensor[offset as usize * s..(offset as usize + count as usize) * s]
    }

    /// The reference result of chunk (`offset`, `count`) (elements) given every rank's tensor
    /// (`tensors[k]` is rank k's): reduced in rank order with [`Kernels::scalar`]
    /// ([`Model::reference_chunk`]).
    pub fn reference_chunk(&self, tensors: &[Vec<u8>], offset: u32, count: u32) -> Vec<u8> {
        self.params.model().reference_chunk(tensors, offset, count)
    }

    /// The reference results of round index `round_index`, per slot in offset order:
    /// (offset in elements, element count, payload bytes).
    pub fn reference(&self, round_index: u32) -> Vec<(u32, u32, Vec<u8>)> {
        let tensors = self.tensors(round_index);
        (0..self.params.slots())
            .map(|s| {
                let (off, count) = self.params.chunk(s);
                (off as u32, count, self.reference_chunk(&tensors, off as u32, count))
            })
            .collect()
    }

    /// Time (µs) of the last event.
    pub fn duration_us(&self) -> u64 {
        self.events.last().map_or(0, |e| e.time_us)
    }

    /// The longest time (µs) from a round's first event to its last.
    pub fn longest_round_us(&self) -> u64 {
        let mut longest = 0;
        let mut start: Option<(u32, u64)> = None;
        for e in &self.events {
            match start {
                Some((r, t0)) if r == e.round_index => longest = longest.max(e.time_us - t0),
                _ => start = Some((e.round_index, e.time_us)),
            }
        }
        longest
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn params(workers: u16, tensor: u64, chunk: u32) -> Params {
        Params { workers, tensor_elements: tensor, chunk_elements: chunk, ..Params::default() }
    }

    #[test]
    fn plain_schedule_is_chunk_by_chunk_ranks_in_order() {
        let w =
            Workload::generate(Params { rounds: 2, first_round: 0xffff_ffff, gap_us: 3, ..params(3, 10, 4) }).unwrap();
        assert_eq!(w.events.len(), 2 * 3 * 3);
        let first: Vec<(u16, u32, u32, u64)> =
            w.events[..4].iter().map(|e| (e.rank, e.offset, e.count, e.time_us)).collect();
        assert_eq!(first, [(0, 0, 4, 0), (1, 0, 4, 3), (2, 0, 4, 6), (0, 4, 4, 9)]);
        // The last chunk is shorter; rounds wrap modulo 2^32.
        assert_eq!((w.events[8].offset, w.events[8].count), (8, 2));
        assert_eq!(w.events[0].round, 0xffff_ffff);
        assert_eq!(w.events[9].round, 0);
        assert!(w.events[9].time_us > w.events[8].time_us);
        assert!(w.events.iter().all(|e| e.flags == 0 && e.kind == Kind::First));
        // PSNs count per worker from 0.
        let psns: Vec<u32> = w.events.iter().filter(|e| e.rank == 1).map(|e| e.psn).collect();
        assert_eq!(psns, [0, 1, 2, 3, 4, 5]);
    }

    /// Times beyond what a classic pcap stamps are refused by name, never wrapped: a
    /// retransmission delay of u64::MAX would otherwise land its packets in the first µs.
    #[test]
    fn times_beyond_the_pcap_range_are_refused() {
        assert_eq!(MAX_TIME_US, 2_594_967_295_999_999);
        let drop = |delay: u64| Params {
            impair: Impairments { drop: 0.5, retransmit_delay_us: delay, ..Impairments::default() },
            ..params(2, 8, 4)
        };
        let e = Workload::generate(drop(u64::MAX)).unwrap_err();
        assert_eq!(
            e.0,
            "--retransmit-delay-us: expected at most 2594967295999999 µs (the last time a classic pcap's 32-bit \
             seconds hold after the workload's start), found 18446744073709551615"
        );
        assert!(Workload::generate(drop(4_294_967_296_000_000)).unwrap_err().0.starts_with("--retransmit-delay-us: "));
        let e = Workload::generate(Params { gap_us: MAX_TIME_US + 1, ..params(2, 8, 4) }).unwrap_err();
        assert!(e.0.starts_with("--gap-us: expected at most 2594967295999999 µs"), "{e}");
        // Each in range, the schedule beyond it: refused as a whole.
        let e = Workload::generate(drop(MAX_TIME_US)).unwrap_err();
        assert!(
            e.0.starts_with("--rounds, --gap-us and --retransmit-delay-us: the schedule runs past 2594967295999999 µs"),
            "{e}"
        );
        let e = Workload::generate(Params { gap_us: MAX_TIME_US / 2, ..params(2, 8, 4) }).unwrap_err();
        assert!(e.0.contains("the schedule runs past"), "{e}");
        // At the edge: the last retransmission lands exactly on it.
        let delay = MAX_TIME_US - 3;
        let w = Workload::generate(drop(delay)).unwrap();
        let last = w.events.iter().map(|e| e.time_us).max().unwrap();
        assert!(last <= MAX_TIME_US && last >= delay, "{last}");
        assert!(w.events.iter().filter(|e| e.kind == Kind::Retransmit).all(|e| e.time_us >= delay));
    }

    #[test]
    fn drops_are_retransmitted_so_every_slot_completes() {
        let p = Params {
            rounds: 3,
            impair: Impairments { drop: 0.2, shuffle: true, ..Impairments::default() },
            ..params(5, 1000, 64)
        };
        let w = Workload::generate(p.clone()).unwrap();
        let per_round = 5 * p.slots() as usize;
        assert_eq!(w.counts.dropped as usize, 3 * fraction_of(0.2, per_round));
        assert_eq!(w.counts.retransmits, w.counts.dropped);
        let mut seen: HashMap<(u32, u32, u16), usize> = HashMap::new();
        for e in &w.events {
            *seen.entry((e.round, e.offset, e.rank)).or_default() += 1;
            assert_eq!(e.flags == Flags::RETRANSMIT, e.kind == Kind::Retransmit);
        }
        assert_eq!(seen.len(), 3 * per_round, "every (round, offset, rank) present");
        assert!(seen.values().all(|&c| c == 1));
        // Rounds never overlap: every event of round i precedes every event of round i + 1.
        for pair in w.events.windows(2) {
            assert!(pair[0].round_index <= pair[1].round_index);
            assert!(pair[0].time_us <= pair[1].time_us);
        }
    }

    #[test]
    fn duplicates_and_late_resends_have_exact_counts() {
        let p = Params {
            rounds: 2,
            impair: Impairments { duplicate: 0.1, late: 0.05, drop: 0.1, shuffle: true, ..Impairments::default() },
            ..params(4, 4096, 128)
        };
        let w = Workload::generate(p.clone()).unwrap();
        let per_round = 4 * 32;
        let (d, l) = (fraction_of(0.1, per_round) as u64, fraction_of(0.05, per_round) as u64);
        assert_eq!((w.counts.duplicates, w.counts.late), (2 * d, 2 * l));
        let count = |k| w.events.iter().filter(|e| e.kind == k).count() as u64;
        assert_eq!(count(Kind::Duplicate), 2 * d);
        assert_eq!(count(Kind::Late), 2 * l);
        assert_eq!(count(Kind::First) + count(Kind::Retransmit), 2 * per_round as u64);
        for (i, e) in w.events.iter().enumerate() {
            match e.kind {
                Kind::Duplicate => {
                    // Right after its original, identical.
                    let o = w.events[..i].iter().rev().find(|o| o.rank == e.rank).unwrap();
                    assert_eq!(o.kind, Kind::First);
                    assert_eq!(
                        (o.round, o.offset, o.psn, o.flags, o.time_us),
                        (e.round, e.offset, e.psn, 0, e.time_us)
                    );
                }
                Kind::Late => {
                    assert_eq!(e.flags, Flags::RETRANSMIT);
                    // After every First/Retransmit of its round.
                    assert!(w.events[i..].iter().all(|o| o.round_index != e.round_index || o.kind == Kind::Late));
                }
                _ => {}
            }
        }
        // Non-duplicate PSNs of each worker are 0, 1, 2, ... in order.
        for k in 0..4 {
            let psns: Vec<u32> =
                w.events.iter().filter(|e| e.rank == k && e.kind != Kind::Duplicate).map(|e| e.psn).collect();
            assert_eq!(psns, (0..psns.len() as u32).collect::<Vec<_>>());
        }
    }

    #[test]
    fn same_seed_same_workload_other_seed_other_values() {
        let p = Params { impair: Impairments { shuffle: true, ..Impairments::default() }, ..params(3, 100, 10) };
        let a = Workload::generate(p.clone()).unwrap();
        let b = Workload::generate(p.clone()).unwrap();
        assert_eq!(a.events, b.events);
        assert_eq!(a.tensor(0, 2), b.tensor(0, 2));
        let c = Workload::generate(Params { seed: 2, ..p }).unwrap();
        assert_ne!(a.tensor(0, 2), c.tensor(0, 2));
        assert_ne!(a.tensor(0, 2), a.tensor(0, 1), "ranks differ");
        assert_ne!(a.tensor(0, 2), Workload::generate(Params { rounds: 2, ..a.params.clone() }).unwrap().tensor(1, 2));
    }

    #[test]
    fn values_have_moderate_magnitudes_and_some_exact_lanes() {
        for dtype in [Dtype::F32, Dtype::F16, Dtype::Bf16] {
            let w = Workload::generate(Params { dtype, ..params(1, 4000, 100) }).unwrap();
            let t = w.tensor(0, 0);
            let vals: Vec<f32> = match dtype {
                Dtype::F32 => t.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect(),
                Dtype::F16 => t.chunks(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
                _ => t.chunks(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
            };
            assert!(vals.iter().all(|v| v.is_finite() && v.abs() <= 4.0), "{dtype:?}");
            let mean = vals.iter().sum::<f32>() / vals.len() as f32;
            let var = vals.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / vals.len() as f32;
            assert!(mean.abs() < 0.1 && (0.8..1.3).contains(&var), "{dtype:?} mean {mean} var {var}");
            let exact = vals.iter().filter(|v| [1.0, -1.0, 0.5, 2.0, -0.25, 3.0].contains(*v)).count();
            assert!(exact > 200, "{dtype:?}: {exact} exact lanes");
            assert!(vals.iter().any(|v| *v == 0.0 && v.is_sign_negative()));
        }
        let w = Workload::generate(Params { dtype: Dtype::I32, ..params(1, 1000, 100) }).unwrap();
        let t = w.tensor(0, 0);
        let v: Vec<i32> = t.chunks(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect();
        assert!(v.iter().any(|&x| x < -(1 << 30)) && v.iter().any(|&x| x > 1 << 30));
    }

    /// Rank tensors replaced by hand-picked values: the reference equals hand-computed lanes.
    #[test]
    fn reference_of_a_tiny_workload_is_the_hand_computed_one() {
        let le_f32 = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let le_i32 = |v: &[i32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let w = |dtype, op| Workload::generate(Params { dtype, op, ..params(2, 4, 2) }).unwrap();
        let t = vec![le_f32(&[1.5, -0.0, 1e30, -2.0]), le_f32(&[0.25, -0.0, 1e30, 3.0])];
        let s = w(Dtype::F32, Op::Sum);
        assert_eq!(s.reference_chunk(&t, 0, 2), le_f32(&[1.75, -0.0]));
        assert_eq!(s.reference_chunk(&t, 2, 2), le_f32(&[2e30, 1.0]));
        let m = w(Dtype::F32, Op::Max);
        assert_eq!(m.reference_chunk(&t, 0, 4), le_f32(&[1.5, -0.0, 1e30, 3.0]));
        let t = vec![le_i32(&[i32::MAX, -5, 7, 0]), le_i32(&[1, -6, -7, 9])];
        let i = w(Dtype::I32, Op::Sum);
        assert_eq!(i.reference_chunk(&t, 0, 4), le_i32(&[i32::MIN, -11, 0, 9]));
        let m = w(Dtype::I32, Op::Min);
        assert_eq!(m.reference_chunk(&t, 0, 4), le_i32(&[1, -6, -7, 0]));
        // f16: 1.0 + 2^-11 is a tie between 1.0 and 1.0 + 2^-10 on the f16 grid: rounded once,
        // to even (1.0); the two halves of 2^-11 accumulate exactly in f32 first.
        let h = |v: f32| half::f16::from_f32(v).to_le_bytes();
        let t = vec![[h(1.0), h(0.5)].concat(), [h(2f32.powi(-11)), h(-0.25)].concat()];
        let f = w(Dtype::F16, Op::Sum);
        assert_eq!(f.reference_chunk(&t, 0, 2), [h(1.0), h(0.25)].concat());
        // And the generated tensors: the reference of rank 0 + rank 1 lane by lane.
        let s = w(Dtype::F32, Op::Sum);
        let ts = s.tensors(0);
        let lanes = |b: &[u8]| b.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect::<Vec<_>>();
        let want: Vec<f32> = lanes(&ts[0]).iter().zip(lanes(&ts[1])).map(|(a, b)| a + b).collect();
        let got: Vec<u8> = s.reference(0).into_iter().flat_map(|(_, _, b)| b).collect();
        assert_eq!(got, le_f32(&want));
    }

    #[test]
    fn out_of_range_parameters_are_refused() {
        for p in [
            params(0, 10, 1),
            params(254, 10, 1),
            params(2, 0, 1),
            params(2, 10, 0),
            params(2, 10_000, 4000),
            Params { vlan: Some(4095), ..params(2, 10, 1) },
            Params { rounds: 0, ..params(2, 10, 1) },
            Params { impair: Impairments { drop: 1.5, ..Impairments::default() }, ..params(2, 10, 1) },
        ] {
            assert!(Workload::generate(p).is_err());
        }
    }
}
