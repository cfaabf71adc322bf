//! Start-up of a run inside EAL: the worker lcores checked against EAL's, the mbuf pool sized
//! and created, every port configured and started, the hand-off rings made and every worker
//! launched on its lcore. All or nothing: the first failure is returned.

use super::{plan_pool, pmd_held, AppError, Options, PortPlan, SchedMbufs};
use crate::agg::nak::SharedNakLimiter;
use crate::agg::PortAddr;
use crate::config::memory::{class_chain_mbufs, class_mbufs_floor};
use crate::config::{ConfigError, LcoreConfig, Loaded};
use crate::datapath::Datapath;
use crate::dpdk::lcore::{self, LcoreHandle};
use crate::dpdk::ring::Ring;
use crate::dpdk::{self, port::PortSetup, DpdkError, Eal, Mempool, Port};
use crate::sched::{ClassMap, PortConfig};
use crate::stop;
use crate::worker::{self, RxQueue, Worker};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Where a worker leaves its datapath (counters and tables) and its poll loop's counters when
/// it stops.
pub(super) type ResultSlot = Arc<Mutex<Option<(Datapath<crate::dpdk::Mbuf>, crate::live::LoopStats)>>>;

/// The launched workers.
pub(super) struct Running {
    /// One per worker, in worker order.
    pub handles: Vec<LcoreHandle>,
    /// Each worker's datapath once it stopped, by worker index.
    pub results: Vec<ResultSlot>,
    /// When the workers were launched.
    pub started: Instant,
    /// Each worker's mailbox for pipeline updates ([`crate::control`]), by worker index.
    pub mailboxes: Vec<Arc<crate::control::Mailbox>>,
    /// What the workers' aggregators were built with, for the control plane's collective sets.
    pub agg: crate::control::AggSetup,
}

/// Checks that every configured worker lcore is a worker lcore of EAL.
pub(super) fn check_lcores(eal: &Eal, loaded: &Loaded, opts: &Options) -> Result<(), AppError> {
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
    Ok(())
}

/// The egress schedulers' configurations with each class's packet capacity fitted to the pool
/// ([`plan_pool`]), by port.
pub(super) type Schedulers = Vec<Option<(PortConfig, ClassMap)>>;

/// Sizes the mbuf pool's share of the hand-off rings and of the egress schedulers' rings and
/// queues, and creates the pool. Returns it, the slots of each hand-off ring when the run has
/// rings (several workers sharing collectives), and the schedulers with their classes' packet
/// capacities cut to what the pool can hold.
pub(super) fn create_pool(
    loaded: &Loaded,
    opts: &Options,
    plans: &[PortPlan],
) -> Result<(Mempool, Option<u32>, Schedulers), AppError> {
    let cfg = &loaded.config;
    let lcores = loaded.lcores();
    // One hand-off ring per worker when several share the collectives (software steering); the
    // rings, the workers' bursts and tx buffers, and the PMDs' descriptors must all fit the pool.
    let with_rings = lcores.len() > 1 && !loaded.collectives.is_empty();
    // Zero-copy results are chains of up to 3 mbufs (a header, the shared payload, the RoCEv2
    // ICRC; whatever the collectives at start: RoCEv2 ones may be added at runtime), each
    // keeping its body's mbuf out of the pool too until it is freed.
    let (made, chain) = if cfg.dataplane.zero_copy_results { (4, 3) } else { (1, 1) };
    // A port whose MTU lets frames longer than one mbuf in receives them as chains: every
    // frame a worker holds, and every transit frame queued or in a ring, may be that long.
    let mbuf_frame = cfg.mempool.frame_bytes();
    let received = cfg
        .ports
        .iter()
        .map(|p| u64::from(crate::config::qos::port_max_frame(mbuf_frame, p.mtu).div_ceil(mbuf_frame.max(1))))
        .max()
        .unwrap_or(1)
        .max(1);
    let segs = worker::FrameMbufs { made, received };
    let descriptors: u64 = plans
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let pc = &cfg.ports[i];
            pmd_held(&p.device, loaded.rx_queues(i as u16), pc.rx_desc, lcores.len() as u16, pc.tx_desc, chain)
        })
        .sum();
    // One scheduler per shaped port (its owner's), and a ring to it from every other worker.
    let shaped: Vec<&PortConfig> = loaded.qos.iter().flatten().map(|(c, _)| c).collect();
    // Per class of every shaped port, in port and class order: its packet capacity, its floor
    // in full mbuf frames ([`class_mbufs_floor`]) and its chains' extra mbufs.
    let per_class: Vec<(u64, u64, u64)> = shaped
        .iter()
        .flat_map(|c| {
            c.classes.iter().map(|k| {
                (
                    u64::from(k.capacity_pkts),
                    class_mbufs_floor(k.capacity_bytes, mbuf_frame),
                    class_chain_mbufs(c.max_frame_bytes, k.capacity_bytes, mbuf_frame),
                )
            })
        })
        .collect();
    let sched = SchedMbufs {
        ring_mbufs: (shaped.len() * lcores.len().saturating_sub(1)) as u64
            * u64::from(worker::QOS_RING_SLOTS - 1)
            * segs.any(),
        // In mbufs: a queued zero-copy result holds up to `made` of them, and on a jumbo port
        // the chains of the frames a class holds add at most one mbuf per full mbuf frame of
        // its capacity_bytes ([`class_chain_mbufs`]).
        demand: per_class.iter().map(|&(pkts, _, chain)| pkts.saturating_mul(made).saturating_add(chain)).collect(),
        floor: per_class.iter().map(|&(_, floor, chain)| floor.saturating_mul(made).saturating_add(chain)).collect(),
        keys: loaded
            .qos
            .iter()
            .enumerate()
            .filter_map(|(p, q)| q.as_ref().map(|(c, _)| (p, c.classes.len())))
            .flat_map(|(p, n)| (0..n).map(move |k| format!("port[{p}].qos.class[{k}]")))
            .collect(),
    };
    let (ring_slots, fitted) = plan_pool(
        cfg.mempool.mbufs,
        cfg.mempool.cache,
        cfg.dataplane.burst as usize,
        plans.len(),
        lcores.len(),
        with_rings,
        descriptors,
        &sched,
        segs,
    )
    .map_err(|e| ConfigError::new(&opts.config, "mempool.mbufs", e))?;
    let mut fitted = fitted.into_iter().zip(&per_class);
    let mut schedulers = loaded.qos.clone();
    for (c, _) in schedulers.iter_mut().flatten() {
        for k in &mut c.classes {
            if let Some((n, &(_, _, chain))) = fitted.next() {
                k.capacity_pkts = (n.saturating_sub(chain) / made).max(1) as u32;
            }
        }
    }
    let pool = Mempool::new("dpu_mbufs", cfg.mempool.mbufs, cfg.mempool.cache, cfg.mempool.data_room, -1)?;
    Ok((pool, with_rings.then_some(ring_slots), schedulers))
}

/// Configures and starts every planned port on `pool` (one tx queue per worker), in port order.
pub(super) fn start_ports(
    loaded: &Loaded,
    opts: &Options,
    plans: &[PortPlan],
    pool: &Mempool,
) -> Result<Vec<Port>, AppError> {
    let cfg = &loaded.config;
    let lcores = loaded.lcores();
    let mut ports = Vec::new();
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
        let hint = |mut e: DpdkError| {
            if p.device.starts_with("net_pcap") && e.reason.contains("tx queues") {
                e.reason.push_str(
                    " (net_pcap has one rx queue per rx_pcap and one tx queue per tx_pcap of its vdev: repeat \
                     tx_pcap once per worker lcore, or replay with --rx/--tx, which does)",
                );
            }
            e
        };
        let port = if p.is_memif_client() {
            // A memif client connects when its port starts: with no server yet, the start fails
            // (EPERM). That is an outage like a server's departure: the port waits, paused, and
            // the monitor restarts it every second until a server answers.
            let (port, failed) = Port::start_or_wait(id, &p.name, &setup, pool).map_err(hint)?;
            // Any other failure of the start is the device's, not an absent server: fatal.
            if let Some(e) = failed.as_ref().filter(|e| !e.is_start_eperm()) {
                return Err(DpdkError::new(e.what.clone(), e.reason.clone()).into());
            }
            if let (Some(e), false) = (failed, opts.quiet) {
                eprintln!(
                    "dpu: port {}: no memif server answers on {} yet ({e}); the workers skip the port, restarted \
                     every {} s until it connects",
                    p.name,
                    p.memif_socket(),
                    super::monitor::RECONNECT_INTERVAL.as_secs()
                );
            }
            port
        } else {
            Port::start(id, &p.name, &setup, pool).map_err(hint)?
        };
        // Zero-copy results are chains: a device whose tx path may send only the first segment
        // (a NIC's simple or vector tx path without MULTI_SEGS) would truncate them.
        if cfg.dataplane.zero_copy_results
            && !port.tx_multi_segs()
            && !CHAIN_VDEVS.iter().any(|d| p.device.starts_with(d))
        {
            return Err(ConfigError::new(
                &opts.config,
                "dataplane.zero_copy_results",
                format!(
                    "port {i} ({}): device {} does not offer chained mbufs on tx (RTE_ETH_TX_OFFLOAD_MULTI_SEGS), \
                     which zero-copy results are: set dataplane.zero_copy_results = false",
                    p.name, p.device
                ),
            )
            .into());
        }
        ports.push(port);
    }
    Ok(ports)
}

/// Software vdevs whose tx takes mbuf chains whatever they list in `tx_offload_capa`: they copy
/// (net_pcap, net_memif, net_af_packet), pass (net_ring) or free (net_null) every segment.
const CHAIN_VDEVS: [&str; 5] = ["net_pcap", "net_memif", "net_af_packet", "net_ring", "net_null"];

/// What every worker's aggregator answers from, as the configuration and the run set it.
fn agg_context(cfg: &crate::config::Config, shared: &Shared) -> crate::agg::context::AggContext {
    crate::agg::context::AggContext {
        ports: shared.port_addrs.clone(),
        gradient_udp_port: cfg.dataplane.gradient_udp_port,
        appliance_qpn: cfg.dataplane.appliance_qpn,
        workers: shared.workers as u16,
        shard: cfg.dataplane.shard_collectives,
        zero_copy_results: cfg.dataplane.zero_copy_results,
    }
}

/// What every worker shares.
struct Shared {
    /// DPDK port id of each port index.
    port_ids: Vec<u16>,
    /// The appliance's addresses on each port.
    port_addrs: Vec<PortAddr>,
    /// TSC frequency (cycles per second).
    hz: u64,
    /// Tx drain period (TSC cycles).
    drain_tsc: u64,
    /// Workers in the run.
    workers: usize,
    /// The pool new frames (copies) come from.
    pool: Mempool,
    /// Every worker's hand-off ring (empty without rings).
    rings: Vec<Ring>,
    /// The worker owning each port's egress scheduler ([`worker::scheduler_owners`]).
    owners: Vec<Option<usize>>,
    /// `qos_rings[port][w]`: worker `w`'s ring to the owner of shaped port `port` (`None` for
    /// the owner itself, an unshaped port, or a single worker).
    qos_rings: Vec<Vec<Option<Ring>>>,
    /// The egress schedulers, their queues fitted to the pool.
    schedulers: Schedulers,
    /// Published capture clocks of a lockstep replay ([`Worker::lockstep`]).
    lockstep: Option<Arc<worker::Lockstep>>,
    /// One NAK limiter for all workers: spec section 5's limit is per source, whichever worker
    /// refuses it.
    nak_limiter: Arc<SharedNakLimiter>,
    /// Finite pcap inputs: the egress schedulers run on capture time.
    replay: bool,
}

/// Makes the hand-off rings (`ring_slots` slots each, if any) and the rings to the owners of the
/// shaped ports' `schedulers`, and launches one worker per configured lcore. On a failed
/// launch, stops and joins those already launched. `replay`: finite pcap inputs, whose capture
/// times are the egress schedulers' clock (else the TSC).
pub(super) fn launch_workers(
    loaded: &Loaded,
    ports: &[Port],
    pool: Mempool,
    ring_slots: Option<u32>,
    schedulers: Schedulers,
    replay: bool,
) -> Result<Running, AppError> {
    let cfg = &loaded.config;
    let lcores = loaded.lcores();
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
    // tx_drain_us is at most MAX_TX_DRAIN_US (the load's check): no overflow at any TSC rate
    // below 2^44 Hz; saturating besides.
    let drain_tsc = (hz / 1_000_000).saturating_mul(cfg.dataplane.tx_drain_us.max(1));
    let results: Vec<ResultSlot> = lcores.iter().map(|_| Arc::new(Mutex::new(None))).collect();
    worker::STOPPED_RX.store(0, std::sync::atomic::Ordering::SeqCst);
    worker::DRAINED_HAND_OFFS.store(0, std::sync::atomic::Ordering::SeqCst);
    // One lcore owns each shaped port's scheduler; every other worker reaches it over a ring
    // of its own (single producer, single consumer).
    let workers = lcores.len();
    let owners = worker::scheduler_owners(&loaded.qos, workers);
    let mut qos_rings: Vec<Vec<Option<Ring>>> = Vec::new();
    for (p, owner) in owners.iter().enumerate() {
        let mut per_worker = Vec::new();
        for w in 0..workers {
            per_worker.push(match owner {
                Some(o) if *o != w => Some(Ring::new_spsc(&format!("dpu_qos{p}_{w}"), worker::QOS_RING_SLOTS)?),
                _ => None,
            });
        }
        qos_rings.push(per_worker);
    }
    let shared_sched = qos_rings.iter().flatten().any(Option::is_some);
    let lockstep = (replay && shared_sched).then(|| Arc::new(worker::Lockstep::new(workers)));
    let rings: Vec<Ring> = match ring_slots {
        Some(slots) => {
            (0..lcores.len()).map(|w| Ring::new(&format!("dpu_handoff{w}"), slots)).collect::<Result<_, _>>()?
        }
        None => Vec::new(),
    };
    let shared = Shared {
        port_ids: ports.iter().map(Port::id).collect(),
        port_addrs,
        hz,
        drain_tsc,
        workers: lcores.len(),
        pool,
        rings,
        owners,
        qos_rings,
        schedulers,
        lockstep,
        nak_limiter: crate::agg::nak::shared(),
        replay,
    };
    let on_panic: Arc<dyn Fn() + Send + Sync> = Arc::new(stop::request_quit);
    let mut handles = Vec::new();
    let mut workers: Vec<Worker> =
        lcores.iter().enumerate().map(|(wi, l)| make_worker(loaded, &shared, wi, l)).collect();
    // Every worker's walk has the same shape: worker 0's gives the names.
    let names = workers.first().map(|w| crate::live::names_of(&w.datapath, lcores.len())).unwrap_or_default();
    let board = Arc::new(
        crate::live::Board::new(
            names,
            workers.len(),
            ports.iter().map(|p| p.name().to_string()).collect(),
            loaded.pipeline.tables.iter().map(|t| t.name.clone()).collect(),
        )
        .with_entry_keys(loaded.config.tables.iter().map(|t| t.entry_labels()).collect()),
    );
    let mailboxes: Vec<Arc<crate::control::Mailbox>> = workers.iter().map(|_| Arc::default()).collect();
    for (wi, w) in workers.iter_mut().enumerate() {
        w.live = Some(board.publisher(wi, hz / 1000 * crate::live::PUBLISH_MS));
        w.control = Some(mailboxes[wi].clone());
    }
    crate::live::set_current(Some(board.clone()));
    let started = Instant::now();
    for ((wi, l), w) in lcores.iter().enumerate().zip(workers) {
        let slot = results[wi].clone();
        let h = lcore::launch(
            l.id,
            move || {
                let done = w.run();
                *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(done);
            },
            Some(on_panic.clone()),
        );
        match h {
            Ok(h) => handles.push(h),
            Err(e) => {
                stop::request_quit();
                for h in handles {
                    let _ = h.join();
                }
                return Err(e.into());
            }
        }
    }
    let agg = crate::control::AggSetup {
        context: agg_context(cfg, &shared),
        naks: shared.nak_limiter.clone(),
        hand_offs: !shared.rings.is_empty(),
    };
    Ok(Running { handles, results, started, mailboxes, agg })
}

/// Worker `wi` of the run, polling lcore `l`'s rx queues.
fn make_worker(loaded: &Loaded, shared: &Shared, wi: usize, l: &LcoreConfig) -> Worker {
    let cfg = &loaded.config;
    let owned: Vec<bool> = shared.owners.iter().map(|o| *o == Some(wi)).collect();
    let qos_in = shared
        .qos_rings
        .iter()
        .enumerate()
        .filter(|(p, _)| owned[*p])
        .flat_map(|(p, rings)| rings.iter().flatten().map(move |r| (p as u16, *r)))
        .collect();
    Worker {
        rx: l
            .rx
            .iter()
            .map(|q| RxQueue { port_id: shared.port_ids[q.port as usize], port: q.port, queue: q.queue })
            .collect(),
        port_ids: shared.port_ids.clone(),
        tx_queue: wi as u16,
        burst: cfg.dataplane.burst as usize,
        drain_tsc: shared.drain_tsc,
        tsc_per_us: (shared.hz / 1_000_000).max(1),
        datapath: {
            let dp =
                Datapath::new(loaded.pipeline.clone(), shared.port_ids.len() as u16, cfg.dataplane.gradient_udp_port)
                    .with_local_addresses(shared.port_addrs.clone())
                    .with_egress_owned(&shared.schedulers, &owned)
                    .expect("the configuration's schedulers were built once when it was validated")
                    .with_capture_clock(shared.replay)
                    // A shaped port's scheduler applies its MTU's limit (`port_max_frame`).
                    .with_egress_limits(
                        &cfg.ports
                            .iter()
                            .map(|p| {
                                let limit = p.mtu.map(|m| u32::from(m) + crate::config::qos::MTU_FRAME_OVERHEAD);
                                if p.qos.is_some() {
                                    None
                                } else {
                                    limit
                                }
                            })
                            .collect::<Vec<_>>(),
                    )
                    .with_checks(if cfg.dataplane.verify_transit {
                        crate::parse::Checks::All
                    } else {
                        crate::parse::Checks::Router
                    });
            // Every worker has an aggregator, with no collective too: collectives may be added
            // while the appliance runs ([`crate::control`]). Without one it takes no packet.
            dp.with_aggregator(
                crate::agg::Aggregator::with_context(&agg_context(cfg, shared), &loaded.collectives, wi as u16)
                    .with_nak_limiter(shared.nak_limiter.clone()),
            )
        },
        pool: shared.pool,
        rings: shared.rings.clone(),
        index: wi,
        workers: shared.workers,
        qos_out: shared.qos_rings.iter().map(|rings| rings[wi]).collect(),
        qos_in,
        qos_shared: shared.qos_rings.iter().flatten().any(Option::is_some),
        lockstep: shared.lockstep.clone(),
        live: None,
        control: None,
    }
}
