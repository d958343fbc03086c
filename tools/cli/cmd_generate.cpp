// deepinfer generate [--model DIR] (--tokens-file F | --prompt TEXT) -n N [--numerics ...] [--threads N]
// Greedy continuation (ties to the lowest id), or sampled with --temperature and the usual
// filters and penalties (the server's sampler; --seed makes it reproducible).
//   --tokens-file: prints the N continuation ids on one line (no EOS stop): the stable
//                  contract other tools and checks use.
//   --prompt:      the text is tokenized with the model's tokenizer.json (BOS prepended, special
//                  token strings matched) and the continuation is streamed as text; stops at EOS.
#include <cstdio>
#include <optional>
#include <random>

#include "args.h"
#include "command.h"
#include "core/log.h"
#include "engine/sampler.h"
#include "model_cli.h"
#include "spec_decode.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::cli {
namespace {

using tokenizer::IncrementalDetokenizer;
using tokenizer::Tokenizer;

int run(const std::vector<std::string>& argv) {
  Args args(argv, {"--model", "--tokens-file", "--prompt", "-n", "--numerics", "--threads", "--kernels", "--speculative",
                   "--num-draft-tokens", "--temperature", "--top-k", "--top-p", "--min-p", "--repetition-penalty",
                   "--seed"},
            {"--verify-weights", "--expert-parallel"});
  const long n = args.get_int("-n", 16);
  if (n < 0) throw ArgError("-n must be >= 0");
  const bool text_mode = args.get("--prompt").has_value();
  if (text_mode == args.get("--tokens-file").has_value()) throw ArgError("give exactly one of --tokens-file or --prompt");
  const Compute compute = compute_args(args);
  const v4::Numerics& num = compute.num;
  auto model = load_model_arg(args);
  model->check_numerics(num);
  const v4::Config& cfg = model->config();
  std::optional<Tokenizer> tok;
  std::vector<int32_t> tokens;
  if (text_mode) {
    tok = Tokenizer::from_file(model_dir_arg(args) + "/tokenizer.json");
    tokens.push_back(int32_t(cfg.bos_token_id));
    auto ids = tok->encode(*args.get("--prompt"));
    tokens.insert(tokens.end(), ids.begin(), ids.end());
  } else {
    tokens = read_token_file(*args.get("--tokens-file"));
  }
  const int64_t V = cfg.vocab_size;
  SamplingParams sp;
  sp.temperature = float(args.get_double("--temperature", 0.0));
  sp.top_k = int32_t(args.get_int("--top-k", 0));
  sp.top_p = float(args.get_double("--top-p", 1.0));
  sp.min_p = float(args.get_double("--min-p", 0.0));
  sp.repetition_penalty = float(args.get_double("--repetition-penalty", 1.0));
  if (args.get("--seed")) sp.seed = uint64_t(args.get_int("--seed", 0));
  if (const Status s = sp.validate(V); !s.ok()) throw ArgError(s.message);
  const bool sampled = !sp.greedy() || sp.repetition_penalty != 1.0f;
  // Drafts are verified greedily here (the server verifies sampled ones too).
  if (sampled && args.get("--speculative") && *args.get("--speculative") != "off")
    throw ArgError("--speculative: generate drafts for greedy decoding only (no --temperature or penalties)");
  const int64_t drafts = sampled ? 0 : speculative_args(args, *model);
  std::optional<IncrementalDetokenizer> detok;
  if (tok) detok.emplace(*tok, true);
  if (drafts > 0) {  // the same greedy tokens, several per forward where the drafts hold
    std::string line;
    SpecDecodeOptions so;
    so.max_drafts = drafts;
    const SpecDecodeResult r = spec_decode(*model, num, tokens, n, so, [&](int32_t t) {
      if (detok) {
        if (t == cfg.eos_token_id) return false;
        std::fputs(detok->push(t).c_str(), stdout);
        std::fflush(stdout);
      } else {
        line += (line.empty() ? "" : " ") + std::to_string(t);
      }
      return true;
    });
    if (detok) std::printf("%s\n", detok->flush().c_str());
    else std::printf("%s\n", line.c_str());
    log_info("speculative: %lld tokens in %lld forwards; %lld drafts, %lld accepted (%.1f%%)",
             (long long)r.tokens.size(), (long long)r.forward_steps + 1, (long long)r.drafted, (long long)r.accepted,
             r.drafted ? 100.0 * double(r.accepted) / double(r.drafted) : 0.0);
    return 0;
  }
  auto st = model->new_sequence();
  std::vector<float> row(V);
  engine::Sampler sampler(V);
  engine::PenaltyState history;
  history.prompt_tokens.insert(tokens.begin(), tokens.end());
  engine::Rng rng(sp.seed ? *sp.seed : std::random_device{}());
  auto choose = [&](int64_t pos) {
    // A non-finite row is refused as the engine refuses it, sampled or not: greedy_next
    // throws naming the position and the likely cause (the sampler would treat NaN as -inf
    // and print tokens from a broken model).
    if (!sampled || first_nonfinite(row.data(), V) >= 0) return greedy_next(row.data(), V, pos);
    const int32_t t = sampler.sample(row.data(), sp, history, rng).token;
    history.add_output(t);
    return t;
  };
  model->forward_batch({v4::SequenceChunk{tokens.data(), int64_t(tokens.size()), &st, row.data(), false}}, num);
  int32_t next = choose(int64_t(tokens.size()) - 1);
  std::string line;
  for (long i = 0; i < n; ++i) {
    if (detok) {
      if (next == cfg.eos_token_id) break;
      std::fputs(detok->push(next).c_str(), stdout);
      std::fflush(stdout);
    } else {
      if (i) line += ' ';
      line += std::to_string(next);
    }
    if (i + 1 == n) break;
    model->forward(&next, 1, st, num, row.data());
    next = choose(int64_t(tokens.size()) + i);
  }
  if (detok) std::printf("%s\n", detok->flush().c_str());
  else std::printf("%s\n", line.c_str());
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
