#!/bin/sh
# expect_exit.sh CODE PATTERN SECONDS cmd...: runs cmd with a time limit and passes only if
# it exits with CODE and its stderr matches PATTERN (grep -E). A hang fails as exit 124.
# With EXPECT_ERROR_LINES=N set, stderr must also hold exactly N "meshtrain: error:" lines
# (a usage error under mpirun is printed once, not once per process). With EXPECT_NO_MATCH
# set, stderr must not match that pattern (grep -E).
code=$1 pattern=$2 limit=$3
shift 3
err=$(mktemp)
timeout -k 5 "$limit" "$@" 2>"$err" >/dev/null
rc=$?
cat "$err" >&2
if [ "$rc" -ne "$code" ]; then
  echo "expect_exit: exit code $rc, expected $code" >&2
  rm -f "$err"; exit 1
fi
if ! grep -Eq "$pattern" "$err"; then
  echo "expect_exit: stderr does not match '$pattern'" >&2
  rm -f "$err"; exit 1
fi
if [ -n "${EXPECT_ERROR_LINES:-}" ]; then
  lines=$(grep -c '^meshtrain: error:' "$err")
  if [ "$lines" -ne "$EXPECT_ERROR_LINES" ]; then
    echo "expect_exit: $lines 'meshtrain: error:' lines, expected $EXPECT_ERROR_LINES" >&2
    rm -f "$err"; exit 1
  fi
fi
if [ -n "${EXPECT_NO_MATCH:-}" ] && grep -Eq "$EXPECT_NO_MATCH" "$err"; then
  echo "expect_exit: stderr matches '$EXPECT_NO_MATCH', which it must not" >&2
  rm -f "$err"; exit 1
fi
rm -f "$err"
echo "expect_exit: exit $rc and stderr matched '$pattern'"
