#!/usr/bin/env python3
"""`make bench`: the two-process rows, pktgen and a device under test over net_memif.

    tools/bench/memif.py [--seconds 2] [--reps 1] [--rows 'fwd*,open-4w-*'] [--zero-copy] [--shared-results] [--list]
    tools/bench/memif.py --plots DIR [--seconds 3]      (`make plots`)

Two programs, two processes, one memif link (a filesystem socket). By default the device under
test is the memif server (started first; testpmd is waited for until it forwards) and `pktgen
run` the client, in copy mode. Zero-copy (`zero-copy=yes`, a client option) needs no hugepages
(EAL --single-file-segments suffices: without hugepages EAL memory is memfd-backed and shared),
but dpdk-testpmd 22.11 as server passes no packet from a zero-copy client, so the default rows
run every program in copy mode alike. `--zero-copy` swaps the roles: pktgen is the server
(`[pktgen] link_wait_ms`: its clock starts once the link is up) and the device the zero-copy
client (output target/bench/memif-zc.md). A memif client connects only when its port starts (the
appliance restarts its client port until a server answers; testpmd does not). testpmd may die with SIGSEGV when
its peer leaves (the memif PMD unmaps the rings under its polling lcore); the appliance and
pktgen wait for their lcores' grace period before any such unmap (dataplane/src/runtime/dpdk/rcu.rs).
Every program gets the same EAL memory options (--no-huge -m 512 --single-file-segments), the
same mbuf data room (2176 bytes, 128 of them headroom; 4480 in the rows of 4 KiB chunks, with
memif buffers of 8192 bytes on both sides), 16383 mbufs (cache 256) and bursts of 32.

Cores (the machine has 2 CPUs): the device under test polls on CPU 1 alone (the appliance's
worker lcore, or testpmd's forwarding lcore); its main lcore is on CPU 0. pktgen's lcores are on
CPU 0 too: in the forwarding rows its tx lcore and its main lcore (which receives) share CPU 0;
in the AllReduce rows its main lcore sends and receives. So CPU 0 carries the generator's
sending and receiving, and the devices' control threads.

Rows (`--list` names them; `--rows` takes comma-separated fnmatch patterns of their ids, default
all; the whole default run takes about 5 minutes):

- fwd64, fwd1024: forwarding at 60 and 1020 bytes (64 B and 1 KiB with the FCS), a UDP stream
  (16 flows) at full rate. The appliance forwards it back out of the port it came in on (an exact
  table on eth.dst without entries, miss: forward(0)); testpmd (`--forward-mode=io
  --port-topology=loop`) echoes it. pktgen keeps and retries a burst the memif ring does not
  take, so the link loses nothing on the way in: the rate is the packets/s the device took
  (pktgen's tx Mpps, which the appliance's port rx count confirms). What came back to pktgen is
  shown as a fraction: pktgen's receiving shares CPU 0 with its sending.
- open-Ww-L-C: AllReduce in open loop, collective 1 of W workers (4, 16), L f32 lanes per chunk
  (256, 1024: 1 KiB or 4 KiB of payload), carriage C (udp, rocev2), 256 slots, f32 sum; pktgen's
  `[[allreduce]]` in open loop (`probe = false`), unpaced. The appliance's rate is its folded
  contributions (`aggregation.folded` of --stats-json) over pktgen's run time; testpmd io echoes
  the same contributions back and its rate is the contributions/s it took (pktgen's tx, over the
  same time); the fraction that came back to pktgen is shown too (the appliance answers every
  round with a result to each worker, so it also sends one frame per contribution). Payload
  Gbit/s follow from the appliance's rate. Goal: appliance >= 0.8x testpmd io.
- closed-Ww-L-C: the same collective in closed loop (`mode = "closed"`, 16 chunks outstanding per
  worker, probes first: what real workers see), the appliance alone: testpmd cannot answer a
  contribution with its result, so there is nothing to put beside it. Reported from pktgen's
  summary: slot rounds/s (contributions/s over the workers), contributions/s whose right result
  came back, payload Gbit/s, latency p50 and p99 (a round's first send to its result), resends.

Generator check, every row: pktgen alone sends the row's traffic into testpmd in `rxonly` mode
over the same link (a peer that frees what it receives, nothing comes back; a closed-loop row
sends its traffic in open loop there, unless its open-loop twin runs too, whose runs then
serve). The generator's reach is the highest median tx rate pktgen achieved with that traffic
(into rxonly, testpmd io or the appliance: it did send that fast over this link); a row whose
measured rates are not all below 1/1.2 of it says "generator-bound" instead of claiming a ratio
(a closed-loop row: instead of "appliance-bound or loop-bound"). rxonly does not show what
receiving costs pktgen: the appliance's results (written by another core, parsed, checksummed
and compared with the expected sums) cost it more than testpmd's echoes (its own frames, which
it only counts). So each run also says who held it: pktgen counts the polls in which the ring
refused part of a burst; a run with fewer refusals than one per burst sent was held by pktgen
(it seldom waited for the device), and an open-loop row most of whose appliance runs pktgen
held says "generator-bound" too. The appliance's busy share of the run (its busy cycles over
pktgen's sending time) is shown beside it.

Cycles per packet, every device run: the device's busy TSC cycles (its non-empty polls, the rx
call included) over the packets it received: testpmd's from `--record-core-cycles` (its total
over what pktgen sent: its own rx count can go negative across a zero-copy reconnection), the
appliance's from its final stats (`loops`). What the device's own work costs, whoever held the
rate. In copy mode testpmd, the memif server, has zeroed its port counters by the time it stops
(its client left) and prints no cycles: its column shows "-".

Every run stops pktgen (the end of its --duration) before its peer; then the peer is stopped.
Last, the appliance's survival of its peer going away: one appliance process takes two pktgen
runs one after the other; it must still run after the first disconnects and count the second's
packets too.

The runs of a row follow one another, and the rows alternate, REPS times; the tables give median
[min-max].
Output: stdout and target/bench/memif.md.

--plots DIR: the forwarding row through the appliance once per frame size (PLOT_SIZES, 64 to 1518 bytes with
the FCS), each pktgen summary kept as DIR/fwd-SIZE.json, then tools/plot_pktgen.py draws
DIR/throughput.png (packets/s and Gbit/s the appliance took, pktgen's tx: what comes back is
bounded by pktgen's receiving on the CPU it shares with its sending) and DIR/latency_cdf.png (the
latency of what came back, at full offered load: queueing in the memif rings included).
"""

import argparse
import atexit
import fnmatch
import json
import os
import re
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
# Cycles CPU 1 spends reading 1 KiB that CPU 0 wrote (dataplane/examples/cross_core.rs, `probe`):
# a guest's two vCPUs share a last-level cache in some runs and not in others, which moves this
# about 3.5x and every memif rate with it; each run records it. Built by `make bench`.
PROBE = os.path.join(ROOT, "target", "release", "examples", "cross_core")
# A probe at or above this many cycles: the vCPUs did not share a cache in that run.
PROBE_SLOW = 150
MEM = ["--no-huge", "-m", "512", "--no-pci", "--no-shconf", "--single-file-segments",
       "--log-level", "*:error"]
DUT_LCORES = "0@0,1@1"
DATA_ROOM = 2176
MBUFS = 16383
RING = 1024
BURST = 32  # every program's burst, pktgen's tx bursts included
GEN_MARGIN = 1.2
# A device run in which pktgen found the ring full at least this often per burst it sent was held
# by the device (or the link), not by pktgen.
REFUSALS_HELD = 1.0
# ... or the device was this busy over pktgen's sending time (the appliance's busy share): near
# saturation pktgen's ring may be refused less than once per burst, yet the device sets the rate.
BUSY_HELD = 0.9
GOAL = 0.8
SIZES = (60, 1020)
# Frame lengths without the FCS of the --plots sweep: 64 to 1518 bytes on the wire (net_memif's
# largest frame at its default MTU of 1500).
PLOT_SIZES = (60, 124, 252, 508, 1020, 1514)
PLOT_SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "plot_pktgen.py")
# The rows. Forwarding: frame length without the FCS. AllReduce: workers x f32 lanes per chunk x
# carriage, open loop (beside testpmd io) and closed loop (the appliance alone: testpmd cannot
# answer a contribution with its result).
WORKER_COUNTS = (4, 16)
LANE_COUNTS = (256, 1024)
CARRIAGES = ("udp", "rocev2")
SLOTS = 256
WINDOW = 16  # closed loop: chunks outstanding per worker
# Headers of a contribution (bytes, no FCS): Ethernet 14, IPv4 20, UDP 8, gradient header 20;
# RoCEv2 adds BTH 12, DETH 8 and the ICRC 4 (spec sections 1 and 2).
HEADERS = {"udp": 62, "rocev2": 86}
# A 4 KiB chunk's frame (4158 or 4182 bytes) needs a data room above 2176: every program of such a
# row gets this one (4352 bytes of data after the 128-byte headroom).
DATA_ROOM_BIG = 4480
BIG_BSIZE = 8192


class Row:
    """One row of the table: `kind` is "fwd", "open" or "closed"."""

    def __init__(self, kind, size=None, workers=None, lanes=None, carriage=None):
        self.kind, self.workers, self.lanes, self.carriage = kind, workers, lanes, carriage
        self.size = size if kind == "fwd" else lanes * 4 + HEADERS[carriage]
        self.data_room = DATA_ROOM if self.size + 128 <= DATA_ROOM else DATA_ROOM_BIG
        if kind == "fwd":
            self.id = f"fwd{size + 4}"
        else:
            self.id = f"{kind}-{workers}w-{lanes}-{carriage}"

    def traffic(self):
        """The id of the open-loop row with this row's traffic (itself unless closed)."""
        return self.id.replace("closed-", "open-", 1)

    def name(self):
        if self.kind == "fwd":
            return f"forwarding {self.size + 4} B"
        loop = "open" if self.kind == "open" else "closed"
        return (f"AllReduce {loop} loop, {self.workers} workers x {self.lanes} f32 lanes, "
                f"{'RoCEv2' if self.carriage == 'rocev2' else 'UDP'} ({self.size} B)")


DEFAULT_ROWS = "*"
ROWS = ([Row("fwd", s) for s in SIZES]
        + [Row(k, workers=w, lanes=n, carriage=c) for k in ("open", "closed") for w in WORKER_COUNTS
           for n in LANE_COUNTS for c in CARRIAGES])


def toml_list(xs):
    return "[" + ", ".join(json.dumps(x) for x in xs) + "]"


# --shared-results: the open-loop AllReduce rows also run the appliance with
# `zero_copy_results = true` ("dpu-shared"), beside its default (copy) run.
SHARED = False

# --zero-copy: pktgen is the memif server and the device the zero-copy client; else the device is
# the server and pktgen the client, both in copy mode.
ZC = False


def vdev(sock, who, data_room):
    """The memif vdev of `who` ("pktgen" or the device). Frames above net_memif's 2048-byte
    buffer (`bsize`) are chained over several; with 4 KiB frames at full rate DPDK 22.11 in copy
    mode then mangled frames (the appliance counted more frames than pktgen sent, half of them
    stale rounds, some malformed IPv4), so the rows with a larger data room give both sides
    buffers of BIG_BSIZE bytes: one frame, one buffer (then every frame sent was folded)."""
    role = "server" if (who == "pktgen") == ZC else "client"
    zc = ",zero-copy=yes" if ZC and role == "client" else ""
    bsize = f",bsize={BIG_BSIZE}" if data_room > DATA_ROOM else ""
    return f"net_memif0,role={role},socket={sock},socket-abstract=no{zc}{bsize}"


def eal_and_mempool(lcores, data_room):
    """The [eal] and [mempool] tables every program of a run shares."""
    return f"""[eal]
args = {toml_list(MEM + ["--lcores", lcores])}
[mempool]
mbufs = {MBUFS}
cache = 256
data_room = {data_room}
"""


def appliance_conf(d, row, shared=False):
    """The appliance's config for `row`: forwarding (an exact table without entries, miss
    forward(0)) or collective 1 of the row's workers, lanes and carriage; `shared`: with
    `zero_copy_results = true`."""
    t = eal_and_mempool(DUT_LCORES, row.data_room) + f"""[dataplane]
burst = {BURST}
{'zero_copy_results = true' if shared else ''}
[[port]]
name = "m0"
vdev = "{vdev(os.path.join(d, 'm0.sock'), 'device', row.data_room)}"
rx_desc = {RING}
tx_desc = {RING}
mac = "02:00:00:00:00:fe"
ipv4 = "10.0.0.254"
[[lcore]]
id = 1
rx = [{{ port = 0, queue = 0 }}]
"""
    if row.kind == "fwd":
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
carriage = "{row.carriage}"
tensor_elements = {row.lanes * SLOTS}
chunk_elements = {row.lanes}
"""
        for r in range(row.workers):
            t += f"""[[collective.member]]
rank = {r}
ip = "10.0.0.{r + 1}"
mac = "02:00:00:00:01:{r:02x}"
"""
            t += f"udp_port = {50000 + r}\n" if row.carriage == "udp" else f"qpn = {0x100 + r}\nqkey = 0x11111111\n"
    path = os.path.join(d, f"appliance-{row.id}.toml")
    with open(path, "w") as f:
        f.write(t)
    return path


def pktgen_conf(d, row, app_conf, open_loop):
    """pktgen's config for `row`: the forwarding stream, or the row's workers in open loop
    (unpaced, no probes: testpmd can echo it) or closed loop (probes first, WINDOW chunks
    outstanding per worker)."""
    lcores = "0@0,1@0" if row.kind == "fwd" else "0@0"
    t = eal_and_mempool(lcores, row.data_room) + f"""[pktgen]
burst = {BURST}
link_wait_ms = 20000
"""
    if row.kind == "fwd":
        t += "tx_lcores = [1]\n"
    t += f"""[[port]]
name = "m0"
vdev = "{vdev(os.path.join(d, 'm0.sock'), 'pktgen', row.data_room)}"
rx_desc = {RING}
tx_desc = {RING}
"""
    if row.kind == "fwd":
        t += f"""[[stream]]
name = "udp{row.size}"
port = "m0"
rx_port = "m0"
size = {row.size}
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
"""
        t += 'mode = "open"\nprobe = false\n' if open_loop else f'mode = "closed"\nwindow = {WINDOW}\n'
    path = os.path.join(d, f"pktgen-{row.id}{'-open' if open_loop else ''}.toml")
    with open(path, "w") as f:
        f.write(t)
    return path


STARTED = []


@atexit.register
def _stop_all():
    """No process of a run outlives the script, whatever ends it."""
    for proc in STARTED:
        if proc.p.poll() is None:
            proc.p.send_signal(signal.SIGINT)
            try:
                proc.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.p.kill()


class Proc:
    """A process whose output is kept (read by a thread, so that it never blocks)."""

    def __init__(self, cmd):
        STARTED.append(self)
        self.p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, text=True)
        self.log = []
        self.t = threading.Thread(target=self._drain, daemon=True)
        self.t.start()

    def _drain(self):
        for line in self.p.stdout:
            self.log.append(line)

    def alive(self):
        return self.p.poll() is None

    def wait(self, timeout):
        try:
            self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.t.join(timeout=5)
        return self.p.returncode

    def stop(self, sig):
        if self.p.poll() is None:
            self.p.send_signal(sig)
        return self.wait(30)


def wait_socket(d, who, proc, also=None):
    """Until the memif server `proc` has created its socket (and `also` is in its output)."""
    sock = os.path.join(d, "m0.sock")
    deadline = time.monotonic() + 30
    while not os.path.exists(sock) or (also and not any(also in x for x in proc.log)):
        if not proc.alive() or time.monotonic() > deadline:
            proc.stop(signal.SIGINT)
            sys.exit(f"memif.py: {who} did not create its memif socket or start:\n"
                     + "".join(proc.log[-30:]))
        time.sleep(0.02)


def start_pktgen(d, conf, seconds, js):
    """pktgen; as the memif server it returns once its socket exists. It starts sending and
    its clock once the link is up ([pktgen] link_wait_ms)."""
    sock = os.path.join(d, "m0.sock")
    if ZC and os.path.exists(sock):
        os.unlink(sock)
    g = Proc([PKTGEN, "run", "-q", "-c", conf, "--duration", str(seconds), "--json", js])
    if not ZC:
        return g
    deadline = time.monotonic() + 30
    while not os.path.exists(sock):
        if not g.alive() or time.monotonic() > deadline:
            g.stop(signal.SIGINT)
            sys.exit("memif.py: pktgen did not create its memif socket:\n" + "".join(g.log[-30:]))
        time.sleep(0.02)
    # The socket appears when the vdev is probed; let pktgen start its port before a client
    # connects.
    time.sleep(1.0)
    return g


def start_device(d, kind, app_conf, stats, data_room):
    """The device under test; as the memif server it returns once it forwards."""
    sock = os.path.join(d, "m0.sock")
    if not ZC and os.path.exists(sock):
        os.unlink(sock)
    dev = Proc(device_cmd(sock, kind, app_conf, stats, data_room))
    if not ZC:
        # testpmd creates the socket when it probes the vdev, before it configures the port:
        # a client that connects then passes no packet. Wait until it forwards.
        wait_socket(d, kind, dev, None if kind.startswith("dpu") else "packet forwarding - ports")
        time.sleep(0.3)
    return dev


def device_cmd(sock, kind, app_conf, stats, data_room):
    if kind.startswith("dpu"):
        return [DPU, "-c", app_conf, "--stats-json", stats]
    mode = kind.split("-", 1)[1]
    return (["dpdk-testpmd", *MEM, "--lcores", DUT_LCORES, "--vdev", vdev(sock, "device", data_room),
                 "--", "--nb-cores=1", f"--forward-mode={mode}", "--port-topology=loop",
                 f"--mbuf-size={data_room}", f"--total-num-mbufs={MBUFS}", "--mbcache=256",
                 f"--burst={BURST}", f"--rxd={RING}", f"--txd={RING}", "--stats-period", "10",
                 "--record-core-cycles"])


def start_pair(d, kind, app, stats, conf, seconds, js, data_room):
    """The memif server first, then the client; returns (pktgen, device)."""
    if ZC:
        g = start_pktgen(d, conf, seconds, js)
        return g, start_device(d, kind, app, stats, data_room)
    dev = start_device(d, kind, app, stats, data_room)
    return start_pktgen(d, conf, seconds, js), dev


def finish_pktgen(g, js, seconds, must=True):
    """pktgen's summary (its JSON, with its exit status as `_exit`). pktgen writes the JSON
    before it closes its ports: a run whose pktgen then died by a signal (in a PMD's teardown)
    is kept, and counted among the programs that did not stop cleanly."""
    code = g.wait(seconds + 60)
    if not os.path.exists(js) or (code not in (0, 3) and code >= 0):
        if not must:
            return None
        sys.exit(f"memif.py: pktgen failed ({code}):\n" + "".join(g.log[-30:]))
    if code < 0:
        print(f"memif.py: note: pktgen died by signal {-code} after writing its summary", file=sys.stderr)
    with open(js) as f:
        p = json.load(f)
    p["_exit"] = code
    return p


def measure(d, row, kind, seconds):
    """One run of `row` against `kind` (testpmd-rxonly, testpmd-io or dpu); returns (rate, pktgen's
    tx packets/s, details). The rate: forwarding, the packets/s the device took (pktgen's tx);
    open loop, contributions/s folded (the appliance's aggregation.folded) or taken (testpmd);
    closed loop, contributions/s completed (a result came back and was right). Into testpmd
    rxonly a closed-loop row sends its traffic in open loop (the generator's reach with it)."""
    ar = appliance_conf(d, row, kind == "dpu-shared")  # pktgen's [[allreduce]] reads the collective from it
    is_dpu = kind.startswith("dpu")
    open_loop = row.kind == "open" or not is_dpu
    stats = os.path.join(d, "dpu-stats.json")
    if os.path.exists(stats):
        os.unlink(stats)
    js = os.path.join(d, "pktgen.json")
    if os.path.exists(js):
        os.unlink(js)
    conf = pktgen_conf(d, row, ar, open_loop)
    g, dev = start_pair(d, kind, ar, stats, conf, seconds, js, row.data_room)
    p = finish_pktgen(g, js, seconds)
    time.sleep(0.3)
    alive = dev.alive()
    code = dev.stop(signal.SIGTERM if is_dpu else signal.SIGINT)
    if not alive or code != 0:
        print(f"memif.py: note: {kind} was not running after pktgen left, or exited {code}",
              file=sys.stderr)
    st = None
    if is_dpu and os.path.exists(stats):
        with open(stats) as f:
            st = json.load(f)
    if row.kind == "fwd":
        s = p["streams"][0]
        tx_pps = s["tx_pps"]
        detail = {"tx_full": s["tx"]["tx_full"], "back": s["rx"]["packets"] / max(1, s["tx"]["packets"])}
        rate = tx_pps
        if st is not None:
            detail["dpu_rx"] = st["ports"][0]["workers"]["rx_packets"]
            detail["sent"] = s["tx"]["packets"]
    else:
        a = p["allreduce"][0]
        # Open loop: pktgen's run time (its sending); closed loop: the first contribution to the
        # last result (the summary's seconds).
        secs = p["seconds"] if open_loop else a["seconds"]
        tx_pps = a["tx_packets"] / max(secs, 1e-9)
        detail = {"tx_full": a["tx_full"], "back": a["rx_packets"] / max(1, a["tx_packets"]),
                  "right": a["right"], "wrong": a["wrong"]}
        rate = tx_pps
        if not open_loop:
            lat = a.get("latency") or {}
            rate = a["contributions_per_s"]
            detail.update(p50=lat.get("p50_us"), p99=lat.get("p99_us"),
                          retx=a["retransmissions"], stale=a["stale_results"])
        elif is_dpu and st is None:
            detail["stats_lost"] = True  # the appliance died: pktgen's tx stands in
        elif is_dpu:
            folded = st["aggregation"]["folded"]
            detail["folded"] = folded
            detail["shared"] = st["aggregation"].get("shared_results", 0)
            rate = folded / secs
    detail["peer_ok"] = alive and code == 0
    detail["pktgen_ok"] = p["_exit"] in (0, 3)
    sent = p["streams"][0]["tx"]["packets"] if row.kind == "fwd" else p["allreduce"][0]["tx_packets"]
    # The device's busy TSC cycles per packet it received (testpmd: --record-core-cycles, its
    # non-empty bursts; the appliance: its workers' bursts, the rx call included alike).
    if st is not None:
        loops = st.get("loops") or []
        pk = sum(x["rx_packets"] for x in loops)
        if pk and all(x["bursts"] for x in loops):
            detail["cycles"] = sum(x["burst_cycles"] for x in loops) / pk
            # Its busy share of pktgen's sending time (it runs a little longer: before and
            # after pktgen's traffic it only idles).
            if st.get("tsc_hz"):
                detail["busy"] = sum(x["burst_cycles"] for x in loops) / (st["tsc_hz"] * max(p["seconds"], 1e-9))
    elif not is_dpu:
        # testpmd's own cycles/packet divides by its port's rx count, which a zero-copy memif
        # client's reconnection can leave negative; it took what pktgen sent (nothing is lost
        # inbound), so divide by that.
        m = [re.search(r"total cycles=([0-9]+)", x) for x in dev.log]
        m = [x for x in m if x]
        if m:
            detail["cycles"] = int(m[-1].group(1)) / max(1, sent)
    # Who held the rate: pktgen counts the polls in which the ring refused part of a burst. A
    # device that is the bound refuses again and again (several times per burst sent); one
    # that is not leaves pktgen's own work the bound.
    detail["refusals_per_burst"] = detail["tx_full"] / max(1.0, sent / BURST)
    return rate, tx_pps, detail


def held_by_device(det):
    """Whether the device, not pktgen, set a run's rate: pktgen found its ring full at least
    REFUSALS_HELD times per burst it sent, or the device (the appliance, which reports its busy
    cycles) was busy at least BUSY_HELD of pktgen's sending time. In the other runs pktgen's own
    work (its sending, and receiving what comes back) was the bound."""
    return det["refusals_per_burst"] >= REFUSALS_HELD or (det.get("busy") or 0) >= BUSY_HELD


def mode_of(probes):
    """A run's mode from the probes before and after it: "fast" or "slow" when both agree,
    "mixed" when the guest changed modes during the run, None without probes."""
    if any(p is None for p in probes):
        return None
    slow = [p >= PROBE_SLOW for p in probes]
    return "slow" if all(slow) else "fast" if not any(slow) else "mixed"


def probe():
    """CPU 1's TSC cycles to read 1 KiB CPU 0 wrote (before or after a run); None without the
    probe."""
    if not os.path.exists(PROBE):
        return None
    try:
        out = subprocess.run([PROBE, "probe"], capture_output=True, text=True, timeout=30, check=True)
        return float(out.stdout.split()[0])
    except (subprocess.SubprocessError, ValueError, IndexError):
        return None


def survival(d, seconds):
    """The appliance keeps running and counting when its memif peer goes away: one appliance,
    two pktgen sessions one after the other (the memif client reconnects to the second)."""
    row = Row("fwd", 60)
    app = appliance_conf(d, row)
    stats = os.path.join(d, "dpu-stats.json")
    if os.path.exists(stats):
        os.unlink(stats)
    conf = pktgen_conf(d, row, app, True)
    sent, dev, alive_between = [], None, True
    for i in range(2):
        js = os.path.join(d, f"survive-{i}.json")
        if dev is None:
            g, dev = start_pair(d, "dpu", app, stats, conf, seconds, js, row.data_room)
        else:
            g = start_pktgen(d, conf, seconds, js)
        p = finish_pktgen(g, js, seconds, must=False)
        if p is None:
            why = "".join(g.log[-3:]).strip()
            sent.append(0)
            print(f"memif.py: survival: pktgen session {i + 1} failed: {why}", file=sys.stderr)
        else:
            sent.append(p["streams"][0]["tx"]["packets"])
        time.sleep(0.5)
        alive_between = alive_between and dev.alive()
    code = dev.stop(signal.SIGTERM)
    rx, leftover = 0, None
    if os.path.exists(stats):
        with open(stats) as f:
            st = json.load(f)
        rx = st["ports"][0]["workers"]["rx_packets"]
        leftover = st.get("mbufs_in_use_after")
    ok = alive_between and code == 0 and rx == sum(sent) and sent[1] > 0
    return ok, (f"alive after each disconnect: {alive_between}, exit {code}, counted {rx} of "
                f"{sent[0]} + {sent[1]} sent; mbufs in use after shutdown: {leftover}")


def plots(d, out, seconds):
    """The --plots sweep: one appliance run per size, the summaries kept, then the pictures."""
    os.makedirs(out, exist_ok=True)
    files = []
    for size in PLOT_SIZES:
        rate, _, det = measure(d, Row("fwd", size), "dpu", seconds)
        dst = os.path.join(out, f"fwd-{size}.json")
        shutil.copyfile(os.path.join(d, "pktgen.json"), dst)
        files.append(dst)
        print(f"memif.py: plots: {size} B: the appliance took {rate / 1e6:.3f} Mpps {det}", file=sys.stderr, flush=True)
    title = (f"pktgen -> appliance -> pktgen over net_memif (copy mode), one core each, {seconds} s per size")
    r = subprocess.run(["/usr/bin/python3", PLOT_SCRIPT, *files, "--out", out, "--side", "tx", "--title", title])
    if r.returncode != 0:
        sys.exit(f"memif.py: {PLOT_SCRIPT} failed ({r.returncode})")


def probe_line(res):
    """The footer line on the cross-core probes of a table's runs, or None without them."""
    dets = [x for r in res.values() for v in r.values() for x in v["det"] if x.get("mode")]
    if not dets:
        return None
    xs = [p for x in dets for p in x["xfer"]]
    n = {m: sum(x["mode"] == m for x in dets) for m in ("fast", "slow", "mixed")}
    return (f"Cross-core probe before and after each run (CPU 1's TSC cycles to read 1 KiB that CPU 0 "
            f"wrote, `cross_core probe`): median {med(xs):.0f} [{min(xs):.0f}-{max(xs):.0f}]; runs in the "
            f"fast mode (both probes under {PROBE_SLOW}) {n['fast']}, in the slow mode {n['slow']}, "
            f"changing modes {n['mixed']}, of {len(dets)}. The guest's vCPUs move lines between them "
            "3-6x slower in the slow mode (consistent with two core complexes instead of one), "
            "and every rate with it: runs compare within a mode (the table by mode).")


def fmt(xs, scale=1e6, digits=2):
    xs = [x / scale for x in xs]
    return f"{statistics.median(xs):.{digits}f} [{min(xs):.{digits}f}-{max(xs):.{digits}f}]"


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else float("nan")


def select(patterns):
    """The rows whose id matches one of the comma-separated fnmatch patterns."""
    pats = [p.strip() for p in patterns.split(",") if p.strip()]
    rows = [r for r in ROWS if any(fnmatch.fnmatch(r.id, p) for p in pats)]
    if not rows:
        sys.exit(f"memif.py: no row matches --rows {patterns!r}; rows: "
                 + ", ".join(r.id for r in ROWS))
    return rows


def kinds_of(row, ids):
    """The runs of a row: the generator check (testpmd rxonly), testpmd io and the appliance; a
    closed-loop row, the appliance alone, and the generator check unless its open-loop twin
    (the same traffic) runs too."""
    if row.kind != "closed":
        return ("testpmd-rxonly", "testpmd-io", "dpu") + (("dpu-shared",) if SHARED and row.kind == "open" else ())
    return ("dpu",) if row.traffic() in ids else ("testpmd-rxonly", "dpu")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=int(os.environ.get("MEMIF_SECONDS", 2)))
    ap.add_argument("--reps", type=int, default=int(os.environ.get("MEMIF_REPS", 1)))
    ap.add_argument("--rows", default=os.environ.get("MEMIF_ROWS", DEFAULT_ROWS),
                    help="comma-separated patterns of row ids (fnmatch), e.g. 'fwd*,open-4w-*'; "
                    "--list names them")
    ap.add_argument("--list", action="store_true", help="list the rows and exit")
    ap.add_argument("--zero-copy", action="store_true",
                    help="pktgen the memif server, the device the zero-copy client")
    ap.add_argument("--shared-results", action="store_true",
                    help="open-loop AllReduce rows: also the appliance with zero_copy_results = true")
    ap.add_argument("--plots", metavar="DIR", help="the frame-size sweep through the appliance, and its plots, into DIR")
    a = ap.parse_args()
    if a.list:
        for r in ROWS:
            print(f"{r.id:24} {r.name()}")
        return
    global ZC, SHARED
    ZC = a.zero_copy
    SHARED = a.shared_results
    for b in (DPU, PKTGEN):
        if not os.path.exists(b):
            sys.exit(f"memif.py: {b} is missing: cargo build --release first")
    if not shutil.which("dpdk-testpmd"):
        sys.exit("memif.py: dpdk-testpmd is missing (Debian package dpdk)")
    os.makedirs(OUT, exist_ok=True)
    # A short directory: a memif socket path must fit a sockaddr_un (108 bytes).
    d = tempfile.mkdtemp(prefix="dpu-memif-")
    if a.plots:
        plots(d, a.plots, a.seconds)
        shutil.rmtree(d, ignore_errors=True)
        return
    rows = select(a.rows)
    ids = {r.id for r in rows}
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    res = {}
    for rep in range(a.reps):
        for row in rows:
            for kind in kinds_of(row, ids):
                before = probe()
                rate, tx, det = measure(d, row, kind, a.seconds)
                det["xfer"] = [before, probe()]
                det["mode"] = mode_of(det["xfer"])
                r = res.setdefault(row.id, {}).setdefault(kind, {"rate": [], "tx": [], "det": []})
                r["rate"].append(rate)
                r["tx"].append(tx)
                r["det"].append(det)
                print(f"memif.py: run {rep + 1}/{a.reps}: {row.id} {kind}: "
                      f"{rate / 1e6:.3f} M/s, pktgen tx {tx / 1e6:.3f} Mpps {det}",
                      file=sys.stderr, flush=True)
    surv_ok, surv = survival(d, 2)
    shutil.rmtree(d, ignore_errors=True)
    elapsed = time.monotonic() - t0

    def reach(row):
        """pktgen's reach with this row's traffic: its highest median tx rate over the row's
        runs (into rxonly, testpmd io or the appliance: it did send that fast over this link);
        a closed-loop row's is its open-loop twin's, or its own run into rxonly."""
        r = res.get(row.traffic()) if row.kind == "closed" and row.traffic() in ids else res[row.id]
        kinds = [k for k in r if row.kind != "closed" or row.traffic() in ids or k != "dpu"]
        return max(med(r[k]["tx"]) for k in kinds)

    def back(r):
        return f"{100 * med(x['back'] for x in r['det']):.0f}%"

    def cycles(r):
        xs = [x["cycles"] for x in r["det"] if x.get("cycles")]
        return f"{med(xs):.0f}" if xs else "-"

    def busy(r):
        xs = [x["busy"] for x in r["det"] if x.get("busy")]
        return f"{100 * med(xs):.0f}%" if xs else "-"

    def held(r):
        """How many of a device's runs it held the rate itself ([`held_by_device`])."""
        return sum(held_by_device(x) for x in r["det"]), len(r["det"])

    runs = sum(len(v["det"]) for r in res.values() for v in r.values())
    crashes = {k: sum(not x["peer_ok"] for r in res.values() for x in r.get(k, {"det": []})["det"])
               for k in ("testpmd-rxonly", "testpmd-io", "dpu", "dpu-shared")}
    crashes["pktgen"] = sum(not x["pktgen_ok"] for r in res.values() for v in r.values() for x in v["det"])
    wrong = sum(x.get("wrong") or 0 for r in res.values() for k in ("dpu", "dpu-shared")
                for x in r.get(k, {"det": []})["det"])
    lines = [
        "Two processes over net_memif ("
        + ("zero-copy: pktgen the memif server, the device the zero-copy client"
           if ZC else "copy mode: the device the memif server, pktgen the client")
        + f"; no hugepages; data room {DATA_ROOM} B ({DATA_ROOM_BIG} B in the 1024-lane rows, "
        f"every program of a row alike), {MBUFS} mbufs, bursts of 32; load average {load:.1f} at "
        f"start; {a.reps} x {a.seconds} s per run, alternating; {elapsed:.0f} s in all). CPU 1: the "
        "device's polling lcore alone; CPU 0: pktgen's lcores (forwarding: its tx and rx lcores "
        "share it; AllReduce: one lcore sends and receives) and the device's main lcore. "
        "M/s median [min-max].",
    ]
    opened = [r for r in rows if r.kind != "closed"]
    goals = []
    if opened:
        lines += [
            "",
            "Open loop, beside testpmd io on the same traffic: forwarding, packets/s taken; "
            "AllReduce, contributions/s folded (appliance) or echoed (testpmd).",
            "",
            "| row | pktgen alone (tx into testpmd rxonly) | testpmd io | back | appliance | back | "
            "appliance payload Gbit/s | runs the appliance held | appliance busy | cycles/pkt testpmd io | "
            "cycles/pkt appliance | appliance / testpmd io |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for row in opened:
            r = res[row.id]
            gen, io, dpu = reach(row), med(r["testpmd-io"]["rate"]), med(r["dpu"]["rate"])
            n_held, n_runs = held(r["dpu"])
            # Generator-bound: pktgen's reach is within GEN_MARGIN of a measured rate, or pktgen
            # itself held most of the appliance's runs (it seldom waited for the appliance).
            bound = max(io, dpu) * GEN_MARGIN > gen or 2 * n_held < n_runs
            ratio = dpu / io if io else float("nan")
            claim = f"generator-bound ({ratio:.2f})" if bound else f"{ratio:.2f}"
            gbps = "-" if row.kind == "fwd" else fmt([x * row.lanes * 4 * 8 for x in r["dpu"]["rate"]], 1e9, 2)
            lines.append(f"| {row.name()} | {fmt(r['testpmd-rxonly']['tx'])} | {fmt(r['testpmd-io']['rate'])} | "
                         f"{back(r['testpmd-io'])} | {fmt(r['dpu']['rate'])} | {back(r['dpu'])} | {gbps} | "
                         f"{n_held} of {n_runs} | {busy(r['dpu'])} | {cycles(r['testpmd-io'])} | {cycles(r['dpu'])} | "
                         f"{claim} |")
            if row.kind == "open":
                goals.append(f"{row.id} " + (f"not judged (generator-bound; {ratio:.2f})" if bound else
                                             ("met" if ratio >= GOAL else "NOT met") + f" ({ratio:.2f})"))
    moded = [r for r in opened if any(x.get("mode") for x in res[r.id]["dpu"]["det"])]
    if moded:
        lines += [
            "",
            "The same runs by the guest's mode (the cross-core probes before and after each run; "
            "runs that changed modes are left out): testpmd io and the appliance compared within "
            "a mode.",
            "",
            "| row | mode | testpmd io | appliance | runs the appliance held | cycles/pkt testpmd io | "
            "cycles/pkt appliance | appliance / testpmd io |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for row in moded:
            r = res[row.id]
            for mode in ("fast", "slow"):
                sub = {k: {"rate": [x for x, det in zip(v["rate"], v["det"]) if det.get("mode") == mode],
                           "tx": [x for x, det in zip(v["tx"], v["det"]) if det.get("mode") == mode],
                           "det": [det for det in v["det"] if det.get("mode") == mode]}
                       for k, v in r.items()}
                # pktgen's reach in this mode: its highest median tx rate over the mode's runs.
                reaches = [med(v["tx"]) for v in sub.values() if v["tx"]]
                gen = max(reaches) if reaches else 0.0
                if not sub["testpmd-io"]["rate"] or not sub["dpu"]["rate"]:
                    lines.append(f"| {row.name()} | {mode} | {len(sub['testpmd-io']['rate'])} runs | "
                                 f"{len(sub['dpu']['rate'])} runs | - | - | - | no pair |")
                    continue
                io, dpu = med(sub["testpmd-io"]["rate"]), med(sub["dpu"]["rate"])
                n_held, n_runs = held(sub["dpu"])
                bound = max(io, dpu) * GEN_MARGIN > gen or 2 * n_held < n_runs
                ratio = dpu / io
                claim = f"generator-bound ({ratio:.2f})" if bound else f"{ratio:.2f}"
                lines.append(f"| {row.name()} | {mode} | {fmt(sub['testpmd-io']['rate'])} | {fmt(sub['dpu']['rate'])} | "
                             f"{n_held} of {n_runs} | {cycles(sub['testpmd-io'])} | {cycles(sub['dpu'])} | {claim} |")
                if row.kind == "open":
                    goals.append(f"{row.id} in the {mode} mode " + (
                        f"not judged (generator-bound; {ratio:.2f})" if bound else
                        ("met" if ratio >= GOAL else "NOT met") + f" ({ratio:.2f})"))
    shared = [r for r in rows if r.kind == "open" and "dpu-shared" in res[r.id]]
    if shared:
        lines += [
            "",
            "Zero-copy results (`[dataplane] zero_copy_results = true`: a completion's frames share one "
            "payload) beside the default (a copy per member), same runs as above.",
            "",
            "| row | appliance, copies | appliance, shared payload | shared / copies | shared / testpmd io | "
            "frames sent shared |",
            "|---|---|---|---|---|---|",
        ]
        for row in shared:
            r = res[row.id]
            io, dpu, sh = med(r["testpmd-io"]["rate"]), med(r["dpu"]["rate"]), med(r["dpu-shared"]["rate"])
            lines.append(f"| {row.name()} | {fmt(r['dpu']['rate'])} | {fmt(r['dpu-shared']['rate'])} | "
                         f"{sh / dpu:.3f} | {sh / io:.2f} | {med(x.get('shared', 0) for x in r['dpu-shared']['det']):.0f} |")
    closed = [r for r in rows if r.kind == "closed"]
    if closed:
        lines += [
            "",
            f"Closed loop (what real workers see: {WINDOW} chunks outstanding per worker, a slot's "
            "next round once its result is back), the appliance alone: testpmd cannot answer a "
            "contribution with its result, so no row beside it. Rounds/s: slot rounds completed "
            "(every worker's result back); contributions/s: contributions whose right result came "
            "back; latency from a round's first send to its result, over every worker.",
            "",
            "| row | pktgen's reach (open-loop tx) | rounds/s | contributions/s | payload Gbit/s | "
            "p50 µs | p99 µs | resent | verdict |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for row in closed:
            r = res[row.id]["dpu"]
            gen, rate = reach(row), med(r["rate"])
            bound = rate * GEN_MARGIN > gen
            lines.append(
                f"| {row.name()} | {gen / 1e6:.2f} | {fmt([x / row.workers for x in r['rate']], 1e3, 1)} k | "
                f"{fmt(r['rate'])} M | {fmt([x * row.lanes * 4 * 8 for x in r['rate']], 1e9, 2)} | "
                f"{med(x['p50'] for x in r['det']):.0f} | {med(x['p99'] for x in r['det']):.0f} | "
                f"{med(x['retx'] for x in r['det']):.0f} | "
                f"{'generator-bound' if bound else 'appliance-bound or loop-bound'} |")
    lines += [""]
    if goals:
        lines.append(f"Goal, AllReduce open loop: appliance >= {GOAL}x testpmd io: " + "; ".join(goals) + ".")
    lines += [f"Generator-bound: pktgen's reach (its highest median tx rate with the row's traffic) is "
              f"below {GEN_MARGIN}x a rate measured in the row, or pktgen itself held most of the appliance's "
              f"runs ('runs the appliance held': runs in which pktgen found the ring full at least "
              f"{REFUSALS_HELD:g} times per burst it sent, or the appliance was busy at least {100 * BUSY_HELD:.0f}% of "
              "pktgen's sending time; in the others it seldom waited for the appliance, "
              "whose results cost it more to receive and check than testpmd's echoes); such a row's "
              "ratio, in brackets, is not a claim. Appliance busy: its busy cycles over pktgen's "
              "sending time (the rest it polled empty rings). Cycles/pkt: the device's busy TSC cycles per "
              "packet it received (testpmd --record-core-cycles; the appliance's final stats, the rx "
              "call included alike), a measure of its own work whoever held the rate. "
              "'back': the fraction of what pktgen sent that came back to it (its receiving shares "
              f"CPU 0 with its sending). Results checked wrong by pktgen in the appliance's runs: {wrong}. "
              "Programs that failed to stop cleanly (a device not running once pktgen had stopped and "
              "left, or a non-zero exit; pktgen dying by a signal after it wrote its summary): "
              + ", ".join(f"{k} {v}" for k, v in crashes.items()) + f" of {runs} runs.",
              probe_line(res),
              f"The appliance when its memif peer goes away (two pktgen runs, one after the other): "
              f"{'survives and keeps counting' if surv_ok else 'FAILED'} ({surv})."]
    lines = [x for x in lines if x is not None]
    text = "\n".join(lines) + "\n"
    name = ("memif-zc" if ZC else "memif") + ("-shared" if SHARED else "")
    with open(os.path.join(OUT, name + ".md"), "w") as f:
        f.write(text)
    print(text, end="")
    if not surv_ok:
        print("memif.py: the appliance did not survive its memif peer going away (see the table)",
              file=sys.stderr)


if __name__ == "__main__":
    main()
