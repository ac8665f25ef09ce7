#!/usr/bin/env bash
# The demo: installs dependencies, builds ds4-offload, makes the tiny random-weight DeepSeek-V4
# model once (cached as models/dsv4-tiny.gguf, gitignored) and runs it: streamed text, then prompt
# tokens, prefill and decode tok/s, and peak memory. The weights are random, so the text is
# gibberish built from the tiny vocabulary; the architecture and every code path are the real ones.
# Env: DS4_BUILD_DIR (default build), DS4_REMAKE=1 (rebuild the cached model), DS4_JOBS.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD=${DS4_BUILD_DIR:-build}
JOBS=${DS4_JOBS:-$(nproc)}
cmake -S . -B "$BUILD" -G Ninja
cmake --build "$BUILD" -j"$JOBS" --target ds4-offload
BIN="$BUILD/engine/ds4-offload"

MODEL=models/dsv4-tiny.gguf
if [ ! -f "$MODEL" ] || [ "${DS4_REMAKE:-0}" = 1 ]; then
  mkdir -p models
  echo "== make-tiny (once; the IQ2_XXS/Q2_K encoders take a minute or two) =="
  "$BIN" make-tiny -o "$MODEL.tmp"
  mv "$MODEL.tmp" "$MODEL"
fi

echo "== run: plain prompt =="
"$BIN" run -m "$MODEL" -p "The river town wakes early, and" -n 40 --seed 42
echo "== run: chat format, greedy =="
"$BIN" run -m "$MODEL" -p "What does the baker sell?" --chat -n 24 --temp 0
