#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang-14, ASan + UBSan) and runs each for a bounded time
# from the committed seed corpus fuzz/corpus/<target> (new inputs go to a scratch directory, the
# committed corpus is not modified). Exits non-zero when a target finds a crash, a sanitizer
# report, a timeout (> 10 s per input) or an allocation above 2 GiB; the input is left in
# $BUILD/artifacts/<target>/ for reproduction (`build-fuzz/fuzz_<target> FILE`).
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET]   (default 20)
# Env: DS4_FUZZ_BUILD_DIR (default build-fuzz), DS4_JOBS (default nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-20}
BUILD=${DS4_FUZZ_BUILD_DIR:-build-fuzz}
JOBS=${DS4_JOBS:-$(nproc)}
CXX=$(command -v clang++-14 || command -v clang++ || true)
CC=$(command -v clang-14 || command -v clang || true)
if [ -z "$CXX" ]; then echo "fuzz: clang++ not found (scripts/setup.sh installs clang-14)" >&2; exit 1; fi
cmake -S fuzz -B "$BUILD" -G Ninja -DCMAKE_CXX_COMPILER="$CXX" -DCMAKE_C_COMPILER="$CC" > /dev/null
cmake --build "$BUILD" -j "$JOBS"
status=0
for t in gguf json tokenizer chat safetensors; do
  work="$BUILD/corpus-work/$t"; art="$BUILD/artifacts/$t"
  rm -rf "$work" "$art"; mkdir -p "$work" "$art"
  log="$BUILD/fuzz_$t.log"
  if "$BUILD/fuzz_$t" -max_total_time="$SECS" -rss_limit_mb=2048 -malloc_limit_mb=2048 -max_len=131072 \
      -timeout=10 -print_final_stats=1 -artifact_prefix="$art/" "$work" "fuzz/corpus/$t" > "$log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
    echo "fuzz_$t: ${SECS} s, $runs executions, $cov, no finding"
  else
    echo "fuzz_$t: FAILED (see $log; input in $art)" >&2
    grep -E 'ERROR|SUMMARY|runtime error' "$log" | head -5 >&2 || true
    status=1
  fi
done
exit $status
