//! Setting Congestion Experienced on a queued frame (RFC 3168 section 5), from its bytes alone.
//!
//! A frame waiting in an egress queue has no parse result any more, so [`mark_frame_ce`] finds
//! the IP header itself (Ethernet, up to [`MAX_VLAN_TAGS`] 802.1Q / 802.1ad tags, then IPv4 or
//! IPv6 with its fixed header checked against the bytes present) and hands the rewrite to the
//! `mark_ecn` action ([`crate::action::ecn::mark_ce`]), so the scheduler and the pipeline change
//! the same bits the same way: ECT(0) and ECT(1) become CE; IPv4's header checksum is updated
//! incrementally (RFC 1624) and equals a full recompute; IPv6 changes only the two ECN bits of
//! the traffic class (version, DSCP and flow label kept). UDP checksums and RoCEv2 ICRCs stay
//! valid: the traffic class is in neither (the ICRC masks it, IBTA Annex A17.4.4).

use crate::action::ecn::mark_ce;
use crate::parse::{Layers, Parsed, MAX_VLAN_TAGS};
use crate::wire::ethernet::{self, EtherType, EthernetFrame};
use crate::wire::ipv4::{self, Ecn, Ipv4Packet};
use crate::wire::ipv6::{self, Ipv6Packet};
use crate::wire::vlan;

/// What [`mark_frame_ce`] found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CeOutcome {
    /// ECT(0) or ECT(1): the frame now carries CE.
    Marked,
    /// The frame already carried CE (unchanged).
    AlreadyCe,
    /// Not-ECT (00): not ECN-capable, unchanged (a congested queue drops it, RFC 3168 6.1.1.1).
    NotEct,
    /// Not an IP packet (or a header too short to hold one): unchanged, not ECN-capable.
    NotIp,
}

impl CeOutcome {
    /// True when the frame leaves with CE set ([`CeOutcome::Marked`] or
    /// [`CeOutcome::AlreadyCe`]); false when it is not ECN-capable and must be dropped instead.
    pub fn is_ce(self) -> bool {
        matches!(self, CeOutcome::Marked | CeOutcome::AlreadyCe)
    }
}

/// Where a frame's IP header starts and which family it is: `(l3 offset in bytes, IPV4 or IPV6,
/// ECN codepoint)`, or `None` for a frame that is not IPv4 or IPv6 (or too short to be).
pub fn locate_ip(frame: &[u8]) -> Option<(usize, Layers, u8)> {
    locate_ip_in(frame, frame.len())
}

/// [`locate_ip`] in the first segment `frame` of a frame of `total_len` bytes: the IP header
/// must lie in `frame`, its lengths are judged against `total_len`.
pub fn locate_ip_in(frame: &[u8], total_len: usize) -> Option<(usize, Layers, u8)> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    let mut ty = eth.ethertype();
    let mut off = ethernet::HEADER_LEN;
    let mut tags = 0;
    while vlan::is_tpid(ty) {
        if tags == MAX_VLAN_TAGS {
            return None;
        }
        ty = vlan::VlanTag::new_checked(frame.get(off..)?).ok()?.ethertype();
        off += vlan::HEADER_LEN;
        tags += 1;
    }
    if total_len <= frame.len() {
        return match ty {
            EtherType::IPV4 => Some((off, Layers::IPV4, Ipv4Packet::new_checked(&frame[off..]).ok()?.ecn())),
            EtherType::IPV6 => Some((off, Layers::IPV6, Ipv6Packet::new_checked(&frame[off..]).ok()?.ecn())),
            _ => None,
        };
    }
    let (b, whole) = (&frame[off..], total_len - off);
    match ty {
        EtherType::IPV4 if b.len() >= ipv4::MIN_HEADER_LEN => {
            let ip = Ipv4Packet::new_unchecked(b);
            let (hl, tl) = (ip.header_len(), ip.total_len() as usize);
            (ip.version() == 4 && hl >= ipv4::MIN_HEADER_LEN && hl <= b.len() && tl >= hl && tl <= whole)
                .then(|| (off, Layers::IPV4, ip.ecn()))
        }
        EtherType::IPV6 if b.len() >= ipv6::HEADER_LEN => {
            let ip = Ipv6Packet::new_unchecked(b);
            (ip.version() == 6 && ipv6::HEADER_LEN + ip.payload_len() as usize <= whole)
                .then(|| (off, Layers::IPV6, ip.ecn()))
        }
        _ => None,
    }
}

/// Sets CE on `frame` (a whole Ethernet frame without FCS) if it is ECN-capable; see the module
/// docs for what changes. Never panics and never reads past the frame.
pub fn mark_frame_ce(frame: &mut [u8]) -> CeOutcome {
    let len = frame.len();
    mark_frame_ce_in(frame, len)
}

/// [`mark_frame_ce`] on the first segment `frame` of a frame of `total_len` bytes (the IP
/// header found and rewritten in it, as [`locate_ip_in`]).
pub fn mark_frame_ce_in(frame: &mut [u8], total_len: usize) -> CeOutcome {
    let Some((l3, family, ecn)) = locate_ip_in(frame, total_len) else {
        return CeOutcome::NotIp;
    };
    match ecn {
        Ecn::NOT_ECT => return CeOutcome::NotEct,
        Ecn::CE => return CeOutcome::AlreadyCe,
        _ => {}
    }
    let mut p = Parsed { layers: Layers::ETH.union(family), l3_offset: l3 as u32, ecn, ..Parsed::default() };
    if mark_ce(frame, &mut p) {
        CeOutcome::Marked
    } else {
        CeOutcome::NotIp
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::parse::parse;
    use crate::testing::{build_frame, case_frames as frames, host_ip, ipv4_checksum_is_a_full_recompute};
    use crate::wire::build::{self, FrameSpec, Roce};
    use crate::wire::gradient::{GradientRepr, DEFAULT_UDP_PORT};
    use crate::wire::icrc;

    /// IPv4 frames of every codepoint (c06) and the one whose checksum becomes 0x0000 (c05):
    /// ECT(0) and ECT(1) become CE, CE stays, Not-ECT is untouched; only the TOS and the
    /// checksum change, and the checksum equals a full recompute.
    #[test]
    fn ipv4_ce_with_checksum_equal_to_a_full_recompute() {
        let mut all = frames("c06_ecn_codepoints.pcap");
        all.extend(frames("c05_ipv4_ce_mark_cksum_becomes_0000.pcap"));
        all.extend(frames("c02_ipv4_options.pcap"));
        let mut seen = [0; 4];
        for inp in all {
            let ecn = inp[15] & 3;
            seen[ecn as usize] += 1;
            let mut f = inp.clone();
            let want = [CeOutcome::NotEct, CeOutcome::Marked, CeOutcome::Marked, CeOutcome::AlreadyCe][ecn as usize];
            assert_eq!(mark_frame_ce(&mut f), want, "ECN {ecn:02b}");
            assert_eq!(f[15] & 3, if ecn == 0 { 0 } else { 3 });
            assert_eq!(f[15] >> 2, inp[15] >> 2, "DSCP kept");
            ipv4_checksum_is_a_full_recompute(&f, 14);
            let diff: Vec<usize> = (0..f.len()).filter(|&i| f[i] != inp[i]).collect();
            assert!(diff.iter().all(|i| [15, 24, 25].contains(i)), "{diff:?}");
            assert!(parse(&f, DEFAULT_UDP_PORT).is_ok());
        }
        assert!(seen.iter().all(|&n| n > 0), "every codepoint tried: {seen:?}");
    }

    /// IPv6 (c07): only the two ECN bits change; version, DSCP and flow label are kept and the
    /// UDP checksum still verifies.
    #[test]
    fn ipv6_ce_keeps_the_flow_label() {
        let inp = frames("c07_ipv6_tc_ecn_flowlabel.pcap").remove(0);
        let mut f = inp.clone();
        let word = |f: &[u8]| u32::from_be_bytes([f[14], f[15], f[16], f[17]]);
        assert_ne!(word(&inp) >> 20 & 3, 3, "the case is ECT");
        assert_eq!(mark_frame_ce(&mut f), CeOutcome::Marked);
        assert_eq!(word(&f), word(&inp) | (3 << 20));
        assert_eq!(word(&f) & 0x000f_ffff, word(&inp) & 0x000f_ffff, "flow label untouched");
        let diff: Vec<usize> = (0..f.len()).filter(|&i| f[i] != inp[i]).collect();
        assert_eq!(diff, [15]);
        assert!(parse(&f, DEFAULT_UDP_PORT).unwrap().has(Layers::UDP));
        assert_eq!(mark_frame_ce(&mut f), CeOutcome::AlreadyCe);
    }

    /// RoCEv2 over IPv4 (c10, the NCCL capture) and over IPv6 behind two VLAN tags (built): the
    /// ICRC stays valid after CE, because it masks the traffic class.
    #[test]
    fn rocev2_icrc_valid_after_ce() {
        let mut all = frames("c10_rocev2_ipv4_icrc.pcap");
        all.extend(frames("nccl_ring_allreduce_rocev2.pcap"));
        for v6 in [false, true] {
            let spec = FrameSpec {
                src_mac: "02:00:00:00:00:01".parse().unwrap(),
                dst_mac: "02:00:00:00:00:02".parse().unwrap(),
                vlan: Some(0x6064),
                vlan_tpid: crate::wire::vlan::TPID_8021Q,
                outer_tag: Some((0x88a8, 0x0010)),
                src_ip: host_ip(v6, 1),
                dst_ip: host_ip(v6, 2),
                dscp: 26,
                ecn: 1,
                ttl: 64,
                src_port: 0xc000,
                dst_port: build::ROCEV2_PORT,
                roce: Some(Roce { dest_qp: 1, psn: 7, pkey: 0xffff, qkey: 0x1111, src_qp: 2 }),
                header: GradientRepr {
                    version: 1,
                    op_type: 1,
                    collective_id: 3,
                    dtype: 1,
                    data_length: 64,
                    ..Default::default()
                },
            };
            all.push(build_frame(&spec, &[0x5a; 64]));
        }
        let mut roce = 0;
        for inp in all {
            let p = parse(&inp, DEFAULT_UDP_PORT).unwrap();
            let mut f = inp.clone();
            let out = mark_frame_ce(&mut f);
            let q = parse(&f, DEFAULT_UDP_PORT).unwrap_or_else(|e| panic!("marked frame dropped as {e}"));
            assert_eq!(q.ecn, if p.ecn == 0 { 0 } else { 3 });
            assert_eq!(out.is_ce(), p.ecn != 0);
            if p.has(Layers::BTH) {
                roce += 1;
                let (l3, end) = (p.l3_offset as usize, p.ip_end as usize);
                let l4 = p.ip_header_len as usize;
                assert_eq!(icrc::verify(&f[l3..end], l4), Ok(true), "ICRC valid after CE");
            }
        }
        assert_eq!(roce, 3 + 184 + 2);
    }

    /// Frames that are not IP (ARP, truncated headers, a third VLAN tag) are reported and left
    /// unchanged; no truncation of a real frame panics.
    #[test]
    fn non_ip_and_truncated_frames_are_left_alone() {
        let mut all = frames("c09_stacked_vlan.pcap");
        all.extend(frames("c08_ipv6_ext_headers.pcap"));
        all.extend(frames("c06_ecn_codepoints.pcap"));
        for inp in &all {
            for cut in 0..inp.len() {
                let mut f = inp[..cut].to_vec();
                let out = mark_frame_ce(&mut f);
                if !out.is_ce() || out == CeOutcome::AlreadyCe {
                    assert_eq!(f, inp[..cut], "unchanged when not marked");
                }
            }
        }
        let mut arp = vec![0u8; 60];
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(mark_frame_ce(&mut arp), CeOutcome::NotIp);
        // Three tags: not parsed past the second, as the parser does.
        let inp = frames("c06_ecn_codepoints.pcap").remove(1);
        let mut f = inp[..12].to_vec();
        for _ in 0..3 {
            f.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
        }
        f.extend_from_slice(&inp[12..]);
        let before = f.clone();
        assert_eq!(mark_frame_ce(&mut f), CeOutcome::NotIp);
        assert_eq!(f, before);
    }
}
