#!/usr/bin/env bash
# The pipeline bubble table of docs/pipeline.md (DualPipe-V): pp 4, m 8 and 16, dualpipev
# against 1f1b and zb-h1. Each schedule trains a few steps with --trace; the bubble is
# counted from the trace by bench/pp_trace_bubble.py (the run's order and median action
# costs, replayed: no waiting for cores counted as idle), beside the simulator's figure at
# F = B = W (meshtrain schedule), the DualPipe paper's formula for the schedule with the
# traced costs, and the run's own wall-clock metric (meaningless when ranks outnumber cores).
#
#   bench/pp_bubble_table.sh [BIN] [OUT_DIR]      (BIN default build/meshtrain)
#
# MODEL overrides the model flags; STEPS the steps per run (the first is not counted).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/meshtrain}
OUT=${2:-$(mktemp -d)}
MODEL=${MODEL:-"--layers 16 --dim 128 --heads 4 --seq 64 --vocab 256 --batch 16"}
STEPS=${STEPS:-6}
printf '| schedule | m | replayed bubble | simulated (F=B=W) | paper formula (traced costs) | wall-clock metric |\n|---|---|---|---|---|---|\n'
for m in 8 16; do
  for s in 1f1b zb-h1 dualpipev; do
    dir="$OUT/${s}_m$m"
    mkdir -p "$dir"
    # shellcheck disable=SC2086
    "$BIN" train $MODEL --steps "$STEPS" --pp 4 --microbatches "$m" --schedule "$s" \
      --lr-schedule constant --trace "$dir/trace.json" --metrics "$dir/m.jsonl" >"$dir/log" 2>&1
    replay=$(python3 bench/pp_trace_bubble.py "$dir/trace.json" --metrics "$dir/m.jsonl" --json)
    sim=$("$BIN" schedule --pp 4 --microbatches "$m" --schedule "$s" | sed -n 's/^bubble: \([0-9.]*%\).*/\1/p')
    python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print("| %s | %s | %.1f%% | %s | %.1f%% | %.1f%% |" % (sys.argv[2], sys.argv[3], 100*r["bubble"], sys.argv[4], 100*r["paper_bubble"], 100*r["wall_clock_bubble"]))' \
      "$replay" "$s" "$m" "$sim"
  done
done
echo "traces and metrics in $OUT"
