//! Gradient contributions as a member sends them (spec sections 1, 2 and 4), for the tests of
//! every crate: one layout of a contribution frame, so that a test's frames change in one place.

use super::build_frame;
use crate::agg::collective::{Carriage, Collective};
use crate::wire::build::{FrameSpec, IpAddrBytes, Roce, ROCEV2_PORT};
use crate::wire::ethernet::EthernetAddress;
use crate::wire::gradient::{GradientRepr, DEFAULT_UDP_PORT, VERSION};

/// The appliance's MAC in the tests' address plan (the values of pktgen's, `pktgen/src/plan.rs`,
/// which is product code and cannot take them from here): 02:00:00:00:00:fe.
pub const APPLIANCE_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0xfe]);
/// The appliance's IPv4 address in the tests' address plan: 10.0.0.254.
pub const APPLIANCE_IPV4: [u8; 4] = [10, 0, 0, 254];
/// The appliance's IPv6 address in the tests' address plan: fd00::fe.
pub const APPLIANCE_IPV6: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xfe];
/// The appliance's QP (BTH destination QP of RoCEv2 contributions) in the tests' configs.
pub const APPLIANCE_QPN: u32 = 1;
/// The UDP source port of rank r's RoCEv2 contributions is this + r (entropy, spec section 1;
/// pktgen's plan sends from 50000 + r on both carriages).
pub const ROCEV2_SOURCE_PORT_BASE: u16 = 50000;

/// The headers of a contribution from member `rank` of `c` to the appliance of the tests'
/// address plan ([`APPLIANCE_MAC`], [`APPLIANCE_IPV4`] or [`APPLIANCE_IPV6`] as the member's
/// family), for the chunk at `offset` (elements) in `round`, carrying `len` bytes: from the
/// member's MAC and IP, ECT(0), TTL 64, DSCP 0, no VLAN tag; UDP from the member's `udp_port` to
/// the default gradient port, or RoCEv2 (UD SEND to [`APPLIANCE_QPN`], PSN 0, P_Key 0xFFFF,
/// the member's QP and Q_Key) from [`ROCEV2_SOURCE_PORT_BASE`] + rank to 4791. Panics when
/// `rank` is not a member.
pub fn contribution_spec(c: &Collective, rank: usize, offset: u32, round: u32, len: usize) -> FrameSpec {
    let m = c.members[rank];
    let roce = c.carriage == Carriage::Rocev2;
    FrameSpec {
        src_mac: m.mac,
        dst_mac: APPLIANCE_MAC,
        vlan: None,
        vlan_tpid: crate::wire::vlan::TPID_8021Q,
        outer_tag: None,
        src_ip: m.ip,
        dst_ip: if m.ip.is_v6() { IpAddrBytes::V6(APPLIANCE_IPV6) } else { IpAddrBytes::V4(APPLIANCE_IPV4) },
        dscp: 0,
        ecn: 2,
        ttl: 64,
        src_port: if roce { ROCEV2_SOURCE_PORT_BASE + rank as u16 } else { m.udp_port },
        dst_port: if roce { ROCEV2_PORT } else { DEFAULT_UDP_PORT },
        roce: roce.then_some(Roce { dest_qp: APPLIANCE_QPN, psn: 0, pkey: 0xffff, qkey: m.qkey, src_qp: m.qpn }),
        header: GradientRepr {
            version: VERSION,
            flags: 0,
            op_type: c.op.wire(),
            collective_id: c.id,
            dtype: c.dtype.wire(),
            reason: 0,
            worker_rank: rank as u16,
            tensor_offset: offset,
            data_length: len as u32,
            round,
        },
    }
}

/// The frame of a contribution ([`contribution_spec`]) carrying `payload`, after `tweak` has
/// changed what it wants in the headers (a spoofed address, a bad field); checksums and ICRC
/// are computed after the tweak, so they are valid unless the tweak makes the frame unbuildable.
pub fn contribution(
    c: &Collective,
    rank: usize,
    offset: u32,
    round: u32,
    payload: &[u8],
    tweak: impl FnOnce(&mut FrameSpec),
) -> Vec<u8> {
    let mut spec = contribution_spec(c, rank, offset, round, payload.len());
    tweak(&mut spec);
    build_frame(&spec, payload)
}
