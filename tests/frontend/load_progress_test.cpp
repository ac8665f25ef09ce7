// tests/frontend/load_progress_test.cpp — model-load progress in bytes (issue 16, item 7): with
// DS4_PROGRESS=1 (forced progress lines) `run` on the fixture GGUF prints "checked and bound ...
// [D of T bytes]" lines on stderr whose D never decreases and ends at T, where T is the bytes of
// every tensor of the file computed here from the tensor infos' shapes and types (block geometry
// from kernels/quant/type_traits.h); stdout is byte-identical to the run without progress, and
// an ordinary (non-terminal, sub-second) load prints no progress line.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "kernels/quant/type_traits.h"
#include "tests/support/cli_run.h"
#include "tests/support/test_env.h"

namespace ds4 {
namespace {

namespace fs = std::filesystem;

fs::path fixture_gguf() { return test::fixtures_dir() / "dsv4-tiny" / "dsv4-tiny-mxfp4.gguf"; }

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs `run` on the fixture with stdout and stderr to separate files; `env` prefixes the command.
int run_model(const std::string& env, const fs::path& out, const fs::path& err) {
  const std::string cmd = env + " '" + std::string(DS4_OFFLOAD_EXE) + "' run -m '" + fixture_gguf().string() +
                          "' -p 'The capital of France is' -n 3 --temp 0 --seed 1 > '" + out.string() + "' 2> '" +
                          err.string() + "'";
  const int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(LoadProgress, ForcedProgressCountsEveryTensorByteOnStderrOnly) {
  if (!fs::exists(fixture_gguf())) GTEST_SKIP() << "fixture not found: " << fixture_gguf();
  // Expected total: every tensor's bytes from its shape and type, not the reader's nbytes.
  auto f = gguf::GgufModel::open(fixture_gguf().string());
  ASSERT_TRUE(f.ok()) << f.error().message;
  uint64_t expected = 0;
  for (const gguf::TensorInfo& t : f->tensors()) {
    const quant::QuantTypeTraits* tr = quant::quant_type_traits(static_cast<GgmlType>(t.type));
    ASSERT_NE(tr, nullptr) << t.name << ": type " << t.type;
    ASSERT_EQ(t.ne[0] % tr->block_elems, 0) << t.name;
    expected += uint64_t(t.ne[0] / tr->block_elems) * uint64_t(tr->block_bytes) * uint64_t(t.ne[1]) *
                uint64_t(t.ne[2]) * uint64_t(t.ne[3]);
  }
  ASSERT_GT(expected, 1u << 20);

  const fs::path dir = test::scratch_dir("load_progress");
  ASSERT_EQ(run_model("DS4_PROGRESS=1", dir / "forced.out", dir / "forced.err"), 0) << slurp(dir / "forced.err");
  ASSERT_EQ(run_model("env -u DS4_PROGRESS", dir / "plain.out", dir / "plain.err"), 0) << slurp(dir / "plain.err");

  const std::string err = slurp(dir / "forced.err");
  const std::regex line("run: loading [^\\n]*: checked and bound [0-9.]+ of [0-9.]+ MiB of tensors \\([0-9]+ %\\) "
                        "\\[([0-9]+) of ([0-9]+) bytes\\] \\([0-9.]+ s\\)");
  std::vector<uint64_t> done;
  for (std::sregex_iterator it(err.begin(), err.end(), line), end; it != end; ++it) {
    done.push_back(std::stoull((*it)[1].str()));
    EXPECT_EQ(std::stoull((*it)[2].str()), expected) << it->str();
  }
  ASSERT_FALSE(done.empty()) << err;
  for (size_t i = 1; i < done.size(); ++i) EXPECT_LE(done[i - 1], done[i]) << "line " << i << " of\n" << err;
  EXPECT_EQ(done.back(), expected) << err;

  // stdout is the same text with and without progress; the plain load (not a terminal, well under
  // a second) shows no progress line.
  EXPECT_EQ(slurp(dir / "forced.out"), slurp(dir / "plain.out"));
  EXPECT_EQ(slurp(dir / "forced.out").find("bytes]"), std::string::npos);
  EXPECT_FALSE(slurp(dir / "plain.out").empty());
  EXPECT_EQ(slurp(dir / "plain.err").find("checked and bound"), std::string::npos) << slurp(dir / "plain.err");
}

}  // namespace
}  // namespace ds4
