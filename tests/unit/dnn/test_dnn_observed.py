"""Observed GPU memory peaks from harpd's store feed the next plan of the same setup (#47).

A run's decision (its ``explain.dnn``: signature and chosen configuration) and
its Slurm record (``used_gpumem_mb`` per GPU, from sacct's gres/gpumem) are
joined: a completed run's peak replaces the formula for that configuration, a
run out of GPU memory rules that configuration out, anything else teaches nothing.
"""

from __future__ import annotations

import pytest

from harpd.cli.status_cmd import gpu_memory_lines
from harpd.dnn.observed import (
    GPU_OOM_FRACTION,
    DnnDecided,
    gpu_memory_view,
    observations_from_store,
    ran_out_of_gpu_memory,
)
from harpd.dnn.plan import plan_dnn_job
from harpd.protocol import Decision, Resources
from harpd.records import JobRecord, Outcome
from harpd.store import Store

LINE = "#HARP dnn params=1.5e9 layers=48 hidden=1600 heads=25 seq_len=1024 micro_batch=8 attention=flash"
UID = 1000


@pytest.fixture
def store(tmp_path):
    s = Store.open(tmp_path / "harp.db")
    yield s
    s.close()


def _plan(site, store=None, uid=UID, line=LINE):
    observed = None if store is None else (lambda sig: observations_from_store(store, uid, sig))
    p = plan_dnn_job([line], {}, None, site, observed=observed)
    assert p.error is None
    return p


def _ran(store, job_id, plan, *, uid=UID, outcome=Outcome.COMPLETED, peak_gib=None, gpus=None):
    """A run of ``plan``'s choice as harpd stores it: the registration with its decision, then Slurm's record."""
    chosen = plan.explain["dnn"]["chosen"]
    decision = {"changes": [c.model_dump() for c in plan.changes], "explain": plan.explain, "model": "zero-dnn"}
    store.add_submission(
        job_id,
        uid,
        "u",
        {"harp_lines": [LINE]},
        Resources(),
        Resources(),
        (None if decision is None else Decision.model_validate(decision)),
    )
    store.insert_jobs(
        [
            JobRecord(
                job_id=job_id,
                user="u",
                outcome=outcome,
                alloc_gpus=chosen["n_gpus"] if gpus is None else gpus,
                used_gpumem_mb=None if peak_gib is None else peak_gib * 1024,
            )
        ]
    )


def _config(p):
    c = p.explain["dnn"]["chosen"]
    return c["gpu_type"], c["n_gpus"], c["zero"]


def test_the_next_job_gets_the_larger_of_the_formula_and_the_peak(site, store):
    first = _plan(site, store)
    chosen = first.explain["dnn"]["chosen"]
    assert chosen["need_source"] == "formula"
    est, cap = chosen["need_gib"], chosen["capacity_gib"]
    high = (est + cap / 1.1) / 2  # above the estimate, still fitting with the margin
    assert est < high * 1.1 < cap
    _ran(store, "11", first, peak_gib=high)
    (obs,) = observations_from_store(store, UID, first.explain["dnn"]["signature"])
    assert obs.peak_bytes == pytest.approx(high * 2**30) and not obs.oom
    again = _plan(site, store).explain["dnn"]["chosen"]
    assert (again["gpu_type"], again["n_gpus"], again["zero"]) == _config(first)
    assert again["need_source"] == "observed peak of 1 run(s)"
    assert again["need_gib"] == pytest.approx(high * 1.1, abs=0.01)  # the site's margin is 10%


def test_a_peak_below_the_formula_does_not_lower_the_need(site, store):
    first = _plan(site, store)
    est = first.explain["dnn"]["chosen"]["need_gib"]
    _ran(store, "12", first, peak_gib=est / 2)
    again = _plan(site, store).explain["dnn"]["chosen"]
    assert again["need_gib"] == est and again["need_source"] == "formula, above the observed peak of 1 run(s)"


def test_a_peak_above_the_gpu_moves_the_next_job_to_a_larger_configuration(site, store):
    first = _plan(site, store)
    cap = first.explain["dnn"]["chosen"]["capacity_gib"]
    _ran(store, "21", first, peak_gib=cap * 0.95)  # completed, but with the margin it no longer fits
    again = _plan(site, store)
    assert _config(again) != _config(first)
    assert again.explain["dnn"]["chosen"]["need_source"] == "formula"  # a configuration not yet run


def test_out_of_gpu_memory_never_gets_the_same_configuration(site, store):
    auto = LINE + " zero=auto"
    seen = []
    for n in range(3):
        p = _plan(site, store, line=auto)
        seen.append(_config(p))
        cap = p.explain["dnn"]["chosen"]["capacity_gib"]
        _ran(store, f"3{n}", p, outcome=Outcome.FAILED, peak_gib=cap * GPU_OOM_FRACTION)
        obs = observations_from_store(store, UID, p.explain["dnn"]["signature"])
        assert obs[0].oom and obs[0].peak_bytes == pytest.approx(cap * 2**30)
    # each run out of GPU memory moved the next job on: never the same configuration, never fewer GPUs
    assert len(set(seen)) == 3
    assert [c[1] for c in seen] == sorted(c[1] for c in seen) and seen[1][1] > seen[0][1]
    assert (
        "out of GPU memory in another configuration"
        in _plan(site, store, line=auto).explain["dnn"]["chosen"]["need_source"]
    )


def test_out_of_gpu_memory_with_nothing_larger_leaves_the_job_with_the_reason(site, store):
    """At ZeRO 0 more GPUs hold as much each: the OOM rules them out too, and the plan says what could help."""
    first = _plan(site, store)  # the line's default stage, 0
    assert first.explain["dnn"]["chosen"]["zero"] == 0
    _ran(store, "35", first, outcome=Outcome.FAILED, peak_gib=first.explain["dnn"]["chosen"]["capacity_gib"])
    again = plan_dnn_job([LINE], {}, None, site, observed=lambda sig: observations_from_store(store, UID, sig))
    assert again.changes == [] and again.error.startswith("no configured GPU fits")
    assert "zero=auto" in again.error


def test_what_teaches_nothing(site, store):
    first = _plan(site, store)
    sig = first.explain["dnn"]["signature"]
    cap = first.explain["dnn"]["chosen"]["capacity_gib"]
    _ran(store, "41", first, outcome=Outcome.FAILED, peak_gib=cap * 0.5)  # failed for another reason
    _ran(store, "42", first, outcome=Outcome.TIMEOUT, peak_gib=cap * 0.2)  # killed: never usage
    _ran(store, "43", first, peak_gib=1.0, uid=2000)  # another user's run
    _ran(store, "44", first, peak_gib=1.0, gpus=first.explain["dnn"]["chosen"]["n_gpus"] + 1)  # ran elsewhere
    _ran(store, "45", first)  # no gres/gpumem: the site does not gather GPU usage
    other = _plan(site, line=LINE.replace("micro_batch=8", "micro_batch=4"))
    _ran(store, "46", other, peak_gib=1.0)  # another setup
    store.add_submission(
        "47",
        UID,
        "u",
        {},
        Resources(),
        Resources(),
        Decision.model_validate({"changes": [], "explain": {"dnn": {"error": "x"}}}),
    )
    store.add_submission("48", UID, "u", {}, Resources(), Resources(), None)
    assert observations_from_store(store, UID, sig) == ()
    assert _plan(site, store).explain == first.explain


def test_decision_json_that_is_not_a_dnn_plan():
    assert DnnDecided.from_decision(None) is None
    assert DnnDecided.from_decision({"explain": "x"}) is None
    assert (
        DnnDecided.from_decision({"explain": {"dnn": {"signature": "s", "chosen": {"n_gpus": "2", "zero": 0}}}}) is None
    )
    d = DnnDecided.from_decision({"explain": {"dnn": {"signature": "s", "chosen": {"n_gpus": 2, "zero": 1}}}})
    assert d is not None and (d.n_gpus, d.zero, d.capacity_gib) == (2, 1, None)


def test_oom_needs_a_failure_and_a_full_gpu():
    rec = JobRecord(job_id="1", outcome=Outcome.FAILED, used_gpumem_mb=0.9 * 80 * 1024)
    assert ran_out_of_gpu_memory(rec, 80.0)
    assert not ran_out_of_gpu_memory(rec, 100.0)
    assert not ran_out_of_gpu_memory(rec, None)
    rec.outcome = Outcome.COMPLETED
    assert not ran_out_of_gpu_memory(rec, 80.0)


def test_status_shows_estimate_against_observed(site):
    p = _plan(site)
    decision = {"changes": [c.model_dump() for c in p.changes], "explain": p.explain}
    chosen = p.explain["dnn"]["chosen"]
    rec = JobRecord(job_id="5", outcome=Outcome.COMPLETED, used_gpumem_mb=14486.0)
    view = gpu_memory_view(decision, rec)
    assert view is not None and view.observed_gib == 14.15 and view.estimate_gib == chosen["need_gib"]
    (line,) = gpu_memory_lines(view.to_dict())
    assert f"estimate {chosen['need_gib']:.2f} GiB per GPU" in line and "observed peak 14.15 GiB" in line
    none = gpu_memory_view(decision, JobRecord(job_id="5", outcome=Outcome.COMPLETED))
    assert none is not None and "Slurm recorded no gres/gpumem" in gpu_memory_lines(none.to_dict())[0]
    oom = JobRecord(job_id="6", outcome=Outcome.FAILED, used_gpumem_mb=chosen["capacity_gib"] * 1024)
    assert "out of GPU memory" in gpu_memory_lines(gpu_memory_view(decision, oom).to_dict())[0]
    assert gpu_memory_view({"changes": []}, rec) is None and gpu_memory_lines(None) == []


class _NoHistory:
    """The history predictor the router wraps, deciding nothing (the GPU plan is what is tested)."""

    name = "none"

    def decide(self, job, user, uid, now=None, *, dry_run=False):
        from harpd.protocol import Decision

        return Decision(changes=[], model=None, explain={})

    def template_of(self, job, user):
        return None


def test_the_daemon_predictor_reads_the_users_own_peaks(site, store):
    """harpd's DnnRoutingPredictor looks the peaks up in its store, for the submitting uid only."""
    from harpd.config import HarpSettings
    from harpd.dnn.predictor import DnnRoutingPredictor
    from harpd.protocol import JobRequest

    auto = LINE + " zero=auto"
    first = _plan(site, store, line=auto)
    cap = first.explain["dnn"]["chosen"]["capacity_gib"]
    _ran(store, "51", first, outcome=Outcome.FAILED, peak_gib=cap)
    router = DnnRoutingPredictor(_NoHistory(), HarpSettings(dnn=site), store=store)
    job = JobRequest(harp_lines=[auto])
    mine = router.decide(job, "u", UID).explain["dnn"]["chosen"]
    theirs = router.decide(job, "v", 2000).explain["dnn"]["chosen"]
    assert (theirs["gpu_type"], theirs["n_gpus"], theirs["zero"]) == _config(first)
    assert (mine["gpu_type"], mine["n_gpus"], mine["zero"]) != _config(first)
