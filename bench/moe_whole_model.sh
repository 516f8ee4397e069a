#!/bin/bash
# Whole-model training throughput of a dense GPT and an E=8, k=2 MoE GPT at dp 2 (ep 1 and
# ep 2) on the embedded corpus: median tokens/s, MFU (active FLOPs) and dp/tp comm bytes
# per step from the trainer's metrics (steps 4..14). Run from the repository root after
# scripts/build.sh; read the ratios, on a quiet machine.
set -u
B=${MESHTRAIN_BIN:-build/meshtrain}
common="--layers 4 --dim 256 --heads 4 --seq 128 --batch 16 --steps 14 --threads 1 --quiet"
run() { name=$1; shift; m=$(mktemp); rm -f $m; OMP_WAIT_POLICY=passive $B train $common "$@" --metrics $m >/dev/null 2>&1 || { echo "$name failed"; rm -f $m; return; }
  python3 -c "
import json,statistics
r=[json.loads(l) for l in open('$m') if '\"loss\"' in l][3:]
print('%-28s %9.0f tokens/s  mfu %.3f  comm_bytes/step %d' % ('$name', statistics.median(x['tokens_per_s'] for x in r), statistics.median(x['mfu'] for x in r), statistics.median(x['comm_bytes'] for x in r)))"; rm -f $m; }
run dense_dp2 --dp 2
run moe_dp2_ep1 --dp 2 --experts 8 --topk 2
run moe_dp2_ep2 --dp 2 --experts 8 --topk 2 --ep 2
