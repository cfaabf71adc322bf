//! `[[allreduce]]`: N workers of one collective emulated on a live DPDK port, against the
//! appliance (spec `gradient-protocol.md`, sections 2 to 7).
//!
//! The collective, its members' addresses and the appliance's own addresses come from the
//! appliance's configuration file (`appliance`, `collective_id`), so that what pktgen sends is
//! what the appliance expects. Every member of the collective is emulated on one port.
//!
//! # Modes
//!
//! - **Closed loop** (`mode = "closed"`, as real workers behave): each worker keeps at most
//!   `window` chunks outstanding, sent in the one sequence every worker walks (round k of every
//!   slot, then round k + 1), waiting at a contribution not ready yet rather than passing it;
//!   a slot's next round is sent once its result came back; a
//!   contribution without a result after `timeout_us` is resent with flag RETRANSMIT (section 2).
//!   A NAK with reason 7 (stale or premature round) moves the slot to the round the NAK names; a
//!   NAK with another reason (1 to 6) refuses the slot: it is counted and not sent again.
//! - **Open loop** (`mode = "open"`): every worker's contributions for successive rounds, round
//!   by round (all slots of round k, every worker's, before round k + 1 of any slot), at
//!   `rate_pps` or as fast as the port takes them, without waiting for results; results are
//!   counted and checked as they return. Nothing is resent: with `rounds`, results that never
//!   came back are incomplete.
//!
//! Both start with a PROBE (section 7) of every slot by every worker, resent every `timeout_us`
//! until the appliance answers with a STATUS (so pktgen may start before the appliance, or
//! before its link comes up when it is the memif server): a slot without history starts at `first_round`, one in progress at its round, a
//! completed one at the next (with `probe = false`, every slot starts at `first_round`).
//!
//! # Values
//!
//! Payloads and references come from the value model of [`crate::values`], the pcap writer's
//! too, so that a round's contribution of a rank at an offset has the same bytes in both. The
//! key `values` chooses the kind:
//!
//! - `"exact"` (default): the period-61 tables of small integers. Every sum, max and min is
//!   exact in every dtype whatever the arrival order, so any appliance must answer the reference
//!   bit for bit; no tensor is stored, checking a result is one comparison of its payload with a
//!   slice of the tables.
//! - `"normal"`: the pcap writer's N(0, 1)-like tensors, whose float sums are known only in
//!   rank order: refused (a config error at `allreduce[i].values`) for an f32, f16 or bf16 sum
//!   when the appliance's collective is not `deterministic = true`. The tensors (and their
//!   references) of `R` rounds are computed at start: `R` = `rounds` (16 when unset), at most
//!   what fits in [`NORMAL_BUDGET_BYTES`]; round `k` sends those of round
//!   `first_round + ((k - first_round) mod R)`, so a run of at most `R` rounds from `first_round`
//!   sends exactly the pcap writer's values. Nothing is computed per packet.
//!
//! # Impairments
//!
//! - `loss`: that fraction of pktgen's own sends (contributions, retransmissions and probes) is
//!   dropped before the port, at random; in closed loop the timeout resends them.
//! - `slow_rank`, `slow_us`: that worker's sends wait `slow_us` µs after the slot is ready.
//!
//! # Where it runs
//!
//! A [`Runner`] polls the port's rx queues and sends on its tx queue 0 (no `[[stream]]` may use
//! the port). Without the key `lcore` the main lcore runs it, between its receive passes; with
//! `lcore = N` EAL worker lcore `N` runs it alone, and the main lcore only reports
//! ([`super::emulations`]). Nothing on its per-packet path allocates, locks or makes a system
//! call.

use super::config::PortRef;
use super::pace::Pacer;
use super::report::{push_csv_row, Latency};
use crate::frame::{contribution_spec, Addresses};
pub use crate::values::{lane_value, magnitude, table_index, PERIOD};
use crate::values::{mix, ExactTables, Model, ValueKind};
use crate::Endpoints;
use dataplane::agg::collective::Carriage;
use dataplane::config::ConfigError;
use dataplane::dpdk::{self as dpdk, Mbuf, Mempool, RxQueue, TxQueue};
use dataplane::wire::build::{self, FrameSpec, IpAddrBytes, PayloadSums, ROCEV2_PORT, UD_SEND_ONLY};
use dataplane::wire::gradient::{self, Dtype, Flags, GradientRepr, NakReason, Op, SlotState, VERSION};
use dataplane::wire::{checksum, icrc, template, EthernetAddress};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::path::Path;

/// The most bytes of tensors and references `values = "normal"` computes at start (64 MiB).
pub const NORMAL_BUDGET_BYTES: u64 = 64 << 20;

/// Rounds of tensors `values = "normal"` computes when `rounds` is unset.
pub const NORMAL_DEFAULT_ROUNDS: u32 = 16;

/// Closed or open loop.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// A window of outstanding chunks per worker; the next round once the result is back.
    #[default]
    Closed,
    /// Successive rounds without waiting for results.
    Open,
}

/// `[[allreduce]]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllreduceConfig {
    /// A label (default `allreduce<i>`).
    pub name: Option<String>,
    /// The port (name or index) contributions leave by and results come back on.
    pub port: PortRef,
    /// The appliance's configuration file (TOML): its `[[collective]]` and `[[port]]` addresses.
    pub appliance: String,
    /// Which `[[collective]]` of it.
    pub collective_id: u16,
    /// `closed` (default) or `open`.
    #[serde(default)]
    pub mode: Mode,
    /// Closed loop: chunks (contributions or probes) outstanding per worker (default 8).
    #[serde(default = "d_window")]
    pub window: u32,
    /// Rounds per slot; the emulation ends once every slot of every worker has completed them
    /// (or was refused). Unset: until the run's duration ends.
    pub rounds: Option<u32>,
    /// Resend a contribution (RETRANSMIT) or a probe after this long without an answer (µs;
    /// default 5000).
    #[serde(default = "d_timeout")]
    pub timeout_us: u64,
    /// Contributions per second, all workers together (default: as fast as the window or the port
    /// allow).
    pub rate_pps: Option<f64>,
    /// Fraction of pktgen's own sends dropped before the port (0..1).
    #[serde(default)]
    pub loss: f64,
    /// The rank whose sends are delayed by `slow_us`.
    pub slow_rank: Option<u16>,
    /// The delay of `slow_rank`'s sends (µs).
    #[serde(default)]
    pub slow_us: u64,
    /// Probe every slot first (default true).
    #[serde(default = "d_true")]
    pub probe: bool,
    /// The round of a slot without history (default 0).
    #[serde(default)]
    pub first_round: u32,
    /// The op written in contributions (default the collective's; another one is refused by the
    /// appliance with NAK reason 3).
    pub op: Option<String>,
    /// The op results are checked against (default the collective's).
    pub expect_op: Option<String>,
    /// Elements of the tensor as pktgen sends it (default the collective's; more sends chunks past
    /// the appliance's tensor, which it refuses with NAK reason 6).
    pub tensor_elements: Option<u64>,
    /// Seed of the values and of the injected loss (default 1).
    #[serde(default = "d_seed")]
    pub seed: u64,
    /// `"exact"` (default) or `"normal"`: the value model's kind ([`crate::values`]).
    pub values: Option<String>,
    /// The EAL worker lcore (id) that runs the emulation, alone (not a tx lcore, nor another
    /// emulation's). Unset: the main lcore runs it, between its receive passes.
    pub lcore: Option<u32>,
}

fn d_window() -> u32 {
    8
}
fn d_timeout() -> u64 {
    5000
}
fn d_true() -> bool {
    true
}
fn d_seed() -> u64 {
    1
}

/// One emulated worker's addresses (its member's, and the appliance's on the member's port).
#[derive(Debug, Clone, Copy)]
pub struct WorkerAddr {
    /// Rank.
    pub rank: u16,
    /// The member's MAC (source of its contributions).
    pub mac: EthernetAddress,
    /// The member's IP.
    pub ip: IpAddrBytes,
    /// The member's UDP port (UDP carriage; the source port on RoCEv2 too).
    pub udp_port: u16,
    /// 802.1Q VID of its frames.
    pub vlan: Option<u16>,
    /// RoCEv2: its QP (DETH source QP) and Q_Key.
    pub qpn: u32,
    /// RoCEv2 Q_Key.
    pub qkey: u32,
    /// The appliance's MAC on the member's port.
    pub appliance_mac: EthernetAddress,
    /// The appliance's IP on that port, of the member's family.
    pub appliance_ip: IpAddrBytes,
}

/// A checked `[[allreduce]]`.
#[derive(Debug, Clone)]
pub struct Emulation {
    /// Label.
    pub name: String,
    /// Port index.
    pub port: u16,
    /// Closed or open loop.
    pub mode: Mode,
    /// Outstanding chunks per worker (closed loop).
    pub window: u32,
    /// Rounds per slot, if bounded.
    pub rounds: Option<u32>,
    /// Resend timeout (µs).
    pub timeout_us: u64,
    /// Contributions per second, if paced.
    pub rate_pps: Option<f64>,
    /// Fraction of sends dropped.
    pub loss: f64,
    /// (rank, µs) of the slow worker.
    pub slow: Option<(u16, u64)>,
    /// Probe first.
    pub probe: bool,
    /// Round of a slot without history.
    pub first_round: u32,
    /// Collective id.
    pub collective_id: u16,
    /// The op sent.
    pub op: Op,
    /// The op results are checked against.
    pub expect_op: Op,
    /// Lane type.
    pub dtype: Dtype,
    /// Carriage.
    pub carriage: Carriage,
    /// Tensor elements as sent.
    pub tensor_elements: u64,
    /// Elements per chunk.
    pub chunk_elements: u32,
    /// The appliance's `gradient_udp_port`.
    pub gradient_udp_port: u16,
    /// The appliance's `appliance_qpn`.
    pub appliance_qpn: u32,
    /// The workers, by rank.
    pub workers: Vec<WorkerAddr>,
    /// Seed.
    pub seed: u64,
    /// The values' kind.
    pub values: ValueKind,
    /// `values = "normal"`: the rounds of tensors computed at start (`R`, see the module docs).
    pub value_rounds: u32,
    /// The EAL worker lcore (id) that runs it; `None`: the main lcore.
    pub lcore: Option<u32>,
}

impl Emulation {
    /// Number of slots (chunks) as sent.
    pub fn slots(&self) -> u32 {
        self.tensor_elements.div_ceil(self.chunk_elements as u64) as u32
    }

    /// Chunk `slot`'s offset and element count.
    pub fn chunk(&self, slot: u32) -> (u32, u32) {
        let off = slot as u64 * self.chunk_elements as u64;
        (off as u32, (self.tensor_elements - off).min(self.chunk_elements as u64) as u32)
    }

    fn spec(&self, w: &WorkerAddr) -> FrameSpec {
        let a = Addresses {
            ends: Endpoints {
                src_mac: w.mac,
                dst_mac: w.appliance_mac,
                vlan: w.vlan,
                src_ip: w.ip,
                dst_ip: w.appliance_ip,
            },
            src_port: w.udp_port,
            gradient_port: self.gradient_udp_port,
            dest_qp: self.appliance_qpn,
            qkey: w.qkey,
            src_qp: w.qpn,
        };
        let header = GradientRepr {
            version: VERSION,
            flags: 0,
            op_type: self.op.wire(),
            collective_id: self.collective_id,
            dtype: self.dtype.wire(),
            reason: 0,
            worker_rank: w.rank,
            tensor_offset: 0,
            data_length: 0,
            round: 0,
        };
        contribution_spec(&a, self.carriage, header, 0)
    }

    /// The value model of what it sends: its kind, seed, workers, dtype, the op results are
    /// checked against, and the tensor as sent.
    pub fn model(&self) -> Model {
        Model {
            kind: self.values,
            seed: self.seed,
            workers: self.workers.len() as u16,
            dtype: self.dtype,
            op: self.expect_op,
            tensor_elements: self.tensor_elements,
        }
    }

    /// The longest frame it sends (bytes without FCS): a full chunk from the worker with the
    /// longest headers.
    pub fn max_frame_len(&self) -> usize {
        let full = self.chunk(0).1 as usize * self.dtype.size();
        let probe = gradient::probe_len(self.workers.len());
        self.workers.iter().map(|w| self.spec(w).frame_len(full.max(probe))).max().unwrap_or(0)
    }
}

fn op_of(path: &Path, key: String, s: &Option<String>, default: Op) -> Result<Op, ConfigError> {
    match s {
        None => Ok(default),
        Some(n) => Op::from_name(n)
            .ok_or_else(|| ConfigError::new(path, key, format!("expected \"sum\", \"max\" or \"min\", found {n:?}"))),
    }
}

/// Checks the `[[allreduce]]` tables of `path` (ports resolved by `find_port`), loading each
/// one's appliance configuration with the appliance's own loader.
///
/// # Errors
/// The first bad key, named `allreduce[i].KEY`, with what was expected; an appliance file that
/// does not load is named with its own error.
pub fn check(
    list: &[AllreduceConfig],
    path: &Path,
    find_port: &dyn Fn(String, &PortRef) -> Result<u16, ConfigError>,
) -> Result<Vec<Emulation>, ConfigError> {
    let mut out: Vec<Emulation> = Vec::new();
    for (i, a) in list.iter().enumerate() {
        let k = |f: &str| format!("allreduce[{i}].{f}");
        let err = |f: &str, m: String| ConfigError::new(path, k(f), m);
        let name = a.name.clone().unwrap_or_else(|| format!("allreduce{i}"));
        if out.iter().any(|e| e.name == name) {
            return Err(err("name", format!("the name {name:?} is already used by another [[allreduce]]")));
        }
        let port = find_port(k("port"), &a.port)?;
        if out.iter().any(|e| e.port == port) {
            return Err(err("port", "another [[allreduce]] already uses this port: give each its own".into()));
        }
        if let (Some(l), Some(j)) = (a.lcore, out.iter().position(|e| e.lcore.is_some() && e.lcore == a.lcore)) {
            return Err(err("lcore", format!("allreduce[{j}] already runs on lcore {l}: give each its own lcore")));
        }
        let app = dataplane::config::load(Path::new(&a.appliance))
            .map_err(|e| err("appliance", format!("the appliance's config does not load: {e}")))?;
        let Some(c) = app.collectives.iter().find(|c| c.id == a.collective_id) else {
            let ids: Vec<String> = app.collectives.iter().map(|c| c.id.to_string()).collect();
            return Err(err(
                "collective_id",
                format!("{} has no [[collective]] {} (it has: {})", a.appliance, a.collective_id, ids.join(", ")),
            ));
        };
        if a.window == 0 {
            return Err(err("window", "expected at least 1 chunk".into()));
        }
        if a.rounds == Some(0) {
            return Err(err("rounds", "expected at least 1".into()));
        }
        if a.timeout_us == 0 {
            return Err(err("timeout_us", "expected at least 1 µs".into()));
        }
        if let Some(r) = a.rate_pps {
            if !(r > 0.0 && r.is_finite()) {
                return Err(err("rate_pps", format!("expected contributions per second above 0, found {r}")));
            }
        }
        if !(0.0..1.0).contains(&a.loss) {
            return Err(err("loss", format!("expected a fraction in 0..1, found {}", a.loss)));
        }
        let slow = match a.slow_rank {
            Some(r) if (r as usize) < c.members.len() => Some((r, a.slow_us)),
            Some(r) => return Err(err("slow_rank", format!("expected a rank below {}, found {r}", c.members.len()))),
            None if a.slow_us > 0 => return Err(err("slow_us", "expected `slow_rank` with it".into())),
            None => None,
        };
        let op = op_of(path, k("op"), &a.op, c.op)?;
        let expect_op = op_of(path, k("expect_op"), &a.expect_op, c.op)?;
        let tensor_elements = a.tensor_elements.unwrap_or(c.tensor_elements);
        if tensor_elements == 0 || tensor_elements > 1 << 32 {
            return Err(err("tensor_elements", format!("expected 1..=2^32, found {tensor_elements}")));
        }
        let values = match &a.values {
            None => ValueKind::Exact,
            Some(v) => ValueKind::from_name(v)
                .ok_or_else(|| err("values", format!("expected \"exact\" or \"normal\", found {v:?}")))?,
        };
        let mut value_rounds = 1;
        if values == ValueKind::Normal {
            if c.op == Op::Sum && c.dtype != Dtype::I32 && !c.deterministic {
                return Err(err(
                    "values",
                    format!(
                        "\"normal\" {} sums are known only in rank order, and collective {} of {} is not \
                         `deterministic = true`: set it there, or use values = \"exact\"",
                        c.dtype.name(),
                        c.id,
                        a.appliance
                    ),
                ));
            }
            let per_round = (c.members.len() as u64 + 1) * tensor_elements * c.dtype.size() as u64;
            let fit = NORMAL_BUDGET_BYTES / per_round;
            if fit == 0 {
                return Err(err(
                    "values",
                    format!(
                        "\"normal\" values are computed at start: one round of {} workers' tensors and its \
                         reference is {per_round} bytes, more than {NORMAL_BUDGET_BYTES}; use values = \"exact\"",
                        c.members.len()
                    ),
                ));
            }
            value_rounds = a.rounds.unwrap_or(NORMAL_DEFAULT_ROUNDS).min(fit.min(u32::MAX as u64) as u32);
        }
        let mut workers = Vec::new();
        for m in &c.members {
            let p = m.port as usize;
            let key = format!("collective {} member {}", c.id, m.rank);
            let appliance_mac = app.port_macs.get(p).copied().flatten().ok_or_else(|| {
                err(
                    "appliance",
                    format!("{}: port {p} (that reaches {key}) has no `mac`: pktgen needs it", a.appliance),
                )
            })?;
            let appliance_ip = match m.ip {
                IpAddrBytes::V4(_) => app.port_ipv4.get(p).copied().flatten().map(IpAddrBytes::V4),
                IpAddrBytes::V6(_) => app.port_ipv6.get(p).copied().flatten().map(IpAddrBytes::V6),
            }
            .ok_or_else(|| err("appliance", format!("{}: port {p} has no address of {key}'s family", a.appliance)))?;
            workers.push(WorkerAddr {
                rank: m.rank,
                mac: m.mac,
                ip: m.ip,
                udp_port: m.udp_port,
                vlan: m.vlan,
                qpn: m.qpn,
                qkey: m.qkey,
                appliance_mac,
                appliance_ip,
            });
        }
        workers.sort_by_key(|w| w.rank);
        out.push(Emulation {
            name,
            port,
            mode: a.mode,
            window: a.window,
            rounds: a.rounds,
            timeout_us: a.timeout_us,
            rate_pps: a.rate_pps,
            loss: a.loss,
            slow,
            probe: a.probe,
            first_round: a.first_round,
            collective_id: c.id,
            op,
            expect_op,
            dtype: c.dtype,
            carriage: c.carriage,
            tensor_elements,
            chunk_elements: c.chunk_elements,
            gradient_udp_port: app.config.dataplane.gradient_udp_port,
            appliance_qpn: app.config.dataplane.appliance_qpn,
            workers,
            seed: a.seed,
            values,
            value_rounds,
            lcore: a.lcore,
        });
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Values

/// The tensors of `values = "normal"`: those of `rounds` rounds from `first`, and their
/// references, computed at start.
#[derive(Debug, Clone)]
pub struct NormalRounds {
    /// The round of index 0.
    pub first: u32,
    /// `R`: the rounds held; round k uses index `(k - first) mod R`.
    pub rounds: u32,
    /// By index, then rank: the whole tensor as sent.
    pub tensors: Vec<Vec<Vec<u8>>>,
    /// By index: the reference of the whole tensor.
    pub expected: Vec<Vec<u8>>,
}

impl NormalRounds {
    /// The index of round `round`.
    #[inline(always)]
    pub fn index(&self, round: u32) -> usize {
        (round.wrapping_sub(self.first) % self.rounds) as usize
    }
}

/// Where payloads and results come from.
#[derive(Debug, Clone)]
pub enum Source {
    /// The exact tables.
    Exact(ExactTables),
    /// Normal tensors of a bounded number of rounds.
    Normal(NormalRounds),
}

/// The values of an emulation, from the value model ([`Emulation::model`]): every worker's
/// payload of a (round, offset) and the reference, as slices of what was computed at start.
#[derive(Debug, Clone)]
pub struct Values {
    /// Bytes per lane.
    pub lane: usize,
    /// The tables or the tensors.
    pub source: Source,
}

impl Values {
    /// The values of `em`.
    pub fn new(em: &Emulation) -> Values {
        let model = em.model();
        let source = match em.values {
            ValueKind::Exact => Source::Exact(model.exact_tables(em.chunk_elements)),
            ValueKind::Normal => {
                let r = em.value_rounds.max(1);
                let rounds: Vec<u32> = (0..r).map(|i| em.first_round.wrapping_add(i)).collect();
                let tensors: Vec<Vec<Vec<u8>>> = rounds.iter().map(|&k| model.tensors(k)).collect();
                let expected = tensors.iter().map(|t| model.reference(t)).collect();
                Source::Normal(NormalRounds { first: em.first_round, rounds: r, tensors, expected })
            }
        };
        Values { lane: em.dtype.size(), source }
    }

    /// Worker `rank`'s payload of the chunk at `offset` with `count` lanes in `round`.
    #[inline(always)]
    pub fn payload(&self, rank: usize, offset: u32, count: u32, round: u32) -> &[u8] {
        match &self.source {
            Source::Exact(t) => t.payload(rank, offset, count, round),
            Source::Normal(n) => {
                let a = offset as usize * self.lane;
                &n.tensors[n.index(round)][rank][a..a + count as usize * self.lane]
            }
        }
    }

    /// The right result of that chunk.
    #[inline(always)]
    pub fn result(&self, offset: u32, count: u32, round: u32) -> &[u8] {
        match &self.source {
            Source::Exact(t) => t.result(offset, count, round),
            Source::Normal(n) => {
                let a = offset as usize * self.lane;
                &n.expected[n.index(round)][a..a + count as usize * self.lane]
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Receiving: results, STATUS answers and NAKs

/// What the appliance sent to one of the workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    /// Destination IP (IPv4 in the first 4 bytes) and UDP port (UDP) or BTH DestQP (RoCEv2):
    /// whose it is.
    pub to: ([u8; 16], u32),
    /// The gradient header.
    pub header: GradientRepr,
    /// The payload's byte range in the frame.
    pub payload: (usize, usize),
}

/// Why a received frame is not a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotReply {
    /// Not a gradient packet of this carriage (ARP, neighbour discovery, other traffic).
    Other,
    /// A gradient packet with a bad length, UDP checksum or ICRC.
    Bad,
}

fn key_of(ip: &[u8]) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..ip.len()].copy_from_slice(ip);
    k
}

/// Parses a frame the appliance sent: Ethernet (up to two VLAN tags) / IPv4 or IPv6 / UDP from
/// `grad_port` (UDP carriage), or UDP to 4791 / BTH UD SEND Only / DETH (RoCEv2) / gradient
/// header / payload; verifies the UDP checksum (when not 0 over IPv4) and the ICRC.
pub fn parse_reply(f: &[u8], grad_port: u16, carriage: Carriage) -> Result<Reply, NotReply> {
    let (r, udp) = parse_reply_unsummed(f, grad_port, carriage)?;
    match udp {
        Some(u) if !u.verify(f, None) => Err(NotReply::Bad),
        _ => Ok(r),
    }
}

/// What verifying a reply's UDP checksum takes: the pseudo header's sum and where the UDP
/// datagram lies in the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpCheck {
    /// The pseudo header's ones'-complement sum (RFC 768, RFC 8200 section 8.1).
    pub pseudo: u16,
    /// The datagram's first byte and its end (frame offsets).
    pub l4: usize,
    /// See `l4`.
    pub end: usize,
}

impl UdpCheck {
    /// True when the checksum verifies. `payload`: the sum of the bytes at frame offsets
    /// `start..end` when the caller knows it (a result equal to the expected one, whose sum
    /// was computed at start), so that only the rest is read; ignored unless `start - l4` is
    /// even (the sum's words then align with the datagram's).
    pub fn verify(&self, f: &[u8], payload: Option<(usize, usize, u16)>) -> bool {
        let sum = match payload {
            Some((a, b, psum)) if self.l4 <= a && a <= b && b <= self.end && (a - self.l4) & 1 == 0 => {
                let head = checksum::sum(&f[self.l4..a]);
                // Whatever follows the payload starts at an odd offset when the payload's
                // length is odd: its sum is then byte-swapped (RFC 1071 2.(B)).
                let tail = checksum::sum(&f[b..self.end]);
                let tail = if (b - a) % 2 == 1 { tail.swap_bytes() } else { tail };
                checksum::combine(checksum::combine(head, psum), tail)
            }
            _ => checksum::sum(&f[self.l4..self.end]),
        };
        checksum::combine(self.pseudo, sum) == 0xffff
    }
}

/// [`parse_reply`] without the UDP checksum pass: the reply and, when its UDP checksum is to be
/// verified (not 0 over IPv4), what that takes ([`UdpCheck::verify`]). The ICRC is verified.
pub fn parse_reply_unsummed(
    f: &[u8],
    grad_port: u16,
    carriage: Carriage,
) -> Result<(Reply, Option<UdpCheck>), NotReply> {
    let be16 = |a: usize| u16::from_be_bytes([f[a], f[a + 1]]);
    if f.len() < 14 {
        return Err(NotReply::Other);
    }
    let mut l3 = 14;
    let mut et = be16(12);
    for _ in 0..2 {
        if (et == 0x8100 || et == 0x88a8) && f.len() >= l3 + 4 {
            et = be16(l3 + 2);
            l3 += 4;
        }
    }
    let (l4, ip_end, dst): (usize, usize, [u8; 16]) = match et {
        0x0800 => {
            if f.len() < l3 + 20 || f[l3 + 9] != 17 {
                return Err(NotReply::Other);
            }
            let ihl = (f[l3] & 0xf) as usize * 4;
            let end = l3 + be16(l3 + 2) as usize;
            if ihl < 20 || end > f.len() || end < l3 + ihl + 8 {
                return Err(NotReply::Bad);
            }
            (l3 + ihl, end, key_of(&f[l3 + 16..l3 + 20]))
        }
        0x86dd => {
            if f.len() < l3 + 40 || f[l3 + 6] != 17 {
                return Err(NotReply::Other);
            }
            let end = l3 + 40 + be16(l3 + 4) as usize;
            if end > f.len() || end < l3 + 48 {
                return Err(NotReply::Bad);
            }
            (l3 + 40, end, key_of(&f[l3 + 24..l3 + 40]))
        }
        _ => return Err(NotReply::Other),
    };
    let (sport, dport, ulen) = (be16(l4), be16(l4 + 2), be16(l4 + 4) as usize);
    let udp_ck = be16(l4 + 6);
    let v6 = et == 0x86dd;
    let (grad, to, end) = match carriage {
        Carriage::Udp if sport == grad_port => (l4 + 8, (dst, dport as u32), ip_end),
        Carriage::Rocev2 if dport == ROCEV2_PORT => {
            if ip_end < l4 + 8 + 20 + 4 || f[l4 + 8] != UD_SEND_ONLY {
                return Err(NotReply::Other);
            }
            let qp = u32::from_be_bytes([0, f[l4 + 8 + 5], f[l4 + 8 + 6], f[l4 + 8 + 7]]);
            let pad = ((f[l4 + 8 + 1] >> 4) & 3) as usize;
            if !icrc::verify(&f[l3..ip_end], l4 - l3).unwrap_or(false) {
                return Err(NotReply::Bad);
            }
            (l4 + 8 + 12 + 8, (dst, qp), ip_end - 4 - pad)
        }
        _ => return Err(NotReply::Other),
    };
    if ulen != ip_end - l4 {
        return Err(NotReply::Bad);
    }
    let mut check = None;
    if udp_ck != 0 || v6 {
        let pseudo = if v6 {
            checksum::pseudo_header_v6(
                f[l3 + 8..l3 + 24].try_into().expect("16"),
                f[l3 + 24..l3 + 40].try_into().expect("16"),
                17,
                ulen as u32,
            )
        } else {
            checksum::pseudo_header_v4(
                f[l3 + 12..l3 + 16].try_into().expect("4"),
                f[l3 + 16..l3 + 20].try_into().expect("4"),
                17,
                ulen as u16,
            )
        };
        check = Some(UdpCheck { pseudo, l4, end: ip_end });
    }
    if end < grad + gradient::HEADER_LEN {
        return Err(NotReply::Bad);
    }
    let h = &f[grad..grad + gradient::HEADER_LEN];
    let be32 = |a: usize| u32::from_be_bytes([h[a], h[a + 1], h[a + 2], h[a + 3]]);
    let header = GradientRepr {
        version: h[0] >> 4,
        flags: h[0] & 0xf,
        op_type: h[1],
        collective_id: u16::from_be_bytes([h[2], h[3]]),
        dtype: h[4],
        reason: h[5],
        worker_rank: u16::from_be_bytes([h[6], h[7]]),
        tensor_offset: be32(8),
        data_length: be32(12),
        round: be32(16),
    };
    let p0 = grad + gradient::HEADER_LEN;
    if p0 + header.data_length as usize > end {
        return Err(NotReply::Bad);
    }
    Ok((Reply { to, header, payload: (p0, p0 + header.data_length as usize) }, check))
}

// ---------------------------------------------------------------------------------------------
// The emulation's state machine (DPDK-free)

/// One send the engine asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendOrder {
    /// Worker (index = rank).
    pub rank: u16,
    /// Slot.
    pub slot: u32,
    /// Round field.
    pub round: u32,
    /// Header flags (0, RETRANSMIT, PROBE, PROBE | RETRANSMIT).
    pub flags: u8,
}

/// Counters of one worker.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct WorkerCounters {
    /// Contributions sent for the first time (per round), injected drops included.
    pub contributions: u64,
    /// Contributions resent with RETRANSMIT after a timeout.
    pub retransmissions: u64,
    /// Timeouts (contributions and probes without an answer in time).
    pub timeouts: u64,
    /// PROBEs sent (resends included).
    pub probes: u64,
    /// STATUS answers received.
    pub statuses: u64,
    /// Sends dropped on purpose (`loss`).
    pub injected_drops: u64,
    /// Results received for the slot's round in flight (right or wrong): one per round of each
    /// of this worker's slots, so summed over workers it is the appliance's completed rounds
    /// times the workers (the appliance counts a round once, per slot).
    pub results: u64,
    /// Of them, equal to the reference.
    pub right: u64,
    /// Of them, different from the reference.
    pub wrong: u64,
    /// Results for no round in flight (a resend answered by rule 3 after the result came).
    pub stale_results: u64,
    /// Payload bytes of those results (this worker's contributions folded).
    pub payload_bytes: u64,
    /// Elements of those results.
    pub elements: u64,
    /// NAKs received, by reason 1 to 7 (index 0: unknown reasons).
    pub naks: [u64; 8],
    /// Slots refused by a NAK (reasons 1 to 6) and given up.
    pub refused_slots: u64,
}

impl WorkerCounters {
    /// Adds the counts of `c` that the totals over workers keep: every count but `probes`,
    /// `statuses` and `naks` (the summaries total NAKs by reason on their own).
    pub fn add_totals(&mut self, c: &WorkerCounters) {
        self.contributions += c.contributions;
        self.retransmissions += c.retransmissions;
        self.timeouts += c.timeouts;
        self.injected_drops += c.injected_drops;
        self.results += c.results;
        self.right += c.right;
        self.wrong += c.wrong;
        self.stale_results += c.stale_results;
        self.refused_slots += c.refused_slots;
        self.payload_bytes += c.payload_bytes;
        self.elements += c.elements;
    }
}

const S_PROBE: u8 = 0;
const S_READY: u8 = 1;
const S_OUT: u8 = 2;
const S_DONE: u8 = 3;
const S_REFUSED: u8 = 4;

#[derive(Debug, Clone, Copy)]
struct Slot {
    state: u8,
    round: u32,
    /// Bumped whenever the slot's send in flight changes, so that stale timers are ignored.
    gen: u32,
    first_tsc: u64,
    completed: u32,
}

#[derive(Debug)]
struct Worker {
    slots: Vec<Slot>,
    /// Slots whose PROBE is still to be sent (slot, not before TSC).
    ready: VecDeque<(u32, u64)>,
    /// Closed loop: the next contribution in the sequence every worker walks, round `k` of slot
    /// `s` at `k * slots + s`.
    cursor: u64,
    /// Closed loop: slots a NAK 7 moved to another round, to send again there.
    rejoin: VecDeque<u32>,
    /// Closed loop, the slow worker: contributions that took their window's room and leave at
    /// the TSC given (`slow_us` after they could), in order.
    held: VecDeque<(u32, u64)>,
    /// (slot, deadline TSC, generation).
    timers: VecDeque<(u32, u64, u32)>,
    /// Slots in S_PROBE or S_OUT with a send in flight.
    outstanding: u32,
    c: WorkerCounters,
    hist: Histogram<u64>,
}

/// Rounds per slot whose results an open-loop emulation still takes (with their send time, for
/// the latency): a result more than this many rounds behind the slot's last send is counted
/// stale. 64 rounds of 8 slots at 20,000 contributions/s from 4 workers are 100 ms: an appliance
/// descheduled for that long on a shared CPU is still counted right.
const OPEN_HISTORY: usize = 64;

/// Open-loop progress.
#[derive(Debug, Default)]
struct Open {
    started: bool,
    k: u32,
    slot: u32,
    rank: u16,
    done: bool,
    /// Per slot: the first round number (from the probe) and the send TSC of its last
    /// [`OPEN_HISTORY`] rounds (round, TSC of the last worker's contribution).
    base: Vec<u32>,
    sent: Vec<[(u32, u64); OPEN_HISTORY]>,
    /// Results due: (round, slot) pairs fully sent x workers, minus those received.
    due: u64,
}

/// The emulation's state: what to send next, and what every reply means.
#[derive(Debug)]
pub struct Engine {
    em: Emulation,
    values: Values,
    hz: u64,
    timeout: u64,
    slow: Option<(u16, u64)>,
    workers: Vec<Worker>,
    /// Rank by (address, UDP port or QP): FxHash, looked up for every frame received.
    by_addr: rustc_hash::FxHashMap<([u8; 16], u32), u16>,
    /// The ones'-complement sum of every expected result payload, by [`sums_index`]: a result
    /// equal to the expected one has its UDP checksum verified without a second pass over the
    /// payload (the comparison is the one pass).
    result_sums: Vec<u16>,
    next_worker: usize,
    rng: u64,
    loss_threshold: u64,
    stopping: bool,
    open: Open,
    /// Frames received that are not replies of this collective.
    pub rx_other: u64,
    /// Gradient frames with a bad length, checksum or ICRC.
    pub rx_bad: u64,
    /// Latency of the last interval (for the live line).
    pub interval: Histogram<u64>,
    /// TSC of the first contribution and of the last result.
    pub first_tsc: u64,
    /// See `first_tsc`.
    pub last_tsc: u64,
    mult: u128,
}

/// Latencies in ns from 1 ns to 10 s, 3 significant digits.
fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 10_000_000_000, 3).expect("valid bounds")
}

impl Engine {
    /// The state of `em` on a TSC of `hz`.
    pub fn new(em: &Emulation, hz: u64, now: u64) -> Engine {
        let n_slots = em.slots();
        let start = if em.probe { S_PROBE } else { S_READY };
        let mut workers = Vec::new();
        let mut by_addr = rustc_hash::FxHashMap::default();
        for w in &em.workers {
            let ip = match w.ip {
                IpAddrBytes::V4(a) => key_of(&a),
                IpAddrBytes::V6(a) => a,
            };
            let port = if em.carriage == Carriage::Udp { w.udp_port as u32 } else { w.qpn };
            by_addr.insert((ip, port), w.rank);
            let slot = Slot { state: start, round: em.first_round, gen: 0, first_tsc: 0, completed: 0 };
            let mut ready = VecDeque::with_capacity(n_slots as usize + 1);
            if em.probe {
                ready.extend((0..n_slots).map(|s| (s, now)));
            }
            workers.push(Worker {
                slots: vec![slot; n_slots as usize],
                ready,
                cursor: 0,
                rejoin: VecDeque::new(),
                held: VecDeque::new(),
                timers: VecDeque::with_capacity(2 * (n_slots as usize + em.window as usize)),
                outstanding: 0,
                c: WorkerCounters::default(),
                hist: histogram(),
            });
        }
        let cyc = |us: u64| us.saturating_mul(hz) / 1_000_000;
        let values = Values::new(em);
        let result_sums =
            by_sums_index(em, &values, |t| &t.expected, |off, count, round| values.result(off, count, round))
                .into_iter()
                .map(checksum::sum)
                .collect();
        Engine {
            values,
            result_sums,
            hz,
            timeout: cyc(em.timeout_us).max(1),
            slow: em.slow.map(|(r, us)| (r, cyc(us))),
            workers,
            by_addr,
            next_worker: 0,
            rng: mix(em.seed ^ 0x1055),
            loss_threshold: (em.loss * u64::MAX as f64) as u64,
            stopping: false,
            open: Open {
                base: vec![em.first_round; n_slots as usize],
                sent: vec![[(u32::MAX, 0); OPEN_HISTORY]; n_slots as usize],
                ..Open::default()
            },
            rx_other: 0,
            rx_bad: 0,
            interval: histogram(),
            first_tsc: 0,
            last_tsc: 0,
            mult: ((1_000_000_000u128) << 32) / hz as u128,
            em: em.clone(),
        }
    }

    /// The emulation.
    pub fn emulation(&self) -> &Emulation {
        &self.em
    }

    /// The value tables.
    pub fn values(&self) -> &Values {
        &self.values
    }

    /// Counters of worker `rank`.
    pub fn counters(&self, rank: usize) -> &WorkerCounters {
        &self.workers[rank].c
    }

    /// Latency histogram (ns) of worker `rank`.
    pub fn histogram(&self, rank: usize) -> &Histogram<u64> {
        &self.workers[rank].hist
    }

    /// No new contributions from now on; replies are still taken.
    pub fn stop(&mut self) {
        self.stopping = true;
    }

    /// Every slot of every worker has completed its `rounds` or was refused (closed loop), or
    /// every round was sent (open loop). Never with unbounded rounds.
    pub fn finished(&self) -> bool {
        if self.em.rounds.is_none() {
            return false;
        }
        match self.em.mode {
            Mode::Closed => {
                self.workers.iter().all(|w| w.slots.iter().all(|s| s.state == S_DONE || s.state == S_REFUSED))
            }
            Mode::Open => self.open.done,
        }
    }

    /// Nothing is awaited any more (the run may end once stopped).
    pub fn drained(&self) -> bool {
        match self.em.mode {
            Mode::Closed => self.workers.iter().all(|w| w.outstanding == 0),
            Mode::Open => self.open.due == 0 && self.workers.iter().all(|w| w.outstanding == 0),
        }
    }

    #[inline(always)]
    fn lose(&mut self) -> bool {
        if self.loss_threshold == 0 {
            return false;
        }
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng < self.loss_threshold
    }

    /// Appends at most `max` sends due at `now` to `out` (sends dropped by `loss` are counted
    /// and not appended).
    pub fn sends(&mut self, now: u64, max: usize, out: &mut Vec<SendOrder>) {
        let n = self.workers.len();
        let mut room = max;
        // Timeouts first: resends of contributions and probes.
        for i in 0..n {
            let w = (self.next_worker + i) % n;
            while room > 0 {
                let Some(&(s, deadline, gen)) = self.workers[w].timers.front() else { break };
                if deadline > now {
                    break;
                }
                self.workers[w].timers.pop_front();
                let slot = self.workers[w].slots[s as usize];
                if slot.gen != gen || (slot.state != S_OUT && slot.state != S_PROBE) {
                    continue;
                }
                self.workers[w].c.timeouts += 1;
                if self.stopping && slot.state == S_PROBE {
                    // Nothing will follow the answer: stop probing.
                    self.workers[w].outstanding -= 1;
                    self.workers[w].slots[s as usize].state = S_READY;
                    continue;
                }
                let flags = if slot.state == S_PROBE {
                    self.workers[w].c.probes += 1;
                    Flags::PROBE | Flags::RETRANSMIT
                } else {
                    self.workers[w].c.retransmissions += 1;
                    Flags::RETRANSMIT
                };
                self.workers[w].timers.push_back((s, now + self.timeout, gen));
                if self.lose() {
                    self.workers[w].c.injected_drops += 1;
                } else {
                    out.push(SendOrder { rank: w as u16, slot: s, round: slot.round, flags });
                    room -= 1;
                }
            }
        }
        if room == 0 {
            self.next_worker = (self.next_worker + 1) % n;
            return;
        }
        let probing = self.em.probe && !self.open.started && self.em.mode == Mode::Open;
        if self.em.mode == Mode::Closed || probing {
            // Probes, a window per worker; then (closed loop) contributions.
            let window = if probing { u32::MAX } else { self.em.window };
            let mut progress = true;
            while room > 0 && progress {
                progress = false;
                for i in 0..n {
                    let w = (self.next_worker + i) % n;
                    if room == 0 {
                        break;
                    }
                    let wk = &mut self.workers[w];
                    if wk.outstanding >= window {
                        continue;
                    }
                    let Some(&(s, nb)) = wk.ready.front() else { continue };
                    if nb > now {
                        continue;
                    }
                    wk.ready.pop_front();
                    let slot = &mut wk.slots[s as usize];
                    if slot.state != S_PROBE {
                        continue;
                    }
                    progress = true;
                    wk.outstanding += 1;
                    slot.gen = slot.gen.wrapping_add(1);
                    wk.c.probes += 1;
                    let send = SendOrder { rank: w as u16, slot: s, round: slot.round, flags: Flags::PROBE };
                    wk.timers.push_back((s, now + self.timeout, slot.gen));
                    if self.lose() {
                        self.workers[w].c.injected_drops += 1;
                    } else {
                        out.push(send);
                        room -= 1;
                    }
                }
            }
            if self.em.mode == Mode::Closed {
                if self.stopping {
                    self.release_held();
                } else {
                    self.closed_sends(now, room, out);
                }
            }
            self.next_worker = (self.next_worker + 1) % n;
            if probing && self.workers.iter().all(|w| w.outstanding == 0 && w.ready.is_empty()) {
                // Every slot answered: the open loop starts with the next pass.
                self.open.started = true;
            }
            return;
        }
        self.open_sends(now, room, out);
    }

    /// Closed-loop contributions, at most `room`, one per worker in turn: first the slow
    /// worker's held contributions that are due, then the slots a NAK 7 moved, then each
    /// worker's next contribution in the sequence they all walk (round `k` of every slot in slot
    /// order, then round `k + 1`), while its window has room. A worker waits at a contribution
    /// that is not ready (its slot's probe or previous round still out) rather than pass it:
    /// so the lowest contribution not yet complete is in every worker's window or next, and no
    /// two windows can wait on each other (with `window` below the slots and loss, windows
    /// filled in different orders did). Contributions already in (a probe found the round in
    /// progress with ours), already complete, or of a refused slot are passed. The slow worker
    /// takes its window's room as the others do, but each contribution leaves `slow_us` after
    /// it could (held meanwhile).
    fn closed_sends(&mut self, now: u64, mut room: usize, out: &mut Vec<SendOrder>) {
        let n = self.workers.len();
        let slots = u64::from(self.em.slots());
        let rounds = self.em.rounds.map(u64::from);
        let mut progress = true;
        while room > 0 && progress {
            progress = false;
            for i in 0..n {
                if room == 0 {
                    break;
                }
                let w = (self.next_worker + i) % n;
                let slow = self.slow.filter(|(r, _)| *r as usize == w).map(|(_, d)| d);
                let wk = &mut self.workers[w];
                let s = if let Some(&(s, _)) = wk.held.front().filter(|(_, at)| *at <= now) {
                    wk.held.pop_front();
                    s
                } else if let Some(s) = wk.rejoin.pop_front() {
                    if wk.slots[s as usize].state != S_READY {
                        progress = true;
                        continue;
                    }
                    wk.outstanding += 1;
                    s
                } else {
                    let mut next = None;
                    // At most one pass over the slots per call: a worker whose every slot is
                    // refused (or done) without `rounds` has nothing to find.
                    let mut passed = 0;
                    while wk.outstanding < self.em.window && passed <= slots {
                        let (k, s) = (wk.cursor / slots, (wk.cursor % slots) as u32);
                        if rounds.is_some_and(|r| k >= r) {
                            break;
                        }
                        let slot = wk.slots[s as usize];
                        let done = u64::from(slot.completed);
                        match slot.state {
                            S_DONE | S_REFUSED => {}
                            // Complete already (a probe or a rejoin sent it ahead of the cursor).
                            _ if done > k => {}
                            // Ours is in already (a probe found the round in progress with it).
                            S_OUT if done == k => {}
                            S_READY if done == k => {
                                next = Some(s);
                                break;
                            }
                            _ => break,
                        }
                        wk.cursor += 1;
                        passed += 1;
                    }
                    let Some(s) = next else { continue };
                    wk.cursor += 1;
                    wk.outstanding += 1;
                    if let Some(d) = slow {
                        // Its room taken now, sent when due.
                        wk.slots[s as usize].state = S_OUT;
                        wk.held.push_back((s, now + d));
                        progress = true;
                        continue;
                    }
                    s
                };
                progress = true;
                let slot = &mut wk.slots[s as usize];
                slot.gen = slot.gen.wrapping_add(1);
                slot.state = S_OUT;
                slot.first_tsc = now;
                wk.c.contributions += 1;
                let send = SendOrder { rank: w as u16, slot: s, round: slot.round, flags: 0 };
                wk.timers.push_back((s, now + self.timeout, slot.gen));
                if self.first_tsc == 0 {
                    self.first_tsc = now;
                }
                if self.lose() {
                    self.workers[w].c.injected_drops += 1;
                } else {
                    out.push(send);
                    room -= 1;
                }
            }
        }
    }

    /// At a stop: the slow worker's held contributions are not sent; their room is given back.
    fn release_held(&mut self) {
        for wk in &mut self.workers {
            while let Some((s, _)) = wk.held.pop_front() {
                wk.outstanding -= 1;
                wk.slots[s as usize].state = S_READY;
            }
        }
    }

    fn open_sends(&mut self, now: u64, mut room: usize, out: &mut Vec<SendOrder>) {
        self.open.started = true;
        let n = self.workers.len() as u16;
        let slots = self.em.slots();
        while room > 0 && !self.open.done && !self.stopping {
            let (k, s, r) = (self.open.k, self.open.slot, self.open.rank);
            let round = self.open.base[s as usize].wrapping_add(k);
            if self.first_tsc == 0 {
                self.first_tsc = now;
            }
            self.workers[r as usize].c.contributions += 1;
            if self.lose() {
                self.workers[r as usize].c.injected_drops += 1;
            } else {
                out.push(SendOrder { rank: r, slot: s, round, flags: 0 });
                room -= 1;
            }
            if r + 1 == n {
                self.open.sent[s as usize][round as usize % OPEN_HISTORY] = (round, now);
                self.open.due += n as u64;
                self.open.rank = 0;
                if s + 1 == slots {
                    self.open.slot = 0;
                    self.open.k += 1;
                    if self.em.rounds.is_some_and(|x| self.open.k >= x) {
                        self.open.done = true;
                    }
                } else {
                    self.open.slot = s + 1;
                }
            } else {
                self.open.rank = r + 1;
            }
        }
    }

    /// Takes one received frame at `now`.
    pub fn on_frame(&mut self, now: u64, f: &[u8]) {
        let (r, udp) = match parse_reply_unsummed(f, self.em.gradient_udp_port, self.em.carriage) {
            Ok(r) => r,
            Err(NotReply::Other) => {
                self.rx_other += 1;
                return;
            }
            Err(NotReply::Bad) => {
                self.rx_bad += 1;
                return;
            }
        };
        let h = r.header;
        // A result of one of this collective's chunks: is its payload the right one? If so, its
        // UDP checksum (UDP carriage; RoCEv2 over IPv6) is verified from the expected payload's
        // sum: the comparison is then the one pass over the payload, not the comparison and a
        // checksum pass. (RoCEv2's ICRC, verified by the parse, is a pass of its own.)
        let chunk = self.em.chunk_elements;
        let s = h.tensor_offset / chunk;
        let slot_ok = h.tensor_offset % chunk == 0 && s < self.em.slots();
        let result = h.flags & (Flags::RESULT | Flags::NAK | Flags::PROBE) == Flags::RESULT && slot_ok;
        let payload_right = result.then(|| {
            let (off, count) = self.em.chunk(s);
            h.data_length as usize == count as usize * self.values.lane
                && &f[r.payload.0..r.payload.1] == self.values.result(off, count, h.round)
        });
        if let Some(u) = udp {
            let known = (payload_right == Some(true))
                .then(|| (r.payload.0, r.payload.1, self.result_sums[sums_index(&self.em, &self.values, s, h.round)]));
            if !u.verify(f, known) {
                self.rx_bad += 1;
                return;
            }
        }
        let Some(&rank) = self.by_addr.get(&r.to) else {
            self.rx_other += 1;
            return;
        };
        if h.collective_id != self.em.collective_id || h.version != VERSION {
            self.rx_other += 1;
            return;
        }
        let w = rank as usize;
        if h.flags & Flags::NAK != 0 {
            let known = (NakReason::UNKNOWN_COLLECTIVE..=NakReason::STALE_ROUND).contains(&h.reason);
            let reason = if known { h.reason as usize } else { 0 };
            self.workers[w].c.naks[reason] += 1;
            if !slot_ok {
                return;
            }
            let wk = &mut self.workers[w];
            let slot = &mut wk.slots[s as usize];
            if slot.state != S_OUT && slot.state != S_PROBE {
                return;
            }
            slot.gen = slot.gen.wrapping_add(1);
            wk.outstanding -= 1;
            if reason == NakReason::STALE_ROUND as usize {
                slot.round = h.round;
                slot.state = S_READY;
                if self.em.mode == Mode::Closed && slot.completed < self.em.rounds.unwrap_or(u32::MAX) {
                    wk.rejoin.push_back(s);
                }
            } else {
                slot.state = S_REFUSED;
                wk.c.refused_slots += 1;
            }
            return;
        }
        if h.flags & Flags::RESULT == 0 || !slot_ok {
            self.rx_other += 1;
            return;
        }
        if h.flags & Flags::PROBE != 0 {
            self.on_status(now, w, s, &h);
            return;
        }
        let count = self.em.chunk(s).1;
        let right = payload_right == Some(true) && h.op_type == self.em.op.wire() && h.dtype == self.em.dtype.wire();
        let lat = match self.em.mode {
            Mode::Closed => {
                let slot = self.workers[w].slots[s as usize];
                if slot.state != S_OUT || slot.round != h.round {
                    self.workers[w].c.stale_results += 1;
                    return;
                }
                let done = self.em.rounds.is_some_and(|x| slot.completed + 1 >= x);
                let wk = &mut self.workers[w];
                let sl = &mut wk.slots[s as usize];
                sl.gen = sl.gen.wrapping_add(1);
                sl.completed += 1;
                sl.round = sl.round.wrapping_add(1);
                wk.outstanding -= 1;
                sl.state = if done { S_DONE } else { S_READY };
                now.saturating_sub(slot.first_tsc)
            }
            Mode::Open => {
                let (round, t) = self.open.sent[s as usize][h.round as usize % OPEN_HISTORY];
                if round != h.round || self.open.due == 0 {
                    self.workers[w].c.stale_results += 1;
                    return;
                }
                self.open.due -= 1;
                now.saturating_sub(t)
            }
        };
        let c = &mut self.workers[w].c;
        c.results += 1;
        c.payload_bytes += h.data_length as u64;
        c.elements += count as u64;
        if right {
            c.right += 1;
        } else {
            c.wrong += 1;
        }
        let ns = ((lat as u128 * self.mult) >> 32) as u64;
        self.workers[w].hist.saturating_record(ns.max(1));
        self.interval.saturating_record(ns.max(1));
        self.last_tsc = now;
    }

    fn on_status(&mut self, now: u64, w: usize, s: u32, h: &GradientRepr) {
        let first = self.em.first_round;
        let open = self.em.mode == Mode::Open;
        let wk = &mut self.workers[w];
        wk.c.statuses += 1;
        let slot = &mut wk.slots[s as usize];
        if slot.state != S_PROBE {
            return;
        }
        slot.gen = slot.gen.wrapping_add(1);
        let round = match h.reason {
            SlotState::NO_HISTORY => first,
            _ => h.round,
        };
        slot.round = round;
        if open {
            if w == 0 {
                self.open.base[s as usize] = round;
            }
            slot.state = S_READY;
            wk.outstanding -= 1;
            return;
        }
        if h.reason == SlotState::IN_PROGRESS_WITH_RANK {
            // Ours is in: wait for the result (a timeout resends it, a duplicate).
            slot.state = S_OUT;
            slot.first_tsc = now;
            wk.timers.push_back((s, now + self.timeout, slot.gen));
        } else {
            slot.state = S_READY;
            wk.outstanding -= 1;
        }
    }

    /// Converts TSC cycles to seconds.
    pub fn seconds(&self, cycles: u64) -> f64 {
        cycles as f64 / self.hz as f64
    }
}

// ---------------------------------------------------------------------------------------------
// Frames

/// Builds the frames of sends: per worker a header spec, the payload slice and its precomputed
/// checksum contributions (exact values: one per table position and chunk length; normal values:
/// one per round held and slot), the RoCEv2 PSN counter. A full chunk's contribution is copied
/// from its worker's header template with the offset, round and PSN patched and its checksums
/// derived from the template's ([`template::Templates`], as the appliance writes its results);
/// probes and a short last chunk take the general builder.
#[derive(Debug)]
pub struct Builder {
    specs: Vec<FrameSpec>,
    /// Every worker's full-chunk contribution; `None` if the builder refused the specs (it then
    /// refuses every frame alike).
    templates: Option<template::Templates>,
    /// [rank][sums_index].
    sums: Vec<Vec<PayloadSums>>,
    probe: Vec<u8>,
    probe_sums: PayloadSums,
    psn: Vec<u32>,
}

/// Where the payload sums of (slot, round) are in a rank's list: exact values: `[0: full chunk,
/// 1: last chunk][table index]`; normal values: `[round index][slot]`.
#[inline(always)]
fn sums_index(em: &Emulation, v: &Values, slot: u32, round: u32) -> usize {
    let (off, count) = em.chunk(slot);
    match &v.source {
        Source::Exact(_) => usize::from(count != em.chunk_elements) * PERIOD + table_index(off, round),
        Source::Normal(n) => n.index(round) * em.slots() as usize + slot as usize,
    }
}

/// The chunks [`sums_index`] numbers, in its order: exact values, a full chunk then a last one
/// at every table position of `table` (a rank's lanes or the reference's); normal values,
/// `chunk(offset, count, round)` of every round held, slot after slot.
fn by_sums_index<'a>(
    em: &Emulation,
    v: &'a Values,
    table: impl Fn(&'a ExactTables) -> &'a [u8],
    chunk: impl Fn(u32, u32, u32) -> &'a [u8],
) -> Vec<&'a [u8]> {
    match &v.source {
        Source::Exact(t) => {
            let lanes = table(t);
            [em.chunk(0).1, em.chunk(em.slots() - 1).1]
                .iter()
                .flat_map(|&count| (0..PERIOD).map(move |j| &lanes[j * t.lane..(j + count as usize) * t.lane]))
                .collect()
        }
        Source::Normal(n) => (0..n.rounds)
            .flat_map(|i| (0..em.slots()).map(move |slot| (slot, n.first.wrapping_add(i))))
            .map(|(slot, round)| {
                let (off, count) = em.chunk(slot);
                chunk(off, count, round)
            })
            .collect(),
    }
}

impl Builder {
    /// For `e`'s emulation.
    pub fn new(e: &Engine) -> Builder {
        let em = &e.em;
        let v = &e.values;
        let specs: Vec<FrameSpec> = em.workers.iter().map(|w| em.spec(w)).collect();
        let sums = (0..em.workers.len())
            .map(|r| {
                by_sums_index(em, v, |t| &t.workers[r], |off, count, round| v.payload(r, off, count, round))
                    .into_iter()
                    .map(|p| PayloadSums::of(p, specs[r].pad(p.len())))
                    .collect()
            })
            .collect();
        let probe = vec![0u8; gradient::probe_len(em.workers.len())];
        let probe_sums = PayloadSums::of(&probe, specs[0].pad(probe.len()));
        let full = em.chunk(0).1 as usize * v.lane;
        let contribution_specs: Vec<FrameSpec> = specs
            .iter()
            .map(|s| {
                let mut s = *s;
                s.header.data_length = full as u32;
                s
            })
            .collect();
        let templates = template::Templates::new(&contribution_specs, full).ok();
        Builder { psn: vec![0; specs.len()], specs, templates, sums, probe, probe_sums }
    }

    /// Frame length of `s`.
    pub fn frame_len(&self, e: &Engine, s: &SendOrder) -> usize {
        let len =
            if s.flags & Flags::PROBE != 0 { self.probe.len() } else { e.em.chunk(s.slot).1 as usize * e.values.lane };
        self.specs[s.rank as usize].frame_len(len)
    }

    /// Writes `s`'s frame into `buf` (at least [`Builder::frame_len`] bytes); returns its length.
    pub fn build(&mut self, e: &Engine, s: &SendOrder, buf: &mut [u8]) -> usize {
        let r = s.rank as usize;
        let (off, count) = e.em.chunk(s.slot);
        let spec = &mut self.specs[r];
        if let Some(roce) = &mut spec.roce {
            roce.psn = self.psn[r] & 0xff_ffff;
            self.psn[r] = self.psn[r].wrapping_add(1);
        }
        if s.flags == 0 {
            if let Some(t) = &self.templates {
                let i = sums_index(&e.em, &e.values, s.slot, s.round);
                let (payload, sums) = (e.values.payload(r, off, count, s.round), &self.sums[r][i]);
                if t.fits(payload.len(), sums) {
                    let len = t.frame_len(r);
                    let patch = template::Patch {
                        tensor_offset: off,
                        round: s.round,
                        roce: spec.roce.as_ref().map(|roce| (spec.src_port, roce.psn)),
                    };
                    t.write(r, &patch, payload, sums, &mut buf[..len]);
                    return len;
                }
            }
        }
        spec.header.flags = s.flags;
        spec.header.tensor_offset = off;
        spec.header.round = s.round;
        let (payload, sums) = if s.flags & Flags::PROBE != 0 {
            spec.header.round = 0;
            (&self.probe[..], &self.probe_sums)
        } else {
            let i = sums_index(&e.em, &e.values, s.slot, s.round);
            (e.values.payload(r, off, count, s.round), &self.sums[r][i])
        };
        spec.header.data_length = payload.len() as u32;
        build::build_with(spec, payload, Some(sums), buf).expect("the buffer fits the frame")
    }
}

// ---------------------------------------------------------------------------------------------
// On the port

/// An emulation on its port: the engine, the frames, the queues.
#[derive(Debug)]
pub struct Runner {
    /// The state machine.
    pub engine: Engine,
    builder: Builder,
    txq: TxQueue,
    rxqs: Vec<RxQueue>,
    sends: Vec<SendOrder>,
    pend: Vec<Option<Mbuf>>,
    pend_at: usize,
    pend_n: usize,
    rx: Vec<Option<Mbuf>>,
    pacer: Option<Pacer>,
    burst: usize,
    /// Bursts the tx queue did not take whole (the rest is retried first).
    pub tx_full: u64,
    /// Failed mbuf allocations.
    pub nombuf: u64,
    /// Frames sent.
    pub tx_packets: u64,
    /// Their bytes.
    pub tx_bytes: u64,
    /// Frames received.
    pub rx_packets: u64,
}

impl Runner {
    /// `em` on DPDK port `port_id` (`rx_queues` rx queues, tx queue 0), `burst` frames at most per
    /// pass, on a TSC of `hz`.
    pub fn new(em: &Emulation, port_id: u16, rx_queues: u16, burst: usize, hz: u64, now: u64) -> Runner {
        let engine = Engine::new(em, hz, now);
        let builder = Builder::new(&engine);
        let pacer = em.rate_pps.map(|r| {
            let mut p = Pacer::new(r, hz, burst as f64, 0.05);
            p.start(now);
            p
        });
        Runner {
            engine,
            builder,
            txq: TxQueue::new(port_id, 0),
            rxqs: (0..rx_queues).map(|q| RxQueue::new(port_id, q)).collect(),
            sends: Vec::with_capacity(burst),
            pend: (0..burst).map(|_| None).collect(),
            pend_at: 0,
            pend_n: 0,
            rx: (0..burst).map(|_| None).collect(),
            pacer,
            burst,
            tx_full: 0,
            nombuf: 0,
            tx_packets: 0,
            tx_bytes: 0,
            rx_packets: 0,
        }
    }

    /// One pass at `now`: receive and take every reply, retry what the tx queue refused, else
    /// send what the engine asks for.
    pub fn poll(&mut self, now: u64, pool: &Mempool) {
        for q in 0..self.rxqs.len() {
            let n = self.rxqs[q].rx_burst(&mut self.rx);
            for m in self.rx[..n].iter() {
                let m = m.as_ref().expect("received");
                self.engine.on_frame(now, dataplane::buf::PacketBuf::data(m));
            }
            self.rx_packets += n as u64;
            dpdk::mbuf::free_burst(&mut self.rx[..n]);
        }
        if self.pend_n > 0 {
            let (a, n) = (self.pend_at, self.pend_n);
            let k = self.txq.tx_burst(&mut self.pend[a..a + n]);
            self.tx_packets += k as u64;
            self.pend_at += k;
            self.pend_n -= k;
            if self.pend_n > 0 {
                self.tx_full += 1;
                return;
            }
        }
        let max = match &mut self.pacer {
            None => self.burst,
            Some(p) => (p.budget(now) as usize).min(self.burst),
        };
        if max == 0 {
            return;
        }
        self.sends.clear();
        self.engine.sends(now, max, &mut self.sends);
        let n = self.sends.len();
        if n == 0 {
            return;
        }
        if let Some(p) = &mut self.pacer {
            p.spend(n as f64);
        }
        if !pool.alloc_bulk(&mut self.pend[..n]) {
            // The sends are lost as if dropped: the timeouts resend them (closed loop).
            self.nombuf += 1;
            return;
        }
        for (slot, s) in self.pend[..n].iter_mut().zip(&self.sends) {
            let m = slot.as_mut().expect("allocated above");
            let len = self.builder.frame_len(&self.engine, s);
            let ok = m.set_len(len as u16);
            debug_assert!(ok, "the data room fits the largest frame (checked with the config)");
            self.builder.build(&self.engine, s, dataplane::buf::PacketBuf::data_mut(m));
            self.tx_bytes += len as u64;
        }
        let k = self.txq.tx_burst(&mut self.pend[..n]);
        self.tx_packets += k as u64;
        if k < n {
            self.tx_full += 1;
            self.pend_at = k;
            self.pend_n = n - k;
        }
    }

    /// Frees frames still waiting for the tx queue.
    pub fn discard(&mut self) {
        dpdk::mbuf::free_burst(&mut self.pend[self.pend_at..self.pend_at + self.pend_n]);
        self.pend_n = 0;
    }
}

// ---------------------------------------------------------------------------------------------
// Reporting

/// NAKs by reason (spec section 5).
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct NakCounts {
    /// 1: unknown collective.
    pub unknown_collective: u64,
    /// 2: bad version.
    pub bad_version: u64,
    /// 3: op, dtype or carriage mismatch.
    pub mismatch: u64,
    /// 4: bad rank.
    pub bad_rank: u64,
    /// 5: not the rank's member.
    pub not_member: u64,
    /// 6: bad length or offset.
    pub bad_length_or_offset: u64,
    /// 7: stale or premature round.
    pub stale_round: u64,
    /// Any other reason code.
    pub other: u64,
}

impl NakCounts {
    /// From counts by reason code (index 0: any other code).
    fn of(n: &[u64; 8]) -> NakCounts {
        let c = |r: u8| n[r as usize];
        NakCounts {
            other: n[0],
            unknown_collective: c(NakReason::UNKNOWN_COLLECTIVE),
            bad_version: c(NakReason::BAD_VERSION),
            mismatch: c(NakReason::MISMATCH),
            bad_rank: c(NakReason::BAD_RANK),
            not_member: c(NakReason::NOT_MEMBER),
            bad_length_or_offset: c(NakReason::BAD_LENGTH_OR_OFFSET),
            stale_round: c(NakReason::STALE_ROUND),
        }
    }

    /// All reasons together.
    pub fn total(&self) -> u64 {
        self.unknown_collective
            + self.bad_version
            + self.mismatch
            + self.bad_rank
            + self.not_member
            + self.bad_length_or_offset
            + self.stale_round
            + self.other
    }

    fn text(&self) -> String {
        let all = [
            ("unknown_collective", self.unknown_collective),
            ("bad_version", self.bad_version),
            ("mismatch", self.mismatch),
            ("bad_rank", self.bad_rank),
            ("not_member", self.not_member),
            ("bad_length_or_offset", self.bad_length_or_offset),
            ("stale_round", self.stale_round),
            ("other", self.other),
        ];
        let v: Vec<String> = all.iter().filter(|x| x.1 > 0).map(|(k, v)| format!("{k}={v}")).collect();
        if v.is_empty() {
            "0".into()
        } else {
            v.join(" ")
        }
    }
}

/// One worker's summary.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerSummary {
    /// Rank.
    pub rank: u16,
    /// Counters.
    #[serde(flatten)]
    pub counters: WorkerCounters,
    /// NAKs by reason.
    pub nak_reasons: NakCounts,
    /// Latency from a round's first send to its result (µs).
    pub latency: Option<Latency>,
}

/// An emulation's summary.
#[derive(Debug, Clone, Serialize)]
pub struct AllreduceSummary {
    /// Label.
    pub name: String,
    /// Closed or open loop.
    pub mode: Mode,
    /// `udp` or `rocev2`.
    pub carriage: &'static str,
    /// Lane type.
    pub dtype: &'static str,
    /// The op sent.
    pub op: &'static str,
    /// The op results were checked against.
    pub expect_op: &'static str,
    /// Workers.
    pub workers: usize,
    /// Slots as sent.
    pub slots: u32,
    /// Elements per chunk.
    pub chunk_elements: u32,
    /// Rounds per slot asked for.
    pub rounds: Option<u32>,
    /// Seconds from the first contribution to the last result.
    pub seconds: f64,
    /// Contributions sent (first sends).
    pub contributions: u64,
    /// Retransmissions.
    pub retransmissions: u64,
    /// Timeouts.
    pub timeouts: u64,
    /// Sends dropped on purpose.
    pub injected_drops: u64,
    /// Results received for a round in flight, summed over workers (one per worker per slot
    /// round: the appliance's completed rounds times the workers).
    pub results: u64,
    /// Results equal to the reference.
    pub right: u64,
    /// Results that were not.
    pub wrong: u64,
    /// Results for no round in flight.
    pub stale_results: u64,
    /// Slots refused by a NAK.
    pub refused_slots: u64,
    /// (worker, slot) pairs that did not complete their rounds (closed loop with `rounds`), or
    /// results that never came back (open loop with `rounds`).
    pub incomplete: u64,
    /// NAKs by reason.
    pub naks: NakCounts,
    /// Completed contributions per second.
    pub contributions_per_s: f64,
    /// Payload Gbit/s of the completed contributions.
    pub payload_gbps: f64,
    /// Elements per second of the completed contributions.
    pub elements_per_s: f64,
    /// Latency over every worker (µs).
    pub latency: Option<Latency>,
    /// Frames sent and received on the port, tx-full retries, mbuf allocation failures.
    pub tx_packets: u64,
    /// See `tx_packets`.
    pub rx_packets: u64,
    /// See `tx_packets`.
    pub tx_full: u64,
    /// See `tx_packets`.
    pub nombuf: u64,
    /// Gradient frames with a bad checksum, ICRC or length.
    pub rx_bad: u64,
    /// Other frames received.
    pub rx_other: u64,
    /// Per worker.
    pub per_worker: Vec<WorkerSummary>,
}

fn carriage_name(c: Carriage) -> &'static str {
    match c {
        Carriage::Udp => "udp",
        Carriage::Rocev2 => "rocev2",
    }
}

impl AllreduceSummary {
    /// From a runner at the end of the run.
    pub fn new(r: &Runner) -> AllreduceSummary {
        let e = &r.engine;
        let em = &e.em;
        let mut all = histogram();
        let mut per_worker = Vec::new();
        let mut t = WorkerCounters::default();
        let mut naks = [0u64; 8];
        let mut incomplete = 0;
        for (i, w) in e.workers.iter().enumerate() {
            all.add(&w.hist).expect("same bounds");
            let c = &w.c;
            t.add_totals(c);
            for (a, b) in naks.iter_mut().zip(c.naks) {
                *a += b;
            }
            if em.mode == Mode::Closed && em.rounds.is_some() {
                incomplete += w.slots.iter().filter(|s| s.state != S_DONE).count() as u64;
            }
            per_worker.push(WorkerSummary {
                rank: i as u16,
                counters: *c,
                nak_reasons: NakCounts::of(&c.naks),
                latency: Latency::of(&w.hist),
            });
        }
        if em.mode == Mode::Open && em.rounds.is_some() {
            // Open loop: the results due (every worker's, for each round fully sent) that never
            // came back: a lost contribution is not resent there, so its round never completes.
            incomplete = e.open.due;
        }
        let seconds =
            if e.last_tsc > e.first_tsc && e.first_tsc != 0 { e.seconds(e.last_tsc - e.first_tsc) } else { 0.0 };
        let per_s = |x: u64| if seconds > 0.0 { x as f64 / seconds } else { 0.0 };
        AllreduceSummary {
            name: em.name.clone(),
            mode: em.mode,
            carriage: carriage_name(em.carriage),
            dtype: em.dtype.name(),
            op: em.op.name(),
            expect_op: em.expect_op.name(),
            workers: em.workers.len(),
            slots: em.slots(),
            chunk_elements: em.chunk_elements,
            rounds: em.rounds,
            seconds,
            contributions: t.contributions,
            retransmissions: t.retransmissions,
            timeouts: t.timeouts,
            injected_drops: t.injected_drops,
            results: t.results,
            right: t.right,
            wrong: t.wrong,
            stale_results: t.stale_results,
            refused_slots: t.refused_slots,
            incomplete,
            naks: NakCounts::of(&naks),
            contributions_per_s: per_s(t.results),
            payload_gbps: per_s(t.payload_bytes) * 8.0 / 1e9,
            elements_per_s: per_s(t.elements),
            latency: Latency::of(&all),
            tx_packets: r.tx_packets,
            rx_packets: r.rx_packets,
            tx_full: r.tx_full,
            nombuf: r.nombuf,
            rx_bad: e.rx_bad,
            rx_other: e.rx_other,
            per_worker,
        }
    }

    /// Why the emulation failed, if it did: wrong results, refused slots, or rounds that did not
    /// complete.
    pub fn failure(&self) -> Option<String> {
        let mut v = Vec::new();
        if self.wrong > 0 {
            v.push(format!("{} of {} results wrong", self.wrong, self.results));
        }
        if self.refused_slots > 0 {
            v.push(format!("{} slots refused by NAKs ({})", self.refused_slots, self.naks.text()));
        }
        if self.mode == Mode::Open && self.incomplete > 0 {
            v.push(format!("{} results did not come back (open loop: nothing is resent)", self.incomplete));
        } else if self.incomplete > self.refused_slots {
            v.push(format!(
                "{} (worker, slot) pairs did not complete their rounds",
                self.incomplete - self.refused_slots
            ));
        }
        (!v.is_empty()).then(|| format!("allreduce {}: {}", self.name, v.join("; ")))
    }
}

/// The summaries as a text table: one row per emulation and one per worker.
pub fn table(list: &[AllreduceSummary]) -> String {
    let mut out = String::new();
    for a in list {
        out += &format!(
            "allreduce {}: {} loop, {} workers x {} slots of {} {} lanes, {} (checked as {}), {}\n",
            a.name,
            match a.mode {
                Mode::Closed => "closed",
                Mode::Open => "open",
            },
            a.workers,
            a.slots,
            a.chunk_elements,
            a.dtype,
            a.op,
            a.expect_op,
            a.carriage
        );
        out += &format!(
            "  {:.3} s: {} results ({} right, {} wrong, {} stale), {:.4} M contributions/s, {:.3} Gbit/s payload, {:.4} G elements/s\n",
            a.seconds,
            a.results,
            a.right,
            a.wrong,
            a.stale_results,
            a.contributions_per_s / 1e6,
            a.payload_gbps,
            a.elements_per_s / 1e9
        );
        out += &format!(
            "  sent {} contributions, {} retransmissions, {} timeouts, {} injected drops; NAKs: {}; refused slots {}, incomplete {}; tx-full {} nombuf {} rx bad {}\n",
            a.contributions,
            a.retransmissions,
            a.timeouts,
            a.injected_drops,
            a.naks.text(),
            a.refused_slots,
            a.incomplete,
            a.tx_full,
            a.nombuf,
            a.rx_bad
        );
        out += &format!(
            "  {:>6} {:>10} {:>10} {:>8} {:>8} {:>8} {:>6} {:>10} {:>10} {:>10}\n",
            "rank", "results", "right", "wrong", "retx", "timeouts", "naks", "p50 µs", "p99 µs", "max µs"
        );
        for w in &a.per_worker {
            let l = w.latency;
            let f = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.1}"));
            out += &format!(
                "  {:>6} {:>10} {:>10} {:>8} {:>8} {:>8} {:>6} {:>10} {:>10} {:>10}\n",
                w.rank,
                w.counters.results,
                w.counters.right,
                w.counters.wrong,
                w.counters.retransmissions,
                w.counters.timeouts,
                w.nak_reasons.total(),
                f(l.map(|l| l.p50_us)),
                f(l.map(|l| l.p99_us)),
                f(l.map(|l| l.max_us)),
            );
        }
    }
    out.trim_end().to_string()
}

/// The CSV columns of the allreduce rows.
pub const CSV_HEADER: &str = "allreduce,rank,mode,carriage,dtype,op,expect_op,workers,slots,chunk_elements,seconds,\
contributions,retransmissions,timeouts,injected_drops,results,right,wrong,stale_results,refused_slots,\
naks,nak_unknown_collective,nak_bad_version,nak_mismatch,nak_bad_rank,nak_not_member,nak_bad_length_or_offset,\
nak_stale_round,contributions_per_s,payload_gbps,elements_per_s,lat_min_us,lat_p50_us,lat_p99_us,lat_p999_us,\
lat_max_us,lat_mean_us";

/// The summaries as CSV: [`CSV_HEADER`], then per emulation a row for all workers (`rank`
/// empty) and one per worker (rates over the emulation's time).
pub fn csv(list: &[AllreduceSummary]) -> String {
    let mut out = String::from(CSV_HEADER);
    out.push('\n');
    for a in list {
        let per_s = |x: u64| if a.seconds > 0.0 { x as f64 / a.seconds } else { 0.0 };
        let mut row = |rank: String, c: &WorkerCounters, n: &NakCounts, lat: Option<Latency>| {
            let cells = [
                a.name.clone(),
                rank,
                format!("{:?}", a.mode).to_lowercase(),
                a.carriage.into(),
                a.dtype.into(),
                a.op.into(),
                a.expect_op.into(),
                a.workers.to_string(),
                a.slots.to_string(),
                a.chunk_elements.to_string(),
                a.seconds.to_string(),
                c.contributions.to_string(),
                c.retransmissions.to_string(),
                c.timeouts.to_string(),
                c.injected_drops.to_string(),
                c.results.to_string(),
                c.right.to_string(),
                c.wrong.to_string(),
                c.stale_results.to_string(),
                c.refused_slots.to_string(),
                n.total().to_string(),
                n.unknown_collective.to_string(),
                n.bad_version.to_string(),
                n.mismatch.to_string(),
                n.bad_rank.to_string(),
                n.not_member.to_string(),
                n.bad_length_or_offset.to_string(),
                n.stale_round.to_string(),
                per_s(c.results).to_string(),
                (per_s(c.payload_bytes) * 8.0 / 1e9).to_string(),
                per_s(c.elements).to_string(),
            ];
            push_csv_row(&mut out, cells.into_iter().chain(Latency::csv_cells(lat)));
        };
        let mut t = WorkerCounters::default();
        for w in &a.per_worker {
            let c = &w.counters;
            t.add_totals(c);
        }
        row(String::new(), &t, &a.naks, a.latency);
        for w in &a.per_worker {
            row(w.rank.to_string(), &w.counters, &w.nak_reasons, w.latency);
        }
    }
    out
}

/// What the live line shows of one emulation: its totals so far and the latency of the last
/// interval. Taken by whichever lcore runs the emulation ([`LiveCounts::take`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LiveCounts {
    /// Results received for a round in flight, summed over workers.
    pub results: u64,
    /// Payload bytes of those results.
    pub payload_bytes: u64,
    /// Results equal to the reference.
    pub right: u64,
    /// Results that were not.
    pub wrong: u64,
    /// Contributions resent with RETRANSMIT.
    pub retransmissions: u64,
    /// Timeouts.
    pub timeouts: u64,
    /// NAKs received, every reason.
    pub naks: u64,
    /// Bursts the tx queue did not take whole.
    pub tx_full: u64,
    /// Failed mbuf allocations.
    pub nombuf: u64,
    /// Latency from a round's first send to its result over the interval (µs); `None`: no result.
    pub latency: Option<Latency>,
}

impl LiveCounts {
    /// `r`'s counts now; resets its interval histogram (the next interval starts). Allocates
    /// nothing.
    pub fn take(r: &mut Runner) -> LiveCounts {
        let e = &mut r.engine;
        let mut c = LiveCounts { tx_full: r.tx_full, nombuf: r.nombuf, ..LiveCounts::default() };
        for w in &e.workers {
            c.results += w.c.results;
            c.payload_bytes += w.c.payload_bytes;
            c.right += w.c.right;
            c.wrong += w.c.wrong;
            c.retransmissions += w.c.retransmissions;
            c.timeouts += w.c.timeouts;
            c.naks += w.c.naks.iter().sum::<u64>();
        }
        c.latency = Latency::of(&e.interval);
        e.interval.reset();
        c
    }
}

/// The live line's part for one emulation: totals so far, rates over the last interval.
#[derive(Debug)]
pub struct LiveState {
    last_results: u64,
    last_bytes: u64,
}

impl LiveState {
    /// Nothing seen yet.
    pub fn new() -> LiveState {
        LiveState { last_results: 0, last_bytes: 0 }
    }

    /// The line of emulation `name` at `t` seconds since the start, `dt` seconds after the
    /// previous one, from its counts `c`.
    pub fn line(&mut self, t: f64, dt: f64, name: &str, c: &LiveCounts) -> String {
        let lat = c.latency.map_or("-".to_string(), |l| {
            format!("p50 {:.1} p99 {:.1} p99.9 {:.1} max {:.1}", l.p50_us, l.p99_us, l.p999_us, l.max_us)
        });
        let rate = c.results.saturating_sub(self.last_results) as f64 / dt;
        let gbps = c.payload_bytes.saturating_sub(self.last_bytes) as f64 * 8.0 / dt / 1e9;
        self.last_results = c.results;
        self.last_bytes = c.payload_bytes;
        format!(
            "[{t:6.1} s] allreduce {name}: {:.4} M contributions/s {gbps:.3} Gbit/s payload | results {} right {} wrong {} | naks {} retx {} timeouts {} | lat µs {lat} | tx-full {} nombuf {}",
            rate / 1e6,
            c.results,
            c.right,
            c.wrong,
            c.naks,
            c.retransmissions,
            c.timeouts,
            c.tx_full,
            c.nombuf
        )
    }
}

impl Default for LiveState {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The text of the example `conf/pktgen/allreduce.toml`, its appliance config's path made
    /// absolute (tests run from the crate's folder), and that absolute path: the config tests'
    /// starting point.
    pub(crate) fn example_config() -> (String, std::path::PathBuf) {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let app = root.join("conf/pktgen/allreduce-appliance.toml");
        let text = std::fs::read_to_string(root.join("conf/pktgen/allreduce.toml"))
            .unwrap()
            .replace("conf/pktgen/allreduce-appliance.toml", app.to_str().unwrap());
        (text, app)
    }

    fn em(op: Op, expect: Op, dtype: Dtype) -> Emulation {
        let w = |k: u16| WorkerAddr {
            rank: k,
            mac: EthernetAddress([2, 0, 0, 0, 1, k as u8]),
            ip: IpAddrBytes::V4([10, 0, 0, k as u8 + 1]),
            udp_port: 50000 + k,
            vlan: None,
            qpn: 0x100 + k as u32,
            qkey: 0x1111_1111,
            appliance_mac: EthernetAddress([2, 0, 0, 0, 0, 0xfe]),
            appliance_ip: IpAddrBytes::V4([10, 0, 0, 254]),
        };
        Emulation {
            name: "t".into(),
            port: 0,
            mode: Mode::Closed,
            window: 2,
            rounds: Some(2),
            timeout_us: 1000,
            rate_pps: None,
            loss: 0.0,
            slow: None,
            probe: false,
            first_round: 0,
            collective_id: 1,
            op,
            expect_op: expect,
            dtype,
            carriage: Carriage::Udp,
            tensor_elements: 100,
            chunk_elements: 64,
            gradient_udp_port: 49374,
            appliance_qpn: 1,
            workers: (0..3).map(w).collect(),
            seed: 1,
            values: ValueKind::Exact,
            value_rounds: 1,
            lcore: None,
        }
    }

    /// The reference is the lane-wise reduction of the workers' payloads, decoded, for every
    /// op, at any offset and round.
    #[test]
    fn the_reference_reduces_the_payloads() {
        for op in Op::ALL {
            let e = em(op, op, Dtype::F32);
            let v = Values::new(&e);
            for (off, count, round) in [(0u32, 64u32, 0u32), (64, 36, 5), (64, 36, u32::MAX)] {
                let lanes =
                    |b: &[u8]| -> Vec<f32> { b.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect() };
                let ps: Vec<Vec<f32>> = (0..3).map(|r| lanes(v.payload(r, off, count, round))).collect();
                let want: Vec<f32> = (0..count as usize)
                    .map(|i| {
                        let it = ps.iter().map(|p| p[i]);
                        match op {
                            Op::Sum => it.sum(),
                            Op::Max => it.fold(f32::MIN, f32::max),
                            Op::Min => it.fold(f32::MAX, f32::min),
                        }
                    })
                    .collect();
                assert_eq!(lanes(v.result(off, count, round)), want, "{op:?} {off} {round}");
            }
            // Rounds differ.
            assert_ne!(v.payload(0, 0, 64, 0), v.payload(0, 0, 64, 1));
        }
        // Sum against max: every full chunk differs (lane 0 of the table is 1 for everyone).
        let s = Values::new(&em(Op::Sum, Op::Sum, Dtype::Bf16));
        let m = Values::new(&em(Op::Sum, Op::Max, Dtype::Bf16));
        for round in 0..70 {
            assert_ne!(s.result(0, 64, round), m.result(0, 64, round));
        }
    }

    /// One frame layout for both outputs: with the address plan's addresses (those of `em`),
    /// the live builder's frame of every (rank, slot, round, flags) is byte for byte the pcap
    /// writer's (`frame::build_frame`) for the same event, PSN and payload, on both carriages.
    #[test]
    fn live_frames_are_the_pcap_writers_frames() {
        use crate::workload::{Event, Kind, Params};
        for carriage in [Carriage::Udp, Carriage::Rocev2] {
            let mut e = em(Op::Sum, Op::Sum, Dtype::F32);
            e.carriage = carriage;
            e.tensor_elements = 64 * 3 + 7;
            let p = Params {
                workers: 3,
                tensor_elements: e.tensor_elements,
                chunk_elements: e.chunk_elements,
                dtype: e.dtype,
                op: e.op,
                carriage,
                collective_id: e.collective_id,
                ..Default::default()
            };
            let eng = Engine::new(&e, 1_000_000_000, 1);
            let mut b = Builder::new(&eng);
            let (mut live, mut pcap) = (vec![0u8; 4096], Vec::new());
            let mut psn = [0u32; 3];
            let mut frames = 0;
            for round in [0u32, 5, u32::MAX] {
                for slot in 0..e.slots() {
                    for rank in 0..3u16 {
                        for flags in [0, Flags::RETRANSMIT] {
                            let s = SendOrder { rank, slot, round, flags };
                            let n = b.build(&eng, &s, &mut live);
                            let (offset, count) = e.chunk(slot);
                            let r = rank as usize;
                            let ev = Event {
                                time_us: 0,
                                rank,
                                round_index: 0,
                                round,
                                offset,
                                count,
                                flags,
                                kind: Kind::First,
                                psn: psn[r],
                            };
                            psn[r] += 1;
                            let payload = eng.values.payload(r, offset, count, round);
                            let m = crate::frame::build_frame(&p, &ev, payload, &mut pcap);
                            assert_eq!(&live[..n], &pcap[..m], "{carriage:?} {s:?}");
                            frames += 1;
                        }
                    }
                }
            }
            assert_eq!(frames, 3 * 4 * 3 * 2);
        }
    }

    /// One value model, two outputs: for both kinds, every dtype and op, the frames the pcap
    /// writer writes (`pcap::write_pcap`, read back) are byte for byte those the live builder
    /// makes for the same (round, rank, offset, flags, PSN), RoCEv2 over a round wrap with
    /// shuffled, dropped and late contributions; the live engine checks results against the pcap
    /// writer's reference (`expected.json`'s payloads). Normal values past the `R` rounds held
    /// repeat them.
    #[test]
    fn both_outputs_send_the_same_payloads_and_check_the_same_references() {
        use crate::workload::{Impairments, Params, Workload};
        use pcap_file::pcap::PcapReader;
        for kind in [ValueKind::Exact, ValueKind::Normal] {
            for dtype in [Dtype::F32, Dtype::F16, Dtype::Bf16, Dtype::I32] {
                for op in [Op::Sum, Op::Max] {
                    let ctx = format!("{kind:?} {dtype:?} {op:?}");
                    let mut e = em(op, op, dtype);
                    e.carriage = Carriage::Rocev2;
                    e.tensor_elements = 64 * 3 + 7;
                    e.first_round = u32::MAX - 1;
                    e.seed = 9;
                    e.values = kind;
                    e.value_rounds = 3;
                    let p = Params {
                        workers: 3,
                        tensor_elements: e.tensor_elements,
                        chunk_elements: e.chunk_elements,
                        dtype,
                        op,
                        carriage: Carriage::Rocev2,
                        collective_id: e.collective_id,
                        rounds: 3,
                        first_round: e.first_round,
                        seed: 9,
                        values: kind,
                        impair: Impairments { shuffle: true, drop: 0.2, late: 0.2, ..Impairments::default() },
                        ..Default::default()
                    };
                    let w = Workload::generate(p).unwrap();
                    let mut file = Vec::new();
                    crate::pcap::write_pcap(&w, &mut file).unwrap();
                    let mut rd = PcapReader::new(&file[..]).unwrap();
                    let eng = Engine::new(&e, 1_000_000_000, 1);
                    let mut b = Builder::new(&eng);
                    let mut live = vec![0u8; 4096];
                    for ev in &w.events {
                        let s = SendOrder { rank: ev.rank, slot: ev.offset / 64, round: ev.round, flags: ev.flags };
                        let n = b.build(&eng, &s, &mut live);
                        let rec = rd.next_packet().unwrap().unwrap();
                        assert_eq!(&live[..n], &rec.data[..], "{ctx}: {ev:?}");
                    }
                    assert!(rd.next_packet().is_none());
                    assert!(w.counts.dropped > 0 && w.counts.late > 0);
                    for ri in 0..3 {
                        let round = w.params.round(ri);
                        for (off, count, want) in w.reference(ri) {
                            assert_eq!(eng.values().result(off, count, round), &want[..], "{ctx} round {round}");
                        }
                    }
                    // Past the rounds held, normal values repeat them (exact ones need none).
                    let later = e.first_round.wrapping_add(3);
                    let t = w.tensor(0, 1);
                    let same = eng.values().payload(1, 64, 64, later) == w.chunk_of(&t, 64, 64);
                    assert_eq!(same, kind == ValueKind::Normal, "{ctx}");
                    if kind == ValueKind::Exact {
                        let m = e.model();
                        assert_eq!(eng.values().payload(1, 64, 64, later), m.chunk_of(&m.tensor(later, 1), 64, 64));
                    }
                }
            }
        }
    }

    /// Every frame the builder makes (both carriages and families, a VLAN, every dtype, every
    /// table position, full and short chunks, probes, PSNs across the 24-bit wrap) passes the
    /// appliance's parser, which verifies the UDP checksum and the ICRC, with the header asked
    /// for; and is byte for byte the general builder's frame (a full chunk's contribution comes
    /// from its worker's template, everything else from the builder).
    #[test]
    fn built_frames_pass_the_appliance_parser() {
        for carriage in [Carriage::Udp, Carriage::Rocev2] {
            for v6 in [false, true] {
                for dtype in [Dtype::F32, Dtype::F16, Dtype::Bf16, Dtype::I32] {
                    let mut e = em(Op::Sum, Op::Sum, dtype);
                    e.carriage = carriage;
                    e.tensor_elements = 64 * 3 + 7;
                    for w in &mut e.workers {
                        w.vlan = Some(12);
                        if v6 {
                            w.ip = IpAddrBytes::V6([0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, w.rank as u8 + 1]);
                            w.appliance_ip = IpAddrBytes::V6([0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xfe]);
                        }
                    }
                    let eng = Engine::new(&e, 1_000_000_000, 1);
                    let mut b = Builder::new(&eng);
                    b.psn = vec![0xff_fff0; 3];
                    assert!(b.templates.is_some());
                    let mut plain = Builder::new(&eng);
                    plain.psn = b.psn.clone();
                    plain.templates = None;
                    let (mut buf, mut want) = (vec![0u8; 4096], vec![0u8; 4096]);
                    for round in 0..PERIOD as u32 + 2 {
                        for slot in 0..e.slots() {
                            for rank in 0..3u16 {
                                for flags in [0, Flags::RETRANSMIT, Flags::PROBE] {
                                    let s = SendOrder { rank, slot, round, flags };
                                    buf.fill(0xee);
                                    let n = b.build(&eng, &s, &mut buf);
                                    assert_eq!(n, b.frame_len(&eng, &s));
                                    let ctx = format!("{carriage:?} v6 {v6} {dtype:?} {s:?}");
                                    let m = plain.build(&eng, &s, &mut want);
                                    assert_eq!(&buf[..n], &want[..m], "{ctx}: templated against built");
                                    let p = dataplane::parse::parse(&buf[..n], 49374)
                                        .unwrap_or_else(|r| panic!("{ctx}: {r:?}"));
                                    let (off, count) = e.chunk(slot);
                                    let h = &buf[p.grad_offset as usize..];
                                    assert_eq!(h[0], 0x10 | flags, "{ctx}");
                                    assert_eq!(u32::from_be_bytes(h[8..12].try_into().unwrap()), off, "{ctx}");
                                    let len = if flags == Flags::PROBE { 1 } else { count as usize * dtype.size() };
                                    assert_eq!(p.grad_payload_len as usize, len, "{ctx}");
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// The example configs load: pktgen's resolves the appliance's collective and addresses.
    #[test]
    fn the_example_configs_load() {
        let (text, _) = example_config();
        let l = super::super::config::load_str(&text, Path::new("allreduce.toml")).unwrap();
        let a = &l.allreduce[0];
        assert_eq!((a.workers.len(), a.slots(), a.chunk_elements, a.window, a.rounds), (4, 256, 256, 16, Some(1000)));
        assert_eq!((a.op, a.expect_op, a.dtype, a.carriage), (Op::Sum, Op::Sum, Dtype::F32, Carriage::Udp));
        assert_eq!(a.workers[3].udp_port, 50003);
        assert_eq!(a.workers[3].ip, IpAddrBytes::V4([10, 0, 0, 4]));
        assert_eq!(a.workers[0].appliance_mac, EthernetAddress([2, 0, 0, 0, 0, 0xfe]));
        assert_eq!(a.workers[0].appliance_ip, IpAddrBytes::V4([10, 0, 0, 254]));
        // 256 f32 lanes over UDP/IPv4: 14 + 20 + 8 + 20 + 1024 bytes.
        assert_eq!(a.max_frame_len(), 1086);
        let bad = text.replace("window = 16", "window = 0");
        let e = super::super::config::load_str(&bad, Path::new("x.toml")).unwrap_err().to_string();
        assert!(e.contains("x.toml: key `allreduce[0].window`: expected at least 1 chunk"), "{e}");
    }

    /// `values`: `exact` by default; `normal` refused for float sums of a collective that is not
    /// deterministic, naming the file and key; with `deterministic = true` it loads and holds as
    /// many rounds as `rounds` asks within the 64 MiB budget; an unknown kind is refused.
    #[test]
    fn the_values_key_is_checked() {
        let (text, app) = example_config();
        let load = |t: &str| super::super::config::load_str(t, Path::new("ar.toml"));
        let l = load(&text).unwrap();
        assert_eq!((l.allreduce[0].values, l.allreduce[0].value_rounds), (ValueKind::Exact, 1));
        let normal = text.replace("# values = \"exact\"", "values = \"normal\"");
        let e = load(&normal).unwrap_err().to_string();
        assert!(
            e.contains("ar.toml: key `allreduce[0].values`: \"normal\" f32 sums are known only in rank order")
                && e.contains("collective 1 of")
                && e.contains("`deterministic = true`"),
            "{e}"
        );
        let e = load(&text.replace("# values = \"exact\"", "values = \"uniform\"")).unwrap_err().to_string();
        assert!(e.contains("key `allreduce[0].values`: expected \"exact\" or \"normal\", found \"uniform\""), "{e}");
        // A deterministic copy of the appliance's config.
        let dir = std::env::temp_dir().join(format!("pktgen-values-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let det = dir.join("det.toml");
        let a = std::fs::read_to_string(&app).unwrap();
        std::fs::write(&det, a.replacen("carriage = \"udp\"", "carriage = \"udp\"\ndeterministic = true", 1)).unwrap();
        let normal = normal.replace(app.to_str().unwrap(), det.to_str().unwrap());
        let l = load(&normal).unwrap();
        // One round: 4 workers' tensors and the reference, 5 x 65536 x 4 bytes; 51 fit in 64 MiB.
        assert_eq!((l.allreduce[0].values, l.allreduce[0].value_rounds), (ValueKind::Normal, 51));
        let l = load(&normal.replace("rounds = 1000", "rounds = 7")).unwrap();
        assert_eq!(l.allreduce[0].value_rounds, 7);
        let l = load(&normal.replace("rounds = 1000", "")).unwrap();
        assert_eq!(l.allreduce[0].value_rounds, NORMAL_DEFAULT_ROUNDS);
        let e =
            load(&normal.replace("# tensor_elements = 70000", "tensor_elements = 4000000")).unwrap_err().to_string();
        assert!(e.contains("key `allreduce[0].values`: \"normal\" values are computed at start"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A UDP checksum verified with the payload's sum given is verified exactly as by a pass
    /// over the whole datagram: payloads of odd and even lengths, bytes after the payload, a
    /// damaged byte anywhere, a wrong sum given.
    #[test]
    fn udp_check_with_the_payload_sum_given_agrees_with_the_full_pass() {
        let mut rng = 0x1234_5678_9abc_def0u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let pseudo = 0x1d2c;
        let mut checked = 0;
        for pay_len in 0..40usize {
            for tail_len in 0..4usize {
                let len = 28 + pay_len + tail_len;
                let mut d: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                d[6..8].fill(0);
                let ck = !checksum::combine(pseudo, checksum::sum(&d));
                d[6..8].copy_from_slice(&ck.to_be_bytes());
                let u = UdpCheck { pseudo, l4: 0, end: len };
                let (a, b) = (28, 28 + pay_len);
                let psum = checksum::sum(&d[a..b]);
                assert!(u.verify(&d, None), "{pay_len} {tail_len}");
                assert!(u.verify(&d, Some((a, b, psum))), "{pay_len} {tail_len}");
                // A wrong sum given for the payload fails (unless it is the same value).
                let wrong = psum.wrapping_add(1) | 1;
                assert_eq!(
                    u.verify(&d, Some((a, b, wrong))),
                    checksum::combine(wrong, 0) == checksum::combine(psum, 0)
                );
                for at in [0, 7, 27, len - 1] {
                    let mut e = d.clone();
                    e[at] ^= 0x40;
                    // Outside the payload, both ways of verifying see the damage.
                    if at < a || at >= b {
                        assert!(!u.verify(&e, None) && !u.verify(&e, Some((a, b, psum))), "{pay_len} {tail_len} {at}");
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 400, "{checked}");
    }

    /// A closed-loop engine against a model appliance in memory: every contribution frame it
    /// builds parses as a reply would (own parser), results complete rounds, and a wrong payload
    /// counts as wrong; a timeout resends with RETRANSMIT; NAK 7 moves the round, NAK 6 refuses.
    /// A frame from the appliance to `e0`'s member `rank` about `slot` (64-element chunks).
    fn reply(e0: &Emulation, rank: u16, slot: u32, round: u32, payload: &[u8], flags: u8, reason: u8) -> Vec<u8> {
        let w = e0.workers[rank as usize];
        let spec = FrameSpec {
            src_mac: w.appliance_mac,
            dst_mac: w.mac,
            vlan: None,
            vlan_tpid: dataplane::wire::vlan::TPID_8021Q,
            outer_tag: None,
            src_ip: w.appliance_ip,
            dst_ip: w.ip,
            dscp: 0,
            ecn: 2,
            ttl: 64,
            src_port: 49374,
            dst_port: w.udp_port,
            roce: None,
            header: GradientRepr {
                version: 1,
                flags,
                op_type: 1,
                collective_id: 1,
                dtype: 1,
                reason,
                worker_rank: 0xffff,
                tensor_offset: slot * 64,
                data_length: payload.len() as u32,
                round,
            },
        };
        let mut f = vec![0u8; spec.frame_len(payload.len())];
        build::build(&spec, payload, &mut f).unwrap();
        f
    }

    /// A probe that finds a slot's round in progress with this worker's contribution puts the
    /// slot out ahead of the sequence; when its result comes before the worker's sequence gets
    /// there, the worker passes it and goes on (it stopped there for good).
    #[test]
    fn a_slot_completed_ahead_of_the_sequence_is_passed() {
        let mut e0 = em(Op::Sum, Op::Sum, Dtype::F32);
        e0.tensor_elements = 8 * 64;
        e0.rounds = Some(3);
        e0.probe = true;
        e0.workers.truncate(1);
        let mut eng = Engine::new(&e0, 1_000_000_000, 1);
        let mut out = Vec::new();
        eng.sends(1, 100, &mut out);
        assert_eq!(out.len(), 2, "probes, window 2: {out:?}");
        // Slots 0 and 1: no history. Then slot 5's probe says ours is in (state 2, round 0).
        for s in [0, 1] {
            eng.on_frame(2, &reply(&e0, 0, s, 0, &[0], Flags::RESULT | Flags::PROBE, SlotState::NO_HISTORY));
        }
        let mut t = 3;
        let mut done = 0;
        let v = eng.values().clone();
        while done < 3 * 8 && t < 10_000 {
            out.clear();
            eng.sends(t, 100, &mut out);
            for o in out.clone() {
                if o.flags & Flags::PROBE != 0 {
                    let state = if o.slot == 5 { SlotState::IN_PROGRESS_WITH_RANK } else { SlotState::NO_HISTORY };
                    eng.on_frame(t, &reply(&e0, 0, o.slot, 0, &[0], Flags::RESULT | Flags::PROBE, state));
                    if o.slot == 5 {
                        // Its result at once, before the sequence reaches slot 5.
                        let (off, count) = e0.chunk(5);
                        eng.on_frame(t, &reply(&e0, 0, 5, 0, v.result(off, count, 0), Flags::RESULT, 0));
                        done += 1;
                    }
                } else {
                    let (off, count) = e0.chunk(o.slot);
                    eng.on_frame(t, &reply(&e0, 0, o.slot, o.round, v.result(off, count, o.round), Flags::RESULT, 0));
                    done += 1;
                }
            }
            t += 1;
        }
        assert!(eng.finished(), "every round of every slot: {done} results by t={t}");
        assert_eq!((eng.counters(0).results, eng.counters(0).right), (24, 24));
    }

    /// The live line names its count what it is: results (one per worker per slot round), and
    /// the rate is of results over the interval.
    #[test]
    fn the_live_line_counts_results() {
        let mut st = LiveState::new();
        let c = LiveCounts { results: 1024, right: 1000, wrong: 24, ..LiveCounts::default() };
        let line = st.line(1.0, 0.5, "ar", &c);
        assert!(line.contains("0.0020 M contributions/s"), "{line}");
        assert!(line.contains("| results 1024 right 1000 wrong 24 |"), "{line}");
        assert!(!line.contains("rounds"), "{line}");
    }

    /// A worker whose every slot is refused, without `rounds`, has nothing to send: `sends`
    /// returns (it went round the sequence for ever).
    #[test]
    fn a_worker_with_every_slot_refused_sends_nothing_and_returns() {
        let mut e0 = em(Op::Sum, Op::Sum, Dtype::F32);
        e0.rounds = None;
        e0.workers.truncate(1);
        let mut eng = Engine::new(&e0, 1_000_000_000, 1);
        let mut out = Vec::new();
        eng.sends(1, 100, &mut out);
        assert_eq!(out.len(), 2);
        for s in [0, 1] {
            eng.on_frame(2, &reply(&e0, 0, s, 0, &[], Flags::NAK, 3));
        }
        assert_eq!(eng.counters(0).refused_slots, 2);
        out.clear();
        eng.sends(3, 100, &mut out);
        assert!(out.is_empty(), "{out:?}");
    }

    #[test]
    fn closed_loop_engine_walks_rounds() {
        let e0 = em(Op::Sum, Op::Sum, Dtype::F32);
        let hz = 1_000_000_000;
        let mut eng = Engine::new(&e0, hz, 1);
        let mut b = Builder::new(&eng);
        let mut out = Vec::new();
        eng.sends(1, 100, &mut out);
        // Window 2 per worker, 2 slots: every slot of every worker goes out.
        assert_eq!(out.len(), 6);
        assert!(out.iter().all(|s| s.flags == 0 && s.round == 0));
        let mut buf = vec![0u8; 2048];
        for s in &out {
            let n = b.build(&eng, s, &mut buf);
            let f = &buf[..n];
            let p = dataplane::parse::parse(f, 49374).expect("the appliance's parser takes it");
            assert_eq!(p.grad_payload_len as usize, e0.chunk(s.slot).1 as usize * 4);
        }
        // Results from a model appliance: source port 49374 to each member.
        let result = |rank: u16, slot: u32, round: u32, payload: &[u8], flags: u8, reason: u8| {
            reply(&e0, rank, slot, round, payload, flags, reason)
        };
        let v = eng.values().clone();
        let right = v.result(0, 64, 0).to_vec();
        eng.on_frame(10, &result(0, 0, 0, &right, Flags::RESULT, 0));
        let mut wrong = right.clone();
        wrong[0] ^= 1;
        eng.on_frame(10, &result(1, 0, 0, &wrong, Flags::RESULT, 0));
        assert_eq!((eng.counters(0).right, eng.counters(1).wrong), (1, 1));
        // One slot round, two of its three workers' results: counted per worker.
        assert_eq!((eng.counters(0).results, eng.counters(1).results, eng.counters(2).results), (1, 1, 0));
        // A repeat is stale.
        eng.on_frame(11, &result(0, 0, 0, &right, Flags::RESULT, 0));
        assert_eq!(eng.counters(0).stale_results, 1);
        // A damaged checksum is counted bad.
        let mut bad = result(2, 0, 0, &right, Flags::RESULT, 0);
        let l = bad.len();
        bad[l - 1] ^= 0xff;
        eng.on_frame(11, &bad);
        assert_eq!(eng.rx_bad, 1);
        // So is a right payload under a damaged header byte its comparison does not read (the
        // gradient header's reason: the checksum then comes from the expected payload's sum,
        // not from a pass over the frame), and a damaged checksum field.
        for at in [14 + 20 + 8 + 5, 14 + 20 + 6] {
            let mut bad = result(2, 0, 0, &right, Flags::RESULT, 0);
            bad[at] ^= 0x10;
            eng.on_frame(11, &bad);
        }
        assert_eq!((eng.rx_bad, eng.counters(2).right, eng.counters(2).wrong), (3, 0, 0));
        // Worker 0's slot 0 goes on to round 1.
        out.clear();
        eng.sends(12, 100, &mut out);
        assert!(out.contains(&SendOrder { rank: 0, slot: 0, round: 1, flags: 0 }), "{out:?}");
        // NAK 7 for worker 2 slot 1: round 9 next; NAK 6 for worker 2 slot 0: refused.
        eng.on_frame(13, &result(2, 1, 9, &[], Flags::NAK, 7));
        eng.on_frame(13, &result(2, 0, 0, &[], Flags::NAK, 6));
        assert_eq!(eng.counters(2).naks[7], 1);
        assert_eq!(eng.counters(2).refused_slots, 1);
        out.clear();
        eng.sends(14, 100, &mut out);
        assert!(out.contains(&SendOrder { rank: 2, slot: 1, round: 9, flags: 0 }), "{out:?}");
        // After the timeout, what is still out is resent with RETRANSMIT.
        out.clear();
        eng.sends(14 + 1_000_000, 100, &mut out);
        assert!(out.iter().any(|s| s.flags == Flags::RETRANSMIT), "{out:?}");
        assert!(!out.iter().any(|s| s.rank == 2 && s.slot == 0), "a refused slot is not resent");
    }
}
