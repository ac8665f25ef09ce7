// kernels/cpu/dequantize.cpp — dequantize_row for every supported ggml type (scalar reference).
#include <cstring>

#include "ds4/result.h"
#include "kernels/cpu/quant_ref.h"
#include "kernels/quant/decode.h"

namespace ds4::cpu {

using namespace ds4::quant;

namespace {

template <class Block, void (*Decode)(const Block&, float*), int kElems>
void decode_blocks(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n / kElems; ++i) {
    Block b;
    std::memcpy(&b, p + i * int64_t(sizeof(Block)), sizeof(Block));  // no alignment assumptions
    Decode(b, dst + i * kElems);
  }
}

template <class Block, void (*Group)(const Block&, int, float*)>
void decode_super(const void* src, float* dst, int64_t n) {
  decode_blocks<Block, decode_superblock<Block, Group>, 256>(src, dst, n);
}

}  // namespace

bool can_dequantize(GgmlType type) {
  switch (type) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q4_0:
    case GgmlType::Q8_0: case GgmlType::Q8_1: case GgmlType::Q8_K: case GgmlType::Q2_K:
    case GgmlType::Q4_K: case GgmlType::Q6_K: case GgmlType::IQ2_XXS: case GgmlType::IQ2_XS:
    case GgmlType::IQ2_S: case GgmlType::IQ1_S: case GgmlType::IQ1_M: case GgmlType::MXFP4:
    case GgmlType::NVFP4: case GgmlType::F8_E4M3_R128: case GgmlType::NVFP4_S2:
      return true;
    default:
      return false;
  }
}

void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
  const auto* geo = ggml_type_geometry(uint32_t(type));
  DS4_CHECK(geo != nullptr && can_dequantize(type));
  DS4_CHECK(n >= 0 && n % geo->block_elems == 0);
  const auto* p = static_cast<const uint8_t*>(src);
  switch (type) {
    case GgmlType::F32:
      std::memcpy(dst, src, size_t(n) * 4);
      return;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(uint16_t(p[2 * i] | (p[2 * i + 1] << 8)));
      return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(uint16_t(p[2 * i] | (p[2 * i + 1] << 8)));
      return;
    case GgmlType::Q4_0: return decode_blocks<BlockQ4_0, decode_q4_0, 32>(src, dst, n);
    case GgmlType::Q8_0: return decode_blocks<BlockQ8_0, decode_q8_0, 32>(src, dst, n);
    case GgmlType::Q8_1: return decode_blocks<BlockQ8_1, decode_q8_1, 32>(src, dst, n);
    case GgmlType::Q8_K: return decode_blocks<BlockQ8_K, decode_q8_k, 256>(src, dst, n);
    case GgmlType::Q2_K: return decode_super<BlockQ2_K, decode_q2_k_group>(src, dst, n);
    case GgmlType::Q4_K: return decode_super<BlockQ4_K, decode_q4_k_group>(src, dst, n);
    case GgmlType::Q6_K: return decode_super<BlockQ6_K, decode_q6_k_group>(src, dst, n);
    case GgmlType::IQ2_XXS: return decode_super<BlockIQ2_XXS, decode_iq2_xxs_group>(src, dst, n);
    case GgmlType::IQ2_XS: return decode_super<BlockIQ2_XS, decode_iq2_xs_group>(src, dst, n);
    case GgmlType::IQ2_S: return decode_super<BlockIQ2_S, decode_iq2_s_group>(src, dst, n);
    case GgmlType::IQ1_S: return decode_super<BlockIQ1_S, decode_iq1_s_group>(src, dst, n);
    case GgmlType::IQ1_M: return decode_super<BlockIQ1_M, decode_iq1_m_group>(src, dst, n);
    case GgmlType::MXFP4: return decode_blocks<BlockMXFP4, decode_mxfp4, 32>(src, dst, n);
    case GgmlType::NVFP4: return decode_blocks<BlockNVFP4, decode_nvfp4, 64>(src, dst, n);
    case GgmlType::F8_E4M3_R128: return decode_blocks<BlockF8R128, decode_f8_r128, 128>(src, dst, n);
    case GgmlType::NVFP4_S2: return decode_blocks<BlockNVFP4S2, decode_nvfp4_s2, 64>(src, dst, n);
    default: DS4_CHECK(false && "unsupported type");
  }
}

}  // namespace ds4::cpu
