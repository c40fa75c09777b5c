"""canonical_json: the bytes of content keys and content hashes.

Logs hold these hashes durably, so the encoder built once in ``entry.py``
must give exactly what ``json.dumps`` gave under the canonical options, for
plain values and for their frozen forms, floats, unicode and nesting
included. Each check compares with ``json.dumps`` over ``thaw`` of the value
(the old implementation, written out here)."""

from __future__ import annotations

import hashlib
import json
import threading
import types
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quiesce._core import entry as entry_mod
from quiesce._core.entry import Entry, Kind, canonical_json, content_hash, freeze, thaw


def reference(value: object) -> str:
    """The old canonical_json: thaw, then json.dumps with the fixed options."""
    return json.dumps(
        thaw(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


# every text a value may hold: any code point but lone surrogates (freeze
# refuses those), control characters, quotes and backslashes included
texts = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.tuples(inner, inner)
        | st.dictionaries(texts, inner, max_size=5)
    ),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(json_values)
def test_plain_values_encode_as_json_dumps(value: Any) -> None:
    assert canonical_json(value) == reference(value)


@settings(max_examples=400, deadline=None)
@given(json_values)
def test_frozen_values_encode_as_their_thawed_form(value: Any) -> None:
    frozen = freeze(value)
    assert canonical_json(frozen) == reference(frozen) == reference(value)


@settings(max_examples=200, deadline=None)
@given(texts, json_values)
def test_content_hash_is_unchanged(body: str, content: Any) -> None:
    frozen = freeze(content)
    data = body.encode("utf-8")
    if content is not None:  # None is no content: the hash of the body alone
        data += b"\x00" + reference(frozen).encode("utf-8")
    want = hashlib.sha256(data).hexdigest()[:16]
    assert content_hash(body, frozen) == want
    e = Entry("e", Kind.REASONING, body, content=content)
    assert e.content_hash == want
    assert Entry.from_dict(e.to_dict()).content_hash == want


@pytest.mark.parametrize(
    "value",
    [
        {"b": 1, "a": [1.0, -0.0, 1e308, 5e-324, 0.1, 1e16, 123456789.125]},
        {"é": '日本語 \u2028 \x00 \x1f "q" \\ /', "\U0001f600": ["\ufeff"]},
        types.MappingProxyType({"z": (1, types.MappingProxyType({"y": ()})), "a": {}}),
        [2**63 - 1, -(2**63), True, False, None, ""],
        "a bare string \u00e9",
        3.5,
        (),
    ],
)
def test_known_values(value: object) -> None:
    assert canonical_json(value) == reference(value)


def test_the_python_encoder_gives_the_same_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the C encoder (another interpreter), the fallback encoder gives
    the same bytes."""
    value = freeze({"k": [1, {"é": 2.5}, None], "a": "x"})
    want = reference(value)
    monkeypatch.setattr(entry_mod, "_C_ENCODE", None)
    assert canonical_json(value) == want


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), {1, 2}, {"a": object()}, b"x"])
def test_non_json_is_refused_as_json_dumps_refuses_it(bad: object) -> None:
    with pytest.raises((TypeError, ValueError)) as expected:
        reference(bad)
    with pytest.raises(expected.type):
        canonical_json(bad)


def test_threads_encoding_one_shared_value_agree() -> None:
    """The encoder keeps no state between calls: threads encoding the very
    same frozen value at once all get its bytes (no false circular-reference
    error from shared markers)."""
    value = freeze({"items": [{"n": i, "t": "x" * 20} for i in range(200)]})
    want = reference(value)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(200):
                assert canonical_json(value) == want
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def _plain(value: Any) -> Any:
    """``value`` with tuples as lists (what freeze then thaw gives back)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_freeze_copies_every_value(value: Any) -> None:
    """freeze's fast path for ASCII strings in a mapping keeps them as they
    are: thawed, the frozen value is the value (tuples as lists), and no
    mapping or list of it is shared with the caller."""
    frozen = freeze(value)
    assert thaw(frozen) == _plain(value)
    if isinstance(value, dict):
        assert isinstance(frozen, types.MappingProxyType)
        assert all(
            not isinstance(v, dict | list) for v in frozen.values()
        )  # nested ones frozen too


@pytest.mark.parametrize(
    "bad",
    [
        {"a": "ok", "b": "\ud83d"},
        {"\ud83d": 1},
        {"a": {"b": ["x", "\udc00"]}},
        ["\ud83d"],
        "\ud83d",
        {"a": float("nan")},
        {"a": 2**63},
        {1: "x"},
    ],
)
def test_freeze_still_refuses(bad: object) -> None:
    from quiesce._core.errors import InvalidArgument, InvalidType

    with pytest.raises((InvalidArgument, InvalidType)):
        freeze(bad)
