//! Prometheus exposition of the live counters: `GET /metrics` on an HTTP listener of its own
//! (`[telemetry] prometheus`, off by default), in the OpenMetrics text format
//! (`prometheus-client`), served by `tiny_http` on a thread of its own, never a worker lcore.
//!
//! The counters and their names are the telemetry socket's ([`crate::live`]): family
//! `port_rx_packets` becomes `dpu_port_rx_packets_total`, its label a Prometheus label
//! (`port="p0"`, `reason="tx_full"`, `table="l2",entry="3"` or `entry="miss"`,
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
        for (m, v) in rows {
            let labels: Vec<(&str, String)> = match m.label {
                Label::None => Vec::new(),
                Label::Port(p) => vec![("port", board.ports.get(p as usize).cloned().unwrap_or_default())],
                Label::Reason(r) => vec![("reason", r.name().to_string())],
                Label::Entry { table, entry } => vec![
                    ("table", board.tables.get(table as usize).cloned().unwrap_or_default()),
                    ("entry", entry.map_or_else(|| "miss".to_string(), |e| e.to_string())),
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
pub struct MetricsServer {
    server: Arc<tiny_http::Server>,
    /// The address it listens on (with the port the OS chose for port 0).
    pub addr: String,
}

/// Listens on `addr` (`HOST:PORT`) and answers `GET /metrics` with the current board.
/// Errors: the address cannot be bound (in use, not local, bad syntax), as text.
pub fn serve(addr: &str) -> Result<MetricsServer, String> {
    let server = Arc::new(tiny_http::Server::http(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?);
    let bound = server.server_addr().to_ip().map_or_else(|| addr.to_string(), |a| a.to_string());
    let s = server.clone();
    std::thread::Builder::new()
        .name("dpu-metrics".into())
        .spawn(move || {
            for req in s.incoming_requests() {
                // Prometheus may add a query string (`params` in a scrape config): ignored.
                let path = req.url().split('?').next().unwrap_or("");
                let (status, body) = match (req.method(), path) {
                    (tiny_http::Method::Get | tiny_http::Method::Head, "/metrics") => {
                        (200, render(live::current().as_ref()))
                    }
                    (tiny_http::Method::Get | tiny_http::Method::Head, _) => (404, "not found: try /metrics\n".into()),
                    _ => (405, "read-only: GET /metrics\n".into()),
                };
                let ct = if status == 200 {
                    "application/openmetrics-text; version=1.0.0; charset=utf-8"
                } else {
                    "text/plain; charset=utf-8"
                };
                let mut resp = tiny_http::Response::from_string(body).with_status_code(status);
                if let Ok(h) = tiny_http::Header::from_bytes("Content-Type", ct) {
                    resp = resp.with_header(h);
                }
                // Written on a thread of its own: a client that does not read its replies
                // blocks only that thread, never the other scrapes or the appliance's exit.
                let _ = std::thread::Builder::new().name("dpu-metrics-w".into()).spawn(move || {
                    let _ = req.respond(resp);
                });
            }
        })
        .map_err(|e| format!("cannot start the metrics thread: {e}"))?;
    Ok(MetricsServer { server, addr: bound })
}

impl std::fmt::Debug for MetricsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsServer").field("addr", &self.addr).finish()
    }
}

impl Drop for MetricsServer {
    /// Stops accepting requests. The threads are not waited for: a reply still being written to
    /// a client that does not read must not hold up the appliance's exit.
    fn drop(&mut self) {
        self.server.unblock();
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
