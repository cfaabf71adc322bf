//! STATUS, the answer to a PROBE (spec section 7): a slot's state, its round and the bitmap of
//! the ranks in, read without touching the slot.

use super::check::Contribution;
use super::collective::MAX_WORKERS;
use super::emit::result_spec;
use super::send::send_frame;
use super::Aggregator;
use crate::buf::PacketIo;
use crate::stats::Counters;
use crate::wire::gradient::{probe_len, Flags};

impl Aggregator {
    /// Answers a valid PROBE (section 7) with a STATUS to the prober: its slot's state (a round
    /// in progress that timed out is reclaimed first, rule 8), the round the state's row says,
    /// and the bitmap of the ranks whose contribution to the round in progress is in (bit k mod
    /// 8 of byte k / 8; all zero without a round in progress). From the addresses of a result
    /// (section 6) on the member's port, with its VLAN; on RoCEv2 to its QP with its Q_Key and
    /// PSN 0, the member's PSN counter untouched. The probe's frame becomes the STATUS when it
    /// has the room. The slot is read, never touched (rule 8's clock included).
    pub(super) fn status<I: PacketIo>(
        &mut self,
        io: &mut I,
        c: Contribution,
        pkt: I::Buf,
        now_us: u64,
        counters: &mut Counters,
    ) {
        let st = &mut self.colls[c.coll];
        if st.slots[c.slot].reclaim(now_us, st.spec.slot_timeout_us) {
            self.counters.slot_timeouts += 1;
            st.counters.slot_timeouts += 1;
        }
        let slot = st.slots[c.slot];
        let bm = &st.bitmaps[c.slot * st.words..(c.slot + 1) * st.words];
        let seen = slot.active && bm[c.rank / 64] & (1 << (c.rank % 64)) != 0;
        let (state, round) = slot.status(seen);
        // Bit k mod 64 of word k / 64, little-endian, is bit k mod 8 of byte k / 8.
        let mut bitmap = [0u8; MAX_WORKERS / 8];
        if slot.active {
            for (b, w) in bitmap.chunks_exact_mut(8).zip(bm) {
                b.copy_from_slice(&w.to_le_bytes());
            }
        }
        let len = probe_len(st.spec.workers());
        let mut spec = result_spec(
            &st.spec,
            &self.ports,
            self.gradient_udp_port,
            self.appliance_qpn,
            c.rank,
            c.chunk,
            round,
            0,
            0,
        );
        spec.header.flags = Flags::RESULT | Flags::PROBE;
        spec.header.reason = state;
        spec.header.data_length = len as u32;
        let port = st.spec.members[c.rank].port;
        if send_frame(io, &mut Some(pkt), port, &spec, &bitmap[..len], None, counters) {
            self.counters.statuses += 1;
            self.colls[c.coll].counters.statuses += 1;
        }
    }
}
