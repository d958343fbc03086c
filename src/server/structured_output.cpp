#include "server/structured_output.h"

#include <optional>

#include "core/json_limits.h"
#include "server/chat_prompt.h"
#include "server/token_constraint.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::server {

namespace {

using chat::Json;

[[noreturn]] void bad(const std::string& msg, const std::string& param) { bad_request(msg, param); }
const Json* find(const Json& o, const char* key) { return find_field(o, key); }

// A schema object that lists its "properties" and says nothing of additionalProperties takes
// only those keys here (JSON Schema would allow any other key; xgrammar's strict mode, vLLM's
// default, reads it this way too). Clients that build schemas from classes (pydantic through
// instructor or LangChain) leave additionalProperties out, and with free keys open a sampled
// model writes invented keys and never reaches the declared ones: the object never ends.
// Left open where a "required" key is not among the properties (it could only be an extra
// key). Walks only the keywords that hold schemas (json_grammar.h: others are a 400 anyway);
// each step goes one level deeper into client JSON, whose depth is bounded (json_limits.h).
void close_declared_objects(Json& schema, size_t depth = 0) {
  if (!schema.is_object() || depth > JsonLimits{}.max_depth) return;
  const Json* props = find(schema, "properties");
  if (props && props->is_object() && !find(schema, "additionalProperties")) {
    bool all_declared = true;
    if (const Json* req = find(schema, "required"); req && req->is_array())
      for (const Json& k : *req) all_declared = all_declared && k.is_string() && props->contains(k.get<std::string>());
    if (all_declared) schema["additionalProperties"] = false;
  }
  for (const char* map : {"properties", "$defs", "definitions"})
    if (auto it = schema.find(map); it != schema.end() && it->is_object())
      for (auto& sub : *it) close_declared_objects(sub, depth + 1);
  for (const char* one : {"additionalProperties", "additionalItems", "items"})
    if (auto it = schema.find(one); it != schema.end() && it->is_object()) close_declared_objects(*it, depth + 1);
  for (const char* list : {"items", "prefixItems", "anyOf", "oneOf", "allOf"})
    if (auto it = schema.find(list); it != schema.end() && it->is_array())
      for (auto& sub : *it) close_declared_objects(sub, depth + 1);
}

Json closed_declared_objects(Json schema) {
  close_declared_objects(schema);
  return schema;
}

struct ToolChoice {
  enum Kind { kAuto, kNone, kRequired, kNamed } kind = kAuto;
  std::string name;
};

ToolChoice parse_tool_choice(const Json& body) {
  ToolChoice c;
  const Json* t = find(body, "tool_choice");
  if (!t) return c;
  if (t->is_string()) {
    const std::string& s = t->get_ref<const std::string&>();
    if (s == "auto") c.kind = ToolChoice::kAuto;
    else if (s == "none") c.kind = ToolChoice::kNone;
    else if (s == "required") c.kind = ToolChoice::kRequired;
    else bad("tool_choice must be \"none\", \"auto\", \"required\" or a named function", "tool_choice");
    return c;
  }
  const Json* type = find(*t, "type");
  const Json* fn = find(*t, "function");
  const Json* name = fn ? find(*fn, "name") : nullptr;
  if (!type || *type != "function" || !name || !name->is_string())
    bad("tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}",
        "tool_choice");
  c.kind = ToolChoice::kNamed;
  c.name = name->get<std::string>();
  return c;
}

bool is_strict(const Json& fn) {
  const Json* strict = find(fn, "strict");
  return strict && strict->is_boolean() && strict->get<bool>();
}

// strict_only: only {"strict": true} tools have their schemas enforced, the others take free
// arguments (tool_choice "auto"); otherwise every tool's schema is.
std::vector<ToolSpec> tool_specs(const Json& body, bool strict_only = false) {
  std::vector<ToolSpec> specs;
  const Json* tools = find(body, "tools");
  if (!tools || !tools->is_array()) return specs;
  for (const auto& t : *tools) {
    const Json* fn = find(t, "function");
    const Json* name = fn ? find(*fn, "name") : nullptr;
    if (!name || !name->is_string()) bad("each tool needs function.name (a string)", "tools");
    const Json* params = find(*fn, "parameters");
    const bool enforce = !strict_only || is_strict(*fn);
    specs.push_back({name->get<std::string>(),
                     params ? (enforce ? closed_declared_objects(*params) : *params) : Json(), enforce});
  }
  return specs;
}

ConstraintStart start_of(const Backend& b, bool thinking) {
  ConstraintStart s;
  s.index = b.token_index->get(*b.tokenizer);
  s.eos_token_id = b.engine->info().eos_token_id;
  s.after_reasoning = thinking;
  return s;
}

std::shared_ptr<TokenConstraint> tool_constraint(const Backend& b, const Json& body, const ToolChoice& choice,
                                                 chat::ChatFamily family, bool thinking) {
  const std::vector<ToolSpec> specs = tool_specs(body);
  if (specs.empty()) bad("tool_choice \"required\" or a named function needs a non-empty 'tools'", "tool_choice");
  int named = -1;
  if (choice.kind == ToolChoice::kNamed) {
    for (size_t i = 0; i < specs.size() && named < 0; ++i)
      if (specs[i].name == choice.name) named = int(i);
    if (named < 0) bad("tool_choice names the function '" + choice.name + "', which is not in 'tools'", "tool_choice");
  }
  const Json* par = find(body, "parallel_tool_calls");
  const bool parallel = named < 0 && !(par && par->is_boolean() && !par->get<bool>());
  std::optional<ToolGrammar> built;
  try {
    built.emplace(family, specs, parallel);
  } catch (const SchemaError& e) {
    bad(std::string("tools: ") + e.what(), "tools");
  }
  ToolGrammar g = std::move(*built);
  ConstraintStart s = start_of(b, thinking);
  s.forced = b.tokenizer->encode(g.forced_prefix(named), true);
  return make_tool_constraint(std::move(s), std::move(g), named);
}

// tool_choice "auto" (or unset) with tools: the answer is free, but DSML markup it opens is a
// tool-call block of the declared tools. A {"strict": true} tool's arguments hold to its
// schema (OpenAI's strict function calling; openai-python's pydantic_function_tool and
// openai-agents set strict), a non-strict tool's are free (ToolSpec::enforce): its schema is
// neither enforced nor compiled, so any schema is taken and the arguments the model would write
// unconstrained stay possible, in the DSML form the chat encoder shows it (and DeepSeek's
// habit of writing enum / pattern strings as string="true" text, which enforcing a schema
// would turn into JSON). Only the name is held there: the parser takes any name, and a client
// fails a turn that calls a tool it does not have. The grammar waits for "<｜DSML｜": a block
// opener in either spelling, an invoke written without one (both parsed as calls) and one
// inside the reasoning (the parser ends the reasoning there) are all held. Until then the
// constraint costs a look at each token's bytes, no mask, and drafts are verified through it
// as for any request (engine_core.cpp).
std::shared_ptr<TokenConstraint> auto_tool_constraint(const Backend& b, const Json& body, chat::ChatFamily family,
                                                      bool thinking) {
  const std::vector<ToolSpec> specs = tool_specs(body, true);
  if (specs.empty()) return nullptr;
  const Json* par = find(body, "parallel_tool_calls");
  const bool parallel = !(par && par->is_boolean() && !par->get<bool>());
  std::optional<ToolGrammar> built;
  try {
    // As many calls as the model writes: "auto" keeps what it would do unconstrained.
    built.emplace(family, specs, parallel, 0xFFFF);
  } catch (const SchemaError& e) {
    bad(std::string("tools: ") + e.what(), "tools");
  }
  ConstraintStart s = start_of(b, thinking);
  s.wait_for = ToolGrammar::trigger();
  return make_tool_constraint(std::move(s), std::move(*built), ToolGrammar::kAfterDsml);
}

std::shared_ptr<TokenConstraint> json_constraint(const Backend& b, const Json& format, bool thinking) {
  const Json* type = find(format, "type");
  if (!type || *type == "text") return nullptr;
  JsonGrammar g(JsonSchema{}, true);  // the chat output parser reads the answer
  int32_t root = 0;
  auto add = [&](const Json& schema, const std::string& where) {
    if (!schema.is_object() && !schema.is_boolean()) bad(where + " must be an object", "response_format");
    try {
      root = g.add_schema(closed_declared_objects(schema));
    } catch (const SchemaError& e) {
      bad(where + ": " + e.what(), "response_format");
    }
  };
  if (*type == "json_object") {
    // {"type": "json_object", "schema": S} (Together's and Fireworks' spelling, sent by
    // instructor's JSON_SCHEMA mode) asks for S: enforce it rather than any object.
    if (const Json* schema = find(format, "schema")) add(*schema, "response_format.schema");
    else root = g.add_schema(Json{{"type", "object"}});
  } else {
    const Json* js = find(format, "json_schema");
    if (!js || !js->is_object()) bad("response_format.json_schema must be an object", "response_format");
    if (const Json* schema = find(*js, "schema")) add(*schema, "response_format.json_schema.schema");
  }
  return make_json_constraint(start_of(b, thinking), std::move(g), root);
}

}  // namespace

std::shared_ptr<TokenConstraint> output_constraint(const Backend& b, const Json& body, chat::ChatFamily family,
                                                   bool thinking) {
  const ToolChoice choice = parse_tool_choice(body);
  if (choice.kind == ToolChoice::kRequired || choice.kind == ToolChoice::kNamed)
    return tool_constraint(b, body, choice, family, thinking);
  if (const Json* f = find(body, "response_format")) {
    if (auto c = json_constraint(b, *f, thinking)) return c;
  }
  // (Under response_format the answer is JSON, whose strings take no chat markup: no tool-call
  // block can open, so no names need holding.)
  if (choice.kind == ToolChoice::kAuto) return auto_tool_constraint(b, body, family, thinking);
  return nullptr;
}

}  // namespace deepinfer::server
