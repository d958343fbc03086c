#!/usr/bin/env python3
"""An independent float64 numpy model of DeepSeek-V4.1 (docs/model/v41.md), for goldens of
DeepInfer's `--numerics float` (the same model with the exactly decoded weights and no
quantise-dequantise or bf16 rounding). Written from the spec and the reference's structure,
not from DeepInfer's C++: a prefill of the whole sequence, every row's logits.

What it computes, per layer L (rows t at positions t):
  Engram (engram layers, before the block): hash ids of the 2..max n-grams of compressed ids,
    table rows -> wkv -> hc keys + one value; X[i] += sigmoid(signed sqrt(gate dot)) * value
  staggered mHC: the attention site collapses X with the previous site's pre (one-hot before
    layer 0), the FFN site with the attention site's pre, the head with the last FFN's pre
  attention: q = wq_b(rms(wq_a a)) (no head norm), RoPE; window keys rms(wkv a), RoPE; a KV
    source compresses (ratio 1: rms(wkv a); ratio r > 1: per-channel softmax pooling of r
    tokens) into latents whose index keys are rms(wk latent) RoPE'd at the group's first
    position, and the latent RoPE'd there too; an index source scores the governing source's
    keys (relu(q.k) weighted by weights_proj / sqrt(DI * HI), summed over heads), the candidate
    source also keeps its best blocks (newest pinned), later index sources choose only inside
    them; every compressed layer attends to the latest top-k (plus the window); sink softmax;
    inverse RoPE; grouped wo_a; wo_b
  MoE: sqrt-softplus of gate / gate_temp, top-k of score + bias (ties: lower id), renormalised
    (+1e-20), times routed_scaling_factor; clamped SwiGLU experts and the shared expert.

Usage:
  v41_numpy.py --model DIR --sequences seqs.json --out DIR     writes seqN.prefill.f32 [N, vocab]
  v41_numpy.py --model DIR --tokens 0,17,42 --out DIR --name x
"""

from __future__ import annotations

import argparse
import json
import math
import struct
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engram_token_map import engram_data  # noqa: E402

# ---------------------------------------------------------------- checkpoint (exact decoding)

E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, 0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float64)


def e4m3_values() -> np.ndarray:
    v = np.zeros(256)
    for b in range(256):
        e, m = (b >> 3) & 15, b & 7
        mag = m * 2.0 ** -9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
        v[b] = -mag if b & 0x80 else mag
    return v


E4M3 = e4m3_values()


class Checkpoint:
    def __init__(self, d: Path):
        raw = (d / "model.safetensors").read_bytes()
        n = struct.unpack("<Q", raw[:8])[0]
        self.header = json.loads(raw[8:8 + n])
        self.header.pop("__metadata__", None)
        self.data = memoryview(raw)[8 + n:]
        cfg = json.loads((d / "config.json").read_text())
        self.root = cfg
        self.c = cfg.get("text_config", cfg)
        self.block = cfg.get("quantization_config", {}).get("weight_block_size", [32, 32])[0]

    def has(self, name):
        return name in self.header

    def raw(self, name):
        h = self.header[name]
        a, b = h["data_offsets"]
        return h["dtype"], h["shape"], self.data[a:b]

    def get(self, name) -> np.ndarray:
        """A weight as float64, dequantised exactly (FP8 32x32 blocks, FP4 per 32 columns)."""
        dt, shape, buf = self.raw(name)
        if dt == "F32":
            return np.frombuffer(buf, dtype="<f4").astype(np.float64).reshape(shape)
        if dt == "BF16":
            u = np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16
            return u.view(np.float32).astype(np.float64).reshape(shape)
        base = name[:-len(".weight")] if name.endswith(".weight") else name
        sdt, sshape, sbuf = self.raw(base + ".scale")
        scale = np.ldexp(1.0, np.frombuffer(sbuf, dtype=np.uint8).astype(np.int64) - 127).reshape(sshape)
        if dt == "F8_E4M3":
            w = E4M3[np.frombuffer(buf, dtype=np.uint8)].reshape(shape)
            B = self.block
            return w * np.repeat(np.repeat(scale, B, axis=0), B, axis=1)[:shape[0], :shape[1]]
        if dt in ("I8", "U8"):
            b = np.frombuffer(buf, dtype=np.uint8).reshape(shape)
            w = np.empty((shape[0], shape[1] * 2))
            w[:, 0::2] = E2M1[b & 15]
            w[:, 1::2] = E2M1[b >> 4]
            return w * np.repeat(scale, 32, axis=1)
        raise ValueError(f"{name}: dtype {dt}")

    def engram_table(self, prefix) -> np.ndarray:
        """e4m3 rows with one ue8m0 scale per row and 32 columns."""
        _, shape, buf = self.raw(prefix + "embed.weight")
        _, sshape, sbuf = self.raw(prefix + "embed.scale")
        w = E4M3[np.frombuffer(buf, dtype=np.uint8)].reshape(shape)
        s = np.ldexp(1.0, np.frombuffer(sbuf, dtype=np.uint8).astype(np.int64) - 127).reshape(sshape)
        return w * np.repeat(s, 32, axis=1)


# ---------------------------------------------------------------- pieces


def rms(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * (w if w is not None else 1.0)


def inv_freq(c, compressed: bool) -> np.ndarray:
    dr = c["qk_rope_head_dim"]
    base = c["compress_rope_theta"] if compressed else c["rope_theta"]
    f = 1.0 / base ** (np.arange(0, dr, 2) / dr)
    rs = c.get("rope_scaling")
    if compressed and rs:
        orig, factor = rs["original_max_position_embeddings"], rs["factor"]

        def corr(rot):
            return dr * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))

        low = max(math.floor(corr(rs.get("beta_fast", 32))), 0)
        high = min(math.ceil(corr(rs.get("beta_slow", 1))), dr - 1)
        ramp = np.clip((np.arange(dr // 2) - low) / max(high - low, 1e-3), 0, 1)
        f = f / factor * ramp + f * (1 - ramp)
    return f


def rope(x, pos, freqs, inverse=False):
    """Rotate interleaved pairs of the last 2*len(freqs) dims; x [..., n], pos broadcast on x[..., 0]."""
    dr = 2 * len(freqs)
    ang = np.asarray(pos, dtype=np.float64)[..., None] * freqs
    c, s = np.cos(ang), np.sin(ang) * (-1 if inverse else 1)
    y = x.copy()
    u, v = x[..., -dr::2], x[..., -dr + 1::2]
    y[..., -dr::2] = u * c - v * s
    y[..., -dr + 1::2] = u * s + v * c
    return y


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def top_order(score, k):
    """Indices of the k best scores, ties to the lower index."""
    return sorted(range(len(score)), key=lambda i: (-score[i], i))[:k]


class Model:
    def __init__(self, d: Path):
        self.ck = ck = Checkpoint(d)
        self.c = c = ck.c
        self.eps = c.get("rms_norm_eps", 1e-20)
        self.L = c["num_hidden_layers"]
        self.ratios = c["compress_ratios"]
        self.kv_src = c["kv_source_layer_ids"]
        self.ix_src = c["index_source_layer_ids"]
        self.cand_src = c.get("candidate_source_layer_id", -1)
        tok = json.loads((d / "tokenizer.json").read_text(encoding="utf-8"))
        self.engram = engram_data(c, tok, c.get("engram_pad_token_id", 2)) if c.get("engram_layer_ids") else None
        self.main_f, self.comp_f = inv_freq(c, False), inv_freq(c, True)

    def w(self, name):
        return self.ck.get(name)

    # -- mHC
    def mixes(self, X, prefix):
        c = self.c
        hc = c["hc_mult"]
        flat = X.reshape(X.shape[0], -1)
        mix = flat @ self.w(prefix + "_fn").T / np.sqrt(np.mean(flat * flat, axis=1, keepdims=True) + self.eps)
        s, b = self.w(prefix + "_scale"), self.w(prefix + "_base")
        pre = sigmoid(mix[:, :hc] * s[0] + b[:hc]) + c["hc_eps"]
        post = 2 * sigmoid(mix[:, hc:2 * hc] * s[1] + b[hc:2 * hc])
        comb = (mix[:, 2 * hc:] * s[2] + b[2 * hc:]).reshape(-1, hc, hc)
        comb = np.exp(comb - comb.max(axis=2, keepdims=True))
        comb = comb / comb.sum(axis=2, keepdims=True) + c["hc_eps"]
        comb = comb / (comb.sum(axis=1, keepdims=True) + c["hc_eps"])
        for _ in range(c["hc_sinkhorn_iters"] - 1):
            comb = comb / (comb.sum(axis=2, keepdims=True) + c["hc_eps"])
            comb = comb / (comb.sum(axis=1, keepdims=True) + c["hc_eps"])
        return pre, post, comb

    @staticmethod
    def collapse(X, pre):
        return np.einsum("ti,tid->td", pre, X)

    @staticmethod
    def expand(o, R, post, comb):
        return post[:, :, None] * o[:, None, :] + np.einsum("tik,tid->tkd", comb, R)

    # -- Engram
    def engram_ids(self, tokens, e):
        eg, c = self.engram, self.c
        G, H = c["engram_max_ngram_size"], c["engram_n_heads"]
        primes = [p for g in eg["primes"][e] for p in g]
        offsets = np.cumsum([0] + primes[:-1])
        mult = eg["hash_multipliers"][e]
        ids = []
        for p in range(len(tokens)):
            toks = [eg["token_map"][tokens[p - k]] if p - k >= 0 else eg["pad_compressed_id"] for k in range(G)]
            v, row = toks[0] * mult[0], []
            for n in range(1, G):
                v ^= toks[n] * mult[n]
                row += [v % primes[(n - 1) * H + h] + int(offsets[(n - 1) * H + h]) for h in range(H)]
            ids.append(row)
        return np.array(ids)

    def engram_apply(self, X, tokens, layer):
        c = self.c
        e = c["engram_layer_ids"].index(layer)
        p = f"layers.{layer}.engram."
        table = self.ck.engram_table(p)
        ids = self.engram_ids(tokens, e)
        emb = table[ids].reshape(len(tokens), -1)
        kv = emb @ self.w(p + "wkv.weight").T
        hc, d = c["hc_mult"], c["hidden_size"]
        key, value = kv[:, :hc * d].reshape(-1, hc, d), kv[:, hc * d:]
        wq = self.w(p + "q_weight") * self.w(p + "k_weight")
        rstd = 1 / np.sqrt(np.mean(X * X, axis=2) + self.eps) / np.sqrt(np.mean(key * key, axis=2) + self.eps)
        dot = np.sum(X * wq[None] * key, axis=2) * rstd / math.sqrt(d)
        gate = sigmoid(np.sign(dot) * np.sqrt(np.maximum(np.abs(dot), 1e-6)))
        return X + gate[:, :, None] * value[:, None, :]

    # -- attention
    def attention(self, layer, a, state):
        c = self.c
        S, H, Dh = a.shape[0], c["num_attention_heads"], c["head_dim"]
        r = self.ratios[layer]
        freqs = self.comp_f if r else self.main_f
        p = f"layers.{layer}.attn."
        pos = np.arange(S)
        qr = rms(a @ self.w(p + "wq_a.weight").T, self.w(p + "q_norm.weight"), self.eps)
        q = rope((qr @ self.w(p + "wq_b.weight").T).reshape(S, H, Dh), pos[:, None], freqs)
        kv = rope(rms(a @ self.w(p + "wkv.weight").T, self.w(p + "kv_norm.weight"), self.eps), pos, freqs)
        if r and layer in self.kv_src:
            self.compress(layer, a, r, freqs, state)
        if r and layer in self.ix_src:
            state["topk"] = self.select(layer, a, qr, r, freqs, state)
        src = max(s for s in self.kv_src if s <= layer) if r else None
        W, sink = c["sliding_window"], self.w(p + "attn_sink")
        out = np.zeros((S, H, Dh))
        for t in range(S):
            keys = [kv[j] for j in range(max(0, t - W + 1), t + 1)]
            if r:
                keys += [state["entries"][src][e] for e in state["topk"][t]]
            K = np.stack(keys)
            s = q[t] @ K.T / math.sqrt(Dh)
            m = s.max(axis=1, keepdims=True)
            pr = np.exp(s - m)
            out[t] = pr @ K / (pr.sum(axis=1, keepdims=True) + np.exp(sink[:, None] - m))
        out = rope(out, pos[:, None], freqs, inverse=True)
        G, Ro = c["o_groups"], c["o_lora_rank"]
        wo_a = self.w(p + "wo_a.weight").reshape(G, Ro, -1)
        og = out.reshape(S, G, -1)
        u = np.einsum("tgd,grd->tgr", og, wo_a).reshape(S, -1)
        return u @ self.w(p + "wo_b.weight").T

    def compress(self, layer, a, r, freqs, state):
        p = f"layers.{layer}.attn."
        kvp = a @ self.w(p + "compressor.wkv.weight").T
        if r == 1:
            z = kvp
        else:
            sc = a @ self.w(p + "compressor.wgate.weight").T
            n = a.shape[0] // r  # complete groups only
            kvp, sc = kvp[:n * r].reshape(n, r, kvp.shape[1]), sc[:n * r].reshape(n, r, sc.shape[1])
            wgt = np.exp(sc - sc.max(axis=1, keepdims=True))
            z = np.sum(kvp * wgt / wgt.sum(axis=1, keepdims=True), axis=1)
        lat = rms(z, self.w(p + "compressor.norm.weight"), self.eps)
        gpos = np.arange(lat.shape[0]) * r
        keys = rms(lat @ self.w(p + "indexer.wk.weight").T, self.w(p + "indexer.k_norm.weight"), self.eps)
        state["keys"][layer] = rope(keys, gpos, freqs)
        state["entries"][layer] = rope(lat, gpos, freqs)

    def select(self, layer, a, qr, r, freqs, state):
        c = self.c
        S, HI, DI = a.shape[0], c["index_n_heads"], c["index_head_dim"]
        p = f"layers.{layer}.attn.indexer."
        src = max(s for s in self.kv_src if s <= layer)
        K = state["keys"][src]
        iq = rope((qr @ self.w(p + "wq_b.weight").T).reshape(S, HI, DI), np.arange(S)[:, None], freqs)
        wts = (a @ self.w(p + "weights_proj.weight").T) / math.sqrt(DI) / math.sqrt(HI)
        B, kb = c.get("candidate_block_size", 0), c.get("candidate_topk_blocks", 0)
        topk = []
        if layer == self.cand_src:
            state["cand"] = []
        for t in range(S):
            n_vis = (t + 1) // r
            score = (np.maximum(iq[t] @ K[:n_vis].T, 0) * wts[t][:, None]).sum(axis=0)
            if layer == self.cand_src:
                nb = -(-n_vis // B)
                best = [score[b * B:(b + 1) * B].max() for b in range(nb)]
                if nb:
                    best[-1] = np.inf
                state["cand"].append({e for b in top_order(best, min(kb, nb)) for e in range(b * B, min(n_vis, (b + 1) * B))})
            if 0 <= self.cand_src < layer:
                score = np.array([score[e] if e in state["cand"][t] else -np.inf for e in range(n_vis)])
            topk.append(sorted(top_order(list(score), min(c["index_topk"], n_vis))))
        return topk

    # -- MoE
    def moe(self, layer, x):
        c = self.c
        p = f"layers.{layer}.ffn."
        logits = x @ self.w(p + "gate.weight").T / c.get("gate_temp", 1.0)
        score = np.sqrt(np.where(logits > 20, logits, np.log1p(np.exp(np.minimum(logits, 20)))))
        bias = self.w(p + "gate.bias")
        lim, k = c.get("swiglu_limit", 0), c["num_experts_per_tok"]
        y = np.zeros_like(x)

        def expert(q, xx, weight):
            g, u = xx @ self.w(q + "w1.weight").T, xx @ self.w(q + "w3.weight").T
            if lim > 0:
                u, g = np.clip(u, -lim, lim), np.minimum(g, lim)
            return (weight * g * sigmoid(g) * u) @ self.w(q + "w2.weight").T

        for t in range(x.shape[0]):
            idx = top_order(list(score[t] + bias), k)
            wsel = score[t][idx]
            if c.get("norm_topk_prob", True) and k > 1:
                wsel = wsel / (wsel.sum() + 1e-20)
            wsel = wsel * c["routed_scaling_factor"]
            for e, wgt in sorted(zip(idx, wsel)):
                y[t] += expert(f"{p}experts.{e}.", x[t:t + 1], wgt)[0]
        return y + expert(p + "shared_experts.", x, 1.0)

    # -- top level
    def forward(self, tokens):
        c = self.c
        hc = c["hc_mult"]
        X = np.repeat(self.w("embed.weight")[tokens][:, None, :], hc, axis=1)
        P = np.zeros((len(tokens), hc))
        P[:, 0] = 1
        state = {"keys": {}, "entries": {}, "topk": None, "cand": None}
        for layer in range(self.L):
            pl = f"layers.{layer}."
            if layer in c.get("engram_layer_ids", []):
                X = self.engram_apply(X, tokens, layer)
            preA, postA, combA = self.mixes(X, pl + "hc_attn")
            a = rms(self.collapse(X, P), self.w(pl + "attn_norm.weight"), self.eps)
            X = self.expand(self.attention(layer, a, state), X, postA, combA)
            preF, postF, combF = self.mixes(X, pl + "hc_ffn")
            f = rms(self.collapse(X, preA), self.w(pl + "ffn_norm.weight"), self.eps)
            X = self.expand(self.moe(layer, f), X, postF, combF)
            P = preF
        h = rms(self.collapse(X, P), self.w("norm.weight"), self.eps)
        return h @ self.w("head.weight").T


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--sequences", help="sequences.json: {name: [ids]}")
    ap.add_argument("--tokens", help="comma-separated ids (with --name)")
    ap.add_argument("--name", default="seq")
    ns = ap.parse_args(argv)
    m = Model(Path(ns.model))
    seqs = json.loads(Path(ns.sequences).read_text()) if ns.sequences else {ns.name: [int(x) for x in ns.tokens.split(",")]}
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, toks in seqs.items():
        logits = m.forward(list(toks))
        logits.astype(np.float32).tofile(out / f"{name}.prefill.f32")
        print(f"{name}: {len(toks)} rows -> {out / (name + '.prefill.f32')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
