// Incremental parser for DeepSeek-V4 model output: reasoning split and DSML
// tool calls, fed arbitrary byte chunks.
//
// Output grammar (what the reference parser `parse_message_from_completion_text`
// accepts, V4 spelling; V4.1 writes "｜DSML｜ calls", "｜DSML｜ invoke",
// "｜DSML｜ parameter" with a space):
//   [reasoning "</think>"] content ["\n\n<｜DSML｜tool_calls>\n" invoke* "</｜DSML｜tool_calls>"] [EOS]
//   invoke = "<｜DSML｜invoke name=\"N\">\n" param* "</｜DSML｜invoke>\n"
//   param  = "<｜DSML｜parameter name=\"K\" string=\"true|false\">VALUE</｜DSML｜parameter>\n"
// In thinking mode the prompt already ends with "<think>", so output starts in
// reasoning. A call's arguments are the JSON object the reference builds:
// "{" + ", ".join(json(K) + ": " + (json(VALUE) if string else VALUE)) + "}".
//
// Events are emitted as soon as they are certain: content and reasoning deltas
// (a possible partial tag or multi-byte character is held back), a ToolCallBegin
// once an invoke tag is complete, argument deltas while a parameter value is
// still being generated, ToolCallEnd at "</invoke>". Markup never appears in
// content or reasoning deltas.
//
// Tolerated (no error): both DSML spellings in either family, "function_calls"
// as block name (V3.2 habit), an invoke without the block opener, whitespace
// variations between tags, a missing EOS, a DSML block inside reasoning (ends
// the reasoning), stray <think>/</think> tokens (dropped), a leading <think>.
// Errors (an Error event, never silent): unknown or malformed DSML tags, a DSML
// token outside a tag (dropped from the text), text
// inside a block or invoke, parameters outside an invoke, duplicate parameter
// names, string="false" values that are not JSON, a missing </parameter> or
// </invoke>, and truncation (EOS or end of input inside DSML). A call hit by an
// error gets an Error event carrying its index (its earlier deltas must be
// discarded by the consumer); parsing then resumes at the next invoke or block end.
// A call cut by the end of the output (finish() inside it) gets an Error with `cut` set:
// its deltas so far are what was generated (a max_tokens cut answers them, as a stream has).
#pragma once
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/chat/family.h"

namespace deepinfer::chat {

enum class ChatEventKind { Content, Reasoning, ToolCallBegin, ToolCallArguments, ToolCallEnd, Error };

struct ChatEvent {
  ChatEventKind kind;
  std::string text;     // delta text; the tool name for ToolCallBegin; the message for Error
  int tool_index = -1;  // tool events; for Error the failed call, or -1
  bool cut = false;     // Error: the output ended inside this call (finish())
};

class OutputParser {
 public:
  // thinking: the prompt ended with "<think>" (thinking_mode "thinking").
  OutputParser(ChatFamily family, bool thinking);

  void feed(std::string_view bytes, std::vector<ChatEvent>& out);
  // End of generation: flushes held-back text and reports truncated markup.
  void finish(std::vector<ChatEvent>& out);

  std::vector<ChatEvent> feed(std::string_view bytes);
  std::vector<ChatEvent> finish();

 private:
  enum class State { Reasoning, Content, AfterBlock, Block, Invoke, Value, Skip, Done };
  struct Tag;

  void run(bool final, std::vector<ChatEvent>& out);
  bool step_text(bool final, std::vector<ChatEvent>& out);
  bool step_markup(bool final, std::vector<ChatEvent>& out);
  bool step_value(bool final, std::vector<ChatEvent>& out);
  bool step_skip(bool final, std::vector<ChatEvent>& out);
  // 1: tag parsed into `tag`; 0: need more bytes; -1: malformed (consumed `len` bytes).
  int read_tag(bool final, Tag& tag, size_t& len) const;
  void handle_tag(const Tag& tag, std::vector<ChatEvent>& out);
  void begin_call(const std::string& name, std::vector<ChatEvent>& out);
  void fail_call(const std::string& why, std::vector<ChatEvent>& out);
  void error(const std::string& why, std::vector<ChatEvent>& out);
  void emit(ChatEventKind kind, std::string text, std::vector<ChatEvent>& out, int index = -1);

  ChatFamily family_;
  State state_;
  bool finishing_ = false;  // in finish(): a failing call was cut by the end of the output
  std::string buf_;
  bool at_start_ = true;
  bool block_explicit_ = false;
  bool calls_in_block_ = false;
  int call_ = -1;
  int next_call_ = 0;
  std::string call_name_;
  std::set<std::string> param_names_;
  std::string param_name_;
  bool param_string_ = false;
  std::string param_raw_;
};

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // JSON object text
};

struct ParsedOutput {
  std::string content;
  std::string reasoning_content;
  std::vector<ParsedToolCall> tool_calls;  // completed calls without errors, in order
  // The call the end of the output cut (at most one, after tool_calls): its name and the
  // arguments generated so far (an unfinished JSON object, as streamed). Routes answer it
  // where generation stopped at max_tokens (finish_reason "length").
  std::vector<ParsedToolCall> cut_tool_calls;
  std::vector<std::string> errors;
};

// Folds events into the final message.
class OutputAccumulator {
 public:
  void add(const ChatEvent& e);
  void add(const std::vector<ChatEvent>& events) {
    for (const auto& e : events) add(e);
  }
  ParsedOutput result() const;

 private:
  struct Call {
    std::string name, arguments;
    bool done = false, failed = false, cut = false;
  };
  ParsedOutput out_;
  std::vector<Call> calls_;
};

ParsedOutput parse_output(ChatFamily family, std::string_view text, bool thinking);

// {"content": ..., "reasoning_content": ..., "tool_calls": [{"name": ..., "arguments": ...}]}
std::string parsed_output_json(const ParsedOutput& p);

}  // namespace deepinfer::chat
