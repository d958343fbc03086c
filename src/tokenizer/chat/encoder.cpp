// Prompt encoders for the DeepSeek-V4 families. The control flow follows the
// reference encoders step by step (merge tool messages, order tool results,
// drop old reasoning, render each message, append the generation header), so
// that every branch, including the odd ones, produces the same bytes.
#include "tokenizer/chat/encoder.h"

#include <algorithm>
#include <map>
#include <optional>
#include <stdexcept>
#include <vector>

#include "core/json_limits.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::chat {
namespace {

[[noreturn]] void fail(const std::string& msg) { throw std::invalid_argument("encode_messages: " + msg); }

// Python dict.get(key): nullptr when absent.
const Json* get(const Json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}
// dict.get(key, default) as a value.
Json get_or(const Json& obj, const char* key, const Json& dflt) {
  const Json* v = get(obj, key);
  return v ? *v : dflt;
}
bool is_none(const Json* v) { return v == nullptr || v->is_null(); }
bool truthy(const Json* v) { return v != nullptr && py_truthy(*v); }
bool str_eq(const Json* v, std::string_view s) { return v && v->is_string() && v->get_ref<const std::string&>() == s; }
const Json& require_dict(const Json& v, const char* what) {
  if (!v.is_object()) fail(std::string(what) + " must be a dict, got " + v.type_name());
  return v;
}
const Json& require_list(const Json& v, const char* what) {
  if (!v.is_array()) fail(std::string(what) + " must be a list, got " + v.type_name());
  return v;
}
const Json& require_key(const Json& obj, const char* key, const char* what) {
  if (!obj.is_object()) fail(std::string(what) + " must be a dict, got " + obj.type_name());
  const Json* v = get(obj, key);
  if (!v) fail(std::string(what) + " has no key '" + key + "'");
  return *v;
}
const Json& role_of(const Json& msg) {
  static const Json none;
  const Json* r = get(require_dict(msg, "message"), "role");
  return r ? *r : none;
}
bool role_is(const Json& msg, std::string_view r) { return str_eq(&role_of(msg), r); }

// "\n\n".join(parts): every part must be a str.
std::string join_str(const std::vector<const Json*>& parts, const char* what) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (!parts[i]->is_string())
      fail(std::string(what) + ": sequence item " + std::to_string(i) + ": expected str instance, " +
           (parts[i]->is_null() ? "NoneType" : parts[i]->type_name()) + " found");
    if (i) out += "\n\n";
    out += parts[i]->get_ref<const std::string&>();
  }
  return out;
}

// A prompt under construction: the encoder's own text (markers, template wording) and text
// that came from the caller, kept apart so that only the former's special-token strings
// become control tokens (RenderedPrompt).
class Out {
 public:
  Out() = default;
  Out& tpl(std::string_view s) { return add(s, true); }
  Out& user(std::string_view s) { return add(s, false); }
  Out& operator+=(const Out& o) {
    for (const auto& p : o.pieces_) add(p.text, p.from_template);
    return *this;
  }
  bool empty() const { return pieces_.empty(); }
  RenderedPrompt take() { return RenderedPrompt{std::move(pieces_)}; }

 private:
  Out& add(std::string_view s, bool from_template) {
    if (s.empty()) return *this;
    if (!pieces_.empty() && pieces_.back().from_template == from_template) pieces_.back().text.append(s);
    else pieces_.push_back(PromptPiece{std::string(s), from_template});
    return *this;
  }
  std::vector<PromptPiece> pieces_;
};

Out tpl(std::string_view s) { return Out().tpl(s); }
Out user(std::string_view s) { return Out().user(s); }

struct Spelling {
  const char* block;
  const char* invoke;
  const char* param;
};
constexpr Spelling kV4Tags{"tool_calls", "invoke", "parameter"};
constexpr Spelling kV41Tags{" calls", " invoke", " parameter"};

const std::string kEffortAbsoluteMax =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root "
    "cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial "
    "scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n";
const std::string kEffortBeyondMax =
    "Reasoning Effort: Beyond maximum \xE2\x80\x94 exhaustive, relentless, and uncompromising.\n"
    "You MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: exhaustively "
    "decompose the problem into its most fundamental components, trace every causal chain to its root, and "
    "resolve the underlying cause rather than any surface symptom.\n"
    "Do not stop reasoning until you have independently verified the solution from multiple angles and are "
    "certain that no assumption remains unchecked and no error remains undiscovered.\n\n";

const char* kResponseFormatHead = "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

Out render_tools(const std::vector<Json>& functions, const Spelling& t) {
  const std::string d = kDsml;
  const std::string B = d + t.block, I = d + t.invoke, P = d + t.param;
  std::string s;
  s += "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can invoke tools by "
       "writing a \"<" + B + ">\" block like the following:\n\n";
  s += "<" + B + ">\n<" + I + " name=\"$TOOL_NAME\">\n<" + P +
       " name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</" + P + ">\n...\n</" + I + ">\n<" + I +
       " name=\"$TOOL_NAME2\">\n...\n</" + I + ">\n</" + B + ">\n\n";
  s += "String parameters should be specified as is and set `string=\"true\"`. For all other types (numbers, "
       "booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n";
  s += "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside "
       "<think>...</think> BEFORE any tool calls or final response.\n\n";
  s += "Otherwise, output directly after </think> with tool calls or final response.\n\n";
  s += "### Available Tool Schemas\n\n";
  Out out = tpl(s);
  for (size_t i = 0; i < functions.size(); ++i) {
    if (i) out.tpl("\n");
    out.user(py_json_dumps(functions[i]));  // the client's tool definitions
  }
  out.tpl("\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n");
  return out;
}

// json.loads of a str; nullopt where Python raises a JSON error. The text is a client's, so it
// is held to the limits of a request body: one nested too deep is refused outright (Python
// would die of recursion too), never parsed into a value whose copies recurse without bound.
std::optional<Json> json_loads(const Json& v) {
  if (!v.is_string()) return std::nullopt;
  const std::string& text = v.get_ref<const std::string&>();
  const std::string violation = json_limit_violation(text);
  if (!violation.empty()) fail("tool call arguments: the JSON text is " + violation);
  return parse_json_bounded<Json>(text);
}

class Encoder {
 public:
  Encoder(ChatFamily fam, const EncodeOptions& opt) : fam_(fam), opt_(opt) {}

  RenderedPrompt encode(const Json& messages_in) {
    const bool v41 = fam_ == ChatFamily::V41;
    Json context = py_truthy(opt_.context) ? opt_.context : Json::array();
    require_list(context, "context");
    require_list(messages_in, "messages");
    Json messages = messages_in;
    if (v41) {
      if (!context.empty()) context = process_image_messages(context);
      messages = process_image_messages(messages);
    }
    messages = merge_tool_messages(messages);
    {
      // The reference orders the new messages' tool results after the raw context.
      Json joined = context;
      for (auto& m : messages) joined.push_back(m);
      sort_tool_results(joined);
      Json tail = Json::array();
      for (size_t i = context.size(); i < joined.size(); ++i) tail.push_back(std::move(joined[i]));
      messages = std::move(tail);
    }
    if (!context.empty()) {
      context = merge_tool_messages(context);
      sort_tool_results(context);
    }
    Json full = context;
    for (auto& m : messages) full.push_back(m);

    Out prompt = tpl((py_truthy(opt_.add_default_bos_token) && context.empty()) ? kBos : "");

    bool drop = py_truthy(opt_.drop_thinking);
    for (const auto& m : full)
      if (truthy(get(require_dict(m, "message"), "tools"))) drop = false;

    long num_to_render, context_len;
    if (str_eq(&opt_.thinking_mode, "thinking") && drop) {
      full = drop_thinking_messages(full);
      num_to_render = long(full.size()) - long(drop_thinking_messages(context).size());
      context_len = long(full.size()) - num_to_render;
    } else {
      num_to_render = long(messages.size());
      context_len = long(context.size());
    }
    for (long i = 0; i < num_to_render; ++i) {
      long index = i + context_len;
      if (index < 0 || index >= long(full.size())) fail("message index out of range");  // AssertionError
      prompt += render_message(size_t(index), full, drop);
    }
    return prompt.take();
  }

 private:
  ChatFamily fam_;
  const EncodeOptions& opt_;

  bool v41() const { return fam_ == ChatFamily::V41; }
  const Spelling& tags() const { return v41() ? kV41Tags : kV4Tags; }

  // ---------------------------------------------------------------- V4.1 images
  static Json extract_image(const Json& block) {
    Json rec = Json::object();
    rec["type"] = "image";
    if (str_eq(get(block, "type"), "image_url")) {
      const Json* iu = get(block, "image_url");
      if (iu && iu->is_string()) {
        rec["url"] = *iu;
      } else if (!truthy(iu)) {
        rec["url"] = "";
      } else {
        rec["url"] = get_or(require_dict(*iu, "image_url"), "url", "");
      }
    } else {
      for (const char* k : {"source", "url", "data"})
        if (const Json* v = get(block, k)) rec[k] = *v;
    }
    bool any = false;
    for (const char* k : {"source", "url", "data"}) any = any || truthy(get(rec, k));
    if (!any) fail("Image block does not contain a valid source");
    return rec;
  }

  static Json process_image_blocks(const Json& blocks) {
    Json out = Json::array();
    for (const auto& block : require_list(blocks, "content_blocks")) {
      if (!block.is_object()) {
        out.push_back(block);
        continue;
      }
      const Json* type = get(block, "type");
      if (str_eq(type, "image") || str_eq(type, "image_url")) {
        extract_image(block);
        out.push_back(Json{{"type", "text"}, {"text", kImage}});
      } else if (str_eq(type, "tool_result") && get(block, "content") && get(block, "content")->is_array()) {
        Json b = block;
        b["content"] = process_image_blocks(block["content"]);
        out.push_back(std::move(b));
      } else if (str_eq(type, "text")) {
        const Json* text = get(block, "text");
        if (truthy(text)) {
          if (text->is_string()) {
            if (text->get_ref<const std::string&>().find(kImage) != std::string::npos)
              fail(std::string("Text block contains image placeholder '") + kImage + "'");
          } else if (!text->is_array() && !text->is_object()) {
            fail("text block: 'in <string>' requires string as left operand");
          }
        }
        out.push_back(block);
      } else {
        out.push_back(block);
      }
    }
    return out;
  }

  static Json process_image_messages(const Json& messages) {
    Json out = Json::array();
    for (const auto& m : messages) {
      Json msg = require_dict(m, "message");
      const Json* content = get(msg, "content");
      if (content && content->is_string() && content->get_ref<const std::string&>().find(kImage) != std::string::npos)
        fail(std::string("Message content contains image special token '") + kImage + "'");
      const Json* rc = get(msg, "reasoning_content");
      if (rc && rc->is_string() && rc->get_ref<const std::string&>().find(kImage) != std::string::npos)
        fail(std::string("reasoning_content contains image special token '") + kImage + "'");
      if (content && content->is_array() && !msg.contains("content_blocks")) {
        Json moved = *content;
        msg.erase("content");
        msg["content_blocks"] = std::move(moved);
      }
      if (truthy(get(msg, "content_blocks"))) {
        msg["content_blocks"] = process_image_blocks(msg["content_blocks"]);
        const Json* c = get(msg, "content");
        if (!(c && c->is_string())) {
          std::vector<const Json*> texts;
          static const Json empty = "";
          for (const auto& b : msg["content_blocks"])
            if (b.is_object() && str_eq(get(b, "type"), "text")) {
              const Json* t = get(b, "text");
              texts.push_back(t ? t : &empty);
            }
          msg["content"] = join_str(texts, "content blocks");
        }
      }
      out.push_back(std::move(msg));
    }
    return out;
  }

  // ---------------------------------------------------------------- preprocessing
  Json merge_tool_messages(const Json& messages) const {
    Json merged = Json::array();
    auto can_merge_into_last = [&](bool require_no_task) {
      if (merged.empty()) return false;
      const Json& last = merged.back();
      if (!role_is(last, "user") || !last.contains("content_blocks")) return false;
      return !require_no_task || is_none(get(last, "task"));
    };
    for (const auto& m : messages) {
      const Json& msg = require_dict(m, "message");
      if (role_is(msg, "tool")) {
        Json block = Json::object();
        block["type"] = "tool_result";
        block["tool_use_id"] = get_or(msg, "tool_call_id", "");
        block["content"] = get_or(msg, "content", "");
        if (can_merge_into_last(false)) {
          Json& cb = merged.back()["content_blocks"];
          if (!cb.is_array()) fail("content_blocks must be a list");
          cb.push_back(std::move(block));
        } else {
          merged.push_back(Json{{"role", "user"}, {"content_blocks", Json::array({std::move(block)})}});
        }
      } else if (role_is(msg, "user")) {
        if (!v41()) {
          Json text_block = Json{{"type", "text"}, {"text", get_or(msg, "content", "")}};
          if (can_merge_into_last(true)) {
            Json& cb = merged.back()["content_blocks"];
            if (!cb.is_array()) fail("content_blocks must be a list");
            cb.push_back(std::move(text_block));
          } else {
            Json nm = Json::object();
            nm["role"] = "user";
            nm["content"] = get_or(msg, "content", "");
            nm["content_blocks"] = Json::array({std::move(text_block)});
            for (const char* k : {"task", "wo_eos", "mask"})
              if (const Json* v = get(msg, k)) nm[k] = *v;
            merged.push_back(std::move(nm));
          }
        } else {
          Json blocks;
          const Json* cbp = get(msg, "content_blocks");
          if (is_none(cbp)) blocks = Json::array({Json{{"type", "text"}, {"text", get_or(msg, "content", "")}}});
          else blocks = require_list(*cbp, "content_blocks");
          if (can_merge_into_last(true)) {
            Json& cb = merged.back()["content_blocks"];
            if (!cb.is_array()) fail("content_blocks must be a list");
            for (auto& b : blocks) cb.push_back(b);
          } else {
            Json nm = msg;
            nm["content_blocks"] = std::move(blocks);
            merged.push_back(std::move(nm));
          }
        }
      } else {
        merged.push_back(msg);
      }
    }
    return merged;
  }

  static void sort_tool_results(Json& messages) {
    std::map<std::string, long> order;
    for (auto& msg : messages) {
      require_dict(msg, "message");
      if (role_is(msg, "assistant") && truthy(get(msg, "tool_calls"))) {
        order.clear();
        long idx = 0;
        for (const auto& tc : require_list(msg["tool_calls"], "tool_calls")) {
          require_dict(tc, "tool call");
          Json id = get_or(tc, "id", nullptr);
          if (!py_truthy(id)) {
            static const Json empty_dict = Json::object();
            const Json* f = get(tc, "function");
            const Json& fn = f ? *f : empty_dict;
            id = get_or(require_dict(fn, "tool call function"), "id", "");
          }
          if (py_truthy(id)) order[py_hash_key(id, "tool call id")] = idx;
          ++idx;
        }
      } else if (role_is(msg, "user") && truthy(get(msg, "content_blocks"))) {
        Json& cb = msg["content_blocks"];
        require_list(cb, "content_blocks");
        std::vector<Json> tool_blocks;
        for (const auto& b : cb)
          if (str_eq(get(require_dict(b, "content block"), "type"), "tool_result")) tool_blocks.push_back(b);
        if (tool_blocks.size() > 1 && !order.empty()) {
          std::vector<std::pair<long, size_t>> keys;
          for (size_t i = 0; i < tool_blocks.size(); ++i) {
            auto it = order.find(py_hash_key(get_or(tool_blocks[i], "tool_use_id", ""), "tool_call_id"));
            keys.push_back({it == order.end() ? 0 : it->second, i});
          }
          std::stable_sort(keys.begin(), keys.end(),
                           [](const auto& a, const auto& b) { return a.first < b.first; });
          size_t k = 0;
          for (auto& b : cb)
            if (str_eq(get(b, "type"), "tool_result")) b = tool_blocks[keys[k++].second];
        }
      }
    }
  }

  long find_last_user_index(const Json& messages) const {
    for (long i = long(messages.size()) - 1; i >= 0; --i) {
      const Json& m = messages[size_t(i)];
      if (v41()) {
        if (role_is(m, "user") || (role_is(m, "system") && i > 0)) return i;
      } else if (role_is(m, "user") || role_is(m, "developer")) {
        return i;
      }
    }
    return -1;
  }

  Json drop_thinking_messages(const Json& messages) const {
    const long last_user = find_last_user_index(messages);
    Json out = Json::array();
    for (size_t i = 0; i < messages.size(); ++i) {
      const Json& msg = messages[i];
      const Json& role = role_of(msg);
      if (role.is_array() || role.is_object()) fail("unhashable role");
      bool keep = false;
      for (const char* r : {"user", "system", "tool", "latest_reminder", "direct_search_results"})
        keep = keep || str_eq(&role, r);
      if (keep || long(i) >= last_user) {
        out.push_back(msg);
      } else if (str_eq(&role, "assistant")) {
        Json copy = msg;
        copy.erase("reasoning_content");
        out.push_back(std::move(copy));
      }
    }
    return out;
  }

  // ---------------------------------------------------------------- rendering
  std::string effort_prefix(size_t index, bool thinking) const {
    const Json& e = opt_.reasoning_effort;
    switch (fam_) {
      case ChatFamily::V4: {
        if (!(e.is_null() || str_eq(&e, "max") || str_eq(&e, "high")))
          fail("Invalid reasoning effort: " + describe(e));
        return (index == 0 && thinking && str_eq(&e, "max")) ? kEffortAbsoluteMax : "";
      }
      case ChatFamily::V4_0731: {
        std::string level = "low";
        if (py_truthy(e)) {
          if (!(str_eq(&e, "low") || str_eq(&e, "high") || str_eq(&e, "max")))
            fail("Invalid reasoning effort: " + describe(e) + ", expected one of ['low', 'high', 'max']");
          level = e.get<std::string>();
        }
        if (index != 0 || !thinking) return "";
        if (level == "high") return kEffortAbsoluteMax;
        if (level == "max") return kEffortBeyondMax;
        return "";
      }
      case ChatFamily::V41: {
        long budget = 75;
        if (e.is_null()) {
          budget = 75;
        } else if (e.is_number_integer()) {  // type(effort) is int (bool is a separate JSON type)
          const bool in_range = e.is_number_unsigned() ? e.get<uint64_t>() >= 1 && e.get<uint64_t>() <= 100
                                                       : e.get<int64_t>() >= 1 && e.get<int64_t>() <= 100;
          if (!in_range) fail("Invalid reasoning effort for deepseek_v41: " + describe(e) +
                              ", should be int within [1,100] or ['low', 'high', 'max']");
          budget = long(e.get<int64_t>());
        } else if (str_eq(&e, "low")) {
          budget = 50;
        } else if (str_eq(&e, "high")) {
          budget = 75;
        } else if (str_eq(&e, "max")) {
          budget = 100;
        } else {
          fail("Invalid reasoning effort for deepseek_v41: " + describe(e) +
               ", should be int within [1,100] or ['low', 'high', 'max']");
        }
        if (index == 0 && thinking)
          return "Reasoning Effort: " + std::to_string(budget) +
                 " (range 1-100, the higher the value, the more thorough the reasoning)\n\n";
        return "";
      }
    }
    return "";
  }

  static std::string describe(const Json& v) {
    if (v.is_string()) return v.get<std::string>();
    return py_json_dumps(v);
  }

  static std::vector<Json> tools_from_openai(const Json& tools) {
    std::vector<Json> out;
    for (const auto& t : require_list(tools, "tools")) out.push_back(require_key(t, "function", "tool"));
    return out;
  }

  static std::vector<Json> tool_calls_from_openai(const Json& tool_calls) {
    std::vector<Json> out;
    for (const auto& tc : require_list(tool_calls, "tool_calls")) {
      const Json& fn = require_key(tc, "function", "tool call");
      Json call = Json::object();
      call["name"] = require_key(fn, "name", "tool call function");
      call["arguments"] = require_key(fn, "arguments", "tool call function");
      out.push_back(std::move(call));
    }
    return out;
  }

  Out encode_arguments(const Json& tc) const {
    const Json& raw = tc["arguments"];
    Json args;
    switch (fam_) {
      case ChatFamily::V4: {
        auto parsed = json_loads(raw);
        args = parsed ? *parsed : Json{{"arguments", raw}};
        break;
      }
      case ChatFamily::V4_0731: {
        if (raw.is_object()) {
          args = raw;
        } else {
          auto parsed = json_loads(raw);
          args = parsed ? *parsed : Json{{"arguments", raw}};
        }
        break;
      }
      case ChatFamily::V41: {
        args = raw;
        if (!args.is_object()) {
          for (int k = 0; k < 2 && args.is_string(); ++k) {
            auto parsed = json_loads(args);
            if (!parsed) break;
            args = *parsed;
          }
          if (!args.is_object()) args = Json{{"arguments", raw}};
        }
        break;
      }
    }
    if (!args.is_object()) fail("tool call arguments: '" + std::string(args.type_name()) + "' object has no attribute 'items'");
    const std::string P = std::string(kDsml) + tags().param;
    Out out;
    bool first = true;
    for (auto it = args.begin(); it != args.end(); ++it) {
      if (!first) out.tpl("\n");
      first = false;
      const bool is_str = it.value().is_string();
      out.tpl("<" + P + " name=\"").user(it.key()).tpl(std::string("\" string=\"") + (is_str ? "true" : "false") + "\">");
      if (is_str) out.user(it.value().get_ref<const std::string&>());
      else out.user(py_json_dumps(it.value()));
      out.tpl("</" + P + ">");
    }
    return out;
  }

  Out tools_and_format(const Json& msg, const std::vector<Json>* tools) const {
    Out s;
    if (tools) {
      s.tpl("\n\n");
      s += render_tools(*tools, tags());
    }
    if (truthy(get(msg, "response_format")))
      s.tpl("\n\n").tpl(kResponseFormatHead).user(py_json_dumps(msg["response_format"]));
    return s;
  }

  // A user message's text. V4.1 puts its image placeholder into the text; the reference
  // refuses that string in anything the client sent, so here it can only be the encoder's.
  Out user_content(const std::string& text) const {
    if (!v41()) return user(text);
    Out out;
    const std::string_view img = kImage;
    size_t at = 0;
    for (size_t p; (p = text.find(img, at)) != std::string::npos; at = p + img.size())
      out.user(std::string_view(text).substr(at, p - at)).tpl(img);
    return out.user(std::string_view(text).substr(at));
  }

  Out render_user_blocks(const Json& blocks) const {
    // Each part rendered, and the text value to type-check at the join ("\n\n".join raises
    // on a non-str item only after every part was built).
    std::vector<Out> parts;
    std::vector<Json> texts_to_check;
    std::vector<bool> is_text;
    for (const auto& block : blocks) {
      require_dict(block, "content block");
      const Json* type = get(block, "type");
      if (str_eq(type, "text")) {
        Json text = get_or(block, "text", "");
        parts.push_back(text.is_string() ? user_content(text.get_ref<const std::string&>()) : Out());
        texts_to_check.push_back(std::move(text));
        is_text.push_back(true);
      } else if (str_eq(type, "tool_result")) {
        Json tc = get_or(block, "content", "");
        if (tc.is_array()) {
          std::vector<Json> texts;
          for (const auto& b : tc) {
            require_dict(b, "tool result block");
            if (str_eq(get(b, "type"), "text")) texts.push_back(get_or(b, "text", ""));
            else texts.push_back("[Unsupported " + py_str(get_or(b, "type", nullptr), "block type") + "]");
          }
          std::vector<const Json*> ptrs;
          for (auto& t : texts) ptrs.push_back(&t);
          tc = join_str(ptrs, "tool result");
        }
        Out part = tpl("<tool_result>");
        part += user_content(py_str(tc, "tool result content"));
        parts.push_back(std::move(part.tpl("</tool_result>")));
        texts_to_check.emplace_back();
        is_text.push_back(false);
      } else {
        parts.push_back(tpl("[Unsupported ").user(py_str(type ? *type : Json(), "block type")).tpl("]"));
        texts_to_check.emplace_back();
        is_text.push_back(false);
      }
    }
    std::vector<const Json*> ptrs;
    static const Json kStr = "";
    for (size_t i = 0; i < parts.size(); ++i) ptrs.push_back(is_text[i] ? &texts_to_check[i] : &kStr);
    join_str(ptrs, "user content");  // throws as the reference's join does
    Out out;
    for (size_t i = 0; i < parts.size(); ++i) {
      if (i) out.tpl("\n\n");
      out += parts[i];
    }
    return out;
  }

  Out render_message(size_t index, const Json& messages, bool drop) const {
    const Json& tm = opt_.thinking_mode;
    if (!(str_eq(&tm, "chat") || str_eq(&tm, "thinking"))) fail("Invalid thinking_mode `" + describe(tm) + "`");
    const bool thinking = str_eq(&tm, "thinking");
    const Json& msg = require_dict(messages[index], "message");
    const long last_user = find_last_user_index(messages);
    const Json& role = role_of(msg);
    const Json* content = get(msg, "content");

    std::vector<Json> tools, tool_calls;
    const bool has_tools = truthy(get(msg, "tools"));
    if (has_tools) tools = tools_from_openai(msg["tools"]);
    const bool has_calls = truthy(get(msg, "tool_calls"));
    if (has_calls) tool_calls = tool_calls_from_openai(msg["tool_calls"]);

    const std::string effort = effort_prefix(index, thinking);
    Out prompt;
    if (v41()) {
      if (index == 0 && (!effort.empty() || str_eq(&role, "system"))) prompt.tpl(kSystem);
    }
    prompt.tpl(effort);

    auto text_or_empty = [&](const Json* v, const char* what) {
      return truthy(v) ? py_str(*v, what) : std::string();
    };

    if (str_eq(&role, "system")) {
      if (v41() && index > 0) prompt.tpl(kSystem);
      prompt.user(text_or_empty(content, "system content"));
      prompt += tools_and_format(msg, has_tools ? &tools : nullptr);
    } else if (str_eq(&role, "developer") && !v41()) {
      if (!truthy(content)) fail("Invalid message for role `developer`: empty content");
      if (!content->is_string()) fail("developer content must be a str");
      prompt.tpl(kUser).user(content->get_ref<const std::string&>());
      prompt += tools_and_format(msg, has_tools ? &tools : nullptr);
    } else if (str_eq(&role, "user")) {
      prompt.tpl(kUser);
      const Json* blocks = get(msg, "content_blocks");
      if (truthy(blocks)) prompt += render_user_blocks(require_list(*blocks, "content_blocks"));
      else prompt += user_content(text_or_empty(content, "user content"));
    } else if (str_eq(&role, "latest_reminder")) {
      prompt.tpl(kLatestReminder).user(py_str(content ? *content : Json(), "latest_reminder content"));
    } else if (str_eq(&role, "tool")) {
      fail("tool messages must be merged into user messages");
    } else if (str_eq(&role, "assistant")) {
      Out tc_text;
      if (has_calls) {
        const std::string I = std::string(kDsml) + tags().invoke;
        const std::string B = std::string(kDsml) + tags().block;
        Out list;
        for (size_t i = 0; i < tool_calls.size(); ++i) {
          if (i) list.tpl("\n");
          // Name before arguments: the order the reference evaluates (and may fail) them in.
          list.tpl("<" + I + " name=\"").user(py_str(tool_calls[i]["name"], "tool call name")).tpl("\">\n");
          list += encode_arguments(tool_calls[i]);
          list.tpl("\n</" + I + ">");
        }
        tc_text.tpl("\n\n<" + B + ">\n");
        tc_text += list;
        tc_text.tpl("\n</" + B + ">");
      }
      const std::string summary = text_or_empty(content, "assistant content");
      const Json* rc = get(msg, "reasoning_content");
      Out thinking_part;
      const bool prev_has_task = index >= 1 && !is_none(get(messages[index - 1], "task"));
      if (thinking && !prev_has_task && (!drop || long(index) > last_user))
        thinking_part.user(text_or_empty(rc, "reasoning_content")).tpl(kThinkEnd);
      prompt += thinking_part;
      prompt.user(summary);
      prompt += tc_text;
      if (!truthy(get(msg, "wo_eos"))) prompt.tpl(kEos);
    } else {
      fail("Unknown role: " + (role.is_null() ? std::string("None") : describe(role)));
    }

    // Generation header / task token when the next message is not an assistant turn.
    if (index + 1 < messages.size()) {
      const Json& next_role = role_of(messages[index + 1]);
      if (!(str_eq(&next_role, "assistant") || str_eq(&next_role, "latest_reminder"))) return prompt;
    }
    const Json* task = get(msg, "task");
    if (!is_none(task)) {
      static const std::map<std::string, std::string> kTasks = {
          {"action", "<｜action｜>"}, {"query", "<｜query｜>"},   {"authority", "<｜authority｜>"},
          {"domain", "<｜domain｜>"}, {"title", "<｜title｜>"}, {"read_url", "<｜read_url｜>"}};
      auto it = task->is_string() ? kTasks.find(task->get<std::string>()) : kTasks.end();
      if (it == kTasks.end()) fail("Invalid task: '" + describe(*task) + "'");
      if (it->first != "action") {
        prompt.tpl(it->second);
      } else {
        prompt.tpl(kAssistant);
        prompt.tpl(thinking ? kThinkStart : kThinkEnd);
        prompt.tpl(it->second);
      }
    } else if (str_eq(&role, "user") || (v41() ? (str_eq(&role, "system") && index > 0) : str_eq(&role, "developer"))) {
      prompt.tpl(kAssistant);
      if (!drop && thinking) prompt.tpl(kThinkStart);
      else if (drop && thinking && long(index) >= last_user) prompt.tpl(kThinkStart);
      else prompt.tpl(kThinkEnd);
    }
    return prompt;
  }
};

}  // namespace

EncodeOptions options_from_json(const Json& kwargs) {
  if (!kwargs.is_object()) throw std::invalid_argument("options must be a JSON object");
  EncodeOptions o;
  bool have_mode = false;
  for (auto it = kwargs.begin(); it != kwargs.end(); ++it) {
    const std::string& k = it.key();
    if (k == "thinking_mode") {
      o.thinking_mode = it.value();
      have_mode = true;
    } else if (k == "reasoning_effort") {
      o.reasoning_effort = it.value();
    } else if (k == "drop_thinking") {
      o.drop_thinking = it.value();
    } else if (k == "add_default_bos_token") {
      o.add_default_bos_token = it.value();
    } else if (k == "context") {
      o.context = it.value();
    } else {
      throw std::invalid_argument("encode_messages() got an unexpected keyword argument '" + k + "'");
    }
  }
  if (!have_mode) throw std::invalid_argument("encode_messages() missing required argument: 'thinking_mode'");
  return o;
}

std::string RenderedPrompt::text() const {
  std::string s;
  for (const auto& p : pieces) s += p.text;
  return s;
}

std::vector<int32_t> tokenize_prompt(const tokenizer::Tokenizer& tok, const RenderedPrompt& prompt,
                                     bool trusted_special_tokens) {
  using tokenizer::SpecialTokenMode;
  if (trusted_special_tokens) return tok.encode(prompt.text(), SpecialTokenMode::kMatchAll);
  std::vector<tokenizer::TextSegment> segs;
  segs.reserve(prompt.pieces.size());
  for (const auto& p : prompt.pieces)
    segs.push_back({p.text, p.from_template ? SpecialTokenMode::kMatchAll : SpecialTokenMode::kMatchNone});
  return tok.encode(std::span<const tokenizer::TextSegment>(segs));
}

std::vector<int32_t> chat_hidden_token_ids(const tokenizer::Tokenizer& tok) {
  std::vector<int32_t> ids;
  for (const auto& t : tok.added_tokens()) {
    if (t.content == kThinkStart || t.content == kThinkEnd || t.content == kDsml) continue;
    ids.push_back(t.id);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

RenderedPrompt render_messages(ChatFamily family, const Json& messages, const EncodeOptions& options) {
  return Encoder(family, options).encode(messages);
}

RenderedPrompt render_messages(ChatFamily family, const nlohmann::json& messages, const EncodeOptions& options) {
  return render_messages(family, Json::parse(messages.dump()), options);
}

std::string encode_messages(ChatFamily family, const Json& messages, const EncodeOptions& options) {
  return render_messages(family, messages, options).text();
}

std::string encode_messages(ChatFamily family, const nlohmann::json& messages, const EncodeOptions& options) {
  return encode_messages(family, Json::parse(messages.dump()), options);
}

}  // namespace deepinfer::chat
