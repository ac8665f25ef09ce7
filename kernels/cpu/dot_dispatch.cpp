// kernels/cpu/dot_dispatch.cpp — run-time choice between the scalar and the x86 SIMD row-dot kernels.
#include "kernels/cpu/dot_dispatch.h"

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

RowDotFn family_row_dot(DotBackend b, GgmlType type) {
  if (!avx2::has_row_dot(type)) return nullptr;
  switch (b) {
    case DotBackend::Avx2: return avx2::row_dot(type);
#ifdef DS4_HAVE_AVXVNNI_KERNELS
    case DotBackend::AvxVnni: return avx_vnni::row_dot(type);
#endif
#ifdef DS4_HAVE_AVX512VNNI_KERNELS
    case DotBackend::Avx512Vnni: return avx512_vnni::row_dot(type);
#endif
    default: return nullptr;
  }
}

RowsDotFn family_rows_dot(DotBackend b, GgmlType type) {
  if (!avx2::has_row_dot(type)) return nullptr;
  switch (b) {
    case DotBackend::Avx2: return avx2::rows_dot(type);
#ifdef DS4_HAVE_AVXVNNI_KERNELS
    case DotBackend::AvxVnni: return avx_vnni::rows_dot(type);
#endif
#ifdef DS4_HAVE_AVX512VNNI_KERNELS
    case DotBackend::Avx512Vnni: return avx512_vnni::rows_dot(type);
#endif
    default: return nullptr;
  }
}

RowDotFn simd_row_dot(GgmlType type) { return family_row_dot(selected_backend(), type); }

RowsDotFn simd_rows_dot(GgmlType type) { return family_rows_dot(selected_backend(), type); }

DotBackend dot_backend(GgmlType type) {
  return avx2::has_row_dot(type) ? selected_backend() : DotBackend::Scalar;
}

}  // namespace ds4::cpu
