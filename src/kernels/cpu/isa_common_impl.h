// What every vector kernel file needs that involves no particular vector type: bit helpers,
// partial vectors through a buffer (BufferedParts), the FP4 weight tables, the activation
// orders that are plain data moves, and the prefill tile loop (decode a tile of weight rows,
// then run register-blocked kernels over every activation row).
// Included by cpu_kernels_avx2.cpp, cpu_kernels_neon.cpp and cpu_kernels_neon_bf16.cpp inside
// their own namespaces (within an unnamed namespace), after <cstring>, <cstdint> and cpu_isa.h,
// so each copy is compiled with that file's ISA flags and has internal linkage (the rule of
// cpu_isa.h). Hence no include guard and no includes here.

#ifndef DI_ISA_INLINE
#define DI_ISA_INLINE inline __attribute__((always_inline))
#endif

inline float f32_of(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t round_up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

constexpr uint32_t kQuietNan = 0x7fc00000u;

// Bytes [p, p + nbytes) into buf, zeros after them (a partial chunk of a weight row).
template <size_t N>
DI_ISA_INLINE const uint8_t* staged(const uint8_t* p, int64_t nbytes, uint8_t (&buf)[N]) {
  std::memset(buf, 0, N);
  if (nbytes > 0) std::memcpy(buf, p, size_t(nbytes));
  return buf;
}

// cpu_kernels_isa_impl.h's partial vectors for a vector type Vec without lane masks (load,
// store, narrow, load_d; kLanes floats, kLanes / 2 doubles in a D): a partial vector goes
// through a zero-padded copy.
template <class Vec>
struct BufferedParts : Vec {
  using F = typename Vec::F;
  using Part = int64_t;  // lanes in use, 1..kLanes
  static constexpr int64_t L = Vec::kLanes;
  template <class Body>
  static DI_ISA_INLINE void for_parts(int64_t n, Body&& body) {
    int64_t i = 0;
    for (; i + L <= n; i += L) body(i, L);
    if (i < n) body(i, n - i);
  }
  static DI_ISA_INLINE F load_part(const float* p, Part nv) {
    if (nv == L) return Vec::load(p);
    alignas(64) float buf[L] = {};
    std::memcpy(buf, p, size_t(nv) * sizeof(float));
    return Vec::load(buf);
  }
  static DI_ISA_INLINE void store_part(float* p, Part nv, F v) {
    if (nv == L) return Vec::store(p, v);
    alignas(64) float buf[L];
    Vec::store(buf, v);
    std::memcpy(p, buf, size_t(nv) * sizeof(float));
  }
  static DI_ISA_INLINE F load_narrowed(const double* p, Part nv) {
    alignas(64) double buf[L] = {};
    if (nv < L) {
      for (int64_t t = 0; t < nv; ++t) buf[t] = p[t];
      p = buf;
    }
    return Vec::narrow(Vec::load_d(p), Vec::load_d(p + L / 2));
  }
};

// ------------------------------------------------------------------------------ FP4 tables
// FP4 weights under a scale byte b, as byte tables for a byte shuffle / table lookup. A code
// times e8m0(b) is exact and has at most two significant bits (a power of two times 0.5 ... 6),
// so its fp32 bits end in 16 zero bits: it is a bf16 value, and its top two bytes, looked up by
// the 4-bit code, rebuild it. Row b holds the low bytes of the 16 codes' bf16, then their high
// bytes. As an fp32 multiplication would give: 2^-128 stays a subnormal, 6 * 2^127 is inf, a
// NaN scale (255) gives the quiet NaN with the code's sign.
struct Fp4Tables {
  alignas(32) uint8_t v[256][32];
};
constexpr uint32_t fp4_scaled_bits(int code, int b) {
  const uint32_t sign = code & 8 ? 0x80000000u : 0u;
  const int i = code & 7;
  if (b == 255) return sign | kQuietNan;
  if (i == 0) return sign;
  // Magnitude i is 0.5 for i = 1, else (1 or 1.5) * 2^(i / 2 - 1): mantissa 1 + half / 2 times
  // 2^e, e the unbiased exponent of the product.
  const int e = (i == 1 ? -1 : i / 2 - 1) + (b - 127);
  const uint32_t half = (i >= 2 && (i & 1)) ? 1u : 0u;
  if (e > 127) return sign | 0x7f800000u;
  if (e >= -126) return sign | uint32_t(e + 127) << 23 | half << 22;
  return sign | (2u + half) << (e - 1 + 149);  // subnormal: (2 + half) * 2^(e - 1), in units of 2^-149
}
constexpr Fp4Tables make_fp4_tables() {
  Fp4Tables t{};
  for (int b = 0; b < 256; ++b)
    for (int code = 0; code < 16; ++code) {
      const uint32_t bits = fp4_scaled_bits(code, b);
      t.v[b][code] = uint8_t(bits >> 16);
      t.v[b][16 + code] = uint8_t(bits >> 24);
    }
  return t;
}
constexpr Fp4Tables kFp4Tables = make_fp4_tables();
static_assert(fp4_scaled_bits(1, 0) == 0x00200000u && fp4_scaled_bits(15, 127) == 0xc0c00000u &&
                  fp4_scaled_bits(7, 254) == 0x7f800000u && fp4_scaled_bits(3, 127) == 0x3fc00000u &&
                  fp4_scaled_bits(5, 0) == 0x00c00000u && fp4_scaled_bits(2, 254) == 0x7f000000u,
              "FP4 table: 0.5 * 2^-127, -6, 6 * 2^127 (inf), 1.5, 3 * 2^-127, 2^127");

// ------------------------------------------------------------------------------ activations

// IsaKernels::prep_float without bf16 copies: the rows, zero from K up to the stride xs.
inline void prep_float(const float* x, int64_t K, int64_t m0, int64_t m1, int64_t xs, float* xf, uint16_t*,
                       uint8_t* bf16_ok) {
  for (int64_t m = m0; m < m1; ++m) {
    std::memcpy(xf + m * xs, x + m * K, size_t(K) * sizeof(float));
    std::memset(xf + m * xs + K, 0, size_t(xs - K) * sizeof(float));
    bf16_ok[m] = 0;  // no bf16 kernels here
  }
}

// FP8 fp32 order (the AVX2 kernels' FP8 decoder): each 32 columns c become [c0 c4 .. c28, c1 c5
// .. c29, c2 .., c3 .. c31]: a transpose of the chunk seen as 8 rows of 4.
inline void fp8_f32_order(float* xf, int64_t m0, int64_t m1, int64_t xs) {
  for (int64_t m = m0; m < m1; ++m)
    for (int64_t k = 0; k < xs; k += 32) {
      float* p = xf + m * xs + k;
      float t[32];
      for (int j = 0; j < 4; ++j)
        for (int i = 0; i < 8; ++i) t[8 * j + i] = p[4 * i + j];
      std::memcpy(p, t, sizeof t);
    }
}

// ------------------------------------------------------------------------------ prefill tiles

// The most weight rows a prefill tile holds.
constexpr int64_t kMaxTileRows = 64;

// Rows per tile: about `bytes` of decoded rows (Kp elements of `elem` bytes each), a multiple
// of NR, at most max_rows (<= kMaxTileRows).
constexpr int64_t tile_rows_for(int64_t Kp, int64_t bytes, int64_t elem, int64_t NR, int64_t max_rows) {
  const int64_t nt = bytes / (Kp * elem) / NR * NR;
  return nt < NR ? NR : nt > max_rows ? max_rows : nt;
}

// kernel.template operator()<R>(args...) with R = mv, for 1 <= mv <= MR.
template <int MR, class Kernel, class... Args>
DI_ISA_INLINE void with_rows(int64_t mv, Kernel& kernel, Args... args) {
  if constexpr (MR > 1)
    if (mv < MR) return with_rows<MR - 1>(mv, kernel, args...);
  kernel.template operator()<MR>(args...);
}

// Every activation row [0, M) against tile rows [0, rows) (zero rows from there up to a
// multiple of NR): kernel.template operator()<R>(m0, r0, out) computes the R x NR outputs of
// activation rows [m0, m0 + R) (R <= MR) and tile rows [r0, r0 + NR) into out[m * NR + r];
// put(m, r, value) takes those of real rows.
template <int MR, int NR, class Kernel, class Put>
DI_ISA_INLINE void tile_blocks(int64_t M, int64_t rows, Kernel&& kernel, Put&& put) {
  alignas(64) float out[MR * NR];
  const int64_t rows_p = round_up(rows, NR);
  for (int64_t m0 = 0; m0 < M; m0 += MR) {
    const int64_t mv = min64(MR, M - m0);
    for (int64_t r0 = 0; r0 < rows_p; r0 += NR) {
      with_rows<MR>(mv, kernel, m0, r0, static_cast<float*>(out));
      const int64_t rv = min64(NR, rows - r0);
      for (int64_t m = 0; m < mv; ++m)
        for (int64_t r = 0; r < rv; ++r) put(m0 + m, r0 + r, out[m * NR + r]);
    }
  }
}

// The fp32 prefill: weight rows [n0, n1) NT at a time into tile (NT rows of c.xs floats):
// decode(n, dst) writes weight row n as c.xs floats in the column order of c.xf (zeros past K)
// and returns whether it holds a NaN code (its outputs are then the quiet NaN); then
// micro.template operator()<R>(x, xs, w, ws, Kp, out) runs R activation rows (stride xs)
// against NR tile rows (stride ws), out[m * NR + r] as tile_blocks has it.
template <int MR, int NR, class Decode, class Micro>
DI_ISA_INLINE void f32_tiles(const LinearCall& c, int64_t n0, int64_t n1, int64_t NT, float* tile, Decode&& decode,
                             Micro&& micro) {
  const int64_t Kp = c.xs;
  bool nan_row[kMaxTileRows];
  for (int64_t nt0 = n0; nt0 < n1; nt0 += NT) {
    const int64_t rows = min64(NT, n1 - nt0);
    for (int64_t r = 0; r < rows; ++r) nan_row[r] = decode(nt0 + r, tile + r * Kp);
    std::memset(tile + rows * Kp, 0, size_t((round_up(rows, NR) - rows) * Kp) * sizeof(float));
    auto kernel = [&]<int R>(int64_t m0, int64_t r0, float* out) {
      micro.template operator()<R>(c.xf + m0 * Kp, Kp, tile + r0 * Kp, Kp, Kp, out);
    };
    tile_blocks<MR, NR>(c.M, rows, kernel, [&](int64_t m, int64_t r, float v) {
      c.y[m * c.N + nt0 + r] = nan_row[r] ? f32_of(kQuietNan) : v;
    });
  }
}
