// CPU feature detection for the kernel dispatcher, computed once and cached: x86 by cpuid +
// xgetbv, aarch64 by the kernel's hardware capabilities (getauxval). On other architectures
// every flag is false and the portable kernels run.
#pragma once
#include <string>

namespace deepinfer {

struct CpuFeatures {
  // Each flag also requires the OS to save the matching register state (XCR0).
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512_bf16 = false;
  bool avx512_vnni = false;
  bool avx512_vbmi = false;
  // aarch64: Advanced SIMD (always there on Linux) and the BF16 extension (BFMLALB / BFMLALT,
  // Armv8.6, optional from Armv8.2).
  bool asimd = false;
  bool arm_bf16 = false;

  // AVX2 kernel tier: AVX2 + FMA + F16C.
  bool has_avx2_tier() const { return avx2 && fma && f16c; }
  // AVX-512 kernel tier: F/BW/VL/DQ + BF16 dot products + VBMI byte permutes (Ice Lake server,
  // Sapphire Rapids, Zen 4 and later).
  bool has_avx512_tier() const {
    return has_avx2_tier() && avx512f && avx512bw && avx512vl && avx512dq && avx512_bf16 && avx512_vbmi;
  }
  // aarch64 kernel tiers: NEON (fp32 FMA) and NEON + BF16 (bf16 widening multiply-adds).
  bool has_neon_tier() const { return asimd; }
  bool has_neon_bf16_tier() const { return asimd && arm_bf16; }
};

// Detected once (thread-safe static), then cached.
const CpuFeatures& cpu_features();

// Short list of the detected features for logs, e.g. "avx2 fma f16c avx512f ... avx512_bf16".
std::string cpu_features_description();

// The CPU's model name as the OS reports it (/proc/cpuinfo), e.g. "AMD EPYC 7B13"; "unknown"
// where it is not readable. Benchmarks record it beside their figures.
std::string cpu_model_name();

}  // namespace deepinfer
