"""The daemon's one scheduler: every periodic job of harpd runs on it.

The poller, the adopter, recovery, the watcher and the retrain trigger each
register their jobs on the scheduler the daemon gives them (one thread pool,
one place that stops); the daemon starts it once every service is built, so
no job runs before the parts it hands work to exist, and stops it first at
exit, so no job writes to a store being closed.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

__all__ = ["Scheduler"]


class Scheduler:
    """An APScheduler ``BackgroundScheduler`` (daemon threads), started and stopped by harpd."""

    def __init__(self) -> None:
        from apscheduler.schedulers.background import BackgroundScheduler  # not imported by a CLI that never runs it

        self.jobs: Any = BackgroundScheduler(daemon=True)

    def every(self, func: Callable[[], Any], seconds: float, *, id: str, name: str) -> Any:
        """Run ``func`` every ``seconds``, the first time at once: how a service registers its periodic job.

        One run at a time, missed runs folded into one (a tick that outlasts
        its interval is not queued up behind itself); the same ``id`` again
        replaces the job instead of adding a second.
        """
        return self.jobs.add_job(
            func,
            "interval",
            seconds=float(seconds),
            id=id,
            name=name,
            replace_existing=True,
            max_instances=1,
            coalesce=True,
            next_run_time=datetime.now(),
        )

    def add_job(self, func: Callable[[], Any], *args: Any, **kwargs: Any) -> Any:
        """APScheduler's own ``add_job``, for a job of another shape (the retrain check)."""
        return self.jobs.add_job(func, *args, **kwargs)

    def get_jobs(self) -> list[Any]:
        return list(self.jobs.get_jobs())

    def start(self) -> Scheduler:
        self.jobs.start()
        return self

    @property
    def running(self) -> bool:
        return bool(self.jobs.running)

    def shutdown(self) -> None:
        """Stop the jobs and wait for the running ones (a poll's commit) to finish."""
        if self.jobs.running:
            self.jobs.shutdown(wait=True)
