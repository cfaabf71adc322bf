//! A collective as the aggregator runs it (spec section 3): its op, dtype, carriage, chunking and
//! members, validated (the `[[collective]]` tables are read and checked by
//! `config::collective`, which builds these).

use crate::wire::build::IpAddrBytes;
use crate::wire::gradient::{Dtype, Op};
use crate::wire::EthernetAddress;
use serde::Serialize;

/// Most members (workers) of one collective.
pub const MAX_WORKERS: usize = 4096;

/// The carriage of a collective (spec section 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Carriage {
    /// Ethernet / IP / UDP (gradient port) / gradient.
    Udp,
    /// Ethernet / IP / UDP 4791 / BTH (UD SEND Only) / DETH / gradient / pad / ICRC.
    Rocev2,
}

/// A validated member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    /// Rank.
    pub rank: u16,
    /// IP address.
    pub ip: IpAddrBytes,
    /// UDP port (UDP carriage; 0 for RoCEv2).
    pub udp_port: u16,
    /// MAC.
    pub mac: EthernetAddress,
    /// VLAN tag of results.
    pub vlan: Option<u16>,
    /// Appliance port index.
    pub port: u16,
    /// QP (RoCEv2).
    pub qpn: u32,
    /// Q_Key (RoCEv2).
    pub qkey: u32,
}

/// A validated collective.
#[derive(Debug, Clone, PartialEq)]
pub struct Collective {
    /// Id.
    pub id: u16,
    /// Reduction.
    pub op: Op,
    /// Lane type.
    pub dtype: Dtype,
    /// Carriage.
    pub carriage: Carriage,
    /// Elements in the tensor.
    pub tensor_elements: u64,
    /// Elements per chunk.
    pub chunk_elements: u32,
    /// Rank-order reduction.
    pub deterministic: bool,
    /// Slot timeout (µs).
    pub slot_timeout_us: u64,
    /// DSCP of results.
    pub dscp: u8,
    /// Members by rank.
    pub members: Vec<Member>,
}

impl Collective {
    /// Number of slots: one per chunk.
    pub fn slots(&self) -> u64 {
        self.tensor_elements.div_ceil(self.chunk_elements as u64)
    }

    /// Number of workers.
    pub fn workers(&self) -> usize {
        self.members.len()
    }

    /// Bytes of slot memory: per slot an f32/i32 accumulator and the kept result, per-rank
    /// copies of the payload when deterministic, the rank bitmap (a u64 per 64 workers) and
    /// 56 bytes of state (the slot's round state, the kept result's sums, the deterministic fold
    /// count), as the aggregator allocates them. The accumulators, results and rank copies are
    /// each one array rounded up to whole 64-byte cache lines: up to 189 bytes per collective
    /// more than this, not counted.
    pub fn memory_bytes(&self) -> u64 {
        let chunk = self.chunk_elements as u64;
        let workers = self.workers() as u64;
        let per_slot = chunk * 4
            + chunk * self.dtype.size() as u64
            + if self.deterministic { workers * chunk * self.dtype.size() as u64 } else { 0 }
            + 8 * workers.div_ceil(64)
            + 56;
        self.slots() * per_slot
    }
}
