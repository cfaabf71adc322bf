"""The classic ring AllReduce over TCP: the host-only baseline the appliance is compared against.

Reduce-scatter then all-gather, 2(n-1) steps; at each step every rank sends 1/n of the tensor to
rank (k+1) % n and receives 1/n from rank (k-1) % n. Rank k listens on peers[k].

Arithmetic: each step reduces in the array's dtype with numpy (f16 through numpy's float16, i32
wrapping); bf16 lanes (uint16 bit patterns, or ml_dtypes.bfloat16) are widened to f32, reduced and
rounded to nearest-even back to bf16 at every step. Unlike the appliance, which rounds f16/bf16
once, a float16/bf16 ring sum rounds n-1 times.
"""

from __future__ import annotations

import socket
import struct
import threading
import time

import numpy as np

from .lanes import BFLOAT16, bf16_to_f32, f32_to_bf16

#: Seconds a rank keeps retrying its connection to the next rank while peers start.
CONNECT_TIMEOUT = 10.0
#: Seconds a step may wait for data before the ring is declared broken.
IO_TIMEOUT = 30.0

_HELLO = struct.Struct(">I")  # the connecting rank, so the listener checks it is its predecessor


class RingError(ConnectionError):
    """A peer of the ring could not be reached or went away."""


def _is_bf16(a: np.ndarray) -> bool:
    return a.dtype == np.uint16 or (BFLOAT16 is not None and a.dtype == BFLOAT16)


def _reducer(op: str, bf16: bool):
    fn = {"sum": np.add, "max": np.maximum, "min": np.minimum}.get(op)
    if fn is None:
        raise ValueError(f"op {op!r}: expected sum, max or min")
    if bf16:
        def reduce_bf16(acc: np.ndarray, inc: np.ndarray) -> None:
            acc[:] = f32_to_bf16(fn(bf16_to_f32(acc), bf16_to_f32(inc)))
        return reduce_bf16

    def reduce_native(acc: np.ndarray, inc: np.ndarray) -> None:
        fn(acc, inc, out=acc)
    return reduce_native


def _recv_exact(sock: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        k = sock.recv_into(view[got:])
        if k == 0:
            raise RingError("ring peer closed the connection")
        got += k


class Ring:
    """Connections of rank `rank` to its ring neighbours; `allreduce` as many times as needed."""

    def __init__(self, rank: int, peers: list, connect_timeout: float = CONNECT_TIMEOUT, io_timeout: float = IO_TIMEOUT):
        self.rank = rank
        self.peers = [(p[0], int(p[1])) for p in peers]
        self.n = len(self.peers)
        if not 0 <= rank < self.n:
            raise ValueError(f"rank {rank} is not in 0 to {self.n - 1}")
        self._next = self._prev = None
        if self.n == 1:
            return
        me = self.peers[rank]
        family = socket.AF_INET6 if ":" in me[0] else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(me)
            listener.listen(4)
            self._next = self._connect(self.peers[(rank + 1) % self.n], connect_timeout)
            self._prev = self._accept(listener, (rank - 1) % self.n, connect_timeout)
        except BaseException:
            self.close()
            raise
        finally:
            listener.close()
        for s in (self._next, self._prev):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.settimeout(io_timeout)

    def _connect(self, addr, timeout: float) -> socket.socket:
        end = time.monotonic() + timeout
        while True:
            try:
                s = socket.create_connection(addr, timeout=max(end - time.monotonic(), 0.1))
                s.sendall(_HELLO.pack(self.rank))
                return s
            except OSError as e:
                if time.monotonic() >= end:
                    raise RingError(f"ring: cannot connect to rank {(self.rank + 1) % self.n} at {addr[0]}:{addr[1]} in {timeout:g} s: {e}") from e
                time.sleep(0.05)

    def _accept(self, listener: socket.socket, want: int, timeout: float) -> socket.socket:
        end = time.monotonic() + timeout
        while True:
            listener.settimeout(max(end - time.monotonic(), 0.01))
            try:
                s, _ = listener.accept()
            except TimeoutError as e:
                raise RingError(f"ring: rank {want} did not connect in {timeout:g} s") from e
            s.settimeout(max(end - time.monotonic(), 0.01))
            hello = bytearray(_HELLO.size)
            try:
                _recv_exact(s, memoryview(hello))
            except (OSError, RingError):
                s.close()
                continue
            if _HELLO.unpack(hello)[0] == want:
                return s
            s.close()  # not our predecessor

    def close(self) -> None:
        for s in (self._next, self._prev):
            if s is not None:
                s.close()
        self._next = self._prev = None

    def __enter__(self) -> "Ring":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def allreduce(self, array: np.ndarray, op: str = "sum") -> np.ndarray:
        """The reduction of `array` over the ring: a new array of the same shape and dtype."""
        array = np.asarray(array)
        out = np.array(array, copy=True, order="C")
        if self.n == 1:
            return out
        bf16 = _is_bf16(out)
        flat = out.reshape(-1)
        if bf16:
            flat = flat.view(np.uint16)
        reduce = _reducer(op, bf16)
        n, k = self.n, self.rank
        bounds = [len(flat) * i // n for i in range(n + 1)]
        seg = lambda i: flat[bounds[i % n] : bounds[i % n + 1]]  # noqa: E731
        incoming = np.empty(bounds[1] - bounds[0] + 1, dtype=flat.dtype)
        # Reduce-scatter: after n-1 steps rank k holds the full reduction of segment k+1.
        for step in range(n - 1):
            got = self._exchange(seg(k - step), seg(k - step - 1).size, incoming)
            reduce(seg(k - step - 1), got)
        # All-gather: pass the finished segments around.
        for step in range(n - 1):
            got = self._exchange(seg(k + 1 - step), seg(k - step).size, incoming)
            seg(k - step)[:] = got
        return out

    def _exchange(self, send: np.ndarray, recv_len: int, incoming: np.ndarray) -> np.ndarray:
        """Sends `send` to the next rank while receiving `recv_len` lanes from the previous one.

        The send runs in a thread so that two ranks sending large segments to each other cannot
        both block on full socket buffers.
        """
        failure: list[BaseException] = []
        payload = memoryview(np.ascontiguousarray(send).view(np.uint8))

        def sender() -> None:
            try:
                self._next.sendall(payload)
            except BaseException as e:  # reported by the caller
                failure.append(e)

        t = threading.Thread(target=sender, daemon=True)
        t.start()
        got = incoming[:recv_len]
        try:
            _recv_exact(self._prev, memoryview(got.view(np.uint8)))
        except TimeoutError as e:
            raise RingError("ring: timed out waiting for the previous rank") from e
        finally:
            t.join()
        if failure:
            raise RingError(f"ring: sending to the next rank failed: {failure[0]}") from failure[0]
        return got


def ring_allreduce(array: np.ndarray, rank: int, peers: list, op: str = "sum", **opts) -> np.ndarray:
    """One ring AllReduce of `array` among `peers` ((ip, port) of ranks 0..n-1), this being `rank`."""
    with Ring(rank, peers, **opts) as ring:
        return ring.allreduce(array, op)
