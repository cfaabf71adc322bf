//! The soak test: one long replay on two worker lcores with everything a real fabric and a hostile
//! neighbour throw at the appliance at once: lost and retransmitted contributions, duplicates, late
//! retransmissions answered from kept results, malformed frames (bad checksums, bad ICRCs, runts,
//! truncated datagrams), a flood of spoofed sources, and a genuine member's stale contribution in
//! the middle of the flood. Every packet is handed from the worker that receives it to the worker
//! that owns its collective.
//!
//! The large collective (about 125k contributions) is checked by its counters; the small one, which
//! shares its port with the flood, by the shared checker as well. The run must end with every
//! round exact, every received packet accounted for (folded, answered from a kept result, or a
//! counted drop), no losses, and every mbuf back in the pool.

use functional_tests::grad::*;
use functional_tests::*;
use serde_json::Value;
use std::path::Path;

/// The two ports. With [`TWO_WORKERS`], lcore 1 polls port 0 and owns collective 1 (the first configured), lcore 2 polls
/// port 1 and owns collective 2. Each collective's traffic arrives on the other worker's port
/// (collective 1's on port 1, collective 2's on port 0), so every contribution is handed off.
const PORTS: &str = r#"[[port]]
name = "p0"
vdev = "net_null0"
mac = "02:00:00:00:00:fe"
ipv4 = "10.0.0.254"
ipv6 = "fd00::fe"
[[port]]
name = "p1"
vdev = "net_null1"
mac = "02:00:00:00:00:fd"
ipv4 = "10.0.0.254"
ipv6 = "fd00::fe"
"#;

/// Collective 1: 8 ranks, f32 sum over UDP/IPv4, 512 slots of 64 lanes, 30 rounds.
const BIG: (u64, u64, u64, u64) = (8, 32768, 64, 30);
/// Collective 2: 4 ranks, f32 sum over RoCEv2/IPv6, 16 slots of 256 lanes, 20 rounds.
const SMALL: (u64, u64, u64, u64) = (4, 4096, 256, 20);
/// Spoofed-source contributions in the flood (over 20 ms of capture time).
const FLOOD: usize = 2000;

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// Runs pktgen for one collective; returns its records, its `[[collective]]` tables and the
/// RESULT packets it expects (results plus resends).
fn generate(
    dir: &Path,
    id: u16,
    (workers, tensor, chunk, rounds): (u64, u64, u64, u64),
    extra: &[&str],
) -> (Vec<(u64, Vec<u8>)>, String, u64) {
    let d = dir.join(format!("c{id}"));
    let mut args = vec![
        "--workers".to_string(),
        workers.to_string(),
        "--tensor-elements".to_string(),
        tensor.to_string(),
        "--chunk-elements".to_string(),
        chunk.to_string(),
        "--rounds".to_string(),
        rounds.to_string(),
        "--collective-id".to_string(),
        id.to_string(),
        "--seed".to_string(),
        (id as u64 + 40).to_string(),
        "--drop".to_string(),
        "0.01".to_string(),
        "--duplicate".to_string(),
        "0.01".to_string(),
        "--late".to_string(),
        "0.01".to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    pktgen(&d, &argv);
    let t = std::fs::read_to_string(d.join("appliance.toml")).unwrap();
    let colls = t[t.find("[[collective]]").unwrap()..].to_string();
    let expected: Value = serde_json::from_str(&std::fs::read_to_string(d.join("expected.json")).unwrap()).unwrap();
    (read_pcap_records(&d.join("input.pcap")), colls, u(&expected["counts"]["result_packets"]))
}

/// A copy of `f` with one payload byte flipped: its UDP checksum no longer verifies.
fn corrupt(f: &[u8]) -> Vec<u8> {
    let mut c = f.to_vec();
    let i = c.len() - 9;
    c[i] ^= 0x5a;
    c
}

/// A copy of RoCEv2 frame `f` with two payload words swapped: the UDP checksum (a sum of 16-bit
/// words) still verifies, the ICRC (a CRC) does not.
fn corrupt_icrc(f: &[u8]) -> Vec<u8> {
    let mut c = f.to_vec();
    let i = c.len() - 12; // even: word-aligned as the UDP header (at 54) is
    assert_ne!(c[i..i + 2], c[i + 2..i + 4], "two different words to swap");
    c[i..i + 2].copy_from_slice(&f[i + 2..i + 4]);
    c[i + 2..i + 4].copy_from_slice(&f[i..i + 2]);
    c
}

#[test]
fn soak_two_workers_loss_duplicates_malformed_frames_and_a_flood() {
    let dir = scratch("soak");
    // Collective 1 (traffic arriving on port 1, members reached through port 1).
    let (mut big, big_colls, big_due) = generate(&dir, 1, BIG, &["--shuffle"]);
    let mut big_colls = big_colls;
    for k in 0..BIG.0 {
        big_colls = big_colls.replace(&format!("rank = {k}\n"), &format!("rank = {k}\nport = 1\n"));
    }
    // Collective 2 (traffic arriving on port 0, members on port 0), 20 µs between sends so that
    // the flood below lands in its middle.
    let (mut small, small_colls, small_due) =
        generate(&dir, 2, SMALL, &["--carriage", "rocev2", "--family", "v6", "--gap-us", "20"]);
    let conf = write_config(&dir, "soak.toml", &format!("{TWO_WORKERS}{PORTS}\n{big_colls}\n{small_colls}"));

    // Malformed frames, beside every 97th record: a copy with a flipped payload byte (bad UDP
    // checksum on collective 1, bad ICRC on collective 2), a runt, and (IPv4) a datagram cut
    // short of its total length.
    let mut extra_big = Vec::new();
    for (i, (t, f)) in big.iter().enumerate().step_by(97) {
        extra_big.push((*t, corrupt(f)));
        extra_big.push((*t, f[..10].to_vec()));
        if i % 2 == 0 {
            extra_big.push((*t, f[..40].to_vec()));
        }
    }
    let (bad_udp, runts_big, cut_v4) = (big.len().div_ceil(97), big.len().div_ceil(97), big.len().div_ceil(194));
    let mut extra_small = Vec::new();
    for (t, f) in small.iter().step_by(97) {
        extra_small.push((*t, corrupt_icrc(f)));
        extra_small.push((*t, f[..10].to_vec()));
    }
    let (bad_icrc, runts_small) = (small.len().div_ceil(97), small.len().div_ceil(97));

    // The flood: spoofed sources (fd00::1:x, not members) claiming collective 2's ranks, 10 µs
    // apart around the middle of its stream, and in the middle of the flood a genuine member's
    // contribution for round 0, long completed: stale, answered with NAK 7.
    let coll = Coll { id: 2, roce: true, v6: true, n: 4, tensor: SMALL.1, chunk: SMALL.2 as u32, ..Default::default() };
    let mid = small[small.len() / 2].0;
    let lanes = f32s(&vec![1.0; SMALL.2 as usize]);
    for i in 0..FLOOD {
        let spoofed = coll.frame(i % 4, 0, 0, &lanes, |s| {
            let mut a: [u8; 16] = "fd00::1:0".parse::<std::net::Ipv6Addr>().unwrap().octets();
            a[14] = (i >> 8) as u8;
            a[15] = i as u8;
            s.src_ip = dataplane::wire::build::IpAddrBytes::V6(a);
        });
        extra_small.push((mid - 10_000 + 10 * i as u64, spoofed));
    }
    extra_small.push((mid, coll.frame(1, SMALL.2 as u32 * 3, 0, &lanes, |_| {})));

    big.extend(extra_big);
    big.sort_by_key(|(t, _)| *t);
    small.extend(extra_small);
    small.sort_by_key(|(t, _)| *t);
    let (in0, in1) = (dir.join("in0.pcap"), dir.join("in1.pcap"));
    write_pcap_at(&in0, &small);
    write_pcap_at(&in1, &big);
    let (out0, out1) = (dir.join("out0.pcap"), dir.join("out1.pcap"));
    let run = run_dpu(
        &dir,
        &conf,
        &[
            format!("--rx=0={}", in0.display()),
            format!("--rx=1={}", in1.display()),
            format!("--tx=0={}", out0.display()),
            format!("--tx=1={}", out1.display()),
        ],
    );
    run.assert_ok();
    let s = run.stats();
    let a = &s["aggregation"];

    // Nothing lost, every mbuf back.
    assert_eq!(s["workers"], 2);
    assert_eq!(s["losses"], 0, "{}", run.stdout());
    assert_eq!(s["mbufs_in_use_after"], 0);

    // Every round of both collectives completed, every contribution folded once, every RESULT
    // (first sends and resends of kept results) the generator expects sent.
    let slots_rounds = |(_, t, c, r): (u64, u64, u64, u64)| t.div_ceil(c) * r;
    let rounds = slots_rounds(BIG) + slots_rounds(SMALL);
    let folded = slots_rounds(BIG) * BIG.0 + slots_rounds(SMALL) * SMALL.0;
    assert_eq!(u(&a["completed"]), rounds, "{}", run.stdout());
    assert_eq!(u(&a["folded"]), folded);
    assert_eq!(u(&a["results"]), folded, "one result per member per round");
    assert_eq!(u(&a["results"]) + u(&a["resends"]), big_due + small_due);
    assert_eq!(u(&a["slot_timeouts"]), 0);

    // Every malformed frame is a counted drop under its reason.
    let d = |r: &str| u(&s["drops"][r]);
    assert_eq!(d("bad_udp_checksum"), bad_udp as u64);
    assert_eq!(d("bad_icrc"), bad_icrc as u64);
    assert_eq!(d("runt"), (runts_big + runts_small) as u64);
    assert_eq!(d("malformed_ipv4"), cut_v4 as u64);
    assert_eq!(d("grad_not_member"), FLOOD as u64, "every spoofed contribution refused");
    assert_eq!(d("grad_stale_round"), 1, "the member's stale contribution");

    // rx = processed + counted drops: each received packet was folded, answered from a kept
    // result, or dropped under exactly one reason.
    let rx: u64 = (0..2).map(|i| u(&s["ports"][i]["workers"]["rx_packets"])).sum();
    assert_eq!(rx, (big.len() + small.len()) as u64, "every record received");
    let drops: u64 = s["drops"].as_object().unwrap().values().map(u).sum();
    assert_eq!(rx, folded + u(&a["resends"]) + drops, "{}", run.stdout());
    // Every gradient packet whose headers parse crosses to the other worker, which owns its
    // collective; the UDP checksum and ICRC are verified there, by the worker that folds.
    assert_eq!(u(&a["handed_off"]), rx - d("runt") - d("malformed_ipv4"));

    // The flood did not starve the member: its NAK 7 went out, to it.
    let member = "fd00::2".parse::<std::net::Ipv6Addr>().unwrap().octets();
    // RoCEv2 over IPv6: Ethernet 14, IPv6 40 (destination at 24..40), UDP 8, BTH 12, DETH 8,
    // then the gradient header (flags in the low nibble of byte 0, reason at byte 5).
    let naks_to_member: Vec<u8> = read_pcap(&out0)
        .iter()
        .filter(|f| f.len() >= 102 && f[12..14] == [0x86, 0xdd] && f[38..54] == member && f[82] & 0x4 != 0)
        .map(|f| f[87])
        .collect();
    assert_eq!(naks_to_member, vec![7], "the member's stale contribution got its NAK 7");
    assert!(u(&a["naks"]) <= FLOOD as u64 + 1, "never more NAKs than refused packets");

    // The small collective, which shared its port with the flood, passes the shared checker.
    let (ok, text) = gradcheck_only(&conf, &[&in0], &[&out0], 2);
    assert!(ok, "gradcheck failed:\n{text}");
}
