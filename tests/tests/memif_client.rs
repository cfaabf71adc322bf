//! The appliance as a net_memif client started before any server: its port's first start finds
//! no server, which is an outage like a server's departure. The appliance runs on, the workers
//! skipping the port, restarts it every second, and takes the traffic of the server that comes.

use functional_tests::{dpu_bin, run_with_timeout};
use std::process::{Command, Stdio};
use std::time::Duration;

const EAL: &str = "\"--no-huge\", \"-m\", \"256\", \"--no-pci\", \"--no-shconf\", \"--log-level\", \"*:error\"";

#[test]
fn a_memif_client_started_before_its_server_waits_for_it() {
    // Short: a memif socket path must fit a sockaddr_un (108 bytes).
    let dir = std::env::temp_dir().join(format!("dmc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("m.sock");
    let memif = |role: &str| format!("net_memif0,role={role},socket={},socket-abstract=no", sock.display());
    let client = dir.join("client.toml");
    std::fs::write(
        &client,
        format!(
            "[eal]\nargs = [{EAL}, \"--lcores\", \"0@0,1@1\"]\n[[port]]\nname = \"m0\"\nvdev = \"{}\"\n\
             [[lcore]]\nid = 1\nrx = [{{ port = 0, queue = 0 }}]\n",
            memif("client")
        ),
    )
    .unwrap();
    // The server: net_null's endless rx forwarded to its memif port (polled too: a memif server
    // without rx queue offers its client no ring).
    let server = dir.join("server.toml");
    std::fs::write(
        &server,
        format!(
            "[eal]\nargs = [{EAL}, \"--lcores\", \"0@0,1@1\"]\n[[port]]\nname = \"n0\"\nvdev = \"net_null0\"\n\
             [[port]]\nname = \"s0\"\nvdev = \"{}\"\n[[lcore]]\nid = 1\nrx = [{{ port = 0, queue = 0 }}, {{ port = 1, queue = 0 }}]\n\
             [[table]]\nname = \"out\"\nkey = [{{ field = \"eth.dst\", match = \"exact\" }}]\ndefault_action = \"forward(1)\"\n",
            memif("server")
        ),
    )
    .unwrap();
    let stats = dir.join("client.json");
    let c = Command::new(dpu_bin())
        .args(["-c", client.to_str().unwrap(), "--stats-json", stats.to_str().unwrap(), "--duration", "8"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The client tries, with no server, for a while.
    std::thread::sleep(Duration::from_millis(2500));
    let mut s = Command::new(dpu_bin());
    s.args(["-q", "-c", server.to_str().unwrap(), "--duration", "3"]);
    let so = run_with_timeout(s, Duration::from_secs(60));
    assert_eq!(so.status.code(), Some(0), "the server failed:\n{}", String::from_utf8_lossy(&so.stderr));
    let o = c.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "the client failed:\n{text}");
    let waiting =
        format!("dpu: port m0: no memif server answers on {} yet (rte_eth_dev_start(port 0 m0): ", sock.display());
    assert!(text.contains(&waiting), "{text}");
    assert!(text.contains("the workers skip the port, restarted every 1 s until it connects"), "{text}");
    assert!(text.contains("dpu: port m0: link up after "), "{text}");
    let s: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    // The server's traffic arrived; a first connection is no reconnection.
    let rx = s["ports"][0]["workers"]["rx_packets"].as_u64().unwrap();
    assert!(rx > 1000, "the client received {rx} packets:\n{text}");
    assert_eq!(s["ports"][0]["reconnects"], 0, "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
