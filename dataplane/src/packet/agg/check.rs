//! Validation of a contribution or a PROBE (spec section 4 rule 5, in the spec's order; section
//! 7 for a PROBE): every refusal is a drop reason and, but for the flags, a NAK reason.

use super::collective::Carriage;
use super::Aggregator;
use crate::parse::{Layers, Parsed};
use crate::stats::Reason;
use crate::wire::build::IpAddrBytes;
use crate::wire::gradient::{probe_len, Dtype, Flags, GradientHeader, NakReason, Op};
use strength_reduce::StrengthReducedU64;

/// A contribution, or a PROBE, that passed validation (rule 5; section 7 for a PROBE).
#[derive(Debug, Clone, Copy)]
pub(super) struct Contribution {
    pub(super) coll: usize,
    pub(super) rank: usize,
    /// The chunk of the tensor (offset / chunk_elements).
    pub(super) chunk: usize,
    /// Its slot in this worker's share of the collective's slots ([`super::state::Share`]:
    /// the chunk itself unless the collective is sharded over the workers).
    pub(super) slot: usize,
    pub(super) round: u32,
    /// A PROBE (section 7): answered with a STATUS, never folded.
    pub(super) probe: bool,
}

impl Aggregator {
    /// Rule 5, in the spec's order, for a contribution or a PROBE (section 7: its length is
    /// exactly ceil(num_workers / 8) bytes, its offset one a contribution could carry). Err:
    /// the drop reason and the NAK reason (none for flags).
    #[inline(always)]
    pub(super) fn validate(&self, frame: &[u8], p: &Parsed) -> Result<Contribution, (Reason, Option<u8>)> {
        if !p.has(Layers::GRADIENT) {
            // Too short for a header (Layers::GRADIENT_SHORT): nothing to answer.
            return Err((Reason::MalformedGradient, None));
        }
        let g = GradientHeader::new_checked(&frame[p.grad_offset as usize..])
            .map_err(|_| (Reason::MalformedGradient, None))?;
        if g.flags() & (Flags::RESULT | Flags::NAK) != 0 {
            return Err((Reason::GradFlags, None));
        }
        let idx = self.index[g.collective_id() as usize];
        if idx == 0 {
            return Err((Reason::GradUnknownCollective, Some(NakReason::UNKNOWN_COLLECTIVE)));
        }
        let coll = idx as usize - 1;
        let st = &self.colls[coll];
        let spec = &st.spec;
        if g.version() != 1 {
            return Err((Reason::GradBadVersion, Some(NakReason::BAD_VERSION)));
        }
        let carriage = if p.has(Layers::BTH) { Carriage::Rocev2 } else { Carriage::Udp };
        if Op::from_wire(g.op_type()) != Some(spec.op)
            || Dtype::from_wire(g.dtype()) != Some(spec.dtype)
            || carriage != spec.carriage
        {
            return Err((Reason::GradMismatch, Some(NakReason::MISMATCH)));
        }
        let rank = g.worker_rank() as usize;
        if rank >= spec.workers() {
            return Err((Reason::GradBadRank, Some(NakReason::BAD_RANK)));
        }
        let m = &spec.members[rank];
        let ip_ok = match m.ip {
            IpAddrBytes::V4(a) => p.has(Layers::IPV4) && p.ip_src() == a,
            IpAddrBytes::V6(a) => p.has(Layers::IPV6) && p.ip_src() == a,
        };
        let port_ok = match carriage {
            Carriage::Udp => p.udp_src == m.udp_port,
            Carriage::Rocev2 => p.deth_src_qp == m.qpn,
        };
        if !ip_ok || !port_ok {
            return Err((Reason::GradNotMember, Some(NakReason::NOT_MEMBER)));
        }
        const BAD: Option<u8> = Some(NakReason::BAD_LENGTH_OR_OFFSET);
        let dl = g.data_length() as u64;
        let present = p.grad_payload_len as u64;
        let off = g.tensor_offset() as u64;
        let (chunk_index, within) = StrengthReducedU64::div_rem(off, st.chunk_div);
        // This worker's slot of the chunk: the aggregator's steering ([`Aggregator::owner`])
        // brings a sharded collective's chunk only to the worker whose share holds it.
        let slot = if st.share.ways <= 1 { chunk_index } else { chunk_index / st.ways_div };
        debug_assert!(st.share.ways <= 1 || chunk_index % st.share.ways as u64 == st.share.phase as u64);
        let chunk = chunk_index as usize;
        if g.flags() & Flags::PROBE != 0 {
            // Section 7: as long as its answer; a chunk's offset (the chunk's length follows).
            if dl != probe_len(spec.workers()) as u64 || dl > present || (carriage == Carriage::Udp && present != dl) {
                return Err((Reason::GradBadLength, BAD));
            }
            if within != 0 || off >= spec.tensor_elements {
                return Err((Reason::GradBadOffset, BAD));
            }
            return Ok(Contribution { coll, rank, chunk, slot: slot as usize, round: g.round(), probe: true });
        }
        // The dtype's size is a power of two: shifts and masks, no division.
        if dl & ((1 << st.size_log2) - 1) != 0 || dl > present || (carriage == Carriage::Udp && present != dl) {
            return Err((Reason::GradBadLength, BAD));
        }
        let count = dl >> st.size_log2;
        let full = spec.chunk_elements as u64;
        let last = off + count >= spec.tensor_elements;
        if count == 0 || within != 0 || off + count > spec.tensor_elements || count > full || (count < full && !last) {
            return Err((Reason::GradBadOffset, BAD));
        }
        Ok(Contribution { coll, rank, chunk, slot: slot as usize, round: g.round(), probe: false })
    }
}
