#!/usr/bin/env bash
# The test command: setup + configure + build + ctest (every label that can run here); then one
# ASan+UBSan build (-O1 -g1, CPU only, dir $BUILD-asan) of the whole ds4-offload program, the gguf and
# quant suites and the CLI tests, run on it (sanitizer reports exit 86/87, never the program's
# bad-input 1); then the libFuzzer targets, 20 s each from the committed corpus (scripts/fuzz.sh).
# Exits non-zero on any failure. Every build compiles through ccache when it is installed (CMake
# option DS4_CCACHE), so a repeated run recompiles only what changed.
# Env: DS4_JOBS (default: nproc), DS4_BUILD_DIR (default: build), DS4_SKIP_MAIN=1 (no Release
# build + ctest), DS4_SKIP_SANITIZE=1, DS4_SKIP_FUZZ=1, DS4_FUZZ_SECONDS (default 20),
# DS4_ASAN_CLI=0 (sanitize only the gguf and quant suites, not the program: ~1,300-1,900 CPU-s less
# when nothing is cached).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
JOBS=${DS4_JOBS:-$(nproc)}
BUILD=${DS4_BUILD_DIR:-build}
export DS4_FIXTURES=${DS4_FIXTURES:-$(cd .. && pwd)/shared/fixtures}

if [ "${DS4_SKIP_MAIN:-0}" != 1 ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release
  cmake --build "$BUILD" -j "$JOBS"
  # gpu tests exit 77 (reported as skipped) when no GPU is present.
  ctest --test-dir "$BUILD" --output-on-failure -j "$JOBS"
fi

if [ "${DS4_SKIP_SANITIZE:-0}" != 1 ]; then
  # One sanitizer build dir for both passes (the program and CLI tests unless DS4_ASAN_CLI=0), so objects compile once: -O1 -g1 (line
  # tables for the reports' stack traces; assertions on), CPU only, no benchmarks. Only the targets
  # the tests below need are built (not the rest of the test suites).
  echo "== ASan+UBSan: gguf and quant suites$([ "${DS4_ASAN_CLI:-1}" = 1 ] && echo ", and the ds4-offload program under the CLI tests") =="
  cmake -S . -B "$BUILD-asan" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DDS4_SANITIZE=ON \
    -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" -DCMAKE_C_FLAGS_DEBUG="-O1 -g1" \
    -DDS4_CUDA=OFF -DDS4_TESTS_ONLY_CORE=OFF -DDS4_BUILD_BENCH=OFF
  ASAN_TARGETS=(gguf_malformed_test gguf_roundtrip_test gguf_sparse_test gguf_validate_test safetensors_test
    quant_unit_test)
  ASAN_TESTS='^(gguf_(malformed|roundtrip|sparse|validate)_test|safetensors_test|quant_unit_test'
  if [ "${DS4_ASAN_CLI:-1}" = 1 ]; then
    ASAN_TARGETS+=(ds4-offload frontend_cli_test frontend_validate_agrees_test frontend_cli_interactive_test
      frontend_load_progress_test gguf_inspect_cli_test)
    ASAN_TESTS+='|gguf_inspect_cli_test|gguf_inspect_validate_tiny|inspect_validate_folder_.*|plan_model_folder'
    ASAN_TESTS+='|gguf_fuzz_seeds_validate|frontend_(cli|validate_agrees|cli_interactive|load_progress)_test'
  fi
  ASAN_TESTS+=')$'
  cmake --build "$BUILD-asan" -j "$JOBS" --target "${ASAN_TARGETS[@]}"
  # Sanitizer reports exit 86/87, never 1 (the program's own bad-input code the CLI tests expect).
  # The CLI tests run the ds4-offload of this build dir (DS4_OFFLOAD_EXE is its path, compiled in).
  ASAN_OPTIONS=detect_leaks=1:exitcode=86 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:exitcode=87 \
    ctest --test-dir "$BUILD-asan" --output-on-failure -j "$JOBS" -L unit \
    -R "$ASAN_TESTS"
fi

if [ "${DS4_SKIP_FUZZ:-0}" != 1 ]; then
  echo "== libFuzzer: GGUF reader, JSON readers, tokenizer, chat format (${DS4_FUZZ_SECONDS:-20} s each) =="
  DS4_FUZZ_BUILD_DIR="$BUILD-fuzz" scripts/fuzz.sh "${DS4_FUZZ_SECONDS:-20}"
fi
