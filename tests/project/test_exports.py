"""Every name in DESIGN.md's public contract is importable from ``quiesce`` and
documented (trio's test_exports habit)."""

from __future__ import annotations

import enum
import inspect
from typing import Any

import pytest

import quiesce

#: The sync-core, record and error names DESIGN.md's "Public contract" lists.
CONTRACT = [
    "Buffer",
    "Snapshot",
    "Entry",
    "Kind",
    "Status",
    "Refusal",
    "Outcome",
    "PruneReport",
    "EditReport",
    "EditPlan",
    "Prune",
    "Rewrite",
    "Summarize",
    "Move",
    "Mark",
    "Tombstone",
    "Override",
    "Escalation",
    "EscalationKind",
    "Stats",
    "Policy",
    "QuiesceError",
    "DuplicateEntry",
    "DanglingReference",
    "ReadmissionRefused",
    "ProtectedEntry",
    "UnknownEntry",
    "EntryPruned",
    "SnapshotReleased",
    "StreamWriter",
    "StreamClosed",
]

#: Names of the durable and async layers that the contract also lists.
LAYERS = [
    "SQLiteLog",
    "JsonlLog",
    "open_buffer",
    "BufferPool",
    "ConversationMismatch",
    "PoolStats",
]

PUBLIC_METHODS = {
    "Buffer": [
        "append",
        "mark_stale",
        "snapshot",
        "prune",
        "edit",
        "stats",
        "flush",
        "open_stream",
    ],
    "StreamWriter": ["write", "close", "abort"],
    "Snapshot": ["resolve", "mark", "is_stale"],
}


@pytest.mark.parametrize("name", CONTRACT)
def test_contract_name_is_exported_and_documented(name: str) -> None:
    """quiesce.<name> exists, is public (no leading underscore module path
    leaks into the name) and has a docstring of its own."""
    obj = getattr(quiesce, name)
    assert obj.__name__ == name
    doc = obj.__doc__
    assert doc and doc.strip(), f"{name} has no docstring"
    if isinstance(obj, type) and not issubclass(obj, enum.Enum):
        # a class must not merely inherit its base's docstring
        assert "__doc__" in vars(obj) and vars(obj)["__doc__"], f"{name} inherits its docstring"


@pytest.mark.parametrize(
    ("cls", "method"), [(c, m) for c, ms in PUBLIC_METHODS.items() for m in ms]
)
def test_public_methods_are_documented(cls: str, method: str) -> None:
    """The contract's methods have docstrings."""
    fn = getattr(getattr(quiesce, cls), method)
    assert inspect.getdoc(fn), f"{cls}.{method} has no docstring"


@pytest.mark.parametrize("name", ["version", "log", "tombstones"])
def test_buffer_properties_are_documented(name: str) -> None:
    """buf.version, buf.log and buf.tombstones are documented read-only properties."""
    prop = vars(quiesce.Buffer)[name]
    assert isinstance(prop, property)
    assert prop.fset is None
    assert prop.__doc__


def test_errors_form_one_hierarchy() -> None:
    """Every error derives from QuiesceError; lookups are also KeyError."""
    for name in CONTRACT:
        obj = getattr(quiesce, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, quiesce.QuiesceError), name
    assert issubclass(quiesce.UnknownEntry, KeyError)
    assert issubclass(quiesce.EntryPruned, KeyError)


def test_enum_members_match_the_contract() -> None:
    """Status, Refusal, EscalationKind and Kind have exactly the contract's members."""
    assert [m.name for m in quiesce.Status] == ["PRUNED", "DEFERRED", "MARKED", "UNCHANGED"]
    assert {m.name for m in quiesce.Refusal} == {
        "PROTECTED",
        "NEGATIVE",
        "IMMUTABLE",
        "REFERENCED",
        "RATIONALE",
        "READMISSION",
        "CONFLICT",
        "UNKNOWN",
    }
    assert {m.name for m in quiesce.EscalationKind} == {
        "REFUSED_EDIT",
        "READER_PINNED",
        "BACKLOG",
        "OSCILLATION",
    }
    assert {m.name for m in quiesce.Kind} == {
        "REASONING",
        "NEGATIVE",
        "PROHIBITION",
        "CONSTRAINT",
        "INSTRUCTION",
        "TOOL_CALL",
        "TOOL_OUTPUT",
        "RATIONALE",
        "SUMMARY",
    }


def test_record_fields_match_the_contract() -> None:
    """The frozen records carry at least the contract's fields."""
    fields = {
        "Mark": ["id", "reason", "turn", "version"],
        "Tombstone": ["id", "content_hash", "reason", "turn", "actor", "version"],
        "Override": ["reason", "turn"],
        "Escalation": ["kind", "detail", "plan"],
        "EditReport": ["applied", "refusals", "escalation"],
        "Outcome": ["status", "refusal"],
        "Stats": [
            "version",
            "pinned",
            "oldest_pin_age",
            "deferred",
            "marks",
            "tombstones",
            "refusals",
            "escalations",
            "tombstone_to_edit_ratio",
        ],
    }
    for name, wanted in fields.items():
        cls = getattr(quiesce, name)
        names = getattr(cls, "_fields", None) or list(getattr(cls, "__dataclass_fields__", {}))
        assert [f for f in wanted if f not in names] == [], name


@pytest.mark.parametrize("name", LAYERS)
def test_layer_names_are_exported_and_documented(name: str) -> None:
    """The durable-log and runtime names are exported and documented too."""
    obj = getattr(quiesce, name)
    assert obj.__doc__ and obj.__doc__.strip()


def test_core_imports_no_event_loop() -> None:
    """The sync core imports neither asyncio, trio nor anyio (sans-IO)."""
    import pathlib

    core = pathlib.Path(quiesce.__file__).parent / "_core"
    for path in core.glob("*.py"):
        text = path.read_text()
        for lib in ("asyncio", "trio", "anyio"):
            assert f"import {lib}" not in text, f"{path.name} imports {lib}"
            assert f"from {lib}" not in text, f"{path.name} imports {lib}"


def _imports(path: Any, package: str) -> list[tuple[str, bool]]:
    """The quiesce modules ``path`` imports, each with whether the import runs
    (``False``: under ``if TYPE_CHECKING:``). Relative imports are resolved
    against ``package``; ``from . import x`` names the submodule ``x``."""
    import ast
    import pathlib

    src = pathlib.Path(quiesce.__file__).parent.parent
    tree = ast.parse(path.read_text())
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in node.body:
                typing_only.update(id(n) for n in ast.walk(sub))
    out: list[tuple[str, bool]] = []
    for node in ast.walk(tree):
        runs = id(node) not in typing_only
        if isinstance(node, ast.Import):
            out += [(a.name, runs) for a in node.names if a.name.split(".")[0] == "quiesce"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.split(".")[0] != "quiesce":
                continue
            for a in node.names:
                sub = src.joinpath(*f"{module}.{a.name}".split("."))
                if sub.with_suffix(".py").exists() or sub.is_dir():
                    out.append((f"{module}.{a.name}", runs))
                else:
                    out.append((module, runs))
    return out


def _modules() -> dict[str, Any]:
    import pathlib

    root = pathlib.Path(quiesce.__file__).parent
    out = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def test_no_runtime_import_circle_in_src() -> None:
    """No module of ``src/quiesce`` reaches itself through imports that run
    (at module level or inside a function); imports made only for type
    checking may close a circle (issue 15)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = {m for m, runs in _imports(path, package) if runs and m in modules} - {name}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                circle = [*stack[stack.index(n) :], n]
                raise AssertionError("import circle: " + " -> ".join(circle))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


@pytest.mark.parametrize("app", ["quiesce.bench", "quiesce.demo"])
def test_bench_and_demo_import_only_the_public_api(app: str) -> None:
    """``quiesce bench`` and ``quiesce demo`` are applications of the public
    API: they import ``quiesce``, ``quiesce.testing``, the public adapter
    package ``quiesce.adapters`` (the ``sync_render`` section), the public
    framework integrations (``quiesce.integrations.langchain``, ...: the
    ``frameworks`` section), the public ``quiesce.otel`` (the ``otel``
    section) and their own modules, never ``quiesce._core`` or
    another private module (issue 15)."""
    for name, path in _modules().items():
        if name != app and not name.startswith(app + "."):
            continue
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for module, _runs in _imports(path, package):
            integration = module.startswith("quiesce.integrations.") and not module.rpartition(".")[
                2
            ].startswith("_")
            allowed = (
                module in ("quiesce", "quiesce.testing", "quiesce.adapters", "quiesce.otel")
                or module.startswith(app + ".")
                or integration
            )
            assert allowed, f"{name} imports {module}"
