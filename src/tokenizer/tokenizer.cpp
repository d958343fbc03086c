#include "tokenizer/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "tokenizer/bpe.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/unicode.h"

namespace deepinfer::tokenizer {

using json = nlohmann::json;

struct Tokenizer::Impl {
  std::string source;
  std::unique_ptr<BpeModel> bpe;
  PreTokenizer pre;
  std::vector<AddedToken> added;
  AddedTokenMatcher raw_matcher;         // added tokens with normalized == false
  AddedTokenMatcher normalized_matcher;  // added tokens with normalized == true
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> vocab;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> added_by_content;
  std::vector<std::string> id_string;  // token string per id ("" when unused)
  std::vector<std::string> id_bytes;   // decoded bytes per id
  std::vector<uint8_t> id_flags;       // kFlag* bits
  static constexpr uint8_t kFlagUsed = 1, kFlagAdded = 2, kFlagSpecial = 4;

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("tokenizer.json (" + source + "): " + what);
  }

  void encode_into(std::string_view text, SpecialTokenMode mode, std::vector<int32_t>& ids) const;
  // Added-token split of text[begin, end) appended to spans (what encode_into does to a whole text).
  void split_added(std::string_view text, std::size_t begin, std::size_t end, SpecialTokenMode mode,
                   std::vector<TextSpan>& spans) const;
  // Pre-tokenizer and BPE over the text spans, added-token ids for the others.
  void encode_spans(std::string_view text, const std::vector<TextSpan>& spans, std::vector<int32_t>& ids) const;
};

namespace {

const json& member(const json& j, const char* key, const Tokenizer::Impl& impl) {
  auto it = j.find(key);
  if (it == j.end()) impl.fail(std::string("missing \"") + key + "\"");
  return *it;
}

bool flag(const json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  return it->get<bool>();
}

std::string type_of(const json& j) {
  auto it = j.find("type");
  if (it == j.end() || !it->is_string()) return "";
  return it->get<std::string>();
}

void load_pre_tokenizer(const json& j, PreTokenizer& pre, const Tokenizer::Impl& impl) {
  if (j.is_null()) return;
  if (!j.is_object()) impl.fail("pre_tokenizer must be an object");
  const std::string type = type_of(j);
  if (type == "Sequence") {
    for (const json& step : member(j, "pretokenizers", impl)) load_pre_tokenizer(step, pre, impl);
    return;
  }
  if (pre.has_byte_level()) {
    impl.fail("pre_tokenizer step \"" + type + "\" after ByteLevel is not supported");
  }
  if (type == "Split") {
    const json& pat = member(j, "pattern", impl);
    const SplitBehavior behavior = split_behavior_from_name(member(j, "behavior", impl).get<std::string>());
    const bool invert = flag(j, "invert", false);
    if (pat.contains("Regex")) {
      pre.add_split_regex(pat["Regex"].get<std::string>(), behavior, invert);
    } else if (pat.contains("String")) {
      pre.add_split_literal(pat["String"].get<std::string>(), behavior, invert);
    } else {
      impl.fail("Split pattern must have \"Regex\" or \"String\"");
    }
    return;
  }
  if (type == "Digits") {
    pre.add_digits(flag(j, "individual_digits", false));
    return;
  }
  if (type == "ByteLevel") {
    pre.add_byte_level(flag(j, "add_prefix_space", true), flag(j, "use_regex", true));
    return;
  }
  impl.fail("unsupported pre_tokenizer type \"" + type + "\"");
}

void check_normalizer(const json& j, const Tokenizer::Impl& impl) {
  if (j.is_null()) return;
  const std::string type = type_of(j);
  if (type == "Sequence") {
    for (const json& n : member(j, "normalizers", impl)) check_normalizer(n, impl);
    return;
  }
  impl.fail("unsupported normalizer type \"" + type + "\" (only none / an empty Sequence)");
}

void check_decoder(const json& j, const Tokenizer::Impl& impl) {
  if (j.is_null()) return;
  const std::string type = type_of(j);
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    for (const json& d : member(j, "decoders", impl)) check_decoder(d, impl);
    return;
  }
  impl.fail("unsupported decoder type \"" + type + "\" (only ByteLevel)");
}

// What tokenizers' ByteLevel decoder makes of one token string.
std::string decode_token_string(const std::string& s) {
  if (auto raw = byte_level_decode(s)) return *raw;
  return s;
}

}  // namespace

Tokenizer Tokenizer::from_file(const std::string& path) {
  std::filesystem::path p(path);
  std::error_code ec;
  if (std::filesystem::is_directory(p, ec)) p /= "tokenizer.json";
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("tokenizer: cannot open " + p.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return from_json_string(ss.str(), p.string());
}

Tokenizer Tokenizer::from_json_string(std::string_view text, const std::string& source_name) {
  try {
    return load(text, source_name);
  } catch (const std::runtime_error& e) {
    const std::string prefix = "tokenizer.json (" + source_name + "): ";
    if (std::string_view(e.what()).substr(0, prefix.size()) == prefix) throw;
    throw std::runtime_error(prefix + e.what());
  }
}

Tokenizer Tokenizer::load(std::string_view text, const std::string& source_name) {
  auto impl = std::make_shared<Impl>();
  impl->source = source_name;
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    impl->fail(std::string("not valid JSON: ") + e.what());
  }
  try {
    if (!root.is_object()) impl->fail("top level must be an object");
    const json& model = member(root, "model", *impl);
    if (type_of(model) != "BPE") impl->fail("model.type must be \"BPE\" (got \"" + type_of(model) + "\")");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      auto it = model.find(key);
      if (it != model.end() && !it->is_null() && !it->get<std::string>().empty()) {
        impl->fail(std::string("model.") + key + " is not supported");
      }
    }
    BpeOptions opt;
    if (auto it = model.find("unk_token"); it != model.end() && !it->is_null()) opt.unk_token = it->get<std::string>();
    opt.fuse_unk = flag(model, "fuse_unk", false);
    opt.byte_fallback = flag(model, "byte_fallback", false);
    opt.ignore_merges = flag(model, "ignore_merges", false);

    const json& vocab = member(model, "vocab", *impl);
    if (!vocab.is_object()) impl->fail("model.vocab must be an object");
    impl->vocab.reserve(vocab.size());
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      if (!it.value().is_number_integer()) impl->fail("vocab id of \"" + it.key() + "\" is not an integer");
      const int64_t id = it.value().get<int64_t>();
      if (id < 0 || id > std::numeric_limits<int32_t>::max() / 2) impl->fail("vocab id out of range for \"" + it.key() + "\"");
      impl->vocab.emplace(it.key(), static_cast<int32_t>(id));
    }

    std::vector<std::pair<std::string, std::string>> merges;
    const json& jm = member(model, "merges", *impl);
    if (!jm.is_array()) impl->fail("model.merges must be an array");
    merges.reserve(jm.size());
    for (std::size_t r = 0; r < jm.size(); ++r) {
      const json& m = jm[r];
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const auto sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
          impl->fail("merge " + std::to_string(r + 1) + " is not of the form \"a b\"");
        }
        merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      } else {
        impl->fail("merge " + std::to_string(r + 1) + " must be \"a b\" or [\"a\", \"b\"]");
      }
    }
    impl->bpe = std::make_unique<BpeModel>(impl->vocab, merges, opt);

    if (auto it = root.find("normalizer"); it != root.end()) check_normalizer(*it, *impl);
    if (auto it = root.find("decoder"); it != root.end()) check_decoder(*it, *impl);
    if (auto it = root.find("pre_tokenizer"); it != root.end()) load_pre_tokenizer(*it, impl->pre, *impl);
    if (!impl->pre.has_byte_level()) impl->fail("pre_tokenizer has no ByteLevel step (only byte-level BPE is supported)");

    if (auto it = root.find("added_tokens"); it != root.end() && !it->is_null()) {
      // tokenizers re-adds the tokens in file order and does not use the "id" field: a
      // content already known (added before, or in the vocabulary) keeps that id, anything
      // else gets the next id after max(added ids, vocabulary entry count). Consistent
      // files (as written by tokenizers) get their own ids back.
      const int64_t model_size = static_cast<int64_t>(impl->vocab.size());
      int64_t max_added = -1;
      std::unordered_map<std::string, std::size_t> index_of;
      for (const json& t : *it) {
        AddedToken a;
        const int64_t file_id = member(t, "id", *impl).get<int64_t>();
        if (file_id < 0) impl->fail("added token id out of range");
        a.content = member(t, "content", *impl).get<std::string>();
        if (!is_valid_utf8(a.content)) impl->fail("added token content is not valid UTF-8");
        a.single_word = flag(t, "single_word", false);
        a.lstrip = flag(t, "lstrip", false);
        a.rstrip = flag(t, "rstrip", false);
        a.normalized = flag(t, "normalized", true);
        a.special = flag(t, "special", false);
        if (auto known = index_of.find(a.content); known != index_of.end()) {
          a.id = impl->added[known->second].id;
          impl->added[known->second] = std::move(a);  // the later definition wins
          continue;
        }
        int64_t id;
        if (auto v = impl->vocab.find(a.content); v != impl->vocab.end()) {
          id = v->second;
        } else if (max_added < 0) {
          id = model_size;
        } else {
          id = (max_added >= model_size || model_size == 0) ? max_added + 1 : model_size;
        }
        if (id > std::numeric_limits<int32_t>::max() / 2) impl->fail("added token id out of range");
        a.id = static_cast<int32_t>(id);
        max_added = std::max(max_added, id);
        index_of.emplace(a.content, impl->added.size());
        impl->added.push_back(std::move(a));
      }
    }
  } catch (const json::exception& e) {
    impl->fail(std::string("unexpected structure: ") + e.what());
  }

  std::vector<std::size_t> raw_idx, norm_idx;
  for (std::size_t i = 0; i < impl->added.size(); ++i) {
    (impl->added[i].normalized ? norm_idx : raw_idx).push_back(i);
  }
  impl->raw_matcher = AddedTokenMatcher(&impl->added, raw_idx);
  impl->normalized_matcher = AddedTokenMatcher(&impl->added, norm_idx);

  int64_t size = 0;
  for (const auto& [tok, id] : impl->vocab) size = std::max<int64_t>(size, id + 1);
  for (const AddedToken& a : impl->added) size = std::max<int64_t>(size, a.id + 1);
  impl->id_string.assign(static_cast<std::size_t>(size), std::string());
  impl->id_bytes.assign(static_cast<std::size_t>(size), std::string());
  impl->id_flags.assign(static_cast<std::size_t>(size), 0);
  for (const auto& [tok, id] : impl->vocab) {
    impl->id_string[id] = tok;
    impl->id_bytes[id] = decode_token_string(tok);
    impl->id_flags[id] |= Impl::kFlagUsed;
  }
  for (const AddedToken& a : impl->added) {  // added tokens take precedence, as in tokenizers
    impl->id_string[a.id] = a.content;
    impl->id_bytes[a.id] = decode_token_string(a.content);
    impl->id_flags[a.id] = Impl::kFlagUsed | Impl::kFlagAdded | (a.special ? Impl::kFlagSpecial : 0);
    impl->added_by_content[a.content] = a.id;
  }
  return Tokenizer(std::move(impl));
}

void Tokenizer::Impl::encode_into(std::string_view input, SpecialTokenMode mode, std::vector<int32_t>& ids) const {
  if (input.size() >= std::numeric_limits<uint32_t>::max() / 2) {
    throw std::length_error("tokenizer: text of " + std::to_string(input.size()) + " bytes is too large (limit 2 GiB)");
  }
  std::string sanitised;
  std::string_view text = input;
  if (!is_valid_utf8(input)) {
    sanitised = utf8_lossy(input);
    text = sanitised;
  }

  std::vector<TextSpan> spans;
  split_added(text, 0, text.size(), mode, spans);
  encode_spans(text, spans, ids);
}

void Tokenizer::Impl::split_added(std::string_view text, std::size_t begin, std::size_t end, SpecialTokenMode mode,
                                  std::vector<TextSpan>& spans) const {
  if (end <= begin) return;
  if (mode == SpecialTokenMode::kMatchNone || added.empty()) {
    spans.push_back(TextSpan{begin, end, -1});
    return;
  }
  const bool skip_special = mode == SpecialTokenMode::kMatchNonSpecial;
  std::vector<TextSpan> first;
  raw_matcher.split(text.substr(begin, end - begin), begin, skip_special, first);
  for (const TextSpan& s : first) {
    if (s.token >= 0) {
      spans.push_back(s);
    } else {
      normalized_matcher.split(text.substr(s.begin, s.end - s.begin), s.begin, skip_special, spans);
    }
  }
}

void Tokenizer::Impl::encode_spans(std::string_view text, const std::vector<TextSpan>& spans,
                                   std::vector<int32_t>& ids) const {
  PreTokText piece_text, scratch;
  std::vector<Piece> pieces;
  for (const TextSpan& s : spans) {
    if (s.token >= 0) {
      ids.push_back(added[static_cast<std::size_t>(s.token)].id);
      continue;
    }
    if (s.end <= s.begin) continue;
    piece_text.assign(text.substr(s.begin, s.end - s.begin));
    pieces.assign(1, Piece{0, static_cast<uint32_t>(piece_text.cps.size())});
    const PreTokText* t = pre.run(&piece_text, pieces, scratch);
    for (const Piece& p : pieces) bpe->encode(t->slice(p.begin, p.end), ids);
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool match_specials) const {
  return encode(text, match_specials ? SpecialTokenMode::kMatchAll : SpecialTokenMode::kMatchNone);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, SpecialTokenMode mode) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  impl_->encode_into(text, mode, ids);
  return ids;
}

std::vector<int32_t> Tokenizer::encode(std::span<const TextSegment> segments) const {
  std::string text;
  std::vector<std::pair<std::size_t, std::size_t>> bounds;
  for (const TextSegment& s : segments) {
    const std::size_t b = text.size();
    if (is_valid_utf8(s.text)) text.append(s.text);
    else text += utf8_lossy(s.text);
    bounds.emplace_back(b, text.size());
  }
  if (text.size() >= std::numeric_limits<uint32_t>::max() / 2) {
    throw std::length_error("tokenizer: text of " + std::to_string(text.size()) + " bytes is too large (limit 2 GiB)");
  }
  std::vector<TextSpan> spans;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const std::size_t first = spans.size();
    impl_->split_added(text, bounds[i].first, bounds[i].second, segments[i].mode, spans);
    // Text running on from the previous segment is one piece, as in the joined string:
    // a segment boundary alone must not change the pre-tokenizer's or BPE's pieces.
    if (first > 0 && first < spans.size() && spans[first - 1].token < 0 && spans[first].token < 0 &&
        spans[first - 1].end == spans[first].begin) {
      spans[first - 1].end = spans[first].end;
      spans.erase(spans.begin() + std::ptrdiff_t(first));
    }
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  impl_->encode_spans(text, spans, ids);
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string out;
  const Impl& m = *impl_;
  for (int32_t id : ids) {
    if (id < 0 || static_cast<std::size_t>(id) >= m.id_flags.size()) continue;
    const uint8_t f = m.id_flags[id];
    if (!(f & Impl::kFlagUsed)) continue;
    if (skip_special_tokens && (f & Impl::kFlagSpecial)) continue;
    out += m.id_bytes[id];
  }
  return out;
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
  static const std::string kEmpty;
  if (id < 0 || static_cast<std::size_t>(id) >= impl_->id_bytes.size()) return kEmpty;
  return impl_->id_bytes[id];
}

const std::string& Tokenizer::token_string(int32_t id) const {
  static const std::string kEmpty;
  if (id < 0 || static_cast<std::size_t>(id) >= impl_->id_string.size()) return kEmpty;
  return impl_->id_string[id];
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->id_flags.size()); }

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  if (auto it = impl_->added_by_content.find(token); it != impl_->added_by_content.end()) return it->second;
  if (auto it = impl_->vocab.find(token); it != impl_->vocab.end()) return it->second;
  return std::nullopt;
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<std::size_t>(id) < impl_->id_flags.size() && (impl_->id_flags[id] & Impl::kFlagSpecial);
}

bool Tokenizer::is_added_token(int32_t id) const {
  return id >= 0 && static_cast<std::size_t>(id) < impl_->id_flags.size() && (impl_->id_flags[id] & Impl::kFlagAdded);
}

const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added; }

std::vector<std::string> Tokenizer::pre_tokenize(std::string_view input) const {
  std::string sanitised;
  std::string_view text = input;
  if (!is_valid_utf8(input)) {
    sanitised = utf8_lossy(input);
    text = sanitised;
  }
  std::vector<std::string> out;
  if (text.empty()) return out;
  PreTokText t, scratch;
  t.assign(text);
  std::vector<Piece> pieces{Piece{0, static_cast<uint32_t>(t.cps.size())}};
  const PreTokText* r = impl_->pre.run(&t, pieces, scratch);
  for (const Piece& p : pieces) out.emplace_back(r->slice(p.begin, p.end));
  return out;
}

std::size_t Tokenizer::cache_entries() const { return impl_->bpe->cache_entries(); }

}  // namespace deepinfer::tokenizer
