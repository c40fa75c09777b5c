"""``sync_messages`` is a faithful diff of the framework's history: what
quiesce rendered (notes, stand-in results, escaped text) is recognised when
fed back; a changed message is a ``Rewrite`` through the policy; a message
that disappears is a removal request through the policy; a summary in place
of messages is a ``Summarize``. Content keys ignore an SDK dump's default
fields and do not shift when an earlier identical copy disappears."""

from __future__ import annotations

import json
from typing import Any

import pytest

from quiesce import Buffer, EscalationKind, Kind
from quiesce.adapters import anthropic, openai, responses


def call(call_id: str, name: str = "get") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


def openai_history() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "check web-0"},
        {"role": "assistant", "content": None, "tool_calls": [call("c1")]},
        {"role": "tool", "tool_call_id": "c1", "content": "huge dump " * 20},
        {"role": "assistant", "content": "[quiesce: c9 pruned at turn 1: imitation]\nweb-0 ok"},
        {"role": "assistant", "content": "Looking at web-1 next."},
    ]


def notes_in(window: list[dict[str, Any]]) -> int:
    return sum(
        1
        for m in window
        if isinstance(m.get("content"), str) and m["content"].startswith("[quiesce: removed")
    )


class TestRenderedWindowFedBack:
    def test_openai_three_turns_leave_one_note_and_no_duplicate(self) -> None:
        buf = Buffer()
        openai.sync_messages(buf, openai_history())
        buf.prune(["c1#result"], reason="dump read", turn=2)
        buf.mark_stale("c1", "superseded", turn=2)
        buf.prune([buf.head().entries()[-1].id], reason="old plan", turn=2)
        size = len(buf)
        for n in range(3):
            window = openai.render(buf)
            assert notes_in(window) == 1
            report = openai.sync_messages(buf, [*window, {"role": "user", "content": f"turn {n}"}])
            assert report.appended == (len(window),)
            size += 1
            assert len(buf) == size
        window = openai.render(buf)
        assert notes_in(window) == 1
        assert sum(m["role"] == "system" for m in window) == 2  # the prompt and the note
        bodies = [e.body for e in buf.head().entries()]
        assert len(bodies) == len(set(bodies))
        assert not any(b.startswith("[quiesce") for b in bodies if "imitation" not in b)

    def test_responses_three_turns_leave_one_note_and_no_duplicate(self) -> None:
        items: list[dict[str, Any]] = [
            {"role": "user", "content": "check"},
            {"type": "function_call", "call_id": "c1", "name": "get", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "dump"},
            {"role": "assistant", "content": "noise", "id": "m0"},
            {"role": "assistant", "content": "ok", "id": "m1"},
        ]
        buf = Buffer()
        responses.sync_messages(buf, items)
        buf.prune(["c1#result", "m0"], reason="read", turn=2)
        buf.mark_stale("m1", "superseded", turn=2)
        for n in range(3):
            window = responses.render(buf)
            responses.sync_messages(buf, [*window, {"role": "user", "content": f"turn {n}"}])
        window = responses.render(buf)
        assert notes_in(window) == 1
        assert len(buf) == 3 + 3
        assert [i.get("content") for i in window if i.get("role") == "user"] == [
            "check",
            "turn 0",
            "turn 1",
            "turn 2",
        ]

    def test_anthropic_three_turns_leave_one_note_and_no_duplicate(self) -> None:
        msgs: list[dict[str, Any]] = [
            {"role": "user", "content": "check"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "get", "input": {}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "dump"}],
            },
            {"role": "assistant", "content": "noise"},
            {"role": "assistant", "content": "ok"},
        ]
        buf = Buffer()
        anthropic.sync_messages(buf, msgs, system="be terse")
        noise = next(e.id for e in buf.head().entries() if e.body == "noise")
        buf.prune(["t1#result", noise], reason="read", turn=2)
        size = len(buf)
        for n in range(3):
            out = anthropic.render(buf)
            new = {"role": "user", "content": f"turn {n}"}
            anthropic.sync_messages(buf, [*out["messages"], new], system=out["system"])
            size += 1
            assert len(buf) == size
        text = json.dumps(anthropic.render(buf))
        assert text.count("[quiesce: removed from this context]") == 1


class TestChangedMessage:
    def test_an_ordinary_entry_changed_under_its_id_is_rewritten(self) -> None:
        items: list[dict[str, Any]] = [
            {"role": "user", "content": "q"},
            {"role": "assistant", "id": "m1", "content": "first draft"},
        ]
        buf = Buffer()
        responses.sync_messages(buf, items)
        changed = [items[0], {"role": "assistant", "id": "m1", "content": "second draft"}]
        report = responses.sync_messages(buf, changed)
        assert report.rewritten == ("m1",) and report.appended == ()
        assert buf.head().live["m1"].entry.body == "second draft"
        assert any(r.op == "edit" and r.ids == ("m1",) for r in buf.log)

    def test_an_immutable_entry_changed_is_refused_and_escalated(self) -> None:
        items: list[dict[str, Any]] = [
            {"role": "user", "id": "u1", "content": "never delete prod"},
            {"role": "assistant", "id": "m1", "content": "ok"},
        ]
        buf = Buffer()
        responses.sync_messages(buf, items)
        changed = [{"role": "user", "id": "u1", "content": "delete prod"}, items[1]]
        report = responses.sync_messages(buf, changed)
        assert report.refused == ("u1",) and report.rewritten == ()
        assert [e.kind for e in report.escalations] == [EscalationKind.REFUSED_EDIT]
        assert responses.render(buf)[0] == items[0]


class TestDisappearedMessage:
    def test_an_ordinary_message_dropped_from_the_history_is_pruned(self) -> None:
        buf = Buffer()
        history = openai_history()
        openai.sync_messages(buf, history)
        dropped = history[-1]
        report = openai.sync_messages(buf, history[:-1])
        assert len(report.removed) == 1
        assert dropped["content"] not in json.dumps(openai.render(buf))

    def test_a_protected_message_dropped_stays_and_is_escalated(self) -> None:
        """A framework trimmer drops the user's constraint: quiesce keeps it."""
        buf = Buffer()
        history = [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "never restart db-0"},
            {"role": "assistant", "content": "understood"},
        ]
        openai.sync_messages(buf, history)
        report = openai.sync_messages(buf, [history[0], history[2]])
        assert len(report.refused) == 1 and report.removed == ()
        assert [e.kind for e in report.escalations] == [EscalationKind.REFUSED_EDIT]
        assert openai.render(buf) == history

    def test_a_tool_pair_dropped_together_is_pruned_together(self) -> None:
        buf = Buffer()
        history = openai_history()
        openai.sync_messages(buf, history)
        report = openai.sync_messages(buf, [*history[:2], *history[4:]])
        assert set(report.removed) == {"c1", "c1#result"}
        openai.validate(openai.render(buf))


class TestSummary:
    def test_a_summary_in_place_of_messages_is_a_summarize(self) -> None:
        buf = Buffer()
        history: list[dict[str, Any]] = [
            {"role": "system", "content": "You are terse."},
            {"role": "assistant", "content": "step one done"},
            {"role": "assistant", "content": "step two done"},
            {"role": "assistant", "content": "step three running"},
        ]
        openai.sync_messages(buf, history)
        summary = {"role": "assistant", "content": "Summary: steps one and two done."}
        report = openai.sync_messages(buf, [history[0], summary, history[3]])
        assert len(report.removed) == 2
        window = openai.render(buf, tombstone_notes=False)
        assert [m["content"] for m in window] == [
            "You are terse.",
            summary["content"],
            "step three running",
        ]
        assert buf.head().entries()[1].kind is Kind.REASONING

    def test_a_summary_of_protected_messages_is_refused(self) -> None:
        buf = Buffer()
        history: list[dict[str, Any]] = [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "never restart db-0"},
            {"role": "assistant", "content": "step one done"},
            {"role": "assistant", "content": "step two running"},
        ]
        openai.sync_messages(buf, history)
        summary = {"role": "assistant", "content": "Summary: nothing important."}
        report = openai.sync_messages(buf, [history[0], summary, history[3]])
        assert report.removed == () and len(report.refused) == 2
        assert any(e.kind is EscalationKind.REFUSED_EDIT for e in report.escalations)
        assert [m["content"] for m in openai.render(buf)] == [m["content"] for m in history]


class TestContentKeys:
    """Issue 21, defect 8."""

    @pytest.mark.parametrize("fresh", [False, True], ids=["same process", "new process"])
    def test_a_pruned_message_sent_back_as_an_sdk_dump_is_not_re_appended(
        self, fresh: bool
    ) -> None:
        history = [
            {"role": "user", "content": "check"},
            {"role": "assistant", "content": "stale plan"},
        ]
        buf = Buffer()
        openai.sync_messages(buf, history)
        buf.prune([buf.head().entries()[1].id], reason="superseded")
        dumped = {
            **history[1],
            "refusal": None,
            "audio": None,
            "function_call": None,
            "tool_calls": None,
            "annotations": [],
        }
        if fresh:
            buf2 = Buffer()
            openai.append_messages(buf2, history)
            buf2.prune([buf2.head().entries()[1].id], reason="superseded")
            buf = buf2
        version = buf.version
        report = openai.sync_messages(buf, [history[0], dumped])
        assert (report.appended, report.tombstoned) == ((), (1,))
        assert buf.version == version and len(buf) == 1

    def test_identical_messages_do_not_shift_when_a_pruned_copy_disappears(self) -> None:
        ack = {"role": "assistant", "content": "ok"}
        history = [
            {"role": "user", "content": "go"},
            ack,
            {"role": "user", "content": "again"},
            ack,
        ]
        buf = Buffer()
        openai.append_messages(buf, history)
        first = buf.head().entries()[1].id
        second = buf.head().entries()[3].id
        buf.prune([first], reason="superseded")
        # the framework follows the window: the pruned copy is gone from it
        following = [history[0], history[2], ack]
        report = openai.sync_messages(buf, following)
        assert (report.held, report.tombstoned, report.appended) == ((0, 1, 2), (), ())
        assert second in buf.head().live
        # and a new identical message is new
        report = openai.sync_messages(buf, [*following, {"role": "user", "content": "more"}, ack])
        assert report.appended == (3, 4)
        assert len(buf) == 5


class TestNoOpSync:
    @pytest.mark.parametrize("api", ["openai", "responses", "anthropic"])
    def test_the_same_history_again_publishes_nothing(self, api: str) -> None:
        from quiesce.bench.sync_render import history, measure

        msgs, system = history(api, 60)
        buf = Buffer()
        module = {"openai": openai, "responses": responses, "anthropic": anthropic}[api]
        kwargs = {"system": system} if api == "anthropic" else {}
        first = module.sync_messages(buf, msgs, **kwargs)
        assert first.appended[:1] == (0,) or api == "anthropic"
        version, window = buf.version, module.render(buf)
        again = module.sync_messages(buf, msgs, **kwargs)
        assert again.appended == () and buf.version == version
        assert len(again.held) == len(msgs)
        rendered = module.render(buf)
        assert rendered == window and rendered is not window
        # the rendered window is the caller's to change: the cache keeps its own copy
        (rendered["messages"] if api == "anthropic" else rendered).clear()
        assert module.render(buf) == window
        (figure,) = measure((40,), (api,), repeat=1, budget_s=0.001)
        assert figure.api == api and figure.messages <= 40 and figure.ratio > 0


class TestMergedTurnsFedBack:
    def test_anthropic_turns_merged_by_pruning_are_recognised(self) -> None:
        """Pruning the assistant turn between two user turns merges them in
        the window; fed back, the merged turn is those two messages, not a
        new one."""
        msgs: list[dict[str, Any]] = [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "noise"},
            {"role": "user", "content": "second"},
            {"role": "assistant", "content": "ok"},
        ]
        buf = Buffer()
        anthropic.sync_messages(buf, msgs)
        noise = next(e.id for e in buf.head().entries() if e.body == "noise")
        buf.prune([noise], reason="noise")
        size = len(buf)
        for n in range(3):
            window = anthropic.render(buf)["messages"]
            assert len(window) == 2 + n
            report = anthropic.sync_messages(buf, [*window, {"role": "user", "content": f"t{n}"}])
            assert report.appended == (len(window),) and report.refused == ()
            assert len(buf) == size + n + 1
        bodies = [e.body for e in buf.head().entries()]
        assert bodies == ["first", "second", "ok", "t0", "t1", "t2"]
