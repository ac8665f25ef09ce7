#!/usr/bin/env bash
# scripts/gpu_check.sh — the one command a GPU machine runs (target: under 10 minutes):
#   1. detects the GPU architecture (nvidia-smi --query-gpu=compute_cap: 9.0 -> sm_90 on an H200,
#      7.5 -> sm_75 on an RTX 2080 Ti),
#   2. configures and builds build-gpu/ for it (CUDA on, benchmarks on), only the targets needed:
#      every test labelled `gpu`, the CUDA host-side unit tests, bench_kernels_cuda,
#   3. runs every `gpu` ctest (but device_conformance_cuda_test, run in 4 under its own timeout) and
#      the kernel benchmarks,
#   4. runs scripts/gpu_check_model.sh (each step under its own timeout, all within the 10 minutes
#      counted from the start): builds ds4-offload + device_conformance_cuda_test and runs the
#      latter (the device API conformance suite on the real CUDA device),
#      compares the tiny fixture model's tokens and logits on --backend cuda vs cpu (experts
#      resident and --experts-tier host; then --tp 2 and 4 where the GPU count allows, experts
#      resident and staged by a plan), and benches a synthetic model of DeepSeek-V4-Flash's
#      layer shapes (as many layers as fit the card) against the copy bandwidth measured in 3,
#      then again with a plan that stages part of its experts (VRAM capped in the probed
#      profile): decode tok/s, copy/compute overlap, per-GPU bytes per tier beside the plan's,
#   5. writes gpu-check-summary.txt (repo root, or $DS4_GPU_SUMMARY): GPU, arch, commit, build
#      time, each test's result, per benchmark the weight GB/s and fraction of copy bandwidth, and
#      every result of step 4 (a failed step: FAIL and its log path).
# Exit status: 0 when every gpu test and model step passed, 1 otherwise (2: no GPU / build failure).
# DS4_GPU_CHECK_BUDGET: seconds for the whole check (default 600); the step timeouts scale with it.
# DS4_GPU_PREBUILT=1: no configure or build; $DS4_GPU_BUILD_DIR holds binaries built elsewhere (a GPU
#   machine without the project's Debian libraries: scripts/gpu_bundle.sh packs, scripts/gpu_run_bundle.sh
#   unpacks and calls this). DS4_GPU_PREBUILT_COMMIT_FILE names the file with the bundle's commit.
# Usage: scripts/gpu_check.sh [extra cmake args...]
set -u -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${DS4_GPU_BUILD_DIR:-$ROOT/build-gpu}"
SUMMARY="${DS4_GPU_SUMMARY:-$ROOT/gpu-check-summary.txt}"
JOBS="$(nproc 2>/dev/null || echo 4)"
LOGDIR="$BUILD/gpu-check-logs"
T0=$(date +%s)
DEADLINE=$(( T0 + ${DS4_GPU_CHECK_BUDGET:-600} ))

say() { echo "gpu_check: $*"; }

{
  echo "ds4-offload gpu check — $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  if [[ "${DS4_GPU_PREBUILT:-0}" == 1 && -s "${DS4_GPU_PREBUILT_COMMIT_FILE:-}" ]]; then
    echo "commit: $(cat "$DS4_GPU_PREBUILT_COMMIT_FILE") (the bundle's; this checkout's git may be a stale copy)"
  else
    echo "commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (dirty)')"
  fi
} > "$SUMMARY"

# ---- 1. architecture ---------------------------------------------------------------------------
if ! command -v nvidia-smi > /dev/null 2>&1; then
  say "nvidia-smi not found: no GPU on this machine"
  echo "RESULT: no GPU (nvidia-smi not found); nothing run" >> "$SUMMARY"
  exit 2
fi
GPU_LINE="$(nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv,noheader | head -1)"
CAP="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' ')"
if [[ -z "$CAP" || ! "$CAP" =~ ^[0-9]+\.[0-9]+$ ]]; then
  say "could not read the compute capability (got '$CAP')"
  echo "RESULT: compute capability unreadable ('$CAP')" >> "$SUMMARY"
  exit 2
fi
ARCH="${CAP/./}"
say "GPU: $GPU_LINE -> sm_$ARCH"
{
  echo "gpu: $GPU_LINE"
  echo "arch: sm_$ARCH"
} >> "$SUMMARY"

# ---- 2. build ------------------------------------------------------------------------------------
if [[ "${DS4_GPU_PREBUILT:-0}" == 1 ]]; then
  # Built elsewhere (scripts/gpu_bundle.sh, unpacked by scripts/gpu_run_bundle.sh): no configure, no build.
  [[ -f "$BUILD/CTestTestfile.cmake" ]] || { say "DS4_GPU_PREBUILT=1 but $BUILD has no CTestTestfile.cmake"; echo "RESULT: prebuilt build folder missing" >> "$SUMMARY"; exit 2; }
  mkdir -p "$LOGDIR"
  mapfile -t GPU_TESTS < <(cd "$BUILD" && ctest -N -L gpu | sed -n 's/^ *Test *#[0-9]*: *//p')
  echo "build: prebuilt (DS4_GPU_PREBUILT=1, commit $(cat "${DS4_GPU_PREBUILT_COMMIT_FILE:-/dev/null}" 2>/dev/null || echo '?'))" >> "$SUMMARY"
else
mkdir -p "$LOGDIR"
if ! cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDS4_CUDA=ON \
    -DDS4_CUDA_ARCHITECTURES="$ARCH" -DDS4_BUILD_TESTS=ON -DDS4_BUILD_BENCH=ON "$@" > "$LOGDIR/configure.log" 2>&1; then
  say "configure failed, see $LOGDIR/configure.log"
  { echo "RESULT: configure FAILED"; tail -20 "$LOGDIR/configure.log"; } >> "$SUMMARY"
  exit 2
fi
# Test names equal target names (tests/CMakeLists.txt ds4_add_test).
mapfile -t GPU_TESTS < <(cd "$BUILD" && ctest -N -L gpu | sed -n 's/^ *Test *#[0-9]*: *//p')
TARGETS=("${GPU_TESTS[@]}" cuda_host_helpers_test cuda_chunk_decode_host_test cuda_kernel_host_sim_test bench_kernels_cuda)
say "building ${#TARGETS[@]} targets with $JOBS jobs: ${TARGETS[*]}"
B0=$(date +%s)
if ! cmake --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]}" > "$LOGDIR/build.log" 2>&1; then
  say "build failed, see $LOGDIR/build.log"
  { echo "RESULT: build FAILED"; grep -E "error|FAILED" "$LOGDIR/build.log" | head -30; } >> "$SUMMARY"
  exit 2
fi
echo "build: $(( $(date +%s) - B0 )) s for ${#TARGETS[@]} targets" >> "$SUMMARY"
fi
# Step timeouts scale with the budget (600 s: tests 240, one test 200, benchmarks 120).
BUDGET="${DS4_GPU_CHECK_BUDGET:-600}"
T_TESTS=$(( BUDGET * 2 / 5 )); (( T_TESTS > 240 )) && T_TESTS=240
T_ONE=$(( T_TESTS * 5 / 6 ))
T_BENCH=$(( BUDGET / 5 )); (( T_BENCH > 120 )) && T_BENCH=120

# ---- 3a. tests -----------------------------------------------------------------------------------
say "running gpu tests: ${GPU_TESTS[*]}"
(cd "$BUILD" && timeout "$T_TESTS" ctest -L gpu -E '^device_conformance_cuda_test$' --output-on-failure --timeout "$T_ONE" -j 1) \
    > "$LOGDIR/ctest.log" 2>&1
# The unit-labelled CUDA host tests are not in -L gpu; run them explicitly.
(cd "$BUILD" && timeout 60 ctest -R '^(cuda_host_helpers_test|cuda_chunk_decode_host_test|cuda_kernel_host_sim_test)$' --output-on-failure) \
    > "$LOGDIR/ctest_unit.log" 2>&1
TEST_FAIL=0
{
  echo
  echo "== tests (label gpu + CUDA host unit tests) =="
  grep -hE '^ *[0-9]+/[0-9]+ Test' "$LOGDIR/ctest.log" "$LOGDIR/ctest_unit.log" | sed 's/^ *//'
} >> "$SUMMARY"
if grep -qE '\*\*\*Failed|Failed|Timeout|Not Run|\*\*\*Exception' "$LOGDIR/ctest.log" "$LOGDIR/ctest_unit.log"; then
  TEST_FAIL=1
  {
    echo "-- failures (first lines) --"
    grep -hE 'Failure|got .* want|FAILED|Skipped|error' "$LOGDIR/ctest.log" | head -40
  } >> "$SUMMARY"
fi
if grep -q 'Skipped' "$LOGDIR/ctest.log"; then
  echo "NOTE: some gpu tests reported SKIPPED (no usable CUDA device from the tests' view)" >> "$SUMMARY"
  TEST_FAIL=1
fi

# ---- 3b. benchmarks ------------------------------------------------------------------------------
say "running kernel benchmarks"
BENCH_JSON="$LOGDIR/bench_kernels_cuda.json"
timeout "$T_BENCH" "$BUILD/bench/bench_kernels_cuda" --benchmark_min_time=0.1 \
    --benchmark_out="$BENCH_JSON" --benchmark_out_format=json > "$LOGDIR/bench.log" 2>&1
BENCH_RC=$?
{
  echo
  echo "== kernel benchmarks (bench_kernels_cuda, rc $BENCH_RC) =="
  grep -m1 'measured device copy bandwidth' "$LOGDIR/bench.log" || true
} >> "$SUMMARY"
if [[ -s "$BENCH_JSON" ]] && command -v python3 > /dev/null 2>&1; then
  python3 - "$BENCH_JSON" >> "$SUMMARY" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"{'benchmark':48s} {'time_us':>10s} {'weights_GBps':>13s} {'frac_copy_bw':>13s}")
for b in d.get("benchmarks", []):
    t = b.get("real_time", 0.0)
    print(f"{b['name']:48s} {t:10.1f} {b.get('weights_GBps', 0.0):13.1f} {b.get('frac_of_copy_bw', 0.0):13.3f}")
PY
else
  tail -70 "$LOGDIR/bench.log" >> "$SUMMARY"
fi

# ---- 4. model-level checks (scripts/gpu_check_model.sh) ------------------------------------------
COPY_GBPS="$(sed -n 's/.*measured device copy bandwidth \([0-9.]*\) GB\/s.*/\1/p' "$LOGDIR/bench.log" | head -1)"
say "running model checks (copy bandwidth ${COPY_GBPS:-unknown} GB/s, $(( DEADLINE - $(date +%s) )) s left)"
DS4_GPU_BUILD_DIR="$BUILD" DS4_GPU_SUMMARY="$SUMMARY" DS4_GPU_LOGDIR="$LOGDIR" DS4_COPY_GBPS="$COPY_GBPS" \
  DS4_CHECK_DEADLINE="$DEADLINE" DS4_JOBS="$JOBS" DS4_FIXTURES="${DS4_FIXTURES:-$ROOT/../shared/fixtures}" \
  bash "$ROOT/scripts/gpu_check_model.sh"
MODEL_FAIL=$?

# ---- 5. verdict ----------------------------------------------------------------------------------
{
  echo
  echo "total: $(( $(date +%s) - T0 )) s; logs in $LOGDIR"
  if [[ $TEST_FAIL -eq 0 ]]; then echo "RESULT: all gpu tests PASSED"; else echo "RESULT: gpu tests FAILED or SKIPPED (see above)"; fi
  if [[ $MODEL_FAIL -eq 0 ]]; then echo "RESULT: model checks PASSED"; else echo "RESULT: model checks FAILED (FAIL lines above)"; fi
} >> "$SUMMARY"
say "summary written to $SUMMARY"
cat "$SUMMARY"
(( TEST_FAIL || MODEL_FAIL )) && exit 1
exit 0
