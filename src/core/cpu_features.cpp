#include "core/cpu_features.h"

#include <fstream>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

namespace deepinfer {

namespace {

#if defined(__x86_64__) || defined(__i386__)
bool cpuid(unsigned leaf, unsigned sub, unsigned& a, unsigned& b, unsigned& c, unsigned& d) {
  return __get_cpuid_count(leaf, sub, &a, &b, &c, &d) != 0;
}

unsigned long long xgetbv0() {
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<unsigned long long>(hi) << 32) | lo;
}
#endif

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!cpuid(0, 0, a, b, c, d)) return f;
  const unsigned max_leaf = a;
  if (!cpuid(1, 0, a, b, c, d)) return f;
  const bool osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
  const bool fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
  if (!osxsave || !avx) return f;
  const unsigned long long xcr0 = xgetbv0();
  const bool ymm_state = (xcr0 & 0x6) == 0x6;                 // SSE + AVX state
  const bool zmm_state = ymm_state && (xcr0 & 0xe0) == 0xe0;  // opmask + ZMM_Hi256 + Hi16_ZMM
  if (!ymm_state || max_leaf < 7) return f;
  unsigned a7 = 0, b7 = 0, c7 = 0, d7 = 0;
  cpuid(7, 0, a7, b7, c7, d7);
  f.avx2 = (b7 >> 5) & 1;
  f.fma = fma;
  f.f16c = f16c;
  if (zmm_state) {
    f.avx512f = (b7 >> 16) & 1;
    f.avx512dq = (b7 >> 17) & 1;
    f.avx512bw = (b7 >> 30) & 1;
    f.avx512vl = (b7 >> 31) & 1;
    f.avx512_vbmi = (c7 >> 1) & 1;
    f.avx512_vnni = (c7 >> 11) & 1;
    if (a7 >= 1) {  // leaf 7 sub-leaf 1: EAX bit 5 = AVX512_BF16
      unsigned a71 = 0, b71 = 0, c71 = 0, d71 = 0;
      cpuid(7, 1, a71, b71, c71, d71);
      f.avx512_bf16 = (a71 >> 5) & 1;
    }
  }
#endif
#if defined(__aarch64__) && defined(__linux__)
  const unsigned long hwcap = getauxval(AT_HWCAP), hwcap2 = getauxval(AT_HWCAP2);
  f.asimd = (hwcap & HWCAP_ASIMD) != 0;
  f.arm_bf16 = (hwcap2 & HWCAP2_BF16) != 0;
#endif
  return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    size_t start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? std::string("unknown") : line.substr(start);
  }
  return "unknown";
}

std::string cpu_features_description() {
  const CpuFeatures& f = cpu_features();
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(f.avx2, "avx2");
  add(f.fma, "fma");
  add(f.f16c, "f16c");
  add(f.avx512f, "avx512f");
  add(f.avx512bw, "avx512bw");
  add(f.avx512vl, "avx512vl");
  add(f.avx512dq, "avx512dq");
  add(f.avx512_bf16, "avx512_bf16");
  add(f.avx512_vnni, "avx512_vnni");
  add(f.avx512_vbmi, "avx512_vbmi");
  add(f.asimd, "asimd");
  add(f.arm_bf16, "bf16");
  return s.empty() ? std::string("no simd features") : s;
}

}  // namespace deepinfer
