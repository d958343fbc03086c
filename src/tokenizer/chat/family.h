// Prompt-format families of DeepSeek-V4 checkpoints.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace deepinfer::chat {

enum class ChatFamily {
  V4,       // V4-Flash / V4-Pro preview encoder: effort None|"high"|"max" (only "max" adds a prefix)
  V4_0731,  // V4-Flash-0731 / V4-Pro-0813 encoder: effort "low"(default)|"high"|"max"
  V41,      // V4.1 encoder: spaced DSML tags, numeric effort 1..100, <｜System｜>
};

// "v4", "v4_0731", "v41" (also accepted: "v4-0731", "v4.1").
std::optional<ChatFamily> parse_family(std::string_view name);
const char* family_name(ChatFamily f);

// Picks the family of a checkpoint directory. Rule, first match wins:
//  1. config.json says V4.1: model_type "deepseek_v41", or a `text_config`
//     object, or `engram_layer_ids` at the root or in `text_config`  -> v41
//  2. a bundled reference encoder (encoding/encoding_dsv4.py, encoding/encoding.py):
//     contains "REASONING_EFFORT_TEMPLATE" -> v41; "REASONING_EFFORT_PROMPTS" or
//     "Beyond maximum" -> v4_0731; "REASONING_EFFORT_MAX" -> v4
//  3. a chat template (tokenizer_config.json "chat_template", or chat_template.jinja):
//     contains "<｜System｜>" -> v41; "Beyond maximum" -> v4_0731; "Absolute maximum" -> v4
//  4. config.json has `dspark_block_size` (0731/0813 refreshes add DSpark) -> v4_0731
//  5. otherwise -> v4
// config.json and tokenizer_config.json of V4 preview and 0731 are otherwise
// identical, so steps 2-4 are heuristics; the "-DSpark" preview variant has dspark
// keys but the preview encoder and is only told apart by its bundled encoder.
// Throws std::runtime_error when DIR/config.json is missing or unreadable.
ChatFamily detect_family(const std::string& model_dir, std::string* reason = nullptr);

}  // namespace deepinfer::chat
