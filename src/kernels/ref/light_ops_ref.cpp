// The light per-token ops (light_ops.h): scalar, the referee and the version the model runs.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "core/formats.h"
#include "kernels/light_ops.h"

namespace deepinfer::kernels {

namespace {

// RMSNorm's r of a row from its double sum of squares: the mean rounded to fp32, + eps in fp32.
float rms_scale(double ss, int64_t n, float eps) { return rsqrt_f(float(ss / double(n)) + eps); }

// r of one row x [n]: fp32 squares, their double sum in index order.
float rms_scale(const float* x, int64_t n, float eps) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i] * x[i]);
  return rms_scale(ss, n, eps);
}

// ss[j] = sum_i double(sq(x[j * n + i])) over i < n for nr <= kRmsLanes rows, sq the fp32
// square (bf16-rounded with kRound). Every row is one in-order chain of double adds; a full
// set of rows advances its chains together, so their adds overlap instead of waiting on each
// other (the same bits as one row after another).
template <bool kRound>
void sums_of_squares(const float* x, int64_t nr, int64_t n, double* ss) {
  auto sq = [](float v) { return kRound ? round_bf16(v * v) : v * v; };
  std::fill_n(ss, nr, 0.0);
  if (nr < kRmsLanes) {
    for (int64_t j = 0; j < nr; ++j)
      for (int64_t i = 0; i < n; ++i) ss[j] += double(sq(x[j * n + i]));
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < kRmsLanes; ++j) ss[j] += double(sq(x[j * n + i]));
}

}  // namespace

void rms_norm_ref(const float* x, const float* w, int64_t n, float eps, bool round, float* y) {
  const float r = rms_scale(x, n, eps);
  for (int64_t i = 0; i < n; ++i) {
    const float t = x[i] * r;
    const float v = w ? w[i] * t : t;
    y[i] = round ? round_bf16(v) : v;
  }
}

void head_rms_norm_ref(float* x, int64_t heads, int64_t n, float eps, bool round) {
  for (int64_t h0 = 0; h0 < heads; h0 += kRmsLanes) {
    const int64_t nh = std::min(kRmsLanes, heads - h0);
    double ss[kRmsLanes];
    if (round)
      sums_of_squares<true>(x + h0 * n, nh, n, ss);
    else
      sums_of_squares<false>(x + h0 * n, nh, n, ss);
    for (int64_t j = 0; j < nh; ++j) {
      float* row = x + (h0 + j) * n;
      if (!round) {
        const float r = rms_scale(ss[j], n, eps);
        for (int64_t i = 0; i < n; ++i) row[i] = row[i] * r;
        continue;
      }
      // The reference's bf16 tensor ops: the mean, mean + eps and its rsqrt each rounded.
      const float mean = round_bf16(float(ss[j] / double(n)));
      const float r = round_bf16(rsqrt_f(round_bf16(mean + eps)));
      for (int64_t i = 0; i < n; ++i) row[i] = round_bf16(row[i] * r);
    }
  }
}

void rope_angles_ref(const float* inv_freq, int64_t half, int64_t pos, float* cos_out, float* sin_out) {
  const float p = float(pos);
  for (int64_t i = 0; i < half; ++i) {
    const float theta = p * inv_freq[i];
    cos_out[i] = float(std::cos(double(theta)));
    sin_out[i] = float(std::sin(double(theta)));
  }
}

void rope_rotate_ref(float* pairs, int64_t half, const float* cos_t, const float* sin_t, bool inverse, bool round) {
  for (int64_t i = 0; i < half; ++i) {
    const float c = cos_t[i], s = inverse ? -sin_t[i] : sin_t[i];
    const float u = pairs[2 * i], v = pairs[2 * i + 1];
    const float a = u * c - v * s, b = u * s + v * c;
    pairs[2 * i] = round ? round_bf16(a) : a;
    pairs[2 * i + 1] = round ? round_bf16(b) : b;
  }
}

void hc_sinkhorn_ref(float* c, int64_t n, int64_t iters, float eps) {
  for (int64_t i = 0; i < n; ++i) {  // row softmax over the destination index
    float* row = c + i * n;
    const float m = *std::max_element(row, row + n);
    double sum = 0.0;
    for (int64_t j = 0; j < n; ++j) sum += std::exp(double(row[j]) - double(m));
    for (int64_t j = 0; j < n; ++j) row[j] = float(std::exp(double(row[j]) - double(m)) / sum) + eps;
  }
  // Divide each line (a column: stride n along it, 1 to the next; a row: the converse) by its
  // double sum, rounded to fp32, + eps.
  auto normalise = [&](int64_t along, int64_t next) {
    for (int64_t a = 0; a < n; ++a) {
      float* line = c + a * next;
      double s = 0.0;
      for (int64_t b = 0; b < n; ++b) s += line[b * along];
      const float d = float(s) + eps;
      for (int64_t b = 0; b < n; ++b) line[b * along] /= d;
    }
  };
  normalise(n, 1);  // the columns
  for (int64_t it = 1; it < iters; ++it) {
    normalise(1, n);  // the rows
    normalise(n, 1);  // the columns
  }
}

void hc_mix_norm_ref(const float* x, int64_t rows, int64_t width, float eps, float* mix, int64_t n_mix) {
  for (int64_t t0 = 0; t0 < rows; t0 += kRmsLanes) {
    const int64_t nt = std::min(kRmsLanes, rows - t0);
    double ss[kRmsLanes];
    sums_of_squares<false>(x + t0 * width, nt, width, ss);
    for (int64_t j = 0; j < nt; ++j) {
      const float r = rms_scale(ss[j], width, eps);
      float* m = mix + (t0 + j) * n_mix;
      for (int64_t k = 0; k < n_mix; ++k) m[k] *= r;
    }
  }
}

void hc_coeffs_ref(const float* mix, const float* base, const float* scale, int64_t hc, float eps,
                   int64_t sinkhorn_iters, float* pre, float* post, float* comb) {
  for (int64_t i = 0; i < hc; ++i) pre[i] = sigmoid_f(mix[i] * scale[0] + base[i]) + eps;
  if (post)
    for (int64_t i = 0; i < hc; ++i) post[i] = 2.0f * sigmoid_f(mix[hc + i] * scale[1] + base[hc + i]);
  if (!comb) return;
  for (int64_t k = 0; k < hc * hc; ++k) comb[k] = mix[2 * hc + k] * scale[2] + base[2 * hc + k];
  hc_sinkhorn_ref(comb, hc, sinkhorn_iters, eps);
}

namespace {

// Each candidate as one 64-bit key, the score's order-preserving bits complemented (larger
// score first) above its index: ascending keys are the comparator's order, a total order
// on integers.
uint64_t rank_key(float score, int64_t i) {
  uint32_t b;
  std::memcpy(&b, &score, 4);
  // Ascending b <-> ascending float (a -0 and +0 fold to one value, as == sees them).
  b = (b & 0x7fffffffu) == 0 ? 0x80000000u : (b & 0x80000000u) ? ~b : b | 0x80000000u;
  return (uint64_t(~b) << 32) | uint64_t(i);
}

// The k smallest of keys[0, n) (distinct) to the front of keys, in no particular order, by
// their score bits a byte at a time from the top: a histogram of the candidates' byte, every
// candidate of a smaller byte taken, those of the boundary byte kept as the next candidates.
// Linear in n, no data-dependent branches in the counting. Returns with keys[0, k) chosen.
void radix_select(uint64_t* keys, int64_t n, int64_t k, uint64_t* tmp) {
  int64_t taken = 0;       // keys[0, taken) chosen
  int64_t lo = 0, hi = n;  // candidates keys[lo, hi), all chosen ones before lo
  for (int shift = 56; shift >= 32 && taken < k; shift -= 8) {
    int64_t count[256] = {};
    for (int64_t i = lo; i < hi; ++i) ++count[(keys[i] >> shift) & 0xff];
    int64_t before = 0, boundary = 0;
    while (taken + before + count[boundary] < k) before += count[boundary++];
    // Partition [lo, hi): bytes below the boundary to the front, the boundary's next, the
    // rest dropped; stable, so the candidates keep their index order.
    int64_t w_low = taken, w_mid = 0;
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t byte = int64_t((keys[i] >> shift) & 0xff);
      if (byte < boundary) keys[w_low++] = keys[i];
      else if (byte == boundary) tmp[w_mid++] = keys[i];
    }
    std::copy_n(tmp, w_mid, keys + w_low);
    taken = w_low;
    lo = w_low;
    hi = w_low + w_mid;
    if (taken + w_mid == k) return;  // the whole boundary byte fits
  }
  // The remaining candidates share all 32 score bits: the lowest indices win, and they are
  // in index order.
}

// keys[0, k) ascending, by LSD radix on bytes: the index bytes a key of n candidates can
// use, then the four score bytes; a byte every key shares is skipped. tmp: k slots.
void radix_sort(uint64_t* keys, int64_t k, int64_t n, uint64_t* tmp) {
  int index_bytes = 1;
  while (index_bytes < 4 && (int64_t(1) << (8 * index_bytes)) < n) ++index_bytes;
  uint64_t* src = keys;
  uint64_t* dst = tmp;
  for (int byte = 0; byte < 8; ++byte) {
    if (byte >= index_bytes && byte < 4) continue;  // index bytes above n's: all zero
    const int shift = 8 * byte;
    int64_t count[256] = {};
    for (int64_t i = 0; i < k; ++i) ++count[(src[i] >> shift) & 0xff];
    if (count[(src[0] >> shift) & 0xff] == k) continue;  // one value: the order stands
    int64_t pos[256];
    int64_t at = 0;
    for (int b = 0; b < 256; ++b) {
      pos[b] = at;
      at += count[b];
    }
    for (int64_t i = 0; i < k; ++i) dst[pos[(src[i] >> shift) & 0xff]++] = src[i];
    std::swap(src, dst);
  }
  if (src != keys) std::copy_n(src, k, keys);
}

}  // namespace

void top_k_ref(const float* score, int64_t n, int64_t k, int64_t* order, int64_t* spare, int64_t* out) {
  if (k <= 0) return;
  bool nan = false;
  for (int64_t i = 0; i < n; ++i) nan |= std::isnan(score[i]);
  if (nan || n >= (int64_t(1) << 32)) {
    std::iota(order, order + n, int64_t(0));
    auto before = [&](int64_t x, int64_t y) { return score[x] != score[y] ? score[x] > score[y] : x < y; };
    if (k < n) std::nth_element(order, order + k, order + n, before);
    std::sort(order, order + k, before);
    std::copy_n(order, k, out);
    return;
  }
  uint64_t* keys = reinterpret_cast<uint64_t*>(order);
  for (int64_t i = 0; i < n; ++i) keys[i] = rank_key(score[i], i);
  uint64_t* tmp = reinterpret_cast<uint64_t*>(spare);
  if (k < n) radix_select(keys, n, k, tmp);
  radix_sort(keys, k, n, tmp);
  for (int64_t i = 0; i < k; ++i) out[i] = int64_t(keys[i] & 0xffffffffu);
}

void router_scores_ref(const float* logits, int64_t n, bool tempered, float temp, float* score) {
  for (int64_t e = 0; e < n; ++e) score[e] = std::sqrt(softplus_f(tempered ? logits[e] / temp : logits[e]));
}

void router_select_ref(const float* score, const float* bias, int64_t n, int64_t k, float* biased, int32_t* order,
                       int32_t* experts) {
  for (int64_t e = 0; e < n; ++e) biased[e] = score[e] + bias[e];
  std::iota(order, order + n, int32_t(0));
  // Ties: the larger value first, then the lower expert id.
  std::partial_sort(order, order + k, order + n, [&](int32_t a, int32_t b) {
    return biased[a] != biased[b] ? biased[a] > biased[b] : a < b;
  });
  std::copy_n(order, k, experts);
}

void router_weights_ref(const float* score, const int32_t* experts, int64_t k, bool renorm, float renorm_eps,
                        float route_scale, float* weights) {
  double sum = 0.0;
  for (int64_t j = 0; j < k; ++j) {
    weights[j] = score[experts[j]];
    sum += score[experts[j]];
  }
  const float den = float(sum) + renorm_eps;
  for (int64_t j = 0; j < k; ++j) {
    float& w = weights[j];
    if (renorm) w = w / den;
    w = w * route_scale;
  }
}

void compressor_pool_ref(const float* const* kv, const float* const* sc, int64_t n_slots, int64_t width, double* e,
                         float* z) {
  constexpr float neg_inf = -std::numeric_limits<float>::infinity();
  for (int64_t c = 0; c < width; ++c) {
    float m = neg_inf;
    for (int64_t s = 0; s < n_slots; ++s) m = std::max(m, sc[s][c]);
    double den = 0.0;
    for (int64_t s = 0; s < n_slots; ++s) {
      e[s] = sc[s][c] == neg_inf ? 0.0 : std::exp(double(sc[s][c]) - double(m));
      den += e[s];
    }
    double acc = 0.0;
    for (int64_t s = 0; s < n_slots; ++s) {
      const float weight = float(e[s] / den);
      acc += double(kv[s][c] * weight);
    }
    z[c] = float(acc);
  }
}

float engram_update_ref(float* h, const float* key, const float* qk, const float* value, int64_t d, float eps,
                        bool round) {
  const float inv_sqrt_dim = float(1.0 / std::sqrt(double(d)));
  // The stream and the key are normalised separately (per stream, not jointly).
  const float rho = rms_scale(h, d, eps) * rms_scale(key, d, eps);
  double acc = 0.0;
  for (int64_t j = 0; j < d; ++j) acc += double(h[j] * qk[j] * key[j]);
  const float dot = float(acc) * rho * inv_sqrt_dim;
  // Signed square root before the sigmoid (the training kernel's gate).
  const float mag = float(std::sqrt(double(std::max(std::fabs(dot), 1e-6f))));
  const float gate = sigmoid_f(std::copysign(mag, dot));
  if (round)
    for (int64_t j = 0; j < d; ++j) h[j] = round_bf16(h[j] + gate * value[j]);
  else
    for (int64_t j = 0; j < d; ++j) h[j] = h[j] + gate * value[j];
  return gate;
}

}  // namespace deepinfer::kernels
