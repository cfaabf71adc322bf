//! The appliance's TOML configuration: EAL arguments, mempool, ports, lcores and the
//! match-action tables.
//!
//! [`load`] reads and validates a whole file: every error names the file, the key and what was
//! expected ([`ConfigError`]); the appliance starts only from a configuration that loaded
//! completely. The format is documented in the README ("Configuration").

mod error;
pub mod memory;
mod table;

pub use error::ConfigError;

use crate::table::Pipeline;
use crate::wire::EthernetAddress;
use serde::Deserialize;
use std::path::Path;

/// Default number of mbufs in the pool (2^13 - 1, DPDK's optimum is 2^q - 1).
pub const DEFAULT_MBUFS: u32 = 8191;
/// Default per-lcore mbuf cache.
pub const DEFAULT_CACHE: u32 = 256;
/// Default data room per mbuf (bytes, including the 128-byte headroom): DPDK's
/// `RTE_MBUF_DEFAULT_BUF_SIZE`, for frames up to 2048 bytes.
pub const DEFAULT_DATA_ROOM: u16 = 2176;
/// Headroom DPDK reserves at the front of every mbuf's data room (RTE_PKTMBUF_HEADROOM).
pub const MBUF_HEADROOM: usize = 128;
/// Default rx burst (packets).
pub const DEFAULT_BURST: u16 = 32;
/// Default tx drain period (µs): a partly filled tx buffer is sent after this long.
pub const DEFAULT_TX_DRAIN_US: u64 = 100;
/// The gradient protocol's default UDP port (spec section 1: 49374, 0xC0DE).
pub const DEFAULT_GRADIENT_UDP_PORT: u16 = 49374;

/// The whole configuration file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[eal]`: arguments for `rte_eal_init`.
    #[serde(default)]
    pub eal: EalConfig,
    /// `[mempool]`: the packet buffer pool.
    #[serde(default)]
    pub mempool: MempoolConfig,
    /// `[dataplane]`: worker loop settings.
    #[serde(default)]
    pub dataplane: DataplaneConfig,
    /// `[[port]]`: the ports, in order; port `i` of the tables is the i-th table here.
    #[serde(rename = "port", default)]
    pub ports: Vec<PortConfig>,
    /// `[[lcore]]`: which worker lcore polls which (port, rx queue).
    #[serde(rename = "lcore", default)]
    pub lcores: Vec<LcoreConfig>,
    /// `[[table]]`: the ingress pipeline, applied in order.
    #[serde(rename = "table", default)]
    pub tables: Vec<table::TableConfig>,
    /// `[[multicast_group]]`: groups for the `multicast(id)` action.
    #[serde(rename = "multicast_group", default)]
    pub groups: Vec<table::GroupConfig>,
    /// `[[collective]]`: the collectives the appliance aggregates (spec section 3).
    #[serde(rename = "collective", default)]
    pub collectives: Vec<crate::agg::config::CollectiveConfig>,
}

/// `[eal]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EalConfig {
    /// EAL options (`-l`, `--lcores`, `--no-huge`, `-m`, `--file-prefix`, ...). The appliance adds
    /// `--vdev`/`-a` for each port itself.
    #[serde(default)]
    pub args: Vec<String>,
}

/// `[mempool]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MempoolConfig {
    /// Mbufs in the pool.
    #[serde(default = "d_mbufs")]
    pub mbufs: u32,
    /// Per-lcore cache (mbufs); at most 512.
    #[serde(default = "d_cache")]
    pub cache: u32,
    /// Data room per mbuf (bytes, including the 128-byte headroom); 9344 for 9 KiB jumbo frames.
    #[serde(default = "d_data_room")]
    pub data_room: u16,
}

impl Default for MempoolConfig {
    fn default() -> Self {
        MempoolConfig { mbufs: DEFAULT_MBUFS, cache: DEFAULT_CACHE, data_room: DEFAULT_DATA_ROOM }
    }
}

/// `[dataplane]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataplaneConfig {
    /// Rx burst size (packets), 1..=512.
    #[serde(default = "d_burst")]
    pub burst: u16,
    /// Tx drain period (µs).
    #[serde(default = "d_drain")]
    pub tx_drain_us: u64,
    /// UDP destination port of the gradient protocol's UDP carriage.
    #[serde(default = "d_grad_port")]
    pub gradient_udp_port: u16,
    /// For finite pcap inputs: how long (ms) the appliance waits with no new input before it
    /// decides the input is over even though fewer records than the files hold were received
    /// (a fallback; the record count is what normally ends a replay).
    #[serde(default = "d_idle")]
    pub replay_idle_ms: u64,
    /// The appliance's own QP number, the DETH source QP of its RoCEv2 packets (spec section 6).
    #[serde(default = "d_qpn")]
    pub appliance_qpn: u32,
    /// Slot memory all collectives together may use (MiB); a collective beyond it is refused.
    /// Unset: 1024, or less when `[eal]` args reserve less memory (`-m`): what the EAL memory
    /// leaves after the mempool, the hand-off rings and EAL's own needs
    /// ([`memory::fixed_overhead`]). Set, it must fit in that.
    #[serde(default)]
    pub memory_limit_mb: Option<u64>,
}

impl Default for DataplaneConfig {
    fn default() -> Self {
        DataplaneConfig {
            burst: DEFAULT_BURST,
            tx_drain_us: DEFAULT_TX_DRAIN_US,
            gradient_udp_port: DEFAULT_GRADIENT_UDP_PORT,
            replay_idle_ms: d_idle(),
            appliance_qpn: d_qpn(),
            memory_limit_mb: None,
        }
    }
}

/// `[[port]]`: one DPDK port, a vdev or a PCI device.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortConfig {
    /// A label for stats (default `port<i>`).
    pub name: Option<String>,
    /// A vdev string as for EAL's `--vdev`, like `net_pcap0,rx_pcap=in.pcap,tx_pcap=out.pcap`.
    pub vdev: Option<String>,
    /// A PCI address as for EAL's `-a`, like `0000:3b:00.0` (the device bound to vfio-pci).
    pub pci: Option<String>,
    /// Rx descriptors per queue.
    #[serde(default = "d_desc")]
    pub rx_desc: u16,
    /// Tx descriptors per queue.
    #[serde(default = "d_desc")]
    pub tx_desc: u16,
    /// MTU to set (bytes).
    pub mtu: Option<u16>,
    /// MAC address to set on the port (`rte_eth_dev_default_mac_addr_set`); also the source
    /// of the appliance's own packets on this port.
    pub mac: Option<String>,
    /// The appliance's IPv4 address on this port (source of results and NAKs).
    pub ipv4: Option<String>,
    /// The appliance's IPv6 address on this port.
    pub ipv6: Option<String>,
}

impl PortConfig {
    /// The EAL device name: the vdev string up to its first comma, or the PCI address.
    pub fn device_name(&self) -> &str {
        match (&self.vdev, &self.pci) {
            (Some(v), _) => v.split(',').next().unwrap_or(v).trim(),
            (None, Some(p)) => p.trim(),
            (None, None) => "",
        }
    }

    /// The vdev's `key=value` arguments (after the device name).
    pub fn vdev_args(&self) -> Vec<(String, String)> {
        let Some(v) = &self.vdev else {
            return Vec::new();
        };
        v.split(',')
            .skip(1)
            .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.trim().to_string(), v.trim().to_string())))
            .collect()
    }
}

/// `[[lcore]]`: a worker lcore and the rx queues it polls.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LcoreConfig {
    /// The EAL lcore id (a worker lcore: not the main one).
    pub id: u32,
    /// The (port, queue) pairs it polls.
    pub rx: Vec<RxQueueConfig>,
}

/// One rx queue of one port.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RxQueueConfig {
    /// Port index (0-based, the order of `[[port]]`).
    pub port: u16,
    /// Rx queue index on that port.
    pub queue: u16,
}

fn d_mbufs() -> u32 {
    DEFAULT_MBUFS
}
fn d_cache() -> u32 {
    DEFAULT_CACHE
}
fn d_data_room() -> u16 {
    DEFAULT_DATA_ROOM
}
fn d_burst() -> u16 {
    DEFAULT_BURST
}
fn d_drain() -> u64 {
    DEFAULT_TX_DRAIN_US
}
fn d_grad_port() -> u16 {
    DEFAULT_GRADIENT_UDP_PORT
}
fn d_idle() -> u64 {
    5000
}
fn d_qpn() -> u32 {
    1
}
/// Default slot memory limit (MiB) when the EAL memory does not bound it.
pub const DEFAULT_MEMORY_LIMIT_MB: u64 = 1024;
fn d_desc() -> u16 {
    1024
}

/// A configuration that loaded completely, with what was built from it.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The file's contents.
    pub config: Config,
    /// The ingress pipeline built from `[[table]]` (a prototype: each worker gets a clone).
    pub pipeline: Pipeline,
    /// Per port: its MAC override, parsed.
    pub port_macs: Vec<Option<EthernetAddress>>,
    /// Per port: the appliance's IPv4 address.
    pub port_ipv4: Vec<Option<[u8; 4]>>,
    /// Per port: the appliance's IPv6 address.
    pub port_ipv6: Vec<Option<[u8; 16]>>,
    /// The validated collectives.
    pub collectives: Vec<crate::agg::config::Collective>,
}

impl Loaded {
    /// The worker lcores and their rx queues: the `[[lcore]]` tables, or by default lcore 1
    /// polling queue 0 of every port.
    pub fn lcores(&self) -> Vec<LcoreConfig> {
        if !self.config.lcores.is_empty() {
            return self.config.lcores.clone();
        }
        let rx = (0..self.config.ports.len() as u16).map(|port| RxQueueConfig { port, queue: 0 }).collect();
        vec![LcoreConfig { id: 1, rx }]
    }

    /// Rx queues of port `p`: one more than the highest queue any lcore polls on it.
    pub fn rx_queues(&self, p: u16) -> u16 {
        self.lcores().iter().flat_map(|l| l.rx.iter()).filter(|q| q.port == p).map(|q| q.queue + 1).max().unwrap_or(0)
    }
}

/// Reads and validates the configuration at `path`.
pub fn load(path: &Path) -> Result<Loaded, ConfigError> {
    let text =
        std::fs::read_to_string(path).map_err(|e| ConfigError::new(path, "", format!("cannot read the file: {e}")))?;
    load_str(&text, path)
}

/// Parses and validates configuration `text`; `path` names it in errors.
pub fn load_str(text: &str, path: &Path) -> Result<Loaded, ConfigError> {
    let de = toml::Deserializer::parse(text).map_err(|e| syntax_error(path, text, "", &e))?;
    let config: Config = serde_path_to_error::deserialize(de).map_err(|e| {
        let key = e.path().to_string();
        syntax_error(path, text, if key == "." { "" } else { &key }, e.inner())
    })?;
    validate(config, path)
}

/// A TOML syntax error, or a value of the wrong type or range at `key` (serde's path, like
/// `dataplane.burst` or `collective[0].member[1]`): one line, with the line and column, and
/// Rust's type names said in words ("u16" is "an integer from 0 to 65535").
fn syntax_error(path: &Path, text: &str, key: &str, e: &toml::de::Error) -> ConfigError {
    let mut msg = e.message().lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join("; ");
    for (rust, words) in [
        ("u8", "an integer from 0 to 255"),
        ("u16", "an integer from 0 to 65535"),
        ("u32", "an integer from 0 to 4294967295"),
        ("u64", "a non-negative integer"),
        ("usize", "a non-negative integer"),
        ("i32", "an integer"),
        ("i64", "an integer"),
        ("f32", "a number"),
        ("f64", "a number"),
    ] {
        if let Some(stem) = msg.strip_suffix(&format!("expected {rust}")) {
            msg = format!("{stem}expected {words}");
        }
    }
    if let Some(span) = e.span() {
        let before = text.get(..span.start).unwrap_or(text);
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        msg = format!("{msg} (line {line}, column {column})");
    }
    ConfigError::new(path, key, msg)
}

fn validate(config: Config, path: &Path) -> Result<Loaded, ConfigError> {
    let err = |key: String, msg: String| ConfigError::new(path, key, msg);
    let mp = &config.mempool;
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
    let dp = &config.dataplane;
    if dp.burst == 0 || dp.burst > 512 {
        return Err(err("dataplane.burst".into(), format!("expected 1..=512 packets, found {}", dp.burst)));
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
    if dp.replay_idle_ms == 0 {
        // The fallback end of a replay whose input ends short: 0 would end every replay at once.
        return Err(err("dataplane.replay_idle_ms".into(), "expected at least 1 ms, found 0".into()));
    }
    if config.ports.is_empty() {
        return Err(err("port".into(), "expected at least one [[port]] table".into()));
    }
    let mut labels: Vec<&str> = Vec::new();
    let mut names = Vec::new();
    let mut port_macs = Vec::new();
    let mut port_ipv4 = Vec::new();
    let mut port_ipv6 = Vec::new();
    for (i, p) in config.ports.iter().enumerate() {
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
            if labels.contains(&label.as_str()) {
                return Err(err(format!("{key}.name"), format!("port name {label:?} is used twice")));
            }
            labels.push(label);
        }
        if p.rx_desc == 0 || p.tx_desc == 0 {
            return Err(err(key, "expected rx_desc and tx_desc above 0".into()));
        }
        let mac = match &p.mac {
            None => None,
            Some(m) => {
                let mac =
                    m.parse::<EthernetAddress>().map_err(|e| err(format!("{key}.mac"), format!("{e}, found {m:?}")))?;
                // The source of the appliance's own frames: a group address there is invalid
                // (IEEE 802: the I/G bit of a source is 0).
                if mac.is_multicast() {
                    return Err(err(
                        format!("{key}.mac"),
                        format!("expected a unicast MAC address (first octet even), found {m:?}"),
                    ));
                }
                Some(mac)
            }
        };
        port_macs.push(mac);
        let v4 = match &p.ipv4 {
            None => None,
            Some(a) => Some(
                a.parse::<std::net::Ipv4Addr>()
                    .ok()
                    .filter(|v| !v.is_unspecified() && !v.is_multicast() && !v.is_broadcast())
                    .ok_or_else(|| {
                        err(
                            format!("{key}.ipv4"),
                            format!("expected a unicast IPv4 address like 10.0.0.254, found {a:?}"),
                        )
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
                        err(
                            format!("{key}.ipv6"),
                            format!("expected a unicast IPv6 address like fd00::fe, found {a:?}"),
                        )
                    })?
                    .octets(),
            ),
        };
        port_ipv4.push(v4);
        port_ipv6.push(v6);
    }
    let nports = config.ports.len();
    let mut seen = Vec::new();
    let mut ids = Vec::new();
    for (i, l) in config.lcores.iter().enumerate() {
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
    let pipeline = table::build_pipeline(&config.tables, &config.groups, nports as u16, path)?;
    if config.dataplane.appliance_qpn > 0xff_ffff {
        return Err(err(
            "dataplane.appliance_qpn".into(),
            format!("expected a 24-bit QP number, found {}", config.dataplane.appliance_qpn),
        ));
    }
    let slot_room = check_eal_memory(&config, path)?;
    let limit_mb = config.dataplane.memory_limit_mb.unwrap_or(DEFAULT_MEMORY_LIMIT_MB);
    let collectives = crate::agg::config::validate(
        &config.collectives,
        crate::agg::config::PortAddrs { ipv4: &port_ipv4, ipv6: &port_ipv6 },
        limit_mb.saturating_mul(memory::MIB),
        path,
    )?;
    if let Some((room, eal_mb)) = slot_room {
        // Each collective's slots are held by the one worker that owns it.
        let slots: u64 = collectives.iter().map(|c| c.memory_bytes()).sum();
        if slots > room {
            return Err(err(
                "collective".into(),
                format!(
                    "the collectives need {} MiB of slot memory, more than the {} MiB that eal.args -m {eal_mb} leaves after the mempool, the hand-off rings and EAL's own memory: raise -m, or make mempool.mbufs or the collectives smaller",
                    memory::mib(slots),
                    memory::mib(room)
                ),
            ));
        }
    }
    // Every RESULT frame is built in a single mbuf segment: a collective whose full-chunk
    // results do not fit one would fold contributions and never send their results (spec
    // section 4, rule 2). Contributions that arrive untagged for members with a `vlan` are
    // 4 bytes shorter than their results, so the contributions fitting is not enough.
    let room = (config.mempool.data_room as usize).saturating_sub(MBUF_HEADROOM);
    for (i, c) in collectives.iter().enumerate() {
        let len = crate::agg::max_result_frame_len(c);
        if len > room {
            return Err(err(
                format!("collective[{i}].chunk_elements"),
                format!(
                    "a full chunk's RESULT frame is {len} bytes, more than an mbuf holds (mempool.data_room {} less {MBUF_HEADROOM} bytes of headroom = {room}): raise mempool.data_room to at least {}",
                    config.mempool.data_room,
                    len + MBUF_HEADROOM
                ),
            ));
        }
    }
    let loaded = Loaded { config, pipeline, port_macs, port_ipv4, port_ipv6, collectives };
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
    Ok(loaded)
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
    let rings = if workers > 1 && !config.collectives.is_empty() { workers } else { 0 };
    let fixed = memory::fixed_overhead(config.ports.len(), rings);
    let need = pool + fixed;
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
            return Err(err(
                "dataplane.memory_limit_mb",
                format!(
                    "expected at most {} MiB: eal.args -m {eal_mb} MiB leaves {} MiB after the mempool ({} MiB), the hand-off rings and EAL's own memory ({} MiB); found {limit}. Lower it, or raise -m to at least {}",
                    room / memory::MIB,
                    memory::mib(room),
                    memory::mib(pool),
                    memory::mib(fixed),
                    (need + limit * memory::MIB).div_ceil(memory::MIB)
                ),
            ));
        }
    }
    Ok(Some((room, eal_mb)))
}

fn looks_like_pci(s: &str) -> bool {
    // [domain:]bus:device.function, hex digits.
    let parts: Vec<&str> = s.split([':', '.']).collect();
    (parts.len() == 3 || parts.len() == 4)
        && parts.iter().all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests;
