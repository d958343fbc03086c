// The op registry's test (test_op_registry.cpp), its light per-token ops: their case generators
// and their table, light_generators(). The comparison, the inputs and the Env a generator runs
// in: op_registry_cases.h.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "kernels/light_ops.h"
#include "op_registry_cases.h"

namespace deepinfer::kernels::op_registry_test {
namespace {

// ----------------------------------------------------------------------------- light ops

// The light per-token ops (light_ops.h) have one implementation, their referee, which the model
// calls itself whatever the backend: no ISA has a kernel for them to set against the referee,
// and a case on an ISA claims none. What it checks there: the registry says the referee runs
// (expect_referee_only); the inputs are drawn by the op alone, so every ISA's case sees the same
// ones, and the outputs equal, bit for bit, the test's own evaluation of the header's formula
// (so every ISA's case sees the same bits); a second call into another buffer, now and then on a
// worker of the ISA's pool, has the first call's bits, NaN included (no state, nothing that
// depends on the thread); nothing is written past the outputs.

// Starts a light op's case: the referee only, the inputs seeded by the op (not the ISA).
void light_inputs(Env& e) {
  expect_referee_only(e);
  e.rng.seed(5000u + 17u * unsigned(e.spec.op));
}

// fn(out) writes the op's formula.size() outputs to out: an in-place op copies its input there
// first, integer outputs come as floats (exact below 2^24). The second call runs on a worker
// of the pool for every fourth case (waking it costs more than most calls), else here.
template <class F>
void light_case(Env& e, const std::string& where, const std::vector<float>& formula, F&& fn) {
  const int64_t n = int64_t(formula.size());
  Out first(n, -1.5f), again(n, -2.5f);
  fn(first.data());
  const bool on_worker = e.light_cases++ % 4 == 0;
  if (on_worker) {
    e.pool->run_on_each_thread([&](int64_t t, int64_t, int) {
      if (t == e.pool->size() - 1) fn(again.data());
    });
  } else {
    fn(again.data());
  }
  if (!first.guards_intact()) e.check.fail(where, "wrote past its output");
  e.check.compare(again, std::vector<float>(first.v.begin(), first.v.begin() + n),
                  where + (on_worker ? ", called again on a worker" : ", called again"));
  e.check.matches_formula(first.data(), formula.data(), n, where);
}

// The special values of `which` that the op's contract covers, then zeros of both signs, in
// turn into every stride-th element of v from `at`.
void plant_specials(const Env& e, std::vector<float>& v, int64_t at, int64_t stride, uint8_t which) {
  std::vector<float> vals;
  const uint8_t covered = which & e.spec.contract.specials;
  if (covered & kSpecialNaN) vals.push_back(kNaNf);
  if (covered & kSpecialInf) vals.insert(vals.end(), {kInff, -kInff});
  if (covered & kSpecialSubnormal) vals.insert(vals.end(), {1e-40f, -3e-39f});
  vals.insert(vals.end(), {0.0f, -0.0f});
  size_t t = 0;
  for (int64_t i = at; i < int64_t(v.size()); i += stride) v[size_t(i)] = vals[t++ % vals.size()];
}

// A pass of plain values (0), then one per kind of special value (zeros where not covered).
constexpr uint8_t kPlantPasses[] = {0, kSpecialSubnormal, kSpecialInf, kSpecialNaN};

float bf16_if(bool round, float v) { return round ? round_bf16(v) : v; }

// The double sum of x's fp32 squares (each bf16-rounded with round), in index order.
double sum_squares(const float* x, int64_t n, bool round = false) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += double(bf16_if(round, x[i] * x[i]));
  return ss;
}
float rsqrt_formula(float v) { return float(1.0 / std::sqrt(double(v))); }
float sigmoid_formula(float z) { return float(1.0 / (1.0 + std::exp(-double(z)))); }
// RMSNorm's r of a row (light_ops.h): the mean rounded to fp32, + eps in fp32, the rsqrt.
float rms_formula(const float* x, int64_t n, float eps) {
  return rsqrt_formula(float(sum_squares(x, n) / double(n)) + eps);
}

// Index outputs as light_case takes them: the k indices, then how many of the guard slots
// (-7) after them the op left alone.
template <class I>
void index_outputs(const std::vector<I>& got, int64_t k, float* out) {
  for (int64_t j = 0; j < k; ++j) out[j] = float(got[size_t(j)]);
  out[k] = float(std::count(got.begin() + k, got.end(), I(-7)));
}

// The indices of v, larger value first and the lower index first among equals (-0 == +0), by a
// stable sort on >: another algorithm than the radix selection and std::partial_sort, the same
// order where v has no NaN (> is then a strict weak order).
std::vector<int64_t> stable_descending(const std::vector<float>& v) {
  std::vector<int64_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), int64_t(0));
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return v[size_t(a)] > v[size_t(b)]; });
  return idx;
}

// The first k of an order in index_outputs' layout, the guards untouched.
std::vector<float> first_k(const std::vector<int64_t>& order, int64_t k) {
  std::vector<float> f;
  for (int64_t j = 0; j < k; ++j) f.push_back(float(order[size_t(j)]));
  f.push_back(float(kGuards));
  return f;
}

void gen_rms_norm(Env& e) {
  light_inputs(e);
  const float eps = 1e-6f;
  for (int64_t n : {1, 2, 7, 16, 33, 1031})
    for (uint8_t which : kPlantPasses) {
      std::vector<float> x = normal(n, e.rng, 3.0f);
      const std::vector<float> w = normal(n, e.rng);
      if (which) plant_specials(e, x, n / 2, 5, which);
      const float r = rms_formula(x.data(), n, eps);
      for (bool weighted : {false, true})
        for (bool round : {false, true}) {
          const bool in_place = weighted == round;  // y aliasing x, half the time
          std::vector<float> want(static_cast<size_t>(n));
          for (int64_t i = 0; i < n; ++i) {
            const float t = x[size_t(i)] * r;
            want[size_t(i)] = bf16_if(round, weighted ? w[size_t(i)] * t : t);
          }
          const float* wp = weighted ? w.data() : nullptr;
          light_case(e, shape("n specials weighted round in_place", {n, which, weighted, round, in_place}), want,
                     [&](float* y) {
                       if (in_place) std::copy(x.begin(), x.end(), y);
                       rms_norm_ref(in_place ? y : x.data(), wp, n, eps, round, y);
                     });
        }
    }
}

// A few heads (rows) get the special values, the rest must keep their own bits (heads run side by
// side in kRmsLanes chains: 9 and 17 heads leave a tail).
void gen_head_rms_norm(Env& e) {
  light_inputs(e);
  const float eps = 1e-6f;
  for (int64_t heads : {1, 3, 8, 9, 17})
    for (int64_t n : {1, 7, 64})
      for (uint8_t which : kPlantPasses) {
        std::vector<float> x = normal(heads * n, e.rng, 3.0f, true);
        if (which) plant_specials(e, x, heads / 2 * n + n / 2, 5 * n + 1, which);
        for (bool round : {false, true}) {
          std::vector<float> want = x;
          for (int64_t h = 0; h < heads; ++h) {
            float* row = &want[size_t(h * n)];
            const float mean = bf16_if(round, float(sum_squares(row, n, round) / double(n)));
            const float r = bf16_if(round, rsqrt_formula(bf16_if(round, mean + eps)));
            for (int64_t i = 0; i < n; ++i) row[i] = bf16_if(round, row[i] * r);
          }
          light_case(e, shape("heads n specials round", {heads, n, which, round}), want, [&](float* y) {
            std::copy(x.begin(), x.end(), y);
            head_rms_norm_ref(y, heads, n, eps, round);
          });
        }
      }
}

void gen_rope_angles(Env& e) {
  light_inputs(e);
  std::uniform_real_distribution<float> freq(1e-4f, 1.0f);
  for (int64_t half : {1, 3, 17, 64})
    for (int64_t pos : {int64_t(0), int64_t(1), int64_t(4093), int64_t(1) << 20, (int64_t(1) << 24) + 1}) {
      std::vector<float> f(static_cast<size_t>(half)), want(size_t(2 * half));
      for (int64_t i = 0; i < half; ++i) {
        f[size_t(i)] = i % 2 ? freq(e.rng) : float(std::pow(10000.0, -double(i) / double(half)));
        const float theta = float(pos) * f[size_t(i)];
        want[size_t(i)] = float(std::cos(double(theta)));
        want[size_t(half + i)] = float(std::sin(double(theta)));
      }
      light_case(e, shape("half pos", {half, pos}), want,
                 [&](float* out) { rope_angles_ref(f.data(), half, pos, out, out + half); });
    }
}

void gen_rope_rotate(Env& e) {
  light_inputs(e);
  std::uniform_real_distribution<float> angle(-3.2f, 3.2f);
  for (int64_t half : {1, 5, 32, 67})
    for (uint8_t which : kPlantPasses) {
      std::vector<float> c(static_cast<size_t>(half)), s(static_cast<size_t>(half));
      for (int64_t i = 0; i < half; ++i) {
        const float t = angle(e.rng);
        c[size_t(i)] = i == 0 ? 0.0f : std::cos(t);  // a quarter turn first
        s[size_t(i)] = i == 0 ? 1.0f : std::sin(t);
      }
      std::vector<float> x = normal(2 * half, e.rng, 2.0f);
      if (which) plant_specials(e, x, 1, 3, which);
      for (bool inverse : {false, true})
        for (bool round : {false, true}) {
          std::vector<float> want(size_t(2 * half));
          for (int64_t i = 0; i < half; ++i) {
            const float u = x[size_t(2 * i)], v = x[size_t(2 * i + 1)], ci = c[size_t(i)];
            const float si = inverse ? -s[size_t(i)] : s[size_t(i)];
            want[size_t(2 * i)] = bf16_if(round, u * ci - v * si);
            want[size_t(2 * i + 1)] = bf16_if(round, u * si + v * ci);
          }
          light_case(e, shape("half specials inverse round", {half, which, inverse, round}), want, [&](float* p) {
            std::copy(x.begin(), x.end(), p);
            rope_rotate_ref(p, half, c.data(), s.data(), inverse, round);
          });
        }
    }
}

// hyper_connections.md §2 with the columns as the rows of the transposed matrix: the row
// softmax, then (transposed) each line divided by float(its double sum) + eps.
std::vector<float> sinkhorn_formula(std::vector<float> c, int64_t n, int64_t iters, float eps) {
  auto line = [&](int64_t i) { return c.begin() + i * n; };
  auto transpose = [&] {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < i; ++j) std::swap(c[size_t(i * n + j)], c[size_t(j * n + i)]);
  };
  auto divide_lines = [&] {
    for (int64_t i = 0; i < n; ++i) {
      const float d = float(std::accumulate(line(i), line(i) + n, 0.0)) + eps;
      std::transform(line(i), line(i) + n, line(i), [d](float v) { return v / d; });
    }
  };
  for (int64_t i = 0; i < n; ++i) {
    const double m = *std::max_element(line(i), line(i) + n);
    std::vector<double> ex(static_cast<size_t>(n));
    std::transform(line(i), line(i) + n, ex.begin(), [m](float v) { return std::exp(double(v) - m); });
    const double sum = std::accumulate(ex.begin(), ex.end(), 0.0);
    std::transform(ex.begin(), ex.end(), line(i), [&](double v) { return float(v / sum) + eps; });
  }
  for (int64_t pass = 0; pass < std::max<int64_t>(iters, 1); ++pass) {
    if (pass > 0) divide_lines();  // the rows, from the second iteration
    transpose();
    divide_lines();  // the columns
    transpose();
  }
  return c;
}

void gen_hc_sinkhorn(Env& e) {
  light_inputs(e);
  for (int64_t n : {1, 2, 3, 4, 5, 8})
    for (int64_t iters : {0, 1, 2, 20})
      for (int pass = 0; pass < 2; ++pass) {
        std::vector<float> c0 = normal(n * n, e.rng, pass ? 4.0f : 0.5f);
        if (pass && n > 1) {  // finite extremes (a row's exp underflows to 0), subnormals where covered
          c0[0] = 1e30f;
          c0[size_t(n * n - 1)] = -1e30f;
          if (e.covers(kSpecialSubnormal)) c0[1] = 1e-40f;
        }
        const float eps = pass ? 0.25f : 1e-6f;
        light_case(e, shape("n iters pass", {n, iters, pass}), sinkhorn_formula(c0, n, iters, eps), [&](float* c) {
          std::copy(c0.begin(), c0.end(), c);
          hc_sinkhorn_ref(c, n, iters, eps);
        });
      }
}

// Rows of x with special values among clean ones (kRmsLanes rows' sums run side by side).
void gen_hc_mix_norm(Env& e) {
  light_inputs(e);
  const float eps = 1e-6f;
  for (int64_t rows : {1, 3, 8, 9, 17})
    for (int64_t width : {1, 7, 64})
      for (int64_t n_mix : {1, 24})
        for (uint8_t which : kPlantPasses) {
          std::vector<float> x = normal(rows * width, e.rng, 2.0f), mix = normal(rows * n_mix, e.rng);
          if (which) plant_specials(e, x, rows / 2 * width, 3 * width + 1, which);
          std::vector<float> want = mix;
          for (int64_t t = 0; t < rows; ++t) {
            const float r = rms_formula(&x[size_t(t * width)], width, eps);
            for (int64_t k = 0; k < n_mix; ++k) want[size_t(t * n_mix + k)] *= r;
          }
          light_case(e, shape("rows width n_mix specials", {rows, width, n_mix, which}), want, [&](float* m) {
            std::copy(mix.begin(), mix.end(), m);
            hc_mix_norm_ref(x.data(), rows, width, eps, m, n_mix);
          });
        }
}

// A site's pre, post and comb; pre and post alone; hc_head's pre alone (its mix of hc values).
void gen_hc_coeffs(Env& e) {
  light_inputs(e);
  const float scale[3] = {0.75f, 1.3f, 0.4f}, eps = 1e-6f;
  for (int64_t hc : {1, 2, 4})
    for (int64_t iters : {0, 1, 20})
      for (int kind = 0; kind < 3; ++kind) {
        if (kind != 0 && iters != 0) continue;  // no comb: no Sinkhorn
        const int64_t n_mix = kind == 2 ? hc : (2 + hc) * hc;
        std::vector<float> mix = normal(n_mix, e.rng, 3.0f), base = normal(n_mix, e.rng);
        mix[0] = 200.0f;  // a saturated sigmoid, and the other way, and a tiny mix where covered
        mix[size_t(n_mix - 1)] = -200.0f;
        if (hc > 1 && e.covers(kSpecialSubnormal)) mix[1] = 1e-40f;
        std::vector<float> want;
        for (int64_t i = 0; i < hc; ++i)
          want.push_back(sigmoid_formula(mix[size_t(i)] * scale[0] + base[size_t(i)]) + eps);
        for (int64_t i = hc; i < 2 * hc && kind < 2; ++i)
          want.push_back(2.0f * sigmoid_formula(mix[size_t(i)] * scale[1] + base[size_t(i)]));
        if (kind == 0) {
          std::vector<float> comb;
          for (int64_t k = 2 * hc; k < n_mix; ++k) comb.push_back(mix[size_t(k)] * scale[2] + base[size_t(k)]);
          comb = sinkhorn_formula(comb, hc, iters, eps);
          want.insert(want.end(), comb.begin(), comb.end());
        }
        light_case(e, shape("hc iters kind", {hc, iters, kind}), want, [&](float* out) {
          hc_coeffs_ref(mix.data(), base.data(), scale, hc, eps, iters, out, kind < 2 ? out + hc : nullptr,
                        kind == 0 ? out + 2 * hc : nullptr);
        });
      }
}

void gen_top_k(Env& e) {
  light_inputs(e);
  for (int64_t n : {1, 2, 9, 255, 257, 1001, 65537})
    for (int pass = 0; pass < 3; ++pass) {  // 0 plain, 1 ties and specials but NaN, 2 a NaN (the comparator sort)
      if ((pass == 2 && !e.covers(kSpecialNaN)) || (n > 1001 && pass > 0)) continue;  // 65537: the index bytes
      std::vector<float> s = normal(n, e.rng);
      if (pass == 0) s[0] = s[size_t(n / 2)] = s[size_t(n - 1)] = 9.0f;  // the best three tie (n - 1: 2^16 at most)
      if (pass == 1) {
        for (float& v : s) v = float(int(e.rng() % 5) - 2) * 0.5f;
        plant_specials(e, s, 0, 3, kSpecialInf | kSpecialSubnormal);
      }
      if (pass == 2) {
        plant_specials(e, s, 0, 97, kSpecialInf);
        s[size_t(n / 2)] = kNaNf;
      }
      const bool nan = std::any_of(s.begin(), s.end(), [](float v) { return std::isnan(v); });
      const std::vector<int64_t> sorted = nan ? std::vector<int64_t>{} : stable_descending(s);
      std::vector<int64_t> ks = {1, std::min<int64_t>(n, 31), std::min<int64_t>(n, 257)};
      if (n < 65537) ks.insert(ks.end(), {0, std::min<int64_t>(n, 2), (n + 1) / 2, n});
      for (int64_t k : ks) {
        std::vector<int64_t> idx = sorted;
        if (nan) {  // the header's NaN path: std::nth_element, then std::sort of the first k
          idx.resize(size_t(n));
          std::iota(idx.begin(), idx.end(), int64_t(0));
          auto before = [&](int64_t a, int64_t b) {
            return s[size_t(a)] != s[size_t(b)] ? s[size_t(a)] > s[size_t(b)] : a < b;
          };
          if (k < n) std::nth_element(idx.begin(), idx.begin() + k, idx.end(), before);
          std::sort(idx.begin(), idx.begin() + k, before);
        }
        const std::vector<float> want = first_k(idx, k);
        light_case(e, shape("n k pass", {n, k, pass}), want, [&](float* out) {
          std::vector<int64_t> order(static_cast<size_t>(n)), spare(static_cast<size_t>(n));
          std::vector<int64_t> got(size_t(k + kGuards), -7);
          top_k_ref(s.data(), n, k, order.data(), spare.data(), got.data());
          index_outputs(got, k, out);
        });
      }
    }
}

void gen_router_scores(Env& e) {
  light_inputs(e);
  // softplus's threshold from both sides (directly and tempered by 2), and its tail below.
  const float edges[] = {20.0f, std::nextafter(20.0f, 21.0f), 40.0f, 40.000004f, 19.99f, -88.0f, -104.0f};
  for (int64_t n : {1, 7, 256, 385})
    for (uint8_t which : kPlantPasses) {
      std::vector<float> logits = normal(n, e.rng, 6.0f);
      for (int64_t i = 2; i < n; i += 4) logits[size_t(i)] = edges[size_t(i / 4) % std::size(edges)];
      if (which) plant_specials(e, logits, 1, 4, which);
      for (float temp : {0.0f, 1.0f, 2.0f, 0.7f}) {  // 0: untempered
        const bool tempered = temp != 0.0f;
        std::vector<float> want(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) {
          const float z = tempered ? logits[size_t(i)] / temp : logits[size_t(i)];
          want[size_t(i)] = std::sqrt(z > 20.0f ? z : float(std::log1p(std::exp(double(z)))));
        }
        light_case(e, shape("n specials temp*10", {n, which, int64_t(temp * 10)}), want,
                   [&](float* out) { router_scores_ref(logits.data(), n, tempered, temp, out); });
      }
    }
}

void gen_router_select(Env& e) {
  light_inputs(e);
  for (int64_t n : {1, 3, 16, 257})
    for (int pass = 0; pass < 3; ++pass) {  // 0 no bias, 1 coarse values (ties), 2 +-inf scores, subnormals, -0
      std::vector<float> score(static_cast<size_t>(n)), bias(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        score[size_t(i)] = float(e.rng() % 8) * 0.25f;
        bias[size_t(i)] = pass == 0 ? 0.0f : float(int(e.rng() % 5) - 2) * 0.25f;
      }
      if (pass == 2) plant_specials(e, score, 1, 3, kSpecialInf | kSpecialSubnormal);
      std::vector<float> biased(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) biased[size_t(i)] = score[size_t(i)] + bias[size_t(i)];
      const std::vector<int64_t> sorted = stable_descending(biased);
      for (int64_t k : {int64_t(1), std::min<int64_t>(n, 6), n})
        light_case(e, shape("n k pass", {n, k, pass}), first_k(sorted, k), [&](float* out) {
          std::vector<float> scratch(static_cast<size_t>(n));
          std::vector<int32_t> order(static_cast<size_t>(n)), experts(size_t(k + kGuards), -7);
          router_select_ref(score.data(), bias.data(), n, k, scratch.data(), order.data(), experts.data());
          index_outputs(experts, k, out);
        });
    }
}

void gen_router_weights(Env& e) {
  light_inputs(e);
  std::uniform_real_distribution<float> u(0.01f, 3.0f);
  for (int64_t k : {1, 2, 6, 8})
    for (uint8_t which : kPlantPasses) {
      std::vector<float> score(64);
      for (size_t i = 0; i < score.size(); ++i) score[i] = i % 3 == 1 ? 0x1p-24f : u(e.rng);  // lost by an fp32 sum
      std::vector<int32_t> experts(64);
      std::iota(experts.begin(), experts.end(), 0);
      std::shuffle(experts.begin(), experts.end(), e.rng);
      experts.resize(size_t(k));
      if (which) {  // into the chosen scores, from the middle one
        std::vector<float> chosen;
        for (int32_t x : experts) chosen.push_back(score[size_t(x)]);
        plant_specials(e, chosen, k / 2, 2, which);
        for (int64_t j = 0; j < k; ++j) score[size_t(experts[size_t(j)])] = chosen[size_t(j)];
      }
      for (bool renorm : {false, true})
        for (float eps : {0.0f, 1e-20f})
          for (float scale : {1.0f, 2.5f}) {
            double sum = 0.0;
            for (int32_t x : experts) sum += score[size_t(x)];
            const float den = float(sum) + eps;
            std::vector<float> want;
            for (int32_t x : experts) want.push_back((renorm ? score[size_t(x)] / den : score[size_t(x)]) * scale);
            light_case(e, shape("k specials renorm eps>0 scale*2", {k, which, renorm, eps > 0, int64_t(scale * 2)}),
                       want, [&](float* out) {
                         router_weights_ref(score.data(), experts.data(), k, renorm, eps, scale, out);
                       });
          }
    }
}

// attention.md §4.2 for one channel: slot s's score sc[s], value kv[s].
float pool_formula(const std::vector<float>& kv, const std::vector<float>& sc) {
  float m = -kInff;
  for (float v : sc) m = v > m ? v : m;  // a NaN never wins
  std::vector<double> ex;
  for (float v : sc) ex.push_back(v == -kInff ? 0.0 : std::exp(double(v) - double(m)));
  const double den = std::accumulate(ex.begin(), ex.end(), 0.0);
  double z = 0.0;
  for (size_t s = 0; s < kv.size(); ++s) z += double(kv[s] * float(ex[s] / den));
  return float(z);
}

void gen_compressor_pool(Env& e) {
  light_inputs(e);
  for (int64_t slots : {1, 3, 8, 128})
    for (int64_t width : {1, 5, 64})
      for (int pass = 0; pass < 2; ++pass) {  // 1: columns of every score -inf, a NaN score, a +inf score
        const int64_t stride = width + 3;  // rows longer than width, their tails NaN: read width only
        std::vector<float> kv = normal(slots * stride, e.rng, 2.0f), sc = normal(slots * stride, e.rng, 3.0f);
        auto at = [&](std::vector<float>& v, int64_t s, int64_t c) -> float& { return v[size_t(s * stride + c)]; };
        for (int64_t s = 0; s < slots; ++s)
          for (int64_t c = 0; c < stride; ++c) {
            if (c >= width) at(kv, s, c) = at(sc, s, c) = kNaNf;
            else if (slots > 2 && s == 1 && c % 2 == 0) at(sc, s, c) = -kInff;  // an absent slot
            else if (pass && c % 4 == 1) at(sc, s, c) = e.covers(kSpecialInf) ? -kInff : -1e30f;
            if (c < width && pass && e.covers(kSpecialSubnormal) && (s + c) % 7 == 0) at(kv, s, c) = 1e-40f;
          }
        if (pass && width > 2 && e.covers(kSpecialNaN)) at(sc, 0, 2) = kNaNf;
        if (pass && width > 3 && e.covers(kSpecialInf)) at(sc, slots - 1, 3) = kInff;
        std::vector<float> want(static_cast<size_t>(width));
        for (int64_t c = 0; c < width; ++c) {
          std::vector<float> kc, scc;
          for (int64_t s = 0; s < slots; ++s) {
            kc.push_back(at(kv, s, c));
            scc.push_back(at(sc, s, c));
          }
          want[size_t(c)] = pool_formula(kc, scc);
        }
        std::vector<const float*> kv_rows, sc_rows;
        for (int64_t s = 0; s < slots; ++s) {
          kv_rows.push_back(&at(kv, s, 0));
          sc_rows.push_back(&at(sc, s, 0));
        }
        light_case(e, shape("slots width pass", {slots, width, pass}), want, [&](float* z) {
          std::vector<double> scratch(static_cast<size_t>(slots));
          compressor_pool_ref(kv_rows.data(), sc_rows.data(), slots, width, scratch.data(), z);
        });
      }
}

// Outputs: the stream, then the gate. Passes: plain; qk zero (dot 0: the gate at the floor); the
// special values in the stream; a triple product whose left-to-right order (h * qk first)
// overflows where h * (qk * key) would not: the gate 1, not about 0.65.
void gen_engram_update(Env& e) {
  light_inputs(e);
  const float eps = 1e-6f;
  for (int64_t d : {1, 7, 64, 257})
    for (int pass = 0; pass < 6; ++pass) {
      std::vector<float> h = normal(d, e.rng, 1.0f, true), key = normal(d, e.rng), qk = normal(d, e.rng),
                         value = normal(d, e.rng);
      if (pass == 1) std::fill(qk.begin(), qk.end(), 0.0f);
      if (pass >= 2 && pass < 5) plant_specials(e, h, d / 2, 7, kPlantPasses[pass - 1]);
      if (pass == 5) {
        h[0] = 1.5f * 0x1p60f;
        qk[0] = 1.5f * 0x1p68f;
        key[0] = 0x1p-70f;
      }
      const float rho = rms_formula(h.data(), d, eps) * rms_formula(key.data(), d, eps);
      double acc = 0.0;
      for (int64_t j = 0; j < d; ++j) acc += double(h[size_t(j)] * qk[size_t(j)] * key[size_t(j)]);
      const float dot = float(acc) * rho * float(1.0 / std::sqrt(double(d)));
      const float gate =
          sigmoid_formula(std::copysign(float(std::sqrt(double(std::max(std::fabs(dot), 1e-6f)))), dot));
      for (bool round : {false, true}) {
        std::vector<float> want;
        for (int64_t j = 0; j < d; ++j) want.push_back(bf16_if(round, h[size_t(j)] + gate * value[size_t(j)]));
        want.push_back(gate);
        light_case(e, shape("d pass round", {d, pass, round}), want, [&](float* out) {
          std::copy(h.begin(), h.end(), out);
          out[d] = engram_update_ref(out, key.data(), qk.data(), value.data(), d, eps, round);
        });
      }
    }
}

// ----------------------------------------------------------------------------- registry

const GeneratorEntry kLightGenerators[] = {
    {Op::rms_norm, gen_rms_norm},
    {Op::head_rms_norm, gen_head_rms_norm},
    {Op::rope_angles, gen_rope_angles},
    {Op::rope_rotate, gen_rope_rotate},
    {Op::hc_mix_norm, gen_hc_mix_norm},
    {Op::hc_coeffs, gen_hc_coeffs},
    {Op::hc_sinkhorn, gen_hc_sinkhorn},
    {Op::top_k, gen_top_k},
    {Op::router_scores, gen_router_scores},
    {Op::router_select, gen_router_select},
    {Op::router_weights, gen_router_weights},
    {Op::compressor_pool, gen_compressor_pool},
    {Op::engram_update, gen_engram_update},
};

}  // namespace

std::span<const GeneratorEntry> light_generators() { return kLightGenerators; }

}  // namespace deepinfer::kernels::op_registry_test
