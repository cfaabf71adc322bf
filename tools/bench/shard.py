#!/usr/bin/env python3
"""`make bench`, one collective on two workers: the dpu replaying one collective's contributions
with `[dataplane] shard_collectives` off (the collective on one worker) and on (its chunks
spread over both), in the same run.

    tools/bench/shard.py [--reps 3] [--lanes 64,256,1024]
                         (binaries: DPU_BIN, PKTGEN_BIN, default target/release/{dpu,pktgen};
                          python3 from PATH, standard library only)

Per lane count, `pktgen allreduce` writes one round of a 16-rank f32 collective (24,000 chunks
of 64 lanes, 12,000 of 256, 4,000 of 1024: 384,000, 192,000 and 64,000 contributions, 120-270
MB of captures), split by rank over two ports as
a NIC's RSS would spread the ranks' flows: ranks 0-7 on port 0, 8-15 on port 1, each a finite
net_pcap replay polled by its own worker lcore (`--lcores 0@0,1@0,2@1`: worker 2 has CPU 1 to
itself, worker 1 shares CPU 0 with the main lcore, which sleeps). Results leave on net_null
ports. Without sharding worker 1 owns the collective and folds every contribution, worker 2
hands it all it receives; with sharding each folds the chunks of its parity and hands the others
over (half of all contributions either way). Runs alternate off/on, REPS each (default 5);
rate = folded / the run's seconds. Checked per run: every contribution folded, no losses, the folds per worker
as the placement says.

These are finite replays of 0.1-0.3 s whose reading of the capture files is itself a cost; the
in-memory `shard_scale` example measures the folding alone.

Output: stdout, and appended to target/bench/results.md.
"""

import argparse
import datetime
import json
import os
import statistics
import struct
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "target", "bench", "shard")
BIN = os.path.join(ROOT, "target", "release")
RANKS = 16

FIXTURES = os.path.join(ROOT, "tests", "fixtures")


def fixture(name):
    """The text of tests/fixtures/NAME, a config fragment the functional tests use too."""
    with open(os.path.join(FIXTURES, name)) as f:
        return f.read()


# Worker lcore 1 polls port 0, lcore 2 port 1; two net_null ports (replaced by the captures).
EAL = (
    '[eal]\nargs = ["--no-huge", "-m", "2048", "--no-pci", "--no-shconf", "--lcores", "0@0,1@0,2@1", '
    '"--log-level", "*:error"]\n'
    + fixture("two-worker-lcores.toml")
    + "[mempool]\nmbufs = 16383\ndata_room = 9344\n"
    + fixture("split-ports.toml")
)


def split_by_rank(src, outs):
    """Writes the records of pcap `src` whose sender is rank r (source MAC 02:00:00:00:01:rr)
    into outs[r * 2 // RANKS]."""
    with open(src, "rb") as f:
        data = f.read()
    files = [bytearray(data[:24]), bytearray(data[:24])]
    off = 24
    while off < len(data):
        incl = struct.unpack_from("<I", data, off + 8)[0]
        rank = data[off + 16 + 11]
        files[rank * 2 // RANKS] += data[off:off + 16 + incl]
        off += 16 + incl
    for path, content in zip(outs, files):
        with open(path, "wb") as f:
            f.write(content)


def workload(lanes):
    """(directory, [[collective]] tables, contributions) of the case with `lanes` lanes."""
    chunks = {64: 24000, 256: 12000}.get(lanes, 4000)
    d = os.path.join(OUT, f"{lanes}lanes-{chunks}")
    pktgen = os.environ.get("PKTGEN_BIN", os.path.join(BIN, "pktgen"))
    if not os.path.exists(os.path.join(d, "in1.pcap")):
        subprocess.run([pktgen, "allreduce", "--out", os.path.join(d, "w"), "--workers", str(RANKS),
                        "--tensor-elements", str(chunks * lanes), "--chunk-elements", str(lanes),
                        "--collective-id", "1", "--seed", "3"], check=True, capture_output=True)
        split_by_rank(os.path.join(d, "w", "input.pcap"), [os.path.join(d, "in0.pcap"), os.path.join(d, "in1.pcap")])
        os.remove(os.path.join(d, "w", "input.pcap"))  # the split copies are what runs read
    with open(os.path.join(d, "w", "appliance.toml")) as f:
        t = f.read()
    colls = t[t.index("[[collective]]"):]
    for k in range(RANKS // 2, RANKS):
        colls = colls.replace(f"rank = {k}\n", f"rank = {k}\nport = 1\n")
    return d, colls, chunks * RANKS


def run(d, colls, shard, contributions):
    """Mpps of contributions folded by one replay, its counts checked."""
    conf = os.path.join(d, f"shard_{shard}.toml")
    with open(conf, "w") as f:
        f.write(EAL + f"[dataplane]\nshard_collectives = {'true' if shard else 'false'}\n" + colls)
    stats = os.path.join(d, "stats.json")
    dpu = os.environ.get("DPU_BIN", os.path.join(BIN, "dpu"))
    r = subprocess.run([dpu, "-c", conf, f"--rx=0={d}/in0.pcap", f"--rx=1={d}/in1.pcap", "--stats-json", stats],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"shard.py: dpu exited {r.returncode}: {r.stderr.strip()}")
    with open(stats) as f:
        s = json.load(f)
    a = s["aggregation"]
    by_worker = [w["folded"] for w in s["aggregation_by_worker"]]
    want = [contributions // 2] * 2 if shard else [contributions, 0]
    if a["folded"] != contributions or s["losses"] != 0 or by_worker != want:
        sys.exit(f"shard.py: shard={shard}: folded {a['folded']} of {contributions}, losses {s['losses']}, "
                 f"by worker {by_worker} (want {want})")
    return contributions / s["seconds"] / 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=int(os.environ.get("SHARD_REPS", "5")))
    ap.add_argument("--lanes", default="64,256,1024")
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    lines = [
        f"One collective on two workers, `shard_collectives` off / on (finite replays split by rank "
        f"over two ports, {args.reps} alternating reps, medians; "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC):",
        "",
        "| case | off: one worker folds (Mpps) | on: both fold (Mpps) | on / off |",
        "| --- | ---: | ---: | ---: |",
    ]
    for lanes in [int(x) for x in args.lanes.split(",")]:
        d, colls, n = workload(lanes)
        off, on, ratio = [], [], []
        for _ in range(args.reps):
            a, b = run(d, colls, False, n), run(d, colls, True, n)
            off.append(a)
            on.append(b)
            ratio.append(b / a)
        lines.append(f"| UDP f32 sum, {RANKS} ranks x {lanes} lanes ({n} contributions) | "
                     f"{statistics.median(off):.3f} | {statistics.median(on):.3f} | {statistics.median(ratio):.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    with open(os.path.join(ROOT, "target", "bench", "results.md"), "a") as f:
        f.write("\n" + text)


if __name__ == "__main__":
    main()
