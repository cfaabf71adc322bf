//! End to end over kernel sockets: 4 worker processes in network namespaces all-reduce
//! 131072-element f32 and bf16 tensors (`make demo` runs a million) through the appliance (net_af_packet on a veth),
//! with the Rust and the Python client side by side, without and with 1% loss per link
//! direction, and one worker rejoining after a wrong round. The harness (tools/e2e/run.py)
//! checks every result bit for bit against numpy's reference under the spec's arithmetic,
//! captures the appliance's port and runs ../shared/tools/gradcheck.py over every frame in and
//! out, and removes its namespaces whatever happens; this test reads its report and checks it.

use functional_tests::{root, scratch};
use std::process::Command;

/// Tensor elements: an eighth of `make demo`'s million keeps every check (at 1% loss per link
/// direction, about 45 lost datagrams expected per phase: 560 chunks, each a contribution and a
/// result per worker) at a fraction of the checker's time.
const ELEMENTS: u64 = 1 << 17;

/// Payload bytes per chunk at the default MTU of 1500 (tools/e2e/run.py's `chunk_bytes`: the
/// largest multiple of 64 whose frame fits with every header): 352 f32 or 704 bf16 lanes, so
/// each tensor ends with a short chunk (128 f32 or 128 bf16 lanes).
const CHUNK_BYTES: u64 = 1408;

/// Chunks of a tensor of `ELEMENTS` lanes of `lane` bytes.
fn chunks_of(lane: u64) -> u64 {
    ELEMENTS.div_ceil(CHUNK_BYTES / lane)
}

#[test]
fn four_workers_allreduce_over_veths_with_and_without_loss() {
    let dir = scratch("e2e");
    let report = dir.join("report.json");
    let out = Command::new("python3")
        .arg(root().join("tools/e2e/run.py"))
        .args(["--clients", "python,rust,python,rust", "--loss", "1", "--gradcheck"])
        .args(["--elements", &ELEMENTS.to_string()])
        .arg("--work")
        .arg(&dir)
        .arg("--report")
        .arg(&report)
        .output()
        .expect("python3 runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the end-to-end run failed:\n{text}");

    let phases: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let phases = phases.as_array().unwrap();
    assert_eq!(phases.len(), 2, "{text}");
    for (ph, loss) in phases.iter().zip([0, 1]) {
        assert_eq!(ph["loss_percent"], loss);
        let colls = ph["collectives"].as_array().unwrap();
        let dtypes: Vec<&str> = colls.iter().map(|c| c["dtype"].as_str().unwrap()).collect();
        assert_eq!(dtypes, ["f32", "bf16"]);
        let mut retransmits = 0;
        for c in colls {
            assert_eq!(c["elements"], ELEMENTS);
            let chunks = if c["dtype"] == "f32" { chunks_of(4) } else { chunks_of(2) };
            let workers = c["workers"].as_array().unwrap();
            assert_eq!(workers.len(), 4);
            let impls: Vec<&str> = workers.iter().map(|w| w["impl"].as_str().unwrap()).collect();
            assert_eq!(impls, ["python", "rust", "python", "rust"]);
            for w in workers {
                assert_eq!(w["exact"], true);
                assert_eq!(w["chunks"], chunks);
                assert_eq!(w["naks"], 0, "{w}");
                retransmits += w["retransmits"].as_u64().unwrap();
            }
        }
        let agg = &ph["appliance"]["aggregation"];
        // Both tensors complete every chunk once: 373 + 187 rounds (the clean phase adds the
        // two restart runs' 373 each of collective 1).
        let (f32_chunks, bf16_chunks) = (chunks_of(4), chunks_of(2));
        assert_eq!((f32_chunks, bf16_chunks), (373, 187));
        let rounds = if loss == 0 { 3 * f32_chunks + bf16_chunks } else { f32_chunks + bf16_chunks };
        assert_eq!(agg["completed"], rounds, "{agg}");
        // Rule 1: each worker's contribution is folded once, unless a slot timed out under loss
        // (rule 8: its partial sum is discarded and the contributions are folded afresh).
        if agg["slot_timeouts"] == 0 {
            assert_eq!(agg["folded"], 4 * rounds, "{agg}");
        } else {
            assert!(agg["folded"].as_u64().unwrap() > 4 * rounds, "{agg}");
        }
        assert_eq!(ph["appliance"]["mbufs_in_use_after"], 0);
        // The independent checker replayed every captured input frame through the spec and
        // checked every result the appliance sent (results, rule 3 resends, NAKs).
        let verdict = ph["gradcheck"]["verdict"].as_str().unwrap();
        // (The checker counts the STATUS answers to the clients' PROBEs among them.)
        let results = ["results", "resends", "statuses"].iter().map(|k| agg[k].as_u64().unwrap()).sum::<u64>();
        assert!(verdict.starts_with(&format!("gradcheck: {results} result packets checked")), "{verdict}");
        assert!(verdict.ends_with(" 0 failures"), "{verdict}");
        if loss == 0 {
            assert_eq!(agg["slot_timeouts"], 0);
            // Restarted guessing the last completed round, worker 0 took every chunk's round from
            // the appliance's STATUS (spec section 7) and was never NAKed...
            let w0 = &ph["rejoin"]["probe"]["worker0"];
            // (A probe resent on its timer is answered again: at least one STATUS per chunk, at
            // most one per probe.)
            let (statuses, probes) = (w0["statuses"].as_u64().unwrap(), w0["probes"].as_u64().unwrap());
            assert!(statuses >= f32_chunks && statuses <= probes, "{w0}");
            assert_eq!(w0["naks"], 0, "{w0}");
            // ...and without probing, it rejoined through the NAK 7 of rule 4.
            let w0 = &ph["rejoin"]["nak"]["worker0"];
            assert!(w0["rejoins"].as_u64().unwrap() >= 1 && w0["naks"].as_u64().unwrap() >= 1, "{w0}");
            assert_eq!(w0["probes"], 0, "{w0}");
            assert!(ph["appliance"]["aggregation"]["probes"].as_u64().unwrap() >= 4 * f32_chunks, "{agg}");
            assert!(ph["appliance"]["drops"]["grad_stale_round"].as_u64().unwrap() >= 1);
        } else {
            // The loss shows on both sides: clients resent contributions, and the appliance
            // answered late ones with kept results (rule 3).
            assert!(retransmits > 0, "no client retransmissions under loss");
            assert!(agg["resends"].as_u64().unwrap() > 0, "{agg}");
        }
    }
}
