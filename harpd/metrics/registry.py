"""Every harpd metric, its name and its label values, in one place.

One ``CollectorRegistry`` of harp's own (not prometheus_client's global one,
which a library imported into harpd could fill with names of its own):
``endpoint`` serves it, the dashboard (etc/grafana-harp.json) queries its
names and tests/unit/metrics/test_dashboard.py checks they exist.

Labels are chosen from the fixed sets below (``record`` maps anything else
to ``other``), so the number of series is bounded whatever the jobs are.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.process_collector import ProcessCollector

__all__ = [
    "REGISTRY",
    "RESOURCES",
    "DECISION_OUTCOMES",
    "DECISION_REASONS",
    "EXTENSION_OUTCOMES",
    "EXTENSION_REASONS",
    "RECOVERY_OUTCOMES",
    "REFUSAL_REASONS",
    "OTHER",
]

OTHER = "other"

#: what a decision sizes (``all``: the whole request, when harpd could not decide at all)
RESOURCES = ("time", "mem", "cpus", "gpus", "layout", "all")
DECISION_OUTCOMES = ("changed", "kept", "refused")
#: why, in classes (``record.reason_class`` reads the decision's explanation)
DECISION_REASONS = (
    "model",  # changed: a trained model's bound
    "rule",  # changed: the program's own runs, a workflow task's type, the DNN planner
    "no_model",  # kept: no trained model and no history rule applied
    "cold_start",  # kept: too few runs of this program (or none with its usage recorded)
    "near_request",  # kept: the bound (rounded) reaches the request
    "no_request",  # kept: nothing asked to size
    "restored",  # kept: a recent run hit its limit or failed (after harp lowered it)
    "user_budget",  # kept: this user's jobs were extended too often
    "options",  # kept: --deadline, --time-min, --signal ... (time_options)
    "policy",  # kept: a setting says so (allow_shrink, hard_cut_gain, one CPU)
    "error",  # kept or refused: harpd failed to decide (predictor, store)
    OTHER,
)
EXTENSION_OUTCOMES = ("made", "refused")
EXTENSION_REASONS = ("near_limit", "slurm_refused", "job_ended", OTHER)
RECOVERY_OUTCOMES = ("requeued", "resubmitted", "gave_up", "left_to_manager")
#: refusals at harpd's doors (``RefusalLog``) and of its operations (``Handlers``)
REFUSAL_REASONS = (
    "busy",  # every worker slot taken
    "quota",  # too many connections waiting (one peer, one user or all), or a user past the decisions kept
    "no_credential",  # no MUNGE credential and request in time
    "bad_credential",  # munged refused the credential
    "too_large",  # request over server.max_request_bytes
    "not_owner",  # a registration or progress report for a job the caller does not own
    "not_admin",  # an admin operation from a non-admin
    "bad_request",  # a registration or progress report harpd could not accept (stale token, unknown job, ...)
    "metrics_peer",  # a scrape from a peer metrics.allow does not name
    OTHER,
)

REGISTRY = CollectorRegistry(auto_describe=True)
# harpd's own CPU, memory and open files (process_*): a leak shows before the OOM killer does
ProcessCollector(registry=REGISTRY)

DECISIONS = Counter(
    "harp_decisions",
    "Decisions per resource: changed, kept as asked, or refused (harpd could not decide), by reason class",
    ["resource", "outcome", "reason"],
    registry=REGISTRY,
)
LIMITS_LOWERED = Counter(
    "harp_limits_lowered", "Limits harp set below the user's request, per resource", ["resource"], registry=REGISTRY
)
CORE_HOURS_TAKEN_OFF = Counter(
    "harp_core_hours_taken_off",
    "Core-hours harp took off the requests it changed (cores x time asked minus cores x time given)",
    registry=REGISTRY,
)
GB_HOURS_TAKEN_OFF = Counter(
    "harp_gb_hours_taken_off",
    "GB-hours of memory harp took off the requests it changed (memory x time asked minus given)",
    registry=REGISTRY,
)
EXTENSIONS = Counter(
    "harp_extensions",
    "Time-limit extensions of running jobs harp shortened (soft limits): made, or refused by reason",
    ["outcome", "reason"],
    registry=REGISTRY,
)
RECOVERIES = Counter(
    "harp_recoveries",
    "Recovery of jobs that ran out of time or memory, by outcome",
    ["outcome"],
    registry=REGISTRY,
)
REFUSALS = Counter("harp_refusals", "Requests and connections harpd refused, by reason", ["reason"], registry=REGISTRY)
PREDICT_LATENCY = Histogram(
    "harp_predict_latency_seconds",
    "Time harpd took to answer a predict request (waiting for its turn included)",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
    registry=REGISTRY,
)
WATCH_TICK = Histogram(
    "harp_watch_tick_seconds",
    "How long one watcher tick (queue listing, extensions, re-sizes) took; compare with harp_watch_lead_seconds",
    buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0),
    registry=REGISTRY,
)
WATCH_LEAD = Gauge(
    "harp_watch_lead_seconds",
    "watch.margin_s: how long before harp's limit the watcher extends a job; a tick must end well within it",
    registry=REGISTRY,
)
WATCH_INTERVAL = Gauge("harp_watch_interval_seconds", "watch.interval_s: time between watcher ticks", registry=REGISTRY)
POLLS = Counter("harp_polls", "sacct polls of the ingest poller, by result", ["result"], registry=REGISTRY)
POLL_RESULTS = ("ok", "failed")

# every series of a small label set exists from the start at 0, so a rate or an increase is defined
# from the first scrape on (a series that appears at its first event hides that event from increase())
for _res in ("time", "mem", "cpus"):
    LIMITS_LOWERED.labels(_res)
for _why in EXTENSION_REASONS[1:-1]:
    EXTENSIONS.labels("refused", _why)
EXTENSIONS.labels("made", "near_limit")
for _outcome in RECOVERY_OUTCOMES:
    RECOVERIES.labels(_outcome)
for _why in REFUSAL_REASONS:
    REFUSALS.labels(_why)
for _result in POLL_RESULTS:
    POLLS.labels(_result)
