// kernels/cpu/kernel_choices.h — the CPU kernel variants this process has chosen so far, for
// printing next to a measurement (bench's metadata, run's summary), so a figure can be traced to
// the code that produced it.
#pragma once

#include <string>

namespace ds4::cpu {

/// The selected family's measured or forced variant choices made so far, e.g.
/// "Q8_0 passes: single; IQ2_XXS grid: loads; IQ1_M grid: loads" (types in GgmlType order), or ""
/// when none has been made (nothing run yet, a type without a choice, the scalar family). The
/// choices are those of iq_lookup_used and q8_passes_used for the family selected_backend() names.
std::string kernel_choices();

}  // namespace ds4::cpu
