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
[[ -s "$ROOT/.gpu/bundle.tar.gz" ]] || { echo "gpu_run_bundle: no .gpu/bundle.tar.gz (run scripts/gpu_bundle.sh first)" >&2; exit 2; }
rm -rf "$X" "$ROOT/build-gpu"; mkdir -p "$X"
tar -C "$X" -xzf "$ROOT/.gpu/bundle.tar.gz" || exit 2
mv "$X/build-gpu" "$ROOT/build-gpu"
B0="$(cat "$X/build-root.txt")"
if [[ "$(cd "$B0" 2> /dev/null && pwd -P)" != "$(cd "$ROOT" && pwd -P)" ]]; then
  [[ -e "$B0" ]] && { echo "gpu_run_bundle: the bundle's build path $B0 exists here and is not this checkout" >&2; exit 2; }
  mkdir -p "$(dirname "$B0")" && ln -s "$ROOT" "$B0" || exit 2
fi
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
