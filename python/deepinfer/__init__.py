"""DeepInfer from Python: the C++ DeepSeek-V4 engine behind a vLLM-shaped API.

    import deepinfer
    llm = deepinfer.LLM()                      # the embedded default (a small model trained on the KJV Bible)
    out = llm.generate(["Hello"], deepinfer.SamplingParams(temperature=0, max_tokens=8))
    print(out[0].outputs[0].text)

Everything runs in the engine of the `deepinfer` CLI and server (one engine thread, continuous
batching); this package only converts arguments and results.
"""
from ._core import EngineError
from .llm import LLM, StreamIterator
from .outputs import (CompletionOutput, Logprob, ParsedOutput, RequestOutput, StreamDelta, ToolCall,
                      ToolCallDelta)
from .params import SamplingParams
from .text import Tokenizer, default_model_dir, parse_output, render

__all__ = [
    "LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "Logprob", "StreamDelta", "StreamIterator",
    "ToolCall", "ToolCallDelta", "ParsedOutput", "Tokenizer", "render", "parse_output", "default_model_dir",
    "EngineError",
]
