"""Fuzzing both log formats and recovery (issue 11: defects 6 and 7, and
"fuzz the formats").

The property, for every input: opening the file and recovering a buffer
either raises :class:`LogFormatError`, or yields a buffer that passes
``_check()``; ``quiesce inspect`` exits 0 or 1 and never raises. Stronger
where the format allows it:

* SQLite, single bit flips over a real database file: the log recovers
  *exactly* (the same records, the same state) or is refused — never a
  prefix, never other content (a per-record CRC, ``quick_check`` and the
  schema check).
* JSONL, single bit flips: exactly, or refused, or — a flip inside the last
  batch, which cannot be told from a torn write — every batch but the last,
  with the torn bytes reported.

The default run is short (a few hundred flips per format, a few dozen
hypothesis examples); ``-m slow`` runs thousands. The atheris harness
(``tests/fuzz_logs_atheris.py``) checks the same property with
coverage-guided inputs; ``test_atheris_harness`` runs it briefly.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _workload import Workload, random_op, state
from quiesce import Buffer, JsonlLog, LogFormatError, SQLiteLog
from quiesce._core.verify import state_fields, verify_records
from quiesce._log._format import encode_json
from quiesce._log.inspect import _open as open_log
from quiesce._log.inspect import main as inspect_main
from quiesce._log.jsonl import read_jsonl
from quiesce._log.verify import main as verify_main
from test_replay_checks import _jsonl

SINKS: dict[str, Callable[[Path], Any]] = {"sqlite": SQLiteLog, "jsonl": JsonlLog}
FLIPS = 150  # per format in the default run (SLOW_FLIPS under -m slow)
SLOW_FLIPS = 3000


def _build(kind: str, path: Path, seed: int = 5, ops: int = 150) -> dict[str, Any]:
    """A real log written by the engine (several flushes: several JSONL
    batches); returns the state it recovers to."""
    buf = Buffer(log=SINKS[kind](path))
    work = Workload(buf)
    rng = random.Random(seed)
    for n in range(ops):
        work.run(random_op(rng))
        if n % 25 == 24:
            buf.flush()
    work.release_all()
    buf.flush()
    buf.sink.close()  # type: ignore[union-attr]
    again = Buffer(log=SINKS[kind](path))
    recovered = state(again)  # reads the log back from the open sink
    again.sink.close()  # type: ignore[union-attr]
    return recovered


@pytest.fixture(scope="module")
def pristine() -> Iterator[dict[str, tuple[bytes, dict[str, Any]]]]:
    with tempfile.TemporaryDirectory() as d:
        out = {}
        for kind in SINKS:
            path = Path(d) / f"log.{kind}"
            base = _build(kind, path)
            out[kind] = (path.read_bytes(), base)
        yield out


def _recover(kind: str, path: Path) -> Buffer | None:
    """The recovered buffer (checked), or None if the file was refused."""
    try:
        sink = SINKS[kind](path)
    except LogFormatError:
        return None
    try:
        buf = Buffer(log=sink)
    except LogFormatError:
        return None
    finally:
        sink.close()
    buf._check(expect_no_pins=True)
    return buf


def _inspect_never_raises(path: Path) -> int:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = inspect_main([str(path)])
    assert code in (0, 1), code
    assert (code == 1) == bool(err.getvalue()), err.getvalue()
    return code


def _verify_never_raises(path: Path, recovered: Buffer | None) -> int:
    """``quiesce verify`` on a damaged or crafted file exits 0 or 1 (never a
    traceback); when it passes and the file was recovered, the recovered
    buffer is exactly the full replay's state (issue 21)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = verify_main([str(path)])
    assert code in (0, 1), code
    assert (code == 1) == bool(err.getvalue()), err.getvalue()
    if code == 0 and recovered is not None:
        scratch = Buffer()
        verify_records(open_log(str(path))[3](), Buffer, into=scratch)
        assert state_fields(recovered) == state_fields(scratch), "verify passed a lie"
    return code


def _flip(data: bytes, pos: int, bit: int) -> bytes:
    b = bytearray(data)
    b[pos] ^= 1 << bit
    return bytes(b)


def _bit_flips(kind: str, pristine: Any, n: int, seed: int) -> dict[str, int]:
    data, base = pristine[kind]
    rng = random.Random(seed)
    outcomes = {"exact": 0, "refused": 0, "torn": 0}
    with tempfile.TemporaryDirectory() as d:
        for k in range(n):
            path = Path(d) / f"f{k}.{kind}"
            path.write_bytes(_flip(data, rng.randrange(len(data)), rng.randrange(8)))
            buf = _recover(kind, path)
            if buf is None:
                outcomes["refused"] += 1
            elif state(buf) == base:
                outcomes["exact"] += 1
            else:
                # Only JSONL may lose its last batch (a flip there looks like
                # a torn write): a strict prefix of whole batches, reported.
                assert kind == "jsonl", f"flip {k}: SQLite recovered other content"
                got = state(buf)["log"]
                assert got == base["log"][: len(got)] and len(got) < len(base["log"])
                assert read_jsonl(path).torn_bytes > 0
                outcomes["torn"] += 1
            if k % 10 == 0:
                _inspect_never_raises(path)
                _verify_never_raises(path, buf)
            for extra in Path(d).iterdir():
                extra.unlink()
    return outcomes


@pytest.mark.parametrize("kind", sorted(SINKS))
def test_single_bit_flips(kind: str, pristine: Any) -> None:
    """FLIPS random single-bit flips over a real file: exactly, or refused
    (or, JSONL only, all but a torn last batch). Before: 85 of 300 SQLite
    flips raised raw sqlite3 errors and 4 recovered different content."""
    outcomes = _bit_flips(kind, pristine, FLIPS, seed=11)
    assert sum(outcomes.values()) == FLIPS
    # both kinds of flip were hit (a JSONL flip is caught by its batch's CRC,
    # so it is almost always refused; SQLite has much unused space)
    assert outcomes["refused"] and (outcomes["exact"] or kind == "jsonl")


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(SINKS))
def test_single_bit_flips_soak(kind: str, pristine: Any) -> None:
    outcomes = _bit_flips(kind, pristine, SLOW_FLIPS, seed=12)
    assert sum(outcomes.values()) == SLOW_FLIPS


def test_every_bit_of_the_sqlite_header_and_schema(pristine: Any) -> None:
    """Every single-bit flip in the first page (the 100-byte header and the
    schema): exactly, or refused. Before: a flip in ``PRIMARY KEY`` in the
    schema text made every seq NULL and the log recover empty."""
    data, base = pristine["sqlite"]
    page = int.from_bytes(data[16:18], "big") or 65536
    text = data[:page]
    positions = [i for i in range(page) if i < 100 or text[i] not in (0,)]
    with tempfile.TemporaryDirectory() as d:
        for n, pos in enumerate(positions):
            path = Path(d) / f"h{n}.db"
            path.write_bytes(_flip(data, pos, n % 8))
            buf = _recover("sqlite", path)
            assert buf is None or state(buf) == base, f"byte {pos}"
            for extra in Path(d).iterdir():
                extra.unlink()


def _wal_flips(n: int, seed: int) -> dict[str, int]:
    """Flips in the write-ahead log a crash leaves behind (the database copied
    with its ``-wal`` while the writer still holds it: nothing checkpointed)."""
    import struct

    outcomes = {"exact": 0, "refused": 0, "torn": 0}
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "log.db"
        buf = Buffer(log=SQLiteLog(path))
        work = Workload(buf)
        rng = random.Random(seed)
        for k in range(150):
            work.run(random_op(rng))
            if k % 25 == 24:
                buf.flush()
        work.release_all()
        buf.flush()
        db, wal = path.read_bytes(), Path(f"{path}-wal").read_bytes()
        buf.sink.close()  # type: ignore[union-attr]
        base = state(Buffer(log=SQLiteLog(path)))
        frame = 24 + int.from_bytes(db[16:18], "big")
        commits = [
            k
            for k, off in enumerate(range(32, len(wal) - frame + 1, frame))
            if struct.unpack(">I", wal[off + 4 : off + 8])[0]
        ]
        last_start = 32 + (commits[-2] + 1) * frame  # the last transaction's first frame
        for k in range(n):
            pos = rng.randrange(len(wal))
            copy = Path(d) / f"w{k}.db"
            copy.write_bytes(db)
            Path(f"{copy}-wal").write_bytes(_flip(wal, pos, rng.randrange(8)))
            got = _recover("sqlite", copy)
            if got is None:
                outcomes["refused"] += 1
            elif state(got) == base:
                outcomes["exact"] += 1
            else:
                # a flip in the last transaction looks like a torn write: it
                # (and only it) is dropped, as SQLite's WAL recovery does
                assert pos >= last_start, f"flip at {pos} lost committed data"
                log = state(got)["log"]
                assert log == base["log"][: len(log)]
                outcomes["torn"] += 1
            for extra in Path(d).glob(f"w{k}.db*"):
                extra.unlink()
    return outcomes


def test_wal_bit_flips() -> None:
    """A single flipped bit in the WAL of a crashed writer: exactly, or
    refused, or (inside the last transaction only) that transaction dropped.
    Before: SQLite silently dropped every transaction after the damaged
    frame."""
    outcomes = _wal_flips(150, seed=21)
    assert outcomes["refused"] > 100


@pytest.mark.slow
def test_wal_bit_flips_soak() -> None:
    _wal_flips(2000, seed=22)


# -- arbitrary damage ---------------------------------------------------------

mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 2**32), st.integers(0, 7)),
    st.tuples(st.just("set"), st.integers(0, 2**32), st.binary(min_size=1, max_size=16)),
    st.tuples(st.just("cut"), st.integers(0, 2**32), st.integers(1, 4096)),
    st.tuples(st.just("insert"), st.integers(0, 2**32), st.binary(min_size=1, max_size=64)),
    st.tuples(st.just("truncate"), st.integers(0, 2**32), st.just(0)),
    st.tuples(
        st.just("insert"),
        st.integers(0, 2**32),
        st.sampled_from([b"[" * 5000 + b"\n", b"{" * 3000, b'{"a":' * 2000 + b"1\n", b"\n\n"]),
    ),
)


def _mutate(data: bytes, muts: list[tuple[str, int, Any]]) -> bytes:
    b = bytearray(data)
    for what, where, arg in muts:
        pos = where % (len(b) + 1)
        if what == "flip" and b:
            b[pos % len(b)] ^= 1 << arg
        elif what == "set":
            b[pos : pos + len(arg)] = arg
        elif what == "cut":
            del b[pos : pos + arg]
        elif what == "insert":
            b[pos:pos] = arg
        elif what == "truncate":
            del b[pos:]
    return bytes(b)


@pytest.mark.parametrize("kind", sorted(SINKS))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(muts=st.lists(mutation, min_size=1, max_size=4))
def test_damaged_files(kind: str, pristine: Any, muts: list[tuple[str, int, Any]]) -> None:
    """Arbitrary damage (flips, overwrites, cuts, inserted junk including
    deep ``[[[[``, truncation): refused, or a buffer that passes _check();
    inspect exits 0 or 1."""
    _damaged(kind, pristine, muts)


def _damaged(kind: str, pristine: Any, muts: list[tuple[str, int, Any]]) -> None:
    data, _ = pristine[kind]
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"log.{kind}"
        path.write_bytes(_mutate(data, muts))
        buf = _recover(kind, path)
        _inspect_never_raises(path)
        _verify_never_raises(path, buf)


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(SINKS))
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(muts=st.lists(mutation, min_size=1, max_size=6))
def test_damaged_files_soak(kind: str, pristine: Any, muts: list[tuple[str, int, Any]]) -> None:
    _damaged(kind, pristine, muts)


# -- crafted records ----------------------------------------------------------

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
    st.sampled_from(["nan", "inf", "reasoning", "constraint", "negative", "e1", "e2", "e3"]),
)
json_value = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    if isinstance(value, dict):
        return {k: (_replace(v, path[1:], new) if k == path[0] else v) for k, v in value.items()}
    return [(_replace(v, path[1:], new) if i == path[0] else v) for i, v in enumerate(value)]


@pytest.fixture(scope="module")
def engine_records() -> list[dict[str, Any]]:
    buf = Buffer()
    work = Workload(buf)
    rng = random.Random(3)
    for _ in range(120):
        work.run(random_op(rng))
    work.release_all()
    buf.apply_due()
    return [r.to_dict() for r in buf.log]


def _crafted_outcome(records: list[dict[str, Any]], path: Path) -> Buffer | None:
    """Store the (possibly crafted) records as one committed JSONL batch —
    valid CRC, so nothing is taken for a torn tail — and recover."""
    _jsonl(path, [encode_json(r) for r in records])
    buf = _recover("jsonl", path)
    _inspect_never_raises(path)
    _verify_never_raises(path, buf)
    return buf


def _crafted(engine_records: list[dict[str, Any]], data: st.DataObject) -> list[dict[str, Any]]:
    records = list(engine_records)
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(records) - 1))
        where = data.draw(st.sampled_from(_paths(records[i])))
        records[i] = _replace(records[i], where, data.draw(json_value))
    return records


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_crafted_records(engine_records: list[dict[str, Any]], data: st.DataObject) -> None:
    """Any field of any record of a real engine log replaced by arbitrary
    JSON (1-3 replacements), stored with a valid checksum: recovery refuses
    it (LogFormatError) or recovers a buffer that passes _check() (30
    examples; 3,000 under -m slow: test_crafted_records_soak)."""
    with tempfile.TemporaryDirectory() as d:
        _crafted_outcome(_crafted(engine_records, data), Path(d) / "log.jsonl")


@pytest.mark.slow
@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_crafted_records_soak(engine_records: list[dict[str, Any]], data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as d:
        _crafted_outcome(_crafted(engine_records, data), Path(d) / "log.jsonl")


#: Values chosen to break an invariant when put anywhere in a record: other
#: ids, protected kinds, numbers at the edges of floats and ints, wrong types.
SWEEP_VALUES: list[Any] = [
    None,
    0,
    -1,
    2**64,
    1e308,
    -1e308,
    2.0**53,
    0.5,
    "",
    "e1",
    "e2",
    "constraint",
    "negative",
    "nan",
    [],
    {},
    [0],
    ["e1"],
    True,
    {"id": "e1"},
]


def _sweep(engine_records: list[dict[str, Any]], tmp_path: Path, every: bool) -> int:
    """Replace fields of the engine log one at a time (``every``: each field
    by each of SWEEP_VALUES; otherwise a third of the fields, by one value
    each, in rotation) and check each outcome. Returns how many were tried."""
    lines = [encode_json(r) for r in engine_records]
    path = tmp_path / "c.jsonl"
    tried = 0
    for i, rec in enumerate(engine_records):
        for j, where in enumerate(_paths(rec)):
            if every:
                values = SWEEP_VALUES
            elif j % 3 == i % 3:
                values = [SWEEP_VALUES[(i + j) % len(SWEEP_VALUES)]]
            else:
                continue
            for new in values:
                crafted = list(lines)
                crafted[i] = encode_json(_replace(rec, where, new))
                _jsonl(path, crafted)
                _recover("jsonl", path)
                if tried % 25 == 0:
                    _inspect_never_raises(path)
                tried += 1
    return tried


def test_crafted_records_sweep(engine_records: list[dict[str, Any]], tmp_path: Path) -> None:
    """A deterministic sweep over a real engine log (63 records, 1,757
    fields): a third of the fields, each replaced by one of SWEEP_VALUES in
    turn; refused, or a buffer that passes _check()."""
    assert _sweep(engine_records, tmp_path, every=False) > 500


@pytest.mark.slow
def test_crafted_records_sweep_soak(engine_records: list[dict[str, Any]], tmp_path: Path) -> None:
    """Every field of every record, each replaced by every one of SWEEP_VALUES."""
    assert _sweep(engine_records, tmp_path, every=True) > 30000


# -- torn tails and deep JSON (defect 7) --------------------------------------


@pytest.mark.parametrize(
    "tail",
    [b"[" * 200_000, b"[" * 200_000 + b"\n", b'{"a":' * 50_000 + b"\n"],
    ids=["brackets", "brackets-newline", "objects-newline"],
)
@pytest.mark.parametrize("after_records", [False, True])
def test_deep_torn_tail_is_skipped(tmp_path: Path, tail: bytes, after_records: bool) -> None:
    """A valid header (and records) followed by a torn tail of deep ``[[[[``:
    JsonlLog opens, the tail is reported and ignored, inspect exits 0.
    Before: RecursionError from JsonlLog() and inspect."""
    path = tmp_path / "log.jsonl"
    buf = Buffer(log=JsonlLog(path))
    if after_records:
        from quiesce import Entry, Kind

        buf.append(Entry("a", Kind.REASONING, "x"))
        buf.flush()
    buf.sink.close()  # type: ignore[union-attr]
    with open(path, "ab") as f:
        f.write(tail)
    sink = JsonlLog(path)
    assert sink.torn_bytes == len(tail)
    again = Buffer(log=sink)
    assert len(again.log) == (1 if after_records else 0)
    again._check()
    sink.close()
    assert _inspect_never_raises(path) == 0


def test_deep_record_in_a_committed_batch_is_refused(tmp_path: Path) -> None:
    """A committed record nested 100,000 deep: refused (LogFormatError), not
    RecursionError, however deep the stack of the caller."""
    deep = (
        '{"format":1,"seq":0,"time":1.0,"op":"escalate","version":null,"ids":[],'
        '"actor":null,"reason":null,"turn":null,"outcome":"x","detail":{"d":'
        + "[" * 100_000
        + "]" * 100_000
        + "}}"
    )
    path = tmp_path / "log.jsonl"
    _jsonl(path, [deep])
    # An escalation's detail is not replayed: a deep one recovers (stored as read).
    buf = _recover("jsonl", path)
    assert buf is not None and len(buf.log) == 1
    appended = deep.replace('"op":"escalate"', '"op":"append"').replace(
        '"version":null', '"version":1'
    )
    _jsonl(path, [appended])
    with pytest.raises(LogFormatError, match=r"^log record 0 \(append\) is malformed"):
        Buffer(log=JsonlLog(path))
    assert _inspect_never_raises(path) == 1


# -- atheris ------------------------------------------------------------------

HARNESS = Path(__file__).resolve().parents[1].joinpath("fuzz_logs_atheris.py")


def _run_harness(runs: int, artifacts: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "src"))
    proc = subprocess.run(
        [
            sys.executable,
            str(HARNESS),
            f"-artifact_prefix={artifacts}/",
            f"-runs={runs}",
            "-seed=1",
            "-max_len=8192",
            "-len_control=0",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"Done {runs} runs" in proc.stderr


def test_atheris_harness(tmp_path: Path) -> None:
    """The coverage-guided harness, briefly: no input breaks the property
    (a failing input is written to ``tmp_path``; add it to tests/data/atheris)."""
    pytest.importorskip("atheris")
    _run_harness(300, tmp_path)


CORPUS = Path(__file__).resolve().parents[1].joinpath("data") / "atheris"


@pytest.mark.parametrize("name", sorted(p.name for p in CORPUS.iterdir()))
def test_atheris_findings(name: str) -> None:
    """Inputs the harness once failed on, replayed (regressions): e.g. a
    damaged SQLite schema page for which sqlite3 raised MemoryError."""
    pytest.importorskip("atheris")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "src"))
    proc = subprocess.run(
        [sys.executable, str(HARNESS), str(CORPUS / name)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.slow
def test_atheris_harness_soak(tmp_path: Path) -> None:
    pytest.importorskip("atheris")
    _run_harness(50_000, tmp_path)
