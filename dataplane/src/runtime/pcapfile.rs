//! pcap files around replays: counting an input's records (how a replay knows its input is
//! over: net_pcap gives no end-of-file signal) and merging per-queue outputs.
//!
//! Files are read with libpcap itself (the `pcap` crate), as net_pcap reads them: one
//! `pcap_next_ex` per record, so the count agrees with what the ports will receive whatever the
//! file holds. What libpcap 1.10 does with a classic pcap file (`sf-pcap.c`), as the tests below
//! check:
//! - both byte orders; microsecond, nanosecond and Kuznetzov (24-byte record header) magics;
//!   versions 2.0 to 2.4 (caplen and len swapped before 2.3, maybe swapped in 2.3) and 543.0;
//! - a record whose caplen is at most the file's snapshot length is delivered with caplen bytes,
//!   even when caplen < len (a snaplen-truncated capture, as `tcpdump -s 64` writes);
//! - a record whose caplen exceeds the snapshot length is delivered truncated to it (the rest
//!   is skipped);
//! - a record whose caplen exceeds the link type's maximum (262144 for Ethernet) is an error:
//!   its header is consumed and reading goes on right after it;
//! - a record (or record header) cut short by the end of the file is an error, then the end.
//!
//! The snapshot length is the header's, or the link type's maximum when the header says 0 or
//! more than `i32::MAX`, plus 14 for Kuznetzov Ethernet files. libpcap also reads pcapng files.
//!
//! A read error with more bytes of the file after it (a damaged record header in the middle of
//! a file) is refused here: what libpcap makes of the bytes that follow is not what was written
//! (see [`scan`]). Only a last record cut short by the end of the file is an error that is
//! counted and passed.
//!
//! Files are written with [`Writer`], which checks every write (libpcap's `pcap_dump` goes
//! through stdio and reports none) and syncs the file to disk at the end.

use pcap::{Capture, Offline, Precision};
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// The first bytes of a nanosecond pcap file, little and big endian (libpcap reports only the
/// precision it was asked for, not the file's).
const MAGIC_NS: [[u8; 4]; 2] = [[0x4d, 0x3c, 0xb2, 0xa1], [0xa1, 0xb2, 0x3c, 0x4d]];

extern "C" {
    /// libpcap's `pcap_snapshot` (not wrapped by the crate): the snapshot length of a handle.
    fn pcap_snapshot(p: *mut std::ffi::c_void) -> std::ffi::c_int;
    /// libpcap's `pcap_file`: the stdio stream a savefile handle reads (NULL for live handles).
    fn pcap_file(p: *mut std::ffi::c_void) -> *mut std::ffi::c_void;
    /// C's `ftell`: the position of a stdio stream, in bytes from the start of the file.
    fn ftell(stream: *mut std::ffi::c_void) -> std::ffi::c_long;
}

/// Where libpcap is in the file of `cap` (bytes from the start), if it can tell.
fn position(cap: &Capture<Offline>) -> Option<u64> {
    // SAFETY: `as_ptr` is the handle `cap` owns, open while `cap` lives; `pcap_file` reads a
    // field of it.
    let f = unsafe { pcap_file(cap.as_ptr().cast()) };
    if f.is_null() {
        return None;
    }
    // SAFETY: `f` is the open stream of the savefile `cap` owns.
    let pos = unsafe { ftell(f) };
    u64::try_from(pos).ok()
}

/// The snapshot length libpcap uses for a file: no record is delivered longer.
fn snapshot(cap: &Capture<Offline>) -> u32 {
    // SAFETY: `as_ptr` is the handle `cap` owns, open while `cap` lives; `pcap_snapshot` only
    // reads a field of it.
    unsafe { pcap_snapshot(cap.as_ptr().cast()) as u32 }
}

/// What a replay of a pcap file gives: the records delivered and the errors on the way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Input {
    /// Records delivered (each one a packet received, or counted `rx_nombuf` or, when no mbuf
    /// chain could hold it, `ierrors`, by net_pcap).
    pub records: u64,
    /// `pcap_next_ex` errors (each one counted in net_pcap's `ierrors`).
    pub errors: u64,
}

/// The path as libpcap takes it (a C string; the crate would pass no name at all for a path
/// that is not UTF-8).
fn name(path: &Path) -> Result<&str, String> {
    path.to_str().ok_or_else(|| format!("{}: libpcap needs a UTF-8 path", path.display()))
}

/// Opens a pcap file with libpcap, timestamps in `precision` (libpcap scales them).
fn open(path: &Path, precision: Precision) -> Result<Capture<Offline>, String> {
    File::open(path).map_err(|e| format!("{}: cannot open: {e}", path.display()))?;
    Capture::from_file_with_precision(name(path)?, precision)
        .map_err(|e| format!("{}: not a pcap file: {e}", path.display()))
}

/// Whether a classic pcap file's timestamps count nanoseconds (a pcapng file counts as
/// microseconds).
fn nanos(path: &Path) -> Result<bool, String> {
    let mut magic = [0u8; 4];
    let mut f = File::open(path).map_err(|e| format!("{}: cannot open: {e}", path.display()))?;
    Ok(f.read_exact(&mut magic).is_ok() && MAGIC_NS.contains(&magic))
}

/// Reads every record of `cap` with `pcap_next_ex`, handing each to `record`; returns the
/// errors (`PCAP_ERROR`: a record cut short by the end of the file) passed on the way, as
/// net_pcap does.
///
/// Errors: a read error of the file itself, which libpcap reports as "error reading dump file"
/// (after one, it would report an error at every later call instead of the end); a record
/// libpcap cannot read with more bytes of the file after it (a damaged record header: libpcap
/// goes on reading the bytes after the header as if they were the next record, so the rest of
/// the file is not read as written). The message names the file, the record (from 1) and the
/// byte offset of its header.
fn read_all(path: &Path, cap: &mut Capture<Offline>, mut record: impl FnMut(pcap::Packet<'_>)) -> Result<u64, String> {
    let file_len = std::fs::metadata(path).map(|m| m.len()).ok();
    let mut errors = 0;
    let mut n = 0u64;
    loop {
        n += 1;
        match cap.next_packet() {
            Ok(p) => record(p),
            Err(pcap::Error::NoMorePackets) => return Ok(errors),
            Err(pcap::Error::PcapError(e)) if !e.starts_with("error reading dump file") => {
                errors += 1;
                if let (Some(end), Some(len)) = (position(cap), file_len) {
                    if end < len {
                        let at = record_offset(path, n).map(|s| format!(" at byte offset {s}")).unwrap_or_default();
                        return Err(format!(
                            "{}: record {n}{at} cannot be read ({e}), and {} more bytes of the file follow it: \
                             the rest of the file cannot be read as written",
                            path.display(),
                            len - end
                        ));
                    }
                }
            }
            Err(e) => return Err(format!("{}: cannot read: {e}", path.display())),
        }
    }
}

/// Where record `n` (from 1) of a pcap file starts, in bytes from the start of the file: read
/// again up to it (`ftell` costs a system call, so only a failure asks).
fn record_offset(path: &Path, n: u64) -> Option<u64> {
    let mut cap = open(path, Precision::Micro).ok()?;
    for _ in 1..n {
        if let Err(pcap::Error::NoMorePackets) = cap.next_packet() {
            return None;
        }
    }
    position(&cap)
}

/// Reads a pcap file with libpcap, as net_pcap will: counts the records it delivers and the
/// errors it reports (at most one: a last record cut short by the end of the file).
///
/// Errors: the file cannot be opened or read, is not a file libpcap reads, or has a record
/// libpcap cannot read before its end (the message names the file, the record and its byte
/// offset: see [`read_all`]).
pub fn scan(path: &Path) -> Result<Input, String> {
    let mut cap = open(path, Precision::Micro)?;
    let mut records = 0;
    let errors = read_all(path, &mut cap, |_| records += 1)?;
    Ok(Input { records, errors })
}

/// What a pcap file holds: records, their captured bytes, and read errors ([`scan`]'s, with the
/// bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Contents {
    /// Records libpcap delivers.
    pub records: u64,
    /// Their captured bytes (`caplen`), summed.
    pub bytes: u64,
    /// Read errors: 1 when the last record is cut short by the end of the file, else 0.
    pub errors: u64,
}

/// Reads a pcap file with libpcap: its records, their captured bytes and its read errors.
///
/// Errors: as [`scan`].
pub fn contents(path: &Path) -> Result<Contents, String> {
    let mut cap = open(path, Precision::Micro)?;
    let (mut records, mut bytes) = (0, 0);
    let errors = read_all(path, &mut cap, |p| {
        records += 1;
        bytes += u64::from(p.header.caplen);
    })?;
    Ok(Contents { records, bytes, errors })
}

/// Counts the records of a pcap file that libpcap (and so net_pcap) will deliver ([`scan`]'s
/// `records`).
pub fn count_records(path: &Path) -> Result<u64, String> {
    scan(path).map(|i| i.records)
}

/// The classic pcap magic (microsecond timestamps), as written in the file header.
const MAGIC_MICROS: u32 = 0xa1b2_c3d4;
/// The nanosecond-timestamp pcap magic.
const MAGIC_NANOS: u32 = 0xa1b2_3c4d;
/// `LINKTYPE_ETHERNET`.
const LINKTYPE_ETHERNET: u32 = 1;

/// A classic pcap file (version 2.4, little endian) written with every write checked, then
/// flushed and synced to disk by [`Writer::finish`].
///
/// Errors of every method name the file and the OS error (such as "No space left on device
/// (os error 28)").
#[derive(Debug)]
pub struct Writer {
    out: BufWriter<File>,
    path: PathBuf,
}

impl Writer {
    /// Creates (or truncates) `path` and writes the file header: link type `linktype` (a
    /// `LINKTYPE_*` value), snapshot length `snaplen` (bytes), timestamps in nanoseconds if
    /// `nanos`, else microseconds.
    pub fn create(path: &Path, linktype: u32, snaplen: u32, nanos: bool) -> Result<Writer, String> {
        let f = File::create(path).map_err(|e| format!("{}: cannot create: {e}", path.display()))?;
        let mut w = Writer { out: BufWriter::with_capacity(1 << 16, f), path: path.to_path_buf() };
        let magic = if nanos { MAGIC_NANOS } else { MAGIC_MICROS };
        let mut h = Vec::with_capacity(24);
        h.extend_from_slice(&magic.to_le_bytes());
        h.extend_from_slice(&2u16.to_le_bytes());
        h.extend_from_slice(&4u16.to_le_bytes());
        h.extend_from_slice(&0i32.to_le_bytes()); // thiszone
        h.extend_from_slice(&0u32.to_le_bytes()); // sigfigs
        h.extend_from_slice(&snaplen.to_le_bytes());
        h.extend_from_slice(&linktype.to_le_bytes());
        w.put(&h)?;
        Ok(w)
    }

    fn put(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.out.write_all(bytes).map_err(|e| format!("{}: cannot write: {e}", self.path.display()))
    }

    /// Writes one record: capture time `secs` and `frac` (µs or ns, as the file counts), the
    /// captured bytes `data` (its caplen) of a frame of `len` bytes on the wire.
    pub fn record(&mut self, secs: u32, frac: u32, len: u32, data: &[u8]) -> Result<(), String> {
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&secs.to_le_bytes());
        h[4..8].copy_from_slice(&frac.to_le_bytes());
        h[8..12].copy_from_slice(&(data.len() as u32).to_le_bytes());
        h[12..16].copy_from_slice(&len.to_le_bytes());
        self.put(&h)?;
        self.put(data)
    }

    /// Flushes the buffer and syncs the file to disk (`fsync`): only then is it complete.
    pub fn finish(self) -> Result<(), String> {
        let path = self.path;
        let f = self.out.into_inner().map_err(|e| format!("{}: cannot write: {}", path.display(), e.error()))?;
        f.sync_all().map_err(|e| format!("{}: cannot write: {e}", path.display()))
    }
}

/// Writes an empty pcap file (Ethernet link type, snapshot length 65535, microseconds): an
/// input with no packets.
pub fn write_empty(path: &Path) -> Result<(), String> {
    Writer::create(path, LINKTYPE_ETHERNET, 65535, false)?.finish()
}

/// Merges pcap files `parts` into `out`, ordered by timestamp (stable: ties keep the order of
/// `parts`, then of records). Used to join the per-tx-queue files of one port, and the inputs
/// of a port given several.
///
/// Each part contributes the records libpcap delivers from it (its errors are left out), with
/// their captured bytes, original length and capture time. The output is a classic pcap file
/// written by [`Writer`] (every write checked, synced at the end) with the snapshot length and
/// link type of the part whose snapshot length is the largest (so no record is cut again), and
/// the parts' timestamp resolution, or nanoseconds when they differ (a microsecond time then
/// keeps its value, and so the microseconds net_pcap stamps). Returns the records written.
///
/// Errors: a part that cannot be read ([`scan`]'s errors), or a write to `out` that fails (the
/// message names `out` and the OS error).
pub fn merge(parts: &[&Path], out: &Path) -> Result<u64, String> {
    let mut nanosecond = false;
    for p in parts {
        nanosecond |= nanos(p)?;
    }
    let precision = if nanosecond { Precision::Nano } else { Precision::Micro };
    let mut all = Vec::new();
    let mut widest: Option<(u32, u32)> = None;
    for p in parts {
        let mut cap = open(p, precision)?;
        read_all(p, &mut cap, |r| all.push((*r.header, r.data.to_vec())))?;
        let snap = snapshot(&cap);
        if widest.is_none_or(|(s, _)| snap > s) {
            widest = Some((snap, cap.get_datalink().0 as u32));
        }
    }
    // Stable. Seconds as the file holds them: libpcap reads them signed.
    all.sort_by_key(|(h, _)| (h.ts.tv_sec as u32, h.ts.tv_usec));
    let (snaplen, linktype) = widest.unwrap_or((65535, LINKTYPE_ETHERNET));
    let mut w = Writer::create(out, linktype, snaplen, nanosecond)?;
    for (h, data) in &all {
        w.record(h.ts.tv_sec as u32, h.ts.tv_usec as u32, h.len, data)?;
    }
    w.finish()?;
    Ok(all.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    /// The classic pcap magic, microsecond timestamps.
    const MICROS: u32 = 0xa1b2_c3d4;
    /// The nanosecond-timestamp magic.
    const NANOS: u32 = 0xa1b2_3c4d;
    /// Alexey Kuznetzov's patched libpcap: 24-byte record headers (8 bytes more after `len`).
    const KUZNETZOV: u32 = 0xa1b2_cd34;
    /// Link type Ethernet (`LINKTYPE_ETHERNET`).
    const LINKTYPE_ETHERNET: u32 = 1;

    /// A directory of its own for a test's files (libpcap reads files by name), removed on drop.
    struct Dir(PathBuf);

    impl Dir {
        fn new() -> Dir {
            static N: AtomicU32 = AtomicU32::new(0);
            let n = N.fetch_add(1, Ordering::Relaxed);
            let d = std::env::temp_dir().join(format!("dpu-pcapfile-{}-{n}", std::process::id()));
            std::fs::create_dir_all(&d).unwrap();
            Dir(d)
        }

        fn file(&self, name: &str, bytes: &[u8]) -> PathBuf {
            let p = self.0.join(name);
            std::fs::write(&p, bytes).unwrap();
            p
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn write(path: &Path, recs: &[(u64, &[u8])]) {
        let mut w = PcapWriter::new(File::create(path).unwrap()).unwrap();
        for (us, d) in recs {
            w.write_packet(&PcapPacket::new(Duration::from_micros(*us), d.len() as u32, d)).unwrap();
        }
    }

    /// A hand-built pcap file: any magic, version, byte order and snapshot length.
    struct Built {
        big_endian: bool,
        magic: u32,
        bytes: Vec<u8>,
    }

    impl Built {
        fn new(magic: u32, big_endian: bool, version: (u16, u16), snaplen: u32) -> Built {
            let mut b = Built { big_endian, magic, bytes: Vec::new() };
            b.u32(magic);
            b.u16(version.0);
            b.u16(version.1);
            b.u32(0);
            b.u32(0);
            b.u32(snaplen);
            b.u32(LINKTYPE_ETHERNET);
            b
        }

        /// A little-endian microsecond file of version 2.4.
        fn le(snaplen: u32) -> Built {
            Built::new(MICROS, false, (2, 4), snaplen)
        }

        fn u16(&mut self, v: u16) {
            let b = if self.big_endian { v.to_be_bytes() } else { v.to_le_bytes() };
            self.bytes.extend_from_slice(&b);
        }

        fn u32(&mut self, v: u32) {
            let b = if self.big_endian { v.to_be_bytes() } else { v.to_le_bytes() };
            self.bytes.extend_from_slice(&b);
        }

        /// A record of `caplen` bytes (each its index in the record, plus `tag`) with `len` in
        /// the length field; the fields in file order (`first`, `second`) for swapped versions.
        fn record(mut self, secs: u32, frac: u32, first: u32, second: u32, data: &[u8]) -> Built {
            self.u32(secs);
            self.u32(frac);
            self.u32(first);
            self.u32(second);
            if self.magic == KUZNETZOV {
                self.bytes.extend_from_slice(&[0xee; 8]);
            }
            self.bytes.extend_from_slice(data);
            self
        }

        /// A record holding `data` whole with `len` in its length field.
        fn rec(self, len: u32, data: &[u8]) -> Built {
            let n = data.len() as u32;
            self.record(1_700_000_000, 0, n, len, data)
        }

        fn cut(mut self, bytes: usize) -> Built {
            self.bytes.truncate(self.bytes.len() - bytes);
            self
        }

        /// Every call of `pcap_next_ex` until the end: `Some((caplen, len, data))` per record,
        /// `None` per error.
        #[allow(clippy::type_complexity)]
        fn read(&self) -> Vec<Option<(u32, u32, Vec<u8>)>> {
            let dir = Dir::new();
            let mut cap = open(&dir.file("f.pcap", &self.bytes), Precision::Micro).unwrap();
            let mut out = Vec::new();
            loop {
                match cap.next_packet() {
                    Ok(p) => {
                        assert_eq!(p.data.len(), p.header.caplen as usize);
                        out.push(Some((p.header.caplen, p.header.len, p.data.to_vec())))
                    }
                    Err(pcap::Error::NoMorePackets) => break,
                    Err(_) => out.push(None),
                }
                assert!(out.len() < 100, "no end");
            }
            assert!(matches!(cap.next_packet(), Err(pcap::Error::NoMorePackets)), "the end stays the end");
            out
        }

        /// The snapshot length libpcap takes for the file.
        fn snapshot(&self) -> u32 {
            let dir = Dir::new();
            snapshot(&open(&dir.file("f.pcap", &self.bytes), Precision::Micro).unwrap())
        }
    }

    fn frame(n: usize, tag: u8) -> Vec<u8> {
        (0..n).map(|i| (i as u8).wrapping_add(tag)).collect()
    }

    fn try_scan(bytes: &[u8]) -> Result<Input, String> {
        let dir = Dir::new();
        scan(&dir.file("f.pcap", bytes))
    }

    fn scan_bytes(bytes: &[u8]) -> Input {
        try_scan(bytes).unwrap()
    }

    #[test]
    fn snaplen_truncated_records_are_delivered_with_their_captured_bytes() {
        // What `tcpdump -s 64` writes: snaplen 64, each record 64 bytes of an 82-byte frame.
        let mut b = Built::le(64);
        for i in 0..5 {
            b = b.rec(82, &frame(64, i));
        }
        let got = b.read();
        assert_eq!(got.len(), 5);
        for (i, r) in got.iter().enumerate() {
            assert_eq!(r, &Some((64, 82, frame(64, i as u8))));
        }
        assert_eq!(scan_bytes(&b.bytes), Input { records: 5, errors: 0 });
    }

    #[test]
    fn a_caplen_above_the_snaplen_is_delivered_cut_to_the_snaplen() {
        let b = Built::le(64).rec(100, &frame(100, 0)).rec(82, &frame(64, 1)).rec(50, &frame(100, 2));
        assert_eq!(
            b.read(),
            vec![Some((64, 100, frame(64, 0))), Some((64, 82, frame(64, 1))), Some((64, 50, frame(64, 2)))],
            "the bytes beyond the snaplen are skipped, the next record is intact"
        );
        assert_eq!(scan_bytes(&b.bytes), Input { records: 3, errors: 0 });
    }

    #[test]
    fn a_record_cut_short_by_the_end_of_the_file_is_an_error_then_the_end() {
        let two = |snaplen| Built::le(snaplen).rec(60, &frame(60, 0)).rec(100, &frame(100, 1));
        let whole = Some((60, 60, frame(60, 0)));
        // In the data, in the record header, in the bytes skipped beyond the snaplen.
        for (snaplen, cut) in [(65535, 1), (65535, 99), (65535, 100 + 6), (64, 1), (64, 36), (64, 37), (64, 80)] {
            assert_eq!(two(snaplen).cut(cut).read(), vec![whole.clone(), None], "snaplen {snaplen}, cut {cut}");
            assert_eq!(scan_bytes(&two(snaplen).cut(cut).bytes), Input { records: 1, errors: 1 });
        }
        // Cut exactly at a record boundary: no error.
        assert_eq!(two(65535).cut(116).read(), vec![whole]);
        // An empty file: no records.
        assert_eq!(Built::le(65535).read(), vec![]);
    }

    #[test]
    fn a_caplen_above_the_link_type_maximum_is_an_error_and_reading_goes_on() {
        let mut b = Built::le(0).rec(10, &frame(10, 0));
        b = b.record(1, 0, 262_145, 262_145, &[]); // a header only: the next record follows it
        b = b.rec(70_000, &frame(70_000, 1)).rec(5, &frame(5, 2));
        let got = b.read();
        assert_eq!(got.len(), 4);
        assert_eq!(got[0], Some((10, 10, frame(10, 0))));
        assert_eq!(got[1], None);
        assert_eq!(got[2].as_ref().unwrap().0, 70_000, "snaplen 0 reads as 262144: 70000 bytes fit");
        assert_eq!(got[3], Some((5, 5, frame(5, 2))));
        // What libpcap reads after the damaged header is not what was written (here it
        // happens to be the next record; usually it is data read as a header): refused, naming
        // the record and the offset of its header (24 + 16 + 10).
        let e = try_scan(&b.bytes).unwrap_err();
        assert!(e.contains("f.pcap: record 2 at byte offset 50 cannot be read"), "{e}");
        assert!(e.contains(&format!("{} more bytes of the file follow it", 16 + 70_000 + 16 + 5)), "{e}");
        // The same header at the very end of the file: nothing follows, an error counted.
        let last = Built::le(0).rec(10, &frame(10, 0)).record(1, 0, 262_145, 262_145, &[]);
        assert_eq!(scan_bytes(&last.bytes), Input { records: 1, errors: 1 });
        // The header says more than i32::MAX: the maximum too.
        assert_eq!(Built::le(0x9000_0000).snapshot(), 262_144);
    }

    #[test]
    fn both_byte_orders_and_nanosecond_files_read_alike() {
        for magic in [MICROS, NANOS] {
            for big_endian in [false, true] {
                let b = Built::new(magic, big_endian, (2, 4), 64)
                    .record(7, 999_999, 64, 82, &frame(64, 0))
                    .record(8, 1_500, 100, 100, &frame(100, 1))
                    .record(9, 0, 20, 20, &frame(20, 2));
                let what = format!("magic {magic:08x} big endian {big_endian}");
                assert_eq!(
                    b.read(),
                    vec![Some((64, 82, frame(64, 0))), Some((64, 100, frame(64, 1))), Some((20, 20, frame(20, 2)))],
                    "{what}"
                );
                let dir = Dir::new();
                let f = dir.file("f.pcap", &b.bytes);
                let ns = magic == NANOS;
                assert_eq!(nanos(&f).unwrap(), ns, "{what}");
                let first = |precision| {
                    let h = *open(&f, precision).unwrap().next_packet().unwrap().header;
                    (h.ts.tv_sec, h.ts.tv_usec)
                };
                // Microseconds are what net_pcap stamps; libpcap scales the fraction.
                assert_eq!(first(Precision::Micro), (7, if ns { 999 } else { 999_999 }), "{what}");
                assert_eq!(first(Precision::Nano), (7, if ns { 999_999 } else { 999_999_000 }), "{what}");
                assert_eq!(scan_bytes(&b.bytes), Input { records: 3, errors: 0 }, "{what}");
            }
        }
    }

    #[test]
    fn old_versions_swap_caplen_and_len_and_kuznetzov_records_are_longer() {
        // Before 2.3 (and 543.0): len first. 2.3: swapped only when caplen > len.
        for version in [(2, 2), (543, 0)] {
            let b = Built::new(MICROS, false, version, 65535).record(1, 0, 82, 64, &frame(64, 0));
            assert_eq!(b.read(), vec![Some((64, 82, frame(64, 0)))], "{version:?}");
        }
        let b = Built::new(MICROS, true, (2, 3), 65535).record(1, 0, 82, 64, &frame(64, 0)).record(
            1,
            0,
            64,
            82,
            &frame(64, 1),
        );
        assert_eq!(b.read(), vec![Some((64, 82, frame(64, 0))), Some((64, 82, frame(64, 1)))]);
        // Kuznetzov: 8 more header bytes per record; on Ethernet the snapshot is 14 bytes more.
        let b = Built::new(KUZNETZOV, false, (2, 4), 64).record(1, 0, 70, 70, &frame(70, 0)).record(
            1,
            0,
            90,
            90,
            &frame(90, 1),
        );
        assert_eq!(b.read(), vec![Some((70, 70, frame(70, 0))), Some((78, 90, frame(78, 1)))]);
    }

    #[test]
    fn files_libpcap_refuses_are_errors() {
        // libpcap's own messages.
        for (bytes, why) in [
            (vec![0xd4, 0xc3], "tried to read 4 file header bytes, only got 2"),
            (Built::le(64).bytes[..20].to_vec(), "truncated dump file"),
            (Built::new(MICROS, false, (1, 0), 64).bytes, "archaic pcap savefile format"),
            (Built::new(MICROS, false, (2, 5), 64).bytes, "unsupported pcap savefile version 2.5"),
            (
                vec![0x0a, 0x0d, 0x0d, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                "unknown file format",
            ),
        ] {
            let e = try_scan(&bytes).unwrap_err();
            assert!(e.contains("not a pcap file") && e.contains(why), "{e}");
        }
    }

    #[test]
    fn merging_keeps_truncated_records_and_times() {
        let dir = Dir::new();
        let (a, b, out) = (dir.0.join("a.pcap"), dir.0.join("b.pcap"), dir.0.join("out.pcap"));
        // a: snaplen 64, microseconds; b: nanoseconds, with a record cut short at its end.
        let fa = Built::le(64).record(1, 5, 64, 82, &frame(64, 0)).record(3, 0, 100, 100, &frame(100, 1));
        let fb = Built::new(NANOS, false, (2, 4), 65535)
            .record(2, 7_000, 300, 300, &frame(300, 2))
            .record(1, 5_000, 10, 10, &frame(10, 3))
            .record(4, 0, 50, 50, &frame(50, 4))
            .cut(1);
        std::fs::write(&a, &fa.bytes).unwrap();
        std::fs::write(&b, &fb.bytes).unwrap();
        assert_eq!(merge(&[&a, &b], &out).unwrap(), 4);
        assert!(nanos(&out).unwrap(), "mixed resolutions merge into nanoseconds");
        let mut r = open(&out, Precision::Micro).unwrap();
        assert_eq!(snapshot(&r), 65535, "the largest of the parts");
        let mut got = Vec::new();
        let errors = read_all(&out, &mut r, |p| {
            let h = p.header;
            got.push((h.ts.tv_sec as u64 * 1_000_000 + h.ts.tv_usec as u64, h.len, h.caplen, p.data[0]))
        });
        assert_eq!(errors, Ok(0));
        assert_eq!(
            got,
            vec![(1_000_005, 82, 64, 0), (1_000_005, 10, 10, 3), (2_000_007, 300, 300, 2), (3_000_000, 100, 64, 1)],
            "by time, ties in the order of the parts"
        );
        assert_eq!(scan(&out).unwrap(), Input { records: 4, errors: 0 });
        // The widest part counts microseconds: the output still counts nanoseconds.
        std::fs::write(&b, Built::new(NANOS, false, (2, 4), 32).record(1, 5_000, 10, 10, &frame(10, 3)).bytes).unwrap();
        assert_eq!(merge(&[&b, &a], &out).unwrap(), 3);
        assert!(nanos(&out).unwrap());
        let mut r = open(&out, Precision::Nano).unwrap();
        assert_eq!(snapshot(&r), 64);
        let mut got = Vec::new();
        assert_eq!(read_all(&out, &mut r, |p| got.push((p.header.ts.tv_sec, p.header.ts.tv_usec))), Ok(0));
        assert_eq!(got, vec![(1, 5_000), (1, 5_000), (3, 0)]);
    }

    #[test]
    fn a_write_that_fails_is_an_error_naming_the_file_and_the_os_error() {
        // /dev/full refuses every write with ENOSPC, as a full disk does.
        let dir = Dir::new();
        let a = dir.0.join("a.pcap");
        write(&a, &[(1, &[1; 100]), (2, &[2; 100])]);
        let full = Path::new("/dev/full");
        for e in [merge(&[&a], full).unwrap_err(), write_empty(full).unwrap_err()] {
            assert!(e.contains("/dev/full: cannot write: No space left on device"), "{e}");
        }
        // A record's write fails once the buffer passes on to the file.
        let mut w = Writer::create(full, LINKTYPE_ETHERNET, 65535, false).unwrap();
        let big = vec![0u8; 1 << 17];
        let e = w.record(1, 0, big.len() as u32, &big).unwrap_err();
        assert!(e.contains("No space left on device"), "{e}");
    }

    #[test]
    fn counts_and_merges() {
        let dir = Dir::new();
        let a = dir.0.join("a.pcap");
        let b = dir.0.join("b.pcap");
        write(&a, &[(1, &[1]), (5, &[5])]);
        write(&b, &[(3, &[3]), (5, &[6])]);
        assert_eq!(count_records(&a).unwrap(), 2);
        let out = dir.0.join("out.pcap");
        assert_eq!(merge(&[&a, &b], &out).unwrap(), 4);
        let mut r = PcapReader::new(File::open(&out).unwrap()).unwrap();
        let mut got = Vec::new();
        while let Some(p) = r.next_packet() {
            got.push(p.unwrap().data[0]);
        }
        assert_eq!(got, vec![1, 3, 5, 6]);
        assert!(!nanos(&out).unwrap(), "microsecond parts merge into microseconds");
        // A truncated last record is not counted.
        let bytes = std::fs::read(&a).unwrap();
        std::fs::write(&b, &bytes[..bytes.len() - 1]).unwrap();
        assert_eq!(count_records(&b).unwrap(), 1);
        let empty = dir.0.join("empty.pcap");
        write_empty(&empty).unwrap();
        assert_eq!(std::fs::read(&empty).unwrap(), Built::le(65535).bytes, "little endian 2.4, Ethernet, 65535");
        assert_eq!(count_records(&empty).unwrap(), 0);
        assert!(count_records(&dir.0.join("missing.pcap")).unwrap_err().contains("cannot open"));
    }
}
