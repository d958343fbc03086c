// The token-budget scheduler (vLLM v1 style: it speaks tokens, not phases). Each step
// hands out at most max_batch_tokens tokens:
//   1. running requests first, decode tokens before prefill chunks (a decoder costs one
//      token, so decoders are never starved by a long prompt; one with speculative drafts
//      costs one more per draft, granted while max_running tokens stay for prefills); the
//      remaining budget goes to running prefills oldest first (chunked prefill);
//   2. then waiting requests, strictly FCFS (the head is never overtaken, so a long prompt
//      cannot be starved by short ones), if no preemption happened this step.
// Long prompts (options below) are prefilled max_long_partial_prefills at a time: a second
// one waits for the step after the first one's last chunk.
// KV blocks are reserved before a chunk is scheduled. When the pool is short: evict
// prefix-cache snapshots (LRU), then preempt the newest running request (its state is
// dropped; it goes back to the head of the queue and later recomputes prompt + output).
// The oldest running request is therefore never preempted by others and, since
// max_model_len fits the pool, always progresses.
//
// Prefix cache: a request whose prompt strictly extends a snapshot's tokens forks it (full
// pages shared, fixed part and partly filled last page copied), so the snapshot stays cached
// for the next request after the same prefix. Where the pool cannot spare the fork's fresh
// blocks, the snapshot is moved to the request instead (what the fork would copy, it takes).
// Checkpoints: while a prompt is prefilled, its state is also kept as a snapshot (a fork) at
// every multiple of prefix_cache_granularity and at the request's cache_points (prefill
// chunks end there), so a later prompt that shares only a part of it hits too, up to the
// longest such checkpoint. V4's window rings and compressor state cannot be rewound, so hits
// come only at these points: the granularity. An aligned checkpoint shares every page and
// costs its fixed blocks (the rings and compressor state of one sequence).
//
// A request is admitted only if its first chunk fits in free blocks plus what evicting other
// snapshots would really free (pages they share with live sequences would not be freed).
//
// Ordering invariant (checked by check_integrity): running requests are sorted by arrival,
// waiting requests too, and every running request arrived before every waiting one.
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "engine/request_state.h"
#include "engine/runner.h"
#include "kv/disk_cache.h"
#include "kv/kv_manager.h"
#include "kv/prefix_cache.h"

namespace deepinfer::engine {

struct SchedulerOptions {
  int64_t max_batch_tokens = 512;   // must exceed max_running so prefills always progress
  int64_t max_running = 32;
  int64_t prefix_cache_entries = 64;
  // Prefix-cache checkpoints are taken at every multiple of this many prompt tokens (and at
  // a request's cache_points); 0 = only at cache_points and finished sequences. A multiple of
  // the KV block: an aligned checkpoint then shares every page and costs only its fixed blocks.
  int64_t prefix_cache_granularity = 512;
  // Long prompts are prefilled one at a time (vLLM's max_long_partial_prefills): on a CPU a
  // step's time grows with its tokens, so two long prompts prefilled side by side both wait
  // for both, while one after the other the first answers in about half the time and the
  // second hardly later. A prompt is long while it has at least long_prefill_token_threshold
  // tokens left to prefill; shorter ones join any step. 0 = no limit.
  int64_t max_long_partial_prefills = 1;
  int64_t long_prefill_token_threshold = 64;
};

struct ScheduledRequest {
  Request* req = nullptr;
  int64_t n_tokens = 0;
};

struct SchedulerCounters {
  uint64_t preemptions = 0;
  uint64_t prefix_queries = 0, prefix_hits = 0, prefix_hit_tokens = 0;
  uint64_t checkpoints_taken = 0, checkpoints_skipped = 0;  // skipped: same tokens cached, or no room
  uint64_t disk_hits = 0, disk_hit_tokens = 0;
  uint64_t disk_reads_started = 0, disk_reads_failed = 0;  // failed: a miss after all (the request prefills)
};

class Scheduler {
 public:
  // Throws std::invalid_argument for max_batch_tokens <= max_running or non-positive limits.
  Scheduler(const SchedulerOptions& options, const kv::KvSpec& spec, int64_t n_blocks);

  void add(Request* r);
  std::vector<ScheduledRequest> schedule();
  // Removes a finished or cancelled request. With keep_snapshot, a running request's state
  // becomes a prefix-cache snapshot instead of being freed.
  void finish(Request* r, bool keep_snapshot);
  // After r verified a speculative chunk and kept its first `keep` tokens (r->num_computed
  // already counts only those): the pages past them return to the pool, and the runner is
  // told to undo the rest (StateOp::kUndo).
  void undo_speculative(Request* r, int64_t keep);
  // Evicts every prefix-cache snapshot.
  void drop_snapshots();
  // State changes for the runner, in the order they were decided.
  std::vector<StateOp> take_state_ops();
  // Snapshots to copy to the disk cache (after the ops that made them are applied): id and
  // tokens. Finished sequences, checkpoints at cache points, and granularity checkpoints at
  // 1, 2, 4, 8, ... times the granularity (saving every one would write each prompt's pages
  // again and again).
  std::vector<std::pair<uint64_t, std::vector<int32_t>>> take_snapshots_to_save();
  // Prompts whose longest cached prefix is on disk (and longer than any in memory) load it
  // into a fresh snapshot at admission. The file is read on the disk cache's reader thread:
  // meanwhile the request waits at the head of the queue (FCFS: those behind it wait too)
  // and running requests are scheduled as usual; only the copy into the KV pages (the
  // kLoadSnapshot op) is on this thread, in a step before the one that admits the request
  // (as a memory hit). Null: no disk cache. Not owned.
  void set_disk_cache(kv::DiskCache* disk) { disk_ = disk; }
  // The head of the queue waits for its disk read; wait_for_disk blocks until that read is
  // done or `timeout` passed (for a step loop with nothing else to run).
  bool waiting_for_disk() const;
  void wait_for_disk(std::chrono::milliseconds timeout) const;

  bool has_work() const { return !running_.empty() || !waiting_.empty(); }
  const std::vector<Request*>& running() const { return running_; }
  const std::deque<Request*>& waiting() const { return waiting_; }
  const kv::KvManager& kv() const { return kv_; }
  const kv::PrefixCache& prefix_cache() const { return cache_; }
  int64_t cached_blocks() const;  // distinct blocks held by snapshots
  const SchedulerCounters& counters() const { return counters_; }
  const SchedulerOptions& options() const { return opt_; }

  // KV integrity, block tables that match each request's computed tokens and each
  // snapshot's tokens, shared pages full for every holder (nobody writes a shared page), and
  // the ordering invariant above.
  bool check_integrity(std::string* why = nullptr) const;

  static constexpr uint64_t kSnapshotBit = uint64_t(1) << 63;

 private:
  bool is_long_prefill(int64_t tokens_left) const;
  std::vector<int64_t> plan_running(int64_t* long_prefills) const;
  bool reserve_running(Request* r, int64_t n_tokens, bool* preempted_self);
  bool admit(Request* r, int64_t budget_left, bool long_ok, int64_t* n_scheduled);
  void preempt(Request* victim);
  bool evict_one_snapshot(std::optional<uint64_t> keep = std::nullopt);
  void drop_snapshot(uint64_t snap);
  int64_t evictable_blocks(std::optional<uint64_t> keep) const;
  void restore_snapshot(Request* r, const kv::PrefixCache::Hit& hit, bool fork);
  bool check_shared_pages_full(kv::OwnerId owner, int64_t n_tokens, std::string* why) const;
  void plan_checkpoints(Request* r, int64_t start);
  int64_t cap_at_checkpoint(const Request* r, int64_t from, int64_t n) const;
  void take_checkpoint(Request* r);
  bool start_disk_read(Request* r, int64_t min_len, int64_t budget_left);
  bool finish_disk_read(Request* r, int64_t min_len, int64_t budget_left);
  bool disk_load_fits(const Request* r, int64_t n, int64_t budget_left) const;
  void save_later(uint64_t snap, const std::vector<int32_t>& tokens);

  SchedulerOptions opt_;
  kv::KvManager kv_;
  kv::PrefixCache cache_;
  std::vector<Request*> running_;
  std::deque<Request*> waiting_;
  std::vector<StateOp> ops_;
  SchedulerCounters counters_;
  uint64_t next_snapshot_ = 1;
  kv::DiskCache* disk_ = nullptr;
  std::vector<std::pair<uint64_t, std::vector<int32_t>>> to_save_;
};

}  // namespace deepinfer::engine
