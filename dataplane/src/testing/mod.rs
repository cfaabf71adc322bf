//! Fixtures shared by the unit tests, the functional tests and the fuzz targets: pcap files read
//! and written, the shipped capture cases, gradient contributions as members send them, and the
//! `[[port]]` tables of test configs. One copy
//! of each, so that a fixture changes in one place.
//!
//! Built for the crate's own tests and, with the `testing` feature, for the functional-test
//! crate and the fuzz targets. Test code: it panics on any I/O error, naming the file.

mod grad;

pub use grad::{
    contribution, contribution_spec, APPLIANCE_IPV4, APPLIANCE_IPV6, APPLIANCE_MAC, APPLIANCE_QPN,
    ROCEV2_SOURCE_PORT_BASE,
};

use crate::wire::build::{FrameSpec, IpAddrBytes};
use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The records of a pcap file, in order: each record's capture time (µs since the Unix epoch)
/// and bytes.
pub fn read_pcap_records(path: &Path) -> Vec<(u64, Vec<u8>)> {
    let f = File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut r = PcapReader::new(f).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        let p = p.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        out.push((p.timestamp.as_micros() as u64, p.data.into_owned()));
    }
    out
}

/// The frames of a pcap file, in order.
pub fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    read_pcap_records(path).into_iter().map(|(_, f)| f).collect()
}

/// Writes frames to a pcap file, 1 µs apart from 1 s after the epoch; `orig_len` (if given per
/// frame, bytes) marks truncated captures.
pub fn write_pcap(path: &Path, frames: &[(Vec<u8>, Option<u32>)]) {
    let mut w = writer(path);
    for (i, (f, orig)) in frames.iter().enumerate() {
        let orig = orig.unwrap_or(f.len() as u32);
        w.write_packet(&PcapPacket::new(Duration::from_micros(1_000_000 + i as u64), orig, f)).unwrap();
    }
}

/// Writes frames with explicit capture times (µs since the epoch) to a pcap file.
pub fn write_pcap_at(path: &Path, frames: &[(u64, Vec<u8>)]) {
    let mut w = writer(path);
    for (us, f) in frames {
        w.write_packet(&PcapPacket::new(Duration::from_micros(*us), f.len() as u32, f)).unwrap();
    }
}

fn writer(path: &Path) -> PcapWriter<File> {
    let f = File::create(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    PcapWriter::new(f).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The capture cases shipped with the crate (`dataplane/tests/data/cases`).
pub fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/cases")
}

/// The frames of the shipped capture case `name` (a file of [`cases_dir`]), in order.
pub fn case_frames(name: &str) -> Vec<Vec<u8>> {
    read_pcap(&cases_dir().join(name))
}

/// Asserts that the IPv4 header at `frame[l3..]` carries a checksum equal to a full recompute
/// (RFC 1071; after an incremental update, RFC 1624: 0x0000, never 0xFFFF), and returns it.
pub fn ipv4_checksum_is_a_full_recompute(frame: &[u8], l3: usize) -> u16 {
    let ihl = (frame[l3] & 0xf) as usize * 4;
    let mut h = frame[l3..l3 + ihl].to_vec();
    let stored = u16::from_be_bytes([h[10], h[11]]);
    h[10] = 0;
    h[11] = 0;
    assert_eq!(stored, crate::wire::checksum::checksum(&h), "stored IPv4 checksum equals a full recompute");
    stored
}

/// Host `last` of the tests' networks: 10.0.0.`last`, or fd00::`last` when `v6`.
pub fn host_ip(v6: bool, last: u8) -> IpAddrBytes {
    if v6 {
        IpAddrBytes::V6([0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, last])
    } else {
        IpAddrBytes::V4([10, 0, 0, last])
    }
}

/// The frame of `spec` carrying `payload` ([`crate::wire::build::build`]), in a buffer of its
/// length. Panics if the spec cannot be built (addresses of two families, a datagram over 64 KiB).
pub fn build_frame(spec: &FrameSpec, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; spec.frame_len(payload.len())];
    crate::wire::build::build(spec, payload, &mut f).unwrap();
    f
}

/// Loads a config as the fuzz targets do (`text` as the file "fuzz.toml"): the loaded config, or
/// `None` when it is refused, after asserting that the error is one line that names the file.
pub fn load_fuzzed(text: &str) -> Option<crate::config::Loaded> {
    match crate::config::load_str(text, Path::new("fuzz.toml")) {
        Ok(l) => Some(l),
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.starts_with("fuzz.toml: "), "{msg}");
            assert!(!msg.contains('\n'), "one line: {msg:?}");
            None
        }
    }
}

/// The `[[port]]` tables of `n` null ports (`net_null0` ...), numbered 0 to `n - 1` in order: the
/// ports of a test config whose frames go through the packet core or a replay, not a network.
pub fn null_ports(n: usize) -> String {
    (0..n).map(|i| format!("[[port]]\nvdev = \"net_null{i}\"\n")).collect()
}

/// A running configuration for tests of runtime changes (`config::update`, the `control` fuzz
/// target): two null ports; tables `l2` (exact, two entries, one counting `two` and sending to
/// multicast group 1), `routes` (lpm, one entry) and `acl` (ternary + range, one entry with
/// priority 5 through meter `m`); srTCM meter `m`; group 1 with a copy to each port.
pub const PIPELINE_CONF: &str = r#"
[[port]]
vdev = "net_null0"
[[port]]
vdev = "net_null1"
[[table]]
name = "l2"
key = [{ field = "eth.dst", match = "exact" }]
entry = [
    { key = ["02:00:00:00:00:01"], action = "forward(0)" },
    { key = ["02:00:00:00:00:02"], action = "count(two); multicast(1)" },
]
[[table]]
name = "routes"
key = [{ field = "ipv4.dst", match = "lpm" }]
default_action = "goto(acl)"
entry = [{ key = ["10.0.0.0/8"], action = "dec_ttl; forward(1)" }]
[[table]]
name = "acl"
key = [{ field = "ipv4.src", match = "ternary" }, { field = "udp.dst_port", match = "range" }]
default_action = "forward(1)"
[[table.entry]]
key = ["10.0.0.0&&&255.0.0.0", "9000->9100"]
priority = 5
action = "police(m); forward(0)"
[[meter]]
name = "m"
type = "srtcm"
cir = 1000000
cbs = 3000
ebs = 3000
[[multicast_group]]
id = 1
copy = [{ port = 0 }, { port = 1, actions = "push_vlan(5)" }]
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_written_are_read_back_with_their_times() {
        let dir = std::env::temp_dir().join(format!("dataplane-testing-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("t.pcap");
        write_pcap_at(&p, &[(1_700_000_000_000_001, vec![1, 2, 3]), (1_700_000_000_000_005, vec![4])]);
        assert_eq!(
            read_pcap_records(&p),
            vec![(1_700_000_000_000_001, vec![1, 2, 3]), (1_700_000_000_000_005, vec![4])]
        );
        write_pcap(&p, &[(vec![9; 4], None), (vec![8; 2], Some(100))]);
        assert_eq!(read_pcap_records(&p), vec![(1_000_000, vec![9; 4]), (1_000_001, vec![8; 2])]);
        assert_eq!(read_pcap(&p), vec![vec![9; 4], vec![8; 2]]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn null_ports_are_numbered_in_order() {
        assert_eq!(null_ports(0), "");
        assert_eq!(null_ports(2), "[[port]]\nvdev = \"net_null0\"\n[[port]]\nvdev = \"net_null1\"\n");
    }

    #[test]
    fn the_shipped_cases_are_found() {
        assert!(!case_frames("c02_ipv4_options.pcap").is_empty());
    }
}
