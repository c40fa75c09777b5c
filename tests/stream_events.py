"""Generated model outputs of the three APIs, rendered into each SDK's own
stream event types, cut into random chunkings (hypothesis), and the SDK's own
accumulator as the oracle (used by test_adapter_streams.py and the
``streaming`` bench section's correctness check).

A drawn output is what a model sends: text, refusals, several tool calls,
thinking with a signature, redacted thinking, reasoning with a summary and
encrypted content. Each renderer turns one output and a list of cut points
into the events the API streams for it — validated into the SDK's pydantic
event types (``ChatCompletionChunk``, ``ResponseStreamEvent``,
``RawMessageStreamEvent``), or left as the dicts the wire carries — and each
``*_oracle`` feeds those events to the SDK's accumulator
(``ChatCompletionStreamState``, ``ResponseStreamState``,
``accumulate_event``) and returns its final message as a plain dict with
``None`` fields dropped.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st
from pydantic import TypeAdapter

Json = dict[str, Any]

_ALPHABET = st.characters(blacklist_categories=("Cs",), blacklist_characters="[")
#: Text a model streams: any non-surrogate character (no "[": no note imitation).
text = st.text(_ALPHABET, min_size=1, max_size=60)
names = st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=10)
json_args = st.dictionaries(
    names, st.none() | st.booleans() | st.integers(-1000, 1000) | text, max_size=3
)


def drop_none(value: Any) -> Any:
    """``value`` without ``None`` fields at any depth, but a tool's ``input``
    (its JSON arguments, not an SDK object's fields) kept as it is."""
    if isinstance(value, dict):
        return {k: v if k == "input" else drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [drop_none(v) for v in value]
    return value


def pieces(s: str, cuts: Sequence[int]) -> list[str]:
    """``s`` cut at ``cuts`` (positions, any order, out-of-range clipped):
    the non-empty pieces, in order."""
    points = sorted({min(max(c, 0), len(s)) for c in cuts} | {0, len(s)})
    return [s[a:b] for a, b in itertools.pairwise(points) if a < b]


cuts = st.lists(st.integers(0, 80), max_size=6)


# -- Chat Completions ----------------------------------------------------------


@st.composite
def chat_outputs(draw: st.DrawFn) -> Json:
    """An assistant message as Chat Completions streams it: text or a refusal
    (or neither), then zero to three function calls."""
    out: Json = {"role": "assistant"}
    what = draw(st.sampled_from(["text", "text", "refusal", "none"]))
    if what == "text":
        out["content"] = draw(text)
    elif what == "refusal":
        out["refusal"] = draw(text)
    n = draw(st.integers(0, 3))
    if what == "none" and n == 0:
        n = 1
    calls = []
    for i in range(n):
        calls.append(
            {
                "index": i,
                "id": f"call_{i + 1}",
                "type": "function",
                "function": {"name": draw(names), "arguments": json.dumps(draw(json_args))},
            }
        )
    if calls:
        out["tool_calls"] = calls
    return out


def chat_chunks(message: Json, cut: Sequence[int], *, objects: bool = True) -> list[Any]:
    """The chunks a Chat Completions stream sends for ``message``."""
    deltas: list[Json] = [
        {"role": "assistant", "content": "" if "refusal" not in message else None}
    ]
    for piece in pieces(message.get("content") or "", cut):
        deltas.append({"content": piece})
    for piece in pieces(message.get("refusal") or "", cut):
        deltas.append({"refusal": piece})
    for call in message.get("tool_calls", ()):
        fn = call["function"]
        first = {"index": call["index"], "id": call["id"], "type": "function"}
        deltas.append(
            {"tool_calls": [{**first, "function": {"name": fn["name"], "arguments": ""}}]}
        )
        for piece in pieces(fn["arguments"], cut):
            deltas.append(
                {"tool_calls": [{"index": call["index"], "function": {"arguments": piece}}]}
            )
    chunks: list[Json] = [_chunk(d, None) for d in deltas]
    chunks.append(_chunk({}, "tool_calls" if message.get("tool_calls") else "stop"))
    if objects:
        from openai.types.chat import ChatCompletionChunk

        return [ChatCompletionChunk.model_validate(c) for c in chunks]
    return chunks


def _chunk(delta: Json, finish: str | None) -> Json:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "test-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
    }


def chat_oracle(chunks: Sequence[Any]) -> Json:
    """``ChatCompletionStreamState``'s final ``choices[0].message``."""
    from openai.lib.streaming.chat import ChatCompletionStreamState
    from openai.types.chat import ChatCompletionChunk

    state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
    for c in chunks:
        state.handle_chunk(c if not isinstance(c, dict) else ChatCompletionChunk.model_validate(c))
    return drop_none(state.get_final_completion().choices[0].message.model_dump())  # type: ignore[no-any-return]


# -- Anthropic Messages ----------------------------------------------------------


@st.composite
def anthropic_outputs(draw: st.DrawFn) -> Json:
    """An assistant message as the Messages API streams it: maybe a thinking
    block (signed) or a redacted one, then text blocks and tool uses."""
    blocks: list[Json] = []
    lead = draw(st.sampled_from(["thinking", "redacted", "none"]))
    if lead == "thinking":
        blocks.append(
            {"type": "thinking", "thinking": draw(text), "signature": "sig-" + draw(names)}
        )
    elif lead == "redacted":
        blocks.append({"type": "redacted_thinking", "data": "opaque-" + draw(names)})
    for _ in range(draw(st.integers(0, 2))):
        blocks.append({"type": "text", "text": draw(text)})
    for n in range(draw(st.integers(0, 3))):
        blocks.append(
            {
                "type": "tool_use",
                "id": f"toolu_{n + 1}",
                "name": draw(names),
                "input": draw(json_args),
            }
        )
    if not blocks:
        blocks.append({"type": "text", "text": draw(text)})
    return {"role": "assistant", "content": blocks}


def anthropic_events(message: Json, cut: Sequence[int], *, objects: bool = True) -> list[Any]:
    """The events a Messages stream sends for ``message``."""
    events: list[Json] = [
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": "test-model",
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 3, "output_tokens": 1},
            },
        }
    ]
    for n, block in enumerate(message["content"]):
        kind = block["type"]
        if kind == "text":
            events.append(
                {
                    "type": "content_block_start",
                    "index": n,
                    "content_block": {"type": "text", "text": ""},
                }
            )
            for piece in pieces(block["text"], cut):
                events.append(_delta(n, {"type": "text_delta", "text": piece}))
        elif kind == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
            events.append({"type": "content_block_start", "index": n, "content_block": start})
            for piece in pieces(block["thinking"], cut):
                events.append(_delta(n, {"type": "thinking_delta", "thinking": piece}))
            events.append(_delta(n, {"type": "signature_delta", "signature": block["signature"]}))
        elif kind == "tool_use":
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            events.append({"type": "content_block_start", "index": n, "content_block": start})
            for piece in pieces(json.dumps(block["input"]), cut):
                events.append(_delta(n, {"type": "input_json_delta", "partial_json": piece}))
        else:
            events.append({"type": "content_block_start", "index": n, "content_block": block})
        events.append({"type": "content_block_stop", "index": n})
    stop = "tool_use" if any(b["type"] == "tool_use" for b in message["content"]) else "end_turn"
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": 9},
        }
    )
    events.append({"type": "message_stop"})
    if objects:
        from anthropic.types import RawMessageStreamEvent

        adapter: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)
        return [adapter.validate_python(e) for e in events]
    return events


def _delta(n: int, delta: Json) -> Json:
    return {"type": "content_block_delta", "index": n, "delta": delta}


def anthropic_oracle(events: Sequence[Any]) -> Json:
    """``accumulate_event``'s final message: its role and content blocks."""
    from anthropic.lib.streaming._messages import accumulate_event

    snapshot: Any = None
    bufs: dict[int, bytes] = {}
    for e in events:
        snapshot = accumulate_event(event=e, current_snapshot=snapshot, json_bufs=bufs)
    return drop_none({"role": snapshot.role, "content": [b.model_dump() for b in snapshot.content]})  # type: ignore[no-any-return]


# -- Responses -------------------------------------------------------------------


@st.composite
def responses_outputs(draw: st.DrawFn) -> list[Json]:
    """A response's output items: maybe a reasoning item (summary, maybe
    reasoning text, maybe encrypted content), then a message (output text or
    a refusal, maybe two parts) and/or function calls."""
    items: list[Json] = []
    if draw(st.booleans()):
        item: Json = {
            "id": "rs_1",
            "type": "reasoning",
            "summary": [
                {"type": "summary_text", "text": draw(text)} for _ in range(draw(st.integers(0, 2)))
            ],
        }
        if draw(st.booleans()):
            item["content"] = [{"type": "reasoning_text", "text": draw(text)}]
        if draw(st.booleans()):
            item["encrypted_content"] = "enc-" + draw(names)
        items.append(item)
    calls = draw(st.integers(0, 2))
    if draw(st.booleans()) or not calls:
        parts: list[Json] = []
        for _ in range(draw(st.integers(1, 2))):
            if draw(st.booleans()) or parts:
                parts.append({"type": "output_text", "text": draw(text), "annotations": []})
            else:
                parts.append({"type": "refusal", "refusal": draw(text)})
        items.append(
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": parts,
            }
        )
    for n in range(calls):
        items.append(
            {
                "id": f"fc_{n + 1}",
                "type": "function_call",
                "call_id": f"call_{n + 1}",
                "name": draw(names),
                "arguments": json.dumps(draw(json_args)),
                "status": "completed",
            }
        )
    return items


_RESPONSE = {
    "id": "resp_1",
    "object": "response",
    "created_at": 0,
    "model": "test-model",
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "tools": [],
}


def responses_events(
    items: Sequence[Json], cut: Sequence[int], *, objects: bool = True
) -> list[Any]:
    """The events a Responses stream sends for ``items``."""
    events: list[Json] = [
        {
            "type": "response.created",
            "response": {**_RESPONSE, "output": [], "status": "in_progress"},
        },
        {
            "type": "response.in_progress",
            "response": {**_RESPONSE, "output": [], "status": "in_progress"},
        },
    ]
    for n, item in enumerate(items):
        kind = item["type"]
        base = {"item_id": item["id"], "output_index": n}
        if kind == "message":
            added = {**item, "status": "in_progress", "content": []}
            events.append({"type": "response.output_item.added", "output_index": n, "item": added})
            for c, part in enumerate(item["content"]):
                field = "text" if part["type"] == "output_text" else "refusal"
                empty = {**part, field: ""}
                events.append(
                    {
                        "type": "response.content_part.added",
                        **base,
                        "content_index": c,
                        "part": empty,
                    }
                )
                kind_ = "response.output_text" if field == "text" else "response.refusal"
                extra = {"logprobs": []} if field == "text" else {}
                for piece in pieces(part[field], cut):
                    events.append(
                        {
                            "type": f"{kind_}.delta",
                            **base,
                            "content_index": c,
                            "delta": piece,
                            **extra,
                        }
                    )
                done = (
                    {"text": part["text"], "logprobs": []}
                    if field == "text"
                    else {"refusal": part["refusal"]}
                )
                events.append({"type": f"{kind_}.done", **base, "content_index": c, **done})
                events.append(
                    {"type": "response.content_part.done", **base, "content_index": c, "part": part}
                )
        elif kind == "reasoning":
            events.append(
                {
                    "type": "response.output_item.added",
                    "output_index": n,
                    "item": {"id": item["id"], "type": "reasoning", "summary": []},
                }
            )
            for s, part in enumerate(item["summary"]):
                empty = {"type": "summary_text", "text": ""}
                events.append(
                    {
                        "type": "response.reasoning_summary_part.added",
                        **base,
                        "summary_index": s,
                        "part": empty,
                    }
                )
                for piece in pieces(part["text"], cut):
                    events.append(
                        {
                            "type": "response.reasoning_summary_text.delta",
                            **base,
                            "summary_index": s,
                            "delta": piece,
                        }
                    )
                events.append(
                    {
                        "type": "response.reasoning_summary_text.done",
                        **base,
                        "summary_index": s,
                        "text": part["text"],
                    }
                )
                events.append(
                    {
                        "type": "response.reasoning_summary_part.done",
                        **base,
                        "summary_index": s,
                        "part": part,
                    }
                )
            for c, part in enumerate(item.get("content") or ()):
                empty = {"type": "reasoning_text", "text": ""}
                events.append(
                    {
                        "type": "response.content_part.added",
                        **base,
                        "content_index": c,
                        "part": empty,
                    }
                )
                for piece in pieces(part["text"], cut):
                    events.append(
                        {
                            "type": "response.reasoning_text.delta",
                            **base,
                            "content_index": c,
                            "delta": piece,
                        }
                    )
                events.append(
                    {
                        "type": "response.reasoning_text.done",
                        **base,
                        "content_index": c,
                        "text": part["text"],
                    }
                )
                events.append(
                    {"type": "response.content_part.done", **base, "content_index": c, "part": part}
                )
        elif kind == "function_call":
            added = {**item, "arguments": "", "status": "in_progress"}
            events.append({"type": "response.output_item.added", "output_index": n, "item": added})
            for piece in pieces(item["arguments"], cut):
                events.append(
                    {"type": "response.function_call_arguments.delta", **base, "delta": piece}
                )
            events.append(
                {
                    "type": "response.function_call_arguments.done",
                    **base,
                    "arguments": item["arguments"],
                    "name": item["name"],
                }
            )
        events.append({"type": "response.output_item.done", "output_index": n, "item": item})
    events.append(
        {
            "type": "response.completed",
            "response": {**_RESPONSE, "output": list(items), "status": "completed"},
        }
    )
    for seq, e in enumerate(events):
        e["sequence_number"] = seq
    if objects:
        from openai.types.responses import ResponseStreamEvent

        adapter: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
        return [adapter.validate_python(e) for e in events]
    return events


def responses_oracle(events: Sequence[Any]) -> list[Json]:
    """``ResponseStreamState``'s completed response's output items."""
    from openai import omit
    from openai.lib.streaming.responses._responses import ResponseStreamState
    from openai.types.responses import ResponseStreamEvent

    adapter: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=omit, text_format=omit)
    final: list[Json] | None = None
    for e in events:
        ev = adapter.validate_python(e) if isinstance(e, dict) else e
        for out in state.handle_event(ev):
            if out.type == "response.completed":
                final = [drop_none(i.model_dump()) for i in out.response.output]
    assert final is not None
    return final
