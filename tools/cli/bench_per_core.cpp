#include "bench_per_core.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <stdexcept>

#include "core/formats.h"
#include "core/thread_pool.h"
#include "kernels/backend.h"
#include "model/deepseek_v4/layer_ops.h"

namespace deepinfer::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct Kind {
  std::string name;
  std::vector<const WeightMatrix*> mats;
  std::vector<int64_t> rows;
};

// The model's decode matrices by kind (the backbone's layers; the MTP module is a drafter's).
std::vector<Kind> decode_kinds(const v4::Weights& w) {
  Kind experts{"routed experts", {}, {1, 2, 4, 12}}, shared{"shared expert", {}, {1}};
  Kind attention{"attention", {}, {1}}, head{"head", {}, {1}};
  for (const v4::LayerWeights& L : w.layers) {
    for (const v4::ExpertWeights& e : L.ffn.experts)
      for (const WeightMatrix* m : {&e.w1, &e.w3, &e.w2})
        if (m->valid()) experts.mats.push_back(m);
    if (L.ffn.has_shared)
      for (const WeightMatrix* m : {&L.ffn.shared.w1, &L.ffn.shared.w3, &L.ffn.shared.w2})
        if (m->valid()) shared.mats.push_back(m);
    const v4::AttentionWeights& a = L.attn;
    for (const WeightMatrix* m : {&a.wq_a, &a.wq_b, &a.wkv, &a.wo_a, &a.wo_b})
      if (m->valid()) attention.mats.push_back(m);
  }
  if (w.head.valid()) head.mats.push_back(&w.head);
  std::vector<Kind> kinds;
  for (Kind* k : {&experts, &shared, &attention, &head})
    if (!k->mats.empty()) kinds.push_back(std::move(*k));
  return kinds;
}

const char* format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::F32: return "F32";
    case WeightFormat::BF16: return "BF16";
    case WeightFormat::FP8_BLOCK: return "FP8";
    case WeightFormat::FP4_BLOCK: return "FP4";
  }
  return "?";
}

}  // namespace

std::vector<PerCoreRow> measure_per_core(const v4::Model& model, const std::string& kernels, bool reference,
                                         double min_bytes, int rounds) {
  const v4::Config& cfg = model.config();
  ThreadPool one(1);
  const std::unique_ptr<kernels::Backend> be = kernels::make_backend(kernels, &one);
  if (!be) throw std::invalid_argument("bench --per-core: unknown kernels '" + kernels + "'");
  // The products go through the model's own run_products, on a one-thread backend.
  v4::Numerics num;
  num.mode = reference ? v4::NumericsMode::Reference : v4::NumericsMode::Float;
  num.backend = be.get();
  std::vector<PerCoreRow> out;
  for (const Kind& k : decode_kinds(model.weights())) {
    int64_t max_cols = 0, max_rows = 0;
    double set_bytes = 0;
    std::string formats;
    for (const WeightMatrix* m : k.mats) {
      max_cols = std::max(max_cols, m->cols);
      max_rows = std::max(max_rows, m->rows);
      set_bytes += double(weight_data_bytes(*m));
      const std::string f = format_name(m->format);
      if (formats.find(f) == std::string::npos) formats += (formats.empty() ? "" : "/") + f;
    }
    for (int64_t M : k.rows) {
      // Activations as reference numerics leaves them between products: bf16 values.
      std::vector<float> x(size_t(M * max_cols)), y(size_t(M * max_rows));
      std::mt19937 rng(7);
      std::normal_distribution<float> nd(0.0f, 1.0f);
      for (float& v : x) v = round_bf16(nd(rng));
      std::vector<double> rates;
      for (int r = 0; r < rounds; ++r) {
        double bytes = 0;
        const Clock::time_point t0 = Clock::now();
        for (size_t i = 0; bytes < min_bytes || i % k.mats.size() != 0; ++i) {
          const WeightMatrix& W = *k.mats[i % k.mats.size()];
          const v4::LayerProduct p{x.data(), M, &W, y.data(),
                                   W.is_quantized() ? v4::LayerProduct::kQuantized : v4::LayerProduct::kFp32};
          v4::run_products(cfg, num, &p, 1);
          bytes += double(weight_data_bytes(W));
        }
        rates.push_back(bytes / std::chrono::duration<double>(Clock::now() - t0).count());
      }
      std::sort(rates.begin(), rates.end());
      out.push_back({k.name + " (" + formats + ")", M, int64_t(k.mats.size()), set_bytes, rates[rates.size() / 2]});
    }
  }
  return out;
}

}  // namespace deepinfer::cli
