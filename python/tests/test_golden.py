"""The oracle: greedy tokens through the package equal the goldens on tiny-v4-c, which independent
implementations made (llama.cpp for float numerics, DeepSeek's inference/model.py for reference)."""
import numpy as np
import pytest

import deepinfer
from conftest import TINY

GREEDY = deepinfer.SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)


def golden_tokens(kind, seq):
    return np.fromfile(TINY / kind / f"{seq}.gen.i32", dtype="<i4").tolist()


@pytest.mark.parametrize("numerics,kind,seqs", [
    ("float", "logits/exact", ["seq1", "seq7", "seq40"]),  # llama.cpp
    ("reference", "reference", ["seq7", "seq40"]),          # DeepSeek's inference/model.py
])
def test_greedy_tokens_equal_golden(tiny_dir, tiny_sequences, numerics, kind, seqs):
    # The scalar referee kernels, as tests/model/test_golden.cpp; all prompts in one call.
    llm = deepinfer.LLM(tiny_dir, numerics=numerics, kernels="ref", threads=1, kv_memory="32M")
    outs = llm.generate([tiny_sequences[s] for s in seqs], GREEDY)
    for seq, out in zip(seqs, outs):
        assert out.prompt_token_ids == tiny_sequences[seq]
        assert out.outputs[0].token_ids == golden_tokens(kind, seq), seq
        assert out.outputs[0].finish_reason == "length"
