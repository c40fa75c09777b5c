"""Part 1 of ``quiesce demo``: the seeds' five failure stories on the sync core.

What it keeps true: each story runs on a fresh :class:`~quiesce.Buffer`
through the public API only and reports ``safe`` only when quiesce refused,
deferred or made safe exactly what the seed describes; nothing here waits,
so the replay is the same on every backend.
"""

from __future__ import annotations

from typing import Any

from quiesce import (
    Buffer,
    EditPlan,
    Entry,
    Kind,
    Move,
    Override,
    ProtectedEntry,
    ReadmissionRefused,
    Refusal,
    Rewrite,
    Status,
    Summarize,
)

__all__ = ["CONSTRAINT_ID", "CONSTRAINT_TEXT", "replay_seeds"]

CONSTRAINT_ID = "c-etc"
CONSTRAINT_TEXT = "do not modify files under /etc"


def _story_dangling() -> dict[str, Any]:
    b = Buffer()
    b.append(Entry("t-readonly", Kind.REASONING, "endpoint X is read-only (ACL checked)", turn=3))
    b.append(
        Entry(
            "v-write",
            Kind.RATIONALE,
            "the write to X is safe because X is read-only",
            refs=("t-readonly",),
            turn=9,
        )
    )
    out = b.prune(["t-readonly"], reason="no longer load-bearing", actor="pruner", turn=10)
    o = out["t-readonly"]
    with b.snapshot() as s:
        cited = s[s["v-write"].refs[0]]
        stale = s.is_stale("t-readonly")
    safe = o.status is Status.MARKED and o.refusal is Refusal.REFERENCED and stale
    return {
        "story": "dangling justification",
        "attempt": "prune t-readonly while v-write cites it",
        "answer": f"{o.status.name}/{o.refusal.name if o.refusal else '-'}: kept and marked "
        f"stale; v-write's citation still resolves ({cited.id!r})",
        "safe": safe,
    }


def _story_summary_drift() -> dict[str, Any]:
    b = Buffer()
    ids = []
    for i in range(40):
        body = f"step {i}: probe deployment parameters, variant {i}"
        if i == 17:
            body = "attempt 2 timed out, do not retry with the same parameters"
        b.append(Entry(f"s{i}", Kind.REASONING, body, turn=i))
        ids.append(f"s{i}")
    summary = Entry("sum", Kind.SUMMARY, "Probed deployment parameters; 40 steps; no conclusion.")
    plan = EditPlan(
        [Summarize(tuple(ids), into=summary)], reason="compact the trace", actor="pruner"
    )
    before = b.version
    rep = b.edit(plan)
    with b.snapshot() as s:
        kept = s["s17"].body
    safe = not rep.applied and b.version == before and rep.escalation is not None
    refusals = "/".join(r.name for r in rep.refusals)
    return {
        "story": "summary drift",
        "attempt": "summarize 40 steps into 3 lines that drop 'attempt 2 timed out'",
        "answer": f"refused ({refusals}) and escalated; window unchanged, {kept!r} kept verbatim",
        "safe": safe,
    }


def _story_torn_read() -> dict[str, Any]:
    b = Buffer()
    b.append(Entry("T", Kind.REASONING, "service B depends on config v3", turn=1))
    b.append(
        Entry("T2", Kind.REASONING, "so B must restart after the rollout", refs=("T",), turn=2)
    )
    with b.snapshot() as verifier:
        out = b.prune(["T", "T2"], reason="superseded by the new plan", actor="pruner", turn=5)
        statuses = {out[i].status for i in ("T", "T2")}
        # The verifier keeps reading its version while the prune is pending.
        whole = verifier["T2"].refs == ("T",) and verifier["T"].id == "T"
        seen = verifier.version
    removed = "T" in b.tombstones and "T2" in b.tombstones and len(b) == 0
    safe = statuses == {Status.DEFERRED} and whole and removed
    return {
        "story": "torn read",
        "attempt": "prune T and T2 (which cites T) while the verifier reads",
        "answer": f"DEFERRED: the verifier's version {seen} stayed whole; both removed together "
        f"at version {b.tombstones['T'].version} after it left, with tombstones",
        "safe": safe,
    }


def _story_readmission() -> dict[str, Any]:
    b = Buffer()
    key = "kubectl describe pod web-0"
    dump = "Name: web-0 Status: Running Restarts: 0 (900 tokens of describe output)"
    b.append(Entry("call-41", Kind.TOOL_CALL, key, key=key, turn=40))
    b.append(Entry("out-41", Kind.TOOL_OUTPUT, dump, refs=("call-41",), turn=40))
    b.prune(["call-41", "out-41"], reason="dump is noise", actor="pruner", turn=41)
    note = ""
    refused = False
    try:
        b.append(Entry("call-43", Kind.TOOL_CALL, key, key=key, turn=43))
    except ReadmissionRefused as exc:
        refused = True
        note = exc.tombstone.note()
    b.append(
        Entry("call-43", Kind.TOOL_CALL, key, key=key, turn=43),
        override=Override("the pod restarted; a fresh status is needed", turn=43),
    )
    overridden = b.stats().readmissions_overridden
    return {
        "story": "prune/re-admit oscillation",
        "attempt": "re-run the pruned 'kubectl describe' at turn 43",
        "answer": f"ReadmissionRefused, carrying {note}; re-admitted only with an explicit "
        f"Override ({overridden} logged)",
        "safe": refused and overridden == 1,
    }


def _story_constraint() -> dict[str, Any]:
    b = Buffer()
    b.append(Entry("c-etc", Kind.CONSTRAINT, CONSTRAINT_TEXT, turn=1))
    b.append(Entry("r1", Kind.REASONING, "the Dockerfile needs a new base image", turn=2))
    rep = b.edit(EditPlan([Rewrite("c-etc", "avoid system config")], reason="shorten"))
    pruned = b.prune(["c-etc"], reason="no match for 'Dockerfile'")["c-etc"]
    try:
        b.mark_stale("c-etc", "low relevance")
        marked = True
    except ProtectedEntry:
        marked = False
    moved = b.edit(EditPlan([Move("c-etc")], reason="keep constraints near the end")).applied
    with b.snapshot() as s:
        verbatim = s["c-etc"].body == CONSTRAINT_TEXT
    safe = not rep.applied and pruned.status is Status.UNCHANGED and not marked and verbatim
    return {
        "story": "paraphrased constraint",
        "attempt": f"rewrite {CONSTRAINT_TEXT!r} as 'avoid system config', then prune it",
        "answer": f"rewrite refused ({'/'.join(r.name for r in rep.refusals)}) and escalated; "
        f"prune {pruned.status.name}; mark raises ProtectedEntry; move "
        f"{'allowed' if moved else 'refused'}; text verbatim",
        "safe": safe,
    }


def replay_seeds() -> list[dict[str, Any]]:
    """The seeds' five stories on a sync :class:`Buffer`; each must come out safe."""
    return [
        _story_dangling(),
        _story_summary_drift(),
        _story_torn_read(),
        _story_readmission(),
        _story_constraint(),
    ]
