"""Engine errors are Python exceptions carrying the engine's message."""
import pytest

import deepinfer
from conftest import idle_stats


def test_bad_model_dir(tmp_path):
    with pytest.raises(deepinfer.EngineError, match=str(tmp_path / "missing")):
        deepinfer.LLM(tmp_path / "missing")
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(deepinfer.EngineError, match="config.json"):
        deepinfer.LLM(tmp_path)
    assert issubclass(deepinfer.EngineError, RuntimeError)


def test_bad_engine_options(tiny_dir):
    with pytest.raises(ValueError, match="'reference' or 'float'"):
        deepinfer.LLM(tiny_dir, numerics="double")
    with pytest.raises(ValueError, match="kernel backend"):
        deepinfer.LLM(tiny_dir, kernels="gpu")
    with pytest.raises(deepinfer.EngineError, match="KV memory too small"):
        deepinfer.LLM(tiny_dir, kv_memory=4096)
    with pytest.raises(ValueError, match="kv_memory"):
        deepinfer.LLM(tiny_dir, kv_memory="lots")
    with pytest.raises(deepinfer.EngineError, match="--speculative must be auto, mtp, dspark or off"):
        deepinfer.LLM(tiny_dir, speculative="eagle")
    with pytest.raises(deepinfer.EngineError, match="this checkpoint has no DSpark stages"):
        deepinfer.LLM(tiny_dir, speculative="dspark")
    with pytest.raises(deepinfer.EngineError, match="--num-draft-tokens must be between 1 and"):
        deepinfer.LLM(tiny_dir, speculative="mtp", num_draft_tokens=9)


@pytest.mark.parametrize("params,message", [
    (dict(top_p=0.0), r"top_p must be in \(0, 1\]"),
    (dict(temperature=-1.0), "temperature must be"),
    (dict(logprobs=21), "logprobs must be between 0 and 20"),
    (dict(min_p=2.0), r"min_p must be in \[0, 1\]"),
    (dict(max_tokens=-3), "max_tokens must be at least 0"),
    (dict(n=0), "n must be"),
    (dict(n=129), "n must be an int between 1 and 128"),
    (dict(stop=5), "stop must be a string or a list of strings, got 5"),
    (dict(stop=["a", 5]), "stop must be a string or a list of strings"),
    (dict(stop_token_ids=[10 ** 6]), "outside the vocabulary"),
])
def test_bad_sampling_params(tiny_float, params, message):
    running = tiny_float.stats()["requests_running"]
    with pytest.raises(ValueError, match=message):
        tiny_float.generate([[0, 1], [0, 2]], deepinfer.SamplingParams(**params))
    assert tiny_float.stats()["requests_running"] == running  # nothing was submitted


def test_bad_prompts(tiny_float):
    with pytest.raises(ValueError, match="1024"):  # the id and the vocabulary size
        tiny_float.generate([0, 5000])
    with pytest.raises(ValueError):
        tiny_float.generate([[0] * (tiny_float.max_model_len + 1)])
    with pytest.raises(ValueError, match="at least one token"):
        tiny_float.generate([[]])
    with pytest.raises(TypeError):
        tiny_float.generate([[0, "a"]])


def corrupt_copy(src, dst, tensor, flat, code):
    """`src` copied to `dst` with byte `code` written over element `flat` of `tensor`."""
    import json
    import shutil
    import struct
    shutil.copytree(src, dst)
    shard = dst / "model.safetensors"
    blob = bytearray(shard.read_bytes())
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    blob[8 + n + header[tensor]["data_offsets"][0] + flat] = code
    shard.write_bytes(bytes(blob))
    return dst


def test_failed_request_raises_with_the_engines_message(tiny_dir, tmp_path):
    # A NaN e4m3 code in a shared expert (as tests/model/test_cli.cpp): every logits row is NaN.
    bad = corrupt_copy(tiny_dir, tmp_path / "nan", "layers.0.ffn.shared_experts.w2.weight", 3 * 128 + 5, 0x7F)
    llm = deepinfer.LLM(bad, numerics="float", threads=1, kv_memory="16M")
    with pytest.raises(deepinfer.EngineError, match="non-finite"):
        llm.generate([[0, 17, 29, 4], [0, 5]], deepinfer.SamplingParams(max_tokens=3))
    with pytest.raises(deepinfer.EngineError, match="non-finite"):
        for _ in llm.generate_stream([0, 17], deepinfer.SamplingParams(max_tokens=3)):
            pass
    # The stream's request and at least the first of the two (the second may be cancelled
    # before its step, when the engine took the two submissions in separate steps).
    assert 2 <= idle_stats(llm)["requests_failed_nonfinite"] <= 3
    with pytest.raises(deepinfer.EngineError, match="layers.0.ffn.shared_experts.w2.weight"):
        deepinfer.LLM(bad, verify_weights=True, kv_memory="16M")
