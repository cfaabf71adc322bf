//! Egress scheduling for one port: up to [`MAX_CLASSES`] traffic classes, each a byte-bounded
//! FIFO with optional queue-depth ECN marking, served by strict priority or DWRR under a port
//! shaper.
//!
//! ```text
//!  enqueue(class, item, now) ─► [tail drop] ─► [RED: pass / CE / red_drop] ─► class FIFO ─┐
//!                                                                                        │
//!  dequeue(now, budget) ◄─ shaper (rate, 24 B per frame) ◄─ strict priority | DWRR ◄─────┘
//! ```
//!
//! - Classes: `0..classes`. Strict priority follows IEEE 802.1Q (8.6.8.1): the **highest class
//!   number is served first** (class 7 before class 0), so PCP 7 traffic mapped to class 7 has
//!   the highest priority. (`rte_sched` numbers the other way: its TC0 is the highest.)
//! - DWRR (`dwrr.rs`): byte weights per class, `weight × dwrr_quantum_bytes` per turn, costs in
//!   wire bytes (frame + 24).
//! - Shaper (`shaper.rs`): a token bucket at `rate_bytes_per_sec`, each frame costing its length
//!   without FCS plus [`FRAME_OVERHEAD`] (24) bytes; [`Scheduler::next_departure`] tells a
//!   virtual clock when the next packet may leave.
//! - ECN ([`red`], [`ecn`]): per-class Kmin/Kmax/Pmax on the instantaneous or averaged depth;
//!   CE on ECT packets, drop of Not-ECT ones; at enqueue (default) or at dequeue
//!   ([`MarkPoint`]).
//! - Counters per class ([`ClassCounters`]) and, optionally, depth and sojourn histograms
//!   ([`ClassHistograms`]).
//!
//! Time is an integer tick count at `hz` ticks per second (the TSC live; 1e9 for a virtual ns
//! clock). Nothing allocates after [`Scheduler::new`]: each class's ring holds
//! `capacity_pkts` entries from the start. No locks: one scheduler per port, on the lcore that
//! owns it (other workers reach it over rings: see `docs/scheduling.md`).

pub mod classify;
pub mod counters;
mod dwrr;
pub mod ecn;
mod queue;
pub mod red;
mod shaper;

#[cfg(test)]
mod tests;

pub use classify::ClassMap;
pub use counters::{ClassCounters, ClassHistograms, PktBytes, PortCounters};
pub use ecn::{mark_frame_ce, mark_frame_ce_in, CeOutcome};
pub use red::{RedConfig, RedVerdict, P_ONE};

use crate::buf::PacketBuf;
use crate::stats::Reason;
use dwrr::Dwrr;
use queue::{ClassQueue, Entry};
use red::{EcnRng, Red};
use shaper::Shaper;

/// The longest sojourn the histograms tell apart, in seconds (a day: a queue behind a very slow
/// shaper can hold a packet for minutes); a longer one is recorded as a day.
pub const MAX_SOJOURN_S: u64 = 86_400;

pub use crate::meta::MAX_CLASSES;
/// Bytes a frame occupies on the wire beyond its length without FCS: FCS 4, preamble and SFD
/// 8, inter-frame gap 12 (IEEE 802.3; `rte_sched`'s default `frame_overhead`).
pub const FRAME_OVERHEAD: u32 = 24;

/// What the scheduler needs from a queued item.
pub trait SchedItem {
    /// The frame's length in bytes (every segment), without FCS.
    fn frame_len(&self) -> u32;
    /// Sets CE if the packet is ECN-capable (RFC 3168 section 5) and says what it found.
    fn mark_ce(&mut self) -> CeOutcome;
}

/// Any packet buffer: its data length, and CE set in its bytes by [`mark_frame_ce`].
impl<B: PacketBuf> SchedItem for B {
    #[inline]
    fn frame_len(&self) -> u32 {
        self.total_len() as u32
    }
    #[inline]
    fn mark_ce(&mut self) -> CeOutcome {
        let len = self.total_len();
        mark_frame_ce_in(self.data_mut(), len)
    }
}

/// How the port chooses between classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Policy {
    /// The highest non-empty class first (802.1Q strict priority).
    #[default]
    StrictPriority,
    /// Deficit weighted round robin with the classes' weights.
    Dwrr,
}

/// Where RED samples the depth and marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MarkPoint {
    /// On arrival, with the depth ahead of the packet (RED as defined by Floyd & Jacobson, and
    /// `rte_sched`): a Not-ECT packet that RED selects is dropped before it takes buffer space,
    /// and every drop decision (tail or RED) is taken at one point.
    #[default]
    Enqueue,
    /// On departure, with the depth left behind the packet: the CE mark reflects the queue as
    /// the packet leaves it, so the signal reaches the receiver one queueing delay sooner.
    Dequeue,
}

/// One class's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassConfig {
    /// Capacity in bytes (frame lengths without FCS); a frame that would exceed it is a
    /// tail drop.
    pub capacity_bytes: u64,
    /// Capacity in packets (size it to the mempool); the ring is allocated with it.
    pub capacity_pkts: u32,
    /// DWRR weight (at least 1; unused under strict priority).
    pub weight: u32,
    /// Queue-depth ECN marking, if any.
    pub red: Option<RedConfig>,
}

/// One port's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortConfig {
    /// Clock ticks per second (TSC hz, or 1e9 for a ns clock).
    pub hz: u64,
    /// Shaper rate in bytes per second on the wire (frame + 24); `None` leaves the port
    /// unshaped (dequeue releases up to the budget at once).
    pub rate_bytes_per_sec: Option<u64>,
    /// Shaper bucket size (largest burst) in bytes; at least `max_frame_bytes + 24`.
    pub bucket_bytes: u64,
    /// Longest frame accepted, bytes without FCS (longer: `oversize`).
    pub max_frame_bytes: u32,
    /// Class selection.
    pub policy: Policy,
    /// DWRR bytes per weight unit per turn (a maximum frame on the wire or more keeps DWRR
    /// O(1)).
    pub dwrr_quantum_bytes: u32,
    /// Where RED marks.
    pub mark_point: MarkPoint,
    /// Seed of the marking decisions' random source.
    pub seed: u64,
    /// Record depth and sojourn histograms per class.
    pub histograms: bool,
    /// The classes, 1..=8; class `i` is `classes[i]`.
    pub classes: Vec<ClassConfig>,
}

impl PortConfig {
    /// A port with `classes`, unshaped, strict priority, marking at enqueue, standard frames
    /// (1514 bytes), quantum 1538 bytes (1514 + 24), no histograms.
    pub fn new(hz: u64, classes: Vec<ClassConfig>) -> Self {
        PortConfig {
            hz,
            rate_bytes_per_sec: None,
            bucket_bytes: 1514 + 24,
            max_frame_bytes: 1514,
            policy: Policy::StrictPriority,
            dwrr_quantum_bytes: 1514 + 24,
            mark_point: MarkPoint::Enqueue,
            seed: 1,
            histograms: false,
            classes,
        }
    }

    /// Checks the configuration.
    ///
    /// # Errors
    /// A message naming the field (and class) and what was expected.
    pub fn validate(&self) -> Result<(), String> {
        if self.hz == 0 {
            return Err("hz must be at least 1".into());
        }
        if self.classes.is_empty() || self.classes.len() > MAX_CLASSES {
            return Err(format!("classes: 1..={MAX_CLASSES} expected, got {}", self.classes.len()));
        }
        if self.rate_bytes_per_sec == Some(0) {
            return Err("rate_bytes_per_sec must be at least 1 (omit it for an unshaped port)".into());
        }
        let need = u64::from(self.max_frame_bytes) + u64::from(FRAME_OVERHEAD);
        if self.rate_bytes_per_sec.is_some() && self.bucket_bytes < need {
            return Err(format!(
                "bucket_bytes must hold one maximum frame on the wire ({need} bytes), got {}",
                self.bucket_bytes
            ));
        }
        if self.policy == Policy::Dwrr && self.dwrr_quantum_bytes == 0 {
            return Err("dwrr_quantum_bytes must be at least 1".into());
        }
        for (i, c) in self.classes.iter().enumerate() {
            if c.capacity_pkts == 0 || c.capacity_bytes == 0 {
                return Err(format!("class {i}: capacity_bytes and capacity_pkts must be at least 1"));
            }
            if self.policy == Policy::Dwrr && c.weight == 0 {
                return Err(format!("class {i}: weight must be at least 1"));
            }
            if let Some(r) = &c.red {
                r.validate().map_err(|e| format!("class {i}: red: {e}"))?;
            }
        }
        Ok(())
    }
}

/// An item refused at enqueue, given back to be counted and freed.
#[derive(Debug)]
pub struct Rejected<T> {
    /// The item.
    pub item: T,
    /// Why: [`Reason::UnknownClass`], [`Reason::EgressOversize`], [`Reason::TailDrop`] or
    /// [`Reason::RedDrop`], the drop reason it is counted under.
    pub reason: Reason,
}

/// What [`Scheduler::offer`] did with an item it accepted.
#[derive(Debug)]
pub enum Offer<T> {
    /// The port was idle: the item leaves now (counted enqueued and sent).
    Sent(T),
    /// The item is queued; [`Scheduler::dequeue`] hands it out.
    Queued,
}

/// What [`Scheduler::dequeue`] hands out.
#[derive(Debug)]
pub enum Dequeued<T> {
    /// Transmit this item.
    Send(T),
    /// Free this item: dropped at dequeue (only [`Reason::RedDrop`], with
    /// [`MarkPoint::Dequeue`]).
    Drop(T, Reason),
}

/// One traffic class: its queue and everything kept per class, side by side so that a packet
/// finds them behind one index.
#[derive(Debug)]
struct Class<T> {
    queue: ClassQueue<T>,
    red: Option<Red>,
    counters: ClassCounters,
    /// The packets [`Scheduler::offer`] sent at once (an idle port): each was enqueued (its
    /// depth 0 recorded in `hist_zeros` as any arrival's) and sent after 0 ticks, counted here
    /// once instead of in `counters.enqueued`, `counters.sent` and the sojourn histogram's
    /// zeros; [`Scheduler::counters`] and [`Scheduler::histograms`] add them in.
    passed: PktBytes,
    /// Depth and sojourn histograms, when the port records them.
    hist: Option<ClassHistograms>,
    /// The zeros not yet in `hist`: depths of 0 found by any arrival, sojourns of 0 of the
    /// packets that went through the queue (those of `passed` are added when read). Counted
    /// here (one add) instead of through the histogram's bucket arithmetic;
    /// [`Scheduler::histograms`] folds them in.
    hist_zeros: [u64; 2],
    /// RED marks this class at dequeue: its packets always go through the queue (the decision
    /// is taken at the head of the line).
    marks_at_dequeue: bool,
}

/// One port's egress scheduler over items `T` (mbufs in the appliance).
#[derive(Debug)]
pub struct Scheduler<T> {
    classes: Vec<Class<T>>,
    port: PortCounters,
    /// Bit `c` set when class `c` is non-empty.
    nonempty: u8,
    policy: Policy,
    dwrr: Dwrr,
    shaper: Option<Shaper>,
    mark_point: MarkPoint,
    rng: EcnRng,
    max_frame: u32,
    /// Ticks to send one frame of `max_frame` bytes (with the 24 bytes of overhead) at the
    /// shaper's rate: RED's idle-decay step. `None` without a shaper.
    slot_ticks: Option<u64>,
}

/// The checks every arrival meets first, in order: its class exists ([`Reason::UnknownClass`],
/// counted on the port), the frame is no longer than the port's largest
/// ([`Reason::EgressOversize`], counted on the port) and fits in the class's queue
/// ([`Reason::TailDrop`], counted on the class). Ok: the class.
#[inline(always)]
fn fits<'a, T>(
    classes: &'a mut [Class<T>],
    port: &mut PortCounters,
    max_frame: u32,
    class: usize,
    len: u32,
) -> Result<&'a mut Class<T>, Reason> {
    let Some(c) = classes.get_mut(class) else {
        port.unknown_class.add(len);
        return Err(Reason::UnknownClass);
    };
    if len > max_frame {
        port.oversize.add(len);
        return Err(Reason::EgressOversize);
    }
    if !c.queue.fits(len) {
        c.counters.tail_drop.add(len);
        return Err(Reason::TailDrop);
    }
    Ok(c)
}

/// RED selected `item` (of `len` bytes): an ECN-capable packet is marked CE (counted
/// `ecn_marked`), a Not-ECT one refused ([`Reason::RedDrop`], counted `red_drop`).
#[inline(always)]
fn mark<T: SchedItem>(item: &mut T, counters: &mut ClassCounters, len: u32) -> Result<(), Reason> {
    if item.mark_ce().is_ce() {
        counters.ecn_marked.add(len);
        Ok(())
    } else {
        counters.red_drop.add(len);
        Err(Reason::RedDrop)
    }
}

impl<T: SchedItem> Scheduler<T> {
    /// A scheduler for `cfg`; every ring and histogram is allocated here.
    ///
    /// # Errors
    /// What [`PortConfig::validate`] finds, or a shaper rate, bucket size or clock above the
    /// token bucket's limits ([`crate::meter::bucket::MAX_RATE`] and its siblings).
    pub fn new(cfg: &PortConfig) -> Result<Self, String> {
        cfg.validate()?;
        let quanta: Vec<u64> =
            cfg.classes.iter().map(|c| u64::from(c.weight.max(1)) * u64::from(cfg.dwrr_quantum_bytes.max(1))).collect();
        let shaper = match cfg.rate_bytes_per_sec {
            Some(rate) => {
                Some(Shaper::new(rate, cfg.bucket_bytes, FRAME_OVERHEAD, cfg.hz).map_err(|e| format!("shaper: {e}"))?)
            }
            None => None,
        };
        Ok(Scheduler {
            classes: cfg
                .classes
                .iter()
                .map(|c| Class {
                    queue: ClassQueue::new(c.capacity_bytes, c.capacity_pkts as usize),
                    red: c.red.map(Red::new),
                    counters: ClassCounters::default(),
                    passed: PktBytes::default(),
                    hist: cfg
                        .histograms
                        .then(|| ClassHistograms::new(c.capacity_bytes, cfg.hz.saturating_mul(MAX_SOJOURN_S))),
                    hist_zeros: [0; 2],
                    marks_at_dequeue: cfg.mark_point == MarkPoint::Dequeue && c.red.is_some(),
                })
                .collect(),
            port: PortCounters::default(),
            nonempty: 0,
            policy: cfg.policy,
            dwrr: Dwrr::new(&quanta),
            shaper,
            mark_point: cfg.mark_point,
            rng: EcnRng::new(cfg.seed),
            max_frame: cfg.max_frame_bytes,
            slot_ticks: cfg.rate_bytes_per_sec.filter(|&r| r > 0).map(|rate| {
                let bytes = u128::from(cfg.max_frame_bytes) + u128::from(FRAME_OVERHEAD);
                u64::try_from((bytes * u128::from(cfg.hz)).div_ceil(u128::from(rate))).unwrap_or(u64::MAX)
            }),
        })
    }

    /// Number of classes.
    pub fn classes(&self) -> usize {
        self.classes.len()
    }

    /// Queues `item` in `class` at `now` (ticks). With marking at enqueue, RED may set CE on it
    /// (counted `ecn_marked`) or refuse it.
    ///
    /// # Errors
    /// The item back, with [`Reason::UnknownClass`], [`Reason::EgressOversize`],
    /// [`Reason::TailDrop`] (capacity reached; checked before RED, which samples only
    /// packets that fit) or [`Reason::RedDrop`] (selected and Not-ECT); each is counted.
    #[inline]
    pub fn enqueue(&mut self, class: usize, item: T, now: u64) -> Result<(), Rejected<T>> {
        let (item, len) = self.admit(class, item, now)?;
        self.push(class, item, len, now);
        Ok(())
    }

    /// [`Scheduler::enqueue`] followed by [`Scheduler::dequeue`] at the same `now`, without the
    /// queue when the item would leave at once: every class is empty, RED (if any) marks at
    /// enqueue, and the shaper (if any) has the tokens. Then the item comes back as
    /// [`Offer::Sent`], with every counter, histogram, RED and shaper state as the round trip
    /// through the queue would leave them (DWRR's state is equivalent: no class active, every
    /// deficit 0). Otherwise it is queued as by [`Scheduler::enqueue`] ([`Offer::Queued`]).
    /// An idle port sends at once, as a work-conserving scheduler does; this is what keeps an
    /// uncongested shaped port cheap.
    ///
    /// # Errors
    /// As [`Scheduler::enqueue`].
    #[inline(always)]
    pub fn offer(&mut self, class: usize, mut item: T, now: u64) -> Result<Offer<T>, Rejected<T>> {
        let len = item.frame_len();
        let c = match fits(&mut self.classes, &mut self.port, self.max_frame, class, len) {
            Ok(c) => c,
            Err(reason) => return Err(Rejected { item, reason }),
        };
        if self.nonempty != 0 || c.marks_at_dequeue {
            return self.enqueue(class, item, now).map(|()| Offer::Queued);
        }
        // Every class is empty: `admit` at depth 0, RED (if any) marking at enqueue. The depth
        // is recorded first, as `admit` records it, whatever RED and the shaper decide.
        if c.hist.is_some() {
            c.hist_zeros[0] += 1;
        }
        if let Some(red) = &mut c.red {
            if red.arrive_empty(now, self.slot_ticks, &mut self.rng) == RedVerdict::Mark {
                if let Err(reason) = mark(&mut item, &mut c.counters, len) {
                    return Err(Rejected { item, reason });
                }
            }
        }
        if let Some(s) = &mut self.shaper {
            // A refused try leaves the bucket as it was (refilled to `now`, which dequeue would
            // do too).
            if !s.try_send(len, now) {
                self.push(class, item, len, now);
                return Ok(Offer::Queued);
            }
        }
        // Enqueued at depth 0 (the queue's deepest point: the frame itself) and sent at once.
        c.passed.add(len);
        c.counters.max_depth_bytes = c.counters.max_depth_bytes.max(u64::from(len));
        if let Some(red) = &mut c.red {
            red.went_empty(now);
        }
        Ok(Offer::Sent(item))
    }

    /// The checks and the enqueue-time decisions of [`Scheduler::enqueue`], up to the push:
    /// the item and its length, or the item refused (counted).
    #[inline(always)]
    fn admit(&mut self, class: usize, mut item: T, now: u64) -> Result<(T, u32), Rejected<T>> {
        let len = item.frame_len();
        let c = match fits(&mut self.classes, &mut self.port, self.max_frame, class, len) {
            Ok(c) => c,
            Err(reason) => return Err(Rejected { item, reason }),
        };
        let depth = c.queue.bytes();
        if let Some(h) = &mut c.hist {
            if depth == 0 {
                c.hist_zeros[0] += 1;
            } else {
                h.depth_bytes.saturating_record(depth);
            }
        }
        if let Some(red) = &mut c.red {
            let verdict = match (self.mark_point, depth) {
                // An empty queue: the idle branch of the average, not an EWMA step as well.
                (MarkPoint::Enqueue, 0) => red.arrive_empty(now, self.slot_ticks, &mut self.rng),
                (MarkPoint::Enqueue, _) => red.decide(depth, &mut self.rng),
                (MarkPoint::Dequeue, 0) => {
                    red.wake(now, self.slot_ticks);
                    RedVerdict::Pass
                }
                (MarkPoint::Dequeue, _) => RedVerdict::Pass,
            };
            if verdict == RedVerdict::Mark {
                if let Err(reason) = mark(&mut item, &mut c.counters, len) {
                    return Err(Rejected { item, reason });
                }
            }
        }
        Ok((item, len))
    }

    /// Appends an admitted item to `class`'s queue.
    #[inline]
    fn push(&mut self, class: usize, item: T, len: u32, now: u64) {
        let c = &mut self.classes[class];
        let was_empty = c.queue.is_empty();
        c.queue.push(Entry { item, len, enq: now, decided: false });
        let cnt = &mut c.counters;
        cnt.enqueued.add(len);
        cnt.max_depth_bytes = cnt.max_depth_bytes.max(c.queue.bytes());
        if was_empty {
            self.nonempty |= 1 << class;
            if self.policy == Policy::Dwrr {
                self.dwrr.activate(class);
            }
        }
    }

    /// The class whose head leaves next (strict priority: the highest non-empty class).
    #[inline]
    fn select(&mut self) -> Option<usize> {
        match self.policy {
            Policy::StrictPriority => {
                (self.nonempty != 0).then(|| (u8::BITS - 1 - self.nonempty.leading_zeros()) as usize)
            }
            Policy::Dwrr => {
                let (classes, overhead) = (&self.classes, u64::from(FRAME_OVERHEAD));
                self.dwrr.select(|c| u64::from(classes[c].queue.head_len().unwrap_or(0)) + overhead)
            }
        }
    }

    /// Removes class `c`'s head, updating the class set and DWRR (`cost`: wire bytes charged).
    #[inline]
    fn take_head(&mut self, c: usize, cost: u64) -> Entry<T> {
        let q = &mut self.classes[c].queue;
        let e = q.pop().expect("a selected class is non-empty");
        let empty = q.is_empty();
        if empty {
            self.nonempty &= !(1 << c);
        }
        if self.policy == Policy::Dwrr {
            self.dwrr.commit(c, cost, empty);
        }
        e
    }

    /// Hands out at most `budget` items at `now` (ticks) to `out`, in scheduling order, as far
    /// as the shaper allows; returns how many were sent ([`Dequeued::Send`]). With marking at
    /// dequeue, RED decides once per packet as it reaches the head of the line; a selected
    /// Not-ECT packet comes out as [`Dequeued::Drop`] (counted in the budget, not charged to
    /// the shaper).
    #[inline]
    pub fn dequeue(&mut self, now: u64, budget: usize, mut out: impl FnMut(Dequeued<T>)) -> usize {
        let mut handed = 0;
        let mut sent = 0;
        while handed < budget {
            let Some(c) = self.select() else { break };
            if self.mark_point == MarkPoint::Dequeue && self.classes[c].red.is_some() && !self.decide_head(c) {
                let e = self.take_head(c, 0);
                self.note_if_empty(c, now);
                self.classes[c].counters.red_drop.add(e.len);
                out(Dequeued::Drop(e.item, Reason::RedDrop));
                handed += 1;
                continue;
            }
            let len = self.classes[c].queue.head_len().unwrap_or(0);
            if let Some(s) = &mut self.shaper {
                if !s.try_send(len, now) {
                    break;
                }
            }
            let e = self.take_head(c, u64::from(len) + u64::from(FRAME_OVERHEAD));
            self.note_if_empty(c, now);
            let class = &mut self.classes[c];
            class.counters.sent.add(e.len);
            if let Some(h) = &mut class.hist {
                match now.saturating_sub(e.enq) {
                    0 => class.hist_zeros[1] += 1,
                    t => h.sojourn_ticks.saturating_record(t),
                }
            }
            out(Dequeued::Send(e.item));
            handed += 1;
            sent += 1;
        }
        sent
    }

    /// Tells class `c`'s RED that its queue went empty at `now`, if it did.
    #[inline]
    fn note_if_empty(&mut self, c: usize, now: u64) {
        if self.nonempty & (1 << c) == 0 {
            if let Some(red) = &mut self.classes[c].red {
                red.went_empty(now);
            }
        }
    }

    /// The dequeue-time RED decision for class `c`'s head, taken once: false when the head is
    /// to be dropped.
    fn decide_head(&mut self, c: usize) -> bool {
        let class = &mut self.classes[c];
        let q = &mut class.queue;
        let behind = q.bytes() - u64::from(q.head_len().unwrap_or(0));
        let Some(head) = q.head_mut() else { return true };
        if head.decided {
            return true;
        }
        head.decided = true;
        let Some(red) = &mut class.red else { return true };
        if red.decide(behind, &mut self.rng) == RedVerdict::Pass {
            return true;
        }
        if head.item.mark_ce().is_ce() {
            class.counters.ecn_marked.add(head.len);
            true
        } else {
            false
        }
    }

    /// When the next packet can leave: `None` with every queue empty, else the earliest tick at
    /// or after `now` at which [`Scheduler::dequeue`] hands out at least one item (`now` itself
    /// on an unshaped port). A virtual clock drains the port with
    /// `while let Some(t) = s.next_departure(now) { now = t; s.dequeue(now, burst, ..) }`.
    pub fn next_departure(&mut self, now: u64) -> Option<u64> {
        let c = self.select()?;
        let len = self.classes[c].queue.head_len()?;
        match &self.shaper {
            // The configuration guarantees a maximum frame fits the bucket.
            Some(s) => Some(s.ready_at(len, now).unwrap_or(u64::MAX)),
            None => Some(now),
        }
    }

    /// Class `class`'s counters (a copy, with the packets sent at once added in).
    pub fn counters(&self, class: usize) -> ClassCounters {
        let c = &self.classes[class];
        let mut cnt = c.counters;
        cnt.enqueued.merge(&c.passed);
        cnt.sent.merge(&c.passed);
        cnt
    }

    /// The port-level drop counters.
    pub fn port_counters(&self) -> &PortCounters {
        &self.port
    }

    /// Class `class`'s histograms, when configured: a copy (allocated: call it off the fast
    /// path) with every recorded value in it.
    pub fn histograms(&self, class: usize) -> Option<ClassHistograms> {
        let c = self.classes.get(class)?;
        let mut h = c.hist.clone()?;
        let [depth, sojourn] = c.hist_zeros;
        // Recording 0 with a count cannot fail: 0 is within every histogram's bounds.
        let _ = h.depth_bytes.record_n(0, depth);
        let _ = h.sojourn_ticks.record_n(0, sojourn + c.passed.pkts);
        Some(h)
    }

    /// What class `class` holds now: packets and bytes (frame lengths without FCS).
    pub fn depth(&self, class: usize) -> PktBytes {
        let q = &self.classes[class].queue;
        PktBytes { pkts: q.len() as u64, bytes: q.bytes() }
    }

    /// True when every class is empty.
    pub fn is_empty(&self) -> bool {
        self.nonempty == 0
    }

    /// Removes every queued item (at shutdown, to free them) without counting them as sent;
    /// afterwards the depths are 0.
    pub fn flush(&mut self, mut free: impl FnMut(T)) {
        for c in &mut self.classes {
            while let Some(e) = c.queue.pop() {
                free(e.item);
            }
        }
        self.nonempty = 0;
        self.dwrr.reset();
    }
}
