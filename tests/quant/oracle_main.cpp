// tests/quant/oracle_main.cpp — main of quant_oracle_test: exits 77 (ctest: skipped) when the
// gguf-py venv (DS4_PYTHON or .venv) is missing, else runs the GoogleTest cases.
#include <cstdio>

#include <gtest/gtest.h>

#include "tests/quant/quant_test_util.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (!ds4::test::oracle_available()) {
    std::fprintf(stderr, "quant_oracle_test: no Python with gguf + numpy at %s: skipped\n",
                 ds4::test::python().c_str());
    return 77;
  }
  return RUN_ALL_TESTS();
}
