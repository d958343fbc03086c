"""The GPT-2 byte-level alphabet that byte-level BPE vocabularies (the V4 tokenizer's) are written in.

No dependencies: imported by scripts that run with the system Python as well as the tooling venv.
"""

from __future__ import annotations


def byte_decoder() -> dict[str, int]:
    """Character -> byte: printable bytes map to themselves, the rest to chr(256 + n) in byte order."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    chars, n = {}, 0
    for b in range(256):
        if b in keep:
            chars[chr(b)] = b
        else:
            chars[chr(256 + n)] = b
            n += 1
    return chars
