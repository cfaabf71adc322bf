//! `push_vlan(vid)`, `pop_vlan`, `set_vlan(vid)`: 802.1Q tags (IEEE 802.1Q-2018 9.6).
//!
//! A pushed tag is an 802.1Q C-tag (TPID 0x8100, PCP 0) inserted as the outermost tag, right
//! after the source MAC. Pushing onto a frame that already has the two tags the appliance parses
//! is refused (`vlan_depth`). Tags are outside every checksum and the ICRC.

use crate::buf::PacketBuf;
use crate::parse::{Layers, Parsed};
use crate::stats::Reason;
use crate::wire::vlan::{HEADER_LEN, TPID_8021Q};

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

/// Inserts an 802.1Q tag with `vid` as the outermost tag.
pub fn push<B: PacketBuf>(buf: &mut B, p: &mut Parsed, vid: u16) -> Result<(), Reason> {
    if p.vlan_tags() >= 2 {
        return Err(Reason::VlanDepth);
    }
    if !buf.prepend(HEADER_LEN) {
        return Err(Reason::NoMbuf);
    }
    let f = buf.data_mut();
    f.copy_within(HEADER_LEN..HEADER_LEN + 12, 0);
    f[12..14].copy_from_slice(&TPID_8021Q.to_be_bytes());
    f[14..16].copy_from_slice(&(vid & 0x0fff).to_be_bytes());
    if p.has(Layers::VLAN_OUTER) {
        p.layers.insert(Layers::VLAN_INNER);
        p.vid_inner = p.vid_outer;
        p.pcp_inner = p.pcp_outer;
    }
    p.layers.insert(Layers::VLAN_OUTER);
    p.vlan_outer_tpid = TPID_8021Q;
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
        p.vid_outer = p.vid_inner;
        p.pcp_outer = p.pcp_inner;
        p.vlan_outer_tpid = TPID_8021Q;
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
    let tci = u16::from_be_bytes([frame[14], frame[15]]);
    frame[14..16].copy_from_slice(&((tci & 0xf000) | (vid & 0x0fff)).to_be_bytes());
    p.vid_outer = vid & 0x0fff;
}
