//! An owned mbuf ([`Mbuf`], freed on drop) and bursts of them.

use crate::buf::PacketBuf;
use crate::parse::{CsumStatus, RxChecksum};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

/// An owned packet mbuf: dropping it returns it to its pool (`rte_pktmbuf_free`).
#[repr(transparent)]
#[derive(Debug)]
pub struct Mbuf(NonNull<dpdk_sys::rte_mbuf>);

// SAFETY: an mbuf is owned by exactly one Mbuf at a time; moving ownership between lcores is how
// DPDK is used (rings, tx queues).
unsafe impl Send for Mbuf {}

impl Mbuf {
    /// Takes ownership of a raw mbuf.
    ///
    /// # Safety
    /// `raw` must be a valid mbuf that nothing else will free or use.
    #[inline(always)]
    pub unsafe fn from_raw(raw: NonNull<dpdk_sys::rte_mbuf>) -> Mbuf {
        Mbuf(raw)
    }

    /// Gives up ownership without freeing.
    #[inline(always)]
    pub fn into_raw(self) -> *mut dpdk_sys::rte_mbuf {
        let p = self.0.as_ptr();
        std::mem::forget(self);
        p
    }

    /// A copy of the whole frame, every segment, into mbufs of `pool`, whose first segment
    /// holds exactly the bytes this frame's first segment holds, so that the headers a parse
    /// found there are found there in the copy too: the first segment copied into one mbuf
    /// (its headroom shortened when it holds more than `buf_len - RTE_PKTMBUF_HEADROOM` bytes,
    /// as a frame that a VLAN push grew does), the rest copied by `rte_pktmbuf_copy` and
    /// chained. (`rte_pktmbuf_copy` alone fills each segment to its room: a first segment that
    /// had grown into its headroom would lose its last bytes to the next segment.) `None` when
    /// the pool runs out or the first segment is longer than one of `pool`'s buffers.
    pub fn copy_whole(&self, pool: &super::Mempool) -> Option<Mbuf> {
        let first = self.hdr().data_len;
        let mut head = pool.alloc()?;
        {
            // SAFETY: a fresh mbuf we own: one segment, nothing chained.
            let h = unsafe { head.0.as_mut() };
            if first > h.buf_len {
                return None;
            }
            h.data_off = (dpdk_sys::RTE_PKTMBUF_HEADROOM as u16).min(h.buf_len - first);
            h.data_len = first;
            h.pkt_len = u32::from(first);
        }
        head.data_mut().copy_from_slice(self.data());
        if self.is_segmented() {
            // SAFETY: `self` is a valid chain we own (borrowed for the call, which only reads
            // it), at least `first` bytes long; the pool is valid while borrowed. The copy is a
            // new chain nothing else owns.
            let rest =
                unsafe { dpdk_sys::rte_pktmbuf_copy(self.0.as_ptr(), pool.as_ptr(), u32::from(first), u32::MAX) };
            // SAFETY: a non-null result is a new mbuf chain that only this Mbuf will own.
            let rest = NonNull::new(rest).map(|m| unsafe { Mbuf::from_raw(m) })?;
            head.chain(rest).ok()?;
        }
        Some(head)
    }

    /// How many bytes the first segment can grow by at its back: its tailroom, plus its
    /// headroom beyond [`crate::buf::PULL_UP_KEEP_HEADROOM`] bytes, into which its data can
    /// move ([`Mbuf::open_tailroom`]). `None` when its buffer is not its own to move data in (an
    /// indirect mbuf, or a buffer referenced more than once).
    fn growable(&self) -> Option<usize> {
        let h = self.hdr();
        // SAFETY: a valid mbuf we own.
        if h.ol_flags & dpdk_sys::RTE_MBUF_F_INDIRECT != 0 || unsafe { dpdk_sys::shim_mbuf_refcnt_read(h) } != 1 {
            return None;
        }
        let (off, dlen, blen) = (usize::from(h.data_off), usize::from(h.data_len), usize::from(h.buf_len));
        Some(blen.saturating_sub(off + dlen) + off.saturating_sub(crate::buf::PULL_UP_KEEP_HEADROOM))
    }

    /// Moves the first segment's data towards its buffer's start, as far as needed for `len`
    /// bytes of tailroom to follow it; `len` must be at most [`Mbuf::growable`].
    fn open_tailroom(&mut self, len: usize) {
        // SAFETY: we own the mbuf; &mut self guarantees exclusive access to its header.
        let h = unsafe { self.0.as_mut() };
        let (off, dlen, blen) = (usize::from(h.data_off), usize::from(h.data_len), usize::from(h.buf_len));
        let shift = len.saturating_sub(blen.saturating_sub(off + dlen));
        if shift > 0 {
            let base = h.buf_addr as *mut u8;
            // SAFETY: both ranges lie inside the buffer (off - shift >= the headroom kept, as
            // `len` is at most `growable`); `copy` allows them to overlap.
            unsafe { std::ptr::copy(base.add(off), base.add(off - shift), dlen) };
            h.data_off -= shift as u16;
        }
    }

    /// The raw mbuf, still owned by `self` (for DPDK calls that only read it).
    #[inline(always)]
    pub fn as_raw(&self) -> *const dpdk_sys::rte_mbuf {
        self.0.as_ptr()
    }

    /// The mbuf's header.
    #[inline(always)]
    fn hdr(&self) -> &dpdk_sys::rte_mbuf {
        // SAFETY: we own a valid mbuf.
        unsafe { self.0.as_ref() }
    }

    /// Sets the length of a one-segment mbuf's data to `len` bytes (`data_len` and `pkt_len`,
    /// as `rte_pktmbuf_append` on a fresh mbuf does, without the call): false, with nothing
    /// changed, when the buffer has no room for `len` bytes after its headroom
    /// (`buf_len - data_off`). The new bytes hold whatever the buffer held.
    #[inline(always)]
    pub fn set_len(&mut self, len: u16) -> bool {
        // SAFETY: we own a valid mbuf; &mut self guarantees exclusive access.
        let h = unsafe { self.0.as_mut() };
        if h.nb_segs != 1 || u32::from(len) + u32::from(h.data_off) > u32::from(h.buf_len) {
            return false;
        }
        h.data_len = len;
        h.pkt_len = u32::from(len);
        true
    }

    /// Makes an mbuf from [`super::Mempool::alloc_bulk_raw`] a `len`-byte frame to transmit
    /// and returns its data (`len` bytes, holding whatever the buffer held): the headroom reset
    /// (`data_off = min(RTE_PKTMBUF_HEADROOM, buf_len)`), `data_len` and `pkt_len` set to
    /// `len`, and no offload request (`ol_flags` cleared but for `RTE_MBUF_F_EXTERNAL`), as
    /// `rte_pktmbuf_reset` then `rte_pktmbuf_append` would leave it for a tx PMD (which reads
    /// the other fields only under offload flags). `None`, with only the headroom and flags
    /// reset, when `len` bytes do not fit after the headroom.
    #[inline(always)]
    pub fn reset_tx(&mut self, len: u16) -> Option<&mut [u8]> {
        // SAFETY: we own a valid mbuf; &mut self guarantees exclusive access.
        let h = unsafe { self.0.as_mut() };
        let off = (dpdk_sys::RTE_PKTMBUF_HEADROOM as u16).min(h.buf_len);
        h.data_off = off;
        h.ol_flags &= dpdk_sys::RTE_MBUF_F_EXTERNAL;
        if u32::from(len) + u32::from(off) > u32::from(h.buf_len) {
            return None;
        }
        h.data_len = len;
        h.pkt_len = u32::from(len);
        // SAFETY: buf_addr + off .. + len lies inside the mbuf's buffer (checked above), which
        // we own exclusively for the returned borrow.
        Some(unsafe { std::slice::from_raw_parts_mut((h.buf_addr as *mut u8).add(off as usize), len as usize) })
    }

    /// Makes this fresh mbuf (just allocated: direct, one segment, reference count 1) an
    /// indirect mbuf over `len` bytes of `body`'s data from byte `off` (`rte_pktmbuf_attach`,
    /// then the data offset and lengths narrowed to the range): `body`'s buffer is shared, its
    /// reference count one higher until this mbuf is freed. False, with nothing attached,
    /// when `body` is a chain, the range is not inside its data, or this mbuf is not fresh.
    #[inline]
    pub fn attach_range(&mut self, body: &Mbuf, off: u16, len: u16) -> bool {
        let b = body.hdr();
        let h = self.hdr();
        if b.nb_segs != 1
            || u32::from(off) + u32::from(len) > u32::from(b.data_len)
            || h.nb_segs != 1
            || !h.next.is_null()
            || h.ol_flags & (dpdk_sys::RTE_MBUF_F_INDIRECT | dpdk_sys::RTE_MBUF_F_EXTERNAL) != 0
        {
            return false;
        }
        // SAFETY: both are valid mbufs we own; `self` is direct with one segment (checked
        // above) and, freshly allocated, referenced once; `body` stays valid (its reference
        // count, or its external buffer's, is raised by the call) for as long as `self` holds it.
        unsafe { dpdk_sys::shim_pktmbuf_attach(self.0.as_ptr(), body.0.as_ptr()) };
        // SAFETY: we own `self`; the narrowed range lies inside the shared data (checked above).
        let h = unsafe { self.0.as_mut() };
        h.data_off += off;
        h.data_len = len;
        h.pkt_len = u32::from(len);
        true
    }

    /// Appends the chain `tail` after this chain's last segment (`rte_pktmbuf_chain`): the
    /// segment count and packet length grow by `tail`'s, and `tail`'s first segment, no longer a
    /// chain's head, keeps its own data length as packet length (as DPDK leaves it). Gives
    /// `tail` back when the chain would exceed `RTE_MBUF_MAX_NB_SEGS` segments.
    #[inline]
    pub fn chain(&mut self, tail: Mbuf) -> Result<(), Mbuf> {
        let (segs, len) = (tail.hdr().nb_segs, tail.hdr().pkt_len);
        if u32::from(self.hdr().nb_segs) + u32::from(segs) > dpdk_sys::RTE_MBUF_MAX_NB_SEGS {
            return Err(tail);
        }
        // SAFETY: we own both chains; walking `next` from our head visits only our segments.
        unsafe {
            let mut last = self.0.as_ptr();
            while !(*last).next.is_null() {
                last = (*last).next;
            }
            let t = tail.into_raw();
            (*last).next = t;
            (*t).pkt_len = u32::from((*t).data_len);
            let h = self.0.as_mut();
            h.nb_segs += segs;
            h.pkt_len += len;
        }
        Ok(())
    }

    /// The port the mbuf was received on (`mbuf->port`).
    #[inline(always)]
    pub fn port(&self) -> u16 {
        self.hdr().port
    }

    /// Writes the egress traffic class (0..8) the sending worker chose into
    /// `mbuf->hash.sched.traffic_class`, where `rte_sched_port_pkt_write` keeps it for
    /// `rte_sched` (`rte_mbuf_core.h`, `struct rte_mbuf_sched`): the field DPDK reserves for
    /// carrying a packet's class to a scheduler on another lcore. It shares the `hash` union
    /// with the rx RSS hash, which nothing reads after the pipeline. The owner of the port's
    /// scheduler reads it back with [`Mbuf::sched_class`].
    #[inline(always)]
    pub fn set_sched_class(&mut self, class: u8) {
        // SAFETY: we own a valid mbuf; every variant of the `hash` union is plain data.
        unsafe { (*self.0.as_ptr()).__bindgen_anon_2.hash.sched.traffic_class = class }
    }

    /// The traffic class [`Mbuf::set_sched_class`] wrote.
    #[inline(always)]
    pub fn sched_class(&self) -> u8 {
        // SAFETY: as above; a byte of plain data, whichever variant was written last.
        unsafe { self.hdr().__bindgen_anon_2.hash.sched.traffic_class }
    }
}

impl Drop for Mbuf {
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: we own the mbuf; it is freed exactly once.
        unsafe { dpdk_sys::shim_pktmbuf_free(self.0.as_ptr()) }
    }
}

impl PacketBuf for Mbuf {
    #[inline(always)]
    fn data(&self) -> &[u8] {
        let h = self.hdr();
        // SAFETY: buf_addr + data_off .. + data_len lies inside the mbuf's buffer, which we own.
        unsafe { std::slice::from_raw_parts((h.buf_addr as *const u8).add(h.data_off as usize), h.data_len as usize) }
    }

    #[inline(always)]
    fn data_mut(&mut self) -> &mut [u8] {
        let h = self.hdr();
        // SAFETY: as in data(); &mut self guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut((h.buf_addr as *mut u8).add(h.data_off as usize), h.data_len as usize) }
    }

    #[inline(always)]
    fn prepend(&mut self, len: usize) -> bool {
        // SAFETY: we own the mbuf; the shim checks the headroom.
        len <= u16::MAX as usize && unsafe { !dpdk_sys::shim_pktmbuf_prepend(self.0.as_ptr(), len as u16).is_null() }
    }

    #[inline(always)]
    fn adj(&mut self, len: usize) -> bool {
        // SAFETY: we own the mbuf; the shim checks the length.
        len <= u16::MAX as usize && unsafe { !dpdk_sys::shim_pktmbuf_adj(self.0.as_ptr(), len as u16).is_null() }
    }

    /// `rte_pktmbuf_append`; a one-segment frame short of tailroom first moves its data
    /// towards the buffer's start ([`Mbuf::open_tailroom`], within [`Mbuf::growable`]: a reply
    /// written over a request that fills its mbuf, or that [`PacketBuf::pull_up`] made one
    /// segment, grows at the back).
    #[inline(always)]
    fn append(&mut self, len: usize) -> bool {
        // SAFETY: we own the mbuf; the shim checks the tailroom.
        if len <= u16::MAX as usize && unsafe { !dpdk_sys::shim_pktmbuf_append(self.0.as_ptr(), len as u16).is_null() }
        {
            return true;
        }
        // A one-segment frame short of tailroom (rarely: a reply longer than its request).
        if len > usize::from(u16::MAX) || self.hdr().nb_segs != 1 || self.growable().is_none_or(|g| g < len) {
            return false;
        }
        self.open_tailroom(len);
        // SAFETY: as above.
        unsafe { !dpdk_sys::shim_pktmbuf_append(self.0.as_ptr(), len as u16).is_null() }
    }

    #[inline(always)]
    fn trim(&mut self, len: usize) -> bool {
        // SAFETY: we own the mbuf; the shim checks the length.
        len <= u16::MAX as usize && unsafe { dpdk_sys::shim_pktmbuf_trim(self.0.as_ptr(), len as u16) == 0 }
    }

    /// Moves bytes of the next segments into the first (its tailroom, then its headroom down
    /// to [`crate::buf::PULL_UP_KEEP_HEADROOM`] bytes, the data moved towards the buffer's
    /// start), freeing each segment it empties (`rte_pktmbuf_free_seg`). A first segment that
    /// is not a direct mbuf of its own (indirect, or its buffer shared) gains nothing.
    fn pull_up(&mut self, len: usize) -> usize {
        if self.hdr().nb_segs < 2 || self.hdr().next.is_null() {
            return 0;
        }
        let Some(room) = self.growable() else { return 0 };
        let gain = len.min(room).min((self.hdr().pkt_len as usize).saturating_sub(usize::from(self.hdr().data_len)));
        if gain == 0 {
            return 0;
        }
        self.open_tailroom(gain);
        // SAFETY: we own the chain; &mut self guarantees exclusive access to its headers.
        let h = unsafe { self.0.as_mut() };
        let base = h.buf_addr as *mut u8;
        let mut need = gain;
        while need > 0 {
            let seg = h.next;
            if seg.is_null() {
                break;
            }
            // SAFETY: `seg` is the next segment of our chain: a valid mbuf only we hold.
            let sg = unsafe { &mut *seg };
            let k = need.min(usize::from(sg.data_len));
            // SAFETY: `k` bytes at the segment's data and at the end of the first segment's
            // data, which has room for them (checked above); the two buffers differ.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (sg.buf_addr as *const u8).add(usize::from(sg.data_off)),
                    base.add(usize::from(h.data_off) + usize::from(h.data_len)),
                    k,
                )
            };
            h.data_len += k as u16;
            sg.data_off += k as u16;
            sg.data_len -= k as u16;
            need -= k;
            if sg.data_len == 0 {
                h.next = sg.next;
                h.nb_segs -= 1;
                sg.next = std::ptr::null_mut();
                sg.nb_segs = 1;
                // SAFETY: an emptied segment, unlinked from our chain: nothing else holds it.
                unsafe { dpdk_sys::shim_pktmbuf_free_seg(seg) };
            }
        }
        gain - need
    }

    #[inline(always)]
    fn rx_timestamp_us(&self) -> Option<u64> {
        let flag = TS_FLAG.load(Ordering::Relaxed);
        let h = self.hdr();
        if flag == 0 || h.ol_flags & flag == 0 {
            return None;
        }
        let off = TS_OFFSET.load(Ordering::Relaxed) as usize;
        // SAFETY: the rx-timestamp dynamic field (a u64) was registered at `off` bytes into every
        // mbuf; the flag says the PMD wrote it.
        Some(unsafe { std::ptr::read_unaligned((self.0.as_ptr() as *const u8).add(off) as *const u64) })
    }

    #[inline(always)]
    fn total_len(&self) -> usize {
        self.hdr().pkt_len as usize
    }

    #[inline(always)]
    fn is_segmented(&self) -> bool {
        self.hdr().nb_segs > 1
    }

    #[inline(always)]
    fn rx_checksum(&self) -> RxChecksum {
        rx_checksum_of(self.hdr().ol_flags)
    }
}

/// The rx checksum verdicts in an mbuf's `ol_flags` (DPDK 22.11 `rte_mbuf_core.h`).
///
/// `RTE_MBUF_F_RX_IP_CKSUM_GOOD` / `_BAD` and `RTE_MBUF_F_RX_L4_CKSUM_GOOD` / `_BAD` map to
/// [`CsumStatus::Good`] / [`CsumStatus::Bad`]. `_UNKNOWN` (no offload: net_pcap, net_af_packet)
/// and `_NONE` (both bits: the checksum in the data is wrong but the data's integrity was
/// verified, as virtio may report) map to [`CsumStatus::Unknown`], so the frame is checked in
/// software as without offload: the packet core forwards checksums it has verified, and
/// updates them incrementally (RFC 1624), which needs a right checksum to start from.
#[inline(always)]
pub fn rx_checksum_of(ol_flags: u64) -> RxChecksum {
    let status = |flags: u64, mask: u32, good: u32, bad: u32| match flags & mask as u64 {
        f if f == good as u64 => CsumStatus::Good,
        f if f == bad as u64 => CsumStatus::Bad,
        _ => CsumStatus::Unknown,
    };
    RxChecksum {
        ip: status(
            ol_flags,
            dpdk_sys::RTE_MBUF_F_RX_IP_CKSUM_MASK,
            dpdk_sys::RTE_MBUF_F_RX_IP_CKSUM_GOOD,
            dpdk_sys::RTE_MBUF_F_RX_IP_CKSUM_BAD,
        ),
        l4: status(
            ol_flags,
            dpdk_sys::RTE_MBUF_F_RX_L4_CKSUM_MASK,
            dpdk_sys::RTE_MBUF_F_RX_L4_CKSUM_GOOD,
            dpdk_sys::RTE_MBUF_F_RX_L4_CKSUM_BAD,
        ),
    }
}

static TS_OFFSET: AtomicI32 = AtomicI32::new(-1);
static TS_FLAG: AtomicU64 = AtomicU64::new(0);

/// Registers (or looks up) the rx-timestamp dynamic mbuf field that net_pcap fills with each
/// record's capture time in microseconds (`rte_mbuf_dyn_rx_timestamp_register`). Call once after
/// EAL init; until then [`PacketBuf::rx_timestamp_us`] returns `None`.
pub fn register_rx_timestamp() -> Result<(), super::DpdkError> {
    let mut off: i32 = -1;
    let mut flag: u64 = 0;
    // SAFETY: plain out-parameters.
    let ret = unsafe { dpdk_sys::rte_mbuf_dyn_rx_timestamp_register(&mut off, &mut flag) };
    if ret < 0 {
        return Err(super::DpdkError::from_errno("rte_mbuf_dyn_rx_timestamp_register"));
    }
    TS_OFFSET.store(off, Ordering::Relaxed);
    TS_FLAG.store(flag, Ordering::Relaxed);
    Ok(())
}

/// The first data byte of `m` (`rte_pktmbuf_mtod`), computed in Rust: no call per packet.
///
/// # Safety
/// `m` must be a valid mbuf.
#[inline(always)]
pub unsafe fn data_ptr(m: *const dpdk_sys::rte_mbuf) -> *const u8 {
    // SAFETY: the caller guarantees a valid mbuf; buf_addr + data_off is its data.
    unsafe { ((*m).buf_addr as *const u8).add((*m).data_off as usize) }
}

/// Frees `mbufs` in one call (`rte_pktmbuf_free_bulk`).
///
/// # Safety
/// Every pointer must be a valid mbuf owned by the caller, not used afterwards.
#[inline]
pub unsafe fn free_bulk(mbufs: &mut [*mut dpdk_sys::rte_mbuf]) {
    if !mbufs.is_empty() {
        dpdk_sys::rte_pktmbuf_free_bulk(mbufs.as_mut_ptr(), mbufs.len() as u32);
    }
}

/// Frees every mbuf of `slots` in one call (`rte_pktmbuf_free_bulk`) and leaves the slots
/// `None`. Empty slots are skipped (DPDK's bulk free ignores NULL pointers).
#[inline]
pub fn free_burst(slots: &mut [Option<Mbuf>]) {
    if slots.is_empty() {
        return;
    }
    // SAFETY: Option<Mbuf> has the layout of a nullable mbuf pointer; the slots own their
    // mbufs, which rte_pktmbuf_free_bulk frees (skipping NULLs); the slots are then forgotten
    // by overwriting them with None without running Mbuf's drop.
    unsafe {
        dpdk_sys::rte_pktmbuf_free_bulk(slots.as_mut_ptr().cast(), slots.len() as u32);
        for s in slots.iter_mut() {
            std::ptr::write(s, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dpdk_sys as sys;

    #[test]
    fn ol_flags_map_to_verdicts() {
        use CsumStatus::{Bad, Good, Unknown};
        let ip = [
            (sys::RTE_MBUF_F_RX_IP_CKSUM_UNKNOWN, Unknown),
            (sys::RTE_MBUF_F_RX_IP_CKSUM_GOOD, Good),
            (sys::RTE_MBUF_F_RX_IP_CKSUM_BAD, Bad),
            (sys::RTE_MBUF_F_RX_IP_CKSUM_NONE, Unknown),
        ];
        let l4 = [
            (sys::RTE_MBUF_F_RX_L4_CKSUM_UNKNOWN, Unknown),
            (sys::RTE_MBUF_F_RX_L4_CKSUM_GOOD, Good),
            (sys::RTE_MBUF_F_RX_L4_CKSUM_BAD, Bad),
            (sys::RTE_MBUF_F_RX_L4_CKSUM_NONE, Unknown),
        ];
        // Other flags (VLAN stripped, RSS hash, ...) do not matter.
        let other = 1u64 << 0 | 1u64 << 1 | 1u64 << 6;
        for (fi, si) in ip {
            for (fl, sl) in l4 {
                let flags = fi as u64 | fl as u64 | other;
                assert_eq!(rx_checksum_of(flags), RxChecksum { ip: si, l4: sl }, "{flags:#x}");
            }
        }
    }
}
