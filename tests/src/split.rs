//! Split replays for two-port, two-worker runs: generated contributions divided between the
//! ports by the sender's rank, the run replaying both ports, and the check that each port's
//! results reach only its own members.

use crate::{read_pcap, read_pcap_records, run_dpu, write_pcap_at, Run};
use std::ops::Range;
use std::path::{Path, PathBuf};

/// The two ports of split configs, each with its own MAC and the appliance's IPv4 address;
/// members are reached through port 0 unless their `[[collective]]` entry says `port = 1`
/// ([`collectives_via_ports`]).
pub const SPLIT_PORTS: &str = include_str!("../fixtures/split-ports.toml");

/// The contributions of pktgen's `input.pcap` in each of `workloads`, split between two ports
/// by the sender's rank (source MAC 02:00:00:00:01:rr): rank r arrives on port `port_of(r)` (0
/// or 1). Each port's records are sorted by capture time and written to `dir`/in0.pcap and
/// in1.pcap, which are returned.
pub fn split_by_rank(dir: &Path, workloads: &[&Path], port_of: impl Fn(usize) -> usize) -> (PathBuf, PathBuf) {
    // Source MAC 02:00:00:00:01:rr.
    split_frames(dir, workloads, |f| port_of(f[11] as usize))
}

/// [`split_by_rank`] with the port chosen from the whole frame.
pub fn split_frames(dir: &Path, workloads: &[&Path], port_of: impl Fn(&[u8]) -> usize) -> (PathBuf, PathBuf) {
    let mut by_port: [Vec<(u64, Vec<u8>)>; 2] = [Vec::new(), Vec::new()];
    for d in workloads {
        for (us, f) in read_pcap_records(&d.join("input.pcap")) {
            by_port[port_of(&f)].push((us, f));
        }
    }
    for v in by_port.iter_mut() {
        v.sort_by_key(|(t, _)| *t);
    }
    let (in0, in1) = (dir.join("in0.pcap"), dir.join("in1.pcap"));
    write_pcap_at(&in0, &by_port[0]);
    write_pcap_at(&in1, &by_port[1]);
    (in0, in1)
}

/// The `[[collective]]` tables of pktgen's `appliance.toml` in `workload`, the members whose
/// rank is in `on_port1` reached through port 1 (the others through port 0, the default).
pub fn collectives_via_ports(workload: &Path, on_port1: Range<usize>) -> String {
    let t = std::fs::read_to_string(workload.join("appliance.toml")).unwrap();
    let mut c = t[t.find("[[collective]]").expect("pktgen writes [[collective]] tables")..].to_string();
    for k in on_port1 {
        c = c.replace(&format!("rank = {k}\n"), &format!("rank = {k}\nport = 1\n"));
    }
    c
}

/// Runs the dpu on `conf`, replaying `in0` into port 0 and `in1` into port 1; with `outs`, the
/// two ports' output goes to those captures.
pub fn run_two_ports(dir: &Path, conf: &Path, in0: &Path, in1: &Path, outs: Option<(&Path, &Path)>) -> Run {
    let mut args = vec![format!("--rx=0={}", in0.display()), format!("--rx=1={}", in1.display())];
    if let Some((o0, o1)) = outs {
        args.push(format!("--tx=0={}", o0.display()));
        args.push(format!("--tx=1={}", o1.display()));
    }
    run_dpu(dir, conf, &args)
}

/// Asserts that each of the two ports' output captures holds `per_port` results and that they
/// go to its own members only: ranks `0..ranks_per_port` behind port 0, the next
/// `ranks_per_port` behind port 1 (destination MAC 02:00:00:00:01:rr).
pub fn assert_results_stay_on_their_ports(outs: [&Path; 2], per_port: usize, ranks_per_port: usize) {
    for (i, o) in outs.iter().enumerate() {
        let frames = read_pcap(o);
        assert_eq!(frames.len(), per_port, "port {i}");
        assert!(frames.iter().all(|f| f[5] as usize / ranks_per_port == i), "port {i} only reaches its members");
    }
}
