#!/usr/bin/env python3
"""Regenerate tests/data/chat/expected*/ by running DeepSeek's Python reference encoders.

The reference files are not part of this repository (they ship with the
checkpoints: DeepSeek-V4-Flash encoding/encoding_dsv4.py, DeepSeek-V4-Flash-0731
encoding/encoding_dsv4.py, DeepSeek-V4.1-Flash encoding/encoding.py). Point this
script at copies kept outside the tree:

  python3 tools/chat/make_goldens.py --v4 /tmp/enc/enc_v4.py \
      --v4-0731 /tmp/enc/enc_v4_0731.py --v41 /tmp/enc/enc_v41.py

For every tests/data/chat/cases/NAME.json ({"messages", "options", "tools"?}) and
every family it writes expected/FAMILY/NAME.txt (the prompt, exact UTF-8 bytes) or
expected/FAMILY/NAME.error (the exception the reference raised). "tools" is put on
the first message, as the reference's own case loader does. For every
completions/NAME.json ({"family", "thinking", "text"}) it writes
expected_parse/NAME.json from the reference's parse_message_from_completion_text.
"""
import argparse
import copy
import importlib.util
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "..", "tests", "data", "chat")


def load(path, name):
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--v4", required=True)
    ap.add_argument("--v4-0731", required=True)
    ap.add_argument("--v41", required=True)
    a = ap.parse_args()
    families = {"v4": load(a.v4, "ref_v4"), "v4_0731": load(a.v4_0731, "ref_v4_0731"), "v41": load(a.v41, "ref_v41")}

    cases_dir = os.path.join(DATA, "cases")
    n_ok = n_err = 0
    for fam, mod in families.items():
        out_dir = os.path.join(DATA, "expected", fam)
        os.makedirs(out_dir, exist_ok=True)
        for f in os.listdir(out_dir):
            os.remove(os.path.join(out_dir, f))
        for fn in sorted(os.listdir(cases_dir)):
            name = fn[:-5]
            with open(os.path.join(cases_dir, fn), encoding="utf-8") as fh:
                case = json.load(fh)
            messages = copy.deepcopy(case["messages"])
            if "tools" in case:
                messages[0]["tools"] = case["tools"]
            try:
                prompt = mod.encode_messages(messages, **case.get("options", {}))
            except Exception as e:  # the reference rejects this input
                with open(os.path.join(out_dir, name + ".error"), "w", encoding="utf-8") as fh:
                    fh.write(f"{type(e).__name__}: {e}\n")
                n_err += 1
                continue
            with open(os.path.join(out_dir, name + ".txt"), "wb") as fh:
                fh.write(prompt.encode("utf-8"))
            n_ok += 1

    comp_dir = os.path.join(DATA, "completions")
    out_dir = os.path.join(DATA, "expected_parse")
    os.makedirs(out_dir, exist_ok=True)
    n_parse = 0
    for fn in sorted(os.listdir(comp_dir)):
        with open(os.path.join(comp_dir, fn), encoding="utf-8") as fh:
            c = json.load(fh)
        mod = families["v41" if c["family"] == "v41" else "v4"]
        msg = mod.parse_message_from_completion_text(c["text"], "thinking" if c["thinking"] else "chat")
        res = {"content": msg["content"], "reasoning_content": msg["reasoning_content"],
               "tool_calls": [{"name": t["function"]["name"], "arguments": t["function"]["arguments"]} for t in msg["tool_calls"]]}
        with open(os.path.join(out_dir, fn), "w", encoding="utf-8") as fh:
            json.dump(res, fh, ensure_ascii=False, indent=1)
            fh.write("\n")
        n_parse += 1
    print(f"{n_ok} prompts, {n_err} rejections, {n_parse} parsed completions")


if __name__ == "__main__":
    main()
