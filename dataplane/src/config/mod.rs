//! The appliance's TOML configuration: EAL arguments, mempool, ports, lcores and the
//! match-action tables.
//!
//! [`load`] reads and validates a whole file: every error names the file, the key and what was
//! expected ([`ConfigError`]); the appliance starts only from a configuration that loaded
//! completely. The format is documented in the README ("Configuration").

pub mod collective;
mod error;
pub mod memory;
pub mod meter;
mod port;
pub mod qos;
pub mod table;
pub mod update;
mod validate;

pub use error::ConfigError;
pub use port::{default_desc, device_name, DEFAULT_DESC};

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
/// The longest tx drain period (µs): 1 s. A partly filled tx buffer held longer is a stalled
/// port, not a batching choice (and the period in TSC cycles must not overflow).
pub const MAX_TX_DRAIN_US: u64 = 1_000_000;
/// How often each worker publishes its live counters (ms; the runtime's `live::PUBLISH_MS`):
/// the shortest `stats_interval_ms`, since a shorter interval would read counters that have not
/// moved and rates computed from stale readings.
pub const LIVE_PUBLISH_MS: u64 = 100;
/// The gradient protocol's default UDP port (spec section 1), as the wire defines it.
pub const DEFAULT_GRADIENT_UDP_PORT: u16 = crate::wire::gradient::DEFAULT_UDP_PORT;

/// The whole configuration file. Every section may be left out (its defaults).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// `[eal]`: arguments for `rte_eal_init`.
    pub eal: EalConfig,
    /// `[mempool]`: the packet buffer pool.
    pub mempool: MempoolConfig,
    /// `[dataplane]`: worker loop settings.
    pub dataplane: DataplaneConfig,
    /// `[telemetry]`: where the live counters are served besides DPDK's telemetry socket.
    pub telemetry: TelemetryConfig,
    /// `[[port]]`: the ports, in order; port `i` of the tables is the i-th table here.
    #[serde(rename = "port")]
    pub ports: Vec<PortConfig>,
    /// `[[lcore]]`: which worker lcore polls which (port, rx queue).
    #[serde(rename = "lcore")]
    pub lcores: Vec<LcoreConfig>,
    /// `[[table]]`: the ingress pipeline, applied in order.
    #[serde(rename = "table")]
    pub tables: Vec<table::TableConfig>,
    /// `[[multicast_group]]`: groups for the `multicast(id)` action.
    #[serde(rename = "multicast_group")]
    pub groups: Vec<table::GroupConfig>,
    /// `[[meter]]`: meters for the `meter(...)` and `police(...)` actions.
    #[serde(rename = "meter")]
    pub meters: Vec<meter::MeterConfig>,
    /// `[[collective]]`: the collectives the appliance aggregates (spec section 3).
    #[serde(rename = "collective")]
    pub collectives: Vec<collective::CollectiveConfig>,
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

impl MempoolConfig {
    /// The longest frame one mbuf holds (bytes): the data room less [`MBUF_HEADROOM`].
    pub fn frame_bytes(&self) -> u32 {
        u32::from(self.data_room).saturating_sub(MBUF_HEADROOM as u32)
    }
}

/// Longest port or table name (bytes): names are keys of the live counters
/// ([`crate::live::Board::key`]), which DPDK's telemetry caps at 128 bytes with the family.
pub const MAX_LABEL: usize = 32;

/// Why `name` cannot name a port or a table, if it cannot: it must be 1 to [`MAX_LABEL`] ASCII
/// letters, digits, `_` or `-` (the telemetry socket shows `-` as `_`, so names that differ
/// only there are one name: see [`label_key`]).
pub fn label_error(name: &str) -> Option<String> {
    if name.is_empty() || name.len() > MAX_LABEL {
        return Some(format!("expected 1 to {MAX_LABEL} characters, found {}", name.len()));
    }
    name.chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
        .map(|c| format!("{name:?}: expected only ASCII letters, digits, '_' and '-', found {c:?}"))
}

/// A port or table name as the telemetry socket shows it (`-` as `_`): two names with the same
/// key are one name.
pub fn label_key(name: &str) -> String {
    name.replace('-', "_")
}

/// `[telemetry]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// Serve the live counters for Prometheus at `http://ADDR/metrics` (`"127.0.0.1:9464"`;
    /// port 0: any free port). Unset (the default): no HTTP listener.
    #[serde(default)]
    pub prometheus: Option<std::net::SocketAddr>,
}

/// `[dataplane]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataplaneConfig {
    /// Rx burst size (packets), 1..=512.
    #[serde(default = "d_burst")]
    pub burst: u16,
    /// Tx drain period (µs), at most [`MAX_TX_DRAIN_US`]; 0 drains every loop iteration's
    /// microsecond.
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
    /// While running live, print a one-line stats summary on stderr every this many ms (rates,
    /// drops, rounds completed), at least [`LIVE_PUBLISH_MS`]; 0 (the default): never.
    #[serde(default)]
    pub stats_interval_ms: u64,
    /// Verify every checksum of every packet (the UDP checksum and the RoCEv2 ICRC of transit
    /// traffic too), as an end host would. Default `false`: transit traffic gets a router's
    /// checks (RFC 1812 section 5.2.2: the IPv4 header, its checksum, the lengths) and what the
    /// appliance consumes gets every check of the spec.
    #[serde(default)]
    pub verify_transit: bool,
    /// Spread every UDP collective's slots over the workers by chunk (chunk `k` of the `i`-th
    /// collective on worker `(i + k) % workers`), so that one collective uses every worker's
    /// core; packets reaching another worker are handed to the chunk's owner. Default `false`:
    /// each collective on one worker (`i % workers`). RoCEv2 collectives always keep one
    /// owner (spec section 6's per-member PSN sequence).
    #[serde(default)]
    pub shard_collectives: bool,
    /// Send each completed round's result frames (spec section 6, rule 2) over one shared
    /// payload: the last member's frame holds it and every other member's frame is a header
    /// mbuf chained to it by reference (DPDK indirect mbufs, as the ipv4_multicast example
    /// replicates), so a completion writes its payload once instead of once per member. Costs
    /// two mbufs per other member (three on RoCEv2: the ICRC follows the payload) while they
    /// wait to be sent, and keeps the shared frame out of the pool until the last is freed; the
    /// mempool check counts 4 per frame. A port whose device does not offer
    /// `RTE_ETH_TX_OFFLOAD_MULTI_SEGS` (software vdevs excepted) is refused at start. Default
    /// `false`: a copy per member.
    #[serde(default)]
    pub zero_copy_results: bool,
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
            stats_interval_ms: 0,
            verify_transit: false,
            shard_collectives: false,
            zero_copy_results: false,
        }
    }
}

crate::port_config! {
    /// `[[port]]`: one DPDK port, a vdev or a PCI device.
    pub struct PortConfig {
        name, vdev, pci, rx_desc, tx_desc,
        /// MTU to set (bytes).
        pub mtu: Option<u16>,
        /// MAC address to set on the port (`rte_eth_dev_default_mac_addr_set`); also the source
        /// of the appliance's own packets on this port.
        pub mac: Option<String>,
        /// The appliance's IPv4 address on this port (source of results and NAKs).
        pub ipv4: Option<String>,
        /// The appliance's IPv6 address on this port.
        pub ipv6: Option<String>,
        /// `[port.qos]`: the port's egress scheduler and class maps (absent: packets go straight
        /// to the tx queue).
        pub qos: Option<qos::QosConfig>,
    }
}

impl PortConfig {
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
    pub collectives: Vec<crate::agg::collective::Collective>,
    /// Per port: its egress scheduler's configuration (at µs, `hz` 1e6) and class map, from
    /// `[port.qos]`.
    pub qos: Vec<Option<(crate::sched::PortConfig, crate::sched::ClassMap)>>,
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
    validate::validate(deserialize(text, path)?, path)
}

/// TOML `text` as a `T` (any serde schema: the appliance's, the generator's); `path` names it
/// in errors.
///
/// The text is first read as a plain TOML document (a [`toml::Table`]), as the appliance's
/// control thread and a reload read the running file: a value that TOML cannot hold, an integer
/// beyond its signed 64 bits (above 9223372036854775807) which a `u64` key alone would take, is
/// refused here rather than by them after the start.
///
/// # Errors
/// A syntax error, a value of the wrong type or range, or an integer beyond TOML's 64 signed
/// bits, as one line naming the file, the key (serde's path, like `dataplane.burst`), the line
/// and column and what was expected, with Rust's type names said in words.
pub fn deserialize<T: serde::de::DeserializeOwned>(text: &str, path: &Path) -> Result<T, ConfigError> {
    let parse = || toml::Deserializer::parse(text).map_err(|e| syntax_error(path, text, "", &e));
    let key_of = |p: &serde_path_to_error::Path| Some(p.to_string()).filter(|k| k != ".").unwrap_or_default();
    serde_path_to_error::deserialize::<_, toml::Table>(parse()?)
        .map_err(|e| syntax_error(path, text, &key_of(e.path()), e.inner()))?;
    serde_path_to_error::deserialize(parse()?).map_err(|e| syntax_error(path, text, &key_of(e.path()), e.inner()))
}

/// What [`syntax_error`] says of an integer TOML cannot hold (beyond its signed 64 bits).
pub const INTEGER_RANGE: &str =
    "expected an integer from -9223372036854775808 to 9223372036854775807 (TOML integers are 64-bit signed)";

/// A TOML syntax error, or a value of the wrong type or range at `key` (serde's path, like
/// `dataplane.burst` or `collective[0].member[1]`): one line, with the line and column, and
/// Rust's type names said in words ("u16" is "an integer from 0 to 65535").
fn syntax_error(path: &Path, text: &str, key: &str, e: &toml::de::Error) -> ConfigError {
    let mut msg = e.message().lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join("; ");
    // toml::Value's words for an integer it cannot hold (one above i64::MAX arrives as a u64,
    // one beyond u64 as an i128 or u128).
    let beyond_i64 = msg == "u64 value was too large"
        || msg == "integer number overflowed"
        || ((msg.contains(" as i128") || msg.contains(" as u128")) && msg.ends_with("expected any valid TOML value"));
    if beyond_i64 {
        let found = e.span().and_then(|s| text.get(s)).map(str::trim).unwrap_or_default();
        msg = format!("{INTEGER_RANGE}, found {found}");
    }
    // A key whose valid range is narrower than its Rust type's says that range, not the type's.
    if let Some(range) = valid_range(key) {
        if let Some(found) = msg.strip_prefix(INTEGER_RANGE) {
            msg = format!("expected {range}{found}");
        } else if let Some(stem) = INTEGER_TYPES.iter().find_map(|t| msg.strip_suffix(&format!("expected {t}"))) {
            msg = format!("{stem}expected {range}");
        }
    }
    let mut msg = in_words(&msg);
    if let Some(span) = e.span() {
        let before = text.get(..span.start).unwrap_or(text);
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        msg = format!("{msg} (line {line}, column {column})");
    }
    ConfigError::new(path, key, msg)
}

/// The Rust integer types of config keys, as serde names them in `expected u16`.
const INTEGER_TYPES: [&str; 7] = ["u8", "u16", "u32", "u64", "usize", "i32", "i64"];

/// The keys whose valid range is narrower than their Rust type's, index-free (`port[].mtu`
/// stands for `port[0].mtu`, `port[1].mtu`, ...), and that range in words: what a value of the
/// wrong type or beyond the type's range is told instead of the type's range. The bounds are
/// those [`validate`] checks (a bound that depends on other keys is said in words).
pub const VALID_RANGES: &[(&str, &str)] = &[
    ("mempool.mbufs", "an integer from 64 to 4294967295 (mbufs)"),
    ("mempool.cache", "an integer from 0 to 512 (mbufs), at most 2/3 of mempool.mbufs"),
    ("mempool.data_room", "an integer from 192 to 65535 (bytes)"),
    ("dataplane.burst", "an integer from 1 to 512 (packets)"),
    ("dataplane.tx_drain_us", "an integer from 0 to 1000000 (µs)"),
    ("dataplane.gradient_udp_port", "an integer from 1 to 65535 (a UDP port other than RoCEv2's 4791)"),
    ("dataplane.replay_idle_ms", "an integer from 1 to 9223372036854775807 (ms)"),
    ("dataplane.appliance_qpn", "an integer from 0 to 16777215 (a 24-bit QP number)"),
    ("dataplane.memory_limit_mb", "an integer from 0 to 17592186044415 (MiB)"),
    ("dataplane.stats_interval_ms", "0 (no stats line) or an integer from 100 to 9223372036854775807 (ms)"),
    ("port[].rx_desc", "an integer from 1 to 65535 (descriptors)"),
    ("port[].tx_desc", "an integer from 1 to 65535 (descriptors)"),
    ("port[].mtu", "an integer from 68 to 65535 (bytes)"),
    ("port[].qos.classes", "an integer from 1 to 8 (classes)"),
    ("port[].qos.rate", "an integer from 1 to 1099511627776 (bytes/s, 2^40)"),
    ("port[].qos.burst", "an integer from 1 to 536870912 (bytes, 2^29), at least a maximum frame + 24"),
    ("port[].qos.quantum", "an integer from 1 to 4294967295 (bytes)"),
    ("port[].qos.class[].weight", "an integer from 1 to 4294967295"),
    ("port[].qos.class[].ewma_log2", "an integer from 0 to 20"),
    ("meter[].size", "an integer from 1 to 1048576 (instances)"),
    (
        "collective[].tensor_elements",
        "an integer of at least 1 (elements), whose last chunk starts at an offset of at most 4294967295 (the 32-bit tensor_offset): at most 4294967296 in chunks of a power of two",
    ),
    ("collective[].chunk_elements", "an integer of at least 1 (elements), a chunk of at most 8900 bytes"),
    ("collective[].slot_timeout_ms", "an integer from 1 to 9223372036854775807 (ms)"),
    ("collective[].dscp", "an integer from 0 to 63"),
    ("collective[].member[].rank", "an integer from 0 to 4095, below the number of members"),
    ("collective[].member[].udp_port", "an integer from 1 to 65535 (a UDP port)"),
    ("collective[].member[].vlan", "an integer from 1 to 4094 (a VLAN ID)"),
    ("collective[].member[].qpn", "an integer from 0 to 16777215 (a 24-bit QP number)"),
];

/// [`VALID_RANGES`]' range of `key` (serde's path, like `port[2].mtu`), if it has one.
fn valid_range(key: &str) -> Option<&'static str> {
    let mut bare = String::with_capacity(key.len());
    let mut in_index = false;
    for c in key.chars() {
        match c {
            '[' => in_index = true,
            ']' => {
                in_index = false;
                bare.push_str("[]");
            }
            _ if !in_index => bare.push(c),
            _ => {}
        }
    }
    VALID_RANGES.iter().find(|(k, _)| *k == bare).map(|(_, r)| *r)
}

/// serde's message `msg` with a Rust type name it ends with (`expected u16`) said in words
/// (`expected an integer from 0 to 65535`).
pub(crate) fn in_words(msg: &str) -> String {
    let mut msg = msg.to_string();
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
    msg
}

#[cfg(test)]
mod tests;
