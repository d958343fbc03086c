// The public Engine: an engine thread running EngineCore's step loop, fed through a
// mutex-protected inbox; events go back through one queue per request (RequestStream).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/log.h"
#include "deepinfer/engine.h"
#include "engine/checkpoint_fingerprint.h"
#include "engine/engine_core.h"
#include "engine/engine_impl.h"
#include "engine/dist_runner.h"
#include "engine/model_runner.h"

namespace deepinfer::engine {

namespace {

struct Inbox {
  struct Submit {
    uint64_t id;
    GenerateRequest req;
    std::shared_ptr<EventSink> sink;
    Clock::time_point arrival;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Submit> submits;
  std::vector<uint64_t> cancels;
  bool stop = false;
};

void merge_into(StreamEvent& out, StreamEvent&& ev) {
  for (auto& t : ev.tokens) out.tokens.push_back(std::move(t));
  for (auto& t : ev.prompt_logprobs) out.prompt_logprobs.push_back(std::move(t));
  out.finished = ev.finished;
  out.finish_reason = ev.finish_reason;
  if (!ev.stop_string.empty()) out.stop_string = std::move(ev.stop_string);
  if (ev.stop_token >= 0) out.stop_token = ev.stop_token;
  out.error = std::move(ev.error);
  out.usage = ev.usage;
}

class Stream final : public RequestStream, public EventSink {
 public:
  Stream(uint64_t id, std::weak_ptr<Inbox> inbox, std::shared_ptr<StreamWaiter> waiter)
      : id_(id), inbox_(std::move(inbox)), waiter_(std::move(waiter)) {}

  void push(StreamEvent&& ev) override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      queue_.push_back(std::move(ev));
    }
    cv_.notify_all();
    if (waiter_) waiter_->notify();
  }

  std::optional<StreamEvent> next(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lk(mu_);
    if (!cv_.wait_for(lk, timeout, [&] { return !queue_.empty(); })) return std::nullopt;
    StreamEvent out = std::move(queue_.front());
    queue_.pop_front();
    while (!queue_.empty()) {
      merge_into(out, std::move(queue_.front()));
      queue_.pop_front();
    }
    return out;
  }

  void cancel() override {
    auto inbox = inbox_.lock();
    if (!inbox) return;
    {
      std::lock_guard<std::mutex> lk(inbox->mu);
      inbox->cancels.push_back(id_);
    }
    inbox->cv.notify_all();
  }

  uint64_t id() const override { return id_; }

 private:
  const uint64_t id_;
  std::weak_ptr<Inbox> inbox_;
  std::shared_ptr<StreamWaiter> waiter_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StreamEvent> queue_;
};

class EngineImpl final : public Engine {
 public:
  EngineImpl(const EngineInfo& info, const EngineCoreOptions& options, const kv::KvSpec& spec, int64_t n_blocks,
             std::unique_ptr<Runner> runner)
      : info_(info), core_(options, spec, n_blocks, std::move(runner)), inbox_(std::make_shared<Inbox>()) {
    published_ = core_.stats();
    // A request's counts are out before its final event, not after the step: a client that
    // saw the end reads stats() that include it.
    core_.before_final_event = [this] { publish(); };
    thread_ = std::thread([this] { loop(); });
  }

  ~EngineImpl() override {
    {
      std::lock_guard<std::mutex> lk(inbox_->mu);
      inbox_->stop = true;
    }
    inbox_->cv.notify_all();
    thread_.join();
  }

  const EngineInfo& info() const override { return info_; }
  Status validate(const GenerateRequest& request) const override { return core_.validate(request); }

  using Engine::submit;
  std::shared_ptr<RequestStream> submit(GenerateRequest request, std::shared_ptr<StreamWaiter> waiter) override {
    std::vector<GenerateRequest> one;
    one.push_back(std::move(request));
    return submit_all(std::move(one), std::move(waiter)).front();
  }

  std::vector<std::shared_ptr<RequestStream>> submit_all(std::vector<GenerateRequest> requests,
                                                         std::shared_ptr<StreamWaiter> waiter) override {
    std::vector<std::shared_ptr<RequestStream>> streams;
    std::vector<Inbox::Submit> batch;
    streams.reserve(requests.size());
    batch.reserve(requests.size());
    const auto now = Clock::now();
    for (GenerateRequest& r : requests) {
      const uint64_t id = next_id_.fetch_add(1);
      auto stream = std::make_shared<Stream>(id, inbox_, waiter);
      streams.push_back(stream);
      batch.push_back({id, std::move(r), std::move(stream), now});
    }
    {
      std::lock_guard<std::mutex> lk(inbox_->mu);
      for (auto& b : batch) inbox_->submits.push_back(std::move(b));
    }
    inbox_->cv.notify_all();
    return streams;
  }

  EngineStats stats() const override {
    std::lock_guard<std::mutex> lk(stats_mu_);
    return published_;
  }

 private:
  void publish() {
    EngineStats s = core_.stats();
    std::lock_guard<std::mutex> lk(stats_mu_);
    published_ = std::move(s);
  }

  void loop() {
    for (;;) {
      std::vector<Inbox::Submit> submits;
      std::vector<uint64_t> cancels;
      bool stop = false;
      {
        std::unique_lock<std::mutex> lk(inbox_->mu);
        // core_ is only ever touched by this thread, so reading it here is safe.
        inbox_->cv.wait(lk, [&] {
          return inbox_->stop || !inbox_->submits.empty() || !inbox_->cancels.empty() || core_.has_work();
        });
        submits.swap(inbox_->submits);
        cancels.swap(inbox_->cancels);
        stop = inbox_->stop;
      }
      for (auto& s : submits) core_.add(s.id, std::move(s.req), std::move(s.sink), s.arrival);
      if (stop) {
        core_.abort_all("the engine is shutting down");
        publish();
        return;
      }
      for (uint64_t id : cancels) core_.abort(id);
      try {
        if (core_.has_work()) core_.step();
      } catch (const std::exception& e) {
        // A broken invariant inside the step: fail what is in flight, keep serving.
        log_warn("engine step failed: %s", e.what());
        core_.abort_all(std::string("internal error: ") + e.what());
      }
      publish();
    }
  }

  EngineInfo info_;
  EngineCore core_;
  std::shared_ptr<Inbox> inbox_;
  std::atomic<uint64_t> next_id_{1};
  mutable std::mutex stats_mu_;
  EngineStats published_;
  std::thread thread_;
};


}  // namespace

std::unique_ptr<Engine> make_engine(const EngineInfo& info, const EngineCoreOptions& options, const kv::KvSpec& spec,
                                    int64_t n_blocks, std::unique_ptr<Runner> runner) {
  return std::make_unique<EngineImpl>(info, options, spec, n_blocks, std::move(runner));
}

}  // namespace deepinfer::engine

namespace deepinfer {

namespace {

bool multi_process(const EngineOptions& o) { return o.comm && o.comm->size() > 1; }

// "mtp", "dspark" or "off" for --speculative on this checkpoint (the workers of a
// multi-process engine ask too: a drafting runner keeps more state).
std::string speculative_mode(const EngineOptions& o, const v4::Config& cfg) {
  std::string spec_mode = o.speculative;
  if (spec_mode == "auto") spec_mode = cfg.has_dspark()                                       ? "dspark"
              : cfg.drafts_with_mtp_module() && cfg.n_mtp_layers > 0 ? "mtp"
                                                                     : "off";
  if (spec_mode != "mtp" && spec_mode != "dspark" && spec_mode != "off")
    throw std::runtime_error("--speculative must be auto, mtp, dspark or off, not '" + o.speculative + "'");
  return spec_mode;
}

std::unique_ptr<v4::Model> load_engine_model(const EngineOptions& o) {
  v4::LoadOptions lo{o.verify_weights};
  lo.comm = o.comm;
  lo.expert_parallel = o.expert_parallel;
  lo.numa = o.numa;
  const int64_t kv = o.num_kv_blocks > 0 ? 0 : o.kv_memory_bytes > 0 ? o.kv_memory_bytes : EngineOptions::kDefaultKvMemoryBytes;
  const v4::WeightBudget budget = v4::weight_budget(o.memory_limit_bytes, kv + v4::kWorkingMemoryReserve);
  if (budget.strict && budget.bytes <= 0)
    throw std::runtime_error("--memory-limit " + std::to_string(o.memory_limit_bytes) + " leaves nothing for the weights (" +
                             budget.source + ")");
  lo.weight_budget = std::max<int64_t>(1, budget.bytes);
  lo.weight_budget_strict = budget.strict;
  if (multi_process(o) && !o.expert_parallel)
    throw std::runtime_error("started as " + std::to_string(o.comm->size()) +
                             " ranks: pass --expert-parallel (each rank then holds 1/N of the routed experts)");
  return v4::Model::load(o.model_dir, lo);
}

// Everything Engine::create builds before the engine starts.
struct EngineSetup {
  std::unique_ptr<engine::ModelRunner> runner;
  kv::KvSpec spec;
  int64_t n_blocks = 0;
  EngineInfo info;
  engine::EngineCoreOptions copt;
};

EngineSetup prepare_engine(const EngineOptions& o);

}  // namespace

namespace {

// Rank 0's (or a lone process's) engine parts: the runner EngineCore is given, and the
// ModelRunner inside it.
struct EngineParts {
  EngineSetup setup;  // its runner moved into `runner`
  std::unique_ptr<engine::Runner> runner;
  engine::ModelRunner* model_runner = nullptr;
};

EngineParts assemble_engine(const EngineOptions& o) {
  using namespace engine;
  EngineParts p;
  if (!multi_process(o)) {
    p.setup = prepare_engine(o);
    p.model_runner = p.setup.runner.get();
    p.runner = std::move(p.setup.runner);
    return p;
  }
  // Rank 0's start-up is checked with the workers' before the first step message: any
  // rank's failure fails all of them.
  std::string error;
  try {
    p.setup = prepare_engine(o);
  } catch (const std::exception& e) {
    error = e.what();
  }
  dist::agree(*o.comm, error);
  // The workers see every runner call before rank 0 makes it.
  p.model_runner = p.setup.runner.get();
  p.runner = std::make_unique<StepBroadcaster>(std::move(p.setup.runner), *o.comm);
  return p;
}

}  // namespace

std::unique_ptr<Engine> Engine::create(const EngineOptions& o) {
  EngineParts p = assemble_engine(o);
  const EngineSetup& s = p.setup;
  return engine::make_engine(s.info, s.copt, s.spec, s.n_blocks, std::move(p.runner));
}

engine::LocalEngine engine::create_local_engine(const EngineOptions& o) {
  EngineParts p = assemble_engine(o);
  const EngineSetup& s = p.setup;
  LocalEngine e;
  e.core = std::make_unique<EngineCore>(s.copt, s.spec, s.n_blocks, std::move(p.runner));
  e.runner = p.model_runner;
  e.info = s.info;
  return e;
}

void run_engine_worker(const EngineOptions& o) {
  using namespace engine;
  if (!multi_process(o) || o.comm->rank() == 0) throw std::logic_error("run_engine_worker: not a worker rank");
  std::unique_ptr<ModelRunner> runner;
  kv::KvLayout layout;
  std::string error;
  try {
    auto model = load_engine_model(o);
    layout = kv_layout_of(model->config());
    const int threads = o.threads > 0 ? o.threads : ThreadPool::default_threads();
    const std::string spec_mode = speculative_mode(o, model->config());
    runner = std::make_unique<ModelRunner>(std::move(model), threads, o.numerics, o.kernels);
    if (o.numa) runner->spread_over_numa_nodes();
    if (spec_mode != "off") runner->enable_drafting(spec_mode);  // rank 0 checks the options
  } catch (const std::exception& e) {
    error = e.what();
  }
  dist::agree(*o.comm, error);
  run_step_worker(*runner, *o.comm, layout);
}

namespace {

EngineSetup prepare_engine(const EngineOptions& o) {
  using namespace engine;
  if (o.model_dir.empty()) throw std::runtime_error("no model directory given");
  if (o.kv_memory_bytes > 0 && o.num_kv_blocks > 0)
    throw std::runtime_error("give the KV budget either in bytes or in blocks, not both");
  if (o.prefix_cache_granularity < 0 || (o.kv_block_tokens > 0 && o.prefix_cache_granularity % o.kv_block_tokens != 0))
    throw std::runtime_error("the prefix-cache granularity (" + std::to_string(o.prefix_cache_granularity) +
                             ") must be 0 or a multiple of the KV block (" + std::to_string(o.kv_block_tokens) + " tokens)");
  auto model = load_engine_model(o);
  const v4::Config cfg = model->config();
  const int threads = o.threads > 0 ? o.threads : ThreadPool::default_threads();
  auto runner = std::make_unique<ModelRunner>(std::move(model), threads, o.numerics, o.kernels);
  if (o.numa) {
    const int nodes = runner->spread_over_numa_nodes();
    log_info("--numa: %d node(s)%s", nodes, nodes > 1 && threads > 1 ? "; the workers pinned across them" : ": nothing to place");
  }
  const std::string spec_mode = speculative_mode(o, cfg);
  int64_t n_drafts = o.num_draft_tokens;
  if (spec_mode != "off") {
    try {
      runner->enable_drafting(spec_mode);
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error(e.what());
    }
    if (n_drafts == 0)
      n_drafts = spec_mode == "dspark" ? runner->max_draft_tokens() : std::min<int64_t>(3, runner->max_draft_tokens());
    if (n_drafts < 1 || n_drafts > runner->max_draft_tokens())
      throw std::runtime_error("--num-draft-tokens must be between 1 and " + std::to_string(runner->max_draft_tokens()) +
                               ", not " + std::to_string(n_drafts));
    log_info("speculative decoding: %s drafts, up to %lld per step (%s); costs in decode steps: per draft token draft "
             "%.2f + verify %.2f, per drafting step %.2f",
             spec_mode == "mtp" ? "MTP" : "DSpark", (long long)n_drafts,
             o.adaptive_drafts ? "adaptive" : "fixed", runner->draft_cost(), runner->verify_cost(),
             runner->draft_step_cost());
  }

  const kv::KvSpec spec = kv::KvSpec::make(kv_layout_of(cfg), o.kv_block_tokens);
  const int64_t bytes = o.kv_memory_bytes > 0 ? o.kv_memory_bytes : EngineOptions::kDefaultKvMemoryBytes;
  const int64_t n_blocks = o.num_kv_blocks > 0 ? o.num_kv_blocks : bytes / spec.block_bytes;
  const int64_t capacity = spec.max_tokens_in(n_blocks);
  if (capacity < 2)
    throw std::runtime_error("KV memory too small: " + std::to_string(n_blocks) + " blocks of " +
                             std::to_string(spec.block_bytes) + " B, but one sequence needs " +
                             std::to_string(spec.fixed_blocks) + " blocks for its fixed state alone");
  const int64_t max_pos = cfg.max_position_embeddings;
  int64_t max_len = o.max_model_len;
  if (max_len > 0) {
    if (max_pos > 0 && max_len > max_pos)
      throw std::runtime_error("max model length " + std::to_string(max_len) +
                               " exceeds the checkpoint's max_position_embeddings " + std::to_string(max_pos));
    if (max_len > capacity)
      throw std::runtime_error("max model length " + std::to_string(max_len) + " needs " +
                               std::to_string(spec.blocks_for(max_len)) + " KV blocks; only " + std::to_string(n_blocks) +
                               " are configured");
  } else {
    max_len = max_pos > 0 ? std::min(max_pos, capacity) : capacity;
  }
  log_info("%s", spec.describe().c_str());
  // The arena (n_blocks pages, allocated once by the runner) is all the KV memory: every
  // sequence's rings and compressor state (its fixed blocks) and its compressed entries.
  log_info("KV pool: %lld blocks (%.1f MiB arena), %lld blocks (%.1f MiB) fixed state per sequence, max model length "
           "%lld tokens",
           (long long)n_blocks, double(n_blocks) * double(spec.block_bytes) / (1024.0 * 1024.0),
           (long long)spec.fixed_blocks, double(spec.fixed_blocks * spec.block_bytes) / (1024.0 * 1024.0),
           (long long)max_len);

  EngineInfo info;
  info.model_dir = o.model_dir;
  info.vocab_size = cfg.vocab_size;
  info.max_model_len = max_len;
  info.bos_token_id = int32_t(cfg.bos_token_id);
  info.eos_token_id = int32_t(cfg.eos_token_id);
  info.kv_block_tokens = spec.block_tokens;
  info.kv_blocks_total = n_blocks;
  info.kv_block_bytes = spec.block_bytes;
  info.kv_fixed_blocks_per_seq = spec.fixed_blocks;

  EngineCoreOptions copt;
  copt.max_model_len = max_len;
  copt.eos_token_id = int32_t(cfg.eos_token_id);
  copt.image_token_id = int32_t(cfg.image_token_id);
  copt.scheduler.max_batch_tokens = o.max_batch_tokens;
  copt.scheduler.max_running = o.max_running;
  copt.scheduler.max_long_partial_prefills = o.max_long_partial_prefills;
  copt.scheduler.long_prefill_token_threshold = o.long_prefill_token_threshold;
  copt.scheduler.prefix_cache_entries = o.prefix_cache_entries;
  copt.scheduler.prefix_cache_granularity = o.prefix_cache_granularity;
  if (!o.kv_cache_dir.empty() && o.prefix_cache_entries > 0) {
    const std::string settings = "numerics=" + o.numerics + " kernels=" + o.kernels +
                                 " block_tokens=" + std::to_string(spec.block_tokens) +
                                 " block_bytes=" + std::to_string(spec.block_bytes) +
                                 " fixed_blocks=" + std::to_string(spec.fixed_blocks);
    copt.disk_cache = std::make_shared<kv::DiskCache>(o.kv_cache_dir, o.kv_cache_disk_bytes,
                                                      engine::checkpoint_fingerprint(o.model_dir, settings));
  }
  copt.token_text = o.token_text;
  if (spec_mode != "off") {
    copt.num_draft_tokens = n_drafts;
    copt.adaptive_drafts = o.adaptive_drafts;
    copt.draft_cost = runner->draft_cost();
    copt.verify_cost = runner->verify_cost();
    copt.draft_step_cost = runner->draft_step_cost();
  }
  info.speculative = spec_mode;
  info.num_draft_tokens = copt.num_draft_tokens;
  return EngineSetup{std::move(runner), spec, n_blocks, info, copt};
}

}  // namespace

}  // namespace deepinfer
