//! `dec_ttl`: decrement the IPv4 TTL (RFC 791, RFC 1812 5.3.1) or IPv6 hop limit (RFC 8200).
//!
//! A packet whose TTL would reach 0 is dropped (`ttl_expired`). IPv4: the header checksum is
//! updated incrementally (RFC 1624 eqn. 3). UDP checksums and RoCEv2 ICRCs stay valid (TTL and
//! hop limit are in neither; the ICRC masks them).

use crate::parse::{Layers, Parsed};
use crate::stats::Reason;
use crate::wire::ipv4::Ipv4Packet;
use crate::wire::ipv6::Ipv6Packet;

/// Decrements the TTL or hop limit of `frame`. Nothing without IP.
#[inline]
pub fn decrement(frame: &mut [u8], p: &mut Parsed) -> Result<(), Reason> {
    let l3 = p.l3_offset as usize;
    if !p.has(Layers::IPV4) && !p.has(Layers::IPV6) {
        return Ok(());
    }
    if p.ttl <= 1 {
        return Err(Reason::TtlExpired);
    }
    let ttl = p.ttl - 1;
    if p.has(Layers::IPV4) {
        Ipv4Packet::new_unchecked(&mut frame[l3..]).update_ttl(ttl);
    } else {
        Ipv6Packet::new_unchecked(&mut frame[l3..]).set_hop_limit(ttl);
    }
    p.ttl = ttl;
    Ok(())
}
