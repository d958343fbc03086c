// Attention sublayer of DeepSeek-V4: query path, window keys, compressed keys (CSA / HCA),
// lightning indexer selection, sink attention and the grouped output projection.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>

#include "core/profile.h"
#include "kernels/kernels.h"
#include "kernels/light_ops.h"
#include "model/deepseek_v4/compressor.h"
#include "model/deepseek_v4/layer_ops.h"
#include "model/deepseek_v4/release.h"
#include "model/deepseek_v4/top_k.h"

namespace deepinfer::v4 {

// How the ref kernels combine an act-quant GEMM's K blocks: the canonical rule of each
// release's goldens (kernels.h BlockSum).
static kernels::BlockSum block_sum(const Config& cfg) { return release_rules(cfg).act_block_sum; }

void linear_quantized(const Config& cfg, const Numerics& num, const float* x, int64_t M,
                      const WeightMatrix& W, float* y) {
  if (num.reference() && W.is_quantized())
    num.backend->linear_act_quant(x, M, W, cfg.act_block(), y, block_sum(cfg));
  else
    num.backend->linear_f32(x, M, W, y);
  num.bf16(y, M * W.rows);
}

void prefetch_next(const Numerics& num, std::initializer_list<const WeightMatrix*> weights) {
  const WeightMatrix* list[ThreadPool::kMaxHintRanges];
  int n = 0;
  for (const WeightMatrix* w : weights)
    if (w && w->valid() && n < ThreadPool::kMaxHintRanges) list[n++] = w;
  num.backend->prefetch_hint(list, n);
}

void run_products(const Config& cfg, const Numerics& num, const LayerProduct* products, size_t n) {
  ScratchArena::Scope scope(step_scratch());
  std::span<kernels::LinearJob> jobs = step_scratch().take<kernels::LinearJob>(int64_t(n));
  size_t n_jobs = 0;
  for (size_t i = 0; i < n; ++i) {
    const LayerProduct& p = products[i];
    if (p.kind == LayerProduct::kFp32Exact && num.reference()) {
      num.backend->linear_f32_exact(p.x, p.M, *p.W, p.y);
      continue;
    }
    const bool act_quant = p.kind == LayerProduct::kQuantized && num.reference() && p.W->is_quantized();
    jobs[n_jobs++] = kernels::LinearJob{p.x, p.M, p.W, act_quant ? cfg.act_block() : 0, p.y, block_sum(cfg)};
  }
  num.backend->linear_many(jobs.data(), n_jobs);
  for (size_t i = 0; i < n; ++i)
    if (products[i].kind == LayerProduct::kQuantized || products[i].kind == LayerProduct::kBf16)
      num.bf16(products[i].y, products[i].M * products[i].W->rows);
}

namespace {

// The products of one attention step that share an input, collected and run as one batch.
class ProductBatch {
 public:
  void add(const float* x, int64_t M, const WeightMatrix& W, float* y, LayerProduct::Kind kind) {
    if (n_ == kMax) throw std::logic_error("ProductBatch: more than kMax products");
    products_[n_++] = {x, M, &W, y, kind};
  }
  void run(const Config& cfg, const Numerics& num) {
    run_products(cfg, num, products_, n_);
    n_ = 0;
  }

 private:
  static constexpr size_t kMax = 16;  // V4-Pro: 16 output groups
  LayerProduct products_[kMax] = {};
  size_t n_ = 0;
};

// FP8 QDQ of a window key, as the release's window_key_qdq says: V4 the non-rope dims in
// blocks of 64 (also its compressed entries), V4.1 the whole vector in blocks of 32.
void kv_qdq(const Config& cfg, const Numerics& num, float* kv) {
  if (!num.reference()) return;
  const KeyQdq& qdq = release_rules(cfg).window_key_qdq;
  kernels::act_quant_ref(kv, qdq.rope_dims ? cfg.head_dim : cfg.nope_dim(), qdq.block);
}

// bf16(Hadamard(x) * n^-0.5), then FP4 QDQ in blocks of 32 (indexer queries and keys).
void indexer_rotate_quant(float* x, int64_t n, const Numerics& num) {
  kernels::hadamard_ref(x, n);
  const float scale = float(1.0 / std::sqrt(double(n)));
  for (int64_t i = 0; i < n; ++i) x[i] = num.bf16(x[i] * scale);
  if (num.reference()) kernels::fp4_qdq_pow2_ref(x, n, 32);
}

// Runs a compressor over a segment's projections kvp, sc [S, coff*width] (sc gets its ape
// here) and finishes every emitted entry into its page slot.
template <typename Finish>
void run_compressor(const CompressorWeights& w, CompressorState& st, const float* kvp, float* sc, int64_t S, int64_t p0,
                    Finish finish) {
  const int64_t n = w.coff * w.width;
  ScratchArena& scratch = step_scratch();
  ScratchArena::Scope scope(scratch);
  std::span<float> z = scratch.take<float>(w.width);
  compressor_add_ape(w, S, p0, sc);
  for (int64_t t = 0; t < S; ++t) {
    const int64_t p = p0 + t;
    if (!compressor_push(st, kvp + t * n, sc + t * n, p, z.data())) continue;
    finish(z.data(), p / w.ratio);
    std::copy(z.begin(), z.end(), st.append_entry(p / w.ratio));
  }
}

// The lightning indexer's query at position p, in place: each head of q [HI * DI] (a row of
// indexer_wq_b's output) roped, rotated and quantised; the head weights w [HI] (a row of
// weights_proj's) scaled.
void indexer_query(const Config& cfg, const Numerics& num, const RopeTable& rope, float* q, float* w, int64_t p) {
  const int64_t HI = cfg.index_n_heads, DI = cfg.index_head_dim;
  for (int64_t h = 0; h < HI; ++h) {
    rope.apply(q + h * DI, DI, p, false, num);
    indexer_rotate_quant(q + h * DI, DI, num);
  }
  const float wscale = float(1.0 / std::sqrt(double(DI)) / std::sqrt(double(HI)));
  for (int64_t h = 0; h < HI; ++h) w[h] = num.bf16(w[h] * wscale);
}

// Lightning indexer (docs/model/attention.md §5): for each query, the visible compressed entries with the
// top scores, in descending score order (ties: lower index first): query t's n_chosen[t]
// entries into chosen[t * index_topk ...].
// q [S, HI * DI] and wts [S, HI] are the segment's queries and head weights after
// indexer_query.
void indexer_select(const Config& cfg, const Numerics& num, std::span<const float> q, std::span<const float> wts,
                    int64_t S, int64_t p0, const CompressorState& keys, int64_t* chosen, int64_t* n_chosen) {
  const int64_t HI = cfg.index_n_heads, DI = cfg.index_head_dim, n_keys = keys.n_entries();
  ScratchArena& scratch = step_scratch();
  ScratchArena::Scope scope(scratch);

  // Scores of a block of queries at a time (one parallel region each: the backend gives every
  // query to one thread), rows ld = n_keys apart; query t uses the first n_vis[t] keys.
  constexpr int64_t kScoreFloats = int64_t(1) << 20;
  const int64_t ld = std::max<int64_t>(n_keys, 1);
  const int64_t block = std::clamp<int64_t>(kScoreFloats / ld, 1, std::max<int64_t>(S, 1));
  std::span<float> score_blk = scratch.take<float>(block * ld);
  std::span<const float*> key_rows_all = scratch.take<const float*>(n_keys);
  std::span<int64_t> n_vis = scratch.take<int64_t>(S);
  std::span<int64_t> order_all = scratch.take<int64_t>(n_keys), spare_all = scratch.take<int64_t>(n_keys);
  keys.entries(n_keys, key_rows_all.data());
  for (int64_t t = 0; t < S; ++t) n_vis[t] = std::min((p0 + t + 1) / 4, n_keys);
  profile::Phase section;
  for (int64_t t0 = 0; t0 < S; t0 += block) {
    const int64_t nb = std::min(block, S - t0);
    section.start(DI_PROFILE_SECTION("attn.indexer.scores"));
    num.backend->index_scores_many(q.data() + t0 * HI * DI, wts.data() + t0 * HI, nb, HI, DI, key_rows_all.data(), 0,
                                   &n_vis[t0], num.reference(), score_blk.data(), ld);
    section.start(DI_PROFILE_SECTION("attn.indexer.top_k"));
    for (int64_t t = t0; t < t0 + nb; ++t) {
      const int64_t nv = n_vis[t];
      const int64_t k = std::min(cfg.index_topk, nv);
      select_top_k(score_blk.subspan(size_t((t - t0) * ld), size_t(nv)), k, order_all.first(size_t(nv)),
                   spare_all.first(size_t(nv)), chosen + t * cfg.index_topk);
      n_chosen[t] = k;
    }
  }
}

}  // namespace

void attention_forward(const Config& cfg, const Numerics& num, const LayerWeights& L, const RopeTable& rope,
                       const float* a, int64_t S, std::span<const Segment> segments, float* out) {
  const AttentionWeights& w = L.attn;
  const ReleaseRules& rules = release_rules(cfg);
  // shared: V4.1's runtime runs the compressed-layer work (shared_attention.cpp); lightning:
  // V4's ratio-4 layer with its own indexer and index compressor.
  const bool shared = rules.shared_attention_runtime && L.ratio != 0;
  const bool lightning = w.has_indexer && !rules.shared_attention_runtime;
  const int64_t H = cfg.n_heads, Dh = cfg.head_dim, Wn = cfg.window;
  const float eps = float(cfg.norm_eps);
  ScratchArena& scratch = step_scratch();
  ScratchArena::Scope scope(scratch);
  std::span<int64_t> pos = scratch.take<int64_t>(S);
  for (const Segment& sg : segments)
    for (int64_t t = 0; t < sg.n; ++t) pos[sg.row0 + t] = sg.p0 + t;

  // ---- every product of a in one batch: wq_a (qr), wkv (window keys), the compressors'
  // projections, the indexer's head weights; then every product of qr: wq_b, indexer wq_b.
  const int64_t HI = cfg.index_n_heads, DI = cfg.index_head_dim;
  const CompressorWeights &cw = w.compressor, &icw = w.indexer_compressor;
  const int64_t cn = w.has_compressor ? cw.coff * cw.width : 0;
  const int64_t icn = lightning ? icw.coff * icw.width : 0;
  std::span<float> qr = scratch.take<float>(S * cfg.q_lora_rank), q = scratch.take<float>(S * H * Dh);
  std::span<float> kv = scratch.take<float>(S * Dh);
  std::span<float> ckv = scratch.take<float>(S * cn), csc = scratch.take<float>(S * cn);
  std::span<float> ikv = scratch.take<float>(S * icn), isc = scratch.take<float>(S * icn);
  std::span<float> iq = scratch.take<float>(w.has_indexer ? S * HI * DI : 0), iw = scratch.take<float>(w.has_indexer ? S * HI : 0);
  profile::Phase section;
  section.start(DI_PROFILE_SECTION("attn.projections"));
  ProductBatch batch;
  batch.add(a, S, w.wq_a, qr.data(), LayerProduct::kQuantized);
  batch.add(a, S, w.wkv, kv.data(), LayerProduct::kQuantized);
  if (w.has_compressor) {
    // V4.1 ratio 1 has no pooling: its wkv is a bf16 product (no fp32 promotion, no gate).
    const LayerProduct::Kind pooled = rules.exact_pooled_projections ? LayerProduct::kFp32Exact : LayerProduct::kFp32;
    batch.add(a, S, cw.wkv, ckv.data(), cw.wgate.valid() ? pooled : LayerProduct::kBf16);
    if (cw.wgate.valid()) batch.add(a, S, cw.wgate, csc.data(), pooled);
  }
  if (w.has_indexer) {
    if (icn > 0) {
      batch.add(a, S, icw.wkv, ikv.data(), LayerProduct::kFp32);
      batch.add(a, S, icw.wgate, isc.data(), LayerProduct::kFp32);
    }
    batch.add(a, S, w.indexer_weights_proj, iw.data(), LayerProduct::kBf16);
  }
  batch.run(cfg, num);
  prefetch_next(num, {&w.wq_b, w.has_indexer ? &w.indexer_wq_b : nullptr});
  for (int64_t t = 0; t < S; ++t)
    rms_norm(&qr[t * cfg.q_lora_rank], w.q_norm.data(), cfg.q_lora_rank, eps, num, &qr[t * cfg.q_lora_rank]);
  batch.add(qr.data(), S, w.wq_b, q.data(), LayerProduct::kQuantized);
  if (w.has_indexer) batch.add(qr.data(), S, w.indexer_wq_b, iq.data(), LayerProduct::kQuantized);
  batch.run(cfg, num);
  // Queries, keys, compressors and the indexer run mostly serial: time to pull in the output
  // projection.
  prefetch_next(num, {&w.wo_a, &w.wo_b});

  // ---- queries: head norm (query_head_norm: V4) -> RoPE
  section.start(DI_PROFILE_SECTION("attn.query_rope"));
  // Token rows over the pool (each row's own arithmetic, so any split gives the same bits).
  for_each_row(num, S, [&](int64_t t) {
    // V4's unweighted per-head RMS, each step rounded to bf16 as the reference's bf16 tensor
    // ops (docs/model/attention.md §2); float numerics: RMSNorm without rounding.
    if (rules.query_head_norm) kernels::head_rms_norm_ref(&q[t * H * Dh], H, Dh, eps, num.reference());
    for (int64_t h = 0; h < H; ++h) rope.apply(&q[(t * H + h) * Dh], Dh, pos[t], false, num);
    // ---- window keys (K = V): kv_norm -> RoPE -> FP8 QDQ (kv_qdq)
    float* k = &kv[t * Dh];
    rms_norm(k, w.kv_norm.data(), Dh, eps, num, k);
    rope.apply(k, Dh, pos[t], false, num);
    kv_qdq(cfg, num, k);
    // ---- the indexer's query (V4; V4.1's shared attention prepares its own)
    if (lightning) indexer_query(cfg, num, rope, &iq[t * HI * DI], &iw[t * HI], pos[t]);
  });

  // ---- per sequence: compressed keys (every group completed inside this chunk, before any
  // attention), indexer selection, and the key list of each query.
  // Column layout as the reference (docs/model/attention.md §6.2): a prefill from position 0 has min(S, W)
  // window columns, any later step W; positions ascend from max(0, p-W+1), invalid ones
  // (beyond p) at the tail. It fixes the 64-wide tiles of the online softmax.
  // Row t's keys: key_rows[key_begin[t] .. + n_keys[t]); its room holds the window columns
  // and at most index_topk (ratio 4) or (p + 1) / ratio (other compressed layers) entries.
  section.stop();
  std::span<int64_t> key_begin = scratch.take<int64_t>(S), n_keys = scratch.take_zeroed<int64_t>(S);
  int64_t key_room = 0;
  for (const Segment& sg : segments)
    for (int64_t t = 0; t < sg.n; ++t) {
      const int64_t p = sg.p0 + t;
      key_begin[sg.row0 + t] = key_room;
      if (sg.dspark_block) {
        key_room += std::min(sg.p0, Wn) + sg.n;
        continue;
      }
      // Shared runtime: every compressed layer reads a top-k (its own or its index source's).
      const bool topk = L.ratio == 4 || shared;
      key_room += (sg.p0 == 0 ? std::min(sg.n, Wn) : Wn) + (topk ? cfg.index_topk : L.ratio != 0 ? (p + 1) / L.ratio : 0);
    }
  std::span<const float*> key_rows = scratch.take<const float*>(key_room);
  std::span<const float*> ring_rows = scratch.take<const float*>(Wn);
  for (const Segment& sg : segments) {
    LayerState& st = *sg.state;
    section.start(DI_PROFILE_SECTION("attn.compressors"));
    if (shared) {
      // The segment's rows of the indexer projections (none on a layer without an indexer).
      const int64_t ix = w.has_indexer ? 1 : 0;
      shared_attention_segment(cfg, num, L, rope, sg, ckv.data() + sg.row0 * cn, csc.data() + sg.row0 * cn,
                               iq.subspan(size_t(ix * sg.row0 * HI * DI), size_t(ix * sg.n * HI * DI)),
                               iw.subspan(size_t(ix * sg.row0 * HI), size_t(ix * sg.n * HI)));
    } else if (w.has_indexer) {
      run_compressor(icw, st.index_compressor, &ikv[sg.row0 * icn], &isc[sg.row0 * icn], sg.n, sg.p0,
                     [&](float* z, int64_t entry) {
                       for (int64_t c = 0; c < icw.width; ++c) z[c] = num.bf16(z[c]);
                       rms_norm(z, icw.norm.data(), icw.width, eps, num, z);
                       rope.apply(z, icw.width, entry * icw.ratio, false, num);
                       indexer_rotate_quant(z, icw.width, num);
                     });
    }
    if (w.has_compressor && !rules.shared_attention_runtime) {
      run_compressor(cw, st.compressor, &ckv[sg.row0 * cn], &csc[sg.row0 * cn], sg.n, sg.p0, [&](float* z, int64_t entry) {
        for (int64_t c = 0; c < cw.width; ++c) z[c] = num.bf16(z[c]);
        rms_norm(z, cw.norm.data(), cw.width, eps, num, z);
        rope.apply(z, cw.width, entry * cw.ratio, false, num);
        kv_qdq(cfg, num, z);
      });
    }
    section.stop();
    // Indexer choices of the segment's queries (scope: this segment).
    ScratchArena::Scope segment_scope(scratch);
    std::span<int64_t> selected, n_selected;
    if (lightning) {
      DI_PROFILE("attn.indexer");
      selected = scratch.take<int64_t>(sg.n * cfg.index_topk);
      n_selected = scratch.take<int64_t>(sg.n);
      indexer_select(cfg, num, iq.subspan(size_t(sg.row0 * HI * DI), size_t(sg.n * HI * DI)),
                     iw.subspan(size_t(sg.row0 * HI), size_t(sg.n * HI)), sg.n, sg.p0, st.index_compressor,
                     selected.data(), n_selected.data());
    }
    const float* chunk_kv = kv.data() + sg.row0 * Dh;
    // The ring's rows sit in the sequence's fixed pages: resolved once here (a chunk from
    // position 0 reads none of them).
    if (sg.p0 > 0)
      for (int64_t s = 0; s < Wn; ++s) ring_rows[size_t(s)] = st.ring_row(s);
    auto window_key = [&](int64_t p) -> const float* {
      return p >= sg.p0 ? chunk_kv + (p - sg.p0) * Dh : ring_rows[size_t(p % Wn)];
    };
    const int64_t n_window_cols = sg.p0 == 0 ? std::min(sg.n, Wn) : Wn;
    if (sg.dspark_block) {  // the ring's valid slots in slot order, then the whole block
      for (int64_t t = 0; t < sg.n; ++t) {
        const float** keys = &key_rows[key_begin[sg.row0 + t]];
        int64_t& n = n_keys[sg.row0 + t];
        for (int64_t s = 0; s < std::min(sg.p0, Wn); ++s) keys[n++] = ring_rows[size_t(s)];
        for (int64_t j = 0; j < sg.n; ++j) keys[n++] = chunk_kv + j * Dh;
      }
      continue;
    }
    for (int64_t t = 0; t < sg.n; ++t) {
      const int64_t p = sg.p0 + t;
      const float** keys = &key_rows[key_begin[sg.row0 + t]];
      int64_t& n = n_keys[sg.row0 + t];
      const int64_t start = std::max<int64_t>(0, p - Wn + 1);
      for (int64_t j = 0; j < n_window_cols; ++j) keys[n++] = start + j <= p ? window_key(start + j) : nullptr;
      if (shared) {  // the top-k of the governing index source, ascending
        const SharedSelection& sel = *sg.shared;
        for (int64_t i = 0; i < sel.n_topk[t]; ++i)
          keys[n++] = sg.kv_source->compressor.entry(sel.topk[t * cfg.index_topk + i]);
      } else if (L.ratio == 4) {
        for (int64_t i = 0; i < n_selected[t]; ++i) keys[n++] = st.compressor.entry(selected[t * cfg.index_topk + i]);
      } else if (L.ratio != 0) {
        const int64_t n_vis = std::min((p + 1) / L.ratio, st.compressor.n_entries());
        for (int64_t e = 0; e < n_vis; ++e) keys[n++] = st.compressor.entry(e);
      }
    }
  }

  // ---- sink attention per query and head
  section.start(DI_PROFILE_SECTION("attn.sink_attention"));
  const float scale = float(1.0 / std::sqrt(double(Dh)));
  std::span<float> o = scratch.take<float>(S * H * Dh);
  // Items i = t * H + h; a thread's consecutive heads of one query share its key list, so
  // they go to the backend together (it reads each tile of keys once for all of them).
  auto attend = [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1;) {
      const int64_t t = i / H, h0 = i % H, nh = std::min(i1 - i, H - h0);
      num.backend->sink_attention_heads(&q[i * Dh], nh, &key_rows[key_begin[t]], n_keys[t], Dh, scale, &w.sink[h0],
                                        num.reference(), &o[i * Dh]);
      for (int64_t h = h0; h < h0 + nh; ++h) {
        float* oh = &o[(t * H + h) * Dh];
        num.bf16(oh, Dh);
        rope.apply(oh, Dh, pos[t], true, num);  // V = K carries the key rotation: undo the query's
      }
      i += nh;
    }
  };
  // Captured by one reference, so the std::function of parallel_for stays off the heap. Query
  // rows see different numbers of keys (a prefill's early rows fewer): several whole rows per
  // piece, pieces taken over by an idle thread; one row (decode) splits its heads.
  if (S > 1)
    parallel_for_balanced(num.backend->pool(), S * H, H, 4, [&attend](int64_t i0, int64_t i1, int th) { attend(i0, i1, th); });
  else
    parallel_for(num.backend->pool(), S * H, 1, [&attend](int64_t i0, int64_t i1, int th) { attend(i0, i1, th); });

  // The ring keeps the last W window keys of each sequence for later chunks.
  for (const Segment& sg : segments)
    for (int64_t t = sg.dspark_block ? sg.n : std::max<int64_t>(0, sg.n - Wn); t < sg.n; ++t)
      std::copy_n(&kv[(sg.row0 + t) * Dh], Dh, sg.state->ring_row((sg.p0 + t) % Wn));

  section.start(DI_PROFILE_SECTION("attn.output"));
  // ---- grouped output projection: wo_a per head group as a bf16 product, then wo_b
  // wo_a is FP8 on disk; the reference multiplies its exact bf16 values (no act-quant).
  const int64_t G = cfg.o_groups, R = cfg.o_lora_rank, gw = H * Dh / G;
  std::span<float> u = scratch.take<float>(S * G * R), og = scratch.take<float>(G * S * gw), ug = scratch.take<float>(G * S * R);
  std::span<WeightMatrix> wa = scratch.take<WeightMatrix>(G);
  for (int64_t g = 0; g < G; ++g) {  // group g's input og_g [S, gw] and output ug_g [S, R]
    float *og_g = &og[g * S * gw], *ug_g = &ug[g * S * R];
    for (int64_t t = 0; t < S; ++t) std::copy_n(&o[t * H * Dh + g * gw], gw, &og_g[t * gw]);
    wa[g] = weight_row_slice(w.wo_a, g * R, R);
    if (wa[g].valid()) {
      batch.add(og_g, S, wa[g], ug_g, LayerProduct::kFp32);
    } else {  // group edge inside an FP8 scale block: decode row by row
      ScratchArena::Scope row_scope(scratch);
      std::span<float> row = scratch.take<float>(gw);
      for (int64_t r = 0; r < R; ++r) {
        weight_decode_row(w.wo_a, g * R + r, row.data());
        for (int64_t t = 0; t < S; ++t) {
          double acc = 0.0;
          for (int64_t c = 0; c < gw; ++c) acc += double(og_g[t * gw + c]) * double(row[c]);
          ug_g[t * R + r] = float(acc);
        }
      }
    }
  }
  batch.run(cfg, num);
  for (int64_t g = 0; g < G; ++g)
    for (int64_t t = 0; t < S; ++t)
      for (int64_t r = 0; r < R; ++r) u[t * G * R + g * R + r] = num.bf16(ug[g * S * R + t * R + r]);
  linear_quantized(cfg, num, u.data(), S, w.wo_b, out);
}

void write_window_keys(const Config& cfg, const Numerics& num, const LayerWeights& L, const RopeTable& rope,
                       const float* x, int64_t n, int64_t pos0, LayerState& state) {
  const int64_t Dh = cfg.head_dim, Wn = cfg.window;
  const int64_t skip = std::max<int64_t>(0, n - Wn);  // rows a later one of the same call overwrites
  if (skip >= n) return;
  ScratchArena& scratch = step_scratch();
  ScratchArena::Scope scope(scratch);
  std::span<float> kv = scratch.take<float>((n - skip) * Dh);
  linear_quantized(cfg, num, x + skip * cfg.dim, n - skip, L.attn.wkv, kv.data());
  for (int64_t t = skip; t < n; ++t) {
    float* k = &kv[(t - skip) * Dh];
    rms_norm(k, L.attn.kv_norm.data(), Dh, float(cfg.norm_eps), num, k);
    rope.apply(k, Dh, pos0 + t, false, num);
    kv_qdq(cfg, num, k);
    std::copy_n(k, Dh, state.ring_row((pos0 + t) % Wn));
  }
}

}  // namespace deepinfer::v4
