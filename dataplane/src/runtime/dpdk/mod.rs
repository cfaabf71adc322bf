//! A small safe layer over DPDK: one module per concept (EAL, mempool, mbuf, port, queue, ring, lcore,
//! meter, rcu, telemetry).
//!
//! Everything here is thin: the packet core never imports it. Errors carry the DPDK call that
//! failed and `rte_strerror`'s text.

pub mod eal;
pub mod fdguard;
pub mod lcore;
pub mod mbuf;
pub mod mempool;
pub mod meter;
pub mod port;
pub mod queue;
pub mod rcu;
pub mod ring;
pub mod telemetry;

pub use eal::Eal;
pub use mbuf::Mbuf;
pub use mempool::Mempool;
pub use port::{CumulativeStats, Port, PortStats};
pub use queue::{RxQueue, TxBuffer, TxQueue};

use std::ffi::CStr;

/// A failed DPDK call: what was attempted and DPDK's reason.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {reason}")]
pub struct DpdkError {
    /// What was attempted, e.g. `rte_eth_dev_start(port 1)`.
    pub what: String,
    /// DPDK's description of the error (`rte_strerror`).
    pub reason: String,
    /// The errno (positive) when the error came from one, else 0.
    pub errno: i32,
}

impl DpdkError {
    /// An error from a negative errno-style return value `ret`.
    pub fn from_ret(what: impl Into<String>, ret: i32) -> Self {
        DpdkError { what: what.into(), reason: strerror(-ret), errno: -ret }
    }

    /// An error whose reason is the current `rte_errno`.
    pub fn from_errno(what: impl Into<String>) -> Self {
        // SAFETY: reads the calling thread's rte_errno through the shim.
        let e = unsafe { dpdk_sys::shim_errno() };
        DpdkError { what: what.into(), reason: strerror(e), errno: e }
    }

    /// An error with a reason of our own.
    pub fn new(what: impl Into<String>, reason: impl Into<String>) -> Self {
        DpdkError { what: what.into(), reason: reason.into(), errno: 0 }
    }

    /// True for a failed `rte_eth_dev_start` with EPERM: what DPDK 22.11's net_memif returns when
    /// a client cannot connect to its server's socket (no server yet, or one still starting).
    pub fn is_start_eperm(&self) -> bool {
        self.what.starts_with("rte_eth_dev_start(") && self.errno == libc::EPERM
    }
}

/// `rte_strerror(errnum)` as a String.
pub fn strerror(errnum: i32) -> String {
    // SAFETY: rte_strerror returns a pointer to a NUL-terminated string valid until the next call
    // on this thread; it is copied at once.
    unsafe { CStr::from_ptr(dpdk_sys::rte_strerror(errnum)).to_string_lossy().into_owned() }
}

/// The TSC frequency (`rte_get_tsc_hz`), in cycles per second. Valid after EAL init.
pub fn tsc_hz() -> u64 {
    // SAFETY: a plain read of EAL's calibrated frequency.
    unsafe { dpdk_sys::rte_get_tsc_hz() }
}

/// The TSC (`rte_rdtsc`), in cycles.
#[inline(always)]
pub fn rdtsc() -> u64 {
    // SAFETY: reads the time-stamp counter.
    unsafe { dpdk_sys::shim_rdtsc() }
}
