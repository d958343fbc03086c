#!/usr/bin/env python3
"""Expert parallel under mpirun (issue 15), against one process of the same build.

  logits   mpirun -np 2 and -np 3 `deepinfer logits --expert-parallel` on tiny V4 and V4.1
           checkpoints give byte-identical .npy files to one process: --kernels ref, and the
           cpu kernels at the same thread count; prefill (gathered rows) and decode (one row).
  faults   one rank given a broken checkpoint path: every rank exits non-zero within seconds
           and the error names rank 1 and the reason; a worker killed with SIGKILL under
           `serve` while a request runs ends the job within seconds, naming rank 1.
  serve    mpirun -np 2 `deepinfer serve --expert-parallel`: greedy completions equal the
           one-process `deepinfer generate`, then SIGUSR1 to mpirun (forwarded to every rank)
           stops every rank with exit 0.

Usage: test_mpi.py --cli build/deepinfer --mpirun /usr/bin/mpirun --models DIR [--only NAME]
Standard library only. Exits 1 on the first failure.
"""
import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

ARGS = None
MPI_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               # Shared-memory transport only: the tests run on one machine, often in a
               # container without a usable network interface for the TCP component.
               OMPI_MCA_btl="self,vader", OMPI_MCA_btl_vader_single_copy_mechanism="none")


def fail(msg):
    print("FAILED: " + msg, flush=True)
    sys.exit(1)


def mpirun(n):
    return [ARGS.mpirun, "--oversubscribe", "--bind-to", "none", "-np", str(n)]


def run(cmd, timeout=120):
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=MPI_ENV, capture_output=True, text=True, timeout=timeout)
    return p, time.monotonic() - t0


def logits_file(tmp, model, tokens_file, mode, kernels, ranks, tag):
    out = os.path.join(tmp, f"{tag}-{kernels}-{mode}-np{ranks}.npy")
    cli = [ARGS.cli, "logits", "--model", model, "--tokens-file", tokens_file, "--out", out, "--mode", mode,
           "--kernels", kernels, "--threads", "1"]
    cmd = cli if ranks == 1 else mpirun(ranks) + cli + ["--expert-parallel"]
    p, secs = run(cmd)
    if p.returncode != 0:
        fail(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stderr[-3000:]}")
    with open(out, "rb") as f:
        data = f.read()
    print(f"  {tag} {kernels} {mode} np{ranks}: {len(data)} bytes, {secs:.1f} s", flush=True)
    return data, p.stderr


def test_logits(tmp):
    cases = [("v4", os.path.join(ARGS.models, "hf-v4-wide", "model")),
             ("v41", os.path.join(ARGS.models, "np-v41-mix", "model"))]
    for tag, model in cases:
        if not os.path.isfile(os.path.join(model, "config.json")):
            fail(f"{model}: no checkpoint (./setup.sh regenerates models/golden)")
        cfg = json.load(open(os.path.join(model, "config.json")))
        cfg = cfg.get("text_config", cfg)
        vocab = cfg["vocab_size"]
        # A prompt of varied ids, long enough that every expert gets rows in prefill.
        tokens = [0] + [(i * 7919 + 13) % (vocab - 3) + 3 for i in range(23)]
        tokens_file = os.path.join(tmp, f"{tag}.tokens")
        with open(tokens_file, "w") as f:
            f.write(" ".join(map(str, tokens)))
        for kernels in ("ref", "cpu"):
            for mode in ("prefill", "decode"):
                one, _ = logits_file(tmp, model, tokens_file, mode, kernels, 1, tag)
                for n in (2, 3):
                    got, err = logits_file(tmp, model, tokens_file, mode, kernels, n, tag)
                    if got != one:
                        fail(f"{tag} {kernels} {mode}: -np {n} logits differ from one process")
                    # Each rank said which experts it runs: the split is real.
                    for r in range(n):
                        if f"expert parallel: rank {r} of {n} runs routed experts" not in err:
                            fail(f"{tag} np{n}: rank {r} did not report its expert slice:\n{err[-2000:]}")
    print("logits: byte-identical to one process at -np 2 and 3 (V4, V4.1; ref and cpu kernels)", flush=True)


def test_broken_rank(tmp):
    model = os.path.join(ARGS.models, "hf-v4-wide", "model")
    tokens_file = os.path.join(tmp, "broken.tokens")
    with open(tokens_file, "w") as f:
        f.write("0 5 6 7")
    common = ["logits", "--tokens-file", tokens_file, "--out", os.path.join(tmp, "broken.npy"), "--expert-parallel",
              "--threads", "1"]
    missing = os.path.join(tmp, "no-such-checkpoint")
    # MPMD: rank 0 gets the good checkpoint, rank 1 a path that does not exist.
    cmd = (mpirun(1) + [ARGS.cli] + common + ["--model", model, ":", "-np", "1", ARGS.cli] + common +
           ["--model", missing])
    p, secs = run(cmd, timeout=60)
    if p.returncode == 0:
        fail("a rank with a broken checkpoint path: mpirun exited 0")
    if "rank 1 of 2" not in p.stderr or "no-such-checkpoint" not in p.stderr:
        fail(f"the error does not name rank 1 and its path:\n{p.stderr[-3000:]}")
    if secs > 30:
        fail(f"the job took {secs:.0f} s to end")
    lines = [l for l in p.stderr.splitlines() if "rank 1 of 2" in l and "error" in l]
    print(f"broken rank: exit {p.returncode} after {secs:.1f} s: {lines[0] if lines else ''}", flush=True)


def http_quiet(port, body):
    try:
        http(port, "/v1/completions", body, timeout=60)
    except Exception:  # the job is being killed under it
        pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(port, path, body=None, timeout=60):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method="POST" if body else "GET",
                                 data=json.dumps(body).encode() if body else None,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, None


def wait_running(port, seconds=90):
    """Waits until the server reports a request running (/metrics), or fails: the event a test
    needs before it disturbs a step, instead of a guess at how long admission takes."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("deepinfer_requests_running") and float(line.rsplit(" ", 1)[1]) >= 1:
                    return
        time.sleep(0.05)
    fail(f"no request was running within {seconds} s")


def start_server(model, n):
    port = free_port()
    cmd = mpirun(n) + [ARGS.cli, "serve", "--model", model, "--port", str(port), "--threads", "1", "--kernels", "ref",
                       "--expert-parallel", "--kv-memory", "64M", "--no-webui"]
    log = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(cmd, env=MPI_ENV, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            fail(f"serve under mpirun exited {proc.returncode} before it was ready:\n{log.read()[-3000:]}")
        try:
            status, _ = http(port, "/health", timeout=2)
            if status == 200:
                return proc, port, log
        except (urllib.error.URLError, ConnectionError, socket.timeout):
            pass
        time.sleep(0.3)
    proc.kill()
    fail("serve under mpirun was not ready within 90 s")


def wait_exit(proc, seconds):
    try:
        return proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None


def test_serve(tmp):
    model = os.path.join(ARGS.models, "hf-v4-wide", "model")
    prompts = [[0, 11, 659, 763, 606], [0, 964, 860, 58, 726, 946, 514, 807, 37], [0, 5]]
    want = []
    for toks in prompts:
        f = os.path.join(tmp, "serve.tokens")
        with open(f, "w") as fh:
            fh.write(" ".join(map(str, toks)))
        # Plain greedy decoding as the reference (the server drafts with MTP by default: its
        # output must not change).
        p, _ = run([ARGS.cli, "generate", "--model", model, "--tokens-file", f, "-n", "6", "--kernels", "ref",
                    "--threads", "1", "--speculative", "off"])
        if p.returncode != 0:
            fail(f"generate: {p.stderr[-2000:]}")
        want.append([int(x) for x in p.stdout.split()])
    proc, port, log = start_server(model, 2)
    try:
        for toks, expect in zip(prompts, want):
            status, body = http(port, "/v1/completions",
                                {"prompt": toks, "max_tokens": 6, "temperature": 0, "return_token_ids": True,
                                 "ignore_eos": True})
            if status != 200:
                fail(f"/v1/completions under mpirun: HTTP {status}")
            got = body["choices"][0].get("token_ids")
            if got is None:
                fail(f"no token_ids in the completion: {json.dumps(body)[:500]}")
            if got != expect:
                fail(f"prompt {toks}: served {got}, one process generates {expect}")
        # mpirun forwards SIGUSR1 to every rank (a SIGTERM to mpirun kills the job).
        proc.send_signal(signal.SIGUSR1)
        rc = wait_exit(proc, 30)
        log.seek(0)
        out = log.read()
        if rc != 0:
            fail(f"serve under mpirun: SIGUSR1 gave exit {rc}:\n{out[-3000:]}")
        if "rank 1: " not in out or "worker stopped" not in out:
            fail(f"the worker rank did not stop cleanly:\n{out[-3000:]}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    print(f"serve: {len(prompts)} greedy completions equal one process; SIGUSR1 stopped both ranks (exit 0)", flush=True)


def rank_pid(mpirun_pid, rank):
    """The pid of the process of `rank` started by this mpirun (its descendants' environments)."""
    todo, seen = [mpirun_pid], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
            if f"OMPI_COMM_WORLD_RANK={rank}".encode() in env:
                return pid
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                todo += [int(x) for x in f.read().split()]
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            pass
    return None


def test_killed_rank(tmp):
    model = os.path.join(ARGS.models, "hf-v4-wide", "model")
    proc, port, log = start_server(model, 2)
    try:
        victim = rank_pid(proc.pid, 1)
        if victim is None:
            fail("could not find rank 1's process")
        # A long request in flight: rank 0 is inside a step (a collective) when rank 1 dies.
        threading.Thread(target=lambda: http_quiet(port, {"prompt": [0, 5, 6], "max_tokens": 4000, "ignore_eos": True}),
                         daemon=True).start()
        wait_running(port)
        os.kill(victim, signal.SIGKILL)
        t0 = time.monotonic()
        rc = wait_exit(proc, 30)
        secs = time.monotonic() - t0
        log.seek(0)
        out = log.read()
        if rc is None:
            fail(f"rank 1 killed: the job was still running 30 s later:\n{out[-3000:]}")
        if rc == 0:
            fail("rank 1 killed: mpirun exited 0")
        named = [l for l in out.splitlines() if re.search(r"rank 1\b.*(signal|exited|error)", l)]
        if not named:
            fail(f"rank 1 killed: no message names rank 1 and what happened:\n{out[-3000:]}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    line = named[0]
    print(f"killed rank: job ended with exit {rc} after {secs:.1f} s: {line.strip()}", flush=True)


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--mpirun", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--only", choices=["logits", "faults", "serve"])
    ARGS = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if ARGS.only in (None, "logits"):
            test_logits(tmp)
        if ARGS.only in (None, "faults"):
            test_broken_rank(tmp)
            test_killed_rank(tmp)
        if ARGS.only in (None, "serve"):
            test_serve(tmp)
    print("ok")


if __name__ == "__main__":
    main()
