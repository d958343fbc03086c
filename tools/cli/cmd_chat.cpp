// deepinfer chat [--model DIR] [--system TEXT] [--thinking] [--reasoning-effort E]
//                [--family v4|v4_0731|v41] [-n MAX_TOKENS] [--numerics ...] [--threads N]
//                [--speculative auto|mtp|dspark|off] [--num-draft-tokens K]
// Interactive chat on stdin/stdout: each line is a user turn. The conversation is rendered
// with the checkpoint's DeepSeek encoder, generated greedily until EOS by the same Engine
// `serve` runs (with the checkpoint's drafter verifying several tokens per forward where it
// can: the same tokens), and the reply is streamed with reasoning shown as "[thinking] ..." and
// kept out of the history as the encoder wants (drop_thinking). Each turn's prompt extends the
// previous one, so the engine's prefix cache finds the state and only the new tokens are
// prefilled.
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
  Args args(argv, {"--model", "--memory-limit", "--system", "--reasoning-effort", "--family", "-n", "--numerics", "--threads", "--kernels",
             "--speculative", "--num-draft-tokens"},
            {"--thinking", "--verify-weights", "--numa"});
  const long max_tokens = args.get_int("-n", 512);
  if (max_tokens < 1) throw ArgError("-n must be >= 1");
  const EngineOptions eo = engine_options_from_args(args);
  if (world().size() > 1) throw ArgError("chat runs in one process (serve runs under mpirun)");
  auto engine = create_engine(eo);
  const Tokenizer tok = Tokenizer::from_file(eo.model_dir + "/tokenizer.json");
  chat::ChatFamily family = chat::detect_family(eo.model_dir);
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
  const bool drafting = engine->info().speculative != "off";
  Usage totals;  // drafting counters over the session
  int64_t forwards = 0;
  log_info("chat (%s encoder, %s mode%s): type a message, end with Ctrl-D", chat::family_name(family),
           thinking ? "thinking" : "chat", drafting ? ", drafting" : "");
  std::string line;
  while (std::fprintf(stdout, "> "), std::fflush(stdout), std::getline(std::cin, line)) {
    if (line.empty()) continue;
    messages.push_back({{"role", "user"}, {"content", line}});
    // What was typed is text: only the encoder's own markers are control tokens.
    GenerateRequest req;
    req.prompt = chat::tokenize_prompt(tok, chat::render_messages(family, messages, opts));
    req.cache_points = {int64_t(req.prompt.size())};  // the next turn re-renders the answer from here
    req.params.temperature = 0.0f;                     // greedy until EOS or -n tokens
    req.params.max_tokens = max_tokens;
    const auto stream = engine->submit(std::move(req));

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
    for (bool finished = false; !finished;) {
      const std::optional<StreamEvent> ev = stream->next(std::chrono::milliseconds(500));
      if (!ev) continue;
      for (const GeneratedToken& t : ev->tokens)
        if (!t.is_stop_token) show(parser.feed(detok.push(t.token)));  // EOS ends the reply, unshown
      finished = ev->finished;
      if (finished && ev->finish_reason == FinishReason::kError) throw std::runtime_error(ev->error.message);
      if (finished) {
        totals.draft_tokens += ev->usage.draft_tokens;
        totals.accepted_draft_tokens += ev->usage.accepted_draft_tokens;
        // One forward gives the first token; each later one a token plus its accepted drafts.
        forwards += ev->usage.completion_tokens - ev->usage.accepted_draft_tokens;
      }
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
  if (totals.draft_tokens)
    log_info("speculative: %lld forwards; %lld drafts, %lld accepted (%.1f%%)", (long long)forwards,
             (long long)totals.draft_tokens, (long long)totals.accepted_draft_tokens,
             100.0 * double(totals.accepted_draft_tokens) / double(totals.draft_tokens));
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
