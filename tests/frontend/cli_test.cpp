// tests/frontend/cli_test.cpp — the ds4-offload subcommands as a user runs them: score on the fixture
// GGUF against DeepSeek's reference logits, run / perplexity / make-tiny end to end, and one clear
// error per bad input.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/cli_run.h"
#include "tests/support/test_env.h"

namespace ds4 {
namespace {

namespace fs = std::filesystem;

using Out = test::CliOut;

Out sh(const std::string& args) {
  return test::run_cli(DS4_OFFLOAD_EXE, args, /*merge_stderr=*/true);
}

fs::path fixture_gguf() { return test::fixtures_dir() / "dsv4-tiny" / "dsv4-tiny-mxfp4.gguf"; }

void write(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

std::vector<float> read_f32(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::vector<float> v(fs::file_size(p) / 4);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * 4));
  return v;
}

// log-softmax of one row, in double.
std::vector<double> log_softmax(const float* x, size_t n) {
  double m = x[0];
  for (size_t i = 1; i < n; ++i) m = std::max(m, double(x[i]));
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += std::exp(double(x[i]) - m);
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = double(x[i]) - m - std::log(s);
  return out;
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(fixture_gguf())) GTEST_SKIP() << "fixture not found: " << fixture_gguf();
    dir_ = test::scratch_dir(std::string("cli_") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  fs::path dir_;
};

TEST_F(Cli, ScoreMatchesReferenceLogitsOnPromptP1) {
  std::ifstream gj(test::fixtures_dir() / "dsv4-tiny" / "goldens.json");
  auto g = nlohmann::json::parse(gj);
  const auto& p1 = g["prompts"][1];
  std::string ids;
  for (const auto& x : p1["prompt_ids"]) ids += std::to_string(x.get<int>()) + " ";
  write(dir_ / "p1.txt", ids);
  auto r = sh("score -m '" + fixture_gguf().string() + "' --token-ids '" + (dir_ / "p1.txt").string() +
              "' --logits-out '" + (dir_ / "p1.f32").string() + "'");
  ASSERT_EQ(r.code, 0) << r.text;
  EXPECT_NE(r.text.find("activations: f32 (auto: f32 for score"), std::string::npos) << r.text;
  const size_t n = p1["prompt_ids"].size(), vocab = 512;
  auto mine = read_f32(dir_ / "p1.f32");
  ASSERT_EQ(mine.size(), n * vocab) << "logits file shape";
  auto ref = read_f32(test::fixtures_dir() / "dsv4-tiny" / p1["modes"]["exact"]["prefill_logits"].get<std::string>());
  ASSERT_EQ(ref.size(), n * vocab);
  double sum = 0, mx = 0;
  size_t top1 = 0;
  for (size_t p = 0; p < n; ++p) {
    auto a = log_softmax(mine.data() + p * vocab, vocab), b = log_softmax(ref.data() + p * vocab, vocab);
    size_t am = 0, bm = 0;
    for (size_t v = 0; v < vocab; ++v) {
      double d = std::abs(a[v] - b[v]);
      sum += d;
      mx = std::max(mx, d);
      if (a[v] > a[am]) am = v;
      if (b[v] > b[bm]) bm = v;
    }
    top1 += am == bm;
  }
  const double mean = sum / double(n * vocab);
  std::printf("score p1 vs reference exact: mean |dlogprob| %.3g, max %.3g, top-1 %zu/%zu\n", mean, mx, top1, n);
  // The gate for float activations (the fixture's llama.cpp-with-F32-experts agreement).
  EXPECT_LE(mean, 1e-4);
  EXPECT_LE(mx, 1e-3);
  EXPECT_EQ(top1, n);
  // Chunked feeding gives the same logits within the same tolerance.
  auto c = sh("score -m '" + fixture_gguf().string() + "' --token-ids '" + (dir_ / "p1.txt").string() +
              "' --logits-out '" + (dir_ / "p1c.f32").string() + "' --chunk 100");
  ASSERT_EQ(c.code, 0) << c.text;
  auto chunked = read_f32(dir_ / "p1c.f32");
  ASSERT_EQ(chunked.size(), mine.size());
  double cmx = 0;
  for (size_t i = 0; i < mine.size(); ++i) cmx = std::max(cmx, double(std::abs(mine[i] - chunked[i])));
  EXPECT_LE(cmx, 1e-3) << "chunked vs one-shot max |dlogit|";
}

// `-m FOLDER` (an official safetensors checkpoint) works in the model-running commands as in
// inspect/plan (a fresh tester found score/run refusing it as "not a regular file"): in f32 mode
// its logits are the fixture GGUF's bit for bit (same weights, exactly decoded).
TEST_F(Cli, ScoreTakesACheckpointFolder) {
  const fs::path folder = test::fixtures_dir() / "dsv4-tiny";
  if (!fs::exists(folder / "config.json")) GTEST_SKIP() << "no safetensors folder in the fixture";
  write(dir_ / "ids.txt", "0 5 17 200 3 3 99 400");
  auto g = sh("score -m '" + fixture_gguf().string() + "' --token-ids '" + (dir_ / "ids.txt").string() +
              "' --logits-out '" + (dir_ / "g.f32").string() + "'");
  ASSERT_EQ(g.code, 0) << g.text;
  auto f = sh("score -m '" + folder.string() + "' --token-ids '" + (dir_ / "ids.txt").string() +
              "' --logits-out '" + (dir_ / "f.f32").string() + "'");
  ASSERT_EQ(f.code, 0) << f.text;
  auto a = read_f32(dir_ / "g.f32"), b = read_f32(dir_ / "f.f32");
  ASSERT_EQ(a.size(), size_t(8 * 512));
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  // convert -o naming one of the folder's own shards is refused (it would destroy the checkpoint).
  fs::create_directories(dir_ / "copy");
  for (const auto& e : fs::directory_iterator(folder))
    if (e.path().extension() == ".safetensors" || e.path().extension() == ".json")
      fs::copy_file(e.path(), dir_ / "copy" / e.path().filename());
  const fs::path shard = dir_ / "copy" / "model-00001-of-00002.safetensors";
  const auto before = fs::file_size(shard);
  auto c = sh("convert -m '" + (dir_ / "copy").string() + "' --to gguf -o '" + shard.string() + "'");
  EXPECT_EQ(c.code, 1) << c.text;
  EXPECT_NE(c.text.find("convert: error:"), std::string::npos) << c.text;
  EXPECT_EQ(fs::file_size(shard), before);
  // A folder that is not a checkpoint is still one clear error.
  fs::create_directories(dir_ / "empty");
  auto e = sh("score -m '" + (dir_ / "empty").string() + "' --token-ids '" + (dir_ / "ids.txt").string() +
              "' --logits-out '" + (dir_ / "e.f32").string() + "'");
  EXPECT_EQ(e.code, 1) << e.text;
  EXPECT_NE(e.text.find("score: error:"), std::string::npos) << e.text;
}

// An unknown option next to a missing required one is named first (a tester typed `score -o F`,
// llama.cpp's habit, and was told only that --logits-out is required).
TEST_F(Cli, UnknownOptionIsNamedBeforeAMissingRequiredOne) {
  const std::string m = "score -m '" + fixture_gguf().string() + "' --token-ids /dev/null ";
  auto r = sh(m + "-o x.f32");
  EXPECT_EQ(r.code, 1) << r.text;
  EXPECT_NE(r.text.find("unknown option '-o': not an option of 'score'"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("--logits-out is required"), std::string::npos) << r.text;
  auto l = sh(m + "--logits-file=x.f32");
  EXPECT_NE(l.text.find("unknown option '--logits-file=x.f32'"), std::string::npos) << l.text;
  // Known options, negative numbers and "-" are not reported as unknown.
  auto k = sh(m + "-t 1 --chunk -1");
  EXPECT_EQ(k.code, 1) << k.text;
  EXPECT_EQ(k.text.find("unknown option"), std::string::npos) << k.text;
  EXPECT_NE(k.text.find("--logits-out is required"), std::string::npos) << k.text;
  // With nothing required missing, the unknown option is named the same way (CLI11 alone printed
  // "The following arguments were not expected: out.txt -o").
  auto x = sh("run -m '" + fixture_gguf().string() + "' -p hi -n 1 -o out.txt");
  EXPECT_EQ(x.code, 1) << x.text;
  EXPECT_NE(x.text.find("unknown option '-o': not an option of 'run'"), std::string::npos) << x.text;
  // llama-bench's `-fa 1` is noted and dropped like `-fa on`.
  auto f = sh("run -m '" + fixture_gguf().string() + "' -p hi -n 1 --temp 0 -fa 1");
  EXPECT_EQ(f.code, 0) << f.text;
  EXPECT_NE(f.text.find("flash-attention switch; ignored"), std::string::npos) << f.text;
}

// `serve --api-key ""` (e.g. an unset shell variable) is refused before the model loads instead of
// serving without authentication.
TEST_F(Cli, ServeRefusesAnEmptyApiKey) {
  auto r = sh("serve -m '" + fixture_gguf().string() + "' --port 0 --api-key ''");
  EXPECT_EQ(r.code, 1) << r.text;
  EXPECT_NE(r.text.find("serve: error: --api-key: expected a non-empty key"), std::string::npos) << r.text;
}

TEST_F(Cli, ScoreRejectsBadInputs) {
  const std::string m = "-m '" + fixture_gguf().string() + "' ";
  const std::string out = " --logits-out '" + (dir_ / "o.f32").string() + "'";
  auto check = [&](const std::string& args, const std::string& needle) {
    auto r = sh(args);
    EXPECT_EQ(r.code, 1) << args << "\n" << r.text;
    EXPECT_NE(r.text.find(needle), std::string::npos) << "expected '" << needle << "' in:\n" << r.text;
    EXPECT_EQ(r.text.find("Aborted"), std::string::npos) << r.text;
  };
  write(dir_ / "bad.txt", "0 12 abc 5");
  write(dir_ / "big.txt", "0 1 512");
  write(dir_ / "neg.txt", "0 -3");
  write(dir_ / "empty.txt", " \n ");
  write(dir_ / "ok.txt", "0 1 2");
  check("score " + m + "--token-ids '" + (dir_ / "bad.txt").string() + "'" + out, "token 3: expected a non-negative integer id, found \"abc\"");
  check("score " + m + "--token-ids '" + (dir_ / "big.txt").string() + "'" + out, "id 512 is out of range");
  check("score " + m + "--token-ids '" + (dir_ / "neg.txt").string() + "'" + out, "token 2");
  check("score " + m + "--token-ids '" + (dir_ / "empty.txt").string() + "'" + out, "found none");
  // A NUL byte inside a token is shown escaped with the token's byte offset (it used to end the message).
  write(dir_ / "nul.txt", std::string("0 1\0" "2 5", 7));
  check("score " + m + "--token-ids '" + (dir_ / "nul.txt").string() + "'" + out,
        "token 2: expected a non-negative integer id, found \"1\\x002\" (at byte offset 2)");
  write(dir_ / "ctl.txt", std::string("0 \x01\xff\"\n", 6));
  check("score " + m + "--token-ids '" + (dir_ / "ctl.txt").string() + "'" + out, "found \"\\x01\\xff\\\"\" (at byte offset 2)");
  check("score " + m + "--token-ids '" + (dir_ / "missing.txt").string() + "'" + out, "file not found");
  check("score -m '" + (dir_ / "nope.gguf").string() + "' --token-ids '" + (dir_ / "ok.txt").string() + "'" + out,
        "file not found");
  check("score " + m + "--token-ids '" + (dir_ / "ok.txt").string() + "'" + out + " --activations q4", "expected auto, f32, q8 or fp8");
  write(dir_ / "notgguf.gguf", "this is not a gguf file at all, just text");
  auto r = sh("score -m '" + (dir_ / "notgguf.gguf").string() + "' --token-ids '" + (dir_ / "ok.txt").string() + "'" + out);
  EXPECT_EQ(r.code, 1) << r.text;
  EXPECT_NE(r.text.find("notgguf.gguf"), std::string::npos) << r.text;
}

TEST_F(Cli, RunStreamsTextAndPrintsFigures) {
  const std::string m = "run -m '" + fixture_gguf().string() + "' ";
  auto r = sh(m + "-p 'hello there' -n 6 --temp 0");
  ASSERT_EQ(r.code, 0) << r.text;
  for (const char* s : {"prompt tokens: 9", "prefill:", "tok/s", "decode:", "peak memory", "activations: q8 (auto: q8 for run"})
    EXPECT_NE(r.text.find(s), std::string::npos) << s << " missing in:\n" << r.text;
  // Sampling is deterministic for a seed.
  auto a = sh(m + "-p 'hello there' -n 8 --temp 0.9 --seed 5");
  auto b = sh(m + "-p 'hello there' -n 8 --temp 0.9 --seed 5");
  ASSERT_EQ(a.code, 0) << a.text;
  // The generated text sits between the "run: sampling" header line and the figures; the
  // header lines carry load times, which vary run to run.
  auto body = [](const std::string& t) {
    const size_t h = t.find("run: sampling");
    const size_t start = h == std::string::npos ? 0 : t.find('\n', h) + 1;
    return t.substr(start, t.find("\nrun: prompt tokens") - start);
  };
  EXPECT_EQ(body(a.text), body(b.text));
  auto q = sh(m + "-p 'hello' -n 2 --activations f32");
  EXPECT_EQ(q.code, 0) << q.text;
  EXPECT_NE(q.text.find("activations: f32 (as given by --activations; effective f32)"), std::string::npos) << q.text;
  // --backend: cpu and auto run on the CPU device; anything else is refused by name.
  auto c = sh(m + "-p 'hello' -n 2 --backend cpu");
  EXPECT_EQ(c.code, 0) << c.text;
  EXPECT_NE(c.text.find("backend: cpu (cpu ("), std::string::npos) << c.text;
  auto g = sh(m + "-p 'hello' -n 2 --backend cuda");
  EXPECT_EQ(g.code, 1) << g.text;
  // A CUDA build without a device and a build without CUDA (the sanitizer build) each name why.
  EXPECT_TRUE(g.text.find("backend 'cuda': expected a CUDA device, found none") != std::string::npos ||
              g.text.find("backend 'cuda': expected a build with the CUDA backend, found one built without CUDA") !=
                  std::string::npos)
      << g.text;
  // --cuda-graphs on|off: accepted everywhere (no effect on the CPU backend); another value is
  // refused naming the option and the value.
  auto go = sh(m + "-p 'hello' -n 2 --backend cpu --cuda-graphs off");
  EXPECT_EQ(go.code, 0) << go.text;
  auto gb = sh(m + "-p 'hello' -n 2 --cuda-graphs maybe");
  EXPECT_EQ(gb.code, 1) << gb.text;
  EXPECT_NE(gb.text.find("--cuda-graphs"), std::string::npos) << gb.text;
  EXPECT_NE(gb.text.find("expected on or off, found 'maybe'"), std::string::npos) << gb.text;
  // The help lists cuda (it exists) and no longer says "cpu until the CUDA backend".
  for (const char* cmd : {"run", "score"}) {
    auto h = sh(std::string(cmd) + " --help");
    EXPECT_EQ(h.code, 0) << h.text;
    EXPECT_NE(h.text.find("Compute backend: cpu, cuda"), std::string::npos) << cmd << "\n" << h.text;
    EXPECT_EQ(h.text.find("until the CUDA backend"), std::string::npos) << cmd << "\n" << h.text;
    EXPECT_NE(h.text.find("--cuda-graphs"), std::string::npos) << cmd << "\n" << h.text;
  }
}

TEST_F(Cli, RunRejectsBadInputs) {
  const std::string m = "run -m '" + fixture_gguf().string() + "' ";
  auto check = [&](const std::string& args, const std::string& needle) {
    auto r = sh(args);
    EXPECT_NE(r.code, 0) << args;
    EXPECT_NE(r.text.find(needle), std::string::npos) << "expected '" << needle << "' in:\n" << r.text;
  };
  check(m + "-p x --think", "--think needs --chat");
  check(m + "-p x --top-p 2", "--top-p");
  check(m + "-p x --temp -1", "--temp");
  check(m + "-p x -n -5", "-n/--n-predict: expected >= 0 or -1");
  check(m + "-p x -c 5000", "-c/--ctx-size 5000: expected at most the model's context_length 1024");
  check(m + "-p x -c -3", "-c/--ctx-size: expected 0");
  check(m + "-f /dev/zero", "expected a regular file, found a character device");
  check(m + "-f '" + (dir_ / "none.txt").string() + "'", "file not found");
  check(m + "-p x -f y", "excludes");
  check(m + "-n 3", "a prompt is required");
  check("run -p x", "--model");
  check(m + "-p x --experts-tier gpu", "resident");
  check(m + "-p x --tp 3", "tp=3");
  check(m + "-p x -t 100000", "expected 0 (all) to 1024");  // one OS thread each: refused, not spawned
  // A misspelt tier is named as such at any tp (was: "expected tp=1"), and with --plan as well.
  for (const char* tp : {"", "--tp 2 ", "--tp 4 "})
    check(m + "-p x " + tp + "--experts-tier gpu", "experts tier: expected resident, host or nvme, found 'gpu'");
  write(dir_ / "plan.json", "{}");
  check(m + "-p x --tp 2 --experts-tier nvme --plan '" + (dir_ / "plan.json").string() + "'",
        "and --experts-tier nvme: expected one of them");
  // An empty value (`--plan "$UNSET"`) is refused, not read as the option left out (which ran
  // without the plan, or made `plan --hw ""` profile this machine).
  check(m + "-p x --plan ''", "--plan: expected a plan file, found an empty string");
  check(m + "-p x --experts-tier ''", "--experts-tier: expected resident, host or nvme, found an empty string");
  check(m + "-p x --routing-out ''", "--routing-out: expected a file path, found an empty string");
  check("bench -m '" + fixture_gguf().string() + "' --plan ''", "--plan: expected a plan file, found an empty string");
  check("plan -m '" + fixture_gguf().string() + "' --hw '' --dry-run", "--hw: expected a hardware profile file, found an empty string");
  check("plan -m '" + fixture_gguf().string() + "' --stats '' --dry-run", "--stats: expected a routing statistics file");
  check("plan -m '" + fixture_gguf().string() + "' --json '' --dry-run", "--json: expected a file path, found an empty string");
  check(m + "-p x --top-k -5", "--top-k");
  check(m + "-p x --seed -2", "expected a non-negative integer or -1 (random)");
  check(m + "-p x --seed 18446744073709551616", "expected at most 2^64-1");
  {  // a failed write of the generated text must not exit 0 (stderr is dropped here on purpose)
    const std::string cmd = std::string("'") + DS4_OFFLOAD_EXE + "' " + m + "-p x -n 2 > /dev/full 2>/dev/null";
    EXPECT_NE(std::system(cmd.c_str()), 0) << cmd;
  }
}

// What a llama.cpp user types works: -c, -n -1, --seed -1, -f -, an empty prompt, -ngl, one error
// style and exit code, an unknown subcommand named.
// Every command that sizes a context takes llama.cpp's -c/--ctx-size (and --ctx, the older name);
// score takes -c and --plan like run.
TEST_F(Cli, EveryModelCommandTakesCtxSize) {
  for (const char* c : {"run", "chat", "score", "perplexity", "bench", "serve", "calibrate", "plan"}) {
    auto h = sh(std::string(c) + " --help");
    EXPECT_EQ(h.code, 0) << c << "\n" << h.text;
    EXPECT_NE(h.text.find("-c,--ctx-size,--ctx"), std::string::npos) << c << " --help:\n" << h.text;
  }
  for (const char* c : {"run", "chat", "score", "perplexity", "bench", "serve"}) {
    auto h = sh(std::string(c) + " --help");
    EXPECT_NE(h.text.find("--plan"), std::string::npos) << c << " --help:\n" << h.text;
  }
  const std::string m = "-m '" + fixture_gguf().string() + "' ";
  const std::string out = " --logits-out '" + (dir_ / "o.f32").string() + "'";
  write(dir_ / "ids.txt", "0 1 2");
  const std::string ids = "--token-ids '" + (dir_ / "ids.txt").string() + "'";
  // score -c N: at most N positions; --ctx is the same option.
  for (const char* flag : {"-c", "--ctx-size", "--ctx"}) {
    auto r = sh("score " + m + ids + out + " " + flag + " 2");
    EXPECT_EQ(r.code, 1) << flag << "\n" << r.text;
    EXPECT_NE(r.text.find("3 tokens exceed the context of 2 tokens (-c/--ctx-size)"), std::string::npos) << r.text;
  }
  auto ok = sh("score " + m + ids + out + " -c 3");
  ASSERT_EQ(ok.code, 0) << ok.text;
  EXPECT_EQ(fs::file_size(dir_ / "o.f32"), 3u * 512u * 4u);  // 3 positions x the fixture's vocab of 512
  // score --plan reads the plan like run: a missing file is named before loading.
  auto plan = sh("score " + m + ids + out + " --plan '" + (dir_ / "none.json").string() + "'");
  EXPECT_EQ(plan.code, 1) << plan.text;
  EXPECT_NE(plan.text.find("--plan '" + (dir_ / "none.json").string() + "': file not found"), std::string::npos)
      << plan.text;
  // run --ctx is -c; plan -c is its --ctx.
  auto run = sh("run " + m + "-p 'hello there' --ctx 16 -n 5000 --temp 0");
  ASSERT_EQ(run.code, 0) << run.text;
  EXPECT_NE(run.text.find("exceeds the context of 16 tokens: -n clamped to 7"), std::string::npos) << run.text;
  auto pl = sh("plan " + m + "-c 5000 --dry-run");
  EXPECT_EQ(pl.code, 1) << pl.text;
  EXPECT_NE(pl.text.find("-c/--ctx-size 5000 exceeds the model's context length 1024 tokens"), std::string::npos)
      << pl.text;
}

TEST_F(Cli, LlamaCppHabits) {
  const std::string m = "run -m '" + fixture_gguf().string() + "' ";
  auto has = [](const Out& r, const std::string& s) { return r.text.find(s) != std::string::npos; };
  // prompt + -n beyond -c: -n is clamped with a note; -n -1 runs to the end of the context.
  auto c = sh(m + "-p 'hello there' -c 16 -n 5000 --temp 0");
  ASSERT_EQ(c.code, 0) << c.text;
  EXPECT_TRUE(has(c, "prompt (9 tokens) + -n 5000 exceeds the context of 16 tokens: -n clamped to 7")) << c.text;
  EXPECT_TRUE(has(c, "generated tokens: 7") || has(c, "stopped at end-of-sequence")) << c.text;
  auto inf = sh(m + "-p 'hello there' -c 14 -n -1 --temp 0");
  ASSERT_EQ(inf.code, 0) << inf.text;
  EXPECT_TRUE(has(inf, "generated tokens: 5") || has(inf, "stopped at end-of-sequence")) << inf.text;
  // --seed -1: a random seed, printed so the run can be repeated.
  auto sd = sh(m + "-p x -n 2 --seed -1 --temp 0.8");
  ASSERT_EQ(sd.code, 0) << sd.text;
  EXPECT_TRUE(has(sd, "(random; --seed ")) << sd.text;
  // -f - reads standard input; an empty prompt is BOS alone.
  write(dir_ / "stdin.txt", "hello there\n");
  auto in = sh(m + "-f - -n 2 --temp 0 < '" + (dir_ / "stdin.txt").string() + "'");
  ASSERT_EQ(in.code, 0) << in.text;
  EXPECT_TRUE(has(in, "prompt tokens: 10")) << in.text;  // 9 + the newline
  auto empty = sh(m + "-p '' -n 2 --temp 0");
  ASSERT_EQ(empty.code, 0) << empty.text;
  EXPECT_TRUE(has(empty, "prompt tokens: 1")) << empty.text;
  write(dir_ / "empty.txt", "");
  auto ef = sh(m + "-f '" + (dir_ / "empty.txt").string() + "' -n 1");
  EXPECT_EQ(ef.code, 0) << ef.text;
  // -ngl is answered with what this runtime does instead.
  auto ngl = sh(m + "-p x -n 1 -ngl 99");
  ASSERT_EQ(ngl.code, 0) << ngl.text;
  EXPECT_TRUE(has(ngl, "-ngl/--n-gpu-layers 99 is not used")) << ngl.text;
  // -t above the core count warns once.
  const unsigned hw = std::thread::hardware_concurrency();
  if (hw > 0) {
    auto over = sh(m + "-p x -n 1 -t " + std::to_string(hw + 1));
    ASSERT_EQ(over.code, 0) << over.text;
    const std::string w = "is more than the " + std::to_string(hw) + " hardware threads";
    const size_t first = over.text.find(w);
    EXPECT_NE(first, std::string::npos) << over.text;
    EXPECT_EQ(over.text.find(w, first + 1), std::string::npos) << "warned twice:\n" << over.text;
  }
  // inspect -m MODEL like the other commands; bench -p 0.
  auto ins = sh("inspect -m '" + fixture_gguf().string() + "'");
  EXPECT_EQ(ins.code, 0) << ins.text;
  auto b0 = sh("bench -m '" + fixture_gguf().string() + "' -p 0 -n 3 -r 1");
  ASSERT_EQ(b0.code, 0) << b0.text;
  EXPECT_TRUE(has(b0, "tg3 @ d0")) << b0.text;
  EXPECT_FALSE(has(b0, "| pp0")) << b0.text;
  EXPECT_TRUE(has(b0, "- tiers (tg3 @ d0, backend counters, B/tok): device-resident ")) << b0.text;
  // -p beyond the context is refused from the header, before the memory probe: with a 1 TiB
  // probe buffer (which cannot be allocated here) the -p error is the one reported.
  auto bp = sh("bench -m '" + fixture_gguf().string() + "' -p 1000000 -n 2 -r 1 --probe-mib 1048576");
  EXPECT_EQ(bp.code, 1) << bp.text;
  EXPECT_TRUE(has(bp, "ds4-offload bench: error: -p 1000000 exceeds the model's context_length 1024")) << bp.text;
  EXPECT_FALSE(has(bp, "memory probe")) << bp.text;
  auto bc = sh("bench -m '" + fixture_gguf().string() + "' -c 64 -p 100 -n 2 -r 1 --probe-mib 1048576");
  EXPECT_EQ(bc.code, 1) << bc.text;
  EXPECT_TRUE(has(bc, "-p 100 exceeds the context of 64 tokens (-c)")) << bc.text;
  // An unknown subcommand is named, with the list; parse errors use the same style and code.
  auto unk = sh("runn -m x");
  EXPECT_EQ(unk.code, 1);
  EXPECT_TRUE(has(unk, "ds4-offload: error: unknown command 'runn'; expected one of: ")) << unk.text;
  EXPECT_TRUE(has(unk, "run") && has(unk, "inspect")) << unk.text;
  auto bad = sh(m + "-p x --no-such-flag");
  EXPECT_EQ(bad.code, 1) << bad.text;
  EXPECT_TRUE(has(bad, "ds4-offload run: error: ")) << bad.text;
  auto missing = sh("score --token-ids x");
  EXPECT_EQ(missing.code, 1) << missing.text;
  EXPECT_TRUE(has(missing, "ds4-offload score: error: ")) << missing.text;
}

// No input hangs or grows memory without bound: devices, FIFOs and oversized files are refused by
// name with the limit, a split set of 99,999 shards gets a capped list, JSON numbers that
// overflow name the file and the key. Each command runs under `timeout 10`: a hang fails the test.
TEST_F(Cli, InputsAreBoundedAndNonRegularFilesRefused) {
  const std::string f = "'" + fixture_gguf().string() + "'";
  auto t = [](const std::string& args) {
    return test::run_cli("timeout", "10 '" + std::string(DS4_OFFLOAD_EXE) + "' " + args, /*merge_stderr=*/true);
  };
  auto expect = [&](const std::string& args, const std::string& needle) {
    auto r = t(args);
    EXPECT_EQ(r.code, 1) << args << "\n" << r.text;  // 124 = timed out (a hang)
    EXPECT_NE(r.text.find(needle), std::string::npos) << args << "\nexpected '" << needle << "' in:\n" << r.text;
    EXPECT_LT(r.text.size(), 4000u) << args;
  };
  const fs::path fifo = dir_ / "fifo";
  ASSERT_EQ(std::system(("mkfifo '" + fifo.string() + "'").c_str()), 0);
  const std::string q = "'" + fifo.string() + "'";
  expect("run -m " + f + " -f /dev/zero", "-f/--file '/dev/zero': expected a regular file, found a character device");
  // A FIFO given to -f is read like a pipe (`-f <(cmd)`), opened without blocking: with no writer
  // it reads as empty (run: BOS only) instead of hanging.
  {
    auto r = t("run -m " + f + " -f " + q + " -n 1");
    EXPECT_EQ(r.code, 0) << r.text;  // 124 = timed out (a hang)
  }
  expect("run -m " + q + " -p x", "expected a regular file, found a FIFO (named pipe)");
  expect("inspect " + q, "expected a regular GGUF file, found a FIFO (named pipe)");
  expect("inspect /dev/zero", "expected a regular GGUF file, found a character device");
  expect("score -m " + f + " --token-ids /dev/zero --logits-out '" + (dir_ / "o.f32").string() + "'",
         "found a character device");
  {
    auto r = t("perplexity -m " + f + " -f " + q);
    EXPECT_NE(r.code, 124) << r.text;  // no hang: an empty text is an error or nothing to score
  }
  expect("plan -m " + f + " --hw /dev/zero --dry-run", "hardware profile '/dev/zero': expected a regular file");
  expect("plan -m " + f + " --stats " + q + " --dry-run", "routing statistics '" + fifo.string() + "': expected a regular file");
  expect("run -m " + f + " -p x --plan " + q, "expected a regular file, found a FIFO");
  expect("calibrate -m " + f + " --prompts /dev/zero -o '" + (dir_ / "s.json").string() + "'", "found a character device");
  // A checkpoint folder's config.json that is a FIFO (the shards linked from the fixture).
  const fs::path ck_src = test::fixtures_dir() / "dsv4-tiny";
  if (fs::exists(ck_src / "model.safetensors.index.json")) {
    const fs::path ck = dir_ / "ck";
    fs::create_directories(ck);
    for (const auto& e : fs::directory_iterator(ck_src))
      if (e.path().filename() != "config.json") fs::create_symlink(e.path(), ck / e.path().filename());
    ASSERT_EQ(std::system(("mkfifo '" + (ck / "config.json").string() + "'").c_str()), 0);
    expect("inspect --validate '" + ck.string() + "'", "config '" + (ck / "config.json").string() + "': expected a regular file, found a FIFO");
  }
  // Size limits, from the file size (a sparse file: no disk used) and from an endless stdin.
  const fs::path big = dir_ / "big.txt";
  { std::ofstream(big) << "1"; }
  fs::resize_file(big, uint64_t(300) << 20);
  expect("score -m " + f + " --token-ids '" + big.string() + "' --logits-out '" + (dir_ / "o.f32").string() + "'",
         "file is 314572800 bytes, more than the limit of 16 MiB");
  expect("perplexity -m " + f + " -f '" + big.string() + "'", "more than the limit of 64 MiB");
  expect("plan -m " + f + " --hw '" + big.string() + "' --dry-run", "more than the limit of 64 MiB");
  expect("run -m " + f + " -f - < /dev/zero", "more than the limit of 16 MiB (the input does not end)");
  // An incomplete split set of 99,999 shards: the missing list is capped.
  const fs::path shard = dir_ / "m-00001-of-99999.gguf";
  fs::copy_file(fixture_gguf(), shard);
  expect("inspect '" + shard.string() + "'", "split set of 99999 shards is incomplete: 99998 missing: ");
  expect("inspect '" + shard.string() + "'", ", ... and 99990 more");
  // JSON numbers: overflow and absurd magnitudes name the file and the key.
  std::ifstream hin(test::source_dir() / "configs" / "hw" / "1x2080ti-22g-pcie3.json");
  std::stringstream hs;
  hs << hin.rdbuf();
  const std::string hw = hs.str();
  const size_t at = hw.find("\"memory_gib\": 512");
  ASSERT_NE(at, std::string::npos);
  for (const auto& [value, needle] : {std::pair<std::string, std::string>{"1e999", "number 1e999 at line 5, column 29 (key \"memory_gib\") is out of range"},
                                      {"1e30", "numa_nodes[0]: memory_gib: expected at most 1048576 GiB (1 PiB), found 1e+30"}}) {
    std::string h = hw;
    h.replace(at, std::string("\"memory_gib\": 512").size(), "\"memory_gib\": " + value);
    write(dir_ / "hw.json", h);
    expect("plan -m " + f + " --hw '" + (dir_ / "hw.json").string() + "' --dry-run", (dir_ / "hw.json").string() + ": " + needle);
  }
}

// Fuzzer findings: a JSON value of another type where a string is expected (model config "name",
// found by fuzz_json; plan "format"/"policy") and a GGUF general.name that is not a string are
// errors naming the field, not an escaped exception or an abort.
TEST_F(Cli, WrongJsonAndMetadataTypesAreErrors) {
  const std::string f = "'" + fixture_gguf().string() + "'";
  write(dir_ / "model.json", "{\"name\": 2048, \"n_layers\": 43}");
  auto r = sh("plan --model-config '" + (dir_ / "model.json").string() + "' --quant-mix ds4-q2 --dry-run");
  EXPECT_EQ(r.code, 1) << r.text;
  EXPECT_NE(r.text.find("model.json: name: expected a string, found 2048"), std::string::npos) << r.text;
  EXPECT_EQ(r.text.find("json.exception"), std::string::npos) << r.text;
  write(dir_ / "plan.json", "{\"format\": 7}");
  auto p = sh("run -m " + f + " -p x -n 1 --plan '" + (dir_ / "plan.json").string() + "'");
  EXPECT_EQ(p.code, 1) << p.text;
  EXPECT_NE(p.text.find("format: expected a string, found 7"), std::string::npos) << p.text;
}

// Outputs that hit a write error exit non-zero and leave no partial file.
TEST_F(Cli, WriteErrorsAreReported) {
  const std::string exe = std::string("'") + DS4_OFFLOAD_EXE + "' ";
  const std::string f = "'" + fixture_gguf().string() + "'";
  for (const std::string& args : std::vector<std::string>{"bench -m " + f + " -p 4 -n 2 -r 1", "plan -m " + f + " --dry-run",
                                  "inspect " + f, "inspect --json " + f, "bench --probe --probe-mib 8",
                                  "plan --probe --probe-mem-mib 16 --probe-nvme-mib 8 --probe-h2d-mib 0 --probe-decode 0 --probe-dir '" +
                                      dir_.string() + "'"}) {
    const std::string cmd = exe + args + " > /dev/full 2>/dev/null";
    EXPECT_NE(std::system(cmd.c_str()), 0) << cmd;
  }
  write(dir_ / "t.txt", "the quick brown fox jumps over the lazy dog");
  const std::string ppl = exe + "perplexity -m " + f + " -f '" + (dir_ / "t.txt").string() + "' --ctx 16 > /dev/full 2>/dev/null";
  EXPECT_NE(std::system(ppl.c_str()), 0) << ppl;
  // A failed file write leaves neither a partial file nor a temporary one.
  write(dir_ / "ids.txt", "0 5 7");
  if (std::filesystem::exists("/dev/full")) {
    auto r = sh("score -m " + f + " --token-ids '" + (dir_ / "ids.txt").string() + "' --logits-out /dev/full");
    EXPECT_EQ(r.code, 1) << r.text;
    EXPECT_NE(r.text.find("--logits-out '/dev/full': write failed"), std::string::npos) << r.text;
  }
  auto ok = sh("score -m " + f + " --token-ids '" + (dir_ / "ids.txt").string() + "' --logits-out '" +
               (dir_ / "l.f32").string() + "'");
  ASSERT_EQ(ok.code, 0) << ok.text;
  EXPECT_EQ(std::filesystem::file_size(dir_ / "l.f32"), 3u * 512u * 4u);
  for (const auto& e : std::filesystem::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
}

// llama.cpp habits that CLI11 alone gets wrong: `-fa` (read as `-f a`), `-f` from a pipe
// (`<(cmd)`), `--logits-out -`, and chat's `/help` (sent to the model as text before).
TEST_F(Cli, LlamaCppHabitsPipesAndChatCommands) {
  const std::string f = "'" + fixture_gguf().string() + "'";
  const std::string exe = std::string("'") + DS4_OFFLOAD_EXE + "' ";
  auto fa = sh("run -m " + f + " -fa -p hi -n 2 --temp 0");
  EXPECT_EQ(fa.code, 0) << fa.text;
  EXPECT_NE(fa.text.find("-fa is llama.cpp's flash-attention switch; ignored"), std::string::npos) << fa.text;
  auto fa2 = sh("run -m " + f + " --flash-attn on -p hi -n 2 --temp 0");
  EXPECT_EQ(fa2.code, 0) << fa2.text;
  // A FIFO with a writer (what `-f <(cmd)` passes) is read up to the limit.
  const std::string fifo = (dir_ / "prompt.fifo").string();
  ASSERT_EQ(std::system(("mkfifo '" + fifo + "'").c_str()), 0);
  ASSERT_EQ(std::system(("(echo 'hello there' > '" + fifo + "') &").c_str()), 0);
  auto pf = sh("run -m " + f + " -f '" + fifo + "' -n 2 --temp 0");
  EXPECT_EQ(pf.code, 0) << pf.text;
  write(dir_ / "prompt.txt", "hello there\n");
  auto pr = sh("run -m " + f + " -f '" + (dir_ / "prompt.txt").string() + "' -n 2 --temp 0");
  auto prompt_line = [](const std::string& t) {
    const size_t a = t.find("prompt tokens: ");
    return a == std::string::npos ? std::string("(none)") : t.substr(a, t.find(',', a) - a);
  };
  EXPECT_EQ(prompt_line(pf.text), prompt_line(pr.text)) << pf.text << "\n---\n" << pr.text;
  EXPECT_NE(prompt_line(pf.text), "(none)") << pf.text;
  // --logits-out - writes the float32 logits to standard output.
  write(dir_ / "ids.txt", "0 5 7");
  const std::string bin = (dir_ / "stdout.f32").string();
  ASSERT_EQ(std::system((exe + "score -m " + f + " --token-ids '" + (dir_ / "ids.txt").string() +
                         "' --logits-out - > '" + bin + "' 2>/dev/null").c_str()), 0);
  EXPECT_EQ(fs::file_size(bin), 3u * 512u * 4u);
  EXPECT_FALSE(fs::exists(fs::current_path() / "-"));
  // chat: /help and an unknown /command are answered, not sent to the model.
  const std::string log = (dir_ / "chat.log").string();
  std::system(("printf '/help\\n/foo\\n/exit\\n' | " + exe + "chat -m " + f + " -n 2 > '" + log + "' 2>&1").c_str());
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_NE(ss.str().find("chat: commands: /help, /reset"), std::string::npos) << ss.str();
  EXPECT_NE(ss.str().find("chat: unknown command '/foo'"), std::string::npos) << ss.str();
}

// An allocation that fails inside a --tp rank thread is one clear error (exit 1, naming the rank and
// the memory), not std::terminate (exit 134), and leaves no temporary output behind. The address
// space is capped with prlimit(1): the 3-token baseline fits, 1000 positions in one call do not.
TEST_F(Cli, OutOfMemoryInATpRankIsOneError) {
  if (std::system("command -v prlimit > /dev/null 2>&1") != 0) GTEST_SKIP() << "prlimit (util-linux) not installed";
  const std::string f = "'" + fixture_gguf().string() + "'";
  write(dir_ / "ids3.txt", "0 5 7");
  std::string ids;
  for (int i = 0; i < 1000; ++i) ids += std::to_string(i % 500 + 1) + " ";
  write(dir_ / "ids1k.txt", ids);
  auto limited = [&](const std::string& ids_file, const std::string& out) {
    const std::string log = (dir_ / "oom.log").string();
    const std::string cmd = "prlimit --as=" + std::to_string(150ull << 20) + " '" + DS4_OFFLOAD_EXE + "' score -m " + f +
                            " --tp 2 -t 2 --token-ids '" + (dir_ / ids_file).string() + "' --logits-out '" +
                            (dir_ / out).string() + "' > '" + log + "' 2>&1";
    const int st = std::system(cmd.c_str());
    std::ifstream in(log);
    std::stringstream ss;
    ss << in.rdbuf();
    return std::pair<int, std::string>{WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), ss.str()};
  };
  auto base = limited("ids3.txt", "base.f32");
  if (base.first != 0) GTEST_SKIP() << "this build does not load under a 150 MiB address space (sanitizers?): " << base.second;
  auto [code, text] = limited("ids1k.txt", "big.f32");
  EXPECT_EQ(code, 1) << text;
  EXPECT_NE(text.find("error: out of memory while evaluating tensor-parallel rank"), std::string::npos) << text;
  EXPECT_NE(text.find("address-space limit 150 MiB"), std::string::npos) << text;
  EXPECT_FALSE(fs::exists(dir_ / "big.f32"));
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
}

// An output path naming an input is refused before anything is written (the model is mmapped; a
// truncated model would also be lost). Works on a copy so that a regression cannot harm the fixture.
TEST_F(Cli, OutputThatIsAnInputIsRefused) {
  const fs::path copy = dir_ / "model.gguf";
  fs::copy_file(fixture_gguf(), copy);
  const auto size = fs::file_size(copy);
  write(dir_ / "ids.txt", "0 5 7");
  const std::string c = std::string("'").append(copy.string()).append("'");
  auto expect_refused = [&](const std::string& args, const std::string& needle) {
    auto r = sh(args);
    EXPECT_EQ(r.code, 1) << args << "\n" << r.text;
    EXPECT_NE(r.text.find(needle), std::string::npos) << r.text;
    EXPECT_EQ(fs::file_size(copy), size) << "the model was modified by: " << args;
  };
  expect_refused("score -m " + c + " --token-ids '" + (dir_ / "ids.txt").string() + "' --logits-out " + c,
                 "expected a new output file");
  expect_refused("inspect " + c + " --dump token_embd.weight --out " + c, "expected a new output file");
  expect_refused("plan -m " + c + " --quant-mix ds4-q2 --dry-run --json " + c, "expected a new output file");
}

/// The generated text of a `run` output: between the sampling line and the prompt-tokens line.
std::string run_text(const std::string& t) {
  const size_t h = t.find("run: sampling");
  const size_t start = h == std::string::npos ? 0 : t.find('\n', h) + 1;
  return t.substr(start, t.find("\nrun: prompt tokens") - start);
}

// Greedy text does not depend on where the experts live nor on the rank count (DESIGN.md goal
// invariant); the run summary reports the tier's traffic and per-rank memory.
TEST_F(Cli, RunSameTextAcrossTiersAndRanks) {
  const std::string m = "run -m '" + fixture_gguf().string() + "' -p 'hello there' -n 8 --temp 0 ";
  auto text = run_text;
  auto base = sh(m);
  ASSERT_EQ(base.code, 0) << base.text;
  for (const char* extra : {"--experts-tier resident", "--experts-tier host", "--experts-tier nvme", "--tp 2", "--tp 4"}) {
    auto r = sh(m + extra);
    ASSERT_EQ(r.code, 0) << extra << "\n" << r.text;
    EXPECT_EQ(text(r.text), text(base.text)) << extra;
  }
  auto nv = sh(m + "--experts-tier nvme");
  EXPECT_NE(nv.text.find("experts: tier nvme"), std::string::npos) << nv.text;
  EXPECT_NE(nv.text.find("nvme reader:"), std::string::npos) << nv.text;
  auto t4 = sh(m + "--tp 4");
  EXPECT_NE(t4.text.find("run: rank 3: weights"), std::string::npos) << t4.text;
}

// --experts-tier at tp > 1 (was refused: "expected tp=1"): the rank threads share a store with
// every expert at the tier's home; same greedy text as tp 1 with the GGUF mapping, and the summary
// reports the tier, its NVMe reader and every rank.
TEST_F(Cli, RunExpertsTierAtTp2And4) {
  const std::string m = "run -m '" + fixture_gguf().string() + "' -p 'hello there' -n 8 --temp 0 ";
  auto text = run_text;
  auto base = sh(m);
  ASSERT_EQ(base.code, 0) << base.text;
  auto nv = sh(m + "--tp 2 --experts-tier nvme");
  ASSERT_EQ(nv.code, 0) << nv.text;
  EXPECT_EQ(text(nv.text), text(base.text));
  EXPECT_NE(nv.text.find("experts: tier nvme"), std::string::npos) << nv.text;
  EXPECT_NE(nv.text.find("nvme reader:"), std::string::npos) << nv.text;
  EXPECT_NE(nv.text.find("run: rank 1: weights"), std::string::npos) << nv.text;
  auto host = sh(m + "--tp 4 --experts-tier host");
  ASSERT_EQ(host.code, 0) << host.text;
  EXPECT_EQ(text(host.text), text(base.text));
  EXPECT_NE(host.text.find("experts: tier host"), std::string::npos) << host.text;
  EXPECT_NE(host.text.find("run: rank 3: weights"), std::string::npos) << host.text;
}

TEST_F(Cli, PerplexityOnText) {
  write(dir_ / "t.txt", "the quick brown fox jumps over the lazy dog, again and again, near the river bank.");
  auto r = sh("perplexity -m '" + fixture_gguf().string() + "' -f '" + (dir_ / "t.txt").string() + "' --ctx 32");
  ASSERT_EQ(r.code, 0) << r.text;
  double ppl = 0, nll = 0;
  auto p = r.text.rfind("perplexity: ", r.text.find("  mean NLL: "));
  ASSERT_NE(p, std::string::npos) << r.text;
  ASSERT_EQ(std::sscanf(r.text.c_str() + p, "perplexity: %lf  mean NLL: %lf", &ppl, &nll), 2) << r.text;
  EXPECT_TRUE(std::isfinite(ppl) && ppl > 1.0);
  EXPECT_NEAR(std::log(ppl), nll, 1e-4);
  auto bad = sh("perplexity -m '" + fixture_gguf().string() + "' -f '" + (dir_ / "t.txt").string() + "' --ctx 1");
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.text.find("--ctx"), std::string::npos) << bad.text;
}

TEST_F(Cli, MakeTinyThenRunChat) {
  const auto model = dir_ / "tiny.gguf";
  auto mk = sh("make-tiny -o '" + model.string() + "' --experts q8_0 --seed 3");
  ASSERT_EQ(mk.code, 0) << mk.text;
  auto r = sh("run -m '" + model.string() + "' -p 'What does the baker sell?' --chat --think -n 8 --temp 0");
  ASSERT_EQ(r.code, 0) << r.text;
  EXPECT_NE(r.text.find("chat (thinking)"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("decode:"), std::string::npos) << r.text;
  auto bad = sh("make-tiny -o '" + (dir_ / "x.gguf").string() + "' --experts q4_k");
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.text.find("--experts: expected one of"), std::string::npos) << bad.text;
  auto nodir = sh("make-tiny -o '" + (dir_ / "no/such/dir/x.gguf").string() + "' --experts q8_0");
  EXPECT_EQ(nodir.code, 1) << nodir.text;
}

// make-tiny checks -o before any work (the model takes seconds to build): /dev/null, a folder, a
// missing folder and (when not root) an unwritable folder are one error each, printed before the
// config line that starts the work; nothing is left behind.
TEST_F(Cli, MakeTinyOutputIsCheckedFirst) {
  auto check = [&](const std::string& out, const std::string& needle) {
    auto r = sh("make-tiny -o '" + out + "' --experts q8_0");
    EXPECT_EQ(r.code, 1) << out << "\n" << r.text;
    EXPECT_NE(r.text.find("ds4-offload make-tiny: error: -o/--output"), std::string::npos) << r.text;
    EXPECT_NE(r.text.find(needle), std::string::npos) << "expected '" << needle << "' in:\n" << r.text;
    EXPECT_EQ(r.text.find("make-tiny: config"), std::string::npos) << "work started before the check:\n" << r.text;
  };
  check("/dev/null", "expected a regular file path");
  check("/dev/null", "found a character device");
  check(dir_.string(), "expected a file path, found the directory");
  check((dir_ / "no" / "x.gguf").string(), "does not exist");
  if (::geteuid() != 0) {
    fs::create_directories(dir_ / "ro");
    fs::permissions(dir_ / "ro", fs::perms::owner_read | fs::perms::owner_exec);
    check((dir_ / "ro" / "x.gguf").string(), "not writable");
    fs::permissions(dir_ / "ro", fs::perms::owner_all);
  }
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename(), "ro") << "left behind: " << e.path();
}

// make-tiny --random-blocks (the built-in config, public IQ2_XXS/Q2_K mix): the file validates
// (loads, deep checks, a forward pass with finite logits), `run -n 4` exits 0 and decodes, and
// `score` over a few tokens gives finite logits of the vocabulary's width.
TEST_F(Cli, MakeTinyRandomBlocksValidatesAndRuns) {
  const auto model = dir_ / "rb.gguf";
  auto mk = sh("make-tiny -o '" + model.string() + "' --random-blocks --seed 4");
  ASSERT_EQ(mk.code, 0) << mk.text;
  EXPECT_NE(mk.text.find("random blocks"), std::string::npos) << mk.text;
  auto v = sh("inspect '" + model.string() + "' --validate");
  ASSERT_EQ(v.code, 0) << v.text;
  EXPECT_NE(v.text.find("validate: OK"), std::string::npos) << v.text;
  auto r = sh("run -m '" + model.string() + "' -p 'hello there' -n 4 --temp 0 --ignore-eos");
  ASSERT_EQ(r.code, 0) << r.text;
  EXPECT_NE(r.text.find("decode:"), std::string::npos) << r.text;
  write(dir_ / "ids.txt", "1 50 100 200 300 400\n");
  auto sc = sh("score -m '" + model.string() + "' --token-ids '" + (dir_ / "ids.txt").string() + "' --logits-out '" +
               (dir_ / "rb.f32").string() + "'");
  ASSERT_EQ(sc.code, 0) << sc.text;
  const auto logits = read_f32(dir_ / "rb.f32");
  ASSERT_FALSE(logits.empty());
  EXPECT_EQ(logits.size() % 512, 0u);  // the built-in config's vocabulary
  for (float x : logits) ASSERT_TRUE(std::isfinite(x));
}

// The names in folder `d` (sorted), to compare a folder before and after a command.
std::vector<std::string> names_in(const fs::path& d) {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(d)) v.push_back(e.path().filename().string());
  std::sort(v.begin(), v.end());
  return v;
}

// `convert` stopped by SIGINT / SIGTERM while its temporary output is partly written (the
// DS4_TEST_CONVERT_STALL hook stops after the first progress line) leaves nothing behind: neither
// the gguf FILE.tmp.PID nor the nvfp4 DIR.tmp.PID folder, nor anything under the final names.
TEST_F(Cli, ConvertInterruptedLeavesNothing) {
  const fs::path src = test::fixtures_dir() / "dsv4-tiny";
  if (!fs::exists(src / "model.safetensors.index.json")) GTEST_SKIP() << "no safetensors fixture";
  write(dir_ / "keep.txt", "x");
  const auto before = names_in(dir_);
  for (const char* sig : {"INT", "TERM"}) {
    for (const std::string to : {"gguf", "nvfp4"}) {
      const fs::path out = dir_ / (to == "gguf" ? "c.gguf" : "cn");
      auto r = test::run_cli("env", "DS4_TEST_CONVERT_STALL=1 timeout -s " + std::string(sig) + " 3 '" DS4_OFFLOAD_EXE
                                    "' convert -m '" + src.string() + "' --to " + to + " -o '" + out.string() + "'",
                             /*merge_stderr=*/true);
      EXPECT_EQ(r.code, 124) << sig << " " << to << ": " << r.text;  // timeout: the signal was sent
      // The hook was reached, so a temporary output existed when the signal came.
      EXPECT_NE(r.text.find(to == "gguf" ? "MiB written" : "wrote model-00001"), std::string::npos) << r.text;
      EXPECT_EQ(names_in(dir_), before) << sig << " " << to << ": " << r.text;
    }
  }
}

// plan --probe: SIGINT/SIGTERM while the temporary NVMe probe file exists removes it. The
// DS4_TEST_PROBE_STALL hook names the file on stderr and waits for the signal once it is created;
// the test forks the program itself (a shell's background job would ignore SIGINT) and signals it
// as soon as the line appears.
TEST_F(Cli, ProbeInterruptedLeavesNothing) {
  const fs::path probe = dir_ / "probe";
  fs::create_directories(probe);
  write(probe / "keep.txt", "x");
  const auto before = names_in(probe);
  for (const int sig : {SIGINT, SIGTERM}) {
    const fs::path log = dir_ / ("probe-" + std::to_string(sig) + ".log");
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::setenv("DS4_TEST_PROBE_STALL", "1", 1);
      std::signal(SIGINT, SIG_DFL);
      std::signal(SIGTERM, SIG_DFL);
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::execl(DS4_OFFLOAD_EXE, DS4_OFFLOAD_EXE, "plan", "--probe", "--probe-dir", probe.c_str(), "--probe-mem-mib", "16",
              "--probe-nvme-mib", "8", "--probe-h2d-mib", "0", "--probe-decode", "0", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    auto text = [&] {
      std::ifstream in(log);
      std::stringstream ss;
      ss << in.rdbuf();
      return ss.str();
    };
    const std::string want = "probe file " + probe.string() + "/ds4-probe-";
    bool reached = false;
    int st = 0;
    bool exited = false;
    for (int i = 0; i < 1200 && !reached && !exited; ++i) {  // up to 120 s (sanitizer builds, busy machine)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      reached = text().find(want) != std::string::npos;
      exited = ::waitpid(pid, &st, WNOHANG) == pid;
    }
    if (!exited) {
      ::kill(pid, sig);
      ASSERT_EQ(::waitpid(pid, &st, 0), pid);
    }
    EXPECT_TRUE(reached) << sig << ": " << text();  // the file existed when the signal came
    EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == sig) << sig << ": status " << st << "\n" << text();
    EXPECT_EQ(names_in(probe), before) << sig << ": " << text();
  }
}

// convert -o rules, the same for both targets: a non-empty folder and a missing parent folder are
// refused naming them; an empty folder is filled; the nvfp4 output appears only complete.
TEST_F(Cli, ConvertOutputRules) {
  const fs::path src = test::fixtures_dir() / "dsv4-tiny";
  if (!fs::exists(src / "model.safetensors.index.json")) GTEST_SKIP() << "no safetensors fixture";
  const std::string m = "convert -m '" + src.string() + "' ";
  fs::create_directories(dir_ / "full");
  write(dir_ / "full" / "a", "x");
  write(dir_ / "full" / "b", "y");
  auto f = sh(m + "--to nvfp4 -o '" + (dir_ / "full").string() + "'");
  EXPECT_EQ(f.code, 1) << f.text;
  EXPECT_NE(f.text.find("expected a new or empty folder, found 2 entries"), std::string::npos) << f.text;
  EXPECT_EQ(names_in(dir_ / "full"), (std::vector<std::string>{"a", "b"}));
  for (const std::string& o : {"--to nvfp4 -o '" + (dir_ / "nodir" / "x").string() + "'",
                              "--to gguf -o '" + (dir_ / "nodir" / "x.gguf").string() + "'"}) {
    auto r = sh(m + o);
    EXPECT_EQ(r.code, 1) << r.text;
    EXPECT_NE(r.text.find("does not exist"), std::string::npos) << r.text;
    EXPECT_FALSE(fs::exists(dir_ / "nodir"));
  }
  fs::create_directories(dir_ / "empty");
  auto e = sh(m + "--to nvfp4 -o '" + (dir_ / "empty").string() + "'");
  ASSERT_EQ(e.code, 0) << e.text;
  EXPECT_TRUE(fs::exists(dir_ / "empty" / "model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(dir_ / "empty" / "config.json"));
  for (const auto& n : names_in(dir_)) EXPECT_EQ(n.find(".tmp."), std::string::npos) << n;
  // audit says how many input_scale tensors it did not compare (counted here from the index).
  int n_is = 0;
  {
    std::ifstream ij(dir_ / "empty" / "model.safetensors.index.json");
    const nlohmann::json idx = nlohmann::json::parse(ij);
    for (auto it = idx.at("weight_map").begin(); it != idx.at("weight_map").end(); ++it) {
      const std::string k = it.key();
      n_is += k.size() > 12 && k.compare(k.size() - 12, 12, ".input_scale") == 0;
    }
  }
  ASSERT_GT(n_is, 0);
  auto au = sh("convert --audit '" + src.string() + "' '" + (dir_ / "empty").string() + "'");
  EXPECT_EQ(au.code, 0) << au.text;
  EXPECT_NE(au.text.find("not compared: B: " + std::to_string(n_is) + " input_scale tensors"), std::string::npos) << au.text;
  EXPECT_EQ(au.text.find("not compared: A:"), std::string::npos) << au.text;
  // Options that do not apply are refused by name.
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"--to gguf --prompts p.txt -o '" + (dir_ / "y.gguf").string() + "'", "--prompts applies only"},
      {"--to nvfp4 --experts q2_k -o '" + (dir_ / "y").string() + "'", "--experts applies only"},
      {"--to nvfp4 --prompt-ids -o '" + (dir_ / "y").string() + "'", "--prompt-ids applies only"}};
  for (const auto& [o, want] : bad) {
    auto r = sh(m + o);
    EXPECT_EQ(r.code, 1) << o << ": " << r.text;
    EXPECT_NE(r.text.find(want), std::string::npos) << o << ": " << r.text;
  }
}

// GGUF -> GGUF keeps each expert tensor's type unless --experts is given: a Q8_0-expert file
// converted without --experts has the same size and decodes bit-exactly (audit); with --experts
// mxfp4 a note says the change is lossy.
TEST_F(Cli, ConvertGgufKeepsExpertTypesByDefault) {
  const fs::path src = test::fixtures_dir() / "dsv4-tiny";
  if (!fs::exists(src / "model.safetensors.index.json")) GTEST_SKIP() << "no safetensors fixture";
  const fs::path q8 = dir_ / "q8.gguf", k = dir_ / "k.gguf", mx = dir_ / "mx.gguf";
  auto a = sh("convert -m '" + src.string() + "' --to gguf --experts q8_0 -o '" + q8.string() + "'");
  ASSERT_EQ(a.code, 0) << a.text;
  auto b = sh("convert -m '" + q8.string() + "' --to gguf -o '" + k.string() + "'");
  ASSERT_EQ(b.code, 0) << b.text;
  EXPECT_EQ(b.text.find("note:"), std::string::npos) << b.text;
  EXPECT_EQ(fs::file_size(q8), fs::file_size(k));
  auto au = sh("convert --audit '" + q8.string() + "' '" + k.string() + "'");
  EXPECT_EQ(au.code, 0) << au.text;
  auto c = sh("convert -m '" + q8.string() + "' --to gguf --experts mxfp4 -o '" + mx.string() + "'");
  ASSERT_EQ(c.code, 0) << c.text;
  EXPECT_NE(c.text.find("note: --experts mxfp4 re-quantizes"), std::string::npos) << c.text;
  EXPECT_NE(c.text.find("Q8_0 expert tensors: lossy"), std::string::npos) << c.text;
  EXPECT_NE(fs::file_size(mx), fs::file_size(q8));
}

// convert --prompts has no --activations option: its load line must not cite one.
TEST_F(Cli, ConvertCalibrationNamesNoActivationsOption) {
  const fs::path src = test::fixtures_dir() / "dsv4-tiny";
  if (!fs::exists(src / "model.safetensors.index.json")) GTEST_SKIP() << "no safetensors fixture";
  write(dir_ / "ids.txt", "1 2 3 4 5\n");
  auto r = sh("convert -m '" + src.string() + "' --to nvfp4 --prompts '" + (dir_ / "ids.txt").string() +
              "' --prompt-ids -c 8 -o '" + (dir_ / "cal").string() + "'");
  ASSERT_EQ(r.code, 0) << r.text;
  EXPECT_NE(r.text.find("convert: activations: f32 ("), std::string::npos) << r.text;
  EXPECT_EQ(r.text.find("--activations"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("calibrated on 1 prompts"), std::string::npos) << r.text;
}

// Integers in error messages print as integers, not "4096.000000": the sampler's integer options,
// make-tiny's config ranges, a hardware profile's GiB figures.
TEST_F(Cli, IntegersInMessagesPrintAsIntegers) {
  auto topk = sh("run -m '" + fixture_gguf().string() + "' -p x -n 1 --top-k -1");
  EXPECT_EQ(topk.code, 1) << topk.text;
  EXPECT_NE(topk.text.find("sampler: --top-k: expected 0 (off) or a count, found -1\n"), std::string::npos)
      << topk.text;
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(test::source_dir() / "configs/models/dsv4-tiny.json"));
  cfg["rope_theta"] = 0.5;
  write(dir_ / "cfg.json", cfg.dump());
  auto mt = sh("make-tiny -o '" + (dir_ / "t.gguf").string() + "' --config '" + (dir_ / "cfg.json").string() + "'");
  EXPECT_EQ(mt.code, 1) << mt.text;
  EXPECT_NE(mt.text.find("'rope_theta': expected a number in [1, 1000000000000], found 0.5"), std::string::npos)
      << mt.text;
  nlohmann::json hw = nlohmann::json::parse(std::ifstream(test::source_dir() / "configs/hw/1x2080ti-22g-pcie3.json"));
  hw["host"]["reserved_gib"] = 4096;
  write(dir_ / "hw.json", hw.dump());
  auto pl = sh("plan -m '" + fixture_gguf().string() + "' --hw '" + (dir_ / "hw.json").string() + "' --dry-run");
  EXPECT_EQ(pl.code, 1) << pl.text;
  EXPECT_NE(pl.text.find("host.reserved_gib: expected less than the installed memory (1024 GiB), found 4096 GiB"),
            std::string::npos)
      << pl.text;
  for (const auto& r : {topk, mt, pl}) EXPECT_EQ(r.text.find(".000000"), std::string::npos) << r.text;
}

}  // namespace
}  // namespace ds4
