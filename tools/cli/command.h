// Subcommand registry of the `deepinfer` executable.
// A subcommand is a function taking the arguments after its name; it returns the exit code.
// Each cmd_*.cpp registers itself with a static CommandRegistration, so adding a command
// never touches main.cpp.
#pragma once
#include <string>
#include <vector>

#include "dist/communicator.h"

namespace deepinfer::cli {

using CommandFn = int (*)(const std::vector<std::string>& args);

struct CommandInfo {
  std::string name;
  std::string summary;
  CommandFn fn;
  std::string usage;  // `deepinfer <name> --help`: synopsis line(s), then one line per option
};

std::vector<CommandInfo>& command_table();

struct CommandRegistration {
  CommandRegistration(const char* name, const char* summary, CommandFn fn, const char* usage) {
    command_table().push_back({name, summary, fn, usage});
  }
};

// Option lines shared by the commands that run the model.
#define DI_USAGE_COMPUTE                                                                     \
  "  --numerics reference|float   quantisation points of the official code, or plain fp32\n" \
  "                               (default reference)\n"                                     \
  "  --threads N                  compute threads (default: all cores, split among the ranks\n"  \
  "                               of one machine under mpirun)\n"                            \
  "  --kernels cpu|ref            fast CPU kernels or the scalar referee (default cpu); cpu-avx2,\n"  \
  "                               cpu-avx512, cpu-scalar force one ISA of the fast kernels\n"          \
  "  --expert-parallel            under mpirun -np N: each rank holds and runs 1/N of the\n"      \
  "                               routed experts (required when N > 1)\n"                   \
  "  --numa                       several sockets: threads spread over the NUMA nodes, weights\n" \
  "                               read in interleaved over them (no change on one node)\n"  \
  "  --memory-limit SIZE          memory the process may use, e.g. 64G (default: what is free\n" \
  "                               at start, or the cgroup limit); when the weights do not fit,\n" \
  "                               dense weights stay resident and routed experts stream from disk\n"

// Speculative decoding, for the commands that decode.
#define DI_USAGE_SPECULATIVE                                                                  \
  "  --speculative auto|mtp|dspark|off  draft with the checkpoint's drafter (V4's MTP module,\n" \
  "                               the DSpark stages of V4.1 and V4-0731/0813) and verify the\n" \
  "                               drafts in one forward\n" \
  "                               (auto: the checkpoint's drafter when it has one)\n" \
  "  --num-draft-tokens K         the most drafts per step, 1..7 (default MTP 3, DSpark its\n" \
  "                               block size); fewer, down to\n" \
  "                               none, while drafts are rarely accepted\n"

// What the embedded default checkpoint is, for help texts and the start-up log.
#define DI_DEFAULT_MODEL_WHAT "a small DeepSeek-V4 trained on the King James Bible"
#define DI_USAGE_MODEL \
  "  --model DIR                  checkpoint directory (default: the embedded one, a small\n" \
  "                               DeepSeek-V4 trained on the King James Bible)\n"

// The load-time weight scan of the commands that load a model.
#define DI_USAGE_VERIFY \
  "  --verify-weights             scan every weight for NaN / Inf codes at load (reads all of them)\n"

// The job's communicator (one process unless started by mpirun; see main.cpp).
dist::Communicator& world();

// Checkpoint used when --model is omitted: models/default, copied by ./setup.sh from
// models-src/default (README "The embedded default model").
std::string default_model_dir();

}  // namespace deepinfer::cli
