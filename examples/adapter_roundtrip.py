"""Chat messages in, a pruned window out, in OpenAI and Anthropic shapes.

Tool results cite their calls, so a call/result pair is pruned together; the
rendered transcript keeps every result right after its call, marks stale
entries, and writes each removal as a one-line tombstone note.

Run: ``python examples/adapter_roundtrip.py``.
"""

from __future__ import annotations

import json

from quiesce import Buffer, InvalidArgument
from quiesce.adapters import anthropic, openai

MESSAGES = [
    {"role": "system", "content": "You are an SRE agent. Do not modify files under /etc."},
    {"role": "user", "content": "Is pod web-0 healthy?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "kubectl", "arguments": '{"cmd": "describe pod web-0"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "Name: web-0 Status: Running ..."},
    {"role": "assistant", "content": "web-0 is healthy; the dump is noise."},
]


def main() -> None:
    buf = Buffer()
    openai.append_messages(buf, MESSAGES, turn=40)
    with buf.snapshot() as snap:
        assert openai.render(snap) == MESSAGES, "a round trip gives the messages back"
        answer = snap.entries()[-1].id

    buf.prune(["call_1", "call_1#result"], reason="dump is noise", actor="pruner", turn=41)
    buf.mark_stale(answer, "superseded by a newer check", turn=42)
    with buf.snapshot() as snap:
        rendered = openai.render(snap)
        openai.validate(rendered)
        print("OpenAI-style, after pruning:")
        print(json.dumps(rendered, indent=2))
        print("Anthropic-style:")
        print(json.dumps(anthropic.render(snap), indent=2))

    version = buf.version
    try:
        openai.append_messages(buf, [{"role": "user", "content": "ok"}, {"role": "robot"}])
    except InvalidArgument as exc:
        print(f"refused: {exc}")
    assert buf.version == version, "nothing was appended"


if __name__ == "__main__":
    main()
