//! pcap files around replays: counting an input's records (how a replay knows its input is
//! over: net_pcap gives no end-of-file signal) and merging per-queue outputs.

use pcap_file::pcap::{PcapReader, PcapWriter};
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

/// Counts the complete records of a classic pcap file, as libpcap (and so net_pcap) will
/// deliver them: a truncated last record is not counted.
///
/// Errors: the file cannot be opened or is not a pcap file (the message names the file).
pub fn count_records(path: &Path) -> Result<u64, String> {
    let f = File::open(path).map_err(|e| format!("{}: cannot open: {e}", path.display()))?;
    let mut r = PcapReader::new(BufReader::new(f)).map_err(|e| format!("{}: not a pcap file: {e}", path.display()))?;
    let mut n = 0u64;
    while let Some(rec) = r.next_packet() {
        match rec {
            Ok(_) => n += 1,
            Err(_) => break, // a truncated record: libpcap stops there too
        }
    }
    Ok(n)
}

/// Writes an empty pcap file (Ethernet link type): an input with no packets.
pub fn write_empty(path: &Path) -> Result<(), String> {
    let f = File::create(path).map_err(|e| format!("{}: cannot create: {e}", path.display()))?;
    PcapWriter::new(f).map_err(|e| format!("{}: cannot write: {e}", path.display()))?;
    Ok(())
}

/// Merges pcap files `parts` into `out`, ordered by timestamp (stable: ties keep the order of
/// `parts`, then of records). Used to join the per-tx-queue files of one port.
pub fn merge(parts: &[&Path], out: &Path) -> Result<u64, String> {
    let mut all = Vec::new();
    let mut header = None;
    for (i, p) in parts.iter().enumerate() {
        let f = File::open(p).map_err(|e| format!("{}: cannot open: {e}", p.display()))?;
        let mut r = PcapReader::new(BufReader::new(f)).map_err(|e| format!("{}: not a pcap file: {e}", p.display()))?;
        if header.is_none() {
            header = Some(r.header());
        }
        let mut j = 0usize;
        while let Some(rec) = r.next_packet() {
            let Ok(rec) = rec else { break };
            all.push((rec.timestamp, i, j, rec.orig_len, rec.data.into_owned()));
            j += 1;
        }
    }
    all.sort_by_key(|a| (a.0, a.1, a.2));
    let f = File::create(out).map_err(|e| format!("{}: cannot create: {e}", out.display()))?;
    let mut w = match header {
        Some(h) => PcapWriter::with_header(f, h),
        None => PcapWriter::new(f),
    }
    .map_err(|e| format!("{}: cannot write: {e}", out.display()))?;
    for (ts, _, _, orig_len, data) in &all {
        let rec = pcap_file::pcap::PcapPacket::new(*ts, *orig_len, data);
        w.write_packet(&rec).map_err(|e| format!("{}: cannot write: {e}", out.display()))?;
    }
    Ok(all.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pcap_file::pcap::PcapPacket;
    use std::time::Duration;

    fn write(path: &Path, recs: &[(u64, &[u8])]) {
        let mut w = PcapWriter::new(File::create(path).unwrap()).unwrap();
        for (us, d) in recs {
            w.write_packet(&PcapPacket::new(Duration::from_micros(*us), d.len() as u32, d)).unwrap();
        }
    }

    #[test]
    fn counts_and_merges() {
        let dir = std::env::temp_dir().join(format!("dpu-pcapfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = dir.join("a.pcap");
        let b = dir.join("b.pcap");
        write(&a, &[(1, &[1]), (5, &[5])]);
        write(&b, &[(3, &[3]), (5, &[6])]);
        assert_eq!(count_records(&a).unwrap(), 2);
        let out = dir.join("out.pcap");
        assert_eq!(merge(&[&a, &b], &out).unwrap(), 4);
        let mut r = PcapReader::new(File::open(&out).unwrap()).unwrap();
        let mut got = Vec::new();
        while let Some(p) = r.next_packet() {
            got.push(p.unwrap().data[0]);
        }
        assert_eq!(got, vec![1, 3, 5, 6]);
        // A truncated last record is not counted.
        let bytes = std::fs::read(&a).unwrap();
        std::fs::write(&b, &bytes[..bytes.len() - 1]).unwrap();
        assert_eq!(count_records(&b).unwrap(), 1);
        let empty = dir.join("empty.pcap");
        write_empty(&empty).unwrap();
        assert_eq!(count_records(&empty).unwrap(), 0);
        assert!(count_records(&dir.join("missing.pcap")).unwrap_err().contains("cannot open"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
