//! `push_vlan(vid)`, `pop_vlan`, `set_vlan(vid)`: 802.1Q tags (IEEE 802.1Q-2018 9.6).
//!
//! A pushed tag (PCP 0, DEI 0) is inserted as the outermost tag, right after the source MAC: an
//! 802.1Q C-tag (TPID 0x8100) on an untagged frame, an 802.1ad S-tag (TPID 0x88a8) on a tagged
//! one, so that a push makes the provider-bridging stack of IEEE 802.1Q-2018 (S-tag outside,
//! never a C-tag over an S-tag). Pushing onto a frame that already has the two tags the
//! appliance parses is refused (`vlan_depth`). Tags are outside every checksum and the ICRC.

use crate::buf::PacketBuf;
use crate::parse::{Layers, Parsed};
use crate::stats::Reason;
use crate::wire::ethernet::{self, EthernetFrame};
use crate::wire::vlan::{VlanTag, HEADER_LEN, TPID_8021AD, TPID_8021Q};

/// Moves every offset of `p` by `delta` bytes (after a tag was inserted or removed in front).
fn shift(p: &mut Parsed, delta: i32) {
    let mv = |x: &mut u32| {
        if *x != 0 {
            *x = (*x as i32 + delta) as u32
        }
    };
    mv(&mut p.l3_offset);
    mv(&mut p.ip_end);
    mv(&mut p.l4_offset);
    mv(&mut p.bth_offset);
    mv(&mut p.grad_offset);
    mv(&mut p.grad_payload_offset);
}

/// Inserts a tag with `vid` as the outermost tag: a C-tag on an untagged frame, an S-tag on a
/// tagged one (module docs).
pub fn push<B: PacketBuf>(buf: &mut B, p: &mut Parsed, vid: u16) -> Result<(), Reason> {
    if p.vlan_tags() >= 2 {
        return Err(Reason::VlanDepth);
    }
    if !buf.prepend(HEADER_LEN) {
        return Err(Reason::NoMbuf);
    }
    let tpid = if p.has(Layers::VLAN_OUTER) { TPID_8021AD } else { TPID_8021Q };
    let f = buf.data_mut();
    f.copy_within(HEADER_LEN..HEADER_LEN + 12, 0);
    EthernetFrame::new_unchecked(&mut *f).set_ethertype(tpid);
    VlanTag::new_unchecked(&mut f[ethernet::HEADER_LEN..]).set_tci(vid & 0x0fff);
    if p.has(Layers::VLAN_OUTER) {
        p.layers.insert(Layers::VLAN_INNER);
        p.vid_inner = p.vid_outer;
        p.pcp_inner = p.pcp_outer;
    }
    p.layers.insert(Layers::VLAN_OUTER);
    p.vlan_outer_tpid = tpid;
    p.vid_outer = vid & 0x0fff;
    p.pcp_outer = 0;
    if p.l3_offset != 0 {
        shift(p, HEADER_LEN as i32);
    }
    Ok(())
}

/// Removes the outer tag (nothing without one).
pub fn pop<B: PacketBuf>(buf: &mut B, p: &mut Parsed) {
    if !p.has(Layers::VLAN_OUTER) {
        return;
    }
    let f = buf.data_mut();
    f.copy_within(0..12, HEADER_LEN);
    buf.adj(HEADER_LEN);
    if p.has(Layers::VLAN_INNER) {
        // The inner tag becomes the outer one, with its own TPID (0x8100 or 0x88a8); the inner
        // fields are zero again, as for any absent layer.
        p.vlan_outer_tpid = EthernetFrame::new_unchecked(buf.data()).ethertype();
        p.vid_outer = p.vid_inner;
        p.pcp_outer = p.pcp_inner;
        p.vid_inner = 0;
        p.pcp_inner = 0;
        p.layers.remove(Layers::VLAN_INNER);
    } else {
        p.layers.remove(Layers::VLAN_OUTER);
        p.vid_outer = 0;
        p.pcp_outer = 0;
        p.vlan_outer_tpid = 0;
    }
    if p.l3_offset != 0 {
        shift(p, -(HEADER_LEN as i32));
    }
}

/// Sets the VID of the outer tag, keeping PCP and DEI (nothing without a tag).
pub fn set_vid(frame: &mut [u8], p: &mut Parsed, vid: u16) {
    if !p.has(Layers::VLAN_OUTER) {
        return;
    }
    VlanTag::new_unchecked(&mut frame[ethernet::HEADER_LEN..]).set_vid(vid);
    p.vid_outer = vid & 0x0fff;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::VecBuf;
    use crate::parse::parse;

    /// 02:..:02 <- 02:..:01, an S-tag (VID 100) over a C-tag (VID 200) or two S-tags, then a
    /// 4-byte non-IP payload.
    fn double_tagged(inner_tpid: u16) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
        f.extend_from_slice(&TPID_8021AD.to_be_bytes());
        f.extend_from_slice(&(0x2000u16 | 100).to_be_bytes());
        f.extend_from_slice(&inner_tpid.to_be_bytes());
        f.extend_from_slice(&(0xa000u16 | 200).to_be_bytes());
        f.extend_from_slice(&[0x88, 0xb5, 1, 2, 3, 4]);
        f
    }

    /// After each pop, the Parsed the action keeps is what parsing the frame gives (found by
    /// fuzzing: the inner tag's VID and PCP stayed set after it was gone, and an 802.1ad inner
    /// tag became the outer one with TPID 0x8100).
    #[test]
    fn pop_keeps_the_parse_current() {
        for inner in [TPID_8021Q, TPID_8021AD] {
            let mut buf = VecBuf::from_frame(&double_tagged(inner));
            let mut p = parse(buf.data(), 0).unwrap();
            assert_eq!(p.vlan_tags(), 2);
            pop(&mut buf, &mut p);
            assert_eq!(p, parse(buf.data(), 0).unwrap());
            assert_eq!((p.vlan_outer_tpid, p.vid_outer, p.pcp_outer), (inner, 200, 5));
            pop(&mut buf, &mut p);
            assert_eq!(p, parse(buf.data(), 0).unwrap());
            assert_eq!(p.vlan_tags(), 0);
            assert_eq!(buf.data(), &[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x88, 0xb5, 1, 2, 3, 4]);
            pop(&mut buf, &mut p);
            assert_eq!(p, parse(buf.data(), 0).unwrap());
        }
    }

    #[test]
    fn push_then_pop_round_trips() {
        let frame = double_tagged(TPID_8021Q);
        let mut buf = VecBuf::from_frame(&frame);
        let mut p = parse(buf.data(), 0).unwrap();
        pop(&mut buf, &mut p);
        push(&mut buf, &mut p, 7).unwrap();
        assert_eq!(p, parse(buf.data(), 0).unwrap());
        assert_eq!(push(&mut buf, &mut p, 8), Err(Reason::VlanDepth));
        set_vid(buf.data_mut(), &mut p, 9);
        assert_eq!(p, parse(buf.data(), 0).unwrap());
    }

    /// A push onto an untagged frame adds a C-tag; onto a C-tagged or S-tagged one, an S-tag
    /// outside it (never a C-tag over an S-tag); the inner tag keeps its TPID and TCI.
    #[test]
    fn push_adds_a_c_tag_then_an_s_tag() {
        let untagged = [2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x88, 0xb5, 1, 2, 3, 4];
        let mut buf = VecBuf::from_frame(&untagged);
        let mut p = parse(buf.data(), 0).unwrap();
        push(&mut buf, &mut p, 7).unwrap();
        assert_eq!(&buf.data()[12..18], &[0x81, 0x00, 0x00, 7, 0x88, 0xb5]);
        assert_eq!(p, parse(buf.data(), 0).unwrap());
        for inner in [TPID_8021Q, TPID_8021AD] {
            let mut single = untagged[..12].to_vec();
            single.extend_from_slice(&inner.to_be_bytes());
            single.extend_from_slice(&(0xa000u16 | 200).to_be_bytes());
            single.extend_from_slice(&untagged[12..]);
            let mut buf = VecBuf::from_frame(&single);
            let mut p = parse(buf.data(), 0).unwrap();
            push(&mut buf, &mut p, 0x123).unwrap();
            let mut want = vec![0x88, 0xa8, 0x01, 0x23];
            want.extend_from_slice(&inner.to_be_bytes());
            want.extend_from_slice(&[0xa0, 200, 0x88, 0xb5]);
            assert_eq!(&buf.data()[12..22], &want[..], "inner TPID {inner:#x}");
            assert_eq!(p, parse(buf.data(), 0).unwrap());
            assert_eq!((p.vlan_outer_tpid, p.vid_outer, p.vid_inner, p.pcp_inner), (TPID_8021AD, 0x123, 200, 5));
        }
    }
}
