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

// Tile [t0, t1) of the keys for one head.
template <class V>
DI_ISA_INLINE void head_tile(HeadState& st, const float* q, const float* const* keys, int64_t t0, int64_t t1,
                             int64_t dim, float scale, bool round_probs, float* out) {
  using F = typename V::F;
  const float neg_inf = -__builtin_inff();
  float score[kTile];
  float tile_max = neg_inf;
  for (int64_t j = t0; j < t1; ++j) {
    if (!keys[j]) continue;
    score[j - t0] = V::score_dot(q, keys[j], dim) * scale;
    if (score[j - t0] > tile_max) tile_max = score[j - t0];
  }
  if (tile_max == neg_inf) return;
  const float m_new = st.m > tile_max ? st.m : tile_max;
  const float alpha = st.m == neg_inf ? 0.0f : expf(st.m - m_new);
  float psum = 0.0f;
  float prob[kTile];  // of the valid keys, in order
  const float* vkey[kTile];
  int64_t nv = 0;
  for (int64_t j = t0; j < t1; ++j) {
    if (!keys[j]) continue;
    const float p = expf(score[j - t0] - m_new);
    psum += p;
    prob[nv] = round_probs ? round_bf16_prob(p) : p;
    vkey[nv++] = keys[j];
  }
  st.den = st.den * alpha + psum;
  // out = out * alpha + sum_j p_j v_j: per column the tile sum starts at 0 and takes the keys
  // in order, as in the referee; 8 vectors of columns stay in registers across the keys.
  constexpr int64_t kBlock = 8 * V::kLanes;
  const F va = V::set1(alpha);
  int64_t c0 = 0;
  for (; c0 + kBlock <= dim; c0 += kBlock) {
    F acc[8];
    for (int v = 0; v < 8; ++v) acc[v] = V::zero();
    for (int64_t i = 0; i < nv; ++i) {
      const F pv = V::set1(prob[i]);
      for (int v = 0; v < 8; ++v) acc[v] = V::fmadd(pv, V::load(vkey[i] + c0 + V::kLanes * v), acc[v]);
    }
    for (int v = 0; v < 8; ++v)
      V::store(out + c0 + V::kLanes * v, V::fmadd(V::load(out + c0 + V::kLanes * v), va, acc[v]));
  }
  for (int64_t c = c0; c < dim; c += V::kLanes) {  // dim not a multiple of kBlock: a vector at a time
    F acc = V::zero();
    for (int64_t i = 0; i < nv; ++i) acc = V::fmadd(V::set1(prob[i]), V::load(vkey[i] + c), acc);
    V::store(out + c, V::fmadd(V::load(out + c), va, acc));
  }
  st.m = m_new;
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
    head_tile<V>(st, q, keys, t0, n_keys < t0 + kTile ? n_keys : t0 + kTile, dim, scale, round_probs, out);
  head_end<V>(st, dim, sink, out);
}

template <class V>
DI_ISA_INLINE void sink_attention_heads(const float* q, int64_t n_heads, const float* const* keys, int64_t n_keys,
                                        int64_t dim, float scale, const float* sinks, bool round_probs, float* out) {
  constexpr int64_t kGroup = 16;  // heads whose state is carried across the tiles together
  for (int64_t h0 = 0; h0 < n_heads; h0 += kGroup) {
    const int64_t h1 = n_heads < h0 + kGroup ? n_heads : h0 + kGroup;
    HeadState st[kGroup];
    for (int64_t h = h0; h < h1; ++h) head_begin<V>(st[h - h0], dim, out + h * dim);
    for (int64_t t0 = 0; t0 < n_keys; t0 += kTile) {
      const int64_t t1 = n_keys < t0 + kTile ? n_keys : t0 + kTile;
      for (int64_t h = h0; h < h1; ++h)
        head_tile<V>(st[h - h0], q + h * dim, keys, t0, t1, dim, scale, round_probs, out + h * dim);
    }
    for (int64_t h = h0; h < h1; ++h) head_end<V>(st[h - h0], dim, sinks[h], out + h * dim);
  }
}
