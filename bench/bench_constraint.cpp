// Token-mask cost of constrained decoding (server/token_constraint.h) on the real DeepSeek-V4
// vocabulary (tests/data/tokenizer/v4_tokenizer.json): one mask per token while a JSON
// document is replayed token by token under response_format json_schema / json_object, and
// the mask in a few fixed states (inside a long string, after '{', inside a number).
// Time per iteration = one mask (the average over the document's tokens for Document/*).
//
//   bench_constraint [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "server/json_grammar.h"
#include "server/token_constraint.h"
#include "tokenizer/tokenizer.h"

using namespace deepinfer;
using namespace deepinfer::server;
using deepinfer::chat::Json;

namespace {

const tokenizer::Tokenizer& v4() {
  static const tokenizer::Tokenizer tok =
      tokenizer::Tokenizer::from_file(std::string(DI_TEST_DATA_DIR) + "/tokenizer/v4_tokenizer.json");
  return tok;
}

std::shared_ptr<const TokenIndex> v4_index() {
  static TokenIndexCache cache;
  return cache.get(v4());
}

// One line, one space after ':' and ',': the compact form sampled documents take.
const char* kDocument =
    R"({"name": "Alice Johnson", "age": 34, "email": "alice.johnson@example.com", )"
    R"("bio": "Alice has worked as a data engineer for eleven years, mostly on streaming pipelines; she enjoys )"
    R"(hiking, chess and writing about distributed systems.", "tags": ["engineer", "speaker", "mentor"], )"
    R"("scores": [1.5, 2.25, 3.125], "active": true, "manager": null})";

const char* kSchema = R"({"type": "object", "properties": {
  "name": {"type": "string"}, "age": {"type": "integer"}, "email": {"type": "string"},
  "bio": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}},
  "scores": {"type": "array", "items": {"type": "number"}}, "active": {"type": "boolean"},
  "manager": {"type": ["string", "null"]}},
  "required": ["name", "age", "email", "bio", "tags", "scores", "active", "manager"],
  "additionalProperties": false})";

std::shared_ptr<TokenConstraint> constraint(const Json& schema) {
  JsonGrammar g(JsonSchema{}, true);
  const int32_t root = g.add_schema(schema);
  ConstraintStart st;
  st.index = v4_index();
  st.eos_token_id = 1;
  return make_json_constraint(std::move(st), std::move(g), root);
}

// Replays the document: one mask per token (the mask is checked to allow the next token).
void replay(benchmark::State& state, const Json& schema) {
  const auto& tok = v4();
  const std::vector<int32_t> ids = tok.encode(kDocument, false);
  const int64_t V = tok.vocab_size();
  std::vector<uint64_t> mask(size_t((V + 63) / 64));
  int64_t masks = 0;
  for (auto _ : state) {
    auto c = constraint(schema);
    for (int32_t t : ids) {
      std::fill(mask.begin(), mask.end(), 0);
      c->allowed(mask.data(), V);
      if (!((mask[size_t(t) / 64] >> (t % 64)) & 1)) {
        state.SkipWithError("the mask refused the document's next token");
        return;
      }
      c->accept(t);
      ++masks;
    }
  }
  state.SetItemsProcessed(masks);
  // Seconds per mask (printed with an SI prefix: 45u = 45 us).
  state.counters["per_mask"] =
      benchmark::Counter(double(masks), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void Document_Schema(benchmark::State& state) { replay(state, Json::parse(kSchema)); }
void Document_JsonObject(benchmark::State& state) { replay(state, Json{{"type", "object"}}); }

// The mask in one fixed state, reached by feeding `prefix`.
void fixed_state(benchmark::State& state, const char* prefix) {
  const auto& tok = v4();
  const int64_t V = tok.vocab_size();
  std::vector<uint64_t> mask(size_t((V + 63) / 64));
  auto c = constraint(Json{{"type", "object"}});
  for (int32_t t : tok.encode(prefix, false)) c->accept(t);
  for (auto _ : state) {
    std::fill(mask.begin(), mask.end(), 0);
    c->allowed(mask.data(), V);
    benchmark::DoNotOptimize(mask.data());
  }
}

void State_InString(benchmark::State& state) { fixed_state(state, "{\"a\": \"hello wor"); }
void State_AfterBrace(benchmark::State& state) { fixed_state(state, "{"); }
void State_InNumber(benchmark::State& state) { fixed_state(state, "{\"a\": 12"); }

}  // namespace

BENCHMARK(Document_Schema)->Unit(benchmark::kMillisecond);
BENCHMARK(Document_JsonObject)->Unit(benchmark::kMillisecond);
BENCHMARK(State_InString)->Unit(benchmark::kMicrosecond);
BENCHMARK(State_AfterBrace)->Unit(benchmark::kMicrosecond);
BENCHMARK(State_InNumber)->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
