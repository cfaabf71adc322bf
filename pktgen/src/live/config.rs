//! `pktgen run`'s configuration: a TOML file in the appliance's style (`[eal]`, `[mempool]`,
//! `[[port]]`), with `[pktgen]` (lcores, burst) and `[[stream]]`s. Every error names the file,
//! the key (serde's path, like `stream[1].rate_pps`) and what was expected.

use crate::stream::{self, Kind, RoceFields, SizeMix, StreamSpec, IMIX, MAX_FRAME};
use crate::Endpoints;
use dataplane::config::ConfigError;
/// `[eal]`: the appliance's own section (EAL options; `--vdev`/`-a` for each port are added).
pub use dataplane::config::EalConfig;
use dataplane::wire::build::{IpAddrBytes, ROCEV2_PORT};
use dataplane::wire::EthernetAddress;
use serde::Deserialize;
use std::path::Path;

/// The whole file. Every section may be left out (its defaults).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// `[eal]`: EAL options.
    pub eal: EalConfig,
    /// `[mempool]`.
    pub mempool: MempoolConfig,
    /// `[pktgen]`: lcores, burst and run settings.
    pub pktgen: RunConfig,
    /// `[[port]]`: the DPDK ports, by index.
    #[serde(rename = "port")]
    pub ports: Vec<PortConfig>,
    /// `[[stream]]`: what to send; a stream's id is its index.
    #[serde(rename = "stream")]
    pub streams: Vec<StreamConfig>,
    /// `[[allreduce]]`: AllReduce workers emulated against the appliance.
    #[serde(rename = "allreduce")]
    pub allreduce: Vec<super::allreduce::AllreduceConfig>,
}

/// `[mempool]`: one pool for every port and lcore.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MempoolConfig {
    /// Mbufs in the pool.
    pub mbufs: u32,
    /// Per-lcore cache (mbufs), at most 512.
    pub cache: u32,
    /// Data room per mbuf (bytes, with the 128-byte headroom). Unset: the largest frame of any
    /// stream plus 128, and at least 2176.
    pub data_room: Option<u16>,
}

impl Default for MempoolConfig {
    fn default() -> Self {
        MempoolConfig { mbufs: d_mbufs(), cache: d_cache(), data_room: None }
    }
}

fn d_mbufs() -> u32 {
    16383
}
fn d_cache() -> u32 {
    256
}
fn d_burst() -> u16 {
    32
}
fn d_one() -> u16 {
    1
}
fn d_catch_up() -> u64 {
    50
}
fn d_drain() -> u64 {
    500
}

/// `[pktgen]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// The EAL lcores that send (each has one tx queue on every port: lane `i` uses queue `i`).
    /// Every stream is sent by all of them, each at its share of the rate, unless the stream
    /// names its own `lcores`. The main lcore receives and reports.
    #[serde(default)]
    pub tx_lcores: Vec<u32>,
    /// Packets per tx and rx burst, 1..=512.
    #[serde(default = "d_burst")]
    pub burst: u16,
    /// Seconds to run (the command line's `--duration` wins); unset: until SIGINT or SIGTERM.
    pub duration_s: Option<f64>,
    /// How long (ms) the receive side keeps polling after the senders stop, at most, for
    /// packets still in flight; it stops earlier once every stream with a receive port has
    /// received as many packets as were sent.
    #[serde(default = "d_drain")]
    pub drain_ms: u64,
    /// How far behind its rate (ms) a paced sender catches up after a stall (a full tx queue,
    /// a preempted lcore), in bursts; beyond that the debt is forgiven and shows as a shortfall.
    #[serde(default = "d_catch_up")]
    pub catch_up_ms: u64,
    /// For tests of the latency path: every TSC stamp is written this many µs in the past, so
    /// every latency measured is this much larger than the real one.
    #[serde(default)]
    pub stamp_offset_us: u64,
    /// How long (ms) to wait, at most, for every port's link to come up before anything is
    /// sent and the run's clock starts (a memif server waits for its client here, and a memif
    /// client for its server's socket: its start is retried within the wait); 0 (the default):
    /// no wait. A link still down then is an error naming the port (a client: the socket).
    #[serde(default)]
    pub link_wait_ms: u64,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            tx_lcores: Vec::new(),
            burst: d_burst(),
            duration_s: None,
            drain_ms: d_drain(),
            catch_up_ms: d_catch_up(),
            stamp_offset_us: 0,
            link_wait_ms: 0,
        }
    }
}

dataplane::port_config! {
    /// `[[port]]`: a vdev (like `net_ring0,nodeaction=r0:0:CREATE`) or a PCI device. Streams name
    /// their ports by `name`.
    pub struct PortConfig {
        name, vdev, pci,
        /// Rx queues the main lcore polls (a net_ring made by `nodeaction` loops tx queue `i` to rx
        /// queue `i`: give it as many rx queues as there are tx lcores).
        #[serde(default = "d_one")]
        pub rx_queues: u16,
        rx_desc, tx_desc,
    }
}

/// `imix = "standard"` or a list of `{ size, weight }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum ImixConfig {
    /// `"standard"`: 7:4:1 of 64, 594 and 1518 bytes with FCS (60, 590, 1514 without).
    Name(String),
    /// A weighted list.
    List(Vec<ImixEntry>),
}

/// One size of a configured mix.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImixEntry {
    /// Frame length (bytes without FCS).
    pub size: u32,
    /// Relative weight (packets), at least 1.
    pub weight: u32,
}

/// `[[stream]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamConfig {
    /// A label (default `stream<i>`).
    pub name: Option<String>,
    /// `udp` (default) or `rocev2`.
    #[serde(default = "d_kind")]
    pub kind: Kind,
    /// The port it is sent on (a port's name or index).
    pub port: PortRef,
    /// The port its packets come back on, if they are received (same or another port).
    pub rx_port: Option<PortRef>,
    /// The tx lcores that send it (default: all of `[pktgen] tx_lcores`), each at an equal
    /// share of the rate.
    pub lcores: Option<Vec<u32>>,
    /// Ethernet source (default `02:00:00:00:00:01`).
    pub src_mac: Option<String>,
    /// Ethernet destination (default `02:00:00:00:00:02`).
    pub dst_mac: Option<String>,
    /// 802.1Q VID (1..=4094), if tagged.
    pub vlan: Option<u16>,
    /// IP source of flow 0 (IPv4 or IPv6; default `10.0.0.1`).
    pub src_ip: Option<String>,
    /// IP destination (default `10.0.0.2`, or `fd00::2` when the source is IPv6).
    pub dst_ip: Option<String>,
    /// UDP source port of flow 0 (default 1024).
    #[serde(default = "d_sport")]
    pub src_port: u16,
    /// UDP destination port (default 9, discard; RoCEv2 is always 4791).
    pub dst_port: Option<u16>,
    /// DSCP (0..=63).
    #[serde(default)]
    pub dscp: u8,
    /// ECN (0..=3).
    #[serde(default)]
    pub ecn: u8,
    /// TTL (default 64).
    #[serde(default = "d_ttl")]
    pub ttl: u8,
    /// Flows: flow `f` adds `f` to the source IP, the UDP source port (and the DETH source QP).
    #[serde(default = "d_flows")]
    pub flows: u32,
    /// One frame length (bytes without FCS, 60..=9216).
    pub size: Option<u32>,
    /// A mix of lengths: `"standard"` or a list of `{ size, weight }`.
    pub imix: Option<ImixConfig>,
    /// A sweep: each length for `step_s` seconds in turn.
    pub sweep: Option<Vec<u32>>,
    /// Seconds per length of a sweep (default 1).
    pub step_s: Option<f64>,
    /// Target rate in packets per second (all lanes together).
    pub rate_pps: Option<f64>,
    /// Target rate in bits per second (all lanes together), at the layer of `rate_layer`.
    pub rate_bps: Option<f64>,
    /// `l2` (default: frames without FCS) or `l1` (24 more bytes per frame: FCS, preamble and
    /// SFD, inter-frame gap), for `rate_bps` and the reported Gbit/s.
    #[serde(default)]
    pub rate_layer: Layer,
    /// RoCEv2: BTH destination QP (default 1).
    #[serde(default = "d_qp")]
    pub dest_qp: u32,
    /// RoCEv2: DETH source QP of flow 0 (default 0x100).
    #[serde(default = "d_src_qp")]
    pub src_qp: u32,
    /// RoCEv2: DETH Q_Key (default 0x11111111).
    #[serde(default = "d_qkey")]
    pub qkey: u32,
    /// RoCEv2: BTH P_Key (default 0xffff).
    #[serde(default = "d_pkey")]
    pub pkey: u16,
    /// pcap streams: the capture file (classic pcap, Ethernet; relative to the working
    /// directory), sent as captured ([`super::replay`]).
    pub file: Option<String>,
    /// pcap streams: passes over the file (default 1; 0: until the run ends).
    pub loops: Option<u64>,
    /// pcap streams: timing-faithful to the capture's timestamps, this many times faster
    /// (unset: full rate, or `rate_pps`/`rate_bps`).
    pub speed: Option<f64>,
}

fn d_kind() -> Kind {
    Kind::Udp
}
fn d_sport() -> u16 {
    1024
}
fn d_ttl() -> u8 {
    64
}
fn d_flows() -> u32 {
    1
}
fn d_qp() -> u32 {
    1
}
fn d_src_qp() -> u32 {
    0x100
}
fn d_qkey() -> u32 {
    0x1111_1111
}
fn d_pkey() -> u16 {
    0xffff
}

/// A port by name or index.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum PortRef {
    /// Its index in `[[port]]`.
    Index(u16),
    /// Its name.
    Name(String),
}

/// The layer rates count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Layer {
    /// Frames without FCS.
    #[default]
    L2,
    /// Frames plus 24 bytes (FCS, preamble and SFD, inter-frame gap).
    L1,
}

impl Layer {
    /// Bytes a frame of `len` bytes (without FCS) counts for.
    #[inline(always)]
    pub fn bytes(self, len: u64) -> u64 {
        match self {
            Layer::L2 => len,
            Layer::L1 => len + stream::L1_OVERHEAD,
        }
    }
}

/// A target rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rate {
    /// As fast as the port takes them.
    Full,
    /// Packets per second.
    Pps(f64),
    /// Bits per second at a layer.
    Bps(f64, Layer),
}

/// A stream, checked and resolved.
#[derive(Debug, Clone)]
pub struct Stream {
    /// Its label.
    pub name: String,
    /// Headers and flows.
    pub spec: StreamSpec,
    /// Frame lengths (bytes without FCS).
    pub sizes: Vec<usize>,
    /// How the lengths alternate.
    pub mix: SizeMix,
    /// Target rate of the whole stream.
    pub rate: Rate,
    /// The layer Gbit/s are reported at.
    pub layer: Layer,
    /// Tx port index.
    pub port: u16,
    /// Rx port index, if received.
    pub rx_port: Option<u16>,
    /// The tx lcores that send it.
    pub lcores: Vec<u32>,
    /// A pcap stream's file and timing (`kind = "pcap"`).
    pub replay: Option<super::replay::Replay>,
}

/// A checked configuration.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// As parsed.
    pub config: Config,
    /// Port labels, by index.
    pub port_names: Vec<String>,
    /// The streams.
    pub streams: Vec<Stream>,
    /// The AllReduce emulations.
    pub allreduce: Vec<super::allreduce::Emulation>,
    /// Data room per mbuf (bytes).
    pub data_room: u16,
    /// The file it was read from (as given), naming it in the errors found once the EAL runs
    /// (lcores it does not have).
    pub file: std::path::PathBuf,
}

/// Reads and checks the file at `path`.
///
/// # Errors
/// A [`ConfigError`] naming the file, the key and what was expected.
pub fn load(path: &Path) -> Result<Loaded, ConfigError> {
    let text =
        std::fs::read_to_string(path).map_err(|e| ConfigError::new(path, "", format!("cannot read the file: {e}")))?;
    load_str(&text, path)
}

/// Parses and checks `text`; `path` names it in errors.
///
/// # Errors
/// As [`load`].
pub fn load_str(text: &str, path: &Path) -> Result<Loaded, ConfigError> {
    check(dataplane::config::deserialize(text, path)?, path)
}

fn parse_mac(path: &Path, key: &str, s: &Option<String>, default: [u8; 6]) -> Result<EthernetAddress, ConfigError> {
    let Some(s) = s else {
        return Ok(EthernetAddress(default));
    };
    let parts: Vec<&str> = s.split(':').collect();
    let bytes: Option<Vec<u8>> =
        parts.iter().map(|p| u8::from_str_radix(p, 16).ok().filter(|_| p.len() == 2)).collect();
    match bytes {
        Some(b) if b.len() == 6 => Ok(EthernetAddress([b[0], b[1], b[2], b[3], b[4], b[5]])),
        _ => Err(ConfigError::new(path, key, format!("expected a MAC address like 02:00:00:00:00:01, found {s:?}"))),
    }
}

fn parse_ip(path: &Path, key: &str, s: &str) -> Result<IpAddrBytes, ConfigError> {
    s.parse::<std::net::IpAddr>()
        .map(IpAddrBytes::from_std)
        .map_err(|_| ConfigError::new(path, key, format!("expected an IPv4 or IPv6 address, found {s:?}")))
}

fn check(config: Config, path: &Path) -> Result<Loaded, ConfigError> {
    let err = |key: String, msg: String| ConfigError::new(path, key, msg);
    let run = &config.pktgen;
    if run.burst == 0 || run.burst > 512 {
        return Err(err("pktgen.burst".into(), format!("expected 1 to 512 packets, found {}", run.burst)));
    }
    if let Some(d) = run.duration_s {
        if !(d > 0.0 && d.is_finite()) {
            return Err(err("pktgen.duration_s".into(), format!("expected seconds above 0, found {d}")));
        }
    }
    for (i, l) in run.tx_lcores.iter().enumerate() {
        if run.tx_lcores[..i].contains(l) {
            return Err(err(format!("pktgen.tx_lcores[{i}]"), format!("lcore {l} is listed twice")));
        }
    }
    if run.tx_lcores.len() > 255 {
        return Err(err("pktgen.tx_lcores".into(), "expected at most 255 lcores".into()));
    }
    if config.mempool.cache > 512 {
        return Err(err("mempool.cache".into(), format!("expected at most 512 mbufs, found {}", config.mempool.cache)));
    }
    let mut port_names = Vec::new();
    for (i, p) in config.ports.iter().enumerate() {
        let key = format!("port[{i}]");
        match (&p.vdev, &p.pci) {
            (Some(_), None) | (None, Some(_)) => {}
            _ => return Err(err(key, "expected exactly one of `vdev` and `pci`".into())),
        }
        if p.device_name().is_empty() {
            return Err(err(format!("{key}.vdev"), "expected a device name, like net_ring0,...".into()));
        }
        if p.rx_queues == 0 {
            return Err(err(format!("{key}.rx_queues"), "expected at least 1".into()));
        }
        let name = p.name.clone().unwrap_or_else(|| format!("port{i}"));
        if port_names.contains(&name) {
            return Err(err(format!("{key}.name"), format!("the name {name:?} is already used by another port")));
        }
        port_names.push(name);
    }
    if config.streams.is_empty() && config.allreduce.is_empty() {
        return Err(err("stream".into(), "expected at least one [[stream]] or [[allreduce]]".into()));
    }
    if config.streams.len() > u16::MAX as usize {
        return Err(err("stream".into(), "expected at most 65535 streams".into()));
    }
    let find_port = |key: String, r: &PortRef| -> Result<u16, ConfigError> {
        match r {
            PortRef::Index(i) if (*i as usize) < port_names.len() => Ok(*i),
            PortRef::Name(n) if port_names.contains(n) => Ok(port_names.iter().position(|x| x == n).unwrap() as u16),
            _ => Err(err(
                key,
                format!("expected the name or index of a [[port]] (there are: {})", port_names.join(", ")),
            )),
        }
    };
    let mut streams = Vec::new();
    let mut largest = 0usize;
    for (i, s) in config.streams.iter().enumerate() {
        let k = |f: &str| format!("stream[{i}].{f}");
        let name = s.name.clone().unwrap_or_else(|| format!("stream{i}"));
        if streams.iter().any(|x: &Stream| x.name == name) {
            return Err(err(k("name"), format!("the name {name:?} is already used by another stream")));
        }
        let port = find_port(k("port"), &s.port)?;
        let rx_port = s.rx_port.as_ref().map(|r| find_port(k("rx_port"), r)).transpose()?;
        let lcores = match &s.lcores {
            Some(l) => {
                for (j, c) in l.iter().enumerate() {
                    if !run.tx_lcores.contains(c) {
                        return Err(err(
                            format!("stream[{i}].lcores[{j}]"),
                            format!("lcore {c} is not one of [pktgen] tx_lcores {:?}", run.tx_lcores),
                        ));
                    }
                }
                if l.is_empty() {
                    return Err(err(k("lcores"), "expected at least one lcore".into()));
                }
                l.clone()
            }
            None if run.tx_lcores.is_empty() => {
                return Err(err("pktgen.tx_lcores".into(), "expected at least one tx lcore, like [1]".into()))
            }
            None => run.tx_lcores.clone(),
        };
        let mut lcores = lcores;
        let replay = super::replay::resolve(s, i, path, &mut lcores)?;
        let src_ip = parse_ip(path, &k("src_ip"), s.src_ip.as_deref().unwrap_or("10.0.0.1"))?;
        let dst_default = if src_ip.is_v6() { "fd00::2" } else { "10.0.0.2" };
        let dst_ip = parse_ip(path, &k("dst_ip"), s.dst_ip.as_deref().unwrap_or(dst_default))?;
        if src_ip.is_v6() != dst_ip.is_v6() {
            return Err(err(k("dst_ip"), "expected an address of the source's family".into()));
        }
        if let Some(v) = s.vlan {
            if v == 0 || v > 4094 {
                return Err(err(k("vlan"), format!("expected a VID from 1 to 4094, found {v}")));
            }
        }
        if s.dscp > 63 {
            return Err(err(k("dscp"), format!("expected 0 to 63, found {}", s.dscp)));
        }
        if s.ecn > 3 {
            return Err(err(k("ecn"), format!("expected 0 to 3, found {}", s.ecn)));
        }
        if s.flows == 0 || s.flows > 65536 {
            return Err(err(k("flows"), format!("expected 1 to 65536 flows, found {}", s.flows)));
        }
        if s.src_port as u32 + s.flows - 1 > u16::MAX as u32 {
            return Err(err(
                k("flows"),
                format!("src_port {} + {} flows goes past UDP port 65535", s.src_port, s.flows),
            ));
        }
        let dst_port = match (s.kind, s.dst_port) {
            (Kind::Rocev2, Some(p)) if p != ROCEV2_PORT => {
                return Err(err(k("dst_port"), format!("RoCEv2 is UDP port 4791, found {p}")))
            }
            (Kind::Rocev2, _) => ROCEV2_PORT,
            (Kind::Udp | Kind::Pcap, Some(p)) => p,
            (Kind::Udp | Kind::Pcap, None) => 9,
        };
        for (f, v) in [("dest_qp", s.dest_qp), ("src_qp", s.src_qp)] {
            if v > 0xff_ffff {
                return Err(err(k(f), format!("expected a 24-bit QP number, found {v:#x}")));
            }
        }
        let spec = StreamSpec {
            id: i as u16,
            kind: s.kind,
            ends: Endpoints {
                src_mac: parse_mac(path, &k("src_mac"), &s.src_mac, [2, 0, 0, 0, 0, 1])?,
                dst_mac: parse_mac(path, &k("dst_mac"), &s.dst_mac, [2, 0, 0, 0, 0, 2])?,
                vlan: s.vlan,
                src_ip,
                dst_ip,
            },
            src_port: s.src_port,
            dst_port,
            dscp: s.dscp,
            ecn: s.ecn,
            ttl: s.ttl,
            flows: s.flows,
            roce: RoceFields { dest_qp: s.dest_qp, src_qp: s.src_qp, qkey: s.qkey, pkey: s.pkey },
        };
        let (sizes, mix, size_key): (Vec<usize>, SizeMix, String) = match (&s.size, &s.imix, &s.sweep) {
            // The file's distinct frame lengths, as sent (longer ones are skipped).
            _ if replay.is_some() => (
                replay.as_ref().map_or(Vec::new(), |r| {
                    r.info.sizes.iter().copied().filter(|&n| n > 0 && n <= r.max_frame).collect()
                }),
                SizeMix::Fixed,
                k("file"),
            ),
            (Some(n), None, None) => (vec![*n as usize], SizeMix::Fixed, k("size")),
            (None, Some(ImixConfig::Name(n)), None) if n == "standard" => (
                IMIX.iter().map(|x| x.0).collect(),
                SizeMix::Mix { pattern: stream::weighted_pattern(&IMIX.map(|x| x.1)) },
                k("imix"),
            ),
            (None, Some(ImixConfig::Name(n)), None) => {
                return Err(err(
                    k("imix"),
                    format!("expected \"standard\" or a list of {{ size, weight }}, found {n:?}"),
                ))
            }
            (None, Some(ImixConfig::List(l)), None) => {
                if l.is_empty() || l.len() > 64 {
                    return Err(err(k("imix"), "expected 1 to 64 { size, weight } entries".into()));
                }
                if let Some(j) = l.iter().position(|e| e.weight == 0 || e.weight > 1000) {
                    return Err(err(format!("stream[{i}].imix[{j}].weight"), "expected 1 to 1000".into()));
                }
                let w: Vec<u32> = l.iter().map(|e| e.weight).collect();
                (
                    l.iter().map(|e| e.size as usize).collect(),
                    SizeMix::Mix { pattern: stream::weighted_pattern(&w) },
                    k("imix"),
                )
            }
            (None, None, Some(l)) => {
                if l.is_empty() || l.len() > 256 {
                    return Err(err(k("sweep"), "expected 1 to 256 frame lengths".into()));
                }
                let step_s = s.step_s.unwrap_or(1.0);
                if !(step_s > 0.0 && step_s.is_finite()) {
                    return Err(err(k("step_s"), format!("expected seconds above 0, found {step_s}")));
                }
                (l.iter().map(|&x| x as usize).collect(), SizeMix::Sweep { step_s }, k("sweep"))
            }
            _ => return Err(err(format!("stream[{i}]"), "expected exactly one of `size`, `imix` and `sweep`".into())),
        };
        if s.step_s.is_some() && s.sweep.is_none() {
            return Err(err(k("step_s"), "only a `sweep` takes step_s".into()));
        }
        let min = spec.min_frame_len();
        for (j, &n) in sizes.iter().enumerate() {
            if replay.is_none() && (n < min || n > MAX_FRAME) {
                let key =
                    if sizes.len() == 1 && s.size.is_some() { size_key.clone() } else { format!("{size_key}[{j}]") };
                return Err(err(
                    key,
                    format!(
                        "expected a frame length from {min} to {MAX_FRAME} bytes (without FCS; {min} is the least this \
                         stream's headers, its 16-byte stamp{} fit in), found {n}",
                        if s.kind == Kind::Rocev2 { " and the ICRC" } else { "" }
                    ),
                ));
            }
            largest = largest.max(n);
        }
        if sizes.len() as u64 * s.flows as u64 > 262_144 {
            return Err(err(
                k("flows"),
                format!("{} flows x {} frame lengths: expected at most 262144 templates", s.flows, sizes.len()),
            ));
        }
        let rate = match (s.rate_pps, s.rate_bps) {
            (None, None) => Rate::Full,
            (Some(p), None) if p > 0.0 && p.is_finite() => Rate::Pps(p),
            (None, Some(b)) if b > 0.0 && b.is_finite() => Rate::Bps(b, s.rate_layer),
            (Some(p), None) => {
                return Err(err(k("rate_pps"), format!("expected packets per second above 0, found {p}")))
            }
            (None, Some(b)) => return Err(err(k("rate_bps"), format!("expected bits per second above 0, found {b}"))),
            (Some(_), Some(_)) => {
                return Err(err(format!("stream[{i}]"), "expected at most one of `rate_pps` and `rate_bps`".into()))
            }
        };
        if let (Some(_), Some(rp)) = (&replay, rx_port) {
            if let Some(o) = streams.iter().find(|x: &&Stream| x.replay.is_some() && x.rx_port == Some(rp)) {
                return Err(err(
                    k("rx_port"),
                    format!(
                        "pcap stream {:?} already receives on this port (frames without a stamp cannot be told apart)",
                        o.name
                    ),
                ));
            }
        }
        streams.push(Stream { name, spec, sizes, mix, rate, layer: s.rate_layer, port, rx_port, lcores, replay });
    }
    let allreduce = super::allreduce::check(&config.allreduce, path, &find_port)?;
    for (i, a) in allreduce.iter().enumerate() {
        if let Some(j) = streams.iter().position(|s| s.port == a.port || s.rx_port == Some(a.port)) {
            return Err(err(
                format!("allreduce[{i}].port"),
                format!("stream[{j}] uses this port too: an [[allreduce]] needs a port of its own"),
            ));
        }
        if let Some(l) = a.lcore.filter(|l| run.tx_lcores.contains(l)) {
            return Err(err(
                format!("allreduce[{i}].lcore"),
                format!(
                    "lcore {l} is one of [pktgen] tx_lcores {:?}: an emulation needs a worker lcore of its own",
                    run.tx_lcores
                ),
            ));
        }
        largest = largest.max(a.max_frame_len());
    }
    let need = largest as u32 + 128;
    let data_room = match config.mempool.data_room {
        Some(d) if (d as u32) < need => {
            return Err(err(
                "mempool.data_room".into(),
                format!(
                "expected at least {need} bytes (the largest frame, {largest} bytes, plus 128 of headroom), found {d}"
            ),
            ))
        }
        Some(d) => d,
        None => need.max(2176) as u16,
    };
    Ok(Loaded { config, port_names, streams, allreduce, data_room, file: path.to_path_buf() })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
[eal]
args = ["--no-huge"]
[pktgen]
tx_lcores = [1]
[[port]]
name = "p0"
vdev = "net_null0"
"#;

    fn load_err(extra: &str) -> String {
        load_str(&format!("{BASE}{extra}"), Path::new("x.toml")).unwrap_err().to_string()
    }

    #[test]
    fn a_full_config_loads() {
        let l = load_str(
            &format!(
                "{BASE}[[stream]]\nname = \"a\"\nport = \"p0\"\nrx_port = 0\nsize = 64\nflows = 100\nrate_pps = 1e4\n\
                 [[stream]]\nport = 0\nimix = \"standard\"\nrate_bps = 1e9\nrate_layer = \"l1\"\n\
                 [[stream]]\nport = 0\nsweep = [64, 1500, 9000]\nstep_s = 0.5\n\
                 [[stream]]\nkind = \"rocev2\"\nport = 0\nsrc_ip = \"fd00::1\"\nimix = [{{ size = 128, weight = 3 }}, {{ size = 1024, weight = 1 }}]\n"
            ),
            Path::new("x.toml"),
        )
        .unwrap();
        assert_eq!(l.streams.len(), 4);
        assert_eq!(l.streams[0].rate, Rate::Pps(1e4));
        assert_eq!(l.streams[0].rx_port, Some(0));
        assert_eq!(l.streams[1].sizes, vec![60, 590, 1514]);
        assert_eq!(l.streams[1].rate, Rate::Bps(1e9, Layer::L1));
        assert_eq!(l.streams[3].spec.dst_port, 4791);
        assert_eq!(l.streams[3].sizes, vec![128, 1024]);
        assert_eq!(l.streams[3].mix, SizeMix::Mix { pattern: vec![0, 0, 1, 0] });
        assert_eq!(l.streams[2].rate, Rate::Full);
        assert_eq!(l.streams[2].mix, SizeMix::Sweep { step_s: 0.5 });
        assert_eq!(l.data_room, 9128);
    }

    #[test]
    fn errors_name_file_key_and_expectation() {
        let e = load_err("[[stream]]\nport = \"p9\"\nsize = 64\n");
        assert!(e.starts_with("x.toml: key `stream[0].port`: expected the name or index of a [[port]]"), "{e}");
        let e = load_err("[[stream]]\nport = 0\nsize = 64\nbogus = 1\n");
        assert!(e.contains("x.toml") && e.contains("unknown field `bogus`"), "{e}");
        let e = load_err("[[port]]\nvdev = \"net_null1\"\nmtu = 9000\n[[stream]]\nport = 0\nsize = 64\n");
        assert!(
            e.contains(
                "key `port[1].mtu`: unknown field `mtu`, expected one of `name`, `vdev`, `pci`, `rx_queues`, \
                 `rx_desc`, `tx_desc`"
            ),
            "{e}"
        );
        let e = load_err("[[stream]]\nport = 0\nsize = 64\nrate_pps = \"fast\"\n");
        assert!(e.contains("key `stream[0].rate_pps`") && e.contains("line"), "{e}");
        // Rust's type names in words, as the appliance's config says them.
        let e = load_err("[[stream]]\nport = 0\nsize = 64\nsrc_port = -1\n");
        assert!(
            e.contains("key `stream[0].src_port`") && e.contains("expected an integer from 0 to 65535 (line"),
            "{e}"
        );
        let e = load_err("[[stream]]\nport = 0\nkind = \"rocev2\"\nsize = 64\n");
        assert!(e.contains("key `stream[0].size`: expected a frame length from 82 to 9216"), "{e}");
        let e = load_err("[[stream]]\nport = 0\nkind = \"rocev2\"\nsrc_ip = \"fd00::1\"\nimix = \"standard\"\n");
        assert!(e.contains("key `stream[0].imix[0]`: expected a frame length from 102"), "{e}");
        let e = load_err("[[stream]]\nport = 0\nsweep = [64, 10000]\n");
        assert!(e.contains("key `stream[0].sweep[1]`"), "{e}");
        let e = load_err("[[stream]]\nport = 0\nsize = 64\nimix = \"standard\"\n");
        assert!(e.contains("key `stream[0]`: expected exactly one of `size`, `imix` and `sweep`"), "{e}");
        let e = load_err("[[stream]]\nport = 0\nsize = 64\nrate_pps = 0\n");
        assert!(e.contains("key `stream[0].rate_pps`: expected packets per second above 0"), "{e}");
        let e = load_err("[[stream]]\nport = 0\nsize = 64\nlcores = [3]\n");
        assert!(e.contains("key `stream[0].lcores[0]`: lcore 3 is not one of"), "{e}");
        let e = load_err("[[stream]]\nport = 0\nsize = 64\nsrc_port = 65535\nflows = 2\n");
        assert!(e.contains("key `stream[0].flows`"), "{e}");
        let e = load_err("[[stream]]\nport = 0\nsize = 64\ndst_ip = \"fd00::1\"\n");
        assert!(e.contains("key `stream[0].dst_ip`: expected an address of the source's family"), "{e}");
        let e = load_err("[mempool]\ndata_room = 1000\n[[stream]]\nport = 0\nsize = 1514\n");
        assert!(e.contains("key `mempool.data_room`: expected at least 1642"), "{e}");
    }
}
