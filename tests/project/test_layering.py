"""The layers talk through interfaces (issue 23's "no private reads"): no
module under ``src/quiesce`` outside ``_core`` reads a private attribute of a
core object (a subclass's ``self._x`` of its core base included), no core
class forwards its private names to the state's fields (the ``Field``
aliases are gone), and no import circle exists anywhere in ``src/`` (the
``test_exports`` habit, for the architecture instead of the names).

Both checks read the source with :mod:`ast` (nothing is imported), so they
are exact about what they look at and cheap (well under a second).
"""

from __future__ import annotations

import ast
import collections
import functools
import importlib
import inspect
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "quiesce"
CORE = PACKAGE / "_core"

#: Reads of core privates allowed outside ``_core``. Code outside the core
#: uses its public interfaces; never add to this. (The runtime's reader-age
#: alarm, the last user, walks the pins through
#: ``Scheduling.stuck_readers`` now.)
ALLOWED: dict[str, set[str]] = {}

#: Class attributes of ``Buffer`` that still forward to a field of its state.
#: None are left (``state.Field`` is gone); it stays empty.
FIELD_ALIASES_LEFT: set[str] = set()


@functools.cache
def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _modules(src: Path = SRC) -> Iterator[tuple[str, Path]]:
    for path in sorted(src.rglob("*.py")):
        yield path.relative_to(src).with_suffix("").as_posix(), path


@functools.cache
def _core_private_names() -> frozenset[str]:
    """Every private name a ``_core`` class defines: its private methods and
    class attributes, its ``__slots__``, and what its methods store on
    ``self``."""
    names: set[str] = set()
    for path in CORE.glob("*.py"):
        for cls in ast.walk(_parse(path)):
            if not isinstance(cls, ast.ClassDef):
                continue
            names |= _defined_by(cls)
    return frozenset(names)


def _defined_by(cls: ast.ClassDef) -> set[str]:
    names: set[str] = set()
    for stmt in cls.body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and _is_private(stmt.name):
            names.add(stmt.name)
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            names.add(stmt.target.id)
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if isinstance(target, ast.Name) and target.id == "__slots__":
                    names |= {
                        c.value
                        for c in ast.walk(stmt.value)
                        if isinstance(c, ast.Constant) and isinstance(c.value, str)
                    }
                elif isinstance(target, ast.Name):
                    names.add(target.id)
    for node in ast.walk(cls):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
        ):
            names.add(node.attr)
    return {n for n in names if _is_private(n)}


def _own_names(tree: ast.Module) -> set[str]:
    """The private names the module's own classes define (its own state,
    which it may read on any of its objects)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            names |= _defined_by(node)
    return names


def _self_aliases(tree: ast.Module) -> set[str]:
    """Local names bound to ``self`` (``inst = self``): reads through them
    are the object's own."""
    return {
        target.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Name)
        and node.value.id in ("self", "cls")
        for target in node.targets
        if isinstance(target, ast.Name)
    }


@functools.cache
def _classes() -> dict[str, list[tuple[bool, ast.ClassDef]]]:
    """Every class under ``src/quiesce`` by name: (whether it is in
    ``_core``, its definition)."""
    found: dict[str, list[tuple[bool, ast.ClassDef]]] = {}
    for module, path in _modules():
        for node in ast.walk(_parse(path)):
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, []).append((module.startswith("quiesce/_core/"), node))
    return found


def _base_names(cls: ast.ClassDef) -> set[str]:
    """The names of ``cls``'s bases (``Buffer``, ``mod.Buffer``, ``Base[T]``)."""
    names = set()
    for base in cls.bases:
        node = base.value if isinstance(base, ast.Subscript) else base
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
    return names


def inherited_core_names(cls: ast.ClassDef, tree: ast.Module) -> set[str]:
    """The private names that ``cls``'s ancestors in ``_core`` define (every
    class of that name under ``src/quiesce`` or in ``cls``'s own module
    ``tree``, followed through classes outside the core that subclass one):
    what a subclass outside the core may not touch on ``self``."""
    local: dict[str, list[tuple[bool, ast.ClassDef]]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node is not cls:
            local.setdefault(node.name, []).append((False, node))
    names: set[str] = set()
    seen: set[str] = set()
    todo = list(_base_names(cls))
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for in_core, base in _classes().get(name, []) + local.get(name, []):
            if in_core:
                names |= _defined_by(base)
            todo += _base_names(base)
    return names


def private_reads(path: Path, core_names: frozenset[str]) -> list[tuple[int, str]]:
    """``(line, name)`` of each read of a core class's private attribute on
    anything but ``self``/``cls`` (or an alias of it), of each private name
    imported from a ``_core`` module, and of each ``self._x`` (or
    ``cls._x``) in a class whose ancestor in ``_core`` defines ``_x`` (a
    subclass reading its core base's private field). Any other name the
    module's own classes define as well is the module's own (not counted)."""
    tree = _parse(path)
    mine = _own_names(tree)
    selves = {"self", "cls"} | _self_aliases(tree)
    found: set[tuple[int, str]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in core_names and node.attr not in mine:
            if not (isinstance(node.value, ast.Name) and node.value.id in selves):
                found.add((node.lineno, node.attr))
        elif isinstance(node, ast.ImportFrom) and node.module and "_core" in node.module:
            found |= {(node.lineno, a.name) for a in node.names if _is_private(a.name)}
        elif isinstance(node, ast.ClassDef):
            inherited = inherited_core_names(node, tree)
            found |= {
                (sub.lineno, sub.attr)
                for sub in ast.walk(node)
                if isinstance(sub, ast.Attribute)
                and sub.attr in inherited
                and isinstance(sub.value, ast.Name)
                and sub.value.id in ("self", "cls")
            }
    return sorted(found)


def _allowed(module: str) -> set[str]:
    return set().union(*(names for prefix, names in ALLOWED.items() if module.startswith(prefix)))


def _outside_core() -> list[tuple[str, Path]]:
    return [(m, p) for m, p in _modules() if not m.startswith("quiesce/_core/")]


class TestNoPrivateReads:
    def test_no_module_outside_core_reads_core_privates(self) -> None:
        """Every read of a core object's private attribute outside ``_core``
        is on the allowlist (which must become empty)."""
        core_names = _core_private_names()
        offenders = [
            f"{module}.py:{line}: {name}"
            for module, path in _outside_core()
            for line, name in private_reads(path, core_names)
            if name not in _allowed(module)
        ]
        assert offenders == []

    def test_allowlist_holds_only_reads_that_remain(self) -> None:
        """An allowlisted read that no longer happens leaves the list (it
        only shrinks)."""
        core_names = _core_private_names()
        used: dict[str, set[str]] = {prefix: set() for prefix in ALLOWED}
        for module, path in _outside_core():
            for _line, name in private_reads(path, core_names):
                for prefix in ALLOWED:
                    if module.startswith(prefix):
                        used[prefix].add(name)
        assert {p: n - used[p] for p, n in ALLOWED.items()} == {p: set() for p in ALLOWED}

    def test_the_check_finds_a_private_read(self, tmp_path: Path) -> None:
        """The scanner sees the kinds of read it forbids (a check that cannot
        fail proves nothing)."""
        probe = tmp_path / "probe.py"
        probe.write_text(
            "from quiesce._core.pins import _new_object\n"
            "class Mine:\n"
            "    def __init__(self):\n"
            "        self._mine = 1\n"
            "def f(buf, other):\n"
            "    buf._st.write_lock.acquire()\n"
            "    other._mine\n"
            "    return buf.version\n"
        )
        assert private_reads(probe, _core_private_names()) == [
            (1, "_new_object"),
            (6, "_st"),
        ]

    def test_the_check_finds_a_subclass_reading_its_core_base(self, tmp_path: Path) -> None:
        """A subclass of a core class (directly, or through a class outside
        the core) that reads or writes its base's private field on ``self``
        is found; its own private fields are not."""
        probe = tmp_path / "probe.py"
        probe.write_text(
            "from quiesce import Buffer\n"
            "class Sub(Buffer):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self._own = self._st\n"
            "class SubSub(Sub):\n"
            "    def go(self):\n"
            "        self._registry = None\n"
            "        return self._own\n"
        )
        assert private_reads(probe, _core_private_names()) == [(5, "_st"), (8, "_registry")]


def _core_classes() -> Iterator[type]:
    for module, _path in _modules():
        if module.startswith("quiesce/_core/"):
            mod = importlib.import_module(module.replace("/", ".").removesuffix(".__init__"))
            for _name, cls in inspect.getmembers(mod, inspect.isclass):
                if cls.__module__ == mod.__name__:
                    yield cls


def forwarding_attributes(cls: type) -> set[str]:
    """The private class attributes of ``cls`` that are data descriptors of
    their own kind (not a property, a slot, a C-level getset or a named
    tuple's field): a ``Field``-like alias that forwards a name to another
    object's field."""
    plain = (property, types.MemberDescriptorType, types.GetSetDescriptorType, _TUPLE_FIELD)
    return {
        name
        for name, value in vars(cls).items()
        if _is_private(name) and hasattr(type(value), "__set__") and not isinstance(value, plain)
    }


#: the descriptor type of a named tuple's fields (``collections._tuplegetter``)
_TUPLE_FIELD = type(vars(collections.namedtuple("_T", "x"))["x"])


class TestNoFieldAliases:
    def test_no_core_class_forwards_names_to_the_state(self) -> None:
        """No core class keeps a private alias of a state field (issue 23:
        the buffer's parts are reached through interfaces, not through the
        names the fields had before the split); what is left on ``Buffer``
        is :data:`FIELD_ALIASES_LEFT`, which only shrinks."""
        from quiesce._core.buffer import Buffer

        found = {
            f"{cls.__name__}.{name}"
            for cls in _core_classes()
            for name in forwarding_attributes(cls)
            if not (cls is Buffer and name in FIELD_ALIASES_LEFT)
        }
        assert found == set()
        assert forwarding_attributes(Buffer) == FIELD_ALIASES_LEFT

    def test_the_check_finds_a_forwarding_alias(self) -> None:
        """A data descriptor of its own kind is found; a property and slots
        are not."""

        class Forward:
            def __get__(self, obj: object, owner: type) -> int:
                return 1

            def __set__(self, obj: object, value: int) -> None:
                pass

        class Probe:
            __slots__ = ("slot",)
            _alias = Forward()

            @property
            def prop(self) -> int:
                return 1

        assert forwarding_attributes(Probe) == {"_alias"}


# -- import circles -----------------------------------------------------------


def _import_edges(*, type_checking: bool, src: Path = SRC) -> dict[str, set[str]]:
    """module -> the modules under ``src`` it imports (at module level, in a
    function, and with ``type_checking`` under ``if TYPE_CHECKING:``)."""
    known = {m.replace("/", ".").removesuffix(".__init__") for m, _ in _modules(src)}
    edges: dict[str, set[str]] = {}
    for module, path in _modules(src):
        name = module.replace("/", ".").removesuffix(".__init__")
        is_pkg = path.name == "__init__.py"
        package = name if is_pkg else name.rpartition(".")[0]
        tree = _parse(path)
        skipped: set[int] = set()
        if not type_checking:
            for node in ast.walk(tree):
                if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                    skipped |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
        out: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.Import):
                out |= {a.name for a in node.names if a.name in known}
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - node.level + 1]
                    target = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    target = node.module or ""
                for a in node.names:
                    if f"{target}.{a.name}" in known:
                        out.add(f"{target}.{a.name}")
                    elif target in known:
                        out.add(target)
        out.discard(name)
        edges[name] = out
    return edges


def circles(edges: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan,
    iterative). O(modules + imports)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[v])
                if low[v] == index[v]:
                    component: set[str] = set()
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.add(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        found.append(component)
    return found


def _short(component: set[str]) -> set[str]:
    return {m.removeprefix("quiesce.") for m in component}


class TestNoImportCircles:
    def test_no_circle_through_run_time_imports(self) -> None:
        """No module imports itself back, through any chain, when the code
        runs (module-level and function-level imports)."""
        assert [_short(c) for c in circles(_import_edges(type_checking=False))] == []

    def test_no_circle_even_through_type_checking_imports(self) -> None:
        """With ``TYPE_CHECKING`` imports counted too, no module imports
        itself back (issue 23: the buffer's parts are composed, not
        inherited, so none needs the class that holds it, not even for a
        type)."""
        assert [_short(c) for c in circles(_import_edges(type_checking=True))] == []

    def test_the_core_import_graph_is_acyclic(self) -> None:
        """Every ``_core`` module's imports (module level, in functions and
        under ``if TYPE_CHECKING:``), restricted to ``_core``, form a DAG:
        each module can be ordered after everything it imports."""
        edges = {
            m: {t for t in out if t.startswith("quiesce._core.")}
            for m, out in _import_edges(type_checking=True).items()
            if m.startswith("quiesce._core.")
        }
        order: list[str] = []
        placed: set[str] = set()
        while len(placed) < len(edges):
            ready = sorted(m for m in edges if m not in placed and edges[m] <= placed)
            assert ready, f"no module can go next: {sorted(set(edges) - placed)}"
            order += ready
            placed |= set(ready)
        # the parts are below the façade: the state before them, the buffer after
        assert order.index("quiesce._core.state") < order.index("quiesce._core.pins")
        assert order.index("quiesce._core.pins") < order.index("quiesce._core.buffer")

    def test_the_edges_count_type_checking_imports(self, tmp_path: Path) -> None:
        """An import under ``if TYPE_CHECKING:`` is an edge with
        ``type_checking`` and none without (the check sees the circles that
        only typing makes)."""
        pkg = tmp_path / "pkg"
        pkg.mkdir()
        (pkg / "__init__.py").write_text("")
        (pkg / "a.py").write_text("from . import b\n")
        (pkg / "b.py").write_text(
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\n"
        )
        with_types = _import_edges(type_checking=True, src=tmp_path)
        without = _import_edges(type_checking=False, src=tmp_path)
        assert with_types["pkg.b"] == {"pkg.a"} and without["pkg.b"] == set()
        assert circles(with_types) == [{"pkg.a", "pkg.b"}] and circles(without) == []

    def test_the_check_finds_a_circle(self) -> None:
        """The circle finder sees a circle of three and a self-contained DAG."""
        edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
        assert circles(edges) == [{"a", "b", "c"}]


@pytest.mark.parametrize("module", ["quiesce/_core"])
def test_core_imports_no_event_loop_or_driver(module: str) -> None:
    """The sans-IO core imports no event loop, framework or driver."""
    banned = {"anyio", "asyncio", "trio", "psycopg", "sqlite3", "quiesce._runtime"}
    bad = []
    for name, path in _modules():
        if not name.startswith(module):
            continue
        for node in ast.walk(_parse(path)):
            mods = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            bad += [f"{name}: {m}" for m in mods if m.split(".")[0] in banned or m in banned]
    assert bad == []
