#include "args.h"

#include <cmath>
#include <cstdlib>

namespace deepinfer::cli {

Args::Args(const std::vector<std::string>& argv, const std::set<std::string>& value_flags,
           const std::set<std::string>& switch_flags) {
  for (const std::string& a : argv)
    if (a == "--help" || a == "-h") throw HelpRequested{value_flags, switch_flags};
  for (size_t i = 0; i < argv.size(); ++i) {
    std::string a = argv[i];
    std::string value;
    bool has_inline = false;
    if (auto eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
      has_inline = true;
    }
    if (value_flags.count(a)) {
      if (!has_inline) {
        if (i + 1 >= argv.size()) throw ArgError("missing value for " + a);
        value = argv[++i];
      }
      values_[a] = value;
    } else if (switch_flags.count(a) && !has_inline) {
      switches_.insert(a);
    } else {
      throw ArgError("unknown argument '" + argv[i] + "'");
    }
  }
}

std::optional<std::string> Args::get(const std::string& flag) const {
  auto it = values_.find(flag);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string Args::get_or(const std::string& flag, const std::string& fallback) const {
  return get(flag).value_or(fallback);
}

std::string Args::require(const std::string& flag) const {
  auto v = get(flag);
  if (!v) throw ArgError("missing required argument " + flag);
  return *v;
}

bool Args::has(const std::string& flag) const { return switches_.count(flag) > 0; }

long Args::get_int(const std::string& flag, long fallback) const {
  auto v = get(flag);
  if (!v) return fallback;
  char* end = nullptr;
  long x = std::strtol(v->c_str(), &end, 10);
  if (end == v->c_str() || *end != '\0') throw ArgError(flag + " expects an integer, got '" + *v + "'");
  return x;
}

double Args::get_double(const std::string& flag, double fallback) const {
  auto v = get(flag);
  if (!v) return fallback;
  char* end = nullptr;
  double x = std::strtod(v->c_str(), &end);
  if (end == v->c_str() || *end != '\0' || !std::isfinite(x))
    throw ArgError(flag + " expects a number, got '" + *v + "'");
  return x;
}

}  // namespace deepinfer::cli
