//! Gradient-frame templates: the headers of one peer's frames of a collective (the appliance's
//! RESULT frames to a member, spec section 6; a generator's contributions from a worker),
//! built once, so that sending a frame copies them and patches the few fields that change from
//! frame to frame (tensor offset and round; on RoCEv2 also the UDP source port and the PSN)
//! instead of building every header and reading it back for the checksums. Everything else
//! (flags, rank, data length, addresses) is the spec's the templates were built from.
//!
//! A template covers the frames whose payload is a full chunk (every slot but, when the tensor
//! does not divide evenly, the last one); the others take the general builder
//! ([`build::build_with`]). The templates are made by that same builder, and the tests check
//! the two byte for byte.
//!
//! The checksums come from the template's, by arithmetic on the patched values:
//! - IPv4 header checksum: nothing in the IP header changes, so the template's stands;
//! - UDP checksum (UDP carriage; RoCEv2 to an IPv6 member, spec section 1): the template's sum
//!   (pseudo header and headers, with the patched fields zero) plus the patched fields' 16-bit
//!   words, the payload's sum and, on RoCEv2, the ICRC's words (RFC 1071);
//! - ICRC: the template's CRC advanced past a full payload, XOR one table entry per patched byte
//!   ([`icrc::byte_table`]: a CRC is affine in the message's bits), XOR the payload's CRC.

use super::build::{self, FrameSpec, PayloadSums};
use super::checksum;
use super::error::WireError;
use super::gradient::HEADER_LEN as GRAD_LEN;
use super::icrc::{self, ICRC_LEN};
use super::{bth, gradient, ipv4, ipv6, udp};

/// Longest head a template holds (bytes): Ethernet with an 802.1Q tag (18), IPv6 (40), UDP (8),
/// BTH (12), DETH (8) and the gradient header (20).
pub const MAX_HEAD: usize = 18 + 40 + udp::HEADER_LEN + bth::HEADER_LEN + bth::DETH_LEN + GRAD_LEN;

/// Longest tail a frame has (bytes): a RoCEv2 pad (at most 3) and the ICRC.
pub const MAX_TAIL: usize = 3 + ICRC_LEN;

/// Offsets in the UDP datagram of the fields a RoCEv2 result patches (bytes): the UDP source
/// port, the BTH PSN (24 bits after the BTH's byte 8) and, in the gradient header after the
/// DETH, the tensor offset and the round.
const ROCE_SPORT: usize = 0;
const ROCE_PSN: usize = udp::HEADER_LEN + bth::field::PSN.start + 1;
const ROCE_GRAD: usize = udp::HEADER_LEN + bth::HEADER_LEN + bth::DETH_LEN;
/// Offsets of the tensor offset and round in the gradient header (spec section 2).
const TENSOR_OFFSET: usize = gradient::field::TENSOR_OFFSET.start;
const ROUND: usize = gradient::field::ROUND.start;
/// The bytes a RoCEv2 result patches, as offsets in the UDP datagram, in the order of
/// [`Templates::tables`].
const ROCE_PATCHED: [usize; 13] = [
    ROCE_SPORT,
    ROCE_SPORT + 1,
    ROCE_PSN,
    ROCE_PSN + 1,
    ROCE_PSN + 2,
    ROCE_GRAD + TENSOR_OFFSET,
    ROCE_GRAD + TENSOR_OFFSET + 1,
    ROCE_GRAD + TENSOR_OFFSET + 2,
    ROCE_GRAD + TENSOR_OFFSET + 3,
    ROCE_GRAD + ROUND,
    ROCE_GRAD + ROUND + 1,
    ROCE_GRAD + ROUND + 2,
    ROCE_GRAD + ROUND + 3,
];

/// One member's template: its whole head, Ethernet through the gradient header.
#[derive(Debug, Clone)]
struct MemberTemplate {
    head: [u8; MAX_HEAD],
    head_len: usize,
    /// Offset of the UDP header in the frame (bytes).
    udp: usize,
    /// The whole frame's length (bytes).
    frame_len: usize,
    /// The ones'-complement sum of the pseudo header and the head's UDP datagram with the UDP
    /// checksum and the patched fields zero; `None` when the frame carries no UDP checksum
    /// (RoCEv2 over IPv4).
    udp_sum: Option<u16>,
    /// RoCEv2: the ICRC of the template's head followed by a full payload of zeros and the pad.
    icrc: u32,
}

/// The templates of one collective's frames to or from its members, one per member (by rank).
#[derive(Debug, Clone)]
pub struct Templates {
    members: Vec<MemberTemplate>,
    /// A full chunk's payload (bytes) and its RoCEv2 pad.
    payload_len: usize,
    pad: usize,
    roce: bool,
    /// True when some member's frames carry a UDP checksum (so the payload's sum is needed).
    needs_sum: bool,
    /// RoCEv2: per patched byte (in the order of `ROCE_PATCHED`), its effect on the ICRC by value.
    tables: Vec<[u32; 256]>,
}

/// The fields of one frame that its template leaves open.
#[derive(Debug, Clone, Copy)]
pub struct Patch {
    /// The chunk's first element (gradient header `tensor_offset`).
    pub tensor_offset: u32,
    /// The round (gradient header `round`).
    pub round: u32,
    /// RoCEv2: the UDP source port and the BTH PSN (24 bits).
    pub roce: Option<(u16, u32)>,
}

impl Templates {
    /// Builds the templates from `specs`, each member's full-chunk frame as the general
    /// builder makes it (any tensor offset, round, PSN and RoCEv2 source port: they are zeroed),
    /// for payloads of `payload_len` bytes.
    ///
    /// Errors: a spec the builder refuses ([`WireError`]), or a head longer than a template
    /// holds.
    pub fn new(specs: &[FrameSpec], payload_len: usize) -> Result<Templates, WireError> {
        let roce = specs.first().is_some_and(|s| s.roce.is_some());
        let pad = specs.first().map_or(0, |s| s.pad(payload_len));
        let zeros = vec![0u8; payload_len];
        let mut members = Vec::with_capacity(specs.len());
        for spec in specs {
            if spec.roce.is_some() != roce {
                return Err(WireError::BadLength);
            }
            let mut s = *spec;
            s.header.tensor_offset = 0;
            s.header.round = 0;
            if let Some(r) = s.roce.as_mut() {
                r.psn = 0;
                s.src_port = 0;
            }
            let frame_len = s.frame_len(payload_len);
            let mut f = vec![0u8; frame_len];
            build::build(&s, &zeros, &mut f)?;
            let head_len = frame_len - payload_len - pad - if roce { ICRC_LEN } else { 0 };
            if head_len > MAX_HEAD {
                return Err(WireError::BadLength);
            }
            let udp = head_len - GRAD_LEN - if roce { bth::HEADER_LEN + bth::DETH_LEN } else { 0 } - udp::HEADER_LEN;
            // The IP header, before the UDP one (after however many VLAN tags the spec has).
            let l3 = udp - if s.src_ip.is_v6() { ipv6::HEADER_LEN } else { ipv4::MIN_HEADER_LEN };
            let udp_len = frame_len - udp;
            f[udp + udp::field::CHECKSUM.start..udp + udp::field::CHECKSUM.end].fill(0);
            let udp_sum = (!roce || s.src_ip.is_v6()).then(|| {
                let pseudo = match (s.src_ip, s.dst_ip) {
                    (build::IpAddrBytes::V4(a), build::IpAddrBytes::V4(b)) => {
                        checksum::pseudo_header_v4(a, b, udp::PROTOCOL, udp_len as u16)
                    }
                    (build::IpAddrBytes::V6(a), build::IpAddrBytes::V6(b)) => {
                        checksum::pseudo_header_v6(&a, &b, udp::PROTOCOL, udp_len as u32)
                    }
                    _ => 0, // refused by the builder above
                };
                checksum::combine(pseudo, checksum::sum(&f[udp..head_len]))
            });
            let icrc = if roce {
                let h = icrc::head_hasher(&f[l3..head_len], udp - l3)?;
                icrc::combine_factor(h, icrc::shift_factor((payload_len + pad) as u64), 0)
            } else {
                0
            };
            let mut head = [0u8; MAX_HEAD];
            head[..head_len].copy_from_slice(&f[..head_len]);
            members.push(MemberTemplate { head, head_len, udp, frame_len, udp_sum, icrc });
        }
        // A patched byte at offset `k` of the UDP datagram lies `udp_len - ICRC_LEN - 1 - k`
        // bytes before the end of what the ICRC covers, whatever the member's L2 and IP headers.
        let tables = if roce {
            let udp_len = udp::HEADER_LEN + bth::HEADER_LEN + bth::DETH_LEN + GRAD_LEN + payload_len + pad + ICRC_LEN;
            ROCE_PATCHED.iter().map(|k| icrc::byte_table((udp_len - ICRC_LEN - 1 - k) as u64)).collect()
        } else {
            Vec::new()
        };
        let needs_sum = members.iter().any(|m| m.udp_sum.is_some());
        Ok(Templates { members, payload_len, pad, roce, needs_sum, tables })
    }

    /// True when a payload of `len` bytes, with `sums` computed for it, can be sent from the
    /// templates (a full chunk with the sums the frames need).
    #[inline]
    pub fn fits(&self, len: usize, sums: &PayloadSums) -> bool {
        len == self.payload_len
            && sums.pad == self.pad
            && (!self.roce || sums.crc.is_some())
            && (sums.sum.is_some() || !self.needs_sum)
    }

    /// The length of member `rank`'s frames (bytes).
    #[inline]
    pub fn frame_len(&self, rank: usize) -> usize {
        self.members[rank].frame_len
    }

    /// The length of member `rank`'s head (bytes): Ethernet through the gradient header, where
    /// the payload starts.
    #[inline]
    pub fn head_len(&self, rank: usize) -> usize {
        self.members[rank].head_len
    }

    /// The length of what follows the payload (bytes): on RoCEv2 the pad and the ICRC, else 0.
    #[inline]
    pub fn tail_len(&self) -> usize {
        if self.roce {
            self.pad + ICRC_LEN
        } else {
            0
        }
    }

    /// The length of the payload the templates carry (bytes): a full chunk.
    #[inline]
    pub fn payload_len(&self) -> usize {
        self.payload_len
    }

    /// Writes member `rank`'s frame carrying `payload` (a full chunk: [`Templates::fits`])
    /// with the fields of `patch` into `f` (exactly [`Templates::frame_len`] bytes).
    #[inline(always)]
    pub fn write(&self, rank: usize, patch: &Patch, payload: &[u8], sums: &PayloadSums, f: &mut [u8]) {
        let (head, rest) = f.split_at_mut(self.members[rank].head_len);
        let (pay, tail) = rest.split_at_mut(self.payload_len);
        pay.copy_from_slice(payload);
        self.write_around(rank, patch, sums, head, tail);
    }

    /// Writes what surrounds the payload of member `rank`'s frame with the fields of
    /// `patch`, for a payload whose sums are `sums` (a full chunk: [`Templates::fits`]): the
    /// head into `head` (exactly [`Templates::head_len`] bytes) and the pad and ICRC into `tail`
    /// (exactly [`Templates::tail_len`] bytes). The payload's bytes are not read: the
    /// checksums come from `sums`, so the payload may lie in another buffer (a zero-copy result).
    #[inline(always)]
    pub fn write_around(&self, rank: usize, patch: &Patch, sums: &PayloadSums, head: &mut [u8], tail: &mut [u8]) {
        let t = &self.members[rank];
        head.copy_from_slice(&t.head[..t.head_len]);
        let grad = t.head_len - GRAD_LEN;
        head[grad + TENSOR_OFFSET..grad + TENSOR_OFFSET + 4].copy_from_slice(&patch.tensor_offset.to_be_bytes());
        head[grad + ROUND..grad + ROUND + 4].copy_from_slice(&patch.round.to_be_bytes());
        tail[..self.pad].fill(0);
        // The patched fields' 16-bit words (every field starts at an even offset of the UDP
        // datagram but the PSN, whose first byte is the low byte of a word).
        let (o, r) = (patch.tensor_offset, patch.round);
        let mut words = (o >> 16) + (o & 0xffff) + (r >> 16) + (r & 0xffff);
        if let Some((sport, psn)) = patch.roce {
            let u = t.udp;
            head[u + ROCE_SPORT..u + ROCE_SPORT + 2].copy_from_slice(&sport.to_be_bytes());
            head[u + ROCE_PSN..u + ROCE_PSN + 3].copy_from_slice(&psn.to_be_bytes()[1..]);
            let [_, p0, p1, p2] = psn.to_be_bytes();
            let [s0, s1] = sport.to_be_bytes();
            let [o0, o1, o2, o3] = o.to_be_bytes();
            let [r0, r1, r2, r3] = r.to_be_bytes();
            // The patched bytes in the order of `ROCE_PATCHED`, one table each.
            let patched = [s0, s1, p0, p1, p2, o0, o1, o2, o3, r0, r1, r2, r3];
            let crc = self
                .tables
                .iter()
                .zip(patched)
                .fold(t.icrc ^ sums.crc.unwrap_or(0), |crc, (table, b)| crc ^ table[b as usize]);
            let c = crc.to_le_bytes();
            tail[self.pad..self.pad + ICRC_LEN].copy_from_slice(&c);
            words += sport as u32 + p0 as u32 + ((p1 as u32) << 8 | p2 as u32);
            words += u16::from_be_bytes([c[0], c[1]]) as u32 + u16::from_be_bytes([c[2], c[3]]) as u32;
        }
        if let Some(base) = t.udp_sum {
            let s = base as u32 + sums.sum.unwrap_or(0) as u32 + words;
            let s = (s & 0xffff) + (s >> 16);
            let s = ((s & 0xffff) + (s >> 16)) as u16;
            let ck = match !s {
                0 => 0xffff,
                ck => ck,
            };
            head[t.udp + udp::field::CHECKSUM.start..t.udp + udp::field::CHECKSUM.end]
                .copy_from_slice(&ck.to_be_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::build::{IpAddrBytes, Roce};
    use crate::wire::gradient::{Flags, GradientRepr, RANK_NONE};
    use crate::wire::EthernetAddress;
    use proptest::prelude::*;

    fn spec(v6: bool, roce: bool, vlan: Option<u16>, member: u8) -> FrameSpec {
        let (src_ip, dst_ip) = if v6 {
            let mut s = [0u8; 16];
            s[0] = 0xfd;
            s[15] = 100;
            let mut d = s;
            d[15] = member;
            (IpAddrBytes::V6(s), IpAddrBytes::V6(d))
        } else {
            (IpAddrBytes::V4([10, 77, 0, 100]), IpAddrBytes::V4([10, 77, 0, member]))
        };
        FrameSpec {
            src_mac: EthernetAddress([2, 0, 0, 0, 0, 0x64]),
            dst_mac: EthernetAddress([2, 0, 0, 0, 0, member]),
            vlan,
            vlan_tpid: crate::wire::vlan::TPID_8021Q,
            outer_tag: None,
            src_ip,
            dst_ip,
            dscp: 26,
            ecn: 2,
            ttl: 64,
            src_port: 49374,
            dst_port: 40000 + member as u16,
            roce: roce.then_some(Roce {
                dest_qp: 0x100 + member as u32,
                psn: 0,
                pkey: 0xffff,
                qkey: 0x1111_0000 + member as u32,
                src_qp: 0x42,
            }),
            header: GradientRepr {
                version: 1,
                flags: Flags::RESULT,
                op_type: 1,
                collective_id: 7,
                dtype: 1,
                reason: 0,
                worker_rank: RANK_NONE,
                tensor_offset: 0,
                data_length: 0,
                round: 0,
            },
        }
    }

    /// The frame the general builder makes for `spec` with `patch` and `payload`.
    fn built(spec: &FrameSpec, patch: &Patch, payload: &[u8]) -> Vec<u8> {
        let mut s = *spec;
        s.header.tensor_offset = patch.tensor_offset;
        s.header.round = patch.round;
        s.header.data_length = payload.len() as u32;
        if let (Some(r), Some((sport, psn))) = (s.roce.as_mut(), patch.roce) {
            r.psn = psn;
            s.src_port = sport;
        }
        let mut f = vec![0u8; s.frame_len(payload.len())];
        build::build(&s, payload, &mut f).unwrap();
        f
    }

    /// Members `1..=n`'s specs for results of `len` payload bytes.
    fn specs(v6: bool, roce: bool, vlan: Option<u16>, n: u8, len: usize) -> Vec<FrameSpec> {
        (1..=n)
            .map(|m| {
                let mut s = spec(v6, roce, vlan, m);
                s.header.data_length = len as u32;
                s
            })
            .collect()
    }

    fn check(v6: bool, roce: bool, vlan: Option<u16>, payload: &[u8], patch: Patch) {
        let specs = specs(v6, roce, vlan, 3, payload.len());
        let t = Templates::new(&specs, payload.len()).unwrap();
        let pad = specs[0].pad(payload.len());
        let sums = PayloadSums::of(payload, pad);
        assert!(t.fits(payload.len(), &sums));
        assert!(!t.fits(payload.len() + 4, &sums));
        for (rank, s) in specs.iter().enumerate() {
            let mut f = vec![0xeeu8; t.frame_len(rank)];
            t.write(rank, &patch, payload, &sums, &mut f);
            assert_eq!(f, built(s, &patch, payload), "v6 {v6} roce {roce} vlan {vlan:?} rank {rank}");
        }
    }

    #[test]
    fn every_carriage_family_and_tag_equals_the_builder() {
        let payload: Vec<u8> = (0..1024u32).map(|i| (i * 7 + 3) as u8).collect();
        for v6 in [false, true] {
            for roce in [false, true] {
                for vlan in [None, Some(42)] {
                    let roce_fields = roce.then_some((0xc000 | 5, 0x00ab_cdef));
                    check(v6, roce, vlan, &payload, Patch { tensor_offset: 5 * 256, round: 9, roce: roce_fields });
                    check(
                        v6,
                        roce,
                        vlan,
                        &payload[..2],
                        Patch { tensor_offset: u32::MAX, round: 0, roce: roce_fields },
                    );
                }
            }
        }
    }

    #[test]
    fn double_tagged_members_equal_the_builder() {
        // An 802.1ad tag before the 802.1Q one (spec section 1) moves the IP header 4 bytes
        // further: the ICRC must still start at the IP header (Annex A17).
        let payload: Vec<u8> = (0..64u32).map(|i| (i * 13 + 1) as u8).collect();
        for v6 in [false, true] {
            for roce in [false, true] {
                let mut specs = specs(v6, roce, Some(42), 2, payload.len());
                specs.iter_mut().for_each(|s| s.outer_tag = Some((0x88a8, 0x2007)));
                let t = match Templates::new(&specs, payload.len()) {
                    Ok(t) => t,
                    // Too long for a template (IPv6 and RoCEv2): such members take the builder.
                    Err(WireError::BadLength) if v6 && roce => continue,
                    Err(e) => panic!("v6 {v6} roce {roce}: {e}"),
                };
                let sums = PayloadSums::of(&payload, specs[0].pad(payload.len()));
                let patch = Patch { tensor_offset: 64, round: 3, roce: roce.then_some((0xc001, 0x12_3456)) };
                for (rank, s) in specs.iter().enumerate() {
                    let mut f = vec![0u8; t.frame_len(rank)];
                    t.write(rank, &patch, &payload, &sums, &mut f);
                    assert_eq!(f, built(s, &patch, &payload), "v6 {v6} roce {roce} rank {rank}");
                }
            }
        }
    }

    #[test]
    fn fits_exactly_the_sums_the_frames_need() {
        // Spec section 1: every frame of the UDP carriage and RoCEv2 frames over IPv6 carry a
        // UDP checksum (they need the payload's sum); RoCEv2 frames carry an ICRC (they need its
        // CRC); RoCEv2 over IPv4 writes the UDP checksum 0. The aggregator computes only what its
        // frames need, and a template must take exactly those sums (and a full chunk's pad).
        let payload: Vec<u8> = (0..24u8).map(|i| i.wrapping_mul(41) ^ 0x66).collect();
        for v6 in [false, true] {
            for roce in [false, true] {
                let specs = specs(v6, roce, None, 2, payload.len());
                let t = Templates::new(&specs, payload.len()).unwrap();
                let pad = specs[0].pad(payload.len());
                for (sum, crc) in [(true, true), (true, false), (false, true), (false, false)] {
                    let sums = PayloadSums::only(&payload, pad, sum, crc);
                    let need_sum = !roce || v6;
                    let want = (sum || !need_sum) && (crc || !roce);
                    assert_eq!(t.fits(payload.len(), &sums), want, "v6 {v6} roce {roce} sum {sum} crc {crc}");
                    if want {
                        let patch = Patch { tensor_offset: 24, round: 2, roce: roce.then_some((0xc003, 77)) };
                        for (rank, s) in specs.iter().enumerate() {
                            let mut f = vec![0u8; t.frame_len(rank)];
                            t.write(rank, &patch, &payload, &sums, &mut f);
                            assert_eq!(f, built(s, &patch, &payload), "v6 {v6} roce {roce} sum {sum} crc {crc}");
                        }
                    }
                }
                if roce {
                    // Sums whose CRC covers another pad do not fit.
                    let sums = PayloadSums::of(&payload, pad + 1);
                    assert!(!t.fits(payload.len(), &sums), "v6 {v6}");
                }
            }
        }
    }

    #[test]
    fn every_low_round_word_folds_its_carries() {
        // RFC 1071: the ones'-complement sum adds every carry out of bit 15 back in, however many
        // folds that takes. Large patched words (tensor offset 0xFFFFFFFF, round 0xFFFF....) make
        // the 32-bit total carry; sweeping the round's low word over every value brings the sum
        // to each residue, including the ones whose first fold carries again.
        let payload = [0xffu8, 0xfe, 0xfd, 0xfc];
        for v6 in [false, true] {
            let mut s = spec(v6, false, None, 1);
            s.header.data_length = 4;
            let t = Templates::new(&[s], 4).unwrap();
            let sums = PayloadSums::of(&payload, 0);
            let mut f = vec![0u8; t.frame_len(0)];
            for low in 0..0x1_0000u32 {
                let patch = Patch { tensor_offset: u32::MAX, round: 0xffff_0000 | low, roce: None };
                t.write(0, &patch, &payload, &sums, &mut f);
                assert_eq!(f, built(&s, &patch, &payload), "v6 {v6} round {:#x}", patch.round);
            }
        }
    }

    #[test]
    fn a_udp_checksum_that_computes_to_zero_is_written_ffff() {
        // Search a round that makes the UDP carriage's checksum compute to 0.
        let payload = [0x12u8, 0x34, 0x56, 0x78];
        let mut s = spec(false, false, None, 1);
        s.header.data_length = 4;
        let t = Templates::new(&[s], 4).unwrap();
        let sums = PayloadSums::of(&payload, 0);
        let mut found = false;
        for round in 0..0x1_0000u32 {
            let patch = Patch { tensor_offset: 0, round, roce: None };
            let mut f = vec![0u8; t.frame_len(0)];
            t.write(0, &patch, &payload, &sums, &mut f);
            let ck = u16::from_be_bytes([f[40], f[41]]);
            assert_ne!(ck, 0);
            if ck == 0xffff {
                assert_eq!(f, built(&s, &patch, &payload));
                found = true;
                break;
            }
        }
        assert!(found);
    }

    proptest! {
        #[test]
        fn patched_frames_equal_the_builder(
            v6 in any::<bool>(), roce in any::<bool>(), vlan in proptest::option::of(0u16..4096),
            lanes in 1usize..64, seed in any::<u8>(),
            tensor_offset in any::<u32>(), round in any::<u32>(), sport in any::<u16>(), psn in 0u32..1 << 24,
        ) {
            let payload: Vec<u8> = (0..lanes * 4).map(|i| (i as u8).wrapping_mul(seed) ^ 0x5a).collect();
            check(v6, roce, vlan, &payload, Patch { tensor_offset, round, roce: roce.then_some((sport, psn)) });
        }
    }
}
