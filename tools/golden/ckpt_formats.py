"""make_checkpoint.py's number formats and random streams: e4m3 / e2m1 grids, round to
nearest even, bf16 conversion, FP8 block and FP4 row quantisation with ue8m0 scales, the fast
FP4 byte table, and one numpy PCG64 stream per tensor (exactly rounded float32 ops only)."""

from __future__ import annotations

import hashlib

import numpy as np

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
