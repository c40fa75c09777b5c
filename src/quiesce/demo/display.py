"""The demo's live progress: a rich table on a terminal, plain lines otherwise.

What it keeps true: it only reads the worlds (their ``row()`` and events);
every event a world records is written out exactly once, whichever mode.
"""

from __future__ import annotations

from typing import Any, TextIO

from .worlds import World

__all__ = ["Display"]


class Display:
    """Live progress: a rich table on a terminal, plain lines otherwise."""

    def __init__(self, out: TextIO, *, live: bool, turns: int) -> None:
        self.out = out
        self.turns = turns
        self.rows: dict[str, tuple[int, dict[str, Any]]] = {}
        self.worlds: list[World] = []
        self._live: Any = None
        self._every = max(1, turns // 6)
        self._printed: dict[str, int] = {}
        if live:
            try:
                from rich.console import Console
                from rich.live import Live

                self._console = Console(file=out)
                self._live = Live(console=self._console, refresh_per_second=12, transient=False)
            except ImportError:  # rich is optional (the ``demo`` extra)
                self._live = None

    def __enter__(self) -> Display:
        if self._live is not None:
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.update(self._render())
            self._live.__exit__(None, None, None)
            # The live feed showed only the latest events: list them all once.
            for w in self.worlds:
                for line in w.events:
                    self.out.write(f"  [{w.name:>10}] {line}\n")

    def add(self, world: World) -> None:
        """Show ``world`` (rows appear in the order worlds are added)."""
        self.worlds.append(world)
        self.rows[world.name] = (0, world.row())

    def update(self, world: World, turn: int) -> None:
        self.rows[world.name] = (turn, world.row())
        if self._live is not None:
            self._live.update(self._render())
            return
        if turn % self._every == 0 or turn == self.turns:
            r = self.rows[world.name][1]
            self.out.write(
                f"  [{world.name:>10}] turn {turn:>3}/{self.turns}  version {r['version']:>4}  "
                f"entries {r['entries']:>3}  pins {r['pins']}  deferred {r['deferred']:>2}  "
                f"tombstones {r['tombstones']:>3}  escalations {r['escalations']}\n"
            )
        start = self._printed.get(world.name, 0)
        for line in world.events[start:]:
            self.out.write(f"  [{world.name:>10}] {line}\n")
        self._printed[world.name] = len(world.events)

    def _render(self) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        table = Table(title="quiesce demo: the same workload on two buffers", expand=False)
        for col in ("buffer", "turn", "version", "entries", "pins", "deferred", "marks"):
            table.add_column(col, justify="right")
        table.add_column("tombstones", justify="right")
        table.add_column("escalations", justify="right")
        for name, (turn, r) in self.rows.items():
            table.add_row(
                name,
                f"{turn}/{self.turns}",
                str(r["version"]),
                str(r["entries"]),
                str(r["pins"]),
                str(r["deferred"]),
                str(r["marks"]),
                str(r["tombstones"]),
                str(r["escalations"]),
            )
        feed = []
        for w in self.worlds:
            for line in w.events[-4:]:
                feed.append(Text(f"[{w.name}] {line}", overflow="ellipsis", no_wrap=True))
        return Group(table, *feed)
