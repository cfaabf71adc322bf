//! pcap files around replays: counting an input's records (how a replay knows its input is
//! over: net_pcap gives no end-of-file signal) and merging per-queue outputs.
//!
//! Inputs are read the way net_pcap reads them: with libpcap's `pcap_next_ex` (libpcap 1.10,
//! `sf-pcap.c`). [`Savefile`] follows it call by call, so that the count of records agrees with
//! what the ports will receive whatever the file holds:
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
//! more than `i32::MAX`, plus 14 for Kuznetzov Ethernet files.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::Path;

/// The classic pcap magic, microsecond timestamps.
const MAGIC_US: u32 = 0xa1b2_c3d4;
/// The nanosecond-timestamp magic.
const MAGIC_NS: u32 = 0xa1b2_3c4d;
/// Alexey Kuznetzov's patched libpcap: 24-byte record headers (8 bytes more after `len`).
const MAGIC_KUZNETZOV: u32 = 0xa1b2_cd34;
/// File header length, bytes.
const FILE_HEADER_LEN: usize = 24;
/// Record header length, bytes (24 with the Kuznetzov magic).
const RECORD_HEADER_LEN: usize = 16;
/// libpcap's `MAXIMUM_SNAPLEN`: the largest caplen it accepts for most link types.
const MAXIMUM_SNAPLEN: u32 = 262_144;
/// Link type Ethernet (`LINKTYPE_ETHERNET`, `DLT_EN10MB`).
const LINKTYPE_ETHERNET: u32 = 1;

/// libpcap's `max_snaplen_for_dlt`: the largest caplen a record of the link type may have.
fn max_caplen(linktype: u32) -> u32 {
    match linktype {
        231 => 128 * 1024 * 1024, // D-Bus
        279 => 8 * 1024 * 1024,   // EBHSCR
        249 => 1024 * 1024,       // USBPcap
        _ => MAXIMUM_SNAPLEN,
    }
}

/// Whether a file's records have caplen and len in the pre-2.3 order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lengths {
    /// Version 2.4 (and later 2.x writers): caplen, then len.
    InOrder,
    /// Versions before 2.3 and 543.0: len, then caplen.
    Swapped,
    /// Version 2.3: swapped when caplen > len.
    MaybeSwapped,
}

/// A record's capture time as the file holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timestamp {
    /// Seconds, read unsigned (libpcap reads them signed: only times after 2038 differ).
    pub secs: u32,
    /// The fraction field: microseconds, or nanoseconds in a nanosecond file (not range
    /// checked, as libpcap does not check it).
    pub frac: u32,
    /// Whether `frac` counts nanoseconds.
    pub nanos: bool,
}

impl Timestamp {
    /// Nanoseconds since the epoch (the sort key of merges).
    pub fn as_nanos(&self) -> u64 {
        self.secs as u64 * 1_000_000_000 + self.frac as u64 * if self.nanos { 1 } else { 1000 }
    }

    /// Microseconds since the epoch, as net_pcap stamps the mbuf (libpcap scales a nanosecond
    /// file's fraction down to microseconds).
    pub fn as_micros(&self) -> u64 {
        self.secs as u64 * 1_000_000 + self.frac as u64 / if self.nanos { 1000 } else { 1 }
    }
}

/// What one call of `pcap_next_ex` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// A record: its capture time, its original length, and its delivered (captured) length;
    /// the bytes are [`Savefile::data`].
    Record {
        /// Capture time.
        ts: Timestamp,
        /// Length on the wire (the header's `len`; not checked against caplen).
        len: u32,
        /// Bytes delivered: the record's caplen, at most the snapshot length.
        caplen: u32,
    },
    /// `PCAP_ERROR`: a damaged or cut-short record (net_pcap counts it in `ierrors`).
    Error,
    /// The end of the file (`PCAP_ERROR_BREAK`).
    End,
}

/// A classic pcap file read record by record as libpcap reads it.
#[derive(Debug)]
pub struct Savefile<R> {
    r: R,
    big_endian: bool,
    nanos: bool,
    record_header_len: usize,
    lengths: Lengths,
    /// The header's link type field (with its FCS bits).
    linktype_field: u32,
    snapshot: u32,
    max_caplen: u32,
    /// Set once a read came up short: every later call returns [`Next::End`].
    at_end: bool,
    data: Vec<u8>,
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

impl<R: Read> Savefile<R> {
    /// Reads and checks the file header (`pcap_check_header`).
    ///
    /// Errors: a read error, or not a classic pcap file libpcap would open (the message says
    /// why).
    pub fn new(mut r: R) -> io::Result<Savefile<R>> {
        let bad = |m: String| io::Error::new(io::ErrorKind::InvalidData, m);
        let mut h = [0u8; FILE_HEADER_LEN];
        let n = read_full(&mut r, &mut h)?;
        let magic_le = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let known = |m: u32| [MAGIC_US, MAGIC_NS, MAGIC_KUZNETZOV].contains(&m);
        let (magic, big_endian) = if n < 4 {
            return Err(bad(format!("{n} bytes: too short for a pcap file header")));
        } else if known(magic_le) {
            (magic_le, false)
        } else if known(magic_le.swap_bytes()) {
            (magic_le.swap_bytes(), true)
        } else {
            return Err(bad(format!("unknown magic number 0x{magic_le:08x} (not a classic pcap file)")));
        };
        if n < FILE_HEADER_LEN {
            return Err(bad(format!("truncated file header: {n} of {FILE_HEADER_LEN} bytes")));
        }
        let u16_at = |i: usize| {
            let b = [h[i], h[i + 1]];
            if big_endian {
                u16::from_be_bytes(b)
            } else {
                u16::from_le_bytes(b)
            }
        };
        let u32_at = |i: usize| {
            let b = [h[i], h[i + 1], h[i + 2], h[i + 3]];
            if big_endian {
                u32::from_be_bytes(b)
            } else {
                u32::from_le_bytes(b)
            }
        };
        let (major, minor) = (u16_at(4), u16_at(6));
        let lengths = match (major, minor) {
            (2, 0..=2) | (543, 0) => Lengths::Swapped,
            (2, 3) => Lengths::MaybeSwapped,
            (2, 4) => Lengths::InOrder,
            _ => return Err(bad(format!("unsupported pcap version {major}.{minor}"))),
        };
        let snaplen = u32_at(16);
        let linktype_field = u32_at(20);
        let linktype = linktype_field & 0x03ff_ffff;
        let max_caplen = max_caplen(linktype);
        let mut snapshot = if snaplen == 0 || snaplen > i32::MAX as u32 { max_caplen } else { snaplen };
        let record_header_len = if magic == MAGIC_KUZNETZOV {
            if linktype == LINKTYPE_ETHERNET {
                snapshot = snapshot.saturating_add(14).min(i32::MAX as u32);
            }
            RECORD_HEADER_LEN + 8
        } else {
            RECORD_HEADER_LEN
        };
        Ok(Savefile {
            r,
            big_endian,
            nanos: magic == MAGIC_NS,
            record_header_len,
            lengths,
            linktype_field,
            snapshot,
            max_caplen,
            at_end: false,
            data: Vec::new(),
        })
    }

    /// The snapshot length libpcap uses for the file: no record is delivered longer.
    pub fn snapshot(&self) -> u32 {
        self.snapshot
    }

    /// The header's link type field.
    pub fn linktype(&self) -> u32 {
        self.linktype_field
    }

    /// Whether timestamps count nanoseconds.
    pub fn nanos(&self) -> bool {
        self.nanos
    }

    /// The bytes of the last [`Next::Record`].
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    fn u32_at(&self, b: &[u8], i: usize) -> u32 {
        let b = [b[i], b[i + 1], b[i + 2], b[i + 3]];
        if self.big_endian {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }
    }

    /// The next call of `pcap_next_ex` (`pcap_next_packet` in `sf-pcap.c`).
    ///
    /// Errors: only I/O errors; what libpcap reports as a damaged file is [`Next::Error`].
    pub fn next_ex(&mut self) -> io::Result<Next> {
        if self.at_end {
            return Ok(Next::End);
        }
        let mut h = [0u8; RECORD_HEADER_LEN + 8];
        let h = &mut h[..self.record_header_len];
        let n = read_full(&mut self.r, h)?;
        if n < h.len() {
            self.at_end = true;
            return Ok(if n == 0 { Next::End } else { Next::Error });
        }
        let ts = Timestamp { secs: self.u32_at(h, 0), frac: self.u32_at(h, 4), nanos: self.nanos };
        let (mut caplen, mut len) = (self.u32_at(h, 8), self.u32_at(h, 12));
        if self.lengths == Lengths::Swapped || (self.lengths == Lengths::MaybeSwapped && caplen > len) {
            std::mem::swap(&mut caplen, &mut len);
        }
        if caplen > self.max_caplen {
            // Bigger than libpcap considers sane: an error, with only the header consumed.
            return Ok(Next::Error);
        }
        let keep = caplen.min(self.snapshot);
        self.data.resize(keep as usize, 0);
        if read_full(&mut self.r, &mut self.data)? < keep as usize {
            self.at_end = true;
            return Ok(Next::Error);
        }
        if caplen > keep {
            // Beyond the snapshot length: skipped, and the record delivered truncated.
            let skip = (caplen - keep) as u64;
            if io::copy(&mut (&mut self.r).take(skip), &mut io::sink())? < skip {
                self.at_end = true;
                return Ok(Next::Error);
            }
        }
        Ok(Next::Record { ts, len, caplen: keep })
    }
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

fn open(path: &Path) -> Result<Savefile<BufReader<File>>, String> {
    let f = File::open(path).map_err(|e| format!("{}: cannot open: {e}", path.display()))?;
    Savefile::new(BufReader::new(f)).map_err(|e| format!("{}: not a pcap file: {e}", path.display()))
}

/// Reads a classic pcap file as libpcap (and so net_pcap) will: counts the records it delivers
/// and the errors it reports.
///
/// Errors: the file cannot be opened or read, or is not a pcap file (the message names the
/// file).
pub fn scan(path: &Path) -> Result<Input, String> {
    let mut r = open(path)?;
    let mut input = Input::default();
    loop {
        match r.next_ex().map_err(|e| format!("{}: cannot read: {e}", path.display()))? {
            Next::Record { .. } => input.records += 1,
            Next::Error => input.errors += 1,
            Next::End => return Ok(input),
        }
    }
}

/// Counts the records of a classic pcap file that libpcap (and so net_pcap) will deliver
/// ([`scan`]'s `records`).
pub fn count_records(path: &Path) -> Result<u64, String> {
    scan(path).map(|i| i.records)
}

/// Writes a classic pcap file header: little endian, version 2.4.
fn write_header<W: Write>(w: &mut W, nanos: bool, snaplen: u32, linktype: u32) -> io::Result<()> {
    w.write_all(&(if nanos { MAGIC_NS } else { MAGIC_US }).to_le_bytes())?;
    w.write_all(&2u16.to_le_bytes())?;
    w.write_all(&4u16.to_le_bytes())?;
    w.write_all(&[0; 8])?; // thiszone, sigfigs
    w.write_all(&snaplen.to_le_bytes())?;
    w.write_all(&linktype.to_le_bytes())
}

/// Writes an empty pcap file (Ethernet link type): an input with no packets.
pub fn write_empty(path: &Path) -> Result<(), String> {
    let mut f = File::create(path).map_err(|e| format!("{}: cannot create: {e}", path.display()))?;
    write_header(&mut f, false, 65535, LINKTYPE_ETHERNET).map_err(|e| format!("{}: cannot write: {e}", path.display()))
}

/// Merges pcap files `parts` into `out`, ordered by timestamp (stable: ties keep the order of
/// `parts`, then of records). Used to join the per-tx-queue files of one port, and the inputs
/// of a port given several.
///
/// Each part contributes the records libpcap delivers from it ([`Savefile`]; its errors are
/// left out), with their captured bytes, original length and capture time. The output takes the
/// first part's link type, the largest snapshot length of the parts (so no record is cut
/// again) and their timestamp resolution, or nanoseconds when they differ (a microsecond time
/// then keeps its value, and so the microseconds net_pcap stamps). Returns the records written.
pub fn merge(parts: &[&Path], out: &Path) -> Result<u64, String> {
    struct Rec {
        ts: Timestamp,
        len: u32,
        data: Vec<u8>,
    }
    let mut all = Vec::new();
    let mut linktype = None;
    let mut snaplen = 0u32;
    let mut resolutions = Vec::new();
    for p in parts {
        let mut r = open(p)?;
        linktype.get_or_insert(r.linktype());
        snaplen = snaplen.max(r.snapshot());
        resolutions.push(r.nanos());
        loop {
            match r.next_ex().map_err(|e| format!("{}: cannot read: {e}", p.display()))? {
                Next::Record { ts, len, .. } => all.push(Rec { ts, len, data: r.data().to_vec() }),
                Next::Error => {}
                Next::End => break,
            }
        }
    }
    all.sort_by_key(|r| r.ts.as_nanos()); // stable
    let nanos = resolutions.first().is_some_and(|n| *n) || resolutions.windows(2).any(|w| w[0] != w[1]);
    let werr = |e: io::Error| format!("{}: cannot write: {e}", out.display());
    let mut w = BufWriter::new(File::create(out).map_err(|e| format!("{}: cannot create: {e}", out.display()))?);
    write_header(&mut w, nanos, if parts.is_empty() { 65535 } else { snaplen }, linktype.unwrap_or(LINKTYPE_ETHERNET))
        .map_err(werr)?;
    for r in &all {
        let (secs, frac) = if r.ts.nanos == nanos {
            (r.ts.secs, r.ts.frac)
        } else {
            let ns = r.ts.as_nanos();
            (u32::try_from(ns / 1_000_000_000).unwrap_or(u32::MAX), (ns % 1_000_000_000) as u32)
        };
        for v in [secs, frac, r.data.len() as u32, r.len] {
            w.write_all(&v.to_le_bytes()).map_err(werr)?;
        }
        w.write_all(&r.data).map_err(werr)?;
    }
    w.flush().map_err(werr)?;
    Ok(all.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};
    use std::time::Duration;

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
            Built::new(MAGIC_US, false, (2, 4), snaplen)
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
            if self.magic == MAGIC_KUZNETZOV {
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

        /// Every call of [`Savefile::next_ex`] until the end: `Some((caplen, len, data))` per
        /// record, `None` per error.
        #[allow(clippy::type_complexity)]
        fn read(&self) -> Vec<Option<(u32, u32, Vec<u8>)>> {
            let mut r = Savefile::new(&self.bytes[..]).unwrap();
            let mut out = Vec::new();
            loop {
                match r.next_ex().unwrap() {
                    Next::Record { caplen, len, .. } => {
                        assert_eq!(r.data().len(), caplen as usize);
                        out.push(Some((caplen, len, r.data().to_vec())))
                    }
                    Next::Error => out.push(None),
                    Next::End => break,
                }
                assert!(out.len() < 100, "no end");
            }
            assert_eq!(r.next_ex().unwrap(), Next::End, "the end stays the end");
            out
        }
    }

    fn frame(n: usize, tag: u8) -> Vec<u8> {
        (0..n).map(|i| (i as u8).wrapping_add(tag)).collect()
    }

    fn scan_bytes(bytes: &[u8]) -> Input {
        let dir =
            std::env::temp_dir().join(format!("dpu-pcapscan-{}-{:?}", std::process::id(), std::thread::current().id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("f.pcap");
        std::fs::write(&p, bytes).unwrap();
        let got = scan(&p).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        got
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
        assert_eq!(scan_bytes(&b.bytes), Input { records: 3, errors: 1 });
        // The header says more than i32::MAX: the maximum too.
        assert_eq!(Savefile::new(&Built::le(0x9000_0000).bytes[..]).unwrap().snapshot(), MAXIMUM_SNAPLEN);
    }

    #[test]
    fn both_byte_orders_and_nanosecond_files_read_alike() {
        for magic in [MAGIC_US, MAGIC_NS] {
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
                let mut r = Savefile::new(&b.bytes[..]).unwrap();
                let Next::Record { ts, .. } = r.next_ex().unwrap() else { panic!("{what}") };
                let nanos = magic == MAGIC_NS;
                assert_eq!(ts, Timestamp { secs: 7, frac: 999_999, nanos }, "{what}");
                assert_eq!(ts.as_micros(), if nanos { 7_000_999 } else { 7_999_999 }, "{what}");
                assert_eq!(scan_bytes(&b.bytes), Input { records: 3, errors: 0 }, "{what}");
            }
        }
    }

    #[test]
    fn old_versions_swap_caplen_and_len_and_kuznetzov_records_are_longer() {
        // Before 2.3 (and 543.0): len first. 2.3: swapped only when caplen > len.
        for version in [(2, 2), (543, 0)] {
            let b = Built::new(MAGIC_US, false, version, 65535).record(1, 0, 82, 64, &frame(64, 0));
            assert_eq!(b.read(), vec![Some((64, 82, frame(64, 0)))], "{version:?}");
        }
        let b = Built::new(MAGIC_US, true, (2, 3), 65535).record(1, 0, 82, 64, &frame(64, 0)).record(
            1,
            0,
            64,
            82,
            &frame(64, 1),
        );
        assert_eq!(b.read(), vec![Some((64, 82, frame(64, 0))), Some((64, 82, frame(64, 1)))]);
        // Kuznetzov: 8 more header bytes per record; on Ethernet the snapshot is 14 bytes more.
        let b = Built::new(MAGIC_KUZNETZOV, false, (2, 4), 64).record(1, 0, 70, 70, &frame(70, 0)).record(
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
        for (bytes, why) in [
            (vec![0xd4, 0xc3], "too short"),
            (Built::le(64).bytes[..20].to_vec(), "truncated file header"),
            (Built::new(MAGIC_US, false, (1, 0), 64).bytes, "unsupported pcap version 1.0"),
            (Built::new(MAGIC_US, false, (2, 5), 64).bytes, "unsupported pcap version 2.5"),
            (vec![0x0a, 0x0d, 0x0d, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], "unknown magic"),
        ] {
            let e = Savefile::new(&bytes[..]).unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
        }
    }

    #[test]
    fn merging_keeps_truncated_records_and_times() {
        let dir = std::env::temp_dir().join(format!("dpu-pcapmerge-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b, out) = (dir.join("a.pcap"), dir.join("b.pcap"), dir.join("out.pcap"));
        // a: snaplen 64, microseconds; b: nanoseconds, with a record cut short at its end.
        let fa = Built::le(64).record(1, 5, 64, 82, &frame(64, 0)).record(3, 0, 100, 100, &frame(100, 1));
        let fb = Built::new(MAGIC_NS, false, (2, 4), 65535)
            .record(2, 7_000, 300, 300, &frame(300, 2))
            .record(1, 5_000, 10, 10, &frame(10, 3))
            .record(4, 0, 50, 50, &frame(50, 4))
            .cut(1);
        std::fs::write(&a, &fa.bytes).unwrap();
        std::fs::write(&b, &fb.bytes).unwrap();
        assert_eq!(merge(&[&a, &b], &out).unwrap(), 4);
        let mut r = Savefile::new(BufReader::new(File::open(&out).unwrap())).unwrap();
        assert!(r.nanos(), "mixed resolutions merge into nanoseconds");
        assert_eq!(r.snapshot(), 65535, "the largest of the parts");
        let mut got = Vec::new();
        while let Next::Record { ts, len, caplen } = r.next_ex().unwrap() {
            got.push((ts.as_micros(), len, caplen, r.data()[0]));
        }
        assert_eq!(
            got,
            vec![(1_000_005, 82, 64, 0), (1_000_005, 10, 10, 3), (2_000_007, 300, 300, 2), (3_000_000, 100, 64, 1)],
            "by time, ties in the order of the parts"
        );
        assert_eq!(scan(&out).unwrap(), Input { records: 4, errors: 0 });
        std::fs::remove_dir_all(&dir).unwrap();
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
