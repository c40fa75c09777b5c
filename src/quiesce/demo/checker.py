"""The demo's checker: the same observations and the same counts for both buffers.

What it keeps true: it sees a buffer only through a :class:`~.worlds.View`
(what a reader holds) and the head after every step, so quiesce and the
naive list are judged by one rule; it only reads, never changes a buffer.
"""

from __future__ import annotations

from collections.abc import Sequence

from quiesce import Entry, Policy

from .worlds import View

__all__ = ["FAILURES", "Checker", "Seen"]

#: What a reader saw at the start of a read: content hash and text by id,
#: and whether a reference in its view dangled already.
Seen = tuple[dict[str, str], bool, dict[str, str]]

FAILURES = (
    "torn reads",
    "dangling justifications",
    "lost prohibitions",
    "prune/re-admit cycles",
    "paraphrased constraints",
    "text changed mid-read",
)


class Checker:
    """Counts the seeds' five failures from what readers saw and what the head holds.

    * torn read — during one read (across a model call) an entry the reader
      had seen vanished or changed under it, or its view showed an entry
      citing something absent from that view (others' appends are allowed);
    * dangling justification — a live entry cites an entry that is not live;
    * lost prohibition — a negative result or prohibition left the window;
    * prune/re-admit cycle — content (by hash or key) that was removed came
      back into the window (a call and its result coming back count once);
    * paraphrased constraint — a constraint or instruction is no longer in
      the window verbatim;
    * text changed mid-read — during one read, the text of a message the
      reader had read (a streaming answer) changed under it.
    """

    def __init__(self, policy: Policy | None = None) -> None:
        self.policy = Policy() if policy is None else policy
        self.torn: list[str] = []
        self.text_changed: list[str] = []
        self.dangling: dict[tuple[str, str], int] = {}
        self.lost: dict[str, int] = {}
        self.readmitted: list[tuple[str, int]] = []
        self.paraphrased: dict[str, int] = {}
        self._prohibitions: dict[str, None] = {}
        self._constraints: dict[str, str] = {}
        self._removed_hashes: dict[str, str] = {}
        self._removed_keys: dict[str, str] = {}
        self._prev: dict[str, Entry] = {}
        self.readmitted_tokens = 0

    @staticmethod
    def _fingerprint(view: View) -> dict[str, str]:
        return {e.id: e.content_hash for e in view.entries()}

    @staticmethod
    def _dangling_in(view: View) -> bool:
        entries = view.entries()
        ids = {e.id for e in entries}
        return any(r not in ids for e in entries for r in e.refs)

    def begin_read(self, who: str, turn: int, view: View) -> Seen:
        """Start of a read that spans a model call: what the reader sees now
        (O(n): the content hashes and the texts, by reference)."""
        bodies = {e.id: e.body for e in view.entries()}
        return self._fingerprint(view), self._dangling_in(view), bodies

    def end_read(self, who: str, turn: int, seen: Seen, view: View) -> bool:
        """End of the read: was it torn? (An entry it had read vanished or
        changed under it, or a reference in its view began to dangle.) A
        text that changed under it is also counted on its own."""
        before, dangled, bodies = seen
        now = self._fingerprint(view)
        changed = [i for i, h in before.items() if now.get(i) != h]
        for i in changed:
            got = view.get(i)
            if got is not None and got.body != bodies[i]:
                self.text_changed.append(
                    f"t{turn} {who}: read {i} as {len(bodies[i].split())} words, "
                    f"it held {len(got.body.split())} by the end of the read"
                )
        if changed or (self._dangling_in(view) and not dangled):
            self.torn.append(f"t{turn} {who}: {len(changed)} entries vanished or changed mid-read")
            return True
        return False

    def after_step(self, head: Sequence[Entry], turn: int) -> None:
        cur = {e.id: e for e in head}
        prev = self._prev
        for i, e in prev.items():
            if i not in cur:
                self._removed_hashes[e.content_hash] = i
                if e.key is not None:
                    self._removed_keys[e.key] = i
        back: dict[str, Entry] = {}
        for i, e in cur.items():
            if i in prev:
                continue
            if e.content_hash in self._removed_hashes or (
                e.key is not None and e.key in self._removed_keys
            ):
                back[i] = e
                self.readmitted_tokens += len(e.body.split())
            if self.policy.is_immutable(e):
                self._constraints.setdefault(i, e.body)
            elif self.policy.protection(e) is not None:
                self._prohibitions[i] = None
        # One cycle per group that came back (a tool result comes back with its call).
        for i, e in back.items():
            if not any(r in back for r in e.refs):
                self.readmitted.append((i, turn))
        for e in cur.values():
            for r in e.refs:
                if r not in cur:
                    self.dangling.setdefault((e.id, r), turn)
        for i in self._prohibitions:
            if i not in cur:
                self.lost.setdefault(i, turn)
        for i, body in self._constraints.items():
            got = cur.get(i)
            if got is None or got.body != body:
                self.paraphrased.setdefault(i, turn)
        self._prev = cur

    def counts(self) -> dict[str, int]:
        return {
            "torn reads": len(self.torn),
            "dangling justifications": len(self.dangling),
            "lost prohibitions": len(self.lost),
            "prune/re-admit cycles": len(self.readmitted),
            "paraphrased constraints": len(self.paraphrased),
            "text changed mid-read": len(self.text_changed),
        }
