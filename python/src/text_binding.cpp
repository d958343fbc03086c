// The text side of the package: the checkpoint's tokenizer, the DeepSeek prompt encoders
// (deepinfer render) and the output parser (deepinfer parse-output). Texts cross the boundary
// as UTF-8; JSON values (messages, tools, encoder options) cross as JSON text written by
// Python's json.dumps, parsed here into the key-ordered JSON the encoders take.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "core/json_limits.h"
#include "text_binding.h"
#include "tokenizer/chat/encoder.h"
#include "tokenizer/chat/family.h"
#include "tokenizer/chat/output_parser.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::python {

namespace {

using chat::Json;

chat::ChatFamily family_of(const std::string& name) {
  auto f = chat::parse_family(name);
  if (!f) throw std::invalid_argument("family must be 'v4', 'v4_0731' or 'v41', got '" + name + "'");
  return *f;
}

Json parse_json(const std::string& text, const char* what) {
  std::string why;
  std::optional<Json> j = parse_json_bounded<Json>(text, &why);
  if (!j) throw std::invalid_argument(std::string(what) + " is " + why);
  return std::move(*j);
}

// The CLI render's contract: tools go on the first message, as the reference's case loader
// puts them; what the encoder rejects is a ValueError with the encoder's message.
std::string render(const std::string& family, const std::string& messages_json, const std::string& options_json,
                   const std::string& tools_json) {
  const chat::ChatFamily fam = family_of(family);
  Json messages = parse_json(messages_json, "messages");
  if (!messages.is_array()) throw std::invalid_argument("messages must be a list of message dicts");
  if (!tools_json.empty()) {
    if (messages.empty() || !messages[0].is_object())
      throw std::invalid_argument("tools need a first message to attach to");
    messages[0]["tools"] = parse_json(tools_json, "tools");
  }
  try {
    const chat::EncodeOptions opts = chat::options_from_json(parse_json(options_json, "options"));
    return chat::encode_messages(fam, messages, opts);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("malformed messages: ") + e.what());
  }
}

// (content, reasoning_content, [(name, arguments)], errors)
using ParsedTuple = std::tuple<std::string, std::string, std::vector<std::pair<std::string, std::string>>,
                               std::vector<std::string>>;

ParsedTuple parsed_tuple(const chat::ParsedOutput& p) {
  std::vector<std::pair<std::string, std::string>> calls;
  for (const auto& c : p.tool_calls) calls.emplace_back(c.name, c.arguments);
  return {p.content, p.reasoning_content, std::move(calls), p.errors};
}

}  // namespace

TextTokenizer TextTokenizer::load(const std::string& path) {
  return TextTokenizer{std::make_shared<const tokenizer::Tokenizer>(tokenizer::Tokenizer::from_file(path))};
}

void bind_text(nb::module_& m) {
  nb::class_<TextTokenizer>(m, "Tokenizer")
      .def_static("from_file", &TextTokenizer::load, nb::arg("path"), nb::call_guard<nb::gil_scoped_release>(),
                  "a tokenizer.json file or a directory holding one")
      .def(
          "encode",
          [](const TextTokenizer& t, const std::string& text, bool match_special) {
            return t.tok->encode(text, match_special);
          },
          nb::arg("text"), nb::arg("match_special_tokens") = true, nb::call_guard<nb::gil_scoped_release>())
      .def(
          "decode",
          [](const TextTokenizer& t, const std::vector<int32_t>& ids, bool skip_special) {
            std::string s;
            {
              nb::gil_scoped_release nogil;
              s = t.tok->decode(ids, skip_special);
            }
            return nb::bytes(s.data(), s.size());
          },
          nb::arg("ids"), nb::arg("skip_special_tokens") = false)
      .def("token_bytes",
           [](const TextTokenizer& t, int32_t id) {
             const std::string& s = t.tok->token_bytes(id);
             return nb::bytes(s.data(), s.size());
           })
      .def("token_string", [](const TextTokenizer& t, int32_t id) { return t.tok->token_string(id); })
      .def("token_id", [](const TextTokenizer& t, const std::string& s) { return t.tok->token_id(s); })
      .def("is_special", [](const TextTokenizer& t, int32_t id) { return t.tok->is_special(id); })
      .def_prop_ro("vocab_size", [](const TextTokenizer& t) { return t.tok->vocab_size(); });

  m.def("render", &render, nb::arg("family"), nb::arg("messages_json"), nb::arg("options_json"),
        nb::arg("tools_json") = "", nb::call_guard<nb::gil_scoped_release>());
  m.def(
      "parse_output",
      [](const std::string& family, const std::string& text, bool thinking) {
        return parsed_tuple(chat::parse_output(family_of(family), text, thinking));
      },
      nb::arg("family"), nb::arg("text"), nb::arg("thinking") = false, nb::call_guard<nb::gil_scoped_release>());
  m.def("parse_family", [](const std::string& name) { return std::string(chat::family_name(family_of(name))); });
  m.def(
      "detect_family",
      [](const std::string& model_dir) {
        std::string why;
        const chat::ChatFamily f = chat::detect_family(model_dir, &why);
        return std::make_pair(std::string(chat::family_name(f)), why);
      },
      nb::arg("model_dir"), nb::call_guard<nb::gil_scoped_release>());
}

}  // namespace deepinfer::python
