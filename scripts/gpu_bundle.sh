#!/usr/bin/env bash
# scripts/gpu_bundle.sh — builds the GPU check's binaries HERE and packs them for a GPU machine that
# has the CUDA driver, nvcc and Python but none of the project's Debian libraries (fmt, CLI11, hwloc,
# liburing, httplib, GoogleTest, Google Benchmark): such a machine cannot configure the project, so
# scripts/gpu_check.sh runs there on what this bundle carries (DS4_GPU_PREBUILT=1).
#
# Writes .gpu/bundle.tar.gz (ignored by git) holding:
#   build-gpu/...   the targets gpu_check.sh runs (every `gpu` ctest, the CUDA host unit tests,
#                   bench_kernels_cuda, ds4-offload), stripped, at their build paths, plus every
#                   CTestTestfile.cmake so that ctest runs there as here;
#   libs/           the shared libraries those binaries need that a bare CUDA image lacks (ldd; the
#                   C/C++ runtime, the CUDA driver and NCCL excluded: the machine's own are used);
#   fixtures/       dsv4-tiny's GGUF and goldens.json (the model checks' inputs).
# The binaries carry this checkout's absolute path (ctest files, DS4_SOURCE_DIR): the runner
# (scripts/gpu_run_bundle.sh) links that path to its own checkout.
# Usage: scripts/gpu_bundle.sh [ARCH]   (ARCH: CUDA architecture, default 90 = H100/H200)
# Env: DS4_GPU_BUILD_DIR (default build-gpu), DS4_JOBS (default nproc), DS4_FIXTURES.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ARCH="${1:-90}"
BUILD="${DS4_GPU_BUILD_DIR:-$ROOT/build-gpu}"
JOBS="${DS4_JOBS:-$(nproc)}"
FIX="${DS4_FIXTURES:-$ROOT/../shared/fixtures}"
OUTDIR="$ROOT/.gpu"
STAGE="$OUTDIR/stage"

[[ -s "$FIX/dsv4-tiny/dsv4-tiny-mxfp4.gguf" ]] || { echo "gpu_bundle: fixture missing: $FIX/dsv4-tiny/dsv4-tiny-mxfp4.gguf" >&2; exit 1; }
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDS4_CUDA=ON \
  -DDS4_CUDA_ARCHITECTURES="$ARCH" -DDS4_BUILD_TESTS=ON -DDS4_BUILD_BENCH=ON > /dev/null
mapfile -t GPU_TESTS < <(cd "$BUILD" && ctest -N -L gpu | sed -n 's/^ *Test *#[0-9]*: *//p')
TARGETS=("${GPU_TESTS[@]}" cuda_host_helpers_test cuda_chunk_decode_host_test cuda_kernel_host_sim_test
         bench_kernels_cuda ds4-offload)
echo "gpu_bundle: building ${#TARGETS[@]} targets for sm_$ARCH with $JOBS jobs"
cmake --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]}"

rm -rf "$STAGE"; mkdir -p "$STAGE/libs" "$STAGE/fixtures/dsv4-tiny"
rel="${BUILD#"$ROOT"/}"
bins=()
for t in "${TARGETS[@]}"; do
  f=$(find "$BUILD" -type f -name "$t" -perm -u+x -not -path '*/CMakeFiles/*' | head -1)
  [[ -n "$f" ]] || { echo "gpu_bundle: $t not built" >&2; exit 1; }
  d="$STAGE/$rel/${f#"$BUILD"/}"; mkdir -p "$(dirname "$d")"
  strip -o "$d" "$f"; bins+=("$f")
done
(cd "$BUILD" && find . -name CTestTestfile.cmake) | while read -r c; do
  mkdir -p "$STAGE/$rel/$(dirname "$c")"; cp "$BUILD/$c" "$STAGE/$rel/$c"
done
# Shared libraries beyond the C/C++ runtime, the CUDA driver and NCCL (too large to carry: the GPU
# machine's own, e.g. PyTorch's nvidia-nccl wheel, is found by the runner).
ldd "${bins[@]}" 2> /dev/null | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libstdc++.so*|libgcc_s.so*|libcuda.so*|libnccl.so*) ;;
    *) cp -L "$lib" "$STAGE/libs/" ;;
  esac
done
cp "$FIX/dsv4-tiny/dsv4-tiny-mxfp4.gguf" "$FIX/dsv4-tiny/goldens.json" "$STAGE/fixtures/dsv4-tiny/"
echo "$ROOT" > "$STAGE/build-root.txt"
git -C "$ROOT" rev-parse --short HEAD > "$STAGE/commit.txt" 2> /dev/null || echo unknown > "$STAGE/commit.txt"
tar -C "$STAGE" -czf "$OUTDIR/bundle.tar.gz" .
rm -rf "$STAGE"
echo "gpu_bundle: wrote $OUTDIR/bundle.tar.gz ($(du -h "$OUTDIR/bundle.tar.gz" | cut -f1)); libs: carried"
