//! Live counters of a running appliance: DPDK's own telemetry client (`dpdk-telemetry.py`) reads
//! `/dpu/stats` and `/dpu/table` from the appliance's telemetry socket while it forwards, the
//! periodic stats line prints on stderr, and two appliances started at once each have a
//! telemetry socket of their own.
//!
//! The port is a net_null vdev, whose rx makes 64-byte frames (all zeros) as fast as it is polled
//! and whose tx discards: an endless live input. The pipeline forwards every frame back out.

use functional_tests::{dpu_bin, scratch, write_config};
use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CONF: &str = r#"
[eal]
args = ["--no-huge", "-m", "256", "--no-pci", "--no-shconf", "--lcores", "0@0,1@1", "--log-level", "*:error"]
[dataplane]
stats_interval_ms = 500
[[port]]
name = "null-0"
vdev = "net_null0"
"#;

/// The config: [`CONF`] and a table that sends every frame back out of port 0.
fn conf() -> String {
    format!("{CONF}{}", functional_tests::TO_PORT1.replace("forward(1)", "forward(0)"))
}

/// Runs `dpdk-telemetry.py -f prefix` with one command; returns its reply (the command's value).
fn query(prefix: &str, cmd: &str) -> Value {
    let out = Command::new("dpdk-telemetry.py")
        .args(["-f", prefix])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(format!("{cmd}\n").as_bytes())?;
            c.wait_with_output()
        })
        .unwrap_or_else(|e| panic!("dpdk-telemetry.py (Debian package dpdk) cannot run: {e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    let start =
        text.find('{').unwrap_or_else(|| panic!("no reply to {cmd}: {text}{}", String::from_utf8_lossy(&out.stderr)));
    let v: Value = serde_json::from_str(&text[start..]).unwrap_or_else(|e| panic!("{e}: {text}"));
    let key = cmd.split(',').next().unwrap();
    v[key].clone()
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("no {k} in {v}"))
}

fn start(dir: &Path, conf: &Path, stats: &Path, secs: &str, extra: &[&str]) -> Child {
    Command::new(dpu_bin())
        .current_dir(dir)
        .args(["-c", conf.to_str().unwrap(), "--stats-json", stats.to_str().unwrap(), "--duration", secs])
        .arg("--")
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits until `prefix`'s telemetry socket answers `/dpu/stats` with traffic counted.
fn wait_running(prefix: &str, child: &mut Child) -> Value {
    let t = Instant::now();
    loop {
        assert!(child.try_wait().unwrap().is_none(), "the appliance exited early");
        let sock = Path::new("/var/run/dpdk").join(prefix).join("dpdk_telemetry.v2");
        if sock.exists() {
            let v = query(prefix, "/dpu/stats");
            if v.get("port_rx_packets/null_0").and_then(Value::as_u64).unwrap_or(0) > 0 {
                return v;
            }
        }
        assert!(t.elapsed() < Duration::from_secs(20), "no live counters within 20 s");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn dpdk_telemetry_reads_live_counters_and_the_stats_line_prints() {
    let dir = scratch("telemetry_live");
    let conf = write_config(&dir, "null.toml", &conf());
    let stats = dir.join("stats.json");
    let prefix = format!("dputel-{}", std::process::id());
    let mut dpu = start(&dir, &conf, &stats, "6", &[&format!("--file-prefix={prefix}")]);
    let first = wait_running(&prefix, &mut dpu);
    std::thread::sleep(Duration::from_millis(600));
    let second = query(&prefix, "/dpu/stats");
    let table = query(&prefix, "/dpu/table,l2");
    let no_table = query(&prefix, "/dpu/table,nope");
    let odd = query(&prefix, "/dpu/table,é✓");
    let no_coll = query(&prefix, "/dpu/stragglers,1");
    let colls = query(&prefix, "/dpu/collectives");
    let bad_page = query(&prefix, "/dpu/collectives,1");
    let workers = query(&prefix, "/dpu/workers");
    let out = dpu.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    // Live counters move, and what every frame does is counted: received, forwarded back.
    let (rx1, rx2) = (u(&first, "port_rx_packets/null_0"), u(&second, "port_rx_packets/null_0"));
    assert!(rx2 > rx1, "rx did not grow: {rx1} then {rx2}");
    assert_eq!(u(&second, "port_rx_bytes/null_0"), 64 * rx2, "{second}");
    assert!(u(&second, "port_tx_packets/null_0") + u(&second, "dropped_packets/tx_full") <= rx2, "{second}");
    assert_eq!(u(&second, "dropped_packets/runt"), 0, "{second}");
    assert!(second.get("agg_folded_contributions").is_some(), "{second}");
    // The table: no entries, every frame a miss.
    assert_eq!(u(&table, "entries"), 0, "{table}");
    assert_eq!(u(&table, "pages"), 1, "{table}");
    // Every frame parses (an all-zero Ethernet header) and misses the table: read later, the
    // miss count is at least the rx count read before.
    assert!(u(&table, "table_packets/l2/miss") >= rx2, "{table}");
    assert!(no_table["error"].as_str().unwrap_or("").contains("no table 'nope'; tables: l2"), "{no_table}");
    // Non-ASCII in a request comes back as '?', and the reply is still JSON (query parses it).
    assert_eq!(odd["error"].as_str().unwrap_or(""), "no table '??'; tables: l2", "{odd}");
    // The worker's own loop: net_null always has frames, so every poll is busy, and a burst of
    // 32 frames takes some TSC cycles (the median is a log2 bucket's bound: 2^k - 1).
    assert!(u(&workers, "busy_polls/0") > 0 && u(&workers, "bursts/0") > 0, "{workers}");
    assert_eq!(u(&workers, "idle_polls/0"), 0, "{workers}");
    let p50 = u(&workers, "cycles_per_burst_p50/0");
    assert!(p50 > 0 && (p50 + 1).is_power_of_two() && u(&workers, "cycles_per_burst_mean/0") > 0, "{workers}");
    // Residence (rx burst to tx burst): every packet sent waited some cycles, and at most as
    // long as the drain interval plus a burst's processing allows on a busy worker; a log2
    // bucket bound, with the 99th percentile at or above the median.
    let (r50, r99) = (u(&workers, "residence_cycles_p50/0"), u(&workers, "residence_cycles_p99/0"));
    assert!(r50 > 0 && (r50 + 1).is_power_of_two() && r99 >= r50, "{workers}");
    // The straggler view is there (this config has no collective to show).
    assert_eq!(no_coll["error"].as_str().unwrap_or(""), "no collective 1", "{no_coll}");
    // So is the per-collective one: no collective, one (empty) page.
    assert_eq!((u(&colls, "collectives"), u(&colls, "page"), u(&colls, "pages")), (0, 0, 1), "{colls}");
    assert_eq!(bad_page["error"].as_str().unwrap_or(""), "page 1: 0 collective(s) make 1 page(s)", "{bad_page}");
    // The final stats count at least what was seen live.
    let s: Value = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    assert!(s["ports"][0]["workers"]["rx_packets"].as_u64().unwrap() >= rx2);
    // Where to connect is printed at start; the stats line every 500 ms (6 s: at least 8).
    assert!(stdout.contains(&format!("dpu: telemetry: /var/run/dpdk/{prefix}/dpdk_telemetry.v2")), "{stdout}");
    let lines =
        stderr.lines().filter(|l| l.starts_with("dpu: ") && l.contains(" s: rx ") && l.contains("Mpps")).count();
    assert!(lines >= 8, "{lines} stats lines:\n{stderr}");
}

#[test]
fn two_instances_have_sockets_of_their_own() {
    let dir = scratch("telemetry_two");
    // No --file-prefix: each appliance takes `dpu-<its pid>`.
    let conf = write_config(&dir, "null.toml", &conf().replace("stats_interval_ms = 500", ""));
    let (sa, sb) = (dir.join("a.json"), dir.join("b.json"));
    let mut a = start(&dir, &conf, &sa, "5", &[]);
    let mut b = start(&dir, &conf, &sb, "5", &[]);
    let (pa, pb) = (format!("dpu-{}", a.id()), format!("dpu-{}", b.id()));
    let va = wait_running(&pa, &mut a);
    let vb = wait_running(&pb, &mut b);
    assert!(u(&va, "port_rx_packets/null_0") > 0 && u(&vb, "port_rx_packets/null_0") > 0);
    let (oa, ob) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    assert_eq!(oa.status.code(), Some(0), "{}", String::from_utf8_lossy(&oa.stderr));
    assert_eq!(ob.status.code(), Some(0), "{}", String::from_utf8_lossy(&ob.stderr));
    assert!(String::from_utf8_lossy(&oa.stdout).contains(&format!("/var/run/dpdk/{pa}/dpdk_telemetry.v2")));
    assert!(String::from_utf8_lossy(&ob.stdout).contains(&format!("/var/run/dpdk/{pb}/dpdk_telemetry.v2")));
}

/// `GET path` on `addr`; the status code and the body.
fn http_get(addr: &str, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    let status = r.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = r.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

/// Parses an OpenMetrics text scrape with the Python `prometheus_client` parser (Debian's
/// python3-prometheus-client, hence /usr/bin/python3): `{sample name: {"k=v,...": value}}`.
/// Every family must be a counter but `*_slots_in_use`, a gauge.
fn parse_scrape(dir: &Path, text: &str) -> Value {
    let f = dir.join("scrape.txt");
    std::fs::write(&f, text).unwrap();
    let script = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
out = {}
for fam in text_string_to_metric_families(open(sys.argv[1]).read()):
    # Counters all, but for the one gauge: a collective's slots in use.
    want = "gauge" if fam.name.endswith("_slots_in_use") else "counter"
    assert fam.type == want, (fam.name, fam.type)
    for s in fam.samples:
        key = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
        out.setdefault(s.name, {})[key] = s.value
print(json.dumps(out))
"#;
    let o = Command::new("/usr/bin/python3").args(["-c", script, f.to_str().unwrap()]).output().unwrap();
    assert!(
        o.status.success(),
        "the scrape does not parse (is python3-prometheus-client installed?):\n{}\n{text}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Reads the metrics address the appliance prints at start (port 0: the OS chose), waits
/// `after_ms`, and scrapes `/metrics` twice 300 ms apart (both answered 200): the address and
/// the two scrapes.
fn two_scrapes(dpu: &mut Child, after_ms: u64) -> (String, String, String) {
    let mut stdout = std::io::BufReader::new(dpu.stdout.take().unwrap());
    let mut addr = String::new();
    let t = Instant::now();
    while addr.is_empty() {
        let mut line = String::new();
        assert!(std::io::BufRead::read_line(&mut stdout, &mut line).unwrap() > 0, "no metrics line");
        if let Some(a) = line.trim().strip_prefix("dpu: metrics: http://") {
            addr = a.trim_end_matches("/metrics").to_string();
        }
        assert!(t.elapsed() < Duration::from_secs(60), "no metrics address printed within 60 s");
    }
    // Back to the child, for `wait_with_output` to drain: a closed pipe would fail its prints.
    dpu.stdout = Some(stdout.into_inner());
    std::thread::sleep(Duration::from_millis(after_ms));
    let (status, first) = http_get(&addr, "/metrics");
    assert_eq!(status, 200, "{first}");
    std::thread::sleep(Duration::from_millis(300));
    let (status, second) = http_get(&addr, "/metrics");
    assert_eq!(status, 200, "{second}");
    (addr, first, second)
}

#[test]
fn prometheus_metrics_parse_and_agree_with_the_final_stats() {
    let dir = scratch("telemetry_prometheus");
    let conf = write_config(
        &dir,
        "null.toml",
        &format!("{}\n[telemetry]\nprometheus = \"127.0.0.1:0\"\n", conf().replace("stats_interval_ms = 500", "")),
    );
    let stats = dir.join("stats.json");
    let mut dpu = start(&dir, &conf, &stats, "4", &[]);
    let (addr, first, second) = two_scrapes(&mut dpu, 1000);
    assert_eq!(http_get(&addr, "/other").0, 404);
    let out = dpu.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let (a, b) = (parse_scrape(&dir, &first), parse_scrape(&dir, &second));
    let s: Value = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let v = |m: &Value, name: &str, labels: &str| {
        m[name][labels].as_f64().unwrap_or_else(|| panic!("{name}{{{labels}}}: {m}")) as u64
    };
    let (rx1, rx2) =
        (v(&a, "dpu_port_rx_packets_total", "port=null-0"), v(&b, "dpu_port_rx_packets_total", "port=null-0"));
    let final_rx = s["ports"][0]["workers"]["rx_packets"].as_u64().unwrap();
    assert!(rx1 > 0 && rx1 < rx2 && rx2 <= final_rx, "{rx1} {rx2} {final_rx}");
    assert_eq!(v(&b, "dpu_port_rx_bytes_total", "port=null-0"), 64 * rx2);
    assert!(v(&b, "dpu_table_packets_total", "entry=miss,table=l2") >= rx2);
    // Residence histogram: packets the tx queue took, at most those handed to it. Its buckets
    // are cumulative, as Prometheus's `le` buckets: never falling, `+Inf` the whole count.
    let hist = b["dpu_worker_packets_by_residence_cycles_total"]
        .as_object()
        .unwrap_or_else(|| panic!("no residence histogram: {b}"));
    let bound = |k: &str| {
        let le = k.split(',').find_map(|l| l.strip_prefix("cycles_le=")).unwrap_or_else(|| panic!("{k}"));
        if le == "+Inf" {
            u64::MAX
        } else {
            le.parse::<u64>().unwrap()
        }
    };
    let mut buckets: Vec<(u64, u64)> = hist.iter().map(|(k, x)| (bound(k), x.as_f64().unwrap() as u64)).collect();
    buckets.sort();
    assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1), "cumulative: {buckets:?}");
    let resid = buckets.last().map_or(0, |&(le, n)| if le == u64::MAX { n } else { 0 });
    let tx = v(&b, "dpu_port_tx_packets_total", "port=null-0");
    assert!(resid > 0 && resid <= tx, "residence {resid}, tx {tx}");
    // Every drop reason of the final stats is a label of the drops family.
    for (reason, n) in s["drops"].as_object().unwrap() {
        if let Some(live) = b["dpu_dropped_packets_total"].get(format!("reason={reason}")) {
            assert!(live.as_f64().unwrap() as u64 <= n.as_u64().unwrap(), "{reason}");
        }
    }
    assert!(b["dpu_dropped_packets_total"]["reason=tx_full"].is_number(), "{b}");
    // The HTTP threads' exits did not wait for the workers (only EAL's interrupt thread does).
    assert_eq!(s["unmaps_after_grace"], 0, "{s}");
}

/// A client that sends requests and never reads the replies holds only its own connection:
/// other scrapes are answered and the appliance stops on time.
#[test]
fn a_client_that_never_reads_blocks_neither_scrapes_nor_the_exit() {
    use std::io::Write;
    let dir = scratch("telemetry_slow_reader");
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let conf = write_config(
        &dir,
        "null.toml",
        &format!("{}\n[telemetry]\nprometheus = \"127.0.0.1:{port}\"\n", conf().replace("stats_interval_ms = 500", "")),
    );
    let stats = dir.join("stats.json");
    let started = Instant::now();
    let dpu = start(&dir, &conf, &stats, "6", &[]);
    let addr = format!("127.0.0.1:{port}");
    let t = Instant::now();
    let mut hog = loop {
        if let Ok(s) = std::net::TcpStream::connect(&addr) {
            break s;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "no metrics listener");
        std::thread::sleep(Duration::from_millis(50));
    };
    // Far more replies than the socket buffers hold, none read.
    hog.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
    for _ in 0..3000 {
        if hog.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").is_err() {
            break;
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    let (status, body) = http_get(&addr, "/metrics");
    assert_eq!(status, 200, "{body}");
    assert!(t.elapsed() < Duration::from_secs(3), "a scrape took {:?}", t.elapsed());
    let out = dpu.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(started.elapsed() < Duration::from_secs(20), "the appliance took {:?} to stop", started.elapsed());
    drop(hog);
}

/// A collective's counters on `/metrics` while its traffic runs: a capture of one round of both
/// slots of a 2-rank collective replayed endlessly (net_pcap `infinite_rx`): the first pass
/// completes both rounds, every later pass is late contributions that rule 3 answers with
/// resends. Two scrapes 300 ms apart parse, show the 2 rounds and 4 folds exactly, resends that
/// grow and never pass the final stats, no slot in use (the gauge), and the per-collective
/// counters sum to the global ones.
#[test]
fn prometheus_shows_each_collective_live() {
    use functional_tests::grad::{f32s, Coll};
    let dir = scratch("telemetry_collectives");
    let c = Coll { id: 7, ..Coll::default() };
    let pl = f32s(&[1.0; 4]);
    let frames: Vec<(u64, Vec<u8>)> = [(0, 0), (1, 0), (0, 4), (1, 4)]
        .iter()
        .enumerate()
        .map(|(i, &(k, off))| (1_700_000_000_000_000 + 10 * i as u64, c.frame(k, off, 0, &pl, |_| {})))
        .collect();
    let inp = dir.join("in.pcap");
    functional_tests::write_pcap_at(&inp, &frames);
    // Contributions come in on port 0 (the capture, for ever); results leave on port 1, where
    // every member is (a sink).
    let text = format!(
        "[eal]\nargs = [\"--no-huge\", \"-m\", \"256\", \"--no-pci\", \"--no-shconf\", \"--lcores\", \"0@0,1@1\", \"--log-level\", \"*:error\"]\n\
         [mempool]\nmbufs = 8191\n\
         [[port]]\nname = \"in\"\nvdev = \"net_pcap0,rx_pcap={},infinite_rx=1\"\nmac = \"02:00:00:00:00:fe\"\nipv4 = \"10.0.0.254\"\n\
         [[port]]\nname = \"out\"\nvdev = \"net_null0,no-rx=1\"\nmac = \"02:00:00:00:00:fd\"\nipv4 = \"10.0.0.253\"\n\
         [telemetry]\nprometheus = \"127.0.0.1:0\"\n{}",
        inp.display(),
        c.toml().replace("[[collective.member]]\n", "[[collective.member]]\nport = 1\n")
    );
    let conf = write_config(&dir, "coll.toml", &text);
    let stats = dir.join("stats.json");
    let mut dpu = start(&dir, &conf, &stats, "4", &[]);
    let (_, first, second) = two_scrapes(&mut dpu, 1200);
    let out = dpu.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let (a, b) = (parse_scrape(&dir, &first), parse_scrape(&dir, &second));
    let s: Value = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let v = |m: &Value, name: &str| {
        m[name]["collective=7"].as_f64().unwrap_or_else(|| panic!("{name}{{collective=7}}: {m}")) as u64
    };
    let fin = &s["collectives"][0];
    assert_eq!(fin["collective"], 7, "{s}");
    for m in [&a, &b] {
        assert_eq!(v(m, "dpu_agg_collective_completed_rounds_total"), 2);
        assert_eq!(v(m, "dpu_agg_collective_folded_contributions_total"), 4);
        assert_eq!(v(m, "dpu_agg_collective_payload_bytes_total"), 4 * 16);
        assert_eq!(v(m, "dpu_agg_collective_result_packets_total"), 4, "2 rounds, 2 members each");
        assert_eq!(v(m, "dpu_agg_collective_slots_in_use"), 0);
        // One collective: its counters are the global ones.
        assert_eq!(m["dpu_agg_completed_rounds_total"][""].as_f64(), Some(2.0), "{m}");
        assert_eq!(
            m["dpu_agg_resent_result_packets_total"][""].as_f64().map(|x| x as u64),
            Some(v(m, "dpu_agg_collective_resent_result_packets_total"))
        );
    }
    let (r1, r2) = (
        v(&a, "dpu_agg_collective_resent_result_packets_total"),
        v(&b, "dpu_agg_collective_resent_result_packets_total"),
    );
    let r_final = fin["resends"].as_u64().unwrap();
    assert!(r1 > 0 && r1 < r2 && r2 <= r_final, "resends {r1} {r2} {r_final}");
    assert_eq!((fin["completed"].as_u64(), fin["folded"].as_u64()), (Some(2), Some(4)), "{fin}");
}
