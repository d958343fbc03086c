#include "tokenizer/chat/family.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace deepinfer::chat {

std::optional<ChatFamily> parse_family(std::string_view name) {
  if (name == "v4") return ChatFamily::V4;
  if (name == "v4_0731" || name == "v4-0731") return ChatFamily::V4_0731;
  if (name == "v41" || name == "v4.1") return ChatFamily::V41;
  return std::nullopt;
}

const char* family_name(ChatFamily f) {
  switch (f) {
    case ChatFamily::V4: return "v4";
    case ChatFamily::V4_0731: return "v4_0731";
    case ChatFamily::V41: return "v41";
  }
  return "?";
}

namespace {

std::optional<std::string> read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool contains(const std::string& s, const char* needle) { return s.find(needle) != std::string::npos; }

}  // namespace

ChatFamily detect_family(const std::string& model_dir, std::string* reason) {
  namespace fs = std::filesystem;
  const fs::path dir(model_dir);
  auto say = [&](const std::string& why, ChatFamily f) {
    if (reason) *reason = why;
    return f;
  };

  auto cfg_text = read_text(dir / "config.json");
  if (!cfg_text) throw std::runtime_error("cannot read " + (dir / "config.json").string());
  nlohmann::json cfg = nlohmann::json::parse(*cfg_text, nullptr, false);
  if (cfg.is_discarded() || !cfg.is_object())
    throw std::runtime_error((dir / "config.json").string() + " is not a JSON object");

  // 1. V4.1 is recognisable from its config alone.
  if (cfg.value("model_type", "") == "deepseek_v41") return say("config.json model_type deepseek_v41", ChatFamily::V41);
  if (cfg.contains("text_config") && cfg["text_config"].is_object())
    return say("config.json has text_config (V4.1 layout)", ChatFamily::V41);
  if (cfg.contains("engram_layer_ids")) return say("config.json has engram_layer_ids", ChatFamily::V41);

  // 2. A bundled reference encoder names its effort table.
  for (const char* rel : {"encoding/encoding_dsv4.py", "encoding/encoding.py", "encoding_dsv4.py"}) {
    auto src = read_text(dir / rel);
    if (!src) continue;
    if (contains(*src, "REASONING_EFFORT_TEMPLATE")) return say(std::string(rel) + " has the numeric effort template", ChatFamily::V41);
    if (contains(*src, "REASONING_EFFORT_PROMPTS") || contains(*src, "Beyond maximum"))
      return say(std::string(rel) + " has the 0731 effort tiers", ChatFamily::V4_0731);
    if (contains(*src, "REASONING_EFFORT_MAX")) return say(std::string(rel) + " has the preview effort prefix", ChatFamily::V4);
  }

  // 3. A chat template, when present.
  std::string tmpl;
  if (auto tc = read_text(dir / "tokenizer_config.json")) {
    nlohmann::json j = nlohmann::json::parse(*tc, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.contains("chat_template")) {
      const auto& ct = j["chat_template"];
      if (ct.is_string()) tmpl = ct.get<std::string>();
      else if (ct.is_array())
        for (const auto& e : ct)
          if (e.is_object() && e.contains("template") && e["template"].is_string()) tmpl += e["template"].get<std::string>();
    }
  }
  if (auto jt = read_text(dir / "chat_template.jinja")) tmpl += *jt;
  if (!tmpl.empty()) {
    if (contains(tmpl, "<｜System｜>")) return say("chat template uses <｜System｜>", ChatFamily::V41);
    if (contains(tmpl, "Beyond maximum")) return say("chat template has the 0731 max-effort text", ChatFamily::V4_0731);
    if (contains(tmpl, "Absolute maximum")) return say("chat template has the preview max-effort text", ChatFamily::V4);
  }

  // 4. DSpark keys came with the 0731/0813 refreshes.
  if (cfg.contains("dspark_block_size")) return say("config.json has dspark_block_size", ChatFamily::V4_0731);
  return say("default (no V4.1 or 0731 marker found)", ChatFamily::V4);
}

}  // namespace deepinfer::chat
