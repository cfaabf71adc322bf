"""Tests of gradclient.ddp without network namespaces: the bucket mapping (ApplianceState.place)
and the hook itself over loopback against the fake appliance (tests/fake_appliance.py).

Needs torch: run with the project's `.venv/bin/python` (`make deps` makes it; `make test` runs
these with it). Without torch the import fails and so does the run: torch is part of the build.
"""

from __future__ import annotations

import os
import sys
import unittest
from types import SimpleNamespace

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

from fake_appliance import FakeAppliance, run_each  # noqa: E402
from gradclient import Client  # noqa: E402
from gradclient.config import Collective  # noqa: E402
from gradclient.ddp import ApplianceState, appliance_hook, as_lanes, collective_elements, padded  # noqa: E402


def stub(dtype="f32", tensor=64, chunk=8, workers=2, cid=1):
    """A stand-in for a client: only its collective is read by the mapping."""
    return SimpleNamespace(collective=Collective(cid, "sum", dtype, tensor, chunk, workers, 0))


class Bucket:
    """What DDP hands a comm hook (dist.GradBucket): a flat buffer, its index, whether it is last."""

    def __init__(self, buf: torch.Tensor, index: int, last: bool):
        self._buf, self._index, self._last = buf, index, last

    def buffer(self) -> torch.Tensor:
        return self._buf

    def index(self) -> int:
        return self._index

    def is_last(self) -> bool:
        return self._last


class DefaultMacTest(unittest.TestCase):
    def test_the_default_mac_is_that_of_the_interface_holding_the_address(self):
        from gradclient.ddp import _mac_of

        with open("/sys/class/net/lo/address") as f:
            lo = f.read().strip()
        self.assertEqual(_mac_of("127.0.0.1"), lo)
        self.assertEqual(_mac_of("::1"), lo)
        # Documentation ranges (RFC 5737, RFC 3849): no interface holds them.
        self.assertIsNone(_mac_of("198.51.100.77"))
        self.assertIsNone(_mac_of("2001:db8::77"))


class MappingTest(unittest.TestCase):
    def test_buckets_follow_each_other_at_whole_chunks(self):
        st = ApplianceState(stub(tensor=64, chunk=8))
        places = [st.place(i, "f32", n)[1] for i, n in enumerate([10, 8, 3])]
        # 10 elements take chunks [0, 16); 8 take [16, 24); 3 take [24, 32), padded to 8.
        self.assertEqual([(s.offset, s.elements, s.padded_elements) for s in places],
                         [(0, 10, 16), (16, 8, 8), (24, 3, 8)])

    def test_the_padding_stops_at_the_tensors_end(self):
        # Spec rule 5: only the tensor's last chunk may be short; a bucket ending there is not
        # padded past it.
        st = ApplianceState(stub(tensor=20, chunk=8))
        st.place(0, "f32", 16)
        self.assertEqual(st.place(1, "f32", 4)[1].padded_elements, 4)

    def test_a_rebuild_is_mapped_afresh_at_the_next_bucket_zero_and_counted(self):
        st = ApplianceState(stub(tensor=64, chunk=8))
        for step_sizes in ([30], [10, 20], [10, 20]):
            for i, n in enumerate(step_sizes):
                st.place(i, "f32", n)
                st.finish_step(i == len(step_sizes) - 1)
        self.assertEqual(st.steps, 3)
        self.assertEqual(st.rebuilds, 1)  # one bucket, then two; then the same two again
        self.assertEqual([(s.offset, s.elements) for s in st.layout], [(0, 10), (16, 20)])

    def test_each_dtype_has_its_own_collective_and_offsets(self):
        st = ApplianceState([stub("f32", cid=1), stub("bf16", cid=3)])
        a = st.place(0, "f32", 5)
        b = st.place(1, "bf16", 5)
        c = st.place(2, "f32", 5)
        self.assertEqual([(x[1].collective_id, x[1].offset) for x in (a, b, c)], [(1, 0), (3, 0), (1, 8)])

    def test_a_bucket_past_the_tensor_names_the_size_to_configure(self):
        st = ApplianceState(stub(tensor=16, chunk=8))
        st.place(0, "f32", 10)
        with self.assertRaisesRegex(ValueError, "runs past tensor_elements = 16.*collective_elements"):
            st.place(1, "f32", 7)

    def test_refusals(self):
        with self.assertRaisesRegex(ValueError, "two clients for dtype f32"):
            ApplianceState([stub("f32"), stub("f32", cid=2)])
        with self.assertRaisesRegex(ValueError, "different numbers of members"):
            ApplianceState([stub("f32", workers=2), stub("f16", workers=3, cid=2)])
        st = ApplianceState(stub("f32"))
        with self.assertRaisesRegex(ValueError, "no collective of that dtype \\(have: f32\\)"):
            st.place(0, "bf16", 4)
        st.place(0, "f32", 4)
        with self.assertRaisesRegex(ValueError, "bucket 2 came after bucket 0"):
            st.place(2, "f32", 4)

    def test_collective_elements_fits_every_bucketing(self):
        model = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Linear(5, 1))  # 15, 5, 5, 1
        self.assertEqual(collective_elements(model.parameters(), 8), 16 + 8 + 8 + 8)
        self.assertEqual(padded(17, 8), 24)

    def test_bf16_travels_as_its_bit_patterns_without_a_copy(self):
        t = torch.tensor([1.0, -2.0, 0.5], dtype=torch.bfloat16)
        lanes = as_lanes(t)
        self.assertEqual(lanes.dtype, np.uint16)
        self.assertEqual(lanes.tolist(), [0x3F80, 0xC000, 0x3F00])
        lanes[0] = 0x4040  # 3.0: the tensor's memory itself
        self.assertEqual(t[0].item(), 3.0)
        with self.assertRaisesRegex(ValueError, "contiguous"):
            as_lanes(torch.zeros(4, 4)[:, 0])


class HookTest(unittest.TestCase):
    def run_ranks(self, fake, dtype, grads, tensor, chunk=4):
        """Each rank's hook on its bucket, in a thread each; returns (futures' values, states)."""
        n = len(grads)
        clients = [
            Client(Collective(7, "sum", dtype, tensor, chunk, n, k), bind=(fake.addr[0], 0), appliance=fake.addr,
                   deadline=3.0)
            for k in range(n)
        ]
        states = [ApplianceState(c) for c in clients]
        out = run_each(clients, lambda k: appliance_hook(states[k], Bucket(grads[k], 0, True)).wait())
        return out, states

    def test_a_bucket_is_averaged_in_place_through_the_appliance(self):
        a = torch.arange(6, dtype=torch.float32)
        b = torch.full((6,), 2.0)
        want = (a / 2 + b / 2).clone()
        with FakeAppliance("f32", num_workers=2) as fake:
            out, states = self.run_ranks(fake, "f32", [a, b], tensor=8)
        for k, t in enumerate((a, b)):
            self.assertNotIsInstance(out[k], Exception, out[k])
            self.assertIs(out[k], t)  # the future holds the bucket's own buffer
            self.assertTrue(torch.equal(t, want))
            self.assertEqual((states[k].steps, [(s.offset, s.padded_elements) for s in states[k].layout]),
                             (1, [(0, 8)]))

    def test_bf16_buckets_sum_as_the_spec_says(self):
        # Each rank's half is exact in bf16; the halves are widened to f32, summed and rounded
        # once to bf16 (spec section 4 rule 6). Lane 0, 1 + 2^-8, is a tie: to even, 1.0.
        a = torch.tensor([2.0, 256.0, -1.0, 0.0], dtype=torch.bfloat16)
        b = torch.tensor([2.0 ** -7, 2.0, 1.0, 0.0], dtype=torch.bfloat16)
        wide = (a.float() / 2) + (b.float() / 2)
        want = wide.to(torch.bfloat16)
        with FakeAppliance("bf16", num_workers=2) as fake:
            out, _ = self.run_ranks(fake, "bf16", [a, b], tensor=4)
        for k, t in enumerate((a, b)):
            self.assertNotIsInstance(out[k], Exception, out[k])
            self.assertTrue(torch.equal(t, want), (t, want))

    def test_a_sparse_bucket_is_refused_before_it_is_touched(self):
        c = stub()
        sparse = torch.ones(4).to_sparse()
        with self.assertRaisesRegex(ValueError, "sparse gradients"):
            appliance_hook(ApplianceState(c), Bucket(sparse, 0, True))
        self.assertTrue(torch.equal(sparse.to_dense(), torch.ones(4)), "not divided")

    def test_an_absent_peer_is_an_error_naming_it(self):
        with FakeAppliance("f32", num_workers=2) as fake:
            c = Client(Collective(7, "sum", "f32", 4, 4, 2, 0), bind=(fake.addr[0], 0), appliance=fake.addr,
                       deadline=1.0)
            state = ApplianceState(c)
            with self.assertRaisesRegex(Exception, "waiting for rank 1"):
                appliance_hook(state, Bucket(torch.ones(4), 0, True))
            # The state goes no further: a next step could mix the failed step's gradients in.
            self.assertIn("waiting for rank 1", state.failed)
            with self.assertRaisesRegex(RuntimeError, "a previous AllReduce through the appliance failed"):
                appliance_hook(state, Bucket(torch.ones(4), 0, True))
            c.close()


def _bf16_models(seed: int) -> dict:
    """bf16 modules whose parameters or buffers are not plain contiguous tensors of dim >= 1,
    each rank's different (seeded by `seed`)."""
    torch.manual_seed(seed)
    conv = torch.nn.Conv2d(3, 4, 3).to(torch.bfloat16).to(memory_format=torch.channels_last)
    scalar = torch.nn.Module()
    scalar.s = torch.nn.Parameter(torch.tensor(0.5 + seed, dtype=torch.bfloat16))
    tr = torch.nn.Module()
    tr.w = torch.nn.Parameter(torch.randn(3, 4).to(torch.bfloat16).t())
    bn = torch.nn.BatchNorm1d(4).to(torch.bfloat16)
    bn.running_mean.fill_(seed + 0.25)
    return {"conv": conv, "scalar": scalar, "transposed": tr, "batchnorm": bn}


def _bf16_rank(rank: int, port: int, out: str) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from gradclient.ddp import _gloo_bf16_broadcast

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    _gloo_bf16_broadcast()
    got = {}
    for name, m in _bf16_models(rank).items():
        d = DDP(m)
        if name == "batchnorm":
            # Buffers broadcast again before the forward, which updates them from its input
            # (the same on both ranks).
            torch.manual_seed(99)
            d(torch.randn(3, 4, dtype=torch.bfloat16))
        got[name] = [
            (t.contiguous().view(torch.int16) if t.dtype == torch.bfloat16 else t).flatten().tolist()
            for t in m.state_dict().values()
        ]
    torch.save(got, f"{out}.{rank}")
    dist.destroy_process_group()


class Bf16Broadcast(unittest.TestCase):
    def test_ddp_broadcasts_bf16_of_every_layout_bit_for_bit(self):
        """DDP's start-up broadcast and its buffers' broadcast before a forward carry bf16 over
        gloo (which has no bf16) for channels_last, 0-dim and transposed parameters and bf16
        buffers: rank 1 ends with rank 0's bits (DDP() failed on the first three, the forward on
        the last)."""
        import socket
        import tempfile

        import torch.multiprocessing as mp

        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "states")
            mp.spawn(_bf16_rank, args=(port, out), nprocs=2)
            r0, r1 = torch.load(f"{out}.0"), torch.load(f"{out}.1")
        self.assertEqual(sorted(r0), ["batchnorm", "conv", "scalar", "transposed"])
        for name in r0:
            self.assertEqual(r0[name], r1[name], name)
        want = _bf16_models(0)["scalar"].s.detach().view(torch.int16).item()
        self.assertEqual(r1["scalar"], [[want]])


if __name__ == "__main__":
    unittest.main()
