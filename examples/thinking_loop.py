"""An Anthropic-style tool loop with signed thinking blocks and an image,
kept in a quiesce buffer the way a framework integration does it: the whole
history is synced every turn, the window sent to the model is rendered from
the buffer, a pruner removes a finished turn — and when the model re-runs the
pruned tool call, the run goes on (the re-run is recorded with a logged
override; a second cycle is escalated as OSCILLATION) instead of crashing.

Run: ``python examples/thinking_loop.py``.
"""

from __future__ import annotations

import json
from typing import Any

from quiesce import Buffer, EscalationKind, Kind
from quiesce.adapters import anthropic

SYSTEM = "You are an SRE agent. Never restart pods without asking."
IMAGE = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}


def model_turn(n: int, call_id: str) -> dict[str, Any]:
    """What the model answers: a signed thinking block, then a tool call
    (the same call, by name and input, every time)."""
    return {
        "role": "assistant",
        "content": [
            {
                "type": "thinking",
                "thinking": f"Step {n}: read the pod status.",
                "signature": f"EqQBCkYIBxgCKkA{n}",
            },
            {
                "type": "tool_use",
                "id": call_id,
                "name": "kubectl",
                "input": {"cmd": "get pod web-0 -o yaml"},
            },
        ],
    }


def tool_turn(call_id: str) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": call_id,
                "content": [{"type": "text", "text": "status: Running (a 400-line dump)"}],
            },
        ],
    }


def main() -> None:
    buf = Buffer()
    history: list[dict[str, Any]] = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Here is the dashboard. Is web-0 healthy?"},
                {"type": "image", "source": IMAGE},
            ],
        },
    ]
    oscillations = 0
    for n in range(1, 4):
        # The framework hands back its whole history every turn: sync is
        # idempotent, so only the new messages are appended.
        report = anthropic.sync_messages(buf, history, system=SYSTEM, user_kind=Kind.REASONING)
        oscillations += sum(e.kind is EscalationKind.OSCILLATION for e in report.escalations)
        request = anthropic.render(buf)
        anthropic.validate(request["messages"], system=request.get("system"))
        # The model re-runs the same call each turn (a new id each time).
        call_id = f"toolu_{n}"
        history += [model_turn(n, call_id), tool_turn(call_id)]
        report = anthropic.sync_messages(buf, history, system=SYSTEM, user_kind=Kind.REASONING)
        oscillations += sum(e.kind is EscalationKind.OSCILLATION for e in report.escalations)
        print(
            f"turn {n}: appended {report.appended}, already pruned {report.tombstoned}, "
            f"re-admitted {report.readmitted}"
        )
        if n == 3:
            break  # keep the last turn: the model needs its thinking and result
        # The pruner drops the finished turn: thinking, call and result go
        # together (a signed block never leaves without its turn).
        turn = [
            e.id
            for e in buf.head().entries()
            if e.meta.get("msg") == call_id or e.id == f"{call_id}#result"
        ]
        pruned = buf.prune(turn, reason="status dump is noise", actor="pruner", turn=n)
        assert all(o.status.name == "PRUNED" for o in pruned.values()), pruned

    request = anthropic.render(buf)
    anthropic.validate(request["messages"], system=request.get("system"))
    print(json.dumps(request, indent=2))
    stats = buf.stats()
    print(
        f"re-admissions recorded: {stats.readmissions_overridden}, "
        f"oscillation escalations: {oscillations}"
    )
    assert stats.readmissions_overridden == 2 and oscillations == 1


if __name__ == "__main__":
    main()
