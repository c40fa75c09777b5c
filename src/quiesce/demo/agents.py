"""The demo's workload: the agents, their scripted events, and the pruner's model.

What it keeps true: every agent is a coroutine that reaches its buffer only
through a :class:`~.worlds.World`; all randomness comes from generators
seeded by ``seed`` and the agent's name, and every wait is a
:meth:`~.conductor.Conductor.until`, so the same seed gives the same events
and decisions on asyncio and trio. The model makes the seeds' three mistakes
(a summary that drops a negative result, a paraphrased constraint, a
dropped one) only at the :class:`Script`'s turns. The assistant's answers
stream in a chunk per turn, so readers hold views while text arrives.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from quiesce import (
    EditPlan,
    Entry,
    HeuristicPruner,
    Kind,
    Prune,
    Rewrite,
    Summarize,
    Tombstone,
)

from .checker import Checker
from .conductor import Conductor
from .stories import CONSTRAINT_ID, CONSTRAINT_TEXT
from .worlds import View, World

__all__ = ["Agents", "DemoModel", "Script"]


# ---------------------------------------------------------------------------
# The model-driven pruner (HeuristicPruner + the seeds' three mistakes)


class DemoModel:
    """The pruner's model: reads the view, thinks for ``latency`` turns while
    holding it, then proposes — the :class:`HeuristicPruner`'s plan, or at
    scripted turns one of the seeds' mistakes."""

    def __init__(self, agents: Agents, heuristic: HeuristicPruner, latency: int) -> None:
        self.agents = agents
        self.heuristic = heuristic
        self.latency = latency
        self.slip: str | None = None
        self.calls = 0

    async def think(self, view: View) -> EditPlan | None:
        a = self.agents
        self.calls += 1
        turn = a.conductor.turn
        seen = a.checker.begin_read("pruner", turn, view)
        entries = list(view.entries())
        marks = dict(view.marks)
        await a.conductor.until(turn + self.latency, a.ORDER["pruner"], "pruner")
        a.checker.end_read("pruner", a.conductor.turn, seen, view)
        if self.slip is not None:
            return self._slip(self.slip, entries, turn)
        return self.heuristic.propose(entries, marks)

    def _slip(self, slip: str, entries: Sequence[Entry], turn: int) -> EditPlan | None:
        ids = {e.id for e in entries}
        if slip == "summary":
            calls = [e.id for e in entries if e.key is not None and e.key.startswith("deploy ")]
            covered = [e.id for e in entries if e.id in calls or any(r in calls for r in e.refs)]
            if not covered:
                return None
            into = Entry(
                f"sum-{turn}",
                Kind.SUMMARY,
                "Deployment: two attempts made so far; root cause still under investigation.",
                turn=turn,
            )
            return EditPlan(
                [Summarize(tuple(covered), into=into)],
                reason="compress the deployment attempts",
                actor="pruner",
                turn=turn,
            )
        if CONSTRAINT_ID not in ids:
            return None
        if slip == "paraphrase":
            op: Rewrite | Prune = Rewrite(CONSTRAINT_ID, "avoid system config")
            reason = "shorten long instructions"
        else:
            op = Prune(CONSTRAINT_ID)
            reason = "low relevance: no match for 'Dockerfile'"
        return EditPlan([op], reason=reason, actor="pruner", turn=turn)


# ---------------------------------------------------------------------------
# The agents


# The vocabulary of generated tool output (no word the negative classifier flags).
# fmt: off
_WORDS = (
    "pod", "node", "replica", "service", "ingress", "route", "latency", "p99", "request",
    "queue", "cache", "shard", "lease", "config", "rollout", "image", "tag", "probe",
    "endpoint", "header", "token", "quota", "budget", "window", "metric", "trace", "span",
    "log", "line", "event", "container", "restart", "volume", "mount", "secret", "label",
    "selector", "port",
)
# fmt: on


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n))


@dataclass
class Script:
    """When the scripted events happen, scaled to the number of turns."""

    turns: int
    attempt1: int = 0
    attempt2: int = 0
    slip_summary: int = 0
    slip_paraphrase: int = 0
    slip_drop: int = 0
    replan: int = 0
    subagent: int = 0
    prune_every: int = 4
    verify_every: int = 8

    def __post_init__(self) -> None:
        t = self.turns
        # tool-b steps every 3-4 turns, so a 4-turn window holds one of its steps.
        self.attempt1 = round(0.2 * t)
        self.attempt2 = self.attempt1 + 4
        self.slip_summary = self._prune_turn(max(0.4 * t, self.attempt2 + 5))
        self.replan = self.slip_summary + 4
        self.slip_paraphrase = self._prune_turn(max(0.6 * t, self.slip_summary + 1))
        self.slip_drop = self._prune_turn(max(0.8 * t, self.slip_paraphrase + 1))
        self.subagent = round(0.45 * t)

    def _prune_turn(self, at: float) -> int:
        """The first pruning round at or after ``at``."""
        every = self.prune_every
        return max(2, -(-int(at + 0.999) // every)) * every

    def slips(self) -> list[tuple[int, str]]:
        return [
            (self.slip_summary, "summary"),
            (self.slip_paraphrase, "paraphrase"),
            (self.slip_drop, "drop"),
        ]


@dataclass
class Consequences:
    """What the agents did because of what they could (not) see."""

    prohibited_retries: int = 0  #: the replanner re-ran what had timed out
    verifier_halts: int = 0  #: the verifier found its citation pruned and stopped


class Agents:
    """The workload: every agent is a coroutine over one :class:`World`."""

    ORDER: ClassVar[dict[str, int]] = {
        "planner": 0,
        "tool-a": 1,
        "tool-b": 2,
        "verifier": 3,
        "replanner": 4,
        "subagent": 5,
        "pruner": 6,
        "assistant": 7,
    }

    #: turns one streamed answer takes (one chunk per turn), and its chunk size
    STREAM_TURNS: ClassVar[int] = 5
    STREAM_WORDS: ClassVar[int] = 4

    def __init__(
        self, world: World, conductor: Conductor, checker: Checker, seed: int, turns: int
    ) -> None:
        self.world = world
        self.conductor = conductor
        self.checker = checker
        self.seed = seed
        self.turns = turns
        self.script = Script(turns)
        self.after = Consequences()
        self.model = DemoModel(
            self,
            HeuristicPruner(budget=600, min_age=8, stale_age=2, actor="pruner"),
            latency=2,
        )
        self.facts: list[str] = []
        self.answers = 0  #: answers the assistant streamed

    def rng(self, name: str) -> random.Random:
        return random.Random(f"{self.seed}:{name}")

    def event(self, who: str, text: str) -> None:
        self.world.events.append(f"t{self.conductor.turn:>3} {who}: {text}")

    async def wait(self, who: str, turn: int) -> int:
        return await self.conductor.until(turn, self.ORDER[who], who)

    def roster(self) -> list[tuple[str, int, Callable[[], Awaitable[None]]]]:
        s = self.script
        return [
            ("planner", 1, self.planner),
            ("tool-a", 2, self.tool_a),
            ("tool-b", 3, self.tool_b),
            ("verifier", s.verify_every + s.prune_every, self.verifier),
            ("replanner", s.replan, self.replanner),
            ("subagent", s.subagent, self.subagent),
            ("pruner", s.prune_every * 2, self.pruner),
            ("assistant", 2, self.assistant),
        ]

    # -- planner: plan steps, facts, and stale marks (the sync fast path) ----

    async def planner(self) -> None:
        rng = self.rng("planner")
        turn = self.conductor.turn
        self.world.append(
            Entry("sys", Kind.INSTRUCTION, "You are an SRE agent on prod-eu.", turn=0)
        )
        self.world.append(Entry(CONSTRAINT_ID, Kind.CONSTRAINT, CONSTRAINT_TEXT, turn=0))
        steps: list[tuple[str, int]] = []
        while turn <= self.turns:
            sid = f"plan-{turn}"
            self.world.append(Entry(sid, Kind.REASONING, f"plan: {_text(rng, 22)}", turn=turn))
            steps.append((sid, turn))
            if turn <= 6 or turn % 5 == 2:  # a burst of endpoint checks, then one per 5 turns
                fid = f"fact-{turn}"
                ep = f"/api/v1/{rng.choice(_WORDS)}-{turn}"
                self.world.append(
                    Entry(
                        fid, Kind.REASONING, f"endpoint {ep} is read-only (ACL checked)", turn=turn
                    )
                )
                self.facts.append(fid)
            if turn % 10 == 0:
                for old, t in steps:
                    if t <= turn - 5:
                        self.world.mark(old, f"superseded by the plan at turn {turn}", turn)
                steps = [(i, t) for i, t in steps if t > turn - 5]
            turn = await self.wait("planner", turn + 1)

    # -- tool callers: read, decide, call (holding the view), append the pair ----

    async def _tool(self, who: str, wants: Callable[[int], str | None], every: int) -> None:
        n = 0
        skipped: set[str] = set()
        turn = self.conductor.turn
        while turn <= self.turns:
            key = wants(turn)
            if key is not None:
                with self.world.view() as view:
                    seen = self.checker.begin_read(who, turn, view)
                    have = view.record(key)
                    if have is None:
                        turn = await self.wait(who, turn + 1)  # the tool call
                        self.checker.end_read(who, turn, seen, view)
                        n += 1
                        self._call(who, key, n, turn)
                    elif isinstance(have, Tombstone) and key not in skipped:
                        skipped.add(key)
                        self.event(who, f"won't re-run {key!r}: {have.note()}")
            turn = await self.wait(who, turn + every)

    def _call(self, who: str, key: str, n: int, turn: int) -> None:
        cid = f"{who}-call-{n}"
        out = _tool_output(self.seed, key)
        refused = self.world.append(Entry(cid, Kind.TOOL_CALL, key, key=key, turn=turn))
        if refused is not None:
            self.event(who, f"{key!r} refused: {refused}")
            return
        self.world.append(Entry(f"{cid}/out", Kind.TOOL_OUTPUT, out, refs=(cid,), turn=turn))

    async def tool_a(self) -> None:
        rng = self.rng("tool-a")
        pods = ["web-0", "web-1", "db-0"]

        def wants(turn: int) -> str | None:
            if turn % 2 == 0:
                return "kubectl describe pod web-0"  # the seed-002 dump, wanted again and again
            return f"kubectl logs {rng.choice(pods)} --since={turn}m"

        await self._tool("tool-a", wants, 2)

    async def tool_b(self) -> None:
        rng = self.rng("tool-b")
        s = self.script

        def wants(turn: int) -> str | None:
            if s.attempt1 <= turn < s.attempt2:
                return "deploy attempt 1 --image=web:2.4 --timeout=30s"
            if s.attempt2 <= turn < s.attempt2 + 4:
                return "deploy attempt 2 --image=web:2.4 --timeout=30s"
            return f"curl -s https://prod-eu/{rng.choice(_WORDS)}/status?t={turn}"

        await self._tool("tool-b", wants, 3)

    # -- verifier: cite the oldest read-only fact (across a model call) -------

    async def verifier(self) -> None:
        turn = self.conductor.turn
        n = 0
        while turn <= self.turns:
            with self.world.view() as view:
                seen = self.checker.begin_read("verifier", turn, view)
                # Verify the oldest fact no verdict cites yet (it falls behind,
                # so its fact drifts towards the pruning frontier).
                entries = view.entries()
                cited = {r for e in entries if e.kind is Kind.RATIONALE for r in e.refs}
                fact = next(
                    (
                        e
                        for e in entries
                        if e.id.startswith("fact-") and e.id not in cited and e.id not in view.marks
                    ),
                    None,
                )
                turn = await self.wait("verifier", turn + 3)  # the model call
                changed = len(self.checker.text_changed)
                self.checker.end_read("verifier", turn, seen, view)
                if len(self.checker.text_changed) > changed:
                    self.event("verifier", self.checker.text_changed[-1].split(": ", 1)[1])
                if fact is not None:
                    n += 1
                    body = f"the write is safe: {fact.body} (cites {fact.id})"
                    vanished = view.get(fact.id) is None
                    refused = self.world.append(
                        Entry(f"verdict-{n}", Kind.RATIONALE, body, refs=(fact.id,), turn=turn)
                    )
                    if refused is not None:
                        self.after.verifier_halts += 1
                        self.event("verifier", f"citation unresolved, halts: {refused}")
                    elif vanished:
                        self.event(
                            "verifier",
                            f"{fact.id} was deleted mid-read; cites it anyway (unknown, proceed)",
                        )
            turn = await self.wait("verifier", turn + self.script.verify_every - 3)

    # -- replanner: must not retry what timed out ------------------------------

    async def replanner(self) -> None:
        turn = self.conductor.turn
        retry_key = "deploy attempt 2 --image=web:2.4 --timeout=30s"
        first = True
        while turn <= self.turns:
            with self.world.view() as view:
                seen = self.checker.begin_read("replanner", turn, view)
                guarded = any("do not retry" in e.body for e in view.entries())
                turn = await self.wait("replanner", turn + 2)
                self.checker.end_read("replanner", turn, seen, view)
            if first and not guarded:
                self.after.prohibited_retries += 1
                self.event("replanner", "no record of the timeout: retries attempt 2 as-is")
                self._call("replanner", retry_key, 1, turn)
            else:
                why = "attempt 2 timed out; use --timeout=120s" if guarded else "continue"
                self.world.append(
                    Entry(f"replan-{turn}", Kind.REASONING, f"replan: {why}", turn=turn)
                )
            first = False
            turn = await self.wait("replanner", turn + 8)

    # -- a slow sub-agent: one long read (the reader-age alarm's case) --------

    async def subagent(self) -> None:
        turn = self.conductor.turn
        with self.world.view() as view:
            seen = self.checker.begin_read("subagent", turn, view)
            n = len(view.entries())
            turn = await self.wait("subagent", turn + 12)
            self.checker.end_read("subagent", turn, seen, view)
        self.world.append(
            Entry(
                f"summary-{turn}",
                Kind.SUMMARY,
                f"incident summary: {n} entries reviewed; pod web-0 healthy, dump is noise",
                turn=turn,
            )
        )

    # -- the assistant: its answers stream in, a chunk per turn --------------

    async def assistant(self) -> None:
        """Streams one answer after another into the world, a few words a
        turn (the model's output as it arrives); each is whole before the
        run ends."""
        rng = self.rng("assistant")
        turn = self.conductor.turn
        while turn + self.STREAM_TURNS <= self.turns:
            self.answers += 1
            aid = f"answer-{self.answers}"
            self.world.open_text(aid, turn)
            for k in range(self.STREAM_TURNS):
                self.world.write_text(aid, ("" if k == 0 else " ") + _text(rng, self.STREAM_WORDS))
                turn = await self.wait("assistant", turn + 1)
            self.world.close_text(aid)
            turn = await self.wait("assistant", turn + 1)

    # -- the model-driven pruner ----------------------------------------------

    async def pruner(self) -> None:
        turn = self.conductor.turn
        slips = self.script.slips()
        while turn <= self.turns:
            slip = None
            if slips and slips[0][0] <= turn:
                slip = slips.pop(0)[1]
            self.model.slip = slip
            outcome = await self.world.prune_round(self.model)
            if slip is not None or "refused" in outcome:
                label = f"[model mistake: {slip}] " if slip else ""
                self.event("pruner", f"{label}{outcome}")
            turn = self.conductor.turn
            nxt = (turn // self.script.prune_every + 1) * self.script.prune_every
            turn = await self.wait("pruner", nxt)


def _tool_output(seed: int, key: str) -> str:
    """The same call always returns the same output (so a re-run re-admits it)."""
    rng = random.Random(f"{seed}:{key}")
    if key.startswith("deploy attempt 1"):
        return "attempt 1 failed: image pull back-off on web:2.4"
    if key.startswith("deploy attempt 2"):
        return "attempt 2 timed out, do not retry with the same parameters"
    if key.startswith("kubectl describe"):
        return "Name: web-0 Status: Running " + _text(rng, 150)
    return _text(rng, rng.randint(20, 60))
