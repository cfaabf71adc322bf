//! Packet mbuf pools (`rte_pktmbuf_pool_create`).

use super::{DpdkError, Mbuf};
use std::ffi::CString;
use std::ptr::NonNull;

/// A pool of packet mbufs. Lives as long as the process (DPDK pools are freed with EAL).
#[derive(Debug, Clone, Copy)]
pub struct Mempool {
    raw: NonNull<dpdk_sys::rte_mempool>,
}

// SAFETY: a DPDK mempool is designed for concurrent use from every lcore (per-lcore caches plus
// a lock-free ring).
unsafe impl Send for Mempool {}
// SAFETY: as above.
unsafe impl Sync for Mempool {}

impl Mempool {
    /// Creates a pool of `n` mbufs with a per-lcore cache of `cache` mbufs and `data_room` bytes
    /// of buffer per mbuf (including the 128-byte headroom), on NUMA socket `socket`
    /// (`-1`: any).
    ///
    /// Errors: no memory (`-m` too small for `n` x (data_room + ~192) bytes), a name in use, a
    /// cache larger than DPDK allows (512, and at most n / 1.5).
    pub fn new(name: &str, n: u32, cache: u32, data_room: u16, socket: i32) -> Result<Self, DpdkError> {
        let cname = CString::new(name).expect("pool names hold no NUL");
        // SAFETY: arguments are plain values and a valid C string.
        let raw = unsafe { dpdk_sys::rte_pktmbuf_pool_create(cname.as_ptr(), n, cache, 0, data_room, socket) };
        NonNull::new(raw).map(|raw| Mempool { raw }).ok_or_else(|| {
            DpdkError::from_errno(format!(
                "rte_pktmbuf_pool_create({name}, {n} mbufs of {data_room} bytes, cache {cache})"
            ))
        })
    }

    /// The raw pointer, for DPDK calls.
    pub fn as_ptr(&self) -> *mut dpdk_sys::rte_mempool {
        self.raw.as_ptr()
    }

    /// One mbuf from the pool (`rte_pktmbuf_alloc`: reset, data length 0, headroom as the
    /// pool's), or `None` when the pool is empty. Fast path: the lcore's cache first.
    #[inline(always)]
    pub fn alloc(&self) -> Option<Mbuf> {
        // SAFETY: the pool is valid for the process; a non-NULL result is a fresh mbuf that
        // nothing else owns.
        NonNull::new(unsafe { dpdk_sys::shim_pktmbuf_alloc(self.raw.as_ptr()) }).map(|m| unsafe { Mbuf::from_raw(m) })
    }

    /// Fills every slot of `out` (at most 65535; every slot `None` on entry) with a fresh mbuf
    /// (`rte_pktmbuf_alloc_bulk`: reset, data length 0), all or none: false, with `out`
    /// untouched, when the pool cannot give `out.len()` mbufs. One call per burst.
    #[inline]
    pub fn alloc_bulk(&self, out: &mut [Option<Mbuf>]) -> bool {
        debug_assert!(out.iter().all(Option::is_none), "alloc_bulk into occupied slots would leak them");
        if out.is_empty() {
            return true;
        }
        // SAFETY: `out` has room for out.len() mbuf pointers (Option<Mbuf> has the layout of a
        // nullable `*mut rte_mbuf`); on success DPDK writes out.len() fresh mbufs that nothing
        // else owns, whose ownership passes to the slots; on failure it writes nothing.
        unsafe { dpdk_sys::shim_pktmbuf_alloc_bulk(self.raw.as_ptr(), out.as_mut_ptr().cast(), out.len() as u32) == 0 }
    }

    /// Fills every slot of `out` (every slot `None` on entry) with an mbuf taken without a
    /// reset (`rte_mempool_get_bulk`, as testpmd's txonly takes them), all or none: false, with
    /// `out` untouched, when the pool cannot give `out.len()` mbufs. Each is a valid
    /// one-segment mbuf (reference count 1, no next segment: what DPDK keeps true of every mbuf
    /// in a pool), but its data offset, lengths, flags and other metadata are what its last
    /// user left: give each [`Mbuf::reset_tx`] before sending it. Saves `rte_pktmbuf_reset`'s
    /// dozen stores per mbuf, half of them in its second cache line, for a sender that sets
    /// what it sends.
    #[inline]
    pub fn alloc_bulk_raw(&self, out: &mut [Option<Mbuf>]) -> bool {
        debug_assert!(out.iter().all(Option::is_none), "alloc_bulk_raw into occupied slots would leak them");
        if out.is_empty() {
            return true;
        }
        // SAFETY: as alloc_bulk: room for out.len() pointers, written only on success, each a
        // pool object (an initialised mbuf) that nothing else owns.
        unsafe { dpdk_sys::shim_mempool_get_bulk(self.raw.as_ptr(), out.as_mut_ptr().cast(), out.len() as u32) == 0 }
    }

    /// Mbufs currently allocated from the pool (`rte_mempool_in_use_count`; slow: not for the
    /// fast path).
    pub fn in_use(&self) -> u32 {
        // SAFETY: the pool is valid for the process.
        unsafe { dpdk_sys::rte_mempool_in_use_count(self.raw.as_ptr()) }
    }

    /// Mbufs currently free in the pool (`rte_mempool_avail_count`; slow).
    pub fn available(&self) -> u32 {
        // SAFETY: the pool is valid for the process.
        unsafe { dpdk_sys::rte_mempool_avail_count(self.raw.as_ptr()) }
    }
}
