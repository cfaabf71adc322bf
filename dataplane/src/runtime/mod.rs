//! The runtime: DPDK (EAL, mempools, ports, queues, rings, lcores), the poll-mode worker loop,
//! the appliance's start-up and shutdown, and the pcap files of replays (libpcap).
//!
//! It moves mbufs through the packet core ([`crate::packet`]); the packet core never imports
//! it. Only [`dpdk`] names the `dpdk_sys` bindings. Unsafe code is denied in the crate but for
//! [`dpdk`], [`control`] (its mailbox and signal registration) and [`pcapfile`] (libpcap).

pub mod app;
#[allow(unsafe_code)] // the mailbox hands boxed requests across threads; signal registration
pub mod control;
#[allow(unsafe_code)] // the DPDK bindings: every block has its SAFETY line
pub mod dpdk;
pub mod live;
pub mod metrics;
pub mod outputs;
#[allow(unsafe_code)] // libpcap's FFI
pub mod pcapfile;
pub mod stop;
pub mod worker;
