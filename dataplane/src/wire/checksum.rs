//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).
//!
//! Sums here are 16-bit ones'-complement sums of big-endian words, *not* complemented: a header
//! whose checksum field is right sums to 0xFFFF. The checksum to store is the complement of the
//! sum of everything else (with the checksum field zero).
//!
//! - [`sum`] is the folded ones'-complement sum of a slice; it reads 8 bytes at a time (one
//!   64-bit add with end-around carry per word), since it runs over whole UDP payloads.
//! - [`combine`] adds two sums, so a pseudo-header sum ([`pseudo_header_v4`],
//!   [`pseudo_header_v6`]) joins the sum of the datagram.
//! - [`update16`] and [`update32`] are RFC 1624 equation 3 for rewriting one field of a header
//!   whose checksum is already right; they give exactly what a full recompute would give (never
//!   0xFFFF for an IPv4 header). [`udp_update16`] keeps the UDP rules: 0 ("no checksum", IPv4
//!   only) stays 0, and a result of 0 is written 0xFFFF (RFC 768).

/// Ones'-complement sum of `data` as big-endian 16-bit words, folded to 16 bits, not complemented.
///
/// An odd trailing byte counts as the high byte of a word whose low byte is 0 (RFC 1071 section
/// 4.1). Sums of several slices may be joined with [`combine`] as long as every slice but the last
/// has an even length. The sum of an empty slice, or of zeros only, is 0; any other sum that is
/// zero modulo 0xFFFF comes out as 0xFFFF.
#[inline]
pub fn sum(data: &[u8]) -> u16 {
    // 32-bit words are added in native byte order into 64-bit accumulators: the ones'-complement
    // sum commutes with byte swapping (RFC 1071 section 2(B)) and defers carries (2(C)), so one
    // fold and one swap at the end give the big-endian sum. Four independent accumulators with
    // plain adds let the compiler vectorise the loop (no carry chain); a frame has far fewer
    // than 2^32 words, so they cannot overflow.
    let mut acc = [0u64; 4];
    let mut chunks = data.chunks_exact(16);
    for c in &mut chunks {
        for (i, a) in acc.iter_mut().enumerate() {
            *a += u32::from_ne_bytes([c[4 * i], c[4 * i + 1], c[4 * i + 2], c[4 * i + 3]]) as u64;
        }
    }
    let mut total: u64 = acc.iter().fold(0u64, |t, a| {
        let (s, carry) = t.overflowing_add(*a);
        s + carry as u64
    });
    // The tail (0..15 bytes): whole 32-bit words, then 1..3 bytes padded with zeros at the end,
    // without a variable-length copy.
    let rest = chunks.remainder();
    let mut words = rest.chunks_exact(4);
    for w in &mut words {
        let (s, carry) = total.overflowing_add(u32::from_ne_bytes([w[0], w[1], w[2], w[3]]) as u64);
        total = s + carry as u64;
    }
    let r = words.remainder();
    if !r.is_empty() {
        let b = |i: usize| r.get(i).copied().unwrap_or(0);
        let (s, carry) = total.overflowing_add(u32::from_ne_bytes([b(0), b(1), b(2), 0]) as u64);
        total = s + carry as u64;
    }
    let native = fold64(total);
    u16::from_be(native)
}

/// Folds a 64-bit end-around-carry accumulator to 16 bits.
#[inline(always)]
fn fold64(acc: u64) -> u16 {
    let mut s = (acc >> 32) + (acc & 0xffff_ffff);
    s = (s >> 32) + (s & 0xffff_ffff);
    s = (s >> 16) + (s & 0xffff);
    s = (s >> 16) + (s & 0xffff);
    s as u16
}

/// Ones'-complement addition of two 16-bit sums.
#[inline(always)]
pub fn combine(a: u16, b: u16) -> u16 {
    let s = a as u32 + b as u32;
    ((s & 0xffff) + (s >> 16)) as u16
}

/// The checksum to store for `data` (with its checksum field zero): `!sum(data)`.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    !sum(data)
}

/// Sum of the IPv4 pseudo-header (RFC 768; RFC 9293 section 3.1): source and destination address,
/// zero, protocol, and the upper-layer length in bytes (for UDP, its length field).
#[inline]
pub fn pseudo_header_v4(src: [u8; 4], dst: [u8; 4], protocol: u8, length: u16) -> u16 {
    let mut s = 0u32;
    s += u16::from_be_bytes([src[0], src[1]]) as u32 + u16::from_be_bytes([src[2], src[3]]) as u32;
    s += u16::from_be_bytes([dst[0], dst[1]]) as u32 + u16::from_be_bytes([dst[2], dst[3]]) as u32;
    s += protocol as u32 + length as u32;
    fold64(s as u64)
}

/// Sum of the IPv6 pseudo-header (RFC 8200 section 8.1): source and destination address, the
/// upper-layer packet length in bytes (32 bits), three zero bytes and the next header value of the
/// upper layer (17 for UDP, whatever extension headers precede it).
#[inline]
pub fn pseudo_header_v6(src: &[u8; 16], dst: &[u8; 16], next_header: u8, length: u32) -> u16 {
    let mut s = sum(src) as u64 + sum(dst) as u64;
    s += (length >> 16) as u64 + (length & 0xffff) as u64 + next_header as u64;
    fold64(s)
}

/// RFC 1624 equation 3: the checksum after one 16-bit word of the covered data changes from `old`
/// to `new`, given the checksum `hc` before: `HC' = ~(~HC + ~m + m')`.
///
/// For an IPv4 header checksum this equals a full recompute (equation 2's 0xFFFF never appears:
/// RFC 1624 section 3). Example: TOS 0x02 -> 0x03 under checksum 0x0001 (word 0x4502 -> 0x4503)
/// gives 0x0000.
#[inline]
pub fn update16(hc: u16, old: u16, new: u16) -> u16 {
    !combine(combine(!hc, !old), new)
}

/// [`update16`] for a 32-bit field (two adjacent 16-bit words, e.g. an IPv4 address).
#[inline]
pub fn update32(hc: u16, old: u32, new: u32) -> u16 {
    let hc = update16(hc, (old >> 16) as u16, (new >> 16) as u16);
    update16(hc, old as u16, new as u16)
}

/// [`update16`] for a UDP checksum field: a stored 0 (no checksum, IPv4 only; RFC 768) stays 0,
/// and an updated value of 0 is written 0xFFFF, its other ones'-complement form (RFC 768).
#[inline]
pub fn udp_update16(ck: u16, old: u16, new: u16) -> u16 {
    if ck == 0 {
        return 0;
    }
    match update16(ck, old, new) {
        0 => 0xffff,
        v => v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The RFC 1071 reference: one big-endian word at a time into a u32.
    fn naive(data: &[u8]) -> u16 {
        let mut s: u32 = 0;
        for c in data.chunks(2) {
            let w = if c.len() == 2 { u16::from_be_bytes([c[0], c[1]]) } else { (c[0] as u16) << 8 };
            s += w as u32;
            s = (s & 0xffff) + (s >> 16);
        }
        s as u16
    }

    // The IPv4 header of case c02 (IHL 6, one 4-byte option): its stored checksum is 0x1190.
    static C02_IPV4: [u8; 24] = [
        0x46, 0x02, 0x00, 0x24, 0x12, 0x34, 0x40, 0x00, 0x40, 0x11, 0x11, 0x90, 0x0a, 0x00, 0x00, 0x01, 0x0a, 0x00,
        0x00, 0x02, 0x01, 0x01, 0x01, 0x00,
    ];

    // The IPv4 header of case c05: TOS 0x02 (ECT(0)), stored checksum 0x0001.
    static C05_IPV4: [u8; 20] = [
        0x45, 0x02, 0x00, 0x20, 0x26, 0xc8, 0x40, 0x00, 0x40, 0x11, 0x00, 0x01, 0x0a, 0x00, 0x00, 0x01, 0x0a, 0x00,
        0x00, 0x02,
    ];

    #[test]
    fn rfc1071_example() {
        // RFC 1071 section 3: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2.
        assert_eq!(sum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]), 0xddf2);
        assert_eq!(sum(&[]), 0);
        assert_eq!(sum(&[0xab]), 0xab00);
    }

    #[test]
    fn captured_headers_sum_to_ffff() {
        assert_eq!(sum(&C02_IPV4), 0xffff);
        assert_eq!(sum(&C05_IPV4), 0xffff);
        let mut h = C02_IPV4;
        h[10] = 0;
        h[11] = 0;
        assert_eq!(checksum(&h), 0x1190);
    }

    #[test]
    fn c05_ce_mark_gives_0000_not_ffff() {
        // TOS 0x02 -> 0x03: the first word 0x4502 -> 0x4503.
        let hc = update16(0x0001, 0x4502, 0x4503);
        assert_eq!(hc, 0x0000);
        // And it equals a full recompute.
        let mut h = C05_IPV4;
        h[1] = 0x03;
        h[10] = 0;
        h[11] = 0;
        assert_eq!(checksum(&h), 0x0000);
        // RFC 1141's form HC' = HC + m + ~m' (RFC 1624 equation 2) would have given 0xFFFF.
        let naive_eqn2 = combine(combine(0x0001, 0x4502), !0x4503u16);
        assert_eq!(naive_eqn2, 0xffff);
    }

    #[test]
    fn c04_udp_checksum_rules() {
        // Case c04 frame 1: the UDP datagram whose computed checksum is 0, stored 0xFFFF.
        let udp = [0xc0, 0x00, 0x23, 0x28, 0x00, 0x0c, 0xff, 0xff, 0x08, 0xab, 0x00, 0x00];
        let ph = pseudo_header_v4([10, 0, 0, 1], [10, 0, 0, 2], 17, 12);
        assert_eq!(combine(ph, sum(&udp)), 0xffff);
        let mut z = udp;
        z[6] = 0;
        z[7] = 0;
        assert_eq!(!combine(ph, sum(&z)), 0x0000);
        // No checksum stays no checksum.
        assert_eq!(udp_update16(0, 0x1234, 0x5678), 0);
        // A result of 0 is written 0xFFFF: under checksum 0x0001 a word going 0x0000 -> 0x0001
        // makes the data sum 0xFFFF, whose checksum 0x0000 is stored as 0xFFFF.
        assert_eq!(update16(0x0001, 0x0000, 0x0001), 0x0000);
        assert_eq!(udp_update16(0x0001, 0x0000, 0x0001), 0xffff);
    }

    #[test]
    fn pseudo_v6_matches_bytes() {
        let src = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let dst = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&src);
        bytes.extend_from_slice(&dst);
        bytes.extend_from_slice(&0x0001_000cu32.to_be_bytes());
        bytes.extend_from_slice(&[0, 0, 0, 17]);
        assert_eq!(pseudo_header_v6(&src, &dst, 17, 0x0001_000c), naive(&bytes));
    }

    proptest! {
        #[test]
        fn fast_sum_equals_naive(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
            prop_assert_eq!(sum(&data), naive(&data));
        }

        #[test]
        fn sums_join_at_even_boundaries(
            a in proptest::collection::vec(any::<u16>(), 0..300),
            b in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let a: Vec<u8> = a.iter().flat_map(|w| w.to_be_bytes()).collect();
            let mut all = a.clone();
            all.extend_from_slice(&b);
            let joined = combine(sum(&a), sum(&b));
            // 0 and 0xFFFF are the same value in ones' complement; the joined sum of non-zero
            // data is never 0.
            prop_assert_eq!(joined % 0xffff, sum(&all) % 0xffff);
        }

        #[test]
        fn pseudo_v4_matches_bytes(src in any::<[u8; 4]>(), dst in any::<[u8; 4]>(), p in any::<u8>(), l in any::<u16>()) {
            let mut b = Vec::new();
            b.extend_from_slice(&src);
            b.extend_from_slice(&dst);
            b.extend_from_slice(&[0, p]);
            b.extend_from_slice(&l.to_be_bytes());
            prop_assert_eq!(pseudo_header_v4(src, dst, p, l), naive(&b));
        }

        /// RFC 1624: an incremental update of an IPv4 header equals a full recompute, for any
        /// header and any 16-bit word (other than the checksum itself) rewritten.
        #[test]
        fn incremental_equals_recompute(
            mut h in any::<[u8; 20]>(), word in 0usize..10, new in any::<u16>(),
        ) {
            prop_assume!(word != 5);
            h[0] = 0x45;
            h[10] = 0;
            h[11] = 0;
            let ck = checksum(&h);
            h[10..12].copy_from_slice(&ck.to_be_bytes());
            let old = u16::from_be_bytes([h[2 * word], h[2 * word + 1]]);
            h[2 * word..2 * word + 2].copy_from_slice(&new.to_be_bytes());
            let inc = update16(ck, old, new);
            h[10] = 0;
            h[11] = 0;
            prop_assert_eq!(inc, checksum(&h));
            prop_assert_ne!(inc, 0xffff);
        }

        #[test]
        fn incremental32_equals_recompute(mut h in any::<[u8; 20]>(), new in any::<u32>()) {
            h[0] = 0x45;
            h[10] = 0;
            h[11] = 0;
            let ck = checksum(&h);
            let old = u32::from_be_bytes([h[12], h[13], h[14], h[15]]);
            h[12..16].copy_from_slice(&new.to_be_bytes());
            prop_assert_eq!(update32(ck, old, new), checksum(&h));
        }
    }
}
