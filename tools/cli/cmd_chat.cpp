// deepinfer chat [--model DIR] [--system TEXT] [--thinking] [--reasoning-effort E]
//                [--family v4|v4_0731|v41] [-n MAX_TOKENS] [--numerics ...] [--threads N]
// Interactive chat on stdin/stdout: each line is a user turn. The conversation is rendered
// with the checkpoint's DeepSeek encoder, generated greedily until EOS, and the reply is
// streamed with reasoning shown as "[thinking] ..." and kept out of the history as the
// encoder wants (drop_thinking). Turns extend the previous prompt, so the sequence state is
// reused and only the new tokens are prefilled.
#include <cstdio>
#include <iostream>
#include <optional>

#include "args.h"
#include "command.h"
#include "core/log.h"
#include "model_cli.h"
#include "tokenizer/chat/encoder.h"
#include "tokenizer/chat/family.h"
#include "tokenizer/chat/output_parser.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::cli {
namespace {

using tokenizer::IncrementalDetokenizer;
using tokenizer::Tokenizer;

int run(const std::vector<std::string>& argv) {
  Args args(argv, {"--model", "--system", "--reasoning-effort", "--family", "-n", "--numerics", "--threads", "--kernels"},
            {"--thinking", "--verify-weights"});
  const long max_tokens = args.get_int("-n", 512);
  if (max_tokens < 1) throw ArgError("-n must be >= 1");
  const Compute compute = compute_args(args);
  auto model = load_model_arg(args);
  model->check_numerics(compute.num);
  const std::string dir = model_dir_arg(args);
  const Tokenizer tok = Tokenizer::from_file(dir + "/tokenizer.json");
  chat::ChatFamily family = chat::detect_family(dir);
  if (auto f = args.get("--family")) {
    auto parsed = chat::parse_family(*f);
    if (!parsed) throw ArgError("--family must be v4, v4_0731 or v41");
    family = *parsed;
  }
  const bool thinking = args.has("--thinking");
  chat::EncodeOptions opts;
  opts.thinking_mode = thinking ? "thinking" : "chat";
  if (auto e = args.get("--reasoning-effort")) opts.reasoning_effort = *e;

  nlohmann::json messages = nlohmann::json::array();
  if (auto sys = args.get("--system")) messages.push_back({{"role", "system"}, {"content", *sys}});
  const v4::Config& cfg = model->config();
  auto st = model->new_sequence();
  std::vector<int32_t> fed;  // tokens already in `st`
  std::vector<float> row(cfg.vocab_size);
  log_info("chat (%s encoder, %s mode): type a message, end with Ctrl-D", chat::family_name(family),
           thinking ? "thinking" : "chat");
  std::string line;
  while (std::fprintf(stdout, "> "), std::fflush(stdout), std::getline(std::cin, line)) {
    if (line.empty()) continue;
    messages.push_back({{"role", "user"}, {"content", line}});
    // What was typed is text: only the encoder's own markers are control tokens.
    std::vector<int32_t> ids = chat::tokenize_prompt(tok, chat::render_messages(family, messages, opts));
    // Reuse the state when the new prompt extends what was already fed.
    size_t common = 0;
    while (common < fed.size() && common < ids.size() && fed[common] == ids[common]) ++common;
    if (common < fed.size() || common == ids.size()) {
      st = model->new_sequence();
      fed.clear();
      common = 0;
    }
    std::vector<int32_t> fresh(ids.begin() + int64_t(common), ids.end());
    model->forward_batch({v4::SequenceChunk{fresh.data(), int64_t(fresh.size()), &st, row.data(), false}}, compute.num);
    fed.insert(fed.end(), fresh.begin(), fresh.end());

    IncrementalDetokenizer detok(tok);
    chat::OutputParser parser(family, thinking);
    chat::OutputAccumulator acc;
    auto show = [&](const std::vector<chat::ChatEvent>& events) {
      for (const auto& e : events) {
        if (e.kind == chat::ChatEventKind::Reasoning) std::fprintf(stdout, "%s", e.text.c_str());
        else if (e.kind == chat::ChatEventKind::Content) std::fprintf(stdout, "%s", e.text.c_str());
      }
      std::fflush(stdout);
      acc.add(events);
    };
    if (thinking) std::fprintf(stdout, "[thinking] ");
    for (long i = 0; i < max_tokens; ++i) {
      int32_t next = greedy_next(row.data(), cfg.vocab_size, int64_t(fed.size()) - 1);
      if (next == cfg.eos_token_id) break;
      show(parser.feed(detok.push(next)));
      model->forward(&next, 1, st, compute.num, row.data());
      fed.push_back(next);
    }
    show(parser.feed(detok.flush()));
    show(parser.finish());
    std::fprintf(stdout, "\n");
    const chat::ParsedOutput out = acc.result();
    nlohmann::json reply = {{"role", "assistant"}, {"content", out.content}};
    if (!out.reasoning_content.empty()) reply["reasoning_content"] = out.reasoning_content;
    messages.push_back(reply);
  }
  std::fprintf(stdout, "\n");
  return 0;
}

CommandRegistration reg("chat", "interactive chat with the checkpoint's DeepSeek prompt format", run,
                        "usage: deepinfer chat [--model DIR] [options]   (one user turn per stdin line)\n\n"
                        "  --model DIR                  checkpoint directory (default: the embedded random one)\n"
                        "  --system TEXT                system message\n"
                        "  --thinking                   thinking mode (reasoning shown, dropped from history)\n"
                        "  --reasoning-effort E         as the prompt family accepts it (v4: high|max, ...)\n"
                        "  --family v4|v4_0731|v41      prompt format (default: detected from the checkpoint)\n"
                        "  -n N                         most tokens per answer (default 512)\n" DI_USAGE_COMPUTE DI_USAGE_VERIFY);

}  // namespace
}  // namespace deepinfer::cli
