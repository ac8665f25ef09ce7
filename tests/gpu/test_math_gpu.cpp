// The contract's transcendentals on the GPU (label gpu): the CUDA build of kernels/quant/math.h
// returns the host's bits for every function on random arguments over the ops' ranges and on the
// special values (the precondition for a CUDA backend reproducing the CPU's tokens).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "kernels/cuda/math/math_eval.h"
#include "kernels/quant/math.h"
#include "tests/gpu/gpu_test_util.h"

namespace ds4 {
namespace {

float host_eval(cuda::MathFn fn, float v) {
  float s, c;
  switch (fn) {
    case cuda::MathFn::Exp: return quant::exp_f32(v);
    case cuda::MathFn::Log: return quant::log_f32(v);
    case cuda::MathFn::Log1p: return quant::log1p_f32(v);
    case cuda::MathFn::Sin: quant::sincos_f32(v, &s, &c); return s;
    case cuda::MathFn::Cos: quant::sincos_f32(v, &s, &c); return c;
    case cuda::MathFn::Sqrt: return quant::sqrt_f32(v);
    case cuda::MathFn::Sigmoid: return quant::sigmoid_f32(v);
    default: return quant::silu_f32(v);
  }
}

TEST(MathGpu, EveryFunctionMatchesTheHostBits) {
  struct Case {
    cuda::MathFn fn;
    float lo, hi;
  };
  const Case cases[] = {{cuda::MathFn::Exp, -104, 89},   {cuda::MathFn::Log, 1e-38f, 3e38f},
                        {cuda::MathFn::Log1p, -1, 1e9f}, {cuda::MathFn::Sin, -1.5e6f, 1.5e6f},
                        {cuda::MathFn::Cos, -4, 4},      {cuda::MathFn::Sqrt, 0, 1e30f},
                        {cuda::MathFn::Sigmoid, -30, 30}, {cuda::MathFn::Silu, -30, 30}};
  std::mt19937 g(7);
  for (const Case& c : cases) {
    std::uniform_real_distribution<float> d(c.lo, c.hi);
    std::vector<float> x(200000);
    for (auto& v : x) v = d(g);
    for (float s : {0.0f, -0.0f, 1.0f, -1.0f, 1e-30f, INFINITY, -INFINITY, NAN}) x.push_back(s);
    auto dx = gputest::to_device(x);
    gputest::DevBuf dy(x.size() * 4);
    cuda::math_eval(c.fn, dx->get<float>(), dy.get<float>(), int64_t(x.size()));
    const std::vector<float> y = dy.download<float>(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const float h = host_eval(c.fn, x[i]);
      uint32_t a, b;
      std::memcpy(&a, &y[i], 4);
      std::memcpy(&b, &h, 4);
      if (std::isnan(h)) {
        ASSERT_TRUE(std::isnan(y[i])) << int(c.fn) << " x = " << x[i];
      } else {
        ASSERT_EQ(a, b) << int(c.fn) << " x = " << x[i] << " gpu " << y[i] << " host " << h;
      }
    }
  }
}

}  // namespace
}  // namespace ds4

int main(int argc, char** argv) { return ds4::gputest::gpu_test_main(argc, argv); }
