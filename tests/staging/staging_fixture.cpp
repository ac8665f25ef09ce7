// tests/staging/staging_fixture.cpp — see staging_fixture.h.
#include "staging_fixture.h"

#include <random>
#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "kernels/quant/ggml_type.h"

namespace ds4::test {

std::string write_expert_gguf(const std::string& path, uint64_t pad_gib, uint64_t seed) {
  gguf::GgufWriter w;
  w.metadata().set("general.architecture", gguf::Value::make_string("staging-test"));
  std::mt19937_64 rng(seed);
  if (pad_gib > 0) {
    auto r = w.add_tensor_zero("pad", uint32_t(GgmlType::I8), {int64_t(1) << 30, int64_t(pad_gib)});
    if (!r) return r.error().message;
  }
  const char* names[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
  for (int l = 0; l < kFxLayers; ++l) {
    const GgmlType t = l == 0 ? GgmlType::Q8_0 : GgmlType::F16;
    for (int p = 0; p < 3; ++p) {
      const int64_t in = p == 2 ? kFxFf : kFxDim, out = p == 2 ? kFxDim : kFxFf;
      std::vector<int64_t> ne{in, out, kFxExperts};
      auto nb = gguf::tensor_nbytes(uint32_t(t), {in, out, kFxExperts, 1});
      if (!nb) return nb.error().message;
      std::vector<uint8_t> bytes(*nb);
      for (auto& b : bytes) b = static_cast<uint8_t>(rng());
      auto r = w.add_tensor("blk." + std::to_string(l) + "." + names[p] + ".weight", uint32_t(t), ne, bytes.data(),
                            bytes.size());
      if (!r) return r.error().message;
    }
  }
  auto r = w.write(path);
  return r ? std::string() : r.error().message;
}

}  // namespace ds4::test
