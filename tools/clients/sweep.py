#!/usr/bin/env python3
"""Structured-output sweep of real client libraries against a running `deepinfer serve`.

Each client sends N requests (sampled, temperature 1 by default) that ask for a pydantic object
with free-text string fields, a number and a list of strings, through the client's own
structured-output path:

  openai_chat_parse        openai  chat.completions.parse(response_format=Model)
  openai_responses_parse   openai  responses.parse(text_format=Model)
  openai_named_tool        openai  chat.completions.create(tools=[pydantic_function_tool(Model)],
                                   tool_choice named); one call with arguments valid for Model
  openai_*_stream          the same three through the client's streaming helpers (.stream())
  instructor_json          instructor Mode.JSON (response_format json_object, schema in the prompt)
  instructor_json_schema   instructor Mode.JSON_SCHEMA (response_format json_object + schema)
  instructor_tools         instructor Mode.TOOLS (named tool_choice)
  langchain_json_schema    langchain-openai with_structured_output(Model, method="json_schema")
  langchain_function_calling  with_structured_output(Model, method="function_calling")
  langchain_responses_json_schema  the same as langchain_json_schema over the Responses API
  langchain_tools_stream       ChatOpenAI().bind_tools([Model], tool_choice=name).stream(), chunks added
  langchain_responses_tools   ChatOpenAI(use_responses_api=True).bind_tools([Model], tool_choice=name)
  langchain_responses_tools_stream  the same, streamed

Every request ends as one of: ok (the client returned a valid Model), length (it ran to
max_tokens), error (anything else; the first error texts are printed). Clients that are not
importable are skipped with a line saying so. The libraries are not project dependencies:
install them anywhere and put them on PYTHONPATH, e.g.

  pip install --target /tmp/clientdeps openai instructor langchain-openai pydantic
  PYTHONPATH=/tmp/clientdeps python3 tools/clients/sweep.py --url http://127.0.0.1:8000 -n 10

--dump DIR writes every failed request's raw HTTP requests and responses to DIR (one file per request)
to see where the tokens went. A manual tool: CI has no network to install the clients.
Exit status 1 when any request of a client that ran did not end ok.
"""

import argparse
import json
import os
import sys
import time
import traceback


def build_models():
    from typing import List

    from pydantic import BaseModel, Field

    class BookNote(BaseModel):
        """A short note about a book."""
        title: str = Field(description="the book's title")
        summary: str = Field(description="one sentence about the book")
        rating: int = Field(description="a rating from 1 to 10")
        keywords: List[str] = Field(description="a few keywords")

    return BookNote


PROMPT = "Write a short note about the book of Genesis: its title, a one-sentence summary, a rating and keywords."
SYSTEM = "You are a helpful assistant. Answer with the requested object."


class Capture:
    """httpx event hooks that keep the raw bodies of the responses of the current request."""

    def __init__(self):
        self.bodies = []

    def reset(self):
        self.bodies = []

    def on_response(self, response):
        response.read()
        request = response.request
        self.bodies.append(f"{request.method} {request.url}\n{request.content.decode(errors='replace')}\n"
                           f"-> {response.status_code}\n{response.text}")

    def http_client(self):
        return http_module().Client(event_hooks={"response": [self.on_response]}, timeout=600)


def http_module():
    """The HTTP library the installed openai package is built on (httpx, or httpx2 in openai 3)."""
    import openai._base_client as base
    for name in ("httpx2", "httpx"):
        if hasattr(base, name):
            return getattr(base, name)
    import httpx
    return httpx


class Outcome(Exception):
    """Raised by a trial to say how it ended when it did not return a valid object."""

    def __init__(self, kind, detail):
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


def token_limit(args, key="max_tokens"):
    """The request's token limit under the client's own name for it; none with --max-tokens 0."""
    return {key: args.max_tokens} if args.max_tokens > 0 else {}


def is_length_error(exc):
    name = type(exc).__name__
    text = str(exc)
    return ("LengthFinishReason" in name or "IncompleteOutput" in name
            or "max_tokens" in text or "length limit" in text or "max_output_tokens" in text)


# ------------------------------------------------------------------ trials (one request each)

def openai_client(args, capture):
    import openai
    return openai.OpenAI(base_url=args.url.rstrip("/") + "/v1", api_key=args.api_key,
                         http_client=capture.http_client(), max_retries=0)


def check_parsed_response(response, Model):
    """A Responses API answer (plain or streamed) that finished with a parsed Model."""
    if response.status == "incomplete":
        raise Outcome("length", f"status incomplete: {response.incomplete_details}")
    if not isinstance(response.output_parsed, Model):
        raise Outcome("error", f"output_parsed is {response.output_parsed!r}")


def check_parsed_choice(choice, Model):
    """A chat completion choice (plain or streamed) that finished with a parsed Model."""
    if choice.finish_reason == "length":
        raise Outcome("length", "finish_reason length")
    if not isinstance(choice.message.parsed, Model):
        raise Outcome("error", f"parsed is {choice.message.parsed!r} (refusal {choice.message.refusal!r})")


def trial_openai_chat_parse(args, capture, Model):
    client = openai_client(args, capture)
    completion = client.chat.completions.parse(
        model=args.model, temperature=args.temperature, **token_limit(args),
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPT}],
        response_format=Model)
    check_parsed_choice(completion.choices[0], Model)


def trial_openai_responses_parse(args, capture, Model):
    client = openai_client(args, capture)
    response = client.responses.parse(
        model=args.model, temperature=args.temperature, **token_limit(args, "max_output_tokens"),
        instructions=SYSTEM, input=PROMPT, text_format=Model)
    check_parsed_response(response, Model)


def trial_openai_named_tool(args, capture, Model):
    import openai
    client = openai_client(args, capture)
    tool = openai.pydantic_function_tool(Model)
    name = tool["function"]["name"]
    completion = client.chat.completions.create(
        model=args.model, temperature=args.temperature, **token_limit(args),
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPT}],
        tools=[tool], tool_choice={"type": "function", "function": {"name": name}})
    choice = completion.choices[0]
    if choice.finish_reason == "length":
        raise Outcome("length", "finish_reason length")
    calls = choice.message.tool_calls or []
    if len(calls) != 1 or calls[0].function.name != name:
        raise Outcome("error", f"expected one call of {name}, got "
                      f"{[c.function.name for c in calls]} (finish_reason {choice.finish_reason})")
    if choice.finish_reason != "tool_calls":
        raise Outcome("error", f"finish_reason {choice.finish_reason}, expected tool_calls")
    Model.model_validate_json(calls[0].function.arguments)


def trial_openai_chat_parse_stream(args, capture, Model):
    client = openai_client(args, capture)
    with client.chat.completions.stream(
            model=args.model, temperature=args.temperature, **token_limit(args),
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPT}],
            response_format=Model) as stream:
        for _ in stream:
            pass
        completion = stream.get_final_completion()
    check_parsed_choice(completion.choices[0], Model)


def trial_openai_responses_parse_stream(args, capture, Model):
    client = openai_client(args, capture)
    with client.responses.stream(
            model=args.model, temperature=args.temperature, **token_limit(args, "max_output_tokens"),
            instructions=SYSTEM, input=PROMPT, text_format=Model) as stream:
        for _ in stream:
            pass
        response = stream.get_final_response()
    check_parsed_response(response, Model)


def trial_openai_named_tool_stream(args, capture, Model):
    import openai
    client = openai_client(args, capture)
    tool = openai.pydantic_function_tool(Model)
    name = tool["function"]["name"]
    with client.chat.completions.stream(
            model=args.model, temperature=args.temperature, **token_limit(args),
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPT}],
            tools=[tool], tool_choice={"type": "function", "function": {"name": name}}) as stream:
        for _ in stream:
            pass
        completion = stream.get_final_completion()
    choice = completion.choices[0]
    if choice.finish_reason == "length":
        raise Outcome("length", "finish_reason length")
    calls = choice.message.tool_calls or []
    if len(calls) != 1 or not isinstance(calls[0].function.parsed_arguments, Model):
        raise Outcome("error", f"expected one parsed call of {name}, got {calls!r}")


def trial_instructor(mode_name):
    def trial(args, capture, Model):
        import instructor
        client = instructor.from_openai(openai_client(args, capture), mode=getattr(instructor.Mode, mode_name))
        note = client.chat.completions.create(
            model=args.model, temperature=args.temperature, **token_limit(args),
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPT}],
            response_model=Model, max_retries=1)  # one attempt: no retries hide failures
        if not isinstance(note, Model):
            raise Outcome("error", f"returned {note!r}")
    return trial


def langchain_model(args, capture, **extra):
    from langchain_openai import ChatOpenAI
    return ChatOpenAI(base_url=args.url.rstrip("/") + "/v1", api_key=args.api_key, model=args.model,
                      temperature=args.temperature, **token_limit(args), max_retries=0,
                      http_client=capture.http_client(), **extra)


def langchain_finish_reason(message):
    meta = getattr(message, "response_metadata", {}) or {}
    return meta.get("finish_reason") or meta.get("status")


def trial_langchain_structured(method, **extra):
    def trial(args, capture, Model):
        llm = langchain_model(args, capture, **extra).with_structured_output(Model, method=method, include_raw=True)
        result = llm.invoke([("system", SYSTEM), ("human", PROMPT)])
        raw = result["raw"]
        if langchain_finish_reason(raw) in ("length", "incomplete"):
            raise Outcome("length", "finish_reason length")
        if result.get("parsing_error") is not None:
            raise Outcome("error", f"parsing_error: {result['parsing_error']}")
        if not isinstance(result.get("parsed"), Model):
            raise Outcome("error", f"parsed is {result.get('parsed')!r}")
    return trial


def trial_langchain_tools(streaming, **extra):
    """bind_tools with the tool named in tool_choice; streamed: the chunks added up."""
    def trial(args, capture, Model):
        llm = langchain_model(args, capture, **extra).bind_tools([Model], tool_choice=Model.__name__)
        messages = [("system", SYSTEM), ("human", PROMPT)]
        if streaming:
            message = None
            for chunk in llm.stream(messages):
                message = chunk if message is None else message + chunk
        else:
            message = llm.invoke(messages)
        check_langchain_tool_call(message, Model)
    return trial


def check_langchain_tool_call(message, Model):
    meta = getattr(message, "response_metadata", {}) or {}
    if (meta.get("status") == "incomplete" or meta.get("finish_reason") == "length"
            or (meta.get("incomplete_details") or {}).get("reason") == "max_output_tokens"):
        raise Outcome("length", f"status incomplete: {meta.get('incomplete_details')}")
    if message.invalid_tool_calls:
        raise Outcome("error", f"invalid tool calls: {message.invalid_tool_calls}")
    calls = message.tool_calls
    if len(calls) != 1 or calls[0]["name"] != Model.__name__:
        raise Outcome("error", f"expected one call of {Model.__name__}, got {[c['name'] for c in calls]}")
    Model.model_validate(calls[0]["args"])


CLIENTS = [
    # name, module that must be importable, trial
    ("openai_chat_parse", "openai", trial_openai_chat_parse),
    ("openai_chat_parse_stream", "openai", trial_openai_chat_parse_stream),
    ("openai_responses_parse", "openai", trial_openai_responses_parse),
    ("openai_responses_parse_stream", "openai", trial_openai_responses_parse_stream),
    ("openai_named_tool", "openai", trial_openai_named_tool),
    ("openai_named_tool_stream", "openai", trial_openai_named_tool_stream),
    ("instructor_json", "instructor", trial_instructor("JSON")),
    ("instructor_json_schema", "instructor", trial_instructor("JSON_SCHEMA")),
    ("instructor_tools", "instructor", trial_instructor("TOOLS")),
    ("langchain_json_schema", "langchain_openai", trial_langchain_structured("json_schema")),
    ("langchain_function_calling", "langchain_openai", trial_langchain_structured("function_calling")),
    ("langchain_responses_json_schema", "langchain_openai",
     trial_langchain_structured("json_schema", use_responses_api=True)),
    ("langchain_tools_stream", "langchain_openai", trial_langchain_tools(True)),
    ("langchain_responses_tools", "langchain_openai", trial_langchain_tools(False, use_responses_api=True)),
    ("langchain_responses_tools_stream", "langchain_openai", trial_langchain_tools(True, use_responses_api=True)),
]


def importable(module):
    try:
        __import__(module)
        return True
    except Exception as exc:  # ImportError, or a broken install
        return f"{type(exc).__name__}: {exc}"


def run_client(name, trial, args, Model, dump_dir):
    capture = Capture()
    counts = {"ok": 0, "length": 0, "error": 0}
    errors = []
    started = time.time()
    for i in range(args.n):
        capture.reset()
        try:
            trial(args, capture, Model)
            kind, detail = "ok", ""
        except Outcome as out:
            kind, detail = out.kind, out.detail
        except Exception as exc:  # the client's own error: classify it
            kind = "length" if is_length_error(exc) else "error"
            detail = f"{type(exc).__name__}: {exc}"
            if args.verbose:
                traceback.print_exc()
        counts[kind] += 1
        if kind == "error":
            errors.append(detail)
        if kind != "ok" and dump_dir:
            path = os.path.join(dump_dir, f"{name}_{i}_{kind}.txt")
            with open(path, "w") as f:
                f.write(detail + "\n\n" + "\n\n".join(capture.bodies))
        if args.verbose:
            print(f"  {name} #{i}: {kind} {detail[:300]}", flush=True)
    return counts, errors, time.time() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="server base URL (default %(default)s)")
    parser.add_argument("--api-key", default="none", help="the server's --api-key, if any")
    parser.add_argument("--model", default="default", help="model name sent (default %(default)s)")
    parser.add_argument("-n", type=int, default=10, help="requests per client (default %(default)s)")
    parser.add_argument("--temperature", type=float, default=1.0, help="default %(default)s")
    parser.add_argument("--max-tokens", type=int, default=512, help="per request; 0: not sent, the server's default (default %(default)s)")
    parser.add_argument("--clients", default="", help="comma-separated subset of: " + ", ".join(c[0] for c in CLIENTS))
    parser.add_argument("--dump", metavar="DIR", help="write the raw responses of failed requests here")
    parser.add_argument("-v", "--verbose", action="store_true", help="print each request's outcome")
    args = parser.parse_args()

    wanted = [c for c in args.clients.split(",") if c]
    unknown = set(wanted) - {c[0] for c in CLIENTS}
    if unknown:
        parser.error(f"unknown clients: {', '.join(sorted(unknown))}")
    pydantic_ok = importable("pydantic")
    if pydantic_ok is not True:
        print(f"pydantic is not importable ({pydantic_ok}): every client needs it; nothing run")
        return 1
    Model = build_models()
    if args.dump:
        os.makedirs(args.dump, exist_ok=True)

    rows = []
    for name, module, trial in CLIENTS:
        if wanted and name not in wanted:
            continue
        ok = importable(module)
        if ok is not True:
            print(f"skip {name}: {module} is not importable ({ok})", flush=True)
            continue
        counts, errors, seconds = run_client(name, trial, args, Model, args.dump)
        rows.append((name, counts, errors, seconds))
        print(f"{name}: ok {counts['ok']}/{args.n}, length {counts['length']}, error {counts['error']} "
              f"({seconds:.1f} s)", flush=True)
        for text in list(dict.fromkeys(errors))[:3]:
            print(f"    error: {text[:400]}", flush=True)

    print()
    print(f"| client | N | ok | ran to max_tokens | client error |")
    print(f"|---|---|---|---|---|")
    for name, counts, _, _ in rows:
        print(f"| {name} | {args.n} | {counts['ok']} | {counts['length']} | {counts['error']} |")
    return 0 if all(c["ok"] == args.n for _, c, _, _ in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
