#!/usr/bin/env bash
# The exposed expert all-to-all per step with and without --moe-overlap-parts (docs/moe.md,
# "Overlapped all-to-all"): the median over steps 2.. of ep_comm_wait_s and step_time_s,
# for each number of parts, and the figure issue #28 sets its goal on:
#   exposed(parts N) / exposed(parts 1)   (goal <= 0.30 where compute >= exchange)
#   bench/moe_overlap.sh local  [--parts "1 2 4"] [--steps N]   ep 2, local backend
#   bench/moe_overlap.sh hybrid [--parts ..] [--steps N] [--rate R] [--tcp-progress-thread]
#                               [--ep 2|4]
#                                  ep 4 in the hybrid world across two network namespaces
#                                  (scripts/multihost.sh: 2 hosts x 1 process x 2 rank
#                                  threads), so the all-to-all crosses the link; needs root.
#                                  --ep 2: issue #28's own setup, 2 hosts x 1 process x 1
#                                  rank (the MPI backend, one rank per process: a core each)
# Each case also runs with --trace (kept with KEEP=DIR) and bench/moe_overlap_trace.py
# reads it: the experts' compute per step (the rank's time between a dispatch's finish and
# the next combine's start), the rank's ep wait, and in the hybrid world how long the
# communicator's worker spent moving rows between processes and what share of that fell
# under the experts. "compute >= exchange" is judged from parts 1: the experts' time
# against the ep wait there (the whole exchange, blocking). Each case prints a second
# figure from the trace: the median per step of the ep wait that lies after the last
# rank's start of the same exchange, i.e. without the part spent waiting for a peer still
# computing (arrival skew, load imbalance; docs/moe.md "What exposed counts"), and its
# ratio to parts 1's.
#
# The model routes every token to every expert (--experts 4 --topk 4), so each rank's
# experts compute the same rows: with learned top-k routing on this corpus the router
# collapses within a few steps onto one or two ranks' experts, and the other ranks'
# ep_comm_wait_s is then mostly waiting for those ranks' compute, which no overlap of the
# exchange can hide (measured: loads [9, 0, 1024, 0, 964, 51, 0, 0] by step 5). MODEL
# overrides it; --rate sets the link so that the exchange is comparable to the compute.
# --shared-experts S runs the DeepSeek-style variant instead: the llama block with S shared
# SwiGLU experts beside the 4 routed ones (width 1024 each, top-4), whose compute needs no
# exchange and so fills the first dispatch's and the last combine's waits when parts > 1
# (docs/moe.md, "Overlapped all-to-all"); the default model stays the one earlier figures
# were taken on.
# --tcp-progress-thread gives Open MPI's TCP transport its own progress thread
# (btl_tcp_progress_thread 1). BIN defaults to build/meshtrain.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:?usage: $0 local|hybrid [--parts LIST] [--steps N] [--rate R] [--tcp-progress-thread] [--shared-experts S] [--ep 2|4]}
shift
parts="1 2 4" steps=10 rate="" mca="" shared="" ep=4
while [ $# -gt 0 ]; do
  case "$1" in
    --parts) parts=$2; shift 2 ;;
    --shared-experts) shared=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --ep) ep=$2; shift 2 ;;
    --tcp-progress-thread) mca="--mca btl_tcp_progress_thread 1"; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
bin=${BIN:-build/meshtrain}
model=${MODEL:-"--layers 2 --dim 512 --heads 8 --seq 128 --batch 8 --experts 4 --topk 4"}
case "$ep" in 2|4) ;; *) echo "--ep must be 2 or 4" >&2; exit 2 ;; esac
rpp=$((ep / 2))  # rank threads per process: one process on each of the two hosts
if [ -n "$shared" ]; then
  model=${MODEL:-"--arch llama --layers 2 --dim 512 --heads 8 --seq 128 --batch 8 --experts 4 \
--topk 4 --expert-ffn-dim 1024 --shared-experts $shared"}
fi
out=${KEEP:-$(mktemp -d)}
if [ -n "${KEEP:-}" ]; then mkdir -p "$out"; else trap 'rm -rf "$out"' EXIT; fi
summary() {  # metrics file, trace file, label, parts-1 wait or "", file for this wait
  /usr/bin/python3 - "$@" <<'PY'
import json, statistics, subprocess, sys
metrics, trace, label, base, keep = sys.argv[1:6]
rs = [json.loads(l) for l in open(metrics)]
rs = [r for r in rs if "step" in r and r["step"] > 1]
med = lambda k: statistics.median(r[k] for r in rs)
t = dict(zip(*[iter(subprocess.run([sys.executable, "bench/moe_overlap_trace.py", trace,
                                    "--summary", "--from-step", "2"], capture_output=True, text=True,
                                   check=True).stdout.split())] * 2))
wait = med("ep_comm_wait_s")
line = (f"{label}: ep_comm_wait_s {wait:.4f}  step_time_s {med('step_time_s'):.3f}  "
        f"experts {float(t['experts_ms']):.1f} ms/step")
if float(t["inter_under_experts"]) >= 0:
    line += (f"  worker between processes {float(t['inter_ms']):.1f} ms/step, "
             f"{100 * float(t['inter_under_experts']):.0f}% of it under the experts")
exposed = float(t["step_exposed_ms"]) / 1e3  # the trace's: after the last rank's start
after = (f"\n  after the last rank's start: {1e3 * exposed:.1f} ms/step" if exposed >= 0 else
         "\n  after the last rank's start: n/a (a trace without clock origins: before stop 42)")
if base:
    b_wait, b_exposed = map(float, base.split())
    line += f"  exposed / parts 1: {wait / b_wait:.2f}" + after
    if exposed >= 0 and b_exposed > 0:
        line += f", / parts 1: {exposed / b_exposed:.2f}"
else:
    line += (f"  (parts 1: compute {float(t['experts_ms']):.1f} ms against exchange "
             f"{1e3 * wait:.1f} ms per step: compute "
             f"{'>=' if float(t['experts_ms']) >= 1e3 * wait else '<'} exchange)")
    line += after
print(line)
open(keep, "w").write(f"{wait} {exposed}\n")
PY
}
base=""
for p in $parts; do
  flags="$model --steps $steps --lr-schedule constant --quiet --moe-overlap-parts $p"
  m="$out/p$p.jsonl" tr="$out/p$p.trace.json"
  if [ "$mode" = local ]; then
    "$bin" train $flags --dp 2 --ep 2 --metrics "$m" --trace "$tr" >/dev/null
    label="local ep 2${shared:+, $shared shared}, parts $p"
  else
    scripts/multihost.sh --hosts 2 ${rate:+--rate $rate} -- -np 2 --oversubscribe --bind-to none \
      $mca "$(realpath "$bin")" train $flags --backend mpi --ranks-per-process $rpp --dp $ep \
      --ep $ep --metrics "$m" --trace "$tr" >/dev/null
    world=$([ "$rpp" = 1 ] && echo "mpi, 1 rank per process" || echo "hybrid")
    label="$world: ep $ep across 2 namespaces${rate:+ at $rate}${mca:+, tcp progress thread}${shared:+, $shared shared}, parts $p"
  fi
  summary "$m" "$tr" "$label" "$base" "$out/p$p.wait"
  if [ "$p" = 1 ]; then base=$(cat "$out/p$p.wait"); fi
done
