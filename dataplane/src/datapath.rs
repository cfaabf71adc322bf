//! One worker's packet processing, top to bottom: checks, the ingress pipeline, egress.
//!
//! [`Datapath::process`] is generic over [`PacketIo`], so the appliance (mbufs, DPDK tx queues)
//! and the tests (heap buffers) run the same code.

use crate::action::Egress;
use crate::agg::{Aggregator, PortAddr};
use crate::buf::{PacketBuf, PacketIo};
use crate::parse::{parse_into, Layers, Parsed};
use crate::stats::{Counters, Reason};
use crate::table::Pipeline;

/// Per-worker state: the pipeline (a private copy with its own counters) and the counters.
#[derive(Debug, Clone)]
pub struct Datapath {
    /// The ingress pipeline.
    pub pipeline: Pipeline,
    /// This worker's counters.
    pub counters: Counters,
    /// The aggregator, when collectives are configured.
    pub agg: Option<Aggregator>,
    /// The appliance's own addresses per port (ARP and neighbour discovery are answered for them).
    pub local: Vec<PortAddr>,
    ports: u16,
    gradient_udp_port: u16,
}

impl Datapath {
    /// A datapath over `ports` ports running `pipeline`; `gradient_udp_port` is the UDP port of
    /// the gradient protocol's UDP carriage (spec section 1).
    pub fn new(pipeline: Pipeline, ports: u16, gradient_udp_port: u16) -> Self {
        Datapath { pipeline, counters: Counters::new(ports), agg: None, local: Vec::new(), ports, gradient_udp_port }
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
        let len = pkt.data().len();
        self.counters.rx(in_port, len);
        if pkt.is_segmented() {
            self.counters.drop(Reason::MultiSegment);
            return;
        }
        let mut p = Parsed::default();
        if let Err(r) = parse_into(pkt.data(), self.gradient_udp_port, pkt.rx_checksum(), &mut p) {
            self.counters.drop(r.into());
            return;
        }
        self.deliver(io, in_port, pkt, &mut p, now_us);
    }

    /// The rest of [`Datapath::process`] for a counted, parsed packet (`p` is its parse, kept
    /// up to date by rewrites): neighbour answering, the aggregator, or the pipeline and egress.
    #[inline(always)]
    fn deliver<I: PacketIo>(&mut self, io: &mut I, in_port: u16, mut pkt: I::Buf, p: &mut Parsed, now_us: u64) {
        if p.has(Layers::ARP) || (p.has(Layers::IPV6) && p.ip_proto == crate::wire::ndp::NEXT_HEADER_ICMPV6) {
            if let Some(addr) = self.local.get(in_port as usize) {
                if crate::neighbor::answer(&mut pkt, p, addr) {
                    self.counters.neighbor_replies += 1;
                    self.send(io, in_port, pkt);
                    return;
                }
            }
        }
        if let Some(agg) = self.agg.as_mut() {
            if agg.wants(p, in_port) {
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
                return;
            }
        }
        match self.pipeline.apply(&mut pkt, p, in_port) {
            Egress::Port(port) => self.send(io, port, pkt),
            Egress::Flood => self.flood(io, in_port, pkt),
            Egress::Multicast(g) => self.multicast(io, g as usize, pkt, p),
            Egress::Dropped(r) => self.counters.drop(r),
            Egress::Unset => self.counters.drop(Reason::NoEgress),
        }
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
            match self.pipeline.apply_copy(g, c, &mut copy, &mut cp) {
                Ok(()) => {
                    let port = self.pipeline.groups[g].copies[c].0;
                    self.send(io, port, copy)
                }
                Err(r) => self.counters.drop(r),
            }
        }
        let mut cp = *p;
        match self.pipeline.apply_copy(g, n - 1, &mut pkt, &mut cp) {
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
    use std::path::Path;

    const CONF: &str = r#"
        [[port]]
        vdev = "net_null0"
        [[port]]
        vdev = "net_null1"
        [[port]]
        vdev = "net_null2"
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
        let loaded = load_str(CONF, Path::new("test.toml")).unwrap();
        Datapath::new(loaded.pipeline, 3, 49374)
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
        assert_eq!(dp.pipeline.tables[0].counter(0).packets, 2);
        assert_eq!(dp.pipeline.tables[0].counter(0).bytes, 120);
        assert_eq!(dp.pipeline.tables[0].miss_counter().packets, 1);
        assert_eq!(dp.counters.ports[1].tx_packets, 2);
        assert_eq!(dp.counters.ports[2].rx_packets, 3);
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
