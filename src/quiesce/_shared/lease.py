"""Leases and members: who is the sequencer, and whose readers hold removals back.

What it keeps true: one writer at a time (the writer lease, epoch + 1 at
each takeover, on the database clock); a member's horizon is published
with its member lease, and the sequencer applies a removal of grace
``g`` only when every live member's horizon is ``>= g``; a member whose
lease expired stops reading first (its deadline, on its own monotonic
clock, is a quarter lease before the database's) and re-joins by catching
up before it serves a read again; a demoted sequencer drops what was not
durable (and says so at its next ``flush()``) and rebuilds from the log.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import socket
import time
from functools import partial
from typing import Any

import anyio
import anyio.abc

from .._core.errors import LogWriteError
from .._core.records import EscalationKind
from .._runtime import RuntimeBuffer
from .follow import _Following
from .member import _REPLICA, _SEQUENCER
from .sql import (
    _END_EXPIRED_HOLDER,
    _FLOOR,
    _HOLDERS,
    _LIVE_MEMBERS,
    _RENEW_LEASE,
    _TAKE_LEASE,
    _UPSERT_MEMBER,
)


class _Leases(_Following):
    """The writer and member leases (the layer above :class:`~.follow._Following`)."""

    def _horizon(self) -> int:
        buf = self.local
        oldest = buf.oldest_pin()
        head = buf.version
        return head if oldest is None else min(oldest, head)

    def _member_info(self) -> str:
        buf = self._local
        readers: list[list[Any]] = []
        if buf is not None:
            # ages on the local buffer's pin clock (the monotonic one)
            pins = sorted(buf.stats().readers, key=lambda r: r.version)
            readers = [[r.task, r.version, round(r.age, 3)] for r in pins[:5]]
        info = {"pid": os.getpid(), "host": socket.gethostname(), "role": self._role}
        return json.dumps({**info, "readers": readers})

    async def _heartbeat_member(self, horizon: int | None = None) -> None:
        """Renew this member's lease, publishing its horizon. A renewal that
        returns after the old deadline first counts the loss (no read was
        served past the deadline, whoever noticed). After a loss it re-joins:
        it catches up to the log read after this renewal committed (every
        removal published while it was excluded is applied), then voids every
        snapshot pinned so far and serves reads again."""
        sent = time.monotonic()
        await self._ctl_run(
            _UPSERT_MEMBER,
            {
                "b": self._buffer_id,
                "m": self.member_id,
                "i": self._incarnation,
                "l": self._lease,
                "hz": self._horizon() if horizon is None else horizon,
                "a": len(self._local.log) if self._local is not None else 0,
                "info": self._member_info(),
            },
        )
        old = self._member_valid_until
        if time.monotonic() > old:
            self._note_lease_lost(old)
        self._member_valid_until = sent + self._lease * 0.75
        if self._lease_lost is not None:
            # Re-joined: published a horizon again, so the others wait for our
            # readers from now on; what they removed meanwhile is read first.
            if self._role == _REPLICA and self._local is not None:
                await self._catch_up()
            with self._lease_guard:
                self._void_before = max(self._void_before, time.monotonic())
                self._lease_lost = None

    async def _try_take_lease(self) -> bool:
        """Take the writer lease if it is free or expired. On success: read the
        log to its end, attach the sink stamped with the new epoch, serve."""
        async with self._role_lock:
            if self._role == _SEQUENCER or self._closing:
                return False
            sent = time.monotonic()
            token = secrets.token_hex(32)
            take = {
                "b": self._buffer_id,
                "h": self._holder,
                "l": self._lease,
                "t": hashlib.sha256(token.encode()).digest(),
            }
            try:
                # never wait long on a lock: a paused holder's open batch may
                # hold the lease row; end its sessions, then try again
                rows = await self._db(
                    partial(self._ctl.run, lock_timeout=self._lease / 4), _TAKE_LEASE, take
                )
            except LogWriteError:
                await self._ctl_run(_END_EXPIRED_HOLDER, {"b": self._buffer_id, "h": self._holder})
                raise
            if not rows:
                return False
            epoch = int(rows[0][0])
            self._writer_valid_until = sent + self._lease * 0.75
            if epoch > 1 or self._epoch:
                self.failovers += 1
            self._epoch = epoch
            await self._catch_up()
            sink = self._sink
            repl = self._repl
            assert sink is not None and repl is not None
            # (the detached buffer never writes to the sink meanwhile)
            sink.writer_epoch = epoch
            sink.writer_token = token
            # the sequencer writes checkpoints (every checkpoint_every
            # records) for members and successors to start from; grace
            # floor 0 until the members' horizons are read
            repl.attach(sink, epoch=epoch, checkpoint_every=self._checkpoint_every, grace_floor=0)
            self._role = _SEQUENCER
            # streams the log leaves open were fed by the old sequencer (or
            # through it): no one writes them any more (stream.py)
            self._abort_streams("stream interrupted: the sequencer failed over mid-stream")
        await self._refresh_floor()
        self._wake_pump.set()
        return True

    async def _demote(self, why: str) -> None:
        """Lost the writer lease: drop what is not durable and become a replica
        rebuilt from the log."""
        async with self._role_lock:
            if self._role != _SEQUENCER:
                return
            self._role = _REPLICA
            assert self._repl is not None
            self._lost_records += self._repl.detach()  # told by the next flush()
            with self._results_lock:
                self._results.clear()  # their records die with the local buffer
            self._needs_rebuild = True
            try:
                await self._rebuild()
            except LogWriteError:
                pass  # the pump retries; the diverged buffer is never followed

    async def _heartbeat_loop(self) -> None:
        interval = min(self._lease / 4, 0.05 if self._lease <= 2 else self._lease / 8)
        last_member = 0.0
        last_horizon: int | None = None
        while True:
            await anyio.sleep(interval)
            now = time.monotonic()
            if now > self._member_valid_until:
                self._note_lease_lost(self._member_valid_until)
            try:
                horizon = self._horizon()
                if horizon != last_horizon or now - last_member >= self._lease / 4:
                    await self._heartbeat_member()
                    last_member, last_horizon = now, horizon
                if self._role == _SEQUENCER:
                    if now - (self._writer_valid_until - self._lease * 0.75) >= self._lease / 4:
                        sent = time.monotonic()
                        rows = await self._ctl_run(
                            _RENEW_LEASE,
                            {
                                "b": self._buffer_id,
                                "e": self._epoch,
                                "h": self._holder,
                                "l": self._lease,
                            },
                        )
                        if not rows:
                            await self._demote("the lease was taken")
                            continue
                        self._writer_valid_until = sent + self._lease * 0.75
                    await self._refresh_floor()
                elif await self._try_take_lease():
                    continue
            except LogWriteError:
                pass  # stats().connected says so; the lease clocks decide
            if self._role == _SEQUENCER and time.monotonic() > self._writer_valid_until:
                await self._demote("the lease could not be renewed in time")

    async def _refresh_floor(self) -> None:
        rows = await self._ctl_run(_FLOOR, {"b": self._buffer_id, "m": self.member_id})
        floor, members = rows[0] if rows else (None, 0)
        self._members = int(members)
        self._floor = None if floor is None else int(floor)
        buf = self.local
        if self._role != _SEQUENCER:
            return
        assert self._repl is not None
        self._repl.set_grace_floor(self._floor)  # signals a removal due now
        await self._escalate_holders(buf)
        await self._abort_orphan_streams()

    async def _abort_orphan_streams(self) -> None:
        """Abort the forwarded streams whose member left or lost its member
        lease (it will not write them any more): the text applied stays,
        marked stale. One query, only while another member's stream is open."""
        owners = {s[0] for s in self._streams_served.values()} - {self.member_id}
        if not owners:
            return
        rows = await self._ctl_run(_LIVE_MEMBERS, {"b": self._buffer_id})
        gone = owners - {str(r[0]) for r in rows}
        if gone and self._role == _SEQUENCER:
            self._abort_streams(
                "stream interrupted: its member left or lost its lease mid-stream", gone
            )

    async def _escalate_holders(self, buf: RuntimeBuffer) -> None:
        """A removal held back longer than ``max_pin_age`` by another member's
        reader is escalated once (READER_PINNED), naming the member, process
        and task."""
        grace = buf.next_grace()
        if grace is None or self._max_pin_age is None or self._floor is None:
            return
        if self._floor >= grace:
            return
        rows = await self._ctl_run(
            _HOLDERS, {"b": self._buffer_id, "m": self.member_id, "g": grace}
        )
        for member_id, horizon, info_text in rows:
            info = json.loads(info_text or "{}")
            for task, version, age in info.get("readers", []):
                if age <= self._max_pin_age or (member_id, version) in self._held_alarmed:
                    continue
                self._held_alarmed.add((member_id, version))
                buf.escalate(
                    EscalationKind.READER_PINNED,
                    f"reader {task!r} of member {member_id} (pid {info.get('pid')} on "
                    f"{info.get('host')}) has pinned version {version} for {age:.1f}s, "
                    f"holding back removals from grace version {grace}",
                    data={
                        "member": member_id,
                        "pid": info.get("pid"),
                        "host": info.get("host"),
                        "task": task,
                        "version": version,
                        "age": age,
                        "horizon": horizon,
                        "grace": grace,
                    },
                )
