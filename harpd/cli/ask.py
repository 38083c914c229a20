"""Ask the running harpd one question: the admin CLI's only way onto the socket.

``harp status`` and ``harp report`` both go through here, so both find the
socket the same way (``--config``'s ``server.socket``, else HARP_SOCKET or the
harp-submit default) and tell "harpd is not there" (``Unreachable``: the
caller may fall back to the store) from "harpd said no" (``CliError``).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from harpd.cli.main import CliError, settings_of


class Unreachable(Exception):
    """No answer from harpd; the text is one line naming why."""


def socket_of(args: argparse.Namespace) -> str:
    from harp_submit import client

    if getattr(args, "config", None):
        return str(settings_of(args).server.socket)
    return client.socket_path(os.environ)


def ask(args: argparse.Namespace, message: dict[str, Any], timeout: float, *,
        max_answer: int | None = None) -> dict[str, Any]:
    """harpd's ``ok`` answer to ``message``."""
    from harp_submit import client

    try:
        return client.call(socket_of(args), message, timeout, max_answer=max_answer)
    except client.HarpdUnavailable as exc:
        if exc.reachable and str(exc).startswith("harpd refused: "):
            raise CliError(str(exc)[len("harpd refused: "):]) from None
        raise Unreachable(exc.reason) from None
