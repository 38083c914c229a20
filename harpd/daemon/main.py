"""``harpd``: the harp daemon, run in the foreground by systemd.

Start order is chosen so that every admin mistake shows up at start, as one
``harpd: ...`` line, before any user's sbatch depends on the daemon: config
(exit 2), then store and socket (exit 1), then READY=1 to systemd.

Pluggable parts are looked up by name, so the daemon runs (predicting "no
change") before the other pieces exist and picks them up once they do:

* ``harpd.slurm.get_backend(settings) -> SlurmBackend`` (optional): job owners
  are checked with its ``show_job`` and partition limits come from its
  ``partitions()`` (cached a minute);
* ``harpd.predict.live.make_predictor(settings=, store=, backend=) -> Predictor``
  (optional; default ``handlers.NoChangePredictor``);
* ``harpd.ingest.poller.start(settings=, store=, backend=)`` returning an object with
  ``shutdown()`` (optional background polling);
* ``harpd.recovery.resubmit.make(settings=, store=, backend=)``: a listener
  of the poller's outcomes that resubmits jobs which ran out (optional);
* the predictor's ``reload()`` for the admin ``reload`` op and SIGHUP.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from typing import Any

from harp_submit import __version__
from harpd.config import DEFAULT_CONFIG_PATH, ConfigError, HarpSettings, load_settings

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
    from harpd.daemon.handlers import resolve_group

    try:
        resolve_group(settings.server.admin_group)
    except ValueError as exc:
        raise ConfigError(f"invalid setting server.admin_group: {exc}; create the group or fix the name") from None
    sock = str(settings.server.socket)
    if not os.path.isabs(sock):
        raise ConfigError(f"invalid setting server.socket: {sock!r} must be an absolute path")
    if len(os.fsencode(sock)) > 107:
        raise ConfigError(f"invalid setting server.socket: longer than 107 bytes, the Unix socket limit")
    if not os.path.isabs(str(settings.store.path)):
        raise ConfigError(f"invalid setting store.path: {str(settings.store.path)!r} must be an absolute path")


def _plugin(module: str, attr: str) -> Callable[..., Any] | None:
    """``module.attr`` if that module exists; errors inside it are real errors."""
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module == exc.name or module.startswith(exc.name + ".")):
            return None
        raise
    return getattr(mod, attr, None)


def build_handlers(settings: HarpSettings, store: Any) -> tuple[Any, list[Any]]:
    """Handlers wired to whatever parts are installed, plus services to stop later."""
    from harpd.daemon.handlers import Handlers, cached_partitions, limits_from_partitions, owner_from_backend

    backend = None
    make_backend = _plugin("harpd.slurm", "get_backend") or _plugin("harpd.slurm", "make_backend")
    if make_backend is not None:
        try:
            backend = make_backend(settings)
        except Exception as exc:  # Slurm missing is not fatal: predictions still work
            log.warning("no Slurm backend (%s); job owners not verified, no partition limits", exc)
    # one cache of scontrol's partition data for every reader (limits, DNN planning)
    partitions = None if backend is None else cached_partitions(backend)
    limits = None if partitions is None else limits_from_partitions(partitions)
    predictor = None
    make_predictor = _plugin("harpd.predict.live", "make_predictor")
    if make_predictor is not None:
        predictor = make_predictor(settings=settings, store=store, backend=backend, limits=limits)
    if predictor is None:
        from harpd.daemon.handlers import NoChangePredictor

        predictor = NoChangePredictor(limits)
    # DNN jobs (#HARP dnn) get their GPUs from the ZeRO memory model
    from harpd.dnn.predictor import DnnRoutingPredictor

    predictor = DnnRoutingPredictor(predictor, settings, partitions)
    handlers = Handlers(
        store,
        settings,
        predictor,
        job_owner=None if backend is None else owner_from_backend(backend),
        partition_limits=limits,
        retrain=getattr(predictor, "retrain", None),
    )
    log.info("predictor: %s", getattr(handlers.predictor, "name", type(handlers.predictor).__name__))
    services: list[Any] = []
    start_ingest = _plugin("harpd.ingest.poller", "start")
    if start_ingest is not None:
        # recovery listens to outcomes from the first poll on (exactly once, issue 5)
        make_recovery = _plugin("harpd.recovery.resubmit", "make")
        recovery = None if make_recovery is None else make_recovery(settings=settings, store=store, backend=backend)
        extra = {} if recovery is None else {"listeners": [recovery.on_outcome]}
        ingest = start_ingest(settings=settings, store=store, backend=backend, **extra)
        services.append(ingest)
        if recovery is not None and getattr(ingest, "ingestor", None) is not None:
            services.append(recovery.attach(ingest))
        retrain = getattr(predictor, "retrain", None)
        if retrain is not None and getattr(ingest, "scheduler", None) is not None:
            # retrain every retrain.interval_s and after retrain.after_n_outcomes outcomes
            from harpd.predict.training import attach_retrain

            ingest.ingestor.on_outcome.append(attach_retrain(ingest.scheduler, retrain, settings.retrain))
    return handlers, services


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="harpd", description="harp daemon (runs in the foreground)")
    ap.add_argument("--config", help=f"config file (default: $HARP_CONFIG or {DEFAULT_CONFIG_PATH})")
    ap.add_argument("--check-config", action="store_true", help="validate the config and exit (0: valid, 2: invalid)")
    ap.add_argument("--log-level", choices=["debug", "info", "warning", "error"], help="override server.log_level")
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
    from harpd.daemon.server import Server, ServerError
    from harpd.store import Store, StoreError

    try:
        store = Store.open(settings.store.path, busy_timeout_s=settings.store.busy_timeout_s)
    except StoreError as exc:
        print(f"harpd: {exc}", file=sys.stderr)
        return 1
    services: list[Any] = []
    # bind before starting anything else: a second harpd must fail here, before
    # it polls Slurm beside the first one; early clients wait in the backlog
    server = Server(
        settings.server.socket,
        None,
        mode=settings.server.socket_mode,
        request_timeout_s=settings.server.request_timeout_s,
        max_request_bytes=settings.server.max_request_bytes,
        max_clients=settings.server.max_clients,
    )
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
    server.handlers = handlers

    def on_stop(signum: int, frame: object) -> None:
        log.info("%s: shutting down", signal.Signals(signum).name)
        server.shutdown()

    def on_hup(signum: int, frame: object) -> None:
        threading.Thread(target=_reload, args=(handlers,), name="harpd-reload", daemon=True).start()

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    signal.signal(signal.SIGHUP, on_hup)

    log.info("harpd %s ready (store %s, pid %d)", __version__, settings.store.path, os.getpid())
    sd_notify(f"READY=1\nSTATUS=serving on {settings.server.socket}\nMAINPID={os.getpid()}")
    try:
        server.serve_forever()
    finally:
        sd_notify("STOPPING=1")
        _stop(services, store, server)
    log.info("stopped after %d requests", server.served)
    return 0


def _reload(handlers: Any) -> None:
    action = handlers.reload_action or getattr(handlers.predictor, "reload", None)
    if action is None:
        log.info("SIGHUP: nothing to reload")
        return
    try:
        action()
        log.info("SIGHUP: reloaded")
    except Exception:
        log.exception("SIGHUP: reload failed")


def _stop(services: list[Any], store: Any, server: Any) -> None:
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
