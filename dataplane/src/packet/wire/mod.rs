//! Wire formats: one header per file, each a zero-copy checked view over bytes (`new_checked`,
//! after which no accessor panics) plus typed constants for its layout; beside them the frame
//! builder ([`build`]), the Internet checksum ([`checksum`]), the RoCEv2 ICRC ([`icrc`]) and
//! gradient-frame templates ([`template`]: built once, then copied and patched per frame).
//!
//! Nothing here touches DPDK, and nothing allocates per frame (a template set allocates when it
//! is built). Offsets are written once per header, as named byte ranges in a private `field`
//! module.

/// The two constructors of a checked view `$view { buffer }` over `T: AsRef<[u8]>`, whose
/// `check_len(&self) -> Result<(), WireError>` is written beside it: `new_unchecked` wraps the
/// buffer as it is (accessors may panic until `check_len` succeeds) and `new_checked` wraps it
/// after `check_len`. `$start` says where the buffer starts, for the docs.
macro_rules! view_constructors {
    ($view:ident, $start:literal) => {
        #[doc = concat!("Wraps `buffer` (", $start, ") without checks; accessors may panic until")]
        #[doc = concat!("[`", stringify!($view), "::check_len`] succeeds.")]
        pub fn new_unchecked(buffer: T) -> Self {
            $view { buffer }
        }

        #[doc = concat!("Wraps `buffer` (", $start, ") after [`", stringify!($view), "::check_len`].")]
        ///
        /// # Errors
        #[doc = concat!("See [`", stringify!($view), "::check_len`].")]
        pub fn new_checked(buffer: T) -> Result<Self, WireError> {
            let p = Self::new_unchecked(buffer);
            p.check_len()?;
            Ok(p)
        }
    };
}

pub mod arp;
pub mod bth;
pub mod build;
#[allow(unsafe_code)] // unaligned word loads and the AVX-512 VNNI sum; every block has its SAFETY line.
pub mod checksum;
pub mod error;
pub mod ethernet;
pub mod gradient;
pub mod icrc;
pub mod ipv4;
pub mod ipv6;
pub mod ndp;
pub mod template;
pub mod udp;
pub mod vlan;

pub use ethernet::{EtherType, EthernetAddress, EthernetFrame};

/// A byte range within a header.
pub(crate) type Field = core::ops::Range<usize>;

/// Reads a big-endian u16 at `off`. The caller has checked the length.
#[inline(always)]
pub(crate) fn be16(b: &[u8], off: usize) -> u16 {
    u16::from_be_bytes([b[off], b[off + 1]])
}

/// Reads a big-endian u32 at `off`. The caller has checked the length.
#[inline(always)]
pub(crate) fn be32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

/// Writes a big-endian u16 at `off`. The caller has checked the length.
#[inline(always)]
pub(crate) fn put_be16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_be_bytes());
}

/// Writes a big-endian u32 at `off`. The caller has checked the length.
#[inline(always)]
pub(crate) fn put_be32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_be_bytes());
}
