"""Starts `deepinfer serve` on a free loopback port for a test or a soak, and stops it
(python3 standard library only). Used by tools/soak/soak.py and tests/sdk/test_sdk.py."""

import ctypes
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request


class ServerError(Exception):
    """The server did not come up; str() ends with its stderr so far."""


def _die_with_parent():
    """In the server's child process: SIGKILL it if the parent dies (a CTest timeout kills
    only the script), so no server outlives its test."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))


class LocalServer:
    """`binary serve --host 127.0.0.1 --port 0 --model model *extra_args`, up once /health
    answers 200 (it is 503 while the model loads). .url, .proc, .log (stderr lines, kept
    for failure reports)."""

    def __init__(self, binary, model, extra_args=(), timeout=120.0):
        cmd = [binary, "serve", "--model", model, "--host", "127.0.0.1", "--port", "0"] + list(extra_args)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     preexec_fn=_die_with_parent)
        self.log = []
        deadline = time.monotonic() + timeout
        port = None
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.log.append(line)
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                port = int(m.group(1))
                break
        if port is None:
            self._fail("the server did not start")
        # Keep draining stderr so the server never blocks on a full pipe.
        threading.Thread(target=self._drain, daemon=True).start()
        self.url = "http://127.0.0.1:%d" % port
        while True:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError):
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self._fail("/health never answered 200")
            time.sleep(0.05)

    def _drain(self):
        for line in self.proc.stderr:
            self.log.append(line)

    def _fail(self, what):
        self.proc.kill()
        raise ServerError(what + ":\n" + "".join(self.log))

    def stop(self, timeout=30.0):
        """SIGTERM; the exit status, or a message if it did not exit within timeout."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return "no exit within %g s of SIGTERM" % timeout
