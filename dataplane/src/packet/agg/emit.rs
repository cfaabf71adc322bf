//! RESULT frames (spec section 6): a completed round's result to every member (rule 2), and the
//! kept result again to one member (rule 3), from the member's header template when the
//! payload fits it, else through the frame builder.

use super::check::Contribution;
use super::collective::{Carriage, Collective};
use super::send::{send_frame, send_shared, send_templated, templated};
use super::{Aggregator, PortAddr};
use crate::buf::PacketIo;
use crate::stats::{Counters, Reason};
use crate::wire::build::{self, FrameSpec, Roce, ROCEV2_PORT};
use crate::wire::gradient::{Flags, GradientRepr, RANK_NONE};
use crate::wire::template;

impl Aggregator {
    /// Sends the kept result of `c`'s chunk (in this worker's slot `c.slot`) for `c.round` to
    /// every member (rule 2), or, when `resend`, to `c.rank` alone (rule 3).
    /// `spare` is a frame the caller is done with (the contribution that triggered the send):
    /// the first copy is written into it, in place, when it has the room (saving an mbuf
    /// allocation and a free, and touching bytes already in cache).
    ///
    /// With `[dataplane] zero_copy_results`, a completion's templated frames (full chunks) are
    /// one payload: the last member's frame is written whole, and every other member's is a
    /// header chained to that frame's payload by reference ([`PacketIo::share`]), so the
    /// payload is written once per completion instead of once per member. Resends to one
    /// member (rule 3) and short last chunks copy as before.
    pub(super) fn emit_result<I: PacketIo>(
        &mut self,
        io: &mut I,
        c: Contribution,
        resend: bool,
        mut spare: Option<I::Buf>,
        counters: &mut Counters,
    ) {
        let (coll, s, k, round) = (c.coll, c.slot, c.chunk, c.round);
        let only = resend.then_some(c.rank);
        let st = &mut self.colls[coll];
        let lanes = st.lanes(k);
        let size = st.spec.dtype.size();
        let chunk = st.spec.chunk_elements as usize;
        let payload = &st.result[s * chunk * size..s * chunk * size + lanes * size];
        if only.is_none() {
            st.sums[s] = st.result_sums(payload);
        }
        let sums = &st.sums[s];
        let members = match only {
            Some(r) => r..r + 1,
            None => 0..st.spec.workers(),
        };
        let roce = st.spec.carriage == Carriage::Rocev2;
        let templates = st.templates.as_ref().filter(|t| t.fits(payload.len(), sums));
        // Zero-copy (rule 2, templated frames, two members or more): out of line, so that the
        // copy path keeps its registers (inlined here, it cost the copy path about 72
        // instructions per result frame in spills and moves: callgrind, `agg_profile udp 4
        // 256`).
        if self.zero_copy_results && only.is_none() && members.len() > 1 && templates.is_some() {
            self.emit_shared(io, c, spare, counters);
            return;
        }
        for r in members {
            let psn = if roce { next_psn(&mut st.psn, r) } else { 0 };
            let port = st.spec.members[r].port;
            let sent = match templates {
                Some(t) => {
                    let patch = template::Patch {
                        tensor_offset: (k * chunk) as u32,
                        round,
                        roce: roce.then_some((result_source_port(k), psn)),
                    };
                    send_templated(io, &mut spare, port, t, r, &patch, payload, sums, counters)
                }
                None => {
                    let spec = result_spec(
                        &st.spec,
                        &self.ports,
                        self.gradient_udp_port,
                        self.appliance_qpn,
                        r,
                        k,
                        round,
                        psn,
                        lanes,
                    );
                    send_frame(io, &mut spare, port, &spec, payload, Some(sums), counters)
                }
            };
            if sent && only.is_none() {
                self.counters.results += 1;
                st.counters.results += 1;
            }
        }
    }

    /// [`Aggregator::emit_result`] of a completion (rule 2) whose frames share one payload
    /// (`[dataplane] zero_copy_results`, full chunk, two members or more): the last member's
    /// frame is written whole from its template (into `spare` when it has the room), and every
    /// other member's is its template's head and tail around that payload by reference
    /// ([`PacketIo::share`]).
    #[inline(never)]
    fn emit_shared<I: PacketIo>(
        &mut self,
        io: &mut I,
        c: Contribution,
        mut spare: Option<I::Buf>,
        counters: &mut Counters,
    ) {
        let (coll, s, k, round) = (c.coll, c.slot, c.chunk, c.round);
        let st = &mut self.colls[coll];
        let size = st.spec.dtype.size();
        let chunk = st.spec.chunk_elements as usize;
        let payload = &st.result[s * chunk * size..s * chunk * size + st.lanes(k) * size];
        let sums = &st.sums[s];
        // emit_result checked that the templates hold this payload.
        let Some(t) = st.templates.as_ref() else {
            debug_assert!(false, "emit_shared without templates");
            return;
        };
        let roce = st.spec.carriage == Carriage::Rocev2;
        let members = 0..st.spec.workers();
        let patch = |r: usize, psn: &mut [u32]| template::Patch {
            tensor_offset: (k * chunk) as u32,
            round,
            roce: roce.then(|| (result_source_port(k), next_psn(psn, r))),
        };
        let last = members.end - 1;
        let body_patch = patch(last, &mut st.psn);
        let Some(body) = templated(io, &mut spare, t, last, &body_patch, payload, sums) else {
            // Every member's PSN still advances once, as in the copy path.
            for r in members {
                if roce && r != last {
                    next_psn(&mut st.psn, r);
                }
                counters.drop(Reason::NoMbuf);
            }
            return;
        };
        let off = t.head_len(last);
        for r in 0..last {
            let p = patch(r, &mut st.psn);
            if let Some(shared) = send_shared(io, &body, off, st.spec.members[r].port, t, r, &p, sums, counters) {
                self.counters.results += 1;
                self.counters.shared_results += u64::from(shared);
                st.counters.results += 1;
            }
        }
        let port = st.spec.members[last].port;
        counters.tx(port, t.frame_len(last));
        io.send(port, body);
        self.counters.results += 1;
        st.counters.results += 1;
    }
}

/// Member `r`'s next BTH PSN (24 bits, spec section 6), counted.
#[inline]
fn next_psn(psn: &mut [u32], r: usize) -> u32 {
    let p = psn[r];
    psn[r] = (p + 1) & 0xff_ffff;
    p
}

/// The longest RESULT frame of `spec` (a full chunk, to the member whose headers are the
/// longest: an 802.1Q tag, IPv6), in bytes. Results are built in one mbuf segment, so the
/// mempool's data room (less its headroom) must hold it.
pub fn max_result_frame_len(spec: &Collective) -> usize {
    let full = (spec.chunk_elements as u64).min(spec.tensor_elements) as usize;
    (0..spec.workers())
        .map(|r| result_spec(spec, &[], 0, 0, r, 0, 0, 0, full).frame_len(full * spec.dtype.size()))
        .max()
        .unwrap_or(0)
}

/// Bytes a contribution's headers may carry beyond the untagged headers of its member's RESULT
/// frames: two VLAN tags (spec section 1: an 802.1ad tag and an 802.1Q one) and 40 bytes of
/// IPv4 options (the most IHL 15 holds) or of IPv6 extension headers.
pub const CONTRIBUTION_HEADER_SLACK: usize = 2 * 4 + 40;

/// The longest contribution frame of `spec` the mempool's data room must hold (bytes): a full
/// chunk from the member whose headers are the longest, with [`CONTRIBUTION_HEADER_SLACK`]
/// bytes of tags and options. The aggregator reads a contribution in one mbuf segment; a longer
/// one arrives as a chain and is a `multi_segment` drop.
pub fn max_contribution_frame_len(spec: &Collective) -> usize {
    let full = (spec.chunk_elements as u64).min(spec.tensor_elements) as usize;
    (0..spec.workers())
        .map(|r| {
            let mut s = result_spec(spec, &[], 0, 0, r, 0, 0, 0, full);
            s.vlan = None;
            s.outer_tag = None;
            s.frame_len(full * spec.dtype.size()) + CONTRIBUTION_HEADER_SLACK
        })
        .max()
        .unwrap_or(0)
}

/// The IP packet length of member `r`'s full-chunk RESULT frames of `spec` (bytes; its
/// contributions are as long): what the MTU of the member's port must hold.
pub fn result_ip_len(spec: &Collective, r: usize) -> usize {
    let full = (spec.chunk_elements as u64).min(spec.tensor_elements) as usize;
    result_spec(spec, &[], 0, 0, r, 0, 0, 0, full).ip_len(full * spec.dtype.size())
}

/// The UDP source port of chunk `k`'s RoCEv2 RESULT frames (spec section 6: entropy for ECMP).
#[inline]
fn result_source_port(k: usize) -> u16 {
    0xc000 | (k as u16 & 0x3fff)
}

/// The headers of member `r`'s RESULT frame for chunk `k` of `spec` in `round` (spec section 6):
/// from the appliance's addresses on the member's port, with `lanes` lanes of payload and, on
/// RoCEv2, BTH PSN `psn`.
#[allow(clippy::too_many_arguments)]
pub(super) fn result_spec(
    spec: &Collective,
    ports: &[PortAddr],
    gradient_udp_port: u16,
    appliance_qpn: u32,
    r: usize,
    k: usize,
    round: u32,
    psn: u32,
    lanes: usize,
) -> FrameSpec {
    let m = spec.members[r];
    let port = ports.get(m.port as usize).copied().unwrap_or_default();
    let roce = (spec.carriage == Carriage::Rocev2).then_some(Roce {
        dest_qp: m.qpn,
        psn,
        pkey: 0xffff,
        qkey: m.qkey,
        src_qp: appliance_qpn,
    });
    let chunk = spec.chunk_elements as usize;
    FrameSpec {
        src_mac: port.mac,
        dst_mac: m.mac,
        vlan: m.vlan,
        vlan_tpid: crate::wire::vlan::TPID_8021Q,
        outer_tag: None,
        src_ip: source_ip(&port, &m.ip),
        dst_ip: m.ip,
        dscp: spec.dscp,
        ecn: 2,
        ttl: 64,
        src_port: if roce.is_some() { result_source_port(k) } else { gradient_udp_port },
        dst_port: if roce.is_some() { ROCEV2_PORT } else { m.udp_port },
        roce,
        header: GradientRepr {
            version: 1,
            flags: Flags::RESULT,
            op_type: spec.op.wire(),
            collective_id: spec.id,
            dtype: spec.dtype.wire(),
            reason: 0,
            worker_rank: RANK_NONE,
            tensor_offset: (k * chunk) as u32,
            data_length: (lanes * spec.dtype.size()) as u32,
            round,
        },
    }
}

/// The appliance's source address on `port` for a member of `ip`'s family (the unspecified
/// address when the port has none).
fn source_ip(port: &PortAddr, ip: &build::IpAddrBytes) -> build::IpAddrBytes {
    match ip {
        build::IpAddrBytes::V4(_) => build::IpAddrBytes::V4(port.ipv4.unwrap_or_default()),
        build::IpAddrBytes::V6(_) => build::IpAddrBytes::V6(port.ipv6.unwrap_or_default()),
    }
}
