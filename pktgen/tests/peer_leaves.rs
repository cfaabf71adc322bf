//! The appliance outlives its memif peer: one appliance process (memif server, forwarding what
//! it receives back out) takes three pktgen sessions (memif clients) in turn, at full rate; the
//! second is killed (SIGKILL) in the middle of its traffic. The appliance must run on after each
//! departure, count every packet of the sessions that reported, and say that the memif PMD's
//! unmapping of the shared rings waited for the workers' grace period at each departure
//! (`unmaps_after_grace` of --stats-json; `dataplane::dpdk::rcu`): without that wait, a worker
//! still reading the rings when the peer leaves dies with SIGSEGV (seen in 1 of 9 bench runs).

mod common;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const EAL: &str = "\"--no-huge\", \"-m\", \"256\", \"--no-pci\", \"--no-shconf\", \"--log-level\", \"*:error\"";

fn appliance_toml(sock: &Path) -> String {
    format!(
        "[eal]\nargs = [{EAL}, \"--lcores\", \"0@0,1@1\"]\n\
         [[port]]\nname = \"m0\"\nrx_desc = 512\ntx_desc = 512\n\
         vdev = \"net_memif0,role=server,socket={},socket-abstract=no\"\n\
         [[lcore]]\nid = 1\nrx = [{{ port = 0, queue = 0 }}]\n\
         [[table]]\nname = \"l2\"\nkey = [{{ field = \"eth.dst\", match = \"exact\" }}]\ndefault_action = \"forward(0)\"\n",
        sock.display()
    )
}

fn pktgen_toml(sock: &Path) -> String {
    format!(
        "[eal]\nargs = [{EAL}, \"--lcores\", \"0@0,1@0\"]\n\
         [pktgen]\nlink_wait_ms = 20000\ntx_lcores = [1]\n\
         [[port]]\nname = \"m0\"\nrx_desc = 512\ntx_desc = 512\n\
         vdev = \"net_memif0,role=client,socket={},socket-abstract=no\"\n\
         [[stream]]\nname = \"udp\"\nport = \"m0\"\nrx_port = \"m0\"\nsize = 60\nflows = 16\n\
         src_ip = \"10.0.0.1\"\ndst_ip = \"10.0.1.1\"\nsrc_port = 10000\ndst_port = 9\n",
        sock.display()
    )
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not an integer: {v}"))
}

#[test]
fn the_appliance_survives_its_memif_peer_leaving_mid_traffic() {
    // Short: a memif socket path must fit a sockaddr_un (108 bytes).
    let dir = std::env::temp_dir().join(format!("pgpl-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("m0.sock");
    let app = dir.join("appliance.toml");
    std::fs::write(&app, appliance_toml(&sock)).unwrap();
    let conf = dir.join("pktgen.toml");
    std::fs::write(&conf, pktgen_toml(&sock)).unwrap();
    let stats = dir.join("dpu-stats.json");
    let mut dpu = common::start_dpu(&app, &stats, 120, std::slice::from_ref(&sock));
    // Per session: the appliance's live rx count before and after it, and what pktgen reported
    // sending (none for the killed one).
    let mut log = String::new();
    let mut sessions = Vec::new();
    for session in 0..3 {
        let before = common::live_rx(&dpu, "m0");
        let json = dir.join(format!("pktgen{session}.json"));
        let secs = if session == 1 { "30" } else { "1" };
        let mut g = Command::new(env!("CARGO_BIN_EXE_pktgen"))
            .args(["run", "-q", "-c", conf.to_str().unwrap(), "--duration", secs])
            .args(["--json", json.to_str().unwrap()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let sent = if session == 1 {
            // Killed while it sends: once the appliance has counted a good part of its traffic.
            let t = Instant::now();
            while common::live_rx(&dpu, "m0") < before + 100_000 {
                assert!(g.try_wait().unwrap().is_none(), "pktgen session 1 ended early");
                assert!(t.elapsed() < Duration::from_secs(25), "session 1 sent nothing in 25 s");
                std::thread::sleep(Duration::from_millis(50));
            }
            common::kill(&g, "-KILL");
            let _ = g.wait();
            None
        } else {
            let o = g.wait_with_output().unwrap();
            log += &String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(0), "pktgen session {session} failed:\n{log}");
            let p: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
            Some(u(&p["streams"][0]["tx"]["packets"]))
        };
        // The disconnect is handled on the appliance's interrupt thread: give it a moment.
        std::thread::sleep(Duration::from_millis(300));
        assert!(dpu.try_wait().unwrap().is_none(), "the appliance died after session {session} left:\n{log}");
        sessions.push((before, common::live_rx(&dpu, "m0"), sent));
    }
    let live = common::live_stats(&dpu).expect("live counters");
    common::kill(&dpu, "-TERM");
    let d = dpu.wait_with_output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&d.stdout), String::from_utf8_lossy(&d.stderr));
    assert_eq!(d.status.code(), Some(0), "the appliance failed:\n{text}");
    let s: Value = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let rx = u(&s["ports"][0]["workers"]["rx_packets"]);
    assert_eq!(rx, sessions[2].1, "the final count is the last live one:\n{text}");
    // Nothing was sent after the last session: the live drops are the final ones, the tx
    // queues' refusals (tx_full) included.
    assert_eq!(live["dropped_packets/tx_full"], s["drops"]["tx_full"], "{live}\n{text}");
    for (i, (before, after, sent)) in sessions.iter().enumerate() {
        let got = after - before;
        match sent {
            // Everything the session handed to the ring, but what was still in the ring (512
            // descriptors) when it left.
            Some(sent) => assert!(got <= *sent && got + 512 >= *sent, "session {i}: {got} of {sent}:\n{text}"),
            None => assert!(got >= 100_000, "session {i} (killed): {got}:\n{text}"),
        }
    }
    // What the port's driver counts as sent survives its peers' departures (net_memif reports 0
    // once a peer has gone; the run adds up what it read, every 1 ms): all the workers handed it
    // over the three sessions but what its full ring refused (tx_full), less at most what the
    // last moment before the final departure sent (a ring of 512).
    let (driver, workers) = (u(&s["ports"][0]["ethdev"]["opackets"]), u(&s["ports"][0]["workers"]["tx_packets"]));
    let sent = workers - u(&s["drops"]["tx_full"]);
    assert!(driver <= sent && driver + 512 >= sent, "driver sent {driver}, workers {sent} (tx_full apart):\n{text}");
    // One grace period per departure at least (the PMD unmaps the rings of each connection).
    assert!(u(&s["unmaps_after_grace"]) >= 3, "unmaps after a grace period:\n{text}");
    assert_eq!(u(&s["grace_timeouts"]), 0, "{text}");
    assert_eq!(u(&s["mbufs_in_use_after"]), 0, "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A net_memif client connects only when its port starts: when its server goes away, the
/// appliance restarts the port every second until a server is back. pktgen is the memif server
/// here, twice in turn; the appliance (client) must take the second one's traffic too, without
/// being restarted itself, and count one reconnection.
/// Starts `pktgen run` with `conf` (a memif server on `sock`) for one second, its summary into
/// `dir/pktgenSESSION.json`; returns once its socket exists and its port had time to start.
fn memif_server(dir: &Path, conf: &Path, sock: &Path, session: usize) -> (Child, PathBuf) {
    let _ = std::fs::remove_file(sock);
    let json = dir.join(format!("pktgen{session}.json"));
    let g = Command::new(env!("CARGO_BIN_EXE_pktgen"))
        .args(["run", "-q", "-c", conf.to_str().unwrap(), "--duration", "1"])
        .args(["--json", json.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while !sock.exists() {
        assert!(t.elapsed() < Duration::from_secs(20), "pktgen did not create its memif socket");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The socket appears when the vdev is probed; let pktgen start its port.
    std::thread::sleep(Duration::from_millis(500));
    (g, json)
}

/// Waits for a pktgen session, which must succeed; returns its stream's (tx, rx) packets.
fn finished(g: Child, json: &Path) -> (u64, u64) {
    let o = g.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "pktgen failed:\n{}", String::from_utf8_lossy(&o.stderr));
    let p: Value = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    (u(&p["streams"][0]["tx"]["packets"]), u(&p["streams"][0]["rx"]["packets"]))
}

#[test]
fn the_appliance_as_memif_client_reconnects_to_a_server_that_comes_back() {
    let dir = std::env::temp_dir().join(format!("pgrc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("m0.sock");
    let app = dir.join("appliance.toml");
    std::fs::write(&app, appliance_toml(&sock).replace("role=server", "role=client")).unwrap();
    let conf = dir.join("pktgen.toml");
    std::fs::write(&conf, pktgen_toml(&sock).replace("role=client", "role=server")).unwrap();
    let stats = dir.join("dpu-stats.json");
    let server = |session: usize| memif_server(&dir, &conf, &sock, session);
    let finish = |g: Child, json: &Path| finished(g, json).0;
    let (g, json) = server(0);
    let dpu = Command::new(common::dpu_bin())
        .args(["-c", app.to_str().unwrap(), "--stats-json", stats.to_str().unwrap(), "--duration", "120"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let first = finish(g, &json);
    assert!(first > 1000, "the first session sent only {first} packets");
    // The appliance finds its link down and tries to reconnect, with no server, for a while.
    std::thread::sleep(Duration::from_millis(2500));
    let (g, json) = server(1);
    let second = finish(g, &json);
    assert!(second > 1000, "the second session sent only {second} packets");
    common::kill(&dpu, "-TERM");
    let d = dpu.wait_with_output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&d.stdout), String::from_utf8_lossy(&d.stderr));
    assert_eq!(d.status.code(), Some(0), "the appliance failed:\n{text}");
    assert!(text.contains("link down (its memif server is gone)"), "{text}");
    assert!(text.contains("link up again after"), "{text}");
    let s: Value = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let rx = u(&s["ports"][0]["workers"]["rx_packets"]);
    assert!(rx > first && rx <= first + second, "counted {rx}, sessions sent {first} and {second}:\n{text}");
    // Nearly all of the second session arrived (what was in the ring when the server left may
    // be lost with it).
    assert!(rx - first >= second * 9 / 10, "counted {} of the second session's {second}:\n{text}", rx - first);
    assert_eq!(u(&s["ports"][0]["reconnects"]), 1, "{text}");
    assert_eq!(u(&s["grace_timeouts"]), 0, "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Zero-copy: the appliance is a memif client with `zero-copy=yes` (EAL
/// `--single-file-segments`), offering its peers EAL's own memory; pktgen is the server, three
/// sessions in turn. net_memif closes EAL's memory-segment fd at each connection (DPDK 22.11
/// `memif_connect`, "close memseg file"), so without the appliance's `close` guard
/// (`dataplane::dpdk::fdguard`) the second server's `mmap` of the region fails with ENODEV and
/// the link never comes up again. Every session's traffic must be counted, the appliance run on,
/// and its guard report the closes it kept from EAL's fd.
#[test]
fn the_zero_copy_appliance_takes_memif_servers_in_turn() {
    let dir = std::env::temp_dir().join(format!("pgzc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("m0.sock");
    let app = dir.join("appliance.toml");
    let zc = appliance_toml(&sock)
        .replace("role=server", "role=client,zero-copy=yes")
        .replace("\"--lcores\"", "\"--single-file-segments\", \"--file-prefix\", \"pgzc\", \"--lcores\"");
    std::fs::write(&app, zc).unwrap();
    let conf = dir.join("pktgen.toml");
    std::fs::write(&conf, pktgen_toml(&sock).replace("role=client", "role=server")).unwrap();
    let stats = dir.join("dpu-stats.json");
    let server = |session: usize| memif_server(&dir, &conf, &sock, session);
    let finish = finished;
    let (g, json) = server(0);
    let mut dpu = Command::new(common::dpu_bin())
        .args(["-c", app.to_str().unwrap(), "--stats-json", stats.to_str().unwrap(), "--duration", "120"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut sent = vec![finish(g, &json)];
    for session in 1..3 {
        // The appliance finds its link down and restarts its client port until a server answers.
        std::thread::sleep(Duration::from_millis(1500));
        assert!(dpu.try_wait().unwrap().is_none(), "the appliance died after session {}", session - 1);
        let (g, json) = server(session);
        sent.push(finish(g, &json));
    }
    common::kill(&dpu, "-TERM");
    let d = dpu.wait_with_output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&d.stdout), String::from_utf8_lossy(&d.stderr));
    assert_eq!(d.status.code(), Some(0), "the appliance failed:\n{text}");
    assert!(!text.contains("mmap failed"), "{text}");
    let s: Value = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    for (i, (tx, back)) in sent.iter().enumerate() {
        assert!(*tx > 1000, "session {i} sent only {tx} packets:\n{text}");
        // Traffic came back through the appliance in every session: the link was up each time.
        assert!(*back > 0, "session {i}: nothing came back:\n{text}");
    }
    let total: u64 = sent.iter().map(|s| s.0).sum();
    let rx = u(&s["ports"][0]["workers"]["rx_packets"]);
    // Every session counted, but what was in a ring when its server left (512 descriptors).
    assert!(rx <= total && rx + 3 * 512 >= total, "counted {rx} of {total} ({sent:?}):\n{text}");
    assert_eq!(u(&s["ports"][0]["reconnects"]), 2, "{text}");
    // Each connection closed EAL's segment fd at least once; the guard kept it open each time.
    assert!(u(&s["memseg_closes_refused"]) >= 3, "{text}");
    assert_eq!(u(&s["grace_timeouts"]), 0, "{text}");
    // What DPDK 22.11's zero-copy memif strands, and nothing else: at each connection
    // `memif_init_queues` gives the rx and tx queues new `buffers` arrays without freeing the
    // mbufs the old ones held, and neither `memif_disconnect` nor the queue release frees them:
    // the rx ring's refill (a full ring of 2^rsize = 1024 by default, less at most the 31 slots
    // a refill waits for) and the tx ring's sent mbufs not yet freed (freed only at the next tx
    // burst: 0 up to a full ring; seen 0 to about 1024 per connection). Three connections.
    let stranded = u(&s["mbufs_in_use_after"]);
    assert!((3 * (1024 - 31)..=3 * 2 * 1024).contains(&stranded), "{stranded} mbufs out:\n{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
