//! Replays through the real binary: byte-exact forwarding, table splits, bad frames, errors.

use functional_tests::*;

fn two_ports(table: &str) -> String {
    two_null_ports(EAL, table)
}

#[test]
fn nccl_capture_is_forwarded_byte_identical() {
    let dir = scratch("nccl-identity");
    let conf = write_config(&dir, "c.toml", &two_ports(TO_PORT1));
    let input = case("pcap/nccl_ring_allreduce_rocev2.pcap");
    let out = dir.join("out1.pcap");
    let run = run_dpu(&dir, &conf, &[format!("--rx=0={}", input.display()), format!("--tx=1={}", out.display())]);
    run.assert_ok();
    let want = read_pcap(&input);
    let got = read_pcap(&out);
    assert_eq!(want.len(), 275);
    assert_eq!(got.len(), want.len(), "same count");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "frame {} differs", i + 1);
    }
    let s = run.stats();
    assert_eq!(s["input_records"], 275);
    assert_eq!(s["ports"][0]["workers"]["rx_packets"], 275);
    assert_eq!(s["ports"][1]["ethdev"]["opackets"], 275);
    // The PMD's extended counters come along (net_pcap: per-queue packets and bytes).
    let x = s["ports"][0]["xstats"].as_array().unwrap();
    assert!(x.iter().any(|kv| kv[0] == "rx_good_packets" && kv[1] == 275), "{x:?}");
    assert_eq!(s["mbufs_in_use_after"], 0);
}

/// A net_null port with `no-rx=1` is an output only: a finite replay into it still ends by
/// itself once the input is consumed (as `make bench`'s fold-path replays rely on).
#[test]
fn finite_replay_into_a_null_port_without_rx_ends_by_itself() {
    let dir = scratch("null-no-rx");
    let input = case("pcap/nccl_ring_allreduce_rocev2.pcap");
    let text = format!(
        "{EAL}\n[[port]]\nname = \"in\"\nvdev = \"net_pcap0,rx_pcap={}\"\n\
         [[port]]\nname = \"out\"\nvdev = \"net_null0,no-rx=1\"\n{TO_PORT1}",
        input.display()
    );
    let conf = write_config(&dir, "c.toml", &text);
    let run = run_dpu(&dir, &conf, &[]);
    run.assert_ok();
    let s = run.stats();
    assert_eq!(s["input_records"], 275);
    assert_eq!(s["input_short"], false);
    assert_eq!(s["ports"][1]["ethdev"]["opackets"], 275);
    assert!(run.elapsed < std::time::Duration::from_secs(30), "took {:?}", run.elapsed);
}

/// A port no lcore polls delivers nothing: a net_ring port, or a net_null port that would
/// generate packets forever, used as an output only, does not keep a finite replay going.
#[test]
fn finite_replay_ends_whatever_the_ports_no_lcore_polls() {
    let input = case("pcap/nccl_ring_allreduce_rocev2.pcap");
    for out in ["net_ring0", "net_null0"] {
        let dir = scratch(&format!("unpolled-{out}"));
        let text = format!(
            "{EAL}\n[[port]]\nname = \"in\"\nvdev = \"net_pcap0,rx_pcap={}\"\n\
             [[port]]\nname = \"out\"\nvdev = \"{out}\"\n\
             [[lcore]]\nid = 1\nrx = [{{ port = 0, queue = 0 }}]\n{TO_PORT1}",
            input.display()
        );
        let conf = write_config(&dir, "c.toml", &text);
        let run = run_dpu(&dir, &conf, &[]);
        run.assert_ok();
        let s = run.stats();
        assert_eq!(s["input_records"], 275, "{out}");
        assert_eq!(s["input_short"], false, "{out}");
        assert_eq!(s["ports"][0]["workers"]["rx_packets"], 275, "{out}");
        assert_eq!(s["ports"][1]["workers"]["tx_packets"], 275, "{out}");
        assert!(run.elapsed < std::time::Duration::from_secs(30), "{out} took {:?}", run.elapsed);
    }
}

/// `-q` prints nothing but errors: neither the final stats nor DPDK's own start-up lines
/// (telemetry's among them, which the config's per-library log levels do not reach).
#[test]
fn quiet_run_prints_nothing() {
    let dir = scratch("quiet");
    let conf = write_config(&dir, "c.toml", &two_ports(TO_PORT1));
    let input = case("pcap/nccl_ring_allreduce_rocev2.pcap");
    let out = dir.join("out1.pcap");
    let run = run_dpu(
        &dir,
        &conf,
        &["-q".into(), format!("--rx=0={}", input.display()), format!("--tx=1={}", out.display())],
    );
    run.assert_ok();
    assert_eq!(run.stdout(), "");
    assert_eq!(run.stderr(), "");
    assert_eq!(read_pcap(&out).len(), 275);
    assert_eq!(run.stats()["ports"][1]["ethdev"]["opackets"], 275);
    // Without -q the same run reports.
    let loud = run_dpu(&dir, &conf, &[format!("--rx=0={}", input.display()), format!("--tx=1={}", out.display())]);
    loud.assert_ok();
    assert!(loud.stdout().contains("final stats"), "{}", loud.stdout());
}

#[test]
fn table_entry_splits_a_mixed_capture_exactly() {
    let dir = scratch("split");
    let host = [0xfa, 0x16, 0x3e, 0xa3, 0x16, 0x62];
    let table = r#"
[[table]]
name = "l2"
key = [{ field = "eth.dst", match = "exact" }]
default_action = "forward(0)"
[[table.entry]]
key = ["fa:16:3e:a3:16:62"]
action = "forward(1)"
"#;
    let conf = write_config(&dir, "c.toml", &two_ports(table));
    let input = case("pcap/nccl_ring_allreduce_rocev2.pcap");
    let (o0, o1) = (dir.join("o0.pcap"), dir.join("o1.pcap"));
    let run = run_dpu(
        &dir,
        &conf,
        &[
            format!("--rx=0={}", input.display()),
            format!("--tx=0={}", o0.display()),
            format!("--tx=1={}", o1.display()),
        ],
    );
    run.assert_ok();
    let all = read_pcap(&input);
    let want1: Vec<_> = all.iter().filter(|f| f[..6] == host).cloned().collect();
    let want0: Vec<_> = all.iter().filter(|f| f[..6] != host).cloned().collect();
    assert!(!want1.is_empty() && !want0.is_empty(), "the capture mixes both hosts");
    assert_eq!(read_pcap(&o1), want1);
    assert_eq!(read_pcap(&o0), want0);
    let t = &run.stats()["tables"];
    assert_eq!(t[0]["counter"]["packets"], want1.len() as u64, "entry counter");
    assert_eq!(t[1]["counter"]["packets"], want0.len() as u64, "miss counter");
}

#[test]
fn runts_and_truncated_frames_are_counted_without_stalling() {
    let dir = scratch("runts");
    let conf = write_config(&dir, "c.toml", &two_ports(TO_PORT1));
    let good = read_pcap(&case("pcap/nccl_ring_allreduce_rocev2.pcap"));
    let frames: Vec<(Vec<u8>, Option<u32>)> = vec![
        (good[0].clone(), None),
        (vec![], Some(60)),                                     // empty record
        (vec![0xff; 1], None),                                  // one byte
        (vec![0x02; 13], Some(64)),                             // one byte short of an Ethernet header
        (good[10][..20].to_vec(), Some(good[10].len() as u32)), // truncated capture
        (good[1].clone(), None),
    ];
    let input = dir.join("in.pcap");
    write_pcap(&input, &frames);
    let out = dir.join("out.pcap");
    let run = run_dpu(&dir, &conf, &[format!("--rx=0={}", input.display()), format!("--tx=1={}", out.display())]);
    run.assert_ok();
    assert!(run.elapsed.as_secs() < 30, "took {:?}", run.elapsed);
    assert_eq!(run.drops("runt"), 3);
    assert_eq!(run.drops("malformed_ipv4"), 1, "the truncated capture's IPv4 header claims more bytes than present");
    let s = run.stats();
    assert_eq!(s["ports"][0]["workers"]["rx_packets"], 6, "every record was received");
    let got = read_pcap(&out);
    assert_eq!(got.first(), Some(&good[0]));
    assert_eq!(got.last(), Some(&good[1]));
}

#[test]
fn missing_input_file_is_a_clear_error() {
    let dir = scratch("missing");
    let conf = write_config(&dir, "c.toml", &two_ports(TO_PORT1));
    let run = run_dpu(&dir, &conf, &["--rx=0=/nonexistent/in.pcap".into(), "--tx=1=out.pcap".into()]);
    assert_eq!(run.code(), 1);
    let e = run.stderr();
    assert!(e.contains("/nonexistent/in.pcap") && e.contains("cannot open"), "{e}");
}

#[test]
fn port_that_fails_to_start_is_a_clear_error() {
    let dir = scratch("badport");
    // The output is a directory: net_pcap cannot open it, and the port fails to start.
    let out = dir.join("a_directory");
    std::fs::create_dir_all(&out).unwrap();
    let input = case("pcap/c02_ipv4_options.pcap");
    let text = format!(
        "{EAL}\n[[port]]\nvdev = \"net_pcap0,rx_pcap={},tx_pcap={}\"\n[[table]]\nname = \"l2\"\nkey = [{{ field = \"eth.dst\", match = \"exact\" }}]\ndefault_action = \"forward(0)\"\n",
        input.display(),
        out.display()
    );
    let conf = write_config(&dir, "c.toml", &text);
    let run = run_dpu(&dir, &conf, &[]);
    assert_eq!(run.code(), 1, "{}", run.stderr());
    let e = run.stderr();
    assert!(
        e.contains("dpu: error: port 0 (port0)") && e.contains("net_pcap0") && e.contains("failed to probe"),
        "{e}"
    );
}

#[test]
fn too_many_queues_for_the_device_is_a_clear_error() {
    let dir = scratch("queues");
    let input = case("pcap/c02_ipv4_options.pcap");
    let text = format!(
        "{EAL}\n[[port]]\nvdev = \"net_pcap0,rx_pcap={}\"\n[[lcore]]\nid = 1\nrx = [{{ port = 0, queue = 0 }}, {{ port = 0, queue = 1 }}]\n",
        input.display()
    );
    let conf = write_config(&dir, "c.toml", &text);
    let run = run_dpu(&dir, &conf, &[]);
    assert_eq!(run.code(), 1, "{}", run.stderr());
    assert!(run.stderr().contains("needs 2 rx"), "{}", run.stderr());
}

#[test]
fn bad_config_exits_2_naming_file_and_key() {
    let dir = scratch("badconf");
    let conf = write_config(
        &dir,
        "broken.toml",
        &format!("{EAL}\n[[port]]\nvdev = \"net_null0\"\n[mempool]\nmbufs = \"lots\"\n"),
    );
    let run = run_dpu(&dir, &conf, &[]);
    assert_eq!(run.code(), 2);
    let e = run.stderr();
    assert!(e.contains("broken.toml") && e.contains("mbufs"), "{e}");
}

#[test]
fn lcore_that_eal_does_not_run_is_refused() {
    let dir = scratch("lcore");
    let text = format!("{EAL}\n[[port]]\nvdev = \"net_null0\"\n[[lcore]]\nid = 5\nrx = [{{ port = 0, queue = 0 }}]\n");
    let conf = write_config(&dir, "c.toml", &text);
    let run = run_dpu(&dir, &conf, &["--duration=1".into()]);
    assert_eq!(run.code(), 2, "{}", run.stderr());
    assert!(run.stderr().contains("lcore[0].id") && run.stderr().contains("not a worker lcore"), "{}", run.stderr());
}

#[test]
fn l2_forward_config_runs_out_of_the_box() {
    let root = root();
    let dir = scratch("l2-default");
    // Run from a scratch copy so the repository's out/ is untouched.
    std::fs::create_dir_all(dir.join("samples")).unwrap();
    std::fs::copy(
        root.join("samples/nccl_ring_allreduce_rocev2.pcap"),
        dir.join("samples/nccl_ring_allreduce_rocev2.pcap"),
    )
    .unwrap();
    let run = run_dpu(&dir, &root.join("conf/l2-forward.toml"), &[]);
    run.assert_ok();
    let p0 = read_pcap(&dir.join("out/p0.pcap"));
    let p1 = read_pcap(&dir.join("out/p1.pcap"));
    assert_eq!(p0.len() + p1.len(), 275);
    assert!(p1.iter().all(|f| f[..6] == [0xfa, 0x16, 0x3e, 0xa3, 0x16, 0x62]));
    assert!(run.stdout().contains("final stats"));
}

/// The main job: `make run`'s workload through conf/default.toml, verified by the checker; and
/// the default config's collective is exactly the one the generator writes for that workload.
#[test]
fn default_config_aggregates_the_make_run_workload() {
    let root = root();
    let dir = scratch("default");
    let script = std::fs::read_to_string(root.join("tools/run-allreduce.sh")).unwrap();
    let args_line =
        script.lines().skip_while(|l| !l.starts_with("PKTGEN_ARGS=(")).take(2).collect::<Vec<_>>().join(" ");
    let inner = &args_line[args_line.find('(').unwrap() + 1..args_line.rfind(')').unwrap()];
    let args: Vec<&str> = inner.split_whitespace().collect();
    functional_tests::grad::pktgen(&dir.join("out/allreduce"), &args);
    let generated = std::fs::read_to_string(dir.join("out/allreduce/appliance.toml")).unwrap();
    let default = std::fs::read_to_string(root.join("conf/default.toml")).unwrap();
    let coll = |t: &str| -> toml::Value { toml::from_str::<toml::Value>(t).unwrap()["collective"].clone() };
    assert_eq!(coll(&generated), coll(&default), "conf/default.toml's collective drifted from the make-run workload");
    let run = run_dpu(&dir, &root.join("conf/default.toml"), &[]);
    run.assert_ok();
    let s = run.stats();
    assert_eq!(s["aggregation"]["completed"], 512, "256 slots x 2 rounds");
    assert_eq!(s["aggregation"]["results"], 2048);
    let conf = root.join("conf/default.toml");
    let (ok, text) = functional_tests::grad::gradcheck(
        &conf,
        &[&dir.join("out/allreduce/input.pcap")],
        &[&dir.join("out/allreduce/results.pcap")],
    );
    assert!(ok, "{text}");
}

#[test]
fn sigint_stops_rx_flushes_and_prints_final_stats() {
    use std::process::Command;
    let dir = scratch("sigint");
    let conf = write_config(&dir, "c.toml", &two_ports(TO_PORT1));
    let stats = dir.join("stats.json");
    let child = dpu_command(&conf, &stats).spawn().unwrap();
    // net_null ports never run dry: only the signal stops this run.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert!(Command::new("kill").arg("-INT").arg(child.id().to_string()).status().unwrap().success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let s: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let rx = s["ports"][0]["workers"]["rx_packets"].as_u64().unwrap();
    assert!(rx > 1000, "net_null delivered {rx} packets");
    assert_eq!(s["input_records"], serde_json::Value::Null);
    // Everything received (on both ports) was handed to port 1's tx queue: nothing is lost at
    // shutdown, and what a full tx queue refused is counted.
    let tx = s["ports"][1]["workers"]["tx_packets"].as_u64().unwrap();
    let rx1 = s["ports"][1]["workers"]["rx_packets"].as_u64().unwrap();
    assert_eq!(tx, rx + rx1);
    let sent = s["ports"][1]["ethdev"]["opackets"].as_u64().unwrap();
    assert_eq!(sent + s["drops"]["tx_full"].as_u64().unwrap(), tx);
    assert_eq!(s["mbufs_in_use_after"], 0);
    assert!(String::from_utf8_lossy(&out.stdout).contains("final stats"));
}

/// A classic little-endian pcap file with snapshot length `snaplen` and records of
/// (bytes stored, length on the wire); `cut` bytes off the end of the file.
fn raw_pcap(snaplen: u32, records: &[(&[u8], u32)], cut: usize) -> Vec<u8> {
    let mut b = Vec::new();
    for v in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, snaplen, 1] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    for (i, (data, len)) in records.iter().enumerate() {
        for v in [1_700_000_000, i as u32, data.len() as u32, *len] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(data);
    }
    b.truncate(b.len() - cut);
    b
}

/// An 82-byte Ethernet frame of a local experimental EtherType (0x88b5): whole or cut, it
/// parses (Ethernet only) and is forwarded.
fn experimental_frame(i: u8) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x88, 0xb5];
    f.extend((0..68).map(|k| k ^ i));
    f
}

#[test]
fn snaplen_truncated_capture_is_replayed_whole() {
    // What `tcpdump -s 64` writes: snaplen 64, each record the first 64 bytes of an 82-byte frame.
    let dir = scratch("snaplen64");
    let conf = write_config(&dir, "c.toml", &two_ports(TO_PORT1));
    let frames: Vec<Vec<u8>> = (0..5).map(experimental_frame).collect();
    let records: Vec<(&[u8], u32)> = frames.iter().map(|f| (&f[..64], 82)).collect();
    let input = dir.join("in.pcap");
    std::fs::write(&input, raw_pcap(64, &records, 0)).unwrap();
    let out = dir.join("out1.pcap");
    let run = run_dpu(&dir, &conf, &[format!("--rx=0={}", input.display()), format!("--tx=1={}", out.display())]);
    run.assert_ok();
    let s = run.stats();
    assert_eq!(s["input_records"], 5);
    assert_eq!(s["input_short"], false);
    assert_eq!(s["ports"][0]["ethdev"]["ipackets"], 5, "every record was received");
    assert_eq!(s["ports"][0]["workers"]["rx_packets"], 5);
    assert_eq!(s["ports"][0]["workers"]["rx_bytes"], 5 * 64);
    assert_eq!(s["ports"][1]["ethdev"]["opackets"], 5, "and forwarded");
    let want: Vec<Vec<u8>> = frames.iter().map(|f| f[..64].to_vec()).collect();
    assert_eq!(read_pcap(&out), want, "the captured 64 bytes of each, in order");
    assert!(run.stdout().contains("input: 5 records"), "{}", run.stdout());
}

#[test]
fn records_beyond_the_snaplen_and_a_cut_last_record_end_the_replay_exactly() {
    // snaplen 64: a record of 82 bytes (delivered cut to 64), a whole 64-byte one, another of
    // 82, then one cut short by the end of the file (libpcap reports an error: not a packet).
    let dir = scratch("snaplen-overlong");
    let conf = write_config(&dir, "c.toml", &two_ports(TO_PORT1));
    let frames: Vec<Vec<u8>> = (0..4).map(experimental_frame).collect();
    let records: Vec<(&[u8], u32)> =
        vec![(&frames[0], 82), (&frames[1][..64], 82), (&frames[2], 82), (&frames[3][..60], 82)];
    let input = dir.join("in.pcap");
    std::fs::write(&input, raw_pcap(64, &records, 10)).unwrap();
    let out = dir.join("out1.pcap");
    let run = run_dpu(&dir, &conf, &[format!("--rx=0={}", input.display()), format!("--tx=1={}", out.display())]);
    run.assert_ok();
    let s = run.stats();
    assert_eq!(s["input_records"], 3);
    assert_eq!(s["input_short"], false, "the read error of the cut record is counted, not waited for");
    assert_eq!(s["ports"][0]["ethdev"]["ipackets"], 3);
    assert_eq!(s["ports"][0]["ethdev"]["ierrors"], 1, "net_pcap counts libpcap's error");
    assert_eq!(s["input_errors"], 1);
    assert!(run.stdout().contains("input: 3 records, 1 unreadable"), "{}", run.stdout());
    assert_eq!(s["ports"][1]["ethdev"]["opackets"], 3);
    let want: Vec<Vec<u8>> = frames[..3].iter().map(|f| f[..64].to_vec()).collect();
    assert_eq!(read_pcap(&out), want);
}

/// `--rx`/`--tx` replace only the ports they name: `--tx 1=...` alone keeps port 0's input
/// from the config, and `--rx 0=...` alone keeps port 1's output from the config.
#[test]
fn rx_and_tx_replace_only_the_ports_they_name() {
    let dir = scratch("override-named");
    let input = case("pcap/nccl_ring_allreduce_rocev2.pcap");
    let cfg_out = dir.join("config-out1.pcap");
    let text = format!(
        "{EAL}\n[[port]]\nname = \"in\"\nvdev = \"net_pcap0,rx_pcap={}\"\n\
         [[port]]\nname = \"out\"\nvdev = \"net_pcap1,tx_pcap={}\"\n{TO_PORT1}",
        input.display(),
        cfg_out.display()
    );
    let conf = write_config(&dir, "c.toml", &text);
    let out = dir.join("cli-out1.pcap");
    let run = run_dpu(&dir, &conf, &[format!("--tx=1={}", out.display())]);
    run.assert_ok();
    assert_eq!(run.stats()["input_records"], 275);
    assert_eq!(read_pcap(&out), read_pcap(&input));
    assert!(!cfg_out.exists(), "the config's output is replaced by --tx");
    let run = run_dpu(&dir, &conf, &[format!("--rx=0={}", case("pcap/c02_ipv4_options.pcap").display())]);
    run.assert_ok();
    assert_eq!(run.stats()["input_records"], 1);
    assert_eq!(read_pcap(&cfg_out), read_pcap(&case("pcap/c02_ipv4_options.pcap")));
}

/// Command-line mistakes exit with status 2 before anything is written: an output that is an
/// input (it would be truncated), two ports writing one file, a port the config lacks.
#[test]
fn outputs_that_would_destroy_inputs_are_refused() {
    let dir = scratch("same-file");
    let conf = write_config(&dir, "c.toml", &two_ports(TO_PORT1));
    let input = dir.join("in.pcap");
    std::fs::copy(case("pcap/nccl_ring_allreduce_rocev2.pcap"), &input).unwrap();
    let before = std::fs::read(&input).unwrap();
    let rx = format!("--rx=0={}", input.display());
    // The same file under another name (through "./" and "..") is the same file.
    let alias = dir.join("x/../in.pcap");
    std::fs::create_dir_all(dir.join("x")).unwrap();
    for (args, want) in [
        (vec![rx.clone(), format!("--tx=1={}", input.display())], "port 1 output"),
        (vec![rx.clone(), format!("--tx=0={}", alias.display())], "would destroy the input"),
        (
            vec![
                rx.clone(),
                format!("--tx=0={}", dir.join("o.pcap").display()),
                format!("--tx=1={}", dir.join("./o.pcap").display()),
            ],
            "also port 0's output",
        ),
        (vec![format!("--rx=2={}", input.display())], "the config has 2 port(s)"),
    ] {
        let run = run_dpu(&dir, &conf, &args);
        assert_eq!(run.code(), 2, "{args:?}: {}", run.stderr());
        assert!(run.stderr().contains(want), "{args:?}: {}", run.stderr());
        assert_eq!(std::fs::read(&input).unwrap(), before, "{args:?}: the input is intact");
    }
}
