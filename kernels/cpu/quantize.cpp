// kernels/cpu/quantize.cpp — quantize_row dispatch, activation quantizers (Q8_1, Q8_K), ggml
// reference weight quantizers (Q8_0, MXFP4), float conversions, DeepSeek decoders.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "ds4/result.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/quant_ref.h"
#include "kernels/cpu/quantize_search.h"
#include "kernels/quant/deepseek_formats.h"
#include "kernels/quant/decode.h"
#include "kernels/quant/quantize_q8.h"

namespace ds4::cpu {

using namespace ds4::quant;

namespace {

template <class Block>
void store(void* dst, int64_t i, const Block& b) {
  std::memcpy(static_cast<uint8_t*>(dst) + i * int64_t(sizeof(Block)), &b, sizeof(Block));
}

void put_u16(void* dst, int64_t i, uint16_t v) {
  auto* p = static_cast<uint8_t*>(dst) + 2 * i;
  p[0] = uint8_t(v & 0xFF);
  p[1] = uint8_t(v >> 8);
}

float abs_max(const float* x, int n) {
  float amax = 0.0f;
  for (int j = 0; j < n; ++j) amax = std::max(amax, std::fabs(x[j]));
  return amax;
}

/// ggml quantize_row_q8_0_ref: d = amax/127, id = 1/d, q = roundf(x*id), stored fp16(d).
void quantize_q8_0(const float* x, void* dst, int64_t n) {
  for (int64_t i = 0; i < n / 32; ++i) {
    const float* xb = x + 32 * i;
    const float d = abs_max(xb, 32) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ8_0 b;
    b.d = f32_to_fp16(d);
    for (int j = 0; j < 32; ++j) b.qs[j] = int8_t(std::roundf(xb[j] * id));
    store(dst, i, b);
  }
}

/// ggml quantize_row_mxfp4_ref: e = floor(log2(amax)) - 2 + 127 (0 when amax = 0; clamped to
/// [0, 254]), nearest kvalues_mxfp4 entry by |kv*d - x|, first index wins ties. floor(log2) is
/// taken exactly from the float exponent (ggml uses floorf(log2f()), which can differ only when
/// log2f rounds up to an integer for amax a few ulps below a power of two).
void quantize_mxfp4(const float* x, void* dst, int64_t n) {
  for (int64_t i = 0; i < n / 32; ++i) {
    const float* xb = x + 32 * i;
    const float amax = abs_max(xb, 32);
    int e = 0;
    if (amax > 0.0f) {
      int p;
      std::frexp(amax, &p);  // amax = m * 2^p, m in [0.5, 1) -> floor(log2 amax) = p - 1
      e = std::clamp(p - 1 - 2 + 127, 0, 254);
    }
    BlockMXFP4 b;
    b.e = uint8_t(e);
    const float d = e8m0_to_f32_half(b.e);
    uint8_t codes[32];
    for (int j = 0; j < 32; ++j) {
      int best = 0;
      float best_err = std::fabs(float(kvalues_mxfp4(0)) * d - xb[j]);
      for (int k = 1; k < 16; ++k) {
        const float err = std::fabs(float(kvalues_mxfp4(k)) * d - xb[j]);
        if (err < best_err) {
          best = k;
          best_err = err;
        }
      }
      codes[j] = uint8_t(best);
    }
    for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(codes[j] | (codes[j + 16] << 4));
    store(dst, i, b);
  }
}

}  // namespace

bool can_quantize(GgmlType type) {
  switch (type) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q8_0:
    case GgmlType::Q8_1: case GgmlType::Q8_K: case GgmlType::Q2_K: case GgmlType::IQ2_XXS:
    case GgmlType::IQ2_XS: case GgmlType::IQ1_S: case GgmlType::IQ1_M: case GgmlType::MXFP4:
      return true;
    default:
      return false;
  }
}

namespace avx2 {
/// AVX2 + F16C block quantizer (quantize_q8_avx2.cpp): false for a non-finite block.
bool quantize_block_q8_1(const float* x, uint8_t* dst);
}  // namespace avx2

void quantize_row_q8_1(const float* src, void* dst, int64_t n) {
  DS4_CHECK(n >= 0 && n % 32 == 0);
  const bool simd = avx2_selected();  // the same bytes (tests/cpu_simd/test_mmq.cpp)
  for (int64_t i = 0; i < n / 32; ++i) {
    if (simd && avx2::quantize_block_q8_1(src + 32 * i, static_cast<uint8_t*>(dst) + i * int64_t(sizeof(BlockQ8_1))))
      continue;
    BlockQ8_1 b;
    quantize_block_q8_1(src + 32 * i, b);
    store(dst, i, b);
  }
}

void quantize_row_q8_k(const float* src, void* dst, int64_t n) {
  DS4_CHECK(n >= 0 && n % 256 == 0);
  for (int64_t i = 0; i < n / 256; ++i) {
    const float* xb = src + 256 * i;
    BlockQ8_K b;
    b.d = abs_max(xb, 256) / 127.0f;
    for (int j = 0; j < 256; ++j) b.qs[j] = b.d == 0.0f ? int8_t(0) : q8_code(xb[j], b.d);
    for (int k = 0; k < 16; ++k) {
      int s = 0;
      for (int j = 0; j < 16; ++j) s += b.qs[16 * k + j];
      b.bsums[k] = int16_t(s);
    }
    store(dst, i, b);
  }
}

void quantize_row(GgmlType type, const float* src, void* dst, int64_t n) {
  const auto* geo = ggml_type_geometry(uint32_t(type));
  DS4_CHECK(geo != nullptr && can_quantize(type));
  DS4_CHECK(n >= 0 && n % geo->block_elems == 0);
  switch (type) {
    case GgmlType::F32: std::memcpy(dst, src, size_t(n) * 4); return;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) put_u16(dst, i, f32_to_fp16(src[i]));
      return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) put_u16(dst, i, f32_to_bf16(src[i]));
      return;
    case GgmlType::Q8_0: return quantize_q8_0(src, dst, n);
    case GgmlType::Q8_1: return quantize_row_q8_1(src, dst, n);
    case GgmlType::Q8_K: return quantize_row_q8_k(src, dst, n);
    case GgmlType::MXFP4: return quantize_mxfp4(src, dst, n);
    case GgmlType::Q2_K: return quantize_row_q2_k_search(src, dst, n);
    case GgmlType::IQ2_XXS: return quantize_row_iq2_xxs_search(src, dst, n);
    case GgmlType::IQ2_XS: return quantize_row_iq2_xs_search(src, dst, n);
    case GgmlType::IQ1_S: return quantize_row_iq1_s_search(src, dst, n);
    case GgmlType::IQ1_M: return quantize_row_iq1_m_search(src, dst, n);
    default: DS4_CHECK(false && "unsupported type");
  }
}

void dequantize_row_ds_fp8(const uint8_t* w_row, const uint8_t* scale_row, float* dst, int64_t n) {
  DS4_CHECK(n >= 0);
  for (int64_t k = 0; k < n; ++k) dst[k] = ds_fp8_value(w_row[k], scale_row[k / 128]);
}

void dequantize_row_ds_fp4(const uint8_t* w_row, const uint8_t* scale_row, float* dst, int64_t n) {
  DS4_CHECK(n >= 0 && n % 32 == 0);
  for (int64_t k = 0; k < n; ++k) dst[k] = ds_fp4_value(ds_fp4_code(w_row, k), scale_row[k / 32]);
}

int64_t repack_modelopt_nvfp4_row(const uint8_t* w_row, const uint8_t* scale_row, float s2, void* dst, int64_t n) {
  DS4_CHECK(n >= 0 && n % 64 == 0);
  int64_t bad = -1;
  uint8_t s2b[4];
  std::memcpy(s2b, &s2, 4);
  for (int64_t g = 0; g < n / 64; ++g) {
    BlockNVFP4S2 b;
    std::memcpy(b.s2, s2b, 4);
    for (int s = 0; s < 4; ++s) {
      const uint8_t d = scale_row[4 * g + s];
      if (bad < 0 && ((d & 0x80) || (d & 0x7F) == 0x7F)) bad = 4 * g + s;
      b.b.d[s] = d;
      for (int j = 0; j < 8; ++j) {
        const int64_t k = 64 * g + 16 * s + j;
        b.b.qs[8 * s + j] = uint8_t(ds_fp4_code(w_row, k) | (ds_fp4_code(w_row, k + 8) << 4));
      }
    }
    store(dst, g, b);
  }
  return bad;
}

void repack_ds_fp4_to_mxfp4(const uint8_t* w_row, const uint8_t* scale_row, void* dst, int64_t n) {
  DS4_CHECK(n >= 0 && n % 32 == 0);
  for (int64_t i = 0; i < n / 32; ++i) {
    BlockMXFP4 b;
    b.e = scale_row[i];
    for (int j = 0; j < 16; ++j)
      b.qs[j] = uint8_t(ds_fp4_code(w_row, 32 * i + j) | (ds_fp4_code(w_row, 32 * i + j + 16) << 4));
    store(dst, i, b);
  }
}

}  // namespace ds4::cpu
