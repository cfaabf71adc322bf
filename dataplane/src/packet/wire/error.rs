//! The error every checked view in [`crate::wire`] returns when its bytes cannot hold the header
//! they claim to hold.

/// Why a header view refused its bytes.
///
/// Views return this from `new_checked`; after a view is built none of its accessors can panic.
/// The full-stack parser ([`crate::parse`]) maps each to a per-layer drop reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum WireError {
    /// Fewer bytes are present than the fixed part of the header needs.
    #[error("buffer shorter than the header")]
    Truncated,
    /// The version field holds a value this view does not parse (IPv4: not 4; IPv6: not 6).
    #[error("unexpected version")]
    BadVersion,
    /// A header-length field is below its minimum or runs past the bytes present (IPv4 IHL, an
    /// IPv6 extension header's length).
    #[error("header length field out of range")]
    BadHeaderLen,
    /// A total/payload length field is below the header length or beyond the bytes present
    /// (IPv4 total length, IPv6 payload length, UDP length).
    #[error("length field out of range")]
    BadLength,
    /// More IPv6 extension headers than the walk accepts, or a Hop-by-Hop header that is not
    /// first (RFC 8200 section 4.1).
    #[error("unsupported extension header chain")]
    BadExtensionChain,
    /// IPv4 options that break RFC 791's format: an option whose length is below its minimum
    /// or runs past the header, a pointer below its minimum, a second source route.
    #[error("malformed IPv4 option")]
    BadOption,
    /// An InfiniBand BTH opcode this appliance does not know the layout of.
    #[error("unknown BTH opcode")]
    UnknownOpcode,
    /// A well-formed header of a kind this view does not handle (ARP other than IPv4 over
    /// Ethernet).
    #[error("unsupported header variant")]
    Unsupported,
}
