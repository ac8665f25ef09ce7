// kernels/cpu/iq_lookup.cpp — the IQ grid look-up policy and its one-time measurement
// (iq_lookup.h).
#include "kernels/cpu/iq_lookup.h"
#include "kernels/cpu/policy_word.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/quant_ref.h"

namespace ds4::cpu {
namespace {

IqLookup lookup_from_env() {
  IqLookup mode = IqLookup::Auto;
  const char* v = std::getenv("DS4_CPU_IQ_LOOKUP");
  if (v != nullptr && !parse_iq_lookup(v, &mode))
    std::fprintf(stderr, "ds4: DS4_CPU_IQ_LOOKUP: expected auto, gather or loads, found '%s'; using auto\n",
                 policy_value_for_message(v).c_str());
  return mode;
}

std::atomic<int>& lookup_flag() {
  static std::atomic<int> mode{int(lookup_from_env())};
  return mode;
}

constexpr GgmlType kTypes[] = {GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ1_S, GgmlType::IQ1_M};
constexpr int kFamilies = 4;  // DotBackend values

int type_slot(GgmlType t) {
  for (int i = 0; i < 4; ++i)
    if (kTypes[i] == t) return i;
  return -1;
}

/// Auto's measured answer per (family, type): -1 not measured, 0 gather, 1 loads.
struct Measured {
  std::once_flag once[kFamilies][4];
  std::atomic<int> loads[kFamilies][4];
  Measured() {
    for (auto& f : loads)
      for (auto& x : f) x.store(-1);
  }
};
Measured& measured() {
  static Measured m;
  return m;
}

}  // namespace

bool measure_second_faster(GgmlType type, RowsDotFn first, RowsDotFn second) {
  constexpr int64_t kRows = 8, kCols = 4096;
  const int64_t rb = row_bytes(type, kCols);
  std::mt19937_64 rng(0x1d5eedu);
  std::vector<uint8_t> w(size_t(rb * kRows)), a(size_t(kCols / 32 * 36));
  for (auto& b : w) b = uint8_t(rng());
  for (auto& b : a) b = uint8_t(rng());
  std::vector<float> out(static_cast<size_t>(kRows));
  using clock = std::chrono::steady_clock;
  const auto time = [&](RowsDotFn f) {
    const auto t0 = clock::now();
    for (int i = 0; i < 4; ++i) f(w.data(), rb, kRows, a.data(), kCols, out.data());
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  time(first);
  time(second);
  double best_g = 1e30, best_l = 1e30;
  for (int r = 0; r < 9; ++r) {
    best_g = std::min(best_g, time(first));
    best_l = std::min(best_l, time(second));
  }
  return best_l < best_g;
}

bool parse_iq_lookup(const char* value, IqLookup* mode) {
  const std::string v = policy_word(value);
  if (v.empty() || v == "auto") *mode = IqLookup::Auto;
  else if (v == "gather") *mode = IqLookup::Gather;
  else if (v == "loads") *mode = IqLookup::Loads;
  else return false;
  return true;
}

IqLookup iq_lookup_mode() { return IqLookup(lookup_flag().load(std::memory_order_relaxed)); }

void set_iq_lookup_mode(IqLookup mode) { lookup_flag().store(int(mode), std::memory_order_relaxed); }

bool iq_use_loads(DotBackend family, GgmlType type, RowsDotFn gather, RowsDotFn loads) {
  const int t = type_slot(type), f = int(family);
  if (t < 0 || f < 0 || f >= kFamilies || gather == nullptr || loads == nullptr) return false;
  switch (iq_lookup_mode()) {
    case IqLookup::Gather: return false;
    case IqLookup::Loads: return true;
    case IqLookup::Auto: break;
  }
  Measured& m = measured();
  const int known = m.loads[f][t].load(std::memory_order_acquire);
  if (known >= 0) return known == 1;
  std::call_once(m.once[f][t], [&] { m.loads[f][t].store(measure_second_faster(type, gather, loads) ? 1 : 0); });
  return m.loads[f][t].load(std::memory_order_acquire) == 1;
}

const char* iq_lookup_used(DotBackend family, GgmlType type) {
  const int t = type_slot(type), f = int(family);
  if (t < 0 || family == DotBackend::Scalar || f >= kFamilies) return "";
  // The AVX2 family's choices (iq_lookup.h): none for IQ2_XXS, none for IQ1 without BMI2.
  if (family == DotBackend::Avx2 &&
      (type == GgmlType::IQ2_XXS || (type != GgmlType::IQ2_XS && !cpu_bmi2_usable())))
    return "";
  switch (iq_lookup_mode()) {
    case IqLookup::Gather: return "gather";
    case IqLookup::Loads: return "loads";
    case IqLookup::Auto: break;
  }
  const int known = measured().loads[f][t].load(std::memory_order_acquire);
  return known < 0 ? "" : known == 1 ? "loads" : "gather";
}

}  // namespace ds4::cpu
