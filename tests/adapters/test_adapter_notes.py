"""A bounded, cache-friendly window: the removal note names the newest few
removals, then counts the rest, within ``note_limit`` characters; it sits at
the end of the window, so a removal at position p leaves every rendered
byte before p unchanged (the provider's prompt cache keeps the prefix)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from quiesce import Buffer, InvalidArgument, InvalidType
from quiesce.adapters import NOTE_LIMIT, anthropic, openai, responses
from quiesce.adapters._common import removal_note
from quiesce.integrations._store import notes


def call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "get", "arguments": "{}"}}


def long_loop(turns: int, keep: int) -> Buffer:
    """An agent loop of ``turns`` tool calls whose pruner keeps the newest
    ``keep`` results (each pair pruned once it is older)."""
    buf = Buffer()
    openai.append_messages(buf, [{"role": "system", "content": "You are terse."}])
    for n in range(turns):
        openai.append_messages(
            buf,
            [
                {"role": "assistant", "content": None, "tool_calls": [call(f"c{n}")]},
                {"role": "tool", "tool_call_id": f"c{n}", "content": f"result {n} " * 10},
            ],
        )
        old = n - keep
        if old >= 0:
            buf.prune([f"c{old}", f"c{old}#result"], reason="old result", turn=n)
    return buf


class TestBounded:
    @pytest.mark.parametrize("turns", [300, pytest.param(1000, marks=pytest.mark.slow)])
    def test_a_thousand_turn_loop_renders_a_bounded_note(self, turns: int) -> None:
        """A long loop (300 turns by default, 1,000 under ``-m slow``: the
        loop costs O(turns^2) to build) renders the newest five removals by
        name and counts the rest, within NOTE_LIMIT."""
        buf = long_loop(turns, 5)
        window = openai.render(buf)
        note = window[-1]["content"]
        assert len(note) <= NOTE_LIMIT
        lines = note.splitlines()
        assert lines[0] == "[quiesce: removed from this context]"
        # 2 * (turns - 5) removals, five of them by name
        assert lines[-1] == f"[quiesce: and {2 * (turns - 5) - 5} earlier removals]"
        # the newest by name, oldest of them first
        assert lines[-2] == f"[quiesce: c{turns - 6}#result pruned at turn {turns - 1}: old result]"
        assert len(window) == 1 + 2 * 5 + 1
        assert len(json.dumps(window)) < 4_000

    def test_the_bounds_are_options(self) -> None:
        buf = long_loop(30, 5)
        note = openai.render(buf, note_names=2)[-1]["content"]
        assert note.splitlines()[1:] == [
            "[quiesce: c24 pruned at turn 29: old result]",
            "[quiesce: c24#result pruned at turn 29: old result]",
            "[quiesce: and 48 earlier removals]",
        ]
        short = openai.render(buf, note_limit=120)[-1]["content"]
        assert len(short) <= 120 and short.endswith("[quiesce: and 50 earlier removals]")
        assert openai.render(buf, note_limit=0)[-1]["role"] == "tool"  # no note

    @pytest.mark.parametrize(
        ("kwargs", "error", "match"),
        [
            ({"note_names": -1}, InvalidArgument, r"^note_names must be >= 0, not -1$"),
            ({"note_limit": "2k"}, InvalidType, r"^note_limit must be an int, not str$"),
        ],
    )
    def test_bad_options_are_refused(
        self, kwargs: dict[str, Any], error: type[Exception], match: str
    ) -> None:
        with pytest.raises(error, match=match):
            openai.render(long_loop(3, 1), **kwargs)

    def test_the_integrations_note_uses_the_same_bound(self) -> None:
        buf = long_loop(300, 5)
        with buf.snapshot() as snap:
            text = notes(snap)
            assert text is not None and len(text) <= NOTE_LIMIT
            assert text == removal_note(snap.tombstones)


def prefix_kept(before: list[Any], after: list[Any], p: int) -> bool:
    """Every rendered byte before position ``p`` is unchanged."""
    head = json.dumps(before[:p])[:-1]
    return after[:p] == before[:p] and json.dumps(after).startswith(head)


class TestCacheFriendly:
    def test_openai_a_removal_keeps_the_prefix(self) -> None:
        buf = long_loop(20, 20)
        before = openai.render(buf)
        p = 9  # c4's call; its result follows
        assert before[p]["tool_calls"][0]["id"] == "c4"
        buf.prune(["c4", "c4#result"], reason="old", turn=21)
        after = openai.render(buf)
        assert prefix_kept(before, after, p)
        # and a second one, later: the first note's prefix is kept too
        buf.prune(["c9", "c9#result"], reason="old", turn=22)
        assert prefix_kept(after, openai.render(buf), 2 * 9 + 1 - 2)

    def test_responses_a_removal_keeps_the_prefix(self) -> None:
        items: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
        for n in range(10):
            items += [
                {"type": "function_call", "call_id": f"c{n}", "name": "get", "arguments": "{}"},
                {"type": "function_call_output", "call_id": f"c{n}", "output": f"r{n}"},
            ]
        buf = Buffer()
        responses.append_messages(buf, items)
        before = responses.render(buf)
        buf.prune(["c3", "c3#result"], reason="old")
        after = responses.render(buf)
        assert prefix_kept(before, after, 7)
        assert after[-1]["content"].startswith("[quiesce: removed from this context]")

    def test_anthropic_a_removal_keeps_the_system_prompt_and_the_prefix(self) -> None:
        msgs: list[dict[str, Any]] = []
        for n in range(6):
            msgs += [
                {"role": "user", "content": f"question {n}"},
                {"role": "assistant", "content": f"answer {n}"},
            ]
        msgs.append({"role": "user", "content": "last"})
        buf = Buffer()
        anthropic.append_messages(buf, msgs, system="be terse")
        before = anthropic.render(buf)
        gone = [e.id for e in buf.head().entries() if e.body in ("question 3", "answer 3")]
        buf.prune(gone, reason="old")
        after = anthropic.render(buf)
        assert after["system"] == before["system"] == "be terse"
        assert prefix_kept(before["messages"], after["messages"], 6)
        assert after["messages"][-1]["content"].startswith("last\n\n[quiesce: removed")
        anthropic.validate(after["messages"], system=after["system"])
