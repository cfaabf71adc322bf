//! Meters in the pipeline: `[[meter]]` configs, the `meter`, `police` and `set_color` actions,
//! `meta.color` as a key field, and what each colour counts, on timed frames through a datapath.

use crate::buf::{VecBuf, VecIo};
use crate::config::load_str;
use crate::datapath::Datapath;
use crate::parse::parse;
use crate::stats::{Counter, Reason};
use crate::wire::gradient::DEFAULT_UDP_PORT;
use crate::wire::{ipv4, ipv6, udp};
use std::path::Path;

const PORTS: &str = "[[port]]\nvdev = \"net_null0\"\n[[port]]\nvdev = \"net_null1\"\n";

/// An Ethernet / IPv4 / UDP frame of `len` bytes (at least 42) from 10.0.0.`src`, DSCP 0.
fn udp4(src: u8, len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[..14].copy_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00]);
    let payload = (len - 42) as u16;
    let ip = ipv4::Ipv4Repr {
        src_addr: [10, 0, 0, src],
        dst_addr: [10, 0, 0, 99],
        protocol: 17,
        payload_len: 8 + payload,
        ttl: 64,
        dscp: 0,
        ecn: 0,
        ident: 1,
        dont_frag: true,
    };
    ip.emit(&mut f[14..]).unwrap();
    udp::UdpRepr { src_port: 40000, dst_port: 9000, payload_len: payload }.emit(&mut f[34..]).unwrap();
    udp::UdpPacket::new_checked(&mut f[34..]).unwrap().fill_checksum_v4([10, 0, 0, src], [10, 0, 0, 99]);
    f
}

/// The datapath of `config` with two ports. The config comes first: its meters are top-level
/// `meter = [...]` arrays, which must precede the first table header.
fn datapath(config: &str) -> Datapath {
    let l = load_str(&format!("{config}{PORTS}"), Path::new("m.toml")).unwrap_or_else(|e| panic!("{e}"));
    Datapath::new(l.pipeline, 2, DEFAULT_UDP_PORT)
}

/// Sends each (µs, frame) in on port 0 and returns what left.
fn run(dp: &mut Datapath, frames: &[(u64, Vec<u8>)]) -> Vec<(u16, Vec<u8>)> {
    let mut io = VecIo::new(2);
    for (t, f) in frames {
        let mut b = VecBuf::from_frame(f);
        b.timestamp_us = Some(*t);
        dp.process(&mut io, 0, b, 0);
    }
    io.sent
}

fn colors(dp: &Datapath, m: usize) -> [u64; 3] {
    dp.pipeline_state.meter_colors(m).map(|c| c.packets)
}

const POLICE: &str = r#"
meter = [{ name = "tenant", type = "srtcm", cir = 1000, cbs = 1000, ebs = 1000 }]
[[table]]
name = "t"
key = [{ field = "ingress_port", match = "exact" }]
default_action = "police(tenant, yellow=set_dscp(10), red=drop); forward(1)"
"#;

/// srTCM (RFC 2697 section 3), colour-blind: CIR 1000 B/s, CBS = EBS = 1000 B, both buckets full
/// at the start; a 100-byte packet every 10 ms (the bucket gains exactly 10 bytes between two).
/// - Packet i (i = 0..) finds Tc = 1000 + 10 i - 100 g, g the greens so far: green while that is
///   at least 100, so packets 0..=10 are green (Tc = 1000 - 90 x 10 = 100 at packet 10, then 0).
/// - Then Tc is below 100 until it has gained 100 bytes again: every 10th packet (20, 30, ...,
///   90) is green, the others take 100 bytes from Te, which nothing refills (Tc never
///   overflows): packets 11..=19 and 21 are yellow (10 x 100 bytes empty Te), the rest red.
///
/// Over 100 packets: 11 + 8 = 19 green, 10 yellow, 71 red.
#[test]
fn police_colours_a_low_rate_flow_as_rfc_2697_says() {
    let mut dp = datapath(POLICE);
    let frames: Vec<(u64, Vec<u8>)> = (0..100).map(|i| (1_000_000 + 10_000 * i, udp4(1, 100))).collect();
    let out = run(&mut dp, &frames);
    assert_eq!(colors(&dp, 0), [19, 10, 71]);
    let [g, y, r] = dp.pipeline_state.meter_colors(0);
    assert_eq!((g.bytes, y.bytes, r.bytes), (1900, 1000, 7100), "100 bytes a packet");
    assert_eq!(out.len(), 29, "red is dropped");
    assert_eq!(dp.counters.dropped(Reason::Policed), 71);
    assert_eq!(dp.counters.dropped(Reason::TableMiss), 0);
    let dscp: Vec<u8> = out.iter().map(|(_, f)| f[15] >> 2).collect();
    assert_eq!(dscp.iter().filter(|d| **d == 10).count(), 10, "yellow gets DSCP 10");
    assert_eq!(dscp.iter().filter(|d| **d == 0).count(), 19, "green unchanged");
    for (_, f) in &out {
        assert!(parse(f, DEFAULT_UDP_PORT).is_ok(), "checksums stay valid");
    }
}

/// `police(NAME)` with its defaults (yellow goes on, red dropped) is one action; the burst path
/// (where the traffic-managed loop inlines the meter) and the per-packet path (one out-of-line
/// call) colour and drop exactly as the RFC 2697 trace above: 19 green, 10 yellow, 71 red.
#[test]
fn police_with_its_defaults_drops_red_alike_on_the_burst_and_packet_paths() {
    let conf = POLICE.replace("police(tenant, yellow=set_dscp(10), red=drop)", "police(tenant)");
    let frames: Vec<(u64, Vec<u8>)> = (0..100).map(|i| (1_000_000 + 10_000 * i, udp4(1, 100))).collect();
    let mut by_packet = datapath(&conf);
    let out = run(&mut by_packet, &frames);
    let mut by_burst = datapath(&conf);
    let mut io = VecIo::new(2);
    for chunk in frames.chunks(7) {
        let mut burst: Vec<Option<VecBuf>> = chunk
            .iter()
            .map(|(t, f)| {
                let mut b = VecBuf::from_frame(f);
                b.timestamp_us = Some(*t);
                Some(b)
            })
            .collect();
        by_burst.process_burst(&mut io, 0, &mut burst, 0);
    }
    for dp in [&by_packet, &by_burst] {
        assert_eq!(colors(dp, 0), [19, 10, 71]);
        assert_eq!(dp.counters.dropped(Reason::Policed), 71);
    }
    assert_eq!(out.len(), 29, "green and yellow go on, unchanged");
    assert_eq!(io.sent, out, "the burst path sends what the packet path sends");
}

/// A meter counts the frame without Ethernet padding: a 60-byte frame carrying a 28-byte IP
/// datagram is 42 bytes to the meter.
#[test]
fn padding_is_not_metered() {
    let mut dp = datapath(POLICE);
    let mut f = udp4(1, 42);
    f.resize(60, 0);
    run(&mut dp, &[(5, f)]);
    assert_eq!(dp.pipeline_state.meter_colors(0)[0], Counter { packets: 1, bytes: 42 });
}

/// An indexed meter keeps one instance per index (the field's value modulo its size): two
/// sources each get their own CBS; a direct meter one instance per entry that uses it; a later
/// table matches `meta.color`.
#[test]
fn indexed_and_direct_meters_keep_separate_buckets_and_later_tables_see_the_colour() {
    let conf = r#"
meter = [
    { name = "per_source", type = "trtcm", cir = 1000, cbs = 200, pir = 2000, pbs = 300, size = 256 },
    { name = "per_entry", type = "srtcm", cir = 1000, cbs = 100, ebs = 0, direct = true },
]
[[table]]
name = "src"
key = [{ field = "ipv4.src", match = "exact" }]
default_action = "drop"
entry = [
    { key = ["10.0.0.1"], action = "meter(per_entry); meter(per_source, ipv4.src)" },
    { key = ["10.0.0.2"], action = "meter(per_entry); meter(per_source, ipv4.src)" },
]
[[table]]
name = "by_colour"
key = [{ field = "meta.color", match = "exact" }]
default_action = "forward(1)"
entry = [{ key = [2], action = "count(red); drop" }]
"#;
    let mut dp = datapath(conf);
    assert_eq!(dp.pipeline.meters[1].instances, 2, "one instance per entry using the direct meter");
    // Three 100-byte packets from each source, 1 µs apart (no time to refill): per source,
    // trTCM (RFC 2698 section 3) with Tp = 300 and Tc = 200: 100 green (Tc 100, Tp 200), 100
    // green (Tc 0, Tp 100), then Tc < 100 but Tp >= 100: yellow. Each source has its own
    // instance (index 1 and 2 of 256), so both see the same: 4 green, 2 yellow, no red.
    let frames: Vec<(u64, Vec<u8>)> = (0..6).map(|i| (10 + i, udp4(1 + (i % 2) as u8, 100))).collect();
    let out = run(&mut dp, &frames);
    assert_eq!(colors(&dp, 0), [4, 2, 0]);
    // The direct meter (srTCM, CBS 100, EBS 0) per entry: each entry's first packet is green,
    // the next two red; the last meter's colour (per_source) is what `meta.color` holds.
    assert_eq!(colors(&dp, 1), [2, 0, 4]);
    assert_eq!(out.len(), 6, "no packet is red by the last meter");
    // A fourth packet from 10.0.0.1 at once is red for per_source (Tp 0).
    let out = run(&mut dp, &[(20, udp4(1, 100))]);
    assert!(out.is_empty());
    assert_eq!(dp.pipeline_state.named[0].packets, 1, "the by_colour table matched meta.color = 2");
}

/// An Ethernet / IPv6 / UDP frame of 100 bytes from `src`.
fn udp6(src: [u8; 16]) -> Vec<u8> {
    let dst = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x99];
    let mut f = vec![0u8; 100];
    f[..14].copy_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x86, 0xdd]);
    let ip = ipv6::Ipv6Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: 17,
        payload_len: 46,
        hop_limit: 64,
        ..Default::default()
    };
    ip.emit(&mut f[14..]).unwrap();
    udp::UdpRepr { src_port: 40000, dst_port: 9000, payload_len: 38 }.emit(&mut f[54..]).unwrap();
    udp::UdpPacket::new_checked(&mut f[54..]).unwrap().fill_checksum_v6(&src, &dst);
    f
}

/// An indexed meter on an IPv6 address takes the whole 128-bit value modulo its size: four
/// hosts, three of them in one /64, reach four instances (they once shared the instance of
/// the address's first 64 bits).
#[test]
fn an_indexed_meter_on_ipv6_addresses_takes_the_whole_address_modulo_its_size() {
    let conf = r#"
meter = [{ name = "per_host", type = "srtcm", cir = 1000, cbs = 200, ebs = 100, size = 4 }]
[[table]]
name = "t"
key = [{ field = "ingress_port", match = "exact" }]
default_action = "meter(per_host, ipv6.src); forward(1)"
"#;
    let mut dp = datapath(conf);
    let host = |hi: u8, lo: u8| [0xfd, 0, 0, 0, 0, 0, 0, hi, 0, 0, 0, 0, 0, 0, 0, lo];
    let hosts = [host(0, 1), host(0, 2), host(0, 3), host(1, 0)];
    // Three 100-byte packets per host at one instant: per instance (srTCM, CBS 200, EBS 100)
    // green, green, yellow.
    let frames: Vec<(u64, Vec<u8>)> = (0..12).map(|i| (10, udp6(hosts[i % 4]))).collect();
    run(&mut dp, &frames);
    assert_eq!(colors(&dp, 0), [8, 4, 0]);
}

/// `set_color` sets the input colour of a colour-aware meter, which never makes a packet lighter.
#[test]
fn colour_aware_meters_start_from_the_packets_colour() {
    let conf = r#"
meter = [{ name = "aware", type = "trtcm", cir = 1000, cbs = 1000, pir = 2000, pbs = 2000, color_aware = true }]
[[table]]
name = "t"
key = [{ field = "ipv4.src", match = "exact" }]
default_action = "meter(aware); forward(1)"
entry = [{ key = ["10.0.0.2"], action = "set_color(yellow); meter(aware); forward(1)" }]
"#;
    let mut dp = datapath(conf);
    run(&mut dp, &[(1, udp4(1, 100)), (2, udp4(2, 100))]);
    assert_eq!(colors(&dp, 0), [1, 1, 0], "the pre-coloured yellow packet stays yellow with tokens to spare");
}

#[test]
fn meter_configs_the_rfcs_forbid_are_refused_with_the_key() {
    let refused = |meter: &str, action: &str| -> String {
        let text = format!(
            "{PORTS}[[meter]]\nname = \"m\"\n{meter}\n[[table]]\nname = \"t\"\nkey = [{{ field = \"ingress_port\", match = \"exact\" }}]\ndefault_action = \"{action}\"\n"
        );
        load_str(&text, Path::new("m.toml")).unwrap_err().to_string()
    };
    let cases = [
        ("type = \"srtcm\"\ncir = 0\ncbs = 1\nebs = 1", "meter(m)", "meter[0].cir"),
        ("type = \"srtcm\"\ncir = 10\ncbs = 0\nebs = 0", "meter(m)", "meter[0].cbs and ebs"),
        ("type = \"trtcm\"\ncir = 10\ncbs = 1\npir = 5\npbs = 1", "meter(m)", "meter[0].pir"),
        ("type = \"trtcm\"\ncir = 10\ncbs = 1\npbs = 1", "meter(m)", "meter[0].pir"),
        ("type = \"srtcm\"\ncir = 10\ncbs = 1\nebs = 1\npir = 20", "meter(m)", "meter[0].pir"),
        ("type = \"srTCM\"\ncir = 10\ncbs = 1", "meter(m)", "meter[0].type"),
        ("type = \"srtcm\"\ncir = 10\ncbs = 1\nebs = 1\nsize = 0", "meter(m)", "meter[0].size"),
        ("type = \"srtcm\"\ncir = 10\ncbs = 1\nebs = 1", "meter(n)", "no [[meter]] named"),
        ("type = \"srtcm\"\ncir = 10\ncbs = 1\nebs = 1\ndirect = true", "meter(m, ipv4.src)", "direct meter"),
        ("type = \"srtcm\"\ncir = 10\ncbs = 1\nebs = 1", "meter(m, ipv9.src)", "unknown field"),
        ("type = \"srtcm\"\ncir = 10\ncbs = 1\nebs = 1", "police(m, blue=drop)", "unknown argument"),
        ("type = \"srtcm\"\ncir = 10\ncbs = 1\nebs = 1", "set_color(blue)", "green, yellow or red"),
    ];
    for (meter, action, want) in cases {
        let e = refused(meter, action);
        assert!(e.contains("m.toml"), "{e}");
        assert!(e.contains(want), "{meter} / {action}: {e}");
    }
}
