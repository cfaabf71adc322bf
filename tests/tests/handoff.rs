//! Software steering between worker lcores under load: two workers, each polling one port, hand
//! every contribution for the other's collective over its ring. A finite replay must lose
//! nothing, whatever the lcore layout: a worker whose hand-off ring lacks room stops taking rx
//! bursts until it drains, and the rings, bursts and tx buffers fit the mempool. Losses (packets
//! not processed for lack of resources) are reported and fail a replay.

use functional_tests::grad::*;
use functional_tests::split::*;
use functional_tests::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A workload of two collectives (ids 1 and 2, `workers` ranks each, one round per slot: the
/// order-independent kind that split inputs need), split by rank: ranks below `workers / 2`
/// arrive on port 0, the others on port 1. Collective 1 belongs to worker 1 (port 0), collective
/// 2 to worker 2 (port 1), so each worker hands half of what it receives to the other.
///
/// `tensors`: the two collectives' tensor elements; `chunk`: elements per chunk. Returns the
/// two inputs and the collectives' `[[collective]]` tables (members of the upper half on port
/// 1).
fn split_workload(dir: &Path, workers: usize, tensors: [u64; 2], chunk: u32) -> (PathBuf, PathBuf, String) {
    let mut workloads = Vec::new();
    let mut colls = String::new();
    for (i, tensor) in tensors.iter().enumerate() {
        let d = pktgen(
            &dir.join(format!("c{i}")),
            &[
                "--workers",
                &workers.to_string(),
                "--tensor-elements",
                &tensor.to_string(),
                "--chunk-elements",
                &chunk.to_string(),
                "--collective-id",
                &(i + 1).to_string(),
                "--seed",
                &(i + 7).to_string(),
                "--shuffle",
            ],
        );
        colls += &collectives_via_ports(&d, workers / 2..workers);
        colls.push('\n');
        workloads.push(d);
    }
    let (in0, in1) =
        split_by_rank(dir, &workloads.iter().map(PathBuf::as_path).collect::<Vec<_>>(), |r| r * 2 / workers);
    (in0, in1, colls)
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// Checks a split replay by its counters: every contribution received and folded, every round
/// completed, one result per member per round sent, nothing lost, the pool back to empty; half
/// of the contributions handed between the workers.
fn assert_lossless(run: &Run, contributions: u64, rounds: u64, members: u64) {
    // Half of each collective's contributions arrive on the port of the worker that does not
    // own it.
    assert_counts(run, contributions, rounds, rounds * members, contributions / 2);
}

/// [`assert_lossless`] with `results` results sent and `handed` contributions handed off.
fn assert_counts(run: &Run, contributions: u64, rounds: u64, results: u64, handed: u64) {
    run.assert_ok();
    let s = run.stats();
    assert_eq!(s["workers"], 2);
    assert_eq!(s["losses"], 0, "losses:\n{}", run.stdout());
    for r in ["rx_nombuf", "imissed", "no_mbuf", "tx_full", "hand_off_full"] {
        assert_eq!(s["drops"][r], 0, "{r}:\n{}", run.stdout());
    }
    let rx: u64 = (0..2).map(|i| u(&s["ports"][i]["workers"]["rx_packets"])).sum();
    assert_eq!(rx, contributions, "every record received");
    let a = &s["aggregation"];
    assert_eq!(u(&a["folded"]), contributions, "every contribution folded:\n{}", run.stdout());
    assert_eq!(u(&a["completed"]), rounds, "every round completed");
    assert_eq!(u(&a["results"]), results, "one result per member per round");
    assert_eq!(u(&a["resends"]), 0);
    assert_eq!(u(&a["handed_off"]), handed, "handed between the workers:\n{}", run.stdout());
    let sent: u64 = (0..2).map(|i| u(&s["ports"][i]["ethdev"]["opackets"])).sum();
    assert_eq!(sent, results, "every result left a port");
    assert_eq!(s["mbufs_in_use_after"], 0, "the mempool is back at its baseline");
}

/// 250,000 contributions (16 ranks, two collectives of 8000 and 7625 chunks of 64 f32 lanes),
/// split over two ports polled by two workers sharing the 2 CPUs with the main lcore: every
/// contribution is folded and every round completes. Without backpressure on the hand-off,
/// the faster worker filled the other's ring until the pool ran dry (12-34% lost as rx_nombuf
/// or hand_off_full, with exit status 0).
#[test]
fn two_workers_replay_250k_split_contributions_losslessly() {
    let dir = scratch("handoff-250k");
    let (in0, in1, colls) = split_workload(&dir, 16, [8000 * 64, 7625 * 64], 64);
    let conf = write_config(&dir, "c.toml", &format!("{TWO_WORKERS}\n{SPLIT_PORTS}\n{colls}"));
    let run = run_two_ports(&dir, &conf, &in0, &in1, None);
    assert_lossless(&run, 250_000, 15_625, 16);
    let s = run.stats();
    eprintln!(
        "250k split replay, two workers: {:.3} s in the appliance, {:.3} s in all, {:.3} Mpps of contributions",
        s["seconds"].as_f64().unwrap(),
        run.elapsed.as_secs_f64(),
        250_000.0 / s["seconds"].as_f64().unwrap() / 1e6
    );
}

/// A smaller split replay, checked packet by packet by the independent checker: the results
/// are exact and complete under backpressure too (shuffled contributions, 16 ranks, two
/// collectives).
#[test]
fn two_workers_split_replay_passes_the_checker() {
    let dir = scratch("handoff-check");
    let (in0, in1, colls) = split_workload(&dir, 16, [64 * 64, 32 * 64], 64);
    let conf = write_config(&dir, "c.toml", &format!("{TWO_WORKERS}\n{SPLIT_PORTS}\n{colls}"));
    let (o0, o1) = (dir.join("out0.pcap"), dir.join("out1.pcap"));
    let run = run_two_ports(&dir, &conf, &in0, &in1, Some((&o0, &o1)));
    assert_lossless(&run, (64 + 32) * 16, 64 + 32, 16);
    // Results to ranks 0-7 leave on port 0, to ranks 8-15 on port 1.
    assert_results_stay_on_their_ports([&o0, &o1], (64 + 32) * 8, 8);
    let (ok, text) = gradcheck(&conf, &[&in0, &in1], &[&o0, &o1]);
    assert!(ok, "{text}");
}

/// Both workers time-sharing one CPU (`--lcores 0@0,1@1,2@1`): a worker waiting for room in
/// the other's ring must not keep it from running and draining; the replay is lossless too.
#[test]
fn two_workers_sharing_one_cpu_lose_nothing() {
    let dir = scratch("handoff-one-cpu");
    let (in0, in1, colls) = split_workload(&dir, 16, [256 * 64, 128 * 64], 64);
    let layout = TWO_WORKERS.replace("0@0,1@0,2@1", "0@0,1@1,2@1");
    assert_ne!(layout, TWO_WORKERS);
    let conf = write_config(&dir, "c.toml", &format!("{layout}\n{SPLIT_PORTS}\n{colls}"));
    let run = run_two_ports(&dir, &conf, &in0, &in1, None);
    assert_lossless(&run, (256 + 128) * 16, 256 + 128, 16);
}

/// One worker polling both ports on the same input loses nothing either (the layout the
/// two-worker runs are compared with).
#[test]
fn one_worker_replay_of_the_split_input_is_lossless() {
    let dir = scratch("handoff-one");
    let (in0, in1, colls) = split_workload(&dir, 16, [256 * 64, 128 * 64], 64);
    let conf = write_config(&dir, "c.toml", &format!("{EAL}\n{SPLIT_PORTS}\n{colls}"));
    let run = run_two_ports(&dir, &conf, &in0, &in1, None);
    run.assert_ok();
    let s = run.stats();
    assert_eq!(s["workers"], 1);
    assert_eq!(s["losses"], 0);
    assert_eq!(u(&s["aggregation"]["folded"]), (256 + 128) * 16);
    assert_eq!(u(&s["aggregation"]["completed"]), 256 + 128);
    assert_eq!(u(&s["aggregation"]["handed_off"]), 0);
}

/// A mempool too small for the workers' bursts, tx buffers and hand-off rings is refused before
/// anything runs (exit status 2), naming the size to set: such a pool would run dry and the
/// ports would lose packets.
#[test]
fn a_pool_too_small_for_two_workers_is_refused_with_the_size_to_set() {
    let dir = scratch("handoff-pool");
    let (in0, in1, colls) = split_workload(&dir, 4, [4 * 64, 4 * 64], 64);
    // Each worker: burst 32 + 2 ports x 32 tx buffers + 1.5 x cache 32 = 144; rings of at
    // least twice the 32 free slots an rx burst waits for, 128 slots (127 mbufs) each:
    // 2 x 144 + 2 x 127 = 542.
    let conf = write_config(
        &dir,
        "c.toml",
        &format!("{TWO_WORKERS}\n[mempool]\nmbufs = 541\ncache = 32\n{SPLIT_PORTS}\n{colls}"),
    );
    let run = run_two_ports(&dir, &conf, &in0, &in1, None);
    assert_eq!(run.code(), 2, "{}", run.stderr());
    let e = run.stderr();
    assert!(e.contains("c.toml") && e.contains("mempool.mbufs"), "{e}");
    assert!(e.contains("expected at least 542 mbufs, found 541"), "{e}");
    assert!(run.stats.is_none(), "nothing ran");
    // One more mbuf and it runs, losslessly.
    let conf = write_config(
        &dir,
        "c.toml",
        &format!("{TWO_WORKERS}\n[mempool]\nmbufs = 542\ncache = 32\n{SPLIT_PORTS}\n{colls}"),
    );
    let run = run_two_ports(&dir, &conf, &in0, &in1, None);
    assert_lossless(&run, 2 * 4 * 4, 2 * 4, 4);
}

/// A replay that loses packets for lack of resources exits with status 1, naming the losses,
/// and still prints and writes its stats. Deterministically: the pool (64 mbufs, no per-lcore
/// cache) fits the worker's burst and tx buffers of single-mbuf frames, but these 7000-byte
/// frames are larger than the data room, so net_pcap reads each into a chain of 4 mbufs (2048
/// bytes in the first, after its headroom, 2176 in each next one): 16
/// records empty the pool, the 17th is read with no mbuf left and lost (`rx_nombuf`), and the
/// burst ends; the 16 chains, forwarded as any frame, meet no table and are dropped
/// (`no_egress`, a policy drop) and free the pool for the next burst. 85 records: 5 bursts of
/// 16, 5 records lost.
#[test]
fn a_replay_that_loses_packets_exits_1_and_names_the_losses() {
    let dir = scratch("handoff-loss");
    let frame = |i: usize| {
        let mut f = vec![0u8; 7000]; // 4 segments: more than 2048 + 2 x 2176 bytes
        f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 9]);
        f[12..14].copy_from_slice(&[0x88, 0xb5]);
        f[14] = i as u8;
        (f, None)
    };
    let input = dir.join("in.pcap");
    write_pcap(&input, &(0..85).map(frame).collect::<Vec<_>>());
    let conf = write_config(
        &dir,
        "c.toml",
        &format!("{EAL}\n[mempool]\nmbufs = 64\ncache = 0\n[[port]]\nvdev = \"net_null0\"\n"),
    );
    let run = run_dpu(&dir, &conf, &[format!("--rx=0={}", input.display())]);
    assert_eq!(run.code(), 1, "stdout:\n{}\nstderr:\n{}", run.stdout(), run.stderr());
    let s = run.stats();
    assert_eq!(s["ports"][0]["ethdev"]["rx_nombuf"], 5);
    assert_eq!(s["ports"][0]["ethdev"]["ipackets"], 80);
    assert_eq!(s["drops"]["rx_nombuf"], 5);
    assert_eq!(s["drops"]["no_egress"], 80);
    assert_eq!(s["losses"], 5, "no_egress is a policy drop, not a loss");
    assert_eq!(s["finite_replay"], true);
    assert_eq!(s["input_short"], false, "every record was consumed");
    assert_eq!(s["mbufs_in_use_after"], 0);
    let out = run.stdout();
    assert!(out.contains("drops: no_egress=80 rx_nombuf=5\n"), "{out}");
    assert!(out.contains("losses: 5 packets not processed for lack of resources (rx_nombuf=5)\n"), "{out}");
    let e = run.stderr();
    assert!(e.contains("dpu: error: the replay lost 5 packets for lack of resources (rx_nombuf=5)"), "{e}");
}

/// `[dataplane] shard_collectives = true`: collective 1 (UDP, 16 ranks, 64 chunks) is spread
/// over both workers by chunk (chunk k on worker k % 2), collective 2 (RoCEv2, 4 ranks) keeps
/// one owner, worker 1 (section 6's PSN sequence). Ranks 0-11 arrive on worker 0's port, ranks
/// 12-15 on worker 1's, so of collective 1's 1024 contributions those of odd chunks from ranks
/// 0-11 and of even chunks from ranks 12-15 are handed over: 32 x 12 + 32 x 4 = 512, half
/// (without sharding, ranks 12-15's 256: a quarter); of collective 2's 128 those on port 0,
/// ranks 0-1: 64. Every result is checked by the independent checker, the RoCEv2 PSNs
/// included.
#[test]
fn a_sharded_collective_is_spread_over_both_workers_and_passes_the_checker() {
    let dir = scratch("handoff-shard");
    let udp = pktgen(
        &dir.join("udp"),
        &[
            "--workers",
            "16",
            "--tensor-elements",
            &(64 * 64).to_string(),
            "--chunk-elements",
            "64",
            "--collective-id",
            "1",
            "--seed",
            "3",
            "--shuffle",
        ],
    );
    let roce = pktgen(
        &dir.join("roce"),
        &[
            "--workers",
            "4",
            "--tensor-elements",
            &(32 * 64).to_string(),
            "--chunk-elements",
            "64",
            "--collective-id",
            "2",
            "--seed",
            "4",
            "--shuffle",
            "--carriage",
            "rocev2",
        ],
    );
    let colls = format!("{}\n{}", collectives_via_ports(&udp, 12..16), collectives_via_ports(&roce, 2..4));
    // Port 1: collective 1's ranks 12-15, collective 2's ranks 2-3 (source MAC 02:00:00:00:01:rr).
    let (in0, in1) = split_frames(&dir, &[&udp, &roce], |f| usize::from(f[11] >= if is_rocev2(f) { 2 } else { 12 }));
    let (o0, o1) = (dir.join("out0.pcap"), dir.join("out1.pcap"));
    // Folded per worker: sharded, collective 1's even chunks on worker 0 and its odd ones with
    // all of collective 2 on worker 1; else collective 1 all on worker 0.
    for (shard, handed, folded) in [(true, 512 + 64, [512, 512 + 128]), (false, 256 + 64, [1024, 128])] {
        let conf = write_config(
            &dir,
            "c.toml",
            &format!("{TWO_WORKERS}\n[dataplane]\nshard_collectives = {shard}\n{SPLIT_PORTS}\n{colls}"),
        );
        let run = run_two_ports(&dir, &conf, &in0, &in1, Some((&o0, &o1)));
        assert_counts(&run, 1024 + 128, 64 + 32, 64 * 16 + 32 * 4, handed);
        let by_worker: Vec<u64> = (0..2).map(|w| u(&run.stats()["aggregation_by_worker"][w]["folded"])).collect();
        assert_eq!(by_worker, folded, "shard_collectives = {shard}:\n{}", run.stdout());
        let (ok, text) = gradcheck(&conf, &[&in0, &in1], &[&o0, &o1]);
        assert!(ok, "shard_collectives = {shard}: {text}");
    }
}

/// A frame to UDP port 4791 (RoCEv2), untagged IPv4.
fn is_rocev2(f: &[u8]) -> bool {
    f.len() > 38 && f[12..14] == [0x08, 0x00] && f[23] == 17 && f[36..38] == 4791u16.to_be_bytes()
}

/// A worker whose rx queues bring nothing but which folds what the other hands it (its
/// collective's odd chunks) counts those turns busy: it is loaded, not idle.
#[test]
fn a_worker_busy_with_hand_offs_alone_counts_busy_turns() {
    let dir = scratch("handoff-busy");
    let udp = pktgen(
        &dir.join("udp"),
        &[
            "--workers",
            "4",
            "--tensor-elements",
            &(64 * 64).to_string(),
            "--chunk-elements",
            "64",
            "--collective-id",
            "1",
        ],
    );
    let colls = collectives_via_ports(&udp, 4..4);
    let (in0, in1) = split_frames(&dir, &[&udp], |_| 0);
    let conf = write_config(
        &dir,
        "c.toml",
        &format!("{TWO_WORKERS}\n[dataplane]\nshard_collectives = true\n{SPLIT_PORTS}\n{colls}"),
    );
    let run = run_two_ports(&dir, &conf, &in0, &in1, None);
    let s = run.stats();
    assert_eq!(u(&s["aggregation_by_worker"][1]["folded"]), 32 * 4, "worker 1 folds the odd chunks");
    assert_eq!(u(&s["loops"][1]["rx_packets"]), 0, "{}", run.stdout());
    assert!(u(&s["loops"][1]["busy_polls"]) > 0, "{}", run.stdout());
}

/// A replay with a shaped port and a sharded collective runs in lockstep with its hand-offs: a
/// handed contribution's result reaches the scheduler before anything received after it, so
/// two workers give the single worker's output and drops, on every run (contributions 300 µs
/// apart, all on worker 0's port, results through port 0's 1 MB/s shaper with an 8000-byte
/// queue: worker 1 sends the results of the odd chunks it is handed). Before, the owner of the
/// scheduler ran ahead of the hand-offs and the drops changed from run to run.
#[test]
fn a_sharded_replay_through_a_shaped_port_gives_one_workers_output() {
    let dir = scratch("handoff-lockstep");
    let wl = pktgen(
        &dir.join("wl"),
        &[
            "--workers",
            "4",
            "--tensor-elements",
            "4096",
            "--chunk-elements",
            "64",
            "--rounds",
            "2",
            "--shuffle",
            "--gap-us",
            "300",
            "--seed",
            "21",
        ],
    );
    let colls = collectives_via_ports(&wl, 4..4);
    let qos = "[port.qos]\nrate = 1000000\nclasses = 1\n[[port.qos.class]]\ncapacity_bytes = 8000\n";
    let ports = SPLIT_PORTS.replacen("ipv4 = \"10.0.0.254\"\n", &format!("ipv4 = \"10.0.0.254\"\n{qos}"), 1);
    let (in0, in1) = split_frames(&dir, &[&wl], |_| 0);
    let out = |name: &str, workers: &str| {
        let conf = write_config(&dir, &format!("{name}.toml"), &format!("{workers}\n{ports}\n{colls}"));
        let o = dir.join(format!("{name}.pcap"));
        let run = run_two_ports(&dir, &conf, &in0, &in1, Some((&o, &dir.join("unused.pcap"))));
        (read_pcap(&o), run.drops("tail_drop"))
    };
    let one = out("one", EAL);
    assert!(one.1 > 0 && !one.0.is_empty(), "the shaper drops some results: {}", one.1);
    // Bursts of 512: the last bursts are held when the stop comes (the ports have read their
    // files), and are still processed in order.
    for burst in [32, 512] {
        let two_workers = format!("{TWO_WORKERS}\n[dataplane]\nshard_collectives = true\nburst = {burst}");
        for run in 0..3 {
            let two = out(&format!("two{burst}-{run}"), &two_workers);
            assert_eq!(two.1, one.1, "burst {burst}, run {run}: tail drops");
            assert!(two.0 == one.0, "burst {burst}, run {run}: the frames out differ from one worker's");
        }
    }
}
