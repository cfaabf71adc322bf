//! `[[allreduce]]` end to end, two processes: the real appliance (`target/release/dpu`, memif
//! server) and `pktgen run` (memif client), one memif link per collective, without hugepages.
//! pktgen reads the collective and the addresses from the appliance's own config file.
//!
//! The runs take turns (one lock): each busy-polls a CPU, and the machine has two.

mod common;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn tmp(name: &str) -> PathBuf {
    // Short: a memif socket path must fit a sockaddr_un (108 bytes).
    let d = std::env::temp_dir().join(format!("pgar-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// One collective of the appliance, on its own memif port, and the `[[allreduce]]` that
/// emulates its workers.
struct Coll {
    id: u16,
    op: &'static str,
    dtype: &'static str,
    carriage: &'static str,
    v6: bool,
    vlan: Option<u16>,
    workers: u16,
    tensor: u64,
    chunk: u32,
    /// Extra keys of the `[[allreduce]]`.
    pktgen: String,
    /// Extra keys of the `[[collective]]`.
    appliance: String,
}

impl Coll {
    fn new(id: u16, op: &'static str, dtype: &'static str, carriage: &'static str) -> Coll {
        Coll {
            id,
            op,
            dtype,
            carriage,
            v6: false,
            vlan: None,
            workers: 4,
            tensor: 1000,
            chunk: 128,
            pktgen: String::new(),
            appliance: String::new(),
        }
    }
    fn slots(&self) -> u64 {
        self.tensor.div_ceil(self.chunk as u64)
    }
}

/// The appliance's config: a memif server port per collective; `dataplane`, the keys of its
/// `[dataplane]` table.
fn appliance_toml(dir: &Path, colls: &[Coll], dataplane: &str) -> String {
    let mut t = String::from(
        "[eal]\nargs = [\"--no-huge\", \"-m\", \"256\", \"--no-pci\", \"--no-shconf\", \"--lcores\", \"0@0,1@1\", \
         \"--log-level\", \"*:error\"]\n[mempool]\nmbufs = 16383\n",
    );
    t += &format!("[dataplane]\n{dataplane}");
    for i in 0..colls.len() {
        t += &format!(
            "[[port]]\nname = \"m{i}\"\nrx_desc = 256\ntx_desc = 256\nvdev = \"net_memif{i},role=server,socket={},socket-abstract=no\"\n\
             mac = \"02:00:00:00:00:fe\"\nipv4 = \"10.0.0.254\"\nipv6 = \"fd00::fe\"\n",
            dir.join(format!("m{i}.sock")).display()
        );
    }
    for (i, c) in colls.iter().enumerate() {
        t += &format!(
            "[[collective]]\ncollective_id = {}\nop = \"{}\"\ndtype = \"{}\"\ncarriage = \"{}\"\ntensor_elements = {}\n\
             chunk_elements = {}\n{}",
            c.id, c.op, c.dtype, c.carriage, c.tensor, c.chunk, c.appliance
        );
        for k in 0..c.workers {
            let ip = if c.v6 { format!("fd00::{:x}", k + 1) } else { format!("10.0.0.{}", k + 1) };
            t += &format!(
                "[[collective.member]]\nrank = {k}\nip = \"{ip}\"\nmac = \"02:00:00:00:01:{k:02x}\"\nport = {i}\n"
            );
            if c.carriage == "udp" {
                t += &format!("udp_port = {}\n", 50000 + k);
            } else {
                t += &format!("qpn = {}\nqkey = 0x11111111\n", 0x100 + k);
            }
            if let Some(v) = c.vlan {
                t += &format!("vlan = {v}\n");
            }
        }
    }
    t
}

/// pktgen's config; `lcores` is its EAL `--lcores` (the main lcore alone: "0@0").
fn pktgen_toml(dir: &Path, appliance: &Path, colls: &[Coll], lcores: &str) -> String {
    let mut t = format!(
        "[eal]\nargs = [\"--no-huge\", \"-m\", \"256\", \"--no-pci\", \"--no-shconf\", \"--lcores\", \"{lcores}\", \
         \"--log-level\", \"*:error\"]\n",
    );
    for i in 0..colls.len() {
        t += &format!(
            "[[port]]\nname = \"m{i}\"\nvdev = \"net_memif{i},role=client,socket={},socket-abstract=no\"\n",
            dir.join(format!("m{i}.sock")).display()
        );
    }
    for (i, c) in colls.iter().enumerate() {
        t += &format!(
            "[[allreduce]]\nname = \"c{}\"\nport = \"m{i}\"\nappliance = \"{}\"\ncollective_id = {}\n{}\n",
            c.id,
            appliance.display(),
            c.id,
            c.pktgen
        );
    }
    t
}

struct Outcome {
    code: i32,
    out: String,
    pktgen: Value,
    csv: String,
    dpu: Value,
}

/// Starts the appliance on `colls`, waits for its memif sockets, runs pktgen (at most 30 s) with
/// only the main lcore, stops the appliance (SIGTERM) and returns both sides' reports.
fn run(name: &str, colls: &[Coll]) -> Outcome {
    run_on(name, colls, "0@0")
}

/// How a pktgen run ends besides finishing its rounds.
#[derive(Clone, Copy)]
enum End {
    /// `--duration` this many seconds.
    Duration(&'static str),
    /// No `--duration`: SIGINT after this many seconds.
    Interrupt(f64),
}

/// [`run`] with pktgen's EAL `--lcores` `lcores`.
fn run_on(name: &str, colls: &[Coll], lcores: &str) -> Outcome {
    run_until(name, colls, lcores, End::Duration("30"))
}

/// [`run_on`], the pktgen run ended by `end`.
fn run_until(name: &str, colls: &[Coll], lcores: &str, end: End) -> Outcome {
    run_with(name, colls, lcores, end, "")
}

/// [`run_until`] with `dataplane`'s keys in the appliance's `[dataplane]`.
fn run_with(name: &str, colls: &[Coll], lcores: &str, end: End, dataplane: &str) -> Outcome {
    run_env(name, colls, lcores, end, dataplane, &[])
}

/// [`run_with`], pktgen run with the environment variables `env` set. A pktgen run that writes
/// no JSON report has `Value::Null` for it.
fn run_env(name: &str, colls: &[Coll], lcores: &str, end: End, dataplane: &str, env: &[(&str, &str)]) -> Outcome {
    let dir = tmp(name);
    let app = dir.join("appliance.toml");
    std::fs::write(&app, appliance_toml(&dir, colls, dataplane)).unwrap();
    let conf = dir.join("pktgen.toml");
    std::fs::write(&conf, pktgen_toml(&dir, &app, colls, lcores)).unwrap();
    let stats = dir.join("dpu-stats.json");
    let socks: Vec<PathBuf> = (0..colls.len()).map(|i| dir.join(format!("m{i}.sock"))).collect();
    let dpu = common::start_dpu(&app, &stats, 60, &socks);
    let json = dir.join("pktgen.json");
    let csv = dir.join("pktgen.csv");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pktgen"));
    cmd.envs(env.iter().copied());
    cmd.args(["run", "-c", conf.to_str().unwrap()]).args([
        "--json",
        json.to_str().unwrap(),
        "--csv",
        csv.to_str().unwrap(),
    ]);
    if let End::Duration(s) = end {
        cmd.args(["--duration", s]);
    }
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    if let End::Interrupt(s) = end {
        std::thread::sleep(std::time::Duration::from_secs_f64(s));
        common::kill(&child, "-INT");
    }
    // A run that ignores its end is killed 30 s after it (and fails on its exit status), so
    // the test fails rather than hangs.
    let deadline = std::time::Instant::now()
        + std::time::Duration::from_secs(match end {
            End::Duration(s) => 30 + s.parse::<f64>().unwrap() as u64,
            End::Interrupt(_) => 30,
        });
    while child.try_wait().unwrap().is_none() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    if child.try_wait().unwrap().is_none() {
        common::kill(&child, "-KILL");
    }
    let out = child.wait_with_output().unwrap();
    common::kill(&dpu, "-TERM");
    let d = dpu.wait_with_output().unwrap();
    let text = format!(
        "pktgen:\n{}{}\ndpu:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&d.stdout),
        String::from_utf8_lossy(&d.stderr)
    );
    assert_eq!(d.status.code(), Some(0), "the appliance failed:\n{text}");
    let read = |p: &Path| -> Value {
        let t = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}\n{text}", p.display()));
        serde_json::from_str(&t).unwrap()
    };
    Outcome {
        code: out.status.code().unwrap_or(-1),
        pktgen: if json.exists() { read(&json) } else { Value::Null },
        dpu: read(&stats),
        csv: std::fs::read_to_string(&csv).unwrap_or_default(),
        out: text,
    }
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not an integer: {v}"))
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Every worker completed every round of every slot, every result right.
fn assert_complete(a: &Value, c: &Coll, rounds: u64, ctx: &str) {
    let due = rounds * c.slots();
    assert_eq!(u(&a["wrong"]), 0, "{ctx}: {a}");
    assert_eq!(u(&a["right"]), due * c.workers as u64, "{ctx}: {a}");
    // A result per worker per slot round: the appliance's completed rounds times the workers.
    assert_eq!(u(&a["results"]), due * c.workers as u64, "{ctx}: {a}");
    assert_eq!(u(&a["incomplete"]), 0, "{ctx}");
    assert_eq!(u(&a["refused_slots"]), 0, "{ctx}");
    for w in a["per_worker"].as_array().unwrap() {
        assert_eq!(u(&w["results"]), due, "{ctx}: {w}");
        assert_eq!(u(&w["right"]), due, "{ctx}: {w}");
        assert!(w["latency"]["p50_us"].as_f64().is_some(), "{ctx}");
    }
    assert!(f(&a["contributions_per_s"]) > 0.0 && f(&a["payload_gbps"]) > 0.0, "{ctx}");
    assert_eq!(u(&a["rx_bad"]), 0, "{ctx}");
}

/// Closed loop, four collectives at once, one per memif link: UDP f32 sum over IPv4, RoCEv2 bf16
/// max over IPv6, UDP f16 min over IPv6 behind VLAN 30, RoCEv2 i32 sum over IPv4, 4 workers x 8
/// slots (the last one shorter) x 25 rounds each, windows of 1 to 8 chunks: every round of every
/// worker completes and checks bit for bit, and the appliance completed exactly those rounds
/// (a PROBE of every slot first: the appliance answered every one).
#[test]
fn closed_loop_every_round_of_every_worker_checks() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let rounds = 25;
    let mut colls = vec![
        Coll::new(1, "sum", "f32", "udp"),
        Coll { v6: true, ..Coll::new(2, "max", "bf16", "rocev2") },
        Coll { v6: true, vlan: Some(30), ..Coll::new(3, "min", "f16", "udp") },
        Coll::new(4, "sum", "i32", "rocev2"),
    ];
    for (c, w) in colls.iter_mut().zip([4, 8, 1, 2]) {
        c.pktgen = format!("rounds = {rounds}\nwindow = {w}\ntimeout_us = 20000\n");
    }
    let o = run("closed", &colls);
    assert_eq!(o.code, 0, "{}", o.out);
    for (i, c) in colls.iter().enumerate() {
        let a = &o.pktgen["allreduce"][i];
        assert_eq!(a["carriage"], c.carriage);
        assert_eq!(a["dtype"], c.dtype);
        assert_complete(a, c, rounds, &format!("collective {}", c.id));
        assert_eq!(u(&a["naks"]["stale_round"]) + u(&a["naks"]["mismatch"]), 0, "{a}");
        let statuses: u64 = a["per_worker"].as_array().unwrap().iter().map(|w| u(&w["statuses"])).sum();
        assert_eq!(statuses, c.slots() * c.workers as u64, "one STATUS per probed slot: {a}");
    }
    let agg = &o.dpu["aggregation"];
    let due: u64 = colls.iter().map(|c| rounds * c.slots()).sum();
    assert_eq!(u(&agg["completed"]), due, "{agg}");
    assert_eq!(u(&agg["naks"]), 0, "{agg}");
    // The CSV: a row for all workers, then one per worker, per emulation.
    assert_eq!(o.csv.lines().count(), 1 + 4 * 5, "{}", o.csv);
    assert!(o.csv.lines().nth(1).unwrap().starts_with("c1,,closed,udp,f32,sum,sum,4,8,128,"), "{}", o.csv);
    assert!(o.out.contains("allreduce c1: closed loop, 4 workers x 8 slots of 128 f32 lanes"), "{}", o.out);
    // c1: 25 rounds x 8 slots (200 completed at the appliance) x 4 workers.
    assert!(o.out.contains(" s: 800 results (800 right, 0 wrong, "), "{}", o.out);
}

/// With `zero_copy_results` the appliance's result frames are chains (a header mbuf over the
/// shared payload, and the ICRC's on RoCEv2) that net_memif copies segment by segment: every
/// round of every worker still completes and checks bit for bit, both carriages, both
/// families, a VLAN tag; every member's frame but the last of each completion went out shared.
#[test]
fn zero_copy_results_over_memif_check_every_round() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let rounds = 20;
    let mut colls = vec![
        Coll { chunk: 256, ..Coll::new(1, "sum", "f32", "udp") },
        Coll { v6: true, chunk: 256, ..Coll::new(2, "sum", "bf16", "rocev2") },
        Coll { vlan: Some(30), chunk: 200, ..Coll::new(3, "max", "f32", "rocev2") },
    ];
    for c in colls.iter_mut() {
        c.pktgen = format!("rounds = {rounds}\nwindow = 4\ntimeout_us = 20000\n");
    }
    let o = run_with("zero-copy", &colls, "0@0", End::Duration("30"), "zero_copy_results = true\n");
    assert_eq!(o.code, 0, "{}", o.out);
    for (i, c) in colls.iter().enumerate() {
        assert_complete(&o.pktgen["allreduce"][i], c, rounds, &format!("collective {}", c.id));
    }
    let agg = &o.dpu["aggregation"];
    let due: u64 = colls.iter().map(|c| rounds * c.slots()).sum();
    assert_eq!(u(&agg["completed"]), due, "{agg}");
    // Full chunks only: 1000 = 3 x 256 + 232 and 5 x 200, so 3 + 3 + 5 of 4 + 4 + 5 slots.
    let full: u64 = [3, 3, 5].iter().sum::<u64>() * rounds;
    assert_eq!(u(&agg["shared_results"]), full * 3, "{agg}");
    assert_eq!(u(&o.dpu["drops"]["no_mbuf"]), 0, "{}", o.dpu["drops"]);
}

/// Injected loss (10% of pktgen's own sends dropped, UDP) and a slow worker (rank 2's sends 3 ms
/// late, RoCEv2), closed loop; and an open-loop emulation at 20000 contributions/s: every round
/// still completes and checks. Under loss the timeouts resent what was dropped (RETRANSMIT);
/// with the slow worker every other worker waits for it: their latency is at least its delay.
#[test]
fn loss_and_a_slow_worker_still_complete_every_round() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let rounds = 20;
    let colls = vec![
        Coll {
            pktgen: format!("rounds = {rounds}\nwindow = 4\ntimeout_us = 3000\nloss = 0.1\nseed = 7\n"),
            ..Coll::new(1, "sum", "f32", "udp")
        },
        Coll {
            pktgen: format!("rounds = {rounds}\nwindow = 8\ntimeout_us = 100000\nslow_rank = 2\nslow_us = 3000\n"),
            ..Coll::new(2, "sum", "bf16", "rocev2")
        },
        Coll {
            pktgen: format!("rounds = {rounds}\nmode = \"open\"\nrate_pps = 20000\n"),
            ..Coll::new(3, "max", "f32", "udp")
        },
    ];
    let o = run("impair", &colls);
    assert_eq!(o.code, 0, "{}", o.out);
    let a = &o.pktgen["allreduce"][0];
    assert_complete(a, &colls[0], rounds, "loss");
    let drops = u(&a["injected_drops"]);
    let sent = u(&a["contributions"]) + u(&a["retransmissions"]);
    assert!(drops > 0 && u(&a["retransmissions"]) >= drops / 2, "{a}");
    assert!((drops as f64 / sent as f64 - 0.1).abs() < 0.05, "about 10% dropped: {a}");
    let b = &o.pktgen["allreduce"][1];
    assert_complete(b, &colls[1], rounds, "slow");
    assert_eq!(u(&b["retransmissions"]), 0, "{b}");
    for w in b["per_worker"].as_array().unwrap() {
        if w["rank"] != 2 {
            assert!(f(&w["latency"]["p50_us"]) >= 2900.0, "the others wait for rank 2: {w}");
        }
    }
    let c = &o.pktgen["allreduce"][2];
    assert_eq!(c["mode"], "open");
    assert_complete(c, &colls[2], rounds, "open loop");
    assert_eq!(u(&c["contributions"]), rounds * colls[2].slots() * 4, "{c}");
    let agg = &o.dpu["aggregation"];
    assert_eq!(u(&agg["completed"]), 3 * rounds * 8, "{agg}");
}

/// More slots than the window: with 10% loss every round of every worker still completes
/// (windows filled in different orders once waited on each other for good), and the slow
/// worker's every contribution waits `slow_us` after it could go, so the others' p50 latency is
/// at least that.
#[test]
fn more_slots_than_the_window_complete_under_loss_and_a_slow_worker_slows_every_round() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let rounds = 3;
    let colls = vec![
        Coll {
            tensor: 256 * 64,
            chunk: 64,
            pktgen: format!("rounds = {rounds}\nwindow = 4\ntimeout_us = 3000\nloss = 0.1\nseed = 7\n"),
            ..Coll::new(1, "sum", "f32", "udp")
        },
        Coll {
            tensor: 64 * 64,
            chunk: 64,
            pktgen: format!("rounds = {rounds}\nwindow = 8\ntimeout_us = 200000\nslow_rank = 2\nslow_us = 2000\n"),
            ..Coll::new(2, "sum", "f32", "udp")
        },
    ];
    let o = run("window-loss", &colls);
    assert_eq!(o.code, 0, "{}", o.out);
    let a = &o.pktgen["allreduce"][0];
    assert_complete(a, &colls[0], rounds, "256 slots, window 4, 10% loss");
    assert!(u(&a["injected_drops"]) > 0, "{a}");
    let b = &o.pktgen["allreduce"][1];
    assert_complete(b, &colls[1], rounds, "64 slots, window 8, slow rank 2");
    for w in b["per_worker"].as_array().unwrap() {
        if w["rank"] != 2 {
            assert!(f(&w["latency"]["p50_us"]) >= 1900.0, "the others wait for rank 2: {w}");
        }
    }
}

/// Open loop resends nothing: with 10% loss some rounds never complete, and the run says so
/// (incomplete results, exit status 3) instead of reporting success.
#[test]
fn open_loop_rounds_lost_to_loss_are_reported_incomplete() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let rounds = 5;
    let colls = vec![Coll {
        pktgen: format!("rounds = {rounds}\nmode = \"open\"\nrate_pps = 20000\nloss = 0.1\nseed = 3\n"),
        ..Coll::new(1, "sum", "f32", "udp")
    }];
    let o = run("open-loss", &colls);
    assert_eq!(o.code, 3, "{}", o.out);
    let a = &o.pktgen["allreduce"][0];
    let due = rounds * colls[0].slots() * 4;
    assert!(u(&a["incomplete"]) > 0 && u(&a["incomplete"]) + u(&a["results"]) == due, "{a}");
    assert_eq!(u(&a["retransmissions"]), 0, "{a}");
    assert!(o.out.contains("results did not come back (open loop: nothing is resent)"), "{}", o.out);
}

/// Emulations on worker lcores (`lcore`): two at once, each alone on an EAL worker lcore of its
/// own (closed loop UDP f32 sum; open loop RoCEv2 bf16 max over IPv6), beside one on the main
/// lcore: every round of every worker completes and checks bit for bit, the counters the
/// workers hand back reach the JSON, the CSV and the table, the live line at 1 s shows every
/// emulation, and the appliance completed exactly those rounds.
#[test]
fn emulations_on_worker_lcores_complete_every_round() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let rounds = 30;
    let colls = vec![
        Coll {
            pktgen: format!("rounds = {rounds}\nwindow = 4\ntimeout_us = 20000\nlcore = 1\n"),
            ..Coll::new(1, "sum", "f32", "udp")
        },
        Coll {
            v6: true,
            // 960 contributions at 600/s: the run lasts over a second, so the live line shows.
            pktgen: format!("rounds = {rounds}\nmode = \"open\"\nrate_pps = 600\nlcore = 2\n"),
            ..Coll::new(2, "max", "bf16", "rocev2")
        },
        Coll { pktgen: format!("rounds = {rounds}\ntimeout_us = 20000\n"), ..Coll::new(3, "min", "i32", "udp") },
    ];
    let o = run_on("lcores", &colls, "0@0,1@1,2@0");
    assert_eq!(o.code, 0, "{}", o.out);
    for (i, c) in colls.iter().enumerate() {
        let a = &o.pktgen["allreduce"][i];
        assert_complete(a, c, rounds, &format!("collective {}", c.id));
        assert!(u(&a["tx_packets"]) >= rounds * c.slots() * c.workers as u64, "{a}");
        assert!(u(&a["rx_packets"]) >= rounds * c.slots() * c.workers as u64, "{a}");
    }
    let b = &o.pktgen["allreduce"][1];
    assert_eq!(b["mode"], "open");
    assert_eq!(u(&b["contributions"]), rounds * colls[1].slots() * 4, "{b}");
    // A PROBE of every slot by every worker first, answered once each (closed loop); on a loaded
    // machine a slot whose result is late past the 20 ms timeout is probed again (a stall).
    let a = &o.pktgen["allreduce"][0];
    let statuses: u64 = a["per_worker"].as_array().unwrap().iter().map(|w| u(&w["statuses"])).sum();
    let timeouts: u64 = a["per_worker"].as_array().unwrap().iter().map(|w| u(&w["timeouts"])).sum();
    assert!(statuses >= colls[0].slots() * 4, "{a}");
    assert!(statuses == colls[0].slots() * 4 || timeouts > 0, "probes beyond the first without a stall: {a}");
    assert_eq!(u(&o.dpu["aggregation"]["completed"]), 3 * rounds * 8, "{}", o.dpu["aggregation"]);
    assert_eq!(o.csv.lines().count(), 1 + 3 * 5, "{}", o.csv);
    assert!(o.out.contains("allreduce c2: open loop, 4 workers x 8 slots of 128 bf16 lanes"), "{}", o.out);
    // The live line at 1 s: the worker lcores answered the main lcore's request for counts.
    for c in ["c1", "c2", "c3"] {
        let line = o.out.lines().find(|l| l.starts_with(&format!("[   1.0 s] allreduce {c}: ")));
        let line = line.unwrap_or_else(|| panic!("no live line of {c} at 1 s:\n{}", o.out));
        assert!(line.contains(" wrong 0 |") && line.contains(" naks 0 "), "{line}");
    }
}

/// Emulations without a number of rounds, on worker lcores, end when the run does: at
/// `--duration`, and at SIGINT (^C) without one. Either way pktgen drains, exits 0 and reports
/// every result it received as right; the worker lcores' counts reach the summary; the
/// appliance completed at least the rounds every worker saw complete.
#[test]
fn endless_emulations_on_worker_lcores_stop_at_the_duration_and_at_sigint() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    for (name, end) in [("endless-dur", End::Duration("1.5")), ("endless-int", End::Interrupt(2.5))] {
        let colls = vec![
            Coll { pktgen: "window = 4\ntimeout_us = 20000\nlcore = 1\n".into(), ..Coll::new(1, "sum", "f32", "udp") },
            Coll {
                pktgen: "mode = \"open\"\nrate_pps = 2000\nlcore = 2\n".into(),
                ..Coll::new(2, "max", "bf16", "rocev2")
            },
        ];
        let o = run_until(name, &colls, "0@0,1@1,2@0", end);
        assert_eq!(o.code, 0, "{name}: {}", o.out);
        // Sending ran until the end asked for: the duration from the first send, or the signal
        // 2.5 s after the start (less the EAL's start-up and the memif links coming up).
        let secs = f(&o.pktgen["seconds"]);
        let (lo, hi) = match end {
            End::Duration(_) => (1.5, 2.0),
            End::Interrupt(_) => (1.0, 2.5),
        };
        assert!((lo..hi).contains(&secs), "{name}: sent for {secs} s:\n{}", o.out);
        let mut least = 0;
        for (i, c) in colls.iter().enumerate() {
            let a = &o.pktgen["allreduce"][i];
            assert_eq!(u(&a["wrong"]), 0, "{name}: {a}");
            assert_eq!(u(&a["refused_slots"]), 0, "{name}: {a}");
            let workers = a["per_worker"].as_array().unwrap();
            assert_eq!(workers.len(), c.workers as usize, "{name}: {a}");
            for w in workers {
                // Every result a worker received was checked, and right.
                assert_eq!(u(&w["right"]), u(&w["results"]), "{name}: {w}");
            }
            let done = workers.iter().map(|w| u(&w["results"])).min().unwrap();
            // A second or more of rounds: over one per slot.
            assert!(done > c.slots(), "{name}: collective {}: {a}", c.id);
            least += done;
        }
        let completed = u(&o.dpu["aggregation"]["completed"]);
        assert!(completed >= least, "{name}: the appliance completed {completed}, the workers saw {least}");
        assert!(o.out.contains("allreduce c1:") && o.out.contains("allreduce c2: open loop"), "{name}: {}", o.out);
    }
}

/// A panic on a worker lcore (injected: `PKTGEN_INJECT_PANIC_AFTER_RX`, the path a bug would
/// take) ends the run at once, not at its `--duration`: the emulation on the main lcore stops
/// and drains, pktgen exits with status 1 naming the emulation, its lcore and the panic's
/// message, and writes no report. The appliance, its memif peers gone, runs on and exits 0 at
/// SIGTERM with the rounds it completed before counted.
#[test]
fn a_panic_on_a_worker_lcore_ends_the_run_naming_it() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let colls = vec![
        Coll { pktgen: "window = 4\ntimeout_us = 20000\nlcore = 1\n".into(), ..Coll::new(1, "sum", "f32", "udp") },
        Coll { pktgen: "window = 4\ntimeout_us = 20000\n".into(), ..Coll::new(2, "max", "bf16", "rocev2") },
    ];
    let start = std::time::Instant::now();
    let env = [("PKTGEN_INJECT_PANIC_AFTER_RX", "2000")];
    let o = run_env("panic", &colls, "0@0,1@1", End::Duration("20"), "", &env);
    let took = start.elapsed().as_secs_f64();
    assert_eq!(o.code, 1, "{}", o.out);
    let why = "pktgen: allreduce c1: lcore 1 panicked: injected fault (PKTGEN_INJECT_PANIC_AFTER_RX=2000): ";
    let line = o.out.lines().find(|l| l.starts_with(why)).unwrap_or_else(|| panic!("no {why:?}:\n{}", o.out));
    // It panicked at its 2000th frame or within the burst that brought it.
    let frames: u64 = line[why.len()..].trim_end_matches(" frames received").parse().unwrap();
    assert!((2000..2000 + 64).contains(&frames), "{line}");
    assert!(took < 15.0, "the run took {took:.1} s: it waited for its 20 s duration:\n{}", o.out);
    assert!(o.pktgen.is_null(), "a report was written: {}", o.pktgen);
    // Collective 1's workers received those frames: a STATUS per slot and worker (8 x 4), the
    // rest results, 4 per round the appliance completed, and a result resent for every
    // retransmission of a completed round (on a loaded machine the 20 ms timeout passes);
    // collective 2's ran beside it.
    let colls_out = o.dpu["collectives"].as_array().unwrap_or_else(|| panic!("{}", o.dpu));
    let coll = |id: u64| {
        colls_out.iter().find(|c| c["collective"] == id).unwrap_or_else(|| panic!("no collective {id}: {}", o.dpu))
    };
    let c1 = coll(1);
    assert_eq!(u(&c1["statuses"]), 32, "{c1}");
    assert_eq!(u(&c1["results"]), 4 * u(&c1["completed"]), "{c1}");
    assert!(
        u(&c1["results"]) + u(&c1["resends"]) + 32 >= frames,
        "the appliance sent fewer than the {frames} received: {c1}"
    );
    assert!(u(&c1["completed"]) >= 2000u64.saturating_sub(32 + u(&c1["resends"])) / 4, "{c1}");
    assert!(u(&coll(2)["completed"]) > 0, "{}", o.dpu);
}

/// Wrong answers and NAKs: pktgen expects max from a sum collective (every result is counted
/// wrong); sends chunks past the appliance's tensor (each refused with NAK reason 6, the rest
/// completes); sends op max to a sum collective (NAK reason 3, every slot refused). pktgen exits
/// with status 3 naming them.
#[test]
fn wrong_results_and_naks_are_reported() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let rounds = 5;
    let colls = vec![
        Coll { pktgen: format!("rounds = {rounds}\nexpect_op = \"max\"\n"), ..Coll::new(1, "sum", "f32", "udp") },
        Coll {
            tensor: 1024,
            pktgen: format!("rounds = {rounds}\ntensor_elements = 1256\ntimeout_us = 20000\n"),
            ..Coll::new(2, "sum", "f16", "rocev2")
        },
        Coll {
            pktgen: format!("rounds = {rounds}\nop = \"max\"\ntimeout_us = 20000\n"),
            ..Coll::new(3, "sum", "i32", "udp")
        },
    ];
    let o = run("wrong", &colls);
    assert_eq!(o.code, 3, "{}", o.out);
    assert!(o.out.contains("allreduce c1: 160 of 160 results wrong"), "{}", o.out);
    let a = &o.pktgen["allreduce"][0];
    assert_eq!((u(&a["wrong"]), u(&a["right"])), (rounds * 8 * 4, 0), "{a}");
    assert_eq!(a["expect_op"], "max");
    // 1256 elements: slots 8 and 9 lie past the appliance's 1024: refused with reason 6.
    let b = &o.pktgen["allreduce"][1];
    assert_eq!(u(&b["slots"]), 10);
    assert_eq!(u(&b["refused_slots"]), 2 * 4, "{b}");
    assert!(u(&b["naks"]["bad_length_or_offset"]) >= 8, "{b}");
    assert_eq!(u(&b["right"]), rounds * 8 * 4, "{b}");
    assert_eq!(u(&b["wrong"]), 0, "{b}");
    let c = &o.pktgen["allreduce"][2];
    assert_eq!(u(&c["refused_slots"]), 8 * 4, "{c}");
    assert!(u(&c["naks"]["mismatch"]) >= 32, "{c}");
    assert_eq!(u(&c["results"]), 0, "{c}");
    assert!(o.out.contains("slots refused by NAKs (mismatch="), "{}", o.out);
    let drops = &o.dpu["drops"];
    assert!(u(&drops["grad_mismatch"]) >= 32 && u(&drops["grad_bad_offset"]) >= 8, "{drops}");
}

/// `values = "normal"` (the pcap writer's N(0, 1)-like tensors) live, closed and open loop: an
/// f32 sum against a `deterministic = true` collective, a bf16 max and an i32 sum (exact in any
/// order) against collectives that are not: every round of every worker completes and checks
/// bit for bit against the rank-order reference.
#[test]
fn normal_values_check_against_the_rank_order_reference() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let rounds = 12;
    let colls = vec![
        Coll {
            appliance: "deterministic = true\n".into(),
            pktgen: format!("rounds = {rounds}\nwindow = 4\ntimeout_us = 20000\nvalues = \"normal\"\n"),
            ..Coll::new(1, "sum", "f32", "udp")
        },
        Coll {
            v6: true,
            pktgen: format!("rounds = {rounds}\ntimeout_us = 20000\nvalues = \"normal\"\nseed = 5\n"),
            ..Coll::new(2, "max", "bf16", "rocev2")
        },
        Coll {
            pktgen: format!("rounds = {rounds}\nmode = \"open\"\nrate_pps = 5000\nvalues = \"normal\"\n"),
            ..Coll::new(3, "sum", "i32", "udp")
        },
    ];
    let o = run("normal", &colls);
    assert_eq!(o.code, 0, "{}", o.out);
    for (i, c) in colls.iter().enumerate() {
        assert_complete(&o.pktgen["allreduce"][i], c, rounds, &format!("collective {}", c.id));
    }
    assert_eq!(u(&o.dpu["aggregation"]["completed"]), 3 * rounds * 8, "{}", o.dpu["aggregation"]);
}

/// A bad `[[allreduce]]` is refused before EAL starts, naming the file and key.
#[test]
fn a_bad_allreduce_config_names_the_key() {
    let dir = tmp("bad");
    let app = dir.join("appliance.toml");
    let colls = [Coll::new(1, "sum", "f32", "udp")];
    std::fs::write(&app, appliance_toml(&dir, &colls, "")).unwrap();
    let conf = dir.join("pktgen.toml");
    let try_env = |extra: &str, env: &[(&str, &str)]| {
        std::fs::write(&conf, pktgen_toml(&dir, &app, &colls, "0@0") + extra).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_pktgen"));
        let o = cmd.envs(env.iter().copied()).args(["run", "-c", conf.to_str().unwrap()]).output().unwrap();
        (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let try_conf = |extra: &str| try_env(extra, &[]);
    let (code, err) = try_conf("loss = 1.5\n");
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("pktgen.toml: key `allreduce[0].loss`: expected a fraction in 0..1, found 1.5"), "{err}");
    std::fs::write(&conf, pktgen_toml(&dir, &app, &colls, "0@0").replace("collective_id = 1", "collective_id = 9"))
        .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_pktgen")).args(["run", "-c", conf.to_str().unwrap()]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("key `allreduce[0].collective_id`") && err.contains("has no [[collective]] 9 (it has: 1)"),
        "{err}"
    );
    let (code, err) = try_conf("slow_rank = 4\n");
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("key `allreduce[0].slow_rank`: expected a rank below 4, found 4"), "{err}");
    let (code, err) = try_conf("lcore = 5\n");
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(
            "pktgen.toml: key `allreduce[0].lcore`: lcore 5 is not a worker lcore of the EAL (workers: []; the main lcore 0"
        ),
        "{err}"
    );
    let (code, err) = try_env("", &[("PKTGEN_INJECT_PANIC_AFTER_RX", "lots")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("PKTGEN_INJECT_PANIC_AFTER_RX: expected a count of frames, got \"lots\""), "{err}");
    let (code, err) = try_conf("values = \"normal\"\n");
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("pktgen.toml: key `allreduce[0].values`: \"normal\" f32 sums are known only in rank order"),
        "{err}"
    );
}
