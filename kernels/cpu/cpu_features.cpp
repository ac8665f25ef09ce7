// kernels/cpu/cpu_features.cpp — CPU feature detection and the SIMD policy switch.
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/policy_word.h"

#include <atomic>
#include <initializer_list>
#include <string>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace ds4::cpu {

namespace {

#if defined(__x86_64__) || defined(__i386__)
/// XCR0 (the register state the OS saves), 0 when the OS has not enabled XSAVE.
uint64_t xcr0(uint32_t leaf1_ecx) {
  if (!((leaf1_ecx >> 27) & 1u)) return 0;  // CPUID.1:ECX.OSXSAVE
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}
#endif

/// The features a forced family needs, for the message when the CPU lacks them.
const char* family_requirements(SimdMode mode) {
  switch (mode) {
    case SimdMode::AvxVnni: return "AVX2, FMA, F16C, AVX-VNNI and BMI2";
    case SimdMode::Avx512Vnni: return "AVX2, FMA, F16C, AVX512F/BW/VL, AVX512-VNNI and BMI2";
    default: return "AVX2, FMA and F16C";
  }
}

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  // CPUID bits (Intel SDM vol. 2A, CPUID): leaf 1 ECX bit 29 = F16C (GCC has no "f16c" name in
  // __builtin_cpu_supports before 14); leaf 7.0 EBX bit 8 = BMI2, bit 16 = AVX512F, bit 30 =
  // AVX512BW, bit 31 = AVX512VL, ECX bit 11 = AVX512_VNNI;
  // leaf 7.1 EAX bit 4 = AVX-VNNI (Clang 14 has no "avxvnni" name either). The OS must save the
  // YMM state (XCR0 bits 1-2) and for EVEX also the opmask and upper ZMM state (bits 5-7).
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    f.f16c = (c >> 29) & 1u;
    const uint64_t x = xcr0(c);
    const bool ymm_os = (x & 0x6) == 0x6, zmm_os = (x & 0xE6) == 0xE6;
    unsigned a7 = 0, b7 = 0, c7 = 0, d7 = 0;
    if (__get_cpuid_count(7, 0, &a7, &b7, &c7, &d7)) {
      const unsigned max_sub = a7;
      f.bmi2 = (b7 >> 8) & 1u;
      f.avx512_f = zmm_os && ((b7 >> 16) & 1u);
      f.avx512_bw = zmm_os && ((b7 >> 30) & 1u);
      f.avx512_vl = zmm_os && ((b7 >> 31) & 1u);
      f.avx512_vnni = zmm_os && ((c7 >> 11) & 1u);
      if (max_sub >= 1 && __get_cpuid_count(7, 1, &a7, &b7, &c7, &d7)) f.avx_vnni = ymm_os && ((a7 >> 4) & 1u);
    }
  }
#endif
  return f;
}

DotBackend backend_for(SimdMode mode);  // below

/// The family name a forced policy asks for (nullptr for Auto and ForceScalar).
const char* forced_family_name(SimdMode mode) {
  switch (mode) {
    case SimdMode::Avx2: return "avx2";
    case SimdMode::AvxVnni: return "avxvnni";
    case SimdMode::Avx512Vnni: return "avx512vnni";
    default: return nullptr;
  }
}

/// The policy named by DS4_CPU_KERNELS / DS4_CPU_SCALAR (see simd_mode()). A family this CPU (or
/// this build) cannot run is reported once with the family used instead.
SimdMode mode_from_env() {
  SimdMode mode = SimdMode::Auto;
  const char* k = std::getenv("DS4_CPU_KERNELS");
  if (k != nullptr && !parse_simd_mode(k, &mode))
    std::fprintf(stderr,
                 "ds4: DS4_CPU_KERNELS: expected auto, scalar, avx2, avxvnni or avx512vnni, found '%s'; using auto\n",
                 policy_value_for_message(k).c_str());
  const char* e = std::getenv("DS4_CPU_SCALAR");
  bool scalar = false;
  if (e != nullptr && !parse_switch(e, &scalar))
    std::fprintf(stderr, "ds4: DS4_CPU_SCALAR: expected 1 or 0 (true/false, yes/no, on/off), found '%s'; ignored\n",
                 policy_value_for_message(e).c_str());
  if (scalar) {
    if (mode != SimdMode::Auto && mode != SimdMode::ForceScalar)
      std::fprintf(stderr, "ds4: DS4_CPU_SCALAR=%s overrides DS4_CPU_KERNELS=%s: using the scalar kernels\n",
                   policy_value_for_message(e).c_str(), policy_value_for_message(k).c_str());
    mode = SimdMode::ForceScalar;
  }
  const char* want = forced_family_name(mode);
  const DotBackend got = backend_for(mode);
  if (want != nullptr && !backend_usable(mode == SimdMode::Avx2         ? DotBackend::Avx2
                                         : mode == SimdMode::AvxVnni ? DotBackend::AvxVnni
                                                                     : DotBackend::Avx512Vnni))
    std::fprintf(stderr,
                 "ds4: DS4_CPU_KERNELS=%s: this CPU (or this build) cannot run those kernels (they need %s); using %s\n",
                 want, family_requirements(mode), got == DotBackend::Scalar ? "the scalar ones" : dot_backend_name(got));
  return mode;
}

std::atomic<int>& mode_flag() {
  static std::atomic<int> mode{int(mode_from_env())};
  return mode;
}

}  // namespace

std::string policy_word(const char* value) {
  std::string v = value != nullptr ? value : "";
  const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!v.empty() && blank(v.back())) v.pop_back();
  size_t i = 0;
  while (i < v.size() && blank(v[i])) ++i;
  v = v.substr(i);
  for (char& c : v)
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  return v;
}

std::string policy_value_for_message(const char* value) {
  std::string out;
  const std::string v = value != nullptr ? value : "";
  for (size_t i = 0; i < v.size() && i < 64; ++i) {
    const unsigned char c = static_cast<unsigned char>(v[i]);
    if (c >= 0x20 && c < 0x7F) {
      out += char(c);
    } else {
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    }
  }
  if (v.size() > 64) out += "...";
  return out;
}

bool parse_simd_mode(const char* value, SimdMode* mode) {
  const std::string v = policy_word(value);
  static const struct {
    const char* name;
    SimdMode mode;
  } kNames[] = {{"", SimdMode::Auto},
                {"auto", SimdMode::Auto},
                {"scalar", SimdMode::ForceScalar},
                {"avx2", SimdMode::Avx2},
                {"avxvnni", SimdMode::AvxVnni},
                {"avx2+avxvnni", SimdMode::AvxVnni},
                {"avx512vnni", SimdMode::Avx512Vnni},
                {"avx2+avx512vnni", SimdMode::Avx512Vnni}};
  for (const auto& n : kNames)
    if (v == n.name) {
      *mode = n.mode;
      return true;
    }
  return false;
}

bool parse_switch(const char* value, bool* on) {
  const std::string v = policy_word(value);
  for (const char* w : {"1", "true", "yes", "on"})
    if (v == w) {
      *on = true;
      return true;
    }
  for (const char* w : {"", "0", "false", "no", "off"})
    if (v == w) {
      *on = false;
      return true;
    }
  return false;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

bool cpu_avx2_usable() {
  const CpuFeatures& f = cpu_features();
  return f.avx2 && f.fma && f.f16c;
}

namespace {
std::atomic<bool>& bmi2_masked() {
  static std::atomic<bool> masked{false};
  return masked;
}
}  // namespace

bool cpu_bmi2_usable() { return cpu_features().bmi2 && !bmi2_masked().load(std::memory_order_relaxed); }

void mask_bmi2_for_tests(bool masked) { bmi2_masked().store(masked, std::memory_order_relaxed); }

bool backend_usable(DotBackend b) {
  const CpuFeatures& f = cpu_features();
  switch (b) {
    case DotBackend::Scalar: return true;
    case DotBackend::Avx2: return cpu_avx2_usable();
#ifdef DS4_HAVE_AVXVNNI_KERNELS
    case DotBackend::AvxVnni: return cpu_avx2_usable() && f.avx_vnni && cpu_bmi2_usable();
#endif
#ifdef DS4_HAVE_AVX512VNNI_KERNELS
    case DotBackend::Avx512Vnni:
      return cpu_avx2_usable() && f.avx512_f && f.avx512_bw && f.avx512_vl && f.avx512_vnni && cpu_bmi2_usable();
#endif
    default: return false;
  }
}

SimdMode simd_mode() { return SimdMode(mode_flag().load(std::memory_order_relaxed)); }

void set_simd_mode(SimdMode mode) { mode_flag().store(int(mode), std::memory_order_relaxed); }

namespace {

/// The family each policy selects on this CPU (the CPU does not change while the process runs).
DotBackend backend_for(SimdMode mode) {
  const auto first_usable = [](std::initializer_list<DotBackend> order) {
    for (DotBackend b : order)
      if (backend_usable(b)) return b;
    return DotBackend::Scalar;
  };
  switch (mode) {
    case SimdMode::ForceScalar: return DotBackend::Scalar;
    case SimdMode::Avx2: return first_usable({DotBackend::Avx2});
    case SimdMode::AvxVnni: return first_usable({DotBackend::AvxVnni, DotBackend::Avx2});
    case SimdMode::Avx512Vnni: return first_usable({DotBackend::Avx512Vnni, DotBackend::AvxVnni, DotBackend::Avx2});
    case SimdMode::Auto: break;
  }
  // AVX512-VNNI first: the same kernels, but EVEX code may use 32 vector registers (fewer spills;
  // measured faster on this project's VM, bench/README.md), and 256-bit EVEX work does not lower
  // the clock as 512-bit work can.
  return first_usable({DotBackend::Avx512Vnni, DotBackend::AvxVnni, DotBackend::Avx2});
}

}  // namespace

DotBackend selected_backend() {
  // Called per kernel selection (several times per matrix product): a table made once instead of
  // the feature checks each time (they were 3 % of a pp64 profile).
  static const struct Table {
    DotBackend b[5];
    Table() {
      for (SimdMode m : {SimdMode::Auto, SimdMode::ForceScalar, SimdMode::Avx2, SimdMode::AvxVnni, SimdMode::Avx512Vnni})
        b[int(m)] = backend_for(m);
    }
  } table;
  return table.b[int(simd_mode())];
}

bool avx2_selected() { return selected_backend() != DotBackend::Scalar; }

const char* dot_backend_name(DotBackend b) {
  switch (b) {
    case DotBackend::Avx2: return "avx2";
    case DotBackend::AvxVnni: return "avx2+avxvnni";
    case DotBackend::Avx512Vnni: return "avx2+avx512vnni";
    case DotBackend::Scalar: break;
  }
  return "scalar";
}

}  // namespace ds4::cpu
