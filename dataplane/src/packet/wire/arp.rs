//! ARP (RFC 826) for IPv4 over Ethernet: the only kind the appliance answers.
//!
//! ```text
//!  0  hardware type (2) = 1 (Ethernet)     2  protocol type (2) = 0x0800
//!  4  hardware len (1) = 6                 5  protocol len (1) = 4
//!  6  operation (2): 1 request, 2 reply
//!  8  sender MAC (6)   14 sender IPv4 (4)   18 target MAC (6)   24 target IPv4 (4)
//! ```

use super::error::WireError;
use super::ethernet::EthernetAddress;
use super::{be16, put_be16, Field};

mod field {
    use super::Field;
    pub const HTYPE: Field = 0..2;
    pub const PTYPE: Field = 2..4;
    pub const HLEN: usize = 4;
    pub const PLEN: usize = 5;
    pub const OPER: Field = 6..8;
    pub const SHA: Field = 8..14;
    pub const SPA: Field = 14..18;
    pub const THA: Field = 18..24;
    pub const TPA: Field = 24..28;
}

/// Length of an ARP packet for IPv4 over Ethernet (bytes).
pub const PACKET_LEN: usize = 28;
/// ARP operation: request.
pub const OP_REQUEST: u16 = 1;
/// ARP operation: reply.
pub const OP_REPLY: u16 = 2;

/// A checked view of an ARP packet for IPv4 over Ethernet.
#[derive(Debug, Clone)]
pub struct ArpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    /// Wraps `buffer` (starting at the ARP header) after checking it holds 28 bytes of an
    /// Ethernet/IPv4 ARP packet.
    ///
    /// # Errors
    /// [`WireError::Truncated`] if fewer than 28 bytes are present; [`WireError::Unsupported`]
    /// for hardware/protocol types or lengths other than Ethernet (1, 6) and IPv4 (0x0800, 4).
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let b = buffer.as_ref();
        if b.len() < PACKET_LEN {
            return Err(WireError::Truncated);
        }
        if be16(b, field::HTYPE.start) != 1
            || be16(b, field::PTYPE.start) != 0x0800
            || b[field::HLEN] != 6
            || b[field::PLEN] != 4
        {
            return Err(WireError::Unsupported);
        }
        Ok(ArpPacket { buffer })
    }

    /// Operation ([`OP_REQUEST`], [`OP_REPLY`], or another value).
    #[inline]
    pub fn operation(&self) -> u16 {
        be16(self.buffer.as_ref(), field::OPER.start)
    }

    /// Sender hardware address.
    #[inline]
    pub fn sender_mac(&self) -> EthernetAddress {
        let mut a = [0u8; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::SHA]);
        EthernetAddress(a)
    }

    /// Sender protocol address.
    #[inline]
    pub fn sender_ip(&self) -> [u8; 4] {
        let b = &self.buffer.as_ref()[field::SPA];
        [b[0], b[1], b[2], b[3]]
    }

    /// Target hardware address (zero in requests).
    #[inline]
    pub fn target_mac(&self) -> EthernetAddress {
        let mut a = [0u8; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::THA]);
        EthernetAddress(a)
    }

    /// Target protocol address.
    #[inline]
    pub fn target_ip(&self) -> [u8; 4] {
        let b = &self.buffer.as_ref()[field::TPA];
        [b[0], b[1], b[2], b[3]]
    }
}

/// A decoded ARP packet for IPv4 over Ethernet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ArpRepr {
    /// Operation.
    pub operation: u16,
    /// Sender hardware address.
    pub sender_mac: EthernetAddress,
    /// Sender protocol address.
    pub sender_ip: [u8; 4],
    /// Target hardware address.
    pub target_mac: EthernetAddress,
    /// Target protocol address.
    pub target_ip: [u8; 4],
}

impl ArpRepr {
    /// Decodes a checked packet.
    pub fn parse<T: AsRef<[u8]>>(p: &ArpPacket<T>) -> Self {
        ArpRepr {
            operation: p.operation(),
            sender_mac: p.sender_mac(),
            sender_ip: p.sender_ip(),
            target_mac: p.target_mac(),
            target_ip: p.target_ip(),
        }
    }

    /// The reply to this request from the owner of `target_ip`, whose MAC is `mac`.
    pub fn reply(&self, mac: EthernetAddress) -> ArpRepr {
        ArpRepr {
            operation: OP_REPLY,
            sender_mac: mac,
            sender_ip: self.target_ip,
            target_mac: self.sender_mac,
            target_ip: self.sender_ip,
        }
    }

    /// Writes the 28-byte packet into the start of `buf`.
    ///
    /// # Errors
    /// [`WireError::Truncated`] if `buf` is shorter than 28 bytes.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        if buf.len() < PACKET_LEN {
            return Err(WireError::Truncated);
        }
        put_be16(buf, field::HTYPE.start, 1);
        put_be16(buf, field::PTYPE.start, 0x0800);
        buf[field::HLEN] = 6;
        buf[field::PLEN] = 4;
        put_be16(buf, field::OPER.start, self.operation);
        buf[field::SHA].copy_from_slice(&self.sender_mac.0);
        buf[field::SPA].copy_from_slice(&self.sender_ip);
        buf[field::THA].copy_from_slice(&self.target_mac.0);
        buf[field::TPA].copy_from_slice(&self.target_ip);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // A request "who has 10.0.0.2? tell 10.0.0.1" from 02:00:00:00:00:01 (the ARP body of a
    // broadcast frame, as Linux sends it).
    static REQUEST: [u8; 28] = [
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x0a, 0x00, 0x00, 0x01,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x02,
    ];

    #[test]
    fn parse_request_and_reply() {
        let p = ArpPacket::new_checked(&REQUEST[..]).unwrap();
        let r = ArpRepr::parse(&p);
        assert_eq!(r.operation, OP_REQUEST);
        assert_eq!(r.sender_mac.to_string(), "02:00:00:00:00:01");
        assert_eq!((r.sender_ip, r.target_ip), ([10, 0, 0, 1], [10, 0, 0, 2]));
        assert_eq!(r.target_mac, EthernetAddress([0; 6]));
        let mac: EthernetAddress = "02:00:00:00:00:02".parse().unwrap();
        let reply = r.reply(mac);
        let mut b = [0u8; 28];
        reply.emit(&mut b).unwrap();
        assert_eq!(&b[6..8], &[0, 2]);
        assert_eq!(&b[8..14], &mac.0);
        assert_eq!(&b[14..18], &[10, 0, 0, 2]);
        assert_eq!(&b[18..28], &REQUEST[8..18]);
    }

    #[test]
    fn negative() {
        assert_eq!(ArpPacket::new_checked(&REQUEST[..27]).unwrap_err(), WireError::Truncated);
        for (i, v) in [(1usize, 6u8), (2, 0x86), (4, 8), (5, 16)] {
            let mut b = REQUEST;
            b[i] = v;
            assert_eq!(ArpPacket::new_checked(&b[..]).unwrap_err(), WireError::Unsupported);
        }
        assert_eq!(ArpRepr::default().emit(&mut [0u8; 27]), Err(WireError::Truncated));
    }

    proptest! {
        #[test]
        fn round_trip(operation in any::<u16>(), sm in any::<[u8; 6]>(), si in any::<[u8; 4]>(), tm in any::<[u8; 6]>(), ti in any::<[u8; 4]>()) {
            let r = ArpRepr { operation, sender_mac: EthernetAddress(sm), sender_ip: si, target_mac: EthernetAddress(tm), target_ip: ti };
            let mut b = [0u8; 28];
            r.emit(&mut b).unwrap();
            prop_assert_eq!(ArpRepr::parse(&ArpPacket::new_checked(&b[..]).unwrap()), r);
        }
    }
}
