"""README's example runs as printed, and its Quick start holds exactly two commands."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def _blocks(lang: str, section: str | None = None) -> list[str]:
    """The ``lang`` code blocks of the README, or of its ``## section`` only."""
    text = README.read_text()
    if section is not None:
        text = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def test_example_runs_and_prints_the_tombstone_note() -> None:
    """The 20-line example runs on asyncio and prints the tombstone note it promises."""
    (code,) = _blocks("python", "A 20-line example")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {"__name__": "readme_example"})
    assert "[t1 pruned at turn 7: stale]" in out.getvalue()
    assert "IMMUTABLE" in out.getvalue()


def test_example_runs_on_trio() -> None:
    """The same example runs unchanged on trio."""
    (code,) = _blocks("python", "A 20-line example")
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
        'python -m pip install -e ".[dev]" && quiesce demo',
        'python -m pip install -e ".[dev]" && python -m pytest',
    ]


def test_framework_section_pool_example_runs() -> None:
    """The framework section's multi-conversation example runs as printed
    (asyncio: LangGraph) and prints what it says: Bob's buffer holds only
    Bob's messages."""
    (code,) = _blocks("python", "Use it with your framework")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {"__name__": "readme_pool"})
    assert out.getvalue() == "('alice', 'bob') ['I am bob']\n"
    assert "prints `('alice', 'bob') ['I am bob']`" in README.read_text()
