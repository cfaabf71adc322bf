//! What every worker's aggregator is built with besides its collectives: the run's addresses,
//! ports and how its workers share the collectives. Kept apart from the slot state
//! (`state.rs`) and the runtime changes ([`super::swap`]), which both take it.

use super::collective::{Carriage, Collective};
use super::PortAddr;

/// What every aggregator of a run answers from besides its collectives (as the appliance built
/// them at start): the ports' addresses, the gradient UDP port, the appliance's QPN, and how
/// many workers share the collectives.
#[derive(Debug, Clone)]
pub struct AggContext {
    /// Per port: the appliance's MAC and addresses there.
    pub ports: Vec<PortAddr>,
    /// The UDP carriage's port (spec section 1).
    pub gradient_udp_port: u16,
    /// The DETH source QP of the appliance's RoCEv2 packets (spec section 6).
    pub appliance_qpn: u32,
    /// Workers in the run (at least 1).
    pub workers: u16,
    /// Spread each UDP collective's chunks over the workers (`[dataplane] shard_collectives`):
    /// see [`AggContext::sharded`].
    pub shard: bool,
    /// Send a completion's result frames over one shared payload (`[dataplane]
    /// zero_copy_results`): see [`crate::buf::PacketIo::share`].
    pub zero_copy_results: bool,
}

impl AggContext {
    /// Whether `c`'s slots are spread over the workers, chunk `k` on worker
    /// `(owner + k) % workers` (its owner holding chunk 0), so that one collective uses every
    /// worker's core: with `shard` set, for a UDP collective of a run with two workers or more.
    /// A RoCEv2 collective keeps one owner: section 6 numbers each member's results with one
    /// PSN counter, a sequence that two workers' tx queues would not keep in order.
    pub fn sharded(&self, c: &Collective) -> bool {
        self.shard && self.workers > 1 && c.carriage == Carriage::Udp
    }
}
