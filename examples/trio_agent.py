"""The same kind of loop on trio: a verifier cites a fact while the pruner
tries to remove it; the removal waits for the verifier, and the citation
keeps the fact alive (the buffer re-checks a removal when it is applied).

Run: ``python examples/trio_agent.py`` (needs ``trio``).
"""

from __future__ import annotations

import trio

from quiesce import EditPlan, Entry, Kind, Prune, RuntimeBuffer, open_buffer


async def verifier(buf: RuntimeBuffer, started: trio.Event, done: trio.Event) -> None:
    with buf.snapshot() as snap:
        fact = snap["fact"]
        started.set()
        await trio.sleep(0.05)  # the model call
        # Still pinned: the fact is live (marked) in the head, so citing it works.
        buf.append(Entry("verdict", Kind.RATIONALE, f"safe: {fact.body}", refs=("fact",)))
    done.set()


async def pruner(buf: RuntimeBuffer, started: trio.Event) -> None:
    await started.wait()
    report = buf.edit(EditPlan([Prune("fact")], reason="old", actor="pruner"))
    print(f"pruner: applied={report.applied}, deferred={report.deferred}")


async def main() -> None:
    async with open_buffer() as buf:
        buf.append(Entry("fact", Kind.REASONING, "endpoint X is read-only", turn=1))
        started, done = trio.Event(), trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(verifier, buf, started, done)
            nursery.start_soon(pruner, buf, started)
        await buf.quiesce()
        with buf.snapshot() as snap:
            print(f"fact live: {'fact' in snap}; verdict cites it: {snap['verdict'].refs}")
            assert "fact" in snap and not snap.tombstones
        refused = dict(buf.stats().refusals)
        print(f"refusals at the grace point: {refused}")
        assert buf.stats().pinned == 0, "no pin leaks"


if __name__ == "__main__":
    trio.run(main)
