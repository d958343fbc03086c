// Snapshots of finished sequences, reusable by a later request whose tokens extend the
// snapshot's tokens exactly (the multi-turn / agent-loop case: the next prompt is the old
// prompt + output + new turn). A snapshot is the attention state after `tokens`; it holds
// its KV blocks (under its own owner id) until it is taken or evicted.
//
// Only the index lives here (ids, tokens, LRU order). The engine moves the blocks
// (KvManager::transfer) and the runner moves the state.
//
// Granularity: whole sequences, exact token prefixes, strict extension (at least one new
// token, whose logits the new request needs). V4's window ring and compressor state cannot
// be rewound, so a snapshot cannot serve a prompt that diverges inside it.
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
  // Adds a snapshot (most recently used). Returns the ids evicted to stay within
  // max_entries (possibly the new one itself when max_entries is 0).
  std::vector<uint64_t> insert(uint64_t snapshot_id, std::vector<int32_t> tokens);
  // Removes a snapshot from the index (taken by a request, or evicted for memory).
  bool erase(uint64_t snapshot_id);
  // Least recently used snapshot, if any.
  std::optional<uint64_t> oldest() const;

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
