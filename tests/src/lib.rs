//! Helpers for the functional tests: run the real `dpu` binary on pcap files and read what it
//! wrote.
//!
//! The binaries are `target/release/dpu`, `dpuctl` and `pktgen`, or those in `$DPU_BIN_DIR`
//! (`make test` builds them with the test-release profile and points `DPU_BIN_DIR` at
//! `target/test-release`); `DPU_BIN` and `PKTGEN_BIN` override one binary each.

pub mod control;
pub mod frames;
pub mod grad;
pub mod split;

pub use dataplane::testing::{
    ipv4_checksum_is_a_full_recompute, read_pcap, read_pcap_records, write_pcap, write_pcap_at,
};

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The repository's root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The project's binary `name` (`dpu`, `dpuctl`, `pktgen`, `gradclient`): in `$DPU_BIN_DIR`, else
/// in `target/release`; `$env_override` (e.g. `DPU_BIN`), when set, names the file itself.
/// Panics if the file does not exist, saying how to build it.
pub fn project_bin(name: &str, env_override: &str) -> PathBuf {
    let p = std::env::var_os(env_override).map(PathBuf::from).unwrap_or_else(|| {
        let dir = std::env::var_os("DPU_BIN_DIR").map(PathBuf::from).unwrap_or_else(|| root().join("target/release"));
        dir.join(name)
    });
    assert!(p.exists(), "{} does not exist: build it first (`make build`, or `make test`)", p.display());
    p
}

/// The `dpu` binary (`$DPU_BIN` overrides).
pub fn dpu_bin() -> PathBuf {
    project_bin("dpu", "DPU_BIN")
}

/// A fresh directory for one test's files.
pub fn scratch(name: &str) -> PathBuf {
    let d = root().join("target/functional").join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A file of the shared cases (`../shared/cases/...`).
pub fn case(rel: &str) -> PathBuf {
    let p = root().join("../shared/cases").join(rel);
    assert!(p.exists(), "{} is missing: the shared cases must sit beside the repository", p.display());
    p
}

/// What a run of `dpu` gave.
#[derive(Debug)]
pub struct Run {
    /// Exit status, stdout, stderr.
    pub output: Output,
    /// The final stats (`--stats-json`), when the run wrote them.
    pub stats: Option<serde_json::Value>,
    /// How long it took.
    pub elapsed: Duration,
}

impl Run {
    /// stderr as text.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }
    /// stdout as text.
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }
    /// The exit code.
    pub fn code(&self) -> i32 {
        self.output.status.code().unwrap_or(-1)
    }
    /// The stats, or a panic showing what the run printed.
    pub fn stats(&self) -> &serde_json::Value {
        self.stats.as_ref().unwrap_or_else(|| panic!("no stats; exit {}; stderr:\n{}", self.code(), self.stderr()))
    }
    /// A drop counter by reason name.
    pub fn drops(&self, reason: &str) -> u64 {
        self.stats()["drops"][reason].as_u64().unwrap_or_else(|| panic!("no drop reason {reason}"))
    }
    /// A named counter (`count(name)`) as (packets, bytes).
    pub fn named_counter(&self, name: &str) -> (u64, u64) {
        let s = self.stats();
        let all = s["counters"].as_array().unwrap_or_else(|| panic!("no counters in {s}"));
        let c = all.iter().find(|c| c["name"] == name).unwrap_or_else(|| panic!("no counter {name} in {all:?}"));
        (c["counter"]["packets"].as_u64().unwrap(), c["counter"]["bytes"].as_u64().unwrap())
    }
    /// Asserts a zero exit status, showing the output otherwise.
    pub fn assert_ok(&self) -> &Self {
        assert_eq!(self.code(), 0, "dpu failed:\nstdout:\n{}\nstderr:\n{}", self.stdout(), self.stderr());
        self
    }
}

/// Runs `dpu -c config` with `args` in `dir` (for relative paths), with a 120 s guard.
pub fn run_dpu(dir: &Path, config: &Path, args: &[String]) -> Run {
    let stats = dir.join(format!("stats-{}.json", rand_suffix()));
    let start = Instant::now();
    let mut cmd = dpu_command(config, &stats);
    cmd.current_dir(dir).args(args);
    let output = run_with_timeout(cmd, Duration::from_secs(120));
    let elapsed = start.elapsed();
    let stats = std::fs::read_to_string(&stats).ok().map(|s| serde_json::from_str(&s).unwrap());
    Run { output, stats, elapsed }
}

/// `dpu -c config --stats-json stats`, stdout and stderr piped, not started: the caller adds
/// arguments, environment and working directory, then runs or spawns it.
pub fn dpu_command(config: &Path, stats: &Path) -> Command {
    let mut cmd = Command::new(dpu_bin());
    cmd.arg("-c").arg(config).arg("--stats-json").arg(stats);
    cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    cmd
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// Runs `cmd`, killing it after `limit` (a stalled appliance fails the test instead of hanging it).
pub fn run_with_timeout(mut cmd: Command, limit: Duration) -> Output {
    use std::process::Stdio;
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    let id = child.id();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let d2 = done.clone();
    let killer = std::thread::spawn(move || {
        let start = Instant::now();
        while start.elapsed() < limit {
            if d2.load(std::sync::atomic::Ordering::Relaxed) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = Command::new("kill").arg("-9").arg(id.to_string()).status();
        true
    });
    let out = child.wait_with_output().expect("wait");
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let killed = killer.join().unwrap();
    assert!(!killed, "dpu did not exit within {limit:?} (stalled)");
    out
}

/// Writes a config file built from `text` into `dir`.
pub fn write_config(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// The EAL section every test config uses: no hugepages, no PCI, no shared files (tests run in
/// parallel), main lcore on CPU 0 and one worker on CPU 1.
pub const EAL: &str = r#"
[eal]
args = ["--no-huge", "-m", "256", "--no-pci", "--no-shconf", "--lcores", "0@0,1@1", "--log-level", "*:error"]
"#;

/// The EAL section and lcores of a two-worker appliance: worker lcore 1 polls port 0, worker
/// lcore 2 port 1 (lcores 0 and 1 share CPU 0, lcore 2 runs on CPU 1). Collectives belong to the
/// workers in config order (the first to lcore 1), so traffic for one arriving on the other's port
/// is handed over.
pub const TWO_WORKERS: &str = concat!(
    r#"[eal]
args = ["--no-huge", "-m", "512", "--no-pci", "--no-shconf", "--lcores", "0@0,1@0,2@1", "--log-level", "*:error"]
"#,
    include_str!("../fixtures/two-worker-lcores.toml")
);

/// A config of two `net_null` ports, `a` (port 0) and `b` (port 1), after `eal` (the EAL
/// section, and lcores if any: [`EAL`], [`TWO_WORKERS`]) and before `rest` (tables,
/// collectives). Replays replace the null devices with their files (`--rx`, `--tx`).
pub fn two_null_ports(eal: &str, rest: &str) -> String {
    format!("{eal}\n[[port]]\nname = \"a\"\nvdev = \"net_null0\"\n[[port]]\nname = \"b\"\nvdev = \"net_null1\"\n{rest}")
}

/// A one-table pipeline that forwards every frame to port 1 (an exact `eth.dst` table with no
/// entries whose default action is `forward(1)`).
pub const TO_PORT1: &str = r#"
[[table]]
name = "l2"
key = [{ field = "eth.dst", match = "exact" }]
default_action = "forward(1)"
"#;
