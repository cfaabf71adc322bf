#!/usr/bin/env python3
"""PyTorch DDP through the appliance, measured (`make demo-torch`).

Runs with the project's torch environment (`.venv/bin/python tools/e2e/torch_demo.py`, root:
network namespaces). The network of tools/e2e/netns.py, 4 ranks of
client/python/examples/train_ddp.py (f32 MLP, one per worker namespace), for each MTU (9000 with
8896-byte chunks, 1500 with 1408-byte chunks: tools/e2e/run.py's chunk_bytes, the largest that
fit) and each model size (--hidden 1000: about 1 M parameters; 5000: about 25 M), trained twice
on the same veths in the same run:

  native     gradients through the appliance (net_af_packet, its worker lcore polling CPU 1),
             the hook's client the native one (GRADCLIENT_IMPL=native: the Rust client, PyO3)
  python     the same with the pure-Python client (GRADCLIENT_IMPL=python)
  gloo       gradients by gloo's AllReduce over TCP (CPU 1 idle)

The ranks are pinned to CPU 0 in every run (tools/e2e/run.py's WORKER_CPUS). Both backends
all-reduce in a synchronous, timed DDP comm hook (train_ddp.py: the appliance's hook; gloo with
--time-comm), DDP buckets of 25 MiB. Each run trains --steps (1 M) or --large-steps (25 M) steps
after one warm-up step (not counted). Per configuration: the median step time, the AllReduce share
(time inside the comm hook / step time, medians over the counted steps of the ranks' mean) and the
algorithmic bandwidth (gradient bytes / time inside the hook, MB/s = 10^6 B/s). A table is
printed and --report (JSON) holds it, with the ratios appliance / gloo of algbw.
"""

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import netns  # noqa: E402
import run as e2e  # noqa: E402
import torch_ddp  # noqa: E402

ROOT = e2e.ROOT
WORKERS = torch_ddp.WORKERS
SIZES = [("1M", 1000), ("25M", 5000)]  # (label, hidden width)
MTUS = [9000, 1500]
BUCKET_KB = 25 * 1024  # DDP's default bucket cap (25 MiB)
CID = 1
MEMORY_LIMIT_MB = 2048  # the appliance's dataplane.memory_limit_mb
IMPLS = {"native": "native", "python": "python"}  # appliance backends: GRADCLIENT_IMPL of the ranks


def parameters(hidden):
    """The f32 MLP's parameter count (train_ddp.py: 8 -> hidden -> hidden -> 1, with biases)."""
    i, o = 8, 1
    return i * hidden + hidden + hidden * hidden + hidden + hidden * o + o


def summarize(per_rank, warmup):
    """Per counted step the ranks' mean step time and time in the hook; their medians (s)."""
    steps = min(len(r) for r in per_rank)
    step_s, comm_s = [], []
    for s in range(warmup, steps):
        step_s.append(statistics.mean(r[s]["seconds"] for r in per_rank))
        comm_s.append(statistics.mean(r[s]["comm_seconds"] for r in per_rank))
    return statistics.median(step_s), statistics.median(comm_s), len(step_s)


def measure(topo, work, backend, label, hidden, steps):
    tag = f"{backend}-{label}"
    extra = ["--hidden", str(hidden), "--no-digest", "--bucket-kb", str(BUCKET_KB), "--collective", str(CID),
             "--batch", "32"]
    if backend == "gloo":
        extra += ["--backend", "gloo", "--time-comm"]
    app = None
    appliance = backend in IMPLS
    if appliance:
        os.environ["GRADCLIENT_IMPL"] = IMPLS[backend]  # the ranks inherit it
        app = e2e.Appliance(topo, work / "appliance.toml", work / f"{tag}-dpu-stats.json", work / f"{tag}-dpu.log")
    t0 = time.monotonic()
    try:
        per_rank, finals = torch_ddp.train_phase(topo, work, tag, extra, steps + 1)
    finally:
        if app:
            app.stop()
    wall = time.monotonic() - t0
    step, comm, counted = summarize(per_rank, 1)
    grad_bytes = parameters(hidden) * 4
    row = {
        "model": label, "parameters": parameters(hidden), "mtu": topo.mtu, "backend": backend,
        "chunk_bytes": e2e.CHUNK_BYTES if appliance else None,
        "steps_counted": counted, "ms_per_step": step * 1e3, "allreduce_ms": comm * 1e3,
        "allreduce_share": comm / step, "gradient_bytes": grad_bytes, "algbw_MBps": grad_bytes / comm / 1e6,
        "wall_seconds": wall,
    }
    if appliance:
        clients = [c for f in finals for c in f.get("client", [])]
        row["retransmits"] = sum(c["retransmits"] for c in clients)
        if backend == "native":
            row["datagrams"] = sum(c["datagrams"] for c in clients)
            row["send_calls"] = sum(c["send_calls"] for c in clients)
            row["gso_sends"] = sum(c.get("gso_sends", 0) for c in clients)
            row["gro_recvs"] = sum(c.get("gro_recvs", 0) for c in clients)
            row["recv_calls"] = sum(c["recv_calls"] for c in clients)
    return row


def table(rows):
    out = ["| model | MTU | backend | ms/step (median) | AllReduce share | algbw MB/s |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['model']} ({r['parameters'] / 1e6:.2f} M) | {r['mtu']} | {r['backend']} | "
                   f"{r['ms_per_step']:.1f} | {r['allreduce_share'] * 100:.0f} % | {r['algbw_MBps']:.1f} |")
    return "\n".join(out)


def ratios(rows):
    by = {(r["model"], r["mtu"], r["backend"]): r for r in rows}
    res = []
    for (model, mtu, b), r in by.items():
        g = by.get((model, mtu, "gloo"))
        if b in IMPLS and g:
            res.append({"model": model, "mtu": mtu, "client": b, "algbw_ratio": r["algbw_MBps"] / g["algbw_MBps"],
                        "step_ratio": g["ms_per_step"] / r["ms_per_step"]})
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=5, help="counted steps per run of the 1 M model (after one warm-up step)")
    ap.add_argument("--large-steps", type=int, default=2,
                    help="counted steps per run of the 25 M model (a step of the Python client at MTU 1500 takes about a minute)")
    ap.add_argument("--sizes", default=",".join(l for l, _ in SIZES), help="model sizes: 1M, 25M")
    ap.add_argument("--mtus", default=",".join(map(str, MTUS)))
    ap.add_argument("--backends", default="native,python,gloo", help="native, python (the appliance with that client), gloo")
    ap.add_argument("--work", default=str(ROOT / "out/e2e-torch-demo"))
    ap.add_argument("--report", help="the table as JSON (default WORK/demo-torch.json)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("demo-torch: needs root (network namespaces, veth)")
    if not e2e.DPU.exists():
        sys.exit(f"demo-torch: {e2e.DPU} is missing: run `make build` first")
    sizes = [(l, h) for l, h in SIZES if l in args.sizes.split(",")]
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)

    e2e.raise_on_sigterm()
    rows = []
    for mtu in [int(m) for m in args.mtus.split(",")]:
        e2e.CHUNK_BYTES = e2e.chunk_bytes(mtu)
        chunk = e2e.CHUNK_BYTES // 4
        d = work / f"mtu{mtu}"
        d.mkdir(parents=True, exist_ok=True)
        # One collective sized for the largest model (any DDP bucketing of it fits).
        elements = max(sum(-(-n // chunk) * chunk for n in (8 * h, h, h * h, h, h, 1)) for _, h in sizes)
        with netns.Topology(WORKERS, mtu=mtu) as topo:
            conf = e2e.appliance_config(WORKERS, 0, mtu, [(CID, "f32", elements, chunk, netns.WORKER_UDP_PORT + CID)])
            # The 25 M model's collective (100 MB of f32) needs about 600 MiB of slots (and EAL memory for them).
            (d / "appliance.toml").write_text(conf.replace("memory_limit_mb = 256", f"memory_limit_mb = {MEMORY_LIMIT_MB}")
                                             .replace('"-m", "512"', f'"-m", "{MEMORY_LIMIT_MB + 256}"'))
            for label, hidden in sizes:
                for backend in args.backends.split(","):
                    r = measure(topo, d, backend, label, hidden, args.steps if label == "1M" else args.large_steps)
                    print(f"== {label} MTU {mtu} {backend}: {r['ms_per_step']:.1f} ms/step, AllReduce "
                          f"{r['allreduce_ms']:.1f} ms ({r['allreduce_share'] * 100:.0f} %), "
                          f"{r['algbw_MBps']:.1f} MB/s ({r['wall_seconds']:.0f} s)", flush=True)
                    rows.append(r)
    print()
    print(f"{WORKERS} DDP ranks pinned to CPU 0 (the appliance polls CPU 1), f32 MLP, {args.steps} (1M) or "
          f"{args.large_steps} (25M) steps after a warm-up step; AllReduce = time inside the (synchronous) comm hook")
    print(table(rows))
    rs = ratios(rows)
    for r in rs:
        print(f"appliance ({r['client']} client) / gloo, {r['model']} MTU {r['mtu']}: algbw x{r['algbw_ratio']:.2f}, step time "
              f"x{r['step_ratio']:.2f} (gloo's / the appliance's)")
    report = Path(args.report) if args.report else work / "demo-torch.json"
    report.write_text(json.dumps({"rows": rows, "ratios": rs}, indent=1))
    print(f"demo-torch: report {report}")


if __name__ == "__main__":
    main()
