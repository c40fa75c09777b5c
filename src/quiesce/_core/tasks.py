"""Which task holds a pin — found cheaply, without importing an event loop.

The core must stay loop-free (sans-IO), yet a pin should name the coroutine
that holds it (for ``stats()`` and reader-age alarms). This probe asks only
the event-loop libraries that are *already imported* (via ``sys.modules``),
so importing the core imports no loop.

It is on the pin fast path, and on CPython 3.11 the obvious probe,
``asyncio.current_task()``, costs ~0.3 µs in a running task: it is a Python
function, and the C ``_get_running_loop()`` it calls makes a ``getpid()``
system call every time (to notice a fork). So the probe keeps, per thread
(in a ``threading.local``), the asyncio loop it last found running there,
with the very ``int`` object ``run_forever`` stored in ``loop._thread_id``
when that run started; while that loop is still in that run in this thread
(``loop._thread_id is`` the cached object: one identity test, where ``==``
of two thread idents, large ints, is a slower generic compare) its current
task is one dict lookup in ``asyncio.tasks._current_tasks``. Each run
stores a new ``int`` (idents are not small ints), so a loop stopped, or
run again here or in another thread, fails the test. Otherwise (first call
in a thread, another loop, a loop class without ``_thread_id``, after a
fork, which clears the cache) it falls back to ``_get_running_loop()``.
Same answers, ~0.1 µs; ``anyio.get_current_task()`` costs 2.9 µs
(``shared/reference/FLOOR.md``).

The loop is held by a strong reference, not a weak one: calling a
``weakref.ref`` was ~25 ns of a ~580 ns pin + unpin (issue 24). The price:
a stopped loop (``asyncio.run`` has closed it, so its selector and sockets
are released) stays alive, as a few KB of Python objects, until the next
probe in the same thread replaces or forgets it, or the thread ends; at
most one loop per thread.

Trio and plain threads: trio keeps its running task in a ``threading.local``
(``GLOBAL_RUN_CONTEXT.task``, what ``trio.lowlevel.current_task()`` reads);
the probe reads that local's per-thread dict directly (one dict lookup; the
public ``in_trio_task()`` costs ~0.4 µs outside trio, a caught
AttributeError), and a thread is looked up in ``threading``'s own table.
Once a trio task pinned in a thread with no loop cached, that dict's
``get`` is cached in the thread's loop cache too (:class:`_TrioRun`), so a
pin on trio takes the same steps as one on asyncio. So a pin costs about
the same on asyncio, on trio and in a worker thread (the ``ll_pin_trio``
and ``ll_pin_thread`` figures of the ``long_life`` bench).
If a trio version lacks that local, the public calls are used.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from types import BuiltinFunctionType, MemberDescriptorType
from typing import Any

__all__ = ["current_task", "task_name"]

_modules = sys.modules
_current_thread = threading.current_thread
_get_ident = threading.get_ident
#: ident -> Thread of the threads ``threading`` started or adopted (what
#: ``current_thread()`` reads, without its second ``get_ident()`` call)
_active_threads: dict[int, threading.Thread] = getattr(threading, "_active", {})


class _LoopCache(threading.local):
    """Per thread: the asyncio loop last found running in this thread, as
    ``(the loop, the ident object its current run stored in _thread_id, the
    task getter, the loop again)``, or this thread's trio entry (see
    :class:`_TrioRun`), or ``None``. The probe tests ``entry[0]._thread_id
    is entry[1]`` and asks ``entry[2](entry[3])``. A thread-local (one
    C-level attribute read, the class default ``None`` for a thread that
    never cached one) is ~0.1 µs cheaper per pin than ``get_ident()`` plus a
    dict keyed by ident, and a new thread that reuses a dead thread's ident
    starts empty."""

    loop: tuple[Any, int, Callable[[Any], Any], Any] | None = None


class _TrioRun:
    """Stands for trio in a thread's loop cache, where a trio task pinned
    and no asyncio loop was cached: the entry ``(this, ident, the thread's
    trio run-context dict's get, "task")`` passes the probe's identity test
    (``_thread_id`` is the thread's ident object) and its getter reads the
    running trio task (None between task steps and outside a run, when the
    probe falls back to :func:`current_task_of`, which forgets the entry).
    So a pin on trio costs what one on asyncio does: one thread-local read,
    one identity test, one dict lookup (no ``get_ident()``, no second
    thread-local read of trio's context). The dict is the one trio's
    ``threading.local`` keeps for this thread for the thread's life (what
    ``GLOBAL_RUN_CONTEXT.__dict__`` returns here each time); the entry is
    this thread's only (the cache is thread-local) and a fork clears it."""

    __slots__ = ("_thread_id",)

    def __init__(self, ident: int) -> None:
        self._thread_id = ident


def cache_trio() -> None:
    """Cache this thread's trio entry (:class:`_TrioRun`); called by a pin
    that found a trio task running and no entry cached. O(1)."""
    ctx = _trio_context
    if ctx is not None:
        ident = _get_ident()
        _loop_cache.loop = (_TrioRun(ident), ident, ctx.__dict__.get, "task")


_loop_cache = _LoopCache()


def _forget_loop_in_child() -> None:
    """After a fork: the child's only thread forgets its loop (it is not
    running in the child); the other threads' caches died with them."""
    _loop_cache.loop = None


if hasattr(os, "register_at_fork"):  # a child's loops are not running
    os.register_at_fork(after_in_child=_forget_loop_in_child)

# Bound on first sight of asyncio / trio in sys.modules (None: not yet).
_aio_running_loop: Callable[[], Any] | None = None
_aio_task_of: Callable[[Any], Any] | None = None
_trio_current_task: Callable[[], Any] | None = None
_trio_in_task: Callable[[], bool] | None = None
#: trio's per-thread run context (a ``threading.local`` whose ``task``
#: attribute is the running task, exactly what ``current_task()`` reads and
#: ``in_trio_task()`` tests); None if this trio does not have one.
_trio_context: threading.local | None = None


def _bind_asyncio() -> Callable[[], Any] | None:
    """Bind the asyncio probes if asyncio is imported; return the loop getter."""
    global _aio_running_loop, _aio_task_of
    aio: Any = _modules.get("asyncio")
    if aio is None:
        return None
    current = aio.current_task
    tasks = getattr(getattr(aio, "tasks", None), "_current_tasks", None)
    if isinstance(current, BuiltinFunctionType) or not isinstance(tasks, dict):
        _aio_task_of = current
    else:
        _aio_task_of = tasks.get
    _aio_running_loop = aio._get_running_loop
    return _aio_running_loop


def _bind_trio() -> Callable[[], Any] | None:
    """Bind trio's probes if trio is imported; return the task getter."""
    global _trio_current_task, _trio_in_task, _trio_context
    tr: Any = _modules.get("trio")
    if tr is None:
        return None
    # The run context read directly: its per-thread ``__dict__`` answers
    # "which task, if any" in one dict lookup (~50 ns), where
    # ``in_trio_task()`` costs ~0.4 µs outside trio (a caught AttributeError).
    run = _modules.get("trio._core._run")
    ctx = getattr(run, "GLOBAL_RUN_CONTEXT", None)
    if isinstance(ctx, threading.local):
        _trio_context = ctx
    # in_trio_task() (trio >= 0.23) answers "no" without raising, which in a
    # worker thread is ~1 µs cheaper than current_task()'s RuntimeError.
    _trio_in_task = getattr(tr.lowlevel, "in_trio_task", None)
    _trio_current_task = tr.lowlevel.current_task
    return _trio_current_task


def current_task() -> object:
    """The running asyncio task, else the running trio task, else the thread.
    The pin fast path (``Snapshot.__enter__``) inlines this: keep them alike."""
    cached = _loop_cache.loop
    if cached is None:
        return current_task_of(_get_ident(), None)
    loop, ident, task_of, key = cached
    if loop._thread_id is ident:  # still the run it was cached in
        task = task_of(key)
        if task is not None:
            return task
    return current_task_of(ident, loop)


def current_task_of(ident: int, cached: Any) -> object:
    """:func:`current_task` given the thread's ident and its cached loop
    (``_loop_cache.loop[0]``, which the pin fast path has read already, or
    ``None``). Refreshes this thread's cache: the loop found running here is
    cached, a cached loop found stopped (or the trio entry, which did not
    answer) is forgotten."""
    if cached is not None and type(cached) is not _TrioRun:
        run_ident = getattr(cached, "_thread_id", None)
        if run_ident == ident:  # still (or again: a new run) running here
            task_of = _aio_task_of
            assert task_of is not None  # bound before anything was cached
            _loop_cache.loop = (cached, run_ident, task_of, cached)  # this run's ident
            task = task_of(cached)
            if task is not None:
                return task
            return _trio_or_thread(ident)
    running_loop = _aio_running_loop
    if running_loop is None:
        running_loop = _bind_asyncio()
    if running_loop is not None:
        loop = running_loop()
        task_of = _aio_task_of
        assert task_of is not None  # bound with running_loop
        if loop is not None:
            # the ident object of this run, read once: the fast path tests
            # it by identity (see the module docstring)
            run_ident = getattr(loop, "_thread_id", None)
            if run_ident == ident:
                _loop_cache.loop = (loop, run_ident, task_of, loop)
            task = task_of(loop)
            if task is not None:
                return task
        elif cached is not None:
            _loop_cache.loop = None  # that loop has stopped (or trio's turn ended): forget it
    elif cached is not None:
        _loop_cache.loop = None
    return _trio_or_thread(ident)


def _trio_or_thread(ident: int) -> object:
    """The running trio task in thread ``ident`` (the caller's), else the
    thread itself."""
    ctx = _trio_context
    if ctx is not None:
        task = ctx.__dict__.get("task")
        if task is not None:
            return task
        thread = _active_threads.get(ident)
        return _current_thread() if thread is None else thread
    trio_task = _trio_current_task
    if trio_task is None:
        trio_task = _bind_trio()
        if _trio_context is not None:
            return _trio_or_thread(ident)
    if trio_task is not None:
        in_task = _trio_in_task
        if in_task is not None:
            if in_task():
                return trio_task()
        else:
            try:
                return trio_task()
            except RuntimeError:  # not in a trio task
                pass
    return _current_thread()


def task_name(task: object) -> str:
    """A readable name for what :func:`current_task` returned: an asyncio
    task's ``get_name()``, else its ``name`` (trio tasks, threads), else its
    ``repr``. O(1): the way to name a task is found once per type (probing
    ``get_name`` on a thread each time costs a caught AttributeError)."""
    cls = type(task)
    namer = _namers.get(cls)
    if namer is None:
        namer = _namer_for(cls)
        if len(_namers) < 64:
            _namers[cls] = namer
    return namer(task)


def _name_any(task: object) -> str:
    get_name = getattr(task, "get_name", None)  # asyncio.Task
    if callable(get_name):
        return str(get_name())
    name = getattr(task, "name", None)  # trio.lowlevel.Task, threading.Thread
    return str(name) if name is not None else repr(task)


def _name_by_get_name(task: Any) -> str:
    return str(task.get_name())


def _name_by_name(task: Any) -> str:
    name = getattr(task, "name", None)  # None also for an unset slot
    return str(name) if name is not None else repr(task)


def _namer_for(cls: type) -> Callable[[Any], str]:
    """How to name instances of ``cls``: by what its class defines (a method
    ``get_name``, or a ``name`` descriptor: a property or a slot), else the
    general probe of each instance."""
    if callable(getattr(cls, "get_name", None)):
        return _name_by_get_name
    if isinstance(getattr(cls, "name", None), property | MemberDescriptorType):
        return _name_by_name
    return _name_any


#: type -> how to name its instances (a handful of types: tasks and threads)
_namers: dict[type, Callable[[Any], str]] = {}
