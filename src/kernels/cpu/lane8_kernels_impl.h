// The kernels whose arithmetic is defined on vectors of 8 floats (the AVX2 kernels' bits, which
// the NEON kernels reproduce lane for lane), written once over an 8-float vector type: the
// prefill microkernel, the indexer's dots (double and exact fp32), the double dot product and
// FP4 fp32 order. cpu_kernels_avx2.cpp instantiates them over __m256 (avx2_ops_impl.h),
// cpu_kernels_neon.cpp over pairs of float32x4_t (neon_ops_impl.h: Lane8), each inside its own
// namespace within an unnamed namespace and after cpu_kernels_isa_impl.h (VecBits and the exact
// dots' tests) and isa_common_impl.h: every copy is compiled with that file's flags and has
// internal linkage (the rule of cpu_isa.h). Hence no include guard and no includes here. The
// weight decoders, the AVX2 GEMV and the AVX-512 mode's kernels stay in the ISA files.
//
// V, the 8-float vector type's operations (static, always inlined), each lane's arithmetic
// exactly one IEEE operation (fmadd fused), so every ISA gives the same bits:
//   F, I, D                 8 floats; their bits as int32 lanes; 4 doubles
//   zero(), set1(f), load(p), store(p, v) (unaligned), fmadd(a, b, c) = a * b + c
//   hsum(v)                 ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))
//   deinterleave(a, b, e, o)  e = the even lanes of a then of b, o the odd ones
//   bits(F), set1_i, and_i, or_i, shr_i32<n>, max_i32, min_i32, eq_i32 (all ones where equal),
//   store_i(int32_t* p, I) (aligned)
//   zero_d(), set1_d, load_d (unaligned), store_d (aligned), add_d, fmadd_d(a, b, c) = a * b + c,
//   widen4_d(const float* p) (4 floats as doubles), sum_d(v) = (l0 + l1) + (l2 + l3)
//   prefetch(p)             a hint to load p's line into L1

#ifndef DI_ISA_INLINE
#define DI_ISA_INLINE inline __attribute__((always_inline))
#endif

// ------------------------------------------------------------------------------ prefill

// MR activation rows (stride xs) times NR decoded weight rows (stride ws) over Kp columns:
// every output one 8-lane FMA chain over the columns in order, then hsum (the per-output
// sequence of the GEMV, so any M gives the same bits).
template <class V, int MR, int NR>
void micro_f32(const float* x, int64_t xs, const float* w, int64_t ws, int64_t Kp, float* out) {
  using F = typename V::F;
  F acc[MR][NR];
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NR; ++r) acc[m][r] = V::zero();
  for (int64_t k = 0; k < Kp; k += 8) {
    F xv[MR];
    for (int m = 0; m < MR; ++m) xv[m] = V::load(x + m * xs + k);
    for (int r = 0; r < NR; ++r) {
      const F wv = V::load(w + r * ws + k);
      for (int m = 0; m < MR; ++m) acc[m][r] = V::fmadd(xv[m], wv, acc[m][r]);
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NR; ++r) out[m * NR + r] = V::hsum(acc[m][r]);
}

// micro_f32 as f32_tiles' kernel (isa_common_impl.h).
template <class V, int NR>
struct MicroF32 {
  template <int R>
  DI_ISA_INLINE void operator()(const float* x, int64_t xs, const float* w, int64_t ws, int64_t Kp, float* out) const {
    micro_f32<V, R, NR>(x, xs, w, ws, Kp, out);
  }
};

// Rows [m0, m1) of xf (stride xs, a multiple of 32) into FP4 fp32 order, in place: each 16
// columns become their 8 even ones, then their 8 odd ones (the vectors the FP4 decoders give).
template <class V>
void fp4_f32_order(float* xf, int64_t m0, int64_t m1, int64_t xs) {
  for (int64_t m = m0; m < m1; ++m)
    for (int64_t k = 0; k < xs; k += 16) {
      float* p = xf + m * xs + k;
      typename V::F even, odd;
      V::deinterleave(V::load(p), V::load(p + 8), even, odd);
      V::store(p, even);
      V::store(p + 8, odd);
    }
}

// ------------------------------------------------------------------------------ indexer dots

// Every head against two keys at a time, 16 heads in four vectors of 4 doubles: each dot the
// in-order double sum (an FMA of two floats' exact product is the referee's multiply, then add).
template <class V>
void index_dots(const double* qT, int64_t n_heads, int64_t dim, const float* const* keys, int64_t n_keys,
                double* out) {
  using D = typename V::D;
  constexpr int kKeys = 2;
  for (int64_t h0 = 0; h0 < n_heads; h0 += 16) {
    const int64_t nh = min64(16, n_heads - h0);
    for (int64_t s0 = 0; s0 < n_keys; s0 += kKeys) {
      const int64_t nk = min64(kKeys, n_keys - s0);
      D acc[kKeys][4];
      for (int j = 0; j < kKeys; ++j)
        for (int v = 0; v < 4; ++v) acc[j][v] = V::zero_d();
      alignas(64) double qbuf[16] = {};
      for (int64_t c = 0; c < dim; ++c) {
        const double* q = qT + c * n_heads + h0;
        if (nh < 16) {  // a partial head block: lanes beyond n_heads read zeros
          for (int64_t h = 0; h < nh; ++h) qbuf[h] = q[h];
          q = qbuf;
        }
        D qv[4];
        for (int v = 0; v < 4; ++v) qv[v] = V::load_d(q + 4 * v);
        for (int j = 0; j < kKeys; ++j) {
          const D kv = V::set1_d(j < nk ? double(keys[s0 + j][c]) : 0.0);
          for (int v = 0; v < 4; ++v) acc[j][v] = V::fmadd_d(qv[v], kv, acc[j][v]);
        }
      }
      for (int64_t j = 0; j < nk; ++j) {
        alignas(64) double lanes[16];
        for (int v = 0; v < 4; ++v) V::store_d(lanes + 4 * v, acc[j][v]);
        for (int64_t h = 0; h < nh; ++h) out[(s0 + j) * n_heads + h0 + h] = lanes[h];
      }
    }
  }
}

// sum a[i] * b[i] in double: 4 accumulators of 4 lanes of exact products over 16 columns a
// step, then (acc0 + acc1) + (acc2 + acc3), its lanes as sum_d, and a scalar tail in order.
template <class V>
double dot_f64(const float* a, const float* b, int64_t n) {
  using D = typename V::D;
  D acc[4] = {V::zero_d(), V::zero_d(), V::zero_d(), V::zero_d()};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int u = 0; u < 4; ++u) acc[u] = V::fmadd_d(V::widen4_d(a + i + 4 * u), V::widen4_d(b + i + 4 * u), acc[u]);
  double total = V::sum_d(V::add_d(V::add_d(acc[0], acc[1]), V::add_d(acc[2], acc[3])));
  for (; i < n; ++i) total += double(a[i]) * double(b[i]);
  return total;
}

// ------------------------------------------------------------------------------ exact indexer dots

// The exponents of 8 values at a time folded into running lanes (VecBits' inputs).
template <class V>
struct VecBitsLanes {
  using I = typename V::I;
  I bits_or = V::set1_i(0);    // mantissa bits below the top one: refused
  I e_max = V::set1_i(0);      // top exponent (zeros have 0: no effect)
  I e_min = V::set1_i(255);    // least exponent of nonzero values
  DI_ISA_INLINE void add(I b) {
    bits_or = V::or_i(bits_or, b);
    const I a = V::and_i(b, V::set1_i(0x7fffffff));
    const I e = V::template shr_i32<23>(a);
    e_max = V::max_i32(e_max, e);
    const I zero = V::eq_i32(a, V::set1_i(0));
    e_min = V::min_i32(e_min, V::or_i(e, V::and_i(zero, V::set1_i(255))));
  }
  // One vector of n values (a query head or a key); lanes of columns beyond n read zeros.
  DI_ISA_INLINE void add(const float* v, int64_t n) {
    int64_t c = 0;
    for (; c + 8 <= n; c += 8) add(V::bits(V::load(v + c)));
    if (c < n) {
      alignas(64) float tail[8] = {};
      for (int64_t i = c; i < n; ++i) tail[i - c] = v[i];
      add(V::bits(V::load(tail)));
    }
  }
  DI_ISA_INLINE VecBits get() const {
    alignas(64) int32_t o[8], hi[8], lo[8];
    V::store_i(o, bits_or);
    V::store_i(hi, e_max);
    V::store_i(lo, e_min);
    uint32_t all = 0, top = 0, least = 255;
    for (int i = 0; i < 8; ++i) {
      all |= uint32_t(o[i]);
      top = uint32_t(hi[i]) > top ? uint32_t(hi[i]) : top;
      least = uint32_t(lo[i]) < least ? uint32_t(lo[i]) : least;
    }
    VecBits v;
    v.e_max = int(top);
    v.any = top > 0 || least < 255;
    if (!v.any) return v;
    v.low_min = int(least) - 1;
    v.ok = (all & 0x3fffff) == 0 && least >= 1 && top <= 254;
    return v;
  }
};

// Heads in groups of 16 (two vectors): data [dim, heads_pad] as fp32.
template <class V>
void index_query_exact(const float* q, int64_t n_heads, int64_t dim, uint32_t* data, IndexQueryExact* info) {
  *info = IndexQueryExact{};
  if (dim > kIndexExactMaxDim || n_heads <= 0 || dim <= 0) return;
  const int64_t heads_pad = round_up(n_heads, 16);
  float* qT = reinterpret_cast<float*>(data);
  info->ok = true;
  for (int64_t h = 0; h < heads_pad; ++h) {
    if (h >= n_heads) {
      for (int64_t c = 0; c < dim; ++c) qT[c * heads_pad + h] = 0.0f;
      continue;
    }
    VecBitsLanes<V> lanes;
    lanes.add(q + h * dim, dim);
    for (int64_t c = 0; c < dim; ++c) qT[c * heads_pad + h] = q[h * dim + c];
    index_query_add(*info, lanes.get());
  }
  info->data = data;
  info->heads_pad = heads_pad;
  info->vectors = 2;
}

// Every head against four keys at a time in fp32 FMAs (8 chains: 2 head vectors x 4 keys):
// exact sums for the keys index_key_exact accepts, so their order is free.
template <class V>
void index_dots_exact(const IndexQueryExact& q, int64_t n_heads, int64_t dim, const float* const* keys,
                      int64_t n_keys, double* out, uint8_t* exact) {
  using F = typename V::F;
  if (!q.data || dim > kIndexExactMaxDim) {
    for (int64_t s = 0; s < n_keys; ++s) exact[s] = 0;
    return;
  }
  constexpr int kKeys = 4;
  const int lg = ceil_log2(dim);
  const float* qT = reinterpret_cast<const float*>(q.data);
  static const float zeros[kIndexExactMaxDim] = {};
  for (int64_t s0 = 0; s0 < n_keys; s0 += kKeys) {
    const int64_t nk = min64(kKeys, n_keys - s0);
    // The next group's rows, while this one computes (a decode step finds them out of cache).
    for (int64_t j = s0 + kKeys; j < min64(s0 + 2 * kKeys, n_keys); ++j)
      for (int64_t c = 0; c < dim; c += 16) V::prefetch(keys[j] + c);
    const float* k[kKeys];
    for (int j = 0; j < kKeys; ++j) {
      k[j] = j < nk ? keys[s0 + j] : zeros;
      if (j >= nk) continue;
      VecBitsLanes<V> lanes;
      lanes.add(k[j], dim);
      exact[s0 + j] = uint8_t(index_key_exact(q, lanes.get(), lg));
    }
    for (int64_t h0 = 0; h0 < n_heads; h0 += 16) {
      F acc[kKeys][2];
      for (int j = 0; j < kKeys; ++j) acc[j][0] = acc[j][1] = V::zero();
      const float* qc = qT + h0;
      for (int64_t c = 0; c < dim; ++c, qc += q.heads_pad) {
        const F q0 = V::load(qc), q1 = V::load(qc + 8);
        for (int j = 0; j < kKeys; ++j) {
          const F kv = V::set1(k[j][c]);
          acc[j][0] = V::fmadd(q0, kv, acc[j][0]);
          acc[j][1] = V::fmadd(q1, kv, acc[j][1]);
        }
      }
      const int64_t nh = min64(16, n_heads - h0);
      for (int64_t j = 0; j < nk; ++j) {
        alignas(64) float lanes[16];
        V::store(lanes, acc[j][0]);
        V::store(lanes + 8, acc[j][1]);
        for (int64_t h = 0; h < nh; ++h) out[(s0 + j) * n_heads + h0 + h] = double(lanes[h]);
      }
    }
  }
}
