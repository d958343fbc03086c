// The inference engine as the server, CLI and benchmarks see it: submit token-id requests,
// read streamed token events, cancel. No tensor type appears here.
//
// Threading: one engine thread runs the step loop (schedule -> forward -> sample). submit()
// and RequestStream::cancel() may be called from any thread; events are read from the
// RequestStream by whoever submitted.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "deepinfer/request.h"
#include "deepinfer/status.h"

namespace deepinfer {

namespace dist {
class Communicator;  // src/dist/communicator.h: the collectives of a multi-process job
}

struct EngineOptions {
  std::string model_dir;              // checkpoint directory (config.json + safetensors)
  int threads = 0;                    // compute threads; 0 = all hardware threads
  std::string numerics = "reference"; // "reference" | "float"
  std::string kernels = "cpu";        // "cpu" | "ref"
  // KV memory: exactly one of these may be set; neither = kDefaultKvMemoryBytes.
  int64_t kv_memory_bytes = 0;
  int64_t num_kv_blocks = 0;
  int64_t kv_block_tokens = 64;       // tokens of context per KV block
  int64_t max_model_len = 0;          // 0 = the checkpoint's max_position_embeddings, capped by KV memory
  int64_t max_batch_tokens = 512;     // token budget of one step (prefill chunks + decode tokens)
  int64_t max_running = 32;           // sequences in one step at most
  // Long prompts (at least long_prefill_token_threshold tokens left to prefill) are
  // prefilled this many at a time, so the first answers before the second starts (0 = no limit).
  int64_t max_long_partial_prefills = 1;
  int64_t long_prefill_token_threshold = 64;
  int64_t prefix_cache_entries = 64;  // prefix-cache snapshots kept (finished sequences and checkpoints; 0 = off)
  // A checkpoint of the sequence state at every this many prompt tokens (0: only at the
  // requests' cache_points); a multiple of kv_block_tokens. Each costs kv_fixed_blocks_per_seq.
  int64_t prefix_cache_granularity = 512;
  bool verify_weights = false;        // scan every weight for NaN / Inf codes at load (v4::LoadOptions)
  // Prefix-cache snapshots also saved in this directory (empty: memory only), found again
  // after a restart with the same checkpoint, numerics, kernels and KV layout.
  std::string kv_cache_dir;
  int64_t kv_cache_disk_bytes = int64_t(20) << 30;
  // Speculative decoding, by the drafter the checkpoint ships (config.json):
  //   "dspark": its DSpark stages (mtp.* layers with dspark_block_size set: V4.1, and the V4
  //             0731 / 0813 refreshes that have them), a block of drafts per forward;
  //   "mtp":    V4's MTP module (mtp.* layers without dspark_block_size; not V4.1), chained
  //             on its own output; its layer must have window-only attention;
  //   "auto":   "dspark" if the checkpoint has DSpark stages, else "mtp" if it is not V4.1 and
  //             has an MTP module, else "off" (auto does not fall back: an MTP module this
  //             engine cannot draft with is the same error as "mtp");
  //   "off".
  // Anything else, or a mode the checkpoint cannot do, is an error at create().
  std::string speculative = "auto";
  // The most drafts a request verifies per step: 1 .. the drafter's limit (a verify chunk must
  // fit the rings' undo, min(8, window) - 1 tokens, so at most 7; DSpark also at most its
  // block size); 0: the drafter's own (MTP min(3, limit), DSpark its limit).
  int64_t num_draft_tokens = 0;
  bool adaptive_drafts = true;   // each request drafts 0..num_draft_tokens by its acceptance
  // Bytes one token id contributes to the text that stop strings are matched against
  // (special tokens should give ""). Unset: requests with stop strings are rejected.
  std::function<std::string(int32_t)> token_text;
  // A multi-process job (mpirun): rank 0 calls Engine::create, every other rank
  // run_engine_worker, with the same options. Null or one rank: a single process.
  dist::Communicator* comm = nullptr;
  bool expert_parallel = false;       // each rank holds and runs 1/N of the routed experts (required when N > 1)
  // Multi-socket machines: the pool's threads spread over the NUMA nodes and the weights read
  // in interleaved over them (src/core/numa.h); nothing changes on one node.
  bool numa = false;
  // The memory the process may use, weights, KV pool and working memory together (0: what
  // it may use when it starts: MemAvailable, or the cgroup limit where lower). When the
  // checkpoint's weights do not fit in it, the dense weights stay resident and the routed
  // experts stream from disk through a cache (v4::ExpertCache).
  int64_t memory_limit_bytes = 0;

  static constexpr int64_t kDefaultKvMemoryBytes = int64_t(4) << 30;
};

struct EngineInfo {
  std::string model_dir;
  int64_t vocab_size = 0;
  int64_t max_model_len = 0;
  int32_t bos_token_id = 0;
  int32_t eos_token_id = 1;
  int64_t kv_block_tokens = 0;
  int64_t kv_blocks_total = 0;
  int64_t kv_block_bytes = 0;
  int64_t kv_fixed_blocks_per_seq = 0;  // window rings + compressor state of one sequence
  std::string speculative = "off";      // the mode in use: "mtp", "dspark" or "off" ("auto" resolved)
  int64_t num_draft_tokens = 0;         // the most drafts per step (0 when off)
};

// A fixed-bucket latency histogram (Prometheus style: counts[i] = observations <= bounds[i],
// not cumulative here; the last count is the +Inf bucket).
struct Histogram {
  std::vector<double> bounds;
  std::vector<uint64_t> counts;  // bounds.size() + 1
  double sum = 0.0;
  uint64_t count = 0;
  void observe(double v);
  static Histogram latency_seconds();  // 1 ms .. 60 s
  static Histogram token_counts();     // 1 .. 1M tokens, 1-2-5 steps
  static Histogram small_counts();     // 0, 1, .. 8
};

struct EngineStats {
  int64_t requests_running = 0, requests_waiting = 0;
  int64_t kv_blocks_total = 0, kv_blocks_used = 0, kv_blocks_cached = 0;  // cached = held by prefix snapshots
  uint64_t requests_finished_stop = 0, requests_finished_length = 0, requests_finished_abort = 0,
           requests_finished_error = 0;
  uint64_t requests_failed_nonfinite = 0;  // of the errors: a logits row held NaN or Inf (corrupt weights)
  uint64_t prompt_tokens_total = 0, generation_tokens_total = 0;
  uint64_t tokens_computed_total = 0;  // tokens run through the model (prefill, recompute, decode)
  uint64_t prefix_cache_queries = 0, prefix_cache_hits = 0, prefix_cache_hit_tokens = 0;
  uint64_t prefix_cache_checkpoints = 0;  // prompt checkpoints kept as snapshots
  // Speculative decoding: verify steps (one per request per step that verified drafts), draft
  // tokens verified and accepted, and the accepted drafts per verify step.
  uint64_t spec_verify_steps = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
  Histogram spec_accepted_per_step = Histogram::small_counts();
  int64_t prefix_cache_entries = 0;       // snapshots cached now
  int64_t prefix_cache_memory_bytes = 0;  // KV bytes only they hold
  uint64_t prefix_cache_disk_hits = 0, prefix_cache_disk_hit_tokens = 0;  // admissions that loaded a snapshot from disk
  int64_t prefix_cache_disk_entries = 0, prefix_cache_disk_bytes = 0;
  uint64_t prefix_cache_disk_reads = 0, prefix_cache_disk_writes = 0, prefix_cache_disk_errors = 0;
  uint64_t preemptions_total = 0, steps_total = 0;
  Histogram ttft_seconds = Histogram::latency_seconds();
  Histogram itl_seconds = Histogram::latency_seconds();
  Histogram e2e_seconds = Histogram::latency_seconds();
  Histogram queue_seconds = Histogram::latency_seconds();
  Histogram tpot_seconds = Histogram::latency_seconds();     // per request: decode time / (tokens - 1)
  Histogram prefill_seconds = Histogram::latency_seconds();  // first scheduled step -> first token
  Histogram decode_seconds = Histogram::latency_seconds();   // first token -> finish
  Histogram prompt_tokens = Histogram::token_counts();       // per finished request
  Histogram generation_tokens = Histogram::token_counts();   // per finished request
};

// The handle of one submitted request.
class RequestStream {
 public:
  virtual ~RequestStream() = default;
  // Waits up to `timeout` for the next event; nullopt on timeout. Several events that
  // arrived since the last call are merged into one (tokens concatenated, last status kept).
  virtual std::optional<StreamEvent> next(std::chrono::milliseconds timeout) = 0;
  // Asks the engine to stop the request; a final event with FinishReason::kAbort follows
  // (unless it had already finished). Safe to call more than once, from any thread.
  virtual void cancel() = 0;
  virtual uint64_t id() const = 0;
};

class Engine {
 public:
  virtual ~Engine() = default;
  // Loads the model and starts the engine thread. Throws std::runtime_error (bad
  // checkpoint, bad options) - start-up is the one place an exception leaves the engine.
  static std::unique_ptr<Engine> create(const EngineOptions& options);

  virtual const EngineInfo& info() const = 0;
  // The checks submit() applies, without submitting: prompt ids in range, length within
  // max_model_len, sampling parameters valid.
  virtual Status validate(const GenerateRequest& request) const = 0;
  // Never throws: an invalid request yields a stream whose only event is a kError finish.
  std::shared_ptr<RequestStream> submit(GenerateRequest request) { return submit(std::move(request), nullptr); }
  // The same, and every event of the request also wakes `waiter` (null: none).
  virtual std::shared_ptr<RequestStream> submit(GenerateRequest request, std::shared_ptr<StreamWaiter> waiter) = 0;
  // Several requests in one hand-over: the engine thread sees all of them before its next step,
  // so they are scheduled together (one prefill chunk, then decoded side by side) instead of the
  // first starting alone. Streams in the order of `requests`.
  virtual std::vector<std::shared_ptr<RequestStream>> submit_all(std::vector<GenerateRequest> requests,
                                                                 std::shared_ptr<StreamWaiter> waiter) = 0;
  // The counters, as of the engine's last step or request end. A request is counted (its
  // finish reason, tokens and drafts; no longer running) before its final event is queued,
  // so whoever has read that event finds it here without waiting.
  virtual EngineStats stats() const = 0;
};

// A worker rank (rank > 0 of options.comm): loads its share of the model, then runs every
// step rank 0's engine sends until that engine is destroyed. Throws dist::RankError on every
// rank if any rank (rank 0's Engine::create included) fails to start.
void run_engine_worker(const EngineOptions& options);

}  // namespace deepinfer
