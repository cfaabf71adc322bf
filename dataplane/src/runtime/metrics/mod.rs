//! Prometheus exposition of the live counters: `GET /metrics` on an HTTP listener of its own
//! (`[telemetry] prometheus`, off by default), in the OpenMetrics text format
//! (`prometheus-client`), served by [`http`] on threads of its own, never a worker lcore.
//!
//! The counters and their names are the telemetry socket's ([`crate::live`]): family
//! `port_rx_packets` becomes `dpu_port_rx_packets_total`, its label a Prometheus label
//! (`port="p0"`, `reason="tx_full"`, `table="l2",entry="02:00:00:00:00:01"` (the entry's key,
//! [`Board::entry_label`]) or `entry="miss"`,
//! `collective="7"`, `collective="7",reason="stale_round"`). The gauges of
//! [`crate::export::GAUGES`] (`dpu_agg_collective_slots_in_use`) are Prometheus gauges, without
//! the `_total` suffix. The endpoint is read-only: any other path is 404, any other method 405.

use crate::export::Label;
use crate::live::{self, Board};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use std::sync::Arc;

pub mod http;

/// Every metric of `board`, one family at a time (in the order families first appear).
fn encode_board(board: &Board, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    let totals = board.totals();
    let mut families: Vec<&'static str> = Vec::new();
    for m in &board.metrics {
        if !families.contains(&m.family) {
            families.push(m.family);
        }
    }
    for family in families {
        let rows: Vec<_> = board.metrics.iter().zip(&totals).filter(|(m, _)| m.family == family).collect();
        let Some((first, _)) = rows.first() else { continue };
        let gauge = first.is_gauge();
        let kind = if gauge { ConstGauge::new(0i64).metric_type() } else { ConstCounter::new(0u64).metric_type() };
        let mut fam = encoder.encode_descriptor(family, first.help, None, kind)?;
        if let [(m, v)] = rows[..] {
            if m.label == Label::None {
                // One value without labels: `name_total 7`, not `name_total{} 7`.
                ConstCounter::new(*v).encode(fam)?;
                continue;
            }
        }
        // Log2 histograms' buckets (`cycles_le`) are cumulative, as Prometheus's `le` buckets
        // are: each counts what is at or below its bound, `+Inf` everything. The board holds
        // one count per bucket, in ascending order per worker: summed here, per worker.
        let mut below: Vec<(u16, u64)> = Vec::new();
        for (m, v) in rows {
            let v = &match m.label {
                Label::Worker { worker, le: Some(_) } => match below.iter_mut().find(|(w, _)| *w == worker) {
                    Some((_, sum)) => {
                        *sum += *v;
                        *sum
                    }
                    None => {
                        below.push((worker, *v));
                        *v
                    }
                },
                _ => *v,
            };
            let labels: Vec<(&str, String)> = match m.label {
                Label::None => Vec::new(),
                Label::Port(p) => vec![("port", board.ports.get(p as usize).cloned().unwrap_or_default())],
                Label::Reason(r) => vec![("reason", r.name().to_string())],
                Label::Entry { table, entry } => vec![
                    ("table", board.tables.get(table as usize).cloned().unwrap_or_default()),
                    ("entry", board.entry_label(table, entry.map(|e| e as usize))),
                ],
                Label::Collective(c) => vec![("collective", c.to_string())],
                Label::CollectiveNak { collective, reason } => vec![
                    ("collective", collective.to_string()),
                    ("reason", crate::wire::gradient::NakReason::name(reason).to_string()),
                ],
                Label::CollectiveDrop { collective, reason } => {
                    vec![("collective", collective.to_string()), ("reason", reason.name().to_string())]
                }
                Label::Rank { collective, rank } => {
                    vec![("collective", collective.to_string()), ("rank", rank.to_string())]
                }
                Label::Worker { worker, le } => {
                    let mut l = vec![("worker", worker.to_string())];
                    if let Some(le) = le {
                        l.push(("cycles_le", if le == u64::MAX { "+Inf".to_string() } else { le.to_string() }));
                    }
                    l
                }
            };
            if gauge {
                // A gauge's value is now's: slots, far below i64's range.
                ConstGauge::new(i64::try_from(*v).unwrap_or(i64::MAX)).encode(fam.encode_family(&labels)?)?;
            } else {
                ConstCounter::new(*v).encode(fam.encode_family(&labels)?)?;
            }
        }
    }
    Ok(())
}

/// The text of a scrape of `board` now (what `/metrics` answers while it is the current one);
/// without a board (no run), only the end marker.
pub fn render(board: Option<&Arc<Board>>) -> String {
    let mut registry = Registry::with_prefix("dpu");
    if let Some(b) = board {
        registry.register_collector(Box::new(Scrape(b.clone())));
    }
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    out
}

/// The collector of one scrape: the board read once.
#[derive(Debug)]
struct Scrape(Arc<Board>);

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        encode_board(&self.0, &mut encoder)
    }
}

/// The HTTP listener; dropping it stops accepting requests.
#[derive(Debug)]
pub struct MetricsServer {
    server: http::Server,
    /// The address it listens on (with the port the OS chose for port 0).
    pub addr: String,
}

/// Listens on `addr` (`HOST:PORT`) and answers `GET /metrics` with the current board
/// ([`http`]: a thread per connection, at most 64, one request each, with deadlines).
/// Errors: the address cannot be bound (in use, not local, bad syntax), as text.
pub fn serve(addr: &str) -> Result<MetricsServer, String> {
    let server = http::serve(
        addr,
        "application/openmetrics-text; version=1.0.0; charset=utf-8",
        http::Limits::default(),
        || render(live::current().as_ref()),
    )?;
    let addr = server.addr.to_string();
    Ok(MetricsServer { server, addr })
}

impl MetricsServer {
    /// Connections being answered now.
    pub fn active(&self) -> usize {
        self.server.active()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datapath::Datapath;
    use crate::stats::Reason;

    #[test]
    fn a_scrape_names_counters_as_prometheus_does() {
        let mut dp: Datapath = Datapath::new(Default::default(), 1, crate::wire::gradient::DEFAULT_UDP_PORT);
        let board = Arc::new(Board::new(live::names_of(&dp, 1), 1, vec!["p0".into()], vec![]));
        dp.counters.rx(0, 100);
        dp.counters.drop(Reason::TxFull);
        board.publisher(0, 0).publish(&dp, &crate::live::LoopStats::default());
        let text = render(Some(&board));
        assert!(text.contains("# TYPE dpu_port_rx_packets counter"), "{text}");
        assert!(text.contains("dpu_port_rx_packets_total{port=\"p0\"} 1\n"), "{text}");
        assert!(text.contains("dpu_port_rx_bytes_total{port=\"p0\"} 100\n"), "{text}");
        assert!(text.contains("dpu_dropped_packets_total{reason=\"tx_full\"} 1\n"), "{text}");
        assert!(text.contains("dpu_agg_completed_rounds_total 0\n"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    /// The log2 histograms' `cycles_le` buckets are cumulative, as Prometheus's `le` buckets:
    /// bursts of 100, 3000 and 3000 cycles read 1 at or below 127, 3 at or below 4095 and at
    /// `+Inf`.
    #[test]
    fn cycle_buckets_are_cumulative_as_le_buckets_are() {
        let dp: Datapath = Datapath::new(Default::default(), 1, crate::wire::gradient::DEFAULT_UDP_PORT);
        let board = Arc::new(Board::new(live::names_of(&dp, 1), 1, vec!["p0".into()], vec![]));
        let mut stats = crate::live::LoopStats::default();
        for c in [100, 3000, 3000] {
            stats.cycles.record(c);
        }
        board.publisher(0, 0).publish(&dp, &stats);
        let text = render(Some(&board));
        let at = |le: &str| {
            let key = format!("dpu_worker_bursts_by_cycles_total{{worker=\"0\",cycles_le=\"{le}\"}} ");
            let line = text.lines().find(|l| l.starts_with(&key)).unwrap_or_else(|| panic!("no {key}: {text}"));
            line[key.len()..].parse::<u64>().unwrap()
        };
        assert_eq!([at("63"), at("127"), at("2047"), at("4095"), at("8191"), at("+Inf")], [0, 1, 1, 3, 3, 3]);
    }

    /// Table entries are labelled by their keys (priority included), so that an entry's series
    /// stays its own when an entry before it is deleted; the miss is `miss`.
    #[test]
    fn entries_are_labelled_by_their_keys() {
        let l = crate::config::load_str(crate::testing::PIPELINE_CONF, std::path::Path::new("t.toml")).unwrap();
        let keys: Vec<Vec<String>> = l.config.tables.iter().map(|t| t.entry_labels()).collect();
        let names = l.pipeline.tables.iter().map(|t| t.name.clone()).collect();
        let mut dp: Datapath = Datapath::new(l.pipeline, 2, crate::wire::gradient::DEFAULT_UDP_PORT);
        let board = Arc::new(Board::new(live::names_of(&dp, 1), 1, vec!["p0".into()], names).with_entry_keys(keys));
        dp.pipeline_state.entries_mut(0)[1].packets = 5;
        board.publisher(0, 0).publish(&dp, &crate::live::LoopStats::default());
        let text = render(Some(&board));
        for line in [
            "dpu_table_packets_total{table=\"l2\",entry=\"02:00:00:00:00:01\"} 0\n",
            "dpu_table_packets_total{table=\"l2\",entry=\"02:00:00:00:00:02\"} 5\n",
            "dpu_table_packets_total{table=\"l2\",entry=\"miss\"} 0\n",
            "dpu_table_packets_total{table=\"routes\",entry=\"10.0.0.0/8\"} 0\n",
            "dpu_table_packets_total{table=\"acl\",entry=\"10.0.0.0&&&255.0.0.0,9000->9100 priority 5\"} 0\n",
        ] {
            assert!(text.contains(line), "{line}: {text}");
        }
    }

    #[test]
    fn collectives_are_labelled_and_slots_in_use_is_a_gauge() {
        let text = "[[port]]\nvdev = \"net_null0\"\nmac = \"02:00:00:00:00:fe\"\nipv4 = \"10.0.0.254\"\n\
                    [[collective]]\ncollective_id = 7\nop = \"sum\"\ndtype = \"f32\"\ncarriage = \"udp\"\n\
                    tensor_elements = 8\nchunk_elements = 4\n\
                    [[collective.member]]\nrank = 0\nip = \"10.0.0.1\"\nmac = \"02:00:00:00:01:01\"\nudp_port = 5000\n\
                    [[collective.member]]\nrank = 1\nip = \"10.0.0.2\"\nmac = \"02:00:00:00:01:02\"\nudp_port = 5001\n";
        let l = crate::config::load_str(text, std::path::Path::new("t.toml")).unwrap_or_else(|e| panic!("{e}"));
        let ports =
            vec![crate::agg::PortAddr { mac: "02:00:00:00:00:fe".parse().unwrap(), ipv4: l.port_ipv4[0], ipv6: None }];
        let agg = crate::agg::Aggregator::new(&l.collectives, ports, crate::wire::gradient::DEFAULT_UDP_PORT, 1);
        let dp: Datapath = Datapath::new(l.pipeline, 1, crate::wire::gradient::DEFAULT_UDP_PORT).with_aggregator(agg);
        let board = Arc::new(Board::new(live::names_of(&dp, 1), 1, vec!["p0".into()], vec![]));
        board.publisher(0, 0).publish(&dp, &crate::live::LoopStats::default());
        let text = render(Some(&board));
        assert!(text.contains("dpu_agg_collective_completed_rounds_total{collective=\"7\"} 0\n"), "{text}");
        assert!(
            text.contains("dpu_agg_collective_nak_packets_total{collective=\"7\",reason=\"stale_round\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("dpu_agg_collective_dropped_packets_total{collective=\"7\",reason=\"grad_not_member\"} 0\n"),
            "{text}"
        );
        assert!(text.contains("# TYPE dpu_agg_collective_slots_in_use gauge\n"), "{text}");
        assert!(text.contains("dpu_agg_collective_slots_in_use{collective=\"7\"} 0\n"), "{text}");
    }
}
