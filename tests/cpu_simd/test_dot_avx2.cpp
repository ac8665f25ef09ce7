// tests/cpu_simd/test_dot_avx2.cpp — the x86 row-dot kernel families (AVX2, AVX-VNNI, AVX512-VNNI,
// each one this CPU supports) vs the scalar reference: bit-identical results for every type with
// a SIMD kernel on random weights and Q8_1 activations, over the shapes of bench/op_cases.h and
// thread counts 1/2/3; feature detection against /proc/cpuinfo; run-time selection and the policy
// switch (API, DS4_CPU_SCALAR and DS4_CPU_KERNELS).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "bench/op_cases.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dot_dispatch.h"
#include "kernels/cpu/iq_lookup.h"
#include "kernels/cpu/kernel_choices.h"
#include "kernels/cpu/policy_word.h"
#include "kernels/cpu/q8_passes.h"
#include "kernels/cpu/quant_ref.h"
#include "kernels/quant/blocks.h"
#include "tests/cpu_simd/simd_families.h"

namespace ds4 {
namespace {

using cpu::SimdMode;
using simd_test::bits;
using simd_test::Family;
using simd_test::kFamilies;

// Policy at process start (read before any test changes it).
const SimdMode g_initial_mode = cpu::simd_mode();
const cpu::Q8Passes g_initial_q8_passes = cpu::q8_passes_mode();
const cpu::IqLookup g_initial_iq_lookup = cpu::iq_lookup_mode();

/// Restores Auto after each test that changes the policy.
struct ModeGuard {
  ~ModeGuard() {
    cpu::set_simd_mode(SimdMode::Auto);
    cpu::set_iq_lookup_mode(cpu::IqLookup::Auto);
    cpu::set_q8_passes_mode(cpu::Q8Passes::Auto);
  }
};

/// Q8_1 activations of `batch` x `cols`: Gaussian rows with per-block magnitudes spread over
/// 2^-8..2^8, some all-zero blocks and some outliers (quantize_row_q8_1, codes in [-127, 127]).
std::vector<uint8_t> random_activations(int64_t cols, std::mt19937_64& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> mag(-8, 8), pick(0, 15);
  std::vector<float> x(static_cast<size_t>(cols));
  for (int64_t b = 0; b < cols / 32; ++b) {
    const int kind = pick(rng);
    const float scale = std::ldexp(1.0f, mag(rng));
    for (int j = 0; j < 32; ++j) {
      float v = kind == 0 ? 0.0f : nd(rng) * scale;
      if (kind == 1 && j == 5) v = 1000.0f * scale;
      x[size_t(32 * b + j)] = v;
    }
  }
  std::vector<uint8_t> a(size_t(cols / 32 * int64_t(sizeof(quant::BlockQ8_1))));
  cpu::quantize_row_q8_1(x.data(), a.data(), cols);
  return a;
}

/// Bits with every NaN mapped to one pattern (the F16C decode quiets a signalling-NaN scale).
uint32_t nan_canonical(float f) { return std::isnan(f) ? 0x7FC00000u : bits(f); }

std::string case_name(const bench::OpCase& c) {
  return std::string(ggml_type_name(uint32_t(c.type))) + " " + std::to_string(c.rows) + "x" +
         std::to_string(c.cols) + " (" + c.tag + ")";
}


/// Compares every SIMD family this CPU can run (threads 1, 2, 3 through matvec_q8_1, and
/// vec_dot_q8_1 per row) with the scalar reference on one case.
void check_case(const bench::OpCase& c, uint64_t seed, bool sane) {
  ModeGuard guard;
  std::mt19937_64 rng(seed);
  const auto w = bench::random_weights(c.type, c.rows, c.cols, rng, sane);
  const auto a = random_activations(c.cols, rng);
  const int64_t rb = cpu::row_bytes(c.type, c.cols);

  cpu::set_simd_mode(SimdMode::ForceScalar);
  ASSERT_EQ(cpu::dot_backend(c.type), cpu::DotBackend::Scalar);
  std::vector<float> ref(size_t(c.rows));
  cpu::matvec_q8_1(c.type, w.data(), c.rows, c.cols, a.data(), ref.data(), 1);

  int nonzero = 0;
  for (const Family& f : kFamilies)
  for (cpu::IqLookup lookup : {cpu::IqLookup::Gather, cpu::IqLookup::Loads, cpu::IqLookup::Auto}) {
    if (!cpu::backend_usable(f.backend)) continue;
    // Q8_0's row passes (q8_passes.h) follow the look-up pass: streams, single, auto.
    cpu::set_q8_passes_mode(lookup == cpu::IqLookup::Gather  ? cpu::Q8Passes::Streams
                            : lookup == cpu::IqLookup::Loads ? cpu::Q8Passes::Single
                                                             : cpu::Q8Passes::Auto);
    // The AVX2 family has only scalar-load IQ kernels (its choice is IQ2_XS's index reads): all three passes.
    cpu::set_iq_lookup_mode(lookup);
    const std::string fam = std::string(cpu::dot_backend_name(f.backend)) + " IQ look-ups " +
                            (lookup == cpu::IqLookup::Gather ? "gather" : lookup == cpu::IqLookup::Loads ? "loads" : "auto");
    cpu::set_simd_mode(f.mode);
    ASSERT_EQ(cpu::dot_backend(c.type), f.backend) << fam;
    for (int threads : {1, 2, 3}) {
      std::vector<float> out(size_t(c.rows), -12345.0f);
      cpu::matvec_q8_1(c.type, w.data(), c.rows, c.cols, a.data(), out.data(), threads);
      for (int64_t r = 0; r < c.rows; ++r) {
        const float v = out[size_t(r)], e = ref[size_t(r)];
        if (sane) {
          ASSERT_EQ(bits(v), bits(e)) << case_name(c) << " row " << r << " threads " << threads << ": " << fam << " "
                                      << v << " scalar " << e;
        } else {
          ASSERT_EQ(nan_canonical(v), nan_canonical(e)) << case_name(c) << " row " << r << " threads " << threads
                                                        << " " << fam;
        }
        nonzero += e != 0.0f;
      }
    }
    for (int64_t r = 0; r < c.rows; ++r) {
      const float v = cpu::vec_dot_q8_1(c.type, w.data() + r * rb, a.data(), c.cols);
      ASSERT_EQ(nan_canonical(v), nan_canonical(ref[size_t(r)])) << case_name(c) << " vec_dot row " << r << " " << fam;
    }
  }
  if (sane) {
    EXPECT_GT(nonzero, 0) << case_name(c) << ": all-zero results test nothing";
  }
}

void require_avx2() {
  if (!cpu::cpu_avx2_usable()) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C: AVX2 kernels cannot run here";
}

TEST(CpuSimdDot, BitIdenticalToScalarOnSaneScales) {
  require_avx2();
  uint64_t seed = 1;
  for (const auto& c : bench::test_op_cases()) check_case(c, seed++, true);
}

TEST(CpuSimdDot, BitIdenticalToScalarOnRandomBytes) {
  require_avx2();
  uint64_t seed = 1000;
  for (const auto& c : bench::test_op_cases()) check_case(c, seed++, false);
}

TEST(CpuSimdDot, EveryExpertTypeHasAnAvx2Kernel) {
  for (GgmlType t : bench::expert_types()) EXPECT_TRUE(cpu::avx2::has_row_dot(t)) << ggml_type_name(uint32_t(t));
  // Types without one stay on the scalar path whatever the policy.
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::IQ2_S, GgmlType::NVFP4, GgmlType::Q4_0}) {
    EXPECT_FALSE(cpu::avx2::has_row_dot(t));
    EXPECT_EQ(cpu::dot_backend(t), cpu::DotBackend::Scalar);
  }
}

TEST(CpuSimdSelection, InitialModeFollowsEnvironment) {
  const char* e = std::getenv("DS4_CPU_SCALAR");
  const char* k = std::getenv("DS4_CPU_KERNELS");
  SimdMode expected = SimdMode::Auto;  // unset, empty and unknown values
  if (k != nullptr) cpu::parse_simd_mode(k, &expected);
  bool scalar = false;  // unparsable values are reported and ignored
  if (e != nullptr && cpu::parse_switch(e, &scalar) && scalar) expected = SimdMode::ForceScalar;
  EXPECT_EQ(g_initial_mode, expected) << "DS4_CPU_KERNELS='" << (k != nullptr ? k : "(unset)") << "'";
}

TEST(CpuSimdSelection, ParsesSwitchValues) {
  for (const char* on : {"1", "true", "YES", " on "}) {
    bool v = false;
    EXPECT_TRUE(cpu::parse_switch(on, &v)) << on;
    EXPECT_TRUE(v) << on;
  }
  for (const char* off : {"", "0", "False", "no", "OFF\t"}) {
    bool v = true;
    EXPECT_TRUE(cpu::parse_switch(off, &v)) << off;
    EXPECT_FALSE(v) << off;
  }
  for (const char* bad : {"2", "scalar", "enable", "1 1"}) {
    bool v = true;
    EXPECT_FALSE(cpu::parse_switch(bad, &v)) << bad;
    EXPECT_TRUE(v) << bad;  // untouched
  }
}

TEST(CpuSimdSelection, ParsesKernelFamilyNames) {
  const struct {
    const char* text;
    SimdMode mode;
  } good[] = {{"auto", SimdMode::Auto},           {"", SimdMode::Auto},
              {"scalar", SimdMode::ForceScalar},  {"Scalar", SimdMode::ForceScalar},
              {"avx2", SimdMode::Avx2},           {" AVX2\t", SimdMode::Avx2},
              {"avxvnni", SimdMode::AvxVnni},     {"avx2+avxvnni", SimdMode::AvxVnni},
              {"avx512vnni", SimdMode::Avx512Vnni}, {"AVX2+AVX512VNNI ", SimdMode::Avx512Vnni}};
  for (const auto& g : good) {
    SimdMode m = SimdMode::ForceScalar == g.mode ? SimdMode::Auto : SimdMode::ForceScalar;
    EXPECT_TRUE(cpu::parse_simd_mode(g.text, &m)) << "'" << g.text << "'";
    EXPECT_EQ(m, g.mode) << "'" << g.text << "'";
  }
  for (const char* bad : {"sse9", "avx", "avx2 x", "avx2+", "avx512_vnni", "1"}) {
    SimdMode m = SimdMode::Avx2;
    EXPECT_FALSE(cpu::parse_simd_mode(bad, &m)) << "'" << bad << "'";
    EXPECT_EQ(m, SimdMode::Avx2) << "'" << bad << "': a refused value must leave the mode alone";
  }
  // The names dot_backend_name prints parse back to the policy that selects that family.
  SimdMode m = SimdMode::Auto;
  ASSERT_TRUE(cpu::parse_simd_mode(cpu::dot_backend_name(cpu::DotBackend::Avx512Vnni), &m));
  EXPECT_EQ(m, SimdMode::Avx512Vnni);
  ASSERT_TRUE(cpu::parse_simd_mode(cpu::dot_backend_name(cpu::DotBackend::Scalar), &m));
  EXPECT_EQ(m, SimdMode::ForceScalar);
}

TEST(CpuSimdSelection, ParsesIqLookupNames) {
  const struct {
    const char* text;
    cpu::IqLookup mode;
  } good[] = {{"auto", cpu::IqLookup::Auto}, {"", cpu::IqLookup::Auto}, {" Gather", cpu::IqLookup::Gather},
              {"LOADS\n", cpu::IqLookup::Loads}};
  for (const auto& g : good) {
    cpu::IqLookup m = g.mode == cpu::IqLookup::Gather ? cpu::IqLookup::Loads : cpu::IqLookup::Gather;
    EXPECT_TRUE(cpu::parse_iq_lookup(g.text, &m)) << "'" << g.text << "'";
    EXPECT_EQ(m, g.mode) << "'" << g.text << "'";
  }
  for (const char* bad : {"gathers", "load", "scalar", "1"}) {
    cpu::IqLookup m = cpu::IqLookup::Loads;
    EXPECT_FALSE(cpu::parse_iq_lookup(bad, &m)) << "'" << bad << "'";
    EXPECT_EQ(m, cpu::IqLookup::Loads) << "'" << bad << "': a refused value must leave the mode alone";
  }
}

// kernel_choices (printed by bench and run) names the selected family's forced variants, marked as
// forced: all IQ grids at once in the VNNI families, IQ2_XS (and IQ1_S / IQ1_M's index reads on a
// CPU with BMI2) in the AVX2 family; nothing for the scalar kernels.
TEST(CpuSimdSelection, KernelChoicesNameTheForcedVariants) {
  ModeGuard guard;
  bool any = false;
  for (const Family& f : kFamilies) {
    if (f.backend == cpu::DotBackend::Scalar || !cpu::backend_usable(f.backend)) continue;
    any = true;
    cpu::set_simd_mode(f.mode);
    cpu::set_q8_passes_mode(cpu::Q8Passes::Single);
    cpu::set_iq_lookup_mode(cpu::IqLookup::Loads);
    const bool avx2 = f.backend == cpu::DotBackend::Avx2;
    const std::string iq = !avx2 ? "IQ grids" : cpu::cpu_bmi2_usable() ? "IQ2_XS and IQ1 indices" : "IQ2_XS indices";
    EXPECT_EQ(cpu::kernel_choices(), "Q8_0 passes: single (forced); " + iq + ": loads (forced)")
        << cpu::dot_backend_name(f.backend);
    cpu::set_q8_passes_mode(cpu::Q8Passes::Streams);
    cpu::set_iq_lookup_mode(cpu::IqLookup::Gather);
    EXPECT_EQ(cpu::kernel_choices(), "Q8_0 passes: streams (forced); " + iq + ": gather (forced)")
        << cpu::dot_backend_name(f.backend);
  }
  cpu::set_simd_mode(SimdMode::ForceScalar);
  EXPECT_EQ(cpu::kernel_choices(), "");
  if (!any) GTEST_SKIP() << "no SIMD family on this CPU";
}

// Without BMI2 (masked here, as a CPU or VM that hides it would be) no pdep kernel may be chosen:
// the VNNI families are unusable, the AVX2 family takes the vector-index IQ1 kernels whatever the
// policy says and reports no IQ1 choice, and its forced choice is named for IQ2_XS alone.
TEST(CpuSimdSelection, WithoutBmi2NoPdepKernelIsChosen) {
  if (!cpu::cpu_avx2_usable()) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C: the x86 families do not run here";
  ModeGuard guard;
  struct Unmask {
    ~Unmask() { cpu::mask_bmi2_for_tests(false); }
  } unmask;
  cpu::set_simd_mode(SimdMode::Avx2);
  cpu::set_iq_lookup_mode(cpu::IqLookup::Gather);
  const cpu::RowsDotFn vec_s = cpu::simd_rows_dot(GgmlType::IQ1_S), vec_m = cpu::simd_rows_dot(GgmlType::IQ1_M);
  cpu::set_iq_lookup_mode(cpu::IqLookup::Loads);
  const bool pdep_here = cpu::cpu_bmi2_usable();
  if (pdep_here) {  // the choice exists with BMI2: loads is another kernel
    EXPECT_NE(cpu::simd_rows_dot(GgmlType::IQ1_S), vec_s);
    EXPECT_NE(cpu::simd_rows_dot(GgmlType::IQ1_M), vec_m);
  }
  cpu::mask_bmi2_for_tests(true);
  EXPECT_FALSE(cpu::cpu_bmi2_usable());
  EXPECT_FALSE(cpu::backend_usable(cpu::DotBackend::AvxVnni));
  EXPECT_FALSE(cpu::backend_usable(cpu::DotBackend::Avx512Vnni));
  EXPECT_TRUE(cpu::backend_usable(cpu::DotBackend::Avx2));
  for (cpu::IqLookup lookup : {cpu::IqLookup::Loads, cpu::IqLookup::Auto, cpu::IqLookup::Gather}) {
    cpu::set_iq_lookup_mode(lookup);
    EXPECT_EQ(cpu::simd_rows_dot(GgmlType::IQ1_S), vec_s);
    EXPECT_EQ(cpu::simd_rows_dot(GgmlType::IQ1_M), vec_m);
    EXPECT_STREQ(cpu::iq_lookup_used(cpu::DotBackend::Avx2, GgmlType::IQ1_S), "");
    EXPECT_STREQ(cpu::iq_lookup_used(cpu::DotBackend::Avx2, GgmlType::IQ1_M), "");
  }
  cpu::set_q8_passes_mode(cpu::Q8Passes::Single);
  cpu::set_iq_lookup_mode(cpu::IqLookup::Loads);
  EXPECT_EQ(cpu::kernel_choices(), "Q8_0 passes: single (forced); IQ2_XS indices: loads (forced)");
}

TEST(CpuSimdSelection, IqLookupPolicySelectsTheVariant) {
  ModeGuard guard;
  const char* env = std::getenv("DS4_CPU_IQ_LOOKUP");
  cpu::IqLookup initial = cpu::IqLookup::Auto;
  if (env != nullptr) cpu::parse_iq_lookup(env, &initial);
  EXPECT_EQ(g_initial_iq_lookup, initial);
  bool any = false;
  for (const Family& f : kFamilies) {
    if (!cpu::backend_usable(f.backend)) continue;
    cpu::set_simd_mode(f.mode);
    // The AVX2 family's choices: IQ2_XS's index reads and, on a CPU with BMI2, IQ1_S / IQ1_M's (pdep
    // or vector indices); IQ2_XXS (and IQ1 without BMI2) has one kernel.
    const auto avx2_choice = [&](GgmlType t) {
      return t == GgmlType::IQ2_XS || ((t == GgmlType::IQ1_S || t == GgmlType::IQ1_M) && cpu::cpu_bmi2_usable());
    };
    if (f.backend == cpu::DotBackend::Avx2) {
      for (GgmlType t : {GgmlType::IQ2_XXS, GgmlType::IQ1_S, GgmlType::IQ1_M}) {
        if (avx2_choice(t)) continue;
        cpu::set_iq_lookup_mode(cpu::IqLookup::Gather);
        const cpu::RowsDotFn g = cpu::simd_rows_dot(t);
        cpu::set_iq_lookup_mode(cpu::IqLookup::Loads);
        EXPECT_EQ(cpu::simd_rows_dot(t), g) << ggml_type_name(uint32_t(t));
        EXPECT_STREQ(cpu::iq_lookup_used(f.backend, t), "");
      }
    }
    for (GgmlType t : {GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ1_S, GgmlType::IQ1_M}) {
      if (f.backend == cpu::DotBackend::Avx2 && !avx2_choice(t)) continue;
      cpu::set_iq_lookup_mode(cpu::IqLookup::Gather);
      const cpu::RowsDotFn g = cpu::simd_rows_dot(t);
      EXPECT_STREQ(cpu::iq_lookup_used(f.backend, t), "gather");
      cpu::set_iq_lookup_mode(cpu::IqLookup::Loads);
      const cpu::RowsDotFn l = cpu::simd_rows_dot(t);
      EXPECT_STREQ(cpu::iq_lookup_used(f.backend, t), "loads");
      ASSERT_NE(g, nullptr);
      ASSERT_NE(l, nullptr);
      EXPECT_NE(g, l) << ggml_type_name(uint32_t(t)) << ": the two look-up variants must be different kernels";
      // Auto measures once and then keeps its answer: one of the two, the same every call.
      cpu::set_iq_lookup_mode(cpu::IqLookup::Auto);
      const cpu::RowsDotFn a = cpu::simd_rows_dot(t);
      EXPECT_TRUE(a == g || a == l);
      EXPECT_EQ(cpu::simd_rows_dot(t), a);
      EXPECT_STREQ(cpu::iq_lookup_used(f.backend, t), a == l ? "loads" : "gather");
      any = true;
    }
    // Types without the choice are not affected.
    EXPECT_STREQ(cpu::iq_lookup_used(f.backend, GgmlType::Q8_0), "");
  }
  if (!any) GTEST_SKIP() << "no SIMD kernel family on this CPU: the IQ look-up choice does not apply";
}

TEST(CpuSimdSelection, BadPolicyValuesArePrintedSafely) {
  // Control bytes, non-ASCII bytes and over-long values of a DS4_CPU_* variable reach stderr as
  // one short line: \xNN escapes, at most 64 bytes of the value, then "...".
  EXPECT_EQ(cpu::policy_value_for_message("a\x1b[31mred\n\xff"), "a\\x1B[31mred\\x0A\\xFF");
  EXPECT_EQ(cpu::policy_value_for_message(nullptr), "");
  const std::string longv(5000, 'y');
  EXPECT_EQ(cpu::policy_value_for_message(longv.c_str()), std::string(64, 'y') + "...");
  EXPECT_EQ(cpu::policy_value_for_message(std::string(64, 'z').c_str()), std::string(64, 'z'));
}

TEST(CpuSimdSelection, Q8PassesPolicySelectsTheVariant) {
  ModeGuard guard;
  const char* env = std::getenv("DS4_CPU_Q8_0_PASSES");
  cpu::Q8Passes initial = cpu::Q8Passes::Auto;
  if (env != nullptr) cpu::parse_q8_passes(env, &initial);
  EXPECT_EQ(g_initial_q8_passes, initial);
  cpu::Q8Passes m = cpu::Q8Passes::Auto;
  EXPECT_TRUE(cpu::parse_q8_passes(" Single ", &m));
  EXPECT_EQ(m, cpu::Q8Passes::Single);
  EXPECT_TRUE(cpu::parse_q8_passes("streams", &m));
  EXPECT_EQ(m, cpu::Q8Passes::Streams);
  EXPECT_FALSE(cpu::parse_q8_passes("rows4", &m));
  EXPECT_EQ(m, cpu::Q8Passes::Streams);
  bool any = false;
  for (const Family& f : kFamilies) {
    if (!cpu::backend_usable(f.backend)) continue;
    cpu::set_simd_mode(f.mode);
    cpu::set_q8_passes_mode(cpu::Q8Passes::Streams);
    const cpu::RowsDotFn st = cpu::simd_rows_dot(GgmlType::Q8_0);
    EXPECT_STREQ(cpu::q8_passes_used(f.backend), "streams");
    cpu::set_q8_passes_mode(cpu::Q8Passes::Single);
    const cpu::RowsDotFn si = cpu::simd_rows_dot(GgmlType::Q8_0);
    EXPECT_STREQ(cpu::q8_passes_used(f.backend), "single");
    ASSERT_NE(st, nullptr);
    ASSERT_NE(si, nullptr);
    EXPECT_NE(st, si) << "the two Q8_0 row-pass variants must be different kernels";
    // Auto measures once and then keeps its answer; other types are not affected.
    cpu::set_q8_passes_mode(cpu::Q8Passes::Auto);
    const cpu::RowsDotFn a = cpu::simd_rows_dot(GgmlType::Q8_0);
    EXPECT_TRUE(a == st || a == si);
    EXPECT_EQ(cpu::simd_rows_dot(GgmlType::Q8_0), a);
    EXPECT_STREQ(cpu::q8_passes_used(f.backend), a == si ? "single" : "streams");
    cpu::set_q8_passes_mode(cpu::Q8Passes::Streams);
    const cpu::RowsDotFn mx = cpu::simd_rows_dot(GgmlType::MXFP4);
    cpu::set_q8_passes_mode(cpu::Q8Passes::Single);
    EXPECT_EQ(cpu::simd_rows_dot(GgmlType::MXFP4), mx);
    any = true;
  }
  if (!any) GTEST_SKIP() << "no SIMD kernel family on this CPU: the Q8_0 row passes do not apply";
}

/// The flags of the first "flags" line of /proc/cpuinfo (empty when there is none).
std::set<std::string> proc_cpuinfo_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("flags", 0) == 0) {
      std::istringstream words(line.substr(line.find(':') + 1));
      std::set<std::string> f;
      for (std::string w; words >> w;) f.insert(w);
      return f;
    }
  return {};
}

TEST(CpuSimdSelection, DetectionAgreesWithProcCpuinfo) {
  const auto flags = proc_cpuinfo_flags();
  if (flags.empty()) GTEST_SKIP() << "no /proc/cpuinfo flags line to compare with";
  const auto& f = cpu::cpu_features();
  // The kernel lists a flag only when the CPU has it and the kernel enabled its register state.
  EXPECT_EQ(f.avx2, flags.count("avx2") == 1);
  EXPECT_EQ(f.fma, flags.count("fma") == 1);
  EXPECT_EQ(f.f16c, flags.count("f16c") == 1);
  // Kernels before Linux 5.12 do not list avx_vnni although the CPU has it: one direction only.
  if (flags.count("avx_vnni") == 1) {
    EXPECT_TRUE(f.avx_vnni);
  }
  EXPECT_EQ(f.avx512_vnni, flags.count("avx512_vnni") == 1);
  EXPECT_EQ(f.avx512_vl, flags.count("avx512vl") == 1);
  EXPECT_EQ(f.avx512_f, flags.count("avx512f") == 1);
  EXPECT_EQ(f.avx512_bw, flags.count("avx512bw") == 1);
  EXPECT_EQ(f.bmi2, flags.count("bmi2") == 1);
}

TEST(CpuSimdSelection, EveryPolicyPicksAUsableBackend) {
  ModeGuard guard;
  cpu::set_simd_mode(SimdMode::ForceScalar);
  for (GgmlType t : bench::expert_types()) {
    EXPECT_EQ(cpu::dot_backend(t), cpu::DotBackend::Scalar);
    EXPECT_EQ(cpu::simd_row_dot(t), nullptr);
  }
  const auto& f = cpu::cpu_features();
  EXPECT_EQ(cpu::cpu_avx2_usable(), f.avx2 && f.fma && f.f16c);
  EXPECT_EQ(cpu::backend_usable(cpu::DotBackend::Avx2), cpu::cpu_avx2_usable());
  EXPECT_TRUE(cpu::backend_usable(cpu::DotBackend::Scalar));
  if (cpu::backend_usable(cpu::DotBackend::AvxVnni)) {
    EXPECT_TRUE(f.avx_vnni && f.bmi2 && cpu::cpu_avx2_usable());
  }
  if (cpu::backend_usable(cpu::DotBackend::Avx512Vnni)) {
    EXPECT_TRUE(f.avx512_vnni && f.avx512_vl && f.avx512_f && f.avx512_bw && f.bmi2 && cpu::cpu_avx2_usable());
  }
  const cpu::DotBackend fallback = cpu::cpu_avx2_usable() ? cpu::DotBackend::Avx2 : cpu::DotBackend::Scalar;
  // Documented rank: Avx512Vnni > AvxVnni > Avx2 > Scalar; a forced family falls to the highest
  // usable one at or below it.
  const cpu::DotBackend rank[] = {cpu::DotBackend::Avx512Vnni, cpu::DotBackend::AvxVnni, cpu::DotBackend::Avx2};
  const auto at_or_below = [&](cpu::DotBackend top) {
    bool reached = false;
    for (cpu::DotBackend b : rank) {
      reached = reached || b == top;
      if (reached && cpu::backend_usable(b)) return b;
    }
    return cpu::DotBackend::Scalar;
  };
  for (const Family& fam : kFamilies) {
    cpu::set_simd_mode(fam.mode);
    const cpu::DotBackend want = at_or_below(fam.backend);
    EXPECT_EQ(cpu::selected_backend(), want) << cpu::dot_backend_name(fam.backend);
    for (GgmlType t : bench::expert_types()) EXPECT_EQ(cpu::dot_backend(t), want);
  }
  cpu::set_simd_mode(SimdMode::Auto);
  const bool any_vnni =
      cpu::backend_usable(cpu::DotBackend::AvxVnni) || cpu::backend_usable(cpu::DotBackend::Avx512Vnni);
  const cpu::DotBackend got = cpu::selected_backend();
  EXPECT_TRUE(cpu::backend_usable(got));
  EXPECT_EQ(got, at_or_below(cpu::DotBackend::Avx512Vnni)) << cpu::dot_backend_name(got);
  if (!any_vnni) {
    EXPECT_EQ(got, fallback);
  }
  for (GgmlType t : bench::expert_types()) EXPECT_EQ(cpu::dot_backend(t), got);
  EXPECT_STREQ(cpu::dot_backend_name(cpu::DotBackend::Avx2), "avx2");
  EXPECT_STREQ(cpu::dot_backend_name(cpu::DotBackend::AvxVnni), "avx2+avxvnni");
  EXPECT_STREQ(cpu::dot_backend_name(cpu::DotBackend::Scalar), "scalar");
}

TEST(CpuSimdSelection, ForcedScalarPathComputesTheContract) {
  // With the scalar path forced, a Q8_0 row of all-ones weights (d = 1) against activations of
  // code 1 (d = 1/64 as fp16 bits 0x2400) gives exactly n/64 (every product 1 * 1/64).
  ModeGuard guard;
  cpu::set_simd_mode(SimdMode::ForceScalar);
  const int64_t n = 320;
  std::vector<quant::BlockQ8_0> w(size_t(n / 32));
  for (auto& b : w) {
    b.d = 0x3C00;  // 1.0
    for (auto& q : b.qs) q = 1;
  }
  std::vector<quant::BlockQ8_1> a(size_t(n / 32));
  for (auto& b : a) {
    b.d = 0x2400;  // 2^-6
    b.s = 0;
    for (auto& q : b.qs) q = 1;
  }
  EXPECT_EQ(cpu::vec_dot_q8_1(GgmlType::Q8_0, w.data(), a.data(), n), 5.0f);
  cpu::set_simd_mode(SimdMode::Auto);
  EXPECT_EQ(cpu::vec_dot_q8_1(GgmlType::Q8_0, w.data(), a.data(), n), 5.0f);
}

}  // namespace
}  // namespace ds4
