// Subcommand registry of the `deepinfer` executable.
// A subcommand is a function taking the arguments after its name; it returns the exit code.
// Each cmd_*.cpp registers itself with a static CommandRegistration, so adding a command
// never touches main.cpp.
#pragma once
#include <string>
#include <vector>

namespace deepinfer::cli {

using CommandFn = int (*)(const std::vector<std::string>& args);

struct CommandInfo {
  std::string name;
  std::string summary;
  CommandFn fn;
};

std::vector<CommandInfo>& command_table();

struct CommandRegistration {
  CommandRegistration(const char* name, const char* summary, CommandFn fn) {
    command_table().push_back({name, summary, fn});
  }
};

// Checkpoint used when --model is omitted (made by the setup command; random weights).
std::string default_model_dir();

}  // namespace deepinfer::cli
