//! Quiescent states of the worker lcores (DPDK's `rte_rcu_qsbr`, lib/rcu), and the guard that
//! makes any other thread's `munmap` wait until every worker has finished the burst it was in.
//!
//! Why the guard: a PMD may unmap memory that a worker lcore is reading in `rte_eth_rx_burst` or
//! `rte_eth_tx_burst`. net_memif does (DPDK 22.11 to at least 24.11): when its peer leaves, the
//! EAL interrupt thread runs `memif_disconnect`, which clears the port's "connected" flag and then
//! `munmap`s the shared rings and buffers at once, while a worker that tested the flag a moment
//! earlier is still copying from them: the appliance dies with SIGSEGV. DPDK gives no hook
//! between the two steps, so the binaries export a `munmap` of their own
//! ([`guard_unmaps!`](crate::guard_unmaps)): called on EAL's interrupt thread (where the PMDs
//! handle their peers' messages) while workers are online, it first waits for a grace period
//! (every online worker passed a quiescent state, i.e. started a new poll-loop turn, which
//! tests the flag again), then unmaps. Other threads (the metrics server's, Rust's own at
//! thread exit) unmap at once.
//!
//! Workers report a quiescent state once per poll-loop turn ([`Qsbr::quiescent`]: one load and
//! at most one store to the worker's own cache line, no fence); they are online from
//! [`Qsbr::enter`] until its [`Online`] guard drops.

use std::alloc::{self, Layout};
use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::DpdkError;

/// Reader threads a [`Qsbr`] can track (`RTE_MAX_LCORE`): ids are `0..MAX_THREADS`.
pub const MAX_THREADS: u32 = dpdk_sys::RTE_MAX_LCORE;

/// How long a guarded `munmap` waits for a grace period before it unmaps anyway (a worker that
/// does not come back to its loop within this is stuck for another reason; the unmap then is no
/// worse than without the guard, and is counted in [`grace_timeouts`]).
pub const GRACE_TIMEOUT: Duration = Duration::from_secs(1);

/// A QSBR variable (`struct rte_rcu_qsbr`) in memory of its own, aligned as DPDK requires.
pub struct Qsbr {
    v: NonNull<dpdk_sys::rte_rcu_qsbr>,
    layout: Layout,
}

// SAFETY: rte_rcu_qsbr is designed for concurrent use: each reader writes only its own counter
// (a cache line of its own), the writer side only reads them and bumps the token atomically.
unsafe impl Send for Qsbr {}
// SAFETY: as above.
unsafe impl Sync for Qsbr {}

impl Qsbr {
    /// A QSBR variable for reader ids `0..threads` (`rte_rcu_qsbr_get_memsize`,
    /// `rte_rcu_qsbr_init`). Errors: `threads` is 0 or above [`MAX_THREADS`].
    pub fn new(threads: u32) -> Result<Qsbr, DpdkError> {
        if threads == 0 || threads > MAX_THREADS {
            return Err(DpdkError::new("rte_rcu_qsbr_init", format!("{threads} threads: expected 1 to {MAX_THREADS}")));
        }
        // SAFETY: a pure size computation.
        let size = unsafe { dpdk_sys::rte_rcu_qsbr_get_memsize(threads) };
        if size == 0 {
            return Err(DpdkError::from_errno("rte_rcu_qsbr_get_memsize"));
        }
        let layout = Layout::from_size_align(size, dpdk_sys::RTE_CACHE_LINE_SIZE as usize)
            .map_err(|e| DpdkError::new("rte_rcu_qsbr layout", e.to_string()))?;
        // SAFETY: a non-zero size.
        let p = unsafe { alloc::alloc_zeroed(layout) } as *mut dpdk_sys::rte_rcu_qsbr;
        let Some(v) = NonNull::new(p) else { alloc::handle_alloc_error(layout) };
        // SAFETY: `v` points to `size` zeroed bytes, aligned to a cache line, for `threads`.
        let rc = unsafe { dpdk_sys::rte_rcu_qsbr_init(v.as_ptr(), threads) };
        let q = Qsbr { v, layout };
        if rc != 0 {
            return Err(DpdkError::from_errno("rte_rcu_qsbr_init"));
        }
        Ok(q)
    }

    /// Registers reader `id` and puts it online (`rte_rcu_qsbr_thread_register`,
    /// `rte_rcu_qsbr_thread_online`), marking the calling thread as a reader: a guarded `munmap`
    /// on it does not wait for itself. Until the returned guard drops, the thread must call
    /// [`Qsbr::quiescent`] regularly (every poll-loop turn), or every grace period waits.
    /// Errors: `id` out of range.
    pub fn enter(&self, id: u32) -> Result<Online<'_>, DpdkError> {
        // SAFETY: a valid, initialised variable; DPDK checks the id.
        let rc = unsafe { dpdk_sys::rte_rcu_qsbr_thread_register(self.v.as_ptr(), id) };
        if rc != 0 {
            return Err(DpdkError::from_errno(format!("rte_rcu_qsbr_thread_register({id})")));
        }
        // SAFETY: `id` is registered.
        unsafe { dpdk_sys::shim_rcu_qsbr_thread_online(self.v.as_ptr(), id) };
        READER.with(|r| r.set(true));
        Ok(Online { q: self, id })
    }

    /// Reader `id` (online, on the calling thread) passed a quiescent state: it holds no
    /// reference to anything a writer may free (`rte_rcu_qsbr_quiescent`).
    #[inline(always)]
    pub fn quiescent(&self, id: u32) {
        // SAFETY: the caller is reader `id`, online ([`Online`] proves registration).
        unsafe { dpdk_sys::shim_rcu_qsbr_quiescent(self.v.as_ptr(), id) }
    }

    /// Waits until every reader online now has passed a quiescent state, or `timeout` passed
    /// (`rte_rcu_qsbr_start`, then `rte_rcu_qsbr_check` without blocking, polled). True if the
    /// grace period completed. Must not be called by an online reader (it would wait for
    /// itself until the timeout).
    pub fn synchronize(&self, timeout: Duration) -> bool {
        // SAFETY: a valid variable; start and check may run on any thread.
        let t = unsafe { dpdk_sys::shim_rcu_qsbr_start(self.v.as_ptr()) };
        let start = Instant::now();
        loop {
            // SAFETY: as above.
            if unsafe { dpdk_sys::shim_rcu_qsbr_check(self.v.as_ptr(), t, false) } == 1 {
                return true;
            }
            if start.elapsed() >= timeout {
                return false;
            }
            std::hint::spin_loop();
        }
    }
}

impl Drop for Qsbr {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { alloc::dealloc(self.v.as_ptr() as *mut u8, self.layout) }
    }
}

impl std::fmt::Debug for Qsbr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Qsbr").field("bytes", &self.layout.size()).finish()
    }
}

/// A reader's time online: dropping it (at the end of the worker's run, or when a panic unwinds
/// it) takes the reader offline and unregisters it, so grace periods no longer wait for it.
#[derive(Debug)]
pub struct Online<'a> {
    q: &'a Qsbr,
    id: u32,
}

impl Online<'_> {
    /// This reader passed a quiescent state ([`Qsbr::quiescent`]).
    #[inline(always)]
    pub fn quiescent(&self) {
        self.q.quiescent(self.id);
    }
}

impl Drop for Online<'_> {
    fn drop(&mut self) {
        // SAFETY: `id` was registered and put online by `enter`.
        unsafe {
            dpdk_sys::shim_rcu_qsbr_thread_offline(self.q.v.as_ptr(), self.id);
            dpdk_sys::rte_rcu_qsbr_thread_unregister(self.q.v.as_ptr(), self.id);
        }
        READER.with(|r| r.set(false));
    }
}

thread_local! {
    /// The calling thread is an online reader (no destructor: readable while a thread exits,
    /// which is when Rust's runtime unmaps its signal stack).
    static READER: Cell<bool> = const { Cell::new(false) };
}

thread_local! {
    /// Whether the calling thread is EAL's interrupt thread: 0 not known yet, 1 yes, 2 no.
    static INTERRUPT_THREAD: Cell<u8> = const { Cell::new(0) };
}

/// The name EAL gives its interrupt thread (`eal_interrupts.c`), where PMDs handle link events
/// and their peers' messages (net_memif's disconnect) and DPDK's alarms run.
const INTERRUPT_THREAD_NAME: &[u8] = b"eal-intr-thread";

/// Whether the calling thread is EAL's interrupt thread (its name, read once per thread).
fn on_interrupt_thread() -> bool {
    INTERRUPT_THREAD.with(|k| {
        if k.get() == 0 {
            let mut name = [0u8; 16];
            // SAFETY: PR_GET_NAME writes at most 16 bytes, NUL-terminated, into `name`.
            let rc = unsafe { libc::prctl(libc::PR_GET_NAME, name.as_mut_ptr()) };
            k.set(if rc == 0 && name.starts_with(INTERRUPT_THREAD_NAME) { 1 } else { 2 });
        }
        k.get() == 1
    })
}

static WORKERS: OnceLock<Qsbr> = OnceLock::new();
static UNMAP_WAITS: AtomicU64 = AtomicU64::new(0);
static GRACE_TIMEOUTS: AtomicU64 = AtomicU64::new(0);

/// The process's QSBR variable of the worker lcores (reader id: the worker's index, below
/// [`MAX_THREADS`]); the guarded `munmap` waits on it. Created on first use.
pub fn workers() -> &'static Qsbr {
    WORKERS.get_or_init(|| Qsbr::new(MAX_THREADS).expect("MAX_THREADS readers are valid"))
}

/// `munmap`s on EAL's interrupt thread that waited for a grace period of the workers.
pub fn unmap_waits() -> u64 {
    UNMAP_WAITS.load(Ordering::Relaxed)
}

/// Grace periods a guarded `munmap` gave up on after [`GRACE_TIMEOUT`].
pub fn grace_timeouts() -> u64 {
    GRACE_TIMEOUTS.load(Ordering::Relaxed)
}

/// `munmap(2)` after a grace period of the workers: what the exported `munmap` of
/// [`guard_unmaps!`](crate::guard_unmaps) does. Only EAL's interrupt thread waits (where a PMD
/// tears down what its peer shared: net_memif's disconnect); every other thread, a worker's
/// own included, and any thread before a worker ever started, unmaps at once. Returns 0, or -1
/// with `errno` set, as `munmap`.
///
/// # Safety
/// As `munmap(2)`: the range must not be used after it is unmapped.
pub unsafe fn munmap_after_grace(addr: *mut c_void, len: usize) -> c_int {
    if let Some(q) = WORKERS.get() {
        if on_interrupt_thread() && !READER.with(Cell::get) {
            // With no reader online the check completes at once.
            if !q.synchronize(GRACE_TIMEOUT) {
                GRACE_TIMEOUTS.fetch_add(1, Ordering::Relaxed);
            }
            UNMAP_WAITS.fetch_add(1, Ordering::Relaxed);
        }
    }
    // SAFETY: the caller's contract; the raw system call, not libc's `munmap` (which this
    // function replaces in the binaries).
    unsafe { libc::syscall(libc::SYS_munmap, addr, len) as c_int }
}

/// Defines the binary's exported `munmap` as [`munmap_after_grace`]. Use once, in a binary's
/// root module, with `-Wl,--export-dynamic-symbol=munmap` in its link arguments (the crate's
/// `build.rs`), so that the DPDK drivers' calls resolve to it.
#[macro_export]
macro_rules! guard_unmaps {
    () => {
        /// `munmap(2)`, after a grace period of the worker lcores
        /// (`dataplane::dpdk::rcu::munmap_after_grace`).
        ///
        /// # Safety
        /// As `munmap(2)`.
        #[no_mangle]
        pub unsafe extern "C" fn munmap(addr: *mut ::std::ffi::c_void, len: usize) -> ::std::ffi::c_int {
            // SAFETY: the caller's contract, passed on.
            unsafe { $crate::dpdk::rcu::munmap_after_grace(addr, len) }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[test]
    fn a_grace_period_waits_for_every_online_reader() {
        let q = Arc::new(Qsbr::new(4).unwrap());
        // No reader online: the grace period is over at once.
        assert!(q.synchronize(Duration::from_millis(1)));
        let entered = Arc::new(AtomicBool::new(false));
        let report = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let t = {
            let (q, entered, report, stop) = (q.clone(), entered.clone(), report.clone(), stop.clone());
            std::thread::spawn(move || {
                let online = q.enter(2).unwrap();
                entered.store(true, Ordering::SeqCst);
                while !stop.load(Ordering::SeqCst) {
                    if report.load(Ordering::SeqCst) {
                        online.quiescent();
                    }
                    std::hint::spin_loop();
                }
            })
        };
        while !entered.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        // Online and silent: the grace period cannot complete.
        assert!(!q.synchronize(Duration::from_millis(50)));
        report.store(true, Ordering::SeqCst);
        assert!(q.synchronize(Duration::from_secs(5)));
        stop.store(true, Ordering::SeqCst);
        t.join().unwrap();
        // Offline and unregistered again.
        assert!(q.synchronize(Duration::from_millis(1)));
    }

    #[test]
    fn bad_reader_counts_and_ids_are_refused() {
        assert!(Qsbr::new(0).is_err());
        assert!(Qsbr::new(MAX_THREADS + 1).is_err());
        let q = Qsbr::new(2).unwrap();
        assert!(q.enter(2).is_err());
    }

    #[test]
    fn a_guarded_unmap_unmaps() {
        let len = 4096;
        // SAFETY: a fresh anonymous mapping, unmapped once below and not used after.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            *(p as *mut u8) = 7;
            assert_eq!(munmap_after_grace(p, len), 0);
            // A misaligned address fails as munmap(2) says, with errno set.
            assert_eq!(munmap_after_grace((p as *mut u8).add(1) as *mut c_void, len), -1);
            assert_eq!(std::io::Error::last_os_error().raw_os_error(), Some(libc::EINVAL));
        }
    }
}
