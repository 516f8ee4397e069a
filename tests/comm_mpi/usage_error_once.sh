#!/bin/sh
# usage_error_once.sh RUNS PATTERN cmd...: launches cmd (an mpirun job) RUNS times; every
# launch must exit 2 within 60 s with exactly one "meshtrain: error:" line on stderr, and
# that line must match PATTERN (grep -E). A usage error under mpirun used to be printed by
# no one in some launches (mpirun ended the job when another process exited 2 before the
# printing one had written), so one launch proves little: the count is the test.
runs=$1 pattern=$2
shift 2
err=$(mktemp)
failed=0
i=0
while [ "$i" -lt "$runs" ]; do
  i=$((i + 1))
  timeout -k 5 60 "$@" 2>"$err" >/dev/null
  rc=$?
  lines=$(grep -c '^meshtrain: error:' "$err")
  if [ "$rc" -ne 2 ] || [ "$lines" -ne 1 ] || ! grep -Eq "$pattern" "$err"; then
    failed=$((failed + 1))
    echo "usage_error_once: launch $i: exit $rc, $lines error lines:" >&2
    cat "$err" >&2
  fi
done
rm -f "$err"
if [ "$failed" -ne 0 ]; then
  echo "usage_error_once: $failed of $runs launches did not print the error exactly once" >&2
  exit 1
fi
echo "usage_error_once: $runs launches, each printed '$pattern' exactly once and exited 2"
