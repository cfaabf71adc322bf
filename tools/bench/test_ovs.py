"""Tests of tools/bench/ovs.py: the translation of the dpu's tables to OpenFlow, and that OVS
with the translated bench pipeline does to packets what the dpu does. Run with

    python3 -m unittest discover -s tools/bench -p 'test_ovs.py'

from the repository root (python3 on PATH, the standard library only; `make test` runs it).

`TranslatedPipelineAgrees` starts a private ovsdb-server and ovs-vswitchd-dpdk (two net_null
ports, nothing forwarded) and `ofproto/trace`s a sample of frames through the OpenFlow tables
made from conf/bench/pipeline.toml, and runs the same frames through the dpu (the binary in
DPU_BIN_DIR, else target/release or target/test-release) from a net_pcap rx file into a net_pcap
tx file: every frame OVS outputs to port 1 the dpu sent, byte for byte (the trace's final
eth.dst and TTL applied to the frame, checksums recomputed), and every frame OVS drops the dpu
dropped. It is skipped when Debian's ovs-vswitchd-dpdk is not installed (about 10 s otherwise).
"""

import ipaddress
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import tomllib
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import gen  # noqa: E402
import ovs  # noqa: E402

CONF = os.path.join(ROOT, "conf", "bench", "pipeline.toml")


def load_conf():
    with open(CONF, "rb") as f:
        return tomllib.load(f)


def semantics_conf():
    """A config using every translated action and match kind."""
    return {"port": [{}, {}, {}], "table": [
        {"name": "a", "key": [{"field": "eth.dst", "match": "exact"}], "default_action": "forward(0)",
         "entry": [{"key": ["02:00:00:00:00:01"], "action": "forward(1); set_eth_src(02:00:00:00:00:09); forward(2)"},
                   {"key": ["02:00:00:00:00:02"], "action": "goto(c)"},
                   {"key": ["02:00:00:00:00:03"], "action": "forward(1); exit"},
                   {"key": ["02:00:00:00:00:04"], "action": "forward(1); drop; forward(2)"}]},
        {"name": "b", "key": [{"field": "ipv4.proto", "match": "ternary"},
                              {"field": "udp.src_port", "match": "range"}],
         "entry": [{"key": ["17", "53"], "priority": 5, "action": "set_dscp(46); dec_ttl; count(dns)"},
                   {"key": ["*", "*"], "priority": 5, "action": "flood"},
                   {"key": ["17", "*"], "priority": 9, "action": "exit"}]},
        {"name": "c", "key": [{"field": "ingress_port", "match": "exact"}], "default_action": "exit",
         "entry": [{"key": ["2"], "action": "drop"}]},
    ]}


class Translate(unittest.TestCase):
    def test_bench_pipeline_flows(self):
        flows = ovs.translate(load_conf())
        # 312 routes + miss; 40 ACL entries, ranges split into 188 aligned blocks, + miss;
        # 64 L2 entries + miss.
        self.assertEqual(len(flows), 568)
        by_table = [sum(f.startswith(f"table={t},") for f in flows) for t in range(3)]
        self.assertEqual(by_table, [313, 190, 65])
        self.assertIn("table=0,priority=9,ip,nw_dst=100.0.0.0/255.0.0.0,"
                      "actions=mod_dl_dst:02:00:00:00:01:00,dec_ttl,goto_table:1", flows)
        self.assertIn("table=0,priority=33,ip,nw_dst=10.144.165.64,"
                      "actions=mod_dl_dst:02:00:00:00:01:06,dec_ttl,goto_table:1", flows)
        self.assertIn("table=0,priority=0,actions=clear_actions", flows)
        # The first ACL entry (priority 1000) ranks highest; a permit goes on to l2.
        self.assertIn("table=1,priority=41,ip,nw_src=0.0.0.0/255.0.0.0,actions=clear_actions", flows)
        self.assertIn("table=1,priority=34,udp,tp_dst=0/0xfc00,actions=clear_actions", flows)
        self.assertIn("table=1,priority=26,udp,nw_src=10.16.0.0/255.255.0.0,tp_dst=2000/0xfff0,"
                      "actions=goto_table:2", flows)
        self.assertIn("table=2,priority=1,dl_dst=02:00:00:00:01:0f,actions=write_actions(output:2)",
                      flows)

    def test_range_blocks_cover_exactly(self):
        rng = random.Random(7)
        for _ in range(300):
            lo = rng.randrange(65536)
            hi = rng.randrange(lo, 65536)
            covered = set()
            for v, m in ovs.range_blocks(lo, hi, 16):
                self.assertEqual(v & ~m & 0xFFFF, 0)
                block = range(v, v + ((~m) & 0xFFFF) + 1)
                self.assertFalse(covered & set(block))
                covered |= set(block)
            self.assertEqual(covered, set(range(lo, hi + 1)))
        self.assertEqual(ovs.range_blocks(1024, 65535, 16),
                         [(1024, 0xFC00), (2048, 0xF800), (4096, 0xF000), (8192, 0xE000),
                          (16384, 0xC000), (32768, 0x8000)])

    def test_semantics_of_actions(self):
        f = ovs.translate(semantics_conf())
        self.assertEqual(f, [
            "table=0,priority=1,dl_dst=02:00:00:00:00:01,actions=mod_dl_src:02:00:00:00:00:09,"
            "write_actions(output:3),goto_table:1",
            "table=0,priority=1,dl_dst=02:00:00:00:00:02,actions=goto_table:2",
            "table=0,priority=1,dl_dst=02:00:00:00:00:03,actions=write_actions(output:2)",
            "table=0,priority=1,dl_dst=02:00:00:00:00:04,actions=clear_actions",
            "table=0,priority=0,actions=write_actions(output:1),goto_table:1",
            # Priority 9 first, then the two 5s in config order.
            "table=1,priority=4,ip,nw_proto=17,actions=drop",
            "table=1,priority=3,udp,tp_src=53,actions=mod_nw_tos:184,dec_ttl,goto_table:2",
            "table=1,priority=2,actions=write_actions(output:all),goto_table:2",
            "table=1,priority=0,actions=clear_actions",
            "table=2,priority=1,in_port=3,actions=clear_actions",
            "table=2,priority=0,actions=drop",
        ])

    def test_refuses_what_it_cannot_translate(self):
        def conf(key, action, match="exact"):
            return {"table": [{"name": "t", "key": [{"field": key, "match": match}],
                               "entry": [{"key": ["1"], "action": action}]}]}
        for c, msg in ((conf("eth.type", "police(m)"), "action 'police'"),
                       (conf("gradient.op", "drop"), "key field 'gradient.op'"),
                       (conf("eth.type", "forward(5)"), "forward(5): only 2 ports"),
                       (conf("eth.type", "set_dscp(1)"), "set_dscp in a flow that does not match IPv4"),
                       (conf("eth.dst", "dec_ttl"), "dec_ttl in a flow that does not match IPv4")):
            with self.assertRaises(ovs.TranslateError) as e:
                ovs.translate(c)
            self.assertIn(msg, str(e.exception))
        with self.assertRaisesRegex(ovs.TranslateError, "OpenFlow cannot mask nw_proto"):
            ovs.translate({"table": [{"name": "t", "key": [{"field": "ipv4.proto", "match": "ternary"}],
                                      "entry": [{"key": ["16 &&& 0xf0"], "priority": 1,
                                                 "action": "drop"}]}]})


def dpu_binary():
    for d in (os.environ.get("DPU_BIN_DIR"), os.path.join(ROOT, "target", "release"),
              os.path.join(ROOT, "target", "test-release")):
        if d and os.path.exists(os.path.join(d, "dpu")):
            return os.path.join(d, "dpu")
    return None


def read_pcap(path):
    """The frames (bytes) of a pcap file."""
    with open(path, "rb") as f:
        data = f.read()
    out, at = [], 24
    while at + 16 <= len(data):
        n = struct.unpack("<I", data[at + 8:at + 12])[0]
        out.append(data[at + 16:at + 16 + n])
        at += 16 + n
    return out


def sample(conf_path, n=120, seed=5):
    """`n` UDP frames of 60 B with distinct 5-tuples: destinations in route prefixes (and some
    in none), sources and ports from ACL entries (permits and denies), some with TTL 1: a mix
    the dpu forwards and drops at each table. Returns [(frame, 5-tuple)]."""
    routes, acl, _ = gen.load_model(conf_path)
    rng = random.Random(seed)
    out, seen = [], set()
    while len(out) < n:
        if rng.random() < 0.85:
            net, _ = routes[rng.randrange(len(routes))]
            dst = int(net.network_address) + rng.randrange(net.num_addresses)
        else:
            dst = rng.getrandbits(32)
        _, _, (sv, sm), _, (lo, hi), _ = acl[rng.randrange(len(acl))]
        src = (sv & sm) | (rng.getrandbits(32) & ~sm & 0xFFFFFFFF)
        dport = rng.randint(lo, hi)
        sport = rng.randint(1024, 65535)
        ttl = 1 if rng.random() < 0.1 else 64
        t = (str(ipaddress.IPv4Address(src)), str(ipaddress.IPv4Address(dst)), sport, dport)
        if t in seen or sport in gen.SPECIAL_PORTS or dport in gen.SPECIAL_PORTS:
            continue
        seen.add(t)
        out.append((gen.udp_frame(*t, bytes(18), ttl=ttl), t, ttl))
    return out


@unittest.skipUnless(os.path.exists(ovs.VSWITCHD),
                     f"{ovs.VSWITCHD} is not installed (Debian's openvswitch-switch-dpdk; "
                     "tools/install-deps.sh installs it)")
class TranslatedPipelineAgrees(unittest.TestCase):
    def test_ovs_trace_matches_dpu_output(self):
        dpu = dpu_binary()
        self.assertIsNotNone(dpu, "no dpu binary: set DPU_BIN_DIR or cargo build --release")
        work = tempfile.mkdtemp(prefix="dpu-test-ovs-")
        self.addCleanup(shutil.rmtree, work, True)
        frames = sample(CONF)
        gen.write_pcap(os.path.join(work, "in.pcap"), [f for f, _, _ in frames])

        # The dpu: the bench config with port 0 reading the sample once, port 1 writing a pcap.
        with open(CONF) as f:
            text = f.read()
        text = text.replace('vdev = "net_pcap0,rx_pcap=target/bench/udp-60.pcap,infinite_rx=1"',
                            f'vdev = "net_pcap0,rx_pcap={work}/in.pcap"')
        text = text.replace('vdev = "net_null0,no-rx=1"', f'vdev = "net_pcap1,tx_pcap={work}/out.pcap"')
        self.assertIn("out.pcap", text)
        with open(os.path.join(work, "dpu.toml"), "w") as f:
            f.write(text)
        prefix = f"dputestovs{os.getpid()}"
        self.addCleanup(shutil.rmtree, f"/var/run/dpdk/{prefix}", True)
        r = subprocess.run([dpu, "-q", "-c", f"{work}/dpu.toml", "--duration", "1",
                            "--stats-json", f"{work}/stats.json", "--", f"--file-prefix={prefix}"],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(f"{work}/stats.json") as f:
            stats = json.load(f)
        self.assertEqual(stats["ports"][0]["workers"]["rx_packets"], len(frames))
        sent = {}
        out = read_pcap(f"{work}/out.pcap")
        for fr in out:
            t = (str(ipaddress.IPv4Address(fr[26:30])), str(ipaddress.IPv4Address(fr[30:34])),
                 *struct.unpack("!HH", fr[34:38]))
            sent[t] = fr

        with ovs.Ovs() as o:
            o.add_flows(ovs.translate(semantics_conf()))  # OVS takes every form translate makes
            self.assertEqual(len(o.ofctl("dump-flows", "br0").splitlines()), 1 + 11)
            o.add_flows(ovs.translate(load_conf()))
            self.assertEqual(len(o.ofctl("dump-flows", "br0").splitlines()), 1 + 568)
            o.add_port("p0", 1, "net_null0,no-rx=1")
            o.add_port("p1", 2, "net_null1,no-rx=1")
            p1 = o.dp_port("p1")
            forwarded = dropped = 0
            for fr, t, ttl in frames:
                outs, final, trace = o.trace(1, fr)
                if t in sent:
                    forwarded += 1
                    self.assertEqual(outs, [p1], f"{t}: the dpu forwarded it, OVS:\n{trace}")
                    mac = bytes.fromhex(final["dl_dst"].replace(":", ""))
                    want = mac + gen.udp_frame(*t, bytes(18), ttl=int(final["nw_ttl"]))[6:]
                    self.assertEqual(sent[t], want, f"{t}: frames differ; OVS:\n{trace}")
                    self.assertEqual(int(final["nw_ttl"]), ttl - 1)
                else:
                    dropped += 1
                    self.assertEqual(outs, [], f"{t}: the dpu dropped it, OVS:\n{trace}")
        # Every frame the dpu wrote is one OVS forwards: none twice, none OVS drops.
        self.assertEqual(forwarded, len(out))
        # The sample exercises both outcomes, and each table's drop: route misses, ACL denies,
        # and TTL 1 (counted by the dpu per reason).
        print(f"test_ovs: {forwarded} frames forwarded, {dropped} dropped, by both; dpu drops "
              f"{ {k: v for k, v in stats['drops'].items() if v} }", file=sys.stderr)
        self.assertGreater(forwarded, 20)
        self.assertGreater(dropped, 20)
        drops = stats["drops"]
        self.assertGreater(drops.get("table_miss", 0), 0, drops)
        self.assertGreater(drops.get("explicit_drop", 0), 0, drops)
        self.assertGreater(drops.get("ttl_expired", 0), 0, drops)


if __name__ == "__main__":
    unittest.main()
