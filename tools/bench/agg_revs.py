#!/usr/bin/env python3
"""The aggregation fold path at several revisions: time and instructions per contribution.

Builds `dataplane/examples/agg_profile` (the `aggregation` bench's workload: 16 slots x 8
fresh rounds per repetition, every contribution copied into a pooled buffer, parsed,
validated, folded, every completion replicated to the N members) at each revision in a
detached worktree under target/bench/revs/, every function and jump target 64-byte aligned
(as `ab.py --align`), then runs the binaries in turn, --rounds times each, and prints per
revision the median of the example's `TIME` line (ns per contribution in the counted part,
the first revision's ratio beside it) and, unless --no-callgrind, the instructions per
contribution in `agg_profile::run` (valgrind --tool=callgrind). Alternating spreads a shared
machine's noise over every side; the instruction counts do not move with it.

A revision whose example predates the `TIME` line gets it added in its worktree (the same
four lines); nothing else of it is changed. Revisions before the example existed (576b17e and
older) cannot be measured.

Usage: tools/bench/agg_revs.py REV [REV ...] [--case udp 4 256] [--reps 3000] [--rounds 6] [--no-callgrind]
Runs with the first `python3` on PATH (standard library only).
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ALIGN_FLAGS = "-C llvm-args=-align-all-functions=6 -C llvm-args=-align-all-nofallthru-blocks=6"
SLOTS, ROUNDS = 16, 8  # dataplane/benches/common/agg_workload.rs


# The lines that give agg_profile.rs its TIME line: (the line each follows, the line added).
TIME_LINES = [
    ("    let mut sent = 0;\n", "    let mut t = std::time::Duration::ZERO;\n"),
    ("    for _ in 0..reps {\n        let mut dp = case.datapath();\n        let mut io = Sink::default();\n",
     "        let st = std::time::Instant::now();\n"),
    ("        run(&case, &mut dp, &mut io);\n", "        t += st.elapsed();\n"),
    ("    let contributions = reps * n * SLOTS * ROUNDS as usize;\n",
     '    println!("TIME {:.2} ns/contribution", t.as_nanos() as f64 / contributions as f64);\n'),
]


def add_time_line(path):
    """Adds the TIME line to an agg_profile.rs that predates it (exits naming the file if the
    example's shape is not the one expected; leaves it as it is if it prints TIME already)."""
    if not os.path.exists(path):
        sys.exit(f"agg_revs.py: {path} does not exist at this revision")
    with open(path) as f:
        s = f.read()
    if TIME_LINES[-1][1] in s:
        return
    for after, line in TIME_LINES:
        if s.count(after) != 1 or line in s:
            sys.exit(f"agg_revs.py: cannot add the TIME line to {path}: expected {after.strip()!r} once")
        s = s.replace(after, after + line)
    with open(path, "w") as f:
        f.write(s)


def build(rev, i):
    """Builds agg_profile at `rev`; returns the path of a copy of the executable."""
    tree = os.path.join(ROOT, "target/bench/revs/tree")
    if os.path.exists(tree):
        subprocess.run(["git", "worktree", "remove", "--force", tree], cwd=ROOT, check=False)
        shutil.rmtree(tree, ignore_errors=True)
    subprocess.run(["git", "worktree", "prune"], cwd=ROOT, check=True)
    r = subprocess.run(["git", "worktree", "add", "--detach", tree, rev], cwd=ROOT,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"agg_revs.py: no worktree at {rev!r}: {r.stderr.strip()}")
    try:
        add_time_line(os.path.join(tree, "dataplane/examples/agg_profile.rs"))
        target = os.path.join(ROOT, "target/bench/revs/target")
        env = dict(os.environ, CARGO_TARGET_DIR=target,
                   RUSTFLAGS=(os.environ.get("RUSTFLAGS", "") + " " + ALIGN_FLAGS).strip())
        subprocess.run(["cargo", "build", "--release", "-p", "dataplane", "--no-default-features",
                        "--example", "agg_profile"], cwd=tree, env=env, check=True)
        exe = os.path.join(ROOT, f"target/bench/revs/agg_profile-{i}")
        subprocess.run(["cp", os.path.join(target, "release/examples/agg_profile"), exe], check=True)
        return exe
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", tree], cwd=ROOT, check=False)


def timed(exe, case, reps):
    out = subprocess.run([exe, *case, str(reps)], check=True, stdout=subprocess.PIPE, text=True).stdout
    m = re.search(r"^TIME ([\d.]+) ns/contribution", out, re.M)
    if not m:
        sys.exit(f"agg_revs.py: no TIME line from {exe}")
    return float(m.group(1))


def instructions(exe, case, reps=10):
    out = os.path.join(ROOT, "target/bench/revs/callgrind.out")
    r = subprocess.run(["valgrind", "--tool=callgrind", "--toggle-collect=agg_profile::run*",
                        f"--callgrind-out-file={out}", exe, *case, str(reps)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    m = re.search(r"Collected : (\d+)", r.stderr)
    if not m:
        sys.exit(f"agg_revs.py: callgrind counted nothing in agg_profile::run of {exe}")
    n = int(case[1])
    return int(m.group(1)) / (reps * n * SLOTS * ROUNDS)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("revs", nargs="+", help="revisions (the first is the base of the ratios)")
    ap.add_argument("--case", nargs=3, default=["udp", "4", "256"], metavar=("CARRIAGE", "WORKERS", "LANES"))
    ap.add_argument("--reps", type=int, default=3000, help="repetitions of the workload per run")
    ap.add_argument("--rounds", type=int, default=6, help="runs per revision, alternating")
    ap.add_argument("--no-callgrind", action="store_true")
    a = ap.parse_args()
    exes = [build(rev, i) for i, rev in enumerate(a.revs)]
    times = [[] for _ in exes]
    for r in range(a.rounds):
        for i, exe in enumerate(exes):
            times[i].append(timed(exe, a.case, a.reps))
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    ir = [None if a.no_callgrind else instructions(exe, a.case) for exe in exes]
    base = statistics.median(times[0])
    print(f"agg_profile {' '.join(a.case)}, {a.rounds} alternating runs of {a.reps} repetitions, aligned builds")
    print("| revision | ns/contribution median [min-max] | / first | instructions/contribution |")
    print("| --- | ---: | ---: | ---: |")
    for rev, t, i in zip(a.revs, times, ir):
        m = statistics.median(t)
        icol = "-" if i is None else f"{i:,.1f}"
        print(f"| {rev} | {m:.1f} [{min(t):.1f}-{max(t):.1f}] | {m / base:.3f} | {icol} |")


if __name__ == "__main__":
    main()
