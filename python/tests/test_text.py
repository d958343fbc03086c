"""Tokenizer, render and parse_output equal the CLI and the reference encoders' goldens."""
import json
import os

import pytest

import deepinfer
from conftest import CHAT_DATA, run_cli

# Each CLI call loads the model's tokenizer: a few texts with much in them.
TEXTS = ["Hello, world!  leading spaces and\ttabs\n\nnewlines 数字 12345 和中文 emoji 🙂👍🏽",
         "<｜begin▁of▁sentence｜>special<｜User｜>tokens<｜end▁of▁sentence｜>"]


def test_tokenizer_equals_cli(cli, tmp_path, default_llm):
    tok = default_llm.tokenizer
    model = deepinfer.default_model_dir()
    for i, text in enumerate(TEXTS):
        f = tmp_path / f"t{i}.txt"
        f.write_bytes(text.encode())
        want = [int(t) for t in run_cli(cli, "tokenize", "--model", model, "--text-file", f).split()]
        got = tok.encode(text, add_special_tokens=False)
        assert got == want, text
        assert tok.decode(got) == text
    assert tok.encode(TEXTS[0]) == [tok.bos_token_id] + tok.encode(TEXTS[0], add_special_tokens=False)
    assert tok.encode(TEXTS[1]) == tok.encode(TEXTS[1], add_special_tokens=False)  # BOS already there
    assert tok.encode("", add_special_tokens=False) == []
    # Token 0..: bytes of byte-level tokens, split characters included.
    ids = list(range(0, 300, 7)) + tok.encode(TEXTS[0], add_special_tokens=False)
    assert tok.decode_bytes(ids) == run_cli(cli, "detokenize", "--model", model, "--ids", " ".join(map(str, ids)))


def test_tokenizer_details(default_llm):
    tok = default_llm.tokenizer
    with open(deepinfer.default_model_dir() + "/config.json") as f:
        vocab = json.load(f)["vocab_size"]
    assert len(tok) == tok.vocab_size == default_llm.vocab_size == vocab
    user = tok.token_to_id("<｜User｜>")
    assert tok.id_to_token(user) == "<｜User｜>" and not tok.is_special(user)  # V4 flags only some
    assert tok.is_special(tok.bos_token_id) and tok.id_to_token(tok.bos_token_id) == "<｜begin▁of▁sentence｜>"
    # Specials matched by default, as text on request.
    assert tok.encode("<｜User｜>", add_special_tokens=False) == [user]
    assert user not in tok.encode("<｜User｜>", add_special_tokens=False, match_special_tokens=False)
    assert tok.decode([tok.bos_token_id, *tok.encode("hi", False)], skip_special_tokens=True) == "hi"
    standalone = deepinfer.Tokenizer(deepinfer.default_model_dir() + "/tokenizer.json")
    assert standalone.encode("Hello, world!") == tok.encode("Hello, world!")
    assert standalone.bos_token_id == tok.bos_token_id
    # A split multi-byte character decodes as U+FFFD (bytes stay exact in decode_bytes).
    ids = tok.encode("🙂", add_special_tokens=False)
    if len(ids) > 1:
        assert "\ufffd" in tok.decode(ids[:1])


def _cases():
    for case in sorted((CHAT_DATA / "cases").glob("*.json")):
        for family in ("v4", "v4_0731", "v41"):
            yield pytest.param(case, family, id=f"{family}-{case.stem}")


@pytest.mark.parametrize("case,family", list(_cases()))
def test_render_equals_reference_encoder(case, family):
    doc = json.loads(case.read_text())
    expected = CHAT_DATA / "expected" / family / (case.stem + ".txt")
    args = dict(family=family, **doc["options"])
    if expected.exists():
        assert deepinfer.render(doc["messages"], doc.get("tools"), **args).encode() == expected.read_bytes()
    else:
        assert (CHAT_DATA / "expected" / family / (case.stem + ".error")).exists()
        with pytest.raises(ValueError):
            deepinfer.render(doc["messages"], doc.get("tools"), **args)


def test_render_equals_cli_with_model(cli, tmp_path):
    doc = json.loads((CHAT_DATA / "cases" / "basic_thinking.json").read_text())
    f = tmp_path / "in.json"
    f.write_text(json.dumps(doc))
    want = run_cli(cli, "render", "--model", deepinfer.default_model_dir(), "--input", f).decode()
    assert deepinfer.render(doc["messages"], doc.get("tools"), model_dir=deepinfer.default_model_dir(),
                            **doc["options"]) == want


@pytest.mark.parametrize("name", sorted(p.stem for p in (CHAT_DATA / "completions").glob("*.json")))
def test_parse_output_equals_reference_parser(name):
    doc = json.loads((CHAT_DATA / "completions" / f"{name}.json").read_text())
    want = json.loads((CHAT_DATA / "expected_parse" / f"{name}.json").read_text())
    p = deepinfer.parse_output(doc["text"], family=doc["family"], thinking=doc["thinking"])
    assert p.content == want["content"]
    assert p.reasoning_content == want["reasoning_content"]
    assert [{"name": t.name, "arguments": t.arguments} for t in p.tool_calls] == want["tool_calls"]
    assert p.errors == []


def test_parse_output_reports_truncation():
    text = 'Let me check.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="city" string="true">Par'
    p = deepinfer.parse_output(text, family="v4")
    assert p.content == "Let me check."
    assert p.tool_calls == [] and p.errors


def test_render_and_parse_bad_arguments():
    with pytest.raises(ValueError, match="family"):
        deepinfer.render([{"role": "user", "content": "x"}], family="v5")
    with pytest.raises(ValueError, match="exactly one"):
        deepinfer.render([{"role": "user", "content": "x"}])
    with pytest.raises(ValueError, match="unexpected keyword argument 'no_such_option'"):
        deepinfer.render([{"role": "user", "content": "x"}], family="v4", no_such_option=1)
    with pytest.raises(ValueError, match="family"):
        deepinfer.parse_output("x", family="nope")


def test_default_model_travels_with_the_package():
    """The default checkpoint is package data of the installed package, not a path into the
    checkout the wheel was built from (which may move or be deleted)."""
    pkg = os.path.dirname(os.path.abspath(deepinfer.__file__))
    assert deepinfer.default_model_dir() == os.path.join(pkg, "models", "default")
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        assert os.path.isfile(os.path.join(deepinfer.default_model_dir(), name)), name
