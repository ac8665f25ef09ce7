// gguf/gguf_value.h — GGUF v3 metadata values and the typed accessor table.
//
// Format source: ggml-org/ggml docs/gguf.md and src/gguf.cpp (value type ids 0..12; arrays are
// u32 element type + u64 count; ggml rejects nested arrays). See ../shared/reference/quant-formats.md §1.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ds4/result.h"

namespace ds4::gguf {

/// GGUF metadata value type ids (u32 in the file).
enum class ValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};

/// Name of a value type as in the spec ("UINT32"), or "unknown(N)".
std::string value_type_name(ValueType t);

/// One metadata value. Integer scalars are kept as `u`/`i` (by signedness), floats as `f`
/// (FLOAT32 values are exactly representable), BOOL in `b`, STRING in `s`. An ARRAY keeps its
/// element type in `array_type` and its elements in the vector of the matching kind
/// (`arr_u`, `arr_i`, `arr_f`, `arr_b`, `arr_s`); nested arrays are never produced.
struct Value {
  ValueType type = ValueType::UINT8;
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0;
  bool b = false;
  std::string s;
  ValueType array_type = ValueType::UINT8;
  std::vector<uint64_t> arr_u;
  std::vector<int64_t> arr_i;
  std::vector<double> arr_f;
  std::vector<uint8_t> arr_b;
  std::vector<std::string> arr_s;

  /// Number of elements of an ARRAY (0 for scalars).
  size_t array_size() const;

  /// Scalar of any integer type `t` (UINT8..INT64); `v` is stored in `u` or `i` by signedness
  /// (the caller keeps it in range of `t`).
  static Value make_uint(ValueType t, uint64_t v);
  static Value make_int(ValueType t, int64_t v);
  /// FLOAT32 (rounded to float) or FLOAT64.
  static Value make_float(ValueType t, double v);
  static Value make_u32(uint32_t v);
  static Value make_i32(int32_t v);
  static Value make_u64(uint64_t v);
  static Value make_u16(uint16_t v);
  static Value make_f32(float v);
  static Value make_bool(bool v);
  static Value make_string(std::string v);
  static Value make_array_string(std::vector<std::string> v);
  static Value make_array_i32(const std::vector<int32_t>& v);
  static Value make_array_u32(const std::vector<uint32_t>& v);
  static Value make_array_f32(const std::vector<float>& v);
  /// Arrays of any scalar element type: unsigned ints, signed ints, floats, bools.
  static Value make_array_uint(ValueType elem, std::vector<uint64_t> v);
  static Value make_array_int(ValueType elem, std::vector<int64_t> v);
  static Value make_array_float(ValueType elem, std::vector<double> v);
  static Value make_array_bool(const std::vector<bool>& v);

  /// Field-wise equality (type, element type and the fields that type uses).
  bool operator==(const Value& o) const;
};

/// True for UINT8, UINT16, UINT32, UINT64.
bool is_unsigned_type(ValueType t);
/// True for INT8, INT16, INT32, INT64.
bool is_signed_type(ValueType t);
/// Bytes of one scalar in the file (UINT8 1 ... FLOAT64 8); 0 for STRING and ARRAY.
size_t value_type_size(ValueType t);
/// One-line rendering of a value for messages and `inspect` ("[3 x STRING] {'a', 'b', ...}").
/// Arrays longer than `max_elems` are summarised.
std::string value_to_string(const Value& v, size_t max_elems = 8);

/// Metadata key/value pairs in file order, with typed accessors. Every accessor fails with an
/// Error naming the key, the expected type and the type found (or "missing").
class Metadata {
 public:
  /// Appends or replaces `key`.
  void set(std::string key, Value v);
  const Value* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }
  const std::vector<std::pair<std::string, Value>>& entries() const { return kv_; }

  /// Exact-type accessors: the stored type must be the one named.
  Result<uint32_t> get_u32(std::string_view key) const;
  Result<float> get_f32(std::string_view key) const;
  Result<bool> get_bool(std::string_view key) const;
  Result<std::string> get_string(std::string_view key) const;
  /// Any integer type (UINT8..INT64), range-checked into int64.
  Result<int64_t> get_int(std::string_view key) const;
  /// FLOAT32 or FLOAT64.
  Result<double> get_float(std::string_view key) const;
  /// Arrays: element type must be integer / float / string respectively.
  Result<std::vector<int64_t>> get_int_array(std::string_view key) const;
  Result<std::vector<double>> get_float_array(std::string_view key) const;
  Result<std::vector<std::string>> get_string_array(std::string_view key) const;

  /// Where errors should say the values came from (file name), e.g. "model.gguf".
  void set_source(std::string source) { source_ = std::move(source); }
  const std::string& source() const { return source_; }

 private:
  std::vector<std::pair<std::string, Value>> kv_;
  std::string source_;
};

}  // namespace ds4::gguf
