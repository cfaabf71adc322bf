//! Streams of plain UDP and RoCEv2 frames for live generation: the frames of a stream's flows
//! and sizes, built once as templates, and stamped per packet with a sequence number and a
//! TSC timestamp (DPDK-free: the live generator copies them into mbufs, the tests into buffers).
//!
//! # Frame layout
//!
//! Ethernet (optionally one 802.1Q tag) / IPv4 or IPv6 / UDP / [BTH + DETH] / stamp / filler /
//! [ICRC] / [trailer]. Lengths are frame lengths without the FCS (what an mbuf holds).
//!
//! - UDP streams: the UDP payload is the stamp and a filler up to the frame length; the UDP
//!   checksum is always right (RFC 768; 0 is written 0xFFFF).
//! - RoCEv2 streams (UDP port 4791, IBTA Annex A17): BTH opcode UD SEND Only (0x64), PSN the
//!   low 24 bits of the sequence number, pad count 0, DETH (Q_Key, source QP), then the stamp
//!   and a filler of a multiple of 4 bytes, and the ICRC. A frame length that leaves 1 to 3 bytes
//!   over becomes an Ethernet trailer of zeros after the IP datagram. The UDP checksum is 0 over
//!   IPv4 (as RoCEv2 NICs send it) and right over IPv6.
//!
//! # The stamp (16 bytes, network byte order, at the start of the UDP payload, after the DETH
//! for RoCEv2)
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 1 | magic `0xA5` |
//! | 1 | 1 | lane: the index of the tx lcore that sent it (each lane numbers its own packets) |
//! | 2 | 2 | stream id: the index of the `[[stream]]` in the config |
//! | 4 | 4 | sequence number of the packet in its (stream, lane), from 0, modulo 2^32 |
//! | 8 | 8 | the sender's TSC (cycles) when the burst was built |
//!
//! The filler's byte `j` is `j * 7 + 1` (mod 256): not zeros, so that a wrong checksum shows.
//!
//! # Per packet
//!
//! A template holds a frame's first bytes (headers and stamp, sequence number, TSC and PSN 0) with
//! its UDP checksum and ICRC. [`SizeTemplates::stamp`] writes the three fields and updates the
//! UDP checksum (RFC 1624 equation 3) and the ICRC (the CRC is affine in the message: each
//! changed byte XORs in one entry of [`icrc::byte_table`] of its distance to the end) without
//! reading the rest of the frame: a few dozen instructions whatever the frame's size.

use crate::Endpoints;
use dataplane::wire::bth::{BthRepr, DethHeader};
use dataplane::wire::build::{IpAddrBytes, UdpIpHeader, ROCEV2_PORT, UD_SEND_ONLY};
use dataplane::wire::udp::{UdpPacket, UdpRepr};
use dataplane::wire::{bth, checksum, icrc, udp, EthernetFrame};

/// Bytes of the stamp.
pub const STAMP_LEN: usize = 16;
/// The stamp's first byte.
pub const STAMP_MAGIC: u8 = 0xA5;
/// The smallest frame length accepted (bytes without FCS: Ethernet's minimum, 64 with FCS).
pub const MIN_FRAME: usize = 60;
/// The largest frame length accepted (bytes without FCS: 9 KiB jumbo frames).
pub const MAX_FRAME: usize = 9216;
/// L1 overhead per frame in bytes: FCS 4, preamble and SFD 8, inter-frame gap 12.
pub const L1_OVERHEAD: u64 = 24;

/// The carriage of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Plain UDP.
    Udp,
    /// RoCEv2 UD SEND Only (BTH + DETH over UDP port 4791).
    Rocev2,
    /// The frames of a pcap file, as captured (no stamp; `pktgen run` only: see
    /// [`crate::live::replay`]).
    Pcap,
}

/// The RoCEv2 fields of a stream's frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoceFields {
    /// BTH destination QP (24 bits).
    pub dest_qp: u32,
    /// DETH source QP of flow 0 (24 bits); flow `f` uses this plus `f`.
    pub src_qp: u32,
    /// DETH Q_Key.
    pub qkey: u32,
    /// BTH P_Key.
    pub pkey: u16,
}

/// What every frame of a stream shares; flow `f` (0-based, below `flows`) adds `f` to the source
/// IP address (IPv4: as a 32-bit number; IPv6: to its last 32 bits), the UDP source port and
/// the DETH source QP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSpec {
    /// The stream id written into every stamp.
    pub id: u16,
    /// UDP or RoCEv2.
    pub kind: Kind,
    /// The addresses (the IP source is flow 0's) and the 802.1Q tag.
    pub ends: Endpoints,
    /// UDP source port of flow 0.
    pub src_port: u16,
    /// UDP destination port (RoCEv2: 4791).
    pub dst_port: u16,
    /// DSCP (6 bits).
    pub dscp: u8,
    /// ECN (2 bits).
    pub ecn: u8,
    /// TTL or hop limit.
    pub ttl: u8,
    /// Flows (at least 1).
    pub flows: u32,
    /// The RoCEv2 fields (RoCEv2 streams).
    pub roce: RoceFields,
}

impl StreamSpec {
    fn l2_len(&self) -> usize {
        14 + if self.ends.vlan.is_some() { 4 } else { 0 }
    }

    fn l3_len(&self) -> usize {
        if self.ends.src_ip.is_v6() {
            40
        } else {
            20
        }
    }

    /// Where the stamp starts in every frame (bytes from the frame's start).
    pub fn stamp_offset(&self) -> usize {
        self.l2_len()
            + self.l3_len()
            + udp::HEADER_LEN
            + if self.kind == Kind::Rocev2 { bth::HEADER_LEN + bth::DETH_LEN } else { 0 }
    }

    /// The smallest frame length (bytes without FCS) the stream's headers, stamp and ICRC fit in,
    /// and at least [`MIN_FRAME`].
    pub fn min_frame_len(&self) -> usize {
        let icrc = if self.kind == Kind::Rocev2 { icrc::ICRC_LEN } else { 0 };
        (self.stamp_offset() + STAMP_LEN + icrc).max(MIN_FRAME)
    }

    /// Flow `f`'s source IP address.
    pub fn flow_src_ip(&self, f: u32) -> IpAddrBytes {
        match self.ends.src_ip {
            IpAddrBytes::V4(a) => IpAddrBytes::V4(u32::from_be_bytes(a).wrapping_add(f).to_be_bytes()),
            IpAddrBytes::V6(mut a) => {
                let low = u32::from_be_bytes([a[12], a[13], a[14], a[15]]).wrapping_add(f);
                a[12..16].copy_from_slice(&low.to_be_bytes());
                IpAddrBytes::V6(a)
            }
        }
    }
}

/// The stamp of a received frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// The sending lane.
    pub lane: u8,
    /// The stream id.
    pub stream: u16,
    /// The sequence number (modulo 2^32).
    pub seq: u32,
    /// The sender's TSC.
    pub tsc: u64,
    /// The IP header's ECN field says CE (congestion experienced: a queue on the way marked it).
    pub ce: bool,
}

/// Finds the stamp of a frame built by [`SizeTemplates`]: Ethernet with up to two VLAN tags,
/// IPv4 (any IHL) or IPv6 without extension headers, UDP, BTH + DETH when the destination port
/// is 4791, then the stamp with its magic byte. `None` for any other frame (too short, another
/// protocol, no magic). Reads only the headers: a few bytes, no checksum.
#[inline]
pub fn find_stamp(f: &[u8]) -> Option<Stamp> {
    let (l4, dport, ecn) = udp_of(f)?;
    let s = l4 + udp::HEADER_LEN + if dport == ROCEV2_PORT { bth::HEADER_LEN + bth::DETH_LEN } else { 0 };
    let b: &[u8; STAMP_LEN] = f.get(s..s + STAMP_LEN)?.try_into().ok()?;
    if b[0] != STAMP_MAGIC {
        return None;
    }
    Some(Stamp {
        lane: b[1],
        stream: u16::from_be_bytes([b[2], b[3]]),
        seq: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
        tsc: u64::from_be_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]]),
        ce: ecn == 3,
    })
}

/// Of a frame carrying UDP (Ethernet with up to two VLAN tags, IPv4 of any IHL or IPv6
/// without extension headers): where the UDP header starts, its destination port and the IP
/// ECN field. Reads a few header bytes, no checksum.
#[inline]
fn udp_of(f: &[u8]) -> Option<(usize, u16, u8)> {
    let mut at = 12;
    let mut et = u16::from_be_bytes([*f.get(at)?, *f.get(at + 1)?]);
    let mut tags = 0;
    while (et == 0x8100 || et == 0x88a8) && tags < 2 {
        at += 4;
        et = u16::from_be_bytes([*f.get(at)?, *f.get(at + 1)?]);
        tags += 1;
    }
    let l3 = at + 2;
    let (l4, ecn) = match et {
        0x0800 => {
            let b = f.get(l3..l3 + 20)?;
            if b[9] != 17 {
                return None;
            }
            (l3 + (b[0] & 0x0f) as usize * 4, b[1] & 3)
        }
        0x86dd => {
            if *f.get(l3 + 6)? != 17 {
                return None;
            }
            // Traffic class: the low 4 bits of byte 0 and the high 4 of byte 1; ECN its low 2.
            (l3 + 40, (*f.get(l3 + 1)? >> 4) & 3)
        }
        _ => return None,
    };
    let dport = u16::from_be_bytes([*f.get(l4 + 2)?, *f.get(l4 + 3)?]);
    Some((l4, dport, ecn))
}

/// The BTH destination QP of a RoCEv2 CNP (Congestion Notification Packet: BTH opcode 0x81,
/// IBTA Annex A17.9.3), the QP whose traffic met congestion; `None` for any other frame.
#[inline]
pub fn find_cnp(f: &[u8]) -> Option<u32> {
    let (l4, dport, _) = udp_of(f)?;
    let b = f.get(l4 + udp::HEADER_LEN..l4 + udp::HEADER_LEN + bth::HEADER_LEN)?;
    if dport != ROCEV2_PORT || b[0] != bth::Opcode::CNP {
        return None;
    }
    Some(u32::from_be_bytes([0, b[5], b[6], b[7]]))
}

/// The filler's byte `j`.
#[inline]
fn filler_byte(j: usize) -> u8 {
    (j as u8).wrapping_mul(7).wrapping_add(1)
}

/// The ones'-complement sum (not folded) of a big-endian value's 16-bit words.
#[inline(always)]
fn words64(v: u64) -> u64 {
    (v >> 48) + ((v >> 32) & 0xffff) + ((v >> 16) & 0xffff) + (v & 0xffff)
}

/// Folds a ones'-complement sum to 16 bits, without a loop (four folds take any u64 there).
#[inline(always)]
fn fold(s: u64) -> u16 {
    let s = (s & 0xffff_ffff) + (s >> 32);
    let s = (s & 0xffff) + (s >> 16);
    let s = (s & 0xffff) + (s >> 16);
    ((s & 0xffff) + (s >> 16)) as u16
}

/// Every flow's template of one frame length of a stream, for one lane: the frames' first
/// bytes and what stamping needs.
#[derive(Clone)]
pub struct SizeTemplates {
    /// Frame length (bytes without FCS).
    pub len: usize,
    /// Bytes of each template: the frame's first [`HEAD_LEN`] bytes (all of a shorter frame):
    /// headers, stamp, and the start of the filler.
    head: usize,
    /// `flows` templates of `head` bytes each.
    heads: Vec<u8>,
    /// Per flow: the UDP checksum and the ICRC of the frame with sequence number, TSC and PSN 0.
    sums: Vec<(u16, u32)>,
    /// The rest of the filler after the head, up to the ICRC or the end of the frame.
    filler: Vec<u8>,
    /// Zero bytes after the IP datagram (RoCEv2 lengths that are not a multiple of 4 away).
    trailer: usize,
    stamp: usize,
    /// Where the UDP checksum is, when the frames carry one.
    udp_ck: Option<usize>,
    /// Where the ICRC is (RoCEv2).
    icrc_at: Option<usize>,
    /// ICRC tables of the PSN's 3 bytes, then the sequence number's 4 and the TSC's 8.
    tables: Vec<[u32; 256]>,
    psn_at: usize,
}

impl std::fmt::Debug for SizeTemplates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SizeTemplates({} B x {} flows)", self.len, self.sums.len())
    }
}

impl SizeTemplates {
    /// Builds the templates of `spec`'s flows at frame length `len` for lane `lane`.
    ///
    /// # Errors
    /// `len` below [`StreamSpec::min_frame_len`] or above [`MAX_FRAME`].
    pub fn new(spec: &StreamSpec, len: usize, lane: u8) -> Result<SizeTemplates, String> {
        let min = spec.min_frame_len();
        if len < min || len > MAX_FRAME {
            return Err(format!("a frame length from {min} to {MAX_FRAME} bytes (without FCS), found {len}"));
        }
        let roce = spec.kind == Kind::Rocev2;
        let l3 = spec.l2_len();
        let l4 = l3 + spec.l3_len();
        let stamp = spec.stamp_offset();
        let avail = len - l4; // the IP payload if no trailer
        let (ip_payload, trailer) = if roce {
            // UDP 8 + BTH 12 + DETH 8 + stamp 16 + filler + ICRC 4: the filler a multiple of 4.
            let fixed = udp::HEADER_LEN + bth::HEADER_LEN + bth::DETH_LEN + STAMP_LEN + icrc::ICRC_LEN;
            let filler = (avail - fixed) / 4 * 4;
            (fixed + filler, avail - fixed - filler)
        } else {
            (avail, 0)
        };
        let end = l4 + ip_payload; // end of the IP datagram
        let icrc_at = roce.then_some(end - icrc::ICRC_LEN);
        let filler_end = icrc_at.unwrap_or(end);
        let filler: Vec<u8> = (0..filler_end - stamp - STAMP_LEN).map(filler_byte).collect();
        let prefix = stamp + STAMP_LEN;
        let head = len.min(HEAD_LEN.max(prefix));
        let mut heads = Vec::with_capacity(head * spec.flows as usize);
        let mut sums = Vec::with_capacity(spec.flows as usize);
        let mut f = vec![0u8; len];
        for flow in 0..spec.flows {
            f.fill(0);
            build_headers(spec, flow, lane, ip_payload, &mut f, l3, l4);
            f[prefix..filler_end].copy_from_slice(&filler);
            if let Some(at) = icrc_at {
                icrc::fill(&mut f[l3..at + icrc::ICRC_LEN], l4 - l3).map_err(|e| format!("ICRC: {e:?}"))?;
            }
            let ck = fill_udp_checksum(spec, &mut f[l3..end], l4 - l3);
            let crc = icrc_at.map_or(0, |at| u32::from_le_bytes([f[at], f[at + 1], f[at + 2], f[at + 3]]));
            heads.extend_from_slice(&f[..head]);
            sums.push((ck, crc));
        }
        let udp_ck = (!roce || spec.ends.src_ip.is_v6()).then_some(l4 + 6);
        let psn_at = l4 + udp::HEADER_LEN + 9;
        let tables = match icrc_at {
            Some(at) => {
                let last = at as u64 - 1; // the last byte the ICRC covers
                let pos = (psn_at..psn_at + 3).chain(stamp + 4..stamp + 16);
                pos.map(|p| icrc::byte_table(last - p as u64)).collect()
            }
            None => Vec::new(),
        };
        // What the head leaves of the filler (nothing for frames of at most HEAD_LEN bytes).
        let rest = filler_end.saturating_sub(head);
        let filler = filler[filler.len() - rest..].to_vec();
        Ok(SizeTemplates { len, head, heads, sums, filler, trailer, stamp, udp_ck, icrc_at, tables, psn_at })
    }

    /// Flows.
    pub fn flows(&self) -> u32 {
        self.sums.len() as u32
    }

    /// Writes flow `flow`'s frame (`self.len` bytes) into `out` with sequence number `seq` and
    /// TSC `tsc`: the template, the filler, the fields, the UDP checksum and the ICRC. (The
    /// same as `self.stamper(tsc).stamp(out, flow, seq)`.)
    ///
    /// # Panics
    /// If `out` is shorter than `self.len` bytes or `flow` is not below [`Self::flows`].
    #[inline]
    pub fn stamp(&self, out: &mut [u8], flow: u32, seq: u32, tsc: u64) {
        self.stamper(tsc).stamp(out, flow, seq);
    }

    /// What stamping a burst of frames with TSC `tsc` needs, in a few words the compiler keeps
    /// in registers across the burst's loop (the template's fields would be reloaded per
    /// packet after every store into a frame), with the TSC's share of the UDP checksum summed
    /// once.
    #[inline(always)]
    pub fn stamper(&self, tsc: u64) -> Stamper<'_> {
        Stamper {
            t: self,
            heads: &self.heads,
            sums: &self.sums,
            h: self.head,
            len: self.len,
            s: self.stamp,
            udp_at: self.udp_ck.unwrap_or(0),
            roce: self.icrc_at.is_some(),
            tsc,
            tsc_words: words64(tsc) as u32,
        }
    }

    /// The whole stamp: the template, the filler, the fields, the UDP checksum and the ICRC.
    ///
    /// One length check, then unchecked moves: the head in one or two overlapping fixed-size
    /// copies, the fields as whole words, the ICRC from the values written (not read back).
    #[inline]
    fn stamp_full(&self, out: &mut [u8], flow: u32, seq: u32, tsc: u64) {
        let flow = flow as usize;
        let h = self.head;
        assert!(out.len() >= self.len && flow < self.sums.len());
        let dst = out.as_mut_ptr();
        // SAFETY: `out` holds at least `self.len` bytes; every write below lies in
        // [0, self.len): the head (h <= len, at least 60 bytes: the two copies of 32 or 64
        // bytes end at 64 or 32 and at h), the filler and trailer (h + filler + ICRC + trailer =
        // len, as built), the stamp's fields, the PSN, the ICRC and the UDP checksum (all
        // inside the headers built for len). `heads` holds `flows` templates of `h` bytes.
        unsafe {
            copy_head(dst, self.heads.as_ptr().add(flow * h), h);
            if self.len > h {
                std::ptr::copy_nonoverlapping(self.filler.as_ptr(), dst.add(h), self.filler.len());
                if self.trailer != 0 {
                    std::ptr::write_bytes(dst.add(self.len - self.trailer), 0, self.trailer);
                }
            }
            let s = self.stamp;
            dst.add(s + 4).cast::<[u8; 4]>().write_unaligned(seq.to_be_bytes());
            dst.add(s + 8).cast::<[u8; 8]>().write_unaligned(tsc.to_be_bytes());
            let (ck0, crc0) = *self.sums.get_unchecked(flow);
            let mut crc_new = crc0;
            if let Some(at) = self.icrc_at {
                let psn = (seq & 0x00ff_ffff).to_be_bytes();
                let p = self.psn_at;
                *dst.add(p) = psn[1];
                *dst.add(p + 1) = psn[2];
                *dst.add(p + 2) = psn[3];
                let t: &[[u32; 256]; 15] = self.tables[..].try_into().expect("15 ICRC tables");
                let mut c = crc0 ^ t[0][psn[1] as usize] ^ t[1][psn[2] as usize] ^ t[2][psn[3] as usize];
                for (i, b) in seq.to_be_bytes().into_iter().chain(tsc.to_be_bytes()).enumerate() {
                    c ^= t[3 + i][b as usize];
                }
                crc_new = c;
                dst.add(at).cast::<[u8; 4]>().write_unaligned(c.to_le_bytes());
            }
            if let Some(at) = self.udp_ck {
                // RFC 1624 eq. 3: HC' = ~(~HC + ~m + m'); the template's fields are 0 (m = 0)
                // but for the ICRC, which changes from crc0 to crc_new.
                let mut sum = u64::from(!ck0) + words64(u64::from(seq)) + words64(tsc);
                if self.icrc_at.is_some() {
                    let old_crc = u32::from_be_bytes(crc0.to_le_bytes());
                    let new_crc = u32::from_be_bytes(crc_new.to_le_bytes());
                    sum += words64(u64::from(seq & 0x00ff_ffff))
                        + words64(u64::from(!old_crc))
                        + words64(u64::from(new_crc));
                }
                let ck = !fold(sum);
                dst.add(at).cast::<[u8; 2]>().write_unaligned((if ck == 0 { 0xffff } else { ck }).to_be_bytes());
            }
        }
    }
}

/// A burst's view of one [`SizeTemplates`] ([`SizeTemplates::stamper`]).
#[derive(Debug, Clone, Copy)]
pub struct Stamper<'a> {
    t: &'a SizeTemplates,
    heads: &'a [u8],
    sums: &'a [(u16, u32)],
    h: usize,
    len: usize,
    s: usize,
    udp_at: usize,
    roce: bool,
    tsc: u64,
    /// The TSC's four 16-bit words summed (below 2^18).
    tsc_words: u32,
}

impl Stamper<'_> {
    /// Writes flow `flow`'s frame with sequence number `seq` and the burst's TSC into `out`
    /// (its first `len` bytes), as [`SizeTemplates::stamp`].
    ///
    /// UDP frames take the short way: the head (one 64-byte move for a 64-byte frame), the
    /// filler of a longer frame, the two fields, and the UDP checksum from the template's with
    /// the sequence number's two words and the TSC's precomputed sum (RFC 1624 eq. 3, the
    /// template's fields being 0). RoCEv2 frames go through the whole stamp (PSN and ICRC).
    ///
    /// # Panics
    /// If `out` is shorter than the frame or `flow` is not below the flows.
    #[inline(always)]
    pub fn stamp(&self, out: &mut [u8], flow: u32, seq: u32) {
        if self.roce {
            return self.t.stamp_full(out, flow, seq, self.tsc);
        }
        let (h, len, flow) = (self.h, self.len, flow as usize);
        assert!(out.len() >= len && flow < self.sums.len());
        let dst = out.as_mut_ptr();
        // SAFETY: as in `stamp_full`: every write lies in [0, len) of `out` (UDP frames have no
        // trailer and no ICRC; the filler ends the frame), the head's source in template `flow`
        // of `heads` (`flows` templates of `h` bytes, 60 <= h <= len).
        unsafe {
            copy_head(dst, self.heads.as_ptr().add(flow * h), h);
            if len > h {
                let filler = &self.t.filler;
                std::ptr::copy_nonoverlapping(filler.as_ptr(), dst.add(h), filler.len());
            }
            let s = self.s;
            dst.add(s + 4).cast::<[u8; 4]>().write_unaligned(seq.to_be_bytes());
            dst.add(s + 8).cast::<[u8; 8]>().write_unaligned(self.tsc.to_be_bytes());
            let ck0 = self.sums.get_unchecked(flow).0;
            // Below 2^16 * 7: one fold leaves at most 0xffff + 6, whose carry the second adds
            // into the low 16 bits (RFC 1071's two-step fold).
            let sum = u32::from(!ck0) + self.tsc_words + (seq >> 16) + (seq & 0xffff);
            let sum = (sum & 0xffff) + (sum >> 16);
            let ck = !((sum + (sum >> 16)) as u16);
            dst.add(self.udp_at).cast::<[u8; 2]>().write_unaligned((if ck == 0 { 0xffff } else { ck }).to_be_bytes());
        }
    }
}

/// Copies `N` bytes from `src` to `dst` with one fixed-size (vector) move.
///
/// # Safety
/// Both valid for `N` bytes; they may overlap only if equal ranges are not required (the
/// callers copy disjoint buffers).
#[inline(always)]
unsafe fn copy_fixed<const N: usize>(dst: *mut u8, src: *const u8) {
    // SAFETY: as the caller guarantees.
    unsafe { dst.cast::<[u8; N]>().write_unaligned(src.cast::<[u8; N]>().read_unaligned()) }
}

/// Copies a template's head of `h` bytes (at least 32) from `src` to `dst`: two overlapping
/// fixed-size copies of 64 bytes (one when `h` is 64), or of 32 below 64.
///
/// # Safety
/// Both valid for `h` bytes, and disjoint.
#[inline(always)]
unsafe fn copy_head(dst: *mut u8, src: *const u8, h: usize) {
    // SAFETY: every copy lies in [0, h) of both, as the caller guarantees (h >= 64 for the
    // copies of 64, h >= 32 for those of 32).
    unsafe {
        if h == 64 {
            copy_fixed::<64>(dst, src);
        } else if h > 64 {
            copy_fixed::<64>(dst, src);
            copy_fixed::<64>(dst.add(h - 64), src.add(h - 64));
        } else {
            copy_fixed::<32>(dst, src);
            copy_fixed::<32>(dst.add(h - 32), src.add(h - 32));
        }
    }
}

/// Bytes of a template copied per packet with fixed-size moves (two overlapping copies of 64
/// bytes, or of 32 below 64; the rest of a longer frame's filler follows in one `memcpy`).
pub const HEAD_LEN: usize = 128;

/// Writes Ethernet, IP, UDP, [BTH, DETH] and the stamp (sequence number and TSC 0) of `flow`.
fn build_headers(spec: &StreamSpec, flow: u32, lane: u8, ip_payload: usize, f: &mut [u8], l3: usize, l4: usize) {
    let v6 = spec.ends.src_ip.is_v6();
    let ethertype: u16 = if v6 { 0x86dd } else { 0x0800 };
    let mut eth = EthernetFrame::new_unchecked(&mut *f);
    eth.set_dst(spec.ends.dst_mac);
    eth.set_src(spec.ends.src_mac);
    match spec.ends.vlan {
        Some(tci) => {
            f[12..14].copy_from_slice(&0x8100u16.to_be_bytes());
            f[14..16].copy_from_slice(&tci.to_be_bytes());
            f[16..18].copy_from_slice(&ethertype.to_be_bytes());
        }
        None => f[12..14].copy_from_slice(&ethertype.to_be_bytes()),
    }
    let udp_len = ip_payload;
    UdpIpHeader { src: spec.flow_src_ip(flow), dst: spec.ends.dst_ip, ttl: spec.ttl, dscp: spec.dscp, ecn: spec.ecn }
        .emit(f, l3, l4, udp_len)
        .expect("room for the IP header and the datagram, addresses of one family (the config checks it)");
    let src_port = spec.src_port.wrapping_add(flow as u16);
    UdpRepr { src_port, dst_port: spec.dst_port, payload_len: (udp_len - udp::HEADER_LEN) as u16 }
        .emit(&mut f[l4..])
        .expect("room for the UDP header");
    let mut at = l4 + udp::HEADER_LEN;
    if spec.kind == Kind::Rocev2 {
        BthRepr {
            opcode: UD_SEND_ONLY,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            tver: 0,
            pkey: spec.roce.pkey,
            fecn: false,
            becn: false,
            dest_qp: spec.roce.dest_qp,
            ack_req: false,
            psn: 0,
        }
        .emit(&mut f[at..])
        .expect("room for the BTH");
        let mut deth = DethHeader::new_checked(&mut f[at + bth::HEADER_LEN..]).expect("room for the DETH");
        deth.set_qkey(spec.roce.qkey);
        deth.set_src_qp(spec.roce.src_qp.wrapping_add(flow) & 0x00ff_ffff);
        at += bth::HEADER_LEN + bth::DETH_LEN;
    }
    f[at] = STAMP_MAGIC;
    f[at + 1] = lane;
    f[at + 2..at + 4].copy_from_slice(&spec.id.to_be_bytes());
}

/// Computes and writes the UDP checksum of the datagram (`dg`: from the IP header to the end of
/// the IP datagram, UDP at `l4`) when the frame carries one, and returns it (0 when it does
/// not: RoCEv2 over IPv4).
fn fill_udp_checksum(spec: &StreamSpec, dg: &mut [u8], l4: usize) -> u16 {
    let udp_len = dg.len() - l4;
    let pseudo = match (spec.kind, spec.flow_src_ip(0), spec.ends.dst_ip) {
        (Kind::Rocev2, IpAddrBytes::V4(_), _) => {
            UdpPacket::new_unchecked(&mut dg[l4..]).set_checksum(0);
            return 0;
        }
        (_, IpAddrBytes::V4(_), IpAddrBytes::V4(d)) => {
            let s = [dg[12], dg[13], dg[14], dg[15]];
            checksum::pseudo_header_v4(s, d, udp::PROTOCOL, udp_len as u16)
        }
        (_, IpAddrBytes::V6(_), IpAddrBytes::V6(d)) => {
            let s: [u8; 16] = dg[8..24].try_into().expect("16 bytes");
            checksum::pseudo_header_v6(&s, &d, udp::PROTOCOL, udp_len as u32)
        }
        _ => unreachable!("one family"),
    };
    UdpPacket::new_unchecked(&mut dg[l4..]).set_checksum(0);
    let ck = !checksum::combine(pseudo, checksum::sum(&dg[l4..]));
    let ck = if ck == 0 { 0xffff } else { ck };
    UdpPacket::new_unchecked(&mut dg[l4..]).set_checksum(ck);
    ck
}

/// The sizes of a stream's frames: which template of a stream's list each packet uses.
#[derive(Debug, Clone, PartialEq)]
pub enum SizeMix {
    /// One size.
    Fixed,
    /// A mix: `pattern` lists size indices in sending order (weighted round robin), repeated.
    Mix {
        /// Indices into the stream's sizes.
        pattern: Vec<u16>,
    },
    /// A sweep: each size in turn for `step_s` seconds, then the next, from the first again
    /// after the last.
    Sweep {
        /// Seconds per size.
        step_s: f64,
    },
}

/// The standard simple IMIX: 7:4:1 of 64, 594 and 1518 bytes (frame lengths with FCS, as the
/// usual definition gives them; the generator sends 60, 590 and 1514 bytes without FCS).
pub const IMIX: [(usize, u32); 3] = [(60, 7), (590, 4), (1514, 1)];

/// A weighted round robin over `weights` (smooth: the heaviest is spread out, nginx's
/// algorithm): one index per unit of weight, `sum(weights)` entries.
pub fn weighted_pattern(weights: &[u32]) -> Vec<u16> {
    let total: i64 = weights.iter().map(|&w| w as i64).sum();
    let mut cur = vec![0i64; weights.len()];
    let mut out = Vec::with_capacity(total as usize);
    for _ in 0..total {
        for (c, &w) in cur.iter_mut().zip(weights) {
            *c += w as i64;
        }
        let (best, _) = cur.iter().enumerate().max_by_key(|&(i, &c)| (c, -(i as i64))).expect("weights");
        cur[best] -= total;
        out.push(best as u16);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::parse::{parse, Layers};
    use dataplane::wire::EthernetAddress;

    fn spec(kind: Kind, v6: bool, vlan: Option<u16>) -> StreamSpec {
        StreamSpec {
            id: 3,
            kind,
            ends: Endpoints {
                src_mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
                dst_mac: EthernetAddress([2, 0, 0, 0, 0, 2]),
                vlan,
                src_ip: if v6 {
                    IpAddrBytes::V6([0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xfe])
                } else {
                    IpAddrBytes::V4([10, 0, 0, 250])
                },
                dst_ip: if v6 {
                    IpAddrBytes::V6([0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9])
                } else {
                    IpAddrBytes::V4([10, 1, 0, 9])
                },
            },
            src_port: 65530,
            dst_port: if kind == Kind::Rocev2 { ROCEV2_PORT } else { 9 },
            dscp: 10,
            ecn: 2,
            ttl: 64,
            flows: 9,
            roce: RoceFields { dest_qp: 0x12, src_qp: 0xff_fffe, qkey: 0x1111_1111, pkey: 0xffff },
        }
    }

    /// Every stamped frame (both carriages and families, tagged or not, lengths from the
    /// smallest to a jumbo, all remainders mod 4, random sequence numbers and TSCs) is what a full
    /// build gives: the incremental UDP checksum and ICRC equal recomputed ones, the appliance's
    /// parser accepts it (it verifies checksums), and the stamp reads back.
    #[test]
    fn stamped_frames_are_valid_and_read_back() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut rnd = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for kind in [Kind::Udp, Kind::Rocev2] {
            for v6 in [false, true] {
                for vlan in [None, Some(0x2064)] {
                    let s = spec(kind, v6, vlan);
                    let min = s.min_frame_len();
                    assert!(SizeTemplates::new(&s, min - 1, 0).is_err());
                    assert!(SizeTemplates::new(&s, MAX_FRAME + 1, 0).is_err());
                    for len in [min, min + 1, min + 2, min + 3, 594, 1514, 9000, MAX_FRAME] {
                        let t = SizeTemplates::new(&s, len, 7).unwrap();
                        let mut buf = vec![0xeeu8; len];
                        for _ in 0..20 {
                            let (seq, tsc, flow) = (rnd() as u32, rnd(), (rnd() % 9) as u32);
                            t.stamp(&mut buf, flow, seq, tsc);
                            check(&s, &buf, flow, seq, tsc, &format!("{kind:?} v6 {v6} vlan {vlan:?} {len} B"));
                        }
                    }
                }
            }
        }
    }

    /// The ECN field reads back as CE only when it is 3, over IPv4 and IPv6, tagged or not; a
    /// CNP gives its destination QP and is never taken for a stamped frame.
    #[test]
    fn ce_marks_and_cnps_are_recognised() {
        for v6 in [false, true] {
            for vlan in [None, Some(7)] {
                for ecn in 0..4u8 {
                    let mut s = spec(Kind::Rocev2, v6, vlan);
                    s.ecn = ecn;
                    let t = SizeTemplates::new(&s, 200, 0).unwrap();
                    let mut buf = vec![0u8; 200];
                    t.stamp(&mut buf, 0, 1, 2);
                    assert_eq!(find_stamp(&buf).unwrap().ce, ecn == 3, "v6 {v6} vlan {vlan:?} ecn {ecn}");
                    assert_eq!(find_cnp(&buf), None);
                }
            }
        }
        // Ethernet, IPv4, UDP to 4791, BTH with opcode 0x81 and destination QP 0x123456.
        let mut cnp = vec![0u8; 14 + 20 + 8 + 12 + 16 + 4];
        cnp[12..14].copy_from_slice(&[0x08, 0x00]);
        cnp[14] = 0x45;
        cnp[14 + 9] = 17;
        cnp[34 + 2..34 + 4].copy_from_slice(&4791u16.to_be_bytes());
        cnp[42] = 0x81;
        cnp[42 + 5..42 + 8].copy_from_slice(&[0x12, 0x34, 0x56]);
        assert_eq!(find_cnp(&cnp), Some(0x12_3456));
        assert_eq!(find_stamp(&cnp), None);
        cnp[42] = 0x64;
        assert_eq!(find_cnp(&cnp), None, "a UD SEND is not a CNP");
    }

    fn check(s: &StreamSpec, f: &[u8], flow: u32, seq: u32, tsc: u64, ctx: &str) {
        let st = find_stamp(f).unwrap_or_else(|| panic!("{ctx}: no stamp"));
        assert_eq!(st, Stamp { lane: 7, stream: 3, seq, tsc, ce: s.ecn == 3 }, "{ctx}");
        let pr = parse(f, 49374).unwrap_or_else(|d| panic!("{ctx}: parser drops it: {d:?}"));
        assert!(pr.has(Layers::UDP), "{ctx}");
        assert_eq!(pr.udp_src, s.src_port.wrapping_add(flow as u16), "{ctx}");
        let l3 = if s.ends.vlan.is_some() { 18 } else { 14 };
        let l4 = l3 + if s.ends.src_ip.is_v6() { 40 } else { 20 };
        let ip_len = if s.ends.src_ip.is_v6() {
            40 + u16::from_be_bytes([f[l3 + 4], f[l3 + 5]]) as usize
        } else {
            u16::from_be_bytes([f[l3 + 2], f[l3 + 3]]) as usize
        };
        let dg = &f[l3..l3 + ip_len];
        assert!(f[l3 + ip_len..].iter().all(|&b| b == 0), "{ctx}: trailer");
        assert!(f.len() - (l3 + ip_len) < 4, "{ctx}");
        // The UDP checksum, recomputed in full.
        let udp_ck = u16::from_be_bytes([dg[l4 - l3 + 6], dg[l4 - l3 + 7]]);
        if s.kind == Kind::Rocev2 && !s.ends.src_ip.is_v6() {
            assert_eq!(udp_ck, 0, "{ctx}");
        } else {
            let pseudo = if s.ends.src_ip.is_v6() {
                checksum::pseudo_header_v6(
                    dg[8..24].try_into().unwrap(),
                    dg[24..40].try_into().unwrap(),
                    17,
                    (ip_len - 40) as u32,
                )
            } else {
                checksum::pseudo_header_v4(
                    dg[12..16].try_into().unwrap(),
                    dg[16..20].try_into().unwrap(),
                    17,
                    (ip_len - 20) as u16,
                )
            };
            assert_eq!(checksum::combine(pseudo, checksum::sum(&dg[l4 - l3..])), 0xffff, "{ctx}: UDP checksum");
        }
        if s.kind == Kind::Rocev2 {
            assert!(pr.has(Layers::BTH), "{ctx}");
            assert_eq!(pr.bth_psn, seq & 0xff_ffff, "{ctx}");
            assert_eq!(pr.deth_src_qp, (0xff_fffe + flow) & 0xff_ffff, "{ctx}");
            assert!(icrc::verify(dg, l4 - l3).unwrap(), "{ctx}: ICRC");
        }
    }

    #[test]
    fn imix_pattern_is_7_4_1_spread_out() {
        let p = weighted_pattern(&[7, 4, 1]);
        assert_eq!(p.len(), 12);
        assert_eq!((0..3).map(|i| p.iter().filter(|&&x| x == i).count()).collect::<Vec<_>>(), vec![7, 4, 1]);
        // Never more than two of the 64-byte frames in a row.
        assert!(p.windows(3).all(|w| !w.iter().all(|&x| x == 0)), "{p:?}");
        assert_eq!(weighted_pattern(&[1]), vec![0]);
    }

    #[test]
    fn flow_addresses_count_up() {
        let s = spec(Kind::Udp, false, None);
        assert_eq!(s.flow_src_ip(7).to_string(), "10.0.1.1");
        let s = spec(Kind::Udp, true, None);
        assert_eq!(s.flow_src_ip(1).to_string(), "fd00::ffff:ffff");
        // The last 32 bits wrap around.
        assert_eq!(s.flow_src_ip(2).to_string(), "fd00::");
    }

    #[test]
    fn other_frames_have_no_stamp() {
        assert_eq!(find_stamp(&[0u8; 10]), None);
        let s = spec(Kind::Udp, false, None);
        let t = SizeTemplates::new(&s, 60, 0).unwrap();
        let mut b = vec![0u8; 60];
        t.stamp(&mut b, 0, 1, 2);
        assert!(find_stamp(&b).is_some());
        b[42] = 0; // the magic
        assert_eq!(find_stamp(&b), None);
    }
}
