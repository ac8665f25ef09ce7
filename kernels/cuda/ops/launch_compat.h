// kernels/cuda/ops/launch_compat.h — DS4_LAUNCH for the matmul-family sources: the shared
// kernels/cuda/launch.h when present (nvcc: <<<>>>; emulated CUDA: the emulated stream), else
// the plain nvcc launch.
#pragma once

#if __has_include("kernels/cuda/launch.h")
#include "kernels/cuda/launch.h"
#else
#define DS4_LAUNCH(kernel, grid, block, smem, stream, ...) kernel<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__)
#endif
