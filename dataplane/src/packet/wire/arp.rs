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

    /// Wraps `buffer` without checks, for a packet being written (at least [`PACKET_LEN`]
    /// bytes); the accessors still index the buffer, so a shorter one panics.
    #[inline]
    pub fn new_unchecked(buffer: T) -> Self {
        ArpPacket { buffer }
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

impl<T: AsRef<[u8]> + AsMut<[u8]>> ArpPacket<T> {
    /// Sets the hardware and protocol types and lengths of ARP for IPv4 over Ethernet (RFC 826;
    /// hardware type 1 and length 6, protocol type 0x0800 and length 4), the only kind
    /// [`ArpPacket::new_checked`] accepts.
    #[inline]
    pub fn set_ethernet_ipv4(&mut self) {
        let b = self.buffer.as_mut();
        put_be16(b, field::HTYPE.start, 1);
        put_be16(b, field::PTYPE.start, 0x0800);
        b[field::HLEN] = 6;
        b[field::PLEN] = 4;
    }

    /// Sets the operation ([`OP_REQUEST`], [`OP_REPLY`]).
    #[inline]
    pub fn set_operation(&mut self, op: u16) {
        put_be16(self.buffer.as_mut(), field::OPER.start, op);
    }

    /// Sets the sender hardware address.
    #[inline]
    pub fn set_sender_mac(&mut self, a: EthernetAddress) {
        self.buffer.as_mut()[field::SHA].copy_from_slice(&a.0);
    }

    /// Sets the sender protocol address.
    #[inline]
    pub fn set_sender_ip(&mut self, a: [u8; 4]) {
        self.buffer.as_mut()[field::SPA].copy_from_slice(&a);
    }

    /// Sets the target hardware address.
    #[inline]
    pub fn set_target_mac(&mut self, a: EthernetAddress) {
        self.buffer.as_mut()[field::THA].copy_from_slice(&a.0);
    }

    /// Sets the target protocol address.
    #[inline]
    pub fn set_target_ip(&mut self, a: [u8; 4]) {
        self.buffer.as_mut()[field::TPA].copy_from_slice(&a);
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
        let mut p = ArpPacket::new_unchecked(buf);
        p.set_ethernet_ipv4();
        p.set_operation(self.operation);
        p.set_sender_mac(self.sender_mac);
        p.set_sender_ip(self.sender_ip);
        p.set_target_mac(self.target_mac);
        p.set_target_ip(self.target_ip);
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

    /// Each setter writes its own bytes of RFC 826's layout and no others.
    fn set(f: impl Fn(&mut ArpPacket<&mut [u8]>)) -> [u8; 28] {
        let mut b = REQUEST;
        f(&mut ArpPacket::new_unchecked(&mut b[..]));
        b
    }

    fn changed(b: &[u8; 28]) -> Vec<usize> {
        (0..28).filter(|&i| b[i] != REQUEST[i]).collect()
    }

    #[test]
    fn set_ethernet_ipv4_writes_bytes_0_to_6() {
        let mut b = [0xaau8; 28];
        ArpPacket::new_unchecked(&mut b[..]).set_ethernet_ipv4();
        assert_eq!(&b[..6], &[0, 1, 8, 0, 6, 4]);
        assert_eq!(&b[6..], &[0xaa; 22]);
        assert!(ArpPacket::new_checked(&b[..]).is_ok());
    }

    #[test]
    fn set_operation_writes_bytes_6_and_7() {
        let b = set(|p| p.set_operation(OP_REPLY));
        assert_eq!(&b[6..8], &[0, 2]);
        assert_eq!(changed(&b), [7]);
    }

    #[test]
    fn set_sender_mac_writes_bytes_8_to_14() {
        let b = set(|p| p.set_sender_mac(EthernetAddress([0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5])));
        assert_eq!(&b[8..14], &[0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5]);
        assert_eq!(changed(&b), [8, 9, 10, 11, 12, 13]);
    }

    #[test]
    fn set_sender_ip_writes_bytes_14_to_18() {
        let b = set(|p| p.set_sender_ip([0xc0, 0xa8, 0xc1, 0xc2]));
        assert_eq!(&b[14..18], &[0xc0, 0xa8, 0xc1, 0xc2]);
        assert_eq!(changed(&b), [14, 15, 16, 17]);
    }

    #[test]
    fn set_target_mac_writes_bytes_18_to_24() {
        let b = set(|p| p.set_target_mac(EthernetAddress([0xb0, 0xb1, 0xb2, 0xb3, 0xb4, 0xb5])));
        assert_eq!(&b[18..24], &[0xb0, 0xb1, 0xb2, 0xb3, 0xb4, 0xb5]);
        assert_eq!(changed(&b), [18, 19, 20, 21, 22, 23]);
    }

    #[test]
    fn set_target_ip_writes_bytes_24_to_28() {
        let b = set(|p| p.set_target_ip([0xc0, 0xa8, 0xd1, 0xd2]));
        assert_eq!(&b[24..28], &[0xc0, 0xa8, 0xd1, 0xd2]);
        assert_eq!(changed(&b), [24, 25, 26, 27]);
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
