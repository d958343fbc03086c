// deepinfer: one executable, one subcommand per job (logits, generate, tokenize, ...).
#include <pthread.h>

#include <cctype>
#include <csignal>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "args.h"
#include "command.h"
#include "core/log.h"
#include "dist/communicator.h"

namespace deepinfer::cli {

std::vector<CommandInfo>& command_table() {
  static std::vector<CommandInfo> table;
  return table;
}

// The default checkpoint travels with the executable: beside it (models/default), in the
// installed tree (bin/../share/deepinfer/models/default), or in the checkout whose build/ holds
// it (../models/default); the source tree's path compiled in is the last resort, so a binary
// that was moved, installed or whose checkout moved still finds its model.
std::string default_model_dir() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const std::filesystem::path dir = exe.parent_path();
    for (const char* rel : {"models/default", "../share/deepinfer/models/default", "../models/default"}) {
      const std::filesystem::path candidate = dir / rel;
      if (std::filesystem::is_regular_file(candidate / "config.json", ec))
        return candidate.lexically_normal().string();
    }
  }
  return DEEPINFER_DEFAULT_MODEL_DIR;
}

// The job's communicator, made first thing in main (MPI must be initialised once per process,
// before any thread starts) and finalised last.
static std::unique_ptr<dist::Communicator> g_world;
dist::Communicator& world() { return *g_world; }

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
    using deepinfer::cli::g_world;
    // The threads MPI starts must never take the stop signals (the default action would end
    // the process there): they inherit this mask; the main thread unblocks right after.
    sigset_t stop_signals, old_mask;
    sigemptyset(&stop_signals);
    for (int sig : {SIGINT, SIGTERM, SIGUSR1}) sigaddset(&stop_signals, sig);
    pthread_sigmask(SIG_BLOCK, &stop_signals, &old_mask);
    try {
      g_world = deepinfer::dist::make_world();
      pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "deepinfer %s: error: %s\n", name.c_str(), e.what());
      return 1;
    }
    const int rank = g_world->rank(), n_ranks = g_world->size();
    if (n_ranks > 1) {
      // Every rank runs the command in lockstep; rank 0 speaks for the job on stdout.
      const std::string prefix = "rank " + std::to_string(rank) + ": ";
      deepinfer::set_log_prefix(prefix.c_str());
      if (rank > 0 && !std::freopen("/dev/null", "w", stdout)) g_world->abort("cannot silence stdout");
    }
    int rc = 0;
    try {
      rc = c.fn(rest);
    } catch (const deepinfer::cli::HelpRequested& h) {
      rc = rank == 0 ? print_command_help(c, h) : 0;
    } catch (const deepinfer::dist::RankError& e) {
      // Every rank raised it together (dist::agree): one line for the job.
      if (rank == 0) std::fprintf(stderr, "deepinfer %s: error: %s\n", name.c_str(), e.what());
      rc = 1;
    } catch (const deepinfer::cli::ArgError& e) {
      if (n_ranks > 1) g_world->abort(name + ": " + e.what());
      std::fprintf(stderr, "deepinfer %s: %s\n", name.c_str(), e.what());
      rc = 2;
    } catch (const std::exception& e) {
      // A failure on one rank alone would leave the others waiting in a collective: end the job.
      if (n_ranks > 1) g_world->abort(name + ": " + e.what());
      std::fprintf(stderr, "deepinfer %s: error: %s\n", name.c_str(), e.what());
      rc = 1;
    }
    std::fflush(stdout);
    g_world.reset();
    return rc;
  }
  std::fprintf(stderr, "deepinfer: unknown command '%s'\n", name.c_str());
  print_usage(stderr);
  return 2;
}
