//! A running appliance and its control socket, for the tests of runtime control: start `dpu`
//! with a config, find its socket, talk to it with `dpuctl`, stop it with SIGTERM.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The `dpuctl` binary (see [`crate::project_bin`]).
pub fn dpuctl_bin() -> PathBuf {
    crate::project_bin("dpuctl", "DPUCTL_BIN")
}

/// Starts the appliance on `conf` for at most `secs` seconds (`--duration`), its final stats
/// to `stats`; returns it with its control socket, once the socket exists (in the runtime
/// directory of the instance's default prefix, `dpu-<pid>`). Panics with the appliance's
/// stderr if the socket does not appear within 20 s or the appliance exits first.
pub fn start(conf: &Path, stats: &Path, secs: u32) -> (Child, PathBuf) {
    let mut dpu = Command::new(crate::dpu_bin())
        .args(["-c", conf.to_str().unwrap(), "--stats-json", stats.to_str().unwrap(), "--duration"])
        .arg(secs.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let sock = Path::new("/var/run/dpdk").join(format!("dpu-{}", dpu.id())).join("dpu_control.sock");
    let t = Instant::now();
    while !sock.exists() {
        if t.elapsed() > Duration::from_secs(20) || dpu.try_wait().unwrap().is_some() {
            let _ = dpu.kill();
            let o = dpu.wait_with_output().unwrap();
            panic!("no control socket {}:\n{}", sock.display(), String::from_utf8_lossy(&o.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    (dpu, sock)
}

/// `dpuctl -s SOCK ARGS`, its output whatever its status.
pub fn dpuctl(sock: &Path, args: &[&str]) -> Output {
    Command::new(dpuctl_bin()).arg("-s").arg(sock).args(args).output().unwrap()
}

/// `dpuctl --json ARGS`: the reply, which must say ok.
pub fn ctl_json(sock: &Path, args: &[&str]) -> Value {
    let o = Command::new(dpuctl_bin()).arg("-s").arg(sock).arg("--json").args(args).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "dpuctl {args:?}: {text}{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// Stops the appliance (SIGTERM), which must exit 0; its stdout and stderr.
pub fn stop(dpu: Child) -> String {
    let _ = Command::new("kill").arg("-TERM").arg(dpu.id().to_string()).status();
    let o = dpu.wait_with_output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "the appliance failed:\n{text}");
    text
}
