// JSON numbers as exact scaled integers (an __int128 in units of 10^-scale): how the schema
// compiler keeps numeric bounds and the grammar runtime tracks the digits being written,
// without the rounding of doubles. Internal to src/server.
#pragma once
#include <cstdlib>
#include <string>
#include <string_view>

namespace deepinfer::server::json_number {

inline __int128 pow10(int n) {
  __int128 v = 1;
  while (n-- > 0) v *= 10;
  return v;
}
inline const __int128 kHuge = pow10(36);  // beyond every number the grammar writes

// A JSON number's text as an integer in units of 10^-scale: *q is |value| truncated, the
// flags say whether digits were dropped and whether it is beyond kHuge.
struct Scaled {
  bool negative = false, inexact = false, huge = false;
  __int128 q = 0;
};
inline Scaled to_scaled(std::string_view t, int scale) {
  Scaled r;
  size_t i = 0;
  if (i < t.size() && t[i] == '-') r.negative = true, ++i;
  std::string digits;
  int exp = 0;
  bool dot = false;
  for (; i < t.size() && ((t[i] >= '0' && t[i] <= '9') || t[i] == '.'); ++i) {
    if (t[i] == '.') dot = true;
    else {
      digits += t[i];
      if (dot) --exp;
    }
  }
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) exp += std::atoi(std::string(t.substr(i + 1)).c_str());
  while (digits.size() > 1 && digits[0] == '0') digits.erase(0, 1);
  exp += scale;
  if (digits == "0") return r;
  if (exp >= 0) {
    if (int(digits.size()) + exp > 36) {
      r.huge = true;
      r.q = kHuge;
      return r;
    }
    for (char c : digits) r.q = r.q * 10 + (c - '0');
    r.q *= pow10(exp);
    return r;
  }
  const int drop = -exp;
  if (drop >= int(digits.size())) {
    r.inexact = true;
    return r;
  }
  const std::string keep = digits.substr(0, digits.size() - size_t(drop));
  if (keep.size() > 36) {
    r.huge = true;
    r.q = kHuge;
    return r;
  }
  for (char c : keep) r.q = r.q * 10 + (c - '0');
  r.inexact = digits.find_first_not_of('0', keep.size()) != std::string::npos;
  return r;
}
inline __int128 ceil_of(const Scaled& s) { return s.negative ? -s.q : s.q + (s.inexact ? 1 : 0); }
inline __int128 floor_of(const Scaled& s) { return s.negative ? -s.q - (s.inexact ? 1 : 0) : s.q; }

}  // namespace deepinfer::server::json_number
