//! `mark_ecn`: set Congestion Experienced (RFC 3168 section 5) on ECN-capable packets.
//!
//! ECT(0) (10) and ECT(1) (01) become CE (11); CE stays CE; Not-ECT (00) is never marked and
//! leaves unchanged (a congested queue drops it instead: RFC 3168 6.1.1.1). IPv4: the header
//! checksum is updated incrementally and equals a full recompute (never 0xFFFF, RFC 1624). IPv6:
//! only the two ECN bits of the first word change (version, DSCP and flow label are kept). UDP
//! checksums and RoCEv2 ICRCs stay valid: the traffic class is in neither.

use crate::parse::{Layers, Parsed};
use crate::wire::ipv4::{Ecn, Ipv4Packet};
use crate::wire::ipv6::Ipv6Packet;

/// Marks CE on `frame` if it is ECN-capable. Returns true if the packet was (or already is) CE.
#[inline]
pub fn mark_ce(frame: &mut [u8], p: &mut Parsed) -> bool {
    let l3 = p.l3_offset as usize;
    match p.ecn {
        Ecn::CE => return p.has(Layers::IPV4) || p.has(Layers::IPV6),
        Ecn::NOT_ECT => return false,
        _ => {}
    }
    if p.has(Layers::IPV4) {
        let mut ip = Ipv4Packet::new_unchecked(&mut frame[l3..]);
        let tos = ip.tos() | Ecn::CE;
        ip.update_tos(tos);
    } else if p.has(Layers::IPV6) {
        Ipv6Packet::new_unchecked(&mut frame[l3..]).set_ecn(Ecn::CE);
    } else {
        return false;
    }
    p.ecn = Ecn::CE;
    true
}
