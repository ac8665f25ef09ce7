// kernels/cpu/kernel_choices.cpp — see kernel_choices.h.
#include "kernels/cpu/kernel_choices.h"

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/iq_lookup.h"
#include "kernels/cpu/q8_passes.h"
#include "kernels/quant/ggml_type.h"

namespace ds4::cpu {

std::string kernel_choices() {
  const DotBackend family = selected_backend();
  std::string out;
  const auto add = [&out](const std::string& what, const char* choice) {
    if (choice == nullptr || choice[0] == '\0') return;
    out += (out.empty() ? "" : "; ") + what + ": " + choice;
  };
  add("Q8_0 passes", q8_passes_used(family));
  for (GgmlType t : {GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ1_S, GgmlType::IQ1_M})
    add(std::string(ggml_type_name(uint32_t(t))) + " grid", iq_lookup_used(family, t));
  return out;
}

}  // namespace ds4::cpu
