#!/usr/bin/env bash
# Restarts an mpirun job from its newest checkpoint after a failure (docs/checkpoints.md):
# the --max-restarts of the local backend, for jobs whose ranks are MPI processes (an MPI
# world cannot be rebuilt inside one process, so the whole mpirun is relaunched).
#
#   scripts/mpirun_supervisor.sh --max-restarts N -- mpirun -np 4 build/meshtrain train \
#       --backend mpi --checkpoint-format sharded --save DIR --save-every 50 --resume auto ...
#
# The command must carry --resume auto: every attempt, the first included, then continues
# from the newest complete, valid checkpoint under --save (or starts fresh). Exit 0 ends the
# loop; exit 2 (bad usage or input) is not retried, since a restart would fail the same
# way; any other exit restarts until N restarts are spent, then that exit status is
# returned. MESHTRAIN_FAULT (docs/contracts.md §8) models one crash: it is cleared after the
# first attempt, as a relaunched job would not inherit a chaos test's setting.
set -u

max_restarts=""
while [ $# -gt 0 ]; do
  case "$1" in
    --max-restarts) max_restarts="${2:-}"; shift 2 ;;
    --max-restarts=*) max_restarts="${1#*=}"; shift ;;
    --) shift; break ;;
    *) echo "mpirun_supervisor: error: unknown option $1 (usage: --max-restarts N -- COMMAND...)" >&2; exit 2 ;;
  esac
done
case "$max_restarts" in
  ''|*[!0-9]*) echo "mpirun_supervisor: error: --max-restarts needs a non-negative integer" >&2; exit 2 ;;
esac
[ $# -gt 0 ] || { echo "mpirun_supervisor: error: no command after --" >&2; exit 2; }
case " $* " in
  *" --resume auto "*|*" --resume=auto "*) ;;
  *) echo "mpirun_supervisor: error: the command needs --resume auto (and --save DIR) to restart from its checkpoints" >&2; exit 2 ;;
esac

attempt=0
while :; do
  "$@"
  rc=$?
  [ "$rc" -eq 0 ] && exit 0
  [ "$rc" -eq 2 ] && exit 2
  if [ "$attempt" -ge "$max_restarts" ]; then
    echo "mpirun_supervisor: the job failed (exit $rc) and $max_restarts restarts are spent" >&2
    exit "$rc"
  fi
  attempt=$((attempt + 1))
  echo "mpirun_supervisor: the job failed (exit $rc); restart $attempt of $max_restarts from the newest checkpoint" >&2
  unset MESHTRAIN_FAULT
done
