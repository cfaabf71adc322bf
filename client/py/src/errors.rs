//! The client's errors as one Python exception, `NativeError`, whose args are
//! `(kind, message, details)`: `gradclient.NativeClient` raises the pure-Python client's
//! exception class for `kind` with the same message.

use gradclient::Error;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyDict;

create_exception!(
    gradclient_native,
    NativeError,
    PyException,
    "An error of the Rust client: args (kind, message, details dict)."
);

/// `e` as a `NativeError((kind, message, details))`. Kinds: `nak` (details `reason`, `offset`,
/// `collective`), `rejoins` (`offset`), `timeout` (`missing`, `waiting_for`: list of ranks or
/// None), `unreachable`, `refused`, `socket`, `invalid`, `config`, `io`.
pub fn to_py(e: Error) -> PyErr {
    let msg = e.to_string();
    Python::attach(|py| {
        let d = PyDict::new(py);
        let kind = match &e {
            Error::Nak { collective, reason, offset, .. } => {
                let _ = d.set_item("reason", *reason);
                let _ = d.set_item("offset", *offset);
                let _ = d.set_item("collective", *collective);
                "nak"
            }
            Error::Rejoins { offset, .. } => {
                let _ = d.set_item("offset", *offset);
                "rejoins"
            }
            Error::Timeout { missing, waiting_for, .. } => {
                let _ = d.set_item("missing", *missing);
                let _ = d.set_item("waiting_for", waiting_for.clone());
                "timeout"
            }
            Error::Unreachable { .. } => "unreachable",
            Error::Refused { .. } => "refused",
            Error::Socket { .. } => "socket",
            Error::Config(_) => "config",
            Error::Invalid(_) | Error::DtypeMismatch { .. } | Error::Length { .. } => "invalid",
            _ => "io",
        };
        NativeError::new_err((kind, msg, d.unbind()))
    })
}
