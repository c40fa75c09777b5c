"""SDK objects in: everywhere the adapters take a message, item or block,
they take the SDKs' pydantic objects too and store them as the SDK sends
them; ``render`` gives back the SDK's own serialization. Ids a framework
reuses (the Agents SDK's ``FAKE_RESPONSES_ID``, ``ScriptedModel``'s constant
item id) are stored under generated ids and round-trip verbatim."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from agents.models.chatcmpl_converter import Converter
from agents.models.fake_id import FAKE_RESPONSES_ID
from agents.testing.model import assistant_message
from openai.types.chat import ChatCompletionMessage

from _sdk_loops import (
    anthropic_body,
    anthropic_message,
    chat_completion,
    function_call,
    openai_body,
    openai_tool_call,
    output_message,
    reasoning,
    response,
    responses_body,
)
from quiesce import Buffer, InvalidType
from quiesce.adapters import anthropic, openai, responses
from quiesce.adapters._common import RESERVED

USER = {"role": "user", "content": "What's the weather in Paris?"}


class TestOpenAIObjects:
    def test_a_chat_completion_message_renders_as_the_sdk_sends_it(self) -> None:
        message = (
            chat_completion(
                {"tool_calls": [openai_tool_call("call_1", "get_weather", {"city": "Paris"})]}, 0
            )
            .choices[0]
            .message
        )
        result = {"role": "tool", "tool_call_id": "call_1", "content": "clear"}
        buf = Buffer()
        openai.append_messages(buf, [USER, message, result])
        assert openai.render(buf) == openai_body([USER, message, result])
        # the fields the dump carries (refusal, annotations, ...) are kept verbatim
        assert openai.render(buf)[1] == message.model_dump(exclude_unset=True, mode="json")

    def test_a_text_reply_round_trips(self) -> None:
        message = chat_completion({"content": "Clear."}, 1).choices[0].message
        buf = Buffer()
        openai.append_messages(buf, [message])
        assert openai.render(buf) == openai_body([message])

    def test_an_unknown_object_is_refused_naming_the_message(self) -> None:
        @dataclasses.dataclass
        class Note:
            text: str

        buf = Buffer()
        openai.append_messages(buf, [USER])
        version = buf.version
        with pytest.raises(
            InvalidType, match=r"^message 1: must be a dict or an SDK object, not Note$"
        ):
            openai.sync_messages(buf, [USER, Note("hi")])
        assert buf.version == version and len(buf) == 1


class TestAnthropicObjects:
    def test_response_content_blocks_render_as_the_sdk_sends_them(self) -> None:
        reply = anthropic_message(
            [
                {"type": "thinking", "thinking": "Look it up.", "signature": "sig-1"},
                {"type": "text", "text": "Checking.", "citations": None},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"c": 1}},
            ],
            0,
        )
        turn = {"role": "assistant", "content": reply.content}
        result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "1"}
        messages = [{"role": "user", "content": "hi"}, turn, {"role": "user", "content": [result]}]
        buf = Buffer()
        anthropic.append_messages(buf, messages)
        assert anthropic.render(buf) == anthropic_body(messages)
        entries = buf.head().entries()
        assert entries[1].sealed  # the thinking block: signed, as a dict would be

    def test_an_unknown_block_is_refused_naming_the_field(self) -> None:
        reply = anthropic_message([{"type": "text", "text": "ok", "citations": None}], 0)
        buf = Buffer()
        with pytest.raises(
            InvalidType,
            match=r"^message 0: content\[1\] must be a JSON value or an SDK object, not object$",
        ):
            anthropic.append_messages(
                buf, [{"role": "assistant", "content": [*reply.content, object()]}]
            )
        assert buf.version == 0 and len(buf) == 0


class TestResponsesObjects:
    def test_response_output_items_render_as_the_sdk_sends_them(self) -> None:
        reply = response(
            [
                reasoning("rs_1", "Look it up."),
                function_call("fc_1", "call_1", "get_weather", {"city": "Paris"}),
            ],
            0,
        )
        items: list[Any] = [USER]
        items += reply.output
        items.append({"type": "function_call_output", "call_id": "call_1", "output": "clear"})
        final = response([output_message("msg_1", "Clear in Paris.")], 1)
        items += final.output
        buf = Buffer()
        responses.append_messages(buf, items)
        assert responses.render(buf) == responses_body(items)

    def test_errors_say_item_and_name_the_field(self) -> None:
        buf = Buffer()
        with pytest.raises(InvalidType, match=r"^item 1: call_id must be a str, not NoneType$"):
            responses.append_messages(buf, [USER, {"type": "function_call", "name": "f"}])
        with pytest.raises(
            InvalidType, match=r"^item 0: must be a dict or an SDK object, not int$"
        ):
            responses.sync_messages(buf, [3])
        assert buf.version == 0


class TestReusedIds:
    def test_fake_responses_id_items_get_generated_ids_and_keep_their_own(self) -> None:
        """Chat Completions messages converted by the Agents SDK all carry
        FAKE_RESPONSES_ID: two of them are two entries, the id round-trips."""
        first = Converter.message_to_output_items(
            ChatCompletionMessage(role="assistant", content="One.")
        )
        second = Converter.message_to_output_items(
            ChatCompletionMessage(role="assistant", content="Two.")
        )
        items: list[Any] = [USER, *first, {"role": "user", "content": "more"}, *second]
        assert [getattr(i, "id", None) for i in items[1:2] + items[3:]] == [FAKE_RESPONSES_ID] * 2
        buf = Buffer()
        report = responses.sync_messages(buf, items)
        assert report.appended == (0, 1, 2, 3)
        ids = [e.id for e in buf.head().entries()]
        assert len(set(ids)) == 4 and all(RESERVED in i for i in (ids[1], ids[3]))
        assert responses.render(buf) == responses_body(items)
        # synced again: the same items, nothing new
        again = responses.sync_messages(buf, list(items))
        assert (again.appended, again.held) == ((), (0, 1, 2, 3))
        assert len(buf) == 4

    def test_a_scripted_models_constant_id_on_every_turn(self) -> None:
        """The Agents SDK's ScriptedModel names every message
        'scripted-message': turn 2's message is a new item, turn 1's stays."""
        buf = Buffer()
        turn1: list[Any] = [USER, assistant_message("Clear in Paris.")]
        responses.sync_messages(buf, turn1)
        turn2 = [*turn1, {"role": "user", "content": "And Oslo?"}, assistant_message("Rain.")]
        report = responses.sync_messages(buf, turn2)
        assert report.appended == (2, 3) and report.held == (0, 1)
        assert responses.render(buf) == responses_body(turn2)
        assert [e.id for e in buf.head().entries()][1] == "scripted-message"
        # a fresh process (no last history): the same list is the same items
        fresh = Buffer()
        responses.append_messages(fresh, turn2)
        assert responses.sync_messages(fresh, turn2).appended == ()

    def test_append_of_a_reused_id_does_not_crash(self) -> None:
        buf = Buffer()
        responses.append_messages(buf, [assistant_message("One.")])
        responses.append_messages(buf, [assistant_message("Two.")])
        assert [i["content"][0]["text"] for i in responses.render(buf)] == ["One.", "Two."]
        assert [i["id"] for i in responses.render(buf)] == ["scripted-message"] * 2
