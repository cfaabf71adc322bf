//! The end of a run: the workers' counters and tables summed, the ports' final stats read and
//! the ports stopped and closed.

use super::start::ResultSlot;
use super::{AppError, CounterSummary, EntrySummary, MeterSummary, Percentiles, QosClassSummary};
use crate::agg::straggle::RankLateness;
use crate::agg::{AggCounters, CollCounters};
use crate::datapath::PortEgress;
use crate::dpdk::lcore::LcoreHandle;
use crate::dpdk::{CumulativeStats, Port, PortStats};
use crate::outputs::Staged;
use crate::sched::{ClassCounters, ClassHistograms, PktBytes};
use crate::stats::{Counter, Counters};
use crate::table::{Pipeline, PipelineState};

/// A port's non-zero extended stats (`rte_eth_xstats_get`): (name, value).
pub(super) type Xstats = Vec<(String, u64)>;

/// What the workers counted, summed over them.
pub(super) struct Totals {
    /// Packet counters.
    pub counters: Counters,
    /// Aggregation counters.
    pub agg: AggCounters,
    /// Aggregation counters per worker, in worker order.
    pub agg_by_worker: Vec<AggCounters>,
    /// Each collective's counters, in config order.
    pub collectives: Vec<super::CollectiveSummary>,
    /// The straggler view of each collective.
    pub stragglers: Vec<super::StragglerSummary>,
    /// Every table entry's counter, and each table's miss counter (`entry: None`).
    pub tables: Vec<EntrySummary>,
    /// The named counters.
    pub named: Vec<CounterSummary>,
    /// Each meter's packets and bytes per colour.
    pub meters: Vec<MeterSummary>,
    /// Each egress scheduler class's counters and distributions.
    pub qos: Vec<QosClassSummary>,
    /// Each worker's poll loop, in worker order.
    pub loops: Vec<super::LoopSummary>,
}

/// Sums the datapaths the workers left in `results` (`ports` ports).
pub(super) fn collect(results: &[ResultSlot], ports: usize) -> Totals {
    let mut total = Counters::new(ports as u16);
    let mut pipeline: Option<(Pipeline, PipelineState)> = None;
    let mut agg = AggCounters::default();
    let mut agg_by_worker = Vec::with_capacity(results.len());
    let mut late = Late::default();
    let mut colls: Vec<(u16, CollCounters, u64)> = Vec::new();
    let mut qos = QosTotals::default();
    let mut loops = Vec::with_capacity(results.len());
    for r in results {
        if let Some((dp, stats)) = r.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let rx = dp.counters.ports.iter().map(|p| p.rx_packets).sum();
            loops.push(super::LoopSummary::new(&stats, rx));
            total.add(&dp.counters);
            qos.add(&dp.egress);
            agg_by_worker.push(dp.agg.as_ref().map(|a| a.counters).unwrap_or_default());
            if let Some(a) = &dp.agg {
                agg.add(&a.counters);
                late.add(a);
                for (i, (id, c, in_use)) in a.collectives().enumerate() {
                    if colls.len() <= i {
                        colls.push((id, CollCounters::default(), 0));
                    }
                    colls[i].1.add(c);
                    colls[i].2 += in_use;
                }
            }
            match &mut pipeline {
                Some((_, sum)) => sum.add(&dp.pipeline_state),
                None => pipeline = Some((dp.pipeline, dp.pipeline_state)),
            }
        }
    }
    let (tables, named, meters) = match &pipeline {
        Some((p, sum)) => (entry_summaries(p, sum), named_summaries(p, sum), meter_summaries(p, sum)),
        None => (Vec::new(), Vec::new(), Vec::new()),
    };
    let collectives = colls.into_iter().map(|(id, c, in_use)| super::CollectiveSummary::new(id, &c, in_use)).collect();
    Totals {
        counters: total,
        agg,
        agg_by_worker,
        collectives,
        tables,
        named,
        meters,
        qos: qos.summaries(),
        stragglers: late.summaries(),
        loops,
    }
}

/// Per collective (in config order): its id and each rank's lateness, summed over the workers
/// (only the owner of a collective records any, or the workers holding a sharded one's chunks).
#[derive(Default)]
struct Late(Vec<(u16, Vec<RankLateness>)>);

impl Late {
    fn add(&mut self, a: &crate::agg::Aggregator) {
        for (i, (id, ranks, late)) in a.stragglers().enumerate() {
            if self.0.len() <= i {
                self.0.push((id, vec![RankLateness::default(); ranks]));
            }
            for (sum, l) in self.0[i].1.iter_mut().zip(late) {
                sum.add(l);
            }
        }
    }

    fn summaries(self) -> Vec<super::StragglerSummary> {
        self.0
            .into_iter()
            .map(|(collective, ranks)| {
                let slowest = ranks
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| r.completed_last > 0)
                    .max_by_key(|(_, r)| r.completed_last);
                super::StragglerSummary {
                    collective,
                    slowest_rank: slowest.map(|(i, _)| i as u16),
                    ranks: ranks
                        .iter()
                        .enumerate()
                        .map(|(i, r)| super::RankSummary {
                            rank: i as u16,
                            contributions: r.contributions,
                            completed_last: r.completed_last,
                            late_mean_us: if r.contributions > 0 {
                                r.late_sum_us as f64 / r.contributions as f64
                            } else {
                                0.0
                            },
                            late_p50_us: r.late.quantile(0.5),
                            late_p99_us: r.late.quantile(0.99),
                            late_max_us: r.late.quantile(1.0),
                        })
                        .collect(),
                }
            })
            .collect()
    }
}

/// Per (port, class): the workers' scheduler counters and histograms, summed.
#[derive(Default)]
struct QosTotals {
    classes: Vec<(usize, usize, ClassCounters, Option<ClassHistograms>)>,
}

impl QosTotals {
    /// Adds one worker's schedulers.
    fn add<B: crate::buf::PacketBuf>(&mut self, egress: &[Option<Box<PortEgress<B>>>]) {
        for (port, e) in egress.iter().enumerate() {
            let Some(e) = e else { continue };
            for c in 0..e.sched.classes() {
                let i = match self.classes.iter().position(|(p, k, ..)| (*p, *k) == (port, c)) {
                    Some(i) => i,
                    None => {
                        self.classes.push((port, c, ClassCounters::default(), None));
                        self.classes.len() - 1
                    }
                };
                let (_, _, cnt, hist) = &mut self.classes[i];
                cnt.merge(&e.sched.counters(c));
                if let Some(h) = e.sched.histograms(c) {
                    match hist {
                        Some(sum) => {
                            // Same bounds on every worker: adding cannot fail.
                            let _ = sum.depth_bytes.add(&h.depth_bytes);
                            let _ = sum.sojourn_ticks.add(&h.sojourn_ticks);
                        }
                        None => *hist = Some(h),
                    }
                }
            }
        }
    }

    fn summaries(self) -> Vec<QosClassSummary> {
        let pb = |p: &PktBytes| Counter { packets: p.pkts, bytes: p.bytes };
        let pct = |h: Option<&hdrhistogram::Histogram<u64>>| match h {
            Some(h) if !h.is_empty() => {
                Percentiles { p50: h.value_at_quantile(0.5), p99: h.value_at_quantile(0.99), max: h.max() }
            }
            _ => Percentiles::default(),
        };
        self.classes
            .into_iter()
            .map(|(port, class, c, h)| QosClassSummary {
                port,
                class,
                enqueued: pb(&c.enqueued),
                sent: pb(&c.sent),
                ecn_marked: pb(&c.ecn_marked),
                tail_drop: pb(&c.tail_drop),
                red_drop: pb(&c.red_drop),
                max_depth_bytes: c.max_depth_bytes,
                depth_bytes: pct(h.as_ref().map(|h| &h.depth_bytes)),
                // The schedulers' clock is µs (hz 1e6): ticks are µs.
                sojourn_us: pct(h.as_ref().map(|h| &h.sojourn_ticks)),
            })
            .collect()
    }
}

/// Each table entry's counter and each table's miss counter (after the entries), from the
/// workers' summed counts `sum` of `pipeline`.
fn entry_summaries(pipeline: &Pipeline, sum: &PipelineState) -> Vec<EntrySummary> {
    let mut out = Vec::new();
    for (i, t) in pipeline.tables.iter().enumerate() {
        for (e, c) in sum.entries(i).iter().enumerate() {
            out.push(EntrySummary { table: t.name.clone(), entry: Some(e), counter: *c });
        }
        out.push(EntrySummary { table: t.name.clone(), entry: None, counter: sum.miss(i) });
    }
    out
}

/// Each meter's colours, summed over the workers, in the config's order.
fn meter_summaries(pipeline: &Pipeline, sum: &PipelineState) -> Vec<MeterSummary> {
    pipeline
        .meters
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let [green, yellow, red] = sum.meter_colors(i);
            MeterSummary { name: m.name.clone(), green, yellow, red }
        })
        .collect()
}

/// The named counters, summed over the workers, in the pipeline's order.
fn named_summaries(pipeline: &Pipeline, sum: &PipelineState) -> Vec<CounterSummary> {
    pipeline
        .counter_names
        .iter()
        .zip(&sum.named)
        .map(|(name, counter)| CounterSummary { name: name.clone(), counter: *counter })
        .collect()
}

/// Reads the ports' final stats (`rte_eth_stats`, added to what was `seen` during the run
/// across the PMD's resets, [`CumulativeStats`];
/// the non-zero xstats, and each tx queue's count into `staged`), then stops and closes them
/// (`workers`: tx queues per port).
pub(super) fn stop_ports(
    mut ports: Vec<Port>,
    workers: usize,
    staged: &mut Staged,
    seen: &[CumulativeStats],
) -> Result<(Vec<PortStats>, Vec<Xstats>), AppError> {
    let ethdev: Vec<PortStats> = ports
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut s = seen.get(i).copied().unwrap_or_else(|| CumulativeStats::new(PortStats::default()));
            s.update(p.stats());
            s.total()
        })
        .collect();
    let xstats: Vec<Xstats> = ports.iter().map(|p| p.xstats().into_iter().filter(|(_, v)| *v != 0).collect()).collect();
    for (i, p) in ports.iter().enumerate() {
        for q in 0..workers as u16 {
            staged.set_sent(i, q, p.tx_queue_stats(q));
        }
    }
    for p in ports.iter_mut() {
        p.stop()?;
    }
    drop(ports); // rte_eth_dev_close: frees the rx rings' mbufs
    Ok((ethdev, xstats))
}

/// Waits for every worker to return; returns the panics, as `worker lcore N panicked: why`.
pub(super) fn join_workers(handles: Vec<LcoreHandle>) -> Vec<String> {
    let mut panics = Vec::new();
    for h in handles {
        let lc = h.lcore();
        if let Err(msg) = h.join() {
            panics.push(format!("worker lcore {lc} panicked: {msg}"));
        }
    }
    panics
}
