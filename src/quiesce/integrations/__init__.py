"""Drop-in integrations of quiesce with agent frameworks, one module per framework.

Each module imports its framework and is an optional extra; importing it
without the framework installed raises :class:`ImportError` naming the extra:

* :mod:`quiesce.integrations.langchain` — ``QuiesceMiddleware`` (``quiesce[langchain]``)
* :mod:`quiesce.integrations.openai_agents` — ``QuiesceSession``,
  ``quiesce_input_filter`` (``quiesce[openai-agents]``)
* :mod:`quiesce.integrations.pydantic_ai` — ``QuiesceHistoryProcessor``
  (``quiesce[pydantic-ai]``)
* :mod:`quiesce.integrations.autogen` — ``QuiesceChatCompletionContext``
  (``quiesce[autogen]``)

Each takes a buffer holding one conversation, or a :class:`~quiesce.BufferPool`
holding one buffer per conversation (the framework's own conversation id);
see :mod:`quiesce.integrations._conversation`. With nothing marked or pruned
the model receives exactly what it would without quiesce.

What every integration keeps true: the framework's messages are held in a
quiesce buffer by identity (appending the history again changes nothing);
each model call sees one pinned version of the pruned window, with a note of
what was removed or marked stale; every tool call the model sees is
answered; reasoning and thinking blocks reach the model byte-for-byte as the
framework produced them; a re-run of a pruned tool call is recorded, not
refused. See ``_store`` for the shared mechanics.
"""
