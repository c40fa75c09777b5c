"""A supervisor consuming ``buf.escalations()``.

A model-driven editor tries two things the seeds forbid (paraphrasing a
constraint, summarizing away a negative result), and a slow reader holds its
pin past the alarm age. Each becomes an escalation that the supervisor
receives as it happens; nothing is silently dropped.

Run: ``python examples/supervisor.py`` (about half a second).
"""

from __future__ import annotations

import anyio

from quiesce import EditPlan, Entry, Escalation, Kind, Rewrite, Summarize, open_buffer


async def main() -> None:
    seen: list[Escalation] = []
    async with open_buffer(max_pin_age=0.1) as buf:

        async def supervise() -> None:
            async for esc in buf.escalations():
                seen.append(esc)
                print(f"supervisor: {esc.kind.name}: {esc.detail}")

        async with anyio.create_task_group() as tg:
            tg.start_soon(supervise)
            buf.append(Entry("c1", Kind.CONSTRAINT, "do not modify files under /etc"))
            buf.append(Entry("a1", Kind.REASONING, "attempt 1 ran with timeout=30s"))
            buf.append(Entry("a2", Kind.REASONING, "attempt 2 timed out, do not retry"))
            # 1. a paraphrase of a constraint
            buf.edit(EditPlan([Rewrite("c1", "avoid system config")], reason="shorten"))
            # 2. a summary that drops a negative result
            summary = Entry("s1", Kind.SUMMARY, "two attempts were made")
            buf.edit(EditPlan([Summarize(("a1", "a2"), into=summary)], reason="compact"))
            # 3. a reader pinned past max_pin_age
            with buf.snapshot():
                await anyio.sleep(0.3)
            await anyio.sleep(0.05)
            tg.cancel_scope.cancel()
    kinds = sorted({e.kind.name for e in seen})
    print(f"{len(seen)} escalations: {kinds}")
    assert kinds == ["READER_PINNED", "REFUSED_EDIT"], kinds


if __name__ == "__main__":
    anyio.run(main)
