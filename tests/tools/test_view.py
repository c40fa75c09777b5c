"""``quiesce view``: a log's history as one self-contained page.

The history is checked against what the buffer did (counts, provenance of a
pruned entry, the reader that held its removal back) on SQLite, JSONL and
PostgreSQL logs; the page is opened in a real browser (the machine's own
Chromium, driven by Playwright) and read as a person would: the timeline is
drawn, a column and an entry's provenance show on click, no script error,
and a hostile id stays text. A screenshot is kept as a test artifact
(``QUIESCE_ARTIFACTS``, default ``test-artifacts/`` at the repository root).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest

from quiesce import Buffer, Entry, JsonlLog, Kind, SQLiteLog, open_buffer
from quiesce._log.view import main as view_main
from quiesce._log.view import read_history, render_html

HOSTILE = '</script><script>document.title="pwned"</script><img src=x onerror=alert(1)>'
ROOT = Path(__file__).resolve().parents[2]


async def _story(log: Any) -> None:
    """A short history with every kind of event the page shows: appends, a
    constraint, a mark, a refused prune, a removal held back by a pinned
    reader (escalated), a re-admission with an override, a refused edit."""
    from quiesce import EditPlan, Override, Rewrite

    now = [0.0]  # pin ages: the reader gets old only once its removal is staged
    async with open_buffer(log=log, max_pin_age=0.01, clock=lambda: now[0]) as buf:
        buf.append(Entry("rule", Kind.CONSTRAINT, "never touch /etc"))
        buf.append(Entry("t1", Kind.REASONING, "looked at the logs"))
        buf.append(Entry(HOSTILE, Kind.REASONING, "a hostile id"))
        buf.append(Entry("t2", Kind.REASONING, "the endpoint is read-only", refs=("t1",)))
        buf.mark_stale("t2", "superseded", turn=2)
        with buf.snapshot():
            report = await buf.aprune(["t1", "t2"], reason="stale", actor="pruner", turn=3)
            assert {o.status.value for o in report.values()} == {"deferred"}
            now[0] = 100.0
            with anyio.fail_after(10):
                async for esc in buf.escalations():
                    if esc.kind.value == "reader_pinned":
                        break
        await buf.quiesce()
        await buf.aprune(["rule"], reason="too long", actor="pruner")
        buf.append(
            Entry("t1-again", Kind.REASONING, "looked at the logs"),
            override=Override("the logs changed", turn=4),
        )
        report = await buf.aedit(
            EditPlan([Rewrite("rule", "sometimes touch /etc")], reason="shorter", actor="pruner")
        )
        assert not report.applied
        await buf.aflush()


def _history_checks(source: str) -> dict[str, Any]:
    h = read_history(source).to_json()
    assert h["records"] > 0 and h["head"] > 0
    totals = h["totals"]
    assert totals["appended"] == 5
    assert totals["removed"] == 2
    assert totals["readmitted"] == 1
    assert totals["refused"] >= 2  # the constraint's prune, the rewrite
    assert totals["escalations"] >= 2  # the pinned reader, the refused edit
    entries = {e["id"]: e for e in h["entries"]}
    assert entries["t1"]["state"] == "pruned"
    assert entries["rule"]["state"] == "live"
    what = [ev[3] for ev in entries["t1"]["events"]]
    assert what[0] == "appended"
    assert "deferred" in what and "held back" in what and what[-1] == "pruned"
    held = next(ev[4] for ev in entries["t1"]["events"] if ev[3] == "held back")
    assert "pinned at version" in held
    pruned = entries["t1"]["events"][-1][4]
    assert "by pruner" in pruned and "reason stale" in pruned
    assert [ev[3] for ev in entries["t2"]["events"]][:2] == ["appended", "marked"]
    rule = [ev[3] for ev in entries["rule"]["events"]]
    assert rule.count("refused") == 2
    assert entries["t1-again"]["events"][0][3] == "readmitted"
    # The last column's window is the head's window.
    assert h["columns"][-1]["window"] == {"constraint": 1, "reasoning": 2}
    return h


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
async def test_history_of_a_file_log(tmp_path: Path, kind: str) -> None:
    """Counts and provenance read from the log equal what the buffer did."""
    path = tmp_path / f"log.{kind}"
    log = SQLiteLog(path) if kind == "sqlite" else JsonlLog(path)
    await _story(log)
    log.close()
    _history_checks(str(path))


@pytest.mark.anyio
async def test_history_of_a_postgres_log(pg_dsn: str) -> None:
    """The same history through ``postgresql://`` (the private server)."""
    from quiesce import PostgresLog

    log = PostgresLog(pg_dsn, "b")
    await _story(log)
    log.close()
    _history_checks(pg_dsn + "&buffer_id=b")


def test_columns_and_entries_stay_bounded(tmp_path: Path) -> None:
    """However long the log, the page holds at most ``2 * columns`` columns
    and ``entries`` entry histories (the rest are counted), and every
    column's window is the one replayed at its end."""
    path = tmp_path / "long.db"
    buf = Buffer(log=SQLiteLog(path))
    for block in range(30):  # each prune of a batch is one durable removal
        for i in range(block * 100, block * 100 + 100):
            buf.append(Entry(f"e{i}", Kind.REASONING, f"step {i}"))
        buf.prune(
            [f"e{i}" for i in range(max(0, block * 100 - 10), block * 100 + 90)], reason="ten"
        )
    buf.flush()
    h = read_history(str(path), buckets=25, max_entries=100)
    assert 25 < len(h.columns) <= 50
    assert len(h.entries) == 100
    assert h.forgotten == 3_000 - 100
    assert h.columns[-1].window == {"reasoning": 10}
    assert h.columns[-1].v1 == buf.version
    spans = [c.v1 - c.v0 for c in h.columns[:-1]]
    assert max(spans) < h.width
    assert all(a.v1 < b.v0 for a, b in zip(h.columns, h.columns[1:], strict=False))


def test_the_data_cannot_close_the_script(tmp_path: Path) -> None:
    """Ids and reasons are embedded as ASCII JSON with ``<``, ``>`` and
    ``&`` escaped: the page has exactly its own two script elements."""
    buf = Buffer(log=SQLiteLog(tmp_path / "h.db"))
    buf.append(Entry(HOSTILE, Kind.REASONING, "x"))
    buf.mark_stale(HOSTILE, "<!-- & </script>")
    buf.flush()
    page = render_html(read_history(str(tmp_path / "h.db")))
    assert page.count("</script>") == 2
    assert page.isascii()
    start = page.index('<script id="data" type="application/json">') + len(
        '<script id="data" type="application/json">'
    )
    data = json.loads(page[start : page.index("</script>", start)])
    assert data["entries"][0]["id"] == HOSTILE


class TestCommand:
    def test_writes_the_page(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        buf = Buffer(log=SQLiteLog(tmp_path / "a.db"))
        buf.append(Entry("a", Kind.REASONING, "x"))
        buf.flush()
        out = tmp_path / "report.html"
        assert view_main([str(tmp_path / "a.db"), "-o", str(out)]) == 0
        assert out.read_text(encoding="ascii").startswith("<!DOCTYPE html>")
        said = capsys.readouterr().out
        assert said.startswith(f"wrote {out}: 1 records, versions 0-1")

    def test_a_file_that_is_not_a_log(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The same one-line error as ``inspect``; nothing is written."""
        from quiesce._log.inspect import main as inspect_main

        bad = tmp_path / "notes.txt"
        bad.write_text("hello\n")
        out = tmp_path / "report.html"
        assert view_main([str(bad), "-o", str(out)]) == 1
        err = capsys.readouterr().err
        assert inspect_main([str(bad)]) == 1
        inspect_err = capsys.readouterr().err
        assert err.startswith("quiesce view: ")
        assert err.removeprefix("quiesce view: ") in inspect_err
        assert not out.exists()
        assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]

    def test_goes_through_the_dispatcher(self, tmp_path: Path) -> None:
        from quiesce.__main__ import main

        buf = Buffer(log=JsonlLog(tmp_path / "a.jsonl"))
        buf.append(Entry("a", Kind.REASONING, "x"))
        buf.flush()
        out = tmp_path / "r.html"
        assert main(["view", str(tmp_path / "a.jsonl"), "-o", str(out)]) == 0
        assert out.exists()


# -- in a real browser ----------------------------------------------------------


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    if os.environ.get("CI") == "true":
        pytest.fail("no Chromium on the machine under CI=true (.ci/run installs it)")
    pytest.skip("no Chromium on the machine")


@pytest.fixture(scope="module")
def story_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("view")
    log = SQLiteLog(tmp / "story.db")
    anyio.run(_story, log)
    log.close()
    out = tmp / "report.html"
    assert view_main([str(tmp / "story.db"), "-o", str(out)]) == 0
    return out


def test_a_person_reads_the_page_in_chromium(story_page: Path) -> None:
    """Headless Chromium (the system's, through Playwright) opens the file
    with no network: the timeline is drawn, clicking a column and an entry
    shows what happened and the entry's provenance, the hostile id is shown
    as text and ran nothing, and the page logged no error."""
    from playwright.sync_api import sync_playwright

    executable = _chromium()
    errors: list[str] = []
    dialogs: list[str] = []
    requests: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(story_page.as_uri())
            columns = page.locator("svg#chart g.col")
            assert columns.count() > 5
            assert page.locator("svg#chart rect").count() > columns.count()
            assert "records" in page.locator("#summary").inner_text()

            columns.last.click()
            shown = page.locator("#column").inner_text()
            assert "Versions" in shown and "Window at its end: 1 constraint, 2 reasoning" in shown

            page.fill("#search", "t1")
            rows = page.locator("#entries div")
            assert rows.count() == 2  # t1 and t1-again
            rows.first.click()
            prov = page.locator("#prov").inner_text()
            assert prov.startswith("t1 (reasoning): pruned")
            for what in ("APPENDED", "DEFERRED", "HELD BACK", "PRUNED"):
                assert what in prov
            assert "by pruner, reason stale" in prov

            page.fill("#search", "onerror")
            page.locator("#entries div").first.click()
            assert page.locator("#prov").inner_text().startswith(HOSTILE)
            assert page.title() == "quiesce: log history"

            artifacts = Path(os.environ.get("QUIESCE_ARTIFACTS", ROOT / "test-artifacts"))
            artifacts.mkdir(parents=True, exist_ok=True)
            page.fill("#search", "t1")
            page.locator("#entries div").first.click()
            page.screenshot(path=str(artifacts / "view.png"), full_page=True)
        finally:
            browser.close()
    assert errors == []
    assert dialogs == []
    assert {u.split(":", 1)[0] for u in requests} <= {"file"}
    assert (artifacts / "view.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
