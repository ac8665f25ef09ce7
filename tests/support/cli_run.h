// tests/support/cli_run.h — runs the ds4-offload program from a CLI test and captures its output.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace ds4::test {

/// Exit code (-1 when the shell could not run it or it died of a signal) and captured output.
struct CliOut {
  int code = -1;
  std::string text;
};

/// Runs `'exe' args` through the shell; captures stdout, plus stderr when `merge_stderr` (else
/// stderr is discarded). `args` is shell text: quote paths.
inline CliOut run_cli(const std::string& exe, const std::string& args, bool merge_stderr) {
  const std::string cmd = "'" + exe + "' " + args + (merge_stderr ? " 2>&1" : " 2>/dev/null");
  CliOut o;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return o;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) o.text.append(buf, n);
  const int st = pclose(p);
  o.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return o;
}

}  // namespace ds4::test
