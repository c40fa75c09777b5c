"""Every example runs standalone, in a few seconds, and exits 0."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.py"))


def test_the_examples_are_there() -> None:
    names = {p.name for p in EXAMPLES}
    assert {
        "asyncio_agent.py",
        "trio_agent.py",
        "supervisor.py",
        "durability.py",
        "adapter_roundtrip.py",
        "thinking_loop.py",
    } <= names


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_exits_zero(path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
