"""Chat-message adapters: OpenAI-style and Anthropic-style messages ⇄ entries.

Plain dicts in, plain dicts out; no SDK is imported. Each adapter module has
the same four functions:

* ``to_entries(messages, ...)`` — entries for a list of messages;
* ``append_messages(buf, messages, ...)`` — validate everything, then append
  (a malformed message raises naming its index, and nothing is appended);
* ``render(snapshot)`` — messages a chat API accepts: each tool result right
  after its call, stale entries annotated, each removal a one-line tombstone
  note, constraints and instructions verbatim;
* ``validate(messages)`` — check that shape.

System messages become ``INSTRUCTION`` entries; a tool result cites its tool
call, so the buffer prunes the pair together or not at all. The adapters
import the core; the core imports nothing from here.
"""

from . import anthropic as anthropic
from . import openai as openai

__all__ = ["anthropic", "openai"]
