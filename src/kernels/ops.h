// The op registry: every compute op of the kernel layer, declared once, with its referee, its
// shape contract and its bit contract, and a lookup of which implementation each ISA runs.
// A description and a lookup only: the model calls ops through the Backend interface
// (backend.h) and the free functions of kernels.h and light_ops.h, never an ISA; the cpu
// backend finds an ISA's kernels in the tables registered per Isa (isa_kernels() /
// isa_attention() in cpu/cpu_backend.cpp), never by name. tests/kernels/test_op_registry.cpp runs every op of the
// catalogue on every ISA this machine has, over awkward shapes, against its referee, as the
// contract here says (bits, units in the last place, or fp32 reassociation's bound), with
// NaN / inf / subnormal inputs where the contract covers them.
//
// Adding an op:
//   1. the referee in kernels.h / ref/ (scalar, the canonical numerics; a light per-token op
//      with no other implementation: light_ops.h) and, where the model reaches it through a
//      backend, a Backend method (backend.h) whose base or ref version is the referee;
//   2. an Op value below and its OpSpec in ops.cpp's catalogue, at the same position (a
//      static_assert checks the order and the count): the contract as the code keeps it, not
//      stronger; `basis` names what makes it hold and the test that checked it before;
//   3. its case generator in test_op_registry.cpp (OpRegistry.EveryOpHasACaseGenerator fails
//      until there is one; an op with no implementation but its referee checks that, its
//      determinism and the test's own evaluation of its formula: light_case there).
// Adding an ISA:
//   1. an Isa value (cpu/cpu_backend.h: kAllIsas, isa_name, isa_supported), its kernel files
//      (*_<isa>.cpp, flags in src/kernels/CMakeLists.txt) filling an IsaKernels (cpu/cpu_isa.h;
//      a null entry falls back to the portable code or the referee) and, for attention, an
//      AttentionKernels (cpu/attention_cpu.h);
//   2. register both in isa_kernels() and isa_attention() (cpu/cpu_backend.cpp): that is all
//      the registry and the test read, so the new ISA's entries are then tested against every
//      op's referee on a machine that has it.
#pragma once
#include <cstdint>
#include <span>

#include "kernels/cpu/cpu_backend.h"

namespace deepinfer::kernels {

namespace cpu {
struct IsaKernels;        // cpu/cpu_isa.h
struct AttentionKernels;  // cpu/attention_cpu.h
}  // namespace cpu

// The ops, in catalogue order. The GEMMs are one op per weight format where the kernels'
// paths (decoders, fallbacks) differ by format.
enum class Op : uint8_t {
  linear_f32_w_f32,   // Backend::linear_f32, F32 weights
  linear_f32_w_bf16,  // BF16 weights
  linear_f32_w_fp8,   // FP8_BLOCK weights
  linear_f32_w_fp4,   // FP4_BLOCK weights
  linear_f32_exact,   // Backend::linear_f32_exact, every weight format
  linear_act_quant_fp8,  // Backend::linear_act_quant, FP8_BLOCK weights (BF16 / F32: linear_f32)
  linear_act_quant_fp4,  // FP4_BLOCK weights
  linear_many,        // Backend::linear_many: a batch of the products above
  act_quant,          // act_quant_ref (kernels.h), and the ISA's IsaKernels::act_quant
  fp4_qdq_pow2,
  fp4_qdq_e4m3,
  hadamard,
  sink_attention,        // Backend::sink_attention
  sink_attention_heads,  // Backend::sink_attention_heads
  index_scores,          // Backend::index_scores
  hc_expand,             // Backend::hc_expand
  hc_collapse,           // Backend::hc_collapse
  swiglu,                // Backend::swiglu
  // The light per-token ops of light_ops.h: one scalar function each (its referee), which the
  // model calls directly on every backend, so no ISA implements them (Impl::kReferee).
  // Their building blocks exp_f / sigmoid_f / rsqrt_f / softplus_f are scalar functions of
  // one value, no ops: their numerics are part of the contracts of the ops that use them.
  rms_norm,              // rms_norm_ref
  head_rms_norm,         // head_rms_norm_ref (V4's query heads)
  rope_angles,           // rope_angles_ref
  rope_rotate,           // rope_rotate_ref
  hc_mix_norm,           // hc_mix_norm_ref
  hc_coeffs,             // hc_coeffs_ref (its comb through hc_sinkhorn_ref)
  hc_sinkhorn,           // hc_sinkhorn_ref
  top_k,                 // top_k_ref (the indexer's choice)
  router_scores,         // router_scores_ref
  router_select,         // router_select_ref
  router_weights,        // router_weights_ref
  compressor_pool,       // compressor_pool_ref
  engram_update,         // engram_update_ref (V4.1)
  count  // not an op: the number of ops
};

// How an ISA's result relates to the referee's.
enum class BitContract : uint8_t {
  kBits,  // every output bit for bit the referee's
  // Within `bound` units in the last place of the referee's output, in the format the op
  // rounds to (bf16 when its bf16 flag is set, else fp32), at most max_differing of the
  // outputs differing at all; zeros and infinities exact, NaN where the referee has NaN.
  kUlp,
  // The referee's double accumulation done in fp32 in another order: |got - want| <= bound *
  // the output's magnitude (Magnitude) + 2^-126 (the smallest normal fp32: subnormal
  // products), NaN where the referee has NaN, an infinity equal to the referee's.
  kFp32Reassoc,
};

// What a kFp32Reassoc bound is relative to.
enum class Magnitude : uint8_t {
  kNone,
  kSumAbsTerms,  // sum of |x * w| over the output's dot (act-quant: x after act_quant)
  kOnePlusAbs,   // 1 + |want| (attention: a weighted mean of values)
};

// Special input values a contract covers (Contract::specials for the activations / vectors,
// Contract::weight_specials for a GEMM's weight codes and scale bytes): the op keeps its
// contract with them among those inputs. Absent: the contract is stated for finite normal
// values there only.
inline constexpr uint8_t kSpecialNaN = 1, kSpecialInf = 2, kSpecialSubnormal = 4;

// What computes an op on one ISA's cpu backend.
enum class Impl : uint8_t {
  kUnavailable,  // the ISA is not compiled for this architecture, or this CPU lacks it
  kReferee,      // the referee itself (the op has no other implementation there)
  kPortable,     // the cpu backend's portable C++ (Isa::Scalar's kernels, Backend's base methods)
  kIsa,          // the ISA's registered table entries (OpSpec::isa_entry)
};

// How an op's outputs on any ISA relate to its referee's.
struct Contract {
  BitContract bits;
  double bound;          // kUlp: units in the last place; kFp32Reassoc: relative (magnitude)
  double bound_rounded;  // the same when the op's bf16 flag (round_bf16 / round_probs) is set
  Magnitude magnitude;
  double max_differing;     // the largest share of outputs whose bits may differ (kBits: 0)
  uint8_t specials;         // kSpecial* values within the contract: activations, vectors
  uint8_t weight_specials;  // the same for the weights of the GEMMs (codes, scale bytes)
  bool nan_bits;            // NaN outputs carry the referee's NaN bits (else: NaN where it has NaN)
};

struct OpSpec {
  Op op;
  const char* name;     // unique, [a-z0-9_]
  const char* referee;  // the referee (kernels.h), the canonical numerics
  const char* call;     // how the model reaches the op
  const char* shapes;   // the shape contract (kernels.h / backend.h state it in full)
  Contract contract;    // the bit contract
  const char* basis;    // what makes the contract hold, and the tests that state it
  const char* isa_entry;  // the table entries an ISA implements the op with
  // Which implementation runs, given an ISA's registered tables (null for Isa::Scalar).
  Impl (*impl)(const cpu::IsaKernels* k, const cpu::AttentionKernels* a);
};

// Every op, indexed by Op.
std::span<const OpSpec> op_catalogue();
const OpSpec& op_spec(Op op);
inline const char* op_name(Op op) { return op_spec(op).name; }

// What runs op on isa's cpu backend (make_cpu_backend_isa), from the tables registered for it.
// Shapes an ISA's kernels do not take (OpSpec::shapes) go to the portable code or the referee.
Impl implementation(Op op, Isa isa);
// The ISA's own table entries run op.
inline bool isa_implements(Op op, Isa isa) { return implementation(op, isa) == Impl::kIsa; }

const char* impl_name(Impl impl);
const char* bit_contract_name(BitContract bits);

}  // namespace deepinfer::kernels
