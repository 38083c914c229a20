"""How many runs of a rule harp waits for, as docs/workflows.md says.

Under soft limits (a privileged harpd that extends what it cut) a rule's time
is cut from its first finished run: a run that needs more is extended, never
killed.  Under hard limits time waits for ``predict.min_history`` runs, and
only where the site lets harp cut there at all (``predict.hard_cut_gain``,
0 by default: a kill costs the queue more than the cut saves).  Memory is
sized by the task rule (``harpd.predict.task_memory``) from the rule's first
run, whatever the limits: its own runs, or a share of its own request.
"""

from __future__ import annotations

import pytest

from harpd.config import HarpSettings
from harpd.predict.live import ModelPredictor
from harpd.store import Store
from tests.unit.predict.test_workflow_rules import _changes, _runs, _task


@pytest.mark.parametrize("n_runs", [1, 3, 4])
@pytest.mark.parametrize("soft", [True, False])
def test_time_is_cut_after_one_run_under_soft_limits_and_after_min_history_under_hard(tmp_path, soft, n_runs) -> None:
    settings = HarpSettings(store={"path": str(tmp_path / "h.db")}, predict={"min_history": 4, "hard_cut_gain": 1.0})
    with Store.open(settings.store.path) as st:
        st.insert_jobs(_runs("work", n_runs, used_s=40.0, rss_mb=179.0))
        d = ModelPredictor(settings, store=st, soft_limits=soft).decide(_task("work"), "alice", 1000)
    ch = _changes(d)
    assert ("time" in ch) == (soft or n_runs >= 4), (soft, n_runs, d.explain)
    assert "mem" in ch, (soft, n_runs, d.explain)  # the task rule needs no min_history
    if not soft and n_runs < 4:
        assert f"cold start: {n_runs} of 4 runs" in d.explain["time"]["reason"]


def test_under_hard_limits_time_is_kept_by_default(tmp_path) -> None:
    settings = HarpSettings(store={"path": str(tmp_path / "h.db")}, predict={"min_history": 4})
    with Store.open(settings.store.path) as st:
        st.insert_jobs(_runs("work", 6, used_s=40.0, rss_mb=179.0))
        d = ModelPredictor(settings, store=st, soft_limits=False).decide(_task("work"), "alice", 1000)
    assert "time" not in _changes(d), d.explain
    assert "hard_cut_gain" in d.explain["time"]["reason"]
