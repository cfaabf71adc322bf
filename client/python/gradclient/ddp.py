"""PyTorch DistributedDataParallel through the appliance: a DDP communication hook.

    state = ApplianceState(client)                 # or init_appliance(config, collective_id, rank)
    model = DistributedDataParallel(model)
    model.register_comm_hook(state, appliance_hook)

Each gradient bucket's flat buffer is divided by the world size (before the sum, as DDP's default
hook does) and all-reduced in place through the appliance with `Client.allreduce_into`: the
buffer's memory is the numpy array the client sends from and writes the result into (f32 and f16
as they are, bf16 as its 16-bit patterns), so f32, f16 and bf16 gradients travel natively. The
hook returns a completed `torch.futures.Future` holding the buffer. A client error (NAK,
unreachable appliance, timeout naming the rank the appliance waits for) is raised in the backward
pass with the client's message. After such an error the state refuses every later bucket (a
RuntimeError naming the first error): the failed step's chunks may hold half-folded rounds on the
appliance, which the peers can still complete with that step's gradients, so a step run on would
mix two steps' gradients. Restart the ranks, with new clients, once `slot_timeout_ms` has passed
since the failure: the appliance has then reclaimed those rounds (spec section 4 rule 8), and the
new clients' probes find the rounds to join.

The mapping of buckets onto a collective's tensor (spec section 3): DDP hands the buckets to the
hook in index order, every step; bucket 0 starts at element 0 and each next bucket at the end of
the previous one rounded up to a whole chunk (offsets are multiples of `chunk_elements`; a bucket
whose size is not a whole number of chunks has its last chunk padded with zeros, spec section 4
rule 5 allowing a short chunk only at the tensor's end). When DDP rebuilds its buckets after the
first step (in the order the gradients became ready, the same on every rank: DDP takes rank 0's),
the offsets are recomputed the same way at the next bucket 0. Every rank therefore maps the same
bucket to the same chunks. A collective sized by `collective_elements` (each parameter's gradient
rounded up to whole chunks) holds every bucketing DDP can choose; a bucket that would run past
`tensor_elements` is an error that names the size to configure.

One collective per gradient dtype: a model with f32 and bf16 parameters gives DDP one bucket set
per dtype; `ApplianceState` takes one client per dtype and each keeps its own offsets.
"""

import fcntl
import ipaddress
import os
import socket
import struct
from dataclasses import dataclass, field
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

from .client import Client
from .native import client_class
from .config import load_endpoint
from .control import Control, ControlError

#: torch dtype -> the collective dtype that carries it natively.
TORCH_DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
#: The TCP port of the gloo rendezvous when MASTER_PORT is not set.
DEFAULT_MASTER_PORT = 29500


def padded(elements: int, chunk_elements: int) -> int:
    """`elements` rounded up to whole chunks of `chunk_elements`."""
    return -(-elements // chunk_elements) * chunk_elements


def collective_elements(parameters, chunk_elements: int, dtype: torch.dtype | None = None) -> int:
    """The `tensor_elements` a collective needs for any bucketing of these parameters' gradients:
    each parameter that requires a gradient (of `dtype`, or of any dtype when None) rounded up to
    whole chunks. (A bucket, padded, never needs more than its parameters rounded each.)"""
    return sum(
        padded(p.numel(), chunk_elements)
        for p in parameters
        if p.requires_grad and (dtype is None or p.dtype == dtype)
    )


def as_lanes(tensor: torch.Tensor) -> np.ndarray:
    """The flat numpy view of a contiguous CPU tensor's memory as the client's lanes (no copy):
    float32, float16, or uint16 bit patterns for bfloat16."""
    if tensor.device.type != "cpu" or not tensor.is_contiguous():
        raise ValueError(f"the appliance hook needs contiguous CPU gradients, got {tensor.device} (contiguous: {tensor.is_contiguous()})")
    if tensor.dtype == torch.bfloat16:
        return tensor.view(-1).view(torch.int16).numpy().view(np.uint16)
    if tensor.dtype not in TORCH_DTYPES:
        raise ValueError(f"gradients of {tensor.dtype} have no collective dtype (f32, f16 and bf16 travel natively)")
    return tensor.view(-1).numpy()


@dataclass
class BucketSlot:
    """Where one bucket of one step went: its index, the collective, the first element and the
    elements (`padded_elements` with the padding)."""

    index: int
    collective_id: int
    offset: int
    elements: int
    padded_elements: int


@dataclass
class ApplianceState:
    """The state of `appliance_hook`: this rank's client(s), one per gradient dtype, and the
    bucket mapping.

    `clients`: a `Client` or a list of them, at most one per collective dtype. `divide`: divide
    each bucket by the world size before the sum, as DDP's default hook does (default True).
    After each step `layout` lists the step's buckets (`BucketSlot`), `rebuilds` counts the steps
    whose layout differed from the previous one's, and `steps` the steps seen.
    """

    clients: object
    divide: bool = True
    layout: list[BucketSlot] = field(default_factory=list)
    rebuilds: int = 0
    steps: int = 0

    def __post_init__(self) -> None:
        cs = self.clients if isinstance(self.clients, (list, tuple)) else [self.clients]
        self.by_dtype: dict[str, Client] = {}
        for c in cs:
            d = c.collective.dtype
            if d in self.by_dtype:
                raise ValueError(f"two clients for dtype {d}: one collective per gradient dtype")
            self.by_dtype[d] = c
        sizes = {c.collective.num_workers for c in cs}
        if len(sizes) != 1:
            raise ValueError(f"the collectives have different numbers of members: {sorted(sizes)}")
        self.world_size = sizes.pop()
        self._cursor: dict[str, int] = {}
        self._current: list[BucketSlot] = []
        self._next_index = 0
        # The first client error of a hook call: the state refuses to go on after it.
        self.failed: str | None = None

    def place(self, index: int, dtype: str, elements: int) -> tuple[Client, BucketSlot]:
        """The client and place of bucket `index` (`elements` gradients of `dtype`) in this step:
        the mapping described in the module's docstring. Raises ValueError for a dtype without a
        collective, a bucket out of order, or a collective too small."""
        if index == 0:
            if self._current:
                self._end_step()
            self._cursor = {}
        elif index != self._next_index:
            raise ValueError(f"DDP bucket {index} came after bucket {self._next_index - 1}: buckets must come in index order")
        client = self.by_dtype.get(dtype)
        if client is None:
            have = ", ".join(sorted(self.by_dtype)) or "none"
            raise ValueError(f"a gradient bucket of dtype {dtype} but no collective of that dtype (have: {have})")
        c = client.collective
        offset = self._cursor.get(dtype, 0)
        need = padded(elements, c.chunk_elements)
        if offset + elements > c.tensor_elements:
            raise ValueError(
                f"gradient bucket {index} ({elements} {dtype} elements at offset {offset}) runs past tensor_elements = "
                f"{c.tensor_elements} of collective {c.collective_id}: configure at least collective_elements(model.parameters(), "
                f"{c.chunk_elements}) elements"
            )
        self._cursor[dtype] = offset + need
        self._next_index = index + 1
        slot = BucketSlot(index, c.collective_id, offset, elements, min(need, c.tensor_elements - offset))
        self._current.append(slot)
        return client, slot

    def _end_step(self) -> None:
        if self.layout and self._current != self.layout:
            self.rebuilds += 1
        self.layout, self._current = self._current, []
        self.steps += 1

    def finish_step(self, is_last: bool) -> None:
        if is_last:
            self._end_step()


# (No `from __future__ import annotations` in this module: DDP checks the hook's return annotation.)
def appliance_hook(state: ApplianceState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: `model.register_comm_hook(state, appliance_hook)`.

    Divides the bucket's flat buffer by the world size, all-reduces it in place through the
    appliance at the bucket's place (see the module's docstring) and returns a completed future
    holding it. Raises the client's error (GradientError, ValueError) in the backward pass.
    """
    if state.failed is not None:
        raise RuntimeError(
            f"a previous AllReduce through the appliance failed ({state.failed}): its chunks may hold "
            "half-folded rounds that the peers can still complete with that step's gradients, so this "
            "state does not go on; restart the ranks with new clients once slot_timeout_ms has passed "
            "since the failure (the appliance then reclaims those rounds)"
        )
    tensor = bucket.buffer()
    if tensor.layout != torch.strided:
        raise ValueError(
            f"a gradient bucket of {tensor.layout} tensors (sparse gradients, e.g. Embedding(sparse=True)): "
            "the appliance sums dense lanes only; use dense gradients for the model's parameters"
        )
    if tensor.dtype not in TORCH_DTYPES:
        raise ValueError(f"gradients of {tensor.dtype} have no collective dtype (f32, f16 and bf16 travel natively)")
    client, slot = state.place(bucket.index(), TORCH_DTYPES[tensor.dtype], tensor.numel())
    if state.divide:
        tensor.div_(state.world_size)
    try:
        client.allreduce_into(as_lanes(tensor), slot.offset)
    except Exception as e:
        state.failed = f"{type(e).__name__}: {e}"
        raise
    state.finish_step(bucket.is_last())
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(tensor)
    return fut


def _iface_of(ip: str) -> str | None:
    """The name of the interface that holds IPv4 address `ip` here (SIOCGIFADDR), or None."""
    try:
        if ipaddress.ip_address(ip).version != 4:
            return None
    except ValueError:
        return None
    for _, name in socket.if_nameindex():
        res = _ifreq(SIOCGIFADDR, name)
        if res is not None and socket.inet_ntoa(res[20:24]) == ip:
            return name
    return None


#: Linux's interface ioctls (<linux/sockios.h>): an interface's IPv4 address, its hardware address.
SIOCGIFADDR, SIOCGIFHWADDR = 0x8915, 0x8927


def _ifreq(request: int, iface: str) -> bytes | None:
    """The `struct ifreq` the interface ioctl `request` fills for `iface`, or None when it
    fails (no such interface, or no IPv4 address for SIOCGIFADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            return fcntl.ioctl(s.fileno(), request, struct.pack("256s", iface.encode()[:15]))
        except OSError:
            return None


def _as_gloo(t: torch.Tensor) -> torch.Tensor:
    """`t`, a bf16 tensor as f16 of the same bits (a view: same storage, shape and strides, so a
    broadcast into it writes `t`), which gloo in torch 1.13 carries; other tensors as they are. A
    broadcast copies bits, never converts, so a bf16 value arrives bit for bit."""
    return t.view(torch.float16) if t.dtype == torch.bfloat16 else t


def _sync_module_states(module, process_group, broadcast_bucket_size, src, params_and_buffers_to_ignore):
    """DDP's start-up broadcast of the parameters and buffers from rank `src`, with bf16 tensors
    sent as f16 of the same bits (`_as_gloo`): gloo in torch 1.13 has no bf16 ("Invalid scalar
    type"). Bit for bit what torch.distributed.utils._sync_module_states does otherwise, for
    every layout (channels_last, transposed, 0-dim)."""
    states = [_as_gloo(t.detach()) for name, t in [*module.named_parameters(), *module.named_buffers()]
              if name not in params_and_buffers_to_ignore]
    if states:
        dist._broadcast_coalesced(process_group, states, broadcast_bucket_size, src)


def _distributed_broadcast_coalesced(self, tensors, buffer_size, authoritative_rank=0):
    """DDP's broadcast of its buffers before each forward (`broadcast_buffers`), bf16 ones as
    f16 of the same bits as at start-up."""
    dist._broadcast_coalesced(self.process_group, [_as_gloo(t) for t in tensors], buffer_size, authoritative_rank)


def _gloo_bf16_broadcast() -> None:
    """Lets DDP's broadcasts (the start-up one of parameters and buffers, the buffers' before
    each forward) carry bf16 tensors over gloo (see _sync_module_states)."""
    import torch.nn.parallel.distributed as ddp_module

    if getattr(ddp_module, "_sync_module_states", None) is not None:
        ddp_module._sync_module_states = _sync_module_states
    ddp_module.DistributedDataParallel._distributed_broadcast_coalesced = _distributed_broadcast_coalesced


def init_process_group(config: str, collective_id: int, rank: int, timeout: float = 60.0) -> int:
    """`torch.distributed.init_process_group` with gloo for member `rank` of collective
    `collective_id` in the appliance's TOML (unless already initialized); returns the world size,
    the collective's number of members.

    The rendezvous is MASTER_ADDR and MASTER_PORT from the environment, else rank 0's member
    address in the TOML and port 29500; gloo's own traffic leaves by the interface that holds this
    rank's member address (GLOO_SOCKET_IFNAME, unless set). `timeout` (s) bounds the rendezvous
    and gloo's collectives. DDP's broadcasts then send bf16 tensors as f16 of the same bits
    (gloo in torch 1.13 has no bf16). Raises ConfigError for a bad config.
    """
    ep = load_endpoint(config, collective_id, rank)
    world = ep.collective.num_workers
    _gloo_bf16_broadcast()
    if dist.is_initialized():
        return world
    master = os.environ.get("MASTER_ADDR") or load_endpoint(config, collective_id, 0).bind[0]
    port = int(os.environ.get("MASTER_PORT", DEFAULT_MASTER_PORT))
    if "GLOO_SOCKET_IFNAME" not in os.environ:
        iface = _iface_of(ep.bind[0])
        if iface:
            os.environ["GLOO_SOCKET_IFNAME"] = iface
    host = f"[{master}]" if ":" in master else master
    dist.init_process_group(
        "gloo", init_method=f"tcp://{host}:{port}", rank=rank, world_size=world, timeout=timedelta(seconds=timeout)
    )
    return world


def init_appliance(config: str, collective_ids, rank: int, timeout: float = 60.0, **client_opts) -> ApplianceState:
    """Bootstraps a DDP rank from the appliance's TOML: `init_process_group` (gloo: ranks, the
    parameter broadcast, barriers) and this rank's client(s) of the collective(s)
    `collective_ids` (an int or a list, one per gradient dtype), which carry the gradients.
    Returns the hook's state. `client_opts` go to `Client.from_appliance_config` (e.g. deadline).
    The client is the one `GRADCLIENT_IMPL` selects (`client_class`: native when built, else
    the pure-Python one).

    Raises ConfigError for a bad config, SocketError when the member's address is not this host's.
    """
    ids = [collective_ids] if isinstance(collective_ids, int) else list(collective_ids)
    for cid in ids[1:]:
        load_endpoint(config, cid, rank)  # every collective's errors before the rendezvous
    init_process_group(config, ids[0], rank, timeout)
    impl = client_class()
    clients = [impl.from_appliance_config(config, cid, rank, **client_opts) for cid in ids]
    return ApplianceState(clients)


def _iface_of6(ip: str) -> str | None:
    """The name of the interface that holds IPv6 address `ip` in this network namespace
    (/proc/net/if_inet6, which follows the namespace), or None."""
    try:
        want = ipaddress.IPv6Address(ip.split("%")[0])
        with open("/proc/net/if_inet6") as f:
            for line in f:
                cols = line.split()
                if len(cols) >= 6 and ipaddress.IPv6Address(int(cols[0], 16)) == want:
                    return cols[5]
    except (ValueError, OSError):
        return None
    return None


def _mac_of(ip: str) -> str | None:
    """The MAC of the interface that holds address `ip` in this network namespace
    (SIOCGIFHWADDR): for IPv4 its primary address, for IPv6 any of its addresses; None when no
    interface holds it."""
    iface = _iface_of6(ip) if ":" in ip else _iface_of(ip)
    res = _ifreq(SIOCGIFHWADDR, iface) if iface else None
    if res is None:
        return None
    return ":".join(f"{b:02x}" for b in res[18:24])


#: The `[[collective]]` keys `register_collective` takes besides those it computes.
REGISTER_KEYS = ("deterministic", "slot_timeout_ms", "dscp")


def register_collective(
    client, *, mac: str | None = None, port: int = 0, control=None, replace: bool = False, **keys
) -> dict:
    """Registers the job's collective with the appliance through its control socket, instead of
    a `[[collective]]` table written into its TOML beforehand. Every rank calls it, after
    `torch.distributed.init_process_group` (gloo) and with its client made (bound: its address
    and UDP port are what the appliance will answer), before the first step.

    Each rank's member entry (its rank, its client's IP and UDP port, `mac`: the MAC the
    appliance sends its results to, by default that of the interface holding its address,
    right when the rank and the appliance share an L2 segment; `port`:
    the appliance port index it is reached through) is gathered over gloo; rank 0 adds the
    collective (`collective_id`, op, dtype and sizes of its client's `Collective`, which every
    rank must share) through `Control(control)` (a socket path, a `Control`, or None: see
    `find_socket`). With `replace`, a collective of that id already running is replaced
    (`modify_collective`: it starts afresh, unless the table equals the running one, which then
    keeps its state); without it (the default) that is an error. `keys`: more keys of the
    `[[collective]]` table, the same on every rank (`REGISTER_KEYS`: `deterministic=True` for
    bit-identical training, `slot_timeout_ms`, `dscp`). UDP carriage only (the clients speak UDP).

    Every rank returns the registered table (a dict) or raises the same error: ControlError with
    the appliance's message naming the faulty key (nothing changed; after a timeout the outcome
    is unknown and the message says so), ValueError for a rank's bad arguments (named), or
    RuntimeError for anything else rank 0 met. No path leaves a rank waiting in a collective call.
    """
    if not dist.is_initialized():
        raise RuntimeError("register_collective: torch.distributed is not initialized (init_process_group first)")
    c = client.collective
    ip, udp_port = client.bind[0], client.bind[1]
    mac = mac or _mac_of(ip)
    bad = sorted(set(keys) - set(REGISTER_KEYS))
    # A rank's own fault travels with its entry: every rank gathers, then all raise together.
    error = None
    if bad:
        error = f"keys {bad}: register_collective takes {', '.join(REGISTER_KEYS)} besides what it computes"
    elif not mac:
        error = f"no MAC for {ip}: no interface here has it as its address: give this rank's MAC (mac=...)"
    me = {
        "error": error,
        "shape": (c.collective_id, c.op, c.dtype, c.tensor_elements, c.chunk_elements, c.num_workers,
                  sorted(keys.items())),
        "member": {"rank": c.rank, "ip": ip, "udp_port": udp_port, "mac": mac, "port": port},
    }
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, me)
    outcome = [None]
    if dist.get_rank() == 0:
        try:
            outcome[0] = _register(everyone, control, replace)
        except Exception as e:  # anything else: every rank must still get an outcome
            outcome[0] = ("error", f"{type(e).__name__}: {e}")
    dist.broadcast_object_list(outcome, src=0)
    kind, value = outcome[0]
    if kind == "ok":
        return value
    raise {"mismatch": ValueError, "refused": ControlError}.get(kind, RuntimeError)(value)


def _register(everyone: list[dict], control, replace: bool) -> tuple[str, object]:
    """Rank 0's part of `register_collective`: ("ok", table), ("mismatch", why) or ("refused",
    the appliance's or the socket's message)."""
    for r, e in enumerate(everyone):
        if e["error"]:
            return "mismatch", f"rank {r}: {e['error']}"
    shape = everyone[0]["shape"]
    for r, e in enumerate(everyone):
        if e["shape"] != shape:
            return "mismatch", f"rank {r}'s collective {e['shape']} differs from rank 0's {shape}"
    cid, op, dtype, tensor, chunk, workers, keys = shape
    if workers != len(everyone):
        return "mismatch", f"the collective has {workers} members, the process group {len(everyone)} ranks"
    table = {
        "collective_id": cid,
        "op": op,
        "dtype": dtype,
        "tensor_elements": tensor,
        "chunk_elements": chunk,
        **dict(keys),
        "member": sorted((e["member"] for e in everyone), key=lambda m: m["rank"]),
    }
    try:
        ctl = control if isinstance(control, Control) else Control(control)
        try:
            ctl.add_collective(table)
        except ControlError as e:
            if not (replace and "exists already" in str(e)):
                raise
            ctl.modify_collective(table)
    except ControlError as e:
        return "refused", str(e)
    return "ok", table


def unregister_collective(collective_id: int, control=None, table: dict | None = None) -> None:
    """The end of a job that registered its collective: every rank calls it once its last step
    is done; after a barrier rank 0 deletes the collective (its slot memory is freed) and every
    rank returns, or raises the same error (ControlError with the appliance's message,
    RuntimeError for anything else), together. With `table` (what `register_collective`
    returned), the collective is deleted only if it is still this job's: the same members at the
    same addresses and ports; one another job has since registered under that id is left alone
    (ControlError saying so)."""
    dist.barrier()
    outcome = [None]
    if dist.get_rank() == 0:
        try:
            ctl = control if isinstance(control, Control) else Control(control)
            if table is not None:
                running = {c["collective_id"]: c for c in ctl.collectives()}.get(collective_id)
                if running is not None and _members(running) != _members(table):
                    raise ControlError(f"collective {collective_id} is no longer this job's (another job registered "
                                       "other members under its id): left running")
            ctl.delete_collective(collective_id)
        except ControlError as e:
            outcome[0] = ("refused", str(e))
        except Exception as e:  # every rank must still get an outcome
            outcome[0] = ("error", f"{type(e).__name__}: {e}")
    dist.broadcast_object_list(outcome, src=0)
    if outcome[0] is not None:
        kind, msg = outcome[0]
        raise (ControlError if kind == "refused" else RuntimeError)(msg)


def _members(table: dict) -> list[tuple]:
    """A `[[collective]]` table's members as (rank, ip, udp_port, mac), by rank."""
    return sorted((m["rank"], m["ip"], m.get("udp_port"), str(m.get("mac", "")).lower()) for m in table["member"])
