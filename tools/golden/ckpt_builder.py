"""make_checkpoint.py's tensor list: Tensor (name, dtype, shape, producer of its bytes) and
Builder, which lays out every tensor of a V4 / V4.1 / DSpark checkpoint (spec section 4.1)
with a lazy producer drawing from that tensor's own random stream."""

from __future__ import annotations

import math

import numpy as np

from ckpt_formats import (CHUNK_ELEMS, E4M3_MAX, E4M3_POS, FP4_FAST_STD, FP4_FAST_TABLE, encode_signed,
                          f32_to_bf16_bits, gauss, gauss_f32, pow2_exponent_ceil, quantize_fp4_rows,
                          quantize_fp8_blocks, rng_for)
from ckpt_presets import drafter_stages, is_v4_dspark, is_v41

# ----------------------------------------------------------------------------------------------
# Tensor list
# ----------------------------------------------------------------------------------------------

DTYPE_SIZE = {"F32": 4, "I32": 4, "BF16": 2, "F8_E4M3": 1, "F8_E8M0": 1, "I8": 1}


class Tensor:
    """One stored tensor: name, safetensors dtype, shape and a producer of its bytes."""

    def __init__(self, name, dtype, shape, produce):
        self.name, self.dtype, self.shape, self.produce = name, dtype, list(shape), produce

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * DTYPE_SIZE[self.dtype]


class SharedResult:
    """Computes a weight and its scale together once; each part is handed out once, then freed."""

    def __init__(self, fn):
        self.fn, self.parts = fn, None

    def take(self, key):
        if self.parts is None:
            self.parts = self.fn()
        arr = self.parts.pop(key)
        if not self.parts:
            self.parts = None
        return arr


class Builder:
    def __init__(self, cfg: dict, init: dict, seed: int):
        self.cfg, self.init, self.seed = cfg, init, seed
        self.tensors: list[Tensor] = []

    def rng(self, name):
        return rng_for(self.seed, name)

    # -- producers -------------------------------------------------------------------------
    def bf16_normal(self, name, shape, std, mean=0.0):
        def produce():
            rng = self.rng(name)
            rows, cols = shape if len(shape) == 2 else (1, shape[0])
            step = max(1, CHUNK_ELEMS // cols)
            for r0 in range(0, rows, step):
                n = min(step, rows - r0) * cols
                x = gauss(rng, n) * np.float32(std)
                if mean:
                    x += np.float32(mean)
                yield f32_to_bf16_bits(x)
        self.tensors.append(Tensor(name, "BF16", shape, produce))

    def f32_normal(self, name, shape, std):
        self.tensors.append(Tensor(name, "F32", shape,
                                   lambda: [gauss_f32(self.rng(name), shape, std)]))

    def f32_uniform(self, name, shape, lo, hi):
        def produce():
            u = self.rng(name).random(int(np.prod(shape)), dtype=np.float32)
            return [np.float32(lo) + u * np.float32(hi - lo)]
        self.tensors.append(Tensor(name, "F32", shape, produce))

    def norm(self, name, dim, gain=1.0, shape=None):
        std = self.init["norm_std"]
        shape = shape or [dim]
        def produce():
            x = gauss_f32(self.rng(name), tuple(shape), std, 1.0) * np.float32(gain)
            return [f32_to_bf16_bits(x)]
        self.tensors.append(Tensor(name, "BF16", shape, produce))

    def weight_block(self) -> int:
        return self.cfg["quantization_config"].get("weight_block_size", [128, 128])[0]

    def fp8(self, prefix, out_f, in_f, gain=1.0, row_gains=None):
        """FP8 e4m3 weight ~ N(0, gain^2/in) with B x B ue8m0 block scales (B = 128 V4, 32 V4.1).
        row_gains: optional (first_row, gain) multiplying the rows from first_row on."""
        name = prefix + ".weight"
        std = gain * self.init["weight_gain"] / math.sqrt(in_f)
        b = self.weight_block()
        def compute():
            w = gauss_f32(self.rng(name), (out_f, in_f), std)
            if row_gains:
                w[row_gains[0]:] *= np.float32(row_gains[1])
            codes, scale = quantize_fp8_blocks(w, b)
            return {"w": codes, "s": scale}
        shared = SharedResult(compute)
        self.tensors.append(Tensor(name, "F8_E4M3", [out_f, in_f], lambda: [shared.take("w")]))
        self.tensors.append(Tensor(prefix + ".scale", "F8_E8M0", [-(-out_f // b), -(-in_f // b)],
                                   lambda: [shared.take("s")]))

    def fp4(self, prefix, out_f, in_f, gain=1.0):
        """Routed-expert FP4 e2m1 weight ~ N(0, gain^2/in), per-32 ue8m0 scales."""
        name = prefix + ".weight"
        std = gain * self.init["weight_gain"] / math.sqrt(in_f)
        fast = self.init["fast_experts"]
        def compute():
            rng = self.rng(name)
            if fast:
                packed = FP4_FAST_TABLE[rng.integers(0, 256, size=(out_f, in_f // 2), dtype=np.uint8)]
                k = int(math.floor(math.log2(std / FP4_FAST_STD) + 0.5))
                scale = np.full((out_f, in_f // 32), k + 127, dtype=np.uint8)
                return {"w": packed, "s": scale}
            packed, scale = quantize_fp4_rows(gauss_f32(rng, (out_f, in_f), std))
            return {"w": packed, "s": scale}
        shared = SharedResult(compute)
        self.tensors.append(Tensor(name, "I8", [out_f, in_f // 2], lambda: [shared.take("w")]))
        self.tensors.append(Tensor(prefix + ".scale", "F8_E8M0", [out_f, in_f // 32],
                                   lambda: [shared.take("s")]))

    def tid2eid(self, name, vocab, n_experts, topk):
        def produce():
            rng = self.rng(name)
            out = []
            step = max(1, CHUNK_ELEMS // n_experts)
            for r0 in range(0, vocab, step):
                keys = rng.random((min(step, vocab - r0), n_experts), dtype=np.float32)
                out.append(np.argsort(keys, axis=1, kind="stable")[:, :topk].astype(np.int32))
            return out
        self.tensors.append(Tensor(name, "I32", [vocab, topk], produce))

    def engram_table(self, prefix, rows, hd):
        """V4.1 Engram table: e4m3 [rows, hd] ~ N(0, 1) with one ue8m0 scale per row and 32
        columns (spec 4.2). Streamed in row chunks; the scale pass replays the same stream."""
        name = prefix + ".weight"
        step = max(1, CHUNK_ELEMS // hd)
        def chunks():
            rng = self.rng(name)
            for r0 in range(0, rows, step):
                n = min(step, rows - r0)
                blocks = gauss(rng, n * hd).reshape(n, hd // 32, 32)
                k = pow2_exponent_ceil(np.abs(blocks).max(axis=2), E4M3_MAX)
                inv = np.ldexp(np.float32(1.0), -k).astype(np.float32)
                yield encode_signed(blocks * inv[:, :, None], E4M3_POS, 0x80).reshape(n, hd), (k + 127).astype(np.uint8)
        self.tensors.append(Tensor(name, "F8_E4M3", [rows, hd], lambda: (c for c, _ in chunks())))
        self.tensors.append(Tensor(prefix + ".scale", "F8_E8M0", [rows, hd // 32], lambda: (sc for _, sc in chunks())))

    def engram(self, p, layer):
        c, ini = self.cfg, self.init
        d, nhc = c["hidden_size"], c["hc_mult"]
        e = c["engram_layer_ids"].index(layer)
        hd, n_cols = c["engram_head_dim"], (c["engram_max_ngram_size"] - 1) * c["engram_n_heads"]
        self.engram_table(p + "embed", c["engram_num_embeddings"][e], hd)
        # hc keys then one value: the value rows get the calm gain, so the update stays small.
        self.fp8(p + "wkv", (nhc + 1) * d, n_cols * hd, 1.0, (nhc * d, ini["engram_value_gain"]))
        self.norm(p + "q_weight", d, shape=[nhc, d])
        self.norm(p + "k_weight", d, shape=[nhc, d])

    def attention_v41(self, a, layer):
        """V4.1 extras (spec 4.2): compressor + index-key projection at KV sources, indexer
        queries at index sources."""
        c = self.cfg
        d, Dh, ql = c["hidden_size"], c["head_dim"], c["q_lora_rank"]
        r = c["compress_ratios"][layer]
        std = self.init["weight_gain"] / math.sqrt(d)
        if layer in c["kv_source_layer_ids"]:
            self.bf16_normal(a + "compressor.wkv.weight", [Dh, d], std)
            if r > 1:
                self.bf16_normal(a + "compressor.wgate.weight", [Dh, d], std)
            self.norm(a + "compressor.norm.weight", Dh)
            DI = c["index_head_dim"]
            self.bf16_normal(a + "indexer.wk.weight", [DI, Dh], 1.0 / math.sqrt(Dh))
            self.norm(a + "indexer.k_norm.weight", DI)
        if layer in c["index_source_layer_ids"]:
            HI, DI = c["index_n_heads"], c["index_head_dim"]
            self.fp8(a + "indexer.wq_b", HI * DI, ql)
            self.bf16_normal(a + "indexer.weights_proj.weight", [HI, d], 1.0 / math.sqrt(d))

    # -- model structure (spec section 4.1) --------------------------------------------------
    def hc(self, prefix, kind, n_out):
        c, ini = self.cfg, self.init
        nhc, d = c["hc_mult"], c["hidden_size"]
        self.f32_normal(f"{prefix}{kind}_fn", [n_out, nhc * d], ini["hc_std"] / math.sqrt(nhc * d))
        self.f32_normal(f"{prefix}{kind}_base", [n_out], ini["hc_base_std"])
        lo, hi = ini["hc_scale_range"]
        self.f32_uniform(f"{prefix}{kind}_scale", [1 if kind == "hc_head" else 3], lo, hi)

    def block(self, p, layer, ratio, is_hash, is_mtp):
        c, ini = self.cfg, self.init
        v41 = is_v41(c)
        d, H, Dh = c["hidden_size"], c["num_attention_heads"], c["head_dim"]
        ql, G, Ro = c["q_lora_rank"], c["o_groups"], c["o_lora_rank"]
        E, k, inter = c["n_routed_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"]
        if v41 and is_mtp:  # DSpark stages have their own, smaller MoE
            E = c.get("dspark_n_routed_experts") or E
            k = c.get("dspark_num_experts_per_tok") or k
        shared_inter = inter * c["n_shared_experts"]
        nhc = c["hc_mult"]
        mix = (2 + nhc) * nhc
        ffn_norm_gain = per_layer(ini["ffn_norm_gain"], layer, is_mtp)
        ffn_out_gain = per_layer(ini["ffn_out_gain"], layer, is_mtp)
        attn_out_gain = per_layer(ini["attn_out_gain"], layer, is_mtp)

        self.norm(p + "attn_norm.weight", d)
        self.norm(p + "ffn_norm.weight", d, ffn_norm_gain)
        self.hc(p, "hc_attn", mix)
        self.hc(p, "hc_ffn", mix)
        a = p + "attn."
        self.f32_normal(a + "attn_sink", [H], ini["sink_std"])
        self.fp8(a + "wq_a", ql, d)
        self.norm(a + "q_norm.weight", ql)
        self.fp8(a + "wq_b", H * Dh, ql)
        self.fp8(a + "wkv", Dh, d)
        self.norm(a + "kv_norm.weight", Dh)
        self.fp8(a + "wo_a", G * Ro, H * Dh // G)
        self.fp8(a + "wo_b", d, G * Ro, attn_out_gain)
        if v41:
            if not is_mtp:
                self.attention_v41(a, layer)
        elif ratio:
            coff = 2 if ratio == 4 else 1
            self.compressor(a + "compressor.", coff * Dh, Dh, ratio)
        if ratio == 4 and not v41:
            HI, DI = c["index_n_heads"], c["index_head_dim"]
            self.fp8(a + "indexer.wq_b", HI * DI, ql)
            self.bf16_normal(a + "indexer.weights_proj.weight", [HI, d], 1.0 / math.sqrt(d))
            self.compressor(a + "indexer.compressor.", 2 * DI, DI, 4)
        f = p + "ffn."
        self.bf16_normal(f + "gate.weight", [E, d], ini["weight_gain"] / math.sqrt(d))
        if is_hash:
            self.tid2eid(f + "gate.tid2eid", c["vocab_size"], E, k)
        else:
            self.f32_normal(f + "gate.bias", [E], ini["gate_bias_std"])
        if v41:  # the image-token bias ships on every layer (unused for text)
            self.f32_normal(f + "gate.bias_vl", [E], ini["gate_bias_std"])
        if v41 and not is_mtp and layer in c["engram_layer_ids"]:
            self.engram(p + "engram.", layer)
        for e in range(E):
            self.fp4(f"{f}experts.{e}.w1", inter, d)
            self.fp4(f"{f}experts.{e}.w2", d, inter, ffn_out_gain)
            self.fp4(f"{f}experts.{e}.w3", inter, d)
        self.fp8(f + "shared_experts.w1", shared_inter, d)
        self.fp8(f + "shared_experts.w2", d, shared_inter, ffn_out_gain)
        self.fp8(f + "shared_experts.w3", shared_inter, d)

    def compressor(self, p, width, dh, ratio):
        d = self.cfg["hidden_size"]
        std = self.init["weight_gain"] / math.sqrt(d)
        self.bf16_normal(p + "wkv.weight", [width, d], std)
        self.bf16_normal(p + "wgate.weight", [width, d], std)
        self.f32_normal(p + "ape", [ratio, width], self.init["ape_std"])
        self.norm(p + "norm.weight", dh)

    def dspark(self):
        """DSpark stages mtp.S: ratio-0 blocks; stage 0 has main_proj / main_norm, the last one
        norm, the Markov and confidence heads. V4.1 (spec 11.7): their own MoE, Markov tables
        embed / head. V4 refreshes (11.10): the backbone's MoE, markov_w1 / markov_w2 and the
        last stage's hc_head_*."""
        c = self.cfg
        V, d, L, n = c["vocab_size"], c["hidden_size"], c["num_hidden_layers"], drafter_stages(c)
        rank = c["dspark_markov_rank"]
        v4 = is_v4_dspark(c)
        for s in range(n):
            p = f"mtp.{s}."
            self.block(p, L + s, 0, False, True)
            if s == 0:
                self.fp8(p + "main_proj", d, d * len(c["dspark_target_layer_ids"]))
                self.norm(p + "main_norm.weight", d)
            if s == n - 1:
                self.norm(p + "norm.weight", d)
                if v4:
                    self.hc(p, "hc_head", c["hc_mult"])
                m1, m2 = ("markov_w1", "markov_w2") if v4 else ("embed", "head")
                self.bf16_normal(p + f"markov_head.{m1}.weight", [V, rank], 1.0)
                self.bf16_normal(p + f"markov_head.{m2}.weight", [V, rank], 1.0 / math.sqrt(rank))
                self.bf16_normal(p + "confidence_head.proj.weight", [1, d + rank], 1.0 / math.sqrt(d + rank))

    def build(self) -> list[Tensor]:
        c, ini = self.cfg, self.init
        V, d, L = c["vocab_size"], c["hidden_size"], c["num_hidden_layers"]
        ratios = c["compress_ratios"]
        self.bf16_normal("embed.weight", [V, d], ini["embed_std"])
        self.bf16_normal("head.weight", [V, d], ini["head_gain"] / math.sqrt(d))
        self.norm("norm.weight", d)
        if is_v41(c):  # no hc_head; DSpark stages instead of an MTP module
            for layer in range(L):
                self.block(f"layers.{layer}.", layer, ratios[layer], False, False)
            self.dspark()
            names = [t.name for t in self.tensors]
            assert len(names) == len(set(names)), "duplicate tensor name"
            return self.tensors
        self.hc("", "hc_head", c["hc_mult"])
        for layer in range(L):
            self.block(f"layers.{layer}.", layer, ratios[layer], layer < c["num_hash_layers"], False)
        if is_v4_dspark(c):  # DSpark stages, no MTP module (docs/model/mtp_dspark.md §3)
            self.dspark()
            names = [t.name for t in self.tensors]
            assert len(names) == len(set(names)), "duplicate tensor name"
            return self.tensors
        for m in range(c["num_nextn_predict_layers"]):
            p = f"mtp.{m}."
            self.block(p, L + m, ratios[L + m], False, True)
            self.fp8(p + "e_proj", d, d)
            self.fp8(p + "h_proj", d, d)
            self.norm(p + "enorm.weight", d)
            self.norm(p + "hnorm.weight", d)
            self.norm(p + "norm.weight", d)
            self.hc(p, "hc_head", c["hc_mult"])
        names = [t.name for t in self.tensors]
        assert len(names) == len(set(names)), "duplicate tensor name"
        return self.tensors


def per_layer(value, layer, is_mtp):
    """A scalar, or a list with one value per backbone layer.  MTP modules take the list's most
    common value (e.g. 0.005 from 0.005,0.005,0.0002,0.005)."""
    if isinstance(value, (list, tuple)):
        if is_mtp:
            vals = list(value)
            return max(vals, key=vals.count)
        return value[layer]
    return value


def count_params(tensors: list[Tensor]) -> int:
    n = 0
    for t in tensors:
        if t.name.endswith(".scale") and t.dtype == "F8_E8M0":
            continue
        k = int(np.prod(t.shape, dtype=np.int64))
        n += 2 * k if t.dtype == "I8" else k
    return n
