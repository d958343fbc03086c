#!/usr/bin/env python3
"""The chat page of `deepinfer serve` in a real browser: headless Chromium (Debian's
`chromium` + `chromium-driver`) driven by selenium (tests/webui/requirements.txt, installed
into .venv by ./setup.sh).

Run by CTest (tests/CMakeLists.txt: webui_chromium):

  .venv/bin/python tests/webui/test_webui.py --serve build/deepinfer \\
      --model ../shared/golden/tiny-v4-c/model --artifacts build/test-artifacts

It starts `deepinfer serve --api-key ...` on the tiny model and, in one browser session:
the page and its headers; the key dialog (a wrong key, then the right one); a greedy reply
streamed and stored exactly as the API gives it; a long reply stopped mid-stream (the server
counts the request as aborted in /metrics); a reload that finds both conversations; a server
error shown with its message; a canned SSE stream (fed by replacing window.fetch from the
test, so the page's own reader and renderer run) and a stored conversation, both full of
<script> / <img onerror> / javascript: links, rendered as text with nothing executed;
deleting a conversation; no CSP violations or script errors in the console. Then a second
server with --no-webui answers 404 at /. The screenshot goes to ARTIFACTS/webui.png.

Exit status: 0 passed, 1 failed, 77 skipped (only when chromium or chromedriver is absent).
"""

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "soak"))
import local_server  # noqa: E402

TIME_SCALE = float(os.environ.get("DEEPINFER_TEST_TIME_SCALE", "1"))
SKIP = 77
MODEL = "tiny-webui"
API_KEY = "webui-test-key"
SETUP_HINT = "run ./setup.sh (it installs tests/webui/requirements.txt into .venv and chromium via apt)"

PWN_CHECK = "return window.__pwned === undefined ? null : String(window.__pwned);"
HOSTILE_SCRIPT = '<script>window.__pwned="script"</script>'
HOSTILE_IMG = "<img src=x onerror=\"window.__pwned='img'\">"
HOSTILE_SVG = "<svg onload=\"window.__pwned='svg'\"></svg>"
BAD_LINK = "[bad link](javascript:window.__pwned='link')"
CANNED_REPLY = (
    "## Result\n\nHere is **bold**, *italic*, `inline <b>code</b>`, a [safe link](https://example.com/) and a "
    + BAD_LINK + ".\n\n"
    "- first item\n- second item with " + HOSTILE_IMG + "\n\n"
    "| name | value |\n|---|---|\n| pi | 3.14 |\n| e | 2.72 |\n\n"
    "```python\nprint('<script>alert(1)</script>')\n```\n\n"
    "Raw: " + HOSTILE_SCRIPT + " **caf\u00e9** \u2615 \U0001F600 " + HOSTILE_IMG)
CANNED_REASONING = "The user wants a demo. Mind " + HOSTILE_SVG + " in the output."
CANNED_ARGS = json.dumps({"city": HOSTILE_IMG, "days": 3})


def fail(msg):
    raise AssertionError(msg)


def check(cond, msg):
    if not cond:
        fail(msg)


# ------------------------------------------------------------------ HTTP helpers

def http_get(url, key=None):
    req = urllib.request.Request(url, headers={"Authorization": "Bearer " + key} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=30 * TIME_SCALE) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def http_post(url, body, key):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", "Authorization": "Bearer " + key})
    with urllib.request.urlopen(req, timeout=60 * TIME_SCALE) as r:
        return json.loads(r.read())


def metric(url, name, label=None):
    """The value of one sample of /metrics (the first whose labels contain `label`)."""
    _, _, text = http_get(url + "/metrics", API_KEY)  # /metrics is behind --api-key too
    for line in text.decode().splitlines():
        if line.startswith(name + "{") and (label is None or label in line):
            return float(line.rsplit(" ", 1)[1])
    fail("no %s%s in /metrics" % (name, " with " + label if label else ""))


# ------------------------------------------------------------------ the browser

def find_browser():
    chromium = next((shutil.which(n) for n in ("chromium", "chromium-browser") if shutil.which(n)), None)
    driver = shutil.which("chromedriver")
    return chromium, driver


def start_browser(chromium, chromedriver, profile):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1000",
              "--user-data-dir=" + profile, "--no-first-run", "--disable-extensions", "--disable-sync",
              "--disable-background-networking", "--disable-component-update", "--force-color-profile=srgb",
              "--lang=en-US"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=opts, service=Service(executable_path=chromedriver))


class Page:
    """The chat page in the browser, with the waits and reads the steps share."""

    def __init__(self, driver, url):
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait
        self.d, self.url, self.By, self.Wait = driver, url, By, WebDriverWait
        self.console = []  # browser log entries read so far

    def wait(self, what, cond, timeout=30):
        try:
            return self.Wait(self.d, timeout * TIME_SCALE, poll_frequency=0.05).until(lambda d: cond())
        except Exception as e:  # a TimeoutException says nothing of what was awaited
            fail("timed out waiting for %s (%s)" % (what, type(e).__name__))

    def js(self, script, *args):
        return self.d.execute_script(script, *args)

    def q(self, css):
        return self.d.find_elements(self.By.CSS_SELECTOR, css)

    def one(self, css):
        found = self.q(css)
        check(len(found) == 1, "expected one %s, found %d" % (css, len(found)))
        return found[0]

    def set_field(self, css, value):
        """Types into a settings field as a user would (the page saves on 'change')."""
        if not self.one("#settings").is_displayed():
            self.one("#settings-toggle").click()
        el = self.one(css)
        if el.get_attribute("type") == "checkbox":
            if el.is_selected() != bool(value):
                el.click()
            return
        el.clear()
        el.send_keys(str(value))
        self.one("#input").click()  # blur: fires 'change'

    def send(self, text):
        box = self.one("#input")
        box.clear()
        box.send_keys(text)
        self.one("#send").click()

    def streaming(self):
        return self.js("return !document.getElementById('stop').hidden;")

    def wait_reply_done(self, timeout=60):
        self.wait("the reply to finish", lambda: not self.streaming() and not self.q(".msg.streaming"), timeout)
        return self.q(".msg.assistant")[-1]

    def stored(self):
        return json.loads(self.js("return localStorage.getItem('deepinfer.chats') || '[]';"))

    def read_console(self):
        self.console += self.d.get_log("browser")
        return self.console


# ------------------------------------------------------------------ the steps

def step_page_and_headers(ctx):
    url = ctx["url"]
    status, headers, body = http_get(url + "/")
    check(status == 200, "GET / without a key: %d" % status)
    check(headers.get("Content-Type") == "text/html; charset=utf-8", "Content-Type %r" % headers.get("Content-Type"))
    csp = headers.get("Content-Security-Policy", "")
    for part in ("default-src 'none'", "script-src 'self'", "connect-src 'self'", "style-src 'self'"):
        check(part in csp, "CSP %r lacks %s" % (csp, part))
    check("unsafe" not in csp, "CSP allows something unsafe: %r" % csp)
    check(body.lstrip().lower().startswith(b"<!doctype html>"), "/ is not the page")
    check(http_get(url + "/index.html")[2] == body, "/index.html differs from /")
    status, headers, _ = http_get(url + "/app.js")
    check(status == 200 and headers.get("Content-Type", "").startswith("text/javascript"), "app.js: %d %r" %
          (status, headers.get("Content-Type")))
    check(http_get(url + "/v1/models")[0] == 401, "the API answers without the key")


def step_api_key(ctx):
    p = ctx["page"]
    p.d.get(ctx["url"] + "/")
    p.wait("the key dialog", lambda: p.js("return document.getElementById('key-dialog').open;"))
    check(p.q("#model option") == [], "models listed before a key was given")
    p.one("#key-input").send_keys("not-the-key")
    p.one("#key-save").click()
    p.wait("the dialog to come back for a rejected key",
           lambda: p.js("return document.getElementById('key-dialog').open;") and p.one("#key-problem").is_displayed())
    check("rejected" in p.one("#key-problem").text and "invalid or missing API key" in p.one("#key-problem").text,
          "the problem shown: %r" % p.one("#key-problem").text)
    p.one("#key-input").send_keys(API_KEY)
    p.one("#key-save").click()
    p.wait("the model list", lambda: [o.get_attribute("value") for o in p.q("#model option")] == [MODEL])
    check(not p.js("return document.getElementById('key-dialog').open;"), "the dialog stayed open")
    check(p.js("return localStorage.getItem('deepinfer.apiKey');") == API_KEY, "the key was not stored")


def step_greedy_reply(ctx):
    """A short greedy reply: streamed into the page, stored exactly as the API's own answer."""
    p = ctx["page"]
    p.set_field("#set-temperature", 0)
    p.set_field("#set-max-tokens", 24)
    p.send("Hello there, tiny model.")
    reply = p.wait_reply_done()
    stats = reply.find_element(p.By.CSS_SELECTOR, ".stats").text
    check("24 generated" in stats and "prompt tokens" in stats and "tok/s" in stats, "stats: %r" % stats)
    check("stopped at max tokens" in stats, "finish not shown: %r" % stats)
    chats = p.stored()
    check(len(chats) == 1 and chats[0]["title"] == "Hello there, tiny model.", "stored: %r" % chats)
    msgs = chats[0]["messages"]
    check([m["role"] for m in msgs] == ["user", "assistant"], "roles: %r" % msgs)
    want = http_post(ctx["url"] + "/v1/chat/completions",
                     {"model": MODEL, "messages": [{"role": "user", "content": "Hello there, tiny model."}],
                      "temperature": 0, "top_p": 0.95, "max_tokens": 24, "thinking": False}, API_KEY)
    check(msgs[1]["content"] == want["choices"][0]["message"]["content"],
          "streamed %r, the API says %r" % (msgs[1]["content"], want["choices"][0]["message"]["content"]))
    check(msgs[1]["stats"]["completion_tokens"] == 24, "stored stats %r" % msgs[1]["stats"])
    ctx["first_reply_text"] = reply.find_element(p.By.CSS_SELECTOR, ".text").text


def step_stop_mid_stream(ctx):
    """A long reply grows on screen while it streams; Stop aborts the fetch and the server
    cancels the request (an 'abort' in /metrics, nothing left running)."""
    p, url = ctx["page"], ctx["url"]
    aborted = metric(url, "deepinfer_request_success_total", 'finished_reason="abort"')
    p.one("#new-chat").click()
    p.set_field("#set-max-tokens", 3000)
    p.send("Please write a very long story.")
    text = lambda: p.js("const t = document.querySelector('.msg.assistant.streaming .text');"
                        "return t ? t.textContent.length : 0;")
    p.wait("the first text of the long reply", lambda: text() > 0 and p.streaming())
    first = text()
    p.wait("the reply to grow while streaming", lambda: text() > first and p.streaming())
    p.one("#stop").click()
    p.wait("the Send button back", lambda: p.one("#send").is_displayed() and not p.one("#stop").is_displayed())
    reply = p.q(".msg.assistant")[-1]
    check(reply.find_elements(p.By.CSS_SELECTOR, ".stopped"), "the reply is not marked stopped")
    p.wait("the server to count the request aborted",
           lambda: metric(url, "deepinfer_request_success_total", 'finished_reason="abort"') == aborted + 1
           and metric(url, "deepinfer_requests_running") == 0)
    stored = p.stored()
    last = max(stored, key=lambda c: c["updated"])["messages"][-1]
    check(last["stopped"] and last["done"] and last["content"], "stored stopped reply: %r" % last)
    check("completion_tokens" not in last["stats"], "a stopped stream got usage: %r" % last["stats"])
    ctx["stopped_text"] = reply.find_element(p.By.CSS_SELECTOR, ".text").text


def step_reload_finds_conversations(ctx):
    p = ctx["page"]
    p.d.refresh()
    p.wait("the model list after reload", lambda: len(p.q("#model option")) == 1)
    titles = [e.text for e in p.q("#conversations .open")]
    check(titles == ["Please write a very long story.", "Hello there, tiny model."], "conversations: %r" % titles)
    check(p.q(".msg.assistant .text")[-1].text == ctx["stopped_text"], "the stopped reply changed on reload")
    check(p.q(".msg.assistant .stopped"), "the stopped mark was lost")
    p.q("#conversations .open")[1].click()
    p.wait("the first conversation", lambda: p.q(".msg.user") and "Hello there" in p.q(".msg.user")[0].text)
    check(p.q(".msg.assistant .text")[0].text == ctx["first_reply_text"], "the first reply changed on reload")
    check(p.one("#set-temperature").get_attribute("value") == "0", "settings were not kept")


def step_thinking_reply(ctx):
    """Thinking on with an effort: the page asks for it, and the reasoning and answer it
    stores are the API's own split of the same greedy output."""
    p = ctx["page"]
    p.one("#new-chat").click()
    p.set_field("#set-thinking", True)
    check(p.one("#set-effort").is_enabled(), "the effort stays disabled with thinking on")
    from selenium.webdriver.support.ui import Select
    Select(p.one("#set-effort")).select_by_value("max")
    p.set_field("#set-max-tokens", 16)
    p.send("Think first.")
    reply = p.wait_reply_done()
    want = http_post(ctx["url"] + "/v1/chat/completions",
                     {"model": MODEL, "messages": [{"role": "user", "content": "Think first."}], "temperature": 0,
                      "max_tokens": 16, "thinking": True, "reasoning_effort": "max"}, API_KEY)["choices"][0]["message"]
    got = max(p.stored(), key=lambda c: c["updated"])["messages"][-1]
    check(want["reasoning_content"], "the tiny model gave no reasoning: %r" % want)
    check(got["reasoning"] == want["reasoning_content"] and got["content"] == (want["content"] or ""),
          "page %r / %r, API %r / %r" % (got["reasoning"], got["content"], want["reasoning_content"], want["content"]))
    details = reply.find_element(p.By.CSS_SELECTOR, "details.reasoning")
    check(not details.get_attribute("open"), "the reasoning stays open after the reply")
    check(details.find_element(p.By.CSS_SELECTOR, "summary").text == "Reasoning", "summary after the reply")
    details.find_element(p.By.CSS_SELECTOR, "summary").click()
    check(details.get_attribute("open"), "a click does not open the reasoning")
    shown = p.js("return arguments[0].querySelector('.text').textContent;", details)
    check(shown == want["reasoning_content"], "reasoning shown %r, the API says %r" % (shown, want["reasoning_content"]))
    p.set_field("#set-thinking", False)
    check(not p.one("#set-effort").is_enabled(), "the effort stays enabled with thinking off")
    p.set_field("#set-max-tokens", 3000)


def step_server_error_shown(ctx):
    p = ctx["page"]
    p.one("#new-chat").click()
    p.set_field("#set-temperature", -1)
    p.send("This request is bad.")
    reply = p.wait_reply_done()
    err = reply.find_element(p.By.CSS_SELECTOR, ".msg-error").text
    check(err.startswith("HTTP 400") and "temperature" in err and "{" not in err, "error shown: %r" % err)
    p.set_field("#set-temperature", 0)
    # A broken tools setting is refused before anything is sent.
    p.set_field("#set-tools", "[not json")
    p.send("With broken tools.")
    p.wait("the tools error", lambda: p.one("#error").is_displayed())
    check("Tools: not valid JSON" in p.one("#error").text, "banner: %r" % p.one("#error").text)
    check(p.one("#input").get_attribute("value") == "With broken tools.", "the message was lost")
    p.set_field("#set-tools", "")
    p.one("#input").clear()
    p.one("#error .close").click()


CANNED_FETCH = r"""
// Replaces fetch for chat completions with a canned SSE body cut at the given byte offsets
// (inside events and inside UTF-8 sequences); every 8th piece waits for a timer, so the page
// renders the reply part-way, as from a network.
const sse = arguments[0], cuts = arguments[1];
const bytes = new TextEncoder().encode(sse);
window.__realFetch = window.__realFetch || window.fetch;
window.__cannedRequests = [];
window.fetch = function (url, init) {
  if (!String(url).includes('chat/completions')) return window.__realFetch.apply(this, arguments);
  window.__cannedRequests.push(JSON.parse(init.body));
  let at = 0, next = 0;
  const body = new ReadableStream({
    pull(controller) {
      const give = () => {
        const end = next < cuts.length ? cuts[next++] : bytes.length;
        if (at < bytes.length) controller.enqueue(bytes.slice(at, end));
        else controller.close();
        at = end;
      };
      if (next % 8) return give();
      return new Promise((resolve) => setTimeout(() => { give(); resolve(); }, 0));
    },
  });
  return Promise.resolve(new Response(body, { status: 200, headers: { 'Content-Type': 'text/event-stream' } }));
};
"""


def canned_sse():
    def chunk(delta=None, finish=None, usage=None):
        c = {"id": "chatcmpl-canned", "object": "chat.completion.chunk", "created": 0, "model": MODEL}
        c["choices"] = [] if usage else [{"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish}]
        if usage:
            c["usage"] = usage
        return "data: " + json.dumps(c, ensure_ascii=False) + "\n\n"  # raw UTF-8, as the server sends

    def pieces(s, n):
        return [s[i:i + n] for i in range(0, len(s), n)]

    out = [chunk({"role": "assistant", "content": ""}), ": keep-alive\n\n"]
    out += [chunk({"reasoning_content": s}) for s in pieces(CANNED_REASONING, 9)]
    out += [chunk({"content": s}) for s in pieces(CANNED_REPLY, 7)]
    out.append(chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                      "function": {"name": "get_weather", "arguments": ""}}]}))
    out += [chunk({"tool_calls": [{"index": 0, "function": {"arguments": s}}]}) for s in pieces(CANNED_ARGS, 5)]
    out.append(chunk({}, "tool_calls"))
    out.append(chunk(usage={"prompt_tokens": 7, "completion_tokens": 42, "total_tokens": 49}))
    # CRLF line ends (the SSE spec allows them; our server sends LF, which the real replies test).
    return ("".join(out) + "data: [DONE]\n\n").replace("\n", "\r\n")


def canned_cuts(sse):
    """Byte offsets to cut the canned stream at: every 23 bytes, inside each multi-byte
    character of the reply (the page's decoder must join them), and between the CR and LF of
    the first few line ends."""
    data = sse.encode()
    cuts = set(range(23, len(data), 23))
    at = 0
    for _ in range(6):
        at = data.index(b"\r\n", at) + 1
        cuts.add(at)
    for ch in ("\u00e9", "\u2615", "\U0001F600"):
        at = data.index(ch.encode())
        cuts.add(at + 1)
    return sorted(cuts)


def check_hostile_rendering(p, reply):
    """Nothing the model said became markup: no script / img / svg elements, no javascript:
    link, the text visible as typed, and no handler ran."""
    check(p.js(PWN_CHECK) is None, "model text executed: window.__pwned = %r" % p.js(PWN_CHECK))
    for tag in ("script", "img", "svg", "iframe", "object", "style"):
        check(not p.q("#messages %s, #conversations %s" % (tag, tag)), "a <%s> element came from model text" % tag)
    check(not p.js("return [...document.querySelectorAll('#messages a')]"
                   ".filter(a => !/^(https?:|mailto:)/.test(a.href)).map(a => a.href);"), "an unsafe link")
    check(not p.js("return [...document.querySelectorAll('#messages *')].filter(e => [...e.attributes]"
                   ".some(a => a.name.startsWith('on'))).length;"), "an element with an on* attribute")


def step_canned_stream_renders_safely(ctx):
    p = ctx["page"]
    sse = canned_sse()
    p.js(CANNED_FETCH, sse, canned_cuts(sse))
    p.one("#new-chat").click()
    p.send("Show me everything you can render.")
    reply = p.wait_reply_done()
    sent = p.js("return window.__cannedRequests[0];")
    check(sent["stream"] is True and sent["stream_options"] == {"include_usage": True}, "request: %r" % sent)
    check(sent["model"] == MODEL and sent["temperature"] == 0 and sent["max_tokens"] == 3000 and
          sent["thinking"] is False and sent["messages"][-1] == {"role": "user",
                                                                  "content": "Show me everything you can render."},
          "request: %r" % sent)
    check_hostile_rendering(p, reply)
    md = reply.find_element(p.By.CSS_SELECTOR, ".text.md")
    text = md.text
    for shown in (HOSTILE_SCRIPT, HOSTILE_IMG, BAD_LINK, "caf\u00e9 \u2615 \U0001F600",
                  "print('<script>alert(1)</script>')"):
        check(shown in text, "not shown as text: %r in %r" % (shown, text))
    find = lambda css: [e.text for e in md.find_elements(p.By.CSS_SELECTOR, css)]
    check(find("h4") == ["Result"], "heading (## is shown as h4) %r" % find("h3, h4"))
    check(find("strong") == ["bold", "caf\u00e9"] and find("em") == ["italic"], "emphasis %r %r" % (find("strong"), find("em")))
    check(find("p code") == ["inline <b>code</b>"], "inline code %r" % find("p code"))
    check([a.get_attribute("href") for a in md.find_elements(p.By.CSS_SELECTOR, "a")] == ["https://example.com/"],
          "links")
    check(len(find("ul li")) == 2 and find("th") == ["name", "value"] and find("td") == ["pi", "3.14", "e", "2.72"],
          "list / table")
    check(find(".code .lang") == ["python"] and find(".code pre") == ["print('<script>alert(1)</script>')"],
          "code block %r" % find(".code pre"))
    reasoning = reply.find_element(p.By.CSS_SELECTOR, "details.reasoning")
    check(not reasoning.get_attribute("open"), "the reasoning stayed open after the answer came")
    check(reasoning.find_element(p.By.CSS_SELECTOR, "summary").text == "Reasoning", "summary")
    reasoning.find_element(p.By.CSS_SELECTOR, "summary").click()
    check(CANNED_REASONING in reasoning.text, "reasoning text %r" % reasoning.text)
    check(reply.find_element(p.By.CSS_SELECTOR, ".tool-name").text == "get_weather", "tool name")
    args = reply.find_element(p.By.CSS_SELECTOR, ".tool-args").text
    check(json.loads(args) == json.loads(CANNED_ARGS) and "\n" in args, "tool arguments %r" % args)
    stats = reply.find_element(p.By.CSS_SELECTOR, ".stats").text
    check("7 prompt tokens" in stats and "42 generated" in stats and "finish: tool_calls" in stats, "stats %r" % stats)
    check_hostile_rendering(p, reply)
    if p.one("#settings").is_displayed():
        p.one("#settings-toggle").click()
    p.js("arguments[0].scrollIntoView();", reply)
    p.d.save_screenshot(ctx["screenshot"])
    p.js("window.fetch = window.__realFetch;")


def step_stored_hostile_conversation(ctx):
    p = ctx["page"]
    chats = p.stored()
    chats.append({"id": "hostile", "title": HOSTILE_IMG, "updated": 1, "messages": [
        {"role": "user", "content": HOSTILE_SCRIPT + HOSTILE_IMG},
        {"role": "assistant", "content": "Look: " + HOSTILE_IMG + "\n\n" + BAD_LINK, "reasoning": HOSTILE_SVG,
         "tool_calls": [{"id": "x", "name": HOSTILE_IMG, "arguments": HOSTILE_SCRIPT}], "done": True,
         "error": HOSTILE_IMG, "stats": {"finish": HOSTILE_SCRIPT, "prompt_tokens": "<b>1</b>"}},
        {"role": "system", "content": "dropped"}, "junk", None]})
    valid = len(chats) + 1
    # Malformed entries (another tool, a hand edit) are dropped or repaired, never fatal.
    chats += [{"id": 5, "messages": []}, {"id": "no-messages"}, "junk", None,
              {"id": "odd", "title": {"x": 1}, "updated": "soon",
               "messages": [{"role": "assistant", "content": {"a": 1}, "tool_calls": "x", "stats": [1]}]}]
    p.js("localStorage.setItem('deepinfer.chats', arguments[0]);"
         "localStorage.setItem('deepinfer.settings', arguments[1]);",
         json.dumps(chats), json.dumps({"system": 5, "tools": None, "thinking": "yes", "temperature": "0"}))
    p.d.refresh()
    p.wait("the conversation list", lambda: len(p.q("#conversations .open")) == valid)
    check("Untitled" in [e.text for e in p.q("#conversations .open")], "the repaired conversation is missing")
    p.wait("the stored hostile title", lambda: HOSTILE_IMG in [e.text for e in p.q("#conversations .open")])
    [e for e in p.q("#conversations .open") if e.text == HOSTILE_IMG][0].click()
    p.wait("the hostile conversation", lambda: len(p.q(".msg")) == 2)
    reply = p.q(".msg.assistant")[0]
    check_hostile_rendering(p, reply)
    check(p.one(".msg.user .text").text == HOSTILE_SCRIPT + HOSTILE_IMG, "user text %r" % p.one(".msg.user .text").text)
    check(HOSTILE_IMG in reply.find_element(p.By.CSS_SELECTOR, ".text.md").text, "assistant text")
    check(reply.find_element(p.By.CSS_SELECTOR, ".tool-name").text == HOSTILE_IMG, "tool name")
    check(reply.find_element(p.By.CSS_SELECTOR, ".msg-error").text == HOSTILE_IMG, "error text")
    check(HOSTILE_SCRIPT in reply.find_element(p.By.CSS_SELECTOR, ".stats").text, "finish text")
    check("<b>1</b>" not in reply.find_element(p.By.CSS_SELECTOR, ".stats").text, "a non-number token count shown")


def step_delete(ctx):
    p = ctx["page"]
    before = len(p.q("#conversations li"))
    active = p.one("#conversations li.active")
    active.find_element(p.By.CSS_SELECTOR, ".delete").click()
    p.wait("the conversation to go", lambda: len(p.q("#conversations li")) == before - 1)
    check("hostile" not in [c["id"] for c in p.stored()], "still stored")
    check(p.q(".empty"), "the deleted conversation is still shown")


def step_console_clean(ctx):
    """No CSP violation or script error; the only failed loads are the ones the test caused."""
    bad = []
    for e in ctx["page"].read_console():
        msg = e.get("message", "")
        if e.get("level") != "SEVERE":
            continue
        if re.search(r"Failed to load resource: the server responded with a status of (401|400)", msg):
            continue
        bad.append(msg)
    check(not bad, "browser console errors:\n  " + "\n  ".join(bad))


def step_no_webui(ctx):
    srv = local_server.LocalServer(ctx["args"].serve, ctx["args"].model, ["--threads", "1", "--kv-memory", "64M",
                                                                          "--no-webui"], timeout=60 * TIME_SCALE)
    try:
        status, headers, body = http_get(srv.url + "/")
        check(status == 404 and json.loads(body)["error"]["message"] == "no route GET /", "--no-webui: %d %r" %
              (status, body))
        check(http_get(srv.url + "/v1/models")[0] == 200, "--no-webui broke the API")
    finally:
        check(srv.stop(30) == 0, "the --no-webui server did not exit cleanly")


STEPS = [step_page_and_headers, step_api_key, step_greedy_reply, step_stop_mid_stream,
         step_reload_finds_conversations, step_thinking_reply, step_server_error_shown, step_canned_stream_renders_safely,
         step_stored_hostile_conversation, step_delete, step_console_clean, step_no_webui]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--serve", required=True, help="the deepinfer binary")
    ap.add_argument("--model", required=True, help="checkpoint directory (the tiny model)")
    ap.add_argument("--artifacts", required=True, help="folder for webui.png")
    args = ap.parse_args()

    chromium, chromedriver = find_browser()
    if not chromium or not chromedriver:
        print("test_webui: SKIPPED: %s not found on PATH (apt install chromium chromium-driver; ./setup.sh does)"
              % " and ".join(n for n, p in (("chromium", chromium), ("chromedriver", chromedriver)) if not p))
        return SKIP
    try:
        import selenium  # noqa: F401
    except ImportError as e:  # chromium is here, so a missing selenium is a broken setup
        print("test_webui: FAILED: cannot import selenium (%s) with %s; %s" % (e, sys.executable, SETUP_HINT))
        return 1

    os.makedirs(args.artifacts, exist_ok=True)
    ctx = {"args": args, "screenshot": os.path.join(args.artifacts, "webui.png")}
    try:
        server = local_server.LocalServer(args.serve, args.model,
                                          ["--threads", "2", "--kv-memory", "256M", "--served-model-name", MODEL,
                                           "--api-key", API_KEY], timeout=60 * TIME_SCALE)
    except local_server.ServerError as e:
        print("test_webui: FAILED: %s" % e)
        return 1
    ctx["url"] = server.url
    profile = tempfile.mkdtemp(prefix="deepinfer-webui-")
    driver = None
    failed = None
    try:
        driver = start_browser(chromium, chromedriver, profile)
        ctx["page"] = Page(driver, server.url)
        for step in STEPS:
            t0 = time.monotonic()
            try:
                step(ctx)
            except Exception:
                failed = step.__name__
                print("test_webui: %s FAILED:\n%s" % (step.__name__, traceback.format_exc()))
                shot = os.path.join(args.artifacts, "webui-failure.png")
                if driver.save_screenshot(shot):
                    print("test_webui: the page at the failure: %s" % shot)
                break
            print("test_webui: %-40s ok (%.1f s)" % (step.__name__, time.monotonic() - t0))
    except Exception:
        failed = "the browser"
        print("test_webui: FAILED to drive chromium:\n%s" % traceback.format_exc())
    finally:
        if driver:
            driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
        status = server.stop(30)
    if failed:
        print("test_webui: server log tail:\n" + "".join(server.log[-20:]))
        return 1
    if status != 0:
        print("test_webui: FAILED: the server exited with %r after SIGTERM" % status)
        return 1
    print("test_webui: passed; screenshot %s" % ctx["screenshot"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
