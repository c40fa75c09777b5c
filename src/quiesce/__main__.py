"""The ``quiesce`` command: ``demo``, ``bench``, ``inspect``, ``compact``, ``verify``, ``view``.

Each subcommand lives in its own module and is imported only when run, so
``quiesce inspect`` never imports the benchmark's plotting stack.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

_COMMANDS = {
    "demo": ("quiesce.demo", "the main job: a multi-agent loop, quiesce vs a naive buffer"),
    "bench": ("quiesce.bench", "the benchmark suite: JSON results and PNG plots"),
    "inspect": ("quiesce._log.inspect", "the edit log and tombstones of a durable log file"),
    "compact": ("quiesce._log.compact", "write a new log starting from a checkpoint of a log"),
    "verify": ("quiesce._log.verify", "replay a log in full and check every checkpoint against it"),
    "view": ("quiesce._log.view", "one self-contained HTML page showing a log's history"),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``quiesce`` and ``python -m quiesce``."""
    args = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="quiesce",
        description="Concurrency control for an AI agent's mutable context buffer.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_module, help_text) in _COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    if not args or args[0] not in _COMMANDS:
        parser.parse_args(args or ["--help"])
        return 2
    module = importlib.import_module(_COMMANDS[args[0]][0])
    result: int = module.main(args[1:])
    return result


if __name__ == "__main__":
    sys.exit(main())
