// The release registry (release.h): which rules a parsed config runs with, and the Config
// helpers that depend on them.
#include "model/deepseek_v4/release.h"

#include "model/deepseek_v4/config.h"

namespace deepinfer::v4 {

// The one place a release is registered. config.cpp recognises the family; a V4 config with
// dspark_* keys parses only with DSpark stages (parse_v4_dspark), so has_dspark() tells the
// 0731/0813 layout apart from the base releases.
const ReleaseRules& release_rules(const Config& cfg) {
  if (cfg.family == Family::V41) return v41_release();
  if (cfg.has_dspark()) return v4_dspark_release();
  return v4_release();
}

int64_t Config::act_block() const { return release_rules(*this).act_block; }

bool Config::dspark_taps_layer_output() const { return release_rules(*this).dspark_taps_layer_output; }

bool Config::drafts_with_mtp_module() const { return release_rules(*this).drafting == Drafting::kMtpModule; }

const char* Config::release_name() const { return release_rules(*this).name; }

bool Config::owns_compressor(int64_t layer) const {
  if (!release_rules(*this).shared_attention_runtime) return ratio(layer) != 0;
  return layer < n_layers && kv_source_of[size_t(layer)] == layer;
}

bool Config::owns_index_keys(int64_t layer) const {
  return release_rules(*this).shared_attention_runtime ? owns_compressor(layer) : ratio(layer) == 4;
}

bool Config::is_index_source(int64_t layer) const {
  return release_rules(*this).shared_attention_runtime && layer < n_layers && index_source_of[size_t(layer)] == layer;
}

}  // namespace deepinfer::v4
