"""``quiesce demo``: the seeds' failures replayed, then a live multi-agent loop.

What it keeps true: it drives quiesce only through the public API
(``quiesce``), so it shows what a user's agent would get. The application
is :mod:`.app` (its docstring says what the demo shows and how it stays
deterministic).
"""

from __future__ import annotations

from .app import main as main

__all__ = ["main"]
