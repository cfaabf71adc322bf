//! Rings of mbufs between lcores (`rte_ring`): the software hand-off of packets to the worker
//! that owns their state.

use super::{DpdkError, Mbuf};
use std::ffi::CString;
use std::ptr::NonNull;

/// A ring of mbuf pointers: multi-producer, single-consumer ([`Ring::new`]) or
/// single-producer, single-consumer ([`Ring::new_spsc`]). Lives as long as the process.
#[derive(Debug, Clone, Copy)]
pub struct Ring {
    raw: NonNull<dpdk_sys::rte_ring>,
}

// SAFETY: rte_ring is lock-free; an MP ring is safe for concurrent producers, an SP ring has
// one producer and every ring one consumer, each a fixed worker (by construction in the
// appliance).
unsafe impl Send for Ring {}
// SAFETY: as above.
unsafe impl Sync for Ring {}

impl Ring {
    /// Creates a ring of `count` slots (a power of two; holds `count - 1` mbufs) named `name`.
    pub fn new(name: &str, count: u32) -> Result<Ring, DpdkError> {
        Self::create(name, count, dpdk_sys::RING_F_SC_DEQ)
    }

    /// Creates a single-producer, single-consumer ring of `count` slots (a power of two; holds
    /// `count - 1` mbufs) named `name` (`RING_F_SP_ENQ | RING_F_SC_DEQ`: no compare-and-swap on
    /// either side). Exactly one lcore may push and one pop.
    pub fn new_spsc(name: &str, count: u32) -> Result<Ring, DpdkError> {
        Self::create(name, count, dpdk_sys::RING_F_SP_ENQ | dpdk_sys::RING_F_SC_DEQ)
    }

    fn create(name: &str, count: u32, flags: u32) -> Result<Ring, DpdkError> {
        let c = CString::new(name).expect("ring names hold no NUL");
        // SAFETY: valid name; `flags` select the producer and consumer modes.
        let raw = unsafe { dpdk_sys::rte_ring_create(c.as_ptr(), count, -1, flags) };
        NonNull::new(raw)
            .map(|raw| Ring { raw })
            .ok_or_else(|| DpdkError::from_errno(format!("rte_ring_create({name}, {count})")))
    }

    /// Free slots: how many more mbufs the ring takes now (`rte_ring_free_count`). With
    /// several producers, a snapshot: others may take slots right after.
    #[inline]
    pub fn free_count(&self) -> u32 {
        // SAFETY: the ring is valid for the process; reading its head and tail is lock-free.
        unsafe { dpdk_sys::shim_ring_free_count(self.raw.as_ptr()) }
    }

    /// Enqueues one mbuf; gives it back when the ring is full.
    #[inline]
    pub fn push(&self, m: Mbuf) -> Result<(), Mbuf> {
        let p = m.into_raw();
        let objs = [p as *mut std::ffi::c_void];
        // SAFETY: one valid pointer; on success the ring owns the mbuf.
        let n = unsafe { dpdk_sys::shim_ring_enqueue_burst(self.raw.as_ptr(), objs.as_ptr(), 1) };
        if n == 1 {
            Ok(())
        } else {
            // SAFETY: the ring did not take it: we still own it.
            Err(unsafe { Mbuf::from_raw(NonNull::new_unchecked(p)) })
        }
    }

    /// Dequeues up to `out.len()` mbufs into `out[..n]`; returns `n`. The slots must be empty
    /// (`None`) on entry. Only the owning worker calls this (single consumer).
    #[inline]
    pub fn pop_burst(&self, out: &mut [Option<Mbuf>]) -> usize {
        debug_assert!(out.iter().all(Option::is_none), "pop_burst into occupied slots would leak them");
        // SAFETY: `out` has room for out.len() pointers (Option<Mbuf> has the layout of a
        // nullable mbuf pointer); the ring only holds valid mbufs, whose ownership passes to us
        // in `out[..n]`; single consumer.
        unsafe {
            dpdk_sys::shim_ring_dequeue_burst(
                self.raw.as_ptr(),
                out.as_mut_ptr() as *mut *mut std::ffi::c_void,
                out.len() as u32,
            ) as usize
        }
    }
}

/// Mbufs gathered for one ring and enqueued together, in order, in one operation
/// (`rte_ring_enqueue_burst`): a worker's hand-offs of one burst. Room for a fixed number,
/// allocated once.
#[derive(Debug)]
pub struct RingBatch {
    mbufs: Vec<*mut dpdk_sys::rte_mbuf>,
}

impl RingBatch {
    /// An empty batch with room for `n` mbufs.
    pub fn with_capacity(n: usize) -> RingBatch {
        RingBatch { mbufs: Vec::with_capacity(n) }
    }

    /// True when the batch has no room left.
    #[inline]
    pub fn is_full(&self) -> bool {
        self.mbufs.len() == self.mbufs.capacity()
    }

    /// Adds `m` (check [`RingBatch::is_full`] first: a full batch grows, allocating).
    #[inline]
    pub fn push(&mut self, m: Mbuf) {
        self.mbufs.push(m.into_raw());
    }

    /// Enqueues the batch on `ring` and empties it; frees what the ring refuses (it was full)
    /// and returns how many those were.
    #[inline]
    pub fn flush(&mut self, ring: &Ring) -> u64 {
        if self.mbufs.is_empty() {
            return 0;
        }
        // SAFETY: `mbufs` holds valid mbuf pointers that we own; the ring takes ownership of
        // the first n it enqueues and reads nothing past the slice.
        let n = unsafe {
            dpdk_sys::shim_ring_enqueue_burst(
                ring.raw.as_ptr(),
                self.mbufs.as_ptr() as *const *mut std::ffi::c_void,
                self.mbufs.len() as u32,
            ) as usize
        };
        let refused = (self.mbufs.len() - n) as u64;
        self.free_from(n);
        refused
    }

    /// Frees `mbufs[from..]` and empties the batch.
    fn free_from(&mut self, from: usize) {
        for &m in &self.mbufs[from..] {
            if let Some(p) = NonNull::new(m) {
                // SAFETY: not enqueued: still ours, each pointer owned once.
                drop(unsafe { Mbuf::from_raw(p) });
            }
        }
        self.mbufs.clear();
    }
}

impl Drop for RingBatch {
    fn drop(&mut self) {
        self.free_from(0);
    }
}
