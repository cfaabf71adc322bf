#!/usr/bin/env python3
"""`make bench`: pktgen's own tx-only rate beside `dpdk-testpmd --forward-mode=txonly`.

    tools/bench/pktgen.py [--seconds 5] [--reps 3]

Both send 64-byte UDP/IPv4 frames (without FCS) at full rate into net_null (`no-rx=1`: the
PMD frees every mbuf it is given), one tx lcore on CPU 1, the main lcore on CPU 0, no
hugepages, an 8191-mbuf pool with a 256-mbuf cache, bursts of 32; the runs alternate, REPS
times. pktgen (conf/pktgen/txonly-null.toml) builds every frame from its flow's template and
stamps a sequence number and the TSC into it (UDP checksum updated); testpmd copies its
prebuilt headers and leaves the UDP checksum 0.

Rates: testpmd, the mean of its per-second Tx-pps samples on port 0 (the first, partial one
left out); pktgen, the packets the tx queue took over the lane's sending time (its --json).
Goal: pktgen >= 1.0x testpmd txonly. Output: stdout and target/bench/pktgen.md.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import publish, testpmd_mpps  # noqa: E402  (the packet-core rows' testpmd runner and report)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "target", "bench")
PKTGEN = os.path.join(ROOT, "target", "release", "pktgen")
CONF = os.path.join(ROOT, "conf", "pktgen", "txonly-null.toml")
EAL = ["--no-huge", "-m", "512", "--no-pci", "--no-shconf", "--lcores", "0@0,1@1",
       "--log-level", "*:warning"]
GOAL = 1.0


def run_pktgen(seconds):
    js = os.path.join(OUT, "pktgen-txonly.json")
    r = subprocess.run([PKTGEN, "run", "-q", "-c", CONF, "--duration", str(seconds), "--json", js],
                       cwd=ROOT, capture_output=True, text=True, timeout=seconds + 60)
    if r.returncode != 0:
        sys.exit(f"pktgen.py: pktgen failed ({r.returncode}): {r.stderr.strip()}")
    with open(js) as f:
        s = json.load(f)["streams"][0]
    if s["tx"]["nombuf"]:
        print(f"pktgen.py: note: {s['tx']['nombuf']} mbuf allocation failures", file=sys.stderr)
    return s["tx_pps"] / 1e6


def run_testpmd(seconds):
    cmd = ["dpdk-testpmd", *EAL, "--vdev", "net_null0,no-rx=1", "--", "--nb-cores=1",
           "--forward-mode=txonly", "--txpkts=64", "--burst=32", "--total-num-mbufs=8191",
           "--mbcache=256", "--stats-period", "1"]
    return testpmd_mpps(cmd, seconds, "pktgen.py", field="Tx-pps")


def fmt(xs):
    return f"{statistics.median(xs):.2f} [{min(xs):.2f}-{max(xs):.2f}]"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=int(os.environ.get("BENCH_SECONDS", 5)))
    ap.add_argument("--reps", type=int, default=int(os.environ.get("BENCH_REPS", 3)))
    a = ap.parse_args()
    if not os.path.exists(PKTGEN):
        sys.exit(f"pktgen.py: {PKTGEN} is missing: cargo build --release first")
    os.makedirs(OUT, exist_ok=True)
    load = os.getloadavg()[0]
    res = {"testpmd": [], "pktgen": []}
    for rep in range(a.reps):
        for what, fn in (("testpmd", run_testpmd), ("pktgen", run_pktgen)):
            mpps = fn(a.seconds)
            res[what].append(mpps)
            print(f"pktgen.py: run {rep + 1}/{a.reps}: {what} {mpps:.2f} Mpps", file=sys.stderr,
                  flush=True)
    ratio = statistics.median(res["pktgen"]) / statistics.median(res["testpmd"])
    lines = [
        f"Generators, tx-only at 64 B into net_null (one tx lcore on CPU 1; load average "
        f"{load:.1f} at start; {a.reps} x {a.seconds} s, alternating):",
        "",
        "| generator | Mpps median [min-max] | ratio to testpmd txonly |",
        "|---|---|---|",
        f"| dpdk-testpmd --forward-mode=txonly | {fmt(res['testpmd'])} | 1.00 |",
        f"| pktgen run (stamped: sequence number, TSC, UDP checksum) | {fmt(res['pktgen'])} | "
        f"{ratio:.2f} |",
        "",
        f"Goal: pktgen >= {GOAL:.1f}x testpmd txonly: {'met' if ratio >= GOAL else 'NOT met'} "
        f"({ratio:.2f}).",
    ]
    publish(lines, "pktgen.md")


if __name__ == "__main__":
    main()
