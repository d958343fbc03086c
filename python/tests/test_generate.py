"""generate(): prompt forms, batching, sampling parameters, logprobs, stop strings."""
import pytest

import deepinfer
from conftest import idle_stats

GREEDY8 = deepinfer.SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)


def test_default_model_loads_and_generates(default_llm, cli):
    assert default_llm.model_dir == deepinfer.default_model_dir()
    assert default_llm.chat_family == "v4"
    prompt = "The capital of France is"
    out = default_llm.generate(prompt, deepinfer.SamplingParams(temperature=0, max_tokens=12))[0]
    assert out.prompt == prompt
    assert out.prompt_token_ids[0] == default_llm.tokenizer.bos_token_id
    assert out.prompt_token_ids[1:] == default_llm.tokenizer.encode(prompt, add_special_tokens=False)
    c = out.outputs[0]
    assert 1 <= len(c.token_ids) <= 12 and c.finish_reason in ("stop", "length")
    assert c.text == default_llm.tokenizer.decode([t for t in c.token_ids if t != default_llm.tokenizer.eos_token_id],
                                                  skip_special_tokens=True)
    # The CLI's text mode: BOS + the tokenizer, greedy, streamed text, stops at EOS.
    from conftest import run_cli
    want = run_cli(cli, "generate", "--prompt", prompt, "-n", 12, "--threads", 2).decode()
    assert c.text == want[:-1]  # the CLI ends its line


def test_prompt_forms(tiny_float):
    ids = [0, 439, 217, 138]
    one = tiny_float.generate(ids, GREEDY8)
    assert len(one) == 1 and one[0].prompt is None
    for form in ([ids], {"prompt_token_ids": ids}, [{"prompt_token_ids": ids}], (tuple(ids),)):
        outs = tiny_float.generate(form, GREEDY8)
        assert len(outs) == 1 and outs[0].outputs[0].token_ids == one[0].outputs[0].token_ids
    assert tiny_float.generate([], GREEDY8) == []


def test_prompts_are_batched_and_batch_invariant(tiny_float, tiny_sequences):
    prompts = [tiny_sequences[s] for s in ("seq1", "seq7", "seq40", "seq300")]
    alone = [tiny_float.generate(p, GREEDY8)[0].outputs[0].token_ids for p in prompts]
    steps0 = idle_stats(tiny_float)["steps_total"]
    together = tiny_float.generate(prompts, GREEDY8)
    steps = idle_stats(tiny_float)["steps_total"] - steps0
    assert [o.outputs[0].token_ids for o in together] == alone
    # One call hands the four over together: 348 prompt tokens fit one 512-token step, which also
    # gives each its first token; then they decode side by side, one step per token (run one
    # after another they would take 4 x 8).
    assert steps == 8, steps


def test_n_outputs_use_seed_plus_index(tiny_float):
    p = [0, 11, 659, 763]
    sp = deepinfer.SamplingParams(n=3, temperature=1.0, seed=1234, max_tokens=12, ignore_eos=True)
    out = tiny_float.generate(p, sp)[0]
    assert [c.index for c in out.outputs] == [0, 1, 2]
    for j, c in enumerate(out.outputs):
        single = tiny_float.generate(p, deepinfer.SamplingParams(temperature=1.0, seed=1234 + j, max_tokens=12,
                                                                 ignore_eos=True))[0]
        assert c.token_ids == single.outputs[0].token_ids
    assert len({tuple(c.token_ids) for c in out.outputs}) > 1  # different seeds, different samples


def test_per_prompt_sampling_params(tiny_float):
    outs = tiny_float.generate([[0, 5], [0, 6]], [deepinfer.SamplingParams(temperature=0, max_tokens=2, ignore_eos=True),
                                                  deepinfer.SamplingParams(temperature=0, max_tokens=5, ignore_eos=True)])
    assert [len(o.outputs[0].token_ids) for o in outs] == [2, 5]
    with pytest.raises(ValueError, match="2 sampling params for 3 prompts"):
        tiny_float.generate([[0], [0], [0]], [deepinfer.SamplingParams()] * 2)


def test_logprobs_shape(tiny_float):
    sp = deepinfer.SamplingParams(temperature=0, max_tokens=4, logprobs=5, ignore_eos=True)
    c = tiny_float.generate([0, 7, 9], sp)[0].outputs[0]
    assert len(c.logprobs) == 4
    total = 0.0
    for token, entry in zip(c.token_ids, c.logprobs):
        first_id, first = next(iter(entry.items()))
        assert first_id == token and first.rank == 1  # greedy: the sampled token is the best
        assert len(entry) == 5 and [lp.rank for lp in entry.values()] == [1, 2, 3, 4, 5]
        values = [lp.logprob for lp in entry.values()]
        assert values == sorted(values, reverse=True) and values[0] <= 0.0
        assert first.decoded_token == tiny_float.tokenizer.decode([token])
        total += first.logprob
    assert c.cumulative_logprob == pytest.approx(total, abs=1e-5)
    assert tiny_float.generate([0, 7, 9], GREEDY8)[0].outputs[0].logprobs is None


def test_stop_string_cuts_text(default_llm):
    prompt = "Once upon a time"
    full = default_llm.generate(prompt, deepinfer.SamplingParams(temperature=0, max_tokens=24, ignore_eos=True))[0]
    c = full.outputs[0]
    tok = default_llm.tokenizer
    # A stop string: the text of one generated token in the middle (plain, whole characters).
    pieces = [(k, tok.decode([t])) for k, t in enumerate(c.token_ids)]
    k, stop = next((k, s) for k, s in pieces[3:] if s.strip() and "\ufffd" not in s and not tok.is_special(c.token_ids[k]))
    cut = c.text.index(stop)
    out = default_llm.generate(prompt, deepinfer.SamplingParams(temperature=0, max_tokens=24, ignore_eos=True,
                                                                stop=[stop]))[0].outputs[0]
    assert out.text == c.text[:cut]
    assert out.finish_reason == "stop" and out.stop_reason == stop
    assert len(out.token_ids) <= k + 1


def test_stop_token_ids(tiny_float):
    full = tiny_float.generate([0, 3, 4], GREEDY8)[0].outputs[0].token_ids
    stop_at = full[3]
    first = full.index(stop_at)
    out = tiny_float.generate([0, 3, 4], deepinfer.SamplingParams(temperature=0, max_tokens=8, ignore_eos=True,
                                                                  stop_token_ids=[stop_at]))[0].outputs[0]
    assert out.token_ids == full[:first + 1]  # the stop token is counted, as in vLLM
    assert out.finish_reason == "stop" and out.stop_reason == stop_at


def test_max_tokens_zero_scores_the_prompt(tiny_float):
    out = tiny_float.generate([0, 3, 4, 5], deepinfer.SamplingParams(max_tokens=0, prompt_logprobs=0))[0]
    assert out.outputs[0].token_ids == [] and out.outputs[0].text == ""
    assert out.prompt_logprobs[0] is None and len(out.prompt_logprobs) == 4
    assert [next(iter(e)) for e in out.prompt_logprobs[1:]] == [3, 4, 5]


def test_speculative_decoding_keeps_greedy_tokens(tiny_dir, tiny_sequences):
    """tiny-v4-c ships an MTP module: with its drafts (up to 3 per step) verified, greedy output
    is token for token that of plain decoding."""
    plain = deepinfer.LLM(tiny_dir, numerics="float", threads=2, kv_memory="64M", speculative="off")
    spec = deepinfer.LLM(tiny_dir, numerics="float", threads=2, kv_memory="64M", speculative="mtp",
                         num_draft_tokens=3)
    params = deepinfer.SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    prompts = [tiny_sequences[s] for s in ("seq7", "seq40")]
    want = [o.outputs[0].token_ids for o in plain.generate(prompts, params)]
    got = [o.outputs[0].token_ids for o in spec.generate(prompts, params)]
    assert got == want
    assert idle_stats(plain)["spec_draft_tokens"] == 0
    assert idle_stats(spec)["spec_verify_steps"] > 0
