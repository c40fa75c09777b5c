"""``append_stream`` of the three adapters: the SDKs' own event streams into
open entries (issue 24, item 3).

Differential: generated outputs of each API (text, refusals, several tool
calls, thinking with a signature, redacted thinking, reasoning with a
summary and encrypted content) are rendered into the SDK's own event types
(or their dicts), cut into random chunkings, and fed both to
``append_stream`` and to the SDK's own accumulator (``ChatCompletionStreamState``,
``ResponseStreamState``, ``accumulate_event``): the returns are equal, the
entries are ``append_messages``'s of the returned message, ``render`` equals
a whole append's and ``sync_messages`` afterwards appends nothing. A reader
pinning snapshots while the stream runs (asyncio and trio) sees only valid
requests, whole prefixes that only grow, and no partial tool call or
unsigned thinking. Aborted streams (cancelled, a broken iterator, an error
event, a malformed event) keep the text that arrived, marked interrupted,
and nothing the API would refuse.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stream_events as se
from quiesce import (
    Buffer,
    DuplicateEntry,
    Entry,
    InvalidArgument,
    InvalidType,
    Kind,
    SQLiteLog,
    open_buffer,
)
from quiesce.adapters import StreamFailed, anthropic, openai, responses

Json = dict[str, Any]

BACKENDS = ["asyncio", "trio"]

#: The three APIs: adapter, drawn outputs, events of an output, oracle, the
#: list ``append_messages`` takes for the returned value.
APIS: dict[str, tuple[Any, Any, Any, Any, Callable[[Any], list[Json]]]] = {
    "openai": (openai, se.chat_outputs(), se.chat_chunks, se.chat_oracle, lambda m: [m]),
    "anthropic": (
        anthropic,
        se.anthropic_outputs(),
        se.anthropic_events,
        se.anthropic_oracle,
        lambda m: [m],
    ),
    "responses": (
        responses,
        se.responses_outputs(),
        se.responses_events,
        se.responses_oracle,
        lambda items: list(items),
    ),
}


def check_request(api: str, window: Any) -> None:
    """``window`` is a request the API accepts: the adapter's ``validate``,
    plus what the APIs refuse of streamed output — an empty text block, a
    thinking block without a signature, a reasoning item without its
    final form."""
    if api == "anthropic":
        anthropic.validate(window["messages"], system=window.get("system"))
        for m in window["messages"]:
            for block in m["content"] if isinstance(m["content"], list) else ():
                if block["type"] == "text":
                    assert block["text"], window
                if block["type"] == "thinking":
                    assert block.get("signature"), window
    elif api == "openai":
        openai.validate(window)
    else:
        responses.validate(window)
        for item in window:
            if item.get("type") == "reasoning":
                assert item.get("status", "completed") == "completed" or "summary" in item


def json_key(value: Any) -> str:
    import json

    return json.dumps(value, sort_keys=True, default=str)


def feed(events: Sequence[Any], *, pause: bool = True) -> AsyncIterator[Any]:
    """``events`` as an async stream that yields to the loop between events,
    as a network stream does."""

    async def gen() -> AsyncIterator[Any]:
        for e in events:
            if pause:
                await anyio.lowlevel.checkpoint()
            yield e

    return gen()


def stream_entries(buf: Buffer, before: set[str]) -> list[Entry]:
    with buf.snapshot() as snap:
        return [e for e in snap if e.id not in before]


def same_entries(got: list[Entry], want: list[Entry], exact_ids: bool) -> None:
    """``got`` are ``want`` (what ``append_messages`` stores) — ids included
    when ``exact_ids``, else up to the generated ids (mapped in order)."""
    assert len(got) == len(want), (got, want)
    ids = {w.id: g.id for g, w in zip(got, want, strict=True)}
    msgs = {w.meta.get("msg"): g.meta.get("msg") for g, w in zip(got, want, strict=True)}
    for g, w in zip(got, want, strict=True):
        if exact_ids:
            assert g.id == w.id
        elif "#" not in w.id:
            assert g.id == w.id  # a foreign id (tool call, tool use) is kept
        assert (g.kind, g.body, g.content, g.turn, g.key) == (
            w.kind,
            w.body,
            w.content,
            w.turn,
            w.key,
        )
        assert g.refs == tuple(ids.get(r, r) for r in w.refs)
        meta = dict(w.meta)
        meta["msg"] = msgs[meta.get("msg")]
        assert dict(g.meta) == meta
        assert not g.streaming


async def run_stream(api: str, output: Any, cut: list[int], objects: bool) -> None:
    """The differential property for one output and chunking."""
    adapter, _, events_of, oracle, as_list = APIS[api]
    events = events_of(output, cut, objects=objects)
    expected = oracle(events_of(output, cut))  # the SDK takes its own objects
    buf = Buffer()
    if api == "anthropic":
        history: list[Json] = [{"role": "user", "content": "hello"}]
    else:
        history = [{"role": "user", "content": "hello"}]
    adapter.sync_messages(buf, history)
    before = {e.id for e in stream_entries(buf, set())}
    got = await adapter.append_stream(buf, feed(events, pause=False) if objects else events)
    assert got == expected
    ref = Buffer()
    adapter.sync_messages(ref, history)
    adapter.append_messages(ref, as_list(got))
    same_entries(stream_entries(buf, before), stream_entries(ref, before), api == "responses")
    assert adapter.render(buf) == adapter.render(ref)
    report = adapter.sync_messages(buf, history + as_list(got))
    assert report.appended == ()
    assert adapter.render(buf) == adapter.render(ref)
    buf._check(expect_no_pins=True)


SMALL = settings(max_examples=25)


class TestDifferential:
    """``append_stream`` returns what the SDK's accumulator returns, and
    stores what ``append_messages`` of that would (asyncio and trio)."""

    @pytest.mark.parametrize("backend", BACKENDS)
    @pytest.mark.parametrize("api", sorted(APIS))
    @SMALL
    @given(data=st.data())
    def test_matches_the_sdk_accumulator(self, api: str, backend: str, data: st.DataObject) -> None:
        output = data.draw(APIS[api][1], label="output")
        cut = data.draw(se.cuts, label="cuts")
        objects = data.draw(st.booleans(), label="objects")
        anyio.run(run_stream, api, output, cut, objects, backend=backend)

    @pytest.mark.slow
    @pytest.mark.parametrize("backend", BACKENDS)
    @pytest.mark.parametrize("api", sorted(APIS))
    @settings(max_examples=400)
    @given(data=st.data())
    def test_matches_the_sdk_accumulator_long(
        self, api: str, backend: str, data: st.DataObject
    ) -> None:
        output = data.draw(APIS[api][1], label="output")
        cut = data.draw(se.cuts, label="cuts")
        objects = data.draw(st.booleans(), label="objects")
        anyio.run(run_stream, api, output, cut, objects, backend=backend)


async def read_along(api: str, output: Any, cut: list[int]) -> int:
    """Stream into an ``open_buffer()`` while a reader pins the head at every
    turn of the loop; check every snapshot; return the versions seen."""
    adapter, _, events_of, _, as_list = APIS[api]
    events = events_of(output, cut)
    seen: list[tuple[int, dict[str, str], Any]] = []
    done = anyio.Event()
    async with open_buffer() as buf:
        got: list[Any] = []

        async def produce() -> None:
            got.append(await adapter.append_stream(buf, feed(events)))
            done.set()

        async def read() -> None:
            while not done.is_set():
                with buf.snapshot() as snap:
                    bodies = {e.id: e.body for e in snap}
                    calls = {e.id: e.content for e in snap if e.kind is Kind.TOOL_CALL}
                    window = adapter.render(snap)
                    seen.append((snap.version, bodies, window))
                    check_request(api, window)
                    assert all(not e.streaming or e.kind is not Kind.TOOL_CALL for e in snap)
                    seen_calls.append(calls)
                await anyio.lowlevel.checkpoint()

        seen_calls: list[dict[str, Any]] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            tg.start_soon(produce)
        with buf.snapshot() as snap:
            final = {e.id: e for e in snap}
        ref = Buffer()
        adapter.append_messages(ref, as_list(got[0]))
        assert adapter.render(buf) == adapter.render(ref)
    last: dict[str, str] = {}
    for _version, bodies, _window in seen:
        for eid, body in bodies.items():
            assert final[eid].body.startswith(body)  # a whole prefix of the final text
            assert body.startswith(last.get(eid, ""))  # prefixes only grow
        last = bodies
    for calls in seen_calls:
        for eid, content in calls.items():
            assert content == final[eid].content  # a call is only ever whole
    if api == "openai":
        final_text = (got[0].get("content") or got[0].get("refusal") or "").replace("\n", "")
        for _v, _b, window in seen:
            shown = [m for m in window if m["role"] == "assistant"]
            if shown and isinstance(shown[-1].get("content"), str):
                assert final_text.startswith(shown[-1]["content"].replace("\n", ""))
    return len({v for v, _, _ in seen})


class TestReaders:
    """A reader pinning snapshots while the stream runs sees a valid request
    in every one, whole prefixes of the final text that only grow, and no
    partial tool call or unsigned thinking (asyncio and trio)."""

    @pytest.mark.parametrize("backend", BACKENDS)
    @pytest.mark.parametrize("api", sorted(APIS))
    @settings(max_examples=10)
    @given(data=st.data())
    def test_every_snapshot_is_a_valid_prefix(
        self, api: str, backend: str, data: st.DataObject
    ) -> None:
        output = data.draw(APIS[api][1], label="output")
        cut = data.draw(se.cuts, label="cuts")
        versions = anyio.run(read_along, api, output, cut, backend=backend)
        assert versions >= 1  # (the long test below checks that many are seen)

    @pytest.mark.anyio
    async def test_the_reader_sees_the_text_grow(self) -> None:
        """One long answer in many deltas: the reader sees many distinct
        prefixes, the last the whole text."""
        message = {"role": "assistant", "content": "the answer is forty-two " * 20}
        assert await read_along("openai", message, list(range(0, 480, 7))) > 30


# -- aborted streams --------------------------------------------------------------


THINKING = {
    "role": "assistant",
    "content": [
        {"type": "thinking", "thinking": "let me think about the weather", "signature": "sig-1"},
        {"type": "text", "text": "It is sunny in Paris today."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
    ],
}

CHAT = {
    "role": "assistant",
    "content": "Let me look that up for you.",
    "tool_calls": [
        {
            "index": 0,
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        },
        {
            "index": 1,
            "id": "call_2",
            "type": "function",
            "function": {"name": "get_time", "arguments": '{"tz": "CET"}'},
        },
    ],
}

ITEMS = [
    {
        "id": "rs_1",
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "the user wants the weather"}],
        "encrypted_content": "enc-1",
    },
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [
            {"type": "output_text", "text": "Checking the weather now.", "annotations": []}
        ],
    },
    {
        "id": "fc_1",
        "type": "function_call",
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
        "status": "completed",
    },
]

OUTPUTS = {"openai": CHAT, "anthropic": THINKING, "responses": ITEMS}
CUT = list(range(0, 60, 4))


def events_for(api: str) -> list[Any]:
    return APIS[api][2](OUTPUTS[api], CUT)  # type: ignore[no-any-return]


def check_aborted(api: str, buf: Buffer, reason: str) -> list[Entry]:
    """Every streamed entry is finished; the interrupted ones are marked
    stale with ``reason``; the window is a valid request; every call in it
    is whole."""
    adapter = APIS[api][0]
    with buf.snapshot() as snap:
        entries = list(snap)
        marked = [e for e in entries if snap.mark(e.id) is not None]
        for e in entries:
            assert not e.streaming
        for e in marked:
            mark = snap.mark(e.id)
            assert mark is not None and mark.reason == reason
        window = adapter.render(snap)
    check_request(api, window)
    return marked


async def abort_at(api: str, k: int, how: str) -> tuple[Buffer, BaseException | None]:
    """Stream ``api``'s fixed output into a buffer and interrupt it after
    ``k`` events by ``how``: ``cancel`` (the caller's scope is cancelled
    while the stream waits) or ``raise`` (the iterator breaks)."""
    adapter = APIS[api][0]
    events = events_for(api)
    buf = Buffer()
    arrived = anyio.Event()

    async def gen() -> AsyncIterator[Any]:
        for n, e in enumerate(events):
            if n == k:
                if how == "raise":
                    raise ConnectionResetError("the connection dropped")
                arrived.set()
                await anyio.sleep_forever()
            await anyio.lowlevel.checkpoint()
            yield e

    error: BaseException | None = None
    if how == "cancel":
        async with anyio.create_task_group() as tg:
            tg.start_soon(adapter.append_stream, buf, gen())
            await arrived.wait()
            tg.cancel_scope.cancel()
    else:
        try:
            await adapter.append_stream(buf, gen())
        except ConnectionResetError as exc:
            error = exc
    return buf, error


class TestAborted:
    """An interrupted stream leaves the text that arrived, marked
    interrupted, and nothing the API would refuse (asyncio and trio)."""

    @pytest.mark.anyio
    @pytest.mark.parametrize("api", sorted(APIS))
    async def test_cancelled_at_every_event(self, api: str) -> None:
        n = len(events_for(api))
        for k in range(1, n):
            buf, _ = await abort_at(api, k, "cancel")
            check_aborted(api, buf, "stream interrupted: " + _cancelled_name())

    @pytest.mark.anyio
    @pytest.mark.parametrize("api", sorted(APIS))
    async def test_broken_iterator_at_every_event(self, api: str) -> None:
        n = len(events_for(api))
        for k in range(1, n):
            buf, error = await abort_at(api, k, "raise")
            assert isinstance(error, ConnectionResetError)
            check_aborted(api, buf, "stream interrupted: ConnectionResetError")

    @pytest.mark.anyio
    async def test_thinking_cut_before_its_signature_is_never_rendered(self) -> None:
        """The thinking block's text arrived, its signature did not: the
        entry stays (aborted, marked), the window shows no thinking."""
        events = events_for("anthropic")
        k = next(
            n
            for n, e in enumerate(events)
            if getattr(e, "delta", None) is not None and e.delta.type == "signature_delta"
        )
        buf, _ = await abort_at("anthropic", k, "raise")
        marked = check_aborted("anthropic", buf, "stream interrupted: ConnectionResetError")
        assert [e.body for e in marked] == ["let me think about the weather"]
        assert anthropic.render(buf) == {"messages": []}

    @pytest.mark.anyio
    async def test_text_that_arrived_stays_marked(self) -> None:
        """Cut in the middle of the text: its prefix stays and renders with a
        stale note; no tool call was appended."""
        events = events_for("openai")
        buf, _ = await abort_at("openai", 4, "raise")
        marked = check_aborted("openai", buf, "stream interrupted: ConnectionResetError")
        assert len(marked) == 1 and CHAT["content"].startswith(marked[0].body)  # type: ignore[union-attr]
        assert len(events) > 4
        window = openai.render(buf)
        assert window == [
            {
                "role": "assistant",
                "content": "[quiesce: stale at version 5: stream interrupted: "
                "ConnectionResetError]\n" + marked[0].body,
            }
        ]

    @pytest.mark.anyio
    async def test_complete_calls_stay_incomplete_ones_never_appear(self) -> None:
        """Cut in the second call's arguments: the first call (complete) is
        in the buffer and rendered with a stand-in result; the second is
        not there at all."""
        events = events_for("openai")
        k = (
            next(
                n
                for n, e in enumerate(events)
                if e.choices
                and e.choices[0].delta.tool_calls
                and e.choices[0].delta.tool_calls[0].index == 1
            )
            + 2
        )
        buf, _ = await abort_at("openai", k, "raise")
        check_aborted("openai", buf, "stream interrupted: ConnectionResetError")
        with buf.snapshot() as snap:
            calls = [e.id for e in snap if e.kind is Kind.TOOL_CALL]
        assert calls == ["call_1"]


def _cancelled_name() -> str:
    from anyio import get_cancelled_exc_class

    return get_cancelled_exc_class().__name__


# -- error events and malformed events ----------------------------------------


class TestErrors:
    """An error event is a ``StreamFailed``; a malformed event an
    ``InvalidArgument``/``InvalidType`` naming its position; either way what
    arrived stays, marked interrupted."""

    @pytest.mark.anyio
    async def test_anthropic_error_event(self) -> None:
        events = [
            *events_for("anthropic")[:5],
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        ]
        buf = Buffer()
        message = (
            "event 5: the stream reported an error: "
            "{'type': 'overloaded_error', 'message': 'Overloaded'}"
        )
        with pytest.raises(StreamFailed, match=f"^{re.escape(message)}$") as info:
            await anthropic.append_stream(buf, events)
        assert info.value.event == 5
        check_aborted("anthropic", buf, f"stream interrupted: {message}")

    @pytest.mark.anyio
    @pytest.mark.parametrize("kind", ["error", "response.failed", "response.incomplete"])
    async def test_responses_failure_events(self, kind: str) -> None:
        events = events_for("responses")
        deltas = [n for n, e in enumerate(events) if e.type == "response.output_text.delta"]
        k = deltas[1] + 1  # the message's text has begun
        if kind == "error":
            bad: Json = {
                "type": "error",
                "code": "server_error",
                "message": "boom",
                "param": None,
                "sequence_number": k,
            }
        else:
            status = "failed" if kind == "response.failed" else "incomplete"
            bad = {
                "type": kind,
                "sequence_number": k,
                "response": {**se._RESPONSE, "output": [], "status": status},
            }
        buf = Buffer()
        with pytest.raises(
            StreamFailed, match=rf"^event {k}: the stream reported {re.escape(kind)}: "
        ):
            await responses.append_stream(buf, [*events[:k], bad])
        with buf.snapshot() as snap:
            assert [e.id for e in snap] == ["rs_1", "msg_1"]
        check_aborted(
            "responses", buf, f"stream interrupted: event {k}: " + _failed_text(kind, buf)
        )

    @pytest.mark.anyio
    @pytest.mark.parametrize(
        ("api", "k", "bad", "error", "message"),
        [
            (
                "anthropic",
                3,
                {"type": "content_block_nonsense"},
                InvalidArgument,
                "event 3: unknown event type 'content_block_nonsense'",
            ),
            (
                "anthropic",
                3,
                {
                    "type": "content_block_delta",
                    "index": 4,
                    "delta": {"type": "text_delta", "text": "x"},
                },
                InvalidArgument,
                "event 3: content_block_delta: index 4 has no open block",
            ),
            (
                "anthropic",
                3,
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": "{"},
                },
                InvalidArgument,
                "event 3: content_block_delta: a input_json_delta for the thinking block 0",
            ),
            (
                "anthropic",
                3,
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "thinking_delta", "thinking": 7},
                },
                InvalidType,
                "event 3: delta.thinking must be a str",
            ),
            (
                "openai",
                3,
                {"id": "chatcmpl-1", "choices": [{"index": 1, "delta": {"content": "x"}}]},
                InvalidArgument,
                "event 3: choice index 1: append_stream reads one choice (n=1)",
            ),
            (
                "openai",
                3,
                {"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"content": 5}}]},
                InvalidType,
                "event 3: delta.content must be a str, not int",
            ),
            (
                "responses",
                5,
                {
                    "type": "response.output_text.delta",
                    "output_index": 7,
                    "content_index": 0,
                    "delta": "x",
                },
                InvalidArgument,
                "event 5: output_index 7 has no open item",
            ),
            (
                "responses",
                5,
                {"type": "response.something_new"},
                InvalidArgument,
                "event 5: unknown event type 'response.something_new'",
            ),
            (
                "responses",
                5,
                {"type": "response.function_call_arguments.delta", "output_index": 0, "delta": "x"},
                InvalidArgument,
                "event 5: a response.function_call_arguments.delta for the reasoning item 0",
            ),
        ],
    )
    async def test_malformed_event_aborts(
        self, api: str, k: int, bad: Json, error: type[Exception], message: str
    ) -> None:
        adapter = APIS[api][0]
        events = [*events_for(api)[:k], bad]
        buf = Buffer()
        with pytest.raises(error, match=f"^{re.escape(message)}$"):
            await adapter.append_stream(buf, events)
        marked = check_aborted(api, buf, f"stream interrupted: {message}")
        assert marked  # the text that arrived stays, marked

    @pytest.mark.anyio
    async def test_bad_arguments_change_nothing(self) -> None:
        buf = Buffer()
        with pytest.raises(
            InvalidType,
            match=r"^buf must be a Buffer or an AsyncBuffer with open_stream, not list$",
        ):
            await openai.append_stream([], [])  # type: ignore[arg-type]
        with pytest.raises(
            InvalidType,
            match=r"^events must be an iterable or async iterable of SDK events or dicts, not int$",
        ):
            await openai.append_stream(buf, 5)
        with pytest.raises(
            InvalidArgument, match=r"^readmit must be 'refuse', 'record' or a callable, not 'x'$"
        ):
            await anthropic.append_stream(buf, [], readmit="x")  # type: ignore[arg-type]
        with pytest.raises(
            InvalidArgument, match=r"^event 0: the stream ended before message_start$"
        ):
            await anthropic.append_stream(buf, [])
        assert buf.version == 0


class TestEventErrors:
    """Every reader names the event its error comes from: an event without
    a type, and a part the adapter's own reader refuses once the stream
    completed it (a tool call, a block, an item: its ``message 0:`` /
    ``item 0:`` renamed to the event), for each API alike; nothing of the
    refused part is appended."""

    @pytest.mark.anyio
    @pytest.mark.parametrize(
        ("api", "events", "message"),
        [
            (
                "openai",
                [
                    {
                        "id": "c1",
                        "choices": [
                            {
                                "index": 0,
                                "delta": {
                                    "role": "assistant",
                                    "tool_calls": [
                                        {
                                            "index": 0,
                                            "id": "call_1",
                                            "type": "function",
                                            "function": {"arguments": "{}"},
                                        }
                                    ],
                                },
                            }
                        ],
                    }
                ],
                "event 1: tool_calls[0].function.name must be a str, not NoneType",
            ),
            (
                "anthropic",
                [
                    {
                        "type": "message_start",
                        "message": {
                            "id": "msg_x",
                            "role": "assistant",
                            "content": [{"type": "redacted_thinking"}],
                        },
                    }
                ],
                "event 0: content[0].data must be a str, not NoneType",
            ),
            (
                "responses",
                [
                    {
                        "type": "response.output_item.added",
                        "output_index": 0,
                        "item": {"type": "function_call", "call_id": "call_1", "arguments": ""},
                    },
                    {
                        "type": "response.output_item.done",
                        "output_index": 0,
                        "item": {"type": "function_call", "call_id": "call_1", "arguments": "{}"},
                    },
                ],
                "event 1: name must be a str, not NoneType",
            ),
            (
                "anthropic",
                [{"type": "message_start", "message": {"id": "m", "role": "assistant"}}, 5],
                "event 1: must be a stream event with a type, not int",
            ),
            ("responses", [{"nope": 1}], "event 0: must be a stream event with a type, not dict"),
        ],
    )
    async def test_the_error_names_its_event(
        self, api: str, events: list[Any], message: str
    ) -> None:
        buf = Buffer()
        with pytest.raises(InvalidType, match=f"^{re.escape(message)}$"):
            await APIS[api][0].append_stream(buf, events)
        assert buf.version == 0


def _failed_text(kind: str, buf: Buffer) -> str:
    with buf.snapshot() as snap:
        mark = snap.mark("msg_1")
    assert mark is not None
    return mark.reason.split(": ", 2)[2]


# -- buffers ----------------------------------------------------------------------


class TestBuffers:
    """``append_stream`` on ``open_buffer()``'s buffer with a durable log:
    the stream is recovered whole after a reopen (asyncio and trio)."""

    @pytest.mark.anyio
    @pytest.mark.parametrize("api", sorted(APIS))
    async def test_durable_stream_recovers(self, api: str, tmp_path: Path) -> None:
        adapter, _, _, oracle, as_list = APIS[api]
        events = events_for(api)
        path = tmp_path / "log.db"
        async with open_buffer(log=SQLiteLog(path)) as buf:
            got = await adapter.append_stream(buf, feed(events), turn=3)
            assert got == oracle(events)
            window = adapter.render(buf)
            await buf.aflush()
        buf.sink.close()  # one writer per log file: close before reopening
        again = Buffer(log=SQLiteLog(path))
        try:
            assert adapter.render(again) == window
            with again.snapshot() as snap:
                assert all(e.turn == 3 and not e.streaming for e in snap)
            again._check(expect_no_pins=True)
        finally:
            again.sink.close()
        ref = Buffer()
        adapter.append_messages(ref, as_list(got), turn=3)
        assert adapter.render(ref) == window


# -- sync of a streamed message, in this process and in the next -------------------


def forget_this_process() -> None:
    """What a new process starts with: no adapter remembers a message it
    rendered (the process-wide cache of merged renders is empty)."""
    from quiesce.adapters import _notes

    _notes._RENDERED.clear()


async def stream_then_reopen(api: str, output: Any, cut: list[int], path: Path) -> None:
    """Stream ``output`` into a durable buffer after a history; a sync of
    ``history + final`` appends nothing, and so does the same sync on the
    buffer reopened from its log; both render what ``append_messages`` of
    the final message renders."""
    adapter, _, events_of, _, as_list = APIS[api]
    history: list[Json] = [{"role": "user", "content": "hello"}]
    buf = Buffer(log=SQLiteLog(path))
    try:
        adapter.sync_messages(buf, history)
        got = await adapter.append_stream(buf, feed(events_of(output, cut)))
        ref = Buffer()
        adapter.sync_messages(ref, history)
        adapter.append_messages(ref, as_list(got))
        window = adapter.render(ref)
        version = buf.version
        report = adapter.sync_messages(buf, history + as_list(got))
        assert report.appended == () and buf.version == version
        assert adapter.render(buf) == window
        buf.flush()
    finally:
        buf.sink.close()
    forget_this_process()
    again = Buffer(log=SQLiteLog(path))
    try:
        version = again.version
        report = adapter.sync_messages(again, history + as_list(got))
        assert report.appended == () and again.version == version, report
        assert len(report.held) == 1 + len(as_list(got))
        assert adapter.render(again) == window
        assert adapter.sync_messages(again, history + as_list(got)).appended == ()
    finally:
        again.sink.close()


class TestSyncAfterStream:
    """A streamed message given back to ``sync_messages`` is the entries
    the stream stored, not a new message: in the process that streamed it
    and in a later one that reopens the durable log (no duplicate after a
    restart), for generated outputs of each API (asyncio and trio)."""

    @pytest.mark.parametrize("backend", BACKENDS)
    @pytest.mark.parametrize("api", sorted(APIS))
    @settings(max_examples=4, deadline=None)
    @given(data=st.data())
    def test_sync_appends_nothing_after_a_reopen(
        self, api: str, backend: str, data: st.DataObject, tmp_path_factory: pytest.TempPathFactory
    ) -> None:
        output = data.draw(APIS[api][1], label="output")
        cut = data.draw(se.cuts, label="cuts")
        path = tmp_path_factory.mktemp("log") / "log.db"
        anyio.run(stream_then_reopen, api, output, cut, path, backend=backend)

    @pytest.mark.slow
    @pytest.mark.parametrize("backend", BACKENDS)
    @pytest.mark.parametrize("api", sorted(APIS))
    @settings(max_examples=100, deadline=None)
    @given(data=st.data())
    def test_sync_appends_nothing_after_a_reopen_long(
        self, api: str, backend: str, data: st.DataObject, tmp_path_factory: pytest.TempPathFactory
    ) -> None:
        output = data.draw(APIS[api][1], label="output")
        cut = data.draw(se.cuts, label="cuts")
        path = tmp_path_factory.mktemp("log") / "log.db"
        anyio.run(stream_then_reopen, api, output, cut, path, backend=backend)

    @pytest.mark.anyio
    async def test_a_new_process_recognises_the_streamed_message(self, tmp_path: Path) -> None:
        """The restart for real: a child process reopens the log of a
        streamed Chat Completions message and an Anthropic one and syncs
        each history ending with it: nothing appended."""
        import json
        import subprocess
        import sys

        finals: dict[str, Any] = {}
        for api, output in (
            ("openai", {"role": "assistant", "content": "It is sunny, 21 degrees."}),
            (
                "anthropic",
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "Look it up.", "signature": "sig-1"},
                        {"type": "text", "text": "It is sunny, 21 degrees."},
                    ],
                },
            ),
        ):
            adapter, _, events_of, _, _ = APIS[api]
            buf = Buffer(log=SQLiteLog(tmp_path / f"{api}.db"))
            try:
                adapter.sync_messages(buf, [{"role": "user", "content": "weather?"}])
                finals[api] = await adapter.append_stream(buf, events_of(output, [3, 9]))
                buf.flush()
            finally:
                buf.sink.close()
        child = (
            "import json, sys\n"
            "from quiesce import Buffer, SQLiteLog\n"
            "from quiesce.adapters import anthropic, openai\n"
            "finals = json.loads(sys.argv[2])\n"
            "out = {}\n"
            "for name, adapter in (('openai', openai), ('anthropic', anthropic)):\n"
            "    buf = Buffer(log=SQLiteLog(sys.argv[1] + '/' + name + '.db'))\n"
            "    history = [{'role': 'user', 'content': 'weather?'}, finals[name]]\n"
            "    out[name] = list(adapter.sync_messages(buf, history).appended)\n"
            "    buf.sink.close()\n"
            "print(json.dumps(out))\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", child, str(tmp_path), json.dumps(finals)],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        assert json.loads(done.stdout) == {"openai": [], "anthropic": []}


class TestUsedIds:
    """An id the buffer already uses — an item's, a tool call's — aborts the
    stream with a :class:`~quiesce.DuplicateEntry` naming the event that
    opened or completed it; what arrived before stays (open text marked
    interrupted), the entry that held the id is untouched (asyncio and
    trio)."""

    @pytest.mark.anyio
    @pytest.mark.parametrize(
        ("api", "used", "message"),
        [
            ("openai", "call_1", "event 14: entry id 'call_1' is already used"),
            ("anthropic", "toolu_1", "event 27: entry id 'toolu_1' is already used"),
            ("responses", "msg_1", "event 16: entry 'msg_1' is already in the buffer"),
        ],
    )
    async def test_a_used_id_aborts_naming_the_event(
        self, api: str, used: str, message: str
    ) -> None:
        adapter = APIS[api][0]
        buf = Buffer()
        held = Entry(used, Kind.REASONING, "held before the stream")
        buf.append(held)
        with pytest.raises(DuplicateEntry, match=f"^{re.escape(message)}$"):
            await adapter.append_stream(buf, feed(events_for(api)))
        with buf.snapshot() as snap:
            assert snap[used] == held
            assert not any(e.streaming for e in snap)
            for e in snap:
                if e.id != used and e.content is None:  # what was open: kept, marked
                    mark = snap.mark(e.id)
                    assert mark is not None and mark.reason == f"stream interrupted: {message}"
        buf._check(expect_no_pins=True)

    @pytest.mark.anyio
    async def test_a_reserved_call_id_names_its_own_event(self) -> None:
        """A Chat Completions tool call id with ``#`` is malformed at the
        chunk that carries it, not where the call completes."""
        chunks = [
            *events_for("openai")[:2],
            {
                "id": "chatcmpl-1",
                "choices": [
                    {
                        "index": 0,
                        "delta": {
                            "tool_calls": [
                                {
                                    "index": 0,
                                    "id": "c#9",
                                    "type": "function",
                                    "function": {"name": "f", "arguments": "{}"},
                                }
                            ]
                        },
                    }
                ],
            },
            events_for("openai")[-1],
        ]
        buf = Buffer()
        message = "event 2: tool_calls[0].id 'c#9' contains '#', which quiesce reserves"
        with pytest.raises(InvalidArgument, match=f"^{re.escape(message)}$"):
            await openai.append_stream(buf, chunks)
        with buf.snapshot() as snap:
            assert [e.kind for e in snap] == [Kind.REASONING]
            assert not any(e.kind is Kind.TOOL_CALL for e in snap)


class TestSharedBuffer:
    """``append_stream`` on a replica member of a shared buffer (the real
    PostgreSQL server the tests start): the sequencer's readers see only
    valid requests whose text grows, and both members end holding what
    ``append_messages`` of the returned message stores (asyncio and trio)."""

    @pytest.mark.anyio
    @pytest.mark.parametrize("api", sorted(APIS))
    async def test_a_replica_streams_an_sdk_stream(self, api: str, pg_dsn: str) -> None:
        from quiesce import open_shared_buffer

        adapter, _, _, oracle, as_list = APIS[api]
        events = events_for(api)
        fast = {"lease": 10.0, "poll": 0.2, "timeout": 30.0}
        async with (
            open_shared_buffer(pg_dsn, "s", **fast) as a,
            open_shared_buffer(pg_dsn, "s", **fast) as b,
        ):
            assert (a.role, b.role) == ("sequencer", "replica")
            windows: list[Any] = []
            done = anyio.Event()

            async def read() -> None:
                while not done.is_set():
                    with a.snapshot() as snap:
                        window = adapter.render(snap)
                        check_request(api, window)
                        windows.append(window)
                    await anyio.sleep(0.002)

            async def slow() -> AsyncIterator[Any]:
                for e in events:
                    await anyio.sleep(0.002)
                    yield e

            async with anyio.create_task_group() as tg:
                tg.start_soon(read)
                got = await adapter.append_stream(b, slow())
                await b.wait_applied(b.version)
                with anyio.fail_after(20):
                    while a.version < b.version:
                        await anyio.sleep(0.01)
                done.set()
            assert got == oracle(events)
            ref = Buffer()
            adapter.append_messages(ref, as_list(got))
            for member in (a, b):
                with member.snapshot() as snap:
                    assert adapter.render(snap) == adapter.render(ref)
                    assert not any(e.streaming for e in snap)
                member.check_invariants()
            assert len({json_key(w) for w in windows}) >= 3  # the reader saw it grow
