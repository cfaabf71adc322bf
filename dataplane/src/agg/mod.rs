//! In-network AllReduce: gradient aggregation per the protocol spec
//! (`shared/spec/gradient-protocol.md`).

pub mod config;
pub mod kernels;
