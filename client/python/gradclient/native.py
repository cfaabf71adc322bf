"""`NativeClient`: the Rust client (crate `gradclient`, built as the extension module
`gradclient_native` from client/py by `make deps`) behind the pure-Python `Client`'s interface,
and `client_class`, which picks one by `GRADCLIENT_IMPL` (native, python or auto).

The native client batches its system calls (sendmmsg, recvmmsg) and releases the interpreter's
lock during a call; it sends the same datagrams as the pure-Python client, so the two produce
bit-identical results. Its errors are the pure-Python client's classes with the Rust client's
messages.
"""

from __future__ import annotations

import inspect
import os

import numpy as np

from .client import AllreduceTimeout, Client, GradientError, NakError, SocketError, UnreachableError
from .config import Collective, ConfigError, load_endpoint
from .lanes import wire_view

try:
    import gradclient_native as _native
except ImportError:  # not built: `make deps` builds and installs it into .venv
    _native = None


_CLIENT_PARAMS = inspect.signature(Client.__init__)
# The keyword options `NativeClient` forwards to the Rust client: every parameter of
# `Client.__init__` but the positional ones. A parameter added there fails this import until it
# is forwarded too, rather than being accepted and dropped.
_FORWARDED = ("window", "rto", "rto_max", "deadline", "start_round", "rto_min", "probe")
assert set(_CLIENT_PARAMS.parameters) == {"self", "collective", "bind", "appliance", *_FORWARDED}, (
    "gradclient.native: Client.__init__'s parameters changed; forward the new ones"
)


def native_available() -> bool:
    """The extension module `gradclient_native` imports."""
    return _native is not None


def _error(e: Exception) -> Exception:
    """The pure-Python client's exception for a `gradclient_native.NativeError`."""
    kind, msg, details = e.args
    if kind == "nak":
        err = NakError.__new__(NakError)
        Exception.__init__(err, msg)
        err.reason, err.offset, err.collective_id = details["reason"], details["offset"], details["collective"]
        return err
    if kind == "rejoins":
        err = NakError.__new__(NakError)
        Exception.__init__(err, msg)
        err.reason, err.offset, err.collective_id = 7, details["offset"], None
        return err
    if kind == "timeout":
        return AllreduceTimeout(msg, details["missing"], details["waiting_for"])
    if kind in ("unreachable", "refused"):
        return UnreachableError(msg)
    if kind == "socket":
        return SocketError(msg)
    if kind == "config":
        return ConfigError(msg)
    if kind == "invalid":
        return ValueError(msg)
    return GradientError(msg)


class NativeClient:
    """The Rust client with `Client`'s constructor, `allreduce`, `allreduce_into`, `sync`,
    `rounds` and `stats` (plus `datagrams`, `send_calls`, `recv_calls`, `gso_sends`,
    `gro_recvs`: batching shows as fewer calls than datagrams, segmentation and receive offload
    as messages carrying several).
    Raises ImportError when `gradclient_native` is not installed.
    """

    def __init__(self, collective: Collective, bind: tuple, *args, **kwargs):
        # `Client.__init__`'s parameters and defaults, bound from its signature: one copy of them.
        try:
            opts = _CLIENT_PARAMS.bind(self, collective, bind, *args, **kwargs)
        except TypeError as e:
            raise TypeError(f"NativeClient(): {e}") from None
        opts.apply_defaults()
        o = opts.arguments
        appliance, deadline = o["appliance"], o["deadline"]
        if _native is None:
            raise ImportError("gradclient_native is not installed (make deps builds it into .venv)")
        c = collective
        self.collective = c
        self.deadline = deadline
        try:
            self._c = _native.Client(
                c.collective_id, c.op, c.dtype, c.tensor_elements, c.chunk_elements, c.num_workers, c.rank,
                (bind[0], bind[1]), (appliance[0], appliance[1]),
                **{k: o[k] for k in _FORWARDED},
            )  # fmt: skip
        except _native.NativeError as e:
            raise _error(e) from None
        self.bind = self._c.local_addr

    @classmethod
    def from_appliance_config(cls, path: str, collective_id: int, rank: int, **opts) -> "NativeClient":
        """As `Client.from_appliance_config`: the member's addresses from the appliance TOML."""
        ep = load_endpoint(path, collective_id, rank)
        opts.setdefault("bind", ep.bind)
        opts.setdefault("appliance", ep.appliance)
        return cls(ep.collective, **opts)

    def __enter__(self) -> "NativeClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Closes the socket; `stats` and `rounds` keep their last values, calls fail after."""
        if self._c is not None:
            self._closed = (self._c.stats, self._c.rounds)
            self._c = None

    @property
    def stats(self) -> dict:
        """The counters (as `Client.stats`, plus `datagrams`, `send_calls`, `recv_calls`,
        `gso_sends`, `gro_recvs`)."""
        return self._c.stats if self._c is not None else self._closed[0]

    @property
    def rounds(self) -> list[int]:
        """Per chunk: the round of its next contribution."""
        return self._c.rounds if self._c is not None else self._closed[1]

    def sync(self) -> None:
        """Asks the appliance every chunk's round (as `Client.sync`)."""
        try:
            self._c.sync()
        except _native.NativeError as e:
            raise _error(e) from None

    def allreduce(self, array: np.ndarray) -> np.ndarray:
        """The reduction of `array` over every member: a new array of the same shape and dtype."""
        c = self.collective
        array = np.asarray(array)
        lanes = wire_view(array, c.dtype)
        if lanes.size != c.tensor_elements:
            raise ValueError(f"array has {lanes.size} elements, collective {c.collective_id} has tensor_elements = {c.tensor_elements}")
        out = np.array(array, copy=True, order="C")
        self.allreduce_into(out.reshape(-1), 0)
        return out.reshape(array.shape)

    def allreduce_into(self, array: np.ndarray, offset: int = 0) -> np.ndarray:
        """Reduces `array` in place as the elements [offset, offset + array.size) of the
        collective's tensor (as `Client.allreduce_into`); returns `array`."""
        c = self.collective
        if not isinstance(array, np.ndarray) or not array.flags.c_contiguous or not array.flags.writeable:
            raise ValueError("allreduce_into needs a writeable C-contiguous numpy array")
        if array.dtype.byteorder == ">":
            raise ValueError("allreduce_into needs an array in little-endian byte order")
        if offset < 0:
            raise ValueError("allreduce_into needs a non-negative offset")
        lanes = wire_view(array, c.dtype)
        try:
            self._c.allreduce_range_bytes(lanes.reshape(-1).view(np.uint8), offset)
        except _native.NativeError as e:
            raise _error(e) from None
        return array


# help(NativeClient) shows the parameters it takes: `Client.__init__`'s.
NativeClient.__init__.__signature__ = _CLIENT_PARAMS


def client_class(impl: str | None = None):
    """The client class `GRADCLIENT_IMPL` (or `impl`) names: `native` (NativeClient; ImportError
    when not built), `python` (Client), `auto` or unset (native when it imports, else Python)."""
    impl = (impl or os.environ.get("GRADCLIENT_IMPL") or "auto").lower()
    if impl == "python":
        return Client
    if impl == "native":
        if _native is None:
            raise ImportError("GRADCLIENT_IMPL=native but gradclient_native is not installed (make deps builds it into .venv)")
        return NativeClient
    if impl == "auto":
        return NativeClient if _native is not None else Client
    raise ValueError(f"GRADCLIENT_IMPL={impl!r}: expected native, python or auto")
