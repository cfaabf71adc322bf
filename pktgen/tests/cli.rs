//! The `pktgen` binary end to end: files written, reproducible, consistent with the library.

use pktgen::values::ValueKind;
use pktgen::workload::{Params, Workload};
use std::path::PathBuf;
use std::process::Command;

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pktgen-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn run(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_pktgen")).args(args).output().unwrap()
}

#[test]
fn allreduce_writes_three_files_reproducibly() {
    let (a, b) = (tmp("a"), tmp("b"));
    let args = |d: &PathBuf| {
        vec![
            "allreduce".to_string(),
            "--out".into(),
            d.display().to_string(),
            "--workers".into(),
            "3".into(),
            "--tensor-elements".into(),
            "1000".into(),
            "--chunk-elements".into(),
            "100".into(),
            "--dtype".into(),
            "bf16".into(),
            "--carriage".into(),
            "rocev2".into(),
            "--family".into(),
            "v6".into(),
            "--rounds".into(),
            "2".into(),
            "--seed".into(),
            "9".into(),
            "--shuffle".into(),
            "--drop".into(),
            "0.1".into(),
            "--late".into(),
            "0.1".into(),
        ]
    };
    for d in [&a, &b] {
        let out = Command::new(env!("CARGO_BIN_EXE_pktgen")).args(args(d)).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let line = String::from_utf8(out.stdout).unwrap();
        // 2 rounds x 10 slots x 3 workers + 3 late per round.
        assert!(line.starts_with("pktgen: 66 packets, "), "{line}");
        assert!(line.contains("10 slots x 3 workers, 2 rounds"), "{line}");
    }
    for f in ["input.pcap", "appliance.toml", "expected.json"] {
        assert_eq!(std::fs::read(a.join(f)).unwrap(), std::fs::read(b.join(f)).unwrap(), "{f} differs");
    }
    let conf = a.join("appliance.toml");
    dataplane::config::load(&conf).unwrap();
    assert_eq!(dataplane::pcapfile::count_records(&a.join("input.pcap")).unwrap(), 66);
    let exp: serde_json::Value = serde_json::from_slice(&std::fs::read(a.join("expected.json")).unwrap()).unwrap();
    let results = exp["results"].as_array().unwrap();
    assert_eq!(results.len(), 20);
    assert_eq!(exp["counts"]["result_packets"], 2 * 10 * 3 + 6);
    // The payloads are the library's reference for the same parameters.
    let w = Workload::generate(Params {
        workers: 3,
        tensor_elements: 1000,
        chunk_elements: 100,
        dtype: dataplane::wire::gradient::Dtype::Bf16,
        rounds: 2,
        seed: 9,
        ..Params::default()
    })
    .unwrap();
    let (off, count, want) = &w.reference(1)[4];
    let r = &results[14];
    assert_eq!(
        (r["round"].as_u64(), r["offset"].as_u64(), r["count"].as_u64()),
        (Some(1), Some(*off as u64), Some(*count as u64))
    );
    let hex: String = want.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(r["payload"].as_str().unwrap(), hex);
    let _ = std::fs::remove_dir_all(&a);
    let _ = std::fs::remove_dir_all(&b);
}

#[test]
fn bad_parameters_are_refused_with_their_name() {
    let d = tmp("bad");
    let out = run(&["allreduce", "--out", d.to_str().unwrap(), "--workers", "300"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--workers"));
    let out = run(&["allreduce", "--out", d.to_str().unwrap(), "--dtype", "f64"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected f32, f16, bf16 or i32"));
    let out = run(&["allreduce", "--out", d.to_str().unwrap(), "--values", "uniform"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected normal or exact, found \"uniform\""));
    assert!(!d.join("input.pcap").exists());
}

/// `--values exact`: the pcap's payloads are the exact tables (every lane a small integer, the
/// same as the library's for the same parameters), `expected.json` names the kind and holds
/// their reference; the default is `normal`.
#[test]
fn allreduce_writes_exact_values_on_request() {
    let d = tmp("exact");
    let dir = d.to_str().unwrap();
    let common =
        ["--workers", "4", "--tensor-elements", "300", "--chunk-elements", "64", "--rounds", "2", "--seed", "3"];
    let out = run(&[&["allreduce", "--out", dir, "--values", "exact", "--dtype", "f16"][..], &common[..]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let exp: serde_json::Value = serde_json::from_slice(&std::fs::read(d.join("expected.json")).unwrap()).unwrap();
    assert_eq!(exp["params"]["values"], "exact");
    let w = Workload::generate(Params {
        workers: 4,
        tensor_elements: 300,
        chunk_elements: 64,
        dtype: dataplane::wire::gradient::Dtype::F16,
        rounds: 2,
        seed: 3,
        values: ValueKind::Exact,
        ..Params::default()
    })
    .unwrap();
    let results = exp["results"].as_array().unwrap();
    assert_eq!(results.len(), 2 * 5);
    for (i, (off, _, want)) in w.reference(0).into_iter().chain(w.reference(1)).enumerate() {
        let hex: String = want.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!((results[i]["offset"].as_u64(), results[i]["payload"].as_str()), (Some(off as u64), Some(&hex[..])));
    }
    // Every lane of the pcap's payloads is an integer of at most 2048 / 4 = 512 in magnitude.
    let mut frames = 0;
    for f in functional_tests::read_pcap(&d.join("input.pcap")) {
        frames += 1;
        for c in f[62..].chunks(2) {
            let v = half::f16::from_le_bytes([c[0], c[1]]).to_f32();
            assert!(v == v.trunc() && v.abs() <= 512.0, "{v}");
        }
    }
    assert_eq!(frames, 2 * 5 * 4);
    let out = run(&[&["allreduce", "--out", dir][..], &common[..]].concat());
    assert!(out.status.success());
    let exp: serde_json::Value = serde_json::from_slice(&std::fs::read(d.join("expected.json")).unwrap()).unwrap();
    assert_eq!(exp["params"]["values"], "normal");
    let _ = std::fs::remove_dir_all(&d);
}

/// An option beyond what the pcap's timestamps hold is refused before anything is written.
#[test]
fn out_of_range_times_are_refused_before_writing() {
    for delay in ["18446744073709551615", "4294967296000000"] {
        let d = tmp(&format!("late-{delay}"));
        let out = run(&["allreduce", "--out", d.to_str().unwrap(), "--retransmit-delay-us", delay, "--drop", "0.5"]);
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            err.trim_end(),
            format!(
                "pktgen: --retransmit-delay-us: expected at most 2594967295999999 µs (the last time a classic pcap's \
                 32-bit seconds hold after the workload's start), found {delay}"
            )
        );
        assert!(!d.exists(), "{} was created", d.display());
    }
}
