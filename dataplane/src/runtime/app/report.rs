//! The run's final stats: what `dpu` prints at its end (`Summary::report`), writes as JSON
//! (`--stats-json`) and why a run that ran to its end still failed (`Summary::failure`).

use crate::dpdk::PortStats;
use crate::stats::Counters;
use crate::table::Counter;
use serde::Serialize;
use std::fmt::Write;

/// One port's final stats.
#[derive(Debug, Clone, Serialize)]
pub struct PortSummary {
    /// Port index.
    pub index: usize,
    /// Label.
    pub name: String,
    /// DPDK device name.
    pub device: String,
    /// What the workers counted.
    pub workers: crate::stats::PortCounters,
    /// What the PMD counted (`rte_eth_stats`).
    pub ethdev: PortStats,
    /// The PMD's extended counters (`rte_eth_xstats_get`), the non-zero ones.
    pub xstats: Vec<(String, u64)>,
    /// Times the link came back after the appliance restarted the port (a net_memif client
    /// whose server went away and came back; [`crate::dpdk::Port::reconnect`]).
    pub reconnects: u64,
}

/// One table entry's (or miss's) counter.
#[derive(Debug, Clone, Serialize)]
pub struct EntrySummary {
    /// Table name.
    pub table: String,
    /// Entry index, or `None` for misses.
    pub entry: Option<usize>,
    /// Packets and bytes.
    pub counter: Counter,
}

/// A named counter's (`count(name)`) packets and bytes.
#[derive(Debug, Clone, Serialize)]
pub struct CounterSummary {
    /// The counter's name.
    pub name: String,
    /// Packets and bytes.
    pub counter: Counter,
}

/// A meter's (`[[meter]]`) packets and bytes per colour, summed over the workers.
#[derive(Debug, Clone, Serialize)]
pub struct MeterSummary {
    /// The meter's name.
    pub name: String,
    /// Coloured green.
    pub green: Counter,
    /// Coloured yellow.
    pub yellow: Counter,
    /// Coloured red.
    pub red: Counter,
}

/// Percentiles of a distribution: median, 99th percentile and maximum.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Percentiles {
    /// 50th percentile.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Maximum.
    pub max: u64,
}

/// One traffic class of a port's egress scheduler (`[port.qos]`), summed over the workers
/// (each worker has its own scheduler per shaped port). Packets and bytes are frames without
/// FCS.
#[derive(Debug, Clone, Serialize)]
pub struct QosClassSummary {
    /// Port index.
    pub port: usize,
    /// Class (0..8; under strict priority the highest is served first).
    pub class: usize,
    /// Accepted into the queue.
    pub enqueued: Counter,
    /// Handed to the port.
    pub sent: Counter,
    /// Selected by RED and carrying CE.
    pub ecn_marked: Counter,
    /// Refused: the queue was full.
    pub tail_drop: Counter,
    /// Selected by RED and not ECN-capable: dropped.
    pub red_drop: Counter,
    /// Highest depth (bytes) one worker's queue reached.
    pub max_depth_bytes: u64,
    /// Depth (bytes) each arriving packet found, over every worker.
    pub depth_bytes: Percentiles,
    /// Time (µs) from enqueue to dequeue of each sent packet, over every worker.
    pub sojourn_us: Percentiles,
}

/// One rank's place in the straggler view ([`crate::agg::straggle`]).
#[derive(Debug, Clone, Serialize)]
pub struct RankSummary {
    /// The rank.
    pub rank: u16,
    /// Contributions folded.
    pub contributions: u64,
    /// Rounds it completed (its contribution came last).
    pub completed_last: u64,
    /// How late its contributions came after their round's first one (µs): the mean, and the
    /// median, 99th percentile and largest as the upper bounds of their log2 buckets.
    pub late_mean_us: f64,
    /// Median lateness (µs, bucket upper bound).
    pub late_p50_us: u64,
    /// 99th percentile (µs, bucket upper bound).
    pub late_p99_us: u64,
    /// Largest (µs, bucket upper bound).
    pub late_max_us: u64,
}

/// A collective's straggler view: which rank the rounds waited for.
#[derive(Debug, Clone, Serialize)]
pub struct StragglerSummary {
    /// The collective's id.
    pub collective: u16,
    /// The rank that completed the most rounds (`None` before any round completed).
    pub slowest_rank: Option<u16>,
    /// Per rank.
    pub ranks: Vec<RankSummary>,
}

/// A collective's counters at the end of a run, summed over the workers (only its owner counts
/// any, or, for a sharded collective, the workers holding its chunks): [`crate::agg::CollCounters`] with its NAKs and drops by reason name.
#[derive(Debug, Clone, Serialize)]
pub struct CollectiveSummary {
    /// The collective's id.
    pub collective: u16,
    /// Contributions folded into a slot.
    pub folded: u64,
    /// Rounds completed (rule 2).
    pub completed: u64,
    /// Bytes of gradient payload folded.
    pub payload_bytes: u64,
    /// RESULT packets sent to all members on completion.
    pub results: u64,
    /// RESULT packets resent to one member (rule 3).
    pub resends: u64,
    /// NAKs sent, all reasons.
    pub naks: u64,
    /// NAKs sent by reason (`stale_round`, `not_member`, ...; every code 2 to 7, zeros
    /// included: code 1, unknown collective, is never a known collective's).
    pub naks_by_reason: std::collections::BTreeMap<String, u64>,
    /// NAKs not sent: suppressed by the per-source rate limit, or withheld for a source no NAK
    /// may go to.
    pub naks_suppressed: u64,
    /// Rounds reclaimed after `slot_timeout_ms` (rule 8).
    pub slot_timeouts: u64,
    /// Valid PROBEs received.
    pub probes: u64,
    /// STATUS packets sent.
    pub statuses: u64,
    /// Packets dropped by reason (`grad_stale_round`, `grad_duplicate`, `grad_not_member` and
    /// the other refusals of the collective's packets; every one, zeros included).
    pub drops: std::collections::BTreeMap<String, u64>,
    /// Slots with a round in progress when the run stopped.
    pub slots_in_use: u64,
}

impl CollectiveSummary {
    /// Collective `id`'s summary from its counters `c` and its slots in use.
    pub fn new(id: u16, c: &crate::agg::CollCounters, slots_in_use: u64) -> Self {
        use crate::wire::gradient::NakReason;
        CollectiveSummary {
            collective: id,
            folded: c.folded,
            completed: c.completed,
            payload_bytes: c.payload_bytes,
            results: c.results,
            resends: c.resends,
            naks: c.naks_sent(),
            naks_by_reason: (2..=crate::agg::NAK_REASONS as u8)
                .map(|r| (NakReason::name(r).to_string(), c.naks[r as usize - 1]))
                .collect(),
            naks_suppressed: c.naks_suppressed,
            slot_timeouts: c.slot_timeouts,
            probes: c.probes,
            statuses: c.statuses,
            drops: crate::agg::COLL_DROP_REASONS.iter().map(|r| (r.name().to_string(), c.dropped(*r))).collect(),
            slots_in_use,
        }
    }
}

/// A worker's poll loop over the run ([`crate::live::LoopStats`]): how busy it was and what a
/// burst cost it in TSC cycles, the rx call included (what testpmd's `--record-core-cycles`
/// counts, so the two compare packet for packet). Packets other workers hand over (hand-offs
/// to a collective's owner) are processed between bursts, outside these counts: with several
/// workers and hand-offs, a worker's cycles per packet are those of its own rx bursts only.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct LoopSummary {
    /// Loop turns in which some rx queue, or a ring from another worker (hand-offs, frames for
    /// a shaped port this worker owns), gave packets.
    pub busy_polls: u64,
    /// Loop turns in which none did.
    pub idle_polls: u64,
    /// Rx bursts processed.
    pub bursts: u64,
    /// Packets those bursts brought.
    pub rx_packets: u64,
    /// TSC cycles spent on those bursts, from the start of each rx call to the end of its
    /// processing (tx bursts on the way included).
    pub burst_cycles: u64,
}

impl LoopSummary {
    /// From a worker's loop counters and the packets its bursts brought.
    pub fn new(s: &crate::live::LoopStats, rx_packets: u64) -> Self {
        LoopSummary {
            busy_polls: s.busy_polls,
            idle_polls: s.idle_polls,
            bursts: s.bursts,
            rx_packets,
            burst_cycles: s.burst_cycles,
        }
    }

    /// TSC cycles per received packet (`None` before the first, or when the loop did not count
    /// its bursts: the lockstep replay of several workers to one shaped port).
    pub fn cycles_per_packet(&self) -> Option<f64> {
        (self.rx_packets > 0 && self.bursts > 0).then(|| self.burst_cycles as f64 / self.rx_packets as f64)
    }
}

/// The run's final stats.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Per port.
    pub ports: Vec<PortSummary>,
    /// Drops by reason (all reasons, zeros included): the workers' reasons, and the ports'
    /// `rx_nombuf` (a packet read while the mempool was empty) and `imissed` (the NIC's rx
    /// queue was full), summed over the ports (`rte_eth_stats`).
    pub drops: std::collections::BTreeMap<String, u64>,
    /// Packets lost for lack of resources: the sum of the [`LOSS_REASONS`] drops. A finite
    /// replay with losses fails ([`Summary::failure`]).
    pub losses: u64,
    /// Whether this run was a finite replay run to the end of its input (no `--duration`, no
    /// live or endless input): its losses make it fail.
    pub finite_replay: bool,
    /// Table counters.
    pub tables: Vec<EntrySummary>,
    /// Named counters, summed over the workers, in the order the config first uses them.
    pub counters: Vec<CounterSummary>,
    /// Meters, in config order.
    pub meters: Vec<MeterSummary>,
    /// Egress scheduler classes, by port and class.
    pub qos: Vec<QosClassSummary>,
    /// Input records expected from finite pcap inputs (`None`: live or infinite input).
    pub input_records: Option<u64>,
    /// Whether the replay stopped by the idle fallback with records missing.
    pub input_short: bool,
    /// Records of finite pcap inputs that libpcap could not read (cut short by the end of the
    /// file, or longer than the link type allows): counted, not processed.
    pub input_errors: Option<u64>,
    /// Seconds between the start of the workers and the stop.
    pub seconds: f64,
    /// Mbufs still in use after the ports were closed (0 when nothing leaked).
    pub mbufs_in_use_after: u32,
    /// Memory unmapped on EAL's interrupt thread (a memif port's shared rings when its peer
    /// left) after a grace period of the workers ([`crate::dpdk::rcu`]).
    pub unmaps_after_grace: u64,
    /// Of those, grace periods given up after [`crate::dpdk::rcu::GRACE_TIMEOUT`] (0 normally).
    pub grace_timeouts: u64,
    /// Closes of EAL's memory-segment fds left undone ([`crate::dpdk::fdguard`]: a zero-copy
    /// memif port closes them at each connection of a peer).
    pub memseg_closes_refused: u64,
    /// Worker lcores.
    pub workers: usize,
    /// Each worker's poll loop, in worker order (`[[lcore]]` order).
    pub loops: Vec<LoopSummary>,
    /// The TSC's frequency (`rte_get_tsc_hz`), cycles per second: the unit of `loops`' cycles.
    pub tsc_hz: u64,
    /// The aggregator's counters (all workers).
    pub aggregation: crate::agg::AggCounters,
    /// The aggregator's counters of each worker, in worker order (`[[lcore]]` order): how the
    /// collectives' work spreads over the cores (`shard_collectives`).
    pub aggregation_by_worker: Vec<crate::agg::AggCounters>,
    /// Each configured collective's counters, in config order.
    pub collectives: Vec<CollectiveSummary>,
    /// The straggler view of each collective, in config order.
    pub stragglers: Vec<StragglerSummary>,
    /// ARP replies and neighbour advertisements sent for the appliance's addresses.
    pub neighbor_replies: u64,
    /// Packets of other hosts claiming or probing for the appliance's addresses
    /// ([`crate::stats::Counters::address_conflicts`]).
    pub address_conflicts: u64,
}

/// The drops that are losses: packets the appliance did not process for lack of resources (the
/// PMD found no mbuf or no room in its rx queue; no mbuf for a copy, a full tx queue, a full
/// hand-off ring, a full ring to a shaped port's scheduler), as opposed to policy drops (tables,
/// malformed packets, gradient validation, the schedulers' tail and RED drops).
pub const LOSS_REASONS: [&str; 6] = ["rx_nombuf", "imissed", "no_mbuf", "tx_full", "hand_off_full", "qos_ring_full"];

/// Drops by reason: the workers' `counters` and the ports' `rx_nombuf` and `imissed` (summed
/// over `ethdev`, the ports' `rte_eth_stats`); and the losses among them ([`LOSS_REASONS`]).
pub(super) fn drops_and_losses(
    counters: &Counters,
    ethdev: &[PortStats],
) -> (std::collections::BTreeMap<String, u64>, u64) {
    let mut drops: std::collections::BTreeMap<String, u64> =
        crate::stats::Reason::ALL.iter().map(|r| (r.name().to_string(), counters.dropped(*r))).collect();
    drops.insert("rx_nombuf".into(), ethdev.iter().map(|s| s.rx_nombuf).sum());
    drops.insert("imissed".into(), ethdev.iter().map(|s| s.imissed).sum());
    let losses = LOSS_REASONS.iter().map(|r| drops.get(*r).copied().unwrap_or(0)).sum();
    (drops, losses)
}

impl Summary {
    /// The non-zero losses as `reason=count` words (`rx_nombuf=12 hand_off_full=3`).
    fn loss_list(&self) -> String {
        LOSS_REASONS
            .iter()
            .filter_map(|r| self.drops.get(*r).filter(|n| **n > 0).map(|n| format!("{r}={n}")))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Why the run failed, when it did though it ran to its end (exit status 1; the stats are
    /// still printed and written): a finite replay whose input ended short, or that lost
    /// packets for lack of resources. Live runs (`--duration`, live or endless ports) report
    /// their losses but do not fail for them.
    pub fn failure(&self) -> Option<String> {
        if self.input_short {
            let want = self.input_records.unwrap_or(0) + self.input_errors.unwrap_or(0);
            return Some(format!("the replay's input ended short ({want} records and read errors expected)"));
        }
        if self.finite_replay && self.losses > 0 {
            return Some(format!(
                "the replay lost {} packets for lack of resources ({}): its output is incomplete",
                self.losses,
                self.loss_list()
            ));
        }
        None
    }

    /// The human-readable report printed at the end of a run: the port table, the drops and
    /// losses, the tables', counters', meters' and queues' lines, the aggregation lines, and
    /// the run's input and memory lines.
    pub fn report(&self) -> String {
        let mut s = String::new();
        self.write_ports(&mut s);
        self.write_drops(&mut s);
        self.write_pipeline(&mut s);
        if !self.collectives.is_empty() {
            self.write_aggregation(&mut s);
        }
        self.write_run(&mut s);
        s
    }

    /// The title and the port table.
    fn write_ports(&self, s: &mut String) {
        let _ = writeln!(s, "== dpu: final stats ({} worker(s), {:.3} s) ==", self.workers, self.seconds);
        // The port table: one format for its header and its rows.
        macro_rules! port_row {
            ($($cell:expr),* $(,)?) => {
                let _ = writeln!(s, "{:<6} {:<14} {:>12} {:>12} {:>12} {:>12} {:>10}", $($cell),*);
            };
        }
        port_row!("port", "name", "rx pkts", "rx bytes", "tx pkts", "tx bytes", "rx errors");
        for p in &self.ports {
            port_row!(
                p.index,
                p.name,
                p.workers.rx_packets,
                p.workers.rx_bytes,
                p.ethdev.opackets,
                p.ethdev.obytes,
                p.ethdev.ierrors + p.ethdev.rx_nombuf + p.ethdev.imissed
            );
        }
    }

    /// The drops by reason, the losses, and the neighbour and address-conflict counts.
    fn write_drops(&self, s: &mut String) {
        let drops: Vec<String> = self.drops.iter().filter(|(_, n)| **n > 0).map(|(k, n)| format!("{k}={n}")).collect();
        let _ = writeln!(s, "drops: {}", if drops.is_empty() { "none".to_string() } else { drops.join(" ") });
        if self.losses > 0 {
            let _ = writeln!(
                s,
                "losses: {} packets not processed for lack of resources ({})",
                self.losses,
                self.loss_list()
            );
        }
        if self.neighbor_replies > 0 {
            let _ = writeln!(s, "ARP replies and neighbour advertisements sent: {}", self.neighbor_replies);
        }
        if self.address_conflicts > 0 {
            let _ = writeln!(
                s,
                "address conflicts: {} ARP or ND packets from other hosts claimed or probed for the appliance's addresses",
                self.address_conflicts
            );
        }
    }

    /// Table entries, named counters, meters and egress queues.
    fn write_pipeline(&self, s: &mut String) {
        for t in &self.tables {
            let which = t.entry.map(|e| format!("entry {e}")).unwrap_or_else(|| "miss".to_string());
            let _ = writeln!(
                s,
                "table {:<10} {:<9} {:>10} pkts {:>12} bytes",
                t.table, which, t.counter.packets, t.counter.bytes
            );
        }
        for c in &self.counters {
            let _ = writeln!(s, "counter {:<18} {:>10} pkts {:>12} bytes", c.name, c.counter.packets, c.counter.bytes);
        }
        for m in &self.meters {
            let _ = writeln!(
                s,
                "meter {:<20} green {} pkts {} bytes, yellow {} pkts {} bytes, red {} pkts {} bytes",
                m.name, m.green.packets, m.green.bytes, m.yellow.packets, m.yellow.bytes, m.red.packets, m.red.bytes
            );
        }
        for q in &self.qos {
            let _ = writeln!(
                s,
                "qos port {} class {}: enqueued {} pkts {} bytes, sent {} pkts {} bytes, ecn_marked {} pkts, tail_drop {} pkts {} bytes, red_drop {} pkts {} bytes, max depth {} bytes, depth p50/p99/max {}/{}/{} bytes, sojourn p50/p99/max {}/{}/{} us",
                q.port,
                q.class,
                q.enqueued.packets,
                q.enqueued.bytes,
                q.sent.packets,
                q.sent.bytes,
                q.ecn_marked.packets,
                q.tail_drop.packets,
                q.tail_drop.bytes,
                q.red_drop.packets,
                q.red_drop.bytes,
                q.max_depth_bytes,
                q.depth_bytes.p50,
                q.depth_bytes.p99,
                q.depth_bytes.max,
                q.sojourn_us.p50,
                q.sojourn_us.p99,
                q.sojourn_us.max
            );
        }
    }

    /// The aggregator's totals, per worker, per collective, the stragglers and the rate.
    fn write_aggregation(&self, s: &mut String) {
        let a = &self.aggregation;
        let _ = writeln!(
            s,
            "aggregation: {} contributions folded, {} rounds completed, {} results sent, {} resends, {} NAKs ({} suppressed), {} slot timeouts, {} probes ({} statuses sent)",
            a.folded, a.completed, a.results, a.resends, a.naks, a.naks_suppressed, a.slot_timeouts, a.probes, a.statuses
        );
        if self.workers > 1 {
            let _ = writeln!(
                s,
                "aggregation: {} packets handed off to the worker owning their collective (or chunk)",
                a.handed_off
            );
            let per: Vec<String> = self
                .aggregation_by_worker
                .iter()
                .enumerate()
                .map(|(w, a)| format!("worker {w} {} folded, {} completed", a.folded, a.completed))
                .collect();
            let _ = writeln!(s, "aggregation by worker: {}", per.join("; "));
        }
        for c in &self.collectives {
            let drop = |r: &str| c.drops.get(r).copied().unwrap_or(0);
            let refused: u64 = c.drops.values().sum::<u64>()
                - drop("grad_stale_round")
                - drop("grad_duplicate")
                - drop("grad_not_member");
            let _ = writeln!(
                s,
                "collective {}: {} rounds completed, {} contributions folded ({} bytes), {} results sent, {} resends, {} NAKs ({} suppressed), {} slot timeouts, {} probes ({} statuses sent); dropped {} stale, {} duplicate, {} spoofed, {} other refused; {} slots in use",
                c.collective,
                c.completed,
                c.folded,
                c.payload_bytes,
                c.results,
                c.resends,
                c.naks,
                c.naks_suppressed,
                c.slot_timeouts,
                c.probes,
                c.statuses,
                drop("grad_stale_round"),
                drop("grad_duplicate"),
                drop("grad_not_member"),
                refused,
                c.slots_in_use
            );
        }
        for c in &self.stragglers {
            let Some(slow) = c.slowest_rank else { continue };
            let completed: u64 = c.ranks.iter().map(|r| r.completed_last).sum();
            let r = &c.ranks[slow as usize];
            let _ = writeln!(
                s,
                "stragglers: collective {}: rank {slow} completed {} of {completed} rounds (came last); its contributions came {:.0} µs after their round's first on average (p99 {} µs)",
                c.collective, r.completed_last, r.late_mean_us, r.late_p99_us
            );
        }
        if self.seconds > 0.0 {
            let _ = writeln!(
                s,
                "aggregation rate: {:.3} Mpps of contributions, {:.3} Gbit/s of payload",
                a.folded as f64 / self.seconds / 1e6,
                a.payload_bytes as f64 * 8.0 / self.seconds / 1e9
            );
        }
    }

    /// The replay's input records, the memory events and the mbufs left after shutdown.
    fn write_run(&self, s: &mut String) {
        if let Some(n) = self.input_records {
            let errors = match self.input_errors {
                Some(e) if e > 0 => format!(", {e} unreadable (counted in rx errors, not processed)"),
                _ => String::new(),
            };
            let _ = writeln!(s, "input: {n} records{errors}{}", if self.input_short { " (ended short)" } else { "" });
        }
        if self.unmaps_after_grace > 0 {
            let _ = writeln!(
                s,
                "peer memory unmapped after the workers' grace period: {} time(s), {} timed out",
                self.unmaps_after_grace, self.grace_timeouts
            );
        }
        if self.memseg_closes_refused > 0 {
            let _ = writeln!(s, "memory-segment fd closes kept open: {}", self.memseg_closes_refused);
        }
        for (w, l) in self.loops.iter().enumerate() {
            let per = l.cycles_per_packet().map_or("-".to_string(), |c| format!("{c:.1}"));
            let _ = writeln!(
                s,
                "worker {w}: {} of {} poll turns busy, {} bursts of {} packets, {per} TSC cycles per packet",
                l.busy_polls,
                l.busy_polls + l.idle_polls,
                l.bursts,
                l.rx_packets,
            );
        }
        let _ = writeln!(s, "mbufs in use after shutdown: {}", self.mbufs_in_use_after);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Reason;

    /// A finite replay's summary with these worker counters and ports' stats.
    fn summary(counters: &Counters, ethdev: &[PortStats]) -> Summary {
        let (drops, losses) = drops_and_losses(counters, ethdev);
        Summary {
            ports: Vec::new(),
            drops,
            losses,
            finite_replay: true,
            tables: Vec::new(),
            counters: Vec::new(),
            meters: Vec::new(),
            qos: Vec::new(),
            input_records: Some(100),
            input_short: false,
            input_errors: Some(0),
            seconds: 0.5,
            mbufs_in_use_after: 0,
            unmaps_after_grace: 0,
            grace_timeouts: 0,
            memseg_closes_refused: 0,
            workers: 2,
            loops: Vec::new(),
            tsc_hz: 0,
            aggregation: Default::default(),
            aggregation_by_worker: Vec::new(),
            collectives: Vec::new(),
            stragglers: Vec::new(),
            neighbor_replies: 0,
            address_conflicts: 0,
        }
    }

    #[test]
    fn each_worker_loop_has_a_line_with_its_cycles_per_packet() {
        let mut s = summary(&Counters::new(1), &[]);
        let busy = crate::live::LoopStats {
            busy_polls: 3,
            idle_polls: 7,
            bursts: 4,
            burst_cycles: 5000,
            ..Default::default()
        };
        s.loops = vec![LoopSummary::new(&busy, 40), LoopSummary::new(&crate::live::LoopStats::default(), 9)];
        assert_eq!(s.loops[0].cycles_per_packet(), Some(125.0));
        assert_eq!(s.loops[1].cycles_per_packet(), None, "no bursts counted (a lockstep replay)");
        let r = s.report();
        assert!(
            r.contains("worker 0: 3 of 10 poll turns busy, 4 bursts of 40 packets, 125.0 TSC cycles per packet\n"),
            "{r}"
        );
        assert!(
            r.contains("worker 1: 0 of 0 poll turns busy, 0 bursts of 9 packets, - TSC cycles per packet\n"),
            "{r}"
        );
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["loops"][0]["burst_cycles"], 5000);
        assert_eq!(json["loops"][0]["rx_packets"], 40);
    }

    #[test]
    fn losses_show_in_the_drops_line_and_fail_a_finite_replay() {
        let mut c = Counters::new(2);
        c.drop_n(Reason::GradDuplicate, 5); // policy, not a loss
        c.drop_n(Reason::TableMiss, 2); // policy
        c.drop_n(Reason::HandOffFull, 3);
        c.drop_n(Reason::TxFull, 4);
        c.drop_n(Reason::NoMbuf, 1);
        let ethdev = [
            PortStats { rx_nombuf: 7, imissed: 2, ierrors: 9, ..Default::default() },
            PortStats { rx_nombuf: 10, ..Default::default() },
        ];
        let s = summary(&c, &ethdev);
        assert_eq!(s.losses, 3 + 4 + 1 + 17 + 2, "ierrors (unreadable records) and policy drops are not losses");
        assert_eq!(s.drops["rx_nombuf"], 17);
        assert_eq!(s.drops["imissed"], 2);
        let r = s.report();
        assert!(
            r.contains(
                "drops: grad_duplicate=5 hand_off_full=3 imissed=2 no_mbuf=1 rx_nombuf=17 table_miss=2 tx_full=4\n"
            ),
            "{r}"
        );
        assert!(
            r.contains(
                "losses: 27 packets not processed for lack of resources (rx_nombuf=17 imissed=2 no_mbuf=1 tx_full=4 \
                 hand_off_full=3)\n"
            ),
            "{r}"
        );
        let why = s.failure().expect("a finite replay with losses fails");
        assert!(
            why.contains("lost 27 packets") && why.contains("rx_nombuf=17") && why.contains("hand_off_full=3"),
            "{why}"
        );
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["losses"], 27);
        assert_eq!(json["drops"]["rx_nombuf"], 17);
        assert_eq!(json["drops"]["hand_off_full"], 3);
        // A live run (or --duration) reports them and keeps its exit status.
        let live = Summary { finite_replay: false, ..s };
        assert!(live.report().contains("losses: 27 "));
        assert_eq!(live.failure(), None);
    }

    #[test]
    fn policy_drops_alone_neither_print_losses_nor_fail() {
        let mut c = Counters::new(1);
        c.drop_n(Reason::GradDuplicate, 5);
        c.drop_n(Reason::BadUdpChecksum, 1);
        let s = summary(&c, &[PortStats { ierrors: 3, ..Default::default() }]);
        assert_eq!(s.losses, 0);
        let r = s.report();
        assert!(r.contains("drops: bad_udp_checksum=1 grad_duplicate=5\n"), "{r}");
        assert!(!r.contains("losses"), "{r}");
        assert_eq!(s.failure(), None);
        let short = Summary { input_short: true, ..s };
        assert!(short.failure().unwrap().contains("ended short"));
    }
}
