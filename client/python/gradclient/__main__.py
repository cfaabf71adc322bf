"""Command line: one worker's allreduce calls against the appliance, optionally the ring baseline.

    python3 -m gradclient --config APPLIANCE.toml --collective ID --rank K --input IN.bin
        --output OUT.bin [--repeat N] [--start-round R] [--no-probe] [--window W] [--timeout-ms T]
        [--stats-json FILE] [--ring HOST:PORT,HOST:PORT,... [--ring-only]]

Exit status: 0 success, 1 allreduce error, 2 usage or config error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from .client import Client, GradientError
from .config import ConfigError, load_endpoint
from .ring import Ring, RingError
from .wire import DTYPES

EXIT_OK, EXIT_ALLREDUCE, EXIT_USAGE = 0, 1, 2


def _parse_peers(text: str) -> list[tuple[str, int]]:
    peers = []
    for item in text.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"--ring entry {item!r}: expected HOST:PORT (IPv6 as [ADDR]:PORT)")
        peers.append((host.strip("[]"), int(port)))
    return peers


def _args(argv):
    p = argparse.ArgumentParser(prog="python3 -m gradclient", description="Gradient AllReduce through the appliance (UDP carriage).")
    p.add_argument("--config", required=True, help="the appliance's TOML config")
    p.add_argument("--collective", required=True, type=int, help="collective_id")
    p.add_argument("--rank", required=True, type=int, help="this worker's rank")
    p.add_argument("--input", required=True, help="raw little-endian lanes, tensor_elements of them")
    p.add_argument("--output", required=True, help="where the last result goes (same format)")
    p.add_argument("--repeat", type=int, default=1, help="allreduce calls (successive rounds)")
    p.add_argument("--start-round", type=int, default=0,
                   help="round of a chunk whose slot has no history (every other chunk's round is asked of the "
                        "appliance first, PROBE, spec section 7), or of every chunk with --no-probe")
    p.add_argument("--no-probe", action="store_true",
                   help="start every chunk at --start-round without asking the appliance (a guess equal to the last "
                        "completed round gets that round's old result)")
    p.add_argument("--window", type=int, default=64, help="chunks in flight")
    p.add_argument("--timeout-ms", type=int, default=10000, help="ms a call may go without progress")
    p.add_argument("--stats-json", help="write counters and per-call seconds here")
    p.add_argument("--ring", help="also run the TCP ring AllReduce with these peers, rank order")
    p.add_argument("--ring-only", action="store_true", help="run only the ring (--repeat times), not the appliance")
    a = p.parse_args(argv)
    if a.ring_only and not a.ring:
        p.error("--ring-only needs --ring")
    if a.repeat < 1 or a.window < 1 or a.timeout_ms < 1:
        p.error("--repeat, --window and --timeout-ms must be at least 1")
    return a


def main(argv=None) -> int:
    a = _args(argv)

    def usage(msg: str) -> int:
        print(f"gradclient: {msg}", file=sys.stderr)
        return EXIT_USAGE

    try:
        ep = load_endpoint(a.config, a.collective, a.rank)
        peers = _parse_peers(a.ring) if a.ring else None
    except (ConfigError, ValueError) as e:
        return usage(str(e))
    coll = ep.collective
    if peers is not None and len(peers) != coll.num_workers:
        return usage(f"--ring lists {len(peers)} peers, collective {coll.collective_id} has {coll.num_workers} members")
    wire_dtype = DTYPES[coll.dtype][2]
    want = coll.tensor_elements * coll.lane_bytes
    try:
        size = os.path.getsize(a.input)
    except OSError as e:
        return usage(f"cannot read --input {a.input}: {e.strerror}")
    if size != want:
        return usage(
            f"--input {a.input} has {size} bytes; collective {coll.collective_id} needs {want} "
            f"({coll.tensor_elements} {coll.dtype} lanes)"
        )
    data = np.fromfile(a.input, dtype=wire_dtype)

    stats = {"impl": "python", "rank": a.rank, "collective": a.collective, "seconds": [], "ring_seconds": []}
    status = EXIT_OK
    error = None
    client = None
    try:
        try:
            client = None if a.ring_only else Client(
                coll,
                bind=ep.bind,
                appliance=ep.appliance,
                window=a.window,
                deadline=a.timeout_ms / 1000,
                start_round=a.start_round,
                probe=not a.no_probe,
            )
        except OSError as e:  # SocketError: names the address, the rank and the reason
            return usage(str(e))
        if client is not None:
            result = None
            for _ in range(a.repeat):
                result = client.allreduce(data)
                stats["seconds"].append(client.stats["seconds"])
            with open(a.output, "wb") as f:
                f.write(result.astype(wire_dtype, copy=False).tobytes())

        if peers is not None:
            with Ring(a.rank, peers) as ring:
                for _ in range(a.repeat):
                    t0 = time.monotonic()
                    ring_result = ring.allreduce(data, coll.op)
                    stats["ring_seconds"].append(time.monotonic() - t0)
            with open(a.output + ".ring", "wb") as f:
                f.write(ring_result.astype(wire_dtype, copy=False).tobytes())
    except (GradientError, RingError, OSError) as e:
        error = f"{type(e).__name__}: {e}"
        print(f"gradclient: rank {a.rank}: {error}", file=sys.stderr)
        status = EXIT_ALLREDUCE
    finally:
        if client is not None:
            for k in ("chunks", "sent", "retransmits", "results", "stale_results", "naks", "rejoins", "probes", "statuses"):
                stats[k] = client.stats[k]
            client.close()
        if a.stats_json and (client is not None or a.ring_only):
            if error is not None:
                stats["error"] = error
            with open(a.stats_json, "w") as f:
                json.dump(stats, f, indent=1)
                f.write("\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
