// kernels/cpu/policy_word.h — the normalisation the CPU kernel policy parsers (DS4_CPU_KERNELS in
// cpu_features.cpp, DS4_CPU_IQ_LOOKUP in iq_lookup.cpp, DS4_CPU_Q8_0_PASSES in q8_passes.cpp)
// apply before comparing a value with their names. Kept out of cpu_features.h, which the SIMD
// units include: they must not see std templates.
#pragma once

#include <string>

namespace ds4::cpu {

/// `value` (nullptr = "") without leading and trailing blanks (space, tab, CR, LF) and with ASCII
/// letters in lower case.
std::string policy_word(const char* value);

/// `value` made safe for a one-line stderr message: bytes outside printable ASCII as \xNN, at most
/// 64 bytes of the value (then "...").
std::string policy_value_for_message(const char* value);

}  // namespace ds4::cpu
