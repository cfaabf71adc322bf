//! The RoCEv2 invariant CRC (ICRC; IBTA Vol. 1 Annex A17.4, gradient protocol spec section 1).
//!
//! CRC-32 (the Ethernet polynomial, as zlib computes it) over:
//!
//! 1. 8 bytes of 0xFF (they stand for the InfiniBand LRH, absent in RoCEv2);
//! 2. the IP header with the fields routers change set to all ones: IPv4 TOS (DSCP+ECN), TTL and
//!    header checksum; IPv6 traffic class, flow label and hop limit (IPv4 options and IPv6
//!    extension headers as they are);
//! 3. the UDP header with its checksum set to all ones;
//! 4. the BTH with byte 4 (FECN, BECN, resv6) set to all ones;
//! 5. everything after the BTH up to the ICRC (extension headers, payload, pad).
//!
//! The result is stored in the last 4 bytes of the UDP payload, least-significant byte first.
//! Because of the masks, marking ECN, rewriting DSCP or decrementing TTL never changes it.
//!
//! Nothing here allocates: the masked headers are copied into stack buffers (at most 60 + 20
//! bytes) and the rest is fed to the hasher by slice. For one payload sent to many receivers,
//! [`tail_hasher`] computes the CRC of the common part once and [`combine`] joins it to each
//! copy's header CRC ([`head_hasher`]) in O(log n) time, without rereading the payload.

use super::bth;
use super::error::WireError;
use super::udp;
use crc32fast::Hasher;

/// Length of the ICRC (bytes).
pub const ICRC_LEN: usize = 4;
/// Length of the UDP header and BTH the ICRC masks (bytes).
const UDP_BTH_LEN: usize = udp::HEADER_LEN + bth::HEADER_LEN;

/// Starts an ICRC over `head`: the 8 bytes of 0xFF, then `head` with the IP, UDP and BTH masks
/// applied. `head` is an IP datagram's first bytes, from the IP header through at least the BTH
/// (it may go on: DETH, gradient header, ...; those bytes are fed as they are). `l4_offset` is
/// where the UDP header starts within `head` (bytes: IPv4 IHL * 4, or 40 plus IPv6 extension
/// headers).
///
/// # Errors
/// - [`WireError::Truncated`]: `head` ends before the end of the BTH.
/// - [`WireError::BadVersion`]: the IP version nibble is neither 4 nor 6.
/// - [`WireError::BadHeaderLen`]: `l4_offset` is inside the IP header.
pub fn head_hasher(head: &[u8], l4_offset: usize) -> Result<Hasher, WireError> {
    let masked_end = l4_offset.checked_add(UDP_BTH_LEN).ok_or(WireError::BadHeaderLen)?;
    if head.len() < masked_end || head.is_empty() {
        return Err(WireError::Truncated);
    }
    let (ip_len, v6) = match head[0] >> 4 {
        4 => {
            let ihl = (head[0] & 0x0f) as usize * 4;
            if ihl < 20 || ihl > l4_offset {
                return Err(WireError::BadHeaderLen);
            }
            (ihl, false)
        }
        6 => {
            if l4_offset < 40 {
                return Err(WireError::BadHeaderLen);
            }
            (40, true)
        }
        _ => return Err(WireError::BadVersion),
    };
    // The 8 bytes of 0xFF and the masked headers in one stack buffer, fed to the hasher at once
    // (one call instead of five: the hasher's per-call cost dominates on headers this short).
    // IPv6 extension headers longer than the buffer allows take the same path piecewise.
    let mut buf = [0u8; HEAD_BUF];
    let fits = 8 + masked_end <= HEAD_BUF;
    let copied = if fits { masked_end } else { ip_len };
    buf[..8].fill(0xff);
    buf[8..8 + copied].copy_from_slice(&head[..copied]);
    let ip = &mut buf[8..8 + ip_len];
    // By version, not length: an IPv4 header with 20 bytes of options is 40 bytes long too.
    if v6 {
        ip[0] |= 0x0f; // traffic class and flow label
        ip[1] = 0xff;
        ip[2] = 0xff;
        ip[3] = 0xff;
        ip[7] = 0xff; // hop limit
    } else {
        ip[1] = 0xff; // TOS
        ip[8] = 0xff; // TTL
        ip[10] = 0xff; // header checksum
        ip[11] = 0xff;
    }
    let mut h = hasher();
    if fits {
        let ub = &mut buf[8 + l4_offset..8 + masked_end];
        ub[6] = 0xff; // UDP checksum
        ub[7] = 0xff;
        ub[udp::HEADER_LEN + 4] = 0xff; // BTH byte 4
        h.update(&buf[..8 + masked_end]);
    } else {
        h.update(&buf[..8 + ip_len]);
        h.update(&head[ip_len..l4_offset]);
        let mut ub = [0u8; UDP_BTH_LEN];
        ub.copy_from_slice(&head[l4_offset..masked_end]);
        ub[6] = 0xff; // UDP checksum
        ub[7] = 0xff;
        ub[udp::HEADER_LEN + 4] = 0xff; // BTH byte 4
        h.update(&ub);
    }
    h.update(&head[masked_end..]);
    Ok(h)
}

/// A fresh CRC-32 state: a copy of one made once (`Hasher::new` detects the CPU's features on
/// every call, which shows per packet).
#[inline]
pub fn hasher() -> Hasher {
    static PROTO: std::sync::OnceLock<Hasher> = std::sync::OnceLock::new();
    PROTO.get_or_init(Hasher::new).clone()
}

/// Bytes of [`head_hasher`]'s stack buffer: the 8 bytes of 0xFF, an IPv4 header with the
/// longest options (60) and the UDP header and BTH (20).
const HEAD_BUF: usize = 8 + 60 + UDP_BTH_LEN;

/// The CRC-32 polynomial, reflected (zlib's).
const POLY: u32 = 0xedb8_8320;

/// `a(x) * b(x)` modulo the CRC polynomial, both reflected (zlib's `multmodp`).
#[inline]
const fn multiply(a: u32, mut b: u32) -> u32 {
    let mut p = 0u32;
    let mut i = 0;
    while i < 32 {
        p ^= b & ((a >> (31 - i)) & 1).wrapping_neg();
        b = (b >> 1) ^ ((b & 1).wrapping_neg() & POLY);
        i += 1;
    }
    p
}

/// `x^(2^k)` modulo the polynomial, reflected, for `k` in `0..64` (zlib's `x2n_table`).
const X2N: [u32; 64] = {
    let mut t = [0u32; 64];
    t[0] = 0x4000_0000; // x^1
    let mut k = 1;
    while k < 64 {
        t[k] = multiply(t[k - 1], t[k - 1]);
        k += 1;
    }
    t
};

/// The factor that appends `len` bytes (any content) to a CRC: `x^(8 * len)` modulo the
/// polynomial, reflected. Computed once per tail length, it makes each [`combine_factor`] a
/// single multiplication instead of `crc32fast::Hasher::combine`'s O(log len) ones.
/// One multiplication per bit set in `8 * len` (two for a 4 KiB payload).
pub fn shift_factor(len: u64) -> u32 {
    let bits = len.wrapping_mul(8);
    let mut p = 0x8000_0000u32; // x^0
    for (k, x) in X2N.iter().enumerate() {
        if bits >> k & 1 != 0 {
            p = multiply(*x, p);
        }
    }
    p
}

/// The ICRC of head followed by tail: `head` as [`head_hasher`] leaves it, `factor` from
/// [`shift_factor`] of the tail's length in bytes, `tail_crc` the finalized CRC of the tail alone
/// ([`tail_hasher`]). Equal to [`combine`] of the same parts.
#[inline]
pub fn combine_factor(head: Hasher, factor: u32, tail_crc: u32) -> u32 {
    multiply(factor, head.finalize()) ^ tail_crc
}

/// zlib's CRC table entry for byte `b`: the (reflected) CRC register after `b` alone, from a
/// zero register and without the final inversion.
const fn byte_register(b: u8) -> u32 {
    let mut c = b as u32;
    let mut k = 0;
    while k < 8 {
        c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
        k += 1;
    }
    c
}

/// What a byte `dist` bytes before the end of a message (`dist` = 0: the last byte) does to the
/// message's CRC-32, by value: `table[b]`. The CRC is affine in the message's bits, so for two
/// messages of the same length that differ only in that byte, `crc(m') = crc(m) ^ table[m[i]]
/// ^ table[m'[i]]`; with the byte 0 in `m`, `crc(m') = crc(m) ^ table[b]` (`table[0]` is 0).
/// One [`shift_factor`] and 8 multiplications (the table is linear in `b`: each entry is the
/// XOR of the entries of its set bits); 1 KiB.
///
/// Frames that differ from a template in a few bytes (a result's offset, round and PSN) get
/// their ICRC from the template's with one lookup per such byte.
pub fn byte_table(dist: u64) -> [u32; 256] {
    let f = shift_factor(dist);
    let mut t = [0u32; 256];
    for bit in 0..8 {
        t[1 << bit] = multiply(f, byte_register(1 << bit));
    }
    for b in 1..256usize {
        let low = b & b.wrapping_neg();
        t[b] = t[b ^ low] ^ t[low];
    }
    t
}

/// A CRC state over `tail` alone, to be joined after a head with [`combine`].
pub fn tail_hasher(tail: &[u8]) -> Hasher {
    let mut h = hasher();
    h.update(tail);
    h
}

/// The ICRC of head followed by tail, from their separate states (zlib's `crc32_combine`).
pub fn combine(mut head: Hasher, tail: &Hasher) -> u32 {
    head.combine(tail);
    head.finalize()
}

/// Computes the ICRC of `datagram`: an IP datagram from its IP header through the UDP payload's
/// last 4 bytes (the ICRC, excluded from the sum), with the UDP header at `l4_offset`.
///
/// # Errors
/// [`WireError::Truncated`] if there is no room for UDP, BTH and ICRC; otherwise as
/// [`head_hasher`].
pub fn compute(datagram: &[u8], l4_offset: usize) -> Result<u32, WireError> {
    let masked_end = l4_offset.checked_add(UDP_BTH_LEN).ok_or(WireError::BadHeaderLen)?;
    if datagram.len() < masked_end + ICRC_LEN {
        return Err(WireError::Truncated);
    }
    let mut h = head_hasher(&datagram[..masked_end], l4_offset)?;
    h.update(&datagram[masked_end..datagram.len() - ICRC_LEN]);
    Ok(h.finalize())
}

/// The ICRC stored in the last 4 bytes of `datagram` (least-significant byte first), or `None`
/// if it is shorter than 4 bytes.
pub fn stored(datagram: &[u8]) -> Option<u32> {
    let n = datagram.len().checked_sub(ICRC_LEN)?;
    let b = &datagram[n..];
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Stores `crc` in the last 4 bytes of `datagram`, least-significant byte first (IBTA Vol. 1
/// Annex A17.4; the counterpart of [`stored`]). `datagram` must hold at least [`ICRC_LEN`] bytes.
#[inline]
pub fn store(datagram: &mut [u8], crc: u32) {
    let n = datagram.len() - ICRC_LEN;
    datagram[n..].copy_from_slice(&crc.to_le_bytes());
}

/// True when the stored ICRC equals the computed one (see [`compute`] for the arguments).
///
/// # Errors
/// As [`compute`].
pub fn verify(datagram: &[u8], l4_offset: usize) -> Result<bool, WireError> {
    let c = compute(datagram, l4_offset)?;
    Ok(stored(datagram) == Some(c))
}

/// Computes the ICRC and stores it in the last 4 bytes of `datagram`.
///
/// # Errors
/// As [`compute`].
pub fn fill(datagram: &mut [u8], l4_offset: usize) -> Result<(), WireError> {
    let c = compute(datagram, l4_offset)?;
    store(datagram, c);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::case_frames;
    use crate::wire::ipv6::{Ipv6Packet, Ipv6Repr};
    use proptest::prelude::*;
    use std::sync::LazyLock;

    // Case c10 frame 1 from the IP header: IPv4 (TOS 0x02) / UDP 49152 -> 4791, checksum 0 /
    // BTH RC SEND Only / 16 bytes of 0x11 / ICRC 67 91 ca 03 (0x03ca9167): 60 bytes.
    static C10: LazyLock<Vec<u8>> = LazyLock::new(|| case_frames("c10_rocev2_ipv4_icrc.pcap")[0][14..].to_vec());

    // NCCL capture frame 69 from the IP header: an RC Acknowledge (AETH) from 172.30.0.12 to
    // 172.30.0.25, ICRC 1f 37 91 35: 48 bytes.
    static NCCL_ACK: LazyLock<Vec<u8>> =
        LazyLock::new(|| case_frames("nccl_ring_allreduce_rocev2.pcap")[68][14..].to_vec());

    /// The c10 ICRC, 0x03ca9167, is stored least-significant byte first in the last 4 bytes.
    #[test]
    fn store_writes_the_last_four_bytes_little_endian() {
        let mut b = C10.clone();
        b[56..].fill(0);
        store(&mut b, 0x03ca_9167);
        assert_eq!(b, *C10);
        assert_eq!(stored(&b), Some(0x03ca_9167));
    }

    #[test]
    fn captured_icrcs_verify() {
        assert_eq!(compute(&C10, 20), Ok(0x03ca_9167));
        assert_eq!(stored(&C10), Some(0x03ca_9167));
        assert_eq!(verify(&C10, 20), Ok(true));
        assert_eq!(verify(&NCCL_ACK, 20), Ok(true));
    }

    #[test]
    fn masked_fields_do_not_change_it() {
        let mut b = C10.clone();
        b[1] = 0x03; // CE
        b[8] = 1; // TTL
        b[10] = 0xab; // IP checksum
        b[26] = 0x12; // UDP checksum
        b[27] = 0x34;
        b[32] = 0xc0; // FECN, BECN
        assert_eq!(verify(&b, 20), Ok(true));
        // Anything else does.
        for i in [2usize, 9, 12, 19, 20, 24, 28, 30, 35, 39, 40, 55] {
            let mut b = C10.clone();
            b[i] ^= 0x01;
            assert_eq!(verify(&b, 20), Ok(false), "byte {i}");
        }
        // And so does a bad ICRC.
        let mut b = C10.clone();
        b[59] ^= 0x80;
        assert_eq!(verify(&b, 20), Ok(false));
    }

    #[test]
    fn ipv6_masks_tc_flow_label_hop_limit() {
        // An IPv6 version of c10: same UDP/BTH/payload.
        let fd = |last: u8| [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, last];
        let ip = Ipv6Repr {
            src_addr: fd(1),
            dst_addr: fd(2),
            next_header: 17,
            payload_len: 40,
            hop_limit: 64,
            ..Default::default()
        };
        let mut v = vec![0u8; 40];
        ip.emit(&mut v).unwrap();
        v.extend_from_slice(&C10[20..]);
        fill(&mut v, 40).unwrap();
        assert_eq!(verify(&v, 40), Ok(true));
        let mut h = Ipv6Packet::new_unchecked(&mut v[..]);
        h.set_traffic_class(0xba);
        h.set_flow_label(0xabcde);
        h.set_hop_limit(1);
        assert_eq!(&v[..4], &[0x6b, 0xaa, 0xbc, 0xde]);
        assert_eq!(verify(&v, 40), Ok(true));
        Ipv6Packet::new_unchecked(&mut v[..]).set_version(4); // the version is not masked
        assert_eq!(verify(&v, 40), Err(WireError::BadHeaderLen));
    }

    /// IPv4 with options, IHL 5 to 15, against Annex A17.4 written out: the masks are IPv4's
    /// (TOS, TTL, header checksum) whatever the header's length; at IHL 10 the header is 40
    /// bytes, as long as IPv6's, and once took IPv6's masks. Options are covered as they are.
    #[test]
    fn ipv4_options_of_every_length_take_the_ipv4_masks() {
        for ihl in 5..=15usize {
            let opts = (ihl - 5) * 4;
            let mut v = C10[..20].to_vec();
            v[0] = 0x40 | ihl as u8;
            v.extend((0..opts).map(|i| if i + 1 == opts { 0 } else { 1 })); // NOPs, then EOL
            v.extend_from_slice(&C10[20..]);
            let l4 = ihl * 4;
            let mut masked = vec![0xffu8; 8];
            masked.extend_from_slice(&v[..v.len() - ICRC_LEN]);
            for i in [1, 8, 10, 11, l4 + 6, l4 + 7, l4 + 8 + 4] {
                masked[8 + i] = 0xff;
            }
            let want = crc32fast::hash(&masked);
            assert_eq!(compute(&v, l4), Ok(want), "IHL {ihl}");
            fill(&mut v, l4).unwrap();
            // TOS, TTL and the checksum are masked; an option byte and the addresses are not.
            let mut w = v.clone();
            (w[1], w[8], w[10], w[11]) = (0x03, 1, 0x12, 0x34);
            assert_eq!(verify(&w, l4), Ok(true), "IHL {ihl}");
            for i in [2usize, 3, 7, 12, 19].into_iter().chain((opts > 0).then_some(20 + opts / 2)) {
                let mut w = v.clone();
                w[i] ^= 0x01;
                assert_eq!(verify(&w, l4), Ok(false), "IHL {ihl}, byte {i}");
            }
        }
    }

    #[test]
    fn split_equals_whole() {
        let whole = compute(&C10, 20).unwrap();
        // Head through the BTH, tail = payload.
        let head = head_hasher(&C10[..40], 20).unwrap();
        let tail = tail_hasher(&C10[40..56]);
        assert_eq!(combine(head, &tail), whole);
        // Head running into the payload.
        let head = head_hasher(&C10[..44], 20).unwrap();
        assert_eq!(combine(head, &tail_hasher(&C10[44..56])), whole);
    }

    #[test]
    fn errors() {
        assert_eq!(compute(&C10[..43], 20), Err(WireError::Truncated));
        assert_eq!(compute(&C10, 16), Err(WireError::BadHeaderLen));
        assert_eq!(compute(&C10, usize::MAX), Err(WireError::BadHeaderLen));
        let mut b = C10.clone();
        b[0] = 0x55;
        assert_eq!(compute(&b, 20), Err(WireError::BadVersion));
        assert_eq!(head_hasher(&[], 0).err(), Some(WireError::Truncated));
        assert_eq!(stored(&[1, 2, 3]), None);
        assert_eq!(fill(&mut [0u8; 10], 20), Err(WireError::Truncated));
    }

    /// The head must run through the whole BTH (its byte 4 is masked): one byte short is
    /// truncated, not hashed.
    #[test]
    fn a_head_ending_inside_the_bth_is_truncated() {
        assert_eq!(head_hasher(&C10[..39], 20).err(), Some(WireError::Truncated));
        assert_eq!(head_hasher(&C10[..21], 20).err(), Some(WireError::Truncated));
        assert!(head_hasher(&C10[..40], 20).is_ok());
    }

    proptest! {
        /// fill then verify; splitting anywhere after the BTH gives the same CRC; never panics.
        #[test]
        fn fill_verify_split(payload in proptest::collection::vec(any::<u8>(), 0..300), cut in any::<usize>()) {
            let mut v = C10[..40].to_vec();
            v.extend_from_slice(&payload);
            v.extend_from_slice(&[0; 4]);
            fill(&mut v, 20).unwrap();
            prop_assert_eq!(verify(&v, 20), Ok(true));
            let end = v.len() - 4;
            let cut = 40 + cut % (end - 40 + 1);
            let c = combine(head_hasher(&v[..cut], 20).unwrap(), &tail_hasher(&v[cut..end]));
            prop_assert_eq!(Some(c), stored(&v));
        }

        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..120), l4 in 0usize..130) {
            let _ = compute(&bytes, l4);
        }
    }

    #[test]
    fn combine_factor_equals_combine_and_the_whole_crc() {
        let mut v: Vec<u8> = (0..300u32).map(|i| (i * 131 + 7) as u8).collect();
        v[0] = 0x45;
        for cut in [40usize, 60, 61] {
            for end in [cut, cut + 1, cut + 17, 300] {
                let tail = tail_hasher(&v[cut..end]);
                let want = combine(head_hasher(&v[..cut], 20).unwrap(), &tail);
                let f = shift_factor((end - cut) as u64);
                assert_eq!(combine_factor(head_hasher(&v[..cut], 20).unwrap(), f, tail.finalize()), want);
            }
        }
    }

    #[test]
    fn byte_tables_patch_a_crc() {
        let base: Vec<u8> = (0..97u32).map(|i| (i * 53 + 11) as u8).collect();
        let crc = |m: &[u8]| {
            let mut h = Hasher::new();
            h.update(m);
            h.finalize()
        };
        for i in [0usize, 1, 40, 95, 96] {
            let t = byte_table((base.len() - 1 - i) as u64);
            assert_eq!(t[0], 0);
            let f = shift_factor((base.len() - 1 - i) as u64);
            for b in 0..=255u8 {
                assert_eq!(t[b as usize], multiply(f, byte_register(b)), "entry {b:#x}");
            }
            for b in [1u8, 0x80, 0xa5, 0xff] {
                let mut m = base.clone();
                m[i] = b;
                assert_eq!(crc(&m), crc(&base) ^ t[base[i] as usize] ^ t[b as usize], "byte {i} = {b:#x}");
            }
        }
    }

    #[test]
    fn long_ipv6_extension_headers_take_the_piecewise_path() {
        // IPv6 + 64 bytes of extension headers: the masked part is longer than the stack buffer.
        let mut v: Vec<u8> = (0..200u32).map(|i| (i * 29 + 3) as u8).collect();
        v[0] = 0x60;
        let l4 = 104;
        let mut whole = crc32fast::Hasher::new();
        let mut m = v.clone();
        m[0] |= 0x0f;
        m[1..4].fill(0xff);
        m[7] = 0xff;
        m[l4 + 6] = 0xff;
        m[l4 + 7] = 0xff;
        m[l4 + 12] = 0xff;
        whole.update(&[0xff; 8]);
        whole.update(&m[..150]);
        assert_eq!(head_hasher(&v[..150], l4).unwrap().finalize(), whole.finalize());
    }
}
