//! Building whole gradient frames (spec sections 1, 2, 6): Ethernet (optionally 802.1Q-tagged) /
//! IPv4 or IPv6 / UDP / [BTH + DETH] / gradient header / payload / [pad + ICRC], with every
//! checksum and the ICRC filled in.
//!
//! The appliance builds its RESULT and NAK packets with it; the traffic generator builds workers'
//! contributions with it. Nothing allocates: the frame is written into a caller's buffer.

use super::bth::{self, BthRepr, DethHeader};
use super::checksum;
use super::error::WireError;
use super::gradient::{GradientRepr, HEADER_LEN as GRAD_LEN};
use super::icrc::{self, ICRC_LEN};
use super::ipv4::{self, Ipv4Packet, Ipv4Repr};
use super::ipv6::{self, Ipv6Repr};
use super::udp::{self, UdpPacket, UdpRepr};
use super::vlan::{self, VlanTag};
use super::{ethernet, EtherType, EthernetAddress, EthernetFrame};

/// The UDP destination port of RoCEv2: [`bth::ROCEV2_UDP_PORT`], under the name the builders'
/// callers use.
pub use super::bth::ROCEV2_UDP_PORT as ROCEV2_PORT;
/// BTH opcode UD SEND Only (IBTA table 38), the RoCEv2 carriage's opcode.
pub const UD_SEND_ONLY: u8 = 0x64;

/// An IP address of either family, as the bytes of its header field (network order): 4 for
/// IPv4, 16 for IPv6. Not `std::net::IpAddr`: frames are built from and into these bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpAddrBytes {
    /// IPv4.
    V4([u8; 4]),
    /// IPv6.
    V6([u8; 16]),
}

impl IpAddrBytes {
    /// From the standard library's type.
    pub fn from_std(a: std::net::IpAddr) -> IpAddrBytes {
        match a {
            std::net::IpAddr::V4(a) => IpAddrBytes::V4(a.octets()),
            std::net::IpAddr::V6(a) => IpAddrBytes::V6(a.octets()),
        }
    }

    /// True for IPv6.
    pub fn is_v6(&self) -> bool {
        matches!(self, IpAddrBytes::V6(_))
    }
}

impl std::fmt::Display for IpAddrBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IpAddrBytes::V4(a) => std::net::Ipv4Addr::from(*a).fmt(f),
            IpAddrBytes::V6(a) => std::net::Ipv6Addr::from(*a).fmt(f),
        }
    }
}

/// The RoCEv2 carriage's per-packet fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Roce {
    /// BTH destination QP (24 bits).
    pub dest_qp: u32,
    /// BTH PSN (24 bits).
    pub psn: u32,
    /// BTH P_Key.
    pub pkey: u16,
    /// DETH Q_Key.
    pub qkey: u32,
    /// DETH source QP (24 bits).
    pub src_qp: u32,
}

/// Everything a gradient frame's headers hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameSpec {
    /// Ethernet source.
    pub src_mac: EthernetAddress,
    /// Ethernet destination.
    pub dst_mac: EthernetAddress,
    /// The inner (or only) tag, if tagged: its tag control information (PCP 3 bits, DEI 1, VID
    /// 12; a VID alone is a tag of priority 0), under TPID `vlan_tpid` (802.1Q by default).
    pub vlan: Option<u16>,
    /// The TPID of `vlan`'s tag: 0x8100 (802.1Q; [`FrameSpec::default`]'s), or what a reply
    /// that mirrors a request's tags found there (a second 0x88A8, say).
    pub vlan_tpid: u16,
    /// A tag written before `vlan`'s, as (TPID, TCI): the outer tag (0x88A8, or a second
    /// 0x8100) of a reply that mirrors a double-tagged request's tags; a single tag of any TPID
    /// is `vlan` with its `vlan_tpid`.
    pub outer_tag: Option<(u16, u16)>,
    /// IP source (its family decides the frame's).
    pub src_ip: IpAddrBytes,
    /// IP destination (same family as `src_ip`).
    pub dst_ip: IpAddrBytes,
    /// DSCP (6 bits).
    pub dscp: u8,
    /// ECN (2 bits).
    pub ecn: u8,
    /// TTL or hop limit.
    pub ttl: u8,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port (4791 for RoCEv2).
    pub dst_port: u16,
    /// The RoCEv2 headers, for the RoCEv2 carriage.
    pub roce: Option<Roce>,
    /// The gradient header (its `data_length` must equal the payload's length).
    pub header: GradientRepr,
}

impl Default for FrameSpec {
    /// All zeros (addresses 00:00:00:00:00:00 and 0.0.0.0, ports 0, DSCP and ECN 0, a zero
    /// gradient header) but TTL 64, untagged, UDP: a base for a struct literal that sets what
    /// it needs (`FrameSpec { src_ip, dst_ip, ..FrameSpec::default() }`).
    fn default() -> FrameSpec {
        FrameSpec {
            src_mac: EthernetAddress::default(),
            dst_mac: EthernetAddress::default(),
            vlan: None,
            vlan_tpid: vlan::TPID_8021Q,
            outer_tag: None,
            src_ip: IpAddrBytes::V4([0; 4]),
            dst_ip: IpAddrBytes::V4([0; 4]),
            dscp: 0,
            ecn: 0,
            ttl: 64,
            src_port: 0,
            dst_port: 0,
            roce: None,
            header: GradientRepr::default(),
        }
    }
}

impl FrameSpec {
    /// Bytes of the L2 header.
    fn l2_len(&self) -> usize {
        ethernet::HEADER_LEN + vlan::HEADER_LEN * (self.vlan.is_some() as usize + self.outer_tag.is_some() as usize)
    }

    /// Bytes of the IP header.
    fn l3_len(&self) -> usize {
        if self.src_ip.is_v6() {
            ipv6::HEADER_LEN
        } else {
            ipv4::MIN_HEADER_LEN
        }
    }

    /// The pad after the gradient header and payload (RoCEv2: to a multiple of 4 bytes).
    pub fn pad(&self, payload_len: usize) -> usize {
        if self.roce.is_some() {
            roce_pad(payload_len)
        } else {
            0
        }
    }

    /// The whole frame's length for a payload of `payload_len` bytes.
    pub fn frame_len(&self, payload_len: usize) -> usize {
        self.l2_len() + self.ip_len(payload_len)
    }

    /// The IP packet's length (the frame less its Ethernet header and tags: what a link's MTU
    /// bounds) for a payload of `payload_len` bytes.
    pub fn ip_len(&self, payload_len: usize) -> usize {
        let roce = if self.roce.is_some() { bth::HEADER_LEN + bth::DETH_LEN + ICRC_LEN } else { 0 };
        self.l3_len() + udp::HEADER_LEN + roce + GRAD_LEN + payload_len + self.pad(payload_len)
    }
}

/// Writes the frame of `spec` with `payload` into `buf` and returns its length.
///
/// UDP checksum: always valid for the UDP carriage (written 0xFFFF where it computes to 0);
/// RoCEv2 writes 0 over IPv4 and computes it last, over the datagram including the ICRC, over
/// IPv6 (spec section 1). The ICRC is computed after everything else it covers.
///
/// # Errors
/// [`WireError::Truncated`] if `buf` is shorter than [`FrameSpec::frame_len`];
/// [`WireError::BadLength`] if the address families differ or the datagram exceeds 65535 bytes.
pub fn build(spec: &FrameSpec, payload: &[u8], buf: &mut [u8]) -> Result<usize, WireError> {
    build_with(spec, payload, None, buf)
}

/// The RoCEv2 pad after the gradient header and a payload of `payload_len` bytes: zero bytes
/// to a multiple of 4 (the BTH's pad count; spec section 1), 0 to 3.
#[inline]
pub const fn roce_pad(payload_len: usize) -> usize {
    (4 - (GRAD_LEN + payload_len) % 4) % 4
}

/// What one payload contributes to the checksums of every frame that carries it: computed once
/// ([`PayloadSums::of`], [`PayloadSums::only`]) and reused for each copy of a result (and for
/// resends), so that the payload is read once per result instead of once per copy.
#[derive(Debug, Clone, Copy)]
pub struct PayloadSums {
    /// The ones'-complement sum of the payload (RFC 1071), native to a 16-bit-aligned position;
    /// `None` when no frame needs it (RoCEv2 over IPv4 carries no UDP checksum, spec section 1).
    pub sum: Option<u16>,
    /// The finalized CRC-32 of the payload and its RoCEv2 pad (`pad` zero bytes); `None` for the
    /// UDP carriage.
    pub crc: Option<u32>,
    /// [`icrc::shift_factor`] of the payload and pad's length: joins `crc` to a head's CRC with
    /// one multiplication.
    pub factor: u32,
    /// The pad the CRC covers (bytes).
    pub pad: usize,
}

impl PayloadSums {
    /// The sum and the CRC of `payload`, followed by `pad` zero bytes for the CRC.
    pub fn of(payload: &[u8], pad: usize) -> PayloadSums {
        Self::only(payload, pad, true, true)
    }

    /// As [`PayloadSums::of`], computing the ones'-complement sum only if `sum` and the CRC only
    /// if `crc` (frames that need a part left out compute it over their own copy).
    pub fn only(payload: &[u8], pad: usize, sum: bool, crc: bool) -> PayloadSums {
        let factor = if crc { Self::crc_factor(payload.len(), pad) } else { 0 };
        Self::with_factor(payload, pad, sum, crc, factor)
    }

    /// As [`PayloadSums::only`], with [`PayloadSums::factor`] given: `factor` must be
    /// [`PayloadSums::crc_factor`] of the payload's length and `pad` when `crc` is true. For
    /// callers that sum many payloads of a few lengths (the aggregator: a collective's full
    /// chunk and its last one), which compute the factor once per length (it costs a few
    /// hundred instructions: a carry-less multiplication done bit by bit).
    #[inline]
    pub fn with_factor(payload: &[u8], pad: usize, sum: bool, crc: bool, factor: u32) -> PayloadSums {
        debug_assert!(!crc || factor == Self::crc_factor(payload.len(), pad));
        let crc = crc.then(|| {
            let mut h = icrc::hasher();
            h.update(payload);
            h.update(&[0u8; 3][..pad.min(3)]);
            h.finalize()
        });
        PayloadSums {
            sum: sum.then(|| checksum::sum(payload)),
            crc,
            factor: if crc.is_some() { factor } else { 0 },
            pad,
        }
    }

    /// [`PayloadSums::factor`] of a payload of `len` bytes followed by `pad` zero bytes (at
    /// most 3 count, as in the CRC): [`icrc::shift_factor`] of their length.
    pub fn crc_factor(len: usize, pad: usize) -> u32 {
        icrc::shift_factor((len + pad.min(3)) as u64)
    }

    /// Sums of an empty payload (placeholders for slots that have no result yet).
    pub const EMPTY: PayloadSums = PayloadSums { sum: Some(0), crc: None, factor: 0, pad: 0 };
}

/// The IP header of a frame that carries one UDP datagram: addresses (both of one family), TTL
/// or hop limit, DSCP (6 bits) and ECN (2 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpIpHeader {
    /// Source address.
    pub src: IpAddrBytes,
    /// Destination address, of the source's family.
    pub dst: IpAddrBytes,
    /// TTL (IPv4) or hop limit (IPv6).
    pub ttl: u8,
    /// DSCP.
    pub dscp: u8,
    /// ECN.
    pub ecn: u8,
}

impl UdpIpHeader {
    /// Writes the header at `f[l3..]` for a UDP datagram of `udp_len` bytes (UDP header
    /// included) at `f[l4..]`: IPv4 (identification 0, DF set, the header checksum filled, so
    /// `f` holds the whole datagram) or IPv6 (flow label 0), by the addresses' family.
    ///
    /// # Errors
    /// - [`WireError::BadLength`]: the addresses are of different families.
    /// - The header emit's errors: `f` shorter than the header, or than the datagram (IPv4).
    #[inline]
    pub fn emit(&self, f: &mut [u8], l3: usize, l4: usize, udp_len: usize) -> Result<(), WireError> {
        match (self.src, self.dst) {
            (IpAddrBytes::V4(s), IpAddrBytes::V4(d)) => {
                Ipv4Repr {
                    src_addr: s,
                    dst_addr: d,
                    protocol: udp::PROTOCOL,
                    payload_len: udp_len as u16,
                    ttl: self.ttl,
                    dscp: self.dscp,
                    ecn: self.ecn,
                    ident: 0,
                    dont_frag: true,
                }
                .emit(&mut f[l3..])?;
                Ipv4Packet::new_checked(&mut f[l3..l4 + udp_len])?.fill_checksum();
            }
            (IpAddrBytes::V6(s), IpAddrBytes::V6(d)) => {
                Ipv6Repr {
                    src_addr: s,
                    dst_addr: d,
                    next_header: udp::PROTOCOL,
                    payload_len: udp_len as u16,
                    hop_limit: self.ttl,
                    traffic_class: (self.dscp << 2) | (self.ecn & 3),
                    flow_label: 0,
                }
                .emit(&mut f[l3..])?;
            }
            _ => return Err(WireError::BadLength),
        }
        Ok(())
    }
}

/// As [`build`], with the payload's checksum contributions computed beforehand (`pre`, for this
/// payload and this spec's pad): the payload is copied but not read again. The payload starts at
/// an even offset of the UDP datagram, so its sum adds in as it is.
pub fn build_with(
    spec: &FrameSpec,
    payload: &[u8],
    pre: Option<&PayloadSums>,
    buf: &mut [u8],
) -> Result<usize, WireError> {
    let len = spec.frame_len(payload.len());
    if buf.len() < len {
        return Err(WireError::Truncated);
    }
    let f = &mut buf[..len];
    let l3 = spec.l2_len();
    let l4 = l3 + spec.l3_len();
    let udp_len = len - l4;
    if udp_len > u16::MAX as usize {
        return Err(WireError::BadLength);
    }
    let ethertype = if spec.src_ip.is_v6() { EtherType::IPV6 } else { EtherType::IPV4 };
    // The EtherType field of the Ethernet header announces the first tag (its TPID); each tag's
    // view covers its TCI and the field after it, which announces the next tag or the IP header.
    let mut tags = [spec.outer_tag, spec.vlan.map(|v| (spec.vlan_tpid, v))].into_iter().flatten().peekable();
    let mut eth = EthernetFrame::new_unchecked(&mut *f);
    eth.set_dst(spec.dst_mac);
    eth.set_src(spec.src_mac);
    eth.set_ethertype(tags.peek().map_or(ethertype, |t| t.0));
    let mut at = ethernet::HEADER_LEN;
    while let Some((_, tci)) = tags.next() {
        let mut tag = VlanTag::new_unchecked(&mut f[at..]);
        tag.set_tci(tci);
        tag.set_ethertype(tags.peek().map_or(ethertype, |t| t.0));
        at += vlan::HEADER_LEN;
    }
    UdpIpHeader { src: spec.src_ip, dst: spec.dst_ip, ttl: spec.ttl, dscp: spec.dscp, ecn: spec.ecn }
        .emit(f, l3, l4, udp_len)?;
    UdpRepr { src_port: spec.src_port, dst_port: spec.dst_port, payload_len: (udp_len - udp::HEADER_LEN) as u16 }
        .emit(&mut f[l4..])?;
    let mut g = l4 + udp::HEADER_LEN;
    if let Some(r) = spec.roce {
        BthRepr {
            opcode: UD_SEND_ONLY,
            solicited: false,
            mig_req: false,
            pad_count: spec.pad(payload.len()) as u8,
            tver: 0,
            pkey: r.pkey,
            fecn: false,
            becn: false,
            dest_qp: r.dest_qp,
            ack_req: false,
            psn: r.psn,
        }
        .emit(&mut f[g..])?;
        let mut deth = DethHeader::new_checked(&mut f[g + bth::HEADER_LEN..])?;
        deth.set_qkey(r.qkey);
        deth.set_src_qp(r.src_qp); // and the reserved byte before it: 0
        g += bth::HEADER_LEN + bth::DETH_LEN;
    }
    spec.header.emit(&mut f[g..])?;
    f[g + GRAD_LEN..g + GRAD_LEN + payload.len()].copy_from_slice(payload);
    let pad = spec.pad(payload.len());
    f[g + GRAD_LEN + payload.len()..g + GRAD_LEN + payload.len() + pad].fill(0);
    let datagram_end = len;
    let pay = g + GRAD_LEN; // where the payload starts
    let pre = pre.filter(|p| p.pad == pad);
    // The UDP checksum over the datagram from `l4` to `end`, reusing the payload's sum.
    let udp_sum = |f: &[u8], pseudo: u16, end: usize| -> u16 {
        match pre.and_then(|p| p.sum) {
            Some(psum) => {
                let head = checksum::sum(&f[l4..pay]);
                // After a payload of odd length the tail starts at an odd offset of the datagram:
                // its bytes pair the other way round, so its sum is byte-swapped (RFC 1071 2.(B)).
                let tail = checksum::sum(&f[pay + payload.len()..end]);
                let tail = if payload.len() % 2 == 1 { tail.swap_bytes() } else { tail };
                checksum::combine(checksum::combine(pseudo, head), checksum::combine(psum, tail))
            }
            None => checksum::combine(pseudo, checksum::sum(&f[l4..end])),
        }
    };
    let nonzero = |ck: u16| if ck == 0 { 0xffff } else { ck };
    if spec.roce.is_some() {
        UdpPacket::new_unchecked(&mut f[l4..]).set_checksum(0);
        match pre.and_then(|p| Some((p.crc?, p.factor))) {
            Some((tail, factor)) => {
                let head = icrc::head_hasher(&f[l3..pay], l4 - l3)?;
                icrc::store(&mut f[..datagram_end], icrc::combine_factor(head, factor, tail));
            }
            None => icrc::fill(&mut f[l3..datagram_end], l4 - l3)?,
        }
    }
    let pseudo = match (spec.roce.is_some(), spec.src_ip, spec.dst_ip) {
        (true, IpAddrBytes::V4(_), IpAddrBytes::V4(_)) => None,
        (_, IpAddrBytes::V4(s), IpAddrBytes::V4(d)) => {
            Some(checksum::pseudo_header_v4(s, d, udp::PROTOCOL, udp_len as u16))
        }
        (_, IpAddrBytes::V6(s), IpAddrBytes::V6(d)) => {
            Some(checksum::pseudo_header_v6(&s, &d, udp::PROTOCOL, udp_len as u32))
        }
        _ => return Err(WireError::BadLength),
    };
    if let Some(ph) = pseudo {
        UdpPacket::new_unchecked(&mut f[l4..]).set_checksum(0);
        let ck = nonzero(!udp_sum(f, ph, datagram_end));
        UdpPacket::new_unchecked(&mut f[l4..]).set_checksum(ck);
    }
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::{parse, Layers};
    use crate::wire::gradient::{Flags, DEFAULT_UDP_PORT};

    fn spec(v6: bool, roce: bool, vlan: Option<u16>) -> FrameSpec {
        let (s, d) = if v6 {
            let mut a = [0u8; 16];
            a[0] = 0xfd;
            a[15] = 1;
            let mut b = a;
            b[15] = 0xfe;
            (IpAddrBytes::V6(a), IpAddrBytes::V6(b))
        } else {
            (IpAddrBytes::V4([10, 0, 0, 1]), IpAddrBytes::V4([10, 0, 0, 254]))
        };
        FrameSpec {
            src_mac: "02:00:00:00:00:01".parse().unwrap(),
            dst_mac: "02:00:00:00:00:fe".parse().unwrap(),
            vlan,
            vlan_tpid: vlan::TPID_8021Q,
            outer_tag: None,
            src_ip: s,
            dst_ip: d,
            dscp: 26,
            ecn: 2,
            ttl: 64,
            src_port: 50000,
            dst_port: if roce { ROCEV2_PORT } else { DEFAULT_UDP_PORT },
            roce: roce.then_some(Roce { dest_qp: 1, psn: 7, pkey: 0xffff, qkey: 0x1111, src_qp: 0x22 }),
            header: GradientRepr {
                version: 1,
                flags: Flags::RESULT,
                op_type: 1,
                collective_id: 5,
                dtype: 2,
                reason: 0,
                worker_rank: 0xffff,
                tensor_offset: 6,
                data_length: 6,
                round: 9,
            },
        }
    }

    #[test]
    fn every_carriage_family_and_tag_parses_with_valid_checksums() {
        let payload = [1u8, 2, 3, 4, 5, 6];
        for v6 in [false, true] {
            for roce in [false, true] {
                for vlan in [None, Some(100)] {
                    let s = spec(v6, roce, vlan);
                    let mut buf = [0u8; 256];
                    let n = build(&s, &payload, &mut buf).unwrap();
                    assert_eq!(n, s.frame_len(6));
                    let p = parse(&buf[..n], DEFAULT_UDP_PORT)
                        .unwrap_or_else(|e| panic!("v6 {v6} roce {roce} vlan {vlan:?}: {e}"));
                    assert!(p.has(Layers::GRADIENT));
                    assert_eq!(&buf[p.grad_payload()], &payload);
                    assert_eq!(p.grad_collective_id, 5);
                    assert_eq!((p.dscp, p.ecn, p.ttl), (26, 2, 64));
                    if roce {
                        assert_eq!(
                            (p.bth_dest_qp, p.bth_psn, p.bth_pad, p.deth_src_qp, p.deth_qkey),
                            (1, 7, 2, 0x22, 0x1111)
                        );
                        let udp_ck = u16::from_be_bytes([buf[p.l4_offset as usize + 6], buf[p.l4_offset as usize + 7]]);
                        assert_eq!(udp_ck == 0, !v6, "RoCEv2: 0 over IPv4, computed over IPv6");
                    }
                    if let Some(v) = vlan {
                        assert_eq!(p.vid_outer, v);
                    }
                }
            }
        }
    }

    /// The tags stand between the source MAC and the IP EtherType, outer first, each TPID in
    /// the field before its TCI (IEEE 802.1Q-2018 9.5): an S-tag then a C-tag, a second 0x8100,
    /// or an S-tag alone.
    #[test]
    fn tags_are_written_outer_first_with_their_tpids() {
        type Tags = (Option<(u16, u16)>, Option<u16>);
        let cases: [(Tags, &[u8]); 4] = [
            ((Some((0x88a8, 0x2064)), Some(200)), &[0x88, 0xa8, 0x20, 0x64, 0x81, 0x00, 0x00, 200, 0x08, 0x00]),
            ((Some((0x8100, 0x0007)), Some(200)), &[0x81, 0x00, 0x00, 7, 0x81, 0x00, 0x00, 200, 0x08, 0x00]),
            ((Some((0x88a8, 0x0064)), None), &[0x88, 0xa8, 0x00, 0x64, 0x08, 0x00]),
            ((None, None), &[0x08, 0x00]),
        ];
        for ((outer, vlan), want) in cases {
            let mut s = spec(false, false, vlan);
            s.outer_tag = outer;
            let mut buf = [0xaau8; 256];
            let n = build(&s, &[1, 2, 3, 4, 5, 6], &mut buf).unwrap();
            assert_eq!(&buf[..12], &[2, 0, 0, 0, 0, 0xfe, 2, 0, 0, 0, 0, 1]);
            assert_eq!(&buf[12..12 + want.len()], want, "{outer:?} {vlan:?}");
            let p = parse(&buf[..n], DEFAULT_UDP_PORT).unwrap();
            assert_eq!(p.vlan_tags(), (want.len() - 2) / 4);
            assert!(p.has(Layers::GRADIENT));
        }
    }

    #[test]
    fn precomputed_payload_sums_give_the_same_frames() {
        for v6 in [false, true] {
            for roce in [false, true] {
                // Odd lengths too (a PROBE's bitmap): the RoCEv2 pad and ICRC then follow at an
                // odd offset.
                for n in [1usize, 2, 3, 5, 6, 7, 8, 1023, 1024] {
                    let payload: Vec<u8> = (0..n).map(|i| (i * 37 + 11) as u8).collect();
                    let mut s = spec(v6, roce, Some(5));
                    s.header.data_length = n as u32;
                    let mut a = vec![0u8; s.frame_len(n)];
                    let mut b = a.clone();
                    build(&s, &payload, &mut a).unwrap();
                    for (sum, crc) in [(true, true), (true, false), (false, true), (false, false)] {
                        let pre = PayloadSums::only(&payload, s.pad(n), sum, crc);
                        b.fill(0);
                        build_with(&s, &payload, Some(&pre), &mut b).unwrap();
                        assert_eq!(a, b, "v6 {v6} roce {roce} n {n} sum {sum} crc {crc}");
                    }
                }
            }
        }
    }

    #[test]
    fn payload_sums_for_another_pad_are_not_used() {
        // Sums whose CRC covers a different pad than the frame's would give a wrong ICRC: the
        // builder must compute the payload's part itself (the frame then equals `build`'s, and
        // its ICRC verifies).
        for v6 in [false, true] {
            let n = 6; // pad 2
            let payload: Vec<u8> = (0..n as u8).map(|i| i.wrapping_mul(29) ^ 0x3c).collect();
            let s = spec(v6, true, None);
            assert_eq!(s.pad(n), 2);
            let mut a = vec![0u8; s.frame_len(n)];
            build(&s, &payload, &mut a).unwrap();
            for wrong_pad in [0, 1, 3] {
                let pre = PayloadSums::of(&payload, wrong_pad);
                let mut b = vec![0u8; s.frame_len(n)];
                build_with(&s, &payload, Some(&pre), &mut b).unwrap();
                assert_eq!(a, b, "v6 {v6} pad {wrong_pad}");
                parse(&b, DEFAULT_UDP_PORT).unwrap_or_else(|e| panic!("v6 {v6} pad {wrong_pad}: {e}"));
            }
        }
    }

    #[test]
    fn rocev2_pads_header_and_payload_to_a_multiple_of_four() {
        // Spec section 1: the gradient header (20 bytes) and payload are padded with 0 to 3 zero
        // bytes to a multiple of 4, and the BTH PadCnt holds that count. With a 20-byte header
        // the pad depends on the payload's length modulo 4 only: 0 -> 0, 1 -> 3, 2 -> 2, 3 -> 1.
        let udp = spec(false, false, None);
        for n in 0..12usize {
            let want = [0, 3, 2, 1][n % 4];
            let mut s = spec(n % 2 == 1, true, None);
            s.header.data_length = n as u32;
            assert_eq!(s.pad(n), want, "payload {n}");
            assert_eq!((20 + n + s.pad(n)) % 4, 0);
            assert_eq!(udp.pad(n), 0, "the UDP carriage has no pad");
            let payload: Vec<u8> = (0..n as u8).map(|i| i | 0x80).collect();
            let mut buf = [0xaau8; 256];
            let len = build(&s, &payload, &mut buf).unwrap();
            let p = parse(&buf[..len], DEFAULT_UDP_PORT).unwrap_or_else(|e| panic!("payload {n}: {e}"));
            assert_eq!(p.bth_pad as usize, want, "PadCnt, payload {n}");
            // The pad bytes are zero and sit between the payload and the 4-byte ICRC.
            let end = p.grad_offset as usize + 20 + n;
            assert_eq!(&buf[end..end + want], &[0u8; 3][..want], "payload {n}");
            assert_eq!(end + want + ICRC_LEN, len, "payload {n}");
            // The DETH's reserved byte (spec section 1: Q_Key u32, reserved u8, source QP u24)
            // is written 0 whatever the buffer held.
            assert_eq!(buf[p.l4_offset as usize + 8 + bth::HEADER_LEN + 4], 0);
        }
    }

    #[test]
    fn the_largest_udp_datagram_builds_and_one_byte_more_is_refused() {
        // The UDP length (RFC 768) and the IPv6 payload length (RFC 8200) are 16-bit fields: a
        // datagram of 65535 bytes (8 + 20 + 65507) is the largest; over IPv4 the total length
        // (RFC 791, 16 bits) also counts the 20-byte IP header, so 65515 is its largest.
        for (v6, max_udp) in [(true, 65535usize), (false, 65535 - 20)] {
            let mut s = spec(v6, false, None);
            let n = max_udp - 8 - GRAD_LEN;
            s.header.data_length = n as u32;
            let payload = vec![0x5au8; n + 1];
            let mut buf = vec![0u8; s.frame_len(n + 1)];
            let len = build(&s, &payload[..n], &mut buf).unwrap_or_else(|e| panic!("v6 {v6}: {e}"));
            let l4 = 14 + if v6 { 40 } else { 20 };
            assert_eq!(u16::from_be_bytes([buf[l4 + 4], buf[l4 + 5]]) as usize, max_udp, "v6 {v6}");
            assert_eq!(len, l4 + max_udp);
            let p = parse(&buf[..len], DEFAULT_UDP_PORT).unwrap_or_else(|e| panic!("v6 {v6}: {e}"));
            assert!(p.has(Layers::GRADIENT), "v6 {v6}");
            s.header.data_length = n as u32 + 1;
            assert_eq!(build(&s, &payload, &mut buf), Err(WireError::BadLength), "v6 {v6}");
        }
    }

    #[test]
    fn addresses_display_in_their_standard_text_form() {
        // IPv4 dotted decimal; IPv6 as RFC 5952 recommends (zeros compressed, lower case).
        assert_eq!(IpAddrBytes::V4([10, 0, 0, 254]).to_string(), "10.0.0.254");
        let mut v6 = [0u8; 16];
        v6[0] = 0xfd;
        v6[15] = 0xfe;
        assert_eq!(IpAddrBytes::V6(v6).to_string(), "fd00::fe");
        assert_eq!(format!("{:>12}", IpAddrBytes::V4([1, 2, 3, 4])), "     1.2.3.4", "formatter options pass through");
    }

    #[test]
    fn short_buffer_and_mixed_families_are_errors() {
        let s = spec(false, false, None);
        assert_eq!(build(&s, &[0; 8], &mut [0u8; 40]), Err(WireError::Truncated));
        let mut m = s;
        m.dst_ip = IpAddrBytes::V6([0; 16]);
        assert_eq!(build(&m, &[0; 8], &mut [0u8; 200]), Err(WireError::BadLength));
    }
}
