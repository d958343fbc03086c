#include "server/chat_prompt.h"

#include <algorithm>

#include "server/errors.h"
#include "server/structured_output.h"
#include "tokenizer/chat/chat_request.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::server {

using chat::Json;

const Json* find_field(const Json& o, const char* key) {
  if (!o.is_object()) return nullptr;
  auto it = o.find(key);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}

void bad_request(const std::string& msg, const std::string& param) {
  throw ApiError(ErrorCode::kInvalidRequest, msg, param);
}

// Tokens up to and including the last assistant-role marker of the template: where the next
// turn, which renders this answer differently, diverges. With the marker a special token of
// the vocabulary that is an exact token boundary; a tokenizer without it may merge across
// it, so the common prefix of both tokenizations is taken (a wrong guess only costs a miss:
// hits compare tokens).
static int64_t answer_start(const tokenizer::Tokenizer& tok, const chat::RenderedPrompt& rendered,
                     const std::vector<int32_t>& ids, bool trusted) {
  const std::string marker = chat::kAssistant;
  for (size_t i = rendered.pieces.size(); i-- > 0;) {
    const chat::PromptPiece& piece = rendered.pieces[i];
    const size_t at = piece.from_template ? piece.text.rfind(marker) : std::string::npos;
    if (at == std::string::npos) continue;
    chat::RenderedPrompt head;
    head.pieces.assign(rendered.pieces.begin(), rendered.pieces.begin() + long(i));
    head.pieces.push_back({piece.text.substr(0, at + marker.size()), true});
    const std::vector<int32_t> h = chat::tokenize_prompt(tok, head, trusted);
    const size_t n = size_t(std::mismatch(h.begin(), h.end(), ids.begin(), ids.end()).first - h.begin());
    return n < ids.size() ? int64_t(n) : 0;
  }
  return 0;
}

ChatPrompt build_chat_prompt(const Backend& b, const Json& body, bool trusted_special_tokens) {
  if (b.chat_family.empty() || !b.tokenizer)
    throw ApiError(ErrorCode::kInvalidRequest, "this model has no chat template or tokenizer; use /v1/completions");
  ChatPrompt p;
  p.family = *chat::parse_family(b.chat_family);
  chat::RenderedPrompt rendered;
  try {
    rendered = chat::render_chat_request(p.family, body, &p.thinking);
  } catch (const chat::RequestError& e) {
    throw ApiError(ErrorCode::kInvalidRequest, e.what(), e.param);
  }
  p.ids = chat::tokenize_prompt(*b.tokenizer, rendered, trusted_special_tokens || b.trusted_special_tokens);
  p.constraint = output_constraint(b, body, p.family, p.thinking);
  if (const int64_t at = answer_start(*b.tokenizer, rendered, p.ids, trusted_special_tokens || b.trusted_special_tokens);
      at > 0)
    p.cache_points.push_back(at);
  return p;
}

}  // namespace deepinfer::server
