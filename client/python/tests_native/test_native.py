"""The native client (gradclient_native, built by `make deps` into .venv) against the pure-Python
one on the same fake appliance: bit-identical results for f32, f16 and bf16, whole tensors and
chunk-aligned ranges, batched system calls, and the same errors. Run with

    .venv/bin/python -m unittest discover -s client/python/tests_native

from the repository root. Fails (does not skip) when the module is not installed.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import unittest

import ml_dtypes
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

from fake_appliance import FakeAppliance, run_each  # noqa: E402
from gradclient import (  # noqa: E402
    AllreduceTimeout,
    Client,
    Collective,
    NativeClient,
    UnreachableError,
    client_class,
    native_available,
)

WORKERS, TENSOR, CHUNK, WINDOW = 3, 1000, 64, 8  # 16 chunks, the last one 40 elements
NUMPY = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}


def inputs(dtype: str) -> list[np.ndarray]:
    """Each rank's tensor: random values of mixed magnitudes (so that rounding matters)."""
    rng = np.random.default_rng(23)
    return [(rng.standard_normal(TENSOR) * 10.0 ** rng.integers(-3, 3, TENSOR)).astype(NUMPY[dtype]) for _ in range(WORKERS)]


def reduce_all(impl, dtype: str, arrays, offset=0, length=None):
    """Every rank's `impl` client reduces its copy of `arrays[k][offset:offset + length]` in
    place on a fresh fake appliance; returns (results, clients' stats)."""
    length = TENSOR - offset if length is None else length
    with FakeAppliance(dtype, num_workers=WORKERS) as fake:
        clients = [
            impl(Collective(7, "sum", dtype, TENSOR, CHUNK, WORKERS, k), bind=(fake.addr[0], 0), appliance=fake.addr,
                 window=WINDOW, deadline=3.0)
            for k in range(WORKERS)
        ]  # fmt: skip
        bufs = [a[offset : offset + length].copy() for a in arrays]
        got = run_each(clients, lambda k: clients[k].allreduce_into(bufs[k], offset))
        for r in got:
            if isinstance(r, BaseException):
                raise r
        return bufs, [c.stats for c in clients]


class NativeAgreesBitForBit(unittest.TestCase):
    def test_the_module_is_installed(self):
        self.assertTrue(native_available(), "gradclient_native is not installed: run make deps")

    def check(self, dtype, offset=0, length=None):
        arrays = inputs(dtype)
        py, _ = reduce_all(Client, dtype, arrays, offset, length)
        nat, stats = reduce_all(NativeClient, dtype, arrays, offset, length)
        length = TENSOR - offset if length is None else length
        # The fake sums in rank order (f16 and bf16 widened to f32, rounded once).
        acc = sum(a[offset : offset + length].astype(np.float32) for a in arrays)
        want = acc.astype(NUMPY[dtype])
        for k in range(WORKERS):
            self.assertEqual(nat[k].tobytes(), py[k].tobytes(), f"{dtype} rank {k}")
            self.assertEqual(nat[k].view(np.uint8).tobytes(), want.view(np.uint8).tobytes(), f"{dtype} rank {k}")
        for s in stats:
            chunks = -(-length // CHUNK)
            self.assertEqual(s["results"], chunks)
            self.assertGreaterEqual(s["sent"], chunks)  # every chunk's contribution went out
            self.assertEqual(s["probes"], TENSOR // CHUNK + 1)  # every chunk probed before the first call
            # A window's datagrams leave in one sendmmsg: 16 probes and 16 contributions in
            # windows of 8 take far fewer calls than datagrams.
            self.assertLess(s["send_calls"], s["datagrams"])
        return stats

    def test_f32(self):
        self.check("f32")

    def test_f16(self):
        self.check("f16")

    def test_bf16(self):
        self.check("bf16")

    def test_a_range_at_a_chunk_aligned_offset_as_the_ddp_hook_reduces_a_bucket(self):
        # Elements [128, 428): chunks 2 to 8, the last one padded with zeros to a whole chunk.
        stats = self.check("f32", offset=2 * CHUNK, length=300)
        self.assertEqual([s["chunks"] for s in stats], [5] * WORKERS)

    def test_a_misaligned_offset_is_refused_before_sending(self):
        with FakeAppliance("f32", num_workers=WORKERS) as fake:
            c = NativeClient(Collective(7, "sum", "f32", TENSOR, CHUNK, WORKERS, 0), bind=(fake.addr[0], 0),
                             appliance=fake.addr)  # fmt: skip
            with self.assertRaisesRegex(ValueError, "offset 10 is not a multiple of chunk_elements = 64"):
                c.allreduce_into(np.zeros(10, np.float32), 10)
            self.assertEqual(c.stats["datagrams"], 0)


class NativeErrors(unittest.TestCase):
    def test_an_absent_appliance_is_unreachable_within_the_deadline(self):
        with FakeAppliance("f32", num_workers=2, silent=True) as fake:
            c = NativeClient(Collective(7, "sum", "f32", TENSOR, CHUNK, 2, 0), bind=(fake.addr[0], 0),
                             appliance=fake.addr, deadline=0.5)  # fmt: skip
            t = time.monotonic()
            with self.assertRaisesRegex(UnreachableError, r"appliance unreachable: no answer from 127\.0\.0\.1:\d+ in 500 ms"):
                c.allreduce(np.ones(TENSOR, np.float32))
            self.assertLess(time.monotonic() - t, 1.5)

    def test_a_closed_port_is_refused(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        addr = s.getsockname()
        s.close()  # nothing listens there: ICMP port unreachable
        c = NativeClient(Collective(7, "sum", "f32", TENSOR, CHUNK, 2, 0), bind=("127.0.0.1", 0), appliance=addr, deadline=2.0)
        with self.assertRaisesRegex(UnreachableError, "appliance refused: .* answered ICMP port unreachable"):
            c.allreduce(np.ones(TENSOR, np.float32))

    def test_an_absent_peer_is_named(self):
        with FakeAppliance("f32", num_workers=2) as fake:
            c = NativeClient(Collective(7, "sum", "f32", TENSOR, CHUNK, 2, 0), bind=(fake.addr[0], 0),
                             appliance=fake.addr, deadline=0.6)  # fmt: skip
            with self.assertRaisesRegex(AllreduceTimeout, "waiting for rank 1") as cm:
                c.allreduce(np.ones(TENSOR, np.float32))
            self.assertEqual(cm.exception.waiting_for, [1])
            self.assertEqual(cm.exception.missing, 16)


class WireConstantsAgree(unittest.TestCase):
    """The pure-Python client's copies of the wire's constants (gradclient/wire.py) are the
    Rust definitions (dataplane's wire/gradient.rs, the Rust client's NAK texts), as the native
    module reports them."""

    def test_every_constant_of_wire_py_is_the_rust_one(self):
        import gradclient_native
        from gradclient import wire

        r = gradclient_native.wire_constants()
        self.assertEqual((wire.HEADER_LEN, wire.VERSION), (r["header_len"], r["version"]))
        self.assertEqual((wire.DEFAULT_UDP_PORT, wire.RANK_APPLIANCE), (r["default_udp_port"], r["rank_none"]))
        flags = {"result": wire.FLAG_RESULT, "retransmit": wire.FLAG_RETRANSMIT, "nak": wire.FLAG_NAK,
                 "probe": wire.FLAG_PROBE}  # fmt: skip
        self.assertEqual(flags, r["flags"])
        self.assertEqual(wire.OPS, r["ops"])
        self.assertEqual({k: (code, size) for k, (code, size, _) in wire.DTYPES.items()}, r["dtypes"])
        self.assertEqual(wire.NAK_REASONS, r["nak_reasons"])
        self.assertEqual(r["nak_reasons"][wire.NAK_STALE_ROUND], "stale or premature round")
        states = {"no_history": wire.STATE_NO_HISTORY, "in_progress_without_rank": wire.STATE_WITHOUT_RANK,
                  "in_progress_with_rank": wire.STATE_WITH_RANK, "completed": wire.STATE_COMPLETED}  # fmt: skip
        self.assertEqual(states, r["states"])


class Selection(unittest.TestCase):
    def test_gradclient_impl_picks_the_client(self):
        self.assertIs(client_class("python"), Client)
        self.assertIs(client_class("native"), NativeClient)
        self.assertIs(client_class("auto"), NativeClient)
        with self.assertRaisesRegex(ValueError, "GRADCLIENT_IMPL='rust': expected native, python or auto"):
            client_class("rust")


if __name__ == "__main__":
    unittest.main()
