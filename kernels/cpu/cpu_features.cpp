// kernels/cpu/cpu_features.cpp — CPU feature detection and the SIMD policy switch.
#include "kernels/cpu/cpu_features.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace ds4::cpu {

namespace {

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  // GCC has no "f16c" name in __builtin_cpu_supports before 14; every AVX2 CPU (Haswell+, Zen)
  // has F16C, but check CPUID.1:ECX bit 29 anyway.
  unsigned eax = 1, ebx = 0, ecx = 0, edx = 0;
  __asm__ volatile("cpuid" : "+a"(eax), "=b"(ebx), "+c"(ecx), "=d"(edx));
  f.f16c = (ecx >> 29) & 1u;
#endif
  return f;
}

std::atomic<int>& mode_flag() {
  static std::atomic<int> mode{[] {
    const char* e = std::getenv("DS4_CPU_SCALAR");
    const bool force = e != nullptr && e[0] != '\0' && std::strcmp(e, "0") != 0;
    return int(force ? SimdMode::ForceScalar : SimdMode::Auto);
  }()};
  return mode;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

bool cpu_avx2_usable() {
  const CpuFeatures& f = cpu_features();
  return f.avx2 && f.fma && f.f16c;
}

SimdMode simd_mode() { return SimdMode(mode_flag().load(std::memory_order_relaxed)); }

void set_simd_mode(SimdMode mode) { mode_flag().store(int(mode), std::memory_order_relaxed); }

bool avx2_selected() { return simd_mode() == SimdMode::Auto && cpu_avx2_usable(); }

}  // namespace ds4::cpu
