// Snapshots of finished sequences, reusable by later requests whose tokens extend the
// snapshot's tokens exactly (the multi-turn / agent-loop case: the next prompt is the old
// prompt + output + new turn; or many requests after one shared system prompt). A snapshot
// is the attention state after `tokens`; it holds its KV blocks (under its own owner id)
// until it is evicted.
//
// Only the index lives here (ids, tokens, LRU order). The scheduler forks a hit snapshot's
// blocks (KvManager::fork: full pages shared, the rest copied) so that the snapshot stays
// cached for the next request, or moves them when memory is too short for a fork.
//
// Granularity: a snapshot serves prompts that strictly extend its tokens (at least one new
// token, whose logits the new request needs). V4's window ring and compressor state cannot
// be rewound, so a snapshot cannot serve a prompt that diverges inside it; the scheduler
// therefore also keeps checkpoints part-way through prompts (scheduler.h).
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

namespace deepinfer::kv {

class PrefixCache {
 public:
  explicit PrefixCache(int64_t max_entries) : max_entries_(max_entries < 0 ? 0 : max_entries) {}

  int64_t max_entries() const { return max_entries_; }
  int64_t size() const { return int64_t(entries_.size()); }

  struct Hit {
    uint64_t snapshot_id = 0;
    int64_t n_tokens = 0;
  };
  // The longest snapshot whose tokens are a strict prefix of `tokens`.
  std::optional<Hit> lookup(const std::vector<int32_t>& tokens) const;
  // The snapshot whose tokens are exactly `tokens`, if any.
  std::optional<uint64_t> find(const std::vector<int32_t>& tokens) const;
  // Adds a snapshot (most recently used). Returns the ids evicted to stay within
  // max_entries (possibly the new one itself when max_entries is 0).
  std::vector<uint64_t> insert(uint64_t snapshot_id, std::vector<int32_t> tokens);
  // Removes a snapshot from the index (taken by a request, or evicted for memory).
  bool erase(uint64_t snapshot_id);
  // Marks a snapshot most recently used (a hit).
  void touch(uint64_t snapshot_id);
  // Least recently used snapshot other than `keep`, if any.
  std::optional<uint64_t> oldest(std::optional<uint64_t> keep = std::nullopt) const;
  // The tokens of a snapshot; null for an unknown id.
  const std::vector<int32_t>* tokens(uint64_t snapshot_id) const;
  // Every snapshot id, least recently used first.
  std::vector<uint64_t> ids() const;

 private:
  struct Entry {
    uint64_t id;
    std::vector<int32_t> tokens;
    uint64_t last_use;
  };
  int64_t max_entries_;
  uint64_t clock_ = 0;
  std::vector<Entry> entries_;
};

}  // namespace deepinfer::kv
