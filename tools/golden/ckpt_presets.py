"""make_checkpoint.py's model settings: the release config keys (V4 and V4.1), the presets,
the init settings and the command-line override tables, and the family tests (is_v41, ...)."""

from __future__ import annotations

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
