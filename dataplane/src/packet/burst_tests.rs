//! A burst through the tables table by table ([`crate::table::Pipeline::apply_burst`], the
//! way [`Datapath::process_burst`] takes a pipeline without meters and with a large table)
//! does what the same packets do
//! one by one through [`Datapath::process`]: the same frames out of the same ports in the same
//! order, the same counters, the same table and named counts.

use crate::agg::PortAddr;
use crate::buf::{VecBuf, VecIo};
use crate::config::load_str;
use crate::datapath::{Datapath, Staging};
use crate::neighbor::tests::arp_request;
use crate::testing::{build_frame, null_ports};
use crate::wire::build::{FrameSpec, IpAddrBytes};
use crate::wire::ethernet::EthernetAddress;
use crate::wire::gradient::DEFAULT_UDP_PORT;
use proptest::prelude::*;
use std::path::Path;

/// Three tables that use every way a packet can take through them: `goto` past a table,
/// `exit`, drops on a hit and on a miss, TTL expiry, VLAN pushes and pops (the frame's length
/// changes between the tables that count it), multicast, flood, a named counter, a class; the
/// `l2` table's key is the destination MAC that `route` rewrites, so the second lookup depends
/// on the first table's actions.
const TABLES: &str = r#"
[[table]]
name = "route"
key = [{ field = "ipv4.dst", match = "lpm" }]
default_action = "count(missed)"
entry = [
    { key = ["10.0.0.0/8"], action = "set_eth_dst(02:00:00:00:00:01); dec_ttl" },
    { key = ["10.1.0.0/16"], action = "set_eth_dst(02:00:00:00:00:02); push_vlan(7); goto(l2)" },
    { key = ["10.2.0.0/16"], action = "multicast(1)" },
    { key = ["10.3.0.0/16"], action = "drop" },
    { key = ["10.4.0.0/16"], action = "forward(2); set_class(3); exit" },
    { key = ["10.5.0.0/16"], action = "pop_vlan; set_eth_dst(ff:ff:ff:ff:ff:ff); count(popped)" },
    { key = ["10.6.0.0/16"], action = "set_dscp(46); mark_ecn; goto(l2)" },
]

[[table]]
name = "acl"
key = [{ field = "ipv4.proto", match = "ternary" }, { field = "udp.dst_port", match = "range" }]
default_action = "count(acl_pass)"
entry = [
    { key = ["17&&&0xff", "1000->1999"], action = "drop", priority = 10 },
    { key = ["17&&&0xff", "2000->2999"], action = "count(low); set_vlan(9)", priority = 5 },
]

[[table]]
name = "l2"
key = [{ field = "eth.dst", match = "exact" }]
default_action = "drop"
entry = [
    { key = ["02:00:00:00:00:01"], action = "forward(1)" },
    { key = ["02:00:00:00:00:02"], action = "forward(0)" },
    { key = ["ff:ff:ff:ff:ff:ff"], action = "flood" },
]

[[multicast_group]]
id = 1
copy = [{ port = 0, actions = "set_eth_dst(02:00:00:00:00:0a)" }, { port = 2, actions = "push_vlan(30)" }]
"#;

fn datapath() -> Datapath {
    let loaded = load_str(&format!("{}{TABLES}", null_ports(3)), Path::new("burst.toml")).unwrap();
    assert!(loaded.pipeline.can_stage_bursts());
    assert!(!loaded.pipeline.stages_bursts(), "small tables: staged only when asked");
    let local = vec![PortAddr { mac: EthernetAddress([2, 0, 0, 0, 0, 0xfe]), ipv4: Some([10, 0, 0, 254]), ipv6: None }];
    Datapath::new(loaded.pipeline, 3, DEFAULT_UDP_PORT).with_local_addresses(local).with_staging(Staging::Always)
}

/// One frame of the mix: UDP over IPv4 to `10.<net>.0.9` (nets 0-6: every route) or
/// `11.7.0.9` (net 7: a miss), tagged or not, with TTL `ttl` and UDP destination port `dport`; or, for `net` 8, an
/// ARP request for the appliance's address (answered on port 0, forwarded elsewhere); for
/// `net` 9, a truncated frame (a parse drop).
fn frame(net: u8, vlan: bool, ttl: u8, dport: u16) -> Vec<u8> {
    match net {
        8 => return arp_request([10, 0, 0, 254], vlan),
        9 => return vec![0x02; 20],
        _ => {}
    }
    let spec = FrameSpec {
        src_mac: "02:00:00:00:00:09".parse().unwrap(),
        dst_mac: "02:00:00:00:00:01".parse().unwrap(),
        vlan: vlan.then_some(100),
        src_ip: IpAddrBytes::V4([192, 168, 0, 1]),
        dst_ip: IpAddrBytes::V4([if net == 7 { 11 } else { 10 }, net, 0, 9]),
        ecn: 2,
        ttl,
        src_port: 4000,
        dst_port: dport,
        ..FrameSpec::default()
    };
    build_frame(&spec, &[0x5a; 40])
}

/// Runs `frames` (each with its ingress port) one by one and in bursts of `burst`; asserts
/// that both did the same; returns what was sent.
fn same_either_way(frames: &[(u16, Vec<u8>)], burst: usize) -> Vec<(u16, Vec<u8>)> {
    let (mut one, mut many) = (datapath(), datapath());
    let (mut io1, mut io2) = (VecIo::new(3), VecIo::new(3));
    for (port, f) in frames {
        one.process(&mut io1, *port, VecBuf::from_frame(f), 0);
    }
    // A burst is one port's: cut where the port changes, as the worker's rx does.
    for group in frames.chunk_by(|a, b| a.0 == b.0) {
        for chunk in group.chunks(burst) {
            let mut slots: Vec<Option<VecBuf>> = chunk.iter().map(|(_, f)| Some(VecBuf::from_frame(f))).collect();
            many.process_burst(&mut io2, chunk[0].0, &mut slots, 0);
            assert!(slots.iter().all(Option::is_none));
        }
    }
    assert_eq!(io1.sent, io2.sent, "frames out, in order");
    assert_eq!(one.counters, many.counters);
    for t in 0..3 {
        assert_eq!(one.pipeline_state.entries(t), many.pipeline_state.entries(t), "table {t}");
        assert_eq!(one.pipeline_state.miss(t), many.pipeline_state.miss(t), "table {t} misses");
    }
    assert_eq!(one.pipeline_state.named, many.pipeline_state.named);
    io1.sent
}

#[test]
fn a_burst_of_every_way_matches_packet_by_packet() {
    let mut frames = Vec::new();
    for net in 0..10 {
        for vlan in [false, true] {
            for (ttl, dport) in [(64, 53), (1, 1500), (64, 2500)] {
                frames.push((0, frame(net, vlan, ttl, dport)));
            }
        }
    }
    let sent = same_either_way(&frames, 32);
    // The mix reaches what it is meant to: every port, answers to ARP, both VLAN rewrites.
    for port in 0..3 {
        assert!(sent.iter().any(|(p, _)| *p == port), "nothing out of port {port}");
    }
    let one = {
        let mut dp = datapath();
        let mut io = VecIo::new(3);
        let mut slots: Vec<Option<VecBuf>> = frames.iter().map(|(_, f)| Some(VecBuf::from_frame(f))).collect();
        dp.process_burst(&mut io, 0, &mut slots, 0);
        dp
    };
    assert_eq!(one.counters.neighbor_replies, 6, "every ARP request for the appliance (3 x 2)");
    assert!(one.pipeline_state.entries(0).iter().all(|c| c.packets > 0), "every route hit");
    assert!(one.pipeline_state.entries(2).iter().all(|c| c.packets > 0), "every l2 entry hit");
    assert!(one.pipeline_state.named.iter().all(|c| c.packets > 0), "every named counter");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Any mix, from any of the ports, in bursts of any size.
    #[test]
    fn any_burst_matches_packet_by_packet(
        pkts in prop::collection::vec((0u16..3, 0u8..10, any::<bool>(), prop::sample::select(vec![1u8, 2, 64]), 0u16..4000), 1..80),
        burst in 1usize..40,
    ) {
        let frames: Vec<(u16, Vec<u8>)> =
            pkts.iter().map(|&(port, net, vlan, ttl, dport)| (port, frame(net, vlan, ttl, dport))).collect();
        same_either_way(&frames, burst);
    }
}
