"""Every name in DESIGN.md's public contract is importable from ``quiesce`` and
documented (trio's test_exports habit)."""

from __future__ import annotations

import enum
import inspect

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
]

#: Names of the durable and async layers that the contract also lists.
LAYERS = ["SQLiteLog", "JsonlLog", "open_buffer"]

PUBLIC_METHODS = {
    "Buffer": ["append", "mark_stale", "snapshot", "prune", "edit", "stats", "flush"],
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
