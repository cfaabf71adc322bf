//! Running Rust closures on worker lcores (`rte_eal_remote_launch`), with panics caught and
//! reported instead of hanging the appliance.

use super::DpdkError;
use std::any::Any;
use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

type Job = Box<dyn FnOnce() + Send + 'static>;

struct Launch {
    job: Option<Job>,
    panic: Arc<Mutex<Option<String>>>,
    on_panic: Option<Arc<dyn Fn() + Send + Sync>>,
}

/// A closure running on a worker lcore; [`LcoreHandle::join`] waits for it.
pub struct LcoreHandle {
    lcore: u32,
    panic: Arc<Mutex<Option<String>>>,
}

impl std::fmt::Debug for LcoreHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LcoreHandle(lcore {})", self.lcore)
    }
}

/// The message of a caught panic's payload (`panic!`'s text, whether a `&str` or a `String`).
pub(crate) fn panic_text(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

extern "C" fn trampoline(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the Box<Launch> leaked by `launch` for exactly this call.
    let mut launch = unsafe { Box::from_raw(arg as *mut Launch) };
    let job = launch.job.take().expect("a launch runs once");
    match catch_unwind(AssertUnwindSafe(job)) {
        Ok(()) => 0,
        Err(p) => {
            *launch.panic.lock().unwrap_or_else(|e| e.into_inner()) = Some(panic_text(&*p));
            if let Some(f) = &launch.on_panic {
                f();
            }
            -1
        }
    }
}

/// Runs `job` on worker lcore `lcore`. `on_panic` runs on that lcore right after a panic is
/// caught (the appliance uses it to make every other worker stop).
///
/// Errors: the lcore is not a worker lcore or is busy (`rte_eal_remote_launch`).
pub fn launch<F>(lcore: u32, job: F, on_panic: Option<Arc<dyn Fn() + Send + Sync>>) -> Result<LcoreHandle, DpdkError>
where
    F: FnOnce() + Send + 'static,
{
    let panic = Arc::new(Mutex::new(None));
    let boxed = Box::new(Launch { job: Some(Box::new(job)), panic: panic.clone(), on_panic });
    let arg = Box::into_raw(boxed) as *mut c_void;
    // SAFETY: trampoline takes back the Box exactly once; on failure we take it back here.
    let ret = unsafe { dpdk_sys::rte_eal_remote_launch(Some(trampoline), arg, lcore) };
    if ret != 0 {
        // SAFETY: the launch failed, so the trampoline never saw `arg`.
        drop(unsafe { Box::from_raw(arg as *mut Launch) });
        return Err(DpdkError::from_ret(format!("rte_eal_remote_launch(lcore {lcore})"), ret));
    }
    Ok(LcoreHandle { lcore, panic })
}

impl LcoreHandle {
    /// The lcore the closure runs on.
    pub fn lcore(&self) -> u32 {
        self.lcore
    }

    /// Waits for the closure (`rte_eal_wait_lcore`). Err holds the panic message if it panicked.
    pub fn join(self) -> Result<(), String> {
        // SAFETY: called from the main lcore for a lcore we launched.
        unsafe { dpdk_sys::rte_eal_wait_lcore(self.lcore) };
        match self.panic.lock().unwrap_or_else(|e| e.into_inner()).take() {
            Some(msg) => Err(msg),
            None => Ok(()),
        }
    }
}
