//! Raw bindings to the system DPDK (22.11, found with pkg-config) and to a small C shim that
//! exports DPDK's `static inline` fast-path functions (`shim_*`, see `shim/shim.h`).
//!
//! Nothing here is safe; the appliance's `dataplane::dpdk` module wraps what it uses.
//! The thread-local `per_lcore_*` variables are deliberately not bound: read `rte_errno` and
//! `rte_lcore_id()` through [`shim_errno`] and [`shim_lcore_id`].
#![allow(non_upper_case_globals, non_camel_case_types, non_snake_case)]
#![allow(clippy::all, rustdoc::all, missing_docs, improper_ctypes)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
