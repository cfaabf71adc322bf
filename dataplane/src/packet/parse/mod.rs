//! The full-stack parser: one pass over a frame, from Ethernet to the gradient header, with every
//! length and checksum checked on the way.
//!
//! ```text
//!  Ethernet ─► [VLAN ─► [VLAN]] ─┬─► IPv4 ─┬─► UDP ─┬─► BTH (+ETHs, ICRC) ─► [gradient, UD SEND Only]
//!                                ├─► IPv6 ─┘        └─► gradient (dst port = gradient port)
//!                                ├─► ARP
//!                                └─► other: L2 only
//! ```
//!
//! [`parse`] returns a [`Parsed`] (plain data, `Copy`, no allocation) holding which layers are
//! valid ([`Layers`]), the fields match-action tables key on, and byte offsets into the frame so
//! that actions can rewrite headers in place and the aggregator can read lanes. A frame that
//! cannot be parsed safely is an `Err(`[`Reason`]`)`, to be counted; nothing past the layer
//! that failed is read, and no input can make it panic or read past the frame.
//!
//! Rules (sources in brackets):
//! - Up to [`MAX_VLAN_TAGS`] tags, 802.1ad or 802.1Q in any order; a third is
//!   [`Reason::VlanDepth`], never parsed as something else (spec section 1).
//! - IPv4: IHL >= 5, header and total length within the frame, header checksum verified
//!   (RFC 791). The total length bounds the datagram; Ethernet padding after it is ignored.
//!   The options must keep RFC 791's format ([`ipv4::Ipv4Packet::options_route`]; else
//!   [`Reason::MalformedIpv4`], for transit packets too, as a router processing them finds).
//!   An unfinished Loose or Strict Source and Record Route option is recorded
//!   ([`Parsed::source_routed`]) and its last address is the UDP pseudo-header's destination
//!   (the one the datagram will arrive with).
//! - IPv6: payload length within the frame; at most 8 extension headers, each inside the payload
//!   (RFC 8200 section 4; AH and the generic-format headers walked too). The UDP checksum's
//!   pseudo-header takes the final destination of a Routing header (RFC 8200 section 8.1). A
//!   Routing header with more segments left than addresses is recorded
//!   ([`Parsed::ipv6_bad_segments_left`]), not dropped here: only the node it is addressed to
//!   judges it (RFC 8200 section 4.4). So is any Routing header with segments left
//!   ([`Parsed::source_routed`]), and an option whose unrecognised type says to discard
//!   ([`Parsed::ipv6_discard_option`], RFC 8200 section 4.2).
//! - Fragments (IPv4 MF or offset, IPv6 Fragment header with M or offset): L3 only
//!   ([`Layers::IP_FRAGMENT`]); their upper layer is never parsed as UDP.
//! - UDP: 8 <= length <= IP payload; the length bounds the datagram. Checksum: over IPv4, 0 means
//!   none; over IPv6, 0 is invalid except for RoCEv2 (spec section 1); any other value is
//!   verified (RFC 768, RFC 8200 section 8.1).
//! - RoCEv2 (UDP destination 4791): the BTH opcode must be known, TVer 0, and BTH, its extension
//!   headers, PadCnt and the ICRC must fit in the UDP payload; the ICRC is verified (IBTA Annex
//!   A17.4).
//! - Gradient header (spec sections 1, 2): after UDP when the destination port is the configured
//!   gradient port, or after BTH + DETH of a UD SEND Only (0x64); only its 20 bytes are checked
//!   here. The gradient payload excludes RoCEv2 pad and ICRC.
//! - Checksum offload ([`parse_with`], [`RxChecksum`]): where the NIC already verified the IPv4
//!   header checksum or the UDP checksum, [`CsumStatus::Good`] skips the software sum and
//!   [`CsumStatus::Bad`] drops with the same reason as a software failure; [`CsumStatus::Unknown`]
//!   (no offload, e.g. net_pcap) verifies in software. Length checks and the UDP zero-checksum
//!   rules always apply; the RoCEv2 ICRC is always verified in software.
//! - What is verified ([`Checks`]): [`parse`], [`parse_with`] and [`Checks::All`] verify every
//!   checksum above (an end host's checks). [`Checks::Router`] verifies what a router does
//!   (RFC 1812 section 5.2.2: the IPv4 header and its checksum, every length) and leaves the UDP
//!   checksum rules and the ICRC to [`verify_l4`], marking the parse
//!   [`Layers::L4_UNVERIFIED`]: the appliance forwards transit traffic without an L4 pass, as
//!   switches and routers do, and verifies only what it consumes.

use crate::stats::Reason;
use crate::wire::error::WireError;
use crate::wire::ethernet::{self, EtherType, EthernetAddress, EthernetFrame};
use crate::wire::{arp, bth, gradient, icrc, ipv4, ipv6, udp, vlan};
use core::ops::Range;

/// Most VLAN tags parsed (an 802.1ad S-tag and an 802.1Q C-tag, or two C-tags).
pub const MAX_VLAN_TAGS: usize = 2;

/// The set of layers found valid in a frame (a set of the constants below, in 32 bits: the
/// parser adds layers to it in memory across calls, and a 32-bit set is read back with a load
/// the width of its stores, which the CPU forwards from the store buffer; a 16-bit set was read
/// with a 32-bit load spanning it and its neighbour field, which it cannot).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Layers(u32);

impl Layers {
    /// Ethernet header.
    pub const ETH: Layers = Layers(1 << 0);
    /// First (outer) VLAN tag.
    pub const VLAN_OUTER: Layers = Layers(1 << 1);
    /// Second (inner) VLAN tag.
    pub const VLAN_INNER: Layers = Layers(1 << 2);
    /// IPv4 header (checksum verified).
    pub const IPV4: Layers = Layers(1 << 3);
    /// IPv6 header and extension headers.
    pub const IPV6: Layers = Layers(1 << 4);
    /// The IP datagram is a fragment: nothing above L3 was parsed.
    pub const IP_FRAGMENT: Layers = Layers(1 << 5);
    /// UDP header (length verified; checksum too unless [`Layers::L4_UNVERIFIED`]).
    pub const UDP: Layers = Layers(1 << 6);
    /// RoCEv2 BTH and its extension headers (ICRC verified unless [`Layers::L4_UNVERIFIED`]).
    pub const BTH: Layers = Layers(1 << 7);
    /// DETH (a UD opcode).
    pub const DETH: Layers = Layers(1 << 8);
    /// Gradient header.
    pub const GRADIENT: Layers = Layers(1 << 9);
    /// ARP for IPv4 over Ethernet.
    pub const ARP: Layers = Layers(1 << 10);
    /// A gradient carriage (UDP to the gradient port, or RoCEv2 UD SEND Only) whose payload is
    /// shorter than a gradient header: a malformed gradient packet when it is addressed to the
    /// appliance, anyone else's datagram otherwise (other UD services, such as connection
    /// management MADs, use SEND Only too).
    pub const GRADIENT_SHORT: Layers = Layers(1 << 11);
    /// Not a layer: a [`Checks::Router`] parse left the UDP checksum (and the ICRC, with
    /// [`Layers::BTH`]) unverified; [`verify_l4`] verifies them before the packet is consumed.
    pub const L4_UNVERIFIED: Layers = Layers(1 << 12);

    /// Every layer, in bit order.
    pub const ALL: [Layers; 12] = [
        Layers::ETH,
        Layers::VLAN_OUTER,
        Layers::VLAN_INNER,
        Layers::IPV4,
        Layers::IPV6,
        Layers::IP_FRAGMENT,
        Layers::UDP,
        Layers::BTH,
        Layers::DETH,
        Layers::GRADIENT,
        Layers::ARP,
        Layers::GRADIENT_SHORT,
    ];

    /// The empty set.
    pub const fn empty() -> Layers {
        Layers(0)
    }

    /// The raw bits.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// True when every layer of `other` is present.
    pub const fn contains(self, other: Layers) -> bool {
        self.0 & other.0 == other.0
    }

    /// The union of two sets.
    pub const fn union(self, other: Layers) -> Layers {
        Layers(self.0 | other.0)
    }

    /// Adds the layers of `other`.
    pub fn insert(&mut self, other: Layers) {
        self.0 |= other.0;
    }

    /// Clears the layers of `other`.
    #[inline]
    pub fn remove(&mut self, other: Layers) {
        self.0 &= !other.0;
    }
}

/// What [`parse`] found in a frame. Fields of layers not in `layers` are zero.
///
/// Offsets are bytes from the start of the frame. IP addresses are 16-byte arrays: an IPv4
/// address is in bytes 0..4 and the rest is zero ([`Parsed::ip_src`] gives the right slice).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Parsed {
    /// Which layers are present and valid.
    pub layers: Layers,

    /// Ethernet destination.
    pub eth_dst: EthernetAddress,
    /// Ethernet source.
    pub eth_src: EthernetAddress,
    /// The EtherType after the VLAN tags (the L3 protocol).
    pub ethertype: u16,
    /// TPID of the outer tag (0x88a8 or 0x8100), 0 without tags.
    pub vlan_outer_tpid: u16,
    /// VID of the outer tag.
    pub vid_outer: u16,
    /// PCP of the outer tag.
    pub pcp_outer: u8,
    /// VID of the inner tag.
    pub vid_inner: u16,
    /// PCP of the inner tag.
    pub pcp_inner: u8,

    /// IP source address (IPv4 in bytes 0..4).
    pub ip_src_bytes: [u8; 16],
    /// IP destination address (IPv4 in bytes 0..4).
    pub ip_dst_bytes: [u8; 16],
    /// DSCP (6 bits).
    pub dscp: u8,
    /// ECN (2 bits).
    pub ecn: u8,
    /// Upper-layer protocol: IPv4 protocol, or IPv6 next header after the extension headers.
    pub ip_proto: u8,
    /// IPv4 TTL or IPv6 hop limit.
    pub ttl: u8,
    /// IPv6: a Routing header has more segments left than addresses
    /// ([`ipv6::ExtensionChain::bad_segments_left`]): a drop if the packet is addressed to the
    /// appliance (RFC 8200 section 4.4), nothing for a transit packet.
    pub ipv6_bad_segments_left: bool,
    /// The header's destination is only the next hop of a source route: IPv4 with an
    /// unfinished Loose or Strict Source and Record Route option
    /// ([`ipv4::Ipv4Packet::unfinished_source_route`]), IPv6 with a Routing header with
    /// segments left ([`ipv6::ExtensionChain::segments_left`]). The appliance processes no
    /// source route: such a packet addressed to it is a drop (`source_routed`; RFC 8200 section
    /// 4.4, RFC 1812 section 5.2.4.1), never a contribution; a transit packet is forwarded as any
    /// other.
    pub source_routed: bool,
    /// IPv6: a Hop-by-Hop or Destination Options header holds an option the appliance does not
    /// know whose type says to discard the packet ([`ipv6::ExtensionChain::discard_option`]):
    /// a drop if the packet is addressed to the appliance (`ipv6_unrecognized_option`; RFC 8200
    /// section 4.2), nothing for a transit packet.
    pub ipv6_discard_option: bool,

    /// UDP source port.
    pub udp_src: u16,
    /// UDP destination port.
    pub udp_dst: u16,

    /// BTH opcode.
    pub bth_opcode: u8,
    /// BTH destination QP (24 bits).
    pub bth_dest_qp: u32,
    /// BTH PSN (24 bits).
    pub bth_psn: u32,
    /// BTH pad count (bytes, 0..=3).
    pub bth_pad: u8,
    /// DETH Q_Key.
    pub deth_qkey: u32,
    /// DETH source QP (24 bits).
    pub deth_src_qp: u32,

    /// Gradient header `collective_id`.
    pub grad_collective_id: u16,
    /// Gradient header `op_type`.
    pub grad_op: u8,

    /// Start of the L3 header: 14 + 4 per VLAN tag.
    pub l3_offset: u32,
    /// IP header length, IPv4 options or IPv6 extension headers included (bytes).
    pub ip_header_len: u32,
    /// End of the IP datagram (exclusive; Ethernet padding starts here).
    pub ip_end: u32,
    /// Start of the L4 header: `l3_offset + ip_header_len`.
    pub l4_offset: u32,
    /// UDP length field: header and payload (bytes).
    pub udp_len: u32,
    /// Start of the BTH.
    pub bth_offset: u32,
    /// Start of the gradient header.
    pub grad_offset: u32,
    /// Start of the gradient payload (lanes).
    pub grad_payload_offset: u32,
    /// Gradient payload bytes present: to the end of the UDP datagram, or for RoCEv2 to the
    /// pad. Not checked against the header's `data_length` (the aggregator's job).
    pub grad_payload_len: u32,
}

impl Parsed {
    /// True when the packet's destination, if it is the appliance, must refuse it: a source
    /// route not finished ([`Parsed::source_routed`]) or an IPv6 option that says discard
    /// ([`Parsed::ipv6_discard_option`]).
    #[inline(always)]
    pub fn refused_by_its_destination(&self) -> bool {
        self.source_routed || self.ipv6_discard_option
    }

    /// True when every layer of `l` is present.
    #[inline]
    pub fn has(&self, l: Layers) -> bool {
        self.layers.contains(l)
    }

    /// Number of VLAN tags parsed (0..=2).
    #[inline]
    pub fn vlan_tags(&self) -> usize {
        self.has(Layers::VLAN_OUTER) as usize + self.has(Layers::VLAN_INNER) as usize
    }

    /// Offset of VLAN tag `i` (0 outer, 1 inner): where its TPID is, 12 + 4 * i, if the frame
    /// has that tag. Popping a tag removes these 4 bytes; pushing one inserts 4 bytes at 12.
    #[inline]
    pub fn vlan_tag_offset(&self, i: usize) -> Option<usize> {
        (i < self.vlan_tags()).then_some(12 + vlan::HEADER_LEN * i)
    }

    /// The IP source address: 4 bytes for IPv4, 16 for IPv6, empty otherwise.
    #[inline]
    pub fn ip_src(&self) -> &[u8] {
        &self.ip_src_bytes[..self.ip_addr_len()]
    }

    /// The IP destination address: 4 bytes for IPv4, 16 for IPv6, empty otherwise.
    #[inline]
    pub fn ip_dst(&self) -> &[u8] {
        &self.ip_dst_bytes[..self.ip_addr_len()]
    }

    #[inline]
    fn ip_addr_len(&self) -> usize {
        if self.has(Layers::IPV4) {
            4
        } else if self.has(Layers::IPV6) {
            16
        } else {
            0
        }
    }

    /// The IP datagram within the frame (empty without IP).
    #[inline]
    pub fn ip_datagram(&self) -> Range<usize> {
        self.l3_offset as usize..self.ip_end as usize
    }

    /// The UDP payload within the frame (empty without UDP): the UDP length bounds it.
    #[inline]
    pub fn udp_payload(&self) -> Range<usize> {
        if !self.has(Layers::UDP) {
            return 0..0;
        }
        let s = self.l4_offset as usize + udp::HEADER_LEN;
        s..self.l4_offset as usize + self.udp_len as usize
    }

    /// The gradient payload (lanes) within the frame (empty without a gradient header).
    #[inline]
    pub fn grad_payload(&self) -> Range<usize> {
        let s = self.grad_payload_offset as usize;
        s..s + self.grad_payload_len as usize
    }

    /// Offset of the RoCEv2 ICRC (the last 4 bytes of the UDP datagram), if a BTH was parsed.
    #[inline]
    pub fn icrc_offset(&self) -> Option<usize> {
        self.has(Layers::BTH).then(|| (self.l4_offset + self.udp_len) as usize - icrc::ICRC_LEN)
    }
}

/// What the NIC found when it verified one checksum of a received frame (DPDK 22.11
/// `rte_mbuf_core.h`: `RTE_MBUF_F_RX_IP_CKSUM_*` and `RTE_MBUF_F_RX_L4_CKSUM_*` in
/// `mbuf->ol_flags`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum CsumStatus {
    /// Not verified (no offload, or a flag the parser does not trust): verify in software.
    #[default]
    Unknown,
    /// Verified good by the NIC: the software sum is skipped.
    Good,
    /// Verified bad by the NIC: dropped with the reason a software failure gives.
    Bad,
}

/// The NIC's rx checksum verdicts for a frame: the IPv4 header checksum and the L4 (UDP)
/// checksum. [`RxChecksum::UNKNOWN`] (the default) makes the parser verify both in software.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct RxChecksum {
    /// The IPv4 header checksum (RFC 791); ignored for IPv6, which has none.
    pub ip: CsumStatus,
    /// The UDP checksum (RFC 768, RFC 8200 section 8.1), pseudo-header included.
    pub l4: CsumStatus,
}

impl RxChecksum {
    /// Nothing verified by the NIC: every checksum is verified in software.
    pub const UNKNOWN: RxChecksum = RxChecksum { ip: CsumStatus::Unknown, l4: CsumStatus::Unknown };
}

/// Which checksums a parse verifies (module docs, "What is verified").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Checks {
    /// Every checksum: the IPv4 header's, the UDP checksum rules and the RoCEv2 ICRC (an end
    /// host's checks; the appliance's `[dataplane] verify_transit = true`).
    All,
    /// A router's (RFC 1812 section 5.2.2): the IPv4 header checksum and every length; the UDP
    /// checksum rules and the ICRC are left to [`verify_l4`] ([`Layers::L4_UNVERIFIED`]).
    #[default]
    Router,
}

/// Parses `frame` (an Ethernet frame without FCS) from Ethernet to the gradient header, verifying
/// every checksum in software: [`parse_with`] and [`RxChecksum::UNKNOWN`].
///
/// `udp_gradient_port` is the UDP destination port of the gradient protocol's UDP carriage
/// (`gradient_udp_port`, default [`gradient::DEFAULT_UDP_PORT`]). See the module docs for the
/// rules.
///
/// # Errors
/// A [`Reason`] for the first layer that is malformed or fails its checksum.
#[inline]
pub fn parse(frame: &[u8], udp_gradient_port: u16) -> Result<Parsed, Reason> {
    parse_with(frame, udp_gradient_port, RxChecksum::UNKNOWN)
}

/// [`parse`] with the NIC's rx checksum verdicts `rx` (from the mbuf's `ol_flags`): a
/// [`CsumStatus::Good`] checksum is not summed again, a [`CsumStatus::Bad`] one is
/// [`Reason::BadIpv4Checksum`] or [`Reason::BadUdpChecksum`] once the header it covers
/// has passed its length checks, as a software failure would be. A UDP checksum field of 0 keeps
/// its software meaning whatever the NIC says (none over IPv4; invalid over IPv6 except for
/// RoCEv2, spec section 1).
///
/// # Errors
/// A [`Reason`] for the first layer that is malformed or fails its checksum.
pub fn parse_with(frame: &[u8], udp_gradient_port: u16, rx: RxChecksum) -> Result<Parsed, Reason> {
    let mut p = Parsed::default();
    parse_into(frame, udp_gradient_port, rx, &mut p)?;
    Ok(p)
}

/// [`parse_with`] verifying only what `checks` says: [`Checks::Router`] leaves the UDP checksum
/// and the ICRC to [`verify_l4`].
///
/// # Errors
/// A [`Reason`] for the first layer that is malformed or fails a checksum it verifies.
pub fn parse_checked(frame: &[u8], udp_gradient_port: u16, rx: RxChecksum, checks: Checks) -> Result<Parsed, Reason> {
    let mut p = Parsed::default();
    parse_checks_into(frame, udp_gradient_port, rx, checks, &mut p)?;
    Ok(p)
}

/// [`parse_with`] writing into `p` instead of returning a `Parsed`: the hot path parses in
/// place (a per-worker or stack slot), so the ~130-byte result is never copied. `p` is reset
/// first; after an error its content is unspecified (a partial parse).
///
/// # Errors
/// A [`Reason`] for the first layer that is malformed or fails its checksum.
pub fn parse_into(frame: &[u8], udp_gradient_port: u16, rx: RxChecksum, p: &mut Parsed) -> Result<(), Reason> {
    parse_checks_into(frame, udp_gradient_port, rx, Checks::All, p)
}

/// [`parse_into`] verifying only what `checks` says (the datapath's parse).
///
/// # Errors
/// A [`Reason`] for the first layer that is malformed or fails a checksum it verifies.
#[inline]
pub fn parse_checks_into(
    frame: &[u8],
    udp_gradient_port: u16,
    rx: RxChecksum,
    checks: Checks,
    p: &mut Parsed,
) -> Result<(), Reason> {
    parse_frame(frame, frame.len(), udp_gradient_port, rx, checks, p)
}

/// [`parse_checks_into`] with a router's checks ([`Checks::Router`]) for a multi-segment frame of
/// `total_len` bytes whose first segment is `first`: every header is read from `first`, and
/// every length (IP total length, IPv6 payload length, UDP length, the BTH's pad and ICRC) is
/// judged against `total_len`, the whole frame, as for a contiguous frame of that length.
/// Offsets in `p` past the first segment (`ip_end`, the UDP datagram's end) are offsets in the
/// whole frame. The UDP checksum and the ICRC are left unverified ([`Layers::L4_UNVERIFIED`]).
///
/// # Errors
/// The reasons of [`parse_checks_into`], and [`Reason::SegmentedHeaders`] when a header the
/// parse reads (Ethernet to UDP, the BTH with its extension headers, an IPv6 extension header)
/// does not lie whole in `first`.
#[inline(never)]
pub fn parse_segmented_into(
    first: &[u8],
    total_len: usize,
    udp_gradient_port: u16,
    rx: RxChecksum,
    p: &mut Parsed,
) -> Result<(), Reason> {
    if total_len <= first.len() {
        return parse_checks_into(first, udp_gradient_port, rx, Checks::Router, p);
    }
    match parse_frame(first, total_len, udp_gradient_port, rx, Checks::Router, p) {
        // The Ethernet header or a VLAN tag not whole in the first segment.
        Err(Reason::Runt) => Err(Reason::SegmentedHeaders),
        r => r,
    }
}

/// The parse of a frame of `len` bytes of which `frame` holds the first (all of them, `len ==
/// frame.len()`, except for [`parse_segmented_into`], which never verifies L4 checksums).
#[inline(always)]
fn parse_frame(
    frame: &[u8],
    len: usize,
    udp_gradient_port: u16,
    rx: RxChecksum,
    checks: Checks,
    p: &mut Parsed,
) -> Result<(), Reason> {
    *p = Parsed::default();
    let eth = EthernetFrame::new_checked(frame).map_err(|_| Reason::Runt)?;
    p.layers.insert(Layers::ETH);
    p.eth_dst = eth.dst();
    p.eth_src = eth.src();

    // VLAN tags.
    let mut ty = eth.ethertype();
    let mut off = ethernet::HEADER_LEN;
    let mut tags = 0usize;
    while vlan::is_tpid(ty) {
        if tags == MAX_VLAN_TAGS {
            return Err(Reason::VlanDepth);
        }
        let tag = vlan::VlanTag::new_checked(&frame[off..]).map_err(|_| Reason::Runt)?;
        if tags == 0 {
            p.layers.insert(Layers::VLAN_OUTER);
            p.vlan_outer_tpid = ty;
            p.vid_outer = tag.vid();
            p.pcp_outer = tag.pcp();
        } else {
            p.layers.insert(Layers::VLAN_INNER);
            p.vid_inner = tag.vid();
            p.pcp_inner = tag.pcp();
        }
        ty = tag.ethertype();
        off += vlan::HEADER_LEN;
        tags += 1;
    }
    p.ethertype = ty;
    p.l3_offset = off as u32;

    match ty {
        EtherType::IPV4 => parse_ipv4(frame, len, off, udp_gradient_port, rx, checks, p)?,
        EtherType::IPV6 => parse_ipv6(frame, len, off, udp_gradient_port, rx.l4, checks, p)?,
        EtherType::ARP if arp::ArpPacket::new_checked(&frame[off..]).is_ok() => {
            p.layers.insert(Layers::ARP);
        }
        // An ARP packet not whole in the first segment of a chain.
        EtherType::ARP if len > frame.len() => return Err(Reason::SegmentedHeaders),
        _ => {}
    }
    Ok(())
}

/// IPv4 at `l3`, then UDP. Inlined into [`parse_checks_into`], where `checks` is then known
/// (IPv4 is the common case; a call here cost about 5% of the burst path's instructions).
#[inline(always)]
fn parse_ipv4(
    frame: &[u8],
    len: usize,
    l3: usize,
    port: u16,
    rx: RxChecksum,
    checks: Checks,
    p: &mut Parsed,
) -> Result<(), Reason> {
    let ip = if len == frame.len() {
        ipv4::Ipv4Packet::new_checked(&frame[l3..]).map_err(|_| Reason::MalformedIpv4)?
    } else {
        ipv4_in_first_segment(frame, len, l3)?
    };
    let ip_ok = match rx.ip {
        CsumStatus::Good => true,
        CsumStatus::Bad => false,
        CsumStatus::Unknown => ip.verify_checksum(),
    };
    if !ip_ok {
        return Err(Reason::BadIpv4Checksum);
    }
    p.layers.insert(Layers::IPV4);
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    p.ip_src_bytes[..4].copy_from_slice(&src);
    p.ip_dst_bytes[..4].copy_from_slice(&dst);
    p.dscp = ip.dscp();
    p.ecn = ip.ecn();
    p.ip_proto = ip.protocol();
    p.ttl = ip.ttl();
    let hl = ip.header_len();
    p.ip_header_len = hl as u32;
    p.l4_offset = (l3 + hl) as u32;
    let end = l3 + ip.total_len() as usize;
    p.ip_end = end as u32;
    // With options, a source route's final destination is the pseudo-header's.
    let mut csum_dst = dst;
    if hl > ipv4::MIN_HEADER_LEN {
        match ip.options_route() {
            Ok(Some(d)) => {
                p.source_routed = true;
                csum_dst = d;
            }
            Ok(None) => {}
            Err(_) => return Err(Reason::MalformedIpv4),
        }
    }
    if ip.is_fragment() {
        p.layers.insert(Layers::IP_FRAGMENT);
        return Ok(());
    }
    if ip.protocol() != udp::PROTOCOL {
        return Ok(());
    }
    let l4 = l3 + hl;
    let u = udp_at(frame, l4, end)?;
    if checks == Checks::Router {
        p.layers.insert(Layers::L4_UNVERIFIED);
    } else if !udp_ok_v4(&u, src, csum_dst, rx.l4) {
        return Err(Reason::BadUdpChecksum);
    }
    parse_udp(frame, &u, port, p)
}

/// The UDP checksum rule over IPv4 (RFC 768): 0 means none, RoCEv2 or not; any other value is
/// verified, or taken from the NIC's verdict `l4`.
#[inline(always)]
fn udp_ok_v4(u: &udp::UdpPacket<&[u8]>, src: [u8; 4], dst: [u8; 4], l4: CsumStatus) -> bool {
    u.checksum() == 0
        || match l4 {
            CsumStatus::Good => true,
            CsumStatus::Bad => false,
            CsumStatus::Unknown => u.verify_checksum_v4(src, dst),
        }
}

/// The UDP checksum rule over IPv6 (RFC 8200 section 8.1, spec section 1): mandatory, except
/// that RoCEv2 may leave it 0; verified against the final destination `dst`, or taken from the
/// NIC's verdict `l4`.
#[inline]
fn udp_ok_v6(u: &udp::UdpPacket<&[u8]>, src: &[u8; 16], dst: &[u8; 16], l4: CsumStatus) -> bool {
    if u.checksum() == 0 {
        return u.dst_port() == bth::ROCEV2_UDP_PORT;
    }
    match l4 {
        CsumStatus::Good => true,
        CsumStatus::Bad => false,
        CsumStatus::Unknown => u.verify_checksum_v6(src, dst),
    }
}

/// IPv6 at `l3`, its extension headers, then UDP (`l4`: the NIC's UDP checksum verdict).
#[allow(clippy::too_many_arguments)]
fn parse_ipv6(
    frame: &[u8],
    len: usize,
    l3: usize,
    port: u16,
    l4_rx: CsumStatus,
    checks: Checks,
    p: &mut Parsed,
) -> Result<(), Reason> {
    let ip = if len == frame.len() {
        ipv6::Ipv6Packet::new_checked(&frame[l3..]).map_err(|_| Reason::MalformedIpv6)?
    } else {
        ipv6_in_first_segment(frame, len, l3)?
    };
    // The walk reads only the bytes present: in a first segment that ends before the datagram,
    // a chain that does not end in it cannot be judged.
    let chain = ip.walk_extensions().map_err(|e| match e {
        // Past the first segment, not past the payload: whole, it may be valid.
        WireError::Truncated if len != frame.len() => Reason::SegmentedHeaders,
        _ => Reason::MalformedIpv6,
    })?;
    p.layers.insert(Layers::IPV6);
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    p.ip_src_bytes = src;
    p.ip_dst_bytes = dst;
    p.dscp = ip.dscp();
    p.ecn = ip.ecn();
    p.ip_proto = chain.upper_protocol;
    p.ttl = ip.hop_limit();
    p.ipv6_bad_segments_left = chain.bad_segments_left;
    p.source_routed = chain.segments_left;
    p.ipv6_discard_option = chain.discard_option;
    p.ip_header_len = chain.header_len as u32;
    let l4 = l3 + chain.header_len;
    p.l4_offset = l4 as u32;
    let end = l3 + ipv6::HEADER_LEN + ip.payload_len() as usize;
    p.ip_end = end as u32;
    if chain.is_fragment() {
        p.layers.insert(Layers::IP_FRAGMENT);
        return Ok(());
    }
    if chain.upper_protocol != udp::PROTOCOL {
        return Ok(());
    }
    let u = udp_at(frame, l4, end)?;
    if checks == Checks::Router {
        p.layers.insert(Layers::L4_UNVERIFIED);
    } else if !udp_ok_v6(&u, &src, &ip.checksum_dst_addr(&chain), l4_rx) {
        // The pseudo-header holds the final destination (RFC 8200 section 8.1).
        return Err(Reason::BadUdpChecksum);
    }
    parse_udp(frame, &u, port, p)
}

/// The IPv4 header at `l3` of a frame of `len` bytes whose first segment `frame` is shorter
/// ([`parse_segmented_into`]): the checks of [`ipv4::Ipv4Packet::check_len`], the total length
/// judged against the whole frame and the header required in the first segment.
#[cold]
fn ipv4_in_first_segment(frame: &[u8], len: usize, l3: usize) -> Result<ipv4::Ipv4Packet<&[u8]>, Reason> {
    let (present, whole) = (frame.len() - l3, len - l3);
    if whole < ipv4::MIN_HEADER_LEN {
        return Err(Reason::MalformedIpv4);
    }
    if present < ipv4::MIN_HEADER_LEN {
        return Err(Reason::SegmentedHeaders);
    }
    let ip = ipv4::Ipv4Packet::new_unchecked(&frame[l3..]);
    let hl = ip.header_len();
    if ip.version() != 4 || hl < ipv4::MIN_HEADER_LEN || hl > whole {
        return Err(Reason::MalformedIpv4);
    }
    if hl > present {
        return Err(Reason::SegmentedHeaders);
    }
    let tl = ip.total_len() as usize;
    if tl < hl || tl > whole {
        return Err(Reason::MalformedIpv4);
    }
    Ok(ip)
}

/// The IPv6 fixed header at `l3` of a frame of `len` bytes whose first segment `frame` is
/// shorter: [`ipv6::Ipv6Packet::check_len`] with the payload length judged against the whole
/// frame and the fixed header required in the first segment.
#[cold]
fn ipv6_in_first_segment(frame: &[u8], len: usize, l3: usize) -> Result<ipv6::Ipv6Packet<&[u8]>, Reason> {
    let (present, whole) = (frame.len() - l3, len - l3);
    if whole < ipv6::HEADER_LEN {
        return Err(Reason::MalformedIpv6);
    }
    if present < ipv6::HEADER_LEN {
        return Err(Reason::SegmentedHeaders);
    }
    let ip = ipv6::Ipv6Packet::new_unchecked(&frame[l3..]);
    if ip.version() != 6 || ipv6::HEADER_LEN + ip.payload_len() as usize > whole {
        return Err(Reason::MalformedIpv6);
    }
    Ok(ip)
}

/// The UDP header at `l4` of an IP datagram ending at `end`: [`udp::UdpPacket::new_checked`]
/// over the datagram when it lies in `frame`; otherwise (the first segment of a longer frame)
/// the header must lie in `frame` and its length is judged against `end`.
#[inline(always)]
fn udp_at(frame: &[u8], l4: usize, end: usize) -> Result<udp::UdpPacket<&[u8]>, Reason> {
    if end <= frame.len() {
        return udp::UdpPacket::new_checked(&frame[l4..end]).map_err(|_| Reason::MalformedUdp);
    }
    udp_in_first_segment(frame, l4, end)
}

/// [`udp_at`] for a datagram that runs past the first segment `frame`.
#[cold]
fn udp_in_first_segment(frame: &[u8], l4: usize, end: usize) -> Result<udp::UdpPacket<&[u8]>, Reason> {
    if end - l4 < udp::HEADER_LEN {
        return Err(Reason::MalformedUdp);
    }
    if l4 + udp::HEADER_LEN > frame.len() {
        return Err(Reason::SegmentedHeaders);
    }
    let u = udp::UdpPacket::new_unchecked(&frame[l4..l4 + udp::HEADER_LEN]);
    let ulen = u.len() as usize;
    if ulen < udp::HEADER_LEN || ulen > end - l4 {
        return Err(Reason::MalformedUdp);
    }
    Ok(u)
}

/// Verifies what a [`Checks::Router`] parse `p` of `frame` left ([`Layers::L4_UNVERIFIED`]):
/// the UDP checksum rules (with the NIC's verdict `rx.l4`), then a RoCEv2 ICRC, exactly as a
/// [`Checks::All`] parse would have. Nothing to do (`Ok`) for a parse without the mark.
///
/// # Errors
/// [`Reason::BadUdpChecksum`] or [`Reason::BadIcrc`].
#[inline]
pub fn verify_l4(frame: &[u8], p: &Parsed, rx: RxChecksum) -> Result<(), Reason> {
    if !p.has(Layers::L4_UNVERIFIED) {
        return Ok(());
    }
    let (l3, l4, end) = (p.l3_offset as usize, p.l4_offset as usize, p.ip_end as usize);
    let u = udp::UdpPacket::new_unchecked(&frame[l4..end]);
    let ok = if p.has(Layers::IPV4) {
        let (mut src, mut dst) = ([0u8; 4], [0u8; 4]);
        src.copy_from_slice(&p.ip_src_bytes[..4]);
        dst.copy_from_slice(&p.ip_dst_bytes[..4]);
        if p.source_routed {
            // The route's final destination, read again (the parse found it).
            let ip = ipv4::Ipv4Packet::new_unchecked(&frame[l3..]);
            dst = ip.unfinished_source_route().unwrap_or(dst);
        }
        udp_ok_v4(&u, src, dst, rx.l4)
    } else {
        // The final destination of a Routing header, walked again (the parse succeeded, so
        // the walk does).
        let ip = ipv6::Ipv6Packet::new_unchecked(&frame[l3..]);
        let dst = match ip.walk_extensions() {
            Ok(chain) => ip.checksum_dst_addr(&chain),
            Err(_) => return Err(Reason::MalformedIpv6),
        };
        udp_ok_v6(&u, &p.ip_src_bytes, &dst, rx.l4)
    };
    if !ok {
        return Err(Reason::BadUdpChecksum);
    }
    if p.has(Layers::BTH) {
        let udp_end = l4 + p.udp_len as usize;
        if !matches!(icrc::verify(&frame[l3..udp_end], l4 - l3), Ok(true)) {
            return Err(Reason::BadIcrc);
        }
    }
    Ok(())
}

/// The UDP header is valid: record it, then RoCEv2 or the gradient header.
#[inline(always)]
fn parse_udp(frame: &[u8], u: &udp::UdpPacket<&[u8]>, port: u16, p: &mut Parsed) -> Result<(), Reason> {
    p.layers.insert(Layers::UDP);
    p.udp_src = u.src_port();
    p.udp_dst = u.dst_port();
    p.udp_len = u.len() as u32;
    let l4 = p.l4_offset as usize;
    let udp_end = l4 + u.len() as usize;
    let payload = l4 + udp::HEADER_LEN;
    if u.dst_port() == bth::ROCEV2_UDP_PORT {
        parse_rocev2(frame, payload, udp_end, p)
    } else if u.dst_port() == port {
        parse_gradient(frame, payload, udp_end, p)
    } else {
        Ok(())
    }
}

/// A BTH at `start`, in a UDP datagram ending at `udp_end` (ICRC included).
///
/// An opcode whose extension headers the parser does not know (the RD transport, reserved and
/// manufacturer-specific opcodes) is still RoCEv2: its BTH is read and its ICRC, which covers
/// whatever follows the BTH, verified, so that the tables can forward it; nothing after the
/// BTH is parsed. The transport version (TVer) is recorded, not judged: a forwarding hop does
/// not own the transport, and the gradient carriage does not depend on it.
fn parse_rocev2(frame: &[u8], start: usize, udp_end: usize, p: &mut Parsed) -> Result<(), Reason> {
    // The datagram's bytes present: all of them but in the first segment of a longer frame.
    let seg = &frame[start..udp_end.min(frame.len())];
    let whole = udp_end - start;
    let b = bth::BthPacket::new_checked(seg).map_err(|_| {
        if whole > seg.len() && whole >= bth::HEADER_LEN {
            Reason::SegmentedHeaders
        } else {
            Reason::MalformedBth
        }
    })?;
    let ext = bth::extensions(b.opcode()).unwrap_or(bth::Extensions::NONE);
    let pad = b.pad_count() as usize;
    let headers_end = bth::HEADER_LEN + ext.len();
    if headers_end + pad + icrc::ICRC_LEN > whole {
        return Err(Reason::MalformedBth);
    }
    if headers_end > seg.len() {
        return Err(Reason::SegmentedHeaders);
    }
    let l3 = p.l3_offset as usize;
    let l4 = p.l4_offset as usize;
    // A router parse leaves the ICRC with the UDP checksum to verify_l4.
    if !p.has(Layers::L4_UNVERIFIED) && !matches!(icrc::verify(&frame[l3..udp_end], l4 - l3), Ok(true)) {
        return Err(Reason::BadIcrc);
    }
    p.layers.insert(Layers::BTH);
    p.bth_offset = start as u32;
    p.bth_opcode = b.opcode();
    p.bth_dest_qp = b.dest_qp();
    p.bth_psn = b.psn();
    p.bth_pad = pad as u8;
    if let Some(o) = ext.offset_of(bth::Extensions::DETH) {
        let at = bth::HEADER_LEN + o;
        let d = bth::DethHeader::new_checked(&seg[at..]).map_err(|_| Reason::MalformedBth)?;
        p.layers.insert(Layers::DETH);
        p.deth_qkey = d.qkey();
        p.deth_src_qp = d.src_qp();
    }
    if b.opcode() == bth::Opcode::UD_SEND_ONLY {
        let payload_end = udp_end - icrc::ICRC_LEN - pad;
        parse_gradient(frame, start + headers_end, payload_end, p)?;
    }
    Ok(())
}

/// A gradient header at `start`, its payload running to `end`. Fewer bytes than a header is
/// not an error here ([`Layers::GRADIENT_SHORT`]): only the appliance's own gradient packets
/// must be whole, and which are its own is the aggregator's call. A whole header that the
/// first segment of a chain (`frame`) cuts is [`Reason::SegmentedHeaders`], as any other
/// header there: the packet must not read as one without a gradient header (its fields would
/// match as 0 in the tables).
fn parse_gradient(frame: &[u8], start: usize, end: usize, p: &mut Parsed) -> Result<(), Reason> {
    if end >= start + gradient::HEADER_LEN && frame.len() < start + gradient::HEADER_LEN {
        return Err(Reason::SegmentedHeaders);
    }
    // In the first segment of a longer frame, the header is read from the bytes present.
    let Some(g) =
        frame.get(start..end.min(frame.len())).and_then(|seg| gradient::GradientHeader::new_checked(seg).ok())
    else {
        p.layers.insert(Layers::GRADIENT_SHORT);
        return Ok(());
    };
    p.layers.insert(Layers::GRADIENT);
    p.grad_offset = start as u32;
    p.grad_collective_id = g.collective_id();
    p.grad_op = g.op_type();
    p.grad_payload_offset = (start + gradient::HEADER_LEN) as u32;
    p.grad_payload_len = (end - start - gradient::HEADER_LEN) as u32;
    Ok(())
}

#[cfg(test)]
mod tests;
