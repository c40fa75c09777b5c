"""The reader-age alarm is incremental (issue 13): a pass resumes where the
last one stopped, yet escalates every reader pinned past ``max_pin_age``
exactly once, and never a young one.

A seeded model-based walk pins, unpins and writes at random with a fake clock
and checks each pass against a brute-force model (every pinned reader older
than the alarm age has been escalated once; no other). ``stats()`` is checked
against the same model.
"""

from __future__ import annotations

import contextlib
import random
import threading

import pytest

from quiesce import Entry, EscalationKind, Kind, RuntimeBuffer, Snapshot


def _entry(i: int) -> Entry:
    return Entry(f"e{i}", Kind.REASONING, f"step {i}")


def _escalated_versions(escs: list[object]) -> list[int]:
    out = []
    for esc in escs:
        assert esc.kind is EscalationKind.READER_PINNED  # type: ignore[attr-defined]
        out.append(esc.data["version"])  # type: ignore[attr-defined]
    return out


@pytest.mark.parametrize("seed", range(12))
def test_every_old_reader_once_against_a_model(seed: int) -> None:
    rng = random.Random(seed)
    now = [0.0]
    max_age = 5.0
    buf = RuntimeBuffer(clock=lambda: now[0], max_pin_age=max_age)
    buf.append(_entry(0))
    written = 1
    pinned: dict[int, tuple[Snapshot, float]] = {}  # key -> (snapshot, since)
    escalated: set[int] = set()
    key = 0
    for _step in range(600):
        r = rng.random()
        if r < 0.4:
            snap = buf.snapshot()
            snap.__enter__()
            pinned[key] = (snap, now[0])
            key += 1
        elif r < 0.6 and pinned:
            k = rng.choice(list(pinned))
            pinned.pop(k)[0].__exit__(None, None, None)
            escalated.discard(k)
        elif r < 0.75:
            buf.append(_entry(written))
            written += 1
        elif r < 0.9:
            now[0] += rng.choice([0.5, 1.0, 2.5, 6.0])
        else:
            escs = buf.check_reader_ages()
            by_version: dict[int, int] = {}
            for v in _escalated_versions(escs):
                by_version[v] = by_version.get(v, 0) + 1
            old = {k for k, (_s, since) in pinned.items() if now[0] - since > max_age}
            new = old - escalated
            want: dict[int, int] = {}
            for k in new:
                v = pinned[k][0].version
                want[v] = want.get(v, 0) + 1
            assert by_version == want, f"seed {seed}, step {_step}"
            escalated |= new
        stats = buf.stats()
        assert stats.pinned == len(pinned)
        assert sorted(r.age for r in stats.readers) == sorted(
            now[0] - since for _s, since in pinned.values()
        )
        if pinned:
            assert stats.oldest_pin_age == max(now[0] - s for _s, s in pinned.values())
        else:
            assert stats.oldest_pin_age is None
    for snap, _since in pinned.values():
        snap.__exit__(None, None, None)
    buf._check(expect_no_pins=True)


def test_a_reader_registered_behind_a_younger_one_is_escalated_later() -> None:
    """The pass stops at the first reader that is not old yet (readers are
    walked in pin order). A reader whose pin registered behind a younger one
    — here forced with a clock that runs backwards between the two pins — is
    escalated once that one is old too, and only once."""
    now = [5.0]
    buf = RuntimeBuffer(clock=lambda: now[0], max_pin_age=2.0)
    buf.append(_entry(0))
    with buf.snapshot() as younger:
        assert buf.check_reader_ages() == []  # stamps its pin time: 5.0
        now[0] = 1.0
        with buf.snapshot():
            assert buf.check_reader_ages() == []  # stamps its pin time: 1.0
            now[0] = 3.5  # the second reader is 2.5 s old, the first -1.5 s
            assert buf.check_reader_ages() == []
            now[0] = 8.0  # both old
            escs = buf.check_reader_ages()
            assert sorted(e.data["age"] for e in escs) == [3.0, 7.0]
            assert buf.check_reader_ages() == []
        assert younger.pinned


def test_readers_of_a_finished_version_are_passed_and_new_ones_still_seen() -> None:
    """Versions no longer the head whose readers were all escalated are passed
    for good; readers pinned later (at newer versions) are still escalated,
    and so are readers that join the head after its first readers were."""
    now = [0.0]
    buf = RuntimeBuffer(clock=lambda: now[0], max_pin_age=1.0)
    buf.append(_entry(0))
    with contextlib.ExitStack() as stack:
        for i in range(30):
            stack.enter_context(buf.snapshot())
            if i % 3 == 2:
                buf.append(_entry(i + 1))
        assert buf.check_reader_ages() == []  # stamps their pin time: 0.0
        now[0] = 2.0
        assert len(buf.check_reader_ages()) == 30
        for _ in range(3):
            assert buf.check_reader_ages() == []
        stack.enter_context(buf.snapshot())  # joins the head at 2.0
        buf.append(_entry(100))
        stack.enter_context(buf.snapshot())  # a new head
        assert buf.check_reader_ages() == []
        now[0] = 3.5
        assert sorted(_escalated_versions(buf.check_reader_ages())) == [11, 12]
        assert buf.check_reader_ages() == []
    buf._check(expect_no_pins=True)


def test_concurrent_passes_escalate_each_reader_once() -> None:
    """Passes from several threads at once (the alarm task and callers of
    ``check_reader_ages``) never escalate a reader twice."""
    now = [0.0]
    buf = RuntimeBuffer(clock=lambda: now[0], max_pin_age=1.0)
    buf.append(_entry(0))
    n = 3000
    got: list[int] = []
    lock = threading.Lock()
    start = threading.Barrier(4)

    def run() -> None:
        start.wait()
        for _ in range(20):
            escs = buf.check_reader_ages()
            with lock:
                got.append(len(escs))

    with contextlib.ExitStack() as stack:
        for i in range(n):
            stack.enter_context(buf.snapshot())
            if i % 50 == 49:
                buf.append(_entry(i + 1))
        assert buf.check_reader_ages() == []  # stamps their pin time: 0.0
        now[0] = 10.0
        threads = [threading.Thread(target=run) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert sum(got) == n
    assert buf.stats().escalations == n
