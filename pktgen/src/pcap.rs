//! Writing a workload's contributions to a classic pcap file (Ethernet, µs timestamps).

use crate::frame;
use crate::workload::Workload;
use pcap_file::pcap::{PcapPacket, PcapWriter};
use std::io::Write;
use std::time::Duration;

/// The capture time (s since the Unix epoch) of the workload's time 0, fixed so that runs are
/// reproducible byte for byte.
pub const EPOCH_S: u64 = 1_700_000_000;

/// What was written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Written {
    /// Frames (pcap records).
    pub packets: u64,
    /// Bytes of all frames (without the pcap record headers).
    pub bytes: u64,
}

/// Writes every event of `w` as one frame, stamped `EPOCH_S` s + its `time_us` µs, in event
/// order. Each round's tensors are generated when its first event is written.
///
/// # Errors
/// The writer's.
pub fn write_pcap<W: Write>(w: &Workload, out: W) -> Result<Written, pcap_file::PcapError> {
    let mut pw = PcapWriter::new(out)?;
    let mut done = Written::default();
    let mut tensors: Option<(u32, Vec<Vec<u8>>)> = None;
    let mut buf = Vec::new();
    for e in &w.events {
        if tensors.as_ref().map(|t| t.0) != Some(e.round_index) {
            tensors = Some((e.round_index, w.tensors(e.round_index)));
        }
        let t = &tensors.as_ref().expect("set above").1;
        let payload = w.chunk_of(&t[e.rank as usize], e.offset, e.count);
        let n = frame::build_frame(&w.params, e, payload, &mut buf);
        let ts = Duration::from_secs(EPOCH_S) + Duration::from_micros(e.time_us);
        pw.write_packet(&PcapPacket::new(ts, n as u32, &buf[..n]))?;
        done.packets += 1;
        done.bytes += n as u64;
    }
    Ok(done)
}
