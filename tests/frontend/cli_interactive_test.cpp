// tests/frontend/cli_interactive_test.cpp — `ds4-offload chat` driven through standard input
// (multi-turn state, /reset, /exit), and Ctrl-C (SIGINT) in `run` and `chat`: the first one stops
// the current generation, the summary is printed and a chat session goes on.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/support/cli_run.h"
#include "tests/support/test_env.h"

namespace ds4 {
namespace {

namespace fs = std::filesystem;

fs::path fixture_gguf() { return test::fixtures_dir() / "dsv4-tiny" / "dsv4-tiny-mxfp4.gguf"; }

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

class CliInteractive : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(fixture_gguf())) GTEST_SKIP() << "fixture not found: " << fixture_gguf();
    dir_ = test::scratch_dir(std::string("cli_interactive_") +
                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  /// Runs `chat` (greedy) with `input` on standard input; stdout in .text, stderr in *err.
  // --activations f32: the state checks compare greedy replies, and under q8 (the auto default
  // for chat) the fixture's random-weight model gives the same reply with and without history.
  test::CliOut chat(const std::string& input, const std::string& extra, std::string* err) {
    std::ofstream(dir_ / "in.txt") << input;
    // The program's stderr goes to err.txt (the shell's own, merged, stays empty).
    auto r = test::run_cli("/bin/sh",
                           "-c \"'" + std::string(DS4_OFFLOAD_EXE) + "' chat -m '" + fixture_gguf().string() +
                               "' --activations f32 --temp 0 -n 8 " + extra + " < '" + (dir_ / "in.txt").string() + "' 2> '" +
                               (dir_ / "err.txt").string() + "'\"",
                           /*merge_stderr=*/true);
    *err = slurp(dir_ / "err.txt");
    return r;
  }
  fs::path dir_;
};

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  for (std::string l; std::getline(ss, l);) v.push_back(l);
  return v;
}

// Turn 2 continues the state of turn 1 (its context count adds up, its reply differs from the
// same line in a fresh session); /reset gives the fresh-session reply again; /exit ends.
TEST_F(CliInteractive, ChatKeepsStateBetweenTurnsAndResets) {
  std::string err;
  auto fresh = chat("And the fisher?\n", "", &err);
  ASSERT_EQ(fresh.code, 0) << err;
  auto r = chat("What does the baker sell?\nAnd the fisher?\n/reset\nAnd the fisher?\n/exit\nnever read\n", "", &err);
  ASSERT_EQ(r.code, 0) << err;
  const auto out = lines_of(r.text), one = lines_of(fresh.text);
  ASSERT_EQ(out.size(), 3u) << r.text;  // three replies; the line after /exit is not read
  ASSERT_EQ(one.size(), 1u) << fresh.text;
  EXPECT_NE(out[1], one[0]) << "turn 2 did not see turn 1";
  EXPECT_EQ(out[2], one[0]) << "/reset did not clear the conversation";
  EXPECT_NE(err.find("chat: conversation cleared"), std::string::npos) << err;
  // Context counts: turn 2 starts where turn 1 ended (8 reply tokens + the closing end-of-sequence).
  long c1 = 0, c2 = 0;
  ASSERT_NE(std::sscanf(err.c_str() + err.find("turn 1:"), "turn 1: 8 reply tokens, context %ld", &c1), 0) << err;
  ASSERT_NE(std::sscanf(err.c_str() + err.find("turn 2:"), "turn 2: 8 reply tokens, context %ld", &c2), 0) << err;
  EXPECT_GT(c2, c1 + 8) << err;
  // `run -cnv` is the same command; -p is the system prompt there, as in llama.cpp.
  auto cnv = test::run_cli(DS4_OFFLOAD_EXE,
                           "run -cnv -m '" + fixture_gguf().string() + "' -p 'Be brief.' --temp 0 -n 4 < '" +
                               (dir_ / "in.txt").string() + "'",
                           /*merge_stderr=*/true);
  EXPECT_EQ(cnv.code, 0) << cnv.text;
  EXPECT_NE(cnv.text.find("chat: turn 1: 4 reply tokens"), std::string::npos) << cnv.text;
}

// A shell script: start the command in the background, wait for `ready` on its stderr, wait
// `delay` more, send SIGINT, report its exit code.
std::string interrupt_script(const std::string& cmd, const fs::path& dir, const std::string& ready, double delay) {
  const std::string err = (dir / "err.txt").string(), out = (dir / "out.txt").string();
  return "-c \"" + cmd + " > '" + out + "' 2> '" + err + "' & pid=\\$!; " +
         "for i in \\$(seq 1 300); do grep -q '" + ready + "' '" + err + "' && break; sleep 0.05; done; " +
         "sleep " + std::to_string(delay) + "; kill -INT \\$pid; wait \\$pid; echo rc=\\$?\"";
}

TEST_F(CliInteractive, RunFirstCtrlCStopsGenerationAndPrintsSummary) {
  const std::string cmd = "'" + std::string(DS4_OFFLOAD_EXE) + "' run -m '" + fixture_gguf().string() +
                          "' -p 'hello there' -n -1 --ignore-eos --temp 0";
  auto r = test::run_cli("/bin/sh", interrupt_script(cmd, dir_, "run: sampling", 0.5), /*merge_stderr=*/true);
  const std::string err = slurp(dir_ / "err.txt");
  EXPECT_NE(r.text.find("rc=0"), std::string::npos) << r.text << "\n" << err;
  EXPECT_NE(err.find("run: interrupted (Ctrl-C)"), std::string::npos) << err;
  EXPECT_NE(err.find("run: generated tokens:"), std::string::npos) << err;
  EXPECT_NE(err.find("peak memory"), std::string::npos) << err;
  EXPECT_EQ(err.find("generated tokens: 1015"), std::string::npos) << "ran to the end of the context: " << err;
}

TEST_F(CliInteractive, ChatCtrlCStopsTheReplyAndKeepsTheSession) {
  std::ofstream(dir_ / "in.txt") << "hello\nagain\n";
  const std::string cmd = "'" + std::string(DS4_OFFLOAD_EXE) + "' chat -m '" + fixture_gguf().string() +
                          "' --ignore-eos --temp 0 -n 300 < '" + (dir_ / "in.txt").string() + "'";
  auto r = test::run_cli("/bin/sh", interrupt_script(cmd, dir_, "chat: chat mode", 0.3), /*merge_stderr=*/true);
  const std::string err = slurp(dir_ / "err.txt");
  EXPECT_NE(r.text.find("rc=0"), std::string::npos) << r.text << "\n" << err;
  EXPECT_NE(err.find("chat: reply stopped (Ctrl-C)"), std::string::npos) << err;
  EXPECT_NE(err.find("chat: turn 2: 300 reply tokens"), std::string::npos) << "the session did not go on: " << err;
  EXPECT_NE(err.find("chat: 2 turns"), std::string::npos) << err;
}

}  // namespace
}  // namespace ds4
