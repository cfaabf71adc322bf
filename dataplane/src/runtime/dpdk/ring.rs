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
