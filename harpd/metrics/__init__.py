"""Prometheus metrics of harpd (issue #49): what an admin scrapes to trust and tune harp.

``registry`` holds every metric and the bounded label values they take;
``record`` is what the instrumented call sites call, one line each, mapping
whatever they know (a refusal's kind, a decision's reasons) onto those
bounded labels, never a job id, a user name or a path; ``state`` reads the
gauges that are a look at something (the store's size, the models' age)
when Prometheus scrapes; ``endpoint`` serves ``/metrics`` to the peers the
config allows.  The package sits low in the layers (pyproject.toml) so that
the daemon, the watcher, recovery and the poller can all record into it.
"""

# the scrape-time gauges join the registry whenever the package is imported: every name always exists
from harpd.metrics import state as _state  # noqa: F401
