// kernels/cpu/cpu_features.h — run-time CPU feature detection and the SIMD selection switch for
// the CPU kernels (scalar reference vs AVX2). The scalar code in vec_dot.cpp defines the results;
// the AVX2 kernels (dot_q8_1_avx2.cpp) return the same bits and are only a speed choice.
#pragma once

namespace ds4::cpu {

/// x86 features relevant to the CPU kernels, detected once (GCC/Clang __builtin_cpu_supports).
/// All false on non-x86 builds.
struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
};

/// The features of the CPU this process runs on (detected on first call, then cached).
const CpuFeatures& cpu_features();

/// True when the AVX2 kernels may run here: AVX2, FMA and F16C all present (the *_avx2.cpp units
/// are compiled with -mavx2 -mfma -mf16c, so every one of them must be supported).
bool cpu_avx2_usable();

/// Kernel selection policy. Auto: the fastest kernel the CPU supports; ForceScalar: always the
/// scalar reference (diagnostics, A/B tests).
enum class SimdMode { Auto, ForceScalar };

/// Current policy. Initial value: ForceScalar when the environment variable DS4_CPU_SCALAR is set
/// to anything but "" or "0" (read once, at the first call of simd_mode/set_simd_mode), else Auto.
SimdMode simd_mode();

/// Sets the policy for all later kernel calls in this process (thread-safe; calls already running
/// keep the kernel they picked).
void set_simd_mode(SimdMode mode);

/// True when the AVX2 kernels are selected now: simd_mode() == Auto and cpu_avx2_usable().
bool avx2_selected();

}  // namespace ds4::cpu
