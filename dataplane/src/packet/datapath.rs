//! One worker's packet processing, top to bottom: checks, the ingress pipeline, egress.
//!
//! [`Datapath::process`] is generic over [`PacketIo`], so the appliance (mbufs, DPDK tx queues)
//! and the tests (heap buffers) run the same code.

use crate::action::{Action, Egress};
use crate::agg::{Aggregator, PortAddr};
use crate::buf::{PacketBuf, PacketIo};
use crate::meta::Meta;
use crate::neighbor::Verdict;
use crate::parse::{parse_into, Layers, Parsed};
use crate::prefetch::prefetch;
use crate::stats::{Counters, Reason};
use crate::table::{Pipeline, PipelineState};

/// Largest burst [`Datapath::process_burst`] handles at once (packets); longer slices are
/// processed in chunks of this size.
pub const MAX_BURST: usize = 512;

/// Packets ahead whose frame data a burst's parse loop prefetches (as DPDK's l3fwd).
const PREFETCH_AHEAD: usize = 3;

/// A burst's parses: one slot per packet, reused burst after burst (no allocation per burst).
#[derive(Clone, Default)]
struct BurstScratch {
    /// The packets' parses (valid where `verdict` is `Ok`).
    parsed: Vec<Parsed>,
    /// Per packet: `Ok` when parsed, else why it is dropped.
    verdict: Vec<Result<(), Reason>>,
    /// Per parsed packet: the first table's lookup.
    first_hit: Vec<Option<usize>>,
}

impl BurstScratch {
    fn new() -> Self {
        BurstScratch {
            parsed: vec![Parsed::default(); MAX_BURST],
            verdict: vec![Ok(()); MAX_BURST],
            first_hit: vec![None; MAX_BURST],
        }
    }
}

impl std::fmt::Debug for BurstScratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BurstScratch({} slots)", self.parsed.len())
    }
}

/// Per-worker state: the pipeline, its counts, and the worker's counters.
#[derive(Debug, Clone)]
pub struct Datapath {
    /// The ingress pipeline (only read while packets go through it).
    pub pipeline: Pipeline,
    /// This worker's counts of the pipeline's entries, misses and named counters.
    pub pipeline_state: PipelineState,
    /// This worker's counters.
    pub counters: Counters,
    /// The aggregator, when collectives are configured.
    pub agg: Option<Aggregator>,
    /// The appliance's own addresses per port (ARP and neighbour discovery are answered for them).
    pub local: Vec<PortAddr>,
    ports: u16,
    gradient_udp_port: u16,
    /// Some table uses `aggregate`: gradient packets go through the pipeline, and only that
    /// action sums them. Otherwise every gradient packet addressed to the appliance goes to
    /// the aggregator before the tables.
    aggregate_in_pipeline: bool,
    scratch: BurstScratch,
}

impl Datapath {
    /// A datapath over `ports` ports running `pipeline`; `gradient_udp_port` is the UDP port of
    /// the gradient protocol's UDP carriage (spec section 1).
    pub fn new(pipeline: Pipeline, ports: u16, gradient_udp_port: u16) -> Self {
        Datapath {
            pipeline_state: PipelineState::new(&pipeline),
            aggregate_in_pipeline: pipeline.any_action(|a| *a == Action::Aggregate),
            pipeline,
            counters: Counters::new(ports),
            agg: None,
            local: Vec::new(),
            ports,
            gradient_udp_port,
            scratch: BurstScratch::new(),
        }
    }

    /// Sets the appliance's own addresses per port: ARP requests and IPv6 neighbour
    /// solicitations for them are answered.
    pub fn with_local_addresses(mut self, local: Vec<PortAddr>) -> Self {
        self.local = local;
        self
    }

    /// Adds an aggregator: gradient packets addressed to the appliance go to it instead of the
    /// tables.
    pub fn with_aggregator(mut self, agg: Aggregator) -> Self {
        self.agg = Some(agg);
        self
    }

    /// Processes one received packet: it is sent, copied, consumed by the aggregator, or dropped
    /// and counted. `now_us` is the appliance's clock (µs) for packets without an rx timestamp.
    #[inline]
    pub fn process<I: PacketIo>(&mut self, io: &mut I, in_port: u16, pkt: I::Buf, now_us: u64) {
        self.counters.rx(in_port, pkt.data().len());
        self.process_counted(io, in_port, pkt, now_us);
    }

    /// Processes a received packet that was already counted.
    #[inline]
    fn process_counted<I: PacketIo>(&mut self, io: &mut I, in_port: u16, pkt: I::Buf, now_us: u64) {
        if pkt.is_segmented() {
            self.counters.drop(Reason::MultiSegment);
            return;
        }
        let mut p = Parsed::default();
        if let Err(r) = parse_into(pkt.data(), self.gradient_udp_port, pkt.rx_checksum(), &mut p) {
            self.counters.drop(r);
            return;
        }
        self.deliver(io, in_port, pkt, &mut p, None, now_us);
    }

    /// A gradient packet that another worker received on `in_port`, counted there, took
    /// through the pipeline when it aggregates, and handed to this one, which owns its
    /// collective (software steering, [`PacketIo::hand_off`]): straight to the aggregator,
    /// not counted again as received.
    #[inline]
    pub fn process_handed_off<I: PacketIo>(&mut self, io: &mut I, in_port: u16, pkt: I::Buf, now_us: u64) {
        let mut p = Parsed::default();
        if let Err(r) = parse_into(pkt.data(), self.gradient_udp_port, pkt.rx_checksum(), &mut p) {
            self.counters.drop(r);
            return;
        }
        self.aggregate(io, in_port, pkt, &p, now_us);
    }

    /// Processes an rx burst from `in_port` as [`Datapath::process`] would, packet after packet
    /// (same outputs in the same order, same counters), but in stages as DPDK's l3fwd: first
    /// every packet is parsed (into per-worker slots, prefetching frames a few packets ahead),
    /// then what the first table's lookup reads is prefetched for every packet, then each
    /// packet goes its way in order. The cache misses of one stage overlap across the burst
    /// instead of stalling each packet in turn.
    ///
    /// Every `Some` slot of `pkts` is taken (left `None`); `None` slots are skipped. Bursts of
    /// more than [`MAX_BURST`] packets are handled in chunks of it. Never allocates.
    #[inline(never)]
    pub fn process_burst<I: PacketIo>(&mut self, io: &mut I, in_port: u16, pkts: &mut [Option<I::Buf>], now_us: u64) {
        for chunk in pkts.chunks_mut(MAX_BURST) {
            self.process_chunk(io, in_port, chunk, now_us);
        }
    }

    /// [`Datapath::process_burst`] for at most [`MAX_BURST`] packets.
    #[inline]
    fn process_chunk<I: PacketIo>(&mut self, io: &mut I, in_port: u16, pkts: &mut [Option<I::Buf>], now_us: u64) {
        let n = pkts.len();
        // The slots leave `self` for the burst, so that each packet's path can borrow both.
        let mut scratch = std::mem::take(&mut self.scratch);
        let parsed = &mut scratch.parsed[..n];
        let verdict_n = &mut scratch.verdict[..n];
        let first_hit = &mut scratch.first_hit[..n];

        // Stage 1: parse.
        for pkt in pkts.iter().take(PREFETCH_AHEAD).flatten() {
            prefetch(pkt.data().as_ptr());
        }
        for i in 0..n {
            if let Some(Some(ahead)) = pkts.get(i + PREFETCH_AHEAD) {
                prefetch(ahead.data().as_ptr());
            }
            verdict_n[i] = match &pkts[i] {
                None => Ok(()),
                Some(pkt) if pkt.is_segmented() => Err(Reason::MultiSegment),
                Some(pkt) => parse_into(pkt.data(), self.gradient_udp_port, pkt.rx_checksum(), &mut parsed[i]),
            };
        }

        // Stage 2: the first table's lookups (the packets are as parsed, so this is the lookup
        // the pipeline would do first), after prefetching what they read first.
        if let Some(first) = self.pipeline.tables.first() {
            for (p, v) in parsed.iter().zip(verdict_n.iter()) {
                if v.is_ok() {
                    first.prefetch(p, &Meta::new(in_port));
                }
            }
            for ((p, v), hit) in parsed.iter().zip(verdict_n.iter()).zip(first_hit.iter_mut()) {
                if v.is_ok() {
                    *hit = self.pipeline.first_lookup(p, &Meta::new(in_port));
                }
            }
        }

        // Stage 3: each packet's path, in order.
        for i in 0..n {
            let Some(pkt) = pkts[i].take() else { continue };
            self.counters.rx(in_port, pkt.data().len());
            match verdict_n[i] {
                Ok(()) => self.deliver(io, in_port, pkt, &mut parsed[i], Some(first_hit[i]), now_us),
                Err(r) => self.counters.drop(r),
            }
        }
        self.scratch = scratch;
    }

    /// The rest of [`Datapath::process`] for a counted, parsed packet (`p` is its parse, kept
    /// up to date by rewrites): neighbour answering, the aggregator, or the pipeline and egress.
    /// `first_hit`, when known, is the first table's lookup of `p`.
    #[inline(always)]
    fn deliver<I: PacketIo>(
        &mut self,
        io: &mut I,
        in_port: u16,
        mut pkt: I::Buf,
        p: &mut Parsed,
        first_hit: Option<Option<usize>>,
        now_us: u64,
    ) {
        if p.has(Layers::ARP) || (p.has(Layers::IPV6) && p.ip_proto == crate::wire::ndp::NEXT_HEADER_ICMPV6) {
            if let Some(addr) = self.local.get(in_port as usize) {
                let a = crate::neighbor::answer(&mut pkt, p, addr, &self.local);
                self.counters.address_conflicts += a.conflict as u64;
                match a.verdict {
                    Verdict::Reply => {
                        self.counters.neighbor_replies += 1;
                        self.send(io, in_port, pkt);
                        return;
                    }
                    Verdict::Drop(r) => {
                        self.counters.drop(r);
                        return;
                    }
                    Verdict::Pass => {}
                }
            }
        }
        if p.ipv6_bad_segments_left && self.for_the_appliance(p, in_port) {
            // RFC 8200 section 4.4: the appliance is the node that would process the Routing
            // header. Transit packets are forwarded as any other.
            self.counters.drop(Reason::Ipv6BadSegmentsLeft);
            return;
        }
        if !self.aggregate_in_pipeline && self.agg.as_ref().is_some_and(|agg| agg.wants(p, in_port)) {
            self.aggregate(io, in_port, pkt, p, now_us);
            return;
        }
        let mut meta = Meta::at(in_port, pkt.rx_timestamp_us().unwrap_or(now_us));
        let egress = match first_hit {
            Some(hit) => self.pipeline.apply_with_first_hit(&mut self.pipeline_state, &mut pkt, p, &mut meta, hit),
            None => self.pipeline.apply(&mut self.pipeline_state, &mut pkt, p, &mut meta),
        };
        match egress {
            Egress::Port(port) => self.send(io, port, pkt),
            Egress::Flood => self.flood(io, in_port, pkt),
            Egress::Multicast(g) => self.multicast(io, g as usize, pkt, p),
            Egress::Aggregate => self.aggregate(io, in_port, pkt, p, now_us),
            Egress::Dropped(r) => self.counters.drop(r),
            Egress::Unset if self.agg.as_ref().is_some_and(|agg| agg.wants(p, in_port)) => {
                self.counters.drop(Reason::GradNotAggregated)
            }
            Egress::Unset => self.counters.drop(Reason::NoEgress),
        }
    }

    /// Sums a gradient packet into its collective, on the worker that owns the collective: this
    /// one, or another reached over its hand-off ring. A packet that is not a gradient packet
    /// addressed to the appliance is dropped (`aggregate_not_gradient`).
    #[inline]
    fn aggregate<I: PacketIo>(&mut self, io: &mut I, in_port: u16, pkt: I::Buf, p: &Parsed, now_us: u64) {
        let Some(agg) = self.agg.as_mut().filter(|agg| agg.wants(p, in_port)) else {
            self.counters.drop(Reason::AggregateNotGradient);
            return;
        };
        let owner = agg.owner(p);
        if owner != agg.me() {
            // Software steering: the collective's state lives on another worker.
            match io.hand_off(owner, pkt) {
                Ok(()) => agg.counters.handed_off += 1,
                Err(_) => self.counters.drop(Reason::HandOffFull),
            }
            return;
        }
        let now = pkt.rx_timestamp_us().unwrap_or(now_us);
        agg.process(io, in_port, pkt, p, now, &mut self.counters);
    }

    /// True if the IPv6 packet `p`, received on `in_port`, is addressed to the appliance: its
    /// destination is one of the appliance's IPv6 addresses, or the aggregator takes it.
    #[cold]
    fn for_the_appliance(&self, p: &Parsed, in_port: u16) -> bool {
        self.local.iter().any(|a| a.ipv6 == Some(p.ip_dst_bytes))
            || self.agg.as_ref().is_some_and(|agg| agg.wants(p, in_port))
    }

    #[inline(always)]
    fn send<I: PacketIo>(&mut self, io: &mut I, port: u16, pkt: I::Buf) {
        self.counters.tx(port, pkt.data().len());
        io.send(port, pkt);
    }

    /// Sends a copy to every port but `in_port`; the original goes to the last one.
    fn flood<I: PacketIo>(&mut self, io: &mut I, in_port: u16, pkt: I::Buf) {
        let Some(last) = (0..self.ports).rev().find(|&p| p != in_port) else {
            self.counters.drop(Reason::NoEgress);
            return;
        };
        for p in (0..last).filter(|&p| p != in_port) {
            match io.copy_of(pkt.data()) {
                Some(copy) => self.send(io, p, copy),
                None => self.counters.drop(Reason::NoMbuf),
            }
        }
        self.send(io, last, pkt);
    }

    /// Sends one copy per member of group `g`, each a full copy of the frame (copies never share
    /// bytes written per copy) with that copy's rewrites; the original becomes the last copy.
    fn multicast<I: PacketIo>(&mut self, io: &mut I, g: usize, mut pkt: I::Buf, p: &Parsed) {
        let n = self.pipeline.groups[g].copies.len();
        for c in 0..n - 1 {
            let Some(mut copy) = io.copy_of(pkt.data()) else {
                self.counters.drop(Reason::NoMbuf);
                continue;
            };
            let mut cp = *p;
            match self.pipeline.apply_copy(&mut self.pipeline_state, g, c, &mut copy, &mut cp) {
                Ok(()) => {
                    let port = self.pipeline.groups[g].copies[c].0;
                    self.send(io, port, copy)
                }
                Err(r) => self.counters.drop(r),
            }
        }
        let mut cp = *p;
        match self.pipeline.apply_copy(&mut self.pipeline_state, g, n - 1, &mut pkt, &mut cp) {
            Ok(()) => {
                let port = self.pipeline.groups[g].copies[n - 1].0;
                self.send(io, port, pkt)
            }
            Err(r) => self.counters.drop(r),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::{VecBuf, VecIo};
    use crate::config::load_str;
    use crate::testing::null_ports;
    use crate::wire::ipv6::Ipv6Repr;
    use std::path::Path;

    /// An l2 table for three ports: 02:..:01 to port 1, broadcast flooded, 02:..:66 dropped,
    /// the rest to port 0.
    const L2: &str = r#"
        [[table]]
        name = "l2"
        key = [{ field = "eth.dst", match = "exact" }]
        default_action = "forward(0)"
        [[table.entry]]
        key = ["02:00:00:00:00:01"]
        action = "forward(1)"
        [[table.entry]]
        key = ["ff:ff:ff:ff:ff:ff"]
        action = "flood"
        [[table.entry]]
        key = ["02:00:00:00:00:66"]
        action = "drop"
    "#;

    fn frame(dst: [u8; 6]) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[..6].copy_from_slice(&dst);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 9]);
        f[12..14].copy_from_slice(&[0x88, 0xb5]); // local experimental EtherType: L2 only
        f
    }

    fn datapath() -> Datapath {
        let loaded = load_str(&format!("{}{L2}", null_ports(3)), Path::new("test.toml")).unwrap();
        Datapath::new(loaded.pipeline, 3, crate::wire::gradient::DEFAULT_UDP_PORT)
    }

    #[test]
    fn l2_table_splits_by_destination() {
        let mut dp = datapath();
        let mut io = VecIo::new(3);
        for dst in [[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1]] {
            dp.process(&mut io, 2, VecBuf::from_frame(&frame(dst)), 0);
        }
        let ports: Vec<u16> = io.sent.iter().map(|(p, _)| *p).collect();
        assert_eq!(ports, vec![1, 0, 1]);
        assert_eq!(io.sent[1].1, frame([2, 0, 0, 0, 0, 2]));
        assert_eq!(dp.pipeline_state.tables[0].entries[0].packets, 2);
        assert_eq!(dp.pipeline_state.tables[0].entries[0].bytes, 120);
        assert_eq!(dp.pipeline_state.tables[0].miss.packets, 1);
        assert_eq!(dp.counters.ports[1].tx_packets, 2);
        assert_eq!(dp.counters.ports[2].rx_packets, 3);
    }

    #[test]
    fn bursts_longer_than_max_burst_are_processed_in_order() {
        let dsts = [[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], [0xff; 6], [2, 0, 0, 0, 0, 0x66]];
        let frames: Vec<Vec<u8>> = (0..2 * MAX_BURST + 7)
            .map(|i| {
                let mut f = frame(dsts[i % dsts.len()]);
                f[20] = i as u8;
                f
            })
            .collect();
        let (mut one, mut burst) = (datapath(), datapath());
        let (mut io1, mut io2) = (VecIo::new(3), VecIo::new(3));
        for f in &frames {
            one.process(&mut io1, 2, VecBuf::from_frame(f), 0);
        }
        let mut slots: Vec<Option<VecBuf>> = frames.iter().map(|f| Some(VecBuf::from_frame(f))).collect();
        burst.process_burst(&mut io2, 2, &mut slots, 0);
        assert!(slots.iter().all(Option::is_none));
        assert_eq!(io1.sent, io2.sent);
        assert_eq!(one.counters, burst.counters);
        assert_eq!(one.counters.ports[2].rx_packets, frames.len() as u64);
        for e in 0..3 {
            assert_eq!(one.pipeline_state.tables[0].entries[e], burst.pipeline_state.tables[0].entries[e]);
        }
        assert_eq!(one.pipeline_state.tables[0].miss, burst.pipeline_state.tables[0].miss);
    }

    #[test]
    fn flood_copies_to_every_other_port() {
        let mut dp = datapath();
        let mut io = VecIo::new(3);
        dp.process(&mut io, 1, VecBuf::from_frame(&frame([0xff; 6])), 0);
        let ports: Vec<u16> = io.sent.iter().map(|(p, _)| *p).collect();
        assert_eq!(ports, vec![0, 2]);
        assert!(io.sent.iter().all(|(_, f)| *f == frame([0xff; 6])));
    }

    #[test]
    fn flood_without_mbufs_counts_no_mbuf() {
        let mut dp = datapath();
        let mut io = VecIo::new(3);
        io.alloc_budget = Some(0);
        dp.process(&mut io, 1, VecBuf::from_frame(&frame([0xff; 6])), 0);
        assert_eq!(io.sent.len(), 1);
        assert_eq!(dp.counters.dropped(Reason::NoMbuf), 1);
    }

    #[test]
    fn runts_and_explicit_drops_are_counted() {
        let mut dp = datapath();
        let mut io = VecIo::new(3);
        dp.process(&mut io, 0, VecBuf::from_frame(&[1, 2, 3]), 0);
        dp.process(&mut io, 0, VecBuf::from_frame(&[]), 0);
        dp.process(&mut io, 0, VecBuf::from_frame(&frame([2, 0, 0, 0, 0, 0x66])), 0);
        assert!(io.sent.is_empty());
        assert_eq!(dp.counters.dropped(Reason::Runt), 2);
        assert_eq!(dp.counters.dropped(Reason::ExplicitDrop), 1);
        assert_eq!(dp.counters.total_drops(), 3);
    }

    /// An IPv6 frame from fd00::1 to `dst` (Ethernet destination 02:00:00:00:00:01, forwarded
    /// to port 1 by the table) with a type 2 Routing header (one address) saying
    /// `segments_left`, then 8 bytes of No Next Header payload.
    fn routed_v6(dst: [u8; 16], segments_left: u8) -> Vec<u8> {
        let mut f = frame([2, 0, 0, 0, 0, 1])[..14].to_vec();
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        let mut ip = [0u8; 40];
        let src = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        Ipv6Repr {
            src_addr: src,
            dst_addr: dst,
            next_header: 43,
            payload_len: 24,
            hop_limit: 64,
            ..Default::default()
        }
        .emit(&mut ip)
        .unwrap();
        f.extend_from_slice(&ip);
        f.extend_from_slice(&[59, 2, 2, segments_left, 0, 0, 0, 0]);
        f.extend_from_slice(&[0xfd; 16]);
        f
    }

    #[test]
    fn routing_header_beyond_its_addresses_is_dropped_only_when_addressed_to_the_appliance() {
        let me = crate::agg::PortAddr {
            mac: "02:00:00:00:00:fe".parse().unwrap(),
            ipv4: None,
            ipv6: Some([0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xfe]),
        };
        let mut dp = datapath().with_local_addresses(vec![me; 3]);
        let mut io = VecIo::new(3);
        let mut other = me.ipv6.unwrap();
        other[15] = 9;
        dp.process(&mut io, 0, VecBuf::from_frame(&routed_v6(me.ipv6.unwrap(), 2)), 0);
        assert_eq!((io.sent.len(), dp.counters.dropped(Reason::Ipv6BadSegmentsLeft)), (0, 1));
        // One segment left of one address: a valid header, to the tables as before.
        dp.process(&mut io, 0, VecBuf::from_frame(&routed_v6(me.ipv6.unwrap(), 1)), 0);
        // Transit: not the appliance's to judge, forwarded as any other packet.
        dp.process(&mut io, 0, VecBuf::from_frame(&routed_v6(other, 2)), 0);
        assert_eq!(io.sent.iter().map(|(p, _)| *p).collect::<Vec<_>>(), vec![1, 1]);
        assert_eq!(io.sent[1].1, routed_v6(other, 2));
        assert_eq!(dp.counters.total_drops(), 1);
    }

    #[test]
    fn neighbor_drops_and_conflicts_are_counted() {
        let me =
            crate::agg::PortAddr { mac: "02:00:00:00:00:fe".parse().unwrap(), ipv4: Some([10, 0, 0, 254]), ipv6: None };
        let mut dp = datapath().with_local_addresses(vec![me; 3]);
        let mut io = VecIo::new(3);
        let mut mismatch = crate::neighbor::tests::arp_request([10, 0, 0, 254], false);
        mismatch[22 + 5] ^= 0x10; // the sender hardware address
        dp.process(&mut io, 0, VecBuf::from_frame(&mismatch), 0);
        let mut probe = crate::neighbor::tests::arp_request([10, 0, 0, 254], false);
        probe[28..32].fill(0); // sender IP 0.0.0.0
        dp.process(&mut io, 2, VecBuf::from_frame(&probe), 0);
        assert_eq!(dp.counters.dropped(Reason::ArpSenderMismatch), 1);
        assert_eq!((dp.counters.neighbor_replies, dp.counters.address_conflicts), (1, 1));
        assert_eq!(io.sent.len(), 1);
        assert_eq!((io.sent[0].0, &io.sent[0].1[0..6]), (2, &[2, 0, 0, 0, 1, 1][..]));
    }

    #[test]
    fn rx_checksum_verdicts_reach_the_parser() {
        use crate::parse::{CsumStatus, RxChecksum};
        use crate::wire::ipv4::Ipv4Packet;
        use crate::wire::udp::UdpPacket;
        // 02:00:00:00:00:01 (forwarded to port 1), 10.0.0.1:49152 -> 10.0.0.2:9000, 4 bytes.
        let mut good = frame([2, 0, 0, 0, 0, 1])[..46].to_vec();
        good[12..14].copy_from_slice(&[0x08, 0x00]);
        good[14..34].copy_from_slice(&[0x45, 0, 0, 32, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
        Ipv4Packet::new_unchecked(&mut good[14..]).fill_checksum();
        good[34..46].copy_from_slice(&[0xc0, 0x00, 0x23, 0x28, 0, 12, 0, 0, 1, 2, 3, 4]);
        UdpPacket::new_unchecked(&mut good[34..]).fill_checksum_v4([10, 0, 0, 1], [10, 0, 0, 2]);
        let mut bad_udp = good.clone();
        let n = bad_udp.len();
        bad_udp[n - 1] ^= 1;
        let mut dp = datapath();
        let mut io = VecIo::new(3);
        let send = |dp: &mut Datapath, io: &mut VecIo, f: &[u8], ip, l4| {
            let mut b = VecBuf::from_frame(f);
            b.rx_checksum = RxChecksum { ip, l4 };
            dp.process(io, 0, b, 0);
        };
        use CsumStatus::{Bad, Good, Unknown};
        send(&mut dp, &mut io, &good, Unknown, Unknown);
        send(&mut dp, &mut io, &bad_udp, Good, Good);
        send(&mut dp, &mut io, &bad_udp, Unknown, Unknown);
        send(&mut dp, &mut io, &good, Good, Bad);
        send(&mut dp, &mut io, &good, Bad, Good);
        assert_eq!(io.sent.len(), 2);
        assert_eq!(dp.counters.dropped(Reason::BadUdpChecksum), 2);
        assert_eq!(dp.counters.dropped(Reason::BadIpv4Checksum), 1);
    }
}
