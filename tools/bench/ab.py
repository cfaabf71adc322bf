#!/usr/bin/env python3
"""Alternating A/B runs of the criterion benches: a base revision against the working tree (or --head REV).

Builds the bench binaries of both (the base in a detached worktree under target/bench/ab/,
with its own target directory), then runs them in turn, base and head, ROUNDS times each, and
prints per benchmark the median of each side's medians and their ratio (head / base time: below
1 is faster). Alternating spreads the noise of a shared machine over both sides.

Usage: tools/bench/ab.py [--base REV] [--rounds N] [--seconds S] [--bench NAME ...] [--filter RE] [--head REV] [--align]
Runs with the first `python3` on PATH (standard library only).
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
UNITS = {"ps": 1e-3, "ns": 1.0, "µs": 1e3, "us": 1e3, "ms": 1e6, "s": 1e9}


# `--align`: every function and every block that is not fallen into starts on a 64-byte line,
# in both builds, so that which loop straddles a cache line or a 32-byte fetch window stops
# depending on what else the commit changed (unaligned, identical instruction streams of the
# fold path have measured 1.000 and 1.047 of each other).
ALIGN_FLAGS = "-C llvm-args=-align-all-functions=6 -C llvm-args=-align-all-nofallthru-blocks=6"


def bench_exes(tree, target_dir, benches, rustflags=None):
    """Builds the named benches of the dataplane crate in `tree`; returns {bench: executable}."""
    cmd = ["cargo", "bench", "-p", "dataplane", "--no-default-features", "--no-run", "--message-format=json"]
    for b in benches:
        cmd += ["--bench", b]
    env = dict(os.environ, CARGO_TARGET_DIR=target_dir)
    if rustflags:
        env["RUSTFLAGS"] = (env.get("RUSTFLAGS", "") + " " + rustflags).strip()
    out = subprocess.run(cmd, cwd=tree, env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
    exes = {}
    for line in out.splitlines():
        try:
            m = json.loads(line)
        except json.JSONDecodeError:
            continue
        if m.get("reason") == "compiler-artifact" and m.get("executable") and "bench" in m["target"]["kind"]:
            exes[m["target"]["name"]] = m["executable"]
    return exes


def run(exe, flt, seconds):
    """Runs one criterion bench binary; returns {benchmark id: median ns}."""
    cmd = [exe, "--bench", "--noplot", "--discard-baseline", "--warm-up-time", "1", "--measurement-time", str(seconds)]
    if flt:
        cmd.append(flt)
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    res, name = {}, None
    for line in out.splitlines():
        m = re.match(r"^(\S.*?)\s+time:\s+\[(.*)\]", line)
        if m:
            name, rng = m.group(1).strip(), m.group(2)
        else:
            m = re.match(r"^\s+time:\s+\[(.*)\]", line)
            if not m or name is None:
                if line and not line.startswith(" "):
                    name = line.strip()
                continue
            rng = m.group(1)
        parts = rng.split()
        # A "change:" block repeats `time:` with percentages: only absolute times count.
        if len(parts) == 6 and parts[3] in UNITS:
            res.setdefault(name, float(parts[2]) * UNITS[parts[3]])
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="3303d62")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=3, help="criterion measurement time per benchmark")
    ap.add_argument("--bench", action="append", help="bench targets (default: packet_core, aggregation)")
    ap.add_argument("--filter", default="", help="criterion filter (a regex over benchmark ids)")
    ap.add_argument("--head", help="a revision to measure instead of the working tree (built in a worktree)")
    ap.add_argument("--align", action="store_true", help="build both sides with every function and jump target 64-byte aligned")
    a = ap.parse_args()
    benches = a.bench or ["packet_core", "aggregation"]
    base_tree = os.path.join(ROOT, "target/bench/ab/base")
    if os.path.exists(base_tree):
        subprocess.run(["git", "worktree", "remove", "--force", base_tree], cwd=ROOT, check=False)
    subprocess.run(["git", "worktree", "add", "--detach", base_tree, a.base], cwd=ROOT, check=True)
    try:
        flags = ALIGN_FLAGS if a.align else None
        suffix = "-aligned" if a.align else ""
        base = bench_exes(base_tree, os.path.join(ROOT, f"target/bench/ab/base-target{suffix}"), benches, flags)
        head_tree = ROOT
        if a.head:
            head_tree = os.path.join(ROOT, "target/bench/ab/head")
            if os.path.exists(head_tree):
                subprocess.run(["git", "worktree", "remove", "--force", head_tree], cwd=ROOT, check=False)
            subprocess.run(["git", "worktree", "add", "--detach", head_tree, a.head], cwd=ROOT, check=True)
        if a.align:
            head_target = os.path.join(ROOT, "target/bench/ab/head-target-aligned")
        elif a.head:
            head_target = os.path.join(ROOT, "target/bench/ab/head-target")
        else:
            head_target = os.path.join(ROOT, "target")
        head = bench_exes(head_tree, head_target, benches, flags)
        samples = {}
        for r in range(a.rounds):
            for side, exes in (("base", base), ("head", head)):
                for b in benches:
                    for k, v in run(exes[b], a.filter, a.seconds).items():
                        samples.setdefault(k, {"base": [], "head": []})[side].append(v)
                print(f"round {r + 1}/{a.rounds}: {side} done", file=sys.stderr)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", base_tree], cwd=ROOT, check=False)
        if a.head:
            subprocess.run(["git", "worktree", "remove", "--force", os.path.join(ROOT, "target/bench/ab/head")], cwd=ROOT, check=False)
    print(f"| benchmark | {a.base} median [min-max] (ns) | head median [min-max] (ns) | head / base | rounds head faster |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for k, s in sorted(samples.items()):
        if s["base"] and s["head"]:
            b, h = statistics.median(s["base"]), statistics.median(s["head"])
            # Round by round (each round runs base, then head): how often head was the faster.
            wins = sum(hh < bb for bb, hh in zip(s["base"], s["head"]))
            print(f"| {k} | {b:.1f} [{min(s['base']):.1f}-{max(s['base']):.1f}] | "
                  f"{h:.1f} [{min(s['head']):.1f}-{max(s['head']):.1f}] | {h / b:.3f} | {wins}/{len(s['head'])} |")


if __name__ == "__main__":
    main()
