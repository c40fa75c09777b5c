"""README's example runs as printed, and its Quick start holds exactly two commands."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), flags=re.S)


def test_example_runs_and_prints_the_tombstone_note() -> None:
    """The 20-line example runs on asyncio and prints the tombstone note it promises."""
    (code,) = [b for b in _blocks("python") if "open_buffer" in b]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {"__name__": "readme_example"})
    assert "[t1 pruned at turn 7: stale]" in out.getvalue()
    assert "IMMUTABLE" in out.getvalue()


def test_example_runs_on_trio() -> None:
    """The same example runs unchanged on trio."""
    (code,) = [b for b in _blocks("python") if "open_buffer" in b]
    code = code.replace("anyio.run(main)", 'anyio.run(main, backend="trio")')
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {"__name__": "readme_example"})
    assert "[t1 pruned at turn 7: stale]" in out.getvalue()


def test_quick_start_has_exactly_the_two_commands() -> None:
    """Quick start: one block, two commands: the demo and the tests."""
    text = README.read_text()
    section = text.split("## Quick start", 1)[1]
    block = section.split("```", 2)[1]
    commands = [line for line in block.splitlines() if line.strip()]
    assert commands == [
        'python -m pip install -e ".[demo]" && quiesce demo',
        'python -m pip install -e ".[dev]" && python -m pytest',
    ]
