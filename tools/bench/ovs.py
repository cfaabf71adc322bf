"""OVS-DPDK as a peer of the dpu in `make bench`: the dpu's pipeline as OpenFlow tables, and a
private Open vSwitch (ovsdb-server and Debian's ovs-vswitchd-dpdk) to run them.

Imported by tools/bench/run.py and tools/bench/test_ovs.py (python3 on PATH; no module beyond
the standard library).

`translate(conf)` turns a dpu config's `[[table]]`s (a dict, as `tomllib` reads it) into flows for
`ovs-ofctl -O OpenFlow13 add-flows`, keeping the dpu's semantics (dataplane/src/packet/table,
`Pipeline::run_table`):
- dpu table i is OpenFlow table i; a table's default action is its priority-0 flow.
- Priorities: an exact table's entries all at 1; an lpm table's at 1 + the prefix length (the
  longest prefix wins); a table with ternary or range fields ranks its entries by priority
  (larger first, ties to the earlier entry, as the dpu) and gives each its own OpenFlow
  priority. A range becomes its prefix decomposition (one flow per aligned block, same
  priority; the blocks do not overlap).
- Actions run in order. Rewrites (`set_eth_dst`, `set_eth_src`, `set_dscp`, `dec_ttl`) are
  apply-actions, so later tables match the rewritten packet, as in the dpu; `set_dscp` and
  `dec_ttl` only in flows that match IPv4 fields (OpenFlow 1.3's prerequisite). `forward(p)` and
  `flood` are write-actions (`output:p+1`, `output:all`): OpenFlow's action set holds one
  output, so the last egress wins, as in the dpu, and it runs when the pipeline ends. `drop`
  is clear-actions and ends the pipeline (anything after it in the list never runs, as in the
  dpu). Without `goto`/`exit`/`drop` the flow goes to the next table (`goto_table`); `goto(t)`
  to table t; `exit` and the last table end it. A pipeline that ends with no output drops the
  packet, as the dpu drops `no_egress`. `count(name)` has no action: OpenFlow counts every
  flow's packets.
- `dec_ttl` on a TTL of 0 or 1: the dpu drops (`ttl_expired`); OVS stops the pipeline and
  sends the packet to the controllers, of which the bridge has none: dropped too.
- dpu port index p is OpenFlow port p + 1 (`ofport_request` in `Ovs.add_port`).

Not expressible, and refused with a `TranslateError` naming the table, entry and what: the
actions `multicast`, `aggregate`, `meter`, `police`, `set_color`, `set_class`, `mark_ecn` and the
VLAN ones; key fields other than `ingress_port`, `eth.src`, `eth.dst`, `eth.type`,
`ipv4.src`, `ipv4.dst`, `ipv4.proto`, `ipv4.dscp`, `ipv4.ttl`, `udp.src_port`,
`udp.dst_port`; masks OpenFlow cannot take (on `ipv4.proto`, `ipv4.dscp`, `ipv4.ttl`,
`eth.type`, `ingress_port`); a UDP port with `ipv4.proto` other than 17. One difference is left:
the dpu reads a field of a header the packet lacks as zeros, OpenFlow's prerequisites (`ip`,
`udp`) make such a packet miss the entry instead; the two agree on IPv4/UDP traffic, which is
all the bench sends.
"""

import atexit
import ipaddress
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen  # noqa: E402  (tools/bench/gen.py: the same key syntax as the bench's generator)

VSWITCHD = "/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk"
SCHEMA = "/usr/share/openvswitch/vswitch.ovsschema"


class TranslateError(ValueError):
    """A table, entry or action the translation to OpenFlow cannot keep the dpu's meaning of."""


# dpu field -> (OpenFlow field, width in bits, prerequisite, maskable in OpenFlow)
FIELDS = {
    "ingress_port": ("in_port", 16, None, False),
    "eth.dst": ("dl_dst", 48, None, True),
    "eth.src": ("dl_src", 48, None, True),
    "eth.type": ("dl_type", 16, None, False),
    "ipv4.src": ("nw_src", 32, "ip", True),
    "ipv4.dst": ("nw_dst", 32, "ip", True),
    "ipv4.proto": ("nw_proto", 8, "ip", False),
    "ipv4.dscp": ("ip_dscp", 6, "ip", False),
    "ipv4.ttl": ("nw_ttl", 8, "ip", False),
    "udp.src_port": ("tp_src", 16, "udp", True),
    "udp.dst_port": ("tp_dst", 16, "udp", True),
}


def _int(s):
    return int(s.strip(), 0)


def _value(field, text):
    """A dpu field value's text (an IPv4 address, a MAC or an integer) as an int."""
    text = text.strip()
    if field in ("ipv4.src", "ipv4.dst"):
        return int(ipaddress.IPv4Address(text))
    if field in ("eth.src", "eth.dst"):
        return int(text.replace(":", "").replace("-", ""), 16)
    return _int(text)


def _fmt(field, v):
    """An int as OpenFlow's text for `field`."""
    if field in ("ipv4.src", "ipv4.dst"):
        return str(ipaddress.IPv4Address(v))
    if field in ("eth.src", "eth.dst"):
        return ":".join(f"{(v >> s) & 0xFF:02x}" for s in range(40, -8, -8))
    if field == "ingress_port":
        return str(v + 1)
    return str(v)


def range_blocks(lo, hi, bits):
    """[lo, hi] as aligned (value, mask) blocks of a `bits`-bit field, fewest first-to-last."""
    out, full = [], (1 << bits) - 1
    while lo <= hi:
        size = lo & -lo if lo else 1 << bits
        while size > hi - lo + 1:
            size >>= 1
        out.append((lo, full & ~(size - 1)))
        lo += size
    return out


def _match_alts(field, kind, value, where):
    """The OpenFlow matches (a list of alternatives, each a list of `name=value` terms, [] for
    any) of one key field's entry `value` (the dpu's text form) for match `kind`."""
    if field not in FIELDS:
        raise TranslateError(f"{where}: key field {field!r} has no OpenFlow translation here "
                             f"(known: {', '.join(FIELDS)})")
    of, bits, _, maskable = FIELDS[field]
    full = (1 << bits) - 1
    text = str(value).strip()

    def term(v, m):
        if m == 0:
            return []
        if m == full:
            return [f"{of}={_fmt(field, v)}"]
        if not maskable:
            raise TranslateError(f"{where}: {field} {text!r}: OpenFlow cannot mask {of}")
        mask = _fmt(field, m) if field.startswith(("ipv4.", "eth.")) else f"0x{m:x}"
        return [f"{of}={_fmt(field, v)}/{mask}"]

    if kind == "exact":
        return [term(_value(field, text), full)]
    if kind == "lpm":
        addr, _, ln = text.partition("/")
        ln = int(ln) if ln else bits
        return [term(_value(field, addr), full & ~((1 << (bits - ln)) - 1))]
    def conv(s):
        return _value(field, s)

    if kind == "ternary":
        return [term(*gen.parse_ternary(text, bits, conv))]
    if kind == "range":
        lo, hi = gen.parse_range(text, bits, conv)
        if lo == 0 and hi == full:
            return [[]]
        blocks = range_blocks(lo, hi, bits)
        if not maskable and any(m != full for _, m in blocks):
            raise TranslateError(f"{where}: {field} range {text!r}: OpenFlow cannot mask {of}")
        return [term(v, m) for v, m in blocks]
    raise TranslateError(f"{where}: match kind {kind!r} (expected exact, lpm, ternary or range)")


def _actions(text, t, names, ports, where, ip=False):
    """The OpenFlow instructions of a dpu action list `text` in table index `t` of the tables
    `names`, with `ports` configured ports; `ip`: the flow matches IPv4 packets only."""
    apply, egress, nxt = [], None, t + 1
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        m = re.fullmatch(r"([a-z_]+)\s*(?:\((.*)\))?", part)
        if not m:
            raise TranslateError(f"{where}: cannot read action {part!r}")
        name, arg = m.group(1), (m.group(2) or "").strip()
        if name == "forward":
            p = int(arg)
            if p >= ports:
                raise TranslateError(f"{where}: forward({p}): only {ports} ports")
            egress = f"output:{p + 1}"
        elif name == "flood":
            egress = "output:all"
        elif name == "drop":
            return "clear_actions"
        elif name == "goto":
            if arg not in names or names.index(arg) <= t:
                raise TranslateError(f"{where}: goto({arg}): not a later table")
            nxt = names.index(arg)
        elif name == "exit":
            nxt = None
        elif name == "count":
            pass  # every OpenFlow flow counts its packets
        elif name == "dec_ttl":
            if not ip:
                raise TranslateError(f"{where}: dec_ttl in a flow that does not match IPv4 fields "
                                     "(OpenFlow 1.3 needs the `ip` prerequisite; the dpu skips non-IP)")
            apply.append("dec_ttl")
        elif name == "set_eth_dst":
            apply.append(f"mod_dl_dst:{arg}")
        elif name == "set_eth_src":
            apply.append(f"mod_dl_src:{arg}")
        elif name == "set_dscp":
            if not ip:
                raise TranslateError(f"{where}: set_dscp in a flow that does not match IPv4 fields "
                                     "(OpenFlow needs the `ip` prerequisite; the dpu skips non-IP)")
            apply.append(f"mod_nw_tos:{_int(arg) << 2}")
        else:
            raise TranslateError(f"{where}: action {name!r} has no OpenFlow translation here "
                                 "(known: forward, flood, drop, goto, exit, count, dec_ttl, "
                                 "set_eth_dst, set_eth_src, set_dscp)")
    ins = list(apply)
    if egress:
        ins.append(f"write_actions({egress})")
    if nxt is not None and nxt < len(names):
        ins.append(f"goto_table:{nxt}")
    return ",".join(ins) if ins else "drop"


def translate(conf):
    """OpenFlow 1.3 flows (lines for `ovs-ofctl -O OpenFlow13 add-flows`) for the `[[table]]`s
    of the dpu config `conf` (a dict as `tomllib.load` gives). Raises `TranslateError`."""
    tables = conf.get("table", [])
    names = [tb["name"] for tb in tables]
    ports = len(conf.get("port", [])) or 2
    flows = []
    for t, tb in enumerate(tables):
        keys = [(k["field"], k["match"]) for k in tb["key"]]
        prioritised = any(m in ("ternary", "range") for _, m in keys)
        entries = list(enumerate(tb.get("entry", [])))
        if prioritised:
            entries.sort(key=lambda ie: (-ie[1].get("priority", 0), ie[0]))
            if len(entries) > 65000:
                raise TranslateError(f"table {tb['name']}: too many entries for OpenFlow priorities")
        for rank, (i, e) in enumerate(entries):
            where = f"table {tb['name']} entry {i}"
            if len(e["key"]) != len(keys):
                raise TranslateError(f"{where}: {len(e['key'])} values for {len(keys)} key fields")
            alts, prereq = [[]], set()
            for (field, kind), v in zip(keys, e["key"]):
                fa = _match_alts(field, kind, v, where)
                if fa != [[]]:
                    prereq.add(FIELDS[field][2])
                alts = [a + b for a in alts for b in fa]
            proto = [x for a in alts for x in a if x.startswith("nw_proto=")]
            if "udp" in prereq:
                if any(x != "nw_proto=17" for x in proto):
                    raise TranslateError(f"{where}: a UDP port with ipv4.proto {proto}")
                alts = [[x for x in a if x != "nw_proto=17"] for a in alts]
                lead = ["udp"]
            elif "ip" in prereq:
                lead = ["ip"]
            else:
                lead = []
            if prioritised:
                prio = len(entries) - rank + 1
            elif any(m == "lpm" for _, m in keys):
                lpm = next(str(v) for (_, m), v in zip(keys, e["key"]) if m == "lpm")
                bits = FIELDS[next(f for f, m in keys if m == "lpm")][1]
                prio = 1 + (int(lpm.partition("/")[2]) if "/" in lpm else bits)
            else:
                prio = 1
            ins = _actions(e["action"], t, names, ports, where, ip=bool(lead))
            for a in alts:
                flows.append(",".join([f"table={t}", f"priority={prio}", *lead, *a]) + f",actions={ins}")
        ins = _actions(tb.get("default_action", "drop"), t, names, ports, f"table {tb['name']} default_action")
        flows.append(f"table={t},priority=0,actions={ins}")
    return flows


# --- a private Open vSwitch ---------------------------------------------------------------------

_live = []


def _cleanup_all():
    for o in list(_live):
        o.stop()


atexit.register(_cleanup_all)


def _die_with_parent():
    """In the child before exec: SIGKILL when the process that started it dies (Linux
    PR_SET_PDEATHSIG), so no daemon outlives a killed bench; its own session, so a terminal's
    Ctrl-C reaches only the bench, whose cleanup stops the daemons in order."""
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    os.setsid()


def _exit_on_sigterm():
    """SIGTERM runs the cleanup (a SystemExit) instead of killing the bench outright."""
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        try:
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        except ValueError:
            pass  # not the main thread


class Ovs:
    """A private ovsdb-server and ovs-vswitchd-dpdk in a temporary directory (run, db and log
    directories, DPDK file prefix `ovs<pid>-<n>`), with one netdev bridge `br0` (fail mode
    secure: no default flow). EAL: no hugepages, 1024 MiB, the main lcore on CPU 0
    (`dpdk-lcore-mask`), one PMD thread on CPU 1 (`pmd-cpu-mask`). Use as a context manager;
    `stop()` (also run at exit) kills both daemons and removes the directory."""

    _n = 0

    def __init__(self, vswitchd=VSWITCHD):
        Ovs._n += 1
        self.vswitchd = vswitchd
        self.dir = tempfile.mkdtemp(prefix="dpubench-ovs-")
        self.prefix = f"ovs{os.getpid()}-{Ovs._n}"
        self.env = dict(os.environ, OVS_RUNDIR=self.dir, OVS_DBDIR=self.dir, OVS_LOGDIR=self.dir,
                        OVS_SYSCONFDIR=self.dir)
        self.db = f"unix:{self.dir}/db.sock"
        self.ctl = f"{self.dir}/vswitchd.ctl"
        self.procs = []

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()

    def _run(self, *cmd, timeout=60):
        r = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[:4])} ... failed ({r.returncode}): {r.stderr.strip()}"
                               + self.log_tail())
        return r.stdout

    def log_tail(self, n=15):
        try:
            with open(f"{self.dir}/ovs-vswitchd.log") as f:
                return "\nlast lines of ovs-vswitchd.log:\n" + "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def vsctl(self, *args, timeout=60):
        return self._run("ovs-vsctl", f"--db={self.db}", "--timeout=60", *args, timeout=timeout)

    def ofctl(self, *args):
        return self._run("ovs-ofctl", "-O", "OpenFlow13", *args)

    def appctl(self, *args):
        return self._run("ovs-appctl", "-t", self.ctl, *args)

    def start(self):
        _exit_on_sigterm()
        _live.append(self)
        self._run("ovsdb-tool", "create", f"{self.dir}/conf.db", SCHEMA)
        self.procs.append(subprocess.Popen(
            ["ovsdb-server", f"{self.dir}/conf.db", f"--remote=punix:{self.dir}/db.sock",
             f"--unixctl={self.dir}/ovsdb-server.ctl", f"--log-file={self.dir}/ovsdb-server.log",
             "-vconsole:off"],
            env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent))
        deadline = time.monotonic() + 20
        while not os.path.exists(f"{self.dir}/db.sock"):
            if time.monotonic() > deadline or self.procs[0].poll() is not None:
                raise RuntimeError("ovsdb-server did not start")
            time.sleep(0.05)
        self.vsctl("--no-wait", "init")
        self.vsctl("--no-wait", "set", "Open_vSwitch", ".",
                   "other_config:dpdk-init=true",
                   f'other_config:dpdk-extra="--no-huge -m 1024 --no-pci --legacy-mem '
                   f'--file-prefix={self.prefix}"',
                   "other_config:dpdk-lcore-mask=0x1", "other_config:pmd-cpu-mask=0x2")
        self.procs.append(subprocess.Popen(
            [self.vswitchd, self.db, f"--unixctl={self.ctl}",
             f"--log-file={self.dir}/ovs-vswitchd.log", "-vconsole:off", "-vfile:info"],
            env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent))
        # add-br waits for vswitchd to configure the bridge (DPDK's init comes first).
        self.vsctl("add-br", "br0", "--", "set", "Bridge", "br0", "datapath_type=netdev",
                   "fail_mode=secure", "protocols=OpenFlow13", timeout=120)

    def add_flows(self, flows):
        path = f"{self.dir}/flows.txt"
        with open(path, "w") as f:
            f.write("\n".join(flows) + "\n")
        self.ofctl("del-flows", "br0")
        self.ofctl("add-flows", "br0", path)

    def add_port(self, name, ofport, devargs):
        """Adds DPDK port `name` on the vdev `devargs` as OpenFlow port `ofport`; fails with
        the interface's error if OVS could not open it."""
        self.vsctl("add-port", "br0", name, "--", "set", "Interface", name, "type=dpdk",
                   f"options:dpdk-devargs={devargs}", f"ofport_request={ofport}", timeout=120)
        got = self.vsctl("get", "Interface", name, "ofport").strip()
        if got != str(ofport):
            err = self.vsctl("get", "Interface", name, "error").strip()
            raise RuntimeError(f"OVS port {name} ({devargs}): ofport {got}, error {err}" + self.log_tail())

    def port_stats(self):
        """{ofport: (rx_packets, tx_packets)} now (`ovs-ofctl dump-ports`, read live)."""
        out = self.ofctl("dump-ports", "br0")
        stats = {}
        for m in re.finditer(r"port\s+\"?(\w+)\"?: rx pkts=(\d+).*?\n\s+tx pkts=(\d+)", out):
            if m.group(1).isdigit():
                stats[int(m.group(1))] = (int(m.group(2)), int(m.group(3)))
        return stats

    def pmd_stats(self):
        """`dpif-netdev/pmd-stats-show` of the one PMD thread as a dict: packets received,
        EMC/SMC/megaflow hits, upcalls, lost upcalls (packets), cycles per packet (all; and
        `proc_cycles_per_packet`, the busy ones: rx, lookups, actions and tx, without idle
        polls) and subtable lookups per megaflow hit."""
        out = self.appctl("dpif-netdev/pmd-stats-show")
        keys = {"packets received": "rx", "packet recirculations": "recirc", "emc hits": "emc",
                "smc hits": "smc", "megaflow hits": "megaflow", "miss with success upcall": "upcall",
                "miss with failed upcall": "lost", "avg. packets per output batch": "batch",
                "avg cycles per packet": "cycles_per_packet",
                "avg processing cycles per packet": "proc_cycles_per_packet",
                "avg. subtable lookups per megaflow hit": "subtables_per_hit"}
        s = {}
        pmd = out.split("main thread:")[0]  # the PMD thread's section (the main thread's follows)
        if "pmd thread" not in pmd:
            raise RuntimeError("pmd-stats-show shows no PMD thread:\n" + out)
        for line in pmd.splitlines():
            k, _, v = line.strip().partition(":")
            k = k.strip().lower()
            if k in keys:
                m = re.match(r"\s*([\d.]+)", v)
                if m:
                    s[keys[k]] = float(m.group(1))
        return s

    def subtables(self):
        """The megaflow classifier's subtables (one per distinct mask) in use now: the use
        counts of `dpif-netdev/subtable-lookup-info-get`'s implementations, summed."""
        out = self.appctl("dpif-netdev/subtable-lookup-info-get")
        return sum(int(n) for n in re.findall(r"Use count: (\d+)", out))

    def trace(self, in_port, frame):
        """`ofproto/trace` of the bytes `frame` arriving on OpenFlow port `in_port`: (the output
        ports of the datapath actions, the final flow's fields as a dict)."""
        out = self.appctl("ofproto/trace", "br0", f"in_port={in_port}", frame.hex())
        acts = re.search(r"^Datapath actions: (.*)$", out, re.M)
        if not acts:
            raise RuntimeError("ofproto/trace gave no datapath actions:\n" + out)
        # Outputs are the bare port numbers among the datapath actions (a top-level comma list).
        depth, cur, parts = 0, "", []
        for c in acts.group(1):
            depth += c == "("
            depth -= c == ")"
            if c == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += c
        parts.append(cur)
        outs = [int(p) for p in (x.strip() for x in parts) if p.isdigit()]
        final = re.search(r"^Final flow: (.*)$", out, re.M)
        fields = {}
        if final:
            for kv in final.group(1).split(","):
                k, _, v = kv.partition("=")
                fields[k.strip()] = v.strip()
        return outs, fields, out

    def dp_port(self, name):
        """The datapath port number of interface `name` (what trace's datapath actions print)."""
        out = self.appctl("dpctl/show")
        m = re.search(rf"port (\d+): {re.escape(name)}\b", out)
        return int(m.group(1)) if m else None

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        self.procs = []
        if self in _live:
            _live.remove(self)
        if self.dir and os.path.isdir(self.dir) and not os.environ.get("OVS_BENCH_KEEP"):
            shutil.rmtree(self.dir, ignore_errors=True)
        # DPDK's runtime directory of the prefix (--legacy-mem keeps a config file there).
        for base in ("/var/run/dpdk", os.path.join(os.environ.get("XDG_RUNTIME_DIR", "/tmp"), "dpdk")):
            shutil.rmtree(os.path.join(base, self.prefix), ignore_errors=True)
