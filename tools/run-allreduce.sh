#!/usr/bin/env bash
# The main job (`make run`): generate a 4-worker AllReduce workload, run the appliance on
# conf/default.toml over it, verify every result with the independent checker, and summarise.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=out/allreduce
# Keep these in step with the [[collective]] of conf/default.toml (a test checks they are).
PKTGEN_ARGS=(--workers 4 --tensor-elements 65536 --chunk-elements 256 --rounds 2
             --shuffle --drop 0.01 --duplicate 0.01 --late 0.01 --seed 1)

mkdir -p "$OUT"
echo "== 1. workload: 4 workers all-reduce a 65536-element f32 tensor, twice (1% loss, duplicates, late resends)"
target/release/pktgen allreduce --out "$OUT" "${PKTGEN_ARGS[@]}"

echo "== 2. the appliance: target/release/dpu -c conf/default.toml"
target/release/dpu -c conf/default.toml --stats-json "$OUT/stats.json"

CHECKER=../shared/tools/gradcheck.py
echo "== 3. the independent checker: $CHECKER"
if [ -f "$CHECKER" ]; then
  python3 "$CHECKER" --config conf/default.toml --in "$OUT/input.pcap" --out "$OUT/results.pcap" | tail -n 3
else
  echo "   (not found: the results were not verified independently)"
fi

python3 - "$OUT/stats.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
a = s["aggregation"]
drops = {k: v for k, v in s["drops"].items() if v}
print("== summary")
print(f"   packets in: {sum(p['workers']['rx_packets'] for p in s['ports'])}, folded: {a['folded']}, rounds completed: {a['completed']}")
print(f"   results emitted: {a['results']}, resends (lost results): {a['resends']}, NAKs: {a['naks']}")
print(f"   drops by reason: {drops or 'none'}")
secs = s["seconds"]
print(f"   rate: {a['folded'] / secs / 1e6:.3f} Mpps of contributions, {a['payload_bytes'] * 8 / secs / 1e9:.3f} Gbit/s of payload "
      f"over {secs:.3f} s (replay of a small file: start-up dominates; see `make bench` for rates)")
PY
