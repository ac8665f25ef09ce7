// kernels/cpu/dot_dispatch.h — selection of the row-dot kernel behind vec_dot_q8_1 / matvec_q8_1.
// The scalar reference (vec_dot.cpp, contract kernels/quant/dot_q8_1.h) defines the result; the
// x86 kernels (dot_q8_1_x86.inc, built as the AVX2, AVX-VNNI and AVX512-VNNI families) return the
// same float bits for every input within the contract's range (activation codes -127..127, as
// quantize_q8.h writes them: vpsignb cannot negate -128; NaN payloads may differ where two NaNs
// meet, as the tests allow) and are chosen at run time by CPU feature detection and the
// policy (cpu_features.h).
#pragma once

#include <cstdint>

#include "kernels/cpu/cpu_features.h"
#include "kernels/quant/ggml_type.h"

namespace ds4::cpu {

/// One weight row (n elements of the row's type, n % 32 == 0) dotted with n/32 Q8_1 blocks.
using RowDotFn = float (*)(const void* w_row, const void* act_q8_1, int64_t n);

/// `rows` consecutive weight rows (row r at w + r * row_stride bytes, n elements each) dotted with
/// the same n/32 Q8_1 blocks: out[r] = the RowDotFn result of row r, bit for bit. Processing
/// several rows per pass shares the activation loads and keeps several weight streams in flight.
using RowsDotFn = void (*)(const void* w, int64_t row_stride, int64_t rows, const void* act_q8_1, int64_t n,
                           float* out);

/// The row kernel of the family selected now (selected_backend(): policy and CPU) for `type`, when
/// that is a SIMD family and the type has one (Q8_0, MXFP4, Q2_K, IQ2_XXS, IQ2_XS, IQ1_S, IQ1_M);
/// nullptr means "use the scalar one".
RowDotFn simd_row_dot(GgmlType type);

/// The SIMD multi-row kernel for `type` under the same conditions as simd_row_dot (nullptr: none).
RowsDotFn simd_rows_dot(GgmlType type);

/// Backend vec_dot_q8_1 / matvec_q8_1 use for `type` right now (selected_backend() when the type
/// has SIMD kernels, else Scalar).
DotBackend dot_backend(GgmlType type);

/// The SIMD row kernel of one family `b` for `type`; nullptr for Scalar, for a family this build
/// lacks, or when the type has none. Call the result only when backend_usable(b).
RowDotFn family_row_dot(DotBackend b, GgmlType type);
/// The SIMD multi-row kernel of one family `b` for `type` (nullptr as for family_row_dot; call the
/// result only when backend_usable(b)).
RowsDotFn family_rows_dot(DotBackend b, GgmlType type);

namespace avx2 {
/// AVX2 row kernel for `type` or nullptr. Defined in an -mavx2 unit: call only when
/// cpu_avx2_usable() is true (the function itself may already use AVX instructions).
RowDotFn row_dot(GgmlType type);
/// AVX2 multi-row kernel for `type` or nullptr (same call condition as row_dot).
RowsDotFn rows_dot(GgmlType type);
/// True when an AVX2 kernel exists for `type` (safe on any CPU). The VNNI families cover the
/// same types.
bool has_row_dot(GgmlType type);
}  // namespace avx2

/// The same kernels with vpdpbusd (VEX, -mavxvnni).
namespace avx_vnni {
/// AVX-VNNI row kernel for `type` or nullptr; call only when backend_usable(DotBackend::AvxVnni).
RowDotFn row_dot(GgmlType type);
/// AVX-VNNI multi-row kernel for `type` or nullptr (same call condition).
RowsDotFn rows_dot(GgmlType type);
}  // namespace avx_vnni

/// The same kernels with vpdpbusd on ymm (EVEX) and 512-bit IQ2_XXS/IQ2_XS/IQ1_M kernels
/// (-mavx512f -mavx512bw -mavx512vl -mavx512vnni; dot_q8_1_zmm.inc).
namespace avx512_vnni {
/// AVX512-VNNI row kernel for `type` or nullptr; call only when backend_usable(DotBackend::Avx512Vnni).
RowDotFn row_dot(GgmlType type);
/// AVX512-VNNI multi-row kernel for `type` or nullptr (same call condition).
RowsDotFn rows_dot(GgmlType type);
}  // namespace avx512_vnni

}  // namespace ds4::cpu
