#!/usr/bin/env python3
"""The embedded default model (models-src/default, trained by tools/train/train.py): the
engine's held-out perplexity equals the training script's, in both numerics.

tests/data/trained_default/expected.json holds what tools/train/train.py measured in PyTorch on
tests/data/trained_default/heldout.txt (windows of 512 = BOS + 511 tokens, the split
`deepinfer perplexity` uses):
  float:      fp32 PyTorch (float64 reductions) on the exported, exactly dequantised weights;
              the engine's --numerics float computes the same model, so only summation-order
              noise separates them.
  reference:  the same with the reference's quantisation points emulated in PyTorch (act_quant
              of every FP8/FP4 GEMM input, bf16 rounding points, KV FP8 and indexer FP4 QDQ);
              the emulation is bit-faithful until a rare last-bit difference flips a bf16
              rounding (then carried along the sequence), hence a looser bound. Measured at
              commit: float |d| 1e-8 nats; reference 1.9e-5 nats on this file, 2.9e-4 on the
              whole held-out split (25k tokens).
Plain Python (no packages): it runs the CLI and reads its JSON line.
"""

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

# |log(ppl_engine / ppl_torch)| bounds, i.e. differences of the mean NLL in nats per token.
TOLERANCE = {"float": 1e-6, "reference": 1e-3}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    args = ap.parse_args()
    data = Path(args.data)
    expected = json.loads((data / "expected.json").read_text())
    model_cfg = json.loads((Path(args.model) / "config.json").read_text())
    if model_cfg.get("_deepinfer_generator", {}).get("tool") != "tools/train/train.py":
        print(f"FAILED: {args.model} is not the trained default (config.json _deepinfer_generator)")
        return 1
    failed = 0
    for numerics in ("float", "reference"):
        out = subprocess.run([args.cli, "perplexity", "--model", args.model, "--file", str(data / "heldout.txt"),
                              "--context", str(expected["context"]), "--numerics", numerics, "--threads", "2"],
                             check=True, capture_output=True, text=True).stdout
        got = json.loads(out)
        want = expected[numerics]
        d = abs(got["nll"] - want["nll"])
        ok = got["tokens"] == want["tokens"] and d <= TOLERANCE[numerics]
        print(f"{numerics}: engine ppl {got['ppl']:.6f} ({got['tokens']} tokens), torch ppl {want['ppl']:.6f} "
              f"({want['tokens']} tokens); |d nll| {d:.3g} nats (bound {TOLERANCE[numerics]:g}) "
              f"{'ok' if ok else 'FAILED'}")
        failed += not ok
        if not math.isfinite(got["nll"]):
            failed += 1
    print(f"{2 - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
