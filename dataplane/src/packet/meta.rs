//! Per-packet metadata: what a packet carries through the pipeline besides its headers (P4's
//! standard and user metadata). Tables match its fields as they match header fields
//! (`ingress_port`, ...), and actions set them; [`crate::parse::Parsed`] stays the parse of the
//! frame's bytes.

use crate::meter::Color;

/// Most traffic classes per port (IEEE 802.1Q: 8): [`Meta::class`] is below it or
/// [`CLASS_UNSET`].
pub const MAX_CLASSES: usize = 8;

/// [`Meta::class`] when no action chose a class: the egress port's class map decides.
pub const CLASS_UNSET: u8 = u8::MAX;

/// A packet's metadata, made when it is received and dropped when it leaves: 16 bytes, copied
/// freely.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// When the packet arrived (µs): its capture time in a replay, the TSC's time live. The
    /// clock meters run on.
    pub timestamp_us: u64,
    /// The port the packet arrived on (index into the configured ports).
    pub ingress_port: u16,
    /// The colour the last `meter` (or `set_color`) gave it; green until then (`meta.color`).
    pub color: Color,
    /// The egress traffic class `set_class(n)` chose (`meta.class`), or [`CLASS_UNSET`]: then
    /// a shaped port's DSCP or PCP map chooses ([`crate::sched::ClassMap`]).
    pub class: u8,
}

impl Default for Meta {
    fn default() -> Self {
        Meta { timestamp_us: 0, ingress_port: 0, color: Color::default(), class: CLASS_UNSET }
    }
}

impl Meta {
    /// The metadata of a packet received on `ingress_port`, at time 0.
    #[inline(always)]
    pub fn new(ingress_port: u16) -> Meta {
        Meta { ingress_port, ..Meta::default() }
    }

    /// The metadata of a packet received on `ingress_port` at `timestamp_us` (µs).
    #[inline(always)]
    pub fn at(ingress_port: u16, timestamp_us: u64) -> Meta {
        Meta { ingress_port, timestamp_us, ..Meta::default() }
    }
}
