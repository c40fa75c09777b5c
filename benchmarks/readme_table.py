"""Print the README's goal table (Markdown) from a ``quiesce bench`` results file.

    python benchmarks/readme_table.py [docs/bench/results.json]

One row per goal: what is compared, the target, the measured ratio (the
median of the per-repetition ratios), its spread (min..max of those ratios,
where the section measures one) and PASS/MISS; then the figures the suite
reports without a goal (agent-loop backlog, sustained durable appends).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DEFAULT = Path(__file__).resolve().parent.parent / "docs" / "bench" / "results.json"


def _ratio(x: float) -> str:
    if x >= 100:
        return f"{x:,.0f}×"
    if x >= 0.01:
        return f"{x:.3g}×"
    return f"{x:.2g}×"


def _is_count(key: str) -> bool:
    """Goals on a count (commits, wake-ups), not on a ratio."""
    return key.startswith("durability_group_commit") or "wakeups" in key


def table(results: dict[str, Any]) -> str:
    lines = [
        "| goal | target | measured | spread | status |",
        "| --- | --- | --- | --- | --- |",
    ]
    for g in results["goals"]:
        op = "≤" if g["op"] == "<=" else "≥"
        fmt = (lambda x: f"{x:g}") if _is_count(g["key"]) else _ratio
        value = "-" if g["value"] is None else fmt(g["value"])
        spread = "" if not g.get("spread") else " … ".join(_ratio(x) for x in g["spread"])
        status = f"**{g['status']}**" if g["status"] != "PASS" else "PASS"
        note = f" ({g['note']})" if g.get("note") else ""
        lines.append(
            f"| {g['text']}{note} | {op} {fmt(g['limit'])} | {value} | {spread} | {status} |"
        )
    return "\n".join(lines)


def reported(results: dict[str, Any]) -> str:
    out = []
    agent = results["sections"].get("agent_loop")
    if agent is not None:
        rows = agent["extra"]["results"]
        backlog = ", ".join(
            f"{key} {row['backlog']['max']}"
            for key, row in rows.items()
            if row["impl"] in ("quiesce", "global-quiescence")
        )
        out.append(f"- agent loop, deferred backlog (max over all runs): {backlog}")
    dur = results["sections"].get("durability")
    if dur is not None:
        s = dur["extra"]["sustained_appends_flush_10ms"]
        rates = ", ".join(
            f"{k} {s[k]['records_per_s']['median']:,.0f}"
            for k in ("in memory", "SQLiteLog", "JsonlLog")
            if k in s
        )
        out.append(f"- sustained appends, a flush every 10 ms, records/s (median): {rates}")
        f = dur["extra"]["mark_with_flusher"]["ratio_vs_memory"]
        out.append(
            "- mark_stale while a thread flushes every 10 ms, durable / in memory (wall): "
            + ", ".join(f"{k} {v['median']:.3g}×" for k, v in f.items())
        )
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    path = Path(args[0]) if args else DEFAULT
    results = json.loads(path.read_text(encoding="utf-8"))
    print(table(results))
    print()
    print(reported(results))


if __name__ == "__main__":
    main()
