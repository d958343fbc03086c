"""Binding tests: the package and the CLI run the same engine, so what the package returns must be
what the CLI prints for the same request (tokens, logits). These catch a binding that drops,
reorders or converts something; whether the engine itself is right is test_golden.py's job."""
import numpy as np
import pytest

import deepinfer
from conftest import run_cli

GREEDY = deepinfer.SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)


@pytest.mark.parametrize("numerics", ["reference", "float"])
def test_greedy_tokens_equal_cli(request, cli, tmp_path, tiny_dir, tiny_sequences, numerics):
    llm = request.getfixturevalue("tiny_ref" if numerics == "reference" else "tiny_float")
    seqs = ["seq7", "seq40", "seq300"]
    outs = llm.generate([tiny_sequences[s] for s in seqs], GREEDY)
    for seq, out in zip(seqs, outs):
        f = tmp_path / f"{seq}.tokens"
        f.write_text(" ".join(map(str, tiny_sequences[seq])))
        want = run_cli(cli, "generate", "--model", tiny_dir, "--tokens-file", f, "-n", 32, "--numerics", numerics,
                       "--threads", 2).split()
        assert out.outputs[0].token_ids == [int(t) for t in want], seq


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


@pytest.mark.parametrize("numerics", ["reference", "float"])
def test_logprobs_equal_cli_logits(request, cli, tmp_path, tiny_dir, tiny_sequences, numerics):
    """Prompt logprobs (every prompt row) and the first generated token's logprobs are the
    log-softmax of the logits `deepinfer logits` writes."""
    llm = request.getfixturevalue("tiny_ref" if numerics == "reference" else "tiny_float")
    ids = tiny_sequences["seq40"]
    f = tmp_path / "seq40.tokens"
    f.write_text(" ".join(map(str, ids)))
    run_cli(cli, "logits", "--model", tiny_dir, "--tokens-file", f, "--out", tmp_path / "l.npy", "--numerics", numerics,
            "--threads", 2)
    want = log_softmax(np.load(tmp_path / "l.npy"))
    assert want.shape == (len(ids), llm.vocab_size)

    out = llm.generate(ids, deepinfer.SamplingParams(temperature=0, max_tokens=1, logprobs=20, prompt_logprobs=20))[0]
    plp = out.prompt_logprobs
    assert plp[0] is None and len(plp) == len(ids)
    rows = [(r, ids[r + 1], plp[r + 1]) for r in range(len(ids) - 1)]
    gen = out.outputs[0]
    rows.append((len(ids) - 1, gen.token_ids[0], gen.logprobs[0]))
    worst = 0.0
    for r, token, entry in rows:
        assert list(entry)[0] == token  # the scored token first, as in vLLM
        # 20 alternatives: exactly the 20 largest of the row, best first (no ties among them here).
        alts = sorted(((lp.rank, t) for t, lp in entry.items() if lp.rank is not None))
        top = [t for _, t in alts]
        assert top == list(np.argsort(-want[r], kind="stable")[:20]), f"row {r}"
        for t, lp in entry.items():
            worst = max(worst, abs(lp.logprob - want[r, t]))
    # Same logits on both sides; only the log-softmax differs (fp32 in the engine, fp64 above):
    # a few ulp (measured 4.6e-7), while a wrong model feature moves logits by ~5e-3.
    assert worst < 5e-6, worst
    assert gen.token_ids[0] == int(np.argmax(want[-1]))
