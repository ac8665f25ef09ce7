// kernels/quant/type_traits.cpp — see type_traits.h.
#include "kernels/quant/type_traits.h"

#include <cstring>

#include "kernels/cpu/quant_ref.h"

namespace ds4::quant {

namespace {

template <GgmlType T>
void decode_one(const void* block, float* y) {
  const auto* g = ggml_type_geometry(uint32_t(T));
  cpu::dequantize_row(T, block, y, g->block_elems);
}

void decode_i32(const void* block, float* y) {
  int32_t v;
  std::memcpy(&v, block, 4);
  y[0] = float(v);
}

template <GgmlType T>
void quantize_fn(const float* x, void* dst, int64_t n) {
  cpu::quantize_row(T, x, dst, n);
}

template <GgmlType T>
float dot_fn(const void* w, const void* a, int64_t n) {
  return cpu::vec_dot_q8_1(T, w, a, n);
}

template <GgmlType T>
constexpr QuantTypeTraits make(bool quant, bool dot) {
  const auto* g = ggml_type_geometry(uint32_t(T));
  return {T, g->name, g->id, g->block_elems, g->block_bytes, decode_one<T>,
          quant ? quantize_fn<T> : nullptr, dot ? dot_fn<T> : nullptr};
}

const QuantTypeTraits kTraits[] = {
    make<GgmlType::F32>(true, false),
    make<GgmlType::F16>(true, false),
    make<GgmlType::BF16>(true, false),
    {GgmlType::I32, "I32", 26, 1, 4, decode_i32, nullptr, nullptr},
    make<GgmlType::Q4_0>(false, true),
    make<GgmlType::Q8_0>(true, true),
    make<GgmlType::Q8_1>(true, false),
    make<GgmlType::Q8_K>(true, false),
    make<GgmlType::Q2_K>(true, true),
    make<GgmlType::Q4_K>(false, true),
    make<GgmlType::Q6_K>(false, true),
    make<GgmlType::IQ2_XXS>(true, true),
    make<GgmlType::IQ2_XS>(true, true),
    make<GgmlType::IQ2_S>(false, true),
    make<GgmlType::IQ1_S>(true, true),
    make<GgmlType::IQ1_M>(true, true),
    make<GgmlType::MXFP4>(true, true),
    make<GgmlType::NVFP4>(false, true),
};

const DsFormatTraits kDsTraits[] = {
    {kDsFormats[0], cpu::dequantize_row_ds_fp8},
    {kDsFormats[1], cpu::dequantize_row_ds_fp4},
};

}  // namespace

std::span<const QuantTypeTraits> all_quant_type_traits() { return kTraits; }

const QuantTypeTraits* quant_type_traits(GgmlType type) {
  for (const auto& t : kTraits)
    if (t.type == type) return &t;
  return nullptr;
}

const DsFormatTraits* ds_format_traits(DsFormat f) {
  for (const auto& t : kDsTraits)
    if (t.info.format == f) return &t;
  return nullptr;
}

}  // namespace ds4::quant
