//! The packet core: everything that reads, decides about and rewrites a packet, over plain byte
//! slices ([`buf::PacketBuf`]), with no DPDK, no libpcap, no I/O and no allocation per packet.
//!
//! It is tested without DPDK (`cargo test -p dataplane --no-default-features`), fuzzed, and
//! benchmarked with criterion. The runtime ([`crate::runtime`]) moves mbufs through it.
//!
//! Unsafe code is denied (the crate's `#![deny(unsafe_code)]`) in every module but three that
//! need it for speed: the SIMD aggregation kernels ([`agg`]'s `kernels`, runtime CPU-feature
//! dispatch), the checksum loads of [`wire::checksum`] and the prefetch hint of [`prefetch`];
//! each of their unsafe blocks carries a `SAFETY:` comment.
//!
//! Dependencies point one way: `wire` (bytes on the wire, views and setters) ← `parse` (one
//! pass over the headers) ← `field` (key fields) ← `action` ← `table`, `sched` (egress
//! scheduling) ← `datapath` (one worker's packet walk); `agg` (aggregation) takes `wire`,
//! `parse` and `buf` alone; `meter` and `meta` sit below `table` and `sched`. docs/design.md
//! gives every edge.

/// `$to.f += $from.f` for each field `f` named: the `add` of a counter struct that sums
/// workers' counters field by field. Defined before the modules that use it.
macro_rules! add_fields {
    ($to:expr, $from:expr; $($f:ident),+ $(,)?) => {
        $( $to.$f += $from.$f; )+
    };
}

pub mod action;
pub mod agg;
pub mod buf;
#[cfg(test)]
mod burst_tests;
pub mod datapath;
pub mod export;
pub mod field;
pub mod log2hist;
pub mod meta;
pub mod meter;
pub mod neighbor;
pub mod parse;
#[allow(unsafe_code)] // the prefetch intrinsic
pub mod prefetch;
pub mod sched;
#[cfg(test)]
mod segmented_tests;
pub mod stats;
pub mod table;
pub mod wire;
