//! Actions: what a table entry (or a table's default) does to a packet.
//!
//! An entry runs an [`ActionList`] in order. Egress decisions (`forward`, `flood`, `drop`) set the
//! packet's egress; header rewrites change the frame in place; `goto(t)` continues at a later
//! table. Without a `goto`, the pipeline goes on with the next table; `exit` ends it.
//!
//! Text syntax (config): `forward(1)`, `flood`, `drop`, `goto(acl)`, `exit`, joined with `;`,
//! like `"forward(1)"` or `"flood"`.

mod parse;

pub use parse::{parse_action_list, ActionContext, ActionParseError};

/// One primitive action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Send the packet out of this port (index into the configured ports).
    Forward(u16),
    /// Send a copy out of every port but the ingress one.
    Flood,
    /// Drop the packet (counted as an explicit drop, or a table-miss drop from a default action).
    Drop,
    /// Continue at the table with this index (always a later one).
    Goto(u16),
    /// End the pipeline here.
    Exit,
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
    /// Dropped by an entry's `drop`.
    Drop,
    /// Dropped by a table's default action on a miss.
    MissDrop,
}
