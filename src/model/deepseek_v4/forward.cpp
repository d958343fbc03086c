// DeepSeek-V4 forward pass, top to bottom (docs/model/forward.md §1-§2):
//   embed -> hc streams -> [attention site, ffn site] per layer -> hc_head -> norm -> head.
// Where releases differ it reads their rules (release.h): staggered mHC (docs/model/hyper_connections.md §5: each
// site collapses with the previous site's pre; the last FFN site's pre replaces hc_head), a
// shared attention runtime per sequence that carries top-k lists between layers, and where
// DSpark's taps are taken. Engram (docs/model/v41.md §6) runs before the blocks of the layers the config lists.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/log.h"
#include "core/numa.h"
#include "core/profile.h"
#include "kernels/kernels.h"
#include "model/deepseek_v4/hyper_connections.h"
#include "model/deepseek_v4/layer_ops.h"
#include "model/deepseek_v4/model.h"
#include "model/deepseek_v4/release.h"

namespace deepinfer::v4 {

// Weights that fit well in memory are read in and mapped at load: otherwise the first
// tokens take a page fault per 64 KiB of weights they touch (a MoE model keeps finding new
// experts for many tokens), which cost ~10% of a short decode. A checkpoint larger than
// 70% of RAM stays lazily mapped; DEEPINFER_NO_POPULATE=1 skips this.
// With expert parallel, skip names the other ranks' experts: their pages are never touched.
// True if the weights were read in.
static bool populate_weights(const TensorStore& store, const TensorStore::Skip& skip) {
  const double ram = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGESIZE));
  const double bytes = double(store.total_bytes(skip));
  const char* off = std::getenv("DEEPINFER_NO_POPULATE");
  if (off && *off && std::strcmp(off, "0") != 0) {
    log_info("weights stay lazily mapped (DEEPINFER_NO_POPULATE)");
    return false;
  }
  if (bytes > 0.7 * ram) {
    log_info("weights stay lazily mapped: %.1f GB is more than 70%% of the %.1f GB of RAM", bytes / 1e9, ram / 1e9);
    return false;
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto last = t0;
  store.populate(
      [&](size_t done, size_t all) {
    const auto now = std::chrono::steady_clock::now();
    if (done < all && now - last < std::chrono::seconds(2)) return;
    last = now;
    log_info("reading weights into memory: %.0f%% (%.1f of %.1f GB), %.1f s", 100.0 * double(done) / double(all),
             double(done) / 1e9, double(all) / 1e9, std::chrono::duration<double>(now - t0).count());
      },
      skip);
  return true;
}

// "layers.3.ffn.experts.12.w1.weight" -> 12 (also mtp.K. and the .scale tensors); -1 for any
// tensor that is not a routed expert's.
static int64_t routed_expert_of(const std::string& name) {
  static const std::string kMark = ".ffn.experts.";
  const size_t p = name.find(kMark);
  if (p == std::string::npos) return -1;
  int64_t e = 0;
  size_t i = p + kMark.size();
  if (i >= name.size() || !std::isdigit(static_cast<unsigned char>(name[i]))) return -1;
  for (; i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])); ++i) e = e * 10 + (name[i] - '0');
  return e;
}

namespace {

std::mutex& registry_mutex() {
  static std::mutex mu;
  return mu;
}

std::map<std::string, InMemoryCheckpoint>& registry() {
  static std::map<std::string, InMemoryCheckpoint> r;
  return r;
}

}  // namespace

void register_in_memory_checkpoint(const std::string& name, InMemoryCheckpoint checkpoint) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry()[name] = std::move(checkpoint);
}

void unregister_in_memory_checkpoint(const std::string& name) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry().erase(name);
}

std::unique_ptr<Model> Model::load(const std::string& dir, const LoadOptions& options) {
  {
    std::unique_lock<std::mutex> lock(registry_mutex());
    auto it = registry().find(dir);
    if (it != registry().end()) {
      const InMemoryCheckpoint ckpt = it->second;
      lock.unlock();
      return load(ckpt, dir, options);
    }
  }
  auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<Model> m(new Model());
  // config.json (Hugging Face layout); the reference's flat inference/config.json also works.
  const std::string cfg_path = std::ifstream(dir + "/config.json") || !std::ifstream(dir + "/inference/config.json")
                                   ? dir + "/config.json"
                                   : dir + "/inference/config.json";
  m->cfg_ = load_config(cfg_path);
  // The Engram layout first: it checks the table sizes the weights are then bound with.
  m->engram_ = load_engram_tables(m->cfg_, dir);
  m->store_ = std::make_shared<TensorStore>(dir);
  return finish_load(std::move(m), dir, options, t0);
}

std::unique_ptr<Model> Model::load(const InMemoryCheckpoint& checkpoint, const std::string& name,
                                   const LoadOptions& options) {
  auto t0 = std::chrono::steady_clock::now();
  if (!checkpoint.store) throw LoadError(name + ": in-memory checkpoint without tensors");
  std::unique_ptr<Model> m(new Model());
  m->cfg_ = parse_config(checkpoint.config_json, name + "/config.json");
  if (!m->cfg_.engram_layer_ids.empty())
    throw LoadError(name + ": an in-memory checkpoint cannot have V4.1 Engram layers (engram_layer_ids): their "
                    "token map is a file of a checkpoint directory (engram_token_map.json)");
  m->store_ = checkpoint.store;
  return finish_load(std::move(m), name, options, t0);
}

std::unique_ptr<Model> Model::finish_load(std::unique_ptr<Model> m, const std::string& dir, const LoadOptions& options,
                                          std::chrono::steady_clock::time_point t0) {
  m->w_ = bind_weights(m->cfg_, *m->store_);
  m->dspark_moe_cfg_ = m->cfg_.dspark_stage_config();
  // Every rank binds (and so validates) every tensor; it reads only the experts it runs.
  TensorStore::Skip skip;
  if (options.expert_parallel && options.comm && options.comm->size() > 1) {
    m->experts_ = split_experts(options.comm, m->cfg_.n_routed_experts, m->cfg_.vocab_size);
    const ExpertSplit& s = m->experts_;
    // The head is read in below, this rank's rows only.
    skip = [&s](const std::string& name) {
      const int64_t e = routed_expert_of(name);
      return (e >= 0 && !s.owns(e)) || name == "head.weight";
    };
    const int r = options.comm->rank();
    const double own_bytes = double(m->store_->total_bytes(skip)) + double(weight_data_bytes(m->own_head_rows()));
    log_info("expert parallel: rank %d of %d runs routed experts %lld .. %lld of %lld and vocabulary rows %lld .. %lld of "
             "the head (%.1f of %.1f MB of weights)",
             r, options.comm->size(), (long long)s.first[size_t(r)], (long long)s.first[size_t(r) + 1] - 1,
             (long long)m->cfg_.n_routed_experts, (long long)s.head_first[size_t(r)],
             (long long)s.head_first[size_t(r) + 1] - 1, own_bytes / 1e6, m->store_->total_bytes() / 1e6);
  }
  // The release's extras: its drafter, tensors it leaves unbound.
  if (const ReleaseRules& rules = release_rules(m->cfg_); rules.log_load) rules.log_load(m->cfg_, *m->store_);
  if (options.verify_weights) {
    const auto tv = std::chrono::steady_clock::now();
    m->store_->verify_finite(skip);
    log_info("verified %zu tensors: no NaN / Inf codes (%.2f s)", m->store_->all().size(),
             std::chrono::duration<double>(std::chrono::steady_clock::now() - tv).count());
  }
  // In-memory images are resident already; only mapped shards are read in.
  std::optional<numa::InterleaveScope> interleave;
  if (options.numa) {
    const numa::Topology topo = numa::topology();
    interleave.emplace(topo);
    log_info("--numa: %d node(s); %s", topo.size(),
             interleave->active() ? "weights read in interleaved over them"
                                  : "one node (or set_mempolicy refused): nothing to interleave");
  }
  const TensorStore::Skip resident = m->stream_experts_if_needed(options, skip);
  if (m->store_->images().empty() && populate_weights(*m->store_, resident) && m->experts_.active()) {
    const WeightMatrix mine = m->own_head_rows();
    m->store_->populate_bytes(mine.data, size_t(weight_data_bytes(mine)));
  }
  if (m->expert_cache_) {
    std::string error;
    const size_t locked = m->store_->lock(resident, &error);
    if (locked > 0)
      log_info("memory budget: %.2f GB of resident weights locked in memory", double(locked) / 1e9);
    else
      log_warn("memory budget: the resident weights could not be locked in memory (%s): streaming may evict them "
               "from the page cache (raise the memlock limit, e.g. ulimit -l unlimited)",
               error.c_str());
  }
  const Config& c = m->cfg_;
  for (int64_t l = 0; l < c.n_layers + c.n_mtp_layers; ++l) m->ropes_.push_back(RopeTable::make(c, c.ratio(l) != 0));
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log_info("loaded %s: %lld layers, dim %lld, vocab %lld, %zu tensors, %.1f MB %s, %.2f s", dir.c_str(),
           (long long)c.n_layers, (long long)c.dim, (long long)c.vocab_size, m->store_->all().size(),
           m->store_->total_bytes() / 1e6, m->store_->images().empty() ? "mapped" : "in memory", secs);
  return m;
}

// The layers whose routed experts stream when the budget is short: the backbone's (each
// predicting the next), the MTP modules' and the DSpark stages'.
static std::vector<ExpertCache::Layer> streamed_layers(const Weights& w) {
  std::vector<ExpertCache::Layer> layers;
  for (size_t l = 0; l < w.layers.size(); ++l)
    layers.push_back({&w.layers[l].ffn, l + 1 < w.layers.size() ? &w.layers[l + 1].ffn : nullptr});
  for (const MtpWeights& m : w.mtp) layers.push_back({&m.block.ffn, nullptr});
  for (const LayerWeights& s : w.dspark.stages) layers.push_back({&s.ffn, nullptr});
  for (size_t i = layers.size(); i-- > 0;)
    if (layers[i].moe->experts.empty()) layers.erase(layers.begin() + std::ptrdiff_t(i));
  return layers;
}

TensorStore::Skip Model::stream_experts_if_needed(const LoadOptions& options, const TensorStore::Skip& skip) {
  if (options.weight_budget <= 0 || !store_->images().empty()) return skip;
  auto routed = [](const std::string& name) { return routed_expert_of(name) >= 0; };
  // Expert parallel: skip leaves the head out, this rank's rows of it count.
  const int64_t head_rows = experts_.active() ? weight_data_bytes(own_head_rows()) : 0;
  const int64_t own = int64_t(store_->total_bytes(skip)) + head_rows;
  if (own <= options.weight_budget) {
    log_info("memory budget: %.2f GB of weights fit in %.2f GB: all resident", double(own) / 1e9,
             double(options.weight_budget) / 1e9);
    return skip;
  }
  // V4.1's Engram tables (~98 GB each as published) are read a few rows a token: they stay
  // mapped, neither read in nor locked, and the page cache holds the rows in use.
  auto engram_table = [](const std::string& name) { return name.find(".engram.embed.") != std::string::npos; };
  TensorStore::Skip dense = [skip, routed, engram_table](const std::string& name) {
    return (skip && skip(name)) || routed(name) || engram_table(name);
  };
  const int64_t tables = int64_t(store_->total_bytes([skip, engram_table](const std::string& name) {
    return (skip && skip(name)) || !engram_table(name);
  }));
  const int64_t resident = int64_t(store_->total_bytes(dense)) + head_rows;
  const int64_t streamed = own - resident - tables;
  std::vector<ExpertCache::Layer> layers = streamed_layers(w_);
  const int64_t slot = ExpertCache::slot_bytes_for(*store_, layers);
  // At least one token's experts of a layer at a time, twice over (one layer computes while
  // the next one's arrive).
  const int64_t min_slots = 2 * std::max<int64_t>(cfg_.n_activated_experts, cfg_.dspark_n_activated_experts);
  auto gb = [](double b) { return b / 1e9; };
  if (options.weight_budget < resident + min_slots * slot && !options.weight_budget_strict) {
    log_warn("memory: %.2f GB of weights, and only %.2f GB may be held, too little for the %.2f GB of dense weights "
             "and %lld routed experts: all mapped, paged in on demand (set --memory-limit to stream the experts)",
             gb(double(own)), gb(double(options.weight_budget)), gb(double(resident)), (long long)min_slots);
    return skip;
  }
  if (options.weight_budget < resident + min_slots * slot)
    throw LoadError("the memory budget (" + std::to_string(options.weight_budget) + " bytes, " +
                    std::to_string(gb(double(options.weight_budget))) + " GB) is too small for this checkpoint: its " +
                    "dense weights (attention, shared experts, norms, embedding, head) take " + std::to_string(resident) +
                    " bytes and must stay resident, and streaming its routed experts needs room for at least " +
                    std::to_string(min_slots) + " of them (" + std::to_string(min_slots * slot) +
                    " bytes); raise --memory-limit to at least " + std::to_string(resident + min_slots * slot) +
                    " bytes");
  expert_cache_ = std::make_unique<ExpertCache>(*store_, layers, options.weight_budget - resident, options.expert_readers);
  const ExpertCache& c = *expert_cache_;
  // Expert parallel: this rank streams only its own experts (the others are never read).
  int64_t own_experts = 0;
  for (const ExpertCache::Layer& l : layers)
    for (size_t e = 0; e < l.moe->experts.size(); ++e) own_experts += experts_.owns(int64_t(e));
  const int64_t per_expert = streamed / std::max<int64_t>(1, own_experts);
  const double held = std::min(1.0, double(c.slots()) / double(std::max<int64_t>(1, own_experts)));
  const double per_token = double(cfg_.n_activated_experts * cfg_.n_layers * per_expert);
  log_info("memory budget %.2f GB: %.2f GB of dense weights resident; %.2f GB of routed experts (%lld, %.1f MB each) "
           "stream from disk through a cache of %lld (%.0f%%, %.2f GB); a decoded token needs up to %.0f MB of "
           "experts, ~%.0f MB from disk when its experts are spread evenly",
           gb(double(options.weight_budget)), gb(double(resident)), gb(double(streamed)), (long long)own_experts,
           double(per_expert) / 1e6, (long long)c.slots(), 100.0 * held, gb(double(c.slots() * c.slot_bytes())),
           per_token / 1e6, per_token * (1.0 - held) / 1e6);
  if (tables > 0) {
    // Rows are scattered: read-ahead around them would only evict what the next tokens need.
    const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
    for (const LayerWeights& L : w_.layers)
      if (L.has_engram)
        for (auto [p, n] : {std::pair{L.engram.table, L.engram.rows * L.engram.head_dim},
                            std::pair{L.engram.table_scale, L.engram.rows * (L.engram.head_dim / 32)}}) {
          const uintptr_t b = reinterpret_cast<uintptr_t>(p) / page * page;
          ::madvise(reinterpret_cast<void*>(b), size_t(reinterpret_cast<uintptr_t>(p) + uintptr_t(n) - b), MADV_RANDOM);
        }
    log_info("memory budget: the Engram tables (%.2f GB) stay mapped and are read row by row on demand", gb(double(tables)));
  }
  return dense;
}

void Model::check_numerics(const Numerics& num) const {
  if (!num.reference()) return;
  const Config& c = cfg_;
  auto need = [](bool ok, const std::string& what) {
    if (!ok)
      throw std::runtime_error("reference numerics cannot run this checkpoint: " + what +
                               " (DeepSeek's reference asserts the same); use --numerics float");
  };
  const ReleaseRules& rules = release_rules(c);
  const KeyQdq& qdq = rules.window_key_qdq;
  const std::string qdq_block = std::to_string(qdq.block);
  if (qdq.rope_dims)
    need(c.head_dim % qdq.block == 0, "head_dim = " + std::to_string(c.head_dim) +
                                          " is not a multiple of the window KV QDQ block " + qdq_block);
  else
    need(c.nope_dim() % qdq.block == 0, "head_dim - qk_rope_head_dim = " + std::to_string(c.nope_dim()) +
                                            " is not a multiple of the KV QDQ block " + qdq_block);
  if (rules.shared_attention_runtime) {  // FP4 entries in blocks of 16, FP4 index queries
    need(c.head_dim % 16 == 0, "head_dim is not a multiple of the compressed KV QDQ block 16");
    need(c.index_source_layers.empty() || c.index_head_dim % 32 == 0,
         "index_head_dim is not a multiple of the FP4 block 32");
  }
  const int64_t B = c.act_block();
  need(c.dim % B == 0, "hidden_size is not a multiple of the activation block " + std::to_string(B));
  need(c.q_lora_rank % B == 0, "q_lora_rank is not a multiple of " + std::to_string(B));
  need((c.o_groups * c.o_lora_rank) % B == 0, "o_groups * o_lora_rank is not a multiple of " + std::to_string(B));
  need(c.moe_inter_dim % B == 0, "moe_intermediate_size is not a multiple of " + std::to_string(B));
  bool csa = false;
  for (int64_t l = 0; l < c.n_layers; ++l) csa |= c.ratio(l) == 4;
  need(!csa || c.index_head_dim % 32 == 0, "index_head_dim is not a multiple of the FP4 block 32");
}

ScratchArena& step_scratch() {
  thread_local ScratchArena arena;
  return arena;
}

// hc_expand of S rows, split over the pool in column ranges of every row.
static void hc_expand_rows(const float* y, const float* R, const HcMix* mix, int64_t S, int64_t hc, int64_t d,
                           const Numerics& num, float* X) {
  constexpr int64_t kCols = 256;
  const int64_t per_row = (d + kCols - 1) / kCols;
  auto run = [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = i / per_row, j0 = (i % per_row) * kCols;
      hc_expand(&y[t * d], &R[t * hc * d], mix[t], hc, d, num, &X[t * hc * d], j0, std::min(d, j0 + kCols));
    }
  };
  parallel_for(num.backend->pool(), S * per_row, 1, [&run](int64_t i0, int64_t i1, int th) { run(i0, i1, th); });
}

void Model::block_forward(const LayerWeights& L, const RopeTable& rope, const float* X_in, const int32_t* tokens,
                          int64_t S, std::span<const Segment> segments, const Numerics& num, float* X,
                          float* carry_pre, bool dspark_stage) const {
  const Config& c = cfg_;
  const int64_t hc = c.hc_mult, d = c.dim, width = hc * d;
  const float eps = float(c.norm_eps);
  ScratchArena& scratch = step_scratch();
  ScratchArena::Scope scope(scratch);
  std::span<HcMix> mix = scratch.take<HcMix>(S);
  std::span<float> x = scratch.take<float>(S * d), y = scratch.take<float>(S * d);
  std::span<float> R = scratch.take_copy(X_in, S * width);

  // ---- attention site
  // The mixer's serial tail and the norm come before the first products of a.
  const AttentionWeights& aw = L.attn;
  prefetch_next(num, {&aw.wq_a, &aw.wkv, aw.has_compressor ? &aw.compressor.wkv : nullptr,
                      aw.has_compressor ? &aw.compressor.wgate : nullptr,
                      aw.has_indexer ? &aw.indexer_compressor.wkv : nullptr,
                      aw.has_indexer ? &aw.indexer_compressor.wgate : nullptr,
                      aw.has_indexer ? &aw.indexer_weights_proj : nullptr});
  {
    DI_PROFILE("hc.pre");
    hc_site_mix(R.data(), S, L.hc_attn, hc, d, c, num, mix.data());
    for_each_row(num, S, [&](int64_t t) {
      // Staggered (V4.1): the attention input is collapsed with the previous site's pre.
      hc_collapse(&R[t * width], carry_pre ? &carry_pre[t * hc] : mix[t].pre, hc, d, num, &x[t * d]);
      rms_norm(&x[t * d], L.attn_norm.data(), d, eps, num, &x[t * d]);
    });
    if (carry_pre)  // the FFN site collapses with the attention site's pre
      for (int64_t t = 0; t < S; ++t) std::copy_n(mix[t].pre, hc, &carry_pre[t * hc]);
  }
  {
    DI_PROFILE("attention");
    attention_forward(c, num, L, rope, x.data(), S, segments, y.data());
  }
  {
    DI_PROFILE("hc.post");
    hc_expand_rows(y.data(), R.data(), mix.data(), S, hc, d, num, X);
  }

  // ---- ffn site
  // Before the experts: the router and the shared expert (the routed ones are known late).
  const MoeWeights& fw = L.ffn;
  prefetch_next(num, {&fw.gate, fw.has_shared ? &fw.shared.w1 : nullptr, fw.has_shared ? &fw.shared.w3 : nullptr,
                      fw.has_shared ? &fw.shared.w2 : nullptr});
  {
    DI_PROFILE("hc.pre");
    std::copy_n(X, S * width, R.data());
    hc_site_mix(R.data(), S, L.hc_ffn, hc, d, c, num, mix.data());
    for_each_row(num, S, [&](int64_t t) {
      hc_collapse(&R[t * width], carry_pre ? &carry_pre[t * hc] : mix[t].pre, hc, d, num, &x[t * d]);
      rms_norm(&x[t * d], L.ffn_norm.data(), d, eps, num, &x[t * d]);
    });
    if (carry_pre)  // handed on to the next block's attention site (or the final collapse)
      for (int64_t t = 0; t < S; ++t) std::copy_n(mix[t].pre, hc, &carry_pre[t * hc]);
  }
  {
    DI_PROFILE("moe");
    // DSpark stages run all their experts on every rank (they are small and not split).
    static const ExpertSplit kWhole;
    moe_forward(dspark_stage ? dspark_moe_cfg_ : c, num, L, dspark_stage ? kWhole : experts_, x.data(), tokens, S,
                y.data(), expert_cache_.get());
  }
  DI_PROFILE("hc.post");
  hc_expand_rows(y.data(), R.data(), mix.data(), S, hc, d, num, X);
}

void Model::head_forward(const float* X, int64_t S, const HcWeights& hc_head, const std::vector<float>& norm,
                         const Numerics& num, float* logits, const float* carried_pre) const {
  const Config& c = cfg_;
  const int64_t hc = c.hc_mult, d = c.dim;
  ScratchArena& scratch = step_scratch();
  ScratchArena::Scope scope(scratch);
  std::span<float> h = scratch.take<float>(S * d), pre = scratch.take<float>(S * hc);
  // The start of each thread's share of the head (a region split in two: rows from 0 and
  // from the middle), pulled in during the final mixer.
  constexpr int64_t kHeadRows = 256;
  // Several ranks: each computes its own rows of the head (it maps no others).
  const WeightMatrix head = experts_.active() ? own_head_rows() : w_.head;
  const WeightMatrix head_a = weight_row_slice(head, 0, std::min(kHeadRows, head.rows));
  const WeightMatrix head_b = weight_row_slice(head, head.rows / 2, std::min(kHeadRows, head.rows - head.rows / 2));
  prefetch_next(num, {&head_a, &head_b});
  {
    DI_PROFILE("head.hc");
    if (carried_pre)
      std::copy_n(carried_pre, S * hc, pre.data());
    else
      hc_head_pre(X, S, hc_head, hc, d, c, num, pre.data());
    for (int64_t t = 0; t < S; ++t) {
      hc_collapse(X + t * hc * d, &pre[t * hc], hc, d, num, &h[t * d]);
      rms_norm(&h[t * d], norm.data(), d, float(c.norm_eps), num, &h[t * d]);
    }
  }
  DI_PROFILE("head.linear");
  if (!experts_.active()) {
    num.backend->linear_f32(h.data(), S, w_.head, logits);  // fp32 head, fp32 logits
    return;
  }
  // Rank q's block [S, its rows] lies at S * head_first[q] of `parts`; one allgatherv fills
  // the others' blocks, then each row is put together (every logit is its own dot product,
  // so the split changes no value).
  dist::Communicator& comm = *experts_.comm;
  const int64_t V = w_.head.rows, n_ranks = comm.size();
  const std::vector<int64_t>& vf = experts_.head_first;
  std::span<float> parts = scratch.take<float>(S * V);
  std::span<int64_t> counts = scratch.take<int64_t>(n_ranks), displs = scratch.take<int64_t>(n_ranks);
  for (int64_t q = 0; q < n_ranks; ++q) {
    displs[q] = S * vf[size_t(q)];
    counts[q] = S * (vf[size_t(q) + 1] - vf[size_t(q)]);
  }
  num.backend->linear_f32(h.data(), S, head, &parts[displs[comm.rank()]]);
  {
    DI_PROFILE("head.comm");
    comm.allgatherv(parts.data(), counts, displs);
  }
  for (int64_t q = 0; q < n_ranks; ++q) {
    const int64_t v0 = vf[size_t(q)], n = vf[size_t(q) + 1] - v0;
    for (int64_t t = 0; t < S; ++t) std::copy_n(&parts[displs[q] + t * n], n, &logits[t * V + v0]);
  }
}

WeightMatrix Model::own_head_rows() const {
  const int64_t r = experts_.comm->rank();
  const int64_t v0 = experts_.head_first[size_t(r)], v1 = experts_.head_first[size_t(r) + 1];
  return weight_row_slice(w_.head, v0, v1 - v0);
}

static void embed_rows(const WeightMatrix& embed, const int32_t* tokens, int64_t S, int64_t hc, int64_t d,
                       float* X, int64_t image_token_id = -1) {
  ScratchArena& scratch = step_scratch();
  ScratchArena::Scope scope(scratch);
  std::span<float> row = scratch.take<float>(d);
  for (int64_t t = 0; t < S; ++t) {
    if (tokens[t] < 0 || tokens[t] >= embed.rows)
      throw std::out_of_range("token id " + std::to_string(tokens[t]) + " outside the vocabulary [0, " +
                              std::to_string(embed.rows) + ")");
    if (tokens[t] == image_token_id)
      throw std::invalid_argument("token id " + std::to_string(tokens[t]) +
                                  " is the image placeholder: image input is not supported (text path only)");
    weight_decode_row(embed, tokens[t], row.data());
    for (int64_t i = 0; i < hc; ++i) std::memcpy(X + (t * hc + i) * d, row.data(), d * sizeof(float));
  }
}

void Model::forward(const int32_t* tokens, int64_t S, SequenceState& st, const Numerics& num, float* logits,
                    std::vector<float>* draft_inputs) const {
  const SequenceChunk chunk{tokens, S, &st, logits, true};
  forward_chunks({&chunk, 1}, num, draft_inputs);
}

void Model::forward_batch(const std::vector<SequenceChunk>& chunks, const Numerics& num,
                          std::vector<float>* draft_inputs) const {
  forward_chunks(chunks, num, draft_inputs);
}

namespace {

// What a step carries besides the streams, as the release's rules and the config ask: the
// staggered pre of every row (staggered_mhc; one-hot before layer 0: the streams are still
// equal), each sequence's shared attention selection (shared_attention_runtime; hung on its
// segment), and the Engram hash ids of every row (all the config's Engram layers).
struct StepExtras {
  float* carry_pre = nullptr;
  int64_t* engram_ids = nullptr;
  int64_t engram_stride = 0;
};

StepExtras begin_step(const Config& c, const EngramTables& engram, std::span<const SequenceChunk> chunks,
                      std::span<Segment> segments, int64_t S, ScratchArena& scratch) {
  StepExtras v;
  const ReleaseRules& rules = release_rules(c);
  const int64_t hc = c.hc_mult, n_engram = int64_t(engram.layers.size());
  if (rules.staggered_mhc) {
    v.carry_pre = scratch.take_zeroed<float>(S * hc).data();
    for (int64_t t = 0; t < S; ++t) v.carry_pre[t * hc] = 1.0f;
  }
  if (n_engram > 0) {
    v.engram_stride = n_engram * engram.n_cols;
    v.engram_ids = scratch.take<int64_t>(S * v.engram_stride).data();
  }
  if (!rules.shared_attention_runtime && n_engram == 0) return v;
  std::span<SharedSelection> shared =
      scratch.take<SharedSelection>(rules.shared_attention_runtime ? int64_t(segments.size()) : 0);
  size_t k = 0;
  for (const SequenceChunk& ch : chunks) {
    if (ch.n_tokens <= 0) continue;
    const size_t i = k++;
    Segment& sg = segments[i];
    if (rules.shared_attention_runtime) {
      SharedSelection& sel = shared[i];
      sel.topk = scratch.take<int64_t>(sg.n * c.index_topk).data();
      sel.n_topk = scratch.take_zeroed<int64_t>(sg.n).data();
      sel.cand = scratch.take<int64_t>(sg.n * c.candidate_topk_blocks).data();
      sel.n_cand = scratch.take_zeroed<int64_t>(sg.n).data();
      sg.shared = &sel;
    }
    // Hashing advances the sequence's Engram history past this chunk.
    if (n_engram > 0) engram_hash_ids(c, engram, ch.tokens, ch.n_tokens, *ch.state, &v.engram_ids[sg.row0 * v.engram_stride]);
  }
  return v;
}

}  // namespace

// Streaming: the hash-routed layers' experts follow from the token ids alone, so all of them
// are asked for before the step starts (within half the cache, first layers first).
void Model::read_ahead_hash_layers(std::span<const int32_t> tokens) const {
  const int64_t K = cfg_.n_activated_experts;
  int64_t room = expert_cache_->slots() / 2;
  std::vector<int32_t> ids;
  for (const LayerWeights& L : w_.layers) {
    if (L.ffn.tid2eid.empty() || room <= 0) continue;
    ids.clear();
    for (int32_t t : tokens)
      for (int64_t k = 0; k < K; ++k) {
        const int32_t e = L.ffn.tid2eid[size_t(int64_t(t) * K + k)];
        if (experts_.owns(e)) ids.push_back(e);
      }
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    if (int64_t(ids.size()) > room) ids.resize(size_t(room));
    room -= int64_t(ids.size());
    expert_cache_->read_ahead(&L.ffn, ids);
  }
}

void Model::forward_chunks(std::span<const SequenceChunk> chunks, const Numerics& num,
                           std::vector<float>* draft_inputs) const {
  const Config& c = cfg_;
  const int64_t hc = c.hc_mult, d = c.dim, V = c.vocab_size;
  ScratchArena& scratch = step_scratch();
  ScratchArena::Scope scope(scratch);
  int64_t n_segments = 0, S = 0;
  for (const SequenceChunk& ch : chunks)
    if (ch.n_tokens > 0) {
      ++n_segments;
      S += ch.n_tokens;
    }
  std::span<Segment> segments = scratch.take<Segment>(n_segments);
  std::span<int32_t> tokens = scratch.take<int32_t>(S);
  int64_t row = 0, k = 0;
  for (const SequenceChunk& ch : chunks) {
    if (ch.n_tokens <= 0) continue;
    segments[k++] = {row, ch.n_tokens, ch.state->n_past, nullptr};
    std::copy_n(ch.tokens, ch.n_tokens, &tokens[row]);
    row += ch.n_tokens;
  }
  float* X = scratch.take<float>(S * hc * d).data();
  float* Xn = scratch.take<float>(S * hc * d).data();
  if (expert_cache_) read_ahead_hash_layers(tokens);
  {
    DI_PROFILE("embed");
    embed_rows(w_.embed, tokens.data(), S, hc, d, X, c.image_token_id);
  }
  const ReleaseRules& rules = release_rules(c);
  const StepExtras extras = begin_step(c, engram_, chunks, segments, S, scratch);
  float* carry_pre = extras.carry_pre;
  // DSpark's taps: the bf16 mean of the streams entering (V4.1, docs/model/mtp_dspark.md §2.1) or leaving (V4
  // refreshes, §3.3) each target layer, as dspark_taps_layer_output says.
  const int64_t n_taps = draft_inputs && c.has_dspark() ? int64_t(c.dspark_target_layers.size()) : 0;
  float* taps = n_taps > 0 ? scratch.take<float>(S * n_taps * d).data() : nullptr;
  auto take_taps = [&](int64_t layer, const float* streams) {
    for (int64_t j = 0; j < n_taps; ++j)
      if (c.dspark_target_layers[size_t(j)] == layer)
        for (int64_t t = 0; t < S; ++t)
          for (int64_t i = 0; i < d; ++i) {
            float sum = 0.0f;
            for (int64_t h = 0; h < hc; ++h) sum += streams[(t * hc + h) * d + i];
            taps[(t * n_taps + j) * d + i] = num.bf16(sum / float(hc));
          }
  };
  const bool taps_after = rules.dspark_taps_layer_output;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    k = 0;
    for (const SequenceChunk& ch : chunks)
      if (ch.n_tokens > 0) {
        Segment& sg = segments[k++];
        sg.state = &ch.state->layers[l];
        const int64_t src = rules.shared_attention_runtime ? c.kv_source_of[size_t(l)] : -1;
        sg.kv_source = src >= 0 ? &ch.state->layers[size_t(src)] : nullptr;
      }
    const LayerWeights& L = w_.layers[l];
    if (L.has_engram) {
      DI_PROFILE("engram");
      const int64_t e = c.engram_index(l);
      engram_forward(c, num, L.engram, &extras.engram_ids[e * engram_.n_cols], extras.engram_stride, S, X);
    }
    if (!taps_after) take_taps(l, X);
    block_forward(L, ropes_[l], X, tokens.data(), S, segments, num, Xn, carry_pre);
    std::swap(X, Xn);
    if (taps_after) take_taps(l, X);
  }
  for (const SequenceChunk& ch : chunks) ch.state->n_past += ch.n_tokens;
  if (draft_inputs) {
    if (taps)
      draft_inputs->assign(taps, taps + S * n_taps * d);
    else
      draft_inputs->assign(X, X + S * hc * d);
  }

  // The head runs only on the rows whose logits are wanted (the last one while serving).
  int64_t n_rows = 0;
  for (const SequenceChunk& ch : chunks)
    if (ch.n_tokens > 0 && ch.logits) n_rows += ch.all_rows ? ch.n_tokens : 1;
  if (n_rows == 0) return;
  std::span<float> Xr = scratch.take<float>(n_rows * hc * d), out = scratch.take<float>(n_rows * V);
  std::span<float> pre_r = scratch.take<float>(carry_pre ? n_rows * hc : 0);
  int64_t r = 0;
  k = 0;
  for (const SequenceChunk& ch : chunks) {
    if (ch.n_tokens <= 0) continue;
    const Segment& sg = segments[k++];
    if (!ch.logits) continue;
    for (int64_t t = ch.all_rows ? 0 : sg.n - 1; t < sg.n; ++t, ++r) {
      std::copy_n(&X[(sg.row0 + t) * hc * d], hc * d, &Xr[r * hc * d]);
      if (carry_pre) std::copy_n(&carry_pre[(sg.row0 + t) * hc], hc, &pre_r[r * hc]);
    }
  }
  head_forward(Xr.data(), n_rows, w_.hc_head, w_.norm, num, out.data(), carry_pre ? pre_r.data() : nullptr);
  r = 0;
  for (const SequenceChunk& ch : chunks) {
    if (ch.n_tokens <= 0 || !ch.logits) continue;
    const int64_t n = ch.all_rows ? ch.n_tokens : 1;
    std::copy_n(&out[r * V], n * V, ch.logits);
    r += n;
  }
}

void Model::forward_mtp(int64_t k, const float* streams, const int32_t* next_tokens, int64_t S, int64_t pos0,
                        SequenceState& st, const Numerics& num, float* logits) const {
  mtp_rows(k, streams, next_tokens, S, pos0, st, num, logits, false, nullptr);
}

void Model::block_window_keys(const LayerWeights& L, const RopeTable& rope, const float* X, int64_t n, int64_t pos0,
                              LayerState& state, const Numerics& num) const {
  const Config& c = cfg_;
  const int64_t hc = c.hc_mult, d = c.dim;
  ScratchArena& scratch = step_scratch();
  ScratchArena::Scope scope(scratch);
  std::span<HcMix> mix = scratch.take<HcMix>(n);
  std::span<float> x = scratch.take<float>(n * d);
  hc_site_mix(X, n, L.hc_attn, hc, d, c, num, mix.data());
  for (int64_t t = 0; t < n; ++t) {
    hc_collapse(X + t * hc * d, mix[t].pre, hc, d, num, &x[t * d]);
    rms_norm(&x[t * d], L.attn_norm.data(), d, float(c.norm_eps), num, &x[t * d]);
  }
  write_window_keys(c, num, L, rope, x.data(), n, pos0, state);
}

void Model::forward_mtp_draft(int64_t k, const float* streams, const int32_t* next_tokens, int64_t S, int64_t pos0,
                              SequenceState& st, const Numerics& num, float* last_logits, float* last_streams) const {
  mtp_rows(k, streams, next_tokens, S, pos0, st, num, last_logits, true, last_streams);
}

void Model::mtp_rows(int64_t k, const float* streams, const int32_t* next_tokens, int64_t S, int64_t pos0,
                     SequenceState& st, const Numerics& num, float* logits, bool last_only, float* last_streams) const {
  const Config& c = cfg_;
  if (w_.mtp.empty()) throw std::runtime_error("this checkpoint has no MTP module (its mtp.* stages are DSpark's)");
  const MtpWeights& m = w_.mtp.at(size_t(k));
  const int64_t hc = c.hc_mult, d = c.dim;
  const float eps = float(c.norm_eps);
  std::vector<float> e(S * d), ep(S * d), xh(S * hc * d), hp(S * hc * d), Z(S * hc * d), Zn(S * hc * d);
  std::vector<float> row(d);
  for (int64_t t = 0; t < S; ++t) {
    embed_rows(w_.embed, next_tokens + t, 1, 1, d, row.data());
    rms_norm(row.data(), m.enorm.data(), d, eps, num, &e[t * d]);
    for (int64_t i = 0; i < hc; ++i)
      rms_norm(streams + (t * hc + i) * d, m.hnorm.data(), d, eps, num, &xh[(t * hc + i) * d]);
  }
  linear_quantized(c, num, e.data(), S, m.e_proj, ep.data());
  linear_quantized(c, num, xh.data(), S * hc, m.h_proj, hp.data());
  for (int64_t t = 0; t < S; ++t)
    for (int64_t i = 0; i < hc; ++i)
      for (int64_t j = 0; j < d; ++j) Z[(t * hc + i) * d + j] = num.bf16(ep[t * d + j] + hp[(t * hc + i) * d + j]);
  // A draft reads the last row only; the rows before it (a catch-up after a pause in drafting)
  // reach that row only through their keys in the module's window ring. A window-only module
  // writes those and runs the block on the last row alone: the same ring rows and, by row
  // invariance, the same last row as the block over all rows, at a fraction of the cost
  // (no MoE or attention for the catch-up rows).
  int64_t first = 0;
  const RopeTable& rope = ropes_[size_t(c.n_layers + k)];
  if (last_only && S > 1 && c.ratio(c.n_layers + k) == 0) {
    first = S - 1;
    block_window_keys(m.block, rope, Z.data(), first, pos0, st.mtp_layers[size_t(k)], num);
  }
  const Segment seg[] = {{0, S - first, pos0 + first, &st.mtp_layers[size_t(k)]}};
  block_forward(m.block, rope, Z.data() + first * hc * d, next_tokens + first, S - first, seg, num,
                Zn.data() + first * hc * d);
  const float* last = Zn.data() + (S - 1) * hc * d;
  if (last_streams && S > 0) std::copy_n(last, hc * d, last_streams);
  if (!logits) return;
  if (last_only)
    head_forward(last, S > 0 ? 1 : 0, m.hc_head, m.norm, num, logits);
  else
    head_forward(Zn.data(), S, m.hc_head, m.norm, num, logits);
}

}  // namespace deepinfer::v4
