"""The default classifier's verdict is cached once per content (issue 13,
"classify once per content hash"): the cache never changes a verdict, stays
bounded, and ``append`` fills it before a prune needs it (only for the
library's own policy; a user's classifier is asked when a removal is decided,
as before)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quiesce import Buffer, Entry, Kind, Policy, Refusal, Status
from quiesce._core import policy as pol
from quiesce._core.policy import _NEGATIVE, default_negative_classifier

_PAD = "plain words of an ordinary tool output line " * 20  # > _CACHE_FROM

_WORDS = ["do not", "Don't", "Don’t", "failed", "avoidance", "unsafe", "Timed\tOut", "never"]
_WORDS += ["nevertheless", "knot", "donut", "unſafe", "ok", "note", "not"]


@given(st.lists(st.one_of(st.sampled_from(_WORDS), st.text(max_size=12)), max_size=8))
def test_a_cached_verdict_is_the_regex_verdict(parts: list[str]) -> None:
    body = _PAD + " ".join(parts) + " " + _PAD
    assert len(body) >= pol._CACHE_FROM
    want = _NEGATIVE.search(body) is not None
    for i in range(2):  # the first call scans, the second reads the cache
        assert default_negative_classifier(Entry(f"x{i}", Kind.REASONING, body)) is want


def test_the_cache_is_bounded_and_an_evicted_verdict_is_found_again() -> None:
    first = Entry("first", Kind.REASONING, _PAD + "this never works")
    assert default_negative_classifier(first) is True
    for i in range(pol._CACHE_SIZE + 50):
        default_negative_classifier(Entry(f"e{i}", Kind.REASONING, f"{i} {_PAD}"))
        assert len(pol._verdicts) <= pol._CACHE_SIZE
    assert (first.content_hash, len(first.body)) not in pol._verdicts  # dropped, oldest first
    assert default_negative_classifier(first) is True


def test_a_rejection_in_meta_wins_over_a_cached_verdict() -> None:
    plain = Entry("a", Kind.REASONING, _PAD)
    rejected = Entry("b", Kind.REASONING, _PAD, meta={"verdict": "rejected"})
    assert plain.content_hash == rejected.content_hash
    assert default_negative_classifier(plain) is False
    assert default_negative_classifier(rejected) is True


def test_append_classifies_a_big_body_and_prune_refuses_it_every_time() -> None:
    buf = Buffer()
    body = _PAD + " the migration failed twice " + _PAD
    e = Entry("neg", Kind.TOOL_OUTPUT, body)
    pol._verdicts.pop((e.content_hash, len(body)), None)
    buf.append(e)
    assert pol._verdicts[(e.content_hash, len(body))] is True  # before any prune
    for _ in range(3):
        report = buf.prune(["neg"], reason="old")
        assert report["neg"].status is Status.MARKED
        assert report["neg"].refusal is Refusal.NEGATIVE
    ok = Entry("ok", Kind.TOOL_OUTPUT, _PAD + " all green " + _PAD)
    buf.append(ok)
    assert buf.prune(["ok"], reason="old")["ok"].status is Status.PRUNED
    buf._check(expect_no_pins=True)


@pytest.mark.parametrize("kind", [Kind.CONSTRAINT, Kind.NEGATIVE])
def test_append_does_not_classify_a_protected_kind(kind: Kind) -> None:
    e = Entry("p", kind, _PAD + " protected by kind " + _PAD)
    Buffer().append(e)
    assert (e.content_hash, len(e.body)) not in pol._verdicts


def test_a_users_classifier_is_not_asked_at_append() -> None:
    calls: list[str] = []

    def classifier(e: Entry) -> bool:
        calls.append(e.id)
        return False

    buf = Buffer(policy=Policy(negative=classifier))
    e = Entry("u", Kind.REASONING, _PAD + " a user's policy " + _PAD)
    buf.append(e)
    assert calls == []
    assert (e.content_hash, len(e.body)) not in pol._verdicts
    assert buf.prune(["u"], reason="old")["u"].status is Status.PRUNED
    assert calls and set(calls) == {"u"}  # asked when the removal was decided
