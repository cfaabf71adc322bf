//! How the appliance stops: two flags that every lcore reads and any may set, with no lock and
//! no allocation (a signal handler sets the first).
//!
//! A stop has an order: SIGINT or SIGTERM only asks ([`ask_stop`], async-signal-safe); the main
//! lcore then stops the control plane, so that no pipeline update is left half done, and only
//! then the workers ([`request_quit`]). The end of a replay, `--duration` and a worker's panic
//! set [`QUIT`] directly. Kept apart from the worker loop and the control plane, which both read
//! them, so that neither imports the other for it.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set to make every worker stop: by the main lcore (after SIGINT/SIGTERM, the end of a replay
/// or of `--duration`, once the control plane has stopped) or by a worker's panic.
pub static QUIT: AtomicBool = AtomicBool::new(false);

/// Set by SIGINT and SIGTERM: the main lcore stops the control plane, then the workers
/// ([`request_quit`]), so that no pipeline update is left half done.
pub static STOP_ASKED: AtomicBool = AtomicBool::new(false);

/// True once a signal asked for a stop (the workers go on until [`QUIT`]).
pub fn stop_asked() -> bool {
    STOP_ASKED.load(Ordering::Relaxed)
}

/// Asks for a stop (async-signal-safe: one atomic store).
pub fn ask_stop() {
    STOP_ASKED.store(true, Ordering::Relaxed);
}

/// True once a stop was requested.
#[inline(always)]
pub fn quitting() -> bool {
    QUIT.load(Ordering::Relaxed)
}

/// Requests every worker to stop.
pub fn request_quit() {
    QUIT.store(true, Ordering::Relaxed);
}
