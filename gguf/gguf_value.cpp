// gguf/gguf_value.cpp — metadata values and typed accessors (see gguf_value.h).
#include "gguf/gguf_value.h"

#include <cinttypes>
#include <cstdio>
#include <algorithm>
#include <limits>

namespace ds4::gguf {

std::string value_type_name(ValueType t) {
  switch (t) {
    case ValueType::UINT8: return "UINT8";
    case ValueType::INT8: return "INT8";
    case ValueType::UINT16: return "UINT16";
    case ValueType::INT16: return "INT16";
    case ValueType::UINT32: return "UINT32";
    case ValueType::INT32: return "INT32";
    case ValueType::FLOAT32: return "FLOAT32";
    case ValueType::BOOL: return "BOOL";
    case ValueType::STRING: return "STRING";
    case ValueType::ARRAY: return "ARRAY";
    case ValueType::UINT64: return "UINT64";
    case ValueType::INT64: return "INT64";
    case ValueType::FLOAT64: return "FLOAT64";
  }
  return "unknown(" + std::to_string(static_cast<uint32_t>(t)) + ")";
}

bool is_unsigned_type(ValueType t) {
  return t == ValueType::UINT8 || t == ValueType::UINT16 || t == ValueType::UINT32 ||
         t == ValueType::UINT64;
}

bool is_signed_type(ValueType t) {
  return t == ValueType::INT8 || t == ValueType::INT16 || t == ValueType::INT32 ||
         t == ValueType::INT64;
}

size_t value_type_size(ValueType t) {
  switch (t) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::BOOL: return 1;
    case ValueType::UINT16: case ValueType::INT16: return 2;
    case ValueType::UINT32: case ValueType::INT32: case ValueType::FLOAT32: return 4;
    case ValueType::UINT64: case ValueType::INT64: case ValueType::FLOAT64: return 8;
    default: return 0;
  }
}

size_t Value::array_size() const {
  if (type != ValueType::ARRAY) return 0;
  if (is_unsigned_type(array_type)) return arr_u.size();
  if (is_signed_type(array_type)) return arr_i.size();
  switch (array_type) {
    case ValueType::FLOAT32: case ValueType::FLOAT64: return arr_f.size();
    case ValueType::BOOL: return arr_b.size();
    case ValueType::STRING: return arr_s.size();
    default: return 0;
  }
}

Value Value::make_uint(ValueType t, uint64_t v) {
  Value r;
  r.type = t;
  if (is_signed_type(t)) r.i = static_cast<int64_t>(v); else r.u = v;
  return r;
}
Value Value::make_int(ValueType t, int64_t v) {
  Value r;
  r.type = t;
  if (is_unsigned_type(t)) r.u = static_cast<uint64_t>(v); else r.i = v;
  return r;
}
Value Value::make_float(ValueType t, double v) {
  Value r;
  r.type = t;
  r.f = (t == ValueType::FLOAT32) ? static_cast<double>(static_cast<float>(v)) : v;
  return r;
}
Value Value::make_u32(uint32_t v) { return make_uint(ValueType::UINT32, v); }
Value Value::make_i32(int32_t v) { return make_int(ValueType::INT32, v); }
Value Value::make_u64(uint64_t v) { return make_uint(ValueType::UINT64, v); }
Value Value::make_u16(uint16_t v) { return make_uint(ValueType::UINT16, v); }
Value Value::make_f32(float v) { return make_float(ValueType::FLOAT32, v); }
Value Value::make_bool(bool v) {
  Value r;
  r.type = ValueType::BOOL;
  r.b = v;
  return r;
}
Value Value::make_string(std::string v) {
  Value r;
  r.type = ValueType::STRING;
  r.s = std::move(v);
  return r;
}
Value Value::make_array_string(std::vector<std::string> v) {
  Value r;
  r.type = ValueType::ARRAY;
  r.array_type = ValueType::STRING;
  r.arr_s = std::move(v);
  return r;
}
Value Value::make_array_i32(const std::vector<int32_t>& v) {
  return make_array_int(ValueType::INT32, std::vector<int64_t>(v.begin(), v.end()));
}
Value Value::make_array_u32(const std::vector<uint32_t>& v) {
  return make_array_uint(ValueType::UINT32, std::vector<uint64_t>(v.begin(), v.end()));
}
Value Value::make_array_f32(const std::vector<float>& v) {
  return make_array_float(ValueType::FLOAT32, std::vector<double>(v.begin(), v.end()));
}
Value Value::make_array_uint(ValueType elem, std::vector<uint64_t> v) {
  Value r;
  r.type = ValueType::ARRAY;
  r.array_type = elem;
  r.arr_u = std::move(v);
  return r;
}
Value Value::make_array_int(ValueType elem, std::vector<int64_t> v) {
  Value r;
  r.type = ValueType::ARRAY;
  r.array_type = elem;
  r.arr_i = std::move(v);
  return r;
}
Value Value::make_array_float(ValueType elem, std::vector<double> v) {
  Value r;
  r.type = ValueType::ARRAY;
  r.array_type = elem;
  if (elem == ValueType::FLOAT32)
    for (double& x : v) x = static_cast<double>(static_cast<float>(x));
  r.arr_f = std::move(v);
  return r;
}
Value Value::make_array_bool(const std::vector<bool>& v) {
  Value r;
  r.type = ValueType::ARRAY;
  r.array_type = ValueType::BOOL;
  for (bool x : v) r.arr_b.push_back(x ? 1 : 0);
  return r;
}

bool Value::operator==(const Value& o) const {
  if (type != o.type) return false;
  if (is_unsigned_type(type)) return u == o.u;
  if (is_signed_type(type)) return i == o.i;
  switch (type) {
    case ValueType::FLOAT32: case ValueType::FLOAT64: return f == o.f;
    case ValueType::BOOL: return b == o.b;
    case ValueType::STRING: return s == o.s;
    case ValueType::ARRAY:
      return array_type == o.array_type && arr_u == o.arr_u && arr_i == o.arr_i &&
             arr_f == o.arr_f && arr_b == o.arr_b && arr_s == o.arr_s;
    default: return false;
  }
}

namespace {
std::string fmt_double(double d) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", d);
  return buf;
}
std::string quote(const std::string& s, size_t max_chars = 60) {
  std::string r = "'";
  size_t end = std::min(s.size(), max_chars);
  // Do not cut a UTF-8 sequence: back off over continuation bytes.
  while (end < s.size() && end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
  for (size_t k = 0; k < end; ++k) {
    unsigned char c = static_cast<unsigned char>(s[k]);
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      r += buf;
    } else {
      r += static_cast<char>(c);
    }
  }
  if (end < s.size()) r += "...";
  return r + "'";
}
}  // namespace

std::string value_to_string(const Value& v, size_t max_elems) {
  if (is_unsigned_type(v.type)) return std::to_string(v.u);
  if (is_signed_type(v.type)) return std::to_string(v.i);
  switch (v.type) {
    case ValueType::FLOAT32: case ValueType::FLOAT64: return fmt_double(v.f);
    case ValueType::BOOL: return v.b ? "true" : "false";
    case ValueType::STRING: return quote(v.s);
    case ValueType::ARRAY: break;
    default: return "?";
  }
  const size_t n = v.array_size();
  std::string r(1, '[');
  r += std::to_string(n);
  r += " x ";
  r += value_type_name(v.array_type);
  r += "] {";
  for (size_t k = 0; k < n && k < max_elems; ++k) {
    if (k) r += ", ";
    if (is_unsigned_type(v.array_type)) r += std::to_string(v.arr_u[k]);
    else if (is_signed_type(v.array_type)) r += std::to_string(v.arr_i[k]);
    else if (v.array_type == ValueType::BOOL) r += v.arr_b[k] ? "true" : "false";
    else if (v.array_type == ValueType::STRING) r += quote(v.arr_s[k], 24);
    else r += fmt_double(v.arr_f[k]);
  }
  if (n > max_elems) r += ", ...";
  return r + "}";
}

// ---- Metadata --------------------------------------------------------------------------------

void Metadata::set(std::string key, Value v) {
  for (auto& kv : kv_)
    if (kv.first == key) {
      kv.second = std::move(v);
      return;
    }
  kv_.emplace_back(std::move(key), std::move(v));
}

const Value* Metadata::find(std::string_view key) const {
  for (const auto& kv : kv_)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

namespace {
std::string type_desc(const Value& v) {
  if (v.type == ValueType::ARRAY) return "ARRAY of " + value_type_name(v.array_type);
  return value_type_name(v.type);
}
Error accessor_error(const std::string& src, std::string_view key, const std::string& expected,
                     const Value* v) {
  std::string where = src.empty() ? std::string("metadata") : src;
  return Error{where + ": key '" + std::string(key) + "': expected " + expected + ", found " +
               (v ? type_desc(*v) : std::string("missing"))};
}
}  // namespace

Result<uint32_t> Metadata::get_u32(std::string_view key) const {
  const Value* v = find(key);
  if (!v || v->type != ValueType::UINT32) return accessor_error(source_, key, "UINT32", v);
  return static_cast<uint32_t>(v->u);
}

Result<float> Metadata::get_f32(std::string_view key) const {
  const Value* v = find(key);
  if (!v || v->type != ValueType::FLOAT32) return accessor_error(source_, key, "FLOAT32", v);
  return static_cast<float>(v->f);
}

Result<bool> Metadata::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (!v || v->type != ValueType::BOOL) return accessor_error(source_, key, "BOOL", v);
  return v->b;
}

Result<std::string> Metadata::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v || v->type != ValueType::STRING) return accessor_error(source_, key, "STRING", v);
  return v->s;
}

Result<int64_t> Metadata::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (v && is_signed_type(v->type)) return v->i;
  if (v && is_unsigned_type(v->type)) {
    if (v->u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return Error{(source_.empty() ? std::string("metadata") : source_) + ": key '" +
                   std::string(key) + "': expected an integer <= INT64_MAX, found " +
                   std::to_string(v->u)};
    return static_cast<int64_t>(v->u);
  }
  return accessor_error(source_, key, "an integer type", v);
}

Result<double> Metadata::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (!v || (v->type != ValueType::FLOAT32 && v->type != ValueType::FLOAT64))
    return accessor_error(source_, key, "FLOAT32 or FLOAT64", v);
  return v->f;
}

Result<std::vector<int64_t>> Metadata::get_int_array(std::string_view key) const {
  const Value* v = find(key);
  if (v && v->type == ValueType::ARRAY && is_signed_type(v->array_type)) return v->arr_i;
  if (v && v->type == ValueType::ARRAY && is_unsigned_type(v->array_type)) {
    std::vector<int64_t> r;
    r.reserve(v->arr_u.size());
    for (uint64_t x : v->arr_u) {
      if (x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return Error{(source_.empty() ? std::string("metadata") : source_) + ": key '" +
                     std::string(key) + "': expected elements <= INT64_MAX, found " +
                     std::to_string(x)};
      r.push_back(static_cast<int64_t>(x));
    }
    return r;
  }
  return accessor_error(source_, key, "ARRAY of an integer type", v);
}

Result<std::vector<double>> Metadata::get_float_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v || v->type != ValueType::ARRAY ||
      (v->array_type != ValueType::FLOAT32 && v->array_type != ValueType::FLOAT64))
    return accessor_error(source_, key, "ARRAY of FLOAT32 or FLOAT64", v);
  return v->arr_f;
}

Result<std::vector<std::string>> Metadata::get_string_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v || v->type != ValueType::ARRAY || v->array_type != ValueType::STRING)
    return accessor_error(source_, key, "ARRAY of STRING", v);
  return v->arr_s;
}

}  // namespace ds4::gguf
