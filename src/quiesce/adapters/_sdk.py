"""SDK objects in: what a request body holds, without importing an SDK.

What it keeps true: :func:`to_plain` of a value is what the OpenAI or
Anthropic SDK would send for it (every object with ``model_dump`` dumped
as the SDK's request serializer does), and a dict or list holding no SDK
object comes back as the same object, nothing copied — so the common case
(plain dicts from a framework) costs one type check per value. No SDK is
imported here: the test is duck-typed (``model_dump`` on the type).
"""

from __future__ import annotations

from typing import Any

from .._core.entry import MAX_DEPTH

__all__ = ["sdk_dump", "to_plain"]

_SCALARS = (str, int, float, bool, type(None))


def sdk_dump(value: object) -> Any:
    """An SDK object (anything with ``model_dump``: the OpenAI and Anthropic
    SDKs' pydantic models) as the SDK sends it in a request body —
    ``model_dump(exclude_unset=True, mode="json", by_alias=True,
    exclude=__api_exclude__)``, what openai's ``_utils/_transform.py`` and
    anthropic's ``_utils/_json.py`` do — or ``value`` itself if it is not one.
    No SDK is imported: the test is duck-typed."""
    dump = getattr(type(value), "model_dump", None)
    if dump is None or not callable(dump):
        return value
    return value.model_dump(  # type: ignore[attr-defined]
        exclude_unset=True,
        mode="json",
        by_alias=True,
        exclude=getattr(value, "__api_exclude__", None),
    )


def to_plain(value: object, depth: int = 0) -> Any:
    """``value`` with every SDK object in it (at any depth) replaced by
    :func:`sdk_dump` of it; dicts and lists that hold none come back as the
    same objects (nothing is copied). O(size); past :data:`MAX_DEPTH` levels
    values are left as they are (freezing them then refuses the nesting)."""
    t = type(value)
    if t in _SCALARS or depth > MAX_DEPTH:
        return value
    if t is dict or t is list or t is tuple:
        # copy on the first changed child: a dict stays a dict, a list or a
        # tuple becomes a list (what the SDK's serializer makes of it)
        children = value.items() if t is dict else enumerate(value)  # type: ignore[attr-defined, arg-type]
        out: Any = None
        for k, v in children:
            if type(v) in _SCALARS:
                continue
            c = to_plain(v, depth + 1)
            if c is not v:
                if out is None:
                    out = dict(value) if t is dict else list(value)  # type: ignore[call-overload]
                out[k] = c
        return value if out is None else out
    dumped = sdk_dump(value)
    return value if dumped is value else to_plain(dumped, depth + 1)
