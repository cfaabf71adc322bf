//! What the packet core needs from a packet buffer and from the I/O around it.
//!
//! The DPDK layer implements these traits with mbufs and per-port tx buffers; tests and fuzzing
//! implement them with [`VecBuf`] and [`VecIo`]. The data path is generic over them, so the code
//! that runs in the appliance is the code that the unit tests run.

use crate::parse::RxChecksum;

/// A frame buffer that the packet core can read, rewrite and resize: one segment, or a chain of
/// them (DPDK: an mbuf chain, `nb_segs > 1`, as a PMD delivers a frame larger than the mempool's
/// data room).
///
/// Lengths are bytes. Growing at the front uses the first segment's headroom (DPDK:
/// `rte_pktmbuf_prepend`), growing at the back the last segment's tailroom
/// (`rte_pktmbuf_append`). The packet core reads and rewrites headers in [`PacketBuf::data`],
/// the first segment; the rest of a chain travels untouched.
pub trait PacketBuf {
    /// The first segment's bytes: the whole frame unless [`PacketBuf::is_segmented`].
    fn data(&self) -> &[u8];
    /// The first segment's bytes, writable.
    fn data_mut(&mut self) -> &mut [u8];
    /// The frame's length in bytes, every segment counted (DPDK: `pkt_len`); the length of
    /// [`PacketBuf::data`] for a one-segment frame.
    fn total_len(&self) -> usize {
        self.data().len()
    }
    /// Grows the frame by `len` bytes at the front; false (and nothing changed) without room.
    fn prepend(&mut self, len: usize) -> bool;
    /// Removes `len` bytes from the front; false (and nothing changed) if shorter.
    fn adj(&mut self, len: usize) -> bool;
    /// Grows the frame by `len` bytes (unspecified content) at the back; false without room.
    fn append(&mut self, len: usize) -> bool;
    /// Removes `len` bytes from the back; false (and nothing changed) if shorter.
    fn trim(&mut self, len: usize) -> bool;
    /// Capture time in microseconds since the Unix epoch, when the port provides one (net_pcap
    /// stamps each record's capture time in the mbuf's rx-timestamp dynamic field).
    fn rx_timestamp_us(&self) -> Option<u64>;
    /// True when the frame spans more than one segment: [`PacketBuf::data`] is then only its
    /// first segment, shorter than [`PacketBuf::total_len`]. The packet core forwards such
    /// frames when their headers lie in the first segment, and drops those it would have to
    /// read whole (module docs of `datapath`).
    fn is_segmented(&self) -> bool {
        false
    }
    /// The NIC's rx checksum verdicts for the frame as received (DPDK: the
    /// `RTE_MBUF_F_RX_IP_CKSUM_*` and `RTE_MBUF_F_RX_L4_CKSUM_*` bits of `ol_flags`), which the
    /// parser trusts instead of summing again. [`RxChecksum::UNKNOWN`] (the default) when the
    /// port does not verify checksums. Only meaningful before the frame is rewritten.
    fn rx_checksum(&self) -> RxChecksum {
        RxChecksum::UNKNOWN
    }

    /// Moves up to `len` bytes from the segments after the first to the end of the first (BSD's
    /// `m_pullup`), so that headers a segment boundary cut can be read whole there; the frame's
    /// bytes and length are unchanged, a segment left empty is freed. Returns how many bytes
    /// the first segment gained: fewer than `len` when the frame ends or the first segment's
    /// buffer has no more room (its tailroom, then its headroom down to
    /// [`PULL_UP_KEEP_HEADROOM`] bytes, the data moved towards the buffer's start); 0 for a
    /// one-segment frame (the default).
    fn pull_up(&mut self, len: usize) -> usize {
        let _ = len;
        0
    }

    /// Sets the frame to exactly `len` bytes by appending or trimming at the back.
    fn set_len(&mut self, len: usize) -> bool {
        let cur = self.total_len();
        if len >= cur {
            self.append(len - cur)
        } else {
            self.trim(cur - len)
        }
    }
}

/// Headroom bytes [`PacketBuf::pull_up`] leaves in a first segment: room for two VLAN tags
/// pushed after it, and more.
pub const PULL_UP_KEEP_HEADROOM: usize = 16;

/// Allocation of new frames and transmission, as seen from one worker.
pub trait PacketIo {
    /// The buffer type (an mbuf in the appliance).
    type Buf: PacketBuf;
    /// A new empty frame (length 0, default headroom), or `None` when the pool is exhausted.
    fn alloc(&mut self) -> Option<Self::Buf>;
    /// Queues `buf` for transmission on `port` (buffered; flushed by the worker's drain).
    fn send(&mut self, port: u16, buf: Self::Buf);
    /// Number of ports: valid egress ports are `0..ports()`.
    fn ports(&self) -> u16;

    /// Hands `buf` to worker `worker`, which owns its state (the software steering of gradient
    /// packets between cores). Gives the buffer back when that worker's ring is full.
    fn hand_off(&mut self, worker: u16, buf: Self::Buf) -> Result<(), Self::Buf> {
        let _ = worker;
        Err(buf)
    }

    /// Hands `buf`, to leave on `port` in traffic class `class`, to the worker that owns
    /// `port`'s egress scheduler (several workers sending to a shaped port: one lcore owns its
    /// scheduler and the others reach it over rings, as DPDK's qos_sched). Gives the buffer back
    /// when there is no such worker or its ring is full.
    fn to_scheduler(&mut self, port: u16, class: u8, buf: Self::Buf) -> Result<(), Self::Buf> {
        let _ = (port, class);
        Err(buf)
    }

    /// A new frame holding a copy of the whole of `src`, every segment of a chain (DPDK:
    /// `rte_pktmbuf_copy`); `None` when the pool is exhausted. The default copies
    /// [`PacketBuf::data`], which is the whole frame for a one-segment `src`; a `PacketIo`
    /// whose buffers can be chains overrides it.
    fn copy_pkt(&mut self, src: &Self::Buf) -> Option<Self::Buf> {
        self.copy_of(src.data())
    }

    /// A new frame of `head`, then the `len` bytes of `body`'s data ([`PacketBuf::data`]) from
    /// byte `off`, then `tail`: one more copy of a frame whose payload is already written into
    /// `body` (a RESULT frame to one more member; `[dataplane] zero_copy_results`).
    ///
    /// In the appliance (DPDK) `body`'s bytes are shared, not copied: a header mbuf holding
    /// `head`, chained to an indirect mbuf attached to `body` (`rte_pktmbuf_attach`, as
    /// `rte_pktmbuf_clone` and DPDK's ipv4_multicast example do) and trimmed to the range, and a
    /// third mbuf holding `tail` when it is not empty (RoCEv2's pad and ICRC). `body` then must
    /// not change until every frame sharing it is sent; its buffer returns to the pool when the
    /// last of them is freed. The default copies into one new frame.
    ///
    /// The frame, and whether it shares `body`'s bytes (false: a copy). `None` when the pool is
    /// exhausted, a buffer is too small, or the range is not inside `body.data()`.
    fn share(&mut self, head: &[u8], body: &Self::Buf, off: usize, len: usize, tail: &[u8]) -> Option<(Self::Buf, bool)>
    where
        Self: Sized,
    {
        let src = body.data().get(off..off.checked_add(len)?)?;
        Some((concat_frame(self, head, src, tail)?, false))
    }

    /// A new frame holding a copy of `src`'s bytes; `None` when the pool is exhausted.
    fn copy_of(&mut self, src: &[u8]) -> Option<Self::Buf> {
        let mut b = self.alloc()?;
        if !b.append(src.len()) {
            return None;
        }
        b.data_mut().copy_from_slice(src);
        Some(b)
    }
}

/// A new one-segment frame holding `head`, `payload` and `tail` one after the other; `None`
/// when the pool is exhausted or its buffers are too small.
pub fn concat_frame<I: PacketIo>(io: &mut I, head: &[u8], payload: &[u8], tail: &[u8]) -> Option<I::Buf> {
    let mut b = io.alloc()?;
    if !b.append(head.len() + payload.len() + tail.len()) {
        return None;
    }
    let (h, rest) = b.data_mut().split_at_mut(head.len());
    let (p, t) = rest.split_at_mut(payload.len());
    h.copy_from_slice(head);
    p.copy_from_slice(payload);
    t.copy_from_slice(tail);
    Some(b)
}

/// Headroom of a [`VecBuf`], as DPDK's `RTE_PKTMBUF_HEADROOM` (bytes).
pub const VEC_HEADROOM: usize = 128;
/// Capacity of a [`VecBuf`] after its headroom (bytes), enough for 9 KiB jumbo frames.
pub const VEC_DATA_ROOM: usize = 9216;

/// A heap frame with mbuf-like headroom: the packet core's buffer in tests and fuzzing.
///
/// [`VecBuf::segmented`] makes one that behaves as a two-segment mbuf chain: [`PacketBuf::data`]
/// is the first segment only, `adj` cannot remove more than it (as `rte_pktmbuf_adj`) nor
/// `trim` more than the last segment (as `rte_pktmbuf_trim`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VecBuf {
    mem: Vec<u8>,
    start: usize,
    end: usize,
    /// The end of the first segment in `mem` (`end` for one segment: the data is then one
    /// slice, read without a test, as an mbuf's first segment is).
    first_end: usize,
    /// Whether the frame is a modelled chain of two segments.
    seg: bool,
    /// The rx timestamp (µs) that [`PacketBuf::rx_timestamp_us`] reports.
    pub timestamp_us: Option<u64>,
    /// The rx checksum verdicts that [`PacketBuf::rx_checksum`] reports (default: unknown).
    pub rx_checksum: RxChecksum,
}

impl VecBuf {
    /// An empty buffer.
    pub fn new() -> Self {
        VecBuf {
            mem: vec![0; VEC_HEADROOM + VEC_DATA_ROOM],
            start: VEC_HEADROOM,
            end: VEC_HEADROOM,
            first_end: VEC_HEADROOM,
            seg: false,
            timestamp_us: None,
            rx_checksum: RxChecksum::UNKNOWN,
        }
    }

    /// A buffer holding a copy of `frame` (at most [`VEC_DATA_ROOM`] bytes are kept).
    pub fn from_frame(frame: &[u8]) -> Self {
        let mut b = Self::new();
        let n = frame.len().min(VEC_DATA_ROOM);
        b.mem[b.start..b.start + n].copy_from_slice(&frame[..n]);
        b.end = b.start + n;
        b.first_end = b.end;
        b
    }

    /// A buffer holding a copy of `frame` as a chain whose first segment holds its first
    /// `first` bytes (one segment when `first` is 0 or covers the whole frame).
    pub fn segmented(frame: &[u8], first: usize) -> Self {
        let mut b = Self::from_frame(frame);
        if first > 0 && first < b.end - b.start {
            b.seg = true;
            b.first_end = b.start + first;
        }
        b
    }

    /// Every byte of the frame, all segments (what a tx PMD sends).
    pub fn whole(&self) -> &[u8] {
        &self.mem[self.start..self.end]
    }
}

impl Default for VecBuf {
    fn default() -> Self {
        Self::new()
    }
}

impl PacketBuf for VecBuf {
    fn data(&self) -> &[u8] {
        &self.mem[self.start..self.first_end]
    }
    fn data_mut(&mut self) -> &mut [u8] {
        &mut self.mem[self.start..self.first_end]
    }
    fn total_len(&self) -> usize {
        self.end - self.start
    }
    fn is_segmented(&self) -> bool {
        self.seg
    }
    fn prepend(&mut self, len: usize) -> bool {
        if len > self.start {
            return false;
        }
        self.start -= len;
        true
    }
    fn adj(&mut self, len: usize) -> bool {
        if len > self.first_end - self.start {
            return false;
        }
        self.start += len;
        true
    }
    fn append(&mut self, len: usize) -> bool {
        if len > self.mem.len() - self.end {
            return false;
        }
        self.end += len;
        if !self.seg {
            self.first_end = self.end;
        }
        true
    }
    fn trim(&mut self, len: usize) -> bool {
        if len > self.end - (if self.seg { self.first_end } else { self.start }) {
            return false;
        }
        self.end -= len;
        if !self.seg {
            self.first_end = self.end;
        }
        true
    }
    fn rx_timestamp_us(&self) -> Option<u64> {
        self.timestamp_us
    }
    fn rx_checksum(&self) -> RxChecksum {
        self.rx_checksum
    }
    /// As an mbuf chain whose first segment is full (net_pcap fills it): it gains at most its
    /// headroom beyond [`PULL_UP_KEEP_HEADROOM`], and the headroom shrinks by as much.
    fn pull_up(&mut self, len: usize) -> usize {
        if !self.seg {
            return 0;
        }
        let gain = len.min(self.end - self.first_end).min(self.start.saturating_sub(PULL_UP_KEEP_HEADROOM));
        // The frame stays contiguous in `mem`, moved down by `gain` into the headroom: the
        // first segment, which ends where it did, holds `gain` more of its bytes.
        self.mem.copy_within(self.start..self.end, self.start - gain);
        self.start -= gain;
        self.end -= gain;
        if self.first_end >= self.end {
            self.seg = false;
            self.first_end = self.end;
        }
        gain
    }
}

/// An I/O that collects what is sent, for tests: `sent[i]` is `(port, frame bytes)`.
#[derive(Debug, Default)]
pub struct VecIo {
    /// Number of ports.
    pub nb_ports: u16,
    /// Frames sent, in order.
    pub sent: Vec<(u16, Vec<u8>)>,
    /// How many more allocations succeed (`None`: unlimited), to test pool exhaustion.
    pub alloc_budget: Option<usize>,
    /// Frames handed to other workers: (worker, frame bytes).
    pub handed_off: Vec<(u16, Vec<u8>)>,
    /// Frames handed to the worker owning a shaped port's scheduler: (port, class, frame).
    pub to_scheduler: Vec<(u16, u8, VecBuf)>,
    /// How many more frames the scheduler rings take (`None`: unlimited), to test a full ring.
    pub scheduler_room: Option<usize>,
    /// Frames made by [`PacketIo::share`].
    pub shared: usize,
}

impl VecIo {
    /// An I/O with `nb_ports` ports and unlimited allocation.
    pub fn new(nb_ports: u16) -> Self {
        VecIo {
            nb_ports,
            sent: Vec::new(),
            alloc_budget: None,
            handed_off: Vec::new(),
            to_scheduler: Vec::new(),
            scheduler_room: None,
            shared: 0,
        }
    }
}

impl PacketIo for VecIo {
    type Buf = VecBuf;
    fn alloc(&mut self) -> Option<VecBuf> {
        if let Some(n) = self.alloc_budget.as_mut() {
            if *n == 0 {
                return None;
            }
            *n -= 1;
        }
        Some(VecBuf::new())
    }
    fn send(&mut self, port: u16, buf: VecBuf) {
        self.sent.push((port, buf.whole().to_vec()));
    }
    fn ports(&self) -> u16 {
        self.nb_ports
    }
    fn copy_pkt(&mut self, src: &VecBuf) -> Option<VecBuf> {
        let mut b = self.alloc()?;
        b.clone_from(src);
        Some(b)
    }
    /// As the appliance's mbufs: a chain whose first segment is `head`, taking from the
    /// allocation budget what DPDK would (a header and an indirect buffer, and one for `tail`),
    /// all or none (as `rte_pktmbuf_alloc_bulk`).
    fn share(&mut self, head: &[u8], body: &VecBuf, off: usize, len: usize, tail: &[u8]) -> Option<(VecBuf, bool)> {
        let src = body.data().get(off..off.checked_add(len)?)?;
        let n = 2 + usize::from(!tail.is_empty());
        if let Some(budget) = self.alloc_budget.as_mut() {
            *budget = budget.checked_sub(n)?;
        }
        self.shared += 1;
        Some((VecBuf::segmented(&[head, src, tail].concat(), head.len()), true))
    }
    fn hand_off(&mut self, worker: u16, buf: VecBuf) -> Result<(), VecBuf> {
        self.handed_off.push((worker, buf.whole().to_vec()));
        Ok(())
    }
    fn to_scheduler(&mut self, port: u16, class: u8, buf: VecBuf) -> Result<(), VecBuf> {
        if let Some(n) = self.scheduler_room.as_mut() {
            if *n == 0 {
                return Err(buf);
            }
            *n -= 1;
        }
        self.to_scheduler.push((port, class, buf));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vecbuf_resizes_like_an_mbuf() {
        let mut b = VecBuf::from_frame(&[1, 2, 3, 4]);
        assert!(b.prepend(2));
        b.data_mut()[..2].copy_from_slice(&[9, 8]);
        assert_eq!(b.data(), &[9, 8, 1, 2, 3, 4]);
        assert!(b.adj(3));
        assert_eq!(b.data(), &[2, 3, 4]);
        assert!(b.trim(1));
        assert_eq!(b.data(), &[2, 3]);
        assert!(!b.trim(3));
        assert!(!b.prepend(VEC_HEADROOM + 10));
        assert!(b.set_len(5));
        assert_eq!(b.data().len(), 5);
    }

    #[test]
    fn vecio_alloc_budget_runs_out() {
        let mut io = VecIo::new(2);
        io.alloc_budget = Some(1);
        assert!(io.copy_of(&[1, 2]).is_some());
        assert!(io.alloc().is_none());
    }
}
