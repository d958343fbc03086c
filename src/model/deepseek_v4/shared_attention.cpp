// V4.1's shared compressed caches and two-level selection (docs/model/v41.md §2, §4, §5): what a
// compressed V4.1 layer does besides V4's window attention. Differs from V4 (attention.cpp):
//   * only the KV sources compress (ratio 2: softmax-gated pairs, no ape, no overlap; ratio 1:
//     one bf16 projection per token); every later layer with the same ratio reads the latest
//     source's entries, which are FP4 (e4m3 scales, blocks of 16) instead of FP8;
//   * index keys are k_norm(wk(latent)) of each entry's pre-RoPE latent, RoPE'd and FP4
//     QDQ'd without Hadamard, owned by the KV source; index queries have no Hadamard either;
//   * only the index sources score; the layers between reuse the latest top-k, which is the
//     chosen entries in ascending order (not score order);
//   * the candidate source also picks the best blocks of entries, and the index sources after
//     it choose only inside them.
// The reference publishes a source's index keys only on steps where it emits an entry, so
// its token-by-token decode reads another layer's keys on the other steps (docs/model/v41.md §9);
// here a layer always reads its KV source's own store, which is the corrected semantics.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <span>

#include "core/profile.h"
#include "kernels/kernels.h"
#include "model/deepseek_v4/compressor.h"
#include "model/deepseek_v4/layer_ops.h"

namespace deepinfer::v4 {

namespace {

// A KV source's new entries (docs/model/v41.md §4 order): from each pre-RoPE latent first its index
// key k = k_norm(wk(latent)), RoPE at w*r, FP4 QDQ (pow2 scales, blocks of 32); then the
// latent itself RoPE'd at w*r and FP4 QDQ'd (e4m3 scales, blocks of 16). latents [n, Dh] are
// the normed latents of entries first_entry ...
void emit_entries(const Config& cfg, const Numerics& num, const LayerWeights& L, const RopeTable& rope,
                  LayerState& st, std::span<float> latents, int64_t n, int64_t first_entry) {
  if (n == 0) return;
  const AttentionWeights& w = L.attn;
  const int64_t Dh = cfg.head_dim, DI = cfg.index_head_dim, r = L.ratio;
  const float eps = float(cfg.norm_eps);
  ScratchArena& scratch = step_scratch();
  ScratchArena::Scope scope(scratch);
  std::span<float> keys = scratch.take<float>(n * DI);
  const LayerProduct product{latents.data(), n, &w.indexer_wk, keys.data(), LayerProduct::kBf16};
  run_products(cfg, num, &product, 1);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t entry = first_entry + i, pos = entry * r;  // an entry sits at its group's first token
    float* k = &keys[i * DI];
    rms_norm(k, w.indexer_k_norm.data(), DI, eps, num, k);
    rope.apply(k, DI, pos, false, num);
    if (num.reference()) kernels::fp4_qdq_pow2_ref(k, DI, 32);
    std::copy_n(k, DI, st.index_compressor.append_entry(entry));
    float* z = &latents[i * Dh];
    rope.apply(z, Dh, pos, false, num);
    if (num.reference()) kernels::fp4_qdq_e4m3_ref(z, Dh, 16);
    std::copy_n(z, Dh, st.compressor.append_entry(entry));
  }
}

// The entries a KV source completes in this segment, in order: ratio 1 every token's bf16
// projection, ratio > 1 the softmax-gated pool of each finished group (fp32), each through
// bf16 and the compressor norm.
void compress_segment(const Config& cfg, const Numerics& num, const LayerWeights& L, const RopeTable& rope,
                      const Segment& sg, const float* ckv, const float* csc) {
  const CompressorWeights& cw = L.attn.compressor;
  const int64_t Dh = cfg.head_dim, r = L.ratio;
  LayerState& st = *sg.state;
  ScratchArena& scratch = step_scratch();
  ScratchArena::Scope scope(scratch);
  std::span<float> latents = scratch.take<float>((sg.n / r + 1) * Dh);
  const int64_t first = st.compressor.n_entries();
  int64_t n = 0;
  for (int64_t t = 0; t < sg.n; ++t) {
    float* z = &latents[n * Dh];
    if (r == 1) {
      std::copy_n(ckv + t * Dh, Dh, z);
    } else {
      if (!compressor_push(st.compressor, ckv + t * Dh, csc + t * Dh, sg.p0 + t, z)) continue;
      num.bf16(z, Dh);
    }
    rms_norm(z, cw.norm.data(), Dh, float(cfg.norm_eps), num, z);
    ++n;
  }
  emit_entries(cfg, num, L, rope, st, latents, n, first);
}

// Candidate blocks of one query row (docs/model/v41.md §5.3, level one): each block of B entries
// scores its best visible entry, the block of the newest visible entry is always kept, and
// the best topk_blocks blocks win (ties: the lower block). score [n_vis]; out ascending.
int64_t candidate_blocks(const Config& cfg, std::span<const float> score, int64_t* out) {
  const int64_t B = cfg.candidate_block_size, n_vis = int64_t(score.size());
  const int64_t n_blocks = (n_vis + B - 1) / B;
  ScratchArena& scratch = step_scratch();
  ScratchArena::Scope scope(scratch);
  std::span<float> best = scratch.take<float>(n_blocks);
  std::span<int64_t> order = scratch.take<int64_t>(n_blocks);
  for (int64_t b = 0; b < n_blocks; ++b)
    best[b] = *std::max_element(score.begin() + b * B, score.begin() + std::min(n_vis, (b + 1) * B));
  if (n_blocks > 0) best[n_blocks - 1] = std::numeric_limits<float>::infinity();  // partly filled: pinned
  const int64_t k = std::min(cfg.candidate_topk_blocks, n_blocks);
  std::iota(order.begin(), order.end(), 0);
  auto before = [&](int64_t x, int64_t y) { return best[x] != best[y] ? best[x] > best[y] : x < y; };
  if (k < n_blocks) std::nth_element(order.begin(), order.begin() + k, order.end(), before);
  std::sort(order.begin(), order.begin() + k);
  std::copy_n(order.begin(), k, out);
  return k;
}

// Top-k of one row (level two): the min(index_topk, n_vis) best visible entries by score (ties:
// the lower entry). Only `scored` entries carry a score; the reference gives every other
// visible entry -inf, so when too few are scored the lowest unscored entries fill up the
// list. Returns the count; out ascending.
int64_t top_entries(const Config& cfg, std::span<const int64_t> scored, std::span<const float> score, int64_t n_vis,
                    int64_t* out) {
  const int64_t want = std::min(cfg.index_topk, n_vis), n = int64_t(scored.size());
  ScratchArena& scratch = step_scratch();
  ScratchArena::Scope scope(scratch);
  std::span<int64_t> order = scratch.take<int64_t>(n);
  std::iota(order.begin(), order.end(), 0);
  auto before = [&](int64_t x, int64_t y) { return score[x] != score[y] ? score[x] > score[y] : scored[x] < scored[y]; };
  const int64_t k = std::min(want, n);
  if (k < n) std::nth_element(order.begin(), order.begin() + k, order.end(), before);
  for (int64_t i = 0; i < k; ++i) out[i] = scored[order[i]];
  int64_t count = k;
  if (count < want) {  // scored ascending: the unscored entries are the gaps between them
    size_t j = 0;
    for (int64_t e = 0; e < n_vis && count < want; ++e) {
      while (j < scored.size() && scored[j] < e) ++j;
      if (j < scored.size() && scored[j] == e) continue;
      out[count++] = e;
    }
  }
  std::sort(out, out + count);
  return count;
}

// An index source's queries (RoPE, FP4 QDQ in blocks of 32, no Hadamard) score the KV
// source's index keys; the choice goes to the segment's shared selection.
void select_segment(const Config& cfg, const Numerics& num, const LayerWeights& L, const RopeTable& rope,
                    const Segment& sg, std::span<float> iq, std::span<float> iw) {
  const int64_t HI = cfg.index_n_heads, DI = cfg.index_head_dim, r = L.ratio, B = cfg.candidate_block_size;
  const CompressorState& keys = sg.kv_source->index_compressor;
  SharedSelection& sel = *sg.shared;
  const bool cand_source = L.id == cfg.candidate_source_layer, use_cand = cfg.uses_candidates(L.id);
  ScratchArena& scratch = step_scratch();
  ScratchArena::Scope scope(scratch);
  const float wscale = float(1.0 / std::sqrt(double(DI)) / std::sqrt(double(HI)));
  for (auto& v : iw) v = num.bf16(v * wscale);
  const int64_t n_keys = keys.n_entries();
  // Queries in blocks (at most kEntries scored entries a block): each query's entries listed,
  // then the block's scores in one call (the backend gives each query to one thread), then
  // each query's choice.
  constexpr int64_t kEntries = int64_t(1) << 18;
  const int64_t ld = std::max<int64_t>(n_keys, 1);
  const int64_t block = std::clamp<int64_t>(kEntries / ld, 1, std::max<int64_t>(sg.n, 1));
  std::span<float> score_blk = scratch.take<float>(block * ld);
  std::span<int64_t> ids_blk = scratch.take<int64_t>(block * ld), n_blk = scratch.take<int64_t>(block);
  std::span<const float*> rows_blk = scratch.take<const float*>(block * ld);
  auto n_vis_of = [&](int64_t t) { return std::min((sg.p0 + t + 1) / r, n_keys); };
  for (int64_t t0 = 0; t0 < sg.n; t0 += block) {
    const int64_t nb = std::min(block, sg.n - t0);
    for (int64_t t = t0; t < t0 + nb; ++t) {
      const int64_t p = sg.p0 + t;
      for (int64_t h = 0; h < HI; ++h) {
        float* qh = &iq[(t * HI + h) * DI];
        rope.apply(qh, DI, p, false, num);
        if (num.reference()) kernels::fp4_qdq_pow2_ref(qh, DI, 32);
      }
      const int64_t n_vis = n_vis_of(t);
      // The entries to score: every visible one, or only those in the candidate blocks.
      int64_t* ids = &ids_blk[size_t((t - t0) * ld)];
      int64_t n = 0;
      if (use_cand) {
        for (int64_t i = 0; i < sel.n_cand[t]; ++i) {
          const int64_t b = sel.cand[t * cfg.candidate_topk_blocks + i];
          for (int64_t e = b * B; e < std::min(n_vis, (b + 1) * B); ++e) ids[n++] = e;
        }
      } else {
        std::iota(ids, ids + n_vis, 0);
        n = n_vis;
      }
      for (int64_t i = 0; i < n; ++i) rows_blk[size_t((t - t0) * ld + i)] = keys.entry(ids[i]);
      n_blk[size_t(t - t0)] = n;
    }
    num.backend->index_scores_many(&iq[t0 * HI * DI], &iw[t0 * HI], nb, HI, DI, rows_blk.data(), ld, n_blk.data(),
                                   num.reference(), score_blk.data(), ld);
    for (int64_t t = t0; t < t0 + nb; ++t) {
      const int64_t n = n_blk[size_t(t - t0)];
      std::span<const float> score = score_blk.subspan(size_t((t - t0) * ld), size_t(n));
      std::span<const int64_t> ids = ids_blk.subspan(size_t((t - t0) * ld), size_t(n));
      if (cand_source) sel.n_cand[t] = candidate_blocks(cfg, score, &sel.cand[t * cfg.candidate_topk_blocks]);
      sel.n_topk[t] = top_entries(cfg, ids, score, n_vis_of(t), &sel.topk[t * cfg.index_topk]);
    }
  }
}

}  // namespace

void shared_attention_segment(const Config& cfg, const Numerics& num, const LayerWeights& L, const RopeTable& rope,
                              const Segment& sg, const float* ckv, const float* csc, std::span<float> iq,
                              std::span<float> iw) {
  if (cfg.owns_compressor(L.id)) compress_segment(cfg, num, L, rope, sg, ckv, csc);
  if (cfg.is_index_source(L.id)) {
    DI_PROFILE("attn.indexer");
    select_segment(cfg, num, L, rope, sg, iq, iw);
  }
}

}  // namespace deepinfer::v4
