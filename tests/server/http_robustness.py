"""`deepinfer serve` against hostile and careless clients, over raw sockets (python3 standard
library only). Run by CTest as `http_robustness`:

    http_robustness.py --serve build/deepinfer --model ../shared/golden/tiny-v4-c/model

Every case asserts what the client sees (status, order of answers, time to be refused) and
that the server is still alive and correct afterwards; the last case fuzzes the request path
(HTTP bytes in, response out) with seeded mutations of valid requests. Waits scale with
DEEPINFER_TEST_TIME_SCALE (test.sh sets it for the sanitizer build), so a slow machine or
build stretches deadlines instead of failing the test; nothing here judges speed.
"""

import argparse
import json
import os
import random
import re
import signal
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "soak"))
import local_server  # noqa: E402

SCALE = float(os.environ.get("DEEPINFER_TEST_TIME_SCALE", "1"))
PASSED = []
FAILED = []


def case(fn):
    def run(ctx):
        name = fn.__name__
        try:
            fn(ctx)
            PASSED.append(name)
            print("ok   %s" % name, flush=True)
        except Exception as e:  # a failed case must not hide the others
            FAILED.append(name)
            print("FAIL %s: %r" % (name, e), flush=True)
    run.__name__ = fn.__name__
    return run


class Ctx:
    def __init__(self, server):
        self.server = server
        self.port = int(server.url.rsplit(":", 1)[1])


def connect(port, timeout=30.0):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout * SCALE)
    return s


def read_response(src):
    """Reads one HTTP/1.1 response from a socket (its only response) or from a socket's
    makefile("rb") reader (several responses in a row); returns (status, headers dict
    lower-case, body bytes), or None if the connection closed before a status line."""
    if isinstance(src, socket.socket):
        f = src.makefile("rb")
        try:
            return read_response(f)
        finally:
            f.close()
    f = src
    line = f.readline()
    if not line:
        return None
    m = re.match(rb"HTTP/1\.[01] (\d{3})", line)
    assert m, "bad status line %r" % line
    status = int(m.group(1))
    headers = {}
    while True:
        h = f.readline()
        assert h, "connection closed inside the head"
        if h in (b"\r\n", b"\n"):
            break
        k, _, v = h.decode("latin-1").partition(":")
        headers[k.strip().lower()] = v.strip()
    body = b""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size = int(f.readline().split(b";")[0], 16)
            if size == 0:
                while f.readline() not in (b"\r\n", b"\n", b""):
                    pass
                break
            body += f.read(size)
            f.readline()
    elif "content-length" in headers:
        body = f.read(int(headers["content-length"]))
    return status, headers, body


def request_bytes(method, path, body=None, headers=None):
    data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    lines = ["%s %s HTTP/1.1" % (method, path)]
    if not any(k.lower() == "host" for k in (headers or {})):
        lines.append("Host: 127.0.0.1")
    for k, v in (headers or {}).items():
        lines.append("%s: %s" % (k, v))
    if body is not None and not any(k.lower() == "content-type" for k in (headers or {})):
        lines.append("Content-Type: application/json")
        lines.append("Content-Length: %d" % len(data))
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + data


def call(port, method, path, body=None, headers=None, timeout=60.0):
    s = connect(port, timeout)
    try:
        s.sendall(request_bytes(method, path, body, headers))
        return read_response(s)
    finally:
        s.close()


def wait_for(probe, done, seconds=30.0):
    """Calls probe() until done(result) holds, or fails after a generous deadline; returns the
    result. Waiting for the event rather than sleeping: fast where the machine is fast, and
    never a guess about how long the server needs."""
    deadline = time.monotonic() + seconds * SCALE
    while True:
        r = probe()
        if done(r):
            return r
        assert time.monotonic() < deadline, "still %r after %g s" % (r, seconds * SCALE)
        time.sleep(0.02)


def assert_alive(ctx):
    r = call(ctx.port, "GET", "/health", timeout=10)
    assert r and r[0] == 200, "health: %r" % (r,)
    r = call(ctx.port, "POST", "/v1/completions",
             {"prompt": [1, 2, 3], "max_tokens": 3, "temperature": 0, "ignore_eos": True})
    assert r and r[0] == 200, "completion after the attack: %r" % (r,)
    answer = json.loads(r[2])
    assert answer["usage"]["completion_tokens"] == 3 and answer["choices"][0]["finish_reason"] == "length", answer


def deep(n, open_="[", close="]"):
    return open_ * n + close * n


@case
def deep_json_is_a_400_everywhere(ctx):
    n = 88000
    bodies = [
        ("/v1/chat/completions", '{"messages": [{"role": "user", "content": %s}]}' % deep(n)),
        ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "hi"}], "tools": %s}' % deep(n)),
        ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "hi"}], "response_format": '
                                 '{"type": "json_schema", "json_schema": {"name": "x", "schema": %s}}}'
         % deep(n, '{"a":', "}")[: 5 * n] + "}" * n),
        ("/v1/messages", '{"model": "x", "max_tokens": 4, "messages": [{"role": "user", "content": %s}]}' % deep(n)),
        ("/tokenize", '{"prompt": %s}' % deep(n)),
        ("/v1/completions", '{"prompt": %s}' % deep(n)),
    ]
    for path, body in bodies:
        r = call(ctx.port, "POST", path, body.encode())
        assert r is not None and r[0] == 400, "%s: %r" % (path, r and r[:2])
        err = json.loads(r[2])["error"]
        assert "nest" in err["message"], err
    # 64 levels are still fine (a deep but honest schema).
    ok = '{"prompt": "x", "max_tokens": 1, "extra": %s}' % deep(60)
    r = call(ctx.port, "POST", "/v1/completions", ok.encode())
    assert r[0] == 200, r[:2]
    assert_alive(ctx)


@case
def pipelined_requests_are_answered_in_order(ctx):
    s = connect(ctx.port)
    reqs = [request_bytes("POST", "/tokenize", {"prompt": "word%d" % i}) for i in range(3)]
    reqs.insert(1, request_bytes("GET", "/health"))
    s.sendall(b"".join(reqs))  # one write: they arrive in one packet
    f = s.makefile("rb")
    answers = [read_response(f) for _ in range(4)]
    f.close()
    s.close()
    assert all(a is not None for a in answers), answers
    assert [a[0] for a in answers] == [200, 200, 200, 200], [a[0] for a in answers]
    toks = [json.loads(answers[i][2]) for i in (0, 2, 3)]
    for a, b in zip(toks, toks[1:]):
        assert a != b
    # The same three prompts one by one give the same answers, in the same order.
    for i, want in zip(range(3), toks):
        assert json.loads(call(ctx.port, "POST", "/tokenize", {"prompt": "word%d" % i})[2]) == want


@case
def bad_framing_is_refused_at_once(ctx):
    cases = [
        b"POST /tokenize HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n{\"a\":1}",
        b"POST /tokenize HTTP/1.1\r\nContent-Length: 5, 6\r\n\r\n{\"a\"}",
        b"POST /tokenize HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
        b"POST /tokenize HTTP/1.1\r\nContent-Length: 0x10\r\n\r\n",
        b"POST /tokenize HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n",
        b"POST /tokenize HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n",
        b"POST /tokenize HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
        b"POST /tokenize HTTP/1.1\r\n Folded: yes\r\n\r\n",
        b"GARBAGE\r\n\r\n",
        b"GET /health HTTP/2.0\r\n\r\n",
    ]
    for raw in cases:
        s = connect(ctx.port, 10)
        t0 = time.monotonic()
        s.sendall(raw)
        r = read_response(s)
        s.close()
        assert r is not None and 400 <= r[0] < 600 and r[0] != 408, (raw, r and r[:2])
        assert r[1].get("connection", "").lower() == "close", (raw, r[1])
        assert time.monotonic() - t0 < 5 * SCALE, "refused only after %.1f s" % (time.monotonic() - t0)
    # Identical repeated lengths and chunked bodies are fine.
    body = b'{"prompt": "hello"}'
    r = call(ctx.port, "POST", "/tokenize", None, None)
    s = connect(ctx.port)
    s.sendall(b"POST /tokenize HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\nContent-Length: %d\r\n\r\n"
              % (len(body), len(body)) + body)
    r = read_response(s)
    s.close()
    assert r[0] == 200, r[:2]
    chunked = b"POST /tokenize HTTP/1.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n" + body[:5] + b"\r\n" + \
        (b"%x\r\n" % (len(body) - 5)) + body[5:] + b"\r\n0\r\n\r\n"
    s = connect(ctx.port)
    s.sendall(chunked)
    r2 = read_response(s)
    s.close()
    assert r2[0] == 200 and r2[2] == r[2], (r2[:2], r2[2], r[2])


@case
def trickling_clients_lock_nobody_out(ctx):
    n = 270
    socks = []
    for _ in range(n):
        s = connect(ctx.port, 30)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        socks.append(s)
    stop = threading.Event()

    def trickle():
        while not stop.is_set():
            for s in socks:
                try:
                    s.send(b"X")
                except OSError:
                    pass
            time.sleep(0.5)
    t = threading.Thread(target=trickle, daemon=True)
    t.start()
    try:
        t0 = time.monotonic()
        for _ in range(3):
            r = call(ctx.port, "GET", "/health", timeout=10)
            assert r[0] == 200, r
        r = call(ctx.port, "POST", "/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 4, "temperature": 0}, timeout=60)
        assert r[0] == 200, r[:2]
        assert time.monotonic() - t0 < 30 * SCALE
        # The header deadline (--header-timeout 2 here) drops the tricklers with a 408.
        timed_out = 0
        for s in socks[:20]:
            s.settimeout(30 * SCALE)
            try:
                r = read_response(s)
                if r is not None and r[0] == 408:
                    timed_out += 1
            except (OSError, AssertionError):
                pass
        assert timed_out == 20, "only %d of 20 tricklers got a 408" % timed_out
    finally:
        stop.set()
        t.join()
        for s in socks:
            s.close()
    assert_alive(ctx)


@case
def connection_cap_per_client_is_a_503_but_health_works(ctx):
    cap = 300  # --max-connections-per-client below
    socks = [connect(ctx.port, 30) for _ in range(cap)]
    try:
        r = wait_for(lambda: call(ctx.port, "POST", "/tokenize", {"prompt": "x"}), lambda r: r[0] != 200)
        assert r[0] == 503 and "retry-after" in r[1], r[:2]
        r = call(ctx.port, "GET", "/health")
        assert r[0] == 200, r[:2]
    finally:
        for s in socks:
            s.close()
    wait_for(lambda: call(ctx.port, "POST", "/tokenize", {"prompt": "x"}), lambda r: r[0] == 200)
    assert_alive(ctx)


@case
def body_size_is_bounded_per_route(ctx):
    big = json.dumps({"prompt": "a" * (14 << 20)}).encode()
    results = []

    def one():
        s = connect(ctx.port)
        try:
            s.sendall(request_bytes("POST", "/tokenize", big))
        except OSError:
            pass  # the server may close before all of it went out
        try:
            results.append(read_response(s))
        except OSError as e:
            results.append(e)
        s.close()
    ts = [threading.Thread(target=one) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert all(isinstance(r, tuple) and r[0] == 413 for r in results), [r if not isinstance(r, tuple) else r[:2] for r in results]
    rss = rss_mb(ctx.server.proc.pid)
    assert rss < 1024, "RSS %d MB after four 14 MB bodies" % rss
    assert_alive(ctx)


def rss_mb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    return 0


def metric(ctx, name, label=""):
    """Sum of the samples of a metric whose labels contain `label`."""
    text = call(ctx.port, "GET", "/metrics")[2].decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and label in line and not line.startswith("#"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def settled_metric(ctx, name):
    """A metric once nothing runs or waits. A request that has answered is counted already (the
    engine counts a request before its last event); one whose client hung up in an earlier case
    is cancelled on the engine's own time, so that is waited for."""
    wait_for(lambda: metric(ctx, "deepinfer_requests_running") + metric(ctx, "deepinfer_requests_waiting"),
             lambda n: n == 0)
    return metric(ctx, name)


@case
def disconnected_non_streaming_request_is_cancelled(ctx):
    before = metric(ctx, "deepinfer_request_success_total", 'finished_reason="abort"')
    gen_before = metric(ctx, "deepinfer_generation_tokens_total")
    s = connect(ctx.port)
    s.sendall(request_bytes("POST", "/v1/completions",
                            {"prompt": [1, 2, 3], "max_tokens": 3000, "ignore_eos": True, "temperature": 0}))
    wait_for(lambda: metric(ctx, "deepinfer_requests_running"), lambda n: n >= 1)
    s.close()
    deadline = time.monotonic() + 20 * SCALE
    while time.monotonic() < deadline and metric(ctx, "deepinfer_request_success_total", 'finished_reason="abort"') <= before:
        time.sleep(0.2)
    assert metric(ctx, "deepinfer_request_success_total", 'finished_reason="abort"') > before, "not cancelled"
    made = metric(ctx, "deepinfer_generation_tokens_total") - gen_before
    assert made < 3000, "ran on to max_tokens (%d tokens)" % made


@case
def cors_preflight_and_headers(ctx):
    r = call(ctx.port, "OPTIONS", "/v1/chat/completions", None,
             {"Origin": "http://localhost:5173", "Access-Control-Request-Method": "POST",
              "Access-Control-Request-Headers": "authorization, content-type"})
    assert r[0] == 204, r[:2]
    assert r[1].get("access-control-allow-origin") == "http://localhost:5173", r[1]
    assert "POST" in r[1].get("access-control-allow-methods", ""), r[1]
    r = call(ctx.port, "OPTIONS", "/v1/chat/completions", None,
             {"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"})
    assert r[0] == 403, r[:2]
    r = call(ctx.port, "GET", "/v1/models", None, {"Origin": "http://localhost:5173"})
    assert r[0] == 200 and r[1].get("access-control-allow-origin") == "http://localhost:5173", r[1]
    r = call(ctx.port, "GET", "/v1/models", None, {"Origin": "http://evil.example"})
    assert r[0] == 403 and "access-control-allow-origin" not in r[1], r[:2]


@case
def json_inside_strings_is_bounded(ctx):
    """JSON carried in a string (tool-call arguments) is held to the body's limits: 100k levels
    of '[' inside arguments is a 400 on every route that reads them, never a crash."""
    n = 100000
    args = "[" * n + "]" * n
    call_item = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": args}}
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": [call_item]},
                {"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    bodies = [
        ("/v1/chat/completions", {"messages": messages, "max_tokens": 1}),
        ("/tokenize", {"messages": messages}),
        ("/v1/responses", {"max_output_tokens": 1, "input": [
            {"role": "user", "content": "hi"},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": args},
            {"type": "function_call_output", "call_id": "c1", "output": "ok"}]}),
    ]
    for path, body in bodies:
        r = call(ctx.port, "POST", path, body)
        assert r is not None and r[0] == 400, "%s: %r" % (path, r and r[:3])
        assert "nested deeper" in json.loads(r[2])["error"]["message"], r[2][:300]
        assert_alive(ctx)
    # Honest nesting inside arguments still renders.
    ok = [dict(m) for m in messages]
    ok[1] = dict(ok[1], tool_calls=[dict(call_item, function={"name": "f", "arguments": json.dumps({"a": [[[1]]]})})])
    r = call(ctx.port, "POST", "/tokenize", {"messages": ok})
    assert r[0] == 200, r[:3]


@case
def web_pages_cannot_reach_the_model(ctx):
    """What a page on another origin can make a browser send: a no-cors text/plain POST, a form,
    a JSON POST with its Origin. None of them runs; the server's own page still works."""
    before = settled_metric(ctx, "deepinfer_prompt_tokens_total")
    body = json.dumps({"prompt": "x", "max_tokens": 1}).encode()
    r = call(ctx.port, "POST", "/v1/completions", body, {"Content-Type": "text/plain;charset=UTF-8"})
    assert r[0] == 415, r[:3]
    r = call(ctx.port, "POST", "/tokenize", body, {"Content-Type": "application/x-www-form-urlencoded"})
    assert r[0] == 415, r[:3]
    for origin in ("http://evil.example", "null"):
        r = call(ctx.port, "POST", "/v1/completions", body,
                 {"Origin": origin, "Content-Type": "text/plain"})
        assert r[0] == 403, r[:3]
        r = call(ctx.port, "POST", "/tokenize", {"prompt": "x"}, {"Origin": origin})
        assert r[0] == 403, r[:3]
    assert settled_metric(ctx, "deepinfer_prompt_tokens_total") == before, "a refused request reached the engine"
    r = call(ctx.port, "POST", "/v1/completions", body, {"Origin": "http://127.0.0.1"})  # Host: 127.0.0.1
    assert r[0] == 200, r[:3]
    r = call(ctx.port, "POST", "/v1/completions", body, {"Origin": "http://localhost:5173"})  # --allowed-origins
    assert r[0] == 200 and r[1].get("access-control-allow-origin") == "http://localhost:5173", r[:2]


@case
def rebound_host_names_are_refused(ctx):
    """DNS rebinding: a page of evil.example whose name now resolves to 127.0.0.1 is same-origin
    with the server by the browser's rules, and its reads carry no Origin. The loopback server
    answers only under loopback names: 403 before any work, counted by reason."""
    before = settled_metric(ctx, "deepinfer_prompt_tokens_total")
    refused = metric(ctx, "deepinfer_requests_rejected_total", 'reason="host_not_allowed"')
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    for host in ("evil.example", "evil.example:%d" % ctx.port, "127.0.0.1.evil.example"):
        for method, path, body in (("GET", "/v1/models", None), ("GET", "/metrics", None),
                                   ("POST", "/v1/chat/completions", chat)):
            r = call(ctx.port, method, path, body, {"Host": host})
            assert r[0] == 403, (host, path, r[:3])
            assert "--allowed-hosts" in json.loads(r[2])["error"]["message"], r[2]
    assert settled_metric(ctx, "deepinfer_prompt_tokens_total") == before, "a refused request reached the engine"
    assert metric(ctx, "deepinfer_requests_rejected_total", 'reason="host_not_allowed"') == refused + 9
    for host in ("localhost:%d" % ctx.port, "127.0.0.1", "[::1]:%d" % ctx.port):
        r = call(ctx.port, "POST", "/v1/chat/completions", chat, {"Host": host})
        assert r[0] == 200, (host, r[:3])
    r = call(ctx.port, "GET", "/health", None, {"Host": "evil.example"})
    assert r[0] == 200, r[:3]  # /health is left open: it tells only "up"


@case
def expect_continue_comes_after_the_checks(ctx):
    """A client that announces a 5 MB body with Expect: 100-continue is told its 401 (no key),
    403 (foreign Host) or 413 (20 MB, over the limit) at once, with no 100 before it, and the
    connection closes; only a head that passes is invited to send its body."""
    srv = local_server.LocalServer(ctx.binary, ctx.model, ["--threads", "1", "--api-key", "k"],  # 16 MiB bodies
                                   timeout=120 * SCALE)
    port = int(srv.url.rsplit(":", 1)[1])
    try:
        def head(headers, length):
            lines = ["POST /v1/completions HTTP/1.1", "Content-Type: application/json",
                     "Content-Length: %d" % length, "Expect: 100-continue"] + ["%s: %s" % kv for kv in headers.items()]
            if "Host" not in headers:
                lines.insert(1, "Host: 127.0.0.1")
            return ("\r\n".join(lines) + "\r\n\r\n").encode()
        for headers, length, want in (({}, 5 << 20, 401), ({"Authorization": "Bearer nope"}, 5 << 20, 401),
                                      ({"Authorization": "Bearer k", "Host": "evil.example"}, 1 << 20, 403),
                                      ({"Authorization": "Bearer k"}, 20 << 20, 413),
                                      ({}, 20 << 20, 413)):
            s = connect(port, 10)
            t0 = time.monotonic()
            s.sendall(head(headers, length))
            f = s.makefile("rb")
            r = read_response(f)
            try:
                assert r is not None and r[0] == want, (headers, length, r and r[:3])
                rest = f.read()  # the server closes after its refusal
            finally:
                f.close()
                s.close()
            assert r[1].get("connection", "").lower() == "close" and rest == b"", (r[1], rest[:100])
            assert time.monotonic() - t0 < 5 * SCALE, "refused only after %.1f s" % (time.monotonic() - t0)
        body = json.dumps({"prompt": [1, 2, 3], "max_tokens": 2, "ignore_eos": True}).encode()
        s = connect(port, 60)
        s.sendall(head({"Authorization": "Bearer k"}, len(body)))
        f = s.makefile("rb")
        r = read_response(f)
        assert r is not None and r[0] == 100, r
        s.sendall(body)
        r = read_response(f)
        f.close()
        s.close()
        assert r[0] == 200 and json.loads(r[2])["usage"]["completion_tokens"] == 2, r[:3]
    finally:
        srv.stop(timeout=60 * SCALE)


def mutate(rng, data):
    data = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        op = rng.randrange(6)
        pos = rng.randrange(len(data) + 1)
        if op == 0 and data:
            del data[pos:pos + rng.randint(1, 8)]
        elif op == 1:
            data[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op == 2 and data:
            data[min(pos, len(data) - 1)] = rng.randrange(256)
        elif op == 3:
            data[pos:pos] = rng.choice([b"\r\n", b"\r\n\r\n", b"{", b"[", b'"', b"\\", b"\x00", b"\xff",
                                        b"Content-Length: 3\r\n", b"Transfer-Encoding: chunked\r\n", b"-1",
                                        b"1e999", b"null", b'"\\ud800"'])
        elif op == 4 and data:
            a = rng.randrange(len(data))
            data[pos:pos] = data[a:a + rng.randint(1, 32)]
        else:
            data = data[:pos]
    return bytes(data)


@case
def fuzz_the_request_path(ctx):
    rng = random.Random(20261201)
    seeds = [
        request_bytes("POST", "/v1/completions", {"prompt": "hi", "max_tokens": 2, "temperature": 0.5, "seed": 1,
                                                  "stop": ["x"], "logprobs": 2, "stream": False}),
        request_bytes("POST", "/v1/completions", {"prompt": [1, 2], "max_tokens": 2, "stream": True,
                                                  "stream_options": {"include_usage": True}}),
        request_bytes("POST", "/v1/chat/completions", {"messages": [{"role": "system", "content": "s"},
                                                                    {"role": "user", "content": "hi"}],
                                                       "max_tokens": 2, "tools": [{"type": "function", "function": {
                                                           "name": "f", "parameters": {"type": "object", "properties": {
                                                               "a": {"type": "integer"}}}}}]}),
        request_bytes("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                                                       "response_format": {"type": "json_schema", "json_schema": {
                                                           "name": "x", "schema": {"type": "object", "properties": {
                                                               "k": {"type": "string"}}}}}}),
        request_bytes("POST", "/v1/messages", {"model": "tiny", "max_tokens": 2, "system": "s",
                                               "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}),
        request_bytes("POST", "/tokenize", {"prompt": "hello world"}),
        request_bytes("POST", "/detokenize", {"tokens": [1, 2, 3]}),
        request_bytes("GET", "/v1/models"),
        request_bytes("GET", "/metrics"),
    ]
    answered = closed = 0
    n = int(os.environ.get("HTTP_FUZZ_CASES", "400"))
    for i in range(n):
        data = mutate(rng, rng.choice(seeds))
        s = connect(ctx.port, 60)
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)  # the request is all there is
            r = read_response(s)
        except (OSError, AssertionError) as e:
            raise AssertionError("case %d %r: %r" % (i, data[:200], e))
        finally:
            s.close()
        if r is None:
            closed += 1
            continue
        answered += 1
        status, headers, body = r
        assert 100 <= status < 600 and status != 500, "case %d: status %d for %r: %r" % (i, status, data[:300], body[:300])
        if status >= 400 and body:
            err = json.loads(body)
            assert "error" in err and isinstance(err["error"]["message"], str), body[:200]
        if i % 50 == 0:
            assert call(ctx.port, "GET", "/health", timeout=10)[0] == 200
    print("     fuzz: %d answered, %d closed without an answer" % (answered, closed))
    assert answered > n // 2
    assert_alive(ctx)


@case
def metrics_count_what_happened(ctx):
    # After the cases above: refusals by reason, latency histograms and process metrics.
    assert metric(ctx, "deepinfer_requests_rejected_total", 'reason="invalid_json"') >= 6
    assert metric(ctx, "deepinfer_requests_rejected_total", 'reason="malformed_http"') >= 10
    assert metric(ctx, "deepinfer_requests_rejected_total", 'reason="connection_cap"') >= 1
    assert metric(ctx, "deepinfer_requests_rejected_total", 'reason="timeout"') >= 20
    assert metric(ctx, "deepinfer_requests_rejected_total", 'reason="host_not_allowed"') >= 9
    for name in ["deepinfer_time_per_output_token_seconds_count", "deepinfer_request_prefill_time_seconds_count",
                 "deepinfer_request_decode_time_seconds_count", "deepinfer_request_generation_tokens_count",
                 "deepinfer_request_prompt_tokens_count", "deepinfer_time_to_first_token_seconds_count"]:
        assert metric(ctx, name) >= 1, name
    rss = metric(ctx, "process_resident_memory_bytes")
    assert 10e6 < rss < 8e9, rss
    assert metric(ctx, "process_open_fds") >= 3
    assert metric(ctx, "process_cpu_seconds_total") > 0


def sse_events(f):
    """The data payloads of a chunked SSE stream, parsed ("[DONE]" as is), until it ends."""
    buf = b""
    while True:
        line = f.readline()
        if not line or int(line.split(b";")[0], 16) == 0:
            return
        buf += f.read(int(line.split(b";")[0], 16))
        f.readline()
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            data = event.partition(b"data: ")[2]
            if data:
                yield "[DONE]" if data == b"[DONE]" else json.loads(data)


def start_stream(port, body):
    """Opens a streaming /v1/completions (usage in the last event) and returns (socket, the
    stream's events) once the first event came: the request is then running."""
    s = connect(port)
    s.sendall(request_bytes("POST", "/v1/completions", dict(body, stream=True, stream_options={"include_usage": True})))
    f = s.makefile("rb")
    assert b" 200 " in f.readline()
    while f.readline() not in (b"\r\n", b"\n"):
        pass
    events = sse_events(f)
    first = next(events)
    assert first["choices"][0]["finish_reason"] is None, first
    return s, events


def refused_after_sigterm(port):
    """True once the server no longer takes requests (connection refused or a 503)."""
    try:
        c = connect(port, 2)
        c.sendall(request_bytes("GET", "/health"))
        r = read_response(c)
        c.close()
        return r is None or r[0] == 503
    except OSError:
        return True


@case
def sigterm_drains_then_exits(ctx):
    # Drain: a request running when SIGTERM comes finishes with its whole output (every token
    # up to max_tokens, finish_reason "length", [DONE]) within a grace it does not need to
    # reach; then the server exits 0. A server that cancelled at SIGTERM (try
    # --shutdown-timeout 0) fails here.
    n = 300
    srv = local_server.LocalServer(ctx.binary, ctx.model, ["--threads", "1", "--shutdown-timeout", str(int(300 * SCALE))],
                                   timeout=120 * SCALE)
    port = int(srv.url.rsplit(":", 1)[1])
    s, events = start_stream(port, {"prompt": [1, 2, 3], "max_tokens": n, "ignore_eos": True, "temperature": 0})
    srv.proc.send_signal(signal.SIGTERM)
    rest = list(events)
    s.close()
    rc = srv.proc.wait(timeout=300 * SCALE)
    finish = [e["choices"][0]["finish_reason"] for e in rest if e != "[DONE]" and e["choices"]]
    usage = [e["usage"] for e in rest if e != "[DONE]" and e.get("usage")]
    assert rest and rest[-1] == "[DONE]", "the stream ended without [DONE]: %r" % rest[-3:]
    assert finish[-1] == "length" and usage and usage[-1]["completion_tokens"] == n, (finish[-1:], usage)
    assert rc == 0, "exit status %r" % rc
    assert not any("cancelling" in line for line in srv.log), "".join(srv.log[-10:])

    # Grace over: a long stream in flight, SIGTERM with --shutdown-timeout 2: new requests are
    # refused at once, the stream is cut at the grace and the server exits 0.
    srv = local_server.LocalServer(ctx.binary, ctx.model, ["--threads", "1", "--shutdown-timeout", "2"],
                                   timeout=120 * SCALE)
    port = int(srv.url.rsplit(":", 1)[1])
    s, _ = start_stream(port, {"prompt": [1, 2, 3], "max_tokens": 100000, "ignore_eos": True})
    t0 = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: refused_after_sigterm(port), lambda refused: refused)
    rc = srv.proc.wait(timeout=30 * SCALE)
    took = time.monotonic() - t0
    s.close()
    assert rc == 0, "exit status %r" % rc
    assert took < 2 + 10 * SCALE, "exit took %.1f s with a 2 s grace" % took


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--serve", required=True)
    ap.add_argument("--model", required=True)
    args = ap.parse_args()
    server = local_server.LocalServer(args.serve, args.model,
                                      ["--threads", "1", "--header-timeout", "2", "--max-body-bytes", str(4 << 20),
                                       "--max-connections-per-client", "300", "--allowed-origins",
                                       "http://localhost:5173"],
                                      timeout=120 * SCALE)
    ctx = Ctx(server)
    ctx.binary, ctx.model = args.serve, args.model
    try:
        for c in [deep_json_is_a_400_everywhere, pipelined_requests_are_answered_in_order, bad_framing_is_refused_at_once,
                  cors_preflight_and_headers, json_inside_strings_is_bounded,
                  web_pages_cannot_reach_the_model, rebound_host_names_are_refused, expect_continue_comes_after_the_checks,
                  body_size_is_bounded_per_route, disconnected_non_streaming_request_is_cancelled,
                  connection_cap_per_client_is_a_503_but_health_works, trickling_clients_lock_nobody_out,
                  fuzz_the_request_path, metrics_count_what_happened, sigterm_drains_then_exits]:
            c(ctx)
        alive = server.proc.poll() is None
        rc = server.stop(timeout=60 * SCALE)
        if not alive or rc != 0:
            FAILED.append("server exit")
            print("FAIL server: alive=%s exit=%r\n%s" % (alive, rc, "".join(server.log[-30:])))
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
    print("%d passed, %d failed" % (len(PASSED), len(FAILED)))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
