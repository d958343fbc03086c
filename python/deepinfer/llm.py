"""deepinfer.LLM: load a checkpoint once, then generate / chat / stream through the engine."""
from __future__ import annotations

import collections
import json
import operator
import os
import re
import secrets
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from . import _core
from ._core import EngineError
from .outputs import (CompletionOutput, Logprob, LogprobDict, RequestOutput, StreamDelta, ToolCall,
                      ToolCallDelta)
from .params import SamplingParams, _int_list
from .text import Tokenizer, default_model_dir

# Seconds one poll of the engine waits with the GIL released; between polls Python delivers
# signals (Ctrl-C cancels the requests).
_POLL_S = 0.1

PromptType = Union[str, Sequence[int], Mapping[str, Any]]
Conversation = Sequence[Mapping[str, Any]]


def _parse_bytes(v: Union[int, str]) -> int:
    """4G, 512M, 64K or plain bytes (the CLI's --kv-memory)."""
    if isinstance(v, int):
        n = v
    else:
        m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", str(v), re.IGNORECASE)
        if not m:
            raise ValueError(f"kv_memory must be bytes or a size like '4G' or '512M', got {v!r}")
        n = int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2).upper()]
    if n <= 0:
        raise ValueError(f"kv_memory must be positive, got {v!r}")
    return n


class _Slot:
    """One request of a call: prompt index, output index and what has arrived so far."""

    def __init__(self, prompt_index: int, output_index: int, want_logprobs: bool):
        self.prompt_index = prompt_index
        self.output_index = output_index
        self.text: List[str] = []
        self.token_ids: List[int] = []
        self.logprobs: Optional[List[LogprobDict]] = [] if want_logprobs else None
        self.cumulative = 0.0
        self.prompt_logprobs: List[LogprobDict] = []
        self.last: Optional[Any] = None  # the final update
        self.any_tool_call = False


class LLM:
    """A DeepSeek-V4 checkpoint loaded into the engine.

    model_dir: a checkpoint directory (config.json + safetensors, tokenizer.json for text);
    None is the embedded default (a small model trained on the KJV Bible). numerics: 'reference' (the official
    code's quantisation points) or 'float'. threads: compute threads (0 = all cores).
    kv_memory: the KV cache budget, bytes or '4G' / '512M' (None = 4G). speculative: 'dspark'
    (the checkpoint's DSpark stages: V4.1, the V4 refreshes that have them), 'mtp' (V4's MTP
    module), 'auto' (DSpark if the checkpoint has it, else MTP if it has a module and is not
    V4.1, else off) or 'off' (EngineOptions::speculative in include/deepinfer/engine.h);
    num_draft_tokens: the most drafts per step (0 = the drafter's own). The other options are
    the server's (deepinfer serve --help)."""

    def __init__(self, model_dir: Optional[Union[str, os.PathLike]] = None, *, numerics: str = "reference",
                 threads: int = 0, kv_memory: Union[None, int, str] = None, max_model_len: Optional[int] = None,
                 kernels: str = "cpu", max_batch_tokens: int = 512, max_running: int = 32,
                 prefix_cache_entries: int = 8, verify_weights: bool = False, speculative: str = "auto",
                 num_draft_tokens: int = 0):
        if model_dir is None:
            model_dir = default_model_dir()
            if not os.path.isfile(os.path.join(model_dir, "config.json")):
                raise EngineError(f"the embedded default checkpoint {model_dir} is missing (./setup.sh writes it); "
                                  "pass model_dir")
        if operator.index(threads) < 0:
            raise ValueError(f"threads must be >= 0 (0 = all cores), got {threads}")
        self._engine = _core.Engine(
            os.fspath(model_dir), numerics, threads, kernels, 0 if kv_memory is None else _parse_bytes(kv_memory),
            0 if max_model_len is None else operator.index(max_model_len), max_batch_tokens, max_running,
            prefix_cache_entries, verify_weights, speculative, operator.index(num_draft_tokens))
        core_tok = self._engine.tokenizer
        self.tokenizer: Optional[Tokenizer] = None
        if core_tok is not None:
            self.tokenizer = Tokenizer._wrap(core_tok, self._engine.bos_token_id, self._engine.eos_token_id)

    # ----- what the engine says -----

    @property
    def model_dir(self) -> str:
        return self._engine.model_dir

    @property
    def max_model_len(self) -> int:
        return self._engine.max_model_len

    @property
    def vocab_size(self) -> int:
        return self._engine.vocab_size

    @property
    def chat_family(self) -> Optional[str]:
        """The checkpoint's prompt format ('v4', 'v4_0731', 'v41'), None if it has none."""
        return self._engine.chat_family

    def get_tokenizer(self) -> Optional[Tokenizer]:
        return self.tokenizer

    def stats(self) -> Dict[str, int]:
        """The engine's counters (the server's /metrics): requests running / waiting /
        finished by reason, tokens, KV blocks, prefix-cache hits, steps, speculative drafts
        (spec_draft_tokens drafted, spec_accepted_tokens accepted, spec_verify_steps)."""
        return self._engine.stats()

    # ----- generate -----

    def generate(self, prompts: Union[PromptType, Sequence[PromptType]],
                 sampling_params: Union[None, SamplingParams, Sequence[SamplingParams]] = None, *,
                 stream: bool = False) -> Union[List[RequestOutput], "StreamIterator"]:
        """Completes each prompt: a string (BOS + the tokenizer), a list of token ids, a
        {"prompt": ...} / {"prompt_token_ids": ...} dict, or a list of these. All prompts go
        to the engine at once, so they are batched. Returns one RequestOutput per prompt, or
        with stream=True an iterator of StreamDelta (see generate_stream)."""
        prompt_list, texts = self._prompts(prompts)
        params = self._params(sampling_params, len(prompt_list))
        if stream:
            return self._stream(prompt_list, params, None)
        return self._collect(prompt_list, texts, params, None)

    def generate_stream(self, prompts: Union[PromptType, Sequence[PromptType]],
                        sampling_params: Union[None, SamplingParams, Sequence[SamplingParams]] = None
                        ) -> "StreamIterator":
        """generate() as it happens: an iterator of StreamDelta (text and token ids since the
        previous delta of that request). Closing or dropping the iterator cancels every
        request still running."""
        return self.generate(prompts, sampling_params, stream=True)

    # ----- chat -----

    def chat(self, messages: Union[Conversation, Sequence[Conversation]],
             sampling_params: Union[None, SamplingParams, Sequence[SamplingParams]] = None, *,
             tools: Optional[Sequence[Mapping[str, Any]]] = None, thinking: Optional[bool] = None,
             reasoning_effort: Union[None, str, int] = None,
             chat_template_kwargs: Optional[Mapping[str, Any]] = None, stream: bool = False
             ) -> Union[List[RequestOutput], "StreamIterator"]:
        """Replies to a conversation (a list of OpenAI-style messages) or to each of a list of
        conversations, rendered with the checkpoint's DeepSeek encoder. The arguments mean what
        the same fields of a /v1/chat/completions request mean to the server, translated by the
        same code: tools: an OpenAI tool list (rendered into the system prompt). thinking:
        thinking mode (the reply starts with reasoning); None: on when a reasoning_effort other
        than 'none' is given. reasoning_effort: OpenAI's names (minimal, low, medium, high,
        xhigh; 'none' turns thinking off) mapped onto the family's levels, or what the encoder
        takes (v4: 'high' | 'max'; v4_0731: 'low' | 'high' | 'max'; v41: 1..100 too); the
        encoder refuses the rest (ValueError). chat_template_kwargs: as the server takes them
        (thinking, enable_thinking, thinking_mode, reasoning_effort, drop_thinking). Each
        output carries .content, .reasoning_content and .tool_calls from the checkpoint's
        output parser; with stream=True, an iterator of StreamDelta with those fields as deltas."""
        conversations = self._conversations(messages)
        request: Dict[str, Any] = {}
        if tools is not None:
            request["tools"] = list(tools)
        if thinking is not None:
            request["thinking"] = thinking
        if reasoning_effort is not None:
            request["reasoning_effort"] = reasoning_effort
        if chat_template_kwargs is not None:
            request["chat_template_kwargs"] = dict(chat_template_kwargs)
        prompt_list, texts, modes = [], [], set()
        for conv in conversations:
            text, ids, on = self._engine.render_chat(json.dumps({"messages": [dict(m) for m in conv], **request}))
            prompt_list.append(ids)
            texts.append(text)
            modes.add(on)
        (chat_thinking,) = modes  # the same request fields for every conversation: one mode
        params = self._params(sampling_params, len(prompt_list))
        if stream:
            return self._stream(prompt_list, params, chat_thinking)
        return self._collect(prompt_list, texts, params, chat_thinking)

    def chat_stream(self, messages: Union[Conversation, Sequence[Conversation]],
                    sampling_params: Union[None, SamplingParams, Sequence[SamplingParams]] = None, **kwargs: Any
                    ) -> "StreamIterator":
        return self.chat(messages, sampling_params, stream=True, **kwargs)

    # ----- argument conversion -----

    def _text_ids(self, text: str) -> List[int]:
        if self.tokenizer is None:
            raise ValueError("this checkpoint has no tokenizer.json: give prompts as token ids")
        return self.tokenizer.encode(text, add_special_tokens=True)

    def _one_prompt(self, p: Any) -> Tuple[List[int], Optional[str]]:
        if isinstance(p, str):
            return self._text_ids(p), p
        if isinstance(p, Mapping):
            if "prompt_token_ids" in p:
                return _int_list(p["prompt_token_ids"], "prompt_token_ids"), p.get("prompt")
            if "prompt" in p and isinstance(p["prompt"], str):
                return self._text_ids(p["prompt"]), p["prompt"]
            raise TypeError("a prompt dict needs 'prompt' (text) or 'prompt_token_ids'")
        return _int_list(p, "a token-id prompt"), None

    def _prompts(self, prompts: Any) -> Tuple[List[List[int]], List[Optional[str]]]:
        # One prompt (text, dict, or a flat list of ids) or a list of prompts.
        if isinstance(prompts, (str, Mapping)):
            items = [prompts]
        else:
            items = list(prompts)
            if items and all(hasattr(x, "__index__") and not isinstance(x, (str, list, tuple)) for x in items):
                items = [items]  # one prompt of token ids
        ids, texts = [], []
        for p in items:
            i, t = self._one_prompt(p)
            if not i:
                raise ValueError("a prompt must have at least one token")
            ids.append(i)
            texts.append(t)
        return ids, texts

    @staticmethod
    def _params(sp: Any, n_prompts: int) -> List[SamplingParams]:
        if sp is None:
            return [SamplingParams()] * n_prompts
        if isinstance(sp, SamplingParams):
            return [sp] * n_prompts
        sp = list(sp)
        if len(sp) != n_prompts:
            raise ValueError(f"{len(sp)} sampling params for {n_prompts} prompts")
        if not all(isinstance(p, SamplingParams) for p in sp):
            raise TypeError("sampling_params must be SamplingParams or a list of them")
        return sp

    @staticmethod
    def _conversations(messages: Any) -> List[Conversation]:
        messages = list(messages)
        if not messages:
            raise ValueError("messages must not be empty")
        if all(isinstance(m, Mapping) for m in messages):
            return [messages]
        if all(isinstance(c, (list, tuple)) for c in messages):
            return [list(c) for c in messages]
        raise TypeError("messages must be a list of message dicts or a list of such lists")

    # ----- running -----

    def _submit(self, prompts: List[List[int]], params: List[SamplingParams], chat_thinking: Optional[bool]
                ) -> Tuple["_core.Batch", List[_Slot]]:
        requests, slots = [], []
        for i, (ids, sp) in enumerate(zip(prompts, params)):
            for j in range(sp._outputs()):
                r = _core.Request()
                r.prompt = ids
                r.params = sp._to_core(j)
                r.skip_special_tokens = bool(sp.skip_special_tokens)
                requests.append(r)
                slots.append(_Slot(i, j, sp.logprobs is not None))
        return self._engine.submit(requests, chat_thinking), slots

    def _logprob_dict(self, t: Any) -> LogprobDict:
        piece = self.tokenizer._piece if self.tokenizer is not None else (lambda _id: None)
        rank = next((r for r, (tid, _) in enumerate(t.top, 1) if tid == t.token), None)
        d: LogprobDict = {t.token: Logprob(t.logprob, rank, piece(t.token))}
        for r, (tid, lp) in enumerate(t.top, 1):
            if tid != t.token:
                d[tid] = Logprob(lp, r, piece(tid))
        return d

    def _absorb(self, slot: _Slot, u: Any) -> None:
        slot.token_ids.extend(u.token_ids)
        slot.text.append(u.text)
        if slot.logprobs is not None:
            for t in u.logprobs:
                slot.logprobs.append(self._logprob_dict(t))
                slot.cumulative += t.logprob
        for t in u.prompt_logprobs:
            slot.prompt_logprobs.append(self._logprob_dict(t))
        if u.finished:
            slot.last = u
            if u.finish_reason == "error":
                raise EngineError(u.error)

    def _collect(self, prompts: List[List[int]], texts: List[Optional[str]], params: List[SamplingParams],
                 chat_thinking: Optional[bool]) -> List[RequestOutput]:
        batch, slots = self._submit(prompts, params, chat_thinking)
        try:
            while not batch.done:
                for u in batch.poll(_POLL_S):
                    self._absorb(slots[u.index], u)
        finally:
            batch.cancel()  # a no-op for finished requests; stops the rest on an error / Ctrl-C
        ids = batch.request_ids
        results = []
        for i, prompt in enumerate(prompts):
            mine = [k for k, s in enumerate(slots) if s.prompt_index == i]
            outputs = [self._completion(slots[k], batch, k, chat_thinking is not None) for k in mine]
            first = slots[mine[0]]
            plp = [None] + first.prompt_logprobs if params[i].prompt_logprobs is not None else None
            results.append(RequestOutput(str(ids[mine[0]]), texts[i], prompts[i], plp, outputs, True,
                                         first.last.cached_tokens))
        return results

    def _completion(self, s: _Slot, batch: "_core.Batch", k: int, is_chat: bool) -> CompletionOutput:
        u = s.last
        out = CompletionOutput(s.output_index, "".join(s.text), s.token_ids,
                               s.cumulative if s.logprobs is not None else None, s.logprobs,
                               u.finish_reason or None, _stop_reason(u))
        if is_chat:
            content, reasoning, calls, errors = batch.parsed(k)
            out.content, out.reasoning_content = content, reasoning
            out.tool_calls = [ToolCall(n, a, "call_" + secrets.token_hex(12)) for n, a in calls]
            out.parse_errors = list(errors)
            if out.tool_calls and out.finish_reason == "stop":
                out.finish_reason = "tool_calls"
        return out

    def _stream(self, prompts: List[List[int]], params: List[SamplingParams], chat_thinking: Optional[bool]
                ) -> "StreamIterator":
        batch, slots = self._submit(prompts, params, chat_thinking)
        return StreamIterator(self, batch, slots, chat_thinking is not None)


def _stop_reason(u: Any) -> Union[int, str, None]:
    if u.stop_string:
        return u.stop_string
    # EOS ends with stop_reason None in vLLM; a stop_token_ids hit names the token.
    return None if u.stop_token < 0 or u.finish_reason != "stop" else u.stop_token


class StreamIterator:
    """Deltas of a streaming generate / chat, in the order the engine produced them.
    close() (or dropping the iterator, or leaving a `with` block) cancels the requests that
    are still running; an engine error raises EngineError from next()."""

    def __init__(self, llm: LLM, batch: "_core.Batch", slots: List[_Slot], is_chat: bool):
        self._llm = llm
        self._batch: Optional["_core.Batch"] = batch
        self._slots = slots
        self._is_chat = is_chat
        self._pending: "collections.deque[StreamDelta]" = collections.deque()
        self._eos = llm._engine.eos_token_id

    def __iter__(self) -> "StreamIterator":
        return self

    def __next__(self) -> StreamDelta:
        while not self._pending:
            if self._batch is None or self._batch.done:
                self._batch = None
                raise StopIteration
            for u in self._batch.poll(_POLL_S):
                self._pending.append(self._delta(u))
        return self._pending.popleft()

    def _delta(self, u: Any) -> StreamDelta:
        slot = self._slots[u.index]
        try:
            self._llm._absorb(slot, u)
        except EngineError:
            self.close()
            raise
        n_new = len(u.logprobs)
        logprobs = (slot.logprobs[len(slot.logprobs) - n_new:] if n_new else []) if slot.logprobs is not None else None
        d = StreamDelta(slot.prompt_index, slot.output_index, u.text, list(u.token_ids), logprobs, u.finished,
                        u.finish_reason or None, _stop_reason(u) if u.finished else None)
        if self._is_chat:
            for kind, text, index in u.events:
                if kind == "content":
                    d.content += text
                elif kind == "reasoning":
                    d.reasoning_content += text
                elif kind == "tool_call_begin":
                    slot.any_tool_call = True
                    d.tool_calls.append(ToolCallDelta(index, text, ""))
                elif kind == "tool_call_arguments":
                    d.tool_calls.append(ToolCallDelta(index, None, text))
                elif kind == "error":
                    d.parse_errors.append(text)
            if u.finished and slot.any_tool_call and d.finish_reason == "stop":
                d.finish_reason = "tool_calls"
        return d

    def close(self) -> None:
        if self._batch is not None:
            self._batch.cancel()
            self._batch = None

    def __enter__(self) -> "StreamIterator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()
