//! The guard that keeps EAL's memory-segment file descriptors open for the life of the process.
//!
//! Why: net_memif in zero-copy mode (`zero-copy=yes`, a client) offers its peer EAL's own memory
//! as memif regions, passing the fd that `rte_memseg_get_fd` returns, which is EAL's own fd
//! (`eal_memalloc_get_seg_fd`: `fd_list[list].memseg_list_fd` with `--single-file-segments`),
//! not a duplicate. DPDK 22.11's `memif_connect` (drivers/net/memif/rte_eth_memif.c) then does
//! `close(mr->fd)` on every zero-copy region ("close memseg file"), and `memif_free_regions`
//! closes it too if it is still set. EAL keeps the closed number: at the next connection
//! (a new peer), `memif_region_init_zc` asks EAL again, gets the dead number, which by then
//! names another file (an eventfd, a socket), and sends that: the peer's `mmap` fails with
//! ENODEV ("mmap failed: No such device") and the port never comes up again.
//!
//! DPDK gives no hook there, so the binaries export a `close` of their own
//! ([`guard_closes!`](crate::guard_closes)): a close of one of EAL's memory-segment fds (recorded
//! by [`keep_memseg_fds`] right after `rte_eal_init`) is counted and left undone; every other
//! fd closes as usual. Nothing on the packet path closes files.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};

/// How many memory-segment fds the guard records (EAL's memseg lists, `RTE_MAX_MEMSEG_LISTS`,
/// is 128; one fd per list with `--single-file-segments`, more without).
pub const MAX_KEPT: usize = 256;

static KEPT: [AtomicI32; MAX_KEPT] = [const { AtomicI32::new(-1) }; MAX_KEPT];
static KEPT_LEN: AtomicUsize = AtomicUsize::new(0);
static CLOSES_REFUSED: AtomicU64 = AtomicU64::new(0);

/// Records `fd` as one to keep open. False if the table is full (the fd is then not guarded).
pub fn keep(fd: c_int) -> bool {
    if fd < 0 || is_kept(fd) {
        return fd >= 0;
    }
    let i = KEPT_LEN.fetch_add(1, Ordering::AcqRel);
    if i >= MAX_KEPT {
        KEPT_LEN.store(MAX_KEPT, Ordering::Release);
        return false;
    }
    KEPT[i].store(fd, Ordering::Release);
    true
}

/// Whether `fd` is one the guard keeps open.
pub fn is_kept(fd: c_int) -> bool {
    let n = KEPT_LEN.load(Ordering::Acquire).min(MAX_KEPT);
    fd >= 0 && KEPT[..n].iter().any(|k| k.load(Ordering::Acquire) == fd)
}

/// The fds kept open so far, in the order recorded.
pub fn kept() -> Vec<c_int> {
    let n = KEPT_LEN.load(Ordering::Acquire).min(MAX_KEPT);
    KEPT[..n].iter().map(|k| k.load(Ordering::Acquire)).filter(|&fd| fd >= 0).collect()
}

/// Closes of a kept fd that the guard left undone (net_memif zero-copy: one or two per
/// connection of a peer).
pub fn closes_refused() -> u64 {
    CLOSES_REFUSED.load(Ordering::Relaxed)
}

unsafe extern "C" fn record_memseg_fd(
    _msl: *const dpdk_sys::rte_memseg_list,
    ms: *const dpdk_sys::rte_memseg,
    arg: *mut c_void,
) -> c_int {
    // SAFETY: called by rte_memseg_walk, which holds the memory lock: the thread-unsafe variant
    // is the one to use here; `ms` is valid for the call.
    let fd = unsafe { dpdk_sys::rte_memseg_get_fd_thread_unsafe(ms) };
    if fd >= 0 && !keep(fd) {
        // SAFETY: `arg` is the &mut bool passed by keep_memseg_fds.
        unsafe { *(arg as *mut bool) = true };
    }
    0
}

/// Records the fds of EAL's memory segments (`rte_memseg_walk`, `rte_memseg_get_fd`) so that the
/// exported `close` keeps them open. Call once after `rte_eal_init`. Returns how many distinct
/// fds are kept; 0 when EAL's memory has no fds (hugepages without `--single-file-segments`
/// before any segment, or memfd unsupported). Segments EAL adds later are not recorded.
pub fn keep_memseg_fds() -> usize {
    let mut full = false;
    // SAFETY: EAL is initialised; the callback matches rte_memseg_walk_t and `arg` outlives it.
    unsafe { dpdk_sys::rte_memseg_walk(Some(record_memseg_fd), &mut full as *mut bool as *mut c_void) };
    if full {
        eprintln!("fdguard: more than {MAX_KEPT} memory-segment fds; the rest are not guarded");
    }
    kept().len()
}

/// `close(2)`, except for a kept fd (one of EAL's memory segments), whose close is counted and
/// left undone (returns 0). What the exported `close` of [`guard_closes!`](crate::guard_closes)
/// does. Returns 0, or -1 with `errno` set, as `close`.
///
/// # Safety
/// As `close(2)`: `fd` must not be used after it is closed.
pub unsafe fn close_unless_kept(fd: c_int) -> c_int {
    if is_kept(fd) {
        CLOSES_REFUSED.fetch_add(1, Ordering::Relaxed);
        return 0;
    }
    // SAFETY: the caller's contract; the raw system call, not libc's `close` (which this
    // function replaces in the binaries).
    unsafe { libc::syscall(libc::SYS_close, fd) as c_int }
}

/// Defines the binary's exported `close` as [`close_unless_kept`]. Use once, in a binary's root
/// module, with `-Wl,--export-dynamic-symbol=close` in its link arguments (the crate's
/// `build.rs`), so that the DPDK drivers' calls resolve to it.
#[macro_export]
macro_rules! guard_closes {
    () => {
        /// `close(2)`, except for EAL's memory-segment fds, which stay open
        /// (`dataplane::dpdk::fdguard::close_unless_kept`).
        ///
        /// # Safety
        /// As `close(2)`.
        #[no_mangle]
        pub unsafe extern "C" fn close(fd: ::std::ffi::c_int) -> ::std::ffi::c_int {
            // SAFETY: the caller's contract, passed on.
            unsafe { $crate::dpdk::fdguard::close_unless_kept(fd) }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_fd_survives_close_and_others_close() {
        // SAFETY: fresh fds from memfd_create, closed below through the guard or the syscall.
        unsafe {
            let a = libc::memfd_create(c"kept".as_ptr(), 0);
            let b = libc::memfd_create(c"other".as_ptr(), 0);
            assert!(a >= 0 && b >= 0);
            assert_eq!(libc::ftruncate(a, 4096), 0);
            assert!(keep(a));
            assert!(is_kept(a));
            assert!(!is_kept(b));
            assert!(kept().contains(&a));
            let before = closes_refused();
            assert_eq!(close_unless_kept(a), 0);
            assert_eq!(closes_refused(), before + 1);
            // Still open, still mappable (what the memif peer's mmap needs).
            let p = libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_READ, libc::MAP_SHARED, a, 0);
            assert_ne!(p, libc::MAP_FAILED);
            assert_eq!(libc::syscall(libc::SYS_munmap, p, 4096), 0);
            assert_eq!(close_unless_kept(b), 0);
            assert_eq!(libc::fcntl(b, libc::F_GETFD), -1);
            assert_eq!(std::io::Error::last_os_error().raw_os_error(), Some(libc::EBADF));
            assert_eq!(closes_refused(), before + 1);
            // A bad fd fails as close(2) says.
            assert_eq!(close_unless_kept(-5), -1);
        }
    }
}
