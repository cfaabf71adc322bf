#!/usr/bin/env python3
"""`make bench`: Mpps of the dpu beside dpdk-testpmd, in the same run, and a markdown table.

    tools/bench/run.py [--seconds 5] [--reps 3] [--rows dpu,qos,testpmd] [--sizes 60]

python3 on PATH (the standard library; tools/bench/gen.py, run once to write the inputs, needs
scapy, which tools/install-deps.sh installs for it).

Every measurement runs one program for SECONDS on the same vdevs: net_pcap with infinite_rx=1
replaying a capture of 1024 UDP/IPv4 frames (port 0) into net_null without rx (port 1), one
worker lcore on CPU 1 and the main lcore on CPU 0, no hugepages. Per frame size, the runs
alternate testpmd io, the dpu with the full pipeline (conf/bench/pipeline.toml), the dpu
with the same pipeline plus a meter on the path and a shaped marking (RED) queue on the output
port (conf/bench/qos.toml; rates far above the offered load, so nothing is policed, marked or
dropped), the dpu with the full pipeline again while it is watched (the "telemetry" row: the
Prometheus listener on, the stats line every second, and a reader that asks the telemetry socket
for /dpu/stats and scrapes /metrics every 100 ms; the workers publish their counters every
100 ms in every row, watched or not), the dpu with an empty pipeline (conf/bench/empty.toml) and testpmd in csum mode (for
reference: DPDK's own engine that parses each packet and computes its IPv4 and UDP checksums in
software), REPS times; the table gives the median and the min-max, and the ratio of medians to
testpmd io at the same size (for the qos row also its ratio to the pipeline row).

OVS-DPDK as a peer (rows `ovs`, `ovs64k`, `dpu64k`, `testpmd64k`; tools/bench/ovs.py): Debian's
ovs-vswitchd-dpdk, private to the run (its own ovsdb-server, temporary run/db/log directories
and DPDK file prefix), one PMD thread on CPU 1 and its main lcore on CPU 0, no hugepages, the
same two vdevs as DPDK ports of a netdev bridge, and conf/bench/pipeline.toml's three tables
translated to three OpenFlow 1.3 tables (568 flows). `ovs` replays the same 1024-flow capture
(every flow fits OVS's exact-match cache, EMC, 8192 entries); `ovs64k` a capture of 65,536
distinct 5-tuples that hit the same table entries (tools/bench/gen.py), which do not fit it,
with OVS's defaults (EMC insertion 1 in 100, SMC off); `dpu64k` is the dpu on that capture, for
the ratio in the same run, and `testpmd64k` testpmd io on it (what the larger capture costs
net_pcap's copy alone: its 65,536 preloaded frames no longer stay in the cache). OVS's rate:
port 0's rx packets (`ovs-ofctl dump-ports`, read live) over SECONDS after a WARMUP-second
warm-up (the megaflows installed), and the script checks port 1 sent them all;
`dpif-netdev/pmd-stats-show` over the same window gives the EMC, SMC and megaflow hit shares,
upcalls and cycles per packet, printed in a second table with the number of datapath flows
(megaflows) and of the classifier's masks. Every program uses mbufs with 2176 B of data room (the
128 B headroom and 2048 B: DPDK's, testpmd's and the dpu's default, and what OVS sizes for an
MTU of 1500); the 64k rows hold the capture in mbufs, so the dpu's pool grows to MBUFS_64K
there.

Rates: testpmd, the mean of its per-second Rx-pps samples on port 0 (the first, partial one
left out); the dpu, port 0's `workers.rx_packets` / `seconds` from --stats-json (every packet
received is forwarded: the script checks port 1's opackets and the drops).

When target/criterion holds the packet_core criterion results (make bench runs them first), a
second table gives their ns per packet. Output: stdout and target/bench/results.md.

`--callgrind` adds, for the dpu rows run (pipeline, qos, empty) at each size, the instructions
per packet of the worker's burst path under valgrind's callgrind (`Datapath::process_burst` and
all it calls, rx excluded, tx bursts included; the AVX2 or scalar paths, as valgrind emulates no
AVX-512): a count that does not move with the machine's load, so two rows' costs compare exactly
even where their rates are within the noise. `make bench` passes it.

`--rows` and `--sizes` run a subset (e.g. `--rows testpmd,dpu,qos --sizes 60` for the qos goal
alone; the ratios need `testpmd` and, for qos and telemetry, `dpu` among the rows; the dpu/OVS
ratios need `dpu` and `ovs`, or `dpu64k` and `ovs64k`).
"""

import argparse
import datetime
import functools
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
import tomllib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ovs  # noqa: E402 (tools/bench/ovs.py)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "target", "bench")
DPU = os.path.join(ROOT, "target", "release", "dpu")
SIZES = (60, 1066)
EAL = ["--no-huge", "-m", "1024", "--no-pci", "--no-shconf", "--lcores", "0@0,1@1",
       "--log-level", "*:warning"]
# dpu / testpmd io with the three tables. Transit forwarding verifies what a router does, not
# the UDP checksum, so the per-packet work is the same at both sizes (earlier goals, with every
# checksum verified: 0.5 and 0.9).
GOALS = {60: 0.4, 1066: 0.6}
QOS_GOAL = 0.85  # the qos row against the pipeline row, at 60 B (64 B with FCS)
TELEMETRY_GOAL = 0.95  # the telemetry row against the pipeline row, at 60 B
ROWS = ("testpmd", "dpu", "qos", "telemetry", "empty", "csum", "ovs", "dpu64k", "ovs64k",
        "testpmd64k")
OVS_GOAL = 1.5  # dpu / OVS on the 1024-flow mix (every packet an EMC hit), at 60 and 1066 B
OVS64K_GOAL = 10.0  # dpu / OVS with its defaults on the 65,536-flow mix
WARMUP = 2  # seconds OVS forwards before its window (megaflows installed, caches warm)
MBUFS_64K = 131071  # the dpu's pool for the 64k captures (65,536 preloaded frames + rings)
BATCH = 256  # frames per iteration of dataplane/benches/packet_core.rs


def pcap(size, mix=""):
    """The capture at SIZE B: 1024 flows (`mix` "") or 65,536 ("64k")."""
    return os.path.join(OUT, f"udp{mix}-{size}.pcap")


def ensure_inputs():
    os.makedirs(OUT, exist_ok=True)
    conf = os.path.join(ROOT, "conf", "bench", "pipeline.toml")
    gen = os.path.join(ROOT, "tools", "bench", "gen.py")
    if all(os.path.exists(pcap(s, m)) and os.path.getmtime(pcap(s, m)) >= max(
            os.path.getmtime(conf), os.path.getmtime(gen)) for s in SIZES for m in ("", "64k")):
        return
    subprocess.run([sys.executable, gen, "pcaps", conf, OUT], check=True)


@functools.cache
def dpu_config(name, size, mix=""):
    """conf/bench/NAME.toml with port 0 reading the SIZE capture of the `mix` (written to
    target/bench, once per run: every repetition runs the same file); for the 64k mix with a
    pool of MBUFS_64K mbufs."""
    with open(os.path.join(ROOT, "conf", "bench", f"{name}.toml")) as f:
        text = f.read()
    text = text.replace("rx_pcap=target/bench/udp-60.pcap", f"rx_pcap={pcap(size, mix)}")
    if mix:
        text, n = re.subn(r"(?m)^mbufs = \d+", f"mbufs = {MBUFS_64K}", text)
        assert n == 1, f"conf/bench/{name}.toml: no `mbufs = N` line to raise"
    path = os.path.join(OUT, f"{name}{mix}-{size}.toml")
    with open(path, "w") as f:
        f.write(text)
    return path


def dpu_stats(dpu, conf, seconds, stats, what):
    """Runs the appliance `dpu` on `conf` for `seconds` and returns its stats (the JSON it
    writes to the path `stats`); exits with `what` and dpu's error output if it fails."""
    r = subprocess.run([dpu, "-q", "-c", conf, "--duration", str(seconds), "--stats-json", stats],
                       cwd=ROOT, capture_output=True, text=True, timeout=seconds + 60)
    if r.returncode != 0:
        sys.exit(f"{what} failed ({r.returncode}): {r.stderr.strip()}")
    with open(stats) as f:
        return json.load(f)


def run_dpu(name, size, seconds, mix=""):
    conf = dpu_config(name, size, mix)
    stats = os.path.join(OUT, f"stats-{name}{mix}-{size}.json")
    s = dpu_stats(DPU, conf, seconds, stats, f"run.py: dpu {name}{mix} {size} B")
    rx = s["ports"][0]["workers"]["rx_packets"]
    tx = s["ports"][1]["ethdev"]["opackets"]
    dropped = sum(s["drops"].values())
    if dropped or rx - tx > 4096:
        sys.exit(f"run.py: dpu {name} {size} B: {rx} received, {tx} sent, drops {s['drops']}: "
                 "the bench traffic should all be forwarded")
    return rx / s["seconds"] / 1e6


def callgrind_ipp(name, size, seconds=6):
    """Instructions per packet of the dpu's burst path (`Datapath::process_burst` with its
    callees) on conf/bench/NAME.toml at SIZE B, under callgrind: the count over the packets
    received. `--fair-sched=yes` lets the main lcore's --duration timer fire while the worker
    polls (valgrind runs the lcores one at a time)."""
    conf = dpu_config(name, size)
    out = os.path.join(OUT, f"callgrind-{name}-{size}.out")
    stats = os.path.join(OUT, f"stats-cg-{name}-{size}.json")
    r = subprocess.run(["valgrind", "--tool=callgrind", "--fair-sched=yes",
                        "--toggle-collect=*Datapath*process_burst*", f"--callgrind-out-file={out}",
                        DPU, "-q", "-c", conf, "--duration", str(seconds), "--stats-json", stats],
                       cwd=ROOT, capture_output=True, text=True, timeout=seconds * 100 + 120)
    if r.returncode != 0:
        sys.exit(f"run.py: callgrind {name} {size} B failed ({r.returncode}): {r.stderr[-2000:]}")
    m = re.search(r"Collected\s*:\s*(\d+)", r.stderr)
    with open(stats) as f:
        rx = json.load(f)["ports"][0]["workers"]["rx_packets"]
    if not m or rx == 0:
        sys.exit(f"run.py: callgrind {name} {size} B: no count ({rx} packets)")
    return int(m.group(1)) / rx


def pipeline_flows():
    """conf/bench/pipeline.toml's tables as OpenFlow flows (`ovs.translate`); exits naming
    what cannot be translated."""
    with open(os.path.join(ROOT, "conf", "bench", "pipeline.toml"), "rb") as f:
        conf = tomllib.load(f)
    try:
        return ovs.translate(conf)
    except ovs.TranslateError as e:
        sys.exit(f"run.py: conf/bench/pipeline.toml: {e}")


def run_ovs(flows, size, seconds, mix=""):
    """OVS-DPDK (module doc) with the OpenFlow `flows` (`pipeline_flows()`) forwarding the SIZE
    capture of the `mix` for `seconds` after WARMUP: (Mpps received on port 0, its PMD stats
    over the window: `Ovs.pmd_stats` plus `flows`, the datapath flows at the end)."""
    try:
        with ovs.Ovs() as o:
            o.add_flows(flows)
            o.add_port("p1", 2, "net_null0,no-rx=1")
            o.add_port("p0", 1, f"net_pcap0,rx_pcap={pcap(size, mix)},infinite_rx=1")
            time.sleep(WARMUP)
            o.appctl("dpif-netdev/pmd-stats-clear")
            a, t0 = o.port_stats(), time.monotonic()
            time.sleep(seconds)
            b, t1 = o.port_stats(), time.monotonic()
            pmd = o.pmd_stats()
            m = re.search(r"flows: (\d+)", o.appctl("dpctl/show"))
            pmd["flows"] = int(m.group(1)) if m else None
            pmd["masks"] = o.subtables()
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        sys.exit(f"run.py: ovs{mix} {size} B: {e}")
    rx, tx = b[1][0] - a[1][0], b[2][1] - a[2][1]
    if rx == 0 or abs(rx - tx) > max(4096, rx // 1000):
        sys.exit(f"run.py: ovs{mix} {size} B: {rx} received, {tx} sent in {seconds} s: the "
                 "bench traffic should all be forwarded")
    return rx / (t1 - t0) / 1e6, pmd


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def watch(prefix, port, stop, counts):
    """Every 100 ms until `stop`: /dpu/stats over the telemetry socket (DPDK's protocol: connect,
    read the greeting, send the command, read the JSON reply) and GET /metrics."""
    import socket
    import urllib.request
    sock_path = f"/var/run/dpdk/{prefix}/dpdk_telemetry.v2"
    tel = None
    while not stop.is_set():
        try:
            if tel is None:
                tel = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                tel.connect(sock_path)
                tel.recv(16384)
            tel.send(b"/dpu/stats")
            if b"port_rx_packets" in tel.recv(65536):
                counts["telemetry"] += 1
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as r:
                if b"dpu_port_rx_packets_total" in r.read():
                    counts["metrics"] += 1
        except OSError:
            tel = None  # not up yet, or gone
        stop.wait(0.1)


def run_dpu_watched(size, seconds):
    """The pipeline row with telemetry in use (see the module doc); also checks the reader got
    answers."""
    import threading
    port = free_port()
    conf = dpu_config("pipeline", size)
    with open(conf) as f:
        text = f.read()
    text = text.replace("[dataplane]", "[dataplane]\nstats_interval_ms = 1000", 1) \
        if "[dataplane]" in text else text + "\n[dataplane]\nstats_interval_ms = 1000\n"
    text += f'\n[telemetry]\nprometheus = "127.0.0.1:{port}"\n'
    conf = os.path.join(OUT, f"telemetry-{size}.toml")
    with open(conf, "w") as f:
        f.write(text)
    prefix = f"dpubench-{os.getpid()}"
    stats = os.path.join(OUT, f"stats-telemetry-{size}.json")
    stop, counts = threading.Event(), {"telemetry": 0, "metrics": 0}
    t = threading.Thread(target=watch, args=(prefix, port, stop, counts), daemon=True)
    t.start()
    r = subprocess.run([DPU, "-q", "-c", conf, "--duration", str(seconds), "--stats-json", stats,
                        "--", f"--file-prefix={prefix}"],
                       cwd=ROOT, capture_output=True, text=True, timeout=seconds + 60)
    stop.set()
    t.join()
    if r.returncode != 0:
        sys.exit(f"run.py: dpu telemetry {size} B failed ({r.returncode}): {r.stderr.strip()}")
    if counts["telemetry"] < seconds * 5 or counts["metrics"] < seconds * 5:
        sys.exit(f"run.py: the telemetry reader got too few answers in {seconds} s: {counts}")
    with open(stats) as f:
        s = json.load(f)
    return s["ports"][0]["workers"]["rx_packets"] / s["seconds"] / 1e6


def run_testpmd(size, seconds, mode="io", mix=""):
    """testpmd forwarding port 0 -> 1 in `mode`: `io` (no packet access) or `csum` (parses
    each packet and, without tx checksum offload, recomputes its IPv4 and UDP checksums in
    software); on the SIZE capture of the `mix` (for "64k" with MBUFS_64K + 1 mbufs)."""
    cmd = ["dpdk-testpmd", *EAL,
           "--vdev", f"net_pcap0,rx_pcap={pcap(size, mix)},infinite_rx=1",
           "--vdev", "net_null0,no-rx=1",
           "--", "--nb-cores=1", f"--forward-mode={mode}",
           f"--total-num-mbufs={MBUFS_64K + 1 if mix else 32768}",
           "--no-flush-rx", "--stats-period", "1"]
    return testpmd_mpps(cmd, seconds, "run.py")


def testpmd_mpps(cmd, seconds, who, field="Rx-pps"):
    """Runs testpmd `cmd` (with --stats-period 1) for `seconds` of forwarding and returns port
    0's mean `field` rate (`Rx-pps` or `Tx-pps`) in Mpps (per-second samples, the first partial
    one left out)."""
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL, text=True)
    samples, port, log = [], None, []
    deadline = time.monotonic() + seconds + 60
    for line in p.stdout:
        log.append(line)
        m = re.search(r"NIC statistics for port (\d+)", line)
        if m:
            port = int(m.group(1))
        m = re.search(field + r":\s+(\d+)", line)
        if m and port == 0:
            samples.append(int(m.group(1)))
            if len([x for x in samples if x > 0]) >= seconds + 1:
                break
        if time.monotonic() > deadline:
            break
    p.send_signal(signal.SIGINT)
    try:
        p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
    live = [x for x in samples if x > 0][1:]
    if not live:
        sys.exit(f"{who}: testpmd gave no forwarding stats:\n" + "".join(log[-30:]))
    return statistics.mean(live) / 1e6


def lscpu():
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    get = lambda k: next((l.split(":", 1)[1].strip() for l in out.splitlines()
                          if l.startswith(k + ":")), "?")
    return f"{get('Model name')}, {get('CPU(s)')} CPUs ({get('Hypervisor vendor')} guest)"


def fmt(xs):
    return f"{statistics.median(xs):.2f} [{min(xs):.2f}-{max(xs):.2f}]"


def publish(lines, name):
    """Writes `lines` as a text file `name` in OUT and prints them."""
    text = "\n".join(lines) + "\n"
    with open(os.path.join(OUT, name), "w") as f:
        f.write(text)
    print(text, end="")


def criterion_median(est):
    """The median of a criterion estimates file `est` and its confidence interval's bounds, per
    packet (ns: the estimates are per batch of BATCH packets)."""
    with open(est) as f:
        m = json.load(f)["median"]
    ci = m["confidence_interval"]
    return m["point_estimate"] / BATCH, ci["lower_bound"] / BATCH, ci["upper_bound"] / BATCH


def criterion_table():
    base = os.path.join(ROOT, "target", "criterion")
    rows = []
    for size in SIZES:
        for name in ("parse", "parse_router", "parse+empty_pipeline", "parse+pipeline", "parse_router+pipeline"):
            est = os.path.join(base, f"packet_core_{size}B", name, "new", "estimates.json")
            if not os.path.exists(est):
                continue
            med, lo, hi = criterion_median(est)
            rows.append(f"| {name} | {size} B | {med:.1f} [{lo:.1f}-{hi:.1f}] | {1e3 / med:.2f} |")
    for table in ("route", "acl", "l2"):
        est = os.path.join(base, "packet_core_lookup", table, "new", "estimates.json")
        if os.path.exists(est):
            med, lo, hi = criterion_median(est)
            rows.append(f"| lookup {table} alone | 60 B | {med:.1f} [{lo:.1f}-{hi:.1f}] | {1e3 / med:.2f} |")
    if not rows:
        return []
    return ["", "Packet core alone (criterion, `dataplane/benches/packet_core.rs`, heap buffers, "
            "no DPDK; median [95% CI] per packet):", "",
            "| what | frame | ns/packet | Mpps equivalent |", "|---|---|---|---|", *rows]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=int(os.environ.get("BENCH_SECONDS", 5)))
    ap.add_argument("--reps", type=int, default=int(os.environ.get("BENCH_REPS", 3)))
    ap.add_argument("--rows", default=None,
                    help=f"comma-separated subset of {','.join(ROWS)} (default: all; the OVS rows "
                    "only where ovs-vswitchd-dpdk is installed)")
    ap.add_argument("--callgrind", action="store_true",
                    help="also count instructions per packet of the dpu rows under callgrind")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)),
                    help="comma-separated frame sizes without FCS, of 60 and 1066 (default: both)")
    a = ap.parse_args()
    if a.rows is None:
        rows = list(ROWS)
        if not os.path.exists(ovs.VSWITCHD):
            rows = [r for r in rows if r not in ("ovs", "ovs64k")]
            print(f"run.py: {ovs.VSWITCHD} is missing (tools/install-deps.sh installs Debian's "
                  "openvswitch-switch-dpdk): no OVS rows", file=sys.stderr)
    else:
        rows = a.rows.split(",")
        if any(r in rows for r in ("ovs", "ovs64k")) and not os.path.exists(ovs.VSWITCHD):
            sys.exit(f"run.py: the OVS rows need {ovs.VSWITCHD} (tools/install-deps.sh)")
    sizes = [int(x) for x in a.sizes.split(",")]
    if "testpmd" not in rows or any(r not in ROWS for r in rows) or any(x not in SIZES for x in sizes):
        sys.exit(f"run.py: --rows must include testpmd and name only {','.join(ROWS)}; "
                 f"--sizes only {SIZES}")
    if not os.path.exists(DPU):
        sys.exit(f"run.py: {DPU} is missing: cargo build --release first")
    ensure_inputs()
    # The pipeline's OpenFlow tables depend on its config alone: translated once, for every OVS
    # run and the table's label.
    flows = pipeline_flows()
    load = os.getloadavg()[0]
    res, pmd = {}, {}
    for size in sizes:
        for rep in range(a.reps):
            for what, fn in (("testpmd", lambda: run_testpmd(size, a.seconds)),
                             ("dpu", lambda: run_dpu("pipeline", size, a.seconds)),
                             ("ovs", lambda: run_ovs(flows, size, a.seconds)),
                             ("dpu64k", lambda: run_dpu("pipeline", size, a.seconds, "64k")),
                             ("ovs64k", lambda: run_ovs(flows, size, a.seconds, "64k")),
                             ("testpmd64k", lambda: run_testpmd(size, a.seconds, mix="64k")),
                             ("qos", lambda: run_dpu("qos", size, a.seconds)),
                             ("telemetry", lambda: run_dpu_watched(size, a.seconds)),
                             ("empty", lambda: run_dpu("empty", size, a.seconds)),
                             ("csum", lambda: run_testpmd(size, a.seconds, "csum"))):
                if what not in rows:
                    continue
                mpps = fn()
                if isinstance(mpps, tuple):  # OVS: (Mpps, PMD stats)
                    mpps, stats = mpps
                    pmd.setdefault((what, size), []).append(stats)
                res.setdefault((what, size), []).append(mpps)
                print(f"run.py: {size} B run {rep + 1}/{a.reps}: {what} {mpps:.2f} Mpps",
                      file=sys.stderr, flush=True)
    n_flows = len(flows)
    label = {
        "dpu": "dpu: parse + route (LPM, 312 prefixes) + ACL (40 ternary/range) + L2 (exact)",
        "qos": "dpu: the same pipeline + trTCM meter (police) + shaped RED queue on port 1",
        "telemetry": "dpu: the same pipeline, watched (telemetry socket and /metrics every 100 ms)",
        "empty": "dpu: parse + empty pipeline (one exact table, miss -> forward(1))",
        "testpmd": "dpdk-testpmd io (no parse, no tables)",
        "csum": "dpdk-testpmd csum (parse, IPv4 + UDP checksums in software, no tables)",
        "ovs": f"OVS-DPDK 3.1: the same tables as 3 OpenFlow tables ({n_flows} flows); 1024 flows (EMC hits)",
        "dpu64k": "dpu: the same pipeline; 65,536 flows (the same table entries)",
        "ovs64k": "OVS-DPDK 3.1: the same OpenFlow tables; 65,536 flows (defaults: past the EMC)",
        "testpmd64k": "dpdk-testpmd io; 65,536 flows (net_pcap copies out of 65,536 preloaded mbufs)",
    }
    peer = {"dpu": "ovs", "ovs": "ovs", "dpu64k": "ovs64k", "ovs64k": "ovs64k"}
    mine = {"ovs": "dpu", "ovs64k": "dpu64k", "dpu": "dpu", "dpu64k": "dpu64k"}
    with_ovs = any(r in rows for r in ("ovs", "ovs64k"))
    lines = [
        f"Machine: {lscpu()}; {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}; "
        f"load average {load:.1f} at start.",
        f"Input: net_pcap infinite_rx (1024 UDP/IPv4 frames, sizes without FCS; the 64k rows "
        f"65,536) -> net_null; one "
        f"worker lcore; {a.reps} x {a.seconds} s per row, alternating programs.",
        "",
        "| what | frame | Mpps median [min-max] | ratio to testpmd |"
        + (" dpu / OVS, same flows |" if with_ovs else ""),
        "|---|---|---|---|" + ("---|" if with_ovs else ""),
    ]
    verdicts = []
    for size in sizes:
        tp = statistics.median(res[("testpmd", size)])
        pipeline = statistics.median(res[("dpu", size)]) if "dpu" in rows else None
        med = lambda w: statistics.median(res[(w, size)]) if w in rows else None
        for what in ("dpu", "ovs", "dpu64k", "ovs64k", "qos", "telemetry", "empty", "csum", "testpmd",
                     "testpmd64k"):
            if what not in rows:
                continue
            xs = res[(what, size)]
            ratio = f"{statistics.median(xs) / tp:.2f}"
            if what in ("qos", "telemetry") and pipeline:
                ratio += f" ({statistics.median(xs) / pipeline:.2f} of the pipeline)"
            line = f"| {label[what]} | {size} B | {fmt(xs)} | {ratio} |"
            if with_ovs:
                pair = what in peer and med(peer[what]) and med(mine[what])
                line += f" {med(mine[what]) / med(peer[what]):.2f} |" if pair else " - |"
            lines.append(line)
        for d, o, goal, what in (("dpu", "ovs", OVS_GOAL, "1024 flows, OVS's EMC hits"),
                                 ("dpu64k", "ovs64k", OVS64K_GOAL, "65,536 flows, OVS's defaults")):
            if med(d) and med(o):
                r = med(d) / med(o)
                verdicts.append(f"Goal at {size} B: dpu/OVS >= {goal} ({what}): "
                                f"{'met' if r >= goal else 'NOT met'} ({r:.2f}).")
        if pipeline is None:
            continue
        r = pipeline / tp
        verdicts.append(f"Goal at {size} B: dpu/testpmd >= {GOALS[size]}: "
                        f"{'met' if r >= GOALS[size] else 'NOT met'} ({r:.2f}).")
        if size == 60 and "qos" in rows:
            q = statistics.median(res[("qos", size)]) / pipeline
            verdicts.append(f"Goal at {size} B: qos/pipeline >= {QOS_GOAL}: "
                            f"{'met' if q >= QOS_GOAL else 'NOT met'} ({q:.2f}).")
        if size == 60 and "telemetry" in rows:
            w = statistics.median(res[("telemetry", size)]) / pipeline
            verdicts.append(f"Goal at {size} B: telemetry/pipeline >= {TELEMETRY_GOAL}: "
                            f"{'met' if w >= TELEMETRY_GOAL else 'NOT met'} ({w:.2f}).")
    lines += ["", *verdicts]
    if pmd:
        lines += ["", "OVS's PMD thread over the window (`dpif-netdev/pmd-stats-show`, medians of the "
                  "runs): shares of the packets received that hit the exact-match cache (EMC), the "
                  "signature-match cache (SMC), the megaflow classifier (dpcls) or went up to the "
                  "OpenFlow tables (upcall); the PMD's busy cycles per packet (rx, caches, "
                  "classifier, actions and tx); datapath flows (megaflows) and the classifier's masks "
                  "(subtables) at the end:", "",
                  "| what | frame | EMC | SMC | megaflow | upcall | cycles/packet "
                  "| subtable lookups per megaflow hit | megaflows | masks |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for size in sizes:
            for what in ("ovs", "ovs64k"):
                if (what, size) not in pmd:
                    continue
                ps = pmd[(what, size)]
                m = lambda k: statistics.median(p.get(k) or 0 for p in ps)
                share = lambda k: f"{100 * statistics.median((p.get(k) or 0) / p['rx'] if p.get('rx') else 0 for p in ps):.1f}%"
                lines.append(f"| {what} | {size} B | {share('emc')} | {share('smc')} | "
                             f"{share('megaflow')} | {share('upcall')} | {m('proc_cycles_per_packet'):.0f} | "
                             f"{m('subtables_per_hit'):.2f} | "
                             f"{m('flows'):.0f} | {m('masks'):.0f} |")
    if a.callgrind:
        lines += ["", "Instructions per packet of the worker's burst path (callgrind, "
                  "`Datapath::process_burst` and its callees: parse, tables, meters, egress, tx "
                  "bursts; not rx), AVX2/scalar paths:", "",
                  "| what | frame | instructions/packet | pipeline / row |", "|---|---|---|---|"]
        for size in sizes:
            counts = {}
            for what, conf in (("dpu", "pipeline"), ("qos", "qos"), ("empty", "empty")):
                if what in rows:
                    counts[what] = callgrind_ipp(conf, size)
                    print(f"run.py: callgrind {size} B {what}: {counts[what]:.1f} instructions/packet",
                          file=sys.stderr, flush=True)
            for what, ipp in counts.items():
                rel = f"{counts['dpu'] / ipp:.3f}" if "dpu" in counts else "-"
                lines.append(f"| {label[what]} | {size} B | {ipp:,.1f} | {rel} |")
    lines += criterion_table()
    publish(lines, "results.md")


if __name__ == "__main__":
    main()
