"""Transparent when idle: each SDK's documented loop (several turns, tool
calls, thinking/reasoning), run without quiesce and with it, sends the same
requests (``==``) when nothing is marked or pruned — with the SDK objects
the loop appends, in both ways a loop can feed quiesce (its own history
synced each turn, or the rendered window plus what is new)."""

from __future__ import annotations

from typing import Any

import pytest

from _sdk_loops import (
    anthropic_body,
    anthropic_loop,
    openai_body,
    openai_loop,
    responses_body,
    responses_loop,
)
from quiesce import Buffer
from quiesce.adapters import anthropic, openai, responses


class TestOpenAILoop:
    @pytest.mark.parametrize("objects", [True, False], ids=["objects", "dicts"])
    def test_synced_history_renders_what_the_sdk_sends(self, objects: bool) -> None:
        control = openai_loop(openai_body, objects=objects)
        buf = Buffer()

        def send(messages: list[Any]) -> Any:
            openai.sync_messages(buf, messages)
            window = openai.render(buf)
            openai.validate(window)
            return window

        assert openai_loop(send, objects=objects) == control
        assert len(control) == 5 and len(control[-1]) == 11

    def test_rendered_window_fed_back_renders_what_the_sdk_sends(self) -> None:
        control = openai_loop(openai_body)
        buf = Buffer()
        state: dict[str, Any] = {"sent": 0, "window": []}

        def send(messages: list[Any]) -> Any:
            # the loop's list: render's window, then what the loop added
            new = messages[state["sent"] :]
            openai.sync_messages(buf, state["window"] + new)
            state["sent"] = len(messages)
            state["window"] = openai.render(buf)
            return openai_body(state["window"])

        assert openai_loop(send) == control


class TestAnthropicLoop:
    @pytest.mark.parametrize("objects", [True, False], ids=["objects", "dicts"])
    def test_synced_history_renders_what_the_sdk_sends(self, objects: bool) -> None:
        control = anthropic_loop(anthropic_body, objects=objects)
        buf = Buffer()

        def send(messages: list[Any], system: Any) -> Any:
            anthropic.sync_messages(buf, messages, system=system)
            window = anthropic.render(buf)
            anthropic.validate(window["messages"], system=window.get("system"))
            return window

        sent = anthropic_loop(send, objects=objects)
        assert sent == control
        assert any(
            b.get("type") == "thinking"
            for m in control[-1]["messages"]
            if isinstance(m["content"], list)
            for b in m["content"]
        )

    def test_append_per_turn_renders_what_the_sdk_sends(self) -> None:
        control = anthropic_loop(anthropic_body)
        buf = Buffer()
        seen = {"n": 0}

        def send(messages: list[Any], system: Any) -> Any:
            anthropic.append_messages(
                buf, messages[seen["n"] :], system=system if seen["n"] == 0 else None
            )
            seen["n"] = len(messages)
            return anthropic.render(buf)

        assert anthropic_loop(send) == control


class TestResponsesLoop:
    @pytest.mark.parametrize("objects", [True, False], ids=["objects", "dicts"])
    def test_synced_items_render_what_the_sdk_sends(self, objects: bool) -> None:
        control = responses_loop(responses_body, objects=objects)
        buf = Buffer()

        def send(items: list[Any]) -> Any:
            responses.sync_messages(buf, items)
            window = responses.render(buf)
            responses.validate(window)
            return window

        assert responses_loop(send, objects=objects) == control
        assert [i.get("type") for i in control[-1]].count("reasoning") == 2

    def test_rendered_window_fed_back_renders_what_the_sdk_sends(self) -> None:
        control = responses_loop(responses_body)
        buf = Buffer()
        state: dict[str, Any] = {"sent": 0, "window": []}

        def send(items: list[Any]) -> Any:
            new = items[state["sent"] :]
            responses.sync_messages(buf, state["window"] + new)
            state["sent"] = len(items)
            state["window"] = responses.render(buf)
            return responses_body(state["window"])

        assert responses_loop(send) == control
