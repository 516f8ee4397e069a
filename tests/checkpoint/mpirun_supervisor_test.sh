#!/usr/bin/env bash
# scripts/mpirun_supervisor.sh around a real mpirun job: MESHTRAIN_FAULT kills rank 1 at a
# random step of a dp 2 ZeRO 3 run saving sharded checkpoints every 5 steps; the supervisor
# relaunches it with --resume auto and the final weights equal an uninterrupted run's, bit
# for bit.   usage: mpirun_supervisor_test.sh SOURCE_DIR MESHTRAIN MPIRUN [MPIRUN ARGS...]
set -eu
src=$1 bin=$2
shift 2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
base="train --layers 1 --dim 32 --heads 2 --seq 16 --batch 4 --steps 12 --quiet --backend mpi --dp 2 --zero 3"
# shellcheck disable=SC2086
"$@" -np 2 "$bin" $base --export "$dir/whole.safetensors"
fault_step=$((RANDOM % 11 + 2))
echo "fault at step $fault_step"
# shellcheck disable=SC2086
MESHTRAIN_FAULT=rank:1:step:$fault_step "$src/scripts/mpirun_supervisor.sh" --max-restarts 2 -- \
  "$@" -np 2 "$bin" $base --checkpoint-format sharded --save "$dir/ck" --save-every 5 \
  --resume auto --export "$dir/restarted.safetensors" 2>"$dir/err" || { cat "$dir/err"; exit 1; }
grep -q "restart 1 of 2" "$dir/err" || { echo "no restart happened"; cat "$dir/err"; exit 1; }
cmp "$dir/whole.safetensors" "$dir/restarted.safetensors"
echo "bitwise equal after a restart"
