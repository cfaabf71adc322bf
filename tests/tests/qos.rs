//! Egress scheduling through the real binary (`[port.qos]`): strict priority and DWRR under a
//! port shaper, and queue-depth ECN marking on the shared cases. Every input carries capture
//! timestamps and the schedulers run on capture time, so each run is deterministic; at the end
//! of the input the clock runs on until every queue is empty (sent + dropped == offered).

use dataplane::parse::{parse, Layers};
use dataplane::sched::ecn::locate_ip;
use dataplane::wire::gradient::DEFAULT_UDP_PORT;
use dataplane::wire::icrc;
use functional_tests::frames::Udp4;
use functional_tests::*;
use serde_json::Value;

/// Bytes a frame costs on the wire beyond its length without FCS (FCS, preamble, SFD, IFG).
const OVERHEAD: u64 = 24;

/// Two ports, port 1 with `qos` as its `[port.qos]` section; every frame is forwarded to port 1.
fn config(qos: &str) -> String {
    format!("{EAL}{TO_PORT1}\n[[port]]\nname = \"in\"\nvdev = \"net_null0\"\n[[port]]\nname = \"out\"\nvdev = \"net_null1\"\n{qos}")
}

/// Replays `frames` (capture time µs, bytes) into port 0 through `qos`; returns port 1's output
/// and the run.
fn replay(name: &str, qos: &str, frames: &[(u64, Vec<u8>)]) -> (Vec<Vec<u8>>, Run) {
    let dir = scratch(name);
    let conf = write_config(&dir, "c.toml", &config(qos));
    let input = dir.join("in.pcap");
    write_pcap_at(&input, frames);
    let out = dir.join("out.pcap");
    let run = run_dpu(&dir, &conf, &[format!("--rx=0={}", input.display()), format!("--tx=1={}", out.display())]);
    run.assert_ok();
    (read_pcap(&out), run)
}

/// Port 1's class `c` in the stats.
fn class(run: &Run, c: u64) -> Value {
    let all = run.stats()["qos"].as_array().expect("qos in the stats").clone();
    all.into_iter().find(|q| q["port"] == 1 && q["class"] == c).unwrap_or_else(|| panic!("no class {c}"))
}

fn pkts(q: &Value, k: &str) -> u64 {
    q[k]["packets"].as_u64().unwrap()
}

fn bytes(q: &Value, k: &str) -> u64 {
    q[k]["bytes"].as_u64().unwrap()
}

/// Line bytes of `k` (frames + 24 each).
fn wire(q: &Value, k: &str) -> u64 {
    bytes(q, k) + OVERHEAD * pkts(q, k)
}

/// What strict priority leaves the low class `c0` on the [`RATE`] line over `span` µs: the
/// line's bytes, the rest after what the high class `c1` sent, what `c0` sent (line bytes), and
/// the relative error of the latter against the rest.
fn rest_of_line(span: u64, c0: &Value, c1: &Value) -> (u64, u64, u64, f64) {
    let line = RATE * span / 1_000_000;
    let rest = line - wire(c1, "sent");
    let got = wire(c0, "sent");
    (line, rest, got, (got as f64 - rest as f64).abs() / rest as f64)
}

/// Every packet offered to the class was sent or dropped, and none is left queued.
fn balanced(q: &Value, offered: u64) {
    assert_eq!(pkts(q, "sent") + pkts(q, "tail_drop") + pkts(q, "red_drop"), offered, "{q}");
    assert_eq!(pkts(q, "enqueued"), pkts(q, "sent"), "nothing left queued: {q}");
}

/// 1000-byte UDP frames of DSCP `dscp`, one every `every_us` from `start_us` for `span_us`.
fn stream(dscp: u8, start_us: u64, every_us: u64, span_us: u64) -> Vec<(u64, Vec<u8>)> {
    let f = Udp4 { dscp, payload: vec![0x5a; 1000 - 42], ..Default::default() }.build();
    assert_eq!(f.len(), 1000);
    (0..).map(|i| start_us + i * every_us).take_while(|t| *t < start_us + span_us).map(|t| (t, f.clone())).collect()
}

fn merged(mut a: Vec<(u64, Vec<u8>)>, b: Vec<(u64, Vec<u8>)>) -> Vec<(u64, Vec<u8>)> {
    a.extend(b);
    a.sort_by_key(|(t, _)| *t);
    a
}

const T0: u64 = 1_000_000;
/// Port rate in the shaping tests: 1e6 bytes/s of line (1 byte per µs).
const RATE: u64 = 1_000_000;
/// Capture span of the shaping tests (µs).
const SPAN: u64 = 2_000_000;

/// The strict-priority tests' `[port.qos]`: two classes on the [`RATE`] line, DSCP 46 in class 1,
/// 3000 bytes per queue.
const STRICT: &str = r#"
[port.qos]
classes = 2
rate = 1000000
dscp_map = { 46 = 1 }
[[port.qos.class]]
capacity_bytes = 3000
[[port.qos.class]]
capacity_bytes = 3000
"#;

/// Strict priority under the shaper: class 1 (DSCP 46) offered half the line, class 0 the whole
/// line. Class 1 gets all of its load; class 0 gets the rest of the line over the capture's
/// span (within 1%); the surplus is tail-dropped.
#[test]
fn strict_priority_gives_the_high_class_its_load_and_the_low_class_the_rest() {
    let high = stream(46, T0, 2048, SPAN); // 1024 line bytes / 2048 µs = 0.5e6 B/s
    let low = stream(0, T0 + 7, 1024, SPAN); // 1e6 B/s
    let (nh, nl) = (high.len() as u64, low.len() as u64);
    let frames = merged(high, low);
    let span = frames.last().unwrap().0 - frames[0].0;
    let (out, run) = replay("qos-strict", STRICT, &frames);
    let (c0, c1) = (class(&run, 0), class(&run, 1));
    balanced(&c0, nl);
    balanced(&c1, nh);
    assert_eq!(out.len() as u64, pkts(&c0, "sent") + pkts(&c1, "sent"));
    assert_eq!(run.drops("tail_drop"), pkts(&c0, "tail_drop") + pkts(&c1, "tail_drop"));
    // The high class: its full offered load.
    assert_eq!((pkts(&c1, "sent"), pkts(&c1, "tail_drop")), (nh, 0), "{c1}");
    // The low class: the rest of the line over the span.
    let (line, rest, got, err) = rest_of_line(span, &c0, &c1);
    println!(
        "strict: line {line} B over {span} us; high sent {} B (offered {}), low sent {got} B of the rest {rest} B: error {:.3}%",
        wire(&c1, "sent"),
        nh * 1024,
        err * 100.0
    );
    assert!(err < 0.01, "low class {got} line bytes, the rest of the line is {rest}");
    assert!(pkts(&c0, "tail_drop") > 0, "the low class was offered more than the rest: {c0}");
    let line = format!("qos port 1 class 1: enqueued {nh} pkts {} bytes, sent {nh} pkts", nh * 1000);
    assert!(run.stdout().contains(&line) || run.stderr().contains(&line), "{line:?} in the report");
}

/// DWRR under the shaper: class 1 (DSCP 10, weight 3) and class 0 (weight 1) both offered the
/// whole line: they share it 3:1 (within 2% of each weight's share).
#[test]
fn dwrr_shares_the_line_by_weight() {
    let a = stream(10, T0, 1024, SPAN);
    let b = stream(0, T0 + 3, 1024, SPAN);
    let (na, nb) = (a.len() as u64, b.len() as u64);
    let qos = r#"
[port.qos]
classes = 2
policy = "dwrr"
rate = 1000000
dscp_map = { 10 = 1 }
class = [{ capacity_bytes = 3000, weight = 1 }, { capacity_bytes = 3000, weight = 3 }]
"#;
    let (out, run) = replay("qos-dwrr", qos, &merged(a, b));
    let (c0, c1) = (class(&run, 0), class(&run, 1));
    balanced(&c0, nb);
    balanced(&c1, na);
    assert_eq!(out.len() as u64, pkts(&c0, "sent") + pkts(&c1, "sent"));
    let total = (wire(&c0, "sent") + wire(&c1, "sent")) as f64;
    let (s0, s1) = (wire(&c0, "sent") as f64 / total, wire(&c1, "sent") as f64 / total);
    println!("dwrr: shares class 0 {s0:.4} (weight 1/4), class 1 {s1:.4} (weight 3/4)");
    assert!((s0 - 0.25).abs() / 0.25 < 0.02, "class 0 share {s0}");
    assert!((s1 - 0.75).abs() / 0.75 < 0.02, "class 1 share {s1}");
}

/// The shared cases c05, c06, c07 and c10 through a queue that marks every packet (Kmin = Kmax
/// = 0 bytes): each ECT packet leaves with CE and valid checksums and ICRC, only the ECN bits
/// (and the IPv4 checksum) changed; each Not-ECT packet is dropped `red_drop`, not marked.
#[test]
fn a_queue_marking_at_depth_0_sets_ce_on_every_ect_packet_and_drops_not_ect() {
    let names = [
        "c05_ipv4_ce_mark_cksum_becomes_0000.pcap",
        "c06_ecn_codepoints.pcap",
        "c07_ipv6_tc_ecn_flowlabel.pcap",
        "c10_rocev2_ipv4_icrc.pcap",
    ];
    let mut frames = Vec::new();
    for n in names {
        frames.extend(read_pcap(&case(&format!("pcap/{n}"))));
    }
    let inputs: Vec<(u64, Vec<u8>)> = frames.into_iter().enumerate().map(|(i, f)| (T0 + 10 * i as u64, f)).collect();
    // What the tables forward (what parses), split by ECN capability.
    let forwarded: Vec<&Vec<u8>> =
        inputs.iter().map(|(_, f)| f).filter(|f| parse(f, DEFAULT_UDP_PORT).is_ok()).collect();
    let ect: Vec<&Vec<u8>> =
        forwarded.iter().copied().filter(|f| locate_ip(f).is_some_and(|(_, _, ecn)| ecn != 0)).collect();
    let not_ect = forwarded.len() - ect.len();
    assert!(!ect.is_empty() && not_ect > 0, "the cases hold both ECT and Not-ECT packets");
    let qos = r#"
[port.qos]
[[port.qos.class]]
kmin = 0
kmax = 0
"#;
    let (out, run) = replay("qos-ecn", qos, &inputs);
    let c0 = class(&run, 0);
    balanced(&c0, forwarded.len() as u64);
    assert_eq!(pkts(&c0, "red_drop"), not_ect as u64, "{c0}");
    assert_eq!(run.drops("red_drop"), not_ect as u64);
    assert_eq!(pkts(&c0, "ecn_marked"), ect.len() as u64);
    assert_eq!(out.len(), ect.len());
    let (mut zero_checksums, mut rocev2) = (0, 0);
    for (i, (o, f)) in out.iter().zip(&ect).enumerate() {
        let (l3, family, ecn) = locate_ip(o).unwrap();
        assert_eq!(ecn, 3, "frame {i} leaves with CE");
        let p = parse(o, DEFAULT_UDP_PORT).unwrap_or_else(|r| panic!("frame {i}: {r:?} after marking"));
        let changed: Vec<usize> = (0..o.len()).filter(|&k| o[k] != f[k]).collect();
        if family == Layers::IPV4 {
            assert!(changed.iter().all(|&k| [l3 + 1, l3 + 10, l3 + 11].contains(&k)), "frame {i}: {changed:?}");
            assert_eq!(o[l3 + 1] >> 2, f[l3 + 1] >> 2, "DSCP kept");
            zero_checksums += u32::from(ipv4_checksum_is_a_full_recompute(o, l3) == 0);
        } else {
            // Only the two ECN bits of the traffic class: version, DSCP and flow label kept.
            assert!(changed.iter().all(|&k| k == l3 + 1), "frame {i}: {changed:?}");
            assert_eq!(o[l3 + 1] & !0x30, f[l3 + 1] & !0x30);
            assert_eq!(&o[l3 + 1..l3 + 4], &[f[l3 + 1] | 0x30, f[l3 + 2], f[l3 + 3]][..], "flow label kept");
        }
        if p.has(Layers::BTH) {
            // The IP datagram (without Ethernet padding): IPv4 total length, or IPv6 40 + payload.
            let len = if family == Layers::IPV4 {
                u16::from_be_bytes([o[l3 + 2], o[l3 + 3]]) as usize
            } else {
                40 + u16::from_be_bytes([o[l3 + 4], o[l3 + 5]]) as usize
            };
            let l4 = p.l4_offset as usize;
            assert_eq!(icrc::verify(&o[l3..l3 + len], l4 - l3), Ok(true), "frame {i}: RoCEv2 ICRC valid");
            rocev2 += 1;
        }
    }
    assert!(zero_checksums > 0, "c05's checksum becomes 0x0000");
    assert!(rocev2 > 0, "c10's RoCEv2 packets were marked");
}

/// Two workers, each receiving on its own port and sending to port 2, whose `[port.qos]` is
/// `qos`: replays `a` into port 0 (worker 0, the owner of port 2's scheduler) and `b` into port
/// 1 (worker 1, which reaches the scheduler over a ring); returns port 2's output and the run.
fn replay_two_workers(name: &str, qos: &str, a: &[(u64, Vec<u8>)], b: &[(u64, Vec<u8>)]) -> (Vec<Vec<u8>>, Run) {
    let dir = scratch(name);
    let conf = format!(
        "{TWO_WORKERS}\n[[table]]\nname = \"l2\"\nkey = [{{ field = \"eth.dst\", match = \"exact\" }}]\ndefault_action = \"forward(2)\"\n\
         [[port]]\nvdev = \"net_null0\"\n[[port]]\nvdev = \"net_null1\"\n[[port]]\nvdev = \"net_null2\"\n{qos}"
    );
    let conf = write_config(&dir, "c.toml", &conf);
    write_pcap_at(&dir.join("a.pcap"), a);
    write_pcap_at(&dir.join("b.pcap"), b);
    let out = dir.join("out.pcap");
    let args = ["--rx=0=a.pcap".to_string(), "--rx=1=b.pcap".to_string(), format!("--tx=2={}", out.display())];
    let run = run_dpu(&dir, &conf, &args);
    run.assert_ok();
    (read_pcap(&out), run)
}

/// Port 2's class `c` in the stats.
fn class2(run: &Run, c: u64) -> Value {
    let all = run.stats()["qos"].as_array().expect("qos in the stats").clone();
    all.into_iter().find(|q| q["port"] == 2 && q["class"] == c).unwrap_or_else(|| panic!("no class {c}"))
}

/// Two workers, each offering port 2 twice its rate `R`: one lcore owns port 2's scheduler and
/// the other reaches it over a ring, so the port sends `R` in all (within 1% over the capture's
/// span; with a scheduler per worker it sent 2R), nothing is lost on the ring, and neither
/// worker ends with packets queued.
#[test]
fn with_two_workers_the_port_sends_its_rate_in_all() {
    let (a, b) = (stream(0, T0, 512, SPAN), stream(0, T0 + 5, 512, SPAN)); // each 2x the rate
    let n = (a.len() + b.len()) as u64;
    let span = b.last().unwrap().0 - a[0].0;
    let qos = "[port.qos]\nrate = 1000000\n[[port.qos.class]]\ncapacity_bytes = 3000\n";
    let (out, run) = replay_two_workers("qos-two-workers", qos, &a, &b);
    let c0 = class2(&run, 0);
    balanced(&c0, n);
    assert_eq!(run.drops("qos_ring_full"), 0);
    let line = (RATE * span / 1_000_000) as f64;
    let got = wire(&c0, "sent") as f64;
    println!("two workers: port sent {got} line bytes, rate x span = {line}");
    assert!((got / line - 1.0).abs() < 0.01, "{got} vs {line}");
    assert!(pkts(&c0, "tail_drop") > 0, "offered twice the rate: {c0}");
    assert_eq!(out.len() as u64, pkts(&c0, "sent"));
}

/// Strict priority across workers: worker 1 (not the owner) offers class 1 (DSCP 46) half the
/// line over the ring, worker 0 (the owner) offers class 0 the whole line. Class 1 gets all of
/// its load; class 0 gets the rest of the line over the capture's span (within 1%).
#[test]
fn with_two_workers_strict_priority_holds_across_workers() {
    let low = stream(0, T0 + 7, 1024, SPAN); // 1e6 B/s, on worker 0
    let high = stream(46, T0, 2048, SPAN); // 0.5e6 B/s, on worker 1
    let (nh, nl) = (high.len() as u64, low.len() as u64);
    let span = low.last().unwrap().0.max(high.last().unwrap().0) - T0;
    let (out, run) = replay_two_workers("qos-two-workers-strict", STRICT, &low, &high);
    let (c0, c1) = (class2(&run, 0), class2(&run, 1));
    balanced(&c0, nl);
    balanced(&c1, nh);
    assert_eq!(run.drops("qos_ring_full"), 0);
    assert_eq!(out.len() as u64, pkts(&c0, "sent") + pkts(&c1, "sent"));
    assert_eq!((pkts(&c1, "sent"), pkts(&c1, "tail_drop")), (nh, 0), "the high class gets its load: {c1}");
    let (line, rest, got, err) = rest_of_line(span, &c0, &c1);
    println!(
        "two workers, strict: line {line} B; high sent {} B, low sent {got} B of the rest {rest} B: error {:.3}%",
        wire(&c1, "sent"),
        err * 100.0
    );
    assert!(err < 0.01, "low class {got} line bytes, the rest of the line is {rest}");
    assert!(pkts(&c0, "tail_drop") > 0, "the low class was offered more than the rest: {c0}");
}
