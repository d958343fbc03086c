// Unicode helpers for the regex front end and the tokenizer: general categories, a few binary
// properties, scripts (tables generated into unicode_tables.cpp), and strict / lossy UTF-8.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "regex/unicode_tables.h"

namespace deepinfer::regex {

// Same order as CATEGORIES in tools/tokenizer/gen_unicode_tables.py.
enum class GeneralCategory : uint8_t {
  Cn, Lu, Ll, Lt, Lm, Lo, Mn, Mc, Me, Nd, Nl, No, Pc, Pd, Ps, Pe, Pi, Pf, Po,
  Sm, Sc, Sk, So, Zs, Zl, Zp, Cc, Cf, Cs, Co,
};

// Bit masks over GeneralCategory ids, for quick class tests.
using CategoryMask = uint32_t;
constexpr CategoryMask category_bit(GeneralCategory c) { return CategoryMask{1} << static_cast<int>(c); }
constexpr CategoryMask kMaskL = category_bit(GeneralCategory::Lu) | category_bit(GeneralCategory::Ll) |
                                category_bit(GeneralCategory::Lt) | category_bit(GeneralCategory::Lm) |
                                category_bit(GeneralCategory::Lo);
constexpr CategoryMask kMaskM = category_bit(GeneralCategory::Mn) | category_bit(GeneralCategory::Mc) |
                                category_bit(GeneralCategory::Me);
constexpr CategoryMask kMaskN = category_bit(GeneralCategory::Nd) | category_bit(GeneralCategory::Nl) |
                                category_bit(GeneralCategory::No);
constexpr CategoryMask kMaskP = category_bit(GeneralCategory::Pc) | category_bit(GeneralCategory::Pd) |
                                category_bit(GeneralCategory::Ps) | category_bit(GeneralCategory::Pe) |
                                category_bit(GeneralCategory::Pi) | category_bit(GeneralCategory::Pf) |
                                category_bit(GeneralCategory::Po);
constexpr CategoryMask kMaskS = category_bit(GeneralCategory::Sm) | category_bit(GeneralCategory::Sc) |
                                category_bit(GeneralCategory::Sk) | category_bit(GeneralCategory::So);
constexpr CategoryMask kMaskZ = category_bit(GeneralCategory::Zs) | category_bit(GeneralCategory::Zl) |
                                category_bit(GeneralCategory::Zp);
constexpr CategoryMask kMaskC = category_bit(GeneralCategory::Cn) | category_bit(GeneralCategory::Cc) |
                                category_bit(GeneralCategory::Cf) | category_bit(GeneralCategory::Cs) |
                                category_bit(GeneralCategory::Co);

// General category of a code point (values above U+10FFFF report Cn).
GeneralCategory general_category(char32_t cp);

// Unicode version of the generated tables, e.g. "16.0.0".
const char* unicode_version();

// White_Space property (what Oniguruma's \s and Rust's char::is_whitespace match).
constexpr bool is_white_space(char32_t c) {
  return (c >= 0x9 && c <= 0xD) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// Alphabetic property.
bool is_alphabetic(char32_t cp);

// Oniguruma's Unicode \w (what tokenizers' Split regexes see): Alphabetic, marks, decimal
// digits, connector punctuation, plus the Latin-1 digits/fractions U+00B2 U+00B3 U+00B9
// U+00BC..U+00BE (checked against tokenizers 0.23 over every code point).
bool is_regex_word(char32_t cp);

// Rust regex \w (used by tokenizers for added tokens' single_word): Alphabetic, marks,
// decimal digits, connector punctuation and Join_Control (U+200C, U+200D).
bool is_rust_word(char32_t cp);

// Script ranges by name ("Han", "Hani", "Latin", "Cyrillic", ...), matched like Oniguruma:
// case-insensitively, ignoring '_', ' ' and '-'. nullopt for an unknown script.
std::optional<std::span<const unicode_tables::CodeRange>> script_ranges(std::string_view name);

// ---- UTF-8 ---------------------------------------------------------------------------

enum class Utf8Step { kValid, kInvalid, kIncomplete };

// Looks at the sequence starting at p[0] (n >= 1 bytes available).
//   kValid:      a well-formed character of `len` bytes, value in `cp`.
//   kInvalid:    an ill-formed maximal subpart of `len` bytes (1..3) that is to be replaced
//                by one U+FFFD (Unicode's "maximal subpart" practice, as Python's
//                errors="replace" and Rust's String::from_utf8_lossy do).
//   kIncomplete: all n bytes form a valid but truncated prefix of a character (len = n).
Utf8Step utf8_step(const unsigned char* p, std::size_t n, std::size_t& len, char32_t& cp);

bool is_valid_utf8(std::string_view s);

// Replaces every ill-formed subsequence (including a truncated tail) with U+FFFD.
std::string utf8_lossy(std::string_view s);

void append_utf8(std::string& out, char32_t cp);

}  // namespace deepinfer::regex
