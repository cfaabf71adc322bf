//! Actions: what a table entry (or a table's default) does to a packet.
//!
//! An entry runs an [`ActionList`] in order. Egress decisions (`forward`, `flood`, `multicast`,
//! `drop`) set the packet's egress; header rewrites change the frame in place, keeping every
//! checksum equal to a full recompute and a RoCEv2 ICRC valid; `goto(t)` continues at a later
//! table. Without a `goto`, the pipeline goes on with the next table; `exit` ends it.
//!
//! One rewrite per file: [`dscp`], [`ecn`], [`ttl`], [`vlan`], [`mac`]. `aggregate` hands a
//! gradient packet addressed to the appliance to the aggregator (spec sections 3-5): it is an
//! egress decision, like `forward`.

pub mod dscp;
pub mod ecn;
pub mod mac;
mod parse;
pub mod ttl;
pub mod vlan;

pub use parse::{parse_action_list, ActionContext, ActionParseError, MeterRef};

use crate::buf::PacketBuf;
use crate::parse::Parsed;
use crate::stats::Reason;
use crate::wire::EthernetAddress;

/// One primitive action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Send the packet out of this port (index into the configured ports).
    Forward(u16),
    /// Send a copy out of every port but the ingress one.
    Flood,
    /// Send a copy to every member of this multicast group (index), each with its own rewrites.
    Multicast(u16),
    /// Drop the packet (counted as an explicit drop, or a table-miss drop from a default action).
    Drop,
    /// Sum the packet into its collective (the aggregator consumes it and sends the results),
    /// ending the pipeline as `drop` does: for gradient packets addressed to the appliance;
    /// others are dropped (`aggregate_not_gradient`).
    Aggregate,
    /// Continue at the table with this index (always a later one).
    Goto(u16),
    /// End the pipeline here.
    Exit,
    /// Count the packet in this named counter (index).
    Count(u16),
    /// Colour the packet with instance `.1` of meter `.0` (index into the pipeline's meters),
    /// into `meta.color`: a direct meter's own instance, or instance 0.
    MeterAt(u16, u32),
    /// Colour the packet with meter `.0`'s instance picked by a field's value (its first 8
    /// bytes, big-endian) modulo the meter's size: an indexed meter.
    MeterBy(u16, crate::field::Field),
    /// Set `meta.color` (the input colour of a colour-aware meter).
    SetColor(crate::meter::Color),
    /// Set `meta.class`: the egress traffic class (0..=7) on a port with a scheduler, in place
    /// of the port's DSCP or PCP map.
    SetClass(u8),
    /// [`Action::MeterAt`], then dropped (counted `policed`) when red: `police(NAME)` with its
    /// defaults (yellow goes on, red is dropped) in one action instead of three.
    PoliceAt(u16, u32),
    /// Run the next `.1` actions only when `meta.color` is `.0` (what `police` expands to).
    WhenColor(crate::meter::Color, u8),
    /// `drop` among a `police` colour's actions: dropped, counted `policed`.
    DropPoliced,
    /// Set the DSCP (IPv4 TOS or IPv6 traffic class, upper 6 bits).
    SetDscp(u8),
    /// Mark Congestion Experienced on ECN-capable packets (RFC 3168).
    MarkEcn,
    /// Decrement the IPv4 TTL or IPv6 hop limit; drop (`ttl_expired`) when it would reach 0.
    DecTtl,
    /// Set the Ethernet source.
    SetEthSrc(EthernetAddress),
    /// Set the Ethernet destination.
    SetEthDst(EthernetAddress),
    /// Push an 802.1Q tag with this VID (outermost).
    PushVlan(u16),
    /// Remove the outer VLAN tag (nothing without one).
    PopVlan,
    /// Set the VID of the outer VLAN tag (nothing without one).
    SetVlan(u16),
}

impl Action {
    /// True for header rewrites (allowed per multicast copy).
    pub fn is_rewrite(&self) -> bool {
        matches!(
            self,
            Action::SetDscp(_)
                | Action::MarkEcn
                | Action::DecTtl
                | Action::SetEthSrc(_)
                | Action::SetEthDst(_)
                | Action::PushVlan(_)
                | Action::PopVlan
                | Action::SetVlan(_)
                | Action::Count(_)
        )
    }
}

/// The actions of one entry, run in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActionList(pub Vec<Action>);

/// Where a packet goes after the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Egress {
    /// No action chose an egress: the packet is dropped (reason `no_egress`).
    #[default]
    Unset,
    /// Out of one port.
    Port(u16),
    /// Out of every port but the ingress one.
    Flood,
    /// To every copy of a multicast group (index).
    Multicast(u16),
    /// To the aggregator (the `aggregate` action).
    Aggregate,
    /// Dropped, counted under this reason.
    Dropped(Reason),
}

/// Runs one header rewrite on `buf` (whose parse is `p`, kept up to date). The pipeline's own
/// action loop (`Pipeline::apply`) calls the same functions per rewrite directly.
///
/// Errors: the reason to drop the packet (`ttl_expired`, `vlan_depth`, `no_mbuf` for a push
/// without headroom).
#[inline(always)]
pub fn rewrite<B: PacketBuf>(a: &Action, buf: &mut B, p: &mut Parsed) -> Result<(), Reason> {
    match *a {
        Action::SetDscp(d) => dscp::set_dscp(buf.data_mut(), p, d),
        Action::MarkEcn => {
            ecn::mark_ce(buf.data_mut(), p);
        }
        Action::DecTtl => return ttl::decrement(buf.data_mut(), p),
        Action::SetEthSrc(m) => mac::set_src(buf.data_mut(), p, m),
        Action::SetEthDst(m) => mac::set_dst(buf.data_mut(), p, m),
        Action::PushVlan(vid) => return vlan::push(buf, p, vid),
        Action::PopVlan => vlan::pop(buf, p),
        Action::SetVlan(vid) => vlan::set_vid(buf.data_mut(), p, vid),
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests;
