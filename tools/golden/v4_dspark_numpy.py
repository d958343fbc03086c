#!/usr/bin/env python3
"""An independent float64 numpy model of the DSpark drafter of DeepSeek-V4-Flash-0731 /
V4-Pro-0813 (docs/model/mtp_dspark.md §3) on top of a window-only V4 backbone (docs/model, with every
compress ratio 0), written from the spec, not from DeepInfer's C++. It is the counterpart of
DeepInfer's `--numerics float`: exactly decoded weights, no QDQ, no bf16 rounding.

What one drafting step at position p computes (tokens 0..p prefilled, y = argmax of row p):
  taps:    tap_L = mean over the 4 streams of the backbone's streams AFTER layer L, for L in
           dspark_target_layer_ids; main_hidden = concat(taps)
  main_x = rms(main_hidden @ mtp.0.main_proj^T; mtp.0.main_norm)     for every position 0..p
  rings:   per stage, keys rope(rms(main_x @ wkv^T; kv_norm), pos) of positions p-W+1..p
  block:   X = embed[[y, noise x (B-1)]] on 4 streams at positions p+1 .. p+B; per stage an
           ordinary V4 block: mHC per sublayer, attention with the q head norm whose keys for
           every row are the ring's keys plus all B block rows' keys (no causal mask), sink
           softmax, inverse RoPE, grouped wo_a, wo_b; the backbone's kind of MoE (bias routing)
  head:    h = hc_head(X; last stage's hc_head_*); logits_i = rms(h_i; last.norm) @ head^T
  Markov:  out[0] = y; m_i = markov_w1[out[i]]; logits_i += m_i @ markov_w2^T;
           out[i+1] = argmax(logits_i) (ties to the lower id)
  confidence_i = concat(h_i, m_i) @ confidence_head.proj^T   (h before the norm)

`--taps input` takes the taps BEFORE the target layers instead (V4.1's convention): the wrong
one for these checkpoints, written so that a test can show it tells the two apart.

Usage:
  v4_dspark_numpy.py --model DIR --tokens 0,17,42 [--taps output|input]   prints a JSON line
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from v41_numpy import Checkpoint, inv_freq, rms, rope, sigmoid, top_order  # noqa: E402
from v41_numpy import Model as V41Model  # noqa: E402


class V4DsparkModel:
    def __init__(self, d: Path):
        self.ck = Checkpoint(d)
        self.c = c = self.ck.c
        self.eps = c.get("rms_norm_eps", 1e-6)
        self.L = c["num_hidden_layers"]
        if any(c["compress_ratios"]):
            raise SystemExit("v4_dspark_numpy: the backbone must be window-only (every compress ratio 0)")
        self.stages = len(c["compress_ratios"]) - self.L
        self.freqs = inv_freq(c, False)
        self._cache = {}

    def w(self, name):
        if name not in self._cache:
            self._cache[name] = self.ck.get(name)
        return self._cache[name]

    def ids(self, name):
        dt, shape, buf = self.ck.raw(name)
        return np.frombuffer(buf, dtype={"I32": "<i4", "I64": "<i8"}[dt]).reshape(shape)

    # -- mHC (docs/model/hyper_connections.md): the same mixer, collapse and expansion as V4.1's
    # sites (self.c, self.eps, self.w)
    mixes = V41Model.mixes
    collapse = staticmethod(V41Model.collapse)
    expand = staticmethod(V41Model.expand)

    def head_pre(self, X, prefix):
        flat = X.reshape(X.shape[0], -1)
        mix = flat @ self.w(prefix + "_fn").T / np.sqrt(np.mean(flat * flat, axis=1, keepdims=True) + self.eps)
        return sigmoid(mix * self.w(prefix + "_scale")[0] + self.w(prefix + "_base")) + self.c["hc_eps"]

    # -- attention (docs/model/attention.md §2, §3, §6, §7); keys_of(t) lists the keys row t attends to
    def window_keys(self, p, a, pos):
        return rope(rms(a @ self.w(p + "wkv.weight").T, self.w(p + "kv_norm.weight"), self.eps), pos, self.freqs)

    def attention(self, p, a, pos, keys_of):
        c = self.c
        S, H, Dh = a.shape[0], c["num_attention_heads"], c["head_dim"]
        qr = rms(a @ self.w(p + "wq_a.weight").T, self.w(p + "q_norm.weight"), self.eps)
        q = (qr @ self.w(p + "wq_b.weight").T).reshape(S, H, Dh)
        q = rms(q, None, self.eps)  # the per-head norm, unweighted
        q = rope(q, pos[:, None], self.freqs)
        sink = self.w(p + "attn_sink")
        out = np.zeros((S, H, Dh))
        for t in range(S):
            K = keys_of(t)
            s = q[t] @ K.T / math.sqrt(Dh)
            m = s.max(axis=1, keepdims=True)
            pr = np.exp(s - m)
            out[t] = pr @ K / (pr.sum(axis=1, keepdims=True) + np.exp(sink[:, None] - m))
        out = rope(out, pos[:, None], self.freqs, inverse=True)
        G, Ro = c["o_groups"], c["o_lora_rank"]
        u = np.einsum("tgd,grd->tgr", out.reshape(S, G, -1), self.w(p + "wo_a.weight").reshape(G, Ro, -1))
        return u.reshape(S, -1) @ self.w(p + "wo_b.weight").T

    # -- MoE (docs/model/moe.md); hash-routed layers take their experts from tid2eid
    def moe(self, p, x, tokens, hashed):
        c = self.c
        logits = x @ self.w(p + "gate.weight").T
        score = np.sqrt(np.where(logits > 20, logits, np.log1p(np.exp(np.minimum(logits, 20)))))
        lim, k = c.get("swiglu_limit", 0), c["num_experts_per_tok"]
        y = np.zeros_like(x)

        def expert(q, xx, weight):
            g, u = xx @ self.w(q + "w1.weight").T, xx @ self.w(q + "w3.weight").T
            if lim > 0:
                u, g = np.clip(u, -lim, lim), np.minimum(g, lim)
            return (weight * g * sigmoid(g) * u) @ self.w(q + "w2.weight").T

        table = self.ids(p + "gate.tid2eid") if hashed else None
        for t in range(x.shape[0]):
            idx = [int(e) for e in table[tokens[t]]] if hashed else top_order(list(score[t] + self.w(p + "gate.bias")), k)
            wsel = score[t][idx]
            if c.get("norm_topk_prob", True):
                wsel = wsel / wsel.sum()
            wsel = wsel * c.get("routed_scaling_factor", 1.0)
            for e, wgt in sorted(zip(idx, wsel)):
                y[t] += expert(f"{p}experts.{e}.", x[t:t + 1], wgt)[0]
        return y + expert(p + "shared_experts.", x, 1.0)

    def block(self, pl, X, pos, tokens, keys_of, hashed=False):
        preA, postA, combA = self.mixes(X, pl + "hc_attn")
        a = rms(self.collapse(X, preA), self.w(pl + "attn_norm.weight"), self.eps)
        X = self.expand(self.attention(pl + "attn.", a, pos, keys_of(a)), X, postA, combA)
        preF, postF, combF = self.mixes(X, pl + "hc_ffn")
        f = rms(self.collapse(X, preF), self.w(pl + "ffn_norm.weight"), self.eps)
        return self.expand(self.moe(pl + "ffn.", f, tokens, hashed), X, postF, combF)

    # -- backbone prefill: logits of every row and the taps
    def backbone(self, tokens, taps_at):
        c = self.c
        S, hc, W = len(tokens), c["hc_mult"], c["sliding_window"]
        pos = np.arange(S)
        X = np.repeat(self.w("embed.weight")[tokens][:, None, :], hc, axis=1)
        taps = {}
        for layer in range(self.L):
            pl = f"layers.{layer}."

            def causal_window(a, pl=pl):
                kv = self.window_keys(pl + "attn.", a, pos)
                return lambda t: kv[max(0, t - W + 1):t + 1]

            if taps_at == "input":
                taps[layer] = X.mean(axis=1)
            X = self.block(pl, X, pos, tokens, causal_window, hashed=layer < c.get("num_hash_layers", 0))
            if taps_at == "output":
                taps[layer] = X.mean(axis=1)
        h = rms(self.collapse(X, self.head_pre(X, "hc_head")), self.w("norm.weight"), self.eps)
        main_hidden = np.concatenate([taps[t] for t in c["dspark_target_layer_ids"]], axis=1)
        return h @ self.w("head.weight").T, main_hidden

    # -- one drafting step after tokens[0..p]
    def draft(self, tokens, taps_at="output"):
        c = self.c
        logits, main_hidden = self.backbone(tokens, taps_at)
        p, B, W, hc = len(tokens) - 1, c["dspark_block_size"], c["sliding_window"], c["hc_mult"]
        y = int(np.argmax(logits[-1]))
        main_x = rms(main_hidden @ self.w("mtp.0.main_proj.weight").T, self.w("mtp.0.main_norm.weight"), self.eps)
        ring_pos = np.arange(max(0, p - W + 1), p + 1)
        block = [y] + [c["dspark_noise_token_id"]] * (B - 1)
        X = np.repeat(self.w("embed.weight")[block][:, None, :], hc, axis=1)
        pos = np.arange(p + 1, p + 1 + B)
        for s in range(self.stages):
            ps = f"mtp.{s}."
            ring = self.window_keys(ps + "attn.", main_x[ring_pos], ring_pos)

            def block_keys(a, ps=ps, ring=ring):
                K = np.concatenate([ring, self.window_keys(ps + "attn.", a, pos)])
                return lambda t: K

            X = self.block(ps, X, pos, block, block_keys)
        last = f"mtp.{self.stages - 1}."
        h = self.collapse(X, self.head_pre(X, last + "hc_head"))
        out_logits = rms(h, self.w(last + "norm.weight"), self.eps) @ self.w("head.weight").T
        w1, w2 = self.w(last + "markov_head.markov_w1.weight"), self.w(last + "markov_head.markov_w2.weight")
        conf_w = self.w(last + "confidence_head.proj.weight")
        out, conf = [y], []
        for i in range(B):
            m = w1[out[i]]
            out_logits[i] += m @ w2.T
            out.append(int(np.argmax(out_logits[i])))
            conf.append(float((np.concatenate([h[i], m]) @ conf_w.T)[0]))
        return {"p": p, "y": y, "draft_ids": out, "confidence": conf, "logits": out_logits}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", required=True, help="comma-separated ids, BOS first")
    ap.add_argument("--taps", choices=["output", "input"], default="output")
    ns = ap.parse_args(argv)
    r = V4DsparkModel(Path(ns.model)).draft([int(x) for x in ns.tokens.split(",")], ns.taps)
    r.pop("logits")
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
