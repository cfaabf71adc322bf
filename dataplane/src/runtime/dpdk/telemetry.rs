//! Commands on DPDK's telemetry socket (`rte_telemetry_register_cmd`, lib/telemetry): the
//! socket `<runtime dir>/dpdk_telemetry.v2` that `dpdk-telemetry.py -f <file prefix>` reads.
//! Each command answers with a dictionary of unsigned counters, or of one `error` string.
//!
//! Handlers run on DPDK's telemetry thread, never on a worker lcore.

use std::ffi::{c_char, c_int, CStr, CString};
use std::sync::Mutex;

use super::DpdkError;

/// Entries a dictionary reply may hold (`RTE_TEL_MAX_DICT_ENTRIES`): a handler pages longer
/// answers.
pub const MAX_DICT_ENTRIES: usize = dpdk_sys::RTE_TEL_MAX_DICT_ENTRIES as usize;

/// A command's answer: `(key, value)` pairs, at most [`MAX_DICT_ENTRIES`] (the rest are cut),
/// keys of ASCII letters, digits, `_` and `/` (DPDK refuses others); or an error message.
pub type Reply = Result<Vec<(String, u64)>, String>;

/// A command's handler: its parameters (the text after the first comma, or empty) to its reply.
pub type Handler = fn(&str) -> Reply;

static HANDLERS: Mutex<Vec<(String, Handler)>> = Mutex::new(Vec::new());

/// DPDK 22.11's longest command help, with its NUL (`RTE_TEL_MAX_STRING_LEN`).
pub const MAX_HELP: usize = 128;

/// Registers `cmd` (e.g. `/dpu/stats`: a `/` then letters, digits, `_` and `/`) with its
/// one-line `help` and `handler`. Registering a command again replaces its handler (DPDK keeps
/// the first registration's help). Errors: what `rte_telemetry_register_cmd` refuses (a bad
/// name, too many commands).
pub fn register(cmd: &str, help: &str, handler: Handler) -> Result<(), DpdkError> {
    let mut hs = HANDLERS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(h) = hs.iter_mut().find(|(c, _)| c == cmd) {
        h.1 = handler;
        return Ok(());
    }
    let what = || format!("rte_telemetry_register_cmd({cmd})");
    if help.len() >= MAX_HELP {
        // DPDK refuses it with EINVAL alone: say why.
        return Err(DpdkError::new(what(), format!("help of {} bytes: at most {} fit", help.len(), MAX_HELP - 1)));
    }
    let c = CString::new(cmd).map_err(|_| DpdkError::new(what(), "NUL in the command"))?;
    let h = CString::new(help).map_err(|_| DpdkError::new(what(), "NUL in the help"))?;
    // SAFETY: valid C strings (DPDK copies both); the callback is a plain function.
    let rc = unsafe { dpdk_sys::rte_telemetry_register_cmd(c.as_ptr(), Some(trampoline), h.as_ptr()) };
    if rc != 0 {
        return Err(DpdkError::from_ret(what(), rc));
    }
    hs.push((cmd.to_string(), handler));
    Ok(())
}

/// The one callback DPDK calls: finds the handler by command and writes its reply.
unsafe extern "C" fn trampoline(cmd: *const c_char, params: *const c_char, d: *mut dpdk_sys::rte_tel_data) -> c_int {
    let text = |p: *const c_char| {
        if p.is_null() {
            String::new()
        } else {
            // SAFETY: DPDK passes NUL-terminated strings valid for the call.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };
    let (cmd, params) = (text(cmd), text(params));
    let handler = HANDLERS.lock().unwrap_or_else(|e| e.into_inner()).iter().find(|(c, _)| *c == cmd).map(|(_, h)| *h);
    let reply = match handler {
        Some(h) => std::panic::catch_unwind(|| h(&params)).unwrap_or_else(|_| Err("the handler panicked".into())),
        None => Err(format!("no handler for {cmd}")),
    };
    // SAFETY: `d` is the reply buffer DPDK gives this call.
    unsafe {
        if dpdk_sys::rte_tel_data_start_dict(d) != 0 {
            return -1;
        }
        match reply {
            Ok(kv) => {
                for (k, v) in kv.iter().take(MAX_DICT_ENTRIES) {
                    if let Ok(k) = CString::new(k.as_str()) {
                        dpdk_sys::rte_tel_data_add_dict_u64(d, k.as_ptr(), *v);
                    }
                }
            }
            Err(e) => {
                // DPDK 22.11 escapes strings for JSON only partly: keep to printable ASCII
                // without quotes or backslashes, so that every reply parses.
                let e: String = e
                    .chars()
                    .map(|c| if c == ' ' || (c.is_ascii_graphic() && c != '"' && c != '\\') { c } else { '?' })
                    .collect();
                let msg = CString::new(e).unwrap_or_default();
                dpdk_sys::rte_tel_data_add_dict_string(d, c"error".as_ptr(), msg.as_ptr());
            }
        }
    }
    0
}
