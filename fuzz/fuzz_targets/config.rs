//! Arbitrary configuration text through the loader, then the data path it builds.
//!
//! Invariants: loading never panics; a refused config is one line that starts with the file's
//! name (the key and what was expected follow); a config that loads builds its datapath and
//! aggregator, and plain frames (UDP over IPv4 and IPv6, tagged, ARP) and one contribution per
//! member of the first collective go through it without a panic, every frame sent leaving on
//! a configured port and parsing again.
//!
//! Seeds (`fuzz/seeds/config/`) are the shipped configs and the other fuzz targets' configs, so
//! mutations start from text that loads.
#![no_main]

use dataplane::agg::collective::Carriage;
use dataplane::agg::{Aggregator, PortAddr};
use dataplane::buf::{VecBuf, VecIo};
use dataplane::datapath::Datapath;
use dataplane::parse::parse;
use dataplane::testing::{host_ip, load_fuzzed};
use dataplane::wire::build::{build, FrameSpec, IpAddrBytes, Roce};
use dataplane::wire::gradient::GradientRepr;
use libfuzzer_sys::fuzz_target;

/// Most ports the frames are sent in on (each frame once per ingress port).
const MAX_PORTS: u16 = 4;
/// The largest contribution payload built (bytes): chunks above it are cut to it.
const MAX_PAYLOAD: usize = 9000;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Some(loaded) = load_fuzzed(text) else { return };
    let cfg = &loaded.config;
    let ports = cfg.ports.len() as u16;
    let udp_port = cfg.dataplane.gradient_udp_port;
    let addrs: Vec<PortAddr> = (0..ports as usize)
        .map(|i| PortAddr {
            mac: loaded.port_macs[i].unwrap_or_else(|| "02:00:00:00:00:fe".parse().unwrap()),
            ipv4: loaded.port_ipv4[i],
            ipv6: loaded.port_ipv6[i],
        })
        .collect();
    let mut dp = Datapath::new(loaded.pipeline.clone(), ports, udp_port).with_local_addresses(addrs.clone());
    if !loaded.collectives.is_empty() {
        dp = dp.with_aggregator(Aggregator::new(&loaded.collectives, addrs.clone(), udp_port, cfg.dataplane.appliance_qpn));
    }

    let mut frames = plain_frames(udp_port);
    if let Some(c) = loaded.collectives.first() {
        frames.extend(contributions(c, &addrs, udp_port, cfg.dataplane.appliance_qpn));
    }
    let mut io = VecIo::new(ports);
    for port in 0..ports.min(MAX_PORTS) {
        for f in &frames {
            dp.process(&mut io, port, VecBuf::from_frame(f), 0);
        }
    }
    for (port, f) in &io.sent {
        assert!(*port < ports, "sent on port {port} of {ports}");
        parse(f, udp_port).unwrap_or_else(|e| panic!("the appliance sent a frame that does not parse: {e}"));
    }
});

/// A UDP datagram over IPv4 and IPv6 to the gradient port and to another, one with an 802.1Q
/// tag, and an ARP request.
fn plain_frames(udp_port: u16) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for v6 in [false, true] {
        for (vlan, dst_port) in [(None, 9000), (Some(100), udp_port)] {
            let spec = FrameSpec {
                src_mac: "02:00:00:00:00:01".parse().unwrap(),
                dst_mac: "02:00:00:00:00:02".parse().unwrap(),
                vlan,
                src_ip: host_ip(v6, 1),
                dst_ip: host_ip(v6, 2),
                dscp: 26,
                ecn: 2,
                src_port: 49152,
                dst_port,
                ..FrameSpec::default()
            };
            let mut f = vec![0u8; spec.frame_len(16)];
            if build(&spec, &[1; 16], &mut f).is_ok() {
                out.push(f);
            }
        }
    }
    // ARP who-has 10.0.0.254 from 10.0.0.1.
    let mut arp = vec![0xff; 6];
    arp.extend([2, 0, 0, 0, 0, 1, 0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1, 2, 0, 0, 0, 0, 1, 10, 0, 0, 1]);
    arp.extend([0, 0, 0, 0, 0, 0, 10, 0, 0, 254]);
    out.push(arp);
    out
}

/// The appliance's address of the member's family on port `a` (zero where the port has none).
fn appliance_ip(member: IpAddrBytes, a: &PortAddr) -> IpAddrBytes {
    match member {
        IpAddrBytes::V4(_) => IpAddrBytes::V4(a.ipv4.unwrap_or_default()),
        IpAddrBytes::V6(_) => IpAddrBytes::V6(a.ipv6.unwrap_or_default()),
    }
}

/// One contribution per member of `c` for its first chunk, round 0, addressed to the
/// appliance's address on the member's port (a zero address where the port has none).
fn contributions(c: &dataplane::agg::collective::Collective, addrs: &[PortAddr], udp_port: u16, qpn: u32) -> Vec<Vec<u8>> {
    let elems = (c.chunk_elements as u64).min(c.tensor_elements) as usize;
    let len = (elems * c.dtype.size()).min(MAX_PAYLOAD);
    let payload = vec![0x3f; len];
    let mut out = Vec::new();
    for m in &c.members {
        let Some(a) = addrs.get(m.port as usize) else { continue };
        let roce = c.carriage == Carriage::Rocev2;
        let spec = FrameSpec {
            src_mac: m.mac,
            dst_mac: a.mac,
            vlan: m.vlan,
            src_ip: m.ip,
            dst_ip: appliance_ip(m.ip, a),
            ecn: 2,
            src_port: if roce { 49152 } else { m.udp_port },
            dst_port: if roce { 4791 } else { udp_port },
            roce: roce.then_some(Roce { dest_qp: qpn, psn: 0, pkey: 0xffff, qkey: m.qkey, src_qp: m.qpn }),
            header: GradientRepr {
                version: 1,
                op_type: c.op as u8,
                collective_id: c.id,
                dtype: c.dtype as u8,
                worker_rank: m.rank,
                data_length: len as u32,
                ..Default::default()
            },
            ..FrameSpec::default()
        };
        let mut f = vec![0u8; spec.frame_len(len)];
        if build(&spec, &payload, &mut f).is_ok() {
            out.push(f);
        }
    }
    out
}
