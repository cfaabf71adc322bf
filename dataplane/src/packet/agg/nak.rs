//! NAKs (spec section 5): the NAK the aggregator sends back for a refused packet, and their rate
//! limit: at most one NAK per source per 100 ms, so that NAKs can
//! never amplify traffic, and a budget of its own for every configured member's source, so that
//! a flood of spoofed sources can never starve a member's NAKs. For the same reason no NAK goes
//! to a source that is no one host's (a group or broadcast address, nobody, the appliance
//! itself: `Aggregator::nak_may_go_to`), before the limiter is consulted.
//!
//! The limit is the appliance's, not a worker's: a source can be refused by every worker (an
//! unknown collective on each worker's rx queues, collectives owned by different workers), so
//! all workers consult one limiter ([`SharedNakLimiter`], behind an `Arc`). It is lock-free:
//! one 64-bit word holds the time of a source's last NAK, and a NAK is granted by a
//! compare-and-swap of that word, so however many workers refuse one source at once, exactly
//! one of them sends within an interval (a stranger, whose word is one of [`CHOICES`]: at most
//! that many, when workers whose clocks differ refuse it at once at the very edge of an
//! interval, each seeing another candidate free). No allocation, lock or syscall per packet.
//!
//! Two kinds of words:
//! - **Members.** Every source configured for a member of some collective (its IP and UDP port,
//!   or IP and QP for RoCEv2) has a word of its own, found through a read-only open-addressing
//!   table built at configuration. A packet from a member's source is charged there whatever it
//!   was refused for (another collective, a bad offset, a stale round): the member gets one NAK
//!   per 100 ms whatever else arrives.
//! - **Strangers.** Every other source has [`CHOICES`] candidate words in a fixed table of
//!   [`BUCKETS`] (32 KiB), picked by its hash; a word holds the time of a NAK and a tag of the
//!   source it went to. A stranger is charged to the candidate holding its tag, else it takes
//!   the first candidate that is free or whose NAK is older than the interval. Only when every
//!   candidate holds another source's NAK of the last 100 ms is it suppressed: strangers share
//!   nothing unless that many of them are answered at once (a flood), get at most [`BUCKETS`]
//!   NAKs per 100 ms between them, each at most one, in fixed memory however many there are.
//!
//! **Runtime changes.** A change of the collectives (dpuctl, SIGHUP) gives the workers a new
//! limiter ([`SharedNakLimiter::successor`]) holding every NAK of the old one, so that a source's
//! 100 ms run on across the change, whichever kind of word it had before and has after. A member
//! source in both sets keeps its word; a member that is a stranger now gets its NAK written as a
//! stranger word under its tag where `grant_stranger` would have charged it
//! (all four candidates held by others' recent NAKs: over the oldest, the first to free); a
//! stranger that is a member now gets its stranger word's NAK as its member word. That word holds
//! only 40 bits of time, so the full time is rebuilt against a reference: the appliance's clock
//! at the change (the TSC in µs, what the workers pass for packets without an rx timestamp: live
//! ports), unless the old limiter's newest member NAK says the workers run on another clock (a
//! replay, whose aggregators use the packets' capture times): then that newest member NAK, which
//! the workers wrote in their own clock. A stranger word is carried only if recent at the
//! reference, as at most one interval before it or [`MAX_SKEW_US`] after it, so a reconstructed
//! member word never silences its source for more than 100 ms + 1 s after the reference.

use super::collective::{Carriage, Collective};
use super::send::send_frame;
use super::Aggregator;
use crate::buf::PacketIo;
use crate::parse::{Layers, Parsed};
use crate::stats::Counters;
use crate::wire::build::{FrameSpec, IpAddrBytes, Roce, ROCEV2_PORT};
use crate::wire::gradient::{Flags, GradientHeader, GradientRepr, RANK_NONE};
use crate::wire::vlan;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// The minimum interval between two NAKs to one source (µs).
pub const NAK_INTERVAL_US: u64 = 100_000;
/// Buckets of the strangers' table (32 KiB of words): at most this many NAKs to sources that
/// are no member's per [`NAK_INTERVAL_US`].
pub const BUCKETS: usize = 4096;
/// Candidate buckets per stranger: 12-bit slices of its hash, the first its low bits.
pub const CHOICES: usize = 4;

/// A stranger's word: bit 63 set when it holds a NAK, bits 40..63 the tag of the source it went
/// to (23 bits of its hash), bits 0..40 the NAK's time (µs modulo 2^40, 12.7 days: a word
/// within [`MAX_SKEW_US`] + one interval of a multiple of that old reads as recent, suppressing
/// one NAK).
const HELD: u64 = 1 << 63;
const TIME_BITS: u32 = 40;
const TIME_MASK: u64 = (1 << TIME_BITS) - 1;
/// How far a word's time may lie ahead of a worker's clock and still count as recent (the
/// workers' clocks, or two ports' capture times, need not agree): 1 s. Further ahead, modulo
/// 2^40, it is old.
const MAX_SKEW_US: u64 = 1_000_000;

/// A NAK's destination, as [`source`] encodes it: the IP address (IPv4 in the first 4 bytes)
/// and the UDP port or RoCEv2 QP (24 bits) tagged with the carriage and family.
pub type Source = ([u8; 16], u32);

/// Tag bits of a [`Source`]'s second half, above the 24 bits of a QP: a RoCEv2 QP, an IPv6
/// address (so that a UDP port and a QP of the same number, or an IPv4 address and the IPv6
/// address that starts with its bytes, are different sources).
const TAG_ROCE: u32 = 1 << 24;
const TAG_V6: u32 = 1 << 25;

/// The source of a packet from `ip` (4 or 16 bytes) with UDP source port or, when `roce`, DETH
/// source QP `port_or_qp` (spec section 4 rule 5: what anti-spoofing compares).
#[inline]
pub fn source(ip: &[u8], port_or_qp: u32, roce: bool) -> Source {
    let mut key = [0u8; 16];
    let n = ip.len().min(16);
    key[..n].copy_from_slice(&ip[..n]);
    let tags = (if roce { TAG_ROCE } else { 0 }) | (if n == 16 { TAG_V6 } else { 0 });
    (key, (port_or_qp & 0xff_ffff) | tags)
}

/// The per-source NAK limiter every worker's aggregator shares (see the module docs).
#[derive(Debug)]
pub struct SharedNakLimiter {
    /// Strangers, per bucket: 0 when no NAK went out yet, else [`HELD`], the tag of the source
    /// and the time (µs) of the last one.
    buckets: Box<[AtomicU64]>,
    /// The members' sources and their words, set once (by the first aggregator to share the
    /// limiter: every worker has the same collectives).
    members: OnceLock<Members>,
}

/// The members' sources: a read-only open-addressing table (linear probing, at most half
/// full) from source to the index of its word.
#[derive(Debug)]
struct Members {
    /// Per entry: a source and the index of its word in `last`, or `EMPTY`.
    table: Box<[(Source, u32)]>,
    /// `table.len() - 1` (a power of two less one).
    mask: usize,
    /// Per distinct member source: as a bucket's word.
    last: Box<[AtomicU64]>,
}

const EMPTY: u32 = u32::MAX;

impl Members {
    fn new(sources: impl IntoIterator<Item = Source>) -> Members {
        let mut distinct: Vec<Source> = sources.into_iter().collect();
        distinct.sort_unstable();
        distinct.dedup();
        let cap = (2 * distinct.len()).next_power_of_two().max(2);
        let mut table = vec![(([0u8; 16], 0u32), EMPTY); cap].into_boxed_slice();
        for (i, s) in distinct.iter().enumerate() {
            let mut at = hash(s) & (cap - 1);
            while table[at].1 != EMPTY {
                at = (at + 1) & (cap - 1);
            }
            table[at] = (*s, i as u32);
        }
        Members { table, mask: cap - 1, last: (0..distinct.len()).map(|_| AtomicU64::new(0)).collect() }
    }

    /// The word of member source `s` (whose [`hash`] is `h`), if it is one.
    #[inline]
    fn word(&self, s: &Source, h: usize) -> Option<&AtomicU64> {
        let mut at = h & self.mask;
        loop {
            let (k, i) = &self.table[at];
            if *i == EMPTY {
                return None;
            }
            if k == s {
                return Some(&self.last[*i as usize]);
            }
            at = (at + 1) & self.mask;
        }
    }
}

/// A new limiter without members (they are learnt from the first aggregator that shares it:
/// [`SharedNakLimiter::learn_members`]), to share between the workers.
pub fn shared() -> Arc<SharedNakLimiter> {
    Arc::new(SharedNakLimiter::default())
}

impl Default for SharedNakLimiter {
    fn default() -> Self {
        SharedNakLimiter { buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(), members: OnceLock::new() }
    }
}

/// FNV-1a over the source's 20 bytes.
fn hash(k: &Source) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in k.0.iter().chain(&k.1.to_le_bytes()) {
        h = (h ^ *b as u64).wrapping_mul(0x100_0000_01b3);
    }
    h as usize
}

/// Grants a NAK at `now_us` if `word`'s last one is at least [`NAK_INTERVAL_US`] old, by
/// compare-and-swap (see [`SharedNakLimiter::allow`]). A last NAK up to [`MAX_SKEW_US`] later
/// than `now_us` (another worker's clock, another port's capture) is recent, as a stranger's;
/// one further ahead is a clock that went back (a replay's capture times), which silences
/// nobody: the NAK is granted and the word takes `now_us`.
#[inline]
fn grant(word: &AtomicU64, now_us: u64) -> bool {
    let mut cur = word.load(Ordering::Acquire);
    loop {
        let recent = match cur.checked_sub(1) {
            None => false,
            Some(last) if now_us >= last => now_us - last < NAK_INTERVAL_US,
            Some(last) => last - now_us <= MAX_SKEW_US,
        };
        if recent {
            return false;
        }
        match word.compare_exchange_weak(cur, now_us.saturating_add(1), Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return true,
            Err(seen) => cur = seen,
        }
    }
}

/// True when stranger word `w` holds a NAK of the last [`NAK_INTERVAL_US`] before `now_us`, or
/// one up to [`MAX_SKEW_US`] later than `now_us` (another worker's clock, another port's
/// capture: as recent).
#[inline]
fn recent(w: u64, now_us: u64) -> bool {
    let age = (now_us & TIME_MASK).wrapping_sub(w & TIME_MASK) & TIME_MASK;
    w & HELD != 0 && !(NAK_INTERVAL_US..=TIME_MASK - MAX_SKEW_US).contains(&age)
}

impl SharedNakLimiter {
    /// Grants a NAK to the stranger whose [`hash`] is `h` at `now_us` (see the module docs):
    /// lock-free, by compare-and-swap of the word it takes, so that racing workers grant one
    /// (at an interval's edge with clocks apart, at most [`CHOICES`]).
    #[inline]
    fn grant_stranger(&self, h: usize, now_us: u64) -> bool {
        let (at, tag) = Self::candidates(h);
        loop {
            let w: [u64; CHOICES] = std::array::from_fn(|i| self.buckets[at[i]].load(Ordering::Acquire));
            // The word already holding this source's tag decides; else the first free or
            // stale one is taken; else every candidate is another's, recent: suppressed.
            let pick = match (0..CHOICES).find(|&i| w[i] & !TIME_MASK == tag) {
                Some(i) if recent(w[i], now_us) => return false,
                Some(i) => i,
                None => match (0..CHOICES).find(|&i| !recent(w[i], now_us)) {
                    Some(i) => i,
                    None => return false,
                },
            };
            let new = tag | (now_us & TIME_MASK);
            if self.buckets[at[pick]].compare_exchange(w[pick], new, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                return true;
            }
        }
    }

    /// A limiter whose members are `sources` (made with [`source`]; duplicates are one source).
    pub fn with_members(sources: impl IntoIterator<Item = Source>) -> Self {
        let l = SharedNakLimiter::default();
        l.learn_members(sources);
        l
    }

    /// Sets the members' sources if none are set yet (allocates their table and words; at
    /// configuration, never per packet). Every worker's aggregator calls it with the same
    /// collectives: the first call wins, the others find them set. True if this call set them.
    pub fn learn_members(&self, sources: impl IntoIterator<Item = Source>) -> bool {
        let mut set = false;
        self.members.get_or_init(|| {
            set = true;
            Members::new(sources)
        });
        set
    }

    /// The limiter for a changed set of collectives (the control plane's runtime change): the
    /// members' sources of `collectives`, with every NAK this limiter recorded carried over, so
    /// that the 100 ms interval of section 5 runs on across the change for every source, whether
    /// it stays what it was or moves between the two kinds of words (module docs, "Runtime
    /// changes"):
    /// - the strangers' buckets, as they are;
    /// - a member source both sets have: its word;
    /// - a new member source: its stranger word (the candidate holding its tag, then freed),
    ///   reconstructed as a full time against a reference (below) if it is recent;
    /// - an old member source the new set no longer has: its word, as a stranger word under its
    ///   tag in the candidate `grant_stranger` would take (its tag's, else the first free or
    ///   stale one), if its NAK is recent; when all its candidates hold other sources' recent
    ///   NAKs, in the one whose NAK is the oldest (the first to free: its stranger, at the end
    ///   of its interval, loses its word rather than the old member, whose NAK is newer).
    ///
    /// `now_us` is the appliance's own clock at the change (µs, as the workers read it for a
    /// packet without an rx timestamp: the TSC over its µs rate). It is the reference unless the
    /// workers evidently run on another clock: when the newest member NAK of this limiter (a
    /// full time, in the workers' own clock) lies more than `MAX_SKEW_US` after it (a replay,
    /// whose aggregators run on the packets' capture times, since 1970), that newest member NAK
    /// is the reference instead. A member NAK long before `now_us` says nothing (members of a
    /// live run may go days without one), so it never replaces the appliance's clock; a replay
    /// whose capture times lie behind the appliance's clock is judged at that clock (its
    /// strangers' words then read as old: at most one NAK more, never a longer silence). "Recent" is
    /// as for strangers, at the reference: at most an interval before it, or up to `MAX_SKEW_US`
    /// after it. So a new member's rebuilt NAK lies at most `MAX_SKEW_US` after the reference
    /// and silences it for at most 100 ms + 1 s after it. With the newest member NAK as the
    /// reference (a replay), a stranger's NAK more than 1 s after it is not carried: the
    /// source may get its next NAK early, never a longer silence. Without any member NAK in a
    /// replay, the appliance's clock is the reference though the workers' is another: a
    /// stranger word then reads as recent only by coincidence (1.1 s in 2^40 µs; the source is
    /// then silent until the capture times reach the reference).
    ///
    /// Allocates: on the control thread, never per packet. A NAK granted by a worker still on this
    /// limiter after the words were read is not in the new one: at most one NAK more per source
    /// during a switch.
    pub fn successor<'a>(
        &self,
        collectives: impl IntoIterator<Item = &'a Collective> + 'a,
        now_us: u64,
    ) -> Arc<SharedNakLimiter> {
        Arc::new(self.successor_of(member_sources(collectives), now_us))
    }

    /// [`SharedNakLimiter::successor`] for member sources `sources`.
    fn successor_of(&self, sources: impl IntoIterator<Item = Source>, now_us: u64) -> SharedNakLimiter {
        let next = SharedNakLimiter::with_members(sources);
        for (a, b) in next.buckets.iter().zip(self.buckets.iter()) {
            a.store(b.load(Ordering::Acquire), Ordering::Relaxed);
        }
        let old = self.members.get();
        let reference = self.reference_us(now_us);
        if let Some(new) = next.members.get() {
            // First the new members (their stranger words are freed), then the old ones that
            // became strangers (they may take those words).
            for (s, _) in new.table.iter().filter(|(_, i)| *i != EMPTY) {
                let h = hash(s);
                let Some(w) = new.word(s, h) else { continue };
                match old.and_then(|o| o.word(s, h)) {
                    Some(o) => w.store(o.load(Ordering::Acquire), Ordering::Relaxed),
                    None => {
                        if let Some(t) = next.take_stranger(h, reference) {
                            w.store(t.saturating_add(1), Ordering::Relaxed);
                        }
                    }
                }
            }
        }
        if let Some(old) = old {
            for (s, _) in old.table.iter().filter(|(_, i)| *i != EMPTY) {
                let h = hash(s);
                if next.is_member(s) {
                    continue;
                }
                let last = old.word(s, h).map_or(0, |w| w.load(Ordering::Acquire));
                if last != 0 {
                    next.place_stranger(h, last - 1, reference);
                }
            }
        }
        next
    }

    /// The reference time of a change at the appliance's clock `now_us` (see
    /// [`SharedNakLimiter::successor`]): `now_us`, unless this limiter's newest member NAK says
    /// the workers' clock is another; then that NAK's time.
    fn reference_us(&self, now_us: u64) -> u64 {
        let newest = self
            .members
            .get()
            .and_then(|m| m.last.iter().map(|w| w.load(Ordering::Acquire)).filter(|&w| w != 0).max())
            .map(|w| w - 1);
        match newest {
            Some(t) if t > now_us.saturating_add(MAX_SKEW_US) => t,
            _ => now_us,
        }
    }

    /// The candidates of the stranger whose [`hash`] is `h`: their buckets, and the tag its
    /// words carry (with [`HELD`]).
    #[inline]
    fn candidates(h: usize) -> ([usize; CHOICES], u64) {
        let h = h as u64;
        (std::array::from_fn(|i| (h >> (12 * i)) as usize % BUCKETS), HELD | (h & !TIME_MASK & !HELD))
    }

    /// Frees the stranger word of the source whose [`hash`] is `h` (it became a member) and
    /// returns the full time of its NAK if that is [`recent`] at reference `at_us`: the time at
    /// most one interval before `at_us`, or at most [`MAX_SKEW_US`] after it, whose low 40 bits
    /// the word holds. Control thread only (the limiter is not shared yet).
    fn take_stranger(&self, h: usize, at_us: u64) -> Option<u64> {
        let (at, tag) = Self::candidates(h);
        let b = at.iter().map(|&i| &self.buckets[i]).find(|b| b.load(Ordering::Relaxed) & !TIME_MASK == tag)?;
        let w = b.swap(0, Ordering::Relaxed);
        if !recent(w, at_us) {
            return None;
        }
        let age = (at_us & TIME_MASK).wrapping_sub(w & TIME_MASK) & TIME_MASK;
        Some(if age < NAK_INTERVAL_US { at_us.saturating_sub(age) } else { at_us.saturating_add(TIME_MASK + 1 - age) })
    }

    /// Records a NAK at `t_us` (full time) to the stranger whose [`hash`] is `h` (it was a
    /// member), if it is [`recent`] at reference `at_us`, where
    /// [`grant_stranger`](Self::grant_stranger) at `at_us` would have charged it: the candidate
    /// holding its tag, else the first free or stale one, else (every candidate holds another
    /// source's recent NAK) the one whose NAK is the oldest, the first to free. Control thread
    /// only (the limiter is not shared yet).
    fn place_stranger(&self, h: usize, t_us: u64, at_us: u64) {
        let (at, tag) = Self::candidates(h);
        let new = tag | (t_us & TIME_MASK);
        if !recent(new, at_us) {
            return;
        }
        let w: [u64; CHOICES] = std::array::from_fn(|i| self.buckets[at[i]].load(Ordering::Relaxed));
        // A word's age at the reference; one ahead of it (skew) is the newest.
        let age = |w: u64| match (at_us & TIME_MASK).wrapping_sub(w & TIME_MASK) & TIME_MASK {
            a if a > TIME_MASK - MAX_SKEW_US => 0,
            a => a,
        };
        let pick = (0..CHOICES)
            .find(|&i| w[i] & !TIME_MASK == tag)
            .or_else(|| (0..CHOICES).find(|&i| !recent(w[i], at_us)))
            .unwrap_or_else(|| (0..CHOICES).rev().max_by_key(|&i| age(w[i])).unwrap_or(0));
        self.buckets[at[pick]].store(new, Ordering::Relaxed);
    }

    /// True if `src` is a configured member's source.
    pub fn is_member(&self, src: &Source) -> bool {
        self.members.get().is_some_and(|m| m.word(src, hash(src)).is_some())
    }

    /// True if a NAK may go to `src` at `now_us` (µs, the appliance's clock); records it. A
    /// member's source is charged to its own word, any other to a word of the strangers' table. A time earlier
    /// than the word's last NAK (workers' clocks, or two ports' capture times, need not agree)
    /// counts as within the interval: suppressed, never an extra NAK.
    #[inline]
    pub fn allow(&self, src: Source, now_us: u64) -> bool {
        let h = hash(&src);
        match self.members.get().and_then(|m| m.word(&src, h)) {
            Some(w) => grant(w, now_us),
            None => self.grant_stranger(h, now_us),
        }
    }
}

impl Aggregator {
    /// True if a NAK may go to the refused packet `p`'s source `src` (section 5: a NAK can
    /// never be used to amplify traffic, so it goes to one host, never to a group, a broadcast,
    /// nobody or the appliance itself). Not when:
    /// - the Ethernet source is a group address (broadcast or multicast; IEEE 802: never a
    ///   source): the NAK would go to that group;
    /// - on the UDP carriage, the UDP source port is 0 (RFC 768: no port to reply to; a member's
    ///   `udp_port` is never 0). On RoCEv2 the NAK goes to the source QP, port 4791: kept;
    /// - the source IP is not a unicast host's: IPv4 0.0.0.0/8 (RFC 1122 section 3.2.1.3),
    ///   127.0.0.0/8 (loopback, never on the wire), 224.0.0.0/4 (multicast, RFC 1112),
    ///   240.0.0.0/4 (reserved, RFC 1112 section 4) with 255.255.255.255; IPv6 `::`, `::1`
    ///   (RFC 4291 sections 2.5.2, 2.5.3), `ff00::/8` (multicast, section 2.7), an IPv4-mapped
    ///   address of any of the IPv4 kinds above; or one of the appliance's own port addresses. A configured
    ///   member's source (its address with its UDP port or QP) is exempt from this rule: a
    ///   member may be configured at a loopback or the appliance's own address (a stand-in
    ///   appliance sharing its workers' host), and its NAKs go where its results go; the
    ///   configuration refuses unspecified, multicast and broadcast members, so those are
    ///   never exempt.
    ///
    /// Called on the refused path only (NAKs are cold), never for a folded contribution.
    #[cold]
    fn nak_may_go_to(&self, p: &Parsed, src: &Source) -> bool {
        if p.eth_src.is_multicast() || (!p.has(Layers::BTH) && p.udp_src == 0) {
            return false;
        }
        let ip = p.ip_src();
        let v4_not_unicast = |[a, ..]: [u8; 4]| a == 0 || a == 127 || a >= 224;
        let not_unicast = if let [a, b, c, d] = *ip {
            v4_not_unicast([a, b, c, d]) || self.ports.iter().any(|q| q.ipv4 == Some([a, b, c, d]))
        } else {
            let v6 = p.ip_src_bytes;
            // An IPv4-mapped address (::ffff:a.b.c.d, RFC 4291 section 2.5.5.2) by its IPv4 rules.
            let mapped = v6[..10] == [0; 10] && v6[10..12] == [0xff; 2];
            v6[0] == 0xff
                || (v6[..15] == [0; 15] && v6[15] <= 1)
                || (mapped && v4_not_unicast([v6[12], v6[13], v6[14], v6[15]]))
                || self.ports.iter().any(|q| q.ipv6 == Some(v6))
        };
        !not_unicast || self.naks.is_member(src)
    }

    /// Sends a NAK (section 5) for the refused packet, rate-limited per source, unless no NAK
    /// may go to its source ([`Aggregator::nak_may_go_to`]); a NAK not sent, for either, is
    /// counted in `naks_suppressed`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn nak<I: PacketIo>(
        &mut self,
        io: &mut I,
        in_port: u16,
        frame: &[u8],
        p: &Parsed,
        reason: u8,
        round: Option<u32>,
        now_us: u64,
        counters: &mut Counters,
    ) {
        let roce = p.has(Layers::BTH);
        let src = source(p.ip_src(), if roce { p.deth_src_qp } else { p.udp_src as u32 }, roce);
        // The refused packet's collective, if it is a configured one (its counters count the
        // NAK): the index validation read.
        let coll = (self.index[p.grad_collective_id as usize] as usize).checked_sub(1);
        // Withheld before the limiter is charged: a source no NAK may go to takes no word.
        if !self.nak_may_go_to(p, &src) || !self.naks.allow(src, now_us) {
            self.counters.naks_suppressed += 1;
            if let Some(k) = coll {
                self.colls[k].counters.naks_suppressed += 1;
            }
            return;
        }
        let Ok(g) = GradientHeader::new_checked(&frame[p.grad_offset as usize..]) else { return };
        let mut header = GradientRepr::parse(&g);
        header.flags = Flags::NAK;
        header.worker_rank = RANK_NONE;
        header.reason = reason;
        header.data_length = 0;
        if let Some(r) = round {
            header.round = r;
        }
        let port = self.ports.get(in_port as usize).copied().unwrap_or_default();
        // From the appliance's address on the ingress port (section 6), never another host's:
        // without one of the packet's family there is nothing to answer from (`wants` passes
        // such packets on as transit, so none reaches here).
        let (src_ip, dst_ip) = if p.has(Layers::IPV4) {
            let Some(me) = port.ipv4 else { return };
            let mut s = [0u8; 4];
            s.copy_from_slice(p.ip_src());
            (IpAddrBytes::V4(me), IpAddrBytes::V4(s))
        } else {
            let Some(me) = port.ipv6 else { return };
            (IpAddrBytes::V6(me), IpAddrBytes::V6(p.ip_src_bytes))
        };
        let coll_dscp = coll.map_or(0, |k| self.colls[k].spec.dscp);
        // Back the way the packet came: its tags mirrored, whole (TPIDs, priority, DEI and VID),
        // outer first.
        let word = |at: usize| u16::from_be_bytes([frame[at], frame[at + 1]]);
        let (outer_tag, vlan, vlan_tpid) = match (p.has(Layers::VLAN_OUTER), p.has(Layers::VLAN_INNER)) {
            (true, true) => (Some((word(12), word(14))), Some(word(18)), word(16)),
            (true, false) => (None, Some(word(14)), word(12)),
            _ => (None, None, vlan::TPID_8021Q),
        };
        let spec = FrameSpec {
            src_mac: port.mac,
            dst_mac: p.eth_src,
            vlan,
            vlan_tpid,
            outer_tag,
            src_ip,
            dst_ip,
            dscp: coll_dscp,
            ecn: 2,
            ttl: 64,
            src_port: if roce { 0xc000 } else { self.gradient_udp_port },
            dst_port: if roce { ROCEV2_PORT } else { p.udp_src },
            roce: roce.then_some(Roce {
                dest_qp: p.deth_src_qp,
                psn: 0,
                pkey: 0xffff,
                qkey: p.deth_qkey,
                src_qp: self.appliance_qpn,
            }),
            header,
        };
        if send_frame(io, &mut None, in_port, &spec, &[], None, counters) {
            self.counters.naks += 1;
            if let Some(n) = coll.and_then(|k| self.colls[k].counters.naks.get_mut((reason as usize).wrapping_sub(1))) {
                *n += 1;
            }
        }
    }
}

/// The sources of every member of `collectives` (their IP and UDP port, or IP and QP for
/// RoCEv2): the NAK limiter's members (section 5).
pub(super) fn member_sources<'a>(
    collectives: impl IntoIterator<Item = &'a Collective> + 'a,
) -> impl Iterator<Item = Source> + 'a {
    collectives.into_iter().flat_map(|c| {
        let roce = c.carriage == Carriage::Rocev2;
        c.members.iter().map(move |m| {
            let port_or_qp = if roce { m.qpn } else { m.udp_port as u32 };
            match &m.ip {
                IpAddrBytes::V4(a) => source(a, port_or_qp, roce),
                IpAddrBytes::V6(a) => source(a, port_or_qp, roce),
            }
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_nak_per_source_per_interval() {
        let l = SharedNakLimiter::default();
        let a = ([10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], 5000);
        let b = ([10, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], 5000);
        assert!(l.allow(a, 0));
        assert!(!l.allow(a, 99_999));
        assert!(l.allow(b, 50_000));
        assert!(l.allow(a, 100_000));
        assert!(!l.allow(b, 100_000));
        assert!(l.allow(b, 150_000));
    }

    #[test]
    fn colliding_sources_are_suppressed_never_granted_twice() {
        let l = SharedNakLimiter::default();
        // Many sources at the same instant: each gets at most one NAK, whatever collides.
        let mut granted = std::collections::HashMap::new();
        for round in 0..3 {
            for i in 0..5000u32 {
                let s = ([0; 16], i);
                if l.allow(s, round * 10) {
                    *granted.entry(i).or_insert(0) += 1;
                }
            }
        }
        assert!(granted.values().all(|&n| n == 1));
        assert!(granted.len() <= BUCKETS);
    }

    /// A time before the bucket's last NAK (another worker's clock, another port's capture)
    /// suppresses.
    #[test]
    fn an_earlier_time_suppresses() {
        let l = SharedNakLimiter::default();
        let a = ([10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], 5000);
        assert!(l.allow(a, 500_000));
        assert!(!l.allow(a, 450_000));
        assert!(!l.allow(a, 0));
        assert!(l.allow(a, 600_000));
    }

    /// A member's clock that went back further than [`MAX_SKEW_US`] (a replay's capture times
    /// stepping back an hour) silences it for no longer than a stranger: the NAK is granted and
    /// the interval runs from there; back by up to the skew, it is recent.
    #[test]
    fn a_member_clock_that_went_back_silences_nobody() {
        let a = ([10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], 5000);
        let l = SharedNakLimiter::with_members([a]);
        assert!(l.is_member(&a));
        let hour = 3_600_000_000;
        assert!(l.allow(a, hour));
        assert!(!l.allow(a, hour - MAX_SKEW_US), "within the skew: recent");
        assert!(l.allow(a, hour - MAX_SKEW_US - 1));
        assert!(!l.allow(a, hour - MAX_SKEW_US + 50_000));
        assert!(l.allow(a, hour - MAX_SKEW_US - 1 + NAK_INTERVAL_US));
        assert!(l.allow(a, 10), "an hour back");
        assert!(!l.allow(a, 99_999));
        assert!(l.allow(a, 100_010));
    }

    /// Workers refusing one source at the same instants: exactly one NAK per interval between
    /// them.
    /// NAKs granted to source `a` when four workers each refuse it 1000 times in each of ten
    /// intervals, at once.
    fn granted_to_racing_workers(l: &SharedNakLimiter, a: Source) -> u64 {
        std::thread::scope(|s| {
            let workers: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(move || {
                        (0..10u64)
                            .flat_map(|i| (0..1000u64).map(move |k| i * NAK_INTERVAL_US + k))
                            .filter(|&t| l.allow(a, t))
                            .count() as u64
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).sum()
        })
    }

    #[test]
    fn racing_workers_grant_one_nak_per_interval() {
        let l = shared();
        let a = ([10, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], 6000);
        let granted = granted_to_racing_workers(&l, a);
        assert_eq!(granted, 10);
    }

    /// Sources that differ in one byte never share a bucket (FNV-1a: each step xors a byte into
    /// the hash and multiplies by an odd prime, both one-to-one modulo the power-of-two bucket
    /// count), so every worker of a /24, or every port of one host in a 256-port block, refused
    /// at the same instant gets its own NAK.
    #[test]
    fn sources_differing_in_one_byte_each_get_their_nak() {
        let l = SharedNakLimiter::default();
        for host in 1..=254u8 {
            let mut ip = [0; 16];
            ip[..4].copy_from_slice(&[10, 0, 0, host]);
            assert!(l.allow((ip, 5000), 0), "10.0.0.{host}");
        }
        let l = SharedNakLimiter::default();
        let ip = [10, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        for port in 0xC300..=0xC3FFu32 {
            assert!(l.allow((ip, port), 0), "port {port}");
        }
    }
    /// Two strangers whose hashes share their first bucket each get their NAK: the second
    /// takes another of its candidates. So do 500 strangers refused at one instant (a stranger
    /// is suppressed only when all 4 of its candidates are taken: with k of the 4096 words
    /// held, about (k / 4096)^4 of the time, 1 in 4,500 at k = 500), each of them once; at
    /// 4096 at once, most still are.
    #[test]
    fn strangers_sharing_a_bucket_each_get_their_nak() {
        let a = v4([192, 168, 7, 10], 40000);
        let b = v4([192, 168, 7, 23], 40151);
        assert_eq!(hash(&a) % BUCKETS, hash(&b) % BUCKETS, "the pair shares its first bucket");
        let l = SharedNakLimiter::default();
        assert!(l.allow(a, 0));
        assert!(l.allow(b, 1000));
        assert!(!l.allow(a, 2000) && !l.allow(b, 3000));
        assert!(l.allow(a, NAK_INTERVAL_US) && l.allow(b, NAK_INTERVAL_US + 1000));
        assert!(!l.allow(b, NAK_INTERVAL_US + 1001));

        let l = SharedNakLimiter::default();
        let stranger =
            |i: u32| v4([172, 16 + (i % 3) as u8, (i >> 8) as u8, i as u8], 40000 + (i * 7919 % 1000) as u16);
        for t in [0, 10] {
            let granted = (0..500).filter(|&i| l.allow(stranger(i), t)).count();
            assert_eq!(granted, if t == 0 { 500 } else { 0 });
        }
        let granted = (0..500).filter(|&i| l.allow(stranger(i), NAK_INTERVAL_US)).count();
        assert_eq!(granted, 500, "the next interval: each again");
        let l = SharedNakLimiter::default();
        let granted = (0..4096).filter(|&i| l.allow(stranger(i), 0)).count();
        assert!((3500..=4096).contains(&granted), "{granted} of 4096 at once");
    }

    /// A word's time is kept modulo 2^40 µs (12.7 days): a stranger back after a week, or new
    /// strangers a week after a flood, are answered (a word ahead of the clock by more than a
    /// second is old, not "later"); up to a second ahead it still suppresses.
    #[test]
    fn words_a_week_old_are_old() {
        const DAY: u64 = 86_400_000_000;
        let l = SharedNakLimiter::default();
        let a = v4([172, 16, 0, 1], 40000);
        assert!(l.allow(a, 5));
        for days in [1, 6, 7, 10] {
            assert!(l.allow(a, days * DAY), "day {days}");
            assert!(!l.allow(a, days * DAY + 1), "day {days}");
        }
        let l = SharedNakLimiter::default();
        assert!((0..4096).filter(|&i| l.allow(v4([10, 1, (i >> 8) as u8, i as u8], 1), 0)).count() > 3500);
        let later = (0..500).filter(|&i| l.allow(v4([10, 2, (i >> 8) as u8, i as u8], 2), 7 * DAY)).count();
        assert_eq!(later, 500, "a week after a flood, no word is recent");
        // Skew: a word up to 1 s ahead of this worker's clock still counts.
        let l = SharedNakLimiter::default();
        assert!(l.allow(a, 10 * DAY));
        assert!(!l.allow(a, 10 * DAY - 999_999));
        assert!(l.allow(a, 10 * DAY - 1_000_001 + (1 << 40)), "2^40 µs later, less a second: old");
    }

    /// Sources whose first candidate bucket is `b` (strangers that take it when it is free).
    fn first_in(b: usize) -> impl Iterator<Item = Source> {
        (0..u32::MAX)
            .map(|i| v4([172, 20, (i >> 8) as u8, i as u8], 40000u16.wrapping_add((i >> 16) as u16)))
            .filter(move |s| hash(s) % BUCKETS == b)
    }

    /// A member's NAK, then the change that makes it a stranger (its collective deleted): the
    /// next NAK within 100 ms is suppressed, the one 100 ms after granted; so near a 2^40 µs
    /// wrap of the strangers' time.
    #[test]
    fn an_old_member_keeps_its_interval_as_a_stranger() {
        let a = v4([10, 0, 0, 1], 50000);
        let b = v4([10, 0, 0, 2], 50000);
        for t0 in [1_000_000, (1 << 40) - 3_000, 5 * (1 << 40) - 50_000] {
            let l = SharedNakLimiter::with_members([a, b]);
            assert!(l.allow(a, t0), "NAK 7 to a rank");
            let next = l.successor_of([b], t0 + 5_000);
            assert!(!next.is_member(&a) && next.is_member(&b));
            assert!(!next.allow(a, t0 + 5_000), "NAK 1 5 ms later: suppressed");
            assert!(!next.allow(a, t0 + NAK_INTERVAL_US - 1));
            assert!(next.allow(a, t0 + NAK_INTERVAL_US), "100 ms later: granted");
            assert!(!next.allow(a, t0 + NAK_INTERVAL_US + 1));
            assert!(next.allow(b, t0 + 5_000), "b had none");
        }
        // A member's NAK older than the interval at the change is not written.
        let l = SharedNakLimiter::with_members([a]);
        assert!(l.allow(a, 1_000_000));
        let next = l.successor_of([], 1_000_000 + NAK_INTERVAL_US);
        assert!(next.buckets.iter().all(|w| w.load(Ordering::Relaxed) == 0));
        assert!(next.allow(a, 1_000_000 + NAK_INTERVAL_US));
    }

    /// A stranger's NAK (an unknown collective), then the change that makes it a member
    /// (`add_collective`): the next NAK within 100 ms (a stale round, 8 ms later) is suppressed,
    /// the one 100 ms after granted; its stranger word is freed. So with the stranger's 40-bit
    /// time just before a 2^40 µs wrap and the change just after (the full time is rebuilt
    /// across it), and with members whose words carry over.
    #[test]
    fn a_new_member_keeps_its_interval_from_its_stranger_word() {
        let a = v4([10, 0, 0, 1], 50000);
        let m = v4([10, 0, 0, 9], 50000);
        for (t0, change) in [
            (1_000_000, 1_008_000),
            ((1 << 40) - 3_000, (1 << 40) + 5_000),
            (7 * (1 << 40) - 3_000, 7 * (1 << 40) + 5_000),
            ((1 << 40) + 2_000, (1 << 40) + 10_000),
        ] {
            for members in [vec![], vec![m]] {
                let l = SharedNakLimiter::with_members(members.iter().copied());
                assert!(l.allow(a, t0), "NAK 1 to a stranger");
                if !members.is_empty() {
                    assert!(l.allow(m, t0 - 50_000));
                }
                let next = l.successor_of([a, m], change);
                assert!(next.is_member(&a));
                assert!(next.buckets.iter().all(|w| w.load(Ordering::Relaxed) == 0), "its stranger word freed");
                assert!(!next.allow(a, change), "NAK 7 {} µs later: suppressed", change - t0);
                assert!(!next.allow(a, t0 + NAK_INTERVAL_US - 1));
                assert!(next.allow(a, t0 + NAK_INTERVAL_US), "100 ms later: granted");
                assert!(!next.allow(a, t0 + NAK_INTERVAL_US + 1));
                // A member in both sets keeps its word.
                assert_eq!(next.allow(m, t0 + 40_000), members.is_empty());
            }
        }
        // A stranger's NAK older than the interval at the change: a fresh member word.
        let l = SharedNakLimiter::default();
        assert!(l.allow(a, 1_000_000));
        let next = l.successor_of([a], 1_000_000 + NAK_INTERVAL_US);
        assert!(next.allow(a, 1_000_000 + NAK_INTERVAL_US));
    }

    /// The reference of a change: the appliance's clock, unless the old members' newest NAK
    /// shows the workers run on another (a replay's capture times). A stranger word up to 1 s
    /// ahead of the reference is carried (silencing at most 100 ms + 1 s after it), further
    /// ahead it is old.
    #[test]
    fn a_new_members_word_is_rebuilt_against_the_workers_clock() {
        let a = v4([10, 0, 0, 1], 50000);
        let m = v4([10, 0, 0, 9], 50000);
        // A replay: capture times (2024, µs since 1970) far ahead of the appliance's TSC clock.
        let capture = 1_717_000_000_000_000u64;
        let tsc = 90_000_000_000u64;
        let l = SharedNakLimiter::with_members([m]);
        assert!(l.allow(m, capture));
        assert!(l.allow(a, capture + 300_000));
        let next = l.successor_of([a, m], tsc);
        assert!(!next.allow(a, capture + 300_000 + 50_000));
        assert!(next.allow(a, capture + 300_000 + NAK_INTERVAL_US));
        // Up to 1 s ahead of the reference: carried, silent until its interval ends.
        let l = SharedNakLimiter::default();
        assert!(l.allow(a, tsc + 900_000));
        let next = l.successor_of([a], tsc);
        assert!(!next.allow(a, tsc + 900_000 + NAK_INTERVAL_US - 1));
        assert!(next.allow(a, tsc + 900_000 + NAK_INTERVAL_US));
        // More than 1 s ahead: old (2^40 µs earlier), not carried.
        let l = SharedNakLimiter::default();
        assert!(l.allow(a, tsc + 1_100_000));
        let next = l.successor_of([a], tsc);
        assert!(next.allow(a, tsc));
        // A live run whose members' newest NAK is days old: the appliance's clock stays the
        // reference, and a stranger's NAK of 20 ms ago is carried.
        let week = 7 * 86_400_000_000u64;
        let l = SharedNakLimiter::with_members([m]);
        assert!(l.allow(m, 1_000));
        assert!(l.allow(a, week - 20_000));
        assert_eq!(l.reference_us(week), week);
        let next = l.successor_of([a, m], week);
        assert!(!next.allow(a, week + 50_000), "within 100 ms of its stranger NAK");
        assert!(next.allow(a, week - 20_000 + NAK_INTERVAL_US));
    }

    /// An old member whose four stranger candidates all hold other strangers' recent NAKs: its
    /// word goes over the oldest of them (the first to free), the others are kept; with one
    /// candidate free, that one is taken and no other is touched.
    #[test]
    fn an_old_members_word_goes_over_the_oldest_of_a_full_candidate_set() {
        let a = v4([10, 0, 0, 1], 50000);
        let (at, tag) = SharedNakLimiter::candidates(hash(&a));
        let mut distinct = at.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), CHOICES, "a's candidates are four buckets");
        // One stranger in each candidate, at 30, 10, 20 and 40 ms: the second's NAK is the
        // oldest.
        let times = [30_000u64, 10_000, 20_000, 40_000];
        let for_state = |free: Option<usize>| {
            let l = SharedNakLimiter::with_members([a]);
            let others: Vec<Source> = at.iter().map(|&b| first_in(b).next().unwrap()).collect();
            for (i, o) in others.iter().enumerate() {
                if Some(i) != free {
                    assert!(l.allow(*o, times[i]));
                    assert_eq!(l.buckets[at[i]].load(Ordering::Relaxed) & TIME_MASK, times[i], "in its bucket");
                }
            }
            assert!(l.allow(a, 50_000), "the member's NAK");
            (l.successor_of([], 60_000), others)
        };
        let (next, others) = for_state(None);
        let words: Vec<u64> = at.iter().map(|&b| next.buckets[b].load(Ordering::Relaxed)).collect();
        assert_eq!(words[1], tag | 50_000, "over the oldest (10 ms)");
        for i in [0, 2, 3] {
            assert_eq!(words[i] & TIME_MASK, times[i], "kept");
            assert!(!next.allow(others[i], 60_000), "still suppressed");
        }
        assert!(!next.allow(a, 60_000));
        assert!(!next.allow(a, 50_000 + NAK_INTERVAL_US - 1));
        assert!(next.allow(a, 50_000 + NAK_INTERVAL_US));
        // One candidate free: that one.
        let (next, _) = for_state(Some(2));
        let words: Vec<u64> = at.iter().map(|&b| next.buckets[b].load(Ordering::Relaxed)).collect();
        assert_eq!(words[2], tag | 50_000);
        for i in [0, 1, 3] {
            assert_eq!(words[i] & TIME_MASK, times[i]);
        }
        assert!(!next.allow(a, 60_000));
        // Its tag already held in a later candidate (an old stranger word of it): that word is
        // the one written.
        let l = SharedNakLimiter::with_members([a]);
        l.buckets[at[2]].store(tag | 1_000, Ordering::Relaxed);
        assert!(l.allow(a, 300_000));
        let next = l.successor_of([], 310_000);
        assert_eq!(next.buckets[at[2]].load(Ordering::Relaxed), tag | 300_000);
        assert_eq!(next.buckets.iter().filter(|w| w.load(Ordering::Relaxed) != 0).count(), 1);
        assert!(!next.allow(a, 310_000));
        // A member again: its word is that stranger word, rebuilt.
        let back = next.successor_of([a], 320_000);
        assert!(!back.allow(a, 399_999) && back.allow(a, 400_000));
        assert!(next.allow(a, 400_000));
    }

    fn v4(a: [u8; 4], port: u16) -> Source {
        source(&a, port as u32, false)
    }

    /// Section 5: a member's source gets its NAK (one per 100 ms) whatever strangers arrive:
    /// 20,000 spoofed sources in 20 ms around it fill every bucket of the strangers' table;
    /// strangers still get at most one NAK each and at most BUCKETS between them.
    #[test]
    fn members_are_never_starved_by_a_flood_of_strangers() {
        let members = [v4([10, 0, 0, 1], 50000), v4([10, 0, 0, 2], 50001), source(&[10, 0, 0, 3], 0x102, true)];
        let l = SharedNakLimiter::with_members(members);
        let stranger = |i: u32| v4([172, 16, (i >> 8) as u8, i as u8], 40000 + (i % 7) as u16);
        let mut granted = std::collections::HashMap::new();
        let mut member_grants = Vec::new();
        for i in 0..20_000u32 {
            let t = i as u64; // 1 µs apart: 20 ms
            if l.allow(stranger(i), t) {
                *granted.entry(i).or_insert(0) += 1;
            }
            if i % 5000 == 2500 {
                // Every member, in the middle of the flood: the first time only (100 ms).
                member_grants.push(members.map(|m| l.allow(m, t)));
            }
        }
        assert_eq!(member_grants, vec![[true; 3], [false; 3], [false; 3], [false; 3]]);
        assert!(granted.values().all(|&n| n == 1), "one NAK per stranger per 100 ms");
        assert!(granted.len() <= BUCKETS, "{} strangers answered", granted.len());
        assert!(granted.len() > BUCKETS / 2, "strangers are bounded, not silenced: {}", granted.len());
        // 100 ms after their NAK, the members get the next one, once.
        for m in members {
            assert!(!l.allow(m, 2500 + NAK_INTERVAL_US - 1));
            assert!(l.allow(m, 2500 + NAK_INTERVAL_US));
            assert!(!l.allow(m, 2500 + NAK_INTERVAL_US + 1));
        }
        // Members' words are their own: strangers' buckets are untouched by members.
        let l = SharedNakLimiter::with_members(members);
        for m in members {
            assert!(l.allow(m, 0));
        }
        assert!(l.buckets.iter().all(|b| b.load(Ordering::Relaxed) == 0));
    }

    /// A source is the IP and the UDP port, or the IP and the QP on RoCEv2: a port and a QP of
    /// the same number, or an IPv4 address and the IPv6 address that starts with its bytes, are
    /// different sources; the QP is 24 bits.
    #[test]
    fn sources_tell_carriages_and_families_apart() {
        let mut v6 = [0u8; 16];
        v6[..4].copy_from_slice(&[10, 0, 0, 1]);
        let member = v4([10, 0, 0, 1], 0x100);
        let l = SharedNakLimiter::with_members([member]);
        assert!(l.is_member(&member));
        assert!(!l.is_member(&source(&[10, 0, 0, 1], 0x100, true)), "QP 0x100 is not port 0x100");
        assert!(!l.is_member(&source(&v6, 0x100, false)), "IPv6 10.0.0.1::");
        assert!(!l.is_member(&v4([10, 0, 0, 1], 0x101)));
        assert!(!l.is_member(&v4([10, 0, 0, 2], 0x100)));
        assert_eq!(source(&[1, 2, 3, 4], 0x1ab_cdef, true), source(&[1, 2, 3, 4], 0xab_cdef, true));
        assert!(!SharedNakLimiter::default().is_member(&member), "no members until learnt");
    }

    /// The members are set once, by the first aggregator that shares the limiter; a member
    /// configured in several collectives (the same source) has one word.
    #[test]
    fn members_are_learnt_once() {
        let l = SharedNakLimiter::default();
        let a = v4([10, 0, 0, 1], 50000);
        let b = v4([10, 0, 0, 2], 50000);
        assert!(l.learn_members([a, a, a]));
        assert!(!l.learn_members([b]), "set already");
        assert!(l.is_member(&a) && !l.is_member(&b));
        assert_eq!(l.members.get().unwrap().last.len(), 1);
        assert!(l.allow(a, 0));
        assert!(!l.allow(a, 10));
        // Many members: every one found, each its own word.
        let many: Vec<Source> = (0..5000u32).map(|i| v4([10, 1, (i >> 8) as u8, i as u8], 50000)).collect();
        let l = SharedNakLimiter::with_members(many.iter().copied());
        assert!(many.iter().all(|m| l.allow(*m, 0)));
        assert!(many.iter().all(|m| !l.allow(*m, 1)));
    }

    /// Workers refusing one member's source at the same instants: exactly one NAK per interval
    /// between them, from the member's own word.
    #[test]
    fn racing_workers_grant_a_member_one_nak_per_interval() {
        let a = v4([10, 0, 0, 7], 6000);
        let l = Arc::new(SharedNakLimiter::with_members([a]));
        let granted = granted_to_racing_workers(&l, a);
        assert_eq!(granted, 10);
        assert!(l.buckets.iter().all(|b| b.load(Ordering::Relaxed) == 0));
    }
}
