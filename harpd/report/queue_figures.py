"""The last queue simulation's figures, saved as a JSON file beside the store.

``harp replay --schedule`` runs on an admin's machine from a trace file and
never opens the store; ``harp report --format html`` reads the store.  The
queue panel of the report needs the replay's figures, so the replay leaves
them in a small JSON file next to the store database (``harp.db`` →
``harp.queue.json``) and the report reads it when present.  A file rather than
a store table: the figures describe a simulation, not jobs, they are replaced
whole by the next run, and neither command then has to know the other's
schema (only this module's two functions).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

SUFFIX = ".queue.json"


def path_beside(store_path: str | os.PathLike[str]) -> Path:
    """Where the queue figures of the store at ``store_path`` live."""
    p = Path(store_path)
    return p.with_name(p.stem + SUFFIX)


def save(path: str | os.PathLike[str], summary: dict[str, Any]) -> None:
    """Write ``summary`` atomically (a reader never sees half a file); OSError if the folder is not writable."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(summary, indent=1, allow_nan=False), encoding="utf-8")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def load(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The saved figures, or None when there are none (or the file is unreadable: the panel is optional)."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("policies"), list) else None
