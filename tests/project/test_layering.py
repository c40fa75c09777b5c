"""The layers talk through interfaces (issue 23's "no private reads"): no
module under ``src/quiesce`` outside ``_core`` reads a private attribute of a
core object, and no import circle exists anywhere in ``src/`` (the
``test_exports`` habit, for the architecture instead of the names).

Both checks read the source with :mod:`ast` (nothing is imported), so they
are exact about what they look at and cheap (well under a second).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "quiesce"
CORE = PACKAGE / "_core"

#: Reads of core privates allowed outside ``_core``: none. Code outside the
#: core uses its public interfaces; never add to this.
ALLOWED: dict[str, set[str]] = {}

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


def private_reads(path: Path, core_names: frozenset[str]) -> list[tuple[int, str]]:
    """``(line, name)`` of each read of a core class's private attribute on
    anything but ``self``/``cls`` (or an alias of it), and of each private
    name imported from a ``_core`` module. A name the module's own classes
    define as well is the module's own (not counted)."""
    tree = _parse(path)
    mine = _own_names(tree)
    selves = {"self", "cls"} | _self_aliases(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in core_names and node.attr not in mine:
            if not (isinstance(node.value, ast.Name) and node.value.id in selves):
                found.append((node.lineno, node.attr))
        elif isinstance(node, ast.ImportFrom) and node.module and "_core" in node.module:
            found += [(node.lineno, a.name) for a in node.names if _is_private(a.name)]
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
            "    buf._write_lock.acquire()\n"
            "    other._mine\n"
            "    return buf.version\n"
        )
        assert private_reads(probe, _core_private_names()) == [
            (1, "_new_object"),
            (6, "_write_lock"),
        ]


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
