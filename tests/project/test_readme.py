"""README's example runs as printed, and its Quick start holds exactly two commands."""

from __future__ import annotations

import contextlib
import io
import re
import textwrap
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


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
        'python -m pip install -e ".[demo]" && quiesce demo',
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


#: What each framework fragment of the README's framework section assumes is
#: defined: the framework's own offline test model, and a pool or a pruner.
_PRELUDES = {
    "quiesce.integrations.langchain": """
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver
from quiesce import HeuristicPruner, SQLiteLog, open_buffer
model = GenericFakeChatModel(messages=iter([AIMessage("disk is fine")]))
tools, saver = [], InMemorySaver()
config = {"configurable": {"thread_id": "thread-1"}}
pruner = HeuristicPruner(budget=1000)
""",
    "quiesce.integrations.openai_agents": """
from types import SimpleNamespace
from agents import Agent, RunConfig, Runner
from agents.testing import ScriptedModel, assistant_message
from quiesce import HeuristicPruner
agent = Agent(name="sre", model=ScriptedModel([[assistant_message("disk is fine")]]))
user = SimpleNamespace(user_id="user-42")
pruner = HeuristicPruner(budget=1000)
""",
    "quiesce.integrations.pydantic_ai": """
from pydantic_ai import Agent
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.models.test import TestModel
from quiesce import HeuristicPruner
model, history = TestModel(), []
pruner = HeuristicPruner(budget=1000)
""",
    "quiesce.integrations.autogen": """
from autogen_agentchat.agents import AssistantAgent
from autogen_core.models import CreateResult, ModelFamily, ModelInfo, RequestUsage
from autogen_ext.models.replay import ReplayChatCompletionClient
from quiesce import HeuristicPruner
usage = RequestUsage(prompt_tokens=0, completion_tokens=0)
info = ModelInfo(vision=False, function_calling=True, json_output=False,
                 family=ModelFamily.UNKNOWN, structured_output=False)
client = ReplayChatCompletionClient(
    [CreateResult(finish_reason="stop", content="disk is fine", usage=usage, cached=False)],
    model_info=info,
)
tools, pruner = [], HeuristicPruner(budget=1000)
""",
}


def test_framework_section_fragments_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each framework's fragment in the README's framework section runs as
    printed, given only what it names (the framework's own test model, a
    ``BufferPool`` as ``pool``), on asyncio (the frameworks' loops)."""
    monkeypatch.chdir(tmp_path)  # the LangChain fragment writes thread-1.sqlite
    fragments = _blocks("py", "Use it with your framework")
    assert len(fragments) == len(_PRELUDES)
    for fragment in fragments:
        (module,) = [m for m in _PRELUDES if f"from {m} import" in fragment]
        body = "async with BufferPool() as pool:\n" + textwrap.indent(fragment, "    ")
        code = (
            "import asyncio\nfrom quiesce import BufferPool\n"
            + _PRELUDES[module]
            + "\nasync def main():\n"
            + textwrap.indent(body, "    ")
            + "\nasyncio.run(main())\n"
        )
        exec(compile(code, f"README.md ({module})", "exec"), {"__name__": "readme_fragment"})


def test_layout_names_every_module() -> None:
    """The README's Layout block names every module and folder of
    ``src/quiesce`` and nothing that is not there."""
    root = README.parent / "src" / "quiesce"
    section = README.read_text().split("## Layout", 1)[1]
    block = section.split("```", 2)[1]
    named: set[str] = set()
    stack: list[str] = []
    for line in block.splitlines()[2:]:
        m = re.match(r"^([│ ]*)[├└]── (\S+)", line)
        if not m:
            continue
        depth = len(m.group(1)) // 4
        name = m.group(2)
        del stack[depth:]
        if name.endswith("/"):
            stack.append(name.rstrip("/"))
            named.add("/".join(stack))
        else:
            named.add("/".join([*stack, name]))
    on_disk = {
        str(p.relative_to(root))
        for p in root.rglob("*")
        if ((p.suffix in (".py", ".html") and p.name != "__init__.py") or p.is_dir())
        and "__pycache__" not in p.parts
    }
    on_disk |= {"__init__.py"}
    assert named == on_disk
