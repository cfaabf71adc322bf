"""Tests of the Python client: run with

    python3 -m unittest discover -s client/python/tests

from the repository root (no install, no pytest).
"""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
PYROOT = os.path.join(HERE, "..")
sys.path.insert(0, PYROOT)

from fake_appliance import FakeAppliance, run_each, run_threads  # noqa: E402
from gradclient import (  # noqa: E402
    AllreduceTimeout,
    Client,
    Collective,
    ConfigError,
    Header,
    NakError,
    SocketError,
    UnreachableError,
    bf16_to_f32,
    f32_to_bf16,
    load_endpoint,
    ring_allreduce,
)
from gradclient.lanes import BFLOAT16  # noqa: E402
from gradclient.wire import FLAG_PROBE, FLAG_RETRANSMIT  # noqa: E402

# 10 elements in chunks of 4: chunks at offsets 0, 4, 8, the last one 2 elements long.
TENSOR, CHUNK = 10, 4


def coll(dtype="f32", rank=0, tensor=TENSOR, chunk=CHUNK, workers=2):
    return Collective(7, "sum", dtype, tensor, chunk, workers, rank)


def run_workers(fake, arrays, dtype="f32", calls=1, **opts):
    """Each array's allreduce by its own client in a thread; returns (results per rank, clients)."""
    opts.setdefault("deadline", 3.0)
    clients = [
        Client(coll(dtype, rank=k, tensor=arrays[0].size), bind=(fake.addr[0], 0), appliance=fake.addr, **opts)
        for k in range(len(arrays))
    ]
    return run_clients(clients, arrays, calls), clients


def run_n_workers(fake, arrays, dtype="f32", **opts):
    """As run_workers, for a collective of len(arrays) workers."""
    opts.setdefault("deadline", 3.0)
    n = len(arrays)
    clients = [
        Client(coll(dtype, rank=k, tensor=arrays[0].size, workers=n), bind=(fake.addr[0], 0), appliance=fake.addr,
               **opts)
        for k in range(n)
    ]
    return run_clients(clients, arrays), clients


def run_clients(clients, arrays, calls=1):
    """Each client's `calls` allreduces of its array, in a thread each; closes the clients.
    Returns per rank the list of results, or the exception raised."""
    return run_each(clients, lambda k: [clients[k].allreduce(arrays[k]) for _ in range(calls)])


class WireTest(unittest.TestCase):
    def test_header_bytes_match_the_spec_table(self):
        h = Header(op_type=1, collective_id=1, dtype=1, worker_rank=2, tensor_offset=256, data_length=1024, round=7)
        # version 1 | flags 0, op SUM, collective 1, dtype f32, reason 0, rank 2, offset 256,
        # data_length 1024, round 7; every field big-endian.
        self.assertEqual(h.pack().hex(), "10010001010000020000010000000400" "00000007")
        r = Header(
            op_type=3, collective_id=0xC0DE, dtype=3, worker_rank=0xFFFF, tensor_offset=0x01020304,
            data_length=0, round=0xFFFFFFFF, flags=0x4, reason=7,
        )
        self.assertEqual(r.pack().hex(), "1403c0de0307ffff0102030400000000ffffffff")
        self.assertEqual(Header.unpack(r.pack()), r)
        self.assertEqual(Header.unpack(h.pack()), h)
        with self.assertRaises(ValueError):
            Header.unpack(h.pack()[:19])


class Bf16Test(unittest.TestCase):
    def conv(self, bits):
        return int(f32_to_bf16(np.array([bits], dtype=np.uint32).view(np.float32))[0])

    def test_round_to_nearest_even_edges(self):
        cases = [
            (0x3F80_0000, 0x3F80),  # 1.0 exact
            (0x3F80_8000, 0x3F80),  # tie, even side stays
            (0x3F81_8000, 0x3F82),  # tie, odd side rounds up to even
            (0x3F80_8001, 0x3F81),  # just above the tie
            (0x3F80_7FFF, 0x3F80),  # just below the tie
            (0x7F7F_FFFF, 0x7F80),  # f32 max overflows to +inf
            (0x7F7F_8000, 0x7F80),  # tie below the largest finite bf16, odd: up to inf
            (0x7F7E_8000, 0x7F7E),  # same tie, even: stays finite
            (0xFF7F_FFFF, 0xFF80),  # -inf
            (0x7F80_0000, 0x7F80),  # +inf stays
            (0x0001_8000, 0x0002),  # subnormal tie to even
            (0x8000_8000, 0x8000),  # -0 plus a tie to even -0
            (0x8000_0000, 0x8000),  # -0
        ]
        for f32, want in cases:
            self.assertEqual(self.conv(f32), want, hex(f32))

    def test_nan_stays_nan_and_is_quieted(self):
        for nan in (0x7FC0_0000, 0x7F80_0001, 0x7FFF_FFFF, 0xFF80_0001, 0xFFFF_FFFF):
            got = self.conv(nan)
            self.assertEqual(got & 0x7F80, 0x7F80, hex(nan))
            self.assertNotEqual(got & 0x007F, 0, hex(nan))  # never infinity
            self.assertEqual(got & 0x40, 0x40, hex(nan))  # quiet
            self.assertEqual(got >> 15, nan >> 31)  # sign kept

    def test_widening_is_exact(self):
        bits = np.array([0x3F80, 0xC000, 0x7F80, 0x0001], dtype=np.uint16)
        self.assertEqual(bf16_to_f32(bits).view(np.uint32).tolist(), [0x3F80_0000, 0xC000_0000, 0x7F80_0000, 0x0001_0000])


class ConfigTest(unittest.TestCase):
    def write(self, text):
        f = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
        f.write(text)
        f.close()
        self.addCleanup(os.unlink, f.name)
        return f.name

    def test_default_config(self):
        path = os.path.join(PYROOT, "..", "..", "conf", "default.toml")
        ep = load_endpoint(path, 1, 2)
        self.assertEqual(ep.collective, Collective(1, "sum", "f32", 65536, 256, 4, 2))
        self.assertEqual(ep.bind, ("10.0.0.3", 50002))
        self.assertEqual(ep.appliance, ("10.0.0.254", 49374))

    def test_ipv6_member_second_port_custom_udp_port(self):
        path = self.write(
            '[dataplane]\ngradient_udp_port = 5000\n'
            '[[port]]\nipv4 = "10.0.0.254"\n[[port]]\nipv4 = "10.1.0.254"\nipv6 = "fd01::fe"\n'
            '[[collective]]\ncollective_id = 3\nop = "max"\ndtype = "bf16"\ntensor_elements = 8\nchunk_elements = 4\n'
            '[[collective.member]]\nrank = 0\nip = "fd01::1"\nudp_port = 6000\nport = 1\nmac = "02:00:00:00:00:01"\n'
            '[[collective.member]]\nrank = 1\nip = "10.0.0.2"\nudp_port = 6001\nmac = "02:00:00:00:00:02"\n'
        )
        ep = load_endpoint(path, 3, 0)
        self.assertEqual((ep.bind, ep.appliance), (("fd01::1", 6000), ("fd01::fe", 5000)))
        self.assertEqual((ep.collective.op, ep.collective.dtype, ep.collective.num_workers), ("max", "bf16", 2))
        self.assertEqual(load_endpoint(path, 3, 1).appliance, ("10.0.0.254", 5000))
        with self.assertRaisesRegex(ConfigError, r"collective 3 has 2 members \(ranks 0 to 1\), no rank 2"):
            load_endpoint(path, 3, 2)
        with self.assertRaisesRegex(ConfigError, "collective_id = 4"):
            load_endpoint(path, 4, 0)

    def test_rocev2_is_refused(self):
        path = self.write(
            '[[port]]\nipv4 = "10.0.0.254"\n'
            '[[collective]]\ncollective_id = 1\nop = "sum"\ndtype = "f32"\ncarriage = "rocev2"\n'
            'tensor_elements = 8\nchunk_elements = 4\n'
            '[[collective.member]]\nrank = 0\nip = "10.0.0.1"\nqpn = 17\nqkey = 1\nmac = "02:00:00:00:00:01"\n'
        )
        with self.assertRaisesRegex(ConfigError, "only the UDP carriage"):
            load_endpoint(path, 1, 0)


def run_clients_into(clients, arrays, offsets):
    """Each client's allreduce_into of its array at its offset, in a thread each; closes them."""
    return run_each(clients, lambda k: clients[k].allreduce_into(arrays[k], offsets[k]))


class ClientTest(unittest.TestCase):
    def check_sum(self, dtype, a, b, want, **fake_opts):
        with FakeAppliance(dtype, **fake_opts) as fake:
            results, clients = run_workers(fake, [a, b], dtype)
        for k in range(2):
            self.assertNotIsInstance(results[k], Exception, results[k])
            got = results[k][0]
            self.assertEqual(got.dtype, a.dtype)
            self.assertEqual(got.shape, a.shape)
            np.testing.assert_array_equal(got, want)
        return fake, clients

    def test_f32_sum_exact_with_short_last_chunk(self):
        a = np.arange(TENSOR, dtype=np.float32) * 0.5
        b = np.full(TENSOR, 0.25, dtype=np.float32)
        fake, clients = self.check_sum("f32", a, b, a + b)
        self.assertEqual(sorted(fake.completed), [(0, 0), (4, 0), (8, 0)])
        s = clients[0].stats
        self.assertEqual((s["chunks"], s["results"], s["retransmits"], s["naks"]), (3, 3, 0, 0))

    def test_i32_sum_wraps(self):
        a = np.array([1, -2, 3, 2**31 - 1, 0, 5, 6, 7, 8, -(2**31)], dtype=np.int32).reshape(2, 5)
        b = np.array([10, 20, 30, 1, 0, 50, 60, 70, 80, -1], dtype=np.int32).reshape(2, 5)
        want = np.array([11, 18, 33, -(2**31), 0, 55, 66, 77, 88, 2**31 - 1], dtype=np.int32).reshape(2, 5)
        self.check_sum("i32", a, b, want)

    def test_f16_sum(self):
        a = np.array([1, 2, 0.5, -3, 1024, 0, -0.0, 7, 8, 9], dtype=np.float16)
        b = np.array([1, 2, 0.25, 3, 1024, 0, -0.0, 1, 2, 3], dtype=np.float16)
        fake, _ = self.check_sum("f16", a, b, a + b)
        self.assertEqual(len(fake.completed), 3)

    def test_f16_three_workers_sum_in_f32_and_round_once(self):
        # Spec section 4 rule 6. 2048 + 1 + 1: f16's spacing at 2048 is 2, so adding in f16
        # step by step gives 2048 (2049 is a tie, to even: 2048; again); widened to f32 the sum
        # is 2050, which f16 holds. Likewise 1 + 2^-11 + 2^-11 is 1 step by step, 1 + 2^-10 once.
        a = np.array([2048, 1, 1, 1, 0, 0, 0, 0, 0, 0], dtype=np.float16)
        b = np.array([1, 2.0**-11, 0, 0, 0, 0, 0, 0, 0, 0], dtype=np.float16)
        c = np.array([1, 2.0**-11, 0, 0, 0, 0, 0, 0, 0, 0], dtype=np.float16)
        want = np.array([2050, 1 + 2.0**-10, 1, 1, 0, 0, 0, 0, 0, 0], dtype=np.float16)
        self.assertEqual(float((a[0] + b[0]) + c[0]), 2048.0)  # what step-by-step f16 gives
        with FakeAppliance("f16", num_workers=3) as fake:
            results, _ = run_n_workers(fake, [a, b, c], "f16")
        for k in range(3):
            self.assertNotIsInstance(results[k], Exception, results[k])
            np.testing.assert_array_equal(results[k][0], want)

    def test_bf16_bit_patterns(self):
        # Integers up to 256 are exact in bf16, so the sums are too: 1+2, 3+4, ...
        xs = np.arange(1, 2 * TENSOR + 1, dtype=np.float32)
        a = (xs[0::2].view(np.uint32) >> 16).astype(np.uint16)
        b = (xs[1::2].view(np.uint32) >> 16).astype(np.uint16)
        want = ((xs[0::2] + xs[1::2]).view(np.uint32) >> 16).astype(np.uint16)
        self.assertEqual(int(a[0]), 0x3F80)
        self.check_sum("bf16", a, b, want)

    @unittest.skipIf(BFLOAT16 is None, "ml_dtypes is not installed")
    def test_ml_dtypes_bfloat16(self):
        a = np.arange(TENSOR).astype(BFLOAT16)
        fake, _ = self.check_sum("bf16", a, a, (2 * np.arange(TENSOR)).astype(BFLOAT16))

    def test_lost_contributions_and_results_are_retransmitted(self):
        a = np.arange(TENSOR, dtype=np.float32)
        b = np.arange(TENSOR, dtype=np.float32) * 3
        fake, clients = self.check_sum("f32", a, b, a * 4, drop_contrib={0, 8}, drop_result={4})
        self.assertGreater(clients[0].stats["retransmits"] + clients[1].stats["retransmits"], 0)
        self.assertGreater(clients[0].stats["retransmits"], 0)  # both lost their first offset 0
        self.assertEqual(sorted(fake.completed), [(0, 0), (4, 0), (8, 0)])

    def test_datagrams_refused_by_a_local_firewall_are_resent(self):
        # A netfilter rule that drops on output makes send() fail with EPERM (ENOBUFS when a
        # queue is full): like loss on the wire, the chunk's timer resends it.
        class Refusing:
            def __init__(self, sock, errs):
                self.sock, self.errs = sock, errs

            def send(self, data):
                if self.errs:
                    raise OSError(self.errs.pop(), "refused")
                return self.sock.send(data)

            def __getattr__(self, name):
                return getattr(self.sock, name)

        a = np.arange(TENSOR, dtype=np.float32)
        with FakeAppliance("f32") as fake:
            clients = [Client(coll(rank=k), bind=(fake.addr[0], 0), appliance=fake.addr, deadline=3.0) for k in range(2)]
            clients[0].sync()  # the start's probes first, unrefused
            clients[0]._sock = Refusing(clients[0]._sock, [errno.EPERM, errno.ENOBUFS, errno.EPERM])
            out = run_clients(clients, [a, a])
        for k in range(2):
            np.testing.assert_array_equal(out[k][0], a * 2)
        # Three chunks, each refused once, then each resent once: 3 sent (+ 3 retransmits).
        self.assertEqual(clients[0].stats["retransmits"], 3)
        self.assertEqual(clients[0].stats["sent"], 3)

    def test_retransmit_timeout_is_four_smallest_round_trips(self):
        c = Client(coll(), bind=("127.0.0.1", 0), appliance=("127.0.0.1", 9), rto=0.02, rto_min=0.002, rto_max=0.5)
        try:
            self.assertEqual(c.current_rto(), 0.02)  # no sample yet
            # The smallest sample counts, not the mean: a chunk that waited 80 ms for a peer's
            # retransmission does not raise the timeout.
            for rtt in (0.010, 0.080, 0.004):
                c._rtt_sample(rtt)
            self.assertAlmostEqual(c.current_rto(), 0.016)
            c._rtt_end_call()  # the next call starts from it; a smaller sample lowers it at once
            self.assertAlmostEqual(c.current_rto(), 0.016)
            c._rtt_sample(0.003)
            self.assertAlmostEqual(c.current_rto(), 0.012)
            c._rtt_end_call()  # a call whose samples are all larger raises it for the next one
            c._rtt_sample(0.050)
            c._rtt_end_call()
            self.assertAlmostEqual(c.current_rto(), 0.2)
            c._rtt_end_call()  # a call without samples keeps the last
            self.assertAlmostEqual(c.current_rto(), 0.2)
            c._rtt_sample(0.00005)  # a quiet LAN: the floor
            self.assertEqual(c.current_rto(), 0.002)
            c._rtt_end_call()
            c._rtt_sample(5.0)
            c._rtt_end_call()  # a path that took seconds: the cap
            self.assertEqual(c.current_rto(), 0.5)
        finally:
            c.close()

    def test_a_call_measures_round_trips(self):
        a = np.arange(TENSOR, dtype=np.float32)
        _, clients = self.check_sum("f32", a, a, a * 2)
        # Each of the three chunks' STATUS and each result answered without a resend is a sample
        # (Karn's rule: a resent one is not); loopback round trips are well under the 20 ms
        # first guess.
        st = clients[0].stats
        results = 3 - min(st["retransmits"], 3)
        if st["probes"] == 3:  # no probe resent (a loaded machine may fire a timer first)
            self.assertEqual(clients[0]._rtt_samples, 3 + results)
        else:
            self.assertLess(clients[0]._rtt_samples, 3 + results)
        if st["retransmits"] == 0:
            self.assertLess(clients[0].current_rto(), 0.02)

    def test_retransmit_flag_on_resends(self):
        seen = []
        with FakeAppliance("f32", drop_contrib={0}) as fake:
            real = fake.handle
            fake.handle = lambda pkt, src: (seen.append(Header.unpack(pkt)), real(pkt, src))
            results, _ = run_workers(fake, [np.ones(TENSOR, np.float32)] * 2)
        self.assertTrue(np.array_equal(results[0][0], np.full(TENSOR, 2, np.float32)))
        firsts = [h for h in seen if h.tensor_offset == 0 and not h.flags & FLAG_PROBE]
        self.assertEqual(firsts[0].flags, 0)
        self.assertTrue(any(h.flags == FLAG_RETRANSMIT for h in firsts))

    def test_two_calls_are_successive_rounds_across_the_wrap(self):
        a = np.arange(TENSOR, dtype=np.float32)
        with FakeAppliance("f32") as fake:
            results, clients = run_workers(fake, [a, a + 1], calls=2, start_round=0xFFFF_FFFF)
        for k in range(2):
            self.assertNotIsInstance(results[k], Exception, results[k])
            for r in results[k]:
                np.testing.assert_array_equal(r, 2 * a + 1)
        rounds = sorted(set(r for _, r in fake.completed))
        self.assertEqual(rounds, [0, 0xFFFF_FFFF])
        self.assertEqual(len(fake.completed), 6)
        self.assertEqual(clients[0].rounds, [1, 1, 1])

    def test_nak_mismatch_raises_at_once(self):
        with FakeAppliance("f32", nak_reason=3) as fake:
            t0 = time.monotonic()
            results, clients = run_workers(fake, [np.ones(TENSOR, np.float32)] * 2)
            elapsed = time.monotonic() - t0
        err = results[0]
        self.assertIsInstance(err, NakError)
        self.assertEqual(err.reason, 3)
        self.assertIn("op/dtype/carriage mismatch", str(err))
        self.assertIn("tensor_offset 0", str(err))
        self.assertLess(elapsed, 1.0)

    def test_silence_is_unreachable(self):
        with FakeAppliance("f32", silent=True) as fake:
            c = Client(coll(), bind=("127.0.0.1", 0), appliance=fake.addr, deadline=0.3)
            t0 = time.monotonic()
            with self.assertRaisesRegex(UnreachableError, r"appliance unreachable: no answer from 127\.0\.0\.1:\d+ in 0\.3 s"):
                c.allreduce(np.ones(TENSOR, np.float32))
            self.assertLess(time.monotonic() - t0, 1.0)
            # The start's PROBEs went unanswered and were resent; no contribution went out.
            self.assertGreater(c.stats["probes"], 3)
            self.assertEqual(c.stats["sent"], 0)
            c.close()

    def test_refused_port_is_unreachable(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()
        s.close()
        # Deadline 5 s, but the ICMP port unreachable ends the call at once.
        c = Client(coll(), bind=("127.0.0.1", 0), appliance=closed, deadline=5.0)
        t0 = time.monotonic()
        with self.assertRaisesRegex(UnreachableError, "refused.*ICMP port unreachable"):
            c.allreduce(np.ones(TENSOR, np.float32))
        self.assertLess(time.monotonic() - t0, 1.0)
        c.close()

    def test_an_address_this_host_does_not_own_is_a_socket_error(self):
        # 192.0.2.0/24 is TEST-NET-1 (RFC 5737): never this host's.
        with self.assertRaisesRegex(SocketError, r"cannot bind 192\.0\.2\.1:50000 \(member 0's address\)"):
            Client(coll(), bind=("192.0.2.1", 50000), appliance=("192.0.2.254", 49374))

    def test_absent_peer_from_the_start_says_so(self):
        # The appliance folds the contribution and waits: the stalled call's PROBEs learn that it
        # waits for rank 1, so the error names the peer instead of blaming the appliance.
        with FakeAppliance("f32") as fake:
            c = Client(coll(), bind=(fake.addr[0], 0), appliance=fake.addr, deadline=0.8)
            c.sync()
            start_probes = c.stats["probes"]
            t0 = time.monotonic()
            with self.assertRaisesRegex(AllreduceTimeout, r"3 of 3 chunks .*: the appliance is waiting for rank 1$") as cm:
                c.allreduce(np.ones(TENSOR, np.float32))
            self.assertLess(time.monotonic() - t0, 2.0)
            c.close()
        self.assertEqual((cm.exception.missing, cm.exception.waiting_for), (3, [1]))
        # 3 at each of a quarter, half and three quarters of the deadline.
        self.assertEqual(c.stats["probes"] - start_probes, 3 * 3)

    def test_absent_peer_in_a_range_past_the_first_chunk_says_so(self):
        # The stalled range's PROBEs name its own chunks (tensor offsets 8: chunk 2), so their
        # STATUS answers count and the error names the peer, as for a whole tensor.
        with FakeAppliance("f32") as fake:
            c = Client(coll(), bind=(fake.addr[0], 0), appliance=fake.addr, deadline=0.8)
            c.sync()
            with self.assertRaisesRegex(AllreduceTimeout, r"1 of 1 chunks .*: the appliance is waiting for rank 1$") as cm:
                c.allreduce_into(np.ones(2, np.float32), offset=8)
            c.close()
        self.assertEqual((cm.exception.missing, cm.exception.waiting_for), (1, [1]))

    def test_a_silent_appliance_mid_call_is_unreachable_not_a_peer(self):
        # It answered the start's probes, then says nothing more (as if it stopped).
        with FakeAppliance("f32") as fake:
            c = Client(coll(), bind=(fake.addr[0], 0), appliance=fake.addr, deadline=0.8)
            c.sync()
            fake.silent = True
            with self.assertRaisesRegex(UnreachableError, "no STATUS answered the 9 PROBEs of the stalled chunks, though it answered before"):
                c.allreduce(np.ones(TENSOR, np.float32))
            c.close()

    def test_stale_round_nak_rejoins_every_chunk(self):
        a = np.arange(TENSOR, dtype=np.float32)
        with FakeAppliance("f32", expect_round=5) as fake:
            results, clients = run_workers(fake, [a, a], calls=2, probe=False)
        for k in range(2):
            self.assertNotIsInstance(results[k], Exception, results[k])
            np.testing.assert_array_equal(results[k][0], 2 * a)
            np.testing.assert_array_equal(results[k][1], 2 * a)
            # One NAK (rate-limited to one per 100 ms) moves all three chunks.
            self.assertEqual(clients[k].stats["rejoins"], 1)
        self.assertEqual(sorted(fake.completed), [(0, 5), (0, 6), (4, 5), (4, 6), (8, 5), (8, 6)])

    def test_the_probe_finds_the_round_the_slot_expects(self):
        a = np.arange(TENSOR, dtype=np.float32)
        with FakeAppliance("f32", expect_round=5) as fake:
            results, clients = run_workers(fake, [a, a], calls=2)
        for k in range(2):
            self.assertNotIsInstance(results[k], Exception, results[k])
            st = clients[k].stats
            self.assertGreaterEqual(st["statuses"], 3)
            self.assertEqual((st["naks"], st["rejoins"]), (0, 0))
        self.assertEqual(sorted(fake.completed), [(0, 5), (0, 6), (4, 5), (4, 6), (8, 5), (8, 6)])

    def test_a_restarted_worker_probes_instead_of_taking_an_old_result(self):
        a, b = np.arange(TENSOR, dtype=np.float32), np.full(TENSOR, 0.5, np.float32)
        with FakeAppliance("f32") as fake:
            rank1 = Client(coll(rank=1), bind=(fake.addr[0], 0), appliance=fake.addr, deadline=3.0)
            first = Client(coll(rank=0), bind=(fake.addr[0], 0), appliance=fake.addr, deadline=3.0)
            results = run_clients([first, rank1], [a, b])
            np.testing.assert_array_equal(results[0][0], a + b)
            # Rank 0 restarts guessing round 0, the last completed one; its probe says round 1.
            rank1 = Client(coll(rank=1), bind=(fake.addr[0], 0), appliance=fake.addr, deadline=3.0, start_round=1, probe=False)
            again = Client(coll(rank=0), bind=(fake.addr[0], 0), appliance=fake.addr, deadline=3.0, start_round=0)
            results = run_clients([again, rank1], [3 * a, b])
            for r in results:
                self.assertNotIsInstance(r, Exception, r)
                np.testing.assert_array_equal(r[0], 3 * a + b)
            self.assertGreaterEqual(again.stats["statuses"], 3)
            self.assertEqual(again.stats["naks"], 0)
            # The fault the probe removes: without it, the guess of the last completed round (1)
            # is answered by rule 3 with that round's kept result, for inputs it did not send.
            guess = Client(coll(rank=0), bind=(fake.addr[0], 0), appliance=fake.addr, deadline=3.0, start_round=1, probe=False)
            np.testing.assert_array_equal(guess.allreduce(a), 3 * a + b)
            guess.close()

    def test_a_worker_restarted_mid_round_gets_that_rounds_result(self):
        a, b = np.arange(TENSOR, dtype=np.float32), np.full(TENSOR, 0.5, np.float32)
        with FakeAppliance("f32") as fake:
            dead = Client(coll(rank=0), bind=(fake.addr[0], 0), appliance=fake.addr, deadline=0.3)
            with self.assertRaises(AllreduceTimeout) as cm:
                dead.allreduce(a)  # contributes round 0 alone, then gives up
            self.assertEqual(cm.exception.waiting_for, [1])
            dead.close()
            # Restarted with a wrong guess (7) while the round is in progress: its probe finds its
            # contribution in (state 2), so it waits for round 0's result, which rank 1's first
            # start then completes.
            clients = [
                Client(coll(rank=k), bind=(fake.addr[0], 0), appliance=fake.addr, deadline=3.0, start_round=7)
                for k in range(2)
            ]
            clients[0].sync()
            self.assertEqual(clients[0].rounds, [0, 0, 0])
            results = run_clients(clients, [a, b])
        for k in range(2):
            self.assertNotIsInstance(results[k], Exception, results[k])
            np.testing.assert_array_equal(results[k][0], a + b)
            self.assertEqual((clients[k].stats["naks"], clients[k].stats["rejoins"]), (0, 0))
        self.assertEqual(sorted(fake.completed), [(0, 0), (4, 0), (8, 0)])

    def test_allreduce_into_a_range_in_place_padded_to_whole_chunks(self):
        # 6 elements at offset 4 of a 10-element tensor in chunks of 4: chunks at 4 (whole) and 8
        # (the tensor's short last chunk); chunk 0 is not sent and keeps its round.
        with FakeAppliance("f32") as fake:
            clients = [Client(coll(rank=k), bind=(fake.addr[0], 0), appliance=fake.addr, deadline=3.0) for k in range(2)]
            bufs = [np.arange(6, dtype=np.float32) + k for k in range(2)]
            views = [b[:] for b in bufs]
            results = run_clients_into(clients, views, offsets=[4, 4])
            for k in range(2):
                self.assertIs(results[k], views[k])
                np.testing.assert_array_equal(bufs[k], np.arange(6, dtype=np.float32) * 2 + 1)  # in place
            self.assertEqual(sorted(fake.completed), [(4, 0), (8, 0)])
            self.assertEqual(clients[0].rounds, [0, 1, 1])
        # 3 elements at offset 0: one chunk of 4 sent, its fourth lane zeros; the result's 3 kept.
        with FakeAppliance("f32") as fake:
            clients = [Client(coll(rank=k), bind=(fake.addr[0], 0), appliance=fake.addr, deadline=3.0) for k in range(2)]
            bufs = [np.full(3, 1.5, dtype=np.float32) for _ in range(2)]
            run_clients_into(clients, bufs, offsets=[0, 0])
            np.testing.assert_array_equal(bufs[0], np.full(3, 3.0, dtype=np.float32))
            self.assertEqual(sorted(fake.completed), [(0, 0)])
        c = Client(coll(), bind=("127.0.0.1", 0), appliance=("127.0.0.1", 9), deadline=1.0)
        with self.assertRaisesRegex(ValueError, "not a multiple of chunk_elements"):
            c.allreduce_into(np.zeros(2, np.float32), offset=2)
        with self.assertRaisesRegex(ValueError, "run past tensor_elements"):
            c.allreduce_into(np.zeros(4, np.float32), offset=8)
        with self.assertRaisesRegex(ValueError, "C-contiguous"):
            c.allreduce_into(np.zeros(8, np.float32)[::2], offset=0)
        c.close()

    def test_wrong_dtype_or_size_is_a_value_error(self):
        with FakeAppliance("f32") as fake:
            c = Client(coll(), bind=("127.0.0.1", 0), appliance=fake.addr, deadline=0.3)
            with self.assertRaisesRegex(ValueError, "float64"):
                c.allreduce(np.ones(TENSOR))
            with self.assertRaisesRegex(ValueError, "tensor_elements = 10"):
                c.allreduce(np.ones(TENSOR + 1, np.float32))
            c.close()
            self.assertEqual(fake.contributions, 0)

    def test_ipv6_loopback(self):
        try:
            with FakeAppliance("f32", host="::1") as fake:
                results, _ = run_workers(fake, [np.ones(TENSOR, np.float32)] * 2)
        except OSError as e:
            self.skipTest(f"no IPv6 loopback: {e}")
        np.testing.assert_array_equal(results[1][0], np.full(TENSOR, 2, np.float32))

    def test_many_chunks_with_a_small_window(self):
        n = 4096 * 8
        a = np.arange(n, dtype=np.float32)
        with FakeAppliance("f32", drop_contrib={0, 256, 4088}) as fake:
            clients = [Client(Collective(7, "sum", "f32", n, 256, 2, k), bind=("127.0.0.1", 0), appliance=fake.addr, window=16) for k in range(2)]
            out = run_clients(clients, [a, a])
        np.testing.assert_array_equal(out[0][0], 2 * a)
        np.testing.assert_array_equal(out[1][0], 2 * a)


def free_port(kind=socket.SOCK_STREAM):
    s = socket.socket(socket.AF_INET, kind)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class RingTest(unittest.TestCase):
    def ring(self, arrays, op="sum"):
        peers = [("127.0.0.1", free_port()) for _ in arrays]
        return run_threads(len(arrays), lambda k: ring_allreduce(arrays[k], k, peers, op), timeout=15)

    def test_f32_three_ranks(self):
        rng = np.random.default_rng(1)
        arrays = [rng.integers(-1000, 1000, size=(7, 11)).astype(np.float32) for _ in range(3)]
        for got in self.ring(arrays):
            self.assertNotIsInstance(got, Exception, got)
            np.testing.assert_array_equal(got, arrays[0] + arrays[1] + arrays[2])
            self.assertEqual(got.dtype, np.float32)

    def test_large_segments_do_not_deadlock(self):
        arrays = [np.full(1 << 20, k + 1, dtype=np.int32) for k in range(3)]
        for got in self.ring(arrays):
            self.assertNotIsInstance(got, Exception, got)
            np.testing.assert_array_equal(got, np.full(1 << 20, 6, dtype=np.int32))

    def test_bf16_three_ranks(self):
        vals = [np.array([1, 2, 3, 0.5, -4, 100], np.float32) * (k + 1) for k in range(3)]
        arrays = [(v.view(np.uint32) >> 16).astype(np.uint16) for v in vals]
        want = ((vals[0] + vals[1] + vals[2]).view(np.uint32) >> 16).astype(np.uint16)
        for got in self.ring(arrays):
            self.assertNotIsInstance(got, Exception, got)
            self.assertEqual(got.dtype, np.uint16)
            np.testing.assert_array_equal(got, want)
        # bf16 rounding per step: 256 + 1 is a tie that rounds to even 256, twice.
        ones = [np.array([0x4380, 0x3F80], np.uint16), np.array([0x3F80, 0x3F80], np.uint16), np.array([0x3F80, 0x3F80], np.uint16)]
        for got in self.ring(ones):
            self.assertEqual(got[1], 0x4040)  # 1 + 1 + 1 = 3 exactly
            self.assertIn(int(got[0]), (0x4380, 0x4381))  # 258 = 0x4381 in one rounding, 256 in two


class CliTest(unittest.TestCase):
    def test_two_workers_with_ring(self):
        with FakeAppliance("f32") as fake, tempfile.TemporaryDirectory() as d:
            ports = [free_port(socket.SOCK_DGRAM) for _ in range(2)]
            conf = os.path.join(d, "appliance.toml")
            with open(conf, "w") as f:
                f.write(
                    f'[dataplane]\ngradient_udp_port = {fake.addr[1]}\n[[port]]\nipv4 = "127.0.0.1"\n'
                    '[[collective]]\ncollective_id = 7\nop = "sum"\ndtype = "f32"\ntensor_elements = 10\nchunk_elements = 4\n'
                    + "".join(f'[[collective.member]]\nrank = {k}\nip = "127.0.0.1"\nudp_port = {ports[k]}\nmac = "02:00:00:00:00:0{k}"\n' for k in range(2))
                )
            inputs = [np.arange(10, dtype=np.float32) * (k + 1) for k in range(2)]
            ring = ",".join(f"127.0.0.1:{free_port()}" for _ in range(2))
            env = dict(os.environ, PYTHONPATH=PYROOT)
            procs = []
            for k in range(2):
                inputs[k].tofile(os.path.join(d, f"in{k}.bin"))
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "gradclient", "--config", conf, "--collective", "7", "--rank", str(k),
                     "--input", os.path.join(d, f"in{k}.bin"), "--output", os.path.join(d, f"out{k}.bin"),
                     "--repeat", "2", "--timeout-ms", "3000", "--stats-json", os.path.join(d, f"s{k}.json"), "--ring", ring],
                    env=env, stderr=subprocess.PIPE, text=True,
                ))
            for p in procs:
                _, err = p.communicate(timeout=20)
                self.assertEqual(p.returncode, 0, err)
            for k in range(2):
                out = np.fromfile(os.path.join(d, f"out{k}.bin"), dtype="<f4")
                np.testing.assert_array_equal(out, inputs[0] + inputs[1])
                np.testing.assert_array_equal(np.fromfile(os.path.join(d, f"out{k}.bin.ring"), dtype="<f4"), inputs[0] + inputs[1])
                with open(os.path.join(d, f"s{k}.json")) as f:
                    st = json.load(f)
                self.assertEqual((st["impl"], st["rank"], st["collective"], st["chunks"], st["results"]), ("python", k, 7, 6, 6))
                self.assertEqual((len(st["seconds"]), len(st["ring_seconds"])), (2, 2))
            self.assertEqual(sorted(set(r for _, r in fake.completed)), [0, 1])

            # A wrong-sized input is a usage error.
            np.zeros(3, np.float32).tofile(os.path.join(d, "bad.bin"))
            p = subprocess.run(
                [sys.executable, "-m", "gradclient", "--config", conf, "--collective", "7", "--rank", "0",
                 "--input", os.path.join(d, "bad.bin"), "--output", os.path.join(d, "x.bin")],
                env=env, capture_output=True, text=True, timeout=20,
            )
            self.assertEqual(p.returncode, 2)
            self.assertIn("needs 40", p.stderr)


if __name__ == "__main__":
    unittest.main()
