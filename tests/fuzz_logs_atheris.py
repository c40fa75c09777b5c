"""Coverage-guided fuzzing of both log formats and of recovery (atheris).

The property (the same as ``log/test_log_fuzz.py``): whatever the bytes, opening
the file and recovering a buffer either raises :class:`LogFormatError` or
yields a buffer that passes ``_check()``; ``quiesce inspect`` exits 0 or 1.
Any other exception, a failed check or a hang is a finding.

Each input is decoded by ``atheris.FuzzedDataProvider``: the first choice
picks how the file is made — raw bytes after a valid JSONL header, a real
engine-written JSONL log with the input spliced in, or a real SQLite log with
input bytes written over it at a chosen offset — so the fuzzer reaches deep
into both formats instead of dying on the header.

Run (``-m slow`` runs 20,000 inputs; the default suite runs 300)::

    PYTHONPATH=src python tests/fuzz_logs_atheris.py -runs=100000
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile

import atheris

with atheris.instrument_imports(include=["quiesce"]):
    from quiesce import Buffer, Entry, JsonlLog, Kind, LogFormatError, SQLiteLog
    from quiesce._log.inspect import main as inspect_main

_DIR = tempfile.mkdtemp(prefix="quiesce-atheris-")
_SINKS = {"jsonl": JsonlLog, "sqlite": SQLiteLog}


def _seed(kind: str) -> bytes:
    """A real log written by the engine: appends, refs, marks, a staged and
    an applied removal, a refused edit, several commits."""
    path = os.path.join(_DIR, f"seed.{kind}")
    buf = Buffer(log=_SINKS[kind](path))
    buf.append(Entry("rule", Kind.CONSTRAINT, "do not modify files under /etc"))
    buf.append(Entry("call", Kind.TOOL_CALL, "kubectl describe pod", turn=1))
    buf.append(Entry("out", Kind.TOOL_OUTPUT, "a dump", refs=("call",), meta={"n": [1, 2]}))
    buf.flush()
    buf.append(Entry("step", Kind.REASONING, "the pod is healthy", turn=2))
    buf.mark_stale("step", "superseded", turn=3)
    buf.prune(["call", "out"], reason="stale", actor="pruner", turn=4)
    buf.flush()
    with buf.snapshot():
        buf.prune(["step"], reason="done", turn=5)
    buf.apply_due()
    buf.flush()
    buf.sink.close()  # type: ignore[union-attr]
    with open(path, "rb") as f:
        data = f.read()
    os.unlink(path)
    return data


_SEEDS = {kind: _seed(kind) for kind in _SINKS}
_HEADER = b'{"quiesce":"edit-log","format":1,"created":1.0}\n'


def _check_file(kind: str, data: bytes) -> None:
    path = os.path.join(_DIR, f"input.{kind}")
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path + suffix)
    with open(path, "wb") as f:
        f.write(data)
    try:
        sink = _SINKS[kind](path)
        try:
            buf = Buffer(log=sink)
        finally:
            sink.close()
    except LogFormatError:
        pass
    else:
        buf._check(expect_no_pins=True)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = inspect_main([path])
    if code not in (0, 1):
        raise AssertionError(f"inspect exited {code}")


def test_one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    mode = fdp.ConsumeIntInRange(0, 2)
    if mode == 0:
        _check_file("jsonl", _HEADER + fdp.ConsumeBytes(fdp.remaining_bytes()))
        return
    kind = "jsonl" if mode == 1 else "sqlite"
    seed = _SEEDS[kind]
    at = fdp.ConsumeIntInRange(0, len(seed))
    overwrite = fdp.ConsumeBool()
    patch = fdp.ConsumeBytes(fdp.remaining_bytes())
    if overwrite:
        body = seed[:at] + patch + seed[at + len(patch) :]
    else:
        body = seed[:at] + patch + seed[at:]
    _check_file(kind, body)


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
