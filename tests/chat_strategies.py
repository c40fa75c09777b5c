"""Hypothesis strategies for the three chat APIs' message shapes (one module,
used by adapters/test_adapter_shapes.py).

Each strategy draws a *complete* transcript, as a real agent loop produces it:
every tool call answered. ``sdk_valid=True`` keeps to shapes the official
SDKs' request types accept (for the TypeAdapter checks); ``False`` adds
opaque future part/block/item types, which must round-trip too. Text never
contains a lone surrogate (refused by design) nor a line that imitates a
quiesce note (escaped on render by design).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

Json = dict[str, Any]

_ALPHABET = st.characters(blacklist_categories=("Cs",))
text = st.text(_ALPHABET, max_size=40).filter(lambda s: "quiesce" not in s.lower())
words = st.text("abcdefghijklmnopqrstuvwxyz _-", min_size=1, max_size=12)
scalars = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | text
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(words, inner, max_size=3),
    max_leaves=8,
)
json_objects = st.dictionaries(words, json_values, max_size=3)
cache_control = st.sampled_from([{}, {"cache_control": {"type": "ephemeral"}}])


class Ids:
    """Fresh foreign ids (no ``#``), unique within one drawn transcript."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.n = 0

    def __call__(self) -> str:
        self.n += 1
        return f"{self.prefix}{self.n}"


# -- OpenAI Chat Completions ---------------------------------------------------


@st.composite
def chat_user_content(draw: st.DrawFn, *, sdk_valid: bool) -> Any:
    if draw(st.booleans()):
        return draw(text)
    part = st.one_of(
        st.builds(lambda t: {"type": "text", "text": t}, text),
        st.builds(
            lambda u, d: {"type": "image_url", "image_url": {"url": u, **d}},
            st.sampled_from(["https://x/a.png", "data:image/png;base64,aGk="]),
            st.sampled_from([{}, {"detail": "low"}]),
        ),
        st.just({"type": "input_audio", "input_audio": {"data": "UklG", "format": "wav"}}),
        st.just({"type": "file", "file": {"file_id": "file-1", "filename": "a.pdf"}}),
        *(
            []
            if sdk_valid
            else [st.builds(lambda v: {"type": "future_part", "value": v}, json_values)]
        ),
    )
    return draw(st.lists(part, min_size=1, max_size=3))


@st.composite
def chat_assistant(draw: st.DrawFn, *, ids: Ids) -> list[Json]:
    """An assistant message (any shape), with its tool results after it."""
    m: Json = {"role": "assistant"}
    shape = draw(st.sampled_from(["str", "parts", "refusal", "calls"]))
    if shape == "str":
        m["content"] = draw(text)
    elif shape == "parts":
        m["content"] = draw(
            st.lists(
                st.builds(lambda t: {"type": "text", "text": t}, text)
                | st.builds(lambda t: {"type": "refusal", "refusal": t}, text),
                min_size=1,
                max_size=2,
            )
        )
    elif shape == "refusal":
        m["content"] = None
        m["refusal"] = draw(text)
    if draw(st.booleans()):  # an SDK dump's extra fields
        m.update({"annotations": [], "audio": None, "function_call": None})
        m.setdefault("refusal", None)
        m.setdefault("content", None)
    if draw(st.booleans()):
        m["reasoning_content"] = draw(text)
    if shape != "calls":
        m.setdefault("content", draw(text))
        return [m]
    m.setdefault("content", draw(st.none() | text))
    calls = []
    for _ in range(draw(st.integers(1, 3))):
        name = draw(words)
        if draw(st.integers(0, 4)) == 0:
            calls.append({"id": ids(), "type": "custom", "custom": {"name": name, "input": "x"}})
        else:
            args = draw(st.sampled_from(["{}", '{"a": 1}', '{"q": "web-0"}']))
            calls.append(
                {"id": ids(), "type": "function", "function": {"name": name, "arguments": args}}
            )
    m["tool_calls"] = calls
    results = []
    for c in draw(st.permutations(calls)):
        content = draw(
            text
            | st.lists(
                st.builds(lambda t: {"type": "text", "text": t}, text), min_size=1, max_size=2
            )
        )
        results.append({"role": "tool", "tool_call_id": c["id"], "content": content})
    return [m, *results]


@st.composite
def chat_messages(draw: st.DrawFn, *, sdk_valid: bool = True) -> list[Json]:
    ids = Ids("call_")
    out: list[Json] = []
    for role in draw(st.lists(st.sampled_from(["system", "developer"]), max_size=2)):
        content = draw(
            text
            | st.lists(
                st.builds(lambda t: {"type": "text", "text": t}, text), min_size=1, max_size=2
            )
        )
        out.append({"role": role, "content": content})
    for _ in range(draw(st.integers(1, 4))):
        user: Json = {"role": "user", "content": draw(chat_user_content(sdk_valid=sdk_valid))}
        if draw(st.integers(0, 4)) == 0:
            user["name"] = draw(words)
        out.append(user)
        for _ in range(draw(st.integers(0, 2))):
            out.extend(draw(chat_assistant(ids=ids)))
    return out


# -- OpenAI Responses ----------------------------------------------------------


@st.composite
def responses_items(draw: st.DrawFn, *, sdk_valid: bool = True) -> list[Json]:
    ids = Ids("")
    out: list[Json] = []
    if draw(st.booleans()):
        out.append({"role": draw(st.sampled_from(["system", "developer"])), "content": draw(text)})
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            out.append({"role": "user", "content": draw(text)})
        else:
            parts = draw(
                st.lists(
                    st.builds(lambda t: {"type": "input_text", "text": t}, text)
                    | st.just(
                        {"type": "input_image", "image_url": "https://x/a.png", "detail": "auto"}
                    )
                    | st.just({"type": "input_file", "file_id": "file-1"}),
                    min_size=1,
                    max_size=3,
                )
            )
            out.append({"type": "message", "role": "user", "content": parts})
        for _ in range(draw(st.integers(0, 2))):  # one model response each
            n = ids()
            if draw(st.booleans()):
                item: Json = {
                    "type": "reasoning",
                    "id": f"rs_{n}",
                    "summary": draw(
                        st.lists(
                            st.builds(lambda t: {"type": "summary_text", "text": t}, text),
                            max_size=2,
                        )
                    ),
                }
                if draw(st.booleans()):
                    item["encrypted_content"] = draw(words)
                if draw(st.booleans()):
                    item["status"] = "completed"
                out.append(item)
            if not sdk_valid and draw(st.integers(0, 3)) == 0:
                out.append({"type": "future_item", "id": f"fi_{n}", "payload": draw(json_values)})
            if draw(st.booleans()):
                calls = []
                for k in range(draw(st.integers(1, 2))):
                    call: Json = {
                        "type": "function_call",
                        "call_id": f"call_{n}_{k}",
                        "name": draw(words),
                        "arguments": draw(st.sampled_from(["{}", '{"a": 1}'])),
                    }
                    if draw(st.booleans()):
                        call.update(id=f"fc_{n}_{k}", status="completed")
                    calls.append(call)
                out.extend(calls)
                for c in calls:
                    output = draw(
                        text
                        | st.lists(
                            st.builds(lambda t: {"type": "input_text", "text": t}, text),
                            min_size=1,
                            max_size=2,
                        )
                    )
                    out.append(
                        {"type": "function_call_output", "call_id": c["call_id"], "output": output}
                    )
            else:
                out.append(
                    {
                        "type": "message",
                        "id": f"msg_{n}",
                        "role": "assistant",
                        "status": "completed",
                        "content": [{"type": "output_text", "text": draw(text), "annotations": []}],
                    }
                )
    return out


# -- Anthropic ------------------------------------------------------------------


def _image() -> st.SearchStrategy[Json]:
    return st.builds(
        lambda src, cc: {"type": "image", "source": src, **cc},
        st.sampled_from(
            [
                {"type": "base64", "media_type": "image/png", "data": "aGk="},
                {"type": "url", "url": "https://x/a.png"},
            ]
        ),
        cache_control,
    )


def _text_block() -> st.SearchStrategy[Json]:
    return st.builds(
        lambda t, cc: {"type": "text", "text": t, **cc}, text.filter(bool), cache_control
    )


@st.composite
def anthropic_conversation(draw: st.DrawFn, *, sdk_valid: bool = True) -> tuple[Any, list[Json]]:
    """``(system, messages)``: a system prompt (or ``None``) and turns."""
    ids = Ids("toolu_")
    system = draw(st.none() | text.filter(bool) | st.lists(_text_block(), min_size=1, max_size=2))
    out: list[Json] = []
    document = st.just(
        {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": "runbook"},
            "title": "runbook",
        }
    )
    user_block = _text_block() | _image() | document
    pending: list[Json] = []  # tool results owed by the last assistant turn
    for _ in range(draw(st.integers(1, 4))):
        blocks: list[Json] = list(pending)
        pending = []
        extra = draw(st.lists(user_block, max_size=2))
        if not blocks and not extra and draw(st.booleans()):
            out.append({"role": "user", "content": draw(text.filter(bool))})
        else:
            blocks += extra or ([] if blocks else [draw(_text_block())])
            out.append({"role": "user", "content": blocks})
        # an assistant turn
        content: list[Json] = []
        if draw(st.booleans()):
            content.append({"type": "thinking", "thinking": draw(text), "signature": draw(words)})
        if draw(st.integers(0, 4)) == 0:
            content.append({"type": "redacted_thinking", "data": draw(words)})
        if draw(st.booleans()):
            content.append(draw(_text_block()))
        if draw(st.integers(0, 3)) == 0:
            sid = f"srv{ids()}"
            content.append(
                {
                    "type": "server_tool_use",
                    "id": sid,
                    "name": "web_search",
                    "input": {"query": draw(text)},
                }
            )
            content.append(
                {
                    "type": "web_search_tool_result",
                    "tool_use_id": sid,
                    "content": [
                        {
                            "type": "web_search_result",
                            "url": "https://x",
                            "title": draw(text),
                            "encrypted_content": draw(words),
                        }
                    ],
                }
            )
        if not sdk_valid and draw(st.integers(0, 3)) == 0:
            content.append({"type": "compaction", "content": draw(text)})
        for _ in range(draw(st.integers(0, 2))):
            call = {
                "type": "tool_use",
                "id": ids(),
                "name": draw(words),
                "input": draw(json_objects),
                **draw(cache_control),
            }
            content.append(call)
            result: Json = {"type": "tool_result", "tool_use_id": call["id"]}
            shape = draw(st.sampled_from(["str", "list", "none"]))
            if shape == "str":
                result["content"] = draw(text)
            elif shape == "list":
                result["content"] = draw(st.lists(_text_block() | _image(), min_size=1, max_size=2))
            if draw(st.booleans()):
                result["is_error"] = draw(st.booleans())
            pending.append(result)
        if not content:
            content.append(draw(_text_block()))
        if (
            not pending
            and draw(st.booleans())
            and content[-1]["type"] == "text"
            and len(content) == 1
        ):
            out.append({"role": "assistant", "content": content[0]["text"]})
        else:
            out.append({"role": "assistant", "content": content})
    if pending:
        out.append({"role": "user", "content": draw(st.permutations(pending))})
    return system, out
