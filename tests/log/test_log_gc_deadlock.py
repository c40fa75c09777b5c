"""A forgotten ``SQLiteLog`` freed by the cyclic garbage collector must not
deadlock the thread that opens another one.

Regression: ``SQLiteLog.__init__`` holds the module lock ``_HELD_LOCK``
while it stats and opens the file; a collection that runs there (any
allocation can start one) may finalize a forgotten log, whose ``__del__`` ->
``_release`` takes ``_HELD_LOCK`` again in the same thread. With a plain
``threading.Lock`` the process hung for good (now an ``RLock``). Found by
``test_stateful_logs`` (a failing run left a recovered buffer and its sink
in a traceback cycle; the teardown's next ``SQLiteLog(...)`` never
returned). Run in a child process, so a hang
is a timeout here, not a hung suite. The child reports each round: a hang
is a round that does not end within :data:`STALL` seconds (not a total time,
which a loaded machine's slow file system can exceed without any hang).
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

CHILD = textwrap.dedent(
    """
    import gc, os, sys
    from quiesce import SQLiteLog

    d = sys.argv[1]
    gc.set_threshold(3)  # collections often, so one lands inside an open
    for i in range(150):
        forgotten = SQLiteLog(os.path.join(d, f"a{i}.db"))
        forgotten.me = forgotten  # a cycle: only the cyclic collector frees it
        del forgotten  # never closed: __del__ releases it
        SQLiteLog(os.path.join(d, f"b{i}.db")).close()
        print(i, flush=True)
    print("done")
    """
)


#: seconds one round may take before the child counts as hung (a round is
#: two opens and a close: milliseconds on an idle machine)
STALL = 30.0


def test_a_forgotten_sqlite_log_freed_by_the_gc_never_deadlocks(tmp_path: Path) -> None:
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.strip())
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    out: list[str] = []
    try:
        while (line := lines.get(timeout=STALL)) is not None:
            out.append(line)
    except queue.Empty:
        proc.kill()
        proc.wait()
        pytest.fail(
            "SQLiteLog(...) deadlocked while the GC finalized a forgotten SQLiteLog"
            f" (no round ended in {STALL:g} s after round {out[-1] if out else 'none'})"
        )
    _, err = proc.communicate()
    assert proc.returncode == 0, err
    assert out == [*map(str, range(150)), "done"]
