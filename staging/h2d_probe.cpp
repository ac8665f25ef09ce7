// staging/h2d_probe.cpp — the CPU-only build's probe_h2d: there is no device to copy to. The CUDA
// build compiles staging/cuda/h2d_probe_cuda.cpp instead (staging/CMakeLists.txt).
#ifndef DS4_HAVE_CUDA
#include "staging/h2d_probe.h"

namespace ds4::staging {

bool h2d_probe_available() { return false; }

std::string h2d_probe_unavailable_reason() { return "this build has no CUDA backend"; }

Result<H2dProbeResult> probe_h2d(const H2dProbeOptions&) {
  return Error{"H2D probe: expected a CUDA GPU, found a build without CUDA"};
}

}  // namespace ds4::staging
#endif
