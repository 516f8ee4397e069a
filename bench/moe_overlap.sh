#!/usr/bin/env bash
# The exposed expert all-to-all per step with and without --moe-overlap-parts (docs/moe.md,
# "Overlapped all-to-all"): the median over steps 2.. of ep_comm_wait_s and step_time_s,
# for each number of parts:
#   bench/moe_overlap.sh local  [--parts "1 2 4"] [--steps N]   ep 2, local backend
#   bench/moe_overlap.sh hybrid [--parts ..] [--steps N] [--rate R]
#                                  ep 4 in the hybrid world across two network namespaces
#                                  (scripts/multihost.sh: 2 hosts x 1 process x 2 rank
#                                  threads), so the all-to-all crosses the link; needs root
# The model is sized so that the experts' compute per part outlasts its rows' travel on an
# idle machine (MODEL overrides it). Prints one line per case. BIN defaults to build/meshtrain.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:?usage: $0 local|hybrid [--parts LIST] [--steps N] [--rate R]}
shift
parts="1 2 4" steps=10 rate=""
while [ $# -gt 0 ]; do
  case "$1" in
    --parts) parts=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
bin=${BIN:-build/meshtrain}
model=${MODEL:-"--layers 2 --dim 512 --heads 8 --seq 128 --batch 8 --experts 8 --topk 2"}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
summary() {  # metrics file, label
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, statistics, sys
rs = [json.loads(l) for l in open(sys.argv[1])]
rs = [r for r in rs if "step" in r and r["step"] > 1]
med = lambda k: statistics.median(r[k] for r in rs)
print(f"{sys.argv[2]}: ep_comm_wait_s {med('ep_comm_wait_s'):.4f}  step_time_s "
      f"{med('step_time_s'):.3f}  ep_comm_bytes {rs[0]['ep_comm_bytes']}")
PY
}
for p in $parts; do
  flags="$model --steps $steps --lr-schedule constant --quiet --moe-overlap-parts $p"
  m="$out/p$p.jsonl"
  if [ "$mode" = local ]; then
    "$bin" train $flags --dp 2 --ep 2 --metrics "$m" >/dev/null
    summary "$m" "local ep 2, parts $p"
  else
    scripts/multihost.sh --hosts 2 ${rate:+--rate $rate} -- -np 2 --oversubscribe --bind-to none \
      "$(realpath "$bin")" train $flags --backend mpi --ranks-per-process 2 --dp 4 --ep 4 \
      --metrics "$m" >/dev/null
    summary "$m" "hybrid ep 4 across 2 namespaces${rate:+ at $rate}, parts $p"
  fi
done
