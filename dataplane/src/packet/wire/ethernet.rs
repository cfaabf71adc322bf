//! Ethernet II frames (IEEE 802.3 clause 3.1.1 with an EtherType): destination, source, type.

use super::{be16, put_be16, Field};
use core::fmt;
use core::str::FromStr;

mod field {
    use super::Field;
    pub const DST: Field = 0..6;
    pub const SRC: Field = 6..12;
    pub const ETHERTYPE: Field = 12..14;
}

/// Length of the Ethernet II header without tags (bytes).
pub const HEADER_LEN: usize = 14;
/// Smallest frame on the wire without FCS (bytes); shorter frames are runts.
pub const MIN_FRAME_LEN: usize = 60;

/// A 48-bit MAC address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct EthernetAddress(pub [u8; 6]);

impl EthernetAddress {
    /// ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: EthernetAddress = EthernetAddress([0xff; 6]);

    /// True for group (multicast and broadcast) addresses: the I/G bit of the first octet.
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 1 != 0
    }

    /// The address as a u64 (big-endian, upper 16 bits zero).
    pub fn to_u64(&self) -> u64 {
        let mut b = [0u8; 8];
        b[2..].copy_from_slice(&self.0);
        u64::from_be_bytes(b)
    }
}

impl fmt::Display for EthernetAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.0;
        write!(f, "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", b[0], b[1], b[2], b[3], b[4], b[5])
    }
}

impl fmt::Debug for EthernetAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The error of parsing a MAC address from text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected a MAC address as six hex octets separated by ':' (like 02:00:00:00:00:01)")]
pub struct MacParseError;

impl FromStr for EthernetAddress {
    type Err = MacParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut out = [0u8; 6];
        let mut parts = s.split([':', '-']);
        for o in out.iter_mut() {
            let p = parts.next().ok_or(MacParseError)?;
            if p.is_empty() || p.len() > 2 {
                return Err(MacParseError);
            }
            *o = u8::from_str_radix(p, 16).map_err(|_| MacParseError)?;
        }
        if parts.next().is_some() {
            return Err(MacParseError);
        }
        Ok(EthernetAddress(out))
    }
}

/// EtherType values the appliance understands.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct EtherType;

impl EtherType {
    /// IPv4.
    pub const IPV4: u16 = 0x0800;
    /// ARP.
    pub const ARP: u16 = 0x0806;
    /// IEEE 802.1Q customer VLAN tag (C-tag).
    pub const VLAN: u16 = 0x8100;
    /// IEEE 802.1ad service VLAN tag (S-tag).
    pub const QINQ: u16 = 0x88a8;
    /// IPv6.
    pub const IPV6: u16 = 0x86dd;
}

/// A checked view of an Ethernet II header at the start of a frame.
#[derive(Debug)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

/// The frame is shorter than an Ethernet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("frame shorter than the 14-byte Ethernet header")]
pub struct Truncated;

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wraps `buffer` after checking it holds at least [`HEADER_LEN`] bytes.
    pub fn new_checked(buffer: T) -> Result<Self, Truncated> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(Truncated);
        }
        Ok(EthernetFrame { buffer })
    }

    /// Wraps `buffer` without a length check, for a frame already parsed (at least
    /// [`HEADER_LEN`] bytes); the accessors still index the buffer, so a shorter one panics.
    #[inline]
    pub fn new_unchecked(buffer: T) -> Self {
        EthernetFrame { buffer }
    }

    /// Destination MAC address.
    #[inline]
    pub fn dst(&self) -> EthernetAddress {
        let mut a = [0u8; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        EthernetAddress(a)
    }

    /// Source MAC address.
    #[inline]
    pub fn src(&self) -> EthernetAddress {
        let mut a = [0u8; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        EthernetAddress(a)
    }

    /// The EtherType (or the TPID of the first VLAN tag).
    #[inline]
    pub fn ethertype(&self) -> u16 {
        be16(self.buffer.as_ref(), field::ETHERTYPE.start)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination MAC address.
    #[inline]
    pub fn set_dst(&mut self, a: EthernetAddress) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a.0);
    }

    /// Sets the source MAC address.
    #[inline]
    pub fn set_src(&mut self, a: EthernetAddress) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a.0);
    }

    /// Sets the EtherType.
    #[inline]
    pub fn set_ethertype(&mut self, t: u16) {
        put_be16(self.buffer.as_mut(), field::ETHERTYPE.start, t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The first 14 bytes of frame 1 of the real NCCL capture (TCP over IPv4).
    static FRAME: [u8; 14] = [0xfa, 0x16, 0x3e, 0xa3, 0x16, 0x62, 0xfa, 0x16, 0x3e, 0x1d, 0xde, 0x18, 0x08, 0x00];

    #[test]
    fn parse_fields() {
        let f = EthernetFrame::new_checked(&FRAME[..]).unwrap();
        assert_eq!(f.dst(), "fa:16:3e:a3:16:62".parse().unwrap());
        assert_eq!(f.src().to_string(), "fa:16:3e:1d:de:18");
        assert_eq!(f.ethertype(), EtherType::IPV4);
    }

    #[test]
    fn emit_fields() {
        let mut buf = [0u8; 14];
        let mut f = EthernetFrame::new_checked(&mut buf[..]).unwrap();
        f.set_dst(EthernetAddress::BROADCAST);
        f.set_src("02:00:00:00:00:01".parse().unwrap());
        f.set_ethertype(EtherType::IPV6);
        assert_eq!(buf, [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1, 0x86, 0xdd]);
    }

    #[test]
    fn too_short() {
        assert_eq!(EthernetFrame::new_checked(&FRAME[..13]).unwrap_err(), Truncated);
    }

    /// The I/G bit is the least significant bit of the first octet (IEEE 802-2014 8.2): set for
    /// broadcast, IPv4 multicast (01:00:5e, RFC 1112 6.4) and IPv6 multicast (33:33, RFC 2464 7);
    /// clear for individual addresses, locally administered (02) or not (fa:16:3e).
    #[test]
    fn multicast_is_the_group_bit() {
        for m in ["ff:ff:ff:ff:ff:ff", "01:00:5e:00:00:01", "33:33:00:00:00:01", "03:00:00:00:00:00"] {
            assert!(m.parse::<EthernetAddress>().unwrap().is_multicast(), "{m}");
        }
        for u in ["02:00:00:00:00:01", "fa:16:3e:a3:16:62", "00:00:00:00:00:00", "fe:ff:ff:ff:ff:ff"] {
            assert!(!u.parse::<EthernetAddress>().unwrap().is_multicast(), "{u}");
        }
    }

    /// An octet of three hex digits is refused, even one whose value fits (002), and Debug prints
    /// the address like Display.
    #[test]
    fn mac_text_octets_have_at_most_two_digits() {
        assert!("002:00:00:00:00:01".parse::<EthernetAddress>().is_err());
        assert!("02:00:00:00:00:001".parse::<EthernetAddress>().is_err());
        let a: EthernetAddress = "02:00:00:00:00:0a".parse().unwrap();
        assert_eq!(a.0, [2, 0, 0, 0, 0, 10]);
        assert_eq!(format!("{a:?}"), "02:00:00:00:00:0a");
    }

    #[test]
    fn mac_text() {
        assert!("02:00:00:00:00".parse::<EthernetAddress>().is_err());
        assert!("02:00:00:00:00:01:02".parse::<EthernetAddress>().is_err());
        assert!("02:00:00:00:00:1g".parse::<EthernetAddress>().is_err());
        assert!("ff:ff:ff:ff:ff:ff".parse::<EthernetAddress>().unwrap().is_multicast());
        assert_eq!("02-00-00-00-00-0A".parse::<EthernetAddress>().unwrap().to_u64(), 0x0200_0000_000a);
    }
}
