"""The runtime's bridge between the event loop and threads, backend-neutral.

What it keeps true: nothing here blocks the loop. A worker thread reaches
the loop only through the backend's non-blocking thread-safe call
(:func:`threadsafe_caller`), so a thread holding the buffer's write lock
never waits for the loop; pin ages are read on the loop's own clock
(:func:`loop_clock`), the one the alarm sleeps on; and the final flush
(:func:`bounded_flush`) runs in a daemon thread, waited for at most its
timeout of real time, shielded from cancellation. Reads only public names
of the buffer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import anyio

from ._core.buffer import Buffer
from ._core.errors import LogWriteError

__all__ = ["bounded_flush", "loop_clock", "threadsafe_caller"]


def threadsafe_caller() -> Callable[[Callable[[], None]], None]:
    """A non-blocking 'run this in the loop soon' for the running backend."""
    import asyncio

    loop = asyncio._get_running_loop()
    if loop is not None:

        def call_soon(fn: Callable[[], None]) -> None:
            loop.call_soon_threadsafe(fn)

        return call_soon
    import trio

    token = trio.lowlevel.current_trio_token()
    return lambda fn: token.run_sync_soon(fn)


def loop_clock() -> Callable[[], float]:
    """The running backend's clock, readable from any thread: asyncio's
    ``loop.time`` (``time.monotonic``), or trio's current clock (a test's
    ``MockClock`` included). Pin ages measured on it agree with the alarm's
    ``anyio.sleep``."""
    import asyncio

    loop = asyncio._get_running_loop()
    if loop is not None:
        return loop.time
    import trio

    return trio.lowlevel.current_clock().current_time


async def bounded_flush(buf: Buffer, timeout: float) -> LogWriteError | None:
    """The flush of ``buf`` on leaving ``open_buffer``: shielded from the caller's
    cancellation, but bounded by ``timeout`` seconds of real time. Returns
    ``None`` once the log is durable (or the sink *failed*: that is
    ``stats().log_failing``, as for any flush), else the
    :class:`LogWriteError` to raise, naming the records still pending;
    they stay pending in memory, and the flush thread (a daemon) still
    makes them durable if the sink wakes up.

    The bound is measured by a worker thread waiting on the flush thread,
    not by the loop's clock: a test clock that jumps while threads run
    (trio's ``MockClock`` with autojump) cannot cut a healthy flush short.
    """
    done = threading.Event()

    def flush() -> None:
        try:
            buf.flush()
        except LogWriteError:
            pass  # stats().log_failing tells; the records stay pending
        finally:
            done.set()

    threading.Thread(target=flush, name="quiesce-final-flush", daemon=True).start()
    with anyio.CancelScope(shield=True):
        finished = await anyio.to_thread.run_sync(done.wait, timeout, abandon_on_cancel=True)
    pending = buf.pending_records
    if finished or not pending:
        return None
    total = len(buf.log)
    return LogWriteError(
        f"the log sink did not finish the final flush within close_timeout="
        f"{timeout:g}s: {pending} record(s) still pending "
        f"(seq {total - pending}..{total - 1}), not durable",
        pending=pending,
    )
