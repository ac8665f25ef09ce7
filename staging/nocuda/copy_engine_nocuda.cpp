// staging/nocuda/copy_engine_nocuda.cpp — make_cuda_copy_engine of a build without CUDA: reports
// that the engine is unavailable. Its own file (added by staging/CMakeLists.txt only when the build
// has no CUDA) so that a test binary linking the CUDA copy engine compiled against the CUDA
// emulation (tests/cuda_engine) does not also pull this definition out of libds4_staging.a.
#include <string>

#include "staging/copy_engine.h"

namespace ds4::staging {

Result<std::unique_ptr<CopyEngine>> make_cuda_copy_engine(int device) {
  return Error{"CUDA copy engine for device " + std::to_string(device) + ": this build has no CUDA (DS4_CUDA=OFF)"};
}

}  // namespace ds4::staging
