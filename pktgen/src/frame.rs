//! Contribution frames of a workload's events, per the address plan ([`crate::plan`]):
//! source the member, destination the appliance, ECN ECT(0), TTL 64, DSCP 0, gradient header
//! version 1 with the event's rank, offset, round and flags.

use crate::plan;
use crate::workload::{Event, Params};
use crate::Endpoints;
use dataplane::agg::collective::Carriage;
use dataplane::wire::build::{self, FrameSpec, Roce, ROCEV2_PORT};
use dataplane::wire::gradient::{GradientRepr, VERSION};

/// ECN codepoint ECT(0).
pub const ECT0: u8 = 0b10;
/// TTL or hop limit of contributions.
pub const TTL: u8 = 64;

/// The addresses of one member's contributions: the member's (source) and the appliance's
/// (destination) on the member's link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Addresses {
    /// The member's MAC and IP (source), the appliance's (destination), and the 802.1Q VID of
    /// the member's frames.
    pub ends: Endpoints,
    /// The member's UDP port (the UDP source port on both carriages).
    pub src_port: u16,
    /// The appliance's gradient UDP port (UDP carriage; RoCEv2 goes to 4791).
    pub gradient_port: u16,
    /// RoCEv2: the appliance's QP (BTH destination QP).
    pub dest_qp: u32,
    /// RoCEv2: the member's Q_Key (DETH).
    pub qkey: u32,
    /// RoCEv2: the member's QP (DETH source QP).
    pub src_qp: u32,
}

/// The headers of a contribution (or probe) from `a`'s member carrying `header`, with PSN `psn`
/// on RoCEv2 (spec sections 1 and 2): ECN ECT(0), TTL 64, DSCP 0, P_Key 0xFFFF. The one layout
/// of the pcap writer ([`frame_spec`]) and the live generator (`live::allreduce`), both built by
/// the appliance's `dataplane::wire::build`.
pub fn contribution_spec(a: &Addresses, carriage: Carriage, header: GradientRepr, psn: u32) -> FrameSpec {
    let roce = carriage == Carriage::Rocev2;
    let Endpoints { src_mac, dst_mac, vlan, src_ip, dst_ip } = a.ends;
    FrameSpec {
        src_mac,
        dst_mac,
        vlan,
        vlan_tpid: dataplane::wire::vlan::TPID_8021Q,
        outer_tag: None,
        src_ip,
        dst_ip,
        dscp: 0,
        ecn: ECT0,
        ttl: TTL,
        src_port: a.src_port,
        dst_port: if roce { ROCEV2_PORT } else { a.gradient_port },
        roce: roce.then_some(Roce { dest_qp: a.dest_qp, psn, pkey: plan::PKEY, qkey: a.qkey, src_qp: a.src_qp }),
        header,
    }
}

/// The addresses of member `rank` of a workload, per the address plan.
pub fn plan_addresses(p: &Params, rank: u16) -> Addresses {
    Addresses {
        ends: Endpoints {
            src_mac: plan::member_mac(rank),
            dst_mac: plan::APPLIANCE_MAC,
            vlan: p.vlan,
            src_ip: plan::member_ip(p.family, rank),
            dst_ip: plan::appliance_ip(p.family),
        },
        src_port: plan::member_udp_port(rank),
        gradient_port: plan::GRADIENT_UDP_PORT,
        dest_qp: plan::APPLIANCE_QPN,
        qkey: plan::MEMBER_QKEY,
        src_qp: plan::member_qpn(rank),
    }
}

/// The headers of `event`'s frame.
pub fn frame_spec(p: &Params, e: &Event) -> FrameSpec {
    let header = GradientRepr {
        version: VERSION,
        flags: e.flags,
        op_type: p.op.wire(),
        collective_id: p.collective_id,
        dtype: p.dtype.wire(),
        reason: 0,
        worker_rank: e.rank,
        tensor_offset: e.offset,
        data_length: e.count * p.dtype.size() as u32,
        round: e.round,
    };
    contribution_spec(&plan_addresses(p, e.rank), p.carriage, header, e.psn)
}

/// The length (bytes) of the largest frame of a workload (a full chunk).
pub fn max_frame_len(p: &Params) -> usize {
    let e = Event {
        time_us: 0,
        rank: 0,
        round_index: 0,
        round: 0,
        offset: 0,
        count: p.chunk_elements.min(p.tensor_elements as u32),
        flags: 0,
        kind: crate::workload::Kind::First,
        psn: 0,
    };
    frame_spec(p, &e).frame_len(p.chunk_bytes().min(p.tensor_bytes() as u64) as usize)
}

/// Builds `event`'s frame into `buf` (resized to fit) with `payload` (its chunk of the rank's
/// tensor, `count x dtype size` bytes) and returns its length.
///
/// # Panics
/// If `payload` is not the event's length (a bug of the caller): the builder refuses it.
pub fn build_frame(p: &Params, e: &Event, payload: &[u8], buf: &mut Vec<u8>) -> usize {
    let spec = frame_spec(p, e);
    assert_eq!(payload.len(), spec.header.data_length as usize, "payload of the event's length");
    let len = spec.frame_len(payload.len());
    buf.resize(len, 0);
    build::build(&spec, payload, buf).expect("a workload's frames fit (chunks of at most 8900 bytes)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pcap::{write_pcap, EPOCH_S};
    use crate::workload::{Family, Impairments, Kind, Workload};
    use dataplane::parse::{parse, Layers};
    use dataplane::wire::gradient::{Dtype, Op};
    use dataplane::wire::gradient::{Flags, GradientHeader};
    use pcap_file::pcap::PcapReader;

    /// Every frame of a workload with every impairment, written to pcap and read back, parses
    /// with the appliance's parser down to the gradient header, with the plan's addresses, the
    /// event's header fields and the rank's tensor chunk as payload.
    #[test]
    fn every_frame_parses_for_both_carriages_families_and_tags() {
        for carriage in [Carriage::Udp, Carriage::Rocev2] {
            for family in [Family::V4, Family::V6] {
                for vlan in [None, Some(300)] {
                    let p = Params {
                        workers: 3,
                        tensor_elements: 103,
                        chunk_elements: 25,
                        dtype: Dtype::F16,
                        op: Op::Max,
                        carriage,
                        family,
                        vlan,
                        rounds: 2,
                        first_round: 7,
                        collective_id: 0x1234,
                        gap_us: 2,
                        impair: Impairments {
                            shuffle: true,
                            duplicate: 0.1,
                            drop: 0.1,
                            late: 0.1,
                            ..Default::default()
                        },
                        ..Params::default()
                    };
                    check_frames(&Workload::generate(p).unwrap());
                }
            }
        }
    }

    fn check_frames(w: &Workload) {
        let p = &w.params;
        let ctx = format!("{:?} {:?} vlan {:?}", p.carriage, p.family, p.vlan);
        let mut file = Vec::new();
        let written = write_pcap(w, &mut file).unwrap();
        assert_eq!(written.packets as usize, w.events.len());
        let mut r = PcapReader::new(&file[..]).unwrap();
        let tensors: Vec<Vec<Vec<u8>>> = (0..p.rounds).map(|i| w.tensors(i)).collect();
        let mut bytes = 0u64;
        for e in &w.events {
            let rec = r.next_packet().unwrap().unwrap();
            let f = &rec.data[..];
            bytes += f.len() as u64;
            assert_eq!(rec.timestamp.as_micros() as u64, EPOCH_S * 1_000_000 + e.time_us);
            let pr = parse(f, plan::GRADIENT_UDP_PORT).unwrap_or_else(|d| panic!("{ctx}: {d:?}"));
            assert!(pr.has(Layers::GRADIENT), "{ctx}");
            assert_eq!(pr.has(Layers::IPV6), p.family == Family::V6, "{ctx}");
            assert_eq!(pr.eth_src, plan::member_mac(e.rank));
            assert_eq!(pr.eth_dst, plan::APPLIANCE_MAC);
            assert_eq!(pr.ip_src(), &plan_ip_bytes(plan::member_ip(p.family, e.rank))[..]);
            assert_eq!(pr.ip_dst(), &plan_ip_bytes(plan::appliance_ip(p.family))[..]);
            assert_eq!((pr.ecn, pr.ttl, pr.dscp), (ECT0, 64, 0));
            assert_eq!(pr.udp_src, plan::member_udp_port(e.rank));
            match p.vlan {
                Some(v) => assert_eq!((pr.vlan_tags(), pr.vid_outer), (1, v)),
                None => assert_eq!(pr.vlan_tags(), 0),
            }
            if p.carriage == Carriage::Rocev2 {
                assert_eq!(pr.udp_dst, ROCEV2_PORT);
                assert!(pr.has(Layers::BTH) && pr.has(Layers::DETH));
                assert_eq!(pr.bth_opcode, build::UD_SEND_ONLY);
                assert_eq!(
                    (pr.bth_dest_qp, pr.bth_psn, pr.deth_qkey, pr.deth_src_qp),
                    (plan::APPLIANCE_QPN, e.psn, plan::MEMBER_QKEY, plan::member_qpn(e.rank))
                );
            } else {
                assert_eq!(pr.udp_dst, plan::GRADIENT_UDP_PORT);
                assert!(!pr.has(Layers::BTH));
            }
            let g = GradientHeader::new_checked(&f[pr.grad_offset as usize..]).unwrap();
            let h = GradientRepr::parse(&g);
            assert_eq!(
                (h.version, h.flags, h.op_type, h.collective_id, h.dtype, h.reason, h.worker_rank),
                (1, e.flags, p.op.wire(), p.collective_id, p.dtype.wire(), 0, e.rank),
                "{ctx}"
            );
            assert_eq!((h.tensor_offset, h.data_length, h.round), (e.offset, e.count * 2, e.round));
            assert_eq!(e.flags == Flags::RETRANSMIT, matches!(e.kind, Kind::Retransmit | Kind::Late));
            let want = w.chunk_of(&tensors[e.round_index as usize][e.rank as usize], e.offset, e.count);
            assert_eq!(&f[pr.grad_payload()], want, "{ctx}");
        }
        assert!(r.next_packet().is_none());
        assert_eq!(bytes, written.bytes);
    }

    fn plan_ip_bytes(a: dataplane::wire::build::IpAddrBytes) -> Vec<u8> {
        match a {
            dataplane::wire::build::IpAddrBytes::V4(b) => b.to_vec(),
            dataplane::wire::build::IpAddrBytes::V6(b) => b.to_vec(),
        }
    }

    #[test]
    fn max_frame_len_is_the_full_chunks_frame() {
        let p = Params { chunk_elements: 2000, dtype: Dtype::F32, tensor_elements: 5000, ..Params::default() };
        // Ethernet 14 + IPv4 20 + UDP 8 + gradient 20 + 8000.
        assert_eq!(max_frame_len(&p), 8062);
        let p = Params {
            carriage: Carriage::Rocev2,
            family: Family::V6,
            vlan: Some(5),
            chunk_elements: 3,
            dtype: Dtype::Bf16,
            ..p
        };
        // 18 + 40 + 8 + BTH 12 + DETH 8 + 20 + 6 + pad 2 + ICRC 4.
        assert_eq!(max_frame_len(&p), 118);
    }
}
