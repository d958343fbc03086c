#include "engine/scheduler.h"

#include <algorithm>
#include <stdexcept>
#include <unordered_set>

namespace deepinfer::engine {

namespace {
// An op with empty page lists (a fork fills them in).
StateOp state_op(StateOp::Kind kind, uint64_t seq, uint64_t snap) {
  StateOp op;
  op.kind = kind;
  op.seq = seq;
  op.snap = snap;
  return op;
}
}  // namespace

namespace {
// Checked before any member is built, so a bad option throws without unwinding the KV tables.
const SchedulerOptions& checked(const SchedulerOptions& o) {
  if (o.max_running < 1) throw std::invalid_argument("max_running must be >= 1");
  if (o.max_long_partial_prefills < 0) throw std::invalid_argument("max_long_partial_prefills must be >= 0");
  if (o.long_prefill_token_threshold < 1) throw std::invalid_argument("long_prefill_token_threshold must be >= 1");
  if (o.max_batch_tokens <= o.max_running)
    throw std::invalid_argument("max_batch_tokens (" + std::to_string(o.max_batch_tokens) +
                                ") must exceed max_running (" + std::to_string(o.max_running) +
                                ") so that prefill chunks progress while every decoder runs");
  return o;
}
}  // namespace

Scheduler::Scheduler(const SchedulerOptions& options, const kv::KvSpec& spec, int64_t n_blocks)
    : opt_(checked(options)), kv_(spec, n_blocks), cache_(options.prefix_cache_entries) {}

void Scheduler::add(Request* r) {
  r->phase = Phase::kWaiting;
  waiting_.push_back(r);
}

std::vector<std::pair<uint64_t, std::vector<int32_t>>> Scheduler::take_snapshots_to_save() {
  std::vector<std::pair<uint64_t, std::vector<int32_t>>> out;
  out.swap(to_save_);
  return out;
}

void Scheduler::save_later(uint64_t snap, const std::vector<int32_t>& tokens) {
  if (disk_ && disk_->usable() && !disk_->contains(tokens.data(), int64_t(tokens.size()))) to_save_.push_back({snap, tokens});
}

// Whether a disk hit of n tokens and r's first chunk after it would fit in free blocks plus
// what evicting snapshots frees.
bool Scheduler::disk_load_fits(const Request* r, int64_t n, int64_t budget_left) const {
  const int64_t want = kv_.spec().blocks_for(n + std::min(r->num_tokens() - n, budget_left));
  return want <= kv_.free_blocks() + evictable_blocks(std::nullopt);
}

// A hit from the disk cache longer than min_len that would fit: its file is queued for the
// reader thread, and r waits for it (true). False: nothing to read, r is admitted without.
bool Scheduler::start_disk_read(Request* r, int64_t min_len, int64_t budget_left) {
  const int64_t n = disk_->longest_prefix(r->tokens, min_len);
  if (n == 0) {
    r->disk_checked = true;
    return false;
  }
  if (!disk_load_fits(r, n, budget_left)) return false;  // looked at again on the next try
  r->disk_read = disk_->read_async(std::vector<int32_t>(r->tokens.begin(), r->tokens.begin() + n));
  r->disk_read_tokens = n;
  ++counters_.disk_reads_started;
  return true;
}

// r's disk read is done: a payload that was read and checked (a bad file is a miss) and still
// is the longest hit and still fits becomes a new snapshot in fresh blocks (true). Otherwise
// r is admitted without it.
bool Scheduler::finish_disk_read(Request* r, int64_t min_len, int64_t budget_left) {
  kv::DiskCache::Payload payload = r->disk_read.get();
  const int64_t n = r->disk_read_tokens;
  r->disk_checked = true;
  r->disk_read_tokens = 0;
  if (!payload) {
    ++counters_.disk_reads_failed;
    return false;
  }
  if (n <= min_len || !disk_load_fits(r, n, budget_left)) return false;
  while (kv_.free_blocks() < kv_.spec().blocks_for(n))
    if (!evict_one_snapshot()) return false;
  const uint64_t snap = next_snapshot_++;
  if (!kv_.reserve(snap | kSnapshotBit, n)) throw std::logic_error("scheduler: disk load check and KV pool disagree");
  StateOp op = state_op(StateOp::Kind::kLoadSnapshot, 0, snap);
  op.pages = kv_.pages(snap | kSnapshotBit);
  op.fixed = kv_.fixed(snap | kSnapshotBit);
  op.payload = std::move(payload);
  ops_.push_back(std::move(op));
  for (uint64_t evicted : cache_.insert(snap, std::vector<int32_t>(r->tokens.begin(), r->tokens.begin() + n))) {
    kv_.free(evicted | kSnapshotBit);
    ops_.push_back(state_op(StateOp::Kind::kDropSnapshot, 0, evicted));
    if (evicted == snap) return false;
  }
  ++counters_.disk_hits;
  counters_.disk_hit_tokens += uint64_t(n);
  return true;
}

bool Scheduler::waiting_for_disk() const {
  return !waiting_.empty() && waiting_.front()->disk_read.valid() &&
         waiting_.front()->disk_read.wait_for(std::chrono::seconds(0)) != std::future_status::ready;
}

void Scheduler::wait_for_disk(std::chrono::milliseconds timeout) const {
  if (!waiting_.empty() && waiting_.front()->disk_read.valid()) waiting_.front()->disk_read.wait_for(timeout);
}

std::vector<StateOp> Scheduler::take_state_ops() {
  std::vector<StateOp> out;
  out.swap(ops_);
  return out;
}

int64_t Scheduler::cached_blocks() const {
  std::unordered_set<kv::BlockId> pages;
  int64_t fixed = 0;
  for (kv::OwnerId o : kv_.owners()) {
    if (!(o & kSnapshotBit)) continue;
    fixed += kv_.held(o) - int64_t(kv_.pages(o).size());
    pages.insert(kv_.pages(o).begin(), kv_.pages(o).end());
  }
  return fixed + int64_t(pages.size());
}

bool Scheduler::is_long_prefill(int64_t tokens_left) const {
  return opt_.max_long_partial_prefills > 0 && tokens_left >= opt_.long_prefill_token_threshold;
}

// Decode tokens first (one per decoder), then what is left to running prefills, oldest first
// (long ones up to their limit). *long_prefills: how many long prefills got tokens.
std::vector<int64_t> Scheduler::plan_running(int64_t* long_prefills) const {
  *long_prefills = 0;
  std::vector<int64_t> plan(running_.size(), 0);
  int64_t budget = opt_.max_batch_tokens;
  for (size_t i = 0; i < running_.size() && budget > 0; ++i)
    if (running_[i]->remaining() == 1) {
      plan[i] = 1;
      --budget;
    }
  // Speculative decoders verify their drafts in the same chunk, from what is left while
  // that still leaves max_running tokens for prefills.
  for (size_t i = 0; i < running_.size(); ++i)
    if (plan[i] == 1 && running_[i]->remaining() == 1) {
      const int64_t extra = std::min<int64_t>(int64_t(running_[i]->drafts.size()), budget - opt_.max_running);
      if (extra <= 0) continue;
      plan[i] += extra;
      budget -= extra;
    }
  for (size_t i = 0; i < running_.size() && budget > 0; ++i)
    if (running_[i]->remaining() > 1) {
      if (is_long_prefill(running_[i]->remaining())) {
        if (*long_prefills >= opt_.max_long_partial_prefills) continue;
        ++*long_prefills;
      }
      plan[i] = cap_at_checkpoint(running_[i], running_[i]->num_computed, std::min(running_[i]->remaining(), budget));
      budget -= plan[i];
    }
  return plan;
}

// The prefix-cache checkpoints this admission takes: every multiple of the granularity and
// every cache point of the request past `start` (where it starts), inside the prompt.
void Scheduler::plan_checkpoints(Request* r, int64_t start) {
  r->checkpoints_due.clear();
  if (cache_.max_entries() == 0) return;
  const int64_t C = opt_.prefix_cache_granularity;
  if (C > 0)
    for (int64_t p = (start / C + 1) * C; p < r->n_prompt; p += C) r->checkpoints_due.push_back(p);
  for (int64_t p : r->cache_points)
    if (p > start) r->checkpoints_due.push_back(p);
  std::sort(r->checkpoints_due.begin(), r->checkpoints_due.end());
  r->checkpoints_due.erase(std::unique(r->checkpoints_due.begin(), r->checkpoints_due.end()), r->checkpoints_due.end());
}

// A prefill chunk of n tokens from `from`, shortened to end at the next checkpoint (the state
// can only be saved between chunks).
int64_t Scheduler::cap_at_checkpoint(const Request* r, int64_t from, int64_t n) const {
  for (int64_t p : r->checkpoints_due)
    if (p > from) return std::min(n, p - from);
  return n;
}

// Keeps the state of r after its first num_computed tokens as a snapshot (a fork: full pages
// shared, the fixed part and a partly filled last page copied). Skipped when the same tokens
// are cached already or no room can be made by evicting older snapshots.
void Scheduler::take_checkpoint(Request* r) {
  const int64_t n = r->num_computed;
  std::vector<int32_t> toks(r->tokens.begin(), r->tokens.begin() + n);
  if (auto same = cache_.find(toks)) {
    cache_.touch(*same);
    ++counters_.checkpoints_skipped;
    return;
  }
  while (kv_.free_blocks() < kv_.fork_cost(n))
    if (!evict_one_snapshot()) {
      ++counters_.checkpoints_skipped;
      return;
    }
  const uint64_t snap = next_snapshot_++;
  if (!kv_.fork(r->id, snap | kSnapshotBit, n)) throw std::logic_error("scheduler: checkpoint check and KV pool disagree");
  StateOp op = state_op(StateOp::Kind::kCheckpoint, r->id, snap);
  op.pages = kv_.pages(snap | kSnapshotBit);
  op.fixed = kv_.fixed(snap | kSnapshotBit);
  ops_.push_back(std::move(op));
  ++counters_.checkpoints_taken;
  const int64_t C = opt_.prefix_cache_granularity;
  const bool power_of_two_edge = C > 0 && n % C == 0 && ((n / C) & (n / C - 1)) == 0;
  if (power_of_two_edge || std::binary_search(r->cache_points.begin(), r->cache_points.end(), n)) save_later(snap, toks);
  for (uint64_t evicted : cache_.insert(snap, std::move(toks))) {  // already out of the index
    kv_.free(evicted | kSnapshotBit);
    ops_.push_back(state_op(StateOp::Kind::kDropSnapshot, 0, evicted));
  }
}

void Scheduler::preempt(Request* victim) {
  // Victims are always the newest running request: the back of running_.
  running_.pop_back();
  kv_.free(victim->id);
  ops_.push_back(state_op(StateOp::Kind::kFree, victim->id, 0));
  victim->num_computed = 0;
  victim->num_cached = 0;
  victim->prefix_checked = false;
  victim->disk_checked = false;
  victim->phase = Phase::kWaiting;
  ++victim->n_preemptions;
  ++counters_.preemptions;
  waiting_.push_front(victim);
}

void Scheduler::drop_snapshot(uint64_t snap) {
  cache_.erase(snap);
  kv_.free(snap | kSnapshotBit);
  ops_.push_back(state_op(StateOp::Kind::kDropSnapshot, 0, snap));
}

bool Scheduler::evict_one_snapshot(std::optional<uint64_t> keep) {
  auto snap = cache_.oldest(keep);
  if (!snap) return false;
  drop_snapshot(*snap);
  return true;
}

void Scheduler::drop_snapshots() {
  while (evict_one_snapshot()) {
  }
}

// Blocks that evicting every snapshot but `keep` would return to the pool.
int64_t Scheduler::evictable_blocks(std::optional<uint64_t> keep) const {
  std::vector<kv::OwnerId> owners;
  for (uint64_t id : cache_.ids())
    if (!keep || id != *keep) owners.push_back(id | kSnapshotBit);
  return kv_.freeable(owners);
}

// Reserves blocks for r to reach num_computed + n tokens, evicting snapshots and then
// preempting the newest running requests. False when r itself had to be preempted.
bool Scheduler::reserve_running(Request* r, int64_t n, bool* preempted_self) {
  while (!kv_.reserve(r->id, r->num_computed + n)) {
    if (evict_one_snapshot()) continue;
    Request* victim = running_.back();
    preempt(victim);
    if (victim == r) {
      *preempted_self = true;
      return false;
    }
  }
  return true;
}

// Starts r from a snapshot: a fork (the snapshot stays cached) or a move (it is consumed).
void Scheduler::restore_snapshot(Request* r, const kv::PrefixCache::Hit& hit, bool fork) {
  const kv::OwnerId snap = hit.snapshot_id | kSnapshotBit;
  if (fork) {
    if (!kv_.fork(snap, r->id, hit.n_tokens)) throw std::logic_error("scheduler: fork check and KV pool disagree");
    cache_.touch(hit.snapshot_id);
    StateOp op = state_op(StateOp::Kind::kForkSnapshot, r->id, hit.snapshot_id);
    op.pages = kv_.pages(r->id);
    op.fixed = kv_.fixed(r->id);
    ops_.push_back(std::move(op));
  } else {
    cache_.erase(hit.snapshot_id);
    kv_.transfer(snap, r->id);
    ops_.push_back(state_op(StateOp::Kind::kRestoreSnapshot, r->id, hit.snapshot_id));
  }
  r->num_computed = hit.n_tokens;
  r->num_cached = std::min(hit.n_tokens, r->n_prompt);
  ++counters_.prefix_hits;
  counters_.prefix_hit_tokens += uint64_t(r->num_cached);
}

// Admits the head of the queue if its first chunk fits (free blocks plus what evicting
// snapshots other than its hit frees) and, when what it has left to prefill after its prefix
// hit is long, if long_ok; never preempts running requests for a newcomer.
bool Scheduler::admit(Request* r, int64_t budget_left, bool long_ok, int64_t* n_scheduled) {
  std::optional<kv::PrefixCache::Hit> hit;
  // A prompt_logprobs request needs every prompt row computed, so it starts from scratch.
  if (cache_.max_entries() > 0 && r->num_computed == 0 && r->params.prompt_logprobs < 0) {
    hit = cache_.lookup(r->tokens);
    if (disk_ && disk_->usable() && !r->disk_checked) {
      const int64_t min_len = hit ? hit->n_tokens : 0;
      if (!r->disk_read.valid()) {
        if (start_disk_read(r, min_len, budget_left)) return false;  // admitted once it is read
      } else if (r->disk_read.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
        return false;  // still reading
      } else if (finish_disk_read(r, min_len, budget_left)) {
        // The snapshot is copied into its pages in this step; r starts from it (a memory hit)
        // in the next, so that copy and r's first chunk do not lengthen the same step.
        return false;
      }
    }
  }
  std::optional<uint64_t> keep;
  if (hit) keep = hit->snapshot_id;
  const int64_t start = hit ? hit->n_tokens : 0;
  if (!long_ok && is_long_prefill(r->num_tokens() - start)) return false;
  plan_checkpoints(r, start);
  const int64_t n = cap_at_checkpoint(r, start, std::min(r->num_tokens() - start, budget_left));
  const int64_t want = kv_.spec().blocks_for(start + n);
  const int64_t available = kv_.free_blocks() + evictable_blocks(keep);
  int64_t need = want;  // fresh blocks
  bool fork = false;
  if (hit) {
    const int64_t fork_need = want - hit->n_tokens / kv_.spec().block_tokens;  // full pages are shared
    const int64_t move_need = want - kv_.held(hit->snapshot_id | kSnapshotBit);
    fork = fork_need <= available;
    need = fork ? fork_need : move_need;
  }
  if (need > available) return false;
  if (cache_.max_entries() > 0 && !r->prefix_checked) ++counters_.prefix_queries;
  r->prefix_checked = true;
  while (kv_.free_blocks() < need)
    if (!evict_one_snapshot(keep)) throw std::logic_error("scheduler: admission check and KV pool disagree");
  if (hit) restore_snapshot(r, *hit, fork);
  if (!kv_.reserve(r->id, r->num_computed + n)) throw std::logic_error("scheduler: admission check and KV pool disagree");
  waiting_.pop_front();
  r->phase = Phase::kRunning;
  running_.push_back(r);
  *n_scheduled = n;
  return true;
}

std::vector<ScheduledRequest> Scheduler::schedule() {
  std::vector<ScheduledRequest> out;
  // Checkpoints first: the states are as the last step left them, chunks ended at them.
  for (Request* r : running_) {
    auto& due = r->checkpoints_due;
    while (!due.empty() && due.front() <= r->num_computed) {
      if (due.front() == r->num_computed) take_checkpoint(r);
      due.erase(due.begin());
    }
  }
  int64_t long_prefills = 0;
  const std::vector<int64_t> plan = plan_running(&long_prefills);
  bool preempted = false;
  int64_t used = 0;
  // Oldest first; preemption only ever removes from the back, behind the cursor.
  for (size_t i = 0; i < running_.size(); ++i) {
    Request* r = running_[i];
    const int64_t n = plan[i];
    if (n == 0) continue;
    const size_t before = running_.size();
    bool self = false;
    const bool ok = reserve_running(r, n, &self);
    if (running_.size() != before) preempted = true;
    if (!ok) break;
    out.push_back({r, n});
    used += n;
  }
  if (preempted) return out;
  while (!waiting_.empty() && used < opt_.max_batch_tokens && int64_t(running_.size()) < opt_.max_running) {
    Request* r = waiting_.front();
    int64_t n = 0;
    const bool long_ok = long_prefills < opt_.max_long_partial_prefills;
    if (!admit(r, opt_.max_batch_tokens - used, long_ok, &n)) break;
    if (is_long_prefill(r->remaining())) ++long_prefills;
    out.push_back({r, n});
    used += n;
  }
  return out;
}

void Scheduler::undo_speculative(Request* r, int64_t keep) {
  kv_.truncate(r->id, r->num_computed);
  StateOp op = state_op(StateOp::Kind::kUndo, r->id, 0);
  op.keep = keep;
  op.pages = kv_.pages(r->id);
  ops_.push_back(std::move(op));
}

void Scheduler::finish(Request* r, bool keep_snapshot) {
  if (r->phase == Phase::kWaiting) {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), r));
  } else if (r->phase == Phase::kRunning) {
    running_.erase(std::find(running_.begin(), running_.end(), r));
    if (keep_snapshot && cache_.max_entries() > 0 && r->num_computed > 0) {
      const uint64_t snap = next_snapshot_++;
      kv_.transfer(r->id, snap | kSnapshotBit);
      ops_.push_back(state_op(StateOp::Kind::kSaveSnapshot, r->id, snap));
      std::vector<int32_t> toks(r->tokens.begin(), r->tokens.begin() + r->num_computed);
      save_later(snap, toks);
      for (uint64_t evicted : cache_.insert(snap, std::move(toks))) {  // already out of the index
        kv_.free(evicted | kSnapshotBit);
        ops_.push_back(state_op(StateOp::Kind::kDropSnapshot, 0, evicted));
      }
    } else {
      kv_.free(r->id);
      ops_.push_back(state_op(StateOp::Kind::kFree, r->id, 0));
    }
  }
  r->phase = Phase::kFinished;
}

// A page held by several owners must be full for each of them: none will write it again.
bool Scheduler::check_shared_pages_full(kv::OwnerId owner, int64_t n_tokens, std::string* why) const {
  const std::vector<kv::BlockId>& pages = kv_.pages(owner);
  for (size_t i = 0; i < pages.size(); ++i)
    if (kv_.ref_count(pages[i]) > 1 && int64_t(i + 1) * kv_.spec().block_tokens > n_tokens) {
      if (why)
        *why = "owner " + std::to_string(owner) + " shares page " + std::to_string(pages[i]) + " (block " +
               std::to_string(i) + ") but has only " + std::to_string(n_tokens) + " tokens";
      return false;
    }
  return true;
}

bool Scheduler::check_integrity(std::string* why) const {
  if (!kv_.check_integrity(why)) return false;
  auto fail = [&](const std::string& m) {
    if (why) *why = m;
    return false;
  };
  int64_t owners_seen = 0;
  for (size_t i = 0; i < running_.size(); ++i) {
    const Request* r = running_[i];
    if (r->phase != Phase::kRunning) return fail("running request not in running phase");
    if (i > 0 && running_[i - 1]->arrival >= r->arrival) return fail("running requests out of arrival order");
    if (kv_.held(r->id) != kv_.spec().blocks_for(r->num_computed))
      return fail("request " + std::to_string(r->id) + " holds " + std::to_string(kv_.held(r->id)) +
                  " blocks for " + std::to_string(r->num_computed) + " tokens");
    if (!check_shared_pages_full(r->id, r->num_computed, why)) return false;
    ++owners_seen;
  }
  for (size_t i = 0; i < waiting_.size(); ++i) {
    const Request* r = waiting_[i];
    if (r->phase != Phase::kWaiting) return fail("waiting request not in waiting phase");
    if (kv_.held(r->id) != 0) return fail("waiting request holds blocks");
    if (i > 0 && waiting_[i - 1]->arrival >= r->arrival) return fail("waiting requests out of arrival order");
    if (!running_.empty() && running_.back()->arrival >= r->arrival)
      return fail("a waiting request is older than a running one");
  }
  for (uint64_t snap : cache_.ids()) {
    const int64_t n = int64_t(cache_.tokens(snap)->size());
    const kv::OwnerId o = snap | kSnapshotBit;
    if (kv_.held(o) != kv_.spec().blocks_for(n))
      return fail("snapshot " + std::to_string(snap) + " holds " + std::to_string(kv_.held(o)) + " blocks for " +
                  std::to_string(n) + " tokens");
    if (!check_shared_pages_full(o, n, why)) return false;
    ++owners_seen;
  }
  if (owners_seen != int64_t(kv_.owners().size())) return fail("blocks held by an owner that is neither running nor cached");
  if (cache_.size() > cache_.max_entries()) return fail("prefix cache over its entry limit");
  return true;
}

}  // namespace deepinfer::engine
