// deepinfer render (--family v4|v4_0731|v41 | --model DIR) --input FILE.json
// FILE holds {"messages": [...], "options": {...}, "tools": [...]?}; options are the
// reference encoder's keyword arguments (thinking_mode is required; reasoning_effort,
// drop_thinking, add_default_bos_token, context). A top-level "tools" list is put on
// the first message, as the reference's own case loader does. Prints exactly the
// prompt string. With --model the family is detected from the checkpoint
// (rule: tokenizer/chat/family.h, detect_family).
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "args.h"
#include "command.h"
#include "tokenizer/chat/encoder.h"

namespace deepinfer::cli {
namespace {

using chat::Json;

chat::ChatFamily family_arg(const Args& args) {
  auto fam = args.get("--family");
  auto model = args.get("--model");
  if (fam && model) throw ArgError("give --family or --model, not both");
  if (fam) {
    auto f = chat::parse_family(*fam);
    if (!f) throw ArgError("--family must be v4, v4_0731 or v41, got '" + *fam + "'");
    return *f;
  }
  if (model) return chat::detect_family(*model);
  throw ArgError("missing --family or --model");
}

int run(const std::vector<std::string>& argv) {
  Args args(argv, {"--family", "--model", "--input"});
  const chat::ChatFamily family = family_arg(args);
  const std::string path = args.require("--input");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  Json doc = Json::parse(ss.str(), nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) throw std::runtime_error(path + ": not a JSON object");
  for (auto it = doc.begin(); it != doc.end(); ++it)
    if (it.key() != "messages" && it.key() != "options" && it.key() != "tools")
      throw std::runtime_error(path + ": unknown key '" + it.key() + "' (expected messages, options, tools)");
  if (!doc.contains("messages")) throw std::runtime_error(path + ": missing \"messages\"");
  Json messages = doc["messages"];
  if (doc.contains("tools")) {
    if (!messages.is_array() || messages.empty() || !messages[0].is_object())
      throw std::runtime_error(path + ": \"tools\" needs a first message to attach to");
    messages[0]["tools"] = doc["tools"];
  }
  std::string prompt;
  try {
    const chat::EncodeOptions opts = chat::options_from_json(doc.value("options", Json::object()));
    prompt = chat::encode_messages(family, messages, opts);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "deepinfer render: rejected by the %s encoder: %s\n", chat::family_name(family), e.what());
    return 1;
  }
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  std::fflush(stdout);
  return 0;
}

CommandRegistration reg("render", "render a chat prompt (DeepSeek-V4 reference encoders)", run,
                        "usage: deepinfer render (--family v4|v4_0731|v41 | --model DIR) --input FILE.json\n\n"
                        "  --family v4|v4_0731|v41      prompt-format family\n"
                        "  --model DIR                  detect the family from a checkpoint instead\n"
                        "  --input FILE.json            {\"messages\": [...], \"options\": {...}, \"tools\": [...]}\n");

}  // namespace
}  // namespace deepinfer::cli
