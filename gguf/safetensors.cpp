// gguf/safetensors.cpp — see safetensors.h. Format: huggingface/safetensors (8-byte LE header
// length, JSON header, data section fully covered by the tensors' data_offsets); sharding by
// transformers' `model.safetensors.index.json` (`weight_map`).
#include "gguf/safetensors.h"
#include "ds4/json_depth.h"
#include "ds4/mapped_files.h"
#include "gguf/safetensors_shards.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

static_assert(std::endian::native == std::endian::little, "the safetensors reader assumes a little-endian host");

namespace ds4::gguf {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct DtypeRow {
  StDtype t;
  std::string_view name;
  int bytes;
};
constexpr DtypeRow kDtypes[] = {
    {StDtype::BOOL, "BOOL", 1},     {StDtype::U8, "U8", 1},          {StDtype::I8, "I8", 1},
    {StDtype::I16, "I16", 2},       {StDtype::U16, "U16", 2},        {StDtype::F16, "F16", 2},
    {StDtype::BF16, "BF16", 2},     {StDtype::I32, "I32", 4},        {StDtype::U32, "U32", 4},
    {StDtype::F32, "F32", 4},       {StDtype::F64, "F64", 8},        {StDtype::I64, "I64", 8},
    {StDtype::U64, "U64", 8},       {StDtype::F8_E4M3, "F8_E4M3", 1}, {StDtype::F8_E5M2, "F8_E5M2", 1},
    {StDtype::F8_E8M0, "F8_E8M0", 1},
};

constexpr int kMaxJsonDepth = kMaxJsonFileDepth;

/// Parses JSON text; Error "<path>: <what> JSON malformed: <parser message>".
Result<json> parse_json(const char* s, uint64_t n, const std::string& path, const char* what) {
  if (json_depth(std::string_view(s, size_t(n)), kMaxJsonDepth) > kMaxJsonDepth)
    return Error{path + ": " + what + " JSON nests deeper than " + std::to_string(kMaxJsonDepth) +
                 " levels; expected a flat object"};
  // A key repeated in the top-level object (two tensors of one name in a header) would silently
  // keep the last one (nlohmann's rule), and the lost one's bytes read as a hole: named instead.
  std::set<std::string> keys;
  std::string dup;
  auto cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::key && depth == 1 && parsed.is_string() && dup.empty() &&
        !keys.insert(parsed.get<std::string>()).second)
      dup = parsed.get<std::string>();
    return true;
  };
  try {
    json j = json::parse(s, s + n, cb);
    if (!dup.empty())
      return Error{path + ": " + what + " JSON names '" + dup.substr(0, 200) +
                   "' twice; expected each tensor (key) once"};
    return j;
  } catch (const json::exception& e) {
    return Error{path + ": " + what + " JSON malformed: " + e.what()};
  }
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

}  // namespace

std::string_view st_dtype_name(StDtype t) {
  for (const auto& r : kDtypes)
    if (r.t == t) return r.name;
  return "unknown";
}

int st_dtype_bytes(StDtype t) {
  for (const auto& r : kDtypes)
    if (r.t == t) return r.bytes;
  return 0;
}

bool parse_st_dtype(std::string_view s, StDtype* out) {
  for (const auto& r : kDtypes)
    if (r.name == s) {
      *out = r.t;
      return true;
    }
  return false;
}

int64_t StTensor::nelements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Result<std::vector<StTensor>> parse_safetensors(const uint8_t* bytes, uint64_t size, const std::string& path,
                                                StShard* shard) {
  shard->path = path;
  shard->file_size = size;
  if (size < 8)
    return Error{path + ": file is " + std::to_string(size) + " bytes; expected at least 8 (the safetensors header length)"};
  uint64_t n = 0;
  std::memcpy(&n, bytes, 8);
  if (n > kMaxSafetensorsHeader)
    return Error{path + ": header length " + std::to_string(n) + " bytes; expected at most " +
                 std::to_string(kMaxSafetensorsHeader) + " (not a safetensors file?)"};
  if (n > size - 8)
    return Error{path + ": header length " + std::to_string(n) + " bytes reaches beyond the file (" +
                 std::to_string(size) + " bytes; expected at most " + std::to_string(size - 8) + ")"};
  shard->header_size = n;
  DS4_TRY(json h, parse_json(reinterpret_cast<const char*>(bytes + 8), n, path, "header"));
  if (!h.is_object())
    return Error{path + ": header JSON is " + std::string(h.type_name()) + "; expected an object of tensors"};
  const uint64_t data_start = 8 + n, data_size = size - data_start;
  std::vector<StTensor> out;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object())
        return Error{path + ": '__metadata__' is " + std::string(v.type_name()) + "; expected an object of strings"};
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m->is_string())
          return Error{path + ": '__metadata__' key '" + m.key() + "' is " + std::string(m->type_name()) +
                       "; expected a string"};
        shard->metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    const std::string where = path + ": tensor '" + name + "': ";
    if (!v.is_object())
      return Error{where + "entry is " + std::string(v.type_name()) + "; expected an object {dtype, shape, data_offsets}"};
    for (const char* k : {"dtype", "shape", "data_offsets"})
      if (!v.contains(k)) return Error{where + "expected key '" + k + "', found none"};
    StTensor t;
    t.name = name;
    if (!v["dtype"].is_string())
      return Error{where + "dtype is " + std::string(v["dtype"].type_name()) + "; expected a string"};
    const std::string dt = v["dtype"].get<std::string>();
    if (!parse_st_dtype(dt, &t.dtype))
      return Error{where + "unknown dtype '" + dt +
                   "'; expected one of BOOL U8 I8 I16 U16 F16 BF16 I32 U32 F32 F64 I64 U64 F8_E4M3 F8_E5M2 F8_E8M0"};
    const json& sh = v["shape"];
    if (!sh.is_array()) return Error{where + "shape is " + std::string(sh.type_name()) + "; expected an array"};
    uint64_t count = 1;
    for (const json& d : sh) {
      if (!d.is_number_unsigned())
        return Error{where + "shape entry " + d.dump() + "; expected a non-negative integer"};
      const uint64_t dv = d.get<uint64_t>();
      if (dv > uint64_t(INT64_MAX) || __builtin_mul_overflow(count, dv, &count))
        return Error{where + "shape " + sh.dump() + ": element count overflows 64 bits"};
      t.shape.push_back(static_cast<int64_t>(dv));
    }
    if (__builtin_mul_overflow(count, uint64_t(st_dtype_bytes(t.dtype)), &t.nbytes))
      return Error{where + "shape " + sh.dump() + " x " + dt + ": byte count overflows 64 bits"};
    const json& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      return Error{where + "data_offsets " + off.dump() + "; expected two non-negative integers [begin, end]"};
    const uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
    if (b > e)
      return Error{where + "data_offsets [" + std::to_string(b) + ", " + std::to_string(e) +
                   "] out of order; expected begin <= end"};
    if (e > data_size)
      return Error{where + "data_offsets end " + std::to_string(e) + " lies outside the file (data section is " +
                   std::to_string(data_size) + " bytes after the " + std::to_string(n) + "-byte header)"};
    if (e - b != t.nbytes)
      return Error{where + "data_offsets span " + std::to_string(e - b) + " bytes; expected " +
                   std::to_string(t.nbytes) + " (shape " + shape_str(t.shape) + " x " + dt + " " +
                   std::to_string(st_dtype_bytes(t.dtype)) + " bytes)"};
    t.file_offset = data_start + b;
    t.data = bytes + t.file_offset;
    out.push_back(std::move(t));
  }
  // Overlaps and holes: sorted by begin, each tensor starts where the previous ended, and the last
  // ends at the end of the file (the reference implementation's rule: the data section is
  // entirely indexed).
  std::vector<const StTensor*> by_off;
  for (const auto& t : out) by_off.push_back(&t);
  std::sort(by_off.begin(), by_off.end(), [](const StTensor* a, const StTensor* b) {
    return a->file_offset != b->file_offset ? a->file_offset < b->file_offset : a->nbytes < b->nbytes;
  });
  uint64_t at = data_start;
  const StTensor* prev = nullptr;
  for (const StTensor* t : by_off) {
    if (t->file_offset < at)
      return Error{path + ": tensor '" + t->name + "' (bytes " + std::to_string(t->file_offset - data_start) + ".." +
                   std::to_string(t->file_offset - data_start + t->nbytes) + ") overlaps tensor '" + prev->name +
                   "' (ending at " + std::to_string(at - data_start) + ")"};
    if (t->file_offset > at)
      return Error{path + ": " + std::to_string(t->file_offset - at) + " unindexed bytes before tensor '" + t->name +
                   "' (data offset " + std::to_string(at - data_start) + "); expected tensors to cover the data section without holes"};
    at = t->file_offset + t->nbytes;
    prev = t;
  }
  if (at != size)
    return Error{path + ": " + std::to_string(size - at) + " bytes after the last tensor; expected the file to end at " +
                 std::to_string(at)};
  return out;
}

// ---- checkpoint --------------------------------------------------------------------------------

struct SafetensorsCheckpoint::Mapping {
  void* addr = nullptr;
  uint64_t size = 0;
  ~Mapping() {
    if (addr) {
      mapped_files::remove(addr);  // its SIGBUS report (common/ds4/mapped_files.h)
      munmap(addr, size);
    }
  }
};

SafetensorsCheckpoint::SafetensorsCheckpoint() = default;
SafetensorsCheckpoint::SafetensorsCheckpoint(SafetensorsCheckpoint&&) noexcept = default;
SafetensorsCheckpoint& SafetensorsCheckpoint::operator=(SafetensorsCheckpoint&&) noexcept = default;
SafetensorsCheckpoint::~SafetensorsCheckpoint() = default;

const StTensor* SafetensorsCheckpoint::find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

uint64_t SafetensorsCheckpoint::total_bytes() const {
  uint64_t s = 0;
  for (const auto& t : tensors_) s += t.nbytes;
  return s;
}

namespace {

bool ends_with(const std::string& s, std::string_view suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

Result<std::string> read_small_file(const std::string& path, uint64_t limit) {
  std::error_code ec;
  const auto sz = fs::file_size(path, ec);
  if (ec) return Error{path + ": cannot read: " + ec.message()};
  if (sz > limit)
    return Error{path + ": " + std::to_string(sz) + " bytes; expected at most " + std::to_string(limit)};
  std::ifstream f(path, std::ios::binary);
  std::string s(sz, '\0');
  if (!f.read(s.data(), static_cast<std::streamsize>(sz))) return Error{path + ": read failed"};
  return s;
}

}  // namespace

Result<SafetensorsIndex> read_safetensors_index(const std::string& index_path) {
  SafetensorsIndex r;
  r.path = index_path;
  r.folder = fs::path(index_path).parent_path().string();
  if (r.folder.empty()) r.folder = ".";
  DS4_TRY(std::string text, read_small_file(index_path, kMaxSafetensorsHeader));
  DS4_TRY(json idx, parse_json(text.data(), text.size(), index_path, "index"));
  if (!idx.is_object() || !idx.contains("weight_map") || !idx["weight_map"].is_object())
    return Error{index_path + ": expected an object with a 'weight_map' object (tensor -> shard file), found " +
                 std::string(idx.is_object() ? "no weight_map object" : idx.type_name())};
  std::set<std::string> seen;
  for (auto it = idx["weight_map"].begin(); it != idx["weight_map"].end(); ++it) {
    if (!it->is_string())
      return Error{index_path + ": weight_map['" + it.key() + "'] is " + std::string(it->type_name()) +
                   "; expected a shard file name"};
    const std::string f = it->get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
      return Error{index_path + ": weight_map['" + it.key() + "'] = '" + f +
                   "'; expected a file name in the index's folder"};
    r.weight_map[it.key()] = f;
    if (seen.insert(f).second) r.shard_files.push_back(f);
  }
  std::sort(r.shard_files.begin(), r.shard_files.end());
  std::vector<std::string> missing;
  std::error_code ec;
  for (const auto& f : r.shard_files)
    if (!fs::exists(fs::path(r.folder) / f, ec)) missing.push_back(f);
  if (!missing.empty()) {
    // The first names say which; an index of 99,999 shards would otherwise print them all.
    constexpr size_t kShown = 8;
    std::string list;
    for (size_t k = 0; k < missing.size() && k < kShown; ++k) list += (k ? ", " : "") + missing[k];
    if (missing.size() > kShown) list += ", ... and " + std::to_string(missing.size() - kShown) + " more";
    return Error{index_path + ": " + std::to_string(missing.size()) + " of " + std::to_string(r.shard_files.size()) +
                 " shard(s) named in the index are missing from " + r.folder + ": " + list};
  }
  return r;
}

bool is_safetensors_path(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec))
    return fs::exists(fs::path(path) / "model.safetensors.index.json", ec) ||
           fs::exists(fs::path(path) / "model.safetensors", ec);
  return ends_with(path, ".safetensors") || ends_with(path, ".safetensors.index.json");
}

Result<SafetensorsCheckpoint> SafetensorsCheckpoint::open(const std::string& path) {
  SafetensorsCheckpoint c;
  c.path_ = path;
  std::error_code ec;
  std::string index_path, single;
  if (fs::is_directory(path, ec)) {
    const fs::path d(path);
    if (fs::exists(d / "model.safetensors.index.json", ec)) index_path = (d / "model.safetensors.index.json").string();
    else if (fs::exists(d / "model.safetensors", ec)) single = (d / "model.safetensors").string();
    else
      return Error{path + ": folder has neither model.safetensors.index.json nor model.safetensors; expected a "
                          "safetensors checkpoint folder"};
  } else if (ends_with(path, ".json")) {
    index_path = path;
  } else {
    single = path;
  }
  c.folder_ = fs::path(index_path.empty() ? single : index_path).parent_path().string();
  if (c.folder_.empty()) c.folder_ = ".";

  // Shard list: (file name, tensors the index puts there); every shard checked present first.
  std::vector<std::string> shard_files;
  std::unordered_map<std::string, std::string> weight_map;
  if (!index_path.empty()) {
    DS4_TRY(SafetensorsIndex idx, read_safetensors_index(index_path));
    shard_files = std::move(idx.shard_files);
    weight_map = std::move(idx.weight_map);
  }

  std::vector<std::string> paths;
  if (single.empty())
    for (const auto& f : shard_files) paths.push_back((fs::path(c.folder_) / f).string());
  else
    paths.push_back(single);
  for (size_t k = 0; k < paths.size(); ++k) {
    const std::string& p = paths[k];
    const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Error{p + ": cannot open: " + std::strerror(errno)};
    struct stat st {};
    if (fstat(fd, &st) != 0) {
      const int e = errno;
      ::close(fd);
      return Error{p + ": cannot stat: " + std::strerror(e)};
    }
    auto map = std::make_unique<Mapping>();
    map->size = static_cast<uint64_t>(st.st_size);
    if (map->size > 0) {
      void* a = mmap(nullptr, map->size, PROT_READ, MAP_PRIVATE, fd, 0);
      if (a == MAP_FAILED) {
        const int e = errno;
        ::close(fd);
        return Error{p + ": cannot mmap " + std::to_string(map->size) + " bytes: " + std::strerror(e)};
      }
      map->addr = a;
      mapped_files::add(a, map->size, p);
    }
    ::close(fd);
    StShard shard;
    static const uint8_t kEmpty[1] = {0};
    const uint8_t* bytes = map->addr ? static_cast<const uint8_t*>(map->addr) : kEmpty;
    DS4_TRY(std::vector<StTensor> ts, parse_safetensors(bytes, map->size, p, &shard));
    const std::string fname = fs::path(p).filename().string();
    for (auto& t : ts) {
      if (auto it = c.index_.find(t.name); it != c.index_.end())
        return Error{p + ": tensor '" + t.name + "' also appears in shard " + c.shards_[c.tensors_[it->second].shard].path +
                     "; tensor names must be unique across shards"};
      if (!index_path.empty()) {
        auto w = weight_map.find(t.name);
        if (w == weight_map.end())
          return Error{p + ": tensor '" + t.name + "' is in the shard but not in " + index_path + "'s weight_map"};
        if (w->second != fname)
          return Error{p + ": tensor '" + t.name + "' is in this shard but " + index_path + " maps it to " + w->second};
      }
      t.shard = static_cast<int>(k);
      c.index_.emplace(t.name, c.tensors_.size());
      c.tensors_.push_back(std::move(t));
    }
    c.shards_.push_back(std::move(shard));
    c.maps_.push_back(std::move(map));
  }
  if (!index_path.empty()) {
    std::vector<std::string> absent;
    for (const auto& [name, file] : weight_map)
      if (!c.index_.count(name)) absent.push_back(name + " (" + file + ")");
    if (!absent.empty()) {
      std::sort(absent.begin(), absent.end());
      std::string list;
      for (size_t i = 0; i < absent.size() && i < 5; ++i) list += (i ? ", " : "") + absent[i];
      if (absent.size() > 5) list += ", ...";
      return Error{index_path + ": " + std::to_string(absent.size()) + " tensor(s) in the weight_map are not in their shard: " + list};
    }
  }
  return c;
}

}  // namespace ds4::gguf
