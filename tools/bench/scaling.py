#!/usr/bin/env python3
"""Thread scaling of one machine: `deepinfer bench --synthetic` on a V4 config cut to fit its
memory, at 1, 2, 4, ... threads up to all its cores, each run's decode, prefill and batched
decode against the triad bandwidth that run measured. One markdown table on stdout (and the
raw JSON of every run with --json-out).

    tools/bench/scaling.py                                  # the release config, cut to fit
    tools/bench/scaling.py --config tools/bench/v4-flash-0731.json --layers 4 --threads 1,8,16

The weights are built once in memory and saved to a scratch folder (--work, default a temporary
one under /tmp, deleted after), so later thread counts load them from the page cache instead of
building them again. The cut keeps every matrix's shape and all the experts; only the number of
layers changes (as many as fit --memory-fraction of MemAvailable, at most the config's), so the
per-token bytes of a layer are the release's.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise SystemExit("scaling: no MemAvailable in /proc/meminfo")


def layer_bytes(c):
    """Bytes of one layer's weights (routed experts FP4 + scales, shared expert and attention
    FP8; a slight overestimate of the small tensors)."""
    d, inter, e = c["hidden_size"], c["moe_intermediate_size"], c["n_routed_experts"]
    experts = e * 3 * inter * d * (0.5 + 1 / 32)
    shared = c.get("n_shared_experts", 1) * 3 * inter * d * 1.0
    h, hd, ql = c["num_attention_heads"], c["head_dim"], c["q_lora_rank"]
    attn = d * ql + ql * h * hd + d * hd + h * hd * c["o_lora_rank"] // c["o_groups"] + c["o_groups"] * c["o_lora_rank"] * d
    idx = c.get("index_n_heads", 0) * c.get("index_head_dim", 0) * ql + 2 * d * hd
    return int(1.1 * (experts + shared + attn + idx))


def cut_config(c, layers):
    out = dict(c)
    out["num_hidden_layers"] = layers
    out["compress_ratios"] = list(c["compress_ratios"][:layers])
    out["num_hash_layers"] = min(c.get("num_hash_layers", 0), max(0, layers - 1))
    # The drafters are not part of plain decoding: leave them out of the cut.
    out["num_nextn_predict_layers"] = 0
    for k in [k for k in out if k.startswith("dspark_")]:
        del out[k]
    return out


def threads_list(arg):
    if arg:
        return [int(t) for t in arg.split(",")]
    n, t, out = os.cpu_count() or 1, 1, []
    while t < n:
        out.append(t)
        t *= 2
    return out + [n]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--deepinfer", default=os.path.join(REPO, "build", "deepinfer"))
    ap.add_argument("--config", default=os.path.join(HERE, "v4-flash-0731.json"))
    ap.add_argument("--layers", type=int, default=0, help="layers to keep (default: as many as fit)")
    ap.add_argument("--memory-fraction", type=float, default=0.6)
    ap.add_argument("--threads", default="", help="comma list (default 1, 2, 4, ... and all cores)")
    ap.add_argument("--prefill", type=int, default=256)
    ap.add_argument("--decode", type=int, default=32)
    ap.add_argument("--decode-batches", default="1,8,32")
    ap.add_argument("--work", default="", help="scratch folder for the saved weights (kept when given)")
    ap.add_argument("--json-out", default="")
    a = ap.parse_args()

    with open(a.config) as f:
        full = json.load(f)
    fixed = 2 * full["vocab_size"] * full["hidden_size"] * 2  # embedding and head, bf16
    per_layer = layer_bytes(full)
    fit = int((a.memory_fraction * mem_available() - fixed) // per_layer)
    layers = a.layers or max(1, min(full["num_hidden_layers"], fit))
    if fit < 1 and not a.layers:
        raise SystemExit(f"scaling: not even one layer fits ({per_layer / 1e9:.1f} GB a layer, "
                         f"{mem_available() / 1e9:.1f} GB available)")
    cfg = cut_config(full, layers)
    work = a.work or tempfile.mkdtemp(prefix="di-scaling-")
    os.makedirs(work, exist_ok=True)
    cfg_path = os.path.join(work, "config-cut.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=1)
    model_dir = os.path.join(work, "model")
    cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"], capture_output=True,
                         text=True).stdout.strip()
    flags = ",".join(x for x in ("avx512f", "avx512_bf16", "amx_tile") if x in open("/proc/cpuinfo").read())
    print(f"scaling: {layers} of {full['num_hidden_layers']} layers of {a.config} "
          f"(~{(fixed + layers * per_layer) / 1e9:.1f} GB), {os.cpu_count()} cores ({cpu}; {flags or 'AVX2'})",
          file=sys.stderr)
    runs = []
    try:
        for t in threads_list(a.threads):
            src = ["--model", model_dir] if os.path.isdir(model_dir) else ["--synthetic", cfg_path, "--save", model_dir]
            cmd = [a.deepinfer, "bench", *src, "--threads", str(t), "--prefill", str(a.prefill), "--decode",
                   str(a.decode), "--decode-batches", a.decode_batches, "--json"]
            print("scaling: " + " ".join(cmd), file=sys.stderr)
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                sys.stderr.write(r.stderr)
                raise SystemExit(f"scaling: bench at {t} threads failed ({r.returncode})")
            j = json.loads(r.stdout.strip().splitlines()[-1])
            runs.append(j)
    finally:
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(runs, f, indent=1)
    batches = [int(b) for b in a.decode_batches.split(",")]
    print(f"\n{layers}-layer cut of {os.path.basename(a.config)}, {cpu}; prefill {a.prefill}, decode {a.decode}\n")
    print("| threads | triad GB/s | decode tok/s | of roofline | prefill tok/s | "
          + " | ".join(f"B={b} tok/s (of roofline)" for b in batches) + " | dispatches / layer | barrier us |")
    print("|" + "---:|" * (7 + len(batches)))
    for j in runs:
        cells = [f"{j['threads']}", f"{j['mem_bandwidth_gb_s']:.1f}", f"{j['decode_tok_s']:.2f}",
                 f"{100 * j['decode_roofline_fraction']:.0f}%", f"{j['prefill_tok_s']:.1f}"]
        by_b = {d["batch"]: d for d in j.get("decode_batches", [])}
        cells += [f"{by_b[b]['tok_s']:.1f} ({100 * by_b[b]['roofline_fraction']:.0f}%)" if b in by_b else "-"
                  for b in batches]
        cells += [f"{j['runs'][0]['decode_dispatches_per_layer']:.1f}", f"{1e6 * j['barrier_seconds']:.2f}"]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
