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

namespace {

/// The entry points of one compiled kernel family.
struct Family {
  RowDotFn (*row)(GgmlType);
  RowsDotFn (*rows)(GgmlType);
};

/// Family `b`, or nullptr for Scalar and for a family this build does not contain.
const Family* family(DotBackend b) {
  static constexpr Family kAvx2{avx2::row_dot, avx2::rows_dot};
#ifdef DS4_HAVE_AVXVNNI_KERNELS
  static constexpr Family kAvxVnni{avx_vnni::row_dot, avx_vnni::rows_dot};
#endif
#ifdef DS4_HAVE_AVX512VNNI_KERNELS
  static constexpr Family kAvx512Vnni{avx512_vnni::row_dot, avx512_vnni::rows_dot};
#endif
  switch (b) {
    case DotBackend::Avx2: return &kAvx2;
#ifdef DS4_HAVE_AVXVNNI_KERNELS
    case DotBackend::AvxVnni: return &kAvxVnni;
#endif
#ifdef DS4_HAVE_AVX512VNNI_KERNELS
    case DotBackend::Avx512Vnni: return &kAvx512Vnni;
#endif
    default: return nullptr;
  }
}

}  // namespace

RowDotFn family_row_dot(DotBackend b, GgmlType type) {
  const Family* f = family(b);
  return f != nullptr && avx2::has_row_dot(type) ? f->row(type) : nullptr;
}

RowsDotFn family_rows_dot(DotBackend b, GgmlType type) {
  const Family* f = family(b);
  return f != nullptr && avx2::has_row_dot(type) ? f->rows(type) : nullptr;
}

RowDotFn simd_row_dot(GgmlType type) { return family_row_dot(selected_backend(), type); }

RowsDotFn simd_rows_dot(GgmlType type) { return family_rows_dot(selected_backend(), type); }

DotBackend dot_backend(GgmlType type) {
  return avx2::has_row_dot(type) ? selected_backend() : DotBackend::Scalar;
}

}  // namespace ds4::cpu
