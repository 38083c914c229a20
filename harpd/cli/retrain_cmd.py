"""``harp retrain``: have harpd train its models on the store now, and show what it trained.

harpd retrains on its own too (every ``retrain.interval_s`` and after
``retrain.after_n_outcomes`` outcomes); this is for an admin who just
imported history or was told a model file is unusable.  The training runs
inside harpd, which then loads the new champions; this command asks and
waits, minutes on a big store (``--timeout``).

Exit 0 when at least one resource got models; 1 when harpd trained nothing
(its reason, e.g. too little history, is the one ``harp:`` line), refused
(not an admin) or is not running; 2 on a usage error.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from harpd.cli.ask import NotDone, add_admin_arguments, ask_admin

NAME = "retrain"
HELP = "train the models on the store now and load the champions (admins)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_admin_arguments(p, 1800.0, "training on a big store takes minutes")


def run(args: argparse.Namespace) -> int:
    answer = ask_admin(args, "retrain", args.timeout)
    result = answer.get("result") or {}
    resources = {k: v for k, v in result.items() if k != "loaded" and isinstance(v, dict)}
    trained = any(r.get("models") for r in resources.values())
    if args.format == "json":
        print(json.dumps(answer, indent=2, sort_keys=True))
    elif trained:
        sys.stdout.write(render(result))
    if not trained:
        reasons = "; ".join(f"{res}: {r.get('skipped') or 'no model'}" for res, r in resources.items())
        raise NotDone(f"harpd trained no model ({reasons or 'its answer names no resource'})")
    return 0


def render(result: dict[str, Any]) -> str:
    """Per resource: the models with their hold-out scores and the champion; then what harpd loaded."""
    out: list[str] = []
    for res, r in result.items():
        if res == "loaded" or not isinstance(r, dict):
            continue
        if not r.get("models"):
            out.append(f"{res}: not trained: {r.get('skipped') or 'no reason given'}")
            continue
        out.append(
            f"{res}: trained on {r.get('n_jobs', 0):,} jobs in {r.get('seconds', 0):.1f} s;"
            f" champion {r.get('champion') or '(none)'}"
        )
        out.append(f"    {'model':<14} {'score':>8} {'under-rate':>10} {'reserved/used':>13}")
        for m in r["models"]:
            score = m.get("score") or {}
            mark = "*" if m.get("champion") else " "
            out.append(
                f"  {mark} {m.get('name', '?'):<14} {_num(score.get('score'), '.3f'):>8}"
                f" {_num(score.get('under_rate'), '.1%'):>10} {_num(score.get('reserved_over_used'), '.2f'):>13}"
            )
    loaded = result.get("loaded")
    if isinstance(loaded, dict):
        names = ", ".join(f"{res} {m.get('name')}" for res, m in loaded.items() if isinstance(m, dict))
        out.append(f"harpd now predicts with: {names}" if names else "harpd loaded no model")
    return "\n".join(out) + "\n" if out else ""


def _num(value: Any, spec: str) -> str:
    return "-" if not isinstance(value, int | float) else format(value, spec)
