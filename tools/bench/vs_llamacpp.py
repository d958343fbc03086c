#!/usr/bin/env python3
"""DeepInfer against llama.cpp on the same weights, in the same run.

Alternates `deepinfer bench` (the official checkpoint, mmapped as published) and `llama-bench`
(the GGUF llama.cpp's own converter made of that checkpoint) N times with the same threads,
prompt length and generation length, so both see the same memory state and neighbours, and
prints each round's figures and the ratios (DeepInfer / llama.cpp) with their spread.

    tools/bench/vs_llamacpp.py --model DIR --gguf FILE --llama-bench PATH [--runs 3]
        [--threads 2] [--prefill 512] [--decode 128] [--depth 0] [--numerics reference,float] [--json OUT]
        [--llama-server PATH [--serve-concurrency 1,4,16,32 --serve-prompts 16 --serve-input 640
         --serve-output 160 --serve-range-ratio 0.6]]

With --memory-limit GB, every bench run (both sides) runs inside a memory cgroup of that size
(cgroup v2 memory.max or v1 memory.limit_in_bytes; root), after the page cache was dropped, so
neither side finds the checkpoint cached outside its limit: the model no longer fits, as on a
machine with less memory than the weights. DeepInfer then streams its routed experts (its
default budget reads the cgroup's limit); llama.cpp pages its mmap in and out. Each run's major
page faults are reported, and DeepInfer's disk bytes per token, cache and prediction hit rates.

With --llama-server, each round also serves the same workload from `deepinfer serve` and from
`llama-server -np <concurrency>` in turn (one started, measured with `deepinfer bench-serve`,
stopped, then the other), at every concurrency in the list, and compares throughput, TTFT and
TPOT. Each concurrency C sends max(--serve-prompts, W C) requests (W = --serve-waves, default
2), so every slot serves W; with --serve-range-ratio R their lengths are drawn from [len (1 - R), len (1 + R)]
(640 / 160 with 0.6: prompts of 256-1024 tokens, 64-256 out).

llama-server parses every streamed completion with its chat-output parser, even on
/v1/completions, and fails the request (HTTP 500 mid-stream, "does not match the expected
Content-only format") once the text holds a byte sequence that is not UTF-8, which a random-weight
model emits within a few dozen tokens. Both servers therefore get the same `logit_bias` of -100
on the tokens that are not valid UTF-8 by themselves (1470 of the V4 vocabulary's 128000; any
sequence of the others is valid UTF-8), computed from the checkpoint's tokenizer.json;
--serve-any-bytes sends no bias.

llama.cpp is built outside this repository (see tools/bench/README.md: the fork
fairydreaming/llama.cpp @571d0d5 runs DeepSeek-V4 on CPU); nothing of it is vendored here.
Every speed claim about llama.cpp in this project comes from a run of this script.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "tokenizer"))  # byte_level.py
from byte_level import byte_decoder  # noqa: E402


def non_utf8_token_ids(tokenizer_json: Path) -> list[int]:
    """Ids of the byte-level BPE tokens whose bytes are not valid UTF-8 by themselves."""
    vocab = json.loads(tokenizer_json.read_text(encoding="utf-8"))["model"]["vocab"]
    byte_of = byte_decoder()
    bad = []
    for text, i in vocab.items():
        if any(ch not in byte_of for ch in text):
            continue  # an added / special token written as itself
        try:
            bytes(byte_of[ch] for ch in text).decode("utf-8")
        except UnicodeDecodeError:
            bad.append(i)
    return sorted(bad)


CGROUP_NAME = "di_vs_llamacpp"


def make_memory_cgroup(gb: float) -> Path:
    """A memory cgroup limited to gb (v2 or v1); returns the file a process joins it through."""
    limit = str(int(gb * 1e9))
    v2 = Path("/sys/fs/cgroup/cgroup.controllers")
    if v2.exists():
        group = Path("/sys/fs/cgroup") / CGROUP_NAME
        group.mkdir(exist_ok=True)
        (group / "memory.max").write_text(limit)
        swap = group / "memory.swap.max"
        if swap.exists():
            swap.write_text("0")
    else:
        group = Path("/sys/fs/cgroup/memory") / CGROUP_NAME
        group.mkdir(exist_ok=True)
        (group / "memory.limit_in_bytes").write_text(limit)
    return group / "cgroup.procs"


def drop_page_cache() -> None:
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("1")


def run_measured(args, cmd: list[str]) -> tuple[str, int]:
    """Runs cmd (inside the memory cgroup with --memory-limit); its stdout and major page faults."""
    if args.memory_limit:
        drop_page_cache()
        cmd = ["sh", "-c", f'echo $$ > {args.cgroup_procs} && exec "$@"', "sh"] + cmd
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_majflt
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return out, resource.getrusage(resource.RUSAGE_CHILDREN).ru_majflt - before


def run_deepinfer(args, numerics: str) -> dict:
    cmd = [str(args.deepinfer), "bench", "--model", args.model, "--threads", str(args.threads), "--prefill",
           str(args.prefill), "--decode", str(args.decode), "--numerics", numerics, "--depths", str(args.depth), "--json"]
    out, faults = run_measured(args, cmd)
    j = json.loads(out.strip().splitlines()[-1])
    res = {"prefill_tok_s": j["prefill_tok_s"], "decode_tok_s": j["decode_tok_s"],
           "triad_gb_s": j["mem_bandwidth_samples_gb_s"], "roofline_fraction": j["decode_roofline_fraction"],
           "major_faults": faults}
    run = j["runs"][0]
    for phase in ("prefill_streaming", "decode_streaming"):
        if phase in run:
            res[phase] = run[phase]
    return res


def run_llama(args) -> dict:
    cmd = [args.llama_bench, "-m", args.gguf, "-t", str(args.threads), "-p", str(args.prefill), "-n",
           str(args.decode), "-d", str(args.depth), "-r", "1", "-o", "json"]
    out, faults = run_measured(args, cmd)
    rows = json.loads(out)
    res = {}
    for r in rows:
        if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0:
            res["prefill_tok_s"] = r["avg_ts"]
        elif r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0:
            res["decode_tok_s"] = r["avg_ts"]
    if set(res) != {"prefill_tok_s", "decode_tok_s"}:
        raise RuntimeError("llama-bench gave no pp / tg rows: " + out[:400])
    res["major_faults"] = faults
    return res


def wait_ready(url: str, proc: subprocess.Popen, seconds: float = 300.0) -> None:
    end = time.time() + seconds
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1.0)
    raise RuntimeError("server not ready after %.0f s" % seconds)


def longest(length: int, ratio: float) -> int:
    return int(round(length * (1.0 + ratio)))


def run_serving(args, who: str, concurrency: int) -> dict:
    """Starts one server, runs bench-serve against it at `concurrency`, stops it."""
    port = 8171 if who == "deepinfer" else 8172
    per_slot = longest(args.serve_input, args.serve_range_ratio) + longest(args.serve_output, args.serve_range_ratio) + 16
    if who == "deepinfer":
        cmd = [str(args.deepinfer), "serve", "--model", args.model, "--threads", str(args.threads), "--port", str(port),
               "--max-num-seqs", str(max(32, concurrency))] + args.serve_args.split()
    else:
        # llama-server splits -c between its -np slots: each slot holds its longest request.
        cmd = [args.llama_server, "-m", args.gguf, "-t", str(args.threads), "-np", str(concurrency),
               "-c", str(concurrency * per_slot), "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, proc)
        bench = [str(args.deepinfer), "bench-serve", "--url", url, "--concurrency", str(concurrency),
                 "--num-prompts", str(max(args.serve_prompts, args.serve_waves * concurrency)), "--input-len", str(args.serve_input),
                 "--output-len", str(args.serve_output), "--range-ratio", str(args.serve_range_ratio),
                 "--vocab-size", "100000", "--json"] + (["--extra-body", "@" + str(args.extra_body)] if args.extra_body else [])
        # bench-serve exits 1 when requests failed; its report still says how many.
        out = subprocess.run(bench, capture_output=True, text=True)
        try:
            j = json.loads(out.stdout)
        except json.JSONDecodeError:
            raise RuntimeError(f"bench-serve against {who} gave no report: {out.stderr[-400:]}") from None
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
    return {"total_token_throughput": j["total_token_throughput"], "ttft_median_ms": j["ttft_ms"]["median"],
            "ttft_mean_ms": j["ttft_ms"]["mean"], "tpot_median_ms": j["tpot_ms"]["median"],
            "successful": j["successful_requests"], "failed": j.get("failed_requests", 0),
            "first_error": j.get("first_error", "")}


def spread(xs: list[float]) -> str:
    return f"median {statistics.median(xs):.2f}x (min {min(xs):.2f}, max {max(xs):.2f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="the official-layout checkpoint directory")
    ap.add_argument("--gguf", required=True, help="llama.cpp's conversion of the same checkpoint")
    ap.add_argument("--llama-bench", required=True, help="path of llama.cpp's llama-bench")
    ap.add_argument("--deepinfer", default=str(ROOT / "build" / "deepinfer"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prefill", type=int, default=512)
    ap.add_argument("--decode", type=int, default=128)
    ap.add_argument("--depth", type=int, default=0, help="context already in the cache before the measurements")
    ap.add_argument("--numerics", default="reference,float", help="DeepInfer numerics modes, comma separated")
    ap.add_argument("--json", help="also write every figure here")
    ap.add_argument("--memory-limit", type=float, default=0,
                    help="GB: run every bench inside a memory cgroup of this size, page cache dropped first (root)")
    ap.add_argument("--llama-server", help="path of llama.cpp's llama-server: also compare serving")
    ap.add_argument("--serve-prompts", type=int, default=16, help="requests per concurrency, at least --serve-waves per slot")
    ap.add_argument("--serve-waves", type=int, default=2, help="requests per slot at least")
    ap.add_argument("--serve-concurrency", default="4", help="comma-separated concurrencies, e.g. 1,4,16,32")
    ap.add_argument("--serve-input", type=int, default=256)
    ap.add_argument("--serve-output", type=int, default=64)
    ap.add_argument("--serve-range-ratio", type=float, default=0.0)
    ap.add_argument("--serve-args", default="", help="more arguments for `deepinfer serve`, e.g. '--speculative off'")
    ap.add_argument("--skip-bench", action="store_true", help="serving only: no llama-bench / deepinfer bench pairs")
    ap.add_argument("--serve-any-bytes", action="store_true",
                    help="no logit_bias against the tokens that are not UTF-8 alone (llama-server then fails requests)")
    args = ap.parse_args()
    args.extra_body = None
    args.cgroup_procs = str(make_memory_cgroup(args.memory_limit)) if args.memory_limit else None
    if args.llama_server and not args.serve_any_bytes:
        banned = non_utf8_token_ids(Path(args.model) / "tokenizer.json")
        extra = Path(tempfile.mkdtemp(prefix="vs_llamacpp_")) / "extra_body.json"
        extra.write_text(json.dumps({"logit_bias": {str(i): -100 for i in banned}}))
        args.extra_body = str(extra)
        print(f"serving: both servers get logit_bias -100 on the {len(banned)} tokens that are not UTF-8 alone", flush=True)
    concurrencies = [int(c) for c in args.serve_concurrency.split(",") if c]
    modes = [m for m in args.numerics.split(",") if m]
    rounds = []
    for i in range(args.runs):
        r = {}
        # Alternate who goes first, so a drift of the machine does not favour one side.
        order = ["llama"] + modes if i % 2 else modes + ["llama"]
        if not args.skip_bench:
            for who in order:
                r[who] = run_llama(args) if who == "llama" else run_deepinfer(args, who)
            line = [f"round {i + 1}:"]
            for m in modes:
                d = r[m]
                line.append(f"deepinfer {m} pp {d['prefill_tok_s']:.1f} tg {d['decode_tok_s']:.2f} "
                            f"({100 * d['roofline_fraction']:.0f}% of roofline, triad {d['triad_gb_s'][0]:.1f}/"
                            f"{d['triad_gb_s'][-1]:.1f} GB/s, {d['major_faults']} major faults);")
                for phase in ("prefill", "decode"):
                    if phase + "_streaming" not in d:
                        continue
                    ds = d[phase + "_streaming"]
                    line.append(f"[streamed {phase}: {ds['disk_bytes_per_token'] / 1e6:.0f} MB/token from disk at "
                                f"{ds['disk_read_gb_s']:.2f} GB/s, hits {100 * ds['cache_hit_rate']:.0f}%, predictions "
                                f"{100 * ds['prediction_hit_rate']:.0f}%"
                                + (f", {100 * ds['of_disk_bound']:.0f}% of the disk bound {ds['disk_bound_tok_s']:.1f} tok/s"
                                   if "disk_bound_tok_s" in ds else "") + "]")
            line.append(f"llama.cpp pp {r['llama']['prefill_tok_s']:.1f} tg {r['llama']['decode_tok_s']:.2f} "
                        f"({r['llama']['major_faults']} major faults)")
            print(" ".join(line), flush=True)
        rounds.append(r)
        if args.llama_server:
            for c in concurrencies:
                for who in (["llama-server", "deepinfer"] if (i + c) % 2 else ["deepinfer", "llama-server"]):
                    r[f"serve_{who}_c{c}"] = run_serving(args, who, c)
                for who in ("deepinfer", "llama-server"):
                    v = r[f"serve_{who}_c{c}"]
                    print(f"  C={c} serving {who}: {v['total_token_throughput']:.1f} tok/s, TTFT median "
                          f"{v['ttft_median_ms'] / 1000:.2f} s (mean {v['ttft_mean_ms'] / 1000:.2f}), TPOT median "
                          f"{v['tpot_median_ms']:.0f} ms, {v['successful']} ok / {v['failed']} failed"
                          + (f" ({v['first_error'][:80]})" if v["failed"] else ""), flush=True)
    summary = {}
    for m in ([] if args.skip_bench else modes):
        dec = [r[m]["decode_tok_s"] / r["llama"]["decode_tok_s"] for r in rounds]
        pre = [r[m]["prefill_tok_s"] / r["llama"]["prefill_tok_s"] for r in rounds]
        summary[m] = {"decode_ratio": dec, "prefill_ratio": pre}
        print(f"{m}: decode {spread(dec)}, prefill {spread(pre)} (DeepInfer / llama.cpp, {args.runs} rounds)")
    if args.llama_server:
        print("| C | DeepInfer tok/s | llama-server tok/s | throughput ratio | TTFT median DeepInfer / llama-server (s) "
              "| TPOT median DeepInfer / llama-server (ms) | failed DeepInfer / llama-server |")
        print("|---|---|---|---|---|---|---|")
        for c in concurrencies:
            d = [r[f"serve_deepinfer_c{c}"] for r in rounds]
            l = [r[f"serve_llama-server_c{c}"] for r in rounds]
            # A side that served nothing has no figures: its ratios are infinite (or undefined).
            def ratio(x: float, y: float) -> float:
                return x / y if y > 0 else float("inf") if x > 0 else float("nan")
            thr = [ratio(a["total_token_throughput"], b["total_token_throughput"]) for a, b in zip(d, l)]
            ttft = [ratio(b["ttft_median_ms"], a["ttft_median_ms"]) for a, b in zip(d, l)]
            tpot = [ratio(b["tpot_median_ms"], a["tpot_median_ms"]) for a, b in zip(d, l)]
            summary[f"serving_c{c}"] = {"throughput_ratio": thr, "ttft_speedup": ttft, "tpot_speedup": tpot}
            med = statistics.median
            print(f"| {c} | {med([a['total_token_throughput'] for a in d]):.1f} | "
                  f"{med([b['total_token_throughput'] for b in l]):.1f} | {spread(thr)} | "
                  f"{med([a['ttft_median_ms'] for a in d]) / 1000:.2f} / {med([b['ttft_median_ms'] for b in l]) / 1000:.2f} | "
                  f"{med([a['tpot_median_ms'] for a in d]):.0f} / {med([b['tpot_median_ms'] for b in l]):.0f} | "
                  f"{sum(a['failed'] for a in d)} / {sum(b['failed'] for b in l)} |")
        print("(medians over the rounds; llama-server's failed requests count as not served)")
    if args.json:
        Path(args.json).write_text(json.dumps({"settings": vars(args), "rounds": rounds, "ratios": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
