//! The runtime: DPDK (EAL, mempools, ports, queues, rings, lcores), the poll-mode worker loop,
//! the appliance's start-up and shutdown, and the pcap files of replays (libpcap).
//!
//! It moves mbufs through the packet core ([`crate::packet`]); the packet core never imports
//! it. Only [`dpdk`] names the `dpdk_sys` bindings.

pub mod app;
pub mod control;
pub mod dpdk;
pub mod live;
pub mod metrics;
pub mod outputs;
pub mod pcapfile;
pub mod worker;
