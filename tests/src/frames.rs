//! Building test frames: Ethernet (optionally 802.1Q-tagged) / IPv4 / UDP with valid checksums.

use dataplane::wire::ipv4::{Ipv4Packet, Ipv4Repr};
use dataplane::wire::udp::{UdpPacket, UdpRepr};

/// What a test UDP frame carries.
#[derive(Debug, Clone)]
pub struct Udp4 {
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// An 802.1Q VID, if tagged.
    pub vlan: Option<u16>,
    /// Source address.
    pub src: [u8; 4],
    /// Destination address.
    pub dst: [u8; 4],
    /// UDP source port.
    pub sport: u16,
    /// UDP destination port.
    pub dport: u16,
    /// DSCP.
    pub dscp: u8,
    /// ECN.
    pub ecn: u8,
    /// TTL.
    pub ttl: u8,
    /// Payload bytes.
    pub payload: Vec<u8>,
}

impl Default for Udp4 {
    fn default() -> Self {
        Udp4 {
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_mac: [2, 0, 0, 0, 0, 1],
            vlan: None,
            src: [10, 0, 0, 1],
            dst: [10, 0, 0, 2],
            sport: 40000,
            dport: 9000,
            dscp: 0,
            ecn: 0,
            ttl: 64,
            payload: vec![1, 2, 3, 4],
        }
    }
}

impl Udp4 {
    /// The frame's bytes, with valid IPv4 and UDP checksums.
    pub fn build(&self) -> Vec<u8> {
        let l2 = if self.vlan.is_some() { 18 } else { 14 };
        let udp_len = 8 + self.payload.len();
        let mut f = vec![0u8; l2 + 20 + udp_len];
        f[0..6].copy_from_slice(&self.dst_mac);
        f[6..12].copy_from_slice(&self.src_mac);
        if let Some(v) = self.vlan {
            f[12..14].copy_from_slice(&[0x81, 0x00]);
            f[14..16].copy_from_slice(&v.to_be_bytes());
        }
        f[l2 - 2..l2].copy_from_slice(&[0x08, 0x00]);
        let ip = Ipv4Repr {
            src_addr: self.src,
            dst_addr: self.dst,
            protocol: 17,
            payload_len: udp_len as u16,
            ttl: self.ttl,
            dscp: self.dscp,
            ecn: self.ecn,
            ident: 1,
            dont_frag: true,
        };
        ip.emit(&mut f[l2..]).unwrap();
        Ipv4Packet::new_checked(&mut f[l2..]).unwrap().fill_checksum();
        let u = UdpRepr { src_port: self.sport, dst_port: self.dport, payload_len: self.payload.len() as u16 };
        u.emit(&mut f[l2 + 20..]).unwrap();
        f[l2 + 28..].copy_from_slice(&self.payload);
        UdpPacket::new_checked(&mut f[l2 + 20..]).unwrap().fill_checksum_v4(self.src, self.dst);
        f
    }
}

/// `f` (an IPv4 frame whose header starts at `l3`) with 40 bytes of options (No Operation):
/// IHL 15, the total length and header checksum updated; the UDP checksum does not cover them.
pub fn with_ipv4_options(f: &[u8], l3: usize) -> Vec<u8> {
    let mut g = f[..l3 + 20].to_vec();
    g.extend_from_slice(&[1; 40]);
    g.extend_from_slice(&f[l3 + 20..]);
    g[l3] = 0x4f;
    let total = u16::from_be_bytes([g[l3 + 2], g[l3 + 3]]) + 40;
    g[l3 + 2..l3 + 4].copy_from_slice(&total.to_be_bytes());
    Ipv4Packet::new_unchecked(&mut g[l3..l3 + 60]).fill_checksum();
    g
}

/// `f` with an 802.1Q tag of VID `vid` (PCP 0) pushed after its MAC addresses.
pub fn pushed(f: &[u8], vid: u16) -> Vec<u8> {
    let mut g = f[..12].to_vec();
    g.extend_from_slice(&[0x81, 0x00]);
    g.extend_from_slice(&vid.to_be_bytes());
    g.extend_from_slice(&f[12..]);
    g
}

/// Dissects `pcap` with tshark, returning one line per frame of the `fields`, tab-separated,
/// with IPv4 and UDP checksum validation on. `None` if tshark is not installed.
pub fn tshark_fields(pcap: &std::path::Path, fields: &[&str]) -> Option<Vec<String>> {
    let mut cmd = std::process::Command::new("tshark");
    cmd.arg("-r").arg(pcap).args(["-o", "ip.check_checksum:TRUE", "-o", "udp.check_checksum:TRUE", "-T", "fields"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().ok()?;
    if !out.status.success() {
        panic!("tshark failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Some(String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect())
}
