// kernels/cpu/dot_dispatch.cpp — run-time choice between the scalar and AVX2 row-dot kernels.
#include "kernels/cpu/dot_dispatch.h"

#include "kernels/cpu/cpu_features.h"

namespace ds4::cpu {

bool avx2::has_row_dot(GgmlType type) {
  switch (type) {
    case GgmlType::Q8_0:
    case GgmlType::MXFP4:
    case GgmlType::Q2_K:
    case GgmlType::IQ2_XXS:
    case GgmlType::IQ2_XS:
    case GgmlType::IQ1_S:
    case GgmlType::IQ1_M: return true;
    default: return false;
  }
}

RowDotFn simd_row_dot(GgmlType type) {
  if (!avx2::has_row_dot(type) || !avx2_selected()) return nullptr;
  return avx2::row_dot(type);
}

RowsDotFn simd_rows_dot(GgmlType type) {
  if (!avx2::has_row_dot(type) || !avx2_selected()) return nullptr;
  return avx2::rows_dot(type);
}

DotBackend dot_backend(GgmlType type) {
  return simd_row_dot(type) != nullptr ? DotBackend::Avx2 : DotBackend::Scalar;
}

const char* dot_backend_name(DotBackend b) { return b == DotBackend::Avx2 ? "avx2" : "scalar"; }

}  // namespace ds4::cpu
