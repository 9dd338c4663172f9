#!/usr/bin/env bash
# Runs the libFuzzer harnesses built in build-fuzz/ (ASan + UBSan): the text parser, the bytecode
# and bundle loaders, and execution (fuzz_run: programs generated around each node, run).
# FUZZ_HARNESSES picks some of them ("run", "text bundle"); the default is all four.
#   tools/fuzz.sh replay RUNS     replay the committed corpus, then RUNS more inputs per harness with a
#                                 fixed seed (deterministic; what `make test` runs)
#   tools/fuzz.sh explore SECONDS fuzz each harness for SECONDS; new inputs go to build-fuzz/corpus/<harness>
# A crash, leak, sanitizer report or broken round trip stops the run and leaves the input that caused it
# in build-fuzz/findings/; copy it into fuzz/corpus/<harness>/ and add a regression test. For fuzz_run,
# `REFGRAD_FUZZ_PRINT=1 build-fuzz/fuzz/fuzz_run FILE` prints the program the input makes (a .bwd file
# for the test) and the error it ends with.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:?usage: tools/fuzz.sh replay RUNS | explore SECONDS}
amount=${2:?usage: tools/fuzz.sh replay RUNS | explore SECONDS}
build=build-fuzz
mkdir -p "$build/findings"

# Why each suppression exists is written next to it in fuzz/ubsan.supp.
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$PWD/fuzz/ubsan.supp"
# fuzz_run prints how many of its cases ran to the end without an error.
export REFGRAD_FUZZ_STATS=1

# run_harness HARNESS DETECT_LEAKS: runs one harness in $mode, its output in the harness's log.
run_harness() {
  local harness=$1 detect_leaks=$2
  local options=(-max_len=65536 -timeout=20 -rss_limit_mb=4096 -artifact_prefix="$build/findings/${harness}-"
                 -print_final_stats=1)
  local corpus
  if [ "$mode" = replay ]; then
    corpus="$build/scratch/$harness"   # new inputs land here and are thrown away
    rm -rf "$corpus"
    options+=(-seed=1 -runs="$amount")
  else
    corpus="$build/corpus/$harness"
    options+=(-max_total_time="$amount")
  fi
  mkdir -p "$corpus"
  ASAN_OPTIONS="detect_leaks=$detect_leaks:abort_on_error=1" \
    "$build/fuzz/fuzz_$harness" "${options[@]}" "$corpus" "fuzz/corpus/$harness" > "$build/fuzz-$harness.log" 2>&1
}

for harness in ${FUZZ_HARNESSES:-text bytecode bundle run}; do
  log="$build/fuzz-$harness.log"
  status=0
  run_harness "$harness" 1 || status=$?
  if [ "$status" -ne 0 ] && grep -q "LeakSanitizer has encountered a fatal error" "$log"; then
    # LeakSanitizer needs ptrace, which some containers forbid: that is the
    # machine, not a finding. Say so, and run again without leak detection.
    echo "fuzz_$harness: LeakSanitizer cannot run on this machine (ptrace not permitted); running without leak detection"
    status=0
    run_harness "$harness" 0 || status=$?
  fi
  runs=$(grep -oE "stat::number_of_executed_units: *[0-9]+" "$log" | grep -oE "[0-9]+$" || echo "?")
  if [ "$status" -ne 0 ]; then
    tail -n 60 "$log"
    echo "fuzz_$harness: FAILED after $runs executions; reproducer in $build/findings/ (log: $log)"
    exit 1
  fi
  echo "fuzz_$harness: $runs executions, no findings ($(ls "fuzz/corpus/$harness" | wc -l) corpus files replayed)"
  grep -h "^fuzz_run: consistent cases" "$log" | tail -n 1 || true
done
