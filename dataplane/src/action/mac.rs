//! `set_eth_src(mac)`, `set_eth_dst(mac)`: rewrite Ethernet addresses (no checksum covers them;
//! the ICRC starts at the IP header).

use crate::parse::Parsed;
use crate::wire::EthernetAddress;

/// Sets the source MAC.
#[inline]
pub fn set_src(frame: &mut [u8], p: &mut Parsed, m: EthernetAddress) {
    frame[6..12].copy_from_slice(&m.0);
    p.eth_src = m;
}

/// Sets the destination MAC.
#[inline]
pub fn set_dst(frame: &mut [u8], p: &mut Parsed, m: EthernetAddress) {
    frame[0..6].copy_from_slice(&m.0);
    p.eth_dst = m;
}
