//! `pktgen run`: the live generator on DPDK ports.
//!
//! - Tx lcores (`[pktgen] tx_lcores`, one lane each, lane `i` owning tx queue `i` of every
//!   port) send their share of every stream: bulk mbuf allocation, per-flow frame templates
//!   ([`crate::stream::SizeTemplates`]) stamped with a sequence number and the TSC, bursts of
//!   `burst` packets, paced by the TSC ([`pace::Pacer`]). A burst the queue does not take whole
//!   is kept and retried first on the next pass (a tx-full retry), never dropped.
//! - The main lcore polls the streams' receive ports, finds each frame's stamp, and counts per
//!   stream: packets, bytes, loss and reordering from the sequence numbers (per lane), latency
//!   (receive TSC minus stamp) into an HDR histogram; it prints a line per second and the final
//!   summary ([`report`]).
//!
//! - `[[allreduce]]` emulations ([`allreduce`]) run on the main lcore between its receive
//!   passes, or each alone on a worker lcore of its own (`lcore`, [`emulations`]).
//!
//! Nothing on the per-packet path allocates, locks or makes a system call: the tx lanes publish
//! their counters with relaxed atomic stores that only they write.

pub mod allreduce;
pub mod config;
pub mod emulations;
pub mod pace;
pub mod replay;
pub mod report;

use crate::stream::{self, SizeMix, SizeTemplates};
use config::{Loaded, Rate};
use dataplane::dpdk::port::{memif_client_socket, PortSetup};
use dataplane::dpdk::{self as dpdk, lcore, DpdkError, Eal, Mbuf, Mempool, Port, RxQueue, TxQueue};
use hdrhistogram::Histogram;
use pace::Pacer;
use report::{Latency, StreamSummary, Summary};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Options from the command line.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Seconds to run (overrides `[pktgen] duration_s`).
    pub duration_s: Option<f64>,
    /// Write the summary as JSON here.
    pub json: Option<PathBuf>,
    /// Write the summary as CSV here.
    pub csv: Option<PathBuf>,
    /// No line per second.
    pub quiet: bool,
    /// More EAL arguments, after the config's.
    pub eal_extra: Vec<String>,
    /// Each stream stops after this many packets (split among its lanes); the run ends when
    /// every stream has stopped (or at the duration).
    pub packets: Option<u64>,
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A bad configuration or command line (exit status 2).
    #[error("{0}")]
    Config(String),
    /// DPDK or the system refused (exit status 1).
    #[error("{0}")]
    Runtime(String),
}

impl From<DpdkError> for RunError {
    fn from(e: DpdkError) -> Self {
        RunError::Runtime(e.to_string())
    }
}

/// Set by SIGINT/SIGTERM: the run ends as if its duration were over.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// One lane's counters of one stream, written by that lane only (relaxed load + store: no
/// locked instruction), read by the main lcore. A cache line each.
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct TxCounters {
    /// Packets the tx queue took.
    pub packets: AtomicU64,
    /// Their bytes (frames without FCS).
    pub bytes: AtomicU64,
    /// `rte_eth_tx_burst` calls that left part of a burst (the rest is retried).
    pub tx_full: AtomicU64,
    /// Bulk mbuf allocations that failed (the pool was empty).
    pub nombuf: AtomicU64,
    /// pcap streams: captured frames too long for the mbufs, not sent.
    pub skipped: AtomicU64,
    /// pcap streams: records that could not be read (a last record cut short by the end of the
    /// file, once per pass), not sent.
    pub unreadable: AtomicU64,
    /// The lane's TSC when it started sending this stream, and when it stopped (its last
    /// packet with `--packets`, else the lane's end; 0: not yet).
    pub start_tsc: AtomicU64,
    /// See `start_tsc`.
    pub end_tsc: AtomicU64,
}

/// `s` seconds in TSC cycles at `hz`, saturating at `u64::MAX` (a bound too far to reach).
pub(crate) fn secs_to_cycles(s: f64, hz: u64) -> u64 {
    // `as` saturates (and takes NaN and negatives to 0).
    (s * hz as f64) as u64
}

#[inline(always)]
fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed) + n, Ordering::Relaxed);
}

/// The first `n` slots of `pend`, filled from `pool` with mbufs that are not reset (see
/// [`Mempool::alloc_bulk_raw`]); `None` when `n` is 0, or when the pool is short (counted in
/// `nombuf`, the slots left empty).
#[inline(always)]
fn alloc_burst<'a>(
    pool: &Mempool,
    pend: &'a mut [Option<Mbuf>],
    n: usize,
    nombuf: &AtomicU64,
) -> Option<&'a mut [Option<Mbuf>]> {
    if n == 0 {
        return None;
    }
    let slots = &mut pend[..n];
    if !pool.alloc_bulk_raw(slots) {
        bump(nombuf, 1);
        return None;
    }
    Some(slots)
}

/// The size index of the `k`-th next packet of a stream at position `pos` of its mix.
#[inline(always)]
fn size_index(mix: &SizeMix, pos: usize, k: usize) -> usize {
    match mix {
        SizeMix::Fixed => 0,
        SizeMix::Mix { pattern } => pattern[(pos + k) % pattern.len()] as usize,
        SizeMix::Sweep { .. } => pos,
    }
}

/// One stream as one lane sends it.
struct LaneStream {
    counters: Arc<[TxCounters]>,
    slot: usize,
    txq: TxQueue,
    templates: Vec<SizeTemplates>,
    /// Per size: what one frame costs in the pacer's units (1 packet, or bits at the layer).
    cost: Vec<f64>,
    mix: SizeMix,
    pos: usize,
    sweep_step: u64,
    sweep_next: u64,
    flow: u32,
    seq: u32,
    pacer: Option<Pacer>,
    pend: Vec<Option<Mbuf>>,
    lens: Vec<u16>,
    pend_at: usize,
    pend_n: usize,
    /// Packets still to send (`--packets`; `u64::MAX`: no limit).
    limit: u64,
    /// Where a new rate for the stream arrives while it runs ([`RateCell`]), this stream's
    /// index there, the generation last applied, the lane's share of the stream's rate and the
    /// TSC's Hz.
    rates: Arc<[RateCell]>,
    stream: usize,
    rate_gen: u64,
    share: f64,
    hz: u64,
}

/// A stream's rate as changed while the run goes (`rate NAME VALUE` on pktgen's stdin): the
/// whole stream's rate in its units (f64 bits), then a generation the lanes compare with theirs.
/// The changes are also kept, with their TSC, for the summary (the lanes never read them).
#[derive(Debug, Default)]
pub struct RateCell {
    rate: AtomicU64,
    gen: AtomicU64,
    history: std::sync::Mutex<Vec<(u64, f64)>>,
}

impl RateCell {
    /// Sets the stream's rate (its units per second, all lanes together) at TSC `tsc`.
    pub fn set(&self, rate: f64, tsc: u64) {
        self.history.lock().unwrap_or_else(|e| e.into_inner()).push((tsc, rate));
        self.rate.store(rate.to_bits(), Ordering::Relaxed);
        self.gen.fetch_add(1, Ordering::Release);
    }

    /// The changes so far: `(TSC, rate)`, in order.
    pub fn history(&self) -> Vec<(u64, f64)> {
        self.history.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl LaneStream {
    #[inline(always)]
    fn size_index(&self, k: usize) -> usize {
        size_index(&self.mix, self.pos, k)
    }

    /// One pass: retry what the queue refused, else build and send what the pacer allows.
    #[inline]
    fn step(&mut self, now: u64, pool: &Mempool, burst: usize, stamp_back: u64) {
        let c = &self.counters[self.slot];
        if self.pend_n > 0 {
            let (a, n) = (self.pend_at, self.pend_n);
            let k = self.txq.tx_burst(&mut self.pend[a..a + n]);
            bump(&c.packets, k as u64);
            bump(&c.bytes, self.lens[a..a + k].iter().map(|&l| l as u64).sum());
            self.pend_at += k;
            self.pend_n -= k;
            if self.pend_n > 0 {
                bump(&c.tx_full, 1);
                return;
            }
        }
        if let SizeMix::Sweep { .. } = self.mix {
            if now >= self.sweep_next {
                self.pos = (self.pos + 1) % self.templates.len();
                self.sweep_next = now + self.sweep_step;
            }
        }
        if let Some(p) = &mut self.pacer {
            let cell = &self.rates[self.stream];
            let g = cell.gen.load(Ordering::Acquire);
            if g != self.rate_gen {
                self.rate_gen = g;
                p.set_rate(f64::from_bits(cell.rate.load(Ordering::Relaxed)) * self.share, self.hz, now);
            }
        }
        let burst = burst.min(self.limit.min(burst as u64) as usize);
        let n = match &mut self.pacer {
            None => burst,
            Some(p) if matches!(self.mix, SizeMix::Fixed) => {
                // Whole packets of one cost: one division per burst.
                let k = (p.budget(now) / self.cost[0]).max(0.0);
                if k >= burst as f64 {
                    burst
                } else {
                    k as usize
                }
            }
            Some(p) => {
                let mut budget = p.budget(now);
                let mut n = 0;
                while n < burst {
                    let cost = self.cost[self.size_index(n)];
                    if cost > budget {
                        break;
                    }
                    budget -= cost;
                    n += 1;
                }
                n
            }
        };
        // Unreset mbufs: reset_tx below sets what a tx PMD reads.
        let Some(slots) = alloc_burst(pool, &mut self.pend, n, &c.nombuf) else {
            return;
        };
        // One TSC read per burst: every packet of a burst carries the same stamp time.
        let tsc = now.wrapping_sub(stamp_back);
        let mut spent = 0.0;
        if let SizeMix::Fixed = self.mix {
            // One template for the whole burst: no size lookup per packet.
            let t = &self.templates[0];
            let st = t.stamper(tsc);
            let (len, flows) = (t.len as u16, t.flows());
            let (mut seq, mut flow) = (self.seq, self.flow);
            for (slot, l) in slots.iter_mut().zip(&mut self.lens) {
                let m = slot.as_mut().expect("allocated above");
                // The pool's data room fits the largest frame (checked with the config).
                if let Some(data) = m.reset_tx(len) {
                    st.stamp(data, flow, seq);
                }
                *l = len;
                seq = seq.wrapping_add(1);
                flow += 1;
                if flow == flows {
                    flow = 0;
                }
            }
            (self.seq, self.flow) = (seq, flow);
            spent = self.cost[0] * n as f64;
        } else {
            for (j, slot) in slots.iter_mut().enumerate() {
                let si = size_index(&self.mix, self.pos, j);
                let t = &self.templates[si];
                let m = slot.as_mut().expect("allocated above");
                if let Some(data) = m.reset_tx(t.len as u16) {
                    t.stamp(data, self.flow, self.seq, tsc);
                }
                self.lens[j] = t.len as u16;
                spent += self.cost[si];
                self.seq = self.seq.wrapping_add(1);
                self.flow += 1;
                if self.flow == t.flows() {
                    self.flow = 0;
                }
            }
        }
        if let SizeMix::Mix { pattern } = &self.mix {
            self.pos = (self.pos + n) % pattern.len();
        }
        if let Some(p) = &mut self.pacer {
            p.spend(spent);
        }
        self.limit -= n as u64;
        let k = self.txq.tx_burst(&mut self.pend[..n]);
        bump(&c.packets, k as u64);
        bump(&c.bytes, self.lens[..k].iter().map(|&l| l as u64).sum());
        if k < n {
            bump(&c.tx_full, 1);
            self.pend_at = k;
            self.pend_n = n - k;
        }
    }

    /// Frees what is still waiting.
    fn discard(&mut self) {
        dpdk::mbuf::free_burst(&mut self.pend[self.pend_at..self.pend_at + self.pend_n]);
        self.pend_n = 0;
    }

    /// Nothing left to send or retry.
    #[inline(always)]
    fn finished(&self) -> bool {
        self.limit == 0 && self.pend_n == 0
    }
}

/// A tx lane's whole work: every stream in turn, until `stop` or until every stream has
/// finished (`--packets`, the passes of a pcap file); then it counts itself in `finished`.
#[inline(never)]
#[allow(clippy::too_many_arguments)] // the lane's parts, moved onto its lcore
fn lane_loop(
    mut streams: Vec<LaneStream>,
    mut replays: Vec<replay::ReplayLane>,
    pool: Mempool,
    burst: usize,
    stamp_back: u64,
    stop: Arc<AtomicBool>,
    finished: Arc<AtomicUsize>,
    reader: u32,
) {
    // A reader of `dpdk::rcu` while it sends: a memif peer's departure unmaps the rings only
    // after this loop's next turn.
    let online = dpdk::rcu::workers().enter(reader).expect("reader ids are below RTE_MAX_LCORE");
    let t0 = dpdk::rdtsc();
    for s in &mut streams {
        s.counters[s.slot].start_tsc.store(t0, Ordering::Relaxed);
        if let Some(p) = &mut s.pacer {
            p.start(t0);
        }
        s.sweep_next = t0 + s.sweep_step;
    }
    for r in &mut replays {
        r.counters[r.slot].start_tsc.store(t0, Ordering::Relaxed);
        r.start(t0);
    }
    while !stop.load(Ordering::Relaxed) {
        online.quiescent();
        let now = dpdk::rdtsc();
        for s in &mut streams {
            s.step(now, &pool, burst, stamp_back);
            // A stream that sent its last packet (`--packets`) ends there, not when the lane
            // does: its rate is over its own sending time.
            if s.finished() && s.counters[s.slot].end_tsc.load(Ordering::Relaxed) == 0 {
                s.counters[s.slot].end_tsc.store(now, Ordering::Relaxed);
            }
        }
        for r in &mut replays {
            r.step(now, &pool, burst);
        }
        if streams.iter().all(LaneStream::finished) && replays.iter().all(replay::ReplayLane::finished) {
            break;
        }
    }
    let t1 = dpdk::rdtsc();
    for s in &mut streams {
        s.discard();
        if s.counters[s.slot].end_tsc.load(Ordering::Relaxed) == 0 {
            s.counters[s.slot].end_tsc.store(t1, Ordering::Relaxed);
        }
    }
    for r in &mut replays {
        r.discard();
        r.counters[r.slot].end_tsc.store(t1, Ordering::Relaxed);
    }
    finished.fetch_add(1, Ordering::Release);
}

/// Sequence numbers of one (stream, lane) as received.
#[derive(Debug, Default, Clone, Copy)]
struct SeqTrack {
    /// One past the highest sequence number seen (extended to 64 bits).
    next: u64,
    received: u64,
}

/// What the receive side keeps per stream.
struct RxStream {
    packets: u64,
    bytes: u64,
    reordered: u64,
    /// Received with ECN CE (a queue on the way marked them).
    ce: u64,
    /// CNPs received for the stream's QPs (RoCEv2: DETH source QPs `src_qp .. src_qp + flows`).
    cnps: u64,
    lanes: Vec<SeqTrack>,
    hist: Histogram<u64>,
    first_tsc: u64,
    last_tsc: u64,
}

impl RxStream {
    fn seq_lost(&self) -> u64 {
        self.lanes.iter().map(|l| l.next.saturating_sub(l.received)).sum()
    }
}

/// The receive side: streams and the per-second histogram.
struct Rx {
    streams: Vec<RxStream>,
    queues: Vec<RxQueue>,
    /// Per queue: the pcap stream that frames without a stamp arriving there belong to.
    unstamped: Vec<Option<usize>>,
    interval: Histogram<u64>,
    other: u64,
    /// RoCEv2 CNPs received, whatever QP they name.
    cnps: u64,
    /// Per RoCEv2 stream: its QPs (first, count), to credit a CNP to the stream it is for.
    cnp_qps: Vec<(usize, u32, u32)>,
    /// ns = cycles * mult >> 32.
    mult: u128,
    slots: Vec<Option<Mbuf>>,
}

/// Latencies are recorded in ns from 1 ns to 10 s, 3 significant digits.
fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 10_000_000_000, 3).expect("valid bounds")
}

impl Rx {
    /// Polls every rx queue once; returns the packets received.
    #[inline]
    fn poll(&mut self) -> usize {
        let mut total = 0;
        for qi in 0..self.queues.len() {
            let n = self.queues[qi].rx_burst(&mut self.slots);
            if n == 0 {
                continue;
            }
            total += n;
            let now = dpdk::rdtsc();
            for slot in &self.slots[..n] {
                let m = slot.as_ref().expect("received");
                let f = dataplane::buf::PacketBuf::data(m);
                let Some(st) = stream::find_stamp(f) else {
                    // A CNP is a congestion signal, unless a replayed capture owns this queue's
                    // unstamped frames (then it is one of the capture's frames).
                    if let (None, Some(qp)) = (self.unstamped[qi], stream::find_cnp(f)) {
                        // Congestion notified back to a sender: not a frame of any stream.
                        self.cnps += 1;
                        if let Some(&(si, ..)) =
                            self.cnp_qps.iter().find(|(_, first, n)| qp.wrapping_sub(*first) & 0xff_ffff < *n)
                        {
                            self.streams[si].cnps += 1;
                        }
                        continue;
                    }
                    match self.unstamped[qi] {
                        Some(si) => {
                            let s = &mut self.streams[si];
                            s.packets += 1;
                            s.bytes += f.len() as u64;
                            if s.first_tsc == 0 {
                                s.first_tsc = now;
                            }
                            s.last_tsc = now;
                        }
                        None => self.other += 1,
                    }
                    continue;
                };
                let Some(s) = self.streams.get_mut(st.stream as usize) else {
                    self.other += 1;
                    continue;
                };
                let Some(l) = s.lanes.get_mut(st.lane as usize) else {
                    self.other += 1;
                    continue;
                };
                // The 32-bit sequence number, extended around the highest seen so far.
                let d = st.seq.wrapping_sub(l.next as u32) as i32 as i64;
                let seq = (l.next as i64 + d).max(0) as u64;
                if seq >= l.next {
                    l.next = seq + 1;
                } else {
                    s.reordered += 1;
                }
                l.received += 1;
                s.packets += 1;
                s.ce += st.ce as u64;
                s.bytes += f.len() as u64;
                if s.first_tsc == 0 {
                    s.first_tsc = now;
                }
                s.last_tsc = now;
                let ns = ((now.saturating_sub(st.tsc) as u128 * self.mult) >> 32) as u64;
                s.hist.saturating_record(ns.max(1));
                self.interval.saturating_record(ns.max(1));
            }
            dpdk::mbuf::free_burst(&mut self.slots[..n]);
        }
        total
    }
}

/// `h` (ns) as CDF points `[µs, fraction at or below]`, ascending, ending at the maximum: at
/// each step of the quantile iteration, the fraction of samples at or below the step's value
/// (not the step's target, which lags it: the first point's would read 0 with samples there).
fn latency_cdf(h: &Histogram<u64>) -> Vec<[f64; 2]> {
    let mut out: Vec<[f64; 2]> = Vec::new();
    if h.is_empty() {
        return out;
    }
    for v in h.iter_quantiles(8) {
        let point = [h.highest_equivalent(v.value_iterated_to()) as f64 / 1e3, v.quantile()];
        match out.last_mut() {
            // One point per value: the highest fraction reached at it.
            Some(last) if last[0] == point[0] => last[1] = point[1],
            _ => out.push(point),
        }
    }
    out
}

/// Loads `conf`, runs it and returns the summary (also printed, and written as asked).
///
/// # Errors
/// [`RunError::Config`] for a bad config or option (nothing was sent), [`RunError::Runtime`]
/// when DPDK refuses (EAL, a port, the pool, an lcore) or an output cannot be written.
pub fn run(conf: &Path, opts: &RunOptions) -> Result<Summary, RunError> {
    let loaded = config::load(conf).map_err(|e| RunError::Config(e.to_string()))?;
    if let Some(d) = opts.duration_s {
        if !(d > 0.0 && d.is_finite()) {
            return Err(RunError::Config(format!("--duration: expected seconds above 0, found {d}")));
        }
    }
    let duration = opts.duration_s.or(loaded.config.pktgen.duration_s);
    let _ = ctrlc::set_handler(|| INTERRUPTED.store(true, Ordering::Relaxed));
    let mut args = vec!["pktgen".to_string()];
    args.extend(loaded.config.eal.args.iter().cloned());
    for p in &loaded.config.ports {
        match (&p.vdev, &p.pci) {
            (Some(v), _) => args.extend(["--vdev".to_string(), v.clone()]),
            (None, Some(pci)) => args.extend(["-a".to_string(), pci.clone()]),
            _ => {}
        }
    }
    args.extend(opts.eal_extra.iter().cloned());
    if dataplane::dpdk::eal::file_prefix(&args).is_none() {
        // A runtime directory of its own (as the appliance's), so that runs side by side never
        // share, nor remove, one.
        args.push(format!("--file-prefix=pktgen-{}", std::process::id()));
    }
    let eal = Eal::init(&args)?;
    let r = run_on(&eal, &loaded, duration, opts);
    drop(eal);
    r
}

/// `e` is `rte_eth_dev_start` failing with EPERM: what net_memif of DPDK 22.11 returns when a
/// client cannot connect to its server's socket (no server yet).
fn is_start_eperm(e: &DpdkError) -> bool {
    e.is_start_eperm()
}

/// The error of memif client port `port` whose start failed with `e` (EPERM) until the wait of
/// `link_wait_ms` (ms; 0: none) was over: names the server's `socket` and what to do.
fn memif_client_error(port: &str, socket: &str, link_wait_ms: u64, e: &DpdkError) -> String {
    let (waited, or) = if link_wait_ms > 0 {
        (format!("after {link_wait_ms} ms ([pktgen] link_wait_ms)"), "give it longer")
    } else {
        ("and [pktgen] link_wait_ms is 0, so pktgen did not wait for it".to_string(), "set it to wait")
    };
    format!(
        "port {port}: the net_memif client cannot connect to its server's socket {socket} {waited} ({e}): start the \
         memif server (the appliance, or the process with role=server) first, or {or}"
    )
}

/// A config error found after loading (once the EAL runs), in the loader's form: the file, the
/// key, what was expected.
fn config_error(loaded: &Loaded, key: String, msg: String) -> RunError {
    RunError::Config(dataplane::config::ConfigError::new(&loaded.file, key, msg).to_string())
}

/// Writes the summary's JSON and CSV files, as `opts` asks.
fn write_outputs(summary: &Summary, opts: &RunOptions) -> Result<(), RunError> {
    if let Some(p) = &opts.json {
        let text = serde_json::to_string_pretty(&summary).expect("serialisable") + "\n";
        write_file(p, &text)?;
    }
    if let Some(p) = &opts.csv {
        if summary.streams.is_empty() {
            write_file(p, &allreduce::csv(&summary.allreduce))?;
        } else {
            write_file(p, &report::csv(summary))?;
            if !summary.allreduce.is_empty() {
                write_file(&allreduce_csv_path(p), &allreduce::csv(&summary.allreduce))?;
            }
        }
    }
    Ok(())
}

/// Where the AllReduce rows go when the CSV file holds streams: `NAME-allreduce.csv` beside it.
pub fn allreduce_csv_path(p: &Path) -> PathBuf {
    let stem = p.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    p.with_file_name(format!("{stem}-allreduce.csv"))
}

fn write_file(p: &Path, text: &str) -> Result<(), RunError> {
    if let Some(d) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(d).map_err(|e| RunError::Runtime(format!("{}: cannot create: {e}", d.display())))?;
    }
    std::fs::write(p, text).map_err(|e| RunError::Runtime(format!("{}: cannot write: {e}", p.display())))
}

fn run_on(eal: &Eal, loaded: &Loaded, duration: Option<f64>, opts: &RunOptions) -> Result<Summary, RunError> {
    let cfg = &loaded.config;
    let run = &cfg.pktgen;
    let workers = eal.worker_lcores();
    for (i, l) in run.tx_lcores.iter().enumerate() {
        if !workers.contains(l) {
            let msg = format!(
                "lcore {l} is not a worker lcore of the EAL (workers: {workers:?}; the main lcore {} receives): \
                 give it in [eal] args, like --lcores 0@0,{l}@1",
                eal.main_lcore()
            );
            return Err(config_error(loaded, format!("pktgen.tx_lcores[{i}]"), msg));
        }
    }
    emulations::check_lcores(&loaded.allreduce, &workers, eal.main_lcore(), &loaded.file)?;
    let fault = emulations::panic_after_rx()?;
    let hz = dpdk::tsc_hz();
    let mp = &cfg.mempool;
    let pool = Mempool::new("pktgen_pool", mp.mbufs, mp.cache, loaded.data_room, -1)?;
    let lanes = run.tx_lcores.len().max(1) as u16;
    let largest = loaded
        .streams
        .iter()
        .flat_map(|s| s.sizes.iter().copied())
        .chain(loaded.allreduce.iter().map(|a| a.max_frame_len()))
        .max()
        .unwrap_or(0);
    let mut ports = Vec::new();
    // `link_wait_ms` bounds the wait for the links and for memif servers to appear. A wait too
    // long for the clock's range waits for ever.
    let wait_until = Instant::now().checked_add(Duration::from_millis(run.link_wait_ms));
    let waited = || run.link_wait_ms == 0 || wait_until.is_some_and(|d| Instant::now() >= d);
    let mut memif_clients = Vec::new();
    for (i, p) in cfg.ports.iter().enumerate() {
        let id = Port::by_name(p.device_name())?;
        // Frames above 1514 bytes need an MTU above 1500; a device that cannot be configured for
        // it (net_memif of DPDK 22.11 says 1518 bytes at most, but its copy mode chains longer
        // frames over its buffers) keeps its default MTU, with a note.
        let mut mtu = (largest > 1514).then(|| (largest - 14) as u16);
        let cap = Port::max_frame_len(id)?;
        if mtu.is_some() && largest + 4 > cap as usize {
            eprintln!(
                "pktgen: port {}: frames of up to {largest} bytes, the device's largest is {cap} bytes with the FCS: \
                 its MTU is left at the default",
                loaded.port_names[i]
            );
            mtu = None;
        }
        let setup = PortSetup {
            rx_queues: p.rx_queues,
            tx_queues: lanes,
            rx_desc: p.rx_desc,
            tx_desc: p.tx_desc,
            mtu,
            mac: None,
        };
        let memif_socket = p.vdev.as_deref().and_then(memif_client_socket);
        // A memif client starts only once its server's socket exists: configured once, its
        // start retried within `link_wait_ms`, then an error that says so.
        let (mut port, mut failed) = Port::start_or_wait(id, &loaded.port_names[i], &setup, &pool)?;
        while let Some(e) = failed.take() {
            if memif_socket.is_none() || !is_start_eperm(&e) {
                return Err(e.into());
            }
            if waited() {
                let sock = memif_socket.as_deref().unwrap_or_default();
                return Err(RunError::Runtime(memif_client_error(&loaded.port_names[i], sock, run.link_wait_ms, &e)));
            }
            // DPDK logs each failed connection: a few a second.
            std::thread::sleep(Duration::from_millis(100));
            failed = port.reconnect().err();
        }
        ports.push((port, p.rx_queues));
        memif_clients.push(memif_socket.is_some());
    }
    if run.link_wait_ms > 0 {
        // A memif client that connected while its server was still starting is turned away and
        // does not try again: it is restarted (connects anew) every half second while down.
        let mut next_restart = Instant::now() + Duration::from_millis(500);
        while let Some(i) = ports.iter().position(|(p, _)| !p.link_up()) {
            if memif_clients[i] && Instant::now() >= next_restart {
                // A failed start (the server gone again) is retried half a second later.
                let _ = ports[i].0.reconnect();
                next_restart = Instant::now() + Duration::from_millis(500);
            }
            if waited() {
                let server = match cfg.ports[i].vdev.as_deref().and_then(memif_client_socket) {
                    Some(sock) => format!(" (no memif server has answered on {sock})"),
                    None => String::new(),
                };
                return Err(RunError::Runtime(format!(
                    "port {}: the link is not up after {} ms ([pktgen] link_wait_ms){server}",
                    loaded.port_names[i], run.link_wait_ms
                )));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    // The lanes' streams.
    let n_streams = loaded.streams.len();
    let counters: Arc<[TxCounters]> = (0..n_streams * lanes as usize).map(|_| TxCounters::default()).collect();
    let burst = run.burst as usize;
    let stamp_back = secs_to_cycles(run.stamp_offset_us as f64 / 1e6, hz);
    let catch_up_s = run.catch_up_ms as f64 / 1e3;
    let mut per_lane: Vec<Vec<LaneStream>> = (0..lanes).map(|_| Vec::new()).collect();
    let mut per_lane_replays: Vec<Vec<replay::ReplayLane>> = (0..lanes).map(|_| Vec::new()).collect();
    let mut readers = Vec::new();
    // Per pcap stream lane: (stream, the lengths it sent).
    let mut sent_lengths: Vec<(usize, Arc<replay::SentLengths>)> = Vec::new();
    let rates: Arc<[RateCell]> = (0..n_streams).map(|_| RateCell::default()).collect();
    spawn_commands(loaded, rates.clone());
    for (si, s) in loaded.streams.iter().enumerate() {
        let share = s.lcores.len() as f64;
        for (j, &lc) in s.lcores.iter().enumerate() {
            let lane = run.tx_lcores.iter().position(|&x| x == lc).expect("checked with the config");
            // This lane's part of --packets.
            let limit = opts.packets.map_or(u64::MAX, |n| {
                let l = s.lcores.len() as u64;
                n / l + u64::from((j as u64) < n % l)
            });
            let txq = TxQueue::new(ports[s.port as usize].0.id(), lane as u16);
            if let Some(r) = &s.replay {
                let timing = match (r.speed, s.rate) {
                    (Some(speed), _) => replay::Timing::Capture { cycles_per_ns: hz as f64 / 1e9 / speed },
                    (None, Rate::Full) => replay::Timing::Full,
                    (None, Rate::Pps(p)) => {
                        replay::Timing::Paced(Pacer::new(p, hz, burst as f64, catch_up_s).first_at_once(1.0), None)
                    }
                    (None, Rate::Bps(b, layer)) => {
                        let one = (layer.bytes(r.max_frame as u64) * 8) as f64;
                        let p = Pacer::new(b, hz, one * burst as f64, catch_up_s).first_at_once(one);
                        replay::Timing::Paced(p, Some(layer.bytes(0)))
                    }
                };
                let (tx, rx) = std::sync::mpsc::sync_channel(replay::BATCHES);
                let (back_tx, back_rx) = std::sync::mpsc::sync_channel(replay::BATCHES);
                let (file, loops, max_frame) = (r.file.clone(), r.loops, r.max_frame);
                let h = std::thread::Builder::new()
                    .name(format!("pcap-{si}"))
                    .spawn(move || replay::read_loops(&file, loops, max_frame, tx, back_rx))
                    .map_err(|e| RunError::Runtime(format!("cannot start the reader of {}: {e}", r.file.display())))?;
                readers.push((s.name.clone(), h));
                let slot = si * lanes as usize + lane;
                let sent = Arc::new(replay::SentLengths::default());
                sent_lengths.push((si, sent.clone()));
                per_lane_replays[lane].push(replay::ReplayLane::new(
                    counters.clone(),
                    slot,
                    txq,
                    timing,
                    rx,
                    back_tx,
                    limit,
                    burst,
                    sent,
                ));
                continue;
            }
            let templates = s
                .sizes
                .iter()
                .map(|&n| SizeTemplates::new(&s.spec, n, lane as u8))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| config_error(loaded, format!("stream[{si}]"), format!("expected {e}")))?;
            let (cost, pacer): (Vec<f64>, Option<Pacer>) = match s.rate {
                Rate::Full => (vec![1.0; s.sizes.len()], None),
                Rate::Pps(r) => (
                    vec![1.0; s.sizes.len()],
                    Some(Pacer::new(r / share, hz, burst as f64, catch_up_s).first_at_once(1.0)),
                ),
                Rate::Bps(r, layer) => {
                    let cost: Vec<f64> = s.sizes.iter().map(|&n| (layer.bytes(n as u64) * 8) as f64).collect();
                    let big = cost.iter().cloned().fold(0.0, f64::max);
                    (cost, Some(Pacer::new(r / share, hz, big * burst as f64, catch_up_s).first_at_once(big)))
                }
            };
            let sweep_step = match s.mix {
                SizeMix::Sweep { step_s } => secs_to_cycles(step_s, hz),
                _ => u64::MAX / 2,
            };
            per_lane[lane].push(LaneStream {
                counters: counters.clone(),
                slot: si * lanes as usize + lane,
                txq,
                templates,
                cost,
                mix: s.mix.clone(),
                pos: 0,
                sweep_step,
                sweep_next: 0,
                flow: 0,
                seq: 0,
                pacer,
                pend: (0..burst).map(|_| None).collect(),
                lens: vec![0; burst],
                pend_at: 0,
                pend_n: 0,
                limit,
                rates: rates.clone(),
                stream: si,
                rate_gen: 0,
                share: 1.0 / share,
                hz,
            });
        }
    }
    // The receive side.
    let mut rx_ports: Vec<u16> = loaded.streams.iter().filter_map(|s| s.rx_port).collect();
    rx_ports.sort_unstable();
    rx_ports.dedup();
    let queues: Vec<RxQueue> = rx_ports
        .iter()
        .flat_map(|&p| {
            let (port, nq) = &ports[p as usize];
            (0..*nq).map(move |q| RxQueue::new(port.id(), q))
        })
        .collect();
    let unstamped = rx_ports
        .iter()
        .flat_map(|&p| {
            let pcap = loaded.streams.iter().position(|s| s.replay.is_some() && s.rx_port == Some(p));
            (0..ports[p as usize].1).map(move |_| pcap)
        })
        .collect();
    let mut rx = Rx {
        streams: (0..n_streams)
            .map(|_| RxStream {
                packets: 0,
                bytes: 0,
                reordered: 0,
                ce: 0,
                cnps: 0,
                lanes: vec![SeqTrack::default(); lanes as usize],
                hist: histogram(),
                first_tsc: 0,
                last_tsc: 0,
            })
            .collect(),
        queues,
        unstamped,
        interval: histogram(),
        other: 0,
        cnps: 0,
        cnp_qps: loaded
            .streams
            .iter()
            .enumerate()
            .filter(|(_, s)| s.spec.kind == stream::Kind::Rocev2)
            .map(|(i, s)| (i, s.spec.roce.src_qp, s.spec.flows.max(1)))
            .collect(),
        mult: ((1_000_000_000u128) << 32) / hz as u128,
        slots: (0..burst).map(|_| None).collect(),
    };
    // The AllReduce emulations, each on its own port: on the main lcore, or alone on a worker
    // lcore (`lcore`; dpdk::rcu readers after the tx lanes').
    let port_ids: Vec<(u16, u16)> = ports.iter().map(|(p, nq)| (p.id(), *nq)).collect();
    let mut ars = emulations::Emulations::start(
        &loaded.allreduce,
        &port_ids,
        pool,
        burst,
        hz,
        run.tx_lcores.len() as u32 + 1,
        opts.quiet,
        fault,
    )?;
    // Go. The run's clock starts before the emulations and the tx lanes do (a lane sends as soon
    // as it is launched, and the main lcore may wait for its CPU after launching it): its span
    // covers every stream's and emulation's own.
    let t0 = ars.started_tsc();
    let stop = Arc::new(AtomicBool::new(false));
    let finished = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for (lane, (streams, replays)) in per_lane.into_iter().zip(per_lane_replays).enumerate() {
        if streams.is_empty() && replays.is_empty() {
            continue;
        }
        let (stop2, fin2) = (stop.clone(), finished.clone());
        let lc = run.tx_lcores[lane];
        // Reader 0 is the main lcore; lanes are 1, 2, ...
        let reader = lane as u32 + 1;
        let job = move || lane_loop(streams, replays, pool, burst, stamp_back, stop2, fin2, reader);
        match lcore::launch(lc, job, None) {
            Ok(h) => handles.push(h),
            Err(e) => {
                stop.store(true, Ordering::Relaxed);
                for h in handles {
                    let _ = h.join();
                }
                let _ = ars.join();
                return Err(e.into());
            }
        }
    }
    // A duration beyond the TSC's range saturates: it never ends the run, rather than wrapping
    // to an end already passed.
    let end = duration.map(|d| t0.saturating_add(secs_to_cycles(d, hz)));
    let mut next_line = t0 + hz;
    let mut live = report::LiveLine::new(loaded, hz);
    let has_rx = !rx.queues.is_empty();
    // With bounded rounds everywhere, the run ends when every emulation has finished them.
    let ar_bounded = !ars.is_empty() && loaded.allreduce.iter().all(|a| a.rounds.is_some());
    let online = dpdk::rcu::workers().enter(0).expect("reader 0 exists");
    loop {
        online.quiescent();
        if has_rx {
            rx.poll();
        } else if !ars.on_main() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let now = dpdk::rdtsc();
        ars.poll(now, &pool);
        if now >= next_line {
            let line = live.line(
                now - t0,
                &tx_totals(&counters, n_streams, lanes),
                &rx_totals(&rx),
                Latency::of(&rx.interval),
            );
            if !opts.quiet && n_streams > 0 {
                println!("{line}");
            }
            ars.tick((now - t0) as f64 / hz as f64);
            rx.interval.reset();
            next_line += hz;
        }
        // The run ends by itself once every bounded part is done: the tx lanes (finite
        // replays, `--packets`) and the emulations (bounded rounds); a part without an end
        // keeps it running until --duration or ^C.
        let lanes_done = finished.load(Ordering::Acquire) == handles.len();
        let ars_done = ars.finished();
        let bounded = !handles.is_empty() || ar_bounded;
        let all_done = bounded && lanes_done && (ars.is_empty() || (ar_bounded && ars_done));
        if INTERRUPTED.load(Ordering::Relaxed) || end.is_some_and(|e| now >= e) || all_done || ars.failed() {
            break;
        }
    }
    // The emulations on worker lcores drain from now on, as long as the main lcore's.
    ars.stop(dpdk::rdtsc().saturating_add(secs_to_cycles(run.drain_ms as f64 / 1e3, hz)));
    stop.store(true, Ordering::Relaxed);
    let mut panics = Vec::new();
    for h in handles {
        let lc = h.lcore();
        if let Err(p) = h.join() {
            panics.push(format!("tx lcore {lc} panicked: {p}"));
        }
    }
    let t_stop = dpdk::rdtsc();
    // Drain: packets still in flight, until every received stream has all it was sent.
    let drain_end = t_stop.saturating_add(secs_to_cycles(run.drain_ms as f64 / 1e3, hz));
    if has_rx || ars.on_main() {
        loop {
            online.quiescent();
            if has_rx {
                rx.poll();
            }
            let now = dpdk::rdtsc();
            ars.poll(now, &pool);
            let done = loaded.streams.iter().enumerate().filter(|(_, s)| s.rx_port.is_some()).all(|(i, _)| {
                let tx: u64 =
                    (0..lanes as usize).map(|l| counters[i * lanes as usize + l].packets.load(Ordering::Relaxed)).sum();
                rx.streams[i].packets >= tx
            }) && ars.drained();
            if done || dpdk::rdtsc() >= drain_end {
                break;
            }
        }
    }
    drop(online);
    // The worker lcores' emulations end once drained (or at the drain's deadline).
    let ars = match ars.join() {
        Ok(r) => r,
        Err(p) => {
            panics.extend(p);
            Vec::new()
        }
    };
    let mut reader_errors: Vec<(String, String)> = Vec::new();
    for (name, h) in readers {
        match h.join() {
            Ok(Ok(())) => {}
            // What was sent before is summarised, then the run fails with this.
            Ok(Err(e)) => reader_errors.push((name, e)),
            Err(_) => panics.push(format!("pcap stream {name:?}: the reader panicked")),
        }
    }
    if !panics.is_empty() {
        return Err(RunError::Runtime(panics.join("; ")));
    }
    let seconds = (t_stop - t0) as f64 / hz as f64;
    let mut streams = Vec::new();
    for (i, s) in loaded.streams.iter().enumerate() {
        let c = |l: usize| &counters[i * lanes as usize + l];
        let sum = |f: &dyn Fn(&TxCounters) -> u64| (0..lanes as usize).map(|l| f(c(l))).sum::<u64>();
        let tx_packets = sum(&|c| c.packets.load(Ordering::Relaxed));
        let tx_bytes = sum(&|c| c.bytes.load(Ordering::Relaxed));
        let starts = (0..lanes as usize).map(|l| c(l).start_tsc.load(Ordering::Relaxed)).filter(|&t| t != 0);
        let ends = (0..lanes as usize).map(|l| c(l).end_tsc.load(Ordering::Relaxed)).filter(|&t| t != 0);
        let start_tsc = starts.min();
        let tx_seconds = match (start_tsc, ends.max()) {
            (Some(a), Some(b)) if b > a => (b - a) as f64 / hz as f64,
            _ => 0.0,
        };
        let changes = rates[i].history();
        let r = &rx.streams[i];
        let rx_seconds = if r.packets > 1 { (r.last_tsc - r.first_tsc) as f64 / hz as f64 } else { 0.0 };
        streams.push(StreamSummary::new(
            s,
            &loaded.port_names,
            report::TxSide {
                packets: tx_packets,
                bytes: tx_bytes,
                seconds: tx_seconds,
                tx_full: sum(&|c| c.tx_full.load(Ordering::Relaxed)),
                nombuf: sum(&|c| c.nombuf.load(Ordering::Relaxed)),
            },
            s.rx_port.map(|_| report::RxSide {
                packets: r.packets,
                bytes: r.bytes,
                seconds: rx_seconds,
                seq_lost: r.seq_lost(),
                reordered: r.reordered,
                ce_marked: r.ce,
                cnps: r.cnps,
                latency: Latency::of(&r.hist),
            }),
        ));
        if let (Some(_), Some(last)) = (s.rx_port, streams.last_mut()) {
            last.latency_cdf = latency_cdf(&r.hist);
        }
        if let (false, Some(last)) = (changes.is_empty(), streams.last_mut()) {
            // Seconds after the stream's first send (a change before it counts from it).
            let a = start_tsc.unwrap_or(t0);
            let at: Vec<(f64, f64)> =
                changes.iter().map(|&(t, r)| (t.saturating_sub(a) as f64 / hz as f64, r)).collect();
            last.with_rate_changes(&at);
        }
        if let (Some(rp), Some(last)) = (&s.replay, streams.last_mut()) {
            // The lengths the tx queues took (a run cut short sends part of the file).
            last.sizes = replay::SentLengths::union(sent_lengths.iter().filter(|x| x.0 == i).map(|x| &*x.1));
            let distinct = last.sizes.len();
            last.replay = Some(report::ReplaySide {
                file: rp.file.display().to_string(),
                loops: rp.loops,
                speed: rp.speed,
                frames_in_file: Some(rp.info.frames),
                distinct_sizes: distinct as u64,
                skipped: sum(&|c| c.skipped.load(Ordering::Relaxed)),
                unreadable: sum(&|c| c.unreadable.load(Ordering::Relaxed)),
                error: reader_errors.iter().find(|e| e.0 == s.name).map(|e| e.1.clone()),
            });
            if distinct > replay::MAX_LISTED_SIZES {
                last.sizes.clear();
            }
        }
    }
    let port_stats = ports
        .iter()
        .enumerate()
        .map(|(i, (p, _))| report::PortSummary { name: loaded.port_names[i].clone(), stats: p.stats() })
        .collect();
    let allreduce = ars.iter().map(allreduce::AllreduceSummary::new).collect();
    let summary = Summary {
        seconds,
        tsc_hz: hz,
        tx_lcores: run.tx_lcores.clone(),
        burst: run.burst,
        stamp_offset_us: run.stamp_offset_us,
        streams,
        ports: port_stats,
        rx_other: rx.other,
        rx_cnps: rx.cnps,
        allreduce,
    };
    println!("{}", report::table(&summary));
    // The results are on disk before the ports are stopped and closed: what goes wrong in a
    // PMD's teardown (a memif peer leaving at that moment) cannot take them along.
    let written = write_outputs(&summary, opts);
    drop(ports);
    written?;
    if !reader_errors.is_empty() {
        let v: Vec<String> = reader_errors.iter().map(|(n, e)| format!("pcap stream {n:?}: {e}")).collect();
        return Err(RunError::Runtime(v.join("; ")));
    }
    Ok(summary)
}

/// Reads commands from stdin on a thread of its own while the run goes: `rate NAME VALUE` sets
/// stream NAME's rate to VALUE in the unit its config gives (`rate_pps`: packets/s, `rate_bps`:
/// bits/s at its layer; suffixes k, M, G), for the template streams with a set rate. Each
/// command is answered on stderr. The thread ends with stdin. A terminal is read only by a
/// pktgen in the foreground: one started in the background (`&`) would be stopped by SIGTTIN.
#[allow(unsafe_code)] // two libc queries of process groups
fn spawn_commands(loaded: &Loaded, rates: Arc<[RateCell]>) {
    use std::io::IsTerminal;
    // SAFETY: plain queries of the process group and the terminal's foreground group.
    if std::io::stdin().is_terminal() && unsafe { libc::tcgetpgrp(0) != libc::getpgrp() } {
        return;
    }
    let streams: Vec<(String, Rate, bool)> =
        loaded.streams.iter().map(|s| (s.name.clone(), s.rate, s.replay.is_some())).collect();
    let _ = std::thread::Builder::new().name("pktgen-commands".into()).spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { return };
            let words: Vec<&str> = line.split_whitespace().collect();
            match words[..] {
                [] => {}
                ["rate", name, value] => match rate_command(&streams, name, value) {
                    Ok((i, v, unit)) => {
                        rates[i].set(v, dpdk::rdtsc());
                        eprintln!("pktgen: stream {name}: rate {v} {unit}");
                    }
                    Err(e) => eprintln!("pktgen: {e}"),
                },
                _ => eprintln!("pktgen: unknown command {line:?}; expected: rate STREAM VALUE"),
            }
        }
    });
}

/// What `rate NAME VALUE` asks: the stream's index, the rate and its unit.
fn rate_command(
    streams: &[(String, Rate, bool)],
    name: &str,
    value: &str,
) -> Result<(usize, f64, &'static str), String> {
    let i = streams.iter().position(|s| s.0 == name).ok_or_else(|| {
        let names: Vec<&str> = streams.iter().map(|s| s.0.as_str()).collect();
        format!("no stream {name:?}; streams: {}", names.join(", "))
    })?;
    let unit = match streams[i] {
        (_, _, true) => return Err(format!("stream {name}: a pcap replay's rate cannot change while it runs")),
        (_, Rate::Full, _) => return Err(format!("stream {name} runs at full rate: give it rate_pps or rate_bps")),
        (_, Rate::Pps(_), _) => "packets/s",
        (_, Rate::Bps(..), _) => "bits/s",
    };
    let (num, mult) = match value.char_indices().last() {
        Some((k, 'k' | 'K')) => (&value[..k], 1e3),
        Some((k, 'M')) => (&value[..k], 1e6),
        Some((k, 'G')) => (&value[..k], 1e9),
        _ => (value, 1.0),
    };
    match num.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok((i, v * mult, unit)),
        _ => Err(format!("rate {value:?}: expected a number above 0 (suffix k, M or G allowed)")),
    }
}

fn tx_totals(c: &[TxCounters], n_streams: usize, lanes: u16) -> report::Totals {
    let mut t = report::Totals::default();
    for x in &c[..n_streams * lanes as usize] {
        t.packets += x.packets.load(Ordering::Relaxed);
        t.bytes += x.bytes.load(Ordering::Relaxed);
        t.tx_full += x.tx_full.load(Ordering::Relaxed);
        t.nombuf += x.nombuf.load(Ordering::Relaxed);
    }
    t
}

fn rx_totals(rx: &Rx) -> report::Totals {
    let mut t = report::Totals::default();
    for s in &rx.streams {
        t.packets += s.packets;
        t.bytes += s.bytes;
        t.seq_lost += s.seq_lost();
        t.reordered += s.reordered;
    }
    t
}

#[cfg(test)]
mod cdf_tests {
    use super::*;

    /// A memif client's socket comes from its vdev args (DPDK's default when none), a server or
    /// another device has none; the start error names the socket, the wait and the remedy.
    #[test]
    fn a_memif_client_that_cannot_start_is_told_to_start_the_server() {
        let s = |v: &str| memif_client_socket(v);
        assert_eq!(s("net_memif0,role=client,socket=/tmp/m0.sock,socket-abstract=no").as_deref(), Some("/tmp/m0.sock"));
        assert_eq!(s("net_memif1,socket=/run/a.sock").as_deref(), Some("/run/a.sock"));
        assert_eq!(s("net_memif0").as_deref(), Some("/run/memif.sock"));
        assert_eq!(s("net_memif0,role=server,socket=/tmp/m0.sock"), None);
        assert_eq!(s("net_ring0"), None);
        let e = DpdkError::from_ret("rte_eth_dev_start(port 0 m0)", -libc::EPERM);
        assert!(is_start_eperm(&e));
        assert!(!is_start_eperm(&DpdkError::from_ret("rte_eth_dev_start(port 0 m0)", -libc::EINVAL)));
        assert!(!is_start_eperm(&DpdkError::from_ret("rte_eth_dev_configure(port 0 m0)", -libc::EPERM)));
        let m = memif_client_error("m0", "/tmp/m0.sock", 0, &e);
        assert!(
            m.starts_with(
                "port m0: the net_memif client cannot connect to its server's socket /tmp/m0.sock and [pktgen] \
                 link_wait_ms is 0, so pktgen did not wait for it (rte_eth_dev_start(port 0 m0): "
            ),
            "{m}"
        );
        assert!(
            m.ends_with(
                "start the memif server (the appliance, or the process with role=server) first, or set it to wait"
            ),
            "{m}"
        );
        let m = memif_client_error("m0", "/tmp/m0.sock", 250, &e);
        assert!(m.contains("socket /tmp/m0.sock after 250 ms ([pktgen] link_wait_ms)"), "{m}");
        assert!(m.ends_with("first, or give it longer"), "{m}");
    }

    /// Every point's fraction is the share of samples at or below its value: 46 samples 10 ms
    /// apart give k/46 at the k-th, and the first is 1/46, not 0.
    #[test]
    fn cdf_points_are_fractions_at_or_below() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 10_000_000_000, 3).unwrap();
        let samples: Vec<u64> = (0..46).map(|k| 780_000_000 + k * 10_000_000).collect();
        for &s in &samples {
            h.record(s).unwrap();
        }
        let cdf = latency_cdf(&h);
        assert_eq!(cdf.last().unwrap()[1], 1.0);
        for p in &cdf {
            let at_or_below = samples.iter().filter(|&&s| (h.lowest_equivalent(s) as f64) / 1e3 <= p[0]).count();
            assert!((p[1] - at_or_below as f64 / 46.0).abs() < 1e-9, "{p:?}: {at_or_below} of 46");
        }
        assert!(cdf[0][1] > 0.0, "{:?}", cdf[0]);
    }
}

#[cfg(test)]
mod cycles_tests {
    use super::*;

    /// Seconds from the config (durations, steps, drains) become TSC cycles without wrapping:
    /// too many for u64 is never, NaN and negatives are 0, and a bound built on them saturates.
    #[test]
    fn secs_to_cycles_saturates() {
        assert_eq!(secs_to_cycles(2.5, 2_000_000_000), 5_000_000_000);
        assert_eq!(secs_to_cycles(1e300, 2_000_000_000), u64::MAX);
        assert_eq!(secs_to_cycles(f64::NAN, 2_000_000_000), 0);
        assert_eq!(secs_to_cycles(-1.0, 2_000_000_000), 0);
        assert_eq!(1_000u64.saturating_add(secs_to_cycles(1e20, 3_000_000_000)), u64::MAX);
    }
}
