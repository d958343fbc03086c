// What a chat request asks of the form of its answer, as a constraint on the sampled tokens
// (token_constraint.h):
//   * tool_choice "required": the answer is a DSML tool-call block (one or more calls of the
//     request's tools; one only with parallel_tool_calls: false); a named function
//     {"type": "function", "function": {"name": X}}: exactly one call of X. The block opener
//     (and the invoke tag of X) is forced, the rest follows tool_grammar.h. "none"
//     constrains nothing (and keeps the tools out of the prompt). "auto" (or no tool_choice)
//     with tools: the answer is free until it opens DSML markup ("<｜DSML｜", in the reasoning
//     too); from there it is a tool-call block (tool_grammar.h) calling only the declared
//     tools, with the arguments of a "strict": true tool following its schema (OpenAI's strict
//     function calling) and those of other tools free (any keys and values; their schemas are
//     not compiled).
//   * response_format {"type": "json_object"}: the answer is a JSON object (with a "schema"
//     beside the type, as Together and Fireworks take it and instructor's JSON_SCHEMA mode
//     sends it, a document following that schema);
//     {"type": "json_schema", "json_schema": {"schema": S}}: a JSON document following S
//     (json_grammar.h lists the keywords enforced; any other keyword is a 400 naming it,
//     param "response_format"; for tool parameters, param "tools").
// In both, an object schema that lists "properties" without additionalProperties takes only
// the listed keys (unless "required" names another): class-built schemas (pydantic) leave
// additionalProperties out, and free keys let a sampled model invent keys without end.
// With thinking on, the reasoning is free and the constraint starts after "</think>".
// tool_choice wins over response_format when both ask for something; response_format wins
// over strict tools under "auto".
#pragma once
#include <memory>

#include "deepinfer/sampling_params.h"
#include "server/server.h"
#include "tokenizer/chat/family.h"
#include "tokenizer/chat/py_json.h"

namespace deepinfer::server {

// Throws ApiError (400): malformed tool_choice / response_format, a schema keyword the
// grammar does not enforce (only where the schema constrains the output: the parameters of
// non-strict tools under tool_choice "auto" are not compiled), "required" or a named
// function without tools, a named function that is not among the tools. Null when the
// request constrains nothing.
std::shared_ptr<TokenConstraint> output_constraint(const Backend& b, const chat::Json& body, chat::ChatFamily family,
                                                   bool thinking);

}  // namespace deepinfer::server
