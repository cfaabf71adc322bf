"""The appliance's control socket from Python: what `dpuctl` does, for a job that registers its
collectives at start and removes them at its end (see `ddp.register_collective`).

    ctl = Control()                                # the only running appliance, or Control(path)
    ctl.add_collective({"collective_id": 9, "op": "sum", "dtype": "f32", ...,
                        "member": [{"rank": 0, "ip": "10.0.0.1", "udp_port": 50000,
                                    "mac": "02:00:00:00:01:00"}, ...]})
    ctl.collectives()                              # the running [[collective]] tables
    ctl.delete_collective(9)

The protocol (the appliance's `dataplane::config::update::Request`): one JSON object tagged by
`cmd` written to the unix socket `dpu_control.sock` in the appliance's EAL runtime directory, the
write side shut, one JSON reply and a newline back, `"ok": false` with an `error` naming the
faulty key when the request is refused (nothing changes then). A collective is given with the
keys of the config file's `[[collective]]` table and validated by the same builders.

Standard library only (any python3).
"""

from __future__ import annotations

import json
import os
import socket

#: The control socket's file name in an instance's EAL runtime directory.
SOCKET_NAME = "dpu_control.sock"


class ControlError(Exception):
    """A control request failed: no appliance found or reachable, or the appliance refused the
    request (its message, which names the faulty key, as `dpuctl` prints it)."""


def _bases() -> list[str]:
    # EAL's runtime directories: /var/run/dpdk as root, else $XDG_RUNTIME_DIR/dpdk or /tmp/dpdk.
    bases = ["/var/run/dpdk"]
    if os.environ.get("XDG_RUNTIME_DIR"):
        bases.append(os.path.join(os.environ["XDG_RUNTIME_DIR"], "dpdk"))
    bases.append("/tmp/dpdk")
    return bases


def find_socket(path=None, prefix: str | None = None) -> str:
    """The control socket: `path` (a str or path-like) if given, else `$DPU_CONTROL_SOCKET`, else
    the socket of the instance whose EAL file prefix is `prefix`, else the only running
    appliance's (the last three as `dpuctl` finds it, which reads no environment variable).
    Raises ControlError when there is none, or several and none is named."""
    path = path or os.environ.get("DPU_CONTROL_SOCKET")
    if path:
        return os.fspath(path)
    bases = _bases()
    if prefix:
        for b in bases:
            s = os.path.join(b, prefix, SOCKET_NAME)
            if os.path.exists(s):
                return s
        raise ControlError(f"no appliance with prefix {prefix!r} is running (no {SOCKET_NAME} under {', '.join(bases)})")
    found = sorted({os.path.join(b, d, SOCKET_NAME) for b in bases if os.path.isdir(b) for d in os.listdir(b)
                    if os.path.exists(os.path.join(b, d, SOCKET_NAME))})
    if len(found) == 1:
        return found[0]
    if not found:
        raise ControlError(f"no running appliance found (no {SOCKET_NAME} under {', '.join(bases)}): is dpu running?")
    raise ControlError(f"{len(found)} appliances are running; name one (path or prefix): {', '.join(found)}")


class Control:
    """A client of one appliance's control socket (`find_socket(path, prefix)`). Each request
    is a connection of its own; `timeout` (s) bounds each (the appliance answers a change once
    every worker has switched to it, within 5 s, after a request ahead of it has been served: the
    default allows 30 s, as `dpuctl` does)."""

    def __init__(self, path=None, prefix: str | None = None, timeout: float = 30.0):
        self.path = find_socket(path, prefix)
        self.timeout = timeout

    def request(self, req: dict) -> dict:
        """Sends `req` (a dict with `cmd`) and returns the reply (a dict, `ok` true). Raises
        ControlError with the appliance's message when it refuses the request, or when the
        socket cannot be reached or answers nothing readable. After a timeout the appliance may
        still apply the request: the message says so."""
        try:
            data = json.dumps(req).encode()
        except (TypeError, ValueError) as e:
            raise ControlError(f"control request not expressible in JSON: {e}") from None
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(self.timeout)
                s.connect(self.path)
                s.sendall(data)
                s.shutdown(socket.SHUT_WR)
                reply = b""
                while not reply.endswith(b"\n"):
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    reply += chunk
        except socket.timeout:
            raise ControlError(
                f"control socket {self.path}: no answer within {self.timeout} s (the appliance may still apply it: "
                "check with collectives())"
            ) from None
        except OSError as e:
            raise ControlError(f"control socket {self.path}: {e}") from None
        try:
            v = json.loads(reply)
        except ValueError:
            raise ControlError(f"control socket {self.path}: unreadable reply {reply[:200]!r}") from None
        if not isinstance(v, dict):
            raise ControlError(f"control socket {self.path}: unexpected reply {reply[:200]!r}")
        if not v.get("ok"):
            raise ControlError(v.get("error", f"refused: {v}"))
        return v

    def apply(self, ops: list[dict]) -> dict:
        """Applies `ops` (dicts with `op`, as a `dpuctl batch` file's `[[op]]` tables) in order,
        all or nothing; the reply holds the new `version`."""
        return self.request({"cmd": "apply", "ops": ops})

    def collectives(self) -> list[dict]:
        """The running collectives, as `[[collective]]` tables (dicts)."""
        return self.request({"cmd": "collectives"})["collectives"]

    def add_collective(self, table: dict) -> dict:
        """Adds the collective `table` (a `[[collective]]` table's keys); refused if its
        `collective_id` is in use."""
        return self.apply([{"op": "add_collective", "collective": table}])

    def modify_collective(self, table: dict) -> dict:
        """Replaces the collective with `table`'s `collective_id` (it starts afresh unless
        `table` equals the running one)."""
        return self.apply([{"op": "modify_collective", "collective": table}])

    def delete_collective(self, collective_id: int) -> dict:
        """Deletes collective `collective_id` (its rounds in progress are discarded)."""
        return self.apply([{"op": "delete_collective", "id": collective_id}])
