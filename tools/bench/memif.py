#!/usr/bin/env python3
"""`make bench`: the two-process rows, pktgen and a device under test over net_memif.

    tools/bench/memif.py [--seconds 3] [--reps 3]

Two programs, two processes, one memif link (a filesystem socket): the device under test is the
memif server (started first; testpmd is waited for until it forwards), `pktgen run` the client.
Copy mode: zero-copy (a client option, `zero-copy=yes`) needs no hugepages (EAL
--single-file-segments suffices: without hugepages EAL memory is memfd-backed and shared), and it
works with the appliance as server, but dpdk-testpmd 22.11 as server passes no packet from a
zero-copy client (its rx ring stays full), and the roles cannot swap without the generator's
clock running before its peer connects; so every program of a row runs in copy mode alike.
Every program gets the same EAL memory options (--no-huge -m 512 --single-file-segments), the
same mbuf data room (2176 bytes, 128 of them headroom), 16383 mbufs (cache 256) and bursts of 32.

Cores (the machine has 2 CPUs): the device under test polls on CPU 1 alone (the appliance's
worker lcore, or testpmd's forwarding lcore); its main lcore is on CPU 0. pktgen's lcores are on
CPU 0 too: in row 1 its tx lcore and its main lcore (which receives) share CPU 0; in row 2 its
main lcore sends and receives. So CPU 0 carries the generator's sending and receiving, and the
devices' control threads.

Row 1, forwarding at 60 and 1020 bytes (64 B and 1 KiB with the FCS): a UDP stream (16 flows)
at full rate. The appliance forwards it back out of the port it came in on (an exact table on
eth.dst without entries, miss: forward(0)); testpmd (`--forward-mode=io --port-topology=loop`)
echoes it. pktgen keeps and retries a burst the memif ring does not take, so the link loses
nothing on the way in: the rate is the packets/s the device took (pktgen's tx Mpps, which the
appliance's port rx count confirms). What came back to pktgen is shown as a fraction: pktgen's
receiving shares CPU 0 with its sending, so the devices' tx drops most of what they forward at
64 B, alike for both.

Row 2, AllReduce open loop: collective 1 of 4 workers, 256 f32 lanes per chunk (1 KiB of
payload, 1086-byte UDP frames), 256 slots, f32 sum; pktgen's `[[allreduce]]` in open loop
(`probe = false`), unpaced. The appliance's rate is its folded contributions
(`aggregation.folded` of --stats-json) over pktgen's run time; testpmd io echoes the same
contributions back and its rate is the contributions/s it took (pktgen's tx, over the same time);
the fraction that came back to pktgen is shown too (the appliance answers every round with a
result to each worker, so it also sends one frame per contribution). Payload Gbit/s and
elements/s follow from the appliance's rate (1024 bytes and 256 elements per contribution).

Generator check: per row and size, pktgen alone sends the same traffic into testpmd in
`rxonly` mode over the same link (a peer that frees what it receives, nothing comes back). The
generator's reach is the highest median tx rate pktgen achieved in the row (into rxonly, testpmd
io or the appliance: it did send that fast over this link); a row whose measured rates are not
all below 1/1.2 of it says "generator-bound" instead of claiming a ratio.

Every run stops pktgen (the end of its --duration) before its peer; then the peer is stopped.
Last, the appliance's survival of its peer going away: one appliance process takes two pktgen
runs one after the other; it must still run after the first disconnects and count the second's
packets too.

The runs of a row alternate, REPS times; the table gives median [min-max].
Output: stdout and target/bench/memif.md.
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "target", "bench")
DPU = os.path.join(ROOT, "target", "release", "dpu")
PKTGEN = os.path.join(ROOT, "target", "release", "pktgen")
MEM = ["--no-huge", "-m", "512", "--no-pci", "--no-shconf", "--single-file-segments",
       "--log-level", "*:error"]
DUT_LCORES = "0@0,1@1"
DATA_ROOM = 2176
MBUFS = 16383
RING = 1024
GEN_MARGIN = 1.2
GOAL = 0.8
SIZES = (60, 1020)
CHUNK = 256  # f32 lanes per contribution
WORKERS = 4
SLOTS = 256


def toml_list(xs):
    return "[" + ", ".join(json.dumps(x) for x in xs) + "]"


def vdev(sock, role):
    return f"net_memif0,role={role},socket={sock},socket-abstract=no"


def appliance_conf(d, row):
    t = f"""[eal]
args = {toml_list(MEM + ["--lcores", DUT_LCORES])}
[mempool]
mbufs = {MBUFS}
cache = 256
data_room = {DATA_ROOM}
[dataplane]
burst = 32
[[port]]
name = "m0"
vdev = "{vdev(os.path.join(d, 'm0.sock'), 'server')}"
rx_desc = {RING}
tx_desc = {RING}
mac = "02:00:00:00:00:fe"
ipv4 = "10.0.0.254"
[[lcore]]
id = 1
rx = [{{ port = 0, queue = 0 }}]
"""
    if row == "fwd":
        t += """[[table]]
name = "l2"
key = [{ field = "eth.dst", match = "exact" }]
default_action = "forward(0)"
"""
    else:
        t += f"""[[collective]]
collective_id = 1
op = "sum"
dtype = "f32"
carriage = "udp"
tensor_elements = {CHUNK * SLOTS}
chunk_elements = {CHUNK}
"""
        for r in range(WORKERS):
            t += f"""[[collective.member]]
rank = {r}
ip = "10.0.0.{r + 1}"
udp_port = {50000 + r}
mac = "02:00:00:00:01:{r:02x}"
"""
    path = os.path.join(d, f"appliance-{row}.toml")
    with open(path, "w") as f:
        f.write(t)
    return path


def pktgen_conf(d, row, size, app_conf):
    lcores = "0@0,1@0" if row == "fwd" else "0@0"
    t = f"""[eal]
args = {toml_list(MEM + ["--lcores", lcores])}
[mempool]
mbufs = {MBUFS}
cache = 256
data_room = {DATA_ROOM}
[pktgen]
burst = 32
"""
    if row == "fwd":
        t += "tx_lcores = [1]\n"
    t += f"""[[port]]
name = "m0"
vdev = "{vdev(os.path.join(d, 'm0.sock'), 'client')}"
rx_desc = {RING}
tx_desc = {RING}
"""
    if row == "fwd":
        t += f"""[[stream]]
name = "udp{size}"
port = "m0"
rx_port = "m0"
size = {size}
flows = 16
src_ip = "10.0.0.1"
dst_ip = "10.0.1.1"
src_port = 10000
dst_port = 9
"""
    else:
        t += f"""[[allreduce]]
name = "ar"
port = "m0"
appliance = "{app_conf}"
collective_id = 1
mode = "open"
probe = false
"""
    path = os.path.join(d, f"pktgen-{row}-{size}.toml")
    with open(path, "w") as f:
        f.write(t)
    return path


class Peer:
    """The memif server: the appliance or dpdk-testpmd, started first, stopped last."""

    def __init__(self, d, kind, app_conf=None, stats=None):
        self.kind = kind
        self.sock = os.path.join(d, "m0.sock")
        if os.path.exists(self.sock):
            os.unlink(self.sock)
        if kind == "dpu":
            cmd = [DPU, "-c", app_conf, "--stats-json", stats]
        else:
            mode = kind.split("-", 1)[1]
            cmd = ["dpdk-testpmd", *MEM, "--lcores", DUT_LCORES, "--vdev", vdev(self.sock, "server"),
                   "--", "--nb-cores=1", f"--forward-mode={mode}", "--port-topology=loop",
                   f"--mbuf-size={DATA_ROOM}", f"--total-num-mbufs={MBUFS}", "--mbcache=256",
                   "--burst=32", f"--rxd={RING}", f"--txd={RING}", "--stats-period", "10"]
        self.p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, text=True)
        self.log = []
        self.t = threading.Thread(target=self._drain, daemon=True)
        self.t.start()
        deadline = time.monotonic() + 30
        while not os.path.exists(self.sock):
            if self.p.poll() is not None or time.monotonic() > deadline:
                self.stop()
                sys.exit(f"memif.py: {kind} did not create its memif socket:\n" + "".join(self.log[-30:]))
            time.sleep(0.02)
        # testpmd creates the socket when it probes the vdev, before it configures the port: a
        # client that connects then passes no packet. Wait until it forwards.
        while kind != "dpu" and not any("packet forwarding - ports" in x for x in self.log):
            if self.p.poll() is not None or time.monotonic() > deadline:
                self.stop()
                sys.exit(f"memif.py: {kind} did not start forwarding:\n" + "".join(self.log[-30:]))
            time.sleep(0.02)
        time.sleep(0.2)

    def _drain(self):
        for line in self.p.stdout:
            self.log.append(line)

    def alive(self):
        return self.p.poll() is None

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGINT if self.kind != "dpu" else signal.SIGTERM)
        try:
            self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.t.join(timeout=5)
        return self.p.returncode


def run_pktgen(conf, seconds, js):
    r = subprocess.run([PKTGEN, "run", "-q", "-c", conf, "--duration", str(seconds), "--json", js],
                       cwd=ROOT, capture_output=True, text=True, timeout=seconds + 60)
    if r.returncode not in (0, 3) or not os.path.exists(js):
        sys.exit(f"memif.py: pktgen failed ({r.returncode}): {r.stderr.strip()[-2000:]}")
    with open(js) as f:
        return json.load(f)


def measure(d, row, size, kind, seconds):
    """One run; returns (rate in packets/s, pktgen's tx packets/s, details)."""
    app = appliance_conf(d, "ar")  # pktgen's [[allreduce]] reads the collective from it
    if row == "fwd":
        app = appliance_conf(d, "fwd") if kind == "dpu" else app
    stats = os.path.join(d, "dpu-stats.json")
    if os.path.exists(stats):
        os.unlink(stats)
    peer = Peer(d, kind, app, stats)
    conf = pktgen_conf(d, row, size, appliance_conf(d, "ar"))
    js = os.path.join(d, "pktgen.json")
    p = run_pktgen(conf, seconds, js)
    time.sleep(0.2)
    alive = peer.alive()
    code = peer.stop()
    if not alive or code != 0:
        print(f"memif.py: note: {kind} was not running after pktgen left, or exited {code}",
              file=sys.stderr)
    if row == "fwd":
        s = p["streams"][0]
        tx_pps = s["tx_pps"]
        detail = {"tx_full": s["tx"]["tx_full"], "back": s["rx"]["packets"] / max(1, s["tx"]["packets"])}
        rate = tx_pps
        if kind == "dpu":
            with open(stats) as f:
                st = json.load(f)
            detail["dpu_rx"] = st["ports"][0]["workers"]["rx_packets"]
            detail["sent"] = s["tx"]["packets"]
    else:
        a = p["allreduce"][0]
        secs = p["seconds"]
        tx_pps = a["tx_packets"] / secs
        detail = {"tx_full": a["tx_full"], "back": a["rx_packets"] / max(1, a["tx_packets"]),
                  "right": a.get("right")}
        rate = tx_pps
        if kind == "dpu":
            with open(stats) as f:
                st = json.load(f)
            folded = st["aggregation"]["folded"]
            detail["folded"] = folded
            rate = folded / secs
    detail["peer_ok"] = alive and code == 0
    return rate, tx_pps, detail


def survival(d, seconds):
    """The appliance keeps running and counting when its memif peer goes away."""
    app = appliance_conf(d, "fwd")
    stats = os.path.join(d, "dpu-stats.json")
    peer = Peer(d, "dpu", app, stats)
    conf = pktgen_conf(d, "fwd", 60, appliance_conf(d, "ar"))
    sent = 0
    alive_between = True
    for i in range(2):
        p = run_pktgen(conf, seconds, os.path.join(d, f"survive-{i}.json"))
        sent += p["streams"][0]["tx"]["packets"]
        time.sleep(0.5)
        alive_between = alive_between and peer.alive()
    code = peer.stop()
    rx = 0
    if os.path.exists(stats):
        with open(stats) as f:
            rx = json.load(f)["ports"][0]["workers"]["rx_packets"]
    ok = alive_between and code == 0 and rx == sent
    return ok, f"alive after each disconnect: {alive_between}, exit {code}, counted {rx} of {sent} sent"


def fmt(xs, scale=1e6, digits=2):
    xs = [x / scale for x in xs]
    return f"{statistics.median(xs):.{digits}f} [{min(xs):.{digits}f}-{max(xs):.{digits}f}]"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=int(os.environ.get("MEMIF_SECONDS", 3)))
    ap.add_argument("--reps", type=int, default=int(os.environ.get("MEMIF_REPS", 3)))
    a = ap.parse_args()
    for b in (DPU, PKTGEN):
        if not os.path.exists(b):
            sys.exit(f"memif.py: {b} is missing: cargo build --release first")
    if not shutil.which("dpdk-testpmd"):
        sys.exit("memif.py: dpdk-testpmd is missing (Debian package dpdk)")
    os.makedirs(OUT, exist_ok=True)
    # A short directory: a memif socket path must fit a sockaddr_un (108 bytes).
    d = tempfile.mkdtemp(prefix="dpu-memif-")
    load = os.getloadavg()[0]
    cases = [("fwd", s) for s in SIZES] + [("ar", 1086)]
    res = {}
    for rep in range(a.reps):
        for row, size in cases:
            for kind in ("testpmd-rxonly", "testpmd-io", "dpu"):
                rate, tx, det = measure(d, row, size, kind, a.seconds)
                r = res.setdefault((row, size), {}).setdefault(kind, {"rate": [], "tx": [], "det": []})
                r["rate"].append(rate)
                r["tx"].append(tx)
                r["det"].append(det)
                print(f"memif.py: run {rep + 1}/{a.reps}: {row} {size} B {kind}: "
                      f"{rate / 1e6:.3f} Mpps, pktgen tx {tx / 1e6:.3f} Mpps {det}",
                      file=sys.stderr, flush=True)
    surv_ok, surv = survival(d, 1)
    shutil.rmtree(d, ignore_errors=True)

    def verdict(row, size):
        r = res[(row, size)]
        # What pktgen reached over this link in this row: its tx into testpmd rxonly is not
        # always its best (at 1 KiB it sent more into testpmd io than into rxonly).
        gen = max(statistics.median(r[k]["tx"]) for k in r)
        io = statistics.median(r["testpmd-io"]["rate"])
        dpu = statistics.median(r["dpu"]["rate"])
        bound = max(io, dpu) * GEN_MARGIN > gen
        ratio = dpu / io
        return gen, io, dpu, ratio, bound

    def back(r):
        return f"{100 * statistics.median(x['back'] for x in r['det']):.0f}%"

    crashes = {k: sum(not x["peer_ok"] for r in res.values() for x in r[k]["det"])
               for k in ("testpmd-rxonly", "testpmd-io", "dpu")}
    runs = a.reps * len(cases)
    lines = [
        f"Two processes over net_memif (copy mode: testpmd as memif server passes nothing from a "
        f"zero-copy client; no hugepages; data room {DATA_ROOM} B, "
        f"{MBUFS} mbufs, bursts of 32; load average {load:.1f} at start; {a.reps} x {a.seconds} s, "
        "alternating). CPU 1: the device's polling lcore alone; CPU 0: pktgen's lcores (row 1: "
        "its tx and rx lcores share it; row 2: one lcore sends and receives) and the device's main "
        "lcore. Mpps median [min-max].",
        "",
        "| row | pktgen alone (tx into testpmd rxonly) | testpmd io | back | appliance | back | "
        "appliance / testpmd io |",
        "|---|---|---|---|---|---|---|",
    ]
    goal_line = ""
    for row, size in cases:
        r = res[(row, size)]
        gen, io, dpu, ratio, bound = verdict(row, size)
        if row == "fwd":
            name = f"forwarding {size + 4} B (frames {size} B + FCS): packets/s taken"
        else:
            name = (f"AllReduce open loop, {WORKERS} workers, {CHUNK} f32 lanes, UDP ({size} B): "
                    "contributions/s folded (appliance) or echoed (testpmd)")
        claim = "generator-bound" if bound else f"{ratio:.2f}"
        lines.append(f"| {name} | {fmt(r['testpmd-rxonly']['tx'])} | {fmt(r['testpmd-io']['rate'])} | "
                     f"{back(r['testpmd-io'])} | {fmt(r['dpu']['rate'])} | {back(r['dpu'])} | {claim} |")
        if row == "ar":
            gbps = [x * CHUNK * 4 * 8 / 1e9 for x in r["dpu"]["rate"]]
            eps = [x * CHUNK for x in r["dpu"]["rate"]]
            goal_line = (
                f"AllReduce row, the appliance: {fmt(gbps, 1, 3)} Gbit/s of payload, "
                f"{fmt(eps, 1e9, 4)} G elements/s. Goal appliance >= {GOAL}x testpmd io: "
                + ("not judged (generator-bound: pktgen's highest tx rate in the row is not "
                   f"{GEN_MARGIN}x the rates measured)" if bound else
                   ("met" if ratio >= GOAL else "NOT met") + f" ({ratio:.2f})") + ".")
    lines += ["", goal_line,
              f"Generator-bound: pktgen's highest median tx rate in the row (its reach) is below "
              f"{GEN_MARGIN}x testpmd io's or the appliance's rate. "
              "'back': the fraction of what pktgen sent that came back to it (its receiving shares "
              "CPU 0 with its sending). Peers that failed to stop cleanly (not running once "
              "pktgen had stopped and left, or a non-zero exit): "
              + ", ".join(f"{k} {v} of {runs}" for k, v in crashes.items()) + ".",
              f"The appliance when its memif peer goes away (two pktgen runs, one after the other): "
              f"{'survives and keeps counting' if surv_ok else 'FAILED'} ({surv})."]
    text = "\n".join(lines) + "\n"
    with open(os.path.join(OUT, "memif.md"), "w") as f:
        f.write(text)
    print(text, end="")
    if not surv_ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
