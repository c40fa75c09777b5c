"""Moves keep signed blocks, reasoning turns and call/result pairs in place.

A model's ``EditPlan([Move(...)])`` may reorder the window, but not in a way
the chat APIs refuse: a signed block (Anthropic thinking, a Responses
reasoning item with ``encrypted_content``) is never moved (``IMMUTABLE``);
reasoning, an item of a reasoning turn, or a move landing inside such a turn
is refused as a whole (``IMMUTABLE``: a reasoning turn's order is fixed), a
tool result put before its call too (``REFERENCED``: the pair's order), and
escalated. Each adapter's ``validate()`` checks
reasoning and thinking placement as the API does.

The fuzz draws 300 random moves over a Responses window and an Anthropic
window: every plan the buffer accepts renders a window ``validate()``
accepts, and the refused ones change nothing.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from quiesce import (
    Buffer,
    EditPlan,
    EscalationKind,
    InvalidArgument,
    Move,
    Refusal,
)
from quiesce.adapters import anthropic, responses

MOVES = 300


def _responses_window() -> list[dict[str, Any]]:
    return [
        {"role": "developer", "content": "You are terse."},
        {"role": "user", "content": "Find the weather in Paris and Rome."},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "enc-1"},
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "weather",
            "arguments": '{"city": "Paris"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": "enc-2"},
        {
            "type": "function_call",
            "id": "fc_2",
            "call_id": "call_2",
            "name": "weather",
            "arguments": '{"city": "Rome"}',
        },
        {"type": "function_call_output", "call_id": "call_2", "output": "rain"},
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "content": [
                {"type": "output_text", "text": "Paris sunny, Rome rain.", "annotations": []}
            ],
        },
        {"role": "user", "content": "Thanks. Any umbrella advice?"},
        {
            "type": "message",
            "id": "msg_2",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Take one to Rome.", "annotations": []}],
        },
    ]


def _anthropic_window() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "What is the weather in Paris?"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "I should call the tool.", "signature": "sig-1"},
                {"type": "text", "text": "Let me check."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "weather",
                    "input": {"city": "Paris"},
                },
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "It is sunny in Paris."},
            ],
        },
        {"role": "user", "content": "And tomorrow?"},
        {"role": "assistant", "content": "Probably sunny too."},
    ]


def _responses_buffer() -> Buffer:
    buf = Buffer()
    responses.append_messages(buf, _responses_window())
    responses.validate(responses.render(buf))
    return buf


def _anthropic_buffer() -> Buffer:
    buf = Buffer()
    anthropic.append_messages(buf, _anthropic_window(), system="Be brief.")
    out = anthropic.render(buf)
    anthropic.validate(out["messages"], system=out.get("system"))
    return buf


def _validate_responses(buf: Buffer) -> None:
    responses.validate(responses.render(buf))


def _validate_anthropic(buf: Buffer) -> None:
    out = anthropic.render(buf)
    anthropic.validate(out["messages"], system=out.get("system"))


def _ids(buf: Buffer) -> list[str]:
    with buf.snapshot() as snap:
        return [e.id for e in snap]


def _fuzz(make: Any, check: Any, seed: int) -> tuple[int, int]:
    rng = random.Random(seed)
    accepted = refused = 0
    buf = make()
    for _ in range(MOVES):
        ids = _ids(buf)
        mover = rng.choice(ids)
        before = rng.choice([None, *[i for i in ids if i != mover]])
        version, window = buf.version, _ids(buf)
        report = buf.edit(EditPlan([Move(mover, before=before)], reason="reorder", actor="model"))
        if report.applied:
            accepted += 1
            check(buf)  # every accepted plan renders a window the API accepts
        else:
            refused += 1
            assert buf.version == version and _ids(buf) == window
            assert report.escalation is not None
            assert report.escalation.kind is EscalationKind.REFUSED_EDIT
            assert set(report.refusals) <= {Refusal.IMMUTABLE, Refusal.REFERENCED}
        if rng.random() < 0.1:
            buf = make()  # start again from the original order now and then
    buf._check(expect_no_pins=True)
    return accepted, refused


class TestFuzzedMoves:
    def test_responses_window(self) -> None:
        """300 random moves over a Responses window: accepted ones validate."""
        accepted, refused = _fuzz(_responses_buffer, _validate_responses, seed=21)
        assert accepted > 20 and refused > 20

    def test_anthropic_window(self) -> None:
        """300 random moves over an Anthropic window: accepted ones validate."""
        accepted, refused = _fuzz(_anthropic_buffer, _validate_anthropic, seed=21)
        assert accepted > 20 and refused > 20


class TestRefusedMoves:
    def _refused(self, buf: Buffer, move: Move) -> tuple[Refusal, ...]:
        version, window = buf.version, _ids(buf)
        report = buf.edit(EditPlan([move], reason="reorder", actor="model"))
        assert not report.applied and report.escalation is not None
        assert buf.version == version and _ids(buf) == window
        return report.refusals

    def test_a_signed_reasoning_item_is_immutable_in_place(self) -> None:
        """``rs_2`` before ``rs_1``, and ``rs_1`` last: both refused IMMUTABLE."""
        buf = _responses_buffer()
        assert self._refused(buf, Move("rs_2", before="rs_1")) == (Refusal.IMMUTABLE,)
        assert self._refused(buf, Move("rs_1")) == (Refusal.IMMUTABLE,)

    def test_a_tool_result_is_never_put_before_its_call(self) -> None:
        """A ``function_call_output`` before its ``function_call`` is refused,
        and so is the call moved after its output."""
        buf = _responses_buffer()
        window = _ids(buf)
        output = next(i for i in window if i.startswith("call_1#"))
        assert self._refused(buf, Move(output, before="rs_1"))  # refused as a whole
        buf2 = Buffer()
        pair = [
            {"role": "user", "content": "go"},
            {"type": "function_call", "call_id": "c9", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c9", "output": "ok"},
            {"role": "user", "content": "next"},
        ]
        responses.append_messages(buf2, pair)
        output = _ids(buf2)[2]  # the output of c9
        assert self._refused(buf2, Move(output, before="c9")) == (Refusal.REFERENCED,)
        assert self._refused(buf2, Move("c9")) == (Refusal.REFERENCED,)

    def test_a_call_moved_past_a_result_the_plan_removes_is_applied(self) -> None:
        """A call moved to the end in a plan that also prunes its result breaks
        no pair: nothing of the pair is left after the call (the hypothesis
        machine found this plan refused REFERENCED)."""
        from quiesce import Prune

        buf = Buffer()
        pair = [
            {"role": "user", "content": "go"},
            {"type": "function_call", "call_id": "c9", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c9", "output": "ok"},
            {"role": "user", "content": "next"},
        ]
        responses.append_messages(buf, pair)
        output = _ids(buf)[2]
        report = buf.edit(EditPlan([Move("c9"), Prune(output)], reason="tidy", actor="model"))
        assert report.applied, report
        assert buf.edit(EditPlan([Move("c9")], reason="again", actor="model")).applied
        window = _ids(buf)
        assert output not in window and window[-1] == "c9"

    def test_nothing_lands_inside_a_reasoning_turn(self) -> None:
        """A user message moved between a reasoning item and its call is refused."""
        buf = _responses_buffer()
        user = _ids(buf)[-2]
        assert self._refused(buf, Move(user, before="call_1")) == (Refusal.IMMUTABLE,)

    def test_signed_thinking_stays_in_place(self) -> None:
        """Anthropic: a thinking block moved after the tool results is refused."""
        buf = _anthropic_buffer()
        window = _ids(buf)
        thinking = window[2]  # system, user, then the thinking block
        with buf.snapshot() as snap:
            assert snap[thinking].sealed
        assert self._refused(buf, Move(thinking)) == (Refusal.IMMUTABLE,)


#: Windows the APIs refuse that ``validate()`` accepted before it checked
#: reasoning and thinking placement.
RESPONSES_BAD: list[tuple[list[dict[str, Any]], str]] = [
    (
        [
            {"role": "user", "content": "hi"},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e"},
        ],
        r"^message 1: reasoning 'rs_1' must be followed by the item of its turn it precedes: "
        r"nothing follows it$",
    ),
    (
        [
            {"role": "user", "content": "hi"},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e"},
            {"role": "user", "content": "again"},
        ],
        r"^message 1: reasoning 'rs_1' .*: item 2 is a user message$",
    ),
    (
        [
            {"role": "user", "content": "hi"},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e"},
            {"type": "function_call_output", "call_id": "c1", "output": "ok"},
            {"role": "assistant", "content": "done"},
        ],
        r"^message 2: reasoning 'rs_1' .*: item 3 is a function_call_output$",
    ),
]

ANTHROPIC_BAD: list[tuple[list[dict[str, Any]], str]] = [
    (
        [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "checking"},
                    {"type": "tool_use", "id": "t1", "name": "f", "input": {}},
                    {"type": "thinking", "thinking": "hm", "signature": "s"},
                ],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1"}]},
        ],
        r"^message 1: content\[2\]: a thinking block must come before the tool uses",
    ),
    (
        [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "ok"},
                    {"type": "thinking", "thinking": "hm", "signature": "s"},
                ],
            },
        ],
        r"^message 2: content\[1\]: a thinking block belongs in an assistant message$",
    ),
    (
        [
            {"role": "user", "content": [{"type": "redacted_thinking", "data": "x"}]},
            {"role": "assistant", "content": "ok"},
        ],
        r"^message 0: content\[0\]: a redacted_thinking block belongs in an assistant message$",
    ),
]


class TestValidatePlacement:
    @pytest.mark.parametrize(("items", "message"), RESPONSES_BAD)
    def test_responses_refuses_misplaced_reasoning(
        self, items: list[dict[str, Any]], message: str
    ) -> None:
        with pytest.raises(InvalidArgument, match=message):
            responses.validate(items)

    @pytest.mark.parametrize(("messages", "message"), ANTHROPIC_BAD)
    def test_anthropic_refuses_misplaced_thinking(
        self, messages: list[dict[str, Any]], message: str
    ) -> None:
        with pytest.raises(InvalidArgument, match=message):
            anthropic.validate(messages)

    def test_reasoning_runs_and_server_tool_thinking_are_accepted(self) -> None:
        """What the APIs take stays accepted: reasoning items in a row before
        their output item; thinking between server tool blocks."""
        responses.validate(
            [
                {"role": "user", "content": "hi"},
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {"type": "reasoning", "id": "rs_2", "summary": []},
                {"role": "assistant", "content": "hello"},
            ]
        )
        anthropic.validate(
            [
                {"role": "user", "content": "search"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "a", "signature": "s"},
                        {
                            "type": "server_tool_use",
                            "id": "srv_1",
                            "name": "web_search",
                            "input": {"query": "q"},
                        },
                        {"type": "web_search_tool_result", "tool_use_id": "srv_1", "content": []},
                        {"type": "thinking", "thinking": "b", "signature": "s2"},
                        {"type": "text", "text": "found"},
                    ],
                },
            ]
        )
