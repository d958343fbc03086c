#!/usr/bin/env python3
"""Golden logits for a DeepSeek-V4 checkpoint from Hugging Face transformers' `deepseek_v4` model.

Loads a checkpoint in the official layout (as written by make_checkpoint.py or released by
DeepSeek: official tensor names, FP8 / FP4 / BF16 storage), dequantises every weight exactly
(fp8 x 2^(s-127), fp4 x 2^(s-127), bf16 -> f32), maps the names onto the HF modules (spec 4.3),
runs the HF model in fp32 on the CPU and writes, per token sequence seqN:

  seqN.prefill.f32  float32 [N, vocab]  row i = logits after tokens 0..i (one prefill call)
  seqN.gen.i32      int32   [32]        greedy continuation (argmax, ties -> lowest id, no EOS stop)
  seqN.gen.f32      float32 [32, vocab] row 0 = last prefill row; row g = logits after feeding
                                        gen[g-1] (single-token decode with the HF cache)

plus sequences.json and manifest.json (config, seeds, versions, sha256 of every file), the
format of /work/shared/golden/*/logits/exact.  HF fp32 = DeepInfer's `--numerics float`
(no activation / KV / indexer QDQ); see README.md for every numeric difference to the
official reference.

Needs the heavy venv (requirements-hf.txt).  Usage:
  hf_golden.py --model DIR --out DIR [--sequences sequences.json | --lengths 1,7,40,300 --seq-seed 4711]
  hf_golden.py --model /work/shared/golden/tiny-v4-c/model --sequences /work/shared/golden/tiny-v4-c/sequences.json \
               --out /tmp/hf-c --compare /work/shared/golden/tiny-v4-c/logits/exact
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import re
import struct
import sys
import time
from pathlib import Path

import numpy as np

N_GEN = 32

# ----------------------------------------------------------------------------------------------
# Reading the official checkpoint (numpy only) and exact dequantisation (spec section 3)
# ----------------------------------------------------------------------------------------------


def _e4m3_table() -> np.ndarray:
    t = np.zeros(256, dtype=np.float32)
    for b in range(256):
        s = -1.0 if b & 0x80 else 1.0
        e, m = (b >> 3) & 15, b & 7
        t[b] = s * (m * 2.0 ** -9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
    t[0x7F] = t[0xFF] = np.nan
    return t


E4M3 = _e4m3_table()
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, 0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float32)


def e8m0(b: np.ndarray) -> np.ndarray:
    out = np.ldexp(np.float32(1.0), b.astype(np.int32) - 127).astype(np.float32)
    out[b == 0xFF] = np.nan
    return out


class Checkpoint:
    """All *.safetensors files of a folder, memory-mapped."""

    def __init__(self, folder: Path):
        self.entries = {}
        files = sorted(folder.glob("*.safetensors"))
        if not files:
            raise SystemExit(f"no .safetensors in {folder}")
        for path in files:
            raw = np.memmap(path, dtype=np.uint8, mode="r")
            n = struct.unpack("<Q", bytes(raw[:8]))[0]
            header = json.loads(bytes(raw[8:8 + n]))
            base = 8 + n
            for name, v in header.items():
                if name == "__metadata__":
                    continue
                a, b = v["data_offsets"]
                self.entries[name] = (v["dtype"], tuple(v["shape"]), raw[base + a:base + b])

    def names(self):
        return self.entries.keys()

    def raw(self, name):
        return self.entries[name]

    def f32(self, name: str) -> np.ndarray:
        """Exact float32 value of a weight (scale tensors applied)."""
        dtype, shape, buf = self.entries[name]
        if dtype == "F32":
            return buf.view("<f4").reshape(shape).astype(np.float32)
        if dtype == "BF16":
            return (buf.view("<u2").astype(np.uint32) << 16).view(np.float32).reshape(shape)
        if dtype in ("I32", "I64"):
            return buf.view("<i4" if dtype == "I32" else "<i8").reshape(shape)
        scale_name = name[:-len(".weight")] + ".scale"
        if dtype == "F8_E4M3":
            w = E4M3[buf].reshape(shape)
            sd, sshape, sbuf = self.entries[scale_name]
            s = e8m0(np.asarray(sbuf).reshape(sshape))
            bo = -(-shape[0] // sshape[0])
            bi = -(-shape[1] // sshape[1])
            s = np.repeat(np.repeat(s, bo, axis=0), bi, axis=1)[:shape[0], :shape[1]]
            return w * s
        if dtype == "I8":                       # packed fp4 e2m1, low nibble = even column
            u = np.asarray(buf).reshape(shape)
            w = np.empty((shape[0], shape[1] * 2), dtype=np.float32)
            w[:, 0::2] = E2M1[u & 15]
            w[:, 1::2] = E2M1[u >> 4]
            sd, sshape, sbuf = self.entries[scale_name]
            s = e8m0(np.asarray(sbuf).reshape(sshape))
            return w * np.repeat(s, w.shape[1] // sshape[1], axis=1)
        raise ValueError(f"{name}: unsupported dtype {dtype}")

# ----------------------------------------------------------------------------------------------
# Official name -> HF module name (spec section 4.3)
# ----------------------------------------------------------------------------------------------

LAYER_MAP = [
    (r"hc_attn_fn", "attn_hc.fn"), (r"hc_attn_base", "attn_hc.base"), (r"hc_attn_scale", "attn_hc.scale"),
    (r"hc_ffn_fn", "ffn_hc.fn"), (r"hc_ffn_base", "ffn_hc.base"), (r"hc_ffn_scale", "ffn_hc.scale"),
    (r"attn_norm\.weight", "input_layernorm.weight"),
    (r"ffn_norm\.weight", "post_attention_layernorm.weight"),
    (r"attn\.attn_sink", "self_attn.sinks"),
    (r"attn\.wq_a\.weight", "self_attn.q_a_proj.weight"),
    (r"attn\.q_norm\.weight", "self_attn.q_a_norm.weight"),
    (r"attn\.wq_b\.weight", "self_attn.q_b_proj.weight"),
    (r"attn\.wkv\.weight", "self_attn.kv_proj.weight"),
    (r"attn\.kv_norm\.weight", "self_attn.kv_norm.weight"),
    (r"attn\.wo_a\.weight", "self_attn.o_a_proj.weight"),
    (r"attn\.wo_b\.weight", "self_attn.o_b_proj.weight"),
    (r"attn\.compressor\.wkv\.weight", "self_attn.compressor.kv_proj.weight"),
    (r"attn\.compressor\.wgate\.weight", "self_attn.compressor.gate_proj.weight"),
    (r"attn\.compressor\.ape", "self_attn.compressor.position_bias"),
    (r"attn\.compressor\.norm\.weight", "self_attn.compressor.kv_norm.weight"),
    (r"attn\.indexer\.wq_b\.weight", "self_attn.compressor.indexer.q_b_proj.weight"),
    (r"attn\.indexer\.weights_proj\.weight", "self_attn.compressor.indexer.scorer.weights_proj.weight"),
    (r"attn\.indexer\.compressor\.wkv\.weight", "self_attn.compressor.indexer.kv_proj.weight"),
    (r"attn\.indexer\.compressor\.wgate\.weight", "self_attn.compressor.indexer.gate_proj.weight"),
    (r"attn\.indexer\.compressor\.ape", "self_attn.compressor.indexer.position_bias"),
    (r"attn\.indexer\.compressor\.norm\.weight", "self_attn.compressor.indexer.kv_norm.weight"),
    (r"ffn\.gate\.weight", "mlp.gate.weight"),
    (r"ffn\.gate\.bias", "mlp.gate.e_score_correction_bias"),
    (r"ffn\.gate\.tid2eid", "mlp.gate.tid2eid"),
    (r"ffn\.shared_experts\.w1\.weight", "mlp.shared_experts.gate_proj.weight"),
    (r"ffn\.shared_experts\.w3\.weight", "mlp.shared_experts.up_proj.weight"),
    (r"ffn\.shared_experts\.w2\.weight", "mlp.shared_experts.down_proj.weight"),
]
TOP_MAP = {
    "embed.weight": "model.embed_tokens.weight",
    "head.weight": "lm_head.weight",
    "norm.weight": "model.norm.weight",
    "hc_head_fn": "model.hc_head.hc_fn",
    "hc_head_base": "model.hc_head.hc_base",
    "hc_head_scale": "model.hc_head.hc_scale",
}
EXPERT_RE = re.compile(r"layers\.(\d+)\.ffn\.experts\.(\d+)\.(w[123])\.weight$")


def hf_state_dict(ck: Checkpoint, n_layers: int, n_experts: int):
    """Returns (state dict of numpy arrays keyed by HF names, list of skipped official names)."""
    import torch  # noqa: F401  (caller converts)
    sd, skipped, experts = {}, [], {}
    for name in ck.names():
        if name.endswith(".scale"):
            continue
        if name.startswith("mtp."):
            skipped.append(name)                  # HF's V4 port has no MTP module
            continue
        if name in TOP_MAP:
            sd[TOP_MAP[name]] = ck.f32(name)
            continue
        m = EXPERT_RE.match(name)
        if m:
            experts[(int(m.group(1)), int(m.group(2)), m.group(3))] = name
            continue
        m = re.match(r"layers\.(\d+)\.(.*)$", name)
        if not m:
            raise SystemExit(f"unmapped tensor {name}")
        layer, rest = m.group(1), m.group(2)
        for pat, hf in LAYER_MAP:
            if re.fullmatch(pat, rest):
                sd[f"model.layers.{layer}.{hf}"] = ck.f32(name)
                break
        else:
            raise SystemExit(f"unmapped tensor {name}")
    for layer in range(n_layers):
        gate_up, down = [], []
        for e in range(n_experts):
            w1 = ck.f32(experts.pop((layer, e, "w1")))
            w3 = ck.f32(experts.pop((layer, e, "w3")))
            gate_up.append(np.concatenate([w1, w3], axis=0))     # w1 rows first, then w3
            down.append(ck.f32(experts.pop((layer, e, "w2"))))
        sd[f"model.layers.{layer}.mlp.experts.gate_up_proj"] = np.stack(gate_up)
        sd[f"model.layers.{layer}.mlp.experts.down_proj"] = np.stack(down)
    if experts:
        raise SystemExit(f"unexpected expert tensors: {sorted(experts)[:4]}")
    return sd, skipped

# ----------------------------------------------------------------------------------------------
# Model
# ----------------------------------------------------------------------------------------------


def load_model(model_dir: Path, threads: int):
    import torch
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

    torch.set_num_threads(threads)
    torch.set_default_dtype(torch.float32)
    raw_cfg = json.loads((model_dir / "config.json").read_text())
    cfg = {k: v for k, v in raw_cfg.items() if not k.startswith("_deepinfer")}
    # Build the model from the plain structure; the weights are dequantised here, so the FP8
    # quantizer that `quantization_config` would select is not wanted.
    cfg.pop("quantization_config", None)
    cfg["torch_dtype"] = "float32"
    config = DeepseekV4Config(**cfg)
    config._attn_implementation = "eager"
    model = DeepseekV4ForCausalLM(config).to(torch.float32).eval()

    ck = Checkpoint(model_dir)
    sd_np, skipped = hf_state_dict(ck, config.num_hidden_layers, config.n_routed_experts)
    sd = {}
    for k, v in sd_np.items():
        t = torch.from_numpy(np.array(v, copy=True))
        sd[k] = t.long() if k.endswith("tid2eid") else t.float()
    own = model.state_dict()
    missing = [k for k in own if k not in sd and not k.endswith("inv_freq")]
    unexpected = [k for k in sd if k not in own]
    if missing or unexpected:
        raise SystemExit(f"state dict mismatch: missing {missing[:8]}, unexpected {unexpected[:8]}")
    for k, v in sd.items():
        if tuple(own[k].shape) != tuple(v.shape):
            raise SystemExit(f"{k}: checkpoint shape {tuple(v.shape)} != HF {tuple(own[k].shape)}")
    model.load_state_dict(sd, strict=False)
    for k, v in model.state_dict().items():               # everything fp32 (tid2eid: int64)
        if v.is_floating_point() and v.dtype != torch.float32:
            raise SystemExit(f"{k} is {v.dtype}, expected float32")
    return model, config, raw_cfg, skipped


class Diagnostics:
    """Forward hooks that measure how close the model's discrete decisions are to a tie:
    the gap between the k-th and (k+1)-th lightning-indexer score where top-k drops entries,
    and between the k-th and (k+1)-th biased router score.  A small gap means another fp32
    implementation may legitimately choose differently there."""

    def __init__(self, model, config):
        self.config, self.pos, self.where, self.enabled = config, None, "", True
        self.indexer, self.router, self.clamp = {}, {}, {}
        for i, layer in enumerate(model.model.layers):
            comp = layer.self_attn.compressor
            if comp is not None and hasattr(comp, "indexer"):
                comp.indexer.scorer.register_forward_hook(self._scores_hook(i))
            if not layer.mlp.is_hash:
                layer.mlp.gate.register_forward_hook(self._router_hook(i, layer.mlp.gate))
            layer.mlp.shared_experts.register_forward_hook(self._clamp_hook(i))

    def reset(self):
        self.indexer, self.router, self.clamp = {}, {}, {}

    def _clamp_hook(self, layer):
        def hook(mod, inp, out):
            if not self.enabled:
                return
            x = inp[0]
            gate, up = mod.gate_proj(x), mod.up_proj(x)
            c = self.clamp.setdefault(layer, {"gate_above": 0, "up_outside": 0, "values": 0})
            c["gate_above"] += int((gate > mod.limit).sum())
            c["up_outside"] += int((up.abs() > mod.limit).sum())
            c["values"] += gate.numel()
        return hook

    @staticmethod
    def _keep_min(table, key, gap, rel, label):
        cur = table.setdefault(key, {"decisions": 0, "exact_ties": 0, "min_gap": float("inf")})
        cur["decisions"] += 1
        cur["exact_ties"] += gap == 0.0
        if gap < cur["min_gap"]:
            cur.update(min_gap=gap, min_gap_rel_to_score_std=rel, at=label)

    def _scores_hook(self, layer):
        def hook(mod, inp, out):
            import torch
            if not self.enabled:
                return
            scores = out[0].double()                                  # [S, T]
            k = self.config.index_topk
            n_vis = (self.pos + 1) // self.config.compress_rates["compressed_sparse_attention"]
            for r in range(scores.shape[0]):
                n = int(min(n_vis[r], scores.shape[1]))
                if n <= k:
                    continue
                row = torch.sort(scores[r, :n], descending=True).values
                gap = float(row[k - 1] - row[k])
                rel = gap / max(float(row.std()), 1e-30)
                self._keep_min(self.indexer, layer, gap, rel, f"{self.where} row {r}")
        return hook

    def _router_hook(self, layer, gate):
        def hook(mod, inp, out):
            import torch
            if not self.enabled:
                return
            logits = out[0].double()
            scores = torch.sqrt(torch.nn.functional.softplus(logits))
            sel = torch.sort(scores + gate.e_score_correction_bias.double(), dim=-1, descending=True).values
            k = self.config.num_experts_per_tok
            if sel.shape[-1] <= k:
                return
            gaps = sel[:, k - 1] - sel[:, k]
            for r in range(gaps.shape[0]):
                g = float(gaps[r])
                rel = g / max(float(scores[r].std()), 1e-30)
                self._keep_min(self.router, layer, g, rel, f"{self.where} row {r}")
        return hook

    def summary(self):
        return {"indexer_topk_boundary": {str(k): v for k, v in sorted(self.indexer.items())},
                "router_topk_boundary": {str(k): v for k, v in sorted(self.router.items())},
                "shared_expert_swiglu_clamp_hits": {str(k): v for k, v in sorted(self.clamp.items())
                                                    if v["gate_above"] or v["up_outside"]}}


def run_sequence(model, tokens: list[int], n_gen: int = N_GEN, diag: Diagnostics | None = None):
    """Prefill the whole sequence in one call, then greedy single-token decode with the cache."""
    import torch
    from transformers import DynamicCache

    with torch.no_grad():
        cache = DynamicCache(config=model.config)
        ids = torch.tensor([tokens], dtype=torch.long)
        if diag:
            diag.pos, diag.where = torch.arange(len(tokens)), "prefill"
        out = model(input_ids=ids, cache=cache, use_cache=True)
        prefill = out.logits[0].float().numpy().copy()
        cache = out.cache
        rows, gen = [prefill[-1]], []
        for g in range(n_gen):
            nxt = int(np.argmax(rows[-1]))             # first maximum = lowest id on ties
            gen.append(nxt)
            if g == n_gen - 1:
                break
            pos = torch.tensor([[len(tokens) + g]], dtype=torch.long)
            if diag:
                diag.pos, diag.where = pos[0], f"gen step {g + 1}"
            out = model(input_ids=torch.tensor([[nxt]], dtype=torch.long), cache=cache,
                        position_ids=pos, use_cache=True)
            cache = out.cache
            rows.append(out.logits[0, -1].float().numpy().copy())
    return prefill.astype(np.float32), np.array(gen, dtype=np.int32), np.stack(rows).astype(np.float32)

def self_check(model, tokens: list[int], prefill: np.ndarray) -> dict:
    """HF's own prefill/decode consistency: token-by-token decode from position 0, and a prefill
    of the first half followed by decode, both against the single-call prefill rows."""
    import torch
    from transformers import DynamicCache

    res = {}
    n = len(tokens)
    with torch.no_grad():
        for split in sorted({0, n // 2}):
            cache, rows = DynamicCache(config=model.config), []
            if split:
                out = model(input_ids=torch.tensor([tokens[:split]]), cache=cache, use_cache=True)
                cache, rows = out.cache, list(out.logits[0].float().numpy())
            for p in range(split, n):
                out = model(input_ids=torch.tensor([[tokens[p]]]), cache=cache,
                            position_ids=torch.tensor([[p]]), use_cache=True)
                cache = out.cache
                rows.append(out.logits[0, -1].float().numpy())
            d = np.abs(np.stack(rows).astype(np.float64) - prefill).max(axis=1)
            label = "decode_all" if split == 0 else f"prefill_{split}_then_decode"
            res[label] = {"max_abs": float(d.max()), "worst_row": int(d.argmax())}
    return res


# ----------------------------------------------------------------------------------------------
# Sequences, comparison, manifest
# ----------------------------------------------------------------------------------------------


def make_sequences(lengths, vocab: int, seed: int) -> dict:
    """BOS (0) followed by uniform ids in [3, vocab) - the recipe of the shared golden sets."""
    rng = np.random.default_rng(seed)
    seqs = {}
    for n in lengths:
        body = rng.integers(3, vocab, size=n - 1).tolist() if n > 1 else []
        seqs[f"seq{n}"] = [0] + [int(t) for t in body]
    return seqs


def compare(a: np.ndarray, b: np.ndarray) -> dict:
    d = np.abs(a.astype(np.float64) - b.astype(np.float64))
    row_max = d.max(axis=-1)
    std = b.astype(np.float64).std(axis=-1)
    return {
        "max_abs": float(d.max()),
        "median_row_max_abs": float(np.median(row_max)),
        "max_rel_to_std": float((row_max / std).max()),
        "argmax_agree": float(np.mean(a.argmax(-1) == b.argmax(-1))),
        "worst_row": int(row_max.argmax()),
    }


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def versions() -> dict:
    import torch
    import transformers
    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "numpy": np.__version__,
            "machine": platform.machine(), "torch_threads": torch.get_num_threads()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="checkpoint folder (official layout)")
    ap.add_argument("--out", required=True, help="output folder for seqN.* + manifest.json")
    ap.add_argument("--sequences", help="sequences.json to use (else generated)")
    ap.add_argument("--lengths", default="1,7,40,300")
    ap.add_argument("--seq-seed", type=int, default=4711, help="numpy seed of generated sequences")
    ap.add_argument("--compare", help="folder with reference seqN.* files to compare against")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-self-check", action="store_true", help="skip the decode-vs-prefill check")
    ap.add_argument("--no-diagnostics", action="store_true", help="skip the tie-gap hooks")
    ap.add_argument("--name", help="name recorded in the manifest")
    ap.add_argument("--generator-command", help="make_checkpoint.py command recorded in the manifest")
    args = ap.parse_args(argv)

    t0 = time.time()
    model_dir, out = Path(args.model), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model, config, raw_cfg, skipped = load_model(model_dir, args.threads)
    vocab = config.vocab_size
    if args.sequences:
        seqs = json.loads(Path(args.sequences).read_text())
        seq_origin = {"file": str(args.sequences)}
    else:
        lengths = [int(x) for x in args.lengths.split(",")]
        seqs = make_sequences(lengths, vocab, args.seq_seed)
        seq_origin = {"recipe": "BOS 0 + numpy.random.default_rng(seed).integers(3, vocab, N-1), "
                                "lengths in order", "seed": args.seq_seed, "lengths": lengths}
    (out / "sequences.json").write_text(json.dumps(seqs) + "\n")

    diag = None if args.no_diagnostics else Diagnostics(model, config)
    greedy, comparisons, diagnostics, consistency = {}, {}, {}, {}
    for key, toks in seqs.items():
        ts = time.time()
        if diag:
            diag.reset()
        prefill, gen, genf = run_sequence(model, toks, diag=diag)
        if diag:
            diagnostics[key] = diag.summary()
            diag.reset()
        if not args.no_self_check and len(toks) > 1:
            if diag:
                diag.enabled = False
            consistency[key] = self_check(model, toks, prefill)
            if diag:
                diag.enabled = True
        prefill.tofile(out / f"{key}.prefill.f32")
        gen.astype("<i4").tofile(out / f"{key}.gen.i32")
        genf.tofile(out / f"{key}.gen.f32")
        greedy[key] = gen.tolist()
        msg = f"{key}: {len(toks)} tokens, {time.time() - ts:.1f} s"
        if args.compare:
            ref = Path(args.compare)
            rp = np.fromfile(ref / f"{key}.prefill.f32", dtype="<f4").reshape(prefill.shape)
            rg = np.fromfile(ref / f"{key}.gen.f32", dtype="<f4").reshape(genf.shape)
            ri = np.fromfile(ref / f"{key}.gen.i32", dtype="<i4")
            prefix = int(np.argmax(np.append(gen != ri, True)))
            c = {"prefill": compare(prefill, rp), "gen_greedy_prefix": prefix}
            if prefix == N_GEN:                      # same continuation: rows comparable
                c["gen"] = compare(genf, rg)
            else:                                   # rows up to the first different token
                c["gen_rows_0_to_prefix"] = compare(genf[:prefix + 1], rg[:prefix + 1])
            comparisons[key] = c
            msg += (f"; vs {ref.name}: prefill max|d| {c['prefill']['max_abs']:.3g} "
                    f"argmax {c['prefill']['argmax_agree']:.3f}, greedy prefix {prefix}/{N_GEN}")
            if "gen" in c:
                msg += f", gen max|d| {c['gen']['max_abs']:.3g}"
        print(msg, file=sys.stderr)

    cfg_path = model_dir / "config.json"
    manifest = {
        "name": args.name or model_dir.name,
        "reference": "Hugging Face transformers deepseek_v4 (DeepseekV4ForCausalLM), fp32 weights "
                     "dequantised exactly from the checkpoint, fp32 compute on CPU, eager attention",
        "numerics": "float (no FP8/FP4 activation QDQ, no KV QDQ, no indexer Hadamard/FP4; "
                    "see tools/golden/README.md) - compare with DeepInfer --numerics float",
        "n_vocab": vocab,
        "n_gen": N_GEN,
        "sequences": {k: len(v) for k, v in seqs.items()},
        "sequence_origin": seq_origin,
        "prefill": "whole sequence in one forward call (HF DynamicCache), all rows returned",
        "decode": "one token per call with the HF cache; row 0 of gen.f32 = last prefill row",
        "greedy": greedy,
        "mtp_tensors_ignored": len(skipped),
        "model": {
            "config": raw_cfg,
            "config_sha256": sha256(cfg_path),
            "safetensors_sha256": {p.name: sha256(p) for p in sorted(model_dir.glob("*.safetensors"))},
        },
        "versions": versions(),
        "wall_seconds": round(time.time() - t0, 1),
    }
    if args.generator_command:
        manifest["model"]["generator_command"] = args.generator_command
    if consistency:
        manifest["hf_self_consistency"] = {
            "what": "HF token-by-token decode (and half prefill + decode) vs the single-call "
                    "prefill rows, max |d| over the vocabulary",
            "per_sequence": consistency}
    if diagnostics:
        manifest["tie_diagnostics"] = {
            "what": "smallest gap between the k-th and (k+1)-th score at every top-k decision "
                    "(indexer: masked scores of rows whose visible entries exceed index_topk; "
                    "router: sqrt(softplus(logit)) + bias of non-hash layers), per layer; "
                    "rel = gap / std of that row's scores",
            "per_sequence": diagnostics}
    if comparisons:
        manifest["comparison"] = {"against": str(args.compare), "per_sequence": comparisons}
    files = sorted(p for p in out.iterdir() if p.is_file() and p.name != "manifest.json")
    manifest["files"] = {p.name: {"sha256": sha256(p), "bytes": p.stat().st_size} for p in files}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"hf_golden: wrote {len(files)} files + manifest.json to {out} in {time.time() - t0:.0f} s",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
