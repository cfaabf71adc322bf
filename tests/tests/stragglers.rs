//! The straggler view names the rank an AllReduce waits for: a replay of four ranks, 10 rounds
//! of 4 slots, where rank 2's contributions always come 700 µs after the round's first one and
//! the others within 30 µs. The final stats say rank 2 completed every round (came last), with
//! its lateness, and the report names it; the other ranks completed none. The independent
//! checker verifies every result.

use functional_tests::grad::*;
use functional_tests::*;

const T0: u64 = 1_700_000_000_000_000;

#[test]
fn the_straggler_view_names_the_rank_the_rounds_wait_for() {
    let dir = scratch("stragglers");
    let c = Coll { id: 3, n: 4, tensor: 16, chunk: 4, ..Default::default() };
    let conf = write_config(&dir, "c.toml", &format!("{EAL}{PORT}\n{}", c.toml()));
    let mut frames = Vec::new();
    for round in 0..10u32 {
        for slot in 0..4u32 {
            let start = T0 + u64::from(round * 4 + slot) * 2000;
            for k in 0..c.n {
                let late = if k == 2 { 700 } else { 10 * k as u64 };
                frames.push((start + late, c.frame(k, slot * 4, round, &f32s(&[k as f32; 4]), |_| {})));
            }
        }
    }
    frames.sort_by_key(|(t, _)| *t);
    let inp = dir.join("in.pcap");
    write_pcap_at(&inp, &frames);
    let out = dir.join("out.pcap");
    let run = run_dpu(&dir, &conf, &[format!("--rx=0={}", inp.display()), format!("--tx=0={}", out.display())]);
    run.assert_ok();
    let s = &run.stats()["stragglers"][0];
    assert_eq!(s["collective"], 3, "{s}");
    assert_eq!(s["slowest_rank"], 2, "{s}");
    let ranks = s["ranks"].as_array().unwrap();
    for (k, r) in ranks.iter().enumerate() {
        assert_eq!(r["contributions"], 40, "{r}");
        let late = if k == 2 { 700.0 } else { 10.0 * k as f64 };
        assert_eq!(r["late_mean_us"].as_f64().unwrap(), late, "{r}");
        assert_eq!(r["completed_last"], if k == 2 { 40 } else { 0 }, "{r}");
    }
    // 700 µs lies in the log2 bucket 512..=1023; 30 µs in 16..=31.
    assert_eq!((ranks[2]["late_p50_us"].as_u64(), ranks[2]["late_max_us"].as_u64()), (Some(1023), Some(1023)));
    assert_eq!(ranks[3]["late_p99_us"], 31);
    assert_eq!(ranks[0]["late_max_us"], 0);
    let report = run.stdout();
    assert!(report.contains("stragglers: collective 3: rank 2 completed 40 of 40 rounds (came last)"), "{report}");
    let (ok, text) = gradcheck(&conf, &[&inp], &[&out]);
    assert!(ok, "{text}");
}
