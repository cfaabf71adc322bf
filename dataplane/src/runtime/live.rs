//! Live counters of a running appliance. Each worker publishes its counters
//! ([`Datapath::export`](crate::datapath::Datapath::export)) into a board slot of its own every
//! [`PUBLISH_MS`], as relaxed atomic stores: a reader never slows a worker down or sees a torn
//! value, and the workers share no cache line on their fast path. The main lcore (the periodic
//! stats line) and DPDK's telemetry thread (`/dpu/...` commands, [`crate::dpdk::telemetry`])
//! read the board and sum the slots.

use crate::config::label_key;
use crate::dpdk::telemetry::{self, Reply};
use crate::dpdk::DpdkError;
use crate::export::{Label, Metric, Names, Visit};
use crate::log2hist::Log2Hist;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// How often a worker publishes its counters (ms): what a live reader sees is at most this old.
pub const PUBLISH_MS: u64 = crate::config::LIVE_PUBLISH_MS;

/// The counters of every worker, by metric index (see [`crate::export`]), and their names.
#[derive(Debug)]
pub struct Board {
    /// The metrics, in walk order.
    pub metrics: Vec<Metric>,
    /// Port names, by port index.
    pub ports: Vec<String>,
    /// Table names, by table index.
    pub tables: Vec<String>,
    /// Per table, its entries' labels by entry index ([`Board::with_entry_keys`]); empty when
    /// not given (the entries are then named by index).
    pub entry_keys: Vec<Vec<String>>,
    slots: Vec<Box<[AtomicU64]>>,
}

impl Board {
    /// A board for `workers` workers whose walks yield `metrics` (the [`Names`] of one of them).
    pub fn new(metrics: Vec<Metric>, workers: usize, ports: Vec<String>, tables: Vec<String>) -> Board {
        let slots = (0..workers).map(|_| metrics.iter().map(|_| AtomicU64::new(0)).collect()).collect();
        Board { metrics, ports, tables, entry_keys: Vec::new(), slots }
    }

    /// This board with its entries' labels (per table, per entry index: their keys,
    /// `EntryConfig::label`), which name them in Prometheus: unlike an index, a key stays an
    /// entry's across runtime changes, so its series stays one series.
    pub fn with_entry_keys(mut self, keys: Vec<Vec<String>>) -> Board {
        self.entry_keys = keys;
        self
    }

    /// Entry `entry` of table `table`'s label: its key, else its index; `miss` for the miss.
    pub fn entry_label(&self, table: u16, entry: Option<usize>) -> String {
        match entry {
            None => "miss".to_string(),
            Some(e) => {
                self.entry_keys.get(table as usize).and_then(|k| k.get(e)).cloned().unwrap_or_else(|| e.to_string())
            }
        }
    }

    /// A board like this one for a pipeline changed at runtime: the same metrics but the
    /// tables', which are those of `state` (shaped for the new pipeline), and `tables` their names.
    /// The tables' metrics sit between the fixed ones before and the aggregator's after
    /// ([`crate::export`]'s order). Zero values: each worker publishes into it once it switched.
    pub fn reshaped(&self, state: &crate::table::PipelineState, tables: Vec<String>) -> Board {
        let is_table = |m: &Metric| matches!(m.label, Label::Entry { .. });
        let start = self.metrics.iter().position(|m| is_table(m) || m.family.starts_with("agg_"));
        let start = start.unwrap_or(self.metrics.len());
        let end = start + self.metrics[start..].iter().take_while(|m| is_table(m)).count();
        let mut names = Names::default();
        crate::export::export_tables(state, &mut names);
        let mut metrics = self.metrics[..start].to_vec();
        metrics.extend(names.0);
        metrics.extend_from_slice(&self.metrics[end..]);
        Board::new(metrics, self.slots.len(), self.ports.clone(), tables)
    }

    /// A board like this one for a collective set changed at runtime: the same metrics but the
    /// collectives' and their ranks', which are those of `collectives` (`(id, ranks)`, in the
    /// new set's order). They sit after the aggregator's own counters and before the poll
    /// loops' ([`crate::export`]'s order). Zero values: each worker publishes into it once it
    /// switched.
    pub fn with_collectives(&self, collectives: &[(u16, usize)]) -> Board {
        let is_coll = |m: &Metric| {
            matches!(
                m.label,
                Label::Collective(_) | Label::CollectiveNak { .. } | Label::CollectiveDrop { .. } | Label::Rank { .. }
            )
        };
        let start = self
            .metrics
            .iter()
            .position(|m| is_coll(m) || matches!(m.label, Label::Worker { .. }))
            .unwrap_or(self.metrics.len());
        let end = start + self.metrics[start..].iter().take_while(|m| is_coll(m)).count();
        let zero = crate::agg::CollCounters::default();
        let mut names = Names::default();
        crate::export::export_collectives(
            collectives.iter().map(|(id, _)| (*id, &zero, 0)),
            collectives.iter().map(|(id, ranks)| (*id, *ranks, &[][..])),
            &mut names,
        );
        let mut metrics = self.metrics[..start].to_vec();
        metrics.extend(names.0);
        metrics.extend_from_slice(&self.metrics[end..]);
        Board::new(metrics, self.slots.len(), self.ports.clone(), self.tables.clone())
            .with_entry_keys(self.entry_keys.clone())
    }

    /// Worker `w`'s publisher, due every `every_tsc` TSC cycles.
    pub fn publisher(self: &Arc<Board>, w: usize, every_tsc: u64) -> Publisher {
        Publisher { board: self.clone(), w, i: 0, every_tsc, last_tsc: 0 }
    }

    /// Workers publishing into this board.
    pub fn workers(&self) -> usize {
        self.slots.len()
    }

    /// Every metric summed over the workers, in walk order.
    pub fn totals(&self) -> Vec<u64> {
        let mut t = vec![0u64; self.metrics.len()];
        for s in &self.slots {
            for (x, v) in t.iter_mut().zip(s.iter()) {
                *x += v.load(Ordering::Relaxed);
            }
        }
        t
    }

    /// In `totals` (as [`Board::totals`] returns), the total of metric `family` with `label`,
    /// or over all its labels (`None`); 0 if there is none.
    pub fn total(&self, totals: &[u64], family: &str, label: Option<Label>) -> u64 {
        self.metrics
            .iter()
            .zip(totals)
            .filter(|(m, _)| m.family == family && label.is_none_or(|l| m.label == l))
            .map(|(_, v)| *v)
            .sum()
    }

    /// Metric `i`'s key in telemetry dictionaries: its family, then its label (`port_rx_packets/p0`,
    /// `dropped_packets/tx_full`, `table_packets/l2/3`, `table_packets/l2/miss`); only ASCII letters,
    /// digits, `_` and `/` (what DPDK 22.11's telemetry accepts in a name).
    pub fn key(&self, i: usize) -> String {
        let m = &self.metrics[i];
        let label = match m.label {
            Label::None => return m.family.to_string(),
            Label::Port(p) => label_key(self.ports.get(p as usize).map_or("?", String::as_str)),
            Label::Reason(r) => r.name().to_string(),
            Label::Entry { table, entry } => {
                let t = label_key(self.tables.get(table as usize).map_or("?", String::as_str));
                match entry {
                    Some(e) => format!("{t}/{e}"),
                    None => format!("{t}/miss"),
                }
            }
            Label::Rank { collective, rank } => format!("{collective}/{rank}"),
            Label::Collective(c) => format!("{c}"),
            Label::CollectiveNak { collective, reason } => {
                format!("{collective}/{}", crate::wire::gradient::NakReason::name(reason))
            }
            Label::CollectiveDrop { collective, reason } => format!("{collective}/{}", reason.name()),
            Label::Worker { worker, le: None } => format!("{worker}"),
            Label::Worker { worker, le: Some(u64::MAX) } => format!("{worker}/le_inf"),
            Label::Worker { worker, le: Some(le) } => format!("{worker}/le_{le}"),
        };
        format!("{}/{label}", m.family)
    }
}

/// Writes one worker's walk into its slot: the [`Visit`] its walks go to.
#[derive(Debug)]
pub struct Publisher {
    board: Arc<Board>,
    w: usize,
    i: usize,
    every_tsc: u64,
    last_tsc: u64,
}

impl Publisher {
    /// Whether a publication is due at TSC `now` (one per period); if so, the period restarts.
    #[inline]
    pub fn due(&mut self, now: u64) -> bool {
        if now.wrapping_sub(self.last_tsc) < self.every_tsc {
            return false;
        }
        self.last_tsc = now;
        true
    }

    /// Publishes into `board` from now on (a board [`Board::reshaped`] for a new pipeline).
    pub fn set_board(&mut self, board: Arc<Board>) {
        self.board = board;
    }

    /// Publishes `dp`'s counters and the poll loop's `stats` now.
    pub fn publish<B: crate::buf::PacketBuf>(&mut self, dp: &crate::datapath::Datapath<B>, stats: &LoopStats) {
        self.i = 0;
        dp.export(self);
        let (me, workers) = (self.w, self.board.workers());
        stats.export(me, workers, self);
    }
}

impl Visit for Publisher {
    #[inline]
    fn counter(&mut self, _: Metric, value: u64) {
        if let Some(a) = self.board.slots[self.w].get(self.i) {
            a.store(value, Ordering::Relaxed);
        }
        self.i += 1;
    }
}

/// The board of the running appliance, for the telemetry callbacks (which get no context).
static CURRENT: Mutex<Option<Arc<Board>>> = Mutex::new(None);

/// Makes `board` the one the telemetry commands read (`None`: no run).
pub fn set_current(board: Option<Arc<Board>>) {
    *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = board;
}

/// The board of the running appliance, if any.
pub fn current() -> Option<Arc<Board>> {
    CURRENT.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Table entries per page of `/dpu/table`: two values each, whose keys hold names of up to
/// [`crate::config::MAX_LABEL`] bytes, within the 16 KiB of a telemetry reply.
pub const TABLE_PAGE: usize = 80;

/// Registers the `/dpu/...` commands on DPDK's telemetry socket; they read the board of the
/// running appliance ([`set_current`]). Idempotent.
pub fn register_telemetry() -> Result<(), DpdkError> {
    for (cmd, help, handler) in COMMANDS {
        telemetry::register(cmd, help, handler)?;
    }
    Ok(())
}

/// The `/dpu/...` commands: name, one-line help (below DPDK's [`telemetry::MAX_HELP`] bytes,
/// with its NUL: a longer one makes the registration fail), handler.
const COMMANDS: [(&str, &str, telemetry::Handler); 5] = [
    (
        "/dpu/stats",
        "Returns the appliance's counters (ports, drops by reason, neighbour, aggregation), summed over the workers. No parameters",
        stats_command,
    ),
    (
        "/dpu/workers",
        "Returns per worker: busy/idle polls, bursts, TSC cycles per burst (mean, p50, p99), residence cycles (p50, p99). No parameters",
        workers_command,
    ),
    (
        "/dpu/stragglers",
        "Returns per rank of a collective: contributions, lateness sum (us), rounds completed last. Parameters: id[,page]",
        stragglers_command,
    ),
    (
        "/dpu/collectives",
        "Returns per collective: rounds, folds, bytes, results, resends, NAKs and drops by reason, slots in use. Parameters: [page]",
        collectives_command,
    ),
    (
        "/dpu/table",
        "Returns a table's packets and bytes per entry and for its miss. Parameters: table name[,page]",
        table_command,
    ),
];

/// `/dpu/stats`: every counter but the tables' entries and the collectives' ranks, by
/// [`Board::key`].
fn stats_command(_: &str) -> Reply {
    let b = current().ok_or("the appliance is not running")?;
    let t = b.totals();
    Ok(b.metrics
        .iter()
        .enumerate()
        .filter(|(_, m)| matches!(m.label, Label::None | Label::Port(_) | Label::Reason(_)))
        .map(|(i, _)| (b.key(i), t[i]))
        .collect())
}

/// `/dpu/workers`: per worker its busy and idle polls, bursts, and the TSC cycles a burst took
/// (mean, and the median and 99th percentile as the upper bounds of their log2 buckets), and
/// the median and 99th percentile of its packets' residence time (TSC cycles from rx burst to
/// tx burst, [`LoopStats::residence`]).
fn workers_command(_: &str) -> Reply {
    let b = current().ok_or("the appliance is not running")?;
    let t = b.totals();
    let mut out = Vec::new();
    for w in 0..b.workers() as u16 {
        let get = |family: &str| b.total(&t, family, Some(Label::Worker { worker: w, le: None }));
        let bursts = get("worker_bursts");
        let h = worker_hist(&b, &t, w, "worker_bursts_by_cycles");
        let r = worker_hist(&b, &t, w, "worker_packets_by_residence_cycles");
        out.push((format!("busy_polls/{w}"), get("worker_busy_polls")));
        out.push((format!("idle_polls/{w}"), get("worker_idle_polls")));
        out.push((format!("bursts/{w}"), bursts));
        out.push((format!("cycles_per_burst_mean/{w}"), get("worker_burst_cycles").checked_div(bursts).unwrap_or(0)));
        out.push((format!("cycles_per_burst_p50/{w}"), h.quantile(0.5)));
        out.push((format!("cycles_per_burst_p99/{w}"), h.quantile(0.99)));
        out.push((format!("residence_cycles_p50/{w}"), r.quantile(0.5)));
        out.push((format!("residence_cycles_p99/{w}"), r.quantile(0.99)));
    }
    Ok(out)
}

/// Worker `w`'s log2 histogram `family` (`worker_bursts_by_cycles` or
/// `worker_packets_by_residence_cycles`) back from the board's totals `t`, one bucket per
/// value labelled with its upper bound.
pub fn worker_hist(b: &Board, t: &[u64], w: u16, family: &str) -> Log2Hist<CYCLE_BUCKETS> {
    let mut h = Log2Hist::<CYCLE_BUCKETS>::default();
    for (i, m) in b.metrics.iter().enumerate() {
        if let Label::Worker { worker, le: Some(le) } = m.label {
            if worker == w && m.family == family {
                h.0[Log2Hist::<CYCLE_BUCKETS>::bucket_of(le)] += t[i];
            }
        }
    }
    h
}

/// Ranks per page of `/dpu/stragglers`: three values each.
pub const RANK_PAGE: usize = 80;

/// `/dpu/stragglers,ID[,PAGE]`: collective ID's straggler view, [`RANK_PAGE`] ranks a page:
/// per rank its contributions, their lateness summed (µs) and the rounds it completed.
fn stragglers_command(params: &str) -> Reply {
    let b = current().ok_or("the appliance is not running")?;
    let mut it = params.splitn(2, ',');
    let id = it.next().unwrap_or("").trim();
    let id: u16 = id.parse().map_err(|_| format!("collective '{}': expected a collective id", short(id)))?;
    let page: usize = match it.next() {
        Some(p) => p.trim().parse().map_err(|_| format!("page '{}': expected a number from 0", short(p)))?,
        None => 0,
    };
    let t = b.totals();
    let rows: Vec<usize> = b
        .metrics
        .iter()
        .enumerate()
        .filter(|(_, m)| matches!(m.label, Label::Rank { collective, .. } if collective == id))
        .map(|(i, _)| i)
        .collect();
    if rows.is_empty() {
        return Err(format!("no collective {id}"));
    }
    let ranks = rows.len() / 3;
    let pages = ranks.div_ceil(RANK_PAGE).max(1);
    if page >= pages {
        return Err(format!("page {page}: collective {id} has {pages} page(s)"));
    }
    let mut out = vec![
        ("ranks".to_string(), ranks as u64),
        ("page".to_string(), page as u64),
        ("pages".to_string(), pages as u64),
    ];
    for &i in rows.iter().skip(page * RANK_PAGE * 3).take(RANK_PAGE * 3) {
        out.push((b.key(i), t[i]));
    }
    Ok(out)
}

/// Collectives per page of `/dpu/collectives`: 26 values each (keys of at most 46 bytes), with
/// the 3 of the page's header, within the [`telemetry::MAX_DICT_ENTRIES`] (256) entries and the
/// 16 KiB of a telemetry reply.
pub const COLLECTIVE_PAGE: usize = 8;

/// `/dpu/collectives[,PAGE]`: [`collectives_reply`] of the running appliance's board.
fn collectives_command(params: &str) -> Reply {
    let b = current().ok_or("the appliance is not running")?;
    let page = params.trim();
    let page: usize = if page.is_empty() {
        0
    } else {
        page.parse().map_err(|_| format!("page '{}': expected a number from 0", short(page)))?
    };
    collectives_reply(&b, page)
}

/// Page `page` (from 0) of every collective's counters on `b`, [`COLLECTIVE_PAGE`] collectives
/// a page in config order, with `collectives`, `page` and `pages`: per collective its
/// `agg_collective_*` values summed over the workers, keyed `ID/NAME` (the family without
/// `agg_collective_`) or `ID/NAME/REASON` (`7/completed_rounds`, `7/nak_packets/stale_round`,
/// `7/dropped_packets/grad_duplicate`, `7/slots_in_use`).
pub fn collectives_reply(b: &Board, page: usize) -> Reply {
    let t = b.totals();
    // Per collective (in walk order, which is config order) its metrics' indices.
    let mut colls: Vec<(u16, Vec<usize>)> = Vec::new();
    for (i, m) in b.metrics.iter().enumerate() {
        let id = match m.label {
            Label::Collective(c) => c,
            Label::CollectiveNak { collective, .. } | Label::CollectiveDrop { collective, .. } => collective,
            _ => continue,
        };
        match colls.last_mut() {
            Some((c, rows)) if *c == id => rows.push(i),
            _ => colls.push((id, vec![i])),
        }
    }
    let pages = colls.len().div_ceil(COLLECTIVE_PAGE).max(1);
    if page >= pages {
        return Err(format!("page {page}: {} collective(s) make {pages} page(s)", colls.len()));
    }
    let mut out = vec![
        ("collectives".to_string(), colls.len() as u64),
        ("page".to_string(), page as u64),
        ("pages".to_string(), pages as u64),
    ];
    for (id, rows) in colls.iter().skip(page * COLLECTIVE_PAGE).take(COLLECTIVE_PAGE) {
        for &i in rows {
            let m = &b.metrics[i];
            let name = m.family.strip_prefix("agg_collective_").unwrap_or(m.family);
            let key = match m.label {
                Label::CollectiveNak { reason, .. } => {
                    format!("{id}/{name}/{}", crate::wire::gradient::NakReason::name(reason))
                }
                Label::CollectiveDrop { reason, .. } => format!("{id}/{name}/{}", reason.name()),
                _ => format!("{id}/{name}"),
            };
            out.push((key, t[i]));
        }
    }
    Ok(out)
}

/// `/dpu/table,NAME[,PAGE]`: page PAGE (from 0) of table NAME's entries ([`TABLE_PAGE`] a
/// page, then the miss on the last page), with `entries`, `page` and `pages`.
fn table_command(params: &str) -> Reply {
    let b = current().ok_or("the appliance is not running")?;
    let mut it = params.splitn(2, ',');
    let name = it.next().unwrap_or("").trim();
    let page: usize = match it.next() {
        Some(p) => p.trim().parse().map_err(|_| format!("page '{}': expected a number from 0", short(p)))?,
        None => 0,
    };
    let table = b
        .tables
        .iter()
        .position(|t| t == name)
        .ok_or_else(|| format!("no table '{}'; tables: {}", short(name), b.tables.join(", ")))? as u16;
    let t = b.totals();
    let rows: Vec<usize> = b
        .metrics
        .iter()
        .enumerate()
        .filter(|(_, m)| matches!(m.label, Label::Entry { table: x, .. } if x == table))
        .map(|(i, _)| i)
        .collect();
    // Two values (packets, bytes) per entry; the miss is the last entry.
    let entries = rows.len() / 2;
    let pages = entries.div_ceil(TABLE_PAGE).max(1);
    if page >= pages {
        return Err(format!("page {page}: table '{name}' has {pages} page(s)"));
    }
    let mut out = vec![
        ("entries".to_string(), entries.saturating_sub(1) as u64),
        ("page".to_string(), page as u64),
        ("pages".to_string(), pages as u64),
    ];
    for &i in rows.iter().skip(page * TABLE_PAGE * 2).take(TABLE_PAGE * 2) {
        out.push((b.key(i), t[i]));
    }
    Ok(out)
}

/// At most 24 characters of `s` (a request's text echoed in an error: DPDK cuts a reply's
/// strings at 128 bytes).
fn short(s: &str) -> String {
    let mut t: String = s.chars().take(24).collect();
    if t.len() < s.len() {
        t.push_str("...");
    }
    t
}

/// The names of a worker's walk: its datapath's, then the poll loops' of `workers` workers.
pub fn names_of<B: crate::buf::PacketBuf>(dp: &crate::datapath::Datapath<B>, workers: usize) -> Vec<Metric> {
    let mut n = Names::default();
    dp.export(&mut n);
    LoopStats::default().export(0, workers, &mut n);
    n.0
}

/// Buckets of the cycles-per-burst histogram ([`Log2Hist`]): up to `2^30` TSC cycles and above.
pub const CYCLE_BUCKETS: usize = 32;

/// What a worker's poll loop counts about itself: how often it found work, and how many TSC
/// cycles each burst took (from the start of the rx call that brought it to the end of its
/// processing: the rx call, parse, tables, aggregation, handing to the tx buffers and the tx
/// bursts that filled them; what testpmd's `--record-core-cycles` counts as busy), as a log2
/// histogram. Not in them: the periodic flush of partly filled tx buffers, and the packets
/// other workers hand over (processed from the ring between bursts). Plain integers, the
/// worker's own. The lockstep replay path (several workers sending to one shaped port in a
/// replay) does not count them.
#[derive(Debug, Clone, Copy, Default)]
pub struct LoopStats {
    /// Loop turns in which some rx queue, or a ring from another worker, gave packets.
    pub busy_polls: u64,
    /// Loop turns in which none did.
    pub idle_polls: u64,
    /// Rx bursts processed.
    pub bursts: u64,
    /// TSC cycles spent on them, each from the start of its rx call to the end of its
    /// processing.
    pub burst_cycles: u64,
    /// Bursts by cycles.
    pub cycles: Log2Hist<CYCLE_BUCKETS>,
    /// Packets sent by their residence time in TSC cycles: from the end of the rx burst that
    /// brought them (for packets from the hand-off and scheduler rings and the egress
    /// schedulers, the start of the loop turn that took them: their time in a ring or an egress
    /// queue is not in it; the queues' sojourn histograms have the latter) to the end of the tx
    /// burst that took them. Packets the tx queue refused are not in it (`tx_full`).
    pub residence: Log2Hist<CYCLE_BUCKETS>,
}

impl LoopStats {
    /// Counts a burst that took `cycles` TSC cycles.
    #[inline]
    pub fn burst(&mut self, cycles: u64) {
        self.bursts += 1;
        self.burst_cycles += cycles;
        self.cycles.record(cycles);
    }

    /// Walks worker `me`'s loop counters as those of `workers` workers, the others' zero (so
    /// that every worker's walk has the same shape and the board's sums are per worker).
    pub fn export<V: Visit>(&self, me: usize, workers: usize, v: &mut V) {
        let zero = LoopStats::default();
        for w in 0..workers {
            let s = if w == me { self } else { &zero };
            let label = Label::Worker { worker: w as u16, le: None };
            for (family, help, value) in [
                (
                    "worker_busy_polls",
                    "poll-loop turns in which an rx queue or another worker's ring gave packets",
                    s.busy_polls,
                ),
                ("worker_idle_polls", "poll-loop turns in which no rx queue gave packets", s.idle_polls),
                ("worker_bursts", "rx bursts processed", s.bursts),
                (
                    "worker_burst_cycles",
                    "TSC cycles spent on rx bursts, from each rx call to the end of its processing",
                    s.burst_cycles,
                ),
            ] {
                v.counter(Metric { family, help, label }, value);
            }
            for (b, n) in s.cycles.0.iter().enumerate() {
                let label = Label::Worker { worker: w as u16, le: Some(Log2Hist::<CYCLE_BUCKETS>::upper(b)) };
                let m = Metric {
                    family: "worker_bursts_by_cycles",
                    help: "rx bursts by the TSC cycles they took, in log2 buckets (cycles_le: the upper bound; cumulative on /metrics)",
                    label,
                };
                v.counter(m, *n);
            }
            for (b, n) in s.residence.0.iter().enumerate() {
                let label = Label::Worker { worker: w as u16, le: Some(Log2Hist::<CYCLE_BUCKETS>::upper(b)) };
                let m = Metric {
                    family: "worker_packets_by_residence_cycles",
                    help: "packets sent by the TSC cycles from their rx burst to their tx burst, in log2 buckets (cycles_le: the upper bound; cumulative on /metrics)",
                    label,
                };
                v.counter(m, *n);
            }
        }
    }
}

/// One reading of a board for the periodic stats line: the totals it prints, by family and
/// drop reason, whatever the board's layout. A runtime change of the tables or collectives
/// replaces the board by one of another layout ([`Board::reshaped`]); readings of the two
/// compare all the same, so the line across the change says the true growth.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatsReading {
    /// Packets received, over the ports.
    pub rx_packets: u64,
    /// Bytes received, over the ports.
    pub rx_bytes: u64,
    /// Packets the workers sent, over the ports.
    pub tx_packets: u64,
    /// Bytes the workers sent, over the ports.
    pub tx_bytes: u64,
    /// Rounds the collectives completed.
    pub completed_rounds: u64,
    /// Contributions folded into a round.
    pub folded: u64,
    /// Packets dropped, per reason, in the board's order.
    pub drops: Vec<(crate::stats::Reason, u64)>,
}

impl StatsReading {
    /// The reading of `board` whose totals ([`Board::totals`]) are `t`.
    pub fn of(board: &Board, t: &[u64]) -> StatsReading {
        let sum = |family: &str| board.total(t, family, None);
        let drops = board
            .metrics
            .iter()
            .zip(t)
            .filter_map(|(m, n)| match m.label {
                Label::Reason(r) if m.family == "dropped_packets" => Some((r, *n)),
                _ => None,
            })
            .collect();
        StatsReading {
            rx_packets: sum("port_rx_packets"),
            rx_bytes: sum("port_rx_bytes"),
            tx_packets: sum("port_tx_packets"),
            tx_bytes: sum("port_tx_bytes"),
            completed_rounds: sum("agg_completed_rounds"),
            folded: sum("agg_folded_contributions"),
            drops,
        }
    }

    /// The drops of `reason` in this reading (0 if none).
    fn dropped(&self, reason: crate::stats::Reason) -> u64 {
        self.drops.iter().find(|(r, _)| *r == reason).map_or(0, |(_, n)| *n)
    }
}

/// The periodic stats line: rates over the last interval and totals, from two readings `dt_s`
/// seconds apart (`prev`, `now`; of one board or of two, across a runtime change), at
/// `elapsed_s` into the run. Each drop reason seen says its total and its growth since `prev`.
pub fn stats_line(prev: &StatsReading, now: &StatsReading, dt_s: f64, elapsed_s: f64) -> String {
    let rate = |f: fn(&StatsReading) -> u64| f(now).saturating_sub(f(prev)) as f64 / dt_s.max(1e-9);
    let drops: Vec<String> = now
        .drops
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(r, n)| format!("{}={} (+{})", r.name(), n, n.saturating_sub(prev.dropped(*r))))
        .collect();
    let mut line = format!(
        "dpu: {elapsed_s:.1} s: rx {:.3} Mpps {:.3} Gbit/s, tx {:.3} Mpps {:.3} Gbit/s",
        rate(|r| r.rx_packets) / 1e6,
        rate(|r| r.rx_bytes) * 8.0 / 1e9,
        rate(|r| r.tx_packets) / 1e6,
        rate(|r| r.tx_bytes) * 8.0 / 1e9,
    );
    if now.completed_rounds > 0 || now.folded > 0 {
        line += &format!(
            ", rounds {} ({:.0}/s), folded {}",
            now.completed_rounds,
            rate(|r| r.completed_rounds),
            now.folded
        );
    }
    line += &format!("; drops {}", if drops.is_empty() { "none".to_string() } else { drops.join(" ") });
    line
}

#[cfg(test)]
mod tests {

    /// DPDK refuses a command whose help does not fit its string limit, and then no `/dpu`
    /// command works: every help fits.
    #[test]
    fn every_command_help_fits_dpdk() {
        for (cmd, help, _) in super::COMMANDS {
            assert!(help.len() < crate::dpdk::telemetry::MAX_HELP, "{cmd}: {} bytes", help.len());
            assert!(cmd.starts_with("/dpu/") && !help.contains('\n'), "{cmd}");
        }
    }

    use super::*;
    use crate::datapath::Datapath;
    use crate::stats::Reason;

    #[test]
    fn the_board_sums_what_the_workers_published() {
        let mut a: Datapath = Datapath::new(Default::default(), 1, crate::wire::gradient::DEFAULT_UDP_PORT);
        let mut b: Datapath = Datapath::new(Default::default(), 1, crate::wire::gradient::DEFAULT_UDP_PORT);
        let board = Arc::new(Board::new(names_of(&a, 2), 2, vec!["p-0".into()], vec![]));
        a.counters.rx(0, 100);
        b.counters.rx(0, 50);
        b.counters.drop(Reason::TxFull);
        board.publisher(0, 0).publish(&a, &LoopStats::default());
        let mut loop1 = LoopStats { busy_polls: 3, idle_polls: 7, ..Default::default() };
        loop1.burst(1000);
        loop1.burst(1500);
        board.publisher(1, 0).publish(&b, &loop1);
        let t = board.totals();
        assert_eq!(board.total(&t, "port_rx_packets", Some(Label::Port(0))), 2);
        assert_eq!(board.total(&t, "port_rx_bytes", Some(Label::Port(0))), 150);
        assert_eq!(board.total(&t, "dropped_packets", Some(Label::Reason(Reason::TxFull))), 1);
        // Each worker's loop counters stay its own: worker 1's under worker 1, zeros under 0.
        let w = |worker, le| Some(Label::Worker { worker, le });
        assert_eq!(board.total(&t, "worker_busy_polls", w(1, None)), 3);
        assert_eq!(board.total(&t, "worker_idle_polls", w(1, None)), 7);
        assert_eq!(board.total(&t, "worker_busy_polls", w(0, None)), 0);
        assert_eq!(board.total(&t, "worker_burst_cycles", w(1, None)), 2500);
        // 1000 and 1500 cycles: buckets 512..=1023 and 1024..=2047.
        assert_eq!(board.total(&t, "worker_bursts_by_cycles", w(1, Some(1023))), 1);
        assert_eq!(board.total(&t, "worker_bursts_by_cycles", w(1, Some(2047))), 1);
        let k = board.metrics.iter().position(|m| m.label == Label::Worker { worker: 1, le: Some(u64::MAX) }).unwrap();
        assert_eq!(board.key(k), "worker_bursts_by_cycles/1/le_inf");
        let i = board.metrics.iter().position(|m| m.family == "port_rx_packets").unwrap();
        assert_eq!(board.key(i), "port_rx_packets/p_0");
        // A second publication replaces the first (counters are totals, not increments).
        a.counters.rx(0, 100);
        board.publisher(0, 0).publish(&a, &LoopStats::default());
        let t2 = board.totals();
        assert_eq!(board.total(&t2, "port_rx_packets", Some(Label::Port(0))), 3);
        let line = stats_line(&StatsReading::of(&board, &t), &StatsReading::of(&board, &t2), 1.0, 2.0);
        assert!(line.starts_with("dpu: 2.0 s: rx 0.000 Mpps"), "{line}");
        assert!(line.contains("drops tx_full=1 (+0)"), "{line}");
    }

    /// A runtime change between two lines replaces the board: the next line compares the
    /// readings of the two boards by family and reason, and says the growth in between.
    #[test]
    fn the_stats_line_spans_a_new_board() {
        let mut dp: Datapath = Datapath::new(Default::default(), 1, crate::wire::gradient::DEFAULT_UDP_PORT);
        let old = Arc::new(Board::new(names_of(&dp, 1), 1, vec!["p0".into()], vec![]));
        dp.counters.rx(0, 100);
        for _ in 0..3 {
            dp.counters.drop(Reason::TxFull);
        }
        old.publisher(0, 0).publish(&dp, &LoopStats::default());
        let before = StatsReading::of(&old, &old.totals());
        let new = Arc::new(old.with_collectives(&[(7, 1)]));
        assert_ne!(new.metrics.len(), old.metrics.len());
        dp.counters.rx(0, 100);
        for _ in 0..5 {
            dp.counters.drop(Reason::TxFull);
        }
        new.publisher(0, 0).publish(&dp, &LoopStats::default());
        let after = StatsReading::of(&new, &new.totals());
        assert_eq!((before.rx_packets, after.rx_packets), (1, 2));
        let line = stats_line(&before, &after, 2.0, 10.0);
        assert!(line.starts_with("dpu: 10.0 s: rx 0.000 Mpps"), "{line}");
        assert!(line.ends_with("drops tx_full=8 (+5)"), "{line}");
    }

    /// A datapath whose aggregator has `n` collectives of one member each, ids 60000 + i (the
    /// longest keys: five digits).
    fn with_collectives(n: usize) -> Datapath {
        let mut text =
            String::from("[[port]]\nvdev = \"net_null0\"\nmac = \"02:00:00:00:00:fe\"\nipv4 = \"10.0.0.254\"\n");
        for i in 0..n {
            text += &format!(
                "[[collective]]\ncollective_id = {}\nop = \"sum\"\ndtype = \"f32\"\ncarriage = \"udp\"\ntensor_elements = 8\nchunk_elements = 4\n\
                 [[collective.member]]\nrank = 0\nip = \"10.0.1.{}\"\nmac = \"02:00:00:00:01:01\"\nudp_port = {}\n",
                60000 + i,
                i + 1,
                50000 + i
            );
        }
        let l = crate::config::load_str(&text, std::path::Path::new("t.toml")).unwrap_or_else(|e| panic!("{e}"));
        let ports =
            vec![crate::agg::PortAddr { mac: "02:00:00:00:00:fe".parse().unwrap(), ipv4: l.port_ipv4[0], ipv6: None }];
        let agg = crate::agg::Aggregator::new(&l.collectives, ports, crate::wire::gradient::DEFAULT_UDP_PORT, 1);
        Datapath::new(l.pipeline, 1, crate::wire::gradient::DEFAULT_UDP_PORT).with_aggregator(agg)
    }

    /// A board reshaped for a changed collective set has that set's metrics where the old set's
    /// were, and is the board a worker with that set publishes into, value for value.
    #[test]
    fn a_board_reshaped_for_new_collectives_matches_their_walk() {
        let two = with_collectives(2);
        let board = Board::new(names_of(&two, 2), 2, vec!["p0".into()], vec![]);
        let three = with_collectives(3);
        let ids: Vec<(u16, usize)> = three.agg.as_ref().unwrap().stragglers().map(|(id, n, _)| (id, n)).collect();
        assert_eq!(ids, [(60000, 1), (60001, 1), (60002, 1)]);
        let reshaped = board.with_collectives(&ids);
        assert_eq!(reshaped.metrics, names_of(&three, 2), "the same metrics, in the same order");
        let none = board.with_collectives(&[]);
        assert_eq!(none.metrics, names_of(&with_collectives(0), 2));
        assert!(!none.metrics.iter().any(|m| matches!(m.label, Label::Collective(_) | Label::Rank { .. })));
        // And back: from none to two.
        assert_eq!(none.with_collectives(&ids[..2]).metrics, board.metrics);
    }

    /// `/dpu/collectives` pages the collectives, each page within a telemetry reply's 256
    /// entries and 16 KiB (as DPDK writes it: `"key":value,` with 20-digit values at worst).
    #[test]
    fn collectives_pages_fit_a_telemetry_reply() {
        let dp = with_collectives(2 * COLLECTIVE_PAGE + 1);
        let board = Arc::new(Board::new(names_of(&dp, 1), 1, vec!["p0".into()], vec![]));
        board.publisher(0, 0).publish(&dp, &LoopStats::default());
        let p0 = collectives_reply(&board, 0).unwrap();
        assert_eq!(&p0[..3], &[("collectives".into(), 17), ("page".into(), 0), ("pages".into(), 3)]);
        assert_eq!(p0.len(), 3 + COLLECTIVE_PAGE * 26);
        assert!(p0.len() <= crate::dpdk::telemetry::MAX_DICT_ENTRIES);
        let bytes: usize = p0.iter().map(|(k, _)| k.len() + 2 + 1 + 20 + 1).sum::<usize>() + 64;
        assert!(bytes <= 16 * 1024, "{bytes} bytes");
        assert!(p0.iter().all(|(k, _)| k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '/')));
        let keys: Vec<&str> = p0.iter().map(|(k, _)| k.as_str()).collect();
        assert!(keys.contains(&"60000/completed_rounds"), "{keys:?}");
        assert!(keys.contains(&"60007/nak_packets/stale_round"), "{keys:?}");
        assert!(keys.contains(&"60007/dropped_packets/grad_duplicate"), "{keys:?}");
        assert!(keys.contains(&"60000/slots_in_use"), "{keys:?}");
        assert!(!keys.iter().any(|k| k.starts_with("60008/")));
        let p2 = collectives_reply(&board, 2).unwrap();
        assert_eq!(p2.len(), 3 + 26);
        assert!(p2[3].0.starts_with("60016/"));
        assert!(collectives_reply(&board, 3).is_err());
        let i = board.metrics.iter().position(|m| m.family == "agg_collective_dropped_packets").unwrap();
        assert_eq!(board.key(i), "agg_collective_dropped_packets/60000/grad_result_or_nak_input");
    }
}
