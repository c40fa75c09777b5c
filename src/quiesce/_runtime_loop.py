"""The runtime's bridge between the event loop and threads, backend-neutral.

What it keeps true: nothing here blocks the loop. A worker thread reaches
the loop only through the backend's non-blocking thread-safe call
(:func:`threadsafe_caller`), so a thread holding the buffer's write lock
never waits for the loop; pin ages are read on the loop's own clock
(:func:`loop_clock`), the one the alarm sleeps on; and the final flush
(:func:`bounded_flush`: the removal batches still in their worker threads
land, then the log is flushed) runs in a daemon thread, waited for at most
its timeout of real time, shielded from cancellation. Reads only public names
of the buffer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

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


async def bounded_flush(
    buf: Buffer, timeout: float, landing: Sequence[threading.Event] = ()
) -> LogWriteError | None:
    """The end of leaving ``open_buffer``: wait for the removal batches still
    in their worker threads (``landing``: each batch's own completion event,
    set by its thread once the batch is published or refused, whole), then
    flush ``buf``; shielded from the caller's cancellation, and the whole of
    it bounded by ``timeout`` seconds of real time. Returns ``None`` once
    the batches landed and the log is durable (or the sink *failed*: that
    is ``stats().log_failing``, as for any flush), else the
    :class:`LogWriteError` to raise, naming the records still pending and
    the batches not landed; they stay so in memory, and their threads (the
    flush thread a daemon) still finish them if the sink wakes up.

    Both waits are on events, in one daemon thread: a batch that lands, a
    flush that ends wakes it at once (no polling). The bound is measured by
    a worker thread waiting on that thread, not by the loop's clock: a test
    clock that jumps while threads run (trio's ``MockClock`` with autojump)
    cannot cut a healthy batch or flush short, and a virtual clock never
    makes it wait for real time. Costs one daemon thread and one worker
    thread, O(len(landing)) besides.
    """
    done = threading.Event()
    deadline = time.monotonic() + timeout
    unlanded = [0]

    def land_and_flush() -> None:
        try:
            for i, landed in enumerate(landing):
                if not landed.wait(max(0.0, deadline - time.monotonic())):
                    unlanded[0] = len(landing) - i
                    # (a hung sink: still flushes, the loop has stopped waiting)
                    break
            buf.flush()
        except LogWriteError:
            pass  # stats().log_failing tells; the records stay pending
        finally:
            done.set()

    threading.Thread(target=land_and_flush, name="quiesce-final-flush", daemon=True).start()
    with anyio.CancelScope(shield=True):
        finished = await anyio.to_thread.run_sync(done.wait, timeout, abandon_on_cancel=True)
    pending = buf.pending_records
    batches = sum(1 for landed in landing if not landed.is_set())
    if finished and not unlanded[0]:
        return None
    if not pending and not batches:
        return None
    total = len(buf.log)
    what = []
    if pending:
        what.append(
            f"{pending} record(s) still pending (seq {total - pending}..{total - 1}), not durable"
        )
    if batches:
        what.append(f"{batches} removal batch(es) still in their worker thread, not published")
    return LogWriteError(
        f"the log sink did not finish the final flush within close_timeout="
        f"{timeout:g}s: {'; '.join(what)}",
        pending=pending,
    )
