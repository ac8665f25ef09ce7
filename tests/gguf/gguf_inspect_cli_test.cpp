// tests/gguf/gguf_inspect_cli_test.cpp — runs the `ds4-offload inspect` program (path given by
// the build as DS4_OFFLOAD_EXE) on small models written here: --validate passes a clean deepseek4
// layout and fails (non-zero exit, named problem) on a NaN MXFP4 scale or a missing expert tensor;
// --dump writes values known by construction (F32 copied, Q8_0 with d = 1.0 decodes to qs).
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gguf/gguf_writer.h"
#include "kernels/quant/ggml_type.h"
#include "tests/support/test_env.h"

namespace ds4::gguf {
namespace {

struct CliRun {
  int rc;
  std::string out;
};

CliRun inspect(const std::string& args, const std::filesystem::path& dir) {
  const std::string log = (dir / "inspect.log").string();
  const std::string cmd = std::string("'") + DS4_OFFLOAD_EXE + "' inspect " + args + " > '" + log + "' 2>&1";
  const int st = std::system(cmd.c_str());
  std::ifstream f(log);
  std::stringstream s;
  s << f.rdbuf();
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, s.str()};
}

/// A 2-layer deepseek4-shaped model: routed experts gate/up/down MXFP4 [64, 32, 4] per layer.
GgufWriter tiny(bool nan_scale, bool drop_down1) {
  GgufWriter w;
  w.metadata().set("general.architecture", Value::make_string("deepseek4"));
  w.metadata().set("deepseek4.block_count", Value::make_u32(2));
  w.metadata().set("deepseek4.expert_count", Value::make_u32(4));
  std::vector<uint8_t> mx(size_t(64 / 32 * 17 * 32 * 4), 0x22);
  for (size_t b = 0; b < mx.size(); b += 17) mx[b] = 127;  // E8M0 scale 2^0
  for (int l = 0; l < 2; ++l)
    for (const char* p : {"gate", "up", "down"}) {
      if (drop_down1 && l == 1 && std::string(p) == "down") continue;
      std::vector<uint8_t> d = mx;
      if (nan_scale && l == 1 && std::string(p) == "up") d[17 * 5] = 0xFF;
      const std::string name = "blk." + std::to_string(l) + ".ffn_" + p + "_exps.weight";
      EXPECT_TRUE(w.add_tensor(name, uint32_t(GgmlType::MXFP4), {64, 32, 4}, d.data(), d.size()).ok());
    }
  return w;
}

// A make-tiny model loads and runs: validate says OK (and names what it checked); `-m` works like
// the positional form.
TEST(GgufInspectCli, ValidatePassesLoadableModel) {
  const auto dir = ds4::test::scratch_dir("gguf_inspect_clean");
  const std::string path = (dir / "m.gguf").string();
  const std::string mk = std::string("'") + DS4_OFFLOAD_EXE + "' make-tiny -o '" + path + "' --experts q8_0 > /dev/null 2>&1";
  ASSERT_EQ(std::system(mk.c_str()), 0) << mk;
  CliRun r = inspect("--validate -m '" + path + "'", dir);
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("deepseek4 layout: 6 layers, 16 routed experts per layer, 18 expert tensors"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("validate: loads as deepseek4: 6 layers"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("finite logits"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("validate: OK"), std::string::npos) << r.out;
}

// The expert-layout summary of a file that is structurally valid GGUF.
TEST(GgufInspectCli, SummaryListsExpertBytesPerLayer) {
  const auto dir = ds4::test::scratch_dir("gguf_inspect_summary");
  const std::string path = (dir / "m.gguf").string();
  ASSERT_TRUE(tiny(false, false).write(path).ok());
  CliRun r = inspect("'" + path + "'", dir);
  EXPECT_EQ(r.rc, 0) << r.out;
  // 64/32*17 bytes per row * 32 rows * 4 experts = 4352 bytes per tensor, 3 per layer.
  EXPECT_NE(r.out.find("blk.0            13056 bytes (12.75 KiB) gate=MXFP4 up=MXFP4 down=MXFP4"), std::string::npos) << r.out;
  // Only experts: the loader refuses it, so validate does too.
  CliRun v = inspect("--validate '" + path + "'", dir);
  EXPECT_EQ(v.rc, 1) << v.out;
  EXPECT_NE(v.out.find("the loader refuses it"), std::string::npos) << v.out;
}

TEST(GgufInspectCli, ValidateFailsOnNanScale) {
  const auto dir = ds4::test::scratch_dir("gguf_inspect_nan");
  const std::string path = (dir / "m.gguf").string();
  ASSERT_TRUE(tiny(true, false).write(path).ok());
  CliRun r = inspect("--validate '" + path + "'", dir);
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("tensor 'blk.1.ffn_up_exps.weight' (MXFP4): 1 bad of 256 (first at block/element 5): E8M0 scale 0xFF (NaN)"),
            std::string::npos) << r.out;
  // Without --validate the file opens fine (structure is valid).
  EXPECT_EQ(inspect("'" + path + "'", dir).rc, 0);
}

TEST(GgufInspectCli, ValidateFailsOnMissingExpertTensor) {
  const auto dir = ds4::test::scratch_dir("gguf_inspect_missing");
  const std::string path = (dir / "m.gguf").string();
  ASSERT_TRUE(tiny(false, true).write(path).ok());
  CliRun r = inspect("--validate --json '" + path + "'", dir);
  EXPECT_NE(r.rc, 0) << r.out;
  // Experts only: the loader names what is missing (block_count bounded by the tensor count first).
  EXPECT_NE(r.out.find("the loader refuses it"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("key 'deepseek4.block_count': expected 1..1 (the file has 5 tensors"), std::string::npos) << r.out;
}

TEST(GgufInspectCli, OpenErrorsExitNonZero) {
  const auto dir = ds4::test::scratch_dir("gguf_inspect_bad");
  const std::string path = (dir / "bad.gguf").string();
  std::ofstream(path) << "not a gguf file at all";
  CliRun r = inspect("'" + path + "'", dir);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("bad magic"), std::string::npos) << r.out;
}

TEST(GgufInspectCli, DumpWritesFloat32RowOrder) {
  const auto dir = ds4::test::scratch_dir("gguf_inspect_dump");
  const std::string path = (dir / "m.gguf").string();
  GgufWriter w;
  w.metadata().set("general.architecture", Value::make_string("test"));
  std::vector<float> f(6 * 5);
  for (size_t k = 0; k < f.size(); ++k) f[k] = float(k) * 0.25f - 3.0f;
  ASSERT_TRUE(w.add_tensor("f", uint32_t(GgmlType::F32), {6, 5}, f.data(), f.size() * 4).ok());
  // Q8_0 [64, 2]: 4 blocks of {d = fp16 1.0 (0x3C00), qs[32]}; decodes exactly to qs.
  std::vector<uint8_t> q;
  std::vector<float> want;
  for (int b = 0; b < 4; ++b) {
    q.push_back(0x00);
    q.push_back(0x3C);
    for (int j = 0; j < 32; ++j) {
      const int8_t v = int8_t((b * 32 + j) % 255 - 127);
      q.push_back(uint8_t(v));
      want.push_back(float(v));
    }
  }
  ASSERT_TRUE(w.add_tensor("q", uint32_t(GgmlType::Q8_0), {64, 2}, q.data(), q.size()).ok());
  ASSERT_TRUE(w.write(path).ok());
  for (const auto& [name, expect] : {std::pair{std::string("f"), f}, std::pair{std::string("q"), want}}) {
    const std::string out = (dir / (name + ".f32")).string();
    CliRun r = inspect("'" + path + "' --dump " + name + " --out '" + out + "'", dir);
    ASSERT_EQ(r.rc, 0) << r.out;
    std::ifstream in(out, std::ios::binary);
    std::vector<float> got(expect.size() + 1);
    in.read(reinterpret_cast<char*>(got.data()), std::streamsize(got.size() * 4));
    ASSERT_EQ(size_t(in.gcount()), expect.size() * 4) << name;
    got.resize(expect.size());
    EXPECT_EQ(got, expect) << name;
  }
  CliRun r = inspect("'" + path + "' --dump nope --out '" + (dir / "x").string() + "'", dir);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("no tensor named 'nope'"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace ds4::gguf
