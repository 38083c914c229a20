"""One report, from a store to rendered text: the path `harp report` and harpd share.

An admin with access to the store runs this in the CLI; everyone else asks
harpd, whose ``report`` operation runs the very same function on the
daemon's store.  Who may see what is decided here too (``resolve_scope``),
so the two ways in cannot drift apart.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from harpd.predict.soft import SoftPolicy
from harpd.predict.soft_state import user_over_budget
from harpd.protocol import REPORT_FORMATS
from harpd.report import queue_figures as saved_queue
from harpd.report import scoreboard
from harpd.report.aggregate import Bookkeeping, Report, build_report
from harpd.report.fmt import compact, when
from harpd.report.gpu_memory import gpu_memory_rows
from harpd.report.source import Filters, load, store_span
from harpd.report.window import Window, parse_window
from harpd.store import Store

DEFAULT_TOP = {"table": 20, "html": 50}


class ScopeError(ValueError):
    """A report the caller may not see; the text is the one-line answer."""


def resolve_scope(admin: bool, me: str, wanted: str | None, admin_group: str | None) -> str | None:
    """The user whose jobs to report, or None for everyone (admins only).

    Job names and usage are not everyone's business: a user sees their own
    jobs, root and members of ``server.admin_group`` may see anyone's.
    """
    names = names_of(wanted)
    if admin:
        return ",".join(names) if names else None
    if any(n != me for n in names):
        raise ScopeError(
            f"only admins (root or group {admin_group or '<server.admin_group unset>'}) may report on other users;"
            f" drop --user to see your own jobs ({me})"
        )
    return me


def names_of(text: str | None) -> tuple[str, ...]:
    """sacct's comma lists (``-u alice,bob``): the names, blanks dropped, order kept."""
    if text is None:
        return ()
    return tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))


def window_of(settings: Any, since: str | None, until: str | None) -> Window:
    """``--since``/``--until`` as given; ValueError (one line) when unreadable."""
    return parse_window(since, until, settings.report.default_window_days)


def build(
    store: Store,
    settings: Any,
    *,
    by: str,
    window: Window,
    user: str | None,
    source: str,
    filters: Filters | None = None,
    personal: bool = False,
) -> Report:
    """The report of ``user``'s jobs (None: everyone's; a comma list: those users')
    that ended in ``window`` and pass ``filters`` (accounts, partitions, sources).

    ``personal``: an ordinary user's report of their own jobs: what harp saved
    them leads, and the model scoreboard (an admin's tool for choosing models,
    meaningless to a user) is left out.
    """
    users = names_of(user)
    filters = Filters(users=users) if filters is None else replace(filters, users=users)
    loaded = load(store, by, window, filters)
    board = (
        scoreboard.Scoreboard()
        if personal
        else scoreboard.build(
            store,
            loaded.jobs,
            loaded.models,
            loaded.originals,
            alpha_time=settings.predict.alpha_time,
            alpha_mem=settings.predict.alpha_mem,
            max_attempts=settings.recovery.max_attempts,
        )
    )
    notes = list(loaded.notes)
    if not len(loaded.jobs.get("outcome", [])):
        total, first, last = store_span(store, filters)
        of = f" {filters.describe()}" if filters.describe() else ""
        if total:
            notes.append(
                f"the store holds {total:,} finished job(s){of} that ended "
                f"{when(first)} to {when(last)}; widen the window with --since (e.g. --since all)"
            )
        else:
            notes.append(f"the store holds no finished jobs{of} yet")
    report = build_report(
        loaded.jobs,
        by=by,
        window=window,
        scope=_scope(filters),
        bookkeeping=Bookkeeping(loaded.originals, loaded.recovered, loaded.chains, loaded.extensions),
        scoreboard=board,
        targets={"time": 1 - settings.predict.alpha_time, "mem": 1 - settings.predict.alpha_mem},
    )
    if len(loaded.jobs.get("outcome", [])) and by in ("user", "account", "partition") and report.missing(by):
        field = report.missing(by)[0]
        other = "account" if by != "account" else "partition"
        notes.append(
            f"none of these jobs carry a {by} name (the export has no {field} field), so they form one row;"
            f" try --by {other}, or add {field} to sacct -o when exporting"
        )
    usage = report.missing("used_cpu_s", "used_mem_mb")
    if len(loaded.jobs.get("outcome", [])) and usage:
        notes.append(
            f"these jobs carry no {' or '.join(usage)}, so their use, efficiency and waste of "
            f"{'CPU' if 'TotalCPU' in usage else ''}{' and ' if len(usage) == 2 else ''}"
            f"{'memory' if 'MaxRSS' in usage else ''} are unknown; what the time limits reserved beyond the runs is "
            f"known: {compact(report.total['core_h_limit_unused'])} core-h (CPUs x (time limit - elapsed)). "
            f"Add {','.join(usage)} to sacct -o when exporting to see the rest"
        )
    notes += _not_cut(store, settings, users or _users_of(loaded.jobs))
    report.notes.extend(notes)
    report.personal = personal
    report.source = source
    # the queue panel: what `harp replay --schedule` left beside this store
    report.queue = saved_queue.load(saved_queue.path_beside(store.path)) or saved_queue.QueueFigures()
    report.gpu_memory = [r.to_dict() for r in gpu_memory_rows(store, window, filters)]
    return report


#: an admin report over everyone checks at most this many users against their extension budget
MAX_BUDGET_USERS = 2000


def _users_of(jobs: dict[str, Any]) -> tuple[str, ...]:
    names = dict.fromkeys(str(u) for u in jobs.get("user", []) if u)
    return tuple(names)[:MAX_BUDGET_USERS]


def _not_cut(store: Store, settings: Any, users: tuple[str, ...]) -> list[str]:
    """One note per user whose jobs harp no longer cuts: past their soft-limit extension budget."""
    if not settings.watch.soft_limits:
        return []
    budget = SoftPolicy.from_settings(settings.predict).user_extension_budget
    notes = []
    for user in users:
        over = user_over_budget(store, user, budget)
        if over is not None:
            extended, jobs = over
            notes.append(
                f"harp keeps {user}'s own time requests: {extended} of their last {jobs} harp-cut jobs "
                f"outgrew harp's limit (budget {budget:.0%}, predict.soft_user_extension_budget)"
            )
    return notes


def _scope(filters: Filters) -> str:
    """'all users', 'user alice', 'users alice, bob', with any other filter after it."""
    users = filters.users
    who = "all users" if not users else (f"user {users[0]}" if len(users) == 1 else f"users {', '.join(users)}")
    rest = filters.describe(users=False)
    return f"{who} {rest}" if rest else who


def render(report: Report, fmt: str, top: int | None = None) -> str:
    """The report as ``fmt``; ``top`` rows in table/html (None: their default, 0: all)."""
    if top is None:
        top = DEFAULT_TOP.get(fmt, 0)
    if fmt == "table":
        from harpd.report.render_table import render as render_table

        return render_table(report, top=top)
    if fmt == "csv":
        from harpd.report.render_csv_json import render_csv

        return render_csv(report)
    if fmt == "json":
        from harpd.report.render_csv_json import render_json

        return render_json(report)
    if fmt == "html":
        from harpd.report.render_html import render as render_html

        return render_html(report, top=top)
    raise ValueError(f"unknown report format {fmt!r}; expected one of {', '.join(REPORT_FORMATS)}")
