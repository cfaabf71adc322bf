"""A worker's side of the gradient protocol over the UDP carriage (spec sections 2 to 5).

One datagram per chunk, a window of chunks in flight, a retransmit timer per chunk with
exponential backoff, rounds per chunk (rule 4) asked of the appliance before the first call
(PROBE and STATUS, section 7) with rejoin on a stale-round NAK (reason 7), and clear errors
instead of silent hangs: a stalled call probes its chunks and names the ranks the appliance waits
for, or says that the appliance does not answer.
"""

from __future__ import annotations

import errno
import heapq
import ipaddress
import math
import socket
import time
from collections.abc import Iterator

import numpy as np

from .config import Collective, load_endpoint
from .lanes import wire_view
from .wire import (
    DEFAULT_UDP_PORT,
    DTYPES,
    FLAG_NAK,
    FLAG_PROBE,
    FLAG_RESULT,
    FLAG_RETRANSMIT,
    HEADER,
    HEADER_LEN,
    NAK_STALE_ROUND,
    OPS,
    RANK_APPLIANCE,
    ROUND_MOD,
    STATE_COMPLETED,
    STATE_NO_HISTORY,
    STATE_WITH_RANK,
    STATE_WITHOUT_RANK,
    VERSION,
    nak_reason_text,
    probe_len,
)

#: Rejoins (reason-7 NAKs acted upon) allowed in one call before giving up.
MAX_REJOINS = 8
#: A stalled call probes its chunks in flight every deadline / STALL_PROBES_PER_DEADLINE seconds
#: without progress (three times before it fails).
STALL_PROBES_PER_DEADLINE = 4
#: Flags of a STATUS.
_STATUS_FLAGS = FLAG_RESULT | FLAG_PROBE
#: Receive buffer asked of the kernel: a full window of results from every call in a burst.
RCVBUF_BYTES = 4 << 20
#: OS errors that mean the appliance (or the path to it) is not there.
_UNREACHABLE_ERRNOS = {errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN}
# A datagram the host itself refused to send: a netfilter rule dropped it on output (EPERM) or a
# queue was full (ENOBUFS). Like loss on the wire: the chunk's timer resends it.
_LOST_ERRNOS = {errno.EPERM, errno.ENOBUFS}


class GradientError(Exception):
    """Base of the errors an allreduce call raises."""


class NakError(GradientError):
    """The appliance refused a contribution (spec section 5)."""

    def __init__(self, reason: int, offset: int, collective_id: int, detail: str = ""):
        self.reason = reason
        self.offset = offset
        self.collective_id = collective_id
        msg = (
            f"appliance refused the chunk at tensor_offset {offset} of collective {collective_id}: "
            f"NAK reason {reason} ({nak_reason_text(reason)})"
        )
        super().__init__(msg + (f"; {detail}" if detail else ""))


class UnreachableError(GradientError, ConnectionError):
    """Nothing at all came back from the appliance before the deadline, or the host reported it
    unreachable (ICMP port or host unreachable: ECONNREFUSED, EHOSTUNREACH, ENETUNREACH)."""


class SocketError(GradientError, OSError):
    """The member's address cannot be bound (not this host's, or in use) or connected."""


class AllreduceTimeout(GradientError, TimeoutError):
    """The appliance answered, but some chunks never completed (peers absent or too slow).

    `waiting_for` lists the ranks the stalled chunks' slots wait for, as the STATUS answers to
    the call's PROBEs said (empty: they named none; None: no STATUS came, probing off)."""

    def __init__(self, msg: str, missing: int, waiting_for: list[int] | None = None):
        super().__init__(msg)
        self.missing = missing
        self.waiting_for = waiting_for


def _fmt_addr(addr) -> str:
    ip, port = addr[0], addr[1]
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def _pop_due(timers: list, now: float, stale) -> Iterator[tuple]:
    """Pops and yields the entries of the heap `timers` of (due, idx, ...) tuples (due: monotonic
    seconds) that are due at `now`, earliest first; drops on the way the entries `stale(entry)`
    says are no longer wanted. Entries pushed while iterating are seen if due."""
    while timers:
        entry = timers[0]
        if stale(entry):
            heapq.heappop(timers)
            continue
        if entry[0] > now:
            break
        heapq.heappop(timers)
        yield entry


def _answer(view: memoryview, size: int, cid: int, st: dict) -> tuple | None:
    """The header of the datagram of `size` bytes received in `view`, if it is one of this
    protocol's version about collective `cid`: (flags, op, dtype, reason, rank, offset,
    data_length, round); None for anything else. Counts a NAK in st["naks"].

    Raises NakError for a NAK of any reason but a stale round (the caller handles those)."""
    if size < HEADER_LEN:
        return None
    vf, r_op, r_cid, r_dt, reason, r_rank, off, dl, rnd = HEADER.unpack_from(view)
    if vf >> 4 != VERSION or r_cid != cid:
        return None
    flags = vf & 0xF
    # Spec section 5: a NAK's flags are NAK alone; RESULT | NAK and other mixes are not one.
    if flags == FLAG_NAK:
        st["naks"] += 1
        if reason != NAK_STALE_ROUND:
            raise NakError(reason, off, cid)
    return flags, r_op, r_dt, reason, r_rank, off, dl, rnd


class Client:
    """A member of one collective, talking to the appliance over UDP.

    `bind` is this member's (ip, udp_port) as the appliance's config names it (port 0 picks a free
    one); `appliance` is the appliance port's (ip, gradient_udp_port). `rto` (the retransmit
    timeout until the first round-trip sample), `rto_min` and `rto_max` are seconds: once chunks
    come back, a chunk's first timeout is 4 x the smallest round trip of the current or previous
    call (samples only from chunks answered without a resend, Karn's rule; the smallest, because
    a chunk's round trip also holds the wait for the slowest peer, under loss that peer's own
    timeout) within [rto_min, rto_max], doubled per resend; `deadline` is the seconds an allreduce call may go without a chunk completing
    before it fails. Rounds advance by one per call. Before the first call the client asks the
    appliance every chunk's round (`sync`, PROBE and STATUS, spec section 7): a worker that
    starts or restarts must not guess (rule 4), since a guess equal to the slot's last completed
    round is answered with that old result. `start_round` is the round of a chunk whose slot has
    no history, or of every chunk with `probe=False` (an appliance older than revision 1.1).
    """

    def __init__(
        self,
        collective: Collective,
        bind: tuple,
        appliance: tuple = ("127.0.0.1", DEFAULT_UDP_PORT),
        window: int = 64,
        rto: float = 0.02,
        rto_max: float = 0.5,
        deadline: float = 10.0,
        start_round: int = 0,
        rto_min: float = 0.01,
        probe: bool = True,
    ):
        if window < 1:
            raise ValueError("window must be at least 1")
        if rto <= 0 or rto_min <= 0 or rto_max < rto or rto_max < rto_min or deadline <= 0:
            raise ValueError("need 0 < rto <= rto_max, 0 < rto_min <= rto_max and deadline > 0")
        self.collective = collective
        self.window = window
        self.rto = rto
        self.rto_min = rto_min
        self.rto_max = rto_max
        # Smallest round trip (s) of the current call and of the previous call that had one.
        self._rtt_best = math.inf
        self._rtt_last = math.inf
        self._rtt_samples = 0
        self.deadline = deadline
        ip = appliance[0]
        port = appliance[1] if len(appliance) > 1 else DEFAULT_UDP_PORT
        self.appliance = (ip, port)
        family = socket.AF_INET6 if ipaddress.ip_address(ip).version == 6 else socket.AF_INET
        if ipaddress.ip_address(bind[0]).version != ipaddress.ip_address(ip).version:
            raise ValueError(f"bind address {bind[0]} and appliance address {ip} are of different IP families")
        self._sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            try:
                self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF_BYTES)
            except OSError:
                pass  # best effort: the kernel caps it at rmem_max
            self._sock.bind((bind[0], bind[1]))
            # Connected: the kernel keeps only the appliance's datagrams and reports ICMP errors.
            self._sock.connect(self.appliance)
        except OSError as e:
            self._sock.close()
            raise SocketError(
                e.errno,
                f"cannot bind {_fmt_addr(bind)} (member {collective.rank}'s address) or connect to "
                f"{_fmt_addr(self.appliance)}: {e.strerror}; run rank {collective.rank} on the host that owns it",
            ) from e
        self.bind = self._sock.getsockname()[:2]
        self._heard = False
        self.probe = probe
        self._synced = not probe

        c = collective
        self._op = OPS[c.op]
        self._dtype_code, self._lane_bytes, self._wire_dtype = DTYPES[c.dtype]
        n = c.num_chunks
        self._rounds = [start_round % ROUND_MOD] * n
        self._sendbuf = bytearray(HEADER_LEN + c.chunk_elements * self._lane_bytes)
        self._sendview = memoryview(self._sendbuf)
        self._recvbuf = bytearray(65536)
        self._recvview = memoryview(self._recvbuf)
        self.stats = {
            "chunks": 0,
            "sent": 0,
            "retransmits": 0,
            "results": 0,
            "stale_results": 0,
            "naks": 0,
            "rejoins": 0,
            "probes": 0,
            "statuses": 0,
            "seconds": 0.0,
        }
        self._probe_len = probe_len(c.num_workers)
        self._probebuf = bytearray(HEADER_LEN + self._probe_len)

    @classmethod
    def from_appliance_config(cls, path: str, collective_id: int, rank: int, **opts) -> "Client":
        """A client for member `rank` of collective `collective_id` in the appliance TOML `path`.

        `opts` are the constructor's keywords; `bind` and `appliance` given here override the
        config's addresses.
        """
        ep = load_endpoint(path, collective_id, rank)
        opts.setdefault("bind", ep.bind)
        opts.setdefault("appliance", ep.appliance)
        return cls(ep.collective, **opts)

    @property
    def rounds(self) -> list[int]:
        """Each chunk's round for the next call."""
        return list(self._rounds)

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def allreduce(self, array: np.ndarray) -> np.ndarray:
        """The reduction of `array` over every member: a new array of the same shape and dtype.

        Raises ValueError (dtype or size mismatch), NakError, UnreachableError, AllreduceTimeout.
        """
        c = self.collective
        array = np.asarray(array)
        lanes = wire_view(array, c.dtype)
        if lanes.size != c.tensor_elements:
            raise ValueError(f"array has {lanes.size} elements, collective {c.collective_id} has tensor_elements = {c.tensor_elements}")
        out = np.empty(c.tensor_elements, dtype=self._wire_dtype)
        self._call(memoryview(lanes.view(np.uint8)), memoryview(out.view(np.uint8)), 0, c.num_chunks)
        if array.dtype.byteorder != ">":
            out = out.view(array.dtype)
        return out.reshape(array.shape)

    def allreduce_into(self, array: np.ndarray, offset: int = 0) -> np.ndarray:
        """Reduces `array` in place as the elements [offset, offset + array.size) of the
        collective's tensor; returns `array`.

        `array` must be C-contiguous, of the collective's lane dtype (as `allreduce` accepts it) in
        native little-endian order: its memory is sent from and the result written back to it,
        chunk by chunk, without a copy. `offset` is a multiple of `chunk_elements` (spec section 4
        rule 5). Only the chunks covering the range take part: the last one is padded with zeros
        up to a whole chunk (or to the tensor's end, where the spec allows a short chunk), and the
        padding's result is discarded. Those chunks' rounds advance by one; the other chunks keep
        theirs, so every member must reduce the same ranges in the same order.

        Raises ValueError (dtype, layout, offset or size), NakError, UnreachableError,
        AllreduceTimeout.
        """
        c = self.collective
        if not isinstance(array, np.ndarray) or not array.flags.c_contiguous or not array.flags.writeable:
            raise ValueError("allreduce_into needs a writeable C-contiguous numpy array")
        if array.dtype.byteorder == ">":
            raise ValueError("allreduce_into needs an array in little-endian byte order")
        lanes = wire_view(array, c.dtype)
        if offset < 0 or offset % c.chunk_elements:
            raise ValueError(f"offset {offset} is not a multiple of chunk_elements = {c.chunk_elements} (spec section 4 rule 5)")
        if offset + lanes.size > c.tensor_elements:
            raise ValueError(
                f"elements [{offset}, {offset + lanes.size}) run past tensor_elements = {c.tensor_elements} of collective {c.collective_id}"
            )
        if lanes.size == 0:
            return array
        first = offset // c.chunk_elements
        count = -(-lanes.size // c.chunk_elements)
        view = memoryview(lanes.view(np.uint8))
        self._call(view, view, first, count)
        return array

    def _call(self, src: memoryview, dst: memoryview, first: int, count: int) -> None:
        """One call over chunks [first, first + count): `src` holds the bytes of the range's
        elements from chunk `first`'s start (possibly fewer than the chunks span: the rest is sent
        as zeros), `dst` receives as many. Probes first if needed; advances the chunks' rounds."""
        if not self._synced:
            self.sync()
        start = time.monotonic()
        try:
            self._run(src, dst, first, count)
        finally:
            self._rtt_end_call()
            # Successive calls are successive rounds, even after a failure: a round whose result
            # the appliance may already keep is never reused for other data.
            rounds = self._rounds
            for i in range(first, first + count):
                rounds[i] = (rounds[i] + 1) % ROUND_MOD
            self.stats["seconds"] = time.monotonic() - start

    def sync(self) -> None:
        """Asks the appliance, for every chunk, which round its slot accepts from this rank (PROBE
        and STATUS, spec section 7) and takes it: the round in progress (states 1 and 2; in state
        2 this rank's contribution is in, and the next call gets that round's result whatever it
        sends), the completed round + 1 (state 3), or the chunk's current round when the slot has
        no history (state 0; at first `start_round`). A window of probes in flight, each resent
        on its timer. The first `allreduce` calls it when `probe` is on.

        Raises NakError (reasons 1-6), UnreachableError (no STATUS for `deadline` seconds).
        """
        c = self.collective
        st = self.stats
        n, ce = c.num_chunks, c.chunk_elements
        rounds = self._rounds
        cid = c.collective_id
        plen = self._probe_len
        recvview = self._recvview
        op, dt = self._op, self._dtype_code
        known = bytearray(n)
        inflight: set[int] = set()
        rto = [self.current_rto()] * n
        sent_at = [0.0] * n
        resent = bytearray(n)
        timers: list[tuple[float, int]] = []
        next_idx, remaining = 0, n
        last_progress = time.monotonic()
        while remaining:
            while len(inflight) < self.window and next_idx < n:
                idx = next_idx
                next_idx += 1
                inflight.add(idx)
                sent_at[idx] = time.monotonic()
                self._send_probe(idx)
                heapq.heappush(timers, (sent_at[idx] + rto[idx], idx))
            now = time.monotonic()
            give_up = last_progress + self.deadline
            if now >= give_up:
                after = " after the others' came" if remaining < n else ""
                raise UnreachableError(
                    f"appliance unreachable: no answer from {_fmt_addr(self.appliance)} in {self.deadline:g} s (no STATUS "
                    f"answered the PROBEs of {remaining} of {n} chunks{after}: the appliance is down or unreachable)"
                )
            for _, idx in _pop_due(timers, now, lambda t: known[t[1]]):
                resent[idx] = 1
                self._send_probe(idx)
                rto[idx] = min(rto[idx] * 2, self.rto_max)
                heapq.heappush(timers, (now + rto[idx], idx))
            wake = min(timers[0][0], give_up) if timers else give_up
            size = self._recv(wake - now)
            answer = _answer(recvview, size, cid, st)
            if answer is None:
                continue
            flags, r_op, r_dt, reason, r_rank, off, dl, rnd = answer
            if flags == FLAG_NAK:
                continue
            if flags != _STATUS_FLAGS or r_rank != RANK_APPLIANCE or r_op != op or r_dt != dt:
                continue  # results of an earlier call, anything else
            if dl != plen or size != HEADER_LEN + plen or reason > STATE_COMPLETED or off % ce or off >= c.tensor_elements:
                continue
            st["statuses"] += 1
            idx = off // ce
            if idx not in inflight:
                continue
            if reason != STATE_NO_HISTORY:
                rounds[idx] = rnd  # states 1, 2: the round in progress; 3: the completed round + 1
            inflight.discard(idx)
            known[idx] = 1
            remaining -= 1
            last_progress = time.monotonic()
            if not resent[idx]:
                # A STATUS waits for no peer: the path's and the appliance's round trip alone.
                self._rtt_sample(last_progress - sent_at[idx])
        self._synced = True

    def _recv(self, wait: float) -> int:
        """One datagram into the receive buffer within `wait` seconds: its size, or -1 when none
        came. An ICMP error from an earlier send raises UnreachableError."""
        self._sock.settimeout(max(wait, 1e-4))
        try:
            size = self._sock.recv_into(self._recvview)
        except TimeoutError:
            return -1
        except OSError as e:
            if e.errno not in _UNREACHABLE_ERRNOS:
                raise
            self._unreachable(e)
        self._heard = True
        return size

    def _send_probe(self, idx: int) -> None:
        """Sends a PROBE for chunk `idx` (a lost one is like loss on the wire: its timer resends)."""
        c = self.collective
        HEADER.pack_into(self._probebuf, 0, (VERSION << 4) | FLAG_PROBE, self._op, c.collective_id, self._dtype_code,
                         0, c.rank, idx * c.chunk_elements, self._probe_len, 0)
        self.stats["probes"] += 1
        try:
            self._sock.send(self._probebuf)
        except (BlockingIOError, TimeoutError):
            pass
        except OSError as e:
            if e.errno in _LOST_ERRNOS:
                return
            if e.errno not in _UNREACHABLE_ERRNOS:
                raise
            self._unreachable(e)

    def current_rto(self) -> float:
        """The retransmit timeout (s) a fresh chunk gets now: `rto` before any round-trip sample."""
        rtt = min(self._rtt_best, self._rtt_last)
        if math.isinf(rtt):
            return self.rto
        return min(max(4 * rtt, self.rto_min), self.rto_max)

    def _rtt_sample(self, rtt: float) -> None:
        self._rtt_best = min(self._rtt_best, rtt)
        self._rtt_samples += 1

    def _rtt_end_call(self) -> None:
        if not math.isinf(self._rtt_best):
            self._rtt_last, self._rtt_best = self._rtt_best, math.inf

    def _run(self, src: memoryview, dst: memoryview, first: int, count: int) -> None:
        """Chunks [first, first + count) of the tensor; `src` and `dst` start at chunk `first`
        and hold `len(src)` bytes (the chunks' bytes past them are sent as zeros, their results
        dropped). Below, `idx` indexes the range; chunk `first + idx` of the tensor."""
        rounds = self._rounds[first : first + count]
        try:
            self._run_range(src, dst, first, count, rounds)
        finally:
            self._rounds[first : first + count] = rounds

    def _run_range(self, src: memoryview, dst: memoryview, first: int, n: int, rounds: list[int]) -> None:
        c = self.collective
        st = self.stats
        sock = self._sock
        ce = c.chunk_elements
        lb = self._lane_bytes
        total_bytes = c.tensor_elements * lb
        chunk_bytes = ce * lb
        src_bytes = len(src)
        range_start = first * chunk_bytes  # the range's first byte in the tensor
        cid = c.collective_id
        hdr_pack = HEADER.pack_into
        sendbuf, sendview = self._sendbuf, self._sendview
        recvview = self._recvview
        vf_first = VERSION << 4
        vf_resend = (VERSION << 4) | FLAG_RETRANSMIT
        op, dt, rank = self._op, self._dtype_code, c.rank

        done = bytearray(n)
        inflight: set[int] = set()
        rto = [self.current_rto()] * n
        sent_at = [0.0] * n  # first send at the chunk's current round
        resent = bytearray(n)  # resent at its current round: no round-trip sample (Karn)
        seq = [0] * n  # generation of each chunk's live timer; heap entries of older ones are stale
        timers: list[tuple[float, int, int]] = []
        next_idx = 0
        completed = 0
        rejoins = 0
        answered = self._heard  # anything from the appliance over this client's life
        st["chunks"] += n

        def send(idx: int, flags_byte: int) -> bool:
            """Sends chunk `idx`; False when the OS did not take it (its timer will resend)."""
            b0 = idx * chunk_bytes
            dl = min(chunk_bytes, total_bytes - range_start - b0)
            b1 = min(b0 + dl, src_bytes)
            hdr_pack(sendbuf, 0, flags_byte, op, cid, dt, 0, rank, (first + idx) * ce, dl, rounds[idx])
            sendview[HEADER_LEN : HEADER_LEN + b1 - b0] = src[b0:b1]
            if b1 - b0 < dl:  # padding to the whole chunk
                sendview[HEADER_LEN + b1 - b0 : HEADER_LEN + dl] = bytes(dl - (b1 - b0))
            try:
                sock.send(sendview[: HEADER_LEN + dl])
            except (BlockingIOError, TimeoutError):
                return False  # socket buffer full
            except OSError as e:
                if e.errno in _LOST_ERRNOS:
                    return False  # dropped on the way out (a local firewall rule, a full queue): lost
                if e.errno not in _UNREACHABLE_ERRNOS:
                    raise
                self._unreachable(e)
            st["sent"] += 1
            return True

        probing = self.probe
        probe_every = self.deadline / STALL_PROBES_PER_DEADLINE
        stall_probes = stall_statuses = stall_rounds = 0
        waiting = bytearray(c.num_workers)  # per rank: a stalled chunk's slot waits for it
        plen = self._probe_len

        now = time.monotonic()
        last_progress = now
        while completed < n:
            # Fill the window.
            while len(inflight) < self.window and next_idx < n:
                idx = next_idx
                next_idx += 1
                inflight.add(idx)
                sent_at[idx] = time.monotonic()
                send(idx, vf_first)
                heapq.heappush(timers, (sent_at[idx] + rto[idx], idx, seq[idx]))

            now = time.monotonic()
            give_up = last_progress + self.deadline
            if now >= give_up:
                self._fail(n - completed, n, answered, stall_probes, stall_statuses, waiting)
            next_probe = last_progress + probe_every * (1 + stall_rounds)
            if probing and now >= next_probe and inflight:
                # No progress for a while: ask the stalled chunks' slots whom they wait for
                # (`idx` counts from the range's first chunk; the probe names the tensor's).
                for idx in inflight:
                    self._send_probe(first + idx)
                stall_probes += len(inflight)
                stall_rounds += 1
                continue

            # Fire due timers; drop entries of completed or re-armed chunks.
            for _, idx, s in _pop_due(timers, now, lambda t: done[t[1]] or t[2] != seq[t[1]]):
                resent[idx] = 1
                if send(idx, vf_resend):
                    st["retransmits"] += 1
                rto[idx] = min(rto[idx] * 2, self.rto_max)
                heapq.heappush(timers, (now + rto[idx], idx, s))

            wake = min(timers[0][0], give_up) if timers else give_up
            if probing:
                wake = min(wake, next_probe)
            size = self._recv(wake - now)
            if size < 0:
                continue
            answered = True
            answer = _answer(recvview, size, cid, st)
            if answer is None:
                continue
            flags, r_op, r_dt, reason, r_rank, off, dl, rnd = answer
            if flags == FLAG_NAK:
                if off % ce or off >= c.tensor_elements:
                    continue
                idx = off // ce - first
                if idx not in inflight:
                    continue  # about a chunk already done or outside the range, or of an earlier call
                delta = (rnd - rounds[idx]) % ROUND_MOD
                if delta == 0:
                    continue  # already rejoined at that round
                rejoins += 1
                st["rejoins"] += 1
                if rejoins > MAX_REJOINS:
                    raise NakError(reason, off, cid, f"gave up after {MAX_REJOINS} rejoins (last expected round {rnd})")
                # The appliance NAKs at most once per source per 100 ms: move every chunk not yet
                # done by the same amount, then resend what is in flight at once.
                for i in range(n):
                    if not done[i]:
                        rounds[i] = (rounds[i] + delta) % ROUND_MOD
                now = time.monotonic()
                base = self.current_rto()
                for i in inflight:
                    seq[i] += 1
                    rto[i] = base
                    sent_at[i], resent[i] = now, 0
                    if send(i, vf_resend):
                        st["retransmits"] += 1
                    heapq.heappush(timers, (now + rto[i], i, seq[i]))
                last_progress = now
                if stall_probes:
                    stall_probes = stall_statuses = stall_rounds = 0
                    waiting[:] = bytes(len(waiting))
                continue
            if r_rank != RANK_APPLIANCE or r_op != op or r_dt != dt:
                continue
            if flags == _STATUS_FLAGS:
                # The answer to a stalled chunk's PROBE (section 7): whom does its slot wait for?
                if dl != plen or size != HEADER_LEN + plen or off % ce or off >= c.tensor_elements:
                    continue
                st["statuses"] += 1
                if not stall_probes:
                    continue  # the answer to a probe of an earlier stall
                idx = off // ce - first
                if not 0 <= idx < n:
                    continue
                stall_statuses += 1
                if reason in (STATE_WITHOUT_RANK, STATE_WITH_RANK) and not done[idx] and rnd == rounds[idx]:
                    for k in range(c.num_workers):
                        if not recvview[HEADER_LEN + k // 8] >> (k % 8) & 1:
                            waiting[k] = 1
                continue
            if flags != FLAG_RESULT:
                continue
            if off % ce or off >= c.tensor_elements:
                continue
            idx = off // ce - first
            b0 = idx * chunk_bytes
            if not 0 <= idx < n:
                st["stale_results"] += 1  # a chunk of another range: a late answer to an earlier call
                continue
            if dl != min(chunk_bytes, total_bytes - range_start - b0) or size != HEADER_LEN + dl:
                continue
            if done[idx] or idx not in inflight or rnd != rounds[idx]:
                st["stale_results"] += 1
                continue
            b1 = min(b0 + dl, src_bytes)
            dst[b0:b1] = recvview[HEADER_LEN : HEADER_LEN + b1 - b0]
            done[idx] = 1
            inflight.discard(idx)
            completed += 1
            st["results"] += 1
            last_progress = time.monotonic()
            if stall_probes:
                stall_probes = stall_statuses = stall_rounds = 0
                waiting[:] = bytes(len(waiting))
            if not resent[idx]:
                self._rtt_sample(last_progress - sent_at[idx])

    def _unreachable(self, e: OSError):
        where = _fmt_addr(self.appliance)
        if e.errno == errno.ECONNREFUSED:
            raise UnreachableError(
                f"appliance refused: {where} answered ICMP port unreachable (nothing listens there: "
                f"is it the appliance's address and gradient_udp_port?)"
            ) from e
        raise UnreachableError(f"appliance unreachable: {where}: {e.strerror}") from e

    def _fail(self, missing: int, n: int, answered: bool, stall_probes: int = 0, stall_statuses: int = 0, waiting=b""):
        where = _fmt_addr(self.appliance)
        cid = self.collective.collective_id
        head = f"allreduce timed out: {missing} of {n} chunks of collective {cid} missing after {self.deadline:g} s without progress"
        if stall_statuses:
            ranks = [k for k, w in enumerate(waiting) if w]
            if ranks:
                s = "s" if len(ranks) > 1 else ""
                why = f": the appliance is waiting for rank{s} {', '.join(map(str, ranks))}"
            else:
                why = " (the appliance answered and waits for no rank: results may be lost on the way back)"
            raise AllreduceTimeout(head + why, missing, ranks)
        if stall_probes:
            before = ", though it answered before" if answered else ""
            raise UnreachableError(
                f"appliance unreachable: no answer from {where} in {self.deadline:g} s (no STATUS answered the "
                f"{stall_probes} PROBEs of the stalled chunks{before}: the appliance stopped or the path to it broke)"
            )
        if not answered:
            raise UnreachableError(
                f"appliance unreachable: no answer from {where} in {self.deadline:g} s (no result and no "
                f"NAK ever came: the appliance is down or unreachable, or no peer has contributed yet)"
            )
        raise AllreduceTimeout(
            f"allreduce timed out: {missing} of {n} chunks of collective {self.collective.collective_id} missing after "
            f"{self.deadline:g} s without progress; the appliance at {where} answered, so peers may be absent "
            f"({self.collective.num_workers} workers expected)",
            missing,
        )
