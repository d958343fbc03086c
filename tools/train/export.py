"""Export a trained V4Model in the official layout through tools/golden/make_checkpoint.py's
writer, and read such a checkpoint back (exactly dequantised) for evaluation.

The tensor list (names, storage dtypes, shapes, file order) comes from make_checkpoint's
Builder for the same config, so the trained file has exactly the layout of the generated ones;
only the bytes differ: each tensor's producer quantises the trained value instead of drawing
random numbers (FP8 e4m3 + ue8m0 128x128 scales, FP4 e2m1 + ue8m0 per 32, BF16, F32, I32).
"""

from __future__ import annotations

import hashlib
import json
import struct
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "golden"))
import make_checkpoint as mc  # noqa: E402

NOTE = ("TRAINED small model (tools/train/train.py): a few-million-parameter DeepSeek-V4 trained on the "
        "King James Bible; it writes archaic English, it knows nothing else. See README.txt.")


def full_config(model_cfg: dict) -> dict:
    cfg = mc.base_config()
    cfg.update(model_cfg)
    return cfg


def builder_tensors(cfg: dict) -> list:
    init = dict(mc.DEFAULT_INIT)
    init.update(mc.CALM_INIT)
    mc.check_config(cfg, init, force=False)
    return mc.Builder(cfg, init, 0).build()


def attach_values(tensors: list, values: dict[str, np.ndarray]) -> None:
    """Point every tensor's producer at the trained value (quantised to its storage dtype)."""
    names = {t.name for t in tensors}
    weights = {n for n in names if not n.endswith(".scale")}
    missing, extra = weights - values.keys(), values.keys() - weights
    if missing or extra:
        raise SystemExit(f"export: layout mismatch; missing {sorted(missing)[:8]}, unexpected {sorted(extra)[:8]}")
    dtype_of = {t.name: t.dtype for t in tensors}
    cache: dict[str, tuple] = {}

    def quantised(wname: str):
        if wname not in cache:
            w = np.ascontiguousarray(values[wname], dtype=np.float32)
            cache[wname] = mc.quantize_fp4_rows(w) if dtype_of[wname] == "I8" else mc.quantize_fp8_blocks(w)
        return cache[wname]

    for t in tensors:
        name, dt = t.name, t.dtype
        if dt == "F8_E8M0":
            wname = name[:-len(".scale")] + ".weight"
            t.produce = (lambda wn=wname: [quantised(wn)[1]])
        elif dt in ("F8_E4M3", "I8"):
            t.produce = (lambda wn=name: [quantised(wn)[0]])
        elif dt == "BF16":
            t.produce = (lambda v=values[name]: [mc.f32_to_bf16_bits(np.asarray(v, dtype=np.float32))])
        elif dt == "F32":
            t.produce = (lambda v=values[name]: [np.ascontiguousarray(v, dtype=np.float32)])
        elif dt == "I32":
            t.produce = (lambda v=values[name]: [np.ascontiguousarray(v, dtype=np.int32)])
        else:
            raise SystemExit(f"export: {name}: unexpected dtype {dt}")
        got = tuple(values[name if not name.endswith(".scale") else name[:-6] + ".weight"].shape)
        if not name.endswith(".scale") and dt != "I8" and got != tuple(t.shape):
            raise SystemExit(f"export: {name}: trained shape {got}, layout {t.shape}")


def export(values: dict[str, np.ndarray], model_cfg: dict, tokenizer_json: Path, out: Path,
           generator: dict, readme: str | None = None) -> str:
    out.mkdir(parents=True, exist_ok=True)
    cfg = full_config(model_cfg)
    tensors = builder_tensors(cfg)
    attach_values(tensors, values)
    config = mc.ordered_config(cfg, NOTE, generator)
    (out / "config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    gen_cfg = {"bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"], "do_sample": False}
    (out / "generation_config.json").write_text(json.dumps(gen_cfg, indent=2) + "\n")
    (out / "tokenizer.json").write_bytes(Path(tokenizer_json).read_bytes())
    tcfg = {"add_bos_token": True, "add_eos_token": False, "bos_token": "<｜begin▁of▁sentence｜>",
            "eos_token": "<｜end▁of▁sentence｜>", "pad_token": "<｜end▁of▁sentence｜>",
            "clean_up_tokenization_spaces": False, "legacy": True, "model_max_length": 131072,
            "tokenizer_class": "LlamaTokenizerFast", "unk_token": None}
    (out / "tokenizer_config.json").write_text(json.dumps(tcfg, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    meta = {"format": "pt", "deepinfer_note": "trained weights (tools/train/train.py)"}
    sha = mc.write_safetensors(out / "model.safetensors", tensors, meta)
    if readme is not None:
        (out / "README.txt").write_text(readme, encoding="utf-8")
    return sha


# ----------------------------------------------------------------------------------------------
# Reading back (exact dequantisation, docs/model/formats.md §1-§2)
# ----------------------------------------------------------------------------------------------

E4M3 = np.concatenate([mc.E4M3_POS, [np.nan], -mc.E4M3_POS, [np.nan]]).astype(np.float32)
E2M1 = np.concatenate([mc.E2M1_POS, -mc.E2M1_POS]).astype(np.float32)


def read_safetensors(path: Path) -> dict[str, tuple[str, np.ndarray]]:
    raw = Path(path).read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    np_dt = {"F32": np.float32, "I32": np.int32, "BF16": np.uint16, "F8_E4M3": np.uint8, "F8_E8M0": np.uint8,
             "I8": np.uint8}
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        arr = np.frombuffer(raw[base + a:base + b], dtype=np_dt[h["dtype"]]).reshape(h["shape"])
        out[name] = (h["dtype"], arr)
    return out


def dequantised(path: Path) -> dict[str, np.ndarray]:
    """Every weight as the engine decodes it (fp32, exact); scales folded in."""
    st = read_safetensors(path)
    out = {}
    for name, (dt, a) in st.items():
        if name.endswith(".scale") and dt == "F8_E8M0":
            continue
        if dt == "F32" or dt == "I32":
            out[name] = a.copy()
        elif dt == "BF16":
            out[name] = (a.astype(np.uint32) << 16).view(np.float32)
        elif dt == "F8_E4M3":
            s = np.ldexp(np.float32(1), st[name[:-7] + ".scale"][1].astype(np.int32) - 127).astype(np.float32)
            w = E4M3[a]
            B = 128
            out[name] = w * np.repeat(np.repeat(s, B, 0), B, 1)[:w.shape[0], :w.shape[1]]
        elif dt == "I8":
            s = np.ldexp(np.float32(1), st[name[:-7] + ".scale"][1].astype(np.int32) - 127).astype(np.float32)
            w = np.empty((a.shape[0], a.shape[1] * 2), dtype=np.float32)
            w[:, 0::2] = E2M1[a & 15]
            w[:, 1::2] = E2M1[a >> 4]
            out[name] = w * np.repeat(s, 32, 1)
        else:
            raise SystemExit(f"{path}: {name}: dtype {dt} not handled")
    return out


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
