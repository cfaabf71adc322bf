//! Contributions with fuzzer-chosen header fields and payloads, built with valid checksums and
//! ICRCs so that they reach the aggregator, through one long-lived data path (state carries
//! over from input to input: rounds, resends, timeouts, NAK rate limits).
//!
//! Invariants: nothing panics; every frame the appliance sends parses with valid checksums and
//! ICRC and is a RESULT, a NAK or a STATUS (the answer to a PROBE); a contribution makes at most one packet per member (plus one
//! NAK); the counters add up.
#![no_main]

use dataplane::agg::collective::Collective;
use dataplane::agg::{Aggregator, PortAddr};
use dataplane::buf::{VecBuf, VecIo};
use dataplane::config::load_str;
use dataplane::datapath::Datapath;
use dataplane::parse::{parse, Layers};
use dataplane::testing::{contribution_spec, APPLIANCE_MAC};
use dataplane::wire::build::{build, IpAddrBytes};
use dataplane::wire::gradient::{Flags, GradientHeader, DEFAULT_UDP_PORT};
use libfuzzer_sys::fuzz_target;
use std::cell::RefCell;
use std::path::Path;

const CONF: &str = r#"
[[port]]
vdev = "net_null0"
mac = "02:00:00:00:00:fe"
ipv4 = "10.0.0.254"
ipv6 = "fd00::fe"
[[collective]]
collective_id = 1
op = "sum"
dtype = "f32"
tensor_elements = 10
chunk_elements = 4
slot_timeout_ms = 5
[[collective.member]]
rank = 0
ip = "10.0.0.1"
udp_port = 50000
mac = "02:00:00:00:01:00"
[[collective.member]]
rank = 1
ip = "10.0.0.2"
udp_port = 50001
mac = "02:00:00:00:01:01"
vlan = 7
[[collective.member]]
rank = 2
ip = "10.0.0.3"
udp_port = 50002
mac = "02:00:00:00:01:02"
[[collective]]
collective_id = 2
op = "max"
dtype = "bf16"
carriage = "rocev2"
tensor_elements = 5
chunk_elements = 3
deterministic = true
[[collective.member]]
rank = 0
ip = "fd00::1"
mac = "02:00:00:00:01:00"
qpn = 256
qkey = 17
[[collective.member]]
rank = 1
ip = "fd00::2"
mac = "02:00:00:00:01:01"
qpn = 257
qkey = 17
"#;

thread_local! {
    /// The data path, the clock (µs) and the collectives it was built with.
    static DP: RefCell<(Datapath, u64, Vec<Collective>)> = RefCell::new({
        let l = load_str(CONF, Path::new("fuzz.toml")).expect("the fuzz config loads");
        let port = PortAddr { mac: APPLIANCE_MAC, ipv4: l.port_ipv4[0], ipv6: l.port_ipv6[0] };
        let agg = Aggregator::new(&l.collectives, vec![port], DEFAULT_UDP_PORT, 1);
        (Datapath::new(l.pipeline, 1, DEFAULT_UDP_PORT).with_aggregator(agg), 0, l.collectives)
    });
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 16 {
        return;
    }
    let b = |i: usize| data[i];
    // Collective 1 (UDP, IPv4) or 2 (RoCEv2, IPv6); a member's frame, then fuzzer-chosen
    // changes: its rank, address, port or QP off by one, header fields, a VLAN tag.
    let roce = b(0) & 1 == 1;
    let rank = (b(1) % 4) as u16;
    let payload = &data[16..];
    let dt = u16::from_be_bytes([b(13), b(14)]) as u64;
    DP.with(|cell| {
        let (dp, now, colls) = &mut *cell.borrow_mut();
        let c = &colls[roce as usize];
        let k = (rank as usize).min(c.members.len() - 1);
        let mut spec = contribution_spec(c, k, (b(7) % 12) as u32, (b(8) % 4) as u32, payload.len());
        let h = &mut spec.header;
        h.worker_rank = rank;
        if b(3) & 0x80 != 0 {
            h.version = b(3) & 0xf;
        }
        if b(3) & 0x40 != 0 {
            h.flags = b(3) & 0xf;
        }
        if b(4) & 0x80 != 0 {
            h.op_type = b(4) & 3;
        }
        if b(5) & 0x80 != 0 {
            h.collective_id = b(5) as u16;
        }
        if b(6) & 0x80 != 0 {
            h.dtype = b(6) & 7;
        }
        if b(9) & 0x80 != 0 {
            h.data_length = b(9) as u32 & 0x3f;
        }
        spec.vlan = (b(10) & 1 == 1).then_some(b(10) as u16);
        match &mut spec.src_ip {
            IpAddrBytes::V4(a) => a[3] += b(2) & 1,
            IpAddrBytes::V6(a) => a[15] += b(2) & 1,
        }
        spec.src_port += (b(11) & 1) as u16;
        if let Some(r) = &mut spec.roce {
            r.src_qp += (b(12) & 1) as u32;
        }
        let mut frame = vec![0u8; spec.frame_len(payload.len())];
        if build(&spec, payload, &mut frame).is_err() {
            return;
        }
        *now += dt * 10; // µs: sometimes past the 5 ms slot timeout and the 100 ms NAK interval
        let before_drops = dp.counters.total_drops();
        let mut io = VecIo::new(1);
        let mut buf = VecBuf::from_frame(&frame);
        buf.timestamp_us = Some(*now);
        dp.process(&mut io, 0, buf, *now);
        assert!(io.sent.len() <= 3, "at most one packet per member, or one NAK");
        assert!(dp.counters.total_drops() <= before_drops + 1);
        for (port, f) in &io.sent {
            assert_eq!(*port, 0);
            let p = parse(f, DEFAULT_UDP_PORT).unwrap_or_else(|e| panic!("the appliance sent a frame that does not parse: {e}"));
            let at = if p.has(Layers::GRADIENT) { p.grad_offset as usize } else { p.l4_offset as usize + 8 };
            let g = GradientHeader::new_checked(&f[at..]).expect("a gradient header");
            let status = Flags::RESULT | Flags::PROBE;
            assert!([Flags::RESULT, Flags::NAK, status].contains(&g.flags()), "flags {:#x}", g.flags());
            assert_eq!(g.worker_rank(), 0xffff);
            if g.flags() == Flags::NAK {
                assert_eq!(g.data_length(), 0);
                assert!((1..=7).contains(&g.reason()));
            }
            if g.flags() == status {
                // Section 7: one STATUS, to the prober, a slot state 0-3.
                assert_eq!(io.sent.len(), 1);
                assert!(g.reason() <= 3);
            }
        }
    });
});
