// Logits fingerprints of the shared golden models per cpu kernel variant, for comparing
// machines: tools/arm64/test.sh runs this on x86-64 and under qemu-aarch64 and requires the
// pairs whose kernels share their arithmetic to agree bit for bit (scalar = scalar, NEON =
// AVX2, NEON + BF16 = AVX-512; cpu_isa.h). On one machine there is nothing to compare them
// with: the test prints them (FNV-1a of the logits' bits, every NaN counted alike) and checks
// only that every logit is finite.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "golden.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/deepseek_v4/model.h"

using namespace deepinfer;
using namespace deepinfer::v4;

TEST(IsaLogits, PrintFingerprints) {
  for (std::string set : {"tiny-v4-c", "tiny-v41-a"}) {
    const auto m = Model::load(golden::dir(set) + "/model");
    const std::vector<int32_t> tokens = golden::sequence(set, "seq40");
    const int64_t V = m->config().vocab_size;
    for (kernels::Isa isa : kernels::kAllIsas) {
      if (!kernels::isa_supported(isa)) continue;
      ThreadPool pool(2);
      const auto be = kernels::make_cpu_backend_isa(&pool, isa);
      for (auto mode : {NumericsMode::Float, NumericsMode::Reference}) {
        Numerics num;
        num.mode = mode;
        num.backend = be.get();
        auto st = m->new_sequence();
        std::vector<float> logits(tokens.size() * size_t(V));
        m->forward(tokens.data(), int64_t(tokens.size()), st, num, logits.data());
        uint64_t h = 1469598103934665603ull;
        int64_t bad = 0;
        for (float f : logits) {
          uint32_t b;
          std::memcpy(&b, &f, 4);
          if (std::isnan(f)) b = 0x7fc00000u;
          bad += !std::isfinite(f);
          for (int i = 0; i < 4; ++i) {
            h ^= (b >> (8 * i)) & 0xff;
            h *= 1099511628211ull;
          }
        }
        EXPECT_EQ(bad, 0) << set << " " << kernels::isa_name(isa) << " " << numerics_name(mode);
        std::printf("isa-logits %s %s %s 0x%016" PRIx64 "\n", set.c_str(), kernels::isa_name(isa), numerics_name(mode),
                    h);
      }
    }
  }
}
