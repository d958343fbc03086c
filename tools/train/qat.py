"""Quantisation-aware fine-tuning: the forward and backward passes see every weight as the export
stores it (FP8 e4m3 with ue8m0 128x128 block scales, FP4 e2m1 with ue8m0 per-32 scales, bf16),
and the optimiser updates the fp32 master weights with those gradients (straight-through)."""

from __future__ import annotations

import contextlib

import torch

import export as ex
from v4_torch import _E2M1_MIDS, _E2M1_VALS


def _pow2_ceil(t: torch.Tensor) -> torch.Tensor:
    m, e = torch.frexp(t)
    return torch.ldexp(torch.ones_like(t), e - (m == 0.5).to(e.dtype))


def fp8_blocks(w: torch.Tensor, b: int = 128) -> torch.Tensor:
    o, i = w.shape
    po, pi = -(-o // b) * b, -(-i // b) * b
    pad = torch.zeros(po, pi, dtype=torch.float32)
    pad[:o, :i] = w
    blk = pad.view(po // b, b, pi // b, b)
    s = _pow2_ceil(blk.abs().amax(dim=(1, 3), keepdim=True).clamp_min(2.0 ** -126) / 448.0)
    q = (blk / s).clamp(-448, 448).to(torch.float8_e4m3fn).float() * s
    return q.view(po, pi)[:o, :i].to(w.dtype)


def fp4_rows(w: torch.Tensor, b: int = 32) -> torch.Tensor:
    o, i = w.shape
    blk = w.float().view(o, i // b, b)
    s = _pow2_ceil(blk.abs().amax(-1, keepdim=True).clamp_min(2.0 ** -126) / 6.0)
    v = (blk / s).clamp(-6, 6)
    a = v.abs()
    idx = torch.bucketize(a, _E2M1_MIDS) + ((a == 0.75) | (a == 1.75) | (a == 3.5)).long()
    return (_E2M1_VALS[idx] * v.sign() * s).view(o, i).to(w.dtype)


def storage_kinds(model) -> dict[str, str]:
    """Parameter name -> its storage dtype in the export (F8_E4M3, I8, BF16, F32)."""
    cfg = ex.full_config(model.cfg_dict)
    return {t.name: t.dtype for t in ex.builder_tensors(cfg) if not t.name.endswith(".scale")}


@contextlib.contextmanager
def quantized_weights(model, kinds: dict[str, str]):
    masters = []
    with torch.no_grad():
        for name, p in model.named_parameters():
            kind = kinds.get(name)
            if kind == "F8_E4M3":
                q = fp8_blocks(p.data)
            elif kind == "I8":
                q = fp4_rows(p.data)
            elif kind == "BF16":
                q = p.data.bfloat16().float()
            else:
                continue
            masters.append((p, p.data.clone()))
            p.data.copy_(q)
    try:
        yield
    finally:
        with torch.no_grad():
            for p, m in masters:
                p.data.copy_(m)
