// fuzz-sources: src/regex/unicode_tables.cpp src/regex/unicode.cpp src/regex/syntax.cpp src/tokenizer/regex.cpp
// libFuzzer harness for the tokenizer's regex engine: the first line of the input is a
// pattern, the rest a subject (at most 24 code points). Compiling either succeeds or throws
// std::runtime_error; searching never crashes, returns in-range matches, or throws
// std::runtime_error when an attempt passes the backtracking limit (exponential patterns
// such as (?:a|a){40}b; lowered here from 10 million so such inputs cost milliseconds).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace dt = deepinfer::tokenizer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool limited = (dt::set_regex_backtrack_limit(100000), true);
  (void)limited;
  const std::string in = dt::utf8_lossy(std::string(reinterpret_cast<const char*>(data), size));
  const std::size_t nl = in.find('\n');
  const std::string pattern = in.substr(0, nl);
  const std::string subject = nl == std::string::npos ? std::string() : in.substr(nl + 1);
  if (pattern.size() > 64) return 0;
  std::vector<char32_t> cps;
  std::vector<uint8_t> cats;
  for (std::size_t i = 0; i < subject.size() && cps.size() < 24;) {
    std::size_t len;
    char32_t cp;
    dt::utf8_step(reinterpret_cast<const unsigned char*>(subject.data()) + i, subject.size() - i, len, cp);
    cps.push_back(cp);
    cats.push_back(static_cast<uint8_t>(dt::general_category(cp)));
    i += len;
  }
  try {
    const dt::Regex re(pattern);
    dt::RegexSubject s{cps.data(), cats.data(), 0, cps.size()};
    std::size_t pos = 0;
    while (pos <= cps.size()) {
      std::size_t b, e;
      if (!re.search(s, pos, b, e)) break;
      if (b < pos || e < b || e > cps.size()) std::abort();
      pos = e > b ? e : b + 1;
    }
  } catch (const std::runtime_error&) {
  }
  return 0;
}
