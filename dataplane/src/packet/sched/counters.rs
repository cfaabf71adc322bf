//! What the scheduler counts per class, and the depth and sojourn histograms it can record.

use hdrhistogram::Histogram;

/// Packets and bytes (frame lengths without FCS, without the shaper's overhead).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PktBytes {
    /// Packets.
    pub pkts: u64,
    /// Bytes.
    pub bytes: u64,
}

impl PktBytes {
    #[inline]
    pub(crate) fn add(&mut self, len: u32) {
        self.pkts += 1;
        self.bytes += u64::from(len);
    }

    /// Adds another count (merging workers' counters).
    pub fn merge(&mut self, o: &PktBytes) {
        self.pkts += o.pkts;
        self.bytes += o.bytes;
    }
}

/// One class's counters.
///
/// Balance, with marking at enqueue: offered = `enqueued + tail_drop + red_drop`, and
/// `enqueued = sent + queued`. With marking at dequeue: offered = `enqueued + tail_drop`, and
/// `enqueued = sent + red_drop + queued` (queued: [`super::Scheduler::depth`]). `ecn_marked`
/// counts packets that RED selected and that left (or will leave) with CE, including those
/// that already carried it; a selected Not-ECT packet is a `red_drop` instead.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClassCounters {
    /// Accepted into the queue.
    pub enqueued: PktBytes,
    /// Handed to the port.
    pub sent: PktBytes,
    /// Selected by RED and carrying CE (RFC 3168).
    pub ecn_marked: PktBytes,
    /// Refused at enqueue: the queue's byte or packet capacity was reached (`tail_drop`).
    pub tail_drop: PktBytes,
    /// Selected by RED but Not-ECT, or not IP (`red_drop`).
    pub red_drop: PktBytes,
    /// Highest depth reached, bytes.
    pub max_depth_bytes: u64,
}

impl ClassCounters {
    /// Adds another worker's counters; the highest depth is the larger of the two.
    pub fn merge(&mut self, o: &ClassCounters) {
        self.enqueued.merge(&o.enqueued);
        self.sent.merge(&o.sent);
        self.ecn_marked.merge(&o.ecn_marked);
        self.tail_drop.merge(&o.tail_drop);
        self.red_drop.merge(&o.red_drop);
        self.max_depth_bytes = self.max_depth_bytes.max(o.max_depth_bytes);
    }
}

/// Drops not attributable to a class's queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortCounters {
    /// Enqueued to a class the port does not have (`unknown_class`).
    pub unknown_class: PktBytes,
    /// Longer than the port's `max_frame_bytes` (`oversize`).
    pub oversize: PktBytes,
}

/// Significant decimal digits of the histograms (2: values within 1%).
pub const HIST_SIGFIG: u8 = 2;

/// One class's distributions, sized at construction so that recording never allocates (values
/// above the top are recorded as the top).
#[derive(Debug, Clone)]
pub struct ClassHistograms {
    /// Depth in bytes that each arriving packet found (before it was queued).
    pub depth_bytes: Histogram<u64>,
    /// Time from enqueue to dequeue of each sent packet, in ticks (ns = ticks × 1e9 / hz).
    pub sojourn_ticks: Histogram<u64>,
}

impl ClassHistograms {
    /// Histograms up to `max_depth` bytes and `max_sojourn` ticks.
    pub fn new(max_depth: u64, max_sojourn: u64) -> Self {
        let h = |top: u64| {
            Histogram::new_with_bounds(1, top.max(2), HIST_SIGFIG)
                .expect("bounds 1..top (>= 2) with sigfig 2 are valid")
        };
        ClassHistograms { depth_bytes: h(max_depth), sojourn_ticks: h(max_sojourn) }
    }
}
