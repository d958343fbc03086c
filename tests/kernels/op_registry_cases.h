// What the op registry's test (test_op_registry.cpp) shares between its files: the output
// buffers with guard values, the checker that compares a case's outputs against the referee as
// the op's contract says, the input helpers, the Env a case generator runs in, and the table of
// generators. The generators of the kernels' ops live in test_op_registry.cpp, those of the light
// per-token ops in test_op_registry_light.cpp (light_generators()); OpRegistry.
// EveryOpHasACaseGenerator looks an op up in both.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/formats.h"
#include "core/thread_pool.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/ops.h"

namespace deepinfer::kernels::op_registry_test {

inline constexpr float kNaNf = std::numeric_limits<float>::quiet_NaN();
inline constexpr float kInff = std::numeric_limits<float>::infinity();

// ----------------------------------------------------------------------------- comparison

inline constexpr float kGuard = -4321.25f;
inline constexpr int64_t kGuards = 5;

// An output buffer of n floats, filled with `fill`, followed by guard values.
struct Out {
  std::vector<float> v;
  int64_t n;
  explicit Out(int64_t n_, float fill = 0.0f) : v(size_t(n_ + kGuards), kGuard), n(n_) {
    std::fill_n(v.begin(), n_, fill);
  }
  float* data() { return v.data(); }
  const float* data() const { return v.data(); }
  bool guards_intact() const {
    for (int64_t g = 0; g < kGuards; ++g)
      if (f32_bits(v[size_t(n + g)]) != f32_bits(kGuard)) return false;
    return true;
  }
};

// One case's comparisons against the referee, as the op's contract says.
struct Checker {
  const OpSpec& spec;
  Isa isa;
  int64_t outputs = 0, differing = 0, failures = 0;

  void fail(const std::string& where, const std::string& what) {
    if (++failures <= 8) ADD_FAILURE() << spec.name << " on " << isa_name(isa) << ", " << where << ": " << what;
  }

  // got against want (n outputs); mag: each output's sum of |terms| (Magnitude::kSumAbsTerms);
  // rounded: the op's bf16 flag was set (bound_rounded, bf16 units).
  void compare(const float* got, const float* want, int64_t n, const std::string& where, bool rounded = false,
               const double* mag = nullptr) {
    const double bound = rounded ? spec.contract.bound_rounded : spec.contract.bound;
    for (int64_t i = 0; i < n; ++i) {
      ++outputs;
      const float g = got[i], w = want[i];
      auto detail = [&] { return describe(i, g, w); };
      if (std::isnan(w)) {
        if (!std::isnan(g)) fail(where, "want NaN, " + detail());
        else if (spec.contract.nan_bits && f32_bits(g) != f32_bits(w)) fail(where, "NaN bits differ, " + detail());
        continue;
      }
      if (f32_bits(g) == f32_bits(w)) continue;
      ++differing;
      switch (spec.contract.bits) {
        case BitContract::kBits: fail(where, "bits differ, " + detail()); break;
        case BitContract::kUlp: {
          if (std::isnan(g) || std::isinf(w) || w == 0.0f || std::signbit(g) != std::signbit(w)) {
            fail(where, "special value differs, " + detail());
            break;
          }
          const int64_t unit = rounded ? 0x10000 : 1;  // one bf16 / fp32 unit in the last place
          const int64_t d = std::abs(int64_t(f32_bits(g)) - int64_t(f32_bits(w)));
          if (double(d) > bound * double(unit)) fail(where, "beyond " + std::to_string(bound) + " ulp, " + detail());
          break;
        }
        case BitContract::kFp32Reassoc: {
          if (std::isinf(w) || !std::isfinite(g)) {
            fail(where, "non-finite result differs, " + detail());
            break;
          }
          double m = 0.0;
          if (spec.contract.magnitude == Magnitude::kSumAbsTerms) m = mag ? mag[i] : 0.0;
          if (spec.contract.magnitude == Magnitude::kOnePlusAbs) m = 1.0 + std::abs(double(w));
          const double err = std::abs(double(g) - double(w));
          if (!(err <= bound * m + 0x1p-126))
            fail(where, detail() + ", |error| " + std::to_string(err) + " > " + std::to_string(bound) + " * " +
                            std::to_string(m));
          break;
        }
      }
    }
  }
  void compare(const Out& got, const std::vector<float>& want, const std::string& where, bool rounded = false,
               const std::vector<double>* mag = nullptr) {
    if (!got.guards_intact()) fail(where, "wrote past its output");
    compare(got.data(), want.data(), got.n, where, rounded, mag ? mag->data() : nullptr);
  }
  // An op with no implementation but its referee against the test's own evaluation of the
  // formula its header states: the bits, a NaN by NaN-ness (which NaN an IEEE operation passes
  // on is the hardware's choice, not the formula's).
  void matches_formula(const float* got, const float* want, int64_t n, const std::string& where) {
    for (int64_t i = 0; i < n; ++i) {
      ++outputs;
      if (f32_bits(got[i]) != f32_bits(want[i]) && !(std::isnan(got[i]) && std::isnan(want[i])))
        fail(where, "not the formula's bits, " + describe(i, got[i], want[i]));
    }
  }
  // Two results of the same backend that its contract makes equal bit for bit.
  void same_bits(const float* a, const float* b, int64_t n, const std::string& where) {
    if (std::memcmp(a, b, size_t(n) * sizeof(float)) != 0) fail(where, "not the bits of the backend's own call");
  }
  static std::string describe(int64_t i, float g, float w) {
    return "index " + std::to_string(i) + ": got " + std::to_string(g) + " (0x" + hex(f32_bits(g)) + "), want " +
           std::to_string(w) + " (0x" + hex(f32_bits(w)) + ")";
  }
  static std::string hex(uint32_t b) {
    char s[16];
    std::snprintf(s, sizeof s, "%08x", b);
    return s;
  }
};

// ----------------------------------------------------------------------------- inputs

inline std::vector<float> normal(int64_t n, std::mt19937& rng, float sd = 1.0f, bool bf16 = false) {
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = bf16 ? round_bf16(nd(rng)) : nd(rng);
  return v;
}

inline std::string shape(const char* fmt, std::initializer_list<int64_t> v) {
  std::string s = fmt;
  for (int64_t x : v) {
    s += ' ';
    s += std::to_string(x);
  }
  return s;
}

// ----------------------------------------------------------------------------- cases

struct Env {
  const OpSpec& spec;
  Isa isa;
  const Backend& be;  // the ISA's cpu backend
  Checker& check;
  std::mt19937 rng;
  ThreadPool* pool;  // the backend's
  int64_t light_cases = 0;  // light_case calls so far
  bool covers(uint8_t special) const { return (spec.contract.specials & special) != 0; }
  bool covers_weights(uint8_t special) const { return (spec.contract.weight_specials & special) != 0; }
};

// An op with no implementation but its referee (the model calls the referee on every backend):
// the case runs what the model runs. When an ISA registers one, this fails until the
// generator calls it.
inline void expect_referee_only(Env& e) {
  EXPECT_EQ(implementation(e.spec.op, e.isa), Impl::kReferee)
      << e.spec.name << ": " << isa_name(e.isa) << " implements it now; make its generator run that";
}

// ----------------------------------------------------------------------------- registry

// A case generator: one op's cases on the Env's ISA. Each op has one, in one of the tables.
using Generator = void (*)(Env&);
struct GeneratorEntry {
  Op op;
  Generator gen;
};

// The generators of the light per-token ops (test_op_registry_light.cpp).
std::span<const GeneratorEntry> light_generators();

}  // namespace deepinfer::kernels::op_registry_test
