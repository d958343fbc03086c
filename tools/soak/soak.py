#!/usr/bin/env python3
"""Soak test for `deepinfer serve` (python3 standard library only).

N concurrent streaming clients (default 64) send requests for a fixed duration, drawn from a
fixed pool of request specs: /v1/completions, /v1/chat/completions and /v1/messages, prompts
from a few words to a few thousand, temperature > 0 with a fixed seed each, a few clients
that hang up mid-stream. Checked:

  * every request completes ([DONE] / message_stop with a finish reason) or gets a JSON
    error (a 4xx/5xx JSON body, or a JSON error event in the stream); none hangs past
    --request-timeout;
  * every completed run of a spec produced the same text, and that text equals the spec
    sent again alone after the load (seeded sampling is independent of the batch);
  * the server's RSS (VmRSS of /proc/PID/status, sampled every 0.5 s) is reported: min, max,
    at the start and at the end of the load.

Either point it at a running server (--url, --pid for RSS) or let it start one:
  soak.py --serve build/deepinfer --model ../shared/golden/tiny-v4-c/model --clients 16 --duration 30
which starts `deepinfer serve --port 0` on a free port, runs the soak, stops the server with
SIGTERM and requires a clean exit. Prints a summary; exits 1 on any violation.
"""

import argparse
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse

import local_server  # next to this file

WORDS = ("the of and to in is was for on that with as by at from his her it an are were which "
         "be this or had not but what all when we there can more one been if no other so some "
         "time would into has do could also first after two any new very where most well back "
         "paris river mountain engine token cache stream window sparse expert router signal").split()


class Violation(Exception):
    pass


# ------------------------------------------------------------------ request specs

def make_specs(n, seed, max_tokens):
    """A fixed pool of distinct requests: endpoint, prompt length, seed, max_tokens."""
    rng = random.Random(seed)
    specs = []
    for i in range(n):
        r = rng.random()
        n_words = rng.choice([3, 5, 8, 12, 20, 40, 80, 200]) if r < 0.9 else rng.randint(400, 1500)
        text = " ".join(rng.choice(WORDS) for _ in range(n_words))
        endpoint = ("/v1/completions", "/v1/chat/completions", "/v1/messages")[i % 3]
        body = {"max_tokens": rng.randint(4, max_tokens), "temperature": rng.choice([0.7, 1.0, 1.3]),
                "seed": rng.randint(0, 2**31 - 1), "stream": True}
        if endpoint == "/v1/completions":
            body["prompt"] = text
        else:
            body["messages"] = [{"role": "user", "content": text}]
        if endpoint == "/v1/messages":
            body.pop("seed")  # Anthropic has no seed: sampled freshly, compared on structure only
            body["top_k"] = 1  # ... unless greedy: top_k 1 makes it deterministic again
        specs.append({"id": i, "endpoint": endpoint, "body": body})
    return specs


# ------------------------------------------------------------------ one streaming request

def parse_event(endpoint, data, out):
    """Folds one SSE data payload into `out`; returns True at the end of the stream."""
    if data == "[DONE]":
        out["done"] = True
        return True
    ev = json.loads(data)
    if "error" in ev and (endpoint != "/v1/messages" or ev.get("type") == "error"):
        out["error"] = ev["error"]
        return endpoint == "/v1/messages"
    if endpoint == "/v1/completions":
        for c in ev.get("choices", []):
            out["text"] += c.get("text") or ""
            if c.get("finish_reason"):
                out["finish"] = c["finish_reason"]
    elif endpoint == "/v1/chat/completions":
        for c in ev.get("choices", []):
            d = c.get("delta", {})
            out["text"] += (d.get("reasoning_content") or "") + (d.get("content") or "")
            if c.get("finish_reason"):
                out["finish"] = c["finish_reason"]
    else:
        t = ev.get("type")
        if t == "content_block_delta":
            d = ev["delta"]
            out["text"] += d.get("text", "") + d.get("thinking", "") + d.get("partial_json", "")
        elif t == "message_delta":
            out["finish"] = ev["delta"].get("stop_reason")
        elif t == "message_stop":
            out["done"] = True
            return True
    return False


def run_request(url, spec, timeout, api_key=None, hang_up_after=None):
    """Sends one streaming request. Returns a dict: status, text, finish, done, error, seconds."""
    u = urllib.parse.urlsplit(url)
    t0 = time.monotonic()
    deadline = t0 + timeout
    out = {"status": 0, "text": "", "finish": None, "done": False, "error": None, "hung_up": False}
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)
    try:
        headers = {"Content-Type": "application/json"}
        if api_key:
            headers["Authorization"] = "Bearer " + api_key
        conn.request("POST", spec["endpoint"], body=json.dumps(spec["body"]), headers=headers)
        resp = conn.getresponse()
        out["status"] = resp.status
        if resp.status != 200:
            body = resp.read()
            try:
                j = json.loads(body)
            except ValueError:
                raise Violation("HTTP %d with a non-JSON body: %r" % (resp.status, body[:200]))
            if not isinstance(j, dict) or "error" not in j:
                raise Violation("HTTP %d without an error object: %r" % (resp.status, body[:200]))
            out["error"] = j["error"]
            return out
        events = 0
        data = []
        while True:
            if time.monotonic() > deadline:
                raise Violation("no end of stream after %.0f s" % timeout)
            line = resp.readline()
            if not line:
                raise Violation("stream closed before its end (%d events)" % events)
            line = line.decode("utf-8").rstrip("\r\n")
            if line.startswith("data: "):
                data.append(line[6:])
            elif line == "" and data:
                events += 1
                payload = "\n".join(data)
                data = []
                if parse_event(spec["endpoint"], payload, out):
                    break
                if hang_up_after is not None and events >= hang_up_after:
                    out["hung_up"] = True
                    return out
        if out["error"] is None and not out["finish"]:
            raise Violation("stream ended without a finish reason")
        return out
    except (socket.timeout, TimeoutError):
        raise Violation("request timed out after %.0f s" % timeout)
    except (ConnectionError, http.client.HTTPException, OSError) as e:
        raise Violation("transport error: %r" % (e,))
    finally:
        out["seconds"] = time.monotonic() - t0
        conn.close()


# ------------------------------------------------------------------ RSS sampling

def read_rss_kib(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class RssSampler(threading.Thread):
    def __init__(self, pid, period=0.5):
        super().__init__(daemon=True)
        self.pid, self.period = pid, period
        self.samples = []
        self.stop_event = threading.Event()

    def run(self):
        while not self.stop_event.is_set():
            v = read_rss_kib(self.pid)
            if v is not None:
                self.samples.append(v)
            self.stop_event.wait(self.period)


# ------------------------------------------------------------------ the soak

class Soak:
    def __init__(self, args, specs):
        self.args, self.specs = args, specs
        self.lock = threading.Lock()
        self.results = {}  # spec id -> set of texts of completed runs
        self.n_ok = self.n_error = self.n_hung_up = self.n_failed = 0
        self.errors_by_status = {}
        self.violations = []
        self.latencies = []
        self.chars = 0

    def client(self, index, stop_at):
        rng = random.Random(self.args.seed * 1000 + index)
        while time.monotonic() < stop_at:
            spec = rng.choice(self.specs)
            hang_up = rng.randint(1, 3) if rng.random() < self.args.hang_up_fraction else None
            try:
                r = run_request(self.args.url, spec, self.args.request_timeout, self.args.api_key, hang_up)
            except Violation as v:
                with self.lock:
                    self.n_failed += 1
                    self.violations.append("spec %d %s: %s" % (spec["id"], spec["endpoint"], v))
                continue
            with self.lock:
                if r["hung_up"]:
                    self.n_hung_up += 1
                elif r["error"] is not None:
                    self.n_error += 1
                    key = r["status"] if r["status"] != 200 else "in-stream"
                    self.errors_by_status[key] = self.errors_by_status.get(key, 0) + 1
                else:
                    self.n_ok += 1
                    self.latencies.append(r["seconds"])
                    self.chars += len(r["text"])
                    self.results.setdefault(spec["id"], set()).add(r["text"])

    def run_load(self):
        stop_at = time.monotonic() + self.args.duration
        threads = [threading.Thread(target=self.client, args=(i, stop_at), daemon=True)
                   for i in range(self.args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            # a client's last request may start just before stop_at
            t.join(self.args.duration + self.args.request_timeout + 30)
            if t.is_alive():
                self.violations.append("a client thread is still running (hung request)")

    def recheck_alone(self):
        """Each spec that completed under load, sent again alone: the same text."""
        mismatches = 0
        for sid, texts in sorted(self.results.items()):
            spec = self.specs[sid]
            if len(texts) > 1:
                mismatches += 1
                self.violations.append("spec %d %s: %d different texts under load" % (sid, spec["endpoint"], len(texts)))
                continue
            try:
                r = run_request(self.args.url, spec, self.args.request_timeout, self.args.api_key)
            except Violation as v:
                self.violations.append("spec %d alone: %s" % (sid, v))
                continue
            if r["error"] is not None:
                self.violations.append("spec %d alone: error %s" % (sid, r["error"]))
            elif r["text"] not in texts:
                mismatches += 1
                self.violations.append("spec %d %s: alone %r != under load %r" %
                                       (sid, spec["endpoint"], r["text"][:80], next(iter(texts))[:80]))
        return mismatches


def percentile(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))]


def start_server(args):
    try:
        return local_server.LocalServer(args.serve, args.model,
                                        ["--threads", str(args.server_threads)] + (args.server_arg or []))
    except local_server.ServerError as e:
        sys.exit("soak: %s" % e)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8000", help="a running server (ignored with --serve)")
    ap.add_argument("--pid", type=int, help="the running server's pid, for RSS (default: found with --serve)")
    ap.add_argument("--serve", metavar="DEEPINFER", help="start `DEEPINFER serve` on a free port and stop it after")
    ap.add_argument("--model", help="checkpoint for --serve")
    ap.add_argument("--server-threads", type=int, default=2, help="--threads of the started server (default 2)")
    ap.add_argument("--server-arg", action="append", help="extra argument for the started server (repeatable)")
    ap.add_argument("--api-key")
    ap.add_argument("--clients", type=int, default=64, help="concurrent streaming clients (default 64)")
    ap.add_argument("--duration", type=float, default=180, help="seconds of load (default 180)")
    ap.add_argument("--request-timeout", type=float, default=120,
                    help="seconds before a request counts as hung (times DEEPINFER_TEST_TIME_SCALE, default 1)")
    ap.add_argument("--specs", type=int, default=96, help="distinct requests in the pool (default 96)")
    ap.add_argument("--max-tokens", type=int, default=48, help="largest max_tokens of a request (default 48)")
    ap.add_argument("--hang-up-fraction", type=float, default=0.05, help="requests abandoned mid-stream")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    args.request_timeout *= float(os.environ.get("DEEPINFER_TEST_TIME_SCALE", "1"))

    proc = None
    if args.serve:
        if not args.model:
            ap.error("--serve needs --model")
        server = start_server(args)
        proc, args.url = server.proc, server.url
        args.pid = proc.pid
    sampler = RssSampler(args.pid) if args.pid else None
    if sampler:
        sampler.start()

    specs = make_specs(args.specs, args.seed, args.max_tokens)
    soak = Soak(args, specs)
    t0 = time.monotonic()
    rss_start = read_rss_kib(args.pid) if args.pid else None
    soak.run_load()
    load_seconds = time.monotonic() - t0
    rss_end = read_rss_kib(args.pid) if args.pid else None
    mismatches = soak.recheck_alone()
    if sampler:
        sampler.stop_event.set()
        sampler.join()

    server_exit = None
    if proc:
        proc.send_signal(signal.SIGTERM)
        try:
            server_exit = proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            soak.violations.append("the server did not stop within 60 s of SIGTERM")
        if server_exit not in (None, 0):
            soak.violations.append("the server exited with status %s" % server_exit)

    n_req = soak.n_ok + soak.n_error + soak.n_hung_up + soak.n_failed
    print("soak: %d clients, %.0f s of load, %d request specs" % (args.clients, load_seconds, len(specs)))
    print("  requests        %d (%.1f/s): %d completed, %d JSON errors %s, %d hung up on purpose, %d failed" %
          (n_req, n_req / load_seconds, soak.n_ok, soak.n_error, soak.errors_by_status or "", soak.n_hung_up,
           soak.n_failed))
    print("  latency         p50 %.2f s, p99 %.2f s, max %.2f s" %
          (percentile(soak.latencies, 50), percentile(soak.latencies, 99), max(soak.latencies or [float("nan")])))
    print("  output          %.0f chars/s" % (soak.chars / load_seconds))
    print("  determinism     %d specs completed under load, %d rechecked alone, %d mismatches" %
          (len(soak.results), len(soak.results), mismatches))
    if sampler and sampler.samples:
        s = sampler.samples
        print("  server RSS      min %.1f MiB, max %.1f MiB, start %.1f MiB, end of load %.1f MiB (%d samples)" %
              (min(s) / 1024, max(s) / 1024, (rss_start or s[0]) / 1024, (rss_end or s[-1]) / 1024, len(s)))
    if proc:
        print("  server exit     %s" % server_exit)
    if soak.violations:
        print("VIOLATIONS (%d):" % len(soak.violations))
        for v in soak.violations[:50]:
            print("  " + v)
        return 1
    if soak.n_ok == 0:
        print("VIOLATION: no request completed")
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
