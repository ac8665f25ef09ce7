// gguf/gguf_file.cpp — GGUF v3 parser with validation, mmap, split sets (see gguf_file.h and
// gguf_validate.h for the list of checks). Layout facts: ggml-org/ggml docs/gguf.md, src/gguf.cpp.
#include "gguf/gguf_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>

#include "ds4/mapped_files.h"
#include "gguf/gguf_validate.h"
#include "kernels/quant/ggml_type.h"

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

namespace ds4::gguf {

// ---- mapping -----------------------------------------------------------------------------------

struct GgufModel::Mapping {
  void* addr = nullptr;
  uint64_t size = 0;
  ~Mapping() {
    if (addr) {
      mapped_files::remove(addr);  // its SIGBUS report (common/ds4/mapped_files.h)
      munmap(addr, size);
    }
  }
};

GgufModel::GgufModel() = default;
GgufModel::GgufModel(GgufModel&&) noexcept = default;
GgufModel& GgufModel::operator=(GgufModel&&) noexcept = default;
GgufModel::~GgufModel() = default;

const TensorInfo* GgufModel::find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

uint64_t TensorInfo::row_bytes() const {
  const auto* g = ggml_type_geometry(type);
  DS4_CHECK(g != nullptr);
  return static_cast<uint64_t>(ne[0] / g->block_elems) * static_cast<uint64_t>(g->block_bytes);
}

// ---- helpers -----------------------------------------------------------------------------------

namespace {

std::string dims_str(const std::array<int64_t, 4>& ne, int n_dims) {
  std::string r = "[";
  for (int k = 0; k < std::max(n_dims, 1); ++k) r += (k ? ", " : "") + std::to_string(ne[k]);
  return r + "]";
}

std::string short_name(const std::string& s) {
  return s.size() <= 80 ? s : s.substr(0, 77) + "...";
}

}  // namespace

Result<uint64_t> tensor_nbytes(uint32_t type, const std::array<int64_t, 4>& ne) {
  const auto* g = ggml_type_geometry(type);
  if (!g) {
    std::string note(ggml_type_fork_note(type));
    return Error{"unknown ggml type id " + std::to_string(type) +
                 (note.empty() ? std::string(" (not an upstream ggml type)") : " (" + note + ")")};
  }
  if (g->internal)
    return Error{"type id " + std::to_string(type) + " (" + std::string(g->name) +
                 ") is a ds4-internal in-memory encoding; expected an upstream ggml type in a GGUF file"};
  for (int k = 0; k < 4; ++k)
    if (ne[k] < 0)
      return Error{"dimension ne[" + std::to_string(k) + "] = " + std::to_string(ne[k]) +
                   " is negative"};
  if (ne[0] % g->block_elems != 0)
    return Error{"ne[0] = " + std::to_string(ne[0]) + " is not a multiple of the " +
                 std::string(g->name) + " block size " + std::to_string(g->block_elems)};
  int64_t elems = 1;
  for (int k = 0; k < 4; ++k)
    if (__builtin_mul_overflow(elems, ne[k], &elems))
      return Error{"element count " + std::to_string(ne[0]) + "*" + std::to_string(ne[1]) + "*" +
                   std::to_string(ne[2]) + "*" + std::to_string(ne[3]) + " overflows 64 bits"};
  uint64_t bytes = static_cast<uint64_t>(ne[0] / g->block_elems);
  const uint64_t factors[4] = {static_cast<uint64_t>(g->block_bytes), static_cast<uint64_t>(ne[1]),
                               static_cast<uint64_t>(ne[2]), static_cast<uint64_t>(ne[3])};
  for (uint64_t f : factors)
    if (__builtin_mul_overflow(bytes, f, &bytes))
      return Error{"byte count of " + std::to_string(elems) + " " + std::string(g->name) +
                   " elements overflows 64 bits"};
  return bytes;
}

bool parse_split_path(const std::string& path, SplitName* out) {
  // "-00001-of-00003.gguf" is 20 characters.
  static constexpr size_t kSuffix = 20;
  if (path.size() < kSuffix) return false;
  const std::string tail = path.substr(path.size() - kSuffix);
  auto digits = [&](size_t from) {
    for (size_t k = from; k < from + 5; ++k)
      if (tail[k] < '0' || tail[k] > '9') return false;
    return true;
  };
  if (tail[0] != '-' || !digits(1) || tail.compare(6, 4, "-of-") != 0 || !digits(10) ||
      tail.compare(15, 5, ".gguf") != 0)
    return false;
  SplitName s;
  s.prefix = path.substr(0, path.size() - kSuffix);
  s.no = std::stoi(tail.substr(1, 5));
  s.count = std::stoi(tail.substr(10, 5));
  if (s.no < 1 || s.count < 1 || s.no > s.count) return false;
  if (out) *out = s;
  return true;
}

std::string split_path(const std::string& prefix, int no, int count) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "-%05d-of-%05d.gguf", no, count);
  return prefix + buf;
}

// ---- single-file parser ------------------------------------------------------------------------

namespace {

/// Bounds-checked little-endian reader over a mapped file; the first error sticks.
struct Cursor {
  const uint8_t* p;
  uint64_t size;
  const std::string& file;
  uint64_t pos = 0;
  std::optional<Error> err;

  bool fail(const std::string& msg) {
    if (!err) err = Error{file + ": " + msg};
    return false;
  }
  bool need(uint64_t n, const std::string& what) {
    if (size - pos >= n) return true;
    return fail("truncated file: reading " + what + " at byte " + std::to_string(pos) + " needs " +
                std::to_string(n) + " bytes but only " + std::to_string(size - pos) +
                " remain (file is " + std::to_string(size) + " bytes)");
  }
  template <class T>
  bool rd(T& out, const std::string& what) {
    if (!need(sizeof(T), what)) return false;
    std::memcpy(&out, p + pos, sizeof(T));
    pos += sizeof(T);
    return true;
  }
  bool str(std::string& out, const std::string& what) {
    uint64_t n = 0;
    if (!rd(n, what + " (string length)")) return false;
    if (n > kMaxStringBytes)
      return fail(what + ": string length " + std::to_string(n) +
                  " exceeds the limit of 2^30 bytes");
    if (!need(n, what)) return false;
    out.assign(reinterpret_cast<const char*>(p + pos), n);
    pos += n;
    return true;
  }
};

bool valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::FLOAT64); }

bool read_scalar(Cursor& c, ValueType t, const std::string& what, uint64_t* u, int64_t* i,
                 double* f, uint8_t* b) {
  switch (t) {
    case ValueType::UINT8: { uint8_t x; if (!c.rd(x, what)) return false; *u = x; return true; }
    case ValueType::UINT16: { uint16_t x; if (!c.rd(x, what)) return false; *u = x; return true; }
    case ValueType::UINT32: { uint32_t x; if (!c.rd(x, what)) return false; *u = x; return true; }
    case ValueType::UINT64: { uint64_t x; if (!c.rd(x, what)) return false; *u = x; return true; }
    case ValueType::INT8: { int8_t x; if (!c.rd(x, what)) return false; *i = x; return true; }
    case ValueType::INT16: { int16_t x; if (!c.rd(x, what)) return false; *i = x; return true; }
    case ValueType::INT32: { int32_t x; if (!c.rd(x, what)) return false; *i = x; return true; }
    case ValueType::INT64: { int64_t x; if (!c.rd(x, what)) return false; *i = x; return true; }
    case ValueType::FLOAT32: { float x; if (!c.rd(x, what)) return false; *f = x; return true; }
    case ValueType::FLOAT64: { double x; if (!c.rd(x, what)) return false; *f = x; return true; }
    case ValueType::BOOL: {
      uint8_t x;
      if (!c.rd(x, what)) return false;
      if (x > 1) return c.fail(what + ": expected BOOL 0 or 1, found " + std::to_string(x));
      *b = x;
      return true;
    }
    default: return c.fail(what + ": not a scalar type");
  }
}

bool read_value(Cursor& c, ValueType t, Value& v, const std::string& what) {
  v.type = t;
  if (t == ValueType::STRING) return c.str(v.s, what);
  if (t != ValueType::ARRAY) {
    uint8_t b = 0;
    if (!read_scalar(c, t, what, &v.u, &v.i, &v.f, &b)) return false;
    v.b = b != 0;
    return true;
  }
  uint32_t et = 0;
  uint64_t n = 0;
  if (!c.rd(et, what + " (array element type)")) return false;
  if (et == static_cast<uint32_t>(ValueType::ARRAY))
    return c.fail(what + ": nested arrays (ARRAY of ARRAY) are not supported (ggml rejects them)");
  if (!valid_value_type(et))
    return c.fail(what + ": unknown array element type " + std::to_string(et) +
                  " (expected 0..12)");
  if (!c.rd(n, what + " (array length)")) return false;
  if (n > kMaxArrayElems)
    return c.fail(what + ": array of " + std::to_string(n) +
                  " elements exceeds the limit of 2^30 elements");
  v.array_type = static_cast<ValueType>(et);
  const uint64_t esz = value_type_size(v.array_type);
  // Every element takes at least 8 bytes (string length) or esz bytes: check before allocating.
  if (!c.need(n * (esz ? esz : 8), what + " (" + std::to_string(n) + " array elements)"))
    return false;
  for (uint64_t k = 0; k < n; ++k) {
    const std::string ew = what + " element " + std::to_string(k);
    if (v.array_type == ValueType::STRING) {
      std::string s;
      if (!c.str(s, ew)) return false;
      v.arr_s.push_back(std::move(s));
      continue;
    }
    uint64_t u = 0;
    int64_t i = 0;
    double f = 0;
    uint8_t b = 0;
    if (!read_scalar(c, v.array_type, ew, &u, &i, &f, &b)) return false;
    if (is_unsigned_type(v.array_type)) v.arr_u.push_back(u);
    else if (is_signed_type(v.array_type)) v.arr_i.push_back(i);
    else if (v.array_type == ValueType::BOOL) v.arr_b.push_back(b);
    else v.arr_f.push_back(f);
  }
  return true;
}

}  // namespace

/// Builds GgufModel objects (friend of GgufModel).
class GgufModelBuilder {
 public:
  struct ParsedFile {
    Shard shard;
    std::vector<TensorInfo> tensors;
    std::unique_ptr<GgufModel::Mapping> map;
  };
  static Result<ParsedFile> parse(const std::string& path, int shard_index);
  static Result<GgufModel> open(const std::string& path, const OpenOptions& opts);
};

Result<GgufModelBuilder::ParsedFile> GgufModelBuilder::parse(const std::string& path, int shard_index) {
  ParsedFile pf;
  pf.shard.path = path;
  // A FIFO or device would block open() or stream forever: refused before opening.
  {
    struct stat pre {};
    if (::stat(path.c_str(), &pre) != 0) {
      const int e = errno;
      return Error{path + (e == ENOENT ? std::string(": file not found") : ": cannot stat: " + std::string(std::strerror(e)))};
    }
    if (!S_ISREG(pre.st_mode))
      return Error{path + ": expected a regular GGUF file, found " +
                   (S_ISDIR(pre.st_mode) ? "a directory" : S_ISFIFO(pre.st_mode) ? "a FIFO (named pipe)"
                    : S_ISCHR(pre.st_mode) ? "a character device" : S_ISBLK(pre.st_mode) ? "a block device"
                                            : "a special file")};
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return Error{path + ": cannot open: " + std::strerror(errno)};
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return Error{path + ": cannot stat: " + std::strerror(e)};
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Error{path + ": not a regular file"};
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  pf.shard.file_size = size;
  pf.map = std::make_unique<GgufModel::Mapping>();
  if (size > 0) {
    void* a = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (a == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      return Error{path + ": cannot mmap " + std::to_string(size) + " bytes: " + std::strerror(e)};
    }
    pf.map->addr = a;
    mapped_files::add(a, size, path);
    pf.map->size = size;
  }
  ::close(fd);
  const uint8_t* base = static_cast<const uint8_t*>(pf.map->addr);
  static const uint8_t kEmpty[1] = {0};
  Cursor c{base ? base : kEmpty, size, path, 0, std::nullopt};

  // Header.
  uint8_t magic[4];
  if (!c.need(4, "header (magic)")) return *c.err;
  std::memcpy(magic, base, 4);
  if (std::memcmp(magic, "GGUF", 4) != 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%02x %02x %02x %02x", magic[0], magic[1], magic[2], magic[3]);
    return Error{path + ": bad magic: expected 'GGUF' (47 47 55 46), found " + buf +
                 " — not a GGUF file"};
  }
  c.pos = 4;
  uint32_t version = 0;
  if (!c.rd(version, "header (version)")) return *c.err;
  if ((version & 0xFFFFu) == 0 && version != 0)
    return Error{path + ": big-endian GGUF file (version field reads 0x" + [&] {
                   char b[16];
                   std::snprintf(b, sizeof b, "%08x", version);
                   return std::string(b);
                 }() + ", i.e. version " + std::to_string(__builtin_bswap32(version)) +
                 " byte-swapped); only little-endian GGUF files are supported"};
  if (version == 1)
    return Error{path + ": unsupported GGUF version 1 (expected 3; 2 is also accepted): v1 used "
                        "32-bit counts and is no longer supported by ggml"};
  if (version < 2 || version > 3)
    return Error{path + ": unsupported GGUF version " + std::to_string(version) +
                 " (expected 3; 2 is also accepted)"};
  pf.shard.version = version;
  uint64_t n_tensors = 0, n_kv = 0;
  if (!c.rd(n_tensors, "header (tensor count)") || !c.rd(n_kv, "header (key/value count)"))
    return *c.err;
  // Key/value pairs.
  Metadata& md = pf.shard.metadata;
  md.set_source(path);
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key;
    const std::string kw = "key #" + std::to_string(k) + " of " + std::to_string(n_kv);
    if (!c.str(key, kw)) return *c.err;
    if (key.empty()) return Error{path + ": " + kw + " is empty"};
    if (md.has(key)) return Error{path + ": duplicate key '" + short_name(key) + "' (" + kw + ")"};
    uint32_t t = 0;
    if (!c.rd(t, "value type of key '" + short_name(key) + "'")) return *c.err;
    if (!valid_value_type(t))
      return Error{path + ": key '" + short_name(key) + "': unknown value type " +
                   std::to_string(t) + " (expected 0..12)"};
    Value v;
    if (!read_value(c, static_cast<ValueType>(t), v, "value of key '" + short_name(key) + "'"))
      return *c.err;
    md.set(std::move(key), std::move(v));
  }

  // Alignment.
  uint32_t align = kDefaultAlignment;
  if (const Value* a = md.find("general.alignment")) {
    if (a->type != ValueType::UINT32)
      return Error{path + ": key 'general.alignment': expected UINT32, found " +
                   (a->type == ValueType::ARRAY ? "ARRAY" : value_type_name(a->type))};
    if (a->u == 0 || (a->u & (a->u - 1)) != 0)
      return Error{path + ": key 'general.alignment' = " + std::to_string(a->u) +
                   ": expected a non-zero power of two"};
    align = static_cast<uint32_t>(a->u);
  }
  pf.shard.alignment = align;

  // Tensor infos. The count is checked against what the rest of the file can hold before the
  // loop runs: a tensor info takes at least 24 bytes (name length 8, n_dims 4, type 4, offset 8).
  if (const uint64_t rest = size - c.pos; n_tensors > rest / 24)
    return Error{path + ": truncated file or corrupt header: tensor count " + std::to_string(n_tensors) +
                 " cannot fit in the " + std::to_string(rest) + " bytes after the key/value pairs (at most " +
                 std::to_string(rest / 24) + ")"};
  std::unordered_map<std::string, size_t> seen;
  for (uint64_t k = 0; k < n_tensors; ++k) {
    TensorInfo t;
    const std::string tw = "tensor info #" + std::to_string(k) + " of " + std::to_string(n_tensors);
    if (!c.str(t.name, tw + " (name)")) return *c.err;
    if (t.name.size() >= kMaxTensorNameBytes)
      return Error{path + ": " + tw + ": tensor name '" + short_name(t.name) + "' is " +
                   std::to_string(t.name.size()) +
                   " bytes; expected at most 63 (ggml GGML_MAX_NAME = 64 incl. NUL)"};
    const std::string tn = "tensor '" + t.name + "'";
    uint32_t n_dims = 0;
    if (!c.rd(n_dims, tn + " (n_dims)")) return *c.err;
    if (n_dims > kMaxDims)
      return Error{path + ": " + tn + ": n_dims = " + std::to_string(n_dims) +
                   ", expected at most 4"};
    t.n_dims = static_cast<int>(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne = 0;
      if (!c.rd(ne, tn + " (ne[" + std::to_string(d) + "])")) return *c.err;
      if (ne > static_cast<uint64_t>(INT64_MAX))
        return Error{path + ": " + tn + ": ne[" + std::to_string(d) + "] = " + std::to_string(ne) +
                     " exceeds INT64_MAX (negative as int64)"};
      t.ne[d] = static_cast<int64_t>(ne);
    }
    if (!c.rd(t.type, tn + " (type)") || !c.rd(t.offset, tn + " (offset)")) return *c.err;
    auto nb = tensor_nbytes(t.type, t.ne);
    if (!nb)
      return Error{path + ": " + tn + " (ne " + dims_str(t.ne, t.n_dims) + "): " +
                   nb.error().message};
    t.nbytes = *nb;
    t.shard = shard_index;
    if (auto it = seen.find(t.name); it != seen.end())
      return Error{path + ": duplicate tensor name '" + t.name + "' (tensor infos #" +
                   std::to_string(it->second) + " and #" + std::to_string(k) + ")"};
    seen.emplace(t.name, static_cast<size_t>(k));
    pf.tensors.push_back(std::move(t));
  }
  pf.shard.n_tensors = n_tensors;

  // Data section: starts at the aligned end of the tensor infos.
  const uint64_t pos = c.pos;
  const uint64_t data_offset = pos + (align - pos % align) % align;
  pf.shard.data_offset = data_offset;
  if (n_tensors > 0 && data_offset > size)
    return Error{path + ": truncated file: the data section should start at byte " +
                 std::to_string(data_offset) + " (end of tensor infos " + std::to_string(pos) +
                 " padded to alignment " + std::to_string(align) + ") but the file is " +
                 std::to_string(size) + " bytes"};
  for (auto& t : pf.tensors) {
    const std::string tn = "tensor '" + t.name + "'";
    if (t.offset % align != 0)
      return Error{path + ": " + tn + ": data offset " + std::to_string(t.offset) +
                   " is not a multiple of the alignment " + std::to_string(align)};
    if (t.offset > size - data_offset)
      return Error{path + ": " + tn + ": data starts at file offset " +
                   (t.offset > UINT64_MAX - data_offset ? std::string("beyond 2^64")
                                                        : std::to_string(data_offset + t.offset)) +
                   ", beyond the end of the file (" + std::to_string(size) + " bytes)"};
    t.file_offset = data_offset + t.offset;
    if (t.nbytes > size - t.file_offset)
      return Error{path + ": " + tn + ": data is truncated: it needs " + std::to_string(t.nbytes) +
                   " bytes (" + std::string(ggml_type_name(t.type)) + ", ne " +
                   dims_str(t.ne, t.n_dims) + ") at file offset " + std::to_string(t.file_offset) +
                   " but only " + std::to_string(size - t.file_offset) +
                   " bytes remain (file is " + std::to_string(size) + " bytes)"};
    t.data = base ? base + t.file_offset : nullptr;
  }
  // Overlaps: sort non-empty regions by offset.
  std::vector<const TensorInfo*> order;
  for (const auto& t : pf.tensors)
    if (t.nbytes > 0) order.push_back(&t);
  std::sort(order.begin(), order.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const TensorInfo* a = order[k - 1];
    const TensorInfo* b = order[k];
    if (a->offset + a->nbytes > b->offset)
      return Error{path + ": tensor '" + a->name + "' at data offset " + std::to_string(a->offset) +
                   " overlaps tensor '" + b->name + "' at data offset " +
                   std::to_string(b->offset) + ": its region is " +
                   std::to_string(b->offset - a->offset) + " bytes, shorter than nbytes(" +
                   std::string(ggml_type_name(a->type)) + ", " + dims_str(a->ne, a->n_dims) +
                   ") = " + std::to_string(a->nbytes)};
  }
  return pf;
}

Result<GgufModel> GgufModelBuilder::open(const std::string& path, const OpenOptions& opts) {
  GgufModel m;
  m.path_ = path;
  std::vector<std::string> paths;
  SplitName sn;
  const bool named_split = parse_split_path(path, &sn);
  if (opts.open_split_set && named_split) {
    std::vector<std::string> missing;
    for (int k = 1; k <= sn.count; ++k) {
      std::string p = split_path(sn.prefix, k, sn.count);
      std::error_code ec;
      if (!std::filesystem::exists(p, ec)) missing.push_back(p);
      paths.push_back(std::move(p));
    }
    if (!missing.empty()) {
      // The first names say which; a set of 99,999 shards would otherwise print them all.
      constexpr size_t kShown = 8;
      std::string list;
      for (size_t k = 0; k < missing.size() && k < kShown; ++k) list += (list.empty() ? "" : ", ") + missing[k];
      if (missing.size() > kShown) list += ", ... and " + std::to_string(missing.size() - kShown) + " more";
      return Error{path + ": split set of " + std::to_string(sn.count) + " shards is incomplete: " +
                   std::to_string(missing.size()) + " missing: " + list};
    }
  } else {
    paths.push_back(path);
  }

  std::vector<ParsedFile> files;
  for (size_t k = 0; k < paths.size(); ++k) {
    DS4_TRY(ParsedFile pf, parse(paths[k], static_cast<int>(k)));
    files.push_back(std::move(pf));
  }

  const bool as_set = paths.size() > 1 || (opts.open_split_set && named_split);
  if (as_set) {
    uint64_t total = 0;
    for (const auto& f : files) total += f.tensors.size();
    for (size_t k = 0; k < files.size(); ++k) {
      const Metadata& md = files[k].shard.metadata;
      const std::string& p = files[k].shard.path;
      const bool required = files.size() > 1;
      auto check = [&](const char* key, int64_t expected) -> Result<void> {
        if (!md.has(key)) {
          if (!required) return ok();
          return Error{p + ": key '" + key + "' is missing; expected " + std::to_string(expected) +
                       " for shard " + std::to_string(k + 1) + " of " +
                       std::to_string(files.size())};
        }
        auto v = md.get_int(key);
        if (!v) return v.error();
        if (*v != expected)
          return Error{p + ": key '" + key + "' = " + std::to_string(*v) + ", expected " +
                       std::to_string(expected) + " (shard " + std::to_string(k + 1) + " of " +
                       std::to_string(files.size()) + " by file name)"};
        return ok();
      };
      DS4_TRY_VOID(check("split.no", static_cast<int64_t>(k)));
      DS4_TRY_VOID(check("split.count", static_cast<int64_t>(files.size())));
      DS4_TRY_VOID(check("split.tensors.count", static_cast<int64_t>(total)));
      if (files[k].shard.alignment != files[0].shard.alignment)
        return Error{p + ": alignment " + std::to_string(files[k].shard.alignment) +
                     (md.has("general.alignment") ? "" : " (no general.alignment key)") +
                     " differs from the first shard's general.alignment " +
                     std::to_string(files[0].shard.alignment) + " (" + files[0].shard.path +
                     "); every shard of a split set must declare the same alignment (gguf-py's "
                     "GGUFWriter writes a custom alignment into the first shard only but pads "
                     "every shard to it, which makes such a set unreadable)"};
    }
  } else if (const Value* c = files[0].shard.metadata.find("split.count");
             c && opts.open_split_set) {
    auto n = files[0].shard.metadata.get_int("split.count");
    if (!n) return n.error();
    if (*n > 1)
      return Error{path + ": file has split.count = " + std::to_string(*n) +
                   " but its name does not end in -0000k-of-0000n.gguf, so the other shards "
                   "cannot be located; keep the shard names written by the splitter"};
  }

  for (auto& f : files) {
    for (auto& t : f.tensors) {
      if (auto it = m.index_.find(t.name); it != m.index_.end())
        return Error{f.shard.path + ": tensor '" + t.name + "' also appears in shard " +
                     m.shards_[m.tensors_[it->second].shard].path +
                     "; tensor names must be unique across a split set"};
      if (!opts.map_data) t.data = nullptr;
      m.index_.emplace(t.name, m.tensors_.size());
      m.tensors_.push_back(std::move(t));
    }
    m.shards_.push_back(std::move(f.shard));
    if (opts.map_data) m.maps_.push_back(std::move(f.map));
  }
  m.metadata_ = m.shards_[0].metadata;
  return m;
}

Result<GgufModel> GgufModel::open(const std::string& path, const OpenOptions& opts) {
  return GgufModelBuilder::open(path, opts);
}

GgufModel GgufModel::assemble(std::string path, Metadata metadata, std::vector<Shard> shards,
                              std::vector<TensorInfo> tensors, std::vector<std::shared_ptr<const void>> keep_alive) {
  GgufModel m;
  m.path_ = std::move(path);
  m.metadata_ = std::move(metadata);
  m.metadata_.set_source(m.path_);
  m.shards_ = std::move(shards);
  for (auto& t : tensors) {
    const auto* g = ggml_type_geometry(t.type);
    DS4_CHECK(g != nullptr && t.ne[0] % g->block_elems == 0);
    DS4_CHECK(t.nbytes == uint64_t(t.nelements() / g->block_elems) * uint64_t(g->block_bytes));
    DS4_CHECK(t.shard >= -1 && t.shard < int(m.shards_.size()));
    DS4_CHECK(m.index_.emplace(t.name, m.tensors_.size()).second);
    m.tensors_.push_back(std::move(t));
  }
  m.keep_alive_ = std::move(keep_alive);
  // Bytes not aligned for their element type (a safetensors data section starts at 8 + the header
  // length, so its F32 tensors can sit at 2 mod 4) are copied once into aligned memory, so every
  // kernel may read a tensor as a typed array. The copy is memory the model owns, not a file
  // mapping: it becomes an in-memory tensor (shard -1), so nothing drops its pages or reads it
  // from the file by offset.
  for (auto& t : m.tensors_) {
    if (t.data == nullptr || t.nbytes == 0) continue;
    const uint64_t need = tensor_data_alignment(t.type);
    if (reinterpret_cast<uintptr_t>(t.data) % need == 0) continue;
    auto copy = std::make_shared<std::vector<uint64_t>>((t.nbytes + 7) / 8);  // 8-byte aligned words
    std::memcpy(copy->data(), t.data, t.nbytes);
    t.data = reinterpret_cast<const uint8_t*>(copy->data());
    m.keep_alive_.push_back(std::move(copy));
    if (t.shard >= 0 && m.shards_[size_t(t.shard)].n_tensors > 0) --m.shards_[size_t(t.shard)].n_tensors;
    t.shard = -1;
  }
  return m;
}

uint64_t tensor_data_alignment(uint32_t type) {
  const auto* g = ggml_type_geometry(type);
  if (g == nullptr || g->block_bytes <= 0) return 1;
  const uint64_t b = uint64_t(g->block_bytes);
  return std::min<uint64_t>(8, b & (~b + 1));  // the lowest set bit of the block size, at most 8
}

bool GgufModel::has_in_memory_tensors() const {
  for (const auto& t : tensors_)
    if (t.shard < 0) return true;
  return false;
}

}  // namespace ds4::gguf
