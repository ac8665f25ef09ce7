// tests/support/test_env.h — where tests find fixtures, the Python oracle and scratch space.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace ds4::test {

/// Fixture root: $DS4_FIXTURES if set, else ../shared/fixtures beside the source tree.
inline std::filesystem::path fixtures_dir() {
  if (const char* e = std::getenv("DS4_FIXTURES"); e && *e) return e;
  return DS4_DEFAULT_FIXTURES;
}

/// Python interpreter with gguf + numpy: $DS4_PYTHON if set, else the project's .venv.
inline std::string python() {
  if (const char* e = std::getenv("DS4_PYTHON"); e && *e) return e;
  return DS4_DEFAULT_PYTHON;
}

/// Source tree root (for tests/…/*.py helper scripts).
inline std::filesystem::path source_dir() { return DS4_SOURCE_DIR; }

/// A fresh scratch directory under the build tree, unique per test binary + name.
inline std::filesystem::path scratch_dir(const std::string& name) {
  auto p = std::filesystem::path(DS4_BINARY_DIR) / "test-scratch" / name;
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}

}  // namespace ds4::test
