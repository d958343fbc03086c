#!/usr/bin/env python3
"""Synthetic chat turns for the default model's fine-tune: structured answers, tool calls and
short plain answers, each rendered by DeepInfer's own chat encoder (the `deepinfer` Python
package) into the exact token sequence the server feeds the model, with the assistant's
answer and its end-of-sentence token after it.

Three kinds of turn, all in King James words (spans of the training text, names, tribes,
books, numbers):
  * response_format json_schema (pydantic-style: strict, additionalProperties false, every
    property required, sometimes titled) or json_object: the answer is one compact JSON object
    (one space after ':' and ','), strings of 1-8 words, arrays of 0-4 items, sometimes a
    nested object;
  * tools (1-3 functions with free strings, bounded strings, integers, booleans, enums): a DSML
    tool-call block as the encoder renders an assistant tool call, short arguments;
  * plain questions, with or without tools: one or two verses of scripture.

    python tools/train/chat_data.py --work W --model models-src/default --count 4000
        -> W/chat.npz: ids (all rows concatenated), offsets, answer_start (per row)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

NAMES = ["Moses", "Aaron", "Abraham", "Isaac", "Jacob", "Joseph", "David", "Solomon", "Samuel", "Saul",
         "Elijah", "Elisha", "Joshua", "Caleb", "Gideon", "Samson", "Ruth", "Naomi", "Boaz", "Esther",
         "Daniel", "Isaiah", "Jeremiah", "Noah", "Sarah", "Rebekah", "Rachel", "Leah", "Miriam", "Deborah",
         "Nathan", "Absalom", "Jonathan", "Eli", "Hannah", "Job", "Jonah", "Ezra", "Nehemiah", "Peter",
         "Paul", "John", "James", "Andrew", "Philip", "Thomas", "Mary", "Martha", "Lazarus", "Timothy"]
TRIBES = ["Reuben", "Simeon", "Levi", "Judah", "Dan", "Naphtali", "Gad", "Asher", "Issachar", "Zebulun",
          "Joseph", "Benjamin", "Ephraim", "Manasseh"]
PLACES = ["Egypt", "Jerusalem", "Bethlehem", "Jordan", "Sinai", "Babylon", "Canaan", "Jericho", "Samaria",
          "Galilee", "Nazareth", "Bethel", "Hebron", "Shiloh", "Damascus", "Moab", "Edom", "Zion", "Gilead"]
BOOKS = ["Genesis", "Exodus", "Leviticus", "Numbers", "Deuteronomy", "Joshua", "Judges", "Ruth", "Samuel",
         "Kings", "Psalms", "Proverbs", "Isaiah", "Jeremiah", "Daniel", "Matthew", "Mark", "Luke", "John",
         "Acts", "Romans", "Hebrews", "Revelation"]
ROLES = ["prophet", "king", "priest", "judge", "shepherd", "scribe", "apostle", "servant", "captain", "queen"]
WORDS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "twelve", "forty"]
NUMS = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 40]

FIELD_NAMES = {
    "string": ["name", "title", "summary", "book", "place", "city", "father", "mother", "role", "tribe_name",
               "description", "text", "verse", "reason", "answer", "land", "people", "note", "subject", "event"],
    "integer": ["age", "years", "chapter", "verse_number", "count", "number", "sons", "days", "year", "level"],
    "boolean": ["faithful", "is_king", "is_prophet", "found", "alive", "blessed", "valid", "done"],
    "array": ["names", "sons", "places", "tags", "keywords", "tribes", "items", "books"],
    "object": ["father", "location", "reference", "details", "parent"],
}
TOOL_NAMES = ["get_verse", "find_person", "record_verse", "search_scripture", "lookup_tribe", "send_message",
              "save_note", "count_people", "get_weather", "set_level", "add_entry", "describe_place", "ping"]
TOOL_DESCS = ["Look up a verse", "Find a person", "Record a verse", "Search the scriptures", "Look up a tribe",
              "Send a message", "Save a note", "Count the people", "Get the weather", "Set the level",
              "Add an entry", "Describe a place", "Check the service"]


class KJV:
    """Word spans and verses of the training text (never the held-out chapters)."""

    def __init__(self, train_txt: Path, rng: np.random.Generator):
        text = train_txt.read_text(encoding="utf-8")
        self.words = re.findall(r"[A-Za-z]+", text[:2_000_000])
        self.sentences = [s.strip() for s in re.split(r"(?<=[.?!])\s+", text[:2_000_000]) if 20 < len(s) < 200]
        self.rng = rng

    def span(self, lo: int = 1, hi: int = 8) -> str:
        n = int(self.rng.integers(lo, hi + 1))
        i = int(self.rng.integers(0, len(self.words) - n))
        return " ".join(self.words[i:i + n])

    def verse(self) -> str:
        return self.sentences[int(self.rng.integers(0, len(self.sentences)))]


def pick(rng, xs):
    return xs[int(rng.integers(0, len(xs)))]


def title_case(s: str) -> str:
    return " ".join(w.capitalize() for w in s.split("_"))


# ---- schemas and values -------------------------------------------------------------------------


def random_property(rng, kind: str, depth: int, pydantic: bool, name: str) -> dict:
    if kind == "string":
        r = rng.random()
        if r < 0.65:
            p = {"type": "string"}                       # free: what pydantic emits for `str`
        elif r < 0.8:
            p = {"type": "string", "maxLength": int(pick(rng, [16, 24, 32, 48]))}
        else:
            p = {"enum": list(dict.fromkeys(pick(rng, [TRIBES, PLACES, BOOKS, ROLES])[:int(rng.integers(2, 6))]))}
    elif kind == "integer":
        p = {"type": "integer"}
        if rng.random() < 0.3:
            p.update({"minimum": 0, "maximum": int(pick(rng, [10, 100, 1000]))})
    elif kind == "boolean":
        p = {"type": "boolean"}
    elif kind == "array":
        item = pick(rng, ["string", "string", "integer"])
        p = {"type": "array", "items": {"type": item}}
    else:
        p = random_object(rng, depth + 1, pydantic, title_case(name))
    if pydantic and kind != "object":
        p = {"title": title_case(name), **p}
    return p


def random_object(rng, depth: int, pydantic: bool, title: str) -> dict:
    n = int(rng.integers(1, 5 if depth == 0 else 3))
    kinds = ["string", "string", "string", "integer", "boolean", "array"] + (["object"] if depth == 0 else [])
    props, used = {}, set()
    for _ in range(n):
        kind = pick(rng, kinds)
        name = pick(rng, FIELD_NAMES[kind])
        if name in used:
            continue
        used.add(name)
        props[name] = random_property(rng, kind, depth, pydantic, name)
    schema = {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}
    if pydantic:
        schema = {"title": title, **schema}
    return schema


def string_value(rng, kjv: KJV, name: str, facts: dict) -> str:
    if name in facts and isinstance(facts[name], str):
        return facts[name]
    table = {"book": BOOKS, "place": PLACES, "city": PLACES, "land": PLACES, "tribe_name": TRIBES,
             "father": NAMES, "mother": NAMES, "name": NAMES, "role": ROLES}
    if name in table and rng.random() < 0.7:
        return pick(rng, table[name])
    return kjv.span(1, 8)


def value_for(rng, kjv: KJV, schema: dict, name: str, facts: dict):
    if "enum" in schema:
        return facts[name] if facts.get(name) in schema["enum"] else pick(rng, schema["enum"])
    t = schema.get("type")
    if t == "string":
        s = string_value(rng, kjv, name, facts)
        if "maxLength" in schema:
            s = s[:schema["maxLength"]].rstrip() or "Amen"
        return s
    if t == "integer":
        v = facts.get(name) if isinstance(facts.get(name), int) else int(pick(rng, NUMS + [int(rng.integers(0, 130))]))
        return min(v, schema.get("maximum", v))
    if t == "boolean":
        return bool(facts[name]) if isinstance(facts.get(name), bool) else bool(rng.random() < 0.5)
    if t == "array":
        n = int(rng.integers(0, 5))
        if schema["items"]["type"] == "integer":
            return [int(pick(rng, NUMS)) for _ in range(n)]
        src = {"sons": NAMES, "names": NAMES, "tribes": TRIBES, "places": PLACES, "books": BOOKS}.get(name)
        return [pick(rng, src) if src else kjv.span(1, 3) for _ in range(n)]
    if t == "object":
        return {k: value_for(rng, kjv, s, k, facts) for k, s in schema.get("properties", {}).items()}
    return kjv.span(1, 4)


def free_object(rng, kjv: KJV) -> dict:
    """json_object mode: a few keys of the usual kinds, no schema."""
    out = {}
    for _ in range(int(rng.integers(1, 4))):
        kind = pick(rng, ["string", "string", "integer", "boolean", "array"])
        name = pick(rng, FIELD_NAMES[kind])
        out[name] = value_for(rng, kjv, {"type": kind, "items": {"type": "string"}}, name, {})
    return out


def facts_sentence(rng, kjv: KJV) -> tuple[str, dict]:
    """A user request naming a few facts the answer can copy."""
    name, tribe, age, place = pick(rng, NAMES), pick(rng, TRIBES), int(rng.integers(3, 130)), pick(rng, PLACES)
    facts = {"name": name, "tribe": tribe, "tribe_name": tribe, "age": age, "years": age, "place": place,
             "city": place, "land": place}
    forms = [f"{name}, of the tribe of {tribe}, was {age} years old.",
             f"{name} dwelt in {place} {age} years.",
             f"{name} of {tribe} went down to {place}.",
             kjv.verse()]
    return pick(rng, forms), facts


def structured_turn(rng, kjv: KJV) -> tuple[list, dict]:
    text, facts = facts_sentence(rng, kjv)
    ask = pick(rng, ["Extract the details", "Extract the person", "Describe this", "Give the answer as JSON",
                     "Summarise the verse", "Fill in the record", "Answer in JSON"])
    if rng.random() < 0.2:
        rf = {"type": "json_object"}
        answer = free_object(rng, kjv)
    else:
        pydantic = rng.random() < 0.7
        title = pick(rng, ["Person", "Verse", "Record", "Answer", "Tribe", "Place", "Event", "Summary"])
        schema = random_object(rng, 0, pydantic, title)
        inner = {"name": title, "schema": schema}
        if rng.random() < 0.85:
            inner["strict"] = True
        rf = {"type": "json_schema", "json_schema": inner}
        answer = {k: value_for(rng, kjv, s, k, facts) for k, s in schema["properties"].items()}
    user = f"{ask}: {text}" if rng.random() < 0.8 else text
    messages = [{"role": "system", "content": "", "response_format": rf}, {"role": "user", "content": user}]
    if rng.random() < 0.2:
        messages[0]["content"] = pick(rng, ["You are a helpful assistant.", "Answer in JSON.",
                                            "Extract structured data."])
    reply = {"role": "assistant", "content": json.dumps(answer, ensure_ascii=False)}
    return messages, reply


def random_tool(rng, name: str, desc: str) -> dict:
    pydantic = rng.random() < 0.5
    n = int(rng.integers(0, 4)) if name != "ping" else 0
    props = {}
    for _ in range(n):
        kind = pick(rng, ["string", "string", "string", "integer", "boolean"])
        key = pick(rng, FIELD_NAMES[kind] + (["query", "message", "content"] if kind == "string" else []))
        props[key] = random_property(rng, kind, 1, pydantic, key)
    params = {"type": "object", "properties": props}
    if props:
        params["required"] = list(props) if rng.random() < 0.8 else list(props)[:1]
    if rng.random() < 0.6:
        params["additionalProperties"] = False
    if pydantic:
        params = {"title": title_case(name), **params}
    fn = {"name": name, "parameters": params}
    if rng.random() < 0.6:
        fn["description"] = desc
    return {"type": "function", "function": fn}


def tool_turn(rng, kjv: KJV) -> tuple[list, dict]:
    k = int(rng.integers(1, 4))
    idx = rng.choice(len(TOOL_NAMES), size=k, replace=False)
    tools = [random_tool(rng, TOOL_NAMES[i], TOOL_DESCS[i]) for i in idx]
    text, facts = facts_sentence(rng, kjv)
    user = pick(rng, [f"{text}", f"Record this: {text}", f"Look it up: {text}", kjv.verse(),
                      f"Call the tool for {pick(rng, NAMES)}.", "What saith the scripture?"])
    messages = [{"role": "system", "content": "", "tools": tools}, {"role": "user", "content": user}]
    if rng.random() < 0.15:
        reply = {"role": "assistant", "content": kjv.verse()}        # no call: a plain answer
        return messages, reply
    calls = []
    for j in range(1 if rng.random() < 0.85 else 2):
        fn = tools[int(rng.integers(0, len(tools)))]["function"]
        args = {key: value_for(rng, kjv, s, key, facts) for key, s in fn["parameters"]["properties"].items()}
        calls.append({"id": f"call_{j}", "type": "function",
                      "function": {"name": fn["name"], "arguments": json.dumps(args, ensure_ascii=False)}})
    return messages, {"role": "assistant", "content": "", "tool_calls": calls}


def plain_turn(rng, kjv: KJV) -> tuple[list, dict]:
    q = pick(rng, [f"Who was {pick(rng, NAMES)}?", f"Tell me of {pick(rng, PLACES)}.", "Say a verse.",
                   f"What is written in {pick(rng, BOOKS)}?", "Hello.", kjv.verse()])
    answer = kjv.verse() if rng.random() < 0.6 else kjv.verse() + " " + kjv.verse()
    return [{"role": "user", "content": q}], {"role": "assistant", "content": answer}


def render_rows(model_dir: str, count: int, train_txt: Path, seed: int, tool_share: float, plain_share: float):
    import deepinfer
    from deepinfer import _core
    llm = deepinfer.LLM(model_dir)
    engine, family = llm._engine, llm.chat_family
    tok = _core.Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
    options = json.dumps({"thinking_mode": "chat", "reasoning_effort": None})
    rng = np.random.default_rng(seed)
    kjv = KJV(train_txt, rng)
    rows, starts, kinds = [], [], []
    for _ in range(count):
        r = rng.random()
        kind = "tool" if r < tool_share else "plain" if r < tool_share + plain_share else "json"
        messages, reply = {"json": structured_turn, "tool": tool_turn, "plain": plain_turn}[kind](rng, kjv)
        # The prompt exactly as the server builds it (chat_prompt.cpp: tools / response_format on
        # a system message, the encoder, then the tokenizer); the answer is what the encoder
        # renders after it for the assistant message, ending in the end-of-sentence token.
        prompt_text, prompt_ids = engine.render_chat(json.dumps(messages), options)
        full = _core.render(family, json.dumps(messages + [reply]), options)
        if not full.startswith(prompt_text) or not full.endswith("<｜end▁of▁sentence｜>"):
            raise SystemExit(f"chat_data: the answer does not extend the prompt:\n{prompt_text!r}\n{full!r}")
        answer_ids = tok.encode(full[len(prompt_text):], True)
        rows.append(np.array(list(prompt_ids) + list(answer_ids), dtype=np.int32))
        starts.append(len(prompt_ids))
        kinds.append(kind)
    return rows, starts, kinds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--model", required=True, help="a checkpoint with the tokenizer to render with")
    ap.add_argument("--count", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=27)
    ap.add_argument("--tool-share", type=float, default=0.55, help="share of tool turns (long prompts, slow to learn)")
    ap.add_argument("--plain-share", type=float, default=0.1, help="share of plain answers; the rest are JSON")
    ap.add_argument("--show", type=int, default=0, help="print this many rendered rows")
    args = ap.parse_args(argv)
    work = Path(args.work)
    rows, starts, kinds = render_rows(args.model, args.count, work / "train.txt", args.seed, args.tool_share,
                                      args.plain_share)
    if args.show:
        from deepinfer import _core
        tok = _core.Tokenizer.from_file(str(Path(args.model) / "tokenizer.json"))
        for r, s in list(zip(rows, starts))[:args.show]:
            print(repr(tok.decode([int(x) for x in r[s - 8:]])))
    lens = np.array([len(r) for r in rows])
    np.savez(work / "chat.npz", ids=np.concatenate(rows), offsets=np.concatenate(([0], np.cumsum(lens))),
             answer_start=np.array(starts), kinds=np.array(kinds))
    print(f"chat_data: {len(rows)} rows ({', '.join(f'{k} {kinds.count(k)}' for k in sorted(set(kinds)))}), "
          f"length median {int(np.median(lens))}, max {lens.max()}, answer tokens "
          f"{int(sum(len(r) - s for r, s in zip(rows, starts)))} -> {work / 'chat.npz'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
