//! The software DPU's data plane.
//!
//! The packet core (wire formats, parsing, match-action tables, actions, gradient aggregation,
//! counters) works on plain byte slices and never touches DPDK, so it is tested without it.
//! The DPDK layer (`dpdk`, `worker`, `app`; feature `dpdk`, on by default) moves real packets
//! through it: EAL, mempools, ports and one poll-mode worker per lcore.
//!
//! ```text
//!  port rx queue ──► worker (one per lcore) ──► tx buffer per port ──► port tx queue
//!                     │ parse (wire::*, parse)
//!                     │ local delivery: gradient aggregation (agg)
//!                     │ ingress pipeline: table ─► table ─► table (table, action)
//!                     └ counters and drops by reason (stats)
//! ```
#![warn(missing_docs, missing_debug_implementations)]

pub mod action;
pub mod agg;
pub mod buf;
pub mod config;
pub mod datapath;
#[deny(unsafe_code)]
pub mod meter;
pub mod neighbor;
pub mod outputs;
pub mod parse;
pub mod pcapfile;
pub mod prefetch;
#[deny(unsafe_code)]
pub mod sched;
pub mod stats;
pub mod table;
pub mod wire;

#[cfg(feature = "dpdk")]
pub mod app;
#[cfg(feature = "dpdk")]
pub mod dpdk;
#[cfg(feature = "dpdk")]
pub mod worker;
