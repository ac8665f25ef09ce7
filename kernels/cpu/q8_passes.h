// kernels/cpu/q8_passes.h — how the x86 Q8_0 rows kernels (weights x Q8_1 activations,
// dot_q8_1_x86.inc) pass over a matrix: four rows per pass from four sequential streams (the
// activation codes loaded once for four rows; measured best on the Intel Sapphire Rapids VM of
// bench/README.md, where it replaced passes of four consecutive rows) or one row at a time (as
// ggml's vec_dot does; on AMD Zen 4 10-28 % faster from cache at 1 and 2 threads in the AVX-512
// family, where four rows' 32-lane accumulators plus the shared codes overflow the register file;
// from DRAM within the VM's noise). Only the matrix-vector kernels (dot_dispatch.h) are concerned;
// the multi-token kernels (mmq.h) have their own passes. Both give the same bits (each row is its
// own contract accumulation); the choice is speed only and depends on the micro-architecture, so
// Auto measures both once per kernel family on this CPU, as iq_lookup.h does for the IQ grid
// look-ups.
#pragma once

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dot_dispatch.h"

namespace ds4::cpu {

/// Q8_0 row-pass policy. Auto: the faster as measured once per family (q8_0_single_rows);
/// Streams / Single: always that one (A/B benchmarks, tests).
enum class Q8Passes { Auto, Streams, Single };

/// Parses a DS4_CPU_Q8_0_PASSES value: auto, streams or single (ASCII case and surrounding blanks
/// ignored). False (and *mode untouched) for anything else.
bool parse_q8_passes(const char* value, Q8Passes* mode);

/// Current policy; initial value from DS4_CPU_Q8_0_PASSES, read once (unset or empty = Auto; an
/// unknown value is reported on stderr once and Auto is used).
Q8Passes q8_passes_mode();

/// Sets the policy for later kernel selections in this process (thread-safe).
void set_q8_passes_mode(Q8Passes mode);

/// True when family `family` should run Q8_0 one row at a time (`single`, its RowsDotFn) rather than
/// in passes of four streams (`streams`). Under Auto the first call per family times both
/// (measure_second_faster, iq_lookup.h) and caches the answer for the process.
bool q8_0_single_rows(DotBackend family, RowsDotFn streams, RowsDotFn single);

/// What Auto chose (or the policy forces) for `family`, for printing: "streams", "single", or ""
/// before Auto has measured it (or for the scalar family).
const char* q8_passes_used(DotBackend family);

}  // namespace ds4::cpu
