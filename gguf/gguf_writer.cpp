// gguf/gguf_writer.cpp — GGUF v3 writer (see gguf_writer.h). Layout per ggml-org/ggml
// docs/gguf.md and src/gguf.cpp: header, key/value pairs, tensor infos, padding to the alignment,
// then tensor data, each tensor padded to the alignment, offsets = running padded sum.
#include "gguf/gguf_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <unordered_set>

#include "gguf/gguf_file.h"
#include "gguf/gguf_validate.h"
#include "kernels/quant/ggml_type.h"

namespace ds4::gguf {

namespace {

template <class T>
void put(std::string& b, T v) {
  b.append(reinterpret_cast<const char*>(&v), sizeof(T));
}
void put_str(std::string& b, const std::string& s) {
  put<uint64_t>(b, s.size());
  b += s;
}

void put_scalar(std::string& b, ValueType t, uint64_t u, int64_t i, double f, bool bo) {
  switch (t) {
    case ValueType::UINT8: put<uint8_t>(b, static_cast<uint8_t>(u)); break;
    case ValueType::UINT16: put<uint16_t>(b, static_cast<uint16_t>(u)); break;
    case ValueType::UINT32: put<uint32_t>(b, static_cast<uint32_t>(u)); break;
    case ValueType::UINT64: put<uint64_t>(b, u); break;
    case ValueType::INT8: put<int8_t>(b, static_cast<int8_t>(i)); break;
    case ValueType::INT16: put<int16_t>(b, static_cast<int16_t>(i)); break;
    case ValueType::INT32: put<int32_t>(b, static_cast<int32_t>(i)); break;
    case ValueType::INT64: put<int64_t>(b, i); break;
    case ValueType::FLOAT32: put<float>(b, static_cast<float>(f)); break;
    case ValueType::FLOAT64: put<double>(b, f); break;
    case ValueType::BOOL: put<uint8_t>(b, bo ? 1 : 0); break;
    default: DS4_CHECK(false && "not a scalar type");
  }
}

void put_value(std::string& b, const Value& v) {
  put<uint32_t>(b, static_cast<uint32_t>(v.type));
  if (v.type == ValueType::STRING) return put_str(b, v.s);
  if (v.type != ValueType::ARRAY) return put_scalar(b, v.type, v.u, v.i, v.f, v.b);
  DS4_CHECK(v.array_type != ValueType::ARRAY);
  put<uint32_t>(b, static_cast<uint32_t>(v.array_type));
  const size_t n = v.array_size();
  put<uint64_t>(b, n);
  for (size_t k = 0; k < n; ++k) {
    if (v.array_type == ValueType::STRING) put_str(b, v.arr_s[k]);
    else if (is_unsigned_type(v.array_type)) put_scalar(b, v.array_type, v.arr_u[k], 0, 0, false);
    else if (is_signed_type(v.array_type)) put_scalar(b, v.array_type, 0, v.arr_i[k], 0, false);
    else if (v.array_type == ValueType::BOOL) put_scalar(b, v.array_type, 0, 0, 0, v.arr_b[k] != 0);
    else put_scalar(b, v.array_type, 0, 0, v.arr_f[k], false);
  }
}

uint64_t pad_to(uint64_t x, uint64_t a) { return x + (a - x % a) % a; }

Result<void> pwrite_all(int fd, const void* data, uint64_t n, uint64_t off, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const size_t chunk = n > (uint64_t{1} << 30) ? (size_t{1} << 30) : static_cast<size_t>(n);
    ssize_t w = ::pwrite(fd, p, chunk, static_cast<off_t>(off));
    if (w < 0) {
      if (errno == EINTR) continue;
      return Error{path + ": write failed at byte " + std::to_string(off) + ": " + std::strerror(errno)};
    }
    p += w;
    n -= static_cast<uint64_t>(w);
    off += static_cast<uint64_t>(w);
  }
  return ok();
}

bool is_reserved_key(const std::string& k) {
  return k == "general.alignment" || k == "split.no" || k == "split.count" ||
         k == "split.tensors.count";
}

}  // namespace

void GgufWriter::set_alignment(uint32_t alignment) {
  DS4_CHECK(alignment != 0 && (alignment & (alignment - 1)) == 0);
  alignment_ = alignment;
}

Result<void> GgufWriter::add_pending(Pending p, const void* data, uint64_t nbytes) {
  if (p.name.empty() || p.name.size() >= kMaxTensorNameBytes)
    return Error{"tensor '" + p.name + "': name must be 1..63 bytes, found " +
                 std::to_string(p.name.size())};
  for (const auto& t : tensors_)
    if (t.name == p.name) return Error{"tensor '" + p.name + "' added twice"};
  if (p.ne.empty() || p.ne.size() > kMaxDims)
    return Error{"tensor '" + p.name + "': expected 1..4 dimensions, found " +
                 std::to_string(p.ne.size())};
  std::array<int64_t, 4> ne{1, 1, 1, 1};
  for (size_t k = 0; k < p.ne.size(); ++k) ne[k] = p.ne[k];
  auto nb = tensor_nbytes(p.type, ne);
  if (!nb) return Error{"tensor '" + p.name + "': " + nb.error().message};
  if (!p.zero && *nb != nbytes)
    return Error{"tensor '" + p.name + "': expected " + std::to_string(*nb) + " bytes for " +
                 std::string(ggml_type_name(p.type)) + ", found " + std::to_string(nbytes)};
  p.nbytes = *nb;
  if (!p.zero && !p.fill) {
    const auto* b = static_cast<const uint8_t*>(data);
    p.bytes.assign(b, b + nbytes);
  }
  tensors_.push_back(std::move(p));
  return ok();
}

Result<void> GgufWriter::add_tensor(const std::string& name, uint32_t type,
                                    const std::vector<int64_t>& ne, const void* data,
                                    uint64_t nbytes) {
  return add_pending(Pending{name, type, ne, {}, 0, false, {}}, data, nbytes);
}

Result<void> GgufWriter::add_tensor_deferred(const std::string& name, uint32_t type, const std::vector<int64_t>& ne,
                                             Fill fill) {
  DS4_CHECK(fill != nullptr);
  std::array<int64_t, 4> a{1, 1, 1, 1};
  for (size_t k = 0; k < ne.size() && k < 4; ++k) a[k] = ne[k];
  auto nb = tensor_nbytes(type, a);
  Pending p{name, type, ne, {}, 0, false, std::move(fill)};
  return add_pending(std::move(p), nullptr, nb ? *nb : 0);
}

Result<void> GgufWriter::add_tensor_zero(const std::string& name, uint32_t type,
                                         const std::vector<int64_t>& ne) {
  return add_pending(Pending{name, type, ne, {}, 0, true, {}}, nullptr, 0);
}

Result<void> GgufWriter::write_one(const std::string& path, const Metadata& kv,
                                   const std::vector<const Pending*>& tensors, const Progress& progress) const {
  std::string head;
  put<uint32_t>(head, 0x46554747u);  // "GGUF"
  put<uint32_t>(head, 3);
  put<uint64_t>(head, tensors.size());
  put<uint64_t>(head, kv.entries().size());
  for (const auto& [key, v] : kv.entries()) {
    put_str(head, key);
    put_value(head, v);
  }
  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  for (const Pending* t : tensors) {
    put_str(head, t->name);
    put<uint32_t>(head, static_cast<uint32_t>(t->ne.size()));
    for (int64_t d : t->ne) put<uint64_t>(head, static_cast<uint64_t>(d));
    put<uint32_t>(head, t->type);
    put<uint64_t>(head, offset);
    offsets.push_back(offset);
    offset = pad_to(offset + t->nbytes, alignment_);
  }
  const uint64_t data_offset = pad_to(head.size(), alignment_);
  head.resize(data_offset, '\0');
  const uint64_t total = data_offset + offset;

  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Error{path + ": cannot create: " + std::strerror(errno)};
  Result<void> r = pwrite_all(fd, head.data(), head.size(), 0, path);
  uint64_t data_total = 0, done = 0;
  for (const Pending* t : tensors) data_total += t->nbytes;
  std::vector<uint8_t> buf;  // deferred tensors, one at a time; sized once for the largest, so
  uint64_t max_deferred = 0;  // growing it never holds an old and a new buffer together
  for (const Pending* t : tensors)
    if (t->fill) max_deferred = std::max(max_deferred, t->nbytes);
  buf.reserve(size_t(max_deferred));
  for (size_t k = 0; r.ok() && k < tensors.size(); ++k) {
    const Pending& t = *tensors[k];
    if (t.fill) {
      buf.resize(size_t(t.nbytes));
      r = t.fill(buf.data());
      if (!r) r = Error{"tensor '" + t.name + "': " + r.error().message};
      else r = pwrite_all(fd, buf.data(), t.nbytes, data_offset + offsets[k], path);
    } else if (!t.zero) {
      r = pwrite_all(fd, t.bytes.data(), t.nbytes, data_offset + offsets[k], path);
    }
    done += t.nbytes;
    if (r.ok() && progress) progress(k, done, data_total);
  }
  // Zero tensors and padding are holes: extend the file to its full size.
  if (r.ok() && ::ftruncate(fd, static_cast<off_t>(total)) != 0)
    r = Error{path + ": cannot extend to " + std::to_string(total) + " bytes: " + std::strerror(errno)};
  if (::close(fd) != 0 && r.ok()) r = Error{path + ": close failed: " + std::strerror(errno)};
  return r;
}

Result<void> GgufWriter::write(const std::string& path, const Progress& progress) const {
  Metadata kv;
  for (const auto& [k, v] : metadata_.entries())
    if (k != "general.alignment") kv.set(k, v);
  if (alignment_ != kDefaultAlignment) kv.set("general.alignment", Value::make_u32(alignment_));
  std::vector<const Pending*> all;
  for (const auto& t : tensors_) all.push_back(&t);
  // All or nothing: written under a temporary name and renamed, so a failed write (full disk)
  // leaves no partial file at `path`. An existing non-regular path (/dev/null) is written directly.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) return write_one(path, kv, all, progress);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  Result<void> r = write_one(tmp, kv, all, progress);
  if (!r) {
    ::unlink(tmp.c_str());
    return Error{path + ": " + r.error().message};
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    return Error{path + ": cannot rename the finished file into place: " + std::strerror(e)};
  }
  return ok();
}

Result<std::vector<std::string>> GgufWriter::write_split(const std::string& prefix,
                                                         size_t max_tensors) const {
  if (max_tensors == 0) return Error{prefix + ": write_split needs max_tensors >= 1"};
  const size_t n = tensors_.empty() ? 1 : (tensors_.size() + max_tensors - 1) / max_tensors;
  if (n > 65535) return Error{prefix + ": " + std::to_string(n) + " shards exceed split.count's UINT16"};
  std::vector<std::string> paths;
  for (size_t s = 0; s < n; ++s) {
    Metadata kv;
    if (s == 0)
      for (const auto& [k, v] : metadata_.entries())
        if (!is_reserved_key(k)) kv.set(k, v);
    // A custom alignment goes into every shard: each shard is read with its own header.
    if (alignment_ != kDefaultAlignment) kv.set("general.alignment", Value::make_u32(alignment_));
    kv.set("split.no", Value::make_u16(static_cast<uint16_t>(s)));
    kv.set("split.count", Value::make_u16(static_cast<uint16_t>(n)));
    kv.set("split.tensors.count", Value::make_i32(static_cast<int32_t>(tensors_.size())));
    std::vector<const Pending*> part;
    for (size_t k = s * max_tensors; k < tensors_.size() && k < (s + 1) * max_tensors; ++k)
      part.push_back(&tensors_[k]);
    std::string p = split_path(prefix, static_cast<int>(s + 1), static_cast<int>(n));
    DS4_TRY_VOID(write_one(p, kv, part));
    paths.push_back(std::move(p));
  }
  return paths;
}

}  // namespace ds4::gguf
