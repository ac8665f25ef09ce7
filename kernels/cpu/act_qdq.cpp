// kernels/cpu/act_qdq.cpp — the act_qdq op (kernels/device.h Device::act_qdq) and the FP8 input
// QDQ of matmul's ActFormat::FP8_QDQ: DeepSeek's QAT activation simulation (REF inference/kernel.py
// act_quant / fp4_act_quant, model.py rotate_activation), built on the scalar QDQ functions of
// kernels/quant/act_qdq.h (shared with the CUDA backend).
#include <algorithm>

#include "ds4/result.h"
#include "kernels/cpu/ops.h"
#include "kernels/quant/act_qdq.h"

namespace ds4::cpu {

void act_qdq_rows(const F32Rows& x, int64_t heads, int64_t D, bool hadamard_fp4, int64_t len, int64_t block,
                  int64_t t0, int64_t t1) {
  DS4_CHECK(block > 0 && len % block == 0 && len <= D);
  DS4_CHECK(!hadamard_fp4 || (len == D && (D & (D - 1)) == 0));
  for (int64_t t = t0; t < t1; ++t)
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x.row(t) + h * D;
      if (hadamard_fp4) {
        quant::hadamard_normalized(v, D);
        quant::qdq_fp4_e2m1(v, D, block);
      } else {
        quant::qdq_fp8_e4m3(v, len, block);
      }
    }
}

F32Rows matmul_qdq_fp8(const F32Rows& x, int64_t n, int64_t in, MatmulScratch& s) {
  DS4_CHECK(in % 128 == 0);
  if (s.xqdq.size() < static_cast<size_t>(n * in)) s.xqdq.resize(static_cast<size_t>(n * in));
  for (int64_t t = 0; t < n; ++t) {
    float* r = s.xqdq.data() + t * in;
    std::copy_n(x.row(t), in, r);
    quant::qdq_fp8_e4m3(r, in, 128);
  }
  return F32Rows{s.xqdq.data(), in};
}

}  // namespace ds4::cpu
