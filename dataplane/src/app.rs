//! The appliance: from a loaded config to running workers and back to final stats.
//!
//! Start-up is all or nothing (EAL, mempool, every port, every worker); shutdown (SIGINT,
//! SIGTERM, end of replay input, `--duration`, or a worker's panic) stops rx, lets every worker
//! flush its tx buffers, then stops and closes the ports (net_pcap closes its output files there)
//! and prints the final stats.
//!
//! End of input in replays: net_pcap gives no end-of-file signal (rx just returns 0), so the
//! appliance counts the records of every finite `rx_pcap` file before starting, and stops once
//! the ports have consumed that many (`ipackets + rx_nombuf + ierrors`: a record read without an
//! mbuf is lost, but consumed; `ierrors` counts libpcap's read errors, which the count includes,
//! and records no mbuf chain could hold). An idle timer (`dataplane.replay_idle_ms` without new
//! input) is only the fallback, for inputs that end short.

use crate::config::{self, ConfigError, Loaded};
use crate::datapath::Datapath;
use crate::dpdk::{self, lcore, port::PortSetup, DpdkError, Eal, Mempool, Port, PortStats};
use crate::pcapfile;
use crate::stats::Counters;
use crate::table::Counter;
use crate::worker::{self, RxQueue, Worker};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
    /// Write the final stats as JSON here.
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

/// The run's final stats.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Per port.
    pub ports: Vec<PortSummary>,
    /// Drops by reason (all reasons, zeros included).
    pub drops: std::collections::BTreeMap<String, u64>,
    /// Table counters.
    pub tables: Vec<EntrySummary>,
    /// Named counters, summed over the workers, in the order the config first uses them.
    pub counters: Vec<CounterSummary>,
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
    /// Worker lcores.
    pub workers: usize,
    /// The aggregator's counters (all workers).
    pub aggregation: crate::agg::AggCounters,
    /// Configured collectives.
    pub collectives: usize,
    /// ARP replies and neighbour advertisements sent for the appliance's addresses.
    pub neighbor_replies: u64,
}

/// A port as it will be probed: its EAL device argument and replay files.
struct PortPlan {
    name: String,
    device: String,
    eal_args: [String; 2],
    rx_files: Vec<PathBuf>,
    infinite: bool,
    live_rx: bool,
    /// For replay outputs split per tx queue: (parts, final file).
    tx_merge: Option<(Vec<PathBuf>, PathBuf)>,
    tx_files: Vec<PathBuf>,
}

fn plan_ports(loaded: &Loaded, opts: &Options, workers: usize) -> Result<Vec<PortPlan>, AppError> {
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
    let tmp = std::env::temp_dir().join(format!("dpu-{}", std::process::id()));
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
        if replay && rx.is_empty() {
            rx = cfg_rx.iter().collect();
        }
        if replay && tx.is_empty() {
            tx = cfg_tx.iter().take(1).collect();
        }
        for f in &rx {
            sources.push((i, f.to_path_buf()));
        }
        let (device, vdev, merge) = if replay {
            // Replay: every port becomes a net_pcap vdev reading its `--rx` files (else the
            // config's `rx_pcap` files, else an empty file) once, and writing to its `--tx` file
            // (else the config's first `tx_pcap`, else nowhere).
            let device = format!("net_pcap_dpu{i}");
            let mut args = vec![device.clone()];
            let rx_files: Vec<PathBuf> = if rx.len() == 1 {
                vec![rx[0].to_path_buf()]
            } else {
                // No input: an empty file. Several inputs: merged by capture time into one, so
                // that the appliance sees them in time order (as a checker replaying them does).
                std::fs::create_dir_all(&tmp).map_err(|e| AppError::Other(format!("{}: {e}", tmp.display())))?;
                let merged = tmp.join(format!("rx{i}.pcap"));
                if rx.is_empty() {
                    pcapfile::write_empty(&merged).map_err(AppError::Other)?;
                } else {
                    for f in &rx {
                        pcapfile::count_records(f).map_err(|e| AppError::Other(format!("port {i} input: {e}")))?;
                    }
                    let parts: Vec<&Path> = rx.iter().map(|f| f.as_path()).collect();
                    pcapfile::merge(&parts, &merged).map_err(AppError::Other)?;
                }
                vec![merged]
            };
            for f in &rx_files {
                args.push(format!("rx_pcap={}", f.display()));
            }
            let out = tx.first().map(|f| f.to_path_buf()).unwrap_or_else(|| PathBuf::from("/dev/null"));
            if tx.len() > 1 {
                return Err(AppError::Usage(format!("--tx {i}=...: one output file per port")));
            }
            let mut merge = None;
            if workers > 1 && out != Path::new("/dev/null") {
                // One tx queue per worker, one file per tx queue; merged by time at the end.
                let parts: Vec<PathBuf> =
                    (0..workers).map(|q| PathBuf::from(format!("{}.txq{q}", out.display()))).collect();
                for p in &parts {
                    args.push(format!("tx_pcap={}", p.display()));
                }
                merge = Some((parts, out));
            } else {
                // One tx queue per worker (here: one worker, or output to /dev/null).
                for _ in 0..workers.max(1) {
                    args.push(format!("tx_pcap={}", out.display()));
                }
            }
            (device, Some(args.join(",")), merge)
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
            infinite: false,
            live_rx: vdev.is_none(),
            tx_merge: None,
            tx_files: Vec::new(),
        };
        if let Some(v) = &vdev {
            let args: Vec<(String, String)> = v
                .split(',')
                .skip(1)
                .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.trim().to_string(), v.trim().to_string())))
                .collect();
            let is_pcap = device.starts_with("net_pcap");
            for (k, val) in &args {
                match k.as_str() {
                    "rx_pcap" if is_pcap => plan.rx_files.push(PathBuf::from(val)),
                    "tx_pcap" if is_pcap => plan.tx_files.push(PathBuf::from(val)),
                    "infinite_rx" if is_pcap => plan.infinite = val == "1",
                    "rx_iface" | "iface" if is_pcap => plan.live_rx = true,
                    _ => {}
                }
            }
            if !is_pcap && !device.starts_with("net_null") {
                plan.live_rx = true; // memif, af_packet, ring, tap...: input never "ends"
            }
            // net_null generates packets forever, unless it has no rx (`no-rx=1`: an output only).
            let no_rx = args.iter().any(|(k, val)| k == "no-rx" && val == "1");
            if device.starts_with("net_null") && !no_rx {
                plan.infinite = true;
            }
        }
        if !replay {
            for f in &plan.rx_files {
                sources.push((i, f.clone()));
            }
        }
        plan.tx_merge = merge;
        plans.push(plan);
    }
    check_outputs(&plans, &sources)?;
    Ok(plans)
}

/// Refuses outputs that would destroy an input or another output.
fn check_outputs(plans: &[PortPlan], sources: &[(usize, PathBuf)]) -> Result<(), AppError> {
    let outputs: Vec<(usize, &PathBuf)> = plans
        .iter()
        .enumerate()
        .flat_map(|(i, p)| {
            p.tx_merge.as_ref().map(|(_, out)| out).into_iter().chain(p.tx_files.iter()).map(move |f| (i, f))
        })
        .filter(|(_, f)| f.as_path() != Path::new("/dev/null"))
        .collect();
    let mut seen: Vec<(usize, PathBuf)> = Vec::new();
    for (i, out) in outputs {
        let id = file_identity(out);
        if let Some((j, src)) = sources.iter().find(|(_, s)| file_identity(s) == id) {
            return Err(AppError::Usage(format!(
                "port {i} output {} is port {j}'s input {}: writing it would destroy the input",
                out.display(),
                src.display()
            )));
        }
        if let Some((j, _)) = seen.iter().find(|(j, other)| *other == id && *j != i) {
            return Err(AppError::Usage(format!(
                "port {i} output {} is also port {j}'s output: each port needs its own file",
                out.display()
            )));
        }
        seen.push((i, id));
    }
    Ok(())
}

/// A file's identity for comparing paths: the canonical path of the file, or of its directory
/// joined with its name when the file does not exist yet.
fn file_identity(f: &Path) -> PathBuf {
    if let Ok(c) = std::fs::canonicalize(f) {
        return c;
    }
    let dir = f.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    match (std::fs::canonicalize(dir), f.file_name()) {
        (Ok(d), Some(n)) => d.join(n),
        _ => f.to_path_buf(),
    }
}

/// Checks inputs exist and creates the directories of outputs; returns the total input records
/// (and read errors) of finite pcap inputs, or `None` if some input is live or infinite.
fn prepare_files(plans: &[PortPlan], loaded: &Loaded, opts: &Options) -> Result<Option<pcapfile::Input>, AppError> {
    let mut total = pcapfile::Input::default();
    let mut finite = true;
    let mut preload = 0u64;
    for p in plans {
        for f in &p.rx_files {
            let n = pcapfile::scan(f).map_err(|e| AppError::Other(format!("port {} input: {e}", p.name)))?;
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
        for f in &p.tx_files {
            if let Some(dir) = f.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)
                    .map_err(|e| AppError::Other(format!("port {} output {}: {e}", p.name, f.display())))?;
            }
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
    Ok(if finite { Some(total) } else { None })
}

/// Runs the appliance until its input ends or it is told to stop; returns the final stats.
pub fn run(opts: &Options) -> Result<Summary, AppError> {
    let loaded = config::load(&opts.config)?;
    let lcores = loaded.lcores();
    let workers_n = lcores.len();
    let plans = plan_ports(&loaded, opts, workers_n)?;
    let expected = prepare_files(&plans, &loaded, opts)?;

    let mut args = vec!["dpu".to_string()];
    args.extend(loaded.config.eal.args.iter().cloned());
    if opts.quiet {
        // `-q` prints only errors, DPDK's own messages too: the global level (which the config's
        // `--log-level '*:warning'` patterns leave alone) governs the start-up lines of libraries
        // such as telemetry's. Level 4 is RTE_LOG_ERR; EAL arguments after it still override it.
        args.extend(["--log-level".to_string(), "4".to_string()]);
    }
    args.extend(opts.eal_extra.iter().cloned());
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
    let result = run_with_eal(&eal, &loaded, opts, &plans, expected);
    drop(eal);
    let _ = std::fs::remove_dir_all(std::env::temp_dir().join(format!("dpu-{}", std::process::id())));
    result
}

fn run_with_eal(
    eal: &Eal,
    loaded: &Loaded,
    opts: &Options,
    plans: &[PortPlan],
    expected: Option<pcapfile::Input>,
) -> Result<Summary, AppError> {
    dpdk::mbuf::register_rx_timestamp()?;
    let cfg = &loaded.config;
    let lcores = loaded.lcores();
    let eal_workers = eal.worker_lcores();
    for (i, l) in lcores.iter().enumerate() {
        if !eal_workers.contains(&l.id) {
            // Without [[lcore]] tables the one worker is the default, which the user never wrote.
            let (key, which) = if cfg.lcores.is_empty() {
                ("lcore".to_string(), "without [[lcore]] tables the one worker is lcore")
            } else {
                (format!("lcore[{i}].id"), "lcore")
            };
            return Err(ConfigError::new(
                &opts.config,
                key,
                format!(
                    "{which} {}, which is not a worker lcore of EAL (EAL's worker lcores: {:?}; the main lcore is {}); add \
                     or change [[lcore]] tables, or -l/--lcores in [eal] args",
                    l.id,
                    eal_workers,
                    eal.main_lcore()
                ),
            )
            .into());
        }
    }
    let pool = Mempool::new("dpu_mbufs", cfg.mempool.mbufs, cfg.mempool.cache, cfg.mempool.data_room, -1)?;

    let mut ports = Vec::new();
    let mut port_ids = Vec::new();
    for (i, p) in plans.iter().enumerate() {
        let id =
            Port::by_name(&p.device).map_err(|e| DpdkError::new(format!("port {i} ({})", p.name), e.to_string()))?;
        let pc = &cfg.ports[i];
        let setup = PortSetup {
            rx_queues: loaded.rx_queues(i as u16),
            tx_queues: lcores.len() as u16,
            rx_desc: pc.rx_desc,
            tx_desc: pc.tx_desc,
            mtu: pc.mtu,
            mac: loaded.port_macs[i],
        };
        let port = Port::start(id, &p.name, &setup, &pool).map_err(|mut e| {
            if p.device.starts_with("net_pcap") && e.reason.contains("tx queues") {
                e.reason.push_str(
                    " (net_pcap has one rx queue per rx_pcap and one tx queue per tx_pcap of its vdev: repeat \
                     tx_pcap once per worker lcore, or replay with --rx/--tx, which does)",
                );
            }
            e
        })?;
        ports.push(port);
        port_ids.push(id);
    }

    let port_addrs: Vec<crate::agg::PortAddr> = ports
        .iter()
        .enumerate()
        .map(|(i, p)| crate::agg::PortAddr {
            mac: loaded.port_macs[i].unwrap_or_else(|| p.mac()),
            ipv4: loaded.port_ipv4[i],
            ipv6: loaded.port_ipv6[i],
        })
        .collect();
    let hz = dpdk::tsc_hz();
    let drain_tsc = hz / 1_000_000 * cfg.dataplane.tx_drain_us.max(1);
    let results: Vec<Arc<Mutex<Option<Datapath>>>> = lcores.iter().map(|_| Arc::new(Mutex::new(None))).collect();
    worker::QUIT.store(false, std::sync::atomic::Ordering::Relaxed);
    worker::STOPPED_RX.store(0, std::sync::atomic::Ordering::SeqCst);
    // One hand-off ring per worker when several share the collectives (software steering).
    let rings: Vec<crate::dpdk::ring::Ring> = if lcores.len() > 1 && !loaded.collectives.is_empty() {
        (0..lcores.len())
            .map(|w| crate::dpdk::ring::Ring::new(&format!("dpu_handoff{w}"), 8192))
            .collect::<Result<_, _>>()?
    } else {
        Vec::new()
    };
    let on_panic: Arc<dyn Fn() + Send + Sync> = Arc::new(worker::request_quit);
    // One NAK limiter for all workers: spec section 5's limit is per source, whichever worker
    // refuses it.
    let nak_limiter = crate::agg::nak::shared();
    let mut handles = Vec::new();
    let started = Instant::now();
    for (wi, l) in lcores.iter().enumerate() {
        let w = Worker {
            rx: l
                .rx
                .iter()
                .map(|q| RxQueue { port_id: port_ids[q.port as usize], port: q.port, queue: q.queue })
                .collect(),
            port_ids: port_ids.clone(),
            tx_queue: wi as u16,
            burst: cfg.dataplane.burst as usize,
            drain_tsc,
            tsc_per_us: (hz / 1_000_000).max(1),
            datapath: {
                let dp = Datapath::new(loaded.pipeline.clone(), ports.len() as u16, cfg.dataplane.gradient_udp_port)
                    .with_local_addresses(port_addrs.clone());
                if loaded.collectives.is_empty() {
                    dp
                } else {
                    dp.with_aggregator(
                        crate::agg::Aggregator::for_worker(
                            &loaded.collectives,
                            port_addrs.clone(),
                            cfg.dataplane.gradient_udp_port,
                            cfg.dataplane.appliance_qpn,
                            wi as u16,
                            lcores.len() as u16,
                        )
                        .with_nak_limiter(nak_limiter.clone()),
                    )
                }
            },
            pool,
            rings: rings.clone(),
            index: wi,
        };
        let slot = results[wi].clone();
        let h = lcore::launch(
            l.id,
            move || {
                let dp = w.run();
                *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(dp);
            },
            Some(on_panic.clone()),
        );
        match h {
            Ok(h) => handles.push(h),
            Err(e) => {
                worker::request_quit();
                for h in handles {
                    let _ = h.join();
                }
                return Err(e.into());
            }
        }
    }

    if !opts.quiet && expected.is_none() {
        // Live or endless input: say when the ports are forwarding (scripts wait for this line).
        let names: Vec<&str> = ports.iter().map(|p| p.name()).collect();
        println!(
            "dpu: running on {} worker lcore(s), ports [{}]; stop with Ctrl-C (SIGINT) or SIGTERM",
            lcores.len(),
            names.join(", ")
        );
        let _ = std::io::Write::flush(&mut std::io::stdout());
    }
    let input_short =
        monitor(&ports, expected, opts.duration, Duration::from_millis(cfg.dataplane.replay_idle_ms), opts.quiet);
    worker::request_quit();
    let seconds = started.elapsed().as_secs_f64();
    let mut panics = Vec::new();
    for h in handles {
        let lc = h.lcore();
        if let Err(msg) = h.join() {
            panics.push(format!("worker lcore {lc} panicked: {msg}"));
        }
    }

    let mut total = Counters::new(ports.len() as u16);
    let mut tables: Vec<EntrySummary> = Vec::new();
    let mut pipelines = Vec::new();
    let mut agg = crate::agg::AggCounters::default();
    for r in &results {
        if let Some(dp) = r.lock().unwrap_or_else(|e| e.into_inner()).take() {
            total.add(&dp.counters);
            if let Some(a) = &dp.agg {
                agg.add(&a.counters);
            }
            pipelines.push(dp.pipeline);
        }
    }
    if let Some(first) = pipelines.first() {
        for (ti, t) in first.tables.iter().enumerate() {
            for e in 0..=t.len() {
                let mut c = Counter::default();
                for p in &pipelines {
                    let tt = &p.tables[ti];
                    c.add(if e < t.len() { tt.counter(e) } else { tt.miss_counter() });
                }
                tables.push(EntrySummary { table: t.name.clone(), entry: (e < t.len()).then_some(e), counter: c });
            }
        }
    }
    let counters = crate::table::Pipeline::sum_counters(&pipelines)
        .into_iter()
        .map(|(name, counter)| CounterSummary { name, counter })
        .collect();
    let ethdev: Vec<PortStats> = ports.iter().map(|p| p.stats()).collect();
    let xstats: Vec<Vec<(String, u64)>> =
        ports.iter().map(|p| p.xstats().into_iter().filter(|(_, v)| *v != 0).collect()).collect();
    for p in ports.iter_mut() {
        p.stop()?;
    }
    drop(ports); // rte_eth_dev_close: frees the rx rings' mbufs
    for p in plans {
        if let Some((parts, out)) = &p.tx_merge {
            let refs: Vec<&Path> = parts.iter().map(|p| p.as_path()).collect();
            pcapfile::merge(&refs, out).map_err(AppError::Other)?;
            for part in parts {
                let _ = std::fs::remove_file(part);
            }
        }
    }
    if !panics.is_empty() {
        return Err(AppError::Other(panics.join("; ")));
    }
    let summary = Summary {
        ports: plans
            .iter()
            .enumerate()
            .map(|(i, p)| PortSummary {
                index: i,
                name: p.name.clone(),
                device: p.device.clone(),
                workers: total.ports[i],
                ethdev: ethdev[i],
                xstats: xstats[i].clone(),
            })
            .collect(),
        drops: crate::stats::Reason::ALL.iter().map(|r| (r.name().to_string(), total.dropped(*r))).collect(),
        tables,
        counters,
        input_records: expected.map(|i| i.records),
        input_short,
        input_errors: expected.map(|i| i.errors),
        seconds,
        mbufs_in_use_after: pool.in_use(),
        workers: lcores.len(),
        aggregation: agg,
        collectives: loaded.collectives.len(),
        neighbor_replies: total.neighbor_replies,
    };
    Ok(summary)
}

/// Waits on the main lcore until a stop is due. Returns true if a replay's input ended short
/// (the idle fallback fired before every record arrived).
///
/// A replay is over once net_pcap has consumed every record and error `expected` counts: each
/// record is a packet received (`ipackets`), a record read without an mbuf (`rx_nombuf`) or one
/// no mbuf chain could hold (`ierrors`); each read error of libpcap is one `ierrors`.
fn monitor(
    ports: &[Port],
    expected: Option<pcapfile::Input>,
    duration: Option<Duration>,
    idle: Duration,
    quiet: bool,
) -> bool {
    let start = Instant::now();
    let mut last_seen = 0u64;
    let mut last_change = Instant::now();
    loop {
        if worker::quitting() {
            return false;
        }
        if duration.is_some_and(|d| start.elapsed() >= d) {
            return false;
        }
        if let Some(input) = expected {
            let want = input.records + input.errors;
            let seen: u64 = ports
                .iter()
                .map(|p| {
                    let s = p.stats();
                    s.ipackets + s.rx_nombuf + s.ierrors
                })
                .sum();
            if seen >= want {
                return false;
            }
            if seen != last_seen {
                last_seen = seen;
                last_change = Instant::now();
            } else if last_change.elapsed() >= idle {
                if !quiet {
                    eprintln!(
                        "dpu: input ended short: {seen} of {want} records (and read errors) consumed after {} ms without input",
                        idle.as_millis()
                    );
                }
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

impl Summary {
    /// The human-readable report printed at the end of a run.
    pub fn report(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(s, "== dpu: final stats ({} worker(s), {:.3} s) ==", self.workers, self.seconds);
        let _ = writeln!(
            s,
            "{:<6} {:<14} {:>12} {:>12} {:>12} {:>12} {:>10}",
            "port", "name", "rx pkts", "rx bytes", "tx pkts", "tx bytes", "rx errors"
        );
        for p in &self.ports {
            let _ = writeln!(
                s,
                "{:<6} {:<14} {:>12} {:>12} {:>12} {:>12} {:>10}",
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
        if self.neighbor_replies > 0 {
            let _ = writeln!(s, "ARP replies and neighbour advertisements sent: {}", self.neighbor_replies);
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
        if self.collectives > 0 {
            let a = &self.aggregation;
            let _ = writeln!(
                s,
                "aggregation: {} contributions folded, {} rounds completed, {} results sent, {} resends, {} NAKs ({} suppressed), {} slot timeouts, {} probes ({} statuses sent)",
                a.folded, a.completed, a.results, a.resends, a.naks, a.naks_suppressed, a.slot_timeouts, a.probes, a.statuses
            );
            if self.workers > 1 {
                let _ = writeln!(
                    s,
                    "aggregation: {} packets handed off to the worker owning their collective",
                    a.handed_off
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
        let _ = writeln!(s, "mbufs in use after shutdown: {}", self.mbufs_in_use_after);
        s
    }
}
