//! Traffic generator for the gradient aggregation protocol (`gradient-protocol.md`).
//!
//! - [`workload`]: the AllReduce workload model (parameters, schedule with impairments, tensors,
//!   reference results), shared by every way of sending it;
//! - [`values`]: the value model (`exact` tables or `normal` tensors, and their references), the
//!   one source of payloads and results of the pcap writer and the live generator;
//! - [`plan`]: the address plan (MACs, IPs, ports, QPs of members and appliance);
//! - [`frame`]: the contribution frame of an event;
//! - [`pcap`]: the pcap writer;
//! - [`appliance`]: the appliance config and the expected results that go with a pcap;
//! - [`write_dir`]: all three files into a directory;
//! - [`stream`]: plain UDP and RoCEv2 streams (frame templates, the per-packet stamp);
//! - [`live`]: `pktgen run`, the live generator on DPDK ports.
#![warn(missing_docs, missing_debug_implementations)]
#![deny(unsafe_code)]

pub mod appliance;
pub mod frame;
pub mod live;
pub mod pcap;
pub mod plan;
#[allow(unsafe_code)] // unaligned fixed-size copies of frame templates; each block has its SAFETY line
pub mod stream;
pub mod values;
pub mod workload;

use anyhow::Context;
use dataplane::wire::build::IpAddrBytes;
use dataplane::wire::EthernetAddress;
use std::fs::File;
use std::io::BufWriter;
use std::path::Path;
use workload::Workload;

/// File names written by [`write_dir`].
pub const INPUT_PCAP: &str = "input.pcap";
/// The appliance configuration.
pub const APPLIANCE_TOML: &str = "appliance.toml";
/// The expected results.
pub const EXPECTED_JSON: &str = "expected.json";

/// The addresses of a frame's two ends, and its 802.1Q tag: what a stream's frames
/// ([`stream::StreamSpec`]) and a member's contributions ([`frame::Addresses`]) are sent between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoints {
    /// Ethernet source.
    pub src_mac: EthernetAddress,
    /// Ethernet destination.
    pub dst_mac: EthernetAddress,
    /// 802.1Q TCI (a VID alone: priority 0), if tagged.
    pub vlan: Option<u16>,
    /// IP source.
    pub src_ip: IpAddrBytes,
    /// IP destination, of the source's family.
    pub dst_ip: IpAddrBytes,
}

/// What [`write_dir`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// Frames in the pcap.
    pub packets: u64,
    /// Bytes of those frames.
    pub bytes: u64,
    /// Slots (chunks) per round.
    pub slots: u64,
    /// Rounds.
    pub rounds: u32,
    /// RESULT packets the appliance must send.
    pub result_packets: u64,
}

/// Writes `dir/input.pcap`, `dir/appliance.toml` and `dir/expected.json` for `w`, creating
/// `dir` if needed. The config is first loaded with the appliance's own loader
/// (`dataplane::config::load_str`), so a config the appliance would refuse is never written.
///
/// # Errors
/// An I/O error, or the appliance's refusal of the config (for example slot memory).
pub fn write_dir(w: &Workload, dir: &Path) -> anyhow::Result<Summary> {
    if dir.exists() && !dir.is_dir() {
        anyhow::bail!("{}: exists and is not a directory (--out names the directory to write into)", dir.display());
    }
    std::fs::create_dir_all(dir).with_context(|| format!("{}: cannot create the directory", dir.display()))?;
    let conf_path = dir.join(APPLIANCE_TOML);
    let conf = appliance::appliance_toml(w);
    dataplane::config::load_str(&conf, &conf_path)
        .map_err(|e| anyhow::anyhow!("the generated config is refused by the appliance's loader: {e}"))?;
    std::fs::write(&conf_path, &conf).with_context(|| format!("{}: cannot write", conf_path.display()))?;
    let pcap_path = dir.join(INPUT_PCAP);
    let f = File::create(&pcap_path).with_context(|| format!("{}: cannot create", pcap_path.display()))?;
    let written =
        pcap::write_pcap(w, BufWriter::new(f)).with_context(|| format!("{}: cannot write", pcap_path.display()))?;
    let exp_path = dir.join(EXPECTED_JSON);
    let exp = appliance::expected_json(w, written.packets, written.bytes);
    std::fs::write(&exp_path, serde_json::to_string_pretty(&exp)? + "\n")
        .with_context(|| format!("{}: cannot write", exp_path.display()))?;
    Ok(Summary {
        packets: written.packets,
        bytes: written.bytes,
        slots: w.params.slots(),
        rounds: w.params.rounds,
        result_packets: appliance::expected_result_packets(w),
    })
}
