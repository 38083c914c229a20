"""``harp report``: what was allocated, what was used, what harp saved.

Reads the store (imported history and jobs harp saw alike) and prints a
100-column table, or writes CSV, JSON or one self-contained HTML page.
Users see only their own jobs; root and members of ``server.admin_group``
see everyone's, because job names and usage are not everyone's business.

Whoever can open the store (root, as harpd leaves it) reads it directly;
everyone else gets the same report from harpd's ``report`` operation, which
runs the same code (harpd.report.build) scoped by the kernel's word on who
is asking.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from harpd import access
from harpd.cli.main import CliError, no_store_no_daemon, open_store, settings_of, store_problem
from harpd.protocol import REPORT_FORMATS, REPORT_GROUPINGS

if TYPE_CHECKING:  # imported where a report is built: `harp report --help` stays quick
    from harpd.config import HarpSettings
    from harpd.report.window import Window

NAME = "report"
HELP = "accounting report: allocated vs used, efficiency, failures, what harp saved"


#: options whose value may start with "-" (-S -5d), as sacct's getopt reads them (harpd.cli.main)
DASH_VALUES = ("-S", "--since", "--starttime", "-E", "--until", "--endtime")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--by", choices=REPORT_GROUPINGS, default="user", help="group rows by this (default: user)")
    p.add_argument(
        "-S",
        "--since",
        "--starttime",
        dest="since",
        metavar="TIME",
        help="jobs that ended at or after TIME: ISO date/time, a span back (7d, 12h, 2w), sacct's forms"
        " (now-7days, today, midnight, noon, 0501, 05/01/24), or 'all'"
        " (default: [report] default_window_days ago)",
    )
    p.add_argument(
        "-E",
        "--until",
        "--endtime",
        dest="until",
        metavar="TIME",
        help="jobs that ended before TIME, in the same forms (default: now)",
    )
    p.add_argument(
        "-u",
        "--user",
        dest="only_user",
        metavar="NAME[,NAME]",
        help="only these users' jobs (admins; others see only their own)",
    )
    p.add_argument("-A", "--account", metavar="NAME[,NAME]", help="only jobs of these accounts")
    p.add_argument("-r", "--partition", metavar="NAME[,NAME]", help="only jobs of these partitions")
    p.add_argument(
        "--source",
        metavar="NAME[,NAME]",
        help="only jobs from these sources (a cluster, or the file stem of an imported trace);"
        " rows keep sources apart by default",
    )
    p.add_argument("--format", choices=REPORT_FORMATS, default="table", help="output format (default: table)")
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="write to FILE instead of standard output (needed for html on a terminal)",
    )
    p.add_argument(
        "--top",
        type=int,
        default=None,
        metavar="N",
        help="rows shown in table/html (default 20 / 50; 0 = all); csv/json always hold all",
    )
    p.add_argument("--db", metavar="PATH", help="store to read (default: [store] path of the config)")
    p.add_argument(
        "--daemon",
        action="store_true",
        help="ask harpd even if this user can open the store (the default when they cannot)",
    )
    p.add_argument(
        "--timeout", type=float, default=120.0, metavar="S", help="seconds to wait for harpd's report (default 120)"
    )


# ------------------------------------------------------------------ identity


def user_name(uid: int) -> str:
    name = access.user_of(uid)
    if name is None:
        raise CliError(f"uid {uid} has no user name on this machine; cannot tell which jobs are yours")
    return name


def is_admin(uid: int, admin_group: str | None) -> bool:
    """harp's admin rule (harpd.access, as harpd applies it) for this process."""
    try:
        admin_gid = access.resolve_group(admin_group)
    except ValueError:
        admin_gid = None  # a group that does not exist has no members
    gids = access.groups_of(access.user_of(uid), os.getgid()) | set(os.getgroups())
    return access.is_admin(uid, gids, admin_gid)


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

# a whole-site CSV/JSON can be large; harpd's answer is bounded all the same
MAX_REPORT_ANSWER = 512 << 20


def run(args: argparse.Namespace) -> int:
    from harpd.cli.ask import Unreachable
    from harpd.report.build import window_of

    if args.top is not None and args.top < 0:
        raise CliError(f"--top {args.top}: must be 0 (all) or a positive number of rows")
    if args.timeout <= 0:
        raise CliError(f"--timeout {args.timeout:g}: must be a positive number of seconds")
    if args.daemon and args.db:
        raise CliError("--daemon asks harpd, which reads its own store; drop --db or --daemon")
    for option, value in (
        ("--user", args.only_user),
        ("--account", args.account),
        ("--partition", args.partition),
        ("--source", args.source),
    ):
        if value is not None and not _names(value):
            raise CliError(f"{option} {value!r}: no name given; give one or more names separated by commas")
    if args.format == "html" and args.output in (None, "-") and sys.stdout.isatty():
        raise CliError("--format html writes a file; add -o report.html")
    settings = settings_of(args)
    try:
        window = window_of(settings, args.since, args.until)  # bad dates fail here, before anything is read
    except ValueError as exc:
        raise CliError(str(exc)) from None

    db = Path(args.db) if args.db else settings.store.path
    if args.daemon:
        try:
            text = _from_daemon(args)
        except Unreachable as exc:
            raise CliError(f"{exc}; start harpd, or drop --daemon to read the store {db}") from None
    elif args.db or store_problem(db) is None:
        text = _from_store(args, settings, window, db)
    else:
        # the store is root's (as the systemd unit leaves it): harpd reads it for us
        try:
            text = _from_daemon(args)
        except Unreachable as exc:
            raise CliError(no_store_no_daemon(str(store_problem(db, hint=False)), exc)) from None
    write_output(text, args.output)
    if args.output not in (None, "-"):
        print(f"harp: wrote {args.format} report to {args.output}", file=sys.stderr)
    return 0


def _names(text: str | None) -> tuple[str, ...]:
    from harpd.report.build import names_of

    return names_of(text)


def _from_daemon(args: argparse.Namespace) -> str:
    """The report harpd builds from its own store, scoped to this user unless an admin."""
    from harpd.cli.ask import ask

    message = {
        "op": "report",
        "by": args.by,
        "since": args.since,
        "until": args.until,
        "user": args.only_user,
        "account": args.account,
        "partition": args.partition,
        "source": args.source,
        "format": args.format,
        "top": args.top,
    }
    answer = ask(
        args, {k: v for k, v in message.items() if v is not None}, args.timeout, max_answer=MAX_REPORT_ANSWER
    )  # Unreachable: the caller says what else to try
    text = answer.get("text")
    if not isinstance(text, str):
        raise CliError("harpd's report answer has no text; is harpd older than this harp?")
    return text


def _from_store(args: argparse.Namespace, settings: HarpSettings, window: Window, db: Path) -> str:
    """The report read straight from the store (root, admins, or a store of one's own)."""
    from harpd.report import build
    from harpd.store import StoreError

    uid = os.getuid()
    admin_group = settings.server.admin_group
    admin = is_admin(uid, admin_group)
    try:
        user = build.resolve_scope(admin, "" if admin else user_name(uid), args.only_user, admin_group)
    except build.ScopeError as exc:
        raise CliError(str(exc)) from None
    problem = store_problem(db)
    if problem is not None:
        raise CliError(problem)
    store = open_store(db)
    try:
        filters = build.Filters(
            accounts=_names(args.account), partitions=_names(args.partition), sources=_names(args.source)
        )
        report = build.build(
            store, settings, by=args.by, window=window, user=user, source=str(db), filters=filters, personal=not admin
        )
    except StoreError as exc:
        raise CliError(str(exc)) from None
    finally:
        store.close()
    return build.render(report, args.format, args.top)
