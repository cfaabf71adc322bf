#!/usr/bin/env python3
"""`make bench`, aggregation rows: the dpu's gradient aggregation beside dpdk-testpmd io.

    tools/bench/agg.py [--seconds 2] [--reps 3] [--fold-reps 5] [--no-callgrind]
                       (callgrind unless AGG_CALLGRIND=0 or --no-callgrind; binaries: DPU_BIN, PKTGEN_BIN,
                        default target/release/{dpu,pktgen})

Cases: 4 and 16 workers x 256 and 1024 f32 lanes per chunk (1 KiB and 4 KiB payloads) x the
UDP and RoCEv2 carriages. Inputs come from `pktgen allreduce` (64 slots; one round, or R for 2),
written with configs into target/bench/agg/.

1. Steady state (rule 3 resends), through DPDK: port 0 is net_pcap with infinite_rx=1 replaying
   the capture, port 1 net_null without rx; the members' `port = 1`, so every result leaves on
   the null port, as testpmd io forwards port 0 -> 1. One worker lcore on CPU 1. After the first
   pass every contribution is for a round its slot already completed: the appliance answers each
   with the kept result, unicast (spec rule 3). One contribution in, one result out, no fold.
   Per (carriage, lanes, N) the runs alternate testpmd io on that N's capture (the same
   frames), on the UDP carriage testpmd csum (for reference: DPDK's engine that parses each
   packet and computes its IPv4 and UDP checksums in software), and the dpu, REPS x SECONDS. Checked per run: no drops, results + resends
   == contributions received (1:1), and port 1 sent as many frames.
   Rates: testpmd, the mean of its per-second Rx-pps on port 0 (first sample left out); the dpu,
   port 0's workers.rx_packets / seconds. Gbit/s and elements/s count the payload only
   (lanes x 4 bytes per contribution).
2. The folding path through DPDK (finite replay): per case, two captures of R1 and R2 fresh
   rounds (64 slots x N workers x R, R2 sized to about FOLD_MB, R1 = R2 / FOLD_SPLIT), port 0
   net_pcap without infinite_rx (the dpu counts the records and stops when all are in), port 1
   net_null. Every contribution is folded and every completion replicated to the N members.
   Checked per run: folded == contributions, results == N x completed == port 1's frames, no
   resends, NAKs or drops. Rate = (folded2 - folded1) / (seconds2 - seconds1), so start-up
   and shutdown cancel. Baseline in the same run on the same captures: the dpu without the
   aggregator forwarding every frame to port 1 through an L2 table (conf/bench/empty.toml),
   the I/O cost of the finite replay; the ratio is the median of per-rep ratios.
3. The folding path (criterion, dataplane/benches/aggregation.rs, run by make bench before
   this script): every contribution folded, every completion replicated to N members, in memory.
4. Instructions per packet (valgrind --tool=callgrind over the dpu, AVX2 path): steady state
   differencing two runs (--duration 3 and 9, packets from the stats JSON) to cancel EAL start-up
   and shutdown, whole program (net_pcap's rx copy and net_null's tx included); the fold path on
   a finite capture of 12 rounds (no infinite_rx; every contribution folded, N results per
   completion), counting only inside Datapath::process_burst (--toggle-collect), because the worker
   busy-polls while a finite replay starts and ends.

Output: stdout, and appended to target/bench/results.md.
"""

import argparse
import datetime
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import dpu_stats, testpmd_mpps  # noqa: E402  (the packet-core rows' dpu and testpmd runners)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "target", "bench", "agg")
DPU = os.environ.get("DPU_BIN", os.path.join(ROOT, "target", "release", "dpu"))
PKTGEN = os.environ.get("PKTGEN_BIN", os.path.join(ROOT, "target", "release", "pktgen"))
EAL = ["--no-huge", "-m", "1024", "--no-pci", "--no-shconf", "--lcores", "0@0,1@1",
       "--log-level", "*:warning"]
WORKERS = (4, 16)
LANES = (256, 1024)
CARRIAGES = ("udp", "rocev2")
SLOTS = 64
GOALS = {"udp": 0.8, "rocev2": 0.6}
CRIT_SLOTS, CRIT_ROUNDS = 16, 8  # dataplane/benches/aggregation.rs
FOLD_MB = 192  # size of the larger fold-path capture (MB); the smaller has 1/FOLD_SPLIT the rounds
FOLD_SPLIT = 8


def name(carriage, n, lanes, tag="inf"):
    return f"{carriage}-{n}w-{lanes}l-{tag}"


def config(src, pcap, dst, infinite, mbufs):
    """The pktgen config with the bench's two ports: pcap in (port 0), null out (port 1)."""
    with open(src) as f:
        t = f.read()
    t = re.sub(r"\[\[port\]\].*?(?=\n\[\[collective\]\])", "", t, flags=re.S)
    t = t.replace('"-m", "512"', '"-m", "1024"')
    room = "" if "data_room" in t else "data_room = 9344\n"
    t = t.replace("[mempool]\n", f"[mempool]\nmbufs = {mbufs}\ncache = 256\n{room}", 1)
    addr = 'mac = "02:00:00:00:00:fe"\nipv4 = "10.0.0.254"\nipv6 = "fd00::fe"\n'
    inf = ",infinite_rx=1" if infinite else ""
    ports = (f'[[port]]\nname = "in"\nvdev = "net_pcap0,rx_pcap={pcap}{inf}"\n{addr}\n'
             f'[[port]]\nname = "out"\nvdev = "net_null0,no-rx=1"\n{addr}\n'
             "[[lcore]]\nid = 1\nrx = [{ port = 0, queue = 0 }]\n\n")
    t = t.replace("[[collective]]", ports + "[[collective]]", 1)
    t = t.replace("[[collective.member]]\n", "[[collective.member]]\nport = 1\n")
    with open(dst, "w") as f:
        f.write(t)


def gen(carriage, n, lanes, rounds=1, slots=SLOTS, tag="inf"):
    d = os.path.join(OUT, name(carriage, n, lanes, tag))
    pcap = os.path.join(d, "input.pcap")
    conf = os.path.join(d, "bench.toml")
    if not (os.path.exists(conf) and os.path.getmtime(conf) >= os.path.getmtime(PKTGEN)):
        subprocess.run([PKTGEN, "allreduce", "--out", d, "--workers", str(n), "--chunk-elements",
                        str(lanes), "--tensor-elements", str(slots * lanes), "--carriage",
                        carriage, "--rounds", str(rounds)], check=True, stdout=subprocess.DEVNULL)
        config(os.path.join(d, "appliance.toml"), pcap, conf, tag == "inf",
               32767 if tag == "inf" else 4095)
    return pcap, conf


def check(s, what):
    a = s["aggregation"]
    rx = s["ports"][0]["workers"]["rx_packets"]
    out = a["results"] + a["resends"]
    tx = s["ports"][1]["ethdev"]["opackets"]
    dropped = {k: v for k, v in s["drops"].items() if v}
    if dropped or a["naks"] or abs(rx - out) > 64 or abs(out - tx) > 4096:
        sys.exit(f"agg.py: {what}: {rx} contributions in, {a['results']} results + "
                 f"{a['resends']} resends, {tx} sent, naks {a['naks']}, drops {dropped}: "
                 "expected one frame out per contribution in, no drops")
    return rx, a


def run_dpu(conf, seconds, tag):
    stats = os.path.join(OUT, f"stats-{tag}.json")
    s = dpu_stats(DPU, conf, seconds, stats, f"agg.py: dpu {tag}")
    rx, _ = check(s, tag)
    return rx / s["seconds"] / 1e6


def run_testpmd(pcap, seconds, mode="io"):
    """testpmd forwarding the capture 0 -> 1 in `mode` (io, or csum: parse + IPv4/UDP checksums
    recomputed in software)."""
    cmd = ["dpdk-testpmd", *EAL, "--vdev", f"net_pcap0,rx_pcap={pcap},infinite_rx=1",
           "--vdev", "net_null0,no-rx=1", "--", "--nb-cores=1", f"--forward-mode={mode}",
           "--total-num-mbufs=32768", "--mbuf-size=9344", "--max-pkt-len=9000",
           "--no-flush-rx", "--stats-period", "1"]
    return testpmd_mpps(cmd, seconds, "agg.py")


def fold_rounds(n, lanes):
    """(R1, R2): rounds of the two fold-path captures; the larger is about FOLD_MB."""
    per_round = SLOTS * n * (lanes * 4 + 116)  # frame + pcap record header
    r2 = max(FOLD_SPLIT, round(FOLD_MB * 1e6 / per_round))
    return max(1, r2 // FOLD_SPLIT), r2


def forward_config(pcap, dst):
    """conf/bench/empty.toml (no aggregator: one exact table whose miss forwards to port 1) on
    the finite capture PCAP."""
    with open(os.path.join(ROOT, "conf", "bench", "empty.toml")) as f:
        t = f.read()
    t = re.sub(r'vdev = "net_pcap0,[^"]*"', f'vdev = "net_pcap0,rx_pcap={pcap}"', t)
    t = re.sub(r"mbufs = \d+.*", "mbufs = 4095\ndata_room = 9344", t)
    with open(dst, "w") as f:
        f.write(t)
    return dst


def run_finite(conf, tag):
    """The stats of one dpu run replaying a finite capture to its end (no --duration)."""
    stats = os.path.join(OUT, f"stats-{tag}.json")
    r = subprocess.run([DPU, "-q", "-c", conf, "--stats-json", stats], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        sys.exit(f"agg.py: dpu {tag} failed ({r.returncode}): {r.stderr.strip()}")
    with open(stats) as f:
        s = json.load(f)
    if s["input_short"]:
        sys.exit(f"agg.py: dpu {tag}: the replay ended short of its input")
    return s


def check_fold(s, n, rounds, what):
    """Every contribution folded, every completion sent to the N members, nothing dropped."""
    want = SLOTS * n * rounds
    a = s["aggregation"]
    rx = s["ports"][0]["workers"]["rx_packets"]
    tx = s["ports"][1]["ethdev"]["opackets"]
    dropped = {k: v for k, v in s["drops"].items() if v}
    if (rx != want or a["folded"] != want or a["completed"] != SLOTS * rounds
            or a["results"] != n * a["completed"] or tx != a["results"] or a["resends"]
            or a["naks"] or dropped):
        sys.exit(f"agg.py: {what}: {rx} of {want} contributions in, {a['folded']} folded, "
                 f"{a['completed']} completed, {a['results']} results, {tx} sent, "
                 f"{a['resends']} resends, naks {a['naks']}, drops {dropped}")
    return a["folded"], s["seconds"]


def check_forward(s, want, what):
    rx = s["ports"][0]["workers"]["rx_packets"]
    tx = s["ports"][1]["ethdev"]["opackets"]
    dropped = {k: v for k, v in s["drops"].items() if v}
    if rx != want or tx != want or dropped:
        sys.exit(f"agg.py: {what}: {rx} of {want} frames in, {tx} sent, drops {dropped}")
    return rx, s["seconds"]


def fold_rates(carriage, n, lanes, reps):
    """Per rep, (fold Mpps, forward Mpps), each (packets2 - packets1) / (seconds2 - seconds1)
    over the R1- and R2-round captures: start-up and shutdown cancel."""
    rounds = fold_rounds(n, lanes)
    runs = []
    for r in rounds:
        pcap, conf = gen(carriage, n, lanes, rounds=r, tag=f"rate{r}")
        fwd = forward_config(pcap, os.path.join(os.path.dirname(conf), "forward.toml"))
        runs.append((r, conf, fwd))
    out = []
    for rep in range(reps):
        fold, fwd = [], []
        for r, conf, fconf in runs:
            tag = name(carriage, n, lanes, f"rate{r}")
            fwd.append(check_forward(run_finite(fconf, tag + "-fwd"), SLOTS * n * r,
                                     f"forward {tag}"))
            fold.append(check_fold(run_finite(conf, tag), n, r, f"fold {tag}"))
        rate = lambda x: (x[1][0] - x[0][0]) / (x[1][1] - x[0][1]) / 1e6
        out.append((rate(fold), rate(fwd)))
        print(f"agg.py: fold {carriage} {n}w {lanes} lanes run {rep + 1}/{reps}: "
              f"{out[-1][0]:.2f} Mpps folded, forward {out[-1][1]:.2f} Mpps "
              f"({fold[1][1] - fold[0][1]:.3f} s over {fold[1][0] - fold[0][0]} contributions)",
              file=sys.stderr, flush=True)
    return rounds, out


def callgrind(conf, extra, tag, toggle=None):
    """(instructions, stats) of one dpu run under callgrind; with `toggle` (a function name
    pattern), only the instructions executed inside that function are counted."""
    out = os.path.join(OUT, f"callgrind-{tag}.out")
    stats = os.path.join(OUT, f"stats-cg-{tag}.json")
    only = [f"--toggle-collect={toggle}"] if toggle else []
    # --fair-sched=yes: valgrind runs the lcores one at a time, and with its default scheduler the
    # busy-polling worker starves the main lcore, whose --duration timer then fires late and at
    # random (a 3 s run once processed more packets than an 18 s one).
    r = subprocess.run(["valgrind", "--tool=callgrind", "--fair-sched=yes", *only,
                        f"--callgrind-out-file={out}", DPU, "-q",
                        "-c", conf, "--stats-json", stats, *extra], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        sys.exit(f"agg.py: callgrind {tag} failed: {r.stderr[-2000:]}")
    m = re.search(r"Collected\s*:\s*(\d+)", r.stderr)
    with open(stats) as f:
        s = json.load(f)
    return int(m.group(1)), s


def ipp_steady(carriage, n, lanes):
    """Instructions per packet of the whole dpu in the steady state: two runs of different
    lengths, the difference of their instruction counts over the difference of their packet
    counts (EAL start-up and shutdown cancel). Under valgrind the lcores take turns on one
    thread (fairly, with --fair-sched=yes); a pair whose longer run did not process clearly
    more packets is still run again, longer."""
    _, conf = gen(carriage, n, lanes)
    for long in (9, 18, 30):
        i1, s1 = callgrind(conf, ["--duration", "3"], f"{name(carriage, n, lanes)}-a")
        i2, s2 = callgrind(conf, ["--duration", str(long)], f"{name(carriage, n, lanes)}-b")
        p1, _ = check(s1, "callgrind")
        p2, _ = check(s2, "callgrind")
        if p2 - p1 >= max(10000, p2 // 3):
            return (i2 - i1) / (p2 - p1), p2 - p1
        print(f"agg.py: callgrind {carriage}: 3 s -> {p1} packets, {long} s -> {p2}: again, longer",
              flush=True)
    sys.exit(f"agg.py: callgrind {carriage}: the longer run never processed clearly more packets")


def ipp_fold(carriage, n, lanes, rounds=12):
    """Instructions per contribution inside Datapath::process_burst on a finite capture (every
    contribution folded, N results per completion). Only that function is counted: the worker
    lcore busy-polls while the replay starts and ends, so whole-program counts of a finite run
    measure the wait, not the packets."""
    _, conf = gen(carriage, n, lanes, rounds=rounds, slots=16, tag=f"fold{rounds}")
    i, s = callgrind(conf, [], f"{name(carriage, n, lanes)}-fold{rounds}", toggle="*Datapath*process_burst*")
    if i == 0:
        sys.exit("agg.py: callgrind counted nothing inside Datapath::process_burst (inlined into the "
                 "worker loop? it must stay #[inline(never)])")
    rx, a = check(s, "callgrind fold")
    if a["folded"] != rx or a["resends"]:
        sys.exit(f"agg.py: fold run {rounds} rounds: {rx} in, {a['folded']} folded")
    return i / rx, rx


def criterion_rows():
    base = os.path.join(ROOT, "target", "criterion", "aggregation")
    rows = []
    for carriage in CARRIAGES:
        for lanes in LANES:
            for n in WORKERS:
                est = os.path.join(base, f"{carriage}_{lanes}lanes", f"{n}workers", "new",
                                   "estimates.json")
                if not os.path.exists(est):
                    continue
                with open(est) as f:
                    e = json.load(f)
                per = n * CRIT_SLOTS * CRIT_ROUNDS
                med = e["median"]["point_estimate"] / per
                lo = e["median"]["confidence_interval"]["lower_bound"] / per
                hi = e["median"]["confidence_interval"]["upper_bound"] / per
                mpps = 1e3 / med
                rows.append(f"| {carriage} | {n} | {lanes} ({lanes * 4} B) | {med:.0f} "
                            f"[{lo:.0f}-{hi:.0f}] | {mpps:.2f} | {mpps * lanes * 32 / 1e3:.1f} | "
                            f"{mpps * lanes / 1e3:.2f} G |")
    return rows


def lscpu():
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    get = lambda k: next((l.split(":", 1)[1].strip() for l in out.splitlines()
                          if l.startswith(k + ":")), "?")
    return f"{get('Model name')}, {get('CPU(s)')} CPUs ({get('Hypervisor vendor')} guest)"


def fmt(xs, k=1.0, d=2):
    return f"{statistics.median(xs) * k:.{d}f} [{min(xs) * k:.{d}f}-{max(xs) * k:.{d}f}]"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=int(os.environ.get("AGG_SECONDS", 2)))
    ap.add_argument("--reps", type=int, default=int(os.environ.get("AGG_REPS", 3)))
    ap.add_argument("--fold-reps", type=int, default=int(os.environ.get("AGG_FOLD_REPS", 5)),
                    help="repetitions of the fold-path replays (0: leave the table out)")
    ap.add_argument("--no-callgrind", action="store_true",
                    default=os.environ.get("AGG_CALLGRIND", "1") == "0")
    a = ap.parse_args()
    for exe in (DPU, PKTGEN):
        if not os.path.exists(exe):
            sys.exit(f"agg.py: {exe} is missing: cargo build --release first")
    os.makedirs(OUT, exist_ok=True)
    load = os.getloadavg()[0]
    res = {}
    for carriage in CARRIAGES:
        for lanes in LANES:
            pcaps = {n: gen(carriage, n, lanes) for n in WORKERS}
            for rep in range(a.reps):
                msg = []
                for n in WORKERS:
                    # testpmd on this N's capture: the same frames as the dpu row (a 16-worker
                    # capture is 4x the 4-worker one, and net_pcap's copy slows as it leaves the
                    # cache).
                    tp = run_testpmd(pcaps[n][0], a.seconds)
                    res.setdefault((carriage, lanes, "testpmd", n), []).append(tp)
                    msg.append(f"testpmd {n}w {tp:.2f}")
                    if carriage == "udp":
                        cs = run_testpmd(pcaps[n][0], a.seconds, "csum")
                        res.setdefault((carriage, lanes, "csum", n), []).append(cs)
                        msg.append(f"testpmd csum {n}w {cs:.2f}")
                    r = run_dpu(pcaps[n][1], a.seconds, name(carriage, n, lanes))
                    res.setdefault((carriage, lanes, n), []).append(r)
                    msg.append(f"dpu {n}w {r:.2f}")
                print(f"agg.py: {carriage} {lanes} lanes run {rep + 1}/{a.reps}: "
                      f"{', '.join(msg)} Mpps", file=sys.stderr, flush=True)
    fold = {}
    for carriage in CARRIAGES:
        for lanes in LANES:
            for n in WORKERS:
                if a.fold_reps > 0:
                    fold[(carriage, n, lanes)] = fold_rates(carriage, n, lanes, a.fold_reps)
    cg = {}
    if not a.no_callgrind:
        for carriage in CARRIAGES:
            cg[("steady", carriage)] = ipp_steady(carriage, 4, 1024)
            cg[("fold", carriage)] = ipp_fold(carriage, 4, 1024)
            print(f"agg.py: callgrind {carriage}: steady {cg[('steady', carriage)][0]:.0f}, "
                  f"fold {cg[('fold', carriage)][0]:.0f} instructions/packet",
                  file=sys.stderr, flush=True)

    frame = {}
    for carriage in CARRIAGES:
        for lanes in LANES:
            with open(os.path.join(OUT, name(carriage, 4, lanes), "input.pcap"), "rb") as f:
                f.seek(24 + 8)
                frame[(carriage, lanes)] = int.from_bytes(f.read(4), "little")
    lines = [
        "",
        "### Aggregation",
        "",
        f"Machine: {lscpu()}; {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}; "
        f"load average {load:.1f} at start.",
        "",
        "Steady state (rule 3 resends): net_pcap infinite_rx replaying one round of a pktgen "
        "AllReduce (64 slots x N workers, f32 sum) -> the dpu (one worker lcore) -> net_null; "
        "after the first pass every contribution is for a completed round and is answered with "
        "its kept result, unicast: one frame in, one out, no folding. testpmd io forwards the "
        "same capture 0 -> 1 (each N its own; the ratio is against the same N's); on the UDP "
        "carriage testpmd csum (parse + software IPv4/UDP checksums) for reference. "
        f"{a.reps} x {a.seconds} s per row, alternating. "
        "Payload Gbit/s and elements/s count lanes x 4 B per contribution.",
        "",
        "| carriage | workers | lanes (frame) | Mpps median [min-max] | payload Gbit/s | "
        "elements/s | ratio to testpmd | goal |",
        "|---|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    for carriage in CARRIAGES:
        for lanes in LANES:
            for n in WORKERS:
                tp = statistics.median(res[(carriage, lanes, "testpmd", n)])
                xs = res[(carriage, lanes, n)]
                r = statistics.median(xs) / tp
                goal = GOALS[carriage]
                ok = "met" if r >= goal else "NOT met"
                verdicts.append(r >= goal)
                lines.append(f"| {carriage} | {n} | {lanes} ({frame[(carriage, lanes)]} B) | "
                             f"{fmt(xs)} | {fmt(xs, lanes * 32 / 1e3, 1)} | "
                             f"{statistics.median(xs) * lanes / 1e3:.2f} G | {r:.2f} | "
                             f">= {goal}: {ok} |")
                if (carriage, lanes, "csum", n) in res:
                    xs = res[(carriage, lanes, "csum", n)]
                    lines.append(f"| {carriage}, dpdk-testpmd csum (software IPv4/UDP checksums) | {n} | "
                                 f"{lanes} ({frame[(carriage, lanes)]} B) | {fmt(xs)} | "
                                 f"{fmt(xs, lanes * 32 / 1e3, 1)} | - | "
                                 f"{statistics.median(xs) / tp:.2f} | |")
                xs = res[(carriage, lanes, "testpmd", n)]
                lines.append(f"| {carriage}, dpdk-testpmd io | {n} | {lanes} "
                             f"({frame[(carriage, lanes)]} B) | {fmt(xs)} | "
                             f"{fmt(xs, lanes * 32 / 1e3, 1)} | - | 1.00 | |")
    lines += ["", f"Goals (>= {GOALS['udp']} of testpmd on UDP, >= {GOALS['rocev2']} on RoCEv2): "
              f"{sum(verdicts)} of {len(verdicts)} rows met."]
    if fold:
        lines += ["", "Folding path through DPDK (finite replay, the dpu binary): net_pcap (no "
                  "infinite_rx) reads a capture of R fresh rounds of a pktgen AllReduce (64 slots "
                  "x N workers x R rounds, f32 sum, deterministic) -> the dpu (one worker lcore) "
                  "-> net_null; every contribution is folded and every completion sent to the N "
                  "members (N in, N out per slot); each run checks folded == contributions, "
                  "results == N x completed == frames sent, no resends, NAKs or drops. Rate = "
                  "(packets(R2) - packets(R1)) / (seconds(R2) - seconds(R1)) of two captures "
                  f"(R2 about {FOLD_MB} MB, R1 = R2 / {FOLD_SPLIT}), so start-up and shutdown "
                  "cancel. Baseline, in the same run on the same two captures: the dpu without "
                  "the aggregator forwarding every frame 0 -> 1 through an L2 table "
                  "(conf/bench/empty.toml: parse incl. IPv4/UDP checksum verification, one "
                  "exact lookup whose miss forwards), i.e. the I/O cost of a finite net_pcap "
                  f"replay. {a.fold_reps} reps per row, alternating; median [min-max]; the ratio is "
                  "the median of the per-rep ratios.", "",
                  "| carriage | workers | lanes (frame) | rounds R1/R2 | Mpps median [min-max] | "
                  "payload Gbit/s | elements/s | L2 forward Mpps | ratio to forward |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for carriage in CARRIAGES:
            for lanes in LANES:
                for n in WORKERS:
                    (r1, r2), reps = fold[(carriage, n, lanes)]
                    xs = [x for x, _ in reps]
                    fw = [y for _, y in reps]
                    lines.append(f"| {carriage} | {n} | {lanes} ({frame[(carriage, lanes)]} B) | "
                                 f"{r1}/{r2} | {fmt(xs)} | {fmt(xs, lanes * 32 / 1e3, 1)} | "
                                 f"{statistics.median(xs) * lanes / 1e3:.2f} G | {fmt(fw)} | "
                                 f"{statistics.median([x / y for x, y in reps]):.2f} |")
    rows = criterion_rows()
    if rows:
        lines += ["", "Folding path (criterion, `dataplane/benches/aggregation.rs`, no DPDK: "
                  f"{CRIT_SLOTS} slots x {CRIT_ROUNDS} fresh rounds per iteration, every "
                  "contribution copied into a pooled buffer, parsed, validated and folded, every "
                  "completion replicated to the N members; median [95% CI]):", "",
                  "| carriage | workers | lanes | ns/contribution | Mpps | payload Gbit/s | "
                  "elements/s |", "|---|---|---|---|---|---|---|", *rows]
    if cg:
        lines += ["", "Instructions per packet (callgrind, dpu binary, AVX2 path; 4 workers, "
                  "1024 lanes; steady state: the difference of two runs divided by the difference "
                  "of their packet counts, so EAL start-up cancels, net_pcap rx copy and net_null "
                  "tx included):", "",
                  "| carriage | steady state (resend) | fold path (finite capture, "
                  "16 slots, 12 rounds; inside Datapath::process_burst only: parse, validate, fold, "
                  "N results per completion, no DPDK rx/tx) |", "|---|---|---|"]
        for carriage in CARRIAGES:
            s, sp = cg[("steady", carriage)]
            f_, fp = cg[("fold", carriage)]
            lines.append(f"| {carriage} | {s:.0f} (over {sp} packets) | "
                         f"{f_:.0f} (over {fp} contributions) |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(ROOT, "target", "bench", "results.md"), "a") as f:
        f.write(text)
    print(text, end="")


if __name__ == "__main__":
    main()
