// deepinfer parse-output --family v4|v4_0731|v41 --text-file F [--thinking]
// Splits a completion into reasoning, content and DSML tool calls and prints
// {"content", "reasoning_content", "tool_calls": [{"name", "arguments"}]} (arguments as
// a JSON string). Malformed or truncated DSML: the JSON is still printed (failed calls
// left out), each problem goes to stderr, and the exit code is 3.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "args.h"
#include "command.h"
#include "tokenizer/chat/output_parser.h"

namespace deepinfer::cli {
namespace {

int run(const std::vector<std::string>& argv) {
  Args args(argv, {"--family", "--text-file"}, {"--thinking"});
  const std::string fam = args.require("--family");
  auto family = chat::parse_family(fam);
  if (!family) throw ArgError("--family must be v4, v4_0731 or v41, got '" + fam + "'");
  const std::string path = args.require("--text-file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  const chat::ParsedOutput p = chat::parse_output(*family, ss.str(), args.has("--thinking"));
  const std::string j = chat::parsed_output_json(p) + "\n";
  std::fwrite(j.data(), 1, j.size(), stdout);
  std::fflush(stdout);
  for (const auto& e : p.errors) std::fprintf(stderr, "deepinfer parse-output: %s\n", e.c_str());
  return p.errors.empty() ? 0 : 3;
}

CommandRegistration reg("parse-output", "split model output into reasoning, content and DSML tool calls", run,
                        "usage: deepinfer parse-output --family v4|v4_0731|v41 --text-file F [--thinking]\n\n"
                        "  --family v4|v4_0731|v41      prompt-format family of the model\n"
                        "  --text-file F                the model output\n"
                        "  --thinking                   the prompt ended in <think> (output starts in reasoning)\n"
                        "exit status 3 when the output has parse errors (listed on stderr)\n");

}  // namespace
}  // namespace deepinfer::cli
