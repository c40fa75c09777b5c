"""``quiesce demo``: the seeds' failures, replayed, then a live multi-agent loop.

What it shows
=============

Part 1 replays the seeds' five failure stories (dangling justification,
summary drift, torn read, prune/re-admit oscillation, paraphrased constraint)
as a short scripted scenario on the sync core, and prints what quiesce did
with each: refused, deferred, or made safe.

Part 2 runs one streaming multi-agent workload twice, side by side:

* on quiesce's embedded default — a :class:`~quiesce.RuntimeBuffer` from
  :func:`~quiesce.open_buffer` with a :class:`~quiesce.SQLiteLog` in a
  temporary folder (or ``--log PATH``), and
* on a *naive buffer*: a plain list that the pruner deletes from directly,
  with every reader holding a reference to the live list.

The agents are coroutines: a planner, two tool callers, a verifier, a
replanner, a slow summarizing sub-agent and a model-driven pruner (the
:class:`~quiesce.HeuristicPruner`, driven through :func:`~quiesce.run_pruner`
on quiesce). Readers hold their view — a pinned snapshot on quiesce, the live
list on the naive side — across simulated model calls. The pruner's model
also makes the three mistakes the seeds describe, at scripted turns: it
summarizes away a negative result, paraphrases a user constraint, and later
drops the paraphrase. A supervisor consumes ``buf.escalations()``.
An assistant's answers stream in a few words a turn: an open entry on
quiesce (``buf.open_stream``; each write a version, a pinned reader keeps its
prefix), the last message's text extended in place on the naive list, where
a reader that holds the list sees the text change under it.

Determinism. Agents run in lockstep turns under a small conductor: in each
turn, every agent due that turn runs one step, in a fixed order, until it
awaits again (a model call is "wait k turns", during which the conductor
``anyio.sleep``\\ s one tick per turn). The same seed gives the same scripted
events, the same agent decisions and the same counts on asyncio and on trio.
After every step the conductor lets quiesce's barrier apply what is due
(``await buf.quiesce()``: the turn boundary is the barrier, as in seed 000).

One :class:`~.checker.Checker` observes both buffers the same way — the
views readers hold, and the head after every step — and counts torn reads,
dangling justifications, lost prohibitions, prune/re-admit cycles,
paraphrased constraints and text changed mid-read. quiesce must show zero of
each; the exit status is 1 if it does not.

The parts, by job: :mod:`.stories` (part 1), :mod:`.conductor` (the
lockstep turns), :mod:`.worlds` (the two buffers), :mod:`.checker`,
:mod:`.agents` (the workload and the pruner's model), :mod:`.display`; this
module runs them and writes the report.

What it keeps true: it drives quiesce only through the public API; the exit
status is 0 only when the checker counted no failure on quiesce and every
seed story came out safe.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import anyio

from quiesce import Buffer, Escalation, LogSink, QuiesceError, RuntimeBuffer, open_buffer

from .agents import Agents
from .checker import FAILURES, Checker
from .conductor import Conductor
from .display import Display
from .stories import replay_seeds
from .worlds import NaiveWorld, QuiesceWorld, World

__all__ = ["FAILURES", "MIN_TURNS", "main"]

#: Fewer turns do not reach the pruning pressure every scripted event needs.
MIN_TURNS = 40


# ---------------------------------------------------------------------------
# Running it


@dataclass
class Outcome:
    """Everything the report needs."""

    seeds: list[dict[str, Any]]
    counts: dict[str, dict[str, int]]
    details: dict[str, dict[str, Any]]
    quiesce: dict[str, Any]
    naive: dict[str, Any]
    log: dict[str, Any]
    elapsed: float = 0.0


def _sqlite_sink(path: str) -> LogSink | None:
    try:
        from quiesce import SQLiteLog
    except ImportError:  # pragma: no cover - the durable sink is optional here
        return None
    return SQLiteLog(path)


async def _run_world(
    world: World, checker: Checker, cfg: argparse.Namespace, display: Display
) -> Agents:
    conductor = Conductor(cfg.tick)
    agents = Agents(world, conductor, checker, cfg.seed, cfg.turns)

    async def after_step(name: str) -> None:
        await world.settle()
        checker.after_step(world.head(), conductor.turn)

    def after_turn(turn: int) -> None:
        display.update(world, turn)

    async with anyio.create_task_group() as tg:
        for name, first, body in agents.roster():
            order = agents.ORDER[name]
            await tg.start(conductor.spawn, name, order, first, body, name=f"{world.name}:{name}")
        await conductor.run(cfg.turns, after_step, after_turn)
        tg.cancel_scope.cancel()
    await world.settle()
    checker.after_step(world.head(), conductor.turn)
    return agents


async def _supervisor(buf: RuntimeBuffer, seen: Counter[str], world: QuiesceWorld) -> None:
    async for esc in buf.escalations():
        seen[esc.kind.name] += 1
        world.events.append(f"supervisor: {esc.kind.name}: {_short(esc)}")


def _escalations_in_log(buf: Buffer) -> dict[str, int]:
    """Escalations by kind, as the append-only log records them."""
    kinds: Counter[str] = Counter()
    for r in buf.log:
        if r.op == "escalate":
            kinds[r.outcome.upper()] += 1
        elif r.op == "edit" and r.outcome == "refused":
            kinds["REFUSED_EDIT"] += 1
    return dict(sorted(kinds.items()))


def _short(esc: Escalation) -> str:
    text = esc.detail.split(";")[0]
    return text if len(text) <= 90 else text[:87] + "..."


async def _demo(cfg: argparse.Namespace, out: TextIO, log_path: str) -> Outcome:
    seeds = replay_seeds()
    _print_seeds(out, seeds)
    out.write("\n2. The same workload on two buffers (live)\n")
    out.flush()
    sink = _sqlite_sink(log_path)
    started = time.monotonic()
    q_checker, n_checker = Checker(), Checker()
    escalations: Counter[str] = Counter()
    naive = NaiveWorld()
    # The alarm sits above every ordinary read (at most 6 turns, the pruner
    # with its re-plans) and below the slow sub-agent's 12-turn read.
    max_pin_age = 8 * cfg.tick if cfg.tick > 0 else None
    live = not cfg.plain and out.isatty()
    with Display(out, live=live, turns=cfg.turns) as display:
        async with open_buffer(log=sink, max_pin_age=max_pin_age) as buf:
            qworld = QuiesceWorld(buf)
            display.add(qworld)
            display.add(naive)
            results: dict[str, Agents] = {}
            async with anyio.create_task_group() as tg:
                tg.start_soon(_supervisor, buf, escalations, qworld)

                async def both() -> None:
                    async with anyio.create_task_group() as worlds:

                        async def go(world: World, checker: Checker) -> None:
                            results[world.name] = await _run_world(world, checker, cfg, display)

                        worlds.start_soon(go, qworld, q_checker)
                        worlds.start_soon(go, naive, n_checker)
                    tg.cancel_scope.cancel()

                tg.start_soon(both)
            await buf.quiesce()
            buf.check_invariants(expect_no_pins=True)
            stats = buf.stats()
            logged = _escalations_in_log(buf)
            head = [(e.id, e.content_hash) for e in buf.head().entries()]
            tombs = dict(buf.tombstones)
    elapsed = time.monotonic() - started
    log_info: dict[str, Any] = {"kind": "in-memory", "path": None}
    if sink is not None:
        sink.close()
        reopened_sink = _sqlite_sink(log_path)
        assert reopened_sink is not None
        again = Buffer(log=reopened_sink)
        same = [(e.id, e.content_hash) for e in again.head().entries()] == head and set(
            again.tombstones
        ) == set(tombs)
        log_info = {
            "kind": "sqlite",
            "path": log_path,
            "records": len(again.log),
            "recovered_entries": len(again),
            "recovered_tombstones": len(again.tombstones),
            "recovery_matches": same,
        }
        reopened_sink.close()
    qa, na = results["quiesce"], results["naive list"]
    counts = {"quiesce": q_checker.counts(), "naive": n_checker.counts()}
    details = {
        "quiesce": _details(q_checker, qa),
        "naive": _details(n_checker, na),
    }
    quiesce_info = {
        "version": stats.version,
        "entries": stats.entries,
        "tombstones": stats.tombstones,
        "tombstone_to_edit_ratio": stats.tombstone_to_edit_ratio,
        "marks": stats.marks,
        "refusals": {
            r.name: n for r, n in sorted(stats.refusals.items(), key=lambda kv: kv[0].name)
        },
        "escalations": stats.escalations,
        "escalations_by_kind": logged,
        "escalations_received": sum(escalations.values()),
        "readmissions_refused": stats.readmissions_refused,
        "refused_appends": dict(qworld.refused_appends),
        "conflict_replans": qworld.conflict_replans,
        "peak_pins": qworld.peak_pins,
        "peak_deferred": qworld.peak_deferred,
        "log_records": stats.log_records,
        "streamed_answers": qa.answers,
        "stream_writes": qworld.stream_writes,
    }
    naive_info = {
        "mutations": naive.mutations,
        "entries": len(naive.items),
        "removals": naive.removals,
        "tombstones": 0,
        "tombstone_to_edit_ratio": 0.0,
    }
    return Outcome(seeds, counts, details, quiesce_info, naive_info, log_info, elapsed)


def _details(checker: Checker, agents: Agents) -> dict[str, Any]:
    return {
        "torn_reads": checker.torn[:20],
        "dangling": [f"{a} -> {b} (turn {t})" for (a, b), t in checker.dangling.items()],
        "lost_prohibitions": [f"{i} (turn {t})" for i, t in checker.lost.items()],
        "readmitted": [f"{i} (turn {t})" for i, t in checker.readmitted],
        "paraphrased": [f"{i} (turn {t})" for i, t in checker.paraphrased.items()],
        "readmitted_tokens": checker.readmitted_tokens,
        "prohibited_retries": agents.after.prohibited_retries,
        "verifier_halts": agents.after.verifier_halts,
        "text_changed": checker.text_changed[:20],
    }


# ---------------------------------------------------------------------------
# The report


def _print_seeds(out: TextIO, seeds: Sequence[dict[str, Any]]) -> None:
    out.write("1. The seeds' five failure stories, replayed on the core\n")
    for s in seeds:
        mark = "safe" if s["safe"] else "UNSAFE"
        out.write(f"  [{mark}] {s['story']}: {s['attempt']}\n")
        out.write(f"         -> {s['answer']}\n")


def _report(out: TextIO, o: Outcome, cfg: argparse.Namespace) -> None:
    w = out.write
    w("\nReport: the same workload, the same checker\n")
    w(f"  {'':<26}{'quiesce':>9}{'naive list':>12}\n")
    for name in FAILURES:
        w(f"  {name:<26}{o.counts['quiesce'][name]:>9}{o.counts['naive'][name]:>12}\n")
    q, n, nd = o.quiesce, o.naive, o.details["naive"]
    refusals = ", ".join(f"{k} {v}" for k, v in q["refusals"].items()) or "none"
    by_kind = ", ".join(f"{k} {v}" for k, v in q["escalations_by_kind"].items()) or "none"
    w("\n  quiesce:\n")
    w(
        f"    {q['version']} versions, {q['entries']} entries, {q['tombstones']} tombstones "
        f"(tombstone-to-edit ratio {q['tombstone_to_edit_ratio']:.2f}), peak {q['peak_pins']} "
        f"pinned readers, peak {q['peak_deferred']} removals deferred to a grace point\n"
    )
    w(f"    refusals: {refusals}\n")
    w(
        f"    escalations: {q['escalations']} ({by_kind}), "
        f"{q['escalations_received']} received by the supervisor; "
        f"{q['conflict_replans']} re-plan(s) after a CONFLICT\n"
    )
    w(
        f"    streaming: {q['streamed_answers']} answers streamed in {q['stream_writes']} writes; "
        "every reader's pin kept the prefix it pinned\n"
    )
    if o.log["kind"] == "sqlite":
        ok = "matches" if o.log["recovery_matches"] else "DOES NOT MATCH"
        w(
            f"    log: {o.log['records']} records in SQLite; reopened: "
            f"{o.log['recovered_entries']} entries, {o.log['recovered_tombstones']} tombstones, "
            f"{ok} the live head\n"
        )
        keep = "" if cfg.log else " (temporary; --log PATH keeps it)"
        w(f"         {o.log['path']}{keep}\n")

    else:
        w("    log: in-memory (SQLiteLog is not available)\n")
    w("  naive list:\n")
    w(
        f"    {n['removals']} removals, 0 tombstones (tombstone-to-edit ratio 0.00: seed 002's "
        f"silent signature)\n"
    )
    w(
        f"    consequences: the replanner retried the timed-out attempt "
        f"{nd['prohibited_retries']}x; {len(nd['readmitted'])} pruned tool call(s) re-run "
        f"({nd['readmitted_tokens']} tokens)\n"
    )
    changed = o.counts["naive"]["text changed mid-read"]
    if changed:
        seen = nd["text_changed"]
        example = next((t for t in seen if " verifier: " in t), seen[0])
        w(
            f"    streaming: the answer's text was extended in place under {changed} read(s), "
            f"e.g. {example}\n"
        )
    q_total = sum(o.counts["quiesce"].values())
    n_total = sum(o.counts["naive"].values())
    verdict = "OK" if q_total == 0 and all(s["safe"] for s in o.seeds) else "FAILED"
    w(
        f"\n{verdict}: quiesce {q_total} failures, naive list {n_total} "
        f"(seed {cfg.seed}, {cfg.turns} turns, {cfg.backend}, {o.elapsed:.1f} s)\n"
    )


def _json(o: Outcome, cfg: argparse.Namespace) -> dict[str, Any]:
    return {
        "seed": cfg.seed,
        "turns": cfg.turns,
        "backend": cfg.backend,
        "elapsed": round(o.elapsed, 3),
        "seeds": o.seeds,
        "counts": o.counts,
        "details": o.details,
        "quiesce": o.quiesce,
        "naive": o.naive,
        "log": o.log,
        "ok": sum(o.counts["quiesce"].values()) == 0 and all(s["safe"] for s in o.seeds),
    }


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="quiesce demo",
        description="A streaming multi-agent loop on quiesce and on a naive list, side by side.",
    )
    p.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    p.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    p.add_argument(
        "--turns", type=int, default=60, help=f"turns to run (>= {MIN_TURNS}; default 60)"
    )
    p.add_argument(
        "--tick", type=float, default=0.1, help="seconds per turn (default 0.1; 0 = flat out)"
    )
    p.add_argument("--log", metavar="PATH", help="SQLite log file (default: a temporary folder)")
    p.add_argument("--json", metavar="PATH", help="write the report as JSON")
    p.add_argument("--plain", action="store_true", help="plain lines even on a terminal")
    return p


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    """``quiesce demo [--seed N] [--backend asyncio|trio] [--turns N] [--tick S]
    [--log PATH] [--json PATH] [--plain]``. Exit status 0 when quiesce shows
    no failure, 1 otherwise."""
    cfg = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    if cfg.turns < MIN_TURNS:
        _parser().error(f"--turns must be at least {MIN_TURNS}")
    if not math.isfinite(cfg.tick) or cfg.tick < 0:
        sys.stderr.write(f"quiesce demo: error: --tick must be finite and >= 0, not {cfg.tick}\n")
        return 2
    if cfg.log and os.path.exists(cfg.log) and os.path.getsize(cfg.log) > 0:
        sys.stderr.write(
            f"quiesce demo: error: --log {cfg.log} exists already: the demo writes a new log "
            f"(inspect that one with: quiesce inspect {cfg.log})\n"
        )
        return 2
    stream = sys.stdout if out is None else out
    stream.write(f"quiesce demo: seed {cfg.seed}, {cfg.turns} turns, {cfg.backend}\n\n")
    with contextlib.ExitStack() as stack:
        if cfg.log:
            log_path = os.path.abspath(cfg.log)
        else:
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="quiesce-demo-"))
            log_path = os.path.join(folder, "demo.sqlite")
        try:
            outcome = anyio.run(_demo, cfg, stream, log_path, backend=cfg.backend)
        except (QuiesceError, OSError) as exc:
            stream.write(f"quiesce demo: {type(exc).__name__}: {exc}\n")
            return 1
        _report(stream, outcome, cfg)
        if cfg.log:
            stream.write(f"  inspect it: quiesce inspect {log_path}\n")
            stream.write(f"  view its history: quiesce view {log_path} -o report.html\n")
        if cfg.json:
            with open(cfg.json, "w", encoding="utf-8") as f:
                json.dump(_json(outcome, cfg), f, indent=2)
                f.write("\n")
            stream.write(f"  report written to {cfg.json}\n")
        stream.flush()
    return 0 if _json(outcome, cfg)["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
