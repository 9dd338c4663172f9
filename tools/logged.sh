#!/usr/bin/env bash
# tools/logged.sh LOG WHAT COMMAND...: runs COMMAND with its output in the file LOG and prints one
# line, "WHAT (log: LOG)"; when COMMAND fails, prints the end of LOG too and fails with its exit code.
# The bootstrap and the build use it, so that `make demo` and `make test` print one line per step.
set -uo pipefail
log=$1 what=$2
shift 2
mkdir -p "$(dirname "$log")"
echo "$what (log: $log)"
"$@" > "$log" 2>&1
status=$?
if [ "$status" -ne 0 ]; then
  echo "$what: failed (exit code $status); the last 60 lines of $log:"
  tail -n 60 "$log"
fi
exit "$status"
