//! `set_dscp(v)`: rewrite the DSCP (RFC 2474), IPv4 or IPv6.
//!
//! IPv4: the header checksum is updated incrementally (RFC 1624 eqn. 3: equal to a full
//! recompute). Neither the UDP checksum (TOS and traffic class are outside the pseudo-header) nor
//! a RoCEv2 ICRC (the traffic class is masked, IBTA A17.4) change.

use crate::parse::{Layers, Parsed};
use crate::wire::ipv4::Ipv4Packet;
use crate::wire::ipv6::Ipv6Packet;

/// Sets the DSCP of `frame`'s IP header to `dscp` (0..=63); ECN bits are kept. Nothing without IP.
#[inline]
pub fn set_dscp(frame: &mut [u8], p: &mut Parsed, dscp: u8) {
    let l3 = p.l3_offset as usize;
    if p.has(Layers::IPV4) {
        let mut ip = Ipv4Packet::new_unchecked(&mut frame[l3..]);
        let tos = (dscp << 2) | (ip.tos() & 0x3);
        ip.update_tos(tos);
    } else if p.has(Layers::IPV6) {
        let mut ip = Ipv6Packet::new_unchecked(&mut frame[l3..]);
        ip.set_dscp(dscp);
    } else {
        return;
    }
    p.dscp = dscp;
}
