"""A job registers its collective through the appliance's control socket (gradclient.control,
gradclient.ddp.register_collective) instead of a [[collective]] table in the appliance's TOML:
against the real `dpu` binary (DPU_BIN_DIR, else target/release or target/test-release) running
on a net_null port, with two gloo ranks in processes of their own.

Run with the project's `.venv/bin/python` (torch); `make test` does.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from datetime import timedelta

import torch.distributed as dist
import torch.multiprocessing as mp

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..", "..")
sys.path.insert(0, os.path.join(HERE, ".."))

from gradclient import Client  # noqa: E402
from gradclient.config import Collective  # noqa: E402
from gradclient.control import Control, ControlError, find_socket  # noqa: E402
from gradclient.ddp import register_collective, unregister_collective  # noqa: E402

CONFIG = """[eal]
args = ["--no-huge", "-m", "256", "--no-pci", "--no-shconf", "--lcores", "0@0,1@0", "--log-level", "*:error"]
[[port]]
vdev = "net_null0"
mac = "02:00:00:00:00:fe"
ipv4 = "127.0.0.254"
[dataplane]
memory_limit_mb = 2
"""


def dpu_bin() -> str:
    for d in (os.environ.get("DPU_BIN_DIR"), os.path.join(ROOT, "target", "release"),
              os.path.join(ROOT, "target", "test-release")):
        if d and os.path.exists(os.path.join(d, "dpu")):
            return os.path.join(d, "dpu")
    raise AssertionError("no dpu binary: set DPU_BIN_DIR or cargo build --release")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_main(rank: int, world: int, master_port: int, path: str, tensor: int, keys: dict, out) -> None:
    """One rank: gloo, a client bound to an ephemeral loopback port, the registration (with
    `keys`); puts (rank, outcome) on `out`, the outcome being the table, or the error's class and
    text."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{master_port}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    try:
        coll = Collective(7, "sum", "f32", tensor, 256, world, rank)
        client = Client(coll, bind=("127.0.0.1", 0), appliance=("127.0.0.254", 49374))
        try:
            try:
                table = register_collective(client, mac=f"02:00:00:00:01:{rank:02x}", control=path, **keys)
                result = ("ok", table)
                if tensor == 1024 and keys.get("dscp") == 8:
                    # Another job takes the id meanwhile: this one's end must leave it alone.
                    if rank == 0:
                        other = {**table, "member": [{**m, "udp_port": m["udp_port"] + 1} for m in table["member"]]}
                        Control(path).modify_collective(other)
                    unregister_collective(7, control=path, table=table)
                elif tensor == 1024:
                    unregister_collective(7, control=path, table=table)
            except (ControlError, ValueError) as e:
                result = (type(e).__name__, str(e))
            out.put((rank, *result, client.bind[1]))
        finally:
            client.close()
    finally:
        dist.destroy_process_group()


class RegisterTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        conf = os.path.join(cls.dir.name, "c.toml")
        with open(conf, "w") as f:
            f.write(CONFIG)
        # --duration: a bound, should a teardown never come (tearDownClass stops it at once).
        cls.dpu = subprocess.Popen([dpu_bin(), "-c", conf, "--duration", "600"], stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)
        # The appliance names its control socket: "dpu: control: PATH (dpuctl ...".
        cls.path = None
        lines = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = cls.dpu.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("dpu: control: "):
                cls.path = line[len("dpu: control: "):].split(" (")[0].strip()
                break
        if cls.path is None:
            cls.dpu.kill()
            cls.dpu.wait()
            cls.dir.cleanup()
            raise AssertionError(f"the appliance named no control socket: {''.join(lines)}")
        # Drain its output so that the appliance never blocks on it.
        threading.Thread(target=cls.dpu.stdout.read, daemon=True).start()

    @classmethod
    def tearDownClass(cls):
        cls.dpu.terminate()
        try:
            cls.dpu.wait(timeout=20)
        except subprocess.TimeoutExpired:
            cls.dpu.kill()
        cls.dir.cleanup()

    def ranks(self, tensor: int, **keys) -> dict:
        """Two ranks registering collective 7 of `tensor` elements with `keys`: per rank (kind,
        value, its client's UDP port). Ranks left running are killed."""
        self.assertIsNone(self.dpu.poll(), "the appliance is running")
        ctx = mp.get_context("spawn")
        out = ctx.Queue()
        port = free_port()
        procs = [ctx.Process(target=rank_main, args=(r, 2, port, self.path, tensor, keys, out)) for r in range(2)]
        try:
            for p in procs:
                p.start()
            got = {}
            for _ in procs:
                rank, kind, value, udp_port = out.get(timeout=120)
                got[rank] = (kind, value, udp_port)
            for p in procs:
                p.join(timeout=60)
                self.assertEqual(p.exitcode, 0)
            return got
        finally:
            for p in procs:
                if p.is_alive():
                    p.kill()
                    p.join()

    def test_the_control_client_adds_lists_and_deletes_a_collective(self):
        ctl = Control(self.path)
        self.assertEqual(find_socket(self.path), self.path)
        table = {"collective_id": 3, "op": "max", "dtype": "bf16", "tensor_elements": 100, "chunk_elements": 10,
                 "member": [{"rank": 0, "ip": "10.0.0.1", "udp_port": 50000, "mac": "02:00:00:00:01:00"}]}
        ctl.add_collective(table)
        running = {c["collective_id"]: c for c in ctl.collectives()}
        self.assertEqual((running[3]["op"], running[3]["dtype"], running[3]["tensor_elements"]), ("max", "bf16", 100))
        with self.assertRaises(ControlError) as e:
            ctl.add_collective(table)
        self.assertIn("exists already", str(e.exception))
        with self.assertRaises(ControlError) as e:
            ctl.add_collective({**table, "collective_id": 4, "chunk_elements": 0})
        self.assertIn("ops[0].collective.chunk_elements", str(e.exception))
        ctl.delete_collective(3)
        self.assertNotIn(3, [c["collective_id"] for c in ctl.collectives()])
        with self.assertRaises(ControlError) as e:
            Control("/nonexistent/dpu_control.sock").collectives()
        self.assertIn("/nonexistent/dpu_control.sock", str(e.exception))

    def test_a_job_registers_its_collective_and_removes_it_at_its_end(self):
        got = self.ranks(1024, deterministic=True)
        self.assertEqual({k for k, _, _ in got.values()}, {"ok"})
        table = got[0][1]
        self.assertEqual(got[1][1], table, "every rank gets rank 0's outcome")
        self.assertEqual((table["collective_id"], table["tensor_elements"], table["chunk_elements"]), (7, 1024, 256))
        self.assertIs(table["deterministic"], True)
        self.assertEqual([(m["rank"], m["ip"], m["udp_port"], m["mac"]) for m in table["member"]],
                         [(r, "127.0.0.1", got[r][2], f"02:00:00:00:01:{r:02x}") for r in range(2)])
        # Unregistered at the job's end.
        self.assertNotIn(7, [c["collective_id"] for c in Control(self.path).collectives()])

    def test_a_refused_registration_fails_every_rank_with_the_appliances_message(self):
        got = self.ranks(1 << 20)  # 8 MiB of slots: more than the 2 MiB the appliance allows
        self.assertEqual({k for k, _, _ in got.values()}, {"ControlError"})
        self.assertEqual(got[0][1], got[1][1])
        self.assertIn("ops[0].collective", got[0][1])
        self.assertIn("slot memory", got[0][1])
        self.assertNotIn(7, [c["collective_id"] for c in Control(self.path).collectives()])

    def test_a_job_does_not_delete_a_collective_another_job_registered_since(self):
        got = self.ranks(1024, dscp=8)
        # Each rank put its registration, then the unregistration's refusal.
        self.assertEqual({k for k, _, _ in got.values()}, {"ControlError"})
        self.assertIn("collective 7 is no longer this job's", got[0][1])
        self.assertEqual(got[0][1], got[1][1])
        running = {c["collective_id"]: c for c in Control(self.path).collectives()}
        self.assertIn(7, running)
        Control(self.path).delete_collective(7)

    def test_a_key_it_does_not_take_fails_every_rank_before_anything_changes(self):
        got = self.ranks(1024, collective_id=5)  # computed from the client: not a key to give
        self.assertEqual({k for k, _, _ in got.values()}, {"ValueError"})
        self.assertIn("rank 0: keys ['collective_id']", got[0][1])
        self.assertEqual(got[0][1], got[1][1])
        self.assertNotIn(5, [c["collective_id"] for c in Control(self.path).collectives()])


if __name__ == "__main__":
    unittest.main()
