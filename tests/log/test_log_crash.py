"""Crash safety: a child process appending, marking, pruning, editing,
streaming (open entries written, closed and aborted) and flushing is killed
with SIGKILL at random moments; every change it had made
durable (flushed, or a published removal) is recovered, and the recovered
buffer satisfies every invariant.

Each kill is followed by a recovery in the parent, then the next child
recovers the same file and carries on, so logs that survived several crashes
are exercised too. The kill moments are random (a seeded delay after the
child reports it is running), so kills land in appends, in flushes, inside
``fsync`` and SQLite commits, and between a write and its report. On a loaded
machine the child gets a small share of a core: the kill then also waits for
the child to have run for half its delay in CPU time (at most ten delays of
wall time), so a kill lands as deep into the child's work as on an idle
machine, where the wall-time delay alone decides.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from _workload import digest, state
from quiesce import Buffer, JsonlLog, SQLiteLog
from quiesce._core.replay import replay
from quiesce._log.verify import main as verify_main

CHILD = Path(__file__).resolve().parents[1].joinpath("_crash_child.py")
KILLS = 15  # per sink: 30 kills in the default run
SOAK_KILLS = 100
#: the share of its delay the child must have run on a CPU before the kill,
#: and the longest wait, in delays (see the module docstring)
CPU_SHARE = 0.5
MAX_STRETCH = 10.0
_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far (from /proc; 0 without it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def _wait_before_kill(pid: int, delay: float) -> None:
    """Sleep ``delay`` seconds, and longer while the child has run less than
    ``CPU_SHARE * delay`` of CPU since now (up to ``MAX_STRETCH * delay``)."""
    start, cpu0 = time.monotonic(), _cpu_seconds(pid)
    time.sleep(delay)
    while (
        _cpu_seconds(pid) - cpu0 < CPU_SHARE * delay
        and time.monotonic() - start < MAX_STRETCH * delay
    ):
        time.sleep(0.002)


def _run_and_kill(
    kind: str, path: Path, seed: int, delay: float, every: int = 0
) -> list[dict[str, Any]]:
    """Start the child, wait until it is running, let it work for ``delay``
    seconds, SIGKILL it; return the complete report lines it printed."""
    env = dict(
        os.environ, PYTHONPATH=str(CHILD.parent) + os.pathsep + os.environ.get("PYTHONPATH", "")
    )
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), kind, str(path), str(seed), str(1 + seed % 12), str(every)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None
    try:
        first = proc.stdout.readline()
        assert first.startswith(b'{"ready"'), (first, proc.stderr.read() if proc.stderr else b"")
        _wait_before_kill(proc.pid, delay)
    finally:
        proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate()
    assert proc.returncode == -signal.SIGKILL, err.decode()
    reports = []
    for line in out.split(b"\n")[:-1]:  # the last piece may be a torn line
        obj = json.loads(line)
        assert "error" not in obj, obj
        reports.append(obj)
    return reports


def _open(kind: str, path: Path) -> SQLiteLog | JsonlLog:
    return SQLiteLog(path) if kind == "sqlite" else JsonlLog(path)


def _check_recovery(kind: str, path: Path, reports: list[dict[str, Any]]) -> tuple[int, int]:
    """Recover ``path`` and check the promise of the last report. Returns the
    recovered log length and the streams in flight that recoveries of this
    log aborted."""
    sink = _open(kind, path)
    try:
        buf = Buffer(log=sink)
        buf._check(expect_no_pins=True)
        records = list(buf.log)
        # recovery from the newest checkpoint and the tail = a full replay
        full = Buffer()
        replay(full, records)
        assert digest(state(full)) == digest(state(buf)), "checkpoint recovery differs"
        # issue 21: a full streaming replay proves every checkpoint and the
        # recovered buffer itself (Buffer.verify raises on a disagreement)
        buf.verify()
        if reports:
            last = reports[-1]
            assert len(records) >= last["log"], "a flushed change was lost"
            prefix = Buffer()
            replay(prefix, records[: last["log"]])
            assert digest(state(prefix)) == last["digest"], "recovered state differs"
        # A stream in flight at the kill comes back as its durable prefix,
        # aborted (recovery finished it): none is left open.
        assert buf.streams() == {}
        # (the log's recovery aborts, this one's pending and earlier ones')
        in_flight = sum(
            r.op == "stream_abort" and "the log ends before its close" in (r.reason or "")
            for r in records
        )
        # The recovered buffer keeps working: due removals apply durably.
        buf.apply_due()
        buf._check()
        return len(records), in_flight
    finally:
        sink.close()


def _verify_command(path: Path) -> None:
    """``quiesce verify`` (its entry point, in this process) on the file a
    kill left, once recovered: every checkpoint in it agrees with a full
    streaming replay (issue 21)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = verify_main([str(path)])
    assert (code, err.getvalue()) == (0, ""), err.getvalue()
    assert "checkpoints agree with a full replay" in out.getvalue()


def _crash_loop(kind: str, tmp_path: Path, kills: int, seed: int, every: int = 0) -> None:
    rng = random.Random(seed)
    path = tmp_path / f"log-0.{kind}"
    paths = []
    lengths = []
    in_flight = 0
    for k in range(kills):
        if k % 6 == 0:  # a fresh file now and then, so logs stay small
            path = tmp_path / f"log-{k}.{kind}"
            paths.append(path)
        delay = rng.choice([0.0, rng.uniform(0, 0.01), rng.uniform(0, 0.1), rng.uniform(0, 0.1)])
        reports = _run_and_kill(kind, path, seed * 1000 + k, delay, every)
        length, aborted = _check_recovery(kind, path, reports)
        _verify_command(path)
        lengths.append(length)
        in_flight += aborted
    assert max(lengths) > 0, "no child ever made anything durable"
    assert in_flight > 0, "no kill landed while a stream was in flight"
    if every:
        # some file got a checkpoint (one whose kills all came early may not)
        written = []
        for p in paths:
            if p.exists():
                sink = _open(kind, p)
                try:
                    written.append(bool(sink.checkpoints()[1]))
                finally:
                    sink.close()
        assert any(written), "no checkpoint was ever written"


@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
def test_sigkill_at_random_moments(kind: str, tmp_path: Path) -> None:
    """Every change flushed before a SIGKILL is recovered; the recovered
    buffer passes _check() (15 kills per sink)."""
    _crash_loop(kind, tmp_path, KILLS, seed=1 if kind == "sqlite" else 2)


@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
def test_sigkill_with_frequent_checkpoints(kind: str, tmp_path: Path) -> None:
    """The same with a checkpoint every 7 records and on every third flush,
    so kills land while checkpoints are built and written: nothing flushed
    is lost, and recovery from the newest checkpoint equals a full replay
    (15 kills per sink)."""
    _crash_loop(kind, tmp_path, KILLS, seed=3 if kind == "sqlite" else 4, every=7)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
def test_sigkill_soak(kind: str, tmp_path: Path) -> None:
    """The same, with many more kills (``pytest -m slow``)."""
    _crash_loop(kind, tmp_path, SOAK_KILLS, seed=int(time.time()))
