// kernels/cpu/kernel_choices.h — the CPU kernel variants this process has chosen so far, for
// printing next to a measurement (bench's metadata, run's summary), so a figure can be traced to
// the code that produced it.
#pragma once

#include <string>

namespace ds4::cpu {

/// The selected family's measured or forced variant choices, e.g. "Q8_0 passes: single; IQ2_XXS
/// grid: loads; IQ1_M grid: loads" (Auto: the choices measured so far, types in GgmlType order),
/// or with DS4_CPU_Q8_0_PASSES / DS4_CPU_IQ_LOOKUP forcing them "Q8_0 passes: streams (forced);
/// IQ grids: gather (forced)" (in the AVX2 family, whose choices are index builds, "IQ2_XS and IQ1
/// indices" or without BMI2 "IQ2_XS indices", and under Auto "IQ1_M indices: loads (pdep)"); "" when
/// there is none (nothing measured yet, the scalar family). The choices are those of
/// iq_lookup_used and q8_passes_used for the family selected_backend() names.
std::string kernel_choices();

}  // namespace ds4::cpu
