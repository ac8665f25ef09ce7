// tests/staging/staging_fixture.h — GGUF files with routed-expert tensors for the staging tests,
// written by gguf::GgufWriter: layer 0 in Q8_0 (row 68/102 bytes, not block-size multiples),
// layer 1 in F16, 8 experts, dim 64, ff 96, random bytes. With `pad_gib` > 0 an all-zero tensor
// of that many GiB comes first (a hole in a sparse file) so the expert data lies above 4 GiB.
#pragma once

#include <cstdint>
#include <string>

namespace ds4::test {

inline constexpr int kFxLayers = 2, kFxExperts = 8, kFxDim = 64, kFxFf = 96;

/// Writes the model to `path`; returns an error message or "" on success.
std::string write_expert_gguf(const std::string& path, uint64_t pad_gib, uint64_t seed = 1);

}  // namespace ds4::test
