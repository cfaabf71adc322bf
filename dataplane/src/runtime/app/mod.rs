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
//! `summary` (the workers' counters summed, the ports' stats read and the ports closed); `report`
//! holds the final stats and prints them.

mod monitor;
mod report;
mod start;
mod summary;

use report::drops_and_losses;
pub use report::{
    CollectiveSummary, CounterSummary, EntrySummary, LoopSummary, MeterSummary, Percentiles, PortSummary,
    QosClassSummary, RankSummary, StragglerSummary, Summary, LOSS_REASONS,
};

use crate::config::{self, ConfigError, Loaded};
use crate::dpdk::{self, DpdkError, Eal};
use crate::outputs::{self, Identity, Named, Staged};
use crate::pcapfile;
use crate::stop;
use crate::worker;
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

/// The mbufs the egress schedulers can hold at once: the rings to the owners of shaped ports'
/// schedulers, counted full, and each class's queue (`[port.qos]`; one scheduler per port).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SchedMbufs {
    /// Mbufs the rings to the schedulers' owners hold when full (each ring's slots - 1).
    pub ring_mbufs: u64,
    /// Per class of every shaped port, in port and class order: its packet capacity
    /// ([`crate::config::memory::class_mbufs`]).
    pub demand: Vec<u64>,
    /// Per class: the least it may be cut to ([`crate::config::memory::class_mbufs_floor`]),
    /// even when that is more than its demand (a demand is bounded by the pool, a floor never).
    pub floor: Vec<u64>,
    /// Per class: its key (`port[1].qos.class[0]`), for messages.
    pub keys: Vec<String>,
}

/// The mempool must hold, at once, what every worker holds (an rx burst, its tx buffers, the
/// mbufs parked in its lcore's cache of the pool), what the PMDs hold in their descriptors,
/// with several workers the hand-off rings and, with egress schedulers (`sched`;
/// [`SchedMbufs::default`] without), what their rings and queues can hold: a pool that runs dry
/// makes the ports lose packets (`rx_nombuf`), and full queues must never starve the ports.
///
/// `segs`: mbufs a frame may hold out of the pool ([`worker::FrameMbufs`]: zero-copy results'
/// chains, received jumbo chains): the workers' bursts and tx buffers hold that many per frame
/// (the PMDs' descriptors, the schedulers' rings and queues are scaled by the caller).
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
    segs: worker::FrameMbufs,
) -> Result<(u32, Vec<u64>), String> {
    let workers = workers.max(1);
    let held = worker::mbufs_held(burst, ports, segs);
    let cached = (cache as u64 * 3).div_ceil(2); // a cache holds up to 1.5 x its size (flush threshold)
    let reserved = workers as u64 * (held + cached) + pmd_held + sched.ring_mbufs;
    let min_slots = if rings { (2 * worker::ring_room_needed(workers, burst) + 1).next_power_of_two() } else { 0 };
    let min_rings = workers as u64 * min_slots.saturating_sub(1) as u64;
    let fitted = crate::config::memory::fit_class_mbufs(
        &sched.demand,
        &sched.floor,
        (mbufs as u64).saturating_sub(reserved + min_rings),
    );
    // The floors whole, not cut to the demands: a demand is bounded by the pool it was sized
    // for, so a floor above it grows with the pool and a count made of the two could never be
    // met. With every floor, a pool of `needed` mbufs gives each class a demand of at least its
    // floor and fits.
    let floors: u64 = sched.floor.iter().fold(0u64, |a, f| a.saturating_add(*f));
    let needed = reserved.saturating_add(min_rings).saturating_add(floors);
    let Ok(classes) = fitted.map_err(|_| ()).and_then(|c| if (mbufs as u64) < needed { Err(()) } else { Ok(c) }) else {
        let mut why = format!(
            "{workers} worker(s) hold up to {} mbufs each (an rx burst of {}{}, {ports} port(s) x {} tx buffers{}, \
             and 1.5 x the cache of {cache} on their lcore)",
            held + cached,
            burst.min(worker::MAX_BURST),
            if segs.received > 1 { format!(" x {} mbufs per jumbo frame", segs.received) } else { String::new() },
            worker::TX_BUFFER,
            match (segs.made > 1, segs.received > 1) {
                (false, false) => String::new(),
                (true, _) if segs.made >= segs.received => format!(" x {} mbufs per zero-copy result frame", segs.made),
                _ => format!(" x {} mbufs per jumbo frame", segs.received),
            }
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
        // The class that asks the most (the first of equals), named: its capacity_bytes is the
        // key to lower.
        let largest =
            sched.floor.iter().enumerate().rev().max_by_key(|(_, f)| **f).map(|(i, f)| (sched.keys.get(i), *f));
        if floors > 0 {
            why += &format!(", the egress queues at least {floors} (each class's capacity_bytes in maximum frames");
            if let Some((Some(key), f)) = largest {
                why += &format!("; the most, {f}, {key}.capacity_bytes");
            }
            why += ")";
        }
        if needed > u64::from(u32::MAX) {
            let lower = match largest {
                Some((Some(key), _)) => format!("lower {key}.capacity_bytes"),
                _ => "lower the classes' capacity_bytes".to_string(),
            };
            return Err(format!(
                "expected at least {needed} mbufs, more than a pool can have (mempool.mbufs is at most {}): {why}; \
                 {lower}",
                u32::MAX
            ));
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
        self.eal_args[0] == "--vdev" && crate::dpdk::port::memif_client_socket(&self.eal_args[1]).is_some()
    }

    /// A net_memif client vdev's server socket: its `socket=` argument, or DPDK's default
    /// `/run/memif.sock` ([`crate::dpdk::port::memif_client_socket`]).
    fn memif_socket(&self) -> String {
        crate::dpdk::port::memif_client_socket(&self.eal_args[1]).unwrap_or_else(|| "/run/memif.sock".into())
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
    for (i, p) in plans.iter().enumerate() {
        // A port no lcore polls delivers nothing: its input, live, endless or a file, neither
        // keeps the run going nor is waited for (an output-only net_ring or net_null port).
        if loaded.rx_queues(i as u16) == 0 {
            continue;
        }
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
    let watch: Vec<monitor::Watch> = plans
        .iter()
        .map(|p| monitor::Watch { reconnect: p.is_memif_client(), forgetful: p.device.starts_with("net_memif") })
        .collect();
    let stats_every = (cfg.dataplane.stats_interval_ms > 0 && expected.is_none())
        .then(|| Duration::from_millis(cfg.dataplane.stats_interval_ms));
    let watched = monitor::monitor(
        &mut ports,
        &watch,
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
        loops: totals.loops,
        tsc_hz: dpdk::tsc_hz(),
        aggregation: totals.agg,
        aggregation_by_worker: totals.agg_by_worker,
        stragglers: totals.stragglers,
        collectives: totals.collectives,
        neighbor_replies: totals.counters.neighbor_replies,
        address_conflicts: totals.counters.address_conflicts,
    };
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::FrameMbufs;

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
        let keys = ["port[0].qos.class[0]", "port[0].qos.class[1]", "port[0].qos.class[2]"].map(String::from).to_vec();
        let sched = SchedMbufs { ring_mbufs: 0, demand: vec![8191, 8191, 215], floor: vec![174, 174, 2], keys };
        let (slots, classes) = plan_pool(8191, 256, 32, 2, 1, false, 0, &sched, FrameMbufs::ONE).unwrap();
        assert_eq!(slots, 0);
        assert!(classes.iter().sum::<u64>() <= 8191 - 480, "{classes:?}");
        assert_eq!(classes, fit_class_mbufs(&sched.demand, &sched.floor, 8191 - 480).unwrap());
        assert_eq!(classes, vec![174 + 3632, 174 + 3632, 2 + 96]);
        // Two workers, each other's rings to the owner (1023 mbufs), hand-off rings: 2 x 480 +
        // 1023 + 2 x 127 + 350 = 2587 needed at the floors.
        let sched = SchedMbufs { ring_mbufs: 1023, ..sched };
        let e = plan_pool(2586, 256, 32, 2, 2, true, 0, &sched, FrameMbufs::ONE).unwrap_err();
        assert!(e.starts_with("expected at least 2587 mbufs, found 2586"), "{e}");
        assert!(e.contains("scheduler owners 1023"), "{e}");
        assert!(e.contains("egress queues at least 350 (each class's capacity_bytes in maximum frames; the most, 174, port[0].qos.class[0].capacity_bytes)"), "{e}");
        let (slots, classes) = plan_pool(2587, 256, 32, 2, 2, true, 0, &sched, FrameMbufs::ONE).unwrap();
        assert_eq!((slots, classes), (128, vec![174, 174, 2]));
        // A class whose floor is above its demand (the demand bounded by the pool it was
        // sized for): the count asked is enough once set, instead of growing with the pool.
        let one = |mbufs: u32, floor: u64| SchedMbufs {
            ring_mbufs: 0,
            demand: vec![(floor * 7).min(u64::from(mbufs))],
            floor: vec![floor],
            keys: vec!["port[0].qos.class[0]".into()],
        };
        let e = plan_pool(8191, 256, 32, 2, 1, false, 0, &one(8191, 20_000), FrameMbufs::ONE).unwrap_err();
        assert!(e.starts_with("expected at least 20480 mbufs, found 8191"), "{e}");
        assert!(e.contains("the most, 20000, port[0].qos.class[0].capacity_bytes"), "{e}");
        let (_, classes) = plan_pool(20_480, 256, 32, 2, 1, false, 0, &one(20_480, 20_000), FrameMbufs::ONE).unwrap();
        assert_eq!(classes, vec![20_000]);
        // Beyond what any pool holds: the class to lower, not a count to set.
        let e = plan_pool(8191, 256, 32, 2, 1, false, 0, &one(8191, 1 << 52), FrameMbufs::ONE).unwrap_err();
        assert!(
            e.starts_with("expected at least 4503599627370976 mbufs, more than a pool can have (mempool.mbufs is at most 4294967295)"),
            "{e}"
        );
        assert!(e.ends_with("; lower port[0].qos.class[0].capacity_bytes"), "{e}");
        // Without schedulers, as before.
        assert_eq!(
            plan_pool(8191, 256, 32, 2, 2, true, 0, &SchedMbufs::default(), FrameMbufs::ONE),
            Ok((2048, vec![]))
        );
    }

    /// Zero-copy results are chains of up to 3 mbufs (RoCEv2: header, shared payload, ICRC),
    /// each keeping the frame it shares out of the pool too: a worker's tx buffers hold 4 per
    /// frame. One worker, 2 ports, burst 32, cache 256: 32 + 2 x 32 x 4 + 384 = 672 (480 in
    /// copy mode).
    #[test]
    fn zero_copy_results_count_every_mbuf_of_their_chains() {
        let plan =
            |m, made| plan_pool(m, 256, 32, 2, 1, false, 0, &SchedMbufs::default(), FrameMbufs { made, received: 1 });
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

    /// A port whose MTU lets jumbo frames in receives them as chains: with 2048-byte mbuf
    /// frames and MTU 9000 (frames up to 9022 bytes), 5 mbufs each. One worker, 2 ports, burst
    /// 32, cache 256: 32 x 5 + 2 x 32 x 5 + 384 = 864 (480 with one mbuf per frame).
    #[test]
    fn jumbo_chains_count_every_mbuf_they_take() {
        let jumbo = FrameMbufs { made: 1, received: 9022u32.div_ceil(2048) as u64 };
        assert_eq!(jumbo.received, 5);
        let plan = |m, segs| plan_pool(m, 256, 32, 2, 1, false, 0, &SchedMbufs::default(), segs);
        assert_eq!(plan(480, FrameMbufs::ONE), Ok((0, vec![])));
        let e = plan(863, jumbo).unwrap_err();
        assert!(e.starts_with("expected at least 864 mbufs, found 863"), "{e}");
        assert!(
            e.contains(
                "an rx burst of 32 x 5 mbufs per jumbo frame, 2 port(s) x 32 tx buffers x 5 mbufs per jumbo frame"
            ),
            "{e}"
        );
        assert_eq!(plan(864, jumbo), Ok((0, vec![])));
        // Zero-copy results' 4 per frame beside chains of 5: a tx buffer holds the longer.
        assert_eq!(jumbo.any(), 5);
        assert_eq!(FrameMbufs { made: 4, received: 2 }.any(), 4);
        assert_eq!(plan(32 * 2 + 64 * 4 + 384, FrameMbufs { made: 4, received: 2 }), Ok((0, vec![])));

        // A shaped class of capacity_bytes on a jumbo port: its chains take at most
        // capacity_bytes / mbuf frame more than one mbuf per frame, whatever the frames' lengths.
        use crate::config::memory::class_chain_mbufs;
        assert_eq!(class_chain_mbufs(2048, 262_144, 2048), 0);
        assert_eq!(class_chain_mbufs(9022, 262_144, 2048), 128);
        assert_eq!(class_chain_mbufs(9022, 3000, 2048), 1);
        let mut x = 0x9e37_79b9_u64;
        for _ in 0..2000 {
            // Frames of 14..=9022 bytes queued until the next would pass 20,000 bytes.
            let (mut bytes, mut frames, mut mbufs) = (0u64, 0u64, 0u64);
            loop {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let len = 14 + (x >> 33) % (9022 - 13);
                if bytes + len > 20_000 {
                    break;
                }
                bytes += len;
                frames += 1;
                mbufs += len.div_ceil(2048);
            }
            assert!(mbufs <= frames + class_chain_mbufs(9022, 20_000, 2048), "{mbufs} mbufs in {frames} frames");
        }
        // The bound is reached: nine frames of 2049 bytes (two mbufs each) in 20,000 bytes.
        assert_eq!(9 * 2049u64.div_ceil(2048), 9 + class_chain_mbufs(9022, 20_000, 2048));
    }

    #[test]
    fn hand_off_rings_get_what_the_pool_leaves() {
        let size_hand_off_rings =
            |m, c, b, p, w, r, h| plan_pool(m, c, b, p, w, r, h, &SchedMbufs::default(), FrameMbufs::ONE).map(|p| p.0);
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
