"""Shared fixtures: every async test runs on asyncio and on trio; entry builders
for the sync-core tests.

The sync-core tests need no event loop: the core is sans-IO. Every ``buf`` fixture is
checked with ``Buffer._check(expect_no_pins=True)`` when its test ends, so
each test also asserts every invariant of DESIGN.md on its final state.
"""

from __future__ import annotations

import gc
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

import _cpu_profile
from quiesce import Buffer, Entry, Kind, LogRecord

# Shared, noisy CI machines: property tests check behaviour, never speed, so
# no per-example deadline and no "too slow" health check anywhere.
settings.register_profile("quiesce", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("quiesce")


#: The longest test files (most CPU time first: ``QUIESCE_TEST_CPU=path``
#: measures it, see tests/_cpu_profile.py), run first: ``--dist loadfile``
#: gives a worker one file at a time, so a long file started last would leave
#: the other workers idle while it runs (longest first keeps the workers'
#: ends within the length of the shortest files). Every other file keeps its
#: place and each file its order.
LONGEST_FIRST = (
    "tools/test_bench_smoke.py",
    "shared/test_shared_faults.py",
    "shared/test_shared.py",
    "log/test_log_fuzz.py",
    "log/test_log_postgres_checkpoint.py",
    "core/test_pin_interleavings.py",
    "project/test_examples.py",
    "testing/test_simulation.py",
    "adapters/test_adapter_streams.py",
    "log/test_log_crash.py",
    "core/test_tomb_index.py",
    "runtime/test_runtime_random.py",
    "runtime/test_runtime_faults.py",
    "shared/test_shared_once.py",
    "log/test_log_stateful.py",
    "log/test_log_open_cost.py",
)
_TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put the files of :data:`LONGEST_FIRST` first, in that order (a stable
    sort: O(n log n) in the tests collected, the same order on every worker)."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}

    def place(item: pytest.Item) -> int:
        try:
            name = item.path.resolve().relative_to(_TESTS).as_posix()
        except ValueError:  # a test outside tests/ (none today)
            return len(rank)
        return rank.get(name, len(rank))

    items.sort(key=place)


# -- scratch files in memory (QUIESCE_TEST_TMP) --------------------------------
#
# The logs' tests commit to SQLite (synchronous=FULL) and JSONL files with an
# fsync per flush, thousands of times: on this project's 2-core CI disk an
# fsync costs ~3 ms, and the suite waited on them longer than it computed.
# On a tmpfs an fsync returns at once and every file operation behaves the
# same otherwise (what a crash test checks is a SIGKILLed process, whose
# writes the page cache keeps either way; no test can check a power loss).
# So the session's scratch files go to /dev/shm when it is a tmpfs with room:
# pytest's tmp_path tree (PYTEST_DEBUG_TEMPROOT, keeping pytest's own
# retention of the last three runs) and, for ``tempfile`` users and the
# subprocesses the tests start, TMPDIR: a directory of this session (mode
# 1777 like /tmp, so the PostgreSQL server's user can reach its cluster),
# removed when the session ends. ``QUIESCE_TEST_TMP=DIR`` picks another
# place, ``QUIESCE_TEST_TMP=system`` keeps the system's; an explicit
# ``--basetemp``, TMPDIR or PYTEST_DEBUG_TEMPROOT is always kept.

#: the room a tmpfs needs to take the scratch files (a container's default
#: 64 MB /dev/shm is too small for the PostgreSQL clusters)
SCRATCH_MIN_FREE = 2 << 30

#: the session's TMPDIR made by the controller (removed at its end), if any
_scratch_dir: str | None = None


def _memory_scratch_root() -> str | None:
    """``/dev/shm`` when it is a writable tmpfs with :data:`SCRATCH_MIN_FREE`
    free (O(mounts)), else None."""
    root = "/dev/shm"
    try:
        with open("/proc/self/mounts", encoding="utf-8") as mounts:
            tmpfs = any(line.split()[1:3] == [root, "tmpfs"] for line in mounts if line.strip())
        st = os.statvfs(root)
    except OSError:
        return None
    if not tmpfs or not os.access(root, os.W_OK | os.X_OK):
        return None
    return root if st.f_bavail * st.f_frsize >= SCRATCH_MIN_FREE else None


def _use_scratch(config: pytest.Config) -> None:
    """In the controller (or a ``-n0`` run): point the scratch files at
    memory as the block above says. Workers inherit the environment."""
    global _scratch_dir
    if os.environ.get("PYTEST_XDIST_WORKER") is not None:
        return
    choice = os.environ.get("QUIESCE_TEST_TMP", "")
    if choice == "system" or config.option.basetemp:
        return
    if any(os.environ.get(v) for v in ("TMPDIR", "PYTEST_DEBUG_TEMPROOT")):
        return
    root = choice or _memory_scratch_root()
    if root is None:
        return
    _scratch_dir = tempfile.mkdtemp(prefix="quiesce-tests-", dir=root)
    os.chmod(_scratch_dir, 0o1777)
    os.environ["PYTEST_DEBUG_TEMPROOT"] = root
    os.environ["TMPDIR"] = _scratch_dir
    tempfile.tempdir = _scratch_dir


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the session's TMPDIR (the controller's; pytest keeps its own
    tmp_path tree as always). When this process used multiprocessing (a
    ``-n0`` run's forkserver), its exit finalizer removes its own ``pymp-*``
    folder in TMPDIR, so the removal is queued after that one (the lower
    exit priority runs later) instead of pulling the folder from under it."""
    if _scratch_dir is None:
        return
    mp_util = sys.modules.get("multiprocessing.util")
    if mp_util is None:
        shutil.rmtree(_scratch_dir, ignore_errors=True)
    else:
        kwargs = {"ignore_errors": True}
        mp_util.Finalize(None, shutil.rmtree, (_scratch_dir,), kwargs, exitpriority=-101)


# -- the opt-in CPU profile (QUIESCE_TEST_CPU=path; tests/_cpu_profile.py) ----


def pytest_configure(config: pytest.Config) -> None:
    """Scratch files in memory (see above); start the CPU profile when
    ``QUIESCE_TEST_CPU`` names an output path."""
    _use_scratch(config)
    if _cpu_profile.enabled():
        _cpu_profile.configure()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what collection made (the test modules and the frameworks they
    import: most of a worker's heap) into the collector's permanent
    generation, so that neither an automatic collection nor a test's or a
    benchmark's ``gc.collect()`` walks it again; and the profile's
    collection time. Objects made later are collected as usual."""
    if os.environ.get("QUIESCE_TEST_NO_FREEZE") is None:
        gc.collect()
        gc.freeze()
    if _cpu_profile.enabled():
        _cpu_profile.collection_finished()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """One test's CPU (setup, call and teardown) when the profile is on."""
    if _cpu_profile.enabled():
        yield from _cpu_profile.measure(item.nodeid)
    else:
        yield


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Write the profile (each worker its part; the controller merges them)."""
    if _cpu_profile.enabled():
        _cpu_profile.session_finished(session.config)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """anyio's pytest plugin runs each ``@pytest.mark.anyio`` test once per backend."""
    return str(request.param)


def entry(
    entry_id: str,
    kind: Kind = Kind.REASONING,
    body: str | None = None,
    refs: tuple[str, ...] | list[str] = (),
    **kwargs: Any,
) -> Entry:
    """An entry with a body unique to its id unless one is given."""
    text = f"step {entry_id}" if body is None else body
    return Entry(entry_id, kind, text, tuple(refs), **kwargs)


def reasoning(entry_id: str, *refs: str, body: str | None = None) -> Entry:
    """A plain (prunable) reasoning entry citing ``refs``."""
    return entry(entry_id, Kind.REASONING, body, refs)


def fill(buf: Buffer, *entries: Entry) -> int:
    """Append every entry; return the head version."""
    for e in entries:
        buf.append(e)
    return buf.version


def window(buf: Buffer) -> list[str]:
    """The live ids of the head in window order (through a snapshot)."""
    with buf.snapshot() as snap:
        return [e.id for e in snap]


class ListSink:
    """An in-memory LogSink preloaded with records: ``Buffer(log=ListSink(buf.log))``
    recovers a copy of ``buf`` from its log."""

    def __init__(self, records: Sequence[LogRecord] = ()) -> None:
        self.records = list(records)

    def load(self) -> Sequence[LogRecord]:
        return self.records

    def write(self, records: Sequence[LogRecord]) -> None:
        self.records.extend(records)

    def close(self) -> None:
        pass


@pytest.fixture
def buf() -> Iterator[Buffer]:
    """A fresh in-memory buffer, invariant-checked when the test ends."""
    b = Buffer()
    yield b
    b._check(expect_no_pins=True)


# -- PostgreSQL (issue 14) ----------------------------------------------------


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Any]:
    """A private PostgreSQL cluster for the whole session (tests/_pg.py).
    Without server binaries the PostgreSQL tests skip, except under CI=true,
    where that is a failure (.ci/run installs them)."""
    import os

    from _pg import Cluster, find_bindir, free_port

    bindir = find_bindir()
    if bindir is None:
        if os.environ.get("CI") == "true":
            pytest.fail("PostgreSQL server binaries (initdb, pg_ctl) not found under CI=true")
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) not found")
    cluster = Cluster.create(bindir, free_port())
    _cpu_profile.cluster_started(cluster.datadir)
    try:
        yield cluster
    finally:
        _cpu_profile.cluster_stopping(cluster.datadir)
        cluster.destroy()


@pytest.fixture
def pg_dsn(pg_cluster: Any) -> str:
    """A DSN into a fresh schema of the session's cluster (one per test)."""
    from _pg import new_schema

    return new_schema(pg_cluster.dsn)
