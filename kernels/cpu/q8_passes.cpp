// kernels/cpu/q8_passes.cpp — the Q8_0 row-pass policy and its one-time measurement (q8_passes.h).
#include "kernels/cpu/q8_passes.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "kernels/cpu/iq_lookup.h"
#include "kernels/cpu/policy_word.h"

namespace ds4::cpu {
namespace {

Q8Passes passes_from_env() {
  Q8Passes mode = Q8Passes::Auto;
  const char* v = std::getenv("DS4_CPU_Q8_0_PASSES");
  if (v != nullptr && !parse_q8_passes(v, &mode))
    std::fprintf(stderr, "ds4: DS4_CPU_Q8_0_PASSES: expected auto, streams or single, found '%s'; using auto\n",
                 policy_value_for_message(v).c_str());
  return mode;
}

std::atomic<int>& passes_flag() {
  static std::atomic<int> mode{int(passes_from_env())};
  return mode;
}

constexpr int kFamilies = 4;  // DotBackend values

/// Auto's measured answer per family: -1 not measured, 0 streams, 1 single.
struct Measured {
  std::once_flag once[kFamilies];
  std::atomic<int> single[kFamilies];
  Measured() {
    for (auto& x : single) x.store(-1);
  }
};
Measured& measured() {
  static Measured m;
  return m;
}

}  // namespace

bool parse_q8_passes(const char* value, Q8Passes* mode) {
  const std::string v = policy_word(value);
  if (v.empty() || v == "auto") *mode = Q8Passes::Auto;
  else if (v == "streams") *mode = Q8Passes::Streams;
  else if (v == "single") *mode = Q8Passes::Single;
  else return false;
  return true;
}

Q8Passes q8_passes_mode() { return Q8Passes(passes_flag().load(std::memory_order_relaxed)); }

void set_q8_passes_mode(Q8Passes mode) { passes_flag().store(int(mode), std::memory_order_relaxed); }

bool q8_0_single_rows(DotBackend family, RowsDotFn streams, RowsDotFn single) {
  const int f = int(family);
  if (f < 0 || f >= kFamilies || streams == nullptr || single == nullptr) return false;
  switch (q8_passes_mode()) {
    case Q8Passes::Streams: return false;
    case Q8Passes::Single: return true;
    case Q8Passes::Auto: break;
  }
  Measured& m = measured();
  const int known = m.single[f].load(std::memory_order_acquire);
  if (known >= 0) return known == 1;
  std::call_once(m.once[f], [&] { m.single[f].store(measure_second_faster(GgmlType::Q8_0, streams, single) ? 1 : 0); });
  return m.single[f].load(std::memory_order_acquire) == 1;
}

const char* q8_passes_used(DotBackend family) {
  const int f = int(family);
  if (family == DotBackend::Scalar || f < 0 || f >= kFamilies) return "";
  switch (q8_passes_mode()) {
    case Q8Passes::Streams: return "streams";
    case Q8Passes::Single: return "single";
    case Q8Passes::Auto: break;
  }
  const int known = measured().single[f].load(std::memory_order_acquire);
  return known < 0 ? "" : known == 1 ? "single" : "streams";
}

}  // namespace ds4::cpu
