#!/usr/bin/env bash
# Measurements of docs/multihost.md, across two network namespaces (scripts/multihost.sh):
#   bench/multihost_bench.sh comm  [--rate R]   all-reduce busbw at 1, 16, 64 MiB: hybrid
#                                               (2 hosts x 1 process x 2 threads) vs flat
#                                               MPI (2 hosts x 2 processes)
#   bench/multihost_bench.sh train [--rate R] [--steps N] [--sync "every-step local:4 ..."]
#                                               dp 4: tokens/s, exposed comm per step and the
#                                               final validation loss, flat MPI every-step and
#                                               the hybrid world for each --dp-sync
#   bench/multihost_bench.sh tp    [--rate R] [--steps N]
#                                               dp 2 x tp 2: tp inside a host (hybrid threads,
#                                               flat by slot) vs tp across hosts (flat by node)
# Prints one line per case. Needs root (namespaces); BIN defaults to build/meshtrain.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:?usage: $0 comm|train|tp [--rate R] [--steps N] [--sync LIST]}
shift
rate="" steps=30 syncs="every-step local:4 local:16 diloco:16"
while [ $# -gt 0 ]; do
  case "$1" in
    --rate) rate=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --sync) syncs=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
bin=${BIN:-build/meshtrain}
mh() { scripts/multihost.sh ${rate:+--rate $rate} "$@"; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# Mean of a metrics field over the steps after the first two (warm-up).
mean() { python3 -c "import json,sys
r=[json.loads(l) for l in open(sys.argv[1])]; r=[x for x in r if 'step' in x and x['step']>2]
print('%.4g' % (sum(x[sys.argv[2]] for x in r)/len(r)))" "$1" "$2"; }
last_val() { python3 -c "import json,sys
r=[json.loads(l) for l in open(sys.argv[1]) if 'val_loss' in l]; print('%.4f' % r[-1]['val_loss'])" "$1"; }

model="--layers 4 --dim 128 --heads 4 --seq 128 --batch 16 --lr 0.003 --warmup 10 --quiet"
case "$mode" in
  comm)
    for case in hybrid flat; do
      if [ $case = hybrid ]; then
        args=(--hosts 2 -- -np 2 "$bin" bench comm --backend mpi --ranks-per-process 2)
      else
        args=(--hosts 2 --slots 2 -- -np 4 "$bin" bench comm --backend mpi)
      fi
      echo "== $case"
      for bytes in 1048576 16777216 67108864; do
        mh "${args[@]}" --min-bytes $bytes --max-bytes $bytes --iters 3 --repeats 3 |
          awk '/^ *[0-9]/'
      done
    done ;;
  train)
    m="$out/flat.jsonl"
    mh --hosts 2 --slots 2 -- -np 4 "$bin" train $model --backend mpi --dp 4 --steps "$steps" \
      --eval-every "$steps" --metrics "$m" >/dev/null
    echo "flat MPI (4 processes), every-step: tokens/s $(mean "$m" tokens_per_s)  exposed comm s/step $(mean "$m" comm_exposed_s)  val_loss $(last_val "$m")"
    for s in $syncs; do
      m="$out/$s.jsonl"
      mh --hosts 2 -- -np 2 "$bin" train $model --backend mpi --ranks-per-process 2 --dp 4 \
        --steps "$steps" --eval-every "$steps" --dp-sync "$s" --metrics "$m" >/dev/null
      echo "hybrid (2 x 2 threads), dp-sync $s: tokens/s $(mean "$m" tokens_per_s)  exposed comm s/step $(mean "$m" comm_exposed_s)  val_loss $(last_val "$m")"
    done ;;
  tp)
    m="$out/hybrid.jsonl"
    mh --hosts 2 -- -np 2 "$bin" train $model --backend mpi --ranks-per-process 2 --dp 2 --tp 2 \
      --steps "$steps" --metrics "$m" >/dev/null
    echo "hybrid, tp inside a host: tokens/s $(mean "$m" tokens_per_s)"
    for map in slot node; do
      m="$out/$map.jsonl"
      mh --hosts 2 --slots 2 -- -np 4 --map-by $map "$bin" train $model --backend mpi --dp 2 \
        --tp 2 --steps "$steps" --metrics "$m" >/dev/null
      where=$([ $map = slot ] && echo inside || echo across)
      echo "flat MPI by $map, tp $where hosts: tokens/s $(mean "$m" tokens_per_s)"
    done ;;
  *) echo "unknown mode $mode" >&2; exit 2 ;;
esac
