//! What a run reports: the line per second, and the final summary as a table, JSON and CSV.
//!
//! Rates: tx rates are packets and bytes the tx queues took over the lanes' sending time;
//! rx rates are packets received over the time from the first to the last arrival (what the
//! receiver measured). Gbit/s count frames at the stream's layer (L2: without FCS; L1: 24
//! bytes more per frame). Latency is the receive TSC minus the stamp's, in µs.

use super::config::{Layer, Loaded, Rate, Stream};
use crate::stream::{Kind, L1_OVERHEAD};
use dataplane::dpdk::PortStats;
use hdrhistogram::Histogram;
use serde::Serialize;

/// Sums over every stream and lane.
#[derive(Debug, Default, Clone, Copy)]
pub struct Totals {
    /// Packets.
    pub packets: u64,
    /// Bytes (frames without FCS).
    pub bytes: u64,
    /// Tx-full retries.
    pub tx_full: u64,
    /// Failed bulk mbuf allocations.
    pub nombuf: u64,
    /// Missed by the sequence numbers so far (the summary's `seqloss`: per lane, one past the
    /// highest seen minus the number received; not sent minus received).
    pub seq_lost: u64,
    /// Arrived after a higher sequence number.
    pub reordered: u64,
}

/// Latency percentiles (µs).
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Latency {
    /// Smallest.
    pub min_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Largest.
    pub max_us: f64,
    /// Mean.
    pub mean_us: f64,
}

impl Latency {
    /// The latencies recorded in `h` (ns) as µs; `None` when `h` is empty.
    pub fn of(h: &Histogram<u64>) -> Option<Latency> {
        (!h.is_empty()).then(|| Latency {
            min_us: h.min() as f64 / 1e3,
            p50_us: h.value_at_quantile(0.5) as f64 / 1e3,
            p99_us: h.value_at_quantile(0.99) as f64 / 1e3,
            p999_us: h.value_at_quantile(0.999) as f64 / 1e3,
            max_us: h.max() as f64 / 1e3,
            mean_us: h.mean() / 1e3,
        })
    }

    /// The CSV cells of `lat` (µs): min, p50, p99, p99.9, max and mean; empty cells for `None`.
    pub fn csv_cells(lat: Option<Latency>) -> [String; 6] {
        let l = lat.map(|l| [l.min_us, l.p50_us, l.p99_us, l.p999_us, l.max_us, l.mean_us]);
        core::array::from_fn(|i| l.map_or(String::new(), |l| format!("{}", l[i])))
    }
}

/// Appends a CSV row of `cells` and a newline to `out`, quoting the cells that hold a comma.
pub fn push_csv_row(out: &mut String, cells: impl IntoIterator<Item = String>) {
    let cells: Vec<String> = cells.into_iter().map(|c| if c.contains(',') { format!("\"{c}\"") } else { c }).collect();
    *out += &cells.join(",");
    out.push('\n');
}

/// The send side of one stream.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct TxSide {
    /// Packets the tx queues took.
    pub packets: u64,
    /// Their bytes (without FCS).
    pub bytes: u64,
    /// Seconds (TSC) the lanes sent for: from the first lane's start to the last one's stop.
    pub seconds: f64,
    /// `rte_eth_tx_burst` calls that took only part of a burst (the rest was retried).
    pub tx_full: u64,
    /// Bulk mbuf allocations that failed.
    pub nombuf: u64,
}

/// The receive side of one stream.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct RxSide {
    /// Packets received with the stream's stamp.
    pub packets: u64,
    /// Their bytes (without FCS).
    pub bytes: u64,
    /// Seconds from the first to the last arrival.
    pub seconds: f64,
    /// Packets missing from the sequence numbers (per lane: one past the highest received
    /// minus the number received).
    pub seq_lost: u64,
    /// Packets that arrived after one with a higher sequence number.
    pub reordered: u64,
    /// Packets received with ECN CE (RFC 3168: a queue on the way marked them).
    pub ce_marked: u64,
    /// RoCEv2 CNPs received for the stream's QPs (IBTA Annex A17.9.3: the receiver saw CE).
    pub cnps: u64,
    /// Latency, if any packet arrived.
    pub latency: Option<Latency>,
}

/// A pcap stream's replay.
#[derive(Debug, Clone, Serialize)]
pub struct ReplaySide {
    /// The capture file.
    pub file: String,
    /// Passes over the file asked for (0: until the run ended).
    pub loops: u64,
    /// Timing-faithful speed factor (`None`: full or set rate).
    pub speed: Option<f64>,
    /// Frames in the file (it is read through as the config loads; a cut last record is not
    /// one).
    pub frames_in_file: Option<u64>,
    /// Distinct frame lengths sent from the file (those the tx queues took: part of the file's
    /// when the run is cut short; the stream's `sizes` lists them when there are at most [`super::replay::MAX_LISTED_SIZES`], else is empty).
    pub distinct_sizes: u64,
    /// Captured frames too long for the mbufs, not sent.
    pub skipped: u64,
    /// Records that could not be read (a last record cut short by the end of the file, once
    /// per pass), not sent.
    pub unreadable: u64,
    /// Why the replay stopped early (the file became unreadable while it ran), if it did.
    pub error: Option<String>,
}

/// One stream's summary.
#[derive(Debug, Clone, Serialize)]
pub struct StreamSummary {
    /// Its name.
    pub name: String,
    /// `udp` or `rocev2`.
    pub kind: Kind,
    /// Tx port name.
    pub port: String,
    /// Rx port name, if received.
    pub rx_port: Option<String>,
    /// Frame lengths (bytes without FCS): the configured ones; for a pcap stream those sent.
    pub sizes: Vec<usize>,
    /// Flows.
    pub flows: u32,
    /// The layer of the Gbit/s figures.
    pub layer: Layer,
    /// Target packets/s (`None`: full rate, or a bit rate).
    pub target_pps: Option<f64>,
    /// Target bit/s at `layer` (`None`: full rate, or a packet rate).
    pub target_bps: Option<f64>,
    /// What was sent.
    pub tx: TxSide,
    /// Packets per second sent.
    pub tx_pps: f64,
    /// Gbit/s sent at `layer`.
    pub tx_gbps: f64,
    /// Achieved over target, in the target's unit (`None` at full rate).
    pub tx_vs_target: Option<f64>,
    /// What was received, if the stream has a receive port.
    pub rx: Option<RxSide>,
    /// Packets per second received (over the arrival window).
    pub rx_pps: Option<f64>,
    /// Gbit/s received at `layer`.
    pub rx_gbps: Option<f64>,
    /// Packets sent and not received (`tx.packets - rx.packets`, 0 when more arrived).
    pub lost: Option<u64>,
    /// A pcap stream's replay.
    pub replay: Option<ReplaySide>,
    /// The latency distribution as `[µs, fraction of packets at or below it]` points, ascending
    /// (HDR histogram quantile iteration, 8 steps per halving of the tail; the last point is the
    /// maximum at 1.0); empty when nothing arrived. What `tools/plot_pktgen.py` draws.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub latency_cdf: Vec<[f64; 2]>,
    /// The rate changes made while the run went (`rate NAME VALUE`), in order; then
    /// `target_pps`/`target_bps` is the last one and `tx_vs_target` compares with the target's
    /// mean over the sending time. Empty (and absent from the JSON) when none was made.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rate_changes: Vec<RateChange>,
}

/// A change of a stream's rate while the run went.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct RateChange {
    /// Seconds after the stream's first send.
    pub at_s: f64,
    /// The new rate, in the stream's unit (packets/s or bits/s at its layer).
    pub rate: f64,
}

fn gbps(bytes: u64, packets: u64, layer: Layer, seconds: f64) -> f64 {
    if seconds <= 0.0 {
        return 0.0;
    }
    let b = match layer {
        Layer::L2 => bytes,
        Layer::L1 => bytes + packets * L1_OVERHEAD,
    };
    b as f64 * 8.0 / seconds / 1e9
}

impl StreamSummary {
    /// From a stream's config and its counters.
    pub fn new(s: &Stream, port_names: &[String], tx: TxSide, rx: Option<RxSide>) -> StreamSummary {
        let (target_pps, target_bps) = match s.rate {
            Rate::Full => (None, None),
            Rate::Pps(p) => (Some(p), None),
            Rate::Bps(b, _) => (None, Some(b)),
        };
        let tx_pps = if tx.seconds > 0.0 { tx.packets as f64 / tx.seconds } else { 0.0 };
        let tx_gbps = gbps(tx.bytes, tx.packets, s.layer, tx.seconds);
        let tx_vs_target = match s.rate {
            Rate::Full => None,
            Rate::Pps(p) => Some(tx_pps / p),
            Rate::Bps(b, _) => Some(tx_gbps * 1e9 / b),
        };
        // Over the arrival window: n arrivals span n - 1 gaps.
        let rx_pps = rx.map(|r| if r.seconds > 0.0 { (r.packets - 1) as f64 / r.seconds } else { 0.0 });
        let rx_gbps = rx.map(|r| {
            if r.packets > 1 {
                let per = (r.bytes as f64) / r.packets as f64;
                let bytes = (per * (r.packets - 1) as f64) as u64;
                gbps(bytes, r.packets - 1, s.layer, r.seconds)
            } else {
                0.0
            }
        });
        StreamSummary {
            name: s.name.clone(),
            kind: s.spec.kind,
            port: port_names[s.port as usize].clone(),
            rx_port: s.rx_port.map(|p| port_names[p as usize].clone()),
            sizes: s.sizes.clone(),
            flows: s.spec.flows,
            layer: s.layer,
            target_pps,
            target_bps,
            tx,
            tx_pps,
            tx_gbps,
            tx_vs_target,
            rx,
            rx_pps,
            rx_gbps,
            lost: rx.map(|r| tx.packets.saturating_sub(r.packets)),
            replay: None,
            latency_cdf: Vec::new(),
            rate_changes: Vec::new(),
        }
    }

    /// The target changed during the run (`(seconds after the first send, rate)`, in order):
    /// the last rate becomes the target shown, and `tx_vs_target` is the achieved rate over
    /// the target's mean over the sending time ([`mean_rate`]). A stream at full rate has no
    /// target to change.
    pub fn with_rate_changes(&mut self, changes: &[(f64, f64)]) {
        let Some(&(_, last)) = changes.last() else { return };
        let (target, achieved) = match (&mut self.target_pps, &mut self.target_bps) {
            (Some(t), _) => (t, self.tx_pps),
            (None, Some(t)) => (t, self.tx_gbps * 1e9),
            (None, None) => return,
        };
        let mean = mean_rate(*target, changes, self.tx.seconds);
        *target = last;
        if mean > 0.0 {
            self.tx_vs_target = Some(achieved / mean);
        }
        self.rate_changes = changes.iter().map(|&(at_s, rate)| RateChange { at_s, rate }).collect();
    }
}

/// The mean over `0..seconds` of a rate that was `first` until the changes `changes`
/// (`(seconds, rate)`, in order; times outside the window count from or to its ends); the last
/// rate when `seconds` is 0.
pub fn mean_rate(first: f64, changes: &[(f64, f64)], seconds: f64) -> f64 {
    if seconds <= 0.0 {
        return changes.last().map_or(first, |c| c.1);
    }
    let (mut at, mut rate, mut sum) = (0.0, first, 0.0);
    for &(t, r) in changes {
        let t = t.clamp(0.0, seconds);
        sum += rate * (t - at);
        (at, rate) = (t, r);
    }
    sum += rate * (seconds - at);
    sum / seconds
}

/// A port's counters at the end (`rte_eth_stats_get`).
#[derive(Debug, Clone, Serialize)]
pub struct PortSummary {
    /// Its name.
    pub name: String,
    /// Its counters.
    pub stats: PortStats,
}

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Seconds (TSC) from before the tx lanes and emulations were launched to once they had
    /// stopped (before the drain): at least every stream's `tx.seconds`.
    pub seconds: f64,
    /// TSC cycles per second.
    pub tsc_hz: u64,
    /// The tx lcores.
    pub tx_lcores: Vec<u32>,
    /// Packets per burst.
    pub burst: u16,
    /// The stamps' offset into the past (µs; 0 but in tests of the latency path).
    pub stamp_offset_us: u64,
    /// Per stream.
    pub streams: Vec<StreamSummary>,
    /// Per port.
    pub ports: Vec<PortSummary>,
    /// Frames received on the receive ports without a known stamp (CNPs apart).
    pub rx_other: u64,
    /// RoCEv2 CNPs received, whatever QP they name.
    pub rx_cnps: u64,
    /// The AllReduce emulations.
    pub allreduce: Vec<super::allreduce::AllreduceSummary>,
}

impl Summary {
    /// Why the run failed, if an AllReduce emulation did (wrong results, slots refused by NAKs,
    /// rounds that did not complete).
    pub fn failure(&self) -> Option<String> {
        let v: Vec<String> = self.allreduce.iter().filter_map(|a| a.failure()).collect();
        (!v.is_empty()).then(|| v.join("; "))
    }
}

fn opt(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "-".to_string(), |x| format!("{x:.prec$}"))
}

fn target_text(s: &StreamSummary) -> String {
    if let Some(sp) = s.replay.as_ref().and_then(|r| r.speed) {
        return format!("capture x{sp}");
    }
    match (s.target_pps, s.target_bps) {
        (Some(p), _) => format!("{:.4} Mpps", p / 1e6),
        (_, Some(b)) => format!("{:.3} Gb/s", b / 1e9),
        _ => "full".to_string(),
    }
}

/// The summary as a text table, one row per stream, then the shortfall and the latency.
pub fn table(s: &Summary) -> String {
    let mut out =
        format!("== pktgen: summary ({:.3} s, {} tx lcore(s), burst {})\n", s.seconds, s.tx_lcores.len(), s.burst);
    if !s.allreduce.is_empty() {
        out += &super::allreduce::table(&s.allreduce);
        out.push('\n');
        if s.streams.is_empty() {
            return out.trim_end().to_string();
        }
    }
    out += &format!(
        "{:<12} {:>6} {:>12} {:>12} {:>10} {:>9} {:>12} {:>10} {:>9} {:>9} {:>8} {:>9}\n",
        "stream",
        "kind",
        "target",
        "tx pkts",
        "tx Mpps",
        "tx Gb/s",
        "rx pkts",
        "rx Mpps",
        "rx Gb/s",
        "lost",
        "seqloss",
        "reorder"
    );
    for st in &s.streams {
        let rx = st.rx.as_ref();
        out += &format!(
            "{:<12} {:>6} {:>12} {:>12} {:>10.4} {:>9.3} {:>12} {:>10} {:>9} {:>9} {:>8} {:>9}\n",
            st.name,
            match st.kind {
                Kind::Udp => "udp",
                Kind::Rocev2 => "rocev2",
                Kind::Pcap => "pcap",
            },
            target_text(st),
            st.tx.packets,
            st.tx_pps / 1e6,
            st.tx_gbps,
            rx.map_or("-".into(), |r| r.packets.to_string()),
            opt(st.rx_pps.map(|x| x / 1e6), 4),
            opt(st.rx_gbps, 3),
            st.lost.map_or("-".into(), |x| x.to_string()),
            rx.map_or("-".into(), |r| r.seq_lost.to_string()),
            rx.map_or("-".into(), |r| r.reordered.to_string()),
        );
    }
    out += "shortfall: stream, achieved/target (tx), tx-full retries, mbuf allocation failures\n";
    for st in &s.streams {
        out += &format!(
            "  {:<12} {:>8} {:>10} {:>10}\n",
            st.name,
            st.tx_vs_target.map_or("full".into(), |x| format!("{:.2}%", x * 100.0)),
            st.tx.tx_full,
            st.tx.nombuf
        );
    }
    out += "latency (µs): stream, min, p50, p99, p99.9, max\n";
    for st in &s.streams {
        if let Some(l) = st.rx.and_then(|r| r.latency) {
            out += &format!(
                "  {:<12} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2}\n",
                st.name, l.min_us, l.p50_us, l.p99_us, l.p999_us, l.max_us
            );
        }
    }
    let marked: Vec<&StreamSummary> =
        s.streams.iter().filter(|st| st.rx.is_some_and(|r| r.ce_marked > 0 || r.cnps > 0)).collect();
    if !marked.is_empty() || s.rx_cnps > 0 {
        out += "congestion: stream, received CE-marked, CNPs received\n";
        for st in marked {
            let r = st.rx.expect("filtered");
            out += &format!("  {:<12} {:>12} {:>12}\n", st.name, r.ce_marked, r.cnps);
        }
        if s.rx_cnps > 0 {
            out += &format!("  CNPs in all: {}\n", s.rx_cnps);
        }
    }
    if s.rx_other > 0 {
        out += &format!("rx: {} frames without a stamp of this run\n", s.rx_other);
    }
    out.trim_end().to_string()
}

/// The CSV columns.
pub const CSV_HEADER: &str = "stream,kind,port,rx_port,sizes,flows,layer,target_pps,target_bps,tx_packets,tx_bytes,\
tx_seconds,tx_pps,tx_gbps,tx_vs_target,tx_full,nombuf,rx_packets,rx_bytes,rx_seconds,rx_pps,rx_gbps,lost,seq_lost,\
reordered,lat_min_us,lat_p50_us,lat_p99_us,lat_p999_us,lat_max_us,lat_mean_us,ce_marked,cnps";

/// The summary as CSV: [`CSV_HEADER`], then one row per stream (empty cells for what does not
/// apply; sizes joined by `;`).
pub fn csv(s: &Summary) -> String {
    let o = |v: Option<f64>| v.map_or(String::new(), |x| format!("{x}"));
    let u = |v: Option<u64>| v.map_or(String::new(), |x| x.to_string());
    let mut out = String::from(CSV_HEADER);
    out.push('\n');
    for st in &s.streams {
        let rx = st.rx.as_ref();
        let lat = rx.and_then(|r| r.latency);
        let cells = [
            st.name.clone(),
            match st.kind {
                Kind::Udp => "udp".into(),
                Kind::Rocev2 => "rocev2".into(),
                Kind::Pcap => "pcap".into(),
            },
            st.port.clone(),
            st.rx_port.clone().unwrap_or_default(),
            st.sizes.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(";"),
            st.flows.to_string(),
            match st.layer {
                Layer::L2 => "l2".into(),
                Layer::L1 => "l1".into(),
            },
            o(st.target_pps),
            o(st.target_bps),
            st.tx.packets.to_string(),
            st.tx.bytes.to_string(),
            st.tx.seconds.to_string(),
            st.tx_pps.to_string(),
            st.tx_gbps.to_string(),
            o(st.tx_vs_target),
            st.tx.tx_full.to_string(),
            st.tx.nombuf.to_string(),
            u(rx.map(|r| r.packets)),
            u(rx.map(|r| r.bytes)),
            o(rx.map(|r| r.seconds)),
            o(st.rx_pps),
            o(st.rx_gbps),
            u(st.lost),
            u(rx.map(|r| r.seq_lost)),
            u(rx.map(|r| r.reordered)),
        ];
        let ecn = [u(rx.map(|r| r.ce_marked)), u(rx.map(|r| r.cnps))];
        push_csv_row(&mut out, cells.into_iter().chain(Latency::csv_cells(lat)).chain(ecn));
    }
    out
}

/// The line printed every second: rates over the last second, the sequence numbers missed
/// (`seqloss`) and reordering so far,
/// latency over the last second, the target and the shortfall counters.
#[derive(Debug)]
pub struct LiveLine {
    hz: u64,
    last_t: u64,
    last_tx: Totals,
    last_rx: Totals,
    target: String,
    l1: bool,
}

impl LiveLine {
    /// For `loaded`'s streams on a TSC of `hz`.
    pub fn new(loaded: &Loaded, hz: u64) -> LiveLine {
        let pps: Option<f64> =
            loaded.streams.iter().map(|s| if let Rate::Pps(p) = s.rate { Some(p) } else { None }).sum();
        let bps: Option<f64> =
            loaded.streams.iter().map(|s| if let Rate::Bps(b, _) = s.rate { Some(b) } else { None }).sum();
        let l1 = loaded.streams.iter().all(|s| s.layer == Layer::L1);
        let target = match (pps, bps) {
            (Some(p), _) => format!("target {:.4} Mpps", p / 1e6),
            (_, Some(b)) => format!("target {:.3} Gbit/s", b / 1e9),
            _ if loaded.streams.iter().all(|s| s.rate == Rate::Full) => "target full rate".to_string(),
            _ => "target mixed".to_string(),
        };
        LiveLine { hz, last_t: 0, last_tx: Totals::default(), last_rx: Totals::default(), target, l1 }
    }

    /// The line at `t` cycles since the start.
    pub fn line(&mut self, t: u64, tx: &Totals, rx: &Totals, lat: Option<Latency>) -> String {
        let dt = (t - self.last_t) as f64 / self.hz as f64;
        let rate = |now: &Totals, then: &Totals| {
            let p = (now.packets - then.packets) as f64;
            let mut b = (now.bytes - then.bytes) as f64;
            if self.l1 {
                b += p * L1_OVERHEAD as f64;
            }
            (p / dt / 1e6, b * 8.0 / dt / 1e9)
        };
        let (tp, tb) = rate(tx, &self.last_tx);
        let (rp, rb) = rate(rx, &self.last_rx);
        let lat = lat.map_or("-".to_string(), |l| {
            format!("p50 {:.1} p99 {:.1} p99.9 {:.1} max {:.1}", l.p50_us, l.p99_us, l.p999_us, l.max_us)
        });
        let line = format!(
            "[{:6.1} s] tx {tp:.4} Mpps {tb:.3} Gbit/s | rx {rp:.4} Mpps {rb:.3} Gbit/s | seqloss {} reord {} | lat µs {lat} \
             | {} | tx-full {} nombuf {}",
            t as f64 / self.hz as f64,
            rx.seq_lost,
            rx.reordered,
            self.target,
            tx.tx_full,
            tx.nombuf
        );
        self.last_t = t;
        self.last_tx = *tx;
        self.last_rx = *rx;
        line
    }
}

#[cfg(test)]
mod tests {
    use super::{mean_rate, LiveLine, Totals};

    /// The live line's loss is the sequence numbers missed, labelled as the summary's column
    /// (`seqloss`), never a bare "loss" that reads as the summary's `lost` (sent minus
    /// received).
    #[test]
    fn the_live_line_labels_sequence_loss_as_the_summary_does() {
        let mut l = LiveLine {
            hz: 1000,
            last_t: 0,
            last_tx: Totals::default(),
            last_rx: Totals::default(),
            target: "target full rate".into(),
            l1: false,
        };
        let tx = Totals { packets: 2000, bytes: 128_000, ..Totals::default() };
        let rx = Totals { packets: 1500, bytes: 96_000, seq_lost: 37, reordered: 2, ..Totals::default() };
        let line = l.line(1000, &tx, &rx, None);
        assert!(
            line.contains("] tx 0.0020 Mpps 0.001 Gbit/s | rx 0.0015 Mpps 0.001 Gbit/s | seqloss 37 reord 2 |"),
            "{line}"
        );
        assert!(!line.contains("| loss"), "{line}");
    }

    #[test]
    fn the_target_of_a_changed_rate_is_its_mean_over_the_sending_time() {
        // 10 k until 0.4 s, then 30 k, over 1 s: (10 k x 0.4 + 30 k x 0.6) / 1.
        assert!((mean_rate(10e3, &[(0.4, 30e3)], 1.0) - 22e3).abs() < 1e-6);
        // Changes before the first send and after the last count from and to the window's ends.
        assert!((mean_rate(10e3, &[(-1.0, 20e3), (5.0, 1.0)], 2.0) - 20e3).abs() < 1e-6);
        assert_eq!(mean_rate(10e3, &[], 1.0), 10e3);
        // No sending time: the last rate.
        assert_eq!(mean_rate(10e3, &[(0.0, 7.0)], 0.0), 7.0);
    }
}
