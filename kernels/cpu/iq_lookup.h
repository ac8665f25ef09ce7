// kernels/cpu/iq_lookup.h — how the VNNI kernel families read the IQ2_XXS, IQ2_XS, IQ1_S and IQ1_M
// grid tables: by vector gathers (the AVX2 vpgatherdq kernels of dot_q8_1_x86.inc, and the 512-bit
// ones of dot_q8_1_zmm.inc in the AVX-512 family) or by scalar 64-bit loads assembled into vectors
// (dot_q8_1_loads.inc). Both variants compute the contract's exact integer chunk sums and the same
// fp32 epilogue, so the float bits are the same (tests/cpu_simd checks both against the scalar
// reference); the choice is speed only, and which is faster depends on the micro-architecture:
// gathers win on the Intel Sapphire Rapids VM of bench/README.md (IQ2_XS 5.7-5.9 GB/s zmm gathers,
// 1 thread hot), scalar loads win on AMD Zen 4 (IQ2_XS 2.1-2.5 -> 2.9-3.5 GB/s, IQ2_XXS
// 2.0-2.3 -> 2.8-3.3) and Zen 3 (where the AVX2 family always uses loads). Auto therefore
// measures both once per family and type on this CPU instead of naming CPU models.
// The AVX2 family has no gathers but choices of the same kind: for IQ2_XS its 9-bit grid indices
// read by scalar loads from the block ("loads") or masked in a vector and extracted ("gather"
// slot): the vector was 4-25 % faster on Zen 3, scalar indices 10-12 % on Zen 4; for IQ1_S and
// IQ1_M the indices built by BMI2 pdep ("loads", only on CPUs with BMI2) or formed in vectors and
// extracted ("gather" slot): pdep was 27-34 % faster on Zen 4, and Zen 1 / Zen 2 microcode it.
#pragma once

#include <cstdint>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dot_dispatch.h"
#include "kernels/quant/ggml_type.h"

namespace ds4::cpu {

/// Grid look-up policy of the VNNI families' IQ kernels and of the AVX2 family's IQ2_XS / IQ1 index
/// reads (see above). Auto: the faster variant as measured once
/// per family and type (iq_use_loads); Gather / Loads: always that one (A/B benchmarks, tests).
enum class IqLookup { Auto, Gather, Loads };

/// Parses a DS4_CPU_IQ_LOOKUP value: auto, gather or loads (ASCII case and surrounding blanks
/// ignored). False (and *mode untouched) for anything else.
bool parse_iq_lookup(const char* value, IqLookup* mode);

/// Current policy; initial value from DS4_CPU_IQ_LOOKUP, read once (unset or empty = Auto; an
/// unknown value is reported on stderr once and Auto is used).
IqLookup iq_lookup_mode();

/// Sets the policy for later kernel selections in this process (thread-safe).
void set_iq_lookup_mode(IqLookup mode);

/// True when family `family` should run `type` (IQ2_XXS, IQ2_XS, IQ1_S or IQ1_M) with the
/// scalar-load kernel `loads` rather than the gather kernel `gather` (both that family's RowsDotFn
/// for the type). Under Auto the first call per (family, type) times both kernels on a synthetic
/// 8-row x 4096 block set in L1/L2 (random block bytes: the timing of these integer kernels does
/// not depend on the values), a few hundred microseconds in all, alternating nine rounds and
/// comparing the fastest of each; the answer is cached for the process. Other types: false.
bool iq_use_loads(DotBackend family, GgmlType type, RowsDotFn gather, RowsDotFn loads);

/// Times two rows kernels of one type (the same bits, speed only) on a synthetic 8-row x 4096 set
/// of random blocks in L1/L2: the fastest of nine alternated rounds of four calls each, after one
/// warm-up call each. True when `second`'s best is below `first`'s. A few hundred microseconds.
bool measure_second_faster(GgmlType type, RowsDotFn first, RowsDotFn second);

/// What Auto chose (or would use) for `family` and `type`, for printing: "gather", "loads", or
/// "" when the family has no choice for the type (the AVX2 family: IQ2_XXS, and IQ1_S / IQ1_M
/// without BMI2) or Auto has not measured it yet.
const char* iq_lookup_used(DotBackend family, GgmlType type);

}  // namespace ds4::cpu
