// ds4/result.h — the project's error type for input errors (files, configs, requests, limits).
//
// Two tiers (DESIGN.md "Errors"): programmer errors abort via DS4_CHECK with file, line and
// statement; input errors are values: a Result<T> holding either T or an Error whose message says
// what was expected and what was found. No exceptions cross module boundaries for input errors.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

namespace ds4 {

/// An input error: one human-readable message naming the file/tensor/key, the expected value and
/// the value found, e.g. "model.gguf: tensor 'blk.0.attn_q_a.weight': expected type Q8_0, found F16".
struct Error {
  std::string message;
};

/// Either a value of type T or an Error. Check with ok() / operator bool before value().
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Error error) : v_(std::move(error)) {}     // NOLINT: implicit by design
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { check(); return std::get<0>(v_); }
  const T& value() const& { check(); return std::get<0>(v_); }
  T&& value() && { check(); return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  const Error& error() const {
    if (ok()) { std::fprintf(stderr, "ds4: Result::error() on a value\n"); std::abort(); }
    return std::get<1>(v_);
  }

 private:
  void check() const {
    if (!ok()) {
      std::fprintf(stderr, "ds4: Result::value() on an error: %s\n", std::get<1>(v_).message.c_str());
      std::abort();
    }
  }
  std::variant<T, Error> v_;
};

/// Success or an Error, for operations without a value.
template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : err_(std::move(error)), has_err_(true) {}  // NOLINT
  bool ok() const { return !has_err_; }
  explicit operator bool() const { return ok(); }
  const Error& error() const { return err_; }

 private:
  Error err_;
  bool has_err_ = false;
};

/// Result<void> success value.
inline Result<void> ok() { return {}; }

}  // namespace ds4

/// Programmer error check: aborts with file, line and the failed statement.
#define DS4_CHECK(cond)                                                                    \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "ds4: check failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)

/// Propagates an error: `DS4_TRY(auto f, open(path));` declares f from a Result or returns its Error.
#define DS4_CONCAT_INNER(a, b) a##b
#define DS4_CONCAT(a, b) DS4_CONCAT_INNER(a, b)
#define DS4_TRY_IMPL(tmp, decl, expr) \
  auto tmp = (expr);                  \
  if (!tmp.ok()) return tmp.error();  \
  decl = std::move(tmp).value()
#define DS4_TRY(decl, expr) DS4_TRY_IMPL(DS4_CONCAT(ds4_try_, __LINE__), decl, expr)
/// Propagates the error of a Result<void> (or any Result whose value is unused).
#define DS4_TRY_VOID(expr)                               \
  do {                                                   \
    auto ds4_try_v = (expr);                             \
    if (!ds4_try_v.ok()) return ds4_try_v.error();       \
  } while (0)
