"""Durability: an SQLite edit log, a reopen that recovers the buffer, and
``quiesce inspect`` to read the log as a person.

Run: ``python examples/durability.py``. Skips (exit 0) if this quiesce has no
``SQLiteLog``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import quiesce
from quiesce import Buffer, Entry, Kind


def main() -> int:
    sqlite_log = getattr(quiesce, "SQLiteLog", None)
    if sqlite_log is None:
        print("SQLiteLog is not available in this quiesce; skipping")
        return 0
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "agent.sqlite")
        buf = Buffer(log=sqlite_log(path))
        buf.append(Entry("c1", Kind.CONSTRAINT, "do not modify files under /etc", turn=1))
        buf.append(Entry("dump", Kind.TOOL_OUTPUT, "kubectl describe pod web-0 ...", turn=40))
        buf.prune(["dump"], reason="dump is noise", actor="pruner", turn=41)
        buf.flush()  # everything above is durable now
        version = buf.version
        assert buf.sink is not None
        buf.sink.close()

        again = Buffer(log=sqlite_log(path))
        tombs = list(again.tombstones)
        print(f"reopened at version {again.version} (was {version}); tombstones: {tombs}")
        assert again.version == version and "dump" in again.tombstones
        assert again.sink is not None
        again.sink.close()

        shown = subprocess.run(
            [sys.executable, "-m", "quiesce", "inspect", path],
            capture_output=True,
            text=True,
            check=True,
        )
        print(shown.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
