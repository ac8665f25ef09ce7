// kernels/cpu/cpu_features.h — run-time CPU feature detection and the SIMD selection switch for
// the CPU kernels. The scalar code in vec_dot.cpp defines the results; the x86 kernel families
// (dot_q8_1_x86.inc compiled three times: AVX2, AVX2 + AVX-VNNI, AVX2 + AVX-512 F/BW/VL/VNNI) return
// the same bits and are only a speed choice.
#pragma once

namespace ds4::cpu {

/// x86 features relevant to the CPU kernels, detected once: avx2 and fma by GCC/Clang
/// __builtin_cpu_supports, the others from CPUID bits, the VNNI/AVX512 ones only when XCR0 says the
/// OS saves the ymm (and for AVX-512 the opmask and zmm) state. All false on non-x86 builds.
struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx_vnni = false;     ///< VEX vpdpbusd on ymm (Alder Lake, Sapphire Rapids, Zen 5 and later)
  bool avx512_vnni = false;  ///< EVEX vpdpbusd (Cascade Lake, Ice Lake, Zen 4 and later) ...
  bool avx512_vl = false;    ///< ... on ymm registers needs AVX512VL as well
  bool avx512_f = false;     ///< 512-bit registers and opmasks (the AVX-512 family's zmm kernels) ...
  bool avx512_bw = false;    ///< ... with byte/word operations on them (every AVX512-VNNI CPU so far has both)
  bool bmi2 = false;         ///< pdep (the IQ1 kernels' index builds; every VNNI CPU so far has it)
};

/// The features of the CPU this process runs on (detected on first call, then cached).
const CpuFeatures& cpu_features();

/// True when the AVX2 kernels may run here: AVX2, FMA and F16C all present (the *_avx2.cpp units
/// are compiled with -mavx2 -mfma -mf16c, so every one of them must be supported).
bool cpu_avx2_usable();

/// True when the kernels may use BMI2 pdep (the IQ1 index builds): the CPU has BMI2 and
/// mask_bmi2_for_tests has not hidden it.
bool cpu_bmi2_usable();

/// Tests only: `masked` = true makes cpu_bmi2_usable() false (as on a CPU or VM without BMI2), so
/// the fallbacks that only such machines take can be checked anywhere; false restores detection.
/// Thread-safe; affects later backend_usable() answers and IQ1 kernel choices, not the family
/// table selected_backend() made at its first call.
void mask_bmi2_for_tests(bool masked);

/// Kernel family behind vec_dot_q8_1 / matvec_q8_1 for a type. The VNNI families are the AVX2
/// kernels with each u8 x s8 four-term dot (vpmaddubsw + vpmaddwd) done by one vpdpbusd; they
/// return the same bits (all integer sums are exact in both).
enum class DotBackend { Scalar, Avx2, AvxVnni, Avx512Vnni };

/// True when `b` can run on this CPU (and was compiled into this build): Scalar always; Avx2 when
/// cpu_avx2_usable(); AvxVnni also needs AVX-VNNI and BMI2; Avx512Vnni also needs AVX512F, AVX512BW,
/// AVX512VL, AVX512-VNNI and BMI2 (their IQ1 kernels use pdep; every such CPU has it).
bool backend_usable(DotBackend b);

/// Kernel selection policy. The families rank Avx512Vnni > AvxVnni > Avx2 > Scalar. Auto: the
/// highest the CPU supports; ForceScalar: always the scalar reference (diagnostics, A/B tests);
/// Avx2 / AvxVnni / Avx512Vnni: that family when usable, else the highest usable one below it
/// (for benchmarks and tests of one family on a CPU that has several).
enum class SimdMode { Auto, ForceScalar, Avx2, AvxVnni, Avx512Vnni };

/// Parses a DS4_CPU_KERNELS value: auto, scalar, avx2, avxvnni, avx512vnni, or the family names
/// dot_backend_name prints (avx2+avxvnni, avx2+avx512vnni); ASCII case and surrounding blanks are
/// ignored. False (and *mode untouched) for anything else.
bool parse_simd_mode(const char* value, SimdMode* mode);

/// Parses an on/off environment value: 1, true, yes, on -> true; unset-like "", 0, false, no, off
/// -> false (ASCII case and surrounding blanks ignored, as policy_word). False (and *on untouched)
/// for anything else.
bool parse_switch(const char* value, bool* on);

/// Current policy. Initial value from the environment, read once at the first call of
/// simd_mode/set_simd_mode: DS4_CPU_KERNELS (parse_simd_mode; unset or empty = Auto; an unknown
/// value is reported on stderr once and Auto is used), overridden by DS4_CPU_SCALAR switched on
/// (parse_switch; a value it cannot parse is reported and ignored). A forced family the CPU
/// cannot run is reported once, with the family used instead (the next usable one down).
SimdMode simd_mode();

/// Sets the policy for all later kernel calls in this process (thread-safe; calls already running
/// keep the kernel they picked).
void set_simd_mode(SimdMode mode);

/// The family the current policy selects on this CPU (see SimdMode).
DotBackend selected_backend();

/// True when any SIMD family (AVX2 or one of the VNNI families built on it) is selected now, i.e.
/// selected_backend() != Scalar.
bool avx2_selected();

/// "scalar", "avx2", "avx2+avxvnni", "avx2+avx512vnni".
const char* dot_backend_name(DotBackend b);

}  // namespace ds4::cpu
