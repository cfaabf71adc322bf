"""A small appliance stand-in on loopback: spec section 4 rules 1 to 4 for one collective over UDP
and the STATUS answer to a PROBE (section 7), with knobs to lose packets, NAK, stay silent, ignore
probes, or expect a given round."""

from __future__ import annotations

import os
import socket
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from gradclient.lanes import bf16_to_f32, f32_to_bf16  # noqa: E402
from gradclient.wire import (  # noqa: E402
    DTYPES,
    FLAG_NAK,
    FLAG_PROBE,
    FLAG_RESULT,
    HEADER,
    HEADER_LEN,
    NAK_STALE_ROUND,
    RANK_APPLIANCE,
    ROUND_MOD,
    probe_len,
)


class FakeAppliance(threading.Thread):
    def __init__(
        self,
        dtype: str = "f32",
        num_workers: int = 2,
        host: str = "127.0.0.1",
        drop_contrib=(),
        drop_result=(),
        nak_reason: int | None = None,
        silent: bool = False,
        expect_round: int | None = None,
        nak_interval: float = 0.1,
        ignore_probes: bool = False,
    ):
        super().__init__(daemon=True)
        self.dtype = dtype
        self.wire_dtype = DTYPES[dtype][2]
        self.num_workers = num_workers
        self.drop_contrib = set(drop_contrib)  # offsets whose first contribution per rank is lost
        self.drop_result = set(drop_result)  # offsets whose first result per member is lost
        self.nak_reason = nak_reason
        self.silent = silent
        self.expect_round = expect_round  # the round a slot without history expects
        self.nak_interval = nak_interval
        self.ignore_probes = ignore_probes  # an appliance older than revision 1.1
        self.probes = 0
        fam = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(fam, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.bind((host, 0))
        self.sock.settimeout(0.02)
        self.addr = self.sock.getsockname()[:2]
        self.slots: dict[int, dict] = {}
        self.members: dict[int, tuple] = {}
        self.completed: list[tuple[int, int]] = []  # (offset, round) in completion order
        self.contributions = 0
        self.duplicates = 0
        self.naks_sent = 0
        self._dropped: set = set()
        self._last_nak: dict = {}
        self._halt = threading.Event()

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self._halt.set()
        self.join(2)
        self.sock.close()

    def run(self):
        buf = bytearray(65536)
        while not self._halt.is_set():
            try:
                size, src = self.sock.recvfrom_into(buf)
            except (TimeoutError, OSError):
                continue
            self.handle(bytes(buf[:size]), src)

    def nak(self, hdr, reason: int, round_: int, src) -> None:
        now = time.monotonic()
        if now - self._last_nak.get(src, -1.0) < self.nak_interval:
            return  # one NAK per source per interval, as the appliance does
        self._last_nak[src] = now
        vf, op, cid, dt, _, _, off, _, _ = hdr
        self.sock.sendto(HEADER.pack((vf & 0xF0) | FLAG_NAK, op, cid, dt, reason, RANK_APPLIANCE, off, 0, round_), src)
        self.naks_sent += 1

    def send_result(self, slot, rank: int) -> None:
        off = slot["offset"]
        if off in self.drop_result and (off, rank, "r") not in self._dropped:
            self._dropped.add((off, rank, "r"))
            return
        self.sock.sendto(slot["result"], self.members[rank])

    def reduce(self, parts: list[bytes]) -> bytes:
        lanes = [np.frombuffer(p, dtype=self.wire_dtype) for p in parts]
        if self.dtype == "bf16":
            acc = bf16_to_f32(lanes[0]).copy()
            for x in lanes[1:]:
                acc += bf16_to_f32(x)
            return f32_to_bf16(acc).astype("<u2").tobytes()
        if self.dtype == "f16":
            # Spec section 4 rule 6: widened exactly to f32, summed in f32, rounded once.
            acc = lanes[0].astype(np.float32)
            for x in lanes[1:]:
                acc += x.astype(np.float32)
            return acc.astype("<f2").tobytes()
        acc = lanes[0].copy()
        for x in lanes[1:]:
            acc += x  # f32: IEEE; i32: wrapping
        return acc.tobytes()

    def status(self, hdr, src) -> None:
        """A PROBE's STATUS (section 7): the slot's state, round and rank bitmap."""
        vf, op, cid, dt, _, rank, off, dl, rnd = hdr
        plen = probe_len(self.num_workers)
        if dl != plen:
            self.nak(hdr, 6, rnd, src)
            return
        if self.ignore_probes:
            return
        self.probes += 1
        slot = self.slots.get(off)
        bitmap = bytearray(plen)
        if slot is not None and slot["cur"] is not None:
            for k in slot["parts"]:
                bitmap[k // 8] |= 1 << (k % 8)
            state, round_ = (2 if rank in slot["parts"] else 1), slot["cur"]
        elif slot is not None and slot["last"] is not None:
            state, round_ = 3, (slot["last"] + 1) % ROUND_MOD
        elif self.expect_round is not None:
            state, round_ = 3, self.expect_round  # as if expect_round - 1 had completed
        else:
            state, round_ = 0, 0
        head = HEADER.pack((vf & 0xF0) | FLAG_RESULT | FLAG_PROBE, op, cid, dt, state, RANK_APPLIANCE, off, plen, round_)
        self.sock.sendto(head + bytes(bitmap), src)

    def handle(self, pkt: bytes, src) -> None:
        if self.silent or len(pkt) < HEADER_LEN:
            return
        hdr = HEADER.unpack_from(pkt)
        vf, op, cid, dt, _, rank, off, dl, rnd = hdr
        if vf & (FLAG_RESULT | FLAG_NAK):
            return
        if self.nak_reason is not None:
            self.nak(hdr, self.nak_reason, rnd, src)
            return
        if vf & FLAG_PROBE:
            self.status(hdr, src)
            return
        if off in self.drop_contrib and (off, rank, "c") not in self._dropped:
            self._dropped.add((off, rank, "c"))
            return
        self.contributions += 1
        self.members[rank] = src
        slot = self.slots.setdefault(off, {"offset": off, "cur": None, "parts": {}, "last": None, "result": None})
        if slot["last"] is not None and rnd == slot["last"]:
            self.send_result(slot, rank)  # rule 3
            return
        if slot["cur"] is None:
            expected = (slot["last"] + 1) % ROUND_MOD if slot["last"] is not None else self.expect_round
            if expected is not None and rnd != expected:
                self.nak(hdr, NAK_STALE_ROUND, expected, src)
                return
            slot["cur"] = rnd
        elif rnd != slot["cur"]:
            self.nak(hdr, NAK_STALE_ROUND, slot["cur"], src)
            return
        if rank in slot["parts"]:
            self.duplicates += 1
            return
        slot["parts"][rank] = pkt[HEADER_LEN : HEADER_LEN + dl]
        if len(slot["parts"]) < self.num_workers:
            return
        payload = self.reduce([slot["parts"][k] for k in sorted(slot["parts"])])
        slot["result"] = HEADER.pack((vf & 0xF0) | FLAG_RESULT, op, cid, dt, 0, RANK_APPLIANCE, off, dl, rnd) + payload
        slot["last"], slot["cur"], slot["parts"] = rnd, None, {}
        self.completed.append((off, rnd))
        for k in sorted(self.members):
            self.send_result(slot, k)


def run_threads(n, call, timeout=10):
    """`call(k)` for k in 0..n, each in its own thread (the ranks of a collective must run at
    once), each joined for at most `timeout` seconds. Returns per k what `call` returned, or the
    exception it raised (None if it is still running)."""
    results: list = [None] * n

    def work(k):
        try:
            results[k] = call(k)
        except Exception as e:  # reported by the test
            results[k] = e

    threads = [threading.Thread(target=work, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    return results


def run_each(clients, call):
    """`call(k)` for each client's rank k, each in its own thread ([`run_threads`]); then closes
    the clients. Returns per rank what `call` returned, or the exception it raised."""
    results = run_threads(len(clients), call)
    for c in clients:
        c.close()
    return results
