"""The collective a client takes part in, and reading it from the appliance's TOML config.

Keys are those of spec section 3 (`[[collective]]`, `[[collective.member]]`) plus the appliance's
`[[port]]` addresses and `[dataplane] gradient_udp_port`.
"""

from __future__ import annotations

import ipaddress
import tomllib
from dataclasses import dataclass

from .wire import DEFAULT_UDP_PORT, DTYPES, OPS


class ConfigError(ValueError):
    """The appliance config does not describe a usable UDP collective member."""


@dataclass(frozen=True)
class Collective:
    """One collective as this worker sees it."""

    collective_id: int
    op: str  # "sum", "max", "min"
    dtype: str  # "f32", "f16", "bf16", "i32"
    tensor_elements: int
    chunk_elements: int
    num_workers: int
    rank: int

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ConfigError(f"op {self.op!r}: expected one of {', '.join(OPS)}")
        if self.dtype not in DTYPES:
            raise ConfigError(f"dtype {self.dtype!r}: expected one of {', '.join(DTYPES)}")
        if not 0 <= self.collective_id <= 0xFFFF:
            raise ConfigError(f"collective_id {self.collective_id} does not fit 16 bits")
        if self.tensor_elements < 1 or self.chunk_elements < 1:
            raise ConfigError("tensor_elements and chunk_elements must be at least 1")
        if not 0 <= self.rank < self.num_workers:
            raise ConfigError(f"rank {self.rank} is not in 0 to {self.num_workers - 1}")

    @property
    def num_chunks(self) -> int:
        """Chunks (and appliance slots) in the tensor."""
        return -(-self.tensor_elements // self.chunk_elements)

    @property
    def lane_bytes(self) -> int:
        return DTYPES[self.dtype][1]


@dataclass(frozen=True)
class Endpoint:
    """Where one member sends from and to, read from the appliance config."""

    collective: Collective
    bind: tuple[str, int]  # the member's ip and udp_port
    appliance: tuple[str, int]  # the appliance port's address and gradient_udp_port


def _req(table: dict, key: str, where: str):
    if key not in table:
        raise ConfigError(f"`{where}.{key}` is missing")
    return table[key]


def load_endpoint(path: str, collective_id: int, rank: int) -> Endpoint:
    """Reads collective `collective_id` and the member of `rank` from the appliance TOML at `path`."""
    try:
        with open(path, "rb") as f:
            cfg = tomllib.load(f)
    except OSError as e:
        raise ConfigError(f"cannot read appliance config {path}: {e.strerror}") from e
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"appliance config {path} is not valid TOML: {e}") from e

    colls = cfg.get("collective", [])
    matches = [(i, c) for i, c in enumerate(colls) if c.get("collective_id") == collective_id]
    if not matches:
        have = ", ".join(str(c.get("collective_id")) for c in colls) or "none"
        raise ConfigError(f"{path}: no [[collective]] with collective_id = {collective_id} (have: {have})")
    i, coll = matches[0]
    where = f"collective[{i}]"
    carriage = coll.get("carriage", "udp")
    if carriage != "udp":
        raise ConfigError(f"{path}: collective {collective_id} uses carriage {carriage!r}; this client speaks only the UDP carriage")
    members = coll.get("member", [])
    mine = [(j, m) for j, m in enumerate(members) if m.get("rank") == rank]
    if not mine:
        n = len(members)
        has = "no members" if n == 0 else "1 member (rank 0)" if n == 1 else f"{n} members (ranks 0 to {n - 1})"
        raise ConfigError(f"{path}: collective {collective_id} has {has}, no rank {rank}")
    j, member = mine[0]
    mwhere = f"{where}.member[{j}]"
    collective = Collective(
        collective_id=collective_id,
        op=_req(coll, "op", where),
        dtype=_req(coll, "dtype", where),
        tensor_elements=_req(coll, "tensor_elements", where),
        chunk_elements=_req(coll, "chunk_elements", where),
        num_workers=len(members),
        rank=rank,
    )

    ip = _req(member, "ip", mwhere)
    try:
        family = ipaddress.ip_address(ip).version
    except ValueError as e:
        raise ConfigError(f"`{mwhere}.ip`: {e}") from e
    udp_port = _req(member, "udp_port", mwhere)

    ports = cfg.get("port", [])
    port_index = member.get("port", 0)
    if not 0 <= port_index < len(ports):
        raise ConfigError(f"`{mwhere}.port` = {port_index}, but the config has {len(ports)} [[port]] tables")
    key = "ipv6" if family == 6 else "ipv4"
    appliance_ip = ports[port_index].get(key)
    if appliance_ip is None:
        raise ConfigError(f"`port[{port_index}].{key}` is missing: the appliance has no IPv{family} address for member {ip}")
    gport = cfg.get("dataplane", {}).get("gradient_udp_port", DEFAULT_UDP_PORT)
    return Endpoint(collective, (ip, udp_port), (appliance_ip, gport))
