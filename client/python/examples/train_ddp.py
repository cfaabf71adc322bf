#!/usr/bin/env python3
"""Data-parallel training of a small MLP with PyTorch DDP, its gradients all-reduced through the
appliance (`--backend appliance`, the DDP hook of gradclient.ddp) or by gloo (`--backend gloo`).

Every rank runs this script with the appliance's TOML, the collective id(s) and its rank:

    .venv/bin/python client/python/examples/train_ddp.py --config appliance.toml --collective 1 --rank K

The ranks, the parameter broadcast and barriers go through gloo (rendezvous at rank 0's member
address, port 29500, or MASTER_ADDR/MASTER_PORT); with the appliance backend, the gradients go
through the appliance. Synthetic regression data from a fixed seed: at step s rank k trains on
rows [(s * world + k) * batch, ... + batch) of one data set, so a run is reproducible and
`--reference` recomputes it in one process: the ranks' gradients, each divided by the world size,
summed in rank order with the spec's arithmetic (section 4 rules 6 and 7: f32 in f32; f16 and bf16
widened, summed in f32, rounded once), as a deterministic collective does.

`--dtype` is the parameters' (and so the gradients') dtype: f32, f16, bf16, or mixed (one layer
of each, one collective each: `--collective 1,2,3` in the order f32, f16, bf16); the arithmetic
of the forward and backward passes is f32 whatever it is. `--print-elements` prints the
tensor_elements each collective needs for a chunk size and exits. One JSON line per step goes to
stdout (`--log FILE` too): step, loss (this rank's batch), seconds, comm_seconds (the time inside
the comm hook; gloo with `--time-comm`), and the parameters' SHA-256 (unless `--no-digest`).
`--hidden` sets the model's size (1000: about 1 M parameters, 5000: about 25 M).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
LAYER_DTYPES = {
    "f32": ["f32", "f32", "f32"],
    "f16": ["f16", "f16", "f16"],
    "bf16": ["bf16", "bf16", "bf16"],
    "mixed": ["f32", "f16", "bf16"],
}
IN, HIDDEN, OUT = 8, 32, 1  # --hidden sets the hidden width (parameters ~ hidden^2 + 10 * hidden)


class Linear(torch.nn.Module):
    """A linear layer whose parameters are stored in `dtype` and used in f32 (CPU matmuls have no
    f16 kernel); their gradients come back in `dtype`."""

    def __init__(self, n_in: int, n_out: int, dtype: torch.dtype, gen: torch.Generator):
        super().__init__()
        bound = 1.0 / n_in**0.5
        w = (torch.rand(n_out, n_in, generator=gen) * 2 - 1) * bound
        b = (torch.rand(n_out, generator=gen) * 2 - 1) * bound
        self.weight = torch.nn.Parameter(w.to(dtype))
        self.bias = torch.nn.Parameter(b.to(dtype))

    def forward(self, x):
        return F.linear(x, self.weight.float(), self.bias.float())


class MLP(torch.nn.Module):
    def __init__(self, dtype: str, seed: int, hidden: int = HIDDEN):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        d = [DTYPES[x] for x in LAYER_DTYPES[dtype]]
        self.l1 = Linear(IN, hidden, d[0], gen)
        self.l2 = Linear(hidden, hidden, d[1], gen)
        self.l3 = Linear(hidden, OUT, d[2], gen)

    def forward(self, x):
        return self.l3(torch.relu(self.l2(torch.relu(self.l1(x)))))


def dataset(steps: int, world: int, batch: int, seed: int):
    """Inputs and targets of a whole run: (steps * world * batch) rows."""
    gen = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(steps * world * batch, IN, generator=gen)
    a = torch.randn(IN, 1, generator=gen)
    y = torch.sin(x @ a) + 0.1 * torch.randn(x.shape[0], 1, generator=gen)
    return x, y


def shard(data, step: int, rank: int, world: int, batch: int):
    x, y = data
    r0 = (step * world + rank) * batch
    return x[r0 : r0 + batch], y[r0 : r0 + batch]


def params_digest(model) -> str:
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def spec_sum(grads: list[torch.Tensor]) -> torch.Tensor:
    """The appliance's deterministic sum (spec section 4 rules 6 and 7): in rank order, f32 in f32;
    f16 and bf16 widened to f32, accumulated in f32 from the first contribution, rounded once."""
    acc = grads[0].float().clone()
    for g in grads[1:]:
        acc += g.float()
    return acc.to(grads[0].dtype)


def report(line: dict, log) -> None:
    text = json.dumps(line)
    print(text, flush=True)
    if log:
        log.write(text + "\n")
        log.flush()


class CommTimer:
    """Seconds spent inside a DDP communication hook, summed over a step's buckets: register
    `timer.hook` in place of the hook; `take` returns the sum and restarts it. Both backends'
    hooks here are synchronous, so this is the time the backward pass waits for the gradients'
    AllReduce."""

    def __init__(self, hook):
        self.seconds = 0.0

        def timed_hook(state, bucket):  # unannotated: this module's annotations are strings
            t0 = time.perf_counter()
            try:
                return hook(state, bucket)
            finally:
                self.seconds += time.perf_counter() - t0

        self.hook = timed_hook

    def take(self) -> float:
        s, self.seconds = self.seconds, 0.0
        return s


def gloo_hook(world: int, bucket):
    """The gloo counterpart of the appliance hook, synchronous as it is: divide the bucket by the
    world size, `dist.all_reduce` it and wait, return a completed future (DDP's default hook would
    overlap the AllReduce with the backward pass instead)."""
    import torch.distributed as dist

    tensor = bucket.buffer()
    tensor.div_(world)
    dist.all_reduce(tensor)
    fut = torch.futures.Future()
    fut.set_result(tensor)
    return fut


def train(args) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from gradclient import GradientError
    from gradclient.ddp import appliance_hook, init_appliance, init_process_group, register_collective
    from gradclient.ddp import unregister_collective

    ids = [int(x) for x in args.collective.split(",")]
    if args.backend == "appliance":
        state = init_appliance(args.config, ids, args.rank, deadline=args.deadline)
        world = state.world_size
        if args.register:
            # The appliance runs without these collectives: each is added now through its
            # control socket (deterministic: bit-identical training; replacing what a crashed
            # earlier run of this job left), and deleted at the end.
            registered = {
                c.collective.collective_id: register_collective(
                    c, control=args.register, replace=True, deterministic=True, slot_timeout_ms=1000
                )
                for c in state.by_dtype.values()
            }
    else:
        world = init_process_group(args.config, ids[0], args.rank)
    model = MLP(args.dtype, args.seed, args.hidden)
    # A small bucket cap, the first bucket's too: several buckets even for this small model (the
    # hook's mapping at work; DDP reads its first bucket's cap from this attribute).
    dist._DEFAULT_FIRST_BUCKET_BYTES = int(args.bucket_kb * 1024)
    ddp = DDP(model, bucket_cap_mb=args.bucket_kb / 1024)
    timer = None
    if args.backend == "appliance":
        timer = CommTimer(appliance_hook)
        ddp.register_comm_hook(state, timer.hook)
    elif args.time_comm:
        timer = CommTimer(gloo_hook)
        ddp.register_comm_hook(world, timer.hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    data = dataset(args.steps, world, args.batch, args.seed)
    log = open(args.log, "w") if args.log else None
    dist.barrier()
    for step in range(args.steps):
        if args.exit_after is not None and step == args.exit_after:
            report({"rank": args.rank, "exit_at_step": step}, log)
            os._exit(0)  # a rank that vanishes: the others' next step must name it
        t0 = time.monotonic()
        x, y = shard(data, step, args.rank, world, args.batch)
        opt.zero_grad()
        loss = F.mse_loss(ddp(x), y)
        try:
            loss.backward()
        except (GradientError, RuntimeError) as e:
            # torch re-raises the hook's error as a RuntimeError: "AllreduceTimeout: ...\n\nAt: ..."
            msg = str(e).split("\n\nAt:")[0]
            print(f"train_ddp: rank {args.rank}: step {step} failed: {msg}", file=sys.stderr, flush=True)
            os._exit(1)  # not dist.destroy_process_group: the peers may be gone
        opt.step()
        line = {"step": step, "loss": loss.item(), "seconds": time.monotonic() - t0}
        if timer is not None:
            line["comm_seconds"] = timer.take()
        if not args.no_digest:
            line["params"] = params_digest(model)
        if args.backend == "appliance" and step <= 1:
            line["buckets"] = [[s.index, s.collective_id, s.offset, s.elements] for s in state.layout]
        report(line, log)
    dist.barrier()
    if args.backend == "appliance" and args.register:
        for cid, table in registered.items():
            unregister_collective(cid, control=args.register, table=table)
    report({"rank": args.rank, "done": args.steps, "backend": args.backend,
            **({"client": [c.stats for c in state.by_dtype.values()], "rebuilds": state.rebuilds}
               if args.backend == "appliance" else {})}, log)


def reference(args) -> None:
    """The run recomputed in one process: each step, every rank's gradient on its own batch from
    the same parameters, divided by the world size, summed in rank order as the appliance does."""
    world = args.world
    model = MLP(args.dtype, args.seed, args.hidden)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    data = dataset(args.steps, world, args.batch, args.seed)
    log = open(args.log, "w") if args.log else None
    for step in range(args.steps):
        grads, losses = [], []
        for k in range(world):
            x, y = shard(data, step, k, world, args.batch)
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            losses.append(loss.item())
            grads.append([p.grad.detach().clone().div_(world) for p in model.parameters()])
        for i, p in enumerate(model.parameters()):
            p.grad = spec_sum([g[i] for g in grads])
        opt.step()
        report({"step": step, "losses": losses, "params": params_digest(model)}, log)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=["appliance", "gloo"], default="appliance")
    ap.add_argument("--config", help="the appliance's TOML (members, addresses)")
    ap.add_argument("--collective", default="1", help="collective id(s), comma-separated: f32[,f16,bf16] for --dtype mixed")
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--register", metavar="SOCKET",
                    help="add the collective(s) to the running appliance through its control socket "
                         "(members from --config's addresses) and delete them at the end")
    ap.add_argument("--dtype", choices=sorted(LAYER_DTYPES), default="f32")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--hidden", type=int, default=HIDDEN,
                    help=f"hidden width of the MLP (default {HIDDEN}; 1000: about 1 M parameters, 5000: about 25 M)")
    ap.add_argument("--time-comm", action="store_true",
                    help="gloo: all-reduce in a synchronous, timed comm hook (the appliance's hook is always timed); "
                         "each step's line gets comm_seconds")
    ap.add_argument("--no-digest", action="store_true", help="leave the parameters' SHA-256 out of the step lines")
    ap.add_argument("--batch", type=int, default=16, help="rows per rank per step")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bucket-kb", type=float, default=1.0, help="DDP's bucket cap, KiB (default 1: several buckets)")
    ap.add_argument("--deadline", type=float, default=10.0, help="the client's deadline, s without progress")
    ap.add_argument("--log", help="also write the JSON lines here")
    ap.add_argument("--exit-after", type=int, help="leave before this step (tests of a vanished rank)")
    ap.add_argument("--reference", action="store_true", help="recompute the run in one process (--world ranks)")
    ap.add_argument("--world", type=int, default=4, help="ranks, for --reference")
    ap.add_argument("--print-elements", type=int, metavar="CHUNK",
                    help="print the tensor_elements of each collective for chunks of CHUNK elements, and exit")
    args = ap.parse_args()
    torch.set_num_threads(1)  # the same arithmetic in every rank and in the reference
    if args.print_elements:
        from gradclient.ddp import collective_elements

        model = MLP(args.dtype, args.seed, args.hidden)
        for name in dict.fromkeys(LAYER_DTYPES[args.dtype]):
            print(f"{name}: tensor_elements = {collective_elements(model.parameters(), args.print_elements, DTYPES[name])}")
        return
    if args.reference:
        reference(args)
        return
    if not args.config:
        ap.error("--config is needed (or --reference, --print-elements)")
    train(args)


if __name__ == "__main__":
    main()
