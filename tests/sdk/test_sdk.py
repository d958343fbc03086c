#!/usr/bin/env python3
"""`deepinfer serve` driven by the official OpenAI and Anthropic Python SDKs.

Run by CTest (tests/CMakeLists.txt: sdk_openai_anthropic) with the .venv interpreter that
./setup.sh fills from tests/sdk/requirements.txt:

  .venv/bin/python tests/sdk/test_sdk.py --serve build/deepinfer --model ../shared/golden/tiny-v4-c/model

It starts `deepinfer serve --port 0` on a free loopback port, waits for /health, runs the
cases below through the SDKs' own objects (plus a little raw HTTP where the SDKs have no
call: /tokenize), then stops the server with SIGTERM and requires exit status 0.

The tiny checkpoint has random weights: the cases check structure, the SDKs' parsing, and
determinism (temperature 0, fixed seeds), never the meaning of the text.
"""

import argparse
import json
import os
import sys
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "soak"))
import local_server  # noqa: E402  (the server start/stop shared with tools/soak/soak.py)

# Client deadlines stretch on a slow build or machine (test.sh sets this for the sanitizer run).
TIME_SCALE = float(os.environ.get("DEEPINFER_TEST_TIME_SCALE", "1"))

SETUP_HINT = "run ./setup.sh (it installs tests/sdk/requirements.txt into .venv)"
try:
    import anthropic
    import openai
    import pydantic
except ImportError as e:  # never skip: a missing SDK is a broken setup
    sys.exit("test_sdk: FAILED: cannot import the SDKs (%s) with %s; %s" % (e, sys.executable, SETUP_HINT))

MODEL = "tiny-sdk"  # --served-model-name
API_KEY = "sdk-test-key"
SERVER = {}  # proc, url, log (lines of the server's stderr)

# Tools whose calls the grammar keeps short: integer / boolean arguments only.
SET_LEVEL = {"type": "object", "properties": {"level": {"type": "integer"}, "loud": {"type": "boolean"}},
             "required": ["level"]}
TOOLS = [{"type": "function", "function": {"name": "set_level", "description": "Set the level.",
                                           "parameters": SET_LEVEL}},
         {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}}]
NAMED = {"type": "function", "function": {"name": "set_level"}}
HI = [{"role": "user", "content": "Hello there."}]
GREEDY = {"temperature": 0}  # the Anthropic SDK has no temperature argument any more: extra_body


# ------------------------------------------------------------------ the server

def start_server(args):
    try:
        server = local_server.LocalServer(args.serve, args.model,
                                          ["--threads", "2", "--kv-memory", "256M", "--served-model-name", MODEL,
                                           "--api-key", API_KEY], timeout=60 * TIME_SCALE)
    except local_server.ServerError as e:
        sys.exit("test_sdk: FAILED: %s" % e)
    SERVER.update(proc=server.proc, url=server.url, log=server.log, server=server)


def stop_server():
    return SERVER["server"].stop(30)


def raw_post(path, body):
    """Raw HTTP for what the SDKs have no call for (/tokenize)."""
    req = urllib.request.Request(SERVER["url"] + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", "Authorization": "Bearer " + API_KEY})
    with urllib.request.urlopen(req, timeout=60 * TIME_SCALE) as r:
        return json.loads(r.read())


def oai(**kw):
    return openai.OpenAI(base_url=SERVER["url"] + "/v1", api_key=kw.pop("api_key", API_KEY), max_retries=0,
                         timeout=60 * TIME_SCALE, **kw)


def ant():
    return anthropic.Anthropic(base_url=SERVER["url"], api_key=API_KEY, max_retries=0, timeout=60 * TIME_SCALE)


class Case(unittest.TestCase):
    """Records each test's seconds (printed at the end: the budget is ~60 s in all)."""
    durations = []

    def setUp(self):
        self._t0 = time.monotonic()

    def tearDown(self):
        Case.durations.append((time.monotonic() - self._t0, self.id().split(".", 1)[1]))


# ------------------------------------------------------------------ OpenAI: completions

class Completions(Case):
    def setUp(self):
        super().setUp()
        self.c = oai()

    def test_text_prompt_greedy_repeats(self):
        r = self.c.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=8, temperature=0)
        self.assertIsInstance(r, openai.types.Completion)
        self.assertEqual(r.object, "text_completion")
        self.assertEqual(r.model, MODEL)
        self.assertEqual(len(r.choices), 1)
        ch = r.choices[0]
        self.assertIsInstance(ch.text, str)
        self.assertTrue(ch.text)
        self.assertEqual(ch.finish_reason, "length")
        self.assertIsNone(ch.logprobs)
        self.assertEqual(r.usage.completion_tokens, 8)
        self.assertGreater(r.usage.prompt_tokens, 1)
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + 8)
        again = self.c.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=8, temperature=0)
        self.assertEqual(again.choices[0].text, ch.text)

    def test_token_id_prompt_equals_text_prompt(self):
        text = "The capital of France is"
        ids = raw_post("/tokenize", {"prompt": text})["tokens"]  # BOS + the text, as /v1/completions encodes it
        self.assertTrue(all(isinstance(i, int) for i in ids))
        by_ids = self.c.completions.create(model=MODEL, prompt=ids, max_tokens=8, temperature=0)
        by_text = self.c.completions.create(model=MODEL, prompt=text, max_tokens=8, temperature=0)
        self.assertEqual(by_ids.usage.prompt_tokens, len(ids))
        self.assertEqual(by_ids.choices[0].text, by_text.choices[0].text)
        nested = self.c.completions.create(model=MODEL, prompt=[ids], max_tokens=8, temperature=0)
        self.assertEqual(nested.choices[0].text, by_text.choices[0].text)

    def test_echo_logprobs_max_tokens_zero_and_prompt_lists(self):
        # lm-evaluation-harness's loglikelihood request: echo + logprobs + max_tokens 0, a batch.
        ids = raw_post("/tokenize", {"prompt": "Once upon a time"})["tokens"]
        r = self.c.completions.create(model=MODEL, prompt=[ids, ids[:3]], echo=True, logprobs=1, max_tokens=0)
        self.assertEqual([c.index for c in r.choices], [0, 1])
        for ch, p in zip(r.choices, [ids, ids[:3]]):
            self.assertEqual(len(ch.logprobs.token_logprobs), len(p))
            self.assertIsNone(ch.logprobs.token_logprobs[0])
            self.assertTrue(all(isinstance(v, float) and v <= 0 for v in ch.logprobs.token_logprobs[1:]))
        # A prefix's scores are the same alone and in the longer prompt.
        self.assertEqual(r.choices[1].logprobs.token_logprobs[1:], r.choices[0].logprobs.token_logprobs[1:3])
        self.assertEqual(r.usage.completion_tokens, 0)

    def test_n_and_best_of(self):
        r = self.c.completions.create(model=MODEL, prompt=["Hello", "Once upon"], n=2, best_of=3, max_tokens=4,
                                      temperature=1.0, seed=3)
        self.assertEqual([c.index for c in r.choices], [0, 1, 2, 3])
        streamed = {}
        for chunk in self.c.completions.create(model=MODEL, prompt=["Hello", "Once upon"], n=2, max_tokens=4,
                                               temperature=1.0, seed=3, stream=True):
            for c in chunk.choices:
                streamed[c.index] = streamed.get(c.index, "") + c.text
        self.assertEqual(sorted(streamed), [0, 1, 2, 3])

    def test_logprobs(self):
        r = self.c.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=6, temperature=0, logprobs=3)
        lp = r.choices[0].logprobs
        self.assertIsInstance(lp, openai.types.completion_choice.Logprobs)
        n = r.usage.completion_tokens
        self.assertEqual(len(lp.tokens), n)
        self.assertEqual(len(lp.token_logprobs), n)
        self.assertEqual(len(lp.top_logprobs), n)
        self.assertEqual(len(lp.text_offset), n)
        self.assertEqual(lp.text_offset, sorted(lp.text_offset))
        for chosen, top in zip(lp.token_logprobs, lp.top_logprobs):
            self.assertLessEqual(chosen, 0.0)
            self.assertTrue(1 <= len(top) <= 3, top)  # keyed by token text: equal texts merge
            # greedy: the chosen token is the most likely one (a merged key keeps one of its values)
            self.assertGreaterEqual(chosen + 1e-5, max(top.values()))

    def test_stop_string_cuts_the_text(self):
        full = self.c.completions.create(model=MODEL, prompt="One two three", max_tokens=16, temperature=0)
        text = full.choices[0].text
        # A stop string from the middle of the greedy text, clear of U+FFFD (split characters).
        stop = next(text[i:i + 2] for i in range(2, len(text) - 1)
                    if "\ufffd" not in text[i:i + 2] and text[i:i + 2].strip())
        cut = text[:text.index(stop)]
        r = self.c.completions.create(model=MODEL, prompt="One two three", max_tokens=16, temperature=0,
                                      stop=["never appears \x01", stop])
        self.assertEqual(r.choices[0].text, cut)
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertEqual(r.choices[0].model_extra.get("stop_reason"), stop)  # vLLM's extension
        streamed = "".join(c.choices[0].text for c in self.c.completions.create(
            model=MODEL, prompt="One two three", max_tokens=16, temperature=0, stop=stop, stream=True)
            if c.choices)
        self.assertEqual(streamed, cut)

    def test_seed_reproducibility(self):
        def run(seed):
            return self.c.completions.create(model=MODEL, prompt="Tell me a story", max_tokens=16, temperature=1.0,
                                             seed=seed).choices[0].text
        a = run(1234)
        self.assertEqual(run(1234), a)
        self.assertTrue(run(1235) != a or run(1236) != a, "different seeds gave the same text")

    def test_streaming_with_usage(self):
        whole = self.c.completions.create(model=MODEL, prompt="Streaming test", max_tokens=10, temperature=0)
        chunks = list(self.c.completions.create(model=MODEL, prompt="Streaming test", max_tokens=10, temperature=0,
                                                stream=True, stream_options={"include_usage": True}))
        self.assertTrue(all(isinstance(c, openai.types.Completion) for c in chunks))
        self.assertEqual("".join(c.choices[0].text for c in chunks if c.choices), whole.choices[0].text)
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens, 10)
        self.assertEqual(chunks[-1].usage.prompt_tokens, whole.usage.prompt_tokens)
        self.assertTrue(all(c.usage is None for c in chunks[:-1]))
        self.assertEqual([c.choices[0].finish_reason for c in chunks if c.choices][-1], "length")


# ------------------------------------------------------------------ OpenAI: chat

class Chat(Case):
    def setUp(self):
        super().setUp()
        self.c = oai()

    def test_non_streaming(self):
        r = self.c.chat.completions.create(model=MODEL, messages=[{"role": "system", "content": "Be brief."}] + HI,
                                           max_tokens=8, temperature=0)
        self.assertIsInstance(r, openai.types.chat.ChatCompletion)
        self.assertEqual(r.object, "chat.completion")
        self.assertEqual(r.model, MODEL)
        ch = r.choices[0]
        self.assertEqual(ch.message.role, "assistant")
        self.assertIsInstance(ch.message.content, str)
        self.assertTrue(ch.message.content)
        self.assertFalse(ch.message.tool_calls)
        self.assertEqual(ch.finish_reason, "length")
        self.assertEqual(r.usage.completion_tokens, 8)

    def test_n_choices(self):
        r = self.c.chat.completions.create(model=MODEL, messages=HI, max_tokens=6, temperature=1.0, seed=1, n=2)
        self.assertEqual([c.index for c in r.choices], [0, 1])
        self.assertEqual(r.usage.completion_tokens, 12)
        seen = set()
        for chunk in self.c.chat.completions.create(model=MODEL, messages=HI, max_tokens=6, temperature=1.0, seed=1,
                                                    n=2, stream=True):
            seen.update(c.index for c in chunk.choices)
        self.assertEqual(seen, {0, 1})

    def test_streaming_with_usage_matches(self):
        whole = self.c.chat.completions.create(model=MODEL, messages=HI, max_tokens=12, temperature=0)
        chunks = list(self.c.chat.completions.create(model=MODEL, messages=HI, max_tokens=12, temperature=0,
                                                     stream=True, stream_options={"include_usage": True}))
        self.assertTrue(all(isinstance(c, openai.types.chat.ChatCompletionChunk) for c in chunks))
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        self.assertEqual("".join(c.choices[0].delta.content or "" for c in chunks if c.choices),
                         whole.choices[0].message.content)
        last = chunks[-1]  # include_usage: a last chunk with no choices and the usage
        self.assertEqual(last.choices, [])
        self.assertEqual(last.usage.completion_tokens, 12)
        self.assertEqual(last.usage.prompt_tokens, whole.usage.prompt_tokens)
        self.assertTrue(all(c.usage is None for c in chunks[:-1]))
        self.assertEqual(chunks[-2].choices[0].finish_reason, "length")
        self.assertEqual(len({c.id for c in chunks}), 1)

    def test_stream_helper(self):
        whole = self.c.chat.completions.create(model=MODEL, messages=HI, max_tokens=12, temperature=0)
        with self.c.chat.completions.stream(model=MODEL, messages=HI, max_tokens=12, temperature=0) as s:
            deltas = [e.delta for e in s if e.type == "content.delta"]
            snapshot = s.current_completion_snapshot
            with self.assertRaises(openai.LengthFinishReasonError):  # the helper refuses a cut answer
                s.get_final_completion()
        self.assertEqual("".join(deltas), whole.choices[0].message.content)
        self.assertEqual(snapshot.choices[0].message.content, whole.choices[0].message.content)
        self.assertEqual(snapshot.choices[0].finish_reason, "length")

    def test_logprobs(self):
        r = self.c.chat.completions.create(model=MODEL, messages=HI, max_tokens=5, temperature=0, logprobs=True,
                                           top_logprobs=2)
        content = r.choices[0].logprobs.content
        self.assertEqual(len(content), r.usage.completion_tokens)
        for t in content:
            self.assertIsInstance(t, openai.types.chat.ChatCompletionTokenLogprob)
            self.assertLessEqual(t.logprob, 0.0)
            self.assertIsInstance(t.bytes, list)
            self.assertEqual(len(t.top_logprobs), 2)
            self.assertAlmostEqual(t.logprob, t.top_logprobs[0].logprob, places=5)  # greedy

    def test_seed_reproducibility(self):
        def run(seed):
            return self.c.chat.completions.create(model=MODEL, messages=HI, max_tokens=12, temperature=0.9,
                                                  seed=seed).choices[0].message.content
        self.assertEqual(run(7), run(7))

    def test_stop_string(self):
        text = self.c.chat.completions.create(model=MODEL, messages=HI, max_tokens=16,
                                              temperature=0).choices[0].message.content
        stop = next(text[i:i + 2] for i in range(2, len(text) - 1)
                    if "\ufffd" not in text[i:i + 2] and text[i:i + 2].strip())
        r = self.c.chat.completions.create(model=MODEL, messages=HI, max_tokens=16, temperature=0, stop=[stop])
        self.assertEqual(r.choices[0].message.content, text[:text.index(stop)])
        self.assertEqual(r.choices[0].finish_reason, "stop")

    def test_tool_history_renders(self):
        # DSML rendered in: an earlier call and its result in the conversation.
        msgs = [{"role": "user", "content": "Set the level to 3."},
                {"role": "assistant", "content": None,
                 "tool_calls": [{"id": "call_1", "type": "function",
                                 "function": {"name": "set_level", "arguments": json.dumps({"level": 3})}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "{\"ok\": true}"},
                {"role": "user", "content": "Thanks."}]
        r = self.c.chat.completions.create(model=MODEL, messages=msgs, tools=TOOLS, max_tokens=4, temperature=0)
        self.assertEqual(r.choices[0].finish_reason, "length")
        plain = self.c.chat.completions.create(model=MODEL, messages=msgs[-1:], tools=TOOLS, max_tokens=4,
                                               temperature=0)
        self.assertGreater(r.usage.prompt_tokens, plain.usage.prompt_tokens)


# ------------------------------------------------------------------ OpenAI: tools

class Tools(Case):
    def setUp(self):
        super().setUp()
        self.c = oai()

    @staticmethod
    def body(**kw):
        b = dict(model=MODEL, messages=[{"role": "user", "content": "Set the level."}], tools=TOOLS, max_tokens=500,
                 seed=3)
        b.update(kw)
        return b

    def check_set_level(self, call):
        self.assertEqual(call.type, "function")
        self.assertTrue(call.id)
        self.assertEqual(call.function.name, "set_level")
        args = json.loads(call.function.arguments)
        self.assertIsInstance(args, dict)
        self.assertIsInstance(args["level"], int)
        return args

    @classmethod
    def named_call(cls):
        """The named-choice answer (non-streaming), made once for the tests that compare with it."""
        if not hasattr(cls, "_named"):
            cls._named = oai().chat.completions.create(**cls.body(tool_choice=NAMED))
        return cls._named

    def test_named_tool_choice(self):
        r = self.named_call()
        ch = r.choices[0]
        self.assertEqual(ch.finish_reason, "tool_calls")
        self.assertIsNone(ch.message.content)
        self.assertEqual(len(ch.message.tool_calls), 1)
        self.assertIsInstance(ch.message.tool_calls[0], openai.types.chat.ChatCompletionMessageFunctionToolCall)
        self.check_set_level(ch.message.tool_calls[0])

    def test_named_tool_choice_streamed_arguments(self):
        expected = json.loads(self.named_call().choices[0].message.tool_calls[0].function.arguments)
        ids, names, args, content, finish = [], [], "", "", None
        for chunk in self.c.chat.completions.create(**self.body(tool_choice=NAMED, stream=True)):
            for ch in chunk.choices:
                content += ch.delta.content or ""
                finish = ch.finish_reason or finish
                for t in ch.delta.tool_calls or []:
                    self.assertEqual(t.index, 0)
                    if t.id:
                        ids.append(t.id)
                    if t.function.name:
                        names.append(t.function.name)
                    args += t.function.arguments or ""
        self.assertEqual(len(ids), 1)
        self.assertEqual(names, ["set_level"])
        self.assertEqual(json.loads(args), expected)  # the deltas concatenate to valid JSON; same seed, same call
        self.assertEqual(content, "")
        self.assertEqual(finish, "tool_calls")

    def test_required_single_call(self):
        r = self.c.chat.completions.create(**self.body(tool_choice="required", parallel_tool_calls=False))
        calls = r.choices[0].message.tool_calls
        self.assertEqual(r.choices[0].finish_reason, "tool_calls")
        self.assertEqual(len(calls), 1)
        self.assertIn(calls[0].function.name, ("set_level", "ping"))
        self.assertIsInstance(json.loads(calls[0].function.arguments), dict)

    def test_stream_helper_and_pydantic_tool(self):
        class SetLevel(pydantic.BaseModel):
            level: int
            loud: bool
        tool = openai.pydantic_function_tool(SetLevel, name="set_level")  # strict: the SDK parses the arguments
        with self.c.chat.completions.stream(**self.body(tools=[tool], tool_choice=NAMED)) as s:
            done = [e for e in s if e.type == "tool_calls.function.arguments.done"]
            final = s.get_final_completion()
        self.assertEqual(len(done), 1)
        self.assertEqual(done[0].name, "set_level")
        self.assertIsInstance(done[0].parsed_arguments, SetLevel)
        call = final.choices[0].message.tool_calls[0]
        self.assertEqual(call.function.parsed_arguments, done[0].parsed_arguments)
        self.assertEqual(SetLevel.model_validate_json(call.function.arguments), done[0].parsed_arguments)


# ------------------------------------------------------------------ OpenAI: reasoning, formats, models, errors

class Reasoning(Case):
    def setUp(self):
        super().setUp()
        self.c = oai()

    def test_thinking_via_chat_template_kwargs(self):
        kw = dict(model=MODEL, messages=HI, max_tokens=16, seed=5, temperature=0.8)
        on = {"chat_template_kwargs": {"thinking": True}}
        r = self.c.chat.completions.create(**kw, extra_body=on)
        msg = r.choices[0].message
        reasoning = msg.model_extra.get("reasoning_content")
        self.assertIsInstance(reasoning, str)
        self.assertTrue(reasoning)
        self.assertEqual(getattr(msg, "reasoning_content"), reasoning)
        # The split against the raw text of the same prompt and seed: reasoning up to
        # </think>, content after it (this random model rarely leaves its reasoning).
        ids = raw_post("/tokenize", {"messages": HI, "chat_template_kwargs": {"thinking": True}})["tokens"]
        self.assertEqual(r.usage.prompt_tokens, len(ids))
        raw = self.c.completions.create(model=MODEL, prompt=ids, max_tokens=16, seed=5, temperature=0.8,
                                        extra_body={"skip_special_tokens": False}).choices[0].text
        head, sep, tail = raw.partition("</think>")
        self.assertEqual(reasoning, head)
        self.assertEqual(msg.content or "", tail if sep else "")
        # Streamed: reasoning_content deltas (an extra field of the delta) add up to the same.
        streamed = ""
        for chunk in self.c.chat.completions.create(**kw, extra_body=on, stream=True):
            for ch in chunk.choices:
                streamed += (ch.delta.model_extra or {}).get("reasoning_content") or ""
        self.assertEqual(streamed, reasoning)
        off = self.c.chat.completions.create(**kw).choices[0].message
        self.assertFalse(off.model_extra.get("reasoning_content"))
        self.assertTrue(off.content)

    def test_thinking_via_reasoning_effort(self):
        r = self.c.chat.completions.create(model=MODEL, messages=HI, max_tokens=8, temperature=0,
                                           reasoning_effort="high")
        self.assertTrue(r.choices[0].message.model_extra.get("reasoning_content"))
        r = self.c.chat.completions.create(model=MODEL, messages=HI, max_tokens=8, temperature=0,
                                           reasoning_effort="none")
        self.assertFalse(r.choices[0].message.model_extra.get("reasoning_content"))


class Formats(Case):
    def setUp(self):
        super().setUp()
        self.c = oai()

    def test_json_object(self):
        # Sampled answers are compact JSON (no whitespace but one space after ':' or ','), so
        # this random model reaches "}" less often than when " }" and "\n}" tokens closed the
        # object too: of seeds 0-7, 5 ends within max_tokens (0-3 all run to length).
        complete = 0
        for seed in range(8):
            r = self.c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Answer in JSON."}],
                                               response_format={"type": "json_object"}, seed=seed, max_tokens=200)
            ch = r.choices[0]
            self.assertIn(ch.finish_reason, ("stop", "length"))
            if ch.finish_reason == "stop":
                complete += 1
                self.assertIsInstance(json.loads(ch.message.content), dict)
        self.assertGreater(complete, 0)

    def test_json_schema_via_pydantic(self):
        class Answer(pydantic.BaseModel):
            n: int
            ok: bool
        r = self.c.chat.completions.parse(model=MODEL, messages=[{"role": "user", "content": "Answer in JSON."}],
                                          response_format=Answer, seed=1, max_tokens=300)
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertIsInstance(r.choices[0].message.parsed, Answer)

    def test_models(self):
        models = list(self.c.models.list())
        self.assertEqual([m.id for m in models], [MODEL])
        self.assertIsInstance(models[0], openai.types.Model)
        self.assertEqual(models[0].object, "model")
        self.assertEqual(self.c.models.retrieve(MODEL).id, MODEL)
        with self.assertRaises(openai.NotFoundError):
            self.c.models.retrieve("no-such-model")


class Errors(Case):
    def setUp(self):
        super().setUp()
        self.c = oai()

    def bad(self, param, **kw):
        body = dict(model=MODEL, messages=HI, max_tokens=4)
        body.update(kw)
        with self.assertRaises(openai.BadRequestError) as cm:
            self.c.chat.completions.create(**body)
        self.assertEqual(cm.exception.status_code, 400)
        self.assertEqual(cm.exception.param, param)
        self.assertEqual(cm.exception.type, "invalid_request_error")
        return cm.exception

    def test_bad_parameters(self):
        self.bad("max_tokens", max_tokens=0)
        self.bad("n", n=0)
        self.bad("top_logprobs", logprobs=True, top_logprobs=50)
        self.bad("tool_choice", tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}})
        with self.assertRaises(openai.BadRequestError) as cm:
            self.c.completions.create(model=MODEL, prompt="x", max_tokens=4, extra_body={"stop_token_ids": "x"})
        self.assertEqual(cm.exception.status_code, 400)

    def test_unknown_model(self):
        with self.assertRaises(openai.NotFoundError) as cm:
            self.c.chat.completions.create(model="no-such-model", messages=HI, max_tokens=4)
        self.assertEqual(cm.exception.status_code, 404)
        with self.assertRaises(openai.NotFoundError):
            self.c.completions.create(model="no-such-model", prompt="x", max_tokens=4)

    def test_api_key(self):
        with self.assertRaises(openai.AuthenticationError) as cm:
            oai(api_key="wrong").models.list()
        self.assertEqual(cm.exception.status_code, 401)


# ------------------------------------------------------------------ Anthropic

class Anthropic(Case):
    def setUp(self):
        super().setUp()
        self.a = ant()

    def test_create_matches_openai_chat(self):
        m = self.a.messages.create(model=MODEL, max_tokens=10, messages=HI, system="Be brief.", extra_body=GREEDY)
        self.assertIsInstance(m, anthropic.types.Message)
        self.assertEqual(m.role, "assistant")
        self.assertEqual(m.model, MODEL)
        self.assertEqual(m.stop_reason, "max_tokens")
        self.assertEqual(m.usage.output_tokens, 10)
        self.assertEqual(len(m.content), 1)
        self.assertIsInstance(m.content[0], anthropic.types.TextBlock)
        chat = oai().chat.completions.create(model=MODEL, max_tokens=10, temperature=0,
                                             messages=[{"role": "system", "content": "Be brief."}] + HI)
        self.assertEqual(m.content[0].text, chat.choices[0].message.content)  # same template, same tokens
        self.assertEqual(m.usage.input_tokens, chat.usage.prompt_tokens)

    def test_stream_text_events(self):
        whole = self.a.messages.create(model=MODEL, max_tokens=12, messages=HI, extra_body=GREEDY)
        with self.a.messages.stream(model=MODEL, max_tokens=12, messages=HI, extra_body=GREEDY) as s:
            events = list(s)
            final = s.get_final_message()
        self.assertEqual(events[0].type, "message_start")
        self.assertEqual(events[-1].type, "message_stop")
        text = "".join(e.text for e in events if e.type == "text")
        self.assertEqual(text, whole.content[0].text)
        self.assertEqual(final.content[0].text, whole.content[0].text)
        self.assertEqual(final.stop_reason, "max_tokens")
        self.assertEqual(final.usage.output_tokens, 12)
        with self.a.messages.stream(model=MODEL, max_tokens=12, messages=HI, extra_body=GREEDY) as s:
            self.assertEqual("".join(s.text_stream), whole.content[0].text)

    def test_stop_sequences(self):
        text = self.a.messages.create(model=MODEL, max_tokens=16, messages=HI, extra_body=GREEDY).content[0].text
        stop = next(text[i:i + 2] for i in range(2, len(text) - 1)
                    if "\ufffd" not in text[i:i + 2] and text[i:i + 2].strip())
        m = self.a.messages.create(model=MODEL, max_tokens=16, messages=HI, stop_sequences=[stop], extra_body=GREEDY)
        self.assertEqual(m.stop_reason, "stop_sequence")
        self.assertEqual(m.stop_sequence, stop)
        self.assertEqual(m.content[0].text, text[:text.index(stop)])

    def tools(self):
        return [{"name": "set_level", "description": "Set the level.", "input_schema": SET_LEVEL},
                {"name": "ping", "input_schema": {"type": "object", "properties": {}}}]

    def test_tool_use_named(self):
        m = self.a.messages.create(model=MODEL, max_tokens=400, messages=[{"role": "user", "content": "Set the level."}],
                                   tools=self.tools(), tool_choice={"type": "tool", "name": "set_level"},
                                   extra_body=GREEDY)
        self.assertEqual(m.stop_reason, "tool_use")
        self.assertEqual(len(m.content), 1)
        block = m.content[0]
        self.assertIsInstance(block, anthropic.types.ToolUseBlock)
        self.assertEqual(block.name, "set_level")
        self.assertTrue(block.id)
        self.assertIsInstance(block.input["level"], int)
        # The result back in: a tool_result turn renders and generates.
        follow = self.a.messages.create(
            model=MODEL, max_tokens=4, tools=self.tools(), extra_body=GREEDY,
            messages=[{"role": "user", "content": "Set the level."},
                      {"role": "assistant", "content": [block.model_dump(include={"type", "id", "name", "input"})]},
                      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": block.id, "content": "done"}]}])
        self.assertEqual(follow.stop_reason, "max_tokens")

    def test_tool_use_streamed(self):
        kw = dict(model=MODEL, max_tokens=400, messages=[{"role": "user", "content": "Set the level."}],
                  tools=self.tools(), tool_choice={"type": "any", "disable_parallel_tool_use": True},
                  extra_body=GREEDY)
        with self.a.messages.stream(**kw) as s:
            events = list(s)
            final = s.get_final_message()
        partial = "".join(e.partial_json for e in events if e.type == "input_json")
        self.assertEqual(final.stop_reason, "tool_use")
        self.assertEqual(len(final.content), 1)
        block = final.content[0]
        self.assertIsInstance(block, anthropic.types.ToolUseBlock)
        self.assertIn(block.name, ("set_level", "ping"))
        self.assertEqual(json.loads(partial), block.input)

    def test_thinking(self):
        kw = dict(model=MODEL, max_tokens=16, messages=HI, extra_body=GREEDY)
        m = self.a.messages.create(**kw, thinking={"type": "enabled", "budget_tokens": 1024})
        self.assertIsInstance(m.content[0], anthropic.types.ThinkingBlock)
        self.assertTrue(m.content[0].thinking)
        with self.a.messages.stream(**kw, thinking={"type": "enabled", "budget_tokens": 1024}) as s:
            thinking = "".join(e.thinking for e in s if e.type == "thinking")
            final = s.get_final_message()
        self.assertEqual(thinking, m.content[0].thinking)
        self.assertEqual(final.content[0].thinking, m.content[0].thinking)
        # adaptive: the model decides how much to think, so thinking mode is on
        adaptive = self.a.messages.create(**kw, thinking={"type": "adaptive"})
        self.assertEqual(adaptive.content[0].type, "thinking")
        self.assertEqual(adaptive.content[0].thinking, m.content[0].thinking)
        off = self.a.messages.create(**kw, thinking={"type": "disabled"})
        self.assertEqual([b.type for b in off.content], ["text"])

    def test_models_and_errors(self):
        self.assertEqual([m.id for m in self.a.models.list()], [MODEL])
        self.assertEqual(self.a.models.retrieve(MODEL).id, MODEL)
        with self.assertRaises(anthropic.NotFoundError) as cm:
            self.a.messages.create(model="no-such-model", max_tokens=4, messages=HI)
        self.assertEqual(cm.exception.status_code, 404)
        with self.assertRaises(anthropic.BadRequestError) as cm:
            self.a.messages.create(model=MODEL, max_tokens=0, messages=HI)
        self.assertEqual(cm.exception.status_code, 400)
        self.assertEqual(cm.exception.body["type"], "error")
        self.assertEqual(cm.exception.body["error"]["type"], "invalid_request_error")
        with self.assertRaises(anthropic.BadRequestError):
            self.a.messages.create(model=MODEL, max_tokens=4, messages=HI, tools=self.tools(),
                                   tool_choice={"type": "tool", "name": "nope"})
        with self.assertRaises(anthropic.AuthenticationError):
            anthropic.Anthropic(base_url=SERVER["url"], api_key="wrong", max_retries=0).messages.create(
                model=MODEL, max_tokens=4, messages=HI)


# ------------------------------------------------------------------ main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--serve", required=True, help="the deepinfer executable")
    ap.add_argument("--model", required=True, help="checkpoint directory (the tiny golden model)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args, rest = ap.parse_known_args()
    if not os.path.isfile(os.path.join(args.model, "config.json")):
        sys.exit("test_sdk: FAILED: no checkpoint at %s" % args.model)
    print("test_sdk: openai %s, anthropic %s, pydantic %s, python %s" %
          (openai.__version__, anthropic.__version__, pydantic.VERSION, sys.version.split()[0]), flush=True)
    t0 = time.monotonic()
    start_server(args)
    print("test_sdk: server at %s (pid %d)" % (SERVER["url"], SERVER["proc"].pid), flush=True)
    result = None
    try:
        prog = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
        result = prog.result
    finally:
        status = stop_server()
    print("test_sdk: slowest: " + ", ".join("%s %.1f s" % (n, d) for d, n in sorted(Case.durations)[::-1][:int(os.environ.get("SDK_TEST_SLOWEST", "6"))]))
    ok = result is not None and result.wasSuccessful()
    if status != 0:
        print("test_sdk: FAILED: the server exited with %s after SIGTERM" % status)
        ok = False
    if not ok:
        print("test_sdk: server log (last 40 lines):\n" + "".join(SERVER["log"][-40:]))
    print("test_sdk: %s in %.1f s, server exit status %s" % ("OK" if ok else "FAILED", time.monotonic() - t0, status))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
