#!/usr/bin/env bash
# A long libFuzzer campaign measured in CPU time, not wall time: each target runs (same flags as
# scripts/fuzz.sh, but -timeout 300 because a niced process can wait for the CPU) until its process has
# used CPU_SECONDS of user+system time, then gets SIGINT and prints libFuzzer's final stats. Targets run
# PARALLEL at a time, each in its own session (own scheduler autogroup) with nice and autogroup nice
# NICE (19 = only CPU that other work leaves idle; 0 = a fair share beside other sessions). The corpus grows in
# $BUILD/campaign/<target> (kept between runs, the committed fuzz/corpus is only read); a finding
# stops that target and is left in $BUILD/campaign-artifacts/<target>/.
# Usage: scripts/fuzz_campaign.sh [CPU_SECONDS] [TARGET ...]   (default 1800 s; gguf json tokenizer chat)
# Env: DS4_FUZZ_BUILD_DIR (default build-fuzz; built by scripts/fuzz.sh or cmake -S fuzz),
#      DS4_FUZZ_PARALLEL (default 2), DS4_FUZZ_NICE (default 19).
# Prints one line per target: CPU seconds, wall seconds, executions, coverage, finding or none.
set -euo pipefail
cd "$(dirname "$0")/.."
CPU_SECS=${1:-1800}
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(gguf json tokenizer chat)
BUILD=${DS4_FUZZ_BUILD_DIR:-build-fuzz}
PAR=${DS4_FUZZ_PARALLEL:-2}
NICE=${DS4_FUZZ_NICE:-19}
TICK=$(getconf CLK_TCK)

for t in "${TARGETS[@]}"; do
  [ -x "$BUILD/fuzz_$t" ] || { echo "fuzz_campaign: $BUILD/fuzz_$t not built (run scripts/fuzz.sh 1 first)" >&2; exit 1; }
done

# cpu_seconds PID: user+system CPU seconds of a live process (fields 14, 15 of /proc/PID/stat).
cpu_seconds() {
  local f
  f=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null) || { echo -1; return; }
  set -- $f
  echo $(( (${12} + ${13}) / TICK ))
}

# run_one TARGET: runs one target to its CPU budget; prints its summary line.
run_one() {
  local t=$1 work="$BUILD/campaign/$1" art="$BUILD/campaign-artifacts/$1" log="$BUILD/campaign_$1.log"
  mkdir -p "$work" "$art"
  local start=$SECONDS
  setsid nice -n "$NICE" "$BUILD/fuzz_$t" -rss_limit_mb=2048 -malloc_limit_mb=2048 -max_len=131072 \
    -timeout=300 -print_final_stats=1 -artifact_prefix="$art/" "$work" "fuzz/corpus/$t" > "$log" 2>&1 &
  local pid=$! used=0
  sleep 1
  echo "$NICE" > "/proc/$pid/autogroup" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null; do
    used=$(cpu_seconds "$pid")
    if [ "$used" -ge "$CPU_SECS" ]; then kill -INT "$pid"; break; fi
    sleep 10
  done
  local rc=0
  wait "$pid" || rc=$?
  local runs cov finding=none
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || echo "?")
  if grep -qE 'ERROR: (libFuzzer|AddressSanitizer|UndefinedBehaviorSanitizer)|runtime error|SUMMARY:' "$log" \
      || [ -n "$(ls -A "$art")" ]; then
    finding="FOUND (see $log and $art)"
  fi
  echo "fuzz_$t: ${used} CPU-s, $((SECONDS - start)) s wall, $runs executions, cov $cov, finding: $finding (rc $rc)"
}

status=0
i=0
for t in "${TARGETS[@]}"; do
  run_one "$t" > "$BUILD/campaign_$t.summary" &
  i=$((i + 1))
  if [ $((i % PAR)) -eq 0 ]; then wait; fi
done
wait
for t in "${TARGETS[@]}"; do
  cat "$BUILD/campaign_$t.summary"
  grep -q 'finding: none' "$BUILD/campaign_$t.summary" || status=1
done
exit $status
