//! A worker's counters as a flat list of named values, in a fixed order, for the live views of a
//! running appliance (the telemetry socket, the periodic stats line): [`Datapath::export`] walks
//! them and hands each to a [`Visit`].
//!
//! The order depends only on the datapath's shape (ports, tables and their entries), which is
//! the same on every worker of a run: value `i` of one worker's walk and value `i` of another's
//! are the same counter, so a reader sums them index by index. The names come from one walk at
//! start-up ([`Names`]); the workers' walks only store values (no allocation).

use crate::agg::{AggCounters, CollCounters, COLL_DROP_REASONS};
use crate::buf::PacketBuf;
use crate::datapath::Datapath;
use crate::stats::Reason;
use crate::table::PipelineState;

/// What a counter is about, beside its family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Label {
    /// No label.
    None,
    /// A port, by index in the config.
    Port(u16),
    /// A drop reason.
    Reason(Reason),
    /// Table `table`'s entry `entry` (by index, in the order entries were added), or its miss
    /// (`None`).
    Entry {
        /// Table index in the pipeline.
        table: u16,
        /// Entry index, `None` for the miss.
        entry: Option<u32>,
    },
    /// Worker `worker` (its index), and for a histogram's counts the bucket's upper bound
    /// (log2 buckets: `2^b - 1`; `u64::MAX` for the last).
    Worker {
        /// The worker's index.
        worker: u16,
        /// The bucket's upper bound, for histogram counts.
        le: Option<u64>,
    },
    /// Collective `collective` (its id).
    Collective(u16),
    /// Collective `collective`'s NAKs of reason code `reason` (1 to 7, spec section 5).
    CollectiveNak {
        /// The collective's id.
        collective: u16,
        /// The NAK's reason code.
        reason: u8,
    },
    /// Collective `collective`'s drops for `reason` (one of [`COLL_DROP_REASONS`]).
    CollectiveDrop {
        /// The collective's id.
        collective: u16,
        /// The drop reason.
        reason: Reason,
    },
    /// Rank `rank` of collective `collective` (its id).
    Rank {
        /// The collective's id.
        collective: u16,
        /// The rank.
        rank: u16,
    },
}

/// One counter: its family (a snake_case name whose unit is its last word: `packets`,
/// `bytes`, or a count of events) and its label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Metric {
    /// E.g. `port_rx_packets`, `dropped_packets`, `table_packets`, `agg_folded_contributions`.
    pub family: &'static str,
    /// What the value counts, in one line.
    pub help: &'static str,
    /// Which port, reason or entry.
    pub label: Label,
}

/// Receives the counters of a walk, in order.
pub trait Visit {
    /// The next counter and its value now.
    fn counter(&mut self, m: Metric, value: u64);
}

/// The families whose values are gauges (a value now, not a count since the start): a board
/// sums them over the workers like the counters (only a collective's owner has any).
pub const GAUGES: [&str; 1] = ["agg_collective_slots_in_use"];

impl Metric {
    /// True if the value is a gauge ([`GAUGES`]), not a counter.
    pub fn is_gauge(&self) -> bool {
        GAUGES.contains(&self.family)
    }
}

/// A [`Visit`] that keeps the metrics (the names of a walk), dropping the values.
#[derive(Debug, Default)]
pub struct Names(pub Vec<Metric>);

impl Visit for Names {
    fn counter(&mut self, m: Metric, _: u64) {
        self.0.push(m);
    }
}

impl AggCounters {
    /// The counters by family name, with their meaning (the fields' docs).
    pub fn fields(&self) -> [(&'static str, &'static str, u64); 12] {
        [
            ("agg_folded_contributions", "contributions folded into a slot", self.folded),
            ("agg_completed_rounds", "rounds completed", self.completed),
            ("agg_result_packets", "RESULT packets sent to all members on completion", self.results),
            (
                "agg_shared_result_packets",
                "RESULT packets sent as a header over another member's payload (zero_copy_results)",
                self.shared_results,
            ),
            ("agg_resent_result_packets", "RESULT packets resent to one member", self.resends),
            ("agg_nak_packets", "NAKs sent", self.naks),
            (
                "agg_suppressed_naks",
                "NAKs not sent: suppressed by the per-source rate limit, or withheld for a source no NAK may go to",
                self.naks_suppressed,
            ),
            ("agg_timed_out_rounds", "rounds reclaimed after slot_timeout_ms", self.slot_timeouts),
            ("agg_payload_bytes", "bytes of gradient payload folded", self.payload_bytes),
            (
                "agg_handed_off_packets",
                "packets handed to the worker owning their collective (or sharded chunk)",
                self.handed_off,
            ),
            ("agg_probe_packets", "valid PROBEs received", self.probes),
            ("agg_status_packets", "STATUS packets sent in answer to PROBEs", self.statuses),
        ]
    }
}

impl CollCounters {
    /// The counters without a reason, by family name (`agg_collective_...`), with their
    /// meaning (the fields' docs).
    pub fn fields(&self) -> [(&'static str, &'static str, u64); 9] {
        [
            ("agg_collective_folded_contributions", "contributions of the collective folded into a slot", self.folded),
            ("agg_collective_completed_rounds", "rounds of the collective completed", self.completed),
            (
                "agg_collective_result_packets",
                "RESULT packets of the collective sent to all members on completion",
                self.results,
            ),
            (
                "agg_collective_resent_result_packets",
                "RESULT packets of the collective resent to one member",
                self.resends,
            ),
            (
                "agg_collective_suppressed_naks",
                "NAKs for the collective's packets not sent: suppressed by the per-source rate limit, or withheld for a source no NAK may go to",
                self.naks_suppressed,
            ),
            (
                "agg_collective_timed_out_rounds",
                "rounds of the collective reclaimed after slot_timeout_ms",
                self.slot_timeouts,
            ),
            ("agg_collective_payload_bytes", "bytes of the collective's gradient payload folded", self.payload_bytes),
            ("agg_collective_probe_packets", "valid PROBEs of the collective received", self.probes),
            ("agg_collective_status_packets", "STATUS packets of the collective sent", self.statuses),
        ]
    }
}

/// Walks one collective's counters (`id`, `slots_in_use` of its slots with a round in
/// progress): [`CollCounters::fields`], the NAKs by reason code 1 to 7, the drops by
/// [`COLL_DROP_REASONS`], then the slots in use (a gauge).
pub fn export_collective<V: Visit>(id: u16, c: &CollCounters, slots_in_use: u64, v: &mut V) {
    let label = Label::Collective(id);
    for (family, help, value) in c.fields() {
        v.counter(Metric { family, help, label }, value);
    }
    for (i, n) in c.naks.iter().enumerate() {
        let label = Label::CollectiveNak { collective: id, reason: i as u8 + 1 };
        v.counter(
            Metric {
                family: "agg_collective_nak_packets",
                help: "NAKs sent for the collective's packets, by reason code",
                label,
            },
            *n,
        );
    }
    for (r, n) in COLL_DROP_REASONS.iter().zip(&c.drops) {
        let label = Label::CollectiveDrop { collective: id, reason: *r };
        v.counter(
            Metric {
                family: "agg_collective_dropped_packets",
                help: "packets of the collective dropped, by reason",
                label,
            },
            *n,
        );
    }
    v.counter(
        Metric {
            family: "agg_collective_slots_in_use",
            help: "slots of the collective with a round in progress (a gauge)",
            label,
        },
        slots_in_use,
    );
}

impl<B: PacketBuf> Datapath<B> {
    /// Walks every counter of this worker, in a fixed order: per port rx and tx packets and
    /// bytes; drops per reason (every reason, zeros included); neighbour replies and address
    /// conflicts; per table each entry's then the miss's packets and bytes; the aggregator's
    /// counters (zeros on a worker without one); per collective in config order its counters
    /// ([`export_collective`]; zeros on the workers that hold none of its slots); per collective and
    /// rank the straggler view.
    pub fn export<V: Visit>(&self, v: &mut V) {
        let c = &self.counters;
        for (i, p) in c.ports.iter().enumerate() {
            let label = Label::Port(i as u16);
            v.counter(Metric { family: "port_rx_packets", help: "packets received", label }, p.rx_packets);
            v.counter(Metric { family: "port_rx_bytes", help: "bytes received", label }, p.rx_bytes);
            v.counter(
                Metric { family: "port_tx_packets", help: "packets handed to the port's tx", label },
                p.tx_packets,
            );
            v.counter(Metric { family: "port_tx_bytes", help: "bytes handed to the port's tx", label }, p.tx_bytes);
        }
        for r in Reason::ALL {
            let m = Metric { family: "dropped_packets", help: "packets dropped, by reason", label: Label::Reason(r) };
            v.counter(m, c.drops[r as usize]);
        }
        let none = Label::None;
        v.counter(
            Metric {
                family: "neighbor_reply_packets",
                help: "ARP replies and neighbour advertisements sent",
                label: none,
            },
            c.neighbor_replies,
        );
        v.counter(
            Metric { family: "address_conflicts", help: "address conflicts seen", label: none },
            c.address_conflicts,
        );
        export_tables(&self.pipeline_state, v);
        let agg = self.agg.as_ref().map(|a| a.counters).unwrap_or_default();
        for (family, help, value) in agg.fields() {
            v.counter(Metric { family, help, label: none }, value);
        }
        // Per collective (zeros on workers that hold none of its slots), then the straggler view.
        if let Some(a) = &self.agg {
            export_collectives(a.collectives(), a.stragglers(), v);
        }
    }
}

/// The collective part of [`Datapath::export`]: per collective in order its counters
/// ([`export_collective`]: `(id, counters, slots in use)`), then per collective and rank its
/// straggler view (`(id, ranks, per rank lateness)`; ranks past the slice are zeros). Also what
/// a board is reshaped with when the collectives change at runtime (zeros).
pub fn export_collectives<'a, V: Visit>(
    colls: impl Iterator<Item = (u16, &'a CollCounters, u64)>,
    stragglers: impl Iterator<Item = (u16, usize, &'a [crate::agg::straggle::RankLateness])>,
    v: &mut V,
) {
    for (id, c, in_use) in colls {
        export_collective(id, c, in_use, v);
    }
    let zero = crate::agg::straggle::RankLateness::default();
    for (id, ranks, late) in stragglers {
        for r in 0..ranks {
            let l = late.get(r).unwrap_or(&zero);
            let label = Label::Rank { collective: id, rank: r as u16 };
            for (family, help, value) in [
                ("agg_rank_contributions", "contributions of the rank folded", l.contributions),
                (
                    "agg_rank_lateness_sum_us",
                    "µs its contributions came after their round's first one, summed",
                    l.late_sum_us,
                ),
                (
                    "agg_rank_completed_last_rounds",
                    "rounds the rank completed: its contribution came last",
                    l.completed_last,
                ),
            ] {
                v.counter(Metric { family, help, label }, value);
            }
        }
    }
}

/// The table part of [`Datapath::export`]: per table each entry's then the miss's packets and
/// bytes. Also what a board is reshaped with when the pipeline changes at runtime.
pub fn export_tables<V: Visit>(s: &PipelineState, v: &mut V) {
    for t in 0..s.tables() {
        let hits = s.hits_of(t);
        let last = hits.len().saturating_sub(1);
        for (e, h) in hits.iter().enumerate() {
            let entry = (e < last).then_some(e as u32);
            let label = Label::Entry { table: t as u16, entry };
            v.counter(Metric { family: "table_packets", help: "packets that hit the entry", label }, h.packets);
            v.counter(
                Metric { family: "table_bytes", help: "bytes of the packets that hit the entry", label },
                h.bytes,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keeps the values, in walk order.
    #[derive(Default)]
    struct Values(Vec<u64>);

    impl Visit for Values {
        fn counter(&mut self, _: Metric, v: u64) {
            self.0.push(v);
        }
    }

    #[test]
    fn names_and_values_line_up_and_count_what_the_datapath_counted() {
        let mut dp: Datapath = Datapath::new(Default::default(), 2, crate::wire::gradient::DEFAULT_UDP_PORT);
        dp.counters.rx(1, 100);
        dp.counters.rx(1, 60);
        dp.counters.drop(Reason::TxFull);
        let mut names = Names::default();
        dp.export(&mut names);
        let mut values = Values::default();
        dp.export(&mut values);
        assert_eq!(names.0.len(), values.0.len());
        // 2 ports x 4, every reason, 2 neighbour counters, no table, 12 aggregation counters.
        assert_eq!(names.0.len(), 8 + Reason::COUNT + 2 + 12);
        let find = |family: &str, label: Label| {
            let i = names.0.iter().position(|m| m.family == family && m.label == label).unwrap();
            values.0[i]
        };
        assert_eq!(find("port_rx_packets", Label::Port(1)), 2);
        assert_eq!(find("port_rx_bytes", Label::Port(1)), 160);
        assert_eq!(find("port_rx_packets", Label::Port(0)), 0);
        assert_eq!(find("dropped_packets", Label::Reason(Reason::TxFull)), 1);
        assert_eq!(find("dropped_packets", Label::Reason(Reason::Runt)), 0);
    }
}
