//! Fields a table key can use, named as P4 programs name them, and their extraction from a
//! parsed packet and its metadata ([`Meta`]).
//!
//! A field of a header the packet does not have reads as zeros; match on the header's validity
//! bit (`ipv4.valid`, ...) to tell the two apart, as P4 programs use `isValid()`.

use crate::meta::Meta;
use crate::parse::{Layers, Parsed};

/// Largest key of any table (bytes): room for an IPv6 5-tuple plus a few more fields.
pub const KEY_MAX: usize = 64;

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
    /// The port the packet arrived on (2 bytes; metadata).
    IngressPort = "ingress_port", 2, Int;
    /// The colour the last meter gave the packet: 0 green, 1 yellow, 2 red (1 byte; metadata).
    MetaColor = "meta.color", 1, Int;
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
    pub fn extract(self, p: &Parsed, meta: &Meta, out: &mut [u8]) {
        let mut key = [0u8; KEY_MAX];
        self.write_key(p, meta, &mut key, 0);
        out.copy_from_slice(&key[..self.width()]);
    }

    /// Writes the field's big-endian bytes to `key[at..at + width()]`; nothing if they do not fit
    /// (tables check their key length when they are built).
    ///
    /// Not inlined on purpose: a table calls it once per key field, and inlined into that loop
    /// the compiler computes every field's value up front for every table (about 130
    /// instructions a table) instead of the one each call needs. Each arm is a fixed-size store.
    #[inline(never)]
    pub fn write_key(self, p: &Parsed, meta: &Meta, key: &mut [u8; KEY_MAX], at: usize) {
        self.write(p, meta, key, at)
    }

    /// The key of a table whose key is this one field, at most 8 bytes wide, as the word an
    /// exact or LPM lookup reads: the field's big-endian bytes loaded little-endian, zero
    /// above `width()` bytes (what loading `key[..8]` after [`Field::write_key`] at offset 0
    /// gives). Saves such tables the key buffer. For wider fields, their first 8 bytes.
    #[inline(never)]
    pub fn word(self, p: &Parsed, meta: &Meta) -> u64 {
        let mut key = [0u8; KEY_MAX];
        self.write(p, meta, &mut key, 0);
        let mut w = [0u8; 8];
        w.copy_from_slice(&key[..8]);
        u64::from_le_bytes(w)
    }

    /// The body of [`Field::write_key`].
    #[inline(always)]
    fn write(self, p: &Parsed, meta: &Meta, key: &mut [u8; KEY_MAX], at: usize) {
        let v4 = || p.has(Layers::IPV4);
        let v6 = || p.has(Layers::IPV6);
        let udp = || p.has(Layers::UDP);
        let bth = || p.has(Layers::BTH);
        let grad = || p.has(Layers::GRADIENT);
        let outer = || p.has(Layers::VLAN_OUTER);
        let inner = || p.has(Layers::VLAN_INNER);
        let b16 = |valid: bool, v: u16| if valid { v } else { 0 }.to_be_bytes();
        let b8 = |valid: bool, v: u8| [if valid { v } else { 0 }];
        match self {
            Field::IngressPort => put(key, at, meta.ingress_port.to_be_bytes()),
            Field::MetaColor => put(key, at, [meta.color as u8]),
            Field::EthDst => put(key, at, p.eth_dst.0),
            Field::EthSrc => put(key, at, p.eth_src.0),
            Field::EthType => put(key, at, p.ethertype.to_be_bytes()),
            Field::VlanOuterValid => put(key, at, [outer() as u8]),
            Field::VlanOuterVid => put(key, at, b16(outer(), p.vid_outer)),
            Field::VlanInnerValid => put(key, at, [inner() as u8]),
            Field::VlanInnerVid => put(key, at, b16(inner(), p.vid_inner)),
            Field::Ipv4Valid => put(key, at, [v4() as u8]),
            Field::Ipv4Src => put(key, at, addr4(v4(), &p.ip_src_bytes)),
            Field::Ipv4Dst => put(key, at, addr4(v4(), &p.ip_dst_bytes)),
            Field::Ipv4Dscp => put(key, at, b8(v4(), p.dscp)),
            Field::Ipv4Ecn => put(key, at, b8(v4(), p.ecn)),
            Field::Ipv4Proto => put(key, at, b8(v4(), p.ip_proto)),
            Field::Ipv4Ttl => put(key, at, b8(v4(), p.ttl)),
            Field::Ipv6Valid => put(key, at, [v6() as u8]),
            Field::Ipv6Src => put(key, at, if v6() { p.ip_src_bytes } else { [0; 16] }),
            Field::Ipv6Dst => put(key, at, if v6() { p.ip_dst_bytes } else { [0; 16] }),
            Field::Ipv6Dscp => put(key, at, b8(v6(), p.dscp)),
            Field::Ipv6Ecn => put(key, at, b8(v6(), p.ecn)),
            Field::Ipv6NextHdr => put(key, at, b8(v6(), p.ip_proto)),
            Field::Ipv6HopLimit => put(key, at, b8(v6(), p.ttl)),
            Field::UdpValid => put(key, at, [udp() as u8]),
            Field::UdpSrcPort => put(key, at, b16(udp(), p.udp_src)),
            Field::UdpDstPort => put(key, at, b16(udp(), p.udp_dst)),
            Field::BthValid => put(key, at, [bth() as u8]),
            Field::BthOpcode => put(key, at, b8(bth(), p.bth_opcode)),
            Field::BthDestQp => {
                let q = (if bth() { p.bth_dest_qp } else { 0 }).to_be_bytes();
                put(key, at, [q[1], q[2], q[3]])
            }
            Field::GradientValid => put(key, at, [grad() as u8]),
            Field::GradientCollectiveId => put(key, at, b16(grad(), p.grad_collective_id)),
            Field::GradientOp => put(key, at, b8(grad(), p.grad_op)),
        }
    }
}

/// The first four bytes of an address when `valid`, else zeros.
#[inline(always)]
fn addr4(valid: bool, a: &[u8; 16]) -> [u8; 4] {
    if valid {
        [a[0], a[1], a[2], a[3]]
    } else {
        [0; 4]
    }
}

/// Stores `v` at `key[at..at + N]` when it fits.
#[inline(always)]
fn put<const N: usize>(key: &mut [u8; KEY_MAX], at: usize, v: [u8; N]) {
    if let Some(dst) = key.get_mut(at..at + N) {
        dst.copy_from_slice(&v);
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
            f.extract(&Parsed::default(), &Meta::new(7), &mut out);
            if *f != Field::IngressPort {
                assert!(out.iter().all(|b| *b == 0), "{} of an empty packet is zero", f.name());
            }
        }
        assert_eq!(Field::from_name("ipv4.dst"), Some(Field::Ipv4Dst));
        assert_eq!(Field::BthDestQp.width(), 3);
    }
}
