//! The appliance: from a loaded config to running workers and back to final stats.
//!
//! Start-up is all or nothing (EAL, mempool, every port, every worker); shutdown (SIGINT,
//! SIGTERM, end of replay input, `--duration`, or a worker's panic) stops rx, lets every worker
//! flush its tx buffers, then stops and closes the ports (net_pcap closes its output files there)
//! and prints the final stats.
//!
//! Files: every output is checked against every input before anything is written, written under
//! a temporary name, verified against what the ports sent and renamed into place only at the end
//! of a run that succeeded (see [`crate::outputs`]); the run's temporary directory and files are
//! owned by guards, so every way out of [`run`] removes them.
//!
//! End of input in replays: net_pcap gives no end-of-file signal (rx just returns 0), so the
//! appliance counts the records of every finite `rx_pcap` file before starting, and stops once
//! the ports have consumed that many (`ipackets + rx_nombuf + ierrors`: a record read without an
//! mbuf is lost, but consumed; `ierrors` counts libpcap's read errors, which the count includes,
//! and records no mbuf chain could hold). An idle timer (`dataplane.replay_idle_ms` without new
//! input) is only the fallback, for inputs that end short.
//!
//! A run inside EAL goes through `start` (pool, ports, rings, workers), `monitor` (the wait), then
//! `summary` (the workers' counters summed, the ports' stats read and the ports closed).

mod monitor;
mod start;
mod summary;

use crate::config::{self, ConfigError, Loaded};
use crate::dpdk::{self, DpdkError, Eal, PortStats};
use crate::outputs::{self, Identity, Named, Staged};
use crate::pcapfile;
use crate::stats::Counters;
use crate::stop;
use crate::table::Counter;
use crate::worker;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How the appliance is run (the command line).
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The config file.
    pub config: PathBuf,
    /// `--rx PORT=FILE`: replay FILE into port PORT (the port becomes a net_pcap vdev).
    pub rx: Vec<(usize, PathBuf)>,
    /// `--tx PORT=FILE`: write what port PORT sends to FILE.
    pub tx: Vec<(usize, PathBuf)>,
    /// Stop after this long (benchmarks, live ports).
    pub duration: Option<Duration>,
    /// Write the final stats as JSON here (an output like the others: checked against the
    /// inputs, staged, synced and renamed into place by [`run`]).
    pub stats_json: Option<PathBuf>,
    /// Extra EAL arguments, after the config's.
    pub eal_extra: Vec<String>,
    /// Print nothing but errors.
    pub quiet: bool,
}

/// Why the appliance could not run.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The configuration is not usable (exit status 2).
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// DPDK refused something (exit status 1).
    #[error("{0}")]
    Dpdk(#[from] DpdkError),
    /// A command line that cannot be run (exit status 2): `--rx`/`--tx` naming a port the
    /// config does not have, two outputs for one port, an output that is also an input.
    #[error("{0}")]
    Usage(String),
    /// Anything else (exit status 1): a missing input file, a worker's panic.
    #[error("{0}")]
    Other(String),
}

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
    /// NAKs suppressed by the per-source rate limit.
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
fn drops_and_losses(counters: &Counters, ethdev: &[PortStats]) -> (std::collections::BTreeMap<String, u64>, u64) {
    let mut drops: std::collections::BTreeMap<String, u64> =
        crate::stats::Reason::ALL.iter().map(|r| (r.name().to_string(), counters.dropped(*r))).collect();
    drops.insert("rx_nombuf".into(), ethdev.iter().map(|s| s.rx_nombuf).sum());
    drops.insert("imissed".into(), ethdev.iter().map(|s| s.imissed).sum());
    let losses = LOSS_REASONS.iter().map(|r| drops.get(*r).copied().unwrap_or(0)).sum();
    (drops, losses)
}

/// The mbufs the egress schedulers can hold at once: the rings to the owners of shaped ports'
/// schedulers, counted full, and each class's queue (`[port.qos]`; one scheduler per port).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SchedMbufs {
    /// Mbufs the rings to the schedulers' owners hold when full (each ring's slots - 1).
    pub ring_mbufs: u64,
    /// Per class of every shaped port, in port and class order: its packet capacity
    /// ([`crate::config::memory::class_mbufs`]).
    pub demand: Vec<u64>,
    /// Per class: the least it may be cut to ([`crate::config::memory::class_mbufs_floor`]).
    pub floor: Vec<u64>,
}

/// The mempool must hold, at once, what every worker holds (an rx burst, its tx buffers, the
/// mbufs parked in its lcore's cache of the pool), what the PMDs hold in their descriptors,
/// with several workers the hand-off rings and, with egress schedulers (`sched`;
/// [`SchedMbufs::default`] without), what their rings and queues can hold: a pool that runs dry
/// makes the ports lose packets (`rx_nombuf`), and full queues must never starve the ports.
///
/// `tx_segs`: mbufs a frame on the tx side may hold out of the pool, 1 but with `[dataplane]
/// zero_copy_results` (4: a result frame's chain of up to 3, and the frame whose payload it
/// shares, which stays out of the pool until the last frame sharing it is freed): the workers'
/// tx buffers hold that many per frame (the PMDs' tx descriptors and the schedulers' queues are
/// scaled by the caller).
///
/// `pmd_held`: mbufs the ports' descriptors may hold (rx rings a NIC keeps filled, tx rings it
/// frees lazily). A hand-off ring gets an equal share of what the rest leaves, at most
/// [`MAX_RING_SLOTS`], and at least twice [`worker::ring_room_needed`] (the room a producer
/// waits for before an rx burst).
///
/// Returns each hand-off ring's slot count (a power of two; it holds one mbuf less; 0 without
/// rings) and each class's packet capacity (`sched.demand`, or less when the pool cannot hold
/// every queue full: cut by [`crate::config::memory::fit_class_mbufs`] into what the workers,
/// the PMDs, the schedulers' rings and the smallest hand-off rings leave; the hand-off rings
/// then share the rest).
///
/// # Errors
/// The pool is smaller than all of that with every class at its floor: the message gives the
/// size to set and what takes the mbufs.
#[allow(clippy::too_many_arguments)]
pub fn plan_pool(
    mbufs: u32,
    cache: u32,
    burst: usize,
    ports: usize,
    workers: usize,
    rings: bool,
    pmd_held: u64,
    sched: &SchedMbufs,
    tx_segs: u64,
) -> Result<(u32, Vec<u64>), String> {
    let workers = workers.max(1);
    let held = worker::mbufs_held(burst, ports, tx_segs);
    let cached = (cache as u64 * 3).div_ceil(2); // a cache holds up to 1.5 x its size (flush threshold)
    let reserved = workers as u64 * (held + cached) + pmd_held + sched.ring_mbufs;
    let min_slots = if rings { (2 * worker::ring_room_needed(workers, burst) + 1).next_power_of_two() } else { 0 };
    let min_rings = workers as u64 * min_slots.saturating_sub(1) as u64;
    let fitted = crate::config::memory::fit_class_mbufs(
        &sched.demand,
        &sched.floor,
        (mbufs as u64).saturating_sub(reserved + min_rings),
    );
    let floors: u64 = sched.demand.iter().zip(&sched.floor).map(|(d, f)| (*d).min(*f)).sum();
    let needed = reserved + min_rings + floors;
    let Ok(classes) = fitted.map_err(|_| ()).and_then(|c| if (mbufs as u64) < needed { Err(()) } else { Ok(c) }) else {
        let mut why = format!(
            "{workers} worker(s) hold up to {} mbufs each (an rx burst of {}, {ports} port(s) x {} tx buffers{}, and \
             1.5 x the cache of {cache} on their lcore)",
            held + cached,
            burst.min(worker::MAX_BURST),
            worker::TX_BUFFER,
            if tx_segs > 1 { format!(" x {tx_segs} mbufs per zero-copy result frame") } else { String::new() }
        );
        if pmd_held > 0 {
            why += &format!(", the ports' rx and tx descriptors {pmd_held}");
        }
        if rings {
            why += &format!(", each worker's hand-off ring {}", min_slots - 1);
        }
        if sched.ring_mbufs > 0 {
            why += &format!(", the rings to the shaped ports' scheduler owners {}", sched.ring_mbufs);
        }
        if floors > 0 {
            why += &format!(", the egress queues at least {floors} (each class's capacity_bytes in maximum frames)");
        }
        return Err(format!(
            "expected at least {needed} mbufs, found {mbufs}: {why}; a smaller pool runs dry and the ports lose \
             packets (rx_nombuf)"
        ));
    };
    if !rings {
        return Ok((0, classes));
    }
    let queued: u64 = classes.iter().sum();
    let share = (mbufs as u64 - reserved - queued) / workers as u64; // mbufs per ring
    let mut slots = MAX_RING_SLOTS;
    while slots > min_slots && (slots - 1) as u64 > share {
        slots /= 2;
    }
    Ok((slots, classes))
}

/// The largest hand-off ring (slots): enough to absorb a worker's bursts while the other catches
/// up; more only holds mbufs longer.
pub const MAX_RING_SLOTS: u32 = crate::config::memory::HAND_OFF_RING_SLOTS;

/// Mbufs a port's PMD may keep in its descriptors: none for net_pcap, net_null and
/// net_af_packet (they allocate mbufs as they receive and free them as they send), else the
/// rx rings a NIC keeps filled and the tx rings it frees lazily. A tx descriptor holds one
/// mbuf; with zero-copy results (`chain`: 3, the longest result chain; else 1) every chain in
/// the ring may also keep the frame whose payload it shares out of the pool, one more mbuf per
/// `chain` descriptors at most.
fn pmd_held(device: &str, rx_queues: u16, rx_desc: u16, tx_queues: u16, tx_desc: u16, chain: u64) -> u64 {
    if ["net_pcap", "net_null", "net_af_packet"].iter().any(|d| device.starts_with(d)) {
        0
    } else {
        let tx = tx_desc as u64 + if chain > 1 { (tx_desc as u64).div_ceil(chain) } else { 0 };
        rx_queues as u64 * rx_desc as u64 + tx_queues as u64 * tx
    }
}

/// A port as it will be probed: its EAL device argument and replay files.
struct PortPlan {
    name: String,
    device: String,
    /// `--vdev` with its argument list (device name first), or `-a` with a PCI address.
    eal_args: [String; 2],
    rx_files: Vec<PathBuf>,
    /// A replay input made of several files (or none): `rx_files[0]` is merged from these.
    rx_merge: Option<Vec<PathBuf>>,
    infinite: bool,
    live_rx: bool,
    /// net_pcap's `tx_pcap` files, one per tx queue in queue order, as named.
    tx_files: Vec<PathBuf>,
}

impl PortPlan {
    /// A net_memif vdev in the client role (the default role): it connects only when started.
    fn is_memif_client(&self) -> bool {
        let mut args = self.eal_args[1].split(',');
        let dev = args.next().unwrap_or("");
        self.eal_args[0] == "--vdev" && dev.starts_with("net_memif") && !args.any(|a| a.trim() == "role=server")
    }
}

/// The run's own directory for merged inputs (`$TMPDIR/dpu-PID`), created on first use and
/// removed, with what it holds, when dropped: on every way out of [`run`].
struct TempDir {
    path: PathBuf,
    created: std::cell::Cell<bool>,
}

impl TempDir {
    fn new() -> TempDir {
        let path = std::env::temp_dir().join(format!("dpu-{}", std::process::id()));
        TempDir { path, created: std::cell::Cell::new(false) }
    }

    /// The directory, created (mode 0700) if it is not yet.
    fn create(&self) -> Result<&Path, AppError> {
        if !self.created.get() {
            use std::os::unix::fs::DirBuilderExt;
            // A directory of this name is a dead process's (process ids are unique among live ones).
            let _ = std::fs::remove_dir_all(&self.path);
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&self.path)
                .map_err(|e| AppError::Other(format!("{}: {e}", self.path.display())))?;
            self.created.set(true);
        }
        Ok(&self.path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if self.created.get() {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Input files by port: (port, file as named).
type Inputs = Vec<(usize, PathBuf)>;

/// An output file's queues: its identity, its path as first named, and the (port, tx queue)
/// pairs writing it.
type Destination = (Identity, PathBuf, Vec<(usize, u16)>);

/// Plans the ports; returns them and every input file the config or command line names, by
/// port (all of them, replaced by `--rx` or not: none may be overwritten). Writes nothing.
fn plan_ports(
    loaded: &Loaded,
    opts: &Options,
    workers: usize,
    tmp: &Path,
) -> Result<(Vec<PortPlan>, Inputs), AppError> {
    check_replay_args(loaded, opts)?;
    let mut plans = Vec::new();
    // Every input file, by port, as the user named it (before any merge).
    let mut sources: Vec<(usize, PathBuf)> = Vec::new();
    for (i, pc) in loaded.config.ports.iter().enumerate() {
        let name = pc.name.clone().unwrap_or_else(|| format!("port{i}"));
        let mut rx: Vec<&PathBuf> = opts.rx.iter().filter(|(p, _)| *p == i).map(|(_, f)| f).collect();
        let mut tx: Vec<&PathBuf> = opts.tx.iter().filter(|(p, _)| *p == i).map(|(_, f)| f).collect();
        let replay = !opts.rx.is_empty() || !opts.tx.is_empty();
        // The config's own pcap files of this port, which `--rx`/`--tx` replace only where they
        // name the port.
        let cfg_files = |key: &str| -> Vec<PathBuf> {
            if !pc.device_name().starts_with("net_pcap") {
                return Vec::new();
            }
            pc.vdev_args().into_iter().filter(|(k, _)| k == key).map(|(_, v)| PathBuf::from(v)).collect()
        };
        let (cfg_rx, cfg_tx) = (cfg_files("rx_pcap"), cfg_files("tx_pcap"));
        for f in &cfg_rx {
            sources.push((i, f.clone()));
        }
        if replay && rx.is_empty() {
            rx = cfg_rx.iter().collect();
        }
        if replay && tx.is_empty() {
            tx = cfg_tx.iter().take(1).collect();
        }
        for f in &opts.rx {
            if f.0 == i {
                sources.push((i, f.1.clone()));
            }
        }
        let (device, vdev, rx_merge) = if replay {
            let (device, vdev, merge) = replay_vdev(i, &rx, &tx, workers, tmp)?;
            (device, Some(vdev), merge)
        } else {
            (pc.device_name().to_string(), pc.vdev.clone(), None)
        };
        let mut plan = PortPlan {
            name,
            device: device.clone(),
            eal_args: match &vdev {
                Some(v) => ["--vdev".into(), v.clone()],
                None => ["-a".into(), pc.pci.clone().unwrap_or_default()],
            },
            rx_files: Vec::new(),
            rx_merge,
            infinite: false,
            live_rx: vdev.is_none(),
            tx_files: Vec::new(),
        };
        if let Some(v) = &vdev {
            read_vdev_args(&mut plan, v);
        }
        plans.push(plan);
    }
    Ok((plans, sources))
}

/// Refuses `--rx`/`--tx` arguments naming a port the config does not have, and `--rx` on a
/// port no lcore polls.
fn check_replay_args(loaded: &Loaded, opts: &Options) -> Result<(), AppError> {
    let nports = loaded.config.ports.len();
    for (p, _) in opts.rx.iter().chain(opts.tx.iter()) {
        if *p >= nports {
            return Err(AppError::Usage(format!(
                "--rx/--tx port {p}: the config has {nports} port(s) (0..{})",
                nports - 1
            )));
        }
    }
    // (The config's own inputs on ports no lcore polls are refused when it loads.)
    if let Some((p, f)) = opts.rx.iter().find(|(p, _)| loaded.rx_queues(*p as u16) == 0) {
        return Err(AppError::Usage(format!(
            "--rx {p}={}: no lcore polls port {p}: add {{ port = {p}, queue = 0 }} to an lcore's rx in the config",
            f.display()
        )));
    }
    Ok(())
}

/// The net_pcap vdev that replays port `i`: its device name, its `--vdev` argument, and the
/// files to merge into its input (several `rx` files, or none: an empty input).
fn replay_vdev(
    i: usize,
    rx: &[&PathBuf],
    tx: &[&PathBuf],
    workers: usize,
    tmp: &Path,
) -> Result<(String, String, Option<Vec<PathBuf>>), AppError> {
    // Replay: every port becomes a net_pcap vdev reading its `--rx` files (else the
    // config's `rx_pcap` files, else an empty file) once, and writing to its `--tx` file
    // (else the config's first `tx_pcap`, else nowhere).
    let device = format!("net_pcap_dpu{i}");
    let mut args = vec![device.clone()];
    let mut rx_merge = None;
    if rx.len() == 1 {
        args.push(format!("rx_pcap={}", rx[0].display()));
    } else {
        // No input: an empty file. Several inputs: merged by capture time into one, so
        // that the appliance sees them in time order (as a checker replaying them does).
        args.push(format!("rx_pcap={}", tmp.join(format!("rx{i}.pcap")).display()));
        rx_merge = Some(rx.iter().map(|f| f.to_path_buf()).collect());
    }
    if tx.len() > 1 {
        return Err(AppError::Usage(format!("--tx {i}=...: one output file per port")));
    }
    let out = tx.first().map(|f| f.to_path_buf()).unwrap_or_else(|| PathBuf::from("/dev/null"));
    // One tx queue per worker (net_pcap: one per `tx_pcap`); each queue gets its own
    // file, merged by time into `out` at the end (see `outputs`).
    for _ in 0..workers.max(1) {
        args.push(format!("tx_pcap={}", out.display()));
    }
    Ok((device, args.join(","), rx_merge))
}

/// What a port's `--vdev` argument `v` says of its files and input: net_pcap's `rx_pcap` and
/// `tx_pcap` files and `infinite_rx`, and whether the input is live or endless.
fn read_vdev_args(plan: &mut PortPlan, v: &str) {
    let args: Vec<(String, String)> = v
        .split(',')
        .skip(1)
        .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.trim().to_string(), v.trim().to_string())))
        .collect();
    let is_pcap = plan.device.starts_with("net_pcap");
    for (k, val) in &args {
        match k.as_str() {
            "rx_pcap" if is_pcap => plan.rx_files.push(PathBuf::from(val)),
            "tx_pcap" if is_pcap => plan.tx_files.push(PathBuf::from(val)),
            "infinite_rx" if is_pcap => plan.infinite = val == "1",
            "rx_iface" | "iface" if is_pcap => plan.live_rx = true,
            _ => {}
        }
    }
    if !is_pcap && !plan.device.starts_with("net_null") {
        plan.live_rx = true; // memif, af_packet, ring, tap...: input never "ends"
    }
    // net_null generates packets forever, unless it has no rx (`no-rx=1`: an output only).
    let no_rx = args.iter().any(|(k, val)| k == "no-rx" && val == "1");
    if plan.device.starts_with("net_null") && !no_rx {
        plan.infinite = true;
    }
}

/// Stages every output file of the run (see [`crate::outputs`]): each net_pcap `tx_pcap` file
/// (its tx queues then write temporary files, which the port's `--vdev` argument now names) and
/// the stats JSON; then refuses outputs that would destroy an input (the config file, every
/// `rx_pcap` and `--rx` file) or another output.
fn stage_outputs(plans: &mut [PortPlan], sources: &[(usize, PathBuf)], opts: &Options) -> Result<Staged, AppError> {
    let mut staged = Staged::new();
    for (i, p) in plans.iter_mut().enumerate() {
        // The queues writing each destination (a destination named several times is merged).
        let mut dests: Vec<Destination> = Vec::new();
        for (q, f) in p.tx_files.iter().enumerate() {
            if outputs::is_special(f) {
                continue; // /dev/null, a device, a FIFO: written as named
            }
            let id = outputs::identity(f);
            match dests.iter_mut().find(|(d, _, _)| *d == id) {
                Some((_, _, queues)) => queues.push((i, q as u16)),
                None => dests.push((id, f.clone(), vec![(i, q as u16)])),
            }
        }
        let mut files: Vec<Option<PathBuf>> = vec![None; p.tx_files.len()];
        for (_, f, queues) in &dests {
            for ((_, q), part) in queues.iter().zip(staged.add_pcap(&format!("port {i} output"), f, queues)) {
                files[usize::from(*q)] = Some(part);
            }
        }
        if dests.is_empty() {
            continue;
        }
        // The vdev argument with each staged `tx_pcap` renamed.
        let mut q = 0;
        let args: Vec<String> = p.eal_args[1]
            .split(',')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if k.trim() == "tx_pcap" => {
                    q += 1;
                    match &files[q - 1] {
                        Some(part) => format!("{k}={}", part.display()),
                        None => kv.to_string(),
                    }
                }
                _ => kv.to_string(),
            })
            .collect();
        p.eal_args[1] = args.join(",");
    }
    if let Some(json) = &opts.stats_json {
        staged.add_file(STATS_JSON, json);
    }
    let mut inputs = vec![Named::new("the config file", "the config file", &opts.config)];
    for (j, f) in sources {
        inputs.push(Named::new(format!("port {j}'s input"), format!("port {j}'s input"), f));
    }
    outputs::check(&inputs, &staged.files()).map_err(AppError::Usage)?;
    Ok(staged)
}

/// What [`Staged`] calls the stats JSON.
const STATS_JSON: &str = "stats JSON";

/// Reads every input (refusing one that cannot be read whole), merges the inputs of ports given
/// several, and creates the directories of outputs; returns the total input records (and read
/// errors) of finite pcap inputs, or `None` if some input is live or infinite.
fn prepare_files(
    plans: &[PortPlan],
    loaded: &Loaded,
    opts: &Options,
    tmp: &TempDir,
    staged: &mut Staged,
) -> Result<Option<pcapfile::Input>, AppError> {
    // Every input first, before anything is written.
    let mut scanned: Vec<(&Path, pcapfile::Input)> = Vec::new();
    for p in plans {
        for f in p.rx_merge.iter().flatten().chain(p.rx_files.iter().filter(|_| p.rx_merge.is_none())) {
            let n = pcapfile::scan(f).map_err(|e| AppError::Other(format!("port {} input: {e}", p.name)))?;
            scanned.push((f, n));
        }
    }
    for p in plans {
        if let Some(parts) = &p.rx_merge {
            tmp.create()?;
            if parts.is_empty() {
                pcapfile::write_empty(&p.rx_files[0]).map_err(AppError::Other)?;
            } else {
                let parts: Vec<&Path> = parts.iter().map(|f| f.as_path()).collect();
                pcapfile::merge(&parts, &p.rx_files[0]).map_err(AppError::Other)?;
            }
        }
    }
    let mut total = pcapfile::Input::default();
    let mut finite = true;
    let mut preload = 0u64;
    for p in plans {
        for f in &p.rx_files {
            let n = match scanned.iter().find(|(g, _)| *g == f.as_path()) {
                Some((_, n)) if p.rx_merge.is_none() => *n,
                _ => pcapfile::scan(f).map_err(|e| AppError::Other(format!("port {} input: {e}", p.name)))?,
            };
            if p.infinite {
                preload += n.records;
            } else {
                total.records += n.records;
                total.errors += n.errors;
            }
        }
        if p.infinite || p.live_rx {
            finite = false;
        }
    }
    let mbufs = loaded.config.mempool.mbufs as u64;
    if preload > 0 && preload + 2048 > mbufs {
        return Err(ConfigError::new(
            &opts.config,
            "mempool.mbufs",
            format!(
                "expected at least {} mbufs, found {mbufs}: infinite_rx preloads all {preload} input packets into the \
                 mempool, plus room for the rx rings and tx buffers",
                preload + 2048
            ),
        )
        .into());
    }
    staged.create_dirs().map_err(AppError::Other)?;
    Ok(if finite { Some(total) } else { None })
}

/// Runs the appliance until its input ends or it is told to stop; returns the final stats.
pub fn run(opts: &Options) -> Result<Summary, AppError> {
    let loaded = config::load(&opts.config)?;
    let lcores = loaded.lcores();
    let workers_n = lcores.len();
    // Guards: on every way out from here the run's temporary directory and files go (locals
    // drop in reverse order: EAL is cleaned up first, then these).
    let tmp = TempDir::new();
    let (mut plans, sources) = plan_ports(&loaded, opts, workers_n, &tmp.path)?;
    let mut staged = stage_outputs(&mut plans, &sources, opts)?;
    let expected = prepare_files(&plans, &loaded, opts, &tmp, &mut staged)?;
    stop_requested()?;

    let mut args = vec!["dpu".to_string()];
    args.extend(loaded.config.eal.args.iter().cloned());
    if opts.quiet {
        // `-q` prints only errors, DPDK's own messages too: the global level (which the config's
        // `--log-level '*:warning'` patterns leave alone) governs the start-up lines of libraries
        // such as telemetry's. Level 4 is RTE_LOG_ERR; EAL arguments after it still override it.
        args.extend(["--log-level".to_string(), "4".to_string()]);
    }
    args.extend(opts.eal_extra.iter().cloned());
    if !args.iter().any(|a| a.starts_with("--file-prefix")) {
        // An instance of its own: its runtime directory and telemetry socket are its own, so
        // that two appliances (or tests) running at once never share one.
        args.push(format!("--file-prefix=dpu-{}", std::process::id()));
    }
    for p in &plans {
        args.extend(p.eal_args.iter().cloned());
    }
    let eal = Eal::init(&args).map_err(|e| {
        if args.iter().any(|a| a == "--no-huge") {
            AppError::from(e)
        } else {
            // The commonest failure on a fresh machine: no hugepages reserved (or no right to them).
            AppError::Other(format!(
                "{e}; without hugepages, run EAL on ordinary memory: args = [\"--no-huge\", \"-m\", \"512\", \"--no-pci\", \"--no-shconf\"] in [eal] of {}",
                opts.config.display()
            ))
        }
    })?;
    let summary = run_with_eal(&eal, &loaded, opts, &plans, expected, &mut staged)?;
    drop(eal);
    if opts.stats_json.is_some() {
        let json = serde_json::to_string_pretty(&summary).expect("stats serialise");
        staged.write_file(STATS_JSON, json.as_bytes()).map_err(AppError::Other)?;
    }
    staged.commit().map_err(AppError::Other)?;
    Ok(summary)
}

/// Refuses to start the ports after SIGINT or SIGTERM arrived during start-up (the signal
/// handler only records that a stop was asked, [`stop::ask_stop`]).
fn stop_requested() -> Result<(), AppError> {
    if stop::quitting() || stop::stop_asked() {
        return Err(AppError::Other("stopped by SIGINT or SIGTERM before the ports started: nothing written".into()));
    }
    Ok(())
}

/// Prints where a live run can be reached (telemetry socket, metrics, control socket) and the
/// line that says the ports are forwarding, which scripts wait for.
fn announce(
    eal: &Eal,
    telemetry: &Result<(), DpdkError>,
    metrics: Option<&crate::metrics::MetricsServer>,
    control: Option<&crate::control::Control>,
    ports: &[dpdk::Port],
    workers: usize,
) {
    // The runtime directory is named after the file prefix, however EAL was given it.
    let dir = PathBuf::from(eal.runtime_dir());
    let socket = dir.join("dpdk_telemetry.v2");
    match telemetry {
        Ok(()) if !eal.args().iter().any(|a| a == "--no-telemetry") => {
            let prefix = dir.file_name().map_or_else(|| "rte".into(), |n| n.to_string_lossy());
            println!(
                "dpu: telemetry: {} (dpdk-telemetry.py -f {prefix}: /dpu/stats, /dpu/collectives, /dpu/table,NAME)",
                socket.display()
            );
        }
        Ok(()) => {}
        Err(e) => eprintln!("dpu: telemetry commands not registered: {e}"),
    }
    if let Some(m) = metrics {
        println!("dpu: metrics: http://{}/metrics", m.addr);
    }
    if let Some(c) = control {
        println!(
            "dpu: control: {} (dpuctl -s {} tables; SIGHUP reloads the config)",
            c.socket.display(),
            c.socket.display()
        );
    }
    // Live or endless input: say when the ports are forwarding (scripts wait for this line).
    let names: Vec<&str> = ports.iter().map(|p| p.name()).collect();
    println!(
        "dpu: running on {} worker lcore(s), ports [{}]; stop with Ctrl-C (SIGINT) or SIGTERM",
        workers,
        names.join(", ")
    );
    let _ = std::io::Write::flush(&mut std::io::stdout());
}

fn run_with_eal(
    eal: &Eal,
    loaded: &Loaded,
    opts: &Options,
    plans: &[PortPlan],
    expected: Option<pcapfile::Input>,
    staged: &mut Staged,
) -> Result<Summary, AppError> {
    dpdk::mbuf::register_rx_timestamp()?;
    let cfg = &loaded.config;
    let lcores = loaded.lcores();
    start::check_lcores(eal, loaded, opts)?;
    let (pool, ring_slots, schedulers) = start::create_pool(loaded, opts, plans)?;
    let mut ports = start::start_ports(loaded, opts, plans, &pool)?;
    stop_requested()?;
    let telemetry = crate::live::register_telemetry();
    // Dropped (the listener stopped) when the run returns.
    let metrics = match cfg.telemetry.prometheus {
        Some(addr) => Some(
            crate::metrics::serve(&addr.to_string())
                .map_err(|e| AppError::Other(format!("{e} ([telemetry] prometheus in {})", opts.config.display())))?,
        ),
        None => None,
    };
    let running = start::launch_workers(loaded, &ports, pool, ring_slots, schedulers, expected.is_some())?;
    // The control socket, in the instance's runtime directory (removed with it at exit).
    let control = match crate::control::start(
        loaded,
        &opts.config,
        &PathBuf::from(eal.runtime_dir()).join(crate::control::SOCKET_NAME),
        running.mailboxes.clone(),
        running.agg.clone(),
        opts.quiet,
    ) {
        Ok(c) => Some(c),
        Err(e) => {
            eprintln!("dpu: {e}; running without runtime control (dpuctl cannot connect, SIGHUP is ignored)");
            None
        }
    };
    if !opts.quiet && expected.is_none() {
        announce(eal, &telemetry, metrics.as_ref(), control.as_ref(), &ports, lcores.len());
    }
    let reconnect: Vec<bool> = plans.iter().map(PortPlan::is_memif_client).collect();
    let stats_every = (cfg.dataplane.stats_interval_ms > 0 && expected.is_none())
        .then(|| Duration::from_millis(cfg.dataplane.stats_interval_ms));
    let watched = monitor::monitor(
        &mut ports,
        &reconnect,
        stats_every,
        expected,
        opts.duration,
        Duration::from_millis(cfg.dataplane.replay_idle_ms),
        opts.quiet,
    );
    // No update may be left half done: the control plane stops (finishing the request it
    // serves) before the workers do.
    if let Some(c) = control {
        c.stop();
    }
    stop::request_quit();
    let seconds = running.started.elapsed().as_secs_f64();
    let panics = summary::join_workers(running.handles);
    crate::live::set_current(None);
    let totals = summary::collect(&running.results, ports.len());
    let (ethdev, xstats) = summary::stop_ports(ports, lcores.len(), staged, &watched.ethdev_seen)?;
    if !panics.is_empty() {
        return Err(AppError::Other(panics.join("; ")));
    }
    // net_pcap closed its files: each must hold what its tx queue sent.
    staged.finish_pcaps().map_err(AppError::Other)?;
    let (drops, losses) = drops_and_losses(&totals.counters, &ethdev);
    let summary = Summary {
        ports: plans
            .iter()
            .enumerate()
            .map(|(i, p)| PortSummary {
                index: i,
                name: p.name.clone(),
                device: p.device.clone(),
                workers: totals.counters.ports[i],
                ethdev: ethdev[i],
                xstats: xstats[i].clone(),
                reconnects: watched.reconnects[i],
            })
            .collect(),
        drops,
        losses,
        finite_replay: expected.is_some() && opts.duration.is_none(),
        tables: totals.tables,
        counters: totals.named,
        meters: totals.meters,
        qos: totals.qos,
        input_records: expected.map(|i| i.records),
        input_short: watched.input_short,
        input_errors: expected.map(|i| i.errors),
        seconds,
        mbufs_in_use_after: pool.in_use(),
        unmaps_after_grace: dpdk::rcu::unmap_waits(),
        grace_timeouts: dpdk::rcu::grace_timeouts(),
        memseg_closes_refused: dpdk::fdguard::closes_refused(),
        workers: lcores.len(),
        aggregation: totals.agg,
        aggregation_by_worker: totals.agg_by_worker,
        stragglers: totals.stragglers,
        collectives: totals.collectives,
        neighbor_replies: totals.counters.neighbor_replies,
        address_conflicts: totals.counters.address_conflicts,
    };
    Ok(summary)
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

    /// The human-readable report printed at the end of a run.
    pub fn report(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
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
        if !self.collectives.is_empty() {
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
        let _ = writeln!(s, "mbufs in use after shutdown: {}", self.mbufs_in_use_after);
        s
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
            aggregation: Default::default(),
            aggregation_by_worker: Vec::new(),
            collectives: Vec::new(),
            stragglers: Vec::new(),
            neighbor_replies: 0,
            address_conflicts: 0,
        }
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

    #[test]
    fn full_egress_queues_leave_rx_its_mbufs() {
        use crate::config::memory::{class_mbufs, class_mbufs_floor, fit_class_mbufs};
        // A class of the default 262,144 bytes holds up to 262144 / 14 + 1 = 18,725 frames of
        // 14 bytes, bounded by the pool; its floor is 262144 / 1514 rounded up = 174 full frames.
        assert_eq!(class_mbufs(262_144, u64::MAX), 18_725);
        assert_eq!(class_mbufs(262_144, 8191), 8191);
        assert_eq!(class_mbufs(3000, 8191), 215);
        assert_eq!(class_mbufs_floor(262_144, 1514), 174);
        assert_eq!(class_mbufs_floor(3000, 1514), 2);
        // Demands that fit are kept; else floors plus shares in proportion to the rest.
        assert_eq!(fit_class_mbufs(&[215, 100], &[2, 10], 315), Ok(vec![215, 100]));
        // 1000 - (174 + 2) = 824 spare over floors; extra asked 8017 and 213: shares
        // 8017 x 824 / 8230 = 802 and 213 x 824 / 8230 = 21.
        assert_eq!(fit_class_mbufs(&[8191, 215], &[174, 2], 1000), Ok(vec![174 + 802, 2 + 21]));
        assert_eq!(fit_class_mbufs(&[8191, 215], &[174, 2], 175), Err(1));
        // One worker, 2 ports, burst 32, cache 256: it holds 32 + 64 + 384 = 480. A port with
        // two default classes and one of 3000 bytes in the default pool of 8191: 7711 spare
        // for 8191 + 8191 + 215 asked, floors 174 + 174 + 2: the 7361 beyond the floors go in
        // proportion to 8017, 8017 and 213 of 16247 asked beyond them: 3632, 3632 and 96.
        let sched = SchedMbufs { ring_mbufs: 0, demand: vec![8191, 8191, 215], floor: vec![174, 174, 2] };
        let (slots, classes) = plan_pool(8191, 256, 32, 2, 1, false, 0, &sched, 1).unwrap();
        assert_eq!(slots, 0);
        assert!(classes.iter().sum::<u64>() <= 8191 - 480, "{classes:?}");
        assert_eq!(classes, fit_class_mbufs(&sched.demand, &sched.floor, 8191 - 480).unwrap());
        assert_eq!(classes, vec![174 + 3632, 174 + 3632, 2 + 96]);
        // Two workers, each other's rings to the owner (1023 mbufs), hand-off rings: 2 x 480 +
        // 1023 + 2 x 127 + 350 = 2587 needed at the floors.
        let sched = SchedMbufs { ring_mbufs: 1023, ..sched };
        let e = plan_pool(2586, 256, 32, 2, 2, true, 0, &sched, 1).unwrap_err();
        assert!(e.starts_with("expected at least 2587 mbufs, found 2586"), "{e}");
        assert!(e.contains("scheduler owners 1023") && e.contains("egress queues at least 350"), "{e}");
        let (slots, classes) = plan_pool(2587, 256, 32, 2, 2, true, 0, &sched, 1).unwrap();
        assert_eq!((slots, classes), (128, vec![174, 174, 2]));
        // Without schedulers, as before.
        assert_eq!(plan_pool(8191, 256, 32, 2, 2, true, 0, &SchedMbufs::default(), 1), Ok((2048, vec![])));
    }

    /// Zero-copy results are chains of up to 3 mbufs (RoCEv2: header, shared payload, ICRC),
    /// each keeping the frame it shares out of the pool too: a worker's tx buffers hold 4 per
    /// frame. One worker, 2 ports, burst 32, cache 256: 32 + 2 x 32 x 4 + 384 = 672 (480 in
    /// copy mode).
    #[test]
    fn zero_copy_results_count_every_mbuf_of_their_chains() {
        let plan = |m, segs| plan_pool(m, 256, 32, 2, 1, false, 0, &SchedMbufs::default(), segs);
        assert_eq!(plan(480, 1), Ok((0, vec![])));
        let e = plan(671, 4).unwrap_err();
        assert!(e.starts_with("expected at least 672 mbufs, found 671"), "{e}");
        assert!(e.contains("2 port(s) x 32 tx buffers x 4 mbufs per zero-copy result frame"), "{e}");
        assert_eq!(plan(672, 4), Ok((0, vec![])));
        // A NIC's tx descriptor holds one mbuf; with chains of 3, one shared frame more per 3.
        assert_eq!(pmd_held("net_ice", 1, 1024, 2, 512, 3), 1024 + 2 * (512 + 171));
        assert_eq!(pmd_held("net_ice", 1, 1024, 2, 512, 1), 1024 + 2 * 512);
        assert_eq!(pmd_held("net_pcap0", 1, 1024, 2, 512, 3), 0);
    }

    #[test]
    fn hand_off_rings_get_what_the_pool_leaves() {
        let size_hand_off_rings =
            |m, c, b, p, w, r, h| plan_pool(m, c, b, p, w, r, h, &SchedMbufs::default(), 1).map(|p| p.0);
        // 2 workers, 2 ports, burst 32, cache 256: each worker holds 32 + 64 + 384 = 480; the
        // default pool leaves (8191 - 960) / 2 = 3615 per ring: 2048 slots (2047 mbufs).
        assert_eq!(size_hand_off_rings(8191, 256, 32, 2, 2, true, 0), Ok(2048));
        // Capped: a large pool does not make the rings larger than MAX_RING_SLOTS.
        assert_eq!(size_hand_off_rings(1 << 20, 256, 32, 2, 2, true, 0), Ok(MAX_RING_SLOTS));
        // The smallest pool that fits: 2 x 480 + 2 x 127 (rings of 128 slots: twice the 32
        // free slots an rx burst waits for).
        assert_eq!(size_hand_off_rings(960 + 254, 256, 32, 2, 2, true, 0), Ok(128));
        let e = size_hand_off_rings(960 + 253, 256, 32, 2, 2, true, 0).unwrap_err();
        assert!(
            e.starts_with("expected at least 1214 mbufs, found 1213: 2 worker(s) hold up to 480 mbufs each"),
            "{e}"
        );
        assert!(e.contains("hand-off ring 127") && e.contains("rx_nombuf"), "{e}");
        // Three workers: each ring needs 2 x 32 free slots before an rx burst, so at least 256
        // slots; every ring waits for room of (workers - 1) bursts.
        assert_eq!(worker::ring_room_needed(3, 32), 64);
        assert_eq!(size_hand_off_rings(3 * 480 + 3 * 255, 256, 32, 2, 3, true, 0), Ok(256));
        assert!(size_hand_off_rings(3 * 480 + 3 * 255 - 1, 256, 32, 2, 3, true, 0).is_err());
        // No rings (one worker, or no collectives): the bursts, buffers and caches only; the
        // PMDs' descriptors count too.
        assert_eq!(size_hand_off_rings(480, 256, 32, 2, 1, false, 0), Ok(0));
        assert!(size_hand_off_rings(479, 256, 32, 2, 1, false, 0).is_err());
        let e = size_hand_off_rings(480 + 2047, 256, 32, 2, 1, false, 2048).unwrap_err();
        assert!(e.contains("expected at least 2528 mbufs") && e.contains("descriptors 2048"), "{e}");
        // The rx burst counts as configured: 512 packets and one port's 32 tx buffers.
        assert_eq!(size_hand_off_rings(544, 0, 512, 1, 1, false, 0), Ok(0));
        assert!(size_hand_off_rings(543, 0, 512, 1, 1, false, 0).is_err());
    }

    #[test]
    fn only_descriptor_holding_pmds_count_their_descriptors() {
        assert_eq!(pmd_held("net_pcap_dpu0", 1, 1024, 2, 1024, 1), 0);
        assert_eq!(pmd_held("net_null1", 1, 1024, 2, 1024, 1), 0);
        assert_eq!(pmd_held("net_af_packet0", 1, 1024, 2, 1024, 1), 0);
        assert_eq!(pmd_held("0000:3b:00.0", 2, 1024, 3, 512, 1), 2 * 1024 + 3 * 512);
        assert_eq!(pmd_held("net_memif0", 1, 256, 1, 256, 1), 512);
    }
}
