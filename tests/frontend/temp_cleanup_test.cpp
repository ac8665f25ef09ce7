// tests/frontend/temp_cleanup_test.cpp — engine/cli/temp_cleanup: a forked child registers a
// temporary folder (with files in it) and a file, gets SIGINT or SIGTERM, and must die by that
// signal with both paths gone; a path forgotten with temp_cleanup_remove must survive.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>

#include <sys/wait.h>
#include <unistd.h>

#include "engine/cli/temp_cleanup.h"

namespace {

namespace fs = std::filesystem;

fs::path scratch(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("ds4_temp_cleanup_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

/// Forks; the child registers paths under `root`, then raises `sig`. Returns the wait status.
int child_raises(const fs::path& root, int sig) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::signal(SIGINT, SIG_DFL);  // a test runner started in the background may ignore SIGINT
    std::signal(SIGTERM, SIG_DFL);
    const fs::path dir = root / "probe-XXXX";
    fs::create_directories(dir);
    for (const char* f : {"a.gguf", "b.gguf.tmp"}) std::ofstream(dir / f) << "data";
    ds4::cli::temp_cleanup_add(dir.string(), true);
    std::ofstream(root / "single.tmp") << "x";
    ds4::cli::temp_cleanup_add((root / "single.tmp").string(), false);
    std::ofstream(root / "kept.tmp") << "x";
    const int kept = ds4::cli::temp_cleanup_add((root / "kept.tmp").string(), false);
    ds4::cli::temp_cleanup_remove(kept);
    ::raise(sig);
    ::_exit(3);  // not reached when the handler re-raises with the default action
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

TEST(TempCleanup, SignalRemovesRegisteredPathsAndReRaises) {
  for (int sig : {SIGINT, SIGTERM}) {
    const fs::path root = scratch(std::to_string(sig));
    const int status = child_raises(root, sig);
    ASSERT_TRUE(WIFSIGNALED(status)) << "signal " << sig << " status " << status;
    EXPECT_EQ(WTERMSIG(status), sig);
    EXPECT_FALSE(fs::exists(root / "probe-XXXX")) << sig;
    EXPECT_FALSE(fs::exists(root / "single.tmp")) << sig;
    EXPECT_TRUE(fs::exists(root / "kept.tmp")) << sig;  // forgotten before the signal
    fs::remove_all(root);
  }
}

TEST(TempCleanup, OverlongPathIsNotRegistered) {
  EXPECT_EQ(ds4::cli::temp_cleanup_add(std::string(5000, 'a'), false), -1);
}

}  // namespace
