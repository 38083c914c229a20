"""``harp reload``: have harpd load its champion models from the store again.

The models a retrain just saved, or ones an admin put back by hand, take
effect without a restart; harpd also rebuilds its live history from the
store.  ``systemctl reload harpd`` (SIGHUP) does the same but answers
nothing; this command prints what harpd loaded.

Exit 0 when harpd reloaded (also when it found no model to load); 1 when
it refused (not an admin), failed or is not running; 2 on a usage error.
"""

from __future__ import annotations

import argparse
import json

from harpd.cli.ask import add_admin_arguments, ask_admin

NAME = "reload"
HELP = "load the champion models from the store again, without a restart (admins)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_admin_arguments(p, 600.0, "harpd replays the live history from the store")


def run(args: argparse.Namespace) -> int:
    answer = ask_admin(args, "reload", args.timeout)
    if args.format == "json":
        print(json.dumps(answer, indent=2, sort_keys=True))
        return 0
    loaded = answer.get("result") or {}
    models = [f"{res} {m.get('name')} ({m.get('path')})" for res, m in loaded.items() if isinstance(m, dict)]
    if models:
        print("harpd reloaded: " + ", ".join(models))
    else:
        print(
            "harpd reloaded: no model loaded (none trained yet, or unusable: see harpd's log); "
            "`harp retrain` trains them"
        )
    return 0
