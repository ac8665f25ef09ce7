// fuzz/fuzz_gguf.cpp — GgufModel::open (header, key/values, tensor infos, layout checks) on
// arbitrary bytes; when it opens, the deepseek4 config check (model_config_from_gguf), the deep
// data checks and the planner's reader (placement/gguf_sizes.h) run too. Any crash, sanitizer
// report, or allocation beyond -rss_limit_mb is a bug.
#include <cstddef>
#include <cstdint>

#include "engine/model_config.h"
#include "fuzz/fuzz_input_file.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_validate.h"
#include "placement/gguf_sizes.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static ds4::fuzz::InputFile file;
  const std::string path = file.set(data, size);
  auto m = ds4::gguf::GgufModel::open(path);
  if (!m) return 0;
  for (const auto& t : m->tensors()) (void)ds4::gguf::check_tensor_data(t);
  auto c = ds4::model_config_from_gguf(m->metadata(), m->tensors(), path);
  (void)c;
  auto p = ds4::placement::plan_model_from_gguf(*m);  // `plan -m`'s reader of the same keys
  (void)p;
  return 0;
}
