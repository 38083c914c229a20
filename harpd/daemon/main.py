"""``harpd``: the harp daemon, run in the foreground by systemd.

Start order is chosen so that every admin mistake shows up at start, as one
``harpd: ...`` line, before any user's sbatch depends on the daemon: config
(exit 2), then store and socket (exit 1), then READY=1 to systemd.

``build_handlers`` wires the parts, in this order:

0. the store's WAL checkpoints move to a thread of their own
   (``harpd.store.checkpoints``), off the requests' commits;
1. the Slurm backend; without one (no Slurm on this host) harpd still
   predicts, but registers no job (nothing can be verified), decisions carry no partition
   limits, and nothing is polled or recovered;
2. one cache of Slurm's partitions (scontrol at most once a minute) for the
   limits sent with each decision, the DNN planner, recovery's caps and the
   extender's;
3. the live predictor (champion models and the live history), wrapped by the
   DNN router that plans GPUs for ``#HARP dnn`` jobs;
4. the trainer, with the live predictor's reload after each training;
5. the outcome services (``build_services``), each built with what it
   needs and registering its periodic jobs on the daemon's one scheduler
   (``harpd.daemon.scheduler``), started once they all exist and stopped first
   at exit: the sacct poller, which stores each job's outcome, hands each
   poll's new outcomes to the live history (``ModelPredictor.learn``: the
   next decision has them; the predictor reads the store itself only when it
   loads) and then tells its listeners: recovery (resubmits what ran out),
   the watcher (re-sizes pending siblings) and the retrain trigger (counts
   outcomes; it trains at once, in the background, when the store has
   history but no model); the adopter (registers jobs that carry a
   decision's token but whose registration message was lost);
6. the watcher (``harpd.watch``), only when harpd may change other users'
   jobs (``privilege.detect``, decided once at start, shown in ``health``):
   it extends running jobs before harp's limit, re-sizes pending ones and feeds
   the live predictor's soft-policy state;
7. the socket operations, with the live predictor's retrain and reload and
   the trace importer as admin actions, its soft-policy state for health, and
   the poller, recovery and the watcher they report on or ask.

SIGHUP reloads the models, as ``harp reload`` (the admin ``reload`` operation) does.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from typing import Any, Protocol

from harp_submit import __version__
from harpd.access import resolve_group
from harpd.config import DEFAULT_CONFIG_PATH, ConfigError, HarpSettings, load_settings
from harpd.daemon.active_lock import StoreInUse
from harpd.daemon.active_lock import hold as hold_store
from harpd.daemon.adopt import Adopter
from harpd.daemon.handlers import AdminActions, Handlers, HealthSources, OutcomeServices
from harpd.daemon.heap import Settling, settle
from harpd.daemon.scheduler import Scheduler
from harpd.daemon.server import Server, ServerError, ServerLimits
from harpd.daemon.tcp_door import doors_for
from harpd.dnn.oom_escalation import OomPlanner
from harpd.dnn.predictor import DnnRoutingPredictor
from harpd.ingest.importer import import_file
from harpd.ingest.poller import Ingestor, watch_job
from harpd.metrics import endpoint as metrics_endpoint
from harpd.metrics import state as metrics_state
from harpd.predict.live import ModelPredictor, make_predictor
from harpd.recovery.machine import make as make_recovery
from harpd.recovery.site_accounting import read_site_accounting
from harpd.slurm import SlurmBackend, get_backend
from harpd.slurm.billing import cached_billing
from harpd.slurm.partitions import cached_partitions, limits_from_partitions
from harpd.store import Store, StoreError
from harpd.store.checkpoints import Checkpointer
from harpd.training.schedule import attach_retrain, train_in_background
from harpd.training.trainer import Trainer
from harpd.watch.privilege import Privilege
from harpd.watch.privilege import detect as detect_privilege
from harpd.watch.service import make as make_watch

log = logging.getLogger("harpd")

_JOURNAL_PRIORITY = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3, logging.CRITICAL: 2}


class _JournalFormatter(logging.Formatter):
    """``<N>`` prefixes let journald file each line under its syslog priority."""

    def format(self, record: logging.LogRecord) -> str:
        return f"<{_JOURNAL_PRIORITY.get(record.levelno, 6)}>" + super().format(record)


def setup_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if os.environ.get("JOURNAL_STREAM"):
        # journald adds the time and the unit; the prefix carries the level
        handler.setFormatter(_JournalFormatter("%(levelname)s %(name)s: %(message)s"))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # APScheduler logs every run of every job at INFO: only its problems, unless debugging
    logging.getLogger("apscheduler").setLevel(logging.DEBUG if level.lower() == "debug" else logging.WARNING)


def sd_notify(state: str) -> bool:
    """Tell systemd (Type=notify) about our state; a no-op outside systemd."""
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr:
        return False
    if addr.startswith("@"):
        addr = "\0" + addr[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.connect(addr)
            s.sendall(state.encode())
        return True
    except OSError as exc:
        log.warning("cannot notify systemd (%s): %s", state, exc)
        return False


def check_settings(settings: HarpSettings) -> None:
    """Checks pydantic cannot do alone (they need the system); ConfigError naming the key."""
    try:
        resolve_group(settings.server.admin_group)
    except ValueError as exc:
        raise ConfigError(f"invalid setting server.admin_group: {exc}; create the group or fix the name") from None
    sock = str(settings.server.socket)
    if not os.path.isabs(sock):
        raise ConfigError(f"invalid setting server.socket: {sock!r} must be an absolute path")
    if len(os.fsencode(sock)) > 107:
        raise ConfigError("invalid setting server.socket: longer than 107 bytes, the Unix socket limit")
    if not os.path.isabs(str(settings.store.path)):
        raise ConfigError(f"invalid setting store.path: {str(settings.store.path)!r} must be an absolute path")


#: how long a running thread keeps the GIL while another waits (Python's default is 5 ms)
GIL_SWITCH_S = 0.001


class Service(Protocol):
    """A part that runs beside the socket (the scheduler, the checkpoints, the metrics endpoint): stopped at exit."""

    def shutdown(self) -> None: ...


def build_handlers(settings: HarpSettings, store: Store) -> tuple[Handlers, list[Service]]:
    """The socket operations wired to every part (see the module docstring), plus services to stop later.

    Every part is built with what it needs; the daemon's one scheduler starts
    once they all are, and is the first thing stopped.
    """
    checkpoints = Checkpointer.start(store)
    scheduler = Scheduler()
    backend = slurm_backend(settings)
    partitions = None if backend is None else cached_partitions(backend)
    limits = None if partitions is None else limits_from_partitions(partitions)
    privilege = detect_privilege(settings, backend)
    live = _make_live(settings, store, backend, partitions, privilege)
    reloads = Settling(live)  # every reload is followed by a settled heap (``heap``)
    trainer = Trainer(reloads, store, settings)  # trains, then has the live predictor load the champions
    predictor = DnnRoutingPredictor(
        live, settings, partitions, None if backend is None else cached_billing(backend), store=store
    )
    outcomes = build_services(
        settings,
        store,
        backend,
        scheduler,
        trainer.retrain,
        privilege=privilege,
        predictor=predictor,
        partitions=partitions,
        live=live,
    )
    handlers = Handlers(
        store,
        settings,
        predictor,
        slurm=backend,
        partition_limits=limits,
        actions=AdminActions(retrain=trainer.retrain, reload=reloads.reload, importer=import_file),
        outcomes=outcomes,  # health reports on them; the jobs' end hook (op ending) asks recovery directly
        health=HealthSources(
            limits_mode=privilege.as_health(),
            soft_state=live.soft_state,
            accounting=None if backend is None else read_site_accounting(backend).as_health(),
        ),
    )
    log.info("predictor: %s", predictor.name)
    return handlers, [scheduler.start(), checkpoints]


def _make_live(
    settings: HarpSettings, store: Store, backend: SlurmBackend | None, partitions: Any, privilege: Privilege
) -> ModelPredictor:
    """The live predictor, on the daemon's one partitions cache; soft limits (bolder bounds) only when
    harpd can extend what it cut."""
    return make_predictor(
        settings=settings, store=store, backend=backend, partitions=partitions, soft_limits=privilege.soft_limits
    )


def slurm_backend(settings: HarpSettings) -> SlurmBackend | None:
    """The configured Slurm backend; None (and a warning) when Slurm cannot be used here."""
    try:
        return get_backend(settings)
    except Exception as exc:  # Slurm missing is not fatal: predictions still work
        log.warning("no Slurm backend (%s); no registrations (nothing to verify them with), no partition limits", exc)
        return None


def build_services(
    settings: HarpSettings,
    store: Store,
    backend: SlurmBackend | None,
    scheduler: Scheduler,
    retrain: Callable[[], Any],
    *,
    privilege: Privilege | None = None,
    predictor: Any = None,
    partitions: Any = None,
    live: ModelPredictor | None = None,
) -> OutcomeServices:
    """The sacct poller and the listeners of its outcomes (recovery, the watcher, the retrain trigger),
    each with its periodic jobs on ``scheduler`` (started by the caller once everything is built).

    ``live``: the live predictor (None: none).  With history in the store
    and no model loaded (``trained_on``), the first training starts at once,
    in the background (requests are answered meanwhile); its ``learn`` is
    given each poll's new outcomes as they are stored, so the next decision
    already has them; its soft-policy state is what the watcher feeds.
    """
    trained_on = None if live is None else live.trained_on
    soft_state = None if live is None else live.soft_state
    train_now = _first_training_due(store, trained_on)
    if backend is None:  # no Slurm: nothing is polled, recovered or watched
        log.warning("ingest disabled: no Slurm backend")
        if train_now:
            train_in_background(retrain)
        return OutcomeServices(ingestor=None, recovery=None, watch=None)
    recovery = make_recovery(
        settings=settings,
        store=store,
        backend=backend,
        watch=functools.partial(watch_job, store),  # a job requeued in place is polled for its next run
        partitions=partitions,
        gpu_planner=OomPlanner(store, settings, partitions),  # a GPU out-of-memory's larger configuration
    )  # None: off
    watch = None
    if privilege is not None:
        watch = make_watch(
            settings=settings,
            store=store,
            backend=backend,
            privilege=privilege,
            predictor=predictor,
            partitions=partitions,
            soft_state=soft_state,
        )  # None: nothing to watch (unprivileged, off)
    # retrain every retrain.interval_s, after retrain.after_n_outcomes outcomes, and
    # retrain.first_after_s after new outcomes while the models are missing or young
    count_outcome = attach_retrain(
        scheduler,
        retrain,
        settings.retrain,
        trained_on=trained_on,
        train_now=train_now,
        history_size=store.count_jobs,
    )
    # the listeners hear from the first poll on, which may announce outcomes a killed
    # predecessor left unannounced: each run's outcome reaches recovery once
    ingestor = Ingestor(
        store,
        backend,
        settings,
        listeners=[part.on_outcome for part in (recovery, watch) if part is not None] + [count_outcome],
        learners=[] if live is None else [live.learn],
    )
    ingestor.schedule(scheduler)
    # jobs whose registration message was lost are found by their decision token
    Adopter(store, backend).schedule(scheduler, settings.ingest.poll_interval_s)
    if recovery is not None:
        recovery.schedule(scheduler)
    if watch is not None:
        watch.schedule(scheduler)
    return OutcomeServices(ingestor=ingestor, recovery=recovery, watch=watch)


def start_metrics(settings: HarpSettings, store: Store, *, polling: bool) -> list[Service]:
    """The ``/metrics`` endpoint (harpd.metrics) when ``metrics.enabled``, with the store it reads gauges of.

    OSError when its address cannot be bound: like the socket, a mistake the admin sees at start.
    """
    if not settings.metrics.enabled:
        return []
    metrics_state.install(
        metrics_state.Sources(store_path=str(settings.store.path), champion=store.champion, polling=polling)
    )
    return [metrics_endpoint.start(settings.metrics.listen, settings.metrics.allow)]


def _first_training_due(store: Store, trained_on: Callable[[], int | None] | None) -> bool:
    """No model loaded but finished jobs in the store (``harp import``): train at start."""
    if trained_on is None or trained_on() is not None:
        return False
    n = store.count_jobs()
    if n:
        log.info("no trained model and %d finished jobs in the store: training now, in the background", n)
    return n > 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="harpd", description="harp daemon (runs in the foreground)")
    ap.add_argument("--config", help=f"config file (default: $HARP_CONFIG or {DEFAULT_CONFIG_PATH})")
    ap.add_argument("--check-config", action="store_true", help="validate the config and exit (0: valid, 2: invalid)")
    ap.add_argument("--log-level", choices=["debug", "info", "warning", "error"], help="override server.log_level")
    ap.add_argument(
        "--standby",
        action="store_true",
        help="when another harpd holds the store, wait and take over when it stops (instead of exit 1)",
    )
    ap.add_argument("--version", action="version", version=f"harpd {__version__}")
    args = ap.parse_args(argv)

    try:
        settings = load_settings(args.config)
        check_settings(settings)
    except ConfigError as exc:
        print(f"harpd: {exc}", file=sys.stderr)
        return 2
    if args.check_config:
        where = args.config or os.environ.get("HARP_CONFIG") or DEFAULT_CONFIG_PATH
        print(f"harpd: config OK ({where})")
        return 0

    setup_logging(args.log_level or settings.server.log_level)
    # a request's thread back from a read or a write waits for the GIL until the
    # thread holding it (a decision, a history load) is asked to let go: at
    # Python's default of 5 ms that wait alone was a request's whole budget
    sys.setswitchinterval(GIL_SWITCH_S)
    try:  # first: its errors name the store's directory and file problems best
        store = Store.open(settings.store.path, busy_timeout_s=settings.store.busy_timeout_s)
    except StoreError as exc:
        print(f"harpd: {exc}", file=sys.stderr)
        return 1
    try:  # then one active harpd per store (harpd.daemon.active_lock); a standby waits here
        active = hold_store(settings.store.path, standby=args.standby, on_wait=lambda line: sd_notify(f"STATUS={line}"))
    except StoreInUse as exc:
        print(f"harpd: {exc}", file=sys.stderr)
        store.close()
        return 1
    services: list[Service] = []
    # bind before starting anything else: a second harpd must fail here, before
    # it polls Slurm beside the first one; early clients wait in the backlog
    try:
        server = Server(
            settings.server.socket,
            None,
            mode=settings.server.socket_mode,
            doors=doors_for(settings.server.listen, settings.munge.socket),
            limits=ServerLimits.from_settings(settings.server),
        )
    except ServerError as exc:
        print(f"harpd: {exc}", file=sys.stderr)
        _stop(services, store, None)
        return 1
    try:
        server.bind()
    except ServerError as exc:
        print(f"harpd: {exc}", file=sys.stderr)
        _stop(services, store, server)
        return 1
    try:
        handlers, services = build_handlers(settings, store)
    except Exception:
        log.exception("cannot start")
        _stop(services, store, server)
        return 1
    try:
        services.extend(start_metrics(settings, store, polling=handlers.ingestor is not None))
    except OSError as exc:
        print(
            f"harpd: cannot serve metrics on {settings.metrics.listen} ({exc.strerror or exc}); "
            "change metrics.listen or free the port",
            file=sys.stderr,
        )
        _stop(services, store, server)
        return 1
    server.handlers = handlers
    settle()  # the models and history loaded: out of the collector's later scans (``heap``)

    def on_stop(signum: int, frame: object) -> None:
        log.info("%s: shutting down", signal.Signals(signum).name)
        server.shutdown()

    def on_hup(signum: int, frame: object) -> None:
        threading.Thread(target=_reload, args=(handlers.reload_action,), name="harpd-reload", daemon=True).start()

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    signal.signal(signal.SIGHUP, on_hup)

    log.info("harpd %s ready (store %s, pid %d)", __version__, settings.store.path, os.getpid())
    where = " and ".join([str(settings.server.socket), *settings.server.listen])
    sd_notify(f"READY=1\nSTATUS=serving on {where}\nMAINPID={os.getpid()}")
    try:
        server.serve_forever()
    finally:
        sd_notify("STOPPING=1")
        _stop(services, store, server)
    log.info("stopped after %d requests", server.served)
    os.close(active)  # the standby, if any, takes over from here
    return 0


def _reload(action: Callable[[], Any]) -> None:
    try:
        action()
        log.info("SIGHUP: reloaded")
    except Exception:
        log.exception("SIGHUP: reload failed")


def _stop(services: list[Service], store: Store, server: Server | None) -> None:
    for svc in services:
        try:
            svc.shutdown()
        except Exception:
            log.exception("stopping %r failed", svc)
    if server is not None:
        server.close()
    store.close()


if __name__ == "__main__":
    sys.exit(main())
