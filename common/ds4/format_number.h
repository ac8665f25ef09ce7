// common/ds4/format_number.h — numbers in messages: integers as integers, other values in their
// shortest exact form (std::to_string(double) prints "4096.000000" and "0.000000" for 1e-7).
#pragma once

#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>

namespace ds4 {

/// `d` as text for an error or note: an integral value of magnitude below 2^53 as an integer
/// ("4096", "-1", "1000000000000"), any other finite value in the shortest form that reads back as
/// the same double (std::to_chars: "0.1", "2.5e-07", "1e+300"); "inf", "-inf", "nan".
inline std::string format_number(double d) {
  if (std::isfinite(d) && d == std::trunc(d) && std::fabs(d) < 9007199254740992.0) {
    char b[32];
    std::snprintf(b, sizeof b, "%.0f", d == 0 ? 0.0 : d);  // no "-0"
    return b;
  }
  char b[64];
  const auto r = std::to_chars(b, b + sizeof b, d);
  return std::string(b, r.ptr);
}

}  // namespace ds4
