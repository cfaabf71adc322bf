//! Aggregation as a table action (`aggregate`): gradient traffic goes through the pipeline
//! first, so a table decides per tenant what is summed; what reaches no `aggregate` is counted,
//! and a config without the action keeps aggregating every gradient packet addressed to the
//! appliance before the tables.

use dataplane::wire::build::IpAddrBytes;
use functional_tests::frames::Udp4;
use functional_tests::grad::*;
use functional_tests::*;
use std::path::{Path, PathBuf};

const T0: u64 = 1_700_000_000_000_000;

/// Collective 7 (three members) is summed; collective 8 (two members) has no entry; frames that
/// are not gradient packets hit an entry that aggregates them anyway. `aggregate` ends the
/// pipeline: the `l2` table after it, which would send everything back out, sees nothing.
const TENANTS: &str = r#"
[[table]]
name = "tenants"
key = [{ field = "gradient.valid", match = "exact" }, { field = "gradient.collective_id", match = "exact" }]
default_action = "count(unmatched); exit"
entry = [
    { key = [1, 7], action = "count(tenant7); aggregate" },
    { key = [0, 0], action = "aggregate" },
]
[[table]]
name = "l2"
key = [{ field = "eth.dst", match = "exact" }]
default_action = "forward(0)"
"#;

fn colls() -> (Coll, Coll) {
    (
        Coll { id: 7, n: 3, tensor: 8, chunk: 4, ..Default::default() },
        Coll { id: 8, n: 2, tensor: 4, chunk: 4, ..Default::default() },
    )
}

/// Both collectives' contributions (every chunk of round 0, every rank) and one plain UDP frame.
fn input(dir: &Path) -> PathBuf {
    let (a, b) = colls();
    let mut frames = Vec::new();
    let mut t = T0;
    for off in [0u32, 4] {
        for k in 0..a.n {
            frames.push((t, a.frame(k, off, 0, &f32s(&[k as f32 + 1.0; 4]), |_| {})));
            t += 10;
        }
    }
    for k in 0..b.n {
        frames.push((t, b.frame(k, 0, 0, &f32s(&[2.0; 4]), |_| {})));
        t += 10;
    }
    frames.push((t, Udp4 { dst: [10, 0, 0, 254], ..Default::default() }.build()));
    let path = dir.join("in.pcap");
    write_pcap_at(&path, &frames);
    path
}

fn replay(dir: &Path, tables: &str) -> (PathBuf, Run, PathBuf, PathBuf) {
    let (a, b) = colls();
    let conf = write_config(dir, "c.toml", &format!("{EAL}{PORT}\n{}\n{}\n{tables}", a.toml(), b.toml()));
    let inp = input(dir);
    let (run, out) = run_on(dir, &conf, &inp);
    (conf, run, inp, out)
}

/// The appliance of `conf` on the capture `inp` (port 0 in and out): the run and its output.
fn run_on(dir: &Path, conf: &Path, inp: &Path) -> (Run, PathBuf) {
    let out = dir.join("out.pcap");
    let run = run_dpu(dir, conf, &[format!("--rx=0={}", inp.display()), format!("--tx=0={}", out.display())]);
    (run, out)
}

/// [`run_on`] `frames` (capture time in µs, frame), written to `dir/in.pcap`, which it returns
/// between the run (it succeeded) and the output.
fn run_frames(dir: &Path, conf: &Path, frames: &[(u64, Vec<u8>)]) -> (Run, PathBuf, PathBuf) {
    let inp = dir.join("in.pcap");
    write_pcap_at(&inp, frames);
    let (run, out) = run_on(dir, conf, &inp);
    run.assert_ok();
    (run, inp, out)
}

fn named(run: &Run, name: &str) -> u64 {
    run.named_counter(name).0
}

#[test]
fn only_what_a_table_aggregates_is_summed() {
    let dir = scratch("aggregate-action");
    let (conf, run, inp, out) = replay(&dir, TENANTS);
    run.assert_ok();
    // Collective 7: two chunks completed, each result sent to its three members.
    assert_eq!(read_pcap(&out).len(), 2 * 3, "{}", run.stderr());
    assert_eq!(named(&run, "tenant7"), 6, "every contribution of collective 7 went through its entry");
    // Collective 8 has no entry: its two contributions take the default action, which counts
    // them and sends them nowhere.
    assert_eq!(named(&run, "unmatched"), 2);
    assert_eq!(run.drops("grad_not_aggregated"), 2);
    // The plain UDP frame reaches `aggregate` but is no gradient packet.
    assert_eq!(run.drops("aggregate_not_gradient"), 1);
    assert_eq!(run.drops("no_egress"), 0);
    let l2 = &run.stats()["tables"].as_array().unwrap().iter().find(|t| t["table"] == "l2").unwrap()["counter"];
    assert_eq!(l2["packets"], 0, "aggregate and exit end the pipeline before l2");
    let (ok, text) = gradcheck_only(&conf, &[&inp], &[&out], 7);
    assert!(ok, "gradcheck failed:\n{text}");
}

#[test]
fn without_the_action_every_gradient_packet_for_the_appliance_is_summed() {
    let dir = scratch("aggregate-implicit");
    let (conf, run, inp, out) = replay(&dir, "");
    run.assert_ok();
    // Both collectives complete: 2 chunks x 3 members and 1 chunk x 2 members.
    assert_eq!(read_pcap(&out).len(), 2 * 3 + 2, "{}", run.stderr());
    assert_eq!(run.drops("grad_not_aggregated"), 0);
    // The plain UDP frame goes to the (empty) pipeline: no egress.
    assert_eq!(run.drops("no_egress"), 1);
    let (ok, text) = gradcheck(&conf, &[&inp], &[&out]);
    assert!(ok, "gradcheck failed:\n{text}");
}

/// Each collective's own counters in `--stats-json` and the text summary: collective 7 gets a
/// duplicate, a resend, a stale round and a round left in progress; collective 8 a spoofed
/// source. NAK-causing frames are 200 ms apart (the members share their sources between the
/// two collectives: one NAK per source per 100 ms).
#[test]
fn each_collective_reports_its_own_counters() {
    let dir = scratch("aggregate-per-collective");
    let (a, b) = colls();
    let pl = f32s(&[1.0; 4]);
    let mut frames = Vec::new();
    let mut t = T0;
    let mut push = |f: Vec<u8>, dt: u64| {
        frames.push((t, f));
        t += dt;
    };
    push(a.frame(0, 0, 0, &pl, |_| {}), 10);
    push(a.frame(0, 0, 0, &pl, |_| {}), 10); // duplicate
    push(a.frame(1, 0, 0, &pl, |_| {}), 10);
    push(a.frame(2, 0, 0, &pl, |_| {}), 10); // completes: 3 results
    push(a.frame(1, 0, 0, &pl, |_| {}), 10); // late: a resend
    push(a.frame(0, 0, 5, &pl, |_| {}), 200_000); // stale: NAK 7
    push(a.frame(2, 4, 0, &pl, |_| {}), 10); // slot 1's round stays in progress
    push(b.frame(0, 0, 0, &pl, |_| {}), 10);
    push(b.frame(1, 0, 0, &pl, |_| {}), 10); // completes: 2 results
    push(b.frame(1, 0, 0, &pl, |s| s.src_ip = IpAddrBytes::V4([10, 0, 0, 99])), 10); // spoofed: NAK 5
    let conf = write_config(&dir, "c.toml", &format!("{EAL}{PORT}\n{}\n{}\n", a.toml(), b.toml()));
    let (run, _, out) = run_frames(&dir, &conf, &frames);
    assert_eq!(read_pcap(&out).len(), 3 + 1 + 1 + 2 + 1, "results, resend, NAK, results, NAK");
    let colls = run.stats()["collectives"].as_array().unwrap();
    assert_eq!(colls.len(), 2);
    let c7 = &colls[0];
    assert_eq!(c7["collective"], 7);
    let got = |c: &serde_json::Value, k: &str| c[k].as_u64().unwrap_or_else(|| panic!("no {k} in {c}"));
    let fields =
        ["completed", "folded", "payload_bytes", "results", "resends", "naks", "slot_timeouts", "slots_in_use"];
    let row = |c| fields.map(|k| got(c, k));
    assert_eq!(row(c7), [1, 4, 64, 3, 1, 1, 0, 1]);
    assert_eq!(c7["naks_by_reason"]["stale_round"], 1);
    assert_eq!(c7["drops"]["grad_duplicate"], 1);
    assert_eq!(c7["drops"]["grad_stale_round"], 1);
    assert_eq!(c7["drops"]["grad_not_member"], 0);
    let c8 = &colls[1];
    assert_eq!(c8["collective"], 8);
    assert_eq!(row(c8), [1, 2, 32, 2, 0, 1, 0, 0]);
    assert_eq!(c8["naks_by_reason"]["not_member"], 1);
    assert_eq!(c8["naks_by_reason"]["stale_round"], 0);
    assert_eq!(c8["drops"]["grad_not_member"], 1);
    // They sum to the global counters.
    let agg = &run.stats()["aggregation"];
    for k in ["completed", "folded", "payload_bytes", "results", "resends", "naks"] {
        assert_eq!(got(c7, k) + got(c8, k), got(agg, k), "{k}");
    }
    let text = run.stdout() + &run.stderr();
    assert!(
        text.contains("collective 7: 1 rounds completed, 4 contributions folded (64 bytes), 3 results sent, 1 resends, 1 NAKs (0 suppressed), 0 slot timeouts, 0 probes (0 statuses sent); dropped 1 stale, 1 duplicate, 0 spoofed, 0 other refused; 1 slots in use"),
        "{text}"
    );
    assert!(text.contains("collective 8: 1 rounds completed"), "{text}");
}

/// Section 5: a NAK can never be used to amplify traffic, so a refused packet whose source is
/// no one host's gets none: IPv4 sources 255.255.255.255, 0.0.0.0, 224.0.0.1, 127.0.0.1 and the
/// appliance's own 10.0.0.254, IPv6 ff02::1, :: and ::1, a broadcast or multicast Ethernet
/// source, UDP source port 0. Each is still counted under its drop reason, and the NAK not sent
/// in `naks_suppressed`; a unicast stranger refused after them (within 100 ms) gets its NAK.
#[test]
fn naks_never_go_to_a_group_nobody_or_the_appliance() {
    let dir = scratch("aggregate-nak-sources");
    let a = Coll { id: 7, n: 2, tensor: 4, chunk: 4, ..Default::default() };
    let b = Coll { id: 8, n: 2, tensor: 4, chunk: 4, v6: true, ..Default::default() };
    let pl = f32s(&[1.0; 4]);
    let v6 = |s: &str| IpAddrBytes::V6(s.parse::<std::net::Ipv6Addr>().unwrap().octets());
    let unknown = |s: &mut dataplane::wire::build::FrameSpec| s.header.collective_id = 99;
    let mut frames = Vec::new();
    let mut t = T0;
    for ip in [[255; 4], [0; 4], [224, 0, 0, 1], [127, 0, 0, 1], [10, 0, 0, 254]] {
        frames.push((t, a.frame(0, 0, 0, &pl, |s| s.src_ip = IpAddrBytes::V4(ip))));
        t += 10;
    }
    for ip in ["ff02::1", "::", "::1"] {
        frames.push((t, b.frame(0, 0, 0, &pl, |s| s.src_ip = v6(ip))));
        t += 10;
    }
    for mac in ["ff:ff:ff:ff:ff:ff", "01:00:5e:00:00:01"] {
        frames.push((
            t,
            a.frame(0, 0, 0, &pl, |s| {
                s.src_mac = mac.parse().unwrap();
                unknown(s);
            }),
        ));
        t += 10;
    }
    frames.push((
        t,
        a.frame(0, 0, 0, &pl, |s| {
            s.src_port = 0;
            unknown(s);
        }),
    ));
    t += 10;
    // A unicast stranger: its NAK (5, not the rank's member).
    frames.push((t, a.frame(0, 0, 0, &pl, |s| s.src_ip = IpAddrBytes::V4([10, 0, 0, 66]))));
    let conf = write_config(&dir, "c.toml", &format!("{EAL}{PORT}\n{}\n{}\n", a.toml(), b.toml()));
    let (run, _, out) = run_frames(&dir, &conf, &frames);
    let sent = read_pcap(&out);
    assert_eq!(sent.len(), 1, "only the stranger's NAK: {sent:02x?}");
    // To the stranger's MAC and address, from the appliance's.
    assert_eq!(&sent[0][0..12], &[2, 0, 0, 0, 1, 0, 2, 0, 0, 0, 0, 0xfe], "member 0's MAC, the appliance's");
    assert_eq!(&sent[0][26..34], &[10, 0, 0, 254, 10, 0, 0, 66]);
    let s = run.stats();
    assert_eq!((&s["aggregation"]["naks"], &s["aggregation"]["naks_suppressed"]), (&1.into(), &11.into()));
    assert_eq!(run.drops("grad_not_member"), 9);
    assert_eq!(run.drops("grad_unknown_collective"), 3);
}

#[test]
fn aggregate_without_collectives_is_a_config_error() {
    let dir = scratch("aggregate-no-collective");
    let conf = write_config(&dir, "c.toml", &format!("{EAL}{PORT}\n{TENANTS}"));
    let run = run_dpu(&dir, &conf, &[]);
    assert_eq!(run.code(), 2, "{}", run.stderr());
    assert!(run.stderr().contains("table[0]"), "{}", run.stderr());
    assert!(run.stderr().contains("no [[collective]]"), "{}", run.stderr());
}

/// A tenant's gradient traffic over its meter is policed before it is summed, while another
/// tenant's AllReduce stays exact (the checker on that tenant alone).
#[test]
fn a_tenant_over_its_meter_is_policed_while_another_stays_exact() {
    let dir = scratch("aggregate-police");
    let a = Coll { id: 1, n: 3, tensor: 16, chunk: 4, ..Default::default() };
    let b = Coll { id: 2, n: 2, tensor: 16, chunk: 4, ..Default::default() };
    let len = a.frame(0, 0, 0, &f32s(&[0.0; 4]), |_| {}).len() as u64;
    // srTCM with room for exactly three of tenant 1's contributions (CBS = 3 frames, EBS 0) and a
    // rate too low to refill within the capture: the first chunk's three contributions are
    // green, the other nine red (RFC 2697 section 3).
    let tables = format!(
        r#"
[[meter]]
name = "tenant1"
type = "srtcm"
cir = 1
cbs = {cbs}
ebs = 0
[[table]]
name = "tenants"
key = [{{ field = "gradient.collective_id", match = "exact" }}]
default_action = "drop"
entry = [
    {{ key = [1], action = "police(tenant1); aggregate" }},
    {{ key = [2], action = "aggregate" }},
]
"#,
        cbs = 3 * len
    );
    let conf = write_config(&dir, "c.toml", &format!("{EAL}{PORT}\n{}\n{}\n{tables}", a.toml(), b.toml()));
    let mut frames = Vec::new();
    let mut t = T0;
    for off in (0..16).step_by(4) {
        for (c, n) in [(&a, 3), (&b, 2)] {
            for k in 0..n {
                frames.push((t, c.frame(k, off, 0, &f32s(&[k as f32 + 0.5; 4]), |_| {})));
                t += 5;
            }
        }
    }
    let (run, inp, out) = run_frames(&dir, &conf, &frames);
    let m = &run.stats()["meters"][0];
    assert_eq!(
        (m["name"].as_str(), m["green"]["packets"].as_u64(), m["red"]["packets"].as_u64()),
        (Some("tenant1"), Some(3), Some(9))
    );
    assert_eq!(m["green"]["bytes"].as_u64(), Some(3 * len), "the meter counts whole frames");
    assert_eq!(run.drops("policed"), 9);
    // Tenant 1: chunk 0 completes (3 results); tenant 2: every chunk (4 x 2 results).
    assert_eq!(read_pcap(&out).len(), 3 + 8);
    assert_eq!(run.stats()["aggregation"]["completed"], 1 + 4);
    let (ok, text) = gradcheck_only(&conf, &[&inp], &[&out], 2);
    assert!(ok, "gradcheck on the other tenant failed:\n{text}");
    assert!(run.stdout().contains("meter tenant1"), "{}", run.stdout());
}

/// The largest chunk the default mbufs take (484 f32 lanes: 1998-byte frames untagged) folds
/// contributions whose headers carry what the loader allows for: rank 0's two VLAN tags
/// (802.1ad, 802.1Q) and 40 bytes of IPv4 options (2046 bytes), rank 1's options. Both chunks
/// complete, each result is the sum, and the checker agrees; nothing is dropped.
#[test]
fn the_largest_chunk_that_loads_takes_contributions_with_tags_and_options() {
    let dir = scratch("agg-fit");
    let c = Coll { n: 2, tensor: 968, chunk: 484, ..Default::default() };
    let conf = write_config(&dir, "c.toml", &format!("{EAL}{PORT}\n{}", c.toml()));
    let lanes = |k: usize, off: u32| f32s(&(0..484).map(|i| (k * 1000 + i + off as usize) as f32).collect::<Vec<_>>());
    let mut frames = Vec::new();
    for (i, off) in [0u32, 484].into_iter().enumerate() {
        let tagged = c.frame(0, off, 0, &lanes(0, off), |s| {
            s.outer_tag = Some((0x88a8, 20));
            s.vlan = Some(30);
        });
        let f0 = frames::with_ipv4_options(&tagged, 22);
        assert_eq!(f0.len(), 2046);
        let f1 = frames::with_ipv4_options(&c.frame(1, off, 0, &lanes(1, off), |_| {}), 14);
        frames.push((T0 + 10 * i as u64, f0));
        frames.push((T0 + 10 * i as u64 + 5, f1));
    }
    let (run, inp, out) = run_frames(&dir, &conf, &frames);
    let drops: u64 = run.stats()["drops"].as_object().unwrap().values().filter_map(|v| v.as_u64()).sum();
    assert_eq!(drops, 0, "{}", run.stderr());
    let got = read_pcap(&out);
    assert_eq!(got.len(), 4, "two results per chunk");
    for g in &got {
        let p = dataplane::parse::parse(g, dataplane::wire::gradient::DEFAULT_UDP_PORT).unwrap();
        let body = &g[p.udp_payload()];
        let off = u32::from_be_bytes(body[8..12].try_into().unwrap()) as usize;
        let sum: Vec<f32> = body[20..].chunks(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
        let want: Vec<f32> = (0..484).map(|i| (1000 + 2 * (i + off)) as f32).collect();
        assert_eq!(sum, want, "chunk at {off}");
    }
    let (ok, text) = gradcheck(&conf, &[&inp], &[&out]);
    assert!(ok, "{text}");
}
