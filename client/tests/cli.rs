//! The `gradclient` binary end to end against the fake appliance: exit codes, output file,
//! stats JSON.

mod fake;

use fake::{free_port, write_config, Fake, Faults};
use gradclient::Dtype;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn gradclient(config: &Path, rank: u16, input: &Path, output: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gradclient"));
    c.arg("--config").arg(config).args(["--collective", "9", "--rank", &rank.to_string()]);
    c.arg("--input").arg(input).arg("--output").arg(output).args(extra);
    c
}

fn file(tag: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gradclient-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(tag);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn lanes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn two_processes_sum_and_report() {
    let fake = Fake::start(9, 2, Dtype::F32, Faults::default());
    let config = write_config("cli2", Some(fake.addr.port()), "", &[free_port(), free_port()], false);
    let a: Vec<f32> = (0..1000).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..1000).map(|i| 0.5 - i as f32 * 2.0).collect();
    let ins = [file("a.bin", &lanes(&a)), file("b.bin", &lanes(&b))];
    let outs = [file("a.out", b""), file("b.out", b"")];
    let stats = file("a.json", b"");
    let extra0 = ["--repeat", "2", "--start-round", "3", "--window", "8", "--stats-json", stats.to_str().unwrap()];
    let extra1 = ["--repeat", "2", "--start-round", "3"];
    let p0 = gradclient(&config, 0, &ins[0], &outs[0], &extra0).spawn().unwrap();
    let p1 = gradclient(&config, 1, &ins[1], &outs[1], &extra1).spawn().unwrap();
    for p in [p0, p1] {
        let o = p.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let want = lanes(&a.iter().zip(&b).map(|(x, y)| x + y).collect::<Vec<f32>>());
    for o in &outs {
        assert_eq!(std::fs::read(o).unwrap(), want);
    }
    let mut rounds: Vec<u32> = fake.seen().iter().map(|s| s.round).collect();
    rounds.sort();
    rounds.dedup();
    assert_eq!(rounds, [3, 4]);
    let j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    assert_eq!((j["impl"].as_str(), j["rank"].as_u64(), j["collective"].as_u64()), (Some("rust"), Some(0), Some(9)));
    assert_eq!(j["seconds"].as_array().unwrap().len(), 2);
    assert_eq!((j["chunks"].as_u64(), j["results"].as_u64(), j["naks"].as_u64()), (Some(32), Some(32), Some(0)));
    for k in ["sent", "retransmits", "stale_results", "rejoins"] {
        assert!(j[k].is_u64(), "{k}");
    }
}

#[test]
fn usage_and_config_errors_exit_2() {
    let config = write_config("cli-usage", Some(free_port()), "", &[free_port()], false);
    let short = file("short.bin", &[0u8; 3999]);
    let out = file("short.out", b"");
    let o = gradclient(&config, 0, &short, &out, &[]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("3999 bytes, expected 4000"), "{}", stderr(&o));
    let o = gradclient(&config, 5, &short, &out, &[]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no rank 5"), "{}", stderr(&o));
    let o = Command::new(env!("CARGO_BIN_EXE_gradclient")).args(["--rank", "0"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    // The input is checked before the socket: on a host that does not own the member's address
    // (conf/default.toml's 10.0.0.1), a wrong input is still reported as a wrong input...
    let default = Path::new(env!("CARGO_MANIFEST_DIR")).join("../conf/default.toml");
    let on_default = |input: &Path| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_gradclient"));
        c.arg("--config").arg(&default).args(["--collective", "1", "--rank", "0"]);
        c.arg("--input").arg(input).arg("--output").arg(&out).output().unwrap()
    };
    let o = on_default(&short);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("3999 bytes, expected 262144"), "{}", stderr(&o));
    // ...and a right one then fails on the bind, naming the address.
    let right = file("right.bin", &[0u8; 262144]);
    let o = on_default(&right);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("10.0.0.1:50000"), "{}", stderr(&o));
}

#[test]
fn silent_appliance_exits_1_within_the_timeout() {
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let config = write_config("cli-silent", Some(silent.local_addr().unwrap().port()), "", &[free_port()], false);
    let input = file("silent.bin", &[0u8; 4000]);
    let out = file("silent.out", b"");
    let t = std::time::Instant::now();
    let o = gradclient(&config, 0, &input, &out, &["--timeout-ms", "200"]).output().unwrap();
    assert!(t.elapsed() < std::time::Duration::from_secs(2));
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("appliance unreachable: no answer from 127.0.0.1:"), "{}", stderr(&o));
}
