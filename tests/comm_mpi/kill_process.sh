#!/bin/sh
# kill_process.sh MODE VICTIM PATTERN MESHTRAIN MPIRUN... -- TRAIN_ARGS...
#
# Runs `MPIRUN MESHTRAIN TRAIN_ARGS --metrics M` (TRAIN_ARGS a long run), waits until a step
# record shows the run is training, SIGKILLs the meshtrain process of launcher rank VICTIM,
# and requires, within 60 s, exactly one "meshtrain: error:" line on stderr matching
# PATTERN (grep -E).
#   MODE launcher: mpirun as a user runs it (it tears the job down itself).
#   MODE alone:    mpirun --enable-recovery, which leaves the survivors running: each must
#                  end by itself with exit code 1 (a wrapper prints every process's code).
# The run's --timeout must exceed 60 s, so that only the surviving processes' own noticing,
# not a collective's timeout, can pass the test.
mode=$1 victim=$2 pattern=$3 meshtrain=$4
shift 4
launcher=""
while [ "$1" != "--" ]; do launcher="$launcher $1"; shift; done
shift
work=$(mktemp -d)
tag="kill_process_$$"
metrics="$work/metrics.jsonl"
# Alone, a wrapper reports each process's exit code ($0 is meshtrain, $@ its arguments).
if [ "$mode" = alone ]; then
  MT_KILL_TAG=$tag $launcher --enable-recovery sh -c \
    '"$0" "$@"; echo "kill_process: process $OMPI_COMM_WORLD_RANK exited $?" >&2' \
    "$meshtrain" "$@" --metrics "$metrics" >/dev/null 2>"$work/err" &
else
  MT_KILL_TAG=$tag $launcher "$meshtrain" "$@" --metrics "$metrics" >/dev/null 2>"$work/err" &
fi
job=$!

fail() {
  echo "kill_process: $*" >&2
  cat "$work/err" >&2
  kill "$job" 2>/dev/null  # mpirun ends its processes on SIGTERM
  wait "$job"
  rm -rf "$work"
  exit 1
}

# The victim: the meshtrain process (not its wrapper) of this job with the launcher rank.
# (By its executable: meshtrain re-executes itself through /proc/self/exe, named "exe".)
binary=$(readlink -f "$meshtrain")
find_victim() {
  for d in /proc/[0-9]*; do
    [ "$(readlink "$d/exe" 2>/dev/null)" = "$binary" ] || continue
    p=${d#/proc/}
    env=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null)
    echo "$env" | grep -qx "MT_KILL_TAG=$tag" &&
      echo "$env" | grep -qx "OMPI_COMM_WORLD_RANK=$victim" && echo "$p"
  done
}

i=0
while [ ! -s "$metrics" ]; do
  i=$((i + 1))
  [ "$i" -gt 600 ] && fail "the run wrote no step record within 60 s"
  kill -0 "$job" 2>/dev/null || fail "the run ended before training"
  sleep 0.1
done
pid=$(find_victim)
[ -n "$pid" ] || fail "no meshtrain process of launcher rank $victim"
kill -9 "$pid"

i=0
while kill -0 "$job" 2>/dev/null; do
  i=$((i + 1))
  [ "$i" -gt 600 ] && fail "the job did not end within 60 s of the kill"
  sleep 0.1
done
wait "$job"
rc=$?
lines=$(grep -c '^meshtrain: error:' "$work/err")
[ "$lines" -eq 1 ] || fail "$lines 'meshtrain: error:' lines, expected 1"
grep -Eq "$pattern" "$work/err" || fail "stderr does not match '$pattern'"
if [ "$mode" = alone ]; then
  codes=$(grep '^kill_process: process [0-9]* exited' "$work/err" | grep -v "process $victim exited")
  survivors=$(echo "$codes" | grep -c exited)
  ones=$(echo "$codes" | grep -c 'exited 1$')
  [ "$survivors" -ge 1 ] && [ "$ones" -eq "$survivors" ] ||
    fail "every surviving process must exit 1 by itself"
fi
[ "$mode" = alone ] || [ "$rc" -ne 0 ] || fail "the launcher exited 0"
cat "$work/err" >&2
rm -rf "$work"
echo "kill_process: the job ended (launcher exit $rc) with one line matching '$pattern'"
