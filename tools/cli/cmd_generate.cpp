// deepinfer generate [--model DIR] (--tokens-file F | --prompt TEXT) -n N [--numerics ...] [--threads N]
// Greedy continuation (ties to the lowest id), or sampled with --temperature and the usual
// filters and penalties, through the same Engine (scheduler, sampler, drafter) that `serve`
// and the Python package run: one request, its tokens printed as they arrive.
//   --tokens-file: prints the N continuation ids on one line (no EOS stop): the stable
//                  contract other tools and checks use.
//   --prompt:      the text is tokenized with the model's tokenizer.json (BOS prepended, special
//                  token strings matched) and the continuation is streamed as text; stops at EOS.
#include <cstdio>
#include <optional>

#include "args.h"
#include "command.h"
#include "core/log.h"
#include "model_cli.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::cli {
namespace {

using tokenizer::IncrementalDetokenizer;
using tokenizer::Tokenizer;

int run(const std::vector<std::string>& argv) {
  Args args(argv, {"--model", "--memory-limit", "--tokens-file", "--prompt", "-n", "--numerics", "--threads", "--kernels", "--speculative",
                   "--num-draft-tokens", "--temperature", "--top-k", "--top-p", "--min-p", "--repetition-penalty",
                   "--seed"},
            {"--verify-weights", "--expert-parallel", "--numa"});
  const long n = args.get_int("-n", 16);
  if (n < 0) throw ArgError("-n must be >= 0");
  const bool text_mode = args.get("--prompt").has_value();
  if (text_mode == args.get("--tokens-file").has_value()) throw ArgError("give exactly one of --tokens-file or --prompt");
  SamplingParams sp;
  sp.temperature = float(args.get_double("--temperature", 0.0));
  sp.top_k = int32_t(args.get_int("--top-k", 0));
  sp.top_p = float(args.get_double("--top-p", 1.0));
  sp.min_p = float(args.get_double("--min-p", 0.0));
  sp.repetition_penalty = float(args.get_double("--repetition-penalty", 1.0));
  if (args.get("--seed")) sp.seed = uint64_t(args.get_int("--seed", 0));
  sp.max_tokens = n;
  sp.ignore_eos = !text_mode;  // ids out: exactly n of them, EOS or not
  const EngineOptions eo = engine_options_from_args(args);
  if (world().rank() > 0) {  // mpirun: the other ranks run rank 0's steps
    run_engine_worker(eo);
    return 0;
  }
  std::vector<int32_t> tokens;
  std::optional<Tokenizer> tok;
  if (!text_mode) tokens = read_token_file(*args.get("--tokens-file"));
  auto engine = create_engine(eo);
  const EngineInfo& info = engine->info();
  if (const Status s = sp.validate(info.vocab_size); !s.ok()) throw ArgError(s.message);
  if (text_mode) {
    tok = Tokenizer::from_file(eo.model_dir + "/tokenizer.json");
    tokens.push_back(info.bos_token_id);
    const auto ids = tok->encode(*args.get("--prompt"));
    tokens.insert(tokens.end(), ids.begin(), ids.end());
  }
  std::optional<IncrementalDetokenizer> detok;
  if (tok) detok.emplace(*tok, true);
  std::string line;
  Usage usage;  // of the finished request
  if (n > 0) {
    GenerateRequest req;
    req.prompt = tokens;
    req.params = sp;
    const auto stream = engine->submit(std::move(req));
    for (bool finished = false; !finished;) {
      const std::optional<StreamEvent> ev = stream->next(std::chrono::milliseconds(500));
      if (!ev) continue;
      for (const GeneratedToken& t : ev->tokens) {
        if (detok) {
          if (t.is_stop_token) continue;  // EOS ends the text, it is not part of it
          std::fputs(detok->push(t.token).c_str(), stdout);
          std::fflush(stdout);
        } else {
          line += (line.empty() ? "" : " ") + std::to_string(t.token);
        }
      }
      finished = ev->finished;
      if (finished && ev->finish_reason == FinishReason::kError) {
        if (detok) std::printf("%s\n", detok->flush().c_str());
        throw std::runtime_error(ev->error.message);
      }
      if (finished) usage = ev->usage;
    }
  }
  auto log_drafts = [&] {
    if (usage.draft_tokens > 0)
      log_info("speculative: %lld tokens in %lld forwards; %lld drafts, %lld accepted (%.1f%%)",
               (long long)usage.completion_tokens, (long long)(usage.completion_tokens - usage.accepted_draft_tokens),
               (long long)usage.draft_tokens, (long long)usage.accepted_draft_tokens,
               100.0 * double(usage.accepted_draft_tokens) / double(usage.draft_tokens));
  };
  // Text ends its line before the log; ids stay the last line (the contract other tools read).
  if (detok) {
    std::printf("%s\n", detok->flush().c_str());
    std::fflush(stdout);
    log_drafts();
  } else {
    log_drafts();
    std::printf("%s\n", line.c_str());
  }
  return 0;
}

CommandRegistration reg("generate", "greedy (or sampled) continuation of token ids or a text prompt", run,
                        "usage: deepinfer generate [--model DIR] (--tokens-file F | --prompt TEXT) [-n N] [options]\n\n"
                        "  --model DIR                  checkpoint directory (default: the embedded one)\n"
                        "  --tokens-file F              whitespace-separated prompt ids; prints ids\n"
                        "  --prompt TEXT                text prompt (BOS + tokenizer); streams text, stops at EOS\n"
                        "  -n N                         tokens to generate (default 16)\n"
                        "  --temperature T              sample at temperature T (default 0: greedy)\n"
                        "  --top-k K, --top-p P, --min-p P, --repetition-penalty R\n"
                        "                               filters and penalty, as the API's (off by default)\n"
                        "  --seed S                     seed of the sampler (default: random)\n" DI_USAGE_COMPUTE
                        DI_USAGE_SPECULATIVE
                        DI_USAGE_VERIFY);

}  // namespace
}  // namespace deepinfer::cli
