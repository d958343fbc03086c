// CPU backend variants, for tests, benchmarks and logs. make_cpu_backend() (backend.h)
// picks the best variant this machine supports once, at creation; the variants here can
// be forced explicitly so every ISA path is tested on a machine that has it.
#pragma once
#include <cstdint>
#include <memory>

#include "kernels/backend.h"

namespace deepinfer::kernels {

namespace cpu {
struct IsaKernels;        // cpu_isa.h
struct AttentionKernels;  // attention_cpu.h
}

enum class Isa {
  Scalar,  // portable threaded C++ (the original cpu backend; also the fallback for odd shapes)
  Avx2,    // AVX2 + FMA + F16C, fp32 FMA everywhere
  Avx512,  // AVX-512 F/BW/VL/DQ + BF16 + VBMI: bf16 dot products where products are exact
  Neon,      // aarch64 Advanced SIMD: fp32 FMA everywhere, each output the AVX2 kernels' bits
  NeonBf16,  // Neon + the BF16 extension (BFMLALT / BFMLALB): each output the AVX-512 kernels' bits
};

// Every variant, in order; isa_supported() says which this machine runs.
inline constexpr Isa kAllIsas[] = {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Neon, Isa::NeonBf16};

const char* isa_name(Isa isa);
bool isa_supported(Isa isa);
// What make_cpu_backend() uses: the best ISA this CPU supports.
Isa cpu_dispatch_isa();
// A cpu backend with a forced ISA; throws std::invalid_argument if this CPU lacks it.
std::unique_ptr<Backend> make_cpu_backend_isa(ThreadPool* pool, Isa isa);
// The AVX-512 backend with bf16 mode's prefill tiles forced onto vdpbf16ps (dp_tiles) or
// onto FMAs in dot-product order (same bits; make_cpu_backend picks the faster for the CPU).
std::unique_ptr<Backend> make_cpu_backend_avx512_tiles(ThreadPool* pool, bool dp_tiles);

// The kernel table of a SIMD variant this CPU supports (null for Scalar and for a variant it
// lacks), for the tests of the tables' own entry points and the op registry (kernels/ops.h).
const cpu::IsaKernels* isa_kernel_table(Isa isa);
// The same for its attention kernels (null for Scalar, which runs sink_attention_ref).
const cpu::AttentionKernels* isa_attention_table(Isa isa);

// The act-quant of the given ISA's linear_act_quant, with act_quant_ref's interface
// (n a multiple of block): must be bit-identical to act_quant_ref. Blocks the ISA does not
// vectorise fall back to act_quant_ref itself.
void cpu_act_quant(Isa isa, float* x, int64_t n, int64_t block, float* q_out, float* s_out);

}  // namespace deepinfer::kernels
