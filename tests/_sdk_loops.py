"""The three SDKs' documented loops, offline: scripted responses built with
the SDKs' own types (``model_validate`` of response JSON), and each SDK's
own serialization of a request body (what its client would send).

A loop is driven by a ``send(history) -> request`` callable: the control
sends the SDK's serialization of the history as it is; quiesce's loops sync
the history into a buffer and send ``render``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anthropic
from anthropic._utils._json import openapi_dumps
from anthropic.types import Message as AnthropicMessage
from anthropic.types import message_create_params as amcp
from openai._utils import maybe_transform
from openai.types.chat import ChatCompletion
from openai.types.chat import completion_create_params as ccp
from openai.types.responses import Response
from openai.types.responses import response_create_params as rcp

assert anthropic  # the SDK is installed: its types are the real thing

Send = Callable[[list[Any]], Any]


# -- the SDKs' own serialization ---------------------------------------------


def openai_body(messages: list[Any]) -> list[dict[str, Any]]:
    """The ``messages`` of a Chat Completions request body, as the openai
    client builds it (``maybe_transform`` of the params, then JSON)."""
    params = maybe_transform(
        {"model": "gpt-test", "messages": messages}, ccp.CompletionCreateParamsNonStreaming
    )
    return json.loads(json.dumps(params))["messages"]  # type: ignore[no-any-return]


def responses_body(items: list[Any]) -> list[dict[str, Any]]:
    """The ``input`` of a Responses request body, as the openai client builds it."""
    params = maybe_transform(
        {"model": "gpt-test", "input": items}, rcp.ResponseCreateParamsNonStreaming
    )
    return json.loads(json.dumps(params))["input"]  # type: ignore[no-any-return]


def anthropic_body(messages: list[Any], system: Any = None) -> dict[str, Any]:
    """``system`` and ``messages`` of a Messages request body, as the
    anthropic client builds it (``maybe_transform``, then its JSON encoder
    that dumps pydantic blocks with ``openapi_model_dump``)."""
    params: dict[str, Any] = {"model": "claude-test", "max_tokens": 1024, "messages": messages}
    if system is not None:
        params["system"] = system
    body = json.loads(openapi_dumps(maybe_transform(params, amcp.MessageCreateParamsNonStreaming)))
    out = {"messages": body["messages"]}
    if "system" in body:
        out["system"] = body["system"]
    return out


# -- scripted responses (the SDKs' own types) ------------------------------------


def chat_completion(message: dict[str, Any], n: int) -> ChatCompletion:
    base = {"role": "assistant", "content": None, "refusal": None, "annotations": []}
    return ChatCompletion.model_validate(
        {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": 1_700_000_000 + n,
            "model": "gpt-test",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls" if "tool_calls" in message else "stop",
                    "logprobs": None,
                    "message": {**base, **message},
                }
            ],
        }
    )


def openai_tool_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def anthropic_message(content: list[dict[str, Any]], n: int) -> AnthropicMessage:
    stop = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
    return AnthropicMessage.model_validate(
        {
            "id": f"msg_{n}",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }
    )


def response(output: list[dict[str, Any]], n: int) -> Response:
    return Response.model_validate(
        {
            "id": f"resp_{n}",
            "object": "response",
            "created_at": 1_700_000_000 + n,
            "model": "gpt-test",
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "status": "completed",
        }
    )


def reasoning(rid: str, summary: str) -> dict[str, Any]:
    return {
        "id": rid,
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": summary}],
        "encrypted_content": f"gAAAA{rid}signed",
    }


def function_call(fid: str, call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": fid,
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": json.dumps(arguments),
        "status": "completed",
    }


def output_message(mid: str, text: str) -> dict[str, Any]:
    return {
        "id": mid,
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def weather(city: str) -> str:
    return json.dumps({"city": city, "sky": "clear" if city == "Paris" else "rain"})


# -- the loops ---------------------------------------------------------------


def as_dict(obj: Any) -> Any:
    """What a loop that keeps plain dicts appends instead of the object."""
    return obj.model_dump(exclude_unset=True, mode="json", by_alias=True)


def openai_loop(send: Send, *, objects: bool = True) -> list[Any]:
    """The Chat Completions tool loop of the openai docs, three user turns:
    ``messages.append(response.choices[0].message)``, then one ``tool``
    message per call. Returns every request sent."""
    script = [
        {"tool_calls": [openai_tool_call("call_1", "get_weather", {"city": "Paris"})]},
        {"content": "Clear in Paris."},
        {
            "tool_calls": [
                openai_tool_call("call_2", "get_weather", {"city": "Oslo"}),
                openai_tool_call("call_3", "get_weather", {"city": "Rome"}),
            ]
        },
        {"content": "Rain in Oslo, rain in Rome."},
        {"content": "You're welcome."},
    ]
    users = iter(["What's the weather in Paris?", "And Oslo and Rome?", "Thanks!"])
    messages: list[Any] = [
        {"role": "system", "content": "You are a weather bot."},
        {"role": "user", "content": next(users)},
    ]
    sent = []
    for n, step in enumerate(script):
        sent.append(send(messages))
        message = chat_completion(step, n).choices[0].message
        messages.append(message if objects else as_dict(message))
        for call in message.tool_calls or []:
            args = json.loads(call.function.arguments)  # type: ignore[union-attr]
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": weather(args["city"])}
            )
        if not message.tool_calls:
            user = next(users, None)
            if user is None:
                break
            messages.append({"role": "user", "content": user})
    return sent


def anthropic_loop(send: Callable[[list[Any], Any], Any], *, objects: bool = True) -> list[Any]:
    """The Messages tool loop of the anthropic docs with extended thinking:
    ``messages.append({"role": "assistant", "content": response.content})``
    (a list of ``ThinkingBlock``/``TextBlock``/``ToolUseBlock`` objects), then
    a user turn of ``tool_result`` blocks."""
    system = "You are a weather bot."
    script = [
        [
            {"type": "thinking", "thinking": "Look it up.", "signature": "sig-1"},
            {"type": "text", "text": "Checking.", "citations": None},
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "get_weather",
                "input": {"city": "Paris"},
            },
        ],
        [{"type": "text", "text": "Clear in Paris.", "citations": None}],
        [
            {"type": "thinking", "thinking": "Two cities.", "signature": "sig-2"},
            {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Oslo"}},
            {"type": "tool_use", "id": "toolu_3", "name": "get_weather", "input": {"city": "Rome"}},
        ],
        [{"type": "text", "text": "Rain in both.", "citations": None}],
    ]
    users = iter(["What's the weather in Paris?", "And Oslo and Rome?"])
    messages: list[Any] = [{"role": "user", "content": next(users)}]
    sent = []
    for n, content in enumerate(script):
        sent.append(send(messages, system))
        reply = anthropic_message(content, n)
        content = reply.content if objects else [as_dict(b) for b in reply.content]
        messages.append({"role": "assistant", "content": content})
        uses = [b for b in reply.content if b.type == "tool_use"]
        if uses:
            messages.append(
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": b.id,
                            "content": weather(b.input["city"]),  # type: ignore[index]
                        }
                        for b in uses
                    ],
                }
            )
        else:
            user = next(users, None)
            if user is None:
                break
            messages.append({"role": "user", "content": user})
    return sent


def responses_loop(send: Send, *, objects: bool = True) -> list[Any]:
    """The Responses tool loop of the openai docs with reasoning:
    ``items += response.output`` (``ResponseReasoningItem``,
    ``ResponseFunctionToolCall``, ``ResponseOutputMessage``), then one
    ``function_call_output`` per call."""
    script = [
        [
            reasoning("rs_1", "Look it up."),
            function_call("fc_1", "call_1", "get_weather", {"city": "Paris"}),
        ],
        [output_message("msg_1", "Clear in Paris.")],
        [
            reasoning("rs_2", "Two cities."),
            function_call("fc_2", "call_2", "get_weather", {"city": "Oslo"}),
            function_call("fc_3", "call_3", "get_weather", {"city": "Rome"}),
        ],
        [output_message("msg_2", "Rain in both.")],
    ]
    users = iter(["What's the weather in Paris?", "And Oslo and Rome?"])
    items: list[Any] = [{"role": "user", "content": next(users)}]
    sent = []
    for n, output in enumerate(script):
        sent.append(send(items))
        reply = response(output, n)
        items += reply.output if objects else [as_dict(i) for i in reply.output]
        calls = [i for i in reply.output if i.type == "function_call"]
        for call in calls:
            args = json.loads(call.arguments)  # type: ignore[union-attr]
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": call.call_id,  # type: ignore[union-attr]
                    "output": weather(args["city"]),
                }
            )
        if not calls:
            user = next(users, None)
            if user is None:
                break
            items.append({"role": "user", "content": user})
    return sent
