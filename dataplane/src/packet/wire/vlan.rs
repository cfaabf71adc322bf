//! VLAN tags: IEEE 802.1Q customer tags (TPID 0x8100) and IEEE 802.1ad service tags (TPID
//! 0x88a8).
//!
//! On the wire a tag is 4 bytes, TPID then TCI, inserted where the EtherType was:
//!
//! ```text
//!  dst(6) src(6) TPID(2) TCI(2) EtherType(2) ...
//!                       └─ this view ─────┘
//! ```
//!
//! The TPID is the EtherType field before the tag (it says a tag follows), so this view covers the
//! TCI and the EtherType after the tag (the TPID of the next tag, or the payload's type): 4 bytes.
//! TCI = PCP (3 bits, priority) | DEI (1 bit, drop eligible) | VID (12 bits).

use super::error::WireError;
use super::{be16, put_be16, Field};

mod field {
    use super::Field;
    pub const TCI: Field = 0..2;
    pub const ETHERTYPE: Field = 2..4;
}

/// Length of the part of a tag this view covers: TCI and the next EtherType (bytes).
pub const HEADER_LEN: usize = 4;
/// TPID of an IEEE 802.1Q customer tag (C-tag).
pub const TPID_8021Q: u16 = 0x8100;
/// TPID of an IEEE 802.1ad service tag (S-tag).
pub const TPID_8021AD: u16 = 0x88a8;

/// True for an EtherType that announces a VLAN tag (802.1Q or 802.1ad).
#[inline]
pub fn is_tpid(ethertype: u16) -> bool {
    ethertype == TPID_8021Q || ethertype == TPID_8021AD
}

/// A checked view of one VLAN tag's TCI and the EtherType after it.
#[derive(Debug, Clone)]
pub struct VlanTag<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> VlanTag<T> {
    /// Wraps `buffer` (starting at the TCI) after checking it holds [`HEADER_LEN`] bytes.
    ///
    /// # Errors
    /// [`WireError::Truncated`] if fewer than 4 bytes are present.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        Ok(VlanTag { buffer })
    }

    /// Wraps `buffer` (starting at the TCI) without a length check, for a tag already parsed
    /// (at least [`HEADER_LEN`] bytes); the accessors still index the buffer.
    #[inline]
    pub fn new_unchecked(buffer: T) -> Self {
        VlanTag { buffer }
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The whole 16-bit Tag Control Information.
    #[inline]
    pub fn tci(&self) -> u16 {
        be16(self.buffer.as_ref(), field::TCI.start)
    }

    /// Priority Code Point (3 bits, 0..=7).
    #[inline]
    pub fn pcp(&self) -> u8 {
        (self.tci() >> 13) as u8
    }

    /// Drop Eligible Indicator.
    #[inline]
    pub fn dei(&self) -> bool {
        self.tci() & 0x1000 != 0
    }

    /// VLAN identifier (12 bits, 0..=4095; 0 means priority-tagged only, 4095 is reserved).
    #[inline]
    pub fn vid(&self) -> u16 {
        self.tci() & 0x0fff
    }

    /// The EtherType after the tag: the TPID of an inner tag or the payload's type.
    #[inline]
    pub fn ethertype(&self) -> u16 {
        be16(self.buffer.as_ref(), field::ETHERTYPE.start)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> VlanTag<T> {
    /// Sets the whole TCI.
    #[inline]
    pub fn set_tci(&mut self, tci: u16) {
        put_be16(self.buffer.as_mut(), field::TCI.start, tci);
    }

    /// Sets the PCP (the low 3 bits of `pcp` are used).
    #[inline]
    pub fn set_pcp(&mut self, pcp: u8) {
        let tci = (self.tci() & 0x1fff) | (((pcp & 7) as u16) << 13);
        self.set_tci(tci);
    }

    /// Sets the DEI bit.
    #[inline]
    pub fn set_dei(&mut self, dei: bool) {
        let tci = (self.tci() & !0x1000) | ((dei as u16) << 12);
        self.set_tci(tci);
    }

    /// Sets the VID (the low 12 bits of `vid` are used); PCP and DEI are kept.
    #[inline]
    pub fn set_vid(&mut self, vid: u16) {
        let tci = (self.tci() & 0xf000) | (vid & 0x0fff);
        self.set_tci(tci);
    }

    /// Sets the EtherType after the tag.
    #[inline]
    pub fn set_ethertype(&mut self, t: u16) {
        put_be16(self.buffer.as_mut(), field::ETHERTYPE.start, t);
    }
}

/// A decoded VLAN tag (without its TPID, which belongs to the preceding EtherType field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VlanRepr {
    /// Priority Code Point, 0..=7.
    pub pcp: u8,
    /// Drop Eligible Indicator.
    pub dei: bool,
    /// VLAN identifier, 0..=4095.
    pub vid: u16,
    /// The EtherType after the tag.
    pub ethertype: u16,
}

impl VlanRepr {
    /// Decodes a checked tag.
    pub fn parse<T: AsRef<[u8]>>(tag: &VlanTag<T>) -> Self {
        VlanRepr { pcp: tag.pcp(), dei: tag.dei(), vid: tag.vid(), ethertype: tag.ethertype() }
    }

    /// Writes the tag (TCI and EtherType, 4 bytes). PCP and VID are truncated to 3 and 12 bits.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, tag: &mut VlanTag<T>) {
        tag.set_tci((((self.pcp & 7) as u16) << 13) | ((self.dei as u16) << 12) | (self.vid & 0xfff));
        tag.set_ethertype(self.ethertype);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // Case c09 frame 3, bytes 12..26: 88a8 [0064 88a8] [0096 8100] [00c8 0800].
    static C09_TAGS: [u8; 14] = [0x88, 0xa8, 0x00, 0x64, 0x88, 0xa8, 0x00, 0x96, 0x81, 0x00, 0x00, 0xc8, 0x08, 0x00];

    #[test]
    fn parse_captured_stack() {
        let outer = VlanTag::new_checked(&C09_TAGS[2..]).unwrap();
        assert_eq!((outer.vid(), outer.pcp(), outer.dei()), (100, 0, false));
        assert_eq!(outer.ethertype(), TPID_8021AD);
        let mid = VlanTag::new_checked(&C09_TAGS[6..]).unwrap();
        assert_eq!((mid.vid(), mid.ethertype()), (150, TPID_8021Q));
        let inner = VlanTag::new_checked(&C09_TAGS[10..]).unwrap();
        assert_eq!((inner.vid(), inner.ethertype()), (200, 0x0800));
        assert!(is_tpid(0x8100) && is_tpid(0x88a8) && !is_tpid(0x0800));
    }

    #[test]
    fn setters_touch_only_their_bits() {
        let mut b = [0xff, 0xff, 0x08, 0x00];
        let mut t = VlanTag::new_checked(&mut b[..]).unwrap();
        t.set_vid(0x123);
        assert_eq!(t.tci(), 0xf123);
        t.set_pcp(2);
        assert_eq!(t.tci(), 0x5123);
        t.set_dei(false);
        assert_eq!(t.tci(), 0x4123);
        assert_eq!(t.ethertype(), 0x0800);
    }

    /// The DEI is the bit between the PCP and the VID (IEEE 802.1Q-2018 9.6: TCI bit 0x1000);
    /// setting it on TCI 0x4123 gives 0x5123, PCP 2 and VID 0x123 kept, and clearing it undoes it.
    #[test]
    fn set_dei_sets_bit_twelve() {
        let mut b = [0x41, 0x23, 0x08, 0x00];
        let mut t = VlanTag::new_checked(&mut b[..]).unwrap();
        t.set_dei(true);
        assert_eq!(t.tci(), 0x5123);
        assert_eq!((t.pcp(), t.dei(), t.vid()), (2, true, 0x123));
        t.set_dei(true);
        assert_eq!(t.tci(), 0x5123);
        t.set_dei(false);
        assert_eq!(b, [0x41, 0x23, 0x08, 0x00]);
    }

    #[test]
    fn too_short() {
        assert_eq!(VlanTag::new_checked(&C09_TAGS[11..]).unwrap_err(), WireError::Truncated);
    }

    proptest! {
        #[test]
        fn round_trip(pcp in 0u8..8, dei in any::<bool>(), vid in 0u16..4096, ethertype in any::<u16>()) {
            let r = VlanRepr { pcp, dei, vid, ethertype };
            let mut b = [0u8; 4];
            r.emit(&mut VlanTag::new_checked(&mut b[..]).unwrap());
            prop_assert_eq!(VlanRepr::parse(&VlanTag::new_checked(&b[..]).unwrap()), r);
        }
    }
}
