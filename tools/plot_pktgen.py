#!/usr/bin/python3
"""Plots of `pktgen run` summaries: throughput against frame size, and the latency CDF.

    /usr/bin/python3 tools/plot_pktgen.py RUN.json [RUN.json ...] --out DIR [--side rx|tx] [--title TEXT]

Runs with Debian's interpreter, /usr/bin/python3, whose matplotlib `make deps` installs
(python3-matplotlib); it needs nothing else.

Input: the JSON summaries that `pktgen run --json FILE` writes (one or more runs). Every stream
with a single frame size and a receive port is a point of the throughput plot (a pcap replay
only when its capture holds frames of one length, `replay.distinct_sizes` 1): x its frame size
(bytes without FCS), y its received Mpps and Gbit/s (over its arrival window, at its layer), or
with `--side tx` what its tx queues took (for a device that takes more than comes back to a
generator whose receiving shares a CPU with its sending). Points
join into one line per series; a series is the stream's name without a trailing size
(`fwd-64`, `fwd@64` and `fwd` are series `fwd`), so a sweep run once per size draws one line. Every
stream with a `latency_cdf` is one line of the latency plot (x µs, log scale; y the fraction of
packets at or below), labelled FILE:STREAM when several files are given.

Output: DIR/throughput.png and DIR/latency_cdf.png (only those with data); each written whole
under a temporary name first. Exit status 0, or 2 with a message naming the file for unreadable
or malformed input, or when no input has anything to plot.
"""

import argparse
import json
import os
import re
import sys
from pathlib import Path

SIZE_SUFFIX = re.compile(r"[-@_]?\d+$")


def die(msg: str):
    """Exit status 2 with `msg` on stderr."""
    print(f"plot_pktgen: {msg}", file=sys.stderr)
    sys.exit(2)


def series_name(stream_name: str) -> str:
    """A stream's series: its name without a trailing frame size."""
    base = SIZE_SUFFIX.sub("", stream_name)
    return base or stream_name


def load(paths):
    """(label, summary) per file; exits 2 naming a file that is not a pktgen summary."""
    runs = []
    for p in paths:
        try:
            doc = json.loads(Path(p).read_text())
        except (OSError, ValueError) as e:
            die(f"{p}: {e}")
        if not isinstance(doc, dict) or not isinstance(doc.get("streams"), list):
            die(f"{p}: not a pktgen summary (no `streams` list)")
        runs.append((Path(p).stem, doc))
    return runs


def throughput_points(runs, side="rx"):
    """{series: sorted [(size, Mpps, Gbit/s)]} from single-size received streams, their received
    (`side` "rx") or sent ("tx") rates."""
    out = {}
    for _, doc in runs:
        for st in doc["streams"]:
            sizes = st.get("sizes") or []
            if len(sizes) != 1 or st.get("rx_pps") is None:
                continue
            # A pcap replay is a point only if its file holds frames of one length (summaries
            # from before `replay.distinct_sizes` listed a capture's longest frame alone).
            replay = st.get("replay")
            if replay is not None and replay.get("distinct_sizes") != 1:
                continue
            pps, gbps = st[f"{side}_pps"], st[f"{side}_gbps"]
            out.setdefault(series_name(st["name"]), []).append((sizes[0], pps / 1e6, gbps))
    return {k: sorted(v) for k, v in out.items()}


def cdf_lines(runs):
    """[(label, [µs], [fraction])] from streams with a latency CDF."""
    lines = []
    for label, doc in runs:
        for st in doc["streams"]:
            pts = st.get("latency_cdf") or []
            if not pts:
                continue
            name = st["name"] if len(runs) == 1 else f"{label}:{st['name']}"
            lines.append((name, [p[0] for p in pts], [p[1] for p in pts]))
    return lines


def save(fig, path: Path):
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fig.savefig(tmp, dpi=110, format="png")
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="pktgen summaries (pktgen run --json)")
    ap.add_argument("--out", required=True, help="directory for the PNG files")
    ap.add_argument("--side", choices=("rx", "tx"), default="rx",
                    help="throughput received (default) or sent (what the tx queues took)")
    ap.add_argument("--title", default="", help="a line above each plot")
    a = ap.parse_args()
    runs = load(a.runs)
    points, lines = throughput_points(runs, a.side), cdf_lines(runs)
    if not points and not lines:
        die("nothing to plot: no stream with one frame size and a receive port, and no latency_cdf")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    if points:
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
        for name, pts in sorted(points.items()):
            xs = [p[0] for p in pts]
            ax1.plot(xs, [p[1] for p in pts], marker="o", label=name)
            ax2.plot(xs, [p[2] for p in pts], marker="o", label=name)
        what = "received" if a.side == "rx" else "sent"
        for ax, unit in ((ax1, f"{what} Mpps"), (ax2, f"{what} Gbit/s")):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("frame size (bytes, without FCS)")
            ax.set_ylabel(unit)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend()
        fig.suptitle(a.title or "throughput against frame size", fontsize="medium")
        fig.tight_layout()
        save(fig, out / "throughput.png")
        written.append(out / "throughput.png")
        plt.close(fig)
    if lines:
        fig, ax = plt.subplots(figsize=(9, 4.5))
        for name, us, frac in lines:
            ax.step(us, frac, where="post", label=name)
        ax.set_xscale("log")
        ax.set_xlabel("latency (µs)")
        ax.set_ylabel("fraction of packets at or below")
        ax.set_ylim(0, 1.01)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
        fig.suptitle(a.title or "latency CDF", fontsize="medium")
        fig.tight_layout()
        save(fig, out / "latency_cdf.png")
        written.append(out / "latency_cdf.png")
        plt.close(fig)
    for f in written:
        print(f)


if __name__ == "__main__":
    main()
