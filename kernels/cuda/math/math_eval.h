// kernels/cuda/math/math_eval.h — evaluates the contract's transcendentals (kernels/quant/math.h)
// on the GPU, element-wise, so tests can check the CUDA build reproduces the host bits.
#pragma once

#include <cstdint>

namespace ds4::cuda {

/// Which function of kernels/quant/math.h.
enum class MathFn : int { Exp = 0, Log = 1, Log1p = 2, Sin = 3, Cos = 4, Sqrt = 5, Sigmoid = 6, Silu = 7 };

/// y[i] = fn(x[i]) for i < n on the current device; x, y device pointers; synchronizes.
void math_eval(MathFn fn, const float* x, float* y, int64_t n);

}  // namespace ds4::cuda
