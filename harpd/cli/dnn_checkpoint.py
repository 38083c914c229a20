"""``harp dnn checkpoint KEY=VALUE ...``: a checkpoint schedule, denser early (COCI), against even Young/Daly.

Keys as on a ``#HARP checkpoint`` line: ``cost=`` (one checkpoint), ``horizon=``
(the run's work, required here), ``converge=`` (the loss curve's exponent k,
0 for time only), ``t0=``, ``rate=`` (interruptions per job-hour).  Without
``rate=`` the site's interruption hazard by job age comes from harpd's store
(node failures, preemptions and time-outs of finished jobs, ``--db`` or the
configured store).  Prints the checkpoint times and the even interval.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from harpd.cli.main import CliError, open_store, settings_of


def add_arguments(p: argparse.ArgumentParser, nargs: str) -> None:
    p.add_argument(
        "keys", nargs=nargs, metavar="KEY=VALUE", help="cost=2m horizon=48h [converge=0.5] [t0=30m] [rate=0.1]"
    )
    p.add_argument("--db", default=None, help="harpd's store for the site's interruption rate (default: configured)")
    p.add_argument("--format", choices=("table", "json"), default="table")


def _site_hazard(args: argparse.Namespace) -> Any:
    from harpd.dnn.checkpoint import hazard_from_jobs

    db = args.db or settings_of(args).store.path
    store = open_store(db)
    try:
        jobs = ((r.outcome.value, r.used_time_s) for r in store.iter_jobs(order=None) if r.used_time_s)
        return hazard_from_jobs(jobs)
    finally:
        store.close()


def run(args: argparse.Namespace) -> int:
    from harpd.dnn.checkpoint import (
        AGE_BINS_H,
        coci_schedule,
        constant_hazard,
        even_schedule,
        spec_from_tokens,
        young_daly,
    )
    from harpd.dnn.errors import DnnError

    if not args.keys:
        raise CliError("harp dnn checkpoint needs KEY=VALUE words, e.g. cost=2m horizon=48h converge=0.5")
    tokens: dict[str, str] = {}
    for w in args.keys:
        k, sep, v = w.partition("=")
        if not sep or not v:
            raise CliError(f"'{w}' is not KEY=VALUE (e.g. cost=2m)")
        tokens[k.lower()] = v
    try:
        spec = spec_from_tokens(tokens)
    except DnnError as exc:
        raise CliError(str(exc)) from None
    if spec.horizon_s is None:
        raise CliError("give horizon= (the run's training time, e.g. horizon=48h)")
    if spec.rate_per_h is not None:
        hazard, source = constant_hazard(spec.rate_per_h), f"rate={spec.rate_per_h:g}/h (given)"
    else:
        hazard = _site_hazard(args)
        if hazard.events == 0:
            raise CliError(
                "the store has no interrupted jobs (node failures, preemptions, time-outs) to "
                "estimate a rate from; give rate= (interruptions per job-hour)"
            )
        source = f"site: {hazard.events} interruptions in {hazard.hours:.0f} job-hours"
    sched = coci_schedule(spec.cost_s, hazard, spec.horizon_s, spec.converge, spec.t0_s)
    mean = hazard.mean or spec.rate_per_h or hazard.at(0)
    even = young_daly(spec.cost_s, mean)
    n_even = len(even_schedule(spec.cost_s, mean, spec.horizon_s))
    if args.format == "json":
        json.dump(
            {
                "checkpoints_s": [round(t, 1) for t in sched],
                "even_interval_s": round(even, 1),
                "even_checkpoints": n_even,
                "hazard_per_hour": list(hazard.per_hour),
                "age_bins_h": [b for b in AGE_BINS_H if b != float("inf")],
                "rate_source": source,
            },
            sys.stdout,
            indent=2,
        )
        print()
        return 0
    print(
        f"harp dnn checkpoint: {len(sched)} checkpoints over {spec.horizon_s / 3600:g}h (cost {spec.cost_s:g}s, "
        f"converge k={spec.converge:g}, {source}); even Young/Daly: every {even / 60:.0f} min ({n_even})"
    )
    prev = 0.0
    for i, t in enumerate(sched[:50]):
        print(f"  {i + 1:>3}  at {t / 3600:7.2f}h  (+{(t - prev) / 60:.0f} min)")
        prev = t
    if len(sched) > 50:
        print(f"  ... {len(sched) - 50} more, the last at {sched[-1] / 3600:.2f}h")
    return 0
