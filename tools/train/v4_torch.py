"""DeepSeek-V4 in PyTorch, small and trainable, written to compute what DeepInfer's
`--numerics float` computes (the notes in docs/model): fp32 everywhere, weights as given.

Module and parameter names follow the official checkpoint, so `state_dict()` keys are exactly
the tensor names of the release layout (tools/golden/make_checkpoint.py writes the same set).

Training-only differences from inference, none of which changes the forward math:
  * every sequence is one batch row starting at position 0 (full prefill, no caches);
  * attention is dense with masks (window, compressed visibility, indexer top-k);
  * the lightning indexer gets no gradient from the LM loss (top-k is a hard choice); it is
    trained by `aux_loss`: KL from the heads' attention over the visible compressed entries
    (detached) to the indexer's softmax (DeepSeek-V3.2's indexer warm-up objective);
  * the routers' `gate.bias` is a buffer moved by the auxiliary-loss-free balancing rule.

`with reference_numerics():` (evaluation only) emulates `--numerics reference`: act_quant (FP8
e4m3, ue8m0 per 128) of every FP8/FP4 GEMM input, the bf16 rounding points, the window/compressed
KV FP8 QDQ, the indexer's FP4 QDQ and bf16 score, bf16 attention probabilities in P.V. It is
close to the engine's reference numerics, not bit-exact (online-softmax tiles, summation order).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class V4Config:
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    compress_ratios: list
    num_attention_heads: int
    head_dim: int
    qk_rope_head_dim: int
    q_lora_rank: int
    o_groups: int
    o_lora_rank: int
    sliding_window: int
    index_n_heads: int
    index_head_dim: int
    index_topk: int
    n_routed_experts: int
    num_experts_per_tok: int
    moe_intermediate_size: int
    num_hash_layers: int
    num_nextn_predict_layers: int
    hc_mult: int = 4
    hc_sinkhorn_iters: int = 20
    hc_eps: float = 1e-6
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    compress_rope_theta: float = 160000.0
    rope_factor: float = 16.0
    rope_original_seq_len: int = 65536
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    routed_scaling_factor: float = 1.5
    swiglu_limit: float = 10.0
    n_shared_experts: int = 1

    @staticmethod
    def from_hf(c: dict) -> "V4Config":
        rs = c.get("rope_scaling") or {}
        keys = {f for f in V4Config.__dataclass_fields__}
        kw = {k: v for k, v in c.items() if k in keys}
        kw.update(rope_factor=rs.get("factor", 16.0),
                  rope_original_seq_len=rs.get("original_max_position_embeddings", 65536),
                  beta_fast=rs.get("beta_fast", 32), beta_slow=rs.get("beta_slow", 1))
        return V4Config(**kw)

    @property
    def nope_dim(self) -> int:
        return self.head_dim - self.qk_rope_head_dim


# ----------------------------------------------------------------------------------------------
# Reference numerics emulation (docs/model/formats.md §3-§4, numerics.md §2)
# ----------------------------------------------------------------------------------------------

_REF = [False]


class reference_numerics:
    def __enter__(self):
        _REF[0] = True

    def __exit__(self, *exc):
        _REF[0] = False


def R(x: torch.Tensor) -> torch.Tensor:
    """A point where the reference holds bf16 (fp32 first, as the engine rounds fp32 values)."""
    return x.float().bfloat16().to(x.dtype) if _REF[0] else x


def _pow2_ceil(t: torch.Tensor) -> torch.Tensor:
    m, e = torch.frexp(t)                       # t = m 2^e, m in [0.5, 1)
    return torch.ldexp(torch.ones_like(t), e - (m == 0.5).to(e.dtype))


_E2M1_MIDS = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
_E2M1_VALS = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def act_quant(x: torch.Tensor, block: int) -> torch.Tensor:
    """FP8 e4m3 QDQ per block of the last dim with a ue8m0 scale (docs/model/formats.md §3), bf16 out."""
    if not _REF[0]:
        return x
    shp = x.shape
    xb = x.float().reshape(*shp[:-1], shp[-1] // block, block)
    amax = xb.abs().amax(-1, keepdim=True).clamp_min(1e-4)
    s = _pow2_ceil(amax * torch.tensor(1.0 / 448.0, dtype=torch.float32))
    q = (xb / s).clamp(-448, 448).to(torch.float8_e4m3fn).float()
    return (q * s).bfloat16().float().reshape(shp).to(x.dtype)


def fp4_qdq(x: torch.Tensor, block: int = 32) -> torch.Tensor:
    """FP4 e2m1 QDQ with power-of-two scales (docs/model/formats.md §4.1), ties to the even code, bf16 out."""
    if not _REF[0]:
        return x
    shp = x.shape
    xb = x.float().reshape(*shp[:-1], shp[-1] // block, block)
    amax = xb.abs().amax(-1, keepdim=True).clamp_min(6.0 * 2.0 ** -126)
    s = _pow2_ceil(amax * torch.tensor(1.0 / 6.0, dtype=torch.float32))
    v = (xb / s).clamp(-6, 6)
    a = v.abs()
    idx = torch.bucketize(a, _E2M1_MIDS, right=False)                  # ties down ...
    idx = idx + ((a == 0.75) | (a == 1.75) | (a == 3.5)).long()          # ... except onto even codes
    q = _E2M1_VALS[idx] * v.sign()
    return (q * s).bfloat16().float().reshape(shp).to(x.dtype)


def qlinear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """An FP8 / FP4 weight's GEMM: act_quant(x) in blocks of 128, exact product, bf16 out."""
    return R(act_quant(x, 128) @ w.t())


def kv_qdq(x: torch.Tensor, nope: int) -> torch.Tensor:
    if not _REF[0]:
        return x
    return torch.cat((act_quant(x[..., :nope], 64), x[..., nope:]), dim=-1)


# ----------------------------------------------------------------------------------------------
# Small math
# ----------------------------------------------------------------------------------------------


def rms_norm(x: torch.Tensor, w: torch.Tensor | None, eps: float) -> torch.Tensor:
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return R(y * w if w is not None else y)


def query_head_norm(q: torch.Tensor, eps: float) -> torch.Tensor:
    """Unweighted per-head RMS; the reference writes it as bf16 tensor ops (docs/model/attention.md §2)."""
    if not _REF[0]:
        return rms_norm(q, None, eps)
    mean = R(R(q * q).mean(-1, keepdim=True))
    return R(q * R(torch.rsqrt(R(mean + eps))))


class Norm(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))


def inv_freq(cfg: V4Config, compressed: bool) -> np.ndarray:
    """The engine's RopeTable::make (docs/model/attention.md §1) in fp32: YaRN only on compressed layers."""
    Dr = cfg.qk_rope_head_dim
    base = cfg.compress_rope_theta if compressed else cfg.rope_theta
    f = np.array([np.float32(1.0) / np.float32(base ** (2 * i / Dr)) for i in range(Dr // 2)], dtype=np.float32)
    if not compressed or cfg.rope_original_seq_len <= 0:
        return f

    def corr(rot):
        return Dr * math.log(cfg.rope_original_seq_len / (rot * 2 * math.pi)) / (2 * math.log(base))

    lo = np.float32(max(math.floor(corr(cfg.beta_fast)), 0.0))
    hi = np.float32(min(math.ceil(corr(cfg.beta_slow)), Dr - 1.0))
    if lo == hi:
        hi = hi + np.float32(0.001)
    factor = np.float32(cfg.rope_factor)
    out = np.empty_like(f)
    for i in range(Dr // 2):
        ramp = np.float32(min(max((np.float32(i) - lo) / (hi - lo), 0.0), 1.0))
        smooth = np.float32(1.0) - ramp
        out[i] = f[i] / factor * (np.float32(1.0) - smooth) + f[i] * smooth
    return out


def rope_table(freqs: np.ndarray, positions: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [n, Dr/2]: theta = fp32(p) * f (one fp32 multiply), cos/sin in double."""
    theta = positions.astype(np.float32)[:, None] * freqs[None, :]
    th = theta.astype(np.float64)
    return (torch.from_numpy(np.cos(th).astype(np.float32)), torch.from_numpy(np.sin(th).astype(np.float32)))


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, inverse: bool = False) -> torch.Tensor:
    """Interleaved pairs on the last Dr dims of x [..., n]; cos/sin broadcast to [..., Dr/2]."""
    Dr = cos.shape[-1] * 2
    keep, r = x[..., :-Dr], x[..., -Dr:]
    u, v = r[..., 0::2], r[..., 1::2]
    s = -sin if inverse else sin
    rot = torch.stack((R(u * cos - v * s), R(u * s + v * cos)), dim=-1).flatten(-2)
    return torch.cat((keep, rot), dim=-1)


def hadamard(n: int) -> torch.Tensor:
    h = torch.ones(1, 1)
    while h.shape[0] < n:
        h = torch.cat((torch.cat((h, h), 1), torch.cat((h, -h), 1)), 0)
    return h


# ----------------------------------------------------------------------------------------------
# Hyper-connections (docs/model/hyper_connections.md)
# ----------------------------------------------------------------------------------------------


class HC(nn.Module):
    """Mixing parameters of one hyper-connection point: fn [n_out, nhc*d], base [n_out], scale."""

    def __init__(self, n_out: int, width: int, n_scale: int):
        super().__init__()
        self.fn = nn.Parameter(torch.randn(n_out, width) * (0.1 / math.sqrt(width)))
        self.base = nn.Parameter(torch.zeros(n_out))
        self.scale = nn.Parameter(torch.ones(n_scale))


def hc_mix_raw(X: torch.Tensor, fn: torch.Tensor, eps: float) -> torch.Tensor:
    x = X.flatten(-2)
    r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return (x @ fn.t()) * r                      # linear first, then the rms factor (reference order)


def hc_mixes(cfg: V4Config, X, fn, scale, base):
    n = cfg.hc_mult
    mix = hc_mix_raw(X, fn, cfg.rms_norm_eps)
    pre = torch.sigmoid(mix[..., :n] * scale[0] + base[:n]) + cfg.hc_eps
    post = 2 * torch.sigmoid(mix[..., n:2 * n] * scale[1] + base[n:2 * n])
    C = (mix[..., 2 * n:] * scale[2] + base[2 * n:]).unflatten(-1, (n, n))
    C = torch.softmax(C, dim=-1) + cfg.hc_eps
    C = C / (C.sum(-2, keepdim=True) + cfg.hc_eps)
    for _ in range(cfg.hc_sinkhorn_iters - 1):
        C = C / (C.sum(-1, keepdim=True) + cfg.hc_eps)
        C = C / (C.sum(-2, keepdim=True) + cfg.hc_eps)
    return pre, post, C


def hc_collapse(X, pre):
    return R((pre.unsqueeze(-1) * X).sum(-2))


def hc_expand(o, res, post, C):
    # Y[k] = post[k] * o + sum_i C[i][k] res[i]: comb contracted over its FIRST index.
    return R(post.unsqueeze(-1) * o.unsqueeze(-2) + torch.einsum("...ik,...id->...kd", C, res))


def hc_head(cfg: V4Config, X, fn, scale, base):
    mix = hc_mix_raw(X, fn, cfg.rms_norm_eps)
    pre = torch.sigmoid(mix * scale[0] + base) + cfg.hc_eps
    return hc_collapse(X, pre)


# ----------------------------------------------------------------------------------------------
# Attention (docs/model/attention.md)
# ----------------------------------------------------------------------------------------------


def linear(d_in: int, d_out: int, gain: float = 1.0) -> nn.Linear:
    m = nn.Linear(d_in, d_out, bias=False)
    nn.init.normal_(m.weight, std=gain / math.sqrt(d_in))
    return m


class Compressor(nn.Module):
    """Gated pooling of r tokens into one entry; r = 4 overlaps with the previous group."""

    def __init__(self, cfg: V4Config, d: int, width: int, ratio: int):
        super().__init__()
        self.ratio, self.width = ratio, width
        coff = 2 if ratio == 4 else 1
        self.wkv = linear(d, coff * width)
        self.wgate = linear(d, coff * width)
        self.ape = nn.Parameter(torch.zeros(ratio, coff * width))
        self.norm = Norm(width)

    def forward(self, a: torch.Tensor, eps: float) -> torch.Tensor:
        """a [B, T, d] (positions 0..T-1) -> entries [B, T // r, width] before RoPE."""
        B, T, _ = a.shape
        r, w = self.ratio, self.width
        n = T // r
        kvp = (a[:, :n * r] @ self.wkv.weight.t()).unflatten(1, (n, r))
        sc = (a[:, :n * r] @ self.wgate.weight.t()).unflatten(1, (n, r)) + self.ape
        if r == 4:
            # entry w: A halves of group w-1 (absent for w = 0: score -inf, value 0), B halves of w
            sa = torch.cat((torch.full_like(sc[:, :1, :, :w], float("-inf")), sc[:, :-1, :, :w]), dim=1)
            ka = torch.cat((torch.zeros_like(kvp[:, :1, :, :w]), kvp[:, :-1, :, :w]), dim=1)
            sc = torch.cat((sa, sc[..., w:]), dim=2)
            kvp = torch.cat((ka, kvp[..., w:]), dim=2)
        z = (torch.softmax(sc, dim=2) * kvp).sum(2)
        return rms_norm(R(z), self.norm.weight, eps)


class Indexer(nn.Module):
    def __init__(self, cfg: V4Config):
        super().__init__()
        HI, DI = cfg.index_n_heads, cfg.index_head_dim
        self.wq_b = linear(cfg.q_lora_rank, HI * DI)
        self.weights_proj = linear(cfg.hidden_size, HI)
        self.compressor = Compressor(cfg, cfg.hidden_size, DI, 4)
        self.register_buffer("hadamard", hadamard(DI) / math.sqrt(DI), persistent=False)


class Attention(nn.Module):
    def __init__(self, cfg: V4Config, ratio: int, out_gain: float):
        super().__init__()
        self.cfg, self.ratio = cfg, ratio
        d, H, Dh = cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim
        self.attn_sink = nn.Parameter(torch.zeros(H))
        self.wq_a = linear(d, cfg.q_lora_rank)
        self.q_norm = Norm(cfg.q_lora_rank)
        self.wq_b = linear(cfg.q_lora_rank, H * Dh)
        self.wkv = linear(d, Dh)
        self.kv_norm = Norm(Dh)
        G = cfg.o_groups
        self.wo_a = linear(H * Dh // G, G * cfg.o_lora_rank)
        self.wo_b = linear(G * cfg.o_lora_rank, d, out_gain)
        if ratio:
            self.compressor = Compressor(cfg, d, Dh, ratio)
        if ratio == 4:
            self.indexer = Indexer(cfg)

    def forward(self, a, rope, aux: list | None):
        cfg = self.cfg
        B, T, _ = a.shape
        H, Dh, eps = cfg.num_attention_heads, cfg.head_dim, cfg.rms_norm_eps
        cos, sin = rope                                          # [T, Dr/2]
        qr = rms_norm(qlinear(a, self.wq_a.weight), self.q_norm.weight, eps)
        q = qlinear(qr, self.wq_b.weight).unflatten(-1, (H, Dh))
        q = apply_rope(query_head_norm(q, eps), cos[:, None], sin[:, None])
        kv = apply_rope(rms_norm(qlinear(a, self.wkv.weight), self.kv_norm.weight, eps), cos, sin)
        kv = kv_qdq(kv, cfg.nope_dim)

        pos = torch.arange(T)
        win = (pos[None, :] <= pos[:, None]) & (pos[None, :] > pos[:, None] - cfg.sliding_window)
        keys, mask = kv, win.expand(B, T, T)
        chosen = None
        # Column of each key in the engine's key list (reference numerics only: its online
        # softmax runs in tiles of 64 columns and rounds probabilities per tile): the window's
        # min(T, W) columns from max(0, p - W + 1), then the compressed entries in list order.
        n_wcols = min(T, cfg.sliding_window)
        col = (pos[None, :] - (pos[:, None] - cfg.sliding_window + 1).clamp_min(0)).expand(B, T, T)
        if self.ratio:
            r = self.ratio
            n = T // r
            ent = self.compressor(a, eps)
            epos = np.arange(n) * r
            ecos, esin = cos[epos], sin[epos]
            ent = kv_qdq(apply_rope(ent, ecos, esin), cfg.nope_dim)
            vis = torch.arange(n)[None, :] < ((pos + 1) // r)[:, None]          # [T, n]
            cmask = vis.expand(B, T, n)
            ccol = (n_wcols + torch.arange(n)).expand(B, T, n)              # ratio 128: ascending
            if r == 4 and n > 0:
                cmask, iscore, top = self.select(a, qr, rope, ecos, esin, vis)
                chosen = cmask
                rank = torch.arange(top.shape[-1]).expand_as(top)           # descending score
                ccol = n_wcols + torch.zeros(B, T, n, dtype=torch.long).scatter(-1, top, rank)
            keys = torch.cat((kv, ent), dim=1)
            mask = torch.cat((mask, cmask), dim=2)
            col = torch.cat((col, ccol), dim=2)

        scores = torch.einsum("bthd,bsd->bhts", q, keys) * (Dh ** -0.5)
        if aux is not None and chosen is not None:
            aux.append(indexer_kl(scores[..., T:].detach(), iscore, vis))
        scores = scores.masked_fill(~mask[:, None], float("-inf"))
        if _REF[0]:
            o = R(tiled_sink_attention(scores, keys, mask, col, self.attn_sink).transpose(1, 2))
        else:
            sink = self.attn_sink.view(1, H, 1, 1).expand(B, H, T, 1)
            p = torch.softmax(torch.cat((scores, sink), dim=-1), dim=-1)[..., :-1]
            o = torch.einsum("bhts,bsd->bthd", p, keys)
        o = apply_rope(o, cos[:, None], sin[:, None], inverse=True)
        G = cfg.o_groups
        og = o.reshape(B, T, G, H * Dh // G)
        wa = self.wo_a.weight.view(G, cfg.o_lora_rank, H * Dh // G)
        u = R(torch.einsum("btgi,goi->btgo", og, wa).flatten(-2))
        return qlinear(u, self.wo_b.weight)

    def select(self, a, qr, rope, ecos, esin, vis):
        """Lightning indexer: top-k visible compressed entries per query (docs/model/attention.md §5)."""
        cfg, ix = self.cfg, self.indexer
        HI, DI, eps = cfg.index_n_heads, cfg.index_head_dim, cfg.rms_norm_eps
        cos, sin = rope
        B, T, _ = a.shape
        # The indexer learns only from its own KL loss: its inputs are detached.
        a, qr = a.detach(), qr.detach()
        k = fp4_qdq(R(apply_rope(ix.compressor(a, eps), ecos, esin) @ ix.hadamard))     # [B, n, DI]
        qi = apply_rope(qlinear(qr, ix.wq_b.weight).unflatten(-1, (HI, DI)), cos[:, None], sin[:, None])
        qi = fp4_qdq(R(qi @ ix.hadamard))
        wi = R(R(a @ ix.weights_proj.weight.t()) * (DI ** -0.5 * HI ** -0.5))
        score = R(torch.einsum("bthd,bsd->bths", qi, k)).relu()
        score = R((R(score * wi.unsqueeze(-1))).sum(2))                     # [B, T, n]
        score = score.masked_fill(~vis, float("-inf"))
        n = score.shape[-1]
        kk = min(cfg.index_topk, n)
        # Ties (ReLU makes exact zeros common) go to the lower index, as in the engine: a stable
        # sort of the negated scores, not topk (whose tie order is unspecified).
        top = torch.sort(-score.detach(), dim=-1, stable=True).indices[..., :kk]
        chosen = torch.zeros_like(score, dtype=torch.bool).scatter_(-1, top, True) & vis
        return chosen, score, top



def tiled_sink_attention(scores, keys, mask, col, sink, tile: int = 64):
    """The reference kernel's online softmax (docs/model/attention.md §6.4): key columns in tiles of 64, running
    max, probabilities rounded to bf16 for P.V (not in the denominator), the sink added to the
    denominator at the end with the final max. scores [B, H, T, S] (masked -inf), keys [B, S, D],
    col [B, T, S] -> [B, H, T, D]."""
    B, H, T, _ = scores.shape
    neg = float("-inf")
    m = scores.new_full((B, H, T, 1), neg)
    den = scores.new_zeros((B, H, T, 1))
    acc = scores.new_zeros((B, H, T, keys.shape[-1]))
    tiles = col.masked_fill(~mask, -1) // tile
    for k in range(int(tiles.max()) + 1):
        sk = scores.masked_fill(~(tiles == k)[:, None], neg)
        tmax = sk.amax(-1, keepdim=True)
        has = tmax > neg
        m_new = torch.where(has, torch.maximum(m, tmax), m)
        alpha = torch.where(m == neg, torch.zeros_like(m), torch.exp(m - m_new))
        p = torch.exp(sk - torch.where(has, m_new, torch.zeros_like(m_new)))
        den = torch.where(has, den * alpha + p.sum(-1, keepdim=True), den)
        acc = torch.where(has, acc * alpha + torch.einsum("bhts,bsd->bhtd", R(p), keys), acc)
        m = m_new
    return acc / (den + torch.exp(sink.view(1, H, 1, 1) - m))


def indexer_kl(cscores, iscore, vis):
    """KL(target || indexer) per query over its visible compressed entries. Target: the heads'
    attention logits over ALL visible entries (not only the chosen ones), softmaxed per head,
    summed over heads and renormalised; detached, so only the indexer learns from it."""
    has = vis.any(-1)                                       # queries that see >= 1 entry
    if not bool(has.any()):
        return iscore.new_zeros(())
    t = torch.softmax(cscores.masked_fill(~vis, float("-inf")), dim=-1)
    t = torch.nan_to_num(t, nan=0.0).sum(1)                 # [B, T, n]
    t = t / t.sum(-1, keepdim=True).clamp_min(1e-20)
    # finite fill: a row with no visible entry must not put NaN into the backward pass
    logq = torch.log_softmax(iscore.masked_fill(~vis, -1e30), dim=-1).masked_fill(~vis, 0.0)
    kl = (t * (torch.log(t.clamp_min(1e-20)) - logq)).sum(-1)
    return kl[:, has].mean()


# ----------------------------------------------------------------------------------------------
# MoE (docs/model/moe.md)
# ----------------------------------------------------------------------------------------------


class Expert(nn.Module):
    def __init__(self, d: int, inter: int, out_gain: float):
        super().__init__()
        self.w1 = linear(d, inter)
        self.w2 = linear(inter, d, out_gain)
        self.w3 = linear(d, inter)

    def forward(self, x, weight, limit):
        g = qlinear(x, self.w1.weight).clamp(max=limit)
        u = qlinear(x, self.w3.weight).clamp(-limit, limit)
        h = F.silu(g) * u
        if weight is not None:
            h = h * weight.unsqueeze(-1)                 # routing weight before w2
        return qlinear(R(h), self.w2.weight)


class Gate(nn.Module):
    def __init__(self, cfg: V4Config, is_hash: bool, layer_seed: int):
        super().__init__()
        E, k = cfg.n_routed_experts, cfg.num_experts_per_tok
        self.weight = nn.Parameter(torch.randn(E, cfg.hidden_size) * (1.0 / math.sqrt(cfg.hidden_size)))
        self.is_hash = is_hash
        if is_hash:
            g = torch.Generator().manual_seed(1000 + layer_seed)
            keys = torch.rand(cfg.vocab_size, E, generator=g)
            self.register_buffer("tid2eid", keys.argsort(dim=1)[:, :k].to(torch.int32).contiguous())
        else:
            self.register_buffer("bias", torch.zeros(E))


class MoE(nn.Module):
    def __init__(self, cfg: V4Config, is_hash: bool, layer_seed: int, out_gain: float):
        super().__init__()
        self.cfg = cfg
        d, I = cfg.hidden_size, cfg.moe_intermediate_size
        self.gate = Gate(cfg, is_hash, layer_seed)
        self.experts = nn.ModuleList(Expert(d, I, out_gain) for _ in range(cfg.n_routed_experts))
        self.shared_experts = Expert(d, I * cfg.n_shared_experts, out_gain)
        self.last_load: torch.Tensor | None = None

    def forward(self, x, tokens):
        cfg = self.cfg
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        score = torch.sqrt(F.softplus(x @ self.gate.weight.t()))
        if self.gate.is_hash:
            idx = self.gate.tid2eid[tokens.reshape(-1)].long()
        else:
            idx = (score + self.gate.bias).detach().topk(cfg.num_experts_per_tok, dim=-1).indices
        w = score.gather(-1, idx)
        w = w / w.sum(-1, keepdim=True) * cfg.routed_scaling_factor
        y = torch.zeros_like(x)
        load = torch.zeros(cfg.n_routed_experts)
        for e, ex in enumerate(self.experts):
            rows, slot = torch.nonzero(idx == e, as_tuple=True)
            load[e] = rows.numel()
            if rows.numel() == 0:
                continue
            y = y.index_add(0, rows, ex(x[rows], w[rows, slot], cfg.swiglu_limit))
        self.last_load = load
        y = y + self.shared_experts(x, None, cfg.swiglu_limit)
        return R(y).reshape(shape)


# ----------------------------------------------------------------------------------------------
# Blocks, MTP, model
# ----------------------------------------------------------------------------------------------


class Block(nn.Module):
    def __init__(self, cfg: V4Config, layer: int, ratio: int, is_hash: bool, out_gain: float):
        super().__init__()
        self.cfg = cfg
        d, n = cfg.hidden_size, cfg.hc_mult
        mix = (2 + n) * n
        self.attn_norm = Norm(d)
        self.ffn_norm = Norm(d)
        self.attn = Attention(cfg, ratio, out_gain)
        self.ffn = MoE(cfg, is_hash, layer, out_gain)
        for kind in ("hc_attn", "hc_ffn"):
            hc = HC(mix, n * d, 3)
            setattr(self, kind + "_fn", hc.fn)
            setattr(self, kind + "_base", hc.base)
            setattr(self, kind + "_scale", hc.scale)

    def forward(self, X, tokens, rope, aux):
        eps = self.cfg.rms_norm_eps
        pre, post, C = hc_mixes(self.cfg, X, self.hc_attn_fn, self.hc_attn_scale, self.hc_attn_base)
        a = rms_norm(hc_collapse(X, pre), self.attn_norm.weight, eps)
        X = hc_expand(self.attn(a, rope, aux), X, post, C)
        pre, post, C = hc_mixes(self.cfg, X, self.hc_ffn_fn, self.hc_ffn_scale, self.hc_ffn_base)
        f = rms_norm(hc_collapse(X, pre), self.ffn_norm.weight, eps)
        return hc_expand(self.ffn(f, tokens), X, post, C)


class MTPBlock(Block):
    def __init__(self, cfg: V4Config, layer: int, out_gain: float):
        super().__init__(cfg, layer, 0, False, out_gain)
        d, n = cfg.hidden_size, cfg.hc_mult
        self.e_proj = linear(d, d)
        self.h_proj = linear(d, d)
        self.enorm = Norm(d)
        self.hnorm = Norm(d)
        self.norm = Norm(d)
        hc = HC(n, n * d, 1)
        self.hc_head_fn, self.hc_head_base, self.hc_head_scale = hc.fn, hc.base, hc.scale

    def forward_mtp(self, X, e_next, next_tokens, rope):
        eps = self.cfg.rms_norm_eps
        e = rms_norm(e_next, self.enorm.weight, eps)
        xh = rms_norm(X, self.hnorm.weight, eps)
        Z = R(qlinear(e, self.e_proj.weight).unsqueeze(-2) + qlinear(xh, self.h_proj.weight))
        Z = self.forward(Z, next_tokens, rope, None)
        h = hc_head(self.cfg, Z, self.hc_head_fn, self.hc_head_scale, self.hc_head_base)
        return rms_norm(h, self.norm.weight, eps)


class V4Model(nn.Module):
    def __init__(self, cfg: V4Config):
        super().__init__()
        self.cfg = cfg
        d, n, L = cfg.hidden_size, cfg.hc_mult, cfg.num_hidden_layers
        out_gain = 1.0 / math.sqrt(2 * (L + cfg.num_nextn_predict_layers))
        self.embed = nn.Embedding(cfg.vocab_size, d)
        nn.init.normal_(self.embed.weight, std=1.0)
        self.head = linear(d, cfg.vocab_size)
        self.norm = Norm(d)
        hc = HC(n, n * d, 1)
        self.hc_head_fn, self.hc_head_base, self.hc_head_scale = hc.fn, hc.base, hc.scale
        self.layers = nn.ModuleList(
            Block(cfg, i, cfg.compress_ratios[i], i < cfg.num_hash_layers, out_gain) for i in range(L))
        self.mtp = nn.ModuleList(MTPBlock(cfg, L + m, out_gain) for m in range(cfg.num_nextn_predict_layers))
        self._ropes: dict = {}

    def rope(self, compressed: bool, T: int):
        key = (compressed, T)
        if key not in self._ropes:
            self._ropes[key] = rope_table(inv_freq(self.cfg, compressed), np.arange(T))
        return self._ropes[key]

    def forward(self, tokens: torch.Tensor, with_mtp: bool = False, aux: list | None = None):
        """tokens [B, T] at positions 0..T-1 -> logits [B, T, V] (row t predicts token t+1);
        with_mtp: also MTP logits [B, T-1, V] (row t, fed token t+1, predicts token t+2)."""
        cfg = self.cfg
        B, T = tokens.shape
        X = self.embed(tokens).unsqueeze(-2).expand(B, T, cfg.hc_mult, cfg.hidden_size)
        for i, layer in enumerate(self.layers):
            X = layer(X, tokens, self.rope(cfg.compress_ratios[i] != 0, T), aux)
        h = hc_head(cfg, X, self.hc_head_fn, self.hc_head_scale, self.hc_head_base)
        logits = rms_norm(h, self.norm.weight, cfg.rms_norm_eps) @ self.head.weight.t()
        if not with_mtp or not len(self.mtp):
            return logits, None
        m = self.mtp[0]
        nxt = tokens[:, 1:]
        hm = m.forward_mtp(X[:, :-1], self.embed(nxt), nxt, self.rope(False, T - 1))
        return logits, hm @ self.head.weight.t()

    def moe_layers(self):
        return [b.ffn for b in list(self.layers) + list(self.mtp)]
