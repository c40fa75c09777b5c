"""``import quiesce`` loads the sync core alone; everything else loads on first use.

The optional sinks, the adapters, the integrations, the drivers and the async
runtime are behind PEP 562's module ``__getattr__`` (``quiesce._LAZY``): a
program that only builds a :class:`~quiesce.Buffer` never imports sqlite3,
psycopg, anyio, OpenTelemetry or an SDK. Each check runs in a fresh
interpreter (``sys.modules`` of this one already holds everything), and
checks which modules are loaded, never how long it took (the import time is a
``quiesce bench`` figure).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import quiesce

#: Modules (and their submodules) that ``import quiesce`` must not load.
NOT_AT_IMPORT = [
    "sqlite3",
    "psycopg",
    "anyio",
    "asyncio",
    "trio",
    "opentelemetry",
    "openai",
    "anthropic",
    "quiesce._log",
    "quiesce._runtime",
    "quiesce._pool",
    "quiesce._protocol",
    "quiesce._shared",
    "quiesce.pruner",
    "quiesce.adapters",
    "quiesce.integrations",
    "quiesce.otel",
    "quiesce.bench",
    "quiesce.demo",
]


def _run(code: str) -> object:
    """Run ``code`` in a fresh interpreter; return the JSON it prints."""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return json.loads(out.stdout)


def test_import_quiesce_loads_no_sink_driver_runtime_or_adapter() -> None:
    """After ``import quiesce`` (and building and using a sync buffer), none of
    the modules of :data:`NOT_AT_IMPORT` nor any submodule of theirs is in
    ``sys.modules``; the first read of ``quiesce.SQLiteLog`` then loads the
    SQLite sink and sqlite3, and nothing of PostgreSQL."""
    code = (
        "import json, sys\n"
        "import quiesce\n"
        "buf = quiesce.Buffer()\n"
        "buf.append(quiesce.Entry('a', quiesce.Kind.REASONING, 'x'))\n"
        "with buf.snapshot() as snap: ids = [e.id for e in snap]\n"
        "before = sorted(sys.modules)\n"
        "quiesce.SQLiteLog\n"
        "print(json.dumps({'ids': ids, 'before': before, 'after': sorted(sys.modules)}))\n"
    )
    got = _run(code)
    assert isinstance(got, dict)
    assert got["ids"] == ["a"]

    def loaded(modules: list[str], root: str) -> list[str]:
        return [m for m in modules if m == root or m.startswith(root + ".")]

    assert {root: loaded(got["before"], root) for root in NOT_AT_IMPORT} == {
        root: [] for root in NOT_AT_IMPORT
    }
    after = got["after"]
    assert "quiesce._log.sqlite" in after
    assert "sqlite3" in after
    assert loaded(after, "psycopg") == []
    assert "quiesce._log.postgres" not in after
    assert "quiesce._shared" not in after


def test_every_lazy_name_imports_from_a_fresh_interpreter() -> None:
    """``from quiesce import X`` works for every lazy name, each in a fresh
    interpreter's first touch of the package (one interpreter, one
    ``from``-import per name after a fresh ``import quiesce``, so no name
    relies on another having been read first), and yields the object of the
    module that defines it."""
    code = (
        "import importlib, json, sys\n"
        "out = {}\n"
        "for name, module in sorted(importlib.import_module('quiesce')._LAZY.items()):\n"
        "    for m in [m for m in sys.modules if m == 'quiesce' or m.startswith('quiesce.')]:\n"
        "        del sys.modules[m]\n"
        "    ns = {}\n"
        "    exec(f'from quiesce import {name} as value', ns)\n"
        "    out[name] = [ns['value'] is getattr(sys.modules[module], name), module]\n"
        "print(json.dumps(out))\n"
    )
    got = _run(code)
    assert got == {name: [True, module] for name, module in quiesce._LAZY.items()}


def test_unknown_name_is_an_attribute_error_and_dir_lists_the_lazy_names() -> None:
    """A name that is neither eager nor lazy raises ``AttributeError`` (so
    ``hasattr`` and ``from quiesce import nope`` behave); ``dir(quiesce)``
    lists every lazy name before it is read."""
    with pytest.raises(AttributeError, match=r"^module 'quiesce' has no attribute 'nope'$"):
        quiesce.nope  # noqa: B018
    assert set(quiesce._LAZY) <= set(dir(quiesce))
    with pytest.raises(ImportError, match=r"cannot import name 'nope' from 'quiesce'"):
        exec("from quiesce import nope", {})
