//! Which traffic class a frame waits in: a port's DSCP and PCP maps, read from the frame's bytes
//! as it is sent (after every rewrite), the way switches classify on egress (IEEE 802.1Q
//! section 8.6.6 for the PCP; RFC 2474 for the DSCP).

use crate::wire::ethernet::{self, EtherType, EthernetFrame};
use crate::wire::ipv4::Ipv4Packet;
use crate::wire::ipv6::Ipv6Packet;
use crate::wire::vlan;

/// A port's class map: DSCP (IPv4 TOS or IPv6 traffic class, upper 6 bits) to class, and the
/// outermost VLAN tag's PCP to class. An IP packet takes its class from `dscp` when there is a
/// DSCP map; otherwise a tagged frame takes it from `pcp` when there is a PCP map; otherwise
/// class 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClassMap {
    /// DSCP 0..=63 to class.
    pub dscp: Option<[u8; 64]>,
    /// PCP 0..=7 to class.
    pub pcp: Option<[u8; 8]>,
}

impl ClassMap {
    /// The class of `frame` (a whole Ethernet frame without FCS); 0 for what the maps do not
    /// cover. Never panics and never reads past the frame.
    #[inline]
    pub fn classify(&self, frame: &[u8]) -> u8 {
        self.classify_in(frame, frame.len())
    }

    /// [`ClassMap::classify`] for a frame of `total_len` bytes whose first segment is `frame`
    /// (the headers read in it, the IP lengths judged against `total_len`).
    #[inline(always)]
    pub fn classify_in(&self, frame: &[u8], total_len: usize) -> u8 {
        // A port without maps (one class, the common case) reads no byte of the frame.
        if self.dscp.is_none() && self.pcp.is_none() {
            return 0;
        }
        self.classify_headers(frame, total_len)
    }

    /// [`ClassMap::classify_in`] on a port with a DSCP or PCP map: walks the frame's tags to
    /// its IP header.
    #[inline(never)]
    fn classify_headers(&self, frame: &[u8], total_len: usize) -> u8 {
        let Ok(eth) = EthernetFrame::new_checked(frame) else { return 0 };
        let mut ty = eth.ethertype();
        let mut off = ethernet::HEADER_LEN;
        let mut pcp = None;
        let mut tags = 0;
        while vlan::is_tpid(ty) && tags < crate::parse::MAX_VLAN_TAGS {
            let Some(Ok(tag)) = frame.get(off..).map(vlan::VlanTag::new_checked) else { return 0 };
            pcp = pcp.or(Some(tag.pcp()));
            ty = tag.ethertype();
            off += vlan::HEADER_LEN;
            tags += 1;
        }
        if let Some(map) = &self.dscp {
            let l3 = &frame[off.min(frame.len())..];
            let dscp = if total_len <= frame.len() {
                match ty {
                    EtherType::IPV4 => Ipv4Packet::new_checked(l3).ok().map(|p| p.dscp()),
                    EtherType::IPV6 => Ipv6Packet::new_checked(l3).ok().map(|p| p.dscp()),
                    _ => None,
                }
            } else {
                crate::sched::ecn::locate_ip_in(frame, total_len).map(|(at, family, _)| {
                    if family == crate::parse::Layers::IPV4 {
                        Ipv4Packet::new_unchecked(&frame[at..]).dscp()
                    } else {
                        Ipv6Packet::new_unchecked(&frame[at..]).dscp()
                    }
                })
            };
            if let Some(d) = dscp {
                return map[(d & 63) as usize];
            }
        }
        match (&self.pcp, pcp) {
            (Some(map), Some(p)) => map[(p & 7) as usize],
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ethernet frame with `tags` (TPID 0x8100, PCP `pcp`) and an IPv4 or IPv6 header of
    /// DSCP `dscp`.
    fn frame(v6: bool, dscp: u8, pcp: Option<u8>) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
        if let Some(p) = pcp {
            f.extend_from_slice(&[0x81, 0x00, p << 5, 10]);
        }
        if v6 {
            f.extend_from_slice(&[0x86, 0xdd]);
            let mut ip = [0u8; 40];
            ip[0] = 0x60 | (dscp >> 2);
            ip[1] = (dscp & 3) << 6;
            f.extend_from_slice(&ip);
        } else {
            f.extend_from_slice(&[0x08, 0x00]);
            let mut ip = [0u8; 20];
            ip[0] = 0x45;
            ip[1] = dscp << 2 | 1;
            ip[3] = 20;
            f.extend_from_slice(&ip);
        }
        f
    }

    #[test]
    fn dscp_first_then_pcp_then_class_0() {
        let mut dscp = [0u8; 64];
        dscp[46] = 7;
        dscp[10] = 2;
        let mut pcp = [0u8; 8];
        pcp[5] = 4;
        let both = ClassMap { dscp: Some(dscp), pcp: Some(pcp) };
        assert_eq!(both.classify(&frame(false, 46, None)), 7);
        assert_eq!(both.classify(&frame(true, 10, None)), 2);
        assert_eq!(both.classify(&frame(false, 46, Some(5))), 7, "DSCP before PCP for IP packets");
        let pcp_only = ClassMap { dscp: None, pcp: Some(pcp) };
        assert_eq!(pcp_only.classify(&frame(false, 46, Some(5))), 4);
        assert_eq!(pcp_only.classify(&frame(false, 46, None)), 0, "untagged, no DSCP map");
        // Not IP but tagged: the PCP.
        let mut arp = frame(false, 0, Some(5));
        arp[16..18].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(both.classify(&arp), 4);
        assert_eq!(ClassMap::default().classify(&frame(false, 46, Some(5))), 0);
        for n in 0..frame(true, 46, Some(5)).len() {
            let _ = both.classify(&frame(true, 46, Some(5))[..n]);
        }
    }
}
