// deepinfer chat [--model DIR] [--system TEXT] [--thinking] [--reasoning-effort E]
//                [--family v4|v4_0731|v41] [-n MAX_TOKENS] [--numerics ...] [--threads N]
//                [--speculative auto|mtp|dspark|off] [--num-draft-tokens K]
// Interactive chat on stdin/stdout: each line is a user turn. The conversation is rendered
// with the checkpoint's DeepSeek encoder, generated greedily until EOS (with the checkpoint's
// drafter verifying several tokens per forward where it can: the same tokens), and the reply is
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
#include "spec_decode.h"
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
  Args args(argv, {"--model", "--system", "--reasoning-effort", "--family", "-n", "--numerics", "--threads", "--kernels",
             "--speculative", "--num-draft-tokens"},
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
  SpecDecodeOptions so;
  so.max_drafts = speculative_args(args, *model);
  std::optional<SpecDecoder> dec;
  SpecDecodeResult totals;  // drafting counters over the session
  log_info("chat (%s encoder, %s mode%s): type a message, end with Ctrl-D", chat::family_name(family),
           thinking ? "thinking" : "chat", so.max_drafts ? ", drafting" : "");
  std::string line;
  while (std::fprintf(stdout, "> "), std::fflush(stdout), std::getline(std::cin, line)) {
    if (line.empty()) continue;
    messages.push_back({{"role", "user"}, {"content", line}});
    // What was typed is text: only the encoder's own markers are control tokens.
    std::vector<int32_t> ids = chat::tokenize_prompt(tok, chat::render_messages(family, messages, opts));
    // Reuse the state when the new prompt extends what was already fed.
    size_t common = 0;
    const int64_t fed = dec ? dec->n_fed() : 0;
    if (dec) {
      const std::vector<int32_t>& h = dec->history();
      while (int64_t(common) < fed && common < ids.size() && h[common] == ids[common]) ++common;
    }
    if (!dec || int64_t(common) < fed || common == ids.size()) {
      dec.emplace(*model, compute.num, so);
      common = 0;
    }
    dec->feed(std::vector<int32_t>(ids.begin() + int64_t(common), ids.end()));

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
    // Greedy until EOS (not shown) or max_tokens.
    const SpecDecodeResult r = dec->generate(max_tokens, [&](int32_t t) {
      if (t == cfg.eos_token_id) return false;
      show(parser.feed(detok.push(t)));
      return true;
    });
    totals.drafted += r.drafted;
    totals.accepted += r.accepted;
    totals.forward_steps += r.forward_steps;
    show(parser.feed(detok.flush()));
    show(parser.finish());
    std::fprintf(stdout, "\n");
    const chat::ParsedOutput out = acc.result();
    nlohmann::json reply = {{"role", "assistant"}, {"content", out.content}};
    if (!out.reasoning_content.empty()) reply["reasoning_content"] = out.reasoning_content;
    messages.push_back(reply);
  }
  std::fprintf(stdout, "\n");
  if (totals.drafted)
    log_info("speculative: %lld forwards; %lld drafts, %lld accepted (%.1f%%)", (long long)totals.forward_steps,
             (long long)totals.drafted, (long long)totals.accepted, 100.0 * double(totals.accepted) / double(totals.drafted));
  return 0;
}

CommandRegistration reg("chat", "interactive chat with the checkpoint's DeepSeek prompt format", run,
                        "usage: deepinfer chat [--model DIR] [options]   (one user turn per stdin line)\n\n"
                        DI_USAGE_MODEL
                        "  --system TEXT                system message\n"
                        "  --thinking                   thinking mode (reasoning shown, dropped from history)\n"
                        "  --reasoning-effort E         as the prompt family accepts it (v4: high|max, ...)\n"
                        "  --family v4|v4_0731|v41      prompt format (default: detected from the checkpoint)\n"
                        "  -n N                         most tokens per answer (default 512)\n" DI_USAGE_COMPUTE DI_USAGE_SPECULATIVE
                        DI_USAGE_VERIFY);

}  // namespace
}  // namespace deepinfer::cli
