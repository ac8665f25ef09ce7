#!/usr/bin/env bash
# scripts/gpu_run_bundle.sh — runs scripts/gpu_check.sh on a GPU machine from the bundle that
# scripts/gpu_bundle.sh wrote (.gpu/bundle.tar.gz): unpacks the prebuilt binaries into build-gpu/,
# links the bundle's build path to this checkout (ctest files and test binaries name it), finds an
# NCCL library on this machine (the CUDA toolkit's, the loader's, or PyTorch's nvidia-nccl wheel),
# and runs the check with DS4_GPU_PREBUILT=1. The summary and the logs (no model files) go to
# $OUT (or DS4_GPU_OUT, default .gpu/out): gpu-check-summary.txt, gpu-check-logs.tar.gz.
# Usage: scripts/gpu_run_bundle.sh [CMD ARGS...]   (env: DS4_GPU_CHECK_BUDGET and the gpu_check*.sh
#   variables; DS4_GPU_SKIP_CHECK=1 runs only CMD). CMD, when given, runs after the check in the same
#   environment (the bundle's libraries, DS4_FIXTURES), e.g. scripts/gpu_decode_profile.sh MODEL.
set -u -o pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUTD="${DS4_GPU_OUT:-${OUT:-$ROOT/.gpu/out}}"
X="$ROOT/.gpu/x"
mkdir -p "$OUTD"
B="$ROOT/.gpu/bundle.tar.gz"
[[ -e "$B" ]] || { echo "gpu_run_bundle: no $B (run scripts/gpu_bundle.sh first)" >&2; exit 2; }
# Unpacked and checked before anything of this checkout is replaced.
rm -rf "$X"; mkdir -p "$X"
if ! tar -C "$X" -xzf "$B" 2> "$X.err"; then
  echo "gpu_run_bundle: $B is not a readable bundle (expected a gzip tar from scripts/gpu_bundle.sh): $(tr -s '\n' ' ' < "$X.err" | cut -c1-200)" >&2
  exit 2
fi
for f in build-root.txt commit.txt build-gpu/CTestTestfile.cmake build-gpu/engine/ds4-offload fixtures/dsv4-tiny/dsv4-tiny-mxfp4.gguf; do
  [[ -s "$X/$f" ]] || { echo "gpu_run_bundle: $B is incomplete: expected $f in it, found none" >&2; exit 2; }
done
B0="$(cat "$X/build-root.txt")"
[[ "$B0" == /* ]] || { echo "gpu_run_bundle: build-root.txt: expected an absolute path, found '$B0'" >&2; exit 2; }
# A build-gpu/ that no bundle unpacked is someone's build: never replaced unasked.
if [[ -e "$ROOT/build-gpu" && ! -e "$ROOT/build-gpu/.from-bundle" && "${DS4_GPU_REPLACE_BUILD:-0}" != 1 ]]; then
  if [[ "$(cd "$B0" 2> /dev/null && pwd -P)" == "$(cd "$ROOT" && pwd -P)" ]]; then
    echo "gpu_run_bundle: this checkout built the bundle (its build-gpu/ is the bundle's source): run scripts/gpu_check.sh here instead" >&2
  else
    echo "gpu_run_bundle: $ROOT/build-gpu exists and did not come from a bundle: expected none (DS4_GPU_REPLACE_BUILD=1 replaces it)" >&2
  fi
  exit 2
fi
if [[ "$(cd "$B0" 2> /dev/null && pwd -P)" != "$(cd "$ROOT" && pwd -P)" ]]; then
  [[ -e "$B0" ]] && { echo "gpu_run_bundle: the bundle's build path $B0 exists here and is not this checkout" >&2; exit 2; }
  mkdir -p "$(dirname "$B0")" && ln -s "$ROOT" "$B0" || exit 2
fi
rm -rf "$ROOT/build-gpu"
mv "$X/build-gpu" "$ROOT/build-gpu" && touch "$ROOT/build-gpu/.from-bundle" || exit 2
nccl=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu \
         "$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2> /dev/null)"; do
  [[ -n "$d" && -e "$d/libnccl.so.2" ]] && { nccl="$d"; break; }
done
[[ -z "$nccl" ]] && nccl="$(dirname "$(find /usr /opt -name libnccl.so.2 2> /dev/null | head -1)" 2> /dev/null)"
export LD_LIBRARY_PATH="$X/libs${nccl:+:$nccl}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export DS4_FIXTURES="$X/fixtures" DS4_GPU_PREBUILT=1 DS4_GPU_PREBUILT_COMMIT_FILE="$X/commit.txt"
export DS4_GPU_SUMMARY="$OUTD/gpu-check-summary.txt"
echo "gpu_run_bundle: bundle of commit $(cat "$X/commit.txt"), NCCL from ${nccl:-nowhere}, glibc $(ldd --version 2>&1 | head -1 | awk '{print $NF}')"
missing=$(ldd "$ROOT/build-gpu/engine/ds4-offload" 2>&1 | grep 'not found')
[[ -n "$missing" ]] && echo "gpu_run_bundle: ds4-offload lacks: $missing"
rc=0
[[ "${DS4_GPU_SKIP_CHECK:-0}" == 1 ]] || { bash "$ROOT/scripts/gpu_check.sh"; rc=$?; }
if (( $# > 0 )); then "$@"; echo "gpu_run_bundle: '$1' exit $?"; fi
tar -C "$ROOT/build-gpu" --exclude='*.gguf' --exclude='*.f32' -czf "$OUTD/gpu-check-logs.tar.gz" gpu-check-logs 2> /dev/null
echo "gpu_run_bundle: exit $rc"
exit $rc
