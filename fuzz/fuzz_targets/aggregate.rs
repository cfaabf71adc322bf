//! Contributions with fuzzer-chosen header fields and payloads, built with valid checksums and
//! ICRCs so that they reach the aggregator, through one long-lived data path (state carries
//! over from input to input: rounds, resends, timeouts, NAK rate limits).
//!
//! Invariants: nothing panics; every frame the appliance sends parses with valid checksums and
//! ICRC and is a RESULT, a NAK or a STATUS (the answer to a PROBE); a contribution makes at most one packet per member (plus one
//! NAK); the counters add up.
#![no_main]

use dataplane::agg::{Aggregator, PortAddr};
use dataplane::buf::{VecBuf, VecIo};
use dataplane::config::load_str;
use dataplane::datapath::Datapath;
use dataplane::parse::{parse, Layers};
use dataplane::wire::build::{build, FrameSpec, IpAddrBytes, Roce};
use dataplane::wire::gradient::{Flags, GradientHeader, GradientRepr, DEFAULT_UDP_PORT};
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
    static DP: RefCell<(Datapath, u64)> = RefCell::new({
        let l = load_str(CONF, Path::new("fuzz.toml")).expect("the fuzz config loads");
        let port = PortAddr { mac: "02:00:00:00:00:fe".parse().unwrap(), ipv4: l.port_ipv4[0], ipv6: l.port_ipv6[0] };
        let agg = Aggregator::new(&l.collectives, vec![port], DEFAULT_UDP_PORT, 1);
        (Datapath::new(l.pipeline, 1, DEFAULT_UDP_PORT).with_aggregator(agg), 0)
    });
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 16 {
        return;
    }
    let b = |i: usize| data[i];
    let roce = b(0) & 1 == 1;
    let rank = (b(1) % 4) as u16;
    let v6 = roce;
    let k = (rank as usize).min(2);
    let src_ip = if v6 {
        let mut a = [0u8; 16];
        a[0] = 0xfd;
        a[15] = k as u8 + 1 + (b(2) & 1);
        IpAddrBytes::V6(a)
    } else {
        IpAddrBytes::V4([10, 0, 0, k as u8 + 1 + (b(2) & 1)])
    };
    let dst_ip = if v6 {
        let mut a = [0u8; 16];
        a[0] = 0xfd;
        a[15] = 0xfe;
        IpAddrBytes::V6(a)
    } else {
        IpAddrBytes::V4([10, 0, 0, 254])
    };
    let payload = &data[16..];
    let mut header = GradientRepr {
        version: if b(3) & 0x80 != 0 { b(3) & 0xf } else { 1 },
        flags: if b(3) & 0x40 != 0 { b(3) & 0xf } else { 0 },
        op_type: if b(4) & 0x80 != 0 { b(4) & 3 } else if roce { 2 } else { 1 },
        collective_id: if b(5) & 0x80 != 0 { b(5) as u16 } else if roce { 2 } else { 1 },
        dtype: if b(6) & 0x80 != 0 { b(6) & 7 } else if roce { 3 } else { 1 },
        reason: 0,
        worker_rank: rank,
        tensor_offset: (b(7) % 12) as u32,
        data_length: payload.len() as u32,
        round: (b(8) % 4) as u32,
    };
    if b(9) & 0x80 != 0 {
        header.data_length = b(9) as u32 & 0x3f;
    }
    let spec = FrameSpec {
        src_mac: "02:00:00:00:01:00".parse().unwrap(),
        dst_mac: "02:00:00:00:00:fe".parse().unwrap(),
        vlan: (b(10) & 1 == 1).then_some(b(10) as u16),
        outer_tag: None,
        src_ip,
        dst_ip,
        dscp: 0,
        ecn: 2,
        ttl: 64,
        src_port: 50000 + k as u16 + (b(11) & 1) as u16,
        dst_port: if roce { 4791 } else { DEFAULT_UDP_PORT },
        roce: roce.then_some(Roce { dest_qp: 1, psn: 0, pkey: 0xffff, qkey: 17, src_qp: 256 + k as u32 + (b(12) & 1) as u32 }),
        header,
    };
    let mut frame = vec![0u8; spec.frame_len(payload.len())];
    if build(&spec, payload, &mut frame).is_err() {
        return;
    }
    let dt = u16::from_be_bytes([b(13), b(14)]) as u64;
    DP.with(|cell| {
        let (dp, now) = &mut *cell.borrow_mut();
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
