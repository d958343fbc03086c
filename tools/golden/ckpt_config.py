"""make_checkpoint.py's config assembly: preset + --config + command-line overrides into one
config, init settings and seed; the checks of what the reference can run; and config.json's
key order (V4 flat, V4.1 root keys + text_config)."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

from ckpt_presets import (CALM_INIT, CONFIG_KEY_ORDER, DEFAULT_INIT, FLOAT_OVERRIDES, INT_OVERRIDES, PRESETS,
                          UNCALM_INIT, V41_INT_OVERRIDES, V41_LIST_OVERRIDES, V41_ROOT_KEYS, base_config,
                          base_config_v41, drafter_stages, is_v41)

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
