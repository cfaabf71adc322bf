//! `pktgen run` end to end: the real binary on DPDK vdevs (no hugepages, no PCI), its JSON and
//! CSV summaries checked against what was configured.
//!
//! The runs share the machine's CPUs, so they take turns (one lock): rate accuracy is measured
//! by the receiving side and a neighbour busy-polling the same CPU would distort it.

use dataplane::parse::{parse, Layers};
use dataplane::wire::icrc;
use functional_tests::{read_pcap, write_pcap_at};
use pktgen::stream::find_stamp;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const EAL: &str = r#"args = ["--no-huge", "-m", "512", "--no-pci", "--no-shconf", "--lcores", "0@0,1@1", "--log-level", "*:warning"]"#;

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pktgen-live-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs `pktgen run` on `conf` for `seconds`; returns the exit status, stdout, stderr and the
/// JSON summary (Null when none was written).
fn run(dir: &Path, conf: &str, seconds: &str) -> (i32, String, String, Value) {
    run_args(dir, conf, &["--duration", seconds])
}

/// [`run`] with other options than `--duration` (`--packets N --duration S`, ...).
fn run_args(dir: &Path, conf: &str, args: &[&str]) -> (i32, String, String, Value) {
    let c = dir.join("conf.toml");
    std::fs::write(&c, conf).unwrap();
    let json = dir.join("summary.json");
    let out = Command::new(env!("CARGO_BIN_EXE_pktgen"))
        .args(["run", "-q", "-c", c.to_str().unwrap()])
        .args(args)
        .args(["--json", json.to_str().unwrap()])
        .args(["--csv", dir.join("summary.csv").to_str().unwrap()])
        .output()
        .unwrap();
    let v = std::fs::read_to_string(&json).map(|t| serde_json::from_str(&t).unwrap()).unwrap_or(Value::Null);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        v,
    )
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not an integer: {v}"))
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Three streams at 10k, 25k and 50k packets/s (64-byte UDP, 64 flows) on a net_ring
/// loopback for 3 s: the receiving side measures each within 2% of its target over its
/// arrival window (at least 2 s), every packet sent comes back, and the sequence numbers show
/// no loss and no reordering. The receiver (the main lcore) shares a CPU with whatever else
/// runs: while it waits, net_ring's 1024-slot ring fills and the sender falls behind; a catch-up
/// of up to 1 s (`catch_up_ms`) lets it make that up once the receiver drains the ring, so the
/// test measures the pacer, not the machine's load.
#[test]
fn rate_accuracy_at_three_low_rates() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let d = tmp("rates");
    let mut conf =
        format!("[eal]\n{EAL}\n[pktgen]\ntx_lcores = [1]\ncatch_up_ms = 1000\n[[port]]\nname = \"loop\"\nvdev = \"net_ring0\"\n");
    for (i, r) in [10_000, 25_000, 50_000].iter().enumerate() {
        conf += &format!(
            "[[stream]]\nname = \"s{i}\"\nport = \"loop\"\nrx_port = \"loop\"\nsize = 64\nflows = 64\nsrc_port = {}\nrate_pps = {r}\n",
            1000 + i * 100
        );
    }
    let (rc, out, err, v) = run(&d, &conf, "3");
    assert_eq!(rc, 0, "{out}\n{err}");
    assert!(out.contains("== pktgen: summary"), "{out}");
    for (i, target) in [10_000.0, 25_000.0, 50_000.0].iter().enumerate() {
        let s = &v["streams"][i];
        let ctx = format!("stream {i} at {target} pps: {s}");
        let (tx, rx) = (u(&s["tx"]["packets"]), u(&s["rx"]["packets"]));
        assert_eq!(tx, rx, "{ctx}");
        assert_eq!(u(&s["lost"]), 0, "{ctx}");
        assert_eq!(u(&s["rx"]["seq_lost"]), 0, "{ctx}");
        assert_eq!(u(&s["rx"]["reordered"]), 0, "{ctx}");
        assert_eq!(u(&s["rx"]["bytes"]), rx * 64, "{ctx}");
        assert!(f(&s["rx"]["seconds"]) >= 2.0, "{ctx}");
        let rx_pps = f(&s["rx_pps"]);
        assert!((rx_pps / target - 1.0).abs() <= 0.02, "{ctx}: received at {rx_pps} pps");
        assert!((f(&s["tx_vs_target"]) - 1.0).abs() <= 0.02, "{ctx}");
        // About 3 s worth were sent.
        assert!((tx as f64 / (3.0 * target) - 1.0).abs() <= 0.05, "{ctx}");
    }
    assert_eq!(u(&v["rx_other"]), 0);
    let port = &v["ports"][0]["stats"];
    let total: u64 = (0..3).map(|i| u(&v["streams"][i]["tx"]["packets"])).sum();
    assert_eq!((u(&port["opackets"]), u(&port["ipackets"])), (total, total));
    let csv = std::fs::read_to_string(d.join("summary.csv")).unwrap();
    assert_eq!(csv.lines().count(), 4, "{csv}");
    assert!(csv.lines().nth(1).unwrap().starts_with("s0,udp,loop,loop,64,64,l2,10000,,"), "{csv}");
}

/// Two tx lcores share a stream (each its own tx queue, sequence numbers per lane) and a bit
/// rate at L1: the sum is on target and nothing is lost or reordered.
#[test]
fn two_tx_lcores_share_a_bit_rate() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let d = tmp("lanes");
    let conf = r#"[eal]
args = ["--no-huge", "-m", "512", "--no-pci", "--no-shconf", "--lcores", "0@0,1@1,2@1", "--log-level", "*:warning"]
[pktgen]
tx_lcores = [1, 2]
[[port]]
name = "loop"
vdev = "net_ring0"
rx_queues = 2
[[stream]]
port = "loop"
rx_port = "loop"
imix = "standard"
flows = 100
rate_bps = 100e6
rate_layer = "l1"
"#;
    let (rc, out, err, v) = run(&d, conf, "2.5");
    assert_eq!(rc, 0, "{out}\n{err}");
    let s = &v["streams"][0];
    assert_eq!(u(&s["tx"]["packets"]), u(&s["rx"]["packets"]), "{s}");
    assert_eq!((u(&s["rx"]["seq_lost"]), u(&s["rx"]["reordered"])), (0, 0), "{s}");
    let gbps = f(&s["rx_gbps"]);
    assert!((gbps / 0.1 - 1.0).abs() <= 0.02, "{s}: {gbps} Gbit/s at L1");
    // IMIX 7:4:1 of 60/590/1514 bytes: a mean of 4294 / 12 = 357.83 bytes without FCS.
    let mean = u(&s["rx"]["bytes"]) as f64 / u(&s["rx"]["packets"]) as f64;
    assert!((mean - 357.83).abs() < 1.0, "{s}: mean frame {mean}");
}

/// Latency: a stamp offset of 20 ms (the test-only `stamp_offset_us`) raises every percentile by
/// 20 ms: the smallest latency measured is at least 20 ms, which the same run without the
/// offset never shows as its smallest.
#[test]
fn a_known_delay_shows_in_the_percentiles() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let d = tmp("latency");
    let conf = |offset: u64| {
        format!(
            "[eal]\n{EAL}\n[pktgen]\ntx_lcores = [1]\nstamp_offset_us = {offset}\n[[port]]\nvdev = \"net_ring0\"\n\
             [[stream]]\nkind = \"rocev2\"\nport = 0\nrx_port = 0\nsize = 128\nrate_pps = 20000\n"
        )
    };
    let (rc, out, err, base) = run(&d, &conf(0), "1");
    assert_eq!(rc, 0, "{out}\n{err}");
    let (rc, out, err, late) = run(&d, &conf(20_000), "1");
    assert_eq!(rc, 0, "{out}\n{err}");
    let b = &base["streams"][0]["rx"]["latency"];
    let l = &late["streams"][0]["rx"]["latency"];
    assert!(f(&b["min_us"]) < 20_000.0, "{b}");
    for p in ["min_us", "p50_us", "p99_us", "p999_us", "max_us"] {
        // hdrhistogram keeps 3 significant digits: 20000 µs may read 19.99 ms.
        assert!(f(&l[p]) >= 19_980.0, "{p}: {l}");
    }
    // The offset adds to the real latency: p50 stays within the noise of a loaded machine.
    assert!(f(&l["p50_us"]) < 20_000.0 + f(&b["p50_us"]) + 50_000.0, "{l} vs {b}");
    assert!(f(&l["p50_us"]) > f(&b["p50_us"]), "{l} vs {b}");
}

/// The JSON's latency CDF (what `tools/plot_pktgen.py` draws): ascending points from the
/// smallest latency to the largest at fraction 1.0, all past a known added delay; then the plot
/// script draws throughput against size (one series from `fwd-128` and `fwd-512`) and the CDF
/// from it, and refuses a file that is not a summary, naming it.
#[test]
fn the_latency_cdf_and_the_plots_come_from_the_json() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let d = tmp("plots");
    let mut conf =
        format!("[eal]\n{EAL}\n[pktgen]\ntx_lcores = [1]\nstamp_offset_us = 20000\n[[port]]\nvdev = \"net_ring0\"\n");
    for (size, port) in [(128, 1000), (512, 2000)] {
        conf += &format!(
            "[[stream]]\nname = \"fwd-{size}\"\nport = 0\nrx_port = 0\nsize = {size}\nsrc_port = {port}\nrate_pps = 10000\n"
        );
    }
    let (rc, out, err, v) = run(&d, &conf, "1");
    assert_eq!(rc, 0, "{out}\n{err}");
    for s in v["streams"].as_array().unwrap() {
        let cdf: Vec<(f64, f64)> = s["latency_cdf"].as_array().unwrap().iter().map(|p| (f(&p[0]), f(&p[1]))).collect();
        assert!(cdf.len() >= 2, "{s}");
        assert!(cdf.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1), "{cdf:?}");
        let lat = &s["rx"]["latency"];
        assert!(cdf[0].0 >= 19_980.0, "{cdf:?}");
        let (max_us, last) = (f(&lat["max_us"]), *cdf.last().unwrap());
        assert_eq!(last.1, 1.0, "{cdf:?}");
        // The histogram's highest equivalent value of the maximum (3 significant digits).
        assert!(last.0 >= max_us && last.0 <= max_us * 1.001 + 0.001, "{last:?} vs {lat}");
    }
    let plot = |args: &[&str]| {
        Command::new("/usr/bin/python3")
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../tools/plot_pktgen.py"))
            .args(args)
            .output()
            .unwrap()
    };
    let json = d.join("summary.json");
    let pics = d.join("pics");
    let o = plot(&[json.to_str().unwrap(), "--out", pics.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{text}");
    for png in ["throughput.png", "latency_cdf.png"] {
        let bytes = std::fs::read(pics.join(png)).unwrap();
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.len() > 10_000, "{png}: {} bytes", bytes.len());
        assert!(text.contains(png), "{text}");
    }
    let o = plot(&[d.join("summary.csv").to_str().unwrap(), "--out", pics.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{text}");
    assert!(text.contains("summary.csv"), "{text}");
}

/// Every frame of every kind of stream goes through a real PMD (net_pcap writes what the tx
/// queue got) valid: the appliance's parser accepts it (IPv4 and UDP checksums), RoCEv2 ICRCs
/// verify, and each stream's stamps count 0, 1, 2, ... with its configured length mix.
#[test]
fn frames_on_the_wire_are_valid_for_every_kind() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let d = tmp("wire");
    let pcap = d.join("out.pcap");
    let conf = format!(
        "[eal]\n{EAL}\n[pktgen]\ntx_lcores = [1]\n[[port]]\nvdev = \"net_pcap0,tx_pcap={}\"\n\
         [[stream]]\nport = 0\nsize = 64\nflows = 5\nrate_pps = 2000\n\
         [[stream]]\nport = 0\nsrc_ip = \"fd00::1\"\nvlan = 7\nsweep = [100, 1500]\nstep_s = 0.3\nrate_pps = 2000\n\
         [[stream]]\nkind = \"rocev2\"\nport = 0\nimix = [{{ size = 90, weight = 2 }}, {{ size = 1001, weight = 1 }}]\nflows = 3\nrate_pps = 2000\n\
         [[stream]]\nkind = \"rocev2\"\nport = 0\nsrc_ip = \"fd00::1\"\nsize = 9000\nrate_pps = 500\n",
        pcap.display()
    );
    let (rc, out, err, v) = run(&d, &conf, "1");
    assert_eq!(rc, 0, "{out}\n{err}");
    let mut next = [0u32; 4];
    let mut lens: Vec<Vec<usize>> = vec![Vec::new(); 4];
    for fr in read_pcap(&pcap) {
        let st = find_stamp(&fr).expect("a stamp");
        let i = st.stream as usize;
        assert_eq!(st.seq, next[i], "stream {i}");
        next[i] += 1;
        lens[i].push(fr.len());
        let pr = parse(&fr, 49374).unwrap_or_else(|e| panic!("stream {i}: {e:?}"));
        assert!(pr.has(Layers::UDP));
        if i >= 2 {
            assert!(pr.has(Layers::BTH) && pr.has(Layers::DETH), "stream {i}");
            let l3 = 14;
            let ip_len = if i == 3 {
                40 + u16::from_be_bytes([fr[18], fr[19]]) as usize
            } else {
                u16::from_be_bytes([fr[16], fr[17]]) as usize
            };
            let l4 = if i == 3 { 40 } else { 20 };
            assert!(icrc::verify(&fr[l3..l3 + ip_len], l4).unwrap(), "stream {i} seq {}: ICRC", st.seq);
            assert_eq!(pr.bth_psn, st.seq & 0xff_ffff);
        }
    }
    for i in 0..4 {
        assert_eq!(next[i] as u64, u(&v["streams"][i]["tx"]["packets"]), "stream {i}");
        assert!(next[i] > 100, "stream {i}: {}", next[i]);
    }
    assert!(lens[0].iter().all(|&l| l == 64));
    assert_eq!(lens[1][0], 100);
    assert!(lens[1].contains(&1500), "the sweep moves on after 0.3 s");
    assert_eq!(&lens[2][..6], &[90, 1001, 90, 90, 1001, 90]);
    assert!(lens[3].iter().all(|&l| l == 9000));
}

/// A bad config exits with status 2 before EAL starts, naming the file, the key and what was
/// expected.
#[test]
fn a_bad_config_names_file_and_key() {
    let d = tmp("bad");
    let conf = format!(
        "[eal]\n{EAL}\n[pktgen]\ntx_lcores = [1]\n[[port]]\nvdev = \"net_null0\"\n[[stream]]\nport = 0\nsize = 20\n"
    );
    let (rc, _, err, _) = run(&d, &conf, "1");
    assert_eq!(rc, 2, "{err}");
    assert!(err.contains("conf.toml: key `stream[0].size`: expected a frame length from 60 to 9216"), "{err}");
    let conf = format!(
        "[eal]\n{EAL}\n[pktgen]\ntx_lcores = [5]\n[[port]]\nvdev = \"net_null0\"\n[[stream]]\nport = 0\nsize = 64\n"
    );
    let (rc, _, err, _) = run(&d, &conf, "1");
    assert_eq!(rc, 2, "{err}");
    assert!(err.contains("conf.toml: key `pktgen.tx_lcores[0]`: lcore 5 is not a worker lcore"), "{err}");
}

/// `[pktgen] link_wait_ms`: a memif server whose client never comes stays down, and the run
/// ends with exit 1 naming the port, after the wait and without sending anything; a port whose
/// link is up at once (net_ring) does not wait and sends.
#[test]
fn link_wait_ms_waits_for_the_link_and_names_a_port_still_down() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let d = tmp("linkwait");
    let sock = d.join("m.sock");
    let conf = format!(
        "[eal]\n{EAL}\n[pktgen]\ntx_lcores = [1]\nlink_wait_ms = 300\n[[port]]\nname = \"mem\"\n\
         vdev = \"net_memif0,role=server,socket={},socket-abstract=no\"\n[[stream]]\nport = 0\nsize = 64\n",
        sock.display()
    );
    let t = std::time::Instant::now();
    let (rc, _, err, v) = run(&d, &conf, "1");
    assert_eq!(rc, 1, "{err}");
    assert!(err.contains("port mem: the link is not up after 300 ms ([pktgen] link_wait_ms)"), "{err}");
    assert!(t.elapsed() >= std::time::Duration::from_millis(300));
    assert_eq!(v, Value::Null, "nothing was sent, no summary");
    let conf = format!(
        "[eal]\n{EAL}\n[pktgen]\ntx_lcores = [1]\nlink_wait_ms = 300\n[[port]]\nvdev = \"net_ring0\"\n\
         [[stream]]\nport = 0\nrx_port = 0\nsize = 64\nrate_pps = 1000\n"
    );
    let (rc, _, err, v) = run(&d, &conf, "1");
    assert_eq!(rc, 0, "{err}");
    assert!(u(&v["streams"][0]["tx"]["packets"]) >= 900, "{v}");
}

/// A memif client started before its server: without `link_wait_ms` it exits 1 at once with an
/// error naming the port and the server's socket and saying to start the server first; with
/// `link_wait_ms` its start is retried until the server (another pktgen, started 0.5 s later)
/// is there, and it sends what it was asked to.
#[test]
fn a_memif_client_waits_for_its_server_or_says_to_start_it() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let d = tmp("memif-client");
    let sock = d.join("m.sock");
    let conf = |role: &str, wait: u64, prefix: &str| {
        format!(
            "[eal]\nargs = [\"--no-huge\", \"-m\", \"512\", \"--no-pci\", \"--no-shconf\", \"--lcores\", \"0@0,1@1\", \
             \"--file-prefix={prefix}\", \"--log-level\", \"*:error\"]\n[pktgen]\ntx_lcores = [1]\nlink_wait_ms = {wait}\n\
             [[port]]\nname = \"m0\"\nvdev = \"net_memif0,role={role},socket={},socket-abstract=no\"\n\
             [[stream]]\nport = 0\nsize = 64\nrate_pps = 1000\n",
            sock.display()
        )
    };
    let (rc, _, err, v) = run(&d, &conf("client", 0, "mc1"), "1");
    assert_eq!((rc, v), (1, Value::Null), "{err}");
    assert!(
        err.contains(&format!(
            "pktgen: port m0: the net_memif client cannot connect to its server's socket {} and [pktgen] link_wait_ms is \
             0, so pktgen did not wait for it (rte_eth_dev_start(port 0 m0): Operation not permitted): start the memif \
             server",
            sock.display()
        )),
        "{err}"
    );
    let (cd, sd) = (d.join("client"), d.join("server"));
    for x in [&cd, &sd] {
        std::fs::create_dir_all(x).unwrap();
    }
    std::fs::write(cd.join("conf.toml"), conf("client", 10_000, "mc2")).unwrap();
    std::fs::write(sd.join("conf.toml"), conf("server", 10_000, "ms2")).unwrap();
    let pktgen = |dir: &Path, packets: &str| {
        Command::new(env!("CARGO_BIN_EXE_pktgen"))
            .args(["run", "-q", "-c", dir.join("conf.toml").to_str().unwrap(), "--duration", "3"])
            .args(["--packets", packets, "--json", dir.join("s.json").to_str().unwrap()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let client = pktgen(&cd, "200");
    std::thread::sleep(std::time::Duration::from_millis(500));
    // The server outlasts the client (1000 packets at 1000/s against 200).
    let server = pktgen(&sd, "1000");
    let (c, s) = (client.wait_with_output().unwrap(), server.wait_with_output().unwrap());
    assert!(c.status.success(), "{}", String::from_utf8_lossy(&c.stderr));
    assert!(s.status.success(), "{}", String::from_utf8_lossy(&s.stderr));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(cd.join("s.json")).unwrap()).unwrap();
    assert_eq!(u(&v["streams"][0]["tx"]["packets"]), 200, "{v}");
}

/// A capture of `n` UDP/IPv4 frames of 60 to 187 bytes (frame `i`: `60 + i % 128`), frame `i`
/// at `i * gap_us` µs: payload bytes `0x11 + i`, never the stamp's magic where a stamp would be.
fn capture(path: &Path, n: usize, gap_us: u64) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    for i in 0..n {
        let len = 60 + i % 128;
        let mut f = vec![0x11u8.wrapping_add(i as u8) & 0x7f; len];
        f[..12].copy_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14..34].copy_from_slice(&[
            0x45,
            0,
            0,
            (len - 14) as u8,
            0,
            0,
            0x40,
            0,
            64,
            17,
            0,
            0,
            10,
            0,
            0,
            1,
            10,
            0,
            0,
            2,
        ]);
        f[34..42].copy_from_slice(&[0x30, 0x39, 0, 7, 0, (len - 34) as u8, 0, 0]);
        assert_ne!(f[42], 0xA5);
        frames.push(f);
    }
    let at: Vec<(u64, Vec<u8>)> =
        frames.iter().enumerate().map(|(i, f)| (1_000_000 + i as u64 * gap_us, f.clone())).collect();
    write_pcap_at(path, &at);
    frames
}

/// pcap replay at a set rate over a net_ring loopback: 400 frames, 6 passes, at 1000 packets/s.
/// The run ends by itself when the passes are over (well before the 30 s given); the receiving
/// side counts exactly loops x frames, with their bytes, at 1000 packets/s within 2% over about
/// 2.4 s; nothing is skipped and nothing else arrives.
#[test]
fn pcap_replay_at_a_set_rate_sends_loops_times_frames() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let d = tmp("replay-rate");
    let file = d.join("in.pcap");
    let frames = capture(&file, 400, 100);
    let bytes: u64 = frames.iter().map(|f| f.len() as u64).sum();
    let conf = format!(
        "[eal]\n{EAL}\n[pktgen]\ntx_lcores = [1]\ncatch_up_ms = 1000\n[[port]]\nname = \"loop\"\nvdev = \"net_ring0\"\n\
         [[stream]]\nname = \"trace\"\nkind = \"pcap\"\nfile = \"{}\"\nloops = 6\nport = \"loop\"\nrx_port = \"loop\"\nrate_pps = 1000\n",
        file.display()
    );
    let (rc, out, err, v) = run(&d, &conf, "30");
    assert_eq!(rc, 0, "{out}\n{err}");
    let s = &v["streams"][0];
    let ctx = format!("{s}");
    assert_eq!(s["kind"], "pcap", "{ctx}");
    assert_eq!(u(&s["tx"]["packets"]), 6 * 400, "{ctx}");
    assert_eq!(u(&s["rx"]["packets"]), 6 * 400, "{ctx}");
    assert_eq!(u(&s["tx"]["bytes"]), 6 * bytes, "{ctx}");
    assert_eq!(u(&s["rx"]["bytes"]), 6 * bytes, "{ctx}");
    assert_eq!(u(&s["replay"]["skipped"]), 0, "{ctx}");
    assert_eq!(u(&s["replay"]["frames_in_file"]), 400, "{ctx}");
    assert!(f(&v["seconds"]) < 10.0, "the run ends when the passes are over: {}", v["seconds"]);
    assert!(f(&s["rx"]["seconds"]) >= 2.0, "{ctx}");
    let rx_pps = f(&s["rx_pps"]);
    assert!((rx_pps / 1000.0 - 1.0).abs() <= 0.02, "{ctx}: received at {rx_pps} pps");
    assert_eq!(u(&v["rx_other"]), 0);
}

/// Timing-faithful replay: 201 frames 5 ms apart (a 1 s capture) arrive over 1 s at speed 1 and
/// over 0.5 s at speed 2 (the receiving side's first-to-last window), within 3%.
#[test]
fn pcap_replay_follows_the_capture_timing_with_a_speed_factor() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let d = tmp("replay-timing");
    let file = d.join("in.pcap");
    capture(&file, 201, 5000);
    let mut windows = Vec::new();
    for speed in [1.0, 2.0] {
        let conf = format!(
            "[eal]\n{EAL}\n[pktgen]\ntx_lcores = [1]\n[[port]]\nvdev = \"net_ring0\"\n\
             [[stream]]\nkind = \"pcap\"\nfile = \"{}\"\nspeed = {speed}\nport = 0\nrx_port = 0\n",
            file.display()
        );
        let (rc, out, err, v) = run(&d, &conf, "30");
        assert_eq!(rc, 0, "{out}\n{err}");
        let s = &v["streams"][0];
        assert_eq!(u(&s["rx"]["packets"]), 201, "{s}");
        assert!(out.contains(&format!("capture x{speed}")), "{out}");
        let w = f(&s["rx"]["seconds"]);
        assert!((w * speed - 1.0).abs() <= 0.03, "speed {speed}: {w} s for a 1 s capture");
        windows.push(w);
    }
    assert!((windows[0] / windows[1] - 2.0).abs() <= 0.06, "{windows:?}");
}

/// Runs pktgen replaying `file` twice at full rate into a net_pcap port writing `out_pcap`.
fn replay_twice_into_pcap(d: &Path, file: &Path, out_pcap: &Path) -> (i32, String, String, Value) {
    let conf = format!(
        "[eal]\n{EAL}\n[pktgen]\ntx_lcores = [1]\n[[port]]\nvdev = \"net_pcap0,tx_pcap={}\"\n\
         [[stream]]\nkind = \"pcap\"\nfile = \"{}\"\nloops = 2\nport = 0\n",
        out_pcap.display(),
        file.display()
    );
    run(d, &conf, "30")
}

/// Frames leave as captured: a full-rate replay of 2 passes into net_pcap writes the file's
/// frames twice, byte for byte, in order.
#[test]
fn pcap_replay_sends_frames_as_captured() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let d = tmp("replay-bytes");
    let (file, out_pcap) = (d.join("in.pcap"), d.join("out.pcap"));
    let frames = capture(&file, 300, 10);
    let (rc, out, err, v) = replay_twice_into_pcap(&d, &file, &out_pcap);
    assert_eq!(rc, 0, "{out}\n{err}");
    assert_eq!(u(&v["streams"][0]["tx"]["packets"]), 600);
    let got = read_pcap(&out_pcap);
    for (i, f) in got.iter().enumerate() {
        assert_eq!(&f[..], &frames[i % 300][..], "frame {i}");
    }
    assert_eq!(got.len(), 600);
}

/// A capture as killing tcpdump leaves it (its last record cut short), with a record longer
/// than the file's snaplen of 100 bytes: the good frames all go out, those past the snaplen
/// cut to 100 bytes as libpcap reads them, the cut record counted as unreadable; the summary is
/// printed and written, `sizes` lists the distinct lengths sent, and pktgen exits 0.
#[test]
fn pcap_replay_of_a_cut_capture_sends_every_good_frame() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let d = tmp("replay-cut");
    let (file, out_pcap) = (d.join("in.pcap"), d.join("out.pcap"));
    let frames = capture(&file, 61, 10);
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[16..20].copy_from_slice(&100u32.to_le_bytes());
    // Frame 60 (120 bytes) is the last: cut it short by 30 bytes.
    bytes.truncate(bytes.len() - 30);
    std::fs::write(&file, &bytes).unwrap();
    let (rc, out, err, v) = replay_twice_into_pcap(&d, &file, &out_pcap);
    assert_eq!(rc, 0, "{out}\n{err}");
    assert!(out.contains("pcap"), "the summary is printed: {out}");
    let s = &v["streams"][0];
    assert_eq!(u(&s["tx"]["packets"]), 2 * 60, "{s}");
    assert_eq!((u(&s["replay"]["unreadable"]), u(&s["replay"]["frames_in_file"])), (2, 60), "{s}");
    assert_eq!(u(&s["replay"]["distinct_sizes"]), 41, "{s}");
    let sizes: Vec<u64> = s["sizes"].as_array().unwrap().iter().map(u).collect();
    assert_eq!(sizes, (60..=100).collect::<Vec<_>>());
    let got = read_pcap(&out_pcap);
    assert_eq!(got.len(), 120);
    for (i, f) in got.iter().enumerate() {
        let want = &frames[i % 60];
        assert_eq!(&f[..], &want[..want.len().min(100)], "frame {i}");
    }
    assert_eq!((got[40].len(), got[59].len()), (100, 100));
    assert!(std::fs::read_to_string(d.join("summary.csv")).unwrap().lines().count() >= 2);
}

/// A replay cut short by `--packets` lists the lengths it sent, not the file's: 20 of a 300-frame
/// capture (60 to 187 bytes, 128 distinct) send lengths 60 to 79; the run's time covers the
/// stream's sending time.
#[test]
fn a_replay_cut_short_lists_the_lengths_it_sent() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let d = tmp("replay-short");
    let file = d.join("in.pcap");
    capture(&file, 300, 10);
    let conf = format!(
        "[eal]\n{EAL}\n[pktgen]\ntx_lcores = [1]\n[[port]]\nvdev = \"net_null0,no-rx=1\"\n\
         [[stream]]\nkind = \"pcap\"\nfile = \"{}\"\nport = 0\n",
        file.display()
    );
    let (rc, _, err, v) = run_args(&d, &conf, &["--packets", "20", "--duration", "30"]);
    assert_eq!(rc, 0, "{err}");
    let s = &v["streams"][0];
    assert_eq!(u(&s["tx"]["packets"]), 20, "{s}");
    assert_eq!((u(&s["replay"]["frames_in_file"]), u(&s["replay"]["distinct_sizes"])), (300, 20), "{s}");
    let sizes: Vec<u64> = s["sizes"].as_array().unwrap().iter().map(u).collect();
    assert_eq!(sizes, (60..80).collect::<Vec<_>>(), "{s}");
    assert!(f(&v["seconds"]) >= f(&s["tx"]["seconds"]), "{v}");
}

/// A set rate lets the first frame go at once: at 0.001 packets/s, one frame in a 2 s run (the
/// next is due 1000 s later); a `speed` so small that the send times leave the TSC's range is
/// refused with the bounds.
#[test]
fn a_slow_rate_sends_its_first_frame_at_once_and_speed_is_bounded() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let d = tmp("replay-slow");
    let file = d.join("in.pcap");
    capture(&file, 10, 10);
    let conf = |extra: &str| {
        format!(
            "[eal]\n{EAL}\n[pktgen]\ntx_lcores = [1]\n[[port]]\nvdev = \"net_null0,no-rx=1\"\n\
             [[stream]]\nkind = \"pcap\"\nfile = \"{}\"\nport = 0\n{extra}\n\
             [[stream]]\nport = 0\nsize = 64\n{extra}\n",
            file.display()
        )
    };
    let (rc, out, err, v) = run(&d, &conf("rate_pps = 1e-3"), "2");
    assert_eq!(rc, 0, "{out}\n{err}");
    assert_eq!(u(&v["streams"][0]["tx"]["packets"]), 1, "{}", v["streams"][0]);
    assert_eq!(u(&v["streams"][1]["tx"]["packets"]), 1, "{}", v["streams"][1]);
    let (rc, out, err, v) = run(&d, &conf("rate_bps = 1"), "2");
    assert_eq!(rc, 0, "{out}\n{err}");
    assert_eq!(u(&v["streams"][0]["tx"]["packets"]), 1, "{}", v["streams"][0]);
    assert_eq!(u(&v["streams"][1]["tx"]["packets"]), 1, "{}", v["streams"][1]);
    let d2 = tmp("replay-speed");
    let (rc, _, err, v) = run(
        &d2,
        &format!(
            "[eal]\n{EAL}\n[pktgen]\ntx_lcores = [1]\n[[port]]\nvdev = \"net_null0,no-rx=1\"\n\
             [[stream]]\nkind = \"pcap\"\nfile = \"{}\"\nport = 0\nspeed = 1e-15\n",
            file.display()
        ),
        "2",
    );
    assert_eq!((rc, v), (2, Value::Null));
    assert!(err.contains("key `stream[0].speed`: expected a factor from 1e-6 to 1e6"), "{err}");
}

/// `--packets N` stops a stream after N packets and ends the run.
#[test]
fn packets_limits_a_stream_and_ends_the_run() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let d = tmp("packets");
    let conf = format!(
        "[eal]\n{EAL}\n[pktgen]\ntx_lcores = [1]\n[[port]]\nvdev = \"net_ring0\"\n[[stream]]\nport = 0\nrx_port = 0\nsize = 64\nrate_pps = 20000\n\
         [[stream]]\nport = 0\nrx_port = 0\nsize = 64\nrate_pps = 2000\n"
    );
    let (rc, _, err, v) = run_args(&d, &conf, &["--packets", "5000", "--duration", "30"]);
    assert_eq!(rc, 0, "{err}");
    let s = &v["streams"][0];
    assert_eq!((u(&s["tx"]["packets"]), u(&s["rx"]["packets"])), (5000, 5000), "{s}");
    // Each stream's rate is over its own sending time: the fast one, done in a quarter of a
    // second on the lane the slow one keeps for 2.5 s, reached its target too.
    for s in v["streams"].as_array().unwrap() {
        let r = f(&s["tx_vs_target"]);
        assert!((0.9..=1.1).contains(&r), "{s}");
    }
    assert!(f(&v["seconds"]) < 5.0, "{}", v["seconds"]);
    // The run's time covers every stream's sending time (all on the TSC, from before the lanes
    // start to after they stop).
    for s in v["streams"].as_array().unwrap() {
        assert!(f(&v["seconds"]) >= f(&s["tx"]["seconds"]), "{} < {s}", v["seconds"]);
    }
}

/// RoCEv2 congestion signals on the receive side, over a net_ring loopback: a stream sent
/// CE-marked comes back with every packet counted CE, one sent ECT(0) with none, and CNPs
/// (BTH opcode 0x81) sent from a capture for the first stream's QPs are counted as that
/// stream's CNPs, not as unknown frames.
#[test]
fn ce_marks_and_cnps_are_counted_per_stream() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let d = tmp("congestion");
    let file = d.join("cnp.pcap");
    let mut cnps = Vec::new();
    for i in 0..50u32 {
        // Ethernet, IPv4 (checksum left 0: pktgen sends captures as they are), UDP to 4791,
        // BTH CNP to QP 0x100 + i % 4 (the first stream's flows), 16 reserved bytes, ICRC.
        let len = 14 + 20 + 8 + 12 + 16 + 4;
        let mut f = vec![0u8; len];
        f[..12].copy_from_slice(&[2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2]);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[16..18].copy_from_slice(&((len - 14) as u16).to_be_bytes());
        f[22] = 64;
        f[23] = 17;
        f[36..38].copy_from_slice(&4791u16.to_be_bytes());
        f[38..40].copy_from_slice(&((len - 34) as u16).to_be_bytes());
        f[42] = 0x81;
        f[47..50].copy_from_slice(&(0x100 + i % 4).to_be_bytes()[1..]);
        cnps.push((1_000_000 + u64::from(i) * 100, f));
    }
    write_pcap_at(&file, &cnps);
    let conf = format!(
        "[eal]\n{EAL}\n[pktgen]\ntx_lcores = [1]\n[[port]]\nvdev = \"net_ring0\"\n\
         [[stream]]\nname = \"marked\"\nkind = \"rocev2\"\nport = 0\nrx_port = 0\nsize = 128\nflows = 4\necn = 3\nrate_pps = 2000\n\
         [[stream]]\nname = \"clean\"\nkind = \"rocev2\"\nport = 0\nrx_port = 0\nsize = 128\nsrc_qp = 512\necn = 2\nrate_pps = 2000\n\
         [[stream]]\nname = \"cnps\"\nkind = \"pcap\"\nfile = \"{}\"\nport = 0\nrate_pps = 1000\n",
        file.display()
    );
    let (rc, out, err, v) = run(&d, &conf, "1");
    assert_eq!(rc, 0, "{out}\n{err}");
    let (marked, clean) = (&v["streams"][0], &v["streams"][1]);
    assert!(u(&marked["rx"]["packets"]) > 0, "{marked}");
    assert_eq!(marked["rx"]["ce_marked"], marked["rx"]["packets"], "{marked}");
    assert_eq!(u(&clean["rx"]["ce_marked"]), 0, "{clean}");
    assert_eq!(u(&v["streams"][2]["tx"]["packets"]), 50);
    assert_eq!(u(&marked["rx"]["cnps"]), 50, "{marked}");
    assert_eq!(u(&clean["rx"]["cnps"]), 0, "{clean}");
    assert_eq!(u(&v["rx_cnps"]), 50);
    assert_eq!(u(&v["rx_other"]), 0);
    assert!(out.contains("congestion: stream, received CE-marked, CNPs received"), "{out}");
    let csv = std::fs::read_to_string(d.join("summary.csv")).unwrap();
    assert!(csv.lines().next().unwrap().ends_with(",ce_marked,cnps"), "{csv}");
}

/// The rate changes while the run goes: a 10 000 packets/s stream told `rate s 30k` on stdin
/// about 1.5 s into a 3 s run sends about 1.5 s x 10 000 + 1.5 s x 30 000 packets (60 000;
/// without the change 30 000), and says so on stderr; a bad command is answered, not fatal.
#[test]
fn the_rate_changes_while_the_run_goes() {
    use std::io::Write;
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let d = tmp("rate-change");
    let c = d.join("conf.toml");
    std::fs::write(
        &c,
        format!(
            "[eal]\n{EAL}\n[pktgen]\ntx_lcores = [1]\ncatch_up_ms = 1000\n[[port]]\nvdev = \"net_ring0\"\n\
             [[stream]]\nname = \"s\"\nport = 0\nrx_port = 0\nsize = 64\nrate_pps = 10000\n"
        ),
    )
    .unwrap();
    let json = d.join("summary.json");
    let mut g = Command::new(env!("CARGO_BIN_EXE_pktgen"))
        .args(["run", "-q", "-c", c.to_str().unwrap(), "--duration", "3", "--json", json.to_str().unwrap()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = g.stdin.take().unwrap();
    // EAL's start takes a moment: the run's 3 s start after it.
    std::thread::sleep(std::time::Duration::from_millis(1800));
    stdin.write_all(b"rate nope 5\nrate s 30k\n").unwrap();
    stdin.flush().unwrap();
    let o = g.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("pktgen: stream s: rate 30000 packets/s"), "{err}");
    assert!(err.contains("pktgen: no stream \"nope\"; streams: s"), "{err}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let tx = u(&v["streams"][0]["tx"]["packets"]);
    assert!((42_000..=78_000).contains(&tx), "sent {tx}: the change did not take ({err})");
    assert_eq!(v["streams"][0]["rx"]["packets"], v["streams"][0]["tx"]["packets"]);
    // The summary shows the last rate as the target, when it changed, and compares the rate
    // achieved with the target's mean over the sending time (10 k, then 30 k).
    let st = &v["streams"][0];
    assert_eq!(st["target_pps"], 30_000.0, "{st}");
    let changes = st["rate_changes"].as_array().unwrap();
    assert_eq!(changes.len(), 1, "{st}");
    assert_eq!(changes[0]["rate"], 30_000.0);
    assert!((0.0..3.0).contains(&f(&changes[0]["at_s"])), "{st}");
    let vs = f(&st["tx_vs_target"]);
    assert!((0.95..=1.05).contains(&vs), "achieved/target {vs}: {st}");
}
