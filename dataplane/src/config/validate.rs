//! [`validate`]: the checks of a parsed [`Config`], one function per part of the file (mempool,
//! dataplane, ports, lcores, tables, collectives), run in a fixed order: the first fault found
//! is the one reported, naming the file, the key and what was expected.

use super::{
    collective, d_cache, memory, table, Config, ConfigError, DataplaneConfig, LcoreConfig, Loaded, MempoolConfig,
};
use super::{PortConfig, RxQueueConfig, DEFAULT_MEMORY_LIMIT_MB, MBUF_HEADROOM};
use crate::agg::collective::Collective;
use crate::datapath::MAX_BURST;
use crate::wire::EthernetAddress;
use std::path::Path;

/// The smallest MTU a port may be set to (bytes): DPDK's `RTE_ETHER_MIN_MTU`, IPv4's minimum
/// (RFC 791).
const MIN_MTU: u16 = 68;

/// Per port, the addresses its `[[port]]` table gives the appliance, parsed.
struct PortAddresses {
    macs: Vec<Option<EthernetAddress>>,
    ipv4: Vec<Option<[u8; 4]>>,
    ipv6: Vec<Option<[u8; 16]>>,
}

/// One port's MAC, IPv4 and IPv6 addresses, as configured.
type Addresses = (Option<EthernetAddress>, Option<[u8; 4]>, Option<[u8; 16]>);

/// Validates a parsed configuration and builds what the appliance runs from it.
pub(super) fn validate(config: Config, path: &Path) -> Result<Loaded, ConfigError> {
    check_mempool(&config.mempool, path)?;
    check_dataplane(&config.dataplane, path)?;
    let addrs = check_ports(&config.ports, path)?;
    let nports = config.ports.len();
    let seen = check_lcores(&config.lcores, nports, path)?;
    check_inputs_polled(&config, &seen, path)?;
    let pipeline = table::build_pipeline(
        &config.tables,
        &config.groups,
        &config.meters,
        nports as u16,
        !config.collectives.is_empty(),
        path,
    )?;
    let err = |key: String, msg: String| ConfigError::new(path, key, msg);
    if config.dataplane.appliance_qpn > 0xff_ffff {
        return Err(err(
            "dataplane.appliance_qpn".into(),
            format!("expected a 24-bit QP number, found {}", config.dataplane.appliance_qpn),
        ));
    }
    let collectives = collectives(&config, &addrs.ipv4, &addrs.ipv6, path)?;
    let mbuf_frame = config.mempool.frame_bytes();
    let qos = config
        .ports
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let max_frame = super::qos::port_max_frame(mbuf_frame, p.mtu);
            p.qos
                .as_ref()
                .map(|q| super::qos::check(q, i, max_frame, mbuf_frame, config.mempool.mbufs, path))
                .transpose()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let PortAddresses { macs: port_macs, ipv4: port_ipv4, ipv6: port_ipv6 } = addrs;
    let loaded = Loaded { config, pipeline, port_macs, port_ipv4, port_ipv6, collectives, qos };
    check_queue_owners(&loaded, path)?;
    Ok(loaded)
}

/// `[mempool]`: enough mbufs, a cache DPDK accepts, a data room that holds a frame.
fn check_mempool(mp: &MempoolConfig, path: &Path) -> Result<(), ConfigError> {
    let err = |key: String, msg: String| ConfigError::new(path, key, msg);
    if mp.mbufs < 64 {
        return Err(err("mempool.mbufs".into(), format!("expected at least 64 mbufs, found {}", mp.mbufs)));
    }
    if mp.cache > 512 || mp.cache as u64 * 3 > mp.mbufs as u64 * 2 {
        return Err(err(
            "mempool.cache".into(),
            format!(
                "expected at most 512 and at most 2/3 of mempool.mbufs ({}), found {}{}",
                mp.mbufs,
                mp.cache,
                if mp.cache == d_cache() { " (the default): set a smaller cache or more mbufs" } else { "" }
            ),
        ));
    }
    if mp.data_room < 128 + 64 {
        return Err(err(
            "mempool.data_room".into(),
            format!("expected at least 192 bytes (128 of headroom plus a frame), found {}", mp.data_room),
        ));
    }
    Ok(())
}

/// `[dataplane]`: burst, gradient UDP port, replay idle time.
fn check_dataplane(dp: &DataplaneConfig, path: &Path) -> Result<(), ConfigError> {
    let err = |key: String, msg: String| ConfigError::new(path, key, msg);
    if dp.burst == 0 || dp.burst as usize > MAX_BURST {
        return Err(err("dataplane.burst".into(), format!("expected 1..={MAX_BURST} packets, found {}", dp.burst)));
    }
    if dp.gradient_udp_port == crate::wire::bth::ROCEV2_UDP_PORT {
        // Datagrams to 4791 are parsed as RoCEv2 (IANA; spec section 1): a UDP-carriage
        // contribution on that port would never reach the aggregator.
        return Err(err(
            "dataplane.gradient_udp_port".into(),
            format!(
                "expected a port other than {} (RoCEv2's, which the RoCEv2 carriage uses), found {}",
                crate::wire::bth::ROCEV2_UDP_PORT,
                dp.gradient_udp_port
            ),
        ));
    }
    if dp.gradient_udp_port == 0 {
        return Err(err("dataplane.gradient_udp_port".into(), "expected a UDP port in 1..=65535, found 0".into()));
    }
    if dp.tx_drain_us > super::MAX_TX_DRAIN_US {
        return Err(err(
            "dataplane.tx_drain_us".into(),
            format!("expected at most {} µs (1 s), found {}", super::MAX_TX_DRAIN_US, dp.tx_drain_us),
        ));
    }
    if dp.stats_interval_ms != 0 && dp.stats_interval_ms < super::LIVE_PUBLISH_MS {
        // The workers publish their counters every LIVE_PUBLISH_MS: a line more often would
        // show rates of 0 between publications and bursts of the whole period's packets.
        return Err(err(
            "dataplane.stats_interval_ms".into(),
            format!(
                "expected 0 (no stats line) or at least {} ms (how often the workers publish their counters), found {}",
                super::LIVE_PUBLISH_MS,
                dp.stats_interval_ms
            ),
        ));
    }
    if let Some(limit) = dp.memory_limit_mb.filter(|l| *l > memory::MAX_MIB) {
        return Err(err(
            "dataplane.memory_limit_mb".into(),
            format!("expected at most {} MiB (16 EiB, what a 64-bit byte count holds), found {limit}", memory::MAX_MIB),
        ));
    }
    if dp.replay_idle_ms == 0 {
        // The fallback end of a replay whose input ends short: 0 would end every replay at once.
        return Err(err("dataplane.replay_idle_ms".into(), "expected at least 1 ms, found 0".into()));
    }
    Ok(())
}

/// `[[port]]`: at least one; each a `vdev` or a `pci` address, device and name unique,
/// descriptors, and the appliance's MAC, IPv4 and IPv6 addresses, parsed.
fn check_ports(ports: &[PortConfig], path: &Path) -> Result<PortAddresses, ConfigError> {
    let err = |key: String, msg: String| ConfigError::new(path, key, msg);
    if ports.is_empty() {
        return Err(err("port".into(), "expected at least one [[port]] table".into()));
    }
    let mut labels: Vec<&str> = Vec::new();
    let mut names = Vec::new();
    let mut addrs = PortAddresses { macs: Vec::new(), ipv4: Vec::new(), ipv6: Vec::new() };
    for (i, p) in ports.iter().enumerate() {
        let key = format!("port[{i}]");
        match (&p.vdev, &p.pci) {
            (None, None) => {
                return Err(err(
                    key,
                    "expected `vdev` (like \"net_pcap0,rx_pcap=in.pcap,tx_pcap=out.pcap\") or `pci` (like \"0000:3b:00.0\")".into(),
                ))
            }
            (Some(_), Some(_)) => return Err(err(key, "expected one of `vdev` or `pci`, found both".into())),
            _ => {}
        }
        let dev = p.device_name().to_string();
        if dev.is_empty() {
            return Err(err(format!("{key}.vdev"), "expected a device name before the first comma".into()));
        }
        if let Some(pci) = &p.pci {
            if !looks_like_pci(pci) {
                return Err(err(
                    format!("{key}.pci"),
                    format!("expected a PCI address like 0000:3b:00.0, found {pci:?}"),
                ));
            }
        }
        if names.contains(&dev) {
            return Err(err(key, format!("device {dev:?} is configured twice")));
        }
        names.push(dev);
        if let Some(label) = &p.name {
            if let Some(why) = super::label_error(label) {
                return Err(err(format!("{key}.name"), why));
            }
            if labels.iter().any(|l| super::label_key(l) == super::label_key(label)) {
                return Err(err(
                    format!("{key}.name"),
                    format!("port name {label:?} is used twice ('-' and '_' are one)"),
                ));
            }
            labels.push(label);
        }
        if p.rx_desc == 0 || p.tx_desc == 0 {
            return Err(err(key, "expected rx_desc and tx_desc above 0".into()));
        }
        if let Some(mtu) = p.mtu.filter(|m| *m < MIN_MTU) {
            // DPDK refuses it at start (rte_eth_dev_configure: EINVAL, naming no key).
            return Err(err(
                format!("{key}.mtu"),
                format!("expected at least {MIN_MTU} bytes (RTE_ETHER_MIN_MTU, IPv4's minimum), found {mtu}"),
            ));
        }
        let (mac, v4, v6) = port_addresses(&key, p, path)?;
        addrs.macs.push(mac);
        addrs.ipv4.push(v4);
        addrs.ipv6.push(v6);
    }
    Ok(addrs)
}

/// A `[[port]]` table's `mac`, `ipv4` and `ipv6` (`key`: the table's key, like `port[0]`),
/// parsed: unicast addresses only.
fn port_addresses(key: &str, p: &PortConfig, path: &Path) -> Result<Addresses, ConfigError> {
    let err = |key: String, msg: String| ConfigError::new(path, key, msg);
    // The source of the appliance's own frames and the port's own address.
    let mac = p.mac.as_deref().map(|m| host_mac(m).map_err(|e| err(format!("{key}.mac"), e))).transpose()?;
    let v4 = match &p.ipv4 {
        None => None,
        Some(a) => Some(
            a.parse::<std::net::Ipv4Addr>()
                .ok()
                .filter(|v| !v.is_unspecified() && !v.is_multicast() && !v.is_broadcast())
                .ok_or_else(|| {
                    err(format!("{key}.ipv4"), format!("expected a unicast IPv4 address like 10.0.0.254, found {a:?}"))
                })?
                .octets(),
        ),
    };
    let v6 = match &p.ipv6 {
        None => None,
        Some(a) => Some(
            a.parse::<std::net::Ipv6Addr>()
                .ok()
                .filter(|v| !v.is_unspecified() && !v.is_multicast())
                .ok_or_else(|| {
                    err(format!("{key}.ipv6"), format!("expected a unicast IPv6 address like fd00::fe, found {a:?}"))
                })?
                .octets(),
        ),
    };
    Ok((mac, v4, v6))
}

/// `[[lcore]]`: unique ids, each polling at least one rx queue of an existing port, each queue
/// by one lcore. Returns the polled queues.
fn check_lcores(lcores: &[LcoreConfig], nports: usize, path: &Path) -> Result<Vec<RxQueueConfig>, ConfigError> {
    let err = |key: String, msg: String| ConfigError::new(path, key, msg);
    let mut seen = Vec::new();
    let mut ids = Vec::new();
    for (i, l) in lcores.iter().enumerate() {
        if ids.contains(&l.id) {
            return Err(err(format!("lcore[{i}].id"), format!("lcore {} is configured twice", l.id)));
        }
        ids.push(l.id);
        if l.rx.is_empty() {
            return Err(err(format!("lcore[{i}].rx"), "expected at least one { port, queue }".into()));
        }
        for (j, q) in l.rx.iter().enumerate() {
            if q.port as usize >= nports {
                return Err(err(
                    format!("lcore[{i}].rx[{j}].port"),
                    format!("expected a port index below {nports} (the number of [[port]] tables), found {}", q.port),
                ));
            }
            if seen.contains(q) {
                return Err(err(
                    format!("lcore[{i}].rx[{j}]"),
                    format!("port {} queue {} is polled by two lcores: each rx queue has one owner", q.port, q.queue),
                ));
            }
            seen.push(*q);
        }
    }
    Ok(seen)
}

/// With `[[lcore]]` tables, every port with an input is polled by some lcore (`seen`: the polled
/// queues).
fn check_inputs_polled(config: &Config, seen: &[RxQueueConfig], path: &Path) -> Result<(), ConfigError> {
    let err = |key: String, msg: String| ConfigError::new(path, key, msg);
    // A port with a finite or live pcap input that no worker polls: its input would never be
    // read (with the default lcore every port is polled).
    if !config.lcores.is_empty() {
        for (i, p) in config.ports.iter().enumerate() {
            let input = p.device_name().starts_with("net_pcap")
                && p.vdev_args()
                    .iter()
                    .any(|(k, _)| matches!(k.as_str(), "rx_pcap" | "rx_iface" | "rx_iface_in" | "iface"));
            if input && !seen.iter().any(|q| q.port as usize == i) {
                return Err(err(
                    "lcore".into(),
                    format!(
                        "port {i} ({}) has an input but no lcore polls it: add {{ port = {i}, queue = 0 }} to an lcore's rx",
                        p.device_name()
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// `config`'s `[[collective]]` validated as the file's are (the ports' addresses `ipv4` and
/// `ipv6`, the memory limit, the slot memory against what the EAL memory leaves, every full
/// chunk's RESULT frame, and its contributions with two tags and IP options, in one mbuf, and
/// its frames within the `mtu` of each member's port): at load, and
/// for the collective sets of runtime changes.
pub(super) fn collectives(
    config: &Config,
    ipv4: &[Option<[u8; 4]>],
    ipv6: &[Option<[u8; 16]>],
    path: &Path,
) -> Result<Vec<Collective>, ConfigError> {
    let collectives = check_collectives(config, ipv4, ipv6, path)?;
    check_result_frames(config, &collectives, path)?;
    Ok(collectives)
}

/// `[[collective]]`, validated against the memory limit, and their slot memory against what the
/// EAL memory leaves.
fn check_collectives(
    config: &Config,
    ipv4: &[Option<[u8; 4]>],
    ipv6: &[Option<[u8; 16]>],
    path: &Path,
) -> Result<Vec<Collective>, ConfigError> {
    let err = |key: String, msg: String| ConfigError::new(path, key, msg);
    let slot_room = check_eal_memory(config, path)?;
    let limit_mb = config.dataplane.memory_limit_mb.unwrap_or(DEFAULT_MEMORY_LIMIT_MB);
    let collectives = collective::validate(
        &config.collectives,
        collective::PortAddrs { ipv4, ipv6 },
        limit_mb.saturating_mul(memory::MIB),
        path,
    )?;
    if let Some((room, eal_mb)) = slot_room {
        // Each collective's slots are held by the one worker that owns it, or split among the
        // workers when sharded: the sum is the same (saturating: beyond 64 bits is beyond the
        // room, never wrapped below it).
        let slots = crate::agg::collective::total_memory_bytes(&collectives);
        if slots > room {
            return Err(err(
                "collective".into(),
                format!(
                    "the collectives need {} of slot memory, more than the {} MiB that eal.args -m {eal_mb} leaves after the mempool, the hand-off rings and EAL's own memory: raise -m, or make mempool.mbufs or the collectives smaller",
                    if slots == u64::MAX { collective::need_mib(slots) } else { format!("{} MiB", memory::mib(slots)) },
                    memory::mib(room)
                ),
            ));
        }
    }
    Ok(collectives)
}

/// Every collective's full-chunk RESULT frame, and its contributions with the headers
/// [`crate::agg::CONTRIBUTION_HEADER_SLACK`] allows for, fit one mbuf, and its frames the `mtu`
/// of each member's port.
fn check_result_frames(config: &Config, collectives: &[Collective], path: &Path) -> Result<(), ConfigError> {
    let err = |key: String, msg: String| ConfigError::new(path, key, msg);
    // Every RESULT frame is built in a single mbuf segment, and every contribution is read
    // from one: a collective whose full-chunk results do not fit one would fold contributions
    // and never send their results (spec section 4, rule 2), and one whose contributions, with
    // the tags spec section 1 allows and IP options, do not fit would lose them (chains are
    // `multi_segment` drops). Contributions that arrive untagged for members with a `vlan`
    // are 4 bytes shorter than their results, so neither length alone is enough.
    let room = config.mempool.frame_bytes() as usize;
    let frame = |c: &Collective| crate::agg::max_result_frame_len(c).max(crate::agg::max_contribution_frame_len(c));
    // Every member's IP packets within its port's `mtu`, when it has one.
    let within_mtus = |c: &Collective| {
        c.members.iter().enumerate().all(|(r, m)| {
            config
                .ports
                .get(m.port as usize)
                .and_then(|p| p.mtu)
                .is_none_or(|mtu| crate::agg::result_ip_len(c, r) <= usize::from(mtu))
        })
    };
    // The most lanes that fit both the mbuf and the MTUs (a chunk is at most 8900 bytes: a
    // short walk; RoCEv2's pad makes the lengths step by 4 bytes), 0 when none does.
    let most_lanes = |c: &Collective| {
        let mut fits = c.clone();
        while fits.chunk_elements > 0 && !(frame(&fits) <= room && within_mtus(&fits)) {
            fits.chunk_elements -= 1;
        }
        fits.chunk_elements
    };
    for (i, c) in collectives.iter().enumerate() {
        let len = frame(c);
        if len > room {
            let most = most_lanes(c);
            let lanes =
                if most > 0 { format!(", or use at most {most} {} lanes", c.dtype.name()) } else { String::new() };
            return Err(err(
                format!("collective[{i}].chunk_elements"),
                format!(
                    "a full chunk's frames reach {len} bytes (its RESULT frames, or a contribution with two VLAN tags and {} bytes of IP options or extension headers), more than an mbuf holds (mempool.data_room {} less {MBUF_HEADROOM} bytes of headroom = {room}): raise mempool.data_room to at least {}{lanes}",
                    crate::agg::CONTRIBUTION_HEADER_SLACK - 8,
                    config.mempool.data_room,
                    len + MBUF_HEADROOM
                ),
            ));
        }
        // A member's frames (its contributions and its results, equally long) cross its port's
        // link: a port with an `mtu` must carry their IP packets.
        for (r, m) in c.members.iter().enumerate() {
            let Some(mtu) = config.ports.get(m.port as usize).and_then(|p| p.mtu) else { continue };
            let ip = crate::agg::result_ip_len(c, r);
            if ip > usize::from(mtu) {
                // The most lanes whose packets fit every member's port, and one mbuf.
                let most = most_lanes(c);
                let want = if most > 0 {
                    format!("expected at most {most} {} lanes, or a larger mtu", c.dtype.name())
                } else {
                    let mut fits = c.clone();
                    fits.chunk_elements = 1;
                    format!(
                        "not even one lane fits: the port's mtu must be at least {}",
                        crate::agg::result_ip_len(&fits, r)
                    )
                };
                return Err(err(
                    format!("collective[{i}].chunk_elements"),
                    format!(
                        "a full chunk makes {ip}-byte IP packets for rank {r}, more than port[{}].mtu = {mtu}: {want}",
                        m.port
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Every rx queue below a port's highest polled one has an owner.
fn check_queue_owners(loaded: &Loaded, path: &Path) -> Result<(), ConfigError> {
    let err = |key: String, msg: String| ConfigError::new(path, key, msg);
    let nports = loaded.config.ports.len();
    for p in 0..nports as u16 {
        let n = loaded.rx_queues(p);
        for q in 0..n {
            if !loaded.lcores().iter().any(|l| l.rx.contains(&RxQueueConfig { port: p, queue: q })) {
                return Err(err(
                    "lcore".into(),
                    format!("port {p} has {n} rx queues but no lcore polls queue {q}: every queue below the highest polled one needs an owner"),
                ));
            }
        }
    }
    Ok(())
}

/// Checks the memory needs against the EAL memory the `[eal]` args reserve (`-m`,
/// `--socket-mem`): the mbuf pool, the hand-off rings and EAL's own overhead must fit
/// (`mempool.mbufs`), and an explicit `dataplane.memory_limit_mb` must fit in what they leave.
/// Returns that room (bytes) and the EAL memory (MiB), or `None` without `-m`/`--socket-mem`
/// (hugepages taken as needed: no bound but the memory limit).
fn check_eal_memory(config: &Config, path: &Path) -> Result<Option<(u64, u64)>, ConfigError> {
    let err = |key: &str, msg: String| ConfigError::new(path, key, msg);
    let args = &config.eal.args;
    let Some(eal_mb) = memory::eal_memory_mb(args).map_err(|e| err("eal.args", e))? else {
        return Ok(None);
    };
    let budget = eal_mb.saturating_mul(memory::MIB);
    let mp = &config.mempool;
    let page = memory::page_size(args);
    let pool = memory::mempool_bytes(mp.mbufs, mp.cache, mp.data_room, page);
    let workers = config.lcores.len().max(1);
    let hand_off = if workers > 1 && !config.collectives.is_empty() { workers } else { 0 };
    // One ring per other worker to the owner of each shaped port's scheduler.
    let shaped = config.ports.iter().filter(|p| p.qos.is_some()).count();
    // Saturating, as every count here: beyond 64 bits is beyond any budget, never wrapped below.
    let rings = hand_off.saturating_add(shaped.saturating_mul(workers - 1));
    let fixed = memory::fixed_overhead(config.ports.len(), rings);
    let need = pool.saturating_add(fixed);
    if need > budget {
        let room = budget.saturating_sub(fixed);
        let fit = memory::mbufs_that_fit(mp.mbufs, mp.cache, mp.data_room, page, room);
        return Err(err(
            "mempool.mbufs",
            format!(
                "{} mbufs of {} bytes each (mempool.data_room {} plus the 128-byte rte_mbuf and the object header{}) need {} MiB of EAL memory, with {} MiB for EAL, the ports and the hand-off rings: more than eal.args -m {eal_mb} MiB. {}, or raise -m to at least {}",
                mp.mbufs,
                memory::mbuf_object_size(mp.data_room),
                mp.data_room,
                if page == 4096 { ", each on its own share of 4 KiB pages with --no-huge" } else { "" },
                memory::mib(pool),
                memory::mib(fixed),
                if fit >= 64 { format!("At most {fit} mbufs fit") } else { "Not even 64 mbufs fit".to_string() },
                need.div_ceil(memory::MIB)
            ),
        ));
    }
    let room = budget - need;
    if let Some(limit) = config.dataplane.memory_limit_mb {
        if limit.saturating_mul(memory::MIB) > room {
            // `limit` is at most MAX_MIB ([`check_dataplane`]) and `need` at most the budget: no
            // overflow. An -m beyond MAX_MIB would be refused itself: not advised.
            let eal_needed = need.div_ceil(memory::MIB) + limit;
            return Err(err(
                "dataplane.memory_limit_mb",
                format!(
                    "expected at most {} MiB: eal.args -m {eal_mb} MiB leaves {} MiB after the mempool ({} MiB), the hand-off rings and EAL's own memory ({} MiB); found {limit}. Lower it{}",
                    room / memory::MIB,
                    memory::mib(room),
                    memory::mib(pool),
                    memory::mib(fixed),
                    if eal_needed <= memory::MAX_MIB {
                        format!(", or raise -m to at least {eal_needed}")
                    } else {
                        String::new()
                    }
                ),
            ));
        }
    }
    Ok(Some((room, eal_mb)))
}

/// A MAC address that names one host's interface (`[[port]] mac`, a member's `mac`): six hex
/// octets, unicast (IEEE 802: a group address, the I/G bit set, is never a source, and results
/// are unicast to a worker's NIC) and not 00:00:00:00:00:00 (no interface's; DPDK refuses it as a
/// port's address).
///
/// # Errors
/// What was expected and what `text` is.
pub(super) fn host_mac(text: &str) -> Result<EthernetAddress, String> {
    let mac = text.parse::<EthernetAddress>().map_err(|e| format!("{e}, found {text:?}"))?;
    if mac.is_multicast() {
        return Err(format!("expected a unicast MAC address (first octet even), found {text:?}"));
    }
    if mac.0 == [0; 6] {
        return Err(format!("expected a host's MAC address, not the null address 00:00:00:00:00:00, found {text:?}"));
    }
    Ok(mac)
}

fn looks_like_pci(s: &str) -> bool {
    // [domain:]bus:device.function, hex digits.
    let parts: Vec<&str> = s.split([':', '.']).collect();
    (parts.len() == 3 || parts.len() == 4)
        && parts.iter().all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_hexdigit()))
}
