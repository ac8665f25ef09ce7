// fuzz/fuzz_json.cpp — the JSON readers of placement/: the first byte picks one (hardware profile,
// routing statistics, plan file, model config), the rest is the file. Shapes given to the readers
// are those of the dsv4-tiny model (6 layers, 16 experts, top-4).
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_input_file.h"
#include "placement/hw_profile.h"
#include "placement/model_shape.h"
#include "placement/plan_file.h"
#include "placement/routing_stats.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static ds4::fuzz::InputFile file;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 4) {
    case 0: (void)ds4::placement::parse_hw_profile(text, "fuzz.json"); break;
    case 1: (void)ds4::placement::load_routing_stats(file.set(data + 1, size - 1), 6, 16, 4); break;
    case 2: (void)ds4::placement::read_plan_file(file.set(data + 1, size - 1), 6, 16, 4); break;
    default: (void)ds4::placement::load_model_shape(file.set(data + 1, size - 1)); break;
  }
  return 0;
}
