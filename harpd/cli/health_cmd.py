"""``harp health``: is harpd up, and what may it do on this cluster.

The answer of harpd's ``health`` operation in words: version, store, models,
the time-limits mode (soft or hard, and why), what the site's accounting
keeps for recovery (``AccountingStoreFlags``: script and environment) and
how many recovery attempts wait on a Slurm that does not answer, the
things the README tells admins to check.  Any user may ask.

Exit 0 when harpd answered; 1 when it is not reachable.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from harp_submit.units import fmt_time
from harpd.cli.ask import NotDone, Unreachable, ask
from harpd.cli.main import CliError

NAME = "health"
HELP = "is harpd up: store, models, soft or hard limits, and what recovery can do on this cluster"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--format", choices=("text", "json"), default="text", help="text (default), or json: harpd's answer as it came"
    )
    p.add_argument("--timeout", type=float, default=5.0, metavar="S", help="seconds to wait for harpd (default 5)")


def run(args: argparse.Namespace) -> int:
    if args.timeout <= 0:
        raise CliError(f"--timeout {args.timeout:g}: must be a positive number of seconds")
    try:
        answer = ask(args, {"op": "health"}, args.timeout)
    except Unreachable as exc:
        raise NotDone(str(exc)) from None
    if args.format == "json":
        print(json.dumps(answer, indent=2, sort_keys=True))
    else:
        print(render(answer), end="")
    return 0


def render(h: dict[str, Any]) -> str:
    """The human view of a health answer."""
    out = [
        f"harpd {h.get('version', '?')}: up {float(h.get('uptime_s') or 0):.0f} s",
        f"  store:       {h.get('store')}",
    ]
    models = h.get("models") or {}
    names = ", ".join(f"{res} {m.get('name')} ({m.get('n_train')} jobs)" for res, m in sorted(models.items()))
    out.append(f"  predictor:   {h.get('predictor')}" + (f"; models: {names}" if names else "; no trained model yet"))
    lim = h.get("limits") or {}
    if lim:
        out.append(f"  time limits: {lim.get('mode')} ({lim.get('why')})")
    acc = h.get("accounting") or {}
    if acc:
        out.append(f"  accounting:  AccountingStoreFlags={acc.get('flags') or '(none)'}")
        out.append(f"  recovery:    {acc.get('recovery')}")
    ingest = h.get("ingest") or {}
    if ingest:
        failing = (
            f"; {ingest.get('failures')} failed in a row: {ingest.get('last_error')}" if ingest.get("failures") else ""
        )
        out.append(f"  sacct polls: {ingest.get('polls')}{failing}")
    rec = h.get("recovery") or {}
    if rec:
        n = int(rec.get("waiting_on_slurm") or 0)
        line = f"  Slurm waits: {n} recovery attempt(s) waiting on Slurm"
        if n and rec.get("waiting_since"):
            line += f", the longest for {fmt_time(max(0, int(time.time() - float(rec['waiting_since']))))}"
            line += f": {rec.get('last_error')}"
        out.append(line)
    watch = h.get("watch") or {}
    if watch:
        tick = watch.get("last_tick_s")
        lead = float(watch.get("lead_s") or 0)
        if tick is None:
            out.append(f"  watcher:     no tick yet (lead {lead:g} s)")
        else:
            slow = "  SLOW: over half the lead, extensions may come late" if float(tick) > lead / 2 else ""
            out.append(
                f"  watcher:     last tick {float(tick):.2f} s for {watch.get('jobs')} jobs, lead {lead:g} s{slow}"
            )
    return "\n".join(out) + "\n"
