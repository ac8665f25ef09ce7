// tests/gguf/safetensors_fuzz.cpp — libFuzzer target: parse_safetensors on arbitrary bytes
// must return a value or an Error, never crash, hang or read outside the buffer (ASan + UBSan).
// Built and run by scripts/fuzz_safetensors.sh (clang -fsanitize=fuzzer,address,undefined).
#include <cstddef>
#include <cstdint>

#include "gguf/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ds4::gguf::StShard shard;
  auto r = ds4::gguf::parse_safetensors(data, size, "fuzz.safetensors", &shard);
  if (r.ok()) {
    // Touch every tensor's first and last byte: they must lie inside the buffer.
    volatile uint8_t sink = 0;
    for (const auto& t : *r)
      if (t.nbytes) sink = sink ^ t.data[0] ^ t.data[t.nbytes - 1];
    (void)sink;
  } else if (r.error().message.empty()) {
    __builtin_trap();  // every error carries a message
  }
  return 0;
}
