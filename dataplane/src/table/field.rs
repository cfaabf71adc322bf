//! Fields a table key can use, named as P4 programs name them, and their extraction.

use crate::wire::ethernet;

/// A header field usable in a table key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    /// The port the packet arrived on (2 bytes).
    IngressPort,
    /// Ethernet destination MAC (6 bytes).
    EthDst,
    /// Ethernet source MAC (6 bytes).
    EthSrc,
    /// EtherType (2 bytes).
    EthType,
}

impl Field {
    /// Every field, for listing in errors.
    pub const ALL: &'static [Field] = &[
        Field::IngressPort,
        Field::EthDst,
        Field::EthSrc,
        Field::EthType,
    ];

    /// The field's name in configs, like `eth.dst`.
    pub fn name(self) -> &'static str {
        match self {
            Field::IngressPort => "ingress_port",
            Field::EthDst => "eth.dst",
            Field::EthSrc => "eth.src",
            Field::EthType => "eth.type",
        }
    }

    /// Looks a field up by its config name.
    pub fn from_name(name: &str) -> Option<Field> {
        Field::ALL.iter().copied().find(|f| f.name() == name)
    }

    /// Width in the key (bytes).
    pub fn width(self) -> usize {
        match self {
            Field::IngressPort | Field::EthType => 2,
            Field::EthDst | Field::EthSrc => 6,
        }
    }

    /// Width in bits (for prefix lengths and values).
    pub fn bits(self) -> u32 {
        self.width() as u32 * 8
    }

    /// Writes the field's big-endian bytes to `out` (exactly `width()` bytes). The frame has at
    /// least an Ethernet header (the parser checked).
    #[inline(always)]
    pub fn extract(self, frame: &[u8], ingress_port: u16, out: &mut [u8]) {
        match self {
            Field::IngressPort => out.copy_from_slice(&ingress_port.to_be_bytes()),
            Field::EthDst => out.copy_from_slice(&frame[0..6]),
            Field::EthSrc => out.copy_from_slice(&frame[6..12]),
            Field::EthType => out.copy_from_slice(&frame[12..ethernet::HEADER_LEN]),
        }
    }
}
