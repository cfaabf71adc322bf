//! The Environment Abstraction Layer: `rte_eal_init` once per process, `rte_eal_cleanup` at the end.

use super::DpdkError;
use std::ffi::{c_char, CString};

/// The initialised EAL. Dropping it calls `rte_eal_cleanup`.
///
/// EAL keeps pointers into the argv it was given, so the argument strings are leaked: they live
/// as long as the process.
#[derive(Debug)]
pub struct Eal {
    args: Vec<String>,
}

impl Eal {
    /// Runs `rte_eal_init` with `args` (the program name first, like a C `argv`).
    ///
    /// Errors: an argument with a NUL byte, or EAL refusing (bad option, no memory, a device that
    /// fails to probe), with `rte_errno`'s text. EAL can only be initialised once per process.
    pub fn init(args: &[String]) -> Result<Eal, DpdkError> {
        let mut argv: Vec<*mut c_char> = Vec::with_capacity(args.len() + 1);
        for a in args {
            let c = CString::new(a.as_str())
                .map_err(|_| DpdkError::new("rte_eal_init", format!("argument {a:?} holds a NUL byte")))?;
            argv.push(c.into_raw()); // leaked on purpose: EAL keeps pointers into argv
        }
        argv.push(std::ptr::null_mut());
        let argv = Box::leak(argv.into_boxed_slice());
        // SAFETY: argv is a NULL-terminated array of valid C strings that outlive the process.
        let ret = unsafe { dpdk_sys::rte_eal_init(args.len() as i32, argv.as_mut_ptr()) };
        if ret < 0 {
            return Err(DpdkError::from_errno(format!("rte_eal_init({})", args.join(" "))));
        }
        Ok(Eal { args: args.to_vec() })
    }

    /// The arguments EAL was started with.
    pub fn args(&self) -> &[String] {
        &self.args
    }

    /// EAL's runtime directory (`rte_eal_get_runtime_dir`): `/var/run/dpdk/<file prefix>` as
    /// root; the telemetry socket `dpdk_telemetry.v2` is there.
    pub fn runtime_dir(&self) -> String {
        // SAFETY: EAL is initialised; the string lives as long as EAL.
        let p = unsafe { dpdk_sys::rte_eal_get_runtime_dir() };
        if p.is_null() {
            return String::new();
        }
        // SAFETY: a NUL-terminated string from EAL.
        unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// The main lcore's id (`rte_get_main_lcore`).
    pub fn main_lcore(&self) -> u32 {
        // SAFETY: EAL is initialised.
        unsafe { dpdk_sys::rte_get_main_lcore() }
    }

    /// The worker lcores EAL runs (every enabled lcore but the main one), in id order.
    pub fn worker_lcores(&self) -> Vec<u32> {
        let mut out = Vec::new();
        let mut i: u32 = u32::MAX; // rte_get_next_lcore(-1, ...) starts from lcore 0
        loop {
            // SAFETY: EAL is initialised; the call only reads its lcore table.
            i = unsafe { dpdk_sys::rte_get_next_lcore(i, 1, 0) };
            if i >= dpdk_sys::RTE_MAX_LCORE {
                return out;
            }
            out.push(i);
        }
    }
}

impl Drop for Eal {
    fn drop(&mut self) {
        let dir = self.runtime_dir();
        // SAFETY: called once, after every port is closed and every worker lcore has returned.
        unsafe {
            dpdk_sys::rte_eal_cleanup();
        }
        // The runtime directory (one per file prefix, hence per run by default) goes too: first
        // the telemetry sockets (DPDK 22.11 unlinks them only at process exit), then the
        // directory if nothing else is left in it.
        if !dir.is_empty() {
            let dir = std::path::Path::new(&dir);
            for sock in ["dpdk_telemetry.v2", "telemetry"] {
                let p = dir.join(sock);
                if std::fs::symlink_metadata(&p)
                    .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()))
                {
                    let _ = std::fs::remove_file(&p);
                }
            }
            let _ = std::fs::remove_dir(dir);
        }
    }
}
