// gguf/safetensors_writer.cpp — see safetensors_writer.h.
#include "gguf/safetensors_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

namespace ds4::gguf {

std::string safetensors_header(const std::vector<StWriteTensor>& tensors, const std::map<std::string, std::string>& metadata) {
  // nlohmann's ordered_json keeps insertion order (readers do not depend on it; humans do).
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    h["__metadata__"] = m;
  }
  uint64_t at = 0;
  for (const auto& t : tensors) {
    h[t.name] = {{"dtype", std::string(st_dtype_name(t.dtype))}, {"shape", t.shape}, {"data_offsets", {at, at + t.nbytes}}};
    at += t.nbytes;
  }
  return h.dump();
}

Result<void> write_safetensors(const std::string& path, const std::vector<StWriteTensor>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  std::set<std::string> names;
  for (const auto& t : tensors) {
    uint64_t n = uint64_t(st_dtype_bytes(t.dtype));
    for (int64_t d : t.shape) n *= uint64_t(d);
    if (n != t.nbytes)
      return Error{path + ": tensor '" + t.name + "': " + std::to_string(t.nbytes) + " bytes given; expected " + std::to_string(n) +
                   " (shape x " + std::string(st_dtype_name(t.dtype)) + ")"};
    if (!names.insert(t.name).second) return Error{path + ": tensor '" + t.name + "' given twice"};
  }
  std::string h = safetensors_header(tensors, metadata);
  while (h.size() % 8) h.push_back(' ');
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return Error{path + ": cannot create: " + std::strerror(errno)};
  const uint64_t n = h.size();
  bool good = std::fwrite(&n, 8, 1, f) == 1 && std::fwrite(h.data(), 1, h.size(), f) == h.size();
  for (const auto& t : tensors)
    if (good && t.nbytes) good = std::fwrite(t.data, 1, t.nbytes, f) == t.nbytes;
  const int e = errno;
  if (std::fclose(f) != 0 || !good) return Error{path + ": write failed: " + std::strerror(e)};
  return ok();
}

}  // namespace ds4::gguf
