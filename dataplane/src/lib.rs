//! The software DPU's data plane.
//!
//! Two layers, in two folders (docs/design.md walks through both):
//! - [`packet`], the packet core (wire formats, parsing, match-action tables, actions, gradient
//!   aggregation, counters), works on plain byte slices and needs neither DPDK nor libpcap, so
//!   it is tested, fuzzed and benchmarked without them;
//! - [`runtime`] (feature `dpdk`, on by default) moves real packets through it: EAL, mempools,
//!   ports, one poll-mode worker per lcore, and the pcap files of replays.
//!
//! [`config`] sits between them: it reads the TOML file and builds the core's tables and
//! collectives. The runtime calls it at start-up; the packet core never imports it (only its
//! unit tests do, to build fixtures from TOML).
//!
//! ```text
//!  port rx queue ──► worker (one per lcore) ──► tx buffer per port ──► port tx queue
//!                     │ parse (wire::*, parse)
//!                     │ local delivery: gradient aggregation (agg)
//!                     │ ingress pipeline: table ─► table ─► table (table, action)
//!                     └ counters and drops by reason (stats)
//! ```
#![warn(missing_docs, missing_debug_implementations, clippy::undocumented_unsafe_blocks)]
#![deny(unsafe_code)]

// The crate under its own name too, so that what `port_config!` expands to names the same paths
// here as in the crates that call it (serde's `default = "..."` takes a path, not `$crate`).
extern crate self as dataplane;

pub mod config;
pub mod packet;
#[cfg(feature = "dpdk")]
pub mod runtime;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

// The packet core's modules at the crate root, so that paths stay short
// (`dataplane::wire::ipv4`, `crate::agg::Aggregator`).
pub use packet::{
    action, agg, buf, datapath, export, field, log2hist, meta, meter, neighbor, parse, prefetch, sched, stats, table,
    wire,
};
#[cfg(feature = "dpdk")]
pub use runtime::{app, control, dpdk, live, metrics, outputs, pcapfile, stop, worker};
