"""``open_shared_buffer``: one buffer shared by processes on many hosts, through PostgreSQL.

The package, layer by layer (each module opens with what it keeps true;
each layer calls only the layers below it): :mod:`.codec` (the wire forms
of requests, results and errors), :mod:`.sql` (the statements and the
control connection), :mod:`.member` (a member's state, local buffer and
reads), :mod:`.follow` (a replica applying the log), :mod:`.lease` (the
writer and member leases, horizons, failover), :mod:`.serve` (the
sequencer applying forwarded requests exactly once), :mod:`.buffer` (the
façade: :class:`SharedBuffer`, :func:`open_shared_buffer`). The local
buffer is driven only through the core's replication interface
(:class:`quiesce._core.replication.Replication`) and public names.

What it keeps true across processes (each member is one
``open_shared_buffer`` context; the database is the only channel):

1. One writer at a time. The process holding the buffer's *writer lease*
   (``quiesce_writer``, expiring on the database clock) is the *sequencer*:
   it runs every operation on its local :class:`RuntimeBuffer` exactly as a
   single-process buffer does and group-commits the records to
   :class:`PostgresLog`, each row stamped with the lease's epoch. The insert
   trigger refuses a row of any other epoch, so a sequencer that lost its
   lease (paused, cut off) cannot add a record after its successor's first:
   the log stays one gap-free history. It also refuses a row of the current
   epoch from any session but the sequencer's sink (a per-epoch writer
   token: the lease row holds the SHA-256 of a secret drawn at takeover), so
   a foreign client's row never reaches the log that replicas follow; a row
   that got past the fences anyway (the trigger disabled) is found at the
   sequencer's next batch (:class:`~quiesce._log.postgres.LogDiverged`), and
   it steps down and rebuilds from the log instead of retrying for good.
2. Replicas follow the log. Every other member applies each batch it reads
   (``seq`` > what it has) to its local buffer as one new version with the
   sequencer's version number (``replay`` continuing the log); it is woken by
   ``NOTIFY`` and also catches up on a slow poll and after every reconnect
   (a ``NOTIFY`` is never replayed). Pins and snapshot reads are always local
   and never touch the network. A replica never applies a removal itself.
3. Writes are forwarded. A replica's ``append``, ``mark_stale``, ``prune`` and
   ``edit`` become rows of ``quiesce_request``; the sequencer applies each
   exactly once, in arrival order, and stores its result *in the same
   transaction* as the records it produced: while it applies a request it
   holds its buffer's flush lock until the result is queued, so no other
   flush can commit the records alone. A request row that cannot be
   applied — undecodable, nested too deep, too long, an integer beyond 64
   bits, or one whose application raises anything — gets that error as its
   result (:class:`InvalidArgument` for the first kinds) and the sequencer
   serves the next one: no row can stop the pump. The call returns the same report (or
   raises the same error) the sequencer's buffer gave, after the replica has
   applied those records locally (read-your-writes). A crash before that
   commit leaves neither the records nor the result, and the next sequencer
   applies the request. The one flush that can commit a request's records
   before its result exists is the request's own (a prune or edit publishing
   a due removal inline); so every record a request's application appends
   carries its id (``detail["request_id"]``), and a sequencer that finds an
   unanswered request's records in the log — its predecessor died in that
   window — stores the result derived from them instead of applying it
   again: the same report, except that a ``version`` the request did not
   publish itself is the newest one before its first record, and an edit's
   ``deferred`` omits ids another request had staged already.
4. Grace periods span processes. Each member publishes a *horizon* with its
   member lease: ``min(oldest local pin, local head version)`` (the head term
   covers a reader about to pin a version the member has not yet seen marked).
   The sequencer applies a removal of grace version ``g`` only when its own
   oldest pin and the smallest horizon among members with live leases are both
   ``>= g``: it reads the horizons on every heartbeat, and re-checks them
   inside the removal intent's own transaction, under an advisory lock that
   a member's registration also takes (a removal that fails the re-check is
   requeued, not published). A member joins with horizon 0 (holding every
   removal back) before it reads the log. A member whose lease expired is
   excluded. Its reads stop first: every read of a snapshot checks the
   member's own deadline (monotonic clock: last successful renewal *sent* +
   0.75 lease), independent of the heartbeat task and of any database call
   in flight, and raises :class:`LeaseLost` past it; the database keeps the
   lease until that renewal's execution + the whole lease, so a removal that
   stopped waiting for the member is published at least a quarter lease
   after its last read. Snapshots pinned before a loss stay void for good,
   and ``snapshot()`` raises until the member has re-joined (renewed, then
   caught up to the log: what was removed meanwhile is applied before it
   serves a read again). ``lease_lost_times`` records the deadlines, when
   reads stopped.
5. Failover. When the lease expires (the sequencer died, paused or was cut
   off), a replica takes it with epoch + 1, reads the log to its end, attaches
   the sink and serves, including requests the old sequencer had not
   answered. Nothing a paused holder keeps open holds the takeover back: the
   take waits at most a quarter lease for a lock, and when it cannot get
   one, ends the expired holder's sessions that are inside a transaction
   (every session of a member carries an ``application_name`` derived from
   its holder name); the sink's ``idle_in_transaction_session_timeout`` (half
   a lease) ends a batch left open even with no successor (a session
   stalled inside a ``COPY`` is not idle: only the successor ends that). A
   demoted sequencer drops what was not durable and rebuilds its local
   buffer from the log.

Leases live on the database clock (``now()``); a process never compares its
clock with another's. Every wait is bounded: a write that gets no answer
within ``timeout`` raises :class:`SharedWriteTimeout` (which says the request
may still be applied).

What does *not* hold across processes: a sequencer's own writes are
acknowledged when applied locally and durable only after ``flush()`` (as with
any sink; a forwarded write is durable when it returns); a forwarded request
that timed out may still be applied later (once).

Threads: each member has three psycopg connections (the sink, a control
connection for leases, members and requests, and a listener), all used from
worker threads (``anyio.to_thread``), so it runs on asyncio and trio alike.
"""

from .buffer import SharedBuffer as SharedBuffer
from .buffer import open_shared_buffer as open_shared_buffer
from .codec import MAX_REQUEST_CHARS as MAX_REQUEST_CHARS
from .codec import REQUEST_KEY as REQUEST_KEY
from .member import LeaseLost as LeaseLost
from .member import SharedStats as SharedStats
from .member import SharedWriteTimeout as SharedWriteTimeout

__all__ = ["LeaseLost", "SharedBuffer", "SharedStats", "SharedWriteTimeout", "open_shared_buffer"]
