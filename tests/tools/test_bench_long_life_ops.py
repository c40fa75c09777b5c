"""The long_life section's per-operation figures measure what they name.

Never checks speed (the numbers depend on the machine): it checks what a
figure keeps out of its window and what it leaves behind.
"""

from __future__ import annotations

import gc
from dataclasses import replace

from quiesce.bench.lib import SectionResult
from quiesce.bench.long_life_ops import _refused_edit
from quiesce.bench.long_life_workload import QUICK_LL

TINY_EDIT = replace(QUICK_LL, edit_m=20, edit_pool=3_000)


class TestRefusedEditFigure:
    def test_the_fold_and_a_full_collection_are_measured_outside_the_window(self) -> None:
        """The figure refuses its edit while another thread marks, and reports
        the two waits that are not the edit's on their own: the fold of the
        appended ids into the mark index (done before the window, so the
        first timed mark does not pay it) and one full collection of the
        pool's heap (the window runs with the collector off)."""
        res = SectionResult("long_life")
        _refused_edit(TINY_EDIT, res)
        extra = res.extra["refused_edit"]
        assert extra["m"] == 20
        assert 0 < extra["marks"] <= 3_000
        assert extra["fold_seconds"] > 0 and extra["gc_full_seconds"] > 0
        assert extra["worst_mark_seconds"] > 0 and extra["edit_seconds"] > 0
        (goal,) = res.goals
        assert goal.key == "ll_refused_edit_wait"
        assert goal.value == extra["worst_mark_seconds"] * 1e3

    def test_the_collector_is_left_as_it_was(self) -> None:
        """With the collector on before, it is on after; off stays off."""
        assert gc.isenabled()
        _refused_edit(TINY_EDIT, SectionResult("long_life"))
        assert gc.isenabled()
        gc.disable()
        try:
            _refused_edit(TINY_EDIT, SectionResult("long_life"))
            assert not gc.isenabled()
        finally:
            gc.enable()
