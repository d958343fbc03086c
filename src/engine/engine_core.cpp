#include "engine/engine_core.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace deepinfer::engine {

namespace {
double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

uint64_t fresh_seed() {
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ uint64_t(rd());
}
}  // namespace

EngineCore::EngineCore(const EngineCoreOptions& options, const kv::KvSpec& spec, int64_t n_blocks,
                       std::unique_ptr<Runner> runner)
    : opt_(options),
      new_request_drafts_(options.num_draft_tokens),
      new_request_adaptive_(options.adaptive_drafts),
      scheduler_(options.scheduler, spec, n_blocks),
      runner_(std::move(runner)),
      sampler_(runner_->vocab_size()) {
  runner_->bind_kv(spec, n_blocks);
  scheduler_.set_disk_cache(opt_.disk_cache.get());
  if (opt_.num_draft_tokens < 0 || opt_.num_draft_tokens > runner_->max_draft_tokens())
    throw std::invalid_argument("speculative decoding: " + std::to_string(opt_.num_draft_tokens) +
                                " draft tokens per step, but this runner drafts at most " +
                                std::to_string(runner_->max_draft_tokens()));
}

void EngineCore::set_drafting(int64_t num_draft_tokens, bool adaptive) {
  if (num_draft_tokens < 0 || num_draft_tokens > opt_.num_draft_tokens)
    throw std::invalid_argument("set_drafting: " + std::to_string(num_draft_tokens) +
                                " drafts per step, but this engine drafts at most " +
                                std::to_string(opt_.num_draft_tokens));
  new_request_drafts_ = num_draft_tokens;
  new_request_adaptive_ = adaptive;
  acceptance_history_ = AcceptanceHistory{};
  draft_meter_ = DraftCostMeter{};
}

Status EngineCore::validate(const GenerateRequest& req) const {
  const int64_t V = runner_->vocab_size();
  const int64_t P = int64_t(req.prompt.size());
  if (P == 0) return Status::error(ErrorCode::kInvalidRequest, "the prompt is empty", "prompt");
  for (int32_t t : req.prompt)
    if (t < 0 || t >= V)
      return Status::error(ErrorCode::kInvalidRequest,
                           "prompt token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                               std::to_string(V) + ")",
                           "prompt");
  if (opt_.image_token_id >= 0)
    for (int32_t t : req.prompt)
      if (t == opt_.image_token_id)
        return Status::error(ErrorCode::kInvalidRequest,
                             "the prompt holds the image token id " + std::to_string(t) +
                                 ": image input is not supported (only the text path of this model runs)",
                             "prompt");
  Status s = req.params.validate(V);
  if (!s.ok()) return s;
  const int64_t L = opt_.max_model_len;
  if (P >= L)
    return Status::error(ErrorCode::kContextLengthExceeded,
                         "This model's maximum context length is " + std::to_string(L) + " tokens. However, your prompt has " +
                             std::to_string(P) + " tokens, leaving no room for a completion.",
                         "prompt");
  if (req.params.max_tokens > 0 && req.params.max_tokens > L - P)  // no overflow for huge max_tokens
    return Status::error(ErrorCode::kContextLengthExceeded,
                         "This model's maximum context length is " + std::to_string(L) + " tokens. However, you requested " +
                             std::to_string(P) + " tokens in the prompt and " + std::to_string(req.params.max_tokens) +
                             " for the completion. Please reduce the prompt or max_tokens.",
                         "max_tokens");
  if (!req.params.stop.empty() && !opt_.token_text)
    return Status::error(ErrorCode::kInvalidRequest, "stop strings need a tokenizer, and none is loaded", "stop");
  return {};
}

Status EngineCore::add(uint64_t id, GenerateRequest req, std::shared_ptr<EventSink> sink, Clock::time_point arrival) {
  Status s = validate(req);
  if (!s.ok()) {
    StreamEvent ev;
    ev.finished = true;
    ev.finish_reason = FinishReason::kError;
    ev.error = s;
    ev.usage.prompt_tokens = int64_t(req.prompt.size());
    ++stats_.requests_finished_error;
    push_final(*sink, std::move(ev));
    return s;
  }
  auto r = std::make_unique<Request>();
  r->id = id;
  r->arrival = next_arrival_++;
  r->n_prompt = int64_t(req.prompt.size());
  r->tokens = std::move(req.prompt);
  r->params = std::move(req.params);
  for (int64_t p : req.cache_points)
    if (p > 0 && p < r->n_prompt) r->cache_points.push_back(p);  // others cannot be hits: ignored
  std::sort(r->cache_points.begin(), r->cache_points.end());
  r->cache_points.erase(std::unique(r->cache_points.begin(), r->cache_points.end()), r->cache_points.end());
  const int64_t room = opt_.max_model_len - r->n_prompt;
  r->max_new_tokens = r->params.max_tokens < 0 ? room : std::min(r->params.max_tokens, room);
  r->rng.seed(r->params.seed ? *r->params.seed : fresh_seed());
  if (r->params.repetition_penalty != 1.0f) r->penalties.prompt_tokens.insert(r->tokens.begin(), r->tokens.end());
  if (!r->params.stop.empty()) r->stop = std::make_unique<StopMatcher>(r->params.stop);
  r->sink = std::move(sink);
  r->t_arrival = arrival;
  // Constrained requests draft too: accept_drafts samples a verify chunk's positions in order,
  // each through the constraint's mask after the tokens before it, and stops at the first
  // miss, so the constraint is fed exactly the output (Speculative.ConstrainedRequests...).
  if (new_request_drafts_ > 0)
    r->draft_policy = std::make_unique<DraftPolicy>(new_request_drafts_, new_request_adaptive_ ? 0 : new_request_drafts_,
                                                    opt_.draft_cost, opt_.verify_cost, opt_.draft_step_cost,
                                                    acceptance_history_.prior());
  scheduler_.add(r.get());
  requests_[id] = std::move(r);
  return {};
}

void EngineCore::apply_state_ops() {
  for (const StateOp& op : scheduler_.take_state_ops()) runner_->apply(op);
  // New snapshots go to the disk cache (written on its own thread; only the copy is here).
  for (auto& [snap, tokens] : scheduler_.take_snapshots_to_save()) {
    std::vector<char> bytes;
    if (runner_->export_snapshot(snap, &bytes)) opt_.disk_cache->put(std::move(tokens), std::move(bytes));
  }
}

Usage EngineCore::usage_of(const Request& r) const {
  return Usage{r.n_prompt, r.num_output(), r.num_cached, r.drafted, r.accepted};
}

void EngineCore::finish(Request& r, FinishReason reason, StreamEvent ev, const Status& error) {
  ev.finished = true;
  ev.finish_reason = reason;
  ev.error = error;
  ev.usage = usage_of(r);
  // A finished sequence's state is worth keeping for a follow-up turn; a failed one is not.
  scheduler_.finish(&r, reason != FinishReason::kError);
  switch (reason) {
    case FinishReason::kStop: ++stats_.requests_finished_stop; break;
    case FinishReason::kLength: ++stats_.requests_finished_length; break;
    case FinishReason::kAbort: ++stats_.requests_finished_abort; break;
    default: ++stats_.requests_finished_error; break;
  }
  stats_.prompt_tokens_total += uint64_t(r.n_prompt);
  const Clock::time_point now = Clock::now();
  stats_.e2e_seconds.observe(seconds(now - r.t_arrival));
  stats_.prompt_tokens.observe(double(r.n_prompt));
  stats_.generation_tokens.observe(double(r.num_output()));
  if (r.num_output() > 0) {
    if (r.scheduled_once) stats_.prefill_seconds.observe(seconds(r.t_first_token - r.t_scheduled));
    stats_.decode_seconds.observe(seconds(now - r.t_first_token));
    if (r.num_output() > 1) stats_.tpot_seconds.observe(seconds(r.t_last_token - r.t_first_token) / double(r.num_output() - 1));
  }
  std::shared_ptr<EventSink> sink = std::move(r.sink);
  requests_.erase(r.id);  // r is gone from here on
  push_final(*sink, std::move(ev));
}

void EngineCore::push_final(EventSink& sink, StreamEvent&& ev) {
  if (before_final_event) before_final_event();
  sink.push(std::move(ev));
}

void EngineCore::abort(uint64_t id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  finish(*it->second, FinishReason::kAbort, StreamEvent{});
  apply_state_ops();
}

void EngineCore::abort_all(const std::string& why) {
  std::vector<uint64_t> ids;
  for (const auto& [id, r] : requests_) ids.push_back(id);
  for (uint64_t id : ids)
    finish(*requests_.at(id), FinishReason::kError, StreamEvent{}, Status::error(ErrorCode::kUnavailable, why));
  apply_state_ops();
}

void EngineCore::drop_prefix_cache() {
  scheduler_.drop_snapshots();
  apply_state_ops();
}

void EngineCore::fail_scheduled(const std::vector<ScheduledRequest>& sched, const std::string& what) {
  for (const ScheduledRequest& s : sched)
    if (requests_.count(s.req->id))
      finish(*s.req, FinishReason::kError, StreamEvent{}, Status::error(ErrorCode::kInternal, "forward pass failed: " + what));
  apply_state_ops();
}

// Samples the token after r's known tokens and decides whether r is done.
bool EngineCore::sample_next(Request& r, const float* row, StreamEvent& ev, int32_t draft, bool* accepted) {
  SampleResult s = sampler_.sample(row, r.params, r.penalties, r.rng, draft, accepted);
  const Clock::time_point now = Clock::now();
  if (r.num_output() == 0) {
    stats_.ttft_seconds.observe(seconds(now - r.t_arrival));
    r.t_first_token = now;
  } else
    stats_.itl_seconds.observe(seconds(now - r.t_last_token));
  r.t_last_token = now;
  r.tokens.push_back(s.token);
  if (r.params.frequency_penalty != 0.0f || r.params.presence_penalty != 0.0f || r.params.repetition_penalty != 1.0f)
    r.penalties.add_output(s.token);
  ++stats_.generation_tokens_total;

  GeneratedToken g{s.token, s.logprob, std::move(s.top), false};
  FinishReason reason = FinishReason::kNone;
  const auto& ids = r.params.stop_token_ids;
  if (std::find(ids.begin(), ids.end(), s.token) != ids.end()) {
    g.is_stop_token = true;
    ev.stop_token = s.token;
    reason = FinishReason::kStop;
  } else if (s.token == opt_.eos_token_id && !r.params.ignore_eos) {
    g.is_stop_token = true;
    reason = FinishReason::kStop;
  } else if (r.stop && opt_.token_text) {
    const int hit = r.stop->push(opt_.token_text(s.token));
    if (hit >= 0) {
      ev.stop_string = r.stop->stop(hit);
      reason = FinishReason::kStop;
    }
  }
  if (reason == FinishReason::kNone && r.num_output() >= r.max_new_tokens) reason = FinishReason::kLength;
  ev.tokens.push_back(std::move(g));
  ev.finish_reason = reason;
  return reason != FinishReason::kNone;
}

int64_t EngineCore::step() {
  const std::vector<ScheduledRequest> sched = scheduler_.schedule();
  apply_state_ops();
  if (sched.empty()) {
    // Nothing runs until a disk read is done: wait for it a little here, so that a caller
    // looping on has_work() does not spin (and a cancel still gets through soon).
    if (scheduler_.waiting_for_disk()) scheduler_.wait_for_disk(std::chrono::milliseconds(10));
    return 0;
  }
  const Clock::time_point now = Clock::now();
  chunks_.clear();
  step_ids_.clear();
  for (const ScheduledRequest& s : sched) step_ids_.push_back(s.req->id);
  int64_t n_run = 0;
  for (const ScheduledRequest& s : sched) {
    Request& r = *s.req;
    if (!r.scheduled_once) {
      r.scheduled_once = true;
      r.t_scheduled = now;
      stats_.queue_seconds.observe(seconds(now - r.t_arrival));
    }
    // Prompt rows whose logprobs are still owed need every row of the chunk.
    const bool all_rows = r.params.prompt_logprobs >= 0 && r.next_prompt_logprob < r.n_prompt &&
                          r.num_computed < r.n_prompt;
    ScheduledChunk c{r.id, r.tokens.data() + r.num_computed, s.n_tokens, r.num_computed,
                     r.num_computed + s.n_tokens == r.num_tokens(), all_rows, scheduler_.kv().pages(r.id),
                     scheduler_.kv().fixed(r.id)};
    c.keep_for_draft = r.draft_policy != nullptr;
    if (r.remaining() == 1 && s.n_tokens > 1) {  // the pending token and (some of) its drafts
      r.drafts.resize(size_t(s.n_tokens - 1));
      r.verify_tokens.assign(1, r.tokens.back());
      r.verify_tokens.insert(r.verify_tokens.end(), r.drafts.begin(), r.drafts.end());
      c.tokens = r.verify_tokens.data();
      c.want_logits = true;
      c.all_rows = true;
      c.speculative = true;
    } else {
      r.drafts.clear();
    }
    chunks_.push_back(c);
    n_run += s.n_tokens;
  }
  const bool plain_decode = std::all_of(chunks_.begin(), chunks_.end(), [](const ScheduledChunk& c) {
    return c.n_tokens == 1 && c.want_logits && !c.speculative;
  });
  const Clock::time_point t_run = Clock::now();
  try {
    runner_->run(chunks_, logits_);
  } catch (const std::exception& e) {
    fail_scheduled(sched, e.what());
    return 0;
  }
  if (plain_decode && opt_.num_draft_tokens > 0) draft_meter_.plain_step(seconds(Clock::now() - t_run));
  ++stats_.steps_total;
  stats_.tokens_computed_total += uint64_t(n_run);
  const int64_t V = runner_->vocab_size();
  size_t row = 0;
  for (size_t i = 0; i < sched.size(); ++i) {
    Request& r = *sched[i].req;
    const ScheduledChunk& c = chunks_[i];
    StreamEvent ev;
    if (c.speculative) {
      const float* rows = logits_.data() + row * V;
      row += size_t(c.n_tokens);
      if (!accept_drafts(r, c, rows, ev)) {
        ev.usage = usage_of(r);
        r.sink->push(std::move(ev));
      }
      continue;
    }
    r.num_computed += sched[i].n_tokens;
    if (c.all_rows) {
      // Prompt logprobs from non-finite rows would be garbage: fail the request instead.
      int64_t bad_row = -1;
      for (int64_t j = 0; j < c.n_tokens - (c.want_logits ? 1 : 0) && bad_row < 0; ++j)
        if (first_nonfinite(logits_.data() + (row + size_t(j)) * V, V) >= 0) bad_row = c.pos0 + j;
      if (bad_row >= 0) {
        row += size_t(c.n_tokens);
        ++stats_.requests_failed_nonfinite;
        finish(r, FinishReason::kError, StreamEvent{},
               Status::error(ErrorCode::kInternal, "the model produced non-finite logits at prompt position " +
                                                       std::to_string(bad_row) + "; the checkpoint's weights may be corrupt"));
        continue;
      }
      // Row j follows token pos0 + j: it scores prompt token pos0 + j + 1.
      for (int64_t j = 0; j < c.n_tokens; ++j) {
        const int64_t target = c.pos0 + j + 1;
        if (target != r.next_prompt_logprob || target >= r.n_prompt) continue;
        ev.prompt_logprobs.push_back(raw_logprob(logits_.data() + (row + size_t(j)) * V, V,
                                                 r.tokens[size_t(target)], r.params.prompt_logprobs, scratch_));
        ++r.next_prompt_logprob;
      }
      row += size_t(c.n_tokens) - (c.want_logits ? 1 : 0);
    }
    if (!c.want_logits) {
      if (!ev.prompt_logprobs.empty()) {
        ev.usage = usage_of(r);
        r.sink->push(std::move(ev));
      }
      continue;
    }
    const float* lr = logits_.data() + row++ * V;
    if (on_logits) on_logits(r.id, r.num_tokens(), lr);
    // Corrupt weights give NaN / Inf logits; they must fail this request, not become a token.
    if (const int64_t bad = first_nonfinite(lr, V); bad >= 0) {
      ++stats_.requests_failed_nonfinite;
      const std::string kind = std::isnan(lr[bad]) ? "NaN" : "Inf";
      finish(r, FinishReason::kError, StreamEvent{},
             Status::error(ErrorCode::kInternal, "the model produced non-finite logits (" + kind + ") at position " +
                                                     std::to_string(r.num_tokens() - 1) + " (first in the logit of token id " +
                                                     std::to_string(bad) + "); the checkpoint's weights may be corrupt"));
      continue;
    }
    if (r.max_new_tokens == 0) {  // a prompt-only request (max_tokens 0): nothing to sample
      finish(r, FinishReason::kLength, std::move(ev));
      continue;
    }
    if (sample_next(r, lr, ev)) {
      finish(r, ev.finish_reason, std::move(ev));
    } else {
      ev.usage = usage_of(r);
      r.sink->push(std::move(ev));
    }
  }
  apply_state_ops();
  // Drafts for the next step, from states that now hold every token but the pending one
  // (by id: a request that finished in this step is gone).
  for (uint64_t id : step_ids_) {
    auto it = requests_.find(id);
    if (it != requests_.end() && it->second->remaining() == 1 && speculates(*it->second)) draft_next(*it->second);
  }
  return n_run;
}

bool EngineCore::speculates(const Request& r) const { return r.draft_policy != nullptr && r.phase == Phase::kRunning; }

void EngineCore::draft_next(Request& r) {
  r.drafts.clear();
  // Drafts past max_tokens could never be emitted.
  const int64_t room = r.max_new_tokens - r.num_output() - 1;
  if (opt_.measure_draft_costs)
    apply_measured_costs(*r.draft_policy, draft_meter_, opt_.draft_cost, opt_.draft_step_cost);
  const int64_t k = std::min(r.draft_policy->next(), room);
  if (k <= 0) return;
  const Drafter drafter = [&](int64_t n) {
    const Clock::time_point t0 = Clock::now();
    std::vector<int32_t> drafts = runner_->draft(r.id, r.tokens, n);
    draft_meter_.draft_call(n, seconds(Clock::now() - t0));
    return drafts;
  };
  r.drafts = replace_drafts ? replace_drafts(r.id, r.tokens, k, drafter) : drafter(k);
  if (int64_t(r.drafts.size()) > k) r.drafts.resize(size_t(k));
}

bool EngineCore::accept_drafts(Request& r, const ScheduledChunk& c, const float* rows, StreamEvent& ev) {
  const int64_t V = runner_->vocab_size(), K = c.n_tokens - 1;
  int64_t emitted = 0, accepted = 0;
  bool done = false;
  for (int64_t j = 0; j <= K && !done; ++j) {
    const float* lr = rows + j * V;
    if (on_logits) on_logits(r.id, r.num_tokens(), lr);
    if (const int64_t bad = first_nonfinite(lr, V); bad >= 0) {
      ++stats_.requests_failed_nonfinite;
      r.num_computed = c.pos0 + std::max<int64_t>(emitted, 1);
      scheduler_.undo_speculative(&r, r.num_computed - c.pos0);
      finish(r, FinishReason::kError, StreamEvent{},
             Status::error(ErrorCode::kInternal, "the model produced non-finite logits at position " +
                                                     std::to_string(r.num_tokens() - 1) + " (first in the logit of token id " +
                                                     std::to_string(bad) + "); the checkpoint's weights may be corrupt"));
      return true;
    }
    bool hit = false;
    const int32_t draft = j < K ? r.drafts[size_t(j)] : -1;
    done = sample_next(r, lr, ev, draft, &hit);
    ++emitted;
    if (!hit) break;
    ++accepted;
  }
  // The state holds the pending token and every accepted draft that was emitted before the
  // last emitted token; the rest is undone.
  const int64_t keep = emitted;
  r.num_computed = c.pos0 + keep;
  if (keep < c.n_tokens) scheduler_.undo_speculative(&r, keep);
  r.drafted += K;
  r.accepted += accepted;
  r.draft_policy->observe(K, accepted);
  acceptance_history_.observe(K, accepted);
  ++stats_.spec_verify_steps;
  stats_.spec_draft_tokens += uint64_t(K);
  stats_.spec_accepted_tokens += uint64_t(accepted);
  stats_.spec_accepted_per_step.observe(double(accepted));
  r.drafts.clear();
  if (done) finish(r, ev.finish_reason, std::move(ev));
  return done;
}

EngineStats EngineCore::stats() const {
  EngineStats s = stats_;
  s.requests_running = int64_t(scheduler_.running().size());
  s.requests_waiting = int64_t(scheduler_.waiting().size());
  s.kv_blocks_total = scheduler_.kv().total_blocks();
  s.kv_blocks_used = scheduler_.kv().used_blocks();
  s.kv_blocks_cached = scheduler_.cached_blocks();
  s.prefix_cache_memory_bytes = s.kv_blocks_cached * scheduler_.kv().spec().block_bytes;
  const SchedulerCounters& c = scheduler_.counters();
  s.preemptions_total = c.preemptions;
  s.prefix_cache_queries = c.prefix_queries;
  s.prefix_cache_hits = c.prefix_hits;
  s.prefix_cache_hit_tokens = c.prefix_hit_tokens;
  s.prefix_cache_checkpoints = c.checkpoints_taken;
  s.prefix_cache_entries = scheduler_.prefix_cache().size();
  s.prefix_cache_disk_hits = c.disk_hits;
  s.prefix_cache_disk_hit_tokens = c.disk_hit_tokens;
  if (opt_.disk_cache) {
    const kv::DiskCache::Stats d = opt_.disk_cache->stats();
    s.prefix_cache_disk_entries = d.entries;
    s.prefix_cache_disk_bytes = d.bytes_on_disk;
    s.prefix_cache_disk_reads = d.reads;
    s.prefix_cache_disk_writes = d.writes;
    s.prefix_cache_disk_errors = d.read_errors + d.write_errors + d.writes_dropped;
  }
  return s;
}

}  // namespace deepinfer::engine
