//! `[port.qos]`: a port's egress scheduler (strict priority or DWRR between up to 8 traffic
//! classes, a port shaper, per-class RED/ECN marking) and its DSCP and PCP class maps, validated
//! into a [`sched::PortConfig`] and a [`ClassMap`]. Errors name `port[i].qos.KEY`.
//!
//! Units: bytes and bytes per second, a frame counted without FCS; the shaper adds 24 bytes per
//! frame (FCS, preamble, SFD, inter-frame gap: [`sched::FRAME_OVERHEAD`]). The datapath's clock
//! is µs, so the schedulers run at `hz` = 1e6.

use super::ConfigError;
use crate::sched::{self, ClassConfig, ClassMap, MarkPoint, Policy, RedConfig, MAX_CLASSES, P_ONE};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

/// The schedulers' clock: µs, the datapath's (`Meta.timestamp_us`).
pub const QOS_HZ: u64 = 1_000_000;
/// Default per-class capacity (bytes).
pub const DEFAULT_CAPACITY_BYTES: u64 = 256 * 1024;

/// `[port.qos]` as written in the file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QosConfig {
    /// Traffic classes, 1..=8 (default: the number of `[[port.qos.class]]` tables, or 1).
    pub classes: Option<usize>,
    /// `"strict"` (default; the highest class first) or `"dwrr"`.
    pub policy: Option<String>,
    /// Shaper rate, bytes per second of line (each frame + 24 bytes); absent: unshaped.
    pub rate: Option<u64>,
    /// Shaper bucket (bytes): the largest burst at line rate. Default: the larger of one
    /// maximum frame + 24 and 1 ms at `rate`.
    pub burst: Option<u64>,
    /// DWRR bytes per weight unit per round (default one maximum frame + 24).
    pub quantum: Option<u32>,
    /// Where RED marks: `"enqueue"` (default) or `"dequeue"`.
    pub mark_at: Option<String>,
    /// Seed of the marking decisions' random source (default 1).
    pub seed: Option<u64>,
    /// DSCP to class: 64 classes (index = DSCP), or a table `{ 46 = 7, 26 = 3 }` (the rest 0).
    pub dscp_map: Option<MapConfig>,
    /// PCP (outer VLAN tag) to class: 8 classes, or a table `{ 5 = 4 }` (the rest 0).
    pub pcp_map: Option<MapConfig>,
    /// `[[port.qos.class]]`: per class, in class order (class 0 first).
    #[serde(rename = "class", default)]
    pub class: Vec<QosClassConfig>,
}

/// A class map as written: a full list, or a table of code point to class.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum MapConfig {
    /// Class of each code point, in order.
    List(Vec<u8>),
    /// Code point (a decimal key) to class.
    Table(BTreeMap<String, u8>),
}

/// `[[port.qos.class]]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QosClassConfig {
    /// Queue capacity in bytes (frames without FCS); default 262144.
    pub capacity_bytes: Option<u64>,
    /// DWRR weight, at least 1 (default 1).
    pub weight: Option<u32>,
    /// RED: depth (bytes) below which nothing is marked. With `kmax`, turns marking on.
    pub kmin: Option<u64>,
    /// RED: depth (bytes) from which every packet is marked.
    pub kmax: Option<u64>,
    /// RED: marking probability just below `kmax`, 0..=1 (default 1).
    pub pmax: Option<f64>,
    /// RED: average weight 2^-ewma_log2 (0, the default, uses the instantaneous depth).
    pub ewma_log2: Option<u8>,
}

/// What a frame adds to its port's MTU (bytes, without FCS): the Ethernet header and two VLAN
/// tags (an 802.1ad and an 802.1Q, which the appliance's actions may push).
pub const MTU_FRAME_OVERHEAD: u32 = 14 + 2 * 4;

/// The largest frame a port sends (bytes, without FCS): with an `mtu`, that MTU's frame with
/// two VLAN tags (`mtu` + [`MTU_FRAME_OVERHEAD`]; a jumbo frame travels as a chain of mbufs),
/// else what one mbuf holds (`mbuf_frame`: the data room less the headroom). A port's scheduler
/// takes no longer frame.
pub fn port_max_frame(mbuf_frame: u32, mtu: Option<u16>) -> u32 {
    mtu.map_or(mbuf_frame, |m| u32::from(m) + MTU_FRAME_OVERHEAD)
}

/// The fewest mbufs a class of `capacity_bytes` on a port whose frames reach `max_frame` bytes
/// is ever cut to, with `mbuf_frame` bytes of frame per mbuf: its capacity in full mbuf frames
/// ([`memory::class_mbufs_floor`]) and the chains' extra mbufs
/// ([`memory::class_chain_mbufs`]). The start sizes the pool with it (before zero-copy results
/// multiply it).
///
/// [`memory::class_mbufs_floor`]: super::memory::class_mbufs_floor
/// [`memory::class_chain_mbufs`]: super::memory::class_chain_mbufs
pub fn class_floor_mbufs(capacity_bytes: u64, max_frame: u32, mbuf_frame: u32) -> u64 {
    super::memory::class_mbufs_floor(capacity_bytes, mbuf_frame).saturating_add(super::memory::class_chain_mbufs(
        max_frame,
        capacity_bytes,
        mbuf_frame,
    ))
}

/// The largest `capacity_bytes` whose [`class_floor_mbufs`] is at most `mbufs`.
fn max_capacity_bytes(max_frame: u32, mbuf_frame: u32, mbufs: u64) -> u64 {
    let (mut lo, mut hi) = (0u64, u64::MAX);
    while lo < hi {
        let mid = hi - (hi - lo) / 2;
        if class_floor_mbufs(mid, max_frame, mbuf_frame) <= mbufs {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

/// Validates port `port`'s `[port.qos]` into a scheduler configuration at [`QOS_HZ`] and its
/// class map. `max_frame` is the largest frame the port sends ([`port_max_frame`], bytes);
/// `mbuf_frame` what one mbuf holds (bytes: the data room less the headroom); `mbufs` (the
/// pool) bounds a queue's packets, and a class's capacity in full frames
/// ([`class_floor_mbufs`]).
///
/// # Errors
/// The first fault, naming `port[i].qos.KEY` (or `port[i].qos.class[j].KEY`) and what was
/// expected.
pub(super) fn check(
    q: &QosConfig,
    port: usize,
    max_frame: u32,
    mbuf_frame: u32,
    mbufs: u32,
    path: &Path,
) -> Result<(sched::PortConfig, ClassMap), ConfigError> {
    let err = |k: &str, msg: String| ConfigError::new(path, format!("port[{port}].qos.{k}"), msg);
    let n = q.classes.unwrap_or(q.class.len().max(1));
    if n == 0 || n > MAX_CLASSES {
        return Err(err("classes", format!("expected 1..={MAX_CLASSES} classes, found {n}")));
    }
    if !q.class.is_empty() && q.class.len() != n {
        return Err(err(
            "class",
            format!("expected {n} [[port.qos.class]] tables (one per class, or none), found {}", q.class.len()),
        ));
    }
    let policy = match q.policy.as_deref() {
        None | Some("strict") => Policy::StrictPriority,
        Some("dwrr") => Policy::Dwrr,
        Some(o) => return Err(err("policy", format!("expected \"strict\" or \"dwrr\", found {o:?}"))),
    };
    let mark_point = match q.mark_at.as_deref() {
        None | Some("enqueue") => MarkPoint::Enqueue,
        Some("dequeue") => MarkPoint::Dequeue,
        Some(o) => return Err(err("mark_at", format!("expected \"enqueue\" or \"dequeue\", found {o:?}"))),
    };
    let wire_max = u64::from(max_frame) + u64::from(sched::FRAME_OVERHEAD);
    if q.rate == Some(0) {
        return Err(err("rate", "expected at least 1 byte/s (leave rate out for an unshaped port)".into()));
    }
    if q.rate.is_none() && q.burst.is_some() {
        return Err(err("burst", "a burst needs a rate: set rate or leave burst out".into()));
    }
    use crate::meter::bucket::{MAX_RATE, MAX_SIZE};
    if let Some(r) = q.rate.filter(|r| *r > MAX_RATE) {
        return Err(err("rate", format!("expected at most {MAX_RATE} bytes/s (2^40), found {r}")));
    }
    if let Some(b) = q.burst.filter(|b| *b > MAX_SIZE) {
        return Err(err("burst", format!("expected at most {MAX_SIZE} bytes (2^29), found {b}")));
    }
    let bucket = match q.burst {
        Some(b) if b < wire_max => {
            return Err(err(
                "burst",
                format!(
                    "expected at least one maximum frame on the wire ({max_frame} + 24 = {wire_max} bytes), found {b}"
                ),
            ))
        }
        Some(b) => b,
        // 1 ms at the rate, within the bucket's limit.
        None => wire_max.max(q.rate.unwrap_or(0) / 1000).min(MAX_SIZE.max(wire_max)),
    };
    if q.quantum == Some(0) {
        return Err(err("quantum", "expected at least 1 byte".into()));
    }
    if q.quantum.is_some() && policy != Policy::Dwrr {
        // Strict priority serves the highest backlogged class whole: no round, no quantum.
        return Err(err("quantum", "a quantum is for policy = \"dwrr\" (strict priority has no rounds)".into()));
    }
    let mut classes = Vec::with_capacity(n);
    let defaults = QosClassConfig::default();
    for c in 0..n {
        let cc = q.class.get(c).unwrap_or(&defaults);
        let cerr = |k: &str, msg: String| err(&format!("class[{c}].{k}"), msg);
        let capacity_bytes = cc.capacity_bytes.unwrap_or(DEFAULT_CAPACITY_BYTES);
        if capacity_bytes < u64::from(max_frame) {
            return Err(cerr(
                "capacity_bytes",
                format!("expected at least one maximum frame ({max_frame} bytes), found {capacity_bytes}"),
            ));
        }
        // A class is never cut below its capacity in full frames: more than the whole pool can
        // never be met (the pool's check at start would ask for ever more mbufs).
        let floor = class_floor_mbufs(capacity_bytes, max_frame, mbuf_frame);
        if floor > u64::from(mbufs) {
            return Err(cerr(
                "capacity_bytes",
                format!(
                    "expected at most {} bytes: the class holds its capacity in frames of up to {mbuf_frame} bytes \
                     per mbuf{}, {floor} mbufs, more than mempool.mbufs ({mbufs}); found {capacity_bytes}",
                    max_capacity_bytes(max_frame, mbuf_frame, u64::from(mbufs)),
                    if max_frame > mbuf_frame { " (and one more per mbuf of a jumbo chain)" } else { "" }
                ),
            ));
        }
        let weight = cc.weight.unwrap_or(1);
        if weight == 0 {
            return Err(cerr("weight", "expected at least 1".into()));
        }
        if cc.weight.is_some() && policy != Policy::Dwrr {
            return Err(cerr("weight", "weights are for policy = \"dwrr\"".into()));
        }
        let red = match (cc.kmin, cc.kmax) {
            (None, None) => {
                for (k, set) in [("pmax", cc.pmax.is_some()), ("ewma_log2", cc.ewma_log2.is_some())] {
                    if set {
                        return Err(cerr(k, "RED needs kmin and kmax (bytes)".into()));
                    }
                }
                None
            }
            (None, Some(_)) => return Err(cerr("kmin", "expected kmin (bytes) with kmax".into())),
            (Some(_), None) => return Err(cerr("kmax", "expected kmax (bytes) with kmin".into())),
            (Some(kmin), Some(kmax)) => {
                if kmin > kmax {
                    return Err(cerr("kmin", format!("expected kmin <= kmax ({kmax} bytes), found {kmin}")));
                }
                let pmax = cc.pmax.unwrap_or(1.0);
                if !(0.0..=1.0).contains(&pmax) {
                    return Err(cerr("pmax", format!("expected a probability 0..=1, found {pmax}")));
                }
                let ewma_log2 = cc.ewma_log2.unwrap_or(0);
                if ewma_log2 > sched::red::MAX_EWMA_LOG2 {
                    return Err(cerr(
                        "ewma_log2",
                        format!("expected 0..={}, found {ewma_log2}", sched::red::MAX_EWMA_LOG2),
                    ));
                }
                Some(RedConfig {
                    kmin_bytes: kmin,
                    kmax_bytes: kmax,
                    pmax: (pmax * f64::from(P_ONE)).round() as u32,
                    ewma_log2,
                })
            }
        };
        // Cut further at start-up when the pool cannot hold every queue full
        // (`memory::fit_class_mbufs`).
        let capacity_pkts = super::memory::class_mbufs(capacity_bytes, u64::from(mbufs)) as u32;
        classes.push(ClassConfig { capacity_bytes, capacity_pkts, weight, red });
    }
    let cfg = sched::PortConfig {
        hz: QOS_HZ,
        rate_bytes_per_sec: q.rate,
        bucket_bytes: bucket,
        max_frame_bytes: max_frame,
        policy,
        dwrr_quantum_bytes: q.quantum.unwrap_or(wire_max as u32),
        mark_point,
        seed: q.seed.unwrap_or(1),
        histograms: true,
        classes,
    };
    // What the scheduler itself refuses (the token bucket's limits are checked above: left are
    // the classes' own), under the port's key.
    sched::Scheduler::<crate::buf::VecBuf>::new(&cfg)
        .map_err(|e| err(if e.starts_with("shaper") { "rate" } else { "classes" }, e))?;
    let map = ClassMap {
        dscp: q.dscp_map.as_ref().map(|m| map::<64>(m, n, "dscp_map", &err)).transpose()?,
        pcp: q.pcp_map.as_ref().map(|m| map::<8>(m, n, "pcp_map", &err)).transpose()?,
    };
    Ok((cfg, map))
}

/// A class map of `N` code points into `classes` classes.
fn map<const N: usize>(
    m: &MapConfig,
    classes: usize,
    key: &str,
    err: &impl Fn(&str, String) -> ConfigError,
) -> Result<[u8; N], ConfigError> {
    let mut out = [0u8; N];
    let check = |k: String, c: u8| {
        if usize::from(c) < classes {
            Ok(c)
        } else {
            Err(err(&k, format!("expected a class 0..={}, found {c}", classes - 1)))
        }
    };
    match m {
        MapConfig::List(v) => {
            if v.len() != N {
                return Err(err(key, format!("expected {N} classes (one per code point), found {}", v.len())));
            }
            for (i, c) in v.iter().enumerate() {
                out[i] = check(format!("{key}[{i}]"), *c)?;
            }
        }
        MapConfig::Table(t) => {
            for (k, c) in t {
                let i: usize = match k.parse() {
                    Ok(i) if i < N => i,
                    _ => {
                        return Err(err(
                            &format!("{key}.{k}"),
                            format!("expected a code point 0..={}, found {k:?}", N - 1),
                        ))
                    }
                };
                out[i] = check(format!("{key}.{k}"), *c)?;
            }
        }
    }
    Ok(out)
}
