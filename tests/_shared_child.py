"""A member process for the multi-process tests of ``open_shared_buffer``.

Started from :func:`context` (a forkserver: a fresh process, as on another
host, that shares nothing with the test process); runs one
``open_shared_buffer`` on the given anyio backend and obeys commands sent
over a pipe, one at a time: ``(name, args)`` → ``("ok", value)`` or
``("error", type name, message)``. Pins taken by ``pin`` stay held until
``unpin``. ``writes`` runs a loop of forwarded (or local) appends and marks
and returns which were acknowledged, which raised, and which timed out.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
import multiprocessing.process
import os
import sys
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any

import anyio

from quiesce import EditPlan, Entry, Kind, Prune, QuiesceError, Snapshot
from quiesce._shared import SharedBuffer, SharedWriteTimeout, open_shared_buffer

#: What the forkserver imports once, before it forks any member: this module
#: (quiesce, its shared buffer, psycopg, anyio) and both event loops' anyio
#: backends. A member then starts in a few milliseconds instead of importing
#: all of it again in a new interpreter (0.45 s of CPU, 1-2 s of wall time on
#: a loaded two-core machine; the default run starts 109 such children).
PRELOAD = [
    "_shared_child",
    "_integrations_shared_child",
    "_pg_ckpt_child",
    "trio",
    "anyio._backends._asyncio",
    "anyio._backends._trio",
]


def context() -> multiprocessing.context.ForkServerContext:
    """The start method of the member processes (and of the framework agents
    of ``test_integrations_shared``): ``forkserver``, preloading
    :data:`PRELOAD`.

    What holds: each child is forked from the server process, which Python
    starts (fresh, by spawn) the first time a child is started in this test
    process and which has only imported those modules: no event loop, no
    thread, no connection, nothing of the test process (its monkeypatches,
    its fixtures' state) is inherited; the environment is the one of that
    first start. ``random`` is reseeded in each fork. The server lives until
    the test process exits; a module that fails to preload is imported by the
    child instead (as with spawn)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def process(
    target: Callable[..., object],
    *args: Any,
    stdout: int | None = None,
    stderr: int | None = None,
) -> multiprocessing.process.BaseProcess:
    """Start ``target(*args)`` in a child of :func:`context` and return it.

    The child's fd 1 and fd 2 are this process's fd 1 and fd 2 *now* (as a
    spawned child's would be: under pytest, the running test's capture, so
    its output and tracebacks show in that test's report), or the given
    descriptors (duplicated: the caller keeps and closes its own). The
    forkserver's own stdio, fixed when it started, is not used."""
    fds = [Connection(os.dup(1 if stdout is None else stdout))]
    fds.append(Connection(os.dup(2 if stderr is None else stderr)))
    proc = context().Process(target=_with_stdio, args=(*fds, target, args))
    try:
        proc.start()
    finally:
        for c in fds:  # the forkserver has its own copies once start() returned
            c.close()
    return proc


class PipeChild:
    """The parent's side of a child of :func:`process` that answers commands
    on a pipe: ``(name, args)`` sent, ``("ok", value)`` or ``("error", kind,
    text)`` back. A subclass starts the process and sets :attr:`conn` and
    :attr:`proc`; :attr:`noun` names it in errors, :attr:`exit_wait` bounds
    :meth:`wait_exited` (its exit answer, then the process's end)."""

    noun = "child"
    exit_wait = (20.0, 10.0)
    conn: Connection
    proc: multiprocessing.process.BaseProcess

    def _reply(self, timeout: float) -> Any:
        if not self.conn.poll(timeout):
            raise AssertionError(f"{self.noun} {self.proc.pid} did not answer within {timeout}s")
        msg = self.conn.recv()
        if msg[0] == "error":
            raise AssertionError(f"{self.noun} {self.proc.pid}: {msg[1]}: {msg[2]}")
        return msg[1]

    def send(self, name: str, args: Any = None) -> None:
        self.conn.send((name, args))

    def ask_to_exit(self) -> bool:
        """Send ``exit`` to a live child without waiting; whether it was sent."""
        if not self.proc.is_alive():
            return False
        try:
            self.send("exit")
        except OSError:
            return False
        return True

    def wait_exited(self, asked: bool) -> None:
        """After :meth:`ask_to_exit`: its answer, then the process's end
        (each bounded by :attr:`exit_wait`), else SIGKILL."""
        answer, join = self.exit_wait
        if asked:
            try:
                self._reply(answer)
            except (AssertionError, OSError, EOFError):
                pass
        self.proc.join(join)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)

    def close(self) -> None:
        self.wait_exited(self.ask_to_exit())


def close_all(children: Sequence[PipeChild]) -> None:
    """Close every child: all are asked to exit first, then each is waited
    for, so their shutdowns (a sequencer's last flush and lease release,
    each member's leave) overlap instead of adding up."""
    asked = [c.ask_to_exit() for c in children]
    for c, a in zip(children, asked, strict=True):
        c.wait_exited(a)


def _with_stdio(
    out: Connection, err: Connection, target: Callable[..., object], args: tuple[Any, ...]
) -> None:
    """The child side of :func:`process`: adopt ``out``/``err`` as fd 1 and
    fd 2, then run the target."""
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    os.dup2(out.fileno(), 1)
    os.dup2(err.fileno(), 2)
    out.close()
    err.close()
    target(*args)


def summary(buf: SharedBuffer) -> dict[str, Any]:
    """What every member must agree on once caught up."""
    head = buf.head()
    return {
        "version": head.number,
        "entries": [e.id for e in head.entries()],
        "marks": sorted(head.marks),
        "tombstones": sorted(head.tombs.by_id),
        "log": len(buf.log),
        "staged": sorted(buf.staged()),
    }


class Report:
    """What this member records for the merged cross-process check
    (``quiesce.testing.check_shared_history``): its readers and the log
    prefix each returning ``flush()`` vouched for."""

    def __init__(self) -> None:
        #: [version, entered, exited | None, seen ids, read start times]
        self.pins: list[list[Any]] = []
        self.flushes: list[tuple[int, dict[str, Any] | None]] = []

    async def flush(self, buf: SharedBuffer) -> None:
        # what was in the log *before* the call is durable once it returns
        n = len(buf.log)
        last = buf.log[n - 1].to_dict() if n else None
        await buf.flush()
        self.flushes.append((n, last))

    def as_dict(self, buf: SharedBuffer) -> dict[str, Any]:
        return {
            "member": buf.member_id,
            "pins": self.pins,
            "flushes": self.flushes,
            "lease_lost": list(buf.lease_lost_times),
        }


REPORT = Report()


async def _writes(buf: SharedBuffer, prefix: str, n: int, timeout: float) -> dict[str, Any]:
    acked: list[str] = []
    failed: list[str] = []
    unknown: list[str] = []
    for i in range(n):
        eid = f"{prefix}{i}"
        try:
            await buf.append(Entry(eid, Kind.REASONING, f"{prefix} step {i}"), timeout=timeout)
            if i % 3 == 0:
                await buf.mark_stale(eid, "old", timeout=timeout)
            await REPORT.flush(buf)  # a sequencer's write counts once durable
            acked.append(eid)
        except SharedWriteTimeout:
            unknown.append(eid)
        except QuiesceError as exc:
            failed.append(f"{eid}: {type(exc).__name__}: {exc}")
            await anyio.sleep(0.05)
    return {"acked": acked, "failed": failed, "unknown": unknown}


async def _read_loop(
    pins: list[tuple[Snapshot, list[Any]]], duration: float, interval: float
) -> dict[str, Any]:
    """Read every held snapshot each ``interval`` seconds for ``duration``
    seconds or until a read fails; each successful read's start time (wall
    clock, taken before the read) is recorded with its pin for the checker.
    Returns the last successful read's start, the first failure's time and
    its error."""
    last_ok: float | None = None
    stop = time.monotonic() + duration
    while time.monotonic() < stop:
        for snap, pin in pins:
            started = time.time()
            try:
                [e.id for e in snap]
            except QuiesceError as exc:
                return {
                    "last_ok": last_ok,
                    "failed_at": time.time(),
                    "error": f"{type(exc).__name__}: {exc}",
                }
            pin[4].append(started)
            last_ok = started
        await anyio.sleep(interval)
    return {"last_ok": last_ok, "failed_at": None, "error": None}


def _reads_ignore_the_deadline() -> None:
    """Test hook (this process only): the read check of before the fix,
    which trusted the heartbeat task to notice the lease deadline (so a
    heartbeat stuck in a database call let reads go on past it)."""

    def check_read(self: SharedBuffer, since: float, number: int) -> None:
        if self._lease_lost is not None and since <= self._void_before:
            raise QuiesceError(f"this snapshot (version {number}) was pinned when it expired")

    SharedBuffer._check_read = check_read  # type: ignore[method-assign]


async def _serve(conn: Connection, buf: SharedBuffer) -> None:
    pins: list[tuple[Snapshot, list[Any]]] = []
    pin_log: list[tuple[int, float, float, list[str]]] = []
    while True:
        name, args = await anyio.to_thread.run_sync(conn.recv, abandon_on_cancel=True)
        try:
            value: Any = None
            if name == "exit":
                for snap, _ in pins:
                    snap.__exit__(None, None, None)
                conn.send(("ok", None))
                return
            elif name == "role":
                value = (buf.role, buf.epoch, os.getpid())
            elif name == "append":
                value = await buf.append(Entry(args[0], Kind.REASONING, args[1]))
            elif name == "mark":
                value = (await buf.mark_stale(args[0], "old")).version
            elif name == "prune":
                report = await buf.prune(args, reason="test prune", actor="test")
                value = {i: o.status.name for i, o in report.items()}
            elif name == "edit_prune":
                plan = EditPlan([Prune(i) for i in args], reason="test edit", actor="test")
                er = await buf.edit(plan)
                value = {
                    "applied": er.applied,
                    "version": er.version,
                    "removed": list(er.removed),
                    "deferred": list(er.deferred),
                }
            elif name == "pin":
                snap = buf.snapshot().__enter__()
                seen = [e.id for e in snap]
                pin = [snap.version, time.time(), None, seen, []]
                REPORT.pins.append(pin)
                pins.append((snap, pin))
                value = (snap.version, seen)
            elif name == "unpin":
                now = time.time()
                for snap, pin in pins:
                    try:
                        pin_log.append((snap.version, pin[1], now, [e.id for e in snap]))
                    except QuiesceError:  # void (LeaseLost): still unpinned below
                        pass
                    pin[2] = now
                    snap.__exit__(None, None, None)
                pins.clear()
                value = now
            elif name == "summary":
                value = summary(buf)
            elif name == "wait_applied":
                await buf.wait_applied(args, timeout=30)
                value = summary(buf)
            elif name == "check":
                buf._check()
                value = True
            elif name == "flush":
                await REPORT.flush(buf)
                value = len(buf.log)
            elif name == "report":
                value = REPORT.as_dict(buf)
            elif name == "pending":
                value = buf.local.pending_records
            elif name == "stats":
                st = buf.stats()
                value = {
                    "role": st.role,
                    "epoch": st.epoch,
                    "applied_seq": st.applied_seq,
                    "connected": st.connected,
                    "lease_valid": st.lease_valid,
                    "failovers": st.failovers,
                    "served": st.served,
                    "forwarded": st.forwarded,
                    "grace_floor": st.grace_floor,
                }
            elif name == "writes":
                value = await _writes(buf, *args)
            elif name == "read_pins":
                out = []
                for snap, _ in pins:
                    try:
                        out.append([e.id for e in snap])
                    except QuiesceError as exc:
                        out.append(f"{type(exc).__name__}: {exc}")
                value = out
            elif name == "read_loop":
                value = await _read_loop(pins, *args)
            elif name == "pin_log":
                value = pin_log
            elif name == "escalations":
                value = [  # from the log: the runtime streams them to a consumer
                    {"kind": r.detail["kind"], "detail": r.reason, "data": r.detail["data"]}
                    for r in buf.log
                    if r.op == "escalate"
                ]
            elif name == "snapshot_error":
                try:
                    with buf.snapshot():
                        value = None
                except QuiesceError as exc:
                    value = (type(exc).__name__, str(exc))
            else:
                raise ValueError(f"unknown command {name!r}")
            conn.send(("ok", value))
        except Exception as exc:
            conn.send(("error", type(exc).__name__, str(exc)))


async def _main(dsn: str, backend: str, conn: Connection, options: dict[str, Any]) -> None:
    async with open_shared_buffer(dsn, "shared", **options) as buf:
        conn.send(("ok", (buf.role, buf.epoch, os.getpid())))
        await _serve(conn, buf)


def _signal(path: str, text: str) -> None:
    """Tell the parent (which polls for ``path``): written whole, then renamed."""
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def _hold_between_apply_and_result(op: str, path: str, race: bool) -> None:
    """Test hook (this process only): once the sequencer has applied the
    first forwarded ``op``, and before its result is known, hold the serving
    thread for good, after creating the file ``path`` (the parent SIGKILLs
    this process then). With ``race``, another thread flushes first, as the
    flusher or a removal's intent flush may at that moment; the file is
    created when that flush returned, or after 1 s if it waits."""
    import threading

    original = SharedBuffer._apply_locally
    fired: list[bool] = []

    def apply(self: SharedBuffer, name: str, args: dict[str, Any]) -> Any:
        value = original(self, name, args)
        if name == op and not fired:
            fired.append(True)
            if race:
                racer = threading.Thread(target=self.local.flush, daemon=True)
                racer.start()
                racer.join(1.0)
            _signal(path, "held")
            time.sleep(600)
        return value

    SharedBuffer._apply_locally = apply  # type: ignore[method-assign]


def _wait_for(resume: str | None) -> None:
    """Hold the calling thread: for good (the parent SIGKILLs this process),
    or, with ``resume``, until that file exists (the parent SIGSTOPs this
    process first, then creates it: the thread goes on after SIGCONT)."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if resume is not None and os.path.exists(resume):
            return
        time.sleep(0.01)


def _hold_mid_commit(path: str, at: int, resume: str | None = None) -> None:
    """Test hook (this process only): inside the ``at``-th group commit of
    the sink that holds records (after the COPY, before the NOTIFY and the
    COMMIT), create the file ``path`` and stop there (:func:`_wait_for`)."""
    original = SharedBuffer._before_commit
    commits: list[int] = []

    def before_commit(self: SharedBuffer, cur: Any, batch: Any) -> Any:
        done = original(self, cur, batch)
        commits.append(len(batch))
        if len(commits) == at:
            _signal(path, f"{batch[0].seq} {batch[-1].seq}")
            _wait_for(resume)
        return done

    SharedBuffer._before_commit = before_commit  # type: ignore[method-assign]


def _hold_mid_copy(path: str, at: int, resume: str | None = None) -> None:
    """Test hook (this process only): while the sink streams the ``at``-th
    record into its ``COPY ... FROM STDIN`` (the COPY under way, the
    transaction open), create the file ``path`` holding that record's seq
    and stop there (:func:`_wait_for`)."""
    import psycopg

    original = psycopg.Copy.write_row
    count: list[int] = []

    def write_row(self: Any, row: Any) -> None:
        count.append(1)
        if len(count) == at:
            # send the rows buffered so far: the server inserts them (row
            # locks, uncommitted keys) while the COPY waits for the rest
            buffered = self.formatter.end()  # the text formatter's buffer, taken
            if buffered:
                self._write(buffered)
            seq = row[1]  # (buffer_id, seq, epoch, format, op, version, record)
            _signal(path, f"{seq} {seq}")
            _wait_for(resume)
        original(self, row)

    psycopg.Copy.write_row = write_row  # type: ignore[method-assign]


def child(dsn: str, backend: str, conn: Connection, options: dict[str, Any]) -> None:
    """The process entry point (SIGUSR1 dumps every thread's stack)."""
    import faulthandler
    import signal

    faulthandler.register(signal.SIGUSR1, all_threads=True)

    def tasks(*_: object) -> None:  # SIGUSR2: every asyncio task's stack
        import asyncio
        import sys

        for t in asyncio.all_tasks():
            t.print_stack(file=sys.stderr)

    signal.signal(signal.SIGUSR2, tasks)
    hold = options.pop("hold", None)
    if hold is not None:
        _hold_between_apply_and_result(**hold)
    mid_commit = options.pop("hold_commit", None)
    if mid_commit is not None:
        _hold_mid_commit(**mid_commit)
    if not options.pop("lease_reads", True):
        _reads_ignore_the_deadline()
    mid_copy = options.pop("hold_copy", None)
    if mid_copy is not None:
        _hold_mid_copy(**mid_copy)
    try:
        anyio.run(_main, dsn, backend, conn, options, backend=backend)
    except Exception as exc:  # reported to the parent, which fails the test
        try:
            conn.send(("error", type(exc).__name__, str(exc)))
        except OSError:
            pass
        raise
