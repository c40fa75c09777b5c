"""A render that reads only the tail its own syncs appended gives the whole render.

The integrations' render keeps what it built and, when only this sync
state's admissions moved the buffer since (its tracked tail), reads just the
appended entries instead of the whole window; a checkpointer's copies are
checked against flat lists of the last synced history instead of the old
objects. Each test drives those fast paths through a seeded script that
mixes what defeats them (another writer's append, a stale mark, a prune, a
framework edit, a copy that differs in one field) and checks every render
against the uncached one (``render_messages(snap)`` without the buffer) and
every sync against what the buffer must then hold.

LangChain's sync is plain code (no loop); the AutoGen context is anyio code
with no agent loop: its tests run on asyncio **and** trio.
"""

from __future__ import annotations

import random

import pytest
from autogen_core import FunctionCall
from autogen_core.models import (
    AssistantMessage,
    FunctionExecutionResult,
    FunctionExecutionResultMessage,
    LLMMessage,
    UserMessage,
)
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from quiesce import Buffer, Entry, Kind
from quiesce.integrations import _store
from quiesce.integrations import autogen as ag
from quiesce.integrations.langchain import render_messages, sync_messages


def _copies(history: list[BaseMessage]) -> list[BaseMessage]:
    """What a checkpointer hands back: an equal copy of every message."""
    return [m.model_copy(deep=True) for m in history]


def _live(buf: Buffer, entry_id: str) -> bool:
    with buf.snapshot() as snap:
        return entry_id in snap


def _texts(messages: list[BaseMessage]) -> list[str]:
    return [str(m.text) for m in messages]


def _corrected_is_an_edit(buf: Buffer, history: list[BaseMessage], i: int) -> None:
    """A copy of ``history`` whose message ``i`` (``AIMessage("answer i",
    id="ai")``) says "answer i, corrected": synced, it is a ``Rewrite`` of
    that entry (an ``edit`` record, nothing appended) and renders so."""
    changed = _copies(history)
    changed[i] = AIMessage(f"answer {i}, corrected", id=f"a{i}")
    report = sync_messages(buf, changed)
    assert report.appended == ()
    with buf.snapshot() as snap:
        assert snap[f"a{i}"].body == f"answer {i}, corrected"
        messages, _ = render_messages(snap, buffer=buf)
    assert _texts(messages)[i] == f"answer {i}, corrected"
    assert [r.op for r in buf.log][-1] == "edit"


class TestLangChainTail:
    @pytest.mark.parametrize("seed", range(6))
    def test_cached_render_is_the_whole_render(self, seed: int) -> None:
        """Turns of copies plus a new message, with other writers between
        some of them: after each sync the cached render (tracked tail or
        not) equals the render without a cache, message for message."""
        rng = random.Random(seed)
        buf = Buffer()
        history: list[BaseMessage] = []
        for t in range(30):
            history = [*_copies(history), HumanMessage(f"user {t}", id=f"h{t}")]
            if rng.random() < 0.5:
                history.append(AIMessage(f"answer {t}", id=f"a{t}"))
            sync_messages(buf, history)
            r = rng.random()
            if r < 0.15:
                buf.append(Entry(f"x{t}", Kind.REASONING, f"another writer {t}"))
            elif r < 0.3 and _live(buf, f"a{t - 2}"):
                buf.mark_stale(f"a{t - 2}", "superseded")
            elif r < 0.4 and _live(buf, f"a{t - 3}"):
                buf.prune([f"a{t - 3}"], reason="old")
            with buf.snapshot() as snap:
                cached, note = render_messages(snap, buffer=buf)
                whole, whole_note = render_messages(snap)
            assert cached == whole
            assert note == whole_note
            _scramble(cached, rng)  # the caller's own list: the next render is unchanged

    def test_a_copy_changed_in_one_field_is_an_edit(self) -> None:
        """A checkpointer's copy whose content changed under its id, deep in
        the history, is still a ``Rewrite`` of that entry (the flat check of
        the copies falls back to the message-by-message diff)."""
        buf = Buffer()
        history: list[BaseMessage] = [AIMessage(f"answer {i}", id=f"a{i}") for i in range(300)]
        sync_messages(buf, history)
        sync_messages(buf, _copies(history))  # the flat lists are made once
        _corrected_is_an_edit(buf, history, 200)

    def test_a_copy_with_another_extra_field_is_read_again(self) -> None:
        """An extra field (``__pydantic_extra__``) is part of ``==``: a copy
        that differs only there is not taken for the message synced at its
        place, and the sync reads it again (it holds the same entry)."""
        buf = Buffer()
        history: list[BaseMessage] = [HumanMessage(f"user {i}", id=f"h{i}") for i in range(5)]
        sync_messages(buf, history)
        state = _store.state_of(buf, "langchain")
        copies = _copies(history)
        copies[3] = HumanMessage("user 3", id="h3", flagged=True)
        assert copies[3] != history[3]
        before = buf.version
        report = sync_messages(buf, copies)
        assert report.held == (0, 1, 2, 3, 4)
        assert buf.version == before
        assert state.prefix == 0  # not one flat run of equal copies

    def test_copies_every_turn_are_checked_against_the_objects_kept(self) -> None:
        """A checkpointer hands a new copy of every message every turn: the
        copies take the objects' places only on the syncs that are the 1st,
        2nd, 3rd, 5th, 9th... of the run (O(log turns) times); on the others
        quiesce keeps the objects it took and holds nothing of the turn's
        copies. Every sync is still one equal-copies prefix, and an edit deep
        in the history is still a ``Rewrite``."""
        buf = Buffer()
        history: list[BaseMessage] = [AIMessage(f"answer {i}", id=f"a{i}") for i in range(300)]
        sync_messages(buf, history)
        state = _store.state_of(buf, "langchain")
        kept: list[BaseMessage] = history
        took = []
        for _ in range(9):
            copies = _copies(history)
            report = sync_messages(buf, copies)
            assert report.appended == () and report.held == tuple(range(300))
            assert state.prefix == 300
            flat = state.flat
            assert flat is not None
            assert all(s.obj is a for s, a in zip(state.seen, flat.objs, strict=True))
            if flat.objs[0] is copies[0]:
                assert all(a is b for a, b in zip(flat.objs, copies, strict=True))
                kept = copies
                took.append(True)
            else:
                assert all(a is b for a, b in zip(flat.objs, kept, strict=True))
                assert not any(a is b for a, b in zip(flat.objs, copies, strict=True))
                took.append(False)
        assert took == [True, True, True, False, True, False, False, False, True]
        _corrected_is_an_edit(buf, history, 250)

    def test_copies_then_the_same_objects_is_the_identity_pass_again(self) -> None:
        """After a run of copies, a history handed back as the same objects
        is one pass of identity checks again within as many syncs as the
        run was long (the next sync that takes the copies)."""
        buf = Buffer()
        history: list[BaseMessage] = [HumanMessage(f"user {i}", id=f"h{i}") for i in range(40)]
        sync_messages(buf, history)
        state = _store.state_of(buf, "langchain")
        for _ in range(5):
            history = _copies(history)
            sync_messages(buf, history)
        for _ in range(6):
            sync_messages(buf, history)  # the same objects from now on
        flat = state.flat
        assert flat is not None
        assert flat.copies == 0
        assert all(a is b for a, b in zip(flat.objs, history, strict=True))

    def test_a_history_copied_once_is_then_the_same_objects(self) -> None:
        """Copies handed over once and then kept by the framework take the
        objects' places the first time: the next sync of those very objects
        is the identity pass again (no copies counted)."""
        buf = Buffer()
        history: list[BaseMessage] = [HumanMessage(f"user {i}", id=f"h{i}") for i in range(50)]
        sync_messages(buf, history)
        state = _store.state_of(buf, "langchain")
        copies = _copies(history)
        sync_messages(buf, copies)
        sync_messages(buf, [*copies, HumanMessage("more", id="more")])
        flat = state.flat
        assert flat is not None
        assert flat.copies == 0
        assert all(a is b for a, b in zip(flat.objs, copies, strict=False))
        with buf.snapshot() as snap:
            messages, _ = render_messages(snap, buffer=buf)
        assert _texts(messages) == [*(f"user {i}" for i in range(50)), "more"]


class TestAutoGenTail:
    @pytest.mark.anyio
    @pytest.mark.parametrize("seed", range(4))
    async def test_get_messages_is_the_whole_render(self, seed: int) -> None:
        """``add_message`` turns with other writers between some of them:
        each ``get_messages`` equals the uncached render of the same
        snapshot. (asyncio and trio: no agent loop.)"""
        rng = random.Random(seed)
        buf = Buffer()
        ctx = ag.QuiesceChatCompletionContext(buf)
        added: list[str] = []
        for t in range(30):
            message: LLMMessage = (
                UserMessage(content=f"user {t}", source="user")
                if t % 2 == 0
                else AssistantMessage(content=f"answer {t}", source="assistant")
            )
            await ctx.add_message(message)
            with buf.snapshot() as snap:
                added.append(next(e.id for e in reversed(snap.entries())))
            r = rng.random()
            if r < 0.2:
                buf.append(Entry(f"x{t}", Kind.REASONING, f"another writer {t}"))
            elif r < 0.35 and t % 2 == 1:
                buf.prune([added[-1]], reason="old")
            elif r < 0.5 and t % 2 == 0 and t > 1 and _live(buf, added[-2]):
                buf.mark_stale(added[-2], "superseded")  # an answer
            got = await ctx.get_messages()
            with buf.snapshot() as snap:
                assert snap.version == buf.version
                whole = ag.render_messages(snap)
            assert got == whole
            _scramble(got, rng)  # the caller's own list: the next render is unchanged

    @pytest.mark.anyio
    @pytest.mark.parametrize("seed", range(4))
    async def test_calls_and_results_across_turns(self, seed: int) -> None:
        """Calls whose results come a turn later (or never: pruned), the
        list handed out mutated by its caller each turn: every
        ``get_messages`` (the paired prefix resumed from its memo) equals
        the uncached render, every call answered."""
        rng = random.Random(seed)
        buf = Buffer()
        ctx = ag.QuiesceChatCompletionContext(buf)
        open_call: str | None = None
        for t in range(40):
            r = rng.random()
            message: LLMMessage
            if open_call is not None and r < 0.6:
                result = FunctionExecutionResult(content=f"out {t}", name="f", call_id=open_call)
                message = FunctionExecutionResultMessage(content=[result])
                open_call = None
            elif open_call is None and r < 0.4:
                open_call = f"call_{t}"
                fc = FunctionCall(id=open_call, arguments='{"x": 1}', name="f")
                message = AssistantMessage(content=[fc], source="assistant")
            else:
                message = UserMessage(content=f"user {t}", source="user")
            await ctx.add_message(message)
            got = await ctx.get_messages()
            with buf.snapshot() as snap:
                whole = ag.render_messages(snap)
            assert got == whole
            calls = {
                fc.id
                for m in got
                if isinstance(m, AssistantMessage) and isinstance(m.content, list)
                for fc in m.content
            }
            answered = {
                r.call_id
                for m in got
                if isinstance(m, FunctionExecutionResultMessage)
                for r in m.content
            }
            assert calls <= answered
            _scramble(got, rng)


def _scramble(messages: list[object], rng: random.Random) -> None:
    """What a caller may do to the list it was handed: reorder, drop, add."""
    rng.shuffle(messages)
    if messages:
        del messages[0]
    messages.append(UserMessage(content="not in the buffer", source="user"))
