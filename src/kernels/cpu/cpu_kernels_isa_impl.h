// The algorithms cpu_kernels_avx2.cpp and cpu_kernels_avx512.cpp share (act-quant, swiglu
// with its vector exp, the hyper-connection mixes, the indexer's score combination), written
// once over a vector width. Each of those files includes this one inside its own namespace
// (avx2 / avx512, within an unnamed namespace), after <immintrin.h>, <cstdint> and
// cpu_isa.h, so every instantiation is compiled with that file's ISA flags and has internal
// linkage under a name no other file shares: the linker can never hand a generic or other-ISA
// caller one of these copies (the rule of cpu_isa.h). Hence no include guard and no includes
// here. Tests of either ISA cover this code; the tuned inner loops (weight decoders, GEMV /
// GEMM, the indexer dots) stay in the ISA files.
//
// V, the vector type's operations (static, always inlined), each one instruction or a fixed
// short sequence:
//   F, I, D                 kLanes floats; the same bits as int32 lanes; kLanes / 2 doubles
//   kBf16                   the kernels keep bf16 copies of the prepared rows (LinearCall::xb)
//   zero(), set1(f), load(p), store(p, v), add, sub, mul, min(a, b), max(a, b) (a NaN in b
//   comes out, as minps / maxps), abs(v), hmax(v) (largest lane), first(v) (lane 0)
//   bits(F) -> I, from_bits(I) -> F, set1_i, and_i, or_i, andnot_i(a, b) = ~a & b, add_i32,
//   max_i32, shr_i32<n>, shl_i32<n>, where_nan(h, a, b) (a in the lanes where h is NaN, else b)
//   store_bf16_bits(p, I) (kBf16 only: the high halves of the lanes as kLanes uint16 words)
//   D: zero_d(), set1_d, add_d, sub_d, mul_d, div_d, min_d, max_d, fmadd_d(a, b, c) =
//   a * b + c, fnmadd_d(a, b, c) = c - a * b, round_d (to nearest even), store_d (aligned),
//   times_pow2_d(p, n) = p * 2^n for integral n in [-1076, 1024] (gradual underflow, inf on
//   overflow), widen(F, D& lo, D& hi), narrow(D lo, D hi) -> F
//   Part: the lanes of a possibly partial vector; for_parts(n, body) runs body(i, part) over
//   [0, n) a vector at a time; load_part(p, part) reads those lanes (zeros beyond);
//   store_part(p, part, v) writes only them; load_narrowed(const double* p, part) reads
//   those lanes of kLanes doubles as floats (zeros beyond).

#ifndef DI_ISA_INLINE
#define DI_ISA_INLINE inline __attribute__((always_inline))
#endif

// round_bf16 of kLanes floats: nearest even, a NaN made quiet.
template <class V>
DI_ISA_INLINE typename V::F round_bf16_ps(typename V::F h) {
  using I = typename V::I;
  const I b = V::bits(h);
  const I hi16 = V::set1_i(int(0xffff0000u));
  const I lsb = V::and_i(V::template shr_i32<16>(b), V::set1_i(1));
  const I r = V::and_i(V::add_i32(b, V::add_i32(lsb, V::set1_i(0x7fff))), hi16);
  const I q = V::and_i(V::or_i(b, V::set1_i(0x400000)), hi16);
  return V::from_bits(V::where_nan(h, q, r));
}

// ------------------------------------------------------------------------------ act-quant

// One act_quant block of n (a multiple of kLanes) values: q codes (when q_out), x_qdq = q * s
// into qdq_out (and its bf16 bits into qdq_b16 when V::kBf16 and non-null); returns s.
// Bit-identical to act_quant_ref: same amax (NaN ignored as std::max does), the same
// pow2_ceil_scale, x * (1 / s) == x / s for a power of two s (both correctly rounded from
// the same value; s = inf gives 1/s = 0 and the same zeros / NaN), clamp with NaN passing
// through, and e4m3 round-to-nearest-even by adding and subtracting 2^(quantum exp + 23).
// With kSeeNan, *saw_nan is set when the block holds a NaN (or an infinity: x - x is NaN for
// both), which the quantisation carries into x_qdq unchanged (see prep_act_quant).
template <class V, bool kSeeNan = false>
inline float act_quant_block(const float* x, int64_t n, float* q_out, float* qdq_out, uint16_t* qdq_b16,
                             bool* saw_nan = nullptr) {
  using F = typename V::F;
  using I = typename V::I;
  F amax = V::zero();
  F nan_acc = V::zero();
  for (int64_t i = 0; i < n; i += V::kLanes) {
    const F v = V::load(x + i);
    amax = V::max(V::abs(v), amax);  // NaN: keeps amax
    if constexpr (kSeeNan) nan_acc = V::add(nan_acc, V::sub(v, v));
  }
  if constexpr (kSeeNan) {
    float lanes[V::kLanes];
    V::store(lanes, nan_acc);
    for (int j = 0; j < V::kLanes; ++j)
      if (lanes[j] != lanes[j]) *saw_nan = true;
  }
  float am = V::hmax(amax);
  am = am < 1e-4f ? 1e-4f : am;
  const float inv448 = 1.0f / 448.0f;
  const float s = pow2_ceil_scale(am * inv448);
  const float inv = 1.0f / s;
  const F vinv = V::set1(inv), vs = V::set1(s);
  const F lo = V::set1(-448.0f), hi = V::set1(448.0f);
  const I absmask = V::set1_i(0x7fffffff);
  const I min_qe = V::set1_i(127 - 9 + 3);
  for (int64_t i = 0; i < n; i += V::kLanes) {
    F v = V::mul(V::load(x + i), vinv);
    v = V::min(hi, V::max(lo, v));  // NaN in v passes through
    const F a = V::abs(v);
    // quantum exponent: max(e - 3, -9) (biased); C = 2^(quantum + 23)
    const I e = V::max_i32(V::template shr_i32<23>(V::bits(a)), min_qe);
    const F C = V::from_bits(V::template shl_i32<23>(V::add_i32(e, V::set1_i(23 - 3))));
    const F r = V::sub(V::add(a, C), C);
    const F q = V::from_bits(V::or_i(V::bits(r), V::andnot_i(absmask, V::bits(v))));
    // q * s is exact; its bf16 rounding is a truncation (also for NaN / inf, as f32_to_bf16)
    const I qsb = V::bits(V::mul(q, vs));
    if (q_out) V::store(q_out + i, q);
    V::store(qdq_out + i, V::from_bits(V::and_i(qsb, V::set1_i(int(0xffff0000u)))));
    if constexpr (V::kBf16)
      if (qdq_b16) V::store_bf16_bits(qdq_b16 + i, qsb);
  }
  return s;
}

// IsaKernels::prep_act_quant (xb written only when V::kBf16). A row holding a NaN (or an
// infinity) gets a NaN max_scale, which sends it to the portable kernels: act-quant keeps the NaN in x_qdq while the
// block's scale stays finite (amax ignores NaN), and the products of the vector kernels' modes
// need not carry a NaN activation through (AVX-512's FP8 GEMV gave finite values).
template <class V>
void prep_act_quant(const float* x, int64_t K, int64_t block, int64_t m0, int64_t m1, int64_t xs, float* xf,
                    uint16_t* xb, float* max_scale) {
  for (int64_t m = m0; m < m1; ++m) {
    float* df = xf + m * xs;
    uint16_t* db = V::kBf16 ? xb + m * xs : nullptr;
    float smax = 0.0f;
    bool saw_nan = false;
    for (int64_t b0 = 0; b0 < K; b0 += block) {
      const float s =
          act_quant_block<V, true>(x + m * K + b0, block, nullptr, df + b0, V::kBf16 ? db + b0 : nullptr, &saw_nan);
      smax = s > smax ? s : smax;
    }
    if (saw_nan) smax = __builtin_nanf("");  // (an infinity's scale is +inf: out of range already)
    for (int64_t k = K; k < xs; ++k) df[k] = 0.0f;
    if constexpr (V::kBf16)
      for (int64_t k = K; k < xs; ++k) db[k] = 0;
    max_scale[m] = smax;
  }
}

// IsaKernels::act_quant.
template <class V>
void act_quant(float* x, int64_t n, int64_t block, float* q_out, float* s_out) {
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    const float s = act_quant_block<V>(x + b0, block, q_out ? q_out + b0 : nullptr, x + b0, nullptr);
    if (s_out) s_out[b0 / block] = s;
  }
}

// ------------------------------------------------------------------------------ swiglu

// exp in double: n = round(x / ln 2), r = x - n ln 2 in two steps (ln2_hi has trailing zero
// bits, so n * ln2_hi is exact), exp(r) by its Taylor series to r^13 (|r| <= 0.35: the
// remainder is below 1e-17 relative), times 2^n (times_pow2_d: inf on overflow, gradual
// underflow). x is clamped into [-746, 710] first, so +-inf give inf / 0; NaN stays NaN.
// Within a couple of units in the last place of the libm exp.
template <class V>
DI_ISA_INLINE typename V::D exp_pd(typename V::D x) {
  using D = typename V::D;
  x = V::min_d(V::set1_d(710.0), x);  // (710 < x) ? 710 : x keeps a NaN x
  x = V::max_d(V::set1_d(-746.0), x);
  const D n = V::round_d(V::mul_d(x, V::set1_d(1.4426950408889634)));
  D r = V::fnmadd_d(n, V::set1_d(0.693145751953125), x);       // ln2_hi: 15 bits
  r = V::fnmadd_d(n, V::set1_d(1.4286068203094172321e-06), r);  // ln 2 - ln2_hi
  D p = V::set1_d(kExpInvFact[13]);
  for (int k = 12; k >= 0; --k) p = V::fmadd_d(p, r, V::set1_d(kExpInvFact[k]));
  return V::times_pow2_d(p, n);
}

// swiglu_ref in vectors; only exp differs from the referee (see exp_pd).
template <class V>
void swiglu(const float* g, const float* u, int64_t n, float limit, const float* weight, bool round_bf16,
            float* out) {
  using F = typename V::F;
  using D = typename V::D;
  const F L = V::set1(limit), nL = V::set1(-limit);
  const F w = V::set1(weight ? *weight : 1.0f);
  const D one = V::set1_d(1.0);
  V::for_parts(n, [&](int64_t i, typename V::Part part) __attribute__((always_inline)) {
    F gv = V::load_part(g + i, part), uv = V::load_part(u + i, part);
    if (limit > 0.0f) {
      uv = V::min(L, V::max(nL, uv));  // std::clamp: a NaN u stays NaN
      gv = V::min(L, gv);              // std::min(g, L): a NaN g stays NaN
    }
    D g0, g1;
    V::widen(gv, g0, g1);
    const D s0 = V::div_d(g0, V::add_d(one, exp_pd<V>(V::sub_d(V::zero_d(), g0))));
    const D s1 = V::div_d(g1, V::add_d(one, exp_pd<V>(V::sub_d(V::zero_d(), g1))));
    F h = V::mul(V::narrow(s0, s1), uv);
    if (weight) h = V::mul(w, h);
    if (round_bf16) h = round_bf16_ps<V>(h);
    V::store_part(out + i, part, h);
  });
}

// ------------------------------------------------------------------------------ hyper-connections

// hc_expand_ref: the products in fp32, converted and summed in double in stream order, then
// post * o + float(s) (no fma: the build has contraction off).
template <class V>
void hc_expand(const float* o, const float* Rs, const float* comb, const float* post, int64_t hc, int64_t dim,
               bool round, float* Y, int64_t j0, int64_t j1) {
  using F = typename V::F;
  using D = typename V::D;
  for (int64_t k = 0; k < hc; ++k) {
    const F pk = V::set1(post[k]);
    V::for_parts(j1 - j0, [&](int64_t jj, typename V::Part part) __attribute__((always_inline)) {
      const int64_t j = j0 + jj;
      D s0 = V::zero_d(), s1 = V::zero_d();
      for (int64_t i = 0; i < hc; ++i) {
        D p0, p1;
        V::widen(V::mul(V::set1(comb[i * hc + k]), V::load_part(Rs + i * dim + j, part)), p0, p1);
        s0 = V::add_d(s0, p0);
        s1 = V::add_d(s1, p1);
      }
      F y = V::add(V::mul(pk, V::load_part(o + j, part)), V::narrow(s0, s1));
      if (round) y = round_bf16_ps<V>(y);
      V::store_part(Y + k * dim + j, part, y);
    });
  }
}

// hc_collapse_ref: fp32 products, in-order double sums.
template <class V>
void hc_collapse(const float* X, const float* pre, int64_t hc, int64_t dim, bool round, float* out) {
  using F = typename V::F;
  using D = typename V::D;
  V::for_parts(dim, [&](int64_t j, typename V::Part part) __attribute__((always_inline)) {
    D s0 = V::zero_d(), s1 = V::zero_d();
    for (int64_t i = 0; i < hc; ++i) {
      D p0, p1;
      V::widen(V::mul(V::set1(pre[i]), V::load_part(X + i * dim + j, part)), p0, p1);
      s0 = V::add_d(s0, p0);
      s1 = V::add_d(s1, p1);
    }
    F y = V::narrow(s0, s1);
    if (round) y = round_bf16_ps<V>(y);
    V::store_part(out + j, part, y);
  });
}

// ------------------------------------------------------------------------------ indexer scores

// The lightning indexer's scores from the dots of n_keys keys ([key][head] in double), as
// index_scores_ref: score = R(float(sum_h double(R(max(R(float(dot)), 0) * w_h)))), R the
// bf16 rounding when round. The terms are made kLanes heads at a time; the head sum stays one
// in-order chain of double adds per key, so the bits are the referee's, and the chains of
// kCombineKeys keys run side by side (one alone waits on each add's latency).
template <class V>
void index_combine(const double* dots, const float* w, int64_t n_heads, int64_t n_keys, bool round, float* scores) {
  using F = typename V::F;
  using D = typename V::D;
  constexpr int64_t kCombineKeys = 8;
  constexpr int64_t kStride = kIndexCombineMaxHeads + V::kLanes;
  alignas(64) double terms[kCombineKeys * kStride];
  for (int64_t s0 = 0; s0 < n_keys; s0 += kCombineKeys) {
    const int64_t nk = n_keys - s0 < kCombineKeys ? n_keys - s0 : kCombineKeys;
    for (int64_t j = 0; j < nk; ++j) {
      const double* d = dots + (s0 + j) * n_heads;
      double* t = terms + j * kStride;
      V::for_parts(n_heads, [&](int64_t h, typename V::Part part) __attribute__((always_inline)) {
        F f = V::load_narrowed(d + h, part);
        if (round) f = round_bf16_ps<V>(f);
        f = V::max(V::zero(), f);  // std::max(f, 0): a NaN or -0 f stays
        f = V::mul(f, V::load_part(w + h, part));
        if (round) f = round_bf16_ps<V>(f);
        D t0, t1;
        V::widen(f, t0, t1);
        V::store_d(t + h, t0);
        V::store_d(t + h + V::kLanes / 2, t1);
      });
    }
    double total[kCombineKeys] = {};
    if (nk == kCombineKeys) {
      for (int64_t h = 0; h < n_heads; ++h)
        for (int64_t j = 0; j < kCombineKeys; ++j) total[j] += terms[j * kStride + h];
    } else {
      for (int64_t h = 0; h < n_heads; ++h)
        for (int64_t j = 0; j < nk; ++j) total[j] += terms[j * kStride + h];
    }
    for (int64_t j = 0; j < nk; ++j) {
      const float t = float(total[j]);
      scores[s0 + j] = round ? V::first(round_bf16_ps<V>(V::set1(t))) : t;
    }
  }
}

// ------------------------------------------------------------------------------ exact indexer dots

// What index_dots_exact's test needs of one vector (IndexQueryExact): its top exponent, a
// lower bound of its lowest set bit's exponent (the least exponent less one: at most two
// significant bits), whether every value is of the kind the kernels take; any = false for a
// vector with no nonzero value.
struct VecBits {
  bool ok = true, any = false;
  int e_max = 0, low_min = 0;
};

// ceil(log2(n)) for n >= 1.
inline int ceil_log2(int64_t n) {
  int b = 0;
  while ((int64_t(1) << b) < n) ++b;
  return b;
}

// Whether a key's dots with every head of q are exact in fp32 (IndexQueryExact), lg =
// ceil_log2(dim): q's and the key's spans leave room for the sum's bits, the granularity is
// normal and the largest sum finite; a zero vector makes every dot 0.
inline bool index_key_exact(const IndexQueryExact& q, const VecBits& k, int lg) {
  if (!q.ok || !k.ok) return false;
  if (!k.any || !q.any) return true;
  return q.span + (k.e_max - k.low_min) <= 22 - lg && q.low_min + k.low_min >= 128 &&
         q.e_max + k.e_max + 2 + lg <= 382;
}

// Folds one vector's VecBits into q's (its span, top exponent and lowest set bit's).
inline void index_query_add(IndexQueryExact& q, const VecBits& v) {
  if (!v.any) return;
  q.ok = q.ok && v.ok;
  if (!q.any) {
    q.any = true;
    q.span = v.e_max - v.low_min;
    q.e_max = v.e_max;
    q.low_min = v.low_min;
    return;
  }
  q.span = v.e_max - v.low_min > q.span ? v.e_max - v.low_min : q.span;
  q.e_max = v.e_max > q.e_max ? v.e_max : q.e_max;
  q.low_min = v.low_min < q.low_min ? v.low_min : q.low_min;
}

// ------------------------------------------------------------------------------ FMA peak

// The arithmetic peak of the products: kFmaChains independent chains x <- x * m + b of `iters`
// steps in fp32 vectors (the instruction the GEMM microkernels issue), enough chains to cover
// the FMA latency on every port. Chain j starts at x0 + j / 1024 in every lane. Returns the
// lanes' final values summed in double, chain by chain (exact: equal floats), so that nothing
// is elided and a test can recompute it; *macs = the multiply-adds done.
template <class V>
double fma_chains(int64_t iters, float x0, int64_t* macs) {
  using F = typename V::F;
  const F m = V::set1(0.99999994f), b = V::set1(0.25f);
  F x[kFmaChains];
  for (int j = 0; j < kFmaChains; ++j) x[j] = V::set1(x0 + float(j) / 1024.0f);
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < kFmaChains; ++j) x[j] = V::fmadd(x[j], m, b);
  double total = 0;
  alignas(64) float lanes[V::kLanes];
  for (int j = 0; j < kFmaChains; ++j) {
    V::store(lanes, x[j]);
    for (int64_t l = 0; l < V::kLanes; ++l) total += double(lanes[l]);
  }
  *macs = iters * kFmaChains * V::kLanes;
  return total;
}
