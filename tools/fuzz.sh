#!/usr/bin/env bash
# Runs the libFuzzer harnesses built in build-fuzz/ (ASan + UBSan).
#   tools/fuzz.sh replay RUNS     replay the committed corpus, then RUNS more inputs per harness with a
#                                 fixed seed (deterministic; what `make test` runs)
#   tools/fuzz.sh explore SECONDS fuzz each harness for SECONDS; new inputs go to build-fuzz/corpus/<harness>
# A crash, leak, sanitizer report or broken round trip stops the run and leaves the input that caused it
# in build-fuzz/findings/; copy it into fuzz/corpus/<harness>/ and add a regression test.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:?usage: tools/fuzz.sh replay RUNS | explore SECONDS}
amount=${2:?usage: tools/fuzz.sh replay RUNS | explore SECONDS}
build=build-fuzz
mkdir -p "$build/findings"

# Why each suppression exists is written next to it in fuzz/ubsan.supp.
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$PWD/fuzz/ubsan.supp"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1"

for harness in text bytecode bundle; do
  binary="$build/fuzz/fuzz_$harness"
  seeds="fuzz/corpus/$harness"
  common=(-max_len=65536 -timeout=20 -rss_limit_mb=4096 -artifact_prefix="$build/findings/${harness}-"
          -print_final_stats=1)
  log="$build/fuzz-$harness.log"
  if [ "$mode" = replay ]; then
    scratch="$build/scratch/$harness"   # new inputs land here and are thrown away
    rm -rf "$scratch" && mkdir -p "$scratch"
    status=0
    "$binary" "${common[@]}" -seed=1 -runs="$amount" "$scratch" "$seeds" > "$log" 2>&1 || status=$?
  else
    corpus="$build/corpus/$harness"
    mkdir -p "$corpus"
    status=0
    "$binary" "${common[@]}" -max_total_time="$amount" "$corpus" "$seeds" > "$log" 2>&1 || status=$?
  fi
  runs=$(grep -oE "stat::number_of_executed_units: *[0-9]+" "$log" | grep -oE "[0-9]+$" || echo "?")
  if [ "$status" -ne 0 ]; then
    tail -n 60 "$log"
    echo "fuzz_$harness: FAILED after $runs executions; reproducer in $build/findings/ (log: $log)"
    exit 1
  fi
  echo "fuzz_$harness: $runs executions, no findings ($(ls "$seeds" | wc -l) corpus files replayed)"
done
