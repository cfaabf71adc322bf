//! AllReduce through the real binary, checked by the project's own assertions and by the shared
//! independent checker (gradcheck.py), which replays the inputs through the spec and checks
//! every RESULT and NAK the appliance sent.

use functional_tests::grad::*;
use functional_tests::split::*;
use functional_tests::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Replays `inputs` into port 0 with `conf`, runs gradcheck, and returns the stats.
fn replay_and_check(dir: &Path, conf: &Path, inputs: &[PathBuf]) -> Value {
    let out = dir.join("out.pcap");
    let mut args: Vec<String> = inputs.iter().map(|i| format!("--rx=0={}", i.display())).collect();
    args.push(format!("--tx=0={}", out.display()));
    let run = run_dpu(dir, conf, &args);
    run.assert_ok();
    let ins: Vec<&Path> = inputs.iter().map(|p| p.as_path()).collect();
    let (ok, text) = gradcheck(conf, &ins, &[&out]);
    assert!(ok, "gradcheck failed for {}:\n{text}", conf.display());
    let s = run.stats().clone();
    assert_eq!(s["mbufs_in_use_after"], 0, "the mempool is back at its baseline");
    s
}

fn workload(name: &str, args: &[&str]) -> Value {
    let dir = scratch(name);
    pktgen(&dir, args);
    let s = replay_and_check(&dir, &dir.join("appliance.toml"), &[dir.join("input.pcap")]);
    let expected: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    let results = s["aggregation"]["results"].as_u64().unwrap() + s["aggregation"]["resends"].as_u64().unwrap();
    let due = expected["counts"]["result_packets"].as_u64().expect("expected.json: counts.result_packets");
    assert_eq!(results, due, "{name}: RESULT packets sent vs due");
    s
}

const DTYPES: [&str; 4] = ["f32", "f16", "bf16", "i32"];
const OPS: [&str; 3] = ["sum", "max", "min"];

#[test]
fn every_dtype_and_op_udp_ipv4() {
    for dt in DTYPES {
        for op in OPS {
            let s = workload(
                &format!("udp4-{dt}-{op}"),
                &[
                    "--workers",
                    "4",
                    "--tensor-elements",
                    "1000",
                    "--chunk-elements",
                    "256",
                    "--dtype",
                    dt,
                    "--op",
                    op,
                    "--non-deterministic",
                ],
            );
            assert_eq!(s["aggregation"]["completed"], 4, "{dt} {op}: 4 slots");
        }
    }
}

#[test]
fn rocev2_ipv4_every_dtype() {
    for (i, dt) in DTYPES.iter().enumerate() {
        workload(
            &format!("roce4-{dt}"),
            &[
                "--workers",
                "3",
                "--tensor-elements",
                "777",
                "--chunk-elements",
                "128",
                "--dtype",
                dt,
                "--op",
                OPS[i % 3],
                "--carriage",
                "rocev2",
            ],
        );
    }
}

#[test]
fn ipv6_with_vlan_both_carriages() {
    for carriage in ["udp", "rocev2"] {
        for (i, dt) in DTYPES.iter().enumerate() {
            workload(
                &format!("v6-{carriage}-{dt}"),
                &[
                    "--workers",
                    "3",
                    "--tensor-elements",
                    "500",
                    "--chunk-elements",
                    "100",
                    "--dtype",
                    dt,
                    "--op",
                    OPS[(i + 1) % 3],
                    "--carriage",
                    carriage,
                    "--family",
                    "v6",
                    "--vlan",
                    "42",
                ],
            );
        }
    }
}

/// pktgen's impairments: contributions shuffled, 10% dropped, 10% duplicated and the share
/// `late` of them retransmitted late.
fn impaired(late: &str) -> [&str; 7] {
    ["--shuffle", "--drop", "0.1", "--duplicate", "0.1", "--late", late]
}

#[test]
fn loss_duplication_reordering_and_late_retransmissions() {
    for det in [true, false] {
        let mut args = vec!["--workers", "8", "--tensor-elements", "4096", "--chunk-elements", "256", "--rounds", "3"];
        args.extend(impaired("0.1"));
        if !det {
            args.push("--non-deterministic");
        }
        let s = workload(&format!("impaired-{det}"), &args);
        assert!(s["aggregation"]["resends"].as_u64().unwrap() > 0, "late retransmissions were answered");
        assert!(s["drops"]["grad_duplicate"].as_u64().unwrap() > 0, "duplicates were dropped");
        assert_eq!(s["aggregation"]["completed"], 48, "16 slots x 3 rounds");
    }
}

#[test]
fn jumbo_chunks_of_1024_lanes_rocev2() {
    let s = workload(
        "jumbo",
        &[
            "--workers",
            "4",
            "--tensor-elements",
            "8192",
            "--chunk-elements",
            "1024",
            "--carriage",
            "rocev2",
            "--rounds",
            "2",
        ],
    );
    assert_eq!(s["drops"]["multi_segment"], 0);
    assert_eq!(s["aggregation"]["completed"], 16);
}

/// A hand-built scenario: round overlap, stale and premature rounds with NAKs, a slot timeout
/// on capture timestamps, malformed and spoofed contributions, and a second collective whose
/// traffic interleaves with the first's.
#[test]
fn rules_naks_timeouts_spoofing_and_two_tenants() {
    let dir = scratch("rules");
    let a = Coll { id: 1, n: 2, tensor: 8, chunk: 4, extra: "slot_timeout_ms = 50", ..Default::default() };
    let b = Coll { id: 2, op: "max", dtype: "i32", n: 3, tensor: 4, chunk: 4, ..Default::default() };
    let conf = write_config(
        &dir,
        "c.toml",
        &format!(
            "{EAL}[mempool]\nmbufs = 4095\n[dataplane]\nreplay_idle_ms = 3000\n{PORT}\n{}\n{}",
            a.toml(),
            b.toml()
        ),
    );
    let one = f32s(&[1.0; 4]);
    let two = f32s(&[2.0; 4]);
    let i32s = |v: i32| -> Vec<u8> { [v; 4].iter().flat_map(|x| x.to_le_bytes()).collect() };
    let t0 = 1_700_000_000_000_000u64;
    let ms = 1000u64;
    let mut f: Vec<(u64, Vec<u8>)> = vec![
        // Collective 1, slot 0, round 0: complete.
        (t0, a.frame(0, 0, 0, &one, |_| {})),
        (t0 + ms, b.frame(0, 0, 7, &i32s(5), |_| {})), // tenant 2 interleaves
        (t0 + 2 * ms, a.frame(1, 0, 0, &two, |_| {})),
        // Round 1 starts; a late round-0 contribution is answered from the kept result
        // (overlap); round 3 is premature: NAK 7 carrying round 1.
        (t0 + 3 * ms, a.frame(0, 0, 1, &two, |_| {})),
        (t0 + 4 * ms, a.frame(1, 0, 0, &two, |_| {})),
        (t0 + 5 * ms, a.frame(1, 0, 3, &two, |_| {})),
        (t0 + 6 * ms, a.frame(1, 0, 1, &two, |_| {})),
        // Slot 4: rank 0 contributes, then nothing for 100 ms (> 50 ms timeout): reclaimed;
        // rank 1 then starts it afresh and rank 0 resends.
        (t0 + 10 * ms, a.frame(0, 4, 0, &f32s(&[100.0; 4]), |_| {})),
        (t0 + 110 * ms, a.frame(1, 4, 0, &two, |_| {})),
        (t0 + 111 * ms, a.frame(0, 4, 0, &one, |s| s.header.flags = 0x2)),
        // Spoofed: rank 1's header from rank 0's address, and a wrong UDP port: NAK 5.
        (t0 + 200 * ms, a.frame(0, 0, 2, &one, |s| s.header.worker_rank = 1)),
        (t0 + 400 * ms, a.frame(1, 0, 2, &one, |s| s.src_port = 40000)),
        // Malformed: a bad length (NAK 6), an unknown collective (NAK 1), a result on input
        // (dropped, no NAK).
        (t0 + 600 * ms, b.frame(1, 0, 7, &i32s(1), |s| s.header.data_length = 6)),
        (t0 + 800 * ms, a.frame(1, 0, 2, &one, |s| s.header.collective_id = 9)),
        (t0 + 900 * ms, a.frame(1, 0, 2, &one, |s| s.header.flags = 0x1)),
        // Tenant 2 completes despite tenant 1's bad traffic.
        (t0 + 950 * ms, b.frame(1, 0, 7, &i32s(-3), |_| {})),
        (t0 + 960 * ms, b.frame(2, 0, 7, &i32s(9), |_| {})),
    ];
    // A frame with a bad UDP checksum is dropped before any of this, without a NAK.
    let mut bad = a.frame(0, 0, 2, &one, |_| {});
    let n = bad.len();
    bad[n - 1] ^= 0xff;
    f.push((t0 + 970 * ms, bad));
    let input = dir.join("in.pcap");
    write_pcap_at(&input, &f);
    let s = replay_and_check(&dir, &conf, &[input]);
    let agg = &s["aggregation"];
    assert_eq!(agg["completed"], 4, "c1 slot 0 rounds 0 and 1, c1 slot 4, c2 slot 0");
    assert_eq!(agg["resends"], 1);
    assert_eq!(agg["slot_timeouts"], 1);
    let d = &s["drops"];
    for (reason, n) in [
        ("grad_stale_round", 1),
        ("grad_not_member", 2),
        ("grad_bad_length", 1),
        ("grad_unknown_collective", 1),
        ("grad_result_or_nak_input", 1),
        ("bad_udp_checksum", 1),
    ] {
        assert_eq!(d[reason], n, "{reason}");
    }
    assert_eq!(agg["naks"], 5, "stale, two spoofed, bad length, unknown collective");
}

#[test]
fn two_concurrent_collectives_from_the_generator() {
    let dir = scratch("tenants");
    let d1 = pktgen(
        &dir.join("a"),
        &["--workers", "4", "--tensor-elements", "2048", "--collective-id", "1", "--shuffle", "--drop", "0.1"],
    );
    let d2 = pktgen(
        &dir.join("b"),
        &[
            "--workers",
            "4",
            "--tensor-elements",
            "1024",
            "--collective-id",
            "2",
            "--dtype",
            "bf16",
            "--seed",
            "7",
            "--duplicate",
            "0.2",
        ],
    );
    // One config with both collectives: the first's file plus the second's [[collective]].
    let c1 = std::fs::read_to_string(d1.join("appliance.toml")).unwrap();
    let c2 = std::fs::read_to_string(d2.join("appliance.toml")).unwrap();
    let second = &c2[c2.find("[[collective]]").unwrap()..];
    let conf = write_config(&dir, "both.toml", &format!("{c1}\n{second}"));
    let s = replay_and_check(&dir, &conf, &[d1.join("input.pcap"), d2.join("input.pcap")]);
    assert_eq!(s["aggregation"]["completed"], 8 + 4);
}

/// Two worker lcores (mapped onto the 2 CPUs), two ports, two collectives: every slot's
/// contributions arrive half on port 0 (polled by worker 1) and half on port 1 (worker 2), so
/// each worker hands the other's collective over its ring. Results stay exact.
#[test]
fn two_workers_with_contributions_split_across_ports() {
    let dir = scratch("multicore");
    // One round each: the two ports' files are read concurrently, so a later round from one
    // file could overtake an earlier one from the other (real workers wait for the result).
    let d1 =
        pktgen(&dir.join("a"), &["--workers", "4", "--tensor-elements", "4096", "--collective-id", "1", "--shuffle"]);
    let d2 = pktgen(
        &dir.join("b"),
        &[
            "--workers",
            "4",
            "--tensor-elements",
            "2048",
            "--collective-id",
            "2",
            "--dtype",
            "f32",
            "--non-deterministic",
        ],
    );
    // Split every input by rank: ranks 0-1 arrive on port 0, ranks 2-3 on port 1.
    let (in0, in1) = split_by_rank(&dir, &[&d1, &d2], |r| r / 2);
    // The config: both collectives, members 2-3 reached through port 1.
    let colls = format!("{}\n{}", collectives_via_ports(&d1, 2..4), collectives_via_ports(&d2, 2..4));
    let text = format!("{TWO_WORKERS}\n{SPLIT_PORTS}{colls}");
    let conf = write_config(&dir, "c.toml", &text);
    let (o0, o1) = (dir.join("out0.pcap"), dir.join("out1.pcap"));
    let run = run_two_ports(&dir, &conf, &in0, &in1, Some((&o0, &o1)));
    run.assert_ok();
    let s = run.stats();
    assert_eq!(s["workers"], 2);
    assert_eq!(s["aggregation"]["completed"], 16 + 8);
    assert_eq!(s["drops"]["hand_off_full"], 0);
    // Half of each collective's contributions arrive at the worker that does not own it.
    assert_eq!(s["aggregation"]["handed_off"], (16 + 8) * 4 / 2);
    // A handed-off packet is counted once, as received on its port by the worker that polled it.
    for i in 0..2 {
        assert_eq!(s["ports"][i]["workers"]["rx_packets"], s["ports"][i]["ethdev"]["ipackets"], "port {i}");
    }
    let rx = |i: usize| s["ports"][i]["workers"]["rx_packets"].as_u64().unwrap();
    assert_eq!(rx(0) + rx(1), (16 + 8) * 4);
    assert_eq!(s["mbufs_in_use_after"], 0);
    // Results to ranks 0-1 leave on port 0, to ranks 2-3 on port 1.
    assert_results_stay_on_their_ports([&o0, &o1], (16 + 8) * 2, 2);
    let (ok, text) = gradcheck(&conf, &[&in0, &in1], &[&o0, &o1]);
    assert!(ok, "{text}");
}

/// Section 5's limit, at most one NAK per source per 100 ms, holds for the appliance, not per
/// worker: with two worker lcores, one source refused on both (an unknown collective arriving on
/// each port, bad offsets for collectives owned by different workers, handed over) gets one NAK
/// per 100 ms.
#[test]
fn nak_rate_limit_holds_per_source_across_workers() {
    let dir = scratch("nak-two-workers");
    let a = Coll { id: 1, n: 2, tensor: 4, chunk: 4, ..Default::default() };
    let b = Coll { id: 2, n: 2, tensor: 4, chunk: 4, ..Default::default() };
    let text = format!(
        r#"{TWO_WORKERS}
[dataplane]
replay_idle_ms = 3000
{PORT}
[[port]]
name = "p1"
vdev = "net_null1"
mac = "02:00:00:00:00:fe"
ipv4 = "10.0.0.254"
{}
{}"#,
        a.toml(),
        b.toml()
    );
    let conf = write_config(&dir, "c.toml", &text);
    let one = f32s(&[1.0; 4]);
    let t0 = 1_700_000_000_000_000u64;
    let ms = 1000u64;
    // Every refused packet comes from rank 0's address. Collective 1 belongs to worker 1 (port 0),
    // collective 2 to worker 2 (port 1); each port also carries the other's.
    let p0 = vec![
        (t0, a.frame(0, 0, 0, &one, |s| s.header.collective_id = 9)),
        (t0 + 10 * ms, b.frame(0, 2, 0, &one, |_| {})),
        (t0 + 200 * ms, a.frame(0, 0, 0, &one, |s| s.header.collective_id = 9)),
        // Collective 1 completes, so that there are results to check.
        (t0 + 400 * ms, a.frame(0, 0, 0, &one, |_| {})),
        (t0 + 401 * ms, a.frame(1, 0, 0, &one, |_| {})),
    ];
    let p1 = vec![
        (t0 + 20 * ms, b.frame(0, 0, 0, &one, |s| s.header.collective_id = 9)),
        (t0 + 30 * ms, a.frame(0, 2, 0, &one, |_| {})),
        (t0 + 220 * ms, b.frame(0, 0, 0, &one, |s| s.header.collective_id = 9)),
    ];
    let (in0, in1) = (dir.join("in0.pcap"), dir.join("in1.pcap"));
    write_pcap_at(&in0, &p0);
    write_pcap_at(&in1, &p1);
    let (o0, o1) = (dir.join("out0.pcap"), dir.join("out1.pcap"));
    let run = run_two_ports(&dir, &conf, &in0, &in1, Some((&o0, &o1)));
    run.assert_ok();
    let s = run.stats();
    assert_eq!(s["workers"], 2);
    assert_eq!(s["aggregation"]["handed_off"], 2);
    assert_eq!(s["drops"]["grad_unknown_collective"], 4);
    assert_eq!(s["drops"]["grad_bad_offset"], 2);
    // Whatever the order the two workers take their packets in: the first refusal (at 0 or
    // 20 ms) is answered, the others within 100 ms of it are not, then one of those at 200 and
    // 220 ms is.
    assert_eq!(s["aggregation"]["naks"], 2, "one NAK per source per 100 ms");
    assert_eq!(s["aggregation"]["naks_suppressed"], 4);
    assert_eq!(s["mbufs_in_use_after"], 0);
    let naks: usize = [&o0, &o1].iter().map(|o| read_pcap(o).iter().filter(|f| f[42] & 0x0f == 0x4).count()).sum();
    assert_eq!(naks, 2);
    let (ok, text) = gradcheck(&conf, &[&in0, &in1], &[&o0, &o1]);
    assert!(ok, "{text}");
}

/// Exact values (`--values exact`) written by the pcap writer, replayed through an appliance that
/// is not deterministic (float sums in arrival order) with shuffled, dropped, duplicated and late
/// contributions: the independent checker passes, and every RESULT the appliance sent (UDP over
/// IPv4, no tag: the gradient header at byte 42) carries `expected.json`'s payload of its
/// (round, offset) bit for bit, for every dtype.
#[test]
fn exact_values_give_the_reference_in_any_arrival_order() {
    for (i, dt) in DTYPES.iter().enumerate() {
        let name = format!("exact-{dt}");
        let dir = scratch(&name);
        let op = OPS[i % 3];
        pktgen(
            &dir,
            &[
                "--values",
                "exact",
                "--workers",
                "5",
                "--tensor-elements",
                "1000",
                "--chunk-elements",
                "128",
                "--dtype",
                dt,
                "--op",
                op,
                "--rounds",
                "3",
                "--first-round",
                "4294967295",
                "--non-deterministic",
            ]
            .into_iter()
            .chain(impaired("0.05"))
            .collect::<Vec<_>>(),
        );
        let s = replay_and_check(&dir, &dir.join("appliance.toml"), &[dir.join("input.pcap")]);
        assert_eq!(s["aggregation"]["completed"], 3 * 8, "{name}: 8 slots x 3 rounds");
        let expected: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
        assert_eq!(expected["params"]["values"], "exact");
        let want: std::collections::HashMap<(u64, u64), String> = expected["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| ((r["round"].as_u64().unwrap(), r["offset"].as_u64().unwrap()), r["payload"].to_string()))
            .collect();
        assert_eq!(want.len(), 3 * 8);
        let be32 = |b: &[u8]| u32::from_be_bytes(b.try_into().unwrap()) as u64;
        let mut checked = 0;
        for f in read_pcap(&dir.join("out.pcap")) {
            let h = &f[42..62];
            assert_eq!(h[0] & 0x0f, 0x1, "{name}: only RESULTs (no NAK)");
            let (offset, len, round) = (be32(&h[8..12]), be32(&h[12..16]) as usize, be32(&h[16..20]));
            let hex: String = f[62..62 + len].iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(format!("\"{hex}\""), want[&(round, offset)], "{name}: round {round} offset {offset}");
            checked += 1;
        }
        let due = expected["counts"]["result_packets"].as_u64().unwrap();
        assert_eq!(checked, due, "{name}: every RESULT due was sent and checked");
        assert!(checked >= 3 * 8 * 5);
    }
}

/// `[dataplane] zero_copy_results`: each completion's frames are one payload shared by the
/// members' header mbufs (DPDK indirect mbufs; RoCEv2 with a third mbuf for the ICRC), sent as
/// chains through net_pcap. The results file is frame for frame the one copy mode writes, the
/// checker passes it, and every mbuf is back in the pool at the end (the shared payloads'
/// references all released). UDP over IPv4, RoCEv2 over IPv6, RoCEv2 over IPv4 with a VLAN
/// tag; shuffled, with duplicates and late copies (resends) and drops.
#[test]
fn zero_copy_results_are_the_frames_copy_mode_sends() {
    for (name, carriage, family, vlan) in [
        ("zc-udp4", "udp", "ipv4", None),
        ("zc-roce6", "rocev2", "ipv6", None),
        ("zc-roce4-vlan", "rocev2", "ipv4", Some("7")),
    ] {
        let dir = scratch(name);
        let mut args: Vec<&str> = "--workers 4 --tensor-elements 1000 --chunk-elements 256 --rounds 3 --shuffle \
                                   --duplicate 0.05 --late 0.05 --drop 0.02 --non-deterministic"
            .split_whitespace()
            .collect();
        args.extend(["--carriage", carriage, "--family", family]);
        if let Some(v) = vlan {
            args.extend(["--vlan", v]);
        }
        pktgen(&dir, &args);
        let copy_conf = dir.join("appliance.toml");
        let text = std::fs::read_to_string(&copy_conf).unwrap();
        assert!(text.contains("[dataplane]\n"), "{name}: generated config without [dataplane]");
        let zc_conf = write_config(
            &dir,
            "zero-copy.toml",
            &text.replacen("[dataplane]\n", "[dataplane]\nzero_copy_results = true\n", 1),
        );
        let input = dir.join("input.pcap");
        let mut outs = Vec::new();
        for (conf, out) in [(&copy_conf, dir.join("copy.pcap")), (&zc_conf, dir.join("zc.pcap"))] {
            let run =
                run_dpu(&dir, conf, &[format!("--rx=0={}", input.display()), format!("--tx=0={}", out.display())]);
            run.assert_ok();
            assert_eq!(
                run.stats()["mbufs_in_use_after"],
                0,
                "{name}: {}: the mempool is back at its baseline",
                conf.display()
            );
            assert_eq!(run.drops("no_mbuf"), 0, "{name}");
            // Three of every four result frames of a full chunk's completion share a payload.
            let a = &run.stats()["aggregation"];
            let shared = a["shared_results"].as_u64().unwrap();
            if conf == &zc_conf {
                assert!(shared >= 3 * 3 * 3 * 9 / 10, "{name}: {a}");
                assert!(shared < a["results"].as_u64().unwrap(), "{name}: {a}");
            } else {
                assert_eq!(shared, 0, "{name}: {a}");
            }
            let (ok, text) = gradcheck(conf, &[&input], &[&out]);
            assert!(ok, "{name}: gradcheck failed for {}:\n{text}", conf.display());
            outs.push(read_pcap(&out));
        }
        assert!(outs[0].len() >= 4 * 4 * 3 * 9 / 10, "{name}: {} frames", outs[0].len());
        assert_eq!(outs[0].len(), outs[1].len(), "{name}");
        for (i, (c, z)) in outs[0].iter().zip(&outs[1]).enumerate() {
            assert!(c == z, "{name}: frame {i} differs");
        }
    }
}
