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
  const auto add = [&out](const std::string& what, const std::string& choice) {
    if (choice.empty()) return;
    out += (out.empty() ? "" : "; ") + what + ": " + choice;
  };
  const std::string forced = " (forced)";
  const std::string q8 = q8_passes_used(family);
  add("Q8_0 passes", q8.empty() || q8_passes_mode() == Q8Passes::Auto ? q8 : q8 + forced);
  if (iq_lookup_mode() != IqLookup::Auto) {
    // Forced: one entry for every type with a choice in this family (not only the model's).
    const bool avx2 = family == DotBackend::Avx2;
    const std::string v = iq_lookup_used(family, avx2 ? GgmlType::IQ2_XS : GgmlType::IQ2_XXS);
    // The AVX2 family's choices: IQ2_XS's index reads, and IQ1_S / IQ1_M's with BMI2 (iq_lookup.h).
    const char* what = !avx2 ? "IQ grids" : cpu_bmi2_usable() ? "IQ2_XS and IQ1 indices" : "IQ2_XS indices";
    add(what, v.empty() ? v : v + forced);
    return out;
  }
  for (GgmlType t : {GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ1_S, GgmlType::IQ1_M}) {
    const std::string name(ggml_type_name(uint32_t(t)));
    std::string v = iq_lookup_used(family, t);
    // In the AVX2 family the choices are index builds, not grid reads; IQ1's "loads" is pdep.
    if (family == DotBackend::Avx2 && t != GgmlType::IQ2_XS && v == "loads") v += " (pdep)";
    add(name + (family == DotBackend::Avx2 ? " indices" : " grid"), v);
  }
  return out;
}

}  // namespace ds4::cpu
