//! `[[collective]]`: the collectives of spec section 3, with exactly the spec's key names (the
//! traffic generator and the independent checker read the same file), validated into the
//! aggregator's [`Collective`]s.

use super::ConfigError;
use crate::agg::collective::{max_tensor_elements, Carriage, Collective, Member, MAX_TENSOR_OFFSET, MAX_WORKERS};
use crate::wire::build::IpAddrBytes;
use crate::wire::gradient::{Dtype, Op};
use crate::wire::EthernetAddress;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// `[[collective]]` as written in the file (spec section 3).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CollectiveConfig {
    /// Which collective (u16).
    pub collective_id: u16,
    /// `"sum"`, `"max"` or `"min"`.
    pub op: String,
    /// `"f32"`, `"f16"`, `"bf16"` or `"i32"`.
    pub dtype: String,
    /// `"udp"` (default) or `"rocev2"`.
    #[serde(default = "d_carriage")]
    pub carriage: String,
    /// Elements in the tensor.
    pub tensor_elements: u64,
    /// Elements per packet (the last chunk may be shorter).
    pub chunk_elements: u32,
    /// Reduce in rank order (rule 7).
    #[serde(default)]
    pub deterministic: bool,
    /// Rule 8: a round untouched this long (ms, appliance clock) is reclaimed.
    #[serde(default = "d_timeout")]
    pub slot_timeout_ms: u64,
    /// DSCP of result packets.
    #[serde(default)]
    pub dscp: u8,
    /// `[[collective.member]]`, one per rank.
    #[serde(rename = "member")]
    pub members: Vec<MemberConfig>,
}

/// `[[collective.member]]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MemberConfig {
    /// 0..num_workers-1, each once.
    pub rank: u16,
    /// The worker's IP (v4 or v6).
    pub ip: String,
    /// The worker's UDP port (UDP carriage).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub udp_port: Option<u16>,
    /// The worker's MAC.
    pub mac: String,
    /// An 802.1Q VID to tag results with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vlan: Option<u16>,
    /// The appliance port that reaches it (default 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// The worker's QP (RoCEv2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qpn: Option<u32>,
    /// The worker's Q_Key (RoCEv2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qkey: Option<u32>,
}

fn d_carriage() -> String {
    "udp".into()
}
fn d_timeout() -> u64 {
    1000
}

/// What validation needs of the ports: how many there are and their addresses.
#[derive(Debug, Clone, Copy)]
pub struct PortAddrs<'a> {
    /// Per port: its IPv4 address, if configured.
    pub ipv4: &'a [Option<[u8; 4]>],
    /// Per port: its IPv6 address, if configured.
    pub ipv6: &'a [Option<[u8; 16]>],
}

/// Validates the `[[collective]]` list. Errors name the key (`collective[0].member[2].ip`) and
/// what was expected; collectives that together need more than `memory_limit` bytes of slot
/// memory are refused.
pub fn validate(
    list: &[CollectiveConfig],
    ports: PortAddrs<'_>,
    memory_limit: u64,
    path: &Path,
) -> Result<Vec<Collective>, ConfigError> {
    let err = |key: String, msg: String| ConfigError::new(path, key, msg);
    let mut out: Vec<Collective> = Vec::new();
    let mut total = 0u64;
    for (ci, c) in list.iter().enumerate() {
        let k = format!("collective[{ci}]");
        if out.iter().any(|o| o.id == c.collective_id) {
            return Err(err(
                format!("{k}.collective_id"),
                format!("collective {} is configured twice", c.collective_id),
            ));
        }
        let (op, dtype, carriage) = shape(c, &k, path)?;
        let n = c.members.len();
        let mut members: Vec<Option<Member>> = vec![None; n];
        for (mi, m) in c.members.iter().enumerate() {
            let mk = format!("{k}.member[{mi}]");
            if m.rank as usize >= n {
                return Err(err(
                    format!("{mk}.rank"),
                    format!(
                        "expected a rank below {n} (ranks are 0..num_workers-1, num_workers = {n} members), found {}",
                        m.rank
                    ),
                ));
            }
            if members[m.rank as usize].is_some() {
                return Err(err(format!("{mk}.rank"), format!("rank {} appears twice", m.rank)));
            }
            let me = member(m, &mk, carriage, ports, path)?;
            // Anti-spoofing tells ranks apart by (source IP, UDP source port), or (source IP,
            // source QP) on RoCEv2 (spec section 4, rule 5): two ranks with the same pair could
            // each contribute as the other, and their results would reach one worker twice.
            let id = |m: &Member| (m.ip, if carriage == Carriage::Rocev2 { m.qpn } else { m.udp_port as u32 });
            if let Some(other) = members.iter().flatten().find(|o| id(o) == id(&me)) {
                return Err(err(
                    mk,
                    format!(
                        "rank {} has the same address as rank {} ({}, {} {}): each rank needs its own",
                        m.rank,
                        other.rank,
                        me.ip,
                        if carriage == Carriage::Rocev2 { "qpn" } else { "udp_port" },
                        id(&me).1
                    ),
                ));
            }
            members[m.rank as usize] = Some(me);
        }
        let members: Vec<Member> = members
            .into_iter()
            .map(|m| m.expect("every rank 0..n-1 is set: n members, unique ranks below n"))
            .collect();
        let coll = Collective {
            id: c.collective_id,
            op,
            dtype,
            carriage,
            tensor_elements: c.tensor_elements,
            chunk_elements: c.chunk_elements,
            deterministic: c.deterministic,
            slot_timeout_us: c.slot_timeout_ms.saturating_mul(1000),
            dscp: c.dscp,
            members,
        };
        // Saturating: a sum beyond 64 bits is beyond the limit too, never wrapped below it.
        total = total.saturating_add(coll.memory_bytes());
        if total > memory_limit {
            return Err(err(
                k,
                format!(
                    "the collectives need {} of slot memory (this one {} slots, {}), more than dataplane.memory_limit_mb = {} MiB",
                    need_mib(total),
                    coll.slots(),
                    need_mib(coll.memory_bytes()),
                    memory_limit >> 20
                ),
            ));
        }
        out.push(coll);
    }
    Ok(out)
}

/// `bytes` of slot memory in whole MiB, rounded up, for messages: `"2 MiB"`, or `"more than
/// 17592186044415 MiB"` for a count that saturated at `u64::MAX` ([`Collective::memory_bytes`]).
pub(super) fn need_mib(bytes: u64) -> String {
    if bytes == u64::MAX {
        format!("more than {} MiB", super::memory::MAX_MIB)
    } else {
        format!("{} MiB", bytes.div_ceil(super::memory::MIB))
    }
}

/// A `[[collective]]`'s own keys (`k`: its key, `collective[0]`): op, dtype and carriage, and
/// the sizes, timeout, DSCP and member count they must keep.
fn shape(c: &CollectiveConfig, k: &str, path: &Path) -> Result<(Op, Dtype, Carriage), ConfigError> {
    let err = |key: String, msg: String| ConfigError::new(path, key, msg);
    let op = Op::from_name(&c.op)
        .ok_or_else(|| err(format!("{k}.op"), format!("expected \"sum\", \"max\" or \"min\", found {:?}", c.op)))?;
    let dtype = Dtype::from_name(&c.dtype).ok_or_else(|| {
        err(format!("{k}.dtype"), format!("expected \"f32\", \"f16\", \"bf16\" or \"i32\", found {:?}", c.dtype))
    })?;
    let carriage = match c.carriage.as_str() {
        "udp" => Carriage::Udp,
        "rocev2" => Carriage::Rocev2,
        o => return Err(err(format!("{k}.carriage"), format!("expected \"udp\" or \"rocev2\", found {o:?}"))),
    };
    if c.tensor_elements == 0 {
        return Err(err(format!("{k}.tensor_elements"), "expected at least 1 element".into()));
    }
    if c.chunk_elements == 0 {
        return Err(err(format!("{k}.chunk_elements"), "expected at least 1 element".into()));
    }
    let chunk_bytes = c.chunk_elements as u64 * dtype.size() as u64;
    if chunk_bytes > 9000 - 100 {
        return Err(err(
            format!("{k}.chunk_elements"),
            format!("a chunk of {} {} lanes is {chunk_bytes} bytes: expected at most 8900 bytes (a 9000-byte jumbo frame with headers)", c.chunk_elements, c.dtype),
        ));
    }
    // Every chunk's offset travels in the header's 32-bit `tensor_offset` (spec section 2): a
    // tensor whose last chunk starts beyond it could not be addressed (its slots would be
    // allocated and never reached), and its slot count is what the memory check multiplies.
    let max_tensor = max_tensor_elements(c.chunk_elements);
    if c.tensor_elements > max_tensor {
        let last_offset = (c.tensor_elements - 1) / u64::from(c.chunk_elements) * u64::from(c.chunk_elements);
        return Err(err(
            format!("{k}.tensor_elements"),
            format!(
                "expected at most {max_tensor} elements in chunks of {}: the last chunk would start at offset {last_offset}, beyond {MAX_TENSOR_OFFSET}, the most the gradient header's 32-bit tensor_offset carries (spec section 2); found {}",
                c.chunk_elements, c.tensor_elements
            ),
        ));
    }
    if c.slot_timeout_ms == 0 {
        // Rule 8 reclaims a round untouched for longer than this: 0 would reclaim every
        // round at its next contribution, so no round of two or more workers could complete.
        return Err(err(format!("{k}.slot_timeout_ms"), "expected at least 1 ms, found 0".into()));
    }
    if c.dscp > 63 {
        return Err(err(format!("{k}.dscp"), format!("expected 0..=63, found {}", c.dscp)));
    }
    if c.members.is_empty() {
        return Err(err(format!("{k}.member"), "expected at least one [[collective.member]]".into()));
    }
    if c.members.len() > MAX_WORKERS {
        return Err(err(
            format!("{k}.member"),
            format!("expected at most {MAX_WORKERS} members, found {}", c.members.len()),
        ));
    }
    Ok((op, dtype, carriage))
}

/// One `[[collective.member]]` (`mk`: its key, `collective[0].member[2]`) of a collective on
/// `carriage`, its rank already checked: its address, MAC, port, VLAN and carriage keys. The
/// checks that compare it with the other members are the caller's.
fn member(
    m: &MemberConfig,
    mk: &str,
    carriage: Carriage,
    ports: PortAddrs<'_>,
    path: &Path,
) -> Result<Member, ConfigError> {
    let err = |key: String, msg: String| ConfigError::new(path, key, msg);
    let std_ip =
        m.ip.parse::<std::net::IpAddr>()
            .map_err(|_| err(format!("{mk}.ip"), format!("expected an IPv4 or IPv6 address, found {:?}", m.ip)))?;
    // A worker's address is the source of its contributions (the anti-spoofing check) and
    // the destination of its results: it must be one host's.
    let broadcast = matches!(std_ip, std::net::IpAddr::V4(v4) if v4.is_broadcast());
    if std_ip.is_unspecified() || std_ip.is_multicast() || broadcast {
        return Err(err(format!("{mk}.ip"), format!("expected a unicast address (a worker's own), found {:?}", m.ip)));
    }
    let ip = IpAddrBytes::from_std(std_ip);
    // Results are unicast to the worker's NIC (spec section 6).
    let mac: EthernetAddress = super::validate::host_mac(&m.mac).map_err(|e| err(format!("{mk}.mac"), e))?;
    let port = m.port.unwrap_or(0);
    if port as usize >= ports.ipv4.len() {
        return Err(err(
            format!("{mk}.port"),
            format!("expected a port index below {} (the number of [[port]] tables), found {port}", ports.ipv4.len()),
        ));
    }
    let has_addr = match ip {
        IpAddrBytes::V4(_) => ports.ipv4[port as usize].is_some(),
        IpAddrBytes::V6(_) => ports.ipv6[port as usize].is_some(),
    };
    if !has_addr {
        return Err(err(
                format!("{mk}.ip"),
                format!(
                    "port[{port}] has no {} address: set `{}` on it (results come from the appliance's address on the member's port)",
                    if ip.is_v6() { "IPv6" } else { "IPv4" },
                    if ip.is_v6() { "ipv6" } else { "ipv4" }
                ),
            ));
    }
    if let Some(v) = m.vlan {
        if v == 0 || v > 4094 {
            return Err(err(format!("{mk}.vlan"), format!("expected a VLAN ID in 1..=4094, found {v}")));
        }
    }
    // The other carriage's keys (spec section 3 lists `udp_port` for UDP, `qpn` and `qkey` for
    // RoCEv2) are taken and unused: a file written for both carriages, or a collective whose
    // carriage a runtime change flips, keeps loading.
    let (udp_port, qpn, qkey) = match carriage {
        Carriage::Udp => {
            let p = m.udp_port.ok_or_else(|| {
                err(format!("{mk}.udp_port"), "expected the worker's UDP port (the UDP carriage needs it)".into())
            })?;
            if p == 0 {
                return Err(err(format!("{mk}.udp_port"), "expected a UDP port in 1..=65535, found 0".into()));
            }
            (p, 0, 0)
        }
        Carriage::Rocev2 => {
            let q = m.qpn.ok_or_else(|| {
                err(format!("{mk}.qpn"), "expected the worker's QP number (the RoCEv2 carriage needs it)".into())
            })?;
            if q > 0xff_ffff {
                return Err(err(format!("{mk}.qpn"), format!("expected a 24-bit QP number, found {q}")));
            }
            let key = m.qkey.ok_or_else(|| {
                err(format!("{mk}.qkey"), "expected the worker's Q_Key (the RoCEv2 carriage needs it)".into())
            })?;
            (0, q, key)
        }
    };
    Ok(Member { rank: m.rank, ip, udp_port, mac, vlan: m.vlan, port, qpn, qkey })
}
