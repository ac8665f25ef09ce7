// tests/gguf/gguf_test_util.h — helpers shared by the gguf tests: a raw little-endian byte builder
// (independent of GgufWriter, so malformed files can be made field by field), CRC-32 and the
// canonical text dump that gguf_py_dump.py also produces.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/gguf_value.h"

namespace ds4::gguf::test {

/// Appends little-endian fields to a byte string.
struct Raw {
  std::string b;
  template <class T>
  Raw& put(T v) {
    b.append(reinterpret_cast<const char*>(&v), sizeof(T));
    return *this;
  }
  Raw& u8(uint8_t v) { return put(v); }
  Raw& u32(uint32_t v) { return put(v); }
  Raw& u64(uint64_t v) { return put(v); }
  Raw& str(const std::string& s) {
    u64(s.size());
    b += s;
    return *this;
  }
  Raw& bytes(size_t n, uint8_t fill = 0) {
    b.append(n, static_cast<char>(fill));
    return *this;
  }
  Raw& pad(uint64_t align) {
    while (b.size() % align) b.push_back('\0');
    return *this;
  }
};

/// CRC-32 (zlib / IEEE 802.3 polynomial, reflected), equal to Python's zlib.crc32.
inline uint32_t crc32(const void* data, uint64_t n) {
  static uint32_t table[256];
  static bool init = false;
  if (!init) {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      table[i] = c;
    }
    init = true;
  }
  uint32_t c = 0xFFFFFFFFu;
  const auto* p = static_cast<const uint8_t*>(data);
  for (uint64_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

inline std::string hex_bytes(const std::string& s) {
  if (s.empty()) return "-";
  std::string r;
  char buf[3];
  for (unsigned char c : s) {
    std::snprintf(buf, sizeof buf, "%02x", c);
    r += buf;
  }
  return r;
}

inline std::string f64_bits(double d) {
  // Python's struct.pack('<d', x).hex(): little-endian byte order.
  std::string s(8, '\0');
  std::memcpy(s.data(), &d, 8);
  return "f" + hex_bytes(s);
}

/// The dump line of one key/value pair (format documented in gguf_py_dump.py).
inline std::string dump_kv(int shard, const std::string& key, const Value& v) {
  auto scalar = [](ValueType t, uint64_t u, int64_t i, double f, bool b, const std::string& s) {
    if (is_unsigned_type(t)) return std::to_string(u);
    if (is_signed_type(t)) return std::to_string(i);
    if (t == ValueType::FLOAT32 || t == ValueType::FLOAT64) return f64_bits(f);
    if (t == ValueType::BOOL) return std::string(b ? "1" : "0");
    return hex_bytes(s);
  };
  std::string line = "kv " + std::to_string(shard) + " " + key + " " + value_type_name(v.type) + " ";
  if (v.type != ValueType::ARRAY) return line + scalar(v.type, v.u, v.i, v.f, v.b, v.s);
  const size_t n = v.array_size();
  line += value_type_name(v.array_type) + " " + std::to_string(n) + " ";
  if (n == 0) return line + "-";
  for (size_t k = 0; k < n; ++k) {
    if (k) line += ",";
    const ValueType t = v.array_type;
    line += scalar(t, is_unsigned_type(t) ? v.arr_u[k] : 0, is_signed_type(t) ? v.arr_i[k] : 0,
                   (t == ValueType::FLOAT32 || t == ValueType::FLOAT64) ? v.arr_f[k] : 0,
                   t == ValueType::BOOL ? v.arr_b[k] != 0 : false,
                   t == ValueType::STRING ? v.arr_s[k] : std::string());
  }
  return line;
}

/// The dump line of one tensor; `file_offset` < 0 leaves the offset out.
inline std::string dump_tensor(const std::string& name, uint32_t type, const std::vector<int64_t>& ne,
                               uint64_t nbytes, uint32_t crc, int64_t file_offset = -1) {
  char c[16];
  std::snprintf(c, sizeof c, "%08x", crc);
  std::string dims;
  for (size_t k = 0; k < ne.size(); ++k) dims += (k ? "," : "") + std::to_string(ne[k]);
  std::string line = "tensor " + name + " " + std::to_string(type) + " " + dims + " " +
                     std::to_string(nbytes) + " " + c;
  if (file_offset >= 0) line += " " + std::to_string(file_offset);
  return line;
}

/// Dump of a model as read by our reader: every shard's key/value pairs, then all tensors.
inline std::vector<std::string> dump_model(const GgufModel& m, bool offsets) {
  std::vector<std::string> out;
  for (size_t s = 0; s < m.shards().size(); ++s) {
    for (const auto& [k, v] : m.shards()[s].metadata.entries()) out.push_back(dump_kv(int(s), k, v));
    for (const auto& t : m.tensors()) {
      if (t.shard != int(s)) continue;
      std::vector<int64_t> ne(t.ne.begin(), t.ne.begin() + t.n_dims);
      out.push_back(dump_tensor(t.name, t.type, ne, t.nbytes, crc32(t.data, t.nbytes),
                                offsets ? int64_t(t.file_offset) : -1));
    }
  }
  return out;
}

inline std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> r;
  std::string line;
  while (std::getline(f, line))
    if (!line.empty()) r.push_back(line);
  return r;
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace ds4::gguf::test
