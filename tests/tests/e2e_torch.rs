//! PyTorch data-parallel training through the appliance, end to end: 4 DDP ranks of
//! client/python/examples/train_ddp.py in network namespaces, their gradients all-reduced by the
//! appliance (net_af_packet on a veth) through the DDP hook of gradclient.ddp. The harness
//! (tools/e2e/torch_ddp.py, run with the project's torch environment `.venv`, made by `make deps`)
//! compares every step's parameters on every rank with a single-process reference; this test
//! reads its report and checks it. Without torch it fails: the environment is part of the build.

use functional_tests::{root, scratch};
use std::process::Command;

/// Training steps per phase.
const STEPS: u64 = 30;

#[test]
fn ddp_ranks_train_through_the_appliance_exactly() {
    let python = root().join(".venv/bin/python");
    let probe = Command::new(&python).args(["-c", "import torch, numpy"]).output();
    match probe {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            panic!("{} cannot import torch: {}; run `make deps`", python.display(), String::from_utf8_lossy(&o.stderr))
        }
        Err(e) => panic!("{} is missing ({e}): run `make deps` (tools/install-deps.sh makes it)", python.display()),
    }
    let dir = scratch("e2e-torch");
    let report = dir.join("report.json");
    let out = Command::new(&python)
        .arg(root().join("tools/e2e/torch_ddp.py"))
        .args(["--steps", &STEPS.to_string(), "--loss", "1"])
        .arg("--work")
        .arg(&dir)
        .arg("--report")
        .arg(&report)
        .output()
        .expect("the harness runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the DDP end-to-end run failed:\n{text}");

    let phases: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let phases = phases.as_array().unwrap();
    let names: Vec<&str> = phases.iter().map(|p| p["phase"].as_str().unwrap()).collect();
    assert_eq!(names, ["clean", "loss", "mixed", "gloo", "peer", "absent", "registered"], "{text}");
    for ph in &phases[..3] {
        // Every step: the parameters bit-identical on every rank and to the reference.
        assert_eq!(ph["exact_steps"], STEPS, "{ph}");
        assert_eq!(ph["ranks"], 4);
        // DDP rebuilt its buckets once, after the first step; every rank saw it.
        assert_eq!(ph["rebuilds"], serde_json::json!([1, 1, 1, 1]), "{ph}");
        assert_ne!(ph["buckets"][0], ph["buckets"][1], "{ph}");
        assert_eq!(ph["naks"], 0, "{ph}");
        // Every bucket of a collective at a chunk-aligned offset (chunks of 64 elements), after
        // the previous bucket of that collective rounded up to whole chunks.
        for step in [0, 1] {
            let mut next = std::collections::HashMap::new();
            for b in ph["buckets"][step].as_array().unwrap() {
                let (cid, offset, elements) = (b[1].as_u64().unwrap(), b[2].as_u64().unwrap(), b[3].as_u64().unwrap());
                assert_eq!(offset, *next.get(&cid).unwrap_or(&0), "{ph}");
                next.insert(cid, offset + elements.div_ceil(64) * 64);
            }
        }
        // The appliance completed 4-rank rounds for every chunk sent, and nothing timed out.
        assert!(ph["appliance"]["completed"].as_u64().unwrap() >= STEPS, "{ph}");
    }
    // 30 steps of the f32 MLP: each step one round of every chunk of its buckets.
    assert_eq!(phases[0]["loss_percent"], 0);
    assert_eq!(phases[1]["loss_percent"], 1);
    assert!(phases[1]["retransmits"].as_u64().unwrap() > 0, "no retransmission under loss");
    // Three collectives in the mixed run: f32, f16 and bf16 buckets.
    let cids: std::collections::BTreeSet<u64> =
        phases[2]["buckets"][1].as_array().unwrap().iter().map(|b| b[1].as_u64().unwrap()).collect();
    assert_eq!(cids.into_iter().collect::<Vec<_>>(), [1, 2, 3]);
    // gloo's losses: another summation order, equal within float tolerance.
    assert!(phases[3]["max_relative_loss_difference"].as_f64().unwrap() <= 1e-4, "{}", phases[3]);
    // A vanished rank is named; an absent appliance is reported, each within the deadline.
    let peer = &phases[4];
    assert_eq!(peer["exit_codes"], serde_json::json!([1, 1, 1, 0]), "{peer}");
    for k in 0..3 {
        let e = peer["errors"][k.to_string()].as_str().unwrap_or("");
        assert!(e.contains("step 3 failed") && e.ends_with("the appliance is waiting for rank 3"), "{peer}");
    }
    let absent = &phases[5];
    assert_eq!(absent["exit_codes"], serde_json::json!([1, 1, 1, 1]), "{absent}");
    for k in 0..4 {
        let e = absent["errors"][k.to_string()].as_str().unwrap_or("");
        assert!(e.contains("step 0 failed: UnreachableError: appliance unreachable"), "{absent}");
    }
    // The appliance started without collectives; the job added its own through the control
    // socket, trained exactly, and deleted it at its end.
    let reg = &phases[6];
    assert_eq!(reg["exact_steps"], STEPS, "{reg}");
    assert_eq!(reg["ranks"], 4, "{reg}");
    assert_eq!(reg["naks"], 0, "{reg}");
    assert_eq!(reg["rebuilds"], serde_json::json!([1, 1, 1, 1]), "{reg}");
    assert!(reg["appliance"]["completed"].as_u64().unwrap() >= STEPS, "{reg}");
    assert_eq!(reg["collectives_left"], serde_json::json!([]), "{reg}");
}
