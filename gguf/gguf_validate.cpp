// gguf/gguf_validate.cpp — deep data checks (see gguf_validate.h).
#include "gguf/gguf_validate.h"

#include <cstring>

#include "kernels/quant/ggml_type.h"

namespace ds4::gguf {

namespace {

bool f16_finite(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return (h & 0x7C00u) != 0x7C00u;
}
bool bf16_finite(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return (h & 0x7F80u) != 0x7F80u;
}
bool f32_finite(const uint8_t* p) {
  uint32_t u;
  std::memcpy(&u, p, 4);
  return (u & 0x7F800000u) != 0x7F800000u;
}
bool f64_finite(const uint8_t* p) {
  uint64_t u;
  std::memcpy(&u, p, 8);
  return (u & 0x7FF0000000000000ull) != 0x7FF0000000000000ull;
}

/// Byte offsets of the FP16 scale fields inside one block (ggml src/ggml-common.h structs):
/// at most two; -1 = none.
struct ScaleLayout {
  int a = -1, b = -1;
};

bool scale_layout(GgmlType t, ScaleLayout* s) {
  switch (t) {
    // d first (block_q4_0, q5_0, q8_0, iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s, iq1_s, iq4_nl,
    // iq4_xs, q1_0).
    case GgmlType::Q4_0: case GgmlType::Q5_0: case GgmlType::Q8_0: case GgmlType::IQ2_XXS:
    case GgmlType::IQ2_XS: case GgmlType::IQ2_S: case GgmlType::IQ3_XXS: case GgmlType::IQ3_S:
    case GgmlType::IQ1_S: case GgmlType::IQ4_NL: case GgmlType::IQ4_XS: case GgmlType::Q1_0:
      *s = {0, -1}; return true;
    // d, m / d, s / d, dmin first (block_q4_1, q5_1, q8_1, q4_K, q5_K).
    case GgmlType::Q4_1: case GgmlType::Q5_1: case GgmlType::Q8_1: case GgmlType::Q4_K:
    case GgmlType::Q5_K:
      *s = {0, 2}; return true;
    case GgmlType::Q2_K: *s = {80, 82}; return true;   // scales[16], qs[64], d, dmin
    case GgmlType::Q3_K: *s = {108, -1}; return true;  // hmask[32], qs[64], scales[12], d
    case GgmlType::Q6_K: *s = {208, -1}; return true;  // ql[128], qh[64], scales[16], d
    case GgmlType::TQ1_0: *s = {52, -1}; return true;  // qs[48], qh[4], d
    case GgmlType::TQ2_0: *s = {64, -1}; return true;  // qs[64], d
    default: return false;
  }
}

}  // namespace

DataCheck check_tensor_data(const TensorInfo& t) {
  DataCheck r;
  const auto* g = ggml_type_geometry(t.type);
  if (!g || !t.data) return r;
  const auto type = static_cast<GgmlType>(t.type);
  const uint64_t bb = static_cast<uint64_t>(g->block_bytes);
  const uint64_t n = t.nbytes / bb;
  auto note = [&](uint64_t k, const char* what) {
    if (r.bad++ == 0) {
      r.first_bad = k;
      r.problem = what;
    }
  };
  r.checked = true;
  r.blocks_checked = n;
  const uint8_t* p = t.data;
  switch (type) {
    case GgmlType::F16:
      for (uint64_t k = 0; k < n; ++k) if (!f16_finite(p + 2 * k)) note(k, "non-finite F16 value");
      return r;
    case GgmlType::BF16:
      for (uint64_t k = 0; k < n; ++k) if (!bf16_finite(p + 2 * k)) note(k, "non-finite BF16 value");
      return r;
    case GgmlType::F32:
      for (uint64_t k = 0; k < n; ++k) if (!f32_finite(p + 4 * k)) note(k, "non-finite F32 value");
      return r;
    case GgmlType::F64:
      for (uint64_t k = 0; k < n; ++k) if (!f64_finite(p + 8 * k)) note(k, "non-finite F64 value");
      return r;
    case GgmlType::Q8_K:  // float d first
      for (uint64_t k = 0; k < n; ++k) if (!f32_finite(p + bb * k)) note(k, "non-finite F32 scale");
      return r;
    case GgmlType::MXFP4:  // block_mxfp4: uint8_t e (E8M0; 0xFF encodes NaN), qs[16]
      for (uint64_t k = 0; k < n; ++k) if (p[bb * k] == 0xFF) note(k, "E8M0 scale 0xFF (NaN)");
      return r;
    default: break;
  }
  ScaleLayout s;
  if (!scale_layout(type, &s)) {
    r.checked = false;
    r.blocks_checked = 0;
    return r;
  }
  for (uint64_t k = 0; k < n; ++k) {
    const uint8_t* b = p + bb * k;
    if (!f16_finite(b + s.a) || (s.b >= 0 && !f16_finite(b + s.b))) note(k, "non-finite FP16 scale");
  }
  return r;
}

}  // namespace ds4::gguf
