//! Fields a table key can use, named as P4 programs name them, and their extraction from a
//! parsed packet.
//!
//! A field of a header the packet does not have reads as zeros; match on the header's validity
//! bit (`ipv4.valid`, ...) to tell the two apart, as P4 programs use `isValid()`.

use crate::parse::{Layers, Parsed};

/// How a field's values are written in configs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    /// An unsigned integer (decimal, or hex with `0x`).
    Int,
    /// A MAC address.
    Mac,
    /// An IPv4 address.
    Ipv4,
    /// An IPv6 address.
    Ipv6,
}

macro_rules! fields {
    ($( $(#[$doc:meta])* $var:ident = $name:literal, $width:expr, $kind:ident; )*) => {
        /// A header field usable in a table key.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Field { $( $(#[$doc])* $var, )* }

        impl Field {
            /// Every field.
            pub const ALL: &'static [Field] = &[ $( Field::$var, )* ];

            /// The field's name in configs, like `ipv4.dst`.
            pub fn name(self) -> &'static str {
                match self { $( Field::$var => $name, )* }
            }

            /// Width in the key (bytes).
            pub fn width(self) -> usize {
                match self { $( Field::$var => $width, )* }
            }

            /// How values are written.
            pub fn value_kind(self) -> ValueKind {
                match self { $( Field::$var => ValueKind::$kind, )* }
            }
        }
    };
}

fields! {
    /// The port the packet arrived on (2 bytes).
    IngressPort = "ingress_port", 2, Int;
    /// Ethernet destination (6 bytes).
    EthDst = "eth.dst", 6, Mac;
    /// Ethernet source (6 bytes).
    EthSrc = "eth.src", 6, Mac;
    /// EtherType after the VLAN tags (2 bytes).
    EthType = "eth.type", 2, Int;
    /// Outer VLAN tag present (1 byte, 0 or 1).
    VlanOuterValid = "vlan.outer_valid", 1, Int;
    /// Outer VLAN ID (2 bytes, 12 bits).
    VlanOuterVid = "vlan.outer_vid", 2, Int;
    /// Inner VLAN tag present (1 byte).
    VlanInnerValid = "vlan.inner_valid", 1, Int;
    /// Inner VLAN ID (2 bytes).
    VlanInnerVid = "vlan.inner_vid", 2, Int;
    /// IPv4 header present (1 byte).
    Ipv4Valid = "ipv4.valid", 1, Int;
    /// IPv4 source (4 bytes).
    Ipv4Src = "ipv4.src", 4, Ipv4;
    /// IPv4 destination (4 bytes).
    Ipv4Dst = "ipv4.dst", 4, Ipv4;
    /// IPv4 DSCP (1 byte, 6 bits).
    Ipv4Dscp = "ipv4.dscp", 1, Int;
    /// IPv4 ECN (1 byte, 2 bits).
    Ipv4Ecn = "ipv4.ecn", 1, Int;
    /// IPv4 protocol (1 byte).
    Ipv4Proto = "ipv4.proto", 1, Int;
    /// IPv4 TTL (1 byte).
    Ipv4Ttl = "ipv4.ttl", 1, Int;
    /// IPv6 header present (1 byte).
    Ipv6Valid = "ipv6.valid", 1, Int;
    /// IPv6 source (16 bytes).
    Ipv6Src = "ipv6.src", 16, Ipv6;
    /// IPv6 destination (16 bytes).
    Ipv6Dst = "ipv6.dst", 16, Ipv6;
    /// IPv6 DSCP (1 byte).
    Ipv6Dscp = "ipv6.dscp", 1, Int;
    /// IPv6 ECN (1 byte).
    Ipv6Ecn = "ipv6.ecn", 1, Int;
    /// IPv6 upper-layer protocol after extension headers (1 byte).
    Ipv6NextHdr = "ipv6.next_hdr", 1, Int;
    /// IPv6 hop limit (1 byte).
    Ipv6HopLimit = "ipv6.hop_limit", 1, Int;
    /// UDP header present (1 byte).
    UdpValid = "udp.valid", 1, Int;
    /// UDP source port (2 bytes).
    UdpSrcPort = "udp.src_port", 2, Int;
    /// UDP destination port (2 bytes).
    UdpDstPort = "udp.dst_port", 2, Int;
    /// InfiniBand BTH present: RoCEv2 (1 byte).
    BthValid = "bth.valid", 1, Int;
    /// BTH opcode (1 byte).
    BthOpcode = "bth.opcode", 1, Int;
    /// BTH destination QP (3 bytes).
    BthDestQp = "bth.dest_qp", 3, Int;
    /// Gradient header present (1 byte).
    GradientValid = "gradient.valid", 1, Int;
    /// Gradient header collective_id (2 bytes).
    GradientCollectiveId = "gradient.collective_id", 2, Int;
    /// Gradient header op_type (1 byte).
    GradientOp = "gradient.op", 1, Int;
}

impl Field {
    /// Looks a field up by its config name.
    pub fn from_name(name: &str) -> Option<Field> {
        Field::ALL.iter().copied().find(|f| f.name() == name)
    }

    /// Width in bits.
    pub fn bits(self) -> u32 {
        self.width() as u32 * 8
    }

    /// Writes the field's big-endian bytes to `out` (exactly `width()` bytes). Each arm tests
    /// only its own header's validity bit.
    #[inline(always)]
    pub fn extract(self, p: &Parsed, ingress_port: u16, out: &mut [u8]) {
        let v4 = || p.has(Layers::IPV4);
        let v6 = || p.has(Layers::IPV6);
        let udp = || p.has(Layers::UDP);
        let bth = || p.has(Layers::BTH);
        let grad = || p.has(Layers::GRADIENT);
        let outer = || p.has(Layers::VLAN_OUTER);
        let inner = || p.has(Layers::VLAN_INNER);
        match self {
            Field::IngressPort => out.copy_from_slice(&ingress_port.to_be_bytes()),
            Field::EthDst => out.copy_from_slice(&p.eth_dst.0),
            Field::EthSrc => out.copy_from_slice(&p.eth_src.0),
            Field::EthType => out.copy_from_slice(&p.ethertype.to_be_bytes()),
            Field::VlanOuterValid => out[0] = outer() as u8,
            Field::VlanOuterVid => out.copy_from_slice(&(if outer() { p.vid_outer } else { 0 }).to_be_bytes()),
            Field::VlanInnerValid => out[0] = inner() as u8,
            Field::VlanInnerVid => out.copy_from_slice(&(if inner() { p.vid_inner } else { 0 }).to_be_bytes()),
            Field::Ipv4Valid => out[0] = v4() as u8,
            Field::Ipv4Src => out.copy_from_slice(if v4() { &p.ip_src_bytes[..4] } else { &[0; 4] }),
            Field::Ipv4Dst => out.copy_from_slice(if v4() { &p.ip_dst_bytes[..4] } else { &[0; 4] }),
            Field::Ipv4Dscp => out[0] = if v4() { p.dscp } else { 0 },
            Field::Ipv4Ecn => out[0] = if v4() { p.ecn } else { 0 },
            Field::Ipv4Proto => out[0] = if v4() { p.ip_proto } else { 0 },
            Field::Ipv4Ttl => out[0] = if v4() { p.ttl } else { 0 },
            Field::Ipv6Valid => out[0] = v6() as u8,
            Field::Ipv6Src => out.copy_from_slice(if v6() { &p.ip_src_bytes } else { &[0; 16] }),
            Field::Ipv6Dst => out.copy_from_slice(if v6() { &p.ip_dst_bytes } else { &[0; 16] }),
            Field::Ipv6Dscp => out[0] = if v6() { p.dscp } else { 0 },
            Field::Ipv6Ecn => out[0] = if v6() { p.ecn } else { 0 },
            Field::Ipv6NextHdr => out[0] = if v6() { p.ip_proto } else { 0 },
            Field::Ipv6HopLimit => out[0] = if v6() { p.ttl } else { 0 },
            Field::UdpValid => out[0] = udp() as u8,
            Field::UdpSrcPort => out.copy_from_slice(&(if udp() { p.udp_src } else { 0 }).to_be_bytes()),
            Field::UdpDstPort => out.copy_from_slice(&(if udp() { p.udp_dst } else { 0 }).to_be_bytes()),
            Field::BthValid => out[0] = bth() as u8,
            Field::BthOpcode => out[0] = if bth() { p.bth_opcode } else { 0 },
            Field::BthDestQp => out.copy_from_slice(&(if bth() { p.bth_dest_qp } else { 0 }).to_be_bytes()[1..]),
            Field::GradientValid => out[0] = grad() as u8,
            Field::GradientCollectiveId => {
                out.copy_from_slice(&(if grad() { p.grad_collective_id } else { 0 }).to_be_bytes())
            }
            Field::GradientOp => out[0] = if grad() { p.grad_op } else { 0 },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_round_trip() {
        for (i, f) in Field::ALL.iter().enumerate() {
            assert_eq!(Field::from_name(f.name()), Some(*f));
            assert!(Field::ALL[..i].iter().all(|g| g.name() != f.name()));
            let mut out = vec![0xAAu8; f.width()];
            f.extract(&Parsed::default(), 7, &mut out);
            if *f != Field::IngressPort {
                assert!(out.iter().all(|b| *b == 0), "{} of an empty packet is zero", f.name());
            }
        }
        assert_eq!(Field::from_name("ipv4.dst"), Some(Field::Ipv4Dst));
        assert_eq!(Field::BthDestQp.width(), 3);
    }
}
