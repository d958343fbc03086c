#!/usr/bin/env python3
"""DeepSeek-V4.1 Engram data of a checkpoint: engram_token_map.json (docs/model/v41.md §6.1).

The engine hashes n-grams of *compressed* token ids; the release computes the compression at
start-up from its tokenizer (inference/engram.py) with the `tokenizers` normalizers. This
script writes the same data beside a checkpoint, in plain Python (unicodedata, numpy):

  token_map         every id -> compressed id. The text of a single id (byte-level decode,
                    special tokens included) is the key; if it holds U+FFFD (a partial UTF-8
                    byte sequence) the raw vocabulary string is the key instead, otherwise the
                    normalised text: NFKC, NFD, accents (category Mn) removed, lowercase, runs
                    of space/tab/CR/LF -> one space, a lone space kept, Unicode White_Space
                    stripped at both ends; empty -> the unnormalised text. New keys get ids
                    0, 1, 2, ... in id order.
  primes            [layer][n-gram size - 2][head]: from engram_vocab_size - 1, the next
                    primes not handed out before (per layer, per n-gram size)
  hash_multipliers  [layer][max_ngram]: numpy default_rng(10007 * layer_id).integers(0, B,
                    max_ngram, int64) * 2 + 1 with B = (2^63 - 1) // compressed_vocab // 2

Usage:
  engram_token_map.py --model DIR            writes DIR/engram_token_map.json from DIR/config.json
                                             and DIR/tokenizer.json
  engram_token_map.py --model DIR --check    compares with the file already there
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import unicodedata
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tokenizer"))  # byte_level.py
from byte_level import byte_decoder  # noqa: E402

# Unicode White_Space (what Rust's char::is_whitespace, and so the Strip normaliser, removes).
WHITE_SPACE = set("\u0009\u000a\u000b\u000c\u000d\u0020\u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
                  "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
SENTINEL = "\ue000"  # private use: keeps a lone space through the strip


def normalize(text: str) -> str:
    s = unicodedata.normalize("NFKC", text)
    s = unicodedata.normalize("NFD", s)
    s = "".join(ch for ch in s if unicodedata.category(ch) != "Mn")
    s = s.lower()
    s = re.sub(r"[ \t\r\n]+", " ", s)
    if s == " ":
        s = SENTINEL
    i, j = 0, len(s)
    while i < j and s[i] in WHITE_SPACE:
        i += 1
    while j > i and s[j - 1] in WHITE_SPACE:
        j -= 1
    return s[i:j].replace(SENTINEL, " ")


def compressed_token_map(tokenizer: dict, vocab_size: int) -> tuple[list[int], int]:
    """The reference's build_compressed_token_map over ids 0 .. vocab_size - 1."""
    decode_bytes = byte_decoder()
    by_id: dict[int, str] = {v: k for k, v in tokenizer["model"]["vocab"].items()}
    added = {a["id"]: a["content"] for a in tokenizer.get("added_tokens", [])}
    keys: dict[str, int] = {}
    out = []
    for i in range(vocab_size):
        if i in added:
            raw = text = added[i]
        elif i in by_id:
            raw = by_id[i]
            text = bytes(decode_bytes[c] for c in raw).decode("utf-8", errors="replace")
        else:
            raw = text = ""  # an id with no token decodes to nothing
        if "\ufffd" in text:
            key = raw
        else:
            norm = normalize(text)
            key = norm if norm else text
        out.append(keys.setdefault(key, len(keys)))
    return out, len(keys)


def is_prime(n: int) -> bool:
    if n < 2:
        return False
    if n % 2 == 0:
        return n == 2
    d = 3
    while d * d <= n:
        if n % d == 0:
            return False
        d += 2
    return True


def engram_primes(n_layers: int, max_ngram: int, n_heads: int, vocab: int) -> list[list[list[int]]]:
    seen: set[int] = set()
    out = []
    for _ in range(n_layers):
        per_layer = []
        for _ in range(max_ngram - 1):
            cur, sizes = vocab - 1, []
            for _ in range(n_heads):
                cur += 1
                while not is_prime(cur) or cur in seen:
                    cur += 1
                seen.add(cur)
                sizes.append(cur)
            per_layer.append(sizes)
        out.append(per_layer)
    return out


def hash_multipliers(layer_ids: list[int], max_ngram: int, compressed_vocab: int) -> list[list[int]]:
    bound = max(1, (np.iinfo(np.int64).max // compressed_vocab) // 2)
    rows = []
    for lid in layer_ids:
        vals = np.random.default_rng(10007 * lid).integers(0, bound, size=(max_ngram,), dtype=np.int64)
        rows.append([int(v) * 2 + 1 for v in vals])
    return rows


def engram_data(text_cfg: dict, tokenizer: dict, pad_id: int = 2) -> dict:
    """Everything engram_token_map.json holds, for a text config (V4.1 text_config keys)."""
    token_map, n = compressed_token_map(tokenizer, text_cfg["vocab_size"])
    layers = text_cfg["engram_layer_ids"]
    G, H = text_cfg["engram_max_ngram_size"], text_cfg["engram_n_heads"]
    return {
        "rule": "inference/engram.py build_compressed_token_map over tokenizer.json",
        "compressed_vocab_size": n,
        "pad_id": pad_id,
        "pad_compressed_id": token_map[pad_id],
        "primes": engram_primes(len(layers), G, H, text_cfg["engram_vocab_size"]),
        "hash_multipliers": hash_multipliers(layers, G, n),
        "token_map": token_map,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="checkpoint folder (config.json + tokenizer.json)")
    ap.add_argument("--check", action="store_true", help="compare with the existing engram_token_map.json")
    ns = ap.parse_args(argv)
    d = Path(ns.model)
    cfg = json.loads((d / "config.json").read_text())
    text = cfg.get("text_config", cfg)
    tok = json.loads((d / "tokenizer.json").read_text(encoding="utf-8"))
    data = engram_data(text, tok, text.get("engram_pad_token_id", 2))
    if ns.check:
        have = json.loads((d / "engram_token_map.json").read_text())
        bad = [k for k in ("token_map", "primes", "hash_multipliers", "pad_compressed_id", "compressed_vocab_size")
               if have.get(k) != data[k]]
        print("engram_token_map.json: " + ("matches" if not bad else "differs in " + ", ".join(bad)))
        return 1 if bad else 0
    (d / "engram_token_map.json").write_text(json.dumps(data, separators=(",", ":")) + "\n")
    print(f"wrote {d / 'engram_token_map.json'}: {data['compressed_vocab_size']} compressed ids")
    return 0


if __name__ == "__main__":
    sys.exit(main())
