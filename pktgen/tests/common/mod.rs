//! What the two-process tests share: the appliance binary, started as a memif server.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use functional_tests::dpu_bin;

/// Sends `sig` (e.g. "-TERM") to `child`.
pub fn kill(child: &Child, sig: &str) {
    let _ = Command::new("kill").arg(sig).arg(child.id().to_string()).status();
}

/// Starts the appliance on config `app` for at most `seconds`, its final stats to `stats`, and
/// returns once each of its memif server sockets `socks` exists (panics after 20 s, or if it
/// exits first, with its stderr).
pub fn start_dpu(app: &Path, stats: &Path, seconds: u32, socks: &[PathBuf]) -> Child {
    let mut dpu = Command::new(dpu_bin())
        .arg("-c")
        .arg(app)
        .arg("--stats-json")
        .arg(stats)
        .arg("--duration")
        .arg(seconds.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !socks.iter().all(|s| s.exists()) {
        if start.elapsed() > Duration::from_secs(20) || dpu.try_wait().unwrap().is_some() {
            kill(&dpu, "-TERM");
            let o = dpu.wait_with_output().unwrap();
            panic!("the appliance did not create its memif sockets:\n{}", String::from_utf8_lossy(&o.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    dpu
}

/// The running appliance `dpu`'s `/dpu/stats` (its telemetry socket, through DPDK's
/// `dpdk-telemetry.py`; its file prefix is `dpu-<pid>`), or `None` while it has none yet.
#[allow(dead_code)] // not every test binary that includes this module reads live counters
pub fn live_stats(dpu: &Child) -> Option<serde_json::Value> {
    use std::io::Write;
    let mut c = Command::new("dpdk-telemetry.py")
        .args(["-f", &format!("dpu-{}", dpu.id())])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("dpdk-telemetry.py (Debian package dpdk) runs");
    let wrote = c.stdin.take().unwrap().write_all(b"/dpu/stats\n");
    let out = c.wait_with_output().ok()?;
    wrote.ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(&text[text.find('{')?..]).ok()?;
    Some(v["/dpu/stats"].clone())
}

/// Port `port`'s received packets in `dpu`'s live counters (waits up to 20 s for its socket).
#[allow(dead_code)]
pub fn live_rx(dpu: &Child, port: &str) -> u64 {
    let t = Instant::now();
    loop {
        if let Some(n) = live_stats(dpu).and_then(|v| v[format!("port_rx_packets/{port}")].as_u64()) {
            return n;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "no live counters from the appliance");
        std::thread::sleep(Duration::from_millis(100));
    }
}
