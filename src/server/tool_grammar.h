// A byte-level grammar of DeepSeek's DSML tool-call block, for tool_choice "required" and
// named functions (and "auto": see below): the output after the forced block opener is
// exactly what the chat encoder renders for an assistant tool call (tokenizer/chat/encoder.cpp),
// so the output parser turns it into tool_calls:
//
//   [forced] "\n\n<｜DSML｜tool_calls>\n" ["<｜DSML｜invoke name=\"X\">\n" when named]
//   invoke   = "<｜DSML｜invoke name=\"" NAME "\">\n" params "\n</｜DSML｜invoke>"
//   params   = "" | param ("\n" param)*
//   param    = "<｜DSML｜parameter name=\"" KEY "\" string=\"true\">" TEXT "</｜DSML｜parameter>"
//            | "<｜DSML｜parameter name=\"" KEY "\" string=\"false\">" JSON "</｜DSML｜parameter>"
//   block    = invoke ("\n" invoke)* "\n</｜DSML｜tool_calls>"   then only EOS
// (V4.1 spells the tags "｜DSML｜ calls", "｜DSML｜ invoke", "｜DSML｜ parameter".)
//
// NAME is one of the request's tools, however many (a sorted name list narrowed byte by
// byte). KEY is a property of that tool's "parameters" schema, each at most once, and
// "</invoke>" needs every "required" one. A tool whose parameters declare no properties
// takes up to 4 distinct [A-Za-z0-9_.-] keys (their values follow additionalProperties),
// unless it is closed: "properties": {} or additionalProperties false give exactly {} (no
// parameter).
// A property whose schema is a plain string (no enum, pattern, format or length bound) may
// be written string="true"; anything else that is not a string, and strings with those
// constraints, string="false" as JSON that follows the property's schema (json_grammar.h:
// the schema is enforced there, so constrained strings are JSON strings). TEXT is valid
// UTF-8 without control bytes other than \t \n \r and without "<｜" (which would open DSML
// markup or an end-of-sentence marker in the parser's eyes). Parallel calls: at most
// max_calls invokes (8 unless the constructor says otherwise). The constructor throws
// SchemaError for a schema the JSON grammar cannot enforce.
//
// A tool with ToolSpec::enforce false (a non-strict tool under tool_choice "auto") takes free
// arguments: its declared top-level properties and any other [A-Za-z0-9_.-] keys (up to 64
// bytes), each at most once and as many as the model writes, with any value: TEXT, or any
// JSON (whitespace as json_valid takes it, JsonWhitespace::kLoose). Its schema is not
// compiled, so it never throws. Only what the output parser would reject is refused.
//
// tool_choice "auto": the model opens the block itself. start(kAfterDsml) is the state after
// it wrote "<｜DSML｜" (trigger()): the rest of the block opener follows, then the calls.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "server/json_grammar.h"
#include "tokenizer/chat/family.h"

namespace deepinfer::server {

struct ToolSpec {
  std::string name;
  chat::Json parameters;  // the function's JSON schema (null: any keys)
  bool enforce = true;    // false: free arguments (the declared keys and others, any values)
};

struct ToolState {
  uint8_t phase = 0;   // ToolGrammar::Phase
  uint8_t point = 0;   // literal choice point (phase kLit)
  uint8_t lit_pos = 0;
  uint8_t alive = 0;   // choices still matching
  int32_t tool = -1;   // the tool being called (-1: none yet)
  uint16_t len = 0;    // bytes of the name / key so far
  uint16_t n_calls = 0;
  uint8_t tm = 0;      // bytes of the parameter terminator matched (TEXT values)
  uint8_t utf8_need = 0, utf8_lo = 0x80, utf8_hi = 0xBF;
  uint8_t extra = 0;   // the key being read may still be an undeclared one
  uint16_t n_free = 0; // undeclared keys written in this invoke
  uint32_t hash = 0;   // FNV-1a of the key so far
  int32_t free_keys = -1;  // undeclared keys of this invoke: a list in ToolGrammar's key arena
  uint64_t cand = 0;   // declared keys still matching; kName: the range [lo, hi) of sorted names
  uint64_t used = 0;   // declared keys written in this invoke
  int32_t value_schema = 0;
  JsonState json;
};

class ToolGrammar {
 public:
  using State = ToolState;
  enum Phase : uint8_t { kLit, kName, kKey, kText, kJson, kEnd };
  static constexpr int kMaxCalls = 8;
  static constexpr int kAfterDsml = -2;  // start(): after the "<｜DSML｜" the model wrote

  ToolGrammar(chat::ChatFamily family, const std::vector<ToolSpec>& tools, bool parallel, int max_calls = kMaxCalls);

  // The text forced before the grammar takes over: the block opener, and the invoke tag of
  // tools[named] when named >= 0.
  std::string forced_prefix(int named) const;
  // What opens DSML markup ("<｜DSML｜"): under tool_choice "auto" the grammar starts after it.
  static std::string trigger();
  // named >= 0: inside the forced invoke of tools[named]; -1: after the forced block opener;
  // kAfterDsml: after trigger().
  ToolState start(int named);
  bool feed(ToolState& s, uint8_t c);
  bool complete(const ToolState& s) const { return s.phase == kEnd; }
  // The fast token class of this state (token_constraint.cpp): 0 inside a free JSON string,
  // 1 inside a TEXT value after no '<', -1 none.
  int fast_class(const ToolState& s) const;

  // Arena entries made while trying tokens are dropped with truncate(arena_size()).
  struct Arenas {
    size_t json, loose, keys;
  };
  Arenas arena_size() const { return {json_.arena_size(), loose_.arena_size(), keys_.size()}; }
  void truncate(const Arenas& n) {
    json_.truncate(n.json);
    loose_.truncate(n.loose);
    keys_.resize(n.keys);
  }

 private:
  struct Choice {
    std::string text;
    uint8_t phase;  // kLit: go to `point`; otherwise enter this phase
    uint8_t point;
  };
  enum Point : uint8_t {
    kBlockRest, kInvokeOpen, kNameEnd, kParamsFirst, kKeyEnd, kParamClose, kAfterParam, kAfterInvoke, kNumPoints
  };

  void enter(ToolState& s, uint8_t point);
  void go(ToolState& s, const Choice& c);
  bool lit_byte(ToolState& s, uint8_t c);
  bool name_byte(ToolState& s, uint8_t c);
  bool key_byte(ToolState& s, uint8_t c);
  bool text_byte(ToolState& s, uint8_t c);
  const JsonSchemaNode& params_of(const ToolState& s) const;
  uint64_t usable(const ToolState& s) const { return s.tool >= 0 ? usable_[size_t(s.tool)] : 0; }
  bool free_args(const ToolState& s) const { return s.tool >= 0 && free_args_[size_t(s.tool)]; }
  // Undeclared keys may be invented (no properties declared, not closed).
  static bool free_keys(const JsonSchemaNode& n) { return n.keys.empty() && !n.closed && !n.has_properties; }
  bool extra_keys(const ToolState& s) const { return free_args(s) || free_keys(params_of(s)); }
  JsonGrammar& json_of(const ToolState& s) { return free_args(s) ? loose_ : json_; }
  const JsonGrammar& json_of(const ToolState& s) const { return free_args(s) ? loose_ : json_; }

  std::string tag_block_, tag_invoke_, tag_param_;
  std::vector<Choice> points_[kNumPoints];
  std::string terminator_;  // "</｜DSML｜parameter>"
  size_t terminator_fixed_ = 0;  // bytes of "</｜DSML｜" (a mismatch after them is an error)
  std::vector<std::string> names_;
  std::vector<uint32_t> by_name_;  // tool indices sorted by name (then index)
  std::vector<int32_t> params_;  // schema node per tool
  std::vector<uint64_t> usable_; // per tool: declared keys whose values fit the nesting limit
  std::vector<bool> free_args_;  // per tool: ToolSpec::enforce false
  std::vector<std::vector<uint32_t>> key_hash_;  // per free-arguments tool: its declared keys' hashes
  struct FreeKey {
    uint32_t hash;
    int32_t next;
  };
  std::vector<FreeKey> keys_;  // lists of undeclared keys written (ToolState::free_keys)
  bool parallel_;
  int max_calls_;
  JsonGrammar json_;
  JsonGrammar loose_;  // free arguments' JSON values (schema node 0, any value)
};

}  // namespace deepinfer::server
