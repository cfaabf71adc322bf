//! Per-packet metadata: what a packet carries through the pipeline besides its headers (P4's
//! standard and user metadata). Tables match its fields as they match header fields
//! (`ingress_port`, ...), and actions set them; [`crate::parse::Parsed`] stays the parse of the
//! frame's bytes.

/// A packet's metadata, made when it is received and dropped when it leaves: 4 bytes, copied
/// freely.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Meta {
    /// The port the packet arrived on (index into the configured ports).
    pub ingress_port: u16,
}

impl Meta {
    /// The metadata of a packet received on `ingress_port`.
    #[inline(always)]
    pub fn new(ingress_port: u16) -> Meta {
        Meta { ingress_port }
    }
}
