"""Where the suite's CPU goes: an opt-in profile of every test's CPU time.

Enabled by ``QUIESCE_TEST_CPU=path`` (tests/conftest.py calls in here only
then; otherwise nothing is measured). Wall time on a shared machine says how
loaded it was; CPU time says what a test costs. For every test (setup, call and
teardown together) it records:

- ``cpu``: ``time.process_time()`` of the worker (all its threads);
- ``children``: the ``resource.getrusage(RUSAGE_CHILDREN)`` user+system delta,
  i.e. the subprocesses the test started and waited for, plus the CPU of the
  worker's multiprocessing forkserver and the processes forked from it (the
  members of the multi-process tests, read from ``/proc``);
- ``pg``: the CPU of the session's private PostgreSQL server (``pg_ctl``
  daemonises it, so it is nobody's child: read from ``/proc``, postmaster plus
  its live backends plus the backends it has reaped);
- ``wall``: ``time.perf_counter()``.

Each worker also records what is not a test: its start (interpreter, pytest,
plugins: ``process_time`` at ``pytest_configure``), collection (imports of the
test modules and the frameworks they import) and the session total. A worker
writes ``path.<worker>.json``; the controller merges them into ``path`` (JSON:
per worker, per file and per test) and prints the ranking;
``python tests/_cpu_profile.py path`` prints it again.

Cost: two ``getrusage`` calls per test, plus a ``/proc`` scan (O(processes))
per test that uses the cluster. Nothing is measured with the variable unset.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

#: The clusters alive in this worker (datadir), and the CPU of those destroyed.
_clusters: list[str] = []
_retired_pg = 0.0

_state: dict[str, Any] = {}


def enabled() -> str | None:
    """The output path, or None when the profile is off."""
    return os.environ.get("QUIESCE_TEST_CPU") or None


def _worker() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


def _children() -> float:
    """The waited-for subprocesses' CPU, plus the forkserver tree's."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime + _forkserver_cpu()


def _forkserver_cpu() -> float:
    """CPU of this worker's multiprocessing forkserver (tests/_shared_child.py
    starts the multi-process tests' children from it): the server with the
    children it reaped, plus its live children. They are not this worker's
    children, so RUSAGE_CHILDREN misses them. O(processes) (a /proc scan)."""
    me = os.getpid()
    servers = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            pid = int(name)
            if _proc_cpu(pid, with_reaped=False)[1] == me and _is_forkserver(pid):
                servers.append(pid)
    total = 0.0
    for server in servers:
        total += _proc_cpu(server, with_reaped=True)[0]
        for name in os.listdir("/proc"):
            if name.isdigit():
                cpu, parent = _proc_cpu(int(name), with_reaped=False)
                if parent == server:
                    total += cpu
    return total


def _is_forkserver(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"multiprocessing.forkserver" in f.read()
    except OSError:
        return False


def _proc_cpu(pid: int, with_reaped: bool) -> tuple[float, int]:
    """(CPU seconds, parent pid) of ``pid`` from /proc (0, -1 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, -1
    # fields[0] is field 3 (state): utime=14, stime=15, cutime=16, cstime=17.
    ticks = int(fields[11]) + int(fields[12])
    if with_reaped:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / _TICK, int(fields[1])


#: per data directory, the postmaster last seen and its tree's CPU then: a
#: test that restarts the server gets a new postmaster, and the old one's
#: CPU (as last read) is kept in ``_retired_pg``
_last: dict[str, tuple[int, float]] = {}


def _tree_cpu(datadir: str) -> float:
    """CPU of one server: postmaster (with the backends it reaped) + live backends."""
    global _retired_pg
    try:
        with open(os.path.join(datadir, "postmaster.pid")) as f:
            master = int(f.readline())
    except (OSError, ValueError):
        return _last.get(datadir, (0, 0.0))[1]
    total, _ = _proc_cpu(master, with_reaped=True)
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != master:
            child, parent = _proc_cpu(int(name), with_reaped=False)
            if parent == master:
                total += child
    pid, before = _last.get(datadir, (master, 0.0))
    if pid != master:  # restarted since the last reading
        _retired_pg += before
    _last[datadir] = (master, total)
    return total


def _pg_cpu() -> float:
    """CPU of every live cluster's server tree, plus the destroyed ones'."""
    return _retired_pg + sum(_tree_cpu(d) for d in _clusters)


def cluster_started(datadir: str) -> None:
    """The pg_cluster fixture started a server with this data directory."""
    _clusters.append(datadir)


def cluster_stopping(datadir: str) -> None:
    """The server is about to stop: keep its CPU so far."""
    global _retired_pg
    if datadir in _clusters:
        _retired_pg += _tree_cpu(datadir)
        _clusters.remove(datadir)
        _last.pop(datadir, None)


def configure() -> None:
    """At ``pytest_configure``: the worker's start-up cost so far."""
    _state.update(
        worker=_worker(),
        start_cpu=time.process_time(),
        start_children=_children(),
        wall0=time.perf_counter(),
        tests=[],
    )


def collection_finished() -> None:
    """At ``pytest_collection_finish``: collection's cost."""
    _state["collect_cpu"] = time.process_time() - _state["start_cpu"]
    _state["collect_wall"] = time.perf_counter() - _state["wall0"]


def measure(nodeid: str) -> Iterator[None]:
    """Around one test's protocol (a generator for a hookwrapper)."""
    has_pg = bool(_clusters)
    c0, k0, w0 = time.process_time(), _children(), time.perf_counter()
    p0 = _pg_cpu() if has_pg else None
    yield
    c1, k1, w1 = time.process_time(), _children(), time.perf_counter()
    if p0 is None and _clusters:
        p0 = _retired_pg  # the cluster was started by this test (setup)
    pg = (_pg_cpu() - p0) if p0 is not None else 0.0
    _state["tests"].append(
        {
            "id": nodeid,
            "file": nodeid.split("::", 1)[0],
            "cpu": round(c1 - c0, 4),
            "children": round(k1 - k0, 4),
            "pg": round(pg, 4),
            "wall": round(w1 - w0, 4),
        }
    )


def session_finished(config: Any) -> None:
    """Write this worker's file; the controller merges and prints."""
    path = enabled()
    assert path is not None
    if "tests" in _state:
        own = {
            "worker": _state["worker"],
            "start_cpu": round(_state["start_cpu"], 3),
            "collect_cpu": round(_state.get("collect_cpu", 0.0), 3),
            "collect_wall": round(_state.get("collect_wall", 0.0), 3),
            "session_cpu": round(time.process_time(), 3),
            "session_children": round(_children() - _state["start_children"], 3),
            "session_pg": round(_pg_cpu(), 3),
            "session_wall": round(time.perf_counter() - _state["wall0"], 3),
            "tests": _state["tests"],
        }
        Path(f"{path}.{_state['worker']}.json").write_text(json.dumps(own))
    if _worker() == "main":
        merge(path)
        report(path, out=sys.stdout)


def merge(path: str) -> None:
    """Merge ``path.*.json`` (one per worker) into ``path``."""
    workers = []
    for part in sorted(Path(path).parent.glob(Path(path).name + ".*.json")):
        workers.append(json.loads(part.read_text()))
        part.unlink()
    if not workers:
        return
    files: dict[str, dict[str, float]] = {}
    for w in workers:
        for t in w["tests"]:
            f = files.setdefault(
                t["file"], {"cpu": 0.0, "children": 0.0, "pg": 0.0, "wall": 0.0, "tests": 0}
            )
            for k in ("cpu", "children", "pg", "wall"):
                f[k] += t[k]
            f["tests"] += 1
    Path(path).write_text(json.dumps({"workers": workers, "files": files}, indent=1))


def report(path: str, out: Any, top: int = 40) -> None:
    """Print workers, then files and tests by total CPU (own + children + pg)."""
    if not Path(path).exists():
        return
    data = json.loads(Path(path).read_text())

    def total(d: dict[str, Any]) -> float:
        return float(d["cpu"] + d["children"] + d["pg"])

    print(f"\n== CPU profile ({path}) ==", file=out)
    grand = 0.0
    for w in data["workers"]:
        tests_total = sum(total(t) for t in w["tests"])
        # The controller's children are the workers: counted already.
        own_children = 0.0 if w["worker"] == "main" and len(data["workers"]) > 1 else 1.0
        grand += w["session_cpu"] + own_children * w["session_children"] + w["session_pg"]
        print(
            f"worker {w['worker']}: start {w['start_cpu']:.1f} s cpu, collect"
            f" {w['collect_cpu']:.1f} s cpu ({w['collect_wall']:.1f} s wall), session"
            f" cpu {w['session_cpu']:.1f} + children {w['session_children']:.1f} + pg"
            f" {w['session_pg']:.1f} s, tests {tests_total:.1f} s cpu, wall"
            f" {w['session_wall']:.1f} s, {len(w['tests'])} tests",
            file=out,
        )
    print(f"all workers: {grand:.1f} s cpu (half: {grand / 2:.1f} s)", file=out)
    files = sorted(data["files"].items(), key=lambda kv: -total(kv[1]))
    print("\n-- files by CPU (own + children + pg = total; wall) --", file=out)
    for name, f in files[:top]:
        print(
            f"{total(f):7.1f}  {f['cpu']:6.1f} {f['children']:6.1f} {f['pg']:6.1f}"
            f"  wall {f['wall']:6.1f}  n={f['tests']:4d}  {name}",
            file=out,
        )
    tests = sorted((t for w in data["workers"] for t in w["tests"]), key=lambda t: -total(t))
    print("\n-- tests by CPU --", file=out)
    for t in tests[:top]:
        print(f"{total(t):7.2f}  wall {t['wall']:6.2f}  {t['id']}", file=out)


if __name__ == "__main__":
    report(sys.argv[1], out=sys.stdout, top=int(sys.argv[2]) if len(sys.argv) > 2 else 40)
