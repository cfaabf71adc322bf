//! Counters: per port, per drop reason, per table entry and meter colour ([`Counter`]). Each worker owns its own (no sharing on
//! the fast path); the appliance adds them up at the end.

use core::fmt;
use serde::Serialize;

/// Packet and byte counters (P4 counter, `packets_and_bytes`).
///
/// Aligned to its 16 bytes, so that it never straddles two cache lines wherever it is stored:
/// a split counter's load cannot be
/// forwarded from the previous packet's store to it, which stalls every packet that counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[repr(align(16))]
pub struct Counter {
    /// Packets counted.
    pub packets: u64,
    /// Their bytes (frame length without FCS).
    pub bytes: u64,
}

impl Counter {
    /// Counts one packet of `bytes` bytes.
    #[inline(always)]
    pub fn hit(&mut self, bytes: usize) {
        self.packets += 1;
        self.bytes += bytes as u64;
    }

    /// Adds another counter (merging workers' counters).
    pub fn add(&mut self, o: &Counter) {
        self.packets += o.packets;
        self.bytes += o.bytes;
    }
}

/// Why the appliance dropped a packet. Every drop is counted under exactly one reason.
///
/// The first nine are the parser's (what [`crate::parse::parse`] returns); the rest come from
/// the pipeline, the actions and transmission. The discriminants are dense from 0 so that
/// counters are an array indexed by [`Reason::index`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Reason {
    /// The frame is shorter than its Ethernet header: 14 bytes, plus 4 per VLAN tag it announces.
    Runt,
    /// More VLAN tags than [`crate::parse::MAX_VLAN_TAGS`] (parser), or a push onto two tags:
    /// unsupported.
    VlanDepth,
    /// An IPv4 header that does not fit its own length fields, or version not 4.
    MalformedIpv4,
    /// An IPv4 header whose checksum does not verify.
    BadIpv4Checksum,
    /// An IPv6 header or extension-header chain that does not fit, or version not 6.
    MalformedIpv6,
    /// A UDP header or length that does not fit the IP payload.
    MalformedUdp,
    /// A UDP checksum that does not verify, or 0 over IPv6 outside RoCEv2.
    BadUdpChecksum,
    /// A BTH whose headers (as far as its opcode's are known), pad and ICRC are longer than the
    /// UDP payload, or a DETH that does not fit.
    MalformedBth,
    /// A RoCEv2 ICRC that does not verify.
    BadIcrc,
    /// A gradient carriage addressed to the appliance (UDP to the gradient port, or RoCEv2 UD
    /// SEND Only to its QPN) too short for the 20-byte gradient header (spec section 2). Counted
    /// by the aggregator; no NAK (there is no header to answer).
    MalformedGradient,
    /// A multi-segment frame (larger than the mempool's data room, or split by the NIC's
    /// scatter-gather) that the appliance would have to read whole: one it consumes (a
    /// gradient contribution, an ARP or neighbour discovery packet it answers), or any frame
    /// when `[dataplane] verify_transit = true` asks for its UDP checksum and ICRC (verified
    /// over contiguous bytes only). Segmented transit frames are forwarded.
    MultiSegment,
    /// A multi-segment frame whose headers (Ethernet to UDP, and a RoCEv2 BTH with its
    /// extension headers) do not all lie in its first segment, where the packet core reads and
    /// rewrites them.
    SegmentedHeaders,
    /// A table's default action dropped it (a miss).
    TableMiss,
    /// An entry's `drop` action.
    ExplicitDrop,
    /// `drop` among the actions `police` runs for a colour (by default, red).
    Policed,
    /// No action chose an egress port.
    NoEgress,
    /// TTL or hop limit expired in `dec_ttl`.
    TtlExpired,
    /// No mbuf for a copy (flood, multicast, replication) or no headroom for a push.
    NoMbuf,
    /// The tx queue stayed full: the packet could not be sent.
    TxFull,
    /// The ring to the worker owning the packet's collective was full.
    HandOffFull,
    /// A gradient packet handed to the worker holding its chunk found, when that worker took
    /// it from its ring, that the chunk had moved: a runtime change of a sharded collective's
    /// `chunk_elements` that the two workers had not both switched to yet. Dropped, never
    /// handed on again (the sender's retransmission finds the new owner).
    HandOffMoved,
    /// An ARP request for the appliance's address whose sender hardware address is a broadcast
    /// or multicast address: never answered (the reply would go to a group).
    ArpSenderMulticast,
    /// An ARP request for the appliance's address whose sender hardware address is not the
    /// frame's Ethernet source.
    ArpSenderMismatch,
    /// A Neighbor Solicitation for the appliance with a hop limit other than 255 (RFC 4861
    /// section 7.1.1: it crossed a router).
    NdBadHopLimit,
    /// A Neighbor Solicitation for the appliance shorter than 24 bytes (RFC 4861 section 7.1.1).
    NdTooShort,
    /// A Neighbor Solicitation for the appliance with an ICMP code other than 0.
    NdBadCode,
    /// A Neighbor Solicitation for the appliance whose ICMPv6 checksum does not verify.
    NdBadChecksum,
    /// A Neighbor Solicitation for the appliance whose target is a multicast address.
    NdMulticastTarget,
    /// A Neighbor Solicitation for the appliance with an option of length zero, or one that runs
    /// past the message.
    NdBadOption,
    /// A Neighbor Solicitation for the appliance from one of the appliance's own addresses.
    NdOwnSource,
    /// A Neighbor Solicitation for the appliance from the unspecified address whose destination
    /// is not a solicited-node multicast address, or that carries a source link-layer address
    /// option (RFC 4861 section 7.1.1).
    NdBadUnspecifiedSource,
    /// A Neighbor Solicitation for the appliance whose IPv6 source is a multicast address (RFC
    /// 4291 section 2.7: never a source) or the loopback address `::1` (RFC 4291 section 2.5.3:
    /// never sent on a link): never answered (the advertisement would go to that address).
    NdBadSource,
    /// A Neighbor Solicitation for the appliance's address whose Ethernet source, or the address
    /// in its source link-layer address option (where the advertisement goes, RFC 4861 sections
    /// 7.2.3 and 7.2.4), is a broadcast or multicast address: never answered (a reply is never
    /// sent to a group), as [`Reason::ArpSenderMulticast`] for ARP.
    NdSenderMulticast,
    /// An IPv6 packet for the appliance whose Routing header has more segments left than it
    /// holds addresses (RFC 8200 section 4.4), or segments left on a Routing type the appliance
    /// does not know (which RFC 8200 section 4.4 also discards).
    Ipv6BadSegmentsLeft,
    /// A packet for the appliance whose destination is only the next hop of a source route:
    /// an unfinished IPv4 Loose or Strict Source and Record Route (RFC 791 section 3.1), an
    /// IPv6 Routing header with segments left. The appliance processes no source route, and
    /// the upper layer is not its own until the route ends (RFC 8200 section 4.4, RFC 1812
    /// section 5.2.4.1: a node that does not forward source-routed datagrams discards them).
    SourceRouted,
    /// An IPv6 packet for the appliance with a Hop-by-Hop or Destination Options option it does
    /// not know whose type says to discard the packet (RFC 8200 section 4.2: high-order bits
    /// 01, 10 or 11), or options running past their header.
    Ipv6UnrecognizedOption,
    /// A gradient packet with the RESULT or NAK flag on input (spec rule 5; no NAK).
    GradFlags,
    /// Gradient: unknown collective (NAK reason 1).
    GradUnknownCollective,
    /// Gradient: version other than 1 (NAK reason 2).
    GradBadVersion,
    /// Gradient: op, dtype or carriage other than the collective's (NAK reason 3).
    GradMismatch,
    /// Gradient: rank >= num_workers (NAK reason 4).
    GradBadRank,
    /// Gradient: the source is not the rank's member: anti-spoofing (NAK reason 5).
    GradNotMember,
    /// Gradient: bad data_length (NAK reason 6).
    GradBadLength,
    /// Gradient: bad tensor_offset (NAK reason 6).
    GradBadOffset,
    /// Gradient: stale or premature round (NAK reason 7).
    GradStaleRound,
    /// Gradient: a contribution already folded (rule 1).
    GradDuplicate,
    /// A gradient packet addressed to the appliance that the pipeline neither aggregated (no
    /// `aggregate` action on its way) nor sent anywhere, in a config whose tables use
    /// `aggregate`.
    GradNotAggregated,
    /// The `aggregate` action on a packet that is not a gradient packet addressed to the
    /// appliance (or in a worker without an aggregator).
    AggregateNotGradient,
    /// An egress scheduler's class queue was full (its byte or packet capacity): tail drop.
    TailDrop,
    /// An egress scheduler's RED selected a Not-ECT (or non-IP) packet (RFC 3168 6.1.1.1).
    RedDrop,
    /// Longer than an egress scheduler's largest frame.
    EgressOversize,
    /// `set_class` chose a class the egress port's scheduler does not have.
    UnknownClass,
    /// The ring to the worker that owns a shaped port's scheduler was full (`[port.qos]` with
    /// several workers: the other workers reach the owner's scheduler over rings).
    QosRingFull,
}

impl Reason {
    /// Every reason, in counter order.
    pub const ALL: [Reason; 53] = [
        Reason::Runt,
        Reason::VlanDepth,
        Reason::MalformedIpv4,
        Reason::BadIpv4Checksum,
        Reason::MalformedIpv6,
        Reason::MalformedUdp,
        Reason::BadUdpChecksum,
        Reason::MalformedBth,
        Reason::BadIcrc,
        Reason::MalformedGradient,
        Reason::MultiSegment,
        Reason::SegmentedHeaders,
        Reason::TableMiss,
        Reason::ExplicitDrop,
        Reason::Policed,
        Reason::NoEgress,
        Reason::TtlExpired,
        Reason::NoMbuf,
        Reason::TxFull,
        Reason::HandOffFull,
        Reason::HandOffMoved,
        Reason::ArpSenderMulticast,
        Reason::ArpSenderMismatch,
        Reason::NdBadHopLimit,
        Reason::NdTooShort,
        Reason::NdBadCode,
        Reason::NdBadChecksum,
        Reason::NdMulticastTarget,
        Reason::NdBadOption,
        Reason::NdOwnSource,
        Reason::NdBadUnspecifiedSource,
        Reason::NdBadSource,
        Reason::NdSenderMulticast,
        Reason::Ipv6BadSegmentsLeft,
        Reason::SourceRouted,
        Reason::Ipv6UnrecognizedOption,
        Reason::GradFlags,
        Reason::GradUnknownCollective,
        Reason::GradBadVersion,
        Reason::GradMismatch,
        Reason::GradBadRank,
        Reason::GradNotMember,
        Reason::GradBadLength,
        Reason::GradBadOffset,
        Reason::GradStaleRound,
        Reason::GradDuplicate,
        Reason::GradNotAggregated,
        Reason::AggregateNotGradient,
        Reason::TailDrop,
        Reason::RedDrop,
        Reason::EgressOversize,
        Reason::UnknownClass,
        Reason::QosRingFull,
    ];
    /// Number of reasons.
    pub const COUNT: usize = Self::ALL.len();

    /// The reason's name in stats, snake_case.
    pub fn name(self) -> &'static str {
        match self {
            Reason::Runt => "runt",
            Reason::VlanDepth => "vlan_depth",
            Reason::MalformedIpv4 => "malformed_ipv4",
            Reason::BadIpv4Checksum => "bad_ipv4_checksum",
            Reason::MalformedIpv6 => "malformed_ipv6",
            Reason::MalformedUdp => "malformed_udp",
            Reason::BadUdpChecksum => "bad_udp_checksum",
            Reason::MalformedBth => "malformed_bth",
            Reason::BadIcrc => "bad_icrc",
            Reason::MalformedGradient => "malformed_gradient",
            Reason::MultiSegment => "multi_segment",
            Reason::SegmentedHeaders => "segmented_headers",
            Reason::TableMiss => "table_miss",
            Reason::ExplicitDrop => "explicit_drop",
            Reason::Policed => "policed",
            Reason::NoEgress => "no_egress",
            Reason::TtlExpired => "ttl_expired",
            Reason::NoMbuf => "no_mbuf",
            Reason::TxFull => "tx_full",
            Reason::HandOffFull => "hand_off_full",
            Reason::HandOffMoved => "hand_off_moved",
            Reason::ArpSenderMulticast => "arp_sender_multicast",
            Reason::ArpSenderMismatch => "arp_sender_mismatch",
            Reason::NdBadHopLimit => "nd_bad_hop_limit",
            Reason::NdTooShort => "nd_too_short",
            Reason::NdBadCode => "nd_bad_code",
            Reason::NdBadChecksum => "nd_bad_checksum",
            Reason::NdMulticastTarget => "nd_multicast_target",
            Reason::NdBadOption => "nd_bad_option",
            Reason::NdOwnSource => "nd_own_source",
            Reason::NdBadUnspecifiedSource => "nd_bad_unspecified_source",
            Reason::NdBadSource => "nd_bad_source",
            Reason::NdSenderMulticast => "nd_sender_multicast",
            Reason::Ipv6BadSegmentsLeft => "ipv6_bad_segments_left",
            Reason::SourceRouted => "source_routed",
            Reason::Ipv6UnrecognizedOption => "ipv6_unrecognized_option",
            Reason::GradFlags => "grad_result_or_nak_input",
            Reason::GradUnknownCollective => "grad_unknown_collective",
            Reason::GradBadVersion => "grad_bad_version",
            Reason::GradMismatch => "grad_mismatch",
            Reason::GradBadRank => "grad_bad_rank",
            Reason::GradNotMember => "grad_not_member",
            Reason::GradBadLength => "grad_bad_length",
            Reason::GradBadOffset => "grad_bad_offset",
            Reason::GradStaleRound => "grad_stale_round",
            Reason::GradDuplicate => "grad_duplicate",
            Reason::GradNotAggregated => "grad_not_aggregated",
            Reason::AggregateNotGradient => "aggregate_not_gradient",
            Reason::TailDrop => "tail_drop",
            Reason::RedDrop => "red_drop",
            Reason::EgressOversize => "egress_oversize",
            Reason::UnknownClass => "unknown_class",
            Reason::QosRingFull => "qos_ring_full",
        }
    }

    /// Index of this reason in [`Reason::ALL`] and in [`Counters::drops`] (its discriminant).
    #[inline(always)]
    pub fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Packet and byte counts of one port as seen by the workers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PortCounters {
    /// Packets received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Packets handed to the port's tx queues.
    pub tx_packets: u64,
    /// Bytes handed to the port's tx queues.
    pub tx_bytes: u64,
}

impl PortCounters {
    /// Adds `o`.
    pub fn add(&mut self, o: &PortCounters) {
        add_fields!(self, o; rx_packets, rx_bytes, tx_packets, tx_bytes);
    }
}

/// One worker's counters (or the sum over workers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counters {
    /// Per port, by port index.
    pub ports: Vec<PortCounters>,
    /// Drops, indexed by `Reason as usize`.
    pub drops: [u64; Reason::COUNT],
    /// ARP replies and neighbour advertisements sent for the appliance's own addresses.
    pub neighbor_replies: u64,
    /// Address conflicts seen: ARP packets from another MAC whose sender IPv4 address is the
    /// appliance's, ARP probes and duplicate address detection solicitations for the
    /// appliance's addresses (RFC 5227 section 2.1.1, RFC 4862 section 5.4.3).
    pub address_conflicts: u64,
}

impl Counters {
    /// Zeroed counters for `ports` ports.
    pub fn new(ports: u16) -> Self {
        Counters {
            ports: vec![PortCounters::default(); ports as usize],
            drops: [0; Reason::COUNT],
            neighbor_replies: 0,
            address_conflicts: 0,
        }
    }

    /// Counts a received packet of `len` bytes on `port`.
    #[inline(always)]
    pub fn rx(&mut self, port: u16, len: usize) {
        if let Some(p) = self.ports.get_mut(port as usize) {
            p.rx_packets += 1;
            p.rx_bytes += len as u64;
        }
    }

    /// Counts a packet of `len` bytes handed to `port`: its tx queue, or its egress scheduler
    /// when it has one (whose refusals are counted as drops, `tail_drop` and `red_drop`).
    #[inline(always)]
    pub fn tx(&mut self, port: u16, len: usize) {
        if let Some(p) = self.ports.get_mut(port as usize) {
            p.tx_packets += 1;
            p.tx_bytes += len as u64;
        }
    }

    /// Counts a drop.
    #[inline(always)]
    pub fn drop(&mut self, r: Reason) {
        self.drops[r as usize] += 1;
    }

    /// Counts `n` drops.
    #[inline(always)]
    pub fn drop_n(&mut self, r: Reason, n: u64) {
        self.drops[r as usize] += n;
    }

    /// Drops counted under `r`.
    pub fn dropped(&self, r: Reason) -> u64 {
        self.drops[r as usize]
    }

    /// All drops.
    pub fn total_drops(&self) -> u64 {
        self.drops.iter().sum()
    }

    /// Adds `o`.
    pub fn add(&mut self, o: &Counters) {
        if self.ports.len() < o.ports.len() {
            self.ports.resize(o.ports.len(), PortCounters::default());
        }
        for (a, b) in self.ports.iter_mut().zip(&o.ports) {
            a.add(b);
        }
        for (a, b) in self.drops.iter_mut().zip(&o.drops) {
            *a += b;
        }
        add_fields!(self, o; neighbor_replies, address_conflicts);
    }

    /// Drops by reason name, only the non-zero ones.
    pub fn drops_by_name(&self) -> Vec<(&'static str, u64)> {
        Reason::ALL.iter().map(|r| (r.name(), self.dropped(*r))).filter(|(_, n)| *n > 0).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parser_reasons_keep_their_names() {
        let parser = [
            (Reason::Runt, "runt"),
            (Reason::VlanDepth, "vlan_depth"),
            (Reason::MalformedIpv4, "malformed_ipv4"),
            (Reason::BadIpv4Checksum, "bad_ipv4_checksum"),
            (Reason::MalformedIpv6, "malformed_ipv6"),
            (Reason::MalformedUdp, "malformed_udp"),
            (Reason::BadUdpChecksum, "bad_udp_checksum"),
            (Reason::MalformedBth, "malformed_bth"),
            (Reason::BadIcrc, "bad_icrc"),
        ];
        for (i, (r, name)) in parser.into_iter().enumerate() {
            assert_eq!(r.name(), name);
            assert_eq!(r.to_string(), name);
            assert_eq!(r.index(), i, "the parser's reasons come first");
        }
        for (i, r) in Reason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i);
            assert!(r.name().chars().all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit()), "{r:?}");
        }
        let mut names: Vec<_> = Reason::ALL.iter().map(|r| r.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Reason::COUNT, "reason names are distinct");
    }
}
