//! `set_eth_src(mac)`, `set_eth_dst(mac)`: rewrite Ethernet addresses (no checksum covers them;
//! the ICRC starts at the IP header).

use crate::parse::Parsed;
use crate::wire::ethernet::EthernetFrame;
use crate::wire::EthernetAddress;

/// Sets the source MAC.
#[inline]
pub fn set_src(frame: &mut [u8], p: &mut Parsed, m: EthernetAddress) {
    EthernetFrame::new_unchecked(frame).set_src(m);
    p.eth_src = m;
}

/// Sets the destination MAC.
#[inline]
pub fn set_dst(frame: &mut [u8], p: &mut Parsed, m: EthernetAddress) {
    EthernetFrame::new_unchecked(frame).set_dst(m);
    p.eth_dst = m;
}
