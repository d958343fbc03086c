// deepinfer: one executable, one subcommand per job (logits, generate, tokenize, ...).
#include <cctype>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "args.h"
#include "command.h"

namespace deepinfer::cli {

std::vector<CommandInfo>& command_table() {
  static std::vector<CommandInfo> table;
  return table;
}

std::string default_model_dir() { return DEEPINFER_DEFAULT_MODEL_DIR; }

}  // namespace deepinfer::cli

static void print_usage(std::FILE* out) {
  std::fprintf(out, "usage: deepinfer <command> [options]\n       deepinfer <command> --help\n\ncommands:\n");
  for (const auto& c : deepinfer::cli::command_table())
    std::fprintf(out, "  %-14s %s\n", c.name.c_str(), c.summary.c_str());
}

// `deepinfer <command> --help`: the command's usage text, then any flag the command accepts
// that the text does not mention (so that the help never hides an option).
static int print_command_help(const deepinfer::cli::CommandInfo& c, const deepinfer::cli::HelpRequested& h) {
  std::printf("deepinfer %s: %s\n\n%s", c.name.c_str(), c.summary.c_str(), c.usage.c_str());
  auto mentioned = [&](const std::string& flag) {
    for (size_t p = c.usage.find(flag); p != std::string::npos; p = c.usage.find(flag, p + 1)) {
      const size_t end = p + flag.size();
      if (end == c.usage.size() || !(std::isalnum((unsigned char)c.usage[end]) || c.usage[end] == '-')) return true;
    }
    return false;
  };
  std::string missing;
  for (const auto* set : {&h.value_flags, &h.switch_flags})
    for (const std::string& f : *set)
      if (!mentioned(f)) missing += " " + f;
  if (!missing.empty()) std::printf("\nother options:%s\n", missing.c_str());
  std::printf("  -h, --help                   this text\n");
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return 2;
  }
  std::string name = argv[1];
  std::vector<std::string> rest(argv + 2, argv + argc);
  if (name == "--help" || name == "-h" || (name == "help" && rest.empty())) {
    print_usage(stdout);
    return 0;
  }
  if (name == "help") {  // deepinfer help <command> = deepinfer <command> --help
    name = rest[0];
    rest = {"--help"};
  }
  for (const auto& c : deepinfer::cli::command_table()) {
    if (c.name != name) continue;
    try {
      return c.fn(rest);
    } catch (const deepinfer::cli::HelpRequested& h) {
      return print_command_help(c, h);
    } catch (const deepinfer::cli::ArgError& e) {
      std::fprintf(stderr, "deepinfer %s: %s\n", name.c_str(), e.what());
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "deepinfer %s: error: %s\n", name.c_str(), e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "deepinfer: unknown command '%s'\n", name.c_str());
  print_usage(stderr);
  return 2;
}
