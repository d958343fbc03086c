// Sink attention's tile algorithm (attention_cpu.h) written once over a vector width, for
// attention_avx2.cpp and attention_avx512.cpp. Each of them includes this file inside its
// own namespace (avx2 / avx512, within an unnamed namespace), after <immintrin.h> and
// <math.h>, so every instantiation is compiled with that file's ISA flags and has internal
// linkage under a name no other file shares: the linker can never hand a generic or other-ISA
// caller one of these copies (the rule of cpu_isa.h). Hence no include guard and no includes
// here. The tests of either ISA cover this code.
//
// V, the vector type's operations (static, always inlined):
//   F                       the float vector type, kLanes floats (dim is a multiple of 16)
//   zero(), set1(f), load(p), store(p, v), fmadd(a, b, c) = a * b + c, div(a, b)
//   score_dot(q, k, dim)    q . k in fp32: the ISA's own summation order (AVX2 emulates the
//                           AVX-512 order lane for lane, so both select the same keys)
//   score_dot4(q, k, dim, out)  score_dot of the four keys k[0..3] into out, bit for bit

#ifndef DI_ISA_INLINE
#define DI_ISA_INLINE inline __attribute__((always_inline))
#endif

constexpr int64_t kTile = 64;

// Round-to-nearest-even fp32 -> bf16 value (finite inputs: probabilities in [0, 1]).
inline float round_bf16_prob(float f) {
  uint32_t b;
  __builtin_memcpy(&b, &f, 4);
  b += 0x7fffu + ((b >> 16) & 1u);
  b &= 0xffff0000u;
  float r;
  __builtin_memcpy(&r, &b, 4);
  return r;
}

// One head's running state over the tiles (the online softmax of sink_attention_ref).
struct HeadState {
  float m, den;
};

template <class V>
DI_ISA_INLINE void head_begin(HeadState& st, int64_t dim, float* out) {
  st.m = -__builtin_inff();
  st.den = 0.0f;
  for (int64_t c = 0; c < dim; c += V::kLanes) V::store(out + c, V::zero());
}

// The most heads whose state is carried across the tiles together.
constexpr int64_t kHeadGroup = 16;

// Tile [t0, t1) of the keys for nh <= kHeadGroup heads (head h: q + h * dim, out + h * dim,
// st[h]). Each head's arithmetic is the single-head algorithm's, in its order; the loops are
// arranged so that what is reused stays in L1: the scores take four keys at a time against
// every head, the products with V a block of 128 columns of the tile's keys for every head.
template <class V>
DI_ISA_INLINE void heads_tile(HeadState* st, int64_t nh, const float* q, const float* const* keys, int64_t t0,
                              int64_t t1, int64_t dim, float scale, bool round_probs, float* out) {
  using F = typename V::F;
  const float neg_inf = -__builtin_inff();
  const float* vk[kTile];  // the valid keys, in order
  int64_t n = 0;
  for (int64_t j = t0; j < t1; ++j)
    if (keys[j]) vk[n++] = keys[j];
  if (n == 0) return;
  float prob[kHeadGroup][kTile];  // the scores, then the probabilities
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int64_t h = 0; h < nh; ++h) V::score_dot4(q + h * dim, vk + i, dim, prob[h] + i);
  for (; i < n; ++i)
    for (int64_t h = 0; h < nh; ++h) prob[h][i] = V::score_dot(q + h * dim, vk[i], dim);
  float alpha[kHeadGroup];
  int64_t live[kHeadGroup];  // heads with a finite tile maximum
  int64_t n_live = 0;
  for (int64_t h = 0; h < nh; ++h) {
    float* p = prob[h];
    float tile_max = neg_inf;
    for (i = 0; i < n; ++i) {
      p[i] *= scale;
      if (p[i] > tile_max) tile_max = p[i];
    }
    if (tile_max == neg_inf) continue;
    const float m_new = st[h].m > tile_max ? st[h].m : tile_max;
    alpha[n_live] = st[h].m == neg_inf ? 0.0f : expf(st[h].m - m_new);
    float psum = 0.0f;
    for (i = 0; i < n; ++i) {
      const float e = expf(p[i] - m_new);
      psum += e;
      p[i] = round_probs ? round_bf16_prob(e) : e;
    }
    st[h].den = st[h].den * alpha[n_live] + psum;
    st[h].m = m_new;
    live[n_live++] = h;
  }
  // out = out * alpha + sum_i p_i v_i: per column the tile sum starts at 0 and takes the keys
  // in order, as in the referee; 8 vectors of columns stay in registers across the keys.
  constexpr int64_t kBlock = 8 * V::kLanes;
  int64_t c0 = 0;
  for (; c0 + kBlock <= dim; c0 += kBlock) {
    int64_t l = 0;
    for (; l + 2 <= n_live; l += 2) {  // two heads share each key's loads (16 chains)
      const float* p0 = prob[live[l]];
      const float* p1 = prob[live[l + 1]];
      F acc0[8], acc1[8];
      for (int v = 0; v < 8; ++v) acc0[v] = acc1[v] = V::zero();
      for (i = 0; i < n; ++i) {
        const F pv0 = V::set1(p0[i]), pv1 = V::set1(p1[i]);
        for (int v = 0; v < 8; ++v) {
          const F kv = V::load(vk[i] + c0 + V::kLanes * v);
          acc0[v] = V::fmadd(pv0, kv, acc0[v]);
          acc1[v] = V::fmadd(pv1, kv, acc1[v]);
        }
      }
      float* o0 = out + live[l] * dim + c0;
      float* o1 = out + live[l + 1] * dim + c0;
      const F va0 = V::set1(alpha[l]), va1 = V::set1(alpha[l + 1]);
      for (int v = 0; v < 8; ++v) {
        V::store(o0 + V::kLanes * v, V::fmadd(V::load(o0 + V::kLanes * v), va0, acc0[v]));
        V::store(o1 + V::kLanes * v, V::fmadd(V::load(o1 + V::kLanes * v), va1, acc1[v]));
      }
    }
    for (; l < n_live; ++l) {
      const float* p = prob[live[l]];
      float* o = out + live[l] * dim + c0;
      F acc[8];
      for (int v = 0; v < 8; ++v) acc[v] = V::zero();
      for (i = 0; i < n; ++i) {
        const F pv = V::set1(p[i]);
        for (int v = 0; v < 8; ++v) acc[v] = V::fmadd(pv, V::load(vk[i] + c0 + V::kLanes * v), acc[v]);
      }
      const F va = V::set1(alpha[l]);
      for (int v = 0; v < 8; ++v) V::store(o + V::kLanes * v, V::fmadd(V::load(o + V::kLanes * v), va, acc[v]));
    }
  }
  for (int64_t c = c0; c < dim; c += V::kLanes)  // dim not a multiple of kBlock: a vector at a time
    for (int64_t l = 0; l < n_live; ++l) {
      const float* p = prob[live[l]];
      float* o = out + live[l] * dim + c;
      F acc = V::zero();
      for (i = 0; i < n; ++i) acc = V::fmadd(V::set1(p[i]), V::load(vk[i] + c), acc);
      V::store(o, V::fmadd(V::load(o), V::set1(alpha[l]), acc));
    }
}

template <class V>
DI_ISA_INLINE void head_end(const HeadState& st, int64_t dim, float sink, float* out) {
  if (st.m == -__builtin_inff()) return;
  const float den = st.den + expf(sink - st.m);
  const typename V::F vd = V::set1(den);
  for (int64_t c = 0; c < dim; c += V::kLanes) V::store(out + c, V::div(V::load(out + c), vd));
}

template <class V>
DI_ISA_INLINE void sink_attention_one(const float* q, const float* const* keys, int64_t n_keys, int64_t dim,
                                      float scale, float sink, bool round_probs, float* out) {
  HeadState st;
  head_begin<V>(st, dim, out);
  for (int64_t t0 = 0; t0 < n_keys; t0 += kTile)
    heads_tile<V>(&st, 1, q, keys, t0, n_keys < t0 + kTile ? n_keys : t0 + kTile, dim, scale, round_probs, out);
  head_end<V>(st, dim, sink, out);
}

template <class V>
DI_ISA_INLINE void sink_attention_heads(const float* q, int64_t n_heads, const float* const* keys, int64_t n_keys,
                                        int64_t dim, float scale, const float* sinks, bool round_probs, float* out) {
  for (int64_t h0 = 0; h0 < n_heads; h0 += kHeadGroup) {
    const int64_t nh = n_heads - h0 < kHeadGroup ? n_heads - h0 : kHeadGroup;
    HeadState st[kHeadGroup];
    for (int64_t h = 0; h < nh; ++h) head_begin<V>(st[h], dim, out + (h0 + h) * dim);
    for (int64_t t0 = 0; t0 < n_keys; t0 += kTile) {
      const int64_t t1 = n_keys < t0 + kTile ? n_keys : t0 + kTile;
      heads_tile<V>(st, nh, q + h0 * dim, keys, t0, t1, dim, scale, round_probs, out + h0 * dim);
    }
    for (int64_t h = 0; h < nh; ++h) head_end<V>(st[h], dim, sinks[h0 + h], out + (h0 + h) * dim);
  }
}

// q . k in the AVX-512 kernel's order over vectors of 8 (V8 as lane8_kernels_impl.h lists it:
// zero, load, fmadd, add, hsum), for the ISAs that reproduce its scores (AVX2, NEON): its two
// 16-lane accumulators over 32 columns are g0 g1 and g2 g3 here (a dim that ends on 16 more
// columns feeds g0 g1 alone), and its reduction adds the upper 8 lanes to the lower 8, then
// sums them as hsum does.
template <class V8>
DI_ISA_INLINE float score_dot_avx512_order(const float* q, const float* k, int64_t dim) {
  typename V8::F g[4] = {V8::zero(), V8::zero(), V8::zero(), V8::zero()};
  int64_t c = 0;
  for (; c + 32 <= dim; c += 32)
    for (int v = 0; v < 4; ++v) g[v] = V8::fmadd(V8::load(q + c + 8 * v), V8::load(k + c + 8 * v), g[v]);
  for (; c < dim; c += 16)
    for (int v = 0; v < 2; ++v) g[v] = V8::fmadd(V8::load(q + c + 8 * v), V8::load(k + c + 8 * v), g[v]);
  return V8::hsum(V8::add(V8::add(g[1], g[3]), V8::add(g[0], g[2])));
}

// V's operations with the scores in that order, one key at a time (an 8-lane ISA has no room
// for four keys' accumulators): the attention of the ISAs that reproduce the AVX-512 kernel.
template <class V, class V8>
struct Avx512OrderOps : V {
  static DI_ISA_INLINE float score_dot(const float* q, const float* k, int64_t dim) {
    return score_dot_avx512_order<V8>(q, k, dim);
  }
  static DI_ISA_INLINE void score_dot4(const float* q, const float* const* k, int64_t dim, float* out) {
    for (int j = 0; j < 4; ++j) out[j] = score_dot(q, k[j], dim);
  }
};
