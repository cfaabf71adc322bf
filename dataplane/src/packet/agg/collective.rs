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

/// The largest tensor offset a gradient header carries (elements): its `tensor_offset` is 32
/// bits (spec section 2).
pub const MAX_TENSOR_OFFSET: u64 = u32::MAX as u64;

/// The most elements a tensor in chunks of `chunk_elements` may have (spec sections 2 and 3):
/// as many whole chunks as start at an offset of at most [`MAX_TENSOR_OFFSET`], so that every
/// chunk's offset, the last one's included, fits the header's 32-bit `tensor_offset`. 2^32 for
/// chunks of any power of two (1 to 2^31), 4,294,967,424 (12,201,612 chunks) for chunks
/// of 352. `chunk_elements` 0 is taken as 1 (the configuration refuses it before asking).
pub fn max_tensor_elements(chunk_elements: u32) -> u64 {
    let chunk = u64::from(chunk_elements.max(1));
    // Chunks start at 0, chunk, 2 chunk, ...: (MAX / chunk + 1) of them start at or below MAX.
    // The product is at most MAX + chunk < 2^33: no overflow.
    (MAX_TENSOR_OFFSET / chunk + 1) * chunk
}

impl Collective {
    /// Number of slots: one per chunk.
    pub fn slots(&self) -> u64 {
        self.tensor_elements.div_ceil(u64::from(self.chunk_elements.max(1)))
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
    ///
    /// Saturates at `u64::MAX` (16 EiB): a collective whose memory a 64-bit count cannot hold
    /// (one not validated, whose `tensor_elements` the header could not address anyway) is
    /// charged more than any memory limit, never a wrapped-around small count.
    pub fn memory_bytes(&self) -> u64 {
        let chunk = u64::from(self.chunk_elements);
        let size = self.dtype.size() as u64;
        let workers = self.workers() as u64;
        let ranks = if self.deterministic { workers.saturating_mul(chunk).saturating_mul(size) } else { 0 };
        let per_slot = [chunk.saturating_mul(4), chunk.saturating_mul(size), ranks, 8 * workers.div_ceil(64), 56]
            .into_iter()
            .fold(0u64, u64::saturating_add);
        self.slots().saturating_mul(per_slot)
    }
}

/// The slot memory of `collectives` together (bytes): the sum of their
/// [`Collective::memory_bytes`], saturating at `u64::MAX` as each of them does, so that many
/// large collectives are charged more than any limit, never a sum wrapped around to a small one.
pub fn total_memory_bytes<'a>(collectives: impl IntoIterator<Item = &'a Collective>) -> u64 {
    collectives.into_iter().map(Collective::memory_bytes).fold(0u64, u64::saturating_add)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn coll(tensor_elements: u64, chunk_elements: u32, workers: usize, deterministic: bool) -> Collective {
        let m = Member {
            rank: 0,
            ip: IpAddrBytes::V4([10, 0, 0, 1]),
            udp_port: 5,
            mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
            vlan: None,
            port: 0,
            qpn: 0,
            qkey: 0,
        };
        Collective {
            id: 1,
            op: Op::Sum,
            dtype: Dtype::F32,
            carriage: Carriage::Udp,
            tensor_elements,
            chunk_elements,
            deterministic,
            slot_timeout_us: 1_000_000,
            dscp: 0,
            members: vec![m; workers],
        }
    }

    /// The last chunk of the largest tensor starts at the largest offset a chunk may start at
    /// (at most u32::MAX); one more element would start a chunk beyond it.
    #[test]
    fn the_largest_tensor_keeps_its_last_chunk_offset_in_32_bits() {
        for (chunk, max) in [(1u32, 1u64 << 32), (256, 1 << 32), (352, 4_294_967_424), (2225, 4_294_968_675)] {
            assert_eq!(max_tensor_elements(chunk), max, "chunk {chunk}");
            let c = coll(max, chunk, 1, false);
            let last_offset = (c.slots() - 1) * u64::from(chunk);
            assert!(last_offset <= MAX_TENSOR_OFFSET && last_offset + u64::from(chunk) > MAX_TENSOR_OFFSET);
            let over = coll(max + 1, chunk, 1, false);
            assert!((over.slots() - 1) * u64::from(chunk) > MAX_TENSOR_OFFSET, "chunk {chunk}");
        }
        assert_eq!(max_tensor_elements(u32::MAX), 2 * u64::from(u32::MAX));
        assert_eq!(max_tensor_elements(0), 1 << 32, "0 is taken as 1");
    }

    /// 2^61 + 1000 f32 elements in chunks of 1, one member: 2^61 + 1000 slots of 4 + 4 + 8 + 56
    /// = 72 bytes, which a wrapping multiplication made 72,000 bytes; saturating, it is more
    /// than any limit.
    #[test]
    fn memory_beyond_64_bits_saturates() {
        let huge = coll((1 << 61) + 1000, 1, 1, false);
        assert_eq!(huge.slots(), (1 << 61) + 1000);
        assert_eq!(huge.memory_bytes(), u64::MAX);
        assert_eq!(((1u64 << 61) + 1000).wrapping_mul(72), 72_000, "what the count wrapped to");
        // Deterministic copies of 4096 ranks' 2225-lane chunks: about 36 MB a slot, still counted
        // exactly below 2^64.
        let det = coll(1 << 20, 2225, 4096, true);
        let per_slot = 2225 * 4 + 2225 * 4 + 4096 * 2225 * 4 + 8 * 64 + 56;
        assert_eq!(det.memory_bytes(), det.slots() * per_slot);
        assert_eq!(coll(u64::MAX, 1, 4096, true).memory_bytes(), u64::MAX);
        assert_eq!(coll(8, 4, 1, false).memory_bytes(), 2 * (16 + 16 + 8 + 56));
    }

    /// The collectives' sum saturates at u64::MAX instead of wrapping to a small count.
    #[test]
    fn total_memory_saturates_at_u64_max() {
        // Two collectives of 2^57 one-lane slots (72 bytes each): 9 x 2^60 bytes apiece, just
        // over half of 2^64; together, wrapping around, they would need 2^61 bytes.
        let (small, big) = (coll(8, 4, 1, false), coll(1 << 57, 1, 1, false));
        assert_eq!(big.memory_bytes(), 9 << 60);
        assert_eq!(total_memory_bytes([&small, &small]), 4 * 96);
        assert_eq!(total_memory_bytes([&big, &small]), (9 << 60) + 2 * 96);
        assert_eq!((9u64 << 60).wrapping_add(9 << 60), 1 << 61);
        assert_eq!(total_memory_bytes([&big, &big]), u64::MAX);
    }
}
