"""Ask the running harpd one question: the admin CLI's only way onto the socket.

``harp status``, ``harp report``, ``harp retrain`` and ``harp reload`` all go
through here, so all find harpd the same way (``--config``'s
``server.socket`` and ``client.servers``, else what harp-submit uses:
HARP_SOCKET, HARP_SERVERS, /etc/harp/harpd.toml) and tell
"harpd is not there" (``Unreachable``: the caller may fall back to the store)
from "harpd said no" (``Refused``).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from typing import Any

from harpd.cli.main import CliError, settings_of


class Unreachable(Exception):
    """No answer from harpd; the text is one line naming why.

    ``reachable``: harpd took the request but no whole answer came back (it
    timed out or broke off), so it may still be working on it.
    """

    def __init__(self, reason: str, reachable: bool = False) -> None:
        super().__init__(reason)
        self.reachable = reachable


class Refused(CliError):
    """harpd answered with an error; the text is harpd's own line."""


class NotDone(CliError):
    """An admin operation harpd did not do (not there, refused, or failed): exit 1."""

    exit_code = 1


def route_of(args: argparse.Namespace) -> Any:
    """``--config``'s socket, servers and munge socket; else what harp-submit would use (``harp_submit.route``)."""
    from harp_submit import route

    if getattr(args, "config", None):
        s = settings_of(args)
        return route.Route(
            str(s.server.socket),
            tuple(route.parse_address(a) for a in s.client.servers),
            s.munge.socket,
            (s.client.harpd_uid,),
        )
    return route.choose(os.environ)[0]


def ask(
    args: argparse.Namespace, message: Mapping[str, object], timeout: float, *, max_answer: int | None = None
) -> dict[str, Any]:
    """harpd's ``ok`` answer to ``message``."""
    from harp_submit import client

    try:
        return client.ask(route_of(args), message, timeout, max_answer=max_answer)
    except client.HarpdUnavailable as exc:
        if exc.final:
            raise Refused(exc.reason.partition(" refused: ")[2]) from None
        raise Unreachable(exc.reason, exc.reachable) from None


def add_admin_arguments(p: argparse.ArgumentParser, timeout_s: float, why: str) -> None:
    """``--format`` and ``--timeout``, as every admin-operation subcommand takes them."""
    p.add_argument(
        "--format", choices=("text", "json"), default="text", help="text (default), or json: harpd's answer as it came"
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=timeout_s,
        metavar="S",
        help=f"seconds to wait for harpd (default {timeout_s:g}: {why})",
    )


def ask_admin(args: argparse.Namespace, op: str, timeout: float) -> dict[str, Any]:
    """harpd's answer to the admin operation ``op``; NotDone (one line) when it was not done."""
    if timeout <= 0:
        raise CliError(f"--timeout {timeout:g}: must be a positive number of seconds")
    try:
        return ask(args, {"op": op}, timeout)
    except Refused as exc:  # not an admin, or the operation failed: harpd's words
        raise NotDone(str(exc)) from None
    except Unreachable as exc:
        if exc.reachable:
            raise NotDone(f"{exc}; harpd may still be at its {op}: see its log (journalctl -u harpd)") from None
        raise NotDone(f"{exc}; start harpd (systemctl start harpd), then run harp {op} again") from None
