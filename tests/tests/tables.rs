//! Tables through the real binary: LPM routing, a ternary ACL with priorities, VLAN push/pop,
//! multicast to three ports with different rewrites. Every output is checked by our own
//! assertions and dissected by tshark (checksums validated) where it is installed.

use functional_tests::frames::{tshark_fields, Udp4};
use functional_tests::*;
use std::path::PathBuf;

fn ports(n: usize) -> String {
    let mut s = EAL.to_string();
    for i in 0..n {
        s += &format!("[[port]]\nname = \"p{i}\"\nvdev = \"net_null{i}\"\n");
    }
    s
}

/// Replays `frames` into port 0 and returns each port's output frames.
fn replay(name: &str, conf: &str, nports: usize, frames: &[Vec<u8>]) -> (Vec<Vec<Vec<u8>>>, Run, Vec<PathBuf>) {
    let dir = scratch(name);
    let conf = write_config(&dir, "c.toml", conf);
    let input = dir.join("in.pcap");
    write_pcap(&input, &frames.iter().map(|f| (f.clone(), None)).collect::<Vec<_>>());
    let outs: Vec<PathBuf> = (0..nports).map(|i| dir.join(format!("out{i}.pcap"))).collect();
    let mut args = vec![format!("--rx=0={}", input.display())];
    for (i, o) in outs.iter().enumerate() {
        args.push(format!("--tx={i}={}", o.display()));
    }
    let run = run_dpu(&dir, &conf, &args);
    run.assert_ok();
    let got = outs.iter().map(|o| read_pcap(o)).collect();
    (got, run, outs)
}

fn ip(d: &[u8]) -> [u8; 4] {
    [d[0], d[1], d[2], d[3]]
}

/// `nports` null ports, then `tables`.
fn config(nports: usize, tables: &str) -> String {
    format!("{}{tables}", ports(nports))
}

/// tshark (where installed) finds every frame of each output capture, `outs[i]` holding
/// `got[i]`, with good IPv4 and UDP checksums.
fn checksums_valid_by_tshark(outs: &[PathBuf], got: &[Vec<Vec<u8>>]) {
    for (pcap, frames) in outs.iter().zip(got) {
        let Some(lines) = tshark_fields(pcap, &["ip.checksum.status", "udp.checksum.status"]) else {
            return;
        };
        assert_eq!(lines.len(), frames.len());
        for l in lines {
            assert_eq!(l, "1\t1", "tshark: IPv4 and UDP checksums good (status 1), got {l:?}");
        }
    }
}

#[test]
fn lpm_routes_by_longest_prefix() {
    let conf = config(
        3,
        r#"
[[table]]
name = "route"
key = [{ field = "ipv4.dst", match = "lpm" }]
default_action = "drop"
entry = [
    { key = ["10.0.0.0/8"], action = "forward(0); dec_ttl" },
    { key = ["10.1.0.0/16"], action = "forward(1); dec_ttl" },
    { key = ["10.1.2.0/24"], action = "forward(2); dec_ttl; set_eth_dst(02:00:00:00:02:02)" },
    { key = ["10.1.2.3/32"], action = "forward(0); dec_ttl" },
]
"#,
    );
    let dsts: [[u8; 4]; 6] = [[10, 9, 9, 9], [10, 1, 9, 9], [10, 1, 2, 9], [10, 1, 2, 3], [11, 0, 0, 1], [10, 1, 2, 4]];
    let frames: Vec<Vec<u8>> = dsts.iter().map(|d| Udp4 { dst: *d, ..Default::default() }.build()).collect();
    let (got, run, outs) = replay("lpm", &conf, 3, &frames);
    let dst_of = |f: &Vec<u8>| ip(&f[30..34]);
    assert_eq!(got[0].iter().map(dst_of).collect::<Vec<_>>(), vec![dsts[0], dsts[3]]);
    assert_eq!(got[1].iter().map(dst_of).collect::<Vec<_>>(), vec![dsts[1]]);
    assert_eq!(got[2].iter().map(dst_of).collect::<Vec<_>>(), vec![dsts[2], dsts[5]]);
    assert!(got[2].iter().all(|f| f[..6] == [2, 0, 0, 0, 2, 2]));
    assert!(got.iter().flatten().all(|f| f[22] == 63), "TTL decremented");
    assert_eq!(run.drops("table_miss"), 1, "11.0.0.1 has no route");
    checksums_valid_by_tshark(&outs, &got);
    let t = &run.stats()["tables"];
    let hits: Vec<u64> = (0..5).map(|i| t[i]["counter"]["packets"].as_u64().unwrap()).collect();
    assert_eq!(hits, vec![1, 1, 2, 1, 1], "per-entry counters, then misses");
}

#[test]
fn ternary_acl_takes_the_highest_priority() {
    let conf = config(
        2,
        r#"
[[table]]
name = "acl"
key = [{ field = "ipv4.src", match = "ternary" }, { field = "udp.dst_port", match = "range" }]
default_action = "forward(1)"
entry = [
    { key = ["10.0.0.0 &&& 255.0.0.0", "*"], priority = 10, action = "forward(0); count(tens)" },
    { key = ["10.6.0.0 &&& 255.255.0.0", "1000->1999"], priority = 20, action = "drop" },
    { key = ["10.6.6.6", "1500"], priority = 30, action = "set_dscp(46); forward(1)" },
    { key = ["*", "7000->7999"], priority = 5, action = "drop" },
]
"#,
    );
    let cases: [([u8; 4], u16); 6] = [
        ([10, 1, 1, 1], 80),      // p10 -> port 0
        ([10, 6, 1, 1], 1200),    // p20 drop (beats p10)
        ([10, 6, 6, 6], 1500),    // p30 -> port 1 with DSCP 46 (beats p20, p10)
        ([10, 6, 1, 1], 2500),    // outside the range: p10 -> port 0
        ([192, 168, 0, 1], 7500), // p5 drop
        ([192, 168, 0, 1], 80),   // miss -> port 1
    ];
    let frames: Vec<Vec<u8>> =
        cases.iter().map(|(s, p)| Udp4 { src: *s, dport: *p, ..Default::default() }.build()).collect();
    let (got, run, outs) = replay("acl", &conf, 2, &frames);
    let src_of = |f: &Vec<u8>| ip(&f[26..30]);
    assert_eq!(got[0].iter().map(src_of).collect::<Vec<_>>(), vec![cases[0].0, cases[3].0]);
    assert_eq!(got[1].iter().map(src_of).collect::<Vec<_>>(), vec![cases[2].0, cases[5].0]);
    assert_eq!(got[1][0][15] >> 2, 46);
    assert_eq!(got[1][1][15] >> 2, 0);
    assert_eq!(run.drops("explicit_drop"), 2);
    checksums_valid_by_tshark(&outs, &got);
}

#[test]
fn vlan_push_and_pop() {
    let conf = config(
        2,
        r#"
[[table]]
name = "vlan"
key = [{ field = "vlan.outer_valid", match = "exact" }]
default_action = "drop"
entry = [
    { key = [0], action = "push_vlan(100); forward(1)" },
    { key = [1], action = "pop_vlan; forward(0)" },
]
"#,
    );
    let untagged = Udp4::default().build();
    let tagged = Udp4 { vlan: Some(42), ..Default::default() }.build();
    let (got, _run, outs) = replay("vlan", &conf, 2, &[untagged.clone(), tagged.clone()]);
    assert_eq!(got[1], vec![[&untagged[..12], &[0x81, 0x00, 0x00, 100], &untagged[12..]].concat()]);
    assert_eq!(got[0], vec![untagged.clone()], "popping the tag gives the untagged frame back");
    if let Some(lines) = tshark_fields(&outs[1], &["vlan.id", "ip.checksum.status", "udp.checksum.status"]) {
        assert_eq!(lines, vec!["100\t1\t1"]);
    }
}

#[test]
fn multicast_to_three_ports_with_different_rewrites() {
    let conf = config(
        4,
        r#"
[[multicast_group]]
id = 1
copy = [
    { port = 1, actions = "set_eth_dst(02:00:00:00:01:01)" },
    { port = 2, actions = "set_eth_dst(02:00:00:00:02:02); push_vlan(200)" },
    { port = 3, actions = "set_eth_dst(02:00:00:00:03:03); set_dscp(10); mark_ecn" },
]

[[table]]
name = "mc"
key = [{ field = "ipv4.dst", match = "exact" }]
default_action = "drop"
entry = [{ key = ["239.1.1.1"], action = "multicast(1)" }]
"#,
    );
    let f = Udp4 { dst: [239, 1, 1, 1], ecn: 2, payload: vec![7; 100], ..Default::default() }.build();
    let (got, run, outs) = replay("mcast", &conf, 4, &[f.clone(), f.clone()]);
    assert!(got[0].is_empty());
    for (p, frames) in got.iter().enumerate().skip(1) {
        assert_eq!(frames.len(), 2, "port {p}");
        assert_eq!(frames[0], frames[1]);
    }
    let mut want1 = f.clone();
    want1[..6].copy_from_slice(&[2, 0, 0, 0, 1, 1]);
    assert_eq!(got[1][0], want1);
    let mut want2 = [&f[..12], &[0x81, 0x00, 0x00, 200], &f[12..]].concat();
    want2[..6].copy_from_slice(&[2, 0, 0, 0, 2, 2]);
    assert_eq!(got[2][0], want2);
    let g3 = &got[3][0];
    assert_eq!(&g3[..6], &[2, 0, 0, 0, 3, 3]);
    assert_eq!(g3[15], (10 << 2) | 3, "DSCP 10, CE");
    assert_eq!(&g3[16..], &f[16..24].iter().chain(&g3[24..26]).chain(&f[26..]).cloned().collect::<Vec<_>>()[..]);
    assert_eq!(run.stats()["ports"][0]["workers"]["rx_packets"], 2);
    checksums_valid_by_tshark(&outs[1..], &got[1..]);
}

#[test]
fn named_counters_are_reported_in_the_stats() {
    let conf = config(
        2,
        r#"
[[table]]
name = "acl"
key = [{ field = "udp.dst_port", match = "exact" }]
default_action = "count(acl_pass); forward(0)"
entry = [
    { key = [9000], action = "count(port9000); forward(1)" },
    { key = [9001], action = "count(acl_pass); forward(1)" },
]
"#,
    );
    // Three frames to 9000, one to 9001 and one to 80 (a miss): every length different.
    let cases: [(u16, usize); 5] = [(9000, 10), (9001, 20), (9000, 100), (80, 0), (9000, 50)];
    let frames: Vec<Vec<u8>> =
        cases.iter().map(|(p, n)| Udp4 { dport: *p, payload: vec![7; *n], ..Default::default() }.build()).collect();
    let lens: Vec<u64> = frames.iter().map(|f| f.len() as u64).collect();
    assert_eq!(lens, vec![52, 62, 142, 42, 92]);
    let (got, run, _) = replay("named-counters", &conf, 2, &frames);
    assert_eq!((got[0].len(), got[1].len()), (1, 4));
    let s = run.stats();
    let counter = |name: &str| run.named_counter(name);
    assert_eq!(counter("port9000"), (3, 52 + 142 + 92));
    assert_eq!(counter("acl_pass"), (2, 62 + 42), "the entry for 9001 and the miss");
    assert_eq!(s["counters"].as_array().unwrap().len(), 2);
    // The same packets and bytes as the per-entry counters of the entries that count them.
    let t = &s["tables"];
    assert_eq!((t[0]["counter"]["packets"].as_u64(), t[0]["counter"]["bytes"].as_u64()), (Some(3), Some(286)));
    // And in the text stats.
    let out = run.stdout();
    for want in [
        format!("counter {:<18} {:>10} pkts {:>12} bytes", "port9000", 3, 286),
        format!("counter {:<18} {:>10} pkts {:>12} bytes", "acl_pass", 2, 104),
    ] {
        assert!(out.lines().any(|l| l == want), "no line {want:?} in:\n{out}");
    }
}
