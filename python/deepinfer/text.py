"""The text side: tokenizer, prompt rendering (deepinfer render), output parsing
(deepinfer parse-output). These need no model weights."""
from __future__ import annotations

import json
import os
from typing import Any, Iterable, List, Mapping, Optional, Sequence

from . import _core
from .outputs import ParsedOutput, ToolCall

_BOS = "<｜begin▁of▁sentence｜>"
_EOS = "<｜end▁of▁sentence｜>"


_PACKAGED_MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models", "default")


def default_model_dir() -> str:
    """The embedded default checkpoint (models-src/default: a small trained model with its own
    4,096-id byte-level BPE tokenizer): the copy installed with the package, so that it does
    not depend on the checkout it was built from; else models/default of that checkout."""
    if os.path.isfile(os.path.join(_PACKAGED_MODEL, "config.json")):
        return _PACKAGED_MODEL
    return _core.default_model_dir()


class Tokenizer:
    """Byte-level BPE from a tokenizer.json, the ids Hugging Face `tokenizers` gives."""

    def __init__(self, path: "str | os.PathLike[str]"):
        """`path`: a tokenizer.json file or a checkpoint directory holding one."""
        core = _core.Tokenizer.from_file(os.fspath(path))
        self._init(core, core.token_id(_BOS), core.token_id(_EOS))

    @classmethod
    def _wrap(cls, core: "_core.Tokenizer", bos_token_id: int, eos_token_id: int) -> "Tokenizer":
        t = cls.__new__(cls)
        t._init(core, bos_token_id, eos_token_id)
        return t

    def _init(self, core, bos, eos) -> None:
        self._core = core
        self.bos_token_id: Optional[int] = bos
        self.eos_token_id: Optional[int] = eos
        self._piece_cache: dict = {}

    @property
    def vocab_size(self) -> int:
        return self._core.vocab_size

    def __len__(self) -> int:
        return self._core.vocab_size

    def encode(self, text: str, add_special_tokens: bool = True, match_special_tokens: bool = True) -> List[int]:
        """Ids of `text`. add_special_tokens puts BOS in front (unless the text already starts
        with it), as the server's /tokenize does; match_special_tokens=False encodes special-token
        strings as plain text."""
        ids = self._core.encode(text, match_special_tokens)
        if add_special_tokens and self.bos_token_id is not None and (not ids or ids[0] != self.bos_token_id):
            ids.insert(0, self.bos_token_id)
        return ids

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """The text of `ids`; bytes that are not valid UTF-8 (a character split across the
        end) become U+FFFD, as tokenizers' decode does."""
        return self._core.decode(list(ids), skip_special_tokens).decode("utf-8", "replace")

    def decode_bytes(self, ids: Iterable[int], skip_special_tokens: bool = False) -> bytes:
        """The exact bytes of `ids` (deepinfer detokenize)."""
        return self._core.decode(list(ids), skip_special_tokens)

    def id_to_token(self, token_id: int) -> str:
        """The token as written in tokenizer.json ("" for an unknown id)."""
        return self._core.token_string(token_id)

    def token_to_id(self, token: str) -> Optional[int]:
        return self._core.token_id(token)

    def is_special(self, token_id: int) -> bool:
        return self._core.is_special(token_id)

    def _piece(self, token_id: int) -> str:
        """One token's text (for logprobs), cached."""
        s = self._piece_cache.get(token_id)
        if s is None:
            s = self._core.token_bytes(token_id).decode("utf-8", "replace")
            self._piece_cache[token_id] = s
        return s


def _family(family: Optional[str], model_dir: Optional[str]) -> str:
    if (family is None) == (model_dir is None):
        raise ValueError("give family ('v4', 'v4_0731', 'v41') or model_dir, exactly one")
    if family is not None:
        return _core.parse_family(family)
    return _core.detect_family(os.fspath(model_dir))[0]


def render(messages: Sequence[Mapping[str, Any]], tools: Optional[Sequence[Mapping[str, Any]]] = None, *,
           family: Optional[str] = None, model_dir: Optional[str] = None, thinking_mode: str = "chat",
           **options: Any) -> str:
    """The prompt DeepSeek's reference encoder builds (deepinfer render).

    messages: OpenAI-style dicts; tools: an OpenAI tool list, put on the first message (as the
    CLI does). family ('v4', 'v4_0731', 'v41') or model_dir (detected from the checkpoint).
    thinking_mode 'chat' | 'thinking'; further options are the encoder's keyword arguments:
    reasoning_effort, drop_thinking, add_default_bos_token, context. What the reference rejects
    raises ValueError with the encoder's message."""
    fam = _family(family, model_dir)
    opts = {"thinking_mode": thinking_mode, **options}
    tools_json = "" if tools is None else json.dumps(list(tools))
    return _core.render(fam, json.dumps(list(messages)), json.dumps(opts), tools_json)


def parse_output(text: str, *, family: Optional[str] = None, model_dir: Optional[str] = None,
                 thinking: bool = False) -> ParsedOutput:
    """A model's output split into reasoning, content and DSML tool calls (deepinfer
    parse-output). thinking: the prompt ended in <think> (the output starts in reasoning).
    Malformed or truncated DSML is listed in .errors and its calls are left out."""
    content, reasoning, calls, errors = _core.parse_output(_family(family, model_dir), text, thinking)
    return ParsedOutput(content, reasoning, [ToolCall(n, a) for n, a in calls], list(errors))
