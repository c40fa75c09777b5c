"""A small agent loop on asyncio: readers hold a pinned snapshot across a
"model call", tool calls arrive in pairs, and a model-driven pruner runs
through ``run_pruner`` with the deterministic ``HeuristicPruner``.

Run: ``python examples/asyncio_agent.py`` (a second or two).
"""

from __future__ import annotations

import asyncio

import anyio

from quiesce import Entry, HeuristicPruner, Kind, RuntimeBuffer, open_buffer, run_pruner


async def tool_caller(buf: RuntimeBuffer, turns: int) -> None:
    for turn in range(1, turns + 1):
        buf.append(
            Entry(f"plan-{turn}", Kind.REASONING, f"step {turn}: check the queue", turn=turn)
        )
        call = f"call-{turn}"
        key = f"queue-depth --shard={turn}"
        buf.append(Entry(call, Kind.TOOL_CALL, key, key=key, turn=turn))
        depth = " ".join(f"shard={turn} depth={turn * 7 + i}" for i in range(10))
        buf.append(Entry(f"{call}/out", Kind.TOOL_OUTPUT, depth, refs=(call,), turn=turn))
        await anyio.sleep(0.01)


async def reader(buf: RuntimeBuffer, turns: int) -> None:
    for _ in range(turns // 3):
        with buf.snapshot() as snap:
            before = [e.id for e in snap]
            await anyio.sleep(0.03)  # the model call: the snapshot stays pinned
            assert [e.id for e in snap] == before, "a pinned snapshot never changes"
        await anyio.sleep(0)


async def pruner(buf: RuntimeBuffer, turns: int) -> None:
    model = HeuristicPruner(budget=200, min_age=3, latency=0.02)
    for _ in range(turns // 4):
        await anyio.sleep(0.04)
        report = await run_pruner(buf, model)
        if report is not None:
            state = "applied" if report.applied else f"refused {report.refusals}"
            print(
                f"pruner: {state}; removed {len(report.removed)}, deferred {len(report.deferred)}"
            )


async def main() -> None:
    async with open_buffer() as buf:
        buf.append(Entry("rules", Kind.CONSTRAINT, "never drop a queue", turn=0))
        async with anyio.create_task_group() as tg:
            tg.start_soon(tool_caller, buf, 30)
            tg.start_soon(reader, buf, 30)
            tg.start_soon(pruner, buf, 30)
        await buf.quiesce()
        st = buf.stats()
        print(
            f"version {st.version}: {st.entries} entries, {st.tombstones} tombstones, "
            f"{st.pinned} pinned, {st.deferred} deferred"
        )
        with buf.snapshot() as snap:
            assert snap["rules"].body == "never drop a queue", "constraints are never pruned"
        assert buf.stats().pinned == 0, "no pin leaks"


if __name__ == "__main__":
    asyncio.run(main())
