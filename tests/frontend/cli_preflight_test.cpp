// tests/frontend/cli_preflight_test.cpp — bad inputs refused before the model is loaded, each with
// one error "ds4-offload CMD: error: ..." and the bad-input exit code (1): a lone shard of a split
// safetensors checkpoint or an incomplete set, `--backend ''`, `-t` above the 1024 cap, -c/--ctx
// beyond the model's context_length (from the header), no tokenizer where text is needed, an empty
// perplexity file. "Before the load" is checked with DS4_PROGRESS=1, which makes the load print
// "CMD: loading MODEL: ..." at once (cli_common.h Progress): no such line may appear. No
// wall-clock assertion (it would flake under load).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "kernels/device.h"
#include "tests/support/cli_run.h"
#include "tests/support/test_env.h"

namespace ds4 {
namespace {

namespace fs = std::filesystem;

// Runs the program with progress lines forced; stdout and stderr merged. `timeout` bounds a
// regression that would start serving or loading for real.
test::CliOut sh(const std::string& args) {
  return test::run_cli("env", "DS4_PROGRESS=1 timeout 120 '" + std::string(DS4_OFFLOAD_EXE) + "' " + args, true);
}

fs::path fixture() { return test::fixtures_dir() / "dsv4-tiny"; }
std::string gguf() { return "'" + (fixture() / "dsv4-tiny-mxfp4.gguf").string() + "'"; }

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}

// One error line of `cmd` containing `needle`, exit code 1, and no load progress line.
void expect_early_error(const test::CliOut& r, const std::string& cmd, const std::string& needle) {
  EXPECT_EQ(r.code, 1) << r.text;
  EXPECT_NE(r.text.find("ds4-offload " + cmd + ": error: "), std::string::npos) << r.text;
  EXPECT_NE(r.text.find(needle), std::string::npos) << "expected '" << needle << "' in:\n" << r.text;
  EXPECT_EQ(count(r.text, "error:"), 1u) << r.text;
  EXPECT_EQ(r.text.find(cmd + ": loading "), std::string::npos) << "loaded before failing:\n" << r.text;
}

class Preflight : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(fixture() / "dsv4-tiny-mxfp4.gguf")) GTEST_SKIP() << "fixture not found: " << fixture();
    dir_ = test::scratch_dir(std::string("preflight_") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  fs::path dir_;
};

TEST_F(Preflight, LoadProgressLineIsPrintedWhenTheModelLoads) {
  // The control for every "no loading line" assertion below: a good run prints it.
  auto r = sh("run -m " + gguf() + " -p x -n 1 --temp 0");
  ASSERT_EQ(r.code, 0) << r.text;
  EXPECT_NE(r.text.find("run: loading "), std::string::npos) << r.text;
}

TEST_F(Preflight, LoneSafetensorsShardIsRefused) {
  // A fake shard: only its name matters, the check runs before any file is opened.
  const fs::path shard = dir_ / "model-00001-of-00046.safetensors";
  std::ofstream(shard, std::ios::binary) << std::string("\x02\0\0\0\0\0\0\0{}", 10);
  std::ofstream(dir_ / "config.json") << "{}";
  for (const char* cmd : {"run", "inspect"}) {
    const std::string args = std::string(cmd) + " -m '" + shard.string() + "'" + (std::string(cmd) == "run" ? " -p x" : "");
    auto r = sh(args);
    expect_early_error(r, cmd,
                       shard.string() + ": shard 1 of a 46-shard safetensors checkpoint (model-00001-of-00046.safetensors "
                                        "to model-00046-of-00046.safetensors)");
    EXPECT_NE(r.text.find("found this shard given alone (1 of 46 shards in " + dir_.string() + ", no index)"),
              std::string::npos) << r.text;
    EXPECT_NE(r.text.find("missing: model-00002-of-00046.safetensors, "), std::string::npos) << r.text;
    EXPECT_NE(r.text.find(", ... and 37 more"), std::string::npos) << r.text;  // 45 missing, 8 named
  }
}

TEST_F(Preflight, IncompleteSafetensorsSetsAreRefused) {
  // A folder of shards without the index.
  const fs::path a = dir_ / "noindex";
  fs::create_directories(a);
  for (const char* n : {"model-00001-of-00003.safetensors", "model-00003-of-00003.safetensors"})
    std::ofstream(a / n, std::ios::binary) << std::string("\x02\0\0\0\0\0\0\0{}", 10);
  expect_early_error(sh("run -m '" + a.string() + "' -p x"), "run",
                     "a folder of safetensors shards without its model.safetensors.index.json; expected the index and "
                     "all 3 shards of model-00001-of-00003.safetensors to model-00003-of-00003.safetensors, found 2 of 3 "
                     "shards and no index (missing: model-00002-of-00003.safetensors)");
  // The fixture's checkpoint with one of its two shards left out.
  const fs::path b = dir_ / "oneshard";
  fs::create_directories(b);
  for (const char* n : {"config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors"})
    fs::create_symlink(fixture() / n, b / n);
  expect_early_error(sh("score -m '" + b.string() + "' --token-ids '" + (b / "config.json").string() + "' --logits-out '" +
                        (b / "l.f32").string() + "'"),
                     "score",
                     "1 of 2 shard(s) named in the index are missing from " + b.string() +
                         ": model-00002-of-00002.safetensors");
}

TEST_F(Preflight, EmptyBackendIsRefusedWithTheValues) {
  for (const char* cmd : {"run", "score", "bench", "serve"}) {
    auto r = sh(std::string(cmd) + " -m " + gguf() + " --backend ''");
    EXPECT_EQ(r.code, 1) << r.text;
    EXPECT_NE(r.text.find(std::string("ds4-offload ") + cmd + ": error: --backend: expected cpu, cuda or auto, found an empty string"),
              std::string::npos) << cmd << "\n" << r.text;
    EXPECT_EQ(r.text.find("loading"), std::string::npos) << r.text;
  }
  // The library's parser (ModelOptions::backend) no longer reads "" as auto.
  auto k = dev::parse_backend("");
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.error().message, "backend '': expected cpu, cuda or auto, found an empty string");
  auto w = dev::parse_backend("gpu");
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().message, "backend 'gpu': expected cpu, cuda or auto, found 'gpu'");
  EXPECT_TRUE(dev::parse_backend("cpu").ok());
}

TEST_F(Preflight, ThreadsAboveTheCapAreOneError) {
  for (const std::string cmd : {"run", "bench", "perplexity"}) {
    std::ofstream(dir_ / "t.txt") << "some text";
    const std::string extra = cmd == "run" ? " -p x" : cmd == "perplexity" ? " -f '" + (dir_ / "t.txt").string() + "'" : "";
    auto r = sh(cmd + " -m " + gguf() + extra + " -t 100000");
    expect_early_error(r, cmd, "-t/--threads: expected 0 (all) to 1024, found 100000");
    EXPECT_EQ(r.text.find("hardware threads"), std::string::npos) << "warned and refused:\n" << r.text;
  }
  // Above the core count but within the cap: one warning, though bench checks the flags before
  // its bandwidth probe and again at the load (which then fails on the plan file).
  const unsigned hw = std::thread::hardware_concurrency();
  if (hw > 0 && hw < 1024) {
    std::ofstream(dir_ / "plan.json") << "{}";
    auto b = sh("bench -m " + gguf() + " -t " + std::to_string(hw + 1) + " --plan '" + (dir_ / "plan.json").string() +
                "' -p 1 -n 2 -r 1 --probe-mib 1");
    EXPECT_EQ(b.code, 1) << b.text;
    EXPECT_EQ(count(b.text, "is more than the " + std::to_string(hw) + " hardware threads"), 1u) << b.text;
    EXPECT_NE(b.text.find("bench: loading "), std::string::npos) << b.text;  // both checks ran
  }
  auto mt = sh("make-tiny -o '" + (dir_ / "x.gguf").string() + "' -t 100000");
  EXPECT_EQ(mt.code, 1) << mt.text;
  EXPECT_NE(mt.text.find("ds4-offload make-tiny: error: -t/--threads: expected 0 (all) to 1024, found 100000"),
            std::string::npos) << mt.text;
  EXPECT_FALSE(fs::exists(dir_ / "x.gguf"));
}

TEST_F(Preflight, ContextBeyondTheModelIsRefusedFromTheHeader) {
  // 1024: max_position_embeddings of the fixture's config.json (the GGUF's context_length).
  expect_early_error(sh("run -m " + gguf() + " -p x -c 5000"), "run",
                     "-c/--ctx-size 5000: expected at most the model's context_length 1024");
  expect_early_error(sh("bench -m " + gguf() + " -c 5000 -p 1 -n 2 -r 1"), "bench",
                     "-c/--ctx-size 5000: expected at most the model's context_length 1024");
  expect_early_error(sh("serve -m " + gguf() + " --port 0 --ctx 5000"), "serve",
                     "-c/--ctx-size 5000: expected at most the model's context_length 1024");
  std::ofstream(dir_ / "ids.txt") << "0 1 2";
  expect_early_error(sh("score -m " + gguf() + " --token-ids '" + (dir_ / "ids.txt").string() + "' --logits-out '" +
                        (dir_ / "o.f32").string() + "' --ctx-size 5000"),
                     "score", "-c/--ctx-size 5000: expected at most the model's context_length 1024");
  std::ofstream(dir_ / "t.txt") << "some text";
  expect_early_error(sh("perplexity -m " + gguf() + " -f '" + (dir_ / "t.txt").string() + "' -c 5000"), "perplexity",
                     "-c/--ctx-size 5000: expected at most the model's context_length 1024");
  // The checkpoint folder's context comes from its config.json, also before the repack.
  expect_early_error(sh("bench -m '" + fixture().string() + "' -c 5000 -p 1 -n 2 -r 1"), "bench",
                     "-c/--ctx-size 5000: expected at most the model's context_length 1024");
}

TEST_F(Preflight, MissingTokenizerIsRefusedBeforeLoading) {
  // The fixture's checkpoint folder has no tokenizer.json (its GGUF has the tokenizer metadata).
  ASSERT_FALSE(fs::exists(fixture() / "tokenizer.json"));
  const std::string want = fixture().string() + ": the model has no tokenizer.ggml.* metadata (GGUF) or tokenizer.json";
  expect_early_error(sh("run -m '" + fixture().string() + "' -p x"), "run", want);
  expect_early_error(sh("chat -m '" + fixture().string() + "' < /dev/null"), "chat", want);
  expect_early_error(sh("serve -m '" + fixture().string() + "' --port 0"), "serve", want);
  std::ofstream(dir_ / "t.txt") << "some text";
  expect_early_error(sh("perplexity -m '" + fixture().string() + "' -f '" + (dir_ / "t.txt").string() + "'"),
                     "perplexity", want);
  // A malformed tokenizer.json beside a copy of the checkpoint: its error, before the repack.
  const fs::path c = dir_ / "badtok";
  fs::create_directories(c);
  for (const char* n : {"config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors",
                        "model-00002-of-00002.safetensors"})
    fs::create_symlink(fixture() / n, c / n);
  std::ofstream(c / "tokenizer.json") << "{\"model\": ";
  auto bad = sh("run -m '" + c.string() + "' -p x");
  expect_early_error(bad, "run", (c / "tokenizer.json").string());
}

TEST_F(Preflight, EmptyPerplexityFileIsRefusedBeforeLoading) {
  std::ofstream(dir_ / "empty.txt") << "";
  expect_early_error(sh("perplexity -m " + gguf() + " -f '" + (dir_ / "empty.txt").string() + "'"), "perplexity",
                     "-f/--file '" + (dir_ / "empty.txt").string() + "': expected text to score, found an empty file");
}

}  // namespace
}  // namespace ds4
