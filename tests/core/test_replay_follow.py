"""Following a log: ``replay`` continues a buffer's log batch by batch (what
a replica of a shared buffer does), and ends in exactly the state a replay
of the whole log gives. Sync core, no event loop."""

from __future__ import annotations

import random

import pytest

from _workload import Workload, random_op, state
from quiesce import Buffer
from quiesce._core.replay import replay


@pytest.mark.parametrize("seed", range(8))
def test_batches_replay_to_the_same_state(seed: int) -> None:
    """A seeded random workload's log, cut into random batches and replayed
    one batch at a time into a live buffer (readers pinned between batches),
    equals the whole log replayed at once; _check() passes after each batch
    and every pinned reader still sees its version."""
    rng = random.Random(seed)
    source = Buffer()
    work = Workload(source)
    for _ in range(300):
        work.run(random_op(rng))
    work.release_all()
    source.apply_due()
    records = list(source.log)
    whole = Buffer()
    replay(whole, records)
    follower = Buffer()
    follower._st.grace_floor = -1  # a replica never applies a removal itself
    pinned = []
    i = 0
    while i < len(records):
        j = min(len(records), i + rng.randint(1, 25))
        with follower._st.write_lock:
            replay(follower, records[i:j])
        follower._check()
        snap = follower.snapshot().__enter__()
        pinned.append((snap, snap.version, [e.id for e in snap]))
        i = j
    for snap, version, ids in pinned:
        assert (snap.version, [e.id for e in snap]) == (version, ids)
        snap.__exit__(None, None, None)
    assert not follower.has_due()
    follower._st.grace_floor = None
    follower._check(expect_no_pins=True)
    assert state(follower) == state(whole)
    assert follower.version == source.version
