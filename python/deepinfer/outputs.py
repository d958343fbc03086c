"""Result types, shaped like vLLM's RequestOutput / CompletionOutput / Logprob."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union

# vLLM: per generated token, {token_id: Logprob}, the sampled token first.
LogprobDict = Dict[int, "Logprob"]


@dataclass
class Logprob:
    logprob: float  # -inf for a token masked by top_k / top_p / min_p
    rank: Optional[int] = None  # 1 = most likely; None when outside the returned alternatives
    decoded_token: Optional[str] = None


@dataclass
class ToolCall:
    """A completed tool call parsed from a chat reply (DSML in the model's output)."""

    name: str
    arguments: str  # a JSON object, as text
    id: str = ""

    def parsed_arguments(self) -> Any:
        return json.loads(self.arguments)

    def to_dict(self) -> Dict[str, Any]:
        """The OpenAI form, to put into the assistant message of the next turn."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: List[int]
    cumulative_logprob: Optional[float]
    logprobs: Optional[List[LogprobDict]]
    finish_reason: Optional[str]  # "stop" | "length" | "abort" ("tool_calls" for chat replies with calls)
    stop_reason: Union[int, str, None] = None  # the stop string or stop token id; None for EOS / length
    # chat() replies only, split by the checkpoint's output parser:
    content: Optional[str] = None
    reasoning_content: Optional[str] = None
    tool_calls: List[ToolCall] = field(default_factory=list)
    parse_errors: List[str] = field(default_factory=list)

    def finished(self) -> bool:
        return self.finish_reason is not None

    def as_message(self) -> Dict[str, Any]:
        """A chat reply as the assistant message of the conversation's next turn."""
        m: Dict[str, Any] = {"role": "assistant", "content": self.content or ""}
        if self.reasoning_content:
            m["reasoning_content"] = self.reasoning_content
        if self.tool_calls:
            m["tool_calls"] = [c.to_dict() for c in self.tool_calls]
        return m


@dataclass
class RequestOutput:
    request_id: str
    prompt: Optional[str]  # None for token-id prompts
    prompt_token_ids: List[int]
    prompt_logprobs: Optional[List[Optional[LogprobDict]]]  # first entry None, as in vLLM
    outputs: List[CompletionOutput]
    finished: bool = True
    num_cached_tokens: int = 0  # prompt tokens served from the prefix cache


@dataclass
class ToolCallDelta:
    index: int  # which call of the reply
    name: Optional[str] = None  # set on the call's first delta
    arguments: str = ""  # the next piece of the arguments' JSON text


@dataclass
class StreamDelta:
    """What one request produced since the previous delta of the stream."""

    index: int  # which prompt (or conversation) of the call
    output_index: int  # which of its n outputs
    text: str
    token_ids: List[int]
    logprobs: Optional[List[LogprobDict]] = None
    finished: bool = False
    finish_reason: Optional[str] = None
    stop_reason: Union[int, str, None] = None
    # chat streams only:
    content: str = ""
    reasoning_content: str = ""
    tool_calls: List[ToolCallDelta] = field(default_factory=list)
    parse_errors: List[str] = field(default_factory=list)


@dataclass
class ParsedOutput:
    """deepinfer.parse_output's result (the CLI's parse-output JSON)."""

    content: str
    reasoning_content: str
    tool_calls: List[ToolCall]
    errors: List[str]  # malformed or truncated DSML; the failed calls are left out
