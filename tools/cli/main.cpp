// deepinfer: one executable, one subcommand per job (logits, generate, tokenize, ...).
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

static void print_usage() {
  std::fprintf(stderr, "usage: deepinfer <command> [options]\n\ncommands:\n");
  for (const auto& c : deepinfer::cli::command_table())
    std::fprintf(stderr, "  %-14s %s\n", c.name.c_str(), c.summary.c_str());
}

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    print_usage();
    return argc < 2 ? 2 : 0;
  }
  std::string name = argv[1];
  std::vector<std::string> rest(argv + 2, argv + argc);
  for (const auto& c : deepinfer::cli::command_table()) {
    if (c.name != name) continue;
    try {
      return c.fn(rest);
    } catch (const deepinfer::cli::ArgError& e) {
      std::fprintf(stderr, "deepinfer %s: %s\n", name.c_str(), e.what());
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "deepinfer %s: error: %s\n", name.c_str(), e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "deepinfer: unknown command '%s'\n", name.c_str());
  print_usage();
  return 2;
}
