"""SamplingParams: vLLM's names and defaults; the engine checks the ranges."""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Union

from . import _core


def _int_list(values, what: str) -> List[int]:
    try:
        return [operator.index(v) for v in values]
    except TypeError:
        raise TypeError(f"{what} must be a list of ints") from None


# The most outputs one prompt may ask for: the server's cap (kMaxSamplesPerRequest in
# src/server/params.h), so that a script cannot queue what an HTTP client could not.
MAX_N = 128


@dataclass
class SamplingParams:
    """How each output is sampled (field meanings as in vLLM and the OpenAI API).

    max_tokens=None runs until EOS or the context is full; temperature=0 is greedy (ties to
    the lowest id). logprobs=N returns the sampled token's logprob and the N most likely
    alternatives per token (N <= 20); prompt_logprobs=N does the same for the prompt tokens.
    n > 1 samples n outputs per prompt (with seed s, output j uses seed s + j).
    """

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    seed: Optional[int] = None
    stop: Union[None, str, Sequence[str]] = None
    stop_token_ids: Optional[Sequence[int]] = None
    ignore_eos: bool = False
    max_tokens: Optional[int] = 16
    logprobs: Optional[int] = None
    prompt_logprobs: Optional[int] = None
    skip_special_tokens: bool = True
    logit_bias: Optional[Dict[int, float]] = None

    def _stops(self) -> List[str]:
        if self.stop is None:
            return []
        if isinstance(self.stop, str):
            return [self.stop]
        # A bad value is a ValueError that names the field, whatever its shape (stop=5 would
        # otherwise surface as list()'s "'int' object is not iterable").
        try:
            stops = list(self.stop)
        except TypeError:
            stops = None
        if stops is None or not all(isinstance(s, str) for s in stops):
            raise ValueError(f"stop must be a string or a list of strings, got {self.stop!r}")
        return stops

    def _outputs(self) -> int:
        """n, checked (each output is one engine request)."""
        if isinstance(self.n, bool) or not isinstance(self.n, int) or not 1 <= self.n <= MAX_N:
            raise ValueError(f"n must be an int between 1 and {MAX_N}, got {self.n!r}")
        return self.n

    def _to_core(self, choice: int = 0) -> "_core.SamplingParams":
        """The engine's SamplingParams for output `choice` of a prompt."""
        p = _core.SamplingParams()
        if self.max_tokens is None:
            p.max_tokens = -1
        elif operator.index(self.max_tokens) < 0:
            raise ValueError(f"max_tokens must be at least 0, got {self.max_tokens}")
        else:
            p.max_tokens = operator.index(self.max_tokens)
        p.temperature = float(self.temperature)
        p.top_p = float(self.top_p)
        p.top_k = operator.index(self.top_k)
        p.min_p = float(self.min_p)
        p.presence_penalty = float(self.presence_penalty)
        p.frequency_penalty = float(self.frequency_penalty)
        p.repetition_penalty = float(self.repetition_penalty)
        if self.seed is not None:
            p.seed = (operator.index(self.seed) + choice) % (1 << 64)
        p.stop = self._stops()
        p.stop_token_ids = _int_list(self.stop_token_ids or [], "stop_token_ids")
        p.ignore_eos = bool(self.ignore_eos)
        p.logprobs = -1 if self.logprobs is None else operator.index(self.logprobs)
        p.prompt_logprobs = -1 if self.prompt_logprobs is None else operator.index(self.prompt_logprobs)
        p.logit_bias = [(operator.index(k), float(v)) for k, v in (self.logit_bias or {}).items()]
        return p
