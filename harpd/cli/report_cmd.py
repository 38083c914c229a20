"""``harp report``: what was allocated, what was used, what harp saved.

Reads the store (imported history and jobs harp saw alike) and prints a
100-column table, or writes CSV, JSON or one self-contained HTML page.
Users see only their own jobs; root and members of ``server.admin_group``
see everyone's, because job names and usage are not everyone's business.
"""

from __future__ import annotations

import argparse
import grp
import os
import pwd
import sys
import tempfile
from pathlib import Path

from harpd.cli.main import CliError

NAME = "report"
HELP = "accounting report: allocated vs used, efficiency, failures, what harp saved"

FORMATS = ("table", "csv", "json", "html")
GROUPINGS = ("user", "account", "partition", "signature")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--by", choices=GROUPINGS, default="user", help="group rows by this (default: user)")
    p.add_argument("--since", help="jobs that ended at or after: ISO date/time or span back (7d, 12h, 2w), or 'all'"
                   " (default: [report] default_window_days ago)")
    p.add_argument("--until", help="jobs that ended before: ISO date/time or span back (default: now)")
    p.add_argument("--user", dest="only_user", metavar="NAME", help="only this user's jobs (admins; others see only their own)")
    p.add_argument("--format", choices=FORMATS, default="table", help="output format (default: table)")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of standard output (needed for html on a terminal)")
    p.add_argument("--top", type=int, default=None, metavar="N",
                   help="rows shown in table/html (default 20 / 50; 0 = all); csv/json always hold all")
    p.add_argument("--db", metavar="PATH", help="store to read (default: [store] path of the config)")


# ------------------------------------------------------------------ identity


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        raise CliError(f"uid {uid} has no user name on this machine; cannot tell which jobs are yours") from None


def is_admin(uid: int, admin_group: str | None) -> bool:
    """Root, or a member (primary or supplementary) of ``admin_group``."""
    if uid == 0:
        return True
    if not admin_group:
        return False
    try:
        g = grp.getgrnam(admin_group)
    except KeyError:
        return False
    if g.gr_gid == os.getgid() or g.gr_gid in os.getgroups():
        return True
    try:
        return pwd.getpwuid(uid).pw_name in g.gr_mem
    except KeyError:
        return False


def scope_user(uid: int, admin_group: str | None, wanted: str | None) -> str | None:
    """The user whose jobs to report, or None for everyone (admins only)."""
    if is_admin(uid, admin_group):
        return wanted
    me = user_name(uid)
    if wanted is not None and wanted != me:
        raise CliError(
            f"only admins (root or group {admin_group or '<server.admin_group unset>'}) may report on other users;"
            f" drop --user to see your own jobs ({me})"
        )
    return me


# ------------------------------------------------------------------ output


def write_output(text: str, path: str | None) -> None:
    """Write to ``path`` atomically (a failed write never leaves half a file), or stdout."""
    if path is None or path == "-":
        sys.stdout.write(text)
        return
    target = Path(path)
    if target.is_dir():
        raise CliError(f"{target} is a directory; give a file name to -o")
    parent = target.parent if str(target.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=parent)
    except OSError as exc:
        raise CliError(f"cannot write {target} ({exc.strerror}); check that {parent} exists and is writable") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise CliError(f"cannot write {target} ({exc.strerror})") from None


# ------------------------------------------------------------------ run


def run(args: argparse.Namespace) -> int:
    from harpd.config import ConfigError, load_settings
    from harpd.report import scoreboard
    from harpd.report.aggregate import build_report
    from harpd.report.fmt import when
    from harpd.report.source import load, store_span
    from harpd.report.window import parse_window
    from harpd.store import Store, StoreError

    if args.top is not None and args.top < 0:
        raise CliError(f"--top {args.top}: must be 0 (all) or a positive number of rows")
    if args.format == "html" and args.output in (None, "-") and sys.stdout.isatty():
        raise CliError("--format html writes a file; add -o report.html")
    try:
        settings = load_settings(getattr(args, "config", None))
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    try:
        window = parse_window(args.since, args.until, settings.report.default_window_days)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    uid = os.getuid()
    user = scope_user(uid, settings.server.admin_group, args.only_user)

    db = Path(args.db) if args.db else settings.store.path
    if not db.exists():
        raise CliError(f"no store at {db}; run `harp import` or start harpd first, or pass --db PATH")
    if db.is_dir():
        raise CliError(f"{db} is a directory; pass the store file to --db")
    try:
        store = Store.open(db)
    except StoreError as exc:
        raise CliError(str(exc)) from None
    try:
        loaded = load(store, args.by, window, user)
        board = scoreboard.build(
            store, loaded.jobs, loaded.models, loaded.originals,
            alpha_time=settings.predict.alpha_time, alpha_mem=settings.predict.alpha_mem,
            max_attempts=settings.recovery.max_attempts,
        )
        notes = list(loaded.notes)
        if not len(loaded.jobs.get("outcome", [])):
            total, first, last = store_span(store, user)
            if total:
                notes.append(
                    f"the store holds {total:,} finished job(s){' of ' + user if user else ''} that ended "
                    f"{when(first)} to {when(last)}; widen the window with --since (e.g. --since all)"
                )
            else:
                notes.append("the store holds no finished jobs" + (f" of {user}" if user else "") + " yet")
    except StoreError as exc:
        raise CliError(str(exc)) from None
    finally:
        store.close()

    report = build_report(
        loaded.jobs,
        by=args.by,
        window=window,
        scope="all users" if user is None else f"user {user}",
        originals=loaded.originals,
        recovered=loaded.recovered,
        chains=loaded.chains,
        scoreboard=board,
        targets={"time": 1 - settings.predict.alpha_time, "mem": 1 - settings.predict.alpha_mem},
    )
    report.notes.extend(notes)
    report.source = str(db)

    if args.format == "table":
        from harpd.report.render_table import render

        text = render(report, top=20 if args.top is None else args.top)
    elif args.format == "csv":
        from harpd.report.render_csv_json import render_csv

        text = render_csv(report)
    elif args.format == "json":
        from harpd.report.render_csv_json import render_json

        text = render_json(report)
    else:
        from harpd.report.render_html import render as render_html

        text = render_html(report, top=50 if args.top is None else args.top)
    write_output(text, args.output)
    if args.output not in (None, "-"):
        print(f"harp: wrote {args.format} report to {args.output}", file=sys.stderr)
    return 0
