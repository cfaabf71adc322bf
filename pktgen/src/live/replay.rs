//! pcap replay on DPDK ports: `[[stream]] kind = "pcap"` sends the frames of a classic pcap file
//! as captured (no stamp, no rewrite), at full rate, at a set rate (`rate_pps`, `rate_bps`) or
//! timing-faithful to the capture's timestamps divided by `speed`, `loops` times (0: until the
//! run ends).
//!
//! The file is never loaded whole. A reader thread ([`read_loops`], an ordinary thread, not an
//! lcore) reads it in `read(2)` calls of [`CHUNK_BYTES`] ([`PcapChunks`]) and hands the frames
//! over in [`Batch`]es of about [`BATCH_BYTES`] through a bounded channel of [`BATCHES`]; the tx
//! lane ([`ReplayLane`]) copies each frame into an mbuf and sends bursts, and gives the batches
//! back for reuse. Memory stays at about `BATCHES * BATCH_BYTES` whatever the file's size; the
//! lane makes no system call and allocates nothing per packet (a channel operation per batch).
//!
//! Timing-faithful replay: frame `k` of a loop is due `(ts_k - ts_0) / speed` after the loop's
//! start, on the TSC; the next loop starts when the last frame of the previous one was due
//! (a capture says nothing of the gap after its last frame). Frames whose timestamps go back are
//! due at once. A burst holds the frames already due, so a frame leaves at most one pass of the
//! lane's loop late.

use super::{alloc_burst, bump, TxCounters};
use dataplane::dpdk::{self as dpdk, Mbuf, Mempool, TxQueue};
use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError};
use std::sync::{Arc, Mutex};

/// Bytes asked of the file per `read(2)` call (the reader's buffer grows beyond it only for one
/// record longer than that).
pub const CHUNK_BYTES: usize = 1 << 20;
/// Frame bytes per batch handed to the tx lane (a batch closes before it would exceed this,
/// and holds at least one frame).
pub const BATCH_BYTES: usize = 256 << 10;
/// Batches in flight between the reader and the lane.
pub const BATCHES: usize = 4;
/// The longest record accepted (bytes of captured data): longer ones mean a damaged file.
pub const MAX_RECORD: u32 = 256 << 10;
/// The least timing-faithful `speed` factor accepted (a 1 ms gap in the capture becomes
/// 1000 s).
pub const MIN_SPEED: f64 = 1e-6;
/// The greatest timing-faithful `speed` factor accepted.
pub const MAX_SPEED: f64 = 1e6;
/// A pcap stream's `sizes` in the summary lists the distinct frame lengths sent when there are
/// at most this many; more leave it empty (`replay.distinct_sizes` says how many).
pub const MAX_LISTED_SIZES: usize = 64;

/// The frame lengths (bytes, 0 to [`crate::stream::MAX_FRAME`]) one tx lane sent of one pcap
/// stream: a bit per length, set by that lane only (a relaxed load per frame, and a store the
/// first time a length goes out: nothing allocated or locked per packet), read by the main lcore
/// for the summary.
#[derive(Debug)]
pub struct SentLengths(Box<[AtomicU64]>);

impl Default for SentLengths {
    fn default() -> Self {
        SentLengths((0..crate::stream::MAX_FRAME / 64 + 1).map(|_| AtomicU64::new(0)).collect())
    }
}

impl SentLengths {
    /// Notes that a frame of `len` bytes went out (a length beyond the table is ignored: the
    /// reader skips frames longer than the mbufs take).
    #[inline(always)]
    pub fn mark(&self, len: usize) {
        if let Some(w) = self.0.get(len / 64).filter(|_| len <= crate::stream::MAX_FRAME) {
            let (v, bit) = (w.load(Ordering::Relaxed), 1u64 << (len % 64));
            if v & bit == 0 {
                w.store(v | bit, Ordering::Relaxed);
            }
        }
    }

    /// The lengths any of `sets` sent, ascending.
    pub fn union<'a>(sets: impl IntoIterator<Item = &'a SentLengths>) -> Vec<usize> {
        let mut words = vec![0u64; crate::stream::MAX_FRAME / 64 + 1];
        for s in sets {
            for (a, b) in words.iter_mut().zip(s.0.iter()) {
                *a |= b.load(Ordering::Relaxed);
            }
        }
        (0..words.len() * 64).filter(|&n| words[n / 64] >> (n % 64) & 1 == 1).collect()
    }
}

/// A classic pcap file's global header (the pcap-savefile format, `pcap-savefile(5)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PcapHead {
    /// The file was written in the other byte order.
    pub swapped: bool,
    /// Timestamps count nanoseconds (magic `0xa1b23c4d`), else microseconds.
    pub nanos: bool,
    /// Snapshot length (bytes).
    pub snaplen: u32,
    /// Link-layer type (1: Ethernet).
    pub linktype: u32,
}

/// One record of a pcap file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Capture time (ns since the epoch).
    pub ts_ns: u64,
    /// The captured bytes: `incl_len` of them, or the file's snapshot length if `incl_len` is
    /// larger (libpcap delivers such a record cut to the snapshot length).
    pub data: &'a [u8],
    /// The frame's length on the wire (`orig_len`; more than `data.len()` when truncated).
    pub orig_len: u32,
}

/// Reads a classic pcap file's records in chunks: the source is read `chunk` bytes at a time
/// into one buffer that holds at most a chunk (or one longer record), never the whole file.
#[derive(Debug)]
pub struct PcapChunks<R> {
    src: R,
    buf: Vec<u8>,
    at: usize,
    end: usize,
    chunk: usize,
    head: PcapHead,
    /// File offset of `buf[at]`.
    offset: u64,
    reads: u64,
    name: String,
    /// File offset of a last record cut short by the end of the file.
    cut: Option<u64>,
}

impl<R: Read> PcapChunks<R> {
    /// Reads the global header of `src` (`name` names it in errors), reading `chunk` bytes at a
    /// time (at least 64).
    ///
    /// # Errors
    /// I/O errors, a file shorter than the 24-byte header, or a magic number that is not a
    /// classic pcap file's (pcapng files are refused).
    pub fn new(src: R, chunk: usize, name: &str) -> Result<PcapChunks<R>, String> {
        let chunk = chunk.max(64);
        let mut r = PcapChunks {
            src,
            buf: vec![0; chunk],
            at: 0,
            end: 0,
            chunk,
            head: PcapHead { swapped: false, nanos: false, snaplen: 0, linktype: 0 },
            offset: 0,
            reads: 0,
            name: name.to_string(),
            cut: None,
        };
        if !r.fill(24)? {
            return Err(format!("{name}: not a pcap file (shorter than its 24-byte header)"));
        }
        let h: [u8; 24] = r.buf[..24].try_into().expect("24 bytes");
        let (swapped, nanos) = match u32::from_le_bytes([h[0], h[1], h[2], h[3]]) {
            0xa1b2_c3d4 => (false, false),
            0xa1b2_3c4d => (false, true),
            0xd4c3_b2a1 => (true, false),
            0x4d3c_b2a1 => (true, true),
            0x0a0d_0d0a => {
                return Err(format!(
                    "{name}: a pcapng file; expected a classic pcap file (convert it with `editcap -F pcap`)"
                ))
            }
            m => return Err(format!("{name}: not a pcap file (magic {m:#010x})")),
        };
        r.head.swapped = swapped;
        r.head.nanos = nanos;
        r.head.snaplen = r.u32_at(16);
        r.head.linktype = r.u32_at(20) & 0x0fff_ffff;
        r.consume(24);
        Ok(r)
    }

    /// The global header.
    pub fn head(&self) -> PcapHead {
        self.head
    }

    /// `read` calls made so far.
    pub fn reads(&self) -> u64 {
        self.reads
    }

    /// The byte offset of the file's last record if the file ends inside it (a capture
    /// stopped while writing, as killing tcpdump leaves it), once [`PcapChunks::next_record`]
    /// has come to it; such a record is not delivered.
    pub fn cut_at(&self) -> Option<u64> {
        self.cut
    }

    /// Bytes of the reader's buffer (a chunk, or the longest record read if longer).
    pub fn buffer_len(&self) -> usize {
        self.buf.len()
    }

    fn u32_at(&self, i: usize) -> u32 {
        let b =
            [self.buf[self.at + i], self.buf[self.at + i + 1], self.buf[self.at + i + 2], self.buf[self.at + i + 3]];
        if self.head.swapped {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }
    }

    /// The file ended inside the record at `offset`: note it and drop its bytes.
    fn cut_tail(&mut self) {
        self.cut = Some(self.offset);
        let rest = self.end - self.at;
        self.consume(rest);
    }

    fn consume(&mut self, n: usize) {
        self.at += n;
        self.offset += n as u64;
    }

    /// Makes `need` bytes available at `buf[at..]`; false at the end of the file before that.
    fn fill(&mut self, need: usize) -> Result<bool, String> {
        if self.end - self.at >= need {
            return Ok(true);
        }
        self.buf.copy_within(self.at..self.end, 0);
        self.end -= self.at;
        self.at = 0;
        if self.buf.len() < need {
            self.buf.resize(need, 0);
        }
        while self.end < need {
            let room = self.buf.len().min(self.end + self.chunk);
            let n = match self.src.read(&mut self.buf[self.end..room]) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(format!("{}: cannot read: {e}", self.name)),
            };
            self.reads += 1;
            if n == 0 {
                return Ok(false);
            }
            self.end += n;
        }
        Ok(true)
    }

    /// The next record, or `None` at the end of the file. A last record cut short by the end
    /// of the file (inside its header or its data) is not delivered: it ends the file, and
    /// [`PcapChunks::cut_at`] gives its offset. A record longer than the snapshot length
    /// (when that is from 1 to [`MAX_RECORD`]) is delivered cut to it, as libpcap does.
    ///
    /// # Errors
    /// I/O errors, or a record longer than [`MAX_RECORD`] or with a fraction of a second out of
    /// range (a damaged file); each names the file and the record's byte offset.
    pub fn next_record(&mut self) -> Result<Option<Record<'_>>, String> {
        if !self.fill(16)? {
            if self.end > self.at {
                self.cut_tail();
            }
            return Ok(None);
        }
        let (sec, frac, incl, orig) = (self.u32_at(0), self.u32_at(4), self.u32_at(8), self.u32_at(12));
        let bad =
            |what: String| Err(format!("{}: record at byte {}: {what} (a damaged file?)", self.name, self.offset));
        if incl > MAX_RECORD {
            return bad(format!("{incl} bytes captured, more than {MAX_RECORD}"));
        }
        let ns_per = if self.head.nanos { 1 } else { 1000 };
        if u64::from(frac) * ns_per >= 1_000_000_000 {
            return bad(format!("a fraction of a second of {frac}"));
        }
        let len = incl as usize;
        if !self.fill(16 + len)? {
            self.cut_tail();
            return Ok(None);
        }
        let start = self.at + 16;
        self.consume(16 + len);
        let snap = self.head.snaplen;
        let keep = if snap > 0 && snap < incl { snap as usize } else { len };
        Ok(Some(Record {
            ts_ns: u64::from(sec) * 1_000_000_000 + u64::from(frac) * ns_per,
            data: &self.buf[start..start + keep],
            orig_len: orig,
        }))
    }
}

/// What the config learns of a capture file when it loads (it reads the file through).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileInfo {
    /// The global header.
    pub head: PcapHead,
    /// Frames in the file (records delivered: a cut last record is not one).
    pub frames: u64,
    /// The longest frame (bytes, as delivered: at most the snapshot length).
    pub longest: usize,
    /// The distinct frame lengths (bytes), ascending.
    pub sizes: Vec<usize>,
    /// The byte offset of a last record cut short by the end of the file (not sent).
    pub cut_at: Option<u64>,
}

/// Checks the capture file at `path` by reading it through, record by record, in chunks of
/// [`CHUNK_BYTES`] (never whole): a file refused here is refused before anything is sent,
/// whatever its size.
///
/// # Errors
/// The file cannot be opened or read, is not a classic pcap file, is not an Ethernet capture
/// (link type 1), is damaged (a record longer than [`MAX_RECORD`], a fraction of a second out
/// of range), or holds no frame.
pub fn inspect(path: &std::path::Path) -> Result<FileInfo, String> {
    let name = path.display().to_string();
    let f = std::fs::File::open(path).map_err(|e| format!("cannot open {name}: {e}"))?;
    let mut r = PcapChunks::new(f, CHUNK_BYTES, &name)?;
    let head = r.head();
    if head.linktype != 1 {
        return Err(format!("{name}: expected an Ethernet capture (link type 1), found link type {}", head.linktype));
    }
    let (mut frames, mut longest) = (0u64, 0usize);
    let mut seen = vec![false; MAX_RECORD as usize + 1];
    while let Some(rec) = r.next_record()? {
        frames += 1;
        longest = longest.max(rec.data.len());
        seen[rec.data.len()] = true;
    }
    if frames == 0 {
        return Err(format!("{name}: the capture holds no frame"));
    }
    let sizes = seen.iter().enumerate().filter(|x| *x.1).map(|x| x.0).collect();
    Ok(FileInfo { head, frames, longest, sizes, cut_at: r.cut_at() })
}

/// A pcap stream's settings, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Replay {
    /// The capture file (as given: relative to the working directory).
    pub file: std::path::PathBuf,
    /// Passes over the file (0: until the run ends).
    pub loops: u64,
    /// Timing-faithful to the capture, this many times faster (`None`: full or set rate).
    pub speed: Option<f64>,
    /// Frames longer than this (bytes) are skipped and counted: the file's longest frame, at
    /// most [`crate::stream::MAX_FRAME`].
    pub max_frame: usize,
    /// What loading learnt of the file.
    pub info: FileInfo,
}

/// Checks the pcap keys of `stream[i]` (`s`): `None` for a stream of another kind (which must
/// not use them); for a pcap stream its [`Replay`], and `lcores` cut to the one lcore that sends
/// it.
///
/// # Errors
/// A [`ConfigError`] naming `path`, the key and what was expected: a pcap key on another kind,
/// a synthetic key (`size`, addresses, ...) on a pcap stream, `speed` outside [`MIN_SPEED`] to
/// [`MAX_SPEED`] or with a rate, several lcores, or a file that is not an Ethernet pcap capture
/// or is damaged ([`inspect`]).
pub fn resolve(
    s: &super::config::StreamConfig,
    i: usize,
    path: &std::path::Path,
    lcores: &mut Vec<u32>,
) -> Result<Option<Replay>, dataplane::config::ConfigError> {
    use dataplane::config::ConfigError;
    let err = |f: &str, msg: String| ConfigError::new(path, format!("stream[{i}]{f}"), msg);
    if s.kind != crate::stream::Kind::Pcap {
        for (f, set) in [("file", s.file.is_some()), ("loops", s.loops.is_some()), ("speed", s.speed.is_some())] {
            if set {
                return Err(err(&format!(".{f}"), format!("only a pcap stream (kind = \"pcap\") takes `{f}`")));
            }
        }
        return Ok(None);
    }
    let Some(file) = &s.file else {
        return Err(err(".file", "a pcap stream needs its capture file, like file = \"trace.pcap\"".into()));
    };
    let synthetic = [
        ("size", s.size.is_some()),
        ("imix", s.imix.is_some()),
        ("sweep", s.sweep.is_some()),
        ("step_s", s.step_s.is_some()),
        ("src_mac", s.src_mac.is_some()),
        ("dst_mac", s.dst_mac.is_some()),
        ("vlan", s.vlan.is_some()),
        ("src_ip", s.src_ip.is_some()),
        ("dst_ip", s.dst_ip.is_some()),
        ("dst_port", s.dst_port.is_some()),
        ("flows", s.flows != 1),
    ];
    if let Some((f, _)) = synthetic.iter().find(|x| x.1) {
        return Err(err(
            &format!(".{f}"),
            format!("a pcap stream sends the file's frames as captured: `{f}` does not apply"),
        ));
    }
    if let Some(sp) = s.speed {
        if !(MIN_SPEED..=MAX_SPEED).contains(&sp) {
            return Err(err(
                ".speed",
                format!(
                    "expected a factor from {MIN_SPEED:e} to {MAX_SPEED:e} (1: the capture's own timing, 2: twice as \
                     fast), found {sp}"
                ),
            ));
        }
        if s.rate_pps.is_some() || s.rate_bps.is_some() {
            return Err(err("", "expected at most one of `speed`, `rate_pps` and `rate_bps`".into()));
        }
    }
    match &s.lcores {
        Some(l) if l.len() > 1 => {
            return Err(err(
                ".lcores",
                format!("a pcap stream is sent by one lcore (its frames stay in order), found {}", l.len()),
            ))
        }
        _ => lcores.truncate(1),
    }
    let info = inspect(std::path::Path::new(file)).map_err(|e| err(".file", e))?;
    let max_frame = info.longest.min(crate::stream::MAX_FRAME);
    Ok(Some(Replay { file: file.into(), loops: s.loops.unwrap_or(1), speed: s.speed, max_frame, info }))
}

/// A frame of a [`Batch`]: `data[at..at + len]`, captured at `ts_ns`.
#[derive(Debug, Clone, Copy)]
pub struct FrameRef {
    /// Offset in the batch's data.
    pub at: u32,
    /// Bytes.
    pub len: u32,
    /// Capture time (ns).
    pub ts_ns: u64,
}

/// Frames handed from the reader to the tx lane.
#[derive(Debug, Default)]
pub struct Batch {
    /// The frames' bytes, one after the other.
    pub data: Vec<u8>,
    /// The frames.
    pub frames: Vec<FrameRef>,
    /// `frames[0]` is the first frame of a pass over the file.
    pub first_of_loop: bool,
    /// Frames before these that were too long to send (skipped, counted).
    pub skipped: u64,
    /// Records before these that could not be read (a last record cut short by the end of the
    /// file, once per pass), not sent, counted.
    pub unreadable: u64,
}

impl Batch {
    fn clear(&mut self) {
        self.data.clear();
        self.frames.clear();
        self.first_of_loop = false;
        self.skipped = 0;
        self.unreadable = 0;
    }
}

/// The reader thread's work: `loops` passes over `path` (0: until the lane goes away), frames
/// longer than `max_frame` bytes skipped and counted, batches sent on `tx` and taken back from
/// `back`. Returns when done or when the lane has dropped its end; an error (the file changed
/// into something unreadable) ends the replay and is returned.
///
/// # Errors
/// As [`PcapChunks::next_record`], or a pass that found no frame to send.
pub fn read_loops(
    path: &std::path::Path,
    loops: u64,
    max_frame: usize,
    tx: SyncSender<Batch>,
    back: Receiver<Batch>,
) -> Result<(), String> {
    let name = path.display().to_string();
    let mut made = 0;
    let mut next_batch = |back: &Receiver<Batch>| -> Option<Batch> {
        if made < BATCHES {
            made += 1;
            return Some(Batch {
                data: Vec::with_capacity(BATCH_BYTES + max_frame),
                frames: Vec::with_capacity(BATCH_BYTES / 60 + 1),
                ..Batch::default()
            });
        }
        let mut b = back.recv().ok()?;
        b.clear();
        Some(b)
    };
    let mut pass = 0u64;
    while loops == 0 || pass < loops {
        let f = std::fs::File::open(path).map_err(|e| format!("cannot open {name}: {e}"))?;
        let mut r = PcapChunks::new(f, CHUNK_BYTES, &name)?;
        let Some(mut b) = next_batch(&back) else { return Ok(()) };
        b.first_of_loop = true;
        let mut sent_any = false;
        loop {
            let rec = match r.next_record() {
                Ok(Some(rec)) => rec,
                Ok(None) => break,
                Err(e) => {
                    // The frames read before the damage still go out.
                    if !b.frames.is_empty() || b.skipped > 0 {
                        let _ = tx.send(b);
                    }
                    return Err(e);
                }
            };
            let len = rec.data.len();
            if len > max_frame || len == 0 {
                b.skipped += 1;
                continue;
            }
            if !b.frames.is_empty() && b.data.len() + len > BATCH_BYTES {
                if tx.send(std::mem::take(&mut b)).is_err() {
                    return Ok(());
                }
                sent_any = true;
                let Some(nb) = next_batch(&back) else { return Ok(()) };
                b = nb;
            }
            b.frames.push(FrameRef { at: b.data.len() as u32, len: len as u32, ts_ns: rec.ts_ns });
            b.data.extend_from_slice(rec.data);
        }
        if r.cut_at().is_some() {
            b.unreadable += 1;
        }
        if b.frames.is_empty() && !sent_any {
            let _ = tx.send(b);
            return Err(format!("{name}: no frame of at most {max_frame} bytes to send"));
        }
        if tx.send(b).is_err() {
            return Ok(());
        }
        pass += 1;
    }
    Ok(())
}

/// How a replay is paced.
#[derive(Debug)]
pub enum Timing {
    /// As fast as the queue takes them.
    Full,
    /// A set rate: the pacer and what each frame costs in its units (`None`: 1 packet; else
    /// bits, with the layer's extra bytes per frame).
    Paced(super::pace::Pacer, Option<u64>),
    /// Faithful to the capture: TSC cycles per capture ns (the speed factor divided in).
    Capture {
        /// Cycles per ns of capture time.
        cycles_per_ns: f64,
    },
}

/// When frame `f` is due (capture timing): `t0` plus its capture time after `first_ns`, in
/// cycles; `u64::MAX` (never) if that is beyond the TSC's range.
#[inline(always)]
fn due(t0: u64, first_ns: u64, f: &FrameRef, cycles_per_ns: f64) -> u64 {
    // `as` saturates a float too large for u64 (and NaN to 0); the add saturates too.
    t0.saturating_add((f.ts_ns.saturating_sub(first_ns) as f64 * cycles_per_ns) as u64)
}

/// One replay stream as its tx lane sends it.
#[derive(Debug)]
pub struct ReplayLane {
    pub(super) counters: Arc<[TxCounters]>,
    pub(super) slot: usize,
    pub(super) txq: TxQueue,
    pub(super) timing: Timing,
    pub(super) rx: Receiver<Batch>,
    pub(super) back: SyncSender<Batch>,
    /// Frames still allowed (`--packets`).
    pub(super) limit: u64,
    /// The lengths this lane sent of the stream (those the tx queue took).
    sent: Arc<SentLengths>,
    cur: Option<Batch>,
    idx: usize,
    /// TSC of the current loop's start and the capture time of its first frame.
    loop_t0: u64,
    first_ns: u64,
    /// TSC at which the last frame taken was due.
    last_due: u64,
    passes: u64,
    pend: Vec<Option<Mbuf>>,
    lens: Vec<u16>,
    pend_at: usize,
    pend_n: usize,
    /// No more frames: the file's passes are over (or the limit is reached).
    pub(super) done: bool,
}

impl ReplayLane {
    /// A lane's replay of the batches from `rx`, sending on `txq` in bursts of `burst`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        counters: Arc<[TxCounters]>,
        slot: usize,
        txq: TxQueue,
        timing: Timing,
        rx: Receiver<Batch>,
        back: SyncSender<Batch>,
        limit: u64,
        burst: usize,
        sent: Arc<SentLengths>,
    ) -> ReplayLane {
        ReplayLane {
            counters,
            slot,
            txq,
            timing,
            rx,
            back,
            limit,
            sent,
            cur: None,
            idx: 0,
            loop_t0: 0,
            first_ns: 0,
            last_due: 0,
            passes: 0,
            pend: (0..burst).map(|_| None).collect(),
            lens: vec![0; burst],
            pend_at: 0,
            pend_n: 0,
            done: limit == 0,
        }
    }

    /// Starts the clocks at TSC `t0`.
    pub(super) fn start(&mut self, t0: u64) {
        self.loop_t0 = t0;
        self.last_due = t0;
        if let Timing::Paced(p, _) = &mut self.timing {
            p.start(t0);
        }
    }

    /// One pass: retry what the queue refused, else take the next batch if needed, and send
    /// what is due.
    #[inline]
    pub(super) fn step(&mut self, now: u64, pool: &Mempool, burst: usize) {
        let c = &self.counters[self.slot];
        if self.pend_n > 0 {
            let (a, n) = (self.pend_at, self.pend_n);
            let k = self.txq.tx_burst(&mut self.pend[a..a + n]);
            bump(&c.packets, k as u64);
            bump(&c.bytes, self.lens[a..a + k].iter().map(|&l| u64::from(l)).sum());
            for &l in &self.lens[a..a + k] {
                self.sent.mark(usize::from(l));
            }
            self.pend_at += k;
            self.pend_n -= k;
            if self.pend_n > 0 {
                bump(&c.tx_full, 1);
                return;
            }
        }
        if self.done {
            return;
        }
        let exhausted = self.cur.as_ref().is_none_or(|b| self.idx >= b.frames.len());
        if exhausted {
            if let Some(b) = self.cur.take() {
                // The reader made at most BATCHES, so the channel back has room for each.
                let _ = self.back.try_send(b);
            }
            match self.rx.try_recv() {
                Ok(b) => {
                    bump(&c.skipped, b.skipped);
                    bump(&c.unreadable, b.unreadable);
                    if b.first_of_loop {
                        if let Some(f) = b.frames.first() {
                            if self.passes > 0 {
                                self.loop_t0 = self.last_due;
                            }
                            self.first_ns = f.ts_ns;
                        }
                        self.passes += 1;
                    }
                    self.cur = Some(b);
                    self.idx = 0;
                }
                Err(TryRecvError::Empty) => return,
                Err(TryRecvError::Disconnected) => {
                    self.done = true;
                    return;
                }
            }
        }
        let b = self.cur.as_ref().expect("taken above");
        let left = (b.frames.len() - self.idx).min(burst).min(self.limit.min(burst as u64) as usize);
        let frames = &b.frames[self.idx..self.idx + left];
        let mut spent = 0.0;
        let n = match &mut self.timing {
            Timing::Full => left,
            Timing::Paced(p, extra) => {
                let mut budget = p.budget(now);
                let mut n = 0;
                for f in frames {
                    let cost = match extra {
                        None => 1.0,
                        Some(e) => ((u64::from(f.len) + *e) * 8) as f64,
                    };
                    if cost > budget {
                        break;
                    }
                    budget -= cost;
                    spent += cost;
                    n += 1;
                }
                n
            }
            Timing::Capture { cycles_per_ns } => {
                let (k, t0, first) = (*cycles_per_ns, self.loop_t0, self.first_ns);
                frames.iter().take_while(|f| due(t0, first, f, k) <= now).count()
            }
        };
        let Some(slots) = alloc_burst(pool, &mut self.pend, n, &c.nombuf) else {
            return;
        };
        for ((slot, f), l) in slots.iter_mut().zip(&frames[..n]).zip(&mut self.lens) {
            let m = slot.as_mut().expect("allocated above");
            // The pool's data room fits the longest frame sent (the reader skips longer ones).
            if let Some(data) = m.reset_tx(f.len as u16) {
                let at = f.at as usize;
                data.copy_from_slice(&b.data[at..at + f.len as usize]);
            }
            *l = f.len as u16;
        }
        if let Timing::Capture { cycles_per_ns } = self.timing {
            self.last_due = self.last_due.max(due(self.loop_t0, self.first_ns, &frames[n - 1], cycles_per_ns));
        }
        if let Timing::Paced(p, _) = &mut self.timing {
            p.spend(spent);
        }
        self.idx += n;
        self.limit -= n as u64;
        if self.limit == 0 {
            self.done = true;
        }
        let k = self.txq.tx_burst(&mut self.pend[..n]);
        bump(&c.packets, k as u64);
        bump(&c.bytes, self.lens[..k].iter().map(|&l| u64::from(l)).sum());
        for &l in &self.lens[..k] {
            self.sent.mark(usize::from(l));
        }
        if k < n {
            bump(&c.tx_full, 1);
            self.pend_at = k;
            self.pend_n = n - k;
        }
    }

    /// Nothing left to send or retry.
    #[inline(always)]
    pub(super) fn finished(&self) -> bool {
        self.done && self.pend_n == 0
    }

    /// Frees what is still waiting.
    pub(super) fn discard(&mut self) {
        dpdk::mbuf::free_burst(&mut self.pend[self.pend_at..self.pend_at + self.pend_n]);
        self.pend_n = 0;
    }
}

/// The reader threads' errors, collected for the summary.
pub type Errors = Arc<Mutex<Vec<String>>>;

#[cfg(test)]
mod tests {
    use super::*;

    /// A classic pcap (µs, little endian, snaplen 65535, Ethernet) of `n` frames, frame `i`
    /// `60 + i % 50` bytes at `i` ms.
    fn pcap(n: usize) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
        v.extend_from_slice(&2u16.to_le_bytes());
        v.extend_from_slice(&4u16.to_le_bytes());
        v.extend_from_slice(&[0; 8]);
        v.extend_from_slice(&65535u32.to_le_bytes());
        v.extend_from_slice(&1u32.to_le_bytes());
        for i in 0..n {
            let len = 60 + i % 50;
            v.extend_from_slice(&(i as u32 / 1000).to_le_bytes());
            v.extend_from_slice(&((i as u32 % 1000) * 1000).to_le_bytes());
            v.extend_from_slice(&(len as u32).to_le_bytes());
            v.extend_from_slice(&(len as u32).to_le_bytes());
            v.extend((0..len).map(|j| (i + j) as u8));
        }
        v
    }

    /// The lengths sent are the union of the lanes' marks, ascending, each once; the ends of
    /// the table (0 and MAX_FRAME) are kept and a length beyond it is ignored.
    #[test]
    fn sent_lengths_are_the_union_of_the_lanes_marks() {
        let (a, b) = (SentLengths::default(), SentLengths::default());
        for n in [166, 66, 66, 100, 0] {
            a.mark(n);
        }
        for n in [100, crate::stream::MAX_FRAME, 127, 128, crate::stream::MAX_FRAME + 1] {
            b.mark(n);
        }
        assert_eq!(SentLengths::union([&a, &b]), vec![0, 66, 100, 127, 128, 166, crate::stream::MAX_FRAME]);
        assert_eq!(SentLengths::union([&SentLengths::default()]), Vec::<usize>::new());
    }

    /// A reader that counts the bytes asked for and given per call.
    struct Counting<'a> {
        data: &'a [u8],
        largest_ask: usize,
    }

    impl Read for Counting<'_> {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            self.largest_ask = self.largest_ask.max(out.len());
            let n = out.len().min(self.data.len());
            out[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    /// A 5000-frame file (about 450 KB) read with 4 KiB chunks: every frame comes back in order
    /// with its bytes and timestamp, in about file size / 4 KiB reads of at most 4 KiB each,
    /// through a buffer that never holds more than one chunk.
    #[test]
    fn the_file_is_read_in_chunks_never_whole() {
        let file = pcap(5000);
        let mut src = Counting { data: &file, largest_ask: 0 };
        let mut r = PcapChunks::new(&mut src, 4096, "t.pcap").unwrap();
        assert_eq!(r.head(), PcapHead { swapped: false, nanos: false, snaplen: 65535, linktype: 1 });
        let mut i = 0usize;
        while let Some(rec) = r.next_record().unwrap() {
            let len = 60 + i % 50;
            assert_eq!(rec.data.len(), len);
            assert_eq!(rec.orig_len as usize, len);
            assert!(rec.data.iter().enumerate().all(|(j, &b)| b == (i + j) as u8), "frame {i}");
            assert_eq!(rec.ts_ns, (i as u64 / 1000) * 1_000_000_000 + (i as u64 % 1000) * 1_000_000);
            i += 1;
        }
        assert_eq!(i, 5000);
        assert_eq!(r.buffer_len(), 4096);
        let reads = r.reads();
        let chunks = file.len().div_ceil(4096) as u64;
        // Each read tops up what the last record left in the buffer, and one more finds the end.
        assert!(reads >= chunks && reads <= chunks + chunks / 10 + 2, "{reads} reads for {chunks} chunks");
        drop(r);
        assert_eq!(src.largest_ask, 4096);
    }

    /// A record longer than a chunk grows the buffer to that record, no more.
    #[test]
    fn a_record_longer_than_a_chunk_still_reads() {
        let mut file = pcap(0);
        for len in [9000usize, 100] {
            file.extend_from_slice(&[0; 8]);
            file.extend_from_slice(&(len as u32).to_le_bytes());
            file.extend_from_slice(&(len as u32).to_le_bytes());
            file.extend(std::iter::repeat_n(7u8, len));
        }
        let mut r = PcapChunks::new(&file[..], 1024, "t.pcap").unwrap();
        assert_eq!(r.next_record().unwrap().unwrap().data.len(), 9000);
        assert_eq!(r.next_record().unwrap().unwrap().data.len(), 100);
        assert_eq!(r.next_record().unwrap(), None);
        assert_eq!(r.buffer_len(), 9016);
    }

    /// Byte-swapped and nanosecond files read; damage is an error naming the file and offset.
    #[test]
    fn formats_and_damage() {
        let mut be = Vec::new();
        be.extend_from_slice(&0xa1b2_3c4du32.to_be_bytes());
        be.extend_from_slice(&[0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0]);
        be.extend_from_slice(&1500u32.to_be_bytes());
        be.extend_from_slice(&1u32.to_be_bytes());
        for x in [7u32, 999_999_999, 3, 3] {
            be.extend_from_slice(&x.to_be_bytes());
        }
        be.extend_from_slice(&[1, 2, 3]);
        let mut r = PcapChunks::new(&be[..], 64, "be.pcap").unwrap();
        assert_eq!(r.head(), PcapHead { swapped: true, nanos: true, snaplen: 1500, linktype: 1 });
        let rec = r.next_record().unwrap().unwrap();
        assert_eq!((rec.ts_ns, rec.data), (7_999_999_999, &[1u8, 2, 3][..]));
        assert_eq!(r.next_record().unwrap(), None);

        // A last record cut short, in its data or in its header: the file ends before it.
        for cut_by in [5, 70] {
            let mut cut = pcap(3);
            cut.truncate(cut.len() - cut_by);
            let mut r = PcapChunks::new(&cut[..], 64, "cut.pcap").unwrap();
            assert_eq!(r.next_record().unwrap().unwrap().data.len(), 60);
            assert_eq!(r.next_record().unwrap().unwrap().data.len(), 61);
            assert_eq!(r.cut_at(), None);
            assert_eq!(r.next_record().unwrap(), None, "cut by {cut_by}");
            assert_eq!(r.cut_at(), Some(177));
            assert_eq!(r.next_record().unwrap(), None);
        }

        let mut huge = pcap(0);
        huge.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0]);
        let e = PcapChunks::new(&huge[..], 64, "h.pcap").unwrap().next_record().unwrap_err();
        assert!(e.contains("h.pcap: record at byte 24: 16777215 bytes captured"), "{e}");
        let e = PcapChunks::new(&b"\x0a\x0d\x0d\x0a0123456789012345678901"[..], 64, "n.pcapng").unwrap_err();
        assert!(e.contains("a pcapng file"), "{e}");
        assert!(PcapChunks::new(&b"short"[..], 64, "s").unwrap_err().contains("shorter than its 24-byte header"));
    }

    /// The reader thread's batches: every frame of every pass in order, passes marked, frames
    /// too long skipped and counted, batches reused (at most BATCHES exist).
    #[test]
    fn read_loops_hands_over_every_pass_in_batches() {
        let d = std::env::temp_dir().join(format!("pktgen-replay-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("a.pcap");
        std::fs::write(&p, pcap(20_000)).unwrap();
        let (tx, rx) = std::sync::mpsc::sync_channel(BATCHES);
        let (back_tx, back_rx) = std::sync::mpsc::sync_channel(BATCHES);
        let p2 = p.clone();
        let t = std::thread::spawn(move || read_loops(&p2, 3, 100, tx, back_rx));
        let (mut frames, mut skipped, mut passes, mut batches) = (0u64, 0u64, 0u64, 0u64);
        let mut ptrs = std::collections::HashSet::new();
        while let Ok(b) = rx.recv() {
            ptrs.insert(b.data.as_ptr() as usize);
            batches += 1;
            assert!(b.data.len() <= BATCH_BYTES);
            if b.first_of_loop {
                passes += 1;
                assert_eq!(b.frames[0].ts_ns, 0);
            }
            for f in &b.frames {
                let i = (f.ts_ns / 1_000_000) as usize;
                assert_eq!(f.len as usize, 60 + i % 50);
                assert_eq!(b.data[f.at as usize], i as u8);
            }
            frames += b.frames.len() as u64;
            skipped += b.skipped;
            // The reader drops its end once the last pass is sent; a batch handed back after
            // that has no one to take it (the sender does the same: `try_send`, result ignored).
            let _ = back_tx.send(b);
        }
        t.join().unwrap().unwrap();
        // Lengths 101..=109 (9 of every 50 frames) are longer than 100 bytes.
        assert_eq!((frames, skipped, passes), (3 * (20_000 - 3600), 3 * 3600, 3));
        assert!(batches > 3 * 4, "{batches}");
        assert!(ptrs.len() <= BATCHES, "{} buffers", ptrs.len());
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// The pcap keys: what a pcap stream needs and refuses, each error naming the key.
    #[test]
    fn config_keys_of_pcap_streams() {
        use crate::live::config::{load_str, Rate};
        let d = std::env::temp_dir().join(format!("pktgen-replay-conf-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("t.pcap");
        std::fs::write(&p, pcap(120)).unwrap();
        let base = "[pktgen]\ntx_lcores = [1, 2]\n[[port]]\nvdev = \"net_null0\"\n[[stream]]\nport = 0\n";
        let load = |extra: &str| load_str(&format!("{base}{extra}"), std::path::Path::new("x.toml"));
        let file = format!("kind = \"pcap\"\nfile = \"{}\"\n", p.display());
        let l = load(&format!("{file}loops = 0\nspeed = 2.5\n")).unwrap();
        let s = &l.streams[0];
        let r = s.replay.as_ref().unwrap();
        assert_eq!((r.loops, r.speed, r.max_frame, r.info.frames, r.info.longest), (0, Some(2.5), 109, 120, 109));
        // Frame i is 60 + i % 50 bytes: every length from 60 to 109.
        assert_eq!(s.sizes, (60..110).collect::<Vec<_>>());
        assert_eq!((s.lcores.clone(), s.rate), (vec![1], Rate::Full));
        assert_eq!(l.data_room, 2176);
        let l = load(&format!("{file}rate_bps = 1e6\nlcores = [2]\n")).unwrap();
        assert_eq!(l.streams[0].replay.as_ref().unwrap().loops, 1);
        assert_eq!(l.streams[0].lcores, vec![2]);
        let e = |extra: &str| load(extra).unwrap_err().to_string();
        assert!(e("kind = \"pcap\"\n").contains("key `stream[0].file`: a pcap stream needs its capture file"));
        assert!(e(&format!("{file}size = 64\n"))
            .contains("key `stream[0].size`: a pcap stream sends the file's frames as captured"));
        assert!(e(&format!("{file}flows = 4\n")).contains("key `stream[0].flows`"));
        for sp in ["0", "1e-15", "1e-100", "2e6", "nan", "inf"] {
            let m = e(&format!("{file}speed = {sp}\n"));
            assert!(m.contains("key `stream[0].speed`: expected a factor from 1e-6 to 1e6"), "{sp}: {m}");
        }
        assert_eq!(
            load(&format!("{file}speed = 1e-6\n")).unwrap().streams[0].replay.as_ref().unwrap().speed,
            Some(1e-6)
        );
        assert!(
            e(&format!("{file}speed = 1\nrate_pps = 5\n")).contains("key `stream[0]`: expected at most one of `speed`")
        );
        assert!(e(&format!("{file}lcores = [1, 2]\n"))
            .contains("key `stream[0].lcores`: a pcap stream is sent by one lcore"));
        assert!(e("size = 64\nloops = 2\n").contains("key `stream[0].loops`: only a pcap stream"));
        let e2 = e("kind = \"pcap\"\nfile = \"/nonexistent/x.pcap\"\n");
        assert!(e2.contains("key `stream[0].file`: cannot open /nonexistent/x.pcap"), "{e2}");
        std::fs::write(d.join("bad.pcap"), b"not a capture at all, no").unwrap();
        let e3 = e(&format!("kind = \"pcap\"\nfile = \"{}\"\n", d.join("bad.pcap").display()));
        assert!(e3.contains("not a pcap file (magic"), "{e3}");
        let two = format!("{file}rx_port = 0\n[[stream]]\nport = 0\n{file}rx_port = 0\n");
        assert!(e(&two).contains("key `stream[1].rx_port`: pcap stream \"stream0\" already receives on this port"));
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A file with the bytes of `pcap(n)` and the given snapshot length.
    fn with_snaplen(mut v: Vec<u8>, snap: u32) -> Vec<u8> {
        v[16..20].copy_from_slice(&snap.to_le_bytes());
        v
    }

    /// A record longer than the snapshot length is delivered cut to it (libpcap's reading);
    /// the wire length stays. A snapshot length of 0 cuts nothing.
    #[test]
    fn records_past_the_snaplen_are_cut_to_it() {
        let f = with_snaplen(pcap(50), 80);
        let mut r = PcapChunks::new(&f[..], 64, "s.pcap").unwrap();
        let mut lens = Vec::new();
        while let Some(rec) = r.next_record().unwrap() {
            assert_eq!(rec.data[0], lens.len() as u8);
            lens.push((rec.data.len(), rec.orig_len));
        }
        assert_eq!(lens.len(), 50);
        assert_eq!(lens[19], (79, 79));
        assert_eq!(lens[20], (80, 80));
        assert_eq!(lens[49], (80, 109));
        let f = with_snaplen(pcap(50), 0);
        let mut r = PcapChunks::new(&f[..], 64, "s.pcap").unwrap();
        let mut longest = 0;
        while let Some(rec) = r.next_record().unwrap() {
            longest = longest.max(rec.data.len());
        }
        assert_eq!(longest, 109);
    }

    /// Loading reads every file through, whatever its size: a cut last record is counted and
    /// the frames before it kept; a damaged record is refused before anything is sent, in a
    /// file of 65 MiB as in a small one. The distinct lengths are learnt.
    #[test]
    fn inspect_reads_every_file_through() {
        let d = std::env::temp_dir().join(format!("pktgen-inspect-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("cut.pcap");
        let mut cut = pcap(30);
        cut.truncate(cut.len() - 10);
        std::fs::write(&p, &cut).unwrap();
        let i = inspect(&p).unwrap();
        assert_eq!((i.frames, i.longest, i.cut_at), (29, 88, Some(cut.len() as u64 - 16 - 89 + 10)));
        assert_eq!(i.sizes, (60..89).collect::<Vec<_>>());
        // 65 MiB of 1000-byte frames, a damaged record header in the middle.
        let mut big = pcap(0);
        let frame = [0x5au8; 1000];
        let n = (65 << 20) / 1016 + 1;
        for k in 0..n {
            let incl: u32 = if k == n / 2 { 0x7fff_ffff } else { 1000 };
            for x in [0u32, 0, incl, 1000] {
                big.extend_from_slice(&x.to_le_bytes());
            }
            big.extend_from_slice(&frame);
        }
        assert!(big.len() > 65 << 20);
        let p = d.join("big.pcap");
        std::fs::write(&p, &big).unwrap();
        let e = inspect(&p).unwrap_err();
        let at = 24 + (n / 2) * 1016;
        assert!(e.contains(&format!("record at byte {at}: 2147483647 bytes captured")), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// The reader hands over every frame before a damaged record, then returns the error; a
    /// cut last record is counted as unreadable once per pass and the frames before it sent.
    #[test]
    fn read_loops_keeps_the_frames_before_damage() {
        let d = std::env::temp_dir().join(format!("pktgen-replay-dmg-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let run = |bytes: &[u8], loops: u64| {
            let p = d.join("x.pcap");
            std::fs::write(&p, bytes).unwrap();
            let (tx, rx) = std::sync::mpsc::sync_channel(BATCHES);
            let (back_tx, back_rx) = std::sync::mpsc::sync_channel(BATCHES);
            let t = std::thread::spawn(move || read_loops(&p, loops, 9000, tx, back_rx));
            let (mut frames, mut unreadable) = (0u64, 0u64);
            while let Ok(b) = rx.recv() {
                frames += b.frames.len() as u64;
                unreadable += b.unreadable;
                let _ = back_tx.send(b);
            }
            (frames, unreadable, t.join().unwrap())
        };
        let mut cut = pcap(10_000);
        cut.truncate(cut.len() - 3);
        assert_eq!(run(&cut, 2), (2 * 9_999, 2, Ok(())));
        let mut dmg = pcap(10_000);
        dmg.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f, 100, 0, 0, 0]);
        let (frames, unreadable, r) = run(&dmg, 1);
        assert_eq!((frames, unreadable), (10_000, 0));
        assert!(r.unwrap_err().contains("2147483647 bytes captured"));
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A send time past the TSC's range is never rather than wrapped round to the past.
    #[test]
    fn due_saturates() {
        let f = FrameRef { at: 0, len: 60, ts_ns: 1_000_000_000 };
        assert_eq!(due(1000, 0, &f, 3.0), 3_000_001_000);
        assert_eq!(due(1000, 0, &f, 3.0 / 1e-15), u64::MAX);
        assert_eq!(due(1000, 0, &f, 3.0 / 1e-100), u64::MAX);
        assert_eq!(due(u64::MAX - 5, 0, &f, 3.0), u64::MAX);
    }
}
