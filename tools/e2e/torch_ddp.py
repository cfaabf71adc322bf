#!/usr/bin/env python3
"""PyTorch DDP through the appliance, end to end (the functional test e2e_torch).

Runs with the project's torch environment (`.venv/bin/python tools/e2e/torch_ddp.py`, root:
network namespaces). The network of tools/e2e/netns.py, the appliance on net_af_packet, and 4
ranks of client/python/examples/train_ddp.py, one per worker namespace (gloo bootstrap at rank
0's address; gradients through the appliance's deterministic collectives, chunks of 64 elements).
Phases:

  clean     f32 MLP, STEPS steps: after every step the parameters' digest is the same on every
            rank and equals the single-process reference (train_ddp.py --reference: the ranks'
            gradients summed in rank order with the spec's arithmetic); DDP's bucket rebuild after
            the first step is seen
  loss      the same with 1% of UDP packets dropped on every worker link: still exact, and the
            clients retransmitted
  mixed     f32, f16 and bf16 layers (three collectives): exact against the reference (f16 and
            bf16 widened, summed in f32, rounded once)
  gloo      the same script with --backend gloo: its losses agree with the clean phase's, step by
            step, within float tolerance (another summation order)
  peer      rank 3 leaves before step 3: the others' step 3 fails naming rank 3, within the deadline
  absent    no appliance: every rank's first step fails with the client's "appliance unreachable"
  registered  the appliance starts without collectives; the ranks add collective 1 through its
            control socket (train_ddp.py --register: gradclient.ddp.register_collective), train
            exactly as in clean, and delete it at the end

A JSON report (--report) holds each phase's findings; the namespaces are removed whatever happens.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import netns  # noqa: E402
import run as e2e  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "client/python"))
from gradclient.control import Control  # noqa: E402

ROOT = e2e.ROOT
EXAMPLE = ROOT / "client/python/examples/train_ddp.py"
WORKERS = 4
CHUNK = 64
DEADLINE = 2.0  # the clients' deadline (s) in the failure phases
COLLECTIVE_DTYPES = {1: "f32", 2: "f16", 3: "bf16"}


def tensor_elements():
    """Per collective id, the tensor_elements of the example's model (train_ddp.py --print-elements)."""
    sizes = {}
    for dtype in ("f32", "mixed"):
        out = subprocess.run([sys.executable, str(EXAMPLE), "--dtype", dtype, "--print-elements", str(CHUNK)],
                             capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            name, n = line.split(": tensor_elements = ")
            cid = {"f32": 1, "f16": 2, "bf16": 3}[name]
            sizes[cid] = max(sizes.get(cid, 0), int(n))
    return sizes


def start_ranks(topo, work, tag, extra, per_rank=None):
    """Starts the example in every worker namespace; returns (procs, logs)."""
    procs, logs = [], []
    for k in range(WORKERS):
        log = work / f"{tag}-r{k}.log"
        argv = [sys.executable, str(EXAMPLE), "--config", str(work / "appliance.toml"), "--rank", str(k), *extra,
                *(per_rank(k) if per_rank else [])]
        f = open(log, "w")
        procs.append((subprocess.Popen(topo.exec_argv(topo.worker_ns[k], [*e2e.WORKER_CPUS, *argv]), stdout=f,
                                       stderr=subprocess.STDOUT), f))
        logs.append(log)
    return procs, logs


def wait_ranks(procs, timeout=240):
    deadline = time.monotonic() + timeout
    codes = []
    for p, f in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        f.close()
        codes.append(p.returncode)
    return codes


def steps_of(log):
    return [json.loads(ln) for ln in Path(log).read_text().splitlines() if ln.startswith('{"step"')]


def last_json(log):
    lines = [ln for ln in Path(log).read_text().splitlines() if ln.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


def train_phase(topo, work, tag, extra, steps):
    """All ranks train; each must succeed. Returns per rank its step lines and its final line."""
    procs, logs = start_ranks(topo, work, tag, [*extra, "--steps", str(steps)])
    codes = wait_ranks(procs)
    bad = [f"rank {k} exited with {c}: {Path(logs[k]).read_text().strip()[-600:]}" for k, c in enumerate(codes) if c != 0]
    if bad:
        raise RuntimeError(f"{tag}: " + "; ".join(bad))
    return [steps_of(log) for log in logs], [last_json(log) for log in logs]


def reference(work, tag, dtype, steps):
    out = subprocess.run([sys.executable, str(EXAMPLE), "--reference", "--world", str(WORKERS), "--dtype", dtype,
                          "--steps", str(steps)], capture_output=True, text=True, check=True).stdout
    (work / f"{tag}-reference.log").write_text(out)
    return [json.loads(ln) for ln in out.splitlines()]


def check_exact(tag, per_rank, ref, steps):
    """Every step's digest equal on every rank and to the reference's. Returns the steps checked."""
    for k, lines in enumerate(per_rank):
        if len(lines) != steps:
            raise AssertionError(f"{tag}: rank {k} logged {len(lines)} steps, expected {steps}")
        for s, line in enumerate(lines):
            if line["params"] != ref[s]["params"]:
                raise AssertionError(f"{tag}: rank {k}'s parameters after step {s} differ from the reference's")
            if line["loss"] != ref[s]["losses"][k]:
                raise AssertionError(f"{tag}: rank {k}'s loss at step {s} differs from the reference's")
    return steps


def appliance_phase(topo, work, name, dtype, ids, steps, loss):
    d = work / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "appliance.toml").write_text((work / "appliance.toml").read_text())
    topo.set_loss(loss)
    app = e2e.Appliance(topo, d / "appliance.toml", d / "dpu-stats.json", d / "dpu.log")
    try:
        per_rank, finals = train_phase(topo, d, name, ["--dtype", dtype, "--collective", ids], steps)
    finally:
        stats = app.stop()
        topo.set_loss(0)
    ref = reference(d, name, dtype, steps)
    checked = check_exact(name, per_rank, ref, steps)
    buckets = [per_rank[0][s].get("buckets") for s in (0, 1)]
    clients = [c for f in finals for c in f.get("client", [])]
    return {
        "phase": name, "dtype": dtype, "loss_percent": loss, "steps": steps, "exact_steps": checked,
        "ranks": WORKERS, "buckets": buckets, "rebuilds": [f.get("rebuilds") for f in finals],
        "retransmits": sum(c["retransmits"] for c in clients), "naks": sum(c["naks"] for c in clients),
        "losses": [ln["loss"] for ln in per_rank[0]],
        "step_seconds": sorted(ln["seconds"] for r in per_rank for ln in r)[len(per_rank[0]) * WORKERS // 2],
        "appliance": stats["aggregation"],
    }


def control_socket(log):
    """The control socket the appliance named in its log ("dpu: control: PATH (dpuctl ...")."""
    for line in Path(log).read_text().splitlines():
        if line.startswith("dpu: control: "):
            return line[len("dpu: control: "):].split(" (")[0].strip()
    raise RuntimeError(f"the appliance named no control socket: {Path(log).read_text()[-500:]}")


def registered_phase(topo, work, steps):
    """The appliance starts without collectives; the ranks (their addresses from the usual TOML)
    register collective 1 through its control socket, train, and delete it at the end."""
    d = work / "registered"
    d.mkdir(parents=True, exist_ok=True)
    (d / "appliance.toml").write_text((work / "appliance.toml").read_text())
    (d / "bare.toml").write_text(e2e.appliance_config(WORKERS, 0, topo.mtu, []))
    app = e2e.Appliance(topo, d / "bare.toml", d / "dpu-stats.json", d / "dpu.log")
    try:
        sock = control_socket(d / "dpu.log")
        per_rank, finals = train_phase(topo, d, "registered", ["--collective", "1", "--register", sock], steps)
        left = [c["collective_id"] for c in Control(sock).collectives()]
    finally:
        stats = app.stop()
    ref = reference(d, "registered", "f32", steps)
    clients = [c for f in finals for c in f.get("client", [])]
    return {
        "phase": "registered", "steps": steps, "exact_steps": check_exact("registered", per_rank, ref, steps),
        "ranks": WORKERS, "rebuilds": [f.get("rebuilds") for f in finals],
        "naks": sum(c["naks"] for c in clients), "collectives_left": left, "appliance": stats["aggregation"],
    }


def gloo_phase(topo, work, steps, clean):
    d = work / "gloo"
    d.mkdir(parents=True, exist_ok=True)
    (d / "appliance.toml").write_text((work / "appliance.toml").read_text())
    per_rank, _ = train_phase(topo, d, "gloo", ["--backend", "gloo"], steps)
    worst = 0.0
    for k, lines in enumerate(per_rank):
        ref = steps_of(work / "clean" / f"clean-r{k}.log")
        for s in range(steps):
            a, b = lines[s]["loss"], ref[s]["loss"]
            worst = max(worst, abs(a - b) / max(abs(b), 1e-6))
    if worst > 1e-4:
        raise AssertionError(f"gloo: losses differ from the appliance run's by up to {worst:.2e} (relative)")
    return {"phase": "gloo", "steps": steps, "max_relative_loss_difference": worst}


def failure_phase(topo, work, name, with_appliance, per_rank, expect):
    d = work / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "appliance.toml").write_text((work / "appliance.toml").read_text())
    app = e2e.Appliance(topo, d / "appliance.toml", d / "dpu-stats.json", d / "dpu.log") if with_appliance else None
    try:
        t0 = time.monotonic()
        procs, logs = start_ranks(topo, d, name, ["--steps", "10", "--deadline", str(DEADLINE)], per_rank)
        codes = wait_ranks(procs, timeout=120)
        elapsed = time.monotonic() - t0
    finally:
        if app:
            app.stop()
    errors = {}
    for k, log in enumerate(logs):
        for ln in Path(log).read_text().splitlines():
            if ln.startswith("train_ddp: "):
                errors[k] = ln
    return {"phase": name, "exit_codes": codes, "errors": errors, "seconds": elapsed, "expect": expect}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--loss", type=int, default=1, help="percent of UDP packets dropped per direction in the loss phase")
    ap.add_argument("--work", default=str(ROOT / "out/e2e-torch"))
    ap.add_argument("--report")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("e2e-torch: needs root (network namespaces, veth, nftables)")
    if not e2e.DPU.exists():
        sys.exit(f"e2e-torch: {e2e.DPU} is missing: run `make build` first")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)

    e2e.raise_on_sigterm()
    sizes = tensor_elements()
    # One UDP port per collective: a rank's clients of the three collectives bind side by side.
    colls = [(cid, COLLECTIVE_DTYPES[cid], sizes[cid], CHUNK, netns.WORKER_UDP_PORT + cid) for cid in sorted(sizes)]
    results = []
    with netns.Topology(WORKERS) as topo:
        (work / "appliance.toml").write_text(e2e.appliance_config(WORKERS, 0, topo.mtu, colls))
        print(f"e2e-torch: {WORKERS} DDP ranks in namespaces {topo.prefix}*, appliance {netns.APPLIANCE_IP}; collectives "
              + ", ".join(f"{cid} ({d}, {n} elements in chunks of {c})" for cid, d, n, c, _ in colls), flush=True)
        for name, dtype, ids, loss in (("clean", "f32", "1", 0), ("loss", "f32", "1", args.loss),
                                       ("mixed", "mixed", "1,2,3", 0)):
            r = appliance_phase(topo, work, name, dtype, ids, args.steps, loss)
            print(f"== {name}: {r['steps']} steps of a {dtype} MLP on {WORKERS} ranks ({loss}% loss), parameters bit-identical "
                  f"on every rank and to the reference after every step; buckets step 0 {r['buckets'][0]}, step 1 "
                  f"{r['buckets'][1]}; {r['retransmits']} client retransmits; median step {r['step_seconds'] * 1e3:.1f} ms",
                  flush=True)
            results.append(r)
        r = gloo_phase(topo, work, args.steps, results[0])
        print(f"== gloo: {r['steps']} steps; losses within {r['max_relative_loss_difference']:.1e} (relative) of the "
              f"appliance run's", flush=True)
        results.append(r)
        r = failure_phase(topo, work, "peer", True, lambda k: ["--exit-after", "3"] if k == WORKERS - 1 else [],
                          "waiting for rank 3")
        print(f"== peer: rank 3 left before step 3; exit codes {r['exit_codes']}, {r['seconds']:.1f} s", flush=True)
        for k, e in sorted(r["errors"].items()):
            print(f"   {e}")
        results.append(r)
        r = failure_phase(topo, work, "absent", False, None, "appliance unreachable")
        print(f"== absent: no appliance; exit codes {r['exit_codes']}, {r['seconds']:.1f} s", flush=True)
        for k, e in sorted(r["errors"].items()):
            print(f"   {e}")
        results.append(r)
        r = registered_phase(topo, work, args.steps)
        print(f"== registered: the appliance started without collectives, the ranks added collective 1 through its "
              f"control socket: {r['exact_steps']} steps bit-identical to the reference; collectives left after "
              f"the job: {r['collectives_left']}", flush=True)
        results.append(r)
    if args.report:
        Path(args.report).write_text(json.dumps(results, indent=1))
    # The failure phases' verdicts (the test checks the report too).
    peer, absent = results[4], results[5]
    if peer["exit_codes"][:3] != [1, 1, 1] or not all("waiting for rank 3" in peer["errors"].get(k, "") for k in range(3)):
        sys.exit(f"e2e-torch: the vanished rank was not named: {peer}")
    if absent["exit_codes"] != [1] * WORKERS or not all("appliance unreachable" in absent["errors"].get(k, "") for k in range(WORKERS)):
        sys.exit(f"e2e-torch: the absent appliance was not reported: {absent}")
    if args.loss and results[1]["retransmits"] == 0:
        sys.exit("e2e-torch: no client retransmission under loss")
    print("e2e-torch: every step exact on every rank, with and without loss, f32, f16 and bf16; failures named")


if __name__ == "__main__":
    main()
