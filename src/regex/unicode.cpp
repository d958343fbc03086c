#include "regex/unicode.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

namespace deepinfer::regex {

namespace ut = unicode_tables;

namespace {

constexpr char32_t kMaxCodePoint = 0x10FFFF;
constexpr std::size_t kBlockBits = 8;
constexpr std::size_t kBlockSize = std::size_t{1} << kBlockBits;
constexpr std::size_t kBlockCount = (kMaxCodePoint + 1) >> kBlockBits;

// Two-level lookup built once from the run table: block index per 256 code points, then a
// deduplicated 256-entry block of category ids.
struct CategoryTable {
  std::array<uint16_t, kBlockCount> block_of{};
  std::vector<uint8_t> blocks;

  CategoryTable() {
    std::vector<uint8_t> flat(kMaxCodePoint + 1);
    for (std::size_t i = 0; i < ut::kCategoryRunCount; ++i) {
      const uint32_t first = ut::kCategoryRuns[i].first;
      const uint32_t end = i + 1 < ut::kCategoryRunCount ? ut::kCategoryRuns[i + 1].first : kMaxCodePoint + 1;
      std::memset(flat.data() + first, ut::kCategoryRuns[i].category, end - first);
    }
    for (std::size_t b = 0; b < kBlockCount; ++b) {
      const uint8_t* src = flat.data() + b * kBlockSize;
      std::size_t found = blocks.size() / kBlockSize;
      for (std::size_t k = 0; k < blocks.size() / kBlockSize; ++k) {
        if (std::memcmp(blocks.data() + k * kBlockSize, src, kBlockSize) == 0) {
          found = k;
          break;
        }
      }
      if (found == blocks.size() / kBlockSize) blocks.insert(blocks.end(), src, src + kBlockSize);
      block_of[b] = static_cast<uint16_t>(found);
    }
  }
};

const CategoryTable& category_table() {
  static const CategoryTable table;
  return table;
}

bool in_ranges(const ut::CodeRange* ranges, std::size_t count, char32_t cp) {
  const ut::CodeRange* end = ranges + count;
  const ut::CodeRange* it =
      std::upper_bound(ranges, end, cp, [](char32_t c, const ut::CodeRange& r) { return c < r.first; });
  return it != ranges && cp <= (it - 1)->last;
}

std::string normalise_property_name(std::string_view name) {
  std::string out;
  for (char ch : name) {
    if (ch == '_' || ch == ' ' || ch == '-') continue;
    out.push_back(ch >= 'A' && ch <= 'Z' ? static_cast<char>(ch - 'A' + 'a') : ch);
  }
  return out;
}

}  // namespace

GeneralCategory general_category(char32_t cp) {
  if (cp > kMaxCodePoint) return GeneralCategory::Cn;
  const CategoryTable& t = category_table();
  return static_cast<GeneralCategory>(t.blocks[(std::size_t{t.block_of[cp >> kBlockBits]} << kBlockBits) |
                                               (cp & (kBlockSize - 1))]);
}

const char* unicode_version() { return ut::kUnicodeVersion; }

bool is_alphabetic(char32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return in_ranges(ut::kAlphabetic, ut::kAlphabeticCount, cp);
}

static bool word_core(char32_t cp) {
  constexpr CategoryMask extra = kMaskM | category_bit(GeneralCategory::Nd) | category_bit(GeneralCategory::Pc);
  return (category_bit(general_category(cp)) & extra) != 0 || is_alphabetic(cp);
}

bool is_regex_word(char32_t cp) {
  if (cp == 0xB2 || cp == 0xB3 || cp == 0xB9 || (cp >= 0xBC && cp <= 0xBE)) return true;
  return word_core(cp);
}

bool is_rust_word(char32_t cp) { return cp == 0x200C || cp == 0x200D || word_core(cp); }

std::optional<std::span<const ut::CodeRange>> script_ranges(std::string_view name) {
  const std::string key = normalise_property_name(name);
  for (std::size_t i = 0; i < ut::kScriptNameCount; ++i) {
    if (key == ut::kScriptNames[i].name) {
      return std::span<const ut::CodeRange>(ut::kScriptRanges + ut::kScriptNames[i].offset,
                                            ut::kScriptNames[i].count);
    }
  }
  return std::nullopt;
}

// ---- UTF-8 ---------------------------------------------------------------------------

Utf8Step utf8_step(const unsigned char* p, std::size_t n, std::size_t& len, char32_t& cp) {
  const unsigned char b0 = p[0];
  if (b0 < 0x80) {
    len = 1;
    cp = b0;
    return Utf8Step::kValid;
  }
  std::size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  char32_t value;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
    value = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    value = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;  // no overlong forms
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    value = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;  // no overlong forms
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    len = 1;  // 80..C1, F5..FF never start a character
    return Utf8Step::kInvalid;
  }
  for (std::size_t i = 1; i < need; ++i) {
    if (i >= n) {
      len = n;
      return Utf8Step::kIncomplete;
    }
    const unsigned char b = p[i];
    const unsigned char l = i == 1 ? lo : 0x80;
    const unsigned char h = i == 1 ? hi : 0xBF;
    if (b < l || b > h) {
      len = i;
      return Utf8Step::kInvalid;
    }
    value = (value << 6) | (b & 0x3F);
  }
  len = need;
  cp = value;
  return Utf8Step::kValid;
}

bool is_valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    // Skip ASCII eight bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    std::size_t len;
    char32_t cp;
    if (utf8_step(p + i, n - i, len, cp) != Utf8Step::kValid) return false;
    i += len;
  }
  return true;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    std::size_t len;
    char32_t cp;
    const Utf8Step st = utf8_step(p + i, n - i, len, cp);
    if (st == Utf8Step::kValid) {
      out.append(s.data() + i, len);
    } else {
      out.append("\xEF\xBF\xBD");  // U+FFFD; an incomplete tail is one maximal subpart
    }
    i += len;
  }
  return out;
}

}  // namespace deepinfer::regex
