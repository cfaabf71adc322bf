//! `dpuctl watch`: a live view of a running appliance, from two `stats` replies an interval
//! apart: per port the rx and tx rates, per worker lcore its load, cycles per burst and
//! residence time, the aggregation rate, and every drop reason whose count is not 0.
//!
//! On a terminal it is a full-screen view drawn with ratatui (crossterm backend; `q`, Esc or
//! Ctrl-C leave it and restore the terminal). With `--plain`, or when stdout is not a terminal,
//! it prints the same figures as text, one block per interval, for logs and scripts.

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Row, Table};
use ratatui::Frame;
use serde_json::{Map, Value};
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::{Duration, Instant};

/// One `stats` reply: the summed counters (`/dpu/stats` names) and the per-worker objects.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// Counter name to value (`port_rx_packets/NAME`, `dropped_packets/REASON`, ...).
    pub stats: Map<String, Value>,
    /// Per worker lcore: `worker`, `busy_polls`, `idle_polls`, `bursts`, `burst_cycles`,
    /// `residence_cycles_log2` (bucket b: residence times up to 2^b - 1 TSC cycles).
    pub workers: Vec<Value>,
}

impl Sample {
    /// A sample from the appliance's reply to `{"cmd": "stats"}`.
    pub fn of_reply(reply: &Value) -> Sample {
        Sample {
            stats: reply["stats"].as_object().cloned().unwrap_or_default(),
            workers: reply["workers"].as_array().cloned().unwrap_or_default(),
        }
    }

    fn get(&self, k: &str) -> u64 {
        self.stats.get(k).and_then(Value::as_u64).unwrap_or(0)
    }
}

/// One port's rates over the interval.
#[derive(Debug, Clone, PartialEq)]
pub struct PortRates {
    /// The port's name as the counters spell it.
    pub name: String,
    /// Received, Mpps.
    pub rx_mpps: f64,
    /// Received, Gbit/s (frames without FCS).
    pub rx_gbps: f64,
    /// Handed to the port, Mpps.
    pub tx_mpps: f64,
    /// Handed to the port, Gbit/s.
    pub tx_gbps: f64,
}

/// One worker lcore over the interval.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerLoad {
    /// The worker's index.
    pub worker: String,
    /// Poll-loop turns that found packets, percent of all turns.
    pub busy_pct: f64,
    /// rx bursts.
    pub bursts: u64,
    /// Mean TSC cycles per burst.
    pub cycles_per_burst: u64,
    /// Residence time's median and 99th percentile, as log2 bucket bounds in TSC cycles.
    pub residence_p50: String,
    /// See `residence_p50`.
    pub residence_p99: String,
}

/// What the view shows for one interval: the difference of two samples over `seconds`.
#[derive(Debug, Clone, PartialEq)]
pub struct View {
    /// The interval, seconds.
    pub seconds: f64,
    /// Per port, in the counters' order.
    pub ports: Vec<PortRates>,
    /// Per worker lcore.
    pub workers: Vec<WorkerLoad>,
    /// Aggregation rounds completed per second over the interval, and in all; `None` before
    /// the first round.
    pub rounds: Option<(f64, u64)>,
    /// Each drop reason counted so far: (reason, total, growth over the interval).
    pub drops: Vec<(String, u64, u64)>,
}

impl View {
    /// The view of the interval from `prev` to `now`, `seconds` long.
    pub fn between(prev: &Sample, now: &Sample, seconds: f64) -> View {
        let dt = if seconds > 0.0 { seconds } else { f64::MIN_POSITIVE };
        let delta = |k: &str| now.get(k).saturating_sub(prev.get(k));
        let ports = now
            .stats
            .keys()
            .filter_map(|k| k.strip_prefix("port_rx_packets/"))
            .map(|name| {
                let rate = |f: &str| delta(&format!("{f}/{name}")) as f64 / dt;
                PortRates {
                    name: name.to_string(),
                    rx_mpps: rate("port_rx_packets") / 1e6,
                    rx_gbps: rate("port_rx_bytes") * 8.0 / 1e9,
                    tx_mpps: rate("port_tx_packets") / 1e6,
                    tx_gbps: rate("port_tx_bytes") * 8.0 / 1e9,
                }
            })
            .collect();
        let workers = now
            .workers
            .iter()
            .zip(prev.workers.iter().chain(std::iter::repeat(&Value::Null)))
            .map(|(w, p)| {
                let d = |k: &str| w[k].as_u64().unwrap_or(0).saturating_sub(p[k].as_u64().unwrap_or(0));
                let (busy, idle, bursts) = (d("busy_polls"), d("idle_polls"), d("bursts"));
                let buckets = |v: &Value| -> Vec<u64> {
                    v["residence_cycles_log2"]
                        .as_array()
                        .map(|a| a.iter().map(|x| x.as_u64().unwrap_or(0)).collect())
                        .unwrap_or_default()
                };
                // The interval's residence times: the buckets' growth.
                let grown: Vec<u64> = buckets(w)
                    .iter()
                    .zip(buckets(p).iter().chain(std::iter::repeat(&0)))
                    .map(|(a, b)| a.saturating_sub(*b))
                    .collect();
                WorkerLoad {
                    worker: w["worker"].to_string(),
                    busy_pct: if busy + idle > 0 { 100.0 * busy as f64 / (busy + idle) as f64 } else { 0.0 },
                    bursts,
                    cycles_per_burst: d("burst_cycles").checked_div(bursts).unwrap_or(0),
                    residence_p50: log2_quantile(&grown, 0.5),
                    residence_p99: log2_quantile(&grown, 0.99),
                }
            })
            .collect();
        let total_rounds = now.get("agg_completed_rounds");
        let drops = now
            .stats
            .iter()
            .filter_map(|(k, v)| {
                let r = k.strip_prefix("dropped_packets/")?;
                let n = v.as_u64().filter(|&n| n > 0)?;
                Some((r.to_string(), n, delta(k)))
            })
            .collect();
        View {
            seconds: dt,
            ports,
            workers,
            rounds: (total_rounds > 0).then(|| (delta("agg_completed_rounds") as f64 / dt, total_rounds)),
            drops,
        }
    }

    /// The view as text lines (`--plain`).
    pub fn lines(&self) -> Vec<String> {
        let mut out =
            vec![format!("{:<16} {:>12} {:>12} {:>12} {:>12}", "port", "rx Mpps", "rx Gbit/s", "tx Mpps", "tx Gbit/s")];
        for p in &self.ports {
            out.push(format!(
                "{:<16} {:>12.3} {:>12.3} {:>12.3} {:>12.3}",
                p.name, p.rx_mpps, p.rx_gbps, p.tx_mpps, p.tx_gbps
            ));
        }
        for w in &self.workers {
            out.push(format!(
                "worker {:<9} busy {:>5.1}% of polls, {} bursts, {} TSC cycles per burst, residence p50 {} p99 {} TSC cycles",
                w.worker, w.busy_pct, w.bursts, w.cycles_per_burst, w.residence_p50, w.residence_p99
            ));
        }
        if let Some((rate, total)) = self.rounds {
            out.push(format!("aggregation: {rate:.0} rounds/s, {total} rounds in all"));
        }
        for (r, n, grew) in &self.drops {
            out.push(format!("drop {r:<28} {n:>14} (+{grew})"));
        }
        out
    }

    /// Draws the view into `frame`: a title line, then the ports, workers and drops tables.
    pub fn draw(&self, frame: &mut Frame, title: &str) {
        let bold = Style::default().add_modifier(Modifier::BOLD);
        let [head, ports, workers, drops] = Layout::vertical([
            Constraint::Length(2),
            Constraint::Length(self.ports.len() as u16 + 3),
            Constraint::Length(self.workers.len() as u16 + 3),
            Constraint::Min(3),
        ])
        .areas(frame.area());
        let mut text = vec![Line::styled(title.to_string(), bold)];
        text.push(Line::raw(match self.rounds {
            Some((rate, total)) => format!("aggregation: {rate:.0} rounds/s, {total} rounds in all"),
            None => "aggregation: no round completed".to_string(),
        }));
        frame.render_widget(Paragraph::new(text), head);

        let right = |s: String| Line::from(s).right_aligned();
        let rows = self.ports.iter().map(|p| {
            Row::new(vec![
                Line::from(p.name.clone()),
                right(format!("{:.3}", p.rx_mpps)),
                right(format!("{:.3}", p.rx_gbps)),
                right(format!("{:.3}", p.tx_mpps)),
                right(format!("{:.3}", p.tx_gbps)),
            ])
        });
        let widths = [
            Constraint::Min(12),
            Constraint::Length(11),
            Constraint::Length(11),
            Constraint::Length(11),
            Constraint::Length(11),
        ];
        let header = header_row(&["port", "rx Mpps", "rx Gbit/s", "tx Mpps", "tx Gbit/s"]);
        frame.render_widget(Table::new(rows, widths).header(header).block(Block::bordered().title(" ports ")), ports);

        let rows = self.workers.iter().map(|w| {
            Row::new(vec![
                Line::from(w.worker.clone()),
                right(format!("{:.1}%", w.busy_pct)),
                right(w.bursts.to_string()),
                right(w.cycles_per_burst.to_string()),
                right(w.residence_p50.clone()),
                right(w.residence_p99.clone()),
            ])
        });
        let widths = [
            Constraint::Length(8),
            Constraint::Length(8),
            Constraint::Length(10),
            Constraint::Length(14),
            Constraint::Length(14),
            Constraint::Length(14),
        ];
        let header = header_row(&["worker", "busy", "bursts", "cycles/burst", "residence p50", "residence p99"]);
        frame.render_widget(
            Table::new(rows, widths).header(header).block(Block::bordered().title(" worker lcores (TSC cycles) ")),
            workers,
        );

        let rows = self
            .drops
            .iter()
            .map(|(r, n, grew)| Row::new(vec![Line::from(r.clone()), right(n.to_string()), right(format!("+{grew}"))]));
        let widths = [Constraint::Min(24), Constraint::Length(16), Constraint::Length(14)];
        let header = header_row(&["drop reason", "packets", "this interval"]);
        frame.render_widget(Table::new(rows, widths).header(header).block(Block::bordered().title(" drops ")), drops);
    }
}

/// A table's header row in bold: the first column's name as is, the numbers' names right-aligned
/// over their columns.
fn header_row(names: &[&'static str]) -> Row<'static> {
    Row::new(
        names.iter().enumerate().map(|(i, n)| if i == 0 { Line::from(*n) } else { Line::from(*n).right_aligned() }),
    )
    .style(Style::default().add_modifier(Modifier::BOLD))
}

/// The quantile `q` of log2 buckets (bucket b holds values up to 2^b - 1; the last is open),
/// as the bucket's bound: `0`, `<=N` or `>N`; `-` when empty.
pub fn log2_quantile(buckets: &[u64], q: f64) -> String {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return "-".into();
    }
    let want = ((total as f64 * q).ceil() as u64).max(1);
    let mut seen = 0;
    for (b, n) in buckets.iter().enumerate() {
        seen += n;
        if seen >= want {
            return match b {
                0 => "0".into(),
                b if b + 1 == buckets.len() => format!(">{}", (1u64 << (b - 1)) - 1),
                b => format!("<={}", (1u64 << b) - 1),
            };
        }
    }
    "-".into()
}

/// Runs the view: `fetch` answers one `stats` request; every `interval` seconds the view is
/// redrawn, `count` times (`None`: until `q`, Esc or Ctrl-C, or until a fetch fails). `plain`
/// (or a stdout that is not a terminal) prints text instead of drawing.
///
/// # Errors
/// The first failed fetch's message, or the terminal's error.
pub fn run(
    socket: &Path,
    interval: f64,
    count: Option<u64>,
    plain: bool,
    mut fetch: impl FnMut() -> Result<Sample, String>,
) -> Result<(), String> {
    let title = format!("dpu {} (every {interval} s; q to stop)", socket.display());
    let mut prev = fetch()?;
    let mut at = Instant::now();
    let step = Duration::from_secs_f64(interval);
    if plain || !std::io::stdout().is_terminal() {
        let mut shown = 0;
        while count.is_none_or(|c| shown < c) {
            std::thread::sleep(step);
            let now = fetch()?;
            let view = View::between(&prev, &now, at.elapsed().as_secs_f64());
            at = Instant::now();
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "dpu {} (every {interval} s)", socket.display());
            for l in view.lines() {
                let _ = writeln!(out, "{l}");
            }
            let _ = out.flush();
            prev = now;
            shown += 1;
        }
        return Ok(());
    }
    let mut terminal = ratatui::try_init().map_err(|e| format!("the terminal: {e}"))?;
    let result = (|| {
        let mut shown = 0;
        let mut view: Option<View> = None;
        let mut next = Instant::now() + step;
        loop {
            terminal
                .draw(|f| match &view {
                    Some(v) => v.draw(f, &title),
                    None => f.render_widget(
                        Paragraph::new(format!("{title}\nwaiting {interval} s for a second sample")),
                        f.area(),
                    ),
                })
                .map_err(|e| format!("the terminal: {e}"))?;
            if count.is_some_and(|c| shown >= c) {
                return Ok(());
            }
            // Keys until the next sample is due.
            while let Some(left) = next.checked_duration_since(Instant::now()) {
                if event::poll(left).map_err(|e| format!("the terminal: {e}"))? {
                    if let Event::Key(k) = event::read().map_err(|e| format!("the terminal: {e}"))? {
                        let ctrl_c = k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
                        if k.kind == KeyEventKind::Press
                            && (ctrl_c || matches!(k.code, KeyCode::Char('q') | KeyCode::Esc))
                        {
                            return Ok(());
                        }
                    }
                }
            }
            next += step;
            let now = fetch()?;
            view = Some(View::between(&prev, &now, at.elapsed().as_secs_f64()));
            at = Instant::now();
            prev = now;
            shown += 1;
        }
    })();
    ratatui::restore();
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;
    use serde_json::json;

    fn sample(rx: u64, rx_bytes: u64, tx: u64, drops: u64, busy: u64, idle: u64, rounds: u64) -> Sample {
        Sample::of_reply(&json!({
            "stats": {
                "port_rx_packets/in": rx, "port_rx_bytes/in": rx_bytes,
                "port_tx_packets/in": 0, "port_tx_bytes/in": 0,
                "port_rx_packets/out": 0, "port_rx_bytes/out": 0,
                "port_tx_packets/out": tx, "port_tx_bytes/out": tx * 64,
                "dropped_packets/no_route": drops, "dropped_packets/tx_full": 0,
                "agg_completed_rounds": rounds,
            },
            "workers": [{
                "worker": 0, "busy_polls": busy, "idle_polls": idle, "bursts": busy,
                "burst_cycles": busy * 1000,
                "residence_cycles_log2": [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, busy, 0],
            }],
        }))
    }

    /// Bucket b holds values up to 2^b - 1: 0, 1, 2-3, 4-7, ...; the last, everything above.
    #[test]
    fn log2_quantiles_are_bucket_bounds() {
        assert_eq!(log2_quantile(&[0, 0, 0], 0.5), "-");
        // 4 values in 2..=3, 1 in 8..=15: the median <= 3, the 99th percentile <= 15.
        let b = [0, 0, 4, 0, 1, 0];
        assert_eq!(log2_quantile(&b, 0.5), "<=3");
        assert_eq!(log2_quantile(&b, 0.8), "<=3");
        assert_eq!(log2_quantile(&b, 0.99), "<=15");
        assert_eq!(log2_quantile(&[3, 0, 0], 0.99), "0");
        // The last bucket is open: above 2^(n-2) - 1.
        assert_eq!(log2_quantile(&[0, 0, 0, 2], 0.5), ">3");
    }

    /// Two samples 2 s apart: 3 M packets of 100 B received is 1.5 Mpps and 1.2 Gbit/s; 75 %
    /// busy polls; drops shown with their growth, zero reasons left out.
    #[test]
    fn the_view_is_the_difference_over_the_interval() {
        let a = sample(1_000_000, 100_000_000, 500_000, 10, 100, 100, 0);
        let b = sample(4_000_000, 400_000_000, 2_500_000, 25, 400, 200, 0);
        let v = View::between(&a, &b, 2.0);
        let port = |n: &str| v.ports.iter().find(|p| p.name == n).unwrap().clone();
        assert_eq!(port("in").rx_mpps, 1.5);
        assert_eq!(port("in").rx_gbps, 1.2);
        assert_eq!(port("out").tx_mpps, 1.0);
        assert_eq!(port("out").tx_gbps, 0.512);
        let w = &v.workers[0];
        assert_eq!((w.busy_pct, w.bursts, w.cycles_per_burst), (75.0, 300, 1000));
        // 300 residences, all in bucket 11 (1024..=2047 cycles).
        assert_eq!((w.residence_p50.as_str(), w.residence_p99.as_str()), ("<=2047", "<=2047"));
        assert_eq!(v.drops, vec![("no_route".to_string(), 25, 15)]);
        assert_eq!(v.rounds, None);
        let v = View::between(&a, &sample(0, 0, 0, 0, 0, 0, 40), 2.0);
        assert_eq!(v.rounds, Some((20.0, 40)), "counters that went back count as 0");
        assert_eq!(v.ports[0].rx_mpps, 0.0);
    }

    #[test]
    fn plain_lines_name_every_port_worker_and_drop() {
        let a = sample(0, 0, 0, 0, 0, 0, 0);
        let b = sample(2_000_000, 128_000_000, 2_000_000, 7, 10, 30, 9);
        let text = View::between(&a, &b, 1.0).lines().join("\n");
        assert!(text.contains("in                      2.000        1.024        0.000        0.000"), "{text}");
        assert!(text.contains("worker 0         busy  25.0% of polls, 10 bursts, 1000 TSC cycles per burst"), "{text}");
        assert!(text.contains("aggregation: 9 rounds/s, 9 rounds in all"), "{text}");
        assert!(text.contains("drop no_route"), "{text}");
        assert!(!text.contains("tx_full"), "zero reasons are left out: {text}");
    }

    /// The full-screen view drawn into a test terminal holds the same figures.
    #[test]
    fn the_screen_shows_the_tables() {
        let a = sample(0, 0, 0, 0, 0, 0, 0);
        let b = sample(3_000_000, 192_000_000, 3_000_000, 4, 50, 50, 0);
        let v = View::between(&a, &b, 1.0);
        let mut t = Terminal::new(TestBackend::new(100, 24)).unwrap();
        t.draw(|f| v.draw(f, "dpu test")).unwrap();
        let screen: String = t
            .backend()
            .buffer()
            .content()
            .chunks(100)
            .map(|row| row.iter().map(|c| c.symbol()).collect::<String>() + "\n")
            .collect();
        for want in [
            "dpu test",
            " ports ",
            "rx Mpps",
            "3.000",
            "1.536",
            " worker lcores",
            "50.0%",
            "<=2047",
            " drops ",
            "no_route",
            "+4",
        ] {
            assert!(screen.contains(want), "{want:?} missing from:\n{screen}");
        }
        assert!(screen.contains("aggregation: no round completed"), "{screen}");
    }
}
