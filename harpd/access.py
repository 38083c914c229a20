"""Who is a harp admin: root, or a member of ``server.admin_group``.

One rule for both ways in, so they cannot disagree: harpd applies it to the
peer of a socket connection (identity from SO_PEERCRED) before an admin
operation or an everyone's-jobs report, and ``harp report`` applies it to
its own process before reading the store directly.  Standard library only:
the answers come from the password and group databases, never from a message.
"""

from __future__ import annotations

import grp
import os
import pwd
from collections.abc import Collection


def resolve_group(name: str | None) -> int | None:
    """gid of ``server.admin_group`` (name or number); ValueError if unknown."""
    if name is None or name == "":
        return None
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        if name.isdigit():
            return int(name)
        raise ValueError(f"no such group {name!r}") from None


def user_of(uid: int) -> str | None:
    """The login name of ``uid``; None when the password database has none."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


def groups_of(user: str | None, gid: int) -> frozenset[int]:
    """``gid`` plus every group the group database lists ``user`` in."""
    groups = {gid}
    if user is not None:
        try:
            groups.update(os.getgrouplist(user, gid))
        except OSError:
            pass
    return frozenset(groups)


def is_admin(uid: int, gids: Collection[int], admin_gid: int | None) -> bool:
    """Root, or a member (primary or supplementary) of the admin group."""
    return uid == 0 or (admin_gid is not None and admin_gid in gids)
