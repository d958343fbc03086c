// Minimal "--flag value" / "--flag" parser shared by the subcommands.
// Unknown flags are an error, so a typo never silently falls back to a default.
#pragma once
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace deepinfer::cli {

struct ArgError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Thrown by Args when the arguments hold --help or -h: main() prints the command's usage
// and exits 0. Carries the flags the command accepts, so that main() can list any flag
// the usage text forgot.
struct HelpRequested {
  std::set<std::string> value_flags, switch_flags;
};

class Args {
 public:
  // value_flags take one value; switch_flags take none. --help / -h anywhere throws
  // HelpRequested.
  Args(const std::vector<std::string>& argv, const std::set<std::string>& value_flags,
       const std::set<std::string>& switch_flags = {});
  std::optional<std::string> get(const std::string& flag) const;
  std::string get_or(const std::string& flag, const std::string& fallback) const;
  std::string require(const std::string& flag) const;
  bool has(const std::string& flag) const;
  long get_int(const std::string& flag, long fallback) const;
  double get_double(const std::string& flag, double fallback) const;

 private:
  std::map<std::string, std::string> values_;
  std::set<std::string> switches_;
};

}  // namespace deepinfer::cli
