// fuzz/fuzz_safetensors.cpp — the safetensors reader (gguf/safetensors.h) and the official
// checkpoint binder on arbitrary bytes. The first input byte selects the entry point:
//   0 (and any even byte): parse_safetensors on the rest, in memory; every tensor's first and
//     last byte is read (they must lie inside the buffer) and every error must carry a message;
//   odd: a checkpoint folder written to a scratch directory from the rest, laid out as
//     [u16 n][config.json: n bytes][u16 m][model.safetensors.index.json: m bytes, none when m = 0]
//     [the shard: model-00001-of-00001.safetensors with an index, else model.safetensors]
//     (lengths little-endian, cut at the input's end), then SafetensorsCheckpoint::open on the
//     folder and, when it opens, open_official_checkpoint (config.json keys, name binding, dtype
//     and scale checks, the FP8/FP4/NVFP4 repacks).
// Any crash, sanitizer report, or allocation beyond -rss_limit_mb is a bug.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include "engine/official_checkpoint.h"
#include "gguf/safetensors.h"

namespace {

namespace fs = std::filesystem;

void write_file(const fs::path& p, const uint8_t* data, size_t n) {
  std::FILE* f = std::fopen(p.c_str(), "wb");
  if (!f) __builtin_trap();
  if (n && std::fwrite(data, 1, n, f) != n) __builtin_trap();
  std::fclose(f);
}

/// Takes a u16 length and that many bytes (fewer at the end of the input).
std::pair<const uint8_t*, size_t> take(const uint8_t*& p, const uint8_t* end) {
  size_t n = 0;
  if (end - p >= 2) {
    n = size_t(p[0]) | size_t(p[1]) << 8;
    p += 2;
  } else {
    p = end;
  }
  n = std::min(n, size_t(end - p));
  const uint8_t* s = p;
  p += n;
  return {s, n};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const uint8_t* p = data + 1;
  const uint8_t* end = data + size;
  if (mode % 2 == 0) {
    ds4::gguf::StShard shard;
    auto r = ds4::gguf::parse_safetensors(p, uint64_t(end - p), "fuzz.safetensors", &shard);
    if (r.ok()) {
      volatile uint8_t sink = 0;
      for (const auto& t : *r)
        if (t.nbytes) sink = sink ^ t.data[0] ^ t.data[t.nbytes - 1];
      (void)sink;
    } else if (r.error().message.empty()) {
      __builtin_trap();  // every error carries a message
    }
    return 0;
  }
  static const fs::path dir = [] {
    const fs::path d = fs::temp_directory_path() / ("ds4-fuzz-st-" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
  }();
  std::error_code ec;
  for (const char* n : {"config.json", "model.safetensors.index.json", "model.safetensors", "model-00001-of-00001.safetensors"})
    fs::remove(dir / n, ec);
  const auto [cfg, ncfg] = take(p, end);
  const auto [idx, nidx] = take(p, end);
  write_file(dir / "config.json", cfg, ncfg);
  if (nidx) write_file(dir / "model.safetensors.index.json", idx, nidx);
  write_file(dir / (nidx ? "model-00001-of-00001.safetensors" : "model.safetensors"), p, size_t(end - p));
  auto ck = ds4::gguf::SafetensorsCheckpoint::open(dir.string());
  if (!ck) {
    if (ck.error().message.empty()) __builtin_trap();
    return 0;
  }
  volatile uint8_t sink = 0;
  for (const auto& t : ck->tensors())
    if (t.nbytes) sink = sink ^ t.data[0] ^ t.data[t.nbytes - 1];
  (void)sink;
  auto v = ds4::open_official_checkpoint(dir.string());
  if (!v && v.error().message.empty()) __builtin_trap();
  return 0;
}
