//! The Environment Abstraction Layer: `rte_eal_init` once per process; at the end, the process's
//! own runtime directory removed, but no `rte_eal_cleanup` (see [`Eal`]'s drop).

use super::DpdkError;
use std::ffi::{c_char, CString};

/// The initialised EAL. Dropping it (at the end of the process: every port closed, every lcore
/// returned) removes this process's own runtime directory but does not call `rte_eal_cleanup`:
/// in DPDK 22.11 a memif port in the server role leaves its listener's callback registered with
/// the interrupt thread when it closes (`memif_socket_remove_device` frees the socket without
/// `rte_intr_callback_unregister`), the port's stop wakes that thread, and when it rebuilds its
/// wait list after `rte_eal_cleanup` has unmapped EAL memory, it reads the handle's copy there:
/// a SIGSEGV after every output was written (seen twice in about 250 two-process runs). At
/// process exit the kernel releases what the cleanup would (mappings, descriptors, threads);
/// hugepage files, when hugepages are used, stay or go by the same EAL options either way.
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
        // net_memif zero-copy closes these fds at each connection; the binaries' `close` keeps
        // them open (super::fdguard).
        super::fdguard::keep_memseg_fds();
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

/// The value of `--file-prefix` in EAL `args` (`--file-prefix=P` or `--file-prefix P`; the last
/// one wins, as in EAL).
pub fn file_prefix(args: &[String]) -> Option<&str> {
    let mut out = None;
    for (i, a) in args.iter().enumerate() {
        if let Some(v) = a.strip_prefix("--file-prefix=") {
            out = Some(v);
        } else if a == "--file-prefix" {
            out = args.get(i + 1).map(String::as_str);
        }
    }
    out
}

/// True when `args` give a file prefix of process `pid`'s own: one ending in `-<pid>`.
fn owns_prefix(args: &[String], pid: u32) -> bool {
    file_prefix(args).is_some_and(|p| p.ends_with(&format!("-{pid}")))
}

/// True for the names EAL 22.11 creates in a runtime directory: the shared configuration
/// (`config`, `fbarray_*`, `hugepage_info`, `hugepage_data`, only without `--no-shconf`), the multi-process sockets (`mp_socket`,
/// `mp_socket_<pid>_<n>`) and the telemetry sockets (`dpdk_telemetry.v2`, legacy `telemetry`).
fn is_eal_file(name: &str) -> bool {
    matches!(name, "config" | "hugepage_info" | "hugepage_data" | "dpdk_telemetry.v2" | "telemetry")
        || name.starts_with("fbarray_")
        || name.starts_with("mp_socket")
}

impl Drop for Eal {
    fn drop(&mut self) {
        let dir = self.runtime_dir();
        // The runtime directory goes when it is this process's own (its file prefix ends in
        // `-<pid>`, as the appliance's and pktgen's defaults do): EAL's files in it first (without
        // `rte_eal_cleanup` nothing unlinks them, and with the shared configuration the memseg
        // array alone is megabytes of tmpfs), then the directory if nothing else is left in it.
        // A shared prefix (`rte` without --file-prefix, or one given to several processes) is
        // left alone: removing it under another process starting with the same prefix fails that
        // process's EAL init (its telemetry socket has no directory).
        if !dir.is_empty() && owns_prefix(&self.args, std::process::id()) {
            let dir = std::path::Path::new(&dir);
            if let Ok(entries) = std::fs::read_dir(dir) {
                for e in entries.flatten() {
                    let is_file = e.file_type().is_ok_and(|t| !t.is_dir());
                    if is_file && is_eal_file(&e.file_name().to_string_lossy()) {
                        let _ = std::fs::remove_file(e.path());
                    }
                }
            }
            let _ = std::fs::remove_dir(dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_runtime_directory_is_removed_only_under_a_prefix_of_this_process() {
        assert_eq!(file_prefix(&args(&["dpu", "--no-huge"])), None);
        assert_eq!(file_prefix(&args(&["dpu", "--file-prefix=dpu-42"])), Some("dpu-42"));
        assert_eq!(file_prefix(&args(&["dpu", "--file-prefix", "a", "--file-prefix=b"])), Some("b"));
        assert_eq!(file_prefix(&args(&["dpu", "--file-prefix"])), None);
        assert!(owns_prefix(&args(&["x", "--file-prefix=pktgen-42"]), 42));
        // EAL's default `rte`, another process's prefix, or a shared name: left alone.
        assert!(!owns_prefix(&args(&["x", "--no-shconf"]), 42));
        assert!(!owns_prefix(&args(&["x", "--file-prefix=pktgen-421"]), 42));
        assert!(!owns_prefix(&args(&["x", "--file-prefix", "shared"]), 42));
    }

    #[test]
    fn only_eal_files_are_removed_from_the_runtime_directory() {
        for n in [
            "config",
            "fbarray_memzone",
            "fbarray_nohugemem",
            "mp_socket",
            "mp_socket_77_1a2b",
            "dpdk_telemetry.v2",
            "telemetry",
        ] {
            assert!(is_eal_file(n), "{n}");
        }
        for n in ["dpu_control.sock", "configs", "stats.json", "telemetry.v3"] {
            assert!(!is_eal_file(n), "{n}");
        }
    }
}
