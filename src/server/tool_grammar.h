// A byte-level grammar of DeepSeek's DSML tool-call block, for tool_choice "required" and
// named functions: the output after the forced block opener is exactly what the chat
// encoder renders for an assistant tool call (tokenizer/chat/encoder.cpp), so the output
// parser turns it into tool_calls:
//
//   [forced] "\n\n<｜DSML｜tool_calls>\n" ["<｜DSML｜invoke name=\"X\">\n" when named]
//   invoke   = "<｜DSML｜invoke name=\"" NAME "\">\n" params "\n</｜DSML｜invoke>"
//   params   = "" | param ("\n" param)*
//   param    = "<｜DSML｜parameter name=\"" KEY "\" string=\"true\">" TEXT "</｜DSML｜parameter>"
//            | "<｜DSML｜parameter name=\"" KEY "\" string=\"false\">" JSON "</｜DSML｜parameter>"
//   block    = invoke ("\n" invoke)* "\n</｜DSML｜tool_calls>"   then only EOS
// (V4.1 spells the tags "｜DSML｜ calls", "｜DSML｜ invoke", "｜DSML｜ parameter".)
//
// NAME is one of the request's tools (up to 64; with more, any [A-Za-z0-9_.-] name). KEY is
// a property of that tool's "parameters" schema, each at most once, and "</invoke>" needs
// every "required" one. A tool whose parameters declare no properties takes up to 4
// distinct [A-Za-z0-9_.-] keys (their values follow additionalProperties), unless it is
// closed: "properties": {} or additionalProperties false give exactly {} (no parameter).
// A property whose schema is a plain string (no enum, pattern, format or length bound) may
// be written string="true"; anything else that is not a string, and strings with those
// constraints, string="false" as JSON that follows the property's schema (json_grammar.h:
// the schema is enforced there, so constrained strings are JSON strings). TEXT is valid
// UTF-8 without control bytes other than \t \n \r and without "<｜" (which would open DSML
// markup or an end-of-sentence marker in the parser's eyes). Parallel calls: at most 8
// invokes. The constructor throws SchemaError for a schema the JSON grammar cannot enforce.
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
};

struct ToolState {
  uint8_t phase = 0;   // ToolGrammar::Phase
  uint8_t point = 0;   // literal choice point (phase kLit)
  uint8_t lit_pos = 0;
  uint8_t alive = 0;   // choices still matching
  int16_t tool = -1;   // the tool being called (-1: free name)
  uint16_t len = 0;    // bytes of the name / key so far
  uint16_t n_calls = 0;
  uint8_t tm = 0;      // bytes of the parameter terminator matched (TEXT values)
  uint8_t utf8_need = 0, utf8_lo = 0x80, utf8_hi = 0xBF;
  uint8_t n_free = 0;
  uint32_t hash = 0;   // FNV-1a of a free key so far
  uint32_t free_keys[4] = {};
  uint64_t cand = 0;   // tools / declared keys still matching
  uint64_t used = 0;   // declared keys written in this invoke
  int32_t value_schema = 0;
  JsonState json;
};

class ToolGrammar {
 public:
  using State = ToolState;
  enum Phase : uint8_t { kLit, kName, kKey, kText, kJson, kEnd };
  static constexpr int kMaxCalls = 8;

  ToolGrammar(chat::ChatFamily family, const std::vector<ToolSpec>& tools, bool parallel);

  // The text forced before the grammar takes over: the block opener, and the invoke tag of
  // tools[named] when named >= 0.
  std::string forced_prefix(int named) const;
  ToolState start(int named);
  bool feed(ToolState& s, uint8_t c);
  bool complete(const ToolState& s) const { return s.phase == kEnd; }
  // The fast token class of this state (token_constraint.cpp): 0 inside a free JSON string,
  // 1 inside a TEXT value after no '<', -1 none.
  int fast_class(const ToolState& s) const;

  size_t arena_size() const { return json_.arena_size(); }
  void truncate(size_t n) { json_.truncate(n); }

 private:
  struct Choice {
    std::string text;
    uint8_t phase;  // kLit: go to `point`; otherwise enter this phase
    uint8_t point;
  };
  enum Point : uint8_t { kInvokeOpen, kNameEnd, kParamsFirst, kKeyEnd, kParamClose, kAfterParam, kAfterInvoke, kNumPoints };

  void enter(ToolState& s, uint8_t point);
  void go(ToolState& s, const Choice& c);
  bool lit_byte(ToolState& s, uint8_t c);
  bool name_byte(ToolState& s, uint8_t c);
  bool key_byte(ToolState& s, uint8_t c);
  bool text_byte(ToolState& s, uint8_t c);
  const JsonSchemaNode& params_of(const ToolState& s) const;
  uint64_t usable(const ToolState& s) const { return s.tool >= 0 ? usable_[size_t(s.tool)] : 0; }
  // Undeclared keys may be invented (no properties declared, not closed).
  static bool free_keys(const JsonSchemaNode& n) { return n.keys.empty() && !n.closed && !n.has_properties; }

  std::string tag_block_, tag_invoke_, tag_param_;
  std::vector<Choice> points_[kNumPoints];
  std::string terminator_;  // "</｜DSML｜parameter>"
  size_t terminator_fixed_ = 0;  // bytes of "</｜DSML｜" (a mismatch after them is an error)
  std::vector<std::string> names_;
  std::vector<int32_t> params_;  // schema node per tool
  std::vector<uint64_t> usable_; // per tool: declared keys whose values fit the nesting limit
  bool free_names_ = false;
  bool parallel_;
  JsonGrammar json_;
};

}  // namespace deepinfer::server
