"""Reference rules of ``harp replay --bounds``: what they see, and that they cut where they should."""

from __future__ import annotations

import numpy as np
import pytest
from replay_helpers import rec

from harpd.replay.bounds import allocations, causal_max, clairvoyant_local, clairvoyant_quantile
from harpd.replay.dataset import prepare
from harpd.replay.engine import ReplayConfig, run


def _rec(*args, **kw):
    return rec(*args, cpus=1, **kw)


def _two_users():
    """u1 asks 10x what it uses, one job at a time; u2 uses all it asks (censored)."""
    recs = []
    for i in range(10):
        recs.append(_rec(i, i * 1000, 100 + i, 1000, user="u1"))
        recs.append(_rec(100 + i, i * 1000 + 1, 1000, 1000, user="u2", cens=True))
    return prepare(recs, "time", keep_templates=True)


def test_clairvoyant_quantile_cuts_the_overasker_only():
    p = _two_users()
    a = clairvoyant_quantile(p, 0.9)
    u1 = p.template == p.template[np.argmin(p.need)]
    assert np.all(np.isnan(a[~u1]))  # censored runs: their need is unknown, the request stands
    # the 90th percentile of 100..109, rounded up to a run that happened ("higher")
    assert np.all(a[u1] == pytest.approx(109.0))


def test_causal_rule_never_sees_unfinished_jobs():
    # three runs submitted together: none had finished when the others were submitted
    recs = [_rec(i, i, 100, 1000) for i in range(3)] + [_rec(3 + i, 10_000 + i, 100, 1000) for i in range(2)]
    p = prepare(recs, "time", keep_templates=True)
    a = causal_max(p)
    assert np.all(np.isnan(a[:3]))
    assert a[3] == pytest.approx(110.0) and a[4] == pytest.approx(110.0)


def test_local_rule_excludes_the_job_itself():
    recs = [_rec(i, i * 1000, 100, 1000) for i in range(4)] + [_rec(4, 4000, 800, 1000)]
    p = prepare(recs, "time", keep_templates=True)
    a = clairvoyant_local(p)
    assert a[4] == pytest.approx(110.0)  # its neighbours used 100: the rule misses it, as it should
    assert a[0] == pytest.approx(880.0)  # job 4 is within five runs of job 0


def test_bounds_need_templates_and_requests():
    recs = [_rec(i, i * 1000, 100, 1000) for i in range(6)]
    with pytest.raises(ValueError, match="keep_templates"):
        clairvoyant_quantile(prepare(recs, "time"), 0.9)
    assert set(allocations(prepare(recs, "time", keep_templates=True))) == {
        "clairvoyant-q90",
        "clairvoyant-q95",
        "clairvoyant-local",
        "causal-max5",
    }


def test_replay_adds_bound_rows_against_the_users():
    p = _two_users()
    res = run(p, ReplayConfig(models=("request",), bounds=True))
    rows = {m.model: m for m in res.metrics}
    assert {"bound:clairvoyant-q95", "bound:causal-max5"} <= set(rows)
    q = rows["bound:clairvoyant-q90"]
    assert q.over_vs_request is not None and q.over_vs_request < 0.2
    assert q.under_rate == 0.0 and q.consumed_vs_request == pytest.approx(1.0)
