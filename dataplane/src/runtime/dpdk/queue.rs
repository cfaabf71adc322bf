//! The per-packet DPDK calls behind safe types: an rx queue's burst (`rte_eth_rx_burst`), a tx
//! queue with its l2fwd-style buffer (`rte_eth_tx_burst`, as `rte_eth_tx_buffer` does), and the
//! mbuf bursts they move as `[Option<Mbuf>]`.
//!
//! Bursts are slices of `Option<Mbuf>`: [`Mbuf`] is a `#[repr(transparent)]` `NonNull`, so
//! `Option<Mbuf>` has the layout of `*mut rte_mbuf` (`None` is NULL) and a slice of them is the
//! `struct rte_mbuf **` array DPDK reads and fills, with no copy. Every call here is
//! `#[inline(always)]` or `#[inline]`: they are on the per-packet path.

use super::Mbuf;

/// The layout guarantee the bursts rely on: `Option<Mbuf>` is a nullable mbuf pointer.
const _: () = assert!(std::mem::size_of::<Option<Mbuf>>() == std::mem::size_of::<*mut dpdk_sys::rte_mbuf>());

/// `slots` as the `struct rte_mbuf **` array DPDK takes.
#[inline(always)]
fn as_raw(slots: &mut [Option<Mbuf>]) -> *mut *mut dpdk_sys::rte_mbuf {
    slots.as_mut_ptr().cast()
}

/// One rx queue of a started port, polled by the one lcore that owns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxQueue {
    port_id: u16,
    queue: u16,
}

impl RxQueue {
    /// Rx queue `queue` of DPDK port `port_id` (configured and started by [`super::Port::start`]).
    pub fn new(port_id: u16, queue: u16) -> RxQueue {
        RxQueue { port_id, queue }
    }

    /// The DPDK port id.
    #[inline(always)]
    pub fn port_id(&self) -> u16 {
        self.port_id
    }

    /// Receives up to `out.len()` (at most 65535) packets into `out[..n]` and returns `n`
    /// (`rte_eth_rx_burst`). The slots must be empty (`None`) on entry; the queue must be polled
    /// by one lcore only (DPDK's rx queues are not thread-safe), which is how the appliance's
    /// workers own their queues.
    #[inline(always)]
    pub fn rx_burst(&self, out: &mut [Option<Mbuf>]) -> usize {
        debug_assert!(out.iter().all(Option::is_none), "rx_burst into occupied slots would leak them");
        let len = out.len().min(u16::MAX as usize) as u16;
        // SAFETY: `out` has room for `len` mbuf pointers (same layout as Option<Mbuf>); the PMD
        // writes `n <= len` valid, non-NULL mbufs whose ownership passes to us, and leaves the
        // rest untouched (still `None`).
        unsafe { dpdk_sys::shim_rx_burst(self.port_id, self.queue, as_raw(out), len) as usize }
    }
}

/// One tx queue of a started port, used by the one lcore that owns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxQueue {
    port_id: u16,
    queue: u16,
}

impl TxQueue {
    /// Tx queue `queue` of DPDK port `port_id` (configured and started by [`super::Port::start`]).
    pub fn new(port_id: u16, queue: u16) -> TxQueue {
        TxQueue { port_id, queue }
    }

    /// The DPDK port id.
    #[inline(always)]
    pub fn port_id(&self) -> u16 {
        self.port_id
    }

    /// Hands the mbufs of `pkts` (at most 65535, every slot `Some`) to the queue
    /// (`rte_eth_tx_burst`) and returns how many it took, `n`: the PMD owns those, and
    /// `pkts[..n]` are `None` afterwards; `pkts[n..]` still hold the ones it refused (a full
    /// queue), for the caller to retry or free.
    #[inline(always)]
    pub fn tx_burst(&self, pkts: &mut [Option<Mbuf>]) -> usize {
        debug_assert!(pkts.iter().all(Option::is_some), "tx_burst of empty slots");
        let len = pkts.len().min(u16::MAX as usize) as u16;
        // SAFETY: `pkts` holds `len` valid mbufs we own (same layout as `*mut rte_mbuf`); the
        // PMD takes ownership of the first `n`, which are then forgotten (overwritten with None
        // without dropping), and leaves the rest to us.
        unsafe {
            let n = dpdk_sys::shim_tx_burst(self.port_id, self.queue, as_raw(pkts), len) as usize;
            for s in &mut pkts[..n] {
                std::ptr::write(s, None);
            }
            n
        }
    }

    /// Hands the raw mbufs `pkts` to the queue (`rte_eth_tx_burst`); returns how many it took
    /// (a prefix of `pkts`).
    ///
    /// # Safety
    /// Every pointer in `pkts` must be a valid mbuf owned by the caller; the PMD owns the first
    /// `n` afterwards, the caller still owns the rest.
    #[inline(always)]
    unsafe fn tx_burst_raw(&self, pkts: &mut [*mut dpdk_sys::rte_mbuf]) -> usize {
        let len = pkts.len().min(u16::MAX as usize) as u16;
        // SAFETY: as the caller guarantees.
        unsafe { dpdk_sys::shim_tx_burst(self.port_id, self.queue, pkts.as_mut_ptr(), len) as usize }
    }
}

/// Up to `N` packets waiting for one tx queue (l2fwd's `rte_eth_dev_tx_buffer`): packets are
/// added one by one and sent in a burst by [`TxBuffer::flush`].
#[derive(Debug)]
pub struct TxBuffer<const N: usize> {
    /// `pkts[..len]` are mbufs this buffer owns.
    pkts: [*mut dpdk_sys::rte_mbuf; N],
    len: usize,
}

impl<const N: usize> Default for TxBuffer<N> {
    fn default() -> Self {
        TxBuffer { pkts: [std::ptr::null_mut(); N], len: 0 }
    }
}

impl<const N: usize> TxBuffer<N> {
    /// Packets waiting.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no packet waits.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds `m`; returns true when the buffer is now full (`N` packets), and must be flushed
    /// before the next push (a push on a full buffer panics).
    #[inline(always)]
    pub fn push(&mut self, m: Mbuf) -> bool {
        self.pkts[self.len] = m.into_raw();
        self.len += 1;
        self.len == N
    }

    /// Sends the waiting packets on `txq`, calling `rte_eth_tx_burst` at most `max_tries` times
    /// while the queue takes only part of them; the packets it still refuses are freed
    /// (`rte_pktmbuf_free_bulk`). Returns how many were freed so (0 when all were sent). The
    /// buffer is empty afterwards.
    #[inline]
    pub fn flush(&mut self, txq: &TxQueue, max_tries: u32) -> u64 {
        let len = self.len;
        if len == 0 {
            return 0;
        }
        let mut sent = 0usize;
        let mut tries = 0;
        while sent < len && tries < max_tries {
            // SAFETY: pkts[sent..len] are mbufs the buffer owns; the PMD takes those it sends.
            sent += unsafe { txq.tx_burst_raw(&mut self.pkts[sent..len]) };
            tries += 1;
        }
        self.len = 0;
        if sent < len {
            // SAFETY: the PMD did not take these; the buffer still owns them, and forgets them
            // (len = 0).
            unsafe { super::mbuf::free_bulk(&mut self.pkts[sent..len]) };
        }
        (len - sent) as u64
    }
}

impl<const N: usize> Drop for TxBuffer<N> {
    fn drop(&mut self) {
        // SAFETY: pkts[..len] are mbufs the buffer owns; nothing uses them afterwards.
        unsafe { super::mbuf::free_bulk(&mut self.pkts[..self.len]) };
    }
}
